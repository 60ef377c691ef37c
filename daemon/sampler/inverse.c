/* inverse.c: which steps saw a record (inverse.h), from the definitions in
 * proto/SAMPLERS.md, "Which steps saw a record".
 *
 * Hits are gathered in a small buffer and handed to the caller in batches. The
 * plain samplers find them in ascending order by construction (positions,
 * cycles and scanned steps ascend); a mixture's draws ascend too, but several
 * draws of one step land at positions in the layout's order, so a step's hits are
 * collected and sorted before they go out.
 */
#include "sampler/inverse.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "sampler/feistel.h"
#include "sampler/lxperm.h"
#include "sampler/rng.h"

#define INVERSE_HITS       256            /* hits per call of on_hits */
#define INVERSE_SCAN       4096           /* positions per call of the iid scan */
#define INVERSE_TICK_CYCLES (UINT64_C(1) << 16) /* cycles between progress reports */
#define INVERSE_TICK_SCAN  (UINT64_C(1) << 22) /* positions between progress reports */

typedef struct inverse_out {
        const zr_steps_of_ops *ops;
        uint64_t batch_size;
        zr_sampler_hit buf[INVERSE_HITS];
        size_t len;
        /* a mixture's hits of the current step, sorted before they go out */
        zr_sampler_hit *step_hits;
        size_t nstep, cap;
} inverse_out;

static int inverse_flush(inverse_out *o) {
        int r = 0;

        if (o->len)
                r = o->ops->on_hits(o->ops->userdata, o->buf, o->len);
        o->len = 0;
        return r;
}

/* The hit at global position g of `step`. */
static int inverse_emit(inverse_out *o, uint64_t step, uint64_t g) {
        o->buf[o->len++] = (zr_sampler_hit){ .step = step, .position = g % o->batch_size,
                                             .rank = (uint32_t)(g / o->batch_size) };
        return o->len == INVERSE_HITS ? inverse_flush(o) : 0;
}

static int inverse_progress(const zr_steps_of_ops *ops, uint64_t done, uint64_t total) {
        return ops->on_progress ? ops->on_progress(ops->userdata, done, total) : 0;
}

static int inverse_hit_cmp(const void *a, const void *b) {
        const zr_sampler_hit *x = a, *y = b;

        if (x->rank != y->rank)
                return x->rank < y->rank ? -1 : 1;
        return (x->position > y->position) - (x->position < y->position);
}

/* Sends the current step's hits, sorted. */
static int inverse_step_flush(inverse_out *o) {
        int r = 0;

        if (o->nstep > 1)
                qsort(o->step_hits, o->nstep, sizeof(*o->step_hits), inverse_hit_cmp);
        for (size_t i = 0; i < o->nstep && !r; i++) {
                o->buf[o->len++] = o->step_hits[i];
                if (o->len == INVERSE_HITS)
                        r = inverse_flush(o);
        }
        o->nstep = 0;
        return r;
}

/* A mixture's hit: held until its step is complete. */
static int inverse_step_add(inverse_out *o, uint64_t step, uint64_t g) {
        int r = 0;

        if (o->nstep && o->step_hits[0].step != step)
                r = inverse_step_flush(o);
        if (r)
                return r;
        if (o->ops->step_hits_max && o->nstep >= o->ops->step_hits_max)
                return -E2BIG;
        if (o->nstep == o->cap) {
                size_t cap = o->cap ? 2 * o->cap : 16;
                zr_sampler_hit *h = realloc(o->step_hits, cap * sizeof(*h));

                if (!h)
                        return -ENOMEM;
                o->step_hits = h;
                o->cap = cap;
        }
        o->step_hits[o->nstep++] = (zr_sampler_hit){ .step = step, .position = g % o->batch_size,
                                                     .rank = (uint32_t)(g / o->batch_size) };
        return 0;
}

static uint64_t inverse_scan_limit(const zr_steps_of_ops *ops) {
        return ops->scan_limit ? ops->scan_limit : ZR_STEPS_OF_SCAN_LIMIT;
}

/* ------------------------------------------------------------- plain samplers */

