/*
 * The file:// blob store: blobs are files under a root directory.
 *
 * Every write goes to NAME.kiln-tmp-XXXXXX beside its target and is renamed into place (or linked, for create-only writes, so that
 * "already exists" is decided atomically by the kernel): readers see the
 * old blob or the whole new one, never part of one. Listings skip the
 * temporaries. Where the file system shares blocks (FICLONE: Btrfs, XFS)
 * a whole file is cloned, not copied, and hashed from the clone; elsewhere
 * on one file system (ext4, tmpfs) the kernel copies (copy_file_range,
 * as cp does: 0.4-0.8 CPU-seconds per GiB here, against 2-3 for a write
 * from a mapping of the source and 0.5-1.2 for read+write through a
 * buffer) and the hashing thread reads each copied span back from the
 * page cache. Between two file systems copies write from a mapping of
 * the source, 16 MiB at a time, with the SHA-256 on the hashing thread.
 *
 * Data files are not fsynced one by one: a killed process loses nothing
 * that reached the page cache, restore verifies every digest, and
 * kn_blob_sync (called by retention before it deletes anything) makes the
 * whole store durable, so a checkpoint is never deleted while its
 * successor exists only in memory.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/file.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <linux/fs.h>

#include "ckpt/internal.h"

#define TMP_MARK ".kiln-tmp-"
/* Buffers in the copy ring: one being read/written, two being hashed. */
#define RING 3

struct file_store {
	char *root;
	mode_t dir_mode, file_mode; /* 0700/0600 for a private store */
};

static struct file_store *fs_of(struct kn_blob_store *s)
{
	return s->impl;
}

static char *full_path(struct kn_blob_store *s, const char *name)
{
	return kn_asprintf("%s/%s", fs_of(s)->root, name);
}

static int make_parent(struct kn_blob_store *s, const char *path)
{
	char *dir = kn_xstrdup(path);
	char *slash = strrchr(dir, '/');
	int rc = 0;
	if (slash && slash != dir) {
		*slash = '\0';
		rc = kn_mkdir_p(dir, fs_of(s)->dir_mode);
	}
	free(dir);
	return rc;
}

/* A temporary beside target, its directory made: the fd, or -errno. */
static int open_temp(struct kn_blob_store *s, const char *target,
		     char **tmp_out)
{
	char *tmp;
	int fd = make_parent(s, target);

	if (fd < 0)
		return fd;
	tmp = kn_asprintf("%s" TMP_MARK "XXXXXX", target);
	fd = mkostemp(tmp, O_CLOEXEC);
	if (fd < 0) {
		int e = errno;
		free(tmp);
		return -e;
	}
	fchmod(fd, fs_of(s)->file_mode);
	/* Held while it is written: sweep_dead_temps spares it. */
	flock(fd, LOCK_EX);
	*tmp_out = tmp;
	return fd;
}

/*
 * Copy up to limit bytes (limit < 0: to the end) of in, from offset, to
 * out (or, when out < 0, only hash them), hashing on the side. The
 * source is mapped window by window and written from the mapping: one
 * copy (page cache to page cache) where read+write (dd) makes two, and
 * no buffer of our own to touch. A window
 * stays mapped until the hashing thread is done with it.
 */
