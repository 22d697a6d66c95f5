/*
 * Rate limits and quotas: token buckets per key and per deployment, and
 * per-key token counts for the UTC day and month.
 *
 * Pure: every function takes the clock as an argument, so tests drive
 * time by hand and a restart resumes where the saved counters left off
 * (buckets carry wall-clock timestamps for that reason). Requests are
 * taken from the rpm buckets at admission; tokens are only known once the
 * answer is in, so tpm buckets and quotas are charged afterwards and may
 * go into debt, which refill pays back. State lives in one open-addressed
 * table keyed "k:<key hash>" and "d:<deployment>", so a renamed key keeps
 * nothing and a re-created deployment starts fresh only by its name.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gateway/gateway.h"

#define MS_PER_DAY 86400000LL
/* "k:" + 64 hex digits, or "d:" + a deployment name. */
#define ENTRY_ID_MAX (KN_GW_NAME_MAX + 3)

struct entry {
	char id[ENTRY_ID_MAX]; /* "" when the slot is free */
	struct kn_gw_bucket rpm, tpm;
	int64_t day, day_tokens;
	int64_t month, month_tokens;
};

struct kn_gw_limiter {
	struct entry *slots;
	size_t cap; /* a power of two */
	size_t used;
	bool dirty;
};

void kn_gw_bucket_refill(struct kn_gw_bucket *b, int64_t limit, int64_t now_ms)
{
	if (limit <= 0)
		return;
	if (b->last_ms == 0) {
		b->level = (double)limit;
	} else if (now_ms > b->last_ms) {
		b->level += (double)(now_ms - b->last_ms) * (double)limit /
			    60000.0;
	}
	if (b->level > (double)limit)
		b->level = (double)limit;
	b->last_ms = now_ms;
}

int64_t kn_gw_bucket_wait_s(const struct kn_gw_bucket *b, int64_t limit)
{
	double secs;

	if (limit <= 0 || b->level >= 1.0)
		return 1;
	secs = ceil((1.0 - b->level) * 60.0 / (double)limit);
	return secs < 1.0 ? 1 : (int64_t)secs;
}

int64_t kn_gw_utc_day(int64_t now_ms)
{
	return now_ms / MS_PER_DAY;
}

int64_t kn_gw_utc_month(int64_t now_ms)
{
	time_t t = (time_t)(now_ms / 1000);
	struct tm tm;

	gmtime_r(&t, &tm);
	return (int64_t)(tm.tm_year + 1900) * 12 + tm.tm_mon;
}

int64_t kn_gw_secs_to_next_day(int64_t now_ms)
{
	int64_t next = (kn_gw_utc_day(now_ms) + 1) * MS_PER_DAY;
	int64_t s = (next - now_ms + 999) / 1000;
	return s < 1 ? 1 : s;
}

int64_t kn_gw_secs_to_next_month(int64_t now_ms)
{
	time_t t = (time_t)(now_ms / 1000);
	struct tm tm;
	int64_t next_ms, s;

	gmtime_r(&t, &tm);
	tm.tm_mday = 1;
	tm.tm_hour = tm.tm_min = tm.tm_sec = 0;
	if (++tm.tm_mon == 12) {
		tm.tm_mon = 0;
		tm.tm_year++;
	}
	next_ms = (int64_t)timegm(&tm) * 1000;
	s = (next_ms - now_ms + 999) / 1000;
	return s < 1 ? 1 : s;
}

struct kn_gw_limiter *kn_gw_limiter_new(void)
{
	struct kn_gw_limiter *l = kn_xcalloc(1, sizeof(*l));

	l->cap = 64;
	l->slots = kn_xcalloc(l->cap, sizeof(*l->slots));
	return l;
}

void kn_gw_limiter_free(struct kn_gw_limiter *l)
{
	if (!l)
		return;
	KN_FREE_ALL(l->slots, l);
}

