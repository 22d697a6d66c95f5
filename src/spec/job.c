/*
 * spec job: the job's fields (command, env, resources, checkpoint,
 * placement, inputs) as field tables for the walk in walk.c, and the
 * job spec's parse and free.
 *
 * Deployments and workflow steps hold a job: their tables reuse these
 * readers (a deployment begins with its job), and an inline job anywhere
 * is read by spec_read_job_or_file with this file's job table.
 */
#include "spec/internal.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Label keys (selector, tolerations) follow the Kubernetes length limit. */
#define LABEL_KEY_MAX 253
#define CHECKPOINT_MAX_KEEP 1000

#define DEFAULT_BACKOFF_MS (10 * 1000)
#define DEFAULT_BACKOFF_MAX_MS (10 * 60 * 1000)
#define DEFAULT_CKPT_EVERY_MS (10 * 60 * 1000)
#define DEFAULT_CKPT_KEEP 3
#define DEFAULT_CKPT_GRACE_MS (30 * 1000)

#define STRINGIFY(x) #x
#define NUMBER_TEXT(x) STRINGIFY(x)

static const char GPUS_ALLOWED[] =
	"must be an integer 0.." NUMBER_TEXT(KN_SPEC_MAX_GPUS)
	", a fraction between 0 and 1 (e.g. 0.5), or \"mig:<profile>\"";

/* --- command and env ---------------------------------------------------- */

static const char *const RESERVED_ENV[] = {
	"CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES", "RANK",
	"LOCAL_RANK",           "WORLD_SIZE",             "MASTER_ADDR",
	"MASTER_PORT",
};

static const char *env_name_problem(const char *name)
{
	const char *p = name;
	size_t i;

	if (!((*p >= 'A' && *p <= 'Z') || (*p >= 'a' && *p <= 'z') ||
	      *p == '_'))
		return "is not a valid variable name (letters, digits and _, "
		       "not starting with a digit)";
	for (p++; *p; p++)
		if (!((*p >= 'A' && *p <= 'Z') || (*p >= 'a' && *p <= 'z') ||
		      (*p >= '0' && *p <= '9') || *p == '_'))
			return "is not a valid variable name (letters, digits "
			       "and _, not starting with a digit)";
	for (i = 0; i < ARRAY_SIZE(RESERVED_ENV); i++)
		if (strcmp(name, RESERVED_ENV[i]) == 0)
			break;
	if (i < ARRAY_SIZE(RESERVED_ENV) || strncmp(name, "KILN_", 5) == 0)
		return "is set by kiln for each task and cannot be set in a "
		       "spec (reserved: CUDA_VISIBLE_DEVICES, "
		       "NVIDIA_VISIBLE_DEVICES, RANK, LOCAL_RANK, WORLD_SIZE, "
		       "MASTER_ADDR, MASTER_PORT, KILN_*)";
	return NULL;
}

static bool is_alnum(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
	       (c >= '0' && c <= '9');
}

static const char *label_key_problem(const char *key)
{
	size_t len = strlen(key), i;

	if (len == 0 || len > LABEL_KEY_MAX || !is_alnum(key[0]))
		goto bad;
	for (i = 1; i < len; i++)
		if (!is_alnum(key[i]) && !strchr("._-/", key[i]))
			goto bad;
	return NULL;
bad:
	return "is not a valid label name (letters, digits, '.', '_', '-' "
	       "and '/', starting with a letter or digit, at most 253 "
	       "characters)";
}


static int read_kind(struct walk *w, struct fy_node *node, void *target)
{
	(void)target;
	return spec_check_kind(w, node, "Job");
}

int spec_read_command(struct walk *w, struct fy_node *node, void *target)
{
	struct kn_job_spec *spec = target;

	return spec_read_text_list(
		w, node,
		"a non-empty list of strings (the program and "
		"its arguments), e.g. [\"python\", \"train.py\"]",
		true, &spec->command, &spec->n_command);
}

int spec_read_env(struct walk *w, struct fy_node *node, void *target)
{
	struct kn_job_spec *spec = target;

	return spec_read_string_map(w, node, "variable names to values",
				    env_name_problem, &spec->env, &spec->n_env);
}

/* --- resources ----------------------------------------------------------- */

