/*
 * Anomaly detector for the gateway: fixed windows per deployment, one
 * aggregate per signal per window, a band per signal.
 *
 * Aggregates. Latency is the window's mean over successful requests, not
 * its p50: the mean needs O(1) memory however busy the window, where a
 * median needs the samples (or a sketch that drops some under load), and a
 * shift that slows only part of the traffic (one replica of four, the long
 * prompts) moves the mean but can leave the median where it was. A single
 * slow outlier moves the mean for one window only, which sustain_windows
 * already ignores. Output length is the mean completion tokens of
 * successful requests (failures report none, and are the error rate's
 * business); the score is the mean of the requests that carried one.
 * Windows with no request, or no value for a signal, are skipped: they
 * neither extend nor break a run.
 *
 * Band. center is an EWMA of the window values and mad an EWMA of their
 * absolute deviation from it, scaled by 1.4826 (the factor that makes a MAD
 * comparable with a standard deviation, by convention); the band is
 * center ± max(k·1.4826·mad, min_band·|center|). During warm-up every
 * window is learned with weight max(alpha, 1/n), so the first estimates
 * are plain averages rather than biased towards the first window. After
 * it, only in-band windows are learned: an excursion must not drag the
 * band along with it, or a slow shift would never alert.
 *
 * Alerts. sustain_windows consecutive out-of-band windows raise one alert;
 * that signal raises no other until a window is back in band, which
 * reports the alert resolved. A shift that lasts is therefore reported
 * once, not once per window.
 *
 * Threads: one mutex guards the whole detector. Each call does a little
 * arithmetic under it, far cheaper than the request it records; one
 * detector per worker was rejected because a deployment's windows would be
 * split across workers and each would see a fraction of its traffic.
 */
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "gateway/gateway.h"

/* Makes a MAD estimate a standard deviation's equal for normal data. */
#define MAD_SCALE 1.4826

enum signal {
	SIG_LATENCY,
	SIG_ERROR_RATE,
	SIG_OUTPUT_TOKENS,
	SIG_SCORE,
	N_SIGNALS
};

static const char *const SIGNAL_NAMES[N_SIGNALS] = {
	[SIG_LATENCY] = "latency_ms",
	[SIG_ERROR_RATE] = "error_rate",
	[SIG_OUTPUT_TOKENS] = "output_tokens",
	[SIG_SCORE] = "score",
};

struct band {
	double center, mad;
	int learned;        /* windows learned so far */
	int out_run;        /* consecutive out-of-band windows */
	int64_t run_start;  /* start of the run's first window */
	bool alerted;       /* this run has raised its alert */
};

struct window_sums {
	int64_t index;      /* now_ms / window_ms of the open window */
	bool open;
	double requests, errors;
	double ok, latency_sum, tokens_sum;
	double scored, score_sum;
};

struct deployment {
	char name[64];
	struct window_sums win;
	int64_t first_open;  /* windows before this one are closed */
	struct band bands[N_SIGNALS];
};

struct kn_anomaly {
	pthread_mutex_t lock;
	struct kn_anomaly_config cfg;
	struct deployment *deps;
	size_t n_deps, cap_deps;
	struct kn_anomaly_alert pending[KN_ANOMALY_MAX_PENDING];
	size_t head, n_pending;
};

void kn_anomaly_config_default(struct kn_anomaly_config *cfg)
{
	cfg->alpha = 0.1;
	cfg->k = 4.0;
	cfg->warmup_windows = 10;
	cfg->sustain_windows = 3;
	cfg->window_ms = 10000;
	cfg->min_band = 0.05;
}

