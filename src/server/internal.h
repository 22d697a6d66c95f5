/*
 * Shared between the server's files; not a public header.
 *
 * In memory the server keeps only what it needs to act quickly: the queue
 * (queued jobs with their parsed specs), the running attempts with their
 * tasks and device bindings, and the nodes. SQLite stays the truth:
 * at start-up both are rebuilt from it (and from the task directories).
 */
#ifndef KILN_SERVER_INTERNAL_H
#define KILN_SERVER_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>

#include <jansson.h>

#include "base/base.h"
#include "cgroup/cgroup.h"
#include "console/console.h"
#include "exec/exec.h"
#include "loop/loop.h"
#include "registry/registry.h"
#include "sandbox/sandbox.h"
#include "sched/sched.h"
#include "server/caller.h"
#include "server/jobhooks.h"
#include "server/server.h"
#include "server/service.h"
#include "spec/spec.h"
#include "store/store.h"

struct queued_job {
	int64_t id;
	int priority;
	int64_t submitted_at;
	int64_t not_before;
	struct kn_job_spec *spec;
	char *owner;      /* the submitting token's name, or NULL: unknown */
	char reason[256]; /* why it waits; memory only, recomputed each tick */
	bool preempting;  /* lower-priority jobs are being evicted for it */
	bool disk_wait;   /* back because a full disk refused its start */
	struct queued_job *next;
};

struct run_task {
	int rank;
	char *task_dir;
	struct kn_task_proc proc;
	bool launched;        /* handed to the executor (or adopted) */
	bool ended;           /* its exit is known */
	bool recorded;        /* ... and committed to the store */
	struct kn_task_status status;
};

/* A running attempt. */
struct run {
	int64_t job_id;
	int attempt;
	int64_t submitted_at;
	int64_t started_at;
	struct kn_job_spec *spec;
	char *owner;                   /* the job's owner, or NULL: unknown */
	struct kn_sched_request req;   /* arrays owned by the run */
	struct kn_sched_binding *bindings; /* one per task */
	int n_tasks;
	struct run_task *tasks;
	int master_port;       /* rank 0's rendezvous port, same for all */
	bool stopping;         /* stop sent to every task */
	bool evicting;         /* the stop is an eviction: requeue after */
	int stop_signal;       /* 0 = SIGTERM */
	int64_t stop_grace_ms; /* -1 = the server's kill grace */
	char stop_reason[128]; /* why: cancel, a failed gang member, a crash */
	bool launch_no_space;  /* a task could not start for a full disk:
				  the job goes back to the queue, not failed */
	int64_t requeue_at;    /* set by finish_run when the job goes back */
	char *checkpoint_dir;  /* KILN_CHECKPOINT_DIR of every task */
	char *output_dir;      /* KILN_OUTPUT_DIR of every task */
	char resume_from[512]; /* KILN_RESUME_FROM, or "" */
	char checkpoint[128];  /* the newest checkpoint synced, or "" */
	int64_t checkpoint_at; /* when it was committed by the task */
	int64_t restore_ms;    /* time spent restoring before the start */
	char restored[128];    /* the checkpoint it resumed from, or "" */

	/* Checkpoint sync (core_sync.c). */
	struct server *server;
	struct kn_ckpt_watch *watch;
	struct kn_fd_watch *watch_fd;
	struct kn_ckpt_sent *sent; /* files sent before their commit */
	struct kn_blob_store *sync_store; /* kept open between uploads */
	bool early_paused;        /* a file sent ahead failed: until an upload
				     succeeds, files wait for their commit */
	char sync_pending[128];   /* committed, not yet uploaded */
	int64_t sync_pending_at;
	bool sync_busy;           /* an upload (early too) or outputs upload runs */
	bool sync_waiting;        /* every task ended: finish when synced */
	bool outputs_done;
	/* A full disk refused what this attempt's end needs (the store's
	   commit, the outputs' upload): why, the job's reason while it stays
	   running, and when to try again (kn_mono_ms); "" and 0 else. */
	char disk_wait[160];
	int64_t disk_retry_at;
	char end_state[16];    /* the job's state once this attempt ended */
	char end_reason[256];  /* ... and why, for the event stream */
	bool inputs_recorded;  /* rank 0's inputs.json was read (core_launch.c) */
	/* Tasks start in batches, one per loop turn (core_launch.c): the
	   next rank to start, and the timer of the next batch. */
	int launch_next;
	struct kn_timer *launch_timer;
	struct run *next;
};

