/*
 * Unit tests for the gateway's traffic report: what it counts per
 * deployment, and that the server's table (src/traffic) takes it as
 * sent: the two ends of POST /v1/gateway/metrics agree.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "base/tests/testmain.h"
#include "gateway/internal.h"
#include "traffic/traffic.h"

static void observe(struct gw_metrics *m, const char *dep, int status,
		    double ms, bool fallback, bool upstream_error)
{
	struct gw_observation o = {
		.deployment = dep,
		.key = "app",
		.status = status,
		.latency_ms = ms,
		.tokens = status == 200 ? 10 : 0,
		.fallback = fallback,
		.upstream_error = upstream_error,
	};

	gw_metrics_observe(m, &o);
}

static json_int_t num(const json_t *o, const char *k)
{
	return json_integer_value(json_object_get(o, k));
}

static void the_report_counts_and_the_server_takes_it(void **state)
{
	struct gw_metrics *m = gw_metrics_new();
	struct kn_traffic *t = kn_traffic_new(300000);
	struct kn_error err;
	json_t *doc, *deps, *chat, *counts, *s;
	json_int_t in_buckets = 0;
	size_t i;
	json_t *c;

	(void)state;
	observe(m, "chat", 200, 3, false, false);
	observe(m, "chat", 200, 40, false, false);
	observe(m, "chat", 200, 700, true, false);
	observe(m, "chat", 429, 1, false, false);
	observe(m, "chat", 502, 20, false, true);
	/* A request that named no deployment the gateway knows. */
	observe(m, "", 404, 1, false, false);
	doc = gw_metrics_report(m);
	deps = json_object_get(doc, "deployments");
	assert_int_equal(json_array_size(deps), 1);
	chat = json_array_get(deps, 0);
	assert_string_equal(json_string_value(json_object_get(chat, "name")),
			    "chat");
	assert_int_equal(num(chat, "requests"), 5);
	assert_int_equal(num(chat, "errors"), 1);
	assert_int_equal(num(chat, "rate_limited"), 1);
	assert_int_equal(num(chat, "fallbacks"), 1);
	assert_int_equal(num(chat, "upstream_errors"), 1);
	assert_int_equal(num(chat, "tokens"), 30);
	counts = json_object_get(chat, "latency_counts");
	assert_int_equal(json_array_size(counts),
			 json_array_size(json_object_get(chat,
							 "latency_bounds_s")) + 1);
	json_array_foreach(counts, i, c)
		in_buckets += json_integer_value(c);
	assert_int_equal(in_buckets, 5);

	json_object_set_new(doc, "instance", json_string("0123456789abcdef"));
	json_object_set_new(doc, "uptime_ms", json_integer(2000));
	assert_int_equal(kn_traffic_report(t, doc, 1764690000000LL, &err), 0);
	s = kn_traffic_summary(t, "chat", 1764690000000LL);
	assert_non_null(s);
	assert_int_equal(num(s, "requests"), 5);
	assert_int_equal(num(s, "rate_limited"), 1);
	/* The median of 1, 3, 20, 40 and 700 ms: in the (10, 25] ms bucket. */
	assert_true(json_real_value(json_object_get(s, "latency_p50_ms")) > 10);
	assert_true(json_real_value(json_object_get(s, "latency_p50_ms")) <=
		    25);
	json_decref(s);
	json_decref(doc);
	kn_traffic_free(t);
	gw_metrics_free(m);
}

KN_TEST_MAIN(NULL, NULL,
	cmocka_unit_test(the_report_counts_and_the_server_takes_it))
