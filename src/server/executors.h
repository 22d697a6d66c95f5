/*
 * The executor table (executors.c): the engine --executor names, checked
 * with the other options and made once at start-up. Not a public header.
 */
#ifndef KILN_SERVER_EXECUTORS_H
#define KILN_SERVER_EXECUTORS_H

#include <stdbool.h>

#include "base/base.h"
#include "server/server.h"

struct server;
struct kn_job_spec;

/* Check --executor, and that no other executor's options were given;
   err names the option. */
int executors_config_check(const struct kn_server_config *cfg,
			   struct kn_error *err);
/* Whether the executor --executor names runs tasks as processes of this
   machine, on the nodes the server describes (--sim-node, --pool). */
bool executor_runs_here(const struct kn_server_config *cfg);
/* s->exec: the instance of the executor --executor names, once its own
   options pass its check (Slurm's partition map). */
int executors_create(struct server *s, struct kn_error *err);
/*
 * Whether a pod's shim can fetch spec's inputs (resolved to URLs): few
 * enough to report back, and none a file only the server sees. 0 where
 * the server's side fetches them.
 */
int executor_check_inputs(const struct server *s,
			  const struct kn_job_spec *spec, const char *filename,
			  struct kn_error *err);

#endif
