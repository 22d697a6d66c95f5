/*
 * The history the rules look at: for every series of a metric some rule
 * uses, a ring of (time, value) points kept for the retention window, and
 * the ring of scrape times ("instants") a dynamic band looks back over.
 *
 * Memory is bounded twice: KN_HISTORY_MAX_POINTS per series (the ring
 * overwrites its oldest point) and KN_HISTORY_MAX_SERIES series (new ones
 * are refused and counted). Series with no point inside the retention are
 * dropped at each add, so churning label values (a job id as a label)
 * cannot pile up. Only metrics that rules use are kept at all: a node
 * exporter's hundreds of families cost nothing.
 */
#include "internal.h"

#include <stdlib.h>
#include <string.h>

/* ---- strmap ---- */

static uint64_t hash_str(const char *s)
{
	uint64_t h = 1469598103934665603ULL; /* FNV-1a */

	while (*s)
		h = (h ^ (unsigned char)*s++) * 1099511628211ULL;
	return h;
}

void strmap_init(struct strmap *m)
{
	memset(m, 0, sizeof(*m));
}

void strmap_release(struct strmap *m)
{
	for (size_t i = 0; i < m->n_buckets; i++) {
		struct strmap_entry *e = m->buckets[i], *next;
		for (; e; e = next) {
			next = e->next;
			KN_FREE_ALL(e->key, e);
		}
	}
	free(m->buckets);
	memset(m, 0, sizeof(*m));
}

void *strmap_get(const struct strmap *m, const char *key)
{
	if (!m->n_buckets)
		return NULL;
	for (struct strmap_entry *e = m->buckets[hash_str(key) % m->n_buckets];
	     e; e = e->next)
		if (!strcmp(e->key, key))
			return e->val;
	return NULL;
}

static void grow(struct strmap *m)
{
	size_t nb = m->n_buckets ? m->n_buckets * 2 : 64;
	struct strmap_entry **b = kn_xcalloc(nb, sizeof(*b));

	for (size_t i = 0; i < m->n_buckets; i++) {
		struct strmap_entry *e = m->buckets[i], *next;
		for (; e; e = next) {
			size_t k = hash_str(e->key) % nb;
			next = e->next;
			e->next = b[k];
			b[k] = e;
		}
	}
	free(m->buckets);
	m->buckets = b;
	m->n_buckets = nb;
}

void strmap_put(struct strmap *m, const char *key, void *val)
{
	struct strmap_entry *e;
	size_t k;

	if (m->n_buckets) {
		k = hash_str(key) % m->n_buckets;
		for (e = m->buckets[k]; e; e = e->next)
			if (!strcmp(e->key, key)) {
				e->val = val;
				return;
			}
	}
	if (m->n + 1 > m->n_buckets)
		grow(m);
	k = hash_str(key) % m->n_buckets;
	e = kn_xcalloc(1, sizeof(*e));
	e->key = kn_xstrdup(key);
	e->val = val;
	e->next = m->buckets[k];
	m->buckets[k] = e;
	m->n++;
}

void *strmap_del(struct strmap *m, const char *key)
{
	struct strmap_entry **p;

	if (!m->n_buckets)
		return NULL;
	for (p = &m->buckets[hash_str(key) % m->n_buckets]; *p; p = &(*p)->next)
		if (!strcmp((*p)->key, key)) {
			struct strmap_entry *e = *p;
			void *val = e->val;
			*p = e->next;
			KN_FREE_ALL(e->key, e);
			m->n--;
			return val;
		}
	return NULL;
}

/* ---- series ---- */

static void series_free(struct series *s)
{
	kn_labels_free(s->labels, s->n_labels);
	KN_FREE_ALL(s->metric, s->lkey, s->key, s->t, s->v, s);
}

static int64_t series_newest(const struct series *s)
{
	return s->count ? s->t[(s->start + s->count - 1) % s->cap] : INT64_MIN;
}

