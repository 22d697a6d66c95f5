/*
 * gateway: the data plane in front of deployments — one OpenAI-compatible
 * endpoint with per-key access, rate limits and quotas, least-outstanding
 * load balancing over ready replicas, circuit breakers, fallback
 * deployments, streaming pass-through, an access log and metrics.
 *
 * Three layers, each usable alone:
 *   - the route table (config): the JSON document the server's
 *     GET /v1/gateway/config answers, parsed and validated;
 *   - the limiter: token buckets and day/month quotas, pure functions of
 *     an injected clock, saved to and loaded from JSON;
 *   - the gateway proper: worker threads, each with its own event base
 *     and SO_REUSEPORT listener, proxying to upstream keep-alive pools.
 */
#ifndef KILN_GATEWAY_H
#define KILN_GATEWAY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "base/base.h"

/* ---- route table ---- */

/* Bounds on what a config document may hold, for memory per document. */
#define KN_GW_NAME_MAX 128
#define KN_GW_ADDRESS_MAX 280 /* host (up to 255) ':' port */
#define KN_GW_CONFIG_MAX_BYTES (16 * 1024 * 1024)
#define KN_GW_CA_MAX 1024 /* a CA file's path */

struct kn_gw_replica {
	int64_t replica;
	char address[KN_GW_ADDRESS_MAX]; /* "host:port" or
					    "https://host:port" as given */
	char host[256];
	int port;
	bool tls;            /* https://: verified against the deployment's
				ca, else the system's CAs */
	const char *ca;      /* the deployment's ca, or NULL */
	char zone[KN_GW_NAME_MAX]; /* "" when none */
	bool ready;
};

struct kn_gw_deployment {
	char name[KN_GW_NAME_MAX];
	char *model;                /* as given; may be "" */
	char fallback[KN_GW_NAME_MAX]; /* "" when none */
	char ca[KN_GW_CA_MAX];      /* PEM file its https replicas' certificates
				       chain to; "" for the system's CAs */
	int64_t rpm, tpm;           /* 0 = no limit */
	struct kn_gw_replica *replicas;
	size_t n_replicas;
};

struct kn_gw_key {
	char name[KN_GW_NAME_MAX];
	unsigned char hash[32]; /* sha256 of the whole key string */
	char hash_hex[65];
	char **deployments;     /* names this key may use */
	size_t n_deployments;
	int64_t rpm, tpm, quota_day, quota_month; /* 0 = no limit */
};

/*
 * A parsed route table. Immutable once parsed; shared between threads by
 * reference counting.
 */
struct evp_md_st; /* OpenSSL's EVP_MD */

struct kn_gw_config {
	int64_t generation;
	struct kn_gw_deployment *deployments;
	size_t n_deployments;
	struct kn_gw_key *keys;
	size_t n_keys;
	/* OpenSSL's SHA256, fetched once per table: SHA256() fetches it on
	   every call, which was most of a key check's cost. */
	struct evp_md_st *sha256;
	int refs; /* atomic */
};

/*
 * Parse and validate a config document. Returns 0 with *out (one
 * reference), or -EINVAL with err naming the field ("deployments[1].
 * replicas[0].address"). Fallbacks must name a deployment of the
 * document, and keys' deployments too.
 */
int kn_gw_config_parse(json_t *doc, struct kn_gw_config **out,
		       struct kn_error *err);
/* The same from text; err also names the JSON error's line:column. */
int kn_gw_config_parse_text(const char *text, size_t len,
			    struct kn_gw_config **out, struct kn_error *err);
struct kn_gw_config *kn_gw_config_ref(struct kn_gw_config *cfg);
/* Drop one reference; the last frees. NULL is fine. */
void kn_gw_config_unref(struct kn_gw_config *cfg);

const struct kn_gw_deployment *
kn_gw_config_deployment(const struct kn_gw_config *cfg, const char *name);
/*
 * The key whose hash matches sha256(secret), comparing every key's hash
 * in constant time; NULL when none.
 */
const struct kn_gw_key *kn_gw_config_key(const struct kn_gw_config *cfg,
					 const char *secret, size_t len);
bool kn_gw_key_allows(const struct kn_gw_key *key, const char *deployment);

/* ---- limiter ---- */

/*
 * A token bucket refilled continuously at limit per minute, holding at
 * most limit. Levels may go below zero: tokens are charged after the
 * answer, when the count is known, and the debt is paid back by refill.
 */
struct kn_gw_bucket {
	double level;
	int64_t last_ms; /* wall clock, so that a saved bucket survives */
};

/* Bring b to now_ms for limit per minute (a new bucket, last_ms 0, is full). */
void kn_gw_bucket_refill(struct kn_gw_bucket *b, int64_t limit, int64_t now_ms);
/* Seconds (at least 1) until b holds at least one token. */
int64_t kn_gw_bucket_wait_s(const struct kn_gw_bucket *b, int64_t limit);

