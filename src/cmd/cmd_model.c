/*
 * kiln model push | ls | show | pull | diff | promote | rollback | aliases
 *            | keygen | sign | verify | lineage: the model registry
 *            (docs/registry.md).
 *
 * push hashes the directory's files here (one thread per CPU), asks the
 * server which blobs it lacks and uploads only those, in parts, through
 * the API; the server checks each blob's sha256 before storing it.
 * pull and verify read the blobs straight from the server's blob store
 * (its URL is in the version's answer; Azure credentials come from
 * AZURE_STORAGE_*), check the signatures themselves against the canonical
 * manifest, and refuse a version that is unsigned, signed by no key the
 * server trusts, or has a file whose bytes do not match its digest.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/base.h"
#include "ckpt/ckpt.h"
#include "cmd/cli.h"
#include "cmd/cli_client.h"
#include "cmd/digest_cache.h"
#include "cmd/model_cli.h"
#include "cmd/model_upload.h"
#include "loop/loop.h"
#include "registry/registry.h"

static cli_runner cmd_model;

const struct cli_command cmd_model_entry = {
	.name = "model",
	.run = cmd_model,
	.summary = "push, sign, verify, pull and promote model versions",
	.help = "usage: kiln model push DIR --name NAME [--alias ALIAS] [--http]\n"
		"       kiln model push --from-job JOB --name NAME [--alias ALIAS]\n"
		"       kiln model ls\n"
		"       kiln model show NAME[@VERSION|@ALIAS]\n"
		"       kiln model pull NAME@VERSION|NAME@ALIAS DIR\n"
		"       kiln model diff NAME@V1 NAME@V2\n"
		"       kiln model promote NAME@VERSION ALIAS\n"
		"       kiln model rollback NAME ALIAS\n"
		"       kiln model aliases NAME\n"
		"       kiln model keygen --out FILE\n"
		"       kiln model sign NAME@VERSION --key FILE\n"
		"       kiln model verify NAME@VERSION|NAME@ALIAS\n"
		"       kiln model revalidate NAME --alias ALIAS --job FILE --every DUR\n"
		"                 --max METRIC=N [--min METRIC=N] ... [--rollback]\n"
		"       kiln model revalidate NAME --alias ALIAS --now\n"
		"       kiln model revalidate NAME\n"
		"       kiln model lineage NAME@VERSION|NAME@ALIAS\n"
		"\n"
		"The model registry (docs/registry.md): versions NAME@1, NAME@2, ...\n"
		"are immutable; files are stored once by sha256 in the server's blob\n"
		"store. Wherever a version is wanted, an alias (NAME@prod) does too.\n"
		"\n"
		"  push      upload DIR's files, each read once and hashed as it is\n"
		"            sent; a file pushed before unchanged (its digest kept in\n"
		"            $XDG_CACHE_HOME/kiln/digests) is sent only if the server\n"
		"            lacks its blob; create the next version; prints\n"
		"            NAME@VERSION. --alias points ALIAS at it. On the\n"
		"            server's machine files go by open descriptor (no copy\n"
		"            here); --http sends them over HTTP anyway. With\n"
		"            --from-job, the version is the succeeded job's outputs\n"
		"            (already in the store; nothing is uploaded), with its\n"
		"            lineage and the metrics of its metrics.json\n"
		"  ls        models: NAME VERSIONS LATEST ALIASES UPDATED\n"
		"  show      a model's versions and aliases, or one version's files,\n"
		"            digests, signatures and aliases\n"
		"  pull      download a version into the new directory DIR, checking\n"
		"            every digest as it is written; refuses (and leaves no\n"
		"            DIR) what verify refuses\n"
		"  diff      files added, removed and changed from V1 to V2\n"
		"  promote   point ALIAS at a version (operators)\n"
		"  rollback  move ALIAS back to the version it pointed at before\n"
		"  aliases   every move of every alias: who, when, from -> to\n"
		"  keygen    a new Ed25519 key pair: FILE (private, 0600) and\n"
		"            FILE.pub; prints the key id (sha256 of the public key)\n"
		"  sign      sign a version's canonical manifest with the private key\n"
		"            FILE; the server keeps the signature only if it verifies\n"
		"  verify    check a version: signed by a key in the server's\n"
		"            --trusted-keys, and every blob in the store hashes to its\n"
		"            digest (hashed here, in parallel; a file:// store is read\n"
		"            in place). A failure names the file\n"
		"  lineage   the chain back to the data: the job that made the\n"
		"            version, its spec digest, checkpoint and inputs with\n"
		"            their digests, and the jobs that produced those inputs\n"
		"  revalidate  run the evaluation job FILE every DUR against the\n"
		"            version ALIAS names (KILN_MODEL_DIR: its verified copy,\n"
		"            KILN_MODEL: NAME@VERSION); a metric in its metrics.json\n"
		"            above a --max or below a --min (or missing) fires\n"
		"            model_revalidation_failed until a run passes, and with\n"
		"            --rollback rolls ALIAS back. --now runs it at once and\n"
		"            prints the job id (operators). show NAME@V lists runs.\n"
		"            NAME alone lists its re-validations: ALIAS EVERY\n"
		"            THRESHOLDS ROLLBACK SOURCE (deployment D when a\n"
		"            deployment's revalidate: set it, else by hand (USER))\n"
		"\n"
		"pull and verify read the server's blob store directly: file:// on\n"
		"this machine, or Azure with credentials from AZURE_STORAGE_*.\n"
		"Exit status: 0 ok, 1 refused or failed, 2 usage.\n",
};

#define MAX_POS 3
/* Progress bars only for work this large, and only on a terminal. */
#define PROGRESS_MIN_BYTES ((int64_t)256 << 20)

struct args {
	const char *pos[MAX_POS];
	size_t n;
	const char *name, *alias, *out, *key, *from_job;
	bool http; /* push: over HTTP even on the server's machine */
};

static int parse(struct cli_ctx *ctx, int argc, char **argv, struct args *a,
		 int want, const char *usage)
{
	const struct cli_flag flags[] = {
		{"name", 0, CLI_FLAG_STRING, &a->name},
		{"alias", 0, CLI_FLAG_STRING, &a->alias},
		{"out", 0, CLI_FLAG_STRING, &a->out},
		{"key", 0, CLI_FLAG_STRING, &a->key},
		{"from-job", 0, CLI_FLAG_STRING, &a->from_job},
		{"http", 0, CLI_FLAG_BOOL, &a->http},
		{NULL, 0, CLI_FLAG_BOOL, NULL},
	};
	int rc;

	memset(a, 0, sizeof(*a));
	rc = cli_parse_positionals(ctx, argc, argv, flags, a->pos, MAX_POS,
				   &a->n);
	if (rc != CLI_GO)
		return rc;
	/* want < 0: the caller checks the count. */
	if (want >= 0 && a->n != (size_t)want)
		return cli_usage_error(ctx, "usage: %s %s", ctx->prog, usage);
	return CLI_GO;
}

