/*
 * kiln backup create | ls | restore (docs/backup.md).
 *
 * create asks the running server for a backup (it alone can copy its
 * database at one consistent moment) and waits until the upload is over.
 * ls and restore read the store directly, with the CLI's own credentials
 * (AZURE_STORAGE_* for Azure), so a home can be rebuilt on a machine
 * where no server runs: restore needs --from then.
 *
 * restore downloads every part into DIR/.restore first and checks each
 * one's size and sha256 against the manifest; only when all match are
 * they moved into place, so a bad part leaves DIR as empty as it was.
 */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/base.h"
#include "ckpt/ckpt.h"
#include "cmd/cli.h"
#include "cmd/cli_client.h"

static cli_runner cmd_backup;

const struct cli_command cmd_backup_entry = {
	.name = "backup",
	.run = cmd_backup,
	.summary = "back up the server's state to a store; list and restore backups",
	.help = "usage: kiln backup create [--to STORE-URL] [--with-audit-key]\n"
		"       kiln backup ls [--from STORE-URL] [-o json|table]\n"
		"       kiln backup restore BACKUP --home DIR [--from STORE-URL]\n"
		"\n"
		"create (admin) has the running server copy kiln.db at one moment\n"
		"(SQLite's online backup), with the public key files of\n"
		"$KILN_HOME/keys and a manifest (time, kiln and schema version,\n"
		"size and sha256 of each part), to STORE/backups/NAME/, NAME being\n"
		"the UTC time; it waits for the upload and prints NAME. The default\n"
		"store is the server's --backup-to, else its --blob-store.\n"
		"  --with-audit-key   include audit.key, without which the restored\n"
		"                     audit log cannot be verified; the backup is\n"
		"                     then a secret (docs/backup.md)\n"
		"\n"
		"ls lists the complete backups in a store: NAME CREATED KILN SCHEMA\n"
		"PARTS SIZE AUDIT_KEY. restore rebuilds a kiln home from one into\n"
		"DIR, which must be empty or missing: every part is downloaded and\n"
		"checked against the manifest's sha256 first, and a bad part is\n"
		"named and nothing restored. Secrets and kiln.db are written 0600.\n"
		"Without a server, give the store with --from (Azure credentials\n"
		"from AZURE_STORAGE_*, as kiln blob).\n",
};

#define BACKUP_PREFIX "backups/"
/* A manifest lists a few files: a megabyte is far beyond any real one. */
#define BACKUP_MANIFEST_MAX (1024 * 1024)
/* create waits this long for the server's upload before giving up. */
#define BACKUP_WAIT_MS (30 * 60 * 1000)
#define BACKUP_POLL_MS 100

