/*
 * Per-task usage sampling: what each running task uses of what it asked
 * for, the evidence behind efficiency and right-size advice (cost.c).
 *
 * Every --usage-interval a timer hands the list of running local tasks to
 * a worker thread, which reads, off the loop:
 * - CPU and resident memory from /proc: one pass over /proc/PID/stat,
 *   keeping the processes of each task's session (the shim starts one per
 *   task, so the session is the task's process tree; the shim itself is
 *   left out). CPU is utime + stime + cutime + cstime (children already
 *   reaped count too), turned into cores by the next tick; memory is the
 *   resident set (stat's rss, the same pages as VmRSS) summed.
 * - GPU memory and utilisation: on real GPUs from NVML's per-process
 *   calls for the task's devices (its session's pids); on simulated GPUs,
 *   which cannot be measured, from what the task declares in the file
 *   named by $KILN_SIM_GPU_USAGE (lines "memory_bytes N" and
 *   "utilization F", F the fraction of the GPU's time it keeps busy): the
 *   simulated device model's usage, as the rest of a simulated device is.
 * Back on the loop each sample is added to the task's sketch of that
 * resource in the store (task_usage: a fixed-size histogram, so a long
 * task does not grow the database).
 *
 * Rejected: cgroups (the local executor does not make one per task, and
 * the session is the tree it does make); reading on the loop thread (a
 * /proc pass is cheap but unbounded in the machine's process count).
 * Slurm and Kubernetes tasks run elsewhere and are not sampled here.
 */
#include "internal.h"

#include "devenvsvc.h"

#include "cost/cost.h"
#include "telemetry/telemetry.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* The simulated GPU usage file, in the task directory. */
#define SIM_USAGE_FILE "sim-gpu-usage"
/* It holds two short lines; anything longer is not one. */
#define SIM_USAGE_MAX 4096
/* Processes per task whose GPU use is looked up (a bound, with room for
   data loader workers). */
#define TASK_PIDS_MAX 256

struct target {
	int64_t job_id;
	int attempt, rank;
	int session;          /* the shim's pid */
	char *sim_dir;        /* simulated GPUs: the task dir holding the
				 declared usage, or NULL */
	int n_gpus;           /* real GPUs: NVML indexes */
	int gpus[KN_SCHED_MAX_GPUS_PER_TASK];
	/* Filled by the worker. */
	bool seen;            /* processes of its session were found */
	uint64_t ticks;       /* CPU clock ticks of the tree */
	int64_t rss_bytes;
	int pids[TASK_PIDS_MAX];
	int n_pids;
	bool gpu_seen;
	double gpu_memory;    /* bytes */
	double gpu_util;      /* of one GPU's time, < 0 unknown */
};

struct batch {
	struct server *s;
	struct kn_nvml *nvml; /* the state's; only the worker uses it meanwhile */
	struct target *t;
	size_t n;
	int64_t at_ms;
	int64_t gpu_since_ms; /* NVML's utilisation samples from then on */
	int64_t read_ms;      /* monotonic: when /proc was read */
};

/* The previous tick's CPU ticks of a task, to turn ticks into cores. */
struct cpu_mark {
	int64_t job_id;
	int attempt, rank, session;
	uint64_t ticks;
	int64_t read_ms;
};

struct usage_state {
	struct kn_timer *timer;
	bool busy;            /* a batch is with the worker */
	struct kn_nvml *nvml; /* real GPUs, or NULL */
	struct cpu_mark *marks;
	size_t n_marks;
};

const char *usage_sim_file(void)
{
	return SIM_USAGE_FILE;
}

static void batch_free(struct batch *b)
{
	for (size_t i = 0; b && i < b->n; i++)
		free(b->t[i].sim_dir);
	if (b)
		free(b->t);
	free(b);
}

static int session_cmp(const void *pa, const void *pb)
{
	const struct target *a = pa, *b = pb;

	return (a->session > b->session) - (a->session < b->session);
}

/* Targets are sorted by session: one lookup per process in /proc. */
static int target_by_session(const struct batch *b, int session)
{
	struct target key = { .session = session };
	const struct target *t = bsearch(&key, b->t, b->n, sizeof(*b->t),
					 session_cmp);

	return t ? (int)(t - b->t) : -1;
}

