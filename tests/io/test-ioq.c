/* test-ioq.c: the I/O queue, on both backends (forced): reads are merged and
 * split as promised, batches are served first in first out, a batch ends with
 * exactly one callback carrying its own result (cancelled, failed by an
 * injected error, cut short by a truncated file, read on a closed
 * descriptor), free waits for reads in flight, and every descriptor it makes
 * is CLOEXEC. Reads are held in flight deterministically by a fault hook that
 * blocks until the test releases it; nothing here sleeps to wait.
 *
 * The io_uring runs skip with a message where the build has no liburing or
 * io_uring_queue_init() fails (seccomp, kernel.io_uring_disabled). */
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check-run.h"
#include "files.h"
#include "util.h"
#include "io/ioq.h"

#define KiB ((uint64_t)1 << 10)
#define MiB ((uint64_t)1 << 20)

/* ---- files -------------------------------------------------------------- */

/* A temporary file of `size` bytes of a pattern; returns its descriptor (the
 * name is unlinked at once). */
static int temp_file(uint64_t size) {
        int fd = tl_temp_file(size);
        ck_assert_msg(fd >= 0, "temporary file: %s", strerror(-fd));
        return fd;
}

/* ---- the fault hook: records, holds and fails reads ---------------------- */

#define SEEN_MAX 4096

typedef struct hook {
        pthread_mutex_t mu;
        pthread_cond_t cv;
        zr_io_range seen[SEEN_MAX]; /* reads asked about, in order */
        size_t nseen;
        size_t returned;            /* hook calls that returned */
        /* hold: reads of hold_fd in [hold_lo, hold_hi) block until release */
        int hold_fd;
        uint64_t hold_lo, hold_hi;
        int holding;                /* reads blocked now */
        int release;
        /* fail: reads of fail_fd in [fail_lo, fail_hi) fail with fail_err */
        int fail_fd;
        uint64_t fail_lo, fail_hi;
        int fail_err;
} hook;

static void hook_init(hook *h) {
        memset(h, 0, sizeof(*h));
        pthread_mutex_init(&h->mu, NULL);
        pthread_cond_init(&h->cv, NULL);
        h->hold_fd = -2;
        h->fail_fd = -2;
}

static int hook_fn(void *arg, const zr_io_range *r) {
        hook *h = arg;
        int ret = 0;
        pthread_mutex_lock(&h->mu);
        if (h->nseen < SEEN_MAX)
                h->seen[h->nseen] = *r;
        h->nseen++;
        if (r->fd == h->hold_fd && r->offset >= h->hold_lo && r->offset < h->hold_hi) {
                h->holding++;
                pthread_cond_broadcast(&h->cv);
                while (!h->release)
                        pthread_cond_wait(&h->cv, &h->mu);
                h->holding--;
        }
        if (r->fd == h->fail_fd && r->offset >= h->fail_lo && r->offset < h->fail_hi)
                ret = -h->fail_err;
        h->returned++;
        pthread_cond_broadcast(&h->cv);
        pthread_mutex_unlock(&h->mu);
        return ret;
}

/* Holds reads of fd at offsets [lo, hi). */
static void hook_hold(hook *h, int fd, uint64_t lo, uint64_t hi) {
        h->hold_fd = fd;
        h->hold_lo = lo;
        h->hold_hi = hi;
}

/* Waits until n reads are held. */
static void hook_wait_holding(hook *h, int n) {
        pthread_mutex_lock(&h->mu);
        while (h->holding < n)
                pthread_cond_wait(&h->cv, &h->mu);
        pthread_mutex_unlock(&h->mu);
}

static void hook_release(hook *h) {
        pthread_mutex_lock(&h->mu);
        h->release = 1;
        pthread_cond_broadcast(&h->cv);
        pthread_mutex_unlock(&h->mu);
}

static size_t hook_seen(hook *h) {
        pthread_mutex_lock(&h->mu);
        size_t n = h->nseen;
        pthread_mutex_unlock(&h->mu);
        return n;
}

/* ---- completions -------------------------------------------------------- */

#define BATCHES_MAX 1024

typedef struct done_log {
        pthread_mutex_t mu;
        pthread_cond_t cv;
        zr_ioq *q;
        int calls;                 /* callbacks so far */
        uint64_t order[BATCHES_MAX]; /* batch ids in callback order */
        int result[BATCHES_MAX + 1]; /* by id */
        uint64_t bytes[BATCHES_MAX + 1];
        int per_id[BATCHES_MAX + 1]; /* callbacks per id */
        uint32_t in_flight_seen[BATCHES_MAX + 1];
} done_log;

static void log_init(done_log *d, zr_ioq *q) {
        memset(d, 0, sizeof(*d));
        pthread_mutex_init(&d->mu, NULL);
        pthread_cond_init(&d->cv, NULL);
        d->q = q;
}