static int backup_create(struct cli_ctx *ctx, int argc, char **argv)
{
	const char *to = NULL;
	bool with_key = false;
	const struct cli_flag flags[] = {
		{"to", 0, CLI_FLAG_STRING, &to},
		{"with-audit-key", 0, CLI_FLAG_BOOL, &with_key},
		{NULL, 0, CLI_FLAG_BOOL, NULL},
	};
	struct cli_client *c = NULL;
	json_t *body, *answer = NULL, *run;
	struct kn_buf path;
	char size[32];
	const char *state;
	int64_t deadline;
	int rc;

	kn_buf_init(&path, SIZE_MAX);
	rc = cli_parse_open(ctx, argc, argv, flags, NULL, NULL, &c);
	if (rc != CLI_GO)
		goto out;
	body = json_pack("{s:b}", "with_audit_key", with_key);
	if (to)
		json_object_set_new(body, "to", json_string(to));
	rc = cli_post_json(c, "/v1/backups", body, &answer);
	json_decref(body);
	if (rc)
		goto out;
	run = json_object_get(answer, "backup");
	cli_path_object(&path, "/v1/backups", cli_json_str(run, "name"), "");
	deadline = kn_mono_ms() + BACKUP_WAIT_MS;
	while (!strcmp(cli_json_str(run, "state"), "running")) {
		if (kn_mono_ms() > deadline) {
			rc = cli_fail(ctx, "backup %s is still running after"
				      " 30m; see kiln backup ls",
				      cli_json_str(run, "name"));
			goto out;
		}
		rc = cli_get_after(c, BACKUP_POLL_MS, path.data, &answer);
		if (rc)
			goto out;
		run = json_object_get(answer, "backup");
	}
	state = cli_json_str(run, "state");
	if (cli_want_json(ctx))
		cli_print_data(ctx, answer);
	else if (!strcmp(state, "done"))
		printf("%s\n", cli_json_str(run, "name"));
	if (strcmp(state, "done") != 0) {
		rc = cli_fail(ctx, "backup %s failed: %s",
			      cli_json_str(run, "name"),
			      cli_json_str(run, "error"));
		goto out;
	}
	kn_format_bytes(cli_json_int(run, "bytes"), size, sizeof(size));
	fprintf(stderr, "backup %s: %lld parts, %s in %s%s\n",
		cli_json_str(run, "name"),
		(long long)cli_json_int(run, "parts"), size,
		cli_json_str(run, "url"),
		json_is_true(json_object_get(run, "with_audit_key"))
			? " (with audit.key: keep it as a secret)"
			: "");
out:
	json_decref(answer);
	kn_buf_release(&path);
	cli_client_free(c);
	return rc;
}

/* --from, or the server's backup store. *url is malloc'd. */
static int store_url(struct cli_ctx *ctx, const char *from, char **url)
{
	struct cli_client *c = NULL;
	json_t *answer = NULL;
	int rc;

	if (from) {
		*url = kn_xstrdup(from);
		return 0;
	}
	rc = cli_client_open(ctx, &c);
	if (rc == 0)
		rc = cli_get(c, "/v1/backups", &answer);
	if (rc == 0)
		*url = kn_xstrdup(cli_json_str(answer, "store"));
	else
		fprintf(stderr, "%s: without a server, name the store with"
			" --from URL\n", ctx->prog);
	json_decref(answer);
	cli_client_free(c);
	return rc;
}

static int open_store(struct cli_ctx *ctx, const char *url,
		      struct kn_blob_store **out)
{
	struct kn_blob_store_config cfg = {.url = url, .use_env = true};
	struct kn_error err;

	if (kn_blob_store_open(&cfg, out, &err) < 0)
		return cli_fail(ctx, "%s", err.message);
	return 0;
}

/* A backup's manifest, parsed; NULL after printing why. */
static json_t *read_manifest(struct cli_ctx *ctx, struct kn_blob_store *store,
			     const char *name)
{
	struct kn_error err;
	char *blob = kn_asprintf(BACKUP_PREFIX "%s/" KN_CKPT_MANIFEST, name);
	char *text = NULL;
	size_t len = 0;
	json_t *doc = NULL;

	if (kn_blob_get_bytes(store, blob, BACKUP_MANIFEST_MAX, &text, &len,
			      &err) < 0) {
		if (err.code == KN_ENOTFOUND)
			cli_fail(ctx, "no complete backup %s in %s (kiln"
				 " backup ls lists them)",
				 name, kn_blob_store_url(store));
		else
			cli_fail(ctx, "%s", err.message);
		goto out;
	}
	doc = json_loadb(text, len, 0, NULL);
	if (!json_is_object(doc) ||
	    strcmp(cli_json_str(doc, "kind"), "kiln-backup") != 0 ||
	    !json_is_array(json_object_get(doc, "parts"))) {
		cli_fail(ctx, "%s: not a kiln backup manifest", blob);
		json_decref(doc);
		doc = NULL;
	}
out:
	KN_FREE_ALL(text, blob);
	return doc;
}

