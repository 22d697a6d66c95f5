/*
 * Job arrays under the Slurm executor: the elements the server starts
 * together go to Slurm as one `sbatch --array=LIST%P`, so Slurm holds
 * them as one array job (one submission, one record, its own %P
 * throttle) rather than as one job each. Each element is still a kiln
 * job with its own attempts, task directories, logs and checkpoints; its
 * attempt is what Slurm calls element JOBID_INDEX.
 *
 * start writes each element's launch.json as for any attempt and keeps
 * the element in a batch of its array; flush, which the server calls
 * after its starts, submits each batch. A batch has a directory of its
 * own, beside the array's first element's attempts:
 *
 *   TASKS/ARRAY/slurm-array-JOB-ATTEMPT/    the server's, mode 0711
 *     slurm.sh        the batch step: its attempt directory by index
 *     e/INDEX         that element's attempt directory (read by the step)
 *     sbatch.pid|out|err, squeue.pid, squeue.out   as for one attempt
 *     out/            the task user's: slurm-%A_%a.out of each element
 *
 * and each element's attempt gets ATTEMPT_DIR.slurm-array beside it (in
 * the job's directory, the server's, where the task cannot write):
 * "BATCH_DIR\nINDEX\n". A retry of one element is a batch of one: a new
 * `sbatch --array=INDEX`, so SLURM_ARRAY_TASK_ID stays the element's.
 *
 * State: the shim's status.json first, as for any attempt. Before it,
 * one squeue for the whole batch (slurm_elements.c), at most once a
 * second whatever the number of elements, parsed once per answer and
 * looked up per element by bisection. An element over in Slurm, or one
 * two answers in a row leave out while listing its array (Slurm purged
 * it), with no status.json ended without the shim's record, as a single
 * job Slurm has forgotten does. A stop writes stop.json (the shim
 * signals its task) and keeps the element in a list that each new answer
 * goes through: cancelled while pending, outright if it runs well past
 * its grace; the cancels of a flush go as one scancel of many
 * JOBID_INDEX. Rejected:
 * one sbatch per element (ten thousand submissions to slurmctld, and the
 * array's throttle kept by kiln), and asking scontrol per element (one
 * child per element a second, each answer thirty times longer).
 */
#include "exec.h"
#include "internal.h"
#include "spec/spec.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Beside an element's attempt directory: its batch and index. */
#define POINTER_SUFFIX ".slurm-array"
#define POINTER_MAX 4096
/* squeue's answer for the largest array Slurm allows, 4,000,001
   elements, would not fit; this holds some 100,000 (MaxArraySize). */
#define ELEMENTS_ANSWER_MAX (8 * 1024 * 1024)
/* JOBID_INDEX arguments per scancel: within any argv limit. */
#define SCANCEL_IDS_MAX 512
/* Parsed answers kept: one per batch in flight, the oldest dropped. */
#define ANSWERS_KEPT 64
/* After a stop's grace, how long the shim has to end the task itself. */
#define STOP_BACKSTOP_MS 10000
/* The grace assumed of a stop that takes the launch's own. */
#define STOP_GRACE_DEFAULT_MS 60000
/* How often one array's squeue answer is looked at, by all elements. */
#define ANSWER_INTERVAL_MS 1000

struct batch {
	char *dir;
	struct kn_slurm_task t;       /* its strings are the batch's own: */
	char *partition, *mig_profile, *image, *job_name, *list;
	int64_t timeout_ms;
	int64_t array_id;
	int parallel;
	char **env;                   /* NULL-terminated */
	int *indexes;
	char **attempt_dirs;
	size_t n;
	struct batch *next;
};

struct answer {
	char *dir;
	int64_t at_ms;    /* the answer's time */
	int64_t read_ms;  /* when it was last looked for (monotonic) */
	struct kn_slurm_elements e;
	/* The indexes the answer before listed, sorted; none when it listed
	   no element of the array (or there was none). */
	int *prev_indexes;
	size_t n_prev;
	bool prev_listed;
};

/* An element asked to stop, until Slurm no longer runs it: each new
   answer cancels it while it is pending, and outright once the stop's
   grace and STOP_BACKSTOP_MS have passed (a node whose shim cannot act). */
