/* pool.h: a small bounded pthread pool for fork-join data parallelism.
 *
 * The engine splits a batch (a gather, an append's compression) into contiguous
 * shards and runs them on the pool. The calling thread always takes part: it runs
 * shards itself while it waits, so a parallel call made from inside a pool task
 * (nesting) cannot deadlock, and a pool of 0 threads runs everything inline.
 *
 * Lock order: the pool's mutex is a leaf; no callback runs with it held.
 */
#ifndef ZR_UTIL_POOL_H
#define ZR_UTIL_POOL_H

#include <stddef.h>
#include <stdint.h>

typedef struct zr_pool zr_pool;

/* Runs shard `shard` of `nshards` (0 <= shard < nshards). `arg` is the caller's. */
typedef void (*zr_pool_shard_fn)(void *arg, size_t shard, size_t nshards);

/* A task for zr_pool_submit(). */
typedef void (*zr_pool_task_fn)(void *arg);

/* Creates a pool of `nthreads` workers; 0 means "as many as online CPUs". The
 * caller of zr_pool_parallel() runs shards too, so CPUs - 1 workers keep every
 * core busy without oversubscribing them.
 * Returns 0 and sets *ret, or -ENOMEM / -errno of pthread_create. */
int zr_pool_new(size_t nthreads, zr_pool **ret);

/* Waits for every queued task, stops the workers, frees the pool. NULL allowed.
 * Returns NULL. */
zr_pool *zr_pool_free(zr_pool *pool);

/* Pins worker i to the i-th CPU this process may run on (sched_getaffinity(),
 * so a service's CPUAffinity= or a container's cpuset is kept), when the
 * workers fit one per CPU; more workers than CPUs are left unpinned. A
 * parallel call wakes its helpers from a worker that is already running, and
 * the scheduler may queue them on that worker's CPU while another CPU idles:
 * the shards of one call then run one after the other, for milliseconds (seen
 * with Linux 6.18's EEVDF on a 2-CPU KVM guest; bench/README.md). Pinned, the
 * workers of a call never share a CPU. Returns the number of workers pinned (0
 * when they do not fit), or -errno of sched_getaffinity() or
 * pthread_setaffinity_np() (the workers pinned before the failure stay so). */
int zr_pool_pin(zr_pool *pool);

/* Number of worker threads (not counting callers). pool may be NULL (then 0). */
size_t zr_pool_threads(const zr_pool *pool);

/* The time the workers spent waiting for work since the pool started, summed
 * over them (two workers idle for 1 ms: 2 ms), on CLOCK_MONOTONIC; 0 for NULL.
 * The difference of two calls tells whether a worker was free meanwhile. */
uint64_t zr_pool_idle_ns(zr_pool *pool);

/* Runs fn(arg, i, nshards) for every i in [0, nshards) and returns when all have
 * finished. Shards run on the workers and on the calling thread. pool may be NULL:
 * then every shard runs inline, in order. Never fails. */
void zr_pool_parallel(zr_pool *pool, size_t nshards, zr_pool_shard_fn fn, void *arg);

/* The number of shards that fits `nitems` items on this pool: at least 1, at
 * most nitems, and one per thread that runs them: every worker, plus the
 * calling thread unless it is itself one of this pool's workers (one shard
 * more than threads would run after the others on one of them). */
size_t zr_pool_shards(const zr_pool *pool, size_t nitems);

/* Queues fn(arg) to run on a worker (FIFO; the queue holds 256 tasks). Blocks
 * while the queue is full, so a task must not call it (use try_submit there).
 * zr_pool_free() runs every queued task before it returns.
 * Returns 0, or -EINVAL if pool or fn is NULL or the pool has no threads. */
int zr_pool_submit(zr_pool *pool, zr_pool_task_fn fn, void *arg);

/* As zr_pool_submit() but never blocks: returns -EAGAIN when the queue is full. */
int zr_pool_try_submit(zr_pool *pool, zr_pool_task_fn fn, void *arg);

#endif