struct log_follower;
struct kn_events;
struct feed;
struct monitor;
struct node_health;
struct deploy_state;
struct kn_catalog;
struct model_state;
struct wf_state;

/* One node's own state, beside its scheduler view. */
struct server_node {
	char name[64];
	char state[16];   /* ready, cordoned, draining, unhealthy */
	char reason[192]; /* why it is not ready, or "" */
	struct kn_device_set devices;
	char *labels_text; /* the labels' text, split in place */
	struct kn_sched_label *labels; /* into labels_text */
	/* Node pools (pools.c): the pool's index + 1 (0: no pool), and
	   since when the node has run nothing (0: busy). */
	size_t pool;
	int64_t idle_since;
};

struct server {
	struct kn_server_config cfg;
	char *home;
	struct kn_loop *loop;
	struct kn_store *store;
	struct kn_http_server *http;
	struct kn_tls *tls;             /* the API's certificate, or NULL */
	struct kn_tls_watch *tls_watch; /* reloads it */
	char *tls_cert_path, *tls_key_path; /* --tls-self-signed's files */
	struct kn_executor *exec;
	/* What the services that own jobs tell the job core (jobhooks.h). */
	struct job_hooks *hooks;
	struct kn_timer *tick_timer;
	struct kn_timer *poll_timer;

	/*
	 * The nodes this server runs: the local one, or the --sim-node list,
	 * all executing on this machine. nodes[i] is cluster.nodes[i] as the
	 * scheduler sees it; a binding's node indexes both.
	 */
	struct server_node *nodes;
	struct kn_sched_cluster cluster;
	struct kn_mig_table *mig; /* loaded when a device is in MIG mode */
	/* --policy, and the GPU shapes of past jobs it packs against
	   (workload.c). */
	const struct kn_pack_policy *policy;
	struct kn_sched_shape *workload;
	size_t n_workload, cap_workload;

	struct queued_job *queue;
	size_t queue_len;
	struct run *runs;
	/* Fair share (core_queue.c): each owner's decayed usage, charged up
	   to usage_at (0: not yet) whenever the set of runs changes. */
	struct owner_usage *owner_usage;
	size_t n_owner_usage;
	int64_t usage_at;
	struct log_follower *followers;
	struct kn_events *events; /* Azure scheduled events, or NULL */
	struct kn_workers *workers; /* slow work: checkpoint sync */
	/* Slow work an API request waits for (an upload's store copy, model
	   checks and copies, audit verify): apart from checkpoint sync and
	   health checks, so neither holds up the other. */
	struct kn_workers *request_workers;
	char *blob_url;             /* the default checkpoint store */
	struct kn_stores *stores;   /* every store jobs may use (blobstores.c) */
	struct feed *feed;          /* the event stream (feed.c) */
	struct monitor *monitor;    /* scrapes and alert rules, or NULL */
	struct node_health *health; /* periodic health checks, or NULL */
	struct deploy_state *deploy; /* deployments and their replicas */
	struct model_state *models;  /* the model registry (models.c) */
	struct wf_state *workflows; /* workflow runs (workflows.c) */
	bool closing;               /* shutting down: late work is dropped */

	struct server_metrics *metrics; /* GET /metrics's counts (metrics.c) */
	struct reval_state *reval;   /* model re-validation (revalidate.c) */

