/*
 * Watching KILN_CHECKPOINT_DIR for committed checkpoints.
 *
 * A task commits a checkpoint by renaming NAME.tmp to NAME, so the signal
 * is inotify's IN_MOVED_TO for a directory; a directory created under its
 * final name is not (yet) complete by the contract and is picked up only by
 * the periodic scan, which exists because inotify can overflow and
 * misses everything before the watch began. One epoll descriptor carries
 * both the inotify queue and the scan timer, so a caller polls one fd.
 * Names ending in .tmp or .partial (a restore in progress) and hidden
 * names are never checkpoints.
 *
 * With KN_CKPT_WATCH_FILES the watch also follows every NAME.tmp directory
 * (and the directories made in it) and reports each file the task closes
 * after writing, or moves in, so a caller may send it while the task writes
 * the rest: the save and the upload overlap, and after the commit only what
 * is left goes. Files written before their directory's watch began are not
 * reported; the commit's upload sends them.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include "ckpt/ckpt.h"

/* Directories followed at most per watch: a bound, not a limit in practice. */
#define MAX_TMP_WATCHES 1024

/* A directory inside an uncommitted checkpoint. */
struct tmp_dir {
	int wd;
	char *name; /* the checkpoint's, without .tmp */
	char *rel;  /* "" or "sub/dir/" below NAME.tmp */
};

/* A file written in an uncommitted checkpoint, not yet taken. */
struct written {
	char *name;
	char *path; /* relative to NAME.tmp */
};

struct kn_ckpt_watch {
	char *dir;
	int epfd, infd, tfd;
	int root_wd;
	bool files;
	bool rescan;
	char **seen;
	size_t nseen;
	char **pending;
	size_t npending;
	struct tmp_dir *tmps;
	size_t ntmps;
	struct written *written;
	size_t nwritten;
};

static bool ends_with(const char *s, const char *suffix)
{
	size_t n = strlen(s), m = strlen(suffix);
	return n >= m && strcmp(s + n - m, suffix) == 0;
}

static bool is_checkpoint_name(const char *name)
{
	return name[0] != '.' && !ends_with(name, ".tmp") &&
	       !ends_with(name, ".partial");
}

static bool contains(char **names, size_t n, const char *name)
{
	for (size_t i = 0; i < n; i++)
		if (strcmp(names[i], name) == 0)
			return true;
	return false;
}

static void forget_tmp(struct kn_ckpt_watch *w, size_t i)
{
	KN_FREE_ALL(w->tmps[i].name, w->tmps[i].rel);
	w->tmps[i] = w->tmps[--w->ntmps];
}

static void forget_written(struct kn_ckpt_watch *w, size_t i)
{
	KN_FREE_ALL(w->written[i].name, w->written[i].path);
	memmove(w->written + i, w->written + i + 1,
		(w->nwritten - i - 1) * sizeof(w->written[0]));
	w->nwritten--;
}

/* A committed checkpoint's files go with its commit: stop following it. */
static void drop_checkpoint_files(struct kn_ckpt_watch *w, const char *name)
{
	for (size_t i = w->ntmps; i-- > 0;)
		if (strcmp(w->tmps[i].name, name) == 0) {
			inotify_rm_watch(w->infd, w->tmps[i].wd);
			forget_tmp(w, i);
		}
	for (size_t i = w->nwritten; i-- > 0;)
		if (strcmp(w->written[i].name, name) == 0)
			forget_written(w, i);
}

static void note(struct kn_ckpt_watch *w, const char *name)
{
	if (!is_checkpoint_name(name) || contains(w->seen, w->nseen, name) ||
	    contains(w->pending, w->npending, name))
		return;
	w->pending = kn_xrealloc(w->pending,
				 (w->npending + 1) * sizeof(w->pending[0]));
	w->pending[w->npending++] = kn_xstrdup(name);
	drop_checkpoint_files(w, name);
}

static struct tmp_dir *tmp_of(struct kn_ckpt_watch *w, int wd)
{
	for (size_t i = 0; i < w->ntmps; i++)
		if (w->tmps[i].wd == wd)
			return &w->tmps[i];
	return NULL;
}

/*
 * Follow DIR/NAME.tmp/REL (rel "" or ending in '/') and the directories
 * made in it before the watch began.
 */