/* Positions p = record (mod n) in [start*G, stop*G), exact in 128 bits. */
static int inverse_sequential(const zr_sampler_params *p, uint64_t record, uint64_t start,
                              uint64_t stop, inverse_out *o) {
        uint64_t n = p->n, global = p->batch_size * p->world_size, since = 0;
        unsigned __int128 pos = (unsigned __int128)start * global, end = (unsigned __int128)stop * global;
        uint64_t at = (uint64_t)(pos % n);
        int r = 0;

        pos += record >= at ? record - at : record + (n - at);
        for (; pos < end && !r; pos += n) {
                uint64_t step = (uint64_t)(pos / global);

                r = inverse_emit(o, step, (uint64_t)(pos % global));
                if (!r && ++since == INVERSE_TICK_CYCLES) {
                        since = 0;
                        r = inverse_progress(o->ops, step - start, stop - start);
                }
        }
        return r;
}

/* One position per cycle: P_c^-1(record), kept when the cycle does not drop it. */
static int inverse_cyclic(const zr_sampler_params *p, uint64_t record, uint64_t start, uint64_t stop,
                          inverse_out *o) {
        uint64_t global = p->batch_size * p->world_size, per_cycle = p->n / global;
        uint64_t first = start / per_cycle, last = (stop - 1) / per_cycle, kept = per_cycle * global;
        int r = 0;

        for (uint64_t cycle = first; !r; cycle++) {
                uint64_t q;

                if (p->mode == ZR_SAMPLER_CYCLIC_LX157) {
                        zr_lxperm x;

                        zr_lxperm_init(&x, p->n, p->seed, cycle);
                        q = zr_lxperm_unpermute(&x, record);
                } else {
                        zr_feistel f;

                        zr_feistel_init(&f, p->n, zr_rng_key(p->seed, ZR_RNG_DOMAIN_CYCLIC, cycle));
                        q = zr_feistel_unpermute(&f, record);
                }
                if (q < kept) {
                        uint64_t step;

                        /* the last cycle may run past step 2^64 - 1: those steps are
                         * past stop, never wrapped round to early ones */
                        if (!__builtin_add_overflow(cycle * per_cycle, q / global, &step) &&
                            step >= start && step < stop)
                                r = inverse_emit(o, step, q % global);
                }
                if (!r && (cycle - first + 1) % INVERSE_TICK_CYCLES == 0)
                        r = inverse_progress(o->ops, cycle - first + 1, last - first + 1);
                if (cycle == last)
                        break;
        }
        return r;
}

uint64_t zr_sampler_cycle_position(enum zr_sampler_mode mode, uint64_t n, uint64_t seed,
                                   uint64_t cycle, uint64_t record) {
        switch (mode) {
        case ZR_SAMPLER_SEQUENTIAL:
                return record;
        case ZR_SAMPLER_CYCLIC: {
                zr_feistel f;

                zr_feistel_init(&f, n, zr_rng_key(seed, ZR_RNG_DOMAIN_CYCLIC, cycle));
                return zr_feistel_unpermute(&f, record);
        }
        case ZR_SAMPLER_CYCLIC_LX157: {
                zr_lxperm x;

                zr_lxperm_init(&x, n, seed, cycle);
                return zr_lxperm_unpermute(&x, record);
        }
        default:
                return UINT64_MAX;
        }
}

/* Every position of every step, drawn again. */
static int inverse_iid(const zr_sampler_params *p, uint64_t record, uint64_t start, uint64_t stop,
                       inverse_out *o, zr_error *err) {
        uint64_t global = p->batch_size * p->world_size, limit = inverse_scan_limit(o->ops);
        unsigned __int128 total = (unsigned __int128)(stop - start) * global;
        uint64_t found[INVERSE_SCAN], done = 0, since = 0;
        int r = 0;

        if (total > limit)
                return zr_error_set(err, ZR_E_SAMPLER,
                                    "iid has no inverse but a scan: steps [%" PRIu64 ", %" PRIu64
                                    ") hold %.3g positions, above the scan limit %" PRIu64
                                    "; narrow the range or raise the limit",
                                    start, stop, (double)total, limit);
        for (uint64_t step = start; step < stop && !r; step++) {
                uint64_t key = zr_rng_key(p->seed, ZR_RNG_DOMAIN_IID, step);

                for (uint64_t g = 0, len; g < global && !r; g += len) { /* += len: never wraps */
                        len = global - g < INVERSE_SCAN ? global - g : INVERSE_SCAN;
                        size_t hits = zr_rng_iid_find(key, p->n, g, len, record, found);

                        for (size_t i = 0; i < hits && !r; i++)
                                r = inverse_emit(o, step, found[i]);
                        done += len;
                        since += len;
                        if (!r && since >= INVERSE_TICK_SCAN) {
                                since = 0;
                                r = inverse_progress(o->ops, done, (uint64_t)total);
                        }
                }
        }
        return r;
}

