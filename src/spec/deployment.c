/*
 * spec deployment: a Deployment is a job that serves (its model, replicas,
 * probes, limits, a fallback, re-validation), read with the walk in
 * walk.c. The deployment begins with its job, so the job's field readers
 * fill it directly; a preset's resources fill what the spec leaves out.
 */
#include "spec/internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DEFAULT_DEPLOY_BACKOFF_MS 1000
#define DEFAULT_DEPLOY_BACKOFF_MAX_MS (60 * 1000)
#define DEFAULT_PROBE_PERIOD_MS 5000
#define DEFAULT_PROBE_FAILURES 3
/* Probes faster than this would be load, not health checks. */
#define PROBE_MIN_PERIOD_MS 50
#define PROBE_MAX_FAILURES 100
/* Seconds fields (period_s, initial_delay_s): up to a day. */
#define PROBE_MAX_SECONDS (24 * 3600)
#define LIMIT_MAX 1000000000
/* Re-validation: every from 1s (a run needs a job slot) to 366 days. */
#define REVALIDATE_EVERY_MIN_MS 1000
#define REVALIDATE_EVERY_MAX_MS (366LL * 24 * 3600 * 1000)

static int read_deployment_kind(struct walk *w, struct fy_node *node,
				void *target)
{
	(void)target;
	return spec_check_kind(w, node, "Deployment");
}

static int read_model(struct walk *w, struct fy_node *node, void *target)
{
	static const char allowed[] =
		"a path to the model's files, job:<id> (a job's outputs), or "
		"NAME@VERSION or NAME@ALIAS (a registry version)";
	struct kn_deployment_spec *d = target;
	char got[GOT_BUF];
	struct value v;
	int64_t id;
	int rc = spec_want_nonempty_text(w, node, allowed, &v);

	if (rc)
		return rc;
	if (strncmp(v.text, "job:", 4) == 0) {
		if (!spec_all_digits(v.text + 4, "0123456789") ||
		    !spec_parse_int64(v.text + 4, &id) || id <= 0)
			return spec_fail(
				w, node,
				"must be job:<id> with a job id such as "
				"job:12; got %s",
				spec_describe(&v, got, sizeof(got)));
		d->model_job = id;
	}
	d->model = kn_xstrdup(v.text);
	return 0;
}

static int read_top_spread(struct walk *w, struct fy_node *node, void *target)
{
	struct kn_deployment_spec *d = target;

	return spec_read_spread(w, node, &d->job.placement);
}

/* Seconds as a number (0.5, 2) into milliseconds, at least min_ms. */
static int read_seconds(struct walk *w, struct fy_node *node, int64_t min_ms,
			int64_t *out)
{
	char got[GOT_BUF];
	struct value v;
	int64_t ms = 0;
	int rc = spec_read_thousandths(w, node, PROBE_MAX_SECONDS * 1000LL,
				       NULL, &v, &ms);

	if (rc < 0)
		return rc;
	if (rc == 0 && ms >= min_ms) {
		*out = ms;
		return 0;
	}
	return spec_fail(w, node,
			 "must be a number of seconds %g..%d (e.g. 0.5 or "
			 "10); got %s",
			 (double)min_ms / 1000, PROBE_MAX_SECONDS,
			 spec_describe(&v, got, sizeof(got)));
}

static int read_probe_path(struct walk *w, struct fy_node *node, void *target)
{
	struct kn_probe *p = target;
	char got[GOT_BUF];
	struct value v;
	int rc = spec_want_nonempty_text(w, node,
					 "an HTTP path such as /health", &v);

	if (rc)
		return rc;
	if (v.text[0] != '/' || strpbrk(v.text, " \t\r\n"))
		return spec_fail(
			w, node,
			"must be an HTTP path starting with '/', without "
			"spaces (e.g. /health); got %s",
			spec_describe(&v, got, sizeof(got)));
	free(p->path);
	p->path = kn_xstrdup(v.text);
	return 0;
}

