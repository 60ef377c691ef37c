/* ioq.h: a deep queue of buffered reads that warm the page cache.
 *
 * The daemon prefetches the records of a loader's next steps by reading their
 * byte ranges through the page cache, many reads deep, and discarding the
 * data (it lands in one small sink buffer shared by every read): the gather
 * then copies from the store's mappings at memory speed. The page cache is the
 * one copy, shared with every client; the queue holds no data.
 *
 * A caller submits a batch of ranges with a completion callback. The queue
 * sorts the batch by (fd, offset), merges ranges that overlap or touch, splits
 * what is longer than the largest read, and reads the pieces with at most
 * `max_inflight` reads in flight over all batches. Batches are served first in,
 * first out: a batch's reads all start before a later batch's first read, so
 * loaders that share one queue take turns by submission order. The callback of
 * a batch runs exactly once, after its last read, with 0 or the batch's first
 * error.
 *
 * Backends: io_uring (liburing) where it was found at build time and
 * io_uring_queue_init() works at run time (it fails where seccomp, a
 * container or kernel.io_uring_disabled forbids it), else a pool of pread
 * threads. ZR_IOQ_AUTO picks the first that works; the others force one.
 *
 * Threads: the queue owns one thread (the dispatcher: it starts reads, reaps
 * completions on io_uring and runs every callback) and, for the thread
 * backend, `threads` pread threads with small stacks and every signal blocked.
 *
 * Thread safety: zr_ioq_submit(), zr_ioq_cancel() and zr_ioq_get_stats() may be
 * called from any thread, concurrently, and from a callback. zr_ioq_free() must
 * not run concurrently with any other call on the queue, nor from a callback.
 * Lock order: the queue's lock, then a backend's lock (the pread pool's). Neither
 * is held while a callback or the fault hook runs, and no call but
 * zr_ioq_free() waits for a callback, so a caller may hold its own lock across
 * zr_ioq_submit() or zr_ioq_cancel() and take that same lock in its callback.
 *
 * Descriptors: every descriptor it creates (io_uring, eventfd) is CLOEXEC. The
 * ranges' descriptors are borrowed: they must stay open, naming the same file,
 * until the batch's callback has run (cancel the batch first, then wait for its
 * callback, before closing them).
 *
 * Errors are returned as negative errno values and in *err; it never prints.
 */
#ifndef ZR_IO_IOQ_H
#define ZR_IO_IOQ_H

#include <stddef.h>
#include <stdint.h>

#include "io/latency.h"
#include "io/range.h"
#include "util/error.h"

typedef struct zr_ioq zr_ioq;

enum zr_ioq_backend {
        ZR_IOQ_AUTO = 0,    /* io_uring if it works here, else threads */
        ZR_IOQ_URING = 1,   /* io_uring only: zr_ioq_new() fails without it */
        ZR_IOQ_THREADS = 2, /* a pool of pread threads */
};

#define ZR_IOQ_DEFAULT_INFLIGHT 128
#define ZR_IOQ_DEFAULT_MAX_READ ((uint64_t)1 << 20)
#define ZR_IOQ_DEFAULT_THREADS 32
#define ZR_IOQ_MAX_INFLIGHT 4096
#define ZR_IOQ_MAX_THREADS 1024

/* Fault injection, for tests only (the daemon's tests reach it through a
 * test-only switch of their own; production leaves both unset). Called once
 * per read, on the thread that issues it (a pread thread, or the dispatcher
 * for io_uring), just before it is issued, with no lock held; the read counts
 * as in flight during the call. `read` is the piece about to be read (after
 * merging and splitting). Return 0 to issue the read, or a negative errno to
 * fail it with that error without reading (counted in `errors`, reported to
 * its batch like a real failure). It may block: a test holds a read in flight
 * that way (to cancel or free around it) and releases it from another thread.
 * It must be thread-safe (pread threads call it concurrently). */
typedef int zr_ioq_fault_fn(void *arg, const zr_io_range *read);

typedef struct zr_ioq_options {
        enum zr_ioq_backend backend;
        unsigned max_inflight; /* reads in flight, all batches; 0: 128 */
        uint64_t max_read;     /* bytes per read (>= 4096); longer ranges split; 0: 1 MiB */
        unsigned threads;      /* pread threads of the thread backend; 0: 32. Its
                                * depth is min(threads, max_inflight) */
        /* Fault injection (tests; see zr_ioq_fault_fn). fail_nth > 0 fails the
         * fail_nth-th read the queue issues (counted from 1 over its life) with
         * -fail_errno (EIO if 0), before the hook is asked. */
        zr_ioq_fault_fn *fault;
        void *fault_arg;
        uint64_t fail_nth;
        int fail_errno;
} zr_ioq_options;

/* Called once per batch, on the queue's dispatcher thread, with no queue lock
 * held. `result` is 0, -ECANCELED for a cancelled batch (also when the queue
 * is freed with the batch pending), or the batch's first read error as a
 * negative errno (-ENODATA when a file ended before a range did: it was
 * truncated, or the range was past its end). `bytes` counts the bytes read.
 * It may call zr_ioq_submit() and zr_ioq_cancel(), never zr_ioq_free(). It
 * should return quickly: the queue starts no read while it runs. */
typedef void zr_ioq_done_fn(void *arg, uint64_t id, int result, uint64_t bytes);

