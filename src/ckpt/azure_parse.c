/*
 * The pure half of the Azure Blob backend: URL and connection-string
 * parsing, the Shared Key string-to-sign and signature, percent-encoding,
 * the reply-header reader and the List Blobs XML reader. No network, no
 * clock, so unit tests pin them against independently computed vectors
 * and fuzzers can drive them.
 *
 * Parse errors name the field but never echo a value: connection strings
 * and URLs carry keys and SAS signatures.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "ckpt/internal.h"
#include "httpc/httpc.h"

char *kn_url_encode(const char *s, int keep_slash)
{
	struct kn_buf b;

	kn_buf_init(&b, SIZE_MAX);
	kn_buf_append(&b, "", 0);
	kn_buf_append_url_encoded(&b, s, keep_slash);
	return b.data;
}

/* ---- reply headers ---- */

/* A header's value kept whole when it is printable and fits, else "". */
static void header_copy(const char *v, size_t vlen, char *out, size_t cap)
{
	out[0] = '\0';
	if (vlen >= cap)
		return;
	for (size_t i = 0; i < vlen; i++)
		if (v[i] < 0x20 || v[i] > 0x7e)
			return;
	memcpy(out, v, vlen);
	out[vlen] = '\0';
}

/* Content-Length: 1 to 18 digits (no sign, no overflow), else -1. */
static int64_t parse_length(const char *v, size_t vlen)
{
	int64_t n = 0;

	if (vlen == 0 || vlen > 18)
		return -1;
	for (size_t i = 0; i < vlen; i++) {
		if (v[i] < '0' || v[i] > '9')
			return -1;
		n = n * 10 + (v[i] - '0');
	}
	return n;
}

/* "HTTP/x SSS ...": the three digits after the first space, a status
   of 100 to 599 (RFC 9110), else 0. The line is not NUL-terminated, so
   no strtol. */
static long parse_status(const char *line, size_t len)
{
	const char *sp = memchr(line, ' ', len);
	size_t at = sp ? (size_t)(sp - line) + 1 : len;
	long status = 0;

	if (len - at < 3)
		return 0;
	for (size_t i = at; i < at + 3; i++) {
		if (line[i] < '0' || line[i] > '9')
			return 0;
		status = status * 10 + (line[i] - '0');
	}
	if (len - at > 3 && line[at + 3] >= '0' && line[at + 3] <= '9')
		return 0;
	return status >= 100 && status <= 599 ? status : 0;
}

void kn_azure_head_line(struct kn_azure_head *h, const char *line,
			size_t len)
{
	const char *v;
	size_t vlen, o = 0;

	if (len > 9 && strncmp(line, "HTTP/", 5) == 0) {
		*h = (struct kn_azure_head){.status = parse_status(line, len),
					    .content_length = -1};
	} else if (kn_httpc_header(line, len, "x-ms-error-code", &v, &vlen)) {
		if (vlen >= sizeof(h->error_code))
			vlen = sizeof(h->error_code) - 1;
		/* Codes are identifiers; keep only those characters. */
		for (size_t i = 0; i < vlen; i++)
			if ((v[i] >= 'A' && v[i] <= 'Z') ||
			    (v[i] >= 'a' && v[i] <= 'z') ||
			    (v[i] >= '0' && v[i] <= '9'))
				h->error_code[o++] = v[i];
		h->error_code[o] = '\0';
	} else if (kn_httpc_header(line, len, "content-length", &v, &vlen)) {
		h->content_length = parse_length(v, vlen);
	} else if (kn_httpc_header(line, len, "content-range", &v, &vlen)) {
		header_copy(v, vlen, h->content_range,
			    sizeof(h->content_range));
	} else if (kn_httpc_header(line, len, "etag", &v, &vlen)) {
		header_copy(v, vlen, h->etag, sizeof(h->etag));
	} else if (kn_httpc_header(line, len, "x-ms-copy-status", &v, &vlen)) {
		header_copy(v, vlen, h->copy_status, sizeof(h->copy_status));
	}
}

/* ---- URL ---- */

