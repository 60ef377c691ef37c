/* test-telemetry.c: a loader's telemetry object (loader/telemetry.h) on a
 * clock the test drives: windows hold what fell in them and nothing else, a
 * window older than the loader holds its life, buckets reused after a gap
 * start empty, the verdict follows its rules at their thresholds, the stage
 * is the largest. Against a model: sums of the events the test itself made. */
#include <check.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check-run.h"
#include "loader/telemetry.h"
#include "util.h"

#define S 1000000000ull /* a second, ns */

/* A boot time well past zero, at a second's start. */
#define T0 (1000000 * S)

static zr_tel_span window(const zr_telemetry *t, uint64_t now, enum zr_tel_window w) {
        zr_tel_span sp;
        zr_tel_window(t, now, w, &sp);
        return sp;
}

START_TEST(test_telemetry_windows_hold_their_seconds) {
        zr_telemetry t;
        /* one batch at the middle of every second for 100 s, its second's number
         * of bytes, against sums over the seconds each window covers */
        zr_tel_init(&t, T0);
        for (uint64_t s = 0; s < 100; s++) {
                zr_tel_add(&t, T0 + s * S + S / 2, ZR_TEL_BATCHES, 1);
                zr_tel_add(&t, T0 + s * S + S / 2, ZR_TEL_BYTES, s);
                /* at every tenth second, check all three windows */
                if (s % 7 != 3)
                        continue;
                uint64_t now = T0 + (s + 1) * S + S / 4; /* a quarter into second s+1 */
                const uint64_t lens[] = { 1, 10, 60 };
                for (unsigned w = 0; w < ZR_TEL_NWINDOWS; w++) {
                        zr_tel_span sp = window(&t, now, (enum zr_tel_window)w);
                        uint64_t first = s + 1 >= lens[w] ? s + 1 - lens[w] : 0, sum = 0;
                        for (uint64_t k = first; k <= s; k++)
                                sum += k;
                        /* a window reaching back to the open: the life, to now */
                        ck_assert_uint_eq(sp.span_ns, s + 1 <= lens[w] ? now - T0
                                                                       : (s + 1 - first) * S);
                        if (w < ZR_TEL_W60 || (s + 1) % 10 == 0 || s + 1 < 60) {
                                ck_assert_uint_eq(sp.v[ZR_TEL_BATCHES], s + 1 - first);
                                ck_assert_uint_eq(sp.v[ZR_TEL_BYTES], sum);
                        } else {
                                /* the oldest decade is pro-rated: within its ten
                                 * seconds' worth of the truth */
                                ck_assert_uint_le(sp.v[ZR_TEL_BATCHES], 60 + 1);
                                ck_assert_uint_ge(sp.v[ZR_TEL_BATCHES], 60 - 1);
                        }
                }
        }
        /* totals are everything */
        zr_tel_span tot;
        zr_tel_totals(&t, T0 + 100 * S, &tot);
        ck_assert_uint_eq(tot.v[ZR_TEL_BATCHES], 100);
        ck_assert_uint_eq(tot.v[ZR_TEL_BYTES], 99 * 100 / 2);
        ck_assert_uint_eq(tot.span_ns, 100 * S);
}
END_TEST

