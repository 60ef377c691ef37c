/* pool.c: the engine's thread pool (see pool.h).
 *
 * A fixed set of workers serves two kinds of work under one mutex: fork-join
 * jobs (zr_pool_parallel(), whose descriptor lives on the caller's stack and
 * whose shards any thread may take) and a bounded FIFO of async tasks. Workers
 * prefer shards of a waiting job to queued tasks, because a caller is blocked on
 * the former. The caller of zr_pool_parallel() takes shards of its own job until
 * none is left, then waits for the ones others took; a thread never waits for a
 * shard nobody runs, so nesting cannot deadlock.
 *
 * Lock order: pool->mutex is a leaf; no shard or task runs with it held.
 * It does not balance load beyond "first free thread takes the next shard".
 */
#include "util/pool.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

/* Queued async tasks before zr_pool_submit() blocks: enough to keep every
 * worker busy many times over, small enough that a runaway producer is held
 * back instead of growing memory. */
#define POOL_QUEUE_MAX 256

typedef struct pool_job {
        zr_pool_shard_fn fn;
        void *arg;
        size_t nshards;
        size_t next; /* next shard to hand out */
        size_t done; /* shards finished */
        pthread_cond_t finished;
        struct pool_job *link;
} pool_job;

typedef struct pool_task {
        zr_pool_task_fn fn;
        void *arg;
} pool_task;

struct zr_pool {
        pthread_mutex_t mutex;
        pthread_cond_t work;  /* a job or task appeared, or stop */
        pthread_cond_t space; /* the task queue has room */
        pool_job *jobs;       /* jobs with shards left to hand out */
        pool_task queue[POOL_QUEUE_MAX];
        size_t q_head, q_len;
        int stop;
        size_t nthreads;
        pthread_t *threads;
        /* zr_pool_idle_ns(): workers waiting for work now, and their waits'
         * sum up to idle_t */
        size_t nidle;
        uint64_t idle_ns, idle_t;
};

