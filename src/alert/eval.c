/*
 * The evaluator: for each rule, the expression's instant vector at t;
 * each element whose condition holds is an alert (rule x label set) that
 * is pending until it has held for `for:`, then firing; a firing alert
 * whose condition no longer holds (or whose series is gone) is resolved.
 * A pending alert that stops holding is forgotten without a word, as in
 * Prometheus.
 *
 * A dynamic band compares the value with the mean and standard deviation
 * of the same expression's values for the same label set at the earlier
 * scrape instants inside the window (the current one excluded): it holds
 * when |v - mean| > k * stddev, and never with fewer than min_samples
 * earlier values. Evaluating the expression at past instants, rather than
 * remembering what each rule saw, lets a rule see history from before it
 * first matched and keeps the evaluator's own state small.
 */
#include "internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

struct slot {
	size_t rule;
	char *fingerprint;
	enum kn_alert_state state; /* pending or firing */
	int64_t active_at;
	double value;
	struct kn_label *labels;
	size_t n_labels;
	bool seen;
};

struct kn_alert_eval {
	const struct kn_alert_rules *rules;
	struct strmap slots; /* fingerprint -> slot */
};

struct kn_alert_eval *kn_alert_eval_new(const struct kn_alert_rules *rules)
{
	struct kn_alert_eval *ev = kn_xcalloc(1, sizeof(*ev));

	ev->rules = rules;
	strmap_init(&ev->slots);
	return ev;
}

static void labels_free(struct kn_label *l, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		KN_FREE_ALL(l[i].name, l[i].value);
	}
	free(l);
}

static struct kn_label *labels_copy(const struct kn_label *l, size_t n)
{
	struct kn_label *c = kn_xcalloc(n ? n : 1, sizeof(*c));

	for (size_t i = 0; i < n; i++) {
		c[i].name = kn_xstrdup(l[i].name);
		c[i].value = kn_xstrdup(l[i].value);
	}
	return c;
}

static void slot_free(struct slot *s)
{
	free(s->fingerprint);
	labels_free(s->labels, s->n_labels);
	free(s);
}

void kn_alert_eval_free(struct kn_alert_eval *ev)
{
	if (!ev)
		return;
	for (size_t i = 0; i < ev->slots.n_buckets; i++)
		for (struct strmap_entry *e = ev->slots.buckets[i]; e; e = e->next)
			slot_free(e->val);
	strmap_release(&ev->slots);
	free(ev);
}

static bool compare(enum kn_alert_op op, double v, double x)
{
	switch (op) {
	case KN_OP_GT:
		return v > x;
	case KN_OP_GE:
		return v >= x;
	case KN_OP_LT:
		return v < x;
	case KN_OP_LE:
		return v <= x;
	case KN_OP_EQ:
		return v == x;
	default:
		return v != x && !isnan(v);
	}
}

/* Welford's running mean and variance of the earlier values. */
struct band_stats {
	size_t n;
	double mean, m2;
};

static void band_add(struct band_stats *b, double x)
{
	double d;

	if (!isfinite(x))
		return;
	b->n++;
	d = x - b->mean;
	b->mean += d / (double)b->n;
	b->m2 += d * (x - b->mean);
}

/* Fill stats[i] for each element of now from the instants in the window. */
static void band_history(const struct kn_alert_rule *r,
			 const struct kn_alert_history *h, int64_t t,
			 const struct vec *now, struct band_stats *stats)
{
	struct strmap index;

	strmap_init(&index);
	for (size_t i = 0; i < now->n; i++)
		strmap_put(&index, vec_elem_key(&now->e[i]), &stats[i]);
	for (size_t k = 0; k < h->i_count; k++) {
		int64_t ti = h->instants[(h->i_start + k) % KN_HISTORY_MAX_POINTS];
		struct vec past;

		if (ti >= t || ti < t - r->band_window_ms)
			continue;
		expr_eval(r->expr, h, ti, &past);
		for (size_t i = 0; i < past.n; i++) {
			struct band_stats *b =
				strmap_get(&index, vec_elem_key(&past.e[i]));
			if (b)
				band_add(b, past.e[i].v);
		}
		vec_release(&past);
	}
	strmap_release(&index);
}

static bool band_outside(const struct kn_alert_rule *r,
			 const struct band_stats *b, double v)
{
	double sd;

	if (b->n < (size_t)r->band_min_samples || !isfinite(v))
		return false;
	sd = sqrt(b->m2 / (double)(b->n - 1));
	return fabs(v - b->mean) > r->band_k * sd;
}

static void emit(struct kn_alert_transition **out, size_t *n, size_t *alloc,
		 const struct kn_alert_rule *r, const struct slot *s,
		 enum kn_alert_state state, int64_t t)
{
	struct kn_alert_transition *tr;

