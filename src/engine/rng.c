/* rng.c - the sampler's random numbers: xoshiro256** seeded by splitmix64.
 *
 * Why this generator: 256 bits of state that live inside each sequence (no
 * global state, so two requests never disturb each other and a seeded request
 * replays exactly), a period of 2^256 - 1, good statistical quality, and a few
 * shifts and multiplies per draw. Written from the published description
 * (Blackman & Vigna, "Scrambled linear pseudorandom number generators").
 *
 * Invariants:
 *   1. the state is never all zero (splitmix64 outputs cannot all be zero for
 *      four consecutive steps, and the seed routine checks anyway);
 *   2. sampler_rng_uniform returns k * 2^-53 for k in [0, 2^53): never 1.0.
 */
#include "aiinfra/sampler.h"

static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

void sampler_rng_seed(sampler_rng *r, uint64_t seed)
{
    uint64_t x = seed;
    for (int i = 0; i < 4; i++) r->s[i] = splitmix64(&x);
    if ((r->s[0] | r->s[1] | r->s[2] | r->s[3]) == 0) r->s[0] = 1;  /* invariant 1 */
}

uint64_t sampler_rng_next(sampler_rng *r)
{
    uint64_t *s = r->s;
    uint64_t out = rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return out;
}

double sampler_rng_uniform(sampler_rng *r)
{
    return (double)(sampler_rng_next(r) >> 11) * 0x1.0p-53;  /* invariant 2 */
}
