/*
 * A Kubernetes API client over libcurl: GET, POST and DELETE of JSON,
 * plain text (pod logs), and watches read as newline-delimited events
 * while they stream.
 *
 * Blocking on purpose: `kiln kube-scheduler` is a loop of list, watch,
 * decide, bind with nothing else to serve, so an event loop would add
 * only machinery; the server's executor calls it from its own thread. Each request uses a fresh easy handle (connections are
 * few: one watch at a time, a list now and then, a bind per pod).
 * A bearer token given as a file is read before every request because
 * projected service-account tokens are rotated by the kubelet.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <curl/curl.h>

#include "kube/internal.h"
#include "kube/kube.h"
#include "httpc/httpc.h"

#define TOKEN_MAX_BYTES (64 * 1024)
/* A request that is not a watch gets this long, connecting included. */
#define REQUEST_TIMEOUT_S 60L
#define CONNECT_TIMEOUT_S 10L

struct kn_kube_client {
	struct kn_kube_auth auth;
	volatile const int *stop;
};

static char *dup_or_null(const char *s)
{
	return s ? kn_xstrdup(s) : NULL;
}

void kn_kube_auth_copy(struct kn_kube_auth *dst,
		       const struct kn_kube_auth *src)
{
	dst->server = dup_or_null(src->server);
	dst->token = dup_or_null(src->token);
	dst->token_file = dup_or_null(src->token_file);
	dst->ca_file = dup_or_null(src->ca_file);
	dst->ca_pem = dup_or_null(src->ca_pem);
	dst->cert_pem = dup_or_null(src->cert_pem);
	dst->key_pem = dup_or_null(src->key_pem);
	dst->cert_file = dup_or_null(src->cert_file);
	dst->key_file = dup_or_null(src->key_file);
	dst->insecure = src->insecure;
}

const struct kn_kube_auth *kube_client_auth(const struct kn_kube_client *c)
{
	return &c->auth;
}

int kn_kube_auth_token(const struct kn_kube_auth *auth, char **out,
		       struct kn_error *err)
{
	char *token = NULL;
	size_t len;
	int rc;

	*out = NULL;
	if (auth->token_file) {
		rc = kn_read_file(auth->token_file, TOKEN_MAX_BYTES, &token,
				  &len);
		if (rc < 0)
			return kn_errorf(err, KN_EIO, NULL, "%s: %s",
					 auth->token_file, strerror(-rc));
		while (len && (token[len - 1] == '\n' || token[len - 1] == '\r'))
			token[--len] = '\0';
	} else if (auth->token) {
		token = kn_xstrdup(auth->token);
	}
	*out = token;
	return 0;
}

int kn_kube_client_new(const struct kn_kube_auth *auth,
		       struct kn_kube_client **out, struct kn_error *err)
{
	struct kn_kube_client *c;

	if (!auth->server)
		return kn_errorf(err, KN_EINVAL, "server",
				 "server: no API server URL");
	c = kn_xcalloc(1, sizeof(*c));
	kn_kube_auth_copy(&c->auth, auth);
	*out = c;
	return 0;
}

void kn_kube_client_free(struct kn_kube_client *c)
{
	if (!c)
		return;
	kn_kube_auth_release(&c->auth);
	free(c);
}

void kn_kube_client_stop_on(struct kn_kube_client *c,
			    volatile const int *flag)
{
	c->stop = flag;
}

struct transfer {
	struct kn_kube_client *client;
	struct kn_buf body;
	/* Watches: events are handed out line by line. */
	kn_kube_event_fn fn;
	void *arg;
	int fn_rc;
	bool bad_event;
	CURL *curl;
};

static int progress(void *p, curl_off_t dt, curl_off_t dn, curl_off_t ut,
		    curl_off_t un)
{
	struct transfer *t = p;

	return t->client->stop && *t->client->stop;
}

/* Hand each complete line of the body to fn, keeping the rest. */
static int deliver_lines(struct transfer *t)
{
	char *start = t->body.data, *nl;
	size_t used;

	while ((nl = memchr(start, '\n', t->body.len - (size_t)(start -
							       t->body.data)))) {
		json_t *ev;
		*nl = '\0';
		ev = *start ? json_loads(start, 0, NULL) : NULL;
		if (*start && (!json_is_object(ev) ||
			       !json_is_string(json_object_get(ev, "type")))) {
			json_decref(ev);
			t->bad_event = true;
			return -1;
		}
		if (ev) {
			t->fn_rc = t->fn(
				t->arg,
				json_string_value(json_object_get(ev, "type")),
				json_object_get(ev, "object"));
			json_decref(ev);
			if (t->fn_rc)
				return -1;
		}
		start = nl + 1;
	}
	used = (size_t)(start - t->body.data);
	memmove(t->body.data, start, t->body.len - used + 1);
	t->body.len -= used;
	return 0;
}