int zr_sampler_steps_of(const zr_sampler_params *p, uint64_t record, uint64_t start, uint64_t stop,
                        const zr_steps_of_ops *ops, zr_error *err) {
        zr_sampler_params q = *p;
        inverse_out *o;
        int r;

        q.rank = 0;
        if ((r = zr_sampler_check(&q, err)) < 0)
                return r;
        if (record >= p->n)
                return zr_error_set(err, ZR_E_SAMPLER, "record %" PRIu64 " >= n = %" PRIu64 ": no such record",
                                    record, p->n);
        if (start >= stop)
                return 0;
        o = calloc(1, sizeof(*o));
        if (!o)
                return -ENOMEM;
        o->ops = ops;
        o->batch_size = p->batch_size;
        switch (p->mode) {
        case ZR_SAMPLER_SEQUENTIAL:
                r = inverse_sequential(p, record, start, stop, o);
                break;
        case ZR_SAMPLER_IID:
                r = inverse_iid(p, record, start, stop, o, err);
                break;
        default:
                r = inverse_cyclic(p, record, start, stop, o);
                break;
        }
        if (!r)
                r = inverse_flush(o);
        free(o);
        return r;
}

/* ------------------------------------------------------------------- mixtures */

/* A mixture's output: hits of a step held and sorted, then sent. */
static inverse_out *mix_out_new(const zr_mixture *m, const zr_steps_of_ops *ops) {
        inverse_out *o = calloc(1, sizeof(*o));

        if (o) {
                o->ops = ops;
                o->batch_size = m->batch_size;
        }
        return o;
}

/* Sends what is held unless the walk failed (r), frees the output. */
static int mix_out_end(inverse_out *o, int r) {
        if (!r)
                r = inverse_step_flush(o);
        if (!r)
                r = inverse_flush(o);
        free(o->step_hits);
        free(o);
        return r;
}

typedef struct inverse_mix {
        const zr_mixture *m;
        uint32_t source;
        uint64_t stop;   /* steps end here: D_k(stop) is past every draw looked up */
        uint64_t lo;     /* the step of the last draw (draws ascend) */
        /* the step whose apportionment and layout are at hand */
        int have;
        uint64_t step, first_slot, before;
        zr_feistel layout;
} inverse_mix;

/* The step s in [x->lo, x->stop) with D_k(s) <= c < D_k(s + 1). Starts from the
 * estimate c / (G w_k / W), gallops to a bracket (the apportionment keeps D_k
 * within 2 of s G w_k / W: a few steps, 4 / (G w_k / W) for a source with less
 * than a record per step), then bisects. D_k(lo) <= c < D_k(stop) holds. */
static uint64_t inverse_mix_step(inverse_mix *x, uint64_t c) {
        const zr_mixture *m = x->m;
        uint64_t lo = x->lo, hi = x->stop, a, b, stride;
        unsigned __int128 est = (unsigned __int128)c * m->weight[m->root] /
                                ((unsigned __int128)m->global * m->weight[x->source]);

        a = est < lo ? lo : est >= hi ? hi - 1 : (uint64_t)est;
        if (zr_mixture_draws_before(m, x->source, a) > c) {
                for (b = a, stride = 1; a > lo; stride *= 2) {
                        a = b - lo > stride ? b - stride : lo;
                        if (zr_mixture_draws_before(m, x->source, a) <= c)
                                break;
                        b = a;
                }
        } else {
                for (b = a + 1, stride = 1; b < hi; stride *= 2) {
                        if (zr_mixture_draws_before(m, x->source, b) > c)
                                break;
                        a = b;
                        b = hi - a > stride ? a + stride : hi;
                }
        }
        /* D_k(a) <= c < D_k(b) */
        while (b - a > 1) {
                uint64_t mid = a + (b - a) / 2;

                if (zr_mixture_draws_before(m, x->source, mid) <= c)
                        a = mid;
                else
                        b = mid;
        }
        return a;
}

