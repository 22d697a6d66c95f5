/*
 * Node metrics from procfs and sysfs under a root directory, named, typed
 * and labelled as node_exporter names them (its cpu, loadavg, stat,
 * meminfo, netdev, diskstats and filesystem collectors), so dashboards
 * built for node_exporter read kiln's exporter unchanged.
 *
 * Each source file is read whole (they are small) and parsed in one pass;
 * a family's samples are written together because the format requires
 * every series of a family to be contiguous. Filesystems are sized with
 * statvfs, which can hang on a dead network mount: node_exporter's
 * default exclusions (pseudo filesystems) apply, and a caller that lists
 * mount points gets exactly those.
 */
#include "telemetry.h"

#include <dirent.h>
#include <errno.h>
#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>
#include <unistd.h>

/* procfs files are a few KiB; /proc/mounts in a busy container ~100 KiB. */
#define PROC_FILE_MAX (4 * 1024 * 1024)

static char *under(const char *root, const char *rel)
{
	size_t n = strlen(root);

	while (n > 0 && root[n - 1] == '/')
		n--;
	return kn_asprintf("%.*s%s", (int)n, root, rel);
}

/* Read root+rel; -ENOENT quietly when absent and optional. */
static int read_under(const char *root, const char *rel, bool optional,
		      char **out, struct kn_error *err)
{
	char *path = under(root, rel);
	size_t len;
	int rc = kn_read_file(path, PROC_FILE_MAX, out, &len);

	if (rc < 0 && !(optional && rc == -ENOENT))
		kn_errorf(err, KN_EIO, NULL, "%s: %s", path, strerror(-rc));
	free(path);
	return rc;
}

/* ---- CPU, load, boot time: /proc/stat, /proc/loadavg ---- */

/* /proc/stat's kernel counters (-1: the line was absent). */
static int write_kernel_counters(const long long *v, struct kn_buf *out)
{
	static const struct {
		const char *name, *type, *help;
	} fam[] = {
		{"node_context_switches_total", "counter",
		 "Total number of context switches."},
		{"node_forks_total", "counter", "Total number of forks."},
		{"node_intr_total", "counter",
		 "Total number of interrupts serviced."},
		{"node_procs_running", "gauge",
		 "Number of processes in runnable state."},
		{"node_procs_blocked", "gauge",
		 "Number of processes blocked waiting for I/O to complete."},
	};
	int rc;

	for (size_t i = 0; i < sizeof(fam) / sizeof(fam[0]); i++)
		if (v[i] >= 0 &&
		    ((rc = kn_prom_family(out, fam[i].name, fam[i].type,
					  fam[i].help)) < 0 ||
		     (rc = kn_prom_sample(out, fam[i].name, NULL,
					  (double)v[i])) < 0))
			return rc;
	return 0;
}

static int write_stat(const char *root, struct kn_buf *out,
		      struct kn_error *err)
{
	/* /proc/stat's column order, and the modes node_exporter emits. */
	static const char *const columns[] = {"user", "nice", "system",
					      "idle", "iowait", "irq",
					      "softirq", "steal"};
	static const int by_name[] = {3, 4, 5, 1, 6, 7, 2, 0}; /* sorted */
	char *text = NULL, *line, *save = NULL;
	double ticks = (double)sysconf(_SC_CLK_TCK);
	long long btime = -1;
	/* ctxt, processes, the first intr column, procs_running,
	   procs_blocked: node_exporter's stat collector's other series. */
	long long kernel[5] = {-1, -1, -1, -1, -1};
	bool started = false;
	int rc, lineno = 0;

