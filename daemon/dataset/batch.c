/* batch.c: the gather of one batch (batch.h): locate, lay out, then read,
 * through the decoded-record cache for compressed datasets.
 *
 * It assumes the caller holds the dataset's lock shared, so no record it
 * locates moves before it is read (an append may run beside it: appends never
 * move a record). It does not check that a batch fits its destination: the
 * caller does, between the two steps, with the bytes the layout needs.
 */
#include "dataset/batch.h"

#include <errno.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "dataset/ragged.h"
#include "zr-proto.h"

/* Records per shard of the parallel copy of cache hits and inserts: enough to
 * amortise a shard's hand-off, few enough to spread a 256-record batch. */
#define COPY_SHARD_MIN 8

static uint64_t align_up(uint64_t v, uint64_t a) {
        return (v + a - 1) / a * a;
}

int zr_gather_locate(zr_gather *g, zr_error *err) {
        const zr_schema *s = zr_dataset_schema(g->ds);
        size_t n = g->n ? g->n : 1;
        uint64_t used = 0;
        int r;

        g->bytes = 0;
        if (n > SIZE_MAX / (sizeof(zr_loc) + sizeof(void *)))
                return zr_error_errno(err, ENOMEM, "gathering %zu records", g->n);
        /* one table: the locations, then the destinations */
        g->locs = malloc(n * (sizeof(zr_loc) + sizeof(void *)));
        if (!g->locs)
                return zr_error_errno(err, ENOMEM, "gathering %zu records", g->n);
        g->dsts = (void **)(g->locs + n);
        r = zr_store_locate(zr_dataset_store(g->ds), g->idx, g->n, g->locs, err);
        if (r < 0)
                return r;
        if (s->kind == ZR_SCHEMA_DENSE) {
                uint64_t item = zr_schema_item_bytes(s);
                for (size_t i = 0; i < g->n; i++)
                        if (g->locs[i].logic_length != item)
                                return zr_error_set(err, ZR_E_CORRUPT, "record %" PRIu64 " is %u "
                                                    "bytes, an item is %" PRIu64, g->idx[i],
                                                    g->locs[i].logic_length, item);
                g->bytes = (uint64_t)g->n * item;
                return 0;
        }
        /* loaderx 1.5.7's layouts: no header, the shape is the dataset's to give */
        uint64_t hdr = s->layout == ZR_LAYOUT_ZRECORD ? zr_ragged_header_bytes(s->ndim) : 0;
        for (size_t i = 0; i < g->n; i++) {
                if (hdr == 0) {
                        uint64_t dims[ZR_SCHEMA_NDIM_MAX];
                        uint32_t nd;
                        r = zr_dataset_record_shape(g->ds, g->idx[i], g->locs[i].logic_length,
                                                    &nd, dims, err);
                        if (r < 0)
                                return r;
                } else if (g->locs[i].logic_length < hdr)
                        return zr_error_set(err, ZR_E_CORRUPT, "record %" PRIu64 " is shorter "
                                            "than its shape header", g->idx[i]);
                used = align_up(used, ZR_RECORD_ALIGN);
                g->offsets[i] = used;
                used += g->locs[i].logic_length;
        }
        g->bytes = used;
        return 0;
}

typedef struct copy_job {
        zr_rcache *cache;
        const zr_rcache_key *keys;
        zr_rcache_entry **hits;
        void *const *dsts;
        const zr_loc *locs;
        size_t n;
        _Atomic uint64_t evictions;
} copy_job;

/* Shard: copies cache hits into place, inserts decoded misses into the cache. */
static void copy_shard(void *arg, size_t shard, size_t nshards) {
        copy_job *j = arg;
        size_t lo = j->n * shard / nshards, hi = j->n * (shard + 1) / nshards;
        uint64_t ev = 0;

        for (size_t i = lo; i < hi; i++) {
                if (j->hits[i])
                        memcpy(j->dsts[i], zr_rcache_entry_data(j->hits[i]),
                               j->locs[i].logic_length);
                else
                        ev += zr_rcache_insert(j->cache, &j->keys[i], j->dsts[i],
                                               j->locs[i].logic_length);
        }
        atomic_fetch_add(&j->evictions, ev);
}

