/* test-latency.c: the read latency estimate reports the quantiles and the
 * moving average of what it saw, follows a change, and stays bounded. */
#include <check.h>
#include <stdint.h>
#include <stdlib.h>

#include "check-run.h"
#include "io/latency.h"

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

TL_SUITE_MAIN("latency", test_latency_quantiles, test_latency_every_value_lands_near,
              test_latency_follows_change)
