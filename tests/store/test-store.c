/* test-store.c: the store's operations end to end on a real directory: round
 * trips for every codec and across chunk rollovers, delete and compact
 * semantics against a model, gathers concurrent with appends, and refusals of
 * bad input from the API side. */
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check-run.h"
#include "records.h"
#include "store/format.h"
#include "store/journal.h"
#include "store/store.h"
#include "util.h"

/* ---- helpers ------------------------------------------------------------ */

typedef struct tdir {
        char path[256];
        int fd;
} tdir;

static void tdir_make(tdir *d) {
        snprintf(d->path, sizeof(d->path), "%s/zr-test-store-XXXXXX", tl_tmpdir(false));
        ck_assert_ptr_nonnull(mkdtemp(d->path));
        d->fd = open(d->path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        ck_assert_int_ge(d->fd, 0);
}

static void tdir_remove(tdir *d) {
        close(d->fd);
        tl_rmtree(d->path);
}

static int tdir_has(const tdir *d, const char *name) {
        return faccessat(d->fd, name, F_OK, AT_SYMLINK_NOFOLLOW) == 0;
}

/* A batch of records with ids first_id.. and the given lengths, packed. */
static uint8_t *make_batch(const uint64_t *lens, size_t n, uint64_t first_id) {
        uint64_t total = 0;
        for (size_t i = 0; i < n; i++)
                total += lens[i];
        uint8_t *buf = malloc(total ? total : 1), *p = buf;
        ck_assert_ptr_nonnull(buf);
        for (size_t i = 0; i < n; i++) {
                tl_record_fill(p, first_id + i, lens[i]);
                p += lens[i];
        }
        return buf;
}

/* Checks that store record idx holds record `id` of length len. */
static void check_record(zr_store *s, uint64_t idx, uint64_t id, uint64_t len) {
        uint8_t *got = malloc(len ? len : 1), *want = malloc(len ? len : 1);
        uint64_t got_len = 0;
        zr_error err = {0};
        tl_record_fill(want, id, len);
        int r = zr_store_gather(s, &idx, 1, got, len, &got_len, &err);
        ck_assert_msg(r == 0, "gather %llu: %s", (unsigned long long)idx, err.message);
        ck_assert_uint_eq(got_len, len);
        ck_assert_msg(memcmp(got, want, len) == 0, "record %llu differs", (unsigned long long)idx);
        free(got);
        free(want);
}

/* A raw-content dictionary: zstd accepts any bytes as one. */
static uint8_t *make_dict(size_t *len) {
        *len = 32768;
        uint8_t *d = malloc(*len);
        tl_record_fill(d, 424242, *len);
        return d;
}

static zr_store *create_store(tdir *d, enum zr_codec codec, unsigned chunk_log2,
                              zr_pool *pool) {
        zr_store_options o = { .pool = pool, .chunk_log2 = chunk_log2 };
        zr_store *s = NULL;
        zr_error err = {0};
        size_t dlen = 0;
        uint8_t *dict = codec == ZR_CODEC_ZSTD_DICT ? make_dict(&dlen) : NULL;
        int r = zr_store_create(d->fd, codec, dict, dlen, &o, &s, &err);
        ck_assert_msg(r == 0, "create: %s", err.message);
        free(dict);
        return s;
}

static zr_store *reopen(tdir *d, zr_store *s, zr_pool *pool) {
        zr_store_options o = { .pool = pool };
        zr_error err = {0};
        ck_assert_int_eq(zr_store_close(s, &err), 0);
        s = NULL;
        int r = zr_store_open(d->fd, &o, &s, &err);
        ck_assert_msg(r == 0, "open: %s", err.message);
        return s;
}

static void append_ok(zr_store *s, const uint64_t *lens, size_t n, uint64_t first_id) {
        uint8_t *data = make_batch(lens, n, first_id);
        uint64_t first = 12345;
        zr_error err = {0};
        uint64_t before = zr_store_length(s);
        int r = zr_store_append(s, data, lens, n, &first, &err);
        ck_assert_msg(r == 0, "append: %s", err.message);
        ck_assert_uint_eq(first, before);
        ck_assert_uint_eq(zr_store_length(s), before + n);
        free(data);
}

/* Gathers every record in one packed batch and compares with the model
 * (ids[i], lens_of[ids[i]]). */
static void check_all(zr_store *s, const uint64_t *ids, const uint64_t *len_of, size_t n) {
        ck_assert_uint_eq(zr_store_length(s), n);
        if (n == 0)
                return;
        uint64_t *idx = malloc(n * sizeof(*idx)), *got_lens = malloc(n * sizeof(*got_lens));
        uint64_t total = 0;
        for (size_t i = 0; i < n; i++) {
                idx[i] = i;
                total += len_of[ids[i]];
        }
        uint8_t *buf = malloc(total ? total : 1), *want = malloc(total ? total : 1);
        zr_error err = {0};
        int r = zr_store_gather(s, idx, n, buf, total, got_lens, &err);
        ck_assert_msg(r == 0, "gather all: %s", err.message);
        uint64_t off = 0;
        for (size_t i = 0; i < n; i++) {
                ck_assert_uint_eq(got_lens[i], len_of[ids[i]]);
                tl_record_fill(want + off, ids[i], got_lens[i]);
                ck_assert_msg(memcmp(buf + off, want + off, got_lens[i]) == 0,
                              "record %zu (id %llu) differs", i, (unsigned long long)ids[i]);
                off += got_lens[i];
        }
        free(idx);
        free(got_lens);
        free(buf);
        free(want);
}

static void check_verify(zr_store *s, uint64_t n) {
        zr_verify_report rep;
        zr_error err = {0};
        int r = zr_store_verify(s, &rep, &err);
        ck_assert_msg(r == 0, "verify: %s", err.message);
        ck_assert_uint_eq(rep.records, n);
        ck_assert_uint_eq(rep.bad, 0);
}

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
                dsts[i] = malloc(lens[idx[i]] ? lens[idx[i]] : 1);
        }
        ck_assert_msg(zr_store_gather_locs(s, locs, n, dsts, &err) == 0, "%s", err.message);
        for (size_t i = 0; i < n; i++) {
                uint8_t *want = malloc(lens[idx[i]] ? lens[idx[i]] : 1);
                tl_record_fill(want, idx[i], lens[idx[i]]);
                ck_assert(memcmp(dsts[i], want, lens[idx[i]]) == 0);
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
        ck_assert_int_eq(zr_store_close(s, NULL), 0);
        tdir_remove(&d);
        zr_pool_free(pool);
}

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
        s = reopen(&d, s, pool);
        check_all(s, ids, lens, N);
        check_verify(s, N);
        ck_assert_int_eq(zr_store_close(s, NULL), 0);
        tdir_remove(&d);
        zr_pool_free(pool);
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
        uint64_t lens[] = { 10, 20000, 0, 5 }, ids[] = { 0, 1, 2, 3 };
        tdir_make(&d);
        zr_store *s = create_store(&d, ZR_CODEC_ZSTD, 0, NULL);
        append_ok(s, lens, 4, 0);
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
                ck_assert_int_eq(zr_store_close(s, NULL), 0);
                tdir_remove(&d);
        }
        zr_pool_free(pool);
}
END_TEST

