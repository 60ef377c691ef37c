/* test-loader-engine.c: the engine under mutations and load: decoded-record
 * cache accounting, a mutation ends its loaders STALE after the intact
 * batches, a long exclusive lock parks gathers without holding a worker, a
 * loader freed while parked, fair worker time between loaders, and teardown
 * with work in flight. */
#include "helpers.h"

#include <inttypes.h>
#include <semaphore.h>

/* Cache accounting: a compressed store that fits the budget is decoded once;
 * one that does not evicts; raw stores bypass the cache; drop empties it. */
START_TEST(test_cache_accounting) {
        fixture f;
        zr_loader *l;
        zr_loader_counters c;
        zr_loader_engine_counters t;
        zr_loader_params p = loader_params(ZR_SAMPLER_SEQUENTIAL, 30, 0, 2);
        zr_loader_stream st;

        fixture_new(&f, ZR_CODEC_ZSTD, 1 << 20);
        st = reg_stream(&f.dense, "d");
        /* two passes over the 300 records (10 steps each) */
        l = open_loader(&f, &st, 1, &p);
        take_batches(&f.g, l, 20, &c);
        zr_loader_free(l);
        fprintf(stderr, "cache fits: hits %" PRIu64 " misses %" PRIu64 " evictions %" PRIu64 "\n",
                c.hits, c.misses, c.evictions);
        /* the first pass misses every record once; everything later hits */
        ck_assert_uint_eq(c.misses, N_DENSE);
        ck_assert_uint_ge(c.hits, 10 * 30);
        ck_assert_uint_eq(c.evictions, 0);
        zr_loader_engine_counters_get(f.g.e, &t);
        ck_assert_uint_eq(t.cache_entries, N_DENSE);
        ck_assert_uint_le(t.cache_bytes, t.cache_budget);
        zr_loader_engine_drop_dataset(f.g.e, f.dense.id);
        zr_loader_engine_counters_get(f.g.e, &t);
        ck_assert_uint_eq(t.cache_entries, 0);

        /* a budget of ~100 records: a cyclic pass over 300 evicts */
        zr_loader_engine_set_cache_bytes(f.g.e, 100 * (ITEM + 96));
        l = open_loader(&f, &st, 1, &p);
        take_batches(&f.g, l, 20, &c);
        zr_loader_free(l);
        zr_loader_engine_counters_get(f.g.e, &t);
        fprintf(stderr, "cache small: hits %" PRIu64 " misses %" PRIu64 " evictions %" PRIu64
                " resident %" PRIu64 "/%" PRIu64 "\n", c.hits, c.misses, c.evictions,
                t.cache_bytes, t.cache_budget);
        ck_assert_uint_gt(c.evictions, 0);
        ck_assert_uint_gt(c.misses, N_DENSE);
        ck_assert_uint_le(t.cache_bytes, t.cache_budget);
        zr_loader_engine_set_cache_bytes(f.g.e, 0);
        zr_loader_engine_counters_get(f.g.e, &t);
        ck_assert_uint_eq(t.cache_bytes, 0);
        fixture_free(&f);

        /* raw: no lookups at all */
        fixture_new(&f, ZR_CODEC_RAW, 1 << 20);
        st = reg_stream(&f.dense, "d");
        l = open_loader(&f, &st, 1, &p);
        take_batches(&f.g, l, 12, &c);
        ck_assert_uint_eq(c.hits + c.misses, 0);
        ck_assert_uint_ge(c.bytes, 12 * 30 * ITEM);
        zr_loader_free(l);
        fixture_free(&f);
}
END_TEST

/* A mutation between batches: batches gathered before it are announced intact,
 * then END with ZR_E_STALE; nothing gathered after it is announced. */
/* The batch's stream 0 is the wanted batch of its step (arg: uint8_t *want[]). */
static void same_as_wanted(const zr_loader_event *ev, void *arg) {
        uint8_t **want = arg;

        ck_assert_int_eq(memcmp((const uint8_t *)ev->ring_data + ev->streams[0].offset,
                                want[ev->step], 50 * ITEM), 0);
}

