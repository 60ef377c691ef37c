/* test-pool.c: every shard runs exactly once, nesting works, tasks run and the
 * task queue is bounded. */
#include <check.h>
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "util/pool.h"
#include "check-run.h"

#define SHARDS 64

typedef struct count_arg {
        _Atomic int hits[SHARDS];
        _Atomic size_t seen_nshards;
        zr_pool *pool; /* for nesting */
} count_arg;

static void count_shard(void *arg, size_t shard, size_t nshards) {
        count_arg *a = arg;
        atomic_fetch_add(&a->hits[shard], 1);
        atomic_store(&a->seen_nshards, nshards);
}

START_TEST(test_parallel_each_shard_once) {
        zr_pool *pool = NULL;
        ck_assert_int_eq(zr_pool_new(3, &pool), 0);
        ck_assert_uint_eq(zr_pool_threads(pool), 3);
        for (size_t n = 1; n <= SHARDS; n += 7) {
                count_arg a;
                memset(&a, 0, sizeof(a));
                zr_pool_parallel(pool, n, count_shard, &a);
                for (size_t i = 0; i < SHARDS; i++)
                        ck_assert_int_eq(atomic_load(&a.hits[i]), i < n ? 1 : 0);
                ck_assert_uint_eq(atomic_load(&a.seen_nshards), n);
        }
        zr_pool_free(pool);
}
END_TEST

static size_t order[SHARDS];
static size_t order_len;

static void record_order(void *arg, size_t shard, size_t nshards) {
        order[order_len++] = shard;
}

START_TEST(test_null_pool_runs_inline_in_order) {
        order_len = 0;
        zr_pool_parallel(NULL, 5, record_order, NULL);
        ck_assert_uint_eq(order_len, 5);
        for (size_t i = 0; i < 5; i++)
                ck_assert_uint_eq(order[i], i);
        ck_assert_uint_eq(zr_pool_threads(NULL), 0);
        ck_assert_uint_eq(zr_pool_shards(NULL, 100), 1);
        ck_assert_int_eq(zr_pool_submit(NULL, NULL, NULL), -EINVAL);
}
END_TEST

typedef struct shards_arg {
        zr_pool *pool;
        pthread_mutex_t mu;
        pthread_cond_t cv;
        size_t got; /* 0 until the task ran */
} shards_arg;

static void shards_task(void *arg) {
        shards_arg *a = arg;
        size_t n = zr_pool_shards(a->pool, 100);
        pthread_mutex_lock(&a->mu);
        a->got = n;
        pthread_cond_signal(&a->cv);
        pthread_mutex_unlock(&a->mu);
}

/* A thread outside the pool shards over every worker and itself; a worker
 * over the workers, itself one of them: a third shard there ran after the
 * other two on one of the two threads (a CPU-bound gather at 3/4 speed). */
START_TEST(test_shards) {
        zr_pool *pool = NULL;
        shards_arg a = { .mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER };
        ck_assert_int_eq(zr_pool_new(2, &pool), 0);
        ck_assert_uint_eq(zr_pool_shards(pool, 0), 1);
        ck_assert_uint_eq(zr_pool_shards(pool, 2), 2);
        ck_assert_uint_eq(zr_pool_shards(pool, 100), 3);
        a.pool = pool;
        ck_assert_int_eq(zr_pool_submit(pool, shards_task, &a), 0);
        pthread_mutex_lock(&a.mu);
        while (a.got == 0)
                pthread_cond_wait(&a.cv, &a.mu);
        pthread_mutex_unlock(&a.mu);
        ck_assert_uint_eq(a.got, 2);
        zr_pool_free(pool);
}
END_TEST

static void nested_shard(void *arg, size_t shard, size_t nshards) {
        count_arg *outer = arg;
        count_arg inner;
        memset(&inner, 0, sizeof(inner));
        zr_pool_parallel(outer->pool, 8, count_shard, &inner);
        for (size_t i = 0; i < 8; i++)
                if (atomic_load(&inner.hits[i]) == 1)
                        atomic_fetch_add(&outer->hits[shard], 1);
}

START_TEST(test_nested_parallel) {
        zr_pool *pool = NULL;
        ck_assert_int_eq(zr_pool_new(2, &pool), 0);
        for (int round = 0; round < 50; round++) {
                count_arg a;
                memset(&a, 0, sizeof(a));
                a.pool = pool;
                zr_pool_parallel(pool, 6, nested_shard, &a);
                for (size_t i = 0; i < 6; i++)
                        ck_assert_int_eq(atomic_load(&a.hits[i]), 8);
        }
        zr_pool_free(pool);
}
END_TEST

static _Atomic int task_count;

static void count_task(void *arg) {
        atomic_fetch_add(&task_count, 1);
}

typedef struct gate {
        pthread_mutex_t m;
        pthread_cond_t c;
        int started, released;
} gate;

static void blocking_task(void *arg) {
        gate *g = arg;
        pthread_mutex_lock(&g->m);
        g->started = 1;
        pthread_cond_broadcast(&g->c);
        while (!g->released)
                pthread_cond_wait(&g->c, &g->m);
        pthread_mutex_unlock(&g->m);
        atomic_fetch_add(&task_count, 1);
}