/* "1g.10gb", "3g.40gb", "1g.10gb+me": checked by shape only. */
static bool valid_mig_profile(const char *p)
{
	size_t n;

	n = strspn(p, "0123456789");
	if (n < 1 || n > 2 || p[0] == '0' || p[n] != 'g' || p[n + 1] != '.')
		return false;
	p += n + 2;
	n = strspn(p, "0123456789");
	if (n < 1 || n > 4 || p[0] == '0' || strncmp(p + n, "gb", 2) != 0)
		return false;
	p += n + 2;
	if (*p == '\0')
		return true;
	if (*p != '+' || !(p[1] >= 'a' && p[1] <= 'z'))
		return false;
	for (p += 2; *p; p++)
		if (!((*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') ||
		      *p == '.'))
			return false;
	return true;
}

static int read_gpus(struct walk *w, struct fy_node *node, void *target)
{
	struct kn_resources *res = target;
	char got[GOT_BUF];
	struct value v;
	int64_t milli = 0;
	int rc = spec_read_thousandths(w, node, KN_SPEC_MAX_GPUS * KN_MILLI,
				       "a share of a GPU is", &v, &milli);

	if (rc < 0)
		return rc;
	if (rc == 0 && (milli < KN_MILLI || milli % KN_MILLI == 0)) {
		res->gpu_milli = (int)milli;
		return 0;
	}
	if (v.kind == V_STRING && strncmp(v.text, "mig:", 4) == 0) {
		if (!valid_mig_profile(v.text + 4))
			return spec_fail(
				w, node,
				"MIG profile must look like \"mig:1g.10gb\" "
				"(<n>g.<m>gb, optionally with a suffix "
				"such as \"+me\"); got %s",
				spec_describe(&v, got, sizeof(got)));
		res->mig_profile = kn_xstrdup(v.text + 4);
		res->gpu_milli = 0;
		return 0;
	}
	return spec_fail(w, node, "%s; got %s", GPUS_ALLOWED,
			 spec_describe(&v, got, sizeof(got)));
}

static int read_gpu_model(struct walk *w, struct fy_node *node, void *target)
{
	static const char allowed[] =
		"a GPU model name or a non-empty list of names, e.g. "
		"[\"H100\", \"A100\"]";
	struct kn_resources *res = target;
	char got[GOT_BUF];
	struct value v;
	int rc = spec_classify(w, node, &v);

	if (rc)
		return rc;
	if (v.kind == V_LIST)
		return spec_read_text_list(w, node, allowed, false,
					   &res->gpu_models,
					   &res->n_gpu_models);
	if ((v.kind != V_STRING && v.kind != V_INT && v.kind != V_FLOAT) ||
	    v.len == 0)
		return spec_fail(w, node, "must be %s; got %s", allowed,
				 spec_describe(&v, got, sizeof(got)));
	res->gpu_models = kn_xcalloc(2, sizeof(char *));
	res->gpu_models[0] = kn_xstrdup(v.text);
	res->n_gpu_models = 1;
	return 0;
}

static int read_cpus(struct walk *w, struct fy_node *node, void *target)
{
	struct kn_resources *res = target;
	char got[GOT_BUF];
	struct value v;
	int64_t milli = 0;
	int rc = spec_read_thousandths(w, node, KN_SPEC_MAX_CPUS * KN_MILLI,
				       "CPUs are", &v, &milli);

	if (rc < 0)
		return rc;
	if (rc == 0 && milli > 0) {
		res->cpu_milli = (int)milli;
		return 0;
	}
	return spec_fail(
		w, node,
		"must be a number of CPUs greater than 0 and at most %d "
		"(e.g. 0.5 or 4); got %s",
		KN_SPEC_MAX_CPUS, spec_describe(&v, got, sizeof(got)));
}

int spec_read_memory(struct walk *w, struct fy_node *node, void *target)
{
	struct kn_resources *res = target;
	char got[GOT_BUF];
	struct value v;
	int64_t bytes = 0;
	int rc = spec_classify(w, node, &v);

	if (rc)
		return rc;
	if ((v.kind != V_STRING && v.kind != V_INT) ||
	    kn_parse_size(v.text, &bytes) < 0 || bytes <= 0)
		return spec_fail(
			w, node,
			"must be a size greater than 0 such as 512Mi, 2Gi "
			"or 1G; got %s",
			spec_describe(&v, got, sizeof(got)));
	res->memory_bytes = bytes;
	return 0;
}

static int read_sharing(struct walk *w, struct fy_node *node, void *target)
{
	static const char *const modes[] = {"time-slicing", "mps", NULL};
	struct kn_resources *res = target;
	const char *mode;
	int rc = spec_read_choice(w, node, modes, "time-slicing or mps", &mode);

	if (rc)
		return rc;
	res->sharing = strcmp(mode, "mps") == 0 ? KN_SHARING_MPS
						: KN_SHARING_TIME_SLICING;
	return 0;
}

enum { RF_GPUS, RF_GPU_MODEL, RF_CPUS, RF_MEMORY, RF_SHARING, RF_PIDS,
       RF_COUNT };

static const struct field resource_fields[RF_COUNT] = {
	[RF_GPUS] = {.name = "gpus", .type = FT_CUSTOM, .read = read_gpus},
	[RF_GPU_MODEL] = {.name = "gpu_model", .type = FT_CUSTOM,
			  .read = read_gpu_model},
	[RF_CPUS] = {.name = "cpus", .type = FT_CUSTOM, .read = read_cpus},
	[RF_MEMORY] = {.name = "memory", .type = FT_CUSTOM,
		       .read = spec_read_memory},
	[RF_SHARING] = {.name = "sharing", .type = FT_CUSTOM,
			.read = read_sharing},
	/* Fewer than 16 and an ordinary shell pipeline cannot start. */
	[RF_PIDS] = {.name = "pids", .type = FT_INT,
		     .offset = offsetof(struct kn_resources, pids), .min = 16,
		     .max = KN_SPEC_MAX_PIDS},
};

_Static_assert(RF_COUNT <= MAX_FIELDS, "MAX_FIELDS");

int spec_read_resources(struct walk *w, struct fy_node *node, void *target)
{
	struct kn_job_spec *spec = target;
	struct fy_node_pair *seen[RF_COUNT];
	int gpu_milli;
	int rc = spec_walk_mapping(w, node, resource_fields, RF_COUNT,
				   &spec->resources, seen);

	if (rc || !seen[RF_SHARING])
		return rc;
	/* Sharing is how a share of a GPU is enforced; nothing else has one. */
	gpu_milli = spec->resources.gpu_milli;
	if (!spec->resources.mig_profile && gpu_milli > 0 &&
	    gpu_milli < KN_MILLI)
		return 0;
	return spec_fail_at_pair(w, seen[RF_SHARING], "sharing",
				 "applies only to a fraction of a GPU "
				 "(resources.gpus between 0 and 1, e.g. 0.5); "
				 "resources.gpus is %s",
				 spec->resources.mig_profile ? "a MIG profile"
				 : gpu_milli == 0 ? "not set"
						  : "a whole number");
}

/* --- checkpoint ---------------------------------------------------------- */

static int read_store(struct walk *w, struct fy_node *node, void *target)
{
	static const char *const schemes[] = {"file://", "https://",
					      "http://"};
	struct kn_checkpoint_policy *ckpt = target;
	char got[GOT_BUF];
	struct value v;
	size_t i;
	int rc = spec_want_text(w, node, false, "a store's name or a URL",
				&v);

	if (rc)
		return rc;
	/* A store the server's configuration names; which ones exist is
	   the server's to say when the job arrives. */
	if (spec_valid_name(v.text)) {
		ckpt->store = kn_xstrdup(v.text);
		return 0;
	}
	for (i = 0; i < ARRAY_SIZE(schemes); i++) {
		size_t n = strlen(schemes[i]);
		if (strncmp(v.text, schemes[i], n) == 0 && v.text[n]) {
			ckpt->store = kn_xstrdup(v.text);
			return 0;
		}
	}
	return spec_fail(w, node,
			 "must be a store's name (as the server's stores: "
			 "name it) or a URL starting with file://, https:// "
			 "or http://; got %s",
			 spec_describe(&v, got, sizeof(got)));
}

static int read_signal(struct walk *w, struct fy_node *node, void *target)
{
	static const char allowed[] =
		"a signal name such as SIGTERM, SIGUSR1 or INT";
	struct kn_checkpoint_policy *ckpt = target;
	char got[GOT_BUF];
	struct value v;
	int sig;
	int rc = spec_want_text(w, node, false, allowed, &v);

	if (rc)
		return rc;
	sig = kn_signal_from_name(v.text);
	if (sig < 0)
		return spec_fail(w, node, "must be %s; got %s", allowed,
				 spec_describe(&v, got, sizeof(got)));
	/* The task must be able to catch it to write a last checkpoint. */
	if (sig == SIGKILL || sig == SIGSTOP)
		return spec_fail(
			w, node,
			"must be a signal the task can catch (not SIGKILL "
			"or SIGSTOP); got %s",
			spec_describe(&v, got, sizeof(got)));
	ckpt->signal = sig;
	return 0;
}

static const struct field checkpoint_fields[] = {
	{.name = "every", .type = FT_DURATION,
	 .offset = offsetof(struct kn_checkpoint_policy, every_ms), .min = 1},
	{.name = "keep", .type = FT_INT,
	 .offset = offsetof(struct kn_checkpoint_policy, keep), .min = 1,
	 .max = CHECKPOINT_MAX_KEEP},
	{.name = "store", .type = FT_CUSTOM, .read = read_store},
	{.name = "grace", .type = FT_DURATION,
	 .offset = offsetof(struct kn_checkpoint_policy, grace_ms)},
	{.name = "signal", .type = FT_CUSTOM, .read = read_signal},
};

_Static_assert(ARRAY_SIZE(checkpoint_fields) <= MAX_FIELDS, "MAX_FIELDS");

static int read_checkpoint(struct walk *w, struct fy_node *node, void *target)
{
	struct kn_job_spec *spec = target;

	spec->checkpoint.set = true;
	return spec_walk_mapping(w, node, checkpoint_fields,
				 ARRAY_SIZE(checkpoint_fields),
				 &spec->checkpoint, NULL);
}

/* --- placement ----------------------------------------------------------- */

static int read_selector(struct walk *w, struct fy_node *node, void *target)
{
	struct kn_placement_spec *placement = target;

	return spec_read_string_map(w, node, "node label names to values",
				    label_key_problem, &placement->selector,
				    &placement->n_selector);
}

/* A label name (label_key_problem) into *out; what: "a taint name". */
static int read_label_key(struct walk *w, struct fy_node *node,
			  const char *what, char **out)
{
	const char *problem;
	struct value v;
	int rc = spec_want_nonempty_text(w, node, what, &v);

	if (rc)
		return rc;
	problem = label_key_problem(v.text);
	if (problem) {
		char quoted[GOT_BUF];

		spec_quote(quoted, sizeof(quoted), v.text, v.len, true);
		return spec_fail(w, node, "%s %s", quoted, problem);
	}
	*out = kn_xstrdup(v.text);
	return 0;
}

static int read_toleration_key(struct walk *w, struct fy_node *node,
			       void *target)
{
	struct kn_toleration *tol = target;

	return read_label_key(w, node, "a taint name", &tol->key);
}


static int read_toleration_operator(struct walk *w, struct fy_node *node,
				    void *target)
{
	static const char *const operators[] = {"Equal", "Exists", NULL};
	struct kn_toleration *tol = target;
	const char *op;
	int rc = spec_read_choice(w, node, operators, "Equal or Exists", &op);

	if (rc)
		return rc;
	tol->operator_ = kn_xstrdup(op);
	return 0;
}

static int read_toleration_value(struct walk *w, struct fy_node *node,
				 void *target)
{
	struct kn_toleration *tol = target;
	struct value v;
	int rc = spec_want_text(w, node, true, "a string", &v);

	if (rc)
		return rc;
	tol->value = kn_xstrdup(v.text);
	return 0;
}

static int read_toleration_effect(struct walk *w, struct fy_node *node,
				  void *target)
{
	static const char *const effects[] = {"NoSchedule",
					      "PreferNoSchedule", NULL};
	struct kn_toleration *tol = target;
	const char *effect;
	int rc = spec_read_choice(
		w, node, effects,
		"NoSchedule or PreferNoSchedule (or absent for "
		"any effect)",
		&effect);

	if (rc)
		return rc;
	tol->effect = kn_xstrdup(effect);
	return 0;
}

enum { TF_KEY, TF_OPERATOR, TF_VALUE, TF_EFFECT, TF_COUNT };

static const struct field toleration_fields[TF_COUNT] = {
	[TF_KEY] = {.name = "key", .type = FT_CUSTOM,
		    .read = read_toleration_key, .required = true},
	[TF_OPERATOR] = {.name = "operator", .type = FT_CUSTOM,
			 .read = read_toleration_operator},
	[TF_VALUE] = {.name = "value", .type = FT_CUSTOM,
		      .read = read_toleration_value},
	[TF_EFFECT] = {.name = "effect", .type = FT_CUSTOM,
		       .read = read_toleration_effect},
};

_Static_assert(TF_COUNT <= MAX_FIELDS, "MAX_FIELDS");

static int read_toleration(struct walk *w, struct fy_node *item, size_t i,
			   void *target)
{
	struct kn_placement_spec *placement = target;
	struct kn_toleration *tol = &placement->tolerations[i];
	struct fy_node_pair *seen[TF_COUNT];
	int rc;

	placement->n_tolerations = i + 1;
	rc = spec_walk_mapping(w, item, toleration_fields, TF_COUNT, tol,
			       seen);
	if (rc)
		return rc;
	if (!tol->operator_)
		tol->operator_ = kn_xstrdup("Equal");
	if (strcmp(tol->operator_, "Exists") == 0 && tol->value)
		return spec_fail_at_pair(w, seen[TF_VALUE], "value",
					 "must be absent when operator is "
					 "Exists");
	/* Equal without a value matches taints with an empty one. */
	if (!tol->value && strcmp(tol->operator_, "Equal") == 0)
		tol->value = kn_xstrdup("");
	return 0;
}

static int read_tolerations(struct walk *w, struct fy_node *node,
			    void *target)
{
	struct kn_placement_spec *placement = target;
	size_t count;
	int rc = spec_want_list(
		w, node, 0, -1,
		"a list of {key, operator, value, effect} mappings", &count);

	if (rc)
		return rc;
	placement->tolerations =
		kn_xcalloc(count + 1, sizeof(struct kn_toleration));
	return spec_walk_items(w, node, count, read_toleration, placement);
}

int spec_read_spread(struct walk *w, struct fy_node *node, void *target)
{
	static const char *const spreads[] = {"zone", "fault_domain", NULL};
	struct kn_placement_spec *placement = target;
	const char *spread;
	int rc = spec_read_choice(w, node, spreads, "zone or fault_domain",
				  &spread);

	if (rc)
		return rc;
	placement->spread = strcmp(spread, "zone") == 0 ?
				    KN_SPREAD_ZONE :
				    KN_SPREAD_FAULT_DOMAIN;
	return 0;
}

/* --- placement.affinity --- */

const char *const spec_affinity_ops[] = {
	[KN_AFFINITY_IN] = "In",
	[KN_AFFINITY_NOT_IN] = "NotIn",
	[KN_AFFINITY_EXISTS] = "Exists",
	[KN_AFFINITY_DOES_NOT_EXIST] = "DoesNotExist",
	NULL,
};

static int read_term_key(struct walk *w, struct fy_node *node, void *target)
{
	struct kn_affinity_term *term = target;

	return read_label_key(w, node, "a node label name", &term->key);
}

static int read_term_operator(struct walk *w, struct fy_node *node,
			      void *target)
{
	struct kn_affinity_term *term = target;
	const char *op;
	int rc = spec_read_choice(w, node, spec_affinity_ops,
				  "In, NotIn, Exists or DoesNotExist", &op);

	if (rc)
		return rc;
	for (int i = 0; spec_affinity_ops[i]; i++)
		if (spec_affinity_ops[i] == op)
			term->op = (enum kn_affinity_op)i;
	return 0;
}

enum { AF_KEY, AF_OPERATOR, AF_VALUES, AF_WEIGHT, AF_COUNT };

static const struct field preferred_fields[AF_COUNT] = {
	[AF_KEY] = {.name = "key", .type = FT_CUSTOM, .read = read_term_key,
		    .required = true},
	[AF_OPERATOR] = {.name = "operator", .type = FT_CUSTOM,
			 .read = read_term_operator, .required = true},
	[AF_VALUES] = {.name = "values", .type = FT_TEXT_LIST,
		       .offset = offsetof(struct kn_affinity_term, values),
		       .count_offset = offsetof(struct kn_affinity_term,
						n_values),
		       .allowed = "a non-empty list of label values, e.g. "
				  "[eastus-1, eastus-2]"},
	[AF_WEIGHT] = {.name = "weight", .type = FT_INT,
		       .offset = offsetof(struct kn_affinity_term, weight),
		       .min = 1, .max = 100, .required = true},
};

/* A required term has no weight: the table stops before it. */
#define REQUIRED_TERM_FIELDS AF_WEIGHT

_Static_assert(AF_COUNT <= MAX_FIELDS, "MAX_FIELDS");

/* values go with In and NotIn, and only with them. */
static int check_term(struct walk *w, struct fy_node *item,
		      const struct kn_affinity_term *term,
		      struct fy_node_pair **seen)
{
	bool wants_values =
		term->op == KN_AFFINITY_IN || term->op == KN_AFFINITY_NOT_IN;

	if (wants_values && !seen[AF_VALUES]) {
		char where[PATH_MAX_LEN];

		snprintf(where, sizeof(where), "%s", spec_section_name(w));
		spec_path_push_field(w, "values");
		return spec_fail_bare(w, item,
				      "missing required field \"values\" in %s "
				      "(operator %s compares the label with a "
				      "list of values)",
				      where, spec_affinity_ops[term->op]);
	}
	if (wants_values || !seen[AF_VALUES])
		return 0;
	return spec_fail_at_pair(w, seen[AF_VALUES], "values",
				 "must be absent when operator is %s (it "
				 "looks at the label name only)",
				 spec_affinity_ops[term->op]);
}

/* Where read_terms' items go: required or preferred terms. */
struct term_list {
	struct kn_affinity_term *terms;
	size_t *n;
	size_t n_fields;
};

static int read_term(struct walk *w, struct fy_node *item, size_t i,
		     void *target)
{
	struct term_list *list = target;
	struct kn_affinity_term *term = &list->terms[i];
	struct fy_node_pair *seen[AF_COUNT] = {0};
	int rc;

	*list->n = i + 1;
	rc = spec_walk_mapping(w, item, preferred_fields, list->n_fields, term,
			       seen);
	return rc ? rc : check_term(w, item, term, seen);
}

static int read_terms(struct walk *w, struct fy_node *node, size_t n_fields,
		      struct kn_affinity_term **out, size_t *n_out)
{
	struct term_list list = {.n = n_out, .n_fields = n_fields};
	size_t count;
	int rc = spec_want_list(
		w, node, 0, -1,
		n_fields == AF_COUNT
			? "a list of {key, operator, values, weight} mappings"
			: "a list of {key, operator, values} mappings",
		&count);

	if (rc)
		return rc;
	list.terms = kn_xcalloc(count + 1, sizeof(struct kn_affinity_term));
	*out = list.terms;
	return spec_walk_items(w, node, count, read_term, &list);
}

static int read_required(struct walk *w, struct fy_node *node, void *target)
{
	struct kn_placement_spec *placement = target;

	return read_terms(w, node, REQUIRED_TERM_FIELDS, &placement->required,
			  &placement->n_required);
}

static int read_preferred(struct walk *w, struct fy_node *node, void *target)
{
	struct kn_placement_spec *placement = target;

	return read_terms(w, node, AF_COUNT, &placement->preferred,
			  &placement->n_preferred);
}

static const struct field affinity_fields[] = {
	{.name = "required", .type = FT_CUSTOM, .read = read_required},
	{.name = "preferred", .type = FT_CUSTOM, .read = read_preferred},
};

_Static_assert(ARRAY_SIZE(affinity_fields) <= MAX_FIELDS, "MAX_FIELDS");

static int read_affinity(struct walk *w, struct fy_node *node, void *target)
{
	return spec_walk_mapping(w, node, affinity_fields,
				 ARRAY_SIZE(affinity_fields), target, NULL);
}

static const struct field placement_fields[] = {
	{.name = "selector", .type = FT_CUSTOM, .read = read_selector},
	{.name = "tolerations", .type = FT_CUSTOM, .read = read_tolerations},
	{.name = "spread", .type = FT_CUSTOM, .read = spec_read_spread},
	{.name = "affinity", .type = FT_CUSTOM, .read = read_affinity},
};

_Static_assert(ARRAY_SIZE(placement_fields) <= MAX_FIELDS, "MAX_FIELDS");

int spec_read_placement(struct walk *w, struct fy_node *node, void *target)
{
	struct kn_job_spec *spec = target;

	return spec_walk_mapping(w, node, placement_fields,
				 ARRAY_SIZE(placement_fields), &spec->placement,
				 NULL);
}

/* --- inputs -------------------------------------------------------------- */
static const char INPUTS_ALLOWED[] =
	"a non-empty list of file paths (relative to the spec's directory) "
	"or file://, http:// or https:// store URLs";

/*
 * The problem with one input, or NULL; *name_at is where its file name
 * (the last path segment) starts.
 */
static const char *input_problem(const char *t, const char **name_at)
{
	const char *scheme_end = strstr(t, "://"), *last;

	if (scheme_end) {
		size_t n = (size_t)(scheme_end - t);
		const char *rest = scheme_end + 3;

		if (n == 4 && !strncmp(t, "file", 4)) {
			if (rest[0] != '/')
				return "a file:// URL names an absolute path "
				       "(file:///DIR/NAME)";
		} else if ((n == 4 && !strncmp(t, "http", 4)) ||
			   (n == 5 && !strncmp(t, "https", 5))) {
			size_t host = strcspn(rest, "/");

			if (host == 0 || !rest[host])
				return "an http(s) URL names the store's host "
				       "and a blob (https://HOST/CONTAINER/"
				       "NAME)";
		} else {
			return "is neither a path nor a file://, http:// or "
			       "https:// URL";
		}
		/* Credentials come from the server's store configuration,
		   never from a URL that is shown and recorded. */
		if (strpbrk(rest, "?#"))
			return "a URL may not carry a query or fragment (the "
			       "store's credentials come from the server's "
			       "environment)";
	}
	last = strrchr(t, '/');
	*name_at = last ? last + 1 : t;
	if (!**name_at || !strcmp(*name_at, ".") || !strcmp(*name_at, ".."))
		return "must name a file (its last path segment is its name "
		       "in $KILN_INPUT_DIR)";
	return NULL;
}

static int read_inputs(struct walk *w, struct fy_node *node, void *target)
{
	struct kn_job_spec *spec = target;
	struct fy_node *item;
	void *iter = NULL;
	char **texts = NULL;
	size_t n = 0;
	int rc =
		spec_read_text_list(w, node, INPUTS_ALLOWED, false, &texts, &n);

	if (rc == 0 && n > KN_SPEC_MAX_INPUTS)
		rc = spec_fail(w, node, "has %zu inputs; at most %d", n,
			       KN_SPEC_MAX_INPUTS);
	if (rc) {
		spec_free_strv(texts, n);
		return rc;
	}
	spec->inputs = kn_xcalloc(n, sizeof(*spec->inputs));
	for (size_t i = 0; i < n && rc == 0; i++) {
		struct kn_job_input *in = &spec->inputs[i];
		const char *name = texts[i], *problem;
		size_t mark = spec_path_push_index(w, (int)i);

		item = fy_node_sequence_iterate(node, &iter);
		spec->n_inputs = i + 1;
		in->text = texts[i];
		texts[i] = NULL;
		if (!spec_scalar_position(item, &in->line, &in->column)) {
			in->line = 1;
			in->column = 1;
		}
		problem = input_problem(in->text, &name);
		if (problem) {
			rc = spec_fail(w, item, "%s; got \"%s\"", problem,
				       in->text);
			break;
		}
		in->name = kn_xstrdup(name);
		if (strstr(in->text, "://"))
			in->url = kn_xstrdup(in->text);
		for (size_t k = 0; k < i && rc == 0; k++)
			if (!strcmp(spec->inputs[k].name, in->name))
				rc = spec_fail(
					w, item,
					"lands in $KILN_INPUT_DIR as %s, as "
					"inputs[%zu] does; inputs need "
					"different file names",
					in->name, k);
		if (rc == 0)
			spec_path_pop(w, mark);
	}
	spec_free_strv(texts, n);
	return rc;
}

int kn_job_spec_resolve_inputs(struct kn_job_spec *spec, const char *dir,
			       const char *filename, struct kn_error *err)
{
	for (size_t i = 0; i < spec->n_inputs; i++) {
		struct kn_job_input *in = &spec->inputs[i];

		if (in->url)
			continue;
		if (in->text[0] == '/')
			in->url = kn_asprintf("file://%s", in->text);
		else if (dir)
			in->url = kn_asprintf("file://%s%s%s", dir,
					      dir[strlen(dir) - 1] == '/' ? ""
									 : "/",
					      in->text);
		else
			return kn_errorf(err, KN_EINVAL, "inputs",
					 "%s:%d:%d: inputs[%zu]: \"%s\" is "
					 "relative, and the spec file's "
					 "directory is unknown (submit it "
					 "from a file, or give an absolute "
					 "path)",
					 filename ? filename : "<spec>",
					 in->line, in->column, i, in->text);
	}
	return 0;
}

char *kn_job_inputs_for_shim(json_t *inputs)
{
	json_t *in;
	size_t i;

	json_array_foreach(inputs, i, in) {
		const char *url = json_string_value(json_object_get(in, "url"));
		const char *slash = url ? strrchr(url, '/') : NULL;
		size_t n;

		if (!slash)
			continue;
		n = (size_t)(slash - url);
		/* "file:///x" is the blob x of the store "file:///". */
		if (n >= 3 && !strncmp(slash - 3, "://", 3))
			n++;
		json_object_set_new(in, "store", json_stringn(url, n));
		json_object_set_new(in, "blob", json_string(slash + 1));
	}
	return json_dumps(inputs, JSON_COMPACT);
}

int kn_job_spec_check_step_job(const struct kn_job_spec *job,
			       const char *filename, size_t step,
			       const char *workflow, struct kn_error *err)
{
	if (job->array.count)
		return kn_errorf(err, KN_EINVAL, "array",
				 "%s: array: a workflow's job runs as one job "
				 "(steps[%zu] of %s); an array is submitted on "
				 "its own", filename, step, workflow);
	/* As an inline job's (refuse_step_job_inputs): one list per step. */
	if (!job->n_inputs)
		return 0;
	return kn_errorf(err, KN_EINVAL, "inputs",
			 "%s:%d:%d: inputs: a step's inputs go in the step's "
			 "inputs: list (steps[%zu] of %s), not in its job",
			 filename, job->inputs[0].line, job->inputs[0].column,
			 step, workflow);
}

/* --- the job ------------------------------------------------------------- */

enum {
	JF_KIND,
	JF_API_VERSION,
	JF_NAME,
	JF_COMMAND,
	JF_ENV,
	JF_WORKDIR,
	JF_RESOURCES,
	JF_TASKS,
	JF_RETRIES,
	JF_BACKOFF,
	JF_BACKOFF_MAX,
	JF_PRIORITY,
	JF_PREEMPTIBLE,
	JF_TIMEOUT,
	JF_CHECKPOINT,
	JF_PLACEMENT,
	JF_IMAGE,
	JF_INPUTS,
	JF_ARRAY,
	JF_TTY,
	JF_COUNT
};

static const struct field job_fields[JF_COUNT] = {
	[JF_KIND] = {.name = "kind", .type = FT_CUSTOM, .read = read_kind,
		     .required = true},
	[JF_API_VERSION] = SPEC_FIELD_API_VERSION,
	[JF_NAME] = SPEC_FIELD_JOB_NAME,
	[JF_COMMAND] = SPEC_FIELD_COMMAND,
	[JF_ENV] = SPEC_FIELD_ENV,
	[JF_WORKDIR] = SPEC_FIELD_WORKDIR,
	[JF_RESOURCES] = SPEC_FIELD_RESOURCES,
	[JF_TASKS] = {.name = "tasks", .type = FT_INT,
		      .offset = offsetof(struct kn_job_spec, tasks), .min = 1,
		      .max = KN_SPEC_MAX_TASKS},
	[JF_RETRIES] = {.name = "retries", .type = FT_INT,
			.offset = offsetof(struct kn_job_spec, retries),
			.min = 0, .max = KN_SPEC_MAX_RETRIES},
	[JF_BACKOFF] = {.name = "backoff", .type = FT_DURATION,
			.offset = offsetof(struct kn_job_spec, backoff_ms)},
	[JF_BACKOFF_MAX] = {.name = "backoff_max", .type = FT_DURATION,
			    .offset = offsetof(struct kn_job_spec,
					       backoff_max_ms)},
	[JF_PRIORITY] = SPEC_FIELD_PRIORITY,
	[JF_PREEMPTIBLE] = {.name = "preemptible", .type = FT_BOOL,
			    .offset = offsetof(struct kn_job_spec,
					       preemptible)},
	[JF_TIMEOUT] = {.name = "timeout", .type = FT_DURATION,
			.offset = offsetof(struct kn_job_spec, timeout_ms),
			.zero_is_none = true},
	[JF_CHECKPOINT] = {.name = "checkpoint", .type = FT_CUSTOM,
			   .read = read_checkpoint},
	[JF_PLACEMENT] = SPEC_FIELD_PLACEMENT,
	[JF_IMAGE] = {.name = "image", .type = FT_TEXT,
		      .offset = offsetof(struct kn_job_spec, image)},
	[JF_INPUTS] = {.name = "inputs", .type = FT_CUSTOM,
		       .read = read_inputs},
	[JF_ARRAY] = {.name = "array", .type = FT_CUSTOM,
		      .read = spec_read_array},
	[JF_TTY] = {.name = "tty", .type = FT_BOOL,
		    .offset = offsetof(struct kn_job_spec, tty)},
};

_Static_assert(JF_COUNT <= MAX_FIELDS, "MAX_FIELDS");

const struct section *spec_job_sections(size_t *n)
{
	static const struct section all[] = {
		{"", job_fields, ARRAY_SIZE(job_fields)},
		{"array", spec_array_fields, SPEC_ARRAY_FIELDS},
		{"resources", resource_fields, ARRAY_SIZE(resource_fields)},
		{"checkpoint", checkpoint_fields,
		 ARRAY_SIZE(checkpoint_fields)},
		{"placement", placement_fields, ARRAY_SIZE(placement_fields)},
		{"placement.affinity", affinity_fields,
		 ARRAY_SIZE(affinity_fields)},
	};

	*n = ARRAY_SIZE(all);
	return all;
}

void spec_job_defaults(struct kn_job_spec *spec)
{
	spec->tasks = 1;
	spec->backoff_ms = DEFAULT_BACKOFF_MS;
	spec->backoff_max_ms = DEFAULT_BACKOFF_MAX_MS;
	spec->checkpoint.every_ms = DEFAULT_CKPT_EVERY_MS;
	spec->checkpoint.keep = DEFAULT_CKPT_KEEP;
	spec->checkpoint.grace_ms = DEFAULT_CKPT_GRACE_MS;
	spec->checkpoint.signal = SIGTERM;
}

/* backoff doubles up to backoff_max, so the first must not exceed it. */
int spec_check_backoff(struct walk *w, const struct kn_job_spec *spec,
		       struct fy_node_pair *backoff,
		       struct fy_node_pair *backoff_max)
{
	char first[32], cap[32];

	if (spec->backoff_ms <= spec->backoff_max_ms)
		return 0;
	kn_format_duration(spec->backoff_ms, first, sizeof(first));
	kn_format_duration(spec->backoff_max_ms, cap, sizeof(cap));
	if (backoff_max)
		return spec_fail_at_pair(
			w, backoff_max, "backoff_max",
			"must be at least backoff (%s); got %s", first, cap);
	return spec_fail_at_pair(w, backoff, "backoff",
				 "must be at most backoff_max (%s); got %s",
				 cap, first);
}

/*
 * A job given by its file (relative to the owner's file, read by the
 * client) or inline, where kind and name may be left out. inputs_reader,
 * when set, replaces how an inline job's inputs: is read.
 */
int spec_read_job_or_file(struct walk *w, struct fy_node *node,
			  const char *owner, field_read_fn inputs_reader,
			  char **job_file, struct kn_job_spec **job)
{
	struct field fields[JF_COUNT];
	struct fy_node_pair *seen[JF_COUNT];
	struct value v;
	int rc = spec_classify(w, node, &v);

	if (rc)
		return rc;
	if (v.kind == V_STRING) {
		if (v.len == 0)
			return spec_fail(
				w, node,
				"must be a job spec's file or an inline "
				"job; got an empty string");
		*job_file = kn_xstrdup(v.text);
		return 0;
	}
	if (v.kind != V_MAP)
		return spec_fail(w, node,
				 "must be a job spec's file (relative to the "
				 "%s's) or an inline job mapping", owner);
	memcpy(fields, job_fields, sizeof(fields));
	fields[JF_KIND].required = false;
	fields[JF_NAME].required = false;
	if (inputs_reader)
		fields[JF_INPUTS].read = inputs_reader;
	*job = kn_xcalloc(1, sizeof(**job));
	spec_job_defaults(*job);
	rc = spec_walk_mapping(w, node, fields, JF_COUNT, *job, seen);
	if (rc)
		return rc;
	if (seen[JF_ARRAY])
		return spec_fail_at_pair(w, seen[JF_ARRAY], "array",
					 "a %s's job runs as one job; an "
					 "array is submitted on its own",
					 owner);
	return spec_check_backoff(w, *job, seen[JF_BACKOFF],
				  seen[JF_BACKOFF_MAX]);
}

static const struct spec_kind JOB_KIND = {
	.kind = "Job",
	.root_name = "job",
	.what = "a job spec",
	.fields = job_fields,
	.n_fields = JF_COUNT,
};

static int read_job_root(struct walk *w, struct fy_node *root, void *obj)
{
	struct kn_job_spec *spec = obj;
	struct fy_node_pair *seen[JF_COUNT];
	int rc;

	if (spec_root_is_devenv(root))
		return spec_read_devenv_root(w, root, spec);
	rc = spec_read_root(w, root, &JOB_KIND, spec, seen);
	if (rc)
		return rc;
	return spec_check_backoff(w, spec, seen[JF_BACKOFF],
				  seen[JF_BACKOFF_MAX]);
}

int kn_job_spec_parse(const char *text, size_t len, const char *filename,
		      struct kn_job_spec **out, struct kn_error *err)
{
	struct kn_job_spec *spec = kn_xcalloc(1, sizeof(*spec));
	int rc;

	spec_job_defaults(spec);
	rc = spec_parse_document(text, len, filename,
				 "a mapping with kind: Job, name and command",
				 read_job_root, spec, err);
	if (rc < 0) {
		kn_job_spec_free(spec);
		return rc;
	}
	*out = spec;
	return 0;
}

/* --- free --------------------------------------------------------------- */

static void free_kvs(struct kn_kv *kvs, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++) {
		KN_FREE_ALL(kvs[i].key, kvs[i].value);
	}
	free(kvs);
}

