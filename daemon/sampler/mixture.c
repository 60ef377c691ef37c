/* mixture.c: weighted mixtures of sources (mixture.h), written from their
 * definition in proto/SAMPLERS.md, "Mixtures".
 *
 * A step is computed in three passes over its positions, chunk by chunk: the
 * layout permutation sends rank's positions to slots (the cyclic sampler's
 * vectorized fill), a branch-free binary search over the sources' first slots
 * finds each slot's source and draw, and the draws, grouped by source (a pass per
 * source for a few, a counting sort for many), go through each source's own
 * sampler at once (gathers of the same kernels), to be scattered back to their
 * positions. The apportionment itself is the tree's 2K-1 nodes at the step's two
 * boundaries. Nothing allocates; nothing keeps state.
 */
#include "sampler/mixture.h"

#include <inttypes.h>
#include <string.h>

#include "sampler/feistel.h"
#include "sampler/lxperm.h"
#include "sampler/rng.h"

#define MIXTURE_NONE  UINT16_MAX
#define MIXTURE_CHUNK 512 /* positions per pass: 4 KiB of stack per array */
/* A source whose draws of one step span more cycles than this (n_k much below its
 * count) is walked draw by draw, each with its cycle's permutation; below it, one
 * gather per cycle. */
#define MIXTURE_GATHER_CYCLES 4
/* Up to this many sources, each source's draws of a chunk are gathered by a pass
 * of their own; above it, by one counting sort (whose increments chain through
 * memory: about 5 ns a position, against about 1 ns a pass). */
#ifndef MIXTURE_PASSES
#define MIXTURE_PASSES 8
#endif

_Static_assert(ZR_MIXTURE_NODES < MIXTURE_NONE, "node ids fit 16 bits");
_Static_assert(MIXTURE_CHUNK <= UINT16_MAX, "chunk offsets fit 16 bits");

int zr_mixture_init(zr_mixture *m, const zr_mixture_source *sources, uint32_t count,
                    uint64_t batch_size, uint32_t world_size, uint64_t seed, zr_error *err) {
        uint16_t active[ZR_MIXTURE_MAX_SOURCES];
        uint32_t nactive, next;
        uint64_t global;

        if (count == 0)
                return zr_error_set(err, ZR_E_SAMPLER, "a mixture needs at least one source");
        if (count > ZR_MIXTURE_MAX_SOURCES)
                return zr_error_set(err, ZR_E_SAMPLER, "a mixture of %" PRIu32 " sources: at most %d",
                                    count, ZR_MIXTURE_MAX_SOURCES);
        if (batch_size == 0)
                return zr_error_set(err, ZR_E_SAMPLER, "batch_size = 0: a batch must hold a record");
        if (world_size == 0)
                return zr_error_set(err, ZR_E_SAMPLER, "world_size = 0: there must be a rank");
        if (__builtin_mul_overflow(batch_size, (uint64_t)world_size, &global) || global == UINT64_MAX)
                return zr_error_set(err, ZR_E_SAMPLER,
                                    "batch_size %" PRIu64 " * world_size %" PRIu32
                                    " does not fit below 2^64 - 1",
                                    batch_size, world_size);
        for (uint32_t k = 0; k < count; k++) {
                if (!zr_sampler_mode_name(sources[k].mode))
                        return zr_error_set(err, ZR_E_SAMPLER, "source %" PRIu32 ": sampler mode %d is unknown",
                                            k, (int)sources[k].mode);
                if (sources[k].n == 0)
                        return zr_error_set(err, ZR_E_SAMPLER,
                                            "source %" PRIu32 ": n = 0 records: nothing to draw", k);
                if (sources[k].weight == 0)
                        return zr_error_set(err, ZR_E_SAMPLER,
                                            "source %" PRIu32 ": weight 0: weights must be >= 1", k);
        }

        memset(m, 0, sizeof(*m));
        m->count = count;
        m->world_size = world_size;
        m->batch_size = batch_size;
        m->global = global;
        m->seed = seed;
        m->last_step = UINT64_MAX / global - 1;
        for (uint32_t k = 0; k < count; k++) {
                m->sources[k] = sources[k];
                m->source_seed[k] = zr_rng_key(seed, ZR_RNG_DOMAIN_SOURCE, k);
                m->weight[k] = sources[k].weight;
                m->left[k] = m->right[k] = MIXTURE_NONE;
                active[k] = (uint16_t)k;
        }

        /* Huffman's tree: merge the two lightest nodes, ties to the older one (the
         * lower id), the lighter as the left child; K <= 256 makes the quadratic
         * search a few microseconds, once. */
        for (nactive = count, next = count; nactive > 1; next++) {
                uint16_t pick[2];

                for (int p = 0; p < 2; p++) {
                        uint32_t best = 0;

                        for (uint32_t i = 1; i < nactive; i++) {
                                uint16_t a = active[i], b = active[best];

                                if (m->weight[a] < m->weight[b] || (m->weight[a] == m->weight[b] && a < b))
                                        best = i;
                        }
                        pick[p] = active[best];
                        active[best] = active[--nactive];
                }
                m->weight[next] = m->weight[pick[0]] + m->weight[pick[1]];
                m->left[next] = pick[0];
                m->right[next] = pick[1];
                m->parent[pick[0]] = m->parent[pick[1]] = (uint16_t)next;
                active[nactive++] = (uint16_t)next;
        }
        m->root = active[0];
        m->parent[m->root] = MIXTURE_NONE;
        return 0;
}

