/* test-mixture.c: mixtures of sources. Refusals name the source and the value;
 * every step's counts are non-negative, sum to the global batch and stay within
 * the tree's bound of the weights; a step's batch, over all ranks, is exactly
 * each source's next draws from its own stream; sources interleave; ranks slice
 * one global batch (elastic across world sizes); streams are the plain samplers
 * under the source's seed; far steps up to the last one; the check values of
 * proto/SAMPLERS.md. Random cases come from a fixed generator: every run checks
 * the same ones. */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check-run.h"
#include "sampler/mixture.h"
#include "sampler/rng.h"

#define TEST_MAX_GLOBAL 4096

#define TEST_EQ(a, b) do { if ((a) != (b)) ck_assert_uint_eq((a), (b)); } while (0)

static zr_mixture test_m;
static uint32_t test_src[TEST_MAX_GLOBAL], test_src2[TEST_MAX_GLOBAL];
static uint64_t test_idx[TEST_MAX_GLOBAL], test_idx2[TEST_MAX_GLOBAL], test_want[TEST_MAX_GLOBAL];

/* A fixed sequence of test parameters (SplitMix64 over a counter). */
static uint64_t test_state = 0x5eed;
static uint64_t test_rand(uint64_t below) {
        test_state += ZR_RNG_GAMMA;
        return zr_rng_mix64(test_state) % below;
}

/* K random sources of every mode, lengths 1..max_n, weights 1..max_w. */
static void test_random_sources(zr_mixture_source *s, uint32_t k, uint64_t max_n, uint32_t max_w) {
        for (uint32_t i = 0; i < k; i++)
                s[i] = (zr_mixture_source){ .mode = (enum zr_sampler_mode)test_rand(_ZR_SAMPLER_MODE_MAX),
                                            .n = 1 + test_rand(max_n),
                                            .weight = (uint32_t)(1 + test_rand(max_w)) };
}

static void test_refused(int r, zr_error *err, const char *needle) {
        ck_assert_int_eq(r, -ZR_E_SAMPLER);
        ck_assert_int_eq(err->code, ZR_E_SAMPLER);
        ck_assert_msg(strstr(err->message, needle), "'%s' lacks '%s'", err->message, needle);
        zr_error_clear(err);
}

START_TEST(test_errors) {
        zr_mixture_source s[ZR_MIXTURE_MAX_SOURCES + 1];
        zr_error err = {0};

        for (uint32_t i = 0; i <= ZR_MIXTURE_MAX_SOURCES; i++)
                s[i] = (zr_mixture_source){ .mode = ZR_SAMPLER_CYCLIC, .n = 100, .weight = 1 };
        test_refused(zr_mixture_init(&test_m, s, 0, 4, 1, 0, &err), &err, "at least one source");
        test_refused(zr_mixture_init(&test_m, s, ZR_MIXTURE_MAX_SOURCES + 1, 4, 1, 0, &err), &err,
                     "257 sources: at most 256");
        ck_assert_int_eq(zr_mixture_init(&test_m, s, ZR_MIXTURE_MAX_SOURCES, 4, 1, 0, &err), 0);
        s[3].weight = 0;
        test_refused(zr_mixture_init(&test_m, s, 5, 4, 1, 0, &err), &err, "source 3: weight 0");
        s[3].weight = 1;
        s[4].n = 0;
        test_refused(zr_mixture_init(&test_m, s, 5, 4, 1, 0, &err), &err, "source 4: n = 0");
        s[4].n = 100;
        s[1].mode = (enum zr_sampler_mode)9;
        test_refused(zr_mixture_init(&test_m, s, 5, 4, 1, 0, &err), &err, "source 1: sampler mode 9");
        s[1].mode = ZR_SAMPLER_IID;
        test_refused(zr_mixture_init(&test_m, s, 5, 0, 1, 0, &err), &err, "batch_size = 0");
        test_refused(zr_mixture_init(&test_m, s, 5, 4, 0, 0, &err), &err, "world_size = 0");
        test_refused(zr_mixture_init(&test_m, s, 5, UINT64_MAX / 2, 4, 0, &err), &err, "below 2^64 - 1");
        /* a cyclic source needs no n >= G: it is drawn a record at a time */
        s[0].n = 1;
        ck_assert_int_eq(zr_mixture_init(&test_m, s, 5, 64, 4, 0, &err), 0);

        /* rank and step are checked at every call; the output stays untouched */
        test_src[0] = 77;
        test_idx[0] = 77;
        test_refused(zr_mixture_batch(&test_m, 0, 4, test_src, test_idx, &err), &err, "rank 4 >= world_size 4");
        ck_assert_uint_eq(test_m.last_step, UINT64_MAX / 256 - 1);
        test_refused(zr_mixture_batch(&test_m, test_m.last_step + 1, 0, test_src, test_idx, &err), &err,
                     "past its last step");
        ck_assert_uint_eq(test_src[0], 77);
        ck_assert_uint_eq(test_idx[0], 77);
        ck_assert_int_eq(zr_mixture_batch(&test_m, test_m.last_step, 3, test_src, test_idx, &err), 0);
}
END_TEST