	if ((rc = read_under(root, "/proc/stat", false, &text, err)) < 0)
		return rc;
	for (line = strtok_r(text, "\n", &save); line;
	     line = strtok_r(NULL, "\n", &save)) {
		unsigned long long v[8];
		unsigned cpu;
		char cpu_label[16];

		lineno++;
		if (sscanf(line, "btime %lld", &btime) == 1 ||
		    sscanf(line, "ctxt %lld", &kernel[0]) == 1 ||
		    sscanf(line, "processes %lld", &kernel[1]) == 1 ||
		    sscanf(line, "intr %lld", &kernel[2]) == 1 ||
		    sscanf(line, "procs_running %lld", &kernel[3]) == 1 ||
		    sscanf(line, "procs_blocked %lld", &kernel[4]) == 1)
			continue;
		if (strncmp(line, "cpu", 3) || line[3] < '0' || line[3] > '9')
			continue;
		if (sscanf(line, "cpu%u %llu %llu %llu %llu %llu %llu %llu %llu",
			   &cpu, &v[0], &v[1], &v[2], &v[3], &v[4], &v[5],
			   &v[6], &v[7]) != 9) {
			rc = kn_errorf(err, KN_EIO, NULL,
				       "%s/proc/stat:%d: malformed cpu line",
				       root, lineno);
			goto out;
		}
		if (!started &&
		    (rc = kn_prom_family(out, "node_cpu_seconds_total", "counter",
					 "Seconds the CPUs spent in each mode.")) < 0)
			goto full;
		started = true;
		snprintf(cpu_label, sizeof(cpu_label), "%u", cpu);
		for (size_t i = 0; i < 8; i++) {
			int c = by_name[i];
			const char *labels[] = {"cpu", cpu_label, "mode",
						columns[c], NULL};
			if ((rc = kn_prom_sample(out, "node_cpu_seconds_total",
						 labels, (double)v[c] / ticks)) < 0)
				goto full;
		}
	}
	if (btime >= 0 &&
	    ((rc = kn_prom_family(out, "node_boot_time_seconds", "gauge",
				  "Node boot time, in unixtime.")) < 0 ||
	     (rc = kn_prom_sample(out, "node_boot_time_seconds", NULL,
				  (double)btime)) < 0))
		goto full;
	if ((rc = write_kernel_counters(kernel, out)) < 0)
		goto full;
	rc = 0;
	goto out;
full:
	rc = kn_errorf(err, KN_ETOOBIG, NULL, "scrape exceeds %d bytes",
		       KN_PROM_MAX_BYTES);
out:
	free(text);
	return rc;
}

static int write_loadavg(const char *root, struct kn_buf *out,
			 struct kn_error *err)
{
	static const char *const names[] = {"node_load1", "node_load5",
					    "node_load15"};
	static const char *const helps[] = {"1m load average.",
					    "5m load average.",
					    "15m load average."};
	char *text = NULL;
	double load[3];
	int rc;

	if ((rc = read_under(root, "/proc/loadavg", true, &text, err)) < 0)
		return rc == -ENOENT ? 0 : rc;
	if (sscanf(text, "%lf %lf %lf", &load[0], &load[1], &load[2]) != 3) {
		rc = kn_errorf(err, KN_EIO, NULL, "%s/proc/loadavg:1: malformed",
			       root);
		goto out;
	}
	for (int i = 0; i < 3; i++)
		if ((rc = kn_prom_family(out, names[i], "gauge", helps[i])) < 0 ||
		    (rc = kn_prom_sample(out, names[i], NULL, load[i])) < 0) {
			rc = kn_errorf(err, KN_ETOOBIG, NULL, "scrape too large");
			goto out;
		}
	rc = 0;
out:
	free(text);
	return rc;
}

/* ---- memory: /proc/meminfo ---- */

/*
 * "Active(anon):  123 kB" -> key "Active_anon_bytes", 125952. Keys
 * without a kB unit (HugePages_Total) keep their plain value and name.
 */
static bool meminfo_line(const char *line, char *key, size_t klen,
			 double *value)
{
	const char *colon = strchr(line, ':');
	char unit[8] = "";
	unsigned long long v;
	size_t k = 0;

	if (!colon || sscanf(colon + 1, "%llu %7s", &v, unit) < 1)
		return false;
	for (const char *p = line; p < colon && k + 1 < klen; p++) {
		if (*p == '(')
			key[k++] = '_';
		else if (*p != ')')
			key[k++] = *p;
	}
	key[k] = '\0';
	*value = (double)v;
	if (!strcmp(unit, "kB")) {
		*value *= 1024.0;
		if (k + 7 < klen)
			strcat(key, "_bytes");
	}
	return k > 0;
}

static int write_meminfo(const char *root, struct kn_buf *out,
			 struct kn_error *err)
{
	char *text = NULL, *line, *save = NULL;
	int rc, lineno = 0;

