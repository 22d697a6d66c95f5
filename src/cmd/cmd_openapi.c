/* kiln openapi: print the API's OpenAPI document; needs no server. */
#include <stdio.h>
#include <stdlib.h>

#include "base/base.h"
#include "cmd/cli.h"
#include "server/server.h"

static cli_runner cmd_openapi;

const struct cli_command cmd_openapi_entry = {
	.name = "openapi",
	.run = cmd_openapi,
	.summary = "print the API's OpenAPI 3.1 document",
	.help = "usage: kiln openapi\n"
		"\n"
		"Print the OpenAPI 3.1 description of the HTTP API (JSON), the same\n"
		"document a server answers at GET /v1/openapi.json; needs no server.\n"
		"`make openapi` writes it to docs/openapi.json.\n",
};

static int cmd_openapi(struct cli_ctx *ctx, int argc, char **argv)
{
	int rc = cli_parse(ctx, argc, argv, NULL, NULL, NULL);
	struct kn_error err;
	char *doc;

	if (rc != CLI_GO)
		return rc;
	doc = kn_server_openapi(&err);
	if (!doc) {
		fprintf(stderr, "kiln openapi: %s\n", err.message);
		return CLI_EXIT_FAIL;
	}
	puts(doc);
	free(doc);
	return CLI_EXIT_OK;
}
