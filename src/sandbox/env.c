/*
 * The task's environment, built rather than inherited: the server's
 * environment holds store credentials (AZURE_STORAGE_KEY), tokens and
 * whatever its operator exported, and none of it is the task's. An
 * allow-list, not a deny-list, so a variable added to the server one day
 * does not leak by default. In a pod the server already rendered the
 * environment for the task, less the store's credentials, which the pod's
 * shim needs and the task must not see: there the few denied names go.
 */
#include "sandbox.h"

#include <stdlib.h>
#include <string.h>

/* Names taken from the shim's environment; "X*" is a prefix. */
static const char *const allowed[] = {
	"PATH", "LANG", "LC_*", "TZ", "TERM", NULL,
};
/* Under srun the Slurm shim sets the ranks in its own environment. */
static const char *const allowed_slurm[] = {
	"SLURM_*", "SLURMD_NODENAME", "CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES", "RANK",
	"WORLD_SIZE", "LOCAL_RANK", "NODE_RANK", "MASTER_ADDR", NULL,
};
/* A pod's credentials for its store and anything that names a token. */
static const char *const denied_pod[] = {
	"AZURE_*", "KILN_TOKEN", "KILN_ADMIN_TOKEN", NULL,
};

#define DEFAULT_PATH "PATH=/usr/local/bin:/usr/bin:/bin"

static size_t name_len(const char *entry)
{
	return strcspn(entry, "=");
}

static bool name_in(const char *entry, const char *const *names)
{
	size_t n = name_len(entry);

	for (; *names; names++) {
		size_t k = strlen(*names);

		if ((*names)[k - 1] == '*') {
			if (n >= k - 1 && !strncmp(entry, *names, k - 1))
				return true;
		} else if (k == n && !strncmp(entry, *names, n)) {
			return true;
		}
	}
	return false;
}

struct env_list {
	char **v;
	size_t n, cap;
};

/* Adds or replaces by name. */
static void env_set(struct env_list *l, const char *entry)
{
	size_t n = name_len(entry);

	if (!entry[n] || n == 0)
		return; /* not NAME=value */
	for (size_t i = 0; i < l->n; i++)
		if (name_len(l->v[i]) == n && !strncmp(l->v[i], entry, n)) {
			free(l->v[i]);
			l->v[i] = kn_xstrdup(entry);
			return;
		}
	if (l->n + 2 > l->cap) {
		l->cap = l->cap ? l->cap * 2 : 32;
		l->v = kn_xrealloc(l->v, l->cap * sizeof(char *));
	}
	l->v[l->n++] = kn_xstrdup(entry);
	l->v[l->n] = NULL;
}

static bool env_has(const struct env_list *l, const char *name)
{
	size_t n = strlen(name);

	for (size_t i = 0; i < l->n; i++)
		if (name_len(l->v[i]) == n && !strncmp(l->v[i], name, n))
			return true;
	return false;
}

static bool launch_has(char *const *launch_env, const char *name)
{
	const char *const one[] = {name, NULL};

	for (char *const *e = launch_env; e && *e; e++)
		if (name_in(*e, one))
			return true;
	return false;
}

static void set_unless_launch(struct env_list *l, char *const *launch_env,
			      const char *name, const char *value)
{
	char *entry;

	if (!value || launch_has(launch_env, name))
		return;
	entry = kn_asprintf("%s=%s", name, value);
	env_set(l, entry);
	free(entry);
}

char **kn_sandbox_env_build(enum kn_sandbox_host host,
			    char *const *launch_env, char *const *shim_env,
			    const char *home, const char *user)
{
	struct env_list l = {kn_xcalloc(1, sizeof(char *)), 0, 1};

	for (char *const *e = shim_env; e && *e; e++) {
		bool keep;

		if (host == KN_SANDBOX_POD)
			keep = !name_in(*e, denied_pod);
		else
			keep = name_in(*e, allowed) ||
			       (host == KN_SANDBOX_SLURM &&
				name_in(*e, allowed_slurm));
		if (keep)
			env_set(&l, *e);
	}
	for (char *const *e = launch_env; e && *e; e++)
		env_set(&l, *e);
	set_unless_launch(&l, launch_env, "HOME", home);
	set_unless_launch(&l, launch_env, "USER", user);
	set_unless_launch(&l, launch_env, "LOGNAME", user);
	if (!env_has(&l, "PATH"))
		env_set(&l, DEFAULT_PATH);
	return l.v;
}

