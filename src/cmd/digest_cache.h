/*
 * The digests of files this user pushed before, by the file's identity
 * (digest_cache.c), for `kiln model push`.
 */
#ifndef KILN_CMD_DIGEST_CACHE_H
#define KILN_CMD_DIGEST_CACHE_H

#include <stdbool.h>
#include <sys/stat.h>
#include <time.h>

/* The most files remembered; the least recently hashed go first. */
#define DIGEST_CACHE_MAX 65536

/*
 * A file last changed less than this before its hashing ended is
 * remembered as one to check: a write in the same tick of the file
 * system's clock would have left its times as they were.
 */
#define DIGEST_CACHE_SETTLE_S 2

enum digest_known {
	DIGEST_UNKNOWN, /* not hashed before in this state */
	DIGEST_KNOWN,   /* hashed before in this state, long after a change */
	DIGEST_CHECK,   /* the same, but too near a change: hash it again */
};

struct digest_cache;

/* $XDG_CACHE_HOME/kiln/digests, else $HOME/.cache/kiln/digests; NULL
   when neither is set. malloc'd. */
char *digest_cache_default_path(void);

/*
 * The cache kept at path (NULL: one that remembers nothing). A missing,
 * unreadable or oversized file is an empty cache, and a line that does
 * not parse is skipped: it only saves reading files again.
 */
struct digest_cache *digest_cache_load(const char *path);

/* Whether the file whose stat is st was hashed before in exactly this
   state; hex filled when known. */
enum digest_known digest_cache_find(const struct digest_cache *c,
				    const struct stat *st, char hex[65]);

/* Remember hex for the file in state st, hashed by hashed_at (what
   replaces what the cache held of the file). */
void digest_cache_put(struct digest_cache *c, const struct stat *st,
		      const char *hex, time_t hashed_at);

/* Write the cache back (private to its user), when anything was put:
   0, or -errno. */
int digest_cache_save(struct digest_cache *c);

void digest_cache_free(struct digest_cache *c);

#endif
