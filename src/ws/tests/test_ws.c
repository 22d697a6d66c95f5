/*
 * WebSocket's client side (ws.c): the handshake's accept key as RFC 6455
 * computes it, every way an answer can fail to be a WebSocket's, client
 * frames masked at each length encoding, and server frames read whole,
 * in fragments, byte by byte, and refused for each rule they break.
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
#include "ws/ws.h"

/* The example of RFC 6455 section 1.3. */
#define RFC_KEY "dGhlIHNhbXBsZSBub25jZQ=="
#define RFC_ACCEPT "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="
#define PROTOCOLS "v5.channel.k8s.io,v4.channel.k8s.io"

static const uint8_t MASK[4] = {0x37, 0xfa, 0x21, 0x3d};

/* A server's (unmasked) frame head for opcode and len into out. */
static size_t server_head(uint8_t *out, uint8_t first, uint64_t len)
{
	out[0] = first;
	if (len < 126) {
		out[1] = (uint8_t)len;
		return 2;
	}
	if (len <= 0xffff) {
		out[1] = 126;
		out[2] = (uint8_t)(len >> 8);
		out[3] = (uint8_t)len;
		return 4;
	}
	out[1] = 127;
	for (int i = 0; i < 8; i++)
		out[2 + i] = (uint8_t)(len >> (56 - 8 * i));
	return 10;
}

static void test_handshake(void **state)
{
	const char *ok = "HTTP/1.1 101 Switching Protocols\r\n"
			 "Upgrade: WebSocket\r\n"
			 "Connection: keep-alive, Upgrade\r\n"
			 "Sec-WebSocket-Accept: " RFC_ACCEPT "\r\n"
			 "Sec-WebSocket-Protocol: v4.channel.k8s.io\r\n\r\n";
	char chosen[64], key[KN_WS_KEY_SIZE], *req;
	struct kn_error err;
	int status;

	(void)state;
	assert_int_equal(kn_ws_response_end(ok, strlen(ok)),
			 (ssize_t)strlen(ok));
	assert_int_equal(kn_ws_response_end(ok, strlen(ok) - 1), 0);
	assert_int_equal(kn_ws_response_check(ok, strlen(ok), RFC_KEY,
					      PROTOCOLS, &status, chosen,
					      sizeof(chosen), &err),
			 0);
	assert_int_equal(status, 101);
	assert_string_equal(chosen, "v4.channel.k8s.io");

	assert_int_equal(kn_ws_key_new(key, &err), 0);
	assert_int_equal(strlen(key), 24);
	req = kn_ws_request("api:6443", "/api/v1/x?stdin=1", key, PROTOCOLS,
			    "Authorization: Bearer t\r\n");
	assert_non_null(strstr(req, "GET /api/v1/x?stdin=1 HTTP/1.1\r\n"));
	assert_non_null(strstr(req, "Sec-WebSocket-Version: 13\r\n"));
	assert_non_null(strstr(req, "Sec-WebSocket-Protocol: " PROTOCOLS));
	assert_non_null(strstr(req, "Authorization: Bearer t\r\n\r\n"));
	free(req);
}

