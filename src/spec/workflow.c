/*
 * spec workflow: a Workflow is steps (a job, a model registration or a
 * deployment update) ordered by their needs, read with the walk in
 * walk.c. What crosses steps (names, needs, conditions and inputs that
 * read other steps) is checked after the walk, against the nodes kept in
 * step_nodes, so errors still point into the file.
 */
#include "spec/internal.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

#define DEFAULT_STEP_RETRIES 1
#define STEP_MAX_RETRIES 100
/* Each when: and inputs: list, and a requires: list, stays small. */
#define STEP_MAX_ITEMS 64

static char *xstrndup(const char *s, size_t n)
{
	char *out = kn_xcalloc(n + 1, 1);

	memcpy(out, s, n);
	return out;
}

/* Positions of what is checked across steps, while the document lives. */
struct step_nodes {
	struct fy_node *step;
	struct fy_node *needs[KN_SPEC_MAX_STEPS];
	struct fy_node *when[STEP_MAX_ITEMS];
	struct fy_node *inputs[STEP_MAX_ITEMS];
	struct fy_node *from;
};

struct workflow_ctx {
	struct kn_workflow_spec *spec;
	struct kn_workflow_step *step; /* being read */
	struct step_nodes *nodes;      /* one per step */
	struct step_nodes *cur;
};

static const char *const ON_FAILURE_CHOICES[] = {"stop", "continue", "retry",
						 NULL};

static int read_on_failure_into(struct walk *w, struct fy_node *node,
				enum kn_on_failure *out)
{
	const char *c;
	int rc = spec_read_choice(w, node, ON_FAILURE_CHOICES,
				  "one of retry, continue or stop", &c);

	if (rc)
		return rc;
	*out = !strcmp(c, "retry")      ? KN_ON_FAILURE_RETRY
	       : !strcmp(c, "continue") ? KN_ON_FAILURE_CONTINUE
					: KN_ON_FAILURE_STOP;
	return 0;
}

static int read_wf_kind(struct walk *w, struct fy_node *node, void *target)
{
	(void)target;
	return spec_check_kind(w, node, "Workflow");
}

static int read_wf_name(struct walk *w, struct fy_node *node, void *target)
{
	struct workflow_ctx *ctx = target;

	return spec_read_name_into(w, node, NULL, &ctx->spec->name);
}

static int read_wf_on_failure(struct walk *w, struct fy_node *node,
			      void *target)
{
	struct workflow_ctx *ctx = target;

	return read_on_failure_into(w, node, &ctx->spec->on_failure);
}

/* --- requires: --- */

static int read_version_text(struct walk *w, struct fy_node *node,
			     char **out)
{
	static const char allowed[] =
		"a version such as \"535.104\" or \"12.2\" (numbers and dots)";
	char got[GOT_BUF];
	struct value v;
	int rc = spec_want_nonempty_text(w, node, allowed, &v);

	if (rc)
		return rc;
	if (!spec_all_digits(v.text, "0123456789.") || v.text[0] == '.' ||
	    v.text[v.len - 1] == '.' || strstr(v.text, ".."))
		return spec_fail(w, node, "must be %s; got %s", allowed,
				 spec_describe(&v, got, sizeof(got)));
	free(*out);
	*out = kn_xstrdup(v.text);
	return 0;
}

static int read_req_driver(struct walk *w, struct fy_node *node, void *target)
{
	return read_version_text(
		w, node, &((struct kn_requirements *)target)->driver_min);
}

static int read_req_cuda(struct walk *w, struct fy_node *node, void *target)
{
	return read_version_text(w, node,
				 &((struct kn_requirements *)target)->cuda_min);
}

static const struct field req_gpu_fields[] = {
	{.name = "model", .type = FT_TEXT,
	 .offset = offsetof(struct kn_requirements, gpu_model),
	 .allowed = "a GPU model such as H100"},
	{.name = "count", .type = FT_INT,
	 .offset = offsetof(struct kn_requirements, gpu_count), .min = 1,
	 .max = KN_SPEC_MAX_GPUS},
};

static int read_req_gpus(struct walk *w, struct fy_node *node, void *target)
{
	struct kn_requirements *r = target;
	int rc = spec_walk_mapping(w, node, req_gpu_fields,
				   ARRAY_SIZE(req_gpu_fields), r, NULL);

	if (rc == 0 && r->gpu_count == 0)
		r->gpu_count = 1;
	return rc;
}

static int read_name_list(struct walk *w, struct fy_node *node,
			  const char *allowed, char ***list, size_t *n)
{
	if (*list) {
		spec_free_strv(*list, *n);
		*list = NULL;
		*n = 0;
	}
	return spec_read_text_list(w, node, allowed, false, list, n);
}

static int read_req_scratch_path(struct walk *w, struct fy_node *node,
				 void *target)
{
	struct kn_requirements *r = target;
	struct value v;
	int rc = spec_want_nonempty_text(w, node, "an absolute path", &v);

	if (rc)
		return rc;
	if (v.text[0] != '/')
		return spec_fail(w, node,
				 "must be an absolute path; got \"%s\"",
				 v.text);
	free(r->scratch_path);
	r->scratch_path = kn_xstrdup(v.text);
	return 0;
}

