/* ioq.c: the I/O queue's batches, order, cancellation and counters (see ioq.h).
 *
 * A batch is turned into reads when it is submitted (merged, then split to
 * max_read) and appended to one FIFO list. The dispatcher thread loops: it
 * accounts the reads the backend finished, takes the batches that ended off
 * the list, starts reads from the head of the list until `depth` are in
 * flight, runs the ended batches' callbacks, then blocks in the backend's
 * reap() until a read finishes or a submit, cancel or free wakes it. Every
 * field below the lock is read and written under it; the dispatcher drops it
 * around the backend's calls and the callbacks.
 *
 * It does not read anything itself: the backends do (ioq-uring.c,
 * ioq-threads.c), and do not know about batches.
 */
#include "io/ioq.h"
#include "io/ioq-backend.h"
#include "io/latency.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "io/io-config.h"

#define IOQ_MAX_READ_LIMIT ((uint64_t)1 << 30)

struct ioq_batch {
        uint64_t id;
        zr_ioq_done_fn *done;
        void *arg;
        ioq_read *reads;
        size_t nreads;
        size_t next;     /* first read not started */
        size_t inflight; /* reads started and not reaped */
        int error;       /* first read error, 0 if none */
        int cancelled;
        uint64_t bytes;
        ioq_batch *link;
};

struct zr_ioq {
        pthread_mutex_t lock;
        ioq_batch *head, *tail; /* batches not ended, in submission order */
        uint64_t next_id;
        int stopping;
        zr_ioq_stats st;        /* counters; latency fields filled on demand */
        zr_latency lat;

        /* set at creation, then read-only */
        zr_ioq_options opts;    /* as resolved: max_read, the fault hook, fail_nth */
        unsigned depth;
        const ioq_backend_ops *ops;
        void *be;
        ioq_env env;
        uint8_t *sink;
        pthread_t thread;
        int thread_started;
        _Atomic uint64_t issued; /* reads issued, for fail_nth */
};

