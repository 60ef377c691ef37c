/* lxperm.c: loaderx 1.5.7's cycle permutation (lxperm.h), written from its
 * definition in proto/SAMPLERS.md.
 *
 * A round's function is a full 64-bit finalizer (three 64-bit multiplies), so the
 * cost is in the rounds; the even width makes the walk's domain up to four times n
 * (2^20 for n = 10^6, like zrecord's cyclic, but 2^22 for n = 2^20 + 1, where
 * zrecord's walks 2^21). Positions go through in chunks: one vectorized pass encrypts every lane,
 * then the lanes still >= n walk on one by one. Nothing allocates; a chunk uses
 * 8 KiB of stack.
 */
#include "sampler/lxperm.h"

#include "sampler/kernel.h"
#include "sampler/rng.h"

#define LXPERM_CHUNK 1024

/* mix(key, v, round): the round function before its mask. */
static inline uint64_t lxperm_mix(uint64_t key, uint64_t v, uint64_t round) {
        return zr_rng_mix64(key ^ (v * ZR_RNG_GAMMA) ^ (round * ZR_RNG_DELTA));
}

void zr_lxperm_init(zr_lxperm *p, uint64_t n, uint64_t seed, uint64_t cycle) {
        unsigned bits = n > 1 ? 64 - (unsigned)__builtin_clzll(n - 1) : 0;

        p->n = n;
        p->half = (bits + (bits & 1)) / 2;
        p->key = lxperm_mix(seed, cycle, 0);
}

/* Round i maps (L, R) to (R, L ^ (mix(key, R, i) & mask)). */
static inline uint64_t lxperm_encrypt(uint64_t x, unsigned h, uint64_t key) {
        uint64_t mask = (UINT64_C(1) << h) - 1, l = (x >> h) & mask, r = x & mask;

        for (uint64_t i = 0; i < ZR_LXPERM_ROUNDS; i++) {
                uint64_t next = l ^ (lxperm_mix(key, r, i) & mask);

                l = r;
                r = next;
        }
        return (l << h) | r;
}

uint64_t zr_lxperm_encrypt(const zr_lxperm *p, uint64_t x) {
        return lxperm_encrypt(x, p->half, p->key);
}

uint64_t zr_lxperm_permute(const zr_lxperm *p, uint64_t q) {
        uint64_t y = q;

        if (p->n <= 1)
                return 0;
        do
                y = lxperm_encrypt(y, p->half, p->key);
        while (y >= p->n);
        return y;
}

/* Round i maps (L, R) to (R, L ^ f_i(R)); undone, (L', R') goes back to
 * (R' ^ f_i(L'), L'). */
uint64_t zr_lxperm_decrypt(const zr_lxperm *p, uint64_t y) {
        unsigned h = p->half;
        uint64_t mask = (UINT64_C(1) << h) - 1, l = (y >> h) & mask, r = y & mask;

        for (uint64_t i = ZR_LXPERM_ROUNDS; i > 0; i--) {
                uint64_t prev = r ^ (lxperm_mix(p->key, l, i - 1) & mask);

                r = l;
                l = prev;
        }
        return (l << h) | r;
}

uint64_t zr_lxperm_unpermute(const zr_lxperm *p, uint64_t y) {
        uint64_t x = y;

        if (p->n <= 1)
                return 0;
        do
                x = zr_lxperm_decrypt(p, x);
        while (x >= p->n);
        return x;
}

ZR_SAMPLER_KERNEL
static void lxperm_gather(uint64_t *x, const uint64_t *q, size_t len, unsigned h, uint64_t key) {
        for (size_t j = 0; j < len; j++)
                x[j] = lxperm_encrypt(q[j], h, key);
}

void zr_lxperm_map(const zr_lxperm *p, const uint64_t *q, uint64_t *ret_idx, size_t count) {
        if (p->n <= 1) {
                for (size_t j = 0; j < count; j++)
                        ret_idx[j] = 0;
                return;
        }
        lxperm_gather(ret_idx, q, count, p->half, p->key);
        for (size_t i = 0; i < count; i++)
                while (ret_idx[i] >= p->n)
                        ret_idx[i] = lxperm_encrypt(ret_idx[i], p->half, p->key);
}

ZR_SAMPLER_KERNEL
static void lxperm_first(uint64_t *x, uint64_t q0, size_t len, unsigned h, uint64_t key) {
        for (size_t j = 0; j < len; j++)
                x[j] = lxperm_encrypt(q0 + j, h, key);
}

void zr_lxperm_fill(const zr_lxperm *p, uint64_t q0, uint64_t *ret_idx, size_t count) {
        if (p->n <= 1) {
                for (size_t j = 0; j < count; j++)
                        ret_idx[j] = 0;
                return;
        }
        for (size_t j = 0; j < count; j += LXPERM_CHUNK) {
                size_t len = count - j < LXPERM_CHUNK ? count - j : LXPERM_CHUNK;
                uint64_t *x = ret_idx + j;

                lxperm_first(x, q0 + j, len, p->half, p->key);
                for (size_t i = 0; i < len; i++)
                        while (x[i] >= p->n)
                                x[i] = lxperm_encrypt(x[i], p->half, p->key);
        }
}
