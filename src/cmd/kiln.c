/*
 * kiln: main(), the global flags and the order of the subcommands.
 *
 * Git-style: `kiln [GLOBAL FLAGS] COMMAND [ARGS]`. Each command's entry,
 * with its summary and help, stands in the file that implements it; the
 * table here lists them in the order `kiln --help` prints. main() reads
 * global flags up to the command's name, finds the command in the table
 * and hands it the rest; the command parses its own flags and any global
 * flags that come after its name (cli_parse). The server and the task
 * shim are handed their arguments untouched, except that `--help` right
 * after their name prints their entry's help like every other command's.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <curl/curl.h>

#include "base/base.h"
#include "cmd/cli.h"

static const struct cli_command *const commands[] = {
	&cmd_server_entry,
	&cmd_submit_entry,
	&cmd_ls_entry,
	&cmd_show_entry,
	&cmd_port_forward_entry,
	&cmd_logs_entry,
	&cmd_run_entry,
	&cmd_attach_entry,
	&cmd_exec_entry,
	&cmd_cancel_entry,
	&cmd_evict_entry,
	&cmd_drain_entry,
	&cmd_cordon_entry,
	&cmd_uncordon_entry,
	&cmd_nodes_entry,
	&cmd_pools_entry,
	&cmd_token_entry,
	&cmd_deploy_entry,
	&cmd_deployments_entry,
	&cmd_scale_entry,
	&cmd_undeploy_entry,
	&cmd_rollout_entry,
	&cmd_key_entry,
	&cmd_model_entry,
	&cmd_workflow_entry,
	&cmd_alerts_entry,
	&cmd_events_entry,
	&cmd_audit_entry,
	&cmd_backup_entry,
	&cmd_validate_entry,
	&cmd_sim_entry,
	&cmd_render_entry,
	&cmd_kube_scheduler_entry,
	&cmd_exporter_entry,
	&cmd_gateway_entry,
	&cmd_health_entry,
	&cmd_advise_entry,
	&cmd_cost_entry,
	&cmd_tune_entry,
	&cmd_blob_entry,
	&cmd_ckpt_entry,
	&cmd_openapi_entry,
	&cmd_ui_entry,
	&cmd_version_entry,
	&cmd_man_entry,
	&cmd_completion_entry,
	&cmd_bench_entry,
	&cmd_shim_entry,
};

#define N_COMMANDS KN_LEN(commands)

const struct cli_command *const *cli_commands(size_t *n)
{
	*n = N_COMMANDS;
	return commands;
}

void cli_print_help(FILE *f)
{
	size_t i;
	int width = 0;

	fputs("usage: kiln [GLOBAL FLAGS] COMMAND [ARGS]\n"
	      "\n"
	      "kiln runs AI jobs on GPU machines.\n"
	      "\n"
	      "Commands:\n",
	      f);
	for (i = 0; i < N_COMMANDS; i++)
		if (!commands[i]->hidden &&
		    (int)strlen(commands[i]->name) > width)
			width = (int)strlen(commands[i]->name);
	for (i = 0; i < N_COMMANDS; i++)
		if (!commands[i]->hidden)
			fprintf(f, "  %-*s %s\n", width, commands[i]->name,
				commands[i]->summary);
	fputs("\n"
	      "Run `kiln COMMAND --help` for a command's flags.\n"
	      "\n"
	      "Global flags (before or after the command):\n"
	      "  --server URL     the API server; else $KILN_SERVER, else the URL\n"
	      "                   in $KILN_HOME/server.url (KILN_HOME defaults to\n"
	      "                   ~/.kiln)\n"
	      "  --token TOKEN    the API token; else $KILN_TOKEN, else the one in\n"
	      "                   $KILN_HOME/admin.token\n"
	      "  An https:// server's certificate is verified against the\n"
	      "  system's CAs, or $KILN_CA (a PEM file); $KILN_CLIENT_CERT and\n"
	      "  $KILN_CLIENT_KEY give a client certificate (docs/tls.md)\n"
	      "  -o, --output table|wide|json|yaml|name\n"
	      "                   how listings are printed (default: table, cut\n"
	      "                   to 80 columns; wide: nothing cut; name: ids\n"
	      "                   or names alone, where a command lists them)\n"
	      "  --no-headers     tables without their header row\n"
	      "  -h, --help       this help\n"
	      "  --version        print kiln's version\n"
	      "\n"
	      "Exit status:\n"
	      "  0  success\n"
	      "  1  the request failed (API error, invalid spec, not found)\n"
	      "  2  usage error\n"
	      "  3  server unreachable, or no server configured\n"
	      "  4  submit --wait: the job failed\n"
	      "  5  submit --wait: the job was cancelled\n"
	      "  submit --follow exits with the job's own exit code when it\n"
	      "  failed with one\n",
	      f);
}

const struct cli_command *cli_find_command(const char *name)
{
	size_t i;

	for (i = 0; i < N_COMMANDS; i++)
		if (!strcmp(commands[i]->name, name))
			return commands[i];
	return NULL;
}

static int unknown_command(struct cli_ctx *ctx, const char *name)
{
	const char *names[N_COMMANDS + 1];
	const char *near;
	size_t i, n = 0;

	for (i = 0; i < N_COMMANDS; i++)
		if (!commands[i]->hidden)
			names[n++] = commands[i]->name;
	names[n] = NULL;
	near = cli_closest(name, names);
	if (near)
		return cli_usage_error(ctx,
				       "unknown command '%s'; did you mean '%s'?",
				       name, near);
	return cli_usage_error(ctx, "unknown command '%s'; see 'kiln --help'",
			       name);
}

/* `kiln help [COMMAND]`. */
static int help_command(struct cli_ctx *ctx, int argc, char **argv)
{
	const struct cli_command *cmd;

	if (argc < 2) {
		cli_print_help(stdout);
		return CLI_EXIT_OK;
	}
	cmd = cli_find_command(argv[1]);
	if (!cmd)
		return unknown_command(ctx, argv[1]);
	fputs(cmd->help, stdout);
	return CLI_EXIT_OK;
}

