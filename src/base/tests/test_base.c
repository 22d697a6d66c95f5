/* Unit tests for base: duration and size parsing, buffers, files. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/base.h"
#include "base/tests/testmain.h"

static void test_durations(void **state)
{
	static const struct {
		const char *text;
		int rc;
		int64_t ms;
	} cases[] = {
		{"90s", 0, 90000},     {"5m", 0, 300000},
		{"1h30m", 0, 5400000}, {"250ms", 0, 250},
		{"2d", 0, 172800000},  {"0s", 0, 0},
		{"10", -EINVAL, 0},    {"", -EINVAL, 0},
		{"5x", -EINVAL, 0},    {"-5s", -EINVAL, 0},
		{"s", -EINVAL, 0},     {"99999999999999999999s", -EINVAL, 0},
		{"3650d", 0, KN_DURATION_MAX_MS},
		{"3650d1ms", -EINVAL, 0}, {"106751991167d", -EINVAL, 0},
	};
	(void)state;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		int64_t ms = -1;
		int rc = kn_parse_duration(cases[i].text, &ms);
		assert_int_equal(rc, cases[i].rc);
		if (rc == 0)
			assert_int_equal(ms, cases[i].ms);
		else
			assert_int_equal(ms, -1);
	}
}

static void test_sizes(void **state)
{
	int64_t b = 0;
	(void)state;
	assert_int_equal(kn_parse_size("512Mi", &b), 0);
	assert_int_equal(b, 512LL << 20);
	assert_int_equal(kn_parse_size("2Gi", &b), 0);
	assert_int_equal(b, 2LL << 30);
	assert_int_equal(kn_parse_size("1G", &b), 0);
	assert_int_equal(b, 1000000000LL);
	assert_int_equal(kn_parse_size("4096", &b), 0);
	assert_int_equal(b, 4096);
	assert_int_equal(kn_parse_size("2GB", &b), -EINVAL);
	assert_int_equal(kn_parse_size("Gi", &b), -EINVAL);
	assert_int_equal(kn_parse_size("-1Gi", &b), -EINVAL);
	assert_int_equal(kn_parse_size("99999999999Ti", &b), -EINVAL);
}

/* strptime's reading as UTC; where it stopped tells what follows. */
static void test_parse_time(void **state)
{
	int64_t ms = -1;

	(void)state;
	assert_string_equal(kn_parse_time("2026-12-03T04:05:06Z",
					  "%Y-%m-%dT%H:%M:%S", &ms), "Z");
	assert_int_equal(ms, 1796270706000LL);
	assert_null(kn_parse_time("yesterday", "%Y-%m-%d", &ms));
	assert_int_equal(ms, 1796270706000LL);
}

static void test_format_size(void **state)
{
	static const struct {
		int64_t bytes;
		const char *text;
	} cases[] = {
		{64LL << 20, "64Mi"}, {16LL << 30, "16Gi"}, {1536LL << 20, "1536Mi"},
		{1000000000LL, "1G"}, {1500000LL, "1500k"}, {4097, "4097"},
		{2LL << 40, "2Ti"},
	};
	char buf[32];
	(void)state;

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		int64_t back = 0;
		kn_format_size(cases[i].bytes, buf, sizeof(buf));
		assert_string_equal(buf, cases[i].text);
		/* What it writes reads back as the same size. */
		assert_int_equal(kn_parse_size(buf, &back), 0);
		assert_int_equal(back, cases[i].bytes);
	}
	/* For a reader: one decimal, binary units. */
	kn_format_bytes(512, buf, sizeof(buf));
	assert_string_equal(buf, "512 B");
	kn_format_bytes(85899345920LL, buf, sizeof(buf));
	assert_string_equal(buf, "80.0 GiB");
	kn_format_bytes(25000000000LL, buf, sizeof(buf));
	assert_string_equal(buf, "23.3 GiB");
}

/* A whole name matches, not a prefix; no list is an empty one. */
static void test_env_get(void **state)
{
	char *const env[] = {"KILN_X=1", "KILN_XY=2", "EMPTY=", NULL};

	(void)state;
	assert_string_equal(kn_env_get(env, "KILN_XY"), "2");
	assert_string_equal(kn_env_get(env, "KILN_X"), "1");
	assert_string_equal(kn_env_get(env, "EMPTY"), "");
	assert_null(kn_env_get(env, "KILN"));
	assert_null(kn_env_get(NULL, "KILN_X"));
}

