/*
 * Unit tests for the gateway's pure parts: the route table (parsing,
 * errors naming the field, key matching), token buckets, the limiter's
 * exact counts, quota day/month rollover on an injected clock, and the
 * counters' save/load round trip.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/tests/testmain.h"
#include "gateway/gateway.h"

/* sha256("sk-one") */
#define SK_ONE_HASH \
	"456f1612bd25c6c8455039437bf441f43aa3b7d1c0b0047c712d5036dfebef0d"

/* 2026-12-31T23:59:59Z and one second later. */
#define NYE_MS 1798761599000LL
#define NEW_YEAR_MS 1798761600000LL

static char *doc_text(const char *deployments, const char *keys)
{
	return kn_asprintf("{\"generation\": 4, \"deployments\": [%s], "
			   "\"keys\": [%s]}",
			   deployments, keys);
}

#define CHAT                                                              \
	"{\"name\": \"chat\", \"model\": \"/m\", \"fallback\": \"small\"," \
	" \"limits\": {\"rpm\": 100, \"tpm\": 0}," \
	" \"replicas\": [{\"replica\": 0, \"address\": \"127.0.0.1:4100\"," \
	" \"zone\": \"zone-1\", \"ready\": true}," \
	" {\"replica\": 1, \"address\": \"[::1]:4101\", \"ready\": false}]}," \
	"{\"name\": \"small\", \"model\": null, \"fallback\": null," \
	" \"replicas\": []}"

static struct kn_gw_config *parse_ok(const char *deployments,
				     const char *keys)
{
	char *text = doc_text(deployments, keys);
	struct kn_gw_config *cfg = NULL;
	struct kn_error err = {0};
	int rc = kn_gw_config_parse_text(text, strlen(text), &cfg, &err);

	if (rc < 0)
		fail_msg("%s", err.message);
	free(text);
	return cfg;
}

static void expect_error(const char *deployments, const char *keys,
			 const char *field)
{
	char *text = doc_text(deployments, keys);
	struct kn_gw_config *cfg = NULL;
	struct kn_error err = {0};

	assert_int_equal(kn_gw_config_parse_text(text, strlen(text), &cfg,
						 &err),
			 -EINVAL);
	assert_null(cfg);
	if (!strstr(err.message, field))
		fail_msg("wanted \"%s\" in \"%s\"", field, err.message);
	free(text);
}

static void test_config_parses(void **state)
{
	struct kn_gw_config *cfg = parse_ok(
		CHAT, "{\"name\": \"app1\", \"hash\": \"" SK_ONE_HASH "\","
		      " \"deployments\": [\"chat\"], \"rpm\": 600,"
		      " \"tpm\": 100000, \"quota_day\": 1000000,"
		      " \"quota_month\": 0}");
	const struct kn_gw_deployment *d;
	const struct kn_gw_key *k;
	(void)state;

	assert_int_equal(cfg->generation, 4);
	assert_int_equal(cfg->n_deployments, 2);
	d = kn_gw_config_deployment(cfg, "chat");
	assert_non_null(d);
	assert_string_equal(d->fallback, "small");
	assert_int_equal(d->rpm, 100);
	assert_int_equal(d->n_replicas, 2);
	assert_string_equal(d->replicas[0].host, "127.0.0.1");
	assert_int_equal(d->replicas[0].port, 4100);
	assert_string_equal(d->replicas[0].zone, "zone-1");
	assert_true(d->replicas[0].ready);
	assert_string_equal(d->replicas[1].host, "::1");
	assert_false(d->replicas[1].ready);
	assert_string_equal(kn_gw_config_deployment(cfg, "small")->fallback,
			    "");
	assert_null(kn_gw_config_deployment(cfg, "nope"));

	k = kn_gw_config_key(cfg, "sk-one", 6);
	assert_non_null(k);
	assert_string_equal(k->name, "app1");
	assert_int_equal(k->quota_day, 1000000);
	assert_true(kn_gw_key_allows(k, "chat"));
	assert_false(kn_gw_key_allows(k, "small"));
	assert_null(kn_gw_config_key(cfg, "sk-onf", 6));
	assert_null(kn_gw_config_key(cfg, "sk-on", 5));
	kn_gw_config_unref(kn_gw_config_ref(cfg));
	kn_gw_config_unref(cfg);
}

