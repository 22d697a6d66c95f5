/*
 * Query cutting: a store URL's query may carry its credential (an Azure
 * SAS: sv=...&sig=...), and the URL is shown in answers, events, audit
 * details and log lines. Every one of those writers passes its text
 * through kn_url_queries_cut, so no path that forgets to is left.
 *
 * Rejected: matching known parameter names (sig=, token=): a store or a
 * proxy in front of one names its secrets as it likes; a shown URL needs
 * no query at all.
 */
#include "base.h"

#include <ctype.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* A byte that continues a URL (RFC 3986's unreserved, reserved and '%',
   less the quote and parentheses that surround URLs in messages). */
static bool url_byte(unsigned char c)
{
	return isalnum(c) || (c && strchr("-._~:/?#[]@!$&+,;=%", c));
}

size_t kn_url_base_len(const char *url)
{
	return strcspn(url, "?#");
}

char *kn_url_queries_cut(const char *text, size_t len, size_t *out_len)
{
	const char *end = text + len, *from = text, *p;
	struct kn_buf out;
	bool cut = false;

	kn_buf_init(&out, SIZE_MAX);

	while ((p = memmem(from, (size_t)(end - from), "://", 3))) {
		const char *u = p + 3, *q = NULL;

		while (u < end && url_byte((unsigned char)*u)) {
			if (!q && (*u == '?' || *u == '#'))
				q = u;
			u++;
		}
		/* Prose punctuation after a URL is not its query's. */
		while (q && u > q + 1 && strchr(",.;:!", u[-1]))
			u--;
		if (q) {
			kn_buf_append(&out, from, (size_t)(q - from));
			cut = true;
		} else {
			kn_buf_append(&out, from, (size_t)(u - from));
		}
		from = u;
	}
	if (!cut) {
		kn_buf_release(&out);
		return NULL;
	}
	kn_buf_append(&out, from, (size_t)(end - from));
	*out_len = out.len;
	return out.data;
}