/* Reads through the cache: hits are copied, misses decoded then inserted. */
static int read_cached(zr_gather *g, zr_rcache *cache, zr_pool *pool, zr_error *err) {
        size_t n = g->n, nm = 0, nhits;
        uint64_t id = zr_dataset_id(g->ds), gen = zr_dataset_generation(g->ds);
        zr_rcache_key *keys;
        zr_loc *mlocs;
        zr_rcache_entry **hits;
        void **mdsts;
        int r;

        /* one table: keys, the misses' locations, hits, the misses' places */
        keys = malloc(n * (sizeof(*keys) + sizeof(*mlocs) + sizeof(*hits) + sizeof(*mdsts)));
        if (!keys)
                return zr_error_errno(err, ENOMEM, "gathering a batch of %zu", n);
        mlocs = (zr_loc *)(keys + n);
        hits = (zr_rcache_entry **)(mlocs + n);
        mdsts = (void **)(hits + n);
        for (size_t i = 0; i < n; i++)
                keys[i] = (zr_rcache_key){ id, gen, g->idx[i] };
        nhits = zr_rcache_lookup(cache, keys, n, hits);
        /* this batch is the planned use: what is inserted below is kept or
         * not by its next use after this one */
        if (g->plan_owner)
                zr_rcache_unplan(cache, g->plan_owner, keys, n);
        for (size_t i = 0; i < n; i++) {
                if (hits[i] && zr_rcache_entry_len(hits[i]) != g->locs[i].logic_length) {
                        /* cannot happen for an immutable key; decode instead */
                        zr_rcache_unpin(cache, hits[i]);
                        hits[i] = NULL;
                        nhits--;
                }
                if (!hits[i]) {
                        mlocs[nm] = g->locs[i];
                        mdsts[nm++] = g->dsts[i];
                }
        }
        g->hits += nhits;
        g->misses += nm;
        r = zr_store_gather_locs(zr_dataset_store(g->ds), mlocs, nm, mdsts, err);
        if (r >= 0) {
                copy_job j = { .cache = cache, .keys = keys, .hits = hits, .dsts = g->dsts,
                               .locs = g->locs, .n = n };
                zr_pool_parallel(pool, zr_pool_shards(pool, (n + COPY_SHARD_MIN - 1) /
                                                                    COPY_SHARD_MIN),
                                 copy_shard, &j);
                g->evictions += atomic_load(&j.evictions);
        }
        for (size_t i = 0; i < n; i++)
                zr_rcache_unpin(cache, hits[i]);
        free(keys);
        return r;
}

/* The shapes, payload offsets and lengths of a batch of loaderx 1.5.7's layouts,
 * whose records are bare payloads (checked against their shapes by locate). */
static int shapes_headerless(zr_gather *g, uint64_t base, zr_error *err) {
        bool any = zr_dataset_schema(g->ds)->ndim == ZR_SCHEMA_NDIM_ANY;
        uint64_t w = 0;

        for (size_t i = 0; i < g->n; i++) {
                uint32_t nd;
                int r = zr_dataset_record_shape(g->ds, g->idx[i], g->locs[i].logic_length, &nd,
                                                g->shapes + w + any, err);
                if (r < 0)
                        return r;
                if (any)
                        g->shapes[w++] = nd;
                w += nd;
                g->offsets[i] += base;
                g->lengths[i] = g->locs[i].logic_length;
        }
        g->shape_words = w;
        return 0;
}

int zr_gather_read(zr_gather *g, uint8_t *dst, uint64_t base, zr_rcache *cache, zr_pool *pool,
                   zr_error *err) {
        const zr_schema *s = zr_dataset_schema(g->ds);
        bool ragged = s->kind == ZR_SCHEMA_RAGGED;
        uint64_t item = zr_schema_item_bytes(s), w = 0;
        int r;

        for (size_t i = 0; i < g->n; i++) {
                if (!ragged) {
                        g->dsts[i] = dst + i * item;
                        continue;
                }
                uint64_t end = g->offsets[i] + g->locs[i].logic_length;
                g->dsts[i] = dst + g->offsets[i];
                if (i + 1 < g->n && g->offsets[i + 1] > end)
                        memset(dst + end, 0, g->offsets[i + 1] - end);
        }
        if (cache && s->codec != ZR_CODEC_RAW && g->n > 0)
                r = read_cached(g, cache, pool, err);
        else
                r = zr_store_gather_locs(zr_dataset_store(g->ds), g->locs, g->n,
                                         (void *const *)g->dsts, err);
        if (r < 0 || !ragged)
                return r < 0 ? r : 0;
        if (s->layout != ZR_LAYOUT_ZRECORD)
                return shapes_headerless(g, base, err);
        for (size_t i = 0; i < g->n; i++) {
                zr_error perr = {0};
                uint32_t nd = s->ndim;
                if (nd != ZR_SCHEMA_NDIM_ANY)
                        r = zr_ragged_parse(s, g->dsts[i], g->locs[i].logic_length, g->idx[i],
                                            g->shapes + w, &perr);
                else /* its ndim, then its dims (ragged.h) */
                        r = zr_ragged_parse_any(g->dsts[i], g->locs[i].logic_length,
                                                s->dtype.itemsize, g->idx[i], &nd,
                                                g->shapes + w + 1, &perr);
                if (r < 0)
                        return zr_error_set(err, ZR_E_CORRUPT, "stored %s", perr.message);
                if (s->ndim == ZR_SCHEMA_NDIM_ANY)
                        g->shapes[w++] = nd;
                w += nd;
                g->offsets[i] = base + g->offsets[i] + zr_ragged_header_bytes(nd);
                g->lengths[i] = g->locs[i].logic_length - zr_ragged_header_bytes(nd);
        }
        g->shape_words = w;
        return 0;
}

void zr_gather_release(zr_gather *g) {
        free(g->locs);
        g->locs = NULL;
        g->dsts = NULL;
}
