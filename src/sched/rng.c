/*
 * rng: xoshiro256** (Blackman and Vigna), seeded by splitmix64 so that
 * any 64-bit seed, 0 included, gives a well-mixed state. Bounded draws
 * use rejection on the top of the range, so there is no modulo bias.
 */
#include "sched/sched.h"

static uint64_t splitmix64(uint64_t *x)
{
	uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

void kn_rng_seed(struct kn_rng *rng, uint64_t seed)
{
	for (int i = 0; i < 4; i++)
		rng->s[i] = splitmix64(&seed);
}

static uint64_t rotl(uint64_t x, int k)
{
	return (x << k) | (x >> (64 - k));
}

uint64_t kn_rng_next(struct kn_rng *rng)
{
	uint64_t *s = rng->s;
	uint64_t result = rotl(s[1] * 5, 7) * 9;
	uint64_t t = s[1] << 17;

	s[2] ^= s[0];
	s[3] ^= s[1];
	s[1] ^= s[2];
	s[0] ^= s[3];
	s[2] ^= t;
	s[3] = rotl(s[3], 45);
	return result;
}

uint64_t kn_rng_below(struct kn_rng *rng, uint64_t n)
{
	/* Values at or above limit would make some residues more likely. */
	uint64_t limit = UINT64_MAX - UINT64_MAX % n;
	uint64_t x;

	do
		x = kn_rng_next(rng);
	while (x >= limit);
	return x % n;
}