/* A reference argument, checked here so a typo costs no request. */
static int ref_arg(struct cli_ctx *ctx, const char *text, bool need_at,
		   struct kn_model_ref *ref)
{
	struct kn_error err;

	if (kn_model_ref_parse(text, need_at, "model", ref, &err) < 0)
		return cli_usage_error(ctx, "%s", err.message);
	return CLI_GO;
}

/* parse, then the first argument as a model reference (ref_arg). */
static int parse_ref(struct cli_ctx *ctx, int argc, char **argv,
		     struct args *a, int want, const char *usage, bool need_at,
		     struct kn_model_ref *ref)
{
	int rc = parse(ctx, argc, argv, a, want, usage);

	return rc == CLI_GO ? ref_arg(ctx, a->pos[0], need_at, ref) : rc;
}

/* "/v1/models/REF" plus suffix. */
char *model_path(const char *ref, const char *suffix)
{
	struct kn_buf b;

	kn_buf_init(&b, SIZE_MAX);
	cli_path_object(&b, "/v1/models", ref, suffix);
	return b.data;
}

/* ---- progress ---- */

struct progress {
	const char *what;
	bool on;
	int64_t total;
	int64_t started_ms;
};

/* "what done / total (P%) RATE/s, ETA Ns" on one line, redrawn. */
static void progress_print(int64_t done, int64_t total, void *arg)
{
	struct progress *p = arg;
	char d[32], t[32], r[32] = "-";
	int64_t ms = kn_mono_ms() - p->started_ms, rate = 0;

	if (!p->on)
		return;
	if (ms > 0)
		rate = (int64_t)((double)done * 1000 / (double)ms);
	if (rate > 0)
		kn_format_bytes(rate, r, sizeof(r));
	kn_format_bytes(done, d, sizeof(d));
	kn_format_bytes(total, t, sizeof(t));
	if (done >= total)
		fprintf(stderr, "\r%s %s / %s (100%%) %s/s in %llds   \n",
			p->what, d, t, r, (long long)(ms / 1000));
	else if (rate > 0)
		fprintf(stderr, "\r%s %s / %s (%d%%) %s/s, ETA %llds   ",
			p->what, d, t, (int)(100 * done / total), r,
			(long long)((total - done) / rate));
	else
		fprintf(stderr, "\r%s %s / %s (%d%%)   ", p->what, d, t,
			(int)(100 * done / total));
}

static void progress_init(struct progress *p, const char *what, int64_t total)
{
	p->what = what;
	p->total = total;
	p->started_ms = kn_mono_ms();
	p->on = total >= PROGRESS_MIN_BYTES && isatty(STDERR_FILENO);
}

/* ---- push ---- */

/* Every regular file under root/rel, by relative path. */
static int walk(struct cli_ctx *ctx, const char *root, const char *rel,
		struct kn_model_files *out)
{
	char *dir = rel[0] ? kn_asprintf("%s/%s", root, rel) : kn_xstrdup(root);
	DIR *d = opendir(dir);
	struct dirent *e;
	int rc = CLI_GO;

	if (!d) {
		rc = cli_fail(ctx, "%s: %s", dir, strerror(errno));
		free(dir);
		return rc;
	}
	while (rc == CLI_GO && (e = readdir(d))) {
		char *path, *sub;
		struct stat st;

		if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
			continue;
		sub = rel[0] ? kn_asprintf("%s/%s", rel, e->d_name)
			     : kn_xstrdup(e->d_name);
		path = kn_asprintf("%s/%s", root, sub);
		if (lstat(path, &st) < 0) {
			rc = cli_fail(ctx, "%s: %s", path, strerror(errno));
		} else if (S_ISDIR(st.st_mode)) {
			rc = walk(ctx, root, sub, out);
		} else if (S_ISLNK(st.st_mode) &&
			   (stat(path, &st) < 0 || !S_ISREG(st.st_mode))) {
			rc = cli_fail(ctx, "%s: a link to something other than "
				      "a file; models hold regular files only",
				      path);
		} else if (S_ISREG(st.st_mode)) {
			kn_model_files_add(out, sub, st.st_size, NULL);
		} else {
			rc = cli_fail(ctx, "%s: not a regular file", path);
		}
		KN_FREE_ALL(path, sub);
	}
	closedir(d);
	free(dir);
	return rc;
}

static void upload_progress(int64_t done, void *arg)
{
	struct progress *p = arg;

	progress_print(done, p->total, p);
}

/* push --from-job: the server makes the version from the job's outputs. */
static int push_from_job(struct cli_ctx *ctx, const struct args *a)
{
	struct cli_client *c = NULL;
	json_t *req = NULL, *answer = NULL;
	char *end = NULL, *path = NULL, size_text[32];
	long long job = strtoll(a->from_job, &end, 10);
	int rc;

	if (!*a->from_job || *end || job <= 0)
		return cli_usage_error(ctx, "--from-job: \"%s\" is not a job id",
				       a->from_job);
	rc = cli_client_open(ctx, &c);
	if (rc)
		return rc;
	req = json_pack("{s:I}", "job", (json_int_t)job);
	if (a->alias)
		json_object_set_new(req, "alias", json_string(a->alias));
	path = model_path(a->name, "/from-job");
	rc = cli_post_json(c, path, req, &answer);
	if (rc)
		goto out;
	if (cli_want_json(ctx)) {
		cli_print_data(ctx, answer);
	} else {
		kn_format_bytes(cli_json_int(answer, "bytes"), size_text,
				 sizeof(size_text));
		printf("%s@%lld\n", a->name,
		       (long long)cli_json_int(answer, "version"));
		fprintf(stderr,
			"pushed %s@%lld from job %lld: %lld files (%s), "
			"nothing uploaded%s%s\n",
			a->name, (long long)cli_json_int(answer, "version"), job,
			(long long)cli_json_int(answer, "files"), size_text,
			a->alias ? "; alias " : "", a->alias ? a->alias : "");
	}
out:
	free(path);
	json_decref(answer);
	json_decref(req);
	cli_client_free(c);
	return rc;
}

/*
 * The files whose digests the cache knows (f's sha256 filled, known[i])
 * and, of those, the blobs the server lacks; part_max from its answer.
 */
