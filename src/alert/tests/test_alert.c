/*
 * Unit tests for alert/: the exposition reader, the rules reader (exact
 * file:line:column messages), expressions, the history's bounds, and the
 * evaluator on scripted series (for:, dynamic bands, resolution).
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

#include "alert/alert.h"
#include "base/tests/testmain.h"

/* ---- exposition ---- */

static const char EXPO[] =
	"# HELP DCGM_FI_DEV_GPU_TEMP GPU temperature (in C).\n"
	"# TYPE DCGM_FI_DEV_GPU_TEMP gauge\n"
	"DCGM_FI_DEV_GPU_TEMP{gpu=\"0\",UUID=\"GPU-1\",modelName=\"H100\"} 41\n"
	"DCGM_FI_DEV_GPU_TEMP{gpu=\"1\",UUID=\"GPU-2\",} 43.5 1700000000000\n"
	"\n"
	"# a free comment\n"
	"node_filesystem_avail_bytes{mountpoint=\"/a \\\"b\\\"\\\\c\\nd\"} 1e+09\n"
	"weird NaN\n"
	"  up   +Inf\n"
	"down -Inf\n"
	"no_labels{} 0";

static void test_expo_parses_every_form(void **state)
{
	struct kn_expo_sample *s = NULL;
	struct kn_error err;
	size_t n = 0;

	(void)state;
	assert_int_equal(kn_expo_parse(EXPO, strlen(EXPO), &s, &n, &err), 0);
	assert_int_equal(n, 7);
	assert_string_equal(s[0].metric, "DCGM_FI_DEV_GPU_TEMP");
	assert_int_equal(s[0].n_labels, 3);
	/* Sorted by name: UUID < gpu < modelName in byte order. */
	assert_string_equal(s[0].labels[0].name, "UUID");
	assert_string_equal(s[0].labels[1].name, "gpu");
	assert_string_equal(s[0].labels[1].value, "0");
	assert_true(s[0].value == 41);
	assert_int_equal(s[0].timestamp_ms, 0);
	assert_true(s[1].value == 43.5);
	assert_int_equal(s[1].n_labels, 2);
	assert_int_equal(s[1].timestamp_ms, 1700000000000LL);
	assert_string_equal(s[2].labels[0].value, "/a \"b\"\\c\nd");
	assert_true(s[2].value == 1e9);
	assert_true(isnan(s[3].value));
	assert_true(isinf(s[4].value) && s[4].value > 0);
	assert_true(isinf(s[5].value) && s[5].value < 0);
	assert_string_equal(s[6].metric, "no_labels");
	assert_int_equal(s[6].n_labels, 0);
	kn_expo_free(s, n);
}

static void expo_error(const char *text, const char *want)
{
	struct kn_expo_sample *s = (void *)0x1;
	struct kn_error err;
	size_t n = 99;

	assert_int_not_equal(kn_expo_parse(text, strlen(text), &s, &n, &err), 0);
	assert_string_equal(err.message, want);
	assert_ptr_equal(s, (void *)0x1);
	assert_int_equal(n, 99);
}

static void test_expo_errors_name_line_and_column(void **state)
{
	(void)state;
	expo_error("a 1\nb{x=\"1\" 2\n", "line 2:9: expected ',' or '}' after a label");
	expo_error("a{x=\"\\t\"} 1", "line 1:6: unknown escape in a label value "
				      "(only \\\\, \\\" and \\n)");
	expo_error("a{x=\"1\",x=\"2\"} 1", "line 1:9: label given twice");
	expo_error("a 12abc", "line 1:3: value is not a number");
	expo_error("a 1 2 3", "line 1:7: unexpected text after the sample");
	expo_error("a infinity", "line 1:3: value is not a number");
	expo_error("# TYPE a gauges\n", "line 1:10: unknown metric type (counter, "
					"gauge, histogram, summary or untyped)");
	expo_error("9a 1", "line 1:1: expected a metric name");
	expo_error("a{x=\"1", "line 1:7: label value not closed with '\"'");
	expo_error("a", "line 1:2: expected a value");
	expo_error("a 1 1.5", "line 1:5: timestamp is not an integer (ms)");
}

/* ---- rules ---- */

