/* test-batch.c: the batch gather (dataset/batch.h): the layout locate() makes
 * before any byte is read, ragged records at multiples of 8 with their padding
 * zeroed and `base` added to their offsets, reads through the decoded-record
 * cache (hits, misses, evictions; raw datasets bypass it; a record drawn twice
 * in a batch decoded once), batches of several datasets (a mixture's
 * sources), and refusals. */
#include <check.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>

#include "dataset/batch.h"
#include "dataset/ragged.h"
#include "helpers.h"
#include "zr-proto.h"
#include "check-run.h"
#include "store/store.h"
#include "util.h"

#define N 40

static const zr_store_options test_opts = { .chunk_log2 = TEST_CHUNK_LOG2 };

/* A dense "|u1" dataset of N records of `item` bytes: record i from seed i;
 * its store gathers on `pool` (may be NULL). */
static zr_dataset *make_dense_on(scratch *sc, const char *name, uint64_t item, enum zr_codec codec,
                                 zr_pool *pool) {
        zr_store_options opts = test_opts;
        uint64_t shape[2] = { N, item };
        uint8_t *data = malloc(N * item);
        zr_dataset *ds;
        zr_schema s;
        zr_error err = {0};
        int fd = scratch_child(sc, name);

        for (uint64_t i = 0; i < N; i++)
                gen_bytes(data + i * item, item, i);
        opts.pool = pool;
        ck_assert_int_eq(zr_schema_init_dense(&s, "|u1", &item, 1, codec, &err), 0);
        ck_assert_msg(zr_dataset_create(fd, &s, NULL, 0, &opts, &ds, &err) == 0, "%s",
                      err.message);
        zr_batch b = { .dtype = "|u1", .data = data, .data_len = N * item, .shape = shape,
                       .ndim = 2 };
        ck_assert_msg(zr_dataset_append(ds, &b, NULL, &err) == 0, "%s", err.message);
        close(fd);
        free(data);
        return ds;
}

static zr_dataset *make_dense(scratch *sc, const char *name, uint64_t item, enum zr_codec codec) {
        return make_dense_on(sc, name, item, codec, NULL);
}

/* A ragged "|u1" ndim-1 dataset: record i has 1 + i % 11 bytes of payload,
 * from seed 100 + i (1000 + i with `other`). */
static zr_dataset *make_ragged_seeded(scratch *sc, const char *name, enum zr_codec codec, int other) {
        uint64_t lens[N], total = 0, at = 0;
        uint8_t *data;
        zr_dataset *ds;
        zr_schema s;
        zr_error err = {0};
        int fd = scratch_child(sc, name);

        for (uint64_t i = 0; i < N; i++)
                total += lens[i] = 16 + 1 + i % 11;
        data = malloc(total);
        for (uint64_t i = 0; i < N; i++) {
                uint64_t dim = 1 + i % 11;
                zr_ragged_header_write(data + at, &dim, 1);
                gen_bytes(data + at + 16, dim, (other ? 1000 : 100) + i);
                at += lens[i];
        }
        ck_assert_int_eq(zr_schema_init_ragged(&s, "|u1", 1, codec, &err), 0);
        ck_assert_msg(zr_dataset_create(fd, &s, NULL, 0, &test_opts, &ds, &err) == 0, "%s",
                      err.message);
        zr_batch b = { .dtype = "|u1", .data = data, .data_len = total, .lens = lens,
                       .nrecords = N };
        ck_assert_msg(zr_dataset_append(ds, &b, NULL, &err) == 0, "%s", err.message);
        close(fd);
        free(data);
        return ds;
}

static zr_dataset *make_ragged(scratch *sc, const char *name, enum zr_codec codec) {
        return make_ragged_seeded(sc, name, codec, 0);
}

/* Ragged: the layout is known before the read, records start at multiples of
 * 8, padding between them is zeroed whatever the destination held, payload
 * offsets carry `base`, and every payload and shape is the one written. */
