/* test-store.c: the store's operations end to end on a real directory: round
 * trips for every codec and across chunk rollovers (here), delete and compact
 * semantics against a model and gathers concurrent with appends
 * (store-mutation.c), and refusals of bad input from the API side
 * (store-refusals.c). */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check-run.h"
#include "records.h"
#include "store-kit.h"
#include "store/format.h"
#include "store/store-private.h"

/* ---- round trips -------------------------------------------------------- */

static void round_trip_sizes(enum zr_codec codec) {
        /* 16 MiB chunks: two 8 MiB raw records fill one exactly, the next rolls.
         * Level 19 (zstd_dict) is slow, so that codec gets one large record. */
        static const uint64_t lens_all[] = {
                0, 1, 2, 100, 4095, 4096, 4097, 65535, 65536, 1 << 20,
                (8 << 20) - 1, 8 << 20, 8 << 20, 3, 0, (1 << 20) + 1,
        };
        static const uint64_t lens_dict[] = {
                0, 1, 2, 100, 4095, 4096, 4097, 65535, 65536, 1 << 20,
                8 << 20, 3, 0,
        };
        const uint64_t *lens = codec == ZR_CODEC_ZSTD_DICT ? lens_dict : lens_all;
        size_t n = codec == ZR_CODEC_ZSTD_DICT ? sizeof(lens_dict) / sizeof(lens_dict[0])
                                               : sizeof(lens_all) / sizeof(lens_all[0]);
        zr_pool *pool = NULL;
        tdir d;
        uint64_t ids[32], len_of[32];

        ck_assert_int_eq(zr_pool_new(2, &pool), 0);
        tdir_make(&d);
        zr_store *s = create_store(&d, codec, 24, pool);
        ck_assert_int_eq(zr_store_codec(s), codec);
        /* in two batches so both the batch and the rollover paths are taken */
        append_ok(s, lens, 9, 0);
        append_ok(s, lens + 9, n - 9, 9);
        for (size_t i = 0; i < n; i++) {
                ids[i] = i;
                len_of[i] = lens[i];
        }
        check_all(s, ids, len_of, n);
        for (size_t i = 0; i < n; i++)
                check_record(s, n - 1 - i, n - 1 - i, lens[n - 1 - i]);

        /* gather_locs into separate buffers */
        zr_loc locs[32];
        void *dsts[32];
        uint64_t idx[32];
        zr_error err = {0};
        for (size_t i = 0; i < n; i++)
                idx[i] = n - 1 - i;
        ck_assert_int_eq(zr_store_locate(s, idx, n, locs, &err), 0);
        for (size_t i = 0; i < n; i++) {
                ck_assert_uint_eq(locs[i].logic_length, lens[idx[i]]);
                if (codec == ZR_CODEC_RAW)
                        ck_assert_uint_eq(locs[i].phys_length, lens[idx[i]]);
                ck_assert_uint_le((uint64_t)locs[i].offset + locs[i].phys_length, 1 << 24);
                dsts[i] = malloc(lens[idx[i]] + 1);
        }
        ck_assert_msg(zr_store_gather_locs(s, locs, n, dsts, &err) == 0, "%s", err.message);
        for (size_t i = 0; i < n; i++) {
                uint8_t *want = malloc(lens[idx[i]] ? lens[idx[i]] : 1);
                tl_record_fill(want, idx[i], lens[idx[i]]);
                ck_assert(memcmp(dsts[i], want, lens[idx[i]]) == 0);
                free(want);
        }
        /* again through streaming stores, each destination one byte off its
         * allocation's alignment: every record's bytes, and none past them */
        void *odd[32];
        for (size_t i = 0; i < n; i++) {
                memset(dsts[i], 0xA5, lens[idx[i]] + 1);
                odd[i] = (uint8_t *)dsts[i] + 1;
        }
        ck_assert_msg(zr_store_gather_timed(s, locs, n, odd, ZR_GATHER_STREAM, NULL, &err) == 0, "%s",
                      err.message);
        for (size_t i = 0; i < n; i++) {
                uint8_t *want = malloc(lens[idx[i]] ? lens[idx[i]] : 1);
                tl_record_fill(want, idx[i], lens[idx[i]]);
                ck_assert(memcmp(odd[i], want, lens[idx[i]]) == 0);
                ck_assert_uint_eq(((uint8_t *)dsts[i])[0], 0xA5);
                free(want);
                free(dsts[i]);
        }
        if (codec == ZR_CODEC_RAW) {
                /* 8 MiB + 8 MiB fill chunk 0 exactly; the tail rolled */
                ck_assert_uint_eq(locs[n - 1 - 11].chunk_id, 1);
                ck_assert_uint_eq(locs[n - 1 - 11].offset, 0);
                ck_assert_uint_eq(locs[n - 1 - 12].chunk_id, 1);
                ck_assert_uint_eq(locs[n - 1 - 12].offset, 8 << 20);
                /* chunk 1 filled exactly: the next record starts chunk 2 */
                ck_assert_uint_eq(locs[n - 1 - 13].chunk_id, 2);
                ck_assert_uint_eq(locs[n - 1 - 13].offset, 0);
        }

        s = reopen(&d, s, pool);
        ck_assert_int_eq(zr_store_codec(s), codec);
        check_all(s, ids, len_of, n);
        check_verify(s, n);
        zr_stats st;
        ck_assert_int_eq(zr_store_stats(s, &st, NULL), 0);
        ck_assert_uint_eq(st.records, n);
        uint64_t logic = 0;
        for (size_t i = 0; i < n; i++)
                logic += lens[i];
        ck_assert_uint_eq(st.logic_bytes, logic);
        if (codec != ZR_CODEC_RAW)
                ck_assert_uint_lt(st.live_bytes, logic); /* it did compress */
        else
                ck_assert_uint_eq(st.live_bytes, logic);
        ck_assert_uint_ge(st.chunk_bytes, st.live_bytes);
        store_done(&d, s, pool);
}

