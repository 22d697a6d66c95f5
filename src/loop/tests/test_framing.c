/*
 * The request framing rules (framing.c), case by case: the known request
 * smuggling shapes are refused, plain requests are taken with the right
 * body length; then the field splitter both HTTP readers share.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <string.h>

#include "base/tests/testmain.h"
#include "loop/loop.h"

#define RL "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"

struct framing_case {
	const char *head;
	size_t len; /* 0: strlen(head) */
	int status; /* 0: taken */
	uint64_t body_len;
};

static const struct framing_case CASES[] = {
	/* taken */
	{RL "\r\n", 0, 0, 0},
	{RL "Content-Length: 30\r\n\r\n", 0, 0, 30},
	{RL "content-length:7 \t\r\n\r\n", 0, 0, 7},
	{RL "Content-Length: 0\r\n\r\n", 0, 0, 0},
	{RL "X-A: caf\xc3\xa9\tb\r\n\r\n", 0, 0, 0},
	{RL "X-Empty:\r\n\r\n", 0, 0, 0},
	{"GET /v1/models HTTP/1.0\r\n\r\n", 0, 0, 0},
	{"GET http://x/v1/models HTTP/1.1\r\nHost: x\r\n\r\n", 0, 0, 0},
	{"OPTIONS * HTTP/1.1\r\nHost: x\r\n\r\n", 0, 0, 0},
	{RL "Content-Length: 999999999999999999\r\n\r\n", 0, 0,
	 999999999999999999ULL},
	/* Content-Length: conflicting, repeated, listed, signed, not digits,
	   overflowing */
	{RL "Content-Length: 30\r\nContent-Length: 31\r\n\r\n", 0, 400, 0},
	{RL "Content-Length: 30\r\nContent-Length: 30\r\n\r\n", 0, 400, 0},
	{RL "Content-Length: 30, 30\r\n\r\n", 0, 400, 0},
	{RL "Content-Length: +30\r\n\r\n", 0, 400, 0},
	{RL "Content-Length: -1\r\n\r\n", 0, 400, 0},
	{RL "Content-Length: 0x1e\r\n\r\n", 0, 400, 0},
	{RL "Content-Length: 3 0\r\n\r\n", 0, 400, 0},
	{RL "Content-Length:\r\n\r\n", 0, 400, 0},
	{RL "Content-Length: 18446744073709551646\r\n\r\n", 0, 400, 0},
	{RL "Content-Length: 9999999999999999999\r\n\r\n", 0, 400, 0},
	/* Content-Length with Transfer-Encoding; Transfer-Encoding alone */
	{RL "Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n", 0, 400,
	 0},
	{RL "Transfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n", 0, 400,
	 0},
	{RL "Transfer-Encoding: chunked\r\n\r\n", 0, 411, 0},
	{RL "Transfer-Encoding: identity\r\n\r\n", 0, 411, 0},
	/* field names: whitespace before the colon, not a token, empty */
	{RL "Content-Length : 5\r\n\r\n", 0, 400, 0},
	{RL "Content-Length\t: 5\r\n\r\n", 0, 400, 0},
	{RL "Content Length: 5\r\n\r\n", 0, 400, 0},
	{RL "X(a): b\r\n\r\n", 0, 400, 0},
	{RL ": b\r\n\r\n", 0, 400, 0},
	{RL "NoColon\r\n\r\n", 0, 400, 0},
	/* obsolete line folding */
	{RL "X-A: b\r\n c\r\n\r\n", 0, 400, 0},
	{RL "X-A: b\r\n\tContent-Length: 5\r\n\r\n", 0, 400, 0},
	/* NUL and other control bytes in values and names */
	{RL "X-A: b\0c\r\n\r\n", sizeof(RL "X-A: b\0c\r\n\r\n") - 1, 400, 0},
	{RL "X-A\0: b\r\n\r\n", sizeof(RL "X-A\0: b\r\n\r\n") - 1, 400, 0},
	{RL "X-A: b\x01\r\n\r\n", 0, 400, 0},
	{RL "X-A: b\x7f\r\n\r\n", 0, 400, 0},
	/* bare CR, bare LF */
	{RL "X-A: b\rContent-Length: 5\r\n\r\n", 0, 400, 0},
	{RL "X-A: b\nContent-Length: 5\r\n\r\n", 0, 400, 0},
	{"POST /v1/chat/completions HTTP/1.1\nHost: x\n\n", 0, 400, 0},
	{"POST /v1/chat/completions HTTP/1.1\rHost: x\r\n\r\n", 0, 400, 0},
	/* versions */
	{"GET / HTTP/1.9\r\nHost: x\r\n\r\n", 0, 505, 0},
	{"GET / HTTP/2.0\r\nHost: x\r\n\r\n", 0, 505, 0},
	{"GET / HTTP/0.9\r\nHost: x\r\n\r\n", 0, 505, 0},
	{"GET / HTTP/1.10\r\nHost: x\r\n\r\n", 0, 400, 0},
	{"GET / HTTP/1\r\nHost: x\r\n\r\n", 0, 400, 0},
	{"GET / http/1.1\r\nHost: x\r\n\r\n", 0, 400, 0},
	{"GET /\r\nHost: x\r\n\r\n", 0, 400, 0},
	/* request line shape and target */
	{"GET  / HTTP/1.1\r\nHost: x\r\n\r\n", 0, 400, 0},
	{"GET / HTTP/1.1 \r\nHost: x\r\n\r\n", 0, 400, 0},
	{"GET\t/ HTTP/1.1\r\nHost: x\r\n\r\n", 0, 400, 0},
	{"GET v1/models HTTP/1.1\r\nHost: x\r\n\r\n", 0, 400, 0},
	{"GET /a\x7f HTTP/1.1\r\nHost: x\r\n\r\n", 0, 400, 0},
	{"GET /\xc3\xa9 HTTP/1.1\r\nHost: x\r\n\r\n", 0, 400, 0},
	{"G(T / HTTP/1.1\r\nHost: x\r\n\r\n", 0, 400, 0},
	{" GET / HTTP/1.1\r\nHost: x\r\n\r\n", 0, 400, 0},
	{"\r\nGET / HTTP/1.1\r\nHost: x\r\n\r\n", 0, 400, 0},
	/* Host: none or two in HTTP/1.1 */
	{"GET / HTTP/1.1\r\n\r\n", 0, 400, 0},
	{"GET / HTTP/1.1\r\nHost: x\r\nHost: y\r\n\r\n", 0, 400, 0},
	/* not a whole head */
	{"GET / HTTP/1.1\r\nHost: x\r\n", 0, 400, 0},
	{"\r\n\r\n", 0, 400, 0},
	{"", 0, 400, 0},
};