/* ---- delete ------------------------------------------------------------- */

/* The model: swap-last in descending order. */
static void model_delete(uint64_t *ids, size_t *n, const uint64_t *del, size_t ndel) {
        uint64_t *sorted = malloc(ndel * sizeof(*sorted));
        memcpy(sorted, del, ndel * sizeof(*sorted));
        for (size_t i = 0; i < ndel; i++)
                for (size_t k = i + 1; k < ndel; k++)
                        if (sorted[k] > sorted[i]) {
                                uint64_t t = sorted[i];
                                sorted[i] = sorted[k];
                                sorted[k] = t;
                        }
        for (size_t i = 0; i < ndel; i++) {
                ids[sorted[i]] = ids[*n - 1];
                (*n)--;
        }
        free(sorted);
}

START_TEST(test_delete_semantics) {
        enum { N = 200 };
        static uint64_t lens[N], ids[N];
        size_t n = N;
        zr_pool *pool = NULL;
        zr_error err = {0};
        tdir d;

        ck_assert_int_eq(zr_pool_new(2, &pool), 0);
        tdir_make(&d);
        zr_store *s = create_store(&d, ZR_CODEC_ZSTD, 16, pool);
        for (size_t i = 0; i < N; i++) {
                lens[i] = 8 + (i * 131) % 3000;
                ids[i] = i;
        }
        append_ok(s, lens, N, 0);

        /* any order; includes the last index and a run at the tail */
        uint64_t del1[] = { 3, 199, 50, 198, 0, 120, 197, 7 };
        ck_assert_int_eq(zr_store_delete(s, del1, 8, &err), 0);
        model_delete(ids, &n, del1, 8);
        check_all(s, ids, lens, n);

        /* duplicates and out of range change nothing */
        uint64_t dup[] = { 5, 9, 5 };
        ck_assert_int_eq(zr_store_delete(s, dup, 3, &err), -EINVAL);
        zr_error_clear(&err);
        uint64_t oor[] = { 1, n };
        ck_assert_int_eq(zr_store_delete(s, oor, 2, &err), -ZR_E_RANGE);
        ck_assert_ptr_nonnull(strstr(err.message, "out of range"));
        check_all(s, ids, lens, n);
        ck_assert_int_eq(zr_store_delete(s, NULL, 0, NULL), 0);

        s = reopen(&d, s, pool);
        check_all(s, ids, lens, n);
        ck_assert(!tdir_has(&d, ZR_JOURNAL_NAME));

        /* deleting every other record, then appending again */
        uint64_t del2[N];
        size_t nd = 0;
        for (uint64_t i = 0; i < n; i += 2)
                del2[nd++] = i;
        ck_assert_int_eq(zr_store_delete(s, del2, nd, &err), 0);
        model_delete(ids, &n, del2, nd);
        check_all(s, ids, lens, n);
        uint64_t more[3] = { 100, 0, 5000 };
        static uint64_t len_of[N + 3];
        memcpy(len_of, lens, sizeof(lens));
        len_of[N] = 100;
        len_of[N + 1] = 0;
        len_of[N + 2] = 5000;
        append_ok(s, more, 3, N);
        ids[n++] = N;
        ids[n++] = N + 1;
        ids[n++] = N + 2;
        check_all(s, ids, len_of, n);

        /* delete everything */
        for (size_t i = 0; i < n; i++)
                del2[i] = n - 1 - i;
        ck_assert_int_eq(zr_store_delete(s, del2, n, &err), 0);
        ck_assert_uint_eq(zr_store_length(s), 0);
        s = reopen(&d, s, pool);
        ck_assert_uint_eq(zr_store_length(s), 0);
        ck_assert_int_eq(zr_store_close(s, NULL), 0);
        tdir_remove(&d);
        zr_pool_free(pool);
}
END_TEST