/* UTC day (days since the epoch) and month (year * 12 + month - 1). */
int64_t kn_gw_utc_day(int64_t now_ms);
int64_t kn_gw_utc_month(int64_t now_ms);
/* Seconds (at least 1) until the next UTC day or month begins. */
int64_t kn_gw_secs_to_next_day(int64_t now_ms);
int64_t kn_gw_secs_to_next_month(int64_t now_ms);

struct kn_gw_limiter;

/* What a limit check decided, and what the x-ratelimit headers say. */
struct kn_gw_verdict {
	bool allowed;
	const char *limit;      /* when refused: "key rpm", "quota_day", ... */
	int64_t retry_after_s;  /* when refused, at least 1 */
	int64_t limit_requests; /* the tightest rpm in force, -1 when none */
	int64_t remaining_requests; /* -1 when no rpm applies */
	int64_t remaining_tokens;   /* -1 when no tpm applies */
};

struct kn_gw_limiter *kn_gw_limiter_new(void);
void kn_gw_limiter_free(struct kn_gw_limiter *l);
/*
 * Admit one request of key to deployment dep at now_ms: quotas, then the
 * key's and the deployment's rpm and tpm buckets. When allowed, one
 * request is taken from both rpm buckets. Not thread-safe: callers lock.
 */
void kn_gw_limiter_admit(struct kn_gw_limiter *l, const struct kn_gw_key *key,
			 const struct kn_gw_deployment *dep, int64_t now_ms,
			 struct kn_gw_verdict *out);
/*
 * Charge tokens used by an answer to the tpm buckets and the quotas. When
 * v is not NULL its remaining counts are brought up to date, for headers
 * sent after the answer is in.
 */
void kn_gw_limiter_charge(struct kn_gw_limiter *l, const struct kn_gw_key *key,
			  const struct kn_gw_deployment *dep, int64_t tokens,
			  int64_t now_ms, struct kn_gw_verdict *v);
/* Tokens key has used in the UTC day / month of now_ms. */
int64_t kn_gw_limiter_used_day(struct kn_gw_limiter *l,
			       const struct kn_gw_key *key, int64_t now_ms);
int64_t kn_gw_limiter_used_month(struct kn_gw_limiter *l,
				 const struct kn_gw_key *key, int64_t now_ms);
/* Whether anything changed since the last kn_gw_limiter_save. */
bool kn_gw_limiter_dirty(const struct kn_gw_limiter *l);
/* The counters as a JSON document (new reference); clears dirty. */
json_t *kn_gw_limiter_save(struct kn_gw_limiter *l);
/*
 * Replace the counters with a saved document. Returns 0, or -EINVAL with
 * err naming the field (the limiter is then unchanged).
 */
int kn_gw_limiter_load(struct kn_gw_limiter *l, json_t *doc,
		       struct kn_error *err);

/* ---- answers ---- */

/* What an answer's "usage" says; 0 for what it does not say. */
struct kn_gw_usage {
	int64_t total_tokens;      /* what limits and quotas count */
	int64_t completion_tokens; /* the output's length */
};

/*
 * The top-level "usage" object of a JSON answer (or of an SSE chunk's
 * data), read without parsing the whole document. A count that is absent,
 * not a whole number >= 0, or cut short is 0.
 */
void kn_gw_usage_read(const char *text, size_t len, struct kn_gw_usage *out);

/* ---- requests ---- */

/* A model name longer than this is no deployment's (KN_GW_NAME_MAX). */
#define KN_GW_BODY_MODEL_MAX 1024

/* What the gateway reads of a request body. */
struct kn_gw_body {
	bool object;       /* the top level is an object (else an array) */
	bool has_model;    /* it has a "model" key (the last one counts) */
	bool model_string; /* ... whose value is a string: */
	char model[KN_GW_BODY_MODEL_MAX]; /* unescaped, NUL-terminated */
	size_t model_len;
	bool model_cut;    /* longer than model holds (and cut short) */
	bool stream;       /* the last top-level "stream" is true */
	/* Where and why the body is not JSON (kn_gw_body_scan's -1). */
	int line, column;
	char error[64];
};

/*
 * Scan a request body for its top-level "model" and "stream" without
 * building it. 0, or -1 with out->line, column and error set for exactly
 * the bodies json_loadb(text, len, 0, ...) refuses.
 */
int kn_gw_body_scan(const char *text, size_t len, struct kn_gw_body *out);

/* ---- gateway ---- */

struct kn_gateway;

