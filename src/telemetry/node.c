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
#include <pthread.h>
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

/* ---- per-device tables: network, disks, filesystems ---- */

#define ROW_LABELS 3
#define ROW_VALUES 16

struct family {
	const char *name, *type, *help;
};

/* One interface, disk or mount: its label values, a value per family. */
struct row {
	char label[ROW_LABELS][256];
	double v[ROW_VALUES];
};

/*
 * Family i holds value i of every row, labelled keys[k]=label[k]; a
 * family's samples stand together, as the format requires, and no rows
 * write no family at all.
 */
static int write_rows(struct kn_buf *out, const struct family *fams,
		      size_t n_fams, const char *const *keys,
		      const struct row *rows, size_t n, struct kn_error *err)
{
	for (size_t i = 0; i < n_fams && n; i++) {
		int rc = kn_prom_family(out, fams[i].name, fams[i].type,
					fams[i].help);

		for (size_t r = 0; rc == 0 && r < n; r++) {
			const char *labels[2 * ROW_LABELS + 1];
			size_t k;

			for (k = 0; keys[k]; k++) {
				labels[2 * k] = keys[k];
				labels[2 * k + 1] = rows[r].label[k];
			}
			labels[2 * k] = NULL;
			rc = kn_prom_sample(out, fams[i].name, labels,
					    rows[r].v[i]);
		}
		if (rc < 0)
			return kn_errorf(err, KN_ETOOBIG, NULL,
					 "scrape too large");
	}
	return 0;
}

static const char *const device_key[] = {"device", NULL};

/*
 * node_exporter's default exclusions: diskstats' device-exclude,
 * filesystem's fs-types-exclude and mount-points-exclude. Compiled once,
 * kept for the process.
 */
enum { SKIP_DISK, SKIP_FS_TYPE, SKIP_MOUNT_POINT, SKIP_COUNT };

static const char *const exclude_patterns[SKIP_COUNT] = {
	[SKIP_DISK] = "^(z?ram|loop|fd|(h|s|v|xv)d[a-z]|nvme[0-9]+n[0-9]+p)"
		      "[0-9]+$",
	[SKIP_FS_TYPE] = "^(autofs|binfmt_misc|bpf|cgroup2?|configfs|debugfs|"
			 "devpts|devtmpfs|fusectl|hugetlbfs|iso9660|mqueue|"
			 "nsfs|overlay|proc|procfs|pstore|rpc_pipefs|"
			 "securityfs|selinuxfs|squashfs|sysfs|tracefs)$",
	[SKIP_MOUNT_POINT] = "^/(dev|proc|run/credentials/.+|sys|"
			     "var/lib/docker/.+|"
			     "var/lib/containers/storage/.+)($|/)",
};

static struct {
	regex_t re[SKIP_COUNT];
	int failed; /* the pattern that did not compile, or -1 */
	char why[128];
} exclude = {.failed = -1};
static pthread_once_t exclude_once = PTHREAD_ONCE_INIT;

static void compile_excludes(void)
{
	for (int i = 0; i < SKIP_COUNT && exclude.failed < 0; i++) {
		int rc = regcomp(&exclude.re[i], exclude_patterns[i],
				 REG_EXTENDED | REG_NOSUB);

		if (rc != 0) {
			regerror(rc, &exclude.re[i], exclude.why,
				 sizeof(exclude.why));
			exclude.failed = i;
		}
	}
}

/* Whether name matches exclusion i (once excludes_ready said yes). */
static bool excluded(int i, const char *name)
{
	return regexec(&exclude.re[i], name, 0, NULL, 0) == 0;
}

/* The exclusions ready, or an error naming the one that is not. */
static int excludes_ready(struct kn_error *err)
{
	pthread_once(&exclude_once, compile_excludes);
	if (exclude.failed >= 0)
		return kn_errorf(err, KN_EIO, NULL, "cannot compile %s: %s",
				 exclude_patterns[exclude.failed],
				 exclude.why);
	return 0;
}

/* ---- network: /proc/net/dev ---- */

