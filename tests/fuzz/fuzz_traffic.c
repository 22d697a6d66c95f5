/*
 * libFuzzer harness for the gateways' traffic reports as the server takes
 * them (kn_traffic_report): any bytes, read as JSON, are either refused
 * whole (then a summary is as it was) or taken; twice, a window apart in
 * time, and every summary has its percentiles in order and counts that
 * sum what was reported.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "traffic/traffic.h"

#define T0 1764690000000LL
#define WINDOW 300000

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(const struct kn_traffic *t, const json_t *doc, int64_t now)
{
	const json_t *deps = json_object_get(doc, "deployments"), *e;
	size_t i;

	json_array_foreach(deps, i, e) {
		const char *name = json_string_value(json_object_get(e, "name"));
		json_t *s = name ? kn_traffic_summary(t, name, now) : NULL;
		json_t *p50, *p99;

		if (!s)
			continue;
		p50 = json_object_get(s, "latency_p50_ms");
		p99 = json_object_get(s, "latency_p99_ms");
		if (json_is_null(p50) != json_is_null(p99) ||
		    (json_is_real(p50) &&
		     json_real_value(p50) > json_real_value(p99) + 1e-9) ||
		    json_integer_value(json_object_get(s, "requests")) < 0 ||
		    json_integer_value(json_object_get(s, "gateways")) < 1)
			abort();
		json_decref(s);
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct kn_traffic *t = kn_traffic_new(WINDOW);
	struct kn_error err;
	json_t *doc = json_loadb((const char *)data, size, 0, NULL);

	if (kn_traffic_report(t, doc, T0, &err) == 0) {
		check(t, doc, T0);
		/* The same again later: a restart or a difference. */
		if (kn_traffic_report(t, doc, T0 + WINDOW / 2, &err) != 0)
			abort();
		check(t, doc, T0 + WINDOW / 2);
	} else if (kn_traffic_summary(t, "chat", T0)) {
		abort();
	}
	json_decref(doc);
	kn_traffic_free(t);
	return 0;
}
