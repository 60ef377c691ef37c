/* test-latency.c: the read latency estimate reports the quantiles and the
 * moving average of what it saw, follows a change, and stays bounded. */
#include <check.h>
#include <stdint.h>
#include <stdlib.h>

#include "check-run.h"
#include "io/latency.h"
#include "util.h"

static void assert_near(uint64_t got, uint64_t want) {
        /* a bucket's midpoint is within 12.5 % of any value in it */
        ck_assert_msg(got * 8 >= want * 7 && got * 8 <= want * 9,
                      "quantile %llu, expected about %llu", (unsigned long long)got,
                      (unsigned long long)want);
}

START_TEST(test_latency_quantiles) {
        zr_latency l;
        zr_latency_init(&l);
        ck_assert_uint_eq(zr_latency_quantile(&l, 0.5), 0);
        ck_assert_uint_eq(l.ewma_ns, 0);
        /* 98 reads of 100 us, 2 of 10 ms: the median is 100 us, p99 10 ms */
        for (int i = 0; i < 98; i++)
                zr_latency_add(&l, 100000);
        for (int i = 0; i < 2; i++)
                zr_latency_add(&l, 10000000);
        assert_near(zr_latency_quantile(&l, 0.50), 100000);
        assert_near(zr_latency_quantile(&l, 0.98), 100000);
        assert_near(zr_latency_quantile(&l, 0.99), 10000000);
        assert_near(zr_latency_quantile(&l, 1.0), 10000000);
        ck_assert_uint_eq(l.samples, 100);
}
END_TEST

START_TEST(test_latency_every_value_lands_near) {
        /* for values across the whole range, the only sample's quantile is it */
        for (uint64_t v = 5; v < ((uint64_t)1 << 40); v = v * 3 / 2 + 1) {
                zr_latency l;
                zr_latency_init(&l);
                zr_latency_add(&l, v);
                assert_near(zr_latency_quantile(&l, 0.5), v);
                ck_assert_uint_eq(l.ewma_ns, v);
        }
}
END_TEST

START_TEST(test_latency_follows_change) {
        zr_latency l;
        zr_latency_init(&l);
        for (int i = 0; i < 1000; i++)
                zr_latency_add(&l, 1000);
        ck_assert_uint_eq(l.ewma_ns, 1000);
        /* the average follows a tenfold slowdown within tens of reads */
        for (int i = 0; i < 40; i++)
                zr_latency_add(&l, 10000);
        ck_assert_uint_gt(l.ewma_ns, 9000);
        ck_assert_uint_le(l.ewma_ns, 10000);
        /* the histogram halves once it holds a window: old samples fade, and the
         * median moves to the new regime after enough of them */
        for (uint32_t i = 0; i < 3 * ZR_LATENCY_WINDOW; i++)
                zr_latency_add(&l, 50000);
        ck_assert_uint_le(l.held, ZR_LATENCY_WINDOW);
        assert_near(zr_latency_quantile(&l, 0.5), 50000);
        assert_near(zr_latency_quantile(&l, 0.99), 50000);
}
END_TEST

START_TEST(test_latency_fixed_buckets_never_fade) {
        zr_latency l;
        uint64_t seed = 3, count[ZR_LATENCY_LE + 1] = {0}, sum = 0;
        zr_latency_init(&l);
        /* bounds ascend; a value on a bound is in that bound's bucket */
        for (unsigned i = 1; i < ZR_LATENCY_LE; i++)
                ck_assert_uint_gt(zr_latency_le_ns[i], zr_latency_le_ns[i - 1]);
        zr_latency_add(&l, zr_latency_le_ns[0]);
        zr_latency_add(&l, zr_latency_le_ns[0] + 1);
        ck_assert_uint_eq(zr_latency_cumulative(&l, 0), 1);
        ck_assert_uint_eq(zr_latency_cumulative(&l, 1), 2);
        zr_latency_init(&l);
        /* past several halvings of the quantile histogram, every sample is still
         * counted in its fixed bucket, against a model of the bounds */
        for (uint32_t k = 0; k < 3 * ZR_LATENCY_WINDOW; k++) {
                uint64_t v = tl_rand(&seed) % 20000000000ull;
                unsigned i;
                for (i = 0; i < ZR_LATENCY_LE && v > zr_latency_le_ns[i]; i++)
                        ;
                count[i]++;
                sum += v;
                zr_latency_add(&l, v);
                if (k % 10007)
                        continue;
                for (unsigned b = 0, cum = 0; b < ZR_LATENCY_LE; b++) {
                        cum += (unsigned)count[b];
                        ck_assert_uint_eq(zr_latency_cumulative(&l, b), cum);
                }
        }
        ck_assert_uint_le(l.held, ZR_LATENCY_WINDOW);
        ck_assert_uint_eq(l.samples, 3 * ZR_LATENCY_WINDOW);
        ck_assert_uint_eq(l.sum_ns, sum);
        ck_assert_uint_eq(zr_latency_cumulative(&l, ZR_LATENCY_LE - 1) + count[ZR_LATENCY_LE],
                          l.samples);
}
END_TEST

TL_SUITE_MAIN("latency", test_latency_quantiles, test_latency_every_value_lands_near,
              test_latency_follows_change, test_latency_fixed_buckets_never_fade)