static int read_req_scratch_free(struct walk *w, struct fy_node *node,
				 void *target)
{
	struct kn_requirements *r = target;
	struct kn_resources res = {0};
	int rc = spec_read_memory(w, node, &res);

	r->scratch_bytes = res.memory_bytes;
	return rc;
}

static const struct field req_scratch_fields[] = {
	{.name = "path", .type = FT_CUSTOM, .read = read_req_scratch_path,
	 .required = true},
	{.name = "free", .type = FT_CUSTOM, .read = read_req_scratch_free,
	 .required = true},
};

static int read_req_scratch(struct walk *w, struct fy_node *node,
			    void *target)
{
	return spec_walk_mapping(w, node, req_scratch_fields,
				 ARRAY_SIZE(req_scratch_fields), target, NULL);
}

static int read_req_store(struct walk *w, struct fy_node *node, void *target)
{
	static const struct field f = {
		.name = "store", .type = FT_BOOL,
		.offset = offsetof(struct kn_requirements, store)};

	return spec_read_bool_field(w, &f, node, target);
}

static const struct field requires_fields[] = {
	{.name = "gpus", .type = FT_CUSTOM, .read = read_req_gpus},
	{.name = "driver", .type = FT_CUSTOM, .read = read_req_driver},
	{.name = "cuda", .type = FT_CUSTOM, .read = read_req_cuda},
	{.name = "commands", .type = FT_TEXT_LIST,
	 .offset = offsetof(struct kn_requirements, commands),
	 .count_offset = offsetof(struct kn_requirements, n_commands),
	 .allowed = "a list of command names such as [nvidia-smi, torchrun]"},
	{.name = "python_modules", .type = FT_TEXT_LIST,
	 .offset = offsetof(struct kn_requirements, python_modules),
	 .count_offset = offsetof(struct kn_requirements, n_python_modules),
	 .allowed = "a list of Python modules such as [torch, numpy]"},
	{.name = "scratch", .type = FT_CUSTOM, .read = read_req_scratch},
	{.name = "store", .type = FT_CUSTOM, .read = read_req_store},
};

static int read_requires_into(struct walk *w, struct fy_node *node,
			      struct kn_requirements *r)
{
	r->set = true;
	return spec_walk_mapping(w, node, requires_fields,
				 ARRAY_SIZE(requires_fields), r, NULL);
}

static int read_wf_requires(struct walk *w, struct fy_node *node,
			    void *target)
{
	struct workflow_ctx *ctx = target;

	return read_requires_into(w, node, &ctx->spec->requires);
}

/* --- a step --- */

static int read_step_name(struct walk *w, struct fy_node *node, void *target)
{
	struct workflow_ctx *ctx = target;

	return spec_read_name_into(w, node, NULL, &ctx->step->name);
}

static int read_step_needs(struct walk *w, struct fy_node *node,
			   void *target)
{
	struct workflow_ctx *ctx = target;
	struct fy_node *item;
	void *iter = NULL;
	size_t i = 0;
	int rc = read_name_list(w, node, "a list of earlier steps' names",
				&ctx->step->needs, &ctx->step->n_needs);

	if (rc)
		return rc;
	while ((item = fy_node_sequence_iterate(node, &iter)) &&
	       i < KN_SPEC_MAX_STEPS)
		ctx->cur->needs[i++] = item;
	if (ctx->step->n_needs > KN_SPEC_MAX_STEPS)
		return spec_fail(w, node,
				 "names %zu steps; a workflow has at most %d",
				 ctx->step->n_needs, KN_SPEC_MAX_STEPS);
	return 0;
}

static int read_step_on_failure(struct walk *w, struct fy_node *node,
				void *target)
{
	struct workflow_ctx *ctx = target;

	ctx->step->on_failure_set = true;
	return read_on_failure_into(w, node, &ctx->step->on_failure);
}

static int read_step_retries(struct walk *w, struct fy_node *node,
			     void *target)
{
	static const struct field f = {
		.name = "retries", .type = FT_INT,
		.offset = offsetof(struct kn_workflow_step, retries), .min = 0,
		.max = STEP_MAX_RETRIES};
	struct workflow_ctx *ctx = target;

	return spec_read_int_field(w, &f, node, ctx->step);
}

static const char WHEN_ALLOWED[] =
	"a condition such as \"eval.metrics.loss < 1.8\" or \"train.outcome "
	"== succeeded\", or a list of them (all must hold)";