/* The bound of the apportionment for source k: (1/2) * sum of w_k / w_A over the
 * nodes A from the leaf up to, not including, the root. */
static double test_bound(const zr_mixture *m, uint32_t k) {
        double b = 0;

        for (uint32_t node = k; node != m->root; node = m->parent[node])
                b += (double)m->weight[k] / (double)m->weight[node];
        return b / 2;
}

/* Every step: counts >= 0, sum G, D_k(s) by the path equals the whole tree's, and
 * |D_k(s) - s G w_k / W| stays within the source's bound, itself below 1.68. */
START_TEST(test_apportionment) {
        zr_mixture_source s[24];
        double worst = 0;

        for (unsigned c = 0; c < 300; c++) {
                uint32_t k = 1 + (uint32_t)test_rand(c < 250 ? 8 : 24);
                uint64_t b = 1 + test_rand(c % 3 ? 64 : 2000), total = 0;
                uint64_t before[24], count[24], after[24];
                uint64_t s0 = c % 5 == 0 ? test_rand(UINT64_C(1) << 40) : 0;

                test_random_sources(s, k, 100, c % 2 ? 10 : 100000);
                ck_assert_int_eq(zr_mixture_init(&test_m, s, k, b, 1, c, NULL), 0);
                for (uint32_t i = 0; i < k; i++)
                        total += s[i].weight;
                for (uint64_t step = s0; step < s0 + 200; step++) {
                        uint64_t sum = 0;

                        ck_assert_int_eq(zr_mixture_counts(&test_m, step, before, count, NULL), 0);
                        ck_assert_int_eq(zr_mixture_counts(&test_m, step + 1, after, count + 0, NULL), 0);
                        ck_assert_int_eq(zr_mixture_counts(&test_m, step, before, count, NULL), 0);
                        for (uint32_t i = 0; i < k; i++) {
                                long double exact = (long double)step * b * s[i].weight / total;
                                double dev = (double)fabsl((long double)before[i] - exact);

                                TEST_EQ(before[i], zr_mixture_draws_before(&test_m, i, step));
                                TEST_EQ(after[i], before[i] + count[i]); /* so count >= 0 */
                                ck_assert(after[i] >= before[i]);
                                sum += count[i];
                                if (dev > test_bound(&test_m, i) + 1e-6)
                                        ck_abort_msg("case %u source %u step %lu: D = %lu is %.4f from %.4Lf, "
                                                     "bound %.4f", c, i, (unsigned long)step,
                                                     (unsigned long)before[i], dev, exact, test_bound(&test_m, i));
                                if (dev > worst)
                                        worst = dev;
                        }
                        TEST_EQ(sum, b);
                }
                for (uint32_t i = 0; i < k; i++)
                        ck_assert(test_bound(&test_m, i) < 1.68);
        }
        ck_assert(worst > 0.5); /* the bound is reached for, not vacuous */
}
END_TEST

/* Two sources are one split of the root: each within 1/2 of its share, and each
 * step's count is the floor or the ceiling of it. */
START_TEST(test_two_sources) {
        zr_mixture_source s[2] = { { ZR_SAMPLER_IID, 10, 7 }, { ZR_SAMPLER_CYCLIC, 10, 3 } };
        uint64_t before[2], count[2];

        ck_assert_int_eq(zr_mixture_init(&test_m, s, 2, 13, 1, 1, NULL), 0);
        for (uint64_t step = 0; step < 1000; step++) {
                ck_assert_int_eq(zr_mixture_counts(&test_m, step, before, count, NULL), 0);
                /* 13 * 3 / 10 = 3.9 per step for source 1 */
                ck_assert(count[1] == 3 || count[1] == 4);
                ck_assert(llabs((long long)(before[1] * 10) - (long long)(step * 39)) <= 5);
        }
}
END_TEST

/* A step over all ranks is each source's next count_k draws, no more, no other:
 * the multiset of (source, index) of the global batch equals the sources' streams
 * over [D_k(s), D_k(s+1)). */
static int test_cmp_u64(const void *a, const void *b) {
        uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

        return (x > y) - (x < y);
}

