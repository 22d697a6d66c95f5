/*
 * The scale set client over libcurl. Blocking: the pool's worker thread
 * calls it, one call at a time per client, so the token cache needs no
 * lock. Throttling (429) and server errors (5xx) are retried with
 * backoff, waiting what Retry-After says when Azure says it; long
 * operations are followed through Azure-AsyncOperation (or Location when
 * that is all there is) until they end.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include <curl/curl.h>

#include "vmss/vmss.h"
#include "httpc/httpc.h"

#define ATTEMPTS 6
#define BACKOFF_MAX_MS 30000
/* Poll a long operation this often when Azure does not say. */
#define POLL_DEFAULT_MS 5000
/* ... and no more often than this, whatever it says. */
#define POLL_MIN_MS 500
#define OPERATION_MAX_MS (60LL * 60 * 1000)
/* A token is renewed this long before it expires. */
#define TOKEN_MARGIN_MS (5LL * 60 * 1000)
#define BODY_MAX (16u << 20)

struct kn_vmss_client {
	char *id, *arm_url, *imds_url, *login_url;
	enum kn_vmss_identity identity;
	char *client_id, *tenant_id, *client_secret;
	volatile const int *stop;
	char *token;
	int64_t token_expires_ms;
};

struct reply {
	long status;
	struct kn_buf body;
	char async_op[2048];
	char location[2048];
	char retry_after[32];
};

static char *dup_or_null(const char *s)
{
	return s ? kn_xstrdup(s) : NULL;
}

static void free_wiped(char *s)
{
	if (s)
		explicit_bzero(s, strlen(s));
	free(s);
}

static void curl_init_once(void)
{
	curl_global_init(CURL_GLOBAL_DEFAULT);
}

int kn_vmss_client_new(const struct kn_vmss_config *cfg,
		       volatile const int *stop, struct kn_vmss_client **out,
		       struct kn_error *err)
{
	static pthread_once_t once = PTHREAD_ONCE_INIT;
	struct kn_vmss_client *c;
	int rc = kn_vmss_check_id(cfg->id ? cfg->id : "", "vmss", err);

	if (rc < 0)
		return rc;
	if (cfg->identity == KN_VMSS_SERVICE_PRINCIPAL &&
	    (!cfg->tenant_id || !cfg->client_id || !cfg->client_secret))
		return kn_errorf(err, KN_EINVAL, "identity",
				 "a service principal needs a tenant id, a "
				 "client id and a client secret");
	c = kn_xcalloc(1, sizeof(*c));
	c->id = kn_xstrdup(cfg->id);
	c->arm_url = kn_xstrdup(cfg->arm_url ? cfg->arm_url : KN_VMSS_ARM_URL);
	c->imds_url =
		kn_xstrdup(cfg->imds_url ? cfg->imds_url : KN_VMSS_IMDS_URL);
	c->login_url =
		kn_xstrdup(cfg->login_url ? cfg->login_url : KN_VMSS_LOGIN_URL);
	c->identity = cfg->identity;
	c->client_id = dup_or_null(cfg->client_id);
	c->tenant_id = dup_or_null(cfg->tenant_id);
	c->client_secret = dup_or_null(cfg->client_secret);
	c->stop = stop;
	/* Before any worker thread uses curl. */
	pthread_once(&once, curl_init_once);
	*out = c;
	return 0;
}

void kn_vmss_client_free(struct kn_vmss_client *c)
{
	if (!c)
		return;
	KN_FREE_ALL(c->id, c->arm_url, c->imds_url, c->login_url, c->client_id,
		    c->tenant_id);
	free_wiped(c->client_secret);
	free_wiped(c->token);
	free(c);
}

static bool stopped(const struct kn_vmss_client *c)
{
	return c->stop && *c->stop;
}

/* Sleep ms in short steps; false when stopped meanwhile. */
static bool nap(const struct kn_vmss_client *c, int64_t ms)
{
	while (ms > 0 && !stopped(c)) {
		int64_t step = ms < 50 ? ms : 50;
		struct timespec ts = {0, (long)step * 1000000L};

		nanosleep(&ts, NULL);
		ms -= step;
	}
	return !stopped(c);
}

static int on_progress(void *arg, curl_off_t dt, curl_off_t dn, curl_off_t ut,
		       curl_off_t un)
{
	(void)dt, (void)dn, (void)ut, (void)un;
	return stopped(arg);
}

