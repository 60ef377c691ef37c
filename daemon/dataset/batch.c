/* batch.c: the gather of one batch (batch.h): locate, lay out, then read,
 * through the decoded-record cache for compressed datasets.
 *
 * It assumes the caller holds each of its datasets' locks shared, so no record it
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
#include <time.h>

#include "dataset/ragged.h"
#include "dataset/rdataset.h"
#include "util/copy.h"
#include "zr-proto.h"

/* Records per shard of the parallel copy of cache hits and inserts: enough to
 * amortise a shard's hand-off, few enough to spread a 256-record batch. */
#define COPY_SHARD_MIN 8

static uint64_t align_up(uint64_t v, uint64_t a) {
        return (v + a - 1) / a * a;
}

/* A timed gather's clock (0 when untimed: no clock is read). */
static uint64_t clock_ns(const zr_gather *g) {
        struct timespec ts;
        if (!g->times)
                return 0;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Adds the time since t0 to *stage, if the gather is timed. */
static void add_since(const zr_gather *g, uint64_t *stage, uint64_t t0) {
        if (g->times)
                *stage += clock_ns(g) - t0;
}

/* Adds a store read's wall time (since t0) to the timed gather's stages: in
 * detail split by the shares the store measured in its shards (st), else all
 * to decode (a compressed store) or copy (batch.h). */
static void add_store_time(zr_gather *g, const zr_dataset *ds, uint64_t t0,
                           const zr_store_times *st) {
        zr_gather_times *t = g->times;
        uint64_t wall = clock_ns(g) - t0;

        if (!t->detail) {
                if (zr_dataset_schema(ds)->codec != ZR_CODEC_RAW)
                        t->decode_ns += wall;
                else
                        t->copy_ns += wall;
                return;
        }
        uint64_t part[4] = { atomic_load(&st->lookup_ns), atomic_load(&st->read_ns),
                             atomic_load(&st->decode_ns), atomic_load(&st->copy_ns) };
        uint64_t *to[4] = { &t->lookup_ns, &t->read_ns, &t->decode_ns, &t->copy_ns };
        unsigned __int128 sum = (unsigned __int128)part[0] + part[1] + part[2] + part[3];
        uint64_t left = wall;
        unsigned most = 0;
        for (unsigned i = 0; i < 4; i++) {
                uint64_t w = sum ? (uint64_t)(wall * (unsigned __int128)part[i] / sum) : 0;
                *to[i] += w;
                left -= w;
                if (part[i] > part[most])
                        most = i;
        }
        *to[most] += left; /* what the rounding left, to the largest */
        t->pages += atomic_load(&st->pages);
        t->device_bytes += atomic_load(&st->device_bytes);
}

/* How the store reads the batch's records (ZR_GATHER_*). */
static unsigned gather_how(const zr_gather *g) {
        return (g->stream ? ZR_GATHER_STREAM : 0) | (g->cold ? ZR_GATHER_PREAD : 0);
}

/* The read of records locs[0..n) of ds into dsts, by ds's store, timed if the
 * gather is (the store's stages measured in detail). */
static int store_read(zr_gather *g, zr_dataset *ds, const zr_loc *locs, size_t n,
                      void *const *dsts, zr_error *err) {
        zr_store_times st = { .sample_io = 1 };
        int detail = g->times && g->times->detail;
        uint64_t t0 = clock_ns(g);
        int r = zr_store_gather_timed(zr_dataset_store(ds), locs, n, dsts, gather_how(g),
                                      detail ? &st : NULL, err);

        if (g->times)
                add_store_time(g, ds, t0, &st);
        return r;
}

/* Record i's dataset: ds, or its source's. */
static zr_dataset *record_ds(const zr_gather *g, size_t i) {
        return g->sources ? g->sources[g->source[i]] : g->ds;
}

/* The schema every record follows: ds's, or the first source's (the sources
 * agree on kind, dtype and shape; codecs and layouts may differ). */
static const zr_schema *gather_schema(const zr_gather *g) {
        return zr_dataset_schema(g->sources ? g->sources[0] : g->ds);
}

/* A batch of several datasets: groups the records by source (a counting sort,
 * stable), then locates each source's in its own store. */
static int locate_sources(zr_gather *g, zr_error *err) {
        size_t n = g->n, k_n = g->nsources;
        uint32_t *at;

        if (k_n == 0 || k_n > UINT8_MAX + 1)
                return zr_error_set(err, EINVAL, "a gather of %zu sources", k_n);
        if (n > SIZE_MAX / (2 * sizeof(uint32_t) + sizeof(uint64_t) + sizeof(zr_loc) + sizeof(void *)))
                return zr_error_errno(err, ENOMEM, "gathering %zu records", n);
        /* one table: part_locs, part_idx, part_dsts, order, from (k_n + 1), at (k_n) */
        g->part_locs = malloc(n * (sizeof(zr_loc) + sizeof(uint64_t) + sizeof(void *) + sizeof(uint32_t)) +
                              (2 * k_n + 1) * sizeof(uint32_t));
        if (!g->part_locs)
                return zr_error_errno(err, ENOMEM, "gathering %zu records", n);
        g->part_idx = (uint64_t *)(g->part_locs + n);
        g->part_dsts = (void **)(g->part_idx + n);
        g->order = (uint32_t *)(g->part_dsts + n);
        g->from = g->order + n;
        at = g->from + k_n + 1;
        memset(g->from, 0, (2 * k_n + 1) * sizeof(uint32_t));
        for (size_t i = 0; i < n; i++) {
                if (g->source[i] >= k_n)
                        return zr_error_set(err, EINVAL, "record %zu of the batch names source %u of %zu", i,
                                            g->source[i], k_n);
                g->from[g->source[i] + 1]++;
        }
        for (size_t k = 0; k < k_n; k++) {
                g->from[k + 1] += g->from[k];
                at[k] = g->from[k];
        }
        for (size_t i = 0; i < n; i++) {
                uint32_t j = at[g->source[i]]++;

                g->order[j] = (uint32_t)i;
                g->part_idx[j] = g->idx[i];
        }
        for (size_t k = 0; k < k_n; k++) {
                uint32_t from = g->from[k], cnt = g->from[k + 1] - from;
                zr_error perr = {0};
                int r;

                if (g->cancel && atomic_load(g->cancel))
                        return zr_error_set(err, ECANCELED, "cancelled");
                if (cnt == 0)
                        continue;
                r = zr_store_locate(zr_dataset_store(g->sources[k]), g->part_idx + from, cnt,
                                    g->part_locs + from, &perr);
                if (r < 0)
                        return zr_error_set(err, perr.code ? perr.code : -r, "source %zu: %s", k,
                                            perr.message);
        }
        for (size_t j = 0; j < n; j++)
                g->locs[g->order[j]] = g->part_locs[j];
        return 0;
}

/* ZR_E_CORRUPT for the first record that is not one item of a dense schema. */
static int check_items(const zr_gather *g, uint64_t item, zr_error *err) {
        for (size_t i = 0; i < g->n; i++)
                if (g->locs[i].logic_length != item)
                        return zr_error_set(err, ZR_E_CORRUPT, "record %" PRIu64 " is %u bytes, "
                                            "an item is %" PRIu64, g->idx[i],
                                            g->locs[i].logic_length, item);
        return 0;
}

static int locate(zr_gather *g, zr_error *err) {
        const zr_schema *s = gather_schema(g);
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
        if (s->kind == ZR_SCHEMA_DENSE && !g->sources) {
                /* the layout needs no table entry: the read locates (dense_read) */
                g->bytes = (uint64_t)g->n * zr_schema_item_bytes(s);
                return zr_store_check_range(zr_dataset_store(g->ds), g->idx, g->n, err);
        }
        if (g->sources)
                r = locate_sources(g, err);
        else
                r = zr_store_locate(zr_dataset_store(g->ds), g->idx, g->n, g->locs, err);
        if (r < 0)
                return r;
        if (s->kind == ZR_SCHEMA_DENSE) {
                g->bytes = (uint64_t)g->n * zr_schema_item_bytes(s);
                return check_items(g, zr_schema_item_bytes(s), err);
        }
        for (size_t i = 0; i < g->n; i++) {
                zr_dataset *ds = record_ds(g, i);
                /* loaderx 1.5.7's layouts: no header, the shape is the dataset's to
                 * give (a mixture's sources may differ in layout) */
                uint64_t hdr = zr_dataset_schema(ds)->layout == ZR_LAYOUT_ZRECORD
                                       ? zr_ragged_header_bytes(s->ndim) : 0;
                if (hdr == 0) {
                        uint64_t dims[ZR_SCHEMA_NDIM_MAX];
                        uint32_t nd;
                        r = zr_dataset_record_shape(ds, g->idx[i], g->locs[i].logic_length,
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

int zr_gather_locate(zr_gather *g, zr_error *err) {
        uint64_t t0 = clock_ns(g);
        int r = locate(g, err);
        g->stream = zr_copy_streams(g->bytes > g->span ? g->bytes : g->span);
        if (g->times)
                add_since(g, &g->times->lookup_ns, t0);
        return r;
}

#define COLD_SAMPLE 16

bool zr_gather_mostly_cold(const zr_gather *g) {
        uint64_t sample[COLD_SAMPLE];
        zr_loc locs[COLD_SAMPLE];
        uint8_t resident[COLD_SAMPLE];
        size_t k = g->n < COLD_SAMPLE ? g->n : COLD_SAMPLE, missing = 0;
        uint64_t missing_bytes = 0;

        if (g->sources || k == 0 || g->bytes / g->n < ZR_GATHER_PREAD_MIN)
                return false;
        for (size_t i = 0; i < k; i++)
                sample[i] = g->idx[i * g->n / k];
        zr_store *s = zr_dataset_store(g->ds);
        if (zr_store_locate(s, sample, k, locs, NULL) < 0)
                return false; /* the read says what is wrong */
        zr_loc first[COLD_SAMPLE]; /* each record's first page: one asked, not 64 */
        for (size_t i = 0; i < k; i++) {
                first[i] = locs[i];
                first[i].phys_length = locs[i].phys_length ? 1 : 0;
        }
        zr_store_resident(s, first, k, resident);
        for (size_t i = 0; i < k; i++) {
                if (!resident[i]) {
                        missing++;
                        missing_bytes += locs[i].phys_length;
                }
        }
        return zr_gather_cold(missing, k, missing_bytes);
}

/* The records of one dataset in a gather: all of a one-dataset gather's, or
 * one source's. */
typedef struct gather_part {
        zr_dataset *ds;
        const uint64_t *idx;
        const zr_loc *locs;
        void *const *dsts;
        size_t n;
} gather_part;

typedef struct copy_job {
        zr_rcache *cache;
        const zr_rcache_key *keys;
        zr_rcache_entry **hits;
        const uint8_t *repeat;
        void *const *dsts;
        const zr_loc *locs;
        size_t n;
        bool stream; /* the batch is large: hits are copied with streaming stores */
        _Atomic uint64_t evictions;
} copy_job;

/* Shard: copies cache hits into place, inserts decoded misses into the cache
 * (a record repeated within the batch once). */
static void copy_shard(void *arg, size_t shard, size_t nshards) {
        copy_job *j = arg;
        size_t lo = j->n * shard / nshards, hi = j->n * (shard + 1) / nshards;
        uint64_t ev = 0;

        for (size_t i = lo; i < hi; i++) {
                if (j->hits[i])
                        zr_copy(j->dsts[i], zr_rcache_entry_data(j->hits[i]),
                                j->locs[i].logic_length, j->stream);
                else if (!j->repeat[i])
                        ev += zr_rcache_insert(j->cache, &j->keys[i], j->dsts[i],
                                               j->locs[i].logic_length);
        }
        if (j->stream)
                zr_copy_stream_done();
        atomic_fetch_add(&j->evictions, ev);
}

typedef struct miss {
        uint64_t idx;
        size_t pos;
} miss;

static int cmp_miss(const void *a, const void *b) {
        const miss *x = a, *y = b;
        if (x->idx != y->idx)
                return x->idx < y->idx ? -1 : 1;
        return x->pos < y->pos ? -1 : x->pos > y->pos;
}

/* Marks the misses whose record an earlier miss of the part reads too:
 * repeat[i] = 1 and first[i] = that earlier position. Returns how many. */
static size_t find_repeats(const gather_part *p, zr_rcache_entry *const *hits, miss *m,
                           uint8_t *repeat, size_t *first) {
        size_t nm = 0, k = 0;

        for (size_t i = 0; i < p->n; i++) {
                repeat[i] = 0;
                if (!hits[i])
                        m[nm++] = (miss){ p->idx[i], i };
        }
        if (nm > 1)
                qsort(m, nm, sizeof(*m), cmp_miss);
        for (size_t i = 1, lead = 0; i < nm; i++) {
                if (m[i].idx != m[lead].idx) {
                        lead = i;
                        continue;
                }
                repeat[m[i].pos] = 1;
                first[m[i].pos] = m[lead].pos;
                k++;
        }
        return k;
}

/* Reads through the cache: hits are copied, misses decoded then inserted. A
 * record drawn twice in one batch is decoded once and copied (a hit: the
 * cache's first use of it is this batch). */
static int read_cached(zr_gather *g, const gather_part *p, zr_rcache *cache, zr_pool *pool,
                       zr_error *err) {
        size_t n = p->n, nm = 0, nhits, nrep;
        uint64_t id = zr_dataset_id(p->ds), gen = zr_dataset_generation(p->ds);
        zr_rcache_key *keys;
        zr_loc *mlocs;
        zr_rcache_entry **hits;
        void **mdsts;
        miss *ms;
        size_t *first;
        uint8_t *repeat;
        int r;

        /* one table: keys, the misses' locations, hits, the misses' places,
         * the misses by record, the first of each repeat, the repeats */
        keys = malloc(n * (sizeof(*keys) + sizeof(*mlocs) + sizeof(*hits) + sizeof(*mdsts) +
                           sizeof(*ms) + sizeof(*first) + sizeof(*repeat)));
        if (!keys)
                return zr_error_errno(err, ENOMEM, "gathering a batch of %zu", n);
        mlocs = (zr_loc *)(keys + n);
        hits = (zr_rcache_entry **)(mlocs + n);
        mdsts = (void **)(hits + n);
        ms = (miss *)(mdsts + n);
        first = (size_t *)(ms + n);
        repeat = (uint8_t *)(first + n);
        uint64_t t0 = clock_ns(g);
        for (size_t i = 0; i < n; i++)
                keys[i] = (zr_rcache_key){ id, gen, p->idx[i] };
        nhits = zr_rcache_lookup(cache, keys, n, hits);
        /* this batch is the planned use: what is inserted below is kept or
         * not by its next use after this one */
        if (g->plan_owner)
                zr_rcache_unplan(cache, g->plan_owner, keys, n);
        if (g->times)
                add_since(g, &g->times->lookup_ns, t0);
        for (size_t i = 0; i < n; i++) {
                if (hits[i] && zr_rcache_entry_len(hits[i]) != p->locs[i].logic_length) {
                        /* cannot happen for an immutable key; decode instead */
                        zr_rcache_unpin(cache, hits[i]);
                        hits[i] = NULL;
                        nhits--;
                }
        }
        nrep = find_repeats(p, hits, ms, repeat, first);
        for (size_t i = 0; i < n; i++) {
                if (!hits[i] && !repeat[i]) {
                        mlocs[nm] = p->locs[i];
                        mdsts[nm++] = p->dsts[i];
                }
        }
        g->hits += nhits + nrep;
        g->misses += nm;
        r = store_read(g, p->ds, mlocs, nm, mdsts, err);
        if (r >= 0) {
                copy_job j = { .cache = cache, .keys = keys, .hits = hits, .repeat = repeat,
                               .dsts = p->dsts, .locs = p->locs, .n = n, .stream = g->stream };
                t0 = clock_ns(g);
                for (size_t i = 0; i < n && nrep > 0; i++)
                        if (repeat[i])
                                memcpy(p->dsts[i], p->dsts[first[i]], p->locs[i].logic_length);
                zr_pool_parallel(pool, zr_pool_shards(pool, (n + COPY_SHARD_MIN - 1) /
                                                                    COPY_SHARD_MIN),
                                 copy_shard, &j);
                if (g->times)
                        add_since(g, &g->times->copy_ns, t0);
                g->evictions += atomic_load(&j.evictions);
        }
        for (size_t i = 0; i < n; i++)
                zr_rcache_unpin(cache, hits[i]);
        free(keys);
        return r;
}

/* Reads one dataset's records: through the cache when it is compressed. */
static int read_part(zr_gather *g, const gather_part *p, zr_rcache *cache, zr_pool *pool,
                     zr_error *err) {
        if (p->n == 0)
                return 0;
        if (cache && zr_dataset_schema(p->ds)->codec != ZR_CODEC_RAW)
                return read_cached(g, p, cache, pool, err);
        return store_read(g, p->ds, p->locs, p->n, p->dsts, err);
}

/* Reads every record: one part, or one per source (each named in errors). */
static int read_parts(zr_gather *g, zr_rcache *cache, zr_pool *pool, zr_error *err) {
        if (!g->sources) {
                gather_part p = { g->ds, g->idx, g->locs, g->dsts, g->n };

                return read_part(g, &p, cache, pool, err);
        }
        for (size_t j = 0; j < g->n; j++)
                g->part_dsts[j] = g->dsts[g->order[j]];
        for (uint32_t k = 0; k < g->nsources; k++) {
                uint32_t from = g->from[k];
                if (g->cancel && atomic_load(g->cancel))
                        return zr_error_set(err, ECANCELED, "cancelled");
                gather_part p = { g->sources[k], g->part_idx + from, g->part_locs + from,
                                  g->part_dsts + from, g->from[k + 1] - from };
                zr_error perr = {0};
                int r = read_part(g, &p, cache, pool, &perr);

                if (r < 0)
                        return zr_error_set(err, perr.code ? perr.code : -r, "source %u: %s", k,
                                            perr.message);
        }
        return 0;
}

/* A dense batch of one dataset, whose locate only checked the range: straight
 * from the store in one pass per shard (locate, check, read), or, through the
 * cache, located now. */
static int dense_read(zr_gather *g, uint8_t *dst, zr_rcache *cache, zr_pool *pool,
                      zr_error *err) {
        const zr_schema *s = zr_dataset_schema(g->ds);
        uint64_t item = zr_schema_item_bytes(s);
        zr_store *st = zr_dataset_store(g->ds);
        int r;

        if (!cache || s->codec == ZR_CODEC_RAW || g->n == 0) {
                /* its lookups are its shards': timed with them, in detail */
                zr_store_times times = { .sample_io = 1 };
                int detail = g->times && g->times->detail;
                uint64_t t0 = clock_ns(g);
                r = zr_store_gather_dense_timed(st, g->idx, g->n, item, dst, g->locs,
                                                gather_how(g), detail ? &times : NULL, err);
                if (g->times)
                        add_store_time(g, g->ds, t0, &times);
                return r;
        }
        uint64_t t0 = clock_ns(g);
        r = zr_store_locate(st, g->idx, g->n, g->locs, err);
        if (r == 0)
                r = check_items(g, item, err);
        if (g->times)
                add_since(g, &g->times->lookup_ns, t0);
        for (size_t i = 0; r == 0 && i < g->n; i++)
                g->dsts[i] = dst + i * item;
        return r < 0 ? r : read_parts(g, cache, pool, err);
}

/* Records of remote datasets are made present (fetched and waited for, rdataset.h)
 * and pinned before they are read: pins[k] for source k (one for a batch of one
 * dataset). Their wait counts as reading. */
static int acquire_remote(zr_gather *g, zr_rpin *pins, zr_error *err) {
        uint64_t t0 = clock_ns(g);
        int r = 0;

        if (!g->sources) {
                /* a dense batch of one dataset was not located (locate()): located here */
                bool located = gather_schema(g)->kind != ZR_SCHEMA_DENSE;
                if (zr_dataset_remote(g->ds)) {
                        r = zr_rdataset_acquire(g->ds, g->idx, located ? g->locs : NULL, g->n,
                                                &pins[0], err);
                        /* the disk cache's planned uses of a loader's step, consumed */
                        if (g->plan_owner)
                                zr_rdataset_unplan(g->ds, g->plan_owner, g->idx, g->n);
                }
        } else {
                for (uint32_t k = 0; r == 0 && k < g->nsources; k++) {
                        uint32_t from = g->from[k], cnt = g->from[k + 1] - from;
                        if (!cnt || !zr_dataset_remote(g->sources[k]))
                                continue;
                        r = zr_rdataset_acquire(g->sources[k], g->part_idx + from,
                                                g->part_locs + from, cnt, &pins[k], err);
                        if (g->plan_owner)
                                zr_rdataset_unplan(g->sources[k], g->plan_owner,
                                                   g->part_idx + from, cnt);
                }
        }
        if (g->times)
                add_since(g, &g->times->read_ns, t0);
        return r;
}

static bool any_remote(const zr_gather *g) {
        if (!g->sources)
                return zr_dataset_remote(g->ds) != NULL;
        for (uint32_t k = 0; k < g->nsources; k++)
                if (zr_dataset_remote(g->sources[k]))
                        return true;
        return false;
}

static int gather_read(zr_gather *g, uint8_t *dst, uint64_t base, zr_rcache *cache,
                       zr_pool *pool, zr_error *err);

int zr_gather_read(zr_gather *g, uint8_t *dst, uint64_t base, zr_rcache *cache, zr_pool *pool,
                   zr_error *err) {
        zr_rpin one, *pins = &one;
        uint32_t np = g->sources ? g->nsources : 1;
        int r;

        if (!any_remote(g))
                return gather_read(g, dst, base, cache, pool, err);
        if (np > 1 && !(pins = calloc(np, sizeof(*pins))))
                return zr_error_set(err, ENOMEM, "a remote gather");
        memset(pins, 0, np * sizeof(*pins));
        r = acquire_remote(g, pins, err);
        if (r == 0)
                r = gather_read(g, dst, base, cache, pool, err);
        for (uint32_t k = 0; k < np; k++)
                zr_rdataset_release(&pins[k]);
        if (pins != &one)
                free(pins);
        return r;
}

static int gather_read(zr_gather *g, uint8_t *dst, uint64_t base, zr_rcache *cache,
                       zr_pool *pool, zr_error *err) {
        const zr_schema *s = gather_schema(g);
        bool ragged = s->kind == ZR_SCHEMA_RAGGED;
        uint64_t item = zr_schema_item_bytes(s), w = 0;
        int r;

        if (!ragged && !g->sources)
                return dense_read(g, dst, cache, pool, err);

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
        r = read_parts(g, cache, pool, err);
        if (r < 0 || !ragged)
                return r < 0 ? r : 0;
        uint64_t t0 = clock_ns(g);
        for (size_t i = 0; i < g->n; i++) {
                zr_dataset *ds = record_ds(g, i);
                zr_error perr = {0};
                uint32_t nd = s->ndim;
                if (zr_dataset_schema(ds)->layout != ZR_LAYOUT_ZRECORD) {
                        /* loaderx 1.5.7's layouts: a bare payload, its shape the
                         * dataset's (checked against its size by locate) */
                        bool any = s->ndim == ZR_SCHEMA_NDIM_ANY;
                        r = zr_dataset_record_shape(ds, g->idx[i], g->locs[i].logic_length, &nd,
                                                    g->shapes + w + any, err);
                        if (r < 0)
                                return r;
                        if (any)
                                g->shapes[w++] = nd;
                        w += nd;
                        g->offsets[i] += base;
                        g->lengths[i] = g->locs[i].logic_length;
                        continue;
                }
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
        if (g->times)
                add_since(g, &g->times->copy_ns, t0);
        return 0;
}

void zr_gather_release(zr_gather *g) {
        free(g->locs);
        free(g->part_locs);
        g->locs = NULL;
        g->dsts = NULL;
        g->part_locs = NULL;
        g->part_idx = NULL;
        g->part_dsts = NULL;
        g->order = g->from = NULL;
}