START_TEST(test_telemetry_young_and_idle) {
        zr_telemetry t;
        zr_tel_init(&t, T0 + S / 2); /* opened half way into a second */
        zr_tel_add(&t, T0 + S / 2 + 1000, ZR_TEL_BATCHES, 3);
        /* still in its first second: the span is its age, the counts its own */
        zr_tel_span sp = window(&t, T0 + S / 2 + S / 4, ZR_TEL_W10);
        ck_assert_uint_eq(sp.span_ns, S / 4);
        ck_assert_uint_eq(sp.v[ZR_TEL_BATCHES], 3);
        /* a quarter of a second: not enough to judge (main called it consumer-bound) */
        ck_assert_int_eq(zr_tel_verdict(&sp, 1), ZR_VERDICT_UNKNOWN);
        /* past its first second, younger than the window: its life, to now */
        zr_tel_add(&t, T0 + S + S / 20, ZR_TEL_BATCHES, 2);
        sp = window(&t, T0 + S + S / 10, ZR_TEL_W10);
        ck_assert_uint_eq(sp.span_ns, S / 2 + S / 10);
        ck_assert_uint_eq(sp.v[ZR_TEL_BATCHES], 5);
        /* older than the 1 s window: its last complete second only */
        sp = window(&t, T0 + 2 * S + S / 10, ZR_TEL_W1);
        ck_assert_uint_eq(sp.span_ns, S);
        ck_assert_uint_eq(sp.v[ZR_TEL_BATCHES], 2);
        /* 100 s of silence: the buckets it reuses hold nothing of before */
        sp = window(&t, T0 + 100 * S, ZR_TEL_W10);
        ck_assert_uint_eq(sp.v[ZR_TEL_BATCHES], 0);
        ck_assert_int_eq(zr_tel_verdict(&sp, 1), ZR_VERDICT_IDLE);
        zr_tel_add(&t, T0 + 100 * S + 5, ZR_TEL_BATCHES, 1);
        sp = window(&t, T0 + 101 * S, ZR_TEL_W60);
        ck_assert_uint_eq(sp.v[ZR_TEL_BATCHES], 1);
        sp = window(&t, T0 + 101 * S, ZR_TEL_W1);
        ck_assert_uint_eq(sp.v[ZR_TEL_BATCHES], 1);
        sp = window(&t, T0 + 102 * S, ZR_TEL_W1);
        ck_assert_uint_eq(sp.v[ZR_TEL_BATCHES], 0);
}
END_TEST

/* A 10 s window of `batches`, with waits and ready waits (ns in total). */
static zr_tel_span span10(uint64_t batches, uint64_t wait_ns, uint64_t readies,
                          uint64_t ready_ns) {
        zr_tel_span sp = { .span_ns = 10 * S };
        sp.v[ZR_TEL_BATCHES] = batches;
        sp.v[ZR_TEL_WAITS] = batches;
        sp.v[ZR_TEL_WAIT_NS] = wait_ns;
        sp.v[ZR_TEL_READIES] = readies;
        sp.v[ZR_TEL_READY_NS] = ready_ns;
        return sp;
}

START_TEST(test_telemetry_verdict_rules) {
        /* 100 batches in 10 s: 0.1 s per batch for the consumer */
        zr_tel_span sp = span10(100, S / 2 + 1, 100, 0); /* 5 % and a hair */
        ck_assert_int_eq(zr_tel_verdict(&sp, 1), ZR_VERDICT_DATA_BOUND);
        ck_assert_uint_eq(zr_tel_wait_ppm(&sp), 50000);
        sp = span10(100, S / 2, 100, 0); /* exactly 5 %: not above */
        ck_assert_int_eq(zr_tel_verdict(&sp, 1), ZR_VERDICT_BALANCED);
        /* ready batches waited half the consumer's time per batch: consumer-bound */
        sp = span10(100, 0, 100, 100 * (S / 20));
        ck_assert_int_eq(zr_tel_verdict(&sp, 1), ZR_VERDICT_CONSUMER_BOUND);
        sp = span10(100, 0, 100, 100 * (S / 20) - 1);
        ck_assert_int_eq(zr_tel_verdict(&sp, 1), ZR_VERDICT_BALANCED);
        /* no ready waits (another clock): below 1 % consumer-bound, else balanced */
        sp = span10(100, S / 10 - 1, 0, 0);
        ck_assert_int_eq(zr_tel_verdict(&sp, 1), ZR_VERDICT_CONSUMER_BOUND);
        sp = span10(100, S / 10, 0, 0);
        ck_assert_int_eq(zr_tel_verdict(&sp, 1), ZR_VERDICT_BALANCED);
        /* a client that never reported: unknown, whatever the numbers */
        sp = span10(100, 5 * S, 100, 0);
        ck_assert_int_eq(zr_tel_verdict(&sp, 0), ZR_VERDICT_UNKNOWN);
        /* a consumer stuck on one batch the whole window: its report counts */
        sp = span10(0, 10 * S, 0, 0);
        sp.v[ZR_TEL_WAITS] = 1;
        ck_assert_int_eq(zr_tel_verdict(&sp, 1), ZR_VERDICT_DATA_BOUND);
        ck_assert_uint_eq(zr_tel_wait_ppm(&sp), 1000000);
        ck_assert_str_eq(zr_verdict_name(ZR_VERDICT_DATA_BOUND), "data-bound");
        ck_assert_str_eq(zr_verdict_name(ZR_VERDICT_CONSUMER_BOUND), "consumer-bound");
}
END_TEST