/* "STEP.metrics.NAME OP NUMBER" or "STEP.outcome ==|!= OUTCOME". */
static int parse_condition(struct walk *w, struct fy_node *node,
			   const char *text, struct kn_condition *c)
{
	static const struct {
		const char *text;
		enum kn_compare op;
	} ops[] = {
		{"<=", KN_CMP_LE}, {">=", KN_CMP_GE}, {"==", KN_CMP_EQ},
		{"!=", KN_CMP_NE}, {"<", KN_CMP_LT},  {">", KN_CMP_GT},
	};
	char lhs[160], rhs[96], op[8];
	const char *dot, *p = text;
	size_t n = 0;
	char *end;

	while (*p == ' ')
		p++;
	while (*p && !strchr("<>=! ", *p) && n + 1 < sizeof(lhs))
		lhs[n++] = *p++;
	lhs[n] = '\0';
	while (*p == ' ')
		p++;
	/* The operator: the run of punctuation after the left side. */
	n = 0;
	while (*p && *p != ' ' && *p != '"' && *p != '.' && *p != '-' &&
	       !isalnum((unsigned char)*p) && n + 1 < sizeof(op))
		op[n++] = *p++;
	op[n] = '\0';
	while (*p == ' ')
		p++;
	n = 0;
	while (*p && *p != ' ' && n + 1 < sizeof(rhs))
		rhs[n++] = *p++;
	rhs[n] = '\0';
	while (*p == ' ')
		p++;
	if (*p || !lhs[0] || !op[0] || !rhs[0])
		return spec_fail(w, node, "must be %s; got \"%s\"",
				 WHEN_ALLOWED, text);
	for (n = 0; n < ARRAY_SIZE(ops) && strcmp(ops[n].text, op); n++)
		;
	if (n == ARRAY_SIZE(ops))
		return spec_fail(
			w, node,
			"\"%s\" is not a comparison: use <, <=, >, >=, == "
			"or !=",
			op);
	c->op = ops[n].op;
	dot = strchr(lhs, '.');
	if (!dot)
		return spec_fail(w, node, "must be %s; got \"%s\"",
				 WHEN_ALLOWED, text);
	c->step = xstrndup(lhs, (size_t)(dot - lhs));
	if (!strcmp(dot + 1, "outcome")) {
		if (c->op != KN_CMP_EQ && c->op != KN_CMP_NE)
			return spec_fail(w, node,
					 "an outcome is compared with == or != "
					 "only; got \"%s\"",
					 text);
		if (strcmp(rhs, "succeeded") && strcmp(rhs, "failed") &&
		    strcmp(rhs, "skipped"))
			return spec_fail(w, node,
					 "an outcome is succeeded, failed or "
					 "skipped; got \"%s\"",
					 rhs);
		c->outcome = kn_xstrdup(rhs);
		return 0;
	}
	if (strncmp(dot + 1, "metrics.", 8) != 0 || !dot[9])
		return spec_fail(w, node,
				 "\"%s\": a condition reads STEP.outcome or "
				 "STEP.metrics.NAME",
				 lhs);
	c->metric = kn_xstrdup(dot + 9);
	c->number = strtod(rhs, &end);
	if (end == rhs || *end)
		return spec_fail(
			w, node,
			"a metric is compared with a number; got \"%s\"", rhs);
	return 0;
}

static int read_step_when(struct walk *w, struct fy_node *node, void *target)
{
	struct workflow_ctx *ctx = target;
	struct kn_workflow_step *st = ctx->step;
	struct fy_node *items[STEP_MAX_ITEMS];
	size_t n = 0;
	struct value v;
	int rc = spec_classify(w, node, &v);

	if (rc)
		return rc;
	if (v.kind == V_LIST) {
		struct fy_node *item;
		void *iter = NULL;

		if (v.count < 1 || v.count > STEP_MAX_ITEMS)
			return spec_fail(w, node, "must be %s (1 to %d)",
					 WHEN_ALLOWED, STEP_MAX_ITEMS);
		while ((item = fy_node_sequence_iterate(node, &iter)))
			items[n++] = item;
	} else {
		items[n++] = node;
	}
	st->when = kn_xcalloc(n, sizeof(*st->when));
	for (size_t i = 0; i < n; i++) {
		size_t mark = v.kind == V_LIST ? spec_path_push_index(w, (int)i)
					       : w->path_len;
		struct value item;

		rc = spec_want_nonempty_text(w, items[i], WHEN_ALLOWED, &item);
		if (rc)
			return rc;
		st->n_when = i + 1;
		rc = parse_condition(w, items[i], item.text, &st->when[i]);
		if (rc)
			return rc;
		ctx->cur->when[i] = items[i];
		spec_path_pop(w, mark);
	}
	return 0;
}

static int read_step_requires(struct walk *w, struct fy_node *node,
			      void *target)
{
	struct workflow_ctx *ctx = target;

	return read_requires_into(w, node, &ctx->step->requires);
}

