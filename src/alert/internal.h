/* Shared between the alert module's files; not a public header. */
#ifndef KILN_ALERT_INTERNAL_H
#define KILN_ALERT_INTERNAL_H

#include "alert/alert.h"

/* ---- a string-keyed hash map (keys copied, values borrowed) ---- */

struct strmap_entry {
	char *key;
	void *val;
	struct strmap_entry *next;
};

struct strmap {
	struct strmap_entry **buckets;
	size_t n_buckets, n;
};

void strmap_init(struct strmap *m);
void strmap_release(struct strmap *m); /* values are the caller's */
void *strmap_get(const struct strmap *m, const char *key);
void strmap_put(struct strmap *m, const char *key, void *val);
/* Remove key; returns its value or NULL. */
void *strmap_del(struct strmap *m, const char *key);

/* ---- history ---- */

struct series {
	char *metric;
	struct kn_label *labels; /* sorted; instance included */
	size_t n_labels;
	char *lkey;              /* {a="x",b="y"}: identity without the name */
	char *key;               /* metric + lkey */
	int64_t *t;
	double *v;
	size_t start, count, cap; /* ring */
	struct series *mnext;    /* the next series of the same metric */
};

struct kn_alert_history {
	int64_t retention_ms, lookback_ms;
	struct strmap series;  /* key -> struct series */
	struct strmap metrics; /* metric -> first struct series */
	size_t n_series;
	int64_t *instants;     /* ring of distinct scrape times */
	size_t i_start, i_count;
};

/* The series' value at t: its newest point in (t - lookback, t]. */
bool series_at(const struct kn_alert_history *h, const struct series *s,
	       int64_t t, double *out);

/* ---- expressions ---- */

/* One element of an instant vector: a series (NULL for a bare number). */
struct vec_elem {
	const struct series *s;
	double v;
};

struct vec {
	struct vec_elem *e;
	size_t n;
};

/*
 * Parse an expression. On error returns -EINVAL with *err_off the byte
 * offset of the problem in text and msg filled.
 */
int expr_parse(const char *text, struct kn_alert_expr **out, size_t *err_off,
	       char *msg, size_t msg_len);
void expr_free(struct kn_alert_expr *e);
bool expr_uses(const struct kn_alert_expr *e, const char *metric);
/* The expression's instant vector at t (a number gives one element). */
void expr_eval(const struct kn_alert_expr *e, const struct kn_alert_history *h,
	       int64_t t, struct vec *out);
void vec_release(struct vec *v);
/* The label set's key of an element ("" for a bare number). */
const char *vec_elem_key(const struct vec_elem *e);

/* ---- summary templates ---- */

/* 0, or -EINVAL with *err_off and msg saying what is wrong. */
int template_check(const char *text, size_t *err_off, char *msg,
		   size_t msg_len);
char *template_render(const char *text, const struct kn_label *labels,
		      size_t n_labels, double value);

#endif
