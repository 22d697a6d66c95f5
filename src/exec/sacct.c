/*
 * Slurm's accounting record of one job, from sacct's parsable output:
 *
 *   SLURM_TIME_FORMAT=%s sacct -n -P -X -D -j ID -o KN_SACCT_FORMAT
 *
 * one line per run of the job ("|" between fields; -D lists the runs a
 * requeue left as well), times as seconds since the epoch. Every byte is
 * Slurm's output read back from a file, so nothing is trusted: a line
 * with the wrong number of fields or a field that is not what its column
 * holds is an error naming the line, the column and the field.
 */
#include "exec.h"
#include "internal.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SACCT_FIELDS 7

bool exec_slurm_count(const char *s, size_t n, int64_t max, int64_t *out)
{
	int64_t v = 0;

	if (n == 0)
		return false;
	for (size_t i = 0; i < n; i++) {
		if (s[i] < '0' || s[i] > '9' || v > (max - (s[i] - '0')) / 10)
			return false;
		v = v * 10 + (s[i] - '0');
	}
	*out = v;
	return true;
}

/* A time: seconds since the epoch, or 0 for "Unknown" and "None". */
static bool parse_time(const char *s, size_t n, int64_t *out)
{
	if ((n == 7 && !strncmp(s, "Unknown", 7)) ||
	    (n == 4 && !strncmp(s, "None", 4))) {
		*out = 0;
		return true;
	}
	return exec_slurm_count(s, n, INT64_C(1) << 40, out);
}

/* "0:15": the exit code and the signal. */
static bool parse_exit(const char *s, size_t n, int *code, int *sig)
{
	const char *colon = memchr(s, ':', n);
	int64_t c, g;

	if (!colon || !exec_slurm_count(s, (size_t)(colon - s), 255, &c) ||
	    !exec_slurm_count(colon + 1, n - (size_t)(colon - s) - 1, 255, &g))
		return false;
	*code = (int)c;
	*sig = (int)g;
	return true;
}

/* "1536M" in MB: a count and its unit, K, M, G or T, as sacct writes. */
static bool parse_mem(const char *s, size_t n, int64_t *mb)
{
	int64_t v;
	char unit = n ? s[n - 1] : 0;
	int shift = unit == 'K' ? -10 : unit == 'M' ? 0 : unit == 'G' ? 10
		  : unit == 'T' ? 20 : 99;

	if (shift == 99 || !exec_slurm_count(s, n - 1, INT64_C(1) << 40, &v))
		return false;
	*mb = shift < 0 ? v >> -shift : v << shift;
	return true;
}

/*
 * AllocTRES, "billing=2,cpu=2,gres/gpu=2,mem=128M,node=2": the totals kiln
 * uses; other TRES (typed GRES, licences, billing) are passed over.
 */
static bool parse_tres(const char *s, size_t n, struct kn_sacct_job *j)
{
	while (n > 0) {
		size_t len = strcspn(s, ",");
		const char *eq;
		size_t klen;
		int64_t *slot = NULL;

		if (len > n)
			len = n;
		eq = memchr(s, '=', len);
		if (!eq)
			return false;
		klen = (size_t)(eq - s);
#define KEY(k) (klen == strlen(k) && !strncmp(s, k, klen))
		if (KEY("cpu"))
			slot = &j->cpus;
		else if (KEY("node"))
			slot = &j->nodes;
		else if (KEY("gres/gpu"))
			slot = &j->gpus;
		else if (KEY("gres/shard"))
			slot = &j->shards;
#undef KEY
		if (klen == 3 && !strncmp(s, "mem", 3)) {
			if (!parse_mem(eq + 1, len - klen - 1, &j->mem_mb))
				return false;
		} else if (slot &&
			   !exec_slurm_count(eq + 1, len - klen - 1,
					INT64_C(1) << 40, slot)) {
			return false;
		}
		s += len;
		n -= len;
		if (n > 0) {
			s++;
			n--;
		}
	}
	return true;
}

/* How parse_line says a line has the wrong number of fields. */
#define FIELD_COUNT 100

/*
 * One line's fields into *j: 0, the column (1-based) that is bad, or
 * FIELD_COUNT plus the number of fields when that is not SACCT_FIELDS.
 */
static int parse_line(const char *line, size_t n, struct kn_sacct_job *j)
{
	const char *f[SACCT_FIELDS];
	size_t len[SACCT_FIELDS], k = 0, start = 0;
	int64_t id;

	for (size_t i = 0; i <= n; i++) {
		if (i < n && line[i] != '|')
			continue;
		if (k == SACCT_FIELDS)
			return FIELD_COUNT + SACCT_FIELDS + 1;
		f[k] = line + start;
		len[k++] = i - start;
		start = i + 1;
	}
	if (k != SACCT_FIELDS)
		return FIELD_COUNT + (int)k;
	memset(j, 0, sizeof(*j));
	if (!exec_slurm_count(f[0], len[0], INT64_C(1) << 40, &id))
		return 1;
	j->job_id = id;
	/* "CANCELLED by 0": the state is the first word. */
	len[1] = strcspn(f[1], " |");
	if (len[1] == 0 || len[1] >= sizeof(j->state))
		return 2;
	memcpy(j->state, f[1], len[1]);
	for (size_t i = 0; i < len[1]; i++)
		if ((j->state[i] < 'A' || j->state[i] > 'Z') &&
		    j->state[i] != '_')
			return 2;
	if (!parse_exit(f[2], len[2], &j->exit_code, &j->signal))
		return 3;
	if (!parse_time(f[3], len[3], &j->start_s))
		return 4;
	if (!parse_time(f[4], len[4], &j->end_s))
		return 5;
	if (!exec_slurm_count(f[5], len[5], INT64_C(1) << 40, &j->elapsed_s))
		return 6;
	if (!parse_tres(f[6], len[6], j))
		return 7;
	return 0;
}

int kn_sacct_parse(const char *text, long long job_id,
		   struct kn_sacct_job *out, struct kn_error *err)
{
	static const char *const columns[] = {
		"JobIDRaw", "State", "ExitCode", "Start", "End", "ElapsedRaw",
		"AllocTRES"};
	const char *p = text;
	bool found = false, started = false;
	int line_no = 0;

	while (*p) {
		size_t n = strcspn(p, "\n");
		struct kn_sacct_job j = {0};
		int bad;

		line_no++;
		if (n > 0) {
			bad = parse_line(p, n, &j);
			if (bad > FIELD_COUNT)
				return kn_errorf(err, KN_EINVAL, "sacct",
						 "sacct:%d: %s%d fields, not "
						 "the %d of " KN_SACCT_FORMAT,
						 line_no,
						 bad > FIELD_COUNT + SACCT_FIELDS
							 ? "more than " : "",
						 bad > FIELD_COUNT + SACCT_FIELDS
							 ? SACCT_FIELDS
							 : bad - FIELD_COUNT,
						 SACCT_FIELDS);
			if (bad)
				return kn_errorf(err, KN_EINVAL,
						 columns[bad - 1],
						 "sacct:%d: %s: not what sacct "
						 "writes there", line_no,
						 columns[bad - 1]);
			/* The run that started, not a later requeue's. */
			if ((long long)j.job_id == job_id && !started) {
				*out = j;
				found = true;
				started = j.start_s > 0;
			}
		}
		p += n;
		if (*p == '\n')
			p++;
	}
	return found ? 1 : 0;
}
