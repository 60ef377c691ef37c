/* ioq-threads.c: the I/O queue's fallback backend, a pool of pread threads.
 *
 * Where io_uring is missing or forbidden, depth comes from threads: each one
 * takes a read off the work list, preads it into its destination or the
 * shared sink (looping over short transfers until the range, or what a read
 * into a destination needs, is read, or the file ends), and puts it
 * on the finished list. The queue never hands over more reads than there are
 * threads, so a read on the work list is picked up at once. All threads read
 * into the one sink: the bytes are discarded, so their concurrent writes there
 * are harmless by design (ThreadSanitizer reports them as a race in
 * threads_perform; suppress it there).
 *
 * Lock order: be->lock is a leaf (the queue never holds its own lock while it
 * calls in here, and no read or fault hook runs with be->lock held).
 */
#include "io/ioq-backend.h"

#include <errno.h>
#include <stdlib.h>
#include <unistd.h>

/* Stack of a pread thread: it runs pread and the tests' fault hook only.
 * Sanitizer builds need room for their redzones. */
#if defined(__SANITIZE_ADDRESS__)
#define THREADS_STACK ((size_t)256 << 10)
#else
#define THREADS_STACK ((size_t)64 << 10)
#endif

typedef struct threads_be {
        ioq_env env;
        pthread_mutex_t lock;
        pthread_cond_t work_cv;     /* work appeared, or stop */
        pthread_cond_t finished_cv; /* a read finished, or wake */
        ioq_read *work, *work_tail; /* FIFO */
        ioq_read *finished;
        int woken;
        int stop;
        unsigned started;
        pthread_t *threads;
} threads_be;

static void threads_perform(threads_be *be, ioq_read *r) {
        r->start_ns = ioq_now_ns();
        int e = be->env.begin(be->env.q, r);
        if (e < 0) {
                r->result = e;
                r->lat_ns = 0;
                return;
        }
        while (!ioq_read_enough(r)) {
                uint64_t want;
                uint8_t *dst = ioq_read_dst(r, be->env.sink, be->env.sink_len, &want);
                ssize_t n = pread(r->range.fd, dst, want, (off_t)(r->range.offset + r->got));
                if (n < 0) {
                        if (errno == EINTR)
                                continue;
                        r->result = -errno;
                        break;
                }
                if (n == 0) {
                        r->result = -ENODATA; /* the file ends before what it needs */
                        break;
                }
                r->got += (uint64_t)n;
        }
        r->lat_ns = ioq_now_ns() - r->start_ns;
}

static void *threads_main(void *arg) {
        threads_be *be = arg;

        pthread_mutex_lock(&be->lock);
        for (;;) {
                while (!be->work && !be->stop)
                        pthread_cond_wait(&be->work_cv, &be->lock);
                if (!be->work)
                        break;
                ioq_read *r = be->work;
                be->work = r->next;
                if (!be->work)
                        be->work_tail = NULL;
                pthread_mutex_unlock(&be->lock);
                threads_perform(be, r);
                pthread_mutex_lock(&be->lock);
                r->next = be->finished;
                be->finished = r;
                pthread_cond_signal(&be->finished_cv);
        }
        pthread_mutex_unlock(&be->lock);
        return NULL;
}

static void threads_start(void *bev, ioq_read *reads) {
        threads_be *be = bev;
        ioq_read *last = reads;
        while (last->next)
                last = last->next;
        pthread_mutex_lock(&be->lock);
        if (be->work_tail)
                be->work_tail->next = reads;
        else
                be->work = reads;
        be->work_tail = last;
        pthread_cond_broadcast(&be->work_cv);
        pthread_mutex_unlock(&be->lock);
}

static ioq_read *threads_reap(void *bev) {
        threads_be *be = bev;
        pthread_mutex_lock(&be->lock);
        while (!be->finished && !be->woken)
                pthread_cond_wait(&be->finished_cv, &be->lock);
        ioq_read *list = be->finished;
        be->finished = NULL;
        be->woken = 0;
        pthread_mutex_unlock(&be->lock);
        return list;
}

static void threads_wake(void *bev) {
        threads_be *be = bev;
        pthread_mutex_lock(&be->lock);
        be->woken = 1;
        pthread_cond_signal(&be->finished_cv);
        pthread_mutex_unlock(&be->lock);
}

static void threads_free(void *bev) {
        threads_be *be = bev;
        if (!be)
                return;
        pthread_mutex_lock(&be->lock);
        be->stop = 1;
        pthread_cond_broadcast(&be->work_cv);
        pthread_mutex_unlock(&be->lock);
        for (unsigned i = 0; i < be->started; i++)
                pthread_join(be->threads[i], NULL);
        pthread_cond_destroy(&be->work_cv);
        pthread_cond_destroy(&be->finished_cv);
        pthread_mutex_destroy(&be->lock);
        free(be->threads);
        free(be);
}

static const ioq_backend_ops threads_ops = {
        .kind = ZR_IOQ_THREADS,
        .start = threads_start,
        .reap = threads_reap,
        .wake = threads_wake,
        .free = threads_free,
};

int ioq_threads_new(const ioq_env *env, unsigned threads, const ioq_backend_ops **ret_ops,
                    void **ret_be, zr_error *err) {
        threads_be *be = calloc(1, sizeof(*be));
        int r;

        if (!be)
                return zr_error_set(err, ENOMEM, "ioq: out of memory");
        be->env = *env;
        pthread_mutex_init(&be->lock, NULL);
        pthread_cond_init(&be->work_cv, NULL);
        pthread_cond_init(&be->finished_cv, NULL);
        be->threads = calloc(threads, sizeof(*be->threads));
        if (!be->threads) {
                r = zr_error_set(err, ENOMEM, "ioq: out of memory");
                goto fail;
        }
        for (unsigned i = 0; i < threads; i++) {
                r = ioq_thread_start(&be->threads[i], THREADS_STACK, threads_main, be);
                if (r < 0) {
                        r = zr_error_errno(err, -r, "ioq: pread thread %u of %u", i + 1, threads);
                        goto fail;
                }
                be->started++;
        }
        *ret_ops = &threads_ops;
        *ret_be = be;
        return 0;
fail:
        threads_free(be);
        return r;
}
