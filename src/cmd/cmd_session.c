/*
 * kiln run -it, kiln attach, kiln exec: interactive sessions on a task
 * (docs/cli.md). run submits a job whose task runs on a terminal
 * (the spec's tty), waits for it to start and attaches; attach reaches
 * that terminal again; exec runs a command beside a running task, in
 * its sandbox. The session itself is session_term.c's.
 *
 * Flags end at "--": what follows is the command, never kiln's flags,
 * and "-it" is taken as "-i -t" as Docker and kubectl take it.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <curl/curl.h>
#include <jansson.h>

#include "base/base.h"
#include "cmd/cli.h"
#include "cmd/cli_client.h"
#include "cmd/session_term.h"
#include "mux/mux.h"

static cli_runner cmd_attach;

const struct cli_command cmd_attach_entry = {
	.name = "attach",
	.run = cmd_attach,
	.summary = "attach this terminal to a job's terminal",
	.help = "usage: kiln attach ID [--task N] [--port LOCAL:REMOTE]\n"
		"\n"
		"Attach this terminal to the terminal of job ID's task (one started\n"
		"with kiln run -it, or a spec with tty: true), showing first what it\n"
		"printed last (up to 64 KiB). Another client attached to it is\n"
		"detached. Ctrl-P Ctrl-Q detaches; kiln exits with the task's exit\n"
		"code when it ends meanwhile. The job's owner and operators only.\n"
		"\n"
		"  --task N              the task's rank (default 0)\n"
		"  --port LOCAL:REMOTE   also forward 127.0.0.1:LOCAL to the task's\n"
		"                        port REMOTE while attached, as kiln\n"
		"                        port-forward does\n",
};

static cli_runner cmd_exec;

const struct cli_command cmd_exec_entry = {
	.name = "exec",
	.run = cmd_exec,
	.summary = "run a command beside a running task",
	.help = "usage: kiln exec ID [--task N] [-i] [-t] -- CMD [ARG...]\n"
		"\n"
		"Run CMD in the sandbox of job ID's running task (its namespaces,\n"
		"cgroup, user, devices and environment, CUDA_VISIBLE_DEVICES\n"
		"included), with its output here, and exit with its exit code (128\n"
		"+ N when signal N ended it). CMD ends when this command does.\n"
		"The job's owner and operators only; each exec is audited with its\n"
		"command line.\n"
		"\n"
		"  --task N     the task's rank (default 0)\n"
		"  -i, --stdin  send standard input to CMD (else it gets none)\n"
		"  -t, --tty    run CMD on a terminal (this one goes raw); without,\n"
		"               its stdout and stderr come apart\n",
};

static cli_runner cmd_run;

const struct cli_command cmd_run_entry = {
	.name = "run",
	.run = cmd_run,
	.summary = "run a command on a terminal in a new job",
	.help = "usage: kiln run -it [--gpus N] [--image I] [--name N] [-- CMD [ARG...]]\n"
		"\n"
		"Submit a job whose one task runs CMD (default a login shell, bash -l)\n"
		"on a terminal, wait for it to start (queued like any job, with its\n"
		"GPUs, limits and sandbox), then attach this terminal to it: keys,\n"
		"window size and Ctrl-C go to the task, its output comes back, and\n"
		"kiln exits with its exit code (128 + N when signal N ended it).\n"
		"Ctrl-P Ctrl-Q detaches and leaves it running, as does a lost\n"
		"connection; `kiln attach ID` comes back. Local, Slurm and\n"
		"Kubernetes executors (there the pod's container gets the terminal).\n"
		"\n"
		"  -i, --stdin  send this terminal's keys (required, with -t)\n"
		"  -t, --tty    the task runs on a terminal (required)\n"
		"  --gpus N     GPUs for the task (default 0)\n"
		"  --image I    the job's container image (an executor's that runs\n"
		"               images; the local one runs CMD on the machine)\n"
		"  --name N     the job's name (default run)\n",
};

/* The command of `kiln run -it` without one: a login shell. */
static const char *const LOGIN_SHELL[] = {"bash", "-l", NULL};

