/*
 * WebSocket's client side (ws.h): the handshake of RFC 6455 section 4.1
 * and the framing of section 5, checked byte by byte as they come, so a
 * hostile server's frame is refused at its head, before its payload is
 * kept anywhere.
 */
#include "ws/ws.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <openssl/evp.h>
#include <openssl/rand.h>
#include <openssl/sha.h>

/* The GUID every accept key is derived with (RFC 6455 section 1.3). */
#define ACCEPT_GUID "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
/* Headers of an answer looked at; more is no answer of a WebSocket. */
#define MAX_HEADERS 64

int kn_ws_key_new(char key[KN_WS_KEY_SIZE], struct kn_error *err)
{
	unsigned char raw[16];

	if (RAND_bytes(raw, sizeof(raw)) != 1)
		return kn_errorf(err, KN_EIO, NULL,
				 "no randomness for a WebSocket key");
	EVP_EncodeBlock((unsigned char *)key, raw, sizeof(raw));
	return 0;
}

char *kn_ws_request(const char *host, const char *path, const char *key,
		    const char *protocols, const char *extra_headers)
{
	return kn_asprintf("GET %s HTTP/1.1\r\n"
			   "Host: %s\r\n"
			   "Upgrade: websocket\r\n"
			   "Connection: Upgrade\r\n"
			   "Sec-WebSocket-Key: %s\r\n"
			   "Sec-WebSocket-Version: 13\r\n"
			   "Sec-WebSocket-Protocol: %s\r\n"
			   "%s\r\n",
			   path, host, key, protocols,
			   extra_headers ? extra_headers : "");
}

ssize_t kn_ws_response_end(const char *buf, size_t len)
{
	for (size_t i = 3; i < len; i++)
		if (buf[i] == '\n' && buf[i - 1] == '\r' && buf[i - 2] == '\n' &&
		    buf[i - 3] == '\r')
			return (ssize_t)(i + 1);
	return len >= KN_WS_MAX_RESPONSE_HEAD ? -E2BIG : 0;
}

/* The accept value a server must send for key (base64 of a SHA-1). */
static void accept_for(const char *key, char out[29])
{
	unsigned char digest[SHA_DIGEST_LENGTH];
	char *text = kn_asprintf("%s" ACCEPT_GUID, key);

	SHA1((const unsigned char *)text, strlen(text), digest);
	EVP_EncodeBlock((unsigned char *)out, digest, sizeof(digest));
	free(text);
}

/* Whether list (comma-separated, spaces allowed) holds token, in any
   case (a header's keyword) or exactly (a subprotocol). */
static bool list_has(const char *list, const char *token, bool any_case)
{
	size_t n = strlen(token);

	while (list && *list) {
		size_t len;
		while (*list == ' ' || *list == '\t' || *list == ',')
			list++;
		len = strcspn(list, ",");
		while (len && (list[len - 1] == ' ' || list[len - 1] == '\t'))
			len--;
		if (len == n && !(any_case ? strncasecmp(list, token, n)
					   : strncmp(list, token, n)))
			return true;
		list += strcspn(list, ",");
	}
	return false;
}

/* The head's headers, split in place in copy: how many. */
static size_t split_headers(char *copy, const char **names,
			    const char **values)
{
	size_t n = 0;
	char *line = strstr(copy, "\r\n");

	while (line && n < MAX_HEADERS) {
		char *next, *colon;
		line += 2;
		next = strstr(line, "\r\n");
		if (!next || next == line)
			break;
		*next = '\0';
		colon = strchr(line, ':');
		if (colon) {
			char *v = colon + 1, *end = next;
			*colon = '\0';
			while (*v == ' ' || *v == '\t')
				v++;
			while (end > v && (end[-1] == ' ' || end[-1] == '\t'))
				*--end = '\0';
			names[n] = line;
			values[n++] = v;
		}
		line = next;
	}
	return n;
}