/* Issue 38 item 2: the loop's wait for its first batch (opening, the first
 * gather) is the start-up, set aside; less than a second past it is no verdict. */
START_TEST(test_telemetry_startup_set_aside) {
        zr_telemetry t;
        zr_tel_span sp;

        zr_tel_init(&t, T0);
        /* the first batch after 0.4 s: the loop waited all of it */
        zr_tel_add(&t, T0 + 4 * S / 10, ZR_TEL_BATCHES, 1);
        zr_tel_add(&t, T0 + 4 * S / 10, ZR_TEL_WAITS, 1);
        zr_tel_add(&t, T0 + 4 * S / 10, ZR_TEL_WAIT_NS, 4 * S / 10);
        ck_assert_uint_eq(t.startup_ns, 4 * S / 10);
        /* then 20 ms a step for the loop, 1 ms of waiting every 10 steps:
         * 0.5 % of the steady state, 7 % with the start-up counted */
        uint64_t now = T0 + 4 * S / 10;
        for (int k = 1; k <= 250; k++) {
                now += S / 50;
                zr_tel_add(&t, now, ZR_TEL_BATCHES, 1);
                zr_tel_add(&t, now, ZR_TEL_WAITS, 1);
                zr_tel_add(&t, now, ZR_TEL_WAIT_NS, k % 10 ? 0 : S / 1000);
                if (k == 5) { /* 0.1 s and 5 waits past it: not enough to judge */
                        sp = window(&t, now, ZR_TEL_W10);
                        ck_assert_uint_eq(sp.startup_ns, 4 * S / 10);
                        ck_assert_int_eq(sp.startup, 1);
                        ck_assert_int_eq(zr_tel_verdict(&sp, 1), ZR_VERDICT_UNKNOWN);
                }
                if (k == 16) { /* 16 waits past it: enough */
                        sp = window(&t, now, ZR_TEL_W10);
                        ck_assert_int_eq(zr_tel_verdict(&sp, 1), ZR_VERDICT_CONSUMER_BOUND);
                }
        }
        sp = window(&t, now, ZR_TEL_W10); /* 5.4 s: start-up inside the window */
        ck_assert_uint_gt(zr_tel_wait_ppm(&sp), ZR_TEL_DATA_BOUND_PPM); /* counted: 7.9 % */
        ck_assert_int_eq(zr_tel_verdict(&sp, 1), ZR_VERDICT_CONSUMER_BOUND); /* main: data-bound */
        /* a later window without the start-up judges what is in it */
        for (int k = 0; k < 700; k++) {
                now += S / 50;
                zr_tel_add(&t, now, ZR_TEL_BATCHES, 1);
                zr_tel_add(&t, now, ZR_TEL_WAITS, 1);
                zr_tel_add(&t, now, ZR_TEL_WAIT_NS, S / 500); /* 10 % */
        }
        sp = window(&t, now, ZR_TEL_W10);
        ck_assert_uint_eq(sp.startup_ns, 0);
        ck_assert_int_eq(zr_tel_verdict(&sp, 1), ZR_VERDICT_DATA_BOUND);
        /* a loop stuck on its first batch for over a second is data-bound */
        zr_tel_init(&t, T0);
        zr_tel_add(&t, T0 + 3 * S, ZR_TEL_WAITS, 1);
        zr_tel_add(&t, T0 + 3 * S, ZR_TEL_WAIT_NS, 3 * S);
        zr_tel_add(&t, T0 + 5 * S, ZR_TEL_WAITS, 1);
        zr_tel_add(&t, T0 + 5 * S, ZR_TEL_WAIT_NS, 2 * S);
        sp = window(&t, T0 + 5 * S, ZR_TEL_W10);
        ck_assert_int_eq(zr_tel_verdict(&sp, 1), ZR_VERDICT_DATA_BOUND);
}
END_TEST