static int copy_hashed(int in, int64_t offset, int out, int64_t limit,
		       char *hex, int64_t *copied, const char **failed_op)
{
	struct kn_hashpipe *hp = kn_hashpipe_start();
	struct {
		char *map;
		size_t len;
		uint64_t seq;
	} ring[RING] = {{0}};
	int64_t total = 0, end;
	struct stat st;
	int rc = 0;

	if (fstat(in, &st) < 0) {
		rc = -errno;
		*failed_op = "stat";
		goto out;
	}
	end = limit >= 0 && offset + limit < st.st_size ? offset + limit
							: st.st_size;
	for (unsigned i = 0; offset + total < end; i++) {
		int64_t pos = offset + total;
		int64_t aligned = pos & ~(int64_t)(sysconf(_SC_PAGESIZE) - 1);
		size_t n = (size_t)(end - pos) < KN_FILE_CHUNK
				   ? (size_t)(end - pos)
				   : KN_FILE_CHUNK;
		size_t maplen = n + (size_t)(pos - aligned);
		unsigned r = i % RING;
		char *map;

		if (ring[r].map) {
			kn_hashpipe_wait(hp, ring[r].seq);
			munmap(ring[r].map, ring[r].len);
			ring[r].map = NULL;
		}
		/* A mapping past the end of a file faults (SIGBUS): a source
		 * cut short under us is an error, checked just before. The
		 * contract makes committed checkpoints immutable, so only a
		 * misbehaving task gets here, and the window is tiny. */
		if (fstat(in, &st) < 0 || st.st_size < pos + (int64_t)n) {
			rc = -EIO;
			*failed_op = "source shrank while read";
			break;
		}
		map = mmap(NULL, maplen, PROT_READ, MAP_SHARED | MAP_POPULATE,
			   in, aligned);
		if (map == MAP_FAILED) {
			rc = -errno;
			*failed_op = "mmap";
			break;
		}
		ring[r].map = map;
		ring[r].len = maplen;
		rc = out >= 0 ? kn_write_all(out, map + (pos - aligned), n) : 0;
		if (rc < 0) {
			*failed_op = "write";
			break;
		}
		ring[r].seq = kn_hashpipe_submit(hp, map + (pos - aligned), n);
		total += (int64_t)n;
	}
out:
	kn_hashpipe_finish(hp, rc == 0 ? hex : NULL);
	for (unsigned r = 0; r < RING; r++)
		if (ring[r].map)
			munmap(ring[r].map, ring[r].len);
	if (rc == 0)
		*copied = total;
	return rc;
}

/*
 * Copy up to limit bytes (limit < 0: to the end) of in, from offset, to
 * the start of out in the kernel (copy_file_range: page cache to page
 * cache, no byte through this process), 16 MiB at a time, and hash each
 * span as it lands by reading it back from out on the hashing thread.
 * out is our own fresh file, so the digest is that of the bytes kept
 * whatever happens to in, and a source cut short is a short copy (an
 * error), never a fault. 1 when the kernel does not copy between these
 * two (another file system: EXDEV; one without it: EOPNOTSUPP, EINVAL;
 * or a file it reads as empty, as procfs): nothing was written, and the
 * caller copies through memory. KILN_TEST_COPY_THROUGH_MEMORY=1 forces
 * that answer, for the tests of the other path only. write_early: out
 * is bound for a sync (a store's blob), so each span's writeback starts
 * as it lands, beside the hash, and the sync finds little left to
 * write; a copy no one syncs is left to the kernel's own pace.
 */
static int range_hashed(int in, int64_t offset, int out, int64_t limit,
			bool write_early, char *hex, int64_t *copied,
			const char **failed_op)
{
	struct kn_hashpipe *hp;
	int64_t total = 0, end;
	loff_t in_pos = offset, out_pos = 0;
	struct stat st;
	int rc = 0, flags = fcntl(out, F_GETFL);

	if ((flags & O_ACCMODE) != O_RDWR || getenv("KILN_TEST_COPY_THROUGH_MEMORY"))
		return 1;
	if (fstat(in, &st) < 0) {
		*failed_op = "stat";
		return -errno;
	}
	end = limit >= 0 && offset + limit < st.st_size ? offset + limit
							: st.st_size;
	if (end <= offset)
		return 1;
	hp = kn_hashpipe_start();
	while (offset + total < end) {
		size_t want = (size_t)(end - offset - total) < KN_FILE_CHUNK
				      ? (size_t)(end - offset - total)
				      : KN_FILE_CHUNK;
		int64_t at = out_pos;
		ssize_t n = copy_file_range(in, &in_pos, out, &out_pos, want, 0);

		if (n < 0 && errno == EINTR)
			continue;
		if (total == 0 && (n == 0 || (n < 0 && (errno == EXDEV ||
							errno == EOPNOTSUPP ||
							errno == EINVAL ||
							errno == ENOSYS)))) {
			rc = 1;
			break;
		}
		if (n <= 0) {
			rc = n < 0 ? -errno : -EIO;
			*failed_op = n < 0 ? "copy_file_range"
					   : "source shrank while read";
			break;
		}
		kn_hashpipe_submit_file(hp, out, at, (size_t)n);
		if (write_early)
			sync_file_range(out, at, n, SYNC_FILE_RANGE_WRITE);
		total += n;
	}
	if (kn_hashpipe_finish(hp, rc == 0 ? hex : NULL) < 0 && rc == 0) {
		rc = -EIO;
		*failed_op = "reading the copy back";
	}
	if (rc == 0)
		*copied = total;
	return rc;
}