int kn_anomaly_config_check(const struct kn_anomaly_config *cfg,
			    struct kn_error *err)
{
	if (!(cfg->alpha > 0.0 && cfg->alpha <= 1.0))
		return kn_errorf(err, KN_EINVAL, "alpha",
				 "alpha must be in (0, 1], got %g", cfg->alpha);
	if (!(cfg->k > 0.0) || isinf(cfg->k))
		return kn_errorf(err, KN_EINVAL, "k",
				 "k must be a positive number, got %g", cfg->k);
	if (cfg->warmup_windows < 1)
		return kn_errorf(err, KN_EINVAL, "warmup_windows",
				 "warmup_windows must be at least 1, got %d",
				 cfg->warmup_windows);
	if (cfg->sustain_windows < 1)
		return kn_errorf(err, KN_EINVAL, "sustain_windows",
				 "sustain_windows must be at least 1, got %d",
				 cfg->sustain_windows);
	if (cfg->window_ms < 1)
		return kn_errorf(err, KN_EINVAL, "window_ms",
				 "window_ms must be at least 1, got %lld",
				 (long long)cfg->window_ms);
	if (!(cfg->min_band >= 0.0) || isinf(cfg->min_band))
		return kn_errorf(err, KN_EINVAL, "min_band",
				 "min_band must be a number >= 0, got %g",
				 cfg->min_band);
	return 0;
}

struct kn_anomaly *kn_anomaly_new(const struct kn_anomaly_config *cfg)
{
	struct kn_anomaly *a;

	if (kn_anomaly_config_check(cfg, NULL) != 0)
		return NULL;
	a = calloc(1, sizeof(*a));
	if (!a)
		return NULL;
	if (pthread_mutex_init(&a->lock, NULL) != 0) {
		free(a);
		return NULL;
	}
	a->cfg = *cfg;
	return a;
}

void kn_anomaly_free(struct kn_anomaly *a)
{
	if (!a)
		return;
	pthread_mutex_destroy(&a->lock);
	KN_FREE_ALL(a->deps, a);
}

static struct deployment *find_or_add(struct kn_anomaly *a, const char *name)
{
	size_t len = strlen(name);
	struct deployment *d;

	for (size_t i = 0; i < a->n_deps; i++)
		if (strcmp(a->deps[i].name, name) == 0)
			return &a->deps[i];
	if (len >= sizeof(d->name) || a->n_deps >= KN_ANOMALY_MAX_DEPLOYMENTS)
		return NULL;
	if (a->n_deps == a->cap_deps) {
		size_t cap = a->cap_deps ? a->cap_deps * 2 : 8;
		struct deployment *grown = realloc(a->deps, cap * sizeof(*grown));

		if (!grown)
			return NULL;
		a->deps = grown;
		a->cap_deps = cap;
	}
	d = &a->deps[a->n_deps++];
	memset(d, 0, sizeof(*d));
	memcpy(d->name, name, len + 1);
	d->first_open = INT64_MIN;
	return d;
}

static double half_width(const struct kn_anomaly_config *cfg, enum signal s,
			 const struct band *b)
{
	double spread = cfg->k * MAD_SCALE * b->mad;
	/* An error rate is already a fraction of 1, and its usual center is
	 * 0, where a floor relative to the center would be no floor. */
	double scale = s == SIG_ERROR_RATE ? 1.0 : fabs(b->center);
	double floor_width = cfg->min_band * scale;

	return spread > floor_width ? spread : floor_width;
}

static void learn(const struct kn_anomaly_config *cfg, struct band *b,
		  double x)
{
	double w, dev;

	if (b->learned == 0) {
		b->center = x;
		b->mad = 0.0;
		b->learned = 1;
		return;
	}
	w = 1.0 / (b->learned + 1);
	if (w < cfg->alpha)
		w = cfg->alpha;
	dev = fabs(x - b->center);
	b->center += w * (x - b->center);
	b->mad += w * (dev - b->mad);
	if (b->learned < cfg->warmup_windows)
		b->learned++;
}

/*
 * Queue the alert for band b of signal s of d (x outside center +- h),
 * firing or resolving; the oldest is dropped when the queue is full.
 */
static void push_alert(struct kn_anomaly *a, const struct deployment *d,
		       enum signal s, const struct band *b, double x, double h,
		       bool resolved)
{
	struct kn_anomaly_alert *al;
	size_t slot;

	if (a->n_pending == KN_ANOMALY_MAX_PENDING) {
		a->head = (a->head + 1) % KN_ANOMALY_MAX_PENDING;
		a->n_pending--;
	}
	slot = (a->head + a->n_pending) % KN_ANOMALY_MAX_PENDING;
	al = &a->pending[slot];
	memset(al, 0, sizeof(*al));
	memcpy(al->deployment, d->name, sizeof(al->deployment));
	strcpy(al->signal, SIGNAL_NAMES[s]);
	al->value = x;
	al->center = b->center;
	al->low = b->center - h;
	al->high = b->center + h;
	al->window_ms = a->cfg.window_ms;
	al->started_at_ms = b->run_start;
	al->windows = b->out_run;
	al->resolved = resolved;
	a->n_pending++;
}