static void done_fn(void *arg, uint64_t id, int result, uint64_t bytes) {
        done_log *d = arg;
        zr_ioq_stats st;
        zr_ioq_get_stats(d->q, &st); /* allowed from a callback */
        pthread_mutex_lock(&d->mu);
        if (d->calls < BATCHES_MAX)
                d->order[d->calls] = id;
        d->calls++;
        if (id <= BATCHES_MAX) {
                d->result[id] = result;
                d->bytes[id] = bytes;
                d->per_id[id]++;
                d->in_flight_seen[id] = st.in_flight;
        }
        pthread_cond_broadcast(&d->cv);
        pthread_mutex_unlock(&d->mu);
}

static void log_wait(done_log *d, int calls) {
        pthread_mutex_lock(&d->mu);
        while (d->calls < calls)
                pthread_cond_wait(&d->cv, &d->mu);
        pthread_mutex_unlock(&d->mu);
}

static int log_calls(done_log *d) {
        pthread_mutex_lock(&d->mu);
        int n = d->calls;
        pthread_mutex_unlock(&d->mu);
        return n;
}

/* ---- queues per backend ------------------------------------------------- */

static const enum zr_ioq_backend backends[] = { ZR_IOQ_THREADS, ZR_IOQ_URING };

/* A queue of the loop's backend; NULL (and a message) where io_uring cannot
 * run, and the test returns. */
static zr_ioq *make_queue(int i, zr_ioq_options o) {
        zr_ioq *q = NULL;
        zr_error err = {0};
        o.backend = backends[i];
        int r = zr_ioq_new(&o, &q, &err);
        if (r < 0 && o.backend == ZR_IOQ_URING) {
                fprintf(stderr, "skipped (io_uring backend): %s\n", err.message);
                return NULL;
        }
        ck_assert_msg(r == 0, "zr_ioq_new: %d %s", r, err.message);
        ck_assert_int_eq(zr_ioq_backend_of(q), o.backend);
        return q;
}

/* A test's queue: make_queue() with d's log started on it; with a hook h, h
 * is started and every read of the queue goes through it. NULL where
 * io_uring cannot run, and the test returns. */
static zr_ioq *start(int i, zr_ioq_options o, hook *h, done_log *d) {
        if (h) {
                hook_init(h);
                o.fault = hook_fn;
                o.fault_arg = h;
        }
        zr_ioq *q = make_queue(i, o);
        if (q)
                log_init(d, q);
        return q;
}

/* start() of a depth-1 queue, and a new file of `size` bytes (*ret_fd) whose
 * first read (at offset 0) the hook holds: one read in flight while the test
 * queues others behind it. */
static zr_ioq *start_holding(int i, uint64_t size, hook *h, done_log *d, int *ret_fd) {
        zr_ioq *q = start(i, (zr_ioq_options){ .max_inflight = 1, .threads = 1 }, h, d);

        if (q) {
                *ret_fd = temp_file(size);
                hook_hold(h, *ret_fd, 0, 1);
        }
        return q;
}

/* ---- tests -------------------------------------------------------------- */

START_TEST(test_reads_and_counts) {
        done_log d;
        zr_ioq *q = start(_i, (zr_ioq_options){0}, NULL, &d);
        if (!q)
                return;
        int fd = temp_file(4 * MiB);
        zr_io_range r[] = { { fd, 3 * MiB, 64 * KiB }, { fd, 0, 4 * KiB }, { fd, MiB, 256 * KiB } };
        uint64_t id = 0;
        ck_assert_int_eq(zr_ioq_submit(q, r, 3, done_fn, &d, &id), 0);
        ck_assert_uint_eq(id, 1);
        log_wait(&d, 1);
        ck_assert_int_eq(d.result[1], 0);
        ck_assert_uint_eq(d.bytes[1], 324 * KiB);
        ck_assert_uint_eq(d.in_flight_seen[1], 0);

        zr_ioq_stats st;
        zr_ioq_get_stats(q, &st);
        ck_assert_uint_eq(st.batches, 1);
        ck_assert_uint_eq(st.ranges, 3);
        ck_assert_uint_eq(st.merged, 0);
        ck_assert_uint_eq(st.reads, 3);
        ck_assert_uint_eq(st.bytes, 324 * KiB);
        ck_assert_uint_eq(st.errors, 0);
        ck_assert_uint_eq(st.queued, 0);
        ck_assert_uint_eq(st.in_flight, 0);
        ck_assert_uint_eq(st.depth, _i == 0 ? ZR_IOQ_DEFAULT_THREADS : ZR_IOQ_DEFAULT_INFLIGHT);
        ck_assert_uint_gt(st.lat_ewma_ns, 0);
        ck_assert_uint_gt(st.lat_p50_ns, 0);
        ck_assert_uint_ge(st.lat_p99_ns, st.lat_p50_ns);

        /* an empty batch (no ranges, or only empty ones) ends at once, with 0 */
        zr_io_range empty = { fd, 5, 0 };
        ck_assert_int_eq(zr_ioq_submit(q, NULL, 0, done_fn, &d, &id), 0);
        ck_assert_int_eq(zr_ioq_submit(q, &empty, 1, done_fn, &d, &id), 0);
        log_wait(&d, 3);
        ck_assert_int_eq(d.result[2], 0);
        ck_assert_uint_eq(d.bytes[2], 0);
        ck_assert_int_eq(d.result[3], 0);
        zr_ioq_free(q);
        close(fd);
}
END_TEST

