/*
 * Unit tests for the gateway's anomaly detector, on synthetic traffic from
 * a seeded PRNG: normal noise raises nothing, a sustained shift in each
 * signal raises exactly one alert with its evidence, a brief spike and the
 * warm-up raise none, and a signal that came back re-arms.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "gateway/gateway.h"

#define WINDOW_MS 1000
#define PER_WINDOW 20

/* xorshift64*: the same series on every machine. */
static uint64_t rng_state;

static void rng_seed(uint64_t seed)
{
	rng_state = seed ? seed : 1;
}

static double uniform(void)
{
	rng_state ^= rng_state >> 12;
	rng_state ^= rng_state << 25;
	rng_state ^= rng_state >> 27;
	return (double)((rng_state * 2685821657736338717ULL) >> 11) / 9007199254740992.0;
}

static double normal(double mean, double sd)
{
	double u1 = uniform(), u2 = uniform();

	if (u1 < 1e-300)
		u1 = 1e-300;
	return mean + sd * sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2);
}

/* What one window of traffic looks like. */
struct traffic {
	double latency, latency_sd;
	double error_p;
	double tokens, tokens_sd;
	double score; /* NAN: the server reports none */
};

static const struct traffic NORMAL = {
	.latency = 100, .latency_sd = 15, .error_p = 0.01,
	.tokens = 50, .tokens_sd = 10, .score = -1.5,
};

static struct kn_anomaly *detector(void)
{
	struct kn_anomaly_config cfg;
	struct kn_anomaly *a;

	kn_anomaly_config_default(&cfg);
	cfg.window_ms = WINDOW_MS;
	a = kn_anomaly_new(&cfg);
	assert_non_null(a);
	return a;
}

/* PER_WINDOW requests spread over window w. */
static void window(struct kn_anomaly *a, const char *dep, int64_t w,
		   const struct traffic *t)
{
	for (int i = 0; i < PER_WINDOW; i++) {
		int64_t now = w * WINDOW_MS + i * (WINDOW_MS / PER_WINDOW);
		bool error = uniform() < t->error_p;
		double score = isnan(t->score) ? NAN : normal(t->score, 0.2);

		kn_anomaly_observe(a, dep, now, normal(t->latency, t->latency_sd),
				   error, error ? 0 : normal(t->tokens, t->tokens_sd),
				   score);
	}
}

/* Windows [from, to) of traffic t, polling after each; returns the alerts
 * raised, copied into out (at most max). */
static size_t run(struct kn_anomaly *a, const char *dep, int64_t from,
		  int64_t to, const struct traffic *t,
		  struct kn_anomaly_alert *out, size_t max)
{
	size_t n = 0;

	for (int64_t w = from; w < to; w++) {
		window(a, dep, w, t);
		n += kn_anomaly_poll(a, (w + 1) * WINDOW_MS, out + n, max - n);
	}
	return n;
}

static void test_steady_noise_raises_nothing(void **state)
{
	struct kn_anomaly *a = detector();
	struct kn_anomaly_alert out[16];

	(void)state;
	rng_seed(42);
	assert_int_equal(run(a, "chat", 0, 2000, &NORMAL, out, 16), 0);
	kn_anomaly_free(a);
}

