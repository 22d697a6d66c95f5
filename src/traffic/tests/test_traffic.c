/*
 * Unit tests for the traffic table: windowed differences summed over
 * gateways, percentiles from merged histograms, restarts, expiry, the
 * bounds on what it holds, and reports it refuses whole.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "base/tests/testmain.h"
#include "traffic/traffic.h"

#define WINDOW 300000
#define T0 1764690000000LL

/* A report of one deployment with the gateway's usual three bounds
   (0.01, 0.1, 1 s) and counts per bucket c0..c3. */
static json_t *report(const char *instance, int64_t uptime_ms,
		      const char *dep, json_int_t requests, json_int_t errors,
		      json_int_t limited, json_int_t fallbacks, json_int_t c0,
		      json_int_t c1, json_int_t c2, json_int_t c3)
{
	return json_pack(
		"{s:s, s:I, s:[{s:s, s:I, s:I, s:I, s:I, s:I, s:I, s:[f,f,f], "
		"s:[I,I,I,I]}]}",
		"instance", instance, "uptime_ms", (json_int_t)uptime_ms,
		"deployments", "name", dep, "requests", requests, "errors",
		errors, "rate_limited", limited, "fallbacks", fallbacks,
		"upstream_errors", (json_int_t)0, "tokens", (json_int_t)7,
		"latency_bounds_s", 0.01, 0.1, 1.0, "latency_counts", c0, c1,
		c2, c3);
}

static int take(struct kn_traffic *t, json_t *doc, int64_t now,
		struct kn_error *err)
{
	int rc = kn_traffic_report(t, doc, now, err);

	json_decref(doc);
	return rc;
}

/* Take doc at now, which must be accepted. */
static void take_ok(struct kn_traffic *t, json_t *doc, int64_t now)
{
	struct kn_error err;

	assert_int_equal(take(t, doc, now, &err), 0);
}

static json_int_t num(const json_t *o, const char *k)
{
	return json_integer_value(json_object_get(o, k));
}

static double real(const json_t *o, const char *k)
{
	return json_real_value(json_object_get(o, k));
}

/* s's requests, errors, rate_limited and gateways are these. */
static void assert_counts(const json_t *s, json_int_t requests,
			  json_int_t errors, json_int_t limited,
			  json_int_t gateways)
{
	assert_non_null(s);
	assert_int_equal(num(s, "requests"), requests);
	assert_int_equal(num(s, "errors"), errors);
	assert_int_equal(num(s, "rate_limited"), limited);
	assert_int_equal(num(s, "gateways"), gateways);
}

/* Each test gets a store of its own. */
static int traffic_setup(void **state)
{
	*state = kn_traffic_new(WINDOW);
	return 0;
}

static int traffic_teardown(void **state)
{
	kn_traffic_free(*state);
	return 0;
}

#define STORE_TEST(f) \
	cmocka_unit_test_setup_teardown(f, traffic_setup, traffic_teardown)

static void a_fresh_gateway_counts_from_zero(void **state)
{
	struct kn_traffic *t = *state;
	json_t *s;

	assert_null(kn_traffic_summary(t, "chat", T0));
	/* Started 10 s ago: everything it counted is inside the window. */
	take_ok(t, report("gw1", 10000, "chat", 20, 1, 3, 2, 0, 10, 10, 0), T0);
	s = kn_traffic_summary(t, "chat", T0);
	assert_counts(s, 20, 1, 3, 1);
	assert_int_equal(num(s, "fallbacks"), 2);
	assert_int_equal(num(s, "tokens"), 7);
	assert_float_equal(real(s, "window_s"), 10.0, 1e-9);
	assert_float_equal(real(s, "requests_per_s"), 2.0, 1e-9);
	/* Half at or below 100 ms: the median is the 0.1 s bound. */
	assert_float_equal(real(s, "latency_p50_ms"), 100.0, 1e-6);
	/* p99: 19.8 of 20, in the (0.1, 1] bucket: 0.1 + 0.9 * 9.8/10. */
	assert_float_equal(real(s, "latency_p99_ms"), 982.0, 1e-6);
	assert_null(kn_traffic_summary(t, "other", T0));
	json_decref(s);
}

static void the_window_is_a_difference(void **state)
{
	struct kn_traffic *t = *state;
	json_t *s;
	int64_t now = T0;

	/* A gateway up for an hour: its first report has no baseline. */
	take_ok(t, report("gw1", 3600000, "chat", 1000, 0, 0, 0, 1000, 0, 0, 0), now);
	assert_null(kn_traffic_summary(t, "chat", now));
	/* Reports every second for 400 s, one request each. */
	for (int i = 1; i <= 400; i++) {
		now += 1000;
		take_ok(t,
			report("gw1", 3600000 + i * 1000, "chat", 1000 + i, 0,
			       0, 0, 1000, i, 0, 0),
			now);
	}
	s = kn_traffic_summary(t, "chat", now);
	/* Only what the window holds, from the sample at its start (kept
	   at most a sixteenth of the window early). */
	assert_in_range(num(s, "requests"), 300, 300 + WINDOW / 16 / 1000);
	assert_true(real(s, "window_s") >= 300.0);
	/* Everything in the window was in the (0.01, 0.1] bucket. */
	assert_true(real(s, "latency_p99_ms") > 10.0);
	assert_true(real(s, "latency_p99_ms") <= 100.0);
	json_decref(s);
	/* Silent for a window: gone. */
	assert_null(kn_traffic_summary(t, "chat", now + WINDOW + 1));
}