#define NETDEV_FIELDS 16
#define NETDEV_MAX 512 /* interfaces; a host with more is truncated */

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
	char names[NETDEV_FIELDS][64], helps[NETDEV_FIELDS][64];
	struct family fams[NETDEV_FIELDS];
	struct row *devs = NULL;
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
		kn_strlcpy(devs[n].label[0], name, sizeof(devs[n].label[0]));
		p = colon + 1;
		for (int i = 0; i < NETDEV_FIELDS; i++) {
			devs[n].v[i] = (double)strtoull(p, &end, 10);
			if (end == p)
				goto bad;
			p = end;
		}
		n++;
	}
	for (int i = 0; i < NETDEV_FIELDS; i++) {
		snprintf(names[i], sizeof(names[i]), "node_network_%s_total",
			 stats[i]);
		snprintf(helps[i], sizeof(helps[i]),
			 "Network device statistic %s.", stats[i]);
		fams[i] = (struct family){names[i], "counter", helps[i]};
	}
	rc = write_rows(out, fams, NETDEV_FIELDS, device_key, devs, n, err);
	goto out;
bad:
	rc = kn_errorf(err, KN_EIO, NULL, "%s/proc/net/dev:%d: malformed line",
		       root, lineno);
out:
	KN_FREE_ALL(devs, text);
	return rc;
}

/* ---- disks: /proc/diskstats ---- */

#define DISK_FIELDS 11 /* the classic fields after the name */
#define DISK_MAX 1024

static int write_diskstats(const char *root, struct kn_buf *out,
			   struct kn_error *err)
{
	/* node_exporter's diskstats set, one family per field in order. */
	static const struct family fams[DISK_FIELDS] = {
		{"node_disk_reads_completed_total", "counter",
		 "The total number of reads completed successfully."},
		{"node_disk_reads_merged_total", "counter",
		 "The total number of reads merged."},
		{"node_disk_read_bytes_total", "counter",
		 "The total number of bytes read successfully."},
		{"node_disk_read_time_seconds_total", "counter",
		 "The total number of seconds spent by all reads."},
		{"node_disk_writes_completed_total", "counter",
		 "The total number of writes completed successfully."},
		{"node_disk_writes_merged_total", "counter",
		 "The number of writes merged."},
		{"node_disk_written_bytes_total", "counter",
		 "The total number of bytes written successfully."},
		{"node_disk_write_time_seconds_total", "counter",
		 "This is the total number of seconds spent by all writes."},
		{"node_disk_io_now", "gauge",
		 "The number of I/Os currently in progress."},
		{"node_disk_io_time_seconds_total", "counter",
		 "Total seconds spent doing I/Os."},
		{"node_disk_io_time_weighted_seconds_total", "counter",
		 "The weighted # of seconds spent doing I/Os."},
	};
	/* The kernel counts sectors of 512 bytes and milliseconds. */
	static const double scale[DISK_FIELDS] = {
		1, 1, 512, 0.001, /* reads */
		1, 1, 512, 0.001, /* writes */
		1, 0.001, 0.001,  /* I/Os */
	};
	struct row *disks = NULL;
	char *text = NULL, *line, *save = NULL;
	size_t n = 0;
	int rc, lineno = 0;

	if ((rc = excludes_ready(err)) < 0 ||
	    (rc = read_under(root, "/proc/diskstats", true, &text, err)) < 0)
		return rc == -ENOENT ? 0 : rc;
	disks = kn_xcalloc(DISK_MAX, sizeof(*disks));
	for (line = strtok_r(text, "\n", &save); line && n < DISK_MAX;
	     line = strtok_r(NULL, "\n", &save)) {
		unsigned long long f[DISK_FIELDS];
		unsigned major, minor;

		lineno++;
		if (sscanf(line, "%u %u %63s %llu %llu %llu %llu %llu %llu %llu "
				 "%llu %llu %llu %llu",
			   &major, &minor, disks[n].label[0], &f[0], &f[1],
			   &f[2], &f[3], &f[4], &f[5], &f[6], &f[7], &f[8],
			   &f[9], &f[10]) != 14) {
			rc = kn_errorf(err, KN_EIO, NULL,
				       "%s/proc/diskstats:%d: malformed line",
				       root, lineno);
			goto out;
		}
		for (int i = 0; i < DISK_FIELDS; i++)
			disks[n].v[i] = (double)f[i] * scale[i];
		if (!excluded(SKIP_DISK, disks[n].label[0]))
			n++;
	}
	rc = write_rows(out, fams, DISK_FIELDS, device_key, disks, n, err);
out:
	KN_FREE_ALL(disks, text);
	return rc;
}

