/* work.c: the pool-to-loop completion channel (work.h).
 *
 * A worker runs job->run(), pushes the job on a mutex-protected list and writes
 * to an eventfd; the loop's read event drains the eventfd, takes the whole list
 * and calls done() in submission-independent completion order. Jobs the pool
 * could not take (its queue was full) wait in `deferred` and are retried after
 * every batch of completions. It assumes one loop thread; it does not order
 * jobs (a session serialises its own requests).
 */
#include "server/work.h"

#include <errno.h>
#include <event2/event.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/eventfd.h>
#include <unistd.h>

struct zr_work {
        zr_pool *pool;
        int efd;
        struct event *ev;
        pthread_mutex_t mutex;     /* guards `done_head`, a leaf */
        zr_job *done_head;         /* completed, newest first */
        zr_job *deferred_head, *deferred_tail; /* loop thread only */
        size_t pending;            /* loop thread only */
        void (*idle)(void *arg);
        void *idle_arg;
};

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

static void submit_deferred(zr_work *w) {
        while (w->deferred_head) {
                zr_job *job = w->deferred_head, *next = job->next;
                /* Once submitted the job belongs to a worker, `next` included. */
                if (zr_pool_try_submit(w->pool, job_trampoline, job) < 0)
                        return;
                w->deferred_head = next;
                if (!next)
                        w->deferred_tail = NULL;
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
                w->pending--;
                job->done(job); /* may free the job, may submit more */
        }
        submit_deferred(w);
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

void zr_work_submit(zr_work *w, zr_job *job) {
        job->work = w;
        job->next = NULL;
        w->pending++;
        if (!w->deferred_head && zr_pool_try_submit(w->pool, job_trampoline, job) == 0)
                return;
        if (w->deferred_tail)
                w->deferred_tail->next = job;
        else
                w->deferred_head = job;
        w->deferred_tail = job;
}

size_t zr_work_pending(const zr_work *w) {
        return w->pending;
}
