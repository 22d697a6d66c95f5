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
	/* The checkpoint being written (NAME.tmp), not committed yet, and
	   the bytes of its files already sent ahead: "" and 0 when none. */
	char checkpoint_next[128];
	int64_t checkpoint_next_sent;
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
struct kn_catalog;

/* One node's own state, beside its scheduler view. */
struct server_node {
	char name[64];
	char state[16];   /* ready, cordoned, draining, unhealthy */
	char reason[192]; /* why it is not ready, or "" */
	struct kn_device_set devices;
	char *labels_text; /* the labels' text, split in place */
	struct kn_sched_label *labels; /* into labels_text */
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
	/* The same jobs as distinct shapes with their counts: what placement
	   and the fragmentation measure read, a few entries however many
	   jobs (an array of 10,000 is one). */
	struct kn_sched_shape *shapes;
	size_t n_shapes, cap_shapes;

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
	bool closing;               /* shutting down: late work is dropped */

	/* GET /metrics's counts (metrics_http.c). */
	struct server_metrics *metrics;

	/* The audit chain (audit.c). */
	unsigned char audit_key[KN_AUDIT_KEY_LEN];
	bool audit_anchor_frozen;   /* the log lost rows: keep audit.head */
	/* The engine's inventory of nodes (slurm_nodes.c), or NULL. */
	struct slurm_nodes *slurm_nodes;
	struct usage_state *usage;  /* per-task usage sampling (usage_sampling.c) */
	struct kn_console_grants *console; /* console logins (console_http.c) */
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
	/* Group commit of job submits (submit_group.c): the answers and
	   jobs waiting for the group's commit, the jobs there when the
	   running member joined (its rollback frees those after), and the
	   timer that commits on the loop's next turn. */
	struct submit_answer *group_answers, **group_tail;
	struct queued_job *group_queued, *group_mark;
	bool group_member;
	struct kn_timer *group_timer;
};

#include "server/idempotency.h"

/*
 * submit_group.c: job submits share one store commit (a keyed one's key
 * row included, idem_record), and are answered only after it. submit_group_join before the
 * submit writes (0, or an error in err); then submit_group_leave with
 * the answer (stolen) to send once committed, or with NULL when the
 * submit failed and is answered now: what it wrote is undone. A keyed
 * submit passes stored (stolen), its key row's answer, sent instead of
 * answer's own dump so that a replay is the same bytes; NULL otherwise. The jobs a
 * member submits wait in group_queued until the commit. The commit runs
 * on the loop's next turn, or earlier when another write comes first;
 * submit_group_flush runs it now (the server's stop).
 */
int submit_group_join(struct server *s, struct kn_error *err);
void submit_group_leave(struct server *s, struct kn_http_req *req,
			json_t *answer, char *stored);
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
 * kn_strv_free; a MIG instance whose nodes cannot be known fails
 * with err, and its task must not start.
 */
int isolation_task_devices(struct server *s,
			   const struct kn_sched_binding *b, char ***out,
			   struct kn_error *err);

#include "server/access.h"

/* console_http.c */
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

/*
 * metrics_http.c: what GET /metrics counts as it happens (nothing
 * before the service starts). Placement decisions and their time; a job placed
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

#include "server/feed.h"

/* monitor.c: scrapes, history, alert rules, webhook */
int monitor_start(struct server *s, struct monitor **out,
		  struct kn_error *err);
void monitor_free(struct monitor *m);

#include "server/server_alert.h"

#include "server/peers.h"

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
route_handler audit_h_verify;

#include "server/costsvc.h"

/* server.c: node set-up, shared with the nodes added later (nodes.c) */
/* Node n's scheduler view of its devices, this machine's CPUs and memory. */
void setup_sched_node(struct server *s, size_t n);
/* Labels "k=v,k=v" split on sep into node n's labels; flag names the
   option in errors. */
/*
 * slurm_nodes.c: what Slurm last said of node i (state, reason,
 * partitions, features, GRES), a new object, or NULL when the server
 * reads no engine's inventory or Slurm does not list it.
 */
json_t *slurm_nodes_json(const struct server *s, size_t i);

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