/* A complete journal is redone on open; a torn one is discarded. */
START_TEST(test_journal_redo_and_torn) {
        enum { N = 10 };
        uint64_t lens[N], ids[N];
        zr_loc last;
        uint64_t nine = 9;
        zr_error err = {0};
        tdir d;

        for (size_t i = 0; i < N; i++) {
                lens[i] = 100 + i;
                ids[i] = i;
        }
        tdir_make(&d);
        zr_store *s = create_store(&d, ZR_CODEC_RAW, 16, NULL);
        append_ok(s, lens, N, 0);
        ck_assert_int_eq(zr_store_locate(s, &nine, 1, &last, NULL), 0);
        ck_assert_int_eq(zr_store_close(s, NULL), 0);

        /* "delete index 2" as it would be journaled, interrupted before applying */
        zr_journal_entry e = { .index = 2, .loc = last };
        zr_journal j = { .old_len = N, .new_len = N - 1, .n = 1, .entries = &e };
        ck_assert_int_eq(zr_journal_write(d.fd, &j, &err), 0);
        /* torn: one byte short */
        int fd = openat(d.fd, ZR_JOURNAL_NAME, O_RDWR | O_CLOEXEC);
        struct stat st;
        ck_assert_int_eq(fstat(fd, &st), 0);
        ck_assert_int_eq(st.st_size, 40 + 24);
        ck_assert_int_eq(ftruncate(fd, st.st_size - 1), 0);
        close(fd);
        ck_assert_int_eq(zr_store_open(d.fd, NULL, &s, &err), 0);
        ck_assert(!tdir_has(&d, ZR_JOURNAL_NAME));
        check_all(s, ids, lens, N);
        ck_assert_int_eq(zr_store_close(s, NULL), 0);

        /* a flipped byte fails the checksum: discarded too */
        ck_assert_int_eq(zr_journal_write(d.fd, &j, &err), 0);
        fd = openat(d.fd, ZR_JOURNAL_NAME, O_RDWR | O_CLOEXEC);
        uint8_t b = 0x77;
        ck_assert_int_eq(pwrite(fd, &b, 1, 20), 1);
        close(fd);
        ck_assert_int_eq(zr_store_open(d.fd, NULL, &s, &err), 0);
        check_all(s, ids, lens, N);
        ck_assert_int_eq(zr_store_close(s, NULL), 0);

        /* complete: redone */
        ck_assert_int_eq(zr_journal_write(d.fd, &j, &err), 0);
        zr_store_options ro = { .read_only = 1 };
        ck_assert_int_eq(zr_store_open(d.fd, &ro, &s, &err), -ZR_E_READONLY);
        ck_assert_int_eq(zr_store_open(d.fd, NULL, &s, &err), 0);
        ck_assert(!tdir_has(&d, ZR_JOURNAL_NAME));
        ids[2] = 9;
        check_all(s, ids, lens, N - 1);
        ck_assert_int_eq(zr_store_close(s, NULL), 0);

        /* a stale journal (the length moved on) is dropped, not applied */
        j.old_len = 50;
        j.new_len = 40;
        ck_assert_int_eq(zr_journal_write(d.fd, &j, &err), 0);
        ck_assert_int_eq(zr_store_open(d.fd, NULL, &s, &err), 0);
        ck_assert(!tdir_has(&d, ZR_JOURNAL_NAME));
        check_all(s, ids, lens, N - 1);
        check_verify(s, N - 1);
        ck_assert_int_eq(zr_store_close(s, NULL), 0);
        tdir_remove(&d);
}
END_TEST