struct stopping {
	char *dir;
	int index;
	int64_t deadline_ms; /* monotonic */
	struct stopping *next;
};

struct slurm_batches {
	struct batch *pending;
	struct answer answers[ANSWERS_KEPT];
	size_t next_answer;
	char **cancel; /* JOBID_INDEX to cancel while pending */
	size_t n_cancel;
	char **kill;   /* ... and outright (a stop's backstop) */
	size_t n_kill;
	struct stopping *stopping;
};

struct slurm_batches *slurm_batches_new(void)
{
	return kn_xcalloc(1, sizeof(struct slurm_batches));
}

static void batch_free(struct batch *b)
{
	if (!b)
		return;
	kn_strv_free(b->env);
	kn_strv_free_n(b->attempt_dirs, b->n);
	KN_FREE_ALL(b->indexes, b->dir, b->partition, b->mig_profile, b->image,
		    b->job_name, b->list, b);
}

void slurm_batches_free(struct slurm_batches *bs)
{
	if (!bs)
		return;
	while (bs->pending) {
		struct batch *b = bs->pending;

		bs->pending = b->next;
		batch_free(b);
	}
	for (size_t i = 0; i < ANSWERS_KEPT; i++) {
		KN_FREE_ALL(bs->answers[i].dir, bs->answers[i].prev_indexes);
		kn_slurm_elements_release(&bs->answers[i].e);
	}
	kn_strv_free_n(bs->cancel, bs->n_cancel);
	kn_strv_free_n(bs->kill, bs->n_kill);
	while (bs->stopping) {
		struct stopping *st = bs->stopping;

		bs->stopping = st->next;
		KN_FREE_ALL(st->dir, st);
	}
	free(bs);
}

/* "A/7/2/0" -> "A/7/2" (n = 1) or "A/7" (n = 2): a path's n-th parent. */
static char *parent_of(const char *path, int n)
{
	char *d = kn_xstrdup(path);

	while (n-- > 0) {
		char *slash = strrchr(d, '/');

		if (!slash || slash == d) {
			free(d);
			return kn_xstrdup("/");
		}
		*slash = '\0';
	}
	return d;
}

/* The pointer file of the attempt of task_dir: its directory and name. */
static void pointer_place(const char *task_dir, char **dir, char **name)
{
	char *attempt = parent_of(task_dir, 1);
	const char *slash = strrchr(attempt, '/');

	*dir = parent_of(attempt, 1);
	*name = kn_asprintf("%s" POINTER_SUFFIX, slash ? slash + 1 : attempt);
	free(attempt);
}

/*
 * The element's batch directory and index from its pointer, which must
 * be a regular file the server owns in the job's directory: 0, -ENOENT
 * when the attempt is no array element's, or another -errno.
 */
static int pointer_read(const char *task_dir, char **batch_dir, int *index)
{
	char *dir, *name, *text = NULL, *nl;
	struct kn_error err;
	int64_t v;
	int fd, rc;

	pointer_place(task_dir, &dir, &name);
	fd = kn_task_file_open(dir, name, O_RDONLY, geteuid(), &err);
	rc = fd < 0 ? fd : kn_read_fd(fd, POINTER_MAX, &text, NULL);
	if (fd >= 0)
		close(fd);
	if (rc == 0) {
		nl = strchr(text, '\n');
		if (!nl || !exec_slurm_count(nl + 1, strcspn(nl + 1, "\n"),
					     INT32_MAX, &v) ||
		    text[0] != '/') {
			rc = -EINVAL;
		} else {
			*nl = '\0';
			*batch_dir = kn_xstrdup(text);
			*index = (int)v;
		}
	}
	KN_FREE_ALL(text, dir, name);
	return rc;
}

bool slurm_array_element(const char *task_dir)
{
	char *dir, *name, *path;
	bool is;

	pointer_place(task_dir, &dir, &name);
	path = kn_asprintf("%s/%s", dir, name);
	is = access(path, F_OK) == 0;
	KN_FREE_ALL(path, dir, name);
	return is;
}

