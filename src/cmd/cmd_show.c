/*
 * kiln show: one job for a person — its settings and timeline, then each
 * attempt with its tasks — or the server's JSON with -o json.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "cmd/cli.h"
#include "cmd/cli_client.h"

static cli_runner cmd_show;

const struct cli_command cmd_show_entry = {
	.name = "show",
	.run = cmd_show,
	.summary = "show a job, its attempts and their tasks",
	.help = "usage: kiln show ID|ID[K] [-o table|json|yaml|name]\n"
		"\n"
		"Show job ID: name, state, owner, priority, tasks, resources, when it\n"
		"was submitted, started and ended, retries, the reason it is\n"
		"queued or ended, its inputs (short sha256 once fetched) and\n"
		"outputs; then each attempt with its tasks (rank, node, devices,\n"
		"exit). For a job array, its elements (index, id, state, attempts,\n"
		"exit); ID[K] shows element K alone.\n"
		"\n"
		"  -o json  print the server's JSON, including the spec\n",
};

/* "  label:     value", the value cleaned of control characters. */
static void field(const char *label, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

static void field(const char *label, const char *fmt, ...)
{
	char line[2048], clean[2048], tag[32];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	cli_clean(clean, line, sizeof(clean));
	/* An empty label continues the field above. */
	snprintf(tag, sizeof(tag), "%s%s", label, *label ? ":" : "");
	printf("  %-12s%s\n", tag, clean);
}

/* Useful and lost task time over all attempts, when any attempt ended. */
static void show_goodput(json_t *g)
{
	json_t *pct = json_object_get(g, "percent");
	char useful[32], lost[32];

	if (!json_is_number(pct))
		return;
	kn_format_duration((int64_t)(json_number_value(json_object_get(
					     g, "useful_task_seconds")) * 1000),
			   useful, sizeof(useful));
	kn_format_duration((int64_t)(json_number_value(json_object_get(
					     g, "lost_task_seconds")) * 1000),
			   lost, sizeof(lost));
	field("goodput", "%.1f%% (useful %s, lost %s of task time)",
	      json_number_value(pct), useful, lost);
}

static void show_outputs(json_t *outputs)
{
	size_t i;
	json_t *o;

	json_array_foreach(outputs, i, o) {
		char size[32], name[256];
		kn_format_bytes(cli_json_int(o, "size"), size, sizeof(size));
		cli_clean(name, cli_json_str(o, "name"), sizeof(name));
		field(i == 0 ? "outputs" : "", "%s  %s  sha256:%.16s…", name,
		      size, cli_json_str(o, "sha256"));
	}
}

/* Submit-time overrides as the flags that gave them: "--gpus 2 --env A=1". */
static void show_overrides(json_t *overrides)
{
	struct kn_buf b;
	const char *key, *k;
	json_t *v, *e;

	if (!json_object_size(overrides))
		return;
	kn_buf_init(&b, SIZE_MAX);
	json_object_foreach(overrides, key, v) {
		char *text;

		if (!strcmp(key, "env")) {
			json_object_foreach(v, k, e)
				kn_buf_printf(&b, " --env %s=%s", k,
					      json_string_value(e)
						      ? json_string_value(e)
						      : "");
			continue;
		}
		if (json_is_true(v)) {
			kn_buf_printf(&b, " --%s", key);
			continue;
		}
		text = json_is_string(v) ? kn_xstrdup(json_string_value(v))
					 : json_dumps(v, JSON_ENCODE_ANY);
		kn_buf_printf(&b, " --%s %s", key, text ? text : "");
		free(text);
	}
	field("overrides", "%s", b.data + 1);
	kn_buf_release(&b);
}

/* Each input as fetched, or "not fetched yet" before an attempt has. */
static void show_inputs(json_t *inputs)
{
	size_t i;
	json_t *in;

	json_array_foreach(inputs, i, in) {
		const char *digest =
			json_string_value(json_object_get(in, "sha256"));
		char size[32], name[256], text[1024];

		cli_clean(name, cli_json_str(in, "name"), sizeof(name));
		cli_clean(text, cli_json_str(in, "input"), sizeof(text));
		if (digest) {
			kn_format_bytes(cli_json_int(in, "size"), size,
					 sizeof(size));
			field(i == 0 ? "inputs" : "", "%s  %s  sha256:%.16s…  %s",
			      name, size, digest, text);
		} else {
			field(i == 0 ? "inputs" : "", "%s  not fetched yet  %s",
			      name, text);
		}
	}
}

static bool is_terminal(const char *state)
{
	return !strcmp(state, "succeeded") || !strcmp(state, "failed") ||
	       !strcmp(state, "cancelled");
}

static void describe_resources(json_t *res, struct kn_buf *out)
{
	json_t *gpus = json_object_get(res, "gpus");
	json_t *models = json_object_get(res, "gpu_model");
	json_t *model;
	int64_t cpus = cli_json_int(res, "cpus");
	int64_t memory = cli_json_int(res, "memory_bytes");
	char buf[64];
	size_t i;

	cli_format_gpus(gpus, buf, sizeof(buf));
	if (json_is_string(gpus))
		kn_buf_printf(out, "%s per task", buf);
	else if (!strcmp(buf, "0"))
		kn_buf_printf(out, "no GPU");
	else
		kn_buf_printf(out, "%s GPU%s per task", buf,
			      strcmp(buf, "1") && strchr(buf, '.') == NULL ? "s"
									   : "");
	json_array_foreach(models, i, model)
		kn_buf_printf(out, "%s%s", i ? " or " : " (",
			      json_string_value(model) ? json_string_value(model)
						       : "?");
	if (json_array_size(models))
		kn_buf_printf(out, ")");
	if (json_is_real(json_object_get(res, "cpus"))) {
		kn_buf_printf(out, ", %g CPUs",
			      json_real_value(json_object_get(res, "cpus")));
	} else if (cpus > 0) {
		kn_buf_printf(out, ", %lld CPU%s", (long long)cpus,
			      cpus == 1 ? "" : "s");
	}
	if (memory > 0) {
		kn_format_bytes(memory, buf, sizeof(buf));
		kn_buf_printf(out, ", %s memory", buf);
	}
}

static void show_job(json_t *job, int64_t now)
{
	const char *state = cli_json_str(job, "state");
	const char *reason = json_string_value(json_object_get(job, "reason"));
	const char *file = json_string_value(json_object_get(job, "filename"));
	int64_t not_before = cli_json_int(job, "not_before_ms");
	char when[96], note[128] = "", name[256];
	struct kn_buf res;

	cli_clean(name, cli_json_str(job, "name"), sizeof(name));
	printf("job %lld: %s\n", (long long)cli_json_int(job, "id"), name);
	if (json_is_true(json_object_get(job, "cancel_requested")) &&
	    !is_terminal(state))
		snprintf(note, sizeof(note), " (cancel requested)");
	else if (!strcmp(state, "queued") && not_before > now) {
		cli_format_when(not_before, now, when, sizeof(when));
		snprintf(note, sizeof(note), " (retry not before %s)", when);
	}
	field("state", "%s%s", state, note);
	field("owner", "%s", cli_json_str(job, "owner"));
	field("priority", "%lld%s", (long long)cli_json_int(job, "priority"),
	      json_is_true(json_object_get(job, "preemptible"))
		      ? ", preemptible"
		      : "");
	field("tasks", "%lld", (long long)cli_json_int(job, "tasks"));
	kn_buf_init(&res, SIZE_MAX);
	describe_resources(json_object_get(job, "resources"), &res);
	field("resources", "%s", res.data ? res.data : "-");
	kn_buf_release(&res);
	cli_format_when(cli_json_int(job, "submitted_at_ms"), now, when,
			sizeof(when));
	field("submitted", "%s", when);
	cli_format_when(cli_json_int(job, "started_at_ms"), now, when,
			sizeof(when));
	field("started", "%s", when);
	cli_format_when(cli_json_int(job, "ended_at_ms"), now, when,
			sizeof(when));
	field("ended", "%s", when);
	field("attempts", "%lld", (long long)cli_json_int(job, "attempts"));
	field("retries", "%lld of %lld used",
	      (long long)cli_json_int(job, "retries_used"),
	      (long long)cli_json_int(job, "retries"));
	if (cli_json_int(job, "exit_code") >= 0 &&
	    json_object_get(job, "exit_code"))
		field("exit code", "%lld",
		      (long long)cli_json_int(job, "exit_code"));
	field("reason", "%s", reason && *reason ? reason : "-");
	if (file && *file)
		field("spec file", "%s", file);
	show_overrides(json_object_get(json_object_get(job, "spec"),
				       "overrides"));
	show_goodput(json_object_get(job, "goodput"));
	show_inputs(json_object_get(job, "inputs"));
	show_outputs(json_object_get(job, "outputs"));
}

/* "exit code 3", "killed by signal 9 (Killed)", or "" while running. */
static void describe_exit(json_t *obj, char *buf, size_t len)
{
	int64_t sig = cli_json_int(obj, "signal");

	if (sig > 0)
		snprintf(buf, len, "killed by signal %lld (%s)", (long long)sig,
			 strsignal((int)sig));
	else if (cli_json_int(obj, "ended_at_ms") > 0)
		snprintf(buf, len, "exit code %lld",
			 (long long)cli_json_int(obj, "exit_code"));
	else
		buf[0] = '\0';
}

static void add_task_row(struct cli_table *t, json_t *task)
{
	json_t *devices = json_object_get(task, "devices");
	json_t *dev;
	struct kn_buf list;
	char buf[64];
	size_t i;

	cli_table_int(t, task, "rank");
	cli_table_cell(t, cli_json_str(task, "node"));
	kn_buf_init(&list, SIZE_MAX);
	json_array_foreach(devices, i, dev)
		kn_buf_printf(&list, "%s%lld", i ? "," : "",
			      (long long)json_integer_value(dev));
	cli_table_cell(t, list.data ? list.data : "-");
	kn_buf_release(&list);
	if (cli_json_int(task, "gpu_milli") > 0) {
		cli_format_milli(cli_json_int(task, "gpu_milli"), buf,
				 sizeof(buf));
		cli_table_cell(t, buf);
	} else {
		cli_table_cell(t, "-");
	}
	cli_table_cell(t, cli_json_str(task, "state"));
	if (cli_json_int(task, "signal") > 0)
		cli_table_cellf(t, "signal %lld",
				(long long)cli_json_int(task, "signal"));
	else if (cli_json_int(task, "ended_at_ms") > 0)
		cli_table_int(t, task, "exit_code");
	else
		cli_table_cell(t, "-");
}

static void show_attempt(json_t *attempt, int64_t now)
{
	static const char *const headers[] = {
		"RANK", "NODE", "DEVICES", "GPU", "STATE", "EXIT", NULL,
	};
	const char *reason =
		json_string_value(json_object_get(attempt, "reason"));
	json_t *tasks = json_object_get(attempt, "tasks");
	json_t *task;
	struct cli_table *t;
	char when[96], ran[32], exit_text[96], state[64];
	size_t i;

	cli_clean(state, cli_json_str(attempt, "state"), sizeof(state));
	printf("\nattempt %lld: %s\n",
	       (long long)cli_json_int(attempt, "number"), state);
	cli_format_when(cli_json_int(attempt, "started_at_ms"), now, when,
			sizeof(when));
	field("started", "%s", when);
	cli_format_ran(cli_json_int(attempt, "started_at_ms"),
		       cli_json_int(attempt, "ended_at_ms"), now, ran,
		       sizeof(ran));
	field(cli_json_int(attempt, "ended_at_ms") > 0 ? "ran" : "running",
	      "%s", ran);
	describe_exit(attempt, exit_text, sizeof(exit_text));
	if (exit_text[0])
		field("exit", "%s", exit_text);
	if (reason && *reason)
		field("reason", "%s", reason);
	if (json_is_string(json_object_get(attempt, "checkpoint"))) {
		cli_format_when(cli_json_int(attempt, "checkpoint_at_ms"), now,
				when, sizeof(when));
		field("checkpoint", "%s (taken %s)",
		      cli_json_str(attempt, "checkpoint"), when);
	}
	if (json_is_object(json_object_get(attempt, "checkpoint_next"))) {
		json_t *next = json_object_get(attempt, "checkpoint_next");
		char sent[32];

		kn_format_bytes(cli_json_int(next, "sent_bytes"), sent,
				sizeof(sent));
		field("next checkpoint", "%s, %s sent ahead",
		      cli_json_str(next, "name"), sent);
	}
	if (!json_array_size(tasks))
		return;
	t = cli_table_new(headers);
	json_array_foreach(tasks, i, task)
		add_task_row(t, task);
	cli_table_print(t, stdout, 2);
	cli_table_free(t);
}

/* An element: where it belongs. An array: its elements, one a row. */
static void show_array(json_t *job)
{
	static const char *const headers[] = {
		"INDEX", "ID", "STATE", "ATTEMPTS", "EXIT", "REASON", NULL,
	};
	json_t *array = json_object_get(job, "array"), *e;
	json_t *elements = json_object_get(array, "elements");
	int64_t first = cli_json_int(array, "first");
	int64_t count = cli_json_int(array, "count");
	int64_t parallel = cli_json_int(array, "parallel");
	char counts[256];
	struct cli_table *t;
	size_t i;

	if (!json_is_array(elements)) {
		field("array", "element %lld of job array %lld",
		      (long long)cli_json_int(array, "index"),
		      (long long)cli_json_int(array, "id"));
		return;
	}
	cli_format_array_counts(json_object_get(array, "counts"), counts,
				sizeof(counts));
	field("array", "%lld elements, indexes %lld-%lld%s", (long long)count,
	      (long long)first, (long long)(first + count - 1),
	      parallel ? "" : ", no limit on how many run at once");
	if (parallel)
		field("", "at most %lld running at once", (long long)parallel);
	field("elements", "%s", counts);
	t = cli_table_new(headers);
	cli_table_cuttable(t, 5);
	json_array_foreach(elements, i, e) {
		const char *reason = json_string_value(json_object_get(e,
								       "reason"));
		int64_t code = cli_json_int(e, "exit_code");

		cli_table_int(t, e, "index");
		cli_table_int(t, e, "id");
		cli_table_cell(t, cli_json_str(e, "state"));
		cli_table_int(t, e, "attempts");
		if (code >= 0)
			cli_table_cellf(t, "%lld", (long long)code);
		else
			cli_table_cell(t, "-");
		cli_table_cell(t, reason ? reason : "");
	}
	cli_table_print(t, stdout, 2);
	cli_table_free(t);
}

static int cmd_show(struct cli_ctx *ctx, int argc, char **argv)
{
	struct cli_client *c = NULL;
	const char *id_arg = NULL;
	char *path = NULL;
	json_t *answer = NULL, *job, *attempt;
	int64_t id, index, now = kn_now_ms();
	size_t i;
	int rc;

	ctx->name_ok = true;
	rc = cli_parse(ctx, argc, argv, NULL, "ID", &id_arg);
	if (rc != CLI_GO)
		goto out;
	rc = cli_parse_job_ref(ctx, id_arg, &id, &index);
	if (rc != CLI_GO)
		goto out;
	rc = cli_client_open(ctx, &c);
	if (rc)
		goto out;
	path = index >= 0 ? kn_asprintf("/v1/jobs/%lld?index=%lld",
					(long long)id, (long long)index)
			  : kn_asprintf("/v1/jobs/%lld", (long long)id);
	rc = cli_get_answer(ctx, c, path, &answer);
	if (rc != CLI_GO)
		goto out;
	rc = CLI_EXIT_OK;
	job = json_object_get(answer, "job");
	if (!json_is_object(job)) {
		fputs("kiln: the server's answer has no job\n", stderr);
		rc = CLI_EXIT_FAIL;
		goto out;
	}
	if (cli_want_name(ctx)) { /* the job exists: its id, for scripts */
		printf("%lld\n", (long long)cli_json_int(job, "id"));
		goto out;
	}
	show_job(job, now);
	if (json_is_object(json_object_get(job, "array")))
		show_array(job);
	json_array_foreach(json_object_get(job, "attempts_detail"), i, attempt)
		show_attempt(attempt, now);
out:
	json_decref(answer);
	free(path);
	cli_client_free(c);
	return rc;
}
