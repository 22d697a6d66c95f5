/*
 * libFuzzer harness for the session protocol's frames (src/mux): the
 * input, after a first byte that sets how it is split, is a byte stream
 * from a peer. Read whole and read in pieces it must give the same
 * frames, each within the protocol's bounds and re-encoding to the very
 * bytes it came from; a refusal must name a field and come at the same
 * place both ways. DATA is charged to a stream's credit, which must
 * never go below zero.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "mux/mux.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_frame(const struct kn_mux_frame *f, const uint8_t *raw)
{
	uint8_t again[KN_MUX_MAX_FRAME];
	size_t n;
	char text[KN_MUX_MAX_TEXT + 1];

	if (f->len > KN_MUX_MAX_PAYLOAD || f->stream > KN_MUX_STREAM_MAX ||
	    f->type < KN_MUX_DATA || f->type > KN_MUX_TYPE_MAX)
		abort();
	n = kn_mux_encode(again, f->type, f->stream, f->payload, f->len);
	if (n != (size_t)KN_MUX_HEAD + f->len || memcmp(again, raw, n))
		abort();
	kn_mux_text(f, text, sizeof(text));
	if (strlen(text) > KN_MUX_MAX_TEXT)
		abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct kn_mux_reader *r;
	struct kn_mux_frame f;
	struct kn_mux_window w;
	struct kn_error err;
	size_t step, off = 0, whole_frames = 0, piece_frames = 0, used;
	int whole_rc = 0, rc = 0;

	if (size < 1)
		return 0;
	step = (size_t)data[0] % 64 + 1;
	data++;
	size--;
	kn_mux_window_init(&w);
	/* Whole. */
	while ((whole_rc = kn_mux_decode(data + off, size - off, &f, &used,
					 &err)) == 1) {
		check_frame(&f, data + off);
		if (f.type == KN_MUX_DATA &&
		    kn_mux_window_take(&w, f.len, &err) == 0)
			kn_mux_window_consume(&w, f.len);
		if (w.recv < 0)
			abort();
		off += used;
		whole_frames++;
	}
	if (whole_rc < 0 && !err.field[0])
		abort();
	/* In pieces of step bytes. */
	r = malloc(sizeof(*r));
	if (!r)
		abort();
	kn_mux_reader_init(r);
	off = 0;
	while (rc == 0 && off < size) {
		size_t chunk = size - off < step ? size - off : step;
		off += kn_mux_reader_fill(r, data + off, chunk);
		while ((rc = kn_mux_reader_next(r, &f, &err)) == 1)
			piece_frames++;
	}
	if (rc == 0)
		while ((rc = kn_mux_reader_next(r, &f, &err)) == 1)
			piece_frames++;
	if (piece_frames != whole_frames || (rc < 0) != (whole_rc < 0))
		abort();
	free(r);
	return 0;
}