static int backup_ls(struct cli_ctx *ctx, int argc, char **argv)
{
	static const char *const headers[] = {
		"NAME", "CREATED", "KILN", "SCHEMA", "PARTS", "SIZE",
		"AUDIT_KEY", NULL,
	};
	const char *from = NULL;
	const struct cli_flag flags[] = {
		{"from", 0, CLI_FLAG_STRING, &from},
		{NULL, 0, CLI_FLAG_BOOL, NULL},
	};
	struct kn_blob_store *store = NULL;
	struct kn_blob_list list = {0};
	struct cli_table *t = NULL;
	struct kn_error err;
	json_t *all = json_array();
	char *url = NULL;
	int rc;

	rc = cli_parse(ctx, argc, argv, flags, NULL, NULL);
	if (rc != CLI_GO)
		goto out;
	rc = store_url(ctx, from, &url);
	if (rc == 0)
		rc = open_store(ctx, url, &store);
	if (rc)
		goto out;
	if (kn_blob_list(store, BACKUP_PREFIX, &list, &err) < 0) {
		rc = cli_fail(ctx, "%s", err.message);
		goto out;
	}
	for (size_t i = 0; i < list.n; i++) {
		const char *name = list.items[i].name + strlen(BACKUP_PREFIX);
		const char *slash = strchr(name, '/');
		char *one;
		json_t *m;

		if (!slash || strcmp(slash + 1, KN_CKPT_MANIFEST) != 0)
			continue;
		one = kn_asprintf("%.*s", (int)(slash - name), name);
		m = read_manifest(ctx, store, one);
		free(one);
		if (!m) {
			rc = CLI_EXIT_FAIL;
			goto out;
		}
		json_array_append_new(all, m);
	}
	if (cli_want_json(ctx)) {
		json_t *doc = json_pack("{s:s, s:O}", "store",
					kn_blob_store_url(store), "backups",
					all);
		cli_print_data(ctx, doc);
		json_decref(doc);
		goto out;
	}
	if (!json_array_size(all)) {
		fprintf(stderr, "no backups in %s\n", kn_blob_store_url(store));
		goto out;
	}
	t = cli_table_new(headers);
	for (size_t i = 0; i < json_array_size(all); i++) {
		json_t *m = json_array_get(all, i), *p;
		int64_t bytes = 0;
		char when[40], size[32];
		size_t k;

		json_array_foreach(json_object_get(m, "parts"), k, p)
			bytes += cli_json_int(p, "size");
		kn_format_time(cli_json_int(m, "created_ms"), when,
			       sizeof(when));
		kn_format_bytes(bytes, size, sizeof(size));
		cli_table_cell(t, cli_json_str(m, "name"));
		cli_table_cell(t, when);
		cli_table_cell(t, cli_json_str(m, "kiln_version"));
		cli_table_cellf(t, "%lld", (long long)cli_json_int(
						   m, "schema_version"));
		cli_table_cellf(t, "%zu", json_array_size(json_object_get(
						  m, "parts")));
		cli_table_cell(t, size);
		cli_table_cell(t, json_is_true(json_object_get(
					  m, "with_audit_key"))
					  ? "yes"
					  : "no");
	}
	cli_table_show(ctx, t, stdout, 0);
out:
	cli_table_free(t);
	json_decref(all);
	kn_blob_list_release(&list);
	kn_blob_store_free(store);
	free(url);
	return rc;
}

/* A part's path: relative, no "..", no empty or hidden components. */
static bool part_path_ok(const char *path)
{
	const char *p = path;

	if (!*path || *path == '/')
		return false;
	while (*p) {
		const char *end = strchrnul(p, '/');

		if (end == p || *p == '.')
			return false;
		p = *end ? end + 1 : end;
	}
	return true;
}

