/* test-work.c: jobs on the pool and their completions (daemon/server/work.h)
 * on a real libevent loop: every job runs on a worker and completes on the
 * loop thread, also past the pool's queue of 256, and the idle callback fires
 * once nothing is pending. The queues of owners (uids) are served in turn: one
 * owner's backlog does not delay another's jobs behind it, and an owner at its
 * max_running leaves the other workers to the rest (its jobs block here on a
 * condition only the other owner's job sets, with a bound, so a scheduler that
 * gives it every worker fails instead of hanging). */
#include <check.h>
#include <errno.h>
#include <event2/event.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <time.h>

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

/* ---- fair turns between owners ------------------------------------------ */

typedef struct ojob {
        zr_job job; /* first */
        char owner;
        int seq;
} ojob;

static char order[64];
static int norder;

static void record_done(zr_job *j) {
        order[norder++] = ((ojob *)j)->owner;
}

static void nothing(zr_job *j) {
}

/* Two owners' queues (at most `cap` jobs running each, 0: no cap) on a work
 * queue of `threads` workers, dispatched from the test's event base. */
typedef struct owners {
        zr_pool *pool;
        zr_work *w;
        zr_work_queue qa, qb;
} owners;

static void owners_start(owners *o, size_t threads, unsigned cap) {
        base = event_base_new();
        ck_assert_int_eq(zr_pool_new(threads, &o->pool), 0);
        ck_assert_int_eq(zr_work_new(base, o->pool, &o->w), 0);
        zr_work_set_idle(o->w, idle, NULL);
        zr_work_queue_init(&o->qa, cap);
        zr_work_queue_init(&o->qb, cap);
}

static void owners_stop(owners *o) {
        o->pool = zr_pool_free(o->pool);
        o->w = zr_work_free(o->w);
        event_base_free(base);
}

/* One worker; owner A queues 20 jobs, then B 5: B's jobs come in turn with
 * A's, not after all of A's (a FIFO would finish B last). */
START_TEST(test_owners_take_turns) {
        owners o;
        ojob jobs[25];
        owners_start(&o, 1, 0);
        norder = 0;
        for (int i = 0; i < 25; i++) {
                jobs[i] = (ojob){.job = {.run = nothing, .done = record_done},
                                 .owner = i < 20 ? 'A' : 'B', .seq = i};
                zr_work_submit_to(o.w, i < 20 ? &o.qa : &o.qb, &jobs[i].job);
        }
        ck_assert_int_eq(event_base_dispatch(base), 0);
        ck_assert_int_eq(norder, 25);
        order[norder] = 0;
        /* B's last job ends before A's tenth */
        int a_seen = 0, b_seen = 0;
        for (int i = 0; i < norder && b_seen < 5; i++) {
                a_seen += order[i] == 'A';
                b_seen += order[i] == 'B';
        }
        ck_assert_msg(a_seen < 10, "completion order %s", order);
        ck_assert_uint_eq(o.qa.running + o.qa.queued + o.qb.running + o.qb.queued, 0);
        owners_stop(&o);
}
END_TEST

static pthread_mutex_t gate_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t gate_cond = PTHREAD_COND_INITIALIZER;
static bool gate_open;
static _Atomic int a_timed_out, a_ran_at_once, a_running;

/* A long job of owner A (a VERIFY, say): it runs until B's job has run. */
static void long_run(zr_job *j) {
        int now = atomic_fetch_add(&a_running, 1) + 1;
        int prev = atomic_load(&a_ran_at_once);
        while (now > prev && !atomic_compare_exchange_weak(&a_ran_at_once, &prev, now))
                ;
        struct timespec dl;
        clock_gettime(CLOCK_REALTIME, &dl);
        dl.tv_sec += 5;
        pthread_mutex_lock(&gate_lock);
        int r = 0;
        while (!gate_open && r != ETIMEDOUT)
                r = pthread_cond_timedwait(&gate_cond, &gate_lock, &dl);
        pthread_mutex_unlock(&gate_lock);
        if (r == ETIMEDOUT)
                atomic_fetch_add(&a_timed_out, 1);
        atomic_fetch_sub(&a_running, 1);
}

static void open_gate(zr_job *j) {
        pthread_mutex_lock(&gate_lock);
        gate_open = true;
        pthread_cond_broadcast(&gate_cond);
        pthread_mutex_unlock(&gate_lock);
}

/* Two workers; owner A (at most one job running) queues six long jobs, then
 * owner B one short job: B's job gets the other worker while A's first still
 * runs, and no two of A's ever run at once. */
START_TEST(test_owner_cap_leaves_workers_to_others) {
        owners o;
        ojob a[6], b;
        owners_start(&o, 2, 1);
        for (int i = 0; i < 6; i++) {
                a[i] = (ojob){.job = {.run = long_run, .done = nothing}, .owner = 'A'};
                zr_work_submit_to(o.w, &o.qa, &a[i].job);
        }
        ck_assert_uint_le(o.qa.running, 1);
        b = (ojob){.job = {.run = open_gate, .done = nothing}, .owner = 'B'};
        zr_work_submit_to(o.w, &o.qb, &b.job);
        ck_assert_int_eq(event_base_dispatch(base), 0);
        ck_assert_int_eq(atomic_load(&a_timed_out), 0);
        ck_assert_int_eq(atomic_load(&a_ran_at_once), 1);
        owners_stop(&o);
}
END_TEST

int main(void) {
        Suite *s = suite_create("work");
        TL_TCASE(s, "work", 0, test_completions, test_owners_take_turns);
        TL_TCASE(s, "owners", 60, test_owner_cap_leaves_workers_to_others);
        return tl_run_suite(s);
}
