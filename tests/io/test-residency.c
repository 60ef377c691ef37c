/* test-residency.c: the store's read-ahead side on a real file system.
 *
 * Records become page-aligned ranges of the chunk files (never past a file's
 * end); after POSIX_FADV_DONTNEED the records are reported not resident, after
 * a prefetch through the I/O queue (both backends) exactly the prefetched
 * ones are: the chunk files have no read-around, neither for a read nor for a
 * fault through the mapping. A walk's hints cover exactly the records it
 * asks for. Verify and compaction work on a cold store.
 *
 * Parts that need the page cache to drop a file's pages (not tmpfs) skip with
 * a message where it does not; the hint check needs cachestat() (Linux 6.5)
 * and skips without it. */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "check-run.h"
#include "files.h"
#include "io/ioq.h"
#include "store/readahead.h"
#include "store/store.h"

#define KiB ((uint64_t)1 << 10)
#define MiB ((uint64_t)1 << 20)

static uint64_t page;

/* ---- a store in a scratch directory ------------------------------------- */

/* Byte j of record i. */
static uint8_t rec_byte(uint64_t i, uint64_t j) {
        return (uint8_t)(i * 131 + j * 7 + (j >> 9));
}

static zr_store *store_make(tl_scratch *d, enum zr_codec codec, unsigned chunk_log2,
                            const uint64_t *lens, size_t n) {
        zr_store_options o = { .chunk_log2 = chunk_log2 };
        zr_store *s = NULL;
        zr_error err = {0};
        ck_assert_msg(zr_store_create(d->fd, codec, NULL, 0, &o, &s, &err) == 0, "%s",
                      err.message);
        uint64_t total = 0;
        for (size_t i = 0; i < n; i++)
                total += lens[i];
        uint8_t *buf = malloc(total ? total : 1), *p = buf;
        ck_assert_ptr_nonnull(buf);
        for (size_t i = 0; i < n; i++)
                for (uint64_t j = 0; j < lens[i]; j++)
                        *p++ = rec_byte(i, j);
        ck_assert_msg(zr_store_append(s, buf, lens, n, NULL, &err) == 0, "%s", err.message);
        ck_assert_msg(zr_store_sync(s, &err) == 0, "%s", err.message); /* clean pages drop */
        free(buf);
        return s;
}

static zr_store *store_reopen(tl_scratch *d, zr_store *s, int no_mmap, int read_only) {
        zr_error err = {0};
        ck_assert_int_eq(zr_store_close(s, &err), 0);
        zr_store_options o = { .no_mmap = no_mmap, .read_only = read_only };
        ck_assert_msg(zr_store_open(d->fd, &o, &s, &err) == 0, "%s", err.message);
        return s;
}

static zr_loc *locate_all(zr_store *s, size_t n) {
        uint64_t *idx = malloc(n * sizeof(*idx));
        zr_loc *locs = malloc(n * sizeof(*locs));
        ck_assert(idx && locs);
        for (size_t i = 0; i < n; i++)
                idx[i] = i;
        zr_error err = {0};
        ck_assert_msg(zr_store_locate(s, idx, n, locs, &err) == 0, "%s", err.message);
        free(idx);
        return locs;
}

/* Drops the clean pages of every chunk file the records live in. Returns 1
 * if the page cache let them go (the records then read as not resident). */
static int drop_cache(zr_store *s, const zr_loc *locs, size_t n) {
        zr_io_range *r = malloc(n * sizeof(*r));
        size_t m;
        ck_assert_ptr_nonnull(r);
        ck_assert_int_eq(zr_store_io_ranges(s, locs, n, r, &m, NULL), 0);
        for (size_t i = 0; i < m; i++)
                ck_assert_int_eq(posix_fadvise(r[i].fd, 0, 0, POSIX_FADV_DONTNEED), 0);
        free(r);
        return zr_store_resident(s, locs, n, NULL) == 0;
}

/* A test's store: records of lens[0..n) (rec_byte()) in a scratch directory,
 * every record located. */
typedef struct fixture {
        tl_scratch d;
        zr_store *s;
        zr_loc *locs;
} fixture;

enum reopen { AS_CREATED, REOPENED, REOPENED_NO_MMAP };

/* Makes f's store; `how` reopens it (fresh descriptors and mappings) before
 * the records are located. */