static void series_push(struct series *s, int64_t t, double v)
{
	size_t at;

	/* A second sample at the same time (a duplicate line) replaces. */
	if (s->count && series_newest(s) >= t) {
		s->v[(s->start + s->count - 1) % s->cap] = v;
		return;
	}
	if (s->count == s->cap && s->cap < KN_HISTORY_MAX_POINTS) {
		size_t cap = s->cap ? s->cap * 2 : 8;
		int64_t *nt;
		double *nv;

		if (cap > KN_HISTORY_MAX_POINTS)
			cap = KN_HISTORY_MAX_POINTS;
		nt = kn_xcalloc(cap, sizeof(*nt));
		nv = kn_xcalloc(cap, sizeof(*nv));
		for (size_t i = 0; i < s->count; i++) {
			nt[i] = s->t[(s->start + i) % s->cap];
			nv[i] = s->v[(s->start + i) % s->cap];
		}
		KN_FREE_ALL(s->t, s->v);
		s->t = nt;
		s->v = nv;
		s->start = 0;
		s->cap = cap;
	}
	if (s->count == s->cap) { /* full at the cap: overwrite the oldest */
		s->start = (s->start + 1) % s->cap;
		s->count--;
	}
	at = (s->start + s->count) % s->cap;
	s->t[at] = t;
	s->v[at] = v;
	s->count++;
}

static void series_prune(struct series *s, int64_t cutoff)
{
	while (s->count && s->t[s->start] < cutoff) {
		s->start = (s->start + 1) % s->cap;
		s->count--;
	}
}

bool series_at(const struct kn_alert_history *h, const struct series *s,
	       int64_t t, double *out)
{
	for (size_t i = s->count; i > 0; i--) {
		size_t k = (s->start + i - 1) % s->cap;
		if (s->t[k] > t)
			continue;
		if (s->t[k] <= t - h->lookback_ms)
			return false;
		*out = s->v[k];
		return true;
	}
	return false;
}

/* "{a=\"x\",b=\"y\"}" with values escaped as in the exposition. */
static char *labels_key(const struct kn_label *l, size_t n)
{
	struct kn_buf b;

	kn_buf_init(&b, SIZE_MAX);
	kn_buf_append(&b, "{", 1);
	for (size_t i = 0; i < n; i++) {
		kn_buf_printf(&b, "%s%s=\"", i ? "," : "", l[i].name);
		for (const char *p = l[i].value; *p; p++) {
			if (*p == '\\' || *p == '"')
				kn_buf_append(&b, "\\", 1);
			if (*p == '\n')
				kn_buf_append(&b, "\\n", 2);
			else
				kn_buf_append(&b, p, 1);
		}
		kn_buf_append(&b, "\"", 1);
	}
	kn_buf_append(&b, "}", 1);
	return b.data;
}

/* The sample's labels plus instance, sorted; malloc'd copies. */
static struct kn_label *series_labels(const struct kn_expo_sample *smp,
				      const char *instance, size_t *n)
{
	struct kn_label *l = kn_xcalloc(smp->n_labels + 1, sizeof(*l));
	size_t k = 0;
	bool placed = !instance;

	for (size_t i = 0; i < smp->n_labels; i++) {
		/* The scraper's instance wins over the exporter's own. */
		if (instance && !strcmp(smp->labels[i].name, "instance"))
			continue;
		if (!placed && strcmp(smp->labels[i].name, "instance") > 0) {
			l[k].name = kn_xstrdup("instance");
			l[k++].value = kn_xstrdup(instance);
			placed = true;
		}
		l[k].name = kn_xstrdup(smp->labels[i].name);
		l[k++].value = kn_xstrdup(smp->labels[i].value);
	}
	if (!placed) {
		l[k].name = kn_xstrdup("instance");
		l[k++].value = kn_xstrdup(instance);
	}
	*n = k;
	return l;
}

/* ---- history ---- */

struct kn_alert_history *kn_alert_history_new(int64_t retention_ms,
					      int64_t lookback_ms)
{
	struct kn_alert_history *h = kn_xcalloc(1, sizeof(*h));

	h->retention_ms = retention_ms;
	h->lookback_ms = lookback_ms;
	strmap_init(&h->series);
	strmap_init(&h->metrics);
	h->instants = kn_xcalloc(KN_HISTORY_MAX_POINTS, sizeof(*h->instants));
	return h;
}

