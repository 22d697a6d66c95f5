/*
 * Unit tests for the console module: the compiled-in assets and the
 * grants table's rules (codes work once, everything expires, the table
 * is bounded, a kind never passes for the other).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <string.h>

#include "console/console.h"

#define HASH_A "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
#define HASH_B "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
#define TOKEN "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

static void assets_are_typed_and_tagged(void **state)
{
	const struct kn_console_asset *index = kn_console_asset_find("index.html");
	const struct kn_console_asset *js = kn_console_asset_find("app.js");

	(void)state;
	assert_non_null(index);
	assert_non_null(js);
	assert_string_equal(index->content_type, "text/html; charset=utf-8");
	assert_string_equal(js->content_type, "text/javascript; charset=utf-8");
	assert_true(index->len > 0);
	/* A quoted ETag, distinct for distinct bytes. */
	assert_int_equal(index->etag[0], '"');
	assert_string_not_equal(index->etag, js->etag);
	assert_null(kn_console_asset_find("../console.h"));
	assert_null(kn_console_asset_find(""));
}

static void code_works_once(void **state)
{
	struct kn_console_grants *g = kn_console_grants_new(4);
	char token[65];

	(void)state;
	assert_int_equal(kn_console_grant_add(g, KN_CONSOLE_CODE, HASH_A, TOKEN,
					      1000), 0);
	assert_int_equal(kn_console_grant_use(g, KN_CONSOLE_CODE, HASH_A, 2000,
					      token), 0);
	assert_string_equal(token, TOKEN);
	assert_int_equal(kn_console_grant_use(g, KN_CONSOLE_CODE, HASH_A, 2000,
					      token), -ENOENT);
	kn_console_grants_free(g);
}

static void grants_expire(void **state)
{
	struct kn_console_grants *g = kn_console_grants_new(4);
	char token[65];

	(void)state;
	assert_int_equal(kn_console_grant_add(g, KN_CONSOLE_CODE, HASH_A, TOKEN,
					      0), 0);
	assert_int_equal(kn_console_grant_add(g, KN_CONSOLE_SESSION, HASH_B,
					      TOKEN, 0), 0);
	assert_int_equal(kn_console_grant_use(g, KN_CONSOLE_CODE, HASH_A,
					      KN_CONSOLE_CODE_TTL_MS, token),
			 -ENOENT);
	assert_int_equal(kn_console_grant_use(g, KN_CONSOLE_SESSION, HASH_B,
					      KN_CONSOLE_SESSION_TTL_MS - 1,
					      token), 0);
	/* A session is not used up by use. */
	assert_int_equal(kn_console_grant_use(g, KN_CONSOLE_SESSION, HASH_B,
					      KN_CONSOLE_SESSION_TTL_MS - 1,
					      token), 0);
	assert_int_equal(kn_console_grant_use(g, KN_CONSOLE_SESSION, HASH_B,
					      KN_CONSOLE_SESSION_TTL_MS, token),
			 -ENOENT);
	kn_console_grants_free(g);
}

static void kinds_do_not_mix(void **state)
{
	struct kn_console_grants *g = kn_console_grants_new(4);
	char token[65];

	(void)state;
	assert_int_equal(kn_console_grant_add(g, KN_CONSOLE_CODE, HASH_A, TOKEN,
					      0), 0);
	assert_int_equal(kn_console_grant_use(g, KN_CONSOLE_SESSION, HASH_A, 1,
					      token), -ENOENT);
	/* The failed try did not use the code up. */
	assert_int_equal(kn_console_grant_use(g, KN_CONSOLE_CODE, HASH_A, 1,
					      token), 0);
	kn_console_grants_free(g);
}

static void table_is_bounded_and_revocable(void **state)
{
	struct kn_console_grants *g = kn_console_grants_new(1);
	char token[65];

	(void)state;
	assert_int_equal(kn_console_grant_add(g, KN_CONSOLE_SESSION, HASH_A,
					      TOKEN, 0), 0);
	assert_int_equal(kn_console_grant_add(g, KN_CONSOLE_SESSION, HASH_B,
					      TOKEN, 0), -ENOSPC);
	assert_int_equal(kn_console_grant_count(g, KN_CONSOLE_SESSION, 0), 1);
	assert_int_equal(kn_console_grant_revoke(g, HASH_A), 0);
	assert_int_equal(kn_console_grant_revoke(g, HASH_A), -ENOENT);
	assert_int_equal(kn_console_grant_use(g, KN_CONSOLE_SESSION, HASH_A, 0,
					      token), -ENOENT);
	/* Room again, and an expired grant makes room too. */
	assert_int_equal(kn_console_grant_add(g, KN_CONSOLE_CODE, HASH_B,
					      TOKEN, 0), 0);
	assert_int_equal(kn_console_grant_add(g, KN_CONSOLE_CODE, HASH_A, TOKEN,
					      KN_CONSOLE_CODE_TTL_MS), 0);
	kn_console_grants_free(g);
}

static void bad_hashes_are_refused(void **state)
{
	struct kn_console_grants *g = kn_console_grants_new(2);

	(void)state;
	assert_int_equal(kn_console_grant_add(g, KN_CONSOLE_CODE, "abc", TOKEN,
					      0), -EINVAL);
	assert_int_equal(kn_console_grant_add(g, KN_CONSOLE_CODE, HASH_A,
					      HASH_A "0", 0), -EINVAL);
	assert_int_equal(kn_console_grant_add(g, KN_CONSOLE_CODE, NULL, TOKEN,
					      0), -EINVAL);
	kn_console_grants_free(g);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(assets_are_typed_and_tagged),
		cmocka_unit_test(code_works_once),
		cmocka_unit_test(grants_expire),
		cmocka_unit_test(kinds_do_not_mix),
		cmocka_unit_test(table_is_bounded_and_revocable),
		cmocka_unit_test(bad_hashes_are_refused),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
