/*
 * The session protocol's frames and credit (mux.h). Every check a frame
 * can fail is made here, once, on the raw bytes: the server, the shim and
 * the CLI each take frames from a peer they do not trust (a client, a
 * task that may have replaced its shim's socket, a server), so none of
 * them looks at a field this file has not bounded.
 */
#include "mux/mux.h"

#include <errno.h>
#include <signal.h>
#include <string.h>

static uint16_t get16(const uint8_t *p)
{
	return (uint16_t)((unsigned)p[0] << 8 | p[1]);
}

static uint32_t get32(const uint8_t *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 |
	       (uint32_t)p[2] << 8 | p[3];
}

static void put16(uint8_t *p, unsigned v)
{
	p[0] = (uint8_t)(v >> 8);
	p[1] = (uint8_t)v;
}

static void put32(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)(v >> 24);
	p[1] = (uint8_t)(v >> 16);
	p[2] = (uint8_t)(v >> 8);
	p[3] = (uint8_t)v;
}

bool kn_mux_signal_allowed(int signo)
{
	switch (signo) {
	case SIGHUP: case SIGINT: case SIGQUIT: case SIGKILL:
	case SIGUSR1: case SIGUSR2: case SIGTERM: case SIGWINCH:
		return true;
	default:
		return false;
	}
}

static bool on_control(uint8_t type)
{
	return type >= KN_MUX_RESIZE;
}

/* The payload's shape for its type: NULL when right, else what is wrong. */
static const char *payload_fault(uint8_t type, const uint8_t *p, size_t len)
{
	uint32_t credit;

	switch (type) {
	case KN_MUX_DATA:
		return len ? NULL : "DATA without bytes";
	case KN_MUX_WINDOW_UPDATE:
		if (len != 4)
			return "WINDOW payload is not 4 bytes";
		credit = get32(p);
		return credit && credit <= KN_MUX_WINDOW_MAX
			       ? NULL
			       : "WINDOW credit outside 1..16777216";
	case KN_MUX_OPEN:
		return len && len <= KN_MUX_MAX_TEXT ? NULL
						     : "OPEN text length";
	case KN_MUX_END:
		return len ? "END with a payload" : NULL;
	case KN_MUX_RESET:
	case KN_MUX_ERROR:
		return len <= KN_MUX_MAX_TEXT ? NULL : "text over 512 bytes";
	case KN_MUX_RESIZE:
		if (len != 4)
			return "RESIZE payload is not 4 bytes";
		return get16(p) >= 1 && get16(p) <= KN_MUX_MAX_DIM &&
				       get16(p + 2) >= 1 &&
				       get16(p + 2) <= KN_MUX_MAX_DIM
			       ? NULL
			       : "RESIZE outside 1..4096";
	case KN_MUX_SIGNAL:
		if (len != 1)
			return "SIGNAL payload is not 1 byte";
		return kn_mux_signal_allowed(p[0]) ? NULL
						   : "SIGNAL not allowed";
	case KN_MUX_EXIT:
		return len >= 2 && len <= 2 + KN_MUX_MAX_TEXT
			       ? NULL
			       : "EXIT payload length";
	case KN_MUX_PING:
		return len <= 8 ? NULL : "PING over 8 bytes";
	case KN_MUX_SESSION:
		return len ? NULL : "SESSION without a request";
	default:
		return "unknown frame type";
	}
}

