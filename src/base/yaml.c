/*
 * YAML helpers shared by the parsers of specs, alert rules and
 * kubeconfigs, and the text check that must come before libfyaml.
 *
 * libfyaml 0.7 has no public start mark for mappings and sequences, but a
 * node report carries the node's position: collect one into a diag that
 * keeps errors rather than printing them, and read it back. Only used on
 * the way to an error message.
 */
#include "base.h"

#include <stdint.h>
#include <stdio.h>

#include <libfyaml.h>

/* Length of the valid UTF-8 sequence at s, or 0 if it is not valid. */
size_t kn_utf8_seq_len(const unsigned char *s, size_t avail)
{
	size_t n, i;
	uint32_t cp;

	if (s[0] < 0x80)
		return 1;
	if (s[0] >= 0xc2 && s[0] <= 0xdf) {
		n = 2;
		cp = s[0] & 0x1f;
	} else if (s[0] >= 0xe0 && s[0] <= 0xef) {
		n = 3;
		cp = s[0] & 0x0f;
	} else if (s[0] >= 0xf0 && s[0] <= 0xf4) {
		n = 4;
		cp = s[0] & 0x07;
	} else {
		return 0;
	}
	if (avail < n)
		return 0;
	for (i = 1; i < n; i++) {
		if ((s[i] & 0xc0) != 0x80)
			return 0;
		cp = (cp << 6) | (s[i] & 0x3f);
	}
	/* Overlong forms, UTF-16 surrogates, beyond U+10FFFF. */
	if ((n == 3 && cp < 0x800) || (n == 4 && cp < 0x10000) ||
	    (cp >= 0xd800 && cp <= 0xdfff) || cp > 0x10ffff)
		return 0;
	return n;
}

/*
 * Offset of the first NUL byte or invalid UTF-8 sequence, or len if there
 * is none; *is_nul tells which.
 */
size_t kn_text_bad_byte(const char *text, size_t len, bool *is_nul)
{
	const unsigned char *s = (const unsigned char *)text;
	size_t i = 0;

	while (i < len) {
		size_t n;

		if (s[i] == 0) {
			*is_nul = true;
			return i;
		}
		n = kn_utf8_seq_len(s + i, len - i);
		if (n == 0) {
			*is_nul = false;
			return i;
		}
		i += n;
	}
	return len;
}

/* 1-based line and column (in characters) of a byte offset. */
void kn_text_position(const char *text, size_t offset, int *line,
			    int *col)
{
	size_t i;

	*line = 1;
	*col = 1;
	for (i = 0; i < offset; i++) {
		unsigned char c = (unsigned char)text[i];
		if (c == '\n') {
			(*line)++;
			*col = 1;
		} else if ((c & 0xc0) != 0x80) {
			(*col)++;
		}
	}
}

int kn_yaml_text_check(const char *text, size_t len, const char *file,
		       const char *what, struct kn_error *err)
{
	bool is_nul = false;
	size_t bad = kn_text_bad_byte(text, len, &is_nul);
	int line, col;

	if (bad == len)
		return 0;
	kn_text_position(text, bad, &line, &col);
	return kn_errorf(err, KN_EINVAL, NULL, "%s:%d:%d: %s %s", file, line,
			 col, what,
			 is_nul ? "contains a NUL byte" : "is not valid UTF-8");
}

bool kn_yaml_node_position(struct fy_diag *diag, struct fy_node *node,
			   int *line, int *col)
{
	struct fy_diag_error *e, *last = NULL;
	void *iter = NULL;

	fy_diag_node_report(diag, node, FYET_ERROR, "position");
	while ((e = fy_diag_errors_iterate(diag, &iter)))
		last = e;
	if (!last || last->line <= 0 || last->column <= 0)
		return false;
	*line = last->line;
	*col = last->column;
	return true;
}
