/*
 * A Slurm job array's elements as squeue lists them, one line each:
 *
 *   squeue -h -r -t all -j ARRAY_JOB_ID -o KN_SQUEUE_ELEMENTS_FORMAT
 *
 * "INDEX|JOBID|STATE|REASON": -r puts every element on a line of its own
 * (without it the pending ones fold into one "3-9999%50"), -t all keeps
 * those that ended until slurmctld forgets them. One question answers
 * for every element of the array, so ten thousand elements cost one
 * squeue a second, not ten thousand scontrols; scontrol's -o line is
 * also some thirty times longer per element.
 *
 * Every byte is read back from a file a child wrote, so none is trusted:
 * a line whose index or job id is not a bounded number, or whose state is
 * not Slurm's upper-case word, is an error naming the line and column.
 * The elements come out sorted by index, for a lookup by bisection.
 */
#include "exec.h"
#include "internal.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Slurm's largest MaxArraySize is 4,000,001: an index is below it. */
#define ELEMENT_INDEX_MAX 4000000
/* squeue's message for an array slurmctld no longer has. */
#define GONE_TEXT "Invalid job id specified"

static int element_cmp(const void *a, const void *b)
{
	const struct kn_slurm_element *x = a, *y = b;

	return (x->index > y->index) - (x->index < y->index);
}

/* The bounded copy of a field that must be [A-Z_]+. */
static bool state_word(const char *s, size_t n, char *out, size_t len)
{
	if (n == 0 || n >= len)
		return false;
	for (size_t i = 0; i < n; i++)
		if (!((s[i] >= 'A' && s[i] <= 'Z') || s[i] == '_'))
			return false;
	memcpy(out, s, n);
	out[n] = '\0';
	return true;
}

/* The reason, cut to fit, with any control byte made a '?'. */
static void reason_copy(const char *s, size_t n, char *out, size_t len)
{
	if (n >= len)
		n = len - 1;
	for (size_t i = 0; i < n; i++)
		out[i] = (unsigned char)s[i] < 0x20 || s[i] == 0x7f ? '?' : s[i];
	out[n] = '\0';
}

/* One line (n bytes, no newline) into *e: 1, 0 to skip it, or -EINVAL
   with err naming line lineno and the field's column. */
static int element_line(const char *s, size_t n, int lineno,
			struct kn_slurm_element *e, struct kn_error *err)
{
	const char *f[3];
	size_t len[3], at = 0;
	int64_t v;

	for (int i = 0; i < 3; i++) {
		const char *bar = memchr(s + at, '|', n - at);

		if (!bar)
			return kn_errorf(err, KN_EINVAL, "squeue",
					 "squeue line %d: %d fields where "
					 "INDEX|JOBID|STATE|REASON has 4",
					 lineno, i + 1);
		f[i] = s + at;
		len[i] = (size_t)(bar - f[i]);
		at += len[i] + 1;
	}
	/* A job that is no array element (a stray id) has no index. */
	if (len[0] == 3 && !strncmp(f[0], "N/A", 3))
		return 0;
	memset(e, 0, sizeof(*e));
	if (!exec_slurm_count(f[0], len[0], ELEMENT_INDEX_MAX, &v))
		return kn_errorf(err, KN_EINVAL, "squeue",
				 "squeue line %d column 1: \"%.*s\" is no "
				 "array index", lineno, (int)(len[0] > 32 ? 32 : len[0]),
				 f[0]);
	e->index = (int)v;
	if (!exec_slurm_count(f[1], len[1], INT64_C(1) << 53, &v) || v == 0)
		return kn_errorf(err, KN_EINVAL, "squeue",
				 "squeue line %d column %zu: \"%.*s\" is no "
				 "job id", lineno, len[0] + 2,
				 (int)(len[1] > 32 ? 32 : len[1]), f[1]);
	e->job_id = (long long)v;
	if (!state_word(f[2], len[2], e->state, sizeof(e->state)))
		return kn_errorf(err, KN_EINVAL, "squeue",
				 "squeue line %d column %zu: \"%.*s\" is no "
				 "job state", lineno, len[0] + len[1] + 3,
				 (int)(len[2] > 32 ? 32 : len[2]), f[2]);
	reason_copy(s + at, n - at, e->reason, sizeof(e->reason));
	return 1;
}

int kn_slurm_elements_parse(const char *text, size_t len,
			    struct kn_slurm_elements *out,
			    struct kn_error *err)
{
	struct kn_slurm_elements got = {NULL, 0, false};
	size_t at = 0, cap = 0;
	int lineno = 0, rc = 0;

	while (at < len) {
		const char *nl = memchr(text + at, '\n', len - at);
		size_t n = nl ? (size_t)(nl - (text + at)) : len - at;
		struct kn_slurm_element e;

		lineno++;
		if (n == 0) {
			/* an empty line says nothing */
		} else if (memmem(text + at, n, GONE_TEXT,
				  strlen(GONE_TEXT))) {
			got.gone = true;
		} else if ((rc = element_line(text + at, n, lineno, &e, err)) <
			   0) {
			break;
		} else if (rc == 1) {
			if (got.n == cap) {
				cap = cap ? cap * 2 : 64;
				got.v = kn_xrealloc(got.v, cap * sizeof(*got.v));
			}
			got.v[got.n++] = e;
		}
		at += n + 1;
	}
	if (rc < 0) {
		free(got.v);
		return rc;
	}
	if (got.n)
		qsort(got.v, got.n, sizeof(*got.v), element_cmp);
	*out = got;
	return 0;
}

const struct kn_slurm_element *
kn_slurm_elements_find(const struct kn_slurm_elements *e, int index)
{
	struct kn_slurm_element key;

	if (!e->n)
		return NULL;
	key.index = index;
	return bsearch(&key, e->v, e->n, sizeof(*e->v), element_cmp);
}

void kn_slurm_elements_release(struct kn_slurm_elements *e)
{
	free(e->v);
	e->v = NULL;
	e->n = 0;
}

char *kn_slurm_array_list(const int *indexes, size_t n, int parallel)
{
	struct kn_buf b;

	/* No cap: n indexes take at most a dozen bytes each. */
	kn_buf_init(&b, SIZE_MAX);
	for (size_t i = 0; i < n;) {
		size_t k = i;

		while (k + 1 < n && indexes[k + 1] == indexes[k] + 1)
			k++;
		if (k > i)
			kn_buf_printf(&b, "%s%d-%d", i ? "," : "", indexes[i],
				      indexes[k]);
		else
			kn_buf_printf(&b, "%s%d", i ? "," : "", indexes[i]);
		i = k + 1;
	}
	if (parallel > 0)
		kn_buf_printf(&b, "%%%d", parallel);
	return b.data ? b.data : kn_xstrdup("");
}
