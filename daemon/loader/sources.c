/* sources.c: which records a step reads (loader-private.h): the sampler's
 * indices for a plain loader; for a mixture (proto/SAMPLERS.md, "Mixtures";
 * sampler/mixture.h), each record's source and its index there, with the
 * checks that make a mixture's sources one layout.
 *
 * A mixture's streams are source-major (loader.h, zr_loader_params): stream i
 * of source k is l->streams[k × nstreams + i]. Stream i's slot region holds
 * records of every source's stream i, so the sources must agree on what a
 * record of stream i is: kind, dtype, item shape (dense) or ndim (ragged).
 * Codecs may differ (the gather reads each record as its own dataset does).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "loader/loader-private.h"
#include "zr-proto.h"

/* "(3, 32, 32)" or "()" into buf. */
static void shape_text(const zr_schema *s, char *buf, size_t size) {
        size_t at = (size_t)snprintf(buf, size, "(");

        for (uint32_t d = 0; d < s->ndim && at < size; d++)
                at += (size_t)snprintf(buf + at, size - at, "%s%" PRIu64, d ? ", " : "",
                                       s->item_shape[d]);
        if (at < size)
                snprintf(buf + at, size - at, s->ndim == 1 ? ",)" : ")");
}

/* Whether stream i of source k holds records of the kind source 0's does; a
 * message naming the difference otherwise. */
static int source_alike(const zr_loader *l, uint32_t k, size_t i, zr_error *err) {
        const lstream *a = loader_stream(l, 0, i), *b = loader_stream(l, k, i);
        const zr_schema *sa = a->schema, *sb = b->schema;
        const char *what = a->s.name ? a->s.name : NULL;
        char name[96], ta[128], tb[128];

        if (what)
                snprintf(name, sizeof(name), "stream %zu (%s)", i, what);
        else
                snprintf(name, sizeof(name), "stream %zu", i);
        if (sa->kind != sb->kind)
                return zr_error_set(err, ZR_E_SCHEMA, "%s: source %" PRIu32 " is %s, source 0 %s: "
                                    "a mixture's sources must hold records of one kind", name, k,
                                    sb->kind == ZR_SCHEMA_RAGGED ? "ragged" : "dense",
                                    sa->kind == ZR_SCHEMA_RAGGED ? "ragged" : "dense");
        if (strcmp(sa->dtype.str, sb->dtype.str) != 0)
                return zr_error_set(err, ZR_E_SCHEMA, "%s: source %" PRIu32 " has dtype '%s', "
                                    "source 0 '%s': a mixture's sources must have one dtype", name,
                                    k, sb->dtype.str, sa->dtype.str);
        if (sa->kind == ZR_SCHEMA_RAGGED && sa->ndim != sb->ndim)
                return zr_error_set(err, ZR_E_SCHEMA, "%s: source %" PRIu32 " has ndim %" PRIu32
                                    "%s, source 0 %" PRIu32 "%s: a mixture's sources must have one "
                                    "ndim", name, k, sb->ndim, sb->ndim == ZR_SCHEMA_NDIM_ANY ? " (any)" : "",
                                    sa->ndim, sa->ndim == ZR_SCHEMA_NDIM_ANY ? " (any)" : "");
        if (sa->kind == ZR_SCHEMA_DENSE &&
            (sa->ndim != sb->ndim ||
             memcmp(sa->item_shape, sb->item_shape, sa->ndim * sizeof(sa->item_shape[0])) != 0)) {
                shape_text(sa, ta, sizeof(ta));
                shape_text(sb, tb, sizeof(tb));
                return zr_error_set(err, ZR_E_SCHEMA, "%s: source %" PRIu32 " has item shape %s, "
                                    "source 0 %s: a mixture's sources must have one item shape",
                                    name, k, tb, ta);
        }
        return 0;
}

