/*
 * Parallel file hashing: one thread per CPU takes whole files from a
 * shared index (SHA-256 cannot split one file), reading each with large
 * read(2)s after posix_fadvise(SEQUENTIAL) so the kernel reads ahead
 * while OpenSSL's EVP sha256 (SHA-NI where the CPU has it) runs.
 */
#include "registry/registry.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <openssl/evp.h>

/* 1-4 MiB reads hashed a cached file fastest here, ahead of 64-256 KiB
   reads and of mmap (docs/benchmarks.md, bench/verify). */
#define HASH_READ (4u << 20)
#define PROGRESS_STEP (64 << 20)

struct pool {
	struct kn_hash_item *items;
	size_t n;
	size_t next; /* under lock */
	int64_t done, total, reported;
	kn_hash_progress progress;
	void *arg;
	pthread_mutex_t lock;
};

static void hash_one(struct pool *p, struct kn_hash_item *it, char *buf)
{
	EVP_MD_CTX *ctx = EVP_MD_CTX_new();
	unsigned char md[32];
	unsigned int mdlen = 0;
	int64_t unreported = 0;
	int fd = open(it->path, O_RDONLY | O_CLOEXEC);

	it->size = 0;
	it->error = 0;
	if (fd < 0) {
		it->error = -errno;
		goto out;
	}
	posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
	EVP_DigestInit_ex(ctx, EVP_sha256(), NULL);
	for (;;) {
		ssize_t n = kn_pread(fd, buf, HASH_READ, it->size);
		if (n < 0) {
			it->error = (int)n;
			break;
		}
		if (n == 0)
			break;
		EVP_DigestUpdate(ctx, buf, (size_t)n);
		it->size += n;
		unreported += n;
		if (p->progress && unreported >= PROGRESS_STEP) {
			pthread_mutex_lock(&p->lock);
			p->done += unreported;
			p->progress(p->done, p->total, p->arg);
			pthread_mutex_unlock(&p->lock);
			unreported = 0;
		}
	}
	close(fd);
	if (it->error == 0) {
		EVP_DigestFinal_ex(ctx, md, &mdlen);
		for (unsigned i = 0; i < mdlen; i++)
			snprintf(it->sha256 + 2 * i, 3, "%02x", md[i]);
	}
	if (p->progress && unreported) {
		pthread_mutex_lock(&p->lock);
		p->done += unreported;
		p->progress(p->done, p->total, p->arg);
		pthread_mutex_unlock(&p->lock);
	}
out:
	EVP_MD_CTX_free(ctx);
}

static void *worker(void *arg)
{
	struct pool *p = arg;
	char *buf = kn_xmalloc(HASH_READ);

	for (;;) {
		size_t i;
		pthread_mutex_lock(&p->lock);
		i = p->next++;
		pthread_mutex_unlock(&p->lock);
		if (i >= p->n)
			break;
		hash_one(p, &p->items[i], buf);
	}
	free(buf);
	return NULL;
}

int kn_hash_threads_default(void)
{
	long n = sysconf(_SC_NPROCESSORS_ONLN);
	cpu_set_t set;

	if (sched_getaffinity(0, sizeof(set), &set) == 0 && CPU_COUNT(&set) > 0)
		n = CPU_COUNT(&set);
	return n > 0 ? (int)n : 1;
}

void kn_hash_files(struct kn_hash_item *items, size_t n, int threads,
		   int64_t total, kn_hash_progress progress, void *arg)
{
	struct pool p = {.items = items, .n = n, .total = total,
			 .progress = progress, .arg = arg};

	if (threads < 1)
		threads = 1;
	if ((size_t)threads > n)
		threads = (int)n;
	pthread_mutex_init(&p.lock, NULL);
	kn_run_threads(threads, worker, &p);
	pthread_mutex_destroy(&p.lock);
}
