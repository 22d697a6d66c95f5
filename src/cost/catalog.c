/*
 * The VM size catalog: rows of the data/ CSV files and of a user's own
 * file, kept in load order, a later row replacing an earlier one of the
 * same size name (a negotiated price, an on-premises machine's cost per
 * hour, another cloud's size).
 *
 * The CSV reader is base's (kn_csv), shared with health's reader of the
 * same file; health keeps its own five-column lookup
 * because sibling modules may not call each other. Every cell this
 * module uses is checked and a bad one is reported as
 * FILE:LINE:COLUMN: COLUMN_NAME: why, with nothing added to the catalog.
 */
#include "cost/cost.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* A catalog is tens of rows; a file far larger is not one. */
#define CATALOG_FILE_MAX (1024 * 1024)
/* Far above any VM (Azure's largest have a few TB of RAM, 8 GPUs). */
#define GPUS_MAX 64
#define PRICE_MAX 1e6

enum {
	COL_FAMILY, COL_SIZE, COL_GPU_MODEL, COL_GPU_COUNT, COL_GPU_MEM,
	COL_VCPUS, COL_RAM, COL_IB, COL_PAYG, COL_SPOT, COL_RI1, COL_RI3,
	COL_COUNT
};
static const char *const COLUMNS[COL_COUNT] = {
	"family", "size", "gpu_model", "gpu_count", "gpu_mem_per_gpu_gb",
	"vcpus", "ram_gib", "infiniband", "payg_linux_usd_hr", "spot_usd_hr",
	"ri_1y_usd_hr", "ri_3y_usd_hr",
};
static const int PRICE_COLS[KN_PRICINGS] = {COL_PAYG, COL_SPOT, COL_RI1,
					    COL_RI3};

static const char *const PRICING_NAMES[KN_PRICINGS] = {
	"on_demand", "spot", "reserved_1y", "reserved_3y",
};

struct kn_catalog {
	struct kn_vm_size *rows;
	size_t n, alloc;
};

const char *kn_pricing_name(enum kn_pricing p)
{
	return p < KN_PRICINGS ? PRICING_NAMES[p] : "?";
}

int kn_pricing_parse(const char *s, enum kn_pricing *out,
		     struct kn_error *err)
{
	for (int p = 0; p < KN_PRICINGS; p++)
		if (!strcmp(s, PRICING_NAMES[p])) {
			*out = (enum kn_pricing)p;
			return 0;
		}
	return kn_errorf(err, KN_EINVAL, "pricing",
			 "\"%s\" is not a pricing model (on_demand, spot, "
			 "reserved_1y, reserved_3y)", s);
}

struct kn_catalog *kn_catalog_new(void)
{
	return kn_xcalloc(1, sizeof(struct kn_catalog));
}

void kn_catalog_free(struct kn_catalog *c)
{
	if (!c)
		return;
	KN_FREE_ALL(c->rows, c);
}

size_t kn_catalog_count(const struct kn_catalog *c)
{
	return c->n;
}

const struct kn_vm_size *kn_catalog_at(const struct kn_catalog *c, size_t i)
{
	return i < c->n ? &c->rows[i] : NULL;
}

const struct kn_vm_size *kn_catalog_find(const struct kn_catalog *c,
					 const char *size)
{
	for (size_t i = 0; i < c->n; i++)
		if (!strcasecmp(c->rows[i].size, size))
			return &c->rows[i];
	return NULL;
}

void kn_catalog_set_bandwidth(struct kn_catalog *c, size_t i, double gbs)
{
	if (i < c->n)
		c->rows[i].gpu_bandwidth_gbs = gbs;
}

bool kn_vm_size_price(const struct kn_vm_size *s, enum kn_pricing p,
		      double *usd_hr)
{
	if (!s || p >= KN_PRICINGS || s->usd_hr[p] < 0)
		return false;
	*usd_hr = s->usd_hr[p];
	return true;
}

bool kn_vm_size_gpu_price(const struct kn_vm_size *s, enum kn_pricing p,
			  double *usd_hr)
{
	double vm;

	if (!s || !(s->gpus > 0) || !kn_vm_size_price(s, p, &vm))
		return false;
	*usd_hr = vm / s->gpus;
	return true;
}

/* ---- parsing ---- */

/* An error at the catalog column's cell in the current record (at the
   record's start when col is NULL), naming the column. */
static int cell_error(struct kn_error *err, const struct kn_csv *csv,
		      const int *col, int column, const char *fmt, ...)
	__attribute__((format(printf, 5, 6)));

