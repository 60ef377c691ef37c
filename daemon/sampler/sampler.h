/* sampler.h: the index samplers of zrecord: sequential, iid, cyclic and cyclic-lx157.
 *
 * A sampler is a pure function
 *
 *     indices(mode, n, batch_size, seed, step, rank, world_size)
 *
 * that gives the batch_size record indices in [0, n) that rank `rank` of
 * `world_size` reads at training step `step`. There is no state: seeking to step
 * 10^12 costs what step 0 costs, and nothing the size of n is ever allocated. The
 * definition is normative, down to the bit, in proto/SAMPLERS.md; every client
 * reproduces proto/vectors/sampler.jsonl.
 *
 * Sharding: the global batch of step s has B*W positions (B = batch_size,
 * W = world_size); rank r takes positions [r*B, (r+1)*B). Ranks are disjoint and
 * their union is what world_size 1 with batch_size B*W gives at the same step.
 *
 *   sequential  position p = s*B*W + r*B + j (an exact integer), index p mod n: a
 *               circular window over the index space.
 *   iid         each index uniform on [0, n) with replacement, from a counter-based
 *               generator keyed by (seed, s, global position), bounded by Lemire's
 *               method with rejection (unbiased).
 *   cyclic      without replacement: cycle c uses m = floor(n / (B*W)) steps
 *               (c = floor(s / m)); the global positions of the cycle are mapped
 *               through a keyed bijection of [0, n) fresh for each (seed, c). Each
 *               batch is exactly B; the n - m*B*W positions left over are dropped,
 *               and which records they are changes from cycle to cycle.
 *   cyclic-lx157  cyclic with loaderx 1.5.7's permutation (lxperm.h) in place of
 *               zrecord's: with world_size 1 it gives loaderx 1.5.7's cyclic batches
 *               (its mode 2) bit for bit, wherever batch_size <= n.
 *
 * Errors: functions that can fail return -ZR_E_SAMPLER and fill *err (err may be
 * NULL) with a message naming the offending value.
 */
#ifndef ZR_SAMPLER_SAMPLER_H
#define ZR_SAMPLER_SAMPLER_H

#include <stddef.h>
#include <stdint.h>

#include "util/error.h"

enum zr_sampler_mode {
        ZR_SAMPLER_SEQUENTIAL = 0,
        ZR_SAMPLER_IID = 1,
        ZR_SAMPLER_CYCLIC = 2,
        ZR_SAMPLER_CYCLIC_LX157 = 3,
        _ZR_SAMPLER_MODE_MAX,
};

typedef struct zr_sampler_params {
        enum zr_sampler_mode mode;
        uint64_t n;          /* index space [0, n); >= 1 */
        uint64_t batch_size; /* B: indices per rank per step; >= 1 */
        uint64_t seed;       /* any value (ignored by sequential) */
        uint64_t step;       /* any value: every step is defined, none overflows */
        uint32_t rank;       /* r < world_size */
        uint32_t world_size; /* W >= 1; B*W must fit in 64 bits (and be <= n for the cyclics) */
} zr_sampler_params;

/* Parses "sequential", "iid", "cyclic" or "cyclic-lx157" (exact, lower case) into *ret.
 * Returns 0, or -ZR_E_SAMPLER for any other string or a NULL name (*ret is then
 * untouched). Example: if (zr_sampler_mode_from_name(req->sampler, &p.mode) < 0) ... */
int zr_sampler_mode_from_name(const char *name, enum zr_sampler_mode *ret);

/* The name of a mode ("sequential", "iid", "cyclic", "cyclic-lx157"), a static string; NULL for
 * a value that is no mode. */
const char *zr_sampler_mode_name(enum zr_sampler_mode mode);

/* Checks p. Returns 0, or -ZR_E_SAMPLER with a message when: the mode is unknown,
 * n = 0, batch_size = 0, world_size = 0, rank >= world_size, batch_size *
 * world_size overflows 64 bits, or (either cyclic) batch_size * world_size > n. p must not
 * be NULL. A checked p gives indices for every step. */
int zr_sampler_check(const zr_sampler_params *p, zr_error *err);

/* Writes the p->batch_size indices of rank p->rank at step p->step into ret_idx
 * (caller-owned, room for batch_size values), each in [0, p->n). O(batch_size)
 * time whatever the step and n; allocates nothing; thread-safe (no state).
 * Returns 0, or the error of zr_sampler_check() (ret_idx untouched).
 * Example:
 *     zr_sampler_params p = { .mode = ZR_SAMPLER_CYCLIC, .n = len, .batch_size = 256,
 *                             .seed = 7, .step = s, .rank = 0, .world_size = 1 };
 *     r = zr_sampler_indices(&p, idx, &err); */
int zr_sampler_indices(const zr_sampler_params *p, uint64_t *ret_idx, zr_error *err);

/* The document order of a packed loader (proto/SAMPLERS.md, "Packed token
 * sequences"): the record at positions q0 .. q0 + count - 1 of cycle `cycle` of
 * the sampler with batch_size 1 and world_size 1 over [0, n), i.e. the cycle's
 * permutation (sequential: the identity; cyclic: the Feistel bijection keyed by
 * (seed, cycle); cyclic-lx157: loaderx 1.5.7's). Every record comes once a
 * cycle. q0 + count <= n, n >= 1. Returns 0, or -ZR_E_SAMPLER for iid (no
 * cycles: a record may come twice or never) and an unknown mode. Thread-safe,
 * allocates nothing. */
int zr_sampler_cycle_fill(enum zr_sampler_mode mode, uint64_t n, uint64_t seed, uint64_t cycle,
                          uint64_t q0, uint64_t *ret_idx, size_t count, zr_error *err);

#endif