static int read_probe_period(struct walk *w, struct fy_node *node,
			     void *target)
{
	struct kn_probe *p = target;

	return read_seconds(w, node, PROBE_MIN_PERIOD_MS, &p->period_ms);
}

static int read_probe_delay(struct walk *w, struct fy_node *node,
			    void *target)
{
	struct kn_probe *p = target;

	return read_seconds(w, node, 0, &p->initial_delay_ms);
}

static const struct field probe_fields[] = {
	{.name = "path", .type = FT_CUSTOM, .read = read_probe_path,
	 .required = true},
	{.name = "period_s", .type = FT_CUSTOM, .read = read_probe_period},
	{.name = "failure_threshold", .type = FT_INT,
	 .offset = offsetof(struct kn_probe, failure_threshold), .min = 1,
	 .max = PROBE_MAX_FAILURES},
	{.name = "initial_delay_s", .type = FT_CUSTOM,
	 .read = read_probe_delay},
};

static void probe_defaults(struct kn_probe *p)
{
	p->set = true;
	p->period_ms = DEFAULT_PROBE_PERIOD_MS;
	p->failure_threshold = DEFAULT_PROBE_FAILURES;
}

static int read_readiness(struct walk *w, struct fy_node *node, void *target)
{
	struct kn_deployment_spec *d = target;

	probe_defaults(&d->readiness);
	return spec_walk_mapping(w, node, probe_fields,
				 ARRAY_SIZE(probe_fields), &d->readiness, NULL);
}

static int read_liveness(struct walk *w, struct fy_node *node, void *target)
{
	struct kn_deployment_spec *d = target;

	probe_defaults(&d->liveness);
	return spec_walk_mapping(w, node, probe_fields,
				 ARRAY_SIZE(probe_fields), &d->liveness, NULL);
}

static int read_fallback(struct walk *w, struct fy_node *node, void *target)
{
	struct kn_deployment_spec *d = target;

	return spec_read_name_into(w, node,
				   "another deployment's name (1 to 63 "
				   "characters: lowercase letters, digits, "
				   "'.', '_' and '-')",
				   &d->fallback);
}

static const struct field limit_fields[] = {
	{.name = "rpm", .type = FT_INT,
	 .offset = offsetof(struct kn_deployment_spec, limit_rpm), .min = 0,
	 .max = LIMIT_MAX},
	{.name = "tpm", .type = FT_INT,
	 .offset = offsetof(struct kn_deployment_spec, limit_tpm), .min = 0,
	 .max = LIMIT_MAX},
};

static int read_limits(struct walk *w, struct fy_node *node, void *target)
{
	return spec_walk_mapping(w, node, limit_fields,
				 ARRAY_SIZE(limit_fields), target, NULL);
}
/* kind and name may be left out: the name is the deployment's. */
static int read_revalidate_job(struct walk *w, struct fy_node *node,
			       void *target)
{
	struct kn_deployment_revalidate *r = target;

	return spec_read_job_or_file(w, node, "deployment", NULL, &r->job_file,
				     &r->job);
}

