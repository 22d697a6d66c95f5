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

int kn_yaml_parser_new(const char *text, size_t len, const char *file,
		       unsigned flags, struct fy_diag **diag,
		       struct fy_parser **parser, struct kn_error *err)
{
	struct fy_parse_cfg parse_cfg = {.flags = FYPCF_QUIET | flags};
	struct fy_diag_cfg diag_cfg;

	*parser = NULL;
	fy_diag_cfg_default(&diag_cfg);
	diag_cfg.fp = NULL;
	diag_cfg.colorize = false;
	*diag = fy_diag_create(&diag_cfg);
	if (!*diag)
		goto fail;
	fy_diag_set_collect_errors(*diag, true);
	parse_cfg.diag = *diag;
	*parser = fy_parser_create(&parse_cfg);
	if (*parser && fy_parser_set_string(*parser, text, len) == 0)
		return 0;
	if (*parser)
		fy_parser_destroy(*parser);
	fy_diag_destroy(*diag);
	*parser = NULL;
	*diag = NULL;
fail:
	return kn_errorf(err, KN_EIO, NULL, "%s: cannot start the YAML parser",
			 file);
}

int kn_yaml_parse_error(struct fy_diag *diag, const char *file,
			struct kn_error *err)
{
	struct fy_diag_error *e;
	void *iter = NULL;

	while ((e = fy_diag_errors_iterate(diag, &iter)))
		if (e->type >= FYET_ERROR && e->line > 0 && e->column > 0)
			return kn_errorf(err, KN_EINVAL, NULL,
					 "%s:%d:%d: invalid YAML: %s", file,
					 e->line, e->column,
					 e->msg ? e->msg : "syntax error");
	return kn_errorf(err, KN_EINVAL, NULL, "%s: invalid YAML", file);
}

bool kn_yaml_scalar_start(struct fy_node *node, int *line, int *col)
{
	struct fy_token *tok;
	const struct fy_mark *mark;

	if (!node || !fy_node_is_scalar(node))
		return false;
	tok = fy_node_get_scalar_token(node);
	mark = tok ? fy_token_start_mark(tok) : NULL;
	if (!mark)
		return false;
	*line = mark->line + 1;
	*col = mark->column + 1;
	return true;
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