START_TEST(test_ragged_layout) {
        for (int codec = ZR_CODEC_RAW; codec <= ZR_CODEC_ZSTD; codec++) {
                scratch sc;
                uint64_t idx[6] = { 3, 0, 39, 3, 12, 7 }, offs[6], lens[6], shapes[6];
                uint64_t expect = 0, at = 0;
                zr_error err = {0};

                scratch_new(&sc);
                zr_dataset *ds = make_ragged(&sc, "r", (enum zr_codec)codec);
                zr_gather g = { .ds = ds, .idx = idx, .n = 6, .offsets = offs, .lengths = lens,
                                .shapes = shapes };
                ck_assert_msg(zr_gather_locate(&g, &err) == 0, "%s", err.message);
                for (int k = 0; k < 6; k++) {
                        expect = (expect + 7) / 8 * 8;
                        ck_assert_uint_eq(offs[k], expect);
                        expect += 16 + 1 + idx[k] % 11;
                }
                ck_assert_uint_eq(g.bytes, expect);
                uint8_t *dst = malloc(g.bytes);
                memset(dst, 0xff, g.bytes);
                ck_assert_msg(zr_gather_read(&g, dst, 4096, NULL, NULL, &err) == 0, "%s",
                              err.message);
                for (int k = 0; k < 6; k++) {
                        uint8_t want[16];
                        uint64_t start = offs[k] - 4096 - 16;
                        ck_assert_uint_eq(shapes[k], 1 + idx[k] % 11);
                        ck_assert_uint_eq(lens[k], shapes[k]);
                        ck_assert_uint_eq(start % 8, 0);
                        for (; at < start; at++) /* the padding before record k */
                                ck_assert_uint_eq(dst[at], 0);
                        gen_bytes(want, lens[k], 100 + idx[k]);
                        ck_assert_int_eq(memcmp(dst + start + 16, want, lens[k]), 0);
                        at = start + 16 + lens[k];
                }
                ck_assert_uint_eq(at, g.bytes);
                zr_gather_release(&g);
                zr_gather_release(&g); /* idempotent */
                free(dst);
                zr_dataset_close(ds, NULL);
                scratch_free(&sc);
        }
}
END_TEST

/* A scratch directory, a pool of 2 threads and a 1 MiB decoded-record cache. */
static void cache_rig(scratch *sc, zr_pool **pool, zr_rcache **cache) {
        scratch_new(sc);
        ck_assert_int_eq(zr_pool_new(2, pool), 0);
        ck_assert_int_eq(zr_rcache_new(1 << 20, cache), 0);
}

/* Gathers records idx[0..n) of dense dataset ds (items of `item` bytes)
 * through the cache into dst, checks every record's bytes, and returns the
 * gather's counts in *g (released). */
static void read_dense_checked(zr_dataset *ds, const uint64_t *idx, size_t n, uint64_t item,
                               zr_rcache *cache, zr_pool *pool, uint8_t *dst, zr_gather *g) {
        uint8_t want[256];
        zr_error err = {0};

        ck_assert_uint_le(item, sizeof(want));
        *g = (zr_gather){ .ds = ds, .idx = idx, .n = n };
        memset(dst, 0, n * item);
        ck_assert_int_eq(zr_gather_locate(g, &err), 0);
        ck_assert_uint_eq(g->bytes, n * item);
        ck_assert_msg(zr_gather_read(g, dst, 0, cache, pool, &err) == 0, "%s", err.message);
        for (size_t i = 0; i < n; i++) {
                gen_bytes(want, item, idx[i]);
                ck_assert_int_eq(memcmp(dst + i * item, want, item), 0);
        }
        zr_gather_release(g);
}

/* Through a cache: a compressed dataset's records miss once, then hit; a
 * budget too small evicts; a raw dataset never looks; the bytes are always
 * the records'. */
