/*
 * The server's services: each one a table entry with its start phase,
 * its start and stop, its job hooks and its HTTP routes. server.c starts
 * them phase by phase in the order of its table and stops them in the
 * reverse order. The job core's own routes are served as the first
 * entry's (api.c), so a request meets them before any other service's.
 * A service's handlers stay private to its file.
 *
 * Rejected: a start-up sequence written out in kn_server_run with its
 * order kept by comments ("before jobs_recover"), and one route table in
 * api.c naming every service's handlers.
 */
#ifndef KILN_SERVER_SERVICE_H
#define KILN_SERVER_SERVICE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "base/base.h"
#include "server/caller.h"
#include "server/jobhooks.h"
#include "server/server.h"

struct server;
struct kn_http_req;

/*
 * What serves a route: c is the caller, already admitted by the
 * route's least role; param is the path's {id} or {name} segment (NULL
 * when the pattern has none). A handler answers req before it returns
 * or keeps it for a later answer.
 */
typedef void route_handler(struct server *s, struct kn_http_req *req,
			   const struct caller *c, const char *param);

/*
 * A route's {id} segment as an id: a positive decimal that fits in 64
 * bits. True with *id set; false for anything else (each route words
 * its own refusal).
 */
bool route_param_id(const char *param, int64_t *id);
/*
 * route_param_id for a handler: true with *id set, or false once a 400
 * naming the field "id" and what ("job", "workflow run") is answered.
 */
bool route_id_or_reply(struct kn_http_req *req, const char *param,
		       const char *what, int64_t *id);
/* Answer o (taken) with status, or err when o is NULL. */
void route_reply(struct kn_http_req *req, int status, json_t *o,
		 const struct kn_error *err);
/* One row of a store list as JSON, for rows_json. */
typedef json_t *row_json_fn(const void *row);
/* A JSON array of row_json of each of n rows, elements of size bytes. */
json_t *rows_json(const void *rows, size_t n, size_t size,
		  row_json_fn *row_json);

/*
 * One HTTP route: method, path pattern, least role, handler. A table of
 * them ends with an entry of zeros ({0}), as kn_services ends with NULL,
 * so no count of its rows travels beside it.
 */
struct route {
	const char *method;
	const char *pattern; /* "{id}" and "{name}" match one path segment */
	enum kn_role least;  /* the lowest role allowed */
	bool public_route;   /* no token needed */
	const char *action;  /* audit action of a refused write, or NULL */
	route_handler *fn;
};

/* When a service starts, after what the server has set up by then. */
enum service_phase {
	/* The store and the nodes exist; no loop yet (node pools, cost). */
	SERVICE_PHASE_NODES,
	/* The loop, the workers and the event feed exist; jobs are not yet
	   recovered, so whatever a recovered job's end asks of a service
	   (through its hooks) is there. */
	SERVICE_PHASE_LOOP,
	/* The jobs are recovered: a service may act on them. */
	SERVICE_PHASE_RECOVERED,
};

struct service {
	const char *name;
	enum service_phase phase;
	/* Check the service's options with the others, before anything
	   starts; err names the option. NULL: none of its own. */
	int (*config_check)(const struct kn_server_config *cfg,
			    struct kn_error *err);
	/* Returns 0, or a negative errno with err: the server does not
	   start. NULL: nothing to start. */
	int (*start)(struct server *s, struct kn_error *err);
	/* Once every service has started, before the first request (arm
	   timers that may act on any service). NULL: none. */
	void (*run)(struct server *s);
	/* Free the service's state; after the worker pools are gone, so no
	   work of its is in flight. Called even when start was not (the
	   state is then absent). NULL: nothing to free. */
	void (*stop)(struct server *s);
	/* A model's alias moved (a promote or a rollback), or NULL. */
	void (*alias_moved)(struct server *s, const char *model,
			    const char *alias);
	/* Registered with the job core before any phase starts, or NULL. */
	const struct job_hook_ops *hooks;
	/* Ended by {0}; NULL: none. */
	const struct route *routes;
	/* The body cap of one of routes for a caller it admits, when above
	   the server's KN_HTTP_MAX_BODY; 0, or NULL for every route: none. */
	size_t (*body_cap)(const struct route *r);
};

/* The services, in server.c's table order. */
extern const struct service core_api_service, slurm_nodes_service,
	pools_service, cost_service, backup_service, deploy_service,
	models_service, workflows_service, reval_service, metrics_service,
	console_service, devenv_service, sessions_service, portfwd_service;

/* server.c's table: NULL-terminated. */
extern const struct service *const kn_services[];

/* More than the table holds; a fixed bound keeps the slots inline. */
#define SERVICES_MAX 16

/*
 * A service's own state: the server keeps one slot per service and
 * never looks inside, so only the service's files know its type. The
 * service fills its slot in start and frees what it holds in stop; the
 * server empties the slot after stop. Its handlers find it here. NULL
 * before start.
 */
void *service_state(struct server *core, const struct service *v);
void service_state_set(struct server *core, const struct service *v,
		       void *state);

/* Tell every service, in table order, that alias of model moved. */
void services_alias_moved(struct server *s, const char *model,
			  const char *alias);

#endif