/* Any case names a header; a repeated one answers with its first value;
   a whole name matches, not a prefix. */
static void test_header_value(void **state)
{
	const char *const names[] = {"Host", "X-Kiln", "x-kiln", "X"};
	const char *const values[] = {"a", "first", "second", "x"};

	(void)state;
	assert_string_equal(kn_header_value(names, values, 4, "host"), "a");
	assert_string_equal(kn_header_value(names, values, 4, "X-KILN"),
			    "first");
	assert_string_equal(kn_header_value(names, values, 4, "x"), "x");
	assert_null(kn_header_value(names, values, 4, "X-Kil"));
	assert_null(kn_header_value(names, values, 3, "X"));
	assert_null(kn_header_value(names, values, 0, "Host"));
}

static void test_buf_cap(void **state)
{
	struct kn_buf b;
	(void)state;
	kn_buf_init(&b, 8);
	assert_int_equal(kn_buf_append(&b, "12345", 5), 0);
	assert_int_equal(kn_buf_append(&b, "6789", 4), -E2BIG);
	assert_int_equal(b.len, 5);
	assert_string_equal(b.data, "12345");
	assert_int_equal(kn_buf_printf(&b, "%d", 678), 0);
	assert_string_equal(b.data, "12345678");
	kn_buf_release(&b);
}

static void test_errorf(void **state)
{
	struct kn_error err;
	(void)state;
	assert_int_equal(kn_errorf(&err, KN_ENOTFOUND, "id", "job %d", 4),
			 -ENOENT);
	assert_string_equal(err.field, "id");
	assert_string_equal(err.message, "job 4");
	assert_int_equal(kn_errcode_http(err.code), 404);
	assert_string_equal(kn_errcode_name(KN_EPERM), "permission_denied");
	assert_int_equal(kn_errorf(NULL, KN_EINVAL, NULL, "x"), -EINVAL);
}

static void test_files(void **state)
{
	char dir[] = "/tmp/kn-test-XXXXXX";
	char *path, *data = NULL, *nested;
	size_t len = 0;
	struct stat st;
	(void)state;

	assert_non_null(mkdtemp(dir));
	nested = kn_asprintf("%s/a/b/c", dir);
	assert_int_equal(kn_mkdir_p(nested, 0700), 0);
	path = kn_asprintf("%s/secret", nested);
	assert_int_equal(kn_write_file_atomic(path, "hello", 5, 0600), 0);
	assert_int_equal(stat(path, &st), 0);
	assert_int_equal(st.st_mode & 0777, 0600);
	assert_int_equal(kn_read_file(path, 100, &data, &len), 0);
	assert_int_equal(len, 5);
	assert_string_equal(data, "hello");
	free(data);
	assert_int_equal(kn_read_file(path, 4, &data, &len), -EFBIG);
	assert_int_equal(kn_rm_rf(dir), 0);
	assert_int_equal(stat(dir, &st), -1);
	KN_FREE_ALL(path, nested);
}

static void test_write_text(void **state)
{
	char dir[] = "/tmp/kn-test-XXXXXX";
	char *path, *missing, *data = NULL, *want;
	size_t len = 0;
	struct kn_error err;
	(void)state;

	assert_non_null(mkdtemp(dir));
	path = kn_asprintf("%s/url", dir);
	assert_int_equal(kn_write_text_atomic(path, "http://a\n", 0644, &err),
			 0);
	assert_int_equal(kn_write_text_replace(path, "http://b\n", 0644, &err),
			 0);
	assert_int_equal(kn_read_file(path, 100, &data, &len), 0);
	assert_string_equal(data, "http://b\n");
	/* A failure names the file and why. */
	missing = kn_asprintf("%s/no/such/dir", dir);
	assert_int_equal(kn_write_text_replace(missing, "x", 0600, &err), -EIO);
	assert_int_equal(err.code, KN_EIO);
	want = kn_asprintf("cannot write %s: %s", missing, strerror(ENOENT));
	assert_string_equal(err.message, want);
	assert_int_equal(kn_rm_rf(dir), 0);
	KN_FREE_ALL(want, missing, data, path);
}