struct kn_gateway_options {
	const char *host;        /* listen address */
	int port;                /* 0 picks one */
	int workers;             /* threads, each with its own listener */
	const char *zone;        /* preferred replica zone, or NULL */
	const char *home;        /* $KILN_HOME: gateway/ files go under it */
	const char *routes_file; /* static route table, or NULL */
	const char *server;      /* server URL when routes_file is NULL */
	const char *token;       /* bearer token for the server, or NULL */
	int64_t refresh_ms;      /* how often to poll the server */
	const char *access_log;  /* file, or NULL for stderr */
	int64_t max_body;        /* request body cap, bytes */
	int64_t max_headers;     /* request header cap, bytes */
	int64_t head_timeout_ms; /* a request head's whole time; 0 = 10 s */
	int64_t body_idle_ms;    /* most time between body bytes; 0 = 30 s */
	int max_conns;           /* open connections a worker holds; 0 = 4096 */
	int max_conns_per_client; /* of one address, a worker; 0 = 256 */
	int64_t upstream_timeout_ms;
	int breaker_failures;    /* consecutive failures that open a breaker */
	int64_t breaker_cooldown_ms;
	int64_t anomaly_window_ms; /* anomaly detection window; 0 = 10 s */
	/* TLS (docs/tls.md): the front's certificate chain and key (NULL:
	   plain HTTP, refused off loopback unless insecure), reloaded on
	   SIGHUP and when they change; the CAs the server's certificate is
	   checked against (NULL: the system's) and the client certificate
	   and key shown to the server (NULL: none). */
	const char *tls_cert, *tls_key;
	bool insecure;
	const char *server_ca, *client_cert, *client_key;
};

/*
 * Load the route table (the routes file; or the server, else the last
 * good copy on disk), load the saved counters, and listen. Returns 0 with
 * *out, or a negative errno with err saying why (address in use, a
 * malformed routes file, no server and no saved copy).
 */
int kn_gateway_new(const struct kn_gateway_options *opts,
		   struct kn_gateway **out, struct kn_error *err);
/* The bound URL, "http://127.0.0.1:7080" (https:// with TLS). */
const char *kn_gateway_url(const struct kn_gateway *gw);
/*
 * Serve until SIGTERM or SIGINT; then stop the workers and save the
 * counters. Returns 0, or -EIO when the control loop broke.
 */
int kn_gateway_run(struct kn_gateway *gw);
void kn_gateway_free(struct kn_gateway *gw);

/* ---- anomaly detection ---- */

/*
 * gateway anomaly detector: per deployment, per-window aggregates of
 * latency, error rate, output length and the model server's own score
 * (x-kiln-score), each compared with a dynamic band (EWMA ± k·MAD) that
 * is learned from the deployment's own normal traffic. A sustained
 * excursion raises one alert carrying its evidence.
 *
 * No I/O, no clock: the caller passes the time with every call. One
 * detector may be shared by every gateway worker: a mutex inside makes
 * each call atomic.
 */

/* Deployments tracked by one detector: they come from the gateway's routes,
 * so this only bounds memory against a runaway routes file. */
#define KN_ANOMALY_MAX_DEPLOYMENTS 4096
/* Alerts waiting for kn_anomaly_poll; beyond this the oldest are dropped,
 * since a caller that never polls must not grow the gateway's memory. */
#define KN_ANOMALY_MAX_PENDING 1024

struct kn_anomaly_config {
	double alpha;          /* EWMA weight of a new in-band window, (0, 1] */
	double k;              /* band half-width in (scaled) MADs, > 0 */
	int warmup_windows;    /* windows learned unconditionally first, >= 1 */
	int sustain_windows;   /* consecutive out-of-band windows to alert, >= 1 */
	int64_t window_ms;     /* aggregation window, > 0 */
	double min_band;       /* floor on the half-width, relative to the
				  center (to 1 for error_rate), >= 0 */
};

/* alpha 0.1, k 4, 10 warm-up windows, 3 to sustain, 10 s windows,
 * min_band 0.05. */
void kn_anomaly_config_default(struct kn_anomaly_config *cfg);

/* 0, or -EINVAL with the offending field named in err. */
int kn_anomaly_config_check(const struct kn_anomaly_config *cfg,
			    struct kn_error *err);

/* A detector with a copy of cfg; NULL when cfg fails the check above or
 * memory runs out. kn_anomaly_free accepts NULL. */
struct kn_anomaly *kn_anomaly_new(const struct kn_anomaly_config *cfg);
void kn_anomaly_free(struct kn_anomaly *a);

/*
 * Record one finished request. latency_ms and output_tokens count only for
 * requests without error; score is NAN when the server sent none. A
 * deployment name longer than 63 bytes, or one past
 * KN_ANOMALY_MAX_DEPLOYMENTS, is not tracked. An observation whose time
 * falls in an already closed window counts in the open one.
 */
void kn_anomaly_observe(struct kn_anomaly *a, const char *deployment,
			int64_t now_ms, double latency_ms, bool error,
			double output_tokens, double score);

struct kn_anomaly_alert {
	char deployment[64];
	char signal[16];        /* latency_ms, error_rate, output_tokens, score */
	double value;           /* the window aggregate that completed the run */
	double low, high, center; /* the band it left */
	int64_t window_ms;      /* window length */
	int64_t started_at_ms;  /* start of the first out-of-band window */
	int windows;            /* consecutive out-of-band windows so far */
	bool resolved;          /* false: the excursion began (firing); true:
				   its signal is back in band (value is the
				   first window back; started_at_ms and the
				   band are the excursion's) */
};

/*
 * Close every window that ended at or before now_ms, then move up to max
 * pending alerts, oldest first, into out. Returns how many were written.
 */
size_t kn_anomaly_poll(struct kn_anomaly *a, int64_t now_ms,
		       struct kn_anomaly_alert *out, size_t max);

#endif
