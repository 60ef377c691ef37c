/* rng.c: the iid sampler's generator: SplitMix64's finalizer over a keyed counter,
 * bounded to [0, n) by Lemire's multiply-shift with rejection.
 *
 * The per-index work is one mix and one 64x64->128 multiply. With AVX-512 the
 * high word is computed from 32-bit halves so that lanes vectorize (two partial
 * products for n <= 2^32, four above); elsewhere the scalar multiplier is faster.
 * A block with a rejected lane (probability < 64 n / 2^64 per block: never in
 * practice below n = 2^40, every block for n near 2^63) is redone lane by lane
 * with the reference.
 * Nothing here allocates; nothing keeps state between calls.
 */
#include "sampler/rng.h"

#include <string.h>

#include "sampler/kernel.h" /* ZR_SAMPLER_BLOCK */

uint64_t zr_rng_iid_one(uint64_t key, uint64_t n, uint64_t g) {
        uint64_t t = zr_rng_threshold(n), base = key + g * ZR_RNG_GAMMA;

        for (uint64_t r = 0;; r++) {
                unsigned __int128 m = (unsigned __int128)zr_rng_mix64(base + r * ZR_RNG_DELTA) * n;
                if ((uint64_t)m >= t)
                        return (uint64_t)(m >> 64);
        }
}

/* A block of ZR_SAMPLER_BLOCK lanes from positions base, base + GAMMA, ...; each
 * returns nonzero if any lane drew a value that Lemire's method rejects (its
 * output is then wrong and the caller redoes the block).
 *
 * Scalar: one 64x64->128 multiply per lane. Below AVX-512 a vector of 64-bit
 * multiplies is emulated from 32-bit ones and loses to the scalar multiplier
 * (measured per index at n = 10^6: scalar 0.9 ns, SSE2 1.4, AVX2 1.7, AVX-512
 * 0.23), so this one is kept from being vectorized. */
#if defined(__GNUC__) && !defined(__clang__)
__attribute__((optimize("no-tree-vectorize", "unroll-loops")))
#endif
static uint64_t rng_iid_block_scalar(uint64_t base, uint64_t n, uint64_t t, uint64_t *ret_idx) {
        uint64_t rejected = 0;

        for (unsigned j = 0; j < ZR_SAMPLER_BLOCK; j++, base += ZR_RNG_GAMMA) {
                unsigned __int128 m = (unsigned __int128)zr_rng_mix64(base) * n;

                ret_idx[j] = (uint64_t)(m >> 64);
                if (__builtin_expect((uint64_t)m < t, 0)) /* a predicted branch: fewer ops than a flag */
                        rejected = 1;
        }
        return rejected;
}

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && !defined(ZR_SAMPLER_GENERIC_ONLY)
#  define RNG_HAVE_AVX512 1
#  define RNG_AVX512 __attribute__((target("arch=x86-64-v4"), optimize("O3")))

/* AVX-512, n <= 2^32: high64(x * n) from two 32-bit partial products, exact while
 * n <= 2^32, so the lanes vectorize. */
RNG_AVX512
static uint64_t rng_iid_block32_avx512(uint64_t base, uint64_t n, uint64_t t, uint64_t *ret_idx) {
        uint64_t rejected = 0;

        for (unsigned j = 0; j < ZR_SAMPLER_BLOCK; j++) {
                uint64_t x = zr_rng_mix64(base + (uint64_t)j * ZR_RNG_GAMMA);
                uint64_t lo_part = (x & UINT32_MAX) * n;
                uint64_t hi_part = (x >> 32) * n;

                ret_idx[j] = (hi_part + (lo_part >> 32)) >> 32;
                rejected |= (x * n) < t;
        }
        return rejected;
}