static int read_step_inputs(struct walk *w, struct fy_node *node,
			    void *target)
{
	struct workflow_ctx *ctx = target;
	struct kn_workflow_step *st = ctx->step;
	struct fy_node *item;
	void *iter = NULL;
	char **texts = NULL;
	size_t n = 0;
	int rc = spec_read_text_list(
		w, node,
		"a list of inputs: STEP.outputs/PATH, a path "
		"or a store URL",
		false, &texts, &n);

	if (rc) {
		spec_free_strv(texts, n);
		return rc;
	}
	if (n > STEP_MAX_ITEMS) {
		spec_free_strv(texts, n);
		return spec_fail(w, node, "has %zu inputs; at most %d", n,
				 STEP_MAX_ITEMS);
	}
	st->inputs = kn_xcalloc(n, sizeof(*st->inputs));
	for (size_t i = 0; i < n; i++) {
		const char *t = texts[i], *mark = strstr(t, ".outputs/");

		item = fy_node_sequence_iterate(node, &iter);
		ctx->cur->inputs[i] = item;
		st->inputs[i].text = kn_xstrdup(t);
		/* "train.outputs/w.bin" names a step; a URL or path with a
		   ".outputs/" inside it (scheme, slash first) does not. */
		if (mark && mark > t && !memchr(t, '/', (size_t)(mark - t)) &&
		    !memchr(t, ':', (size_t)(mark - t))) {
			size_t mark_path = spec_path_push_index(w, (int)i);

			st->inputs[i].step = xstrndup(t, (size_t)(mark - t));
			st->inputs[i].path = kn_xstrdup(mark + 9);
			if (!st->inputs[i].path[0] ||
			    strstr(st->inputs[i].path, "..")) {
				st->n_inputs = i + 1;
				rc = spec_fail(
					w, item,
					"must name a file under the step's "
					"outputs (STEP.outputs/PATH, no "
					"\"..\"); got \"%s\"",
					t);
				spec_free_strv(texts, n);
				return rc;
			}
			spec_path_pop(w, mark_path);
		}
		st->n_inputs = i + 1;
	}
	spec_free_strv(texts, n);
	return 0;
}

/*
 * A step's inputs are the step's own `inputs:`, which may name earlier
 * steps' outputs; one list per step keeps what lands in $KILN_INPUT_DIR
 * and what its lineage records in one place.
 */
static int refuse_step_job_inputs(struct walk *w, struct fy_node *node,
				  void *target)
{
	(void)target;
	return spec_fail(w, node,
			 "a step's inputs go in the step's inputs: list, "
			 "not in its job");
}

/* An inline job: kind and name may be left out (name: the step's). */
static int read_step_job(struct walk *w, struct fy_node *node, void *target)
{
	struct workflow_ctx *ctx = target;

	return spec_read_job_or_file(w, node, "workflow",
				     refuse_step_job_inputs,
				     &ctx->step->job_file, &ctx->step->job);
}

static int read_step_from(struct walk *w, struct fy_node *node, void *target)
{
	struct workflow_ctx *ctx = target;
	struct value v;
	int rc = spec_want_nonempty_text(w, node,
					 "the job step whose outputs are "
					 "the model",
					 &v);

	if (rc)
		return rc;
	/* Both register and deploy take one: a step with both is refused
	   later, and keeps only the last. */
	free(ctx->step->from);
	ctx->step->from = kn_xstrdup(v.text);
	ctx->cur->from = node;
	return 0;
}

static int read_register_model(struct walk *w, struct fy_node *node,
			       void *target)
{
	struct workflow_ctx *ctx = target;

	return spec_read_name_into(w, node, NULL, &ctx->step->model);
}

static int read_register_alias(struct walk *w, struct fy_node *node,
			       void *target)
{
	struct workflow_ctx *ctx = target;

	return spec_read_name_into(w, node, NULL, &ctx->step->alias);
}

static int read_register_signer(struct walk *w, struct fy_node *node,
				void *target)
{
	struct workflow_ctx *ctx = target;

	return spec_read_name_into(w, node, "a signer's name, as the server's "
				   "config file names it under signers:",
				   &ctx->step->signer);
}

/* A key's path was once accepted here: say what replaced it. */
static int read_register_sign_key(struct walk *w, struct fy_node *node,
				  void *target)
{
	(void)target;
	return spec_fail(w, node, "the server no longer signs with a key file "
			 "a spec names: use signer: NAME, a signer the "
			 "server's config holds (signers:)");
}

static const struct field register_fields[] = {
	{.name = "from", .type = FT_CUSTOM, .read = read_step_from,
	 .required = true},
	{.name = "model", .type = FT_CUSTOM, .read = read_register_model,
	 .required = true},
	{.name = "alias", .type = FT_CUSTOM, .read = read_register_alias},
	{.name = "signer", .type = FT_CUSTOM, .read = read_register_signer},
	{.name = "sign_key", .type = FT_CUSTOM,
	 .read = read_register_sign_key},
};

static int read_step_register(struct walk *w, struct fy_node *node,
			      void *target)
{
	struct workflow_ctx *ctx = target;

	ctx->step->kind = KN_STEP_REGISTER;
	return spec_walk_mapping(w, node, register_fields,
				 ARRAY_SIZE(register_fields), target, NULL);
}

static int read_deploy_deployment(struct walk *w, struct fy_node *node,
				  void *target)
{
	struct workflow_ctx *ctx = target;

	return spec_read_name_into(w, node, NULL, &ctx->step->deployment);
}

static const struct field deploy_fields[] = {
	{.name = "deployment", .type = FT_CUSTOM,
	 .read = read_deploy_deployment, .required = true},
	{.name = "from", .type = FT_CUSTOM, .read = read_step_from,
	 .required = true},
};

