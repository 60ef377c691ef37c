/* feistel.c: the cyclic sampler's keyed permutation: an alternating Feistel
 * network over the next power of two, cycle-walked into [0, n).
 *
 * Odd widths split unevenly (a = floor(w/2) bits on the right); the halves swap
 * sizes every round and an even number of rounds ends in the starting layout.
 * Halves are at most 32 bits (w <= 64), so one 32-bit round function serves every n.
 *
 * Positions go through in chunks of lanes, uint32 lanes for w <= 32 and uint64
 * lanes above, through vectorized kernels: every lane is encrypted once; the
 * stragglers (lanes still >= n, about 5% at n = 10^6) are gathered and walked
 * together, pass by pass, until none is left. The walk is most of the cost above
 * iid. The cost per index depends on neither the step
 * nor the cycle, only on n through the walk's expected 2^w / n passes (< 2 for
 * n >= 3). Nothing allocates; a chunk uses at most 20 KiB of stack.
 */
#include "sampler/feistel.h"

#include <string.h>

#include "sampler/kernel.h"
#include "sampler/rng.h"

/* Lanes encrypted before their stragglers (the lanes still >= n) are gathered and
 * walked together: at n = 10^6 about 5% of lanes straggle, and 1024 lanes give
 * them several vectors to interleave (256 lanes, one vector, cost 25% more per
 * index: each pass then waits on its own latency). 12 KiB of stack. */
#define FEISTEL_CHUNK 1024

/* Blend passes over the stragglers before the finished ones are settled out: at
 * n = 10^6 two passes finish almost every chunk (95% of stragglers finish in
 * one); settling costs about two passes of work per lane. */
#define FEISTEL_BLEND_PASSES 2

void zr_feistel_init(zr_feistel *f, uint64_t n, uint64_t key) {
        unsigned w = n > 1 ? 64 - (unsigned)__builtin_clzll(n - 1) : 0;

        f->n = n;
        f->width = w < 2 ? 2 : w;
        f->low = f->width / 2;
        for (unsigned i = 0; i < ZR_FEISTEL_ROUNDS; i++)
                f->keys[i] = (uint32_t)zr_rng_mix64(key + (uint64_t)(i + 1) * ZR_RNG_GAMMA);
}

/* The round function: the top `hi` bits of h(L ^ k), h(t) = ((t * MUL1) ^
 * ((t * MUL1) >> 15)) * MUL2, all mod 2^32. */
static inline uint32_t feistel_f(uint32_t l, uint32_t k, unsigned hi) {
        uint32_t t = (l ^ k) * ZR_FEISTEL_MUL1;

        t ^= t >> ZR_FEISTEL_SHIFT;
        t *= ZR_FEISTEL_MUL2;
        return t >> (32 - hi);
}

/* The network on a w-bit value x = (H << a) | L, L the a low bits (a = floor(w/2)),
 * H the b = w - a high bits. Round i maps (H, L) to (L, H ^ F_i(L)) as a w-bit
 * value (L << hi) | (H ^ F_i(L)), so the halves swap sizes every round. Kept as
 * two halves instead: round 2i is l ^= F(r) (b bits out), round 2i+1 is
 * r ^= F(l) (a bits out); after an even number of rounds the value is
 * (l << a) | r again. */
_Static_assert(ZR_FEISTEL_ROUNDS % 2 == 0, "the halves end where they began");

static inline uint64_t feistel_encrypt64(uint64_t x, unsigned a, unsigned b, const uint32_t *k) {
        uint32_t r = (uint32_t)(x & ((UINT64_C(1) << a) - 1)), l = (uint32_t)(x >> a);

        for (unsigned i = 0; i < ZR_FEISTEL_ROUNDS; i += 2) {
                l ^= feistel_f(r, k[i], b);
                r ^= feistel_f(l, k[i + 1], a);
        }
        return ((uint64_t)l << a) | r;
}

static inline uint32_t feistel_encrypt32(uint32_t x, unsigned a, unsigned b, const uint32_t *k) {
        uint32_t r = x & ((UINT32_C(1) << a) - 1), l = x >> a;

        for (unsigned i = 0; i < ZR_FEISTEL_ROUNDS; i += 2) {
                l ^= feistel_f(r, k[i], b);
                r ^= feistel_f(l, k[i + 1], a);
        }
        return (l << a) | r;
}