/* kn_copy_fd_hashed where there is no clone: pread, write, hash beside. */
static int copy_fd_hashed(int in, int out, int64_t len, char *hex,
			  int64_t *copied, const char **failed_op)
{
	struct kn_hashpipe *hp = kn_hashpipe_start();
	struct {
		char *buf;
		uint64_t seq;
		bool hashing;
	} ring[RING] = {{0}};
	int64_t total = 0;
	int rc = 0;

	for (unsigned i = 0; total < len; i++) {
		unsigned r = i % RING;
		size_t want = (size_t)(len - total) < KN_FILE_CHUNK
				      ? (size_t)(len - total)
				      : KN_FILE_CHUNK;
		ssize_t n;

		if (ring[r].hashing)
			kn_hashpipe_wait(hp, ring[r].seq);
		if (!ring[r].buf)
			ring[r].buf = kn_xmalloc(KN_FILE_CHUNK);
		n = kn_pread(in, ring[r].buf, want, total);
		if (n <= 0) {
			rc = n < 0 ? (int)n : -EIO;
			*failed_op = n < 0 ? "read" : "source shrank while read";
			ring[r].hashing = false;
			break;
		}
		ring[r].seq = kn_hashpipe_submit(hp, ring[r].buf, (size_t)n);
		ring[r].hashing = true;
		rc = kn_write_all(out, ring[r].buf, (size_t)n);
		if (rc < 0) {
			*failed_op = "write";
			break;
		}
		total += n;
	}
	kn_hashpipe_finish(hp, rc == 0 ? hex : NULL);
	for (unsigned r = 0; r < RING; r++)
		free(ring[r].buf);
	if (rc == 0)
		*copied = total;
	return rc;
}

/*
 * in's whole file cloned into out (a fresh temporary), sharing its
 * blocks, where the file system can (Btrfs, XFS with reflink), then cut
 * to len bytes (len < 0: as it is) and hashed from the clone: a file of
 * ours that no one else can change, so the digest is that of the bytes
 * kept, whatever happens to in afterwards. 1 when the file system cannot
 * clone (ext4 and tmpfs say EOPNOTSUPP, two file systems EXDEV): nothing
 * was done and the caller copies.
 */
static int clone_hashed(int in, int out, int64_t len, char *hex,
			int64_t *copied, const char **failed_op)
{
	struct stat st;

	if (ioctl(out, FICLONE, in) < 0)
		return 1;
	if (fstat(out, &st) < 0) {
		*failed_op = "stat";
		return -errno;
	}
	if (len < 0)
		len = st.st_size;
	if (st.st_size < len) {
		*failed_op = "source shrank while read";
		return -EIO;
	}
	if (st.st_size > len && ftruncate(out, len) < 0) {
		*failed_op = "truncate";
		return -errno;
	}
	return copy_hashed(out, 0, -1, len, hex, copied, failed_op);
}

/*
 * Up to limit bytes (limit < 0: to the end) of in from offset into out,
 * a fresh temporary, hashed, by the cheapest way the file systems allow:
 * a clone of a whole file, else the kernel's copy, else through a
 * mapping. write_early as for range_hashed.
 */
static int copy_cheapest(int in, int64_t offset, int out, int64_t limit,
			 bool write_early, char *hex, int64_t *copied,
			 const char **failed_op)
{
	int rc = offset == 0 && limit < 0
			 ? clone_hashed(in, out, -1, hex, copied, failed_op)
			 : 1;

	if (rc == 1)
		rc = range_hashed(in, offset, out, limit, write_early, hex,
				  copied, failed_op);
	if (rc == 1)
		rc = copy_hashed(in, offset, out, limit, hex, copied,
				 failed_op);
	return rc;
}

int kn_copy_fd_hashed(int in, int out, int64_t len, char *hex,
		      int64_t *copied, const char **failed_op)
{
	int64_t n = 0;
	int rc = clone_hashed(in, out, len, hex, copied, failed_op);

	if (rc <= 0)
		return rc;
	rc = range_hashed(in, 0, out, len, true, hex, &n, failed_op);
	if (rc == 1)
		return copy_fd_hashed(in, out, len, hex, copied, failed_op);
	if (rc == 0 && n < len) {
		*failed_op = "source shrank while read";
		return -EIO;
	}
	if (rc == 0)
		*copied = n;
	return rc;
}

/*
 * Remove the temporaries of target that writers killed mid-write left:
 * a redone write leaves no trace of the one before it. A temporary is
 * dead when no one holds its lock (a writer holds it until its rename,
 * and the lock goes with the process) and it is older than the moment
 * between a writer creating it and locking it.
 */
