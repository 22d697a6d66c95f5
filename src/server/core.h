/*
 * The job core: the queue, the scheduler's turn, attempts and their
 * tasks, retries, cancel, eviction, and recovery after a restart. The
 * services that own jobs (deployments, workflows, re-validation) talk to
 * it through its verbs below and answer it through the job hooks
 * (jobhooks.h); it never names them.
 *
 * Each state change is written to the store before anything acts on it:
 * a tick commits every binding of the turn in one transaction and only
 * then starts shims; task exits found in one turn are committed together.
 * On start-up the store says which attempts were running and the task
 * directories say what became of them (status.json from the shim, or a
 * live shim to re-adopt), so a crash loses neither jobs nor outcomes.
 *
 * The alternative, the server waiting on its tasks as plain children, is
 * what makes most single-node launchers lose running work on a restart.
 *
 * Files: core_queue.c (submit, the queue, the scheduler's turn),
 * core_launch.c (a run's tasks started), core_finish.c (exits, outcomes,
 * cancel, evict, restart), core_recover.c (start-up), core_sync.c
 * (checkpoint sync of running attempts). Not a public header of the
 * server module: included through internal.h.
 */
#ifndef KILN_SERVER_CORE_H
#define KILN_SERVER_CORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "base/base.h"
#include "loop/loop.h"
#include "sched/sched.h"
#include "server/jobhooks.h"
#include "server/server.h"
#include "store/store.h"

struct server;
struct caller;

/* ---- verbs ---- */

/*
 * filename names the spec in messages; path, when given, is where the
 * spec file lives (absolute), which a relative workdir starts from.
 */
int jobs_submit(struct server *s, const struct caller *c, const char *text,
		size_t len, const char *filename, const char *path,
		int64_t *out_id, struct kn_error *err);
/*
 * As jobs_submit; without hold, a job that could not fit the cluster
 * even empty is refused (KN_ECONFLICT naming why) instead of queued.
 * overrides, when not NULL, is the JSON object text of submit-time
 * overrides (job_overrides_apply).
 */
int jobs_submit_fit(struct server *s, const struct caller *c,
		    const char *text, size_t len, const char *filename,
		    const char *path, bool hold, const char *overrides,
		    int64_t *out_id, struct kn_error *err);
/*
 * The keyed create's transaction ended: the jobs it submitted join the
 * queue (and the event stream) when it committed, else are forgotten, as
 * the store forgot them.
 */
void jobs_idem_settle(struct server *s, bool committed);
/* Jobs held for a commit (linked by next): queued, or freed. */
struct queued_job;
void jobs_held_settle(struct server *s, struct queued_job *held,
		      bool committed);
int jobs_cancel(struct server *s, const struct caller *c, int64_t id,
		struct kn_error *err);
/*
 * Job id's row into *j (kn_job_row_release it) when c may act on it
 * (c NULL: the system): its owner, an operator or an admin. -ENOENT
 * when there is none; -EPERM naming the owner ("a user may VERB only
 * its own jobs") otherwise; *j is written only on success.
 */
int jobs_get_for(struct server *s, const struct caller *c, int64_t id,
		 const char *verb, struct kn_job_row *j, struct kn_error *err);
/*
 * Evict a running preemptible job: its checkpoint signal, then SIGKILL
 * after grace_ms (< 0: the spec's checkpoint grace); the attempt ends
 * preempted and the job goes back to the queue without using a retry.
 * c may be NULL for the system (scheduled events, drains).
 */
int jobs_evict(struct server *s, const struct caller *c, int64_t id,
	       int64_t grace_ms, const char *why, struct kn_error *err);
/*
 * Stop the running attempt of job id (c NULL: the system): SIGTERM, then
 * SIGKILL after the kill grace. The attempt ends as failed with why; a
 * deployment's replica then restarts. -ENOENT when nothing runs.
 */
int jobs_restart(struct server *s, int64_t id, const char *why,
		 struct kn_error *err);
