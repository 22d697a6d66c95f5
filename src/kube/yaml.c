/*
 * JSON values as block-style YAML, for `kiln render`.
 *
 * kubectl reads JSON too, but people read and diff manifests as YAML. The
 * writer is small because it only has to print what render.c builds:
 * every string is double-quoted with JSON's escapes (a subset of YAML's
 * double-quoted style), so "1", "true" or "on" stay strings and nothing
 * depends on YAML's plain-scalar rules; keys are plain when they are made
 * of characters that cannot start or change a YAML construct, quoted
 * otherwise. libfyaml's emitter was the alternative; it would need a
 * document built node by node for the same output.
 */
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "kube/kube.h"

static void pad(struct kn_buf *b, int indent)
{
	for (int i = 0; i < indent; i++)
		kn_buf_append(b, " ", 1);
}

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

static void scalar(struct kn_buf *b, json_t *v)
{
	char *text = json_dumps(v, JSON_ENCODE_ANY);

	if (!text)
		abort();
	kn_buf_append(b, text, strlen(text));
	free(text);
}

static bool is_block(json_t *v)
{
	return (json_is_object(v) && json_object_size(v)) ||
	       (json_is_array(v) && json_array_size(v));
}

static void value(struct kn_buf *b, json_t *v, int indent, bool inline_first);

/* A mapping's entries at indent; the first one's padding already written
   when inline_first. */
static void mapping(struct kn_buf *b, json_t *obj, int indent,
		    bool inline_first)
{
	const char *key;
	json_t *v;
	bool first = true;

	json_object_foreach(obj, key, v) {
		if (!(first && inline_first))
			pad(b, indent);
		first = false;
		if (plain_key(key)) {
			kn_buf_append(b, key, strlen(key));
		} else {
			json_t *k = json_string(key);
			scalar(b, k);
			json_decref(k);
		}
		kn_buf_append(b, ":", 1);
		if (json_is_object(v) && json_object_size(v)) {
			kn_buf_append(b, "\n", 1);
			mapping(b, v, indent + 2, false);
		} else if (json_is_array(v) && json_array_size(v)) {
			kn_buf_append(b, "\n", 1);
			value(b, v, indent, false);
		} else {
			kn_buf_append(b, " ", 1);
			value(b, v, indent, true);
		}
	}
}

static void value(struct kn_buf *b, json_t *v, int indent, bool inline_first)
{
	size_t i;
	json_t *item;

	if (json_is_object(v) && json_object_size(v)) {
		mapping(b, v, indent, inline_first);
		return;
	}
	if (json_is_array(v) && json_array_size(v)) {
		json_array_foreach(v, i, item) {
			if (!(i == 0 && inline_first))
				pad(b, indent);
			kn_buf_append(b, "-", 1);
			if (is_block(item) && json_is_array(item)) {
				kn_buf_append(b, "\n", 1);
				value(b, item, indent + 2, false);
			} else {
				kn_buf_append(b, " ", 1);
				value(b, item, indent + 2, true);
			}
		}
		return;
	}
	if (json_is_object(v))
		kn_buf_append(b, "{}", 2);
	else if (json_is_array(v))
		kn_buf_append(b, "[]", 2);
	else
		scalar(b, v);
	kn_buf_append(b, "\n", 1);
}

char *kn_kube_yaml(json_t *docs)
{
	struct kn_buf b;
	size_t i;
	json_t *doc;
	char *text;

	kn_buf_init(&b, SIZE_MAX);
	json_array_foreach(docs, i, doc) {
		kn_buf_append(&b, "---\n", 4);
		value(&b, doc, 0, false);
	}
	text = b.data ? b.data : kn_xstrdup("");
	return text;
}
