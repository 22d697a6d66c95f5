/*
 * libFuzzer harness for the job spec parser. Any input must either parse,
 * and then serialize to JSON, or fail with a message that names the file,
 * leaving the out-parameter alone. Sanitizers catch the rest.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "spec/spec.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct kn_job_spec *spec = NULL;
	struct kn_error err;
	json_t *json;
	char *text;

	memset(&err, 0, sizeof(err));
	if (kn_job_spec_parse((const char *)data, size, "fuzz.yaml", &spec,
			      &err) != 0) {
		if (spec || strncmp(err.message, "fuzz.yaml", 9) != 0)
			abort();
		return 0;
	}
	json = kn_job_spec_to_json(spec);
	if (!json)
		abort();
	text = json_dumps(json, JSON_COMPACT);
	if (!text)
		abort();
	free(text);
	json_decref(json);
	kn_job_spec_free(spec);
	return 0;
}