/* Draw c of the source, found by its stream's inverse: its step and position. */
static int inverse_mix_draw(inverse_mix *x, uint64_t c, inverse_out *o) {
        const zr_mixture *m = x->m;
        uint64_t step = inverse_mix_step(x, c);

        x->lo = step;
        if (!x->have || x->step != step) {
                uint64_t before[ZR_MIXTURE_MAX_SOURCES], count[ZR_MIXTURE_MAX_SOURCES];

                zr_mixture_counts(m, step, before, count, NULL); /* step < stop <= last + 1 */
                x->first_slot = 0;
                for (uint32_t k = 0; k < x->source; k++)
                        x->first_slot += count[k];
                x->before = before[x->source];
                zr_feistel_init(&x->layout, m->global, zr_rng_key(m->seed, ZR_RNG_DOMAIN_MIX, step));
                x->step = step;
                x->have = 1;
        }
        return inverse_step_add(o, step, zr_feistel_unpermute(&x->layout, x->first_slot + c - x->before));
}

int zr_mixture_steps_of(const zr_mixture *m, uint32_t source, uint64_t record, uint64_t start,
                        uint64_t stop, const zr_steps_of_ops *ops, zr_error *err) {
        inverse_mix x = { .m = m, .source = source, .lo = start };
        inverse_out *o = NULL;
        uint64_t n, c_lo, c_hi;
        int r = 0;

        if (source >= m->count)
                return zr_error_set(err, ZR_E_SAMPLER, "source %" PRIu32 " of a mixture of %" PRIu32,
                                    source, m->count);
        n = m->sources[source].n;
        if (record >= n)
                return zr_error_set(err, ZR_E_SAMPLER,
                                    "source %" PRIu32 ": record %" PRIu64 " >= n = %" PRIu64 ": no such record",
                                    source, record, n);
        if (stop > m->last_step + 1)
                stop = m->last_step + 1;
        if (start >= stop)
                return 0;
        c_lo = zr_mixture_draws_before(m, source, start);
        c_hi = zr_mixture_draws_before(m, source, stop);
        if (c_lo == c_hi)
                return 0;
        x.stop = stop;
        if (!(o = mix_out_new(m, ops)))
                return -ENOMEM;

        switch (m->sources[source].mode) {
        case ZR_SAMPLER_SEQUENTIAL: {
                uint64_t at = c_lo % n, since = 0, c;

                int wrapped = __builtin_add_overflow(c_lo, record >= at ? record - at : record + (n - at), &c);

                for (; !wrapped && c < c_hi && !r; wrapped = __builtin_add_overflow(c, n, &c)) {
                        r = inverse_mix_draw(&x, c, o);
                        if (!r && ++since == INVERSE_TICK_CYCLES) {
                                since = 0;
                                r = inverse_progress(ops, c - c_lo, c_hi - c_lo);
                        }
                }
                break;
        }
        case ZR_SAMPLER_IID: {
                uint64_t limit = inverse_scan_limit(ops), key, since = 0;
                uint64_t *found = NULL;

                if (c_hi - c_lo > limit) {
                        r = zr_error_set(err, ZR_E_SAMPLER,
                                         "iid has no inverse but a scan: source %" PRIu32 " draws %" PRIu64
                                         " records in steps [%" PRIu64 ", %" PRIu64 "), above the scan limit %"
                                         PRIu64 "; narrow the range or raise the limit",
                                         source, c_hi - c_lo, start, stop, limit);
                        break;
                }
                found = malloc(INVERSE_SCAN * sizeof(*found));
                if (!found) {
                        r = -ENOMEM;
                        break;
                }
                key = zr_rng_key(m->source_seed[source], ZR_RNG_DOMAIN_IID, 0);
                for (uint64_t c = c_lo, len; c < c_hi && !r; c += len) { /* += len: never wraps */
                        len = c_hi - c < INVERSE_SCAN ? c_hi - c : INVERSE_SCAN;
                        size_t hits = zr_rng_iid_find(key, n, c, len, record, found);

                        for (size_t i = 0; i < hits && !r; i++)
                                r = inverse_mix_draw(&x, found[i], o);
                        since += len;
                        if (!r && since >= INVERSE_TICK_SCAN) {
                                since = 0;
                                r = inverse_progress(ops, c + len - c_lo, c_hi - c_lo);
                        }
                }
                free(found);
                break;
        }
        default: {
                uint64_t first = c_lo / n, last = (c_hi - 1) / n;
                uint64_t seed = m->source_seed[source];

                for (uint64_t cycle = first; !r; cycle++) {
                        uint64_t q, c;

                        if (m->sources[source].mode == ZR_SAMPLER_CYCLIC_LX157) {
                                zr_lxperm p;

                                zr_lxperm_init(&p, n, seed, cycle);
                                q = zr_lxperm_unpermute(&p, record);
                        } else {
                                zr_feistel f;

                                zr_feistel_init(&f, n, zr_rng_key(seed, ZR_RNG_DOMAIN_CYCLIC, cycle));
                                q = zr_feistel_unpermute(&f, record);
                        }
                        /* a draw past 2^64 - 1 is past c_hi, not a wrapped early one */
                        if (!__builtin_add_overflow(cycle * n, q, &c) && c >= c_lo && c < c_hi)
                                r = inverse_mix_draw(&x, c, o);
                        if (!r && (cycle - first + 1) % INVERSE_TICK_CYCLES == 0)
                                r = inverse_progress(ops, cycle - first + 1, last - first + 1);
                        if (cycle == last)
                                break;
                }
                break;
        }
        }
        return mix_out_end(o, r);
}