uint64_t ioq_now_ns(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

int ioq_thread_start(pthread_t *t, size_t stack, void *(*fn)(void *), void *arg) {
        pthread_attr_t attr;
        sigset_t all, old;
        int r;

        r = pthread_attr_init(&attr);
        if (r != 0)
                return -r;
        if (stack > 0 && stack < (size_t)PTHREAD_STACK_MIN)
                stack = (size_t)PTHREAD_STACK_MIN;
        if (stack > 0)
                r = pthread_attr_setstacksize(&attr, stack);
        if (r == 0) {
                /* the thread inherits the mask: no signal is ever delivered there */
                sigfillset(&all);
                pthread_sigmask(SIG_SETMASK, &all, &old);
                r = pthread_create(t, &attr, fn, arg);
                pthread_sigmask(SIG_SETMASK, &old, NULL);
        }
        pthread_attr_destroy(&attr);
        return -r;
}

/* The fault injection of the options, for every read (ioq_env.begin). */
static int ioq_begin(void *qv, const ioq_read *r) {
        zr_ioq *q = qv;
        uint64_t nth = atomic_fetch_add_explicit(&q->issued, 1, memory_order_relaxed) + 1;
        if (q->opts.fail_nth > 0 && nth == q->opts.fail_nth)
                return -(q->opts.fail_errno > 0 ? q->opts.fail_errno : EIO);
        if (q->opts.fault) {
                int e = q->opts.fault(q->opts.fault_arg, &r->range);
                if (e < 0)
                        return e;
        }
        return 0;
}

/* Locked: drops the reads of b not started yet. */
static void batch_drop_queued(zr_ioq *q, ioq_batch *b) {
        q->st.queued -= b->nreads - b->next;
        b->next = b->nreads;
}

/* Locked: counts finished read r against its batch and the queue. */
static void ioq_account(zr_ioq *q, ioq_read *r) {
        ioq_batch *b = r->batch;
        b->inflight--;
        b->bytes += r->got;
        q->st.in_flight--;
        q->st.reads++;
        q->st.bytes += r->got;
        if (r->result < 0) {
                q->st.errors++;
                if (!b->error)
                        b->error = r->result;
                batch_drop_queued(q, b);
        } else {
                zr_latency_add(&q->lat, r->lat_ns);
        }
}

static int batch_ended(const ioq_batch *b) {
        return b->inflight == 0 && b->next == b->nreads;
}

/* Locked: unlinks the batches that ended, in order, into a list. */
static ioq_batch *ioq_take_ended(zr_ioq *q) {
        ioq_batch *ended = NULL, **end = &ended, *prev = NULL;
        for (ioq_batch *b = q->head; b;) {
                ioq_batch *next = b->link;
                if (batch_ended(b)) {
                        if (prev)
                                prev->link = next;
                        else
                                q->head = next;
                        if (q->tail == b)
                                q->tail = prev;
                        if (b->cancelled)
                                q->st.cancelled++;
                        else if (b->error)
                                q->st.failed++;
                        b->link = NULL;
                        *end = b;
                        end = &b->link;
                } else {
                        prev = b;
                }
                b = next;
        }
        return ended;
}

/* Locked: the next reads to start, oldest batch first, up to the depth. */
static ioq_read *ioq_pick(zr_ioq *q) {
        ioq_read *list = NULL, **end = &list;
        for (ioq_batch *b = q->head; b && q->st.in_flight < q->depth; b = b->link)
                while (b->next < b->nreads && q->st.in_flight < q->depth) {
                        ioq_read *r = &b->reads[b->next++];
                        b->inflight++;
                        q->st.in_flight++;
                        q->st.queued--;
                        r->next = NULL;
                        *end = r;
                        end = &r->next;
                }
        return list;
}

static void *ioq_dispatch(void *arg) {
        zr_ioq *q = arg;
        ioq_read *finished = NULL;

        /* this thread frees every batch: let the allocator give it its arena
         * now, at start, rather than at the first batch (an owner counting its
         * process's mappings sees them settle when the queue starts) */
        void *volatile first = malloc(1);
        free(first);
        pthread_mutex_lock(&q->lock);
        for (;;) {
                while (finished) {
                        ioq_read *r = finished;
                        finished = r->next;
                        ioq_account(q, r);
                }
                ioq_batch *ended = ioq_take_ended(q);
                ioq_read *start = q->stopping ? NULL : ioq_pick(q);
                int quit = q->stopping && !q->head && q->st.in_flight == 0;
                pthread_mutex_unlock(&q->lock);

                if (start)
                        q->ops->start(q->be, start);
                while (ended) {
                        ioq_batch *b = ended;
                        ended = b->link;
                        b->done(b->arg, b->id, b->cancelled ? -ECANCELED : b->error, b->bytes);
                        free(b->reads);
                        free(b);
                }
                if (quit)
                        break;
                finished = q->ops->reap(q->be);
                pthread_mutex_lock(&q->lock);
        }
        return NULL;
}

static int ioq_options(const zr_ioq_options *o, zr_ioq_options *ret, zr_error *err) {
        zr_ioq_options d = o ? *o : (zr_ioq_options){0};
        if (d.max_inflight == 0)
                d.max_inflight = ZR_IOQ_DEFAULT_INFLIGHT;
        if (d.max_read == 0)
                d.max_read = ZR_IOQ_DEFAULT_MAX_READ;
        if (d.threads == 0)
                d.threads = ZR_IOQ_DEFAULT_THREADS;
        if (d.max_inflight > ZR_IOQ_MAX_INFLIGHT)
                return zr_error_set(err, EINVAL, "ioq: max_inflight %u over %u", d.max_inflight,
                                    ZR_IOQ_MAX_INFLIGHT);
        if (d.threads > ZR_IOQ_MAX_THREADS)
                return zr_error_set(err, EINVAL, "ioq: threads %u over %u", d.threads,
                                    ZR_IOQ_MAX_THREADS);
        if (d.max_read < 4096 || d.max_read > IOQ_MAX_READ_LIMIT)
                return zr_error_set(err, EINVAL, "ioq: max_read %llu outside [4096, 1 GiB]",
                                    (unsigned long long)d.max_read);
        if (d.backend != ZR_IOQ_AUTO && d.backend != ZR_IOQ_URING && d.backend != ZR_IOQ_THREADS)
                return zr_error_set(err, EINVAL, "ioq: unknown backend %d", (int)d.backend);
        *ret = d;
        return 0;
}

int zr_ioq_new(const zr_ioq_options *opts, zr_ioq **ret, zr_error *err) {
        zr_ioq_options o = {0};
        zr_ioq *q = NULL;
        int r;

        r = ioq_options(opts, &o, err);
        if (r < 0)
                return r;
        q = calloc(1, sizeof(*q));
        if (!q)
                return zr_error_set(err, ENOMEM, "ioq: out of memory");
        pthread_mutex_init(&q->lock, NULL);
        zr_latency_init(&q->lat);
        q->opts = o;
        atomic_init(&q->issued, 0);
        void *sink = mmap(NULL, o.max_read, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                          -1, 0);
        if (sink == MAP_FAILED) {
                r = zr_error_errno(err, errno, "ioq: sink buffer of %llu bytes",
                                   (unsigned long long)o.max_read);
                goto fail;
        }
        q->sink = sink;
        q->env = (ioq_env){ .sink = q->sink, .sink_len = o.max_read, .begin = ioq_begin, .q = q };

        if (o.backend == ZR_IOQ_URING || o.backend == ZR_IOQ_AUTO) {
                zr_error e = {0};
                r = ioq_uring_new(&q->env, o.max_inflight, &q->ops, &q->be, &e);
                if (r < 0 && o.backend == ZR_IOQ_URING) {
                        r = zr_error_set(err, -r, "%s", e.message);
                        goto fail;
                }
                q->depth = o.max_inflight;
        }
        if (!q->be) {
                r = ioq_threads_new(&q->env, o.threads, &q->ops, &q->be, err);
                if (r < 0)
                        goto fail;
                q->depth = o.threads < o.max_inflight ? o.threads : o.max_inflight;
        }
        q->st.depth = q->depth;
        r = ioq_thread_start(&q->thread, 0, ioq_dispatch, q);
        if (r < 0) {
                r = zr_error_errno(err, -r, "ioq: dispatcher thread");
                goto fail;
        }
        q->thread_started = 1;
        *ret = q;
        return 0;
fail:
        zr_ioq_free(q);
        return r;
}

zr_ioq *zr_ioq_free(zr_ioq *q) {
        if (!q)
                return NULL;
        if (q->thread_started) {
                pthread_mutex_lock(&q->lock);
                q->stopping = 1;
                for (ioq_batch *b = q->head; b; b = b->link) {
                        b->cancelled = 1;
                        batch_drop_queued(q, b);
                }
                pthread_mutex_unlock(&q->lock);
                q->ops->wake(q->be);
                pthread_join(q->thread, NULL);
        }
        if (q->be)
                q->ops->free(q->be);
        if (q->sink)
                munmap(q->sink, q->opts.max_read);
        pthread_mutex_destroy(&q->lock);
        free(q);
        return NULL;
}

/* Queues batch b (its reads made, nreads of them) for `n` ranges submitted, of
 * which `nonempty` were not empty and `nm` remained after merging. Frees b and
 * returns -ESHUTDOWN when the queue is stopping. */
static int ioq_enqueue(zr_ioq *q, ioq_batch *b, zr_ioq_done_fn *done, void *arg, size_t n,
                       size_t nonempty, size_t nm, uint64_t *ret_id) {
        b->done = done;
        b->arg = arg;
        pthread_mutex_lock(&q->lock);
        if (q->stopping) {
                pthread_mutex_unlock(&q->lock);
                free(b->reads);
                free(b);
                return -ESHUTDOWN;
        }
        b->id = ++q->next_id;
        if (q->tail)
                q->tail->link = b;
        else
                q->head = b;
        q->tail = b;
        q->st.batches++;
        q->st.ranges += n;
        q->st.merged += nonempty - nm;
        q->st.queued += b->nreads;
        if (ret_id)
                *ret_id = b->id;
        pthread_mutex_unlock(&q->lock);
        q->ops->wake(q->be);
        return 0;
}

/* Appends to b the pieces of at most max_read bytes of range `r`, read into
 * dst (NULL: the sink) and needing `need` of its bytes (with dst). */
static void batch_split(zr_ioq *q, ioq_batch *b, const zr_io_range *r, uint8_t *dst,
                        uint64_t need) {
        for (uint64_t off = 0; off < r->length; off += q->opts.max_read) {
                ioq_read *rd = &b->reads[b->nreads++];
                uint64_t left = r->length - off;
                rd->range.fd = r->fd;
                rd->range.offset = r->offset + off;
                rd->range.length = left < q->opts.max_read ? left : q->opts.max_read;
                rd->dst = dst ? dst + off : NULL;
                rd->need = need > off ? need - off : 0;
                if (rd->need > rd->range.length)
                        rd->need = rd->range.length;
                rd->batch = b;
        }
}

int zr_ioq_submit(zr_ioq *q, const zr_io_range *ranges, size_t n, zr_ioq_done_fn *done,
                  void *arg, uint64_t *ret_id) {
        zr_io_range *m = NULL;
        ioq_batch *b = NULL;
        size_t nonempty = 0, nm = 0;
        int r;

        if (!q || !done || (n > 0 && !ranges) || !zr_io_ranges_valid(ranges, n))
                return -EINVAL;
        if (n > SIZE_MAX / sizeof(*m))
                return -ENOMEM;
        b = calloc(1, sizeof(*b));
        m = malloc((n ? n : 1) * sizeof(*m));
        if (!b || !m) {
                r = -ENOMEM;
                goto fail;
        }
        for (size_t i = 0; i < n; i++)
                nonempty += ranges[i].length > 0;
        if (n > 0)
                memcpy(m, ranges, n * sizeof(*m));
        nm = zr_io_ranges_merge(m, n);
        uint64_t pieces = zr_io_ranges_pieces(m, nm, q->opts.max_read);
        if (pieces > SIZE_MAX / sizeof(ioq_read)) {
                r = -ENOMEM;
                goto fail;
        }
        b->reads = calloc(pieces ? pieces : 1, sizeof(ioq_read));
        if (!b->reads) {
                r = -ENOMEM;
                goto fail;
        }
        for (size_t i = 0; i < nm; i++)
                batch_split(q, b, &m[i], NULL, 0);
        free(m);
        return ioq_enqueue(q, b, done, arg, n, nonempty, nm, ret_id);
fail:
        free(m);
        if (b)
                free(b->reads);
        free(b);
        return r;
}

int zr_ioq_submit_into(zr_ioq *q, const zr_io_dread *reads, size_t n, zr_ioq_done_fn *done,
                       void *arg, uint64_t *ret_id) {
        ioq_batch *b = NULL;
        uint64_t pieces = 0;
        size_t nonempty = 0;

        if (!q || !done || (n > 0 && !reads))
                return -EINVAL;
        for (size_t i = 0; i < n; i++) {
                if (!zr_io_ranges_valid(&reads[i].range, 1) ||
                    (reads[i].range.length > 0 && !reads[i].dst) ||
                    reads[i].need > reads[i].range.length)
                        return -EINVAL;
                nonempty += reads[i].range.length > 0;
                pieces += zr_io_ranges_pieces(&reads[i].range, 1, q->opts.max_read);
        }
        if (pieces > SIZE_MAX / sizeof(ioq_read))
                return -ENOMEM;
        b = calloc(1, sizeof(*b));
        if (b)
                b->reads = calloc(pieces ? pieces : 1, sizeof(ioq_read));
        if (!b || !b->reads) {
                if (b)
                        free(b->reads);
                free(b);
                return -ENOMEM;
        }
        for (size_t i = 0; i < n; i++)
                batch_split(q, b, &reads[i].range, reads[i].dst, reads[i].need);
        return ioq_enqueue(q, b, done, arg, n, nonempty, nonempty, ret_id);
}

int zr_ioq_cancel(zr_ioq *q, uint64_t id) {
        int r = -ENOENT;

        pthread_mutex_lock(&q->lock);
        for (ioq_batch *b = q->head; b; b = b->link)
                if (b->id == id) {
                        b->cancelled = 1;
                        batch_drop_queued(q, b);
                        r = 0;
                        break;
                }
        pthread_mutex_unlock(&q->lock);
        if (r == 0)
                q->ops->wake(q->be);
        return r;
}

enum zr_ioq_backend zr_ioq_backend_of(const zr_ioq *q) {
        return q->ops->kind;
}

void zr_ioq_get_stats(zr_ioq *q, zr_ioq_stats *ret) {
        pthread_mutex_lock(&q->lock);
        *ret = q->st;
        ret->lat_ewma_ns = q->lat.ewma_ns;
        ret->lat_p50_ns = zr_latency_quantile(&q->lat, 0.50);
        ret->lat_p99_ns = zr_latency_quantile(&q->lat, 0.99);
        pthread_mutex_unlock(&q->lock);
}

void zr_ioq_get_latency(zr_ioq *q, zr_latency *ret) {
        pthread_mutex_lock(&q->lock);
        *ret = q->lat;
        pthread_mutex_unlock(&q->lock);
}

const char *zr_ioq_backend_name(enum zr_ioq_backend b) {
        switch (b) {
        case ZR_IOQ_URING:
                return "uring";
        case ZR_IOQ_THREADS:
                return "threads";
        default:
                return "auto";
        }
}

int zr_ioq_backend_parse(const char *s, enum zr_ioq_backend *ret) {
        static const enum zr_ioq_backend all[] = { ZR_IOQ_AUTO, ZR_IOQ_URING, ZR_IOQ_THREADS };
        for (size_t i = 0; s && i < sizeof(all) / sizeof(all[0]); i++)
                if (strcmp(s, zr_ioq_backend_name(all[i])) == 0) {
                        *ret = all[i];
                        return 0;
                }
        return -EINVAL;
}

int zr_ioq_have_uring(void) {
        return ZR_HAVE_LIBURING;
}
