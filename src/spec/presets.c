/*
 * Model presets: a named open model to the resources that serve it.
 *
 * The table (data/model-presets.csv) says what a person can check against
 * a model card: parameter count, dtype, and how much room the KV cache
 * needs on top of the weights. What follows from those is computed here,
 * not written in the table, so a row cannot disagree with itself:
 *
 *   memory_gb = parameters_b * bytes(dtype) * (1 + kv_headroom)
 *   gpus      = memory_gb / (GPU memory * GPU_USABLE_SHARE), rounded up to
 *               1, 2, 4 or 8 (tensor-parallel degrees serving engines take)
 *
 * GPU memory is read from the model's name as kiln writes it everywhere
 * ("A100-80GB"). A row without a GPU model is served on CPUs: it asks for
 * host memory instead (memory_gb plus the runtime's own).
 */
#include "spec/spec.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Of a GPU's memory, what weights and KV cache may use: the CUDA context,
 * activations and allocator slack take the rest. */
#define GPU_USABLE_SHARE 0.9
/* A Python model server's own footprint on a CPU-only row. */
#define CPU_RUNTIME_BYTES (512LL * 1024 * 1024)
/* The table is a few dozen rows; anything far larger is not it. */
#define PRESETS_MAX_BYTES (1024 * 1024)
#define PRESETS_MAX_FIELDS 16
/* Far above any model there is; keeps the byte counts inside int64. */
#define PARAMETERS_MAX_B 100000

enum { COL_NAME, COL_PARAMS, COL_DTYPE, COL_HEADROOM, COL_GPU_MODEL,
       COL_COUNT };
static const char *const COLUMNS[COL_COUNT] = {
	"name", "parameters_b", "dtype", "kv_headroom", "gpu_model",
};

struct kn_model_presets {
	struct kn_model_preset *rows;
	size_t n;
};

static const struct {
	const char *name;
	double bytes;
} DTYPES[] = {
	{"fp32", 4}, {"fp16", 2}, {"bf16", 2}, {"fp8", 1}, {"int8", 1},
	{"int4", 0.5},
};

/*
 * One CSV record at *p (RFC 4180 quoting), fields written in place and
 * NUL-terminated. Returns the field count, or -1 past max fields or on an
 * unterminated quote; *p moves past the record.
 */
static int csv_record(char **p, char **fields, int max)
{
	char *s = *p, *out;
	int n = 0;

	for (;;) {
		if (n == max)
			return -1;
		fields[n++] = out = s;
		if (*s == '"') {
			s++;
			for (;;) {
				if (*s == '\0')
					return -1;
				if (*s == '"' && s[1] == '"') {
					*out++ = '"';
					s += 2;
				} else if (*s == '"') {
					s++;
					break;
				} else {
					*out++ = *s++;
				}
			}
		}
		while (*s && *s != ',' && *s != '\n' && *s != '\r')
			*out++ = *s++;
		if (*s == ',') {
			*out = '\0';
			s++;
			continue;
		}
		if (*s == '\r')
			*s++ = '\0';
		if (*s == '\n')
			s++;
		*out = '\0';
		break;
	}
	*p = s;
	return n;
}

/* GPU memory in GB from "H100-80GB"; 0 when the name does not say. */
static double gpu_memory_gb(const char *model)
{
	const char *dash = strrchr(model, '-');
	char *end;
	double gb;

	if (!dash)
		return 0;
	gb = strtod(dash + 1, &end);
	return end != dash + 1 && strcmp(end, "GB") == 0 && gb > 0 ? gb : 0;
}

static int row_fail(struct kn_error *err, const char *path, int line,
		    const char *column, const char *msg, const char *got)
{
	return kn_errorf(err, KN_EINVAL, column, "%s:%d: %s: %s; got \"%s\"",
			 path, line, column, msg, got);
}

static bool parse_number(const char *s, double *out)
{
	char *end;
	double v;

	if (!*s)
		return false;
	v = strtod(s, &end);
	if (*end || !isfinite(v))
		return false;
	*out = v;
	return true;
}

static int fill_row(char **f, const char *path, int line,
		    struct kn_model_preset *row, struct kn_error *err)
{
	double bytes = 0, need, per_gpu;
	int gpus = 1;

