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

#include "base/tests/testmain.h"
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

/* A detector and the alerts it last raised: each test's own. */
static struct scene {
	struct kn_anomaly *a;
	struct kn_anomaly_alert out[16];
} scene;

static int setup(void **state)
{
	memset(&scene, 0, sizeof(scene));
	scene.a = detector();
	*state = &scene;
	return 0;
}

static int teardown(void **state)
{
	struct scene *sc = *state;

	kn_anomaly_free(sc->a);
	return 0;
}

/* Windows [from, to) of traffic t on deployment "chat", polling after
 * each; returns the alerts raised, copied into sc->out. */
static size_t run(struct scene *sc, int64_t from, int64_t to,
		  const struct traffic *t)
{
	const size_t max = sizeof(sc->out) / sizeof(sc->out[0]);
	size_t n = 0;

	for (int64_t w = from; w < to; w++) {
		window(sc->a, "chat", w, t);
		n += kn_anomaly_poll(sc->a, (w + 1) * WINDOW_MS, sc->out + n,
				     max - n);
	}
	return n;
}

/* One request a window in windows [from, to) of dep, all at latency. */
static void steady(struct kn_anomaly *a, const char *dep, int64_t from,
		   int64_t to, double latency)
{
	for (int64_t w = from; w < to; w++)
		kn_anomaly_observe(a, dep, w * WINDOW_MS, latency, false, 10,
				   NAN);
}

static void test_steady_noise_raises_nothing(void **state)
{
	struct scene *sc = *state;

	rng_seed(42);
	assert_int_equal(run(sc, 0, 2000, &NORMAL), 0);
}

static void test_latency_shift_raises_exactly_one(void **state)
{
	struct scene *sc = *state;
	const struct kn_anomaly_alert *al = &sc->out[0];
	struct traffic slow = NORMAL;

	rng_seed(7);
	slow.latency = 200;
	assert_int_equal(run(sc, 0, 50, &NORMAL), 0);
	/* Two out-of-band windows are not yet sustained... */
	assert_int_equal(run(sc, 50, 52, &slow), 0);
	/* ...the third is, and the shift lasting 30 more adds nothing. */
	assert_int_equal(run(sc, 52, 53, &slow), 1);
	assert_string_equal(al->deployment, "chat");
	assert_string_equal(al->signal, "latency_ms");
	assert_int_equal(al->windows, 3);
	assert_int_equal(al->started_at_ms, 50 * WINDOW_MS);
	assert_int_equal(al->window_ms, WINDOW_MS);
	assert_true(al->value > 180 && al->value < 220);
	assert_true(al->center > 95 && al->center < 105);
	assert_true(al->low < al->center && al->center < al->high);
	assert_true(al->high < al->value);
	assert_false(al->resolved);
	assert_int_equal(run(sc, 53, 83, &slow), 0);

	/* Back to normal resolves it, once, and re-arms it: the next shift
	 * is a new alert. */
	assert_int_equal(run(sc, 83, 100, &NORMAL), 1);
	assert_true(al->resolved);
	assert_string_equal(al->signal, "latency_ms");
	assert_int_equal(al->started_at_ms, 50 * WINDOW_MS);
	assert_true(al->value >= al->low && al->value <= al->high);
	assert_int_equal(run(sc, 100, 110, &slow), 1);
	assert_string_equal(al->signal, "latency_ms");
	assert_false(al->resolved);
	assert_int_equal(al->started_at_ms, 100 * WINDOW_MS);
}

static void test_brief_spike_raises_nothing(void **state)
{
	struct scene *sc = *state;
	struct traffic spike = NORMAL;

	rng_seed(11);
	spike.latency = 1000;
	assert_int_equal(run(sc, 0, 40, &NORMAL), 0);
	for (int64_t w = 40; w < 200; w += 10) {
		assert_int_equal(run(sc, w, w + 2, &spike), 0);
		assert_int_equal(run(sc, w + 2, w + 10, &NORMAL), 0);
	}
}

