/*
 * Which sandbox the server's tasks get (src/sandbox, docs/security.md):
 * probed once at start, reported by GET /v1/nodes, and applied to each
 * launch. Without one the server fails closed: it refuses to start tasks
 * unless the operator chose --unisolated, and says so on every node.
 */
#include "internal.h"

#include <errno.h>
#include <pwd.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sandbox/sandbox.h"

/* The home's secrets: the home itself is 0700 (server.c). */
static const char *const secret_files[] = {
	"admin.token", "audit.key", "kiln.db", "kiln.db-wal", "kiln.db-shm",
	NULL,
};

static void restrict_secrets(struct server *s)
{
	for (const char *const *f = secret_files; *f; f++) {
		char *path = kn_asprintf("%s/%s", s->home, *f);
		if (chmod(path, 0600) < 0 && errno != ENOENT)
			kn_log(KN_LOG_WARN, "cannot restrict %s to 0600: %s",
			       path, strerror(errno));
		free(path);
	}
}

/* As root, every mapped user must exist now, not when its job starts. */
static int check_map_users(struct server *s, struct kn_error *err)
{
	enum kn_sandbox_mode mode;
	char desc[160];

	for (size_t i = 0; i < kn_user_map_count(s->user_map); i++) {
		const char *user = kn_user_map_user_at(s->user_map, i);
		int rc = kn_sandbox_probe(user, &mode, desc, sizeof(desc), err);
		if (rc < 0 && !strcmp(err->field, "run_as"))
			return kn_errorf(err, KN_EINVAL, "task-user-map",
					 "%s: %s", s->cfg.task_user_map,
					 err->message);
	}
	return 0;
}

/* Unprivileged: the shims' own user, for them not to look it up. */
static void find_own_user(struct server *s)
{
	struct passwd *pw = getpwuid(getuid());

	if (!pw)
		return; /* each shim finds none either, and runs without */
	s->own_user = kn_xstrdup(pw->pw_name);
	s->own_home = kn_xstrdup(pw->pw_dir);
}

int isolation_start(struct server *s, struct kn_error *err)
{
	enum kn_sandbox_mode mode;
	struct kn_error why;
	char desc[160];
	int rc;

	restrict_secrets(s);
	if (s->cfg.task_user_map) {
		rc = kn_user_map_load(s->cfg.task_user_map, &s->user_map, err);
		if (rc < 0)
			return rc;
		if (geteuid() == 0 && (rc = check_map_users(s, err)) < 0)
			return rc;
	}
	if (s->exec->ops->isolation) {
		/* Slurm and pods place the task; the shim builds its env. */
		snprintf(s->isolation, sizeof(s->isolation), "%s",
			 s->exec->ops->isolation);
		s->isolation_ok = true;
		return 0;
	}
	rc = kn_sandbox_probe(s->cfg.task_user, &mode, desc, sizeof(desc),
			      &why);
	if (s->cfg.unisolated) {
		snprintf(s->isolation, sizeof(s->isolation),
			 "none: --unisolated");
		s->isolation_ok = true;
	} else if (rc < 0) {
		/* An unknown --task-user is the operator's typo: stop now. */
		if (!strcmp(why.field, "run_as"))
			return kn_errorf(err, KN_EINVAL, "task-user",
					 "--task-user: %s", why.message);
		snprintf(s->isolation, sizeof(s->isolation),
			 "none: %.100s; tasks refused (--unisolated runs them)",
			 why.message);
		s->isolation_ok = false;
	} else {
		kn_strlcpy(s->isolation, desc, sizeof(s->isolation));
		s->isolation_ok = true;
		if (mode == KN_SANDBOX_UID)
			s->user_cache = kn_user_cache_new(NULL, NULL);
		else
			find_own_user(s);
	}
	kn_log(s->isolation_ok ? KN_LOG_INFO : KN_LOG_ERROR,
	       "task isolation: %s", s->isolation);
	return 0;
}