	/* The audit chain (audit.c). */
	unsigned char audit_key[KN_AUDIT_KEY_LEN];
	bool audit_anchor_frozen;   /* the log lost rows: keep audit.head */
	struct pools *pools;        /* node pools and autoscaling (pools.c) */
	struct usage_state *usage;  /* per-task usage sampling (usage_sampling.c) */
	struct kn_console_grants *console; /* console logins (console.c) */
	/* Task isolation (isolation.c): what nodes report, whether tasks
	   may start, and the --task-user-map. */
	char isolation[192];
	bool isolation_ok;
	struct kn_user_map *user_map;
	/* Each service's own state (service.h), in kn_services' order. */
	void *service_states[SERVICES_MAX];
	/* As root, local tasks' users, looked up once for all their shims
	   (NULL otherwise), and the one handed to the launch being made. */
	struct kn_user_cache *user_cache;
	struct kn_sandbox_user task_user;
	/* Unprivileged, the user the server, its shims and tasks share:
	   its name and home, looked up once (NULL otherwise). */
	char *own_user, *own_home;
	struct kn_cgroup_support limits; /* what local tasks get (task_limits.c) */
	/* What a local task whose spec names no CPUs or memory counts
	   (--default-task-cpus, --default-task-memory). */
	struct kn_sched_defaults defaults;
	int64_t idem_swept_at; /* when expired idempotency keys went (idempotency.c) */
	/* A keyed create's transaction is open: the jobs it submits wait
	   in idem_queued and join the queue only once it commits. */
	bool idem_open;
	struct queued_job *idem_queued;
	/* Group commit of plain submits (submit_group.c): the answers and
	   jobs waiting for the group's commit, the jobs there when the
	   running member joined (its rollback frees those after), and the
	   timer that commits on the loop's next turn. */
	struct submit_answer *group_answers, **group_tail;
	struct queued_job *group_queued, *group_mark;
	bool group_member;
	struct kn_timer *group_timer;
};

/* idempotency.c: creates that a retry with the same Idempotency-Key repeats */

/*
 * A create request whose key was seen: 1 when req was answered (the
 * first answer again, 409 for another request under the key, 400 for a
 * malformed key, or a store error), else 0. For a create that first
 * waits on a worker: a cheap early answer, before idem_begin.
 */
int idem_replayed(struct server *s, struct kn_http_req *req,
		  const struct caller *c);
/*
 * Right before the create writes anything: idem_replayed, and for a
 * request with a key a store transaction the create's writes join. 0:
 * create, then end with idem_reply or (on failure) idem_abort; 1: req
 * was answered.
 */
int idem_begin(struct server *s, struct kn_http_req *req,
	       const struct caller *c);
/* The create failed: undo what the key's transaction holds. */
void idem_abort(struct server *s, struct kn_http_req *req);
/*
 * The create succeeded: record answer under the request's key and
 * commit, then send it (a failed commit answers its error instead).
 * Steals answer.
 */
void idem_reply(struct server *s, struct kn_http_req *req,
		const struct caller *c, int status, json_t *answer);

/* Whether req carries an Idempotency-Key (its create commits alone). */
bool idem_keyed(const struct kn_http_req *req);

/*
 * submit_group.c: plain job submits (no Idempotency-Key) share one store
 * commit, and are answered only after it. submit_group_join before the
 * submit writes (0, or an error in err); then submit_group_leave with
 * the answer (stolen) to send once committed, or with NULL when the
 * submit failed and is answered now: what it wrote is undone. The jobs a
 * member submits wait in group_queued until the commit. The commit runs
 * on the loop's next turn, or earlier when another write comes first;
 * submit_group_flush runs it now (the server's stop).
 */
int submit_group_join(struct server *s, struct kn_error *err);
void submit_group_leave(struct server *s, struct kn_http_req *req,
			json_t *answer);
void submit_group_flush(struct server *s);

/* isolation.c */

