/*
 * kiln render: print the manifests a job or deployment spec becomes on
 * another engine, without a server or a cluster. Kubernetes only for now;
 * the flag names the engine so others can follow.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "cmd/cli.h"
#include "kube/kube.h"
#include "spec/spec.h"

static cli_runner cmd_render;

const struct cli_command cmd_render_entry = {
	.name = "render",
	.run = cmd_render,
	.summary = "print the Kubernetes manifests of a job or deployment spec",
	.help = "usage: kiln render FILE --executor kubernetes [--image IMAGE]\n"
		"                   [-n NAMESPACE] [--scheduler-name NAME]\n"
		"                   [--shim-image IMAGE] [--store URL]\n"
		"                   [--gpu-products FILE] [-o yaml|json]\n"
		"\n"
		"Print what the job spec (kind: Job) or deployment spec (kind:\n"
		"Deployment) in FILE (- reads standard input) becomes on Kubernetes,\n"
		"for kubectl apply -f: a batch/v1 Job (Indexed, with a headless\n"
		"Service for rank 0, when tasks > 1) or an apps/v1 Deployment and its\n"
		"Service. GPUs become nvidia.com/gpu or nvidia.com/mig-PROFILE limits\n"
		"with the AKS GPU taint toleration, GPU models a node affinity on\n"
		"nvidia.com/gpu.product, preemptible the AKS spot toleration, the\n"
		"checkpoint grace a preStop hook and terminationGracePeriodSeconds.\n"
		"A job's task runs under `kiln shim --kube` (checkpoint restore and\n"
		"sync, the checkpoint signal), kiln copied in by an initContainer.\n"
		"A GPU share is an annotation that only `kiln kube-scheduler` reads.\n"
		"A job's inputs: reach the pod's shim as KILN_INPUTS; a file only\n"
		"the server sees is refused, as the server under --executor\n"
		"kubernetes refuses it.\n"
		"Needs no server and no cluster. See docs/kubernetes.md.\n"
		"\n"
		"  --executor kubernetes  the engine to render for (the only one)\n"
		"  --image IMAGE          the container image (default: a job spec's\n"
		"                         image; deployments need this flag)\n"
		"  -n, --namespace NS     write metadata.namespace\n"
		"  --scheduler-name NAME  schedulerName of every pod (default: kiln\n"
		"                         for GPU shares only, else the default\n"
		"                         scheduler)\n"
		"  --shim-image IMAGE     the initContainer's image, which has kiln\n"
		"                         (default: the task's image)\n"
		"  --store URL            the store of jobs whose spec names none:\n"
		"                         their outputs' (KILN_OUTPUT_STORE) and, if\n"
		"                         preemptible or with a checkpoint section,\n"
		"                         their checkpoints' (KILN_STORE)\n"
		"  --gpu-products FILE    GPU model to nvidia.com/gpu.product table\n"
		"                         (default kiln's gpu-products.csv: see\n"
		"                         KILN_DATA_DIR in kiln(1))\n"
		"  -o yaml|json           YAML documents (default) or a JSON array\n",
};

/*
 * A job's inputs as the server takes them under Kubernetes: resolved
 * against the spec file's directory, checked as readable by the pods
 * (with the checkpoint store, or --store, as theirs) and passed to the
 * shim as KILN_INPUTS (*inputs, or NULL without any).
 */
static int render_inputs(const char *file, const char *name,
			 struct kn_job_spec *job,
			 struct kn_kube_render_opts *opts, char **inputs,
			 struct kn_error *err)
{
	char *path = NULL, *slash;
	json_t *doc;
	int rc;

	if (!job->n_inputs)
		return 0;
	if (strcmp(file, "-") != 0 && (path = realpath(file, NULL)) &&
	    (slash = strrchr(path, '/')))
		slash[slash == path ? 1 : 0] = '\0';
	rc = kn_job_spec_resolve_inputs(job, path, name, err);
	free(path);
	if (rc == 0)
		rc = kn_kube_check_inputs(job, job->checkpoint.store
						       ? job->checkpoint.store
						       : opts->store_url,
					  name, err);
	if (rc < 0)
		return rc;
	doc = kn_job_spec_to_json(job);
	*inputs = kn_job_inputs_for_shim(json_object_get(doc, "inputs"));
	json_decref(doc);
	opts->inputs = *inputs;
	return 0;
}