/* Eight bytes a step: ids are 66 bytes for keys, and four are hashed a call. */
static uint64_t hash_id(const char *s)
{
	size_t n = strlen(s);
	uint64_t h = 1469598103934665603ULL ^ n, word;

	for (; n >= 8; s += 8, n -= 8) {
		memcpy(&word, s, 8);
		h = (h ^ word) * 0x9E3779B97F4A7C15ULL;
		h ^= h >> 29;
	}
	word = 0;
	memcpy(&word, s, n);
	h = (h ^ word) * 0x9E3779B97F4A7C15ULL;
	return h ^ h >> 32;
}

static struct entry *slot_for(struct entry *slots, size_t cap, const char *id)
{
	size_t i = (size_t)hash_id(id) & (cap - 1);

	while (slots[i].id[0] && strcmp(slots[i].id, id))
		i = (i + 1) & (cap - 1);
	return &slots[i];
}

static void grow(struct kn_gw_limiter *l)
{
	size_t cap = l->cap * 2;
	struct entry *slots = kn_xcalloc(cap, sizeof(*slots));

	for (size_t i = 0; i < l->cap; i++)
		if (l->slots[i].id[0])
			*slot_for(slots, cap, l->slots[i].id) = l->slots[i];
	free(l->slots);
	l->slots = slots;
	l->cap = cap;
}

static struct entry *lookup(struct kn_gw_limiter *l, const char *id)
{
	struct entry *e;

	if ((l->used + 1) * 2 > l->cap)
		grow(l);
	e = slot_for(l->slots, l->cap, id);
	if (!e->id[0]) {
		kn_strlcpy(e->id, id, sizeof(e->id));
		l->used++;
	}
	return e;
}

/* "<kind>:<name>" in id (ENTRY_ID_MAX bytes), without a printf per call. */
static const char *entry_id(char *id, char kind, const char *name)
{
	size_t n = strnlen(name, ENTRY_ID_MAX - 3);

	id[0] = kind;
	id[1] = ':';
	memcpy(id + 2, name, n);
	id[n + 2] = '\0';
	return id;
}

static struct entry *key_entry(struct kn_gw_limiter *l,
			       const struct kn_gw_key *key)
{
	char id[ENTRY_ID_MAX];

	return lookup(l, entry_id(id, 'k', key->hash_hex));
}

static struct entry *dep_entry(struct kn_gw_limiter *l,
			       const struct kn_gw_deployment *dep)
{
	char id[ENTRY_ID_MAX];

	return lookup(l, entry_id(id, 'd', dep->name));
}

static void roll_quotas(struct entry *e, int64_t now_ms)
{
	int64_t day = kn_gw_utc_day(now_ms), month = kn_gw_utc_month(now_ms);

	if (e->day != day) {
		e->day = day;
		e->day_tokens = 0;
	}
	if (e->month != month) {
		e->month = month;
		e->month_tokens = 0;
	}
}

/* Fold one bucket into the remaining count of the verdict's headers. */
static void fold_remaining(int64_t *remaining, const struct kn_gw_bucket *b,
			   int64_t limit)
{
	int64_t r;

	if (limit <= 0)
		return;
	r = b->level < 0 ? 0 : (int64_t)floor(b->level);
	if (*remaining < 0 || r < *remaining)
		*remaining = r;
}

static void headers(struct kn_gw_verdict *v, const struct entry *ke,
		    const struct kn_gw_key *key, const struct entry *de,
		    const struct kn_gw_deployment *dep)
{
	v->limit_requests = -1;
	v->remaining_requests = -1;
	v->remaining_tokens = -1;
	if (key->rpm > 0)
		v->limit_requests = key->rpm;
	if (dep->rpm > 0 && (v->limit_requests < 0 || dep->rpm < v->limit_requests))
		v->limit_requests = dep->rpm;
	fold_remaining(&v->remaining_requests, &ke->rpm, key->rpm);
	fold_remaining(&v->remaining_requests, &de->rpm, dep->rpm);
	fold_remaining(&v->remaining_tokens, &ke->tpm, key->tpm);
	fold_remaining(&v->remaining_tokens, &de->tpm, dep->tpm);
}