int zr_mixture_check(const zr_mixture *m, uint64_t step, uint32_t rank, zr_error *err) {
        if (rank >= m->world_size)
                return zr_error_set(err, ZR_E_SAMPLER, "rank %" PRIu32 " >= world_size %" PRIu32, rank,
                                    m->world_size);
        if (step > m->last_step)
                return zr_error_set(err, ZR_E_SAMPLER,
                                    "mixture step %" PRIu64 " is past its last step %" PRIu64
                                    ": every position (step + 1) * G - 1 must be below 2^64 - 1",
                                    step, m->last_step);
        return 0;
}

/* The left child's share of its parent's x: round(x * w_left / w_node), halves up,
 * as floor((2 x w_left + w_node) / (2 w_node)); x < 2^64 and w_node < 2^40 keep the
 * numerator in 128 bits. */
static inline uint64_t mixture_split(uint64_t x, uint64_t w_left, uint64_t w_node) {
        unsigned __int128 num = (unsigned __int128)x * (2 * w_left) + w_node;

        if (!(num >> 64))
                return (uint64_t)num / (2 * w_node);
        return (uint64_t)(num / (2 * w_node));
}

/* x[node] for every node of the tree when the root holds `house` draws. */
static void mixture_nodes(const zr_mixture *m, uint64_t house, uint64_t *x) {
        x[m->root] = house;
        for (uint32_t node = 2 * m->count - 1; node-- > m->count;) {
                uint64_t xl = mixture_split(x[node], m->weight[m->left[node]], m->weight[node]);

                x[m->left[node]] = xl;
                x[m->right[node]] = x[node] - xl;
        }
}

uint64_t zr_mixture_draws_before(const zr_mixture *m, uint32_t source, uint64_t step) {
        uint16_t path[ZR_MIXTURE_MAX_SOURCES];
        unsigned depth = 0;
        uint64_t x = step * m->global;

        for (uint32_t node = source; m->parent[node] != MIXTURE_NONE; node = m->parent[node])
                path[depth++] = (uint16_t)node;
        while (depth--) {
                uint16_t child = path[depth], p = m->parent[child];
                uint64_t xl = mixture_split(x, m->weight[m->left[p]], m->weight[p]);

                x = m->left[p] == child ? xl : x - xl;
        }
        return x;
}

int zr_mixture_counts(const zr_mixture *m, uint64_t step, uint64_t *ret_before, uint64_t *ret_count,
                      zr_error *err) {
        uint64_t x0[ZR_MIXTURE_NODES], x1[ZR_MIXTURE_NODES];
        int r = zr_mixture_check(m, step, 0, err);

        if (r < 0)
                return r;
        mixture_nodes(m, step * m->global, x0);
        mixture_nodes(m, (step + 1) * m->global, x1);
        for (uint32_t k = 0; k < m->count; k++) {
                ret_before[k] = x0[k];
                ret_count[k] = x1[k] - x0[k];
        }
        return 0;
}

/* ret_idx[i] = the index of draw c[i] of source k, for i < len (<= MIXTURE_CHUNK);
 * every c[i] lies in [lo, hi), lo < hi. c and ret_idx may be the same array. */
