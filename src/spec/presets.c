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

static int read_row(struct kn_model_presets *p, const struct kn_csv *csv,
		    const int *col, struct kn_error *err)
{
	char *f[COL_COUNT];
	struct kn_model_preset row = {0};
	int rc;

	for (int c = 0; c < COL_COUNT; c++) {
		if (col[c] >= csv->n_fields)
			return kn_errorf(err, KN_EINVAL, COLUMNS[c],
					 "%s:%d: the row has no \"%s\" column",
					 csv->path, csv->line, COLUMNS[c]);
		f[c] = csv->fields[col[c]];
	}
	rc = fill_row(f, csv->path, csv->line, &row, err);
	if (rc == 0 && kn_model_preset_find(p, row.name))
		rc = row_fail(err, csv->path, csv->line, "name",
			      "appears twice", row.name);
	if (rc < 0) {
		KN_FREE_ALL(row.name, row.dtype, row.gpu_model);
		return rc;
	}
	p->rows = kn_xrealloc(p->rows, (p->n + 1) * sizeof(*p->rows));
	p->rows[p->n++] = row;
	return 0;
}

int kn_model_presets_parse(const char *text, size_t len, const char *path,
			   struct kn_model_presets **out, struct kn_error *err)
{
	struct kn_model_presets *p = kn_xcalloc(1, sizeof(*p));
	char *copy = kn_xmalloc(len + 1);
	struct kn_csv csv;
	int col[COL_COUNT], rc;

	memcpy(copy, text, len);
	copy[len] = '\0';
	kn_csv_init(&csv, copy, path);
	rc = kn_csv_header(&csv, COLUMNS, COL_COUNT, col, err);
	while (rc >= 0 && (rc = kn_csv_next(&csv, err)) > 0)
		rc = read_row(p, &csv, col, err);
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

int kn_model_presets_load_shipped(struct kn_model_presets **out,
				  struct kn_error *err)
{
	char *path = kn_data_path("model-presets.csv");
	int rc = kn_model_presets_load(path, out, err);

	free(path);
	return rc;
}

void kn_model_presets_free(struct kn_model_presets *p)
{
	if (!p)
		return;
	for (size_t i = 0; i < p->n; i++) {
		KN_FREE_ALL(p->rows[i].name, p->rows[i].dtype,
			    p->rows[i].gpu_model);
	}
	KN_FREE_ALL(p->rows, p);
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