/* DIR must be an empty directory, or not exist yet (made 0700). */
static int empty_home(struct cli_ctx *ctx, const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	int rc;

	if (!d && errno == ENOENT) {
		rc = kn_mkdir_p(dir, 0700);
		if (rc < 0)
			return cli_fail(ctx, "cannot create %s: %s", dir,
					strerror(-rc));
		return 0;
	}
	if (!d)
		return cli_fail(ctx, "%s: %s", dir, strerror(errno));
	while ((e = readdir(d)))
		if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..") &&
		    strcmp(e->d_name, KN_SERVER_LOCK)) {
			closedir(d);
			return cli_fail(ctx, "%s is not empty: a backup is"
					" restored only into an empty"
					" directory",
					dir);
		}
	closedir(d);
	if (chmod(dir, 0700) < 0)
		return cli_fail(ctx, "cannot restrict %s to 0700: %s", dir,
				strerror(errno));
	return 0;
}

/* Remove what a failed restore put in dir, leaving it empty. */
static void clear_dir(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *e;

	while (d && (e = readdir(d))) {
		char *path;

		if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..") ||
		    !strcmp(e->d_name, KN_SERVER_LOCK))
			continue;
		path = kn_asprintf("%s/%s", dir, e->d_name);
		kn_rm_rf(path);
		free(path);
	}
	if (d)
		closedir(d);
}

/* Download and check every part into staging; 0 or after printing. */
static int fetch_parts(struct cli_ctx *ctx, struct kn_blob_store *store,
		       const char *name, json_t *parts, const char *staging)
{
	struct kn_error err;
	size_t i;
	json_t *p;
	int rc = 0;

	json_array_foreach(parts, i, p) {
		const char *path = cli_json_str(p, "path");
		const char *want = cli_json_str(p, "sha256");
		char sha[KN_SHA256_HEX_LEN + 1];
		char *blob, *local, *slash;
		struct stat st;

		if (!part_path_ok(path))
			return cli_fail(ctx, "backup %s: parts[%zu]: bad path"
					" \"%s\"",
					name, i, path);
		blob = kn_asprintf(BACKUP_PREFIX "%s/%s", name, path);
		local = kn_asprintf("%s/%s", staging, path);
		slash = strrchr(local, '/');
		*slash = '\0';
		kn_mkdir_p(local, 0700);
		*slash = '/';
		if (kn_blob_get_file(store, blob, local, 0, -1, sha, &err) < 0)
			rc = cli_fail(ctx, "backup %s: part %s: %s", name,
				      path, err.message);
		else if (strcmp(sha, want) != 0)
			rc = cli_fail(ctx, "backup %s: part %s is corrupt: its"
				      " sha256 is %s, the manifest says %s",
				      name, path, sha, want);
		else if (stat(local, &st) < 0)
			rc = cli_fail(ctx, "%s: %s", local, strerror(errno));
		else if (st.st_size != cli_json_int(p, "size"))
			rc = cli_fail(ctx, "backup %s: part %s is corrupt: %lld"
				      " bytes, the manifest says %lld",
				      name, path, (long long)st.st_size,
				      (long long)cli_json_int(p, "size"));
		KN_FREE_ALL(blob, local);
		if (rc)
			return rc;
	}
	return 0;
}

/* Move the checked parts into the home, each with its mode. */
static int place_parts(struct cli_ctx *ctx, json_t *parts,
		       const char *staging, const char *home)
{
	size_t i;
	json_t *p;

	json_array_foreach(parts, i, p) {
		const char *path = cli_json_str(p, "path");
		bool secret = json_is_true(json_object_get(p, "secret"));
		size_t len = strlen(path);
		/* Public key halves are for anyone to read; the rest not. */
		mode_t mode = !secret && len > 4 &&
					      !strcmp(path + len - 4, ".pub")
				      ? 0644
				      : 0600;
		char *from = kn_asprintf("%s/%s", staging, path);
		char *to = kn_asprintf("%s/%s", home, path);
		char *slash = strrchr(to, '/');
		int rc = 0;

		*slash = '\0';
		kn_mkdir_p(to, 0700);
		*slash = '/';
		if (chmod(from, mode) < 0 || rename(from, to) < 0)
			rc = cli_fail(ctx, "cannot place %s: %s", to,
				      strerror(errno));
		KN_FREE_ALL(from, to);
		if (rc)
			return rc;
	}
	return 0;
}

