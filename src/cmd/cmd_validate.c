/*
 * kiln validate: check a spec with the server's own parser, locally, so a
 * mistake is found without a server and before anything is queued.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "cmd/cli.h"
#include "spec/spec.h"

static cli_runner cmd_validate;

const struct cli_command cmd_validate_entry = {
	.name = "validate",
	.run = cmd_validate,
	.summary = "check a job, deployment or workflow spec, without a server",
	.help = "usage: kiln validate FILE [-o json]\n"
		"\n"
		"Parse and check the job spec (kind: Job), deployment spec (kind:\n"
		"Deployment, with the shipped model presets) or workflow (kind:\n"
		"Workflow, with each step's job file, found beside FILE) in FILE\n"
		"(- reads standard input) the way the server would, without one.\n"
		"Prints `FILE: ok (...)` (for a workflow, its steps in an order they\n"
		"can run in), or the problem as FILE:LINE:COLUMN: FIELD: message\n"
		"and exits 1 (a step's job with its own inputs: too, as the server\n"
		"refuses it).\n"
		"\n"
		"  -o json  print the normalized spec (defaults filled in) as JSON\n",
};

static void summarize(const struct kn_job_spec *spec, struct kn_buf *out)
{
	const struct kn_resources *res = &spec->resources;
	char amount[32];

	kn_buf_printf(out, "job %s, %d task%s, ", spec->name, spec->tasks,
		      spec->tasks == 1 ? "" : "s");
	if (res->mig_profile) {
		kn_buf_printf(out, "mig:%s each", res->mig_profile);
	} else if (res->gpu_milli == 0) {
		kn_buf_printf(out, "no GPU");
	} else if (res->gpu_milli % KN_MILLI == 0) {
		kn_buf_printf(out, "%d GPU%s each", res->gpu_milli / KN_MILLI,
			      res->gpu_milli == KN_MILLI ? "" : "s");
	} else {
		cli_format_milli(res->gpu_milli, amount, sizeof(amount));
		kn_buf_printf(out, "%s GPU each", amount);
	}
	kn_buf_printf(out, ", priority %d", spec->priority);
	if (spec->retries)
		kn_buf_printf(out, ", %d retr%s", spec->retries,
			      spec->retries == 1 ? "y" : "ies");
	if (spec->preemptible)
		kn_buf_printf(out, ", preemptible");
	if (spec->n_inputs)
		kn_buf_printf(out, ", %zu input%s", spec->n_inputs,
			      spec->n_inputs == 1 ? "" : "s");
	if (spec->checkpoint.set) {
		kn_format_duration(spec->checkpoint.every_ms, amount,
				   sizeof(amount));
		kn_buf_printf(out, ", checkpoints every %s", amount);
	}
}

static void summarize_deployment(const struct kn_deployment_spec *d,
				 struct kn_buf *out)
{
	kn_buf_printf(out, "deployment %s of %s, %d replica%s",
		      d->job.name, d->model, d->replicas,
		      d->replicas == 1 ? "" : "s");
	if (d->preset)
		kn_buf_printf(out, ", preset %s", d->preset);
	if (d->job.resources.gpu_milli % KN_MILLI == 0 &&
	    d->job.resources.gpu_milli)
		kn_buf_printf(out, ", %d GPU%s each",
			      d->job.resources.gpu_milli / KN_MILLI,
			      d->job.resources.gpu_milli == KN_MILLI ? "" : "s");
	if (d->job.resources.n_gpu_models)
		kn_buf_printf(out, " (%s)", d->job.resources.gpu_models[0]);
	if (d->fallback)
		kn_buf_printf(out, ", fallback %s", d->fallback);
}

/* A `kind: Deployment` file, with the shipped preset table. */
static int validate_deployment(struct cli_ctx *ctx, const char *text,
			       size_t len, const char *name)
{
	struct kn_model_presets *presets = NULL;
	struct kn_deployment_spec *d = NULL;
	struct kn_error err = {0};
	struct kn_buf summary;
	json_t *normalized;

	if (kn_model_presets_load_shipped(&presets, &err) < 0 ||
	    kn_deployment_spec_parse(text, len, name, presets, &d, &err) < 0) {
		fprintf(stderr, "%s\n",
			err.message[0] ? err.message : "invalid deployment spec");
		kn_model_presets_free(presets);
		return CLI_EXIT_FAIL;
	}
	if (cli_want_json(ctx)) {
		normalized = kn_deployment_spec_to_json(d);
		cli_print_data(ctx, normalized);
		json_decref(normalized);
	} else {
		kn_buf_init(&summary, SIZE_MAX);
		summarize_deployment(d, &summary);
		printf("%s: ok (%s)\n", name, summary.data);
		kn_buf_release(&summary);
	}
	kn_deployment_spec_free(d);
	kn_model_presets_free(presets);
	return CLI_EXIT_OK;
}

