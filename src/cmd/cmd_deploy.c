/*
 * kiln deploy | deployments | scale | undeploy | rollout restart: model
 * servers kept running as replicas (docs/deployments.md).
 *
 * deploy sends the spec as written, like submit: the server parses it
 * with the parser `kiln validate` uses, ?file= names it in messages and
 * ?path= lets a relative model path or workdir start from its directory.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "cmd/cli.h"
#include "cmd/cli_client.h"
#include "cmd/cli_watch.h"
#include "spec/spec.h"

static cli_runner cmd_deploy;

const struct cli_command cmd_deploy_entry = {
	.name = "deploy",
	.run = cmd_deploy,
	.summary = "create or update a deployment (replicas of a model server)",
	.help = "usage: kiln deploy FILE [-o json]\n"
		"\n"
		"Send the deployment spec in FILE (kind: Deployment; - reads standard\n"
		"input) to the server. A new name creates the deployment; an existing\n"
		"one is updated: a changed spec reaches its replicas one at a time,\n"
		"a changed replica count at once. Each replica is a job that restarts\n"
		"with backoff whenever it exits; it gets KILN_PORT (serve there, on\n"
		"127.0.0.1) and KILN_MODEL_DIR. Under a server with --executor\n"
		"kubernetes it is an apps/v1 Deployment and a Service instead, which\n"
		"Kubernetes rolls out (docs/kubernetes.md). A spec's revalidate:\n"
		"section sets the re-validation of the registry alias it serves; a\n"
		"job file it names (relative to FILE) is read here and sent with the\n"
		"spec. See docs/deployments.md.\n"
		"\n"
		"  -o json  print the server's answer as JSON\n",
};

static cli_runner cmd_deployments;

const struct cli_command cmd_deployments_entry = {
	.name = "deployments",
	.run = cmd_deployments,
	.summary = "list deployments, or show one with its replicas",
	.help = "usage: kiln deployments [NAME] [-w] [-o table|wide|json|yaml|name]\n"
		"\n"
		"Without NAME: NAME READY (ready/wanted) MODEL OWNER FALLBACK\n"
		"GENERATION. With NAME: the deployment and each replica's STATE\n"
		"(pending, queued, restarting, starting, ready, stopping), ADDRESS,\n"
		"NODE, ZONE, RESTARTS, JOB and REASON. Under a server with\n"
		"--executor kubernetes: the Deployment, its Service's cluster DNS\n"
		"name, its ready/updated/available counts and rollout state (pending,\n"
		"progressing, complete, failed) with the API's reason, the last API\n"
		"error, and each pod's STATE, POD, NODE, ZONE, RESTARTS and REASON.\n"
		"\n"
		"  -w, --watch   draw again whenever the server's event stream says\n"
		"                something changed (no polling); until interrupted\n"
		"  -o name       the names alone\n",
};

static cli_runner cmd_scale;

const struct cli_command cmd_scale_entry = {
	.name = "scale",
	.run = cmd_scale,
	.summary = "set a deployment's number of replicas",
	.help = "usage: kiln scale NAME N\n"
		"\n"
		"Run N replicas (0..64) of deployment NAME: new ones start at once,\n"
		"the highest-numbered ones stop when scaling down. Under --executor\n"
		"kubernetes: a merge PATCH of the Deployment's spec.replicas.\n",
};

static cli_runner cmd_undeploy;

const struct cli_command cmd_undeploy_entry = {
	.name = "undeploy",
	.run = cmd_undeploy,
	.summary = "delete a deployment and stop its replicas",
	.help = "usage: kiln undeploy NAME\n"
		"\n"
		"Delete deployment NAME: its replica jobs are cancelled (SIGTERM, then\n"
		"SIGKILL after the kill grace) and the gateway stops routing to it.\n"
		"Under --executor kubernetes: its Deployment and Service are deleted.\n",
};

static cli_runner cmd_rollout;

const struct cli_command cmd_rollout_entry = {
	.name = "rollout",
	.run = cmd_rollout,
	.summary = "restart a deployment one replica at a time",
	.help = "usage: kiln rollout restart NAME\n"
		"\n"
		"Replace each replica of deployment NAME with a new one, in order,\n"
		"starting the next only once the new one is ready, so the others\n"
		"keep serving (a one-replica deployment has a gap). Under\n"
		"--executor kubernetes it is what kubectl rollout restart does: the\n"
		"Deployment's pod template gets the annotation\n"
		"kubectl.kubernetes.io/restartedAt, and Kubernetes rolls it out.\n",
};

/*
 * Positionals (between min and max of them) among the global flags, for
 * commands that take more than one or an optional one. Returns CLI_GO,
 * CLI_EXIT_OK after --help, or a usage error naming what is wanted.
 */
