/*
 * MANIFEST.json: the record that makes a checkpoint exist.
 *
 *   {"version": 1, "name": "step-000120", "created_ms": 1764...,
 *    "files": [{"path": "model.pt", "size": 1234, "sha256": "ab..."}]}
 *
 * Parsing is strict (unknown versions, absolute or ".." paths, duplicate
 * paths and malformed digests are errors), because restore trusts it to
 * say where files go.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "ckpt/internal.h"

/* A manifest lists at most this many files: far beyond any checkpoint,
 * and it bounds what a corrupt or hostile manifest can make us allocate. */
#define MANIFEST_MAX_FILES 100000

void kn_ckpt_manifest_release(struct kn_ckpt_manifest *m)
{
	if (!m)
		return;
	KN_ROWS_RELEASE(m->files, m->n, path);
	free(m->name);
	memset(m, 0, sizeof(*m));
}

char *kn_ckpt_manifest_to_json(const struct kn_ckpt_manifest *m)
{
	json_t *root = json_object(), *files = json_array();
	char *text;

	json_object_set_new(root, "version", json_integer(1));
	json_object_set_new(root, "name", json_string(m->name));
	json_object_set_new(root, "created_ms", json_integer(m->created_ms));
	for (size_t i = 0; i < m->n; i++)
		json_array_append_new(
			files, json_pack("{s:s, s:I, s:s}", "path",
					 m->files[i].path, "size",
					 (json_int_t)m->files[i].size,
					 "sha256", m->files[i].sha256));
	json_object_set_new(root, "files", files);
	text = json_dumps(root, JSON_INDENT(1) | JSON_PRESERVE_ORDER);
	json_decref(root);
	if (!text)
		abort();
	return text;
}

static bool is_hex64(const char *s)
{
	if (strlen(s) != KN_SHA256_HEX_LEN)
		return false;
	for (const char *p = s; *p; p++)
		if (!((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f')))
			return false;
	return true;
}

static int file_cmp(const void *a, const void *b)
{
	const struct kn_ckpt_file *x = a, *y = b;
	return strcmp(x->path, y->path);
}

int kn_ckpt_manifest_parse(const char *text, size_t len, const char *source,
			   struct kn_ckpt_manifest *out, struct kn_error *err)
{
	struct kn_ckpt_manifest m = {0};
	json_error_t jerr;
	json_t *root, *files, *v;
	size_t i;
	int rc = 0;

	root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
	if (!root)
		return kn_errorf(err, KN_EINVAL, NULL, "%s:%d:%d: %s", source,
				 jerr.line, jerr.column, jerr.text);
	if (!json_is_object(root)) {
		rc = kn_errorf(err, KN_EINVAL, NULL, "%s: not a JSON object",
			       source);
		goto out;
	}
	v = json_object_get(root, "version");
	if (!json_is_integer(v) || json_integer_value(v) != 1) {
		rc = kn_errorf(err, KN_EINVAL, "version",
			       "%s: version: must be 1", source);
		goto out;
	}
	v = json_object_get(root, "name");
	if (!json_is_string(v) || !*json_string_value(v) ||
	    strchr(json_string_value(v), '/')) {
		rc = kn_errorf(err, KN_EINVAL, "name",
			       "%s: name: must be a non-empty string without "
			       "'/'", source);
		goto out;
	}
	m.name = kn_xstrdup(json_string_value(v));
	v = json_object_get(root, "created_ms");
	if (v && !json_is_integer(v)) {
		rc = kn_errorf(err, KN_EINVAL, "created_ms",
			       "%s: created_ms: must be an integer", source);
		goto out;
	}
	m.created_ms = v ? json_integer_value(v) : 0;
	files = json_object_get(root, "files");
	if (!json_is_array(files) ||
	    json_array_size(files) > MANIFEST_MAX_FILES) {
		rc = kn_errorf(err, KN_EINVAL, "files",
			       "%s: files: must be an array of at most %d",
			       source, MANIFEST_MAX_FILES);
		goto out;
	}
	m.files = kn_xcalloc(json_array_size(files) + 1, sizeof(m.files[0]));
	json_array_foreach(files, i, v) {
		json_t *p = json_object_get(v, "path");
		json_t *sz = json_object_get(v, "size");
		json_t *sha = json_object_get(v, "sha256");
		struct kn_error perr;

		if (!json_is_string(p) ||
		    kn_blob_check_name(json_string_value(p), "path", &perr) < 0 ||
		    strcmp(json_string_value(p), KN_CKPT_MANIFEST) == 0) {
			rc = kn_errorf(err, KN_EINVAL, "files",
				       "%s: files[%zu].path: must be a "
				       "relative path without \".\" or \"..\" "
				       "parts", source, i);
			goto out;
		}
		if (!json_is_integer(sz) || json_integer_value(sz) < 0) {
			rc = kn_errorf(err, KN_EINVAL, "files",
				       "%s: files[%zu].size: must be an "
				       "integer >= 0", source, i);
			goto out;
		}
		if (!json_is_string(sha) || !is_hex64(json_string_value(sha))) {
			rc = kn_errorf(err, KN_EINVAL, "files",
				       "%s: files[%zu].sha256: must be 64 "
				       "lowercase hex digits", source, i);
			goto out;
		}
		m.files[m.n].path = kn_xstrdup(json_string_value(p));
		m.files[m.n].size = json_integer_value(sz);
		memcpy(m.files[m.n].sha256, json_string_value(sha),
		       KN_SHA256_HEX_LEN + 1);
		m.n++;
	}
	if (m.n > 1)
		qsort(m.files, m.n, sizeof(m.files[0]), file_cmp);
	for (i = 1; i < m.n; i++) {
		if (strcmp(m.files[i - 1].path, m.files[i].path) == 0) {
			rc = kn_errorf(err, KN_EINVAL, "files",
				       "%s: files: \"%s\" listed twice",
				       source, m.files[i].path);
			goto out;
		}
	}
	*out = m;
	memset(&m, 0, sizeof(m));
out:
	kn_ckpt_manifest_release(&m);
	json_decref(root);
	return rc;
}
