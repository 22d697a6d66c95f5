/*
 * kiln blob | kiln ckpt: the blob stores and checkpoint sync by hand, for
 * operators checking a store's credentials and contents, and for the
 * end-to-end tests and benchmarks that drive the same code the server
 * runs. Credentials come from the environment (AZURE_STORAGE_*), never
 * from flags, so they stay out of shell history and process listings.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "ckpt/ckpt.h"
#include "cmd/cli.h"

static cli_runner cmd_blob;

const struct cli_command cmd_blob_entry = {
	.name = "blob",
	.run = cmd_blob,
	.summary = "list, put, get and delete blobs in a store",
	.help = "usage: kiln blob ls URL [PREFIX]\n"
		"       kiln blob put URL NAME FILE [--create-only] [--single-put S]\n"
		"                     [--parallel N] [--block-size S]\n"
		"       kiln blob get URL NAME FILE [--offset N] [--length N]\n"
		"       kiln blob rm URL NAME\n"
		"       kiln blob stat URL NAME\n"
		"\n"
		"URL is a store: file:///dir, https://ACCOUNT.blob.core.windows.net/\n"
		"CONTAINER[/PREFIX], http://HOST:PORT/ACCOUNT/CONTAINER[/PREFIX]\n"
		"(Azurite), or azure://CONTAINER[/PREFIX] with the endpoint from\n"
		"AZURE_STORAGE_CONNECTION_STRING. Credentials come from\n"
		"AZURE_STORAGE_CONNECTION_STRING, AZURE_STORAGE_KEY or\n"
		"AZURE_STORAGE_SAS_TOKEN. put and get print the sha256 of the bytes\n"
		"moved.\n"
		"\n"
		"  --create-only     fail if the blob exists (If-None-Match: *)\n"
		"  --single-put S    files up to S go in one Put Blob (default 64Mi,\n"
		"                    as Azure's SDKs); larger ones in blocks\n"
		"  --parallel N      blocks (uploads) or ranges (downloads) in flight\n"
		"                    for large files (default 6)\n"
		"  --block-size S    Put Block and download range size (default 8Mi)\n",
};

static cli_runner cmd_ckpt;

const struct cli_command cmd_ckpt_entry = {
	.name = "ckpt",
	.run = cmd_ckpt,
	.summary = "upload, list, restore and prune checkpoints",
	.help = "usage: kiln ckpt upload URL JOB DIR\n"
		"       kiln ckpt ls URL JOB\n"
		"       kiln ckpt restore URL JOB DEST\n"
		"       kiln ckpt prune URL JOB --keep K\n"
		"       kiln ckpt outputs URL JOB DIR\n"
		"\n"
		"What the server does for checkpoints, by hand. upload sends DIR as\n"
		"JOB/checkpoints/NAME/ (NAME is DIR's last part) with MANIFEST.json\n"
		"last; restore puts the newest checkpoint that verifies into\n"
		"DEST/NAME, prints NAME, and warns on stderr of each one skipped.\n"
		"URL and credentials as for `kiln blob`.\n"
		"\n"
		"  --files N         files copied at once (default: the store's, up to\n"
		"                    4 for file://; the server's sync uses 1)\n"
		"  --single-put S, --parallel N, --block-size S  as for kiln blob\n",
};

#define MAX_POS 4

struct args {
	const char *pos[MAX_POS];
	size_t n;
	const char *parallel, *block_size, *single_put, *offset, *length, *keep;
	const char *files;
	bool create_only;
};

/* Flags anywhere, and min..max positionals (named in usage). */
static int parse(struct cli_ctx *ctx, int argc, char **argv, struct args *a,
		 int min, int max, const char *usage)
{
	const struct cli_flag flags[] = {
		{"parallel", 0, CLI_FLAG_STRING, &a->parallel},
		{"block-size", 0, CLI_FLAG_STRING, &a->block_size},
		{"single-put", 0, CLI_FLAG_STRING, &a->single_put},
		{"offset", 0, CLI_FLAG_STRING, &a->offset},
		{"length", 0, CLI_FLAG_STRING, &a->length},
		{"keep", 0, CLI_FLAG_STRING, &a->keep},
		{"files", 0, CLI_FLAG_STRING, &a->files},
		{"create-only", 0, CLI_FLAG_BOOL, &a->create_only},
		{NULL, 0, CLI_FLAG_BOOL, NULL},
	};
	int rc;

	rc = cli_parse_positionals(ctx, argc, argv, flags, a->pos, MAX_POS,
				   &a->n);
	if (rc != CLI_GO)
		return rc;
	if (a->n < (size_t)min || a->n > (size_t)max)
		return cli_usage_error(ctx, "usage: %s %s", ctx->prog, usage);
	return CLI_GO;
}