static struct kn_alert_rules *rules_ok(const char *text)
{
	struct kn_alert_rules *r = NULL;
	struct kn_error err;

	if (kn_alert_rules_parse(text, strlen(text), "r.yaml", &r, &err) != 0)
		fail_msg("unexpected error: %s", err.message);
	return r;
}

static void rules_error(const char *text, const char *want)
{
	struct kn_alert_rules *r = (void *)0x1;
	struct kn_error err;

	assert_int_not_equal(kn_alert_rules_parse(text, strlen(text), "r.yaml",
						  &r, &err),
			     0);
	assert_string_equal(err.message, want);
	assert_ptr_equal(r, (void *)0x1);
}

static void test_default_rules_load(void **state)
{
	struct kn_alert_rules *r = NULL;
	struct kn_error err;

	(void)state;
	if (kn_alert_rules_load(getenv("KILN_TEST_RULES"), &r, &err) != 0)
		fail_msg("%s", err.message);
	assert_int_equal(r->n, 6);
	assert_string_equal(r->rules[0].name, "GpuDoubleBitEccErrors");
	assert_int_equal(r->rules[0].severity, KN_ALERT_CRITICAL);
	assert_int_equal(r->rules[2].for_ms, 120000);
	assert_true(kn_alert_rules_use(r, "DCGM_FI_DEV_FB_FREE"));
	assert_true(kn_alert_rules_use(r, "node_filesystem_size_bytes"));
	assert_false(kn_alert_rules_use(r, "node_cpu_seconds_total"));
	kn_alert_rules_free(r);
}

static void test_rules_fields(void **state)
{
	struct kn_alert_rules *r;

	(void)state;
	r = rules_ok("rules:\n"
		     "  - name: a\n"
		     "    expr: m{x=\"1\"}\n"
		     "    op: ge\n"
		     "    value: 2.5\n"
		     "    for: 90s\n"
		     "    severity: info\n"
		     "  - name: b\n"
		     "    expr: m\n"
		     "    band: {window: 10m, k: 3}\n");
	assert_int_equal(r->n, 2);
	assert_int_equal(r->rules[0].op, KN_OP_GE);
	assert_true(r->rules[0].value == 2.5);
	assert_int_equal(r->rules[0].for_ms, 90000);
	assert_int_equal(r->rules[0].severity, KN_ALERT_INFO);
	assert_string_equal(r->rules[0].summary, "");
	assert_true(r->rules[1].dynamic);
	assert_int_equal(r->rules[1].band_window_ms, 600000);
	assert_true(r->rules[1].band_k == 3);
	assert_int_equal(r->rules[1].band_min_samples, 5);
	assert_int_equal(r->rules[1].severity, KN_ALERT_WARNING);
	kn_alert_rules_free(r);
}

