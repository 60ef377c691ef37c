/* rng.c: the iid sampler's generator: SplitMix64's finalizer over a keyed counter,
 * bounded to [0, n) by Lemire's multiply-shift with rejection.
 *
 * The per-index work is one mix and one 64x64->128 multiply, whose high word is
 * computed from 32-bit halves so that it vectorizes (two partial products for
 * n <= 2^32, four above). A block with a rejected lane (probability < 64 n / 2^64
 * per block: never in practice below n = 2^40, every block for n near 2^63) is
 * redone lane by lane with the reference.
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

/* As rng_iid_block32() for any n: the high word of x * n from four 32-bit
 * partial products, each exact in 64 bits. */
ZR_SAMPLER_KERNEL
static uint64_t rng_iid_block64(uint64_t base, uint64_t n, uint64_t t, uint64_t *ret_idx) {
        uint64_t nl = n & UINT32_MAX, nh = n >> 32, rejected = 0;

        for (unsigned j = 0; j < ZR_SAMPLER_BLOCK; j++) {
                uint64_t x = zr_rng_mix64(base + (uint64_t)j * ZR_RNG_GAMMA);
                uint64_t xl = x & UINT32_MAX, xh = x >> 32;
                uint64_t ll = xl * nl, lh = xl * nh, hl = xh * nl, hh = xh * nh;
                uint64_t mid = (ll >> 32) + (lh & UINT32_MAX) + (hl & UINT32_MAX);

                ret_idx[j] = hh + (lh >> 32) + (hl >> 32) + (mid >> 32);
                rejected |= (x * n) < t;
        }
        return rejected;
}

void zr_rng_iid_fill(uint64_t key, uint64_t n, uint64_t g0, uint64_t *ret_idx, size_t count) {
        uint64_t t = zr_rng_threshold(n);
        uint64_t tmp[ZR_SAMPLER_BLOCK];
        int narrow = n <= UINT64_C(1) << 32;

        for (size_t j = 0; j < count; j += ZR_SAMPLER_BLOCK) {
                size_t len = count - j < ZR_SAMPLER_BLOCK ? count - j : ZR_SAMPLER_BLOCK;
                uint64_t *out = len == ZR_SAMPLER_BLOCK ? ret_idx + j : tmp;
                uint64_t g = g0 + j, base = key + g * ZR_RNG_GAMMA;
                uint64_t rejected = narrow ? rng_iid_block32(base, n, t, out)
                                           : rng_iid_block64(base, n, t, out);

                if (rejected)
                        for (size_t i = 0; i < len; i++)
                                out[i] = zr_rng_iid_one(key, n, g + i);
                if (out == tmp)
                        memcpy(ret_idx + j, tmp, len * sizeof(*tmp));
        }
}
