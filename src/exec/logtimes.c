/*
 * When each line of a task's log arrived: TASK_DIR/output.times, written
 * by the shim beside output.log, so the log itself stays exactly the
 * bytes the task wrote. A record is 16 bytes, two little-endian int64s:
 * the log offset where one read from the task's pipe began and the wall
 * time of that read in ms. A line's time is that of the record with the
 * greatest offset at or before the line's first byte: the read that
 * brought that byte. The shim writes a record before the bytes it covers
 * (so a reader never sees log bytes without one) and only when a read
 * starts a line in a new millisecond, so a chatty task adds at most one
 * record per ms. The file rotates with the log.
 *
 * The reader takes the file as it finds it: records past the last whole
 * one are ignored, and offsets out of order (a file that is not the
 * shim's) give wrong times, never a read out of bounds.
 */
#include "exec.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define RECORD_BYTES 16
/* Records read at once, so a turn of a busy log costs few preads. */
#define BLOCK_RECORDS 256
/* A forward walk longer than this binary-searches instead. */
#define WALK_MAX 64

struct kn_log_times {
	int fd;
	int64_t n;          /* whole records in the file */
	int64_t block_first; /* index of block[0]; -1: nothing cached */
	int64_t block_n;
	int64_t block[BLOCK_RECORDS][2];
	int64_t last;       /* the record the previous lookup found */
};

static void put_le64(unsigned char *p, int64_t v)
{
	uint64_t u = (uint64_t)v;

	for (int i = 0; i < 8; i++)
		p[i] = (unsigned char)(u >> (8 * i));
}

static int64_t get_le64(const unsigned char *p)
{
	uint64_t u = 0;

	for (int i = 7; i >= 0; i--)
		u = (u << 8) | p[i];
	return (int64_t)u;
}

int kn_log_times_append(int fd, int64_t offset, int64_t ms)
{
	unsigned char rec[RECORD_BYTES];
	ssize_t n;

	put_le64(rec, offset);
	put_le64(rec + 8, ms);
	do
		n = write(fd, rec, sizeof(rec));
	while (n < 0 && errno == EINTR);
	if (n == (ssize_t)sizeof(rec))
		return 0;
	return n < 0 ? -errno : -EIO;
}

struct kn_log_times *kn_log_times_new(int fd)
{
	struct kn_log_times *lt = kn_xcalloc(1, sizeof(*lt));
	struct stat st;

	lt->fd = fd;
	lt->block_first = -1;
	if (fstat(fd, &st) == 0 && st.st_size > 0)
		lt->n = st.st_size / RECORD_BYTES;
	return lt;
}

void kn_log_times_free(struct kn_log_times *lt)
{
	if (!lt)
		return;
	close(lt->fd);
	free(lt);
}

int64_t kn_log_times_count(const struct kn_log_times *lt)
{
	return lt->n;
}

/* Record i's offset (field 0) or time (field 1); i < lt->n. */
static int64_t field(struct kn_log_times *lt, int64_t i, int f)
{
	if (lt->block_first < 0 || i < lt->block_first ||
	    i >= lt->block_first + lt->block_n) {
		unsigned char raw[BLOCK_RECORDS * RECORD_BYTES];
		int64_t want = lt->n - i < BLOCK_RECORDS ? lt->n - i
							: BLOCK_RECORDS;
		ssize_t got = pread(lt->fd, raw, (size_t)want * RECORD_BYTES,
				    (off_t)(i * RECORD_BYTES));

		lt->block_first = i;
		lt->block_n = got > 0 ? got / RECORD_BYTES : 0;
		for (int64_t k = 0; k < lt->block_n; k++) {
			lt->block[k][0] = get_le64(raw + k * RECORD_BYTES);
			lt->block[k][1] = get_le64(raw + k * RECORD_BYTES + 8);
		}
		/* Shorter than fstat said (truncated underneath): zeros. */
		if (lt->block_n == 0) {
			lt->block_first = -1;
			return 0;
		}
	}
	return lt->block[i - lt->block_first][f];
}

/* The greatest record whose offset is at most offset, or -1. */
static int64_t record_at(struct kn_log_times *lt, int64_t offset)
{
	int64_t lo = 0, hi = lt->n - 1, found = -1;

	if (lt->last >= 0 && lt->last < lt->n &&
	    field(lt, lt->last, 0) <= offset) {
		int64_t i = lt->last;

		for (int steps = 0; steps < WALK_MAX; steps++, i++)
			if (i + 1 >= lt->n || field(lt, i + 1, 0) > offset)
				return lt->last = i;
		lo = i;
	}
	while (lo <= hi) {
		int64_t mid = lo + (hi - lo) / 2;

		if (field(lt, mid, 0) <= offset) {
			found = mid;
			lo = mid + 1;
		} else {
			hi = mid - 1;
		}
	}
	lt->last = found;
	return found;
}

int64_t kn_log_times_at(struct kn_log_times *lt, int64_t offset)
{
	int64_t i;

	if (lt->n == 0)
		return 0;
	i = record_at(lt, offset);
	/* Before the first record (bytes the shim wrote before it
	   recorded): the first record's time is the nearest known. */
	return field(lt, i < 0 ? 0 : i, 1);
}

int64_t kn_log_times_since(struct kn_log_times *lt, int64_t ms)
{
	int64_t lo = 0, hi = lt->n - 1, found = -1;

	while (lo <= hi) {
		int64_t mid = lo + (hi - lo) / 2;

		if (field(lt, mid, 1) >= ms) {
			found = mid;
			hi = mid - 1;
		} else {
			lo = mid + 1;
		}
	}
	return found < 0 ? -1 : field(lt, found, 0);
}