START_TEST(test_cache) {
        enum { ITEM = 64 };
        uint64_t idx[N], hits = 0, misses = 0;
        uint8_t dst[N * ITEM], want[ITEM];
        zr_rcache *cache;
        zr_pool *pool;
        zr_error err = {0};
        scratch sc;

        cache_rig(&sc, &pool, &cache);
        zr_dataset *zs = make_dense(&sc, "z", ITEM, ZR_CODEC_ZSTD);
        zr_dataset *raw = make_dense(&sc, "r", ITEM, ZR_CODEC_RAW);
        for (uint64_t i = 0; i < N; i++)
                idx[i] = (i * 7) % N;
        for (int pass = 0; pass < 3; pass++) {
                zr_gather g;
                read_dense_checked(zs, idx, N, ITEM, cache, pool, dst, &g);
                ck_assert_uint_eq(g.hits, pass ? N : 0);
                ck_assert_uint_eq(g.misses, pass ? 0 : N);
                ck_assert_uint_eq(g.evictions, 0);
        }
        /* room for about 10 records: a pass over 40 evicts */
        zr_rcache_set_budget(cache, 10 * (ITEM + ZR_RCACHE_ENTRY_OVERHEAD));
        zr_gather g = { .ds = zs, .idx = idx, .n = N };
        ck_assert_int_eq(zr_gather_locate(&g, &err), 0);
        ck_assert_int_eq(zr_gather_read(&g, dst, 0, cache, pool, &err), 0);
        hits += g.hits;
        misses += g.misses;
        ck_assert_uint_eq(hits + misses, N);
        ck_assert_uint_gt(misses, 0);
        ck_assert_uint_gt(g.evictions, 0);
        zr_gather_release(&g);
        /* raw: read straight from the store */
        g = (zr_gather){ .ds = raw, .idx = idx, .n = N };
        ck_assert_int_eq(zr_gather_locate(&g, &err), 0);
        ck_assert_int_eq(zr_gather_read(&g, dst, 0, cache, pool, &err), 0);
        ck_assert_uint_eq(g.hits + g.misses, 0);
        gen_bytes(want, ITEM, idx[N - 1]);
        ck_assert_int_eq(memcmp(dst + (N - 1) * ITEM, want, ITEM), 0);
        zr_gather_release(&g);
        zr_dataset_close(zs, NULL);
        zr_dataset_close(raw, NULL);
        zr_rcache_free(cache);
        zr_pool_free(pool);
        scratch_free(&sc);
}
END_TEST

/* Dense batches are located, checked and read shard by shard on the store's
 * pool, raw and compressed, without a cache: every record lands at i × item,
 * repeats and runs of consecutive indices included. */
START_TEST(test_dense_shards) {
        enum { ITEM = 4096 + 8, B = 500 };
        static uint8_t dst[B * ITEM];
        uint8_t want[ITEM];
        uint64_t idx[B];
        zr_pool *pool;
        zr_error err = {0};
        scratch sc;

        scratch_new(&sc);
        ck_assert_int_eq(zr_pool_new(3, &pool), 0);
        for (size_t i = 0; i < B; i++) /* runs of 3 consecutive records, then jumps */
                idx[i] = i % 4 == 3 ? (i * 13) % N : (i / 4 * 3 + i % 4) % N;
        for (int c = 0; c < 2; c++) {
                zr_dataset *ds = make_dense_on(&sc, c ? "z" : "r", ITEM,
                                               c ? ZR_CODEC_ZSTD : ZR_CODEC_RAW, pool);
                zr_gather g = { .ds = ds, .idx = idx, .n = B };
                memset(dst, 0xA5, sizeof(dst));
                ck_assert_int_eq(zr_gather_locate(&g, &err), 0);
                ck_assert_uint_eq(g.bytes, (uint64_t)B * ITEM);
                ck_assert_msg(zr_gather_read(&g, dst, 0, NULL, NULL, &err) == 0, "%s",
                              err.message);
                for (size_t i = 0; i < B; i++) {
                        gen_bytes(want, ITEM, idx[i]);
                        ck_assert_msg(memcmp(dst + i * ITEM, want, ITEM) == 0,
                                      "codec %d: record %zu (index %llu) is wrong", c, i,
                                      (unsigned long long)idx[i]);
                }
                zr_gather_release(&g);
                zr_dataset_close(ds, NULL);
        }
        zr_pool_free(pool);
        scratch_free(&sc);
}
END_TEST

/* Syncs *ds (directory `name` of sc), closes and reopens it, so that none of
 * its pages is mapped, and drops its records' pages from the page cache
 * (POSIX_FADV_DONTNEED: no root needed); returns whether they are gone (a
 * page cache that keeps a file system's pages, tmpfs, keeps them). */
