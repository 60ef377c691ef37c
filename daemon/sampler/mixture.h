/* mixture.h: a weighted mixture of sources as a pure function of (seed, step).
 *
 * K sources, each with its own sampler mode, length n_k and integer weight w_k,
 * share the global batch of G = batch_size * world_size positions of every step:
 *
 *   apportionment  source k's draws in steps 0 .. s - 1, D_k(s), come from a binary
 *                  tree over the sources (Huffman's, built from the weights): the
 *                  root holds s*G, and each node gives its left child
 *                  round(X * w_left / w_node) of its own X, the right child the
 *                  rest. A step's counts D_k(s+1) - D_k(s) are never negative and
 *                  sum to G exactly; D_k(s) stays within 1.68 (and typically
 *                  within 1) of s*G*w_k/W; it costs O(depth) for one source,
 *                  O(K) for all, at any step.
 *   layout         which global position takes which source is a keyed bijection
 *                  of [0, G) per step (the cyclic sampler's permutation, keyed by
 *                  (seed, step)): the sources interleave inside a batch.
 *   streams        source k has its own stream of draws under the seed
 *                  key(seed, "zr-src", k): draw c is what its mode, over n_k with
 *                  batch size 1, gives at step c (iid: position c of step 0). A
 *                  small source repeats; a large one never needs a full pass.
 *   sharding       rank r takes global positions [r*B, (r+1)*B), as every sampler;
 *                  a global batch depends on G only, so a run is elastic across
 *                  world sizes with the same G.
 *
 * The definition is normative, down to the bit, in proto/SAMPLERS.md, "Mixtures";
 * proto/vectors/sampler-mixture.jsonl holds outputs every client reproduces.
 *
 * A zr_mixture is a plain value (about 16 KiB, no allocation, no cleanup) that one
 * zr_mixture_init() fills; after it every function is thread-safe. Errors:
 * -ZR_E_SAMPLER with a message naming the source and the value (err may be NULL).
 */
#ifndef ZR_SAMPLER_MIXTURE_H
#define ZR_SAMPLER_MIXTURE_H

#include <stddef.h>
#include <stdint.h>

#include "sampler/sampler.h"
#include "util/error.h"

/* Sources of one mixture. A source is an open set of streams in the daemon, and a
 * step's apportionment costs O(K) 128-bit divisions: 256 keeps it to a few
 * microseconds, and the tree's nodes to 16-bit ids. */
#define ZR_MIXTURE_MAX_SOURCES 256
#define ZR_MIXTURE_NODES       (2 * ZR_MIXTURE_MAX_SOURCES - 1)

typedef struct zr_mixture_source {
        enum zr_sampler_mode mode;
        uint64_t n;      /* records: draws are indices in [0, n); >= 1 */
        uint32_t weight; /* >= 1; shares are w_k / (sum of the weights) */
} zr_mixture_source;

typedef struct zr_mixture {
        uint32_t count;         /* K */
        uint32_t world_size;    /* W */
        uint64_t batch_size;    /* B */
        uint64_t global;        /* G = B*W */
        uint64_t seed;
        uint64_t last_step;     /* the last step defined: (last_step + 1) * G <= 2^64 - 1 */
        zr_mixture_source sources[ZR_MIXTURE_MAX_SOURCES];
        uint64_t source_seed[ZR_MIXTURE_MAX_SOURCES]; /* key(seed, DOMAIN_SOURCE, k) */
        /* The apportionment tree: nodes 0..K-1 are the sources, K..2K-2 the merges in
         * the order Huffman's construction made them (the root last). */
        uint32_t root;
        uint64_t weight[ZR_MIXTURE_NODES];
        uint16_t left[ZR_MIXTURE_NODES], right[ZR_MIXTURE_NODES], parent[ZR_MIXTURE_NODES];
} zr_mixture;

/* Fills *m from `count` sources (copied) with batch_size B and world_size W, under
 * `seed`. Returns 0, or -ZR_E_SAMPLER when: count = 0 or > ZR_MIXTURE_MAX_SOURCES;
 * a source's mode is unknown, its n = 0 or its weight = 0; B = 0, W = 0, or B*W
 * overflows 64 bits. Any n, any weight >= 1, any mode mix is valid (a cyclic source
 * needs no n >= G: it is drawn one record at a time). */
int zr_mixture_init(zr_mixture *m, const zr_mixture_source *sources, uint32_t count,
                    uint64_t batch_size, uint32_t world_size, uint64_t seed, zr_error *err);

/* Checks that `step` is one of m's steps (<= m->last_step: every position of the
 * step below 2^64 - 1) and rank < W; 0 or -ZR_E_SAMPLER. */
int zr_mixture_check(const zr_mixture *m, uint64_t step, uint32_t rank, zr_error *err);

/* D_k(step): source k's draws in steps 0 .. step - 1; step <= m->last_step + 1,
 * source < K. O(depth of k in the tree). */
uint64_t zr_mixture_draws_before(const zr_mixture *m, uint32_t source, uint64_t step);

/* The whole apportionment of `step`: ret_before[k] = D_k(step) and ret_count[k] =
 * D_k(step + 1) - D_k(step), for every source (each array holds K values). Counts
 * sum to G. 0 or the error of zr_mixture_check() (rank 0). */
int zr_mixture_counts(const zr_mixture *m, uint64_t step, uint64_t *ret_before, uint64_t *ret_count,
                      zr_error *err);

/* Writes draws c0, c0 + 1, ..., c0 + count - 1 of source k's stream into ret_idx
 * (each in [0, n_k)). c0 + count <= 2^64. */
void zr_mixture_stream(const zr_mixture *m, uint32_t source, uint64_t c0, uint64_t *ret_idx,
                       size_t count);

/* The batch of rank `rank` at `step`: for each of its B positions j, the source
 * ret_source[j] and the record index ret_idx[j] in [0, n_source). Both arrays
 * hold B values (caller-owned). O(B + K) plus each source's sampler; allocates
 * nothing; about 50 KiB of stack. Returns 0, or the error of zr_mixture_check()
 * (arrays untouched). */
int zr_mixture_batch(const zr_mixture *m, uint64_t step, uint32_t rank, uint32_t *ret_source,
                     uint64_t *ret_idx, zr_error *err);

/* As zr_mixture_batch(), but ret_draw[j] is position j's draw number c in its
 * source's stream (draw c of source k: D_k(step) <= c < D_k(step + 1)), not
 * the record it maps to: a packed mixture's sources serve their c-th row
 * (loader/pack.h). */
int zr_mixture_draws(const zr_mixture *m, uint64_t step, uint32_t rank, uint32_t *ret_source,
                     uint64_t *ret_draw, zr_error *err);

#endif
