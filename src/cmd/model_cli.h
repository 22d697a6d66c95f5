/*
 * What the files of `kiln model` share (cmd_model.c,
 * cmd_model_revalidate.c).
 */
#ifndef KILN_CMD_MODEL_CLI_H
#define KILN_CMD_MODEL_CLI_H

#include <jansson.h>

#include "cmd/cli.h"
#include "cmd/cli_client.h"

/* "/v1/models/REF" plus suffix, REF escaped; the caller frees it. */
char *model_path(const char *ref, const char *suffix);
/* kiln model revalidate. */
int model_revalidate(struct cli_ctx *ctx, int argc, char **argv);

#endif