static int read_step_deploy(struct walk *w, struct fy_node *node,
			    void *target)
{
	struct workflow_ctx *ctx = target;

	ctx->step->kind = KN_STEP_DEPLOY;
	return spec_walk_mapping(w, node, deploy_fields,
				 ARRAY_SIZE(deploy_fields), target, NULL);
}

enum {
	SF_NAME,
	SF_NEEDS,
	SF_ON_FAILURE,
	SF_RETRIES,
	SF_WHEN,
	SF_REQUIRES,
	SF_INPUTS,
	SF_JOB,
	SF_REGISTER,
	SF_DEPLOY,
	SF_COUNT
};

static const struct field step_fields[SF_COUNT] = {
	[SF_NAME] = {.name = "name", .type = FT_CUSTOM, .read = read_step_name,
		     .required = true},
	[SF_NEEDS] = {.name = "needs", .type = FT_CUSTOM,
		      .read = read_step_needs},
	[SF_ON_FAILURE] = {.name = "on_failure", .type = FT_CUSTOM,
			   .read = read_step_on_failure},
	[SF_RETRIES] = {.name = "retries", .type = FT_CUSTOM,
			.read = read_step_retries},
	[SF_WHEN] = {.name = "when", .type = FT_CUSTOM, .read = read_step_when},
	[SF_REQUIRES] = {.name = "requires", .type = FT_CUSTOM,
			 .read = read_step_requires},
	[SF_INPUTS] = {.name = "inputs", .type = FT_CUSTOM,
		       .read = read_step_inputs},
	[SF_JOB] = {.name = "job", .type = FT_CUSTOM, .read = read_step_job},
	[SF_REGISTER] = {.name = "register", .type = FT_CUSTOM,
			 .read = read_step_register},
	[SF_DEPLOY] = {.name = "deploy", .type = FT_CUSTOM,
		       .read = read_step_deploy},
};
_Static_assert(SF_COUNT <= MAX_FIELDS, "MAX_FIELDS");

static int read_step(struct walk *w, struct fy_node *node,
		     struct workflow_ctx *ctx)
{
	struct fy_node_pair *seen[SF_COUNT];
	int rc, kinds;

	ctx->step->retries = DEFAULT_STEP_RETRIES;
	ctx->cur->step = node;
	rc = spec_walk_mapping(w, node, step_fields, SF_COUNT, ctx, seen);
	if (rc)
		return rc;
	kinds = !!seen[SF_JOB] + !!seen[SF_REGISTER] + !!seen[SF_DEPLOY];
	if (kinds != 1)
		return spec_fail(
			w,
			kinds ? fy_node_pair_key(seen[SF_REGISTER]
							 ? seen[SF_REGISTER]
							 : seen[SF_DEPLOY])
			      : node,
			"step \"%s\" must have exactly one of job, register "
			"or deploy",
			ctx->step->name);
	if (ctx->step->job && !ctx->step->job->name)
		ctx->step->job->name = kn_xstrdup(ctx->step->name);
	if (seen[SF_INPUTS] && !seen[SF_JOB])
		return spec_fail(
			w, fy_node_pair_key(seen[SF_INPUTS]),
			"inputs are for job steps (register and deploy "
			"read their from step)");
	return 0;
}

static int read_step_item(struct walk *w, struct fy_node *item, size_t i,
			  void *target)
{
	struct workflow_ctx *ctx = target;

	ctx->step = &ctx->spec->steps[i];
	ctx->cur = &ctx->nodes[i];
	ctx->spec->n_steps = i + 1;
	return read_step(w, item, ctx);
}

static int read_wf_steps(struct walk *w, struct fy_node *node, void *target)
{
	struct workflow_ctx *ctx = target;
	char allowed[64];
	size_t count;
	int rc;

	snprintf(allowed, sizeof(allowed), "a list of 1 to %d steps",
		 KN_SPEC_MAX_STEPS);
	rc = spec_want_list(w, node, 1, -1, allowed, &count);
	if (rc)
		return rc;
	/* Too many steps: say how many there are, not just "a list". */
	if (count > KN_SPEC_MAX_STEPS)
		return spec_fail(w, node, "must be %s; got %zu", allowed,
				 count);
	ctx->spec->steps = kn_xcalloc(count, sizeof(*ctx->spec->steps));
	ctx->nodes = kn_xcalloc(count, sizeof(*ctx->nodes));
	return spec_walk_items(w, node, count, read_step_item, ctx);
}

enum {
	WF_KIND,
	WF_API_VERSION,
	WF_NAME,
	WF_ON_FAILURE,
	WF_REQUIRES,
	WF_STEPS,
	WF_COUNT
};

static const struct field workflow_fields[WF_COUNT] = {
	[WF_KIND] = {.name = "kind", .type = FT_CUSTOM, .read = read_wf_kind,
		     .required = true},
	[WF_API_VERSION] = SPEC_FIELD_API_VERSION,
	[WF_NAME] = {.name = "name", .type = FT_CUSTOM, .read = read_wf_name,
		     .required = true},
	[WF_ON_FAILURE] = {.name = "on_failure", .type = FT_CUSTOM,
			   .read = read_wf_on_failure},
	[WF_REQUIRES] = {.name = "requires", .type = FT_CUSTOM,
			 .read = read_wf_requires},
	[WF_STEPS] = {.name = "steps", .type = FT_CUSTOM, .read = read_wf_steps,
		      .required = true},
};

