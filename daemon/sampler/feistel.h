/* feistel.h: a keyed bijection of [0, n) for the cyclic sampler.
 *
 * A Feistel network over w-bit integers (2^w the smallest power of two >= n, and
 * w >= 2), brought into [0, n) by cycle-walking. The exact definition (widths,
 * round keys, round function, walk) is normative and lives in proto/SAMPLERS.md,
 * "cyclic"; change nothing here without changing that page and the vectors.
 *
 * A zr_feistel is a small value on the caller's stack: no allocation, no cleanup.
 */
#ifndef ZR_SAMPLER_FEISTEL_H
#define ZR_SAMPLER_FEISTEL_H

#include <stddef.h>
#include <stdint.h>

/* Four rounds (Luby-Rackoff's bound for a strong pseudo-random permutation) of a
 * two-multiply round function. Measured over 200000 keys: one multiply per round
 * leaves consecutive positions visibly correlated even at six rounds (chi-square
 * 3500 for a 1137 limit at n = 1000); two multiplies at four rounds bring them to
 * within noise for n >= 4096 and near it (about 1250) at n = 1000. */
#define ZR_FEISTEL_ROUNDS 4
#define ZR_FEISTEL_MUL1   UINT32_C(0x7feb352d) /* round function multipliers: the 32-bit */
#define ZR_FEISTEL_SHIFT  15                   /* "lowbias32" hash (C. Wellons, 2018) */
#define ZR_FEISTEL_MUL2   UINT32_C(0x846ca68b)

typedef struct zr_feistel {
        uint64_t n;                         /* the domain [0, n), n >= 1 */
        unsigned width;                     /* w = max(2, bit length of n - 1) */
        unsigned low;                       /* floor(w / 2): bits of the right half in round 0 */
        uint32_t keys[ZR_FEISTEL_ROUNDS];   /* round keys */
} zr_feistel;

/* Sets up the bijection of [0, n) keyed by `key` (see zr_rng_key()). n >= 1. */
void zr_feistel_init(zr_feistel *f, uint64_t n, uint64_t key);

/* One pass of the network: a bijection of [0, 2^w). x < 2^w. */
uint64_t zr_feistel_encrypt(const zr_feistel *f, uint64_t x);

/* The image of q < n under the bijection of [0, n): encrypt, and encrypt again
 * while the value is >= n (cycle-walking; ends because q itself is < n). This is
 * the reference: zr_feistel_fill() agrees with it bit for bit. */
uint64_t zr_feistel_permute(const zr_feistel *f, uint64_t q);

/* Writes zr_feistel_permute(f, q0 + j) for j in [0, count) into ret_idx.
 * q0 + count <= n. */
void zr_feistel_fill(const zr_feistel *f, uint64_t q0, uint64_t *ret_idx, size_t count);

/* Writes zr_feistel_permute(f, q[j]) for j in [0, count) into ret_idx: the fill
 * over positions in any order (a mixture's draws of one source). Every q[j] < n;
 * q and ret_idx may be the same array. */
void zr_feistel_map(const zr_feistel *f, const uint64_t *q, uint64_t *ret_idx, size_t count);

/* The inverse of zr_feistel_encrypt(): each round undone in reverse order. y < 2^w. */
uint64_t zr_feistel_decrypt(const zr_feistel *f, uint64_t y);

/* The inverse of zr_feistel_permute(): the q < n whose image is y (y < n). Decrypts,
 * and decrypts again while the value is >= n: the forward walk, backwards. */
uint64_t zr_feistel_unpermute(const zr_feistel *f, uint64_t y);

#endif