void kn_azure_url_release(struct kn_azure_url *u)
{
	if (!u)
		return;
	KN_FREE_ALL(u->endpoint, u->path_base, u->account, u->container,
		    u->prefix, u->sas);
	memset(u, 0, sizeof(*u));
}

static bool valid_account(const char *s, size_t n)
{
	if (n < 3 || n > 24)
		return false;
	for (size_t i = 0; i < n; i++)
		if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= '0' && s[i] <= '9')))
			return false;
	return true;
}

static bool valid_container(const char *s, size_t n)
{
	if (n < 3 || n > 63 || s[0] == '-' || s[n - 1] == '-')
		return false;
	for (size_t i = 0; i < n; i++) {
		bool ok = (s[i] >= 'a' && s[i] <= 'z') ||
			  (s[i] >= '0' && s[i] <= '9') || s[i] == '-';
		if (!ok || (s[i] == '-' && s[i + 1] == '-'))
			return false;
	}
	return true;
}

/* Next '/'-separated segment of [*p, end), skipping empty ones. */
static bool next_segment(const char **p, const char *end, const char **seg,
			 size_t *len)
{
	while (*p < end && **p == '/')
		(*p)++;
	if (*p >= end)
		return false;
	*seg = *p;
	while (*p < end && **p != '/')
		(*p)++;
	*len = (size_t)(*p - *seg);
	return true;
}

int kn_azure_parse_url(const char *url, struct kn_azure_url *out,
		       struct kn_error *err)
{
	struct kn_azure_url u = {0};
	const char *scheme_end = strstr(url, "://"), *host, *host_end, *path,
		   *path_end, *q, *seg, *dot;
	size_t seg_len, host_len;
	bool host_style;
	int rc = 0;

	if (!scheme_end || (strncmp(url, "http://", 7) != 0 &&
			    strncmp(url, "https://", 8) != 0))
		return kn_errorf(err, KN_EINVAL, "url",
				 "store url: must start with https:// or "
				 "http://");
	host = scheme_end + 3;
	host_end = host + strcspn(host, "/?#");
	host_len = (size_t)(host_end - host);
	if (host_len == 0 || memchr(host, '@', host_len))
		return kn_errorf(err, KN_EINVAL, "url",
				 "store url: needs a host (and no user:password@)");
	path = host_end;
	q = strchr(path, '?');
	path_end = q ? q : path + strlen(path);
	if (memchr(path, '#', (size_t)(path_end - path)))
		return kn_errorf(err, KN_EINVAL, "url",
				 "store url: a fragment (#) is not allowed");
	/* ACCOUNT.blob.SUFFIX names the account in the host; anything else
	 * (an IP, localhost, a custom domain) is path style, as Azurite is. */
	dot = memchr(host, '.', host_len);
	host_style = dot && (size_t)(host_end - dot) > 6 &&
		     strncmp(dot, ".blob.", 6) == 0;
	if (host_style) {
		if (!valid_account(host, (size_t)(dot - host))) {
			rc = kn_errorf(err, KN_EINVAL, "url",
				       "store url: account name in the host "
				       "must be 3-24 lowercase letters or "
				       "digits");
			goto out;
		}
		u.account = strndup(host, (size_t)(dot - host));
		u.path_base = kn_xstrdup("");
	} else {
		if (!next_segment(&path, path_end, &seg, &seg_len) ||
		    !valid_account(seg, seg_len)) {
			rc = kn_errorf(err, KN_EINVAL, "url",
				       "store url: path style (%.*s) needs "
				       "/ACCOUNT/CONTAINER with an account of "
				       "3-24 lowercase letters or digits",
				       (int)host_len, host);
			goto out;
		}
		u.account = strndup(seg, seg_len);
		u.path_base = kn_asprintf("/%s", u.account);
	}
	if (!next_segment(&path, path_end, &seg, &seg_len) ||
	    !valid_container(seg, seg_len)) {
		rc = kn_errorf(err, KN_EINVAL, "url",
			       "store url: container must be 3-63 lowercase "
			       "letters, digits or single hyphens");
		goto out;
	}
	u.container = strndup(seg, seg_len);
	{
		struct kn_buf prefix;
		kn_buf_init(&prefix, 4096);
		while (rc == 0 && next_segment(&path, path_end, &seg, &seg_len)) {
			if ((seg_len == 1 && seg[0] == '.') ||
			    (seg_len == 2 && seg[0] == '.' && seg[1] == '.') ||
			    memchr(seg, '%', seg_len))
				rc = kn_errorf(err, KN_EINVAL, "url",
					       "store url: prefix parts may not "
					       "be \".\", \"..\" or "
					       "percent-encoded");
			else if (kn_buf_append(&prefix, seg, seg_len) < 0 ||
				 kn_buf_append(&prefix, "/", 1) < 0)
				rc = kn_errorf(err, KN_EINVAL, "url",
					       "store url: prefix too long");
		}
		u.prefix = kn_xstrdup(prefix.data ? prefix.data : "");
		kn_buf_release(&prefix);
		if (rc < 0)
			goto out;
	}
	u.endpoint = kn_asprintf("%.*s%s", (int)(host_end - url), url,
				 u.path_base);
	if (q && q[1])
		u.sas = kn_xstrdup(q + 1);
	if (!u.account || !u.container)
		abort();
	*out = u;
	memset(&u, 0, sizeof(u));
out:
	kn_azure_url_release(&u);
	return rc;
}

