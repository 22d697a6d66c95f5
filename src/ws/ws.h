/*
 * ws: the client side of WebSocket (RFC 6455) as far as kiln needs it
 * to reach the Kubernetes API server's pods/exec, pods/attach and
 * pods/portforward subresources: the opening handshake's request and
 * the check of its answer, frames written (masked, as a client must)
 * and frames read back into whole messages. Pure: bytes in and out of
 * buffers, no I/O, so the Kubernetes session bridge drives it over its
 * own plain or TLS connection and a fuzzer drives it alone.
 *
 * Every length a peer sends is bounded before anything is kept: a
 * control frame's 125 bytes, a message's max_message, and the 64-bit
 * length's top bit; a server's frame that is masked, sets a reserved
 * bit (no extension is ever offered), uses an unknown opcode, splits a
 * control frame, continues no message or starts a second one inside a
 * fragmented message, or encodes a length in more bytes than it needs,
 * is a protocol error that ends the connection.
 *
 * Rejected: libcurl's WebSocket API (curl 7.86+ experimental; Debian 12's
 * build has it off) and a general library (libwebsockets: its own event
 * loop and TLS, far more than three subresources need).
 */
#ifndef KILN_WS_H
#define KILN_WS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "base/base.h"

enum kn_ws_opcode {
	KN_WS_CONTINUATION = 0x0,
	KN_WS_TEXT = 0x1,
	KN_WS_BINARY = 0x2,
	KN_WS_CLOSE = 0x8,
	KN_WS_PING = 0x9,
	KN_WS_PONG = 0xa,
};

/* A frame's head: 2 bytes, 8 of extended length, 4 of mask at most. */
#define KN_WS_MAX_HEAD 14
/* A control frame's payload (RFC 6455 section 5.5). */
#define KN_WS_MAX_CONTROL 125
/* The handshake's key: base64 of 16 bytes, and its NUL. */
#define KN_WS_KEY_SIZE 25
/* The answer's head (status line and headers) is read up to this. */
#define KN_WS_MAX_RESPONSE_HEAD 8192

/*
 * A fresh Sec-WebSocket-Key into key (base64 of 16 random bytes): 0, or
 * -EIO with err when no randomness could be had.
 */
int kn_ws_key_new(char key[KN_WS_KEY_SIZE], struct kn_error *err);

/*
 * The opening handshake, a GET of path (with its query) on host, asking
 * for the subprotocols in protocols (comma-separated, the preferred
 * first); extra_headers ("Name: value\r\n" lines, or NULL) go last. A new
 * string.
 */
char *kn_ws_request(const char *host, const char *path, const char *key,
		    const char *protocols, const char *extra_headers);

/*
 * Where the answer's head ends in buf[0..len): its length with the blank
 * line, 0 when not there yet, -E2BIG when len reached
 * KN_WS_MAX_RESPONSE_HEAD without it.
 */
ssize_t kn_ws_response_end(const char *buf, size_t len);

/*
 * Checks the answer's head (head_len bytes, from kn_ws_response_end) to
 * the request made with key and protocols: 0 with *status 101 and the
 * subprotocol the server chose (one of protocols) in chosen (cap bytes);
 * -EPROTO with err when it is no WebSocket answer (no 101, Upgrade or
 * Connection missing, a Sec-WebSocket-Accept that does not match the
 * key, a subprotocol not offered or none). *status is the answer's HTTP
 * status whenever the status line parsed (else 0), so a caller can tell
 * a refusal (401, 403, 404) from a broken peer.
 */
int kn_ws_response_check(const char *head, size_t head_len, const char *key,
			 const char *protocols, int *status, char *chosen,
			 size_t cap, struct kn_error *err);

/*
 * A whole frame, masked with mask, into out (room for KN_WS_MAX_HEAD +
 * len): returns its size. opcode is one of enum kn_ws_opcode; control
 * frames carry at most KN_WS_MAX_CONTROL bytes.
 */
size_t kn_ws_encode(uint8_t *out, enum kn_ws_opcode opcode, bool fin,
		    const void *payload, size_t len, const uint8_t mask[4]);
/* A CLOSE frame with code and reason (cut to fit a control frame). */
size_t kn_ws_encode_close(uint8_t *out, unsigned code, const char *reason,
			  const uint8_t mask[4]);

/* ---- reading ---- */

/* A message read: its opcode (TEXT, BINARY, CLOSE, PING or PONG) and its
   payload, in the reader's buffer until the next call. */
struct kn_ws_message {
	enum kn_ws_opcode opcode;
	const uint8_t *data;
	size_t len;
	/* CLOSE: its status code (1005 when none was sent). */
	unsigned close_code;
};

/*
 * Bytes off the connection into whole messages: data messages are
 * put together from their fragments up to max_message bytes, control
 * frames come out as they arrive (also between a message's fragments).
 */
struct kn_ws_reader {
	size_t max_message;
	/* The frame being read. */
	uint8_t head[KN_WS_MAX_HEAD];
	size_t head_len;
	uint64_t left;     /* its payload bytes still to come */
	uint8_t opcode;    /* its opcode (a continuation's message's) */
	bool fin, control, in_frame;
	/* The data message being put together. */
	bool in_message;
	uint8_t message_opcode;
	uint8_t *message;
	size_t message_len;
	/* A control frame's payload. */
	uint8_t control_buf[KN_WS_MAX_CONTROL];
	size_t control_len;
	bool message_ready; /* the last call returned the data message */
	bool failed;
};

/* max_message: the longest data message taken (at least 1). */
void kn_ws_reader_init(struct kn_ws_reader *r, size_t max_message);
void kn_ws_reader_release(struct kn_ws_reader *r);

/*
 * Takes bytes from data[0..len) until a message is whole: 1 with *msg
 * and *used (the bytes taken; the caller passes the rest again), 0 when
 * all len bytes were taken and no message is whole yet, -EPROTO with err
 * when the bytes break the protocol (see above; the reader stays failed
 * and answers -EPROTO from then on). *msg is valid until the next call.
 */
int kn_ws_reader_feed(struct kn_ws_reader *r, const uint8_t *data,
		      size_t len, size_t *used, struct kn_ws_message *msg,
		      struct kn_error *err);

#endif
