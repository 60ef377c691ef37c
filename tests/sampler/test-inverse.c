/* test-inverse.c: which steps saw a record. For random (mode,
 * seed, n, B, W, steps, record), plain and mixed, the answer holds a (step, rank,
 * position) exactly when that step's batch holds the record there, in ascending
 * order; far steps are checked against the batches they name; a range walked
 * in the pieces of a budget gives what one walk gives; refusals, a
 * callback's stop and progress reports. Random cases come from a fixed generator. */
#include <check.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check-run.h"
#include "sampler/feistel.h"
#include "sampler/inverse.h"
#include "sampler/lxperm.h"
#include "sampler/rng.h"

#define TEST_MAX_HITS  20000
#define TEST_MAX_BATCH 512

#define TEST_EQ(a, b) do { if ((a) != (b)) ck_assert_uint_eq((a), (b)); } while (0)

static uint64_t test_state = 0x1a7e;
static uint64_t test_rand(uint64_t below) {
        test_state += ZR_RNG_GAMMA;
        return zr_rng_mix64(test_state) % below;
}

typedef struct test_hits {
        zr_sampler_hit h[TEST_MAX_HITS];
        size_t count;
        unsigned calls;
        int stop_after; /* stop (return 5) once this many hits arrived; 0: never */
        int count_only; /* count the hits, keep none */
        uint64_t last_done, last_total;
        unsigned progress, cancel_progress;
} test_hits;

static test_hits test_got, test_want;

static int test_on_hits(void *userdata, const zr_sampler_hit *hits, size_t count) {
        test_hits *t = userdata;

        ck_assert_uint_gt(count, 0);
        t->calls++;
        if (t->count_only) {
                t->count += count;
                return 0;
        }
        for (size_t i = 0; i < count; i++) {
                ck_assert_uint_lt(t->count, TEST_MAX_HITS);
                t->h[t->count++] = hits[i];
        }
        return t->stop_after && t->count >= (size_t)t->stop_after ? 5 : 0;
}

static int test_on_progress(void *userdata, uint64_t done, uint64_t total) {
        test_hits *t = userdata;

        ck_assert_uint_le(done, total);
        ck_assert_uint_ge(done, t->last_done);
        t->last_done = done;
        t->last_total = total;
        t->progress++;
        return t->cancel_progress && t->progress >= t->cancel_progress ? -ECANCELED : 0;
}

static void test_reset(test_hits *t) {
        memset(t, 0, sizeof(*t));
}

static void test_same(const test_hits *got, const test_hits *want, const char *what) {
        if (got->count != want->count)
                ck_abort_msg("%s: %zu hits, brute force %zu", what, got->count, want->count);
        for (size_t i = 0; i < got->count; i++)
                if (got->h[i].step != want->h[i].step || got->h[i].rank != want->h[i].rank ||
                    got->h[i].position != want->h[i].position)
                        ck_abort_msg("%s: hit %zu is (%lu, %u, %lu), brute force (%lu, %u, %lu)", what, i,
                                     (unsigned long)got->h[i].step, got->h[i].rank,
                                     (unsigned long)got->h[i].position, (unsigned long)want->h[i].step,
                                     want->h[i].rank, (unsigned long)want->h[i].position);
}

static void test_add(test_hits *t, uint64_t step, uint32_t rank, uint64_t j) {
        ck_assert_uint_lt(t->count, TEST_MAX_HITS);
        t->h[t->count++] = (zr_sampler_hit){ .step = step, .rank = rank, .position = j };
}

/* The hits of `record` found by computing every batch of [start, stop). */
static void test_brute_plain(zr_sampler_params p, uint64_t record, uint64_t start, uint64_t stop,
                             test_hits *t) {
        static uint64_t idx[TEST_MAX_BATCH];

        test_reset(t);
        for (uint64_t s = start; s < stop; s++)
                for (uint32_t r = 0; r < p.world_size; r++) {
                        p.step = s;
                        p.rank = r;
                        ck_assert_int_eq(zr_sampler_indices(&p, idx, NULL), 0);
                        for (uint64_t j = 0; j < p.batch_size; j++)
                                if (idx[j] == record)
                                        test_add(t, s, r, j);
                }
}