static void test_handshake_refused(void **state)
{
	static const struct {
		const char *head;
		int status;
		const char *field;
	} cases[] = {
		{"HTTP/1.1 403 Forbidden\r\n\r\n", 403, ""},
		{"SSH-2.0-OpenSSH\r\n\r\n", 0, ""},
		{"HTTP/1.1 101 x\r\nConnection: upgrade\r\n"
		 "Sec-WebSocket-Accept: " RFC_ACCEPT "\r\n"
		 "Sec-WebSocket-Protocol: v4.channel.k8s.io\r\n\r\n",
		 101, "Upgrade"},
		{"HTTP/1.1 101 x\r\nUpgrade: websocket\r\n"
		 "Sec-WebSocket-Accept: " RFC_ACCEPT "\r\n"
		 "Sec-WebSocket-Protocol: v4.channel.k8s.io\r\n\r\n",
		 101, "Connection"},
		{"HTTP/1.1 101 x\r\nUpgrade: websocket\r\nConnection: upgrade\r\n"
		 "Sec-WebSocket-Accept: AAAAPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n"
		 "Sec-WebSocket-Protocol: v4.channel.k8s.io\r\n\r\n",
		 101, "Sec-WebSocket-Accept"},
		{"HTTP/1.1 101 x\r\nUpgrade: websocket\r\nConnection: upgrade\r\n"
		 "Sec-WebSocket-Accept: " RFC_ACCEPT "\r\n\r\n",
		 101, "Sec-WebSocket-Protocol"},
		{"HTTP/1.1 101 x\r\nUpgrade: websocket\r\nConnection: upgrade\r\n"
		 "Sec-WebSocket-Accept: " RFC_ACCEPT "\r\n"
		 "Sec-WebSocket-Protocol: base64.channel.k8s.io\r\n\r\n",
		 101, "Sec-WebSocket-Protocol"},
		/* Subprotocols compare exactly. */
		{"HTTP/1.1 101 x\r\nUpgrade: websocket\r\nConnection: upgrade\r\n"
		 "Sec-WebSocket-Accept: " RFC_ACCEPT "\r\n"
		 "Sec-WebSocket-Protocol: V4.channel.k8s.io\r\n\r\n",
		 101, "Sec-WebSocket-Protocol"},
		{"HTTP/1.1 101 x\r\nUpgrade: websocket\r\nConnection: upgrade\r\n"
		 "Sec-WebSocket-Accept: " RFC_ACCEPT "\r\n"
		 "Sec-WebSocket-Protocol: v4.channel.k8s.io, v5.channel.k8s.io"
		 "\r\n\r\n",
		 101, "Sec-WebSocket-Protocol"},
	};
	char chosen[64] = "unset";
	struct kn_error err;
	int status;

	(void)state;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		assert_int_equal(kn_ws_response_check(cases[i].head,
						      strlen(cases[i].head),
						      RFC_KEY, PROTOCOLS,
						      &status, chosen,
						      sizeof(chosen), &err),
				 -EPROTO);
		assert_int_equal(status, cases[i].status);
		assert_string_equal(err.field, cases[i].field);
		assert_string_equal(chosen, "unset");
	}
	{
		char big[KN_WS_MAX_RESPONSE_HEAD];
		memset(big, 'a', sizeof(big));
		assert_int_equal(kn_ws_response_end(big, sizeof(big)), -E2BIG);
	}
}

/* Client frames: masked, each length in the fewest bytes. */
static void test_encode(void **state)
{
	static const size_t lens[] = {0, 1, 125, 126, 65535, 65536, 70000};
	static const size_t heads[] = {6, 6, 6, 8, 8, 14, 14};
	uint8_t *payload = malloc(70000), *out = malloc(70000 + 14);

	(void)state;
	for (size_t i = 0; i < 70000; i++)
		payload[i] = (uint8_t)(i * 7);
	for (size_t c = 0; c < sizeof(lens) / sizeof(lens[0]); c++) {
		size_t n = kn_ws_encode(out, KN_WS_BINARY, true, payload,
					lens[c], MASK);
		size_t h = heads[c];
		assert_int_equal(n, h + lens[c]);
		assert_int_equal(out[0], 0x82);
		assert_true(out[1] & 0x80);
		assert_memory_equal(out + h - 4, MASK, 4);
		for (size_t i = 0; i < lens[c]; i++)
			assert_int_equal(out[h + i] ^ MASK[i & 3], payload[i]);
	}
	assert_int_equal(kn_ws_encode_close(out, 1000, "bye", MASK), 6 + 5);
	assert_int_equal(out[0], 0x88);
	assert_int_equal(out[6] ^ MASK[0], 0x03);
	assert_int_equal(out[7] ^ MASK[1], 0xe8);
	KN_FREE_ALL(payload, out);
}

/* Feeds data whole, then byte by byte: the same messages either way. */
static void read_both_ways(const uint8_t *data, size_t len, size_t max,
			   const char *expect)
{
	for (int piecewise = 0; piecewise < 2; piecewise++) {
		struct kn_ws_reader r;
		struct kn_ws_message m;
		struct kn_error err;
		char got[512] = "";
		size_t off = 0;

		kn_ws_reader_init(&r, max);
		while (off < len) {
			size_t n = piecewise ? 1 : len - off, used;
			int rc = kn_ws_reader_feed(&r, data + off, n, &used, &m,
						   &err);
			assert_true(rc >= 0);
			off += used;
			if (rc == 1) {
				size_t g = strlen(got);
				snprintf(got + g, sizeof(got) - g, "%d:%zu:%.*s;",
					 m.opcode, m.len,
					 m.len < 16 ? (int)m.len : 16,
					 (const char *)m.data);
			}
		}
		assert_string_equal(got, expect);
		kn_ws_reader_release(&r);
	}
}