static void test_latency_shift_raises_exactly_one(void **state)
{
	struct kn_anomaly *a = detector();
	struct kn_anomaly_alert out[16];
	struct traffic slow = NORMAL;

	(void)state;
	rng_seed(7);
	slow.latency = 200;
	assert_int_equal(run(a, "chat", 0, 50, &NORMAL, out, 16), 0);
	/* Two out-of-band windows are not yet sustained... */
	assert_int_equal(run(a, "chat", 50, 52, &slow, out, 16), 0);
	/* ...the third is, and the shift lasting 30 more adds nothing. */
	assert_int_equal(run(a, "chat", 52, 53, &slow, out, 16), 1);
	assert_string_equal(out[0].deployment, "chat");
	assert_string_equal(out[0].signal, "latency_ms");
	assert_int_equal(out[0].windows, 3);
	assert_int_equal(out[0].started_at_ms, 50 * WINDOW_MS);
	assert_int_equal(out[0].window_ms, WINDOW_MS);
	assert_true(out[0].value > 180 && out[0].value < 220);
	assert_true(out[0].center > 95 && out[0].center < 105);
	assert_true(out[0].low < out[0].center && out[0].center < out[0].high);
	assert_true(out[0].high < out[0].value);
	assert_false(out[0].resolved);
	assert_int_equal(run(a, "chat", 53, 83, &slow, out, 16), 0);

	/* Back to normal resolves it, once, and re-arms it: the next shift
	 * is a new alert. */
	assert_int_equal(run(a, "chat", 83, 100, &NORMAL, out, 16), 1);
	assert_true(out[0].resolved);
	assert_string_equal(out[0].signal, "latency_ms");
	assert_int_equal(out[0].started_at_ms, 50 * WINDOW_MS);
	assert_true(out[0].value >= out[0].low && out[0].value <= out[0].high);
	assert_int_equal(run(a, "chat", 100, 110, &slow, out, 16), 1);
	assert_string_equal(out[0].signal, "latency_ms");
	assert_false(out[0].resolved);
	assert_int_equal(out[0].started_at_ms, 100 * WINDOW_MS);
	kn_anomaly_free(a);
}

static void test_brief_spike_raises_nothing(void **state)
{
	struct kn_anomaly *a = detector();
	struct kn_anomaly_alert out[16];
	struct traffic spike = NORMAL;

	(void)state;
	rng_seed(11);
	spike.latency = 1000;
	assert_int_equal(run(a, "chat", 0, 40, &NORMAL, out, 16), 0);
	for (int64_t w = 40; w < 200; w += 10) {
		assert_int_equal(run(a, "chat", w, w + 2, &spike, out, 16), 0);
		assert_int_equal(run(a, "chat", w + 2, w + 10, &NORMAL, out, 16), 0);
	}
	kn_anomaly_free(a);
}

static void test_error_rate_and_output_length(void **state)
{
	struct kn_anomaly *a = detector();
	struct kn_anomaly_alert out[16];
	struct traffic failing = NORMAL, terse = NORMAL;

	(void)state;
	rng_seed(3);
	failing.error_p = 0.5;
	terse.tokens = 5;
	terse.tokens_sd = 1;
	assert_int_equal(run(a, "chat", 0, 40, &NORMAL, out, 16), 0);
	assert_int_equal(run(a, "chat", 40, 60, &failing, out, 16), 1);
	assert_string_equal(out[0].signal, "error_rate");
	assert_true(out[0].value > 0.3);
	assert_true(out[0].high < out[0].value);

	assert_int_equal(run(a, "chat", 60, 80, &NORMAL, out, 16), 1);
	assert_true(out[0].resolved);
	assert_string_equal(out[0].signal, "error_rate");
	assert_int_equal(run(a, "chat", 80, 100, &terse, out, 16), 1);
	assert_string_equal(out[0].signal, "output_tokens");
	assert_true(out[0].value < out[0].low);
	kn_anomaly_free(a);
}

static void test_score_signal(void **state)
{
	struct kn_anomaly *a = detector();
	struct kn_anomaly_alert out[16];
	struct traffic confused = NORMAL, unscored = NORMAL;

	(void)state;
	rng_seed(5);
	confused.score = -3.0;
	unscored.score = NAN;
	assert_int_equal(run(a, "chat", 0, 40, &NORMAL, out, 16), 0);
	/* Windows without scores are skipped, not taken as a change. */
	assert_int_equal(run(a, "chat", 40, 60, &unscored, out, 16), 0);
	assert_int_equal(run(a, "chat", 60, 70, &confused, out, 16), 1);
	assert_string_equal(out[0].signal, "score");
	assert_true(out[0].value < -2.5);
	assert_true(out[0].center > -1.6 && out[0].center < -1.4);
	kn_anomaly_free(a);
}