/* zr_store_append_split(): records whose first 16 bytes come apart from the
 * payloads are stored as if woven, across chunk rollovers (64 KiB chunks)
 * and pwritev's 1024 pieces; refused for a compressed store. */
START_TEST(test_append_split) {
        tdir d;
        zr_pool *pool = NULL;
        zr_error err = {0};
        enum { N = 3000, H = 16 };
        uint64_t lens[N], ids[N], total = 0, first = 99;

        tdir_make(&d);
        ck_assert_int_eq(zr_pool_new(2, &pool), 0);
        zr_store *s = create_store(&d, ZR_CODEC_RAW, 16, pool);
        for (size_t i = 0; i < N; i++) {
                lens[i] = H + (i * 7919) % 3000;
                ids[i] = i;
                total += lens[i];
        }
        uint8_t *woven = make_batch(lens, N, 0);
        uint8_t *hdrs = malloc(N * H), *vals = malloc(total), *p = woven, *v = vals;
        for (size_t i = 0; i < N; i++) {
                memcpy(hdrs + i * H, p, H);
                memcpy(v, p + H, lens[i] - H);
                v += lens[i] - H;
                p += lens[i];
        }
        ck_assert_msg(zr_store_append_split(s, hdrs, H, vals, lens, N, &first, &err) == 0, "%s",
                      err.message);
        ck_assert_uint_eq(first, 0);
        check_all(s, ids, lens, N);
        s = reopen(&d, s, pool);
        check_all(s, ids, lens, N);
        store_done(&d, s, NULL);
        tdir_make(&d);
        s = create_store(&d, ZR_CODEC_ZSTD, 16, pool);
        ck_assert_int_eq(zr_store_append_split(s, hdrs, H, vals, lens, N, NULL, &err), -EINVAL);
        ck_assert_uint_eq(zr_store_length(s), 0);
        store_done(&d, s, pool);
        free(woven);
        free(hdrs);
        free(vals);
}
END_TEST

START_TEST(test_round_trip_raw) {
        round_trip_sizes(ZR_CODEC_RAW);
}
END_TEST

START_TEST(test_round_trip_zstd) {
        round_trip_sizes(ZR_CODEC_ZSTD);
}
END_TEST

START_TEST(test_round_trip_zstd_dict) {
        round_trip_sizes(ZR_CODEC_ZSTD_DICT);
}
END_TEST

