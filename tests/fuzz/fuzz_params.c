/*
 * libFuzzer harness for the small parsers of command-line and spec values:
 * durations, sizes and simulated device specs. The first byte picks the
 * parser; the rest is the text.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "exec/exec.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *text;
	int64_t v;

	if (size < 1 || size > 4096)
		return 0;
	text = malloc(size);
	memcpy(text, data + 1, size - 1);
	text[size - 1] = '\0';
	switch (data[0] % 3) {
	case 0:
		if (kn_parse_duration(text, &v) == 0 && v < 0)
			abort();
		break;
	case 1:
		if (kn_parse_size(text, &v) == 0 && v < 0)
			abort();
		break;
	default: {
		struct kn_device_set set = {0};
		struct kn_error err;
		if (kn_devices_simulated(text, &set, &err) == 0) {
			if (set.n == 0 || set.n > KN_MAX_DEVICES)
				abort();
			kn_device_set_release(&set);
		}
		break;
	}
	}
	free(text);
	return 0;
}
