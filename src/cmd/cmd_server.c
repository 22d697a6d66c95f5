/*
 * kiln server: flags and config file in, kn_server_run, exit code out.
 *
 * Every flag but --config and --print-config is a row of
 * kn_server_options(); getopt's table is built from it. The config file is read first and the command line
 * applied over it, so a flag always wins; a repeatable flag given on the
 * command line replaces the file's whole list rather than adding to it.
 */
#include "cmd/cli.h"
#include "cmd/cli_client.h"

#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/server.h"

static int cmd_server(int argc, char **argv);

const struct cli_command cmd_server_entry = {
	.name = "server",
	.run_raw = cmd_server,
	.summary = "run the control plane: API, scheduler, executors",
	.help = cmd_server_help,
};

/* getopt's value for option i of the table; --config and --print-config
   sit below them. */
#define OPTION_VAL_BASE 256
#define CONFIG_VAL (OPTION_VAL_BASE - 1)
#define PRINT_CONFIG_VAL (OPTION_VAL_BASE - 2)

/* getopt's options: the table's rows, then --config and --print-config. */
static struct option *getopt_options(const struct kn_option *opts, size_t n)
{
	struct option *longopts = kn_xcalloc(n + 3, sizeof(*longopts));

	for (size_t i = 0; i < n; i++) {
		longopts[i].name = opts[i].name;
		longopts[i].has_arg = opts[i].kind == KN_OPT_BOOL ?
					      no_argument :
					      required_argument;
		longopts[i].val = OPTION_VAL_BASE + (int)i;
	}
	longopts[n].name = "config";
	longopts[n].has_arg = required_argument;
	longopts[n].val = CONFIG_VAL;
	longopts[n + 1].name = "print-config";
	longopts[n + 1].has_arg = no_argument;
	longopts[n + 1].val = PRINT_CONFIG_VAL;
	return longopts;
}

/*
 * The config file: --config FILE (which must exist), else server.yaml in
 * the home the command line or environment names, when it is there.
 */
static int load_config(struct kn_server_config *cfg, const char *explicit,
		       const char *home_flag, char **read_path,
		       struct kn_option_origin *origins)
{
	char *home = home_flag ? NULL : cli_kiln_home();
	char *path = explicit ? kn_xstrdup(explicit) :
				kn_asprintf("%s/server.yaml",
					    home_flag ? home_flag : home);
	struct kn_error err;
	int rc = kn_server_config_load(cfg, path, origins, &err);

	if (rc == 0) {
		*read_path = path;
		path = NULL;
	} else if (rc == -ENOENT && !explicit) {
		rc = 0;
	}
	if (rc < 0)
		fprintf(stderr, "kiln server: %s\n", err.message);
	KN_FREE_ALL(path, home);
	return rc;
}

/* Apply the command line over what the file set; given[i]: option i
   was on it. */
static int apply_flags(struct kn_server_config *cfg, int argc, char **argv,
		       const struct option *longopts,
		       const struct kn_option *opts, size_t n, bool *given)
{
	bool *replaced = kn_xcalloc(n, sizeof(*replaced));
	struct kn_error err;
	int c, rc = 0;

	optind = 1;
	opterr = 0;
	while (rc == 0 &&
	       (c = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
		const struct kn_option *o;
		size_t i;

		if (c == CONFIG_VAL || c == PRINT_CONFIG_VAL)
			continue;
		i = (size_t)(c - OPTION_VAL_BASE);
		o = &opts[i];
		given[i] = true;
		if (o->kind == KN_OPT_LIST && !replaced[i]) {
			kn_option_clear(o, cfg);
			replaced[i] = true;
		}
		rc = kn_option_set(o, cfg, o->kind == KN_OPT_BOOL ? "true" :
				   optarg, &cfg->strings, &err);
		if (rc < 0)
			fprintf(stderr, "kiln server: --%s: %s\n", o->name,
				err.message);
	}
	free(replaced);
	return rc;
}

/* --print-config: every option's value in effect, as the config file
   would give it, and where it came from. */
static void print_config(const struct kn_server_config *cfg,
			 const struct kn_option *opts, size_t n,
			 const char *path, const bool *given,
			 const struct kn_option_origin *origins)
{
	printf("# kiln server's effective configuration (%s)\n",
	       path ? path : "no config file");
	for (size_t i = 0; i < n; i++)
		cli_config_print_line(&opts[i], cfg, given[i], path,
				      origins[i]);
}

static int cmd_server(int argc, char **argv)
{
	size_t n_opts;
	const struct kn_option *opts = kn_server_options(&n_opts);
	struct option *longopts = getopt_options(opts, n_opts);
	const char *config = NULL, *home_flag = NULL;
	struct kn_server_config cfg;
	struct kn_error err;
	char *home = NULL, *read_path = NULL;
	bool *given = kn_xcalloc(n_opts, sizeof(*given)), print = false;
	struct kn_option_origin *origins = kn_xcalloc(n_opts,
						      sizeof(*origins));
	int c, rc = 2;

	kn_server_config_init(&cfg);
	/* First only find --config (and --home, where the default file is),
	   and refuse unknown flags before reading any file. */
	optind = 1;
	while ((c = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
		if (c == '?' || c == ':') {
			fputs("see 'kiln server --help'\n", stderr);
			goto out;
		}
		if (c == CONFIG_VAL)
			config = optarg;
		else if (c == PRINT_CONFIG_VAL)
			print = true;
		else if (!strcmp(opts[c - OPTION_VAL_BASE].name, "home"))
			home_flag = optarg;
	}
	if (optind < argc) {
		fprintf(stderr, "kiln server: unexpected argument \"%s\"\n",
			argv[optind]);
		goto out;
	}
	if (load_config(&cfg, config, home_flag, &read_path, origins) < 0 ||
	    apply_flags(&cfg, argc, argv, longopts, opts, n_opts, given) < 0)
		goto out;
	if (kn_server_config_check(&cfg, &err) < 0) {
		fprintf(stderr, "kiln server: %s\n", err.message);
		goto out;
	}
	if (cfg.debug)
		kn_log_level = KN_LOG_DEBUG;
	if (!cfg.health_sku)
		cfg.health_sku = getenv("KILN_SKU");
	if (!cfg.home) {
		home = cli_kiln_home();
		cfg.home = home;
	}
	if (print) {
		print_config(&cfg, opts, n_opts, read_path, given, origins);
		rc = 0;
		goto out;
	}
	rc = kn_server_run(&cfg, &err);
	if (rc < 0)
		fprintf(stderr, "kiln server: %s\n", err.message);
	rc = rc < 0 ? 1 : 0;
out:
	KN_FREE_ALL(home, read_path, given, origins, longopts);
	kn_server_config_release(&cfg);
	return rc;
}