/* Probe the sandbox, load the user map; an unusable one fails start-up. */
int isolation_start(struct server *s, struct kn_error *err);
void isolation_stop(struct server *s);
/*
 * Fill l's sandbox fields for a task of job_id (user, len bytes, holds
 * the run_as text l points to), or refuse it: -EIO and err when tasks
 * run only isolated and this machine cannot isolate them.
 */
int isolation_launch(struct server *s, int64_t job_id,
		     struct kn_task_launch *l, char *user, size_t len,
		     struct kn_error *err);
/*
 * The device nodes binding b's task may open (its GPUs', the control
 * nodes, a MIG instance's own capability nodes) into *out, freed with
 * kn_device_nodes_free; a MIG instance whose nodes cannot be known fails
 * with err, and its task must not start.
 */
int isolation_task_devices(struct server *s,
			   const struct kn_sched_binding *b, char ***out,
			   struct kn_error *err);

/* auth.c */
const char *role_name(enum kn_role r);
int role_parse(const char *s, enum kn_role *out);
/* A new secret "kiln_<43 base64url chars>" and its hex sha256. */
void token_generate(char secret[64], char hash[65]);
/* A new secret prefix + 43 base64url chars (prefix at most 8) and its
   hex sha256. */
void secret_generate(const char *prefix, char secret[64], char hash[65]);
void token_hash(const char *secret, char hash[65]);
/* A token's or gateway key's name: 1..64 of A-Z a-z 0-9 - _ . @. */
bool credential_name_ok(const char *name);
/* Whether name is one the audit log uses for the server itself
   ("system", in any case), which no token may take. */
bool credential_name_reserved(const char *name);
/* A new gateway key "kgw_<43 base64url chars>" and its hex sha256. */
void key_generate(char secret[64], char hash[65]);
/* Create the admin token on the first start; writes admin.token 0600. */
int auth_bootstrap(struct server *s, struct kn_error *err);
/* The token whose hash is hash: 0 and *out, or a negative errno + err. */
int auth_check_hash(struct server *s, const char *hash, struct caller *out,
		    struct kn_error *err);
/* The hash of the token an Authorization header shows (through the
   console session it names, when it names one): 0, or -EACCES + err. */
int auth_bearer_hash(struct server *s, const char *header, char hash[65],
		     struct kn_error *err);
/* From the Authorization header: 0 and *out, or a negative errno + err. */
int auth_check(struct server *s, const char *header, struct caller *out,
	       struct kn_error *err);

/* console.c */
/* GET / and /ui/NAME: the console's page and assets, answered; false
   when req is for neither. */
bool console_serve(struct server *s, struct kn_http_req *req);
/* The API token's hash a console session's secret stands for: 0 with
   hash, or -ENOENT (unknown, expired or logged out). */
int console_session_token(struct server *s, const char *secret,
			  char hash[65]);

/* api_tls.c */
/* Load the API's certificate when TLS is asked for, and watch it. */
int api_tls_start(struct server *s, struct kn_error *err);
void api_tls_stop(struct server *s);
/*
 * The caller a verified client certificate's common name stands for:
 * 0 and *out (the name, the role --tls-client-role gives it), or -EACCES
 * and err (401) when no line names it.
 */
int api_tls_caller(struct server *s, const char *name, struct caller *out,
		   struct kn_error *err);

/* api.c */
void api_handle(struct kn_http_req *req, void *arg);
/* A request whose body is still coming: read it only for a caller the
   route would serve (kn_http_admit). */
bool api_admit(struct kn_http_req *req, void *arg);
/* Under the caller's cap on open streams (event and log follows), or
   answered 429. */
bool api_follow_admitted(struct server *s, struct kn_http_req *req);
json_t *job_to_json(struct server *s, const struct kn_job_row *j);

/* ---- arrays.c: job arrays in the API ---- */
/* An element's {id, index, first, count, parallel}. */
json_t *array_summary_json(const struct kn_job_row *j);
/*
 * rows (by id) as the listing shows them: with elements false, each
 * array one row, its id the array's, its state the busiest of its
 * elements' and array.counts the elements' states.
 */