static void test_warmup_is_respected(void **state)
{
	struct kn_anomaly_config cfg;
	struct kn_anomaly *a;
	struct kn_anomaly_alert out[16];
	struct traffic wild = NORMAL, huge = NORMAL;

	(void)state;
	rng_seed(9);
	kn_anomaly_config_default(&cfg);
	cfg.window_ms = WINDOW_MS;
	cfg.warmup_windows = 10;
	a = kn_anomaly_new(&cfg);
	assert_non_null(a);
	/* Anything goes while the band is being learned. */
	wild.latency = 5000;
	assert_int_equal(run(a, "chat", 0, 5, &NORMAL, out, 16), 0);
	assert_int_equal(run(a, "chat", 5, 10, &wild, out, 16), 0);
	/* The band learned from both halves is wide; far beyond it alerts,
	 * exactly on the sustain_windows-th window after warm-up. */
	huge.latency = 1e6;
	assert_int_equal(run(a, "chat", 10, 12, &huge, out, 16), 0);
	assert_int_equal(run(a, "chat", 12, 13, &huge, out, 16), 1);
	assert_string_equal(out[0].signal, "latency_ms");
	assert_int_equal(out[0].started_at_ms, 10 * WINDOW_MS);
	kn_anomaly_free(a);
}

static void test_constant_series_uses_min_band(void **state)
{
	struct kn_anomaly *a = detector();
	struct kn_anomaly_alert out[4];
	int64_t w = 0;

	(void)state;
	/* Zero spread: without the floor any change at all would alert. */
	for (; w < 20; w++)
		kn_anomaly_observe(a, "c", w * WINDOW_MS, 100, false, 10, NAN);
	for (; w < 40; w++)
		kn_anomaly_observe(a, "c", w * WINDOW_MS, 104, false, 10, NAN);
	assert_int_equal(kn_anomaly_poll(a, w * WINDOW_MS, out, 4), 0);
	for (; w < 43; w++)
		kn_anomaly_observe(a, "c", w * WINDOW_MS, 120, false, 10, NAN);
	assert_int_equal(kn_anomaly_poll(a, w * WINDOW_MS, out, 4), 1);
	assert_string_equal(out[0].signal, "latency_ms");
	kn_anomaly_free(a);
}

static void test_quiet_windows_are_skipped_and_poll_closes(void **state)
{
	struct kn_anomaly *a = detector();
	struct kn_anomaly_alert out[4];
	int64_t w = 0;

	(void)state;
	for (; w < 20; w++)
		kn_anomaly_observe(a, "q", w * WINDOW_MS, 100, false, 10, NAN);
	/* Out-of-band windows with long silences between them still form a
	 * run: empty windows neither extend nor break it. */
	for (int i = 0; i < 3; i++, w += 50)
		kn_anomaly_observe(a, "q", w * WINDOW_MS, 300, false, 10, NAN);
	/* The last window is closed by poll alone, once its time is over. */
	assert_int_equal(kn_anomaly_poll(a, (w - 50) * WINDOW_MS + 999, out, 4), 0);
	assert_int_equal(kn_anomaly_poll(a, (w - 50) * WINDOW_MS + 1000, out, 4), 1);
	assert_int_equal(out[0].windows, 3);
	assert_int_equal(out[0].started_at_ms, 20 * WINDOW_MS);
	kn_anomaly_free(a);
}

static void test_deployments_are_independent(void **state)
{
	struct kn_anomaly *a = detector();
	struct kn_anomaly_alert out[16];
	struct traffic slow = NORMAL;
	size_t n = 0;

	(void)state;
	rng_seed(13);
	slow.latency = 300;
	for (int64_t w = 0; w < 40; w++) {
		window(a, "a", w, &NORMAL);
		window(a, "b", w, &NORMAL);
	}
	for (int64_t w = 40; w < 60; w++) {
		window(a, "a", w, &slow);
		window(a, "b", w, &NORMAL);
		n += kn_anomaly_poll(a, (w + 1) * WINDOW_MS, out + n, 16 - n);
	}
	assert_int_equal(n, 1);
	assert_string_equal(out[0].deployment, "a");
	kn_anomaly_free(a);
}