/* ---- connection strings ---- */

void kn_azure_conn_release(struct kn_azure_conn *c)
{
	if (!c)
		return;
	KN_FREE_ALL(c->account_name, c->account_key, c->blob_endpoint, c->sas);
	memset(c, 0, sizeof(*c));
}

int kn_azure_parse_connection_string(const char *s, struct kn_azure_conn *out,
				     struct kn_error *err)
{
	struct kn_azure_conn c = {0};
	char *protocol = NULL, *suffix = NULL;
	const char *p = s;
	int rc = 0, index = 0;

	while (*p) {
		const char *end = p + strcspn(p, ";");
		const char *eq = memchr(p, '=', (size_t)(end - p));
		char **slot = NULL;
		size_t klen;

		index++;
		if (end == p) {
			p++;
			continue;
		}
		if (!eq || eq == p) {
			rc = kn_errorf(err, KN_EINVAL, "connection_string",
				       "connection string: part %d is not "
				       "Key=Value", index);
			goto out;
		}
		klen = (size_t)(eq - p);
#define KEY_IS(k) (klen == strlen(k) && strncasecmp(p, k, klen) == 0)
		if (KEY_IS("AccountName"))
			slot = &c.account_name;
		else if (KEY_IS("AccountKey"))
			slot = &c.account_key;
		else if (KEY_IS("BlobEndpoint"))
			slot = &c.blob_endpoint;
		else if (KEY_IS("SharedAccessSignature"))
			slot = &c.sas;
		else if (KEY_IS("DefaultEndpointsProtocol"))
			slot = &protocol;
		else if (KEY_IS("EndpointSuffix"))
			slot = &suffix;
#undef KEY_IS
		if (slot) {
			if (*slot) {
				rc = kn_errorf(err, KN_EINVAL,
					       "connection_string",
					       "connection string: %.*s given "
					       "twice", (int)klen, p);
				goto out;
			}
			*slot = strndup(eq + 1, (size_t)(end - eq - 1));
			if (!*slot)
				abort();
		}
		p = *end ? end + 1 : end;
	}
	if (!c.account_key && !c.sas) {
		rc = kn_errorf(err, KN_EINVAL, "connection_string",
			       "connection string: needs AccountKey or "
			       "SharedAccessSignature");
		goto out;
	}
	if (c.account_key && !c.account_name) {
		rc = kn_errorf(err, KN_EINVAL, "connection_string",
			       "connection string: AccountKey needs "
			       "AccountName");
		goto out;
	}
	if (!c.blob_endpoint && c.account_name)
		c.blob_endpoint = kn_asprintf(
			"%s://%s.blob.%s", protocol ? protocol : "https",
			c.account_name, suffix ? suffix : "core.windows.net");
	while (c.blob_endpoint && *c.blob_endpoint &&
	       c.blob_endpoint[strlen(c.blob_endpoint) - 1] == '/')
		c.blob_endpoint[strlen(c.blob_endpoint) - 1] = '\0';
	*out = c;
	memset(&c, 0, sizeof(c));
out:
	KN_FREE_ALL(protocol, suffix);
	kn_azure_conn_release(&c);
	return rc;
}