int kn_mux_decode(const uint8_t *buf, size_t len, struct kn_mux_frame *f,
		  size_t *used, struct kn_error *err)
{
	const char *fault;
	uint8_t type;
	uint32_t stream;
	size_t plen;

	if (len < KN_MUX_HEAD)
		return 0;
	type = buf[0];
	plen = get16(buf + 2);
	stream = get32(buf + 4);
	if (type < KN_MUX_DATA || type > KN_MUX_TYPE_MAX) {
		kn_errorf(err, KN_EINVAL, "type", "frame: unknown type %u",
			  type);
		return -EPROTO;
	}
	if (buf[1]) {
		kn_errorf(err, KN_EINVAL, "flags", "frame: flags 0x%02x set",
			  buf[1]);
		return -EPROTO;
	}
	if (plen > KN_MUX_MAX_PAYLOAD) {
		kn_errorf(err, KN_EINVAL, "length",
			  "frame: payload of %zu bytes over %d", plen,
			  KN_MUX_MAX_PAYLOAD);
		return -EPROTO;
	}
	if (stream > KN_MUX_STREAM_MAX ||
	    (on_control(type) != (stream == KN_MUX_STREAM_CONTROL)) ||
	    (type == KN_MUX_OPEN && stream < KN_MUX_STREAM_FIRST_OPEN)) {
		kn_errorf(err, KN_EINVAL, "stream",
			  "frame: type %u on stream %u", type, stream);
		return -EPROTO;
	}
	if (len < KN_MUX_HEAD + plen)
		return 0;
	if ((fault = payload_fault(type, buf + KN_MUX_HEAD, plen))) {
		kn_errorf(err, KN_EINVAL, "payload", "frame: %s", fault);
		return -EPROTO;
	}
	f->type = type;
	f->stream = stream;
	f->len = (uint16_t)plen;
	f->payload = buf + KN_MUX_HEAD;
	*used = KN_MUX_HEAD + plen;
	return 1;
}

size_t kn_mux_encode(uint8_t *out, enum kn_mux_type type, uint32_t stream,
		     const void *payload, size_t len)
{
	if (len > KN_MUX_MAX_PAYLOAD)
		len = KN_MUX_MAX_PAYLOAD;
	out[0] = (uint8_t)type;
	out[1] = 0;
	put16(out + 2, (unsigned)len);
	put32(out + 4, stream);
	if (len)
		memcpy(out + KN_MUX_HEAD, payload, len);
	return KN_MUX_HEAD + len;
}

size_t kn_mux_encode_window(uint8_t *out, uint32_t stream, uint32_t credit)
{
	uint8_t p[4];

	put32(p, credit);
	return kn_mux_encode(out, KN_MUX_WINDOW_UPDATE, stream, p, 4);
}

size_t kn_mux_encode_resize(uint8_t *out, unsigned rows, unsigned cols)
{
	uint8_t p[4];

	put16(p, rows);
	put16(p + 2, cols);
	return kn_mux_encode(out, KN_MUX_RESIZE, KN_MUX_STREAM_CONTROL, p, 4);
}

size_t kn_mux_encode_signal(uint8_t *out, int signo)
{
	uint8_t p = (uint8_t)signo;

	return kn_mux_encode(out, KN_MUX_SIGNAL, KN_MUX_STREAM_CONTROL, &p, 1);
}

size_t kn_mux_encode_exit(uint8_t *out, int code, int signo,
			  const char *reason)
{
	size_t n = reason ? strnlen(reason, KN_MUX_MAX_TEXT) : 0;
	uint8_t p[2 + KN_MUX_MAX_TEXT];

	p[0] = (uint8_t)code;
	p[1] = (uint8_t)signo;
	if (n)
		memcpy(p + 2, reason, n);
	return kn_mux_encode(out, KN_MUX_EXIT, KN_MUX_STREAM_CONTROL, p,
			     2 + n);
}

size_t kn_mux_encode_text(uint8_t *out, enum kn_mux_type type,
			  uint32_t stream, const char *text)
{
	return kn_mux_encode(out, type, stream, text,
			     strnlen(text, KN_MUX_MAX_TEXT));
}

uint32_t kn_mux_window_credit(const struct kn_mux_frame *f)
{
	return get32(f->payload);
}

void kn_mux_resize_size(const struct kn_mux_frame *f, unsigned *rows,
			unsigned *cols)
{
	*rows = get16(f->payload);
	*cols = get16(f->payload + 2);
}

