/*
 * libFuzzer harness for deployment specs and the job form their replicas
 * are stored in. Any input must either parse (and then its job part,
 * written with kn_job_spec_to_input_text, must parse back to the same
 * normalized job) or fail with a message naming the file, leaving the
 * out-parameter alone.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "spec/spec.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static struct kn_model_presets *presets;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct kn_deployment_spec *d = NULL;
	struct kn_job_spec *job = NULL;
	struct kn_error err;
	json_t *a, *b;
	char *text;

	if (!presets && kn_model_presets_load_shipped(&presets, &err) < 0)
		abort();
	memset(&err, 0, sizeof(err));
	if (kn_deployment_spec_parse((const char *)data, size, "fuzz.yaml",
				     presets, &d, &err) != 0) {
		if (d || strncmp(err.message, "fuzz.yaml", 9) != 0)
			abort();
		return 0;
	}
	a = kn_deployment_spec_to_json(d);
	if (!a)
		abort();
	json_decref(a);
	text = kn_job_spec_to_input_text(&d->job, NULL);
	if (!text || kn_job_spec_parse(text, strlen(text), "replica", &job,
				       &err) != 0)
		abort();
	a = kn_job_spec_to_json(&d->job);
	b = kn_job_spec_to_json(job);
	if (!json_equal(a, b))
		abort();
	json_decref(a);
	json_decref(b);
	free(text);
	kn_job_spec_free(job);
	kn_deployment_spec_free(d);
	return 0;
}