static ssize_t step_index(const struct kn_workflow_spec *spec,
			  const char *name)
{
	for (size_t i = 0; i < spec->n_steps; i++)
		if (!strcmp(spec->steps[i].name, name))
			return (ssize_t)i;
	return -1;
}

/* Point the path at steps[i].FIELD[k] (k < 0: no index) and fail. */
__attribute__((format(printf, 6, 7))) static int
step_fail(struct walk *w, struct fy_node *node, size_t i, const char *field,
	  int k, const char *fmt, ...)
{
	va_list ap;
	int rc;

	spec_path_pop(w, 0);
	spec_path_push(w, "steps[%zu]", i);
	if (field)
		spec_path_push_field(w, field);
	if (k >= 0)
		spec_path_push_index(w, k);
	va_start(ap, fmt);
	rc = spec_vfail(w, node, true, fmt, ap);
	va_end(ap);
	return rc;
}

/* Names resolve, and names are unique. */
static int check_step_names(struct walk *w, struct workflow_ctx *ctx)
{
	const struct kn_workflow_spec *spec = ctx->spec;

	for (size_t i = 0; i < spec->n_steps; i++) {
		const struct kn_workflow_step *st = &spec->steps[i];
		ssize_t first = step_index(spec, st->name);

		if (first >= 0 && (size_t)first < i)
			return step_fail(w, ctx->nodes[i].step, i, "name", -1,
					 "two steps are named \"%s\" (the "
					 "first is steps[%zd])",
					 st->name, first);
		for (size_t k = 0; k < st->n_needs; k++) {
			ssize_t j = step_index(spec, st->needs[k]);

			if (j < 0)
				return step_fail(w, ctx->nodes[i].needs[k], i,
						 "needs", (int)k,
						 "step \"%s\" needs \"%s\", "
						 "which is no step of this "
						 "workflow",
						 st->name, st->needs[k]);
			if ((size_t)j == i)
				return step_fail(w, ctx->nodes[i].needs[k], i,
						 "needs", (int)k,
						 "step \"%s\" needs itself",
						 st->name);
		}
	}
	return 0;
}

/*
 * Kahn's order, file order among ready steps; a step left over sits on a
 * cycle, which is followed from it and named.
 */
static int order_steps(struct walk *w, struct workflow_ctx *ctx)
{
	struct kn_workflow_spec *spec = ctx->spec;
	size_t n = spec->n_steps, done = 0;
	bool *placed = kn_xcalloc(n, sizeof(*placed));
	int rc = 0;

	spec->order = kn_xcalloc(n, sizeof(*spec->order));
	while (done < n) {
		size_t i;

		for (i = 0; i < n; i++) {
			bool ready = !placed[i];

			for (size_t k = 0; ready && k < spec->steps[i].n_needs;
			     k++)
				ready = placed[step_index(
					spec, spec->steps[i].needs[k])];
			if (ready)
				break;
		}
		if (i == n)
			break;
		placed[i] = true;
		spec->order[done++] = i;
	}
	if (done < n) {
		/* Walk needs among unplaced steps until one repeats. */
		size_t *seen_at = kn_xcalloc(n, sizeof(*seen_at));
		size_t *trail = kn_xcalloc(n + 1, sizeof(*trail));
		size_t len = 0, at = 0, start;
		struct kn_buf b;

		while (placed[at])
			at++;
		for (size_t i = 0; i < n; i++)
			seen_at[i] = SIZE_MAX;
		while (seen_at[at] == SIZE_MAX) {
			const struct kn_workflow_step *st = &spec->steps[at];

			seen_at[at] = len;
			trail[len++] = at;
			for (size_t k = 0; k < st->n_needs; k++) {
				size_t j = (size_t)step_index(spec,
							      st->needs[k]);
				if (!placed[j]) {
					at = j;
					break;
				}
			}
		}
		start = seen_at[at];
		kn_buf_init(&b, SIZE_MAX);
		for (size_t k = start; k < len; k++)
			kn_buf_printf(&b, "%s -> ",
				      spec->steps[trail[k]].name);
		kn_buf_printf(&b, "%s", spec->steps[at].name);
		rc = step_fail(w, ctx->nodes[trail[start]].step, trail[start],
			       "needs", -1, "the steps' needs form a cycle: %s",
			       b.data);
		kn_buf_release(&b);
		KN_FREE_ALL(seen_at, trail);
	}
	free(placed);
	return rc;
}

/* Depth-first over needs, each step visited once (a diamond-shaped DAG
   would make plain recursion exponential). */
static bool depends_from(const struct kn_workflow_spec *spec, size_t a,
			 size_t b, uint64_t *visited)
{
	const struct kn_workflow_step *st = &spec->steps[a];

	for (size_t k = 0; k < st->n_needs; k++) {
		ssize_t j = step_index(spec, st->needs[k]);

		if (j < 0 || (*visited >> j & 1))
			continue;
		*visited |= (uint64_t)1 << j;
		if ((size_t)j == b || depends_from(spec, (size_t)j, b, visited))
			return true;
	}
	return false;
}