static void *background_thread(void *arg)
{
	int *policy = arg;
	struct sched_param sp;

	kn_thread_background();
	pthread_getschedparam(pthread_self(), policy, &sp);
	return NULL;
}

static void test_thread_background(void **state)
{
	pthread_t t;
	int policy = -1, mine = -1;
	struct sched_param sp;
	(void)state;

	assert_int_equal(pthread_create(&t, NULL, background_thread, &policy), 0);
	assert_int_equal(pthread_join(t, NULL), 0);
	assert_int_equal(policy, SCHED_IDLE);
	/* Only that thread: the caller keeps its own policy. */
	pthread_getschedparam(pthread_self(), &mine, &sp);
	assert_int_not_equal(mine, SCHED_IDLE);
}

static void test_levenshtein(void **state)
{
	(void)state;
	assert_int_equal(kn_levenshtein("retries", "retires"), 2);
	assert_int_equal(kn_levenshtein("gpus", "gpu"), 1);
	assert_int_equal(kn_levenshtein("", "abc"), 3);
}

static void test_yaml_text_check(void **state)
{
	struct kn_error err;
	bool nul;

	(void)state;
	assert_int_equal(kn_yaml_text_check("a: \xc3\xa9\n", 6, "f", "spec",
					    &err), 0);
	assert_int_equal(kn_yaml_text_check("a: 1\n%m\xef\n", 9, "f.yaml",
					    "spec", &err), -EINVAL);
	assert_string_equal(err.message, "f.yaml:2:3: spec is not valid UTF-8");
	assert_int_equal(kn_yaml_text_check("\xc3\xa9" "b\0", 4, "f", "rules file",
					    &err), -EINVAL);
	assert_string_equal(err.message, "f:1:3: rules file contains a NUL byte");
	/* Overlong forms and surrogates are not UTF-8. */
	assert_int_equal(kn_text_bad_byte("\xc0\xaf", 2, &nul), 0);
	assert_int_equal(kn_text_bad_byte("x\xed\xa0\x80", 4, &nul), 1);
	assert_false(nul);
}

/* Wanted columns found in the header in the caller's order; a missing
   one named, with the header's line. */
static void test_csv_header(void **state)
{
	char head[] = "\na,b\n1,2\n", again[] = "\na,b\n", empty[] = "";
	const char *const found[] = {"b", "a"}, *const missing[] = {"a", "nope"};
	struct kn_csv c;
	int col[2];
	struct kn_error err;

	(void)state;
	kn_csv_init(&c, head, "t.csv");
	assert_int_equal(kn_csv_header(&c, found, 2, col, &err), 0);
	assert_int_equal(col[0], 1);
	assert_int_equal(col[1], 0);
	/* The records after the header are the caller's. */
	assert_int_equal(kn_csv_next(&c, &err), 1);
	assert_string_equal(c.fields[0], "1");
	kn_csv_init(&c, again, "t.csv");
	assert_int_equal(kn_csv_header(&c, missing, 2, col, &err), -EINVAL);
	assert_string_equal(err.message, "t.csv:2: no column \"nope\"");
	assert_string_equal(err.field, "nope");
	/* An empty text has no header: line 1. */
	kn_csv_init(&c, empty, "t.csv");
	assert_int_equal(kn_csv_header(&c, found, 2, col, &err), -EINVAL);
	assert_string_equal(err.message, "t.csv:1: no column \"b\"");
}