void isolation_stop(struct server *s)
{
	kn_user_map_free(s->user_map);
	s->user_map = NULL;
	kn_user_cache_free(s->user_cache);
	s->user_cache = NULL;
	KN_FREE_ALL(s->own_user, s->own_home);
	s->own_user = s->own_home = NULL;
}

int isolation_launch(struct server *s, int64_t job_id,
		     struct kn_task_launch *l, char *user, size_t len,
		     struct kn_error *err)
{
	struct kn_job_row row;
	const char *mapped = NULL;

	if (!s->isolation_ok)
		return kn_errorf(err, KN_EIO, NULL, "no task isolation (%s)",
				 s->isolation);
	l->home = s->home;
	l->unisolated = s->cfg.unisolated;
	kn_strlcpy(user, s->cfg.task_user ? s->cfg.task_user : "", len);
	if (s->user_map) {
		memset(&row, 0, sizeof(row));
		if (kn_store_job_get(s->store, job_id, &row, err) < 0)
			return -EIO;
		mapped = kn_user_map_lookup(s->user_map, row.owner);
		if (mapped)
			kn_strlcpy(user, mapped, len);
		kn_job_row_release(&row);
	}
	l->run_as = user[0] ? user : NULL;
	l->server_user = s->own_user;
	l->server_home = s->own_home;
	if (!s->user_cache)
		return 0;
	if (kn_user_cache_get(s->user_cache, user[0] ? user : KN_TASK_USER,
			      &s->task_user, err) < 0)
		return -EINVAL;
	l->user = &s->task_user;
	return 0;
}

/*
 * A MIG instance's capability nodes. kiln does not query NVML for real
 * MIG instances (only simulated GPUs are in MIG mode), so an instance is
 * named by where it lies: GPU instance id = its first memory slice, with
 * one compute instance, 0. Simulated GPUs keep the driver's layout under
 * --gpu-dev-dir: DIR/mig-minors and DIR/nvidia-caps/.
 */
static int mig_nodes(struct server *s, const struct kn_sched_binding *b,
		     char **nodes, struct kn_error *err)
{
	bool simulated = s->nodes[b->node].devices.simulated;
	char *file = simulated ? kn_asprintf("%s/mig-minors",
					     s->cfg.gpu_dev_dir)
			       : kn_xstrdup(KN_MIG_MINORS_FILE);
	char *caps = simulated ? kn_asprintf("%s/nvidia-caps",
					     s->cfg.gpu_dev_dir)
			       : kn_xstrdup("/dev/nvidia-caps");
	char *text = NULL;
	size_t len;
	int rc = kn_read_file(file, 1 << 20, &text, &len);

	if (rc < 0)
		rc = kn_errorf(err, KN_EIO, "mig",
			       "cannot read the MIG minors %s: %s", file,
			       strerror(-rc));
	else
		rc = kn_device_mig_nodes(nodes, caps, text, file,
					 b->devices[0], b->mig_start, 0, err);
	KN_FREE_ALL(text, caps, file);
	return rc;
}

int isolation_task_devices(struct server *s,
			   const struct kn_sched_binding *b, char ***out,
			   struct kn_error *err)
{
	const struct kn_device_set *set = &s->nodes[b->node].devices;
	char **nodes;
	int rc = 0;

	if (!set->simulated)
		nodes = kn_device_nodes("/dev", b->devices, b->n_devices);
	else
		nodes = kn_device_nodes(s->cfg.gpu_dev_dir, b->devices,
					s->cfg.gpu_dev_dir ? b->n_devices : 0);
	/* Without its own nodes a task opens no GPU at all, MIG or not.
	   An instance Slurm lists is Slurm's to bind, with its capability
	   nodes (gres.conf, ConstrainDevices): kiln has no minors there. */
	if (b->mig_profile && b->n_devices == 1 && nodes[0] &&
	    strcmp(set->source, "slurm"))
		rc = mig_nodes(s, b, nodes, err);
	if (rc < 0) {
		kn_strv_free(nodes);
		return rc;
	}
	*out = nodes;
	return 0;
}
