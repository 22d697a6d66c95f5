/*
 * mux: the framed protocol interactive sessions speak (`kiln run -it`,
 * `kiln attach`, `kiln exec`, port forwarding) on one upgraded HTTP/1.1
 * connection, and the shim speaks to the server on its session socket.
 * Pure: frames in and out of byte arrays, per-stream credit windows; no
 * I/O, so the CLI, the server and the shim share it and it is fuzzed
 * alone (docs/api.md has the format).
 *
 * A frame is an 8-byte head, then its payload:
 *
 *     type u8 | flags u8 (0) | length u16 | stream u32 | payload
 *
 * big-endian, length at most KN_MUX_MAX_PAYLOAD. Stream 0 carries the
 * session's control frames (RESIZE, SIGNAL, EXIT, PING, ERROR, SESSION);
 * streams 1..3 are the process's stdin, stdout and stderr; streams from
 * KN_MUX_STREAM_FIRST_OPEN up are opened with OPEN (port forwarding).
 * DATA on a stream is flow-controlled: a side may send at most the
 * credit its peer granted (KN_MUX_WINDOW at the start, more with each
 * WINDOW frame), so one stream whose reader is slow never holds up the
 * others, and a receiver's buffer for a stream never needs more than
 * KN_MUX_WINDOW bytes. A peer that sends past its credit broke the
 * protocol and is cut off.
 *
 * Rejected: WebSocket (RFC 6455). It frames bytes but has no streams
 * and no flow control of its own, so the same layer would sit inside it
 * anyway, behind masking and fragmentation rules a terminal does not
 * need; and libcurl on Debian 12 does not speak it.
 */
#ifndef KILN_MUX_H
#define KILN_MUX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/base.h"

/* The Upgrade token a client asks for and the server answers 101 with. */
#define KN_MUX_PROTOCOL "kiln-mux/1"

#define KN_MUX_HEAD 8
/* A frame's payload: small enough to interleave streams finely. */
#define KN_MUX_MAX_PAYLOAD 16384
#define KN_MUX_MAX_FRAME (KN_MUX_HEAD + KN_MUX_MAX_PAYLOAD)
/* Each stream's credit in each direction at its start. */
#define KN_MUX_WINDOW (256 * 1024)
/* The most credit a side may hold (what WINDOW frames may add up to). */
#define KN_MUX_WINDOW_MAX (16 * 1024 * 1024)
/* A terminal's rows and columns, each 1..this. */
#define KN_MUX_MAX_DIM 4096
/* The text of an EXIT reason, an ERROR or a RESET. */
#define KN_MUX_MAX_TEXT 512

enum kn_mux_type {
	KN_MUX_DATA = 1,    /* stream >= 1: bytes (1..MAX_PAYLOAD) */
	KN_MUX_WINDOW_UPDATE = 2, /* stream >= 1: u32 more credit */
	KN_MUX_OPEN = 3,    /* stream >= FIRST_OPEN: what to open (text) */
	KN_MUX_END = 4,     /* stream >= 1: no more DATA from the sender */
	KN_MUX_RESET = 5,   /* stream >= 1: the stream is abandoned (text) */
	KN_MUX_RESIZE = 6,  /* stream 0: u16 rows, u16 cols */
	KN_MUX_SIGNAL = 7,  /* stream 0: u8 signal number (see below) */
	KN_MUX_EXIT = 8,    /* stream 0: u8 code, u8 signal, reason text */
	KN_MUX_PING = 9,    /* stream 0: up to 8 bytes, no answer */
	KN_MUX_ERROR = 10,  /* stream 0: why the sender closes (text) */
	KN_MUX_SESSION = 11, /* stream 0: server to shim: a JSON request */
};
#define KN_MUX_TYPE_MAX KN_MUX_SESSION
/* A set of types (bit 1 << type), for what one side may send. */
#define KN_MUX_BIT(t) (1u << (t))

#define KN_MUX_STREAM_CONTROL 0
#define KN_MUX_STREAM_STDIN 1
#define KN_MUX_STREAM_STDOUT 2
#define KN_MUX_STREAM_STDERR 3
#define KN_MUX_STREAM_FIRST_OPEN 16
/* Stream ids stay below 2^31 (the top bit is reserved). */
#define KN_MUX_STREAM_MAX 0x7fffffffu

/* A SESSION request's JSON: the server writes it, the shim reads it. */
#define KN_MUX_MAX_SESSION KN_MUX_MAX_PAYLOAD

struct kn_mux_frame {
	uint8_t type;
	uint32_t stream;
	uint16_t len;
	const uint8_t *payload; /* len bytes, in the caller's buffer */
};

/*
 * The frame at the start of buf[0..len): 1 with *f (payload pointing into
 * buf) and *used its size; 0 when buf holds only part of one; -EPROTO
 * with err when the bytes are no frame of this protocol: an unknown type,
 * flags set, a length over the cap or wrong for the type, a control
 * frame on a stream or a stream frame on stream 0, a WINDOW of 0 or over
 * KN_MUX_WINDOW_MAX, a RESIZE outside 1..KN_MUX_MAX_DIM, a SIGNAL not in
 * kn_mux_signal_allowed, text over KN_MUX_MAX_TEXT. *f and *used are
 * written only when 1.
 */