START_TEST(test_merge_and_split) {
        hook h;
        done_log d;
        /* depth 1: reads are issued one at a time, in the batch's order */
        zr_ioq *q = start(_i, (zr_ioq_options){ .max_inflight = 1, .threads = 1,
                                                .max_read = 64 * KiB }, &h, &d);
        if (!q)
                return;
        int a = temp_file(2 * MiB), b = temp_file(64 * KiB);
        zr_io_range r[] = {
                { a, MiB, 200 * KiB },     /* split: 64 + 64 + 64 + 8 KiB */
                { b, 0, 4 * KiB },
                { a, 4 * KiB, 4 * KiB },   /* touches [0, 4K) */
                { a, 500 * KiB, 0 },       /* empty */
                { a, 200 * KiB, 4 * KiB },
                { a, 6 * KiB, 4 * KiB },   /* overlaps: [0, 10K) */
                { a, 0, 4 * KiB },
        };
        ck_assert_int_eq(zr_ioq_submit(q, r, 7, done_fn, &d, NULL), 0);
        log_wait(&d, 1);
        ck_assert_int_eq(d.result[1], 0);
        ck_assert_uint_eq(d.bytes[1], 10 * KiB + 4 * KiB + 200 * KiB + 4 * KiB);

        int lo = a < b ? a : b, hi = a < b ? b : a;
        zr_io_range want_a[] = {
                { a, 0, 10 * KiB }, { a, 200 * KiB, 4 * KiB }, { a, MiB, 64 * KiB },
                { a, MiB + 64 * KiB, 64 * KiB }, { a, MiB + 128 * KiB, 64 * KiB },
                { a, MiB + 192 * KiB, 8 * KiB },
        };
        zr_io_range want[7];
        size_t k = 0;
        if (lo == b)
                want[k++] = (zr_io_range){ b, 0, 4 * KiB };
        for (size_t i = 0; i < 6; i++)
                want[k++] = want_a[i];
        if (hi == b)
                want[k++] = (zr_io_range){ b, 0, 4 * KiB };
        ck_assert_uint_eq(h.nseen, 7);
        for (size_t i = 0; i < 7; i++) {
                ck_assert_int_eq(h.seen[i].fd, want[i].fd);
                ck_assert_uint_eq(h.seen[i].offset, want[i].offset);
                ck_assert_uint_eq(h.seen[i].length, want[i].length);
        }
        zr_ioq_stats st;
        zr_ioq_get_stats(q, &st);
        ck_assert_uint_eq(st.ranges, 7);
        ck_assert_uint_eq(st.merged, 2); /* 6 non-empty ranges became 4 */
        ck_assert_uint_eq(st.reads, 7);
        ck_assert_uint_eq(st.depth, 1);
        zr_ioq_free(q);
        close(a);
        close(b);
}
END_TEST

typedef struct submit_arg {
        zr_ioq *q;
        zr_io_range r[2];
        done_log *d;
        uint64_t id;
} submit_arg;

static void *submit_thread(void *arg) {
        submit_arg *s = arg;
        ck_assert_int_eq(zr_ioq_submit(s->q, s->r, 2, done_fn, s->d, &s->id), 0);
        return NULL;
}

START_TEST(test_fifo_across_submitters) {
        hook h;
        done_log d;
        int fd;
        zr_ioq *q = start_holding(_i, 8 * MiB, &h, &d, &fd);
        if (!q)
                return;
        /* A's first read is held in flight while B and C queue up, each from
         * its own thread, B first */
        zr_io_range a[] = { { fd, 2 * MiB, 4 * KiB }, { fd, 0, 4 * KiB }, { fd, MiB, 4 * KiB } };
        uint64_t ida;
        ck_assert_int_eq(zr_ioq_submit(q, a, 3, done_fn, &d, &ida), 0);
        hook_wait_holding(&h, 1);
        submit_arg b = { q, { { fd, 4 * MiB, 4 * KiB }, { fd, 3 * MiB, 4 * KiB } }, &d, 0 };
        submit_arg c = { q, { { fd, 6 * MiB, 4 * KiB }, { fd, 5 * MiB, 4 * KiB } }, &d, 0 };
        pthread_t t;
        ck_assert_int_eq(pthread_create(&t, NULL, submit_thread, &b), 0);
        pthread_join(t, NULL);
        ck_assert_int_eq(pthread_create(&t, NULL, submit_thread, &c), 0);
        pthread_join(t, NULL);
        /* C is larger in id but queued behind B; a later batch D by this thread
         * goes behind both */
        zr_io_range dd = { fd, 7 * MiB, 4 * KiB };
        uint64_t idd;
        ck_assert_int_eq(zr_ioq_submit(q, &dd, 1, done_fn, &d, &idd), 0);
        ck_assert_int_eq(log_calls(&d), 0);
        hook_release(&h);
        log_wait(&d, 4);

        ck_assert_uint_eq(h.nseen, 8);
        for (size_t i = 0; i < 8; i++)
                ck_assert_uint_eq(h.seen[i].offset, i * MiB);
        ck_assert_uint_eq(d.order[0], ida);
        ck_assert_uint_eq(d.order[1], b.id);
        ck_assert_uint_eq(d.order[2], c.id);
        ck_assert_uint_eq(d.order[3], idd);
        for (uint64_t id = 1; id <= 4; id++) {
                ck_assert_int_eq(d.result[id], 0);
                ck_assert_int_eq(d.per_id[id], 1);
        }
        zr_ioq_free(q);
        close(fd);
}
END_TEST

