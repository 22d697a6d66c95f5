/*
 * Shared between the job core's files (core.h); no other file includes
 * it.
 */
#ifndef KILN_SERVER_CORE_INTERNAL_H
#define KILN_SERVER_CORE_INTERNAL_H

#include "internal.h"

/* How often adopted tasks (not our children) are checked for an exit. */
#define POLL_MS 500

/* The scheduler's view of a spec; arrays owned here. */
struct sreq {
	struct kn_sched_request req;
	struct kn_sched_label *selector;
	struct kn_sched_toleration *tolerations;
	struct kn_sched_affinity_term *required;
	struct kn_sched_affinity_term *preferred;
};

/* core_queue.c */
/* The scheduler's request for spec, in *out (arrays owned by *out). */
void sreq_build(const struct server *s, const struct kn_job_spec *spec,
		struct sreq *out);
/*
 * Queue a job (the entry takes spec, and owner, the job's owner, or
 * reads it from the store when NULL).
 */
void queue_push(struct server *s, int64_t id, int priority,
		int64_t submitted_at, int64_t not_before,
		struct kn_job_spec *spec, char *owner);
void queued_free(struct queued_job *q);
void queue_remove(struct server *s, int64_t id);
/* Run the scheduler on the next turn. */
void wake_scheduler(struct server *s);
/* The owner job id was stored with (malloc'd), or NULL. */
char *job_owner(struct server *s, int64_t id);
/*
 * Fair share: charge every owner's running tasks up to now. Called
 * whenever the set of runs changes and before the queue is ordered, so
 * each stretch is charged at the rate it had.
 */
void fair_advance(struct server *s, int64_t now);
/* Parse a stored or submitted spec as jobs_submit does. */
int parse_spec(const struct server *s, const char *text, size_t len,
	       const char *filename, struct kn_job_spec **out,
	       struct kn_error *err);

/* core_launch.c */
/* A loopback port free now, for rank 0's rendezvous. */
int free_port(void);
/* A binding's devices as text: "0,1", MIG UUIDs, or "" for none. */
void devices_text(const struct kn_sched_binding *b, char *buf, size_t len);
/* $KILN_HOME/tasks/JOB/ATTEMPT/RANK (malloc'd). */
char *task_dir_path(struct server *s, int64_t job, int attempt, int rank);
/* A run of attempt of job_id (taking spec, and owner, or reading the
   owner from the store when NULL), linked into the server's. */
struct run *run_new(struct server *s, int64_t job_id, int attempt,
		    struct kn_job_spec *spec, char *owner);
void run_free(struct run *r);
void run_unlink(struct server *s, struct run *r);
/* Task t never ran (or could not start): ended now, exit -1, with the
   reason (printf-style, truncated to the status's field). */
void task_end_unstarted(struct run_task *t, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
/*
 * Record what the shim of rank 0 fetched (its inputs.json), once per run
 * (when its task t has ended or is found running).
 */
void record_inputs(struct server *s, struct run *r, const struct run_task *t);
/* Start the tasks of a bound run (after its restore; core_sync.c). */
void jobs_launch_run(struct server *s, struct run *r);

/* core_finish.c */
/* Add r to the runs whose tasks changed (once). */
void changed_add(struct run ***v, size_t *n, struct run *r);
/*
 * Write the tasks that ended since the last call, end the attempts whose
 * tasks have all ended, and release their devices. One transaction.
 */
void settle(struct server *s, struct run **changed, size_t n);
/* Stop every task of r (SIGTERM, then SIGKILL after the grace) for reason. */
void stop_run(struct server *s, struct run *r, const char *reason);
/* Read one task's state; true when it has just been found ended. */
bool check_task(struct server *s, struct run *r, struct run_task *t);
/* After exits: stop the rest of a gang whose member failed, then settle. */
void after_exits(struct server *s, struct run **changed, size_t n);
/* The final sync of a run whose tasks have ended is over (core_sync.c). */
void jobs_sync_settled(struct server *s, struct run *r);

/* core_sync.c: checkpoint sync of running attempts */
/* Restore the newest checkpoint (attempt 2 on), then jobs_launch_run. */
void sync_restore_then_launch(struct server *s, struct run *r);
/* Whether the run's checkpoints are synced (preemptible or checkpoint:). */
bool sync_wanted(const struct run *r);
/* Start watching the run's checkpoint directory. */
void sync_run_started(struct server *s, struct run *r);
void sync_run_gone(struct run *r);
/*
 * Every task has ended: true when nothing is left to sync; otherwise the
 * last sync (and, when succeeded, the outputs' upload) starts and
 * jobs_sync_settled is called when it is over.
 */
bool sync_finish_ready(struct server *s, struct run *r, bool succeeded);
#endif