static void fixture_make(fixture *f, enum zr_codec codec, unsigned chunk_log2,
                         const uint64_t *lens, size_t n, enum reopen how) {
        ck_assert_int_eq(tl_scratch_new(&f->d, "test-residency"), 0);
        f->s = store_make(&f->d, codec, chunk_log2, lens, n);
        if (how != AS_CREATED)
                f->s = store_reopen(&f->d, f->s, how == REOPENED_NO_MMAP, 0);
        f->locs = locate_all(f->s, n);
}

/* fixture_make() of n records, record i of len_of(i) bytes; the lengths in
 * *ret_lens (malloc()ed, may be NULL). */
static void fixture_of(fixture *f, enum zr_codec codec, unsigned chunk_log2, size_t n,
                       uint64_t (*len_of)(uint64_t i), enum reopen how, uint64_t **ret_lens) {
        uint64_t *lens = malloc(n * sizeof(*lens));

        ck_assert_ptr_nonnull(lens);
        for (size_t i = 0; i < n; i++)
                lens[i] = len_of(i);
        fixture_make(f, codec, chunk_log2, lens, n, how);
        if (ret_lens)
                *ret_lens = lens;
        else
                free(lens);
}

/* Record i is page i. */
static uint64_t one_page(uint64_t i) {
        (void)i;
        return page;
}

static void fixture_free(fixture *f) {
        free(f->locs);
        ck_assert_int_eq(zr_store_close(f->s, NULL), 0);
        tl_scratch_free(&f->d);
}

/* ---- prefetch through the queue ------------------------------------------ */

typedef struct waiter {
        pthread_mutex_t mu;
        pthread_cond_t cv;
        int done;
        int result;
        uint64_t bytes;
} waiter;

static void waiter_done(void *arg, uint64_t id, int result, uint64_t bytes) {
        waiter *w = arg;
        pthread_mutex_lock(&w->mu);
        w->done = 1;
        w->result = result;
        w->bytes = bytes;
        pthread_cond_signal(&w->cv);
        pthread_mutex_unlock(&w->mu);
}

/* Reads r[0..n) through a queue of `backend`; returns the batch's result, or
 * 1 if that backend cannot run here. */
static int prefetch(enum zr_ioq_backend backend, const zr_io_range *r, size_t n,
                    uint64_t *ret_bytes) {
        zr_ioq *q = NULL;
        zr_error err = {0};
        if (zr_ioq_new(&(zr_ioq_options){ .backend = backend }, &q, &err) < 0) {
                ck_assert_int_eq(backend, ZR_IOQ_URING);
                fprintf(stderr, "skipped (io_uring backend): %s\n", err.message);
                return 1;
        }
        waiter w = { .mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER };
        ck_assert_int_eq(zr_ioq_submit(q, r, n, waiter_done, &w, NULL), 0);
        pthread_mutex_lock(&w.mu);
        while (!w.done)
                pthread_cond_wait(&w.cv, &w.mu);
        pthread_mutex_unlock(&w.mu);
        zr_ioq_free(q);
        if (ret_bytes)
                *ret_bytes = w.bytes;
        return w.result;
}

/* ---- tests -------------------------------------------------------------- */