static int positionals(struct cli_ctx *ctx, int argc, char **argv,
		       const char **pos, int min, int max, const char *what)
{
	int n = 0, rc;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
			fputs(ctx->cmd->help, stdout);
			return CLI_EXIT_OK;
		}
		if (argv[i][0] == '-' && argv[i][1]) {
			rc = cli_take_flag(ctx, NULL, argc, argv, &i);
			if (rc != CLI_GO)
				return rc;
			continue;
		}
		if (n == max)
			return cli_usage_error(ctx, "unexpected argument '%s'",
					       argv[i]);
		pos[n++] = argv[i];
	}
	if (n < min)
		return cli_usage_error(ctx, "missing %s; see '%s --help'", what,
				       ctx->prog);
	return cli_check_output(ctx);
}

/* "2/3" ready of wanted, for the list. */
static void print_list(const struct cli_ctx *ctx, json_t *deps)
{
	static const char *const headers[] = {
		"NAME", "READY", "MODEL", "OWNER", "FALLBACK", "GENERATION",
		NULL,
	};
	struct cli_table *t = cli_table_new(headers);
	json_t *d;
	size_t i;

	if (cli_want_name(ctx)) {
		json_array_foreach(deps, i, d)
			printf("%s\n", cli_json_str(d, "name"));
		cli_table_free(t);
		return;
	}
	cli_table_cuttable(t, 0);
	cli_table_cuttable(t, 2);
	json_array_foreach(deps, i, d) {
		cli_table_cell(t, cli_json_str(d, "name"));
		cli_table_cellf(t, "%lld/%lld",
				(long long)cli_json_int(d, "replicas_ready"),
				(long long)cli_json_int(d, "replicas_wanted"));
		cli_table_cell(t, cli_json_str(d, "model"));
		cli_table_cell(t, cli_json_str(d, "owner"));
		cli_table_cell(t, cli_json_str(d, "fallback"));
		cli_table_int(t, d, "generation");
	}
	cli_table_show(ctx, t, stdout, 0);
	cli_table_free(t);
}

/* Under --executor kubernetes: the Deployment's status and its pods. */
static void print_kube_detail(json_t *d, json_t *k)
{
	static const char *const headers[] = {
		"REPLICA", "STATE", "POD", "NODE", "ZONE", "RESTARTS", "REASON",
		NULL,
	};
	struct cli_table *t = cli_table_new(headers);
	json_t *r;
	size_t i;

	printf("kubernetes:  Deployment %s/%s, Service %s\n",
	       cli_json_str(k, "namespace"), cli_json_str(k, "deployment"),
	       cli_json_str(k, "service"));
	printf("status:      %lld ready, %lld updated, %lld available of "
	       "%lld; rollout %s%s%s\n",
	       (long long)cli_json_int(k, "ready"),
	       (long long)cli_json_int(k, "updated"),
	       (long long)cli_json_int(k, "available"),
	       (long long)cli_json_int(k, "desired"),
	       cli_json_str(k, "rollout"),
	       json_string_value(json_object_get(k, "reason")) ? ": " : "",
	       json_string_value(json_object_get(k, "reason")) ?
		       cli_json_str(k, "reason") : "");
	if (json_string_value(json_object_get(k, "error")))
		printf("error:       %s\n", cli_json_str(k, "error"));
	printf("\n");
	json_array_foreach(json_object_get(d, "replicas"), i, r) {
		cli_table_int(t, r, "replica");
		cli_table_cell(t, cli_json_str(r, "state"));
		cli_table_cell(t, cli_json_str(r, "pod"));
		cli_table_cell(t, cli_json_str(r, "node"));
		cli_table_cell(t, cli_json_str(r, "zone"));
		cli_table_int(t, r, "restarts");
		cli_table_cell(t, cli_json_str(r, "reason"));
	}
	cli_table_print(t, stdout, 0);
	cli_table_free(t);
}