	if (*n == *alloc) {
		*alloc = *alloc ? *alloc * 2 : 8;
		*out = kn_xrealloc(*out, *alloc * sizeof(**out));
	}
	tr = &(*out)[(*n)++];
	memset(tr, 0, sizeof(*tr));
	tr->rule = r;
	tr->state = state;
	tr->fingerprint = kn_xstrdup(s->fingerprint);
	tr->labels = labels_copy(s->labels, s->n_labels);
	tr->n_labels = s->n_labels;
	tr->value = s->value;
	tr->active_at_ms = s->active_at;
	tr->at_ms = t;
	tr->summary = template_render(r->summary, s->labels, s->n_labels,
				      s->value);
}

static int elem_order(const void *a, const void *b)
{
	return strcmp(vec_elem_key(a), vec_elem_key(b));
}

static void eval_rule(struct kn_alert_eval *ev, size_t ri,
		      const struct kn_alert_history *h, int64_t t,
		      struct kn_alert_transition **out, size_t *n,
		      size_t *alloc)
{
	const struct kn_alert_rule *r = &ev->rules->rules[ri];
	struct band_stats *stats = NULL;
	struct vec now;

	expr_eval(r->expr, h, t, &now);
	/* Transitions in label order, whatever order series arrived in. */
	if (now.n > 1)
		qsort(now.e, now.n, sizeof(*now.e), elem_order);
	if (r->dynamic && now.n) {
		stats = kn_xcalloc(now.n, sizeof(*stats));
		band_history(r, h, t, &now, stats);
	}
	for (size_t i = 0; i < now.n; i++) {
		const struct vec_elem *e = &now.e[i];
		bool holds = r->dynamic ? band_outside(r, &stats[i], e->v)
					: compare(r->op, e->v, r->value);
		char *fp;
		struct slot *s;

		if (!holds)
			continue;
		fp = kn_asprintf("%s%s", r->name, vec_elem_key(e));
		s = strmap_get(&ev->slots, fp);
		if (!s) {
			s = kn_xcalloc(1, sizeof(*s));
			s->rule = ri;
			s->fingerprint = fp;
			fp = NULL;
			s->state = KN_ALERT_PENDING;
			s->active_at = t;
			if (e->s) {
				s->labels = labels_copy(e->s->labels,
							e->s->n_labels);
				s->n_labels = e->s->n_labels;
			} else {
				s->labels = labels_copy(NULL, 0);
			}
			strmap_put(&ev->slots, s->fingerprint, s);
		}
		free(fp);
		s->seen = true;
		s->value = e->v;
		if (s->state == KN_ALERT_PENDING && t - s->active_at >= r->for_ms) {
			s->state = KN_ALERT_FIRING;
			emit(out, n, alloc, r, s, KN_ALERT_FIRING, t);
		} else if (s->state == KN_ALERT_PENDING && s->active_at == t) {
			emit(out, n, alloc, r, s, KN_ALERT_PENDING, t);
		}
	}
	free(stats);
	vec_release(&now);
}

static int slot_order(const void *a, const void *b)
{
	const struct slot *x = *(const struct slot *const *)a;
	const struct slot *y = *(const struct slot *const *)b;

	if (x->rule != y->rule)
		return x->rule < y->rule ? -1 : 1;
	return strcmp(x->fingerprint, y->fingerprint);
}

void kn_alert_eval_run(struct kn_alert_eval *ev,
		       const struct kn_alert_history *h, int64_t t_ms,
		       struct kn_alert_transition **out, size_t *n)
{
	struct kn_alert_transition *tr = NULL;
	struct slot **gone;
	size_t count = 0, alloc = 0, n_gone = 0;

	for (size_t i = 0; i < ev->slots.n_buckets; i++)
		for (struct strmap_entry *e = ev->slots.buckets[i]; e; e = e->next)
			((struct slot *)e->val)->seen = false;
	for (size_t ri = 0; ri < ev->rules->n; ri++)
		eval_rule(ev, ri, h, t_ms, &tr, &count, &alloc);
	/* What no longer holds, in a stable order. */
	gone = kn_xcalloc(ev->slots.n + 1, sizeof(*gone));
	for (size_t i = 0; i < ev->slots.n_buckets; i++)
		for (struct strmap_entry *e = ev->slots.buckets[i]; e; e = e->next)
			if (!((struct slot *)e->val)->seen)
				gone[n_gone++] = e->val;
	if (n_gone > 1)
		qsort(gone, n_gone, sizeof(*gone), slot_order);
	for (size_t i = 0; i < n_gone; i++) {
		struct slot *s = gone[i];
		if (s->state == KN_ALERT_FIRING)
			emit(&tr, &count, &alloc, &ev->rules->rules[s->rule], s,
			     KN_ALERT_RESOLVED, t_ms);
		strmap_del(&ev->slots, s->fingerprint);
		slot_free(s);
	}
	free(gone);
	*out = tr;
	*n = count;
}

void kn_alert_transitions_free(struct kn_alert_transition *t, size_t n)
{
	for (size_t i = 0; t && i < n; i++) {
		free(t[i].fingerprint);
		labels_free(t[i].labels, t[i].n_labels);
		free(t[i].summary);
	}
	free(t);
}

const char *kn_alert_state_name(enum kn_alert_state s)
{
	return s == KN_ALERT_PENDING ? "pending"
	       : s == KN_ALERT_FIRING ? "firing" : "resolved";
}