bool kn_workflow_depends(const struct kn_workflow_spec *spec, size_t a,
			 size_t b)
{
	uint64_t visited = 0;

	_Static_assert(KN_SPEC_MAX_STEPS <= 64, "visited is one bit a step");
	return a < spec->n_steps && b < spec->n_steps &&
	       depends_from(spec, a, b, &visited);
}

/* What a step reads comes from a step it needs. */
static int check_reads(struct walk *w, struct workflow_ctx *ctx, size_t i,
		       const char *what, const char *field, int k,
		       struct fy_node *node, const char *name, bool job_only)
{
	const struct kn_workflow_spec *spec = ctx->spec;
	ssize_t j = step_index(spec, name);

	if (j < 0)
		return step_fail(w, node, i, field, k,
				 "%s names \"%s\", which is no step of this "
				 "workflow",
				 what, name);
	if (!kn_workflow_depends(spec, i, (size_t)j))
		return step_fail(w, node, i, field, k,
				 "%s reads step \"%s\", which step \"%s\" does "
				 "not need (add it to needs)",
				 what, name, spec->steps[i].name);
	if (job_only && spec->steps[j].kind != KN_STEP_JOB)
		return step_fail(w, node, i, field, k,
				 "%s reads step \"%s\", which is not a job "
				 "step",
				 what, name);
	return 0;
}

static int check_step_reads(struct walk *w, struct workflow_ctx *ctx)
{
	const struct kn_workflow_spec *spec = ctx->spec;
	int rc = 0;

	for (size_t i = 0; i < spec->n_steps && !rc; i++) {
		const struct kn_workflow_step *st = &spec->steps[i];
		const struct step_nodes *sn = &ctx->nodes[i];

		for (size_t k = 0; k < st->n_when && !rc; k++)
			rc = check_reads(w, ctx, i, "the condition", "when",
					 st->n_when > 1 ? (int)k : -1,
					 sn->when[k], st->when[k].step, false);
		for (size_t k = 0; k < st->n_inputs && !rc; k++)
			if (st->inputs[k].step)
				rc = check_reads(w, ctx, i, "the input",
						 "inputs", (int)k,
						 sn->inputs[k],
						 st->inputs[k].step, true);
		if (!rc && st->kind == KN_STEP_REGISTER)
			rc = check_reads(w, ctx, i, "register.from",
					 "register.from", -1, sn->from,
					 st->from, true);
		if (!rc && st->kind == KN_STEP_DEPLOY) {
			rc = check_reads(w, ctx, i, "deploy.from",
					 "deploy.from", -1, sn->from, st->from,
					 false);
			if (!rc && spec->steps[step_index(spec, st->from)]
						   .kind != KN_STEP_REGISTER)
				rc = step_fail(
					w, sn->from, i, "deploy.from", -1,
					"deploy.from must name a "
					"register step; \"%s\" is not one",
					st->from);
		}
	}
	return rc;
}

static const struct spec_kind WORKFLOW_KIND = {
	.kind = "Workflow",
	.root_name = "workflow",
	.what = "a workflow",
	.fields = workflow_fields,
	.n_fields = WF_COUNT,
};

static int read_workflow_root(struct walk *w, struct fy_node *root, void *obj)
{
	struct workflow_ctx ctx = {.spec = obj};
	int rc = spec_read_root(w, root, &WORKFLOW_KIND, &ctx, NULL);

	if (rc == 0)
		rc = check_step_names(w, &ctx);
	if (rc == 0)
		rc = order_steps(w, &ctx);
	if (rc == 0)
		rc = check_step_reads(w, &ctx);
	if (rc == 0)
		for (size_t i = 0; i < ctx.spec->n_steps; i++) {
			struct kn_workflow_step *st = &ctx.spec->steps[i];

			if (!st->on_failure_set)
				st->on_failure = ctx.spec->on_failure;
		}
	free(ctx.nodes);
	return rc;
}

int kn_workflow_spec_parse(const char *text, size_t len, const char *filename,
			   struct kn_workflow_spec **out, struct kn_error *err)
{
	struct kn_workflow_spec *spec = kn_xcalloc(1, sizeof(*spec));
	int rc = spec_parse_document(
		text, len, filename,
		"a mapping with kind: Workflow, name and steps",
		read_workflow_root, spec, err);

	if (rc < 0) {
		kn_workflow_spec_free(spec);
		return rc;
	}
	*out = spec;
	return 0;
}

static void requirements_release(struct kn_requirements *r)
{
	KN_FREE_ALL(r->gpu_model, r->driver_min, r->cuda_min);
	spec_free_strv(r->commands, r->n_commands);
	spec_free_strv(r->python_modules, r->n_python_modules);
	free(r->scratch_path);
}