/* verify finds a record listed twice even though each decodes. */
START_TEST(test_verify_finds_overlap) {
        enum { N = 10 };
        uint64_t lens[N];
        zr_verify_report rep;
        zr_error err = {0};
        tdir d;

        for (size_t i = 0; i < N; i++)
                lens[i] = 64;
        tdir_make(&d);
        zr_store *s = create_store(&d, ZR_CODEC_ZSTD, 16, NULL);
        append_ok(s, lens, N, 0);
        ck_assert_int_eq(zr_store_close(s, NULL), 0);
        int fd = openat(d.fd, "0.loc", O_RDWR | O_CLOEXEC);
        uint8_t e[16];
        ck_assert_int_eq(pread(fd, e, 16, 5 * 16), 16);
        ck_assert_int_eq(pwrite(fd, e, 16, 3 * 16), 16);
        close(fd);
        ck_assert_int_eq(zr_store_open(d.fd, NULL, &s, &err), 0);
        ck_assert_int_eq(zr_store_verify(s, &rep, &err), -ZR_E_CORRUPT);
        ck_assert_ptr_nonnull(strstr(err.message, "overlap"));
        ck_assert_uint_eq(rep.records, N);
        ck_assert_uint_eq(rep.bad, 1);
        ck_assert_uint_eq(rep.first_bad, 5);
        ck_assert_int_eq(rep.overlaps_checked, 1);
        ck_assert_int_eq(zr_store_close(s, NULL), 0);
        tdir_remove(&d);
}
END_TEST

/* ---- compact ------------------------------------------------------------ */

START_TEST(test_compact_semantics) {
        enum { N = 300 };
        static uint64_t lens[N], ids[N];
        size_t n = N;
        zr_pool *pool = NULL;
        zr_error err = {0};
        zr_compact_result res;
        zr_stats st0, st1, st2;
        tdir d;

        ck_assert_int_eq(zr_pool_new(2, &pool), 0);
        tdir_make(&d);
        zr_store *s = create_store(&d, ZR_CODEC_RAW, 16, pool);
        for (size_t i = 0; i < N; i++) {
                lens[i] = 1000 + (i * 97) % 9000;
                ids[i] = i;
        }
        append_ok(s, lens, N, 0);
        ck_assert_int_eq(zr_store_stats(s, &st0, NULL), 0);
        char old_last[32];
        snprintf(old_last, sizeof(old_last), "%u.chunk", (unsigned)(st0.chunk_bytes / 65536));
        ck_assert(tdir_has(&d, old_last));

        /* garbage near the front: many records move */
        uint64_t del[60];
        for (size_t i = 0; i < 60; i++)
                del[i] = i * 3;
        ck_assert_int_eq(zr_store_delete(s, del, 60, &err), 0);
        model_delete(ids, &n, del, 60);
        ck_assert_int_eq(zr_store_stats(s, &st1, NULL), 0);
        ck_assert_uint_eq(st1.chunk_bytes, st0.chunk_bytes);
        ck_assert_uint_lt(st1.live_bytes, st0.live_bytes);
        ck_assert_uint_gt(st1.reclaimable, st0.reclaimable);

        /* stopped after 5 moves: consistent, unchanged contents */
        ck_assert_int_eq(zr_store_compact(s, 5, &res, &err), 0);
        ck_assert_int_eq(res.finished, 0);
        ck_assert_uint_eq(res.moved, 5);
        check_all(s, ids, lens, n);
        s = reopen(&d, s, pool);
        check_all(s, ids, lens, n);
        check_verify(s, n);

        /* re-run to the end */
        ck_assert_int_eq(zr_store_compact(s, 0, &res, &err), 0);
        ck_assert_int_eq(res.finished, 1);
        ck_assert_uint_gt(res.moved, 0);
        ck_assert_uint_gt(res.freed_bytes, 0);
        check_all(s, ids, lens, n);
        ck_assert_int_eq(zr_store_stats(s, &st2, NULL), 0);
        ck_assert_uint_eq(st2.live_bytes, st1.live_bytes);
        ck_assert_uint_lt(st2.reclaimable, st1.reclaimable);
        /* what is left is rollover slack: less than one record per chunk */
        ck_assert_uint_lt(st2.reclaimable, (st2.chunk_bytes / 65536 + 1) * 10000);
        ck_assert_uint_eq(res.freed_bytes, st1.chunk_bytes - st2.chunk_bytes);
        uint32_t last = (uint32_t)(st2.chunk_bytes / 65536);
        char name[32];
        snprintf(name, sizeof(name), "%u.chunk", last);
        ck_assert(tdir_has(&d, name));
        snprintf(name, sizeof(name), "%u.chunk", last + 1);
        ck_assert(!tdir_has(&d, name));
        ck_assert_uint_lt(last, st0.chunk_bytes / 65536);
        ck_assert(!tdir_has(&d, old_last));

        /* a second pass has nothing to move */
        ck_assert_int_eq(zr_store_compact(s, 0, &res, &err), 0);
        ck_assert_uint_eq(res.moved, 0);
        ck_assert_uint_eq(res.skipped, n);
        ck_assert_int_eq(res.finished, 1);

        /* appends continue at the new frontier */
        uint64_t more[2] = { 777, 60000 };
        static uint64_t len_of[N + 2];
        memcpy(len_of, lens, sizeof(lens));
        len_of[N] = 777;
        len_of[N + 1] = 60000;
        append_ok(s, more, 2, N);
        ids[n++] = N;
        ids[n++] = N + 1;
        s = reopen(&d, s, pool);
        check_all(s, ids, len_of, n);
        check_verify(s, n);
        ck_assert_int_eq(zr_store_close(s, NULL), 0);
        tdir_remove(&d);
        zr_pool_free(pool);
}
END_TEST