static void test_rules_errors(void **state)
{
	(void)state;
	rules_error("", "r.yaml:1:1: empty; expected a mapping with a \"rules\" "
			"list");
	rules_error("rules:\n  - name: a\n    expr: m\n    opp: \">\"\n",
		    "r.yaml:4:5: rules[0]: unknown field \"opp\"; did you mean "
		    "\"op\"?");
	rules_error("rules:\n  - name: a\n    expr: m{x=~\"(\"}\n    op: \">\"\n"
		    "    value: 1\n",
		    "r.yaml:3:16: rules[0].expr: bad regular expression: "
		    "Unmatched ( or \\(");
	rules_error("rules:\n  - name: a\n    expr: m + \n    op: \">\"\n"
		    "    value: 1\n",
		    "r.yaml:3:14: rules[0].expr: expression ends too soon");
	rules_error("rules:\n  - name: a\n    expr: m{x=\"1\"} 5\n    op: \">\"\n"
		    "    value: 1\n",
		    "r.yaml:3:20: rules[0].expr: unexpected \"5\"; expected an "
		    "operator (+ - * / &) or the end");
	rules_error("rules:\n  - name: a\n    expr: m\n    op: \">\"\n"
		    "    value: \"1\"\n",
		    "r.yaml:5:12: rules[0].value: must be a number; got \"1\"");
	rules_error("rules:\n  - name: a\n    expr: m\n    op: \"=>\"\n"
		    "    value: 1\n",
		    "r.yaml:4:9: rules[0].op: must be one of > >= < <= == != "
		    "(quote them in YAML: \">\") or gt ge lt le eq ne; got \"=>\"");
	rules_error("rules:\n  - name: a\n    expr: m\n    band: {window: 5m, "
		    "k: 0}\n",
		    "r.yaml:4:27: rules[0].band.k: must be a number > 0");
	rules_error("rules:\n  - name: a\n    expr: m\n    band: {k: 2}\n",
		    "r.yaml:4:11: rules[0].band: window is required (e.g. 30m)");
	rules_error("rules:\n  - name: a\n    expr: m\n    op: \">\"\n"
		    "    value: 1\n    band: {window: 5m, k: 2}\n",
		    "r.yaml:4:9: rules[0]: a rule has either op and value (a "
		    "static threshold) or band (a dynamic one), not both");
	rules_error("rules:\n  - name: a\n    expr: m\n    op: \">\"\n"
		    "    value: 1\n    for: soon\n",
		    "r.yaml:6:10: rules[0].for: must be a duration such as 30s, "
		    "5m or 1h; got \"soon\"");
	rules_error("rules:\n  - name: a\n    expr: m\n    op: \">\"\n"
		    "    value: 1\n  - name: a\n    expr: m\n    op: \">\"\n"
		    "    value: 2\n",
		    "r.yaml:6:11: rules[1].name: rule a is defined twice (first "
		    "as rules[0])");
	rules_error("rules:\n  - name: a\n    expr: m\n    op: \">\"\n"
		    "    value: 1\n    severity: loud\n",
		    "r.yaml:6:15: rules[0].severity: must be info, warning or "
		    "critical; got \"loud\"");
	rules_error("rules:\n  - name: a\n    expr: m\n    op: \">\"\n"
		    "    value: 1\n    summary: \"x {{ $labels }}\"\n",
		    "r.yaml:6:17: rules[0].summary: a placeholder is {{ "
		    "$labels.NAME }} or {{ $value }}");
	rules_error("rules:\n  - name: a\n    expr: m\n",
		    "r.yaml:2:5: rules[0]: a condition is required: op and "
		    "value, or band");
	rules_error("rules: [\n", "r.yaml:2:1: invalid YAML: flow sequence "
				  "without a closing bracket");
}

/* ---- evaluation on scripted series ---- */

#define S(x) ((int64_t)(x) * 1000)

/* One scrape: "name{labels} value" lines parsed and added at t. */
static void scrape(struct kn_alert_history *h, const struct kn_alert_rules *r,
		   const char *text, int64_t t)
{
	struct kn_expo_sample *s = NULL;
	struct kn_error err;
	size_t n = 0;

	if (kn_expo_parse(text, strlen(text), &s, &n, &err) != 0)
		fail_msg("%s", err.message);
	kn_alert_history_add(h, r, s, n, "node-1", t);
	kn_expo_free(s, n);
}

struct seen {
	size_t n;
	enum kn_alert_state state[8];
	char summary[8][256];
	char fingerprint[8][256];
	double value[8];
};

static void eval(struct kn_alert_eval *ev, struct kn_alert_history *h,
		 int64_t t, struct seen *out)
{
	struct kn_alert_transition *tr = NULL;
	size_t n = 0;

	memset(out, 0, sizeof(*out));
	kn_alert_eval_run(ev, h, t, &tr, &n);
	assert_true(n <= 8);
	out->n = n;
	for (size_t i = 0; i < n; i++) {
		out->state[i] = tr[i].state;
		snprintf(out->summary[i], sizeof(out->summary[i]), "%s",
			 tr[i].summary);
		snprintf(out->fingerprint[i], sizeof(out->fingerprint[i]), "%s",
			 tr[i].fingerprint);
		out->value[i] = tr[i].value;
	}
	kn_alert_transitions_free(tr, n);
}

/* Rules, their history and an evaluator, driven one scrape at a time. */
struct scripted {
	struct kn_alert_rules *r;
	struct kn_alert_history *h;
	struct kn_alert_eval *ev;
	struct seen s;
};

