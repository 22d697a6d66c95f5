/*
 * The dev environment service (devenv.c, docs/devenv.md): what other
 * parts of the server tell it. Its state is its own.
 */
#ifndef KILN_SERVER_DEVENVSVC_H
#define KILN_SERVER_DEVENVSVC_H

#include <stdbool.h>
#include <stdint.h>

#include <jansson.h>

#include "base/base.h"

struct server;

/*
 * A usage sample of a task's GPUs (usage_sampling.c): util_milli is the
 * share of one GPU's time it kept busy, in thousandths, at at_ms. Only
 * dev environments' samples are kept.
 */
void devenv_gpu_sample(struct server *core, int64_t job_id, int attempt,
		       int util_milli, int64_t at_ms);
/*
 * A session (a port-forward, an attached terminal) opened (delta 1) or
 * closed (-1) on job_id: a dev environment with one is never idle.
 */
void devenv_session(struct server *core, int64_t job_id, int delta);

/*
 * The dev environments of GET /v1/cost for [since, until): {rows,
 * total}, each run's hours, idle hours and what an idle stop saved,
 * priced from by_job (the window's by-job ledger rows, keyed by job id).
 * New reference, or NULL with err.
 */
json_t *devenv_cost_json(struct server *core, int64_t since, int64_t until,
			 const json_t *by_job, struct kn_error *err);

#endif