int kn_mux_signal_number(const struct kn_mux_frame *f)
{
	return f->payload[0];
}

void kn_mux_exit_status(const struct kn_mux_frame *f, int *code, int *signo)
{
	*code = f->payload[0];
	*signo = f->payload[1];
}

void kn_mux_text(const struct kn_mux_frame *f, char *buf, size_t cap)
{
	size_t skip = f->type == KN_MUX_EXIT ? 2 : 0, n, i;

	if (!cap)
		return;
	n = f->len > skip ? f->len - skip : 0;
	if (n > cap - 1)
		n = cap - 1;
	for (i = 0; i < n; i++) {
		uint8_t ch = f->payload[skip + i];
		buf[i] = ch < 0x20 || ch == 0x7f ? '?' : (char)ch;
	}
	buf[n] = '\0';
}

/* ---- the reader ---- */

void kn_mux_reader_init(struct kn_mux_reader *r)
{
	r->len = r->used = 0;
}

/* Drop the frame handed out last. */
static void reader_settle(struct kn_mux_reader *r)
{
	if (!r->used)
		return;
	r->len -= r->used;
	if (r->len)
		memmove(r->buf, r->buf + r->used, r->len);
	r->used = 0;
}

size_t kn_mux_reader_fill(struct kn_mux_reader *r, const void *data,
			  size_t len)
{
	size_t room;

	reader_settle(r);
	room = sizeof(r->buf) - r->len;
	if (len > room)
		len = room;
	memcpy(r->buf + r->len, data, len);
	r->len += len;
	return len;
}

int kn_mux_reader_next(struct kn_mux_reader *r, struct kn_mux_frame *f,
		       struct kn_error *err)
{
	size_t used;
	int rc;

	reader_settle(r);
	rc = kn_mux_decode(r->buf, r->len, f, &used, err);
	if (rc == 1)
		r->used = used;
	return rc;
}

/* ---- credit ---- */

void kn_mux_window_init(struct kn_mux_window *w)
{
	w->send = w->recv = KN_MUX_WINDOW;
	w->consumed = 0;
}

int kn_mux_window_take(struct kn_mux_window *w, size_t n,
		       struct kn_error *err)
{
	if ((int64_t)n > w->recv) {
		kn_errorf(err, KN_EINVAL, "window",
			  "frame: %zu bytes of DATA over the %lld of credit "
			  "granted", n, (long long)w->recv);
		return -EPROTO;
	}
	w->recv -= (int64_t)n;
	return 0;
}

int kn_mux_window_grant(struct kn_mux_window *w, uint32_t credit,
			struct kn_error *err)
{
	if (w->send + (int64_t)credit > KN_MUX_WINDOW_MAX) {
		kn_errorf(err, KN_EINVAL, "window",
			  "frame: WINDOW takes the credit over %d",
			  KN_MUX_WINDOW_MAX);
		return -EPROTO;
	}
	w->send += credit;
	return 0;
}

int kn_mux_window_update(struct kn_mux_window win[KN_MUX_STREAM_STDERR + 1],
			 const struct kn_mux_frame *f, struct kn_error *err)
{
	if (f->stream > KN_MUX_STREAM_STDERR) {
		kn_errorf(err, KN_EINVAL, "window",
			  "frame: WINDOW for stream %u, which has none",
			  (unsigned)f->stream);
		return -EPROTO;
	}
	return kn_mux_window_grant(&win[f->stream], kn_mux_window_credit(f),
				   err);
}

void kn_mux_window_spend(struct kn_mux_window *w, size_t n)
{
	w->send -= (int64_t)n;
}

uint32_t kn_mux_window_consume(struct kn_mux_window *w, size_t n)
{
	uint32_t grant;

	w->consumed += (int64_t)n;
	if (w->consumed < KN_MUX_WINDOW / 2)
		return 0;
	grant = (uint32_t)w->consumed;
	w->recv += w->consumed;
	w->consumed = 0;
	return grant;
}