START_TEST(test_plain_property) {
        zr_steps_of_ops ops = { .on_hits = test_on_hits, .on_progress = test_on_progress, .userdata = &test_got };

        for (unsigned c = 0; c < 1200; c++) {
                zr_sampler_params p = { .mode = (enum zr_sampler_mode)(c % _ZR_SAMPLER_MODE_MAX),
                                        .seed = test_rand(UINT64_MAX), .world_size = 1 + (uint32_t)test_rand(4) };
                uint64_t start, stop, record;
                zr_error err = {0};
                char what[128];

                p.batch_size = 1 + test_rand(c % 7 ? 12 : 100);
                p.n = 1 + test_rand(c % 5 ? 80 : 4000);
                if ((p.mode == ZR_SAMPLER_CYCLIC || p.mode == ZR_SAMPLER_CYCLIC_LX157) &&
                    p.n < p.batch_size * p.world_size)
                        p.n = p.batch_size * p.world_size + test_rand(20);
                /* mostly near 0; sometimes far, where no step is special */
                start = c % 9 == 0 ? UINT64_MAX - 100 - test_rand(1000) : c % 4 == 0 ? test_rand(UINT64_C(1) << 62)
                                                                                    : test_rand(40);
                stop = start + test_rand(60);
                record = test_rand(p.n);
                test_brute_plain(p, record, start, stop, &test_want);
                test_reset(&test_got);
                ck_assert_int_eq(zr_sampler_steps_of(&p, record, start, stop, &ops, &err), 0);
                snprintf(what, sizeof(what), "case %u %s n=%lu B=%lu W=%u steps [%lu, %lu) record %lu", c,
                         zr_sampler_mode_name(p.mode), (unsigned long)p.n, (unsigned long)p.batch_size,
                         p.world_size, (unsigned long)start, (unsigned long)stop, (unsigned long)record);
                test_same(&test_got, &test_want, what);
        }
}
END_TEST

static zr_mixture test_m;

static void test_brute_mixture(uint32_t source, uint64_t record, uint64_t start, uint64_t stop, test_hits *t) {
        static uint64_t idx[TEST_MAX_BATCH];
        static uint32_t src[TEST_MAX_BATCH];

        test_reset(t);
        for (uint64_t s = start; s < stop && s <= test_m.last_step; s++)
                for (uint32_t r = 0; r < test_m.world_size; r++) {
                        ck_assert_int_eq(zr_mixture_batch(&test_m, s, r, src, idx, NULL), 0);
                        for (uint64_t j = 0; j < test_m.batch_size; j++)
                                if (src[j] == source && idx[j] == record)
                                        test_add(t, s, r, j);
                }
}