/* Keep header name's value (trimmed) in out when line is that header. */
static void header_value(const char *line, size_t len, const char *name,
			 char *out, size_t out_len)
{
	const char *v;
	size_t vlen;

	if (!kn_httpc_header(line, len, name, &v, &vlen))
		return;
	if (vlen >= out_len)
		return; /* too long to be one of Azure's: ignored */
	memcpy(out, v, vlen);
	out[vlen] = '\0';
}

static size_t on_header(char *data, size_t size, size_t n, void *arg)
{
	struct reply *r = arg;
	size_t len = size * n;

	/* A new status line (after a 100 Continue): a new set. */
	if (len > 5 && !strncmp(data, "HTTP/", 5)) {
		r->async_op[0] = r->location[0] = r->retry_after[0] = '\0';
		return len;
	}
	header_value(data, len, "Azure-AsyncOperation", r->async_op,
		     sizeof(r->async_op));
	header_value(data, len, "Location", r->location, sizeof(r->location));
	header_value(data, len, "Retry-After", r->retry_after,
		     sizeof(r->retry_after));
	return len;
}

static void reply_reset(struct reply *r)
{
	kn_buf_release(&r->body);
	memset(r, 0, sizeof(*r));
	kn_buf_init(&r->body, BODY_MAX);
}

/* One request; -1 with err for a transport failure (*transient says if
   trying again may help). */
static int perform(struct kn_vmss_client *c, const char *method,
		   const char *url, struct curl_slist *headers,
		   const char *body, struct reply *r, bool *transient,
		   struct kn_error *err)
{
	CURL *h = curl_easy_init();
	CURLcode cc;

	if (!h)
		abort();
	reply_reset(r);
	kn_httpc_request(h, 10000, method, url, headers, body);
	curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, kn_httpc_collect);
	curl_easy_setopt(h, CURLOPT_WRITEDATA, &r->body);
	curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, on_header);
	curl_easy_setopt(h, CURLOPT_HEADERDATA, r);
	kn_httpc_on_progress(h, on_progress, c);
	curl_easy_setopt(h, CURLOPT_TIMEOUT, 60L);
	cc = curl_easy_perform(h);
	curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &r->status);
	curl_easy_cleanup(h);
	if (cc == CURLE_OK)
		return 0;
	*transient = cc == CURLE_COULDNT_CONNECT ||
		     cc == CURLE_OPERATION_TIMEDOUT || cc == CURLE_SEND_ERROR ||
		     cc == CURLE_RECV_ERROR || cc == CURLE_GOT_NOTHING ||
		     cc == CURLE_COULDNT_RESOLVE_HOST;
	return kn_errorf(err, KN_EUNAVAIL, NULL, "%s",
			 stopped(c) ? "stopped" : curl_easy_strerror(cc));
}

/*
 * A request with retries: transport failures, 429 and 5xx are tried
 * again, ATTEMPTS in all. 0 with the last reply (any status) in r.
 */
static int call(struct kn_vmss_client *c, const char *method, const char *url,
		struct curl_slist *headers, const char *body, struct reply *r,
		struct kn_error *err)
{
	for (int attempt = 1;; attempt++) {
		bool transient = false;
		int64_t wait;
		int rc = perform(c, method, url, headers, body, r, &transient,
				 err);

		if (rc == 0 && r->status != 429 && r->status < 500)
			return 0;
		if (attempt == ATTEMPTS || (rc < 0 && !transient) || stopped(c))
			return rc;
		wait = kn_vmss_retry_after_ms(r->retry_after);
		if (wait < 0) {
			wait = 1000LL << (attempt - 1);
			if (wait > BACKOFF_MAX_MS)
				wait = BACKOFF_MAX_MS;
		}
		kn_log(KN_LOG_WARN, "azure: %s %.200s: %s; again in %lld ms",
		       method, url,
		       rc < 0 ? err->message
			      : r->status == 429 ? "throttled (429)"
						 : "server error",
		       (long long)wait);
		if (!nap(c, wait))
			return kn_errorf(err, KN_EUNAVAIL, NULL, "stopped");
	}
}

/* "what: HTTP 403 Code: message" from an answer that is not a success. */
static int answer_error(const struct reply *r, const char *what,
			struct kn_error *err)
{
	char text[640];

