/*
 * spec unit tests: documents a parser must refuse, each with the field
 * and message its error must name, checked by one loop for every kind.
 */
#ifndef KN_SPEC_TEST_CASES_H
#define KN_SPEC_TEST_CASES_H

#include <stddef.h>

#include "base/base.h"

struct bad_case {
	const char *yaml;
	const char *field;
	/* Exact; a prefix when it ends in '*'; NULL: any message. */
	const char *message;
};

/*
 * Parse yaml as the file called file: what was made, NULL when nothing
 * was, with *rc the parser's answer.
 */
typedef void *(*spec_parse_fn)(const char *yaml, const char *file, int *rc,
			       struct kn_error *err);

/* A job spec (kn_job_spec_parse) as a spec_parse_fn. */
void *parse_job(const char *yaml, const char *file, int *rc,
		struct kn_error *err);

/*
 * Fail the test unless parse refuses every case, read as file, with
 * KN_EINVAL on its field and with its message, making nothing; every
 * miss is printed first.
 */
void expect_refused(const struct bad_case *cases, size_t n, const char *file,
		    spec_parse_fn parse);

#endif
