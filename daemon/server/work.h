/* work.h: blocking jobs on the worker pool, completions back on the event loop.
 *
 * The loop thread never blocks on a store: a request that gathers, appends,
 * compacts, verifies, trains or syncs is split into run() (on a pool worker,
 * may block, must not touch libevent or any loop-owned state) and done() (on
 * the loop thread, after run() returned: sends the reply, drops references).
 * Completions travel through a mutex-protected queue and an eventfd that the
 * loop watches, so no libevent call is ever made from a worker.
 *
 * Submission never blocks the loop. Jobs wait in queues of their owners (a
 * uid's, users.h, or the daemon's own) and are handed to the pool round-robin
 * between the queues, one job per turn, as workers free: at most twice the
 * pool's threads at once, and at most `max_running` of one queue, so one uid's
 * long jobs (VERIFY, COMPACT, a large BUFFER_OPEN) never hold every worker and
 * a job of another uid waits for one turn, not for that uid's backlog.
 *
 * Lock order: the completion mutex is a leaf; run() and done() are called with
 * no lock of this module held.
 */
#ifndef ZR_SERVER_WORK_H
#define ZR_SERVER_WORK_H

#include <stdbool.h>
#include <stddef.h>

#include "util/pool.h"

struct event_base;
typedef struct zr_work zr_work;

typedef struct zr_job zr_job;
typedef void (*zr_job_fn)(zr_job *job);
typedef struct zr_work_queue zr_work_queue;

/* Embed in the caller's job object; run and done are set by the caller, the
 * rest is this module's. */
struct zr_job {
        zr_job_fn run;   /* on a worker */
        zr_job_fn done;  /* on the loop thread, exactly once, after run */
        zr_job *next;
        zr_work *work;
        zr_work_queue *queue;
};

/* The jobs of one owner. Embed it in the owner (zero it, or
 * zr_work_queue_init()); it must outlive its jobs' done(). Loop thread only. */
struct zr_work_queue {
        zr_job *head, *tail;      /* waiting, oldest first */
        unsigned queued;          /* waiting */
        unsigned running;         /* handed to the pool, done() not yet run */
        unsigned max_running;     /* 0: no limit */
        zr_work_queue *rr_next;   /* in the round-robin while it has jobs waiting */
        bool in_rr;
};

void zr_work_queue_init(zr_work_queue *q, unsigned max_running);

/* Creates the completion channel on `base` for jobs of `pool` (borrowed; both
 * must outlive the zr_work). Returns 0 or -errno. */
int zr_work_new(struct event_base *base, zr_pool *pool, zr_work **ret);

/* Frees. Jobs still in flight must have completed (zr_work_pending() == 0):
 * free the pool first, then call zr_work_flush(), then this. NULL allowed. */
zr_work *zr_work_free(zr_work *w);

/* Queues job->run in queue q (NULL: the daemon's own); job->done follows on
 * the loop thread once it ran on the pool. Never blocks and never fails. */
void zr_work_submit_to(zr_work *w, zr_work_queue *q, zr_job *job);
/* zr_work_submit_to() the daemon's own queue. */
void zr_work_submit(zr_work *w, zr_job *job);

/* At shutdown, before the pool is freed: hands every waiting job to the pool,
 * whatever the limits (blocking while its queue is full), so that freeing the
 * pool runs them all and zr_work_flush() completes them. */
void zr_work_submit_all(zr_work *w);

/* Calls fn(arg) on the loop thread whenever completions leave no job pending
 * (the server uses it to finish a drain). */
void zr_work_set_idle(zr_work *w, void (*fn)(void *arg), void *arg);

/* Jobs submitted whose done() has not run yet. */
size_t zr_work_pending(const zr_work *w);

/* Runs done() of every completed job now (used at shutdown after the pool has
 * been drained). */
void zr_work_flush(zr_work *w);

#endif