START_TEST(test_ranges_cover_pages) {
        /* 64 KiB chunks: the last record does not fit in chunk 0 */
        uint64_t lens[] = { 4096, 100, 5000, 0, 8192, 1, 60000 };
        size_t n = sizeof(lens) / sizeof(lens[0]);
        fixture f;
        fixture_make(&f, ZR_CODEC_RAW, 16, lens, n, AS_CREATED);
        zr_store *s = f.s;
        zr_loc *locs = f.locs;
        zr_io_range r[7];
        size_t m = 99;
        zr_error err = {0};
        ck_assert_int_eq(zr_store_io_ranges(s, locs, n, r, &m, &err), 0);
        ck_assert_uint_eq(m, 6); /* the empty record has no range */
        uint64_t want[6][2] = {
                { 0, 4096 },                                       /* [0, 4096) */
                { 4096 & ~(page - 1), 4196 },                      /* [4096, 4196) */
                { 4196 & ~(page - 1), 9196 },                      /* [4196, 9196) */
                { 9196 & ~(page - 1), 17388 },                     /* [9196, 17388) */
                { 17388 & ~(page - 1), 17389 },                    /* [17388, 17389) */
                { 0, 60000 },                                      /* chunk 1 */
        };
        for (size_t i = 0; i < 6; i++) {
                uint64_t hi = (want[i][1] + page - 1) & ~(page - 1);
                ck_assert_uint_eq(r[i].offset, want[i][0]);
                ck_assert_uint_eq(r[i].offset + r[i].length, hi);
                ck_assert_int_ge(r[i].fd, 0);
        }
        ck_assert_int_eq(r[0].fd, r[4].fd);
        ck_assert_int_ne(r[0].fd, r[5].fd); /* the chunk files' own descriptors */
        ck_assert_uint_eq(locs[6].chunk_id, 1);
        ck_assert_int_eq(fcntl(r[5].fd, F_GETFD) & FD_CLOEXEC, FD_CLOEXEC);

        /* a loc past the frontier, or in a chunk that does not exist */
        zr_loc bad[] = { { .chunk_id = 1, .offset = 60000, .phys_length = 10, .logic_length = 10 },
                         { .chunk_id = 5, .offset = 0, .phys_length = 10, .logic_length = 10 } };
        for (int i = 0; i < 2; i++) {
                zr_error e = {0};
                ck_assert_int_eq(zr_store_io_ranges(s, &bad[i], 1, r, &m, &e), -ZR_E_CORRUPT);
                ck_assert_str_ne(e.message, "");
        }
        /* a zero-length record is resident by definition, whatever the cache */
        ck_assert_uint_eq(zr_store_resident(s, &locs[3], 1, NULL), 1);
        fixture_free(&f);
}
END_TEST

START_TEST(test_ranges_stop_at_file_end) {
        tl_scratch d;
        ck_assert_int_eq(tl_scratch_new(&d, "test-residency"), 0);
        uint64_t lens[] = { 4096, 100 };
        zr_store *s = store_make(&d, ZR_CODEC_RAW, 16, lens, 2);
        ck_assert_int_eq(zr_store_close(s, NULL), 0);
        /* a chunk file that ends at the frontier, inside a page (as another
         * writer may leave it): the store opens read-only */
        int cfd = openat(d.fd, "0.chunk", O_RDWR | O_CLOEXEC);
        ck_assert_int_ge(cfd, 0);
        ck_assert_int_eq(ftruncate(cfd, 4196), 0);
        close(cfd);
        zr_error err = {0};
        zr_store_options o = { .read_only = 1 };
        ck_assert_msg(zr_store_open(d.fd, &o, &s, &err) == 0, "%s", err.message);
        zr_loc *locs = locate_all(s, 2);
        zr_io_range r[2];
        size_t m;
        ck_assert_int_eq(zr_store_io_ranges(s, locs, 2, r, &m, &err), 0);
        ck_assert_uint_eq(m, 2);
        ck_assert_uint_eq(r[1].offset, 4096 & ~(page - 1));
        ck_assert_uint_eq(r[1].offset + r[1].length, 4196); /* not the page's end */
        /* so a prefetch of it succeeds; the page-rounded range would not */
        uint64_t bytes;
        ck_assert_int_eq(prefetch(ZR_IOQ_THREADS, r, 2, &bytes), 0);
        ck_assert_uint_eq(bytes, 4196);
        zr_io_range rounded = { r[1].fd, r[1].offset, (4196 + page - 1) / page * page - r[1].offset };
        ck_assert_int_eq(prefetch(ZR_IOQ_THREADS, &rounded, 1, NULL), -ENODATA);
        free(locs);
        ck_assert_int_eq(zr_store_close(s, NULL), 0);
        tl_scratch_free(&d);
}
END_TEST

