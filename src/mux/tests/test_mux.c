/*
 * The session protocol's frames (mux.c): each kind round-trips through
 * the encoder and the decoder, every malformed head or payload is refused
 * with the field it breaks, a frame split anywhere comes out whole, and
 * credit refuses DATA past what was granted.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <errno.h>
#include <signal.h>
#include <string.h>

#include "base/tests/testmain.h"
#include "mux/mux.h"

static void test_round_trip(void **state)
{
	uint8_t buf[KN_MUX_MAX_FRAME];
	struct kn_mux_frame f;
	struct kn_error err;
	size_t n, used = 0;
	unsigned rows, cols;
	int code, sig;
	char text[64];

	(void)state;
	n = kn_mux_encode(buf, KN_MUX_DATA, KN_MUX_STREAM_STDIN, "ls\r", 3);
	assert_int_equal(n, KN_MUX_HEAD + 3);
	assert_int_equal(kn_mux_decode(buf, n, &f, &used, &err), 1);
	assert_int_equal(used, n);
	assert_int_equal(f.type, KN_MUX_DATA);
	assert_int_equal(f.stream, KN_MUX_STREAM_STDIN);
	assert_int_equal(f.len, 3);
	assert_memory_equal(f.payload, "ls\r", 3);

	n = kn_mux_encode_window(buf, 7, 4096);
	assert_int_equal(kn_mux_decode(buf, n, &f, &used, &err), 1);
	assert_int_equal(kn_mux_window_credit(&f), 4096);
	assert_int_equal(f.stream, 7);

	n = kn_mux_encode_resize(buf, 40, 132);
	assert_int_equal(kn_mux_decode(buf, n, &f, &used, &err), 1);
	kn_mux_resize_size(&f, &rows, &cols);
	assert_int_equal(rows, 40);
	assert_int_equal(cols, 132);

	n = kn_mux_encode_signal(buf, SIGINT);
	assert_int_equal(kn_mux_decode(buf, n, &f, &used, &err), 1);
	assert_int_equal(kn_mux_signal_number(&f), SIGINT);

	n = kn_mux_encode_exit(buf, 3, 0, "done\n");
	assert_int_equal(kn_mux_decode(buf, n, &f, &used, &err), 1);
	kn_mux_exit_status(&f, &code, &sig);
	assert_int_equal(code, 3);
	assert_int_equal(sig, 0);
	kn_mux_text(&f, text, sizeof(text));
	assert_string_equal(text, "done?");

	n = kn_mux_encode_text(buf, KN_MUX_ERROR, 0, "no such task");
	assert_int_equal(kn_mux_decode(buf, n, &f, &used, &err), 1);
	kn_mux_text(&f, text, 5);
	assert_string_equal(text, "no s");
}

struct bad_case {
	uint8_t head[KN_MUX_HEAD];
	uint8_t payload[4];
	size_t payload_len;
	const char *field;
};

/* type, flags, length (2), stream (4). */
static const struct bad_case BAD[] = {
	{{0, 0, 0, 1, 0, 0, 0, 1}, {1}, 1, "type"},
	{{12, 0, 0, 0, 0, 0, 0, 0}, {0}, 0, "type"},
	{{1, 1, 0, 1, 0, 0, 0, 1}, {1}, 1, "flags"},
	{{1, 0, 0x40, 0x01, 0, 0, 0, 1}, {0}, 0, "length"},
	{{1, 0, 0, 1, 0, 0, 0, 0}, {1}, 1, "stream"},          /* DATA on 0 */
	{{1, 0, 0, 1, 0x80, 0, 0, 1}, {1}, 1, "stream"},       /* top bit */
	{{6, 0, 0, 4, 0, 0, 0, 1}, {0, 1, 0, 1}, 4, "stream"}, /* RESIZE on 1 */
	{{3, 0, 0, 1, 0, 0, 0, 2}, {'x'}, 1, "stream"},        /* OPEN on 2 */
	{{1, 0, 0, 0, 0, 0, 0, 1}, {0}, 0, "payload"},         /* empty DATA */
	{{2, 0, 0, 4, 0, 0, 0, 1}, {0, 0, 0, 0}, 4, "payload"}, /* credit 0 */
	{{2, 0, 0, 4, 0, 0, 0, 1}, {1, 0, 0, 1}, 4, "payload"},
	{{2, 0, 0, 3, 0, 0, 0, 1}, {0, 0, 1}, 3, "payload"},
	{{4, 0, 0, 1, 0, 0, 0, 1}, {0}, 1, "payload"},         /* END + data */
	{{6, 0, 0, 4, 0, 0, 0, 0}, {0, 0, 0, 80}, 4, "payload"},
	{{6, 0, 0, 4, 0, 0, 0, 0}, {0x10, 1, 0, 80}, 4, "payload"},
	{{7, 0, 0, 1, 0, 0, 0, 0}, {SIGSTOP}, 1, "payload"},
	{{7, 0, 0, 1, 0, 0, 0, 0}, {0}, 1, "payload"},
	{{8, 0, 0, 1, 0, 0, 0, 0}, {0}, 1, "payload"},
	{{11, 0, 0, 0, 0, 0, 0, 0}, {0}, 0, "payload"},
};