START_TEST(test_cancel_queued) {
        hook h;
        done_log d;
        int fd;
        zr_ioq *q = start_holding(_i, 4 * MiB, &h, &d, &fd);
        if (!q)
                return;
        zr_io_range a = { fd, 0, 4 * KiB };
        zr_io_range b[] = { { fd, MiB, 4 * KiB }, { fd, 2 * MiB, 4 * KiB } };
        uint64_t ida, idb;
        ck_assert_int_eq(zr_ioq_submit(q, &a, 1, done_fn, &d, &ida), 0);
        hook_wait_holding(&h, 1);
        ck_assert_int_eq(zr_ioq_submit(q, b, 2, done_fn, &d, &idb), 0);
        ck_assert_int_eq(zr_ioq_cancel(q, idb), 0);
        ck_assert_int_eq(zr_ioq_cancel(q, 999), -ENOENT);
        hook_release(&h);
        log_wait(&d, 2);
        ck_assert_int_eq(d.result[ida], 0);
        ck_assert_uint_eq(d.bytes[ida], 4 * KiB);
        ck_assert_int_eq(d.result[idb], -ECANCELED);
        ck_assert_uint_eq(d.bytes[idb], 0);
        ck_assert_int_eq(d.per_id[idb], 1);
        /* none of B's reads was issued */
        ck_assert_uint_eq(hook_seen(&h), 1);
        /* an ended batch is not pending any more */
        ck_assert_int_eq(zr_ioq_cancel(q, idb), -ENOENT);
        ck_assert_int_eq(zr_ioq_cancel(q, ida), -ENOENT);
        zr_ioq_stats st;
        zr_ioq_get_stats(q, &st);
        ck_assert_uint_eq(st.cancelled, 1);
        ck_assert_uint_eq(st.queued, 0);
        ck_assert_uint_eq(st.reads, 1);
        zr_ioq_free(q);
        ck_assert_int_eq(d.calls, 2);
        close(fd);
}
END_TEST

START_TEST(test_cancel_in_flight) {
        hook h;
        done_log d;
        zr_ioq *q = start(_i, (zr_ioq_options){ .max_inflight = 2, .threads = 2 }, &h, &d);
        if (!q)
                return;
        int fd = temp_file(8 * MiB);
        zr_io_range r[6];
        for (int i = 0; i < 6; i++)
                r[i] = (zr_io_range){ fd, (uint64_t)i * MiB, 4 * KiB };
        uint64_t id;
        /* hold the two reads in flight: the pread threads each block in one;
         * on io_uring the dispatcher blocks in the first, before issuing the
         * second, so nothing else starts either way */
        hook_hold(&h, fd, 0, 2 * MiB);
        ck_assert_int_eq(zr_ioq_submit(q, r, 6, done_fn, &d, &id), 0);
        hook_wait_holding(&h, _i == 0 ? 2 : 1);
        ck_assert_int_eq(zr_ioq_cancel(q, id), 0);
        ck_assert_int_eq(zr_ioq_cancel(q, id), 0); /* still pending: idempotent */
        /* the held read is in flight: the callback must wait for it */
        ck_assert_int_eq(log_calls(&d), 0);
        hook_release(&h);
        log_wait(&d, 1);
        ck_assert_int_eq(d.result[id], -ECANCELED);
        ck_assert_int_eq(d.per_id[id], 1);
        ck_assert_uint_eq(d.in_flight_seen[id], 0);
        /* only the two in flight were read; the four queued were dropped */
        ck_assert_uint_eq(hook_seen(&h), 2);
        ck_assert_uint_eq(d.bytes[id], 2 * 4 * KiB);
        zr_ioq_stats st;
        zr_ioq_get_stats(q, &st);
        ck_assert_uint_eq(st.reads, 2);
        ck_assert_uint_eq(st.queued, 0);
        /* the queue goes on serving */
        ck_assert_int_eq(zr_ioq_submit(q, r, 6, done_fn, &d, &id), 0);
        log_wait(&d, 2);
        ck_assert_int_eq(d.result[id], 0);
        ck_assert_uint_eq(d.bytes[id], 6 * 4 * KiB);
        zr_ioq_free(q);
        close(fd);
}
END_TEST

typedef struct releaser {
        hook *h;
        _Atomic int *go;
} releaser;

static void *release_when_told(void *arg) {
        releaser *r = arg;
        while (!atomic_load(r->go))
                sched_yield();
        hook_release(r->h);
        return NULL;
}