static void mixture_stream_map(const zr_mixture *m, uint32_t k, uint64_t lo, uint64_t hi,
                               const uint64_t *c, uint64_t *ret_idx, size_t len) {
        const zr_mixture_source *s = &m->sources[k];
        uint64_t n = s->n, seed = m->source_seed[k];

        switch (s->mode) {
        case ZR_SAMPLER_SEQUENTIAL:
                if (hi - lo <= n) {
                        /* draws within one turn of the window: c mod n without a division */
                        uint64_t base = lo % n, room = n - base;

                        for (size_t i = 0; i < len; i++) {
                                uint64_t d = c[i] - lo;

                                ret_idx[i] = d >= room ? d - room : base + d;
                        }
                } else {
                        for (size_t i = 0; i < len; i++)
                                ret_idx[i] = c[i] % n;
                }
                return;
        case ZR_SAMPLER_IID:
                zr_rng_iid_map(zr_rng_key(seed, ZR_RNG_DOMAIN_IID, 0), n, c, ret_idx, len);
                return;
        case ZR_SAMPLER_CYCLIC:
        case ZR_SAMPLER_CYCLIC_LX157:
                break;
        default:
                return;
        }

        uint64_t first = lo / n, last = (hi - 1) / n;

        if (last - first < MIXTURE_GATHER_CYCLES) {
                /* one gather per cycle the step's draws touch (one or two, mostly); the
                 * draws are copied first, ret_idx may be c */
                uint64_t draws[MIXTURE_CHUNK], q[MIXTURE_CHUNK], out[MIXTURE_CHUNK];
                uint16_t pos[MIXTURE_CHUNK];

                memcpy(draws, c, len * sizeof(*draws));
                for (uint64_t cycle = first; cycle <= last; cycle++) {
                        uint64_t from = cycle * n; /* <= hi - 1: no overflow */
                        size_t cnt = 0;

                        for (size_t i = 0; i < len; i++) {
                                uint64_t d = draws[i] - from;

                                q[cnt] = d;
                                pos[cnt] = (uint16_t)i;
                                cnt += draws[i] >= from && d < n;
                        }
                        if (cnt == 0)
                                continue;
                        if (s->mode == ZR_SAMPLER_CYCLIC) {
                                zr_feistel f;

                                zr_feistel_init(&f, n, zr_rng_key(seed, ZR_RNG_DOMAIN_CYCLIC, cycle));
                                zr_feistel_map(&f, q, out, cnt);
                        } else {
                                zr_lxperm x;

                                zr_lxperm_init(&x, n, seed, cycle);
                                zr_lxperm_map(&x, q, out, cnt);
                        }
                        for (size_t i = 0; i < cnt; i++)
                                ret_idx[pos[i]] = out[i];
                }
                return;
        }
        /* n far below the step's count: each draw with its own cycle */
        for (size_t i = 0; i < len; i++) {
                uint64_t cycle = c[i] / n, q = c[i] % n;

                if (s->mode == ZR_SAMPLER_CYCLIC) {
                        zr_feistel f;

                        zr_feistel_init(&f, n, zr_rng_key(seed, ZR_RNG_DOMAIN_CYCLIC, cycle));
                        ret_idx[i] = zr_feistel_permute(&f, q);
                } else {
                        zr_lxperm x;

                        zr_lxperm_init(&x, n, seed, cycle);
                        ret_idx[i] = zr_lxperm_permute(&x, q);
                }
        }
}

void zr_mixture_stream(const zr_mixture *m, uint32_t source, uint64_t c0, uint64_t *ret_idx,
                       size_t count) {
        for (size_t j = 0; j < count; j += MIXTURE_CHUNK) {
                size_t len = count - j < MIXTURE_CHUNK ? count - j : MIXTURE_CHUNK;
                uint64_t c[MIXTURE_CHUNK];

                for (size_t i = 0; i < len; i++)
                        c[i] = c0 + j + i;
                mixture_stream_map(m, source, c0 + j, c0 + j + len, c, ret_idx + j, len);
        }
}

/* The source of slot t: the largest k with first[k] <= t (sources with no slot
 * this step share their first with the next one). first[0] = 0 <= t, and first[]
 * is padded with UINT64_MAX from K to 2 * top, so the search is branch-free: a
 * slot's source is random, and a branch on it would miss half the time. */
static inline uint32_t mixture_find(const uint64_t *first, uint32_t top, uint64_t t) {
        uint32_t k = 0;

        for (uint32_t stride = top; stride; stride >>= 1)
                k += stride & -(uint32_t)(first[k + stride] <= t);
        return k;
}

