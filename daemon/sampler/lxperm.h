/* lxperm.h: loaderx 1.5.7's keyed bijection of [0, n), for the cyclic-lx157 sampler.
 *
 * loaderx 1.5.7 (PyPI) shuffles each cycle with a balanced Feistel network over
 * 2h-bit integers (2h the smallest even width with 2^(2h) >= n), four rounds whose
 * round function is a SplitMix64-style finalizer of (cycle key, half, round), brought
 * into [0, n) by cycle-walking. Reproducing it bit for bit lets a run started under
 * loaderx 1.5.7 resume under zrecord on the same records. The exact definition is
 * normative in proto/SAMPLERS.md, "cyclic-lx157"; change nothing here without
 * changing that page and proto/vectors/.
 *
 * zrecord's own cyclic sampler (feistel.h) is the faster permutation; this one
 * exists for compatibility. A zr_lxperm is a small value on the caller's stack.
 */
#ifndef ZR_SAMPLER_LXPERM_H
#define ZR_SAMPLER_LXPERM_H

#include <stddef.h>
#include <stdint.h>

#define ZR_LXPERM_ROUNDS 4

typedef struct zr_lxperm {
        uint64_t n;    /* the domain [0, n), n >= 1 */
        unsigned half; /* h: bits of each half; 0 when n <= 1 */
        uint64_t key;  /* the cycle key: mix64(seed ^ cycle * GAMMA) */
} zr_lxperm;

/* Sets up the bijection of [0, n) of cycle `cycle` under `seed`. n >= 1. */
void zr_lxperm_init(zr_lxperm *p, uint64_t n, uint64_t seed, uint64_t cycle);

/* One pass of the network: a bijection of [0, 2^(2h)). x < 2^(2h); n >= 2. */
uint64_t zr_lxperm_encrypt(const zr_lxperm *p, uint64_t x);

/* The image of q < n: encrypt until the value is < n (0 when n = 1). The
 * reference: zr_lxperm_fill() agrees with it bit for bit. */
uint64_t zr_lxperm_permute(const zr_lxperm *p, uint64_t q);

/* Writes zr_lxperm_permute(p, q0 + j) for j in [0, count) into ret_idx.
 * q0 + count <= n. */
void zr_lxperm_fill(const zr_lxperm *p, uint64_t q0, uint64_t *ret_idx, size_t count);

/* Writes zr_lxperm_permute(p, q[j]) for j in [0, count) into ret_idx: positions in
 * any order. Every q[j] < n; q and ret_idx may be the same array. */
void zr_lxperm_map(const zr_lxperm *p, const uint64_t *q, uint64_t *ret_idx, size_t count);

/* The inverse of zr_lxperm_encrypt(): the rounds undone from the last. y < 2^(2h); n >= 2. */
uint64_t zr_lxperm_decrypt(const zr_lxperm *p, uint64_t y);

/* The inverse of zr_lxperm_permute(): the q < n whose image is y (y < n); 0 when n = 1. */
uint64_t zr_lxperm_unpermute(const zr_lxperm *p, uint64_t y);

#endif