	if ((rc = read_under(root, "/proc/meminfo", false, &text, err)) < 0)
		return rc;
	for (line = strtok_r(text, "\n", &save); line;
	     line = strtok_r(NULL, "\n", &save)) {
		char key[96], name[128], help[160];
		double v;

		lineno++;
		if (!meminfo_line(line, key, sizeof(key), &v)) {
			rc = kn_errorf(err, KN_EIO, NULL,
				       "%s/proc/meminfo:%d: malformed line",
				       root, lineno);
			goto out;
		}
		snprintf(name, sizeof(name), "node_memory_%s", key);
		snprintf(help, sizeof(help), "Memory information field %s.",
			 key);
		if ((rc = kn_prom_family(out, name, "gauge", help)) < 0 ||
		    (rc = kn_prom_sample(out, name, NULL, v)) < 0) {
			rc = rc == -EINVAL
				     ? kn_errorf(err, KN_EIO, NULL,
						 "%s/proc/meminfo:%d: field "
						 "name \"%s\" is not a metric "
						 "name", root, lineno, key)
				     : kn_errorf(err, KN_ETOOBIG, NULL,
						 "scrape too large");
			goto out;
		}
	}
	rc = 0;
out:
	free(text);
	return rc;
}

int kn_node_mem_total(const char *root, int64_t *out, struct kn_error *err)
{
	char *text = NULL, *line, *save = NULL;
	int rc;

	if ((rc = read_under(root, "/proc/meminfo", false, &text, err)) < 0)
		return rc;
	rc = kn_errorf(err, KN_EIO, NULL, "%s/proc/meminfo: no MemTotal line",
		       root);
	for (line = strtok_r(text, "\n", &save); line;
	     line = strtok_r(NULL, "\n", &save)) {
		char key[96];
		double v;
		if (meminfo_line(line, key, sizeof(key), &v) &&
		    !strcmp(key, "MemTotal_bytes")) {
			*out = (int64_t)v;
			rc = 0;
			break;
		}
	}
	free(text);
	return rc;
}

/* ---- network: /proc/net/dev ---- */

#define NETDEV_FIELDS 16
#define NETDEV_MAX 512 /* interfaces; a host with more is truncated */

struct netdev {
	char name[64];
	unsigned long long v[NETDEV_FIELDS];
};

static int write_netdev(const char *root, struct kn_buf *out,
			struct kn_error *err)
{
	static const char *const stats[NETDEV_FIELDS] = {
		"receive_bytes", "receive_packets", "receive_errs",
		"receive_drop", "receive_fifo", "receive_frame",
		"receive_compressed", "receive_multicast", "transmit_bytes",
		"transmit_packets", "transmit_errs", "transmit_drop",
		"transmit_fifo", "transmit_colls", "transmit_carrier",
		"transmit_compressed"};
	struct netdev *devs = NULL;
	char *text = NULL, *line, *save = NULL;
	size_t n = 0;
	int rc, lineno = 0;

	if ((rc = read_under(root, "/proc/net/dev", true, &text, err)) < 0)
		return rc == -ENOENT ? 0 : rc;
	devs = kn_xcalloc(NETDEV_MAX, sizeof(*devs));
	for (line = strtok_r(text, "\n", &save); line && n < NETDEV_MAX;
	     line = strtok_r(NULL, "\n", &save)) {
		char *colon = strchr(line, ':'), *name = line, *p, *end;

		if (++lineno <= 2)
			continue; /* the two header lines */
		if (!colon)
			goto bad;
		*colon = '\0';
		while (*name == ' ')
			name++;
		kn_strlcpy(devs[n].name, name, sizeof(devs[n].name));
		p = colon + 1;
		for (int i = 0; i < NETDEV_FIELDS; i++) {
			devs[n].v[i] = strtoull(p, &end, 10);
			if (end == p)
				goto bad;
			p = end;
		}
		n++;
	}
	for (int i = 0; i < NETDEV_FIELDS; i++) {
		char name[96], help[96];

		snprintf(name, sizeof(name), "node_network_%s_total", stats[i]);
		snprintf(help, sizeof(help), "Network device statistic %s.",
			 stats[i]);
		if (n && (rc = kn_prom_family(out, name, "counter", help)) < 0)
			goto full;
		for (size_t d = 0; d < n; d++) {
			const char *labels[] = {"device", devs[d].name, NULL};
			if ((rc = kn_prom_sample(out, name, labels,
						 (double)devs[d].v[i])) < 0)
				goto full;
		}
	}
	rc = 0;
	goto out;
bad:
	rc = kn_errorf(err, KN_EIO, NULL, "%s/proc/net/dev:%d: malformed line",
		       root, lineno);
	goto out;
full:
	rc = kn_errorf(err, KN_ETOOBIG, NULL, "scrape too large");
out:
	free(devs);
	free(text);
	return rc;
}

/* ---- disks: /proc/diskstats ---- */

#define DISK_MAX 1024