uint64_t zr_feistel_encrypt(const zr_feistel *f, uint64_t x) {
        return feistel_encrypt64(x, f->low, f->width - f->low, f->keys);
}

uint64_t zr_feistel_permute(const zr_feistel *f, uint64_t q) {
        uint64_t x = zr_feistel_encrypt(f, q);

        while (x >= f->n)
                x = zr_feistel_encrypt(f, x);
        return x;
}

/* Each round is an xor with a function of the other half, its own inverse: undone
 * from the last to the first. */
uint64_t zr_feistel_decrypt(const zr_feistel *f, uint64_t y) {
        unsigned a = f->low, b = f->width - f->low;
        uint32_t r = (uint32_t)(y & ((UINT64_C(1) << a) - 1)), l = (uint32_t)(y >> a);

        for (unsigned i = ZR_FEISTEL_ROUNDS; i > 0; i -= 2) {
                r ^= feistel_f(l, f->keys[i - 1], a);
                l ^= feistel_f(r, f->keys[i - 2], b);
        }
        return ((uint64_t)l << a) | r;
}

uint64_t zr_feistel_unpermute(const zr_feistel *f, uint64_t y) {
        uint64_t x = zr_feistel_decrypt(f, y);

        while (x >= f->n)
                x = zr_feistel_decrypt(f, x);
        return x;
}

/*
 * The chunk walk. Pass one encrypts every lane of a chunk (x[j] = E(q0 + j)).
 * The stragglers, lanes whose value is still >= n, are gathered with their
 * positions into v[] and pos[] and walked together: a few passes that encrypt
 * again every lane still >= n (a blend: no branch per lane); if some are still
 * walking after them, the finished ones are written back and dropped from v[]
 * (settled), and the rest walk on. Typical n finish in the blend passes; an n
 * just above a power of two, where half the lanes straggle and the longest walk
 * of a chunk is some ten passes, pays for the long walks of a few lanes alone.
 * Lanes past `len` (padding to the vector width) start from position 0, which is
 * < n, so their walks end like any other; the caller ignores their values.
 *
 * The same steps exist for uint32 lanes (w <= 32, twice the lanes per vector) and
 * uint64 lanes (wider domains).
 */

#define FEISTEL_PAD(c) (((c) + 15) & ~(size_t)15) /* 16 lanes: a 64-byte vector of uint32 */

/*
 * The lane kernels, written once for W-bit lanes (uintW_t) and made for W = 32
 * and W = 64 below:
 *
 * feistel_firstW: x[j] = E(q0 + j) for j < len, E(0) for the padding lanes.
 * feistel_gatherW: as feistel_firstW, from positions in any order: x[j] = E(q[j]).
 * feistel_walkW: up to FEISTEL_BLEND_PASSES passes over v[]: every lane still >
 *     last is encrypted again (a blend, no branch per lane). Returns nonzero if
 *     a lane is still > last after them.
 * feistel_stragglersW: the positions j < lanes with x[j] > last, in order, into
 *     pos[] (room for lanes + 16); returns how many. Branch-free: about 5% of
 *     lanes qualify at n = 10^6, too few for a branch per lane to be predicted.
 * feistel_settleW: writes every walked lane back to x[] (one still walking is
 *     overwritten later) and keeps those still > last at the front of v[] and
 *     pos[]; returns how many are kept.
 * feistel_finishW: walks the c stragglers at pos[] of x[] until every lane of
 *     x[] is <= last: the blend passes, then settling between them.
 */
