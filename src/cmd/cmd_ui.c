/*
 * kiln ui: a one-time login link to the web console. The code goes in
 * the URL's fragment, which a browser never sends: it reaches the
 * server only in the body of the page's login request.
 */
#include <stdio.h>

#include "base/base.h"
#include "cmd/cli.h"
#include "cmd/cli_client.h"

static cli_runner cmd_ui;

const struct cli_command cmd_ui_entry = {
	.name = "ui",
	.run = cmd_ui,
	.summary = "print a one-time login link to the web console",
	.help = "usage: kiln ui\n"
		"\n"
		"Ask the server for a one-time login code for this token (an admin's)\n"
		"and print the console's link with it: SERVER/#code=CODE. The code\n"
		"works once, within 5 minutes, and stays out of requests and logs (it\n"
		"is in the link's fragment); opening the link starts a console session\n"
		"that lasts 8 hours or until logged out.\n",
};

static int cmd_ui(struct cli_ctx *ctx, int argc, char **argv)
{
	struct cli_client *c = NULL;
	json_t *answer = NULL;
	const char *code;
	int rc = cli_parse_open(ctx, argc, argv, NULL, NULL, NULL, &c);

	if (rc != CLI_GO)
		return rc;
	rc = cli_call(c, "POST", "/v1/console/codes", NULL, NULL, 0, &answer);
	if (rc == 0)
		rc = cli_answer_text(answer, "code", "login code", &code);
	if (rc)
		goto out;
	printf("%s/#code=%s\n", cli_client_url(c), code);
	fputs("kiln: the link works once, within 5 minutes\n", stderr);
out:
	json_decref(answer);
	cli_client_free(c);
	return rc;
}