void kn_alert_history_free(struct kn_alert_history *h)
{
	if (!h)
		return;
	for (size_t i = 0; i < h->metrics.n_buckets; i++)
		for (struct strmap_entry *e = h->metrics.buckets[i]; e;
		     e = e->next) {
			struct series *s = e->val, *next;
			for (; s; s = next) {
				next = s->mnext;
				series_free(s);
			}
		}
	strmap_release(&h->series);
	strmap_release(&h->metrics);
	KN_FREE_ALL(h->instants, h);
}

size_t kn_alert_history_series(const struct kn_alert_history *h)
{
	return h->n_series;
}

static void drop_old(struct kn_alert_history *h, int64_t cutoff)
{
	for (size_t i = 0; i < h->metrics.n_buckets; i++) {
		struct strmap_entry **pe = &h->metrics.buckets[i];
		while (*pe) {
			struct strmap_entry *e = *pe;
			struct series *head = e->val, **ps = &head;

			while (*ps) {
				struct series *s = *ps;
				series_prune(s, cutoff);
				if (s->count) {
					ps = &s->mnext;
					continue;
				}
				*ps = s->mnext;
				strmap_del(&h->series, s->key);
				h->n_series--;
				series_free(s);
			}
			e->val = head;
			if (head) {
				pe = &e->next;
				continue;
			}
			/* No series left: forget the metric too. */
			*pe = e->next;
			KN_FREE_ALL(e->key, e);
			h->metrics.n--;
		}
	}
	while (h->i_count && h->instants[h->i_start] < cutoff) {
		h->i_start = (h->i_start + 1) % KN_HISTORY_MAX_POINTS;
		h->i_count--;
	}
}

static void add_instant(struct kn_alert_history *h, int64_t t)
{
	if (h->i_count &&
	    h->instants[(h->i_start + h->i_count - 1) % KN_HISTORY_MAX_POINTS] >= t)
		return;
	if (h->i_count == KN_HISTORY_MAX_POINTS) {
		h->i_start = (h->i_start + 1) % KN_HISTORY_MAX_POINTS;
		h->i_count--;
	}
	h->instants[(h->i_start + h->i_count) % KN_HISTORY_MAX_POINTS] = t;
	h->i_count++;
}

size_t kn_alert_history_add(struct kn_alert_history *h,
			    const struct kn_alert_rules *rules,
			    const struct kn_expo_sample *samples, size_t n,
			    const char *instance, int64_t t_ms)
{
	size_t dropped = 0;

	for (size_t i = 0; i < n; i++) {
		const struct kn_expo_sample *smp = &samples[i];
		struct kn_label *labels;
		struct series *s;
		size_t nl;
		char *lkey, *key;

		if (rules && !kn_alert_rules_use(rules, smp->metric))
			continue;
		labels = series_labels(smp, instance, &nl);
		lkey = labels_key(labels, nl);
		key = kn_asprintf("%s%s", smp->metric, lkey);
		s = strmap_get(&h->series, key);
		if (!s && h->n_series >= KN_HISTORY_MAX_SERIES) {
			dropped++;
		} else if (!s) {
			s = kn_xcalloc(1, sizeof(*s));
			s->metric = kn_xstrdup(smp->metric);
			s->labels = labels;
			s->n_labels = nl;
			s->lkey = lkey;
			s->key = key;
			s->mnext = strmap_get(&h->metrics, s->metric);
			strmap_put(&h->metrics, s->metric, s);
			strmap_put(&h->series, s->key, s);
			h->n_series++;
			labels = NULL;
			lkey = key = NULL;
		}
		if (s)
			series_push(s, t_ms, smp->value);
		kn_labels_free(labels, nl);
		KN_FREE_ALL(lkey, key);
	}
	add_instant(h, t_ms);
	drop_old(h, t_ms - h->retention_ms);
	return dropped;
}
