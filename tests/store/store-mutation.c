/* store-mutation.c: the store suite's delete, journal, verify, compaction and
 * concurrency cases: mutations against a model of the table (store-kit.h). */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check-run.h"
#include "records.h"
#include "store-kit.h"
#include "store/format.h"
#include "store/journal.h"

/* ---- delete ------------------------------------------------------------- */

START_TEST(test_delete_semantics) {
        enum { N = 200 };
        static uint64_t lens[N], ids[N];
        size_t n = N;
        zr_pool *pool = NULL;
        zr_error err = {0};
        tdir d;

        ck_assert_int_eq(zr_pool_new(2, &pool), 0);
        for (size_t i = 0; i < N; i++)
                lens[i] = 8 + (i * 131) % 3000;
        zr_store *s = store_filled(&d, ZR_CODEC_ZSTD, 16, pool, lens, N, ids);

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
        append_more(s, more, 3, N, len_of, ids, &n);
        check_all(s, ids, len_of, n);

        /* delete everything */
        for (size_t i = 0; i < n; i++)
                del2[i] = n - 1 - i;
        ck_assert_int_eq(zr_store_delete(s, del2, n, &err), 0);
        ck_assert_uint_eq(zr_store_length(s), 0);
        s = reopen(&d, s, pool);
        ck_assert_uint_eq(zr_store_length(s), 0);
        store_done(&d, s, pool);
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

        for (size_t i = 0; i < N; i++)
                lens[i] = 100 + i;
        zr_store *s = store_filled(&d, ZR_CODEC_RAW, 16, NULL, lens, N, ids);
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
        store_done(&d, s, NULL);
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
        zr_store *s = store_filled(&d, ZR_CODEC_ZSTD, 16, NULL, lens, N, NULL);
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
        store_done(&d, s, NULL);
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
        for (size_t i = 0; i < N; i++)
                lens[i] = 1000 + (i * 97) % 9000;
        zr_store *s = store_filled(&d, ZR_CODEC_RAW, 16, pool, lens, N, ids);
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
        s = reopen_checked(&d, s, pool, ids, lens, n);

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
        append_more(s, more, 2, N, len_of, ids, &n);
        s = reopen_checked(&d, s, pool, ids, len_of, n);
        store_done(&d, s, pool);
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

        for (size_t i = 0; i < N; i++)
                lens[i] = i == 0 ? 100 : 50000 + i;
        zr_store *s = store_filled(&d, ZR_CODEC_RAW, 20, NULL, lens, N, ids);
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
        s = reopen_checked(&d, s, NULL, ids, lens, n);

        ck_assert_int_eq(zr_store_compact(s, 0, &res, &err), 0);
        ck_assert_int_eq(res.finished, 1);
        ck_assert_uint_eq(res.moved, N - 3); /* 2 already in place; the last stays */
        ck_assert_uint_eq(res.via_scratch, N - 3);
        zr_stats st;
        ck_assert_int_eq(zr_store_stats(s, &st, NULL), 0);
        ck_assert_uint_eq(st.reclaimable, 0);
        ck_assert_uint_eq(st.chunk_bytes, st.live_bytes);
        check_all(s, ids, lens, n);
        s = reopen_checked(&d, s, NULL, ids, lens, n);
        store_done(&d, s, NULL);
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
        store_done(&d, s, pool);
}
END_TEST

void store_add_mutation(Suite *s) {
        TL_TCASE(s, "mutation", 300, test_delete_semantics, test_compact_semantics,
                 test_compact_self_overlap, test_journal_redo_and_torn, test_verify_finds_overlap,
                 test_gather_during_append);
}