static void judge(struct kn_anomaly *a, struct deployment *d, enum signal s,
		  double x, int64_t window_start)
{
	const struct kn_anomaly_config *cfg = &a->cfg;
	struct band *b = &d->bands[s];
	double h;

	if (b->learned < cfg->warmup_windows) {
		learn(cfg, b, x);
		return;
	}
	h = half_width(cfg, s, b);
	if (x >= b->center - h && x <= b->center + h) {
		if (b->alerted)
			push_alert(a, d, s, b, x, h, true);
		learn(cfg, b, x);
		b->out_run = 0;
		b->alerted = false;
		return;
	}
	if (b->out_run == 0)
		b->run_start = window_start;
	b->out_run++;
	if (b->out_run < cfg->sustain_windows || b->alerted)
		return;
	push_alert(a, d, s, b, x, h, false);
	b->alerted = true;
}

static void close_window(struct kn_anomaly *a, struct deployment *d)
{
	struct window_sums *w = &d->win;
	int64_t start = w->index * a->cfg.window_ms;

	w->open = false;
	d->first_open = w->index + 1;
	if (w->requests == 0)
		return;
	judge(a, d, SIG_ERROR_RATE, w->errors / w->requests, start);
	if (w->ok > 0) {
		judge(a, d, SIG_LATENCY, w->latency_sum / w->ok, start);
		judge(a, d, SIG_OUTPUT_TOKENS, w->tokens_sum / w->ok, start);
	}
	if (w->scored > 0)
		judge(a, d, SIG_SCORE, w->score_sum / w->scored, start);
}

static int64_t window_of(const struct kn_anomaly *a, int64_t now_ms)
{
	int64_t i = now_ms / a->cfg.window_ms;

	/* Floor, not truncation, should a clock ever read before 1970. */
	return now_ms < 0 && now_ms % a->cfg.window_ms ? i - 1 : i;
}

void kn_anomaly_observe(struct kn_anomaly *a, const char *deployment,
			int64_t now_ms, double latency_ms, bool error,
			double output_tokens, double score)
{
	struct deployment *d;
	struct window_sums *w;
	int64_t index = window_of(a, now_ms);

	pthread_mutex_lock(&a->lock);
	d = find_or_add(a, deployment);
	if (!d)
		goto out;
	w = &d->win;
	if (index < d->first_open)
		index = d->first_open;
	if (w->open && index > w->index)
		close_window(a, d);
	if (!w->open) {
		memset(w, 0, sizeof(*w));
		w->index = index;
		w->open = true;
	}
	w->requests++;
	if (error) {
		w->errors++;
	} else if (isfinite(latency_ms)) {
		w->ok++;
		w->latency_sum += latency_ms;
		w->tokens_sum += isfinite(output_tokens) ? output_tokens : 0.0;
	}
	if (isfinite(score)) {
		w->scored++;
		w->score_sum += score;
	}
out:
	pthread_mutex_unlock(&a->lock);
}

size_t kn_anomaly_poll(struct kn_anomaly *a, int64_t now_ms,
		       struct kn_anomaly_alert *out, size_t max)
{
	int64_t current = window_of(a, now_ms);
	size_t n = 0;

	pthread_mutex_lock(&a->lock);
	for (size_t i = 0; i < a->n_deps; i++)
		if (a->deps[i].win.open && a->deps[i].win.index < current)
			close_window(a, &a->deps[i]);
	while (n < max && a->n_pending > 0) {
		out[n++] = a->pending[a->head];
		a->head = (a->head + 1) % KN_ANOMALY_MAX_PENDING;
		a->n_pending--;
	}
	pthread_mutex_unlock(&a->lock);
	return n;
}