void spec_free_strv(char **v, size_t n)
{
	size_t i;

	for (i = 0; v && i < n; i++)
		free(v[i]);
	free(v);
}

static void free_terms(struct kn_affinity_term *terms, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		free(terms[i].key);
		spec_free_strv(terms[i].values, terms[i].n_values);
	}
	free(terms);
}

void kn_job_spec_free(struct kn_job_spec *spec)
{
	size_t i;

	if (!spec)
		return;
	free(spec->name);
	spec_free_strv(spec->command, spec->n_command);
	free_kvs(spec->env, spec->n_env);
	KN_FREE_ALL(spec->workdir, spec->image);
	for (i = 0; i < spec->n_inputs; i++) {
		KN_FREE_ALL(spec->inputs[i].text, spec->inputs[i].name,
			    spec->inputs[i].url);
	}
	KN_FREE_ALL(spec->inputs, spec->resources.mig_profile);
	spec_free_strv(spec->resources.gpu_models,
		       spec->resources.n_gpu_models);
	free(spec->checkpoint.store);
	free_kvs(spec->placement.selector, spec->placement.n_selector);
	for (i = 0; i < spec->placement.n_tolerations; i++) {
		struct kn_toleration *t = &spec->placement.tolerations[i];
		KN_FREE_ALL(t->key, t->operator_, t->value, t->effect);
	}
	free(spec->placement.tolerations);
	free_terms(spec->placement.required, spec->placement.n_required);
	free_terms(spec->placement.preferred, spec->placement.n_preferred);
	free(spec);
}