static void test_framing_cases(void **state)
{
	(void)state;
	for (size_t i = 0; i < sizeof(CASES) / sizeof(CASES[0]); i++) {
		const struct framing_case *c = &CASES[i];
		size_t len = c->len ? c->len : strlen(c->head);
		struct kn_http_framing fr;
		int status = kn_http_framing_check(c->head, len, &fr);

		if (status != c->status ||
		    (!status && fr.body_len != c->body_len)) {
			fprintf(stderr, "case %zu: %d (want %d): %.*s\n", i,
				status, c->status, (int)len, c->head);
			fail();
		}
	}
}

struct field_case {
	const char *fields; /* the lines after the start line */
	int rc;             /* of the last call */
	const char *split;  /* "name=value;" per field taken */
};

static const struct field_case FIELD_CASES[] = {
	{"Host: x\r\nX-A:  a b \t\r\n\r\nbody", 0, "Host=x;X-A=a b;"},
	{"X-Empty:\r\nX-Blank: \t \r\n\r\n", 0, "X-Empty=;X-Blank=;"},
	{"Bare-LF: 1\nX: a:b\n\n", 0, "Bare-LF=1;X=a:b;"},
	{"Host: x\r\nno colon\r\n\r\n", -1, "Host=x;"},
	{"Host: x\r\nCut: y", 0, "Host=x;"},
	{"", 0, ""},
};

static void test_field_split(void **state)
{
	(void)state;
	for (size_t i = 0; i < sizeof(FIELD_CASES) / sizeof(FIELD_CASES[0]);
	     i++) {
		const struct field_case *c = &FIELD_CASES[i];
		char buf[256], split[256] = "", *p = buf, *name, *value;
		size_t len = strlen(c->fields);
		int rc;

		memcpy(buf, c->fields, len + 1);
		while ((rc = kn_http_field_next(&p, buf + len, &name, &value)) >
		       0)
			snprintf(split + strlen(split),
				 sizeof(split) - strlen(split), "%s=%s;", name,
				 value);
		if (rc != c->rc || strcmp(split, c->split)) {
			fprintf(stderr, "case %zu: %d \"%s\" (want %d \"%s\")\n",
				i, rc, split, c->rc, c->split);
			fail();
		}
	}
}

KN_TEST_MAIN(NULL, NULL,
	cmocka_unit_test(test_framing_cases),
	cmocka_unit_test(test_field_split))