static int ask_missing(struct cli_client *c, struct kn_model_files *f,
		       const bool *known, json_t **missing, int64_t *part_max,
		       json_t **local)
{
	json_t *digests = json_array(), *req, *answer = NULL;
	int rc;

	for (size_t i = 0; i < f->n; i++)
		if (known[i])
			json_array_append_new(digests,
					      json_string(f->items[i].sha256));
	req = json_pack("{s:o}", "digests", digests);
	rc = cli_post_json(c, "/v1/model-blobs/missing", req, &answer);
	if (!rc) {
		*missing = json_incref(json_object_get(answer, "missing"));
		*part_max = cli_json_int(answer, "part_max");
		*local = json_incref(json_object_get(answer, "local"));
	}
	json_decref(answer);
	json_decref(req);
	return rc;
}

static bool listed(json_t *digests, const char *digest)
{
	size_t k;
	json_t *d;

	json_array_foreach(digests, k, d)
		if (!strcmp(json_string_value(d), digest))
			return true;
	return false;
}

/* What push uploads: files the cache does not know, and of those it
   knows, the first file of each blob the server lacks. */
static bool *files_to_send(const struct kn_model_files *f, const bool *known,
			   json_t *missing, int64_t *bytes)
{
	bool *send = kn_xcalloc(f->n + 1, sizeof(*send));
	json_t *sent = json_array();

	*bytes = 0;
	for (size_t i = 0; i < f->n; i++) {
		const char *d = f->items[i].sha256;
		send[i] = !known[i] || (listed(missing, d) && !listed(sent, d));
		if (known[i] && send[i])
			json_array_append_new(sent, json_string(d));
		if (send[i])
			*bytes += f->items[i].size;
	}
	json_decref(sent);
	return send;
}

/* Where files go and what they share. */
struct sending {
	int64_t part_max;
	struct model_push_totals *totals;
	struct digest_cache *cache;
	const char *socket; /* the server's push.sock, or NULL: HTTP */
	char *token;
};

/* One file: by descriptor to a server on this machine, else over HTTP
   (read once, hashed as it is sent). */
static int send_file(struct cli_ctx *ctx, struct sending *how,
		     struct model_upload *u)
{
	struct model_push_totals *t = how->totals;
	int rc = MODEL_UPLOAD_OVER_HTTP;

	if (how->socket)
		rc = model_upload_local(ctx, how->socket, how->token, u);
	if (rc == 0) {
		pthread_mutex_lock(&t->lock);
		t->sent += u->st.st_size;
		if (t->progress)
			t->progress(t->sent + t->resumed, t->progress_arg);
		pthread_mutex_unlock(&t->lock);
	} else if (rc == MODEL_UPLOAD_OVER_HTTP) {
		how->socket = NULL; /* not for this push's other files either */
		rc = model_upload_file(ctx, u);
	}
	return rc;
}

/* Send the files marked, each once, and remember their digests. */
static int send_files(struct cli_ctx *ctx, const char *root,
		      struct kn_model_files *f, const bool *send,
		      struct sending *how, size_t *n_up)
{
	int rc = 0;

	for (size_t i = 0; i < f->n && !rc; i++) {
		char *path;
		struct model_upload u = {.part_max = how->part_max,
					 .totals = how->totals};

		if (!send[i])
			continue;
		path = kn_asprintf("%s/%s", root, f->items[i].path);
		u.path = path;
		rc = send_file(ctx, how, &u);
		if (!rc) {
			memcpy(f->items[i].sha256, u.digest, sizeof(u.digest));
			f->items[i].size = u.st.st_size;
			digest_cache_put(how->cache, &u.st, u.digest,
					 time(NULL));
			(*n_up)++;
		}
		free(path);
	}
	return rc;
}

/* A server on this machine takes files by descriptor, unless --http. */
static void choose_path(struct cli_ctx *ctx, const struct args *a,
			json_t *local, struct sending *how)
{
	char *server = NULL, *home = cli_kiln_home();

	if (!a->http && local && model_local_same_machine(local) &&
	    cli_find_credentials(ctx, home, &server, &how->token) == 0)
		how->socket = json_string_value(json_object_get(local,
								"socket"));
	KN_FREE_ALL(server, home);
}

/* Hash the files marked (a second read of each, if it is sent too), in
   parallel, and remember their digests. */
static int hash_files(struct cli_ctx *ctx, const char *root,
		      struct kn_model_files *f, const bool *marked,
		      struct digest_cache *cache)
{
	struct kn_hash_item *items = kn_xcalloc(f->n + 1, sizeof(*items));
	size_t *which = kn_xcalloc(f->n + 1, sizeof(*which)), n = 0;
	int rc = 0;

	for (size_t i = 0; i < f->n; i++) {
		if (!marked[i])
			continue;
		items[n].path = kn_asprintf("%s/%s", root, f->items[i].path);
		which[n++] = i;
	}
	kn_hash_files(items, n, kn_hash_threads_default(), 0, NULL, NULL);
	for (size_t k = 0; k < n && !rc; k++) {
		struct kn_model_file *file = &f->items[which[k]];
		struct stat st;

		if (items[k].error)
			rc = cli_fail(ctx, "%s: %s", items[k].path,
				      strerror(-items[k].error));
		else if (stat(items[k].path, &st) < 0 ||
			 st.st_size != items[k].size || items[k].size != file->size)
			rc = cli_fail(ctx, "%s changed while it was hashed",
				      items[k].path);
		else
			digest_cache_put(cache, &st, items[k].sha256, time(NULL));
		memcpy(file->sha256, items[k].sha256, sizeof(file->sha256));
	}
	for (size_t k = 0; k < n; k++)
		free((char *)items[k].path);
	KN_FREE_ALL(items, which);
	return rc;
}

/* Fill f's digests from the cache, by each file's state now; files it
   holds too near a change are hashed here. known[i] on return: f's
   digest is filled. */
static int known_digests(struct cli_ctx *ctx, const char *root,
			 struct kn_model_files *f, struct digest_cache *cache,
			 bool **known)
{
	bool *check = kn_xcalloc(f->n + 1, sizeof(*check));
	int rc;

	*known = kn_xcalloc(f->n + 1, sizeof(**known));
	for (size_t i = 0; i < f->n; i++) {
		char *path = kn_asprintf("%s/%s", root, f->items[i].path);
		struct stat st;
		enum digest_known k = DIGEST_UNKNOWN;

		if (stat(path, &st) == 0 && st.st_size == f->items[i].size)
			k = digest_cache_find(cache, &st, f->items[i].sha256);
		(*known)[i] = k != DIGEST_UNKNOWN;
		check[i] = k == DIGEST_CHECK;
		free(path);
	}
	rc = hash_files(ctx, root, f, check, cache);
	free(check);
	return rc;
}