static void test_error_rate_and_output_length(void **state)
{
	struct scene *sc = *state;
	const struct kn_anomaly_alert *al = &sc->out[0];
	struct traffic failing = NORMAL, terse = NORMAL;

	rng_seed(3);
	failing.error_p = 0.5;
	terse.tokens = 5;
	terse.tokens_sd = 1;
	assert_int_equal(run(sc, 0, 40, &NORMAL), 0);
	assert_int_equal(run(sc, 40, 60, &failing), 1);
	assert_string_equal(al->signal, "error_rate");
	assert_true(al->value > 0.3);
	assert_true(al->high < al->value);

	assert_int_equal(run(sc, 60, 80, &NORMAL), 1);
	assert_true(al->resolved);
	assert_string_equal(al->signal, "error_rate");
	assert_int_equal(run(sc, 80, 100, &terse), 1);
	assert_string_equal(al->signal, "output_tokens");
	assert_true(al->value < al->low);
}

static void test_score_signal(void **state)
{
	struct scene *sc = *state;
	const struct kn_anomaly_alert *al = &sc->out[0];
	struct traffic confused = NORMAL, unscored = NORMAL;

	rng_seed(5);
	confused.score = -3.0;
	unscored.score = NAN;
	assert_int_equal(run(sc, 0, 40, &NORMAL), 0);
	/* Windows without scores are skipped, not taken as a change. */
	assert_int_equal(run(sc, 40, 60, &unscored), 0);
	assert_int_equal(run(sc, 60, 70, &confused), 1);
	assert_string_equal(al->signal, "score");
	assert_true(al->value < -2.5);
	assert_true(al->center > -1.6 && al->center < -1.4);
}

static void test_warmup_is_respected(void **state)
{
	struct scene *sc = *state;
	struct kn_anomaly_config cfg;
	struct traffic wild = NORMAL, huge = NORMAL;

	rng_seed(9);
	kn_anomaly_config_default(&cfg);
	cfg.window_ms = WINDOW_MS;
	cfg.warmup_windows = 10;
	kn_anomaly_free(sc->a);
	sc->a = kn_anomaly_new(&cfg);
	assert_non_null(sc->a);
	/* Anything goes while the band is being learned. */
	wild.latency = 5000;
	assert_int_equal(run(sc, 0, 5, &NORMAL), 0);
	assert_int_equal(run(sc, 5, 10, &wild), 0);
	/* The band learned from both halves is wide; far beyond it alerts,
	 * exactly on the sustain_windows-th window after warm-up. */
	huge.latency = 1e6;
	assert_int_equal(run(sc, 10, 12, &huge), 0);
	assert_int_equal(run(sc, 12, 13, &huge), 1);
	assert_string_equal(sc->out[0].signal, "latency_ms");
	assert_int_equal(sc->out[0].started_at_ms, 10 * WINDOW_MS);
}

static void test_constant_series_uses_min_band(void **state)
{
	struct scene *sc = *state;

	/* Zero spread: without the floor any change at all would alert. */
	steady(sc->a, "c", 0, 20, 100);
	steady(sc->a, "c", 20, 40, 104);
	assert_int_equal(kn_anomaly_poll(sc->a, 40 * WINDOW_MS, sc->out, 4),
			 0);
	steady(sc->a, "c", 40, 43, 120);
	assert_int_equal(kn_anomaly_poll(sc->a, 43 * WINDOW_MS, sc->out, 4),
			 1);
	assert_string_equal(sc->out[0].signal, "latency_ms");
}

static void test_quiet_windows_are_skipped_and_poll_closes(void **state)
{
	struct scene *sc = *state;
	int64_t w = 20;

	steady(sc->a, "q", 0, 20, 100);
	/* Out-of-band windows with long silences between them still form a
	 * run: empty windows neither extend nor break it. */
	for (int i = 0; i < 3; i++, w += 50)
		steady(sc->a, "q", w, w + 1, 300);
	/* The last window is closed by poll alone, once its time is over. */
	assert_int_equal(kn_anomaly_poll(sc->a, (w - 50) * WINDOW_MS + 999,
					 sc->out, 4), 0);
	assert_int_equal(kn_anomaly_poll(sc->a, (w - 50) * WINDOW_MS + 1000,
					 sc->out, 4), 1);
	assert_int_equal(sc->out[0].windows, 3);
	assert_int_equal(sc->out[0].started_at_ms, 20 * WINDOW_MS);
}

