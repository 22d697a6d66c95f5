/*
 * The server's workload: the GPU shapes of the jobs it has had, newest
 * last, for the packing policy's typical workload (kn_sched_packing) and
 * the nodes' fragmentation measure. Loaded from the store at start-up,
 * grown on every submission, capped at WORKLOAD_MAX so a long-lived
 * server weighs its recent jobs and its memory stays bounded. Beside the
 * list, the same jobs counted by distinct shape (s->shapes), which is
 * what placement reads: each placement builds its typical set from the
 * workload, and from the list that cost grew with the jobs submitted (a
 * 10,000-element array made every tick of its 10,000 queued elements
 * take minutes, and the API wait behind it).
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

static bool same_shape(const struct kn_sched_shape *a,
		       const struct kn_sched_shape *b)
{
	if (a->gpu_milli != b->gpu_milli || a->n_gpu_models != b->n_gpu_models)
		return false;
	for (size_t m = 0; m < a->n_gpu_models; m++)
		if (strcmp(a->gpu_models[m], b->gpu_models[m]))
			return false;
	return true;
}

static struct kn_sched_shape *summary_find(struct server *s,
					   const struct kn_sched_shape *shape)
{
	for (size_t i = 0; i < s->n_shapes; i++)
		if (same_shape(&s->shapes[i], shape))
			return &s->shapes[i];
	return NULL;
}

static void summary_add(struct server *s, const struct kn_sched_shape *shape)
{
	struct kn_sched_shape *have = summary_find(s, shape);
	char **copy = NULL;

	if (have) {
		have->count++;
		return;
	}
	if (s->n_shapes == s->cap_shapes) {
		s->cap_shapes = s->cap_shapes ? 2 * s->cap_shapes : 8;
		s->shapes = kn_xrealloc(s->shapes,
					s->cap_shapes * sizeof(*s->shapes));
	}
	if (shape->n_gpu_models) {
		copy = kn_xcalloc(shape->n_gpu_models, sizeof(*copy));
		for (size_t m = 0; m < shape->n_gpu_models; m++)
			copy[m] = kn_xstrdup(shape->gpu_models[m]);
	}
	have = &s->shapes[s->n_shapes++];
	*have = *shape;
	have->gpu_models = (const char *const *)copy;
	have->count = 1;
}

static void summary_drop(struct server *s, const struct kn_sched_shape *shape)
{
	struct kn_sched_shape *have = summary_find(s, shape);

	if (!have || --have->count)
		return;
	shape_release(have);
	memmove(have, have + 1,
		(size_t)(s->shapes + s->n_shapes - (have + 1)) * sizeof(*have));
	s->n_shapes--;
}

/* Drop the oldest entry. */
static void drop_oldest(struct server *s)
{
	summary_drop(s, &s->workload[0]);
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
	shape->count = 1;
	summary_add(s, shape);
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
				    n_models < KN_LEN(models))
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
	for (size_t i = 0; i < s->n_shapes; i++)
		shape_release(&s->shapes[i]);
	free(s->shapes);
	s->shapes = NULL;
	s->n_shapes = s->cap_shapes = 0;
}
