/* ioq-backend.h: what the I/O queue (ioq.c) and its backends (ioq-uring.c,
 * ioq-threads.c) share, and nobody else.
 *
 * The queue decides which reads start and when; a backend only performs them:
 * start() takes reads, reap() gives back the ones that finished, wake()
 * interrupts a blocked reap(). start(), reap() and free() are called by the
 * dispatcher thread only; wake() from any thread. A backend never holds the
 * queue's lock and calls back into the queue only through ioq_env.begin().
 */
#ifndef ZR_IO_IOQ_BACKEND_H
#define ZR_IO_IOQ_BACKEND_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "io/ioq.h"

typedef struct ioq_batch ioq_batch;

/* One read: a piece of a batch, at most max_read bytes. */
typedef struct ioq_read {
        zr_io_range range;
        uint8_t *dst;           /* where its bytes go (zr_ioq_submit_into()), or NULL:
                                 * the sink */
        uint64_t need;          /* with dst: the bytes it must read; past them it may
                                 * end early, at the file's end (a direct read of the
                                 * block that holds a file's last byte) */
        uint64_t got;           /* bytes read so far (short reads go on) */
        int result;             /* 0 or -errno, set when it finishes */
        uint64_t start_ns;      /* CLOCK_MONOTONIC when issued */
        uint64_t lat_ns;        /* issue to completion */
        ioq_batch *batch;
        struct ioq_read *next;  /* link while the backend or a list holds it */
} ioq_read;

/* Where read r's next bytes go and how many it may read there at most: its
 * destination, or the sink (of sink_len bytes). */
static inline uint8_t *ioq_read_dst(const ioq_read *r, uint8_t *sink, uint64_t sink_len,
                                    uint64_t *want) {
        *want = r->range.length - r->got;
        if (r->dst)
                return r->dst + r->got;
        if (*want > sink_len)
                *want = sink_len;
        return sink;
}

/* 1 if read r, which has read r->got bytes, is done: its whole range, or, with
 * a destination, what it needs (the rest lies past the file's end). */
static inline int ioq_read_enough(const ioq_read *r) {
        return r->got >= r->range.length || (r->dst && r->got >= r->need);
}

/* What the queue gives a backend. */
typedef struct ioq_env {
        uint8_t *sink;       /* every read's destination, max_read bytes */
        uint64_t sink_len;
        /* Fault injection: called for each read on the thread that issues it,
         * with no lock held; 0 to issue it, or -errno to finish it failed
         * without reading. */
        int (*begin)(void *q, const ioq_read *r);
        void *q;
} ioq_env;

typedef struct ioq_backend_ops {
        enum zr_ioq_backend kind;
        /* Hands the list `reads` (linked by next) to the backend; never fails:
         * a read that cannot be issued finishes with its error. */
        void (*start)(void *be, ioq_read *reads);
        /* Blocks until at least one read finished or wake() was called (a wake
         * that came earlier counts), and returns the finished reads as a list
         * (NULL after a bare wake). */
        ioq_read *(*reap)(void *be);
        /* Makes a blocked (or the next) reap() return. Any thread. */
        void (*wake)(void *be);
        /* Frees the backend; no read is in flight. */
        void (*free)(void *be);
} ioq_backend_ops;

/* Creates the pread pool: `threads` threads; reads at most `threads` at once. */
int ioq_threads_new(const ioq_env *env, unsigned threads, const ioq_backend_ops **ret_ops,
                    void **ret_be, zr_error *err);

/* Creates the io_uring backend for `depth` reads in flight. -ENOSYS in a build
 * without liburing, io_uring_queue_init()'s error where it cannot run. */
int ioq_uring_new(const ioq_env *env, unsigned depth, const ioq_backend_ops **ret_ops,
                  void **ret_be, zr_error *err);

/* CLOCK_MONOTONIC in nanoseconds. */
uint64_t ioq_now_ns(void);

/* Starts a thread running fn(arg) with every signal blocked and a stack of
 * `stack` bytes (0: the default). Returns 0 or a negative errno. */
int ioq_thread_start(pthread_t *t, size_t stack, void *(*fn)(void *), void *arg);

#endif