static void test_read(void **state)
{
	uint8_t buf[200000];
	size_t n = 0;

	(void)state;
	/* Empty, short, 16-bit and 64-bit lengths. */
	n += server_head(buf + n, 0x82, 0);
	n += server_head(buf + n, 0x82, 3);
	memcpy(buf + n, "\x01hi", 3);
	n += 3;
	n += server_head(buf + n, 0x82, 300);
	memset(buf + n, 'a', 300);
	n += 300;
	n += server_head(buf + n, 0x82, 70000);
	memset(buf + n, 'b', 70000);
	n += 70000;
	/* A fragmented message with a ping between its fragments. */
	n += server_head(buf + n, 0x02, 2);
	memcpy(buf + n, "\x01" "a", 2);
	n += 2;
	n += server_head(buf + n, 0x89, 1);
	buf[n++] = 'p';
	n += server_head(buf + n, 0x80, 2);
	memcpy(buf + n, "bc", 2);
	n += 2;
	/* A close with its code and reason. */
	n += server_head(buf + n, 0x88, 4);
	memcpy(buf + n, "\x03\xe8ok", 4);
	n += 4;
	read_both_ways(buf, n, 100000,
		       "2:0:;2:3:\x01hi;2:300:aaaaaaaaaaaaaaaa;"
		       "2:70000:bbbbbbbbbbbbbbbb;9:1:p;2:4:\x01" "abc;8:2:ok;");
}

static void test_refused(void **state)
{
	static const struct {
		const char *bytes;
		size_t len;
		const char *why;
	} cases[] = {
		{"\xc2\x00", 2, "reserved bit"},
		{"\x82\x81\x00\x00\x00\x00x", 7, "masked"},
		{"\x83\x00", 2, "unknown opcode"},
		{"\x80\x00", 2, "continuation of no message"},
		{"\x02\x00\x02\x00", 4, "new message inside"},
		{"\x09\x00", 2, "fragmented control"},
		{"\x89\x7e\x00\x7e", 4, "over 125"},
		{"\x88\x01\x03", 3, "close frame of 1 byte"},
		{"\x82\x7e\x00\x7d", 4, "16-bit length under 126"},
		{"\x82\x7f\x00\x00\x00\x00\x00\x00\xff\xff", 10,
		 "64-bit length under 65536"},
		{"\x82\x7f\x80\x00\x00\x00\x00\x00\x00\x00", 10, "top bit"},
		{"\x82\x7e\x01\x00", 4, "over 200 bytes"},
		{"\x02\x7d", 2, NULL}, /* two frames over the cap together */
	};
	uint8_t two[400];

	(void)state;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct kn_ws_reader r;
		struct kn_ws_message m;
		struct kn_error err;
		const uint8_t *data = (const uint8_t *)cases[i].bytes;
		size_t len = cases[i].len, used;
		int rc;

		if (!cases[i].why) {
			size_t n = server_head(two, 0x02, 125);
			memset(two + n, 'x', 125);
			n += 125;
			n += server_head(two + n, 0x80, 100);
			data = two;
			len = n;
		}
		kn_ws_reader_init(&r, 200);
		rc = kn_ws_reader_feed(&r, data, len, &used, &m, &err);
		assert_int_equal(rc, -EPROTO);
		assert_string_equal(err.field, "frame");
		assert_non_null(strstr(err.message, cases[i].why
							    ? cases[i].why
							    : "over 200 bytes"));
		/* A failed reader stays failed. */
		assert_int_equal(kn_ws_reader_feed(&r, data, 1, &used, &m,
						   &err),
				 -EPROTO);
		kn_ws_reader_release(&r);
	}
}

KN_TEST_MAIN(NULL, NULL,
	cmocka_unit_test(test_handshake),
	cmocka_unit_test(test_handshake_refused),
	cmocka_unit_test(test_encode),
	cmocka_unit_test(test_read),
	cmocka_unit_test(test_refused))
