/* sampler.c: the four samplers as pure functions of their parameters.
 *
 * Validates the parameters, then reduces each mode to a fill over consecutive
 * positions: sequential walks a window mod n (its start computed with a 128-bit
 * product, so any step is exact), iid hands the step's key and the rank's first
 * global position to the generator, cyclic finds the cycle and the position inside
 * it and hands them to the cycle's permutation (zrecord's Feistel network, or
 * loaderx 1.5.7's for cyclic-lx157). It assumes nothing about
 * the caller's threads and keeps no state; it does not know about stores or
 * sessions. The normative definition is proto/SAMPLERS.md.
 */
#include "sampler/sampler.h"

#include <inttypes.h>
#include <stddef.h>
#include <string.h>

#include "sampler/feistel.h"
#include "sampler/kernel.h"
#include "sampler/lxperm.h"
#include "sampler/rng.h"

static const char *const sampler_mode_names[_ZR_SAMPLER_MODE_MAX] = {
        [ZR_SAMPLER_SEQUENTIAL] = "sequential",
        [ZR_SAMPLER_IID] = "iid",
        [ZR_SAMPLER_CYCLIC] = "cyclic",
        [ZR_SAMPLER_CYCLIC_LX157] = "cyclic-lx157",
};

int zr_sampler_mode_from_name(const char *name, enum zr_sampler_mode *ret) {
        if (!name)
                return -ZR_E_SAMPLER;
        for (int m = 0; m < _ZR_SAMPLER_MODE_MAX; m++)
                if (strcmp(name, sampler_mode_names[m]) == 0) {
                        *ret = (enum zr_sampler_mode)m;
                        return 0;
                }
        return -ZR_E_SAMPLER;
}

const char *zr_sampler_mode_name(enum zr_sampler_mode mode) {
        if ((unsigned)mode >= _ZR_SAMPLER_MODE_MAX)
                return NULL;
        return sampler_mode_names[mode];
}

int zr_sampler_check(const zr_sampler_params *p, zr_error *err) {
        uint64_t global;

        if ((unsigned)p->mode >= _ZR_SAMPLER_MODE_MAX)
                return zr_error_set(err, ZR_E_SAMPLER, "sampler mode %d is unknown", (int)p->mode);
        if (p->n == 0)
                return zr_error_set(err, ZR_E_SAMPLER, "sampler over n = 0 records: nothing to draw");
        if (p->batch_size == 0)
                return zr_error_set(err, ZR_E_SAMPLER, "batch_size = 0: a batch must hold a record");
        if (p->world_size == 0)
                return zr_error_set(err, ZR_E_SAMPLER, "world_size = 0: there must be a rank");
        if (p->rank >= p->world_size)
                return zr_error_set(err, ZR_E_SAMPLER, "rank %" PRIu32 " >= world_size %" PRIu32,
                                    p->rank, p->world_size);
        if (__builtin_mul_overflow(p->batch_size, (uint64_t)p->world_size, &global))
                return zr_error_set(err, ZR_E_SAMPLER,
                                    "batch_size %" PRIu64 " * world_size %" PRIu32 " overflows 64 bits",
                                    p->batch_size, p->world_size);
        if ((p->mode == ZR_SAMPLER_CYCLIC || p->mode == ZR_SAMPLER_CYCLIC_LX157) && global > p->n)
                return zr_error_set(err, ZR_E_SAMPLER,
                                    "%s: global batch %" PRIu64 " (batch_size %" PRIu64
                                    " * world_size %" PRIu32 ") > n = %" PRIu64,
                                    zr_sampler_mode_name(p->mode), global, p->batch_size,
                                    p->world_size, p->n);
        return 0;
}

/* ret_idx[i] = x + i for i < len: a plain count, vectorized. */
ZR_SAMPLER_KERNEL
static void sampler_count(uint64_t *ret_idx, uint64_t x, uint64_t len) {
        for (uint64_t i = 0; i < len; i++)
                ret_idx[i] = x + i;
}