static void test_deployments_are_independent(void **state)
{
	struct scene *sc = *state;
	struct traffic slow = NORMAL;
	size_t n = 0;

	rng_seed(13);
	slow.latency = 300;
	for (int64_t w = 0; w < 40; w++) {
		window(sc->a, "a", w, &NORMAL);
		window(sc->a, "b", w, &NORMAL);
	}
	for (int64_t w = 40; w < 60; w++) {
		window(sc->a, "a", w, &slow);
		window(sc->a, "b", w, &NORMAL);
		n += kn_anomaly_poll(sc->a, (w + 1) * WINDOW_MS, sc->out + n,
				     16 - n);
	}
	assert_int_equal(n, 1);
	assert_string_equal(sc->out[0].deployment, "a");
}

static void test_poll_respects_max_and_keeps_the_rest(void **state)
{
	struct scene *sc = *state;
	char name[16];

	for (int d = 0; d < 5; d++) {
		snprintf(name, sizeof(name), "d%d", d);
		steady(sc->a, name, 0, 10, 100);
		steady(sc->a, name, 10, 13, 900);
	}
	assert_int_equal(kn_anomaly_poll(sc->a, 13 * WINDOW_MS, sc->out, 2), 2);
	assert_string_equal(sc->out[0].deployment, "d0");
	assert_string_equal(sc->out[1].deployment, "d1");
	assert_int_equal(kn_anomaly_poll(sc->a, 13 * WINDOW_MS, sc->out, 4), 3);
	assert_string_equal(sc->out[2].deployment, "d4");
	assert_int_equal(kn_anomaly_poll(sc->a, 13 * WINDOW_MS, sc->out, 4), 0);
}

static void test_bounds_on_names_and_deployments(void **state)
{
	struct scene *sc = *state;
	char name[80];

	/* 64 bytes does not fit deployment[64]: not tracked, no alert. */
	memset(name, 'x', 64);
	name[64] = '\0';
	steady(sc->a, name, 0, 10, 100);
	steady(sc->a, name, 10, 13, 900);
	assert_int_equal(kn_anomaly_poll(sc->a, 13 * WINDOW_MS, sc->out, 4), 0);
	/* Many deployments: all allocated, all freed (ASan checks). */
	for (int d = 0; d < KN_ANOMALY_MAX_DEPLOYMENTS + 10; d++) {
		snprintf(name, sizeof(name), "dep-%d", d);
		kn_anomaly_observe(sc->a, name, 0, 100, false, 10, NAN);
	}
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

KN_TEST_MAIN(NULL, NULL,
	cmocka_unit_test_setup_teardown(
		test_steady_noise_raises_nothing, setup, teardown),
	cmocka_unit_test_setup_teardown(
		test_latency_shift_raises_exactly_one, setup, teardown),
	cmocka_unit_test_setup_teardown(
		test_brief_spike_raises_nothing, setup, teardown),
	cmocka_unit_test_setup_teardown(
		test_error_rate_and_output_length, setup, teardown),
	cmocka_unit_test_setup_teardown(test_score_signal, setup,
					teardown),
	cmocka_unit_test_setup_teardown(test_warmup_is_respected, setup,
					teardown),
	cmocka_unit_test_setup_teardown(
		test_constant_series_uses_min_band, setup, teardown),
	cmocka_unit_test_setup_teardown(
		test_quiet_windows_are_skipped_and_poll_closes, setup,
		teardown),
	cmocka_unit_test_setup_teardown(
		test_deployments_are_independent, setup, teardown),
	cmocka_unit_test_setup_teardown(
		test_poll_respects_max_and_keeps_the_rest, setup,
		teardown),
	cmocka_unit_test_setup_teardown(
		test_bounds_on_names_and_deployments, setup, teardown),
	cmocka_unit_test(test_config_errors_name_the_field))