/* Appends at levels 1..19 and the default, in an order that passes the kept
 * CDicts (ZR_CODER_CDICTS) and comes back to levels freed meanwhile: every
 * record reads back, at most ZR_CODER_CDICTS are kept, a level outside 1..19
 * is EINVAL with nothing written, and level 19 stores less than level 1 (the
 * level is applied, not ignored). */
static void levels(enum zr_codec codec) {
        static const int order[] = { 1, 19, 0, 2, 9, 3, 1, 13, 19, 4, 6, 1, 0 };
        static const uint64_t lens[] = { 3000, 20000, 100, 65536 };
        enum { NL = sizeof(order) / sizeof(order[0]), NR = sizeof(lens) / sizeof(lens[0]) };
        uint64_t ids[NL * NR], len_of[NL * NR], phys[20] = {0};
        zr_pool *pool = NULL;
        zr_error err = {0};
        tdir d;

        ck_assert_int_eq(zr_pool_new(2, &pool), 0);
        tdir_make(&d);
        zr_store *s = create_store(&d, codec, 24, pool);
        for (size_t k = 0; k < NL; k++) {
                uint8_t *data = make_batch(lens, NR, k * NR);
                zr_stats before, after;
                uint64_t first = 0;
                ck_assert_int_eq(zr_store_stats(s, &before, NULL), 0);
                ck_assert_msg(zr_store_append_level(s, order[k], data, lens, NR, &first, &err) == 0,
                              "level %d: %s", order[k], err.message);
                free(data);
                ck_assert_uint_eq(first, k * NR);
                ck_assert_int_eq(zr_store_stats(s, &after, NULL), 0);
                phys[order[k]] = after.live_bytes - before.live_bytes;
                for (size_t i = 0; i < NR; i++) {
                        ids[k * NR + i] = k * NR + i;
                        len_of[k * NR + i] = lens[i];
                }
                if (codec == ZR_CODEC_ZSTD_DICT)
                        ck_assert_uint_le(zr_coder_cdicts(s->zc, NULL), ZR_CODER_CDICTS);
        }
        check_all(s, ids, len_of, NL * NR);
        check_verify(s, NL * NR);
        ck_assert_msg(phys[19] < phys[1], "level 19: %llu bytes, level 1: %llu",
                      (unsigned long long)phys[19], (unsigned long long)phys[1]);

        /* out of range: refused, nothing written */
        static const int bad[] = { -1, 20, 22, ZR_LEVEL_MAX + 1 };
        for (size_t k = 0; k < sizeof(bad) / sizeof(bad[0]); k++) {
                uint8_t *data = make_batch(lens, 1, 0);
                ck_assert_int_eq(zr_store_append_level(s, bad[k], data, lens, 1, NULL, &err),
                                 -EINVAL);
                ck_assert_ptr_nonnull(strstr(err.message, "1 to 19"));
                free(data);
                ck_assert_uint_eq(zr_store_length(s), NL * NR);
        }
        s = reopen(&d, s, pool);
        check_all(s, ids, len_of, NL * NR);
        store_done(&d, s, pool);
}

START_TEST(test_levels_zstd) {
        levels(ZR_CODEC_ZSTD);
}
END_TEST

START_TEST(test_levels_zstd_dict) {
        levels(ZR_CODEC_ZSTD_DICT);
}
END_TEST