json_t *jobs_list_json(struct server *s, const struct kn_job_row *rows,
		       size_t n, bool elements);
/* Add counts and elements (index, id, state, attempts, exit_code,
   reason) of j's array to array. */
int array_elements_json(struct server *s, const struct kn_job_row *j,
			json_t *array, struct kn_error *err);
/* The job id of element index of array id; -ENOENT (KN_ENOTFOUND). */
int jobs_array_element(struct server *s, int64_t id, int64_t index,
		       int64_t *out, struct kn_error *err);
typedef int (*array_verb_fn)(struct server *s, int64_t id, void *arg,
			     struct kn_error *err);
/*
 * verb on job id, or when id names an array, on each of its elements
 * still queued or running (an element that ends meanwhile is skipped);
 * the first refusal stops it and is returned.
 */
int jobs_array_each(struct server *s, int64_t id, array_verb_fn verb,
		    void *arg, struct kn_error *err);

/* task_limits.c */
/*
 * Which limits local tasks will get: probes the cgroup place once. Fails
 * when none can be enforced, unless --no-limits allows running without.
 */
int limits_start(struct server *s, struct kn_error *err);
/* The limits for a task of spec, in out; NULL when none are enforced. */
const struct kn_task_limits *limits_for(const struct server *s,
					const struct kn_job_spec *spec,
					struct kn_task_limits *out);
/* What GET /v1/nodes says each node enforces. */
json_t *limits_json(const struct server *s);

/* user_caps.c: per-owner caps (kiln server --max-*-per-user) */
enum cap {
	CAP_JOB,         /* queued jobs, and tasks queued or running */
	CAP_DEPLOYMENT,  /* deployments owned */
	CAP_GATEWAY_KEY, /* active gateway keys created */
};
/*
 * Whether c may add one more of what (a job of tasks tasks; tasks is
 * ignored otherwise): 0, or -EDQUOT (KN_ELIMIT: 429) with a message
 * naming the cap and the flag that sets it; -EIO when the store cannot
 * count.
 */
int caps_check(struct server *s, const struct caller *c, enum cap what,
	       int tasks, struct kn_error *err);
/* The same for jobs jobs at once (an array's elements), each of
   tasks_each tasks. */
int caps_check_jobs(struct server *s, const struct caller *c, int jobs,
		    int tasks_each, struct kn_error *err);
/* deploy.c: how many deployments owner owns. */
int64_t deploy_count_owned(struct server *s, const char *owner);

/* workload.c: the jobs' GPU shapes, for packing and fragmentation. */
int workload_load(struct server *s, struct kn_error *err);
void workload_add(struct server *s, const struct kn_job_spec *spec);
void workload_release(struct server *s);

/* The job core (core.h) */
#include "server/core.h"

/* usage_sampling.c: per-task usage sampling into the store's task_usage. */
struct usage_state;
int usage_start(struct server *s, struct kn_error *err);
void usage_free(struct server *s);
/* The simulated GPU usage file's name in a task directory. */
const char *usage_sim_file(void);

/* nodes.c */
/* The index of the node called name, or -1. */
int nodes_find(const struct server *s, const char *name);
/*
 * Set a node's state: "ready" (uncordon), "cordoned" (no new work) or
 * "draining" (no new work, its preemptible jobs evicted). c may be NULL
 * for the system. Persists the state and audits the change.
 */
int nodes_set_state(struct server *s, const struct caller *c,
		    const char *name, const char *state, const char *reason,
		    struct kn_error *err);
/* Write node i's row (state, devices) to the store. */
int nodes_save(struct server *s, size_t i, struct kn_error *err);
/* Evict the preemptible jobs with a task running on node i. */
void nodes_evict_preemptible(struct server *s, size_t i, const char *why);
/*
 * Node i's fragmentation as FGD measures it (docs/scheduling.md):
 * {milli, percent, workload_jobs, typical_shapes}, the expected idle GPU a
 * job shaped like this server's GPU jobs could not use; JSON null before
 * any GPU job or without GPUs outside MIG mode.
 */
