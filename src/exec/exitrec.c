/*
 * The shim's exit record, TASK_DIR/exit.rec: the task's exit where a full
 * disk cannot stop the shim from writing it. The shim writes the record
 * at its full size before the task starts, saying "no exit yet"; when the
 * task ends it overwrites the same bytes in place, which needs no new
 * blocks on any file system (nor new pages on tmpfs): the first write
 * took the room (a delayed allocation reserves it then), so a full disk
 * refuses the start, never the exit.
 *
 * Only the exit is synced, with the directory that names the record: a
 * "no exit yet" record tells a server started after a crash of the
 * machine nothing it would not conclude without one (every task of that
 * machine died with it), so the start does not wait for the disk.
 *
 * Layout, EXEC_EXIT_RECORD_SIZE bytes: the magic "KNEXIT01", the
 * payload's length (u32, little endian), 4 zero bytes, an FNV-1a 64
 * checksum of length and payload (u64, little endian), the payload (the
 * status JSON, as status.json holds it; none while the task runs), zeros.
 * A record cut short or half written fails the magic, length or checksum
 * and is not taken for an exit.
 */
#include "internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAGIC "KNEXIT01"
#define HEADER 24

static void put_le(unsigned char *p, uint64_t v, int bytes)
{
	for (int i = 0; i < bytes; i++)
		p[i] = (unsigned char)(v >> (8 * i));
}

static uint64_t get_le(const unsigned char *p, int bytes)
{
	uint64_t v = 0;

	for (int i = bytes - 1; i >= 0; i--)
		v = v << 8 | p[i];
	return v;
}

/* Over the length field and the payload: a torn write changes one. */
static uint64_t checksum(const unsigned char *rec, size_t len)
{
	uint64_t h = 14695981039346656037ULL;

	for (size_t i = 8; i < 12; i++)
		h = (h ^ rec[i]) * 1099511628211ULL;
	for (size_t i = 0; i < len; i++)
		h = (h ^ rec[HEADER + i]) * 1099511628211ULL;
	return h;
}

/* The whole record at offset 0: in place once it exists. */
static int put_record(int fd, const char *payload, size_t len)
{
	unsigned char rec[EXEC_EXIT_RECORD_SIZE];
	size_t done = 0;

	if (len > EXEC_EXIT_RECORD_SIZE - HEADER)
		return -E2BIG;
	memset(rec, 0, sizeof(rec));
	memcpy(rec, MAGIC, 8);
	put_le(rec + 8, len, 4);
	memcpy(rec + HEADER, payload, len);
	put_le(rec + 16, checksum(rec, len), 8);
	while (done < sizeof(rec)) {
		ssize_t n = pwrite(fd, rec + done, sizeof(rec) - done,
				   (off_t)done);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return n < 0 ? -errno : -EIO;
		done += (size_t)n;
	}
	return 0;
}

int exec_exit_record_prepare(const char *task_dir, int *fd_out)
{
	char *path = kn_asprintf("%s/" EXEC_EXIT_RECORD, task_dir);
	int fd, rc;

	/* O_NOFOLLOW: the task may have left a link under this name. No
	   O_TRUNC: a record the start reserved is written over in place,
	   which needs no free space; anything beyond it is cut after. */
	fd = open(path, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
	free(path);
	if (fd < 0)
		return -errno;
	rc = put_record(fd, "", 0);
	if (rc == 0 && ftruncate(fd, EXEC_EXIT_RECORD_SIZE) < 0)
		rc = -errno;
	if (rc == 0) {
		*fd_out = fd;
		return 0;
	}
	close(fd);
	return rc;
}

int exec_exit_record_write(const char *task_dir, int fd, const char *payload,
			   size_t len)
{
	int rc, dfd;

	if (len == 0)
		return -EINVAL; /* an empty payload means "no exit yet" */
	rc = put_record(fd, payload, len);
	if (rc == 0 && fdatasync(fd) < 0)
		rc = -errno;
	if (rc < 0)
		return rc;
	/* The name, made unsynced before the task, must survive too. */
	dfd = open(task_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd < 0)
		return -errno;
	if (fsync(dfd) < 0)
		rc = -errno;
	close(dfd);
	return rc;
}

int exec_exit_record_read(const char *task_dir, char **payload,
			  struct kn_error *err)
{
	const unsigned char *rec;
	char *text = NULL;
	size_t n = 0, len;
	int rc;

	rc = kn_task_file_read(task_dir, EXEC_EXIT_RECORD,
			       EXEC_EXIT_RECORD_SIZE, &text, &n, err);
	if (rc < 0)
		return rc;
	rec = (const unsigned char *)text;
	len = n >= HEADER ? (size_t)get_le(rec + 8, 4) : 0;
	if (n != EXEC_EXIT_RECORD_SIZE || memcmp(rec, MAGIC, 8) != 0 ||
	    len > EXEC_EXIT_RECORD_SIZE - HEADER ||
	    get_le(rec + 16, 8) != checksum(rec, len)) {
		free(text);
		kn_errorf(err, KN_EIO, NULL, "%s/" EXEC_EXIT_RECORD " is torn "
			  "or not an exit record", task_dir);
		return -EBADMSG;
	}
	if (len == 0) {
		free(text);
		kn_errorf(err, KN_ENOTFOUND, NULL, "%s/" EXEC_EXIT_RECORD
			  " holds no exit yet", task_dir);
		return -ENOENT;
	}
	memmove(text, text + HEADER, len);
	text[len] = '\0';
	*payload = text;
	return 0;
}