/* RULES with an hour of history kept at step_ms between points. */
static void scripted_open(struct scripted *a, const char *rules,
			  int64_t step_ms)
{
	a->r = rules_ok(rules);
	a->h = kn_alert_history_new(S(3600), step_ms);
	a->ev = kn_alert_eval_new(a->r);
}

/* One scrape of TEXT at t, then one evaluation at t: a->s is what it made. */
static void step(struct scripted *a, const char *text, int64_t t)
{
	scrape(a->h, a->r, text, t);
	eval(a->ev, a->h, t, &a->s);
}

static void scripted_close(struct scripted *a)
{
	kn_alert_eval_free(a->ev);
	kn_alert_history_free(a->h);
	kn_alert_rules_free(a->r);
}

static void test_static_threshold_with_for(void **state)
{
	static const char rules[] =
		"rules:\n"
		"  - name: Hot\n"
		"    expr: temp{gpu=~\"0|1\"}\n"
		"    op: \">\"\n"
		"    value: 80\n"
		"    for: 30s\n"
		"    summary: \"GPU {{ $labels.gpu }} at {{ $value }}C\"\n";
	struct scripted a;

	(void)state;
	scripted_open(&a, rules, S(60));
	step(&a, "temp{gpu=\"0\"} 70\ntemp{gpu=\"1\"} 85\ntemp{gpu=\"2\"} 99\n",
	     S(0));
	assert_int_equal(a.s.n, 1);
	assert_int_equal(a.s.state[0], KN_ALERT_PENDING);
	assert_string_equal(a.s.fingerprint[0],
			    "Hot{gpu=\"1\",instance=\"node-1\"}");
	step(&a, "temp{gpu=\"0\"} 70\ntemp{gpu=\"1\"} 86\n", S(15));
	assert_int_equal(a.s.n, 0); /* still pending: 15s < 30s */
	step(&a, "temp{gpu=\"0\"} 90\ntemp{gpu=\"1\"} 87\n", S(30));
	assert_int_equal(a.s.n, 2);
	assert_int_equal(a.s.state[0], KN_ALERT_PENDING); /* gpu 0, new */
	assert_string_equal(a.s.summary[0], "GPU 0 at 90C");
	assert_int_equal(a.s.state[1], KN_ALERT_FIRING);  /* gpu 1, 30s */
	assert_string_equal(a.s.summary[1], "GPU 1 at 87C");
	/* gpu 0 drops before its for: elapses: forgotten, no transition. */
	step(&a, "temp{gpu=\"0\"} 60\ntemp{gpu=\"1\"} 88\n", S(45));
	assert_int_equal(a.s.n, 0);
	step(&a, "temp{gpu=\"0\"} 60\ntemp{gpu=\"1\"} 50\n", S(60));
	assert_int_equal(a.s.n, 1);
	assert_int_equal(a.s.state[0], KN_ALERT_RESOLVED);
	assert_string_equal(a.s.summary[0], "GPU 1 at 88C");
	scripted_close(&a);
}

static void test_vanished_series_resolves(void **state)
{
	static const char rules[] =
		"rules:\n  - name: X\n    expr: xid\n"
		"    op: \"!=\"\n    value: 0\n";
	struct scripted a;

	(void)state;
	scripted_open(&a, rules, S(30));
	step(&a, "xid 79\n", S(0));
	assert_int_equal(a.s.n, 1);
	assert_int_equal(a.s.state[0], KN_ALERT_FIRING); /* for: 0 */
	assert_true(a.s.value[0] == 79);
	step(&a, "other 1\n", S(15));
	assert_int_equal(a.s.n, 0); /* its point is still within the lookback */
	step(&a, "other 1\n", S(31));
	assert_int_equal(a.s.n, 1);
	assert_int_equal(a.s.state[0], KN_ALERT_RESOLVED);
	scripted_close(&a);
}