static void print_pushed(struct cli_ctx *ctx, const struct args *a,
			 const struct kn_model_files *f, json_t *answer,
			 size_t n_up, const struct model_push_totals *t)
{
	char size_text[32], up_text[32];

	kn_format_bytes(kn_model_files_bytes(f), size_text, sizeof(size_text));
	kn_format_bytes(t->sent, up_text, sizeof(up_text));
	if (cli_want_json(ctx)) {
		json_t *o = json_pack("{s:s, s:O, s:I, s:I, s:I, s:I, s:I}",
				      "name", a->name, "version",
				      json_object_get(answer, "version"), "files",
				      (json_int_t)f->n, "bytes",
				      (json_int_t)kn_model_files_bytes(f),
				      "uploaded", (json_int_t)n_up,
				      "uploaded_bytes", (json_int_t)t->sent,
				      "resumed_bytes", (json_int_t)t->resumed);
		cli_print_data(ctx, o);
		json_decref(o);
		return;
	}
	printf("%s@%lld\n", a->name, (long long)cli_json_int(answer, "version"));
	fprintf(stderr,
		"pushed %s@%lld: %zu files (%s); uploaded %zu file%s (%s), the "
		"rest were in the store%s%s\n",
		a->name, (long long)cli_json_int(answer, "version"), f->n,
		size_text, n_up, n_up == 1 ? "" : "s", up_text,
		a->alias ? "; alias " : "", a->alias ? a->alias : "");
}

static int model_push(struct cli_ctx *ctx, int argc, char **argv)
{
	struct args a;
	struct kn_model_files f = {0};
	struct cli_client *c = NULL;
	struct kn_error err;
	struct progress p;
	struct model_push_totals totals = {.lock = PTHREAD_MUTEX_INITIALIZER,
					   .progress = upload_progress,
					   .progress_arg = &p};
	json_t *answer = NULL, *missing = NULL, *req = NULL, *local = NULL;
	bool *known = NULL, *send = NULL;
	struct sending how = {.totals = &totals};
	char *cache_path = digest_cache_default_path();
	struct digest_cache *cache = digest_cache_load(cache_path);
	int64_t upload_bytes = 0, part_max = 0;
	size_t n_up = 0;
	int rc = parse(ctx, argc, argv, &a, -1, "");

	if (rc != CLI_GO)
		goto out;
	if (a.n != (a.from_job ? 0 : 1)) {
		rc = cli_usage_error(ctx, "usage: %s DIR --name NAME [--alias "
				     "A] or --from-job JOB --name NAME "
				     "[--alias A]", ctx->prog);
		goto out;
	}
	if (!a.name || !kn_model_name_ok(a.name)) {
		rc = cli_usage_error(ctx, "--name NAME is required: 1-64 of "
				     "letters, digits, '.', '_', '-'");
		goto out;
	}
	if (a.alias && !kn_model_alias_ok(a.alias)) {
		rc = cli_usage_error(ctx, "--alias: \"%s\" is not an alias (a "
				     "name that is not all digits)", a.alias);
		goto out;
	}
	if (a.from_job) {
		rc = push_from_job(ctx, &a);
		goto out;
	}
	rc = walk(ctx, a.pos[0], "", &f);
	if (rc == CLI_GO && f.n == 0)
		rc = cli_fail(ctx, "%s has no files", a.pos[0]);
	if (rc == CLI_GO && kn_model_files_sort(&f, &err) < 0)
		rc = cli_fail(ctx, "%s", err.message);
	if (rc != CLI_GO)
		goto out;
	rc = cli_client_open(ctx, &c);
	if (rc)
		goto out;
	rc = known_digests(ctx, a.pos[0], &f, cache, &known);
	if (!rc)
		rc = ask_missing(c, &f, known, &missing, &part_max, &local);
	if (rc)
		goto out;
	send = files_to_send(&f, known, missing, &upload_bytes);
	if (part_max <= 0 && upload_bytes) {
		rc = cli_fail(ctx, "the server does not say how large a part it "
			      "takes: it is older than this kiln; push with "
			      "a kiln of its version");
		goto out;
	}
	progress_init(&p, "uploading", upload_bytes);
	how.part_max = part_max;
	how.cache = cache;
	choose_path(ctx, &a, local, &how);
	rc = send_files(ctx, a.pos[0], &f, send, &how, &n_up);
	/* What was read is remembered even when a later file failed. */
	digest_cache_save(cache);
	if (rc)
		goto out;
	req = json_pack("{s:o}", "files", kn_model_files_to_json(&f));
	if (a.alias)
		json_object_set_new(req, "alias", json_string(a.alias));
	{
		char *path = model_path(a.name, "/versions");
		char *body = json_dumps(req, JSON_COMPACT);
		rc = cli_create(c, path, "application/json", body,
				strlen(body), &answer);
		KN_FREE_ALL(body, path);
	}
	if (!rc)
		print_pushed(ctx, &a, &f, answer, n_up, &totals);
out:
	json_decref(req);
	json_decref(missing);
	json_decref(local);
	json_decref(answer);
	KN_FREE_ALL(how.token, known, send);
	cli_client_free(c);
	kn_model_files_release(&f);
	digest_cache_free(cache);
	free(cache_path);
	return rc;
}

/* ---- reads ---- */

static int model_get(struct cli_ctx *ctx, const char *ref,
		     const char *purpose, json_t **answer)
{
	struct cli_client *c = NULL;
	char *path = model_path(ref, "");
	struct kn_buf b;
	int rc = cli_client_open(ctx, &c);

	kn_buf_init(&b, SIZE_MAX);
	kn_buf_printf(&b, "%s", path);
	cli_query_add(&b, "purpose", purpose);
	if (!rc)
		rc = cli_get(c, b.data, answer);
	kn_buf_release(&b);
	free(path);
	cli_client_free(c);
	return rc;
}

static int model_ls(struct cli_ctx *ctx, int argc, char **argv)
{
	static const char *const headers[] = {"NAME", "VERSIONS", "LATEST",
					      "ALIASES", "UPDATED", NULL};
	struct args a;
	struct cli_client *c = NULL;
	json_t *answer = NULL, *m;
	size_t i;
	int rc = parse(ctx, argc, argv, &a, 0, "[-o json|table]");

	if (rc != CLI_GO)
		return rc;
	rc = cli_client_open(ctx, &c);
	if (!rc)
		rc = cli_get(c, "/v1/models", &answer);
	if (!rc && cli_want_json(ctx)) {
		cli_print_data(ctx, answer);
	} else if (!rc) {
		struct cli_table *t = cli_table_new(headers);
		int64_t now = kn_now_ms();
		json_array_foreach(json_object_get(answer, "models"), i, m) {
			struct kn_buf al;
			const char *k;
			json_t *v;

			kn_buf_init(&al, 4096);
			json_object_foreach(json_object_get(m, "aliases"), k, v)
				kn_buf_printf(&al, "%s%s=%lld",
					      al.len ? "," : "", k,
					      (long long)json_integer_value(v));
			cli_table_cell(t, cli_json_str(m, "name"));
			cli_table_int(t, m, "versions");
			cli_table_int(t, m, "latest");
			cli_table_cell(t, al.len ? al.data : "-");
			cli_table_ago(t, m, "updated_at_ms", now);
			kn_buf_release(&al);
		}
		cli_table_show(ctx, t, stdout, 0);
		cli_table_free(t);
	}
	json_decref(answer);
	cli_client_free(c);
	return rc;
}