/* A latency in ms, or "-" when none was measured. */
static void print_ms(const char *label, json_t *v)
{
	if (json_is_number(v))
		printf(", %s %.1f ms", label, json_number_value(v));
	else
		printf(", %s -", label);
}

/* What the gateways reported over the server's window, if any did. */
static void print_traffic(json_t *t)
{
	if (!json_is_object(t)) {
		printf("traffic:     none reported in the last 5 minutes\n");
		return;
	}
	printf("traffic:     %lld requests in %.0f s (%.2f/s)",
	       (long long)cli_json_int(t, "requests"),
	       json_number_value(json_object_get(t, "window_s")),
	       json_number_value(json_object_get(t, "requests_per_s")));
	print_ms("p50", json_object_get(t, "latency_p50_ms"));
	print_ms("p99", json_object_get(t, "latency_p99_ms"));
	printf(", %lld 5xx, %lld 429, %lld fallbacks (%lld gateway%s)\n",
	       (long long)cli_json_int(t, "errors"),
	       (long long)cli_json_int(t, "rate_limited"),
	       (long long)cli_json_int(t, "fallbacks"),
	       (long long)cli_json_int(t, "gateways"),
	       cli_json_int(t, "gateways") == 1 ? "" : "s");
}

static void print_detail(json_t *d)
{
	static const char *const headers[] = {
		"REPLICA", "STATE", "VERSION", "ADDRESS", "NODE", "ZONE", "RESTARTS", "JOB",
		"REASON", NULL,
	};
	struct cli_table *t = cli_table_new(headers);
	json_t *r, *rollout = json_object_get(d, "rollout");
	size_t i;

	printf("name:        %s\n", cli_json_str(d, "name"));
	printf("owner:       %s\n", cli_json_str(d, "owner"));
	printf("model:       %s (%s)\n", cli_json_str(d, "model"),
	       cli_json_str(d, "model_dir"));
	if (json_is_string(json_object_get(d, "follows")))
		printf("follows:     alias %s (now version %lld)\n",
		       cli_json_str(d, "follows"),
		       (long long)cli_json_int(d, "model_version"));
	printf("replicas:    %lld ready of %lld\n",
	       (long long)cli_json_int(d, "replicas_ready"),
	       (long long)cli_json_int(d, "replicas_wanted"));
	printf("fallback:    %s\n", cli_json_str(d, "fallback"));
	print_traffic(json_object_get(d, "traffic"));
	if (json_is_object(rollout))
		printf("rollout:     at replica %lld\n",
		       (long long)cli_json_int(rollout, "next_replica"));
	if (json_is_object(json_object_get(d, "kubernetes"))) {
		cli_table_free(t);
		print_kube_detail(d, json_object_get(d, "kubernetes"));
		return;
	}
	printf("\n");
	json_array_foreach(json_object_get(d, "replicas"), i, r) {
		cli_table_int(t, r, "replica");
		cli_table_cell(t, cli_json_str(r, "state"));
		if (json_is_integer(json_object_get(r, "model_version")))
			cli_table_cellf(t, "%lld", (long long)cli_json_int(
							   r, "model_version"));
		else
			cli_table_cell(t, "-");
		cli_table_cell(t, cli_json_str(r, "address"));
		cli_table_cell(t, cli_json_str(r, "node"));
		cli_table_cell(t, cli_json_str(r, "zone"));
		cli_table_int(t, r, "restarts");
		cli_table_int(t, r, "job");
		cli_table_cell(t, cli_json_str(r, "reason"));
	}
	cli_table_print(t, stdout, 0);
	cli_table_free(t);
}