static void test_config_errors_name_the_field(void **state)
{
	char *text;
	struct kn_gw_config *cfg = NULL;
	struct kn_error err;
	(void)state;

	text = kn_xstrdup("{\"deployments\": [], \"keys\": []}");
	assert_int_equal(kn_gw_config_parse_text(text, strlen(text), &cfg,
						 &err),
			 -EINVAL);
	assert_string_equal(err.field, "generation");
	free(text);
	text = kn_xstrdup("{\"generation\": 1,");
	assert_int_equal(kn_gw_config_parse_text(text, strlen(text), &cfg,
						 &err),
			 -EINVAL);
	assert_non_null(strstr(err.message, "not valid JSON"));
	free(text);

	expect_error("{\"name\": 7}", "", "deployments[0].name");
	expect_error("{\"name\": \"a\\\"b\"}", "", "deployments[0].name");
	expect_error(CHAT ", {\"name\": \"chat\"}", "", "deployments[2].name");
	expect_error("{\"name\": \"a\", \"fallback\": \"b\"}", "",
		     "deployments[0].fallback");
	expect_error("{\"name\": \"a\", \"fallback\": \"a\"}", "",
		     "deployments[0].fallback");
	expect_error("{\"name\": \"a\", \"limits\": {\"rpm\": -1}}", "",
		     "deployments[0].limits.rpm");
	expect_error("{\"name\": \"a\", \"replicas\": [{\"address\": "
		     "\"h:0\", \"ready\": true}]}",
		     "", "deployments[0].replicas[0].address");
	expect_error("{\"name\": \"a\", \"replicas\": [{\"address\": "
		     "\"nohost\", \"ready\": true}]}",
		     "", "deployments[0].replicas[0].address");
	expect_error("{\"name\": \"a\", \"replicas\": [{\"address\": "
		     "\"h:1\"}]}",
		     "", "deployments[0].replicas[0].ready");
	expect_error(CHAT, "{\"name\": \"k\", \"hash\": \"ABC\","
			   " \"deployments\": []}",
		     "keys[0].hash");
	/* A key's name is a metric label: no quote may end it early. */
	expect_error(CHAT, "{\"name\": \"k\\\"} 1\", \"hash\": \""
			   SK_ONE_HASH "\", \"deployments\": []}",
		     "keys[0].name");
	expect_error(CHAT, "{\"name\": \"k\", \"hash\": \"" SK_ONE_HASH "\","
			   " \"deployments\": [\"chat\", \"other\"]}",
		     "keys[0].deployments[1]");
	expect_error(CHAT, "{\"name\": \"k\", \"hash\": \"" SK_ONE_HASH "\","
			   " \"deployments\": [], \"quota_day\": 1.5}",
		     "keys[0].quota_day");
}

/* https:// replicas: the scheme is noted, the host and port read after
   it, and the deployment's ca is theirs. */
static void test_config_https_replicas(void **state)
{
	struct kn_gw_config *cfg;
	const struct kn_gw_deployment *d;
	(void)state;

	cfg = parse_ok("{\"name\": \"tls\", \"ca\": \"/etc/ca.pem\", "
		       "\"replicas\": [{\"address\": \"https://10.0.0.5:8443\","
		       " \"ready\": true}, {\"address\": \"10.0.0.6:80\","
		       " \"ready\": true}]}",
		       "");
	d = kn_gw_config_deployment(cfg, "tls");
	assert_non_null(d);
	assert_true(d->replicas[0].tls);
	assert_string_equal(d->replicas[0].host, "10.0.0.5");
	assert_int_equal(d->replicas[0].port, 8443);
	assert_string_equal(d->replicas[0].ca, "/etc/ca.pem");
	assert_false(d->replicas[1].tls);
	kn_gw_config_unref(cfg);
	expect_error("{\"name\": \"tls\", \"replicas\": [{\"address\": "
		     "\"https://:8443\", \"ready\": true}]}",
		     "", "deployments[0].replicas[0].address");
	expect_error("{\"name\": \"tls\", \"ca\": 7, \"replicas\": []}", "",
		     "deployments[0].ca");
}