static char *dup_or_null(const char *s)
{
	return s ? kn_xstrdup(s) : NULL;
}

/* A new batch for l's array under t, its directory named for l. */
static struct batch *batch_new(const struct kn_task_launch *l,
			       const struct kn_slurm_task *t,
			       const char *const *env)
{
	struct batch *b = kn_xcalloc(1, sizeof(*b));
	char *attempt = parent_of(l->task_dir, 1);
	char *tasks_root = parent_of(attempt, 2);
	size_t n_env = 0;

	b->array_id = l->spec->array.job_id;
	b->parallel = l->spec->array.parallel;
	b->timeout_ms = l->timeout_ms;
	b->dir = kn_asprintf("%s/%lld/slurm-array-%lld-%d", tasks_root,
			     (long long)b->array_id, (long long)l->job_id,
			     l->attempt);
	b->t = *t;
	b->t.partition = b->partition = dup_or_null(t->partition);
	b->t.mig_profile = b->mig_profile = dup_or_null(t->mig_profile);
	b->t.image = b->image = dup_or_null(t->image);
	b->t.job_name = b->job_name = dup_or_null(t->job_name);
	while (env[n_env])
		n_env++;
	b->env = kn_xcalloc(n_env + 2, sizeof(*b->env));
	for (size_t i = 0; i < n_env; i++)
		b->env[i] = kn_xstrdup(env[i]);
	b->env[n_env] = kn_asprintf("KILN_SLURM_ARRAY_DIR=%s", b->dir);
	KN_FREE_ALL(attempt, tasks_root);
	return b;
}

int slurm_array_add(struct slurm_batches *bs, const struct kn_task_launch *l,
		    const struct kn_slurm_task *t, const char *const *env,
		    struct kn_error *err)
{
	struct batch *b;
	char *dir, *name, *path, *text;
	int rc;

	for (b = bs->pending; b; b = b->next)
		if (b->array_id == l->spec->array.job_id &&
		    b->timeout_ms == l->timeout_ms)
			break;
	if (!b) {
		b = batch_new(l, t, env);
		b->next = bs->pending;
		bs->pending = b;
	}
	pointer_place(l->task_dir, &dir, &name);
	path = kn_asprintf("%s/%s", dir, name);
	text = kn_asprintf("%s\n%d\n", b->dir, l->spec->array.index);
	rc = kn_write_text_replace(path, text, 0600, err);
	KN_FREE_ALL(text, path, dir, name);
	if (rc < 0)
		return rc;
	b->indexes = kn_xrealloc(b->indexes, (b->n + 1) * sizeof(int));
	b->attempt_dirs =
		kn_xrealloc(b->attempt_dirs, (b->n + 1) * sizeof(char *));
	b->indexes[b->n] = l->spec->array.index;
	b->attempt_dirs[b->n++] = parent_of(l->task_dir, 1);
	return 0;
}

static int index_cmp(const void *a, const void *b)
{
	const int *x = a, *y = b;

	return (*x > *y) - (*x < *y);
}

/* The batch's directory, map, script and output directory: 0 or why. */
static int batch_write(struct batch *b, char *why, size_t len)
{
	char *e = kn_asprintf("%s/e", b->dir), *out = kn_asprintf("%s/out",
								   b->dir);
	char *script = kn_asprintf("%s/slurm.sh", b->dir);
	int rc = kn_mkdir_p(e, 0711);

	if (rc == 0 && chmod(b->dir, 0711) < 0)
		rc = -errno;
	if (rc == 0)
		rc = kn_mkdir_p(out, 0700);
	if (rc == 0 && b->t.run_as_set &&
	    lchown(out, b->t.uid, b->t.gid) < 0)
		rc = -errno;
	/* Readable by the task's user, who knows its own index. */
	for (size_t i = 0; rc == 0 && i < b->n; i++) {
		char *path = kn_asprintf("%s/%d", e, b->indexes[i]);

		rc = kn_write_file_replace(path, b->attempt_dirs[i],
					   strlen(b->attempt_dirs[i]), 0644);
		free(path);
	}
	if (rc == 0)
		rc = kn_write_file_replace(script, exec_slurm_array_script,
					   strlen(exec_slurm_array_script),
					   0755);
	if (rc < 0)
		snprintf(why, len, "cannot write the array's directory %s: %s",
			 b->dir, strerror(-rc));
	KN_FREE_ALL(e, out, script);
	return rc;
}

