/*
 * GET /metrics: the control plane's own numbers in Prometheus text
 * format (docs/metrics.md lists every series).
 *
 * Two kinds of series. What the server already knows at any moment (the
 * queue, the nodes and their devices, jobs by state and goodput from the
 * store) is read when scraped, so nothing is kept twice; the store's part
 * off the loop (totals_work). What happens
 * between scrapes (placements, queue waits, checkpoint syncs, store
 * commits) is counted here as it happens, in histograms and counters
 * under one mutex: the job core calls the metrics_* functions below, the
 * store calls back after every commit.
 *
 * The route wants a token of any role, like every other read of the API:
 * the series name nodes, priorities and how busy the cluster is. A
 * separate unauthenticated listener was rejected: one more port to
 * firewall, and a scraper can send a bearer token (credentials_file).
 */
#include "internal.h"
#include "service.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "telemetry/telemetry.h"

/* Distinct priorities tracked one by one; the rest share "other". */
#define PRIORITIES_MAX 32

/* Seconds the scheduler takes to decide one job's placement. */
static const double DECIDE_BOUNDS[] = {0.0001, 0.00025, 0.0005, 0.001,
				       0.0025, 0.005,   0.01,   0.025,
				       0.05,   0.1,     0.25,   1};
/* Seconds from submission to placement. */
static const double WAIT_BOUNDS[] = {0.1, 0.5, 1,    5,    15,    30,  60,
				     300, 900, 1800, 3600, 10800, 43200, 86400};
/* Seconds one checkpoint's upload takes. */
static const double SYNC_BOUNDS[] = {0.1, 0.25, 0.5, 1,   2.5, 5,   10,
				     30,  60,   120, 300, 600, 1800};
/* Seconds one store COMMIT takes (its fsync). */
static const double COMMIT_BOUNDS[] = {0.0001, 0.00025, 0.0005, 0.001,
				       0.0025, 0.005,   0.01,   0.025,
				       0.05,   0.1,     0.25,   0.5,   1};

struct priority_slot {
	char label[16]; /* "0".."1000", or "other" */
	struct kn_prom_histogram wait;
};

struct server_metrics {
	pthread_mutex_t lock;
	struct kn_prom_histogram decide;
	uint64_t placed, unplaced;
	/* Every priority a job has been queued or placed at, kept so its
	   series stay (at 0) when its queue empties. */
	struct priority_slot prio[PRIORITIES_MAX + 1];
	size_t n_prio;
	struct kn_prom_histogram sync;
	uint64_t sync_bytes, sync_failures;
	struct kn_prom_histogram commit;
	/* The read-only connection scrapes read the store's totals through,
	   opened by the first, used by one worker at a time. */
	pthread_mutex_t reader_lock;
	struct kn_store *reader;
};

/* The slot of priority p; the lock is held. */
static struct priority_slot *prio_slot(struct server_metrics *m, int p)
{
	char label[16];

	snprintf(label, sizeof(label), "%d", p);
	for (size_t i = 0; i < m->n_prio; i++)
		if (!strcmp(m->prio[i].label, label))
			return &m->prio[i];
	if (m->n_prio == PRIORITIES_MAX) {
		struct priority_slot *other = &m->prio[PRIORITIES_MAX];
		if (!other->label[0]) {
			kn_strlcpy(other->label, "other", sizeof(other->label));
			kn_prom_histogram_init(&other->wait, WAIT_BOUNDS,
					       KN_LEN(WAIT_BOUNDS));
		}
		return other;
	}
	kn_strlcpy(m->prio[m->n_prio].label, label, sizeof(label));
	kn_prom_histogram_init(&m->prio[m->n_prio].wait, WAIT_BOUNDS,
			       KN_LEN(WAIT_BOUNDS));
	return &m->prio[m->n_prio++];
}

static void on_commit(void *arg, double seconds)
{
	struct server_metrics *m = arg;

	pthread_mutex_lock(&m->lock);
	kn_prom_histogram_observe(&m->commit, seconds);
	pthread_mutex_unlock(&m->lock);
}