static int cell_error(struct kn_error *err, const struct kn_csv *csv,
		      const int *col, int column, const char *fmt, ...)
{
	char why[400];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(why, sizeof(why), fmt, ap);
	va_end(ap);
	return kn_errorf(err, KN_EINVAL, COLUMNS[column], "%s:%d:%d: %s: %s",
			 csv->path, col ? csv->lines[col[column]] : csv->line,
			 col ? csv->cols[col[column]] : 1, COLUMNS[column],
			 why);
}

/* A number in [min, max]; blank is *out = blank_value when allowed. */
static int parse_number(const char *s, double min, double max, double *out)
{
	char *end;
	double v;

	errno = 0;
	v = strtod(s, &end);
	if (end == s || *end || errno || !isfinite(v) || v < min || v > max)
		return -EINVAL;
	*out = v;
	return 0;
}

/* "8", "1/6" (a vGPU share), "" or "0" (no GPU). */
static int parse_gpus(const char *s, double *out)
{
	int a, b, used = 0;

	if (!*s) {
		*out = 0;
		return 0;
	}
	if (sscanf(s, "%d/%d%n", &a, &b, &used) == 2 && !s[used] && a > 0 &&
	    b > 0 && a < b && b <= GPUS_MAX) {
		*out = (double)a / b;
		return 0;
	}
	if (sscanf(s, "%d%n", &a, &used) == 1 && !s[used] && a >= 0 &&
	    a <= GPUS_MAX && isdigit((unsigned char)s[0])) {
		*out = a;
		return 0;
	}
	return -EINVAL;
}

/*
 * kiln's GPU name from the catalog's: the model word after the vendor
 * words, then the memory of a whole GPU ("NVIDIA H100 80GB SXM5", 80 ->
 * "H100-80GB"; a 1/6 share of 4 GB is of a 24 GB GPU).
 */
static void gpu_name(const struct kn_vm_size *s, char *out, size_t len)
{
	static const char *const vendor_words[] = {"NVIDIA", "AMD", "Instinct",
						   "Tesla"};
	char copy[96], *save = NULL, *w;
	double whole = s->gpus < 1 ? s->gpu_mem_gb / s->gpus : s->gpu_mem_gb;

	out[0] = '\0';
	kn_strlcpy(copy, s->gpu_model, sizeof(copy));
	for (w = strtok_r(copy, " (", &save); w; w = strtok_r(NULL, " (", &save)) {
		bool vendor = false;

		for (size_t i = 0; i < sizeof(vendor_words) / sizeof(*vendor_words); i++)
			if (!strcasecmp(w, vendor_words[i]))
				vendor = true;
		if (!vendor)
			break;
	}
	if (w)
		snprintf(out, len, "%s-%.0fGB", w, whole);
}

static bool has_word_prefix(const char *s, const char *prefix)
{
	return !strncasecmp(s, prefix, strlen(prefix));
}

static int parse_row(const struct kn_csv *csv, const int *col,
		     int status_col, struct kn_vm_size *out,
		     struct kn_error *err)
{
	char *const *fields = csv->fields;
	struct kn_vm_size s;
	double v;
	const char *ib;