/* kn_csv: records with each field's line and column, blank lines skipped. */
static void test_csv_reader(void **state)
{
	char text[] = "name,\"note, quoted\"\r\n"
		      "\r\n"
		      "a,\"two\nlines \"\"x\"\"\",b\n"
		      "\n"
		      "\"\",last";
	struct kn_csv c;
	struct kn_error err = {0};

	(void)state;
	kn_csv_init(&c, text, "t.csv");
	assert_int_equal(kn_csv_next(&c, &err), 1);
	assert_int_equal(c.line, 1);
	assert_int_equal(c.n_fields, 2);
	assert_string_equal(c.fields[1], "note, quoted");
	assert_int_equal(c.cols[1], 6);
	assert_int_equal(kn_csv_find(&c, "note, quoted"), 1);
	assert_int_equal(kn_csv_find(&c, "nope"), -1);
	assert_int_equal(kn_csv_next(&c, &err), 1);
	assert_int_equal(c.line, 3);
	assert_int_equal(c.n_fields, 3);
	assert_string_equal(c.fields[0], "a");
	assert_string_equal(c.fields[1], "two\nlines \"x\"");
	assert_string_equal(c.fields[2], "b");
	/* b stands on the quoted field's second line. */
	assert_int_equal(c.lines[2], 4);
	assert_int_equal(c.cols[2], 14);
	assert_int_equal(kn_csv_next(&c, &err), 1);
	assert_int_equal(c.line, 6);
	assert_string_equal(c.fields[0], "");
	assert_string_equal(c.fields[1], "last");
	assert_int_equal(c.cols[1], 4);
	assert_int_equal(kn_csv_next(&c, &err), 0);
	assert_int_equal(kn_csv_next(&c, &err), 0);
}

/* Malformed records: an error at the line and column of the problem. */
static void test_csv_reader_errors(void **state)
{
	static const struct {
		const char *text, *message;
	} cases[] = {
		{"a,b\nc,\"open\nstill open",
		 "t.csv:2:3: a quoted field is not closed"},
		{"a,b\nc,d\"e\n", "t.csv:2:4: a quote inside an unquoted field "
				  "(quote the whole field, and double the "
				  "quotes in it)"},
		{"a,\"b\"c\n", "t.csv:1:6: text after a closing quote"},
		{"x\n\"multi\nline\" x\n",
		 "t.csv:3:6: text after a closing quote"},
	};
	char wide[KN_CSV_FIELDS_MAX * 2 + 2], *longest;
	struct kn_csv c;
	struct kn_error err = {0};

	(void)state;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		char *text = kn_xstrdup(cases[i].text);
		int rc;

		kn_csv_init(&c, text, "t.csv");
		while ((rc = kn_csv_next(&c, &err)) > 0)
			;
		assert_int_equal(rc, -EINVAL);
		if (strcmp(err.message, cases[i].message) != 0)
			fail_msg("case %zu: got %s", i, err.message);
		free(text);
	}
	/* One field more than the reader holds. */
	for (int i = 0; i <= KN_CSV_FIELDS_MAX; i++) {
		wide[2 * i] = 'x';
		wide[2 * i + 1] = ',';
	}
	wide[2 * KN_CSV_FIELDS_MAX + 1] = '\0';
	kn_csv_init(&c, wide, "t.csv");
	assert_int_equal(kn_csv_next(&c, &err), -EINVAL);
	assert_string_equal(err.message, "t.csv:1:129: more than 64 fields");
	/* A record past the size bound: a quote never closed swallows the
	   file, so the rest of the text is one record. */
	longest = kn_xmalloc(KN_CSV_RECORD_MAX + 8);
	memset(longest, 'y', KN_CSV_RECORD_MAX + 7);
	memcpy(longest, "a\n", 2);
	longest[KN_CSV_RECORD_MAX + 7] = '\0';
	kn_csv_init(&c, longest, "t.csv");
	assert_int_equal(kn_csv_next(&c, &err), 1);
	assert_int_equal(kn_csv_next(&c, &err), -EINVAL);
	assert_string_equal(err.message,
			    "t.csv:2:1: a record longer than 65536 bytes");
	free(longest);
}

static void put(const char *root, const char *rel, const char *text)
{
	char *path = kn_asprintf("%s/%s", root, rel), *slash = strrchr(path, '/');

	*slash = '\0';
	assert_int_equal(kn_mkdir_p(path, 0700), 0);
	*slash = '/';
	assert_int_equal(kn_write_file_replace(path, text, strlen(text), 0600),
			 0);
	free(path);
}