double metrics_clock(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

void metrics_placement_decided(struct server *s, double seconds, bool placed)
{
	struct server_metrics *m = s->metrics;

	if (!m)
		return;
	pthread_mutex_lock(&m->lock);
	kn_prom_histogram_observe(&m->decide, seconds);
	if (placed)
		m->placed++;
	else
		m->unplaced++;
	pthread_mutex_unlock(&m->lock);
}

void metrics_job_placed(struct server *s, int priority, int64_t waited_ms)
{
	struct server_metrics *m = s->metrics;

	if (!m)
		return;
	pthread_mutex_lock(&m->lock);
	kn_prom_histogram_observe(&prio_slot(m, priority)->wait,
				  waited_ms > 0 ? (double)waited_ms / 1000.0
						: 0);
	pthread_mutex_unlock(&m->lock);
}

void metrics_checkpoint_synced(struct server *s, bool ok, int64_t bytes,
			       int64_t took_ms)
{
	struct server_metrics *m = s->metrics;

	if (!m)
		return;
	pthread_mutex_lock(&m->lock);
	if (ok) {
		kn_prom_histogram_observe(&m->sync, (double)took_ms / 1000.0);
		m->sync_bytes += bytes > 0 ? (uint64_t)bytes : 0;
	} else {
		m->sync_failures++;
	}
	pthread_mutex_unlock(&m->lock);
}

/* ---- the scrape ---- */

/* A family of one unlabelled sample. */
static int one(struct kn_buf *out, const char *name, const char *type,
	       const char *help, double v)
{
	int rc = kn_prom_family(out, name, type, help);

	return rc < 0 ? rc : kn_prom_sample(out, name, NULL, v);
}

/* A family of one unlabelled histogram. */
static int histogram(struct kn_buf *out, const char *name, const char *help,
		     const struct kn_prom_histogram *h)
{
	int rc = kn_prom_family(out, name, "histogram", help);

	return rc < 0 ? rc : kn_prom_histogram_write(out, name, NULL, h);
}

/* Queue length, oldest wait and wait histogram by priority. */
static int write_queue(struct server *s, struct server_metrics *m,
		       struct kn_buf *out)
{
	static const struct {
		const char *name, *type, *help;
	} fam[] = {
		{"kiln_queue_jobs", "gauge",
		 "Jobs waiting in the queue, by priority."},
		{"kiln_queue_oldest_wait_seconds", "gauge",
		 "How long the oldest queued job of each priority has waited "
		 "since submission (0: none waits)."},
		{"kiln_queue_wait_seconds", "histogram",
		 "Time from a job's submission to each placement of it, by "
		 "priority."},
	};
	int64_t now = kn_now_ms();
	double jobs[PRIORITIES_MAX + 1] = {0}, oldest[PRIORITIES_MAX + 1] = {0};
	size_t n;
	int rc;

	for (const struct queued_job *q = s->queue; q; q = q->next) {
		size_t i = (size_t)(prio_slot(m, q->priority) - m->prio);
		double waited = (double)(now - q->submitted_at) / 1000.0;
		jobs[i]++;
		if (waited > oldest[i])
			oldest[i] = waited;
	}
	n = m->n_prio + (m->prio[PRIORITIES_MAX].label[0] ? 1 : 0);
	for (size_t f = 0; f < KN_LEN(fam); f++) {
		if ((rc = kn_prom_family(out, fam[f].name, fam[f].type,
				 fam[f].help)) < 0)
			return rc;
		for (size_t k = 0; k < n; k++) {
			size_t i = k < m->n_prio ? k : PRIORITIES_MAX;
			const char *l[] = {"priority", m->prio[i].label, NULL};
			rc = f == 2 ? kn_prom_histogram_write(out, fam[f].name, l,
							      &m->prio[i].wait)
				    : kn_prom_sample(out, fam[f].name, l,
						     f == 0 ? jobs[i]
							    : oldest[i]);
			if (rc < 0)
				return rc;
		}
	}
	return 0;
}

static int write_jobs(const struct kn_job_totals *t, struct kn_buf *out,
		      struct kn_error *err)
{
	int rc;

	if ((rc = kn_prom_family(out, "kiln_jobs", "gauge",
			 "Jobs in the store, by state.")) < 0)
		goto full;
	for (int st = KN_JOB_QUEUED; st <= KN_JOB_PREEMPTED; st++) {
		const char *l[] = {"state", kn_job_state_name(st), NULL};
		if ((rc = kn_prom_sample(out, "kiln_jobs", l,
					 (double)t->by_state[st])) < 0)
			goto full;
	}
	if ((rc = one(out, "kiln_goodput_useful_task_seconds_total", "counter",
		      "Task-seconds of ended attempts that were kept: "
		      "checkpointed or finished.",
		      (double)t->useful_ms / 1000.0)) < 0 ||
	    (rc = one(out, "kiln_goodput_lost_task_seconds_total", "counter",
		      "Task-seconds of ended attempts that were lost: run "
		      "after the last checkpoint of a failed or preempted "
		      "attempt.",
		      (double)t->lost_ms / 1000.0)) < 0)
		goto full;
	return 0;
full:
	return kn_errorf(err, KN_ETOOBIG, NULL, "metrics exceed %d bytes",
			 KN_PROM_MAX_BYTES);
}

/* One device's allocated share, 0..1. */
static double device_allocated(const struct kn_sched_device *d)
{
	int used = 0;

	if (!d->mig)
		return d->used_milli / 1000.0;
	for (int k = 0; k < d->n_mig_slices; k++)
		used += d->mig_slices[k].profile->compute;
	return d->mig->compute > 0 ? (double)used / d->mig->compute : 0;
}

/* The per-node families, in the order they are written. */
enum node_family {
	NODE_STATE,
	NODE_GPUS,
	NODE_ALLOCATED,
	NODE_DEVICE,
	NODE_FRAGMENTATION,
};

static int write_node(struct server *s, size_t i, struct kn_buf *out,
		      enum node_family what)
{
	static const char *const states[] = {"ready", "cordoned", "draining",
					     "unhealthy"};
	const struct kn_sched_node *sn = &s->cluster.nodes[i];
	const char *node = s->nodes[i].name;
	double allocated = 0;
	int rc = 0;

	for (size_t d = 0; d < sn->n_devices; d++)
		allocated += device_allocated(&sn->devices[d]);
	if (what == NODE_STATE) {
		for (size_t k = 0; rc == 0 && k < KN_LEN(states); k++) {
			const char *l[] = {"node", node, "state", states[k],
					   NULL};
			rc = kn_prom_sample(out, "kiln_node_state", l,
					    !strcmp(s->nodes[i].state,
						    states[k]));
		}
	} else if (what == NODE_GPUS) {
		const char *l[] = {"node", node, NULL};
		rc = kn_prom_sample(out, "kiln_node_gpus", l,
				    (double)sn->n_devices);
	} else if (what == NODE_ALLOCATED) {
		const char *l[] = {"node", node, NULL};
		rc = kn_prom_sample(out, "kiln_node_gpus_allocated", l,
				    allocated);
	} else if (what == NODE_DEVICE) {
		for (size_t d = 0; rc == 0 && d < sn->n_devices; d++) {
			char gpu[16];
			snprintf(gpu, sizeof(gpu), "%d", sn->devices[d].index);
			const char *l[] = {"node", node, "gpu", gpu, NULL};
			rc = kn_prom_sample(out, "kiln_gpu_allocated_ratio", l,
					    device_allocated(&sn->devices[d]));
		}
	} else {
		json_t *frag = nodes_fragmentation(s, i);
		json_t *milli = json_object_get(frag, "milli");
		const char *l[] = {"node", node, NULL};
		if (json_is_number(milli))
			rc = kn_prom_sample(out, "kiln_node_gpu_fragmentation",
					    l, json_number_value(milli) / 1000.0);
		json_decref(frag);
	}
	return rc;
}

static int write_nodes(struct server *s, struct kn_buf *out)
{
	static const struct {
		enum node_family what;
		const char *name, *help;
	} fam[] = {
		{NODE_STATE, "kiln_node_state",
		 "1 for the node's state (ready, cordoned, draining, "
		 "unhealthy), 0 for the others."},
		{NODE_GPUS, "kiln_node_gpus", "GPUs the node has."},
		{NODE_ALLOCATED, "kiln_node_gpus_allocated",
		 "GPUs allocated to tasks on the node (fractions for shared "
		 "GPUs and MIG slices)."},
		{NODE_DEVICE, "kiln_gpu_allocated_ratio",
		 "Share of each GPU allocated to tasks, 0 to 1."},
		{NODE_FRAGMENTATION, "kiln_node_gpu_fragmentation",
		 "GPUs of the node's free capacity that a job shaped like "
		 "this server's GPU jobs could not use (no series before any "
		 "GPU job ran)."},
	};
	int rc;

	for (size_t f = 0; f < KN_LEN(fam); f++) {
		if ((rc = kn_prom_family(out, fam[f].name, "gauge", fam[f].help)) < 0)
			return rc;
		for (size_t i = 0; i < s->cluster.n_nodes; i++)
			if ((rc = write_node(s, i, out, fam[f].what)) < 0)
				return rc;
	}
	return 0;
}

/* What was counted between scrapes, besides the queue's. */
static int write_counted(struct server_metrics *m, struct kn_buf *out)
{
	const char *placed[] = {"outcome", "placed", NULL};
	const char *unplaced[] = {"outcome", "unplaced", NULL};
	int rc;

	if ((rc = kn_prom_family(out, "kiln_scheduler_placements_total", "counter",
			 "Placement decisions: a queued job placed, or "
			 "finding no room this turn.")) < 0 ||
	    (rc = kn_prom_sample(out, "kiln_scheduler_placements_total",
				 placed, (double)m->placed)) < 0 ||
	    (rc = kn_prom_sample(out, "kiln_scheduler_placements_total",
				 unplaced, (double)m->unplaced)) < 0 ||
	    (rc = histogram(out, "kiln_scheduler_placement_duration_seconds",
			    "Time the scheduler took to decide one job's "
			    "placement.",
			    &m->decide)) < 0 ||
	    (rc = histogram(out, "kiln_checkpoint_sync_duration_seconds",
			    "Time to upload one committed checkpoint to its "
			    "store.",
			    &m->sync)) < 0 ||
	    (rc = one(out, "kiln_checkpoint_sync_bytes_total", "counter",
		      "Bytes of the checkpoints synced to their stores.",
		      (double)m->sync_bytes)) < 0 ||
	    (rc = one(out, "kiln_checkpoint_sync_failures_total", "counter",
		      "Checkpoint uploads that failed.",
		      (double)m->sync_failures)) < 0 ||
	    (rc = histogram(out, "kiln_store_commit_duration_seconds",
			    "Time one store transaction's commit took (its "
			    "fsync).",
			    &m->commit)) < 0)
		return rc;
	return 0;
}

static int scrape(struct server *s, const struct kn_job_totals *totals,
		  struct kn_buf *out, struct kn_error *err)
{
	struct server_metrics *m = s->metrics;
	const char *version[] = {"version", KN_VERSION, NULL};
	int rc;

	if ((rc = kn_prom_family(out, "kiln_build_info", "gauge",
			 "1, labelled with the server's version.")) < 0 ||
	    (rc = kn_prom_sample(out, "kiln_build_info", version, 1)) < 0)
		goto full;
	if ((rc = write_jobs(totals, out, err)) < 0)
		return rc;
	if (write_nodes(s, out) < 0)
		goto full;
	pthread_mutex_lock(&m->lock);
	rc = write_queue(s, m, out);
	if (rc == 0)
		rc = write_counted(m, out);
	pthread_mutex_unlock(&m->lock);
	if (rc < 0)
		goto full;
	return 0;
full:
	return kn_errorf(err, KN_ETOOBIG, NULL, "metrics exceed %d bytes",
			 KN_PROM_MAX_BYTES);
}

/*
 * The store's totals scan every job and attempt (some 40 ms at 100,000
 * jobs): they are read on a request worker over a read-only connection
 * (WAL: one consistent moment while the loop writes), and the rest of
 * the scrape is written on the loop when they are in.
 */
struct scrape_work {
	struct server *s;
	struct server_metrics *m;
	struct kn_http_req *req;
	char *db_path;
	struct kn_job_totals totals;
	int rc;
	struct kn_error err;
};

static void totals_work(void *arg)
{
	struct scrape_work *w = arg;
	struct server_metrics *m = w->m;

	pthread_mutex_lock(&m->reader_lock);
	w->rc = m->reader ? 0
			  : kn_store_open_reader(w->db_path, &m->reader,
						 &w->err);
	if (w->rc == 0)
		w->rc = kn_store_job_totals(m->reader, &w->totals, &w->err);
	pthread_mutex_unlock(&m->reader_lock);
}

static void totals_done(void *arg, bool ran)
{
	struct scrape_work *w = arg;
	struct kn_buf out;

	kn_buf_init(&out, KN_PROM_MAX_BYTES);
	if (!ran || !w->s->metrics)
		kn_errorf(&w->err, KN_EUNAVAIL, NULL,
			  "the server stopped before the scrape ran");
	if (!ran || !w->s->metrics || w->rc < 0 ||
	    scrape(w->s, &w->totals, &out, &w->err) < 0)
		kn_http_reply_error(w->req, &w->err);
	else
		kn_http_reply_text(w->req, 200, KN_PROM_CONTENT_TYPE, out.data,
				   out.len);
	kn_buf_release(&out);
	KN_FREE_ALL(w->db_path, w);
}

static void h_metrics(struct server *s, struct kn_http_req *req,
		      const struct caller *c, const char *param)
{
	struct scrape_work *w = kn_xcalloc(1, sizeof(*w));

	(void)c;
	(void)param;
	w->s = s;
	w->m = s->metrics;
	w->req = req;
	w->db_path = kn_asprintf("%s/kiln.db", s->home);
	kn_workers_submit(s->request_workers, totals_work, totals_done, w);
}

static int metrics_start(struct server *s, struct kn_error *err)
{
	struct server_metrics *m = kn_xcalloc(1, sizeof(*m));

	(void)err;
	pthread_mutex_init(&m->lock, NULL);
	pthread_mutex_init(&m->reader_lock, NULL);
	kn_prom_histogram_init(&m->decide, DECIDE_BOUNDS, KN_LEN(DECIDE_BOUNDS));
	kn_prom_histogram_init(&m->sync, SYNC_BOUNDS, KN_LEN(SYNC_BOUNDS));
	kn_prom_histogram_init(&m->commit, COMMIT_BOUNDS, KN_LEN(COMMIT_BOUNDS));
	s->metrics = m;
	kn_store_on_commit(s->store, on_commit, m);
	return 0;
}

static void metrics_stop(struct server *s)
{
	struct server_metrics *m = s->metrics;

	if (!m)
		return;
	if (s->store)
		kn_store_on_commit(s->store, NULL, NULL);
	s->metrics = NULL;
	kn_store_free(m->reader);
	pthread_mutex_destroy(&m->reader_lock);
	pthread_mutex_destroy(&m->lock);
	free(m);
}

static const struct route metrics_routes[] = {
	{"GET", "/metrics", KN_ROLE_VIEWER, false, NULL, h_metrics},
	{0},
};

const struct service metrics_service = {
	.name = "metrics",
	.phase = SERVICE_PHASE_NODES,
	.start = metrics_start,
	.stop = metrics_stop,
	.routes = metrics_routes,
};
