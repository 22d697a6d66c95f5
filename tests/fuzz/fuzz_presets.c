/*
 * libFuzzer harness for the model preset table (CSV). Any input must
 * either load, with every row's GPUs within 0..8, or fail with a message
 * naming the file, leaving the out-parameter alone.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "spec/spec.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct kn_model_presets *p = NULL;
	const struct kn_model_preset *row;
	struct kn_error err;

	memset(&err, 0, sizeof(err));
	if (kn_model_presets_parse((const char *)data, size, "p.csv", &p,
				   &err) != 0) {
		if (p || strncmp(err.message, "p.csv:", 6) != 0)
			abort();
		return 0;
	}
	for (size_t i = 0; (row = kn_model_preset_at(p, i)); i++)
		if (row->gpus < 0 || row->gpus > KN_SPEC_MAX_GPUS ||
		    (row->gpus == 0) != (row->gpu_model == NULL))
			abort();
	kn_model_presets_free(p);
	return 0;
}