int zr_sources_setup(zr_loader *l, const zr_loader_params *p, zr_error *err) {
        zr_mixture_source src[ZR_MIXTURE_MAX_SOURCES];
        uint64_t total = 0;
        int r;

        for (uint32_t k = 1; k < l->nsources; k++)
                for (size_t i = 0; i < l->nstreams; i++)
                        if ((r = source_alike(l, k, i, err)) < 0)
                                return r;
        for (uint32_t k = 0; k < l->nsources; k++) {
                const zr_loader_source *s = &p->sources[k];
                uint64_t n = loader_stream(l, k, 0)->open_len; /* read at open, under its lock */
                if (s->has_length && s->length != n)
                        return zr_error_set(err, ZR_E_STALE, "source %" PRIu32 " holds %" PRIu64
                                            " records, the client expects %" PRIu64, k, n, s->length);
                src[k] = (zr_mixture_source){ .mode = s->mode, .n = n, .weight = s->weight };
                total = __builtin_add_overflow(total, n, &total) ? UINT64_MAX : total;
        }
        l->length = total;
        l->mix = malloc(sizeof(*l->mix));
        if (!l->mix)
                return zr_error_errno(err, ENOMEM, "a mixture");
        r = zr_mixture_init(l->mix, src, l->nsources, p->batch_size, p->world_size, p->seed, err);
        if (r < 0)
                return r;
        return zr_mixture_check(l->mix, p->start_step, p->rank, err);
}

void zr_sources_free(zr_loader *l) {
        free(l->mix);
        l->mix = NULL;
}

uint64_t zr_sources_end(const zr_loader *l, int *ret_unbounded) {
        *ret_unbounded = 0;
        /* the engine's steps: the last is the last of the stride's steps at or
         * below the last step (start <= it: a mixture's start_step <= its
         * last_step, checked at open) */
        if (l->mix)
                return (l->mix->last_step - l->phase) / l->stride - l->start + 1;
        if (l->start == 0 && l->stride == 1) {
                *ret_unbounded = 1;
                return 0;
        }
        return (UINT64_MAX - l->phase) / l->stride - l->start + 1;
}

int zr_step_records_init(const zr_loader *l, step_records *r) {
        size_t B = l->sp.batch_size, k_n = loader_sources(l), w = B > k_n ? B : k_n;

        *r = (step_records){0};
        if (B > SIZE_MAX / 32)
                return -ENOMEM;
        /* idx and by_source (u64: B each), from (u32: K + 1), a scratch of u32
         * (the mixture's sources, then counts: max(B, K)), the sources (B bytes) */
        r->mem = malloc(2 * B * sizeof(uint64_t) + (k_n + 1 + w) * sizeof(uint32_t) + B);
        if (!r->mem)
                return -ENOMEM;
        r->idx = r->mem;
        r->by_source = r->idx + B;
        r->from = (uint32_t *)(r->by_source + B);
        r->src = l->mix ? (uint8_t *)(r->from + k_n + 1 + w) : NULL;
        return 0;
}

void zr_step_records_free(step_records *r) {
        free(r->mem);
        *r = (step_records){0};
}

int zr_step_records_get(const zr_loader *l, uint64_t step, step_records *r, int by_source,
                        zr_error *err) {
        size_t B = l->sp.batch_size, k_n = loader_sources(l);
        uint32_t *src32, *at;
        int res;

        step = zr_loader_step(l, step);
        if (!l->mix) {
                zr_sampler_params sp = l->sp;

                sp.step = step;
                res = zr_sampler_indices(&sp, r->idx, err);
                if (res < 0 || !by_source)
                        return res;
                memcpy(r->by_source, r->idx, B * sizeof(*r->idx));
                r->from[0] = 0;
                r->from[1] = (uint32_t)B;
                return 0;
        }
        /* the sources as u32 (zr_mixture_batch()'s) go where the bytes follow */
        src32 = r->from + k_n + 1;
        res = zr_mixture_batch(l->mix, step, l->sp.rank, src32, r->idx, err);
        if (res < 0)
                return res;
        for (size_t j = 0; j < B; j++)
                r->src[j] = (uint8_t)src32[j];
        if (!by_source)
                return 0;
        /* a counting sort, stable; src32 is free again to count in */
        at = src32;
        memset(r->from, 0, (k_n + 1) * sizeof(*r->from));
        for (size_t j = 0; j < B; j++)
                r->from[r->src[j] + 1]++;
        for (size_t k = 0; k < k_n; k++) {
                r->from[k + 1] += r->from[k];
                at[k] = r->from[k];
        }
        for (size_t j = 0; j < B; j++)
                r->by_source[at[r->src[j]]++] = r->idx[j];
        return 0;
}