int kn_ws_response_check(const char *head, size_t head_len, const char *key,
			 const char *protocols, int *status, char *chosen,
			 size_t cap, struct kn_error *err)
{
	const char *names[MAX_HEADERS], *values[MAX_HEADERS], *v;
	char *copy = kn_xmalloc(head_len + 1), expected[29];
	int code = 0, rc = 0;
	size_t n;

	memcpy(copy, head, head_len);
	copy[head_len] = '\0';
	*status = 0;
	if (sscanf(copy, "HTTP/1.1 %3d ", &code) != 1 || code < 100 ||
	    code > 599) {
		rc = kn_errorf(err, KN_EIO, NULL,
			       "the answer is not HTTP/1.1 (status line \"%.60s\")",
			       copy);
		goto out;
	}
	*status = code;
	if (code != 101) {
		rc = kn_errorf(err, KN_EIO, NULL,
			       "HTTP %d instead of 101 Switching Protocols",
			       code);
		goto out;
	}
	n = split_headers(copy, names, values);
	v = kn_header_value(names, values, n, "Upgrade");
	if (!v || strcasecmp(v, "websocket") != 0) {
		rc = kn_errorf(err, KN_EIO, "Upgrade",
			       "Upgrade: not websocket in the 101 answer");
		goto out;
	}
	v = kn_header_value(names, values, n, "Connection");
	if (!v || !list_has(v, "upgrade", true)) {
		rc = kn_errorf(err, KN_EIO, "Connection",
			       "Connection: no upgrade in the 101 answer");
		goto out;
	}
	accept_for(key, expected);
	v = kn_header_value(names, values, n, "Sec-WebSocket-Accept");
	if (!v || strcmp(v, expected) != 0) {
		rc = kn_errorf(err, KN_EIO, "Sec-WebSocket-Accept",
			       "Sec-WebSocket-Accept does not match the key sent");
		goto out;
	}
	v = kn_header_value(names, values, n, "Sec-WebSocket-Protocol");
	if (!v || !*v || strchr(v, ',') || !list_has(protocols, v, false) ||
	    strlen(v) >= cap) {
		rc = kn_errorf(err, KN_EIO, "Sec-WebSocket-Protocol",
			       "the server chose %s%s%s, not one of %s",
			       v ? "\"" : "no subprotocol", v ? v : "",
			       v ? "\"" : "", protocols);
		goto out;
	}
	kn_strlcpy(chosen, v, cap);
out:
	free(copy);
	return rc < 0 ? -EPROTO : 0;
}

/* ---- writing ---- */

size_t kn_ws_encode(uint8_t *out, enum kn_ws_opcode opcode, bool fin,
		    const void *payload, size_t len, const uint8_t mask[4])
{
	const uint8_t *p = payload;
	size_t n = 2;

	out[0] = (uint8_t)((fin ? 0x80 : 0) | (opcode & 0x0f));
	if (len < 126) {
		out[1] = (uint8_t)(0x80 | len);
	} else if (len <= 0xffff) {
		out[1] = 0x80 | 126;
		out[2] = (uint8_t)(len >> 8);
		out[3] = (uint8_t)len;
		n = 4;
	} else {
		out[1] = 0x80 | 127;
		for (int i = 0; i < 8; i++)
			out[2 + i] = (uint8_t)((uint64_t)len >> (56 - 8 * i));
		n = 10;
	}
	memcpy(out + n, mask, 4);
	n += 4;
	for (size_t i = 0; i < len; i++)
		out[n + i] = p[i] ^ mask[i & 3];
	return n + len;
}

size_t kn_ws_encode_close(uint8_t *out, unsigned code, const char *reason,
			  const uint8_t mask[4])
{
	uint8_t body[KN_WS_MAX_CONTROL];
	size_t n = reason ? strlen(reason) : 0;

	if (n > KN_WS_MAX_CONTROL - 2)
		n = KN_WS_MAX_CONTROL - 2;
	body[0] = (uint8_t)(code >> 8);
	body[1] = (uint8_t)code;
	if (n)
		memcpy(body + 2, reason, n);
	return kn_ws_encode(out, KN_WS_CLOSE, true, body, n + 2, mask);
}

/* ---- reading ---- */

void kn_ws_reader_init(struct kn_ws_reader *r, size_t max_message)
{
	memset(r, 0, sizeof(*r));
	r->max_message = max_message ? max_message : 1;
}

void kn_ws_reader_release(struct kn_ws_reader *r)
{
	free(r->message);
	r->message = NULL;
}

static int fail(struct kn_ws_reader *r, struct kn_error *err,
		const char *what)
{
	r->failed = true;
	kn_errorf(err, KN_EIO, "frame", "WebSocket frame from the server: %s",
		  what);
	return -EPROTO;
}

/* The head's size once its first two bytes are in. */
static size_t head_size(const uint8_t *h)
{
	unsigned len7 = h[1] & 0x7f;

	return 2 + (len7 == 126 ? 2 : len7 == 127 ? 8 : 0) +
	       (h[1] & 0x80 ? 4 : 0);
}

