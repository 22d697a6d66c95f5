/*
 * Outgoing HTTP through libcurl: the settings every request kiln makes
 * shares, whoever makes it (the CLI, the blob store, the Kubernetes and
 * Azure clients).
 */
#ifndef KN_HTTPC_H
#define KN_HTTPC_H

#include <curl/curl.h>
#include <stdbool.h>
#include <stddef.h>

/*
 * http and https only; no redirect followed, so a credential set on a
 * request never reaches a host its caller did not name; no signals (the
 * callers run on threads); a connect timeout; kiln's user agent. Call
 * after curl_easy_reset, before the request's own options.
 */
void kn_httpc_defaults(CURL *h, long connect_timeout_ms);

/*
 * kn_httpc_defaults, then the request: method to url with headers and
 * body (NULL for none), each of which must outlive the transfer.
 */
void kn_httpc_request(CURL *h, long connect_timeout_ms, const char *method,
		      const char *url, struct curl_slist *headers,
		      const char *body);

/*
 * Call fn with arg as the transfer progresses (CURLOPT_XFERINFOFUNCTION,
 * which libcurl only calls with CURLOPT_NOPROGRESS off); a nonzero
 * return aborts the transfer.
 */
void kn_httpc_on_progress(CURL *h, curl_xferinfo_callback fn, void *arg);

/*
 * A CURLOPT_WRITEFUNCTION appending to the struct kn_buf given as
 * CURLOPT_WRITEDATA; past the buffer's cap it fails the transfer
 * (CURLE_WRITE_ERROR) rather than hold an unbounded answer.
 */
size_t kn_httpc_collect(char *data, size_t size, size_t n, void *buf);

/*
 * For a CURLOPT_HEADERFUNCTION: when the header line (len bytes, not
 * NUL-terminated) is the header called name (any case), its value
 * without surrounding blanks and line end in *v, *vlen, and true.
 */
bool kn_httpc_header(const char *line, size_t len, const char *name,
		     const char **v, size_t *vlen);

#endif
