/*
 * libFuzzer harness for a Slurm job array's elements as the executor
 * reads squeue's answer back (kn_slurm_elements_parse): whatever the
 * bytes, elements come sorted by index, each index within Slurm's bounds,
 * a job id above 0, a state of capitals and a reason without control
 * bytes; every listed index is found again by bisection; anything else
 * is an error naming squeue, with the output untouched.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "exec/exec.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct kn_slurm_elements e = {NULL, 7, false};
	struct kn_error err;
	int rc;

	if (size > 65536)
		return 0;
	memset(&err, 0, sizeof(err));
	rc = kn_slurm_elements_parse((const char *)data, size, &e, &err);
	if (rc < 0) {
		if (e.n != 7 || strcmp(err.field, "squeue") || !err.message[0])
			abort();
		return 0;
	}
	for (size_t i = 0; i < e.n; i++) {
		const struct kn_slurm_element *el = &e.v[i];

		if (el->index < 0 || el->index > 4000000 || el->job_id <= 0 ||
		    (i && el->index < e.v[i - 1].index) || !el->state[0] ||
		    kn_slurm_elements_find(&e, el->index)->index != el->index)
			abort();
		for (const char *p = el->state; *p; p++)
			if ((*p < 'A' || *p > 'Z') && *p != '_')
				abort();
		for (const char *p = el->reason; *p; p++)
			if ((unsigned char)*p < 0x20 || *p == 0x7f)
				abort();
	}
	kn_slurm_elements_release(&e);
	return 0;
}