START_TEST(test_stale) {
        enum { PF = 3 };
        fixture f;
        zr_loader *l;
        zr_loader_params p = loader_params(ZR_SAMPLER_SEQUENTIAL, 50, 0, PF);
        zr_sampler_params sp = { .mode = ZR_SAMPLER_SEQUENTIAL, .n = N_DENSE, .batch_size = 50,
                                 .world_size = 1 };
        uint8_t *want[20];
        zr_loader_stream st;
        zr_loader_event ev;
        uint64_t del[5] = { 0, 1, 2, 3, 4 }, s;
        zr_error err = {0};

        fixture_new(&f, ZR_CODEC_RAW, 0);
        st = reg_stream(&f.dense, "d");
        for (int k = 0; k < 20; k++) {
                want[k] = malloc(50 * ITEM);
                expect_dense(f.dense.ds, &sp, (uint64_t)k, want[k], ITEM);
        }
        l = open_loader(&f, &st, 1, &p);
        next_batch(&f.g, l, &ev);
        ck_assert_uint_eq(ev.step, 0);
        /* mutate: delete records 0..4 (the swap-last moves the tail into them) */
        zr_dataset_lock(f.dense.ds, true);
        ck_assert_msg(zr_dataset_delete(f.dense.ds, del, 5, &err) == 0, "%s", err.message);
        zr_dataset_mutated(f.dense.ds);
        zr_dataset_unlock(f.dense.ds);
        zr_loader_release(l, ev.ring, ev.slot, NULL);
        s = batches_until_end(&f.g, l, 1, true, same_as_wanted, want, &ev);
        ck_assert_int_eq(ev.code, ZR_E_STALE);
        ck_assert_uint_eq(ev.step, s);
        ck_assert_uint_le(s, PF + 1); /* at most the prefetched batches came */
        ck_assert_ptr_nonnull(strstr(ev.message, "stream 0 (d)"));
        ck_assert_int_eq(zr_loader_poll(l, &ev), 0);
        zr_loader_free(l);
        /* a new loader opened now sees the new length and the new content */
        sp.n = N_DENSE - 5;
        l = open_loader(&f, &st, 1, &p);
        ck_assert_uint_eq(zr_loader_length(l), N_DENSE - 5);
        next_batch(&f.g, l, &ev);
        check_dense(l, &ev, 0, &f.dense, ITEM, &sp);
        zr_loader_free(l);
        for (int k = 0; k < 20; k++)
                free(want[k]);
        fixture_free(&f);
}
END_TEST

/* A mutation that holds one dataset's lock exclusive for long holds no worker:
 * a loader of another dataset keeps going (with blocking locks both workers
 * would wait and this test would hang); the loader of the locked dataset
 * resumes when the lock goes (nothing changed) or ends STALE (it changed). */
START_TEST(test_locked_dataset) {
        enum { PF = 4 };
        fixture f;
        zr_loader *x, *y;
        zr_loader_params p = loader_params(ZR_SAMPLER_IID, 8, 3, PF);
        zr_sampler_params sp = { .mode = ZR_SAMPLER_IID, .n = N_DENSE, .batch_size = 8,
                                 .seed = 3, .world_size = 1 };
        zr_loader_stream sx, sy;
        zr_loader_event ev, held[PF];
        uint64_t s;

        fixture_new(&f, ZR_CODEC_ZSTD, 1 << 20);
        sx = reg_stream(&f.dense, "d");
        sy = reg_stream(&f.dense2, "e");
        x = open_loader(&f, &sx, 1, &p);
        y = open_loader(&f, &sy, 1, &p);
        for (int k = 0; k < PF; k++)
                next_batch(&f.g, x, &held[k]);
        zr_dataset_lock(f.dense.ds, true);
        for (int k = 0; k < PF; k++)
                zr_loader_release(x, held[k].ring, held[k].slot, NULL);
        for (s = 0; s < 40; s++) {
                next_batch(&f.g, y, &ev);
                ck_assert_uint_eq(ev.step, s);
                zr_loader_release(y, ev.ring, ev.slot, NULL);
        }
        ck_assert_int_eq(zr_loader_poll(x, &ev), 0);
        /* an exclusive section that changed nothing: x resumes, intact */
        zr_dataset_unlock(f.dense.ds);
        zr_loader_engine_resume(f.g.e);
        for (s = PF; s < 3 * PF; s++) {
                next_batch(&f.g, x, &ev);
                ck_assert_uint_eq(ev.step, s);
                check_dense(x, &ev, 0, &f.dense, ITEM, &sp);
                zr_loader_release(x, ev.ring, ev.slot, NULL);
        }
        /* one that changed it: x ends STALE and announces nothing torn */
        for (int k = 0; k < PF; k++)
                next_batch(&f.g, x, &held[k]);
        zr_dataset_lock(f.dense.ds, true);
        for (int k = 0; k < PF; k++)
                zr_loader_release(x, held[k].ring, held[k].slot, NULL);
        zr_dataset_mutated(f.dense.ds);
        zr_dataset_unlock(f.dense.ds);
        zr_loader_engine_drop_dataset(f.g.e, f.dense.id);
        next_event(&f.g, x, &ev);
        ck_assert_int_eq(ev.kind, ZR_LOADER_EVENT_END);
        ck_assert_int_eq(ev.code, ZR_E_STALE);
        ck_assert_uint_eq(ev.step, 4 * PF);
        zr_loader_free(x);
        zr_loader_free(y);
        fixture_free(&f);
}
END_TEST