static int reopen_dropped(scratch *sc, const char *name, zr_dataset **ds) {
        zr_io_range r[N];
        zr_loc locs[N];
        uint64_t all[N];
        zr_error err = {0};
        size_t m;
        int fd = openat(sc->fd, name, O_RDONLY | O_DIRECTORY | O_CLOEXEC);

        ck_assert_int_ge(fd, 0);
        ck_assert_int_eq(zr_dataset_sync(*ds, &err), 0);
        zr_dataset_close(*ds, NULL);
        ck_assert_int_eq(zr_dataset_open(fd, &test_opts, ds, &err), 0);
        close(fd);
        for (size_t i = 0; i < N; i++)
                all[i] = i;
        zr_store *st = zr_dataset_store(*ds);
        ck_assert_int_eq(zr_store_locate(st, all, N, locs, &err), 0);
        ck_assert_int_eq(zr_store_io_ranges(st, locs, N, r, &m, NULL), 0);
        for (size_t i = 0; i < m; i++)
                posix_fadvise(r[i].fd, 0, 0, POSIX_FADV_DONTNEED);
        return zr_store_resident(st, locs, N, NULL) == 0;
}

/* Whether a READ's batch is cold (read with pread): records of at least
 * ZR_GATHER_PREAD_MIN bytes mostly out of the page cache, and only those; the
 * bytes are the same either way. */
START_TEST(test_mostly_cold) {
        enum { BIG = ZR_GATHER_PREAD_MIN, SMALL = 4096, B = 24 };
        static uint8_t dst[B * BIG];
        uint8_t *want = malloc(BIG);
        uint64_t idx[B];
        zr_error err = {0};
        scratch sc;

        /* the rule: at least half missing, and those of BIG bytes on average */
        ck_assert(zr_gather_cold(8, 16, 8ull * BIG));
        ck_assert(!zr_gather_cold(7, 16, 7ull * BIG));
        ck_assert(!zr_gather_cold(8, 16, 8ull * BIG - 1));
        ck_assert(!zr_gather_cold(0, 0, 0));
        scratch_new(&sc);
        for (size_t i = 0; i < B; i++)
                idx[i] = (i * 7) % N;
        for (int big = 0; big < 2; big++) {
                uint64_t item = big ? BIG : SMALL;
                const char *name = big ? "big" : "small";
                zr_dataset *ds = make_dense(&sc, name, item, ZR_CODEC_RAW);
                for (int evicted = 0; evicted < 2; evicted++) {
                        if (evicted && !reopen_dropped(&sc, name, &ds)) {
                                fprintf(stderr, "skipped the cold batch: the page cache keeps "
                                        "this file system's pages (tmpfs?)\n");
                                break;
                        }
                        zr_gather g = { .ds = ds, .idx = idx, .n = B };
                        ck_assert_int_eq(zr_gather_locate(&g, &err), 0);
                        g.cold = zr_gather_mostly_cold(&g);
                        ck_assert_msg(g.cold == (big && evicted), "%s records, %s: cold %d", name,
                                      evicted ? "evicted" : "resident", g.cold);
                        ck_assert_msg(zr_gather_read(&g, dst, 0, NULL, NULL, &err) == 0, "%s",
                                      err.message);
                        for (size_t i = 0; i < B; i++) {
                                gen_bytes(want, item, idx[i]);
                                ck_assert(memcmp(dst + i * item, want, item) == 0);
                        }
                        zr_gather_release(&g);
                }
                zr_dataset_close(ds, NULL);
        }
        free(want);
        scratch_free(&sc);
}
END_TEST

/* A record drawn more than once in a batch is decoded once and copied: each
 * later draw is a hit, the cache holds it once, and every place gets its
 * bytes; a draw of a record the cache already holds stays a plain hit. */
START_TEST(test_cache_repeats) {
        enum { ITEM = 64, B = 12 };
        const uint64_t idx[B] = { 3, 5, 3, 9, 3, 5, 11, 2, 9, 2, 2, 7 };
        uint8_t dst[B * ITEM];
        zr_rcache_stats cs;
        zr_rcache *cache;
        zr_pool *pool;
        scratch sc;

        cache_rig(&sc, &pool, &cache);
        zr_dataset *zs = make_dense(&sc, "z", ITEM, ZR_CODEC_ZSTD);
        for (int pass = 0; pass < 2; pass++) {
                zr_gather g;
                read_dense_checked(zs, idx, B, ITEM, cache, pool, dst, &g);
                /* 6 distinct records (2, 3, 5, 7, 9, 11): the first pass
                 * decodes each once, the second hits every draw */
                ck_assert_uint_eq(g.misses, pass ? 0 : 6);
                ck_assert_uint_eq(g.hits, pass ? B : B - 6);
                zr_rcache_stats_get(cache, &cs);
                ck_assert_uint_eq(cs.entries, 6);
        }
        zr_dataset_close(zs, NULL);
        zr_rcache_free(cache);
        zr_pool_free(pool);
        scratch_free(&sc);
}
END_TEST

