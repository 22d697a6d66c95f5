/*
 * The cost ledger service (cost.c): what other services ask of it. Its
 * state is its own; nothing else knows its type.
 */
#ifndef KILN_SERVER_COSTSVC_H
#define KILN_SERVER_COSTSVC_H

#include <stdint.h>

#include <jansson.h>

#include "base/base.h"

struct server;
struct kn_catalog;

/*
 * Each job's row of the by-job ledger from since_ms to now, as GET
 * /v1/cost?by=job gives it (cost_usd counts lost work too), keyed by the
 * job id as text; jobs without GPU time have none. For a workflow run's
 * steps (workflows.c).
 */
int cost_by_job(struct server *core, int64_t since_ms, json_t **out,
		struct kn_error *err);
/* The VM sizes and their prices, or NULL before the service starts. */
const struct kn_catalog *cost_catalog(struct server *core);

#endif