/* The whole head is in: check it and start the frame's payload. */
static int begin_frame(struct kn_ws_reader *r, struct kn_error *err)
{
	const uint8_t *h = r->head;
	unsigned opcode = h[0] & 0x0f, len7 = h[1] & 0x7f;
	uint64_t len = len7;

	if (h[0] & 0x70)
		return fail(r, err, "a reserved bit is set (no extension was "
			    "negotiated)");
	if (h[1] & 0x80)
		return fail(r, err, "masked (a server's frames never are)");
	if (len7 == 126) {
		len = (uint64_t)h[2] << 8 | h[3];
		if (len < 126)
			return fail(r, err, "a 16-bit length under 126");
	} else if (len7 == 127) {
		len = 0;
		for (int i = 0; i < 8; i++)
			len = len << 8 | h[2 + i];
		if (len >> 63)
			return fail(r, err, "a 64-bit length with its top bit "
				    "set");
		if (len <= 0xffff)
			return fail(r, err, "a 64-bit length under 65536");
	}
	r->fin = (h[0] & 0x80) != 0;
	r->control = opcode >= 0x8;
	switch (opcode) {
	case KN_WS_CONTINUATION:
		if (!r->in_message)
			return fail(r, err, "a continuation of no message");
		break;
	case KN_WS_TEXT:
	case KN_WS_BINARY:
		if (r->in_message)
			return fail(r, err, "a new message inside a fragmented "
				    "one");
		r->in_message = true;
		r->message_opcode = (uint8_t)opcode;
		r->message_len = 0;
		break;
	case KN_WS_CLOSE:
	case KN_WS_PING:
	case KN_WS_PONG:
		if (!r->fin)
			return fail(r, err, "a fragmented control frame");
		if (len > KN_WS_MAX_CONTROL)
			return fail(r, err, "a control frame over 125 bytes");
		if (opcode == KN_WS_CLOSE && len == 1)
			return fail(r, err, "a close frame of 1 byte");
		r->control_len = 0;
		break;
	default:
		return fail(r, err, "an unknown opcode");
	}
	if (!r->control && len > r->max_message - r->message_len) {
		char what[96];
		snprintf(what, sizeof(what), "a message over %zu bytes",
			 r->max_message);
		return fail(r, err, what);
	}
	r->opcode = (uint8_t)opcode;
	r->left = len;
	r->in_frame = true;
	return 0;
}

/* The frame's payload is all in: 1 and *msg when a message is whole. */
static int end_frame(struct kn_ws_reader *r, struct kn_ws_message *msg)
{
	r->in_frame = false;
	r->head_len = 0;
	if (r->control) {
		msg->opcode = r->opcode;
		msg->data = r->control_buf;
		msg->len = r->control_len;
		msg->close_code = 1005;
		if (r->opcode == KN_WS_CLOSE && r->control_len >= 2) {
			msg->close_code = (unsigned)r->control_buf[0] << 8 |
					  r->control_buf[1];
			msg->data += 2;
			msg->len -= 2;
		}
		return 1;
	}
	if (!r->fin)
		return 0;
	r->in_message = false;
	r->message_ready = true;
	msg->opcode = r->message_opcode;
	msg->data = r->message ? r->message : (const uint8_t *)"";
	msg->len = r->message_len;
	msg->close_code = 0;
	return 1;
}

int kn_ws_reader_feed(struct kn_ws_reader *r, const uint8_t *data,
		      size_t len, size_t *used, struct kn_ws_message *msg,
		      struct kn_error *err)
{
	size_t off = 0;
	int rc;

	if (r->failed)
		return fail(r, err, "the connection already broke the "
			    "protocol");
	if (r->message_ready) { /* the caller is done with it */
		r->message_ready = false;
		r->message_len = 0;
	}
	while (off < len) {
		if (!r->in_frame) {
			size_t need = r->head_len < 2 ? 2 : head_size(r->head);
			r->head[r->head_len++] = data[off++];
			if (r->head_len == 2)
				need = head_size(r->head);
			if (r->head_len < need)
				continue;
			if ((rc = begin_frame(r, err)) < 0)
				return rc;
		} else {
			size_t n = len - off;
			if (n > r->left)
				n = (size_t)r->left;
			if (r->control) {
				memcpy(r->control_buf + r->control_len,
				       data + off, n);
				r->control_len += n;
			} else {
				if (!r->message)
					r->message = kn_xmalloc(r->max_message);
				memcpy(r->message + r->message_len, data + off,
				       n);
				r->message_len += n;
			}
			off += n;
			r->left -= n;
		}
		if (r->in_frame && r->left == 0 && end_frame(r, msg) == 1) {
			*used = off;
			return 1;
		}
	}
	*used = off;
	return 0;
}
