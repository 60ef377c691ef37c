/* rng.c: the iid sampler's generator: SplitMix64's finalizer over a keyed counter,
 * bounded to [0, n) by Lemire's multiply-shift with rejection.
 *
 * The per-index work is one mix and one 64x64->128 multiply. For n <= 2^32 the
 * high word of the product is computed from 32-bit halves, which vectorizes; a
 * block with a rejected lane (probability < 64 n / 2^64 per block) is redone lane
 * by lane with the reference. Larger n take the scalar path with a 128-bit product.
 * Nothing here allocates; nothing keeps state between calls.
 */
#include "sampler/rng.h"

#include <string.h>

#include "sampler/kernel.h"

uint64_t zr_rng_iid_one(uint64_t key, uint64_t n, uint64_t g) {
        uint64_t t = zr_rng_threshold(n), base = key + g * ZR_RNG_GAMMA;

        for (uint64_t r = 0;; r++) {
                unsigned __int128 m = (unsigned __int128)zr_rng_mix64(base + r * ZR_RNG_DELTA) * n;
                if ((uint64_t)m >= t)
                        return (uint64_t)(m >> 64);
        }
}

/* One block of ZR_SAMPLER_BLOCK lanes for n <= 2^32; returns nonzero if any lane
 * drew a value that Lemire's method rejects (its output is then wrong). */
ZR_SAMPLER_KERNEL
static uint64_t rng_iid_block32(uint64_t base, uint64_t n, uint64_t t, uint64_t *ret_idx) {
        uint64_t rejected = 0;

        for (unsigned j = 0; j < ZR_SAMPLER_BLOCK; j++) {
                uint64_t x = zr_rng_mix64(base + (uint64_t)j * ZR_RNG_GAMMA);
                /* high64(x * n) from 32-bit halves: exact while n <= 2^32 */
                uint64_t lo_part = (x & UINT32_MAX) * n;
                uint64_t hi_part = (x >> 32) * n;
                ret_idx[j] = (hi_part + (lo_part >> 32)) >> 32;
                rejected |= (x * n) < t;
        }
        return rejected;
}

void zr_rng_iid_fill(uint64_t key, uint64_t n, uint64_t g0, uint64_t *ret_idx, size_t count) {
        uint64_t t = zr_rng_threshold(n);
        size_t j = 0;

        if (n <= UINT64_C(1) << 32) {
                uint64_t tmp[ZR_SAMPLER_BLOCK];

                for (; j < count; j += ZR_SAMPLER_BLOCK) {
                        size_t len = count - j < ZR_SAMPLER_BLOCK ? count - j : ZR_SAMPLER_BLOCK;
                        uint64_t *out = len == ZR_SAMPLER_BLOCK ? ret_idx + j : tmp;
                        uint64_t g = g0 + j;

                        if (rng_iid_block32(key + g * ZR_RNG_GAMMA, n, t, out))
                                for (size_t i = 0; i < len; i++)
                                        out[i] = zr_rng_iid_one(key, n, g + i);
                        if (out == tmp)
                                memcpy(ret_idx + j, tmp, len * sizeof(*tmp));
                }
                return;
        }

        for (; j < count; j++) {
                uint64_t base = key + (g0 + j) * ZR_RNG_GAMMA;
                unsigned __int128 m = (unsigned __int128)zr_rng_mix64(base) * n;

                ret_idx[j] = (uint64_t)m >= t ? (uint64_t)(m >> 64) : zr_rng_iid_one(key, n, g0 + j);
        }
}
