/*
 * The node checks. Each is a function filling one result; kn_health_run
 * calls them all (never stopping at the first failure, so a report names
 * every problem) and counts failures. GPU checks take NVML samples once
 * and share them.
 *
 * Thresholds are the conservative ones operators use: any uncorrectable
 * (double-bit) ECC error since boot, any page pending retirement, a row
 * remap failure or pending remap (both need a GPU reset), hardware or
 * thermal slowdown, a PCIe link narrower than the device and slot allow,
 * any NVLink down. PCIe generation is only judged on a busy GPU: an idle
 * GPU drops to Gen1 to save power, which NVML reports as the idle reason.
 */
#include "internal.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/statvfs.h>
#include <unistd.h>

/* A catalogue is tens of rows; the kernel ring buffer is at most a few MiB. */
#define SKU_FILE_MAX (1024 * 1024)
#define KLOG_MAX (8 * 1024 * 1024)

const char *kn_check_status_name(enum kn_check_status s)
{
	return s == KN_CHECK_PASS ? "pass" : s == KN_CHECK_FAIL ? "fail" : "skip";
}

/* ---- the SKU catalogue ----
 * The five columns these checks need, for one size. src/cost/catalog.c
 * reads every column of the same file for `kiln advise`; the two are
 * siblings and may not call each other, so each interprets its columns
 * and both split records with base's CSV reader. */

/* kn_sku_load's search: the size asked, and the closest name seen. */
struct sku_search {
	const char *path, *size;
	struct kn_sku *out;
	bool found;
	char best[64];
	int best_d;
};

/* A catalogue row: size, gpu_model, gpu_count, ram_gib, ib_bandwidth. */
static int sku_row(void *arg, char **cells, int line, struct kn_error *err)
{
	struct sku_search *q = arg;
	struct kn_sku s;
	int d;

	if (strcasecmp(cells[0], q->size) != 0) {
		d = kn_levenshtein(cells[0], q->size);
		if (d < q->best_d) {
			q->best_d = d;
			kn_strlcpy(q->best, cells[0], sizeof(q->best));
		}
		return 0;
	}
	memset(&s, 0, sizeof(s));
	kn_strlcpy(s.size, cells[0], sizeof(s.size));
	kn_strlcpy(s.gpu_model, cells[1], sizeof(s.gpu_model));
	s.gpu_count = atoi(cells[2]);
	if (strchr(cells[2], '/'))
		s.gpu_count = 1; /* a vGPU share shows as one device */
	s.ram_gib = strtod(cells[3], NULL);
	if (sscanf(cells[4], "%d x %lf", &s.ib_ports, &s.ib_gbps) != 2) {
		s.ib_ports = 0;
		s.ib_gbps = 0;
	}
	if (s.gpu_count < 1 || s.ram_gib <= 0)
		return kn_errorf(err, KN_EINVAL, "sku",
				 "%s:%d: gpu_count or ram_gib is not a "
				 "positive number", q->path, line);
	*q->out = s;
	q->found = true;
	return 1;
}

int kn_sku_load(const char *path, const char *size, struct kn_sku *out,
		struct kn_error *err)
{
	static const char *const wanted[] = {"size", "gpu_model", "gpu_count",
					     "ram_gib", "ib_bandwidth"};
	struct sku_search q = {
		.path = path, .size = size, .out = out, .best_d = 1 << 30,
	};
	int rc = kn_csv_read_columns(path, SKU_FILE_MAX, "sku", wanted, 5,
				     sku_row, &q, err);

	if (rc < 0 || q.found)
		return rc;
	if (q.best[0] && q.best_d <= 4)
		return kn_errorf(err, KN_ENOTFOUND, "sku",
				 "%s: no VM size \"%s\"; did you mean \"%s\"?",
				 path, size, q.best);
	return kn_errorf(err, KN_ENOTFOUND, "sku", "%s: no VM size \"%s\"",
			 path, size);
}