static void gateways_add_up(void **state)
{
	struct kn_traffic *t = *state;
	json_t *s;

	take_ok(t, report("gw1", 5000, "chat", 10, 0, 4, 0, 10, 0, 0, 0), T0);
	take_ok(t, report("gw2", 5000, "chat", 10, 2, 0, 1, 0, 0, 0, 10), T0);
	s = kn_traffic_summary(t, "chat", T0);
	assert_counts(s, 20, 2, 4, 2);
	/* Half under 10 ms, half past the last bound: p99 is that bound. */
	assert_float_equal(real(s, "latency_p50_ms"), 10.0, 1e-6);
	assert_float_equal(real(s, "latency_p99_ms"), 1000.0, 1e-6);
	json_decref(s);
}

static void a_restart_starts_the_series_again(void **state)
{
	struct kn_traffic *t = *state;
	json_t *s;

	take_ok(t, report("gw1", 1000, "chat", 50, 0, 0, 0, 50, 0, 0, 0), T0);
	/* The same instance with smaller counters, up for 2 s again. */
	take_ok(t, report("gw1", 2000, "chat", 5, 0, 0, 0, 5, 0, 0, 0),
		T0 + 60000);
	s = kn_traffic_summary(t, "chat", T0 + 60000);
	assert_int_equal(num(s, "requests"), 5);
	json_decref(s);
}

static void quantiles(void **state)
{
	const double b[] = {1, 2, 4};
	const uint64_t empty[] = {0, 0, 0, 0};
	const uint64_t c[] = {0, 4, 0, 0};
	const uint64_t over[] = {0, 0, 0, 3};

	(void)state;
	assert_true(kn_traffic_quantile(b, empty, 3, 0.5) < 0);
	assert_float_equal(kn_traffic_quantile(b, c, 3, 0.5), 1.5, 1e-9);
	assert_float_equal(kn_traffic_quantile(b, c, 3, 1.0), 2.0, 1e-9);
	assert_float_equal(kn_traffic_quantile(b, over, 3, 0.5), 4.0, 1e-9);
}

/* Bad reports are refused whole, naming the field; nothing is kept. */
static void hostile_reports_are_refused(void **state)
{
	struct kn_traffic *t = *state;
	struct kn_error err;
	static const char *const bad[][2] = {
		{"[]", ""},
		{"{\"instance\": \"a b\", \"uptime_ms\": 1, \"deployments\": []}",
		 "instance"},
		{"{\"instance\": \"a\", \"uptime_ms\": -1, \"deployments\": []}",
		 "uptime_ms"},
		{"{\"instance\": \"a\", \"uptime_ms\": 1, \"deployments\": {}}",
		 "deployments"},
		{"{\"instance\": \"a\", \"uptime_ms\": 1, \"deployments\": "
		 "[{\"name\": \"../x\"}]}",
		 "deployments"},
		{"{\"instance\": \"a\", \"uptime_ms\": 1, \"deployments\": "
		 "[{\"name\": \"x\", \"requests\": -4, \"errors\": 0, "
		 "\"rate_limited\": 0, \"fallbacks\": 0, \"upstream_errors\": "
		 "0, \"tokens\": 0, \"latency_bounds_s\": [], "
		 "\"latency_counts\": [0]}]}",
		 "deployments"},
		{"{\"instance\": \"a\", \"uptime_ms\": 1, \"deployments\": "
		 "[{\"name\": \"x\", \"requests\": 1, \"errors\": 0, "
		 "\"rate_limited\": 0, \"fallbacks\": 0, \"upstream_errors\": "
		 "0, \"tokens\": 0, \"latency_bounds_s\": [2, 1], "
		 "\"latency_counts\": [0, 0, 1]}]}",
		 "deployments"},
		{"{\"instance\": \"a\", \"uptime_ms\": 1, \"deployments\": "
		 "[{\"name\": \"x\", \"requests\": 1, \"errors\": 0, "
		 "\"rate_limited\": 0, \"fallbacks\": 0, \"upstream_errors\": "
		 "0, \"tokens\": 0, \"latency_bounds_s\": [1], "
		 "\"latency_counts\": [1]}]}",
		 "deployments"},
	};

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		json_t *doc = json_loads(bad[i][0], 0, NULL);

		assert_non_null(doc);
		assert_int_equal(take(t, doc, T0, &err), -EINVAL);
		assert_int_equal(err.code, KN_EINVAL);
		assert_string_equal(err.field, bad[i][1]);
	}
	assert_null(kn_traffic_summary(t, "x", T0));
}