/*
 * GET the model or version ref and print it as -o asks: the answer's
 * data (its member key when key is set), else print's text.
 */
static int model_show_answer(struct cli_ctx *ctx, const char *ref,
			     const char *key, void (*print)(json_t *answer))
{
	json_t *answer = NULL;
	int rc = model_get(ctx, ref, NULL, &answer);

	if (!rc && cli_want_json(ctx))
		cli_print_data(ctx,
			       key ? json_object_get(answer, key) : answer);
	else if (!rc)
		print(answer);
	json_decref(answer);
	return rc;
}

static int model_show(struct cli_ctx *ctx, int argc, char **argv)
{
	struct args a;
	struct kn_model_ref ref;
	int rc = parse_ref(ctx, argc, argv, &a, 1, "NAME[@VERSION|@ALIAS]",
			   false, &ref);

	if (rc != CLI_GO)
		return rc;
	return model_show_answer(ctx, a.pos[0], NULL,
				 kn_model_ref_has_at(&ref) ?
					 model_print_version : model_print);
}

static int model_aliases(struct cli_ctx *ctx, int argc, char **argv)
{
	struct args a;
	struct kn_model_ref ref;
	int rc = parse_ref(ctx, argc, argv, &a, 1, "NAME", false, &ref);

	if (rc == CLI_GO && kn_model_ref_has_at(&ref))
		rc = cli_usage_error(ctx, "give the model's NAME alone");
	if (rc != CLI_GO)
		return rc;
	return model_show_answer(ctx, a.pos[0], "alias_history",
				 model_print_history);
}

/* Index the files of a version's answer by path. */
static json_t *files_by_path(json_t *version)
{
	json_t *by = json_object(), *f;
	size_t i;

	json_array_foreach(json_object_get(json_object_get(version, "manifest"),
					   "files"), i, f)
		json_object_set(by, cli_json_str(f, "path"), f);
	return by;
}

static int model_diff(struct cli_ctx *ctx, int argc, char **argv)
{
	struct args a;
	struct kn_model_ref r1, r2;
	json_t *v1 = NULL, *v2 = NULL, *f1 = NULL, *f2 = NULL, *out = NULL;
	json_t *added, *removed, *changed, *f;
	const char *path;
	int rc = parse_ref(ctx, argc, argv, &a, 2, "NAME@V1 NAME@V2",
			   true, &r1);

	if (rc == CLI_GO)
		rc = ref_arg(ctx, a.pos[1], true, &r2);
	if (rc != CLI_GO)
		return rc;
	rc = model_get(ctx, a.pos[0], NULL, &v1);
	if (!rc)
		rc = model_get(ctx, a.pos[1], NULL, &v2);
	if (rc)
		goto out;
	f1 = files_by_path(v1);
	f2 = files_by_path(v2);
	added = json_array();
	removed = json_array();
	changed = json_array();
	out = json_pack("{s:o, s:o, s:o}", "added", added, "removed", removed,
			"changed", changed);
	/* Objects iterate in insertion order: the manifests' path order. */
	json_object_foreach(f1, path, f) {
		json_t *other = json_object_get(f2, path);
		if (!other)
			json_array_append_new(removed, json_string(path));
		else if (strcmp(cli_json_str(f, "sha256"),
				cli_json_str(other, "sha256")))
			json_array_append_new(changed, json_string(path));
	}
	json_object_foreach(f2, path, f)
		if (!json_object_get(f1, path))
			json_array_append_new(added, json_string(path));
	if (cli_want_json(ctx)) {
		cli_print_data(ctx, out);
	} else {
		size_t i;
		json_t *p;
		json_array_foreach(added, i, p)
			printf("added    %s\n", json_string_value(p));
		json_array_foreach(removed, i, p)
			printf("removed  %s\n", json_string_value(p));
		json_array_foreach(changed, i, p) {
			char s1[32], s2[32];
			kn_format_bytes(cli_json_int(json_object_get(
					     f1, json_string_value(p)), "size"),
					 s1, sizeof(s1));
			kn_format_bytes(cli_json_int(json_object_get(
					     f2, json_string_value(p)), "size"),
					 s2, sizeof(s2));
			printf("changed  %s (%s -> %s)\n", json_string_value(p),
			       s1, s2);
		}
		fprintf(stderr, "%zu added, %zu removed, %zu changed\n",
			json_array_size(added), json_array_size(removed),
			json_array_size(changed));
	}
out:
	json_decref(out);
	json_decref(f1);
	json_decref(f2);
	json_decref(v1);
	json_decref(v2);
	return rc;
}

/* ---- aliases ---- */

/* An answer's "from" version, or "(new)" for an alias just made. */
static const char *from_text(json_t *answer, char *buf, size_t len)
{
	if (!json_is_integer(json_object_get(answer, "from")))
		return "(new)";
	snprintf(buf, len, "%lld", (long long)cli_json_int(answer, "from"));
	return buf;
}

/*
 * POST {"alias": alias} to the model path what (model_path(ref, what)):
 * CLI_GO with *answer for the caller to describe, else an exit status
 * (CLI_EXIT_OK once the answer is printed as -o json asks).
 */
static int alias_post(struct cli_ctx *ctx, const char *ref, const char *what,
		      const char *alias, json_t **answer)
{
	struct cli_client *c = NULL;
	char *path = model_path(ref, what);
	json_t *req = json_pack("{s:s}", "alias", alias);
	int rc = cli_client_open(ctx, &c);

	*answer = NULL;
	if (!rc)
		rc = cli_post_json(c, path, req, answer);
	free(path);
	json_decref(req);
	cli_client_free(c);
	return rc ? rc : cli_answer_json(ctx, answer);
}

