/* test-loader-telemetry.c: what the engine counts into a loader's telemetry
 * (loader.h, zr_loader_telemetry_get()): every batch announced and its bytes,
 * the client's reports checked (a wait never past the loader's age, a take
 * outside (announcement, now] ignored), gathers timed by stage, waits for a
 * worker counted only while another loader's work holds it, and nothing at
 * all with telemetry off. */
#include "helpers.h"
#include "util.h"

static zr_loader_telemetry *tel_of(zr_loader *l) {
        static zr_loader_telemetry t;
        zr_loader_telemetry_get(l, zr_loader_now_ns(), &t);
        return &t;
}

/* Takes l's next batch and gives it back with `take` (NULL: no report). */
static void take_one(rig *g, zr_loader *l, const zr_loader_take *take) {
        zr_loader_event ev;
        next_batch(g, l, &ev);
        zr_error err = {0};
        ck_assert_int_eq(zr_loader_release_report(l, ev.ring, ev.slot, take, &err), 0);
}

START_TEST(test_counts_batches_and_stages) {
        fixture f;
        fixture_new(&f, ZR_CODEC_ZSTD, 0); /* no cache: every record decoded */
        zr_loader_stream st = reg_stream(&f.dense, "d");
        zr_loader_params p = { .mode = ZR_SAMPLER_IID, .batch_size = 32, .seed = 3,
                               .world_size = 1, .prefetch = 4 };
        zr_loader *l = open_loader(&f, &st, 1, &p);
        for (int i = 0; i < 20; i++) {
                zr_loader_event ev;
                next_batch(&f.g, l, &ev);
                uint64_t ann = zr_loader_now_ns(); /* after the announcement */
                zr_loader_take tk = { .has_wait = 1, .wait_ns = 1000, .has_taken = 1,
                                      .taken_ns = ann };
                ck_assert_int_eq(zr_loader_release_report(l, ev.ring, ev.slot, &tk, NULL), 0);
        }
        const zr_loader_telemetry *t = tel_of(l);
        const uint64_t *v = t->total.v;
        ck_assert_uint_eq(v[ZR_TEL_BATCHES], 20);
        ck_assert_uint_eq(v[ZR_TEL_BYTES], 20 * 32 * ITEM);
        ck_assert_uint_eq(v[ZR_TEL_WAITS], 20);
        ck_assert_uint_eq(v[ZR_TEL_WAIT_NS], 20 * 1000);
        ck_assert_uint_eq(v[ZR_TEL_READIES], 20);
        ck_assert_uint_gt(v[ZR_TEL_READY_NS], 0);
        /* at least the announced ones were gathered, the others ahead of them */
        ck_assert_uint_ge(v[ZR_TEL_FILLS], 20);
        ck_assert_uint_le(v[ZR_TEL_FILLS], 20 + 4);
        /* no cache: every record a miss but a repeat of a record drawn earlier in
         * its batch (iid), which is decoded once and counted a hit */
        ck_assert_uint_eq(v[ZR_TEL_MISSES] + v[ZR_TEL_HITS], v[ZR_TEL_FILLS] * 32);
        ck_assert_uint_gt(v[ZR_TEL_MISSES], v[ZR_TEL_HITS] * 4);
        ck_assert_uint_gt(v[ZR_TEL_DECODE_NS], 0);
        ck_assert_uint_gt(v[ZR_TEL_LOOKUP_NS], 0);
        ck_assert_uint_le(v[ZR_TEL_LOOKUP_NS] + v[ZR_TEL_READ_NS] + v[ZR_TEL_DECODE_NS] +
                                  v[ZR_TEL_COPY_NS],
                          v[ZR_TEL_FILL_NS]);
        /* alone in its engine: it never waits for another loader's work */
        ck_assert_uint_eq(v[ZR_TEL_QUEUE_NS], 0);
        ck_assert_uint_eq(t->wait.samples, 20);
        ck_assert_uint_ge(t->fill.samples, 20);
        /* a bucket's midpoint: within 12.5 % of 1000 ns */
        ck_assert_uint_le(zr_latency_quantile(&t->wait, 0.5), 1125);
        ck_assert_uint_ge(zr_latency_quantile(&t->wait, 0.5), 875);
        ck_assert_int_eq(t->reports, 1);
        ck_assert_uint_le(t->age_ns, t->total.span_ns);
        zr_loader_free(l);
        fixture_free(&f);
}
END_TEST