/* ---- helpers ---- */

__attribute__((format(printf, 3, 4))) void
check_set(struct kn_check_result *r, enum kn_check_status st,
	  const char *fmt, ...)
{
	va_list ap;

	r->status = st;
	va_start(ap, fmt);
	vsnprintf(r->message, sizeof(r->message), fmt, ap);
	va_end(ap);
}

__attribute__((format(printf, 3, 4))) void
check_add(struct kn_check_result *r, enum kn_check_status st,
	  const char *fmt, ...)
{
	size_t len;
	va_list ap;

	if (st == KN_CHECK_FAIL && r->status != KN_CHECK_FAIL) {
		r->status = KN_CHECK_FAIL;
		r->message[0] = '\0';
	} else if (st != KN_CHECK_FAIL && r->status == KN_CHECK_FAIL) {
		return;
	}
	len = strlen(r->message);
	if (len && len + 2 < sizeof(r->message)) {
		strcpy(r->message + len, "; ");
		len += 2;
	}
	va_start(ap, fmt);
	vsnprintf(r->message + len, sizeof(r->message) - len, fmt, ap);
	va_end(ap);
}

static char *under(const char *root, const char *rel)
{
	size_t n = strlen(root);

	while (n > 0 && root[n - 1] == '/')
		n--;
	return kn_asprintf("%.*s%s", (int)n, root, rel);
}

/* The word w occurs in s, delimited by spaces or the ends. */
static bool has_word(const char *s, const char *w)
{
	size_t wl = strlen(w);

	for (const char *p = s; (p = strstr(p, w)) != NULL; p++)
		if ((p == s || p[-1] == ' ') && (p[wl] == '\0' || p[wl] == ' '))
			return true;
	return false;
}

/* "NVIDIA H100 80GB SXM5" -> "H100"; "AMD Instinct MI300X" -> "". */
static void model_family(const char *model, char *out, size_t len)
{
	char copy[96], *save = NULL, *w;

	out[0] = '\0';
	kn_strlcpy(copy, model, sizeof(copy));
	w = strtok_r(copy, " ", &save);
	if (!w || strcmp(w, "NVIDIA") != 0)
		return;
	if ((w = strtok_r(NULL, " ", &save)) != NULL)
		kn_strlcpy(out, w, len);
}

/* ---- GPU checks ---- */

struct gpus {
	struct kn_gpu_sample *s;
	unsigned n;
	char error[256]; /* when sampling failed */
};

static bool gpu_skip(const struct kn_health_config *cfg,
		     const struct gpus *g, struct kn_check_result *r)
{
	if (!cfg->nvml) {
		check_set(r, KN_CHECK_SKIP, "no GPU (NVML not available)");
		return true;
	}
	if (g->error[0]) {
		check_set(r, KN_CHECK_FAIL, "%s", g->error);
		return true;
	}
	return false;
}

static void check_inventory(const struct kn_health_config *cfg,
			    const struct gpus *g, struct kn_check_result *r)
{
	char family[64];
	const struct kn_sku *sku = cfg->sku;

	if (!sku) {
		check_set(r, KN_CHECK_SKIP, "no VM size given (--sku)");
		return;
	}
	model_family(sku->gpu_model, family, sizeof(family));
	if (!family[0]) {
		check_set(r, KN_CHECK_SKIP,
			  "%s has %s GPUs; only NVIDIA GPUs are "
			  "checked (through NVML)",
			  sku->size, sku->gpu_model);
		return;
	}
	if (!cfg->nvml) {
		check_set(r, KN_CHECK_FAIL,
			  "%s has %d %s GPUs, but NVML is not "
			  "available",
			  sku->size, sku->gpu_count, family);
		return;
	}
	if (g->error[0]) {
		check_set(r, KN_CHECK_FAIL, "%s", g->error);
		return;
	}
	check_set(r, KN_CHECK_PASS, "%u %s GPUs as %s has", g->n, family,
		  sku->size);
	if ((int)g->n != sku->gpu_count)
		check_add(r, KN_CHECK_FAIL, "%s has %d GPUs, NVML sees %u",
			  sku->size, sku->gpu_count, g->n);
	for (unsigned i = 0; i < g->n; i++)
		if (!has_word(g->s[i].name, family))
			check_add(r, KN_CHECK_FAIL, "GPU %u is a %s, %s has %s",
				  i, g->s[i].name, sku->size, sku->gpu_model);
}