/*
 * Stop job id for good on the system's behalf (an idle dev environment):
 * as a cancel, its tasks get SIGTERM, then SIGKILL after the kill grace,
 * and it ends cancelled, with why as its reason; audited as action by
 * "system" with why as the detail. -ECONFLICT when it has ended.
 */
int jobs_stop_system(struct server *s, int64_t id, const char *action,
		     const char *why, struct kn_error *err);
/*
 * A service that held an attempt's launch or end (the job hook hold)
 * is done: it goes on. Nothing when the attempt is gone.
 */
void jobs_launch_resume(struct server *s, int64_t id, int attempt);
void jobs_end_resume(struct server *s, int64_t id, int attempt);
/* Run the scheduler on the next turn (capacity came back). */
void jobs_wake(struct server *s);

/* ---- life cycle (server.c) ---- */

/* Rebuild the queue and the running attempts from the store. */
int jobs_recover(struct server *s, struct kn_error *err);
/* The loop's callbacks (argument: the server): the scheduler's turn, the
   poll of adopted tasks, a child's exit. */
void jobs_tick(void *arg);
void jobs_poll(void *arg);
void jobs_on_sigchld(void *arg);
void jobs_free_all(struct server *s);
/* Forget every owner's fair-share usage (after jobs_free_all). */
void fair_release(struct server *s);

/* ---- what a service reaches ---- */

/*
 * A service holds the core as an opaque handle and reaches what it
 * shares through these, so that only the core's own files know the
 * layout of struct server.
 */
struct kn_store *core_store(struct server *s);
/*
 * End the transaction kn_store_begin opened on st: commit it when rc is
 * 0, else roll it back. Returns rc, or the commit's error; a failed
 * commit has rolled back already (a second rollback would undo the
 * transaction a savepoint is in).
 */
int core_store_end(struct kn_store *st, int rc, struct kn_error *err);
struct kn_loop *core_loop(struct server *s);
/* The executor the server runs tasks with (exec.h). */
struct kn_executor *core_executor(struct server *s);
/* Slow work off the loop (checkpoint sync, backups' uploads). */
struct kn_workers *core_workers(struct server *s);
/* Slow work an API request waits for (a copy to the store, a model's
   checks): apart from the above, so neither holds up the other. */
struct kn_workers *core_request_workers(struct server *s);
/* What the services that own jobs answer (a task's environment). */
const struct job_hooks *core_hooks(const struct server *s);
const struct kn_server_config *core_config(const struct server *s);
/* $KILN_HOME */
const char *core_home(const struct server *s);
/* The default checkpoint store's URL. */
const char *core_blob_url(const struct server *s);
/* The server is stopping: late work is dropped, not recorded. */
bool core_closing(const struct server *s);
/* The MIG profiles of this machine's GPUs, or NULL when none is in MIG
   mode. */
const struct kn_mig_table *core_mig(const struct server *s);

/* The nodes, 0 to core_node_count - 1 (pools add some while it runs). */
size_t core_node_count(const struct server *s);
const char *core_node_name(const struct server *s, size_t i);
/* ready, cordoned, draining or unhealthy */
const char *core_node_state(const struct server *s, size_t i);
/* The GPUs of node i as this server found them. */
const struct kn_device_set *core_node_devices(const struct server *s,
					      size_t i);
/* The value of node i's label key, or NULL. */
const char *core_node_label(const struct server *s, size_t i,
			    const char *key);

/*
 * An audit row of c's act (NULL: the system's, as admin); a row the
 * store refuses is logged, not returned: the act itself stands.
 */
void core_audit(struct server *s, const struct caller *c, const char *action,
		const char *object, const char *outcome, const char *detail);

/* ---- nodes (nodes.c) ---- */

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

/* Whether a task runs on node i. */
bool core_node_busy(const struct server *s, size_t i);
/* The job of the first deployment replica still running on node i (its
   model serves), or 0. */
