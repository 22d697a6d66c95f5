/*
 * What the files of `kiln model` share (cmd_model.c,
 * cmd_model_revalidate.c, model_print.c).
 */
#ifndef KILN_CMD_MODEL_CLI_H
#define KILN_CMD_MODEL_CLI_H

#include <jansson.h>

#include "cmd/cli.h"
#include "cmd/cli_client.h"

/* "/v1/models/REF" plus suffix, REF escaped; the caller frees it. */
char *model_path(const char *ref, const char *suffix);
/* model_print.c: every move of every alias (`kiln model aliases`). */
void model_print_history(json_t *model);
/* `kiln model show NAME`: its versions, aliases and their moves. */
void model_print(json_t *m);
/* `kiln model show NAME@V`: the version, its signatures, files and
   re-validation runs. */
void model_print_version(json_t *v);
/* kiln model revalidate. */
int model_revalidate(struct cli_ctx *ctx, int argc, char **argv);

#endif