/* An index past the end is refused by locate, before anything is read. */
START_TEST(test_range) {
        scratch sc;
        uint64_t idx[2] = { 1, N };
        zr_error err = {0};

        scratch_new(&sc);
        zr_dataset *ds = make_dense(&sc, "d", 8, ZR_CODEC_RAW);
        zr_gather g = { .ds = ds, .idx = idx, .n = 2 };
        ck_assert_int_eq(zr_gather_locate(&g, &err), -ZR_E_RANGE);
        ck_assert_int_eq(err.code, ZR_E_RANGE);
        zr_gather_release(&g);
        /* an empty batch spans nothing */
        g = (zr_gather){ .ds = ds, .idx = idx, .n = 0 };
        ck_assert_int_eq(zr_gather_locate(&g, NULL), 0);
        ck_assert_uint_eq(g.bytes, 0);
        ck_assert_int_eq(zr_gather_read(&g, NULL, 0, NULL, NULL, NULL), 0);
        zr_gather_release(&g);
        zr_dataset_close(ds, NULL);
        scratch_free(&sc);
}
END_TEST

/* A batch of several datasets (a mixture's sources), one raw and one zstd:
 * each record comes from its own source in batch order, laid out as one
 * dataset's would be; only the compressed source's records go through the
 * cache; a source's bad index is refused naming the source. */
START_TEST(test_sources) {
        enum { B = 24 };
        uint64_t idx[B], offs[B], lens[B], shapes[B], expect = 0;
        uint8_t src[B];
        zr_rcache *cache;
        zr_pool *pool;
        zr_error err = {0};
        scratch sc;

        cache_rig(&sc, &pool, &cache);
        zr_dataset *ds[2] = { make_ragged_seeded(&sc, "a", ZR_CODEC_RAW, 0),
                              make_ragged_seeded(&sc, "b", ZR_CODEC_ZSTD, 1) };
        for (int i = 0; i < B; i++) {
                src[i] = (uint8_t)((i * 5 + i / 3) % 2);
                idx[i] = (uint64_t)(i * 13 + 5) % N;
        }
        for (int pass = 0; pass < 2; pass++) {
                uint64_t zstd_records = 0;
                zr_gather g = { .sources = ds, .source = src, .nsources = 2, .idx = idx, .n = B,
                                .offsets = offs, .lengths = lens, .shapes = shapes };

                ck_assert_msg(zr_gather_locate(&g, &err) == 0, "%s", err.message);
                expect = 0;
                for (int k = 0; k < B; k++) {
                        expect = (expect + 7) / 8 * 8;
                        ck_assert_uint_eq(offs[k], expect);
                        expect += 16 + 1 + idx[k] % 11;
                        zstd_records += src[k];
                }
                ck_assert_uint_eq(g.bytes, expect);
                uint8_t *dst = malloc(g.bytes);
                ck_assert_msg(zr_gather_read(&g, dst, 0, cache, pool, &err) == 0, "%s", err.message);
                for (int k = 0; k < B; k++) {
                        uint8_t want[16];
                        ck_assert_uint_eq(shapes[k], 1 + idx[k] % 11);
                        gen_bytes(want, lens[k], (src[k] ? 1000 : 100) + idx[k]);
                        ck_assert_int_eq(memcmp(dst + offs[k], want, lens[k]), 0);
                }
                ck_assert_uint_eq(g.hits + g.misses, zstd_records);
                ck_assert_uint_eq(g.hits, pass ? zstd_records : 0);
                zr_gather_release(&g);
                free(dst);
        }
        idx[7] = N; /* past the end of its source */
        zr_gather g = { .sources = ds, .source = src, .nsources = 2, .idx = idx, .n = B,
                        .offsets = offs, .lengths = lens, .shapes = shapes };
        ck_assert_int_eq(zr_gather_locate(&g, &err), -ZR_E_RANGE);
        ck_assert_msg(strncmp(err.message, src[7] ? "source 1: " : "source 0: ", 10) == 0, "%s",
                      err.message);
        zr_gather_release(&g);
        zr_dataset_close(ds[0], NULL);
        zr_dataset_close(ds[1], NULL);
        zr_rcache_free(cache);
        zr_pool_free(pool);
        scratch_free(&sc);
}
END_TEST