/* Submit one batch as one sbatch --array; a failure is written to its
   sbatch.err, where its elements' status finds it. */
static void batch_submit(struct batch *b)
{
	char why[512], **args = NULL, *path;
	struct kn_task_proc p;
	struct kn_error err;
	char *out_path = kn_asprintf("%s/sbatch.out", b->dir);
	char *err_path = kn_asprintf("%s/sbatch.err", b->dir);
	int rc;

	qsort(b->indexes, b->n, sizeof(int), index_cmp);
	b->list = kn_slurm_array_list(b->indexes, b->n, b->parallel);
	b->t.array = b->list;
	rc = batch_write(b, why, sizeof(why));
	if (rc == 0) {
		args = kn_slurm_sbatch_args(&b->t, b->timeout_ms, b->dir);
		rc = exec_slurm_spawn(args, b->env, out_path, err_path, &p,
				      &err);
		if (rc < 0)
			kn_strlcpy(why, err.message, sizeof(why));
	}
	if (rc == 0) {
		path = kn_asprintf("%s/sbatch.pid", b->dir);
		exec_slurm_write_proc(path, &p);
		free(path);
	} else {
		kn_mkdir_p(b->dir, 0711);
		kn_write_file_replace(err_path, why, strlen(why), 0600);
		kn_log(KN_LOG_WARN, "slurm: array %lld: %s",
		       (long long)b->array_id, why);
	}
	kn_strv_free(args);
	KN_FREE_ALL(out_path, err_path);
}

/* scancel [--state=PENDING] ids..., in rounds of SCANCEL_IDS_MAX. */
static void cancel_ids(char **ids, size_t n, bool pending_only)
{
	for (size_t at = 0; at < n; at += SCANCEL_IDS_MAX) {
		size_t k = n - at < SCANCEL_IDS_MAX ? n - at : SCANCEL_IDS_MAX;
		char **argv = kn_xcalloc(k + 3, sizeof(char *));
		size_t a = 0;
		struct kn_task_proc p;
		struct kn_error err;

		argv[a++] = "scancel";
		if (pending_only)
			argv[a++] = "--state=PENDING";
		for (size_t i = 0; i < k; i++)
			argv[a++] = ids[at + i];
		if (exec_slurm_spawn(argv, NULL, NULL, NULL, &p, &err) < 0)
			kn_log(KN_LOG_WARN, "slurm: %s", err.message);
		free(argv);
	}
}

void slurm_array_flush(struct kn_executor *ex)
{
	struct slurm_batches *bs = ((struct slurm_exec *)ex->impl)->batches;

	while (bs->pending) {
		struct batch *b = bs->pending;

		bs->pending = b->next;
		batch_submit(b);
		batch_free(b);
	}
	cancel_ids(bs->cancel, bs->n_cancel, true);
	kn_strv_free_n(bs->cancel, bs->n_cancel);
	bs->cancel = NULL;
	bs->n_cancel = 0;
	cancel_ids(bs->kill, bs->n_kill, false);
	kn_strv_free_n(bs->kill, bs->n_kill);
	bs->kill = NULL;
	bs->n_kill = 0;
}

static void queue_id(char ***v, size_t *n, long long job_id, int index)
{
	for (size_t i = 0; i < *n; i++) {
		long long j;
		int k;

		if (sscanf((*v)[i], "%lld_%d", &j, &k) == 2 && j == job_id &&
		    k == index)
			return;
	}
	*v = kn_xrealloc(*v, (*n + 1) * sizeof(char *));
	(*v)[(*n)++] = kn_asprintf("%lld_%d", job_id, index);
}