static int model_promote(struct cli_ctx *ctx, int argc, char **argv)
{
	struct args a;
	struct kn_model_ref ref;
	json_t *answer;
	char from[32];
	int rc = parse_ref(ctx, argc, argv, &a, 2, "NAME@VERSION ALIAS",
			   true, &ref);

	if (rc == CLI_GO && !kn_model_alias_ok(a.pos[1]))
		rc = cli_usage_error(ctx, "\"%s\" is not an alias (a name that "
				     "is not all digits)", a.pos[1]);
	if (rc == CLI_GO)
		rc = alias_post(ctx, a.pos[0], "/promote", a.pos[1], &answer);
	if (rc != CLI_GO)
		return rc;
	fprintf(stderr, "%s@%s: %s -> %lld\n", ref.name, a.pos[1],
		from_text(answer, from, sizeof(from)),
		(long long)cli_json_int(answer, "version"));
	json_decref(answer);
	return CLI_EXIT_OK;
}

static int model_rollback(struct cli_ctx *ctx, int argc, char **argv)
{
	struct args a;
	json_t *answer;
	int rc = parse(ctx, argc, argv, &a, 2, "NAME ALIAS");

	if (rc == CLI_GO && !kn_model_name_ok(a.pos[0]))
		rc = cli_usage_error(ctx, "\"%s\" is not a model name", a.pos[0]);
	if (rc == CLI_GO)
		rc = alias_post(ctx, a.pos[0], "/rollback", a.pos[1], &answer);
	if (rc != CLI_GO)
		return rc;
	fprintf(stderr, "%s@%s rolled back: %lld -> %lld\n", a.pos[0],
		a.pos[1], (long long)cli_json_int(answer, "from"),
		(long long)cli_json_int(answer, "version"));
	json_decref(answer);
	return CLI_EXIT_OK;
}

/* ---- keys and signatures ---- */

static int model_keygen(struct cli_ctx *ctx, int argc, char **argv)
{
	struct args a;
	struct kn_error err;
	char id[KN_SHA256_HEX + 1];
	int rc = parse(ctx, argc, argv, &a, 0, "--out FILE");

	if (rc != CLI_GO)
		return rc;
	if (!a.out)
		return cli_usage_error(ctx, "--out FILE is required");
	if (kn_model_keygen(a.out, id, &err) < 0)
		return cli_fail(ctx, "%s", err.message);
	printf("%s\n", id);
	fprintf(stderr,
		"private key in %s (0600), public key in %s.pub; to trust it, "
		"copy %s.pub into the server's --trusted-keys directory\n",
		a.out, a.out, a.out);
	return CLI_EXIT_OK;
}

static int model_sign(struct cli_ctx *ctx, int argc, char **argv)
{
	struct args a;
	struct kn_model_ref ref;
	struct kn_error err;
	struct cli_client *c = NULL;
	unsigned char pub[KN_ED25519_PUB_LEN], sig[KN_ED25519_SIG_LEN];
	json_t *version = NULL, *req = NULL, *answer = NULL;
	char *canonical = NULL, *pub_b64 = NULL, *sig_b64 = NULL, *path = NULL;
	char at[KN_MODEL_NAME_MAX + 24];
	int rc = parse_ref(ctx, argc, argv, &a, 1, "NAME@VERSION --key FILE",
			   true, &ref);

	if (rc == CLI_GO && !a.key)
		rc = cli_usage_error(ctx, "--key FILE (from `kiln model "
				     "keygen`) is required");
	if (rc != CLI_GO)
		return rc;
	rc = model_get(ctx, a.pos[0], NULL, &version);
	if (rc)
		goto out;
	canonical = kn_model_manifest_canonical(
		json_object_get(version, "manifest"));
	if (!canonical) {
		rc = cli_fail(ctx, "the server's answer has no manifest");
		goto out;
	}
	if (kn_model_sign(a.key, canonical, strlen(canonical), pub, sig,
			  &err) < 0) {
		rc = cli_fail(ctx, "%s", err.message);
		goto out;
	}
	pub_b64 = kn_base64_encode(pub, sizeof(pub));
	sig_b64 = kn_base64_encode(sig, sizeof(sig));
	/* The version itself, not an alias that may move meanwhile. */
	snprintf(at, sizeof(at), "%s@%lld", ref.name,
		 (long long)cli_json_int(version, "version"));
	path = model_path(at, "/signatures");
	req = json_pack("{s:s, s:s}", "public_key", pub_b64, "signature",
			sig_b64);
	rc = cli_client_open(ctx, &c);
	if (!rc)
		rc = cli_post_json(c, path, req, &answer);
	if (!rc && cli_want_json(ctx))
		cli_print_data(ctx, answer);
	else if (!rc)
		fprintf(stderr, "signed %s with key %s (%s by the server)\n", at,
			cli_json_str(answer, "key_id"),
			json_is_true(json_object_get(answer, "trusted"))
				? "trusted"
				: "not trusted");
out:
	KN_FREE_ALL(canonical, pub_b64, sig_b64, path);
	json_decref(req);
	json_decref(answer);
	json_decref(version);
	cli_client_free(c);
	return rc;
}

/*
 * The gate of pull and verify: the manifest is the version asked for and
 * at least one signature verifies here, over the canonical bytes, with a
 * key the server trusts. Prints why not and returns CLI_EXIT_FAIL.
 */
static int check_trust(struct cli_ctx *ctx, json_t *v, const char *at)
{
	json_t *manifest = json_object_get(v, "manifest"), *s;
	json_t *list = json_object_get(v, "signatures");
	char *canonical = kn_model_manifest_canonical(manifest);
	struct kn_model_sig *sigs = kn_xcalloc(json_array_size(list) + 1,
					       sizeof(*sigs));
	struct kn_error err;
	size_t i;
	int rc = CLI_GO;

	json_array_foreach(list, i, s) {
		sigs[i].key_id = json_string_value(json_object_get(s, "key_id"));
		sigs[i].public_key =
			json_string_value(json_object_get(s, "public_key"));
		sigs[i].signature =
			json_string_value(json_object_get(s, "signature"));
		sigs[i].trusted = json_is_true(json_object_get(s, "trusted"));
	}
	if (!canonical ||
	    strcmp(cli_json_str(manifest, "name"), cli_json_str(v, "name")) ||
	    cli_json_int(manifest, "version") != cli_json_int(v, "version"))
		rc = cli_fail(ctx, "%s: the manifest is not this version's", at);
	else if (kn_model_trust_check(at, canonical, sigs,
				      json_array_size(list), &err) < 0)
		rc = cli_fail(ctx, "%s", err.message);
	KN_FREE_ALL(sigs, canonical);
	return rc;
}

static int open_store(struct cli_ctx *ctx, json_t *v,
		      struct kn_blob_store **out)
{
	struct kn_blob_store_config cfg = {.url = cli_json_str(v, "store"),
					   .use_env = true};
	struct kn_error err;

