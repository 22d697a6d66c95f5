/*
 * spec unit tests: the loop over documents a parser must refuse.
 */
#include "spec_cases.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdbool.h>
#include <string.h>

#include "spec/spec.h"

void *parse_job(const char *yaml, const char *file, int *rc,
		struct kn_error *err)
{
	struct kn_job_spec *spec = NULL;

	*rc = kn_job_spec_parse(yaml, strlen(yaml), file, &spec, err);
	return spec;
}

static bool message_matches(const char *got, const char *want)
{
	size_t len = want ? strlen(want) : 0;

	if (!want)
		return true;
	if (len && want[len - 1] == '*')
		return strncmp(got, want, len - 1) == 0;
	return strcmp(got, want) == 0;
}

void expect_refused(const struct bad_case *cases, size_t n, const char *file,
		    spec_parse_fn parse)
{
	size_t failures = 0;

	for (size_t i = 0; i < n; i++) {
		const struct bad_case *c = &cases[i];
		struct kn_error err = {0};
		int rc = 0;
		void *made = parse(c->yaml, file, &rc, &err);

		if (rc == kn_errcode_errno(KN_EINVAL) &&
		    err.code == KN_EINVAL && !made &&
		    strcmp(err.field, c->field) == 0 &&
		    message_matches(err.message, c->message))
			continue;
		print_error("case %zu: rc %d%s field \"%s\" (want \"%s\")\n"
			    "  got:  %s\n  want: %s\n",
			    i, rc, made ? ", made," : "", err.field, c->field,
			    err.message, c->message ? c->message : "(any)");
		failures++;
	}
	assert_int_equal(failures, 0);
}