int zr_mixture_draws_steps_of(const zr_mixture *m, uint32_t source, const uint64_t *draws,
                              size_t n, uint64_t start, uint64_t stop,
                              const zr_steps_of_ops *ops, zr_error *err) {
        inverse_mix x = { .m = m, .source = source, .lo = start };
        inverse_out *o;
        int r = 0;

        if (source >= m->count)
                return zr_error_set(err, ZR_E_SAMPLER, "source %" PRIu32 " of a mixture of %" PRIu32,
                                    source, m->count);
        if (stop > m->last_step + 1)
                stop = m->last_step + 1;
        if (start >= stop || n == 0)
                return 0;
        x.stop = stop;
        if (!(o = mix_out_new(m, ops)))
                return -ENOMEM;
        for (size_t i = 0; i < n && !r; i++) {
                if (draws[i] < zr_mixture_draws_before(m, source, start) ||
                    draws[i] >= zr_mixture_draws_before(m, source, stop) ||
                    (i && draws[i] <= draws[i - 1])) {
                        r = zr_error_set(err, ZR_E_SAMPLER, "draw %" PRIu64 " of source %" PRIu32
                                         " is not in steps [%" PRIu64 ", %" PRIu64 ") or not "
                                         "ascending", draws[i], source, start, stop);
                        break;
                }
                r = inverse_mix_draw(&x, draws[i], o);
        }
        return mix_out_end(o, r);
}

/* --------------------------------------------------------------- pieces */

uint64_t zr_sampler_steps_of_cut(const zr_sampler_params *p, uint64_t start, uint64_t stop,
                                 uint64_t max_scan, uint64_t max_cycles) {
        uint64_t global = p->batch_size * p->world_size, steps, end;

        switch (p->mode) {
        case ZR_SAMPLER_SEQUENTIAL:
                return stop;
        case ZR_SAMPLER_IID:
                steps = max_scan / global;
                break;
        default: {
                /* whole cycles from the one that holds start */
                uint64_t per_cycle = p->n / global, first = start / per_cycle;

                if (__builtin_add_overflow(first, max_cycles ? max_cycles : 1, &end) ||
                    __builtin_mul_overflow(end, per_cycle, &end))
                        return stop;
                return end < stop ? end : stop;
        }
        }
        if (steps == 0)
                steps = 1;
        return stop - start <= steps ? stop : start + steps;
}

uint64_t zr_mixture_steps_of_cut(const zr_mixture *m, uint32_t source, uint64_t start,
                                 uint64_t stop, uint64_t max_scan, uint64_t max_cycles) {
        const zr_mixture_source *s = &m->sources[source];
        uint64_t budget, c0, lo, hi;

        if (stop > m->last_step + 1)
                stop = m->last_step + 1;
        if (start >= stop)
                return stop;
        if (s->mode == ZR_SAMPLER_SEQUENTIAL)
                return stop;
        if (s->mode == ZR_SAMPLER_IID)
                budget = max_scan;
        else if (__builtin_mul_overflow(max_cycles, s->n, &budget))
                budget = UINT64_MAX;
        c0 = zr_mixture_draws_before(m, source, start);
        if (zr_mixture_draws_before(m, source, stop) - c0 <= budget)
                return stop;
        /* the last step s in [start + 1, stop) with D_k(s) - c0 <= budget */
        lo = start + 1;
        hi = stop;
        if (zr_mixture_draws_before(m, source, lo) - c0 > budget)
                return lo;
        while (hi - lo > 1) {
                uint64_t mid = lo + (hi - lo) / 2;

                if (zr_mixture_draws_before(m, source, mid) - c0 <= budget)
                        lo = mid;
                else
                        hi = mid;
        }
        return lo;
}