static void sweep_dead_temps(const char *target)
{
	const char *slash = strrchr(target, '/');
	char *dir_path = kn_asprintf("%.*s", (int)(slash - target), target);
	char *prefix = kn_asprintf("%s" TMP_MARK, slash + 1);
	DIR *dir = opendir(dir_path);
	struct dirent *e;
	time_t now = time(NULL);

	while (dir && (e = readdir(dir))) {
		struct stat st;
		int fd;

		if (strncmp(e->d_name, prefix, strlen(prefix)) != 0)
			continue;
		fd = openat(dirfd(dir), e->d_name,
			    O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
		if (fd < 0)
			continue;
		if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) &&
		    now - st.st_mtime >= 5 &&
		    flock(fd, LOCK_EX | LOCK_NB) == 0)
			unlinkat(dirfd(dir), e->d_name, 0);
		close(fd);
	}
	if (dir)
		closedir(dir);
	KN_FREE_ALL(prefix, dir_path);
}

/* Put the finished temporary in place: rename, or link for create-only. */
static int commit_temp_locked(const char *tmp, const char *target,
			      unsigned flags, const char *name,
			      struct kn_error *err)
{
	if (flags & KN_BLOB_CREATE_ONLY) {
		if (link(tmp, target) < 0) {
			int e = errno;
			unlink(tmp);
			if (e == EEXIST)
				return kn_errorf(err, KN_ECONFLICT, "name",
						 "blob %s: already exists",
						 name);
			return kn_errorf(err, kn_errcode_for_write(-e), NULL,
					 "blob %s: link: %s", name,
					 strerror(e));
		}
		unlink(tmp);
		return 0;
	}
	if (rename(tmp, target) < 0) {
		int e = errno;
		unlink(tmp);
		return kn_errorf(err, kn_errcode_for_write(-e), NULL,
				 "blob %s: rename: %s", name, strerror(e));
	}
	return 0;
}

/* The same, then close fd, the temporary's descriptor: its lock held
   till then keeps sweep_dead_temps off it. */
static int commit_temp(int fd, const char *tmp, const char *target,
		       unsigned flags, const char *name, struct kn_error *err)
{
	int rc = commit_temp_locked(tmp, target, flags, name, err);

	close(fd);
	if (rc == 0)
		sweep_dead_temps(target);
	return rc;
}

static int fs_put_file(struct kn_blob_store *s, const char *name,
		       const char *path, unsigned flags, char *sha256_hex,
		       int64_t *size_out, struct kn_error *err)
{
	char *target = full_path(s, name), *tmp = NULL;
	char hex[KN_SHA256_HEX_LEN + 1];
	const char *op = "";
	int64_t copied = 0;
	int in = -1, out = -1, rc;

	in = open(path, O_RDONLY | O_CLOEXEC);
	if (in < 0) {
		rc = kn_errorf(err, errno == ENOENT ? KN_ENOTFOUND : KN_EIO,
			       "path", "%s: %s", path, strerror(errno));
		goto out;
	}
	posix_fadvise(in, 0, 0, POSIX_FADV_SEQUENTIAL);
	rc = open_temp(s, target, &tmp);
	if (rc < 0) {
		rc = kn_errorf(err, kn_errcode_for_write(rc), NULL,
			       "blob %s: %s", name, strerror(-rc));
		goto out;
	}
	out = rc;
	rc = copy_cheapest(in, 0, out, -1, true, hex, &copied, &op);
	if (rc < 0) {
		close(out);
		unlink(tmp);
		rc = kn_errorf(err, kn_errcode_for_write(rc), NULL,
			       "blob %s from %s: %s: %s", name, path, op,
			       strerror(-rc));
		goto out;
	}
	rc = commit_temp(out, tmp, target, flags, name, err);
	if (rc == 0) {
		if (sha256_hex)
			memcpy(sha256_hex, hex, sizeof(hex));
		if (size_out)
			*size_out = copied;
	}
out:
	if (in >= 0)
		close(in);
	KN_FREE_ALL(tmp, target);
	return rc;
}

/*
 * A finished file of the caller's own put in place by a second name,
 * create-only (link decides "already exists" atomically, as for a copy's
 * temporary), with no byte copied. -EXDEV, quietly, when path is on
 * another file system.
 */
