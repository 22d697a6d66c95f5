/*
 * Names, references, file lists and manifests.
 */
#include "registry/registry.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

bool kn_model_name_ok(const char *name)
{
	size_t n = name ? strlen(name) : 0;

	if (n == 0 || n > KN_MODEL_NAME_MAX || !isalnum((unsigned char)name[0]))
		return false;
	for (size_t i = 0; i < n; i++) {
		unsigned char ch = (unsigned char)name[i];
		if (!isalnum(ch) && ch != '.' && ch != '_' && ch != '-')
			return false;
	}
	return true;
}

bool kn_model_alias_ok(const char *alias)
{
	if (!kn_model_name_ok(alias))
		return false;
	for (const char *p = alias; *p; p++)
		if (!isdigit((unsigned char)*p))
			return true;
	return false;
}

bool kn_sha256_hex_ok(const char *hex)
{
	if (!hex || strlen(hex) != KN_SHA256_HEX)
		return false;
	for (const char *p = hex; *p; p++)
		if (!isdigit((unsigned char)*p) && !(*p >= 'a' && *p <= 'f'))
			return false;
	return true;
}

int kn_model_ref_parse(const char *text, bool need_at, const char *field,
		       struct kn_model_ref *out, struct kn_error *err)
{
	const char *at = text ? strchr(text, '@') : NULL;
	size_t name_len = at ? (size_t)(at - text) : (text ? strlen(text) : 0);

	memset(out, 0, sizeof(*out));
	if (!text || name_len == 0 || name_len > KN_MODEL_NAME_MAX)
		goto bad;
	memcpy(out->name, text, name_len);
	if (!kn_model_name_ok(out->name))
		goto bad;
	if (!at) {
		if (need_at)
			goto bad;
		return 0;
	}
	at++;
	if (kn_model_alias_ok(at)) {
		kn_strlcpy(out->alias, at, sizeof(out->alias));
		return 0;
	}
	if (*at && strlen(at) <= 15 && strspn(at, "0123456789") == strlen(at) &&
	    at[0] != '0') {
		out->version = strtoll(at, NULL, 10);
		return 0;
	}
bad:
	return kn_errorf(err, KN_EINVAL, field,
			 "\"%s\" is not a model reference: want NAME%s (a "
			 "name is 1-64 of letters, digits, '.', '_', '-')",
			 text ? text : "",
			 need_at ? "@VERSION or NAME@ALIAS"
				 : "[@VERSION|@ALIAS]");
}

bool kn_model_ref_has_at(const struct kn_model_ref *ref)
{
	return ref->version > 0 || ref->alias[0];
}

/* ---- files ---- */

void kn_model_files_release(struct kn_model_files *f)
{
	KN_ROWS_RELEASE(f->items, f->n, path);
}

void kn_model_files_add(struct kn_model_files *f, const char *path,
			int64_t size, const char *sha256)
{
	struct kn_model_file *it;

	f->items = kn_xrealloc(f->items, (f->n + 1) * sizeof(*f->items));
	it = &f->items[f->n++];
	it->path = kn_xstrdup(path);
	it->size = size;
	kn_strlcpy(it->sha256, sha256 ? sha256 : "", sizeof(it->sha256));
}

static int by_path(const void *a, const void *b)
{
	return strcmp(((const struct kn_model_file *)a)->path,
		      ((const struct kn_model_file *)b)->path);
}

int kn_model_files_sort(struct kn_model_files *f, struct kn_error *err)
{
	if (f->n > 1)
		qsort(f->items, f->n, sizeof(*f->items), by_path);
	for (size_t i = 1; i < f->n; i++)
		if (!strcmp(f->items[i - 1].path, f->items[i].path))
			return kn_errorf(err, KN_EINVAL, "files",
					 "path \"%s\" appears twice",
					 f->items[i].path);
	return 0;
}

int64_t kn_model_files_bytes(const struct kn_model_files *f)
{
	int64_t total = 0;

	for (size_t i = 0; i < f->n; i++)
		total += f->items[i].size;
	return total;
}