static void check_ecc(const struct gpus *g, struct kn_check_result *r)
{
	check_set(r, KN_CHECK_PASS, "no uncorrectable ECC errors on %u GPUs",
		  g->n);
	for (unsigned i = 0; i < g->n; i++)
		if ((g->s[i].have & KN_GPU_ECC) && g->s[i].ecc_dbe_vol > 0)
			check_add(r, KN_CHECK_FAIL, "GPU %u (%s): %llu "
				  "double-bit ECC errors since boot", i,
				  g->s[i].uuid,
				  (unsigned long long)g->s[i].ecc_dbe_vol);
}

static void check_retired(const struct gpus *g, struct kn_check_result *r)
{
	check_set(r, KN_CHECK_PASS, "no pending page retirement or row "
		  "remapping problem on %u GPUs", g->n);
	for (unsigned i = 0; i < g->n; i++) {
		const struct kn_gpu_sample *s = &g->s[i];
		if ((s->have & KN_GPU_RETIRED) && s->retired_pending)
			check_add(r, KN_CHECK_FAIL, "GPU %u (%s): pages "
				  "pending retirement (reset the GPU)", i,
				  s->uuid);
		if ((s->have & KN_GPU_REMAP) && s->remap_failure)
			check_add(r, KN_CHECK_FAIL, "GPU %u (%s): row "
				  "remapping failed (replace the GPU)", i,
				  s->uuid);
		if ((s->have & KN_GPU_REMAP) && s->remap_pending)
			check_add(r, KN_CHECK_FAIL, "GPU %u (%s): row "
				  "remap pending (reset the GPU)", i, s->uuid);
	}
}

static void check_throttle(const struct gpus *g, struct kn_check_result *r)
{
	static const struct {
		uint64_t bit;
		const char *what;
	} bad[] = {
		{KN_THROTTLE_HW_SLOWDOWN, "hardware slowdown"},
		{KN_THROTTLE_HW_THERMAL, "hardware thermal slowdown"},
		{KN_THROTTLE_SW_THERMAL, "software thermal slowdown"},
		{KN_THROTTLE_HW_POWER_BRAKE, "power brake slowdown"},
	};

	check_set(r, KN_CHECK_PASS, "no hardware or thermal clock slowdown "
		  "on %u GPUs", g->n);
	for (unsigned i = 0; i < g->n; i++)
		for (size_t b = 0; b < sizeof(bad) / sizeof(bad[0]); b++)
			if ((g->s[i].have & KN_GPU_THROTTLE) &&
			    (g->s[i].throttle & bad[b].bit))
				check_add(r, KN_CHECK_FAIL, "GPU %u (%s): %s",
					  i, g->s[i].uuid, bad[b].what);
}

static void check_pcie(const struct gpus *g, struct kn_check_result *r)
{
	check_set(r, KN_CHECK_PASS, "PCIe links at capability on %u GPUs",
		  g->n);
	for (unsigned i = 0; i < g->n; i++) {
		const struct kn_gpu_sample *s = &g->s[i];
		bool idle = (s->have & KN_GPU_THROTTLE) &&
			    (s->throttle & KN_THROTTLE_GPU_IDLE);
		if (!(s->have & KN_GPU_PCIE))
			continue;
		if (s->pcie_width < s->pcie_max_width)
			check_add(r, KN_CHECK_FAIL,
				  "GPU %u (%s): PCIe x%u, capable of x%u", i,
				  s->uuid, s->pcie_width, s->pcie_max_width);
		if (!idle && s->pcie_gen < s->pcie_max_gen)
			check_add(r, KN_CHECK_FAIL, "GPU %u (%s): PCIe "
				  "Gen%u while busy, capable of Gen%u", i,
				  s->uuid, s->pcie_gen, s->pcie_max_gen);
	}
}