static int fs_put_link(struct kn_blob_store *s, const char *name,
		       const char *path, struct kn_error *err)
{
	char *target = full_path(s, name);
	int rc = make_parent(s, target);

	if (rc == 0 && chmod(path, fs_of(s)->file_mode) < 0)
		rc = -errno;
	if (rc == 0 && link(path, target) < 0)
		rc = -errno;
	if (rc == -EEXIST)
		rc = kn_errorf(err, KN_ECONFLICT, "name",
			       "blob %s: already exists", name);
	else if (rc < 0 && rc != -EXDEV)
		rc = kn_errorf(err, kn_errcode_for_write(rc), NULL,
			       "blob %s: %s", name, strerror(-rc));
	free(target);
	return rc;
}

static int fs_put_bytes(struct kn_blob_store *s, const char *name,
			const void *data, size_t len, unsigned flags,
			struct kn_error *err)
{
	char *target = full_path(s, name), *tmp = NULL;
	int fd, rc;

	rc = open_temp(s, target, &tmp);
	if (rc < 0) {
		rc = kn_errorf(err, kn_errcode_for_write(rc), NULL,
			       "blob %s: %s", name, strerror(-rc));
		goto out;
	}
	fd = rc;
	rc = kn_write_all(fd, data, len);
	if (rc < 0) {
		close(fd);
		unlink(tmp);
		rc = kn_errorf(err, kn_errcode_for_write(rc), NULL,
			       "blob %s: write: %s", name, strerror(-rc));
		goto out;
	}
	rc = commit_temp(fd, tmp, target, flags, name, err);
out:
	KN_FREE_ALL(tmp, target);
	return rc;
}

static int fs_get_file(struct kn_blob_store *s, const char *name,
		       const char *path, int64_t offset, int64_t length,
		       char *sha256_hex, struct kn_error *err)
{
	char *src = full_path(s, name), *tmp = NULL;
	char hex[KN_SHA256_HEX_LEN + 1];
	const char *op = "";
	struct stat st;
	int64_t copied = 0;
	int in = -1, out, rc;

	in = open(src, O_RDONLY | O_CLOEXEC);
	if (in < 0 || fstat(in, &st) < 0 || !S_ISREG(st.st_mode)) {
		rc = kn_errorf(err, (in < 0 && errno != ENOENT) ? KN_EIO
				     : KN_ENOTFOUND, "name",
			       "blob %s: not found", name);
		goto out;
	}
	if (offset > 0 && offset >= st.st_size) {
		rc = kn_errorf(err, KN_EINVAL, "offset",
			       "blob %s: range starts at %lld, past its %lld "
			       "bytes", name, (long long)offset,
			       (long long)st.st_size);
		goto out;
	}
	posix_fadvise(in, 0, 0, POSIX_FADV_SEQUENTIAL);
	rc = open_temp(s, path, &tmp);
	if (rc < 0) {
		rc = kn_errorf(err, KN_EIO, "path", "%s: %s", path,
			       strerror(-rc));
		goto out;
	}
	out = rc;
	rc = copy_cheapest(in, offset, out, length, false, hex, &copied, &op);
	close(out);
	if (rc == 0 && rename(tmp, path) < 0) {
		rc = -errno;
		op = "rename";
	}
	if (rc < 0) {
		unlink(tmp);
		rc = kn_errorf(err, KN_EIO, NULL, "blob %s to %s: %s: %s", name,
			       path, op, strerror(-rc));
		goto out;
	}
	if (sha256_hex)
		memcpy(sha256_hex, hex, sizeof(hex));
out:
	if (in >= 0)
		close(in);
	KN_FREE_ALL(tmp, src);
	return rc;
}

/* Walk dir (relative name rel) adding files whose names start with prefix. */
static int walk(const char *root, const char *rel, const char *prefix,
		struct kn_blob_list *out)
{
	char *dir = *rel ? kn_asprintf("%s/%s", root, rel) : kn_xstrdup(root);
	DIR *d = opendir(dir);
	struct dirent *e;
	int rc = 0;