void slurm_array_stop(struct slurm_batches *bs, const char *task_dir,
		      int64_t grace_ms)
{
	struct stopping *st;
	char *dir = NULL;
	long long job_id;
	int index;

	if (pointer_read(task_dir, &dir, &index) < 0)
		return;
	job_id = exec_slurm_job_id(dir);
	/* Not submitted yet: cancelled at the first answer. */
	if (job_id > 0)
		queue_id(&bs->cancel, &bs->n_cancel, job_id, index);
	for (st = bs->stopping; st; st = st->next)
		if (st->index == index && !strcmp(st->dir, dir))
			break;
	if (!st) {
		st = kn_xcalloc(1, sizeof(*st));
		st->dir = dir;
		st->index = index;
		st->next = bs->stopping;
		bs->stopping = st;
		dir = NULL;
	}
	st->deadline_ms = kn_mono_ms() + STOP_BACKSTOP_MS +
			  (grace_ms >= 0 ? grace_ms : STOP_GRACE_DEFAULT_MS);
	free(dir);
}

/* A new answer a for array job job_id: its stopping elements' cancels. */
static void stopping_answered(struct slurm_batches *bs,
			      const struct answer *a, long long job_id)
{
	struct stopping **link = &bs->stopping;

	while (*link) {
		struct stopping *st = *link;
		const struct kn_slurm_element *el;

		if (strcmp(st->dir, a->dir)) {
			link = &st->next;
			continue;
		}
		el = kn_slurm_elements_find(&a->e, st->index);
		if (!el || kn_slurm_state_final(el->state)) {
			*link = st->next;
			KN_FREE_ALL(st->dir, st);
			continue;
		}
		if (!strcmp(el->state, "PENDING"))
			queue_id(&bs->cancel, &bs->n_cancel, job_id, st->index);
		else if (kn_mono_ms() > st->deadline_ms)
			queue_id(&bs->kill, &bs->n_kill, job_id, st->index);
		link = &st->next;
	}
}

/* Whether e is an answer that lists elements of the array: neither one
   saying the array is gone nor an empty one (squeue said nothing). */
static bool lists_array(const struct kn_slurm_elements *e)
{
	return !e->gone && e->n > 0;
}

/* a's elements become the answer before the next: their indexes only. */
static void answer_keep_previous(struct answer *a)
{
	a->prev_listed = lists_array(&a->e);
	a->n_prev = a->prev_listed ? a->e.n : 0;
	a->prev_indexes = kn_xrealloc(a->prev_indexes,
				      (a->n_prev ? a->n_prev : 1) *
					      sizeof(int));
	/* Sorted already, as e is. */
	for (size_t i = 0; i < a->n_prev; i++)
		a->prev_indexes[i] = a->e.v[i].index;
}

/*
 * Whether Slurm has forgotten element index of a submitted array: the
 * last two answers both list the array and neither lists the element.
 * squeue -r lists every element Slurm holds, pending ones too, so one
 * left out was purged (an element cancelled, then past MinJobAge, or a
 * pending one scancel took out of the array); the second answer makes
 * sure one odd answer ends no element.
 */
static bool element_forgotten(const struct answer *a, int index)
{
	return lists_array(&a->e) && a->prev_listed &&
	       !kn_slurm_elements_find(&a->e, index) &&
	       !bsearch(&index, a->prev_indexes, a->n_prev, sizeof(int),
			index_cmp);
}

static bool batch_pending(const struct slurm_batches *bs, const char *dir)
{
	for (const struct batch *b = bs->pending; b; b = b->next)
		if (!strcmp(b->dir, dir))
			return true;
	return false;
}

/*
 * The batch's latest squeue answer, looked for once a second and parsed
 * once per answer, whatever the number of elements asking: NULL while
 * there is none.
 */