/* Fields of /proc/PID/stat after the command's closing parenthesis. */
static bool read_stat(int pid, int *session, uint64_t *ticks, int64_t *rss)
{
	char path[64], buf[1024], *p;
	unsigned long long ut, st, cut, cst;
	long long pages;
	int fd, sess, n;
	ssize_t len;

	snprintf(path, sizeof(path), "/proc/%d/stat", pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return false;
	len = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (len <= 0)
		return false;
	buf[len] = '\0';
	p = strrchr(buf, ')');
	if (!p)
		return false;
	/* state ppid pgrp session tty tpgid flags minflt cminflt majflt
	   cmajflt utime stime cutime cstime priority nice threads
	   itrealvalue starttime vsize rss */
	n = sscanf(p + 1,
		   " %*c %*d %*d %d %*d %*d %*u %*u %*u %*u %*u %llu %llu %llu "
		   "%llu %*d %*d %*d %*d %*u %*u %lld",
		   &sess, &ut, &st, &cut, &cst, &pages);
	if (n != 6)
		return false;
	*session = sess;
	*ticks = ut + st + cut + cst;
	*rss = pages * sysconf(_SC_PAGESIZE);
	return true;
}

static void scan_proc(struct batch *b)
{
	DIR *d = opendir("/proc");
	struct dirent *e;

	if (!d)
		return;
	while ((e = readdir(d))) {
		int pid, session, k;
		uint64_t ticks;
		int64_t rss;
		struct target *t;

		if (!isdigit((unsigned char)e->d_name[0]))
			continue;
		pid = atoi(e->d_name);
		if (!read_stat(pid, &session, &ticks, &rss) ||
		    (k = target_by_session(b, session)) < 0)
			continue;
		t = &b->t[k];
		t->seen = true;
		if (pid == session)
			continue; /* the shim: kiln's, not the task's */
		t->ticks += ticks;
		t->rss_bytes += rss;
		if (t->n_pids < TASK_PIDS_MAX)
			t->pids[t->n_pids++] = pid;
	}
	closedir(d);
}

/* "memory_bytes N" and "utilization F" lines; false when unreadable. */
static bool read_sim_usage(struct target *t)
{
	char *text = NULL, *line, *save = NULL;
	size_t len;
	bool any = false;

	/* The task writes it: never through a link, a FIFO or a device. */
	if (kn_task_file_read(t->sim_dir, SIM_USAGE_FILE, SIM_USAGE_MAX, &text,
			      &len, NULL) < 0)
		return false;
	t->gpu_memory = 0;
	t->gpu_util = -1;
	for (line = strtok_r(text, "\n", &save); line;
	     line = strtok_r(NULL, "\n", &save)) {
		char key[32];
		double v;

		if (sscanf(line, "%31s %lf", key, &v) != 2 || v < 0)
			continue;
		if (!strcmp(key, "memory_bytes")) {
			t->gpu_memory = v;
			any = true;
		} else if (!strcmp(key, "utilization") && v <= 1) {
			t->gpu_util = v;
			any = true;
		}
	}
	free(text);
	return any;
}

static bool has_pid(const struct target *t, unsigned pid)
{
	for (int i = 0; i < t->n_pids; i++)
		if ((unsigned)t->pids[i] == pid)
			return true;
	return false;
}

/* NVML's per-process figures for the task's devices. */
static void read_nvml_usage(struct kn_nvml *nv, struct target *t,
			    int64_t since_ms)
{
	struct kn_gpu_proc_usage procs[KN_GPU_PROCS_MAX];
	double util = 0;
	int util_devices = 0;

	for (int g = 0; g < t->n_gpus; g++) {
		struct kn_error err;
		size_t n = 0;
		double dev_util = 0;
		bool dev_util_known = false;

		if (kn_nvml_processes(nv, (unsigned)t->gpus[g],
				      (unsigned long long)since_ms * 1000, procs,
				      KN_GPU_PROCS_MAX, &n, &err) < 0)
			continue;
		for (size_t i = 0; i < n; i++) {
			if (!has_pid(t, procs[i].pid))
				continue;
			t->gpu_seen = true;
			if (procs[i].memory_bytes > 0)
				t->gpu_memory += (double)procs[i].memory_bytes;
			if (procs[i].sm_util >= 0) {
				dev_util += procs[i].sm_util;
				dev_util_known = true;
			}
		}
		if (dev_util_known) {
			util += dev_util > 1 ? 1 : dev_util;
			util_devices++;
		}
	}
	t->gpu_util = util_devices ? util / util_devices : -1;
}

static int64_t monotonic_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void sample_work(void *arg)
{
	struct batch *b = arg;

	/* Cores are ticks over the time between two reads: the read's own
	   time, not the tick's, which waits for the loop and the pool. */
	b->read_ms = monotonic_ms();
	scan_proc(b);
	for (size_t i = 0; i < b->n; i++) {
		struct target *t = &b->t[i];

		if (!t->seen)
			continue;
		if (t->sim_dir)
			t->gpu_seen = read_sim_usage(t);
		else if (b->nvml && t->n_gpus)
			read_nvml_usage(b->nvml, t, b->gpu_since_ms);
	}
}

/* Add one sample to a task's sketch of a resource in the store. */
static int record(struct server *s, const struct target *t,
		  enum kn_usage_resource r, double value, int64_t now,
		  struct kn_error *err)
{
	struct kn_task_usage_row row;
	struct kn_usage_hist h;
	int rc;

	kn_usage_hist_init(&h, r);
	rc = kn_store_task_usage_get(s->store, t->job_id, t->attempt, t->rank,
				     kn_usage_resource_name(r), &row, err);
	if (rc == 0) {
		/* A sketch that does not read back is started again. */
		if (kn_usage_hist_decode(&h, row.histogram, err) == 0) {
			h.samples = row.samples;
			h.sum = row.sum;
			h.max = row.max;
		}
		kn_task_usage_row_release(&row);
	} else if (rc != -ENOENT) {
		return rc;
	}
	kn_usage_hist_add(&h, value);
	memset(&row, 0, sizeof(row));
	row.job_id = t->job_id;
	row.attempt = t->attempt;
	row.rank = t->rank;
	row.resource = (char *)kn_usage_resource_name(r);
	row.samples = h.samples;
	row.sum = h.sum;
	row.max = h.max;
	row.histogram = kn_usage_hist_encode(&h);
	rc = kn_store_task_usage_put(s->store, &row, now, err);
	free(row.histogram);
	return rc;
}

static const struct cpu_mark *find_mark(const struct usage_state *u,
					const struct target *t)
{
	for (size_t i = 0; i < u->n_marks; i++)
		if (u->marks[i].job_id == t->job_id &&
		    u->marks[i].attempt == t->attempt &&
		    u->marks[i].rank == t->rank &&
		    u->marks[i].session == t->session)
			return &u->marks[i];
	return NULL;
}

static void arm(struct server *s)
{
	if (s->usage && s->cfg.usage_interval_ms > 0)
		kn_timer_arm(s->usage->timer, s->cfg.usage_interval_ms);
}

static void sample_done(void *arg, bool ran)
{
	struct batch *b = arg;
	struct server *s = b->s;
	struct usage_state *u = s->usage;
	struct cpu_mark *marks;
	size_t n_marks = 0;
	long hz = sysconf(_SC_CLK_TCK);
	struct kn_error err;
	int rc = 0;

	if (!ran || s->closing || !u) {
		batch_free(b);
		return;
	}
	u->busy = false;
	marks = kn_xcalloc(b->n + 1, sizeof(*marks));
	rc = kn_store_begin(s->store, &err);
	for (size_t i = 0; rc == 0 && i < b->n; i++) {
		const struct target *t = &b->t[i];
		const struct cpu_mark *m = find_mark(u, t);

		if (!t->seen)
			continue;
		if (m && b->read_ms > m->read_ms && t->ticks >= m->ticks &&
		    hz > 0)
			rc = record(s, t, KN_USAGE_CPU,
				    (double)(t->ticks - m->ticks) * 1000.0 /
					    (double)hz /
					    ((double)(b->read_ms - m->read_ms) /
					     1000.0),
				    b->at_ms, &err);
		marks[n_marks++] = (struct cpu_mark){ t->job_id, t->attempt,
						      t->rank, t->session,
						      t->ticks, b->read_ms };
		if (rc == 0)
			rc = record(s, t, KN_USAGE_MEMORY, (double)t->rss_bytes,
				    b->at_ms, &err);
		if (rc == 0 && t->gpu_seen)
			rc = record(s, t, KN_USAGE_GPU_MEMORY, t->gpu_memory,
				    b->at_ms, &err);
		if (rc == 0 && t->gpu_seen && t->gpu_util >= 0) {
			rc = record(s, t, KN_USAGE_GPU_UTIL, t->gpu_util * 1000,
				    b->at_ms, &err);
			devenv_gpu_sample(s, t->job_id, t->attempt,
					  (int)(t->gpu_util * 1000), b->at_ms);
		}
	}
	rc = core_store_end(s->store, rc, &err);
	if (rc < 0)
		kn_log(KN_LOG_WARN, "usage sampling: %s", err.message);
	free(u->marks);
	u->marks = marks;
	u->n_marks = n_marks;
	batch_free(b);
	arm(s);
}

static void usage_tick(void *arg)
{
	struct server *s = arg;
	struct batch *b;
	size_t n = 0;

	if (s->closing || s->usage->busy)
		return;
	b = kn_xcalloc(1, sizeof(*b));
	b->s = s;
	b->nvml = s->usage->nvml;
	b->at_ms = kn_now_ms();
	b->gpu_since_ms = b->at_ms - s->cfg.usage_interval_ms;
	for (struct run *r = s->runs; r; r = r->next)
		n += (size_t)r->n_tasks;
	b->t = kn_xcalloc(n + 1, sizeof(*b->t));
	for (struct run *r = s->runs; r; r = r->next)
		for (int k = 0; k < r->n_tasks; k++) {
			const struct run_task *rt = &r->tasks[k];
			const struct kn_sched_binding *bd = &r->bindings[k];
			struct target *t;

			if (!rt->launched || rt->ended || rt->proc.pid <= 0)
				continue;
			t = &b->t[b->n++];
			t->job_id = r->job_id;
			t->attempt = r->attempt;
			t->rank = rt->rank;
			t->session = rt->proc.pid;
			t->gpu_util = -1;
			if (bd->n_devices > 0 &&
			    s->nodes[bd->node].devices.simulated)
				t->sim_dir = kn_xstrdup(rt->task_dir);
			else
				for (int d = 0; d < bd->n_devices &&
						d < KN_SCHED_MAX_GPUS_PER_TASK;
				     d++)
					t->gpus[t->n_gpus++] = bd->devices[d];
		}
	if (!b->n) {
		batch_free(b);
		arm(s);
		return;
	}
	qsort(b->t, b->n, sizeof(*b->t), session_cmp);
	s->usage->busy = true;
	kn_workers_submit(s->workers, sample_work, sample_done, b);
}

int usage_start(struct server *s, struct kn_error *err)
{
	struct usage_state *u;
	bool real_gpus = false;

	(void)err;
	if (s->cfg.usage_interval_ms <= 0 || s->exec->ops->limits)
		return 0;
	u = kn_xcalloc(1, sizeof(*u));
	for (size_t i = 0; i < s->cluster.n_nodes; i++)
		real_gpus = real_gpus || (!s->nodes[i].devices.simulated &&
					  s->nodes[i].devices.n > 0);
	if (real_gpus) {
		struct kn_error nv_err;

		/* Without NVML tasks still get CPU and memory samples. */
		if (kn_nvml_open(&u->nvml, &nv_err) < 0)
			kn_log(KN_LOG_WARN,
			       "usage sampling: no per-task GPU figures: %s",
			       nv_err.message);
	}
	u->timer = kn_timer_new(s->loop, usage_tick, s);
	s->usage = u;
	arm(s);
	return 0;
}

void usage_free(struct server *s)
{
	struct usage_state *u = s->usage;

	if (!u)
		return;
	kn_timer_free(u->timer);
	kn_nvml_close(u->nvml);
	KN_FREE_ALL(u->marks, u);
	s->usage = NULL;
}
