/*
 * A command's config file (kiln gateway, kiln exporter): `--config FILE`
 * is a YAML mapping whose keys are the command's long flags and whose
 * values are what they take, read before the command line so a flag
 * always wins. The flag table is the one source of keys; the file is
 * read by the same parser as the server's, so errors name
 * FILE:LINE:COLUMN and the key, and the TLS flags may be grouped as
 * tls: {cert, key, client_ca} as in the server's file.
 *
 * --print-config shows every key's value in effect and where it came
 * from, but not a secret's (a token, a webhook URL): that line is
 * printed commented out, without its value.
 */
#include "cmd/cli.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
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

/* Flags of the table that are not config file keys. */
static bool not_a_key(const struct cli_flag *f)
{
	/* No command with a config file takes a repeatable flag; one would
	   need the command line to replace its list. */
	return !strcmp(f->name, "config") || !strcmp(f->name, "print-config") ||
	       f->type == CLI_FLAG_LIST;
}

int cli_config_load(struct cli_ctx *ctx, const struct cli_flag *flags,
		    int argc, char **argv, struct cli_config *conf)
{
	const char *path = config_arg(argc, argv);
	struct kn_option_origin *origins;
	struct kn_option *opts;
	struct kn_error err;
	size_t n = 0, len = 0, *row;
	char *text = NULL;
	int rc;

	for (const struct cli_flag *f = flags; f->name; f++)
		n++;
	conf->path = NULL;
	conf->origins = kn_xcalloc(n, sizeof(*conf->origins));
	if (!path)
		return CLI_GO;
	rc = kn_config_file_read(path, CONFIG_MAX_BYTES,
				 "says which server, token and files to trust",
				 &text, &len, &err);
	if (rc < 0)
		return cli_usage_error(ctx, "--config: %s", err.message);
	opts = kn_xcalloc(n, sizeof(*opts));
	origins = kn_xcalloc(n, sizeof(*origins));
	row = kn_xcalloc(n, sizeof(*row));
	n = 0;
	for (const struct cli_flag *f = flags; f->name; f++) {
		if (not_a_key(f))
			continue;
		row[n] = (size_t)(f - flags);
		opts[n].name = f->name;
		opts[n].kind = f->type == CLI_FLAG_BOOL ? KN_OPT_BOOL :
							  KN_OPT_STRING;
		opts[n].flags = KN_OPT_EMPTY_OK;
		opts[n++].set = set_flag;
	}
	rc = kn_option_conf_parse(text, len, path, opts, n, (void *)flags,
				  &file_values, origins, &err);
	for (size_t i = 0; rc == 0 && i < n; i++)
		conf->origins[row[i]] = origins[i];
	KN_FREE_ALL(row, origins, opts, text);
	if (rc < 0)
		return cli_usage_error(ctx, "%s", err.message);
	conf->path = path;
	return CLI_GO;
}

void cli_config_release(struct cli_config *conf)
{
	free(conf->origins);
	conf->origins = NULL;
}

/*
 * given[i]: flag i is on the command line. The command line is parsed
 * again into a copy of the table whose destinations start unset, so
 * what counts as a flag is cli_parse's own reading.
 */
