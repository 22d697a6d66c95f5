/*
 * libFuzzer harness for the gateway's request framing check (framing.c):
 * any bytes as a request head. A head it takes must hold what front.c
 * relies on afterwards: it ends at its first CRLF CRLF, every LF follows
 * a CR and every CR precedes an LF, no NUL, and a Content-Length that
 * fits; a refusal is 400, 411 or 505. The same bytes, split field by
 * field (kn_http_field_next, as front.c and the gateway's upstream reader
 * do), stay inside the head and come back without blanks around a value.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "loop/loop.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void split_fields(const uint8_t *data, size_t size)
{
	char *copy = malloc(size + 1), *p = copy, *end = copy + size;
	char *name, *value, *before;
	int rc;

	memcpy(copy, data, size);
	copy[size] = '\0';
	for (before = p; (rc = kn_http_field_next(&p, end, &name, &value)) > 0;
	     before = p) {
		size_t n = strlen(value);
		if (p <= before || p > end || name != before || strchr(name, ':') ||
		    value < name || value >= p ||
		    (n && strchr(" \t", value[0])) ||
		    (n && strchr(" \t", value[n - 1])))
			abort();
	}
	if (rc != 0 && rc != -1)
		abort();
	free(copy);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *head = (const char *)data;
	struct kn_http_framing fr;
	int status;
	const char *eoh;

	if (size > 65536)
		return 0;
	split_fields(data, size);
	status = kn_http_framing_check(head, size, &fr);
	if (status) {
		if (status != 400 && status != 411 && status != 505)
			abort();
		return 0;
	}
	eoh = memmem(head, size, "\r\n\r\n", 4);
	if (!eoh || (size_t)(eoh - head) + 4 != size || memchr(head, 0, size))
		abort();
	for (size_t i = 0; i < size; i++)
		if ((head[i] == '\n' && (!i || head[i - 1] != '\r')) ||
		    (head[i] == '\r' && (i + 1 == size || head[i + 1] != '\n')))
			abort();
	if (fr.chunked || (!fr.has_length && fr.body_len) ||
	    fr.body_len > 999999999999999999ULL)
		abort();
	return 0;
}