/* ---- Shared Key ---- */

static int kv_cmp(const void *a, const void *b)
{
	const struct kn_kv *x = a, *y = b;
	return strcmp(x->name, y->name);
}

char *kn_azure_string_to_sign(const struct kn_azure_sign_input *in)
{
	struct kn_kv *h = kn_xcalloc(in->n_headers + 1, sizeof(*h));
	struct kn_kv *q = kn_xcalloc(in->n_query + 1, sizeof(*q));
	struct kn_buf b;
	char len[32] = "";

	if (in->content_length > 0)
		snprintf(len, sizeof(len), "%lld", (long long)in->content_length);
	kn_buf_init(&b, SIZE_MAX);
#define OR_EMPTY(s) ((s) ? (s) : "")
	kn_buf_printf(&b, "%s\n\n\n%s\n%s\n%s\n\n\n%s\n%s\n\n%s\n", in->method,
		      len, OR_EMPTY(in->content_md5),
		      OR_EMPTY(in->content_type), OR_EMPTY(in->if_match),
		      OR_EMPTY(in->if_none_match), OR_EMPTY(in->range));
	/* Sort by header name only: sorting "name:value" lines would put
	 * x-ms-range-get-content-md5 before x-ms-range, and Azure says 403. */
	if (in->n_headers)
		memcpy(h, in->headers, in->n_headers * sizeof(*h));
	qsort(h, in->n_headers, sizeof(*h), kv_cmp);
	for (size_t i = 0; i < in->n_headers; i++) {
		const char *v = h[i].value;
		while (*v == ' ' || *v == '\t')
			v++;
		kn_buf_printf(&b, "%s:%s\n", h[i].name, v);
	}
	kn_buf_printf(&b, "/%s%s", in->account, in->path);
	if (in->n_query)
		memcpy(q, in->query, in->n_query * sizeof(*q));
	qsort(q, in->n_query, sizeof(*q), kv_cmp);
	for (size_t i = 0; i < in->n_query; i++)
		kn_buf_printf(&b, "\n%s:%s", q[i].name, OR_EMPTY(q[i].value));
#undef OR_EMPTY
	KN_FREE_ALL(h, q);
	return b.data;
}

int kn_azure_sign(const unsigned char *key, size_t key_len, const char *text,
		  char *out, size_t out_len)
{
	unsigned char mac[EVP_MAX_MD_SIZE];
	unsigned int mac_len = 0;

	if (out_len < 45 ||
	    !HMAC(EVP_sha256(), key, (int)key_len, (const unsigned char *)text,
		  strlen(text), mac, &mac_len))
		return -EINVAL;
	EVP_EncodeBlock((unsigned char *)out, mac, (int)mac_len);
	return 0;
}

/* ---- List Blobs XML ---- */

static const char *find(const char *p, const char *end, const char *needle)
{
	return memmem(p, (size_t)(end - p), needle, strlen(needle));
}

