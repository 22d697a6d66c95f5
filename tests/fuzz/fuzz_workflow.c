/*
 * libFuzzer harness for workflow specs. Any input must either parse, and
 * then give an order in which every step follows the steps it needs and
 * a JSON form, or fail with a message naming the file, leaving the
 * out-parameter alone.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "spec/spec.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct kn_workflow_spec *w = NULL;
	struct kn_error err;
	json_t *j;

	memset(&err, 0, sizeof(err));
	if (kn_workflow_spec_parse((const char *)data, size, "fuzz.yaml", &w,
				   &err) != 0) {
		if (w || strncmp(err.message, "fuzz.yaml", 9) != 0)
			abort();
		return 0;
	}
	for (size_t i = 0; i < w->n_steps; i++)
		for (size_t k = i + 1; k < w->n_steps; k++)
			if (kn_workflow_depends(w, w->order[i], w->order[k]))
				abort();
	j = kn_workflow_spec_to_json(w);
	if (!j)
		abort();
	json_decref(j);
	kn_workflow_spec_free(w);
	return 0;
}