static void test_bucket(void **state)
{
	struct kn_gw_bucket b = {0};
	(void)state;

	kn_gw_bucket_refill(&b, 60, 1000);
	assert_true(b.level == 60.0);
	b.level = 0.0;
	assert_int_equal(kn_gw_bucket_wait_s(&b, 60), 1);
	assert_int_equal(kn_gw_bucket_wait_s(&b, 6), 10);
	kn_gw_bucket_refill(&b, 60, 1500); /* half a token */
	assert_true(b.level == 0.5);
	kn_gw_bucket_refill(&b, 60, 1000000); /* capped at the limit */
	assert_true(b.level == 60.0);
	b.level = -20.0; /* debt from a large answer */
	assert_int_equal(kn_gw_bucket_wait_s(&b, 60), 21);
	kn_gw_bucket_refill(&b, 10, 1000000 + 60000); /* smaller limit caps */
	assert_true(b.level == -10.0);
}

static struct kn_gw_key make_key(int64_t rpm, int64_t tpm, int64_t day,
				 int64_t month)
{
	struct kn_gw_key k = {.rpm = rpm, .tpm = tpm, .quota_day = day,
			      .quota_month = month};

	snprintf(k.name, sizeof(k.name), "k");
	memset(k.hash_hex, 'a', 64);
	return k;
}

static void test_rpm_counts_exactly(void **state)
{
	struct kn_gw_limiter *l = kn_gw_limiter_new();
	struct kn_gw_key key = make_key(3, 0, 0, 0);
	struct kn_gw_deployment dep = {.name = "chat"};
	struct kn_gw_verdict v;
	int64_t now = 1700000000000LL;
	(void)state;

	for (int i = 0; i < 3; i++) {
		kn_gw_limiter_admit(l, &key, &dep, now, &v);
		assert_true(v.allowed);
		assert_int_equal(v.limit_requests, 3);
		assert_int_equal(v.remaining_requests, 2 - i);
		assert_int_equal(v.remaining_tokens, -1);
	}
	kn_gw_limiter_admit(l, &key, &dep, now, &v);
	assert_false(v.allowed);
	assert_string_equal(v.limit, "key rpm");
	assert_int_equal(v.retry_after_s, 20);
	/* 20 s later one request has come back, not two. */
	kn_gw_limiter_admit(l, &key, &dep, now + 20000, &v);
	assert_true(v.allowed);
	kn_gw_limiter_admit(l, &key, &dep, now + 20000, &v);
	assert_false(v.allowed);
	assert_true(kn_gw_limiter_dirty(l));
	kn_gw_limiter_free(l);
}

static void test_deployment_limits_are_shared(void **state)
{
	struct kn_gw_limiter *l = kn_gw_limiter_new();
	struct kn_gw_key a = make_key(0, 0, 0, 0), b = make_key(0, 0, 0, 0);
	struct kn_gw_deployment dep = {.name = "chat", .tpm = 25};
	struct kn_gw_verdict v;
	int64_t now = 1700000000000LL;
	(void)state;

	memset(b.hash_hex, 'b', 64);
	kn_gw_limiter_admit(l, &a, &dep, now, &v);
	assert_true(v.allowed);
	assert_int_equal(v.limit_requests, -1);
	kn_gw_limiter_charge(l, &a, &dep, 30, now, &v);
	assert_int_equal(v.remaining_tokens, 0);
	kn_gw_limiter_admit(l, &b, &dep, now, &v);
	assert_false(v.allowed);
	assert_string_equal(v.limit, "deployment tpm");
	/* -5 tokens at 25 a minute: 6 to get back to 1, 14.4 s. */
	assert_int_equal(v.retry_after_s, 15);
	kn_gw_limiter_free(l);
}