/*
 * argv split at the first "--": kiln's part (with "-it" and "-ti" made
 * "-i" "-t") in *own (malloc'd, *n_own), the command after it in *cmd
 * (pointing into argv, NULL-terminated by argv itself; NULL without
 * "--").
 */
static void split_args(int argc, char **argv, char ***own, int *n_own,
		       char ***cmd)
{
	char **v = kn_xcalloc((size_t)argc * 2 + 1, sizeof(char *));
	int n = 0, i;

	*cmd = NULL;
	for (i = 0; i < argc; i++) {
		if (!strcmp(argv[i], "--")) {
			*cmd = argv + i + 1;
			break;
		}
		if (!strcmp(argv[i], "-it") || !strcmp(argv[i], "-ti")) {
			v[n++] = (char *)"-i";
			v[n++] = (char *)"-t";
		} else {
			v[n++] = argv[i];
		}
	}
	*own = v;
	*n_own = n;
}

/* The session's query: task, the terminal's size. */
static void session_query(struct kn_buf *path, int task, bool tty)
{
	unsigned rows, cols;
	char num[16];

	snprintf(num, sizeof(num), "%d", task);
	cli_query_add(path, "task", num);
	if (tty && session_term_size(&rows, &cols)) {
		snprintf(num, sizeof(num), "%u", rows);
		cli_query_add(path, "rows", num);
		snprintf(num, sizeof(num), "%u", cols);
		cli_query_add(path, "cols", num);
	}
}

/* Upgrade method path and run the session on it. */
static int session(struct cli_client *c, const char *method,
		   const char *path, const struct session_term_opts *o)
{
	void *conn = NULL;
	char *early = NULL;
	size_t n_early = 0;
	int rc = cli_client_upgrade(c, method, path, KN_MUX_PROTOCOL, &conn,
				    &early, &n_early);

	if (rc == 0)
		rc = session_term_run(conn, early, n_early, o);
	curl_easy_cleanup(conn);
	free(early);
	return rc;
}

static int attach(struct cli_client *c, int64_t id, int task)
{
	struct session_term_opts o = {.tty = true,
				      .stdin_on = true,
				      .detachable = true,
				      .job_id = id};
	struct kn_buf path;
	int rc;

	kn_buf_init(&path, 4096);
	kn_buf_printf(&path, "/v1/jobs/%lld/attach", (long long)id);
	session_query(&path, task, true);
	rc = session(c, "GET", path.data, &o);
	kn_buf_release(&path);
	return rc;
}

static int cmd_attach(struct cli_ctx *ctx, int argc, char **argv)
{
	int task = 0, rc;
	const char *port = NULL;
	const struct cli_flag flags[] = {
		{"task", 0, CLI_FLAG_COUNT, &task},
		{"port", 0, CLI_FLAG_STRING, &port},
		{NULL, 0, CLI_FLAG_BOOL, NULL},
	};
	struct cli_client *c = NULL;
	const char *id_arg = NULL;
	int64_t id;

	rc = cli_parse(ctx, argc, argv, flags, "JOB", &id_arg);
	if (rc == CLI_GO)
		rc = cli_parse_job_id(ctx, id_arg, &id);
	if (rc != CLI_GO)
		return rc;
	rc = cli_client_open(ctx, &c);
	if (rc == 0 && port)
		rc = cli_port_forward_start(ctx, c, id, task, port,
					    "127.0.0.1");
	if (rc == 0)
		rc = attach(c, id, task);
	cli_client_free(c);
	return rc;
}