	kn_vmss_error_text(r->status, r->body.data, r->body.len, text,
			   sizeof(text));
	return kn_errorf(err,
			 r->status == 401   ? KN_EAUTH
			 : r->status == 403 ? KN_EPERM
			 : r->status == 404 ? KN_ENOTFOUND
					    : KN_EIO,
			 NULL, "%s: %s", what, text);
}

static int fetch_token(struct kn_vmss_client *c, struct kn_error *err)
{
	struct curl_slist *headers = NULL;
	struct reply r = {0};
	char *url, *body = NULL, *token = NULL;
	const char *what;
	int64_t expires_in = 0;
	int rc;

	if (c->identity == KN_VMSS_MANAGED_IDENTITY) {
		url = kn_vmss_imds_token_url(c->imds_url, c->client_id);
		headers = curl_slist_append(headers, "Metadata: true");
		what = "managed identity token (IMDS)";
	} else {
		url = kn_vmss_login_token_url(c->login_url, c->tenant_id);
		body = kn_vmss_login_token_body(c->client_id, c->client_secret);
		headers = curl_slist_append(
			headers,
			"Content-Type: application/x-www-form-urlencoded");
		what = "service principal token";
	}
	kn_buf_init(&r.body, BODY_MAX);
	rc = call(c, body ? "POST" : "GET", url, headers, body, &r, err);
	if (rc < 0) {
		char why[sizeof(err->message)];

		kn_strlcpy(why, err->message, sizeof(why));
		rc = kn_errorf(err, KN_EUNAVAIL, NULL, "%s: %s", what, why);
	} else if (r.status != 200) {
		rc = answer_error(&r, what, err);
	} else {
		rc = kn_vmss_parse_token(r.body.data, r.body.len, &token,
					 &expires_in, err);
	}
	if (rc == 0) {
		free_wiped(c->token);
		c->token = token;
		c->token_expires_ms = kn_now_ms() + expires_in * 1000;
	}
	if (r.body.data)
		explicit_bzero(r.body.data, r.body.len);
	kn_buf_release(&r.body);
	free_wiped(body);
	free(url);
	curl_slist_free_all(headers);
	return rc;
}

/* An ARM request with the token: 0 with the answer in r (any status). */
static int arm(struct kn_vmss_client *c, const char *method, const char *url,
	       const char *body, struct reply *r, const char *what,
	       struct kn_error *err)
{
	struct curl_slist *headers = NULL;
	char *auth;
	int rc = 0;

	/* The token goes to ARM only, whatever a header points at. */
	if (strncmp(url, c->arm_url, strlen(c->arm_url)) != 0 ||
	    (url[strlen(c->arm_url)] != '/' && url[strlen(c->arm_url)] != '?'))
		return kn_errorf(err, KN_EIO, NULL,
				 "%s: Azure pointed at %.200s, outside %s",
				 what, url, c->arm_url);
	if (!c->token || kn_now_ms() >= c->token_expires_ms - TOKEN_MARGIN_MS)
		rc = fetch_token(c, err);
	if (rc < 0)
		return rc;
	auth = kn_asprintf("Authorization: Bearer %s", c->token);
	headers = curl_slist_append(headers, auth);
	headers = curl_slist_append(headers, "Accept: application/json");
	if (body)
		headers = curl_slist_append(headers,
					    "Content-Type: application/json");
	rc = call(c, method, url, headers, body, r, err);
	if (rc < 0) {
		char why[sizeof(err->message)];

		kn_strlcpy(why, err->message, sizeof(why));
		rc = kn_errorf(err, KN_EUNAVAIL, NULL, "%s: %s", what, why);
	}
	curl_slist_free_all(headers);
	free_wiped(auth);
	return rc;
}