static uint64_t pool_now_ns(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Mutex held: brings the idle sum up to now. */
static void pool_idle_account(zr_pool *pool, uint64_t now) {
        if (now > pool->idle_t)
                pool->idle_ns += pool->nidle * (now - pool->idle_t);
        pool->idle_t = now;
}

/* Called with the mutex held: runs one shard of `job` (dropping the mutex
 * around it) if one is left. Returns 1 if it ran one. */
static int pool_run_shard(zr_pool *pool, pool_job *job) {
        if (job->next >= job->nshards)
                return 0;
        size_t shard = job->next++;
        if (job->next == job->nshards) {
                pool_job **p = &pool->jobs;
                while (*p && *p != job)
                        p = &(*p)->link;
                if (*p)
                        *p = job->link;
        }
        pthread_mutex_unlock(&pool->mutex);
        job->fn(job->arg, shard, job->nshards);
        pthread_mutex_lock(&pool->mutex);
        if (++job->done == job->nshards)
                pthread_cond_signal(&job->finished);
        return 1;
}

/* The pool whose worker this thread is, if any (zr_pool_shards()). */
static _Thread_local const zr_pool *worker_of;

static void *pool_worker(void *userdata) {
        zr_pool *pool = userdata;

        worker_of = pool;
        pthread_mutex_lock(&pool->mutex);
        for (;;) {
                if (pool->jobs) {
                        pool_run_shard(pool, pool->jobs);
                        continue;
                }
                if (pool->q_len > 0) {
                        pool_task t = pool->queue[pool->q_head];
                        pool->q_head = (pool->q_head + 1) % POOL_QUEUE_MAX;
                        pool->q_len--;
                        pthread_cond_signal(&pool->space);
                        pthread_mutex_unlock(&pool->mutex);
                        t.fn(t.arg);
                        pthread_mutex_lock(&pool->mutex);
                        continue;
                }
                if (pool->stop)
                        break;
                pool_idle_account(pool, pool_now_ns());
                pool->nidle++;
                pthread_cond_wait(&pool->work, &pool->mutex);
                pool_idle_account(pool, pool_now_ns());
                pool->nidle--;
        }
        pthread_mutex_unlock(&pool->mutex);
        return NULL;
}

int zr_pool_new(size_t nthreads, zr_pool **ret) {
        zr_pool *pool;
        int r;

        if (nthreads == 0) {
                long n = sysconf(_SC_NPROCESSORS_ONLN);
                nthreads = n > 0 ? (size_t)n : 1;
        }
        pool = calloc(1, sizeof(*pool));
        if (!pool)
                return -ENOMEM;
        pool->threads = calloc(nthreads, sizeof(*pool->threads));
        if (!pool->threads) {
                free(pool);
                return -ENOMEM;
        }
        pthread_mutex_init(&pool->mutex, NULL);
        pthread_cond_init(&pool->work, NULL);
        pthread_cond_init(&pool->space, NULL);
        for (size_t i = 0; i < nthreads; i++) {
                r = pthread_create(&pool->threads[i], NULL, pool_worker, pool);
                if (r != 0) {
                        zr_pool_free(pool);
                        return -r;
                }
                pool->nthreads++;
        }
        *ret = pool;
        return 0;
}

zr_pool *zr_pool_free(zr_pool *pool) {
        if (!pool)
                return NULL;
        pthread_mutex_lock(&pool->mutex);
        pool->stop = 1;
        pthread_cond_broadcast(&pool->work);
        pthread_mutex_unlock(&pool->mutex);
        for (size_t i = 0; i < pool->nthreads; i++)
                pthread_join(pool->threads[i], NULL);
        pthread_cond_destroy(&pool->space);
        pthread_cond_destroy(&pool->work);
        pthread_mutex_destroy(&pool->mutex);
        free(pool->threads);
        free(pool);
        return NULL;
}

int zr_pool_pin(zr_pool *pool) {
        cpu_set_t allowed;

        if (!pool || pool->nthreads == 0)
                return 0;
        if (sched_getaffinity(0, sizeof(allowed), &allowed) < 0)
                return -errno;
        if (pool->nthreads > (size_t)CPU_COUNT(&allowed))
                return 0;
        for (size_t i = 0, cpu = 0; i < pool->nthreads; i++, cpu++) {
                cpu_set_t one;
                while (!CPU_ISSET(cpu, &allowed))
                        cpu++;
                CPU_ZERO(&one);
                CPU_SET(cpu, &one);
                int r = pthread_setaffinity_np(pool->threads[i], sizeof(one), &one);
                if (r != 0)
                        return -r;
        }
        return (int)pool->nthreads;
}

uint64_t zr_pool_idle_ns(zr_pool *pool) {
        uint64_t v;

        if (!pool)
                return 0;
        pthread_mutex_lock(&pool->mutex);
        pool_idle_account(pool, pool_now_ns());
        v = pool->idle_ns;
        pthread_mutex_unlock(&pool->mutex);
        return v;
}

size_t zr_pool_threads(const zr_pool *pool) {
        return pool ? pool->nthreads : 0;
}

size_t zr_pool_shards(const zr_pool *pool, size_t nitems) {
        /* the workers, and the caller unless it is one of them */
        size_t max = zr_pool_threads(pool) + (pool && worker_of == pool ? 0 : 1);
        if (nitems < 1)
                return 1;
        return nitems < max ? nitems : max;
}

void zr_pool_parallel(zr_pool *pool, size_t nshards, zr_pool_shard_fn fn, void *arg) {
        if (nshards == 0)
                return;
        if (!pool || pool->nthreads == 0 || nshards == 1) {
                for (size_t i = 0; i < nshards; i++)
                        fn(arg, i, nshards);
                return;
        }

        pool_job job = { .fn = fn, .arg = arg, .nshards = nshards };
        pthread_cond_init(&job.finished, NULL);
        pthread_mutex_lock(&pool->mutex);
        job.link = pool->jobs;
        pool->jobs = &job;
        if (nshards - 1 >= pool->nthreads)
                pthread_cond_broadcast(&pool->work);
        else
                for (size_t i = 0; i < nshards - 1; i++)
                        pthread_cond_signal(&pool->work);
        while (pool_run_shard(pool, &job))
                ;
        while (job.done < job.nshards)
                pthread_cond_wait(&job.finished, &pool->mutex);
        pthread_mutex_unlock(&pool->mutex);
        pthread_cond_destroy(&job.finished);
}

static int pool_enqueue(zr_pool *pool, zr_pool_task_fn fn, void *arg, int block) {
        if (!pool || pool->nthreads == 0 || !fn)
                return -EINVAL;
        pthread_mutex_lock(&pool->mutex);
        while (pool->q_len == POOL_QUEUE_MAX) {
                if (!block) {
                        pthread_mutex_unlock(&pool->mutex);
                        return -EAGAIN;
                }
                pthread_cond_wait(&pool->space, &pool->mutex);
        }
        pool->queue[(pool->q_head + pool->q_len) % POOL_QUEUE_MAX] = (pool_task){ fn, arg };
        pool->q_len++;
        pthread_cond_signal(&pool->work);
        pthread_mutex_unlock(&pool->mutex);
        return 0;
}

int zr_pool_submit(zr_pool *pool, zr_pool_task_fn fn, void *arg) {
        return pool_enqueue(pool, fn, arg, 1);
}

int zr_pool_try_submit(zr_pool *pool, zr_pool_task_fn fn, void *arg) {
        return pool_enqueue(pool, fn, arg, 0);
}