/* A record that moves down by less than its length goes through scratch
 * space, and a pass stopped between the two copies leaves it readable. */
START_TEST(test_compact_self_overlap) {
        enum { N = 10 };
        uint64_t lens[N], ids[N];
        size_t n = N;
        zr_compact_result res;
        zr_error err = {0};
        tdir d;

        for (size_t i = 0; i < N; i++) {
                lens[i] = i == 0 ? 100 : 50000 + i;
                ids[i] = i;
        }
        tdir_make(&d);
        zr_store *s = create_store(&d, ZR_CODEC_RAW, 20, NULL);
        append_ok(s, lens, N, 0);
        uint64_t del[] = { 0 };
        ck_assert_int_eq(zr_store_delete(s, del, 1, &err), 0);
        model_delete(ids, &n, del, 1);

        zr_stats st0, st1;
        ck_assert_int_eq(zr_store_stats(s, &st0, NULL), 0);
        ck_assert_int_eq(zr_store_compact(s, 2, &res, &err), 0);
        ck_assert_int_eq(res.finished, 0);
        ck_assert_uint_eq(res.moved, 2);
        ck_assert_uint_eq(res.via_scratch, 2);
        /* the scratch space is given back: the frontier did not move */
        ck_assert_int_eq(zr_store_stats(s, &st1, NULL), 0);
        ck_assert_uint_eq(st1.chunk_bytes, st0.chunk_bytes);
        s = reopen(&d, s, NULL);
        check_all(s, ids, lens, n);
        check_verify(s, n);

        ck_assert_int_eq(zr_store_compact(s, 0, &res, &err), 0);
        ck_assert_int_eq(res.finished, 1);
        ck_assert_uint_eq(res.moved, N - 3); /* 2 already in place; the last stays */
        ck_assert_uint_eq(res.via_scratch, N - 3);
        zr_stats st;
        ck_assert_int_eq(zr_store_stats(s, &st, NULL), 0);
        ck_assert_uint_eq(st.reclaimable, 0);
        ck_assert_uint_eq(st.chunk_bytes, st.live_bytes);
        check_all(s, ids, lens, n);
        s = reopen(&d, s, NULL);
        check_all(s, ids, lens, n);
        check_verify(s, n);
        ck_assert_int_eq(zr_store_close(s, NULL), 0);
        tdir_remove(&d);
}
END_TEST

/* ---- concurrency -------------------------------------------------------- */

typedef struct reader_arg {
        zr_store *s;
        _Atomic int *stop;
        uint64_t checked;
        int failed;
        char msg[300];
} reader_arg;

static uint64_t conc_len(uint64_t id) {
        return 100 + (id * 37) % 5000;
}

static void *reader_main(void *p) {
        reader_arg *a = p;
        uint8_t *buf = malloc(64 * 5100), *want = malloc(5100);
        uint64_t idx[64], lens[64], seed = 88172645463325252ULL;
        while (!atomic_load(a->stop) && !a->failed) {
                uint64_t n = zr_store_length(a->s);
                if (n == 0)
                        continue;
                for (int i = 0; i < 64; i++) {
                        seed ^= seed << 13;
                        seed ^= seed >> 7;
                        seed ^= seed << 17;
                        idx[i] = seed % n;
                }
                zr_error err = {0};
                if (zr_store_gather(a->s, idx, 64, buf, 64 * 5100, lens, &err) < 0) {
                        a->failed = 1;
                        snprintf(a->msg, sizeof(a->msg), "gather: %s", err.message);
                        break;
                }
                uint64_t off = 0;
                for (int i = 0; i < 64; i++) {
                        tl_record_fill(want, idx[i], conc_len(idx[i]));
                        if (lens[i] != conc_len(idx[i]) || memcmp(buf + off, want, lens[i])) {
                                a->failed = 1;
                                snprintf(a->msg, sizeof(a->msg), "record %llu differs",
                                         (unsigned long long)idx[i]);
                                break;
                        }
                        off += lens[i];
                }
                a->checked += 64;
        }
        free(buf);
        free(want);
        return NULL;
}

