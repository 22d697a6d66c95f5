/*
 * The peers of `kiln bench all_reduce` in bench/coll/run.py, timed the
 * way kiln bench (and nccl-tests) time: warm-up calls at the largest and
 * smallest sizes, then per size a barrier, ITERS calls back to back, the
 * elapsed time over ITERS, averaged over the ranks.
 *
 *   mpirun -np N mpi_allreduce MIN MAX ITERS   OpenMPI's MPI_Allreduce
 *                                              (float, sum, out of place)
 *   mpi_allreduce --memcpy MIN MAX ITERS       one thread's memcpy
 *
 * Sizes double from MIN to MAX bytes. One line per size on stdout:
 * "bytes seconds GB/s", where GB/s is the bus bandwidth for MPI_Allreduce
 * (bytes / time * 2(n-1)/n, as kiln bench reports it) and bytes copied
 * per second for memcpy. Buffers are allocated once at the largest size
 * and written before timing, for both, as kiln bench does.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int memcpy_sweep(size_t min, size_t max, int iters)
{
	char *src = malloc(max), *dst = malloc(max);

	if (!src || !dst)
		return 1;
	memset(src, 1, max);
	memset(dst, 2, max);
	for (int i = 0; i < 5; i++)
		memcpy(dst, src, max);
	for (size_t bytes = min; bytes <= max; bytes *= 2) {
		double t0 = now_s(), sec;

		for (int i = 0; i < iters; i++) {
			memcpy(dst, src, bytes);
			/* Keep the copies: the compiler may not drop them. */
			__asm__ volatile("" : : "r"(dst) : "memory");
		}
		sec = (now_s() - t0) / iters;
		printf("%zu %.9f %.4f\n", bytes, sec, (double)bytes / 1e9 / sec);
	}
	free(src);
	free(dst);
	return 0;
}

static void run(float *send, float *recv, size_t bytes, int calls)
{
	for (int i = 0; i < calls; i++)
		MPI_Allreduce(send, recv, (int)(bytes / sizeof(float)),
			      MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
}

static int allreduce_sweep(size_t min, size_t max, int iters)
{
	float *send = malloc(max), *recv = malloc(max);
	int rank, n;

	if (!send || !recv)
		return 1;
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &n);
	memset(send, 0, max);
	memset(recv, 0, max);
	run(send, recv, max, 5);
	run(send, recv, min, 5);
	for (size_t bytes = min; bytes <= max; bytes *= 2) {
		double t0, sec, total;

		MPI_Barrier(MPI_COMM_WORLD);
		t0 = now_s();
		run(send, recv, bytes, iters);
		sec = (now_s() - t0) / iters;
		MPI_Allreduce(&sec, &total, 1, MPI_DOUBLE, MPI_SUM,
			      MPI_COMM_WORLD);
		sec = total / n;
		if (rank == 0)
			printf("%zu %.9f %.4f\n", bytes, sec,
			       (double)bytes / 1e9 / sec * 2.0 * (n - 1) / n);
	}
	free(send);
	free(recv);
	return 0;
}

int main(int argc, char **argv)
{
	int memcpy_mode = argc == 5 && !strcmp(argv[1], "--memcpy");
	int rc;

	if (argc != 4 && !memcpy_mode) {
		fprintf(stderr, "usage: mpi_allreduce [--memcpy] MIN MAX ITERS\n");
		return 2;
	}
	argv += memcpy_mode;
	if (memcpy_mode)
		return memcpy_sweep(strtoull(argv[1], NULL, 10),
				    strtoull(argv[2], NULL, 10), atoi(argv[3]));
	MPI_Init(&argc, &argv);
	rc = allreduce_sweep(strtoull(argv[1], NULL, 10),
			     strtoull(argv[2], NULL, 10), atoi(argv[3]));
	MPI_Finalize();
	return rc;
}
