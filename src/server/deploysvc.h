/*
 * The deployments service's own header: its state and the helpers its
 * files share: deploy.c (replicas as jobs, rollouts, start and stop,
 * the deployments' routes), deploy_probes.c, deploy_follow.c (following
 * a registry alias), deploy_json.c (the API's view) and deploy_gateway.c
 * (gateway keys and what the gateway reads). Nothing outside the
 * service includes it.
 */
#ifndef KILN_SERVER_DEPLOYSVC_H
#define KILN_SERVER_DEPLOYSVC_H

#include "exec/exec.h"
#include "server/access.h"
#include "server/core.h"
#include "server/feed.h"
#include "server/idempotency.h"
#include "server/peers.h"
#include "server/server_alert.h"
#include "server/service.h"
#include "spec/spec.h"
#include "store/store.h"
#include "traffic/traffic.h"

/* The longest a probe waits for its answer, whatever its period. */
#define PROBE_TIMEOUT_MAX_MS 5000
/* Reconcile (missing replicas, rollouts) at least this often. */
#define RECONCILE_MS 1000
/* The tick's shortest sleep: probes are due at most this precisely. */
#define TICK_MIN_MS 20

struct replica {
	int64_t job_id;  /* 0 = none yet */
	int attempt;     /* the attempt the probe state is about */
	bool ready;
	bool was_ready;  /* this attempt has passed readiness once */
	int ready_failures, live_failures;
	int64_t next_ready_at, next_live_at;
	bool ready_in_flight, live_in_flight;
	bool replacing;  /* a rollout's new job: wait for it to be ready */
	char *model_dir; /* KILN_MODEL_DIR its job was given; NULL = not
			    known (a rollout a server restart interrupted) */
	/* A surge slot (index >= replicas, not kept across a restart: its
	   row is trimmed then): a new job that takes replica surge_for's
	   place once it is ready and the gateway has seen it. */
	bool surge;
	int surge_for;
	/* Ready: the handover is under way (the old replica is listed not
	   ready to the gateway), since the gateway's fetch number mark. */
	bool surge_ready;
	int64_t surge_mark;
};

struct deployment {
	/* As stored: name, owner, the spec's text and JSON, the replicas
	   wanted, the generation, the next replica a rollout restarts. */
	struct kn_deployment_row row;
	struct kn_deployment_spec *spec;
	bool model_refused; /* deployment_model_refused is firing */
	struct replica *reps;
	int n_reps; /* slots: at least replicas, more while scaling down */
	struct deployment *next;
};

enum probe_kind { PROBE_READY, PROBE_LIVE };

/* A probe in flight; its answer finds the replica again by name. */
struct probe {
	struct deploy_state *d;
	char deployment[64];
	int replica;
	int64_t job_id;
	int attempt;
	enum probe_kind kind;
	struct probe *next;
};

struct deploy_state {
	struct server *s;
	struct kn_model_presets *presets;
	struct deployment *list;
	struct kn_timer *timer;
	struct probe *probes;
	char config_hash[65];
	int64_t config_generation;
	int64_t config_fetched_at; /* a gateway's last GET of the config */
	int64_t config_fetches;    /* how many there were */
	struct kn_traffic *traffic; /* what the gateways report */
};

/* deploy.c */
/* The service's state (NULL before deploy_start). */
struct deploy_state *deploy_state_of(struct server *s);
void deploy_reply_msg(struct kn_http_req *req, enum kn_errcode code,
		      const char *field, const char *msg);
struct deployment *deploy_find(struct deploy_state *d, const char *name);
bool deploy_replica_ready(const struct replica *r, const struct job_view *v);
const char *deploy_node_zone(struct server *s, const struct job_view *v);
bool deploy_retiring(const struct deployment *p, int i);

/* deploy_gateway.c: the routes of keys and of the gateway's view */
route_handler deploy_h_key_create, deploy_h_key_list, deploy_h_key_revoke,
	deploy_h_gateway_config, deploy_h_gateway_alert,
	deploy_h_gateway_metrics;

/* deploy.c */
void deploy_arm(struct deploy_state *d, int64_t ms);
void deploy_reconcile(struct deploy_state *d, struct deployment *p);
int deploy_save(struct deploy_state *d, struct deployment *p, const struct kn_audit *a, struct kn_error *err);
/* The executor's own deployments (exec.h), or NULL: each replica is a
   job of the server's. */
const struct kn_deploy_ops *deploy_engine(struct server *s);
/* The replicas of an engine's deployment, from its status st. */
json_t *deploy_engine_replicas_json(json_t *st);

/* deploy_model.c */
bool deploy_registry_model(const struct kn_deployment_spec *spec);
/* KILN_MODEL_DIR for spec (path: the spec file's, for relative ones). */
int deploy_resolve_model_dir(struct server *s,
			     const struct kn_deployment_spec *spec,
			     const char *path, char **out,
			     struct kn_error *err);

/* deploy_probes.c */
void deploy_tick(void *arg);

/* deploy_follow.c */
void deploy_follow(struct server *s, struct deployment *p);
int64_t deploy_dir_version(const struct deployment *p, const char *dir);
void deploy_alias_moved(struct server *s, const char *model, const char *alias);
int64_t deploy_followed_version(struct server *s, const struct deployment *p);
const char *deploy_followed_alias(const struct deployment *p, struct kn_model_ref *ref);

/* deploy_json.c */
json_t *deploy_deployment_json(struct server *s, const struct deployment *p);
/* {"deployment": ...}: the answer to a create or a read. */
json_t *deploy_answer(struct server *s, const struct deployment *p);
void deploy_reply_deployment(struct server *s, struct kn_http_req *req, const struct deployment *p, int status);

#endif