/* Relative, '/'-separated, no empty, "." or ".." part, no control bytes. */
static bool path_ok(const char *p)
{
	const char *part = p;

	if (!p || !*p || strlen(p) > 4096)
		return false;
	for (;;) {
		const char *end = strchr(part, '/');
		size_t n = end ? (size_t)(end - part) : strlen(part);
		if (n == 0 || (n == 1 && part[0] == '.') ||
		    (n == 2 && part[0] == '.' && part[1] == '.'))
			return false;
		for (size_t i = 0; i < n; i++)
			if ((unsigned char)part[i] < 0x20)
				return false;
		if (!end)
			return true;
		part = end + 1;
	}
}

int kn_model_files_from_json(json_t *array, const char *field,
			     struct kn_model_files *out, struct kn_error *err)
{
	size_t i;
	json_t *it;
	int rc;

	memset(out, 0, sizeof(*out));
	if (!json_is_array(array))
		return kn_errorf(err, KN_EINVAL, field,
				 "must be an array of {path, sha256, size}");
	json_array_foreach(array, i, it) {
		const char *path = json_string_value(json_object_get(it, "path"));
		const char *sha = json_string_value(json_object_get(it, "sha256"));
		json_t *size = json_object_get(it, "size");
		char where[64];

		snprintf(where, sizeof(where), "%s[%zu]", field, i);
		if (!path_ok(path))
			rc = kn_errorf(err, KN_EINVAL, where,
				       "path must be relative, '/'-separated, "
				       "without empty, '.' or '..' parts");
		else if (!kn_sha256_hex_ok(sha))
			rc = kn_errorf(err, KN_EINVAL, where,
				       "sha256 must be 64 lowercase hex digits");
		else if (!json_is_integer(size) || json_integer_value(size) < 0)
			rc = kn_errorf(err, KN_EINVAL, where,
				       "size must be a whole number >= 0");
		else
			rc = 0;
		if (rc < 0) {
			kn_model_files_release(out);
			return rc;
		}
		kn_model_files_add(out, path, json_integer_value(size), sha);
	}
	rc = kn_model_files_sort(out, err);
	if (rc < 0)
		kn_model_files_release(out);
	return rc;
}

json_t *kn_model_files_to_json(const struct kn_model_files *f)
{
	json_t *a = json_array();

	for (size_t i = 0; i < f->n; i++)
		json_array_append_new(
			a, json_pack("{s:s, s:s, s:I}", "path", f->items[i].path,
				     "sha256", f->items[i].sha256, "size",
				     (json_int_t)f->items[i].size));
	return a;
}

/* ---- manifests ---- */

json_t *kn_model_manifest_new(const char *name, int64_t version,
			      const struct kn_model_files *files,
			      const char *created_by, int64_t created_at_ms)
{
	return json_pack("{s:s, s:I, s:o, s:s, s:I, s:n, s:n}", "name", name,
			 "version", (json_int_t)version, "files",
			 kn_model_files_to_json(files), "created_by",
			 created_by, "created_at_ms", (json_int_t)created_at_ms,
			 "lineage", "metrics");
}

char *kn_model_manifest_canonical(const json_t *manifest)
{
	return json_dumps(manifest, JSON_SORT_KEYS | JSON_COMPACT);
}

int kn_model_manifest_read(const json_t *manifest, const char *source,
			   struct kn_model_files *files, const char **name,
			   int64_t *version, struct kn_error *err)
{
	json_t *v = json_object_get(manifest, "version");
	const char *n = json_string_value(json_object_get(manifest, "name"));
	int rc;

	if (!json_is_object(manifest) || !kn_model_name_ok(n) ||
	    !json_is_integer(v) || json_integer_value(v) < 1)
		return kn_errorf(err, KN_EINVAL, source,
				 "not a model manifest (needs name, version "
				 ">= 1 and files)");
	rc = kn_model_files_from_json(json_object_get(manifest, "files"),
				      "files", files, err);
	if (rc < 0)
		return rc;
	if (name)
		*name = n;
	if (version)
		*version = json_integer_value(v);
	return 0;
}

char *kn_model_blob_name(const char *sha256)
{
	return kn_asprintf("sha256/%s", sha256);
}

char *kn_model_manifest_blob_name(const char *name, int64_t version)
{
	return kn_asprintf("models/%s/%lld.json", name, (long long)version);
}