/* A timed gather (batch.h, zr_gather_times): the same bytes as an untimed
 * one; decoding counted for zstd, copying for raw, lookups for both, and the
 * stages within the wall time around the gather; in detail, from a store whose
 * pages were dropped from the page cache, the reads (faults) counted apart,
 * and the device bytes at least the records'. */
START_TEST(test_timed_stages) {
        enum { ITEM = 16384 };
        uint64_t idx[N];
        uint8_t *dst = malloc(N * ITEM), *plain = malloc(N * ITEM);
        zr_error err = {0};
        scratch sc;

        ck_assert(dst && plain);
        scratch_new(&sc);
        for (uint64_t i = 0; i < N; i++)
                idx[i] = (i * 13) % N;
        for (int codec = ZR_CODEC_RAW; codec <= ZR_CODEC_ZSTD; codec++) {
                zr_dataset *ds = make_dense(&sc, codec ? "z" : "r", ITEM, (enum zr_codec)codec);
                for (int cold = 0; cold < 2; cold++) {
                        zr_gather_times t = { .detail = cold };
                        zr_gather g = { .ds = ds, .idx = idx, .n = N, .times = &t };
                        zr_gather u = { .ds = ds, .idx = idx, .n = N };
                        int dropped = 0;
                        ck_assert_int_eq(zr_gather_locate(&u, &err), 0);
                        ck_assert_int_eq(zr_gather_read(&u, plain, 0, NULL, NULL, &err), 0);
                        zr_gather_release(&u);
                        if (cold) {
                                /* synced, its pages are clean; reopened, none is mapped:
                                 * the page cache may let them go */
                                dropped = reopen_dropped(&sc, codec ? "z" : "r", &ds);
                                g.ds = ds;
                        }
                        uint64_t t0 = tl_now_ns();
                        ck_assert_msg(zr_gather_locate(&g, &err) == 0, "%s", err.message);
                        ck_assert_msg(zr_gather_read(&g, dst, 0, NULL, NULL, &err) == 0, "%s",
                                      err.message);
                        uint64_t wall = tl_now_ns() - t0;
                        zr_gather_release(&g);
                        ck_assert_int_eq(memcmp(dst, plain, N * ITEM), 0);
                        ck_assert_uint_gt(t.lookup_ns, 0);
                        ck_assert_uint_le(t.lookup_ns + t.read_ns + t.decode_ns + t.copy_ns, wall);
                        /* pages touched and device bytes in detail only */
                        if (cold)
                                ck_assert_uint_ge(t.pages, N * (ITEM / 4096));
                        else
                                ck_assert_uint_eq(t.pages + t.read_ns, 0);
                        if (codec) {
                                ck_assert_uint_gt(t.decode_ns, 0);
                                ck_assert_uint_eq(t.copy_ns, 0);
                        } else {
                                ck_assert_uint_gt(t.copy_ns, 0);
                                ck_assert_uint_eq(t.decode_ns, 0);
                        }
                        if (!cold) {
                                ck_assert_uint_eq(t.device_bytes, 0);
                        } else if (!dropped) {
                                fprintf(stderr, "skipped the cold gather: the page cache keeps "
                                        "this file system's pages (tmpfs?)\n");
                        } else {
                                /* every page came from the device, in the read pass */
                                uint64_t stored = codec ? 0 : N * ITEM;
                                ck_assert_uint_ge(t.device_bytes, stored ? stored : 4096);
                                ck_assert_uint_gt(t.read_ns, 0);
                                if (!codec)
                                        ck_assert_uint_gt(t.read_ns, t.copy_ns);
                        }
                }
                zr_dataset_close(ds, NULL);
        }
        free(dst);
        free(plain);
        scratch_free(&sc);
}
END_TEST

TL_SUITE_MAIN("batch", test_ragged_layout, test_cache, test_cache_repeats, test_dense_shards,
              test_range, test_sources, test_timed_stages, test_mostly_cold)
