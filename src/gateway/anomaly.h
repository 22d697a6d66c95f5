/*
 * gateway anomaly detector: per deployment, per-window aggregates of
 * latency, error rate, output length and the model server's own score
 * (x-kiln-score), each compared with a dynamic band (EWMA ± k·MAD) that
 * is learned from the deployment's own normal traffic. A sustained
 * excursion raises one alert carrying its evidence.
 *
 * No I/O, no clock: the caller passes the time with every call. One
 * detector may be shared by every gateway worker: a mutex inside makes
 * each call atomic. These declarations are meant to move into gateway.h
 * unchanged.
 */
#ifndef KILN_GATEWAY_ANOMALY_H
#define KILN_GATEWAY_ANOMALY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/base.h"

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
};

/*
 * Close every window that ended at or before now_ms, then move up to max
 * pending alerts, oldest first, into out. Returns how many were written.
 */
size_t kn_anomaly_poll(struct kn_anomaly *a, int64_t now_ms,
		       struct kn_anomaly_alert *out, size_t max);

#endif
