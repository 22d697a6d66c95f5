/*
 * Unit tests for push's digest cache: a file is found only in the exact
 * state it was hashed in, a file changed too near its hashing is one to
 * check, the cache survives a save and a load, lines that do not
 * parse are skipped, and a file's older state is replaced.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/base.h"
#include "base/tests/testmain.h"
#include "cmd/digest_cache.h"

#define HEX_A "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
#define HEX_B "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
#define HASHED_AT 1000000

static struct stat file_state(ino_t ino, off_t size, time_t changed)
{
	struct stat st;

	memset(&st, 0, sizeof(st));
	st.st_dev = 7;
	st.st_ino = ino;
	st.st_size = size;
	st.st_mtim.tv_sec = changed;
	st.st_mtim.tv_nsec = 5;
	st.st_ctim.tv_sec = changed;
	st.st_ctim.tv_nsec = 9;
	return st;
}

static char *temp_path(void)
{
	char dir[] = "/tmp/digest-cache-XXXXXX";

	assert_non_null(mkdtemp(dir));
	return kn_asprintf("%s/sub/digests", dir);
}

static void found_only_in_the_state_hashed(void **state)
{
	struct digest_cache *c = digest_cache_load(NULL);
	struct stat st = file_state(11, 100, HASHED_AT - 60), other;
	char hex[65];

	(void)state;
	digest_cache_free(c);
	c = digest_cache_load("/nonexistent/digests");
	assert_int_equal(digest_cache_find(c, &st, hex), DIGEST_UNKNOWN);
	digest_cache_put(c, &st, HEX_A, HASHED_AT);
	assert_int_equal(digest_cache_find(c, &st, hex), DIGEST_KNOWN);
	assert_string_equal(hex, HEX_A);
	other = st;
	other.st_ctim.tv_nsec++; /* written since, in the same size */
	assert_int_equal(digest_cache_find(c, &other, hex), DIGEST_UNKNOWN);
	other = st;
	other.st_size++;
	assert_int_equal(digest_cache_find(c, &other, hex), DIGEST_UNKNOWN);
	other = st;
	other.st_ino++;
	assert_int_equal(digest_cache_find(c, &other, hex), DIGEST_UNKNOWN);
	digest_cache_free(c);
}

static void a_file_changed_near_its_hashing_is_one_to_check(void **state)
{
	struct digest_cache *c = digest_cache_load("/nonexistent/digests");
	struct stat fresh = file_state(12, 100, HASHED_AT - 1);
	char hex[65];

	(void)state;
	digest_cache_put(c, &fresh, HEX_A, HASHED_AT);
	assert_int_equal(digest_cache_find(c, &fresh, hex), DIGEST_CHECK);
	/* Hashed again later, unchanged: settled. */
	digest_cache_put(c, &fresh, HEX_A, HASHED_AT + 60);
	assert_int_equal(digest_cache_find(c, &fresh, hex), DIGEST_KNOWN);
	digest_cache_free(c);
}

static void saved_loaded_and_replaced(void **state)
{
	char *path = temp_path();
	struct digest_cache *c = digest_cache_load(path);
	struct stat one = file_state(21, 10, HASHED_AT - 60);
	struct stat two = file_state(22, 20, HASHED_AT - 60);
	struct stat one_later = file_state(21, 11, HASHED_AT - 30);
	char hex[65], *text = NULL;
	size_t len, lines;
	struct stat mode;
	FILE *f;

	(void)state;
	assert_int_equal(digest_cache_save(c), 0); /* nothing put: no file */
	assert_int_not_equal(access(path, F_OK), 0);
	digest_cache_put(c, &one, HEX_A, HASHED_AT);
	digest_cache_put(c, &two, HEX_B, HASHED_AT);
	digest_cache_put(c, &one_later, HEX_B, HASHED_AT);
	assert_int_equal(digest_cache_save(c), 0);
	digest_cache_free(c);
	assert_int_equal(stat(path, &mode), 0);
	assert_int_equal(mode.st_mode & 0777, 0600);
	/* A line that does not parse is skipped, the rest read. */
	f = fopen(path, "a");
	assert_non_null(f);
	fputs("7 23 1 2 3 4 5 6 nothex\n7 24 garbage\n", f);
	fclose(f);
	c = digest_cache_load(path);
	assert_int_equal(digest_cache_find(c, &one, hex), DIGEST_UNKNOWN);
	assert_int_equal(digest_cache_find(c, &one_later, hex), DIGEST_KNOWN);
	assert_string_equal(hex, HEX_B);
	assert_int_equal(digest_cache_find(c, &two, hex), DIGEST_KNOWN);
	digest_cache_free(c);
	assert_int_equal(kn_read_file(path, 1 << 20, &text, &len), 0);
	lines = 0;
	for (size_t i = 0; i < len; i++)
		lines += text[i] == '\n';
	assert_int_equal(lines, 4); /* two entries, two bad lines */
	KN_FREE_ALL(text, path);
}

KN_TEST_MAIN(NULL, NULL,
	cmocka_unit_test(found_only_in_the_state_hashed),
	cmocka_unit_test(a_file_changed_near_its_hashing_is_one_to_check),
	cmocka_unit_test(saved_loaded_and_replaced))