static int open_store(struct cli_ctx *ctx, const struct args *a,
		      struct kn_blob_store **out)
{
	struct kn_blob_store_config cfg = {.url = a->pos[0], .use_env = true};
	struct kn_error err = {0};
	/* Each absent flag leaves its 0: the store's default. */
	int64_t parallel = 0, files = 0, block = 0, single_put = 0;
	const struct {
		const char *flag, *text, *want;
		int64_t max, *out;
	} sizes[] = {
		{"parallel", a->parallel, "1..16", 16, &parallel},
		{"files", a->files, "1..16", 16, &files},
		{"block-size", a->block_size, "a size such as 8Mi", INT64_MAX,
		 &block},
		{"single-put", a->single_put, "a size such as 64Mi", INT64_MAX,
		 &single_put},
	};

	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++)
		if (sizes[i].text &&
		    (kn_parse_size(sizes[i].text, sizes[i].out) < 0 ||
		     *sizes[i].out < 1 || *sizes[i].out > sizes[i].max))
			return cli_usage_error(ctx, "--%s: want %s",
					       sizes[i].flag, sizes[i].want);
	cfg.parallel = (int)parallel;
	cfg.files_in_flight = (int)files;
	cfg.block_size = (size_t)block;
	cfg.single_put_max = (size_t)single_put;
	if (kn_blob_store_open(&cfg, out, &err) < 0)
		return cli_fail(ctx, "%s", err.message);
	return CLI_GO;
}

static int fail(struct cli_ctx *ctx, const struct kn_error *err)
{
	return cli_fail(ctx, "%s", err->message);
}

static int run_blob(struct cli_ctx *ctx, const char *verb, struct args *a)
{
	struct kn_blob_store *s = NULL;
	struct kn_error err = {0};
	char sha[KN_SHA256_HEX_LEN + 1];
	int rc = open_store(ctx, a, &s);

	if (rc != CLI_GO)
		return rc;
	rc = CLI_EXIT_OK;
	if (!strcmp(verb, "ls")) {
		struct kn_blob_list list;
		if (kn_blob_list(s, a->n > 1 ? a->pos[1] : "", &list, &err) < 0) {
			rc = fail(ctx, &err);
		} else {
			for (size_t i = 0; i < list.n; i++)
				printf("%12lld  %s\n",
				       (long long)list.items[i].size,
				       list.items[i].name);
			kn_blob_list_release(&list);
		}
	} else if (!strcmp(verb, "put")) {
		int64_t size;
		if (kn_blob_put_file(s, a->pos[1], a->pos[2],
				     a->create_only ? KN_BLOB_CREATE_ONLY : 0,
				     sha, &size, &err) < 0)
			rc = fail(ctx, &err);
		else
			printf("%s  %lld\n", sha, (long long)size);
	} else if (!strcmp(verb, "get")) {
		int64_t off = 0, len = -1;
		if ((a->offset && kn_parse_size(a->offset, &off) < 0) ||
		    (a->length && (kn_parse_size(a->length, &len) < 0 || len <= 0)))
			rc = cli_usage_error(ctx, "--offset/--length: want sizes");
		else if (kn_blob_get_file(s, a->pos[1], a->pos[2], off, len, sha,
					  &err) < 0)
			rc = fail(ctx, &err);
		else
			printf("%s\n", sha);
	} else if (!strcmp(verb, "rm")) {
		if (kn_blob_delete(s, a->pos[1], &err) < 0)
			rc = fail(ctx, &err);
	} else {
		struct kn_blob_info info;
		if (kn_blob_stat(s, a->pos[1], &info, &err) < 0)
			rc = fail(ctx, &err);
		else
			printf("%lld\n", (long long)info.size);
	}
	kn_blob_store_free(s);
	return rc;
}

/* The verbs of `kiln blob` and `kiln ckpt`: min..max positionals after
   each. */
static const struct verb {
	const char *command, *name;
	int min, max;
	const char *usage;
} verbs[] = {
	{"blob", "ls", 1, 2, "URL [PREFIX]"},
	{"blob", "put", 3, 3, "URL NAME FILE [--create-only]"},
	{"blob", "get", 3, 3, "URL NAME FILE [--offset N] [--length N]"},
	{"blob", "rm", 2, 2, "URL NAME"},
	{"blob", "stat", 2, 2, "URL NAME"},
	{"ckpt", "upload", 3, 3, "URL JOB DIR"},
	{"ckpt", "ls", 2, 2, "URL JOB"},
	{"ckpt", "restore", 3, 3, "URL JOB DEST"},
	{"ckpt", "prune", 2, 2, "URL JOB --keep K"},
	{"ckpt", "outputs", 3, 3, "URL JOB DIR"},
};
#define N_VERBS (sizeof(verbs) / sizeof(verbs[0]))