START_TEST(test_mixture_property) {
        zr_steps_of_ops ops = { .on_hits = test_on_hits, .on_progress = test_on_progress, .userdata = &test_got };
        zr_mixture_source s[6];

        for (unsigned c = 0; c < 800; c++) {
                uint32_t k = 1 + (uint32_t)test_rand(6), w = 1 + (uint32_t)test_rand(3), source;
                uint64_t b = 1 + test_rand(c % 6 ? 10 : 60), start, stop, record;
                zr_error err = {0};
                char what[160];

                for (uint32_t i = 0; i < k; i++)
                        s[i] = (zr_mixture_source){ .mode = (enum zr_sampler_mode)test_rand(_ZR_SAMPLER_MODE_MAX),
                                                    .n = 1 + test_rand(c % 4 ? 40 : 3),
                                                    .weight = (uint32_t)(1 + test_rand(c % 3 ? 10 : 1000)) };
                ck_assert_int_eq(zr_mixture_init(&test_m, s, k, b, w, test_rand(UINT64_MAX), NULL), 0);
                start = c % 10 == 0 ? test_m.last_step - test_rand(50) : c % 4 == 0 ? test_rand(UINT64_C(1) << 40)
                                                                                  : test_rand(30);
                stop = c % 10 == 0 ? UINT64_MAX : start + test_rand(60);
                source = (uint32_t)test_rand(k);
                record = test_rand(s[source].n);
                test_brute_mixture(source, record, start, stop, &test_want);
                test_reset(&test_got);
                ck_assert_int_eq(zr_mixture_steps_of(&test_m, source, record, start, stop, &ops, &err), 0);
                snprintf(what, sizeof(what), "case %u K=%u B=%lu W=%u source %u (%s n=%lu w=%u) steps [%lu, %lu) "
                         "record %lu", c, k, (unsigned long)b, w, source, zr_sampler_mode_name(s[source].mode),
                         (unsigned long)s[source].n, s[source].weight, (unsigned long)start,
                         (unsigned long)stop, (unsigned long)record);
                test_same(&test_got, &test_want, what);
        }
}
END_TEST

/* A cyclic range far out, too long to brute-force: every hit names a batch that
 * holds the record there, one per cycle at most, and the cycles that keep the
 * record (all but those that drop its position) are all found. */
START_TEST(test_far_cyclic) {
        zr_steps_of_ops ops = { .on_hits = test_on_hits, .userdata = &test_got };
        zr_sampler_params p = { .mode = ZR_SAMPLER_CYCLIC, .n = 1000003, .batch_size = 100, .seed = 5,
                                .world_size = 3 };
        uint64_t per_cycle = 1000003 / 300, start = (UINT64_C(1) << 62) / per_cycle * per_cycle;
        uint64_t stop = start + 2000 * per_cycle, idx[100];

        for (int m = 0; m < 2; m++) {
                p.mode = m ? ZR_SAMPLER_CYCLIC_LX157 : ZR_SAMPLER_CYCLIC;
                test_reset(&test_got);
                ck_assert_int_eq(zr_sampler_steps_of(&p, 424242, start, stop, &ops, NULL), 0);
                /* each cycle drops 1000003 - 3333 * 300 = 103 of its records */
                ck_assert_uint_gt(test_got.count, 1950);
                ck_assert_uint_le(test_got.count, 2000);
                for (size_t i = 0; i < test_got.count; i++) {
                        p.step = test_got.h[i].step;
                        p.rank = test_got.h[i].rank;
                        ck_assert_int_eq(zr_sampler_indices(&p, idx, NULL), 0);
                        TEST_EQ(idx[test_got.h[i].position], 424242);
                        if (i)
                                ck_assert_uint_gt(p.step / per_cycle, test_got.h[i - 1].step / per_cycle);
                }
        }
}
END_TEST

/* Ranges that end at the last steps, where a cycle (of the sampler or of a
 * mixture's source) runs past step or draw 2^64 - 1: the positions past it are
 * not hits at early steps. Every hit names a batch that holds the record there,
 * hits ascend, and each cycle gives at most one. */
