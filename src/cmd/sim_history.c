/*
 * kiln sim --from-history: the server's ended jobs and nodes fetched from
 * its API and written as the CSV files `kiln sim` then replays; the
 * mapping is kn_sim_history_csv's (src/sim/history_trace.c).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "cmd/cli_client.h"
#include "cmd/sim_history.h"
#include "sim/sim.h"

static int write_text(const struct cli_ctx *ctx, const char *path,
		      const struct kn_buf *b)
{
	int rc = kn_write_file_atomic(path, b->data ? b->data : "", b->len,
				      0644);

	if (rc < 0)
		return cli_fail(ctx, "%s: %s", path, strerror(-rc));
	return CLI_GO;
}

int sim_history_write(const struct cli_ctx *ctx, const char *dir,
		      bool with_nodes, struct kn_sim_history *out)
{
	struct cli_client *client = NULL;
	json_t *nodes = NULL, *jobs = NULL;
	struct kn_buf nb, pb;
	char *path = NULL;
	int rc;

	memset(out, 0, sizeof(*out));
	kn_buf_init(&nb, KN_SIM_MAX_FILE);
	kn_buf_init(&pb, KN_SIM_MAX_FILE);
	rc = cli_client_open(ctx, &client);
	if (rc != 0)
		goto out;
	/* With the user's own node list the server's nodes are not needed. */
	if ((with_nodes && (rc = cli_get(client, "/v1/nodes", &nodes)) != 0) ||
	    (rc = cli_get(client, "/v1/jobs", &jobs)) != 0)
		goto out;
	kn_sim_history_csv(jobs, nodes, &pb, &nb, out);
	if (out->pods == 0) {
		rc = cli_fail(ctx, "--from-history: the server has no ended "
				   "job to replay (MIG jobs are left out)");
		goto out;
	}
	path = kn_asprintf("%s/pods.csv", dir);
	rc = write_text(ctx, path, &pb);
	if (rc != CLI_GO)
		goto out;
	if (with_nodes) {
		free(path);
		path = kn_asprintf("%s/nodes.csv", dir);
		rc = write_text(ctx, path, &nb);
	}
out:
	free(path);
	kn_buf_release(&nb);
	kn_buf_release(&pb);
	json_decref(nodes);
	json_decref(jobs);
	cli_client_free(client);
	return rc;
}