static void test_quota_day_and_month_roll_over(void **state)
{
	struct kn_gw_limiter *l = kn_gw_limiter_new();
	struct kn_gw_key day = make_key(0, 0, 100, 0), month;
	struct kn_gw_deployment dep = {.name = "chat"};
	struct kn_gw_verdict v;
	(void)state;

	kn_gw_limiter_admit(l, &day, &dep, NYE_MS, &v);
	assert_true(v.allowed);
	kn_gw_limiter_charge(l, &day, &dep, 100, NYE_MS, NULL);
	assert_int_equal(kn_gw_limiter_used_day(l, &day, NYE_MS), 100);
	kn_gw_limiter_admit(l, &day, &dep, NYE_MS, &v);
	assert_false(v.allowed);
	assert_string_equal(v.limit, "quota_day");
	assert_int_equal(v.retry_after_s, 1);
	/* A new UTC day: the count starts again, the month's does not. */
	kn_gw_limiter_admit(l, &day, &dep, NEW_YEAR_MS, &v);
	assert_true(v.allowed);
	assert_int_equal(kn_gw_limiter_used_day(l, &day, NEW_YEAR_MS), 0);

	month = make_key(0, 0, 0, 50);
	memset(month.hash_hex, 'c', 64);
	kn_gw_limiter_charge(l, &month, &dep, 50, NYE_MS - 86400000LL * 30,
			     NULL);
	kn_gw_limiter_admit(l, &month, &dep, NYE_MS, &v);
	assert_false(v.allowed);
	assert_string_equal(v.limit, "quota_month");
	assert_int_equal(kn_gw_limiter_used_month(l, &month, NYE_MS), 50);
	kn_gw_limiter_admit(l, &month, &dep, NEW_YEAR_MS, &v);
	assert_true(v.allowed);
	kn_gw_limiter_free(l);
}

static void test_calendar(void **state)
{
	(void)state;
	assert_int_equal(kn_gw_secs_to_next_day(NYE_MS), 1);
	assert_int_equal(kn_gw_secs_to_next_day(NEW_YEAR_MS), 86400);
	assert_int_equal(kn_gw_secs_to_next_month(NYE_MS), 1);
	/* January has 31 days. */
	assert_int_equal(kn_gw_secs_to_next_month(NEW_YEAR_MS), 31 * 86400);
	assert_int_equal(kn_gw_utc_month(NEW_YEAR_MS) -
				 kn_gw_utc_month(NYE_MS),
			 1);
	assert_int_equal(kn_gw_utc_day(NEW_YEAR_MS) - kn_gw_utc_day(NYE_MS),
			 1);
}

static void test_counters_round_trip(void **state)
{
	struct kn_gw_limiter *l = kn_gw_limiter_new(), *back;
	struct kn_gw_key key = make_key(2, 0, 25, 0);
	struct kn_gw_deployment dep = {.name = "chat"};
	struct kn_gw_verdict v;
	struct kn_error err;
	json_t *doc, *bad;
	(void)state;

	kn_gw_limiter_admit(l, &key, &dep, NYE_MS, &v);
	kn_gw_limiter_charge(l, &key, &dep, 20, NYE_MS, NULL);
	doc = kn_gw_limiter_save(l);
	assert_false(kn_gw_limiter_dirty(l));
	back = kn_gw_limiter_new();
	assert_int_equal(kn_gw_limiter_load(back, doc, &err), 0);
	assert_int_equal(kn_gw_limiter_used_day(back, &key, NYE_MS), 20);
	kn_gw_limiter_admit(back, &key, &dep, NYE_MS, &v);
	assert_true(v.allowed);
	assert_int_equal(v.remaining_requests, 0);
	kn_gw_limiter_admit(back, &key, &dep, NYE_MS, &v);
	assert_false(v.allowed);

	bad = json_pack("{s:{s:{s:[i]}}}", "entries", "k:abc", "rpm", 1);
	assert_int_equal(kn_gw_limiter_load(back, bad, &err), -EINVAL);
	assert_non_null(strstr(err.message, "entries.k:abc.rpm"));
	/* A refused load changes nothing. */
	assert_int_equal(kn_gw_limiter_used_day(back, &key, NYE_MS), 20);
	json_decref(bad);
	json_decref(doc);
	kn_gw_limiter_free(back);
	kn_gw_limiter_free(l);
}