/*
 * When the spec's revalidate.job names a file, the request carries it:
 * {"spec": text, "files": {name as written: its text}} (read beside the
 * spec), as JSON. *body is NULL when there is nothing to carry; a spec
 * that does not parse here is sent as written, for the server to refuse
 * with the same message.
 */
static int reval_body(const struct cli_ctx *ctx, const char *file,
		      const char *name, const char *text, size_t len,
		      char **body)
{
	struct kn_model_presets *presets = NULL;
	struct kn_deployment_spec *spec = NULL;
	struct kn_error err;
	const char *job, *slash;
	char *path = NULL, *job_text = NULL;
	size_t job_len = 0;
	json_t *doc;
	int rc = CLI_GO, read_rc;

	*body = NULL;
	if (kn_model_presets_load_shipped(&presets, &err) < 0 ||
	    kn_deployment_spec_parse(text, len, name, presets, &spec, &err) < 0 ||
	    !spec->revalidate || !spec->revalidate->job_file)
		goto out;
	job = spec->revalidate->job_file;
	slash = strcmp(file, "-") ? strrchr(file, '/') : NULL;
	path = job[0] == '/' || !slash
		       ? kn_xstrdup(job)
		       : kn_asprintf("%.*s/%s", (int)(slash - file), file, job);
	read_rc = kn_read_file(path, KN_SPEC_MAX_BYTES, &job_text, &job_len);
	if (read_rc < 0) {
		rc = cli_fail(ctx, "%s: revalidate.job: cannot read %s: %s",
			      name, path, strerror(-read_rc));
		goto out;
	}
	doc = json_pack("{s:s%, s:{s:s%}}", "spec", text, len, "files", job,
			job_text, job_len);
	*body = json_dumps(doc, JSON_COMPACT);
	json_decref(doc);
out:
	KN_FREE_ALL(job_text, path);
	kn_deployment_spec_free(spec);
	kn_model_presets_free(presets);
	return rc;
}

static int cmd_deploy(struct cli_ctx *ctx, int argc, char **argv)
{
	struct cli_client *c = NULL;
	const char *file = NULL, *name;
	char *text = NULL, *body = NULL;
	size_t len;
	json_t *answer = NULL, *d;
	int rc;

	rc = cli_parse_spec(ctx, argc, argv, NULL, &file, &text, &len, &name);
	if (rc != CLI_GO)
		goto out;
	rc = cli_client_open(ctx, &c);
	if (rc)
		goto out;
	rc = reval_body(ctx, file, name, text, len, &body);
	if (rc != CLI_GO)
		goto out;
	if (body) {
		char *abs = strcmp(file, "-") ? realpath(file, NULL) : NULL;
		struct kn_buf path;

		kn_buf_init(&path, SIZE_MAX);
		kn_buf_printf(&path, "/v1/deployments");
		cli_query_add(&path, "file", name);
		if (abs)
			cli_query_add(&path, "path", abs);
		rc = cli_create(c, path.data, "application/json", body,
				strlen(body), &answer);
		kn_buf_release(&path);
		free(abs);
	} else {
		rc = cli_post_spec(c, "/v1/deployments", file, name, text, len,
				   &answer);
	}
	if (rc == 0)
		rc = cli_answer_json(ctx, &answer);
	if (rc != CLI_GO)
		goto out;
	rc = CLI_EXIT_OK;
	d = json_object_get(answer, "deployment");
	printf("deployment %s: generation %lld, %lld replica%s wanted\n",
	       cli_json_str(d, "name"), (long long)cli_json_int(d, "generation"),
	       (long long)cli_json_int(d, "replicas_wanted"),
	       cli_json_int(d, "replicas_wanted") == 1 ? "" : "s");
out:
	json_decref(answer);
	cli_client_free(c);
	KN_FREE_ALL(body, text);
	return rc;
}

