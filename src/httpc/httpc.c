/* The settings every outgoing request shares. */
#include "httpc/httpc.h"

#include "base/base.h"

#include <string.h>
#include <strings.h>

void kn_httpc_defaults(CURL *h, long connect_timeout_ms)
{
	curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
	curl_easy_setopt(h, CURLOPT_FOLLOWLOCATION, 0L);
	curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, connect_timeout_ms);
	curl_easy_setopt(h, CURLOPT_USERAGENT, "kiln/" KN_VERSION);
}

void kn_httpc_request(CURL *h, long connect_timeout_ms, const char *method,
		      const char *url, struct curl_slist *headers,
		      const char *body)
{
	kn_httpc_defaults(h, connect_timeout_ms);
	curl_easy_setopt(h, CURLOPT_URL, url);
	curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, method);
	curl_easy_setopt(h, CURLOPT_HTTPHEADER, headers);
	if (body)
		curl_easy_setopt(h, CURLOPT_POSTFIELDS, body);
}

void kn_httpc_on_progress(CURL *h, curl_xferinfo_callback fn, void *arg)
{
	curl_easy_setopt(h, CURLOPT_NOPROGRESS, 0L);
	curl_easy_setopt(h, CURLOPT_XFERINFOFUNCTION, fn);
	curl_easy_setopt(h, CURLOPT_XFERINFODATA, arg);
}

size_t kn_httpc_collect(char *data, size_t size, size_t n, void *buf)
{
	return kn_buf_append(buf, data, size * n) < 0 ? 0 : size * n;
}

bool kn_httpc_header(const char *line, size_t len, const char *name,
		     const char **v, size_t *vlen)
{
	size_t nlen = strlen(name);

	if (len <= nlen || strncasecmp(line, name, nlen) != 0 ||
	    line[nlen] != ':')
		return false;
	*v = line + nlen + 1;
	*vlen = len - nlen - 1;
	while (*vlen && (**v == ' ' || **v == '\t'))
		(*v)++, (*vlen)--;
	while (*vlen && ((*v)[*vlen - 1] == '\r' || (*v)[*vlen - 1] == '\n' ||
			 (*v)[*vlen - 1] == ' ' || (*v)[*vlen - 1] == '\t'))
		(*vlen)--;
	return true;
}
