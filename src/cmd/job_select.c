/*
 * job_select: the ids or filters of `kiln cancel` and `kiln evict`, and
 * the loop that acts on each job.
 */
#include "cmd/job_select.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/base.h"

static bool filtered(const struct job_select *sel)
{
	return sel->state || sel->name || sel->owner;
}

/* --all acts on every job: only once the caller said so. */
static int confirm_all(struct cli_ctx *ctx, const struct job_select *sel,
		       size_t n)
{
	char answer[16];

	if (sel->yes)
		return CLI_GO;
	if (!isatty(STDIN_FILENO))
		return cli_usage_error(ctx,
				       "--all would %s %zu jobs: add --yes to "
				       "confirm",
				       sel->verb, n);
	fprintf(stderr, "%s %zu jobs? [y/N] ", sel->verb, n);
	if (!fgets(answer, sizeof(answer), stdin) ||
	    (answer[0] != 'y' && answer[0] != 'Y')) {
		fputs("nothing done\n", stderr);
		return CLI_EXIT_FAIL;
	}
	return CLI_GO;
}

static bool acting(const struct job_select *sel, const char *state)
{
	if (sel->state)
		return true; /* the server filtered on it */
	for (size_t i = 0; sel->acting_states[i]; i++)
		if (!strcmp(state, sel->acting_states[i]))
			return true;
	return false;
}

/* The ids of the jobs the filters (or --all) match, from GET /v1/jobs. */
static int matching(struct cli_ctx *ctx, struct cli_client *c,
		    const struct job_select *sel, struct job_ref **ids,
		    size_t *n)
{
	struct kn_buf path;
	json_t *answer = NULL, *job;
	size_t i;
	int rc;

	kn_buf_init(&path, SIZE_MAX);
	kn_buf_printf(&path, "/v1/jobs");
	cli_query_add(&path, "state", sel->state);
	cli_query_add(&path, "name", sel->name);
	cli_query_add(&path, "owner", sel->owner);
	rc = cli_get(c, path.data, &answer);
	kn_buf_release(&path);
	if (rc)
		return rc;
	rc = CLI_GO;
	*ids = kn_xcalloc(json_array_size(json_object_get(answer, "jobs")) + 1,
			  sizeof(**ids));
	*n = 0;
	json_array_foreach(json_object_get(answer, "jobs"), i, job)
		if (acting(sel, cli_json_str(job, "state")))
			(*ids)[(*n)++].id = cli_json_int(job, "id");
	json_decref(answer);
	if (!*n)
		fprintf(stderr, "%s: no job to %s matches\n", ctx->prog,
			sel->verb);
	else if (sel->all && !filtered(sel))
		rc = confirm_all(ctx, sel, *n);
	if (rc != CLI_GO) {
		free(*ids);
		*ids = NULL;
	}
	return rc;
}

int job_select_parse(struct cli_ctx *ctx, int argc, char **argv,
		     const struct cli_flag *flags, const struct job_select *sel,
		     const char **args, size_t *n_args)
{
	int rc = cli_parse_positionals(ctx, argc, argv, flags, args,
				       (size_t)argc, n_args);

	if (rc != CLI_GO)
		return rc;
	if (*n_args && (filtered(sel) || sel->all))
		return cli_usage_error(ctx, "give job IDs or filters "
					    "(--state, --name, --owner, "
					    "--all), not both");
	if (!*n_args && !filtered(sel) && !sel->all)
		return cli_usage_error(ctx, "missing ID (or --state, --name, "
					    "--owner, --all); see '%s --help'",
				       ctx->prog);
	return CLI_GO;
}

int job_select(struct cli_ctx *ctx, struct cli_client *c,
	       const struct job_select *sel, const char *const *args,
	       size_t n_args, struct job_ref **ids, size_t *n)
{
	int rc;

	*ids = NULL;
	*n = 0;
	if (!n_args)
		return matching(ctx, c, sel, ids, n);
	*ids = kn_xcalloc(n_args, sizeof(**ids));
	for (size_t i = 0; i < n_args; i++) {
		int64_t index;

		rc = cli_parse_job_ref(ctx, args[i], &(*ids)[i].id, &index);
		if (rc == CLI_GO && index >= 0) {
			(*ids)[i].element = true;
			rc = cli_job_element(c, (*ids)[i].id, index,
					     &(*ids)[i].id);
			if (rc == 0)
				rc = CLI_GO;
		}
		if (rc != CLI_GO) {
			free(*ids);
			*ids = NULL;
			return rc;
		}
	}
	*n = n_args;
	return CLI_GO;
}

int job_select_act(struct cli_client *c, const struct job_ref *ids, size_t n,
		   const char *action, const char *query, const char *done)
{
	int worst = CLI_EXIT_OK;

	for (size_t i = 0; i < n; i++) {
		const char *whole = ids[i].element ? ""
				    : query[0]     ? "&array=1"
						   : "?array=1";
		char *path = kn_asprintf("/v1/jobs/%lld/%s%s%s",
					 (long long)ids[i].id, action, query,
					 whole);
		json_t *answer = NULL;
		char state[64];
		int rc = cli_call(c, "POST", path, NULL, NULL, 0, &answer);

		free(path);
		if (rc) {
			worst = rc;
			continue;
		}
		cli_clean(state,
			  cli_json_str(json_object_get(answer, "job"), "state"),
			  sizeof(state));
		printf("job %lld: %s (state %s)\n", (long long)ids[i].id, done,
		       state);
		json_decref(answer);
	}
	return worst;
}

int job_select_run(struct cli_ctx *ctx, const struct job_select *sel,
		   const char *const *args, size_t n_args, const char *action,
		   const char *query, const char *done)
{
	struct cli_client *c = NULL;
	struct job_ref *ids = NULL;
	size_t n = 0;
	int rc = cli_client_open(ctx, &c);

	if (rc)
		return rc;
	rc = job_select(ctx, c, sel, args, n_args, &ids, &n);
	if (rc == CLI_GO)
		rc = job_select_act(c, ids, n, action, query, done);
	free(ids);
	cli_client_free(c);
	return rc;
}
