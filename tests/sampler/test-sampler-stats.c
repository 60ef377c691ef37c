/* test-sampler-stats.c: the samplers' distributions. iid passes a chi-square test
 * of uniformity over a 1M index space (and a biased generator fails it, so the
 * test has power); both cyclic modes (zrecord's and loaderx 1.5.7's permutation)
 * are a permutation in every cycle, for primes, powers of two, n = 1 and n not a
 * multiple of the batch, drop a different remainder each cycle, reach every record
 * over a few cycles, and keep neighbouring positions unrelated. Seeds are fixed:
 * every run computes the same statistics. */
#include <check.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check-run.h"
#include "sampler/sampler.h"

#define STATS_N      UINT64_C(1000000) /* the index space of the seed's sampler table */
#define STATS_BATCH  UINT64_C(8192)
#define STATS_STEPS  128               /* 2^20 draws: ~1049 per bin */
#define STATS_BINS   1000              /* 999 degrees of freedom */
/* Upper 0.1% point of chi-square with 999 degrees of freedom (Wilson-Hilferty:
 * 999 * (1 - 2/(9*999) + 3.0902 * sqrt(2/(9*999)))^3 = 1142.9). A uniform
 * sampler exceeds it with probability 0.001 per statistic; the seeds below are
 * fixed, so the outcome is too. */
#define STATS_CHI2_LIMIT 1142.9

static uint64_t stats_idx[STATS_BATCH];

/* The cyclic tests run once per cyclic mode (a loop test's _i). */
static const enum zr_sampler_mode stats_cyclic_modes[] = { ZR_SAMPLER_CYCLIC, ZR_SAMPLER_CYCLIC_LX157 };
#define STATS_CYCLIC_MODES ((int)(sizeof(stats_cyclic_modes) / sizeof(*stats_cyclic_modes)))

/* Pearson's statistic sum (O - E)^2 / E over bins of `counts`, total draws `draws`. */
static double stats_chi2(const uint64_t *counts, unsigned bins, uint64_t draws) {
        double e = (double)draws / bins, chi2 = 0;

        for (unsigned i = 0; i < bins; i++) {
                double d = (double)counts[i] - e;
                chi2 += d * d / e;
        }
        return chi2;
}

/* Draws STATS_STEPS iid batches of seed `seed`; `bias` replaces every 16th draw
 * by half of itself (a generator that favours the lower half by ~3%). Returns the
 * larger of the chi-square statistics of index / 1000 (coarse position) and
 * index mod 1000 (low digits). */
static double stats_iid_chi2(uint64_t seed, int bias) {
        static uint64_t hi[STATS_BINS], lo[STATS_BINS];
        zr_sampler_params p = { .mode = ZR_SAMPLER_IID, .n = STATS_N, .batch_size = STATS_BATCH,
                                .seed = seed, .rank = 0, .world_size = 1 };
        uint64_t draws = 0;
        double a, b;

        memset(hi, 0, sizeof(hi));
        memset(lo, 0, sizeof(lo));
        for (uint64_t s = 0; s < STATS_STEPS; s++) {
                p.step = s;
                ck_assert_int_eq(zr_sampler_indices(&p, stats_idx, NULL), 0);
                for (uint64_t j = 0; j < STATS_BATCH; j++) {
                        uint64_t x = stats_idx[j];

                        if (bias && j % 16 == 0)
                                x /= 2;
                        hi[x / (STATS_N / STATS_BINS)]++;
                        lo[x % STATS_BINS]++;
                        draws++;
                }
        }
        a = stats_chi2(hi, STATS_BINS, draws);
        b = stats_chi2(lo, STATS_BINS, draws);
        return a > b ? a : b;
}

START_TEST(test_iid_uniform) {
        static const uint64_t seeds[] = { 0, 1, UINT64_C(1) << 32, UINT64_C(0xdeadbeefcafef00d) };

        for (size_t i = 0; i < sizeof(seeds) / sizeof(*seeds); i++) {
                double chi2 = stats_iid_chi2(seeds[i], 0);
                ck_assert_msg(chi2 < STATS_CHI2_LIMIT, "seed %zu: chi2 %.1f >= %.1f", i, chi2,
                              STATS_CHI2_LIMIT);
                /* and not suspiciously perfect either (lower 0.1% point is ~863) */
                ck_assert_msg(chi2 > 863.0, "seed %zu: chi2 %.1f too small", i, chi2);
        }
}
END_TEST

START_TEST(test_iid_biased_rejected) {
        double chi2 = stats_iid_chi2(0, 1);
        ck_assert_msg(chi2 > STATS_CHI2_LIMIT, "biased generator passed: chi2 %.1f", chi2);
}
END_TEST

/* Runs `cycles` full cycles of `mode`(n, B, W = 1, seed): each cycle's batches hold
 * no index twice and exactly m*B distinct indices; returns how many records were
 * reached over all cycles, and in *ret_changed how many cycles dropped a different
 * set of records from the cycle before. */
