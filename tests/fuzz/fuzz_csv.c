/*
 * libFuzzer harness for base's CSV reader (kn_csv). Any input must read to
 * its end or fail with "t.csv:LINE:COLUMN: ..."; every record read holds
 * 1..KN_CSV_FIELDS_MAX fields at positions that only move forward, and
 * reads back the same when written out again with every field quoted.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The record written as CSV with each field quoted reads back the same. */
static void check_round_trip(const struct kn_csv *c)
{
	struct kn_buf b;
	struct kn_csv again;
	struct kn_error err;
	int rc = 0;

	kn_buf_init(&b, KN_CSV_RECORD_MAX);
	for (int i = 0; i < c->n_fields; i++) {
		rc |= kn_buf_append(&b, i ? ",\"" : "\"", i ? 2 : 1);
		for (const char *s = c->fields[i]; *s; s++)
			rc |= kn_buf_append(&b, *s == '"' ? "\"\"" : s,
					    *s == '"' ? 2 : 1);
		rc |= kn_buf_append(&b, "\"", 1);
	}
	rc |= kn_buf_append(&b, "\r\n", 2);
	/* Doubled quotes may take it past the bound: nothing to compare. */
	if (rc < 0) {
		kn_buf_release(&b);
		return;
	}
	kn_csv_init(&again, b.data, "again.csv");
	if (kn_csv_next(&again, &err) != 1 ||
	    again.n_fields != c->n_fields)
		abort();
	for (int i = 0; i < c->n_fields; i++)
		if (strcmp(again.fields[i], c->fields[i]) != 0)
			abort();
	if (kn_csv_next(&again, &err) != 0)
		abort();
	kn_buf_release(&b);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *text = malloc(size + 1);
	struct kn_csv c;
	struct kn_error err;
	int rc, last_line = 0;

	memcpy(text, data, size);
	text[size] = '\0';
	kn_csv_init(&c, text, "t.csv");
	while ((rc = kn_csv_next(&c, &err)) > 0) {
		if (c.n_fields < 1 || c.n_fields > KN_CSV_FIELDS_MAX ||
		    c.line <= last_line)
			abort();
		for (int i = 0; i < c.n_fields; i++)
			if (c.lines[i] < c.line || c.cols[i] < 1 ||
			    (i && c.lines[i] < c.lines[i - 1]))
				abort();
		last_line = c.line;
		check_round_trip(&c);
	}
	if (rc < 0 && strncmp(err.message, "t.csv:", 6) != 0)
		abort();
	free(text);
	return 0;
}