struct disk {
	char name[64];
	unsigned long long f[11]; /* the 11 classic fields after the name */
};

static int write_diskstats(const char *root, struct kn_buf *out,
			   struct kn_error *err)
{
	/* Family, type, help, field, scale: node_exporter's diskstats set. */
	static const struct {
		const char *name, *type, *help;
		int field;
		double scale;
	} fams[] = {
		{"node_disk_reads_completed_total", "counter",
		 "The total number of reads completed successfully.", 0, 1},
		{"node_disk_reads_merged_total", "counter",
		 "The total number of reads merged.", 1, 1},
		{"node_disk_read_bytes_total", "counter",
		 "The total number of bytes read successfully.", 2, 512},
		{"node_disk_read_time_seconds_total", "counter",
		 "The total number of seconds spent by all reads.", 3, 0.001},
		{"node_disk_writes_completed_total", "counter",
		 "The total number of writes completed successfully.", 4, 1},
		{"node_disk_writes_merged_total", "counter",
		 "The number of writes merged.", 5, 1},
		{"node_disk_written_bytes_total", "counter",
		 "The total number of bytes written successfully.", 6, 512},
		{"node_disk_write_time_seconds_total", "counter",
		 "This is the total number of seconds spent by all writes.", 7,
		 0.001},
		{"node_disk_io_now", "gauge",
		 "The number of I/Os currently in progress.", 8, 1},
		{"node_disk_io_time_seconds_total", "counter",
		 "Total seconds spent doing I/Os.", 9, 0.001},
		{"node_disk_io_time_weighted_seconds_total", "counter",
		 "The weighted # of seconds spent doing I/Os.", 10, 0.001},
	};
	struct disk *disks = NULL;
	char *text = NULL, *line, *save = NULL;
	regex_t skip;
	size_t n = 0;
	int rc, lineno = 0;

	if ((rc = read_under(root, "/proc/diskstats", true, &text, err)) < 0)
		return rc == -ENOENT ? 0 : rc;
	/* node_exporter's default --collector.diskstats.device-exclude. */
	if (regcomp(&skip, "^(z?ram|loop|fd|(h|s|v|xv)d[a-z]|nvme[0-9]+n[0-9]+p)"
			   "[0-9]+$", REG_EXTENDED | REG_NOSUB) != 0) {
		free(text);
		return kn_errorf(err, KN_EIO, NULL, "cannot compile regex");
	}
	disks = kn_xcalloc(DISK_MAX, sizeof(*disks));
	for (line = strtok_r(text, "\n", &save); line && n < DISK_MAX;
	     line = strtok_r(NULL, "\n", &save)) {
		unsigned long long *f = disks[n].f;
		unsigned major, minor;

		lineno++;
		if (sscanf(line, "%u %u %63s %llu %llu %llu %llu %llu %llu %llu "
				 "%llu %llu %llu %llu",
			   &major, &minor, disks[n].name, &f[0], &f[1], &f[2],
			   &f[3], &f[4], &f[5], &f[6], &f[7], &f[8], &f[9],
			   &f[10]) != 14) {
			rc = kn_errorf(err, KN_EIO, NULL,
				       "%s/proc/diskstats:%d: malformed line",
				       root, lineno);
			goto out;
		}
		if (regexec(&skip, disks[n].name, 0, NULL, 0) != 0)
			n++;
	}
	for (size_t i = 0; i < sizeof(fams) / sizeof(fams[0]) && n; i++) {
		if ((rc = kn_prom_family(out, fams[i].name, fams[i].type,
					 fams[i].help)) < 0)
			goto full;
		for (size_t d = 0; d < n; d++) {
			const char *labels[] = {"device", disks[d].name, NULL};
			if ((rc = kn_prom_sample(out, fams[i].name, labels,
						 (double)disks[d].f[fams[i].field] *
							 fams[i].scale)) < 0)
				goto full;
		}
	}
	rc = 0;
	goto out;
full:
	rc = kn_errorf(err, KN_ETOOBIG, NULL, "scrape too large");
out:
	regfree(&skip);
	free(disks);
	free(text);
	return rc;
}

/* ---- filesystems: /proc/mounts + statvfs ---- */

#define MOUNT_MAX 256

struct fs {
	char device[256], mountpoint[256], fstype[64];
	double v[6];
};

