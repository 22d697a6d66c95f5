/*
 * Job hooks: what the job core asks the services that own some of its
 * jobs, in the manner of flux-core's jobtap plug-ins.
 *
 * A service (workflows, deployments, re-validation) registers one table
 * of callbacks and an argument; the core calls through the table and
 * never names a service. Every callback is optional (NULL: the service
 * has nothing to say). The core keeps no service state: a hook answers
 * from its own service's memory or the store.
 *
 * Rejected: the core calling each service by name, which tied the jobs
 * code to every service that starts jobs and made start-up order a
 * matter of comments. Hooks run on the loop, in registration order.
 */
#ifndef KILN_SERVER_JOBHOOKS_H
#define KILN_SERVER_JOBHOOKS_H

#include <stdbool.h>
#include <stdint.h>

#include <jansson.h>

#include "sched/sched.h"

/* One task being launched: what a hook may base its variables on. */
struct job_task {
	int64_t job_id;
	int attempt;
	int rank;
	/* Where the task is bound, or NULL when asked outside a launch
	   (an API answer that lists a step's inputs). */
	const struct kn_sched_binding *binding;
};

/* The model a job's tasks are given (KILN_MODEL_DIR). */
struct job_model {
	const char *dir; /* KILN_MODEL_DIR; owned by the service */
	const char *ref; /* KILN_MODEL (NAME@VERSION), or NULL */
	/*
	 * The job is a service replica: its tasks serve on the attempt's
	 * port (KILN_PORT) and it comes back after any exit until its
	 * service stops it.
	 */
	bool serves;
};

/* The steps of an attempt a service may hold (job_hook_ops.hold). */
enum job_hold_at {
	JOB_HOLD_LAUNCH,
	JOB_HOLD_END,
};

struct job_hook_ops {
	const char *name; /* the service, for logs */
	/* The job ended for good (not requeued: cancelled, succeeded, or
	   failed with no retry left). */
	void (*job_ended)(void *arg, int64_t job_id);
	/*
	 * Add the task's variables to env, an object of name -> string.
	 * A service adds only for jobs it owns.
	 */
	void (*task_env)(void *arg, const struct job_task *t, json_t *env);
	/* Fill *out and return true when the job is given a model. */
	bool (*model)(void *arg, int64_t job_id, struct job_model *out);
	/*
	 * The group whose jobs spread across nodes with the job (a
	 * deployment's replicas), as an identity only compared, or NULL.
	 */
	const void *(*spread_group)(void *arg, int64_t job_id);
	/*
	 * A bound attempt is about to start its tasks (JOB_HOLD_LAUNCH), or
	 * every task of it has ended (JOB_HOLD_END): true holds that step
	 * while the service does its own work first (on a worker), until it
	 * calls jobs_launch_resume or jobs_end_resume (core.h). Asked again
	 * then: answer false.
	 */
	bool (*hold)(void *arg, int64_t job_id, int attempt,
		     enum job_hold_at at);
};

/* Room for every service that owns jobs; a fixed table keeps the
   dispatch allocation-free. */
#define JOB_HOOKS_MAX 8

struct job_hooks;

struct job_hooks *job_hooks_new(void);
void job_hooks_free(struct job_hooks *h);
/*
 * Register ops with arg (both borrowed: they outlive h). Returns 0, or
 * -ENOSPC when JOB_HOOKS_MAX are registered.
 */
int job_hooks_add(struct job_hooks *h, const struct job_hook_ops *ops,
		  void *arg);

/* Tell every service, in registration order, that job_id ended. */
void job_hooks_job_ended(const struct job_hooks *h, int64_t job_id);
/*
 * Every service's variables for task t, merged in registration order
 * (a later one does not replace an earlier one's), as a new object; NULL
 * when none has any.
 */
json_t *job_hooks_task_env(const struct job_hooks *h, const struct job_task *t);
/* The first service's model for job_id: true and *out, else false and
   *out untouched. */
bool job_hooks_model(const struct job_hooks *h, int64_t job_id,
		     struct job_model *out);
/* Whether any service holds the launch or the end of an attempt. */
bool job_hooks_hold(const struct job_hooks *h, int64_t job_id, int attempt,
		    enum job_hold_at at);
/* The first service's spread group for job_id, or NULL. */
const void *job_hooks_spread_group(const struct job_hooks *h,
				   int64_t job_id);

#endif