/* A loader freed while its gathers are parked on a locked dataset; a group
 * member that waited for them gathers for itself once the lock goes, retried
 * by the engine alone. */
START_TEST(test_free_parked) {
        fixture f;
        zr_loader *x, *x2;
        zr_loader_params p = loader_params(ZR_SAMPLER_IID, 8, 3, 2);
        zr_loader_stream sx;
        zr_loader_event ev, held[2];

        fixture_new(&f, ZR_CODEC_RAW, 0);
        sx = reg_stream(&f.dense, "d");
        x = open_loader(&f, &sx, 1, &p);
        x2 = open_loader(&f, &sx, 1, &p); /* same group: waits on x's parked fills */
        next_batch(&f.g, x, &held[0]);
        next_batch(&f.g, x, &held[1]);
        next_batch(&f.g, x2, &ev);
        zr_loader_release(x2, ev.ring, ev.slot, NULL);
        next_batch(&f.g, x2, &ev);
        zr_loader_release(x2, ev.ring, ev.slot, NULL);
        zr_dataset_lock(f.dense.ds, true);
        zr_loader_release(x, held[0].ring, held[0].slot, NULL);
        zr_loader_release(x, held[1].ring, held[1].slot, NULL);
        zr_loader_free(x); /* returns at once: parked work never runs */
        zr_dataset_unlock(f.dense.ds);
        /* no zr_loader_engine_resume(): the engine's retry thread finds it */
        next_batch(&f.g, x2, &ev);
        ck_assert_uint_eq(ev.step, 2);
        zr_loader_free(x2);
        fixture_free(&f);
}
END_TEST

static void gate_task(void *arg) {
        char c;
        ck_assert_int_eq(read(*(int *)arg, &c, 1), 1);
}

/* Two loaders with work: a deep-ring loader of big batches does not keep a
 * loader of small batches waiting until its ring is full: worker time goes one
 * batch per turn. One worker, held by a gate task while both open, so they
 * start together and the order is the scheduler's alone; the engine's fill
 * sequence (fill_seq) tells when the fast loader's fills happened, whatever
 * the test thread's own timing. A FIFO scheduler would finish them at fill
 * SLOW_SLOTS + FAST_SLOTS. */