void kn_workflow_spec_free(struct kn_workflow_spec *spec)
{
	if (!spec)
		return;
	for (size_t i = 0; i < spec->n_steps; i++) {
		struct kn_workflow_step *st = &spec->steps[i];

		free(st->name);
		spec_free_strv(st->needs, st->n_needs);
		for (size_t k = 0; k < st->n_when; k++) {
			KN_FREE_ALL(st->when[k].step, st->when[k].metric,
				    st->when[k].outcome);
		}
		free(st->when);
		requirements_release(&st->requires);
		for (size_t k = 0; k < st->n_inputs; k++) {
			KN_FREE_ALL(st->inputs[k].text, st->inputs[k].step,
				    st->inputs[k].path);
		}
		KN_FREE_ALL(st->inputs, st->job_file);
		kn_job_spec_free(st->job);
		KN_FREE_ALL(st->from, st->model, st->alias, st->signer,
			    st->deployment);
	}
	free(spec->steps);
	requirements_release(&spec->requires);
	KN_FREE_ALL(spec->order, spec->name, spec);
}

const struct kn_workflow_step *kn_workflow_step_find(
	const struct kn_workflow_spec *spec, const char *name)
{
	ssize_t i = step_index(spec, name);

	return i < 0 ? NULL : &spec->steps[i];
}

static const char *on_failure_name(enum kn_on_failure f)
{
	return f == KN_ON_FAILURE_RETRY	     ? "retry"
	       : f == KN_ON_FAILURE_CONTINUE ? "continue"
					     : "stop";
}

static json_t *requirements_json(const struct kn_requirements *r)
{
	json_t *o;

	if (!r->set)
		return json_null();
	o = json_object();
	if (r->gpu_count)
		json_object_set_new(
			o, "gpus",
			json_pack("{s:o, s:i}", "model",
				  spec_json_string_or_null(r->gpu_model),
				  "count", r->gpu_count));
	if (r->driver_min)
		json_object_set_new(o, "driver", json_string(r->driver_min));
	if (r->cuda_min)
		json_object_set_new(o, "cuda", json_string(r->cuda_min));
	if (r->n_commands)
		json_object_set_new(o, "commands",
				    spec_strv_json(r->commands, r->n_commands));
	if (r->n_python_modules)
		json_object_set_new(o, "python_modules",
				    spec_strv_json(r->python_modules,
						   r->n_python_modules));
	if (r->scratch_path)
		json_object_set_new(o, "scratch",
				    json_pack("{s:s, s:I}", "path",
					      r->scratch_path, "free_bytes",
					      (json_int_t)r->scratch_bytes));
	if (r->store)
		json_object_set_new(o, "store", json_true());
	return o;
}

json_t *kn_workflow_spec_to_json(const struct kn_workflow_spec *spec)
{
	static const char *const CMP[] = {"<", "<=", ">", ">=", "==", "!="};
	json_t *steps = json_array(), *order = json_array();

	for (size_t i = 0; i < spec->n_steps; i++) {
		const struct kn_workflow_step *st = &spec->steps[i];
		json_t *when = json_array(), *inputs = json_array();
		json_t *o;

		for (size_t k = 0; k < st->n_when; k++) {
			const struct kn_condition *c = &st->when[k];
			json_t *text = c->metric
				? json_sprintf("%s.metrics.%s %s %.17g",
					       c->step, c->metric, CMP[c->op],
					       c->number)
				: json_sprintf("%s.outcome %s %s", c->step,
					       CMP[c->op], c->outcome);
			json_array_append_new(when, text);
		}
		for (size_t k = 0; k < st->n_inputs; k++)
			json_array_append_new(inputs,
					      json_string(st->inputs[k].text));
		o = json_pack("{s:s, s:s, s:o, s:s, s:i, s:o, s:o, s:o}",
			      "name", st->name, "kind",
			      st->kind == KN_STEP_JOB	     ? "job"
			      : st->kind == KN_STEP_REGISTER ? "register"
							     : "deploy",
			      "needs", spec_strv_json(st->needs, st->n_needs),
			      "on_failure", on_failure_name(st->on_failure),
			      "retries", st->retries, "when", when, "inputs",
			      inputs, "requires",
			      requirements_json(&st->requires));
		if (st->job_file)
			json_object_set_new(o, "job_file",
					    json_string(st->job_file));
		if (st->job)
			json_object_set_new(o, "job",
					    kn_job_spec_to_json(st->job));
		if (st->kind == KN_STEP_REGISTER)
			json_object_set_new(
				o, "register",
				json_pack("{s:s, s:s, s:o, s:o}", "from",
					  st->from, "model", st->model, "alias",
					  spec_json_string_or_null(st->alias),
					  "signer",
					  spec_json_string_or_null(
						  st->signer)));
		if (st->kind == KN_STEP_DEPLOY)
			json_object_set_new(o, "deploy",
					    json_pack("{s:s, s:s}",
						      "deployment",
						      st->deployment, "from",
						      st->from));
		json_array_append_new(steps, o);
	}
	for (size_t i = 0; i < spec->n_steps; i++)
		json_array_append_new(
			order, json_string(spec->steps[spec->order[i]].name));
	return json_pack("{s:s, s:s, s:o, s:o, s:o}", "name", spec->name,
			 "on_failure", on_failure_name(spec->on_failure),
			 "requires", requirements_json(&spec->requires),
			 "steps", steps, "order", order);
}