START_TEST(test_last_cycles) {
        zr_steps_of_ops ops = { .on_hits = test_on_hits, .userdata = &test_got };
        /* 3 * 2^62 records, one a step: cycles 0 and 1, the second cut at 2^64 */
        zr_sampler_params p = { .mode = ZR_SAMPLER_CYCLIC, .n = UINT64_C(3) << 62, .batch_size = 1, .seed = 1,
                                .world_size = 1 };
        uint64_t idx[1];
        uint32_t from[1];

        for (int m = 0; m < 2; m++) {
                p.mode = m ? ZR_SAMPLER_CYCLIC_LX157 : ZR_SAMPLER_CYCLIC;
                for (uint64_t record = 0; record < 16; record++) {
                        test_reset(&test_got);
                        ck_assert_int_eq(zr_sampler_steps_of(&p, record, 0, UINT64_MAX, &ops, NULL), 0);
                        ck_assert_uint_ge(test_got.count, 1);
                        ck_assert_uint_le(test_got.count, 2);
                        for (size_t i = 0; i < test_got.count; i++) {
                                p.step = test_got.h[i].step;
                                ck_assert_int_eq(zr_sampler_indices(&p, idx, NULL), 0);
                                TEST_EQ(idx[0], record);
                                if (i)
                                        ck_assert_uint_gt(p.step, test_got.h[i - 1].step);
                        }
                }
        }
        /* a mixture of one source of 3 * 2^62 (each mode but iid), one draw a step:
         * its second cycle runs past draw 2^64 - 1 */
        for (int m = 0; m < 3; m++) {
                static const enum zr_sampler_mode modes[3] = { ZR_SAMPLER_CYCLIC, ZR_SAMPLER_CYCLIC_LX157,
                                                               ZR_SAMPLER_SEQUENTIAL };
                zr_mixture_source one = { modes[m], UINT64_C(3) << 62, 1 };

                ck_assert_int_eq(zr_mixture_init(&test_m, &one, 1, 1, 1, 9, NULL), 0);
                for (uint64_t record = 0; record < 16; record++) {
                        test_reset(&test_got);
                        ck_assert_int_eq(zr_mixture_steps_of(&test_m, 0, record, 0, UINT64_MAX, &ops, NULL), 0);
                        ck_assert_uint_ge(test_got.count, 1);
                        ck_assert_uint_le(test_got.count, 2);
                        for (size_t i = 0; i < test_got.count; i++) {
                                ck_assert_int_eq(zr_mixture_batch(&test_m, test_got.h[i].step, test_got.h[i].rank,
                                                                  from, idx, NULL), 0);
                                TEST_EQ(from[0], 0);
                                TEST_EQ(idx[0], record);
                                if (i)
                                        ck_assert_uint_gt(test_got.h[i].step, test_got.h[i - 1].step);
                        }
                }
        }
}
END_TEST

/* A range walked in pieces (the cuts of a small budget) gives exactly the
 * hits of one walk; each piece is within its budget unless it is one step,
 * and the pieces move forward to stop. */
