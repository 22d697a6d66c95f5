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

#include "base/tests/testmain.h"
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

/* One call on a grants table and what it must return. */
enum grant_op { END, ADD, USE, REVOKE, COUNT };

struct grant_step {
	enum grant_op op;
	enum kn_console_grant_kind kind;
	const char *hash;  /* the secret's hash */
	const char *token; /* ADD's token hash */
	int64_t now;
	int want;          /* a USE that works also yields TOKEN */
};

/* A table of max grants and the calls made on it, in order, up to END
   or the last. */
struct grant_script {
	size_t max;
	struct grant_step steps[8];
};

#define CODE KN_CONSOLE_CODE
#define SESSION KN_CONSOLE_SESSION

static struct grant_script code_works_once = {4, {
	{ADD, CODE, HASH_A, TOKEN, 1000, 0},
	{USE, CODE, HASH_A, NULL, 2000, 0},
	{USE, CODE, HASH_A, NULL, 2000, -ENOENT},
}};

static struct grant_script grants_expire = {4, {
	{ADD, CODE, HASH_A, TOKEN, 0, 0},
	{ADD, SESSION, HASH_B, TOKEN, 0, 0},
	{USE, CODE, HASH_A, NULL, KN_CONSOLE_CODE_TTL_MS, -ENOENT},
	{USE, SESSION, HASH_B, NULL, KN_CONSOLE_SESSION_TTL_MS - 1, 0},
	/* A session is not used up by use. */
	{USE, SESSION, HASH_B, NULL, KN_CONSOLE_SESSION_TTL_MS - 1, 0},
	{USE, SESSION, HASH_B, NULL, KN_CONSOLE_SESSION_TTL_MS, -ENOENT},
}};

static struct grant_script kinds_do_not_mix = {4, {
	{ADD, CODE, HASH_A, TOKEN, 0, 0},
	{USE, SESSION, HASH_A, NULL, 1, -ENOENT},
	/* The failed try did not use the code up. */
	{USE, CODE, HASH_A, NULL, 1, 0},
}};

static struct grant_script table_is_bounded_and_revocable = {1, {
	{ADD, SESSION, HASH_A, TOKEN, 0, 0},
	{ADD, SESSION, HASH_B, TOKEN, 0, -ENOSPC},
	{COUNT, SESSION, NULL, NULL, 0, 1},
	{REVOKE, SESSION, HASH_A, NULL, 0, 0},
	{REVOKE, SESSION, HASH_A, NULL, 0, -ENOENT},
	{USE, SESSION, HASH_A, NULL, 0, -ENOENT},
	/* Room again, and an expired grant makes room too. */
	{ADD, CODE, HASH_B, TOKEN, 0, 0},
	{ADD, CODE, HASH_A, TOKEN, KN_CONSOLE_CODE_TTL_MS, 0},
}};

static struct grant_script bad_hashes_are_refused = {2, {
	{ADD, CODE, "abc", TOKEN, 0, -EINVAL},
	{ADD, CODE, HASH_A, HASH_A "0", 0, -EINVAL},
	{ADD, CODE, NULL, TOKEN, 0, -EINVAL},
}};

/* Runs the script in *state; a step that returns what it must not is
   named by its number. */
static void run_grant_script(void **state)
{
	const struct grant_script *sc = *state;
	struct kn_console_grants *g = kn_console_grants_new(sc->max);
	char token[65];

	for (size_t i = 0; i < 8 && sc->steps[i].op != END; i++) {
		const struct grant_step *st = &sc->steps[i];
		int got;

		if (st->op == ADD) {
			got = kn_console_grant_add(g, st->kind, st->hash,
						   st->token, st->now);
		} else if (st->op == USE) {
			got = kn_console_grant_use(g, st->kind, st->hash,
						   st->now, token);
			if (got == 0 && strcmp(token, TOKEN))
				fail_msg("step %zu: token %s", i, token);
		} else if (st->op == REVOKE) {
			got = kn_console_grant_revoke(g, st->hash);
		} else {
			got = (int)kn_console_grant_count(g, st->kind, st->now);
		}
		if (got != st->want)
			fail_msg("step %zu: %d, not %d", i, got, st->want);
	}
	kn_console_grants_free(g);
}

#define GRANT_TEST(script)                                                   \
	{#script, run_grant_script, NULL, NULL, &script}

KN_TEST_MAIN(NULL, NULL,
	cmocka_unit_test(assets_are_typed_and_tagged),
	GRANT_TEST(code_works_once),
	GRANT_TEST(grants_expire),
	GRANT_TEST(kinds_do_not_mix),
	GRANT_TEST(table_is_bounded_and_revocable),
	GRANT_TEST(bad_hashes_are_refused))