static bool empty(const struct kn_gw_bucket *b, int64_t limit,
		  const char *name, struct kn_gw_verdict *v)
{
	if (limit <= 0 || b->level >= 1.0)
		return false;
	v->allowed = false;
	v->limit = name;
	v->retry_after_s = kn_gw_bucket_wait_s(b, limit);
	return true;
}

void kn_gw_limiter_admit(struct kn_gw_limiter *l, const struct kn_gw_key *key,
			 const struct kn_gw_deployment *dep, int64_t now_ms,
			 struct kn_gw_verdict *out)
{
	struct entry *ke = key_entry(l, key), *de = dep_entry(l, dep);
	struct kn_gw_verdict v = {.allowed = true, .limit = NULL,
				  .retry_after_s = 0};

	roll_quotas(ke, now_ms);
	kn_gw_bucket_refill(&ke->rpm, key->rpm, now_ms);
	kn_gw_bucket_refill(&ke->tpm, key->tpm, now_ms);
	kn_gw_bucket_refill(&de->rpm, dep->rpm, now_ms);
	kn_gw_bucket_refill(&de->tpm, dep->tpm, now_ms);
	if (key->quota_day > 0 && ke->day_tokens >= key->quota_day) {
		v.allowed = false;
		v.limit = "quota_day";
		v.retry_after_s = kn_gw_secs_to_next_day(now_ms);
	} else if (key->quota_month > 0 &&
		   ke->month_tokens >= key->quota_month) {
		v.allowed = false;
		v.limit = "quota_month";
		v.retry_after_s = kn_gw_secs_to_next_month(now_ms);
	} else if (!empty(&ke->rpm, key->rpm, "key rpm", &v) &&
		   !empty(&ke->tpm, key->tpm, "key tpm", &v) &&
		   !empty(&de->rpm, dep->rpm, "deployment rpm", &v) &&
		   !empty(&de->tpm, dep->tpm, "deployment tpm", &v)) {
		if (key->rpm > 0)
			ke->rpm.level -= 1.0;
		if (dep->rpm > 0)
			de->rpm.level -= 1.0;
		l->dirty = true;
	}
	headers(&v, ke, key, de, dep);
	*out = v;
}

void kn_gw_limiter_charge(struct kn_gw_limiter *l, const struct kn_gw_key *key,
			  const struct kn_gw_deployment *dep, int64_t tokens,
			  int64_t now_ms, struct kn_gw_verdict *v)
{
	struct entry *ke = key_entry(l, key), *de = dep_entry(l, dep);

	if (tokens > 0) {
		roll_quotas(ke, now_ms);
		kn_gw_bucket_refill(&ke->tpm, key->tpm, now_ms);
		kn_gw_bucket_refill(&de->tpm, dep->tpm, now_ms);
		if (key->tpm > 0)
			ke->tpm.level -= (double)tokens;
		if (dep->tpm > 0)
			de->tpm.level -= (double)tokens;
		ke->day_tokens += tokens;
		ke->month_tokens += tokens;
		l->dirty = true;
	}
	if (v) {
		int64_t limit = v->limit_requests;
		headers(v, ke, key, de, dep);
		v->limit_requests = limit;
	}
}

int64_t kn_gw_limiter_used_day(struct kn_gw_limiter *l,
			       const struct kn_gw_key *key, int64_t now_ms)
{
	struct entry *ke = key_entry(l, key);

	roll_quotas(ke, now_ms);
	return ke->day_tokens;
}

int64_t kn_gw_limiter_used_month(struct kn_gw_limiter *l,
				 const struct kn_gw_key *key, int64_t now_ms)
{
	struct entry *ke = key_entry(l, key);

	roll_quotas(ke, now_ms);
	return ke->month_tokens;
}

bool kn_gw_limiter_dirty(const struct kn_gw_limiter *l)
{
	return l->dirty;
}