static size_t on_data(char *data, size_t size, size_t n, void *p)
{
	struct transfer *t = p;
	long status = 0;

	if (kn_buf_append(&t->body, data, size * n) < 0)
		return 0;
	if (t->fn) {
		curl_easy_getinfo(t->curl, CURLINFO_RESPONSE_CODE, &status);
		if (status == 200 && deliver_lines(t) < 0)
			return 0;
	}
	return size * n;
}

/* A PEM held in memory as curl's option opt (curl keeps a copy). */
static void set_pem(CURL *curl, CURLoption opt, char *pem)
{
	struct curl_blob blob = {pem, strlen(pem), CURL_BLOB_COPY};

	curl_easy_setopt(curl, opt, &blob);
}

/* The cluster's CA and the client's certificate, from files or PEMs. */
static void set_tls(CURL *curl, const struct kn_kube_auth *a)
{
	if (a->insecure) {
		curl_easy_setopt(curl, CURLOPT_SSL_VERIFYPEER, 0L);
		curl_easy_setopt(curl, CURLOPT_SSL_VERIFYHOST, 0L);
	}
	if (a->ca_file)
		curl_easy_setopt(curl, CURLOPT_CAINFO, a->ca_file);
	if (a->ca_pem)
		set_pem(curl, CURLOPT_CAINFO_BLOB, a->ca_pem);
	if (a->cert_file) {
		curl_easy_setopt(curl, CURLOPT_SSLCERT, a->cert_file);
		curl_easy_setopt(curl, CURLOPT_SSLKEY, a->key_file);
	}
	if (a->cert_pem) {
		set_pem(curl, CURLOPT_SSLCERT_BLOB, a->cert_pem);
		curl_easy_setopt(curl, CURLOPT_SSLCERTTYPE, "PEM");
		set_pem(curl, CURLOPT_SSLKEY_BLOB, a->key_pem);
		curl_easy_setopt(curl, CURLOPT_SSLKEYTYPE, "PEM");
	}
}

/* Run one request; the body (watch: what is left of it) in t->body. */
static int perform(struct kn_kube_client *c, const char *method,
		   const char *path, const char *payload,
		   const char *content_type, struct transfer *t, long *status,
		   struct kn_error *err)
{
	struct curl_slist *headers = NULL;
	char *url = kn_asprintf("%s%s", c->auth.server, path);
	char *token = NULL, *auth_header = NULL;
	CURLcode code;
	int rc = 0;
	CURL *curl = curl_easy_init();

	if (!curl)
		abort();
	t->client = c;
	t->curl = curl;
	rc = kn_kube_auth_token(&c->auth, &token, err);
	if (rc < 0)
		goto out;
	if (token) {
		auth_header = kn_asprintf("Authorization: Bearer %s", token);
		headers = curl_slist_append(headers, auth_header);
	}
	headers = curl_slist_append(headers, "Accept: application/json, */*");
	if (payload) {
		char *ct = kn_asprintf("Content-Type: %s", content_type);
		headers = curl_slist_append(headers, ct);
		free(ct);
	}
	kn_httpc_request(curl, CONNECT_TIMEOUT_S * 1000L, method, url, headers,
			 payload);
	curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, on_data);
	curl_easy_setopt(curl, CURLOPT_WRITEDATA, t);
	kn_httpc_on_progress(curl, progress, t);
	curl_easy_setopt(curl, CURLOPT_TCP_KEEPALIVE, 1L);
	if (!t->fn)
		curl_easy_setopt(curl, CURLOPT_TIMEOUT, REQUEST_TIMEOUT_S);
	set_tls(curl, &c->auth);
	code = curl_easy_perform(curl);
	curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, status);
	if (code == CURLE_ABORTED_BY_CALLBACK) {
		kn_errorf(err, KN_EUNAVAIL, NULL, "%s %s: stopped", method,
			  path);
		rc = -EINTR;
	} else if (code == CURLE_WRITE_ERROR && t->fn_rc) {
		rc = t->fn_rc;
	} else if (code == CURLE_WRITE_ERROR && t->bad_event) {
		rc = kn_errorf(err, KN_EINVAL, NULL,
			       "%s %s: a watch event is not a JSON object "
			       "with a type", method, path);
	} else if (code != CURLE_OK) {
		rc = kn_errorf(err, KN_EIO, NULL, "%s %s%s: %s", method,
			       c->auth.server, path,
			       code == CURLE_WRITE_ERROR ?
				       "answer too large" :
				       curl_easy_strerror(code));
	}
