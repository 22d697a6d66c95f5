/*
 * The task's Unix user: looked up once by the server (kept in a cache
 * that notices edits of /etc/passwd and /etc/group), handed to each shim
 * in launch.json and checked there, so that a task's start reads no user
 * database. Looking a user up through NSS costs a shim about 200 system
 * calls (nsswitch.conf, nscd's socket, libnss_systemd and the files).
 */
#include "sandbox.h"

#include <errno.h>
#include <grp.h>
#include <pwd.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int kn_sandbox_user_check(const struct kn_sandbox_user *u,
			  struct kn_error *err)
{
	if (u->uid == 0 || u->uid == getuid() || u->uid == geteuid())
		return kn_errorf(err, KN_EINVAL, "user",
				 "tasks may not run as uid %u (%s): root or "
				 "the server's own", (unsigned)u->uid, u->name);
	if (u->gid == 0 || u->gid == getgid() || u->gid == getegid())
		return kn_errorf(err, KN_EINVAL, "user",
				 "tasks may not run as gid %u (%s): root's or "
				 "the server's own", (unsigned)u->gid, u->name);
	if (u->n_groups < 0 || u->n_groups > KN_SANDBOX_MAX_GROUPS)
		return kn_errorf(err, KN_EINVAL, "user",
				 "%s: %d supplementary groups", u->name,
				 u->n_groups);
	for (int i = 0; i < u->n_groups; i++)
		if (u->groups[i] == 0)
			return kn_errorf(err, KN_EINVAL, "user",
					 "tasks may not run as %s: in group 0",
					 u->name);
	return 0;
}

int kn_sandbox_user_resolve(const char *name, struct kn_sandbox_user *out,
			    struct kn_error *err)
{
	struct passwd *pw;
	int n = KN_SANDBOX_MAX_GROUPS;

	memset(out, 0, sizeof(*out));
	if (strlen(name) >= sizeof(out->name))
		return kn_errorf(err, KN_EINVAL, "run_as",
				 "no Unix user %.64s...: name too long", name);
	pw = getpwnam(name);
	if (!pw)
		return kn_errorf(err, KN_EINVAL, "run_as",
				 "no Unix user %s (create it: useradd --system "
				 "--no-create-home --shell /usr/sbin/nologin %s)",
				 name, name);
	if (pw->pw_uid == 0 || pw->pw_gid == 0)
		return kn_errorf(err, KN_EINVAL, "run_as",
				 "tasks may not run as %s: uid or gid 0", name);
	kn_strlcpy(out->name, name, sizeof(out->name));
	out->uid = pw->pw_uid;
	out->gid = pw->pw_gid;
	if (getgrouplist(name, pw->pw_gid, out->groups, &n) < 0)
		return kn_errorf(err, KN_EINVAL, "run_as",
				 "%s is in more than %d groups", name,
				 KN_SANDBOX_MAX_GROUPS);
	out->n_groups = n;
	for (int i = 0; i < n; i++)
		if (out->groups[i] == 0)
			return kn_errorf(err, KN_EINVAL, "run_as",
					 "tasks may not run as %s: in group 0",
					 name);
	return 0;
}

/* ---- the server's cache ---- */

/* What tells an edited user database: useradd replaces the file. */
struct file_sig {
	ino_t ino;
	off_t size;
	struct timespec mtime;
	bool present;
};

struct cached_user {
	struct kn_sandbox_user user;
	int64_t at_ms;
};

struct kn_user_cache {
	char *files[2];
	struct file_sig sigs[2];
	struct cached_user *users;
	size_t n;
	size_t lookups;
};

struct kn_user_cache *kn_user_cache_new(const char *passwd, const char *group)
{
	struct kn_user_cache *c = kn_xcalloc(1, sizeof(*c));

	c->files[0] = kn_xstrdup(passwd ? passwd : "/etc/passwd");
	c->files[1] = kn_xstrdup(group ? group : "/etc/group");
	return c;
}

void kn_user_cache_free(struct kn_user_cache *c)
{
	if (!c)
		return;
	KN_FREE_ALL(c->files[0], c->files[1], c->users, c);
}

size_t kn_user_cache_lookups(const struct kn_user_cache *c)
{
	return c->lookups;
}

/* Whether either file changed since the last call (true the first time). */
static bool files_changed(struct kn_user_cache *c)
{
	bool changed = false;

	for (int i = 0; i < 2; i++) {
		struct file_sig now = {0};
		struct stat st;

		if (stat(c->files[i], &st) == 0)
			now = (struct file_sig){st.st_ino, st.st_size,
						st.st_mtim, true};
		if (now.present != c->sigs[i].present ||
		    now.ino != c->sigs[i].ino || now.size != c->sigs[i].size ||
		    now.mtime.tv_sec != c->sigs[i].mtime.tv_sec ||
		    now.mtime.tv_nsec != c->sigs[i].mtime.tv_nsec)
			changed = true;
		c->sigs[i] = now;
	}
	return changed;
}

int kn_user_cache_get(struct kn_user_cache *c, const char *name,
		      struct kn_sandbox_user *out, struct kn_error *err)
{
	int64_t now = kn_mono_ms();
	struct cached_user *e = NULL;
	int rc;

	if (files_changed(c))
		c->n = 0;
	for (size_t i = 0; i < c->n && !e; i++)
		if (!strcmp(c->users[i].user.name, name))
			e = &c->users[i];
	if (e && now - e->at_ms < KN_USER_CACHE_TTL_MS) {
		*out = e->user;
		return 0;
	}
	c->lookups++;
	rc = kn_sandbox_user_resolve(name, out, err);
	if (rc < 0)
		return rc; /* not kept: the operator may be creating it now */
	if (!e) {
		c->users = kn_xrealloc(c->users, (c->n + 1) * sizeof(*c->users));
		e = &c->users[c->n++];
	}
	e->user = *out;
	e->at_ms = now;
	return 0;
}