/* /proc/mounts escapes space, tab, newline and backslash as \ooo. */
static void unescape_mount(char *s)
{
	char *w = s;

	for (; *s; s++) {
		if (s[0] == '\\' && s[1] >= '0' && s[1] <= '3' && s[2] >= '0' &&
		    s[2] <= '7' && s[3] >= '0' && s[3] <= '7') {
			*w++ = (char)((s[1] - '0') * 64 + (s[2] - '0') * 8 +
				      (s[3] - '0'));
			s += 3;
		} else {
			*w++ = *s;
		}
	}
	*w = '\0';
}

static bool listed(const char *const *mounts, const char *mountpoint)
{
	for (; *mounts; mounts++)
		if (!strcmp(*mounts, mountpoint))
			return true;
	return false;
}

static int write_filesystems(const struct kn_node_options *opt,
			     struct kn_buf *out, struct kn_error *err)
{
	static const struct {
		const char *name, *help;
	} fams[] = {
		{"node_filesystem_avail_bytes",
		 "Filesystem space available to non-root users in bytes."},
		{"node_filesystem_files", "Filesystem total file nodes."},
		{"node_filesystem_files_free",
		 "Filesystem total free file nodes."},
		{"node_filesystem_free_bytes", "Filesystem free space in bytes."},
		{"node_filesystem_readonly", "Filesystem read-only status."},
		{"node_filesystem_size_bytes", "Filesystem size in bytes."},
	};
	struct fs *fss = NULL;
	char *text = NULL, *line, *save = NULL;
	regex_t skip_type, skip_point;
	size_t n = 0;
	int rc;

	if ((rc = read_under(opt->root, "/proc/mounts", true, &text, err)) < 0)
		return rc == -ENOENT ? 0 : rc;
	/* node_exporter's default fs-types-exclude and mount-points-exclude. */
	regcomp(&skip_type,
		"^(autofs|binfmt_misc|bpf|cgroup2?|configfs|debugfs|devpts|"
		"devtmpfs|fusectl|hugetlbfs|iso9660|mqueue|nsfs|overlay|proc|"
		"procfs|pstore|rpc_pipefs|securityfs|selinuxfs|squashfs|sysfs|"
		"tracefs)$", REG_EXTENDED | REG_NOSUB);
	regcomp(&skip_point,
		"^/(dev|proc|run/credentials/.+|sys|var/lib/docker/.+|"
		"var/lib/containers/storage/.+)($|/)", REG_EXTENDED | REG_NOSUB);
	fss = kn_xcalloc(MOUNT_MAX, sizeof(*fss));
	for (line = strtok_r(text, "\n", &save); line && n < MOUNT_MAX;
	     line = strtok_r(NULL, "\n", &save)) {
		char options[512], *path;
		struct fs cur, *f = &cur;
		struct statvfs st;
		size_t slot = n;

		if (sscanf(line, "%255s %255s %63s %511s", f->device,
			   f->mountpoint, f->fstype, options) != 4)
			continue;
		unescape_mount(f->device);
		unescape_mount(f->mountpoint);
		if (opt->mounts ? !listed(opt->mounts, f->mountpoint)
				: (regexec(&skip_type, f->fstype, 0, NULL, 0) == 0 ||
				   regexec(&skip_point, f->mountpoint, 0, NULL,
					   0) == 0))
			continue;
		/* A mount point mounted over: the last mount is the one seen. */
		for (size_t i = 0; i < n; i++)
			if (!strcmp(fss[i].mountpoint, f->mountpoint))
				slot = i;
		path = under(opt->root, f->mountpoint);
		rc = statvfs(path, &st);
		free(path);
		if (rc < 0)
			continue; /* gone or inaccessible: no series, as upstream */
		f->v[0] = (double)st.f_bavail * (double)st.f_frsize;
		f->v[1] = (double)st.f_files;
		f->v[2] = (double)st.f_ffree;
		f->v[3] = (double)st.f_bfree * (double)st.f_frsize;
		f->v[4] = (st.f_flag & ST_RDONLY) ||
				  !strncmp(options, "ro,", 3) ||
				  !strcmp(options, "ro")
			  ? 1
			  : 0;
		f->v[5] = (double)st.f_blocks * (double)st.f_frsize;
		fss[slot] = cur;
		if (slot == n)
			n++;
	}
	for (size_t i = 0; i < sizeof(fams) / sizeof(fams[0]) && n; i++) {
		if ((rc = kn_prom_family(out, fams[i].name, "gauge",
					 fams[i].help)) < 0)
			goto full;
		for (size_t d = 0; d < n; d++) {
			const char *labels[] = {"device", fss[d].device,
						"fstype", fss[d].fstype,
						"mountpoint", fss[d].mountpoint,
						NULL};
			if ((rc = kn_prom_sample(out, fams[i].name, labels,
						 fss[d].v[i])) < 0)
				goto full;
		}
	}
	rc = 0;
	goto out;
full:
	rc = kn_errorf(err, KN_ETOOBIG, NULL, "scrape too large");
out:
	regfree(&skip_type);
	regfree(&skip_point);
	free(fss);
	free(text);
	return rc;
}