int main(int argc, char **argv)
{
	struct cli_ctx ctx = {0};
	const struct cli_command *cmd;
	int i, rc;

	for (i = 1; i < argc && argv[i][0] == '-' && argv[i][1]; i++) {
		if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
			cli_print_help(stdout);
			return CLI_EXIT_OK;
		}
		if (!strcmp(argv[i], "--version")) {
			puts("kiln " KN_VERSION);
			return CLI_EXIT_OK;
		}
		rc = cli_take_flag(&ctx, NULL, argc, argv, &i);
		if (rc != CLI_GO)
			return rc;
	}
	rc = cli_check_output(&ctx);
	if (rc != CLI_GO)
		return rc;
	if (i == argc) {
		cli_print_help(stderr);
		return CLI_EXIT_USAGE;
	}
	if (!strcmp(argv[i], "help"))
		return help_command(&ctx, argc - i, argv + i);
	cmd = cli_find_command(argv[i]);
	if (!cmd)
		return unknown_command(&ctx, argv[i]);
	if (cmd->run_raw) {
		/* Their entries carry their help, as every command's do. */
		if (i + 1 < argc && (!strcmp(argv[i + 1], "--help") ||
				     !strcmp(argv[i + 1], "-h"))) {
			fputs(cmd->help, stdout);
			return CLI_EXIT_OK;
		}
		return cmd->run_raw(argc - i, argv + i);
	}

	ctx.cmd = cmd;
	snprintf(ctx.prog, sizeof(ctx.prog), "kiln %s", cmd->name);
	if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
		fputs("kiln: cannot start libcurl\n", stderr);
		return CLI_EXIT_FAIL;
	}
	rc = cmd->run(&ctx, argc - i, argv + i);
	curl_global_cleanup();
	if (fflush(stdout) != 0 && rc == CLI_EXIT_OK) {
		perror("kiln: standard output");
		rc = CLI_EXIT_FAIL;
	}
	return rc;
}