START_TEST(test_free_waits_for_in_flight) {
        hook h;
        done_log d;
        int fd;
        zr_ioq *q = start_holding(_i, 4 * MiB, &h, &d, &fd);
        if (!q)
                return;
        zr_io_range a[] = { { fd, 0, 4 * KiB }, { fd, MiB, 4 * KiB } };
        zr_io_range b = { fd, 2 * MiB, 4 * KiB };
        uint64_t ida, idb;
        ck_assert_int_eq(zr_ioq_submit(q, a, 2, done_fn, &d, &ida), 0);
        ck_assert_int_eq(zr_ioq_submit(q, &b, 1, done_fn, &d, &idb), 0);
        hook_wait_holding(&h, 1);
        /* free while A's first read is held: another thread lets it go once
         * free has begun; free must wait for it and for both callbacks */
        _Atomic int go = 0;
        releaser rel = { &h, &go };
        pthread_t t;
        ck_assert_int_eq(pthread_create(&t, NULL, release_when_told, &rel), 0);
        atomic_store(&go, 1);
        zr_ioq_free(q);
        /* no lock needed: the queue's threads are gone */
        ck_assert_int_eq(d.calls, 2);
        ck_assert_int_eq(d.result[ida], -ECANCELED);
        ck_assert_int_eq(d.result[idb], -ECANCELED);
        ck_assert_uint_eq(d.bytes[ida], 4 * KiB);
        ck_assert_uint_eq(d.bytes[idb], 0);
        ck_assert_uint_eq(h.returned, 1);
        ck_assert_uint_eq(h.nseen, 1);
        pthread_join(t, NULL);
        close(fd);
}
END_TEST

START_TEST(test_injected_error_fails_its_batch_only) {
        hook h;
        done_log d;
        zr_ioq *q = start(_i, (zr_ioq_options){ .max_inflight = 4, .threads = 4,
                                                .max_read = 64 * KiB }, &h, &d);
        if (!q)
                return;
        int fd = temp_file(8 * MiB);
        h.fail_fd = fd;
        h.fail_lo = 2 * MiB;
        h.fail_hi = 4 * MiB;
        h.fail_err = EIO;
        /* A in [0, 2M), B in [2M, 4M) (fails), C in [4M, 6M); 8 reads each */
        uint64_t id[3];
        for (int b = 0; b < 3; b++) {
                zr_io_range r[8];
                for (int i = 0; i < 8; i++)
                        r[i] = (zr_io_range){ fd, (uint64_t)b * 2 * MiB + (uint64_t)i * 256 * KiB,
                                              64 * KiB };
                ck_assert_int_eq(zr_ioq_submit(q, r, 8, done_fn, &d, &id[b]), 0);
        }
        log_wait(&d, 3);
        ck_assert_int_eq(d.result[id[0]], 0);
        ck_assert_uint_eq(d.bytes[id[0]], 8 * 64 * KiB);
        ck_assert_int_eq(d.result[id[1]], -EIO);
        ck_assert_int_eq(d.result[id[2]], 0);
        ck_assert_uint_eq(d.bytes[id[2]], 8 * 64 * KiB);
        for (int b = 0; b < 3; b++)
                ck_assert_int_eq(d.per_id[id[b]], 1);
        zr_ioq_stats st;
        zr_ioq_get_stats(q, &st);
        ck_assert_uint_ge(st.errors, 1);
        ck_assert_uint_le(st.errors, 4); /* B stops at its first error: at most
                                          * the depth's worth failed */
        ck_assert_uint_eq(st.failed, 1);
        ck_assert_uint_eq(st.bytes, 16 * 64 * KiB);
        ck_assert_uint_eq(st.queued, 0);
        zr_ioq_free(q);
        close(fd);
}
END_TEST

START_TEST(test_fail_nth_read) {
        done_log d;
        zr_ioq *q = start(_i, (zr_ioq_options){ .max_inflight = 1, .threads = 1, .fail_nth = 3,
                                                .fail_errno = ENOSPC }, NULL, &d);
        if (!q)
                return;
        int fd = temp_file(8 * MiB);
        zr_io_range r[5];
        for (int i = 0; i < 5; i++)
                r[i] = (zr_io_range){ fd, (uint64_t)i * MiB, 4 * KiB };
        uint64_t id1, id2;
        ck_assert_int_eq(zr_ioq_submit(q, r, 5, done_fn, &d, &id1), 0);
        log_wait(&d, 1);
        ck_assert_int_eq(d.result[id1], -ENOSPC);
        ck_assert_uint_eq(d.bytes[id1], 2 * 4 * KiB); /* reads 1 and 2 */
        zr_ioq_stats st;
        zr_ioq_get_stats(q, &st);
        ck_assert_uint_eq(st.reads, 3); /* 4 and 5 never issued */
        ck_assert_uint_eq(st.errors, 1);
        /* the next batch is served as if nothing happened */
        ck_assert_int_eq(zr_ioq_submit(q, r, 5, done_fn, &d, &id2), 0);
        log_wait(&d, 2);
        ck_assert_int_eq(d.result[id2], 0);
        ck_assert_uint_eq(d.bytes[id2], 5 * 4 * KiB);
        zr_ioq_free(q);
        close(fd);
}
END_TEST