static void check_nvlink(const struct gpus *g, struct kn_check_result *r)
{
	int links = 0;

	for (unsigned i = 0; i < g->n; i++)
		links += g->s[i].nvlinks;
	if (links == 0) {
		check_set(r, KN_CHECK_SKIP, "no NVLink on %u GPUs", g->n);
		return;
	}
	check_set(r, KN_CHECK_PASS, "%d NVLinks up", links);
	for (unsigned i = 0; i < g->n; i++)
		for (int l = 0; l < g->s[i].nvlinks; l++)
			if (!g->s[i].nvlink_up[l])
				check_add(r, KN_CHECK_FAIL,
					  "GPU %u (%s): NVLink %d down", i,
					  g->s[i].uuid, l);
}

/*
 * The checks that read the NVML samples, results[1] onwards, run once
 * gpu_skip finds samples to read.
 */
static void (*const GPU_CHECKS[])(const struct gpus *g,
				  struct kn_check_result *r) = {
	check_ecc, check_retired, check_throttle, check_pcie, check_nvlink,
};

/* ---- kernel log: XIDs and machine checks ---- */

/*
 * Read the kernel log whole. /dev/kmsg gives one record per read and
 * EAGAIN at the end (opened non-blocking); a plain file (fixtures, a
 * saved dmesg) reads as usual. Lines keep kmsg's "prio,seq,ts,-;" prefix.
 */
static int read_klog(const char *path, struct kn_buf *out)
{
	char chunk[8192];
	int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
	ssize_t n;

	if (fd < 0)
		return -errno;
	while ((n = read(fd, chunk, sizeof(chunk))) != 0) {
		if (n < 0) {
			if (errno == EINTR)
				continue;
			if (errno == EPIPE)
				continue; /* records overwritten while reading */
			break;        /* EAGAIN: the end */
		}
		if (kn_buf_append(out, chunk, (size_t)n) < 0)
			break;        /* keep what fits */
	}
	close(fd);
	return 0;
}

static void check_klog(const struct kn_health_config *cfg,
		       struct kn_check_result *xid, struct kn_check_result *mce)
{
	char *path = cfg->kernel_log ? kn_xstrdup(cfg->kernel_log)
				     : under(cfg->root, "/dev/kmsg");
	struct kn_buf log;
	char *line, *save = NULL;
	int rc, xids = 0, mces = 0;

	kn_buf_init(&log, KLOG_MAX);
	rc = read_klog(path, &log);
	if (rc < 0) {
		check_set(xid, KN_CHECK_SKIP,
			  "cannot read the kernel log %s: %s", path,
			  strerror(-rc));
		*mce = *xid;
		mce->name = "machine_check";
		goto edac;
	}
	check_set(xid, KN_CHECK_PASS, "no NVIDIA XID in the kernel log");
	check_set(mce, KN_CHECK_PASS,
		  "no machine-check error in the kernel log");
	for (line = log.data ? strtok_r(log.data, "\n", &save) : NULL; line;
	     line = strtok_r(NULL, "\n", &save)) {
		const char *msg = strchr(line, ';'), *x;
		msg = msg ? msg + 1 : line;
		if ((x = strstr(msg, "NVRM: Xid ")) != NULL && xids++ < 4)
			check_add(xid, KN_CHECK_FAIL, "%.200s", x + 6);
		if ((strstr(msg, "Machine check events logged") ||
		     strstr(msg, "[Hardware Error]")) && mces++ < 2)
			check_add(mce, KN_CHECK_FAIL, "kernel: %.200s", msg);
	}
	if (xids > 4)
		check_add(xid, KN_CHECK_FAIL, "and %d more", xids - 4);
edac:
	/* EDAC memory controllers: uncorrectable DIMM errors since boot. */
	{
		char *base = under(cfg->root, "/sys/devices/system/edac/mc");
		DIR *d = opendir(base);
		struct dirent *de;
		while (d && (de = readdir(d)) != NULL) {
			char *p, *text = NULL;
			size_t len;
			long ue;
			if (strncmp(de->d_name, "mc", 2) != 0)
				continue;
			p = kn_asprintf("%s/%s/ue_count", base, de->d_name);
			if (kn_read_file(p, 64, &text, &len) == 0 &&
			    (ue = strtol(text, NULL, 10)) > 0)
				check_add(mce, KN_CHECK_FAIL,
					  "%s: %ld uncorrectable memory "
					  "errors (EDAC)",
					  de->d_name, ue);
			KN_FREE_ALL(text, p);
		}
		if (d)
			closedir(d);
		free(base);
	}
	kn_buf_release(&log);
	free(path);
}