static void test_ratio_and_bitmask(void **state)
{
	static const char rules[] =
		"rules:\n"
		"  - name: Full\n"
		"    expr: used / (used + free)\n"
		"    op: \">\"\n    value: 0.95\n"
		"    summary: \"{{ $labels.gpu }} {{ $value }}\"\n"
		"  - name: Thermal\n"
		"    expr: reasons & 0x60\n"
		"    op: \"!=\"\n    value: 0\n"
		"  - name: Neg\n"
		"    expr: -used * 2 + 1\n"
		"    op: \"<\"\n    value: -195\n";
	struct scripted a;

	(void)state;
	scripted_open(&a, rules, S(60));
	step(&a,
	     "used{gpu=\"0\"} 96\nfree{gpu=\"0\"} 4\n"
	     "used{gpu=\"1\"} 10\nfree{gpu=\"1\"} 90\n"
	     "used{gpu=\"2\"} 99\n" /* no free: no pair, no result */
	     "reasons{gpu=\"0\"} 4\nreasons{gpu=\"1\"} 65\n",
	     S(0));
	assert_int_equal(a.s.n, 3);
	assert_string_equal(a.s.fingerprint[0],
			    "Full{gpu=\"0\",instance=\"node-1\"}");
	assert_string_equal(a.s.summary[0], "0 0.96");
	assert_string_equal(a.s.fingerprint[1],
			    "Thermal{gpu=\"1\",instance=\"node-1\"}");
	assert_true(a.s.value[1] == 64);
	assert_string_equal(a.s.fingerprint[2],
			    "Neg{gpu=\"2\",instance=\"node-1\"}");
	scripted_close(&a);
}

static void test_dynamic_band(void **state)
{
	static const char rules[] =
		"rules:\n"
		"  - name: Odd\n"
		"    expr: power\n"
		"    band: {window: 5m, k: 3, min_samples: 4}\n";
	static const double steady[] = {300, 302, 298, 301, 299, 300};
	char line[64];
	struct scripted a;
	int64_t t = 0;

	(void)state;
	scripted_open(&a, rules, S(60));
	/* Too few earlier values: no verdict even for a wild first value. */
	step(&a, "power 300\n", t);
	assert_int_equal(a.s.n, 0);
	for (size_t i = 0; i < sizeof(steady) / sizeof(steady[0]); i++) {
		t += S(15);
		snprintf(line, sizeof(line), "power %g\n", steady[i]);
		step(&a, line, t);
		assert_int_equal(a.s.n, 0);
	}
	/* mean ~300, stddev ~1.3: 303 is inside 3 sigma, 320 is not. */
	t += S(15);
	step(&a, "power 303\n", t);
	assert_int_equal(a.s.n, 0);
	t += S(15);
	step(&a, "power 320\n", t);
	assert_int_equal(a.s.n, 1);
	assert_int_equal(a.s.state[0], KN_ALERT_FIRING);
	t += S(15);
	step(&a, "power 300\n", t);
	assert_int_equal(a.s.n, 1);
	assert_int_equal(a.s.state[0], KN_ALERT_RESOLVED);
	scripted_close(&a);
}

static void test_history_bounds(void **state)
{
	struct kn_alert_rules *r = rules_ok("rules:\n  - name: A\n    expr: m\n"
					    "    op: \">\"\n    value: 0\n");
	struct kn_alert_history *h = kn_alert_history_new(S(60), S(30));
	char line[64];

	(void)state;
	scrape(h, r, "m{job=\"1\"} 1\nignored 1\n", S(0));
	assert_int_equal(kn_alert_history_series(h), 1);
	/* A series with no point inside the retention is dropped. */
	for (int i = 2; i <= 10; i++) {
		snprintf(line, sizeof(line), "m{job=\"%d\"} 1\n", i);
		scrape(h, r, line, S(i * 20));
	}
	assert_int_equal(kn_alert_history_series(h), 4);
	kn_alert_history_free(h);
	kn_alert_rules_free(r);
}

KN_TEST_MAIN(NULL, NULL,
	cmocka_unit_test(test_expo_parses_every_form),
	cmocka_unit_test(test_expo_errors_name_line_and_column),
	cmocka_unit_test(test_default_rules_load),
	cmocka_unit_test(test_rules_fields),
	cmocka_unit_test(test_rules_errors),
	cmocka_unit_test(test_static_threshold_with_for),
	cmocka_unit_test(test_vanished_series_resolves),
	cmocka_unit_test(test_ratio_and_bitmask),
	cmocka_unit_test(test_dynamic_band),
	cmocka_unit_test(test_history_bounds))
