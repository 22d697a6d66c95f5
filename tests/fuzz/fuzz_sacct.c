/*
 * libFuzzer harness for sacct's parsable output as the Slurm executor
 * reads it back (kn_sacct_parse): whatever the bytes, a record found is
 * the job asked for with a state of capitals, an exit code and signal
 * that fit a byte and no negative time or count; anything else is an
 * error naming a column, or no record.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "exec/exec.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct kn_sacct_job j;
	struct kn_error err;
	char *text;
	long long id;
	int rc;

	if (size > 65536)
		return 0;
	/* The executor reads the file as a string: up to a first NUL. */
	text = strndup((const char *)data, size);
	if (!text)
		abort();
	/* The job asked for: the first line's id, as the executor's is. */
	id = strtoll(text, NULL, 10);
	memset(&err, 0, sizeof(err));
	rc = kn_sacct_parse(text, id, &j, &err);
	if (rc == 1) {
		if (j.job_id != id || !j.state[0] ||
		    strlen(j.state) >= sizeof(j.state) || j.exit_code < 0 ||
		    j.exit_code > 255 || j.signal < 0 || j.signal > 255 ||
		    j.start_s < 0 || j.end_s < 0 || j.elapsed_s < 0 ||
		    j.cpus < 0 || j.gpus < 0 || j.shards < 0 || j.nodes < 0 ||
		    j.mem_mb < 0)
			abort();
		for (const char *p = j.state; *p; p++)
			if ((*p < 'A' || *p > 'Z') && *p != '_')
				abort();
	} else if (rc < 0 && (!err.field[0] || !err.message[0])) {
		abort();
	} else if (rc != 0 && rc != 1 && rc >= 0) {
		abort();
	}
	free(text);
	return 0;
}
