/* Deterministic random numbers: SplitMix64 for seeding and Philox-like counter hashing for
 * "the same (seed, stream, index) gives the same number whatever the order of calls", which is what
 * synthetic checkpoints written by several threads and per-request sampling both need. */
#ifndef GPTOSS_BASE_RNG_H
#define GPTOSS_BASE_RNG_H

#include <stdint.h>

/* The counter-based functions below are also CUDA device functions (the GPU sampler and the
 * synthetic-weight kernels draw the same numbers as the host): under nvcc they are compiled for
 * both sides, for the C compiler the mark is empty. */
#if defined(__CUDACC__)
#define RNG_HD __host__ __device__
#else
#define RNG_HD
#endif

/* SplitMix64's output function: a bijective mix of 64 bits. */
static inline RNG_HD uint64_t splitmix64(uint64_t x) {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* A 64-bit value that depends only on (key, counter). */
static inline RNG_HD uint64_t rng_hash2(uint64_t key, uint64_t counter) {
    return splitmix64(splitmix64(key) ^ (counter * 0xd1b54a32d192ed03ull));
}

/* Uniform in [0, 1) with 24 random bits (exactly representable as float). */
static inline RNG_HD float rng_uniform01(uint64_t bits) {
    return (float)(bits >> 40) * (1.0f / 16777216.0f);
}

/* Uniform in [0, 1) as double with 53 bits. */
static inline RNG_HD double rng_uniform01d(uint64_t bits) {
    return (double)(bits >> 11) * (1.0 / 9007199254740992.0);
}

/* A simple sequential generator for code that draws numbers one after another. */
typedef struct {
    uint64_t state;
} rng_t;

static inline void rng_seed(rng_t *r, uint64_t seed) {
    r->state = splitmix64(seed ^ 0x5eed5eed5eedull);
}
/* SplitMix64: the state advances by the golden-ratio increment splitmix64 adds, and the output is
 * the mix of the advanced state. */
static inline uint64_t rng_next(rng_t *r) {
    const uint64_t x = r->state;
    r->state += 0x9e3779b97f4a7c15ull;
    return splitmix64(x);
}

#endif