START_TEST(test_fairness) {
        enum { SLOW_SLOTS = 16, FAST_SLOTS = 4 };
        scratch sc;
        rig g;
        reg big, small;
        zr_loader *slow, *fast;
        zr_loader_counters cs, cf;
        zr_loader_params ps = loader_params(ZR_SAMPLER_IID, 16, 1, SLOW_SLOTS);
        zr_loader_params pf = ps;
        zr_loader_stream sts, stf;
        zr_loader_event ev;
        zr_error err = {0};
        int gate[2];

        scratch_new(&sc);
        rig_new(&g, 1, 0);
        reg_init(&big, make_dense(&sc, "b", 64, 256 << 10, ZR_CODEC_RAW, g.pool, 9));
        reg_init(&small, make_dense(&sc, "s", 64, 64, ZR_CODEC_RAW, g.pool, 8));
        sts = reg_stream(&big, "b");
        stf = reg_stream(&small, "s");
        pf.prefetch = FAST_SLOTS;
        ck_assert_int_eq(pipe(gate), 0);
        ck_assert_int_eq(zr_pool_submit(g.pool, gate_task, &gate[0]), 0);
        ck_assert_int_eq(zr_loader_new(g.e, &sts, 1, &ps, NULL, &slow, &err), 0);
        ck_assert_int_eq(zr_loader_new(g.e, &stf, 1, &pf, NULL, &fast, &err), 0);
        ck_assert_int_eq(write(gate[1], "x", 1), 1);
        for (int k = 0; k < FAST_SLOTS; k++) {
                next_batch(&g, fast, &ev);
                ck_assert_uint_eq(ev.step, (uint64_t)k);
        }
        zr_loader_counters_get(slow, &cs);
        zr_loader_counters_get(fast, &cf);
        fprintf(stderr, "fairness: the fast loader's %d fills were done by fill %" PRIu64
                " of the engine (the slow loader has %d slots; now %" PRIu64 " gathered)\n",
                FAST_SLOTS, cf.fill_seq, SLOW_SLOTS, cs.gathers);
        /* round-robin: slow, fast, slow, fast, ... (the slow loader may have
         * claimed one more turn before the fast one opened) */
        ck_assert_uint_le(cf.fill_seq, 2 * FAST_SLOTS + 1);
        /* and the slow one progresses too */
        next_batch(&g, slow, &ev);
        ck_assert_uint_eq(ev.step, 0);
        zr_loader_free(slow);
        zr_loader_free(fast);
        close(gate[0]);
        close(gate[1]);
        rig_free(&g);
        reg_fini(&big);
        reg_fini(&small);
        scratch_free(&sc);
}
END_TEST

/* Freeing loaders with gathers in flight, events uncollected, and group
 * members copying from them. */
START_TEST(test_free_in_flight) {
        scratch sc;
        rig g;
        reg big;
        zr_loader_params p = loader_params(ZR_SAMPLER_IID, 32, 1, 4);
        zr_loader_stream st;
        zr_loader_event ev;
        zr_error err = {0};

        scratch_new(&sc);
        rig_new(&g, 2, 8 << 20);
        reg_init(&big, make_dense(&sc, "b", 128, 32 << 10, ZR_CODEC_ZSTD, g.pool, 9));
        st = reg_stream(&big, "b");
        for (int round = 0; round < 20; round++) {
                zr_loader *l[3];
                for (int i = 0; i < 3; i++)
                        ck_assert_int_eq(zr_loader_new(g.e, &st, 1, &p, NULL, &l[i], &err), 0);
                if (round % 2) {
                        next_batch(&g, l[1], &ev);
                        zr_loader_release(l[1], ev.ring, ev.slot, NULL);
                }
                zr_loader_free(l[round % 3]);
                next_batch(&g, l[(round + 1) % 3], &ev);
                ck_assert_uint_eq(ev.step, round % 2 && (round + 1) % 3 == 1 ? 1 : 0);
                zr_loader_free(l[(round + 1) % 3]);
                zr_loader_free(l[(round + 2) % 3]);
        }
        rig_free(&g);
        reg_fini(&big);
        scratch_free(&sc);
}
END_TEST

/* Closing never waits for a worker: a loader closed while its gather runs is
 * left to the engine, which gives back its userdata once that gather ended;
 * its dataset stays in use until then (ASan sees a use after it). */
START_TEST(test_close_in_flight) {
        scratch sc;
        rig g;
        reg big;
        zr_loader_params p = loader_params(ZR_SAMPLER_IID, 64, 1, 4);
        zr_loader_stream st;
        zr_error err = {0};
        int tag = 0, left = 0, rounds = 0;

        scratch_new(&sc);
        rig_new(&g, 2, 0);
        reg_init(&big, make_dense(&sc, "b", 256, 64 << 10, ZR_CODEC_ZSTD, g.pool, 9));
        st = reg_stream(&big, "b");
        /* a close right after the first batch finds the next slot's gather
         * running, as a rule: until three did (a bound on the tries) */
        for (; rounds < 200 && left < 3; rounds++) {
                zr_loader *l;
                zr_loader_event ev;
                void *gone = NULL;
                ck_assert_int_eq(zr_loader_new(g.e, &st, 1, &p, &tag, &l, &err), 0);
                ck_assert_uint_gt(zr_loader_work_bytes(l), 64 * 8);
                next_batch(&g, l, &ev);
                if (zr_loader_close(l))
                        continue;
                left++;
                ck_assert_int_eq(zr_loader_engine_wait_gone(g.e), 1);
                ck_assert_int_eq(zr_loader_engine_gone(g.e, &gone), 1);
                ck_assert_ptr_eq(gone, &tag);
                ck_assert_int_eq(zr_loader_engine_gone(g.e, &gone), 0);
                ck_assert_int_eq(zr_loader_engine_wait_gone(g.e), 0);
        }
        printf("close in flight: %d of %d closes left a gather running\n", left, rounds);
        ck_assert_int_eq(left, 3);
        rig_free(&g);
        reg_fini(&big);
        scratch_free(&sc);
}
END_TEST

