/*
 * libFuzzer harness for the Azure store's reader of reply headers
 * (kn_azure_head_line): the input is cut at each '\n' into lines, each
 * handed over in a buffer of exactly its length, as curl does, so a read
 * past a line's end is caught. Invariants beyond "no crash": every kept
 * value is NUL-terminated within its field and printable, an error code
 * holds only letters and digits, a length is -1 or a count, a status is
 * 0 or 100 to 599.
 */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/internal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_text(const char *s, size_t cap, bool alnum_only)
{
	size_t n = strnlen(s, cap);

	if (n == cap)
		abort();
	for (size_t i = 0; i < n; i++) {
		char c = s[i];
		if (c < 0x20 || c > 0x7e)
			abort();
		if (alnum_only && !((c >= 'A' && c <= 'Z') ||
				    (c >= 'a' && c <= 'z') ||
				    (c >= '0' && c <= '9')))
			abort();
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct kn_azure_head h = {.content_length = -1};
	size_t at = 0;

	if (size > 65536)
		return 0;
	while (at < size) {
		const uint8_t *nl = memchr(data + at, '\n', size - at);
		size_t len = nl ? (size_t)(nl - (data + at)) + 1 : size - at;
		char *line = malloc(len ? len : 1);

		memcpy(line, data + at, len);
		kn_azure_head_line(&h, line, len);
		free(line);
		at += len;
		check_text(h.error_code, sizeof(h.error_code), true);
		check_text(h.content_range, sizeof(h.content_range), false);
		check_text(h.etag, sizeof(h.etag), false);
		check_text(h.copy_status, sizeof(h.copy_status), false);
		if (h.content_length < -1 ||
		    h.content_length > 999999999999999999LL)
			abort();
		if (h.status != 0 && (h.status < 100 || h.status > 599))
			abort();
	}
	return 0;
}