static void test_refused(void **state)
{
	uint8_t buf[KN_MUX_HEAD + 4];
	struct kn_mux_frame f = {0};
	struct kn_error err;
	size_t used = 99;

	(void)state;
	for (size_t i = 0; i < sizeof(BAD) / sizeof(BAD[0]); i++) {
		memcpy(buf, BAD[i].head, KN_MUX_HEAD);
		memcpy(buf + KN_MUX_HEAD, BAD[i].payload, BAD[i].payload_len);
		memset(&err, 0, sizeof(err));
		assert_int_equal(kn_mux_decode(buf,
					       KN_MUX_HEAD +
						       BAD[i].payload_len,
					       &f, &used, &err),
				 -EPROTO);
		assert_string_equal(err.field, BAD[i].field);
		assert_int_equal(strncmp(err.message, "frame: ", 7), 0);
		/* Nothing written on failure. */
		assert_int_equal(used, 99);
		assert_int_equal(f.type, 0);
	}
}

/* A bad head is refused before its payload arrives. */
static void test_refused_early(void **state)
{
	uint8_t head[KN_MUX_HEAD] = {1, 0, 0xff, 0xff, 0, 0, 0, 1};
	struct kn_mux_frame f;
	struct kn_error err;
	size_t used;

	(void)state;
	assert_int_equal(kn_mux_decode(head, 7, &f, &used, &err), 0);
	assert_int_equal(kn_mux_decode(head, 8, &f, &used, &err), -EPROTO);
}

/* Frames split at every byte come out whole and in order. */
static void test_reader_split(void **state)
{
	uint8_t wire[3 * KN_MUX_MAX_FRAME], big[KN_MUX_MAX_PAYLOAD];
	struct kn_mux_reader r;
	struct kn_mux_frame f;
	struct kn_error err;
	size_t n = 0;

	(void)state;
	memset(big, 'b', sizeof(big));
	n += kn_mux_encode(wire + n, KN_MUX_DATA, 2, "hello", 5);
	n += kn_mux_encode(wire + n, KN_MUX_DATA, 2, big, sizeof(big));
	n += kn_mux_encode_resize(wire + n, 24, 80);
	for (size_t step = 1; step <= 9000; step = step * 3 + 1) {
		size_t off = 0, got = 0;
		kn_mux_reader_init(&r);
		while (off < n || got < 3) {
			size_t chunk = n - off < step ? n - off : step, took;
			int rc;
			took = kn_mux_reader_fill(&r, wire + off, chunk);
			off += took;
			while ((rc = kn_mux_reader_next(&r, &f, &err)) == 1) {
				if (got == 0)
					assert_memory_equal(f.payload, "hello",
							    5);
				else if (got == 1)
					assert_int_equal(f.len, sizeof(big));
				else
					assert_int_equal(f.type,
							 KN_MUX_RESIZE);
				got++;
			}
			assert_int_equal(rc, 0);
			assert_true(took > 0 || got == 3);
		}
		assert_int_equal(got, 3);
	}
}

static void test_window(void **state)
{
	struct kn_mux_window w;
	struct kn_error err;
	uint32_t grant = 0;

	(void)state;
	kn_mux_window_init(&w);
	assert_int_equal(kn_mux_window_take(&w, KN_MUX_WINDOW, &err), 0);
	assert_int_equal(kn_mux_window_take(&w, 1, &err), -EPROTO);
	assert_string_equal(err.field, "window");
	/* Granted back once half a window was read. */
	assert_int_equal(kn_mux_window_consume(&w, KN_MUX_WINDOW / 2 - 1), 0);
	grant = kn_mux_window_consume(&w, 1);
	assert_int_equal(grant, KN_MUX_WINDOW / 2);
	assert_int_equal(kn_mux_window_take(&w, KN_MUX_WINDOW / 2, &err), 0);
	assert_int_equal(kn_mux_window_take(&w, 1, &err), -EPROTO);

	kn_mux_window_spend(&w, KN_MUX_WINDOW);
	assert_int_equal(w.send, 0);
	assert_int_equal(kn_mux_window_grant(&w, KN_MUX_WINDOW_MAX, &err), 0);
	assert_int_equal(kn_mux_window_grant(&w, 1, &err), -EPROTO);
	assert_int_equal(w.send, KN_MUX_WINDOW_MAX);
}

KN_TEST_MAIN(NULL, NULL,
	cmocka_unit_test(test_round_trip),
	cmocka_unit_test(test_refused),
	cmocka_unit_test(test_refused_early),
	cmocka_unit_test(test_reader_split),
	cmocka_unit_test(test_window))