static int backup_restore(struct cli_ctx *ctx, int argc, char **argv)
{
	const char *name = NULL, *home = NULL, *from = NULL;
	const struct cli_flag flags[] = {
		{"home", 0, CLI_FLAG_STRING, &home},
		{"from", 0, CLI_FLAG_STRING, &from},
		{NULL, 0, CLI_FLAG_BOOL, NULL},
	};
	struct kn_blob_store *store = NULL;
	struct kn_error err;
	json_t *manifest = NULL, *parts, *head;
	char *url = NULL, *staging = NULL, *path = NULL, *line = NULL;
	int rc, lock_fd = -1;

	rc = cli_parse(ctx, argc, argv, flags, "BACKUP", &name);
	if (rc != CLI_GO)
		return rc;
	if (!home)
		return cli_usage_error(ctx, "--home DIR is required: the new"
				       " kiln home (an empty directory)");
	if (!part_path_ok(name) || strchr(name, '/'))
		return cli_usage_error(ctx, "\"%s\" is not a backup name (kiln"
				       " backup ls lists them)",
				       name);
	/* The server's own lock: no server starts on a home half restored,
	   and none running on it sees its files replaced. */
	rc = empty_home(ctx, home);
	if (rc)
		return rc;
	lock_fd = kn_dir_lock(home, KN_SERVER_LOCK, "restore", "the home",
			      &err);
	if (lock_fd < 0)
		return cli_fail(ctx, "%s", err.message);
	rc = store_url(ctx, from, &url);
	if (rc == 0)
		rc = open_store(ctx, url, &store);
	if (rc)
		goto out;
	manifest = read_manifest(ctx, store, name);
	if (!manifest) {
		rc = CLI_EXIT_FAIL;
		goto out;
	}
	parts = json_object_get(manifest, "parts");
	rc = empty_home(ctx, home);
	if (rc)
		goto out;
	staging = kn_asprintf("%s/.restore", home);
	rc = fetch_parts(ctx, store, name, parts, staging);
	if (rc == 0)
		rc = place_parts(ctx, parts, staging, home);
	head = json_object_get(manifest, "audit_head");
	if (rc == 0 && json_is_object(head)) {
		path = kn_asprintf("%s/audit.head", home);
		line = kn_asprintf("%lld %s\n",
				   (long long)cli_json_int(head, "id"),
				   cli_json_str(head, "hash"));
		if (kn_write_file_atomic(path, line, strlen(line), 0600) < 0)
			rc = cli_fail(ctx, "cannot write %s", path);
	}
	kn_rm_rf(staging);
	if (rc) {
		clear_dir(home); /* nothing half restored */
		goto out;
	}
	fprintf(stderr,
		"restored backup %s (kiln %s, schema %lld, %zu parts) into"
		" %s\n",
		name, cli_json_str(manifest, "kiln_version"),
		(long long)cli_json_int(manifest, "schema_version"),
		json_array_size(parts), home);
	if (!json_is_true(json_object_get(manifest, "with_audit_key")))
		fprintf(stderr,
			"the backup has no audit.key: copy the original key"
			" to %s/audit.key before starting a server there"
			" (docs/backup.md)\n",
			home);
out:
	KN_FREE_ALL(line, path, staging);
	json_decref(manifest);
	kn_blob_store_free(store);
	free(url);
	if (lock_fd >= 0) {
		/* A failed restore leaves DIR as empty as it found it. */
		if (rc) {
			char *lock = kn_asprintf("%s/%s", home, KN_SERVER_LOCK);
			unlink(lock);
			free(lock);
		}
		close(lock_fd);
	}
	return rc;
}

static int cmd_backup(struct cli_ctx *ctx, int argc, char **argv)
{
	static const struct cli_verb verbs[] = {
		{"create", backup_create},
		{"ls", backup_ls},
		{"restore", backup_restore},
		{NULL, NULL},
	};

	return cli_run_verb(ctx, argc, argv, verbs);
}