int64_t core_node_replica(struct server *s, size_t i);
/* A node that joins while the server runs (node pools). */
struct node_new {
	const char *name;
	const char *state;  /* a restarted server keeps a cordon */
	const char *reason; /* why it is not ready, or NULL */
	const char *gpus;   /* its simulated GPUs, as --sim-node gives them */
	const char *labels; /* "KEY=VALUE ..." */
	const char *flag;   /* the option that asked for it, for errors */
	/* Added after start-up: its row and its ledger interval are written
	   now (at start-up, the cost service opens the interval). */
	bool running;
};
/* Add a node: its index, or a negative errno with err. */
int core_node_add(struct server *s, const struct node_new *nn,
		  struct kn_error *err);
/*
 * Take node i, an empty one, out of the server: its row stays in the
 * store as "removed" (the ledger prices its past by its labels), its
 * state interval ends, and indexes past it move down one. -ECONFLICT
 * while a task runs there.
 */
int core_node_remove(struct server *s, size_t i, struct kn_error *err);

/* ---- questions ---- */

/* Where a job is, for the services that own jobs. */
enum job_place { JOB_GONE, JOB_QUEUED, JOB_RUNNING };
struct job_view {
	enum job_place place; /* JOB_GONE: ended, or never known */
	/* Queued: why it waits ("" when not yet said; valid until the next
	   scheduler turn) and when it may start again (a restart's
	   backoff). */
	const char *reason;
	int64_t not_before;
	/* Running: its attempt, when it started, rank 0's port, the node of
	   its first task, whether a stop was sent, and whether its first
	   task is up (launched, not ended, not being stopped). */
	int attempt;
	int64_t started_at;
	int master_port;
	size_t node;
	bool stopping;
	bool serving;
};
/* Fill *out for job id; returns out->place. */
enum job_place core_job_view(struct server *s, int64_t id,
			     struct job_view *out);

/* The queue reason of a queued job, or NULL. */
const char *jobs_queue_reason(struct server *s, int64_t id);
/* The same for the rows[i].id of n rows at once (an array's elements),
   each reason or NULL into why[i]: one index for every lookup, where
   one search each would cost the queue's length per row. */
void jobs_queue_reasons(struct server *s, const struct kn_job_row *rows,
			size_t n, const char **why);
/* Why a running job has not ended yet though its tasks have (a full
   disk), or NULL. */
const char *jobs_run_reason(struct server *s, int64_t id);
/* Allocations on a device of node i, as JSON [{job,rank,milli}]. */
json_t *jobs_device_allocations(struct server *s, size_t node,
				int device_index);
/* Whether the job has a live run (for log follow). */
bool jobs_task_active(struct server *s, int64_t job_id, int attempt, int rank);
/*
 * A job's `inputs:` (from its stored normalized spec) with the sha256,
 * size and attempt recorded at their first fetch: [{input, name, url,
 * sha256, size, attempt}], the last three only once recorded; NULL when
 * the spec has no inputs.
 */
json_t *jobs_inputs_json(struct server *s, int64_t job_id,
			 const char *spec_json);

/*
 * The numbers job j left in KILN_OUTPUT_DIR/metrics.json (its last
 * attempt's), as JSON object text (malloc'd), or NULL (with a note in why
 * when the file is there but not an object).
 */
char *jobs_metrics_read(struct server *s, const struct kn_job_row *j,
			char *why, size_t len);

/*
 * The queued jobs that found no room on the last scheduler turn (past
 * their backoff, not waiting for preemptions), in queue order, each with
 * its scheduler request: what the autoscaler grows pools for.
 */
struct pending_job {
	int64_t id;
	bool preemptible;
	struct kn_sched_request *req; /* owned by the list */
};
size_t jobs_pending(struct server *s, struct pending_job **out);
void jobs_pending_free(struct pending_job *jobs, size_t n);

#endif
