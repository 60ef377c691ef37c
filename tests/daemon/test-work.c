/* test-work.c: the pool-to-loop completion channel (daemon/server/work.h) on a
 * real libevent loop: every job runs on a worker and completes on the loop
 * thread, also past the pool's queue of 256 (the deferred path), and the idle
 * callback fires once nothing is pending. */
#include <check.h>
#include <event2/event.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "check-run.h"
#include "server/work.h"

#define JOBS 2000

typedef struct tjob {
        zr_job job; /* first */
        pthread_t ran_on;
        int done;
} tjob;

static pthread_t loop_thread;
static _Atomic int ran;
static int completed, wrong_thread;
static struct event_base *base;

static void run(zr_job *j) {
        tjob *t = (tjob *)j;
        t->ran_on = pthread_self();
        atomic_fetch_add(&ran, 1);
}

static void done(zr_job *j) {
        tjob *t = (tjob *)j;
        if (!pthread_equal(pthread_self(), loop_thread) || pthread_equal(t->ran_on, loop_thread))
                wrong_thread++;
        t->done++;
        completed++;
}

static void idle(void *arg) {
        event_base_loopexit(base, NULL);
}

START_TEST(test_completions) {
        zr_pool *pool;
        zr_work *w;
        tjob *jobs = calloc(JOBS, sizeof(tjob));
        loop_thread = pthread_self();
        base = event_base_new();
        ck_assert_int_eq(zr_pool_new(2, &pool), 0);
        ck_assert_int_eq(zr_work_new(base, pool, &w), 0);
        zr_work_set_idle(w, idle, NULL);
        for (int i = 0; i < JOBS; i++) {
                jobs[i].job.run = run;
                jobs[i].job.done = done;
                zr_work_submit(w, &jobs[i].job);
        }
        ck_assert_uint_eq(zr_work_pending(w), JOBS);
        ck_assert_int_eq(event_base_dispatch(base), 0);
        ck_assert_int_eq(completed, JOBS);
        ck_assert_int_eq(atomic_load(&ran), JOBS);
        ck_assert_int_eq(wrong_thread, 0);
        ck_assert_uint_eq(zr_work_pending(w), 0);
        for (int i = 0; i < JOBS; i++)
                ck_assert_int_eq(jobs[i].done, 1);
        pool = zr_pool_free(pool);
        w = zr_work_free(w);
        event_base_free(base);
        free(jobs);
}
END_TEST

int main(void) {
        Suite *s = suite_create("work");
        TL_TCASE(s, "work", 0, test_completions);
        return tl_run_suite(s);
}
