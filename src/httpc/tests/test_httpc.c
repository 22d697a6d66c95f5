/* A reply's header lines as curl hands them to a header callback. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>

#include "base/tests/testmain.h"
#include "httpc/httpc.h"

static void test_header_lines(void **state)
{
	/* Each line, the name asked for, and the value, NULL for none. */
	static const char *const cases[][3] = {
		{"Content-Range: bytes 0-7/8\r\n", "content-range",
		 "bytes 0-7/8"},
		{"ETAG:\t\"0x8D\" \r\n", "etag", "\"0x8D\""},
		{"x-ms-error-code:\r\n", "x-ms-error-code", ""},
		{"Content-Length-Extra: 5\r\n", "content-length", NULL},
		{"Content-Length 5\r\n", "content-length", NULL},
		{"Etag", "etag", NULL},
		{"HTTP/1.1 206 Partial Content\r\n", "http", NULL},
	};

	(void)state;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		const char *v = NULL;
		size_t vlen = 0;
		bool found = kn_httpc_header(cases[i][0], strlen(cases[i][0]),
					     cases[i][1], &v, &vlen);

		if (!cases[i][2]) {
			assert_false(found);
			continue;
		}
		assert_true(found);
		assert_int_equal(vlen, strlen(cases[i][2]));
		assert_memory_equal(v, cases[i][2], vlen);
	}
}

KN_TEST_MAIN(NULL, NULL,
	cmocka_unit_test(test_header_lines))
