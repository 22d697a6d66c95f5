/*
 * The job hooks' table and dispatch (jobhooks.h). Pure: no loop, no
 * store, no server; unit-tested by linking it alone.
 */
#include <errno.h>
#include <stdlib.h>

#include "base/base.h"
#include "server/jobhooks.h"

struct job_hook {
	const struct job_hook_ops *ops;
	void *arg;
};

struct job_hooks {
	struct job_hook list[JOB_HOOKS_MAX];
	size_t n;
};

struct job_hooks *job_hooks_new(void)
{
	return kn_xcalloc(1, sizeof(struct job_hooks));
}

void job_hooks_free(struct job_hooks *h)
{
	free(h);
}

int job_hooks_add(struct job_hooks *h, const struct job_hook_ops *ops,
		  void *arg)
{
	if (h->n == JOB_HOOKS_MAX)
		return -ENOSPC;
	h->list[h->n].ops = ops;
	h->list[h->n].arg = arg;
	h->n++;
	return 0;
}

void job_hooks_job_ended(const struct job_hooks *h, int64_t job_id)
{
	for (size_t i = 0; i < h->n; i++)
		if (h->list[i].ops->job_ended)
			h->list[i].ops->job_ended(h->list[i].arg, job_id);
}

json_t *job_hooks_task_env(const struct job_hooks *h, const struct job_task *t)
{
	json_t *env = json_object(), *one;
	const char *key;
	json_t *v;

	for (size_t i = 0; i < h->n; i++) {
		if (!h->list[i].ops->task_env)
			continue;
		one = json_object();
		h->list[i].ops->task_env(h->list[i].arg, t, one);
		json_object_foreach(one, key, v)
			if (json_is_string(v) && !json_object_get(env, key))
				json_object_set(env, key, v);
		json_decref(one);
	}
	if (json_object_size(env) == 0) {
		json_decref(env);
		return NULL;
	}
	return env;
}

bool job_hooks_model(const struct job_hooks *h, int64_t job_id,
		     struct job_model *out)
{
	struct job_model m;

	for (size_t i = 0; i < h->n; i++) {
		if (!h->list[i].ops->model)
			continue;
		m = (struct job_model){ 0 };
		if (h->list[i].ops->model(h->list[i].arg, job_id, &m)) {
			*out = m;
			return true;
		}
	}
	return false;
}

const void *job_hooks_spread_group(const struct job_hooks *h,
				   int64_t job_id)
{
	const void *group;

	for (size_t i = 0; i < h->n; i++)
		if (h->list[i].ops->spread_group &&
		    (group = h->list[i].ops->spread_group(h->list[i].arg,
							  job_id)))
			return group;
	return NULL;
}

bool job_hooks_hold(const struct job_hooks *h, int64_t job_id, int attempt,
		    enum job_hold_at at)
{
	for (size_t i = 0; i < h->n; i++)
		if (h->list[i].ops->hold &&
		    h->list[i].ops->hold(h->list[i].arg, job_id, attempt, at))
			return true;
	return false;
}
