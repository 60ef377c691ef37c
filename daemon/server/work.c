/* work.c: jobs on the pool in fair turns, completions back on the loop
 * (work.h).
 *
 * The loop hands a job to the pool from the queue at the head of the
 * round-robin, then puts that queue at the tail if it still has jobs waiting;
 * a queue at its max_running is passed over until one of its jobs completes.
 * A worker runs job->run(), pushes the job on a mutex-protected list and
 * writes to an eventfd; the loop's read event drains the eventfd, takes the
 * whole list, calls done() in completion order and hands out more jobs. It
 * assumes one loop thread; it does not order the jobs of one queue beyond FIFO
 * (a session serialises its own requests).
 */
#include "server/work.h"

#include <errno.h>
#include <event2/event.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "util/fifo.h"

struct zr_work {
        zr_pool *pool;
        int efd;
        struct event *ev;
        pthread_mutex_t mutex;     /* guards `done_head`, a leaf */
        zr_job *done_head;         /* completed, newest first */
        /* loop thread only */
        zr_work_queue own;         /* the daemon's jobs (syncs, and anyone's without a queue) */
        zr_work_queue *rr_head, *rr_tail; /* queues with jobs waiting, in turn order */
        size_t rr_len;
        size_t pending;            /* submitted, done() not yet run */
        size_t inflight;           /* handed to the pool, done() not yet run */
        size_t slots;              /* most jobs handed to the pool at once */
        void (*idle)(void *arg);
        void *idle_arg;
};

void zr_work_queue_init(zr_work_queue *q, unsigned max_running) {
        *q = (zr_work_queue){.max_running = max_running};
}

static void job_trampoline(void *arg) {
        zr_job *job = arg;
        zr_work *w = job->work;
        job->run(job);
        pthread_mutex_lock(&w->mutex);
        job->next = w->done_head;
        w->done_head = job;
        pthread_mutex_unlock(&w->mutex);
        uint64_t one = 1;
        /* An eventfd write fails only when the counter would overflow, i.e. the
         * loop already has a wake-up pending. */
        (void)!write(w->efd, &one, sizeof(one));
}

/* Puts q in the round-robin (at its tail, or first), unless it is there. */
static void rr_push(zr_work *w, zr_work_queue *q, bool front) {
        if (q->in_rr)
                return;
        q->in_rr = true;
        if (front)
                ZR_FIFO_PUSH_FRONT(w->rr_head, w->rr_tail, q, rr_next);
        else
                ZR_FIFO_PUSH(w->rr_head, w->rr_tail, q, rr_next);
        w->rr_len++;
}

static zr_work_queue *rr_pop(zr_work *w) {
        zr_work_queue *q = w->rr_head;
        if (!q)
                return NULL;
        ZR_FIFO_SHIFT(w->rr_head, w->rr_tail, q, rr_next);
        q->in_rr = false;
        w->rr_len--;
        return q;
}

static zr_job *queue_pop(zr_work_queue *q) {
        zr_job *job = q->head;
        ZR_FIFO_SHIFT(q->head, q->tail, job, next);
        q->queued--;
        return job;
}

/* Hands out jobs, one per queue per turn, while the pool has slots. A turn
 * of a queue at its max_running passes; once every queue in the round-robin
 * has passed in a row, dispatch ends, and a queue's turn comes back when one
 * of its jobs completes (zr_work_flush()). */
static void dispatch(zr_work *w) {
        size_t passed = 0;
        while (w->inflight < w->slots && w->rr_head && passed < w->rr_len) {
                zr_work_queue *q = rr_pop(w);
                if (q->max_running && q->running >= q->max_running) {
                        rr_push(w, q, false);
                        passed++;
                        continue;
                }
                zr_job *job = queue_pop(q);
                q->running++;
                w->inflight++;
                if (zr_pool_try_submit(w->pool, job_trampoline, job) < 0) {
                        /* the pool's queue is full (loader gathers share it):
                         * the same job first, after the next completion */
                        q->running--;
                        w->inflight--;
                        ZR_FIFO_PUSH_FRONT(q->head, q->tail, job, next);
                        q->queued++;
                        rr_push(w, q, true);
                        return;
                }
                passed = 0;
                if (q->queued)
                        rr_push(w, q, false);
        }
}

void zr_work_flush(zr_work *w) {
        pthread_mutex_lock(&w->mutex);
        zr_job *list = w->done_head;
        w->done_head = NULL;
        pthread_mutex_unlock(&w->mutex);
        /* Newest first on the list: reverse, so done() runs in completion order. */
        zr_job *ordered = NULL;
        while (list) {
                zr_job *n = list->next;
                list->next = ordered;
                ordered = list;
                list = n;
        }
        while (ordered) {
                zr_job *job = ordered;
                ordered = job->next;
                /* before done(), which may free the queue's owner */
                job->queue->running--;
                w->inflight--;
                w->pending--;
                job->done(job); /* may free the job, may submit more */
        }
        dispatch(w);
}

static void efd_cb(evutil_socket_t fd, short what, void *arg) {
        zr_work *w = arg;
        uint64_t v;
        (void)!read(w->efd, &v, sizeof(v));
        zr_work_flush(w);
        if (w->pending == 0 && w->idle)
                w->idle(w->idle_arg);
}

void zr_work_set_idle(zr_work *w, void (*fn)(void *arg), void *arg) {
        w->idle = fn;
        w->idle_arg = arg;
}

int zr_work_new(struct event_base *base, zr_pool *pool, zr_work **ret) {
        zr_work *w = calloc(1, sizeof(*w));
        if (!w)
                return -ENOMEM;
        w->pool = pool;
        w->efd = -1;
        /* twice the workers: one waiting behind each running job, so a worker
         * that frees finds the next job at once, and the order is still the
         * round-robin's, not the pool's FIFO */
        w->slots = 2 * zr_pool_threads(pool);
        if (w->slots == 0)
                w->slots = 1;
        zr_work_queue_init(&w->own, 0);
        pthread_mutex_init(&w->mutex, NULL);
        w->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        if (w->efd < 0) {
                int r = -errno;
                zr_work_free(w);
                return r;
        }
        w->ev = event_new(base, w->efd, EV_READ | EV_PERSIST, efd_cb, w);
        if (!w->ev || event_add(w->ev, NULL) < 0) {
                zr_work_free(w);
                return -ENOMEM;
        }
        *ret = w;
        return 0;
}

zr_work *zr_work_free(zr_work *w) {
        if (!w)
                return NULL;
        if (w->ev)
                event_free(w->ev);
        if (w->efd >= 0)
                close(w->efd);
        pthread_mutex_destroy(&w->mutex);
        free(w);
        return NULL;
}

void zr_work_submit_to(zr_work *w, zr_work_queue *q, zr_job *job) {
        if (!q)
                q = &w->own;
        job->work = w;
        job->queue = q;
        ZR_FIFO_PUSH(q->head, q->tail, job, next);
        q->queued++;
        w->pending++;
        rr_push(w, q, false);
        dispatch(w);
}

void zr_work_submit(zr_work *w, zr_job *job) {
        zr_work_submit_to(w, NULL, job);
}

void zr_work_submit_all(zr_work *w) {
        zr_work_queue *q;
        while ((q = rr_pop(w))) {
                while (q->head) {
                        zr_job *job = queue_pop(q);
                        q->running++;
                        w->inflight++;
                        zr_pool_submit(w->pool, job_trampoline, job);
                }
        }
}

size_t zr_work_pending(const zr_work *w) {
        return w->pending;
}