	if (kn_blob_store_open(&cfg, out, &err) < 0)
		return cli_fail(ctx, "the registry's store %s: %s", cfg.url,
				err.message);
	return CLI_GO;
}

/* A version reference as asked, resolved to "NAME@VERSION". */
static void version_at(json_t *v, char *at, size_t len)
{
	snprintf(at, len, "%s@%lld", cli_json_str(v, "name"),
		 (long long)cli_json_int(v, "version"));
}

/*
 * The version verify and pull work on: fetched (the read is audited as
 * verb), its signature checked against the trusted keys, its manifest
 * read and its store opened. CLI_GO or the exit code, with what was
 * already obtained left for the caller to free.
 */
static int open_trusted_version(struct cli_ctx *ctx, const char *text,
				const char *verb, json_t **v, char *at,
				size_t at_len, struct kn_model_files *f,
				struct kn_blob_store **store)
{
	struct kn_model_ref ref;
	struct kn_error err;
	int rc = ref_arg(ctx, text, true, &ref);

	if (rc != CLI_GO)
		return rc;
	rc = model_get(ctx, text, verb, v);
	if (rc)
		return rc;
	version_at(*v, at, at_len);
	rc = check_trust(ctx, *v, at);
	if (rc == CLI_GO &&
	    kn_model_manifest_read(json_object_get(*v, "manifest"), at, f, NULL,
				   NULL, &err) < 0)
		rc = cli_fail(ctx, "%s", err.message);
	if (rc == CLI_GO)
		rc = open_store(ctx, *v, store);
	return rc;
}

static int model_verify(struct cli_ctx *ctx, int argc, char **argv)
{
	struct args a;
	struct kn_model_files f = {0};
	struct kn_blob_store *store = NULL;
	struct kn_hash_item *items = NULL;
	struct kn_error err;
	struct progress p;
	char **paths = NULL, **temps = NULL, at[KN_MODEL_NAME_MAX + 24];
	char size_text[32];
	json_t *v = NULL;
	size_t bad = 0;
	int rc = parse(ctx, argc, argv, &a, 1, "NAME@VERSION|NAME@ALIAS");

	if (rc != CLI_GO)
		return rc;
	rc = open_trusted_version(ctx, a.pos[0], "verify", &v, at, sizeof(at),
				  &f, &store);
	if (rc != CLI_GO)
		goto out;
	items = kn_xcalloc(f.n + 1, sizeof(*items));
	paths = kn_xcalloc(f.n + 1, sizeof(*paths));
	temps = kn_xcalloc(f.n + 1, sizeof(*temps));
	/* Local blobs are hashed in place; remote ones are fetched first,
	   hashed as they are written. */
	for (size_t i = 0; i < f.n; i++) {
		char *blob = kn_model_blob_name(f.items[i].sha256);
		paths[i] = kn_blob_local_path(store, blob);
		if (!paths[i]) {
			char tmpl[] = "/tmp/kiln-verify-XXXXXX";
			int fd = mkstemp(tmpl);
			if (fd >= 0)
				close(fd);
			temps[i] = kn_xstrdup(tmpl);
			paths[i] = kn_xstrdup(tmpl);
			if (fd < 0 || kn_blob_get_file(store, blob, tmpl, 0, -1,
						       NULL, &err) < 0) {
				items[i].error = fd < 0 ? -errno : -ENOENT;
				fprintf(stderr, "%s: file %s: blob %s: %s\n",
					ctx->prog, f.items[i].path, blob,
					fd < 0 ? strerror(errno) : err.message);
			}
		}
		items[i].path = paths[i];
		free(blob);
	}
	progress_init(&p, "verifying", kn_model_files_bytes(&f));
	kn_hash_files(items, f.n, kn_hash_threads_default(),
		      kn_model_files_bytes(&f), progress_print, &p);
	for (size_t i = 0; i < f.n; i++) {
		const struct kn_model_file *mf = &f.items[i];
		if (items[i].error) {
			fprintf(stderr, "%s: %s: file %s: blob sha256/%s is "
				"missing or unreadable (%s)\n", ctx->prog, at,
				mf->path, mf->sha256, strerror(-items[i].error));
			bad++;
		} else if (strcmp(items[i].sha256, mf->sha256) ||
			   items[i].size != mf->size) {
			fprintf(stderr, "%s: %s: file %s does not match its "
				"digest: blob sha256/%s holds %lld bytes hashing "
				"to %s\n", ctx->prog, at, mf->path, mf->sha256,
				(long long)items[i].size, items[i].sha256);
			bad++;
		}
	}
	if (bad) {
		fprintf(stderr, "%s: refused: %s has %zu file%s that do%s not "
			"match the manifest\n", ctx->prog, at, bad,
			bad == 1 ? "" : "s", bad == 1 ? "es" : "");
		rc = CLI_EXIT_FAIL;
		goto out;
	}
	kn_format_bytes(kn_model_files_bytes(&f), size_text, sizeof(size_text));
	if (cli_want_json(ctx)) {
		json_t *o = json_pack("{s:s, s:b, s:I, s:I}", "model", at,
				      "verified", 1, "files", (json_int_t)f.n,
				      "bytes",
				      (json_int_t)kn_model_files_bytes(&f));
		cli_print_data(ctx, o);
		json_decref(o);
	} else {
		printf("%s verified: %zu files (%s) match their digests; signed "
		       "by a trusted key\n", at, f.n, size_text);
	}
	rc = CLI_EXIT_OK;
out:
	for (size_t i = 0; paths && i < f.n; i++) {
		if (temps[i])
			unlink(temps[i]);
		KN_FREE_ALL(temps[i], paths[i]);
	}
	KN_FREE_ALL(temps, paths, items);
	kn_blob_store_free(store);
	kn_model_files_release(&f);
	json_decref(v);
	return rc;
}

/* A pull's files, copied by several workers at once. */
struct pull {
	const struct kn_model_files *f;
	struct kn_blob_store *store;
	const char *dir;
	pthread_mutex_t mu; /* over done and the progress line */
	int64_t done;
	struct progress *p;
};

/* File i of the version into its place under the pull's directory, its
   digest and size checked. */