/* ---- InfiniBand, memory, disks ---- */

static void check_ib(const struct kn_health_config *cfg,
		     struct kn_check_result *r)
{
	struct kn_ib_port *ports = NULL;
	struct kn_error err;
	size_t n = 0, ib = 0;

	if (kn_ib_ports(cfg->root, &ports, &n, &err) < 0) {
		check_set(r, KN_CHECK_FAIL, "%s", err.message);
		return;
	}
	if (n == 0 && (!cfg->sku || cfg->sku->ib_ports == 0)) {
		check_set(r, KN_CHECK_SKIP,
			  "no InfiniBand port, and none expected");
		goto out;
	}
	check_set(r, KN_CHECK_PASS, "%zu InfiniBand ports Active", n);
	for (size_t i = 0; i < n; i++) {
		const struct kn_ib_port *p = &ports[i];
		if (strcasecmp(p->link_layer, "InfiniBand") != 0 &&
		    p->link_layer[0])
			continue; /* RoCE/Ethernet ports are not counted */
		ib++;
		if (strcasecmp(p->state, "ACTIVE") != 0)
			check_add(r, KN_CHECK_FAIL,
				  "%s port %d is %s (physical %s)", p->device,
				  p->port, p->state, p->phys_state);
		else if (cfg->sku && cfg->sku->ib_gbps > 0 &&
			 p->rate_gbps < cfg->sku->ib_gbps)
			check_add(r, KN_CHECK_FAIL,
				  "%s port %d runs at %g Gb/s, %s expects "
				  "%g",
				  p->device, p->port, p->rate_gbps,
				  cfg->sku->size, cfg->sku->ib_gbps);
	}
	if (cfg->sku && (int)ib < cfg->sku->ib_ports)
		check_add(r, KN_CHECK_FAIL, "%zu InfiniBand ports, %s has %d",
			  ib, cfg->sku->size, cfg->sku->ib_ports);
out:
	free(ports);
}

static void check_memory(const struct kn_health_config *cfg,
			 struct kn_check_result *r)
{
	struct kn_error err;
	int64_t total;
	double gib, want;

	if (kn_node_mem_total(cfg->root, &total, &err) < 0) {
		check_set(r, KN_CHECK_FAIL, "%s", err.message);
		return;
	}
	gib = (double)total / (1024.0 * 1024 * 1024);
	if (!cfg->sku) {
		check_set(r, KN_CHECK_SKIP,
			  "%.1f GiB; no VM size given (--sku)", gib);
		return;
	}
	want = cfg->sku->ram_gib * (1.0 - KN_HEALTH_MEM_TOLERANCE);
	if (gib < want)
		check_set(r, KN_CHECK_FAIL,
			  "%.1f GiB of memory, %s has %.0f GiB "
			  "(a DIMM lost?)",
			  gib, cfg->sku->size, cfg->sku->ram_gib);
	else
		check_set(r, KN_CHECK_PASS, "%.1f GiB of memory (%s: %.0f GiB)",
			  gib, cfg->sku->size, cfg->sku->ram_gib);
}