/* _i: 0 = pread threads, 1 = io_uring */
START_TEST(test_resident_after_prefetch) {
        enum { N = 512 };
        enum zr_ioq_backend backend = _i == 0 ? ZR_IOQ_THREADS : ZR_IOQ_URING;
        fixture f;
        fixture_of(&f, ZR_CODEC_RAW, 24, N, one_page, REOPENED, NULL);
        zr_store *s = f.s;
        zr_loc *locs = f.locs;
        uint8_t res[N];
        if (!drop_cache(s, locs, N)) {
                fprintf(stderr, "skipped: the page cache keeps this file system's pages (tmpfs?)\n");
                goto out;
        }
        ck_assert_uint_eq(zr_store_resident(s, locs, N, res), 0);
        for (size_t i = 0; i < N; i++)
                ck_assert_uint_eq(res[i], 0);

        /* prefetch every 8th record */
        zr_loc pick[N / 8];
        for (size_t i = 0; i < N / 8; i++)
                pick[i] = locs[i * 8];
        zr_io_range r[N / 8];
        size_t m;
        ck_assert_int_eq(zr_store_io_ranges(s, pick, N / 8, r, &m, NULL), 0);
        ck_assert_uint_eq(m, N / 8);
        uint64_t bytes;
        int pr = prefetch(backend, r, m, &bytes);
        if (pr == 1)
                goto out;
        ck_assert_int_eq(pr, 0);
        ck_assert_uint_eq(bytes, N / 8 * page);
        /* exactly those: no read-around pulled their neighbours in */
        ck_assert_uint_eq(zr_store_resident(s, locs, N, res), N / 8);
        for (size_t i = 0; i < N; i++)
                ck_assert_msg(res[i] == (i % 8 == 0), "record %zu resident %d", i, res[i]);
        ck_assert_uint_eq(zr_store_resident(s, pick, N / 8, NULL), N / 8);

        /* a gather faults record 3 in through the mapping, and only it */
        uint8_t buf[65536];
        uint64_t idx = 3;
        ck_assert_int_eq(zr_store_gather(s, &idx, 1, buf, sizeof(buf), NULL, NULL), 0);
        for (uint64_t j = 0; j < page; j++)
                ck_assert_uint_eq(buf[j], rec_byte(3, j));
        ck_assert_uint_eq(zr_store_resident(s, locs, N, res), N / 8 + 1);
        ck_assert_uint_eq(res[3], 1);
        ck_assert_uint_eq(res[2], 0);
        ck_assert_uint_eq(res[4], 0);
        ck_assert_uint_eq(res[5], 0);
out:
        fixture_free(&f);
}
END_TEST

/* Records of 3000 bytes and a little more, record 5 empty. */
static uint64_t one_empty(uint64_t i) {
        return i == 5 ? 0 : 3000 + i;
}

START_TEST(test_without_mapping) {
        enum { N = 64 };
        fixture f;
        fixture_of(&f, ZR_CODEC_RAW, 20, N, one_empty, REOPENED_NO_MMAP, NULL); /* pread only */
        zr_store *s = f.s;
        zr_loc *locs = f.locs;
        zr_io_range r[N];
        size_t m;
        ck_assert_int_eq(zr_store_io_ranges(s, locs, N, r, &m, NULL), 0);
        ck_assert_uint_eq(m, N - 1);
        ck_assert_int_eq(prefetch(ZR_IOQ_THREADS, r, m, NULL), 0);
        /* the pages are cached: cachestat() tells from the descriptor; without
         * it and without a mapping the store cannot tell (not resident) */
        uint8_t res[N];
        int cs = tl_cached_pages(r[0].fd, 0, page) >= 0;
        ck_assert_uint_eq(zr_store_resident(s, locs, N, res), cs ? N : 1);
        for (size_t i = 0; i < N; i++)
                ck_assert_uint_eq(res[i], cs || i == 5);
        /* dropped from the cache, only the empty record is resident */
        for (size_t i = 0; i < m; i++)
                posix_fadvise(r[i].fd, (off_t)r[i].offset, (off_t)r[i].length,
                              POSIX_FADV_DONTNEED);
        if (zr_store_resident(s, locs, N, res) > 1) {
                printf("residency: the page cache kept dropped pages (dirty?); skipped\n");
        } else {
                for (size_t i = 0; i < N; i++)
                        ck_assert_uint_eq(res[i], i == 5);
        }
        fixture_free(&f);
}
END_TEST

