/*
 * spec job JSON: a parsed job spec as the JSON the API and the store use
 * (kn_job_spec_to_json: every field, defaults filled in) and as input
 * text that parses back to the same spec (kn_job_spec_to_input_text).
 */
#include "spec/internal.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

json_t *spec_json_string_or_null(const char *s)
{
	return s ? json_string(s) : json_null();
}

json_t *spec_strv_json(char *const *v, size_t n)
{
	json_t *arr = json_array();
	size_t i;

	for (i = 0; v && i < n; i++)
		json_array_append_new(arr, spec_json_string_or_null(v[i]));
	return arr;
}

static json_t *kvs_json(const struct kn_kv *kvs, size_t n)
{
	json_t *obj = json_object();
	size_t i;

	for (i = 0; i < n; i++)
		if (kvs[i].key)
			json_object_set_new(
				obj, kvs[i].key,
				spec_json_string_or_null(kvs[i].value));
	return obj;
}

/* Whole numbers as integers, shares as reals: 2, 0.5. */
static json_t *milli_json(int milli)
{
	if (milli % KN_MILLI == 0)
		return json_integer(milli / KN_MILLI);
	return json_real((double)milli / KN_MILLI);
}

static json_t *gpus_json(const struct kn_resources *res)
{
	if (res->mig_profile) {
		char *s = kn_asprintf("mig:%s", res->mig_profile);
		json_t *j = json_string(s);
		free(s);
		return j;
	}
	return milli_json(res->gpu_milli);
}

static json_t *terms_json(const struct kn_affinity_term *terms, size_t n,
			  bool weighted)
{
	json_t *arr = json_array();

	for (size_t i = 0; i < n; i++) {
		json_t *t =
			json_pack("{s:o, s:s}", "key",
				  spec_json_string_or_null(terms[i].key),
				  "operator", spec_affinity_ops[terms[i].op]);

		if (terms[i].values)
			json_object_set_new(t, "values",
					    spec_strv_json(terms[i].values,
							   terms[i].n_values));
		if (weighted)
			json_object_set_new(t, "weight",
					    json_integer(terms[i].weight));
		json_array_append_new(arr, t);
	}
	return arr;
}

/* Only a share is shared: null otherwise. */
static json_t *sharing_json(const struct kn_resources *res)
{
	if (res->mig_profile || res->gpu_milli <= 0 ||
	    res->gpu_milli >= KN_MILLI)
		return json_null();
	return json_string(res->sharing == KN_SHARING_MPS ? "mps"
							  : "time-slicing");
}

static const struct {
	const char *name;
	int number;
} SIGNALS[] = {
	{"HUP", SIGHUP},       {"INT", SIGINT},     {"QUIT", SIGQUIT},
	{"ILL", SIGILL},       {"TRAP", SIGTRAP},   {"ABRT", SIGABRT},
	{"BUS", SIGBUS},       {"FPE", SIGFPE},     {"KILL", SIGKILL},
	{"USR1", SIGUSR1},     {"SEGV", SIGSEGV},   {"USR2", SIGUSR2},
	{"PIPE", SIGPIPE},     {"ALRM", SIGALRM},   {"TERM", SIGTERM},
	{"CHLD", SIGCHLD},     {"CONT", SIGCONT},   {"STOP", SIGSTOP},
	{"TSTP", SIGTSTP},     {"TTIN", SIGTTIN},   {"TTOU", SIGTTOU},
	{"URG", SIGURG},       {"XCPU", SIGXCPU},   {"XFSZ", SIGXFSZ},
	{"VTALRM", SIGVTALRM}, {"PROF", SIGPROF},   {"WINCH", SIGWINCH},
	{"IO", SIGIO},         {"PWR", SIGPWR},     {"SYS", SIGSYS},
};

/* Highest signal number accepted as digits. */
#define SIGNAL_NUMBER_MAX 64