START_TEST(test_gather_during_append) {
        enum { BATCHES = 60, B = 50, READERS = 2 };
        zr_pool *pool = NULL;
        _Atomic int stop = 0;
        pthread_t th[READERS];
        reader_arg args[READERS];
        uint64_t lens[B];
        tdir d;

        ck_assert_int_eq(zr_pool_new(2, &pool), 0);
        tdir_make(&d);
        zr_store *s = create_store(&d, ZR_CODEC_ZSTD, 16, pool);
        for (int i = 0; i < READERS; i++) {
                args[i] = (reader_arg){ .s = s, .stop = &stop };
                ck_assert_int_eq(pthread_create(&th[i], NULL, reader_main, &args[i]), 0);
        }
        for (int b = 0; b < BATCHES; b++) {
                for (int i = 0; i < B; i++)
                        lens[i] = conc_len((uint64_t)b * B + i);
                append_ok(s, lens, B, (uint64_t)b * B);
        }
        atomic_store(&stop, 1);
        for (int i = 0; i < READERS; i++) {
                pthread_join(th[i], NULL);
                ck_assert_msg(!args[i].failed, "%s", args[i].msg);
                ck_assert_uint_gt(args[i].checked, 0);
        }
        check_verify(s, BATCHES * B);
        ck_assert_int_eq(zr_store_close(s, NULL), 0);
        tdir_remove(&d);
        zr_pool_free(pool);
}
END_TEST

/* ---- bad input ---------------------------------------------------------- */

START_TEST(test_bad_index_and_buffer) {
        tdir d;
        uint64_t lens[] = { 10, 20, 30 };
        zr_error err = {0};
        uint8_t buf[64];
        zr_loc loc;

        tdir_make(&d);
        zr_store *s = create_store(&d, ZR_CODEC_RAW, 16, NULL);
        append_ok(s, lens, 3, 0);
        uint64_t idx[] = { 0, 3 };
        ck_assert_int_eq(zr_store_gather(s, idx, 2, buf, sizeof(buf), NULL, &err), -ZR_E_RANGE);
        ck_assert_ptr_nonnull(strstr(err.message, "3"));
        ck_assert_int_eq(zr_store_locate(s, idx + 1, 1, &loc, NULL), -ZR_E_RANGE);
        uint64_t idx2[] = { 2, 1 };
        zr_error_clear(&err);
        ck_assert_int_eq(zr_store_gather(s, idx2, 2, buf, 49, NULL, &err), -ZR_E_BUFFER);
        ck_assert_int_eq(zr_store_gather(s, idx2, 2, buf, 50, NULL, &err), 0);
        ck_assert_int_eq(zr_store_close(s, NULL), 0);
        tdir_remove(&d);
}
END_TEST

START_TEST(test_record_too_big) {
        tdir d;
        uint8_t small[16] = {0};
        zr_error err = {0};
        uint64_t first;

        tdir_make(&d);
        zr_store *s = create_store(&d, ZR_CODEC_ZSTD, 0, NULL);
        /* the lengths claim more than 2^31: refused before a byte is read */
        uint64_t lens[] = { 4, ((uint64_t)1 << 31) + 1 };
        ck_assert_int_eq(zr_store_append(s, small, lens, 2, &first, &err), -ZR_E_TOO_BIG);
        ck_assert_uint_eq(zr_store_length(s), 0);
        ck_assert_ptr_nonnull(strstr(err.message, "2147483649"));
        zr_store_close(s, NULL);
        tdir_remove(&d);

        /* in a test store, a record over the chunk size is refused too */
        tdir_make(&d);
        s = create_store(&d, ZR_CODEC_RAW, 16, NULL);
        uint8_t *big = calloc(1, 65537);
        uint64_t l2[] = { 65537 };
        zr_error_clear(&err);
        ck_assert_int_eq(zr_store_append(s, big, l2, 1, NULL, &err), -ZR_E_TOO_BIG);
        ck_assert_uint_eq(zr_store_length(s), 0);
        free(big);
        zr_store_close(s, NULL);
        tdir_remove(&d);
}
END_TEST