START_TEST(test_walk_hints_only_its_records) {
        enum { N = 1024 };
        fixture f;
        fixture_of(&f, ZR_CODEC_RAW, 24, N, one_page, REOPENED, NULL);
        zr_store *s = f.s;
        zr_loc *locs = f.locs;
        zr_io_range whole;
        size_t m;
        ck_assert_int_eq(zr_store_io_ranges(s, locs, 1, &whole, &m, NULL), 0);
        int fd = whole.fd;
        if (!drop_cache(s, locs, N)) {
                fprintf(stderr, "skipped: the page cache keeps this file system's pages (tmpfs?)\n");
                goto out;
        }
        if (tl_cached_pages(fd, 0, N * page) != 0) {
                fprintf(stderr, "skipped: no cachestat() on this kernel\n");
                goto out;
        }
        /* records 100..299 in order, then 700 and 500 out of order */
        zr_readahead ra;
        zr_readahead_init(&ra, s);
        for (size_t i = 100; i < 300; i++)
                zr_readahead_add(&ra, &locs[i]);
        zr_readahead_add(&ra, &locs[700]);
        zr_readahead_add(&ra, &locs[500]);
        zr_readahead_flush(&ra);
        ck_assert_int_eq(tl_cached_pages(fd, 0, N * page), 202);
        ck_assert_int_eq(tl_cached_pages(fd, 100 * page, 200 * page), 200);
        ck_assert_int_eq(tl_cached_pages(fd, 700 * page, page), 1);
        ck_assert_int_eq(tl_cached_pages(fd, 500 * page, page), 1);
out:
        fixture_free(&f);
}
END_TEST

/* Records of 1 to 20000 bytes, spread. */
static uint64_t spread(uint64_t i) {
        return 1 + (i * 7919) % 20000;
}

START_TEST(test_verify_and_compact_cold) {
        enum { N = 3000 };
        uint64_t *lens;
        /* zstd: verify decodes every frame; 1 MiB chunks: compaction crosses them */
        fixture f;
        fixture_of(&f, ZR_CODEC_ZSTD, 20, N, spread, REOPENED, &lens);
        zr_store *s = f.s;
        (void)drop_cache(s, f.locs, N);
        zr_verify_report rep;
        zr_error err = {0};
        ck_assert_msg(zr_store_verify(s, &rep, &err) == 0, "%s", err.message);
        ck_assert_uint_eq(rep.records, N);
        ck_assert_uint_eq(rep.bad, 0);

        /* delete every third record (swap-last keeps a model), then compact cold */
        uint64_t model[N];
        for (size_t i = 0; i < N; i++)
                model[i] = i;
        uint64_t del[N / 3];
        size_t nd = 0;
        for (size_t i = 0; i < N; i += 3)
                del[nd++] = i;
        ck_assert_msg(zr_store_delete(s, del, nd, &err) == 0, "%s", err.message);
        size_t len = N;
        for (size_t k = nd; k-- > 0;) { /* descending, as the store applies them */
                model[del[k]] = model[len - 1];
                len--;
        }
        free(f.locs);
        f.locs = locate_all(s, len);
        (void)drop_cache(s, f.locs, len);
        zr_compact_result cr;
        ck_assert_msg(zr_store_compact(s, 0, &cr, &err) == 0, "%s", err.message);
        ck_assert_int_eq(cr.finished, 1);
        ck_assert_uint_gt(cr.moved, 0);
        free(f.locs);
        f.locs = locate_all(s, len);
        (void)drop_cache(s, f.locs, len);
        ck_assert_msg(zr_store_verify(s, &rep, &err) == 0, "%s", err.message);
        ck_assert_uint_eq(rep.records, len);
        uint8_t *buf = malloc(20000), *want = malloc(20000);
        ck_assert(buf && want);
        for (uint64_t i = 0; i < len; i++) {
                uint64_t got;
                ck_assert_int_eq(zr_store_gather(s, &i, 1, buf, 20000, &got, NULL), 0);
                ck_assert_uint_eq(got, lens[model[i]]);
                for (uint64_t j = 0; j < got; j++)
                        want[j] = rec_byte(model[i], j);
                ck_assert_msg(memcmp(buf, want, got) == 0, "record %llu differs",
                              (unsigned long long)i);
        }
        free(buf);
        free(want);
        free(lens);
        fixture_free(&f);
}
END_TEST

int main(void) {
        long p = sysconf(_SC_PAGESIZE);
        Suite *s = suite_create("residency");
        TCase *tc = TL_TCASE(s, "store", 120, test_ranges_cover_pages,
                             test_ranges_stop_at_file_end, test_without_mapping,
                             test_walk_hints_only_its_records, test_verify_and_compact_cold);

        page = p > 0 ? (uint64_t)p : 4096;
        TL_LOOP_TESTS(tc, 0, 2, test_resident_after_prefetch);
        return tl_run_suite(s);
}
