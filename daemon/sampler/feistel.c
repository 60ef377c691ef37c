/* feistel.c: the cyclic sampler's keyed permutation: an alternating Feistel
 * network over the next power of two, cycle-walked into [0, n).
 *
 * Odd widths split unevenly (low = floor(w/2) bits on the right in round 0); each
 * round moves the right half to the top, so the halves swap sizes every round and
 * an even number of rounds ends in the starting layout. Halves are at most 32 bits
 * (w <= 64), so one 32-bit round function serves every n.
 *
 * For w <= 32 a block of lanes runs as uint32 in a vectorized kernel: every lane is
 * encrypted, then every lane still >= n is encrypted again (a blend, no branch)
 * until none is left; the walk is the cost above iid (at n = 10^6, 4.6% of lanes
 * walk and a block needs about two passes). Wider domains take the scalar path. The cost per index does
 * not depend on the step, the cycle or n beyond the walk's expected 2^w / n passes
 * (< 2). Nothing allocates.
 */
#include "sampler/feistel.h"

#include "sampler/kernel.h"
#include "sampler/rng.h"

void zr_feistel_init(zr_feistel *f, uint64_t n, uint64_t key) {
        unsigned w = n > 1 ? 64 - (unsigned)__builtin_clzll(n - 1) : 0;

        f->n = n;
        f->width = w < 2 ? 2 : w;
        f->low = f->width / 2;
        for (unsigned i = 0; i < ZR_FEISTEL_ROUNDS; i++)
                f->keys[i] = (uint32_t)zr_rng_mix64(key + (uint64_t)(i + 1) * ZR_RNG_GAMMA);
}

/* One round on a w-bit value whose right half has `lo` bits and left `hi` bits:
 * (H, L) -> (L, H ^ F(L)), F(L) = top `hi` bits of ((L ^ k) * MUL mod 2^32). */
#define FEISTEL_ROUND(type, x, lo, hi, k) do {                                          \
                type L_ = (x) & (((type)1 << (lo)) - 1);                                \
                type H_ = (x) >> (lo);                                                  \
                uint32_t f_ = (uint32_t)(((uint32_t)L_ ^ (k)) * ZR_FEISTEL_MUL) >> (32 - (hi)); \
                (x) = (L_ << (hi)) | (H_ ^ f_);                                         \
        } while (0)

static inline uint64_t feistel_encrypt64(uint64_t x, unsigned a, unsigned b, const uint32_t *k) {
        for (unsigned i = 0; i < ZR_FEISTEL_ROUNDS; i += 2) {
                FEISTEL_ROUND(uint64_t, x, a, b, k[i]);
                FEISTEL_ROUND(uint64_t, x, b, a, k[i + 1]);
        }
        return x;
}

static inline uint32_t feistel_encrypt32(uint32_t x, unsigned a, unsigned b, const uint32_t *k) {
        for (unsigned i = 0; i < ZR_FEISTEL_ROUNDS; i += 2) {
                FEISTEL_ROUND(uint32_t, x, a, b, k[i]);
                FEISTEL_ROUND(uint32_t, x, b, a, k[i + 1]);
        }
        return x;
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

/* One block for w <= 32: the images of q0 .. q0 + ZR_SAMPLER_BLOCK - 1, every one
 * of which must be < n (= last + 1), so that every lane's walk ends. */
ZR_SAMPLER_KERNEL
static void feistel_block32(uint32_t q0, uint32_t last, unsigned a, unsigned b,
                            const uint32_t *k, uint64_t *ret_idx) {
        uint32_t x[ZR_SAMPLER_BLOCK];

        for (unsigned j = 0; j < ZR_SAMPLER_BLOCK; j++)
                x[j] = feistel_encrypt32(q0 + j, a, b, k);

        /* Walk the whole block at once: a pass over every lane keeps the vector
         * units busy, where walking only the pending lanes would wait on each
         * pass's latency (measured: 16-lane groups cost 1.6x more at n = 10^6). */
        for (;;) {
                uint32_t pending = 0;

                for (unsigned j = 0; j < ZR_SAMPLER_BLOCK; j++)
                        pending |= x[j] > last;
                if (!pending)
                        break;
                for (unsigned j = 0; j < ZR_SAMPLER_BLOCK; j++) {
                        uint32_t y = feistel_encrypt32(x[j], a, b, k);
                        x[j] = x[j] > last ? y : x[j];
                }
        }

        for (unsigned j = 0; j < ZR_SAMPLER_BLOCK; j++)
                ret_idx[j] = x[j];
}

void zr_feistel_fill(const zr_feistel *f, uint64_t q0, uint64_t *ret_idx, size_t count) {
        unsigned a = f->low, b = f->width - f->low;
        size_t j = 0;

        if (f->width <= 32) {
                /* Whole blocks only while every lane's q is < n, so every lane's walk
                 * ends; the tail goes lane by lane. */
                for (; j + ZR_SAMPLER_BLOCK <= count; j += ZR_SAMPLER_BLOCK)
                        feistel_block32((uint32_t)(q0 + j), (uint32_t)(f->n - 1), a, b, f->keys,
                                        ret_idx + j);
        }
        for (; j < count; j++)
                ret_idx[j] = zr_feistel_permute(f, q0 + j);
}