START_TEST(test_dict_rules) {
        tdir d;
        zr_error err = {0};
        uint64_t lens[] = { 500, 600 }, ids[] = { 0, 1 };
        size_t dlen;
        uint8_t *dict = make_dict(&dlen);

        tdir_make(&d);
        zr_store *s = NULL;
        ck_assert_int_eq(zr_store_create(d.fd, ZR_CODEC_ZSTD_DICT, NULL, 0, NULL, &s, &err), 0);
        ck_assert_int_eq(zr_store_has_dict(s), 0);
        uint8_t *data = make_batch(lens, 2, 0);
        ck_assert_int_eq(zr_store_append(s, data, lens, 2, NULL, &err), -ZR_E_NO_DICT);
        ck_assert_uint_eq(zr_store_length(s), 0);
        /* reading without a dictionary */
        zr_loc fake = { .offset = 0, .phys_length = 0, .logic_length = 0, .chunk_id = 0 };
        uint8_t one[1];
        void *dst = one;
        zr_error_clear(&err);
        ck_assert_int_eq(zr_store_gather_locs(s, &fake, 1, &dst, &err), -ZR_E_NO_DICT);
        void *got = NULL;
        size_t got_len = 0;
        ck_assert_int_eq(zr_store_read_dict(s, &got, &got_len, NULL), -ZR_E_NO_DICT);
        /* an empty dict store without dict.zr reopens (to install later) */
        s = reopen(&d, s, NULL);
        ck_assert_int_eq(zr_store_install_dict(s, dict, 0, NULL), -EINVAL);
        ck_assert_int_eq(zr_store_install_dict(s, dict, dlen, &err), 0);
        ck_assert_int_eq(zr_store_install_dict(s, dict, dlen, NULL), -ZR_E_HAS_DICT);
        ck_assert_int_eq(zr_store_read_dict(s, &got, &got_len, NULL), 0);
        ck_assert_uint_eq(got_len, dlen);
        ck_assert(memcmp(got, dict, dlen) == 0);
        free(got);
        append_ok(s, lens, 2, 0);
        s = reopen(&d, s, NULL);
        ck_assert_int_eq(zr_store_has_dict(s), 1);
        check_all(s, ids, lens, 2);
        zr_store_close(s, NULL);
        tdir_remove(&d);

        /* install on a non-empty store, on another codec */
        tdir_make(&d);
        ck_assert_int_eq(zr_store_create(d.fd, ZR_CODEC_ZSTD_DICT, NULL, 0, NULL, &s, NULL), 0);
        zr_store_close(s, NULL);
        /* a dictionary declared in the header but dict.zr gone */
        ck_assert_int_eq(zr_store_open(d.fd, NULL, &s, NULL), 0);
        ck_assert_int_eq(zr_store_install_dict(s, dict, dlen, NULL), 0);
        zr_store_close(s, NULL);
        ck_assert_int_eq(unlinkat(d.fd, "dict.zr", 0), 0);
        zr_error_clear(&err);
        ck_assert_int_eq(zr_store_open(d.fd, NULL, &s, &err), -ZR_E_NO_DICT);
        ck_assert_ptr_nonnull(strstr(err.message, "dict.zr"));
        tdir_remove(&d);

        tdir_make(&d);
        s = create_store(&d, ZR_CODEC_ZSTD, 0, NULL);
        ck_assert_int_eq(zr_store_install_dict(s, dict, dlen, NULL), -ZR_E_BAD_CODEC);
        zr_store_close(s, NULL);
        tdir_remove(&d);

        tdir_make(&d);
        ck_assert_int_eq(zr_store_create(d.fd, ZR_CODEC_ZSTD_DICT, NULL, 0, NULL, &s, NULL), 0);
        ck_assert_int_eq(zr_store_install_dict(s, dict, dlen, NULL), 0);
        append_ok(s, lens, 2, 0);
        zr_store_close(s, NULL);
        ck_assert_int_eq(unlinkat(d.fd, "dict.zr", 0), 0);
        /* header flag cleared by hand: the records alone still demand dict.zr */
        int fd = openat(d.fd, "meta.zr", O_RDWR | O_CLOEXEC);
        uint8_t z = 0;
        ck_assert_int_eq(pwrite(fd, &z, 1, 23), 1);
        close(fd);
        ck_assert_int_eq(zr_store_open(d.fd, NULL, &s, NULL), -ZR_E_NO_DICT);
        tdir_remove(&d);
        free(data);
        free(dict);
}
END_TEST

START_TEST(test_install_on_nonempty) {
        tdir d;
        size_t dlen;
        uint8_t *dict = make_dict(&dlen);
        uint64_t lens[] = { 300 };
        zr_error err = {0};
        zr_store *s;

        tdir_make(&d);
        s = create_store(&d, ZR_CODEC_ZSTD_DICT, 0, NULL);
        append_ok(s, lens, 1, 0);
        s = reopen(&d, s, NULL);
        ck_assert_int_eq(zr_store_install_dict(s, dict, dlen, &err), -ZR_E_SCHEMA);
        ck_assert_ptr_nonnull(strstr(err.message, "empty"));
        zr_store_close(s, NULL);
        tdir_remove(&d);
        free(dict);
}
END_TEST

