/*
 * A push hashes each file as it reads it to send it, so it learns a
 * file's digest before sending it only from here: the files it pushed
 * before, one line each (device, inode, size, modification and change
 * times, sha256), so it can ask the server which blobs it lacks and send
 * nothing of a file that has not changed. Any write to a file gives it a
 * new change time, which no call can set back, so an entry of a changed
 * file no longer matches; a write within the clock's tick of the hashing
 * could keep the times, so a file changed that near its hashing is one to
 * hash again before its digest is trusted (git's index has the same
 * rule). The cache is the user's own (0600 under a 0700
 * directory); two pushes at once may each write it, the last one winning,
 * which costs only a file read again.
 */
#include "cmd/digest_cache.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "registry/registry.h"

/* Larger than DIGEST_CACHE_MAX lines ever make: anything bigger was not
   written here, and is not read. */
#define FILE_MAX ((size_t)DIGEST_CACHE_MAX * 200)

struct entry {
	uint64_t dev, ino;
	int64_t size, mtime_s, mtime_ns, ctime_s, ctime_ns, hashed_at;
	char hex[65];
};

struct digest_cache {
	char *path;
	struct entry *e; /* oldest first */
	size_t n, cap;
	bool changed;
};

char *digest_cache_default_path(void)
{
	const char *xdg = getenv("XDG_CACHE_HOME");
	const char *home = getenv("HOME");

	if (xdg && xdg[0] == '/')
		return kn_asprintf("%s/kiln/digests", xdg);
	if (home && home[0] == '/')
		return kn_asprintf("%s/.cache/kiln/digests", home);
	return NULL;
}

static void entry_of(struct entry *e, const struct stat *st)
{
	e->dev = (uint64_t)st->st_dev;
	e->ino = (uint64_t)st->st_ino;
	e->size = (int64_t)st->st_size;
	e->mtime_s = (int64_t)st->st_mtim.tv_sec;
	e->mtime_ns = (int64_t)st->st_mtim.tv_nsec;
	e->ctime_s = (int64_t)st->st_ctim.tv_sec;
	e->ctime_ns = (int64_t)st->st_ctim.tv_nsec;
}

static bool same_file(const struct entry *a, const struct entry *b)
{
	return a->dev == b->dev && a->ino == b->ino;
}

static bool same_state(const struct entry *a, const struct entry *b)
{
	return same_file(a, b) && a->size == b->size &&
	       a->mtime_s == b->mtime_s && a->mtime_ns == b->mtime_ns &&
	       a->ctime_s == b->ctime_s && a->ctime_ns == b->ctime_ns;
}

static void append(struct digest_cache *c, const struct entry *e)
{
	if (c->n == c->cap) {
		c->cap = c->cap ? 2 * c->cap : 64;
		c->e = kn_xrealloc(c->e, c->cap * sizeof(*c->e));
	}
	c->e[c->n++] = *e;
}

static bool parse_line(const char *line, struct entry *e)
{
	int used = 0;

	if (sscanf(line,
		   "%" SCNu64 " %" SCNu64 " %" SCNd64 " %" SCNd64 " %" SCNd64
		   " %" SCNd64 " %" SCNd64 " %" SCNd64 " %64s%n",
		   &e->dev, &e->ino, &e->size, &e->mtime_s, &e->mtime_ns,
		   &e->ctime_s, &e->ctime_ns, &e->hashed_at, e->hex,
		   &used) != 9)
		return false;
	return line[used] == '\0' && kn_sha256_hex_ok(e->hex);
}

struct digest_cache *digest_cache_load(const char *path)
{
	struct digest_cache *c = kn_xcalloc(1, sizeof(*c));
	char *text = NULL, *line, *save = NULL;
	size_t len;

	if (!path)
		return c;
	c->path = kn_xstrdup(path);
	if (kn_read_file(path, FILE_MAX, &text, &len) < 0)
		return c;
	for (line = strtok_r(text, "\n", &save); line;
	     line = strtok_r(NULL, "\n", &save)) {
		struct entry e;
		if (c->n < DIGEST_CACHE_MAX && parse_line(line, &e))
			append(c, &e);
	}
	free(text);
	return c;
}

enum digest_known digest_cache_find(const struct digest_cache *c,
				    const struct stat *st, char hex[65])
{
	struct entry want;

	entry_of(&want, st);
	for (size_t i = c->n; i-- > 0;) {
		const struct entry *e = &c->e[i];
		if (!same_state(e, &want))
			continue;
		memcpy(hex, e->hex, 65);
		return e->mtime_s <= e->hashed_at - DIGEST_CACHE_SETTLE_S &&
				       e->ctime_s <=
					       e->hashed_at - DIGEST_CACHE_SETTLE_S
			       ? DIGEST_KNOWN
			       : DIGEST_CHECK;
	}
	return DIGEST_UNKNOWN;
}

void digest_cache_put(struct digest_cache *c, const struct stat *st,
		      const char *hex, time_t hashed_at)
{
	struct entry e;
	size_t keep = 0;

	if (!c->path || !kn_sha256_hex_ok(hex))
		return;
	entry_of(&e, st);
	e.hashed_at = (int64_t)hashed_at;
	memcpy(e.hex, hex, sizeof(e.hex));
	/* The file's older state goes; the newest entry is last. */
	for (size_t i = 0; i < c->n; i++)
		if (!same_file(&c->e[i], &e))
			c->e[keep++] = c->e[i];
	c->n = keep;
	if (c->n == DIGEST_CACHE_MAX) {
		memmove(c->e, c->e + 1, (c->n - 1) * sizeof(*c->e));
		c->n--;
	}
	append(c, &e);
	c->changed = true;
}

int digest_cache_save(struct digest_cache *c)
{
	char *dir, *slash;
	struct kn_buf out;
	int rc;

	if (!c->path || !c->changed)
		return 0;
	dir = kn_xstrdup(c->path);
	slash = strrchr(dir, '/');
	if (slash)
		*slash = '\0';
	rc = kn_mkdir_p(dir, 0700);
	free(dir);
	if (rc < 0)
		return rc;
	kn_buf_init(&out, FILE_MAX);
	for (size_t i = 0; i < c->n; i++) {
		const struct entry *e = &c->e[i];
		kn_buf_printf(&out,
			      "%" PRIu64 " %" PRIu64 " %" PRId64 " %" PRId64
			      " %" PRId64 " %" PRId64 " %" PRId64 " %" PRId64
			      " %s\n",
			      e->dev, e->ino, e->size, e->mtime_s, e->mtime_ns,
			      e->ctime_s, e->ctime_ns, e->hashed_at, e->hex);
	}
	rc = kn_write_file_replace(c->path, out.data ? out.data : "",
				   out.len, 0600);
	kn_buf_release(&out);
	if (rc == 0)
		c->changed = false;
	return rc;
}

void digest_cache_free(struct digest_cache *c)
{
	if (!c)
		return;
	KN_FREE_ALL(c->path, c->e, c);
}