static uint64_t stats_cycles(enum zr_sampler_mode mode, uint64_t n, uint64_t b, uint64_t seed,
                             unsigned cycles, unsigned *ret_changed) {
        zr_sampler_params p = { .mode = mode, .n = n, .batch_size = b, .seed = seed,
                                .rank = 0, .world_size = 1 };
        uint8_t *seen = calloc(n, 1), *ever = calloc(n, 1), *prev = calloc(n, 1);
        uint64_t m = n / b, reached = 0;
        unsigned changed = 0;

        ck_assert_ptr_nonnull(seen);
        ck_assert_ptr_nonnull(ever);
        ck_assert_ptr_nonnull(prev);
        for (unsigned c = 0; c < cycles; c++) {
                memset(seen, 0, n);
                for (uint64_t t = 0; t < m; t++) {
                        p.step = c * m + t;
                        ck_assert_int_eq(zr_sampler_indices(&p, stats_idx, NULL), 0);
                        for (uint64_t j = 0; j < b; j++) {
                                uint64_t x = stats_idx[j];

                                if (x >= n || seen[x])
                                        ck_abort_msg("n %lu cycle %u step %lu: index %lu out of range or repeated",
                                                     (unsigned long)n, c, (unsigned long)t, (unsigned long)x);
                                seen[x] = 1;
                                if (!ever[x])
                                        reached++;
                                ever[x] = 1;
                        }
                }
                if (c > 0 && memcmp(seen, prev, n) != 0)
                        changed++;
                memcpy(prev, seen, n);
        }
        free(prev);
        free(ever);
        free(seen);
        *ret_changed = changed;
        return reached;
}

START_TEST(test_cyclic_permutation) {
        static const struct { uint64_t n, b; } cases[] = {
                { 1, 1 }, { 2, 1 }, { 2, 2 }, { 3, 2 }, { 7, 3 }, { 97, 10 }, { 1024, 64 },
                { 1024, 100 }, { 4099, 64 }, { 65536, 512 }, { 65537, 1000 }, { 100003, 8192 },
        };

        for (size_t i = 0; i < sizeof(cases) / sizeof(*cases); i++) {
                uint64_t n = cases[i].n, b = cases[i].b;
                unsigned cycles = 12, changed;
                uint64_t reached = stats_cycles(stats_cyclic_modes[_i], n, b, 1000 + i, cycles,
                                                &changed);

                if (n % b == 0) {
                        ck_assert_uint_eq(reached, n);
                        continue;
                }
                /* a remainder is dropped: it must move from cycle to cycle (for n = 7
                 * and one dropped record, it stays put with probability 1/7) */
                if (n > 3)
                        ck_assert_msg(changed >= (cycles - 1) / 2, "n %lu: remainder changed in %u of %u cycles",
                                      (unsigned long)n, changed, cycles - 1);
                ck_assert_msg(reached == n, "n %lu b %lu: %lu of %lu records reached in %u cycles",
                              (unsigned long)n, (unsigned long)b, (unsigned long)reached,
                              (unsigned long)n, cycles);
        }
}
END_TEST

/* Different cycles and different seeds give different orders. */
START_TEST(test_cyclic_orders_differ) {
        static uint64_t a[1000], b[1000];
        zr_sampler_params p = { .mode = stats_cyclic_modes[_i], .n = 1000, .batch_size = 1000,
                                .seed = 3, .rank = 0, .world_size = 1 };
        unsigned same = 0;

        ck_assert_int_eq(zr_sampler_indices(&p, a, NULL), 0);
        p.step = 1; /* the next cycle */
        ck_assert_int_eq(zr_sampler_indices(&p, b, NULL), 0);
        for (unsigned j = 0; j < 1000; j++)
                same += a[j] == b[j];
        ck_assert_uint_lt(same, 10);

        p.step = 0;
        p.seed = 3 + (UINT64_C(1) << 32);
        ck_assert_int_eq(zr_sampler_indices(&p, b, NULL), 0);
        same = 0;
        for (unsigned j = 0; j < 1000; j++)
                same += a[j] == b[j];
        ck_assert_uint_lt(same, 10);

        /* and the order is no near-identity: few records keep their position */
        same = 0;
        for (unsigned j = 0; j < 1000; j++)
                same += a[j] == j;
        ck_assert_uint_lt(same, 10);
}
END_TEST

/* Consecutive positions of a cycle are unrelated: over 100000 cycles of n = 10^6
 * (fixed seed), the first index and the distance from the first to the second
 * index mod n are uniform by the same chi-square test as iid. A Feistel network
 * with a one-multiply round function fails the distance test (statistic ~1980). */
START_TEST(test_cyclic_neighbours_unrelated) {
        static uint64_t first[STATS_BINS], dist[STATS_BINS];
        zr_sampler_params p = { .mode = stats_cyclic_modes[_i], .n = STATS_N, .batch_size = 2,
                                .seed = 11, .rank = 0, .world_size = 1 };
        uint64_t cycles = 100000, idx[2];
        double a, b;

        for (uint64_t c = 0; c < cycles; c++) {
                p.step = c * (STATS_N / 2); /* the first batch of cycle c */
                ck_assert_int_eq(zr_sampler_indices(&p, idx, NULL), 0);
                first[idx[0] / (STATS_N / STATS_BINS)]++;
                dist[((idx[1] + STATS_N - idx[0]) % STATS_N) / (STATS_N / STATS_BINS)]++;
        }
        a = stats_chi2(first, STATS_BINS, cycles);
        b = stats_chi2(dist, STATS_BINS, cycles);
        ck_assert_msg(a < STATS_CHI2_LIMIT, "first index: chi2 %.1f", a);
        ck_assert_msg(b < STATS_CHI2_LIMIT, "neighbour distance: chi2 %.1f", b);
}
END_TEST

int main(void) {
        Suite *s = suite_create("sampler-stats");
        TCase *tc = TL_TCASE(s, "core", 0, test_iid_uniform, test_iid_biased_rejected);
        tcase_add_loop_test(tc, test_cyclic_permutation, 0, STATS_CYCLIC_MODES);
        tcase_add_loop_test(tc, test_cyclic_orders_differ, 0, STATS_CYCLIC_MODES);
        tcase_add_loop_test(tc, test_cyclic_neighbours_unrelated, 0, STATS_CYCLIC_MODES);
        return tl_run_suite(s);
}