/* A loader whose working memory is over work_bytes_max is refused before any
 * of it is allocated, naming the limit. */
START_TEST(test_work_bytes_max) {
        scratch sc;
        rig g;
        reg r;
        zr_loader_params p = loader_params(ZR_SAMPLER_CYCLIC, 64, 1, 4);
        zr_loader_stream st;
        zr_loader *l = NULL;
        zr_error err = {0};
        uint64_t need;

        scratch_new(&sc);
        rig_new(&g, 2, 0);
        reg_init(&r, make_dense(&sc, "w", 128, 64, ZR_CODEC_RAW, g.pool, 3));
        st = reg_stream(&r, "w");
        ck_assert_int_eq(zr_loader_new(g.e, &st, 1, &p, NULL, &l, &err), 0);
        need = zr_loader_work_bytes(l);
        zr_loader_free(l);
        p.work_bytes_max = need;
        ck_assert_int_eq(zr_loader_new(g.e, &st, 1, &p, NULL, &l, &err), 0);
        zr_loader_free(l);
        p.work_bytes_max = need - 1;
        ck_assert_int_eq(zr_loader_new(g.e, &st, 1, &p, NULL, &l, &err), -ZR_E_LIMIT);
        ck_assert_ptr_nonnull(strstr(err.message, "max-work-mem-per-uid"));
        rig_free(&g);
        reg_fini(&r);
        scratch_free(&sc);
}
END_TEST

/* A task that posts a semaphore: with one worker, every task queued before it
 * has run when it has. */
static void post_task(void *arg) {
        sem_post(arg);
}

/* A loader opened paused gathers nothing and has no event until started;
 * then its batches come from its first step. */
START_TEST(test_paused_until_started) {
        scratch sc;
        rig g;
        reg r;
        zr_loader_params p = loader_params(ZR_SAMPLER_SEQUENTIAL, 8, 1, 4);
        zr_loader_stream st;
        zr_loader_engine_counters c;
        zr_loader_event ev;
        zr_loader *l, *any;
        zr_error err = {0};

        scratch_new(&sc);
        sem_t done;

        sem_init(&done, 0, 0);
        rig_new(&g, 1, 0);
        reg_init(&r, make_dense(&sc, "p", 64, 64, ZR_CODEC_RAW, g.pool, 5));
        st = reg_stream(&r, "p");
        p.paused = 1;
        ck_assert_int_eq(zr_loader_new(g.e, &st, 1, &p, NULL, &l, &err), 0);
        /* a drain task it had queued would have run before this one (one
         * worker, in order), and gathered its first batch */
        ck_assert_int_eq(zr_pool_submit(g.pool, post_task, &done), 0);
        sem_wait(&done);
        zr_loader_engine_counters_get(g.e, &c);
        ck_assert_uint_eq(c.gathers, 0);
        ck_assert_int_eq(zr_loader_engine_next(g.e, &any), 0);
        ck_assert_int_eq(zr_loader_poll(l, &ev), 0);
        zr_loader_start(l);
        next_batch(&g, l, &ev);
        ck_assert_uint_eq(ev.step, 0);
        zr_loader_free(l);
        rig_free(&g);
        reg_fini(&r);
        scratch_free(&sc);
        sem_destroy(&done);
}
END_TEST

int main(void) {
        Suite *s = suite_create("loader-engine");
        /* 300 s per test: check names a hung test before meson ends the suite */
        TL_TCASE(s, "loader-engine", 300, test_cache_accounting, test_stale, test_locked_dataset, test_free_parked, test_fairness, test_free_in_flight, test_close_in_flight, test_work_bytes_max, test_paused_until_started);
        return tl_run_suite(s);
}
