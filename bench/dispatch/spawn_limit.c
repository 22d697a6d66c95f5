/*
 * The ceiling for dispatch on this machine: fork, exec /bin/true and wait
 * for it, as fast as one process can, N times (default 2,000). No
 * scheduler, no store, no shim: what any launcher pays at least per task.
 * Prints "spawns N seconds S per_s R" on one line, which run.py reads.
 *
 * Measured with CLOCK_MONOTONIC around the whole loop. vfork-free on
 * purpose: kiln's shims start with fork and exec too.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	char *end = NULL;
	long n = argc > 1 ? strtol(argv[1], &end, 10) : 2000;
	struct timespec a, b;
	double s;

	if (argc > 2 || (end && *end) || n < 1 || n > 10000000) {
		fprintf(stderr, "usage: spawn-limit [COUNT 1..10000000]\n");
		return 2;
	}
	clock_gettime(CLOCK_MONOTONIC, &a);
	for (long i = 0; i < n; i++) {
		int status;
		pid_t pid = fork();

		if (pid < 0) {
			perror("fork");
			return 1;
		}
		if (pid == 0) {
			execl("/bin/true", "true", (char *)NULL);
			_exit(127);
		}
		while (waitpid(pid, &status, 0) < 0)
			if (errno != EINTR) {
				perror("waitpid");
				return 1;
			}
		if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
			fprintf(stderr, "/bin/true failed\n");
			return 1;
		}
	}
	clock_gettime(CLOCK_MONOTONIC, &b);
	s = (double)(b.tv_sec - a.tv_sec) + (double)(b.tv_nsec - a.tv_nsec) / 1e9;
	printf("spawns %ld seconds %.3f per_s %.1f\n", n, s, (double)n / s);
	return 0;
}