static void follow(struct kn_ckpt_watch *w, const char *name, const char *rel)
{
	char *path;
	struct dirent *e;
	DIR *d;
	int wd;

	if (w->ntmps >= MAX_TMP_WATCHES)
		return;
	path = kn_asprintf("%s/%s.tmp/%s", w->dir, name, rel);
	/* A link the task put there is not watched; uploads refuse it. */
	wd = inotify_add_watch(w->infd, path, IN_CLOSE_WRITE | IN_MOVED_TO |
					      IN_MOVED_FROM | IN_DELETE |
					      IN_CREATE | IN_ONLYDIR |
					      IN_DONT_FOLLOW);
	if (wd < 0 || tmp_of(w, wd)) {
		free(path);
		return;
	}
	w->tmps = kn_xrealloc(w->tmps, (w->ntmps + 1) * sizeof(w->tmps[0]));
	w->tmps[w->ntmps++] = (struct tmp_dir){
		.wd = wd, .name = kn_xstrdup(name), .rel = kn_xstrdup(rel)};
	d = opendir(path);
	free(path);
	while (d && (e = readdir(d))) {
		struct stat st;
		char *sub;

		if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0 ||
		    fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0 ||
		    !S_ISDIR(st.st_mode))
			continue;
		sub = kn_asprintf("%s%s/", rel, e->d_name);
		follow(w, name, sub);
		free(sub);
	}
	if (d)
		closedir(d);
}

/* Where (name, path) waits in w->written, or nwritten. */
static size_t written_at(const struct kn_ckpt_watch *w, const char *name,
			 const char *path)
{
	size_t i = 0;

	while (i < w->nwritten && (strcmp(w->written[i].name, name) != 0 ||
				   strcmp(w->written[i].path, path) != 0))
		i++;
	return i;
}

static void note_written(struct kn_ckpt_watch *w, const char *name,
			 const char *path)
{
	if (written_at(w, name, path) < w->nwritten)
		return;
	w->written = kn_xrealloc(w->written,
				 (w->nwritten + 1) * sizeof(w->written[0]));
	w->written[w->nwritten++] = (struct written){
		.name = kn_xstrdup(name), .path = kn_xstrdup(path)};
}

/* A directory dir_name in the watched one: true if it is some NAME.tmp. */
static bool follow_tmp(struct kn_ckpt_watch *w, const char *dir_name)
{
	size_t n = strlen(dir_name);
	char *name;

	if (!w->files || n <= 4 || !ends_with(dir_name, ".tmp"))
		return false;
	name = strndup(dir_name, n - 4);
	if (!name)
		abort();
	if (is_checkpoint_name(name))
		follow(w, name, "");
	free(name);
	return true;
}

static void on_root_event(struct kn_ckpt_watch *w,
			  const struct inotify_event *ev)
{
	if (!(ev->mask & IN_ISDIR) || ev->len == 0)
		return;
	if (!follow_tmp(w, ev->name) && (ev->mask & IN_MOVED_TO))
		note(w, ev->name);
}

static void on_tmp_event(struct kn_ckpt_watch *w,
			 const struct inotify_event *ev)
{
	struct tmp_dir *t = tmp_of(w, ev->wd);
	char *rel;

	if (!t)
		return;
	if (ev->mask & IN_IGNORED) {
		forget_tmp(w, (size_t)(t - w->tmps));
		return;
	}
	if (ev->len == 0)
		return;
	rel = kn_asprintf("%s%s", t->rel, ev->name);
	if (ev->mask & IN_ISDIR) {
		char *sub = kn_asprintf("%s/", rel);
		char *name = kn_xstrdup(t->name); /* follow() may move t */

		follow(w, name, sub);
		KN_FREE_ALL(name, sub);
	} else if (ev->mask & (IN_CLOSE_WRITE | IN_MOVED_TO)) {
		note_written(w, t->name, rel);
	} else if (ev->mask & (IN_MOVED_FROM | IN_DELETE)) {
		/* written under a temporary name, say, then renamed */
		size_t i = written_at(w, t->name, rel);

		if (i < w->nwritten)
			forget_written(w, i);
	}
	free(rel);
}

void kn_ckpt_watch_free(struct kn_ckpt_watch *w)
{
	if (!w)
		return;
	while (w->ntmps)
		forget_tmp(w, w->ntmps - 1);
	while (w->nwritten)
		forget_written(w, w->nwritten - 1);
	KN_FREE_ALL(w->tmps, w->written);
	kn_strv_free_n(w->seen, w->nseen);
	kn_strv_free_n(w->pending, w->npending);
	if (w->epfd >= 0)
		close(w->epfd);
	if (w->infd >= 0)
		close(w->infd);
	if (w->tfd >= 0)
		close(w->tfd);
	KN_FREE_ALL(w->dir, w);
}

int kn_ckpt_watch_new(const char *dir, int64_t scan_ms, unsigned flags,
		      struct kn_ckpt_watch **out, struct kn_error *err)
{
	struct kn_ckpt_watch *w = kn_xcalloc(1, sizeof(*w));
	struct epoll_event ev = {.events = EPOLLIN};
	struct itimerspec its = {0};
	int rc = 0;

