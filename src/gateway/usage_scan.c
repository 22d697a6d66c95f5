/*
 * Reading "usage" out of a model server's answer without
 * parsing the answer: a held answer can be megabytes (embeddings), and a
 * full parse per call was the largest user-space cost of a proxied call.
 *
 * The scan knows just enough JSON to be exact for well-formed documents:
 * strings (with escapes) are skipped whole, so braces and key names inside
 * values do not count; nesting is tracked, so only the top-level "usage"
 * object's own "total_tokens" is read, not one in a nested object.
 */
#include <ctype.h>
#include <string.h>

#include "gateway/gateway.h"

/* Tokens past this are not a count any model produces. */
#define TOKENS_MAX 1000000000000000LL

static size_t skip_space(const char *s, size_t len, size_t i)
{
	while (i < len && isspace((unsigned char)s[i]))
		i++;
	return i;
}

/*
 * The closing quote of the string whose text starts at s[start], or len
 * when it is cut short: the first quote after an even run of backslashes.
 * memchr, not a loop over every byte: answers are mostly strings.
 */
static size_t string_end(const char *s, size_t len, size_t start)
{
	size_t i = start;

	for (;;) {
		const char *q = memchr(s + i, '"', len - i);
		size_t k, slashes = 0;

		if (!q)
			return len;
		k = (size_t)(q - s);
		while (k - slashes > start && s[k - slashes - 1] == '\\')
			slashes++;
		if (slashes % 2 == 0)
			return k;
		i = k + 1;
	}
}

/* A whole number at s[j..]; 0 when there is none or it is absurd. */
static int64_t count_at(const char *s, size_t len, size_t j)
{
	int64_t n = 0;

	if (j >= len || !isdigit((unsigned char)s[j]))
		return 0;
	for (; j < len && isdigit((unsigned char)s[j]); j++) {
		n = n * 10 + (s[j] - '0');
		if (n > TOKENS_MAX)
			return 0;
	}
	return n;
}

void kn_gw_usage_read(const char *s, size_t len, struct kn_gw_usage *out)
{
	struct kn_gw_usage u = {0, 0};
	int depth = 0;
	bool in_usage = false;
	size_t i = 0;

	while (i < len) {
		char ch = s[i];

		if (ch == '"') {
			size_t start = ++i, klen, j;
			i = string_end(s, len, start);
			if (i >= len)
				break;
			klen = i - start;
			j = skip_space(s, len, i + 1);
			i++;
			if (j >= len || s[j] != ':')
				continue; /* a value, not a key */
			i = j + 1;
			j = skip_space(s, len, i);
			if (depth == 1 && klen == 5 && !memcmp(s + start, "usage", 5))
				in_usage = j < len && s[j] == '{';
			else if (in_usage && depth == 2 && klen == 12 &&
				 !memcmp(s + start, "total_tokens", 12))
				u.total_tokens = count_at(s, len, j);
			else if (in_usage && depth == 2 && klen == 17 &&
				 !memcmp(s + start, "completion_tokens", 17))
				u.completion_tokens = count_at(s, len, j);
			continue;
		}
		if (ch == '{' || ch == '[') {
			depth++;
		} else if (ch == '}' || ch == ']') {
			depth--;
			if (in_usage && depth < 2)
				break; /* the usage object is over */
		}
		i++;
	}
	*out = u;
}