static void flags_given(struct cli_ctx *ctx, const struct cli_flag *flags,
			size_t n, int argc, char **argv, bool *given)
{
	struct cli_flag *shadow = kn_xcalloc(n + 1, sizeof(*shadow));
	struct cli_list *lists = kn_xcalloc(n, sizeof(*lists));
	const char **strings = kn_xcalloc(n, sizeof(*strings));
	int *counts = kn_xcalloc(n, sizeof(*counts));
	void *dest[] = {[CLI_FLAG_BOOL] = given, [CLI_FLAG_STRING] = strings,
			[CLI_FLAG_COUNT] = counts, [CLI_FLAG_LIST] = lists};
	size_t width[] = {[CLI_FLAG_BOOL] = sizeof(*given),
			  [CLI_FLAG_STRING] = sizeof(*strings),
			  [CLI_FLAG_COUNT] = sizeof(*counts),
			  [CLI_FLAG_LIST] = sizeof(*lists)};

	for (size_t i = 0; i < n; i++) {
		shadow[i] = flags[i];
		shadow[i].dest = (char *)dest[flags[i].type] +
				 i * width[flags[i].type];
		counts[i] = -1; /* a count flag takes 0..INT_MAX */
	}
	/* The real parse succeeded on the same argv: this one does too. */
	(void)cli_parse(ctx, argc, argv, shadow, NULL, NULL);
	for (size_t i = 0; i < n; i++)
		given[i] = given[i] || strings[i] || counts[i] != -1 ||
			   lists[i].n;
	for (size_t i = 0; i < n; i++)
		free(lists[i].v);
	KN_FREE_ALL(lists, strings, counts, shadow);
}

void cli_config_print(struct cli_ctx *ctx, const struct cli_flag *flags,
		      const struct cli_config *conf, int argc, char **argv)
{
	size_t n = 0;
	bool *given;

	for (const struct cli_flag *f = flags; f->name; f++)
		n++;
	given = kn_xcalloc(n, sizeof(*given));
	flags_given(ctx, flags, n, argc, argv, given);
	printf("# %s's effective configuration (%s)\n", ctx->prog,
	       conf->path ? conf->path : "no config file");
	for (size_t i = 0; i < n; i++) {
		const struct cli_flag *f = &flags[i];
		/* The value read back as a config file reads it. */
		struct kn_option o = {
			.name = f->name,
			.kind = f->type == CLI_FLAG_BOOL    ? KN_OPT_BOOL :
				f->type == CLI_FLAG_COUNT   ? KN_OPT_COUNT :
							      KN_OPT_STRING,
			/* A token is the one secret a flag table holds. */
			.flags = KN_OPT_INT |
				 (strcmp(f->name, "token") ? 0 : KN_OPT_SECRET),
		};

		if (!not_a_key(f))
			cli_config_print_line(&o, f->dest, given[i], conf->path,
					      conf->origins[i]);
	}
	free(given);
}

void cli_config_print_line(const struct kn_option *o, const void *target,
			   bool given, const char *path,
			   struct kn_option_origin origin)
{
	/* Only a string is a secret; one unset has nothing to hide. */
	bool hidden = (o->flags & KN_OPT_SECRET) &&
		      *(const char *const *)((const char *)target + o->offset);
	struct kn_buf value;

	kn_buf_init(&value, SIZE_MAX);
	kn_option_show(o, target, &value);
	if (hidden)
		printf("# %s: (a secret, not shown)  # ", o->name);
	else
		printf("%s: %s  # ", o->name, value.data ? value.data : "~");
	if (given)
		printf("--%s\n", o->name);
	else if (origin.line)
		printf("%s:%d:%d\n", path, origin.line, origin.column);
	else
		printf("default\n");
	kn_buf_release(&value);
}

int cli_parse_listen(struct cli_ctx *ctx, const char *listen,
		     const char *example, char *host, size_t cap, long *port)
{
	const char *colon = strrchr(listen, ':');

	*port = colon ? strtol(colon + 1, NULL, 10) : -1;
	if (!colon || colon == listen || (size_t)(colon - listen) >= cap ||
	    !colon[1] ||
	    strspn(colon + 1, "0123456789") != strlen(colon + 1) ||
	    *port < 0 || *port > 65535)
		return cli_usage_error(ctx, "--listen: \"%s\" is not HOST:PORT "
					    "(e.g. %s)", listen, example);
	memcpy(host, listen, (size_t)(colon - listen));
	host[colon - listen] = '\0';
	if (host[0] == '[' && host[strlen(host) - 1] == ']') {
		memmove(host, host + 1, strlen(host));
		host[strlen(host) - 1] = '\0';
	}
	return CLI_GO;
}