/* XML text with the five entities and numeric references decoded. */
static int xml_text(const char *p, const char *end, char **out)
{
	char *s = kn_xmalloc((size_t)(end - p) * 4 + 1), *o = s;

	while (p < end) {
		if (*p != '&') {
			*o++ = *p++;
			continue;
		}
		const char *semi = memchr(p, ';', (size_t)(end - p));
		size_t n = semi ? (size_t)(semi - p) + 1 : 0;
		if (n == 5 && memcmp(p, "&amp;", 5) == 0)
			*o++ = '&';
		else if (n == 4 && memcmp(p, "&lt;", 4) == 0)
			*o++ = '<';
		else if (n == 4 && memcmp(p, "&gt;", 4) == 0)
			*o++ = '>';
		else if (n == 6 && memcmp(p, "&quot;", 6) == 0)
			*o++ = '"';
		else if (n == 6 && memcmp(p, "&apos;", 6) == 0)
			*o++ = '\'';
		else if (n >= 4 && n <= 10 && p[1] == '#') {
			char num[16], *numend;
			bool hexnum = p[2] == 'x';
			unsigned long cp;
			memcpy(num, p + 2 + hexnum, n - 3 - hexnum);
			num[n - 3 - hexnum] = '\0';
			cp = strtoul(num, &numend, hexnum ? 16 : 10);
			if (*numend || !num[0] || cp == 0 || cp > 0x10FFFF)
				goto bad;
			/* UTF-8 */
			if (cp < 0x80) {
				*o++ = (char)cp;
			} else if (cp < 0x800) {
				*o++ = (char)(0xC0 | (cp >> 6));
				*o++ = (char)(0x80 | (cp & 0x3F));
			} else if (cp < 0x10000) {
				*o++ = (char)(0xE0 | (cp >> 12));
				*o++ = (char)(0x80 | ((cp >> 6) & 0x3F));
				*o++ = (char)(0x80 | (cp & 0x3F));
			} else {
				*o++ = (char)(0xF0 | (cp >> 18));
				*o++ = (char)(0x80 | ((cp >> 12) & 0x3F));
				*o++ = (char)(0x80 | ((cp >> 6) & 0x3F));
				*o++ = (char)(0x80 | (cp & 0x3F));
			}
		} else {
			goto bad;
		}
		p += n;
	}
	*o = '\0';
	*out = s;
	return 0;
bad:
	free(s);
	return -EINVAL;
}

/* Text of the first <tag>...</tag> inside [p, end); -ENOENT if none. */
static int element(const char *p, const char *end, const char *tag,
		   char **out)
{
	char open[64], close[64];
	const char *a, *b;

	snprintf(open, sizeof(open), "<%s>", tag);
	snprintf(close, sizeof(close), "</%s>", tag);
	a = find(p, end, open);
	if (!a)
		return -ENOENT;
	a += strlen(open);
	b = find(a, end, close);
	if (!b)
		return -EINVAL;
	return xml_text(a, b, out);
}

int kn_azure_parse_list(const char *xml, size_t len, const char *strip_prefix,
			struct kn_blob_list *out, char **next_marker,
			struct kn_error *err)
{
	const char *p = xml, *end = xml + len, *b;
	size_t plen = strlen(strip_prefix);
	char *marker = NULL;
	int rc;

	if (!find(xml, end, "<EnumerationResults"))
		return kn_errorf(err, KN_EIO, NULL,
				 "list blobs: the reply is not an "
				 "EnumerationResults document");
	while ((b = find(p, end, "<Blob>"))) {
		const char *e = find(b, end, "</Blob>");
		char *name = NULL, *size = NULL, *num_end;
		long long n;

		if (!e)
			return kn_errorf(err, KN_EIO, NULL,
					 "list blobs: unterminated <Blob> at "
					 "byte %zu", (size_t)(b - xml));
		rc = element(b, e, "Name", &name);
		if (rc == 0)
			rc = element(b, e, "Content-Length", &size);
		if (rc < 0) {
			free(name);
			return kn_errorf(err, KN_EIO, NULL,
					 "list blobs: <Blob> at byte %zu lacks "
					 "a valid Name or Content-Length",
					 (size_t)(b - xml));
		}
		errno = 0;
		n = strtoll(size, &num_end, 10);
		if (errno || *num_end || !size[0] || n < 0) {
			KN_FREE_ALL(name, size);
			return kn_errorf(err, KN_EIO, NULL,
					 "list blobs: bad Content-Length at "
					 "byte %zu", (size_t)(b - xml));
		}
		if (strncmp(name, strip_prefix, plen) == 0 && name[plen])
			kn_blob_list_add(out, name + plen, n);
		KN_FREE_ALL(name, size);
		p = e + strlen("</Blob>");
	}
	rc = element(xml, end, "NextMarker", &marker);
	if (rc == -EINVAL)
		return kn_errorf(err, KN_EIO, NULL,
				 "list blobs: bad NextMarker");
	if (marker && !marker[0]) {
		free(marker);
		marker = NULL;
	}
	*next_marker = marker;
	return 0;
}
