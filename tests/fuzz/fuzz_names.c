/*
 * libFuzzer harness for the renderings of untrusted text: kn_text_escape
 * and kn_csv_cell. Whatever the bytes, an escaped rendering holds no
 * control character (but \n and \t for a terminal), is valid UTF-8, stays
 * within its bound and, for a log line, unescapes to exactly the input;
 * a CSV cell never starts a formula and reads back as the text (behind
 * its single quote when it had one).
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int hex(char c)
{
	return c >= '0' && c <= '9' ? c - '0'
	       : c >= 'a' && c <= 'f' ? c - 'a' + 10
				      : -1;
}

/* The input back from a log-line rendering; its length, or -1. */
static long unescape(const char *s, unsigned char *out)
{
	long n = 0;

	while (*s) {
		if (*s != '\\') {
			out[n++] = (unsigned char)*s++;
			continue;
		}
		s++;
		switch (*s) {
		case 'n': out[n++] = '\n'; s++; break;
		case 'r': out[n++] = '\r'; s++; break;
		case 't': out[n++] = '\t'; s++; break;
		case '\\': out[n++] = '\\'; s++; break;
		case 'x':
			if (hex(s[1]) < 0 || hex(s[2]) < 0)
				return -1;
			out[n++] = (unsigned char)(hex(s[1]) << 4 | hex(s[2]));
			s += 3;
			break;
		case 'u':
			/* A C1 control, U+0080..U+009F, as UTF-8. */
			if (strncmp(s, "u00", 3) || hex(s[3]) < 8 || hex(s[3]) > 9 ||
			    hex(s[4]) < 0)
				return -1;
			out[n++] = 0xc2;
			out[n++] = (unsigned char)(hex(s[3]) << 4 | hex(s[4]));
			s += 5;
			break;
		default:
			return -1;
		}
	}
	return n;
}

/* No control character (C0, DEL, C1) but those allowed, valid UTF-8. */
static void check_inert(const char *s, const char *allowed)
{
	size_t len = strlen(s), n;

	for (size_t i = 0; i < len; i += n)
		if (!(n = kn_utf8_seq_len((const unsigned char *)s + i,
					  len - i)))
			abort();
	for (size_t i = 0; i < len; i++) {
		unsigned char c = (unsigned char)s[i];

		if ((c < 0x20 || c == 0x7f) && !strchr(allowed, c))
			abort();
		if (c == 0xc2 && (unsigned char)s[i + 1] < 0xa0)
			abort();
	}
}

static void check_escape(const uint8_t *data, size_t size)
{
	char *out = malloc(4 * size + 1);
	unsigned char *back = malloc(size + 1);
	size_t used, bound;
	long n;

	/* Enough room: all of it, inert, and reads back to the input. */
	used = kn_text_escape(out, 4 * size + 1, (const char *)data, size, 0);
	check_inert(out, "");
	n = unescape(out, back);
	if (used != size || n != (long)size || memcmp(back, data, size))
		abort();
	/* A bound from the input: never passed, and what fits is a prefix. */
	bound = size ? data[0] % 64 + 1 : 1;
	used = kn_text_escape(out, bound, (const char *)data, size, 0);
	n = unescape(out, back);
	if (strlen(out) >= bound || used > size || n != (long)used ||
	    memcmp(back, data, used))
		abort();
	/* A terminal keeps lines and tabs; a stream holds back at most a
	   sequence's first 3 bytes. */
	used = kn_text_escape(out, 4 * size + 1, (const char *)data, size,
			      KN_TEXT_TERMINAL | KN_TEXT_MORE);
	check_inert(out, "\n\t");
	if (used + 3 < size)
		abort();
	free(back);
	free(out);
}

static void check_cell(const uint8_t *data, size_t size)
{
	char *text = malloc(size + 1), *cell, *record, *expect;
	struct kn_csv c;
	struct kn_error err;
	const char *start;

	memcpy(text, data, size);
	text[size] = '\0';
	cell = kn_csv_cell(text);
	if (strlen(cell) > 2 * strlen(text) + 3)
		abort();
	start = cell[0] == '"' ? cell + 1 : cell;
	if (kn_csv_formula_start(start))
		abort();
	/* The reader drops a CR before a newline: nothing to compare. */
	if (!strchr(text, '\r') && strlen(cell) < KN_CSV_RECORD_MAX - 4) {
		record = kn_asprintf("%s,x\n", cell);
		expect = kn_asprintf("%s%s", kn_csv_formula_start(text) ? "'" : "",
				     text);
		kn_csv_init(&c, record, "cell.csv");
		if (kn_csv_next(&c, &err) != 1 || c.n_fields != 2 ||
		    strcmp(c.fields[0], expect) || strcmp(c.fields[1], "x"))
			abort();
		free(expect);
		free(record);
	}
	free(cell);
	free(text);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	check_escape(data, size);
	check_cell(data, size);
	return 0;
}