START_TEST(test_reports_are_checked) {
        fixture f;
        fixture_new(&f, ZR_CODEC_RAW, 0);
        zr_loader_stream st = reg_stream(&f.dense, "d");
        zr_loader_params p = { .mode = ZR_SAMPLER_SEQUENTIAL, .batch_size = 8, .world_size = 1,
                               .prefetch = 2 };
        zr_loader *l = open_loader(&f, &st, 1, &p);
        /* a wait of 10^18 ns: at most the loader's age, all waits together */
        zr_loader_take huge = { .has_wait = 1, .wait_ns = UINT64_MAX / 2 };
        take_one(&f.g, l, &huge);
        take_one(&f.g, l, &huge);
        const zr_loader_telemetry *t = tel_of(l);
        ck_assert_uint_eq(t->total.v[ZR_TEL_WAITS], 2);
        ck_assert_uint_le(t->total.v[ZR_TEL_WAIT_NS], t->age_ns);
        ck_assert_uint_gt(t->total.v[ZR_TEL_WAIT_NS], 0);
        /* a take before the announcement, or after now: another clock, ignored */
        zr_loader_take early = { .has_taken = 1, .taken_ns = 1 };
        zr_loader_take late = { .has_taken = 1, .taken_ns = UINT64_MAX };
        take_one(&f.g, l, &early);
        take_one(&f.g, l, &late);
        ck_assert_uint_eq(tel_of(l)->total.v[ZR_TEL_READIES], 0);
        /* no report at all: the batch counts, no wait does */
        take_one(&f.g, l, NULL);
        t = tel_of(l);
        ck_assert_uint_eq(t->total.v[ZR_TEL_BATCHES], 5);
        ck_assert_uint_eq(t->total.v[ZR_TEL_WAITS], 2);
        zr_loader_free(l);

        /* telemetry off: a loader keeps none (the engine's switch) */
        zr_loader_engine_set_telemetry(f.g.e, 0);
        l = open_loader(&f, &st, 1, &p);
        zr_loader_take tk = { .has_wait = 1, .wait_ns = 5, .has_taken = 1 };
        for (int i = 0; i < 4; i++) {
                tk.taken_ns = zr_loader_now_ns();
                take_one(&f.g, l, &tk);
        }
        t = tel_of(l);
        for (unsigned c = 0; c < ZR_TEL_N; c++)
                ck_assert_uint_eq(t->total.v[c], 0);
        ck_assert_int_eq(t->verdict, ZR_VERDICT_IDLE);
        zr_loader_free(l);
        fixture_free(&f);
}
END_TEST

/* One worker, two busy loaders: each waits for the other's gathers, and says
 * so; neither counts the waits for its own. */
START_TEST(test_waiting_for_others_is_contention) {
        scratch sc;
        rig g;
        scratch_new(&sc);
        rig_new(&g, 1, 0);
        reg big;
        reg_init(&big, make_dense(&sc, "big", 64, 65536, ZR_CODEC_ZSTD, g.pool, 9));
        zr_loader_stream st = reg_stream(&big, "big");
        zr_loader_params p = { .mode = ZR_SAMPLER_IID, .batch_size = 32, .world_size = 1,
                               .prefetch = 2 };
        zr_loader *l[2];
        zr_error err = {0};
        for (int i = 0; i < 2; i++) {
                p.seed = 100 + (uint64_t)i; /* two groups: no work shared */
                ck_assert_int_eq(zr_loader_new(g.e, &st, 1, &p, NULL, &l[i], &err), 0);
        }
        zr_loader_take tk = { .has_wait = 1 };
        for (int k = 0; k < 20; k++)
                for (int i = 0; i < 2; i++)
                        take_one(&g, l[i], &tk);
        for (int i = 0; i < 2; i++) {
                const zr_loader_telemetry *t = tel_of(l[i]);
                ck_assert_uint_gt(t->total.v[ZR_TEL_QUEUE_NS], 0);
                ck_assert_uint_gt(t->total.v[ZR_TEL_DECODE_NS], 0);
        }
        for (int i = 0; i < 2; i++)
                zr_loader_free(l[i]);
        rig_free(&g);
        reg_fini(&big);
        scratch_free(&sc);
}
END_TEST

TL_SUITE_MAIN("loader-telemetry", test_counts_batches_and_stages, test_reports_are_checked,
              test_waiting_for_others_is_contention)
