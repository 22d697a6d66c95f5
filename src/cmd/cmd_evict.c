/*
 * kiln evict: preempt a running job through its checkpoint path; and the
 * node verbs drain, cordon and uncordon, which share its shape (one POST,
 * one line of answer).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "cmd/cli.h"
#include "cmd/cli_client.h"
#include "cmd/job_select.h"

static cli_runner cmd_evict;

const struct cli_command cmd_evict_entry = {
	.name = "evict",
	.run = cmd_evict,
	.summary = "preempt running jobs; they resume later",
	.help = "usage: kiln evict ID|ID[K]... [--grace DURATION] [--reason TEXT]\n"
		"       kiln evict [--state S] [--name N] [--owner O] | --all [--yes]\n"
		"\n"
		"Evict each running job named (or the running jobs the filters\n"
		"match; an array's ID: its running elements, ID[K]: element K)\n"
		"the way a spot eviction would: each task gets\n"
		"the job's checkpoint.signal (default SIGTERM), then SIGKILL after\n"
		"--grace (default: the job's checkpoint.grace, else the server's kill\n"
		"grace). The attempt ends `preempted` and the job goes back to the\n"
		"queue ahead of newer jobs of its priority, without using a retry.\n"
		"Only jobs whose spec says `preemptible: true` can be evicted. Users\n"
		"may evict their own jobs; operators and admins any job.\n"
		"\n"
		"  --state S   the jobs in state S\n"
		"  --name N    the jobs named N\n"
		"  --owner O   the jobs submitted with the token named O\n"
		"  --all       every job running (asks first, at a terminal)\n"
		"  -y, --yes   no question for --all\n",
};

static cli_runner cmd_drain;

const struct cli_command cmd_drain_entry = {
	.name = "drain",
	.run = cmd_drain,
	.summary = "stop new work on a node and evict its preemptible jobs",
	.help = "usage: kiln drain NODE [--reason TEXT]\n"
		"       kiln drain --rolling POOL --command PATCH_CMD\n"
		"                  [--surge-timeout DUR] [--no-wait]\n"
		"\n"
		"Mark NODE draining: it gets no new work, its preemptible jobs are\n"
		"evicted (and resume elsewhere or later), the others run to their end.\n"
		"`kiln uncordon NODE` makes it ready again. Operators and admins.\n"
		"\n"
		"--rolling POOL maintains the pool's nodes one at a time on the\n"
		"server (a tracked operation: GET /v1/pools/POOL/rolling; a CLI\n"
		"that goes away does not stop it): cordon; replace each deployment\n"
		"replica on the node by a surge replica started elsewhere first,\n"
		"the old one stopped only once the new one is ready and routed, so\n"
		"even a one-replica deployment keeps serving (--surge-timeout,\n"
		"default 10m: how long a surge replica may wait for room and\n"
		"readiness before that node fails); drain (preemptible jobs evicted\n"
		"through their checkpoints) and wait until the node is empty; run\n"
		"PATCH_CMD with /bin/sh (KILN_NODE and KILN_POOL in its\n"
		"environment); run the health checks; uncordon. It stops at the\n"
		"first node whose command fails, whose health checks fail (leaving\n"
		"it drained) or whose surge replica times out (leaving it\n"
		"cordoned), and says which.\n"
		"The CLI follows the progress until the end (exit 1 when it stopped)\n"
		"unless --no-wait. See docs/capacity.md.\n",
};

static cli_runner cmd_cordon;

const struct cli_command cmd_cordon_entry = {
	.name = "cordon",
	.run = cmd_cordon,
	.summary = "stop new work on a node",
	.help = "usage: kiln cordon NODE [--reason TEXT]\n"
		"\n"
		"Mark NODE cordoned: running work continues, nothing new is placed.\n"
		"Operators and admins.\n",
};

static cli_runner cmd_uncordon;

const struct cli_command cmd_uncordon_entry = {
	.name = "uncordon",
	.run = cmd_uncordon,
	.summary = "make a cordoned or drained node ready",
	.help = "usage: kiln uncordon NODE\n"
		"\n"
		"Mark NODE ready for new work again. Operators and admins.\n",
};

static int cmd_evict(struct cli_ctx *ctx, int argc, char **argv)
{
	static const char *const running[] = {"running", NULL};
	struct job_select sel = {.acting_states = running, .verb = "evict"};
	const char *grace = NULL, *reason = NULL;
	const struct cli_flag flags[] = {
		{"grace", 0, CLI_FLAG_STRING, &grace},
		{"reason", 0, CLI_FLAG_STRING, &reason},
		JOB_SELECT_FLAGS(&sel),
		{NULL, 0, CLI_FLAG_BOOL, NULL},
	};
	const char **args = kn_xcalloc((size_t)argc, sizeof(char *));
	struct kn_buf query;
	int64_t ms;
	size_t n_args = 0;
	int rc;

	kn_buf_init(&query, SIZE_MAX);
	rc = job_select_parse(ctx, argc, argv, flags, &sel, args, &n_args);
	if (rc != CLI_GO)
		goto out;
	if (grace && kn_parse_duration(grace, &ms) < 0) {
		rc = cli_usage_error(ctx, "--grace: \"%s\" is not a duration "
				     "(e.g. 30s)", grace);
		goto out;
	}
	cli_query_add(&query, "grace", grace);
	cli_query_add(&query, "reason", reason);
	/* The job returns to the queue once its tasks have stopped. */
	rc = job_select_run(ctx, &sel, args, n_args, "evict",
			    query.data ? query.data : "", "eviction started");
out:
	free(args);
	kn_buf_release(&query);
	return rc;
}