	memset(&s, 0, sizeof(s));
	for (int c = 0; c < COL_COUNT; c++) {
		if (col[c] >= csv->n_fields) {
			return cell_error(err, csv, NULL, c, "missing (the row "
					  "has %d fields)", csv->n_fields);
		}
	}
	if (!fields[col[COL_SIZE]][0] ||
	    strlen(fields[col[COL_SIZE]]) >= sizeof(s.size))
		return cell_error(err, csv, col, COL_SIZE,
				  "empty or longer than %zu characters",
				  sizeof(s.size) - 1);
	kn_strlcpy(s.size, fields[col[COL_SIZE]], sizeof(s.size));
	kn_strlcpy(s.family, fields[col[COL_FAMILY]], sizeof(s.family));
	kn_strlcpy(s.gpu_model, fields[col[COL_GPU_MODEL]], sizeof(s.gpu_model));
	if (parse_gpus(fields[col[COL_GPU_COUNT]], &s.gpus) < 0)
		return cell_error(err, csv, col, COL_GPU_COUNT,
				  "\"%s\" is not a GPU count (0 to %d, or a "
				  "share such as 1/6)",
				  fields[col[COL_GPU_COUNT]], GPUS_MAX);
	if (s.gpus > 0) {
		if (parse_number(fields[col[COL_GPU_MEM]], 0.001, 1e5,
				 &s.gpu_mem_gb) < 0)
			return cell_error(err, csv, col, COL_GPU_MEM,
					  "\"%s\" is not a positive number "
					  "of GB", fields[col[COL_GPU_MEM]]);
		if (!s.gpu_model[0])
			return cell_error(err, csv, col, COL_GPU_MODEL,
					  "empty on a size with GPUs");
		s.gpu_mem_total_gb = s.gpus < 1 ? s.gpu_mem_gb
						: s.gpus * s.gpu_mem_gb;
		gpu_name(&s, s.gpu_name, sizeof(s.gpu_name));
	} else {
		s.gpu_model[0] = '\0';
	}
	if (parse_number(fields[col[COL_VCPUS]], 1, 1e5, &v) < 0 ||
	    v != floor(v))
		return cell_error(err, csv, col, COL_VCPUS,
				  "\"%s\" is not a whole number >= 1",
				  fields[col[COL_VCPUS]]);
	s.vcpus = (int)v;
	if (parse_number(fields[col[COL_RAM]], 0.001, 1e7, &s.ram_gib) < 0)
		return cell_error(err, csv, col, COL_RAM,
				  "\"%s\" is not a positive number of GiB",
				  fields[col[COL_RAM]]);
	ib = fields[col[COL_IB]];
	if (has_word_prefix(ib, "yes"))
		s.infiniband = true;
	else if (*ib && !has_word_prefix(ib, "no"))
		return cell_error(err, csv, col, COL_IB,
				  "\"%s\" says neither yes nor no", ib);
	for (int p = 0; p < KN_PRICINGS; p++) {
		const char *cell = fields[col[PRICE_COLS[p]]];

		s.usd_hr[p] = -1;
		if (*cell && parse_number(cell, 0, PRICE_MAX, &s.usd_hr[p]) < 0)
			return cell_error(err, csv, col, PRICE_COLS[p],
					  "\"%s\" is not a price in USD per "
					  "hour (a number >= 0, or blank when "
					  "unknown)", cell);
	}
	s.retired = status_col >= 0 && status_col < csv->n_fields &&
		    has_word_prefix(fields[status_col], "RETIRED");
	*out = s;
	return 0;
}

int kn_catalog_parse(struct kn_catalog *c, const char *text, size_t len,
		     const char *path, struct kn_error *err)
{
	char *buf = NULL;
	size_t n_new = 0;
	struct kn_vm_size *rows = NULL;
	struct kn_csv csv;
	int col[COL_COUNT], status_col, rc;

	if (memchr(text, '\0', len))
		return kn_errorf(err, KN_EINVAL, "catalog",
				 "%s: contains a NUL byte", path);
	buf = kn_xmalloc(len + 1);
	memcpy(buf, text, len);
	buf[len] = '\0';
	kn_csv_init(&csv, buf, path);
	rc = kn_csv_header(&csv, COLUMNS, COL_COUNT, col, err);
	if (rc < 0)
		goto out;
	status_col = kn_csv_find(&csv, "status");
	while ((rc = kn_csv_next(&csv, err)) > 0) {
		struct kn_vm_size row;

		rc = parse_row(&csv, col, status_col, &row, err);
		if (rc < 0)
			goto out;
		rows = kn_xrealloc(rows, (n_new + 1) * sizeof(*rows));
		rows[n_new++] = row;
	}
	if (rc < 0)
		goto out;
	/* Only now, with every row good, does the catalog change. */
	for (size_t i = 0; i < n_new; i++) {
		struct kn_vm_size *same = (struct kn_vm_size *)
			kn_catalog_find(c, rows[i].size);

		if (same) {
			*same = rows[i];
			continue;
		}
		c->rows = kn_xgrow(c->rows, &c->alloc, c->n, sizeof(*c->rows));
		c->rows[c->n++] = rows[i];
	}
out:
	KN_FREE_ALL(rows, buf);
	return rc;
}

int kn_catalog_load(struct kn_catalog *c, const char *path,
		    struct kn_error *err)
{
	char *text = NULL;
	size_t len;
	int rc = kn_read_file(path, CATALOG_FILE_MAX, &text, &len);

	if (rc < 0)
		return kn_errorf(err, rc == -EFBIG ? KN_ETOOBIG : KN_EIO,
				 "catalog", "%s: %s", path,
				 rc == -EFBIG ? "larger than 1 MiB, not a "
						"catalog" : strerror(-rc));
	rc = kn_catalog_parse(c, text, len, path, err);
	free(text);
	return rc;
}

int kn_catalog_load_shipped(struct kn_catalog *c, struct kn_error *err)
{
	const char *names[] = {"azure-gpu-skus.csv", "azure-cpu-skus.csv"};
	int rc = 0;

	for (size_t i = 0; rc == 0 && i < sizeof(names) / sizeof(names[0]);
	     i++) {
		char *path = kn_data_path(names[i]);

		rc = kn_catalog_load(c, path, err);
		free(path);
	}
	return rc;
}