out:
	curl_slist_free_all(headers);
	curl_easy_cleanup(curl);
	if (token)
		memset(token, 0, strlen(token));
	if (auth_header)
		memset(auth_header, 0, strlen(auth_header));
	KN_FREE_ALL(token, auth_header, url);
	return rc;
}

static int request(struct kn_kube_client *c, const char *method,
		   const char *path, const char *payload,
		   const char *content_type, long *status, json_t **body,
		   struct kn_error *err)
{
	struct transfer t = {0};
	json_error_t jerr;
	json_t *answer;
	int rc;

	kn_buf_init(&t.body, KN_KUBE_MAX_BODY);
	rc = perform(c, method, path, payload, content_type, &t, status, err);
	if (rc < 0)
		goto out;
	answer = json_loadb(t.body.data ? t.body.data : "", t.body.len, 0,
			    &jerr);
	if (!answer) {
		rc = kn_errorf(err, KN_EINVAL, NULL,
			       "%s %s: HTTP %ld, answer is not JSON: %s",
			       method, path, *status, jerr.text);
		goto out;
	}
	*body = answer;
out:
	kn_buf_release(&t.body);
	return rc;
}

int kn_kube_get(struct kn_kube_client *c, const char *path, long *status,
		json_t **body, struct kn_error *err)
{
	return request(c, "GET", path, NULL, NULL, status, body, err);
}

/* A request with body as its compact JSON payload. */
static int request_json(struct kn_kube_client *c, const char *method,
			const char *path, const char *content_type,
			json_t *body, long *status, json_t **answer,
			struct kn_error *err)
{
	char *payload = json_dumps(body, JSON_COMPACT);
	int rc;

	if (!payload)
		abort();
	rc = request(c, method, path, payload, content_type, status, answer,
		     err);
	free(payload);
	return rc;
}

int kn_kube_post(struct kn_kube_client *c, const char *path, json_t *body,
		 long *status, json_t **answer, struct kn_error *err)
{
	return request_json(c, "POST", path, "application/json", body, status,
			    answer, err);
}

int kn_kube_delete(struct kn_kube_client *c, const char *path, json_t *body,
		   long *status, json_t **answer, struct kn_error *err)
{
	return request_json(c, "DELETE", path, "application/json", body,
			    status, answer, err);
}

int kn_kube_put(struct kn_kube_client *c, const char *path, json_t *body,
		long *status, json_t **answer, struct kn_error *err)
{
	return request_json(c, "PUT", path, "application/json", body, status,
			    answer, err);
}

int kn_kube_patch(struct kn_kube_client *c, const char *path,
		  const char *content_type, json_t *body, long *status,
		  json_t **answer, struct kn_error *err)
{
	return request_json(c, "PATCH", path, content_type, body, status,
			    answer, err);
}

int kn_kube_get_text(struct kn_kube_client *c, const char *path,
		     size_t max, long *status, char **text, size_t *len,
		     struct kn_error *err)
{
	struct transfer t = {0};
	int rc;

	kn_buf_init(&t.body, max);
	rc = perform(c, "GET", path, NULL, NULL, &t, status, err);
	if (rc == 0) {
		*len = t.body.len;
		*text = kn_xmalloc(t.body.len + 1);
		if (t.body.len)
			memcpy(*text, t.body.data, t.body.len);
		(*text)[t.body.len] = '\0';
	}
	kn_buf_release(&t.body);
	return rc;
}

int kn_kube_watch(struct kn_kube_client *c, const char *path,
		  kn_kube_event_fn fn, void *arg, long *status,
		  struct kn_error *err)
{
	struct transfer t = {.fn = fn, .arg = arg};
	int rc;

	kn_buf_init(&t.body, KN_KUBE_MAX_EVENT);
	rc = perform(c, "GET", path, NULL, NULL, &t, status, err);
	kn_buf_release(&t.body);
	return rc;
}
