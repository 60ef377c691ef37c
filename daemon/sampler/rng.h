/* rng.h: the counter-based generator of the iid sampler, and Lemire's bound.
 *
 * Every value is a pure function of a 64-bit key and a counter: there is no state
 * to carry from one batch to the next, so any step is reached in O(1). The exact
 * definition (constants, keying, rejection and its retries) is normative and lives
 * in proto/SAMPLERS.md, "The generator" and "iid"; change nothing here without
 * changing that page and the vectors in proto/vectors/.
 */
#ifndef ZR_SAMPLER_RNG_H
#define ZR_SAMPLER_RNG_H

#include <stddef.h>
#include <stdint.h>

#define ZR_RNG_GAMMA   UINT64_C(0x9e3779b97f4a7c15) /* SplitMix64's Weyl increment (2^64/phi, odd) */
#define ZR_RNG_DELTA   UINT64_C(0xd1b54a32d192ed03) /* retry increment (odd; R2 sequence constant) */
#define ZR_RNG_MIX_M1  UINT64_C(0xbf58476d1ce4e5b9) /* SplitMix64 finalizer (Stafford Mix13) */
#define ZR_RNG_MIX_M2  UINT64_C(0x94d049bb133111eb)
#define ZR_RNG_DOMAIN_IID    UINT64_C(0x7a722d6969640001) /* "zr-iid" | 1: keeps iid keys apart */
#define ZR_RNG_DOMAIN_CYCLIC UINT64_C(0x7a722d6379630002) /* "zr-cyc" | 2: from cyclic keys */
#define ZR_RNG_DOMAIN_MIX    UINT64_C(0x7a722d6d69780003) /* "zr-mix" | 3: a mixture step's layout */
#define ZR_RNG_DOMAIN_SOURCE UINT64_C(0x7a722d7372630004) /* "zr-src" | 4: a mixture source's seed */

/* SplitMix64's finalizer: a bijection of uint64 with full avalanche. */
static inline uint64_t zr_rng_mix64(uint64_t z) {
        z = (z ^ (z >> 30)) * ZR_RNG_MIX_M1;
        z = (z ^ (z >> 27)) * ZR_RNG_MIX_M2;
        return z ^ (z >> 31);
}

/* The key of (seed, domain, a): mix64(mix64(seed ^ domain) + a * GAMMA), all mod 2^64.
 * `a` is the step for iid and the cycle for cyclic. */
static inline uint64_t zr_rng_key(uint64_t seed, uint64_t domain, uint64_t a) {
        return zr_rng_mix64(zr_rng_mix64(seed ^ domain) + a * ZR_RNG_GAMMA);
}

/* 2^64 mod n, the rejection threshold of Lemire's method (n >= 1). */
static inline uint64_t zr_rng_threshold(uint64_t n) {
        return (UINT64_C(0) - n) % n;
}

/* The iid index of global position g under step key `key`, in [0, n): draws
 * x_r = mix64(key + g*GAMMA + r*DELTA) for r = 0, 1, ... and returns
 * high64(x_r * n) for the first r whose low64(x_r * n) >= 2^64 mod n. This is the
 * reference: zr_rng_iid_fill() must agree with it bit for bit. n >= 1. */
uint64_t zr_rng_iid_one(uint64_t key, uint64_t n, uint64_t g);

/* Writes count iid indices for global positions g0, g0+1, ... into ret_idx, equal
 * to zr_rng_iid_one() for each. n >= 1; ret_idx holds count values. */
void zr_rng_iid_fill(uint64_t key, uint64_t n, uint64_t g0, uint64_t *ret_idx, size_t count);

/* As zr_rng_iid_fill(), for the positions g[0], ..., g[count - 1] in any order (a
 * mixture's draws of one source). g and ret_idx may be the same array. */
void zr_rng_iid_map(uint64_t key, uint64_t n, const uint64_t *g, uint64_t *ret_idx, size_t count);

/* The inverse, as a scan: writes into ret_g, in ascending order, every position g of
 * [g0, g0 + count) whose index zr_rng_iid_one(key, n, g) is `record`, and returns
 * how many (at most count: ret_g holds count values). A position's first draw x
 * gives `record` exactly when x lies in [ceil(record 2^64 / n), ceil((record + 1)
 * 2^64 / n)), so a block of lanes costs one mix and two compares each; the rare
 * lane whose first draw is rejected is computed in full. record < n;
 * g0 + count <= 2^64. */
size_t zr_rng_iid_find(uint64_t key, uint64_t n, uint64_t g0, size_t count, uint64_t record,
                       uint64_t *ret_g);

#endif
