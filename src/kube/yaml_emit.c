/*
 * JSON values as block-style YAML, for `kiln render`.
 *
 * kubectl reads JSON too, but people read and diff manifests as YAML. The
 * documents are built as libfyaml trees and written by its emitter, which
 * owns indentation and escaping. Every string is double-quoted (built from
 * its JSON text, whose escapes are a subset of YAML's double-quoted
 * style), so "1", "true" or "on" stay strings and nothing depends on
 * YAML's plain-scalar rules; keys are plain when they are made of
 * characters that cannot start or change a YAML construct, quoted
 * otherwise; numbers, booleans and null are written as JSON writes them.
 * The emitter's width is unbounded, so no string is folded across lines.
 */
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <libfyaml.h>

#include "kube/kube.h"

/* Plain scalars YAML 1.1 readers (PyYAML, older Go yaml) take for
   booleans or null, so a key spelled so must be quoted. */
static const char *const reserved[] = {
	"y", "n", "yes", "no", "on", "off", "true", "false", "null", NULL,
};

static bool plain_key(const char *k)
{
	if (!*k || !((k[0] >= 'a' && k[0] <= 'z') ||
		     (k[0] >= 'A' && k[0] <= 'Z')))
		return false;
	for (int i = 0; reserved[i]; i++)
		if (!strcasecmp(k, reserved[i]))
			return false;
	for (const char *p = k; *p; p++)
		if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
		      (*p >= '0' && *p <= '9') || strchr("-_./", *p)))
			return false;
	return true;
}

/* A node libfyaml built: NULL only when memory ran out, which aborts, as
   kn_x* does. */
static struct fy_node *made(struct fy_node *n)
{
	if (!n)
		abort();
	return n;
}

/*
 * A scalar node from v's JSON text: a string comes out double-quoted,
 * anything else plain. The document owns the text.
 */
static struct fy_node *scalar(struct fy_document *d, json_t *v)
{
	char *text = json_dumps(v, JSON_ENCODE_ANY);

	if (!text)
		abort();
	return made(fy_node_build_from_malloc_string(d, text, strlen(text)));
}

static struct fy_node *key_node(struct fy_document *d, const char *key)
{
	struct fy_node *n;
	json_t *k;

	if (plain_key(key))
		return made(fy_node_create_scalar_copy(d, key, strlen(key)));
	k = json_string(key);
	n = scalar(d, k);
	json_decref(k);
	return n;
}

static struct fy_node *node(struct fy_document *d, json_t *v)
{
	struct fy_node *n;
	const char *key;
	json_t *item;
	size_t i;

	if (json_is_object(v)) {
		n = made(fy_node_create_mapping(d));
		json_object_foreach(v, key, item)
			if (fy_node_mapping_append(n, key_node(d, key),
						   node(d, item)) != 0)
				abort();
		return n;
	}
	if (json_is_array(v)) {
		n = made(fy_node_create_sequence(d));
		json_array_foreach(v, i, item)
			if (fy_node_sequence_append(n, node(d, item)) != 0)
				abort();
		return n;
	}
	return scalar(d, v);
}

char *kn_kube_yaml(json_t *docs)
{
	const enum fy_emitter_cfg_flags flags =
		FYECF_MODE_BLOCK | FYECF_INDENT_2 | FYECF_WIDTH_INF |
		FYECF_DOC_START_MARK_ON | FYECF_DOC_END_MARK_OFF |
		FYECF_VERSION_DIR_OFF | FYECF_TAG_DIR_OFF;
	struct kn_buf b;
	json_t *doc;
	size_t i;

	kn_buf_init(&b, SIZE_MAX);
	json_array_foreach(docs, i, doc) {
		struct fy_document *d = fy_document_create(NULL);
		char *text;

		if (!d || fy_document_set_root(d, node(d, doc)) != 0)
			abort();
		text = fy_emit_document_to_string(d, flags);
		if (!text)
			abort();
		kn_buf_append(&b, text, strlen(text));
		free(text);
		fy_document_destroy(d);
	}
	return b.data ? b.data : kn_xstrdup("");
}
