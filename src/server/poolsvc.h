/*
 * The node pool service's own header: its pools and autoscaler (pools.c)
 * and the providers their nodes come from (pool_providers.c). Nothing
 * outside these two files includes it or touches struct pools.
 */
#ifndef KILN_SERVER_POOLSVC_H
#define KILN_SERVER_POOLSVC_H

#include "exec/exec.h"
#include "sched/sched.h"
#include "server/access.h"
#include "server/core.h"
#include "server/costsvc.h"
#include "server/feed.h"
#include "server/peers.h"
#include "server/service.h"
#include "spec/spec.h"
#include "store/store.h"

struct azure_pool;
struct rolling;

/* How often the autoscaler looks. */
#define POOLS_TICK_MS 500

struct pool;

/*
 * A provider: where a pool's nodes come from. scale_up asks for n more
 * nodes (they join through pool_node_add, now or later; the pool counts
 * them as provisioning until then); delete takes one empty node away.
 */
struct pool_provider_ops {
	const char *name;
	int (*scale_up)(struct server *s, struct pool *p, int n,
			struct kn_error *err);
	int (*delete_node)(struct server *s, struct pool *p, const char *node,
			   struct kn_error *err);
};

struct pool {
	struct kn_pool_spec spec;            /* as --pool gave it */
	const struct pool_provider_ops *provider;
	int next_index;      /* the N of the next POOL-N */
	int provisioning;
	char decision[KN_AUTOSCALE_WHY_LEN]; /* the last change and why */
	int64_t decision_at;
	char error[KN_AUTOSCALE_WHY_LEN];    /* the provider's last failure */
	int64_t error_at;
	struct rolling *rolling;             /* maintenance, the last one */
	struct kn_sched_node shape;          /* a new node, for the plan */
	struct kn_device_set shape_devices;
	struct azure_pool *azure;            /* provider=azure's client */
	const char *joining_zone; /* the zone label of a node joining now */
};

/* A command provider's call in flight (its files in dir). */
struct pool_op {
	struct pool *pool;
	bool scale_up;       /* else a delete of node */
	int n;               /* nodes asked for */
	int first;           /* ... named POOL-first, POOL-first+1, ... */
	char node[64];
	char *dir;
	struct pool_op *next;
};

/*
 * A node of a pool: which pool, and since when it has run nothing (0:
 * busy or not ready). Kept by name: the core's node indexes move when a
 * node goes.
 */
struct pool_member {
	char name[64];
	struct pool *pool;
	int64_t idle_since;
};

/* The service's state, in its slot. */
struct pools {
	struct pool *pool;
	size_t n;
	struct pool_member *members;
	size_t n_members;
	struct pool_op *ops;
	int64_t next_op;
	struct kn_timer *timer;
	char blocked[KN_AUTOSCALE_WHY_LEN]; /* work no pool can hold */
};

/* The providers (pool_providers.c). */
extern const struct pool_provider_ops sim_provider, command_provider,
	azure_provider;

/* How long a surge replica may take to serve before the node fails. */
#define SURGE_TIMEOUT_DEFAULT_MS (10 * 60 * 1000)
/* A week: longer is a mistake, not a plan. */
#define SURGE_TIMEOUT_MAX_S (7 * 24 * 3600)

/* pools.c */
/* The service's state (NULL without --pool). */
struct pools *pools_state(struct server *s);
/* The pool member named name, or NULL (not a pool's node). */
struct pool_member *pool_member_of(struct server *s, const char *name);
/* Node name is back in service: idle from now, so a next try to delete
   it waits a whole delay. */
void pool_idle_from_now(struct server *s, const char *name);
/* Parse --pool, create or adopt each pool's nodes. */
int pools_start(struct server *s, struct kn_error *err);
/* Arm the autoscaler's timer once the loop exists. */
void pools_run(struct server *s);
void pools_stop(struct server *s);
/* The pool named name, or NULL. */
struct pool *pools_pool_named(struct server *s, const char *name);
/* A GPU-hour of pool p's nodes in USD, or < 0 when not priced. */
double pools_gpu_price(struct server *s, const struct pool *p);
/*
 * Start rolling maintenance of pool p as c: command on each node in
 * turn, surge_timeout_ms the wait for a surge node. -ECONFLICT while one
 * is running.
 */
int pools_rolling_start(struct server *s, struct pool *p,
			const struct caller *c, const char *command,
			int64_t surge_timeout_ms, struct kn_error *err);
/* A rolling maintenance as the API shows it. */
json_t *pools_rolling_json(const struct rolling *r);
/* The pool node i belongs to, or NULL. */
struct pool *pool_of_node(struct server *s, size_t i);
/*
 * Add node name to pool p in state (a restarted server keeps a cordon);
 * running marks a node made after start-up, whose ledger interval opens
 * here rather than in cost_start.
 */
int pool_node_add(struct server *s, struct pool *p, const char *name,
		  const char *state, const char *reason, bool running,
		  struct kn_error *err);
/* Take node i, an empty one, out of the server and its pool
   (core_node_remove). */
int pool_node_remove(struct server *s, size_t i, struct kn_error *err);

/* pool_providers.c */
/*
 * Run cmd[0] with cmd[1..] in its own session, its stdout, stderr and
 * exit status going to files in dir (out, err, rc); extra ("NAME=value",
 * NULL-ended) is added to the server's environment.
 */
int pool_run_in_background(const char *dir, char *const *cmd,
			   char *const *extra, struct kn_error *err);
/* A background run's status, out and err's first line once rc is there:
   true then (out and errline malloc'd). */
bool pool_background_done(const char *dir, int *status, char **out,
			  char **errline);
/* Free a command provider's call; remove: its files too. */
void pool_op_free(struct pool_op *op, bool remove);
/* Settle the command provider's calls whose status is in; true when
   nodes came up. */
bool pool_ops_poll(struct server *s);
/* Make provider=azure's client, or nothing for another provider. */
int pool_azure_open(struct pool *p, const char *text, struct kn_error *err);
void pool_azure_free(struct azure_pool *a);
/* Start each azure pool's worker, knowing the nodes the pool has now. */
void pool_azure_run(struct server *s);

#endif