START_TEST(test_submit_bounded_queue) {
        zr_pool *pool = NULL;
        gate g = { PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0 };
        int queued = 0;

        atomic_store(&task_count, 0);
        ck_assert_int_eq(zr_pool_new(1, &pool), 0);
        ck_assert_int_eq(zr_pool_submit(pool, blocking_task, &g), 0);
        pthread_mutex_lock(&g.m);
        while (!g.started)
                pthread_cond_wait(&g.c, &g.m);
        pthread_mutex_unlock(&g.m);
        /* the only worker is held: the queue fills and then refuses */
        for (;;) {
                int r = zr_pool_try_submit(pool, count_task, NULL);
                if (r == -EAGAIN)
                        break;
                ck_assert_int_eq(r, 0);
                queued++;
                ck_assert_int_le(queued, 100000);
        }
        ck_assert_int_eq(queued, 256);
        pthread_mutex_lock(&g.m);
        g.released = 1;
        pthread_cond_broadcast(&g.c);
        pthread_mutex_unlock(&g.m);
        ck_assert_int_eq(zr_pool_submit(pool, count_task, NULL), 0);
        zr_pool_free(pool); /* runs every queued task first */
        ck_assert_int_eq(atomic_load(&task_count), 1 + 256 + 1);
}
END_TEST

/* What each worker's CPU mask was while it ran one shard: a barrier of every
 * shard holds each thread (the caller and the workers) on exactly one. */
typedef struct mask_arg {
        pthread_barrier_t all;
        pthread_t caller;
        pthread_mutex_t m;
        cpu_set_t masks[16];
        size_t n;
} mask_arg;

static void mask_shard(void *arg, size_t shard, size_t nshards) {
        mask_arg *a = arg;
        cpu_set_t set;
        (void)shard;
        (void)nshards;
        ck_assert_int_eq(sched_getaffinity(0, sizeof(set), &set), 0);
        if (!pthread_equal(pthread_self(), a->caller)) {
                pthread_mutex_lock(&a->m);
                a->masks[a->n++] = set;
                pthread_mutex_unlock(&a->m);
        }
        pthread_barrier_wait(&a->all);
}

/* The workers' masks, after zr_pool_pin() returned *pinned. */
static size_t worker_masks(size_t threads, int *pinned, mask_arg *a) {
        zr_pool *pool = NULL;
        ck_assert_int_eq(zr_pool_new(threads, &pool), 0);
        *pinned = zr_pool_pin(pool);
        memset(a, 0, sizeof(*a));
        a->caller = pthread_self();
        pthread_mutex_init(&a->m, NULL);
        pthread_barrier_init(&a->all, NULL, (unsigned)threads + 1);
        zr_pool_parallel(pool, threads + 1, mask_shard, a);
        pthread_barrier_destroy(&a->all);
        pthread_mutex_destroy(&a->m);
        zr_pool_free(pool);
        return a->n;
}

START_TEST(test_pin_one_cpu_each) {
        cpu_set_t allowed;
        ck_assert_int_eq(sched_getaffinity(0, sizeof(allowed), &allowed), 0);
        size_t ncpus = (size_t)CPU_COUNT(&allowed);
        size_t threads = ncpus < 16 ? ncpus : 16;
        mask_arg a;
        int pinned;

        ck_assert_uint_eq(worker_masks(threads, &pinned, &a), threads);
        ck_assert_int_eq(pinned, (int)threads);
        cpu_set_t seen;
        CPU_ZERO(&seen);
        for (size_t i = 0; i < threads; i++) {
                cpu_set_t both;
                ck_assert_int_eq(CPU_COUNT(&a.masks[i]), 1);
                CPU_AND(&both, &a.masks[i], &allowed);
                ck_assert_int_eq(CPU_COUNT(&both), 1);       /* a CPU of the process's */
                CPU_AND(&both, &a.masks[i], &seen);
                ck_assert_int_eq(CPU_COUNT(&both), 0);       /* no other worker's */
                CPU_OR(&seen, &seen, &a.masks[i]);
        }
}
END_TEST

START_TEST(test_pin_more_workers_than_cpus) {
        cpu_set_t allowed, one;
        ck_assert_int_eq(sched_getaffinity(0, sizeof(allowed), &allowed), 0);
        int cpu = 0;
        while (!CPU_ISSET(cpu, &allowed))
                cpu++;
        CPU_ZERO(&one);
        CPU_SET(cpu, &one);
        /* this process may use one CPU, as under CPUAffinity= or a cpuset */
        ck_assert_int_eq(sched_setaffinity(0, sizeof(one), &one), 0);
        mask_arg a;
        int pinned;

        ck_assert_uint_eq(worker_masks(1, &pinned, &a), 1);
        ck_assert_int_eq(pinned, 1);
        ck_assert(CPU_EQUAL(&a.masks[0], &one));
        ck_assert_uint_eq(worker_masks(2, &pinned, &a), 2);
        ck_assert_int_eq(pinned, 0);                          /* they do not fit: none */
        ck_assert(CPU_EQUAL(&a.masks[0], &one) && CPU_EQUAL(&a.masks[1], &one));
        ck_assert_int_eq(sched_setaffinity(0, sizeof(allowed), &allowed), 0);
}
END_TEST

TL_SUITE_MAIN("pool", test_parallel_each_shard_once, test_null_pool_runs_inline_in_order,
              test_shards, test_nested_parallel, test_submit_bounded_queue,
              test_pin_one_cpu_each, test_pin_more_workers_than_cpus)
