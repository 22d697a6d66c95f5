/*
 * alert: Prometheus text exposition read back into samples, alert rules
 * read from YAML, a bounded in-memory history of the series the rules
 * use, and a pure evaluator that turns rules plus history into alert
 * state changes (pending, firing, resolved).
 *
 * Nothing here does I/O or reads a clock: the server scrapes, passes the
 * time of each scrape, and stores and announces what the evaluator
 * returns. The expression language (a small PromQL subset) is documented
 * in docs/alerts.md.
 */
#ifndef KILN_ALERT_H
#define KILN_ALERT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/base.h"

/* ---- text exposition ---- */

/* Caps on what one scrape may hold, so a broken exporter cannot make the
 * server allocate without bound: a node with 8 GPUs writes ~2,000 samples. */
#define KN_EXPO_MAX_SAMPLES 100000
#define KN_EXPO_MAX_LABELS 64
#define KN_EXPO_MAX_NAME 256
#define KN_EXPO_MAX_VALUE 4096

struct kn_label {
	char *name;
	char *value;
};

/* Free n labels' names and values, and the array (NULL is nothing). */
void kn_labels_free(struct kn_label *labels, size_t n);

struct kn_expo_sample {
	char *metric;
	struct kn_label *labels; /* sorted by name, no duplicates */
	size_t n_labels;
	double value;
	int64_t timestamp_ms; /* 0 when the line has none */
};

/*
 * Parse Prometheus text exposition (format 0.0.4): HELP and TYPE lines
 * (checked, then skipped), other comments, and samples with labels,
 * escaped label values (\\ \" \n), NaN, +Inf, -Inf and an optional
 * timestamp. *out is a malloc'd array written only on success; errors are
 * -EINVAL with "line N:COL: ..." in err.
 */
int kn_expo_parse(const char *text, size_t len, struct kn_expo_sample **out,
		  size_t *n, struct kn_error *err);
void kn_expo_free(struct kn_expo_sample *samples, size_t n);

/* ---- rules ---- */

/* Caps with reasons: a rules file is written by hand. */
#define KN_ALERT_RULES_MAX_BYTES (1024 * 1024)
#define KN_ALERT_MAX_RULES 1000
#define KN_ALERT_EXPR_MAX 4096

enum kn_alert_severity {
	KN_ALERT_INFO,
	KN_ALERT_WARNING,
	KN_ALERT_CRITICAL,
};

enum kn_alert_op { KN_OP_GT, KN_OP_GE, KN_OP_LT, KN_OP_LE, KN_OP_EQ, KN_OP_NE };

struct kn_alert_expr; /* parsed expression, opaque */

struct kn_alert_rule {
	char *name;
	char *expr_text;
	struct kn_alert_expr *expr;
	bool dynamic;              /* band instead of op/value */
	enum kn_alert_op op;       /* static threshold */
	double value;
	int64_t band_window_ms;    /* dynamic band: the history looked at */
	double band_k;             /* standard deviations */
	int band_min_samples;      /* fewer past values: no verdict */
	int64_t for_ms;            /* true this long before firing */
	enum kn_alert_severity severity;
	char *summary;             /* template; "" when absent */
};

struct kn_alert_rules {
	struct kn_alert_rule *rules;
	size_t n;
};

/*
 * Read a rules file's text. filename names it in messages, which read
 * "file:line:col: rules[2].band.k: must be a number > 0; got "x"".
 * *out is written only on success; free with kn_alert_rules_free.
 */
int kn_alert_rules_parse(const char *text, size_t len, const char *filename,
			 struct kn_alert_rules **out, struct kn_error *err);
/* Read and parse the file at path. */
int kn_alert_rules_load(const char *path, struct kn_alert_rules **out,
			struct kn_error *err);
void kn_alert_rules_free(struct kn_alert_rules *rules);
/* Whether any rule's expression reads metric (the history keeps no other). */
bool kn_alert_rules_use(const struct kn_alert_rules *rules, const char *metric);

const char *kn_alert_severity_name(enum kn_alert_severity s);

/* ---- history ---- */

/* Bounds on memory: series kept, and points per series (an hour of
 * 15-second scrapes is 240). */
#define KN_HISTORY_MAX_SERIES 50000
#define KN_HISTORY_MAX_POINTS 512

struct kn_alert_history;

/*
 * A history keeping points for retention_ms; a series counts as present
 * at time t when it has a point within lookback_ms before t.
 */
struct kn_alert_history *kn_alert_history_new(int64_t retention_ms,
					      int64_t lookback_ms);
void kn_alert_history_free(struct kn_alert_history *h);
/*
 * Add one scrape taken at t_ms: samples of metrics the rules use (every
 * metric when rules is NULL), each with the extra label instance=instance
 * (may be NULL for none). Points older than the retention are dropped.
 * Series beyond KN_HISTORY_MAX_SERIES are not added; returns how many
 * samples were dropped that way.
 */
size_t kn_alert_history_add(struct kn_alert_history *h,
			    const struct kn_alert_rules *rules,
			    const struct kn_expo_sample *samples, size_t n,
			    const char *instance, int64_t t_ms);
size_t kn_alert_history_series(const struct kn_alert_history *h);

/* ---- evaluation ---- */

enum kn_alert_state {
	KN_ALERT_PENDING,  /* condition true, for: not yet elapsed */
	KN_ALERT_FIRING,
	KN_ALERT_RESOLVED, /* was firing, condition no longer true */
};

struct kn_alert_transition {
	const struct kn_alert_rule *rule;
	enum kn_alert_state state;
	char *fingerprint;        /* rule name + labels: the alert's identity */
	struct kn_label *labels;  /* the series' labels, sorted */
	size_t n_labels;
	double value;             /* the expression's value at this time */
	int64_t active_at_ms;     /* when the condition became true */
	int64_t at_ms;            /* the evaluation's time */
	char *summary;            /* the rule's template filled in */
};

struct kn_alert_eval;

/* Alert state per rule and series, kept between evaluations. */
struct kn_alert_eval *kn_alert_eval_new(const struct kn_alert_rules *rules);
void kn_alert_eval_free(struct kn_alert_eval *ev);
/*
 * Evaluate every rule at t_ms against h; *out (malloc'd, may be NULL with
 * *n 0) receives the state changes in rule order. Free with
 * kn_alert_transitions_free.
 */
void kn_alert_eval_run(struct kn_alert_eval *ev,
		       const struct kn_alert_history *h, int64_t t_ms,
		       struct kn_alert_transition **out, size_t *n);
void kn_alert_transitions_free(struct kn_alert_transition *t, size_t n);

const char *kn_alert_state_name(enum kn_alert_state s);

#endif