static int cmd_render(struct cli_ctx *ctx, int argc, char **argv)
{
	const char *file = NULL, *executor = NULL, *format = NULL;
	const char *products_file = NULL, *name;
	struct kn_kube_render_opts opts = {0};
	struct kn_kube_products *products = NULL;
	struct kn_model_presets *presets = NULL;
	struct kn_deployment_spec *deployment = NULL;
	struct kn_job_spec *job = NULL;
	struct kn_error err = {0};
	json_t *docs = NULL;
	const char *kind;
	char *text = NULL, *out, *inputs = NULL, *shipped = NULL;
	size_t len;
	int rc, r;
	const struct cli_flag flags[] = {
		{"executor", 0, CLI_FLAG_STRING, &executor},
		{"image", 0, CLI_FLAG_STRING, &opts.image},
		{"namespace", 'n', CLI_FLAG_STRING, &opts.namespace_},
		{"scheduler-name", 0, CLI_FLAG_STRING, &opts.scheduler_name},
		{"shim-image", 0, CLI_FLAG_STRING, &opts.shim_image},
		{"store", 0, CLI_FLAG_STRING, &opts.store_url},
		{"gpu-products", 0, CLI_FLAG_STRING, &products_file},
		{"output", 'o', CLI_FLAG_STRING, &format},
		{NULL, 0, CLI_FLAG_BOOL, NULL},
	};

	rc = cli_parse(ctx, argc, argv, flags, "FILE", &file);
	if (rc != CLI_GO)
		return rc;
	if (!executor)
		return cli_usage_error(ctx, "--executor kubernetes is required "
					    "(the one engine rendered)");
	if (strcmp(executor, "kubernetes"))
		return cli_usage_error(ctx, "--executor: only kubernetes can "
					    "be rendered; got '%s'",
				       executor ? executor : "");
	if (!format && cli_want_json(ctx))
		format = "json";
	if (format && strcmp(format, "yaml") && strcmp(format, "json"))
		return cli_usage_error(ctx, "-o: want yaml or json; got '%s'",
				       format);
	rc = cli_read_spec(ctx, file, &text, &len, &name);
	if (rc != CLI_GO)
		return rc;
	if (!products_file)
		products_file = shipped = kn_data_path("gpu-products.csv");
	if (kn_kube_products_load(products_file, &products, &err) < 0)
		goto fail;
	opts.products = products;
	kind = kn_spec_kind(text, len);
	if (kind && !strcmp(kind, "Deployment")) {
		if (kn_model_presets_load_shipped(&presets, &err) < 0 ||
		    kn_deployment_spec_parse(text, len, name, presets,
					     &deployment, &err) < 0)
			goto fail;
		r = kn_kube_render_deployment(deployment, &opts, &docs, &err);
	} else {
		if (kn_job_spec_parse(text, len, name, &job, &err) < 0 ||
		    render_inputs(file, name, job, &opts, &inputs, &err) < 0)
			goto fail;
		/* The spec's own image unless --image overrides it. */
		if (!opts.image)
			opts.image = job->image;
		/* As the server's executor runs it: under the shim. */
		if (!opts.shim_image)
			opts.shim_image = opts.image;
		r = kn_kube_render_job(job, &opts, &docs, &err);
	}
	if (r < 0)
		goto fail;
	if (format && !strcmp(format, "json")) {
		cli_print_json(docs);
	} else {
		out = kn_kube_yaml(docs);
		fputs(out, stdout);
		free(out);
	}
	rc = CLI_EXIT_OK;
	goto out;
fail:
	rc = cli_fail(ctx, "%s", err.message[0] ? err.message
					       : "cannot render");
out:
	json_decref(docs);
	free(inputs);
	kn_job_spec_free(job);
	kn_deployment_spec_free(deployment);
	kn_model_presets_free(presets);
	kn_kube_products_free(products);
	KN_FREE_ALL(shipped, text);
	return rc;
}
