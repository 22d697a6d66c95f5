/*
 * A job's `array:` field, in Slurm's range form ("0-999", "0-9%2": at most
 * two at once) or as a mapping ({count: 1000, parallel: 50}, indexes from
 * 0). Only contiguous ranges: Slurm's lists and steps ("1,5,7", "0-15:4")
 * would make an element's index something other than first + its place,
 * which the element's job id relies on (ids are consecutive).
 */
#include "internal.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

static const char ARRAY_ALLOWED[] =
	"a range \"FIRST-LAST\" or \"FIRST-LAST%PARALLEL\" (e.g. \"0-999\", "
	"\"0-9%2\") or a mapping {count: N, parallel: P}";

/* A decimal index at *p (no sign), advancing *p past it. */
static bool read_index(const char **p, int64_t *out)
{
	char digits[16];
	size_t n = strspn(*p, "0123456789");

	if (n == 0 || n >= sizeof(digits))
		return false;
	memcpy(digits, *p, n);
	digits[n] = '\0';
	*p += n;
	return spec_parse_int64(digits, out);
}

int kn_job_array_parse(const char *text, struct kn_job_array *out, char *why,
		       size_t why_len)
{
	const char *p = text;
	int64_t first, last, parallel = 0;

	if (!read_index(&p, &first) || *p++ != '-' || !read_index(&p, &last) ||
	    (*p == '%' && (p++, !read_index(&p, &parallel))) || *p != '\0') {
		snprintf(why, why_len, "must be %s", ARRAY_ALLOWED);
		return -EINVAL;
	}
	if (last < first) {
		snprintf(why, why_len,
			 "the range's last index must not be below its first");
		return -EINVAL;
	}
	if (last - first + 1 > KN_SPEC_MAX_ARRAY) {
		snprintf(why, why_len,
			 "the range holds %lld elements; at most %d",
			 (long long)(last - first + 1), KN_SPEC_MAX_ARRAY);
		return -EINVAL;
	}
	if (text[strcspn(text, "%")] && parallel < 1) {
		snprintf(why, why_len, "%%PARALLEL must be at least 1");
		return -EINVAL;
	}
	memset(out, 0, sizeof(*out));
	out->first = (int)first;
	out->count = (int)(last - first + 1);
	out->parallel = parallel > out->count ? out->count : (int)parallel;
	return 0;
}

const struct field spec_array_fields[SPEC_ARRAY_FIELDS] = {
	{.name = "count", .type = FT_INT,
	 .offset = offsetof(struct kn_job_array, count), .min = 1,
	 .max = KN_SPEC_MAX_ARRAY, .required = true},
	{.name = "parallel", .type = FT_INT,
	 .offset = offsetof(struct kn_job_array, parallel), .min = 1,
	 .max = KN_SPEC_MAX_ARRAY},
};

int spec_read_array(struct walk *w, struct fy_node *node, void *target)
{
	struct kn_job_spec *spec = target;
	struct kn_job_array array;
	char got[GOT_BUF], why[160];
	struct value v;
	int rc = spec_classify(w, node, &v);

	if (rc)
		return rc;
	if (v.kind == V_MAP) {
		memset(&array, 0, sizeof(array));
		rc = spec_walk_mapping(w, node, spec_array_fields,
				       SPEC_ARRAY_FIELDS, &array, NULL);
		if (rc)
			return rc;
		if (array.parallel > array.count)
			array.parallel = array.count;
		spec->array = array;
		return 0;
	}
	if (v.kind != V_STRING)
		return spec_fail(w, node, "must be %s; got %s", ARRAY_ALLOWED,
				 spec_describe(&v, got, sizeof(got)));
	if (kn_job_array_parse(v.text, &array, why, sizeof(why)) < 0)
		return spec_fail(w, node, "%s; got %s", why,
				 spec_describe(&v, got, sizeof(got)));
	spec->array = array;
	return 0;
}

void kn_job_array_env(const struct kn_job_array *a,
		      void (*add)(void *ctx, const char *name,
				  long long value),
		      void *ctx)
{
	const struct {
		const char *name;
		long long value;
	} vars[] = {
		{"KILN_ARRAY_JOB_ID", (long long)a->job_id},
		{"KILN_ARRAY_INDEX", a->index},
		{"KILN_ARRAY_COUNT", a->count},
		{"SLURM_ARRAY_JOB_ID", (long long)a->job_id},
		{"SLURM_ARRAY_TASK_ID", a->index},
		{"SLURM_ARRAY_TASK_COUNT", a->count},
		{"SLURM_ARRAY_TASK_MIN", a->first},
		{"SLURM_ARRAY_TASK_MAX", (long long)a->first + a->count - 1},
	};

	for (size_t i = 0; i < ARRAY_SIZE(vars); i++)
		add(ctx, vars[i].name, vars[i].value);
}