static void test_usage_read(void **state)
{
	static const struct {
		const char *text;
		int64_t total, completion;
	} cases[] = {
		{"{\"usage\": {\"total_tokens\": 30}}", 30, 0},
		{"{\"id\": \"x\", \"usage\":{\"prompt_tokens\":4,"
		 "\"completion_tokens\": 6,"
		 "\"completion_tokens_details\":{\"completion_tokens\":99,"
		 "\"total_tokens\":99},"
		 "\"total_tokens\" : 10}}",
		 10, 6},
		/* Names and braces inside strings do not count. */
		{"{\"choices\":[{\"text\":\"{\\\"usage\\\": "
		 "{\\\"total_tokens\\\": 5}}\"}],"
		 "\"usage\":{\"total_tokens\":7}}",
		 7, 0},
		/* Only the top level's usage, and only its own counts. */
		{"{\"x\": {\"usage\": {\"total_tokens\": 5}}}", 0, 0},
		{"{\"usage\": {\"total_tokens\": 3}, \"later\": "
		 "{\"total_tokens\": 8}}",
		 3, 0},
		{" {\"choices\":[],\"usage\":null}", 0, 0},
		{"{\"usage\": {\"total_tokens\": -3}}", 0, 0},
		{"{\"usage\": {\"total_tokens\": \"12\"}}", 0, 0},
		{"{\"usage\": {\"completion_tokens\": 2, \"total_tokens\": 12",
		 12, 2},
		{"{\"usage\": {\"tot", 0, 0},
		{"", 0, 0},
	};
	(void)state;

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct kn_gw_usage u = {-1, -1};
		kn_gw_usage_read(cases[i].text, strlen(cases[i].text), &u);
		if (u.total_tokens != cases[i].total ||
		    u.completion_tokens != cases[i].completion)
			fail_msg("case %zu: %lld/%lld, want %lld/%lld", i,
				 (long long)u.total_tokens,
				 (long long)u.completion_tokens,
				 (long long)cases[i].total,
				 (long long)cases[i].completion);
	}
}

/* What jansson makes of text, as kn_gw_body_scan should report it. */
static void expect_like_jansson(const char *text, size_t len)
{
	json_error_t jerr;
	json_t *doc = json_loadb(text, len, 0, &jerr);
	struct kn_gw_body b;
	int rc = kn_gw_body_scan(text, len, &b);

	if ((rc == 0) != (doc != NULL))
		fail_msg("\"%.*s\": scan %d (%s), jansson %s (%s)", (int)len,
			 text, rc, b.error, doc ? "ok" : "refuses",
			 doc ? "" : jerr.text);
	if (doc) {
		json_t *model = json_object_get(doc, "model");
		assert_int_equal(b.object, json_is_object(doc));
		assert_int_equal(b.has_model, model != NULL);
		assert_int_equal(b.model_string, json_is_string(model));
		if (json_is_string(model)) {
			assert_int_equal(b.model_len, json_string_length(model));
			assert_memory_equal(b.model, json_string_value(model),
					    b.model_len);
		}
		assert_int_equal(b.stream,
				 json_is_true(json_object_get(doc, "stream")));
	} else {
		assert_true(b.line >= 1 && b.column >= 1 && b.error[0]);
	}
	json_decref(doc);
}