/* The running command's verbs, as "ls, put, get, rm or stat". */
static void verb_choices(const struct cli_ctx *ctx, char *buf, size_t len)
{
	size_t n = 0, k = 0;

	for (size_t i = 0; i < N_VERBS; i++)
		n += !strcmp(verbs[i].command, ctx->cmd->name);
	buf[0] = '\0';
	for (size_t i = 0; i < N_VERBS; i++) {
		if (strcmp(verbs[i].command, ctx->cmd->name))
			continue;
		k++;
		snprintf(buf + strlen(buf), len - strlen(buf), "%s%s",
			 k == 1 ? "" : k == n ? " or " : ", ", verbs[i].name);
	}
}

/*
 * argv[1] found among the running command's verbs and the rest parsed
 * into a. CLI_GO with *verb set, CLI_EXIT_OK after printing the help, or
 * an exit status after saying why (with the choices).
 */
static int parse_verb(struct cli_ctx *ctx, int argc, char **argv,
		      struct args *a, const char **verb)
{
	char choices[128];

	if (argc >= 2 && (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help"))) {
		fputs(ctx->cmd->help, stdout);
		return CLI_EXIT_OK;
	}
	verb_choices(ctx, choices, sizeof(choices));
	if (argc < 2 || argv[1][0] == '-')
		return cli_usage_error(ctx, "missing what to do: %s", choices);
	for (size_t i = 0; i < N_VERBS; i++) {
		if (strcmp(verbs[i].command, ctx->cmd->name) ||
		    strcmp(argv[1], verbs[i].name))
			continue;
		snprintf(ctx->prog, sizeof(ctx->prog), "kiln %s %s",
			 ctx->cmd->name, verbs[i].name);
		*verb = verbs[i].name;
		return parse(ctx, argc - 1, argv + 1, a, verbs[i].min,
			     verbs[i].max, verbs[i].usage);
	}
	return cli_usage_error(ctx, "no '%s'; choose %s", argv[1], choices);
}

static int cmd_blob(struct cli_ctx *ctx, int argc, char **argv)
{
	struct args a = {0};
	const char *verb;
	int rc = parse_verb(ctx, argc, argv, &a, &verb);

	return rc == CLI_GO ? run_blob(ctx, verb, &a) : rc;
}

static void print_manifest(const struct kn_ckpt_manifest *m)
{
	for (size_t i = 0; i < m->n; i++)
		printf("%s  %12lld  %s\n", m->files[i].sha256,
		       (long long)m->files[i].size, m->files[i].path);
}

static int cmd_ckpt(struct cli_ctx *ctx, int argc, char **argv)
{
	struct kn_blob_store *s = NULL;
	struct kn_ckpt_manifest m = {0};
	struct kn_error err = {0};
	struct args a = {0};
	const char *verb;
	int rc = parse_verb(ctx, argc, argv, &a, &verb);

	if (rc != CLI_GO)
		return rc;
	rc = open_store(ctx, &a, &s);
	if (rc != CLI_GO)
		return rc;
	rc = CLI_EXIT_OK;
	if (!strcmp(verb, "upload") || !strcmp(verb, "outputs")) {
		int r = !strcmp(verb, "upload")
				? kn_ckpt_upload(s, a.pos[1], a.pos[2], NULL, &m, &err)
				: kn_ckpt_upload_outputs(s, a.pos[1], a.pos[2],
							 &m, &err);
		if (r < 0)
			rc = fail(ctx, &err);
		else
			print_manifest(&m);
	} else if (!strcmp(verb, "ls")) {
		struct kn_ckpt_list list;
		if (kn_ckpt_list(s, a.pos[1], &list, &err) < 0) {
			rc = fail(ctx, &err);
		} else {
			for (size_t i = 0; i < list.n; i++)
				printf("%s%s\n", list.items[i].name,
				       list.items[i].complete ? ""
							      : "  (incomplete)");
			kn_ckpt_list_release(&list);
		}
	} else if (!strcmp(verb, "restore")) {
		char *name = NULL, *warnings = NULL;
		int r = kn_ckpt_restore(s, a.pos[1], a.pos[2], &name, &warnings,
					&err);
		if (warnings)
			fputs(warnings, stderr);
		if (r < 0)
			rc = fail(ctx, &err);
		else
			printf("%s\n", name);
		KN_FREE_ALL(name, warnings);
	} else {
		int64_t keep;
		size_t deleted = 0;
		if (!a.keep || kn_parse_size(a.keep, &keep) < 0)
			rc = cli_usage_error(ctx, "needs --keep K");
		else if (kn_ckpt_prune(s, a.pos[1], (size_t)keep, &deleted,
				       &err) < 0)
			rc = fail(ctx, &err);
		else
			printf("%zu deleted\n", deleted);
	}
	kn_ckpt_manifest_release(&m);
	kn_blob_store_free(s);
	return rc;
}
