/* kiln version: the client's version; needs no server. */
#include <stdio.h>

#include "base/base.h"
#include "cmd/cli.h"

static cli_runner cmd_version;

const struct cli_command cmd_version_entry = {
	.name = "version",
	.run = cmd_version,
	.summary = "print kiln's version",
	.help = "usage: kiln version\n"
		"\n"
		"Print `kiln VERSION`.\n",
};

static int cmd_version(struct cli_ctx *ctx, int argc, char **argv)
{
	int rc = cli_parse(ctx, argc, argv, NULL, NULL, NULL);

	if (rc != CLI_GO)
		return rc;
	puts("kiln " KN_VERSION);
	return CLI_EXIT_OK;
}