static void test_git_revision(void **state)
{
	char root[] = "/tmp/kn-git-XXXXXX", rev[65], *sub;
	const char *a = "0123456789abcdef0123456789abcdef01234567";
	const char *b = "89abcdef0123456789abcdef0123456789abcdef";

	(void)state;
	assert_non_null(mkdtemp(root));
	sub = kn_asprintf("%s/src/deep", root);
	assert_int_equal(kn_mkdir_p(sub, 0700), 0);
	assert_int_equal(kn_git_revision(sub, rev), -ENOENT);
	/* A branch with no commit yet has no revision. */
	put(root, ".git/HEAD", "ref: refs/heads/main\n");
	assert_int_equal(kn_git_revision(sub, rev), -ENOENT);
	/* Packed, then loose (which wins), then detached. */
	put(root, ".git/packed-refs",
	    "# pack-refs with: peeled\n"
	    "89abcdef0123456789abcdef0123456789abcdef refs/heads/other\n"
	    "0123456789abcdef0123456789abcdef01234567 refs/heads/main\n");
	assert_int_equal(kn_git_revision(sub, rev), 0);
	assert_string_equal(rev, a);
	put(root, ".git/refs/heads/main", b);
	assert_int_equal(kn_git_revision(sub, rev), 0);
	assert_string_equal(rev, b);
	put(root, ".git/HEAD", a);
	assert_int_equal(kn_git_revision(root, rev), 0);
	assert_string_equal(rev, a);
	put(root, ".git/HEAD", "not a revision\n");
	assert_int_equal(kn_git_revision(root, rev), -ENOENT);
	/* A linked worktree: .git is a file; its branch is in commondir. */
	put(root, "wt/.git", "gitdir: ../.git/worktrees/wt\n");
	put(root, ".git/worktrees/wt/HEAD", "ref: refs/heads/main\n");
	put(root, ".git/worktrees/wt/commondir", "../..\n");
	sub = (free(sub), kn_asprintf("%s/wt", root));
	assert_int_equal(kn_git_revision(sub, rev), 0);
	assert_string_equal(rev, b);
	free(sub);
	kn_rm_rf(root);
}

static void test_text_escape(void **state)
{
	static const struct {
		const char *in;
		size_t len;
		unsigned flags;
		const char *out;
	} cases[] = {
		{"plain é 日本", 0, 0, "plain é 日本"},
		{"x\n2026-12-03T00:00:00Z kiln: forged", 0, 0,
		 "x\\n2026-12-03T00:00:00Z kiln: forged"},
		{"a\r\tb\\n", 0, 0, "a\\r\\tb\\\\n"},
		{"\x1b[2J\x1b]0;pwned\x07", 0, 0,
		 "\\x1b[2J\\x1b]0;pwned\\x07"},
		{"del\x7f c1\xc2\x9b[0m nbsp\xc2\xa0", 0, 0,
		 "del\\x7f c1\\u009b[0m nbsp\xc2\xa0"},
		{"bad\xff\xc3(\xed\xa0\x80", 0, 0,
		 "bad\\xff\\xc3(\\xed\\xa0\\x80"},
		{"nul\0x", 5, 0, "nul\\x00x"},
		{"line\n\ttab\x1b\\", 0, KN_TEXT_TERMINAL,
		 "line\n\ttab\\x1b\\"},
		/* An unfinished sequence waits for more, or is shown. */
		{"ok\xe6\x97", 0, KN_TEXT_MORE, "ok"},
		{"ok\xe6\x97", 0, 0, "ok\\xe6\\x97"},
	};
	char out[128];

	(void)state;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		size_t len = cases[i].len ? cases[i].len : strlen(cases[i].in);
		size_t used = kn_text_escape(out, sizeof(out), cases[i].in, len,
					     cases[i].flags);

		assert_string_equal(out, cases[i].out);
		assert_int_equal(used, cases[i].flags & KN_TEXT_MORE ? 2 : len);
	}
	/* Bounded, never half an escape: 3 bytes leave room for one. */
	assert_int_equal(kn_text_escape(out, 7, "\n\n\n", 3, 0), 3);
	assert_string_equal(out, "\\n\\n\\n");
	assert_int_equal(kn_text_escape(out, 6, "\n\n\n", 3, 0), 2);
	assert_string_equal(out, "\\n\\n");
	assert_int_equal(kn_text_escape(out, 4, "\x1b", 1, 0), 0);
	assert_string_equal(out, "");
}

