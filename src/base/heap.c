/* The binary heap the event-driven replays order their events with. */
#include "base/base.h"

#include <stdlib.h>
#include <string.h>

static void *at(const struct kn_heap *h, size_t i)
{
	return (char *)h->v + i * h->size;
}

void kn_heap_push(struct kn_heap *h, const void *e)
{
	size_t i;

	h->v = kn_xgrow(h->v, &h->cap, h->n, h->size);
	/* Parents after e move down a level; e goes in the hole left. */
	for (i = h->n++; i > 0 && h->before(e, at(h, (i - 1) / 2));
	     i = (i - 1) / 2)
		memcpy(at(h, i), at(h, (i - 1) / 2), h->size);
	memcpy(at(h, i), e, h->size);
}

void kn_heap_pop(struct kn_heap *h, void *out)
{
	/* The last element stays in its slot, past the end, until placed. */
	const void *last = at(h, --h->n);
	size_t i = 0;

	memcpy(out, h->v, h->size);
	for (;;) {
		size_t c = 2 * i + 1;

		if (c >= h->n)
			break;
		if (c + 1 < h->n && h->before(at(h, c + 1), at(h, c)))
			c++;
		if (!h->before(at(h, c), last))
			break;
		memcpy(at(h, i), at(h, c), h->size);
		i = c;
	}
	if (h->n > 0)
		memcpy(at(h, i), last, h->size);
}

void kn_heap_release(struct kn_heap *h)
{
	free(h->v);
	h->v = NULL;
	h->n = h->cap = 0;
}