/* A report of n deployments d0..d(n-1), one request each. */
static json_t *many(const char *instance, int n)
{
	json_t *doc = json_pack("{s:s, s:i, s:[]}", "instance", instance,
				"uptime_ms", 1, "deployments");

	for (int i = 0; i < n; i++) {
		json_t *r = report(instance, 1, "x", 1, 0, 0, 0, 1, 0, 0, 0);
		json_t *e = json_array_get(json_object_get(r, "deployments"),
					   0);
		char name[16];

		snprintf(name, sizeof(name), "d%d", i);
		json_object_set_new(e, "name", json_string(name));
		json_array_append(json_object_get(doc, "deployments"), e);
		json_decref(r);
	}
	return doc;
}

/* Series are kept in name order: each is found whatever order they
   came in, and one dropped for silence leaves the others found. */
static void each_of_many_is_found(void **state)
{
	struct kn_traffic *t = *state;
	json_t *doc = many("g", 300), *deps = json_object_get(doc, "deployments");
	json_t *late = many("g", 0);
	char name[16];

	/* Backwards, and d7 twice (its later entry counts). */
	for (size_t i = 0; i < json_array_size(deps) / 2; i++) {
		size_t j = json_array_size(deps) - 1 - i;
		json_t *a = json_incref(json_array_get(deps, i));

		json_array_set(deps, i, json_array_get(deps, j));
		json_array_set_new(deps, j, a);
	}
	json_array_append_new(deps, json_deep_copy(json_array_get(deps, 0)));
	json_object_set_new(json_array_get(deps, 300), "name",
			    json_string("d7"));
	json_object_set_new(json_array_get(deps, 300), "requests",
			    json_integer(5));
	/* d150's entry (backwards: at 149), for a later report. */
	json_array_append_new(json_object_get(late, "deployments"),
			      json_deep_copy(json_array_get(deps, 149)));
	take_ok(t, doc, T0);
	for (int i = 0; i < 300; i++) {
		json_t *s;

		snprintf(name, sizeof(name), "d%d", i);
		s = kn_traffic_summary(t, name, T0);
		assert_non_null(s);
		assert_int_equal(num(s, "requests"), i == 7 ? 5 : 1);
		json_decref(s);
	}
	/* Later, only d150 reports again; past the window the rest go. */
	take_ok(t, late, T0 + WINDOW - 1);
	take_ok(t, many("other", 0), T0 + WINDOW + 1);
	assert_null(kn_traffic_summary(t, "d0", T0 + WINDOW + 1));
	assert_null(kn_traffic_summary(t, "d299", T0 + WINDOW + 1));
	{
		json_t *s = kn_traffic_summary(t, "d150", T0 + WINDOW + 1);

		assert_non_null(s);
		json_decref(s);
	}
}

static void what_it_holds_is_bounded(void **state)
{
	struct kn_traffic *t = kn_traffic_new(WINDOW);
	struct kn_error err;
	char id[16];

	(void)state;
	for (int i = 0; i < KN_TRAFFIC_GATEWAYS_MAX; i++) {
		snprintf(id, sizeof(id), "gw%d", i);
		take_ok(t, many(id, 1), T0);
	}
	assert_int_not_equal(take(t, many("one-more", 1), T0, &err), 0);
	assert_int_equal(err.code, KN_ELIMIT);
	assert_string_equal(err.field, "instance");
	/* Once the others have been silent for a window, it is taken. */
	take_ok(t, many("one-more", 1), T0 + WINDOW + 1);
	kn_traffic_free(t);

	/* Gateway and deployment pairs: one gateway fills the table, the
	   next one's new pair is refused, the first's known ones are not. */
	t = kn_traffic_new(WINDOW);
	take_ok(t, many("a", KN_TRAFFIC_SERIES_MAX), T0);
	assert_int_not_equal(take(t, many("b", 1), T0, &err), 0);
	assert_int_equal(err.code, KN_ELIMIT);
	assert_string_equal(err.field, "deployments");
	take_ok(t, many("a", 10), T0 + 1000);
	/* More entries than the table could ever hold: a bad report. */
	assert_int_equal(take(t, many("c", KN_TRAFFIC_SERIES_MAX + 1), T0,
			      &err),
			 -EINVAL);
	kn_traffic_free(t);
}

KN_TEST_MAIN(NULL, NULL,
	STORE_TEST(a_fresh_gateway_counts_from_zero),
	STORE_TEST(the_window_is_a_difference),
	STORE_TEST(gateways_add_up),
	STORE_TEST(a_restart_starts_the_series_again),
	cmocka_unit_test(quantiles),
	STORE_TEST(hostile_reports_are_refused),
	STORE_TEST(each_of_many_is_found),
	cmocka_unit_test(what_it_holds_is_bounded))