START_TEST(test_truncated_under_queued_read) {
        hook h;
        done_log d;
        zr_ioq *q = start(_i, (zr_ioq_options){ .max_inflight = 1, .threads = 1 }, &h, &d);
        if (!q)
                return;
        int held = temp_file(64 * KiB), fd = temp_file(MiB);
        hook_hold(&h, held, 0, 1);
        zr_io_range first = { held, 0, 4 * KiB };
        zr_io_range gone = { fd, 512 * KiB, 512 * KiB }; /* wholly past the new end */
        zr_io_range cut = { fd, 128 * KiB, 256 * KiB };  /* half past it */
        zr_io_range whole = { fd, 0, 64 * KiB };         /* before it */
        uint64_t id0, id1, id2, id3;
        ck_assert_int_eq(zr_ioq_submit(q, &first, 1, done_fn, &d, &id0), 0);
        hook_wait_holding(&h, 1);
        ck_assert_int_eq(zr_ioq_submit(q, &gone, 1, done_fn, &d, &id1), 0);
        ck_assert_int_eq(zr_ioq_submit(q, &cut, 1, done_fn, &d, &id2), 0);
        ck_assert_int_eq(zr_ioq_submit(q, &whole, 1, done_fn, &d, &id3), 0);
        ck_assert_int_eq(ftruncate(fd, 256 * KiB), 0);
        hook_release(&h);
        log_wait(&d, 4);
        ck_assert_int_eq(d.result[id0], 0);
        ck_assert_int_eq(d.result[id1], -ENODATA);
        ck_assert_uint_eq(d.bytes[id1], 0);
        ck_assert_int_eq(d.result[id2], -ENODATA);
        ck_assert_uint_eq(d.bytes[id2], 128 * KiB);
        ck_assert_int_eq(d.result[id3], 0);
        ck_assert_uint_eq(d.bytes[id3], 64 * KiB);
        zr_ioq_free(q);
        close(held);
        close(fd);
}
END_TEST

START_TEST(test_closed_descriptor) {
        done_log d;
        zr_ioq *q = start(_i, (zr_ioq_options){0}, NULL, &d);
        if (!q)
                return;
        int fd = temp_file(64 * KiB), good = temp_file(64 * KiB);
        ck_assert_int_eq(close(fd), 0);
        zr_io_range closed = { fd, 0, 4 * KiB };
        zr_io_range none = { -1, 0, 4 * KiB };
        zr_io_range fine = { good, 0, 4 * KiB };
        /* large reads (io_uring hands them to its workers at once) fail and
         * succeed the same way */
        zr_io_range closed_large = { fd, 0, 64 * KiB }, fine_large = { good, 0, 64 * KiB };
        uint64_t id1, id2, id3, id4, id5;
        ck_assert_int_eq(zr_ioq_submit(q, &closed, 1, done_fn, &d, &id1), 0);
        ck_assert_int_eq(zr_ioq_submit(q, &none, 1, done_fn, &d, &id2), 0);
        ck_assert_int_eq(zr_ioq_submit(q, &fine, 1, done_fn, &d, &id3), 0);
        ck_assert_int_eq(zr_ioq_submit(q, &closed_large, 1, done_fn, &d, &id4), 0);
        ck_assert_int_eq(zr_ioq_submit(q, &fine_large, 1, done_fn, &d, &id5), 0);
        log_wait(&d, 5);
        ck_assert_int_eq(d.result[id1], -EBADF);
        ck_assert_int_eq(d.result[id2], -EBADF);
        ck_assert_int_eq(d.result[id3], 0);
        ck_assert_int_eq(d.result[id4], -EBADF);
        ck_assert_int_eq(d.result[id5], 0);
        ck_assert_uint_eq(d.bytes[id5], 64 * KiB);
        zr_ioq_stats st;
        zr_ioq_get_stats(q, &st);
        ck_assert_uint_eq(st.errors, 3);
        ck_assert_uint_eq(st.failed, 3);
        zr_ioq_free(q);
        close(good);
}
END_TEST

START_TEST(test_bad_arguments) {
        zr_ioq *q = NULL;
        zr_error err = {0};
        ck_assert_int_eq(zr_ioq_new(&(zr_ioq_options){ .max_read = 100 }, &q, &err), -EINVAL);
        ck_assert_str_ne(err.message, "");
        ck_assert_int_eq(zr_ioq_new(&(zr_ioq_options){ .threads = ZR_IOQ_MAX_THREADS + 1 }, &q,
                                    NULL), -EINVAL);
        ck_assert_int_eq(zr_ioq_new(&(zr_ioq_options){ .max_inflight = ZR_IOQ_MAX_INFLIGHT + 1 },
                                    &q, NULL), -EINVAL);
        ck_assert_int_eq(zr_ioq_new(&(zr_ioq_options){ .backend = (enum zr_ioq_backend)7 }, &q,
                                    NULL), -EINVAL);
        ck_assert_ptr_null(q);
        done_log d;
        q = start(_i, (zr_ioq_options){0}, NULL, &d);
        if (!q)
                return;
        zr_io_range r = { 0, (uint64_t)INT64_MAX, 2 };
        ck_assert_int_eq(zr_ioq_submit(q, &r, 1, NULL, &d, NULL), -EINVAL);
        ck_assert_int_eq(zr_ioq_submit(q, &r, 1, done_fn, &d, NULL), -EINVAL);
        ck_assert_int_eq(zr_ioq_submit(q, NULL, 1, done_fn, &d, NULL), -EINVAL);
        zr_ioq_stats st;
        zr_ioq_get_stats(q, &st);
        ck_assert_uint_eq(st.batches, 0);
        zr_ioq_free(q);
        ck_assert_int_eq(d.calls, 0);
        ck_assert_ptr_null(zr_ioq_free(NULL));
}
END_TEST

