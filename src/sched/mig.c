/*
 * mig: NVIDIA MIG geometry as data, and where an instance goes.
 *
 * A MIG GPU has 8 memory slices and 7 compute slices; a GPU instance of a
 * profile occupies memory_slices consecutive memory slices from one of
 * the profile's allowed starts (`nvidia-smi mig -lgipp`). Instances on a
 * GPU may not overlap, their compute slices add up to at most the GPU's,
 * and a profile has a per-GPU instance limit (1 for the "+me" profiles,
 * which take the GPU's only media engines). The tables live in
 * data/mig-profiles.csv so a new GPU model is a data change; this file
 * parses them (from text: sched does no I/O) and applies the rules.
 *
 * Choosing the start: among the allowed, free starts, the one after which
 * the most placements of all the model's profiles remain possible, so a
 * 1g instance goes next to other small ones instead of splitting the two
 * halves a 3g or 4g instance needs.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "sched/sched.h"

#define MIG_MAX_MODELS 32

struct kn_mig_table {
	struct kn_mig_model models[MIG_MAX_MODELS];
	size_t n;
};

static const char *const columns[] = {
	"model",         "gpu_compute_slices", "gpu_memory_slices",
	"profile",       "profile_id",         "compute_slices",
	"memory_slices", "max_instances",      "starts",
};
#define N_COLUMNS (sizeof(columns) / sizeof(columns[0]))

/* One CSV field: its text, and its column for errors. */
struct field {
	const char *p;
	size_t len;
	size_t column; /* 1-based, for errors */
};

static int fail(struct kn_error *err, const char *file, size_t line,
		size_t col, const char *name, const char *msg)
{
	return kn_errorf(err, KN_EINVAL, name, "%s:%zu:%zu: %s: %s", file,
			 line, col, name, msg);
}

/* A whole field as an int in lo..hi. */
static bool field_int(const struct field *f, int lo, int hi, int *out)
{
	long v = 0;

	if (f->len == 0 || f->len > 6)
		return false;
	for (size_t i = 0; i < f->len; i++) {
		if (f->p[i] < '0' || f->p[i] > '9')
			return false;
		v = v * 10 + (f->p[i] - '0');
	}
	if (v < lo || v > hi)
		return false;
	*out = (int)v;
	return true;
}

/* "0 2 4 6" -> bits; each start must leave room for the instance. */
static bool field_starts(const struct field *f, int memory, int gpu_memory,
			 unsigned *out)
{
	size_t i = 0;

	*out = 0;
	while (i < f->len) {
		int s = 0, digits = 0;

		while (i < f->len && f->p[i] == ' ')
			i++;
		while (i < f->len && f->p[i] >= '0' && f->p[i] <= '9') {
			s = s * 10 + (f->p[i++] - '0');
			if (++digits > 2)
				return false;
		}
		if (i < f->len && f->p[i] != ' ')
			return false;
		if (digits == 0)
			continue;
		if (s + memory > gpu_memory || (*out >> s & 1))
			return false;
		*out |= 1u << s;
	}
	return *out != 0;
}

static int parse_row(struct kn_mig_table *t, const struct field *f,
		     const char *file, size_t line, struct kn_error *err)
{
	struct kn_mig_model *m = NULL;
	struct kn_mig_profile p = {0};
	int compute, memory;

	if (f[0].len == 0 || f[0].len >= sizeof(m->name))
		return fail(err, file, line, f[0].column, "model",
			    "empty or longer than 31 characters");
	if (!field_int(&f[1], 1, 64, &compute))
		return fail(err, file, line, f[1].column, columns[1],
			    "not a whole number in 1..64");
	if (!field_int(&f[2], 1, KN_MIG_MAX_SLICES, &memory))
		return fail(err, file, line, f[2].column, columns[2],
			    "not a whole number in 1..8");
	for (size_t i = 0; i < t->n; i++)
		if (strlen(t->models[i].name) == f[0].len &&
		    !strncasecmp(t->models[i].name, f[0].p, f[0].len))
			m = &t->models[i];
	if (!m) {
		if (t->n == MIG_MAX_MODELS)
			return fail(err, file, line, f[0].column, "model",
				    "more than 32 models");
		m = &t->models[t->n++];
		memcpy(m->name, f[0].p, f[0].len);
		m->compute = compute;
		m->memory = memory;
	} else if (m->compute != compute || m->memory != memory) {
		return fail(err, file, line, f[1].column, columns[1],
			    "differs from an earlier row of this model");
	}
	if (f[3].len == 0 || f[3].len >= sizeof(p.name))
		return fail(err, file, line, f[3].column, "profile",
			    "empty or longer than 31 characters");
	memcpy(p.name, f[3].p, f[3].len);
	if (kn_mig_profile(m, p.name))
		return fail(err, file, line, f[3].column, "profile",
			    "listed twice for this model");
	if (m->n_profiles == KN_MIG_MAX_PROFILES)
		return fail(err, file, line, f[3].column, "profile",
			    "more than 16 profiles for this model");
	if (!field_int(&f[4], 0, 1000, &p.id))
		return fail(err, file, line, f[4].column, columns[4],
			    "not a whole number in 0..1000");
	if (!field_int(&f[5], 1, compute, &p.compute))
		return fail(err, file, line, f[5].column, columns[5],
			    "not a whole number in 1..gpu_compute_slices");
	if (!field_int(&f[6], 1, memory, &p.memory))
		return fail(err, file, line, f[6].column, columns[6],
			    "not a whole number in 1..gpu_memory_slices");
	if (!field_int(&f[7], 1, memory, &p.max_instances))
		return fail(err, file, line, f[7].column, columns[7],
			    "not a whole number in 1..gpu_memory_slices");
	if (!field_starts(&f[8], p.memory, memory, &p.starts))
		return fail(err, file, line, f[8].column, columns[8],
			    "not space-separated distinct slice indexes "
			    "leaving room for the instance");
	m->profiles[m->n_profiles++] = p;
	return 0;
}