static void test_csv_cell(void **state)
{
	static const struct {
		const char *in, *out;
	} cases[] = {
		{"train-7", "train-7"},
		{"=HYPERLINK(\"http://x\",\"y\")",
		 "\"'=HYPERLINK(\"\"http://x\"\",\"\"y\"\")\""},
		{"+1", "\"'+1\""},   {"-3.5", "\"'-3.5\""},
		{"@SUM(A1)", "\"'@SUM(A1)\""},
		{"\tx", "\"'\tx\""}, {"\rx", "\"'\rx\""},
		{"a,b", "\"a,b\""},   {"two\nlines", "\"two\nlines\""},
		{"a=b", "a=b"},       {"", ""},
	};

	(void)state;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		char *cell = kn_csv_cell(cases[i].in);

		assert_string_equal(cell, cases[i].out);
		free(cell);
	}
}

static void expect_cut(const char *in, const char *want)
{
	size_t len;
	char *out = kn_url_queries_cut(in, strlen(in), &len);

	if (!want) {
		assert_null(out);
		return;
	}
	assert_non_null(out);
	assert_int_equal(len, strlen(want));
	assert_string_equal(out, want);
	free(out);
}

static void test_url_queries_cut(void **state)
{
	(void)state;
	expect_cut("no url here, a ? and a =", NULL);
	expect_cut("http://h/c/x.bin and https://h/c/", NULL);
	expect_cut("{\"url\":\"https://a.blob.core.windows.net/c?sv=1&sig=S%3D\"}",
		   "{\"url\":\"https://a.blob.core.windows.net/c\"}");
	expect_cut("to http://h:1/c?sig=a/backup-1/ and file:///x?y#z, then",
		   "to http://h:1/c and file:///x, then");
	expect_cut("'http://h/c#frag' (https://h/d?t=1)", "'http://h/c' (https://h/d)");
	expect_cut("://?", "://");
	assert_int_equal(kn_url_base_len("http://h/c?sig=x"), 10);
	assert_int_equal(kn_url_base_len("http://h/c"), 10);
}

/* Unreserved bytes as they are, every other byte as %XX (UTF-8 byte by
   byte), '/' kept only when asked. */
static void test_url_encoded(void **state)
{
	struct kn_buf b;
	(void)state;

	kn_buf_init(&b, 1024);
	assert_int_equal(kn_buf_append_url_encoded(&b, "aZ09-._~ /?&=%#+\xc3\xa9",
						   false), 0);
	assert_string_equal(b.data, "aZ09-._~%20%2F%3F%26%3D%25%23%2B%C3%A9");
	kn_buf_release(&b);
	kn_buf_init(&b, 1024);
	assert_int_equal(kn_buf_append_url_encoded(&b, "c/1/x y", true), 0);
	assert_string_equal(b.data, "c/1/x%20y");
	kn_buf_release(&b);
	/* Past the buffer's cap the append fails, never overflows. */
	kn_buf_init(&b, 4);
	assert_true(kn_buf_append_url_encoded(&b, "     ", false) < 0);
	kn_buf_release(&b);
}

/* Hex back to bytes: exactly 2n lowercase digits, nothing else. */
static void test_unhex(void **state)
{
	static const char *const bad[] = {"00FF7A", "00ff7", "00ff7a0",
					  "00fg7a", ""};
	unsigned char out[3];
	char back[7];

	(void)state;
	assert_true(kn_unhex("00ff7a", sizeof(out), out));
	kn_hex(out, sizeof(out), back);
	assert_string_equal(back, "00ff7a");
	for (size_t i = 0; i < KN_LEN(bad); i++)
		if (kn_unhex(bad[i], sizeof(out), out))
			fail_msg("kn_unhex took \"%s\"", bad[i]);
}

struct csv_rows {
	char seen[256];
	int lines[4];
	int n, stop_at;
};