int kn_signal_from_name(const char *name)
{
	size_t i;

	if (!name || !*name)
		return -1;
	if (name[0] >= '0' && name[0] <= '9') {
		int n = 0;
		for (i = 0; name[i]; i++) {
			if (name[i] < '0' || name[i] > '9')
				return -1;
			n = n * 10 + (name[i] - '0');
			if (n > SIGNAL_NUMBER_MAX)
				return -1;
		}
		return n >= 1 ? n : -1;
	}
	if (strncasecmp(name, "SIG", 3) == 0)
		name += 3;
	for (i = 0; i < ARRAY_SIZE(SIGNALS); i++)
		if (strcasecmp(name, SIGNALS[i].name) == 0)
			return SIGNALS[i].number;
	return -1;
}

/* "SIGTERM", or the number as text for signals without a name here. */
static json_t *signal_json(int sig)
{
	char buf[16];
	size_t i;

	for (i = 0; i < ARRAY_SIZE(SIGNALS); i++)
		if (SIGNALS[i].number == sig) {
			snprintf(buf, sizeof(buf), "SIG%s", SIGNALS[i].name);
			return json_string(buf);
		}
	snprintf(buf, sizeof(buf), "%d", sig);
	return json_string(buf);
}

json_t *kn_job_spec_to_json(const struct kn_job_spec *spec)
{
	static const char *const spreads[] = {
		[KN_SPREAD_NONE] = NULL,
		[KN_SPREAD_ZONE] = "zone",
		[KN_SPREAD_FAULT_DOMAIN] = "fault_domain",
	};
	const struct kn_resources *res = &spec->resources;
	const struct kn_checkpoint_policy *ckpt = &spec->checkpoint;
	const struct kn_placement_spec *pl = &spec->placement;
	json_t *tolerations = json_array();
	json_t *checkpoint = json_null(), *doc;
	size_t i;

	for (i = 0; i < pl->n_tolerations; i++) {
		const struct kn_toleration *t = &pl->tolerations[i];
		json_array_append_new(
			tolerations,
			json_pack("{s:o, s:o, s:o, s:o}", "key",
				  spec_json_string_or_null(t->key), "operator",
				  spec_json_string_or_null(t->operator_),
				  "value", spec_json_string_or_null(t->value),
				  "effect",
				  spec_json_string_or_null(t->effect)));
	}
	if (ckpt->set) {
		json_decref(checkpoint);
		checkpoint = json_pack(
			"{s:I, s:i, s:o, s:I, s:o}", "every_ms",
			(json_int_t)ckpt->every_ms, "keep", ckpt->keep, "store",
			spec_json_string_or_null(ckpt->store), "grace_ms",
			(json_int_t)ckpt->grace_ms, "signal",
			signal_json(ckpt->signal));
	}
	doc = json_pack(
		"{s:s, s:o, s:o, s:o, s:o,"
		" s:{s:o, s:i, s:o, s:o, s:i, s:I, s:o},"
		" s:i, s:i, s:I, s:I, s:i, s:b, s:I, s:o,"
		" s:{s:o, s:o, s:o, s:{s:o, s:o}}}",
		"kind", spec->devenv.set ? "DevEnvironment" : "Job", "name",
		spec_json_string_or_null(spec->name),
		"command", spec_strv_json(spec->command, spec->n_command),
		"env", kvs_json(spec->env, spec->n_env), "workdir",
		spec_json_string_or_null(spec->workdir), "resources", "gpus",
		gpus_json(res), "gpu_milli", res->gpu_milli, "gpu_model",
		spec_strv_json(res->gpu_models, res->n_gpu_models), "cpus",
		milli_json(res->cpu_milli), "cpu_milli", res->cpu_milli,
		"memory_bytes", (json_int_t)res->memory_bytes, "sharing",
		sharing_json(res), "tasks", spec->tasks, "retries",
		spec->retries, "backoff_ms", (json_int_t)spec->backoff_ms,
		"backoff_max_ms", (json_int_t)spec->backoff_max_ms, "priority",
		spec->priority, "preemptible", spec->preemptible, "timeout_ms",
		(json_int_t)spec->timeout_ms, "checkpoint", checkpoint,
		"placement", "selector", kvs_json(pl->selector, pl->n_selector),
		"tolerations", tolerations, "spread",
		spec_json_string_or_null(pl->spread <= KN_SPREAD_FAULT_DOMAIN
						 ? spreads[pl->spread]
						 : NULL),
		"affinity", "required",
		terms_json(pl->required, pl->n_required, false), "preferred",
		terms_json(pl->preferred, pl->n_preferred, true));
	if (spec->image)
		json_object_set_new(doc, "image", json_string(spec->image));
	if (spec->tty)
		json_object_set_new(doc, "tty", json_true());
	if (spec->devenv.set)
		json_object_set_new(
			doc, "devenv",
			json_pack("{s:I, s:I, s:o}", "idle_timeout_ms",
				  (json_int_t)spec->devenv.idle_timeout_ms,
				  "max_duration_ms",
				  (json_int_t)spec->devenv.max_duration_ms,
				  "idle_gpu_utilization",
				  milli_json(spec->devenv.idle_gpu_milli)));
	if (spec->array.count)
		json_object_set_new(doc, "array",
				    json_pack("{s:i, s:i, s:i}", "first",
					      spec->array.first, "count",
					      spec->array.count, "parallel",
					      spec->array.parallel));
	if (res->pids)
		json_object_set_new(json_object_get(doc, "resources"), "pids",
				    json_integer(res->pids));
	if (spec->n_inputs) {
		json_t *inputs = json_array();

		for (i = 0; i < spec->n_inputs; i++)
			json_array_append_new(
				inputs,
				json_pack("{s:s, s:s, s:o}", "input",
					  spec->inputs[i].text, "name",
					  spec->inputs[i].name, "url",
					  spec_json_string_or_null(
						  spec->inputs[i].url)));
		json_object_set_new(doc, "inputs", inputs);
	}
	return doc;
}

