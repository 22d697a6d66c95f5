/*
 * The Slurm executor's view of the cluster: `sinfo --json` and `scontrol
 * show partition -o`, read again and again without the server waiting.
 *
 * As with sbatch and scontrol for a job (slurm.c), both commands run as
 * detached children writing into files of the state directory (the
 * server's HOME/slurm), and each call looks at whether they are over:
 *
 *   sinfo.json, sinfo.err            the nodes
 *   partitions.txt, partitions.err   the partitions' limits
 *   update.err                       what the last scontrol update said
 *
 * A reading is due READ_MIN_MS after the last one while the cluster
 * changes, and the wait doubles (to READ_MAX_MS) while it does not or
 * while the commands fail; a refresh (a job started or ended, a node
 * drained) makes one due at once. A command still running after
 * READ_TIMEOUT_MS is killed and the reading counts as failed. Cordon,
 * drain and uncordon are `scontrol update NodeName=... State=DRAIN|RESUME
 * Reason=...`, run the same way.
 */
#include "exec.h"
#include "internal.h"
#include "spec/spec.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define READ_MIN_MS 2000
#define READ_MAX_MS 30000
#define READ_TIMEOUT_MS 30000
/* What sinfo --json may print: 100000 nodes of ~1.6 KB. */
#define SINFO_MAX (256 * 1024 * 1024)
#define PARTITIONS_TEXT_MAX (16 * 1024 * 1024)
/* A failing reading is logged this often at most. */
#define WARN_EVERY_MS 60000

struct slurm_poll {
	char *dir;
	struct kn_task_proc child[2]; /* sinfo, scontrol; pid 0: none */
	bool reading;
	int64_t started_ms, next_ms, wait_ms, warned_ms;
	struct kn_slurm_inventory inv;  /* the last good reading */
	bool have;                      /* inv holds one */
	bool unseen;                    /* inv not yet returned */
};

struct slurm_poll *slurm_poll_new(const char *dir)
{
	struct slurm_poll *p = kn_xcalloc(1, sizeof(*p));

	p->dir = kn_xstrdup(dir);
	p->wait_ms = READ_MIN_MS;
	return p;
}

/*
 * Whether a command is still at work: alive and not a zombie. Before the
 * loop runs (the first reading at start-up) nobody reaps it, and the
 * server's SIGCHLD handler does once the loop is up.
 */
static bool child_running(const struct kn_task_proc *c)
{
	char path[64], *text = NULL, *paren;
	bool zombie = false;

	if (!exec_proc_alive(c))
		return false;
	snprintf(path, sizeof(path), "/proc/%d/stat", c->pid);
	if (kn_read_file(path, 4096, &text, NULL) == 0 &&
	    (paren = strrchr(text, ')')) != NULL)
		zombie = paren[1] == ' ' && paren[2] == 'Z';
	free(text);
	return !zombie;
}

static void children_kill(struct slurm_poll *p)
{
	for (int i = 0; i < 2; i++)
		if (p->child[i].pid > 0 && child_running(&p->child[i]))
			kill(p->child[i].pid, SIGKILL);
}

void slurm_poll_free(struct slurm_poll *p)
{
	if (!p)
		return;
	children_kill(p);
	kn_slurm_inventory_release(&p->inv);
	KN_FREE_ALL(p->dir, p);
}

static char *state_path(const struct slurm_poll *p, const char *name)
{
	return kn_asprintf("%s/%s", p->dir, name);
}

static int reading_start(struct slurm_poll *p, struct kn_error *err)
{
	char *sinfo[] = {"sinfo", "--json", NULL};
	char *parts[] = {"scontrol", "show", "partition", "-o", NULL};
	char *out = state_path(p, "sinfo.json"), *errp = state_path(p, "sinfo.err");
	int rc = kn_mkdir_p(p->dir, 0700);

	memset(p->child, 0, sizeof(p->child));
	if (rc < 0)
		rc = kn_errorf(err, KN_EIO, NULL, "cannot create %s: %s",
			       p->dir, strerror(-rc));
	if (rc == 0)
		rc = exec_slurm_spawn(sinfo, NULL, out, errp, &p->child[0], err);
	KN_FREE_ALL(out, errp);
	out = state_path(p, "partitions.txt");
	errp = state_path(p, "partitions.err");
	if (rc == 0)
		rc = exec_slurm_spawn(parts, NULL, out, errp, &p->child[1], err);
	KN_FREE_ALL(out, errp);
	if (rc < 0) {
		children_kill(p);
		return rc;
	}
	p->reading = true;
	p->started_ms = kn_mono_ms();
	return 0;
}

/* "sinfo: error: ..." from a command's stderr file, for a failure. */
static void first_line(const struct slurm_poll *p, const char *name,
		       char *out, size_t len)
{
	char *path = state_path(p, name), *text = NULL;

	out[0] = '\0';
	if (kn_read_file(path, 4096, &text, NULL) == 0) {
		text[strcspn(text, "\n")] = '\0';
		kn_strlcpy(out, text, len);
	}
	KN_FREE_ALL(text, path);
}

static bool same(const struct kn_slurm_inventory *a,
		 const struct kn_slurm_inventory *b)
{
	return a->n_nodes == b->n_nodes && a->n_partitions == b->n_partitions &&
	       !memcmp(a->nodes, b->nodes, a->n_nodes * sizeof(*a->nodes)) &&
	       !memcmp(a->partitions, b->partitions,
		       a->n_partitions * sizeof(*a->partitions));
}