static int csv_row(void *arg, char **cells, int line, struct kn_error *err)
{
	struct csv_rows *r = arg;
	size_t at = strlen(r->seen);

	(void)err;
	snprintf(r->seen + at, sizeof(r->seen) - at, "%s=%s;", cells[0],
		 cells[1]);
	r->lines[r->n++] = line;
	return r->n == r->stop_at ? 1 : 0;
}

/* The wanted columns in the caller's order wherever the header has them;
   a short record, a missing column and a missing file each named. */
static void test_csv_read_columns(void **state)
{
	char dir[] = "/tmp/kn-test-XXXXXX";
	const char *const wanted[] = {"name", "price"};
	struct csv_rows rows = {.stop_at = -1};
	struct kn_error err;
	char *path, *want;
	(void)state;

	assert_non_null(mkdtemp(dir));
	path = kn_asprintf("%s/t.csv", dir);
	assert_int_equal(kn_write_text_atomic(path, "price,x,name\n1,a,A\n"
					      "2,b,B\n3,c,C\n", 0600, &err), 0);
	assert_int_equal(kn_csv_read_columns(path, 4096, "sku", wanted, 2,
					     csv_row, &rows, &err), 0);
	assert_string_equal(rows.seen, "A=1;B=2;C=3;");
	assert_int_equal(rows.lines[0], 2);
	assert_int_equal(rows.lines[2], 4);
	/* The row callback stops the reading. */
	memset(&rows, 0, sizeof(rows));
	rows.stop_at = 2;
	assert_int_equal(kn_csv_read_columns(path, 4096, "sku", wanted, 2,
					     csv_row, &rows, &err), 0);
	assert_string_equal(rows.seen, "A=1;B=2;");
	/* A record that ends before a wanted column. */
	assert_int_equal(kn_write_text_replace(path, "price,x,name\n1,a,A\n"
					       "2,b\n", 0600, &err), 0);
	memset(&rows, 0, sizeof(rows));
	assert_int_equal(kn_csv_read_columns(path, 4096, "sku", wanted, 2,
					     csv_row, &rows, &err), -EINVAL);
	want = kn_asprintf("%s:3: 2 fields, too few", path);
	assert_string_equal(err.message, want);
	assert_string_equal(err.field, "sku");
	free(want);
	/* A malformed record, at its line and column; blank lines skipped. */
	assert_int_equal(kn_write_text_replace(path, "price,x,name\n\n"
					       "1,a\"b,A\n", 0600, &err), 0);
	assert_int_equal(kn_csv_read_columns(path, 4096, "sku", wanted, 2,
					     csv_row, &rows, &err), -EINVAL);
	want = kn_asprintf("%s:3:4: a quote inside an unquoted field", path);
	assert_int_equal(strncmp(err.message, want, strlen(want)), 0);
	free(want);
	/* A header without a wanted column. */
	assert_int_equal(kn_write_text_replace(path, "price,x\n1,a\n", 0600,
					       &err), 0);
	assert_int_equal(kn_csv_read_columns(path, 4096, "sku", wanted, 2,
					     csv_row, &rows, &err), -EINVAL);
	want = kn_asprintf("%s:1: no column \"name\"", path);
	assert_string_equal(err.message, want);
	free(want);
	assert_int_equal(kn_rm_rf(dir), 0);
	/* A file that is not there. */
	assert_int_equal(kn_csv_read_columns(path, 4096, "sku", wanted, 2,
					     csv_row, &rows, &err), -EIO);
	want = kn_asprintf("%s: %s", path, strerror(ENOENT));
	assert_string_equal(err.message, want);
	KN_FREE_ALL(want, path);
}

static bool int_before(const void *a, const void *b)
{
	return *(const int *)a < *(const int *)b;
}

/* Each pop gives the least key in the heap, as a count per key says,
   whatever the order of pushes and pops. */
/* Every pointer given is freed, NULL among them, and a struct can be
   freed in the same call as what it owns: the heap in use is back where
   it started. Every block is larger than glibc's thread cache takes,
   which mallinfo2 counts as in use. (Under ASan, whose heap mallinfo2
   does not see, the leak check at exit catches what this would.) */