static void sampler_sequential(const zr_sampler_params *p, uint64_t *ret_idx) {
        uint64_t n = p->n, global = p->batch_size * p->world_size;
        /* (s*B*W + r*B) mod n, exactly: every factor reduced, products in 128 bits */
        unsigned __int128 start = (unsigned __int128)(p->step % n) * (global % n) % n;
        uint64_t x;

        start += (unsigned __int128)p->rank * (p->batch_size % n) % n;
        x = (uint64_t)(start % n);
        /* runs up to the wrap, each a plain count the compiler vectorizes */
        for (uint64_t j = 0; j < p->batch_size;) {
                uint64_t run = n - x < p->batch_size - j ? n - x : p->batch_size - j;

                sampler_count(ret_idx + j, x, run);
                j += run;
                x = 0;
        }
}

static void sampler_iid(const zr_sampler_params *p, uint64_t *ret_idx) {
        uint64_t key = zr_rng_key(p->seed, ZR_RNG_DOMAIN_IID, p->step);

        zr_rng_iid_fill(key, p->n, (uint64_t)p->rank * p->batch_size, ret_idx, p->batch_size);
}

/* Both cyclic modes: the same cycles and positions, each with its own permutation. */
static void sampler_cyclic(const zr_sampler_params *p, uint64_t *ret_idx) {
        uint64_t global = p->batch_size * p->world_size;
        uint64_t per_cycle = p->n / global; /* m >= 1, checked */
        uint64_t cycle = p->step / per_cycle, t = p->step % per_cycle;
        /* t*B*W + r*B + B <= m*B*W <= n: no overflow */
        uint64_t q0 = t * global + (uint64_t)p->rank * p->batch_size;

        if (p->mode == ZR_SAMPLER_CYCLIC_LX157) {
                zr_lxperm x;

                zr_lxperm_init(&x, p->n, p->seed, cycle);
                zr_lxperm_fill(&x, q0, ret_idx, p->batch_size);
        } else {
                zr_feistel f;

                zr_feistel_init(&f, p->n, zr_rng_key(p->seed, ZR_RNG_DOMAIN_CYCLIC, cycle));
                zr_feistel_fill(&f, q0, ret_idx, p->batch_size);
        }
}

int zr_sampler_indices(const zr_sampler_params *p, uint64_t *ret_idx, zr_error *err) {
        int r = zr_sampler_check(p, err);

        if (r < 0)
                return r;
        switch (p->mode) {
        case ZR_SAMPLER_SEQUENTIAL:
                sampler_sequential(p, ret_idx);
                break;
        case ZR_SAMPLER_IID:
                sampler_iid(p, ret_idx);
                break;
        case ZR_SAMPLER_CYCLIC:
        case ZR_SAMPLER_CYCLIC_LX157:
                sampler_cyclic(p, ret_idx);
                break;
        default:
                break;
        }
        return 0;
}

int zr_sampler_cycle_fill(enum zr_sampler_mode mode, uint64_t n, uint64_t seed, uint64_t cycle,
                          uint64_t q0, uint64_t *ret_idx, size_t count, zr_error *err) {
        switch (mode) {
        case ZR_SAMPLER_SEQUENTIAL:
                sampler_count(ret_idx, q0, count);
                return 0;
        case ZR_SAMPLER_CYCLIC: {
                zr_feistel f;

                zr_feistel_init(&f, n, zr_rng_key(seed, ZR_RNG_DOMAIN_CYCLIC, cycle));
                zr_feistel_fill(&f, q0, ret_idx, count);
                return 0;
        }
        case ZR_SAMPLER_CYCLIC_LX157: {
                zr_lxperm x;

                zr_lxperm_init(&x, n, seed, cycle);
                zr_lxperm_fill(&x, q0, ret_idx, count);
                return 0;
        }
        default:
                return zr_error_set(err, ZR_E_SAMPLER, "%s draws no cycles (a record may come "
                                    "twice or never): packed sequences take sequential, cyclic "
                                    "or cyclic-lx157", zr_sampler_mode_name(mode) ?
                                    zr_sampler_mode_name(mode) : "this sampler");
        }
}