/* --- the input form of a job spec ---------------------------------------- */

static json_t *duration_text(int64_t ms)
{
	char buf[32];

	snprintf(buf, sizeof(buf), "%lldms", (long long)ms);
	return json_string(buf);
}

static json_t *input_resources(const struct kn_resources *res)
{
	json_t *o = json_object(), *sharing = sharing_json(res);

	if (res->mig_profile || res->gpu_milli)
		json_object_set_new(o, "gpus", gpus_json(res));
	if (res->n_gpu_models)
		json_object_set_new(o, "gpu_model",
				    spec_strv_json(res->gpu_models,
						   res->n_gpu_models));
	if (res->cpu_milli)
		json_object_set_new(o, "cpus", milli_json(res->cpu_milli));
	if (res->memory_bytes)
		json_object_set_new(o, "memory",
				    json_integer(res->memory_bytes));
	if (res->pids)
		json_object_set_new(o, "pids", json_integer(res->pids));
	if (json_is_null(sharing))
		json_decref(sharing);
	else
		json_object_set_new(o, "sharing", sharing);
	return o;
}

static json_t *input_placement(const struct kn_placement_spec *pl)
{
	static const char *const spreads[] = {
		[KN_SPREAD_ZONE] = "zone",
		[KN_SPREAD_FAULT_DOMAIN] = "fault_domain",
	};
	json_t *o = json_object(), *tol = json_array();

	json_object_set_new(o, "selector",
			    kvs_json(pl->selector, pl->n_selector));
	for (size_t i = 0; i < pl->n_tolerations; i++) {
		const struct kn_toleration *t = &pl->tolerations[i];
		json_t *jt = json_pack("{s:s, s:s}", "key", t->key, "operator",
				       t->operator_);

		if (t->value && strcmp(t->operator_, "Exists") != 0)
			json_object_set_new(jt, "value", json_string(t->value));
		if (t->effect)
			json_object_set_new(jt, "effect",
					    json_string(t->effect));
		json_array_append_new(tol, jt);
	}
	json_object_set_new(o, "tolerations", tol);
	if (pl->spread == KN_SPREAD_ZONE ||
	    pl->spread == KN_SPREAD_FAULT_DOMAIN)
		json_object_set_new(o, "spread",
				    json_string(spreads[pl->spread]));
	if (pl->n_required || pl->n_preferred) {
		json_t *aff = json_object();
		if (pl->n_required)
			json_object_set_new(aff, "required",
					    terms_json(pl->required,
						       pl->n_required, false));
		if (pl->n_preferred)
			json_object_set_new(aff, "preferred",
					    terms_json(pl->preferred,
						       pl->n_preferred, true));
		json_object_set_new(o, "affinity", aff);
	}
	return o;
}

