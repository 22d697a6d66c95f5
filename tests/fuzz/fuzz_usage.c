/*
 * libFuzzer harness for usage sketches as the store holds them
 * (kn_usage_hist_decode): a sketch that reads back must encode to text
 * that reads back to the same counts, and its percentiles must be in
 * order; one that does not must leave the sketch as it was.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cost/cost.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct kn_usage_hist h, back;
	struct kn_rightsize rs;
	struct kn_error err;
	char *text, *again;

	if (size > 65536)
		return 0;
	text = malloc(size + 1);
	if (!text)
		abort();
	memcpy(text, data, size);
	text[size] = '\0';
	kn_usage_hist_init(&h, (enum kn_usage_resource)(size % KN_USAGE_RESOURCES));
	kn_usage_hist_add(&h, 12345);
	back = h;
	if (kn_usage_hist_decode(&h, text, &err) != 0) {
		if (memcmp(&h, &back, sizeof(h)))
			abort();
		free(text);
		return 0;
	}
	for (int i = 0; i < KN_USAGE_BUCKETS; i++)
		h.samples += h.counts[i];
	h.max = 1e12;
	again = kn_usage_hist_encode(&h);
	kn_usage_hist_init(&back, h.resource);
	if (kn_usage_hist_decode(&back, again, &err) != 0 ||
	    memcmp(back.counts, h.counts, sizeof(h.counts)))
		abort();
	kn_rightsize(&h, 1e9, &rs);
	if (rs.p50 > rs.p95 || rs.p95 > h.max || rs.target < rs.p95)
		abort();
	free(again);
	free(text);
	return 0;
}
