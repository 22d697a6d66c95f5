/*
 * The server's workload: the GPU shapes of the jobs it has had, newest
 * last, for the packing policy's typical workload (kn_sched_packing) and
 * the nodes' fragmentation measure. Loaded from the store at start-up,
 * grown on every submission, capped at WORKLOAD_MAX so a long-lived
 * server weighs its recent jobs and its memory stays bounded.
 */
#include <stdlib.h>
#include <string.h>

#include "server/internal.h"

#define WORKLOAD_MAX 10000

static void shape_release(struct kn_sched_shape *shape)
{
	for (size_t m = 0; m < shape->n_gpu_models; m++)
		free((char *)shape->gpu_models[m]);
	free((void *)shape->gpu_models);
}

/* Drop the oldest entry. */
static void drop_oldest(struct server *s)
{
	shape_release(&s->workload[0]);
	memmove(s->workload, s->workload + 1,
		(s->n_workload - 1) * sizeof(*s->workload));
	s->n_workload--;
}

static void add_shape(struct server *s, int gpu_milli, const char *const *models,
		      size_t n_models)
{
	struct kn_sched_shape *shape;
	char **copy = NULL;

	if (gpu_milli <= 0)
		return;
	if (s->n_workload == WORKLOAD_MAX)
		drop_oldest(s);
	if (s->n_workload == s->cap_workload) {
		s->cap_workload = s->cap_workload ? 2 * s->cap_workload : 64;
		s->workload = kn_xrealloc(s->workload,
					  s->cap_workload * sizeof(*s->workload));
	}
	if (n_models) {
		copy = kn_xcalloc(n_models, sizeof(*copy));
		for (size_t m = 0; m < n_models; m++)
			copy[m] = kn_xstrdup(models[m]);
	}
	shape = &s->workload[s->n_workload++];
	shape->gpu_milli = gpu_milli;
	shape->gpu_models = (const char *const *)copy;
	shape->n_gpu_models = n_models;
}

void workload_add(struct server *s, const struct kn_job_spec *spec)
{
	/* MIG slices are placed by their own rules, not packed. */
	if (spec->resources.mig_profile)
		return;
	add_shape(s, spec->resources.gpu_milli,
		  (const char *const *)spec->resources.gpu_models,
		  spec->resources.n_gpu_models);
}

int workload_load(struct server *s, struct kn_error *err)
{
	struct kn_job_filter f = {.state = -1, .with_spec = true};
	struct kn_job_row *rows = NULL;
	size_t n = 0;
	int rc;

	rc = kn_store_job_list(s->store, &f, &rows, &n, err);
	if (rc < 0)
		return rc;
	for (size_t i = n > WORKLOAD_MAX ? n - WORKLOAD_MAX : 0; i < n; i++) {
		json_t *spec = rows[i].spec_json
				       ? json_loads(rows[i].spec_json, 0, NULL)
				       : NULL;
		json_t *res = json_object_get(spec, "resources");
		json_t *wanted = json_object_get(res, "gpu_model");
		const char *models[KN_SCHED_MAX_GPUS_PER_TASK * 4];
		size_t n_models = 0, k;
		json_t *w;

		/* A MIG job's gpus is its profile's name. */
		if (!json_is_string(json_object_get(res, "gpus"))) {
			json_array_foreach(wanted, k, w)
				if (json_string_value(w) &&
				    n_models < sizeof(models) / sizeof(*models))
					models[n_models++] =
						json_string_value(w);
			add_shape(s,
				  (int)json_integer_value(
					  json_object_get(res, "gpu_milli")),
				  models, n_models);
		}
		json_decref(spec);
	}
	kn_job_list_free(rows, n);
	return 0;
}

void workload_release(struct server *s)
{
	for (size_t i = 0; i < s->n_workload; i++)
		shape_release(&s->workload[i]);
	s->n_workload = 0;
	free(s->workload);
	s->workload = NULL;
	s->cap_workload = 0;
}