/* AVX-512, any n: the high word from four 32-bit partial products. */
RNG_AVX512
static uint64_t rng_iid_block64_avx512(uint64_t base, uint64_t n, uint64_t t, uint64_t *ret_idx) {
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
#endif

void zr_rng_iid_fill(uint64_t key, uint64_t n, uint64_t g0, uint64_t *ret_idx, size_t count) {
        uint64_t t = zr_rng_threshold(n);
        uint64_t tmp[ZR_SAMPLER_BLOCK];
        uint64_t (*block)(uint64_t, uint64_t, uint64_t, uint64_t *) = rng_iid_block_scalar;

#ifdef RNG_HAVE_AVX512
        if (__builtin_cpu_supports("x86-64-v4"))
                block = n <= UINT64_C(1) << 32 ? rng_iid_block32_avx512 : rng_iid_block64_avx512;
#endif

        for (size_t j = 0; j < count; j += ZR_SAMPLER_BLOCK) {
                size_t len = count - j < ZR_SAMPLER_BLOCK ? count - j : ZR_SAMPLER_BLOCK;
                uint64_t *out = len == ZR_SAMPLER_BLOCK ? ret_idx + j : tmp;
                uint64_t g = g0 + j, base = key + g * ZR_RNG_GAMMA;

                if (block(base, n, t, out))
                        for (size_t i = 0; i < len; i++)
                                out[i] = zr_rng_iid_one(key, n, g + i);
                if (out == tmp)
                        memcpy(ret_idx + j, tmp, len * sizeof(*tmp));
        }
}

void zr_rng_iid_map(uint64_t key, uint64_t n, const uint64_t *g, uint64_t *ret_idx, size_t count) {
        uint64_t t = zr_rng_threshold(n);

        for (size_t j = 0; j < count; j++) {
                uint64_t gj = g[j];
                unsigned __int128 m = (unsigned __int128)zr_rng_mix64(key + gj * ZR_RNG_GAMMA) * n;

                ret_idx[j] = (uint64_t)m >= t ? (uint64_t)(m >> 64) : zr_rng_iid_one(key, n, gj);
        }
}

/* One block of the scan: flags[j] = 1 if lane j's first draw gives `record` (x - lo
 * <= span), 2 if it is rejected; returns the or of the flags, 0 for a block
 * without a candidate (all but about 64 / n of them). Scalar below AVX-512, for
 * the reason rng_iid_block_scalar() is (measured per position at n = 10^6 on
 * AVX2: scalar 3.8 ns, vectorized 4.5). */
#define RNG_FIND_BODY                                                                         \
        unsigned any = 0;                                                                     \
                                                                                              \
        for (unsigned j = 0; j < ZR_SAMPLER_BLOCK; j++) {                                     \
                uint64_t x = zr_rng_mix64(base + (uint64_t)j * ZR_RNG_GAMMA);                 \
                unsigned f = (unsigned)(x - lo <= span) | (unsigned)((x * n) < t) << 1;       \
                                                                                              \
                flags[j] = (uint8_t)f;                                                        \
                any |= f;                                                                     \
        }                                                                                     \
        return any;

#if defined(__GNUC__) && !defined(__clang__)
__attribute__((optimize("no-tree-vectorize", "unroll-loops")))
#endif
static unsigned rng_find_block_scalar(uint64_t base, uint64_t n, uint64_t t, uint64_t lo, uint64_t span,
                                      uint8_t *flags) {
        RNG_FIND_BODY
}

#ifdef RNG_HAVE_AVX512
RNG_AVX512
static unsigned rng_find_block_avx512(uint64_t base, uint64_t n, uint64_t t, uint64_t lo, uint64_t span,
                                      uint8_t *flags) {
        RNG_FIND_BODY
}
#endif

size_t zr_rng_iid_find(uint64_t key, uint64_t n, uint64_t g0, size_t count, uint64_t record,
                       uint64_t *ret_g) {
        /* x gives record <=> record 2^64 <= x n < (record + 1) 2^64 */
        unsigned __int128 two64 = (unsigned __int128)1 << 64;
        uint64_t lo = (uint64_t)(((unsigned __int128)record * two64 + n - 1) / n);
        uint64_t hi = (uint64_t)((((unsigned __int128)record + 1) * two64 + n - 1) / n - 1);
        uint64_t t = zr_rng_threshold(n);
        uint8_t flags[ZR_SAMPLER_BLOCK];
        size_t found = 0;
        unsigned (*block)(uint64_t, uint64_t, uint64_t, uint64_t, uint64_t, uint8_t *) = rng_find_block_scalar;

#ifdef RNG_HAVE_AVX512
        if (__builtin_cpu_supports("x86-64-v4"))
                block = rng_find_block_avx512;
#endif

        for (size_t j = 0; j < count; j += ZR_SAMPLER_BLOCK) {
                size_t len = count - j < ZR_SAMPLER_BLOCK ? count - j : ZR_SAMPLER_BLOCK;
                uint64_t g = g0 + j;

                if (!block(key + g * ZR_RNG_GAMMA, n, t, lo, hi - lo, flags))
                        continue;
                for (size_t i = 0; i < len; i++) {
                        if (flags[i] & 2) {
                                if (zr_rng_iid_one(key, n, g + i) == record)
                                        ret_g[found++] = g + i;
                        } else if (flags[i]) {
                                ret_g[found++] = g + i;
                        }
                }
        }
        return found;
}