json_t *nodes_fragmentation(struct server *s, size_t i);

/*
 * metrics.c: what GET /metrics counts as it happens (nothing before the
 * service starts). Placement decisions and their time; a job placed
 * after waiting waited_ms since submission; a checkpoint upload's
 * outcome, with the checkpoint's bytes and how long it took.
 */
void metrics_placement_decided(struct server *s, double seconds, bool placed);
/* A monotonic clock in seconds, to time what the above are told. */
double metrics_clock(void);
void metrics_job_placed(struct server *s, int priority, int64_t waited_ms);
void metrics_checkpoint_synced(struct server *s, bool ok, int64_t bytes,
			       int64_t took_ms);

/* scheduled_events.c */
int events_start(struct server *s, const char *url, const char *vm_name,
		 struct kn_events **out, struct kn_error *err);
void events_free(struct kn_events *ev);

#include "server/blobstores.h"

/* feed.c: recent server events, streamed to GET /v1/events followers */
struct feed *feed_new(struct server *s);
/* End every follower's stream and free the ring. */
void feed_free(struct feed *f);
/* Publish one event (steals doc); adds "seq", "time_ms" and "type". */
void feed_publish(struct server *s, const char *type, json_t *doc);
void feed_job(struct server *s, int64_t job_id, const char *state,
	      const char *reason);
/*
 * A file a task wrote was refused (a link, a FIFO, a device): a warning
 * and a "task.file_refused" event, once per path.
 */
void server_task_file_refused(struct server *s, int64_t job_id,
			      const char *path, const struct kn_error *why);
/* GET /v1/events[?follow=1][&since=SEQ]: JSON lines. */
void feed_serve(struct server *s, struct kn_http_req *req, int64_t since,
		bool follow);

/* monitor.c: scrapes, history, alert rules, webhook */
int monitor_start(struct server *s, struct monitor **out,
		  struct kn_error *err);
void monitor_free(struct monitor *m);

#include "server/server_alert.h"

/* deploy.c: deployments, probes, rollouts, gateway keys and config */
struct deployment;
/*
 * deploy.c: replace the replica whose job is job_id without a gap
 * (rolling maintenance): a surge replica, a new job of its deployment, is
 * submitted now and placed as any job is (the caller cordons the node
 * first). Once it passes readiness and a gateway has fetched a config
 * listing it (or none polls), job_id is cancelled and the new job takes
 * its replica's place: the replica count is the spec's again. One surge
 * per replica: asking again gives the one on its way. Returns 0 with
 * *surge_job set, or -ENOENT (not a replica) or jobs_submit's error.
 */
int deploy_surge(struct server *s, int64_t job_id, int64_t *surge_job,
		 struct kn_error *err);
/*
 * Where surge replica surge_job stands: 1 once it has taken its
 * replica's place (or became one by a scale-up), 0 while it waits, -1
 * when it is gone (its deployment deleted or scaled down, its job
 * cancelled). why (len bytes) says on what it waits, or why it is gone.
 */
int deploy_surge_state(struct server *s, int64_t surge_job, char *why,
		       size_t len);
/* Give a waiting surge up: its job is cancelled, the old replica stays. */
void deploy_surge_cancel(struct server *s, int64_t surge_job);
/*
 * Create or update a deployment from spec text, as POST /v1/deployments
 * does (file names it in errors; path, absolute, is where it was read):
 * a changed spec rolls out one replica at a time. *out is the deployment.
 */
/* Called on the loop when deploy_apply_start's apply ends (as rc, err). */
typedef void (*deploy_applied_cb)(struct server *s, int rc,
				  const struct kn_error *err, void *arg);
/*
 * deploy_apply with a registry model's check and copy on a worker:
 * returns 1 when cb will be called once, later; 0 when applied now (a
 * model that is not a registry version) and < 0 with err when refused
 * now, cb never called then.
 */