int kn_node_collect(const struct kn_node_options *opt, struct kn_buf *out,
		    struct kn_error *err)
{
	int rc;

	if ((rc = kn_node_identity(opt->root, kn_now_ms(), out, err)) < 0 ||
	    (rc = write_stat(opt->root, out, err)) < 0 ||
	    (rc = kn_node_kernel(opt->root, out, err)) < 0 ||
	    (rc = write_loadavg(opt->root, out, err)) < 0 ||
	    (rc = write_meminfo(opt->root, out, err)) < 0 ||
	    (rc = write_netdev(opt->root, out, err)) < 0 ||
	    (rc = write_diskstats(opt->root, out, err)) < 0 ||
	    (rc = write_filesystems(opt, out, err)) < 0)
		return rc;
	return 0;
}

/* ---- InfiniBand: /sys/class/infiniband/DEV/ports/N ---- */

static void read_attr(const char *dir, const char *name, char *buf,
		      size_t len)
{
	char *path = kn_asprintf("%s/%s", dir, name), *text = NULL;
	size_t n;

	buf[0] = '\0';
	if (kn_read_file(path, 4096, &text, &n) == 0) {
		text[strcspn(text, "\n")] = '\0';
		kn_strlcpy(buf, text, len);
	}
	free(text);
	free(path);
}

static int cmp_port(const void *a, const void *b)
{
	const struct kn_ib_port *x = a, *y = b;
	int c = strcmp(x->device, y->device);
	return c ? c : x->port - y->port;
}

int kn_ib_ports(const char *root, struct kn_ib_port **out, size_t *n,
		struct kn_error *err)
{
	char *base = under(root, "/sys/class/infiniband");
	DIR *d = opendir(base);
	struct dirent *de;
	struct kn_ib_port *ports = NULL;
	size_t count = 0, alloc = 0;
	int rc = 0;

	if (!d) {
		rc = errno == ENOENT ? 0 : kn_errorf(err, KN_EIO, NULL, "%s: %s",
						     base, strerror(errno));
		free(base);
		if (rc == 0) {
			*out = NULL;
			*n = 0;
		}
		return rc;
	}
	while ((de = readdir(d)) != NULL) {
		char *pdir;
		DIR *pd;
		struct dirent *pe;

		if (de->d_name[0] == '.')
			continue;
		pdir = kn_asprintf("%s/%s/ports", base, de->d_name);
		pd = opendir(pdir);
		while (pd && (pe = readdir(pd)) != NULL) {
			char *dir, buf[128], *colon;
			struct kn_ib_port *p;
			int num = atoi(pe->d_name);

			if (num < 1)
				continue;
			if (count == alloc) {
				alloc = alloc ? alloc * 2 : 8;
				ports = kn_xrealloc(ports, alloc * sizeof(*ports));
			}
			p = &ports[count++];
			memset(p, 0, sizeof(*p));
			kn_strlcpy(p->device, de->d_name, sizeof(p->device));
			p->port = num;
			dir = kn_asprintf("%s/%s", pdir, pe->d_name);
			read_attr(dir, "state", buf, sizeof(buf));
			colon = strchr(buf, ':');
			kn_strlcpy(p->state, colon ? colon + 1 + (colon[1] == ' ')
						   : buf, sizeof(p->state));
			read_attr(dir, "phys_state", buf, sizeof(buf));
			colon = strchr(buf, ':');
			kn_strlcpy(p->phys_state,
				   colon ? colon + 1 + (colon[1] == ' ') : buf,
				   sizeof(p->phys_state));
			read_attr(dir, "rate", buf, sizeof(buf));
			p->rate_gbps = strtod(buf, NULL);
			read_attr(dir, "link_layer", p->link_layer,
				  sizeof(p->link_layer));
			free(dir);
		}
		if (pd)
			closedir(pd);
		free(pdir);
	}
	closedir(d);
	free(base);
	if (count)
		qsort(ports, count, sizeof(*ports), cmp_port);
	*out = ports;
	*n = count;
	return 0;
}