/* Several submitters, random batches, random cancels: every batch gets
 * exactly one callback; a batch that was not cancelled read exactly the bytes
 * of its merged ranges. */
#define STRESS_THREADS 4
#define STRESS_BATCHES 100

typedef struct stress_arg {
        zr_ioq *q;
        done_log *d;
        int fd;
        unsigned seed;
        uint64_t ids[STRESS_BATCHES];
        uint64_t want[STRESS_BATCHES];
        int cancelled[STRESS_BATCHES];
} stress_arg;

static void *stress_thread(void *arg) {
        stress_arg *s = arg;
        for (int b = 0; b < STRESS_BATCHES; b++) {
                zr_io_range r[8], m[8];
                int n = 1 + (int)(rand_r(&s->seed) % 8);
                for (int i = 0; i < n; i++) {
                        r[i] = (zr_io_range){ s->fd, (uint64_t)(rand_r(&s->seed) % 2048) * 4 * KiB,
                                              (uint64_t)(1 + rand_r(&s->seed) % 64) * KiB };
                        m[i] = r[i];
                }
                size_t nm = zr_io_ranges_merge(m, (size_t)n);
                s->want[b] = 0;
                for (size_t i = 0; i < nm; i++)
                        s->want[b] += m[i].length;
                ck_assert_int_eq(zr_ioq_submit(s->q, r, (size_t)n, done_fn, s->d, &s->ids[b]), 0);
                if (rand_r(&s->seed) % 5 == 0) {
                        int c = zr_ioq_cancel(s->q, s->ids[b]);
                        ck_assert(c == 0 || c == -ENOENT);
                        s->cancelled[b] = c == 0;
                }
        }
        return NULL;
}

START_TEST(test_stress_many_submitters) {
        done_log d;
        zr_ioq *q = start(_i, (zr_ioq_options){ .max_inflight = 16, .threads = 8,
                                                .max_read = 64 * KiB }, NULL, &d);
        if (!q)
                return;
        int fd = temp_file(9 * MiB);
        stress_arg a[STRESS_THREADS];
        pthread_t t[STRESS_THREADS];
        for (int i = 0; i < STRESS_THREADS; i++) {
                memset(&a[i], 0, sizeof(a[i]));
                a[i].q = q;
                a[i].d = &d;
                a[i].fd = fd;
                a[i].seed = 77u + (unsigned)i;
                ck_assert_int_eq(pthread_create(&t[i], NULL, stress_thread, &a[i]), 0);
        }
        for (int i = 0; i < STRESS_THREADS; i++)
                pthread_join(t[i], NULL);
        log_wait(&d, STRESS_THREADS * STRESS_BATCHES);
        int cancelled = 0;
        for (int i = 0; i < STRESS_THREADS; i++)
                for (int b = 0; b < STRESS_BATCHES; b++) {
                        uint64_t id = a[i].ids[b];
                        ck_assert_int_eq(d.per_id[id], 1);
                        if (a[i].cancelled[b]) {
                                cancelled++;
                                ck_assert_int_eq(d.result[id], -ECANCELED);
                                ck_assert_uint_le(d.bytes[id], a[i].want[b]);
                        } else {
                                ck_assert_int_eq(d.result[id], 0);
                                ck_assert_uint_eq(d.bytes[id], a[i].want[b]);
                        }
                }
        zr_ioq_stats st;
        zr_ioq_get_stats(q, &st);
        ck_assert_uint_eq(st.batches, STRESS_THREADS * STRESS_BATCHES);
        ck_assert_uint_eq(st.cancelled, (uint64_t)cancelled);
        ck_assert_uint_eq(st.errors, 0);
        ck_assert_uint_eq(st.in_flight, 0);
        ck_assert_uint_eq(st.queued, 0);
        ck_assert_uint_le(st.depth, 16);
        zr_ioq_free(q);
        ck_assert_int_eq(d.calls, STRESS_THREADS * STRESS_BATCHES);
        close(fd);
}
END_TEST

/* Descriptors the queue creates (ring, eventfd) are all CLOEXEC. */
static int fd_set_snapshot(uint8_t *open_fds, int max) {
        memset(open_fds, 0, (size_t)max);
        DIR *dir = opendir("/proc/self/fd");
        ck_assert_ptr_nonnull(dir);
        int self = dirfd(dir), n = 0;
        struct dirent *e;
        while ((e = readdir(dir))) {
                int fd = atoi(e->d_name);
                if (e->d_name[0] == '.' || fd == self || fd >= max)
                        continue;
                open_fds[fd] = 1;
                n++;
        }
        closedir(dir);
        return n;
}