START_TEST(test_pieces) {
        zr_steps_of_ops ops = { .on_hits = test_on_hits, .userdata = &test_got };
        zr_steps_of_ops whole = { .on_hits = test_on_hits, .userdata = &test_want };
        zr_mixture_source s[4];

        for (unsigned c = 0; c < 600; c++) {
                uint64_t max_scan = 1 + test_rand(200), max_cycles = 1 + test_rand(3);
                uint64_t start = test_rand(c % 5 ? 50 : UINT64_C(1) << 50), stop = start + 1 + test_rand(80);
                char what[128];

                if (c % 2 == 0) {
                        zr_sampler_params p = { .mode = (enum zr_sampler_mode)test_rand(_ZR_SAMPLER_MODE_MAX),
                                                .seed = test_rand(UINT64_MAX), .batch_size = 1 + test_rand(9),
                                                .world_size = 1 + (uint32_t)test_rand(3) };
                        uint64_t g = p.batch_size * p.world_size, record;

                        p.n = g + test_rand(60);
                        record = test_rand(p.n);
                        test_reset(&test_want);
                        ck_assert_int_eq(zr_sampler_steps_of(&p, record, start, stop, &whole, NULL), 0);
                        test_reset(&test_got);
                        for (uint64_t at = start; at < stop;) {
                                uint64_t cut = zr_sampler_steps_of_cut(&p, at, stop, max_scan, max_cycles);

                                ck_assert_uint_gt(cut, at);
                                ck_assert_uint_le(cut, stop);
                                if (p.mode == ZR_SAMPLER_IID && cut - at > 1)
                                        ck_assert_uint_le((cut - at) * g, max_scan);
                                if ((p.mode == ZR_SAMPLER_CYCLIC || p.mode == ZR_SAMPLER_CYCLIC_LX157) &&
                                    cut < stop)
                                        TEST_EQ((cut - 1) / (p.n / g) - at / (p.n / g) + 1, max_cycles);
                                ck_assert_int_eq(zr_sampler_steps_of(&p, record, at, cut, &ops, NULL), 0);
                                at = cut;
                        }
                        snprintf(what, sizeof(what), "pieces %u %s", c, zr_sampler_mode_name(p.mode));
                } else {
                        uint32_t k = 1 + (uint32_t)test_rand(4), source = (uint32_t)test_rand(k);
                        uint64_t b = 1 + test_rand(8), record;

                        for (uint32_t i = 0; i < k; i++)
                                s[i] = (zr_mixture_source){ .mode = (enum zr_sampler_mode)test_rand(_ZR_SAMPLER_MODE_MAX),
                                                            .n = 1 + test_rand(30),
                                                            .weight = (uint32_t)(1 + test_rand(9)) };
                        ck_assert_int_eq(zr_mixture_init(&test_m, s, k, b, 1 + (uint32_t)test_rand(2),
                                                         test_rand(UINT64_MAX), NULL), 0);
                        record = test_rand(s[source].n);
                        test_reset(&test_want);
                        ck_assert_int_eq(zr_mixture_steps_of(&test_m, source, record, start, stop, &whole, NULL), 0);
                        test_reset(&test_got);
                        for (uint64_t at = start; at < stop;) {
                                uint64_t cut = zr_mixture_steps_of_cut(&test_m, source, at, stop, max_scan,
                                                                       max_cycles);
                                uint64_t draws = zr_mixture_draws_before(&test_m, source, cut) -
                                                 zr_mixture_draws_before(&test_m, source, at);

                                ck_assert_uint_gt(cut, at);
                                ck_assert_uint_le(cut, stop);
                                if (s[source].mode == ZR_SAMPLER_IID && cut - at > 1)
                                        ck_assert_uint_le(draws, max_scan);
                                if (s[source].mode != ZR_SAMPLER_IID && s[source].mode != ZR_SAMPLER_SEQUENTIAL &&
                                    cut - at > 1)
                                        ck_assert_uint_le(draws, max_cycles * s[source].n);
                                ck_assert_int_eq(zr_mixture_steps_of(&test_m, source, record, at, cut, &ops, NULL), 0);
                                at = cut;
                        }
                        snprintf(what, sizeof(what), "pieces %u mixture source %s", c,
                                 zr_sampler_mode_name(s[source].mode));
                }
                test_same(&test_got, &test_want, what);
        }
}
END_TEST