START_TEST(test_batch_is_the_step) {
        zr_mixture_source s[12];

        for (unsigned c = 0; c < 200; c++) {
                uint32_t k = 1 + (uint32_t)test_rand(12), w = 1 + (uint32_t)test_rand(4);
                uint64_t b = 1 + test_rand(c % 4 ? 40 : 700), step = test_rand(c % 2 ? 50 : UINT64_C(1) << 50);
                uint64_t before[12], count[12];

                test_random_sources(s, k, c % 3 ? 50 : 3, 20);
                ck_assert_int_eq(zr_mixture_init(&test_m, s, k, b, w, test_rand(UINT64_MAX), NULL), 0);
                ck_assert_int_eq(zr_mixture_counts(&test_m, step, before, count, NULL), 0);
                for (uint32_t r = 0; r < w; r++)
                        ck_assert_int_eq(zr_mixture_batch(&test_m, step, r, test_src + r * b, test_idx + r * b, NULL), 0);
                for (uint32_t i = 0; i < k; i++) {
                        uint64_t got = 0;

                        for (uint64_t g = 0; g < b * w; g++)
                                if (test_src[g] == i)
                                        test_idx2[got++] = test_idx[g];
                        TEST_EQ(got, count[i]);
                        zr_mixture_stream(&test_m, i, before[i], test_want, count[i]);
                        for (uint64_t j = 0; j < got; j++)
                                ck_assert_uint_lt(test_want[j], s[i].n);
                        qsort(test_idx2, got, sizeof(uint64_t), test_cmp_u64);
                        qsort(test_want, got, sizeof(uint64_t), test_cmp_u64);
                        ck_assert_mem_eq(test_idx2, test_want, got * sizeof(uint64_t));
                }
        }
}
END_TEST

/* The same global batch at world sizes 1, 2, 4 and 8 (G = 96): ranks are slices. */
START_TEST(test_elastic) {
        zr_mixture_source s[3] = { { ZR_SAMPLER_CYCLIC, 1000, 70 }, { ZR_SAMPLER_IID, 300, 20 },
                                   { ZR_SAMPLER_SEQUENTIAL, 50, 10 } };
        static const uint32_t worlds[] = { 2, 3, 4, 8 };

        for (uint64_t step = 0; step < 40; step += 13) {
                ck_assert_int_eq(zr_mixture_init(&test_m, s, 3, 96, 1, 42, NULL), 0);
                ck_assert_int_eq(zr_mixture_batch(&test_m, step, 0, test_src, test_idx, NULL), 0);
                for (size_t w = 0; w < sizeof(worlds) / sizeof(*worlds); w++) {
                        uint64_t b = 96 / worlds[w];

                        ck_assert_int_eq(zr_mixture_init(&test_m, s, 3, b, worlds[w], 42, NULL), 0);
                        for (uint32_t r = 0; r < worlds[w]; r++)
                                ck_assert_int_eq(zr_mixture_batch(&test_m, step, r, test_src2 + r * b,
                                                                  test_idx2 + r * b, NULL), 0);
                        ck_assert_mem_eq(test_src2, test_src, 96 * sizeof(uint32_t));
                        ck_assert_mem_eq(test_idx2, test_idx, 96 * sizeof(uint64_t));
                }
        }
}
END_TEST

/* Sources interleave: two equal sources over G = 1024 change from one position to
 * the next about half the time (a layout that kept each source's slots together
 * would change once). */
START_TEST(test_interleaved) {
        zr_mixture_source s[2] = { { ZR_SAMPLER_CYCLIC, 5000, 1 }, { ZR_SAMPLER_CYCLIC, 5000, 1 } };
        unsigned changes = 0;

        ck_assert_int_eq(zr_mixture_init(&test_m, s, 2, 1024, 1, 3, NULL), 0);
        ck_assert_int_eq(zr_mixture_batch(&test_m, 5, 0, test_src, test_idx, NULL), 0);
        for (unsigned j = 1; j < 1024; j++)
                changes += test_src[j] != test_src[j - 1];
        ck_assert_uint_gt(changes, 400);
        ck_assert_uint_lt(changes, 624);
}
END_TEST

/* Draw c of a source is its mode's index at batch size 1 and step c under the
 * source's seed key(seed, "zr-src", k) (iid: position c of step 0). */