static json_t *bucket_json(const struct kn_gw_bucket *b)
{
	return json_pack("[f, I]", b->level, (json_int_t)b->last_ms);
}

json_t *kn_gw_limiter_save(struct kn_gw_limiter *l)
{
	json_t *entries = json_object();

	for (size_t i = 0; i < l->cap; i++) {
		const struct entry *e = &l->slots[i];
		if (!e->id[0])
			continue;
		json_object_set_new(
			entries, e->id,
			json_pack("{s:o, s:o, s:I, s:I, s:I, s:I}", "rpm",
				  bucket_json(&e->rpm), "tpm",
				  bucket_json(&e->tpm), "day", (json_int_t)e->day,
				  "day_tokens", (json_int_t)e->day_tokens,
				  "month", (json_int_t)e->month, "month_tokens",
				  (json_int_t)e->month_tokens));
	}
	l->dirty = false;
	return json_pack("{s:i, s:o}", "version", 1, "entries", entries);
}

static int load_bucket(json_t *v, const char *field, struct kn_gw_bucket *b,
		       struct kn_error *err)
{
	if (!json_is_array(v) || json_array_size(v) != 2 ||
	    !json_is_number(json_array_get(v, 0)) ||
	    !json_is_integer(json_array_get(v, 1)))
		return kn_errorf(err, KN_EINVAL, field,
				 "%s: must be [level, last_ms]", field);
	b->level = json_number_value(json_array_get(v, 0));
	b->last_ms = json_integer_value(json_array_get(v, 1));
	return 0;
}

int kn_gw_limiter_load(struct kn_gw_limiter *l, json_t *doc,
		       struct kn_error *err)
{
	struct kn_gw_limiter *fresh = kn_gw_limiter_new();
	json_t *entries = json_object_get(doc, "entries"), *v;
	const char *id;
	char field[ENTRY_ID_MAX + 32];
	int rc = 0;

	if (!json_is_object(entries)) {
		rc = kn_errorf(err, KN_EINVAL, "entries",
			       "entries: missing or not an object");
		goto out;
	}
	json_object_foreach(entries, id, v)
	{
		struct entry e = {0};
		static const char *const counts[] = {"day", "day_tokens",
						     "month", "month_tokens"};
		int64_t *dst[] = {&e.day, &e.day_tokens, &e.month,
				  &e.month_tokens};

		if (strlen(id) >= ENTRY_ID_MAX || (strncmp(id, "k:", 2) &&
						   strncmp(id, "d:", 2))) {
			rc = kn_errorf(err, KN_EINVAL, "entries",
				       "entries: \"%.40s\" is not a key or "
				       "deployment counter", id);
			goto out;
		}
		snprintf(field, sizeof(field), "entries.%s.rpm", id);
		if ((rc = load_bucket(json_object_get(v, "rpm"), field, &e.rpm,
				      err)) < 0)
			goto out;
		snprintf(field, sizeof(field), "entries.%s.tpm", id);
		if ((rc = load_bucket(json_object_get(v, "tpm"), field, &e.tpm,
				      err)) < 0)
			goto out;
		for (size_t i = 0; i < 4; i++) {
			json_t *n = json_object_get(v, counts[i]);
			snprintf(field, sizeof(field), "entries.%s.%s", id,
				 counts[i]);
			if (!json_is_integer(n)) {
				rc = kn_errorf(err, KN_EINVAL, field,
					       "%s: must be an integer", field);
				goto out;
			}
			*dst[i] = json_integer_value(n);
		}
		kn_strlcpy(e.id, id, sizeof(e.id));
		*lookup(fresh, id) = e;
	}
	/* Swap the contents so the caller's pointer stays valid. */
	{
		struct kn_gw_limiter tmp = *l;
		*l = *fresh;
		*fresh = tmp;
	}
	l->dirty = false;
out:
	kn_gw_limiter_free(fresh);
	return rc;
}