static int pull_one(void *arg, size_t i, struct kn_error *err)
{
	struct pull *pl = arg;
	const struct kn_model_file *mf = &pl->f->items[i];
	char *path = kn_asprintf("%s/%s", pl->dir, mf->path);
	char *blob = kn_model_blob_name(mf->sha256);
	char *slash = strrchr(path, '/'), got[KN_SHA256_HEX + 1];
	struct kn_error gerr;
	struct stat st;
	int rc;

	*slash = '\0';
	kn_mkdir_p(path, 0755);
	*slash = '/';
	rc = kn_blob_get_file(pl->store, blob, path, 0, -1, got, &gerr);
	if (rc < 0)
		kn_errorf(err, gerr.code, NULL, "file %s: %s", mf->path,
			  gerr.message);
	else if (strcmp(got, mf->sha256) ||
		 (stat(path, &st) == 0 && st.st_size != mf->size))
		rc = kn_errorf(err, KN_ECONFLICT, NULL, "file %s does not "
			       "match its digest: blob %s hashes to %s",
			       mf->path, blob, got);
	if (rc == 0) {
		pthread_mutex_lock(&pl->mu);
		pl->done += mf->size;
		progress_print(pl->done, pl->p->total, pl->p);
		pthread_mutex_unlock(&pl->mu);
	}
	KN_FREE_ALL(blob, path);
	return rc;
}

static int model_pull(struct cli_ctx *ctx, int argc, char **argv)
{
	struct args a;
	struct kn_model_files f = {0};
	struct kn_blob_store *store = NULL;
	struct kn_error err;
	char at[KN_MODEL_NAME_MAX + 24], size_text[32];
	json_t *v = NULL;
	bool made = false;
	struct progress p;
	struct pull pl = {.f = &f, .p = &p};
	int rc = parse(ctx, argc, argv, &a, 2, "NAME@VERSION|NAME@ALIAS DIR");

	if (rc != CLI_GO)
		return rc;
	rc = open_trusted_version(ctx, a.pos[0], "pull", &v, at, sizeof(at),
				  &f, &store);
	if (rc == CLI_GO && mkdir(a.pos[1], 0755) < 0)
		rc = cli_fail(ctx, "%s: %s (pull into a new directory)",
			      a.pos[1], strerror(errno));
	if (rc != CLI_GO)
		goto out;
	made = true;
	progress_init(&p, "pulling", kn_model_files_bytes(&f));
	pl.store = store;
	pl.dir = a.pos[1];
	pthread_mutex_init(&pl.mu, NULL);
	/* Files at once, as many as the store copies well: one file's copy
	   waits on its hash, another's fills that time. */
	if (kn_blob_for_each_file(store, f.n, pull_one, &pl, &err) < 0)
		rc = cli_fail(ctx, "refused: %s: %s", at, err.message);
	pthread_mutex_destroy(&pl.mu);
	if (rc != CLI_GO)
		goto out;
	kn_format_bytes(kn_model_files_bytes(&f), size_text, sizeof(size_text));
	fprintf(stderr, "pulled %s into %s: %zu files (%s), every digest "
		"checked\n", at, a.pos[1], f.n, size_text);
	rc = CLI_EXIT_OK;
out:
	/* Half a model is worse than none: nothing stays of a refused pull. */
	if (rc != CLI_EXIT_OK && made)
		kn_rm_rf(a.pos[1]);
	kn_blob_store_free(store);
	kn_model_files_release(&f);
	json_decref(v);
	return rc == CLI_GO ? CLI_EXIT_OK : rc;
}

/* ---- lineage ---- */

static void print_lineage(json_t *job, int depth)
{
	json_t *ckpt = json_object_get(job, "checkpoint"), *in;
	int pad = 2 * depth;
	size_t i;

	printf("%*sjob %lld (%s, %s)\n", pad, "",
	       (long long)cli_json_int(job, "job"),
	       cli_json_str(job, "job_name"), cli_json_str(job, "state"));
	printf("%*s  spec sha256:%s\n", pad, "",
	       cli_json_str(job, "spec_sha256"));
	printf("%*s  code revision %s\n", pad, "",
	       json_is_string(json_object_get(job, "code_revision"))
		       ? cli_json_str(job, "code_revision")
		       : "none (workdir not in a git repository)");
	if (json_is_object(ckpt))
		printf("%*s  checkpoint %s manifest sha256:%s\n", pad, "",
		       cli_json_str(ckpt, "name"),
		       cli_json_str(ckpt, "manifest_sha256"));
	else
		printf("%*s  checkpoint none\n", pad, "");
	if (json_array_size(json_object_get(job, "inputs")) == 0)
		printf("%*s  inputs none\n", pad, "");
	json_array_foreach(json_object_get(job, "inputs"), i, in) {
		const char *digest =
			json_string_value(json_object_get(in, "sha256"));
		printf("%*s  input %s %s%s%s\n", pad, "",
		       cli_json_str(in, "name"), cli_json_str(in, "url"),
		       digest ? " sha256:" : " (no digest)",
		       digest ? digest : "");
		if (json_is_object(json_object_get(in, "produced_by")))
			print_lineage(json_object_get(in, "produced_by"),
				      depth + 2);
	}
}

static int model_lineage(struct cli_ctx *ctx, int argc, char **argv)
{
	struct args a;
	struct kn_model_ref ref;
	struct cli_client *c = NULL;
	json_t *answer = NULL, *lineage, *metrics, *v;
	char *path = NULL;
	const char *key;
	int rc = parse_ref(ctx, argc, argv, &a, 1, "NAME@VERSION|NAME@ALIAS",
			   true, &ref);

	if (rc != CLI_GO)
		return rc;
	rc = cli_client_open(ctx, &c);
	if (rc)
		return rc;
	path = model_path(a.pos[0], "/lineage");
	rc = cli_get_answer(ctx, c, path, &answer);
	if (rc != CLI_GO)
		goto out;
	lineage = json_object_get(answer, "lineage");
	metrics = json_object_get(answer, "metrics");
	printf("model %s@%lld\n", cli_json_str(answer, "name"),
	       (long long)cli_json_int(answer, "version"));
	if (json_is_object(metrics)) {
		printf("  metrics");
		json_object_foreach(metrics, key, v)
			printf(" %s=%g", key, json_number_value(v));
		printf("\n");
	}
	if (json_is_object(lineage))
		print_lineage(lineage, 1);
	else
		printf("  no lineage: pushed from a directory, not a job\n");
out:
	free(path);
	json_decref(answer);
	cli_client_free(c);
	return rc == CLI_GO ? CLI_EXIT_OK : rc;
}

static int cmd_model(struct cli_ctx *ctx, int argc, char **argv)
{
	static const struct cli_verb verbs[] = {
		{"push", model_push},
		{"ls", model_ls},
		{"show", model_show},
		{"pull", model_pull},
		{"diff", model_diff},
		{"promote", model_promote},
		{"rollback", model_rollback},
		{"aliases", model_aliases},
		{"keygen", model_keygen},
		{"sign", model_sign},
		{"verify", model_verify},
		{"lineage", model_lineage},
		{"revalidate", model_revalidate},
		{NULL, NULL},
	};
	return cli_run_verb(ctx, argc, argv, verbs);
}