static void test_free_all(void **state)
{
	struct owner {
		char *name;
		char *data;
		char past_the_thread_cache[2048];
	};
	size_t before = mallinfo2().uordblks, held, after;
	struct owner *o = kn_xcalloc(1, sizeof(*o));
	char *loose = kn_xcalloc(1, 4096);

	(void)state;
	o->name = kn_xcalloc(1, 4096);
	o->data = kn_xcalloc(1, 8192);
	held = mallinfo2().uordblks;
	KN_FREE_ALL(loose, NULL, o->name, o->data, o);
	after = mallinfo2().uordblks;
	assert_true(held >= before + 16384 || held == 0);
	assert_int_equal(after, before);
}

/* A deadline for pthread_cond_timedwait: at least ms from now, its
   nanoseconds always under a second, whatever the clock read. */
static void test_realtime_in(void **state)
{
	static const int64_t waits[] = {0, 1, 999, 1000, 1999, 86400001};

	(void)state;
	for (size_t i = 0; i < KN_LEN(waits); i++) {
		int64_t before = kn_now_ms();
		struct timespec ts = kn_realtime_in(waits[i]);
		int64_t at = (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;

		assert_in_range(ts.tv_nsec, 0, 999999999);
		if (at < before + waits[i])
			fail_msg("%lld ms from now came %lld ms early",
				 (long long)waits[i],
				 (long long)(before + waits[i] - at));
	}
}

/* An array grown one element at a time: 16 at first, then doubled only
   when full, keeping what it held. */
static void test_xgrow(void **state)
{
	int *v = NULL;
	size_t alloc = 0;

	(void)state;
	for (size_t n = 0; n < 40; n++) {
		v = kn_xgrow(v, &alloc, n, sizeof(*v));
		assert_true(alloc > n);
		assert_int_equal(alloc, n < 16 ? 16 : n < 32 ? 32 : 64);
		v[n] = (int)n;
	}
	for (int i = 0; i < 40; i++)
		assert_int_equal(v[i], i);
	free(v);
}

static void test_heap(void **state)
{
	struct kn_heap h = {.size = sizeof(int), .before = int_before};
	int held[100] = {0};
	unsigned x = 12345;

	(void)state;
	for (int i = 0; i < 3000; i++) {
		int key, least = 0;

		if (i < 2000 && (i % 3 != 2 || h.n == 0)) {
			x = x * 1103515245u + 12345u;
			key = (int)(x >> 16) % 100;
			kn_heap_push(&h, &key);
			held[key]++;
			continue;
		}
		if (h.n == 0)
			break;
		kn_heap_pop(&h, &key);
		while (!held[least])
			least++;
		assert_int_equal(key, least);
		held[key]--;
	}
	assert_int_equal(h.n, 0);
	for (int k = 0; k < 100; k++)
		assert_int_equal(held[k], 0);
	kn_heap_release(&h);
	assert_null(h.v);
}

KN_TEST_MAIN(NULL, NULL,
	cmocka_unit_test(test_durations),
	cmocka_unit_test(test_sizes),
	cmocka_unit_test(test_format_size),
	cmocka_unit_test(test_env_get),
	cmocka_unit_test(test_header_value),
	cmocka_unit_test(test_buf_cap),
	cmocka_unit_test(test_errorf),
	cmocka_unit_test(test_files),
	cmocka_unit_test(test_write_text),
	cmocka_unit_test(test_levenshtein),
	cmocka_unit_test(test_thread_background),
	cmocka_unit_test(test_yaml_text_check),
	cmocka_unit_test(test_csv_header),
	cmocka_unit_test(test_csv_reader),
	cmocka_unit_test(test_csv_reader_errors),
	cmocka_unit_test(test_git_revision),
	cmocka_unit_test(test_text_escape),
	cmocka_unit_test(test_csv_cell),
	cmocka_unit_test(test_url_queries_cut),
	cmocka_unit_test(test_url_encoded),
	cmocka_unit_test(test_unhex),
	cmocka_unit_test(test_parse_time),
	cmocka_unit_test(test_csv_read_columns),
	cmocka_unit_test(test_xgrow),
	cmocka_unit_test(test_realtime_in),
	cmocka_unit_test(test_free_all),
	cmocka_unit_test(test_heap))