	if (!d) {
		rc = (errno == ENOENT || errno == ENOTDIR) ? 0 : -errno;
		free(dir);
		return rc;
	}
	while (rc == 0 && (e = readdir(d))) {
		char *name;
		struct stat st;
		size_t plen = strlen(prefix), nlen;

		if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0 ||
		    strstr(e->d_name, TMP_MARK))
			continue;
		name = *rel ? kn_asprintf("%s/%s", rel, e->d_name)
			    : kn_xstrdup(e->d_name);
		nlen = strlen(name);
		/* Descend only where the prefix can still match. */
		if (strncmp(name, prefix, nlen < plen ? nlen : plen) == 0 &&
		    fstatat(dirfd(d), e->d_name, &st, 0) == 0) {
			if (S_ISDIR(st.st_mode))
				rc = walk(root, name, prefix, out);
			else if (S_ISREG(st.st_mode) && nlen >= plen)
				kn_blob_list_add(out, name, st.st_size);
		}
		free(name);
	}
	closedir(d);
	free(dir);
	return rc;
}

static int fs_list(struct kn_blob_store *s, const char *prefix,
		   struct kn_blob_list *out, struct kn_error *err)
{
	int rc = walk(fs_of(s)->root, "", prefix, out);
	if (rc < 0)
		return kn_errorf(err, KN_EIO, NULL, "list %s: %s", prefix,
				 strerror(-rc));
	return 0;
}

static int fs_del(struct kn_blob_store *s, const char *name,
		  struct kn_error *err)
{
	char *path = full_path(s, name);
	size_t root_len = strlen(fs_of(s)->root);
	int rc = 0;

	if (unlink(path) < 0) {
		rc = kn_errorf(err, errno == ENOENT ? KN_ENOTFOUND : KN_EIO,
			       "name", "blob %s: %s", name, strerror(errno));
		goto out;
	}
	/* Tidy now-empty directories up to the root; rmdir fails on the
	 * first one that still holds something, which ends the climb. */
	for (char *slash = strrchr(path, '/');
	     slash && (size_t)(slash - path) > root_len;
	     slash = strrchr(path, '/')) {
		*slash = '\0';
		if (rmdir(path) < 0)
			break;
	}
out:
	free(path);
	return rc;
}

static int fs_stat(struct kn_blob_store *s, const char *name,
		   struct kn_blob_info *out, struct kn_error *err)
{
	char *path = full_path(s, name);
	struct stat st;
	int rc = 0;

	if (stat(path, &st) < 0 || !S_ISREG(st.st_mode))
		rc = kn_errorf(err, KN_ENOTFOUND, "name", "blob %s: not found",
			       name);
	else {
		out->name = NULL;
		out->size = st.st_size;
	}
	free(path);
	return rc;
}

static int fs_sync(struct kn_blob_store *s, struct kn_error *err)
{
	int fd = open(fs_of(s)->root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	int rc = 0;

	if (fd < 0)
		return errno == ENOENT ? 0
				       : kn_errorf(err, KN_EIO, NULL, "%s: %s",
						   fs_of(s)->root,
						   strerror(errno));
	if (syncfs(fd) < 0)
		rc = kn_errorf(err, KN_EIO, NULL, "sync %s: %s", fs_of(s)->root,
			       strerror(errno));
	close(fd);
	return rc;
}

static void fs_free(struct kn_blob_store *s)
{
	struct file_store *fs = s->impl;
	if (fs)
		free(fs->root);
	free(fs);
}

const struct kn_blob_store_ops kn_file_store_ops = {
	.scheme = "file",
	/* Copies are bound by SHA-256 on one core; files in parallel use
	 * the others. No call touches shared state. */
	.concurrency = 4,
	.put_file = fs_put_file,
	.put_bytes = fs_put_bytes,
	.put_link = fs_put_link,
	.get_file = fs_get_file,
	.list = fs_list,
	.del = fs_del,
	.stat = fs_stat,
	.local_path = full_path,
	.sync = fs_sync,
	.free = fs_free,
};

int kn_file_store_open(const char *url, bool private_files,
		       struct kn_blob_store *store, struct kn_error *err)
{
	const char *path = url + strlen("file://");
	struct file_store *fs;
	size_t len;

	if (path[0] != '/')
		return kn_errorf(err, KN_EINVAL, "url",
				 "store url: file:// needs an absolute path "
				 "(file:///dir)");
	len = strlen(path);
	while (len > 1 && path[len - 1] == '/')
		len--;
	fs = kn_xcalloc(1, sizeof(*fs));
	fs->root = strndup(path, len);
	if (!fs->root)
		abort();
	fs->dir_mode = private_files ? 0700 : 0755;
	fs->file_mode = private_files ? 0600 : 0644;
	store->ops = &kn_file_store_ops;
	store->impl = fs;
	store->url = kn_asprintf("file://%s", fs->root);
	return 0;
}