int deploy_apply_start(struct server *s, const struct caller *c,
		       const char *body, size_t len, const char *file,
		       const char *path, deploy_applied_cb cb, void *arg,
		       struct kn_error *err);
int deploy_apply(struct server *s, const struct caller *c, const char *body,
		 size_t len, const char *file, const char *path,
		 const struct deployment **out, struct kn_error *err);

/* models.c: the model registry's API (docs/registry.md) */
/*
 * A new version of name from a succeeded job's outputs (their blobs put
 * in the registry create-only, digests checked), its manifest's lineage
 * the job's and its metrics the job's metrics.json; alias (may be NULL)
 * moves to it. *reply is the version as POST .../versions answers it.
 * Audits only success: callers audit their failures.
 */
int models_from_job(struct server *s, const struct caller *c,
		    const char *name, int64_t job_id, const char *alias,
		    json_t **reply, struct kn_error *err);
/* Point alias of name at version (as a promote, by c) unless it does. */
int models_alias_point(struct server *s, const struct caller *c,
		       const char *name, const char *alias, int64_t version,
		       struct kn_error *err);
/* Whether the server's trusted keys hold key_id. */
bool models_key_trusted(struct server *s, const char *key_id);
/*
 * The one check before the server signs anything: signer is a signer of
 * the server's config and c may sign with it (its role or token name is
 * granted). 0 with *out the signer, or -EPERM with err naming the signer;
 * a refusal is audited as model.sign_refused on object.
 */
int models_signer_check(struct server *s, const struct caller *c,
			const char *signer, const char *object,
			const struct kn_signer_conf **out, struct kn_error *err);
/*
 * Sign name@version's canonical manifest with signer's key, for c (after
 * models_signer_check; the key file is checked again), kept as a posted
 * signature is: only when it verifies. Audited as model.sign (ok or
 * error). key_id gets the key's id, trusted whether the server's trusted
 * keys hold it.
 */
int models_sign(struct server *s, const struct caller *c, const char *name,
		int64_t version, const char *signer,
		char key_id[KN_SHA256_HEX + 1], bool *trusted,
		struct kn_error *err);
/*
 * A deployment's `model: NAME@VERSION|NAME@ALIAS`: refuse (naming the
 * problem) a version that is unsigned, signed by no trusted key or whose
 * files do not match their digests; else *out (malloc'd) is the directory
 * holding its files, $KILN_HOME/registry/models/NAME/VERSION, copied from
 * the store once and hashed again on each later use.
 */
int models_deploy_dir(struct server *s, const char *text, char **out,
		      struct kn_error *err);
/*
 * Called on the loop when models_deploy_dir_start's check ends: rc 0 and
 * dir the copy of version (valid for the call only), or rc < 0 and err
 * (KN_EUNAVAIL when the server stopped first).
 */
typedef void (*models_dir_cb)(struct server *s, int rc, const char *dir,
			      int64_t version, const struct kn_error *err,
			      void *arg);
/*
 * models_deploy_dir with its file work (hashing or copying every file) on
 * a worker: what the database decides (the version, its signatures) is
 * checked now, and a refusal there is returned with cb never called;
 * otherwise cb is called once, later.
 */
int models_deploy_dir_start(struct server *s, const char *text,
			    models_dir_cb cb, void *arg, struct kn_error *err);
/*
 * Called on the loop when models_from_job_start ends: rc 0 and reply (the
 * version made, as POST .../from-job answers; valid for the call only),
 * or rc < 0 and err (KN_EUNAVAIL when the server stopped first).
 */
typedef void (*models_made_cb)(struct server *s, int rc, json_t *reply,
			       const struct kn_error *err, void *arg);
/*
 * models_from_job with its copies on a worker: what the database says
 * (the job, its outputs) is checked now, and a refusal there is returned
 * with cb never called; otherwise cb is called once, later.
 */
int models_from_job_start(struct server *s, const struct caller *c,
			  const char *name, int64_t job_id, const char *alias,
			  models_made_cb cb, void *arg, struct kn_error *err);
