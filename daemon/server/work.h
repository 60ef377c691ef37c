/* work.h: blocking jobs on the worker pool, completions back on the event loop.
 *
 * The loop thread never blocks on a store: a request that gathers, appends,
 * compacts, verifies, trains or syncs is split into run() (on a pool worker,
 * may block, must not touch libevent or any loop-owned state) and done() (on
 * the loop thread, after run() returned: sends the reply, drops references).
 * Completions travel through a mutex-protected queue and an eventfd that the
 * loop watches, so no libevent call is ever made from a worker.
 *
 * Submission never blocks the loop: when the pool's queue is full the job waits
 * in a local overflow list and is handed over as completions make room.
 *
 * Lock order: the completion mutex is a leaf; run() and done() are called with
 * no lock of this module held.
 */
#ifndef ZR_SERVER_WORK_H
#define ZR_SERVER_WORK_H

#include <stddef.h>

#include "util/pool.h"

struct event_base;
typedef struct zr_work zr_work;

typedef struct zr_job zr_job;
typedef void (*zr_job_fn)(zr_job *job);

/* Embed in the caller's job object; run and done are set by the caller, the
 * rest is this module's. */
struct zr_job {
        zr_job_fn run;   /* on a worker */
        zr_job_fn done;  /* on the loop thread, exactly once, after run */
        zr_job *next;
        zr_work *work;
};

/* Creates the completion channel on `base` for jobs of `pool` (borrowed; both
 * must outlive the zr_work). Returns 0 or -errno. */
int zr_work_new(struct event_base *base, zr_pool *pool, zr_work **ret);

/* Frees. Jobs still in flight must have completed (zr_work_pending() == 0):
 * free the pool first, then call zr_work_flush(), then this. NULL allowed. */
zr_work *zr_work_free(zr_work *w);

/* Queues job->run on the pool; job->done follows on the loop thread. Never
 * blocks and never fails: a full pool queue defers the job. */
void zr_work_submit(zr_work *w, zr_job *job);

/* Calls fn(arg) on the loop thread whenever completions leave no job pending
 * (the server uses it to finish a drain). */
void zr_work_set_idle(zr_work *w, void (*fn)(void *arg), void *arg);

/* Jobs submitted whose done() has not run yet. */
size_t zr_work_pending(const zr_work *w);

/* Runs done() of every completed job now (used at shutdown after the pool has
 * been drained). */
void zr_work_flush(zr_work *w);

#endif