/* Many records in 64 KiB chunks: dozens of rollovers; none straddles. */
static void rollover(enum zr_codec codec) {
        enum { N = 600 };
        static uint64_t lens[N], ids[N];
        zr_pool *pool = NULL;
        tdir d;

        ck_assert_int_eq(zr_pool_new(2, &pool), 0);
        tdir_make(&d);
        zr_store *s = create_store(&d, codec, 16, pool);
        for (size_t i = 0; i < N; i++) {
                lens[i] = (i * 7919) % 20000;
                if (i % 50 == 0)
                        lens[i] = 65536 - (i % 3); /* nearly a whole chunk */
                ids[i] = i;
        }
        if (codec == ZR_CODEC_RAW)
                lens[17] = 65536; /* exactly one chunk */
        for (size_t done = 0; done < N;) {
                size_t b = done % 3 == 0 ? 1 : 97;
                if (b > N - done)
                        b = N - done;
                append_ok(s, lens + done, b, done);
                done += b;
        }
        zr_loc *locs = malloc(N * sizeof(*locs));
        ck_assert_int_eq(zr_store_locate(s, ids, N, locs, NULL), 0);
        uint32_t prev_chunk = 0;
        for (size_t i = 0; i < N; i++) {
                ck_assert_uint_le((uint64_t)locs[i].offset + locs[i].phys_length, 65536);
                ck_assert_uint_ge(locs[i].chunk_id, prev_chunk);
                prev_chunk = locs[i].chunk_id;
        }
        ck_assert_uint_ge(prev_chunk, codec == ZR_CODEC_RAW ? 50 : 3);
        free(locs);
        check_all(s, ids, lens, N);
        s = reopen_checked(&d, s, pool, ids, lens, N);
        store_done(&d, s, pool);
}

START_TEST(test_rollover_raw) {
        rollover(ZR_CODEC_RAW);
}
END_TEST

START_TEST(test_rollover_zstd) {
        rollover(ZR_CODEC_ZSTD);
}
END_TEST

START_TEST(test_no_pool) {
        tdir d;
        uint64_t lens[] = { 10, 20000, 0, 5 }, ids[4];
        zr_store *s = store_filled(&d, ZR_CODEC_ZSTD, 0, NULL, lens, 4, ids);
        check_all(s, ids, lens, 4);
        s = reopen(&d, s, NULL);
        check_all(s, ids, lens, 4);
        ck_assert_int_eq(zr_store_close(s, NULL), 0);
        /* a default store declares 4 GiB chunks: reserved byte 22 is 0 */
        uint8_t hdr[32];
        int fd = openat(d.fd, "meta.zr", O_RDONLY | O_CLOEXEC);
        ck_assert_int_eq(pread(fd, hdr, 32, 0), 32);
        close(fd);
        ck_assert_uint_eq(hdr[22], 0);
        ck_assert_uint_eq(zr_le64_get(hdr + 14), 4);
        tdir_remove(&d);
}
END_TEST

/* The pread path (no mappings) reads the same bytes as the mapped one. */
START_TEST(test_pread_path) {
        enum { N = 300 };
        static uint64_t lens[N], ids[N];
        zr_pool *pool = NULL;
        zr_store_options o = { .chunk_log2 = 16, .no_mmap = 1 };
        zr_error err = {0};
        tdir d;

        ck_assert_int_eq(zr_pool_new(2, &pool), 0);
        o.pool = pool;
        for (enum zr_codec c = ZR_CODEC_RAW; c <= ZR_CODEC_ZSTD; c++) {
                zr_store *s = NULL;
                tdir_make(&d);
                ck_assert_int_eq(zr_store_create(d.fd, c, NULL, 0, &o, &s, &err), 0);
                for (size_t i = 0; i < N; i++) {
                        lens[i] = (i * 4099) % 9000;
                        ids[i] = i;
                }
                append_ok(s, lens, N, 0);
                check_all(s, ids, lens, N);
                ck_assert_int_eq(zr_store_close(s, NULL), 0);
                ck_assert_int_eq(zr_store_open(d.fd, &o, &s, &err), 0);
                check_all(s, ids, lens, N);
                check_verify(s, N);
                ck_assert_int_eq(zr_store_close(s, NULL), 0);
                /* and the mapped path reads what the pread path wrote */
                ck_assert_int_eq(zr_store_open(d.fd, NULL, &s, &err), 0);
                check_all(s, ids, lens, N);
                store_done(&d, s, NULL);
        }
        zr_pool_free(pool);
}
END_TEST

/* A gather asked to pread (ZR_GATHER_PREAD, for records not resident) reads
 * every record's bytes with preads and touches no mapping, where the same
 * gather from the mappings preads nothing (its timed stages count both). */
static void check_gathered(void *const *dsts, const uint64_t *idx, const uint64_t *lens, size_t n) {
        for (size_t i = 0; i < n; i++) {
                uint8_t *want = malloc(lens[idx[i]] ? lens[idx[i]] : 1);
                tl_record_fill(want, idx[i], lens[idx[i]]);
                ck_assert_msg(memcmp(dsts[i], want, lens[idx[i]]) == 0, "record %zu", i);
                free(want);
        }
}