START_TEST(test_streams_are_samplers) {
        zr_mixture_source s[4] = { { ZR_SAMPLER_SEQUENTIAL, 7, 1 }, { ZR_SAMPLER_IID, 1000, 1 },
                                   { ZR_SAMPLER_CYCLIC, 10, 1 }, { ZR_SAMPLER_CYCLIC_LX157, 11, 1 } };
        uint64_t seed = UINT64_C(0xfeedface12345678);

        ck_assert_int_eq(zr_mixture_init(&test_m, s, 4, 8, 1, seed, NULL), 0);
        for (uint32_t k = 0; k < 4; k++) {
                uint64_t c0 = k == 3 ? UINT64_C(1) << 62 : 5;
                zr_sampler_params p = { .mode = s[k].mode, .n = s[k].n, .batch_size = 1,
                                        .seed = zr_rng_key(seed, ZR_RNG_DOMAIN_SOURCE, k), .world_size = 1 };

                ck_assert_uint_eq(test_m.source_seed[k], p.seed);
                zr_mixture_stream(&test_m, k, c0, test_idx, 300); /* several cycles */
                for (uint64_t j = 0; j < 300; j++) {
                        uint64_t want;

                        if (s[k].mode == ZR_SAMPLER_IID) {
                                want = zr_rng_iid_one(zr_rng_key(p.seed, ZR_RNG_DOMAIN_IID, 0), s[k].n, c0 + j);
                        } else {
                                p.step = c0 + j;
                                ck_assert_int_eq(zr_sampler_indices(&p, &want, NULL), 0);
                        }
                        TEST_EQ(test_idx[j], want);
                }
        }
}
END_TEST

/* Same parameters, same batch; another seed, another batch. */
START_TEST(test_deterministic_and_keyed) {
        zr_mixture_source s[3] = { { ZR_SAMPLER_CYCLIC, 100000, 5 }, { ZR_SAMPLER_IID, 100000, 3 },
                                   { ZR_SAMPLER_CYCLIC_LX157, 100000, 2 } };
        unsigned same = 0;

        ck_assert_int_eq(zr_mixture_init(&test_m, s, 3, 256, 1, 99, NULL), 0);
        ck_assert_int_eq(zr_mixture_batch(&test_m, 17, 0, test_src, test_idx, NULL), 0);
        ck_assert_int_eq(zr_mixture_batch(&test_m, 17, 0, test_src2, test_idx2, NULL), 0);
        ck_assert_mem_eq(test_src, test_src2, 256 * sizeof(uint32_t));
        ck_assert_mem_eq(test_idx, test_idx2, 256 * sizeof(uint64_t));
        ck_assert_int_eq(zr_mixture_init(&test_m, s, 3, 256, 1, 99 + (UINT64_C(1) << 32), NULL), 0);
        ck_assert_int_eq(zr_mixture_batch(&test_m, 17, 0, test_src2, test_idx2, NULL), 0);
        for (unsigned j = 0; j < 256; j++)
                same += test_src[j] == test_src2[j] && test_idx[j] == test_idx2[j];
        ck_assert_uint_lt(same, 4);
}
END_TEST

/* The check values of proto/SAMPLERS.md, "Mixtures". */
START_TEST(test_check_values) {
        zr_mixture_source s[3] = { { ZR_SAMPLER_CYCLIC, 10, 7 }, { ZR_SAMPLER_SEQUENTIAL, 4, 2 },
                                   { ZR_SAMPLER_IID, 1000, 1 } };
        static const uint32_t want_src[8] = { 0, 0, 0, 0, 1, 2, 0, 1 };
        static const uint64_t want_idx[8] = { 2, 0, 1, 9, 1, 772, 1, 2 };
        static const uint64_t want_before[3] = { 6, 1, 1 }, want_count[3] = { 5, 2, 1 };
        uint64_t before[3], count[3];

        ck_assert_int_eq(zr_mixture_init(&test_m, s, 3, 8, 1, 42, NULL), 0);
        /* Huffman: 1 + 2 first (node 3, source 2 on the left), then 3 + 7 (root 4) */
        ck_assert_uint_eq(test_m.root, 4);
        ck_assert_uint_eq(test_m.left[3], 2);
        ck_assert_uint_eq(test_m.right[3], 1);
        ck_assert_uint_eq(test_m.left[4], 3);
        ck_assert_uint_eq(test_m.right[4], 0);
        ck_assert_int_eq(zr_mixture_counts(&test_m, 1, before, count, NULL), 0);
        for (unsigned k = 0; k < 3; k++) {
                ck_assert_uint_eq(before[k], want_before[k]);
                ck_assert_uint_eq(count[k], want_count[k]);
        }
        ck_assert_int_eq(zr_mixture_batch(&test_m, 1, 0, test_src, test_idx, NULL), 0);
        for (unsigned j = 0; j < 8; j++) {
                ck_assert_uint_eq(test_src[j], want_src[j]);
                ck_assert_uint_eq(test_idx[j], want_idx[j]);
        }
}
END_TEST

int main(void) {
        Suite *s = suite_create("mixture");
        TL_TCASE(s, "core", 0, test_errors, test_apportionment, test_two_sources, test_batch_is_the_step,
                 test_elastic, test_interleaved, test_streams_are_samplers, test_deterministic_and_keyed,
                 test_check_values);
        return tl_run_suite(s);
}
