/*
 * libFuzzer harness for the gateway's request framing check (framing.c):
 * any bytes as a request head. A head it takes must hold what front.c
 * relies on afterwards: it ends at its first CRLF CRLF, every LF follows
 * a CR and every CR precedes an LF, no NUL, and a Content-Length that
 * fits; a refusal is 400, 411 or 505.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "loop/loop.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *head = (const char *)data;
	struct kn_http_framing fr;
	int status;
	const char *eoh;

	if (size > 65536)
		return 0;
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