/* ---- filesystems: /proc/mounts + statvfs ---- */

#define MOUNT_MAX 256

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

/* A mount's row: its labels in this order. */
enum { FS_DEVICE, FS_TYPE, FS_POINT };

static int write_filesystems(const struct kn_node_options *opt,
			     struct kn_buf *out, struct kn_error *err)
{
	static const struct family fams[] = {
		{"node_filesystem_avail_bytes", "gauge",
		 "Filesystem space available to non-root users in bytes."},
		{"node_filesystem_files", "gauge",
		 "Filesystem total file nodes."},
		{"node_filesystem_files_free", "gauge",
		 "Filesystem total free file nodes."},
		{"node_filesystem_free_bytes", "gauge",
		 "Filesystem free space in bytes."},
		{"node_filesystem_readonly", "gauge",
		 "Filesystem read-only status."},
		{"node_filesystem_size_bytes", "gauge",
		 "Filesystem size in bytes."},
	};
	static const char *const keys[] = {"device", "fstype", "mountpoint",
					   NULL};
	struct row *fss = NULL;
	char *text = NULL, *line, *save = NULL;
	size_t n = 0;
	int rc;

	if ((rc = excludes_ready(err)) < 0 ||
	    (rc = read_under(opt->root, "/proc/mounts", true, &text, err)) < 0)
		return rc == -ENOENT ? 0 : rc;
	fss = kn_xcalloc(MOUNT_MAX, sizeof(*fss));
	for (line = strtok_r(text, "\n", &save); line && n < MOUNT_MAX;
	     line = strtok_r(NULL, "\n", &save)) {
		char options[512], *path;
		struct row cur;
		char *device = cur.label[FS_DEVICE], *type = cur.label[FS_TYPE];
		char *point = cur.label[FS_POINT];
		struct statvfs st;
		size_t slot = n;

		if (sscanf(line, "%255s %255s %63s %511s", device, point, type,
			   options) != 4)
			continue;
		unescape_mount(device);
		unescape_mount(point);
		if (opt->mounts ? !listed(opt->mounts, point)
				: (excluded(SKIP_FS_TYPE, type) ||
				   excluded(SKIP_MOUNT_POINT, point)))
			continue;
		/* A mount point mounted over: the last mount is the one seen. */
		for (size_t i = 0; i < n; i++)
			if (!strcmp(fss[i].label[FS_POINT], point))
				slot = i;
		path = under(opt->root, point);
		rc = statvfs(path, &st);
		free(path);
		if (rc < 0)
			continue; /* gone or inaccessible: no series, as upstream */
		cur.v[0] = (double)st.f_bavail * (double)st.f_frsize;
		cur.v[1] = (double)st.f_files;
		cur.v[2] = (double)st.f_ffree;
		cur.v[3] = (double)st.f_bfree * (double)st.f_frsize;
		cur.v[4] = (st.f_flag & ST_RDONLY) ||
				   !strncmp(options, "ro,", 3) ||
				   !strcmp(options, "ro")
				   ? 1
				   : 0;
		cur.v[5] = (double)st.f_blocks * (double)st.f_frsize;
		fss[slot] = cur;
		if (slot == n)
			n++;
	}
	rc = write_rows(out, fams, sizeof(fams) / sizeof(fams[0]), keys, fss, n,
			err);
	KN_FREE_ALL(fss, text);
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
	KN_FREE_ALL(text, path);
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
			ports = kn_xgrow(ports, &alloc, count, sizeof(*ports));
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