#define FEISTEL_LANE_KERNELS(W)                                                                  \
        ZR_SAMPLER_KERNEL                                                                        \
        static void feistel_first##W(uint##W##_t *x, size_t lanes, uint##W##_t q0, size_t len,  \
                                     unsigned a, unsigned b, const uint32_t *k) {               \
                for (size_t j = 0; j < lanes; j++)                                               \
                        x[j] = feistel_encrypt##W(j < len ? q0 + (uint##W##_t)j : 0, a, b, k);  \
        }                                                                                        \
                                                                                                 \
        ZR_SAMPLER_KERNEL                                                                        \
        static void feistel_gather##W(uint##W##_t *x, size_t lanes, const uint64_t *q,          \
                                      size_t len, unsigned a, unsigned b, const uint32_t *k) {  \
                for (size_t j = 0; j < lanes; j++)                                               \
                        x[j] = feistel_encrypt##W(j < len ? (uint##W##_t)q[j] : 0, a, b, k);    \
        }                                                                                        \
                                                                                                 \
        ZR_SAMPLER_KERNEL                                                                        \
        static uint##W##_t feistel_walk##W(uint##W##_t *v, size_t lanes, uint##W##_t last,     \
                                           unsigned a, unsigned b, const uint32_t *k) {         \
                uint##W##_t pending = 0;                                                         \
                                                                                                 \
                for (unsigned pass = 0; pass < FEISTEL_BLEND_PASSES; pass++) {                   \
                        pending = 0;                                                             \
                        for (size_t j = 0; j < lanes; j++) {                                     \
                                uint##W##_t y = feistel_encrypt##W(v[j], a, b, k);               \
                                                                                                 \
                                v[j] = v[j] > last ? y : v[j];                                   \
                                pending |= v[j] > last;                                          \
                        }                                                                        \
                        if (!pending)                                                            \
                                break;                                                           \
                }                                                                                \
                return pending;                                                                  \
        }                                                                                        \
                                                                                                 \
        static size_t feistel_stragglers##W(const uint##W##_t *x, size_t lanes,                 \
                                            uint##W##_t last, uint32_t *pos) {                  \
                size_t c = 0;                                                                    \
                                                                                                 \
                for (size_t j = 0; j < lanes; j++) {                                             \
                        pos[c] = (uint32_t)j;                                                    \
                        c += x[j] > last;                                                        \
                }                                                                                \
                return c;                                                                        \
        }                                                                                        \
                                                                                                 \
        static size_t feistel_settle##W(uint##W##_t *x, uint##W##_t *v, uint32_t *pos, size_t c, \
                                        uint##W##_t last) {                                      \
                size_t keep = 0;                                                                 \
                                                                                                 \
                for (size_t i = 0; i < c; i++) {                                                 \
                        uint##W##_t y = v[i];                                                    \
                        uint32_t p = pos[i];                                                     \
                                                                                                 \
                        x[p] = y;                                                                \
                        v[keep] = y;                                                             \
                        pos[keep] = p;                                                           \
                        keep += y > last;                                                        \
                }                                                                                \
                return keep;                                                                     \
        }                                                                                        \
                                                                                                 \
        static void feistel_finish##W(uint##W##_t *x, uint##W##_t *v, uint32_t *pos, size_t c,  \
                                      uint##W##_t last, unsigned a, unsigned b,                  \
                                      const uint32_t *k) {                                       \
                for (size_t i = 0; i < FEISTEL_PAD(c); i++)                                      \
                        v[i] = i < c ? x[pos[i]] : 0;                                            \
                while (c > 0 && feistel_walk##W(v, FEISTEL_PAD(c), last, a, b, k)) {             \
                        c = feistel_settle##W(x, v, pos, c, last);                               \
                        for (size_t i = c; i < FEISTEL_PAD(c); i++)                              \
                                v[i] = 0;                                                        \
                }                                                                                \
                for (size_t i = 0; i < c; i++)                                                   \
                        x[pos[i]] = v[i];                                                        \
        }

FEISTEL_LANE_KERNELS(32)
FEISTEL_LANE_KERNELS(64)

ZR_SAMPLER_KERNEL
static void feistel_widen32(uint64_t *ret_idx, const uint32_t *x, size_t len) {
        for (size_t j = 0; j < len; j++)
                ret_idx[j] = x[j];
}

#if defined(__GNUC__) && defined(__x86_64__) && !defined(ZR_SAMPLER_GENERIC_ONLY)
#include <immintrin.h>

/* As feistel_stragglers32(), 16 lanes per step with AVX-512 compress. lanes is a
 * multiple of 16. */