/* max: or min: a mapping of metric names to finite numbers. */
static int read_thresholds(struct walk *w, struct fy_node *node,
			   json_t *thresholds, const char *side_name)
{
	json_t *side = json_object();
	struct fy_node_pair *pair;
	char got[GOT_BUF];
	struct value v;
	void *iter = NULL;
	int rc = spec_classify(w, node, &v);

	json_object_set_new(thresholds, side_name, side);
	if (rc)
		return rc;
	if (v.kind != V_MAP)
		return spec_fail(w, node,
				 "must be a mapping of metric names to numbers "
				 "(loss: 1.8); got %s",
				 spec_describe(&v, got, sizeof(got)));
	while ((pair = fy_node_mapping_iterate(node, &iter))) {
		struct fy_node *key = fy_node_pair_key(pair);
		struct fy_node *value = fy_node_pair_value(pair);
		char metric[KN_REVALIDATE_METRIC_MAX + 1];
		size_t mark;
		double limit;

		rc = spec_read_key(w, key, &v);
		if (rc)
			return rc;
		if (v.len == 0 || v.len > KN_REVALIDATE_METRIC_MAX) {
			spec_path_push_field(w, v.text);
			return spec_fail_bare(
				w, key, "a metric name is 1 to %d characters",
				KN_REVALIDATE_METRIC_MAX);
		}
		kn_strlcpy(metric, v.text, sizeof(metric));
		mark = spec_path_push_field(w, metric);
		if (json_object_get(side, metric))
			return spec_fail_bare(
				w, key, "metric \"%s\" is given twice", metric);
		rc = spec_classify(w, value, &v);
		if (rc)
			return rc;
		if ((v.kind != V_INT && v.kind != V_FLOAT) ||
		    !isfinite(limit = strtod(v.text, NULL)))
			return spec_fail(w, value,
					 "must be a finite number; got %s",
					 spec_describe(&v, got, sizeof(got)));
		json_object_set_new(side, metric, json_real(limit));
		spec_path_pop(w, mark);
	}
	return 0;
}

static int read_revalidate_max(struct walk *w, struct fy_node *node,
			       void *target)
{
	struct kn_deployment_revalidate *r = target;

	return read_thresholds(w, node, r->thresholds, "max");
}

static int read_revalidate_min(struct walk *w, struct fy_node *node,
			       void *target)
{
	struct kn_deployment_revalidate *r = target;

	return read_thresholds(w, node, r->thresholds, "min");
}

enum { RV_JOB, RV_EVERY, RV_MAX, RV_MIN, RV_ROLLBACK, RV_COUNT };

static const struct field revalidate_fields[RV_COUNT] = {
	[RV_JOB] = {.name = "job", .type = FT_CUSTOM,
		    .read = read_revalidate_job, .required = true},
	[RV_EVERY] = {.name = "every", .type = FT_DURATION,
		      .offset = offsetof(struct kn_deployment_revalidate,
					 every_ms),
		      .min = REVALIDATE_EVERY_MIN_MS,
		      .max = REVALIDATE_EVERY_MAX_MS,
		      .allowed = "a duration from 1s to 366d (e.g. 6h)",
		      .required = true},
	[RV_MAX] = {.name = "max", .type = FT_CUSTOM,
		    .read = read_revalidate_max},
	[RV_MIN] = {.name = "min", .type = FT_CUSTOM,
		    .read = read_revalidate_min},
	[RV_ROLLBACK] = {.name = "rollback", .type = FT_BOOL,
			 .offset = offsetof(struct kn_deployment_revalidate,
					    rollback)},
};

static void revalidate_free(struct kn_deployment_revalidate *r)
{
	if (!r)
		return;
	free(r->job_file);
	kn_job_spec_free(r->job);
	json_decref(r->thresholds);
	free(r);
}

static int read_revalidate(struct walk *w, struct fy_node *node, void *target)
{
	struct kn_deployment_spec *d = target;
	struct kn_deployment_revalidate *r = kn_xcalloc(1, sizeof(*r));
	struct fy_node_pair *seen[RV_COUNT];
	size_t n = 0;
	const char *side;
	json_t *limits;
	int rc;

	r->thresholds = json_object();
	d->revalidate = r;
	rc = spec_walk_mapping(w, node, revalidate_fields, RV_COUNT, r, seen);
	if (rc)
		return rc;
	json_object_foreach(r->thresholds, side, limits)
		n += json_object_size(limits);
	if (n == 0)
		return spec_fail(
			w, node,
			"needs at least one threshold: max: {METRIC: N} "
			"or min: {METRIC: N}");
	return 0;
}