/* The header record: exactly the columns, in order. */
static int check_header(const struct field *f, const char *file,
			size_t line, struct kn_error *err)
{
	for (size_t c = 0; c < N_COLUMNS; c++)
		if (f[c].len != strlen(columns[c]) ||
		    strncmp(f[c].p, columns[c], f[c].len))
			return fail(err, file, line, f[c].column, columns[c],
				    "header column expected here");
	return 0;
}

static int parse_records(struct kn_mig_table *t, struct kn_csv *csv,
			 struct kn_error *err)
{
	const char *file = csv->path;
	bool header = true;
	int rc;

	while ((rc = kn_csv_next(csv, err)) > 0) {
		size_t line = (size_t)csv->line;
		struct field f[N_COLUMNS];

		if (csv->n_fields != (int)N_COLUMNS)
			return fail(err, file, line, 1, "row",
				    "expected 9 comma-separated columns");
		for (size_t c = 0; c < N_COLUMNS; c++)
			f[c] = (struct field){csv->fields[c],
					      strlen(csv->fields[c]),
					      (size_t)csv->cols[c]};
		rc = header ? check_header(f, file, line, err)
			    : parse_row(t, f, file, line, err);
		if (rc < 0)
			return rc;
		header = false;
	}
	if (rc == 0 && t->n == 0)
		rc = fail(err, file, csv->line ? (size_t)csv->line : 1, 1,
			  "row", "no profiles");
	return rc;
}

int kn_mig_parse(const char *text, size_t len, const char *file,
		 struct kn_mig_table **out, struct kn_error *err)
{
	struct kn_mig_table *t = kn_xcalloc(1, sizeof(*t));
	const char *nul = memchr(text, '\0', len);
	char *copy = NULL;
	struct kn_csv csv;
	int rc, line, col;

	if (nul) {
		kn_text_position(text, (size_t)(nul - text), &line, &col);
		rc = fail(err, file, (size_t)line, (size_t)col, "row",
			  "a NUL byte");
		goto out;
	}
	copy = kn_xmalloc(len + 1);
	memcpy(copy, text, len);
	copy[len] = '\0';
	kn_csv_init(&csv, copy, file);
	rc = parse_records(t, &csv, err);
out:
	free(copy);
	if (rc < 0) {
		free(t);
		return rc;
	}
	*out = t;
	return 0;
}

void kn_mig_free(struct kn_mig_table *t)
{
	free(t);
}

const struct kn_mig_model *kn_mig_find(const struct kn_mig_table *t,
				       const char *name)
{
	for (size_t i = 0; name && i < t->n; i++)
		if (!strcasecmp(t->models[i].name, name))
			return &t->models[i];
	return NULL;
}

const struct kn_mig_profile *kn_mig_profile(const struct kn_mig_model *m,
					    const char *name)
{
	for (int i = 0; name && i < m->n_profiles; i++)
		if (!strcasecmp(m->profiles[i].name, name))
			return &m->profiles[i];
	return NULL;
}

/* Occupied memory slices, compute in use and instances of p. */
static void occupancy(const struct kn_sched_mig_slice *used, int n,
		      const struct kn_mig_profile *p, unsigned *mask,
		      int *compute, int *same)
{
	*mask = 0;
	*compute = 0;
	*same = 0;
	for (int i = 0; i < n; i++) {
		*mask |= ((1u << used[i].profile->memory) - 1)
			 << used[i].start;
		*compute += used[i].profile->compute;
		*same += used[i].profile == p ||
			 !strcmp(used[i].profile->name, p->name);
	}
}

static unsigned range(const struct kn_mig_profile *p, int start)
{
	return ((1u << p->memory) - 1) << start;
}

/* Placements of every profile still open on a GPU with mask occupied. */
static int open_placements(const struct kn_mig_model *m, unsigned mask)
{
	int n = 0;

	for (int i = 0; i < m->n_profiles; i++)
		for (int s = 0; s < m->memory; s++)
			if ((m->profiles[i].starts >> s & 1) &&
			    !(range(&m->profiles[i], s) & mask))
				n++;
	return n;
}

int kn_mig_fit(const struct kn_mig_model *m,
	       const struct kn_sched_mig_slice *used, int n,
	       const struct kn_mig_profile *p, int *start)
{
	unsigned mask;
	int compute, same, best = -1, best_open = -1;

	occupancy(used, n, p, &mask, &compute, &same);
	if (n >= KN_MIG_MAX_SLICES || same >= p->max_instances ||
	    compute + p->compute > m->compute)
		return -ENOSPC;
	for (int s = 0; s < m->memory; s++) {
		int open;

		if (!(p->starts >> s & 1) || (range(p, s) & mask))
			continue;
		open = open_placements(m, mask | range(p, s));
		if (open > best_open) {
			best_open = open;
			best = s;
		}
	}
	if (best < 0)
		return -ENOSPC;
	*start = best;
	return 0;
}