/* A dev environment has only its own fields and the job's it keeps
   (spec/dev_environment.c). */
static json_t *devenv_input(const struct kn_job_spec *spec, const char *name)
{
	const struct kn_devenv_policy *d = &spec->devenv;
	json_t *o = json_pack(
		"{s:s, s:s, s:o, s:o, s:o, s:i, s:o, s:o, s:o, s:o}", "kind",
		"DevEnvironment", "name", name ? name : spec->name, "command",
		spec_strv_json(spec->command, spec->n_command), "env",
		kvs_json(spec->env, spec->n_env), "resources",
		input_resources(&spec->resources), "priority", spec->priority,
		"placement", input_placement(&spec->placement), "idle_timeout",
		duration_text(d->idle_timeout_ms), "max_duration",
		d->max_duration_ms ? duration_text(d->max_duration_ms)
				   : json_integer(0),
		"idle_gpu_utilization", milli_json(d->idle_gpu_milli));

	if (spec->workdir)
		json_object_set_new(o, "workdir", json_string(spec->workdir));
	if (spec->image)
		json_object_set_new(o, "image", json_string(spec->image));
	return o;
}

char *kn_job_spec_to_input_text(const struct kn_job_spec *spec,
				const char *name)
{
	json_t *o, *env;
	char *text;

	if (spec->devenv.set) {
		o = devenv_input(spec, name);
		goto dump;
	}
	env = kvs_json(spec->env, spec->n_env);
	o = json_pack(
		"{s:s, s:s, s:o, s:o, s:o, s:i, s:i, s:o, s:o, s:i, s:b,"
		" s:o, s:o}",
		"kind", "Job", "name", name ? name : spec->name, "command",
		spec_strv_json(spec->command, spec->n_command), "env", env,
		"resources", input_resources(&spec->resources), "tasks",
		spec->tasks, "retries", spec->retries, "backoff",
		duration_text(spec->backoff_ms), "backoff_max",
		duration_text(spec->backoff_max_ms), "priority", spec->priority,
		"preemptible", spec->preemptible, "timeout",
		spec->timeout_ms ? duration_text(spec->timeout_ms)
				 : json_integer(0),
		"placement", input_placement(&spec->placement));
	if (spec->workdir)
		json_object_set_new(o, "workdir", json_string(spec->workdir));
	if (spec->tty)
		json_object_set_new(o, "tty", json_true());
	if (spec->array.count) {
		const struct kn_job_array *a = &spec->array;
		char range[48];
		int len = snprintf(range, sizeof(range), "%d-%d", a->first,
				   a->first + a->count - 1);

		if (a->parallel)
			snprintf(range + len, sizeof(range) - (size_t)len,
				 "%%%d", a->parallel);
		json_object_set_new(o, "array", json_string(range));
	}
	if (spec->n_inputs) {
		json_t *inputs = json_array();

		for (size_t i = 0; i < spec->n_inputs; i++)
			json_array_append_new(
				inputs, json_string(spec->inputs[i].text));
		json_object_set_new(o, "inputs", inputs);
	}
	if (spec->checkpoint.set) {
		const struct kn_checkpoint_policy *c = &spec->checkpoint;
		json_t *ck = json_pack("{s:o, s:i, s:o, s:o}", "every",
				       duration_text(c->every_ms), "keep",
				       c->keep, "grace",
				       duration_text(c->grace_ms), "signal",
				       signal_json(c->signal));
		if (c->store)
			json_object_set_new(ck, "store", json_string(c->store));
		json_object_set_new(o, "checkpoint", ck);
	}
dump:
	/* Shares are thousandths: ten digits print them exactly (0.1, not
	 * 0.10000000000000001, which the parser would refuse). */
	text = json_dumps(o, JSON_COMPACT | JSON_SORT_KEYS |
				     JSON_REAL_PRECISION(10));
	json_decref(o);
	return text;
}