static int cmd_exec(struct cli_ctx *ctx, int argc, char **argv)
{
	int task = 0, n_own, rc;
	bool in = false, tty = false;
	const struct cli_flag flags[] = {
		{"task", 0, CLI_FLAG_COUNT, &task},
		{"stdin", 'i', CLI_FLAG_BOOL, &in},
		{"tty", 't', CLI_FLAG_BOOL, &tty},
		{NULL, 0, CLI_FLAG_BOOL, NULL},
	};
	struct session_term_opts o = {0};
	struct cli_client *c = NULL;
	const char *id_arg = NULL;
	char **own, **cmd, *text = NULL;
	json_t *args = json_array();
	struct kn_buf path;
	int64_t id;

	split_args(argc, argv, &own, &n_own, &cmd);
	kn_buf_init(&path, 64 * 1024);
	rc = cli_parse(ctx, n_own, own, flags, "JOB", &id_arg);
	if (rc == CLI_GO)
		rc = cli_parse_job_id(ctx, id_arg, &id);
	if (rc == CLI_GO && (!cmd || !cmd[0]))
		rc = cli_usage_error(ctx, "give the command after --: kiln "
					  "exec JOB -- CMD [ARG...]");
	if (rc != CLI_GO)
		goto out;
	rc = cli_client_open(ctx, &c);
	if (rc == 0) {
		for (char **a = cmd; *a; a++)
			json_array_append_new(args, json_string(*a));
		text = json_dumps(args, JSON_COMPACT);
		kn_buf_printf(&path, "/v1/jobs/%lld/exec", (long long)id);
		session_query(&path, task, tty);
		cli_query_add(&path, "tty", tty ? "1" : "0");
		cli_query_add(&path, "command", text);
		o.tty = tty;
		o.stdin_on = in;
		o.job_id = id;
		rc = path.data ? session(c, "POST", path.data, &o)
			       : cli_usage_error(ctx, "the command is too "
						      "long");
	}
out:
	json_decref(args);
	free(text);
	kn_buf_release(&path);
	free(own);
	cli_client_free(c);
	return rc;
}

/* The job `kiln run` submits: cmd on a terminal, with what was asked. */
static char *run_spec(const char *name, char **cmd, int gpus,
		      const char *image)
{
	json_t *command = json_array(), *spec;
	char *text;

	for (char **a = cmd; *a; a++)
		json_array_append_new(command, json_string(*a));
	spec = json_pack("{s:s, s:s, s:o, s:b, s:{s:i}}", "kind", "Job",
			 "name", name, "command", command, "tty", 1,
			 "resources", "gpus", gpus);
	if (image)
		json_object_set_new(spec, "image", json_string(image));
	text = json_dumps(spec, JSON_COMPACT);
	json_decref(spec);
	return text;
}

static int cmd_run(struct cli_ctx *ctx, int argc, char **argv)
{
	int gpus = 0, n_own, rc;
	bool in = false, tty = false;
	const char *image = NULL, *name = "run";
	const struct cli_flag flags[] = {
		{"stdin", 'i', CLI_FLAG_BOOL, &in},
		{"tty", 't', CLI_FLAG_BOOL, &tty},
		{"gpus", 0, CLI_FLAG_COUNT, &gpus},
		{"image", 0, CLI_FLAG_STRING, &image},
		{"name", 0, CLI_FLAG_STRING, &name},
		{NULL, 0, CLI_FLAG_BOOL, NULL},
	};
	struct cli_client *c = NULL;
	json_t *answer = NULL, *job = NULL;
	char **own, **cmd, *spec = NULL;
	int64_t id = 0;

	split_args(argc, argv, &own, &n_own, &cmd);
	rc = cli_parse(ctx, n_own, own, flags, NULL, NULL);
	if (rc == CLI_GO && !(in && tty))
		rc = cli_usage_error(ctx, "kiln run is interactive: give -it "
					  "(a batch job is kiln submit's)");
	if (rc != CLI_GO)
		goto out;
	rc = cli_client_open(ctx, &c);
	if (rc == 0) {
		spec = run_spec(name,
				cmd && cmd[0] ? cmd : (char **)LOGIN_SHELL,
				gpus, image);
		rc = cli_create(c, "/v1/jobs?file=kiln%20run",
				"application/json", spec, strlen(spec),
				&answer);
	}
	if (rc == 0) {
		id = json_integer_value(json_object_get(
			json_object_get(answer, "job"), "id"));
		fprintf(stderr, "kiln: job %lld\n", (long long)id);
		rc = cli_wait_started(c, id, 0, &job);
	}
	if (rc == 0)
		rc = attach(c, id, 0);
out:
	json_decref(answer);
	json_decref(job);
	KN_FREE_ALL(spec, own);
	cli_client_free(c);
	return rc;
}
