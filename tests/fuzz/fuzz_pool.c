/*
 * libFuzzer harness for the node pool grammar (kn_pool_spec_parse), which
 * reads the server's --pool and kiln sim --autoscale's pools. Invariants
 * beyond "no crash": an error fills the message and leaves nothing
 * allocated; a parsed pool keeps the bounds the autoscaler relies on
 * (1 <= max, min <= max <= 1000, a non-negative delay), a valid name, and
 * the provider's options only with their provider.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "sched/sched.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct kn_pool_spec p;
	struct kn_error err = {0};
	char *text;

	if (size > 4096)
		return 0;
	text = malloc(size + 1);
	if (!text)
		abort();
	memcpy(text, data, size);
	text[size] = '\0';
	if (kn_pool_spec_parse(text, "--pool", &p, &err) != 0) {
		if (!err.message[0] || p.sku || p.gpus || p.zones || p.labels ||
		    p.command || p.vmss)
			abort();
	} else {
		size_t name_len = strnlen(p.name, sizeof(p.name));

		if (name_len == 0 || name_len == sizeof(p.name) || !p.sku ||
		    !p.gpus || !p.labels || p.max < 1 || p.min > p.max ||
		    p.max > 1000 || p.scale_down_delay_ms < 0 ||
		    (p.provider == KN_POOL_PROVIDER_COMMAND) != !!p.command ||
		    (p.provider == KN_POOL_PROVIDER_AZURE) != !!p.vmss ||
		    (p.provider == KN_POOL_PROVIDER_AZURE && p.n_zones))
			abort();
		for (size_t i = 0; i < p.n_zones; i++)
			if (!p.zones[i] || !p.zones[i][0])
				abort();
		if (!kn_pool_provider_name(p.provider)[0])
			abort();
		kn_pool_spec_release(&p);
	}
	free(text);
	return 0;
}