/* The batch's sources and, with `map`, its records; without, each position's
 * draw number in its source's stream (zr_mixture_draws()). */
static int mixture_batch(const zr_mixture *m, uint64_t step, uint32_t rank, uint32_t *ret_source,
                         uint64_t *ret_idx, int map, zr_error *err) {
        uint64_t x0[ZR_MIXTURE_NODES], x1[ZR_MIXTURE_NODES], first[2 * ZR_MIXTURE_MAX_SOURCES];
        uint32_t top = 1;
        zr_feistel layout;
        int r = zr_mixture_check(m, step, rank, err);

        if (r < 0)
                return r;
        mixture_nodes(m, step * m->global, x0);
        mixture_nodes(m, (step + 1) * m->global, x1);
        while (top * 2 < m->count)
                top *= 2;
        first[0] = 0;
        for (uint32_t k = 1; k < m->count; k++)
                first[k] = first[k - 1] + (x1[k - 1] - x0[k - 1]);
        for (uint32_t k = m->count; k <= 2 * top; k++)
                first[k] = UINT64_MAX; /* never <= a slot */
        zr_feistel_init(&layout, m->global, zr_rng_key(m->seed, ZR_RNG_DOMAIN_MIX, step));

        for (uint64_t j0 = 0, len; j0 < m->batch_size; j0 += len) {
                uint64_t slot[MIXTURE_CHUNK], draw[MIXTURE_CHUNK], sorted[MIXTURE_CHUNK];
                uint16_t src[MIXTURE_CHUNK], order[MIXTURE_CHUNK], at[ZR_MIXTURE_MAX_SOURCES + 1];

                /* positions to slots, slots to (source, draw) */
                len = m->batch_size - j0 < MIXTURE_CHUNK ? m->batch_size - j0 : MIXTURE_CHUNK;
                zr_feistel_fill(&layout, (uint64_t)rank * m->batch_size + j0, slot, len);
                for (size_t i = 0; i < len; i++) {
                        uint32_t k = mixture_find(first, top, slot[i]);

                        src[i] = (uint16_t)k;
                        draw[i] = x0[k] + (slot[i] - first[k]);
                        ret_source[j0 + i] = k;
                        if (!map)
                                ret_idx[j0 + i] = draw[i];
                }
                if (!map)
                        continue;
                if (m->count <= MIXTURE_PASSES) {
                        /* few sources: one branch-free pass gathers each source's draws */
                        for (uint32_t k = 0; k < m->count; k++) {
                                size_t cnt = 0;

                                if (x1[k] == x0[k])
                                        continue;
                                for (size_t i = 0; i < len; i++) {
                                        order[cnt] = (uint16_t)i;
                                        sorted[cnt] = draw[i];
                                        cnt += src[i] == k;
                                }
                                if (cnt == 0)
                                        continue;
                                mixture_stream_map(m, k, x0[k], x1[k], sorted, sorted, cnt);
                                for (size_t i = 0; i < cnt; i++)
                                        ret_idx[j0 + order[i]] = sorted[i];
                        }
                        continue;
                }
                /* many: a counting sort groups them */
                memset(at, 0, (m->count + 1) * sizeof(*at));
                for (size_t i = 0; i < len; i++)
                        at[src[i] + 1]++;
                for (uint32_t k = 0; k < m->count; k++)
                        at[k + 1] += at[k];
                for (size_t i = 0; i < len; i++) {
                        uint16_t p = at[src[i]]++;

                        order[p] = (uint16_t)i;
                        sorted[p] = draw[i];
                }
                for (uint32_t k = 0, from = 0; k < m->count; from = at[k], k++)
                        if (at[k] > from)
                                mixture_stream_map(m, k, x0[k], x1[k], sorted + from, sorted + from,
                                                   at[k] - from);
                for (size_t i = 0; i < len; i++)
                        ret_idx[j0 + order[i]] = sorted[i];
        }
        return 0;
}

int zr_mixture_batch(const zr_mixture *m, uint64_t step, uint32_t rank, uint32_t *ret_source,
                     uint64_t *ret_idx, zr_error *err) {
        return mixture_batch(m, step, rank, ret_source, ret_idx, 1, err);
}

int zr_mixture_draws(const zr_mixture *m, uint64_t step, uint32_t rank, uint32_t *ret_source,
                     uint64_t *ret_draw, zr_error *err) {
        return mixture_batch(m, step, rank, ret_source, ret_draw, 0, err);
}