static void print_deployments(const struct cli_ctx *ctx, json_t *answer,
			      void *arg)
{
	json_t *one = json_object_get(answer, "deployment");

	(void)arg;
	if (one && cli_want_name(ctx))
		printf("%s\n", cli_json_str(one, "name"));
	else if (one)
		print_detail(one);
	else
		print_list(ctx, json_object_get(answer, "deployments"));
}

static int cmd_deployments(struct cli_ctx *ctx, int argc, char **argv)
{
	bool watch = false;
	const struct cli_flag flags[] = {
		{"watch", 'w', CLI_FLAG_BOOL, &watch},
		{NULL, 0, CLI_FLAG_BOOL, NULL},
	};
	struct watch_listing deployments = {NULL, print_deployments, NULL,
					    NULL, NULL};
	struct kn_buf path;
	const char *name = NULL;
	size_t n = 0;
	int rc;

	kn_buf_init(&path, SIZE_MAX);
	ctx->name_ok = true;
	rc = cli_parse_positionals(ctx, argc, argv, flags, &name, 1, &n);
	if (rc != CLI_GO)
		goto out;
	kn_buf_printf(&path, "/v1/deployments");
	if (name)
		cli_path_add(&path, name);
	deployments.path = path.data;
	rc = watch_listing(ctx, watch, &deployments);
out:
	kn_buf_release(&path);
	return rc;
}

static int cmd_scale(struct cli_ctx *ctx, int argc, char **argv)
{
	struct cli_client *c = NULL;
	struct kn_buf path;
	const char *pos[2] = {NULL, NULL};
	json_t *body;
	char *end;
	long n;
	int rc;

	kn_buf_init(&path, SIZE_MAX);
	rc = positionals(ctx, argc, argv, pos, 2, 2, "NAME and N");
	if (rc != CLI_GO)
		goto out;
	n = strtol(pos[1], &end, 10);
	if (*end || end == pos[1] || n < 0 || n > KN_SPEC_MAX_REPLICAS) {
		rc = cli_usage_error(ctx, "N must be a whole number 0..%d; "
				     "got '%s'", KN_SPEC_MAX_REPLICAS, pos[1]);
		goto out;
	}
	rc = cli_client_open(ctx, &c);
	if (rc)
		goto out;
	cli_path_object(&path, "/v1/deployments", pos[0], "/scale");
	body = json_pack("{s:I}", "replicas", (json_int_t)n);
	rc = cli_post_json(c, path.data, body, NULL);
	json_decref(body);
	if (rc)
		goto out;
	printf("deployment %s: %ld replica%s wanted\n", pos[0], n,
	       n == 1 ? "" : "s");
out:
	kn_buf_release(&path);
	cli_client_free(c);
	return rc;
}

static int cmd_undeploy(struct cli_ctx *ctx, int argc, char **argv)
{
	return cli_delete_named(ctx, argc, argv, "/v1/deployments",
				"deployment %s deleted; its replicas are stopping\n");
}

static int cmd_rollout(struct cli_ctx *ctx, int argc, char **argv)
{
	struct cli_client *c = NULL;
	const char *pos[2] = {NULL, NULL}, *name;
	struct kn_buf path;
	int rc;

	kn_buf_init(&path, SIZE_MAX);
	rc = positionals(ctx, argc, argv, pos, 2, 2, "restart NAME");
	if (rc != CLI_GO)
		goto out;
	if (strcmp(pos[0], "restart") != 0) {
		rc = cli_usage_error(ctx, "no '%s'; the one rollout is "
				     "'restart'", pos[0]);
		goto out;
	}
	name = pos[1];
	rc = cli_client_open(ctx, &c);
	if (rc)
		goto out;
	cli_path_object(&path, "/v1/deployments", name, "/restart");
	rc = cli_post_json(c, path.data, NULL, NULL);
	if (rc)
		goto out;
	printf("deployment %s: rolling restart started (one replica at a "
	       "time)\n", name);
out:
	kn_buf_release(&path);
	cli_client_free(c);
	return rc;
}