/*
 * A `kind: Workflow` file: the workflow, then each step's job file (found
 * beside the workflow's file) as a job spec, refused as the server does
 * (its inputs belong on the step), each error naming its file.
 */
static int validate_workflow(struct cli_ctx *ctx, const char *text,
			     size_t len, const char *name)
{
	struct kn_workflow_spec *w = NULL;
	struct kn_error err = {0};
	const char *slash = strrchr(name, '/');
	json_t *normalized = NULL;
	int rc = CLI_EXIT_FAIL;

	if (kn_workflow_spec_parse(text, len, name, &w, &err) < 0) {
		fprintf(stderr, "%s\n",
			err.message[0] ? err.message : "invalid workflow spec");
		return CLI_EXIT_FAIL;
	}
	normalized = kn_workflow_spec_to_json(w);
	for (size_t i = 0; i < w->n_steps; i++) {
		const struct kn_workflow_step *st = &w->steps[i];
		struct kn_job_spec *job = NULL;
		char *path, *job_text = NULL;
		size_t job_len = 0;
		int read_rc;

		if (!st->job_file)
			continue;
		path = st->job_file[0] == '/' || !slash
			       ? kn_xstrdup(st->job_file)
			       : kn_asprintf("%.*s/%s", (int)(slash - name),
					     name, st->job_file);
		read_rc = kn_read_file(path, KN_SPEC_MAX_BYTES, &job_text,
				       &job_len);
		if (read_rc < 0) {
			fprintf(stderr, "%s: steps[%zu].job: cannot read %s: "
				"%s\n", name, i, path, strerror(-read_rc));
		} else if (kn_job_spec_parse(job_text, job_len, path, &job,
					     &err) < 0 ||
			   kn_job_spec_check_step_job(job, path, i, name,
						      &err) < 0) {
			fprintf(stderr, "%s\n", err.message);
		} else {
			json_object_set_new(json_array_get(json_object_get(
						normalized, "steps"), i),
					    "job", kn_job_spec_to_json(job));
		}
		kn_job_spec_free(job);
		KN_FREE_ALL(job_text, path);
		if (!json_object_get(json_array_get(json_object_get(normalized,
								   "steps"),
						    i),
				     "job"))
			goto out;
	}
	rc = CLI_EXIT_OK;
	if (cli_want_json(ctx)) {
		cli_print_data(ctx, normalized);
	} else {
		printf("%s: ok (workflow %s, %zu step%s:", name, w->name,
		       w->n_steps, w->n_steps == 1 ? "" : "s");
		for (size_t i = 0; i < w->n_steps; i++)
			printf("%s%s", i ? " -> " : " ",
			       w->steps[w->order[i]].name);
		printf(")\n");
	}
out:
	json_decref(normalized);
	kn_workflow_spec_free(w);
	return rc;
}

static int cmd_validate(struct cli_ctx *ctx, int argc, char **argv)
{
	struct kn_job_spec *spec = NULL;
	struct kn_error err = {0};
	const char *file = NULL, *name, *kind;
	char *text = NULL;
	size_t len;
	struct kn_buf summary;
	json_t *normalized;
	int rc;

	kn_buf_init(&summary, SIZE_MAX);
	rc = cli_parse_spec(ctx, argc, argv, NULL, &file, &text, &len, &name);
	if (rc != CLI_GO)
		goto out;
	kind = kn_spec_kind(text, len);
	if (kind && !strcmp(kind, "Deployment")) {
		rc = validate_deployment(ctx, text, len, name);
		goto out;
	}
	if (kind && !strcmp(kind, "Workflow")) {
		rc = validate_workflow(ctx, text, len, name);
		goto out;
	}
	if (kn_job_spec_parse(text, len, name, &spec, &err) < 0) {
		fprintf(stderr, "%s\n",
			err.message[0] ? err.message : "invalid job spec");
		rc = CLI_EXIT_FAIL;
		goto out;
	}
	rc = CLI_EXIT_OK;
	if (cli_want_json(ctx)) {
		normalized = kn_job_spec_to_json(spec);
		cli_print_data(ctx, normalized);
		json_decref(normalized);
		goto out;
	}
	summarize(spec, &summary);
	printf("%s: ok (%s)\n", name, summary.data);
out:
	kn_buf_release(&summary);
	kn_job_spec_free(spec);
	free(text);
	return rc;
}
