/*
 * libFuzzer harness for WebSocket frames from a server (src/ws): the
 * input, after a first byte that sets how it is split, is what a
 * hostile API server sends once the connection is upgraded. Read whole
 * and read in pieces it must give the same messages, each within its
 * bounds (a control frame's 125 bytes, the reader's message cap), and a
 * refusal must come at the same byte both ways. The rest of the input
 * is also read as the handshake's answer, which must never be accepted
 * with a subprotocol that was not offered.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ws/ws.h"

#define MAX_MESSAGE 4096
#define PROTOCOLS "v5.channel.k8s.io,v4.channel.k8s.io"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Reads data in steps of step bytes: the messages' opcodes, lengths and
   a checksum of their bytes into sum; the offset of a refusal, or -1. */
static long read_all(const uint8_t *data, size_t size, size_t step,
		     uint64_t *sum)
{
	struct kn_ws_reader r;
	struct kn_ws_message m;
	struct kn_error err;
	size_t off = 0;
	long failed_at = -1;

	*sum = 0;
	kn_ws_reader_init(&r, MAX_MESSAGE);
	while (off < size) {
		size_t n = size - off < step ? size - off : step, used = 0;
		int rc = kn_ws_reader_feed(&r, data + off, n, &used, &m, &err);
		if (rc < 0) {
			failed_at = (long)off;
			break;
		}
		if (used > n)
			abort();
		off += used;
		if (rc == 1) {
			if (m.opcode >= KN_WS_CLOSE ? m.len > KN_WS_MAX_CONTROL
						     : m.len > MAX_MESSAGE)
				abort();
			*sum = *sum * 31 + m.opcode * 1000003u + m.len;
			for (size_t i = 0; i < m.len; i++)
				*sum = *sum * 131 + m.data[i];
		} else if (used != n) {
			abort();
		}
	}
	kn_ws_reader_release(&r);
	return failed_at;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	uint64_t whole_sum, piece_sum;
	long whole_at, piece_at;
	size_t step;
	ssize_t end;
	char chosen[64];
	int status;
	struct kn_error err;

	if (size < 1)
		return 0;
	step = (size_t)data[0] % 64 + 1;
	data++;
	size--;
	whole_at = read_all(data, size, size ? size : 1, &whole_sum);
	piece_at = read_all(data, size, step, &piece_sum);
	/* A refusal is found at a frame's head however the bytes came, so
	   both ways give the same messages before it. */
	if ((whole_at < 0) != (piece_at < 0) || whole_sum != piece_sum)
		abort();

	end = kn_ws_response_end((const char *)data, size);
	if (end > 0 &&
	    kn_ws_response_check((const char *)data, (size_t)end,
				 "dGhlIHNhbXBsZSBub25jZQ==", PROTOCOLS,
				 &status, chosen, sizeof(chosen), &err) == 0) {
		if (status != 101 || (strcmp(chosen, "v5.channel.k8s.io") &&
				      strcmp(chosen, "v4.channel.k8s.io")))
			abort();
	}
	return 0;
}