struct deploy_ctx {
	struct kn_deployment_spec *spec;
	const struct kn_model_presets *presets;
};

enum {
	DF_KIND,
	DF_API_VERSION,
	DF_NAME,
	DF_MODEL,
	DF_PRESET,
	DF_COMMAND,
	DF_ENV,
	DF_WORKDIR,
	DF_RESOURCES,
	DF_PLACEMENT,
	DF_SPREAD,
	DF_PRIORITY,
	DF_REPLICAS,
	DF_READINESS,
	DF_LIVENESS,
	DF_FALLBACK,
	DF_LIMITS,
	DF_BACKOFF,
	DF_BACKOFF_MAX,
	DF_REVALIDATE,
	DF_COUNT
};

static const struct field deployment_fields[DF_COUNT] = {
	[DF_KIND] = {.name = "kind", .type = FT_CUSTOM,
		     .read = read_deployment_kind, .required = true},
	[DF_API_VERSION] = SPEC_FIELD_API_VERSION,
	[DF_NAME] = SPEC_FIELD_JOB_NAME,
	[DF_MODEL] = {.name = "model", .type = FT_CUSTOM, .read = read_model,
		      .required = true},
	[DF_PRESET] = {.name = "preset", .type = FT_TEXT,
		       .offset = offsetof(struct kn_deployment_spec, preset),
		       .allowed = "a model preset's name"},
	[DF_COMMAND] = SPEC_FIELD_COMMAND,
	[DF_ENV] = SPEC_FIELD_ENV,
	[DF_WORKDIR] = SPEC_FIELD_WORKDIR,
	[DF_RESOURCES] = SPEC_FIELD_RESOURCES,
	[DF_PLACEMENT] = SPEC_FIELD_PLACEMENT,
	[DF_SPREAD] = {.name = "spread", .type = FT_CUSTOM,
		       .read = read_top_spread},
	[DF_PRIORITY] = SPEC_FIELD_PRIORITY,
	[DF_REPLICAS] = {.name = "replicas", .type = FT_INT,
			 .offset = offsetof(struct kn_deployment_spec,
					    replicas),
			 .min = 0, .max = KN_SPEC_MAX_REPLICAS},
	[DF_READINESS] = {.name = "readiness", .type = FT_CUSTOM,
			  .read = read_readiness},
	[DF_LIVENESS] = {.name = "liveness", .type = FT_CUSTOM,
			 .read = read_liveness},
	[DF_FALLBACK] = {.name = "fallback", .type = FT_CUSTOM,
			 .read = read_fallback},
	[DF_LIMITS] = {.name = "limits", .type = FT_CUSTOM,
		       .read = read_limits},
	[DF_BACKOFF] = {.name = "backoff", .type = FT_DURATION,
			.offset = offsetof(struct kn_deployment_spec,
					   job.backoff_ms),
			.min = 1},
	[DF_BACKOFF_MAX] = {.name = "backoff_max", .type = FT_DURATION,
			    .offset = offsetof(struct kn_deployment_spec,
					       job.backoff_max_ms),
			    .min = 1},
	[DF_REVALIDATE] = {.name = "revalidate", .type = FT_CUSTOM,
			   .read = read_revalidate},
};

_Static_assert(DF_COUNT <= MAX_FIELDS, "MAX_FIELDS");
/* The Job field readers take the deployment as the job it begins with. */
_Static_assert(offsetof(struct kn_deployment_spec, job) == 0, "job first");


/* The preset's resources, where the spec's own resources say nothing. */
static int apply_preset(struct walk *w, struct deploy_ctx *ctx,
			struct fy_node_pair **seen)
{
	struct kn_deployment_spec *d = ctx->spec;
	struct kn_resources *res = &d->job.resources;
	const struct kn_model_preset *p;
	struct fy_node *given = seen[DF_RESOURCES]
					? fy_node_pair_value(seen[DF_RESOURCES])
					: NULL;