static const struct answer *batch_answer(struct slurm_batches *bs,
					 const char *dir, long long job_id)
{
	char id[32], *text = NULL, why[128];
	char *argv[] = {"squeue", "-h", "-r", "-t", "all", "-j", id, "-o",
			KN_SQUEUE_ELEMENTS_FORMAT, NULL};
	const struct exec_slurm_query q = {"squeue.pid", "squeue.out", argv,
					   NULL, ELEMENTS_ANSWER_MAX};
	struct kn_slurm_elements e;
	struct kn_error err;
	struct answer *a = NULL;
	size_t len = 0;
	int64_t at_ms;
	bool fresh;

	for (size_t i = 0; i < ANSWERS_KEPT; i++)
		if (bs->answers[i].dir && !strcmp(bs->answers[i].dir, dir))
			a = &bs->answers[i];
	if (a && kn_mono_ms() - a->read_ms < ANSWER_INTERVAL_MS)
		return a;
	snprintf(id, sizeof(id), "%lld", job_id);
	if (exec_slurm_ask(dir, job_id, &q, &text, &len, &at_ms, &fresh, why,
			   sizeof(why)) == 0)
		return NULL;
	if (a)
		a->read_ms = kn_mono_ms();
	if (a && a->at_ms == at_ms) {
		free(text);
		return a;
	}
	if (kn_slurm_elements_parse(text, len, &e, &err) < 0) {
		kn_log(KN_LOG_WARN, "slurm: array job %lld: %s", job_id,
		       err.message);
		free(text);
		return a;
	}
	free(text);
	if (!a) {
		a = &bs->answers[bs->next_answer];
		bs->next_answer = (bs->next_answer + 1) % ANSWERS_KEPT;
		free(a->dir);
		a->dir = kn_xstrdup(dir);
		a->at_ms = 0;
	}
	/* The answer this one follows, or none for a slot taken anew. */
	if (a->at_ms)
		answer_keep_previous(a);
	else
		a->prev_listed = false;
	kn_slurm_elements_release(&a->e);
	a->e = e;
	a->at_ms = at_ms;
	a->read_ms = kn_mono_ms();
	stopping_answered(bs, a, job_id);
	return a;
}

static bool stop_asked(const char *task_dir)
{
	char *path = kn_asprintf("%s/stop.json", task_dir);
	bool asked = access(path, F_OK) == 0;

	free(path);
	return asked;
}

/* An element Slurm no longer knows, with no exit the shim recorded. */
static void forgotten_ended(struct kn_task_status *st, const char *id)
{
	char why[128];

	snprintf(why, sizeof(why), "lost: Slurm no longer knows job %s, and "
		 "no exit was recorded", id);
	exec_ended_lost(st, why);
}

int slurm_array_status(struct slurm_batches *bs, const char *task_dir,
		       struct kn_task_status *out, struct kn_error *err)
{
	char *dir = NULL, why[48];
	const struct kn_slurm_element *el = NULL;
	const struct answer *a;
	struct kn_task_status st;
	long long job_id;
	int index, rc;

	memset(&st, 0, sizeof(st));
	rc = exec_slurm_read_status_json(task_dir, &st, err);
	if (rc != 0)
		goto done;
	rc = pointer_read(task_dir, &dir, &index);
	if (rc < 0) {
		rc = kn_errorf(err, KN_EIO, NULL, "%s: its array's pointer "
			       "cannot be read: %s", task_dir, strerror(-rc));
		goto done;
	}
	if (batch_pending(bs, dir))
		goto running;
	job_id = exec_slurm_submitted(dir, "the server stopped before its "
				      "array was submitted", &st);
	if (job_id == 0)
		goto running;
	if (job_id < 0)
		goto done;
	a = batch_answer(bs, dir, job_id);
	if (!a)
		goto running;
	el = kn_slurm_elements_find(&a->e, index);
	if (el && !kn_slurm_state_final(el->state))
		goto running;
	/* Left out of one answer is not yet forgotten, unless kiln itself
	   cancelled it (a pending element leaves squeue at once). */
	if (!el && !a->e.gone && !stop_asked(task_dir) &&
	    !element_forgotten(a, index))
		goto running;
	/* Over in Slurm, or forgotten: the shim's record may be there now. */
	rc = exec_slurm_read_status_json(task_dir, &st, err);
	if (rc != 0)
		goto done;
	snprintf(why, sizeof(why), "%lld_%d", job_id, index);
	if (el)
		exec_slurm_ended_unrecorded(&st, why, el->state, el->reason);
	else
		forgotten_ended(&st, why);
	goto done;
running:
	memset(&st, 0, sizeof(st));
	rc = 1;
done:
	if (rc >= 0)
		*out = st;
	free(dir);
	return rc < 0 ? rc : 0;
}
