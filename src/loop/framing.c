/*
 * The framing rules a request head must meet before front.c splits it
 * (RFC 9112), checked on the raw bytes. A gateway sits behind other
 * proxies: where two parsers could read one byte stream as different
 * requests (request smuggling), the gateway refuses instead of guessing.
 *
 * - Every line ends with CRLF: a bare LF or a bare CR is refused (RFC 9112
 *   lets a server accept a bare LF; a proxy in front may not, so we do
 *   not).
 * - Request line: a token method, one SP, a target of visible ASCII that
 *   is origin-form ("/..."), absolute-form ("http://", "https://") or
 *   "*", one SP, and "HTTP/1.0" or "HTTP/1.1"; another "HTTP/d.d" gets
 *   505, anything else 400.
 * - Fields: a token name directly followed by ':' (no whitespace before
 *   it, no obsolete line folding), a value of visible ASCII, SP, HTAB and
 *   obs-text only (no NUL or other control byte).
 * - Content-Length: digits only, at most 18 of them, and once: a repeated
 *   field or a list is refused even when the values agree (RFC 9112 §6.3
 *   lets a recipient refuse it; nginx does too).
 * - Transfer-Encoding with Content-Length is refused (400); without it,
 *   411, since the gateway takes bodies with a length only.
 * - HTTP/1.1 requests carry exactly one Host (RFC 9112 §3.2).
 */
#include <errno.h>
#include <string.h>
#include <strings.h>

#include "loop/loop.h"

/* RFC 9110 tchar. */
static bool is_tchar(unsigned char ch)
{
	return (ch >= '0' && ch <= '9') || (ch >= 'a' && ch <= 'z') ||
	       (ch >= 'A' && ch <= 'Z') || (ch && strchr("!#$%&'*+-.^_`|~", ch));
}

static bool is_value_byte(unsigned char ch)
{
	return ch == '\t' || (ch >= 0x20 && ch != 0x7f);
}

static bool names(const char *p, size_t len, const char *name)
{
	return len == strlen(name) && !strncasecmp(p, name, len);
}

/* The request line [p, end): 0, 400 or 505. */
static int check_request_line(const char *p, const char *end, bool *http11)
{
	const char *m = p, *t, *v;

	while (p < end && is_tchar((unsigned char)*p))
		p++;
	if (p == m || p == end || *p != ' ')
		return 400;
	t = ++p;
	while (p < end && (unsigned char)*p > 0x20 && (unsigned char)*p < 0x7f)
		p++;
	if (p == t || p == end || *p != ' ')
		return 400;
	if (!(*t == '/' || ((size_t)(p - t) > 7 && !strncmp(t, "http://", 7)) ||
	      ((size_t)(p - t) > 8 && !strncmp(t, "https://", 8)) ||
	      (p - t == 1 && *t == '*')))
		return 400;
	v = ++p;
	if (end - v != 8 || strncmp(v, "HTTP/", 5) || v[6] != '.' ||
	    v[5] < '0' || v[5] > '9' || v[7] < '0' || v[7] > '9')
		return 400;
	if (v[5] != '1' || (v[7] != '0' && v[7] != '1'))
		return 505;
	*http11 = v[7] == '1';
	return 0;
}

/* One field line [p, end): 0 or 400; notes the fields framing reads. */
static int check_field(const char *p, const char *end,
		       struct kn_http_framing *out, int *n_host)
{
	const char *name = p, *v;
	size_t name_len;

	while (p < end && is_tchar((unsigned char)*p))
		p++;
	if (p == name || p == end || *p != ':')
		return 400; /* no name, a fold, or space before the colon */
	name_len = (size_t)(p - name);
	for (v = ++p; p < end; p++)
		if (!is_value_byte((unsigned char)*p))
			return 400;
	while (v < end && (*v == ' ' || *v == '\t'))
		v++;
	while (end > v && (end[-1] == ' ' || end[-1] == '\t'))
		end--;
	if (names(name, name_len, "Host")) {
		(*n_host)++;
	} else if (names(name, name_len, "Transfer-Encoding")) {
		out->chunked = true;
	} else if (names(name, name_len, "Content-Length")) {
		int64_t n;
		if (out->has_length ||
		    kn_http_content_length(v, (size_t)(end - v), &n) < 0)
			return 400;
		out->has_length = true;
		out->body_len = (uint64_t)n;
	}
	return 0;
}

int kn_http_content_length(const char *v, size_t len, int64_t *out)
{
	int64_t n = 0;

	if (len == 0 || len > 18)
		return -EINVAL;
	for (size_t i = 0; i < len; i++) {
		if (v[i] < '0' || v[i] > '9')
			return -EINVAL;
		n = n * 10 + (v[i] - '0');
	}
	*out = n;
	return 0;
}

int kn_http_framing_check(const char *head, size_t len, struct kn_http_framing *out)
{
	const char *p = head, *end = head + len, *eol = NULL;
	bool http11 = false, first = true;
	int n_host = 0, rc;

	memset(out, 0, sizeof(*out));
	for (const char *q = head; q < end; q++)
		if ((*q == '\r' && (q + 1 == end || q[1] != '\n')) ||
		    (*q == '\n' && (q == head || q[-1] != '\r')))
			return 400; /* a bare CR or a bare LF */
	for (; p < end; p = eol + 2) {
		eol = memchr(p, '\r', (size_t)(end - p));
		if (!eol)
			return 400; /* the head does not end in CRLF CRLF */
		if (eol == p)
			break; /* the empty line */
		rc = first ? check_request_line(p, eol, &http11)
			   : check_field(p, eol, out, &n_host);
		if (rc)
			return rc;
		first = false;
	}
	if (first || p >= end || eol + 2 != end)
		return 400;
	if (http11 && n_host != 1)
		return 400;
	if (out->chunked)
		return out->has_length ? 400 : 411;
	return 0;
}

int kn_http_field_next(char **p, char *end, char **name, char **value)
{
	char *line = *p, *nl, *colon, *v;

	if (line >= end || !(nl = memchr(line, '\n', (size_t)(end - line))))
		return 0;
	*nl = '\0';
	if (nl > line && nl[-1] == '\r')
		nl[-1] = '\0';
	if (!*line)
		return 0;
	if (!(colon = strchr(line, ':')))
		return -1;
	*colon = '\0';
	for (v = colon + 1; *v == ' ' || *v == '\t'; v++)
		;
	for (char *t = v + strlen(v); t > v && (t[-1] == ' ' || t[-1] == '\t');)
		*--t = '\0';
	*p = nl + 1;
	*name = line;
	*value = v;
	return 1;
}