typedef struct zr_ioq_stats {
        uint64_t batches;     /* batches submitted */
        uint64_t cancelled;   /* batches that ended cancelled */
        uint64_t failed;      /* batches that ended with a read error */
        uint64_t ranges;      /* ranges submitted (empty ones included) */
        uint64_t merged;      /* ranges merged into another of their batch */
        uint64_t reads;       /* reads completed, failed ones included */
        uint64_t bytes;       /* bytes read */
        uint64_t errors;      /* reads that failed (injected ones included) */
        uint64_t queued;      /* reads waiting to start now */
        uint32_t in_flight;   /* reads in flight now */
        uint32_t depth;       /* most reads in flight at once (backend's bound) */
        uint64_t lat_ewma_ns; /* per-read latency: moving average (latency.h) */
        uint64_t lat_p50_ns;  /* median and 99th percentile of recent reads */
        uint64_t lat_p99_ns;
} zr_ioq_stats;

/* Creates a queue; opts may be NULL (defaults, AUTO). Returns 0 and *ret, or:
 * -EINVAL for an option out of range (max_inflight or threads over their
 * maxima, max_read under 4096 or over 1 GiB); -ENOSYS for ZR_IOQ_URING in a
 * build without liburing; io_uring_queue_init()'s error for ZR_IOQ_URING where
 * it cannot run (-EPERM, -ENOSYS, ...); -ENOMEM or pthread_create()'s error.
 * *err says which. */
int zr_ioq_new(const zr_ioq_options *opts, zr_ioq **ret, zr_error *err);

/* Cancels every pending batch (their callbacks run with -ECANCELED), waits for
 * the reads in flight and the callbacks, stops the threads and frees the
 * queue. NULL allowed. Not from a callback, not concurrently with other calls
 * on q. Returns NULL. */
zr_ioq *zr_ioq_free(zr_ioq *q);

/* Queues a batch: ranges[0..n) (copied; any order, overlaps allowed, empty
 * ranges ignored). `done(arg, id, result, bytes)` runs exactly once when it
 * ends; a batch with nothing to read ends at once (still on the dispatcher).
 * *ret_id (may be NULL) receives the batch's id (never 0), for
 * zr_ioq_cancel(). A batch whose read fails starts no more reads: it ends
 * with that error when its reads in flight are done. Returns 0 (the callback
 * will run), or, with no callback: -EINVAL (done NULL, or a range whose end
 * overflows an off_t), -ENOMEM, -ESHUTDOWN (zr_ioq_free() has begun). Bad
 * descriptors are not checked here: their reads fail with -EBADF. */
int zr_ioq_submit(zr_ioq *q, const zr_io_range *ranges, size_t n, zr_ioq_done_fn *done,
                  void *arg, uint64_t *ret_id);

/* A read into a destination (zr_ioq_submit_into()). */
typedef struct zr_io_dread {
        zr_io_range range;
        void *dst;     /* range.length bytes of room */
        uint64_t need; /* <= range.length: the read may end at the file's end
                        * once it has these bytes (a read of whole blocks that
                        * covers the file's last byte); before them it fails
                        * with -ENODATA */
} zr_io_dread;

/* Queues a batch of reads into their destinations: reads[0..n) (copied),
 * neither sorted nor merged (the caller planned them: io/direct.h), split at
 * max_read, on the queue's descriptors as given (O_DIRECT ones included: each
 * piece then starts where its range starts plus a multiple of max_read, so
 * keep max_read a multiple of the alignment). Otherwise as zr_ioq_submit():
 * FIFO with every other batch, the same depth, callback, cancel and fault
 * injection; `bytes` counts what was read, past `need` included. A cancelled
 * or failed batch leaves its destinations' bytes unspecified. -EINVAL also for
 * a non-empty read without a destination or a need over its length. */
int zr_ioq_submit_into(zr_ioq *q, const zr_io_dread *reads, size_t n, zr_ioq_done_fn *done,
                       void *arg, uint64_t *ret_id);

/* Cancels batch `id`: its reads not yet started are dropped, and its callback
 * runs with -ECANCELED once its reads in flight are done (so after the
 * callback no read of the batch touches its descriptors). Returns 0, or
 * -ENOENT if no such batch is pending: it has ended and its callback has run
 * or is about to run with its own result. Never waits. */
int zr_ioq_cancel(zr_ioq *q, uint64_t id);

/* The backend in use (ZR_IOQ_URING or ZR_IOQ_THREADS, never AUTO). */
enum zr_ioq_backend zr_ioq_backend_of(const zr_ioq *q);

/* Fills *ret with the counters and the latency estimate at this instant. */
void zr_ioq_get_stats(zr_ioq *q, zr_ioq_stats *ret);

/* Copies the per-read latency histogram (its fixed buckets make the
 * daemon's Prometheus histogram of reads ahead). */
void zr_ioq_get_latency(zr_ioq *q, zr_latency *ret);

/* "auto", "uring" or "threads". */
const char *zr_ioq_backend_name(enum zr_ioq_backend b);

/* Parses "auto", "uring" or "threads" (a config value or an environment
 * switch) into *ret. Returns 0 or -EINVAL. */
int zr_ioq_backend_parse(const char *s, enum zr_ioq_backend *ret);

/* 1 if this build has the io_uring backend (liburing was found), else 0. */
int zr_ioq_have_uring(void);

#endif