	if (!ctx->presets)
		return spec_fail_at_pair(w, seen[DF_PRESET], "preset",
					 "no preset table is loaded here");
	p = kn_model_preset_find(ctx->presets, d->preset);
	if (!p) {
		char names[256] = "";
		size_t used = 0;
		const struct kn_model_preset *q;

		for (size_t i = 0;
		     (q = kn_model_preset_at(ctx->presets, i)) &&
		     used < sizeof(names);
		     i++)
			used += (size_t)snprintf(names + used,
						 sizeof(names) - used, "%s%s",
						 i ? ", " : "", q->name);
		return spec_fail_at_pair(w, seen[DF_PRESET], "preset",
					 "unknown preset \"%s\" (known: %s)",
					 d->preset, names);
	}
	if (!given || !fy_node_mapping_lookup_by_string(given, "gpus", -1)) {
		free(res->mig_profile);
		res->mig_profile = NULL;
		res->gpu_milli = p->gpus * KN_MILLI;
	}
	if (p->gpu_model && res->gpu_milli > 0 &&
	    (!given ||
	     !fy_node_mapping_lookup_by_string(given, "gpu_model", -1)) &&
	    !res->n_gpu_models) {
		res->gpu_models = kn_xcalloc(2, sizeof(char *));
		res->gpu_models[0] = kn_xstrdup(p->gpu_model);
		res->n_gpu_models = 1;
	}
	if (!p->gpu_model &&
	    (!given || !fy_node_mapping_lookup_by_string(given, "memory", -1)))
		res->memory_bytes = p->memory_bytes;
	return 0;
}

/*
 * revalidate: re-validates a registry alias, so model: must name one
 * (NAME@ALIAS: not a path, not job:<id>, not a fixed version). An inline
 * job without a name takes the deployment's, with -eval when it fits.
 */
static int check_revalidate(struct walk *w, struct kn_deployment_spec *d,
			    struct fy_node_pair *pair)
{
	const char *at = strchr(d->model, '@');
	struct kn_job_spec *job = d->revalidate->job;

	if (!at || strchr(d->model, '/') || d->model_job || !at[1] ||
	    spec_all_digits(at + 1, "0123456789"))
		return spec_fail_at_pair(
			w, pair, "revalidate",
			"needs model: NAME@ALIAS (a registry "
			"alias to re-validate); model is \"%s\"",
			d->model);
	if (job && !job->name) {
		char *eval = kn_asprintf("%s-eval", d->job.name);

		job->name =
			spec_valid_name(eval) ? eval : kn_xstrdup(d->job.name);
		if (job->name != eval)
			free(eval);
	}
	return 0;
}

static const struct spec_kind DEPLOYMENT_KIND = {
	.kind = "Deployment",
	.root_name = "deployment",
	.what = "a deployment spec",
	.fields = deployment_fields,
	.n_fields = DF_COUNT,
};

static int read_deployment(struct walk *w, struct fy_node *root, void *obj)
{
	struct deploy_ctx *ctx = obj;
	struct kn_deployment_spec *d = ctx->spec;
	struct fy_node_pair *seen[DF_COUNT];
	int rc;

	w->root_name = DEPLOYMENT_KIND.root_name;
	rc = spec_read_root(w, root, &DEPLOYMENT_KIND, d, seen);
	if (rc)
		return rc;
	if (seen[DF_SPREAD] && d->job.placement.spread != KN_SPREAD_NONE &&
	    seen[DF_PLACEMENT] &&
	    fy_node_mapping_lookup_by_string(
		    fy_node_pair_value(seen[DF_PLACEMENT]), "spread", -1))
		return spec_fail_at_pair(w, seen[DF_SPREAD], "spread",
					 "is given twice (also as "
					 "placement.spread); keep one");
	if (d->fallback && !strcmp(d->fallback, d->job.name))
		return spec_fail_at_pair(
			w, seen[DF_FALLBACK], "fallback",
			"must name another deployment, not this "
			"one (%s)",
			d->fallback);
	rc = spec_check_backoff(w, &d->job, seen[DF_BACKOFF],
				seen[DF_BACKOFF_MAX]);
	if (rc)
		return rc;
	if (d->revalidate) {
		rc = check_revalidate(w, d, seen[DF_REVALIDATE]);
		if (rc)
			return rc;
	}
	if (d->preset)
		return apply_preset(w, ctx, seen);
	return 0;
}

