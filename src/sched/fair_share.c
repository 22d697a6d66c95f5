/*
 * sched: what a task counts when its spec names nothing, and fair share
 * between owners.
 *
 * Fair share follows Slurm's: usage decays with a half-life, and between
 * queued jobs of equal priority the owner who used less recently goes
 * first. Unlike Slurm's factor, which blends usage into one priority
 * number with configured weights, kiln keeps priority strict (a higher
 * priority always goes first) and uses usage only to order equals: a user
 * may rely on priority, and fair share can never invert it.
 *
 * Usage is kept as one decayed number per owner. Advancing it uses the
 * closed form of the decayed integral of a constant rate, so calling it
 * every scheduler turn or once an hour gives the same number.
 */
#include "sched/sched.h"

#include <math.h>
#include <stdlib.h>

#define MILLI 1000.0
/* A GPU's compute slices in MIG mode (every NVIDIA MIG GPU has seven). */
#define MIG_GPU_SLICES 7.0

void kn_sched_request_defaults(struct kn_sched_request *req,
			       const struct kn_sched_defaults *defaults)
{
	if (req->cpu_milli == 0)
		req->cpu_milli = defaults->cpu_milli;
	if (req->memory_bytes == 0)
		req->memory_bytes = defaults->memory_bytes;
}

double kn_fair_rate(const struct kn_sched_request *req)
{
	double gpus = req->gpu_milli / MILLI;

	/* "3g.40gb": three compute slices of seven. */
	if (req->mig_profile)
		gpus = atoi(req->mig_profile) / MIG_GPU_SLICES;
	return req->tasks * (req->cpu_milli / MILLI + KN_FAIR_GPU_WEIGHT * gpus);
}

double kn_fair_usage_advance(double usage, double rate, int64_t elapsed_ms,
			     int64_t half_life_ms)
{
	double t = elapsed_ms > 0 ? elapsed_ms / MILLI : 0, h, keep;

	if (half_life_ms <= 0)
		return usage + rate * t;
	h = half_life_ms / MILLI;
	keep = exp2(-t / h);
	/* The integral of rate * 2^(-(t-s)/h) over s in [0, t]. */
	return usage * keep + rate * h / M_LN2 * (1.0 - keep);
}