START_TEST(test_descriptors_cloexec) {
        enum { MAXFD = 4096 };
        static uint8_t before[MAXFD], after[MAXFD];
        fd_set_snapshot(before, MAXFD);
        zr_ioq *q = make_queue(_i, (zr_ioq_options){0});
        if (!q)
                return;
        fd_set_snapshot(after, MAXFD);
        int created = 0;
        for (int fd = 0; fd < MAXFD; fd++)
                if (after[fd] && !before[fd]) {
                        int flags = fcntl(fd, F_GETFD);
                        ck_assert_int_ge(flags, 0);
                        ck_assert_msg(flags & FD_CLOEXEC, "descriptor %d is not CLOEXEC", fd);
                        created++;
                }
        /* io_uring makes a ring and an eventfd; pread threads none */
        ck_assert_int_eq(created, _i == 0 ? 0 : 2);
        zr_ioq_free(q);
        fd_set_snapshot(after, MAXFD);
        ck_assert_mem_eq(before, after, MAXFD);
}
END_TEST

START_TEST(test_backend_names) {
        static const enum zr_ioq_backend all[] = { ZR_IOQ_AUTO, ZR_IOQ_URING, ZR_IOQ_THREADS };
        static const char *const names[] = { "auto", "uring", "threads" };
        enum zr_ioq_backend b;

        for (size_t i = 0; i < 3; i++) {
                ck_assert_int_eq(zr_ioq_backend_parse(names[i], &b), 0);
                ck_assert_int_eq(b, all[i]);
                ck_assert_str_eq(zr_ioq_backend_name(all[i]), names[i]);
        }
        ck_assert_int_eq(zr_ioq_backend_parse("io_uring", &b), -EINVAL);
        ck_assert_int_eq(zr_ioq_backend_parse(NULL, &b), -EINVAL);
}
END_TEST

/* AUTO takes io_uring where it works, and falls back to threads where it does
 * not: here a seccomp filter makes io_uring_setup fail with EPERM, as a
 * container's default profile does. Forced io_uring then fails with that. */
START_TEST(test_auto_falls_back) {
        zr_ioq *q = NULL;
        zr_error err = {0};
        ck_assert_int_eq(zr_ioq_new(NULL, &q, &err), 0);
        int uring_works = zr_ioq_backend_of(q) == ZR_IOQ_URING;
        zr_ioq_free(q);
        if (!zr_ioq_have_uring())
                ck_assert_int_eq(uring_works, 0);
        else if (!uring_works)
                fprintf(stderr, "note: io_uring unavailable here; AUTO chose threads\n");

        pid_t pid = fork();
        ck_assert_int_ge(pid, 0);
        if (pid == 0) {
                /* exit codes: 0 ok, 2 no seccomp, else the failed step */
                if (tl_deny_syscall(__NR_io_uring_setup, EPERM) < 0)
                        _exit(2);
                zr_ioq *c = NULL;
                if (zr_ioq_new(NULL, &c, NULL) < 0)
                        _exit(3);
                if (zr_ioq_backend_of(c) != ZR_IOQ_THREADS)
                        _exit(4);
                int fd = temp_file(64 * KiB);
                done_log d;
                log_init(&d, c);
                zr_io_range r = { fd, 0, 4 * KiB };
                if (zr_ioq_submit(c, &r, 1, done_fn, &d, NULL) < 0)
                        _exit(5);
                log_wait(&d, 1);
                if (d.result[1] != 0 || d.bytes[1] != 4 * KiB)
                        _exit(6);
                zr_ioq_free(c);
                zr_error e = {0};
                c = NULL;
                int r2 = zr_ioq_new(&(zr_ioq_options){ .backend = ZR_IOQ_URING }, &c, &e);
                if (zr_ioq_have_uring() ? r2 != -EPERM : r2 != -ENOSYS)
                        _exit(7);
                if (c || e.message[0] == 0)
                        _exit(8);
                _exit(0);
        }
        int status;
        ck_assert_int_eq(waitpid(pid, &status, 0), pid);
        ck_assert(WIFEXITED(status));
        if (WEXITSTATUS(status) == 2) {
                fprintf(stderr, "skipped (seccomp unavailable): fallback not exercised\n");
                return;
        }
        ck_assert_int_eq(WEXITSTATUS(status), 0);
}
END_TEST

int main(void) {
        Suite *s = suite_create("ioq");
        TCase *tc = tl_tcase_add(s, "backends", 120, (const TTest *)NULL);

        /* _i: 0 = threads, 1 = io_uring */
        TL_LOOP_TESTS(tc, 0, 2, test_reads_and_counts, test_merge_and_split,
                      test_fifo_across_submitters, test_cancel_queued, test_cancel_in_flight,
                      test_free_waits_for_in_flight, test_injected_error_fails_its_batch_only,
                      test_fail_nth_read, test_truncated_under_queued_read, test_closed_descriptor,
                      test_bad_arguments, test_stress_many_submitters, test_descriptors_cloexec);
        TL_TCASE(s, "selection", 0, test_backend_names, test_auto_falls_back);
        return tl_run_suite(s);
}
