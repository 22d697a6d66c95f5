/*
 * A command's config file (kiln gateway, kiln exporter): `--config FILE`
 * is a YAML mapping whose keys are the command's long flags and whose
 * values are what they take, read before the command line so a flag
 * always wins. The flag table is the one source of keys; the file is
 * read by the same parser as the server's, so errors name
 * FILE:LINE:COLUMN and the key.
 */
#include "cmd/cli.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "spec/spec.h"

/* A config file is a page or two of text. */
#define CONFIG_MAX_BYTES (256 * 1024)

/*
 * Values read from the file live as long as the process, as argv's do:
 * a process runs one command.
 */
static struct kn_strpool file_values;

static const struct cli_flag *flag_named(const struct cli_flag *flags,
					 const char *name)
{
	for (; flags->name; flags++)
		if (!strcmp(flags->name, name))
			return flags;
	return NULL;
}

/* kn_option's reading for a row that stands for a flag of the table. */
static int set_flag(const struct kn_option *o, void *target, const char *text,
		    struct kn_strpool *pool, struct kn_error *err)
{
	const struct cli_flag *f = flag_named(target, o->name);
	char *end;
	long n;

	switch (f->type) {
	case CLI_FLAG_BOOL:
		*(bool *)f->dest = !strcmp(text, "true");
		return 0;
	case CLI_FLAG_STRING:
		*(const char **)f->dest = kn_strpool_keep(pool, text);
		return 0;
	case CLI_FLAG_COUNT:
		errno = 0;
		n = strtol(text, &end, 10);
		if (errno || *end || end == text || text[0] == '-' ||
		    n > 2147483647L)
			return kn_errorf(err, KN_EINVAL, o->name, "\"%s\" is "
					 "not a whole number", text);
		*(int *)f->dest = (int)n;
		return 0;
	case CLI_FLAG_LIST:
		break; /* not offered as a key: see cli_config_load */
	}
	return kn_errorf(err, KN_EINVAL, o->name, "unknown flag type");
}

/* The value of --config on the command line, or NULL. */
static const char *config_arg(int argc, char **argv)
{
	for (int i = 1; i < argc && strcmp(argv[i], "--"); i++) {
		if (!strcmp(argv[i], "--config") && i + 1 < argc)
			return argv[i + 1];
		if (!strncmp(argv[i], "--config=", 9))
			return argv[i] + 9;
	}
	return NULL;
}

int cli_config_load(struct cli_ctx *ctx, const struct cli_flag *flags,
		    int argc, char **argv)
{
	const char *path = config_arg(argc, argv);
	struct kn_option *opts;
	struct kn_error err;
	size_t n = 0, len = 0;
	char *text = NULL;
	int rc;

	if (!path)
		return CLI_GO;
	rc = kn_config_file_read(path, CONFIG_MAX_BYTES,
				 "says which server, token and files to trust",
				 &text, &len, &err);
	if (rc < 0)
		return cli_usage_error(ctx, "--config: %s", err.message);
	for (const struct cli_flag *f = flags; f->name; f++)
		n++;
	opts = kn_xcalloc(n, sizeof(*opts));
	n = 0;
	for (const struct cli_flag *f = flags; f->name; f++) {
		/* No command with a config file takes a repeatable flag;
		   one would need the command line to replace its list. */
		if (!strcmp(f->name, "config") || f->type == CLI_FLAG_LIST)
			continue;
		opts[n].name = f->name;
		opts[n].kind = f->type == CLI_FLAG_BOOL ? KN_OPT_BOOL :
							  KN_OPT_STRING;
		opts[n].flags = KN_OPT_EMPTY_OK;
		opts[n++].set = set_flag;
	}
	rc = kn_option_conf_parse(text, len, path, opts, n, (void *)flags,
				  &file_values, &err);
	free(opts);
	free(text);
	if (rc < 0)
		return cli_usage_error(ctx, "%s", err.message);
	return CLI_GO;
}