static void test_poll_respects_max_and_keeps_the_rest(void **state)
{
	struct kn_anomaly *a = detector();
	struct kn_anomaly_alert out[4];
	char name[16];

	(void)state;
	for (int d = 0; d < 5; d++) {
		snprintf(name, sizeof(name), "d%d", d);
		for (int64_t w = 0; w < 13; w++)
			kn_anomaly_observe(a, name, w * WINDOW_MS,
					   w < 10 ? 100 : 900, false, 10, NAN);
	}
	assert_int_equal(kn_anomaly_poll(a, 13 * WINDOW_MS, out, 2), 2);
	assert_string_equal(out[0].deployment, "d0");
	assert_string_equal(out[1].deployment, "d1");
	assert_int_equal(kn_anomaly_poll(a, 13 * WINDOW_MS, out, 4), 3);
	assert_string_equal(out[2].deployment, "d4");
	assert_int_equal(kn_anomaly_poll(a, 13 * WINDOW_MS, out, 4), 0);
	kn_anomaly_free(a);
}

static void test_bounds_on_names_and_deployments(void **state)
{
	struct kn_anomaly *a = detector();
	struct kn_anomaly_alert out[4];
	char name[80];

	(void)state;
	/* 64 bytes does not fit deployment[64]: not tracked, no alert. */
	memset(name, 'x', 64);
	name[64] = '\0';
	for (int64_t w = 0; w < 13; w++)
		kn_anomaly_observe(a, name, w * WINDOW_MS, w < 10 ? 100 : 900,
				   false, 10, NAN);
	assert_int_equal(kn_anomaly_poll(a, 13 * WINDOW_MS, out, 4), 0);
	/* Many deployments: all allocated, all freed (ASan checks). */
	for (int d = 0; d < KN_ANOMALY_MAX_DEPLOYMENTS + 10; d++) {
		snprintf(name, sizeof(name), "dep-%d", d);
		kn_anomaly_observe(a, name, 0, 100, false, 10, NAN);
	}
	kn_anomaly_free(a);
	kn_anomaly_free(NULL);
}

static void config_error(void (*breaker)(struct kn_anomaly_config *),
			 const char *field)
{
	struct kn_anomaly_config cfg;
	struct kn_error err;

	kn_anomaly_config_default(&cfg);
	breaker(&cfg);
	assert_int_not_equal(kn_anomaly_config_check(&cfg, &err), 0);
	assert_string_equal(err.field, field);
	assert_non_null(strstr(err.message, field));
	assert_null(kn_anomaly_new(&cfg));
}

static void zero_alpha(struct kn_anomaly_config *c) { c->alpha = 0; }
static void nan_k(struct kn_anomaly_config *c) { c->k = NAN; }
static void no_warmup(struct kn_anomaly_config *c) { c->warmup_windows = 0; }
static void no_sustain(struct kn_anomaly_config *c) { c->sustain_windows = 0; }
static void no_window(struct kn_anomaly_config *c) { c->window_ms = 0; }
static void negative_band(struct kn_anomaly_config *c) { c->min_band = -1; }

static void test_config_errors_name_the_field(void **state)
{
	struct kn_anomaly_config cfg;

	(void)state;
	kn_anomaly_config_default(&cfg);
	assert_int_equal(kn_anomaly_config_check(&cfg, NULL), 0);
	config_error(zero_alpha, "alpha");
	config_error(nan_k, "k");
	config_error(no_warmup, "warmup_windows");
	config_error(no_sustain, "sustain_windows");
	config_error(no_window, "window_ms");
	config_error(negative_band, "min_band");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_steady_noise_raises_nothing),
		cmocka_unit_test(test_latency_shift_raises_exactly_one),
		cmocka_unit_test(test_brief_spike_raises_nothing),
		cmocka_unit_test(test_error_rate_and_output_length),
		cmocka_unit_test(test_score_signal),
		cmocka_unit_test(test_warmup_is_respected),
		cmocka_unit_test(test_constant_series_uses_min_band),
		cmocka_unit_test(test_quiet_windows_are_skipped_and_poll_closes),
		cmocka_unit_test(test_deployments_are_independent),
		cmocka_unit_test(test_poll_respects_max_and_keeps_the_rest),
		cmocka_unit_test(test_bounds_on_names_and_deployments),
		cmocka_unit_test(test_config_errors_name_the_field),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
