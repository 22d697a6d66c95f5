/*
 * Unit tests for the model registry's rules (server/modelrules.c): which
 * upload ids a client may choose, the byte ranges of parts sent out of
 * order, twice or overlapping, where a rollback takes an alias through
 * promotes and earlier rollbacks (other aliases' moves ignored), and the
 * API's alias list with and without its history fields.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "base/tests/testmain.h"
#include "server/modelrules.h"

static void test_upload_id(void **state)
{
	char longest[MODEL_UPLOAD_ID_MAX + 2];

	(void)state;
	assert_true(model_upload_id_ok("a"));
	assert_true(model_upload_id_ok("Push7Z"));
	assert_false(model_upload_id_ok(NULL));
	assert_false(model_upload_id_ok(""));
	assert_false(model_upload_id_ok("has-dash"));
	assert_false(model_upload_id_ok("../etc"));
	assert_false(model_upload_id_ok("sp ace"));
	memset(longest, 'x', MODEL_UPLOAD_ID_MAX);
	longest[MODEL_UPLOAD_ID_MAX] = '\0';
	assert_true(model_upload_id_ok(longest));
	longest[MODEL_UPLOAD_ID_MAX] = 'x';
	longest[MODEL_UPLOAD_ID_MAX + 1] = '\0';
	assert_false(model_upload_id_ok(longest));
}

static void test_ranges(void **state)
{
	struct model_ranges rs = {0};
	json_t *j;
	char *text;

	(void)state;
	assert_int_equal(model_ranges_prefix(&rs), 0);
	assert_int_equal(model_ranges_fit(&rs, 0, 10), MODEL_RANGE_NEW);
	/* Out of order: the prefix waits for the start. */
	assert_int_equal(model_ranges_add(&rs, 20, 30), 0);
	assert_int_equal(model_ranges_add(&rs, 40, 50), 0);
	assert_int_equal(model_ranges_prefix(&rs), 0);
	assert_int_equal(model_ranges_fit(&rs, 20, 30), MODEL_RANGE_HELD);
	assert_int_equal(model_ranges_fit(&rs, 22, 28), MODEL_RANGE_HELD);
	assert_int_equal(model_ranges_fit(&rs, 25, 35), MODEL_RANGE_OVERLAP);
	assert_int_equal(model_ranges_fit(&rs, 10, 45), MODEL_RANGE_OVERLAP);
	/* Touching is not holding. */
	assert_int_equal(model_ranges_fit(&rs, 30, 40), MODEL_RANGE_NEW);
	assert_int_equal(model_ranges_fit(&rs, 10, 20), MODEL_RANGE_NEW);
	assert_int_equal(model_ranges_add(&rs, 0, 20), 0);
	assert_int_equal(model_ranges_prefix(&rs), 30);
	/* Filling the gap merges all three. */
	assert_int_equal(model_ranges_add(&rs, 30, 40), 0);
	assert_int_equal(rs.n, 1);
	assert_int_equal(model_ranges_prefix(&rs), 50);
	assert_int_equal(model_ranges_total(&rs), 50);
	assert_int_equal(model_ranges_add(&rs, 60, 70), 0);
	j = model_ranges_json(&rs);
	text = json_dumps(j, JSON_COMPACT);
	assert_string_equal(text, "[[0,50],[60,70]]");
	free(text);
	json_decref(j);
	model_ranges_release(&rs);
}

static void test_ranges_are_bounded(void **state)
{
	struct model_ranges rs = {0};

	(void)state;
	/* One byte every other byte: scattered parts hit the cap. */
	for (int64_t i = 0; i < MODEL_RANGES_MAX; i++)
		assert_int_equal(model_ranges_add(&rs, 2 * i + 1, 2 * i + 2), 0);
	assert_int_equal(model_ranges_add(&rs, 5000, 5001), -1);
	assert_int_equal(rs.n, MODEL_RANGES_MAX);
	/* Filling a gap still works: it makes fewer ranges. */
	assert_int_equal(model_ranges_add(&rs, 0, 1), 0);
	assert_int_equal(model_ranges_add(&rs, 2, 3), 0);
	assert_int_equal(rs.n, MODEL_RANGES_MAX - 1);
	assert_int_equal(model_ranges_prefix(&rs), 4);
	model_ranges_release(&rs);
}

#define ROW(a, act, v)                                                     \
	{                                                                  \
		.alias = (char *)(a), .version = (v), .action = (char *)(act), \
		.actor = (char *)"alice", .time_ms = 1000 * (v)              \
	}

static void test_rollback_target(void **state)
{
	/* prod: 1, 2, 3 promoted; staging moves in between are not prod's. */
	struct kn_model_alias_row hist[] = {
		ROW("prod", "promote", 1),    ROW("staging", "promote", 5),
		ROW("prod", "promote", 2),    ROW("staging", "promote", 6),
		ROW("prod", "promote", 3),    ROW("prod", "rollback", 2),
	};

	(void)state;
	/* Before the rollback: 3 is on top, 2 under it. */
	assert_int_equal(model_rollback_target(hist, 5, "prod"), 2);
	/* After rolling back to 2, the next rollback goes to 1. */
	assert_int_equal(model_rollback_target(hist, 6, "prod"), 1);
	assert_int_equal(model_rollback_target(hist, 6, "staging"), 5);
	/* One promote: nothing earlier. */
	assert_int_equal(model_rollback_target(hist, 1, "prod"), 0);
	assert_int_equal(model_rollback_target(hist, 6, "canary"), 0);
	assert_int_equal(model_rollback_target(NULL, 0, "prod"), 0);
}

static void test_aliases_json(void **state)
{
	struct kn_model_alias_row rows[] = {
		ROW("prod", "promote", 2),
		ROW("prod", "rollback", 1),
	};
	json_t *plain, *hist;

	(void)state;
	rows[1].from_version = 2;
	plain = model_aliases_json(rows, 2, false);
	hist = model_aliases_json(rows, 2, true);
	assert_int_equal(json_array_size(plain), 2);
	assert_string_equal(
		json_string_value(json_object_get(json_array_get(plain, 0),
						  "alias")),
		"prod");
	assert_int_equal(json_integer_value(json_object_get(
				 json_array_get(plain, 1), "version")),
			 1);
	assert_int_equal(json_integer_value(json_object_get(
				 json_array_get(plain, 1), "time_ms")),
			 1000);
	assert_string_equal(json_string_value(json_object_get(
				    json_array_get(plain, 0), "by")),
			    "alice");
	assert_null(json_object_get(json_array_get(plain, 0), "action"));
	assert_string_equal(json_string_value(json_object_get(
				    json_array_get(hist, 1), "action")),
			    "rollback");
	assert_int_equal(json_integer_value(json_object_get(
				 json_array_get(hist, 1), "from")),
			 2);
	assert_true(json_is_null(
		json_object_get(json_array_get(hist, 0), "from")));
	json_decref(plain);
	json_decref(hist);
}

KN_TEST_MAIN(NULL, NULL,
	cmocka_unit_test(test_upload_id),
	cmocka_unit_test(test_ranges),
	cmocka_unit_test(test_ranges_are_bounded),
	cmocka_unit_test(test_rollback_target),
	cmocka_unit_test(test_aliases_json))