/* Both commands are over: take in what they wrote. */
static int reading_finish(struct slurm_poll *p, struct kn_error *err)
{
	struct kn_slurm_inventory fresh = {0};
	char *path = state_path(p, "sinfo.json"), *text = NULL, why[256];
	size_t len = 0;
	int rc = kn_read_file(path, SINFO_MAX, &text, &len);

	p->reading = false;
	free(path);
	if (rc == 0 && len > 0)
		rc = kn_slurm_nodes_parse(text, len, &fresh, err);
	else {
		first_line(p, "sinfo.err", why, sizeof(why));
		rc = kn_errorf(err, KN_EIO, NULL, "sinfo --json: %s",
			       why[0] ? why : "no answer");
	}
	free(text);
	text = NULL;
	path = state_path(p, "partitions.txt");
	if (rc == 0 && kn_read_file(path, PARTITIONS_TEXT_MAX, &text, &len) == 0)
		rc = kn_slurm_partitions_parse(text, len, &fresh, err);
	KN_FREE_ALL(text, path);
	if (rc < 0) {
		kn_slurm_inventory_release(&fresh);
		return rc;
	}
	if (p->have && same(&fresh, &p->inv)) {
		kn_slurm_inventory_release(&fresh);
		return 0;
	}
	kn_slurm_inventory_release(&p->inv);
	p->inv = fresh;
	p->have = p->unseen = true;
	return 1;
}

/* Advance the readings; 1 when a new inventory came in. */
static int poll_step(struct slurm_poll *p, bool refresh)
{
	int64_t now = kn_mono_ms();
	struct kn_error err;
	int rc = 0;

	if (refresh) {
		p->next_ms = now;
		p->wait_ms = READ_MIN_MS;
	}
	if (p->reading) {
		bool alive = child_running(&p->child[0]) ||
			     child_running(&p->child[1]);

		if (alive && now - p->started_ms < READ_TIMEOUT_MS)
			return 0;
		if (alive) {
			children_kill(p);
			p->reading = false;
			rc = kn_errorf(&err, KN_EIO, NULL, "sinfo and scontrol "
				       "took more than %d s", READ_TIMEOUT_MS /
				       1000);
		} else {
			rc = reading_finish(p, &err);
		}
		/* A change: soon again; none, or a failure: less often. */
		p->wait_ms = rc > 0 ? READ_MIN_MS
				    : p->wait_ms * 2 > READ_MAX_MS ? READ_MAX_MS
								 : p->wait_ms * 2;
		if (p->next_ms <= p->started_ms)
			p->next_ms = now + p->wait_ms;
		if (rc < 0 && (!p->warned_ms || now - p->warned_ms >=
						      WARN_EVERY_MS)) {
			p->warned_ms = now;
			kn_log(KN_LOG_WARN, "slurm: cannot read the cluster's "
			       "nodes: %s", err.message);
		}
	}
	if (!p->reading && now >= p->next_ms) {
		if (reading_start(p, &err) < 0) {
			p->next_ms = now + READ_MAX_MS;
			kn_log(KN_LOG_WARN, "slurm: %s", err.message);
		}
	}
	return rc > 0;
}

const struct kn_slurm_inventory *slurm_inventory(struct kn_executor *ex,
						 bool refresh)
{
	struct slurm_exec *se = ex->impl;

	if (!se->poll)
		return NULL;
	poll_step(se->poll, refresh);
	if (!se->poll->unseen)
		return NULL;
	se->poll->unseen = false;
	return &se->poll->inv;
}

int slurm_admit(struct kn_executor *ex, const struct kn_job_spec *spec,
		struct kn_error *err)
{
	struct slurm_exec *se = ex->impl;
	struct kn_task_launch l = {.spec = spec, .ntasks = spec->tasks};
	struct kn_slurm_task t;
	char partition[128], why[768];
	int rc;

	if (!se->poll || !se->poll->have)
		return 0;
	kn_slurm_task_fill(&se->cfg, &l, &t, partition, sizeof(partition));
	rc = kn_slurm_admit(&se->poll->inv, &t, spec->timeout_ms, why,
			    sizeof(why));
	if (rc == 0)
		return 0;
	return kn_errorf(err, KN_ECONFLICT, "resources", "%s", why);
}

int slurm_set_node(struct kn_executor *ex, const char *name, bool drain,
		   const char *reason, struct kn_error *err)
{
	struct slurm_exec *se = ex->impl;
	char *node = kn_asprintf("NodeName=%s", name);
	char *why = kn_asprintf("Reason=%.180s", reason && *reason ? reason
								  : "kiln");
	char *argv[] = {"scontrol", "update", node,
			drain ? "State=DRAIN" : "State=RESUME",
			drain ? why : NULL, NULL};
	char *errp = se->poll ? state_path(se->poll, "update.err") : NULL;
	struct kn_task_proc child;
	int rc = exec_slurm_spawn(argv, NULL, errp, errp, &child, err);

	if (rc == 0 && se->poll)
		se->poll->next_ms = kn_mono_ms() + 500;
	KN_FREE_ALL(errp, why, node);
	return rc;
}