/* kiln cordon NODE and the like: POST action ("/cordon") to the node. */
static int node_verb(struct cli_ctx *ctx, int argc, char **argv,
		     const char *action)
{
	const char *reason = NULL;
	const struct cli_flag flags[] = {
		{"reason", 0, CLI_FLAG_STRING, &reason},
		{NULL, 0, CLI_FLAG_BOOL, NULL},
	};
	struct cli_client *c = NULL;
	const char *name = NULL;
	struct kn_buf path;
	char state[64];
	json_t *answer = NULL;
	int rc;

	kn_buf_init(&path, SIZE_MAX);
	rc = cli_parse_open(ctx, argc, argv, flags, "NODE", &name, &c);
	if (rc != CLI_GO)
		goto out;
	cli_path_object(&path, "/v1/nodes", name, action);
	if (reason)
		cli_query_add(&path, "reason", reason);
	rc = cli_call(c, "POST", path.data, NULL, NULL, 0, &answer);
	if (rc)
		goto out;
	cli_clean(state,
		  cli_json_str(json_object_get(answer, "node"), "state"),
		  sizeof(state));
	printf("node %s: %s\n", name, state);
out:
	json_decref(answer);
	kn_buf_release(&path);
	cli_client_free(c);
	return rc;
}

/* "node 2/3 web-2: draining" when it changes. */
static void rolling_progress(json_t *r, char *last, size_t len)
{
	char line[640];
	const char *node = json_string_value(json_object_get(r, "node"));
	const char *step = json_string_value(json_object_get(r, "step"));

	if (!node || !step)
		return;
	const char *waiting = json_string_value(json_object_get(r, "waiting"));

	snprintf(line, sizeof(line), "node %zu/%lld %s: %s%s%.400s",
		 json_array_size(json_object_get(r, "done")) + 1,
		 (long long)cli_json_int(r, "nodes"), node, step,
		 waiting ? ": " : "", waiting ? waiting : "");
	if (strcmp(line, last) != 0) {
		printf("%s\n", line);
		fflush(stdout);
		kn_strlcpy(last, line, len);
	}
}

/*
 * kiln drain --rolling POOL --command CMD: start the server's tracked
 * operation, then follow it until it ends (a disconnect does not stop it).
 */
static int rolling_drain(struct cli_ctx *ctx, int argc, char **argv)
{
	const char *pool = NULL, *command = NULL, *surge_timeout = NULL;
	bool no_wait = false;
	const struct cli_flag flags[] = {
		{"rolling", 0, CLI_FLAG_STRING, &pool},
		{"command", 0, CLI_FLAG_STRING, &command},
		{"surge-timeout", 0, CLI_FLAG_STRING, &surge_timeout},
		{"no-wait", 0, CLI_FLAG_BOOL, &no_wait},
		{NULL, 0, CLI_FLAG_BOOL, NULL},
	};
	struct cli_client *c = NULL;
	struct kn_buf path;
	json_t *answer = NULL, *body = NULL, *r;
	char last[640] = "";
	int64_t surge_ms = 0;
	int rc;

	kn_buf_init(&path, SIZE_MAX);
	rc = cli_parse(ctx, argc, argv, flags, NULL, NULL);
	if (rc != CLI_GO)
		goto out;
	if (!command) {
		rc = cli_usage_error(ctx, "drain --rolling: --command is required");
		goto out;
	}
	if (surge_timeout && (kn_parse_duration(surge_timeout, &surge_ms) < 0 ||
			      surge_ms <= 0)) {
		rc = cli_usage_error(ctx, "drain --rolling: --surge-timeout: "
				     "\"%s\" is not a duration such as 10m",
				     surge_timeout);
		goto out;
	}
	rc = cli_client_open(ctx, &c);
	if (rc)
		goto out;
	cli_path_object(&path, "/v1/pools", pool, "/rolling");
	body = json_pack("{s:s}", "command", command);
	if (surge_timeout)
		json_object_set_new(body, "surge_timeout_s",
				    json_real((double)surge_ms / 1000.0));
	rc = cli_post_json(c, path.data, body, &answer);
	json_decref(body);
	if (rc)
		goto out;
	printf("rolling maintenance of pool %s started (%lld nodes)\n", pool,
	       (long long)cli_json_int(json_object_get(answer, "rolling"),
				       "nodes"));
	for (;;) {
		const char *state;

		r = json_object_get(answer, "rolling");
		state = cli_json_str(r, "state");
		rolling_progress(r, last, sizeof(last));
		if (strcmp(state, "running") != 0) {
			if (!strcmp(state, "succeeded")) {
				printf("pool %s: every node maintained\n", pool);
			} else {
				printf("pool %s: stopped: %s\n", pool,
				       cli_json_str(r, "error"));
				rc = CLI_EXIT_FAIL;
			}
			break;
		}
		if (no_wait)
			break;
		rc = cli_get_after(c, 250, path.data, &answer);
		if (rc)
			goto out;
	}
out:
	json_decref(answer);
	kn_buf_release(&path);
	cli_client_free(c);
	return rc;
}

static int cmd_drain(struct cli_ctx *ctx, int argc, char **argv)
{
	for (int i = 1; i < argc; i++)
		if (!strcmp(argv[i], "--rolling") ||
		    !strncmp(argv[i], "--rolling=", 10))
			return rolling_drain(ctx, argc, argv);
	return node_verb(ctx, argc, argv, "/drain");
}

static int cmd_cordon(struct cli_ctx *ctx, int argc, char **argv)
{
	return node_verb(ctx, argc, argv, "/cordon");
}

static int cmd_uncordon(struct cli_ctx *ctx, int argc, char **argv)
{
	return node_verb(ctx, argc, argv, "/uncordon");
}