int kn_mux_decode(const uint8_t *buf, size_t len, struct kn_mux_frame *f,
		  size_t *used, struct kn_error *err);

/*
 * Writes a frame into out (room for KN_MUX_HEAD + len): returns its size.
 * len is at most KN_MUX_MAX_PAYLOAD; payload may be NULL when len is 0.
 */
size_t kn_mux_encode(uint8_t *out, enum kn_mux_type type, uint32_t stream,
		     const void *payload, size_t len);
/* WINDOW, RESIZE, SIGNAL, EXIT frames into out (KN_MUX_MAX_FRAME). */
size_t kn_mux_encode_window(uint8_t *out, uint32_t stream, uint32_t credit);
size_t kn_mux_encode_resize(uint8_t *out, unsigned rows, unsigned cols);
size_t kn_mux_encode_signal(uint8_t *out, int signo);
/* reason is cut to KN_MUX_MAX_TEXT bytes. */
size_t kn_mux_encode_exit(uint8_t *out, int code, int signo,
			  const char *reason);
/* ERROR and RESET: text cut to KN_MUX_MAX_TEXT bytes. */
size_t kn_mux_encode_text(uint8_t *out, enum kn_mux_type type,
			  uint32_t stream, const char *text);

/* A decoded frame's fields, for the types that have them. */
uint32_t kn_mux_window_credit(const struct kn_mux_frame *f);
void kn_mux_resize_size(const struct kn_mux_frame *f, unsigned *rows,
			unsigned *cols);
int kn_mux_signal_number(const struct kn_mux_frame *f);
void kn_mux_exit_status(const struct kn_mux_frame *f, int *code, int *signo);
/* A text payload (EXIT's reason, ERROR, RESET, OPEN) as a C string in
   buf (cap bytes), cut to fit; control bytes become '?'. */
void kn_mux_text(const struct kn_mux_frame *f, char *buf, size_t cap);

/*
 * The signals a session may send its process: HUP, INT, QUIT, KILL,
 * USR1, USR2, TERM, WINCH (Linux numbers, which the protocol uses).
 */
bool kn_mux_signal_allowed(int signo);

/* ---- reading a byte stream into frames ---- */

/*
 * Bytes as they come off a socket, into whole frames. Holds at most one
 * frame: fill takes only what fits, the caller keeps the rest and fills
 * again after next has taken a frame out.
 */
struct kn_mux_reader {
	uint8_t buf[KN_MUX_MAX_FRAME];
	size_t len;  /* bytes held */
	size_t used; /* bytes of the frame next returned last */
};

void kn_mux_reader_init(struct kn_mux_reader *r);
/* Takes up to len bytes: returns how many it took. */
size_t kn_mux_reader_fill(struct kn_mux_reader *r, const void *data,
			  size_t len);
/*
 * The next whole frame: 1 with *f (valid until the next fill or next),
 * 0 when more bytes are needed, -EPROTO with err (see kn_mux_decode).
 */
int kn_mux_reader_next(struct kn_mux_reader *r, struct kn_mux_frame *f,
		       struct kn_error *err);

/* ---- credit ---- */

/*
 * One stream's credit both ways: send is what this side may still send,
 * recv what the peer may still send before this side grants more;
 * consumed counts bytes this side's reader took and not yet granted back.
 */
struct kn_mux_window {
	int64_t send, recv, consumed;
};

void kn_mux_window_init(struct kn_mux_window *w);
/* The peer sent n bytes of DATA: 0, or -EPROTO with err when over its
   credit. */
int kn_mux_window_take(struct kn_mux_window *w, size_t n,
		       struct kn_error *err);
/* The peer granted credit: 0, or -EPROTO with err when the total would
   pass KN_MUX_WINDOW_MAX. */
int kn_mux_window_grant(struct kn_mux_window *w, uint32_t credit,
			struct kn_error *err);
/*
 * A WINDOW frame f for one of win's streams (stdin, stdout, stderr, by
 * number): 0, or -EPROTO with err when f names another stream or its
 * credit would pass KN_MUX_WINDOW_MAX.
 */
int kn_mux_window_update(struct kn_mux_window win[KN_MUX_STREAM_STDERR + 1],
			 const struct kn_mux_frame *f, struct kn_error *err);
/* This side sent n bytes (n <= send). */
void kn_mux_window_spend(struct kn_mux_window *w, size_t n);
/*
 * This side's reader took n bytes: the credit to grant the peer now (a
 * WINDOW frame), or 0 while less than half a window waits to be
 * granted: few frames, and the peer never runs dry.
 */
uint32_t kn_mux_window_consume(struct kn_mux_window *w, size_t n);

#endif
