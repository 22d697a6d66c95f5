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
 */
#include <dirent.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include "ckpt/ckpt.h"

struct kn_ckpt_watch {
	char *dir;
	int epfd, infd, tfd;
	bool rescan;
	char **seen;
	size_t nseen;
	char **pending;
	size_t npending;
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

static void note(struct kn_ckpt_watch *w, const char *name)
{
	if (!is_checkpoint_name(name) || contains(w->seen, w->nseen, name) ||
	    contains(w->pending, w->npending, name))
		return;
	w->pending = kn_xrealloc(w->pending,
				 (w->npending + 1) * sizeof(w->pending[0]));
	w->pending[w->npending++] = kn_xstrdup(name);
}

void kn_ckpt_watch_free(struct kn_ckpt_watch *w)
{
	if (!w)
		return;
	for (size_t i = 0; i < w->nseen; i++)
		free(w->seen[i]);
	for (size_t i = 0; i < w->npending; i++)
		free(w->pending[i]);
	free(w->seen);
	free(w->pending);
	if (w->epfd >= 0)
		close(w->epfd);
	if (w->infd >= 0)
		close(w->infd);
	if (w->tfd >= 0)
		close(w->tfd);
	free(w->dir);
	free(w);
}

int kn_ckpt_watch_new(const char *dir, int64_t scan_ms,
		      struct kn_ckpt_watch **out, struct kn_error *err)
{
	struct kn_ckpt_watch *w = kn_xcalloc(1, sizeof(*w));
	struct epoll_event ev = {.events = EPOLLIN};
	struct itimerspec its = {0};
	int rc = 0;

	w->epfd = w->infd = w->tfd = -1;
	w->dir = kn_xstrdup(dir);
	w->rescan = true;
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
	if (inotify_add_watch(w->infd, dir, IN_MOVED_TO | IN_ONLYDIR) < 0) {
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
			else if ((ev->mask & IN_MOVED_TO) &&
				 (ev->mask & IN_ISDIR) && ev->len > 0)
				note(w, ev->name);
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
		if (is_checkpoint_name(e->d_name) &&
		    fstatat(dirfd(d), e->d_name, &st, 0) == 0 &&
		    S_ISDIR(st.st_mode))
			note(w, e->d_name);
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