int kn_deployment_spec_parse(const char *text, size_t len,
			     const char *filename,
			     const struct kn_model_presets *presets,
			     struct kn_deployment_spec **out,
			     struct kn_error *err)
{
	struct kn_deployment_spec *d = kn_xcalloc(1, sizeof(*d));
	struct deploy_ctx ctx = {.spec = d, .presets = presets};
	int rc;

	spec_job_defaults(&d->job);
	d->job.backoff_ms = DEFAULT_DEPLOY_BACKOFF_MS;
	d->job.backoff_max_ms = DEFAULT_DEPLOY_BACKOFF_MAX_MS;
	d->replicas = 1;
	rc = spec_parse_document(
		text, len, filename,
		"a mapping with kind: Deployment, name, model and "
		"command",
		read_deployment, &ctx, err);
	if (rc < 0) {
		kn_deployment_spec_free(d);
		return rc;
	}
	*out = d;
	return 0;
}

void kn_deployment_spec_free(struct kn_deployment_spec *spec)
{
	if (!spec)
		return;
	KN_FREE_ALL(spec->model, spec->readiness.path, spec->liveness.path,
		    spec->fallback, spec->preset);
	revalidate_free(spec->revalidate);
	/* The job part last: it is the allocation itself. */
	kn_job_spec_free(&spec->job);
}

static json_t *probe_json(const struct kn_probe *p)
{
	if (!p->set)
		return json_null();
	return json_pack("{s:s, s:I, s:i, s:I}", "path", p->path, "period_ms",
			 (json_int_t)p->period_ms, "failure_threshold",
			 p->failure_threshold, "initial_delay_ms",
			 (json_int_t)p->initial_delay_ms);
}

static json_t *revalidate_json(const struct kn_deployment_revalidate *r)
{
	if (!r)
		return json_null();
	return json_pack("{s:o, s:o, s:I, s:O, s:b}", "job_file",
			 spec_json_string_or_null(r->job_file), "job",
			 r->job ? kn_job_spec_to_json(r->job) : json_null(),
			 "every_ms", (json_int_t)r->every_ms, "thresholds",
			 r->thresholds, "rollback", r->rollback);
}

json_t *kn_deployment_spec_to_json(const struct kn_deployment_spec *spec)
{
	json_t *o = kn_job_spec_to_json(&spec->job);

	json_object_set_new(o, "kind", json_string("Deployment"));
	json_object_del(o, "tasks");
	json_object_del(o, "retries");
	json_object_del(o, "checkpoint");
	json_object_del(o, "timeout_ms");
	json_object_del(o, "preemptible");
	json_object_set_new(o, "model", json_string(spec->model));
	json_object_set_new(o, "replicas", json_integer(spec->replicas));
	json_object_set_new(o, "readiness", probe_json(&spec->readiness));
	json_object_set_new(o, "liveness", probe_json(&spec->liveness));
	json_object_set_new(o, "fallback",
			    spec_json_string_or_null(spec->fallback));
	json_object_set_new(o, "limits",
			    json_pack("{s:i, s:i}", "rpm", spec->limit_rpm,
				      "tpm", spec->limit_tpm));
	json_object_set_new(o, "preset",
			    spec_json_string_or_null(spec->preset));
	json_object_set_new(o, "revalidate", revalidate_json(spec->revalidate));
	return o;
}