/* Follow a long operation that r (its first answer) started. */
static int wait_operation(struct kn_vmss_client *c, struct reply *r,
			  const char *what, struct kn_error *err)
{
	bool async = r->async_op[0] != '\0';
	char *url;
	int64_t deadline = kn_now_ms() + OPERATION_MAX_MS;
	int rc = 0;

	if (!async && (r->status != 202 || !r->location[0]))
		return 0; /* done already */
	url = kn_xstrdup(async ? r->async_op : r->location);
	for (;;) {
		int64_t wait = kn_vmss_retry_after_ms(r->retry_after);
		char status[32], why[600];

		if (kn_now_ms() > deadline) {
			rc = kn_errorf(err, KN_EIO, NULL,
				       "%s: not done after an hour", what);
			break;
		}
		if (wait < 0)
			wait = POLL_DEFAULT_MS;
		if (!nap(c, wait < POLL_MIN_MS ? POLL_MIN_MS : wait)) {
			rc = kn_errorf(err, KN_EUNAVAIL, NULL, "%s: stopped",
				       what);
			break;
		}
		rc = arm(c, "GET", url, NULL, r, what, err);
		if (rc < 0)
			break;
		if (!async) {
			/* Location: 202 while it runs, then the result. */
			if (r->status == 202)
				continue;
			if (r->status >= 300)
				rc = answer_error(r, what, err);
			break;
		}
		if (r->status != 200) {
			rc = answer_error(r, what, err);
			break;
		}
		rc = kn_vmss_parse_operation(r->body.data, r->body.len, status,
					     sizeof(status), why, sizeof(why),
					     err);
		if (rc < 0 || !strcmp(status, "Succeeded"))
			break;
		if (strcmp(status, "InProgress") != 0) {
			rc = kn_errorf(err, KN_EIO, NULL, "%s: %s: %s", what,
				       status, why);
			break;
		}
	}
	free(url);
	return rc;
}

int kn_vmss_capacity(struct kn_vmss_client *c, int64_t *capacity,
		     struct kn_error *err)
{
	char *url = kn_vmss_url(c->arm_url, c->id, NULL);
	struct reply r = {0};
	int rc;

	kn_buf_init(&r.body, BODY_MAX);
	rc = arm(c, "GET", url, NULL, &r, "reading the scale set", err);
	if (rc == 0 && r.status != 200)
		rc = answer_error(&r, "reading the scale set", err);
	if (rc == 0)
		rc = kn_vmss_parse_capacity(r.body.data, r.body.len, capacity,
					    err);
	kn_buf_release(&r.body);
	free(url);
	return rc;
}

/*
 * Send body (freed here) by method to the scale set's URL plus suffix,
 * and wait for the long operation it starts; what names a failure.
 */
static int change(struct kn_vmss_client *c, const char *method,
		  const char *suffix, char *body, const char *what,
		  struct kn_error *err)
{
	char *url = kn_vmss_url(c->arm_url, c->id, suffix);
	struct reply r = {0};
	int rc;

	kn_buf_init(&r.body, BODY_MAX);
	rc = arm(c, method, url, body, &r, what, err);
	if (rc == 0 && r.status != 200 && r.status != 202)
		rc = answer_error(&r, what, err);
	if (rc == 0)
		rc = wait_operation(c, &r, what, err);
	kn_buf_release(&r.body);
	KN_FREE_ALL(body, url);
	return rc;
}

int kn_vmss_set_capacity(struct kn_vmss_client *c, int64_t capacity,
			 struct kn_error *err)
{
	char what[64];

	snprintf(what, sizeof(what), "setting the capacity to %lld",
		 (long long)capacity);
	return change(c, "PATCH", NULL, kn_vmss_capacity_body(capacity), what,
		      err);
}

int kn_vmss_list(struct kn_vmss_client *c, struct kn_vmss_vm **vms,
		 size_t *n, struct kn_error *err)
{
	char *url = kn_vmss_url(c->arm_url, c->id, "/virtualMachines");
	struct reply r = {0};
	int rc = 0;

	*vms = NULL;
	*n = 0;
	kn_buf_init(&r.body, BODY_MAX);
	while (rc == 0 && url) {
		char *next = NULL;

		rc = arm(c, "GET", url, NULL, &r, "listing the VMs", err);
		if (rc == 0 && r.status != 200)
			rc = answer_error(&r, "listing the VMs", err);
		if (rc == 0)
			rc = kn_vmss_parse_vms(r.body.data, r.body.len, vms, n,
					       &next, err);
		free(url);
		url = next;
	}
	free(url);
	kn_buf_release(&r.body);
	if (rc < 0) {
		free(*vms);
		*vms = NULL;
		*n = 0;
	}
	return rc;
}

int kn_vmss_delete_instance(struct kn_vmss_client *c, const char *instance_id,
			    struct kn_error *err)
{
	char what[80];

	snprintf(what, sizeof(what), "deleting instance %.32s", instance_id);
	return change(c, "POST", "/delete", kn_vmss_delete_body(instance_id),
		      what, err);
}