static void check_disk(const struct kn_health_config *cfg,
		       struct kn_check_result *r)
{
	if (!cfg->dirs || !cfg->dirs[0]) {
		check_set(r, KN_CHECK_SKIP,
			  "no scratch or checkpoint directory "
			  "given (--dir)");
		return;
	}
	check_set(r, KN_CHECK_PASS,
		  "free space at least %lld bytes in each "
		  "directory",
		  (long long)cfg->min_free_bytes);
	for (const char *const *d = cfg->dirs; *d; d++) {
		struct statvfs st;
		double avail;
		if (statvfs(*d, &st) < 0) {
			check_add(r, KN_CHECK_FAIL, "%s: %s", *d,
				  strerror(errno));
			continue;
		}
		avail = (double)st.f_bavail * (double)st.f_frsize;
		if (avail < (double)cfg->min_free_bytes)
			check_add(r, KN_CHECK_FAIL,
				  "%s: %.1f GiB free, below %.1f GiB", *d,
				  avail / (1 << 30),
				  (double)cfg->min_free_bytes / (1 << 30));
	}
}

int kn_health_run(const struct kn_health_config *cfg,
		  struct kn_check_result *results)
{
	static const char *const names[KN_HEALTH_CHECKS] = {
		"gpu_inventory", "gpu_ecc", "gpu_retired_pages", "gpu_throttle",
		"gpu_pcie", "gpu_nvlink", "kernel_xid", "machine_check",
		"infiniband", "memory", "disk_free"};
	struct gpus g = {0};
	int failed = 0;

	for (int i = 0; i < KN_HEALTH_CHECKS; i++) {
		memset(&results[i], 0, sizeof(results[i]));
		results[i].name = names[i];
	}
	if (cfg->nvml) {
		struct kn_error err;
		g.n = kn_nvml_count(cfg->nvml);
		g.s = kn_xcalloc(g.n ? g.n : 1, sizeof(*g.s));
		for (unsigned i = 0; i < g.n; i++)
			if (kn_nvml_sample(cfg->nvml, i, &g.s[i], &err) < 0) {
				kn_strlcpy(g.error, err.message, sizeof(g.error));
				break;
			}
	}
	check_inventory(cfg, &g, &results[0]);
	for (size_t i = 0; i < sizeof(GPU_CHECKS) / sizeof(GPU_CHECKS[0]); i++)
		if (!gpu_skip(cfg, &g, &results[1 + i]))
			GPU_CHECKS[i](&g, &results[1 + i]);
	check_klog(cfg, &results[6], &results[7]);
	check_ib(cfg, &results[8]);
	check_memory(cfg, &results[9]);
	check_disk(cfg, &results[10]);
	free(g.s);
	for (int i = 0; i < KN_HEALTH_CHECKS; i++)
		failed += results[i].status == KN_CHECK_FAIL;
	return failed;
}

int kn_health_run_here(const struct kn_health_config *cfg, char *first,
		       size_t first_size)
{
	struct kn_check_result r[KN_HEALTH_CHECKS];
	struct kn_health_config here = *cfg;
	struct kn_error err;
	int failed;

	if (kn_nvml_open(&here.nvml, &err) < 0)
		here.nvml = NULL; /* no GPU: its checks skip */
	failed = kn_health_run(&here, r);
	kn_nvml_close(here.nvml);
	first[0] = '\0';
	for (int i = 0; i < KN_HEALTH_CHECKS; i++)
		if (r[i].status == KN_CHECK_FAIL) {
			snprintf(first, first_size, "%s: %s", r[i].name,
				 r[i].message);
			break;
		}
	return failed;
}