START_TEST(test_lock_and_exists) {
        tdir d;
        zr_error err = {0};
        zr_store *s, *s2 = NULL;

        tdir_make(&d);
        s = create_store(&d, ZR_CODEC_RAW, 0, NULL);
        /* a second open in the same process: another open file description */
        ck_assert_int_eq(zr_store_open(d.fd, NULL, &s2, &err), -ZR_E_LOCKED);
        ck_assert_ptr_null(s2);
        ck_assert_ptr_nonnull(strstr(err.message, "meta.zr"));
        zr_store_options ro = { .read_only = 1 };
        ck_assert_int_eq(zr_store_open(d.fd, &ro, &s2, NULL), -ZR_E_LOCKED);
        /* and from another process */
        pid_t pid = fork();
        ck_assert_int_ge(pid, 0);
        if (pid == 0) {
                zr_store *c = NULL;
                _exit(zr_store_open(d.fd, NULL, &c, NULL) == -ZR_E_LOCKED ? 0 : 1);
        }
        int status;
        ck_assert_int_eq(waitpid(pid, &status, 0), pid);
        ck_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
        zr_error_clear(&err);
        ck_assert_int_eq(zr_store_create(d.fd, ZR_CODEC_ZSTD, NULL, 0, NULL, &s2, &err),
                         -ZR_E_EXISTS);
        zr_store_close(s, NULL);
        /* create over a closed store is refused too, and leaves it intact */
        ck_assert_int_eq(zr_store_create(d.fd, ZR_CODEC_ZSTD, NULL, 0, NULL, &s2, NULL),
                         -ZR_E_EXISTS);
        ck_assert_int_eq(zr_store_open(d.fd, NULL, &s, NULL), 0);
        ck_assert_int_eq(zr_store_codec(s), ZR_CODEC_RAW);
        zr_store_close(s, NULL);
        tdir_remove(&d);
}
END_TEST

START_TEST(test_open_refusals) {
        tdir d;
        zr_error err = {0};
        zr_store *s = NULL;

        tdir_make(&d);
        ck_assert_int_eq(zr_store_open(d.fd, NULL, &s, &err), -ZR_E_NOT_STORE);
        ck_assert_int_eq(zr_store_create(d.fd, 7, NULL, 0, NULL, &s, NULL), -ZR_E_BAD_CODEC);
        zr_store_options o = { .chunk_log2 = 40 };
        ck_assert_int_eq(zr_store_create(d.fd, ZR_CODEC_RAW, NULL, 0, &o, &s, NULL), -EINVAL);
        ck_assert(!tdir_has(&d, "meta.zr"));
        tdir_remove(&d);
}
END_TEST

START_TEST(test_read_only) {
        tdir d;
        uint64_t lens[] = { 42 }, ids[] = { 0 };
        zr_error err = {0};
        zr_store *s;

        tdir_make(&d);
        s = create_store(&d, ZR_CODEC_RAW, 0, NULL);
        append_ok(s, lens, 1, 0);
        zr_store_close(s, NULL);
        zr_store_options ro = { .read_only = 1 };
        ck_assert_int_eq(zr_store_open(d.fd, &ro, &s, NULL), 0);
        check_all(s, ids, lens, 1);
        uint8_t b[42] = {0};
        ck_assert_int_eq(zr_store_append(s, b, lens, 1, NULL, &err), -ZR_E_READONLY);
        uint64_t del[] = { 0 };
        ck_assert_int_eq(zr_store_delete(s, del, 1, NULL), -ZR_E_READONLY);
        ck_assert_int_eq(zr_store_compact(s, 0, NULL, NULL), -ZR_E_READONLY);
        ck_assert_int_eq(zr_store_failed(s), 0);
        ck_assert_int_eq(zr_store_close(s, NULL), 0);
        tdir_remove(&d);
}
END_TEST

START_TEST(test_verify_sound) {
        tdir d;
        uint64_t lens[40], ids[40];
        zr_pool *pool = NULL;

        ck_assert_int_eq(zr_pool_new(2, &pool), 0);
        tdir_make(&d);
        zr_store *s = create_store(&d, ZR_CODEC_ZSTD_DICT, 16, pool);
        for (int i = 0; i < 40; i++) {
                lens[i] = 50 + i * 400;
                ids[i] = i;
        }
        append_ok(s, lens, 40, 0);
        check_verify(s, 40);
        check_all(s, ids, lens, 40);
        ck_assert_int_eq(zr_store_sync(s, NULL), 0);
        zr_store_close(s, NULL);
        tdir_remove(&d);
        zr_pool_free(pool);
}
END_TEST

int main(void) {
        Suite *s = suite_create("store");
        TL_TCASE(s, "round-trip", 300, test_round_trip_raw, test_round_trip_zstd,
                 test_round_trip_zstd_dict, test_rollover_raw, test_rollover_zstd, test_no_pool,
                 test_pread_path);
        TL_TCASE(s, "mutation", 300, test_delete_semantics, test_compact_semantics,
                 test_compact_self_overlap, test_journal_redo_and_torn, test_verify_finds_overlap,
                 test_gather_during_append);
        TL_TCASE(s, "bad-input", 0, test_bad_index_and_buffer, test_record_too_big,
                 test_dict_rules, test_install_on_nonempty, test_lock_and_exists,
                 test_open_refusals, test_read_only, test_verify_sound);
        return tl_run_suite(s);
}