	if (!f[COL_NAME][0])
		return row_fail(err, path, line, "name", "must not be empty",
				"");
	if (!parse_number(f[COL_PARAMS], &row->parameters_b) ||
	    row->parameters_b <= 0 || row->parameters_b > PARAMETERS_MAX_B)
		return row_fail(err, path, line, "parameters_b",
				"must be a number of billions above 0 and at "
				"most 100000",
				f[COL_PARAMS]);
	for (size_t i = 0; i < sizeof(DTYPES) / sizeof(DTYPES[0]); i++)
		if (!strcmp(DTYPES[i].name, f[COL_DTYPE]))
			bytes = DTYPES[i].bytes;
	if (bytes == 0)
		return row_fail(err, path, line, "dtype",
				"must be fp32, fp16, bf16, fp8, int8 or int4",
				f[COL_DTYPE]);
	if (!parse_number(f[COL_HEADROOM], &row->kv_headroom) ||
	    row->kv_headroom < 0 || row->kv_headroom > 10)
		return row_fail(err, path, line, "kv_headroom",
				"must be a share of the weights, 0..10",
				f[COL_HEADROOM]);
	need = row->parameters_b * bytes * (1 + row->kv_headroom);
	row->memory_gb = need;
	if (!f[COL_GPU_MODEL][0]) {
		row->gpus = 0;
		row->memory_bytes = (int64_t)ceil(need * 1e9) + CPU_RUNTIME_BYTES;
	} else {
		per_gpu = gpu_memory_gb(f[COL_GPU_MODEL]) * GPU_USABLE_SHARE;
		if (per_gpu <= 0)
			return row_fail(err, path, line, "gpu_model",
					"must name its memory like A100-80GB",
					f[COL_GPU_MODEL]);
		while (gpus <= KN_SPEC_MAX_GPUS && gpus * per_gpu < need)
			gpus *= 2;
		if (gpus > KN_SPEC_MAX_GPUS)
			return row_fail(err, path, line, "gpu_model",
					"cannot hold the model on one machine "
					"(more than 8 GPUs)",
					f[COL_GPU_MODEL]);
		row->gpus = gpus;
		row->gpu_model = kn_xstrdup(f[COL_GPU_MODEL]);
	}
	row->name = kn_xstrdup(f[COL_NAME]);
	row->dtype = kn_xstrdup(f[COL_DTYPE]);
	return 0;
}

int kn_model_presets_parse(const char *text, size_t len, const char *path,
			   struct kn_model_presets **out, struct kn_error *err)
{
	struct kn_model_presets *p = kn_xcalloc(1, sizeof(*p));
	char *copy = kn_xmalloc(len + 1), *cur = copy;
	char *f[PRESETS_MAX_FIELDS];
	int col[COL_COUNT], n, line = 1, rc = 0;

	memcpy(copy, text, len);
	copy[len] = '\0';
	n = csv_record(&cur, f, PRESETS_MAX_FIELDS);
	for (int c = 0; c < COL_COUNT; c++) {
		col[c] = -1;
		for (int i = 0; i < n; i++)
			if (!strcmp(f[i], COLUMNS[c]))
				col[c] = i;
		if (col[c] < 0) {
			rc = kn_errorf(err, KN_EINVAL, COLUMNS[c],
				       "%s:1: the header has no column \"%s\"",
				       path, COLUMNS[c]);
			goto out;
		}
	}
	while (*cur) {
		char *row_f[COL_COUNT];
		struct kn_model_preset row;

		line++;
		n = csv_record(&cur, f, PRESETS_MAX_FIELDS);
		if (n == 1 && !f[0][0])
			continue; /* a blank line */
		for (int c = 0; c < COL_COUNT; c++) {
			if (n < 0 || col[c] >= n) {
				rc = kn_errorf(err, KN_EINVAL, COLUMNS[c],
					       "%s:%d: the row has no \"%s\" "
					       "column",
					       path, line, COLUMNS[c]);
				goto out;
			}
			row_f[c] = f[col[c]];
		}
		memset(&row, 0, sizeof(row));
		rc = fill_row(row_f, path, line, &row, err);
		if (rc == 0 && kn_model_preset_find(p, row.name))
			rc = row_fail(err, path, line, "name",
				      "appears twice", row.name);
		if (rc < 0) {
			free(row.name);
			free(row.dtype);
			free(row.gpu_model);
			goto out;
		}
		p->rows = kn_xrealloc(p->rows, (p->n + 1) * sizeof(*p->rows));
		p->rows[p->n++] = row;
	}
out:
	free(copy);
	if (rc < 0) {
		kn_model_presets_free(p);
		return rc;
	}
	*out = p;
	return 0;
}

int kn_model_presets_load(const char *path, struct kn_model_presets **out,
			  struct kn_error *err)
{
	char *text = NULL;
	size_t len = 0;
	int rc = kn_read_file(path, PRESETS_MAX_BYTES, &text, &len);

	if (rc < 0)
		return kn_errorf(err, KN_EIO, "presets", "cannot read %s: %s",
				 path, strerror(-rc));
	rc = kn_model_presets_parse(text, len, path, out, err);
	free(text);
	return rc;
}

void kn_model_presets_free(struct kn_model_presets *p)
{
	if (!p)
		return;
	for (size_t i = 0; i < p->n; i++) {
		free(p->rows[i].name);
		free(p->rows[i].dtype);
		free(p->rows[i].gpu_model);
	}
	free(p->rows);
	free(p);
}

const struct kn_model_preset *
kn_model_preset_find(const struct kn_model_presets *p, const char *name)
{
	for (size_t i = 0; p && i < p->n; i++)
		if (!strcmp(p->rows[i].name, name))
			return &p->rows[i];
	return NULL;
}

const struct kn_model_preset *
kn_model_preset_at(const struct kn_model_presets *p, size_t i)
{
	return p && i < p->n ? &p->rows[i] : NULL;
}