START_TEST(test_telemetry_stage_is_the_largest) {
        zr_tel_span sp = { .span_ns = 10 * S };
        ck_assert_int_eq(zr_tel_stage(&sp), ZR_STAGE_NONE);
        sp.v[ZR_TEL_DECODE_NS] = 5;
        sp.v[ZR_TEL_COPY_NS] = 4;
        ck_assert_int_eq(zr_tel_stage(&sp), ZR_STAGE_DECODE);
        /* lookups are not I/O: a stage of their own (issue 38 item 2) */
        sp.v[ZR_TEL_LOOKUP_NS] = 6;
        ck_assert_int_eq(zr_tel_stage(&sp), ZR_STAGE_LOOKUP);
        /* I/O is the reads and the waits for reads ahead together */
        sp.v[ZR_TEL_READ_NS] = 4;
        sp.v[ZR_TEL_IO_WAIT_NS] = 3;
        ck_assert_int_eq(zr_tel_stage(&sp), ZR_STAGE_IO);
        sp.v[ZR_TEL_QUEUE_NS] = 8;
        ck_assert_int_eq(zr_tel_stage(&sp), ZR_STAGE_CONTENTION);
        sp.v[ZR_TEL_COPY_NS] = 9;
        ck_assert_int_eq(zr_tel_stage(&sp), ZR_STAGE_COPY);
        ck_assert_str_eq(zr_stage_name(ZR_STAGE_IO), "io");
        ck_assert_str_eq(zr_stage_name(ZR_STAGE_LOOKUP), "lookup");
        for (unsigned c = 0; c < ZR_TEL_N; c++)
                ck_assert_str_ne(zr_tel_counter_name((enum zr_tel_counter)c), "?");
}
END_TEST

START_TEST(test_telemetry_random_events_match_a_model) {
        /* random events over 200 s; each window against a sum over the events
         * the model keeps (the 60 s window within a tenth of its oldest decade) */
        uint64_t seed = 7, at = T0, n = 0;
        static uint64_t when[20000], val[20000];
        zr_telemetry t;
        zr_tel_init(&t, T0);
        while (at < T0 + 200 * S && n < 20000) {
                at += tl_rand(&seed) % (S / 20);
                when[n] = at;
                val[n] = tl_rand(&seed) % 1000;
                zr_tel_add(&t, at, ZR_TEL_WAIT_NS, val[n]);
                n++;
                if (tl_rand(&seed) % 97)
                        continue;
                uint64_t now = at + tl_rand(&seed) % S, end = now / S * S;
                for (unsigned w = 0; w < 2; w++) {
                        uint64_t len = w ? 10 * S : S, sum = 0;
                        /* a window reaching back to the open: every event so far */
                        int young = end <= T0 + len;
                        for (uint64_t i = 0; i < n; i++)
                                if (young || (when[i] >= end - len && when[i] < end))
                                        sum += val[i];
                        ck_assert_uint_eq(window(&t, now, (enum zr_tel_window)w).v[ZR_TEL_WAIT_NS],
                                          sum);
                }
        }
}
END_TEST

TL_SUITE_MAIN("telemetry", test_telemetry_windows_hold_their_seconds,
              test_telemetry_young_and_idle, test_telemetry_verdict_rules,
              test_telemetry_startup_set_aside, test_telemetry_stage_is_the_largest, test_telemetry_random_events_match_a_model)