__attribute__((target("avx512f")))
static size_t feistel_stragglers32_avx512(const uint32_t *x, size_t lanes, uint32_t last, uint32_t *pos) {
        __m512i vlast = _mm512_set1_epi32((int)last), step = _mm512_set1_epi32(16);
        __m512i idx = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
        size_t c = 0;

        for (size_t j = 0; j < lanes; j += 16) {
                __mmask16 m = _mm512_cmpgt_epu32_mask(_mm512_loadu_si512(x + j), vlast);

                _mm512_storeu_si512(pos + c, _mm512_maskz_compress_epi32(m, idx));
                c += (size_t)__builtin_popcount(m);
                idx = _mm512_add_epi32(idx, step);
        }
        return c;
}
#  define FEISTEL_HAVE_AVX512 1
#endif

/* One chunk for w <= 32: ret_idx[j] = permute(q0 + j) for j < len, or permute(q[j])
 * when q is not NULL. */
static void feistel_chunk32(const zr_feistel *f, uint32_t q0, const uint64_t *q, size_t len,
                            uint64_t *ret_idx) {
        uint32_t x[FEISTEL_CHUNK], v[FEISTEL_CHUNK + 16], pos[FEISTEL_CHUNK + 16];
        unsigned a = f->low, b = f->width - f->low;
        uint32_t last = (uint32_t)(f->n - 1);
        size_t lanes = FEISTEL_PAD(len), c;

        if (q)
                feistel_gather32(x, lanes, q, len, a, b, f->keys);
        else
                feistel_first32(x, lanes, q0, len, a, b, f->keys);
#ifdef FEISTEL_HAVE_AVX512
        if (__builtin_cpu_supports("avx512f"))
                c = feistel_stragglers32_avx512(x, lanes, last, pos);
        else
#endif
                c = feistel_stragglers32(x, lanes, last, pos);
        feistel_finish32(x, v, pos, c, last, a, b, f->keys);
        feistel_widen32(ret_idx, x, len);
}

/* One chunk for w > 32: ret_idx[j] = permute(q0 + j) for j < len, or permute(q[j])
 * when q is not NULL. */
static void feistel_chunk64(const zr_feistel *f, uint64_t q0, const uint64_t *q, size_t len,
                            uint64_t *ret_idx) {
        uint64_t x[FEISTEL_CHUNK], v[FEISTEL_CHUNK + 16];
        uint32_t pos[FEISTEL_CHUNK + 16];
        unsigned a = f->low, b = f->width - f->low;
        size_t lanes = FEISTEL_PAD(len), c;

        if (q)
                feistel_gather64(x, lanes, q, len, a, b, f->keys);
        else
                feistel_first64(x, lanes, q0, len, a, b, f->keys);
        c = feistel_stragglers64(x, lanes, f->n - 1, pos);
        feistel_finish64(x, v, pos, c, f->n - 1, a, b, f->keys);
        memcpy(ret_idx, x, len * sizeof(*x));
}

void zr_feistel_fill(const zr_feistel *f, uint64_t q0, uint64_t *ret_idx, size_t count) {
        for (size_t j = 0; j < count; j += FEISTEL_CHUNK) {
                size_t len = count - j < FEISTEL_CHUNK ? count - j : FEISTEL_CHUNK;

                if (f->width <= 32)
                        feistel_chunk32(f, (uint32_t)(q0 + j), NULL, len, ret_idx + j);
                else
                        feistel_chunk64(f, q0 + j, NULL, len, ret_idx + j);
        }
}

/* A chunk reads all its positions before it writes ret_idx, so q may be ret_idx. */
void zr_feistel_map(const zr_feistel *f, const uint64_t *q, uint64_t *ret_idx, size_t count) {
        for (size_t j = 0; j < count; j += FEISTEL_CHUNK) {
                size_t len = count - j < FEISTEL_CHUNK ? count - j : FEISTEL_CHUNK;

                if (f->width <= 32)
                        feistel_chunk32(f, 0, q + j, len, ret_idx + j);
                else
                        feistel_chunk64(f, 0, q + j, len, ret_idx + j);
        }
}