START_TEST(test_refusals_and_stops) {
        zr_steps_of_ops ops = { .on_hits = test_on_hits, .on_progress = test_on_progress, .userdata = &test_got };
        zr_sampler_params p = { .mode = ZR_SAMPLER_IID, .n = 10, .batch_size = 100, .seed = 1, .world_size = 2 };
        zr_mixture_source s[2] = { { ZR_SAMPLER_IID, 10, 1 }, { ZR_SAMPLER_CYCLIC, 10, 1 } };
        zr_error err = {0};

        ck_assert_int_eq(zr_sampler_steps_of(&p, 10, 0, 5, &ops, &err), -ZR_E_SAMPLER);
        ck_assert_ptr_nonnull(strstr(err.message, "record 10 >= n = 10"));
        zr_error_clear(&err);
        /* a scan above its limit is refused before it starts, and says why */
        ops.scan_limit = 1000;
        test_reset(&test_got);
        ck_assert_int_eq(zr_sampler_steps_of(&p, 3, 0, 6, &ops, &err), -ZR_E_SAMPLER);
        ck_assert_ptr_nonnull(strstr(err.message, "iid has no inverse but a scan"));
        ck_assert_uint_eq(test_got.count, 0);
        zr_error_clear(&err);
        ck_assert_int_eq(zr_sampler_steps_of(&p, 3, 0, 5, &ops, &err), 0);
        ck_assert_uint_gt(test_got.count, 50);
        ops.scan_limit = 0;
        /* a callback's nonzero value stops the walk and is returned */
        test_reset(&test_got);
        test_got.stop_after = 3;
        ck_assert_int_eq(zr_sampler_steps_of(&p, 3, 0, 1000, &ops, NULL), 5);
        ck_assert_uint_eq(test_got.calls, 1);
        /* progress: a long scan reports, ascending, and a nonzero answer stops it */
        test_reset(&test_got);
        test_got.count_only = 1;
        p.batch_size = 1 << 20;
        ck_assert_int_eq(zr_sampler_steps_of(&p, 3, 0, 8, &ops, NULL), 0);
        ck_assert_uint_gt(test_got.count, 1500000); /* 2^24 positions over n = 10 */
        ck_assert_uint_lt(test_got.count, 1850000);
        ck_assert_uint_ge(test_got.progress, 3);
        ck_assert_uint_eq(test_got.last_total, UINT64_C(16) << 20);
        test_reset(&test_got);
        test_got.count_only = 1;
        test_got.cancel_progress = 2;
        ck_assert_int_eq(zr_sampler_steps_of(&p, 3, 0, 8, &ops, NULL), -ECANCELED);
        ck_assert_uint_lt(test_got.last_done, test_got.last_total);
        /* cyclic reports every 2^16 cycles */
        p = (zr_sampler_params){ .mode = ZR_SAMPLER_CYCLIC, .n = 100, .batch_size = 50, .world_size = 2 };
        test_reset(&test_got);
        test_got.count_only = 1;
        ck_assert_int_eq(zr_sampler_steps_of(&p, 3, 0, 200000, &ops, NULL), 0);
        ck_assert_uint_eq(test_got.progress, 3);
        ck_assert_uint_eq(test_got.count, 200000);
        /* mixtures: source and record checked, iid sources scan their own draws only */
        ck_assert_int_eq(zr_mixture_init(&test_m, s, 2, 64, 1, 3, NULL), 0);
        ck_assert_int_eq(zr_mixture_steps_of(&test_m, 2, 0, 0, 10, &ops, &err), -ZR_E_SAMPLER);
        ck_assert_ptr_nonnull(strstr(err.message, "source 2 of a mixture of 2"));
        zr_error_clear(&err);
        ck_assert_int_eq(zr_mixture_steps_of(&test_m, 1, 10, 0, 10, &ops, &err), -ZR_E_SAMPLER);
        ck_assert_ptr_nonnull(strstr(err.message, "source 1: record 10 >= n = 10"));
        zr_error_clear(&err);
        ops.scan_limit = 320; /* steps [0, 10) draw 320 records of source 0 */
        ck_assert_int_eq(zr_mixture_steps_of(&test_m, 0, 4, 0, 10, &ops, &err), 0);
        ck_assert_int_eq(zr_mixture_steps_of(&test_m, 0, 4, 0, 11, &ops, &err), -ZR_E_SAMPLER);
        ck_assert_ptr_nonnull(strstr(err.message, "source 0 draws 352 records"));
        /* an empty range is no error */
        ck_assert_int_eq(zr_mixture_steps_of(&test_m, 0, 4, 10, 10, &ops, NULL), 0);
        ck_assert_int_eq(zr_mixture_steps_of(&test_m, 0, 4, UINT64_MAX, UINT64_MAX, &ops, NULL), 0);
}
END_TEST

int main(void) {
        Suite *s = suite_create("inverse");
        TL_TCASE(s, "core", 0, test_plain_property,
                 test_mixture_property, test_far_cyclic, test_last_cycles, test_pieces,
                 test_refusals_and_stops);
        return tl_run_suite(s);
}