/* Asked to pread, the gather read with at least min_preads preads and touched
 * no page through a mapping; else at least min_pages pages and no pread. */
static void check_read_path(unsigned how, zr_store_times *t, uint64_t min_pages,
                            uint64_t min_preads) {
        uint64_t pages = atomic_load(&t->pages), preads = atomic_load(&t->preads);
        if (how & ZR_GATHER_PREAD) {
                ck_assert_uint_eq(pages, 0);
                ck_assert_uint_ge(preads, min_preads);
        } else {
                ck_assert_uint_ge(pages, min_pages);
                ck_assert_uint_eq(preads, 0);
        }
}

START_TEST(test_pread_asked) {
        enum { N = 200 };
        static uint64_t lens[N], idx[N], item_idx[N];
        static zr_loc locs[N];
        static void *dsts[N];
        zr_pool *pool = NULL;
        zr_error err = {0};
        tdir d;

        ck_assert_int_eq(zr_pool_new(2, &pool), 0);
        for (enum zr_codec c = ZR_CODEC_RAW; c <= ZR_CODEC_ZSTD; c++) {
                tdir_make(&d);
                zr_store *s = create_store(&d, c, 20, pool);
                for (size_t i = 0; i < N; i++) {
                        lens[i] = 1 + (i * 7919) % 20000;
                        idx[i] = (i * 37) % N; /* every record, out of order */
                }
                append_ok(s, lens, N, 0);
                ck_assert_int_eq(zr_store_locate(s, idx, N, locs, &err), 0);
                for (size_t i = 0; i < N; i++)
                        ck_assert_ptr_nonnull(dsts[i] = malloc(lens[idx[i]]));
                for (unsigned how = 0; how <= ZR_GATHER_PREAD; how += ZR_GATHER_PREAD) {
                        zr_store_times t = {0};
                        for (size_t i = 0; i < N; i++)
                                memset(dsts[i], 0xA5, lens[idx[i]]);
                        ck_assert_msg(zr_store_gather_timed(s, locs, N, dsts, how, &t, &err) == 0,
                                      "%s", err.message);
                        check_gathered(dsts, idx, lens, N);
                        check_read_path(how, &t, N, N / 2);
                }
                for (size_t i = 0; i < N; i++)
                        free(dsts[i]);
                store_done(&d, s, NULL);
        }
        /* a dense one-pass gather (each shard locates its own records) too */
        enum { ITEM = 12288 };
        tdir_make(&d);
        zr_store *s = create_store(&d, ZR_CODEC_RAW, 22, pool);
        for (size_t i = 0; i < N; i++) {
                lens[i] = ITEM;
                item_idx[i] = (i * 53) % N;
        }
        append_ok(s, lens, N, 0);
        uint8_t *dst = malloc((size_t)N * ITEM);
        ck_assert_ptr_nonnull(dst);
        for (unsigned how = 0; how <= ZR_GATHER_PREAD; how += ZR_GATHER_PREAD) {
                zr_store_times t = {0};
                memset(dst, 0xA5, (size_t)N * ITEM);
                ck_assert_msg(zr_store_gather_dense_timed(s, item_idx, N, ITEM, dst, locs, how, &t,
                                                          &err) == 0, "%s", err.message);
                for (size_t i = 0; i < N; i++)
                        dsts[i] = dst + i * ITEM;
                check_gathered(dsts, item_idx, lens, N);
                check_read_path(how, &t, (uint64_t)N * ITEM / 4096, N / 2);
        }
        free(dst);
        store_done(&d, s, pool);
}
END_TEST

int main(void) {
        Suite *s = suite_create("store");
        TL_TCASE(s, "round-trip", 300, test_round_trip_raw, test_round_trip_zstd,
                 test_round_trip_zstd_dict, test_levels_zstd, test_levels_zstd_dict,
                 test_rollover_raw, test_rollover_zstd, test_no_pool,
                 test_pread_path, test_pread_asked, test_append_split);
        store_add_mutation(s);
        store_add_refusals(s);
        store_add_size(s);
        return tl_run_suite(s);
}