	w->epfd = w->infd = w->tfd = -1;
	w->dir = kn_xstrdup(dir);
	w->rescan = true;
	w->files = flags & KN_CKPT_WATCH_FILES;
	if (scan_ms <= 0)
		scan_ms = 2000;
	w->epfd = epoll_create1(EPOLL_CLOEXEC);
	w->infd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
	w->tfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
	if (w->epfd < 0 || w->infd < 0 || w->tfd < 0) {
		rc = kn_errorf(err, KN_EIO, NULL, "checkpoint watch: %s",
			       strerror(errno));
		goto out;
	}
	w->root_wd = inotify_add_watch(w->infd, dir, IN_MOVED_TO | IN_ONLYDIR |
						      (w->files ? IN_CREATE : 0));
	if (w->root_wd < 0) {
		rc = kn_errorf(err, errno == ENOENT ? KN_ENOTFOUND : KN_EIO,
			       "dir", "checkpoint watch %s: %s", dir,
			       strerror(errno));
		goto out;
	}
	its.it_value.tv_sec = scan_ms / 1000;
	its.it_value.tv_nsec = (scan_ms % 1000) * 1000000;
	its.it_interval = its.it_value;
	timerfd_settime(w->tfd, 0, &its, NULL);
	ev.data.fd = w->infd;
	epoll_ctl(w->epfd, EPOLL_CTL_ADD, w->infd, &ev);
	ev.data.fd = w->tfd;
	epoll_ctl(w->epfd, EPOLL_CTL_ADD, w->tfd, &ev);
out:
	if (rc < 0) {
		kn_ckpt_watch_free(w);
		return rc;
	}
	*out = w;
	return 0;
}

int kn_ckpt_watch_fd(const struct kn_ckpt_watch *w)
{
	return w->epfd;
}

static void drain_inotify(struct kn_ckpt_watch *w)
{
	char buf[8192] __attribute__((aligned(__alignof__(struct inotify_event))));
	ssize_t n;

	while ((n = read(w->infd, buf, sizeof(buf))) > 0) {
		for (char *p = buf; p < buf + n;) {
			struct inotify_event *ev = (struct inotify_event *)p;
			if (ev->mask & IN_Q_OVERFLOW)
				w->rescan = true;
			else if (ev->wd == w->root_wd)
				on_root_event(w, ev);
			else
				on_tmp_event(w, ev);
			p += sizeof(*ev) + ev->len;
		}
	}
}

static int scan(struct kn_ckpt_watch *w, struct kn_error *err)
{
	DIR *d = opendir(w->dir);
	struct dirent *e;

	if (!d)
		return kn_errorf(err, errno == ENOENT ? KN_ENOTFOUND : KN_EIO,
				 "dir", "checkpoint watch %s: %s", w->dir,
				 strerror(errno));
	while ((e = readdir(d))) {
		struct stat st;

		if (fstatat(dirfd(d), e->d_name, &st, 0) < 0 ||
		    !S_ISDIR(st.st_mode))
			continue;
		/* A NAME.tmp begun before the watch (a restarted server) or
		   whose creation an overflow lost is followed from now on. */
		if (is_checkpoint_name(e->d_name))
			note(w, e->d_name);
		else
			follow_tmp(w, e->d_name);
	}
	closedir(d);
	return 0;
}

static int oldest_first(const void *a, const void *b)
{
	return strverscmp(*(char *const *)a, *(char *const *)b);
}

int kn_ckpt_watch_next(struct kn_ckpt_watch *w, char **name,
		       struct kn_error *err)
{
	uint64_t ticks;

	drain_inotify(w);
	if (read(w->tfd, &ticks, sizeof(ticks)) == sizeof(ticks))
		w->rescan = true;
	if (w->rescan) {
		int rc = scan(w, err);
		if (rc < 0)
			return rc;
		w->rescan = false;
	}
	if (w->npending == 0)
		return 0;
	qsort(w->pending, w->npending, sizeof(w->pending[0]), oldest_first);
	*name = kn_xstrdup(w->pending[0]);
	w->seen = kn_xrealloc(w->seen, (w->nseen + 1) * sizeof(w->seen[0]));
	w->seen[w->nseen++] = w->pending[0];
	memmove(w->pending, w->pending + 1,
		(w->npending - 1) * sizeof(w->pending[0]));
	w->npending--;
	return 1;
}

int kn_ckpt_watch_next_written(struct kn_ckpt_watch *w, char **name,
			       char **path)
{
	if (w->nwritten == 0)
		return 0;
	*name = w->written[0].name;
	*path = w->written[0].path;
	memmove(w->written, w->written + 1,
		(w->nwritten - 1) * sizeof(w->written[0]));
	w->nwritten--;
	return 1;
}