static void test_body_scan(void **state)
{
	static const char *const cases[] = {
		"{\"model\":\"chat\",\"stream\":true}",
		" \r\n\t{ \"model\" : \"chat\" , \"stream\" : false }\n ",
		"{\"stream\":true,\"model\":\"chat\",\"stream\":false}",
		"{\"model\":\"a\",\"model\":\"b\"}",
		"{\"model\":\"a\",\"model\":7}",
		"{\"model\":7,\"model\":\"a\"}",
		"{\"mod\\u0065l\":\"x\\\"y\\\\z\\/\\b\\f\\n\\r\\t\"}",
		"{\"model\":\"\\ud83d\\ude00 caf\xc3\xa9 \xe2\x82\xac\"}",
		"{\"messages\":[{\"model\":\"inner\",\"stream\":true}]}",
		"{\"x\":{\"model\":\"inner\"},\"model\":\"outer\"}",
		"{\"x\":\"\\\"model\\\":\\\"fake\\\"\",\"stream\":\"true\"}",
		"{\"model\":null,\"stream\":1}",
		"{\"modelx\":\"a\",\"streams\":true,\"\":0}",
		"[{\"model\":\"a\"}]",
		"{}", "[]", "[[[]]]",
		("{\"n\":[0,-0,1.5e3,-2E-2,1e+2,9223372036854775807,"
		 "-9223372036854775808,1e308,1e-400,true,false,null]}"),
		/* refused */
		"", "   ", "\"model\"", "7", "null", "{", "{\"model\":\"a\"",
		"{\"model\":\"a\",}", "[1,]", "{\"model\" \"a\"}", "{model:1}",
		"{\"a\":1}x", "{\"a\":1}{}", "{\"a\":01}", "{\"a\":-}",
		"{\"a\":1.}", "{\"a\":.5}", "{\"a\":1e}", "{\"a\":+1}",
		"{\"a\":9223372036854775808}", "{\"a\":-9223372036854775809}",
		"{\"a\":1e309}", "{\"a\":tru}", "{\"a\":truex}",
		"{\"a\":\"\\x\"}", "{\"a\":\"\\u12\"}", "{\"a\":\"\\u0000\"}",
		"{\"a\":\"\\ud800\"}", "{\"a\":\"\\udc00\"}",
		"{\"a\":\"\\ud800\\u0041\"}", "{\"a\":\"tab\there\"}",
		"{\"a\":\"\xff\"}", "{\"a\":\"\xc0\xaf\"}",
		"{\"a\":\"\xed\xa0\x80\"}", "{\"a\":\"\xf4\x90\x80\x80\"}",
		"{\"a\":\"\xe2\x82\"}", "{\"a\":\"end",
	};
	char deep[2 * 2049 + 8];
	(void)state;

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		expect_like_jansson(cases[i], strlen(cases[i]));
	/* A NUL byte inside the text, in and outside a string. */
	expect_like_jansson("{\"model\":\"a\0b\"}", 15);
	expect_like_jansson("{\"model\":\"a\"}\0", 14);
	expect_like_jansson("[7\0]", 4);
	expect_like_jansson("[true\0,1.5\0]", 12);
	expect_like_jansson("[7\0\0]", 5);
	expect_like_jansson("[\"a\"\0]", 6);
	expect_like_jansson("[1,\0 2]", 7);
	/* Nesting: 2048 values deep is taken, one more is not. */
	for (size_t n = 2047; n <= 2049; n++) {
		memset(deep, '[', n);
		memset(deep + n, ']', n);
		expect_like_jansson(deep, 2 * n);
		deep[n - 1] = '1';
		deep[n] = ' ';
		expect_like_jansson(deep, 2 * n);
	}
}

KN_TEST_MAIN(NULL, NULL,
	cmocka_unit_test(test_config_parses),
	cmocka_unit_test(test_config_errors_name_the_field),
	cmocka_unit_test(test_config_https_replicas),
	cmocka_unit_test(test_bucket),
	cmocka_unit_test(test_rpm_counts_exactly),
	cmocka_unit_test(test_deployment_limits_are_shared),
	cmocka_unit_test(test_quota_day_and_month_roll_over),
	cmocka_unit_test(test_calendar),
	cmocka_unit_test(test_counters_round_trip),
	cmocka_unit_test(test_usage_read),
	cmocka_unit_test(test_body_scan))