/*
 * Roll alias of model name back (as POST .../rollback does), acting as c;
 * *to and *from the versions. -ECONFLICT when there is nothing earlier.
 */
int models_alias_rollback(struct server *s, const struct caller *c,
			  const char *name, const char *alias, int64_t *to,
			  int64_t *from, struct kn_error *err);
/* One version's stored evaluations (revalidate.c records them), oldest
   first (a new array). */
json_t *models_evaluations_json(struct server *s, const char *name,
				int64_t version);
/* revalidate.c: scheduled evaluation of a model alias (docs/registry.md) */
/*
 * A deployment's revalidate: (docs/deployments.md). reval_for_deployment
 * checks what the spec of deployment (owned by owner, stored under
 * filename) asks for: *out the row to set (NULL when the spec has none),
 * or an error naming the field: the alias is another deployment's, or
 * its job does not parse. job_text is the shipped text of a job file,
 * or NULL: then the text this deployment set before for the same file.
 */
int reval_for_deployment(struct server *s, const char *deployment,
			 const char *owner,
			 const struct kn_deployment_spec *spec,
			 const char *filename, const char *job_text,
			 struct kn_revalidation_row **out,
			 struct kn_error *err);
/*
 * Once the deployment is stored: set row (taken; NULL for none) as
 * deployment's re-validation, acting as c, and remove any other that
 * deployment set. Ones set by hand are left alone.
 */
void reval_deployment_set(struct server *s, const char *deployment,
			  const struct caller *c,
			  struct kn_revalidation_row *row);
void reval_row_free(struct kn_revalidation_row *row);
/* health.c: the node checks at start and periodically */
int health_start(struct server *s, struct node_health **out,
		 struct kn_error *err);
void health_free(struct node_health *h);

/* audit.c: the audit chain's key and anchor in $KILN_HOME */
/* Load or make audit.key, check audit.head, start chaining rows. */
int audit_start(struct server *s, struct kn_error *err);
/* audit.head: id 0 and "" when there is none. */
int audit_anchor_read(const char *home, int64_t *id,
		      char hash[KN_AUDIT_HASH_HEX_LEN + 1],
		      struct kn_error *err);
int audit_anchor_write(const char *home, int64_t id, const char *hash,
		       struct kn_error *err);
/* GET /v1/audit/verify */
void audit_h_verify(struct server *s, struct kn_http_req *req,
		    const struct caller *c, const char *param);

#include "server/costsvc.h"

/* server.c: node set-up, shared with the pools that add nodes later */
/* Node n's scheduler view of its devices, this machine's CPUs and memory. */
void setup_sched_node(struct server *s, size_t n);
/* Labels "k=v,k=v" split on sep into node n's labels; flag names the
   option in errors. */
int setup_labels(struct server *s, size_t n, const char *text,
		 const char *sep, const char *flag, struct kn_error *err);

/*
 * overrides.c: apply the JSON object text of submit-time overrides to
 * *spec (replaced by the spec parsed again with them). Returns 0 with
 * *effective (the text to store, malloc'd) and *applied (the overrides,
 * a new reference) set, or -EINVAL with err naming the override.
 */
int job_overrides_apply(struct kn_job_spec **spec, const char *text,
			const char *filename, char **effective,
			json_t **applied, struct kn_error *err);

/* logs.c: the most lines ?tail= may ask for. */
#define LOGS_TAIL_MAX 1000000
/* What of a task's log a request asks for. */
struct logs_query {
	int64_t offset;     /* from this byte */
	int64_t tail_lines; /* or its last lines, when not negative */
	int64_t since_ms;   /* and only lines that came at or after (0: all) */
	bool timestamps;    /* each line led by when it came */
	bool follow;
};
void logs_serve(struct server *s, struct kn_http_req *req, int64_t job_id,
		const char *task_dir, int attempt, int rank,
		const struct logs_query *q);
void logs_free_all(struct server *s);

#endif
