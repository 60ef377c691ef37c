/* test-cache.c: the decoded-record cache: lookups pin, LRU eviction within the
 * budget, pinned entries outlive eviction, drop by dataset, budget changes;
 * with planned uses, Belady's rule: as many hits as the offline optimum (MIN,
 * simulated here by brute force) on random traces, bypass, plans of several
 * owners, plans dropped with their dataset. */
#include <check.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "dataset/cache.h"
#include "check-run.h"

#define REC 1000
#define COST (REC + ZR_RCACHE_ENTRY_OVERHEAD)

static void fill(uint8_t *p, uint64_t i) {
        for (size_t k = 0; k < REC; k++)
                p[k] = (uint8_t)(i * 31 + k);
}

static zr_rcache_key key(uint64_t ds, uint64_t gen, uint64_t i) {
        return (zr_rcache_key){ ds, gen, i };
}

START_TEST(test_hit_miss) {
        zr_rcache *c;
        zr_rcache_entry *en[3];
        zr_rcache_key k[3] = { key(1, 0, 5), key(1, 1, 5), key(2, 0, 5) };
        uint8_t rec[REC], want[REC];
        zr_rcache_stats st;

        ck_assert_int_eq(zr_rcache_new(100 * COST, &c), 0);
        ck_assert_uint_eq(zr_rcache_lookup(c, k, 3, en), 0);
        fill(rec, 5);
        ck_assert_uint_eq(zr_rcache_insert(c, &k[0], rec, REC), 0);
        memset(rec, 0, REC); /* the cache holds its own copy */
        ck_assert_uint_eq(zr_rcache_lookup(c, k, 3, en), 1);
        ck_assert_ptr_nonnull(en[0]);
        ck_assert_ptr_null(en[1]); /* another generation */
        ck_assert_ptr_null(en[2]); /* another dataset */
        fill(want, 5);
        ck_assert_uint_eq(zr_rcache_entry_len(en[0]), REC);
        ck_assert_int_eq(memcmp(zr_rcache_entry_data(en[0]), want, REC), 0);
        zr_rcache_unpin(c, en[0]);
        /* a second insert of the same key is refused and changes nothing */
        ck_assert_uint_eq(zr_rcache_insert(c, &k[0], rec, REC), 0);
        zr_rcache_stats_get(c, &st);
        ck_assert_uint_eq(st.entries, 1);
        ck_assert_uint_eq(st.bytes, COST);
        zr_rcache_free(c);
}
END_TEST

START_TEST(test_lru_eviction) {
        zr_rcache *c;
        zr_rcache_entry *en;
        uint8_t rec[REC];
        zr_rcache_stats st;
        uint64_t ev = 0;

        ck_assert_int_eq(zr_rcache_new(10 * COST, &c), 0);
        for (uint64_t i = 0; i < 10; i++) {
                fill(rec, i);
                ev += zr_rcache_insert(c, &(zr_rcache_key){ 1, 0, i }, rec, REC);
        }
        ck_assert_uint_eq(ev, 0);
        /* touch 0, so 1 is now the least recently used */
        ck_assert_uint_eq(zr_rcache_lookup(c, &(zr_rcache_key){ 1, 0, 0 }, 1, &en), 1);
        zr_rcache_unpin(c, en);
        fill(rec, 10);
        ck_assert_uint_eq(zr_rcache_insert(c, &(zr_rcache_key){ 1, 0, 10 }, rec, REC), 1);
        ck_assert_uint_eq(zr_rcache_lookup(c, &(zr_rcache_key){ 1, 0, 1 }, 1, &en), 0);
        ck_assert_uint_eq(zr_rcache_lookup(c, &(zr_rcache_key){ 1, 0, 0 }, 1, &en), 1);
        zr_rcache_unpin(c, en);
        zr_rcache_stats_get(c, &st);
        ck_assert_uint_eq(st.entries, 10);
        ck_assert_uint_le(st.bytes, st.budget);
        ck_assert_uint_eq(st.evictions, 1);
        zr_rcache_free(c);
}
END_TEST

START_TEST(test_pinned_survives) {
        zr_rcache *c;
        zr_rcache_entry *en;
        uint8_t rec[REC], want[REC];

        ck_assert_int_eq(zr_rcache_new(8 * COST, &c), 0);
        fill(rec, 3);
        zr_rcache_insert(c, &(zr_rcache_key){ 1, 0, 3 }, rec, REC);
        ck_assert_uint_eq(zr_rcache_lookup(c, &(zr_rcache_key){ 1, 0, 3 }, 1, &en), 1);
        /* evict everything while the entry is pinned, then drop the dataset */
        ck_assert_uint_eq(zr_rcache_set_budget(c, 0), 1);
        ck_assert_uint_eq(zr_rcache_drop(c, 1), 0);
        fill(want, 3);
        ck_assert_int_eq(memcmp(zr_rcache_entry_data(en), want, REC), 0);
        zr_rcache_unpin(c, en); /* freed here (ASan checks) */
        /* with budget 0 nothing is inserted */
        ck_assert_uint_eq(zr_rcache_insert(c, &(zr_rcache_key){ 1, 0, 4 }, rec, REC), 0);
        ck_assert_uint_eq(zr_rcache_lookup(c, &(zr_rcache_key){ 1, 0, 4 }, 1, &en), 0);
        zr_rcache_free(c);
}
END_TEST

START_TEST(test_drop_and_big) {
        zr_rcache *c;
        zr_rcache_stats st;
        uint8_t rec[REC];
        uint8_t *big = calloc(1, 8 * COST);

        ck_assert_int_eq(zr_rcache_new(64 * COST, &c), 0);
        for (uint64_t i = 0; i < 40; i++)
                zr_rcache_insert(c, &(zr_rcache_key){ i % 2 ? 7 : 9, 0, i }, rec, REC);
        ck_assert_uint_eq(zr_rcache_drop(c, 7), 20);
        zr_rcache_stats_get(c, &st);
        ck_assert_uint_eq(st.entries, 20);
        ck_assert_uint_eq(st.bytes, 20 * COST);
        /* a record over an eighth of the budget is not cached */
        ck_assert_uint_eq(zr_rcache_insert(c, &(zr_rcache_key){ 1, 0, 0 }, big, 8 * COST), 0);
        zr_rcache_stats_get(c, &st);
        ck_assert_uint_eq(st.entries, 20);
        /* many entries: the table grows and every one is found */
        ck_assert_int_eq(zr_rcache_set_budget(c, 5000 * COST), 0);
        for (uint64_t i = 0; i < 3000; i++)
                zr_rcache_insert(c, &(zr_rcache_key){ 3, 1, i }, rec, REC);
        for (uint64_t i = 0; i < 3000; i++) {
                zr_rcache_entry *en;
                ck_assert_uint_eq(zr_rcache_lookup(c, &(zr_rcache_key){ 3, 1, i }, 1, &en), 1);
                zr_rcache_unpin(c, en);
        }
        free(big);
        zr_rcache_free(c);
}
END_TEST

/* ---- planned uses ------------------------------------------------------------ */

/* The offline optimum on trace[0..n) over `keys` distinct keys with room for
 * `cap` records: on a miss with the cache full, the record used farthest in
 * the future (the new one included: bypass) leaves. Brute force. */
static size_t min_hits(const uint64_t *trace, size_t n, size_t cap) {
        uint64_t *in = calloc(cap ? cap : 1, sizeof(*in));
        size_t nin = 0, hits = 0;

        for (size_t t = 0; t < n; t++) {
                size_t j, far = 0, farpos = 0;
                for (j = 0; j < nin && in[j] != trace[t]; j++)
                        ;
                if (j < nin) {
                        hits++;
                        continue;
                }
                if (nin < cap) {
                        in[nin++] = trace[t];
                        continue;
                }
                /* the next use of each candidate (n: never) */
                for (size_t k = 0; k <= nin; k++) {
                        uint64_t key = k < nin ? in[k] : trace[t];
                        size_t u = t + 1;
                        while (u < n && trace[u] != key)
                                u++;
                        if (u > far || k == 0) {
                                far = u;
                                farpos = k;
                        }
                }
                if (farpos < nin)
                        in[farpos] = trace[t];
        }
        free(in);
        return hits;
}

/* The cache's hits over the trace, used one access at a time as a gather does
 * (lookup, insert on a miss). `planned`: the cache was told every use in
 * advance and each access unplans its own (what loaders do); otherwise it is
 * a plain LRU. */
static size_t cache_hits(const uint64_t *trace, size_t n, size_t cap, bool planned) {
        zr_rcache *c;
        uint8_t rec[REC];
        size_t hits = 0;
        zr_rcache_stats st;

        ck_assert_int_eq(zr_rcache_new(cap * COST, &c), 0);
        for (size_t t = 0; planned && t < n; t++)
                zr_rcache_plan(c, 5, &(zr_rcache_key){ 1, 0, trace[t] }, 1, 1000 + t);
        zr_rcache_stats_get(c, &st);
        ck_assert_uint_eq(st.planned, planned ? n : 0);
        for (size_t t = 0; t < n; t++) {
                zr_rcache_key k = { 1, 0, trace[t] };
                zr_rcache_entry *en;
                size_t h = zr_rcache_lookup(c, &k, 1, &en);
                if (planned)
                        zr_rcache_unplan(c, 5, &k, 1);
                if (h) {
                        hits++;
                        zr_rcache_unpin(c, en);
                } else {
                        fill(rec, trace[t]);
                        zr_rcache_insert(c, &k, rec, REC);
                }
                zr_rcache_stats_get(c, &st);
                ck_assert_uint_le(st.bytes, st.budget);
        }
        zr_rcache_stats_get(c, &st);
        ck_assert_uint_eq(st.planned, 0);
        ck_assert_uint_eq(st.planned_keys, 0);
        zr_rcache_free(c);
        return hits;
}

START_TEST(test_planned_equals_min) {
        /* uniform and skewed traces, several sizes: the planned cache's hits
         * are MIN's exactly, and more than LRU's where MIN's are */
        uint64_t state = 0x2545f4914f6cdd1dull;
        size_t won = 0;

        for (int round = 0; round < 24; round++) {
                size_t keys = 16 + (size_t)round * 7, n = 600, cap = 8 + (size_t)(round % 5) * 8;
                uint64_t *trace = malloc(n * sizeof(*trace));
                for (size_t t = 0; t < n; t++) {
                        state ^= state << 13;
                        state ^= state >> 7;
                        state ^= state << 17;
                        uint64_t r = state % keys;
                        trace[t] = round % 2 ? r : r * r / keys; /* skewed toward 0 */
                }
                size_t m = min_hits(trace, n, cap), p = cache_hits(trace, n, cap, true);
                size_t l = cache_hits(trace, n, cap, false);
                ck_assert_msg(p == m, "round %d: planned %zu hits, MIN %zu", round, p, m);
                ck_assert_uint_le(l, m);
                won += l < m;
                free(trace);
        }
        ck_assert_uint_gt(won, 12);
}
END_TEST

START_TEST(test_bypass) {
        zr_rcache *c;
        zr_rcache_entry *en;
        zr_rcache_stats st;
        uint8_t rec[REC];

        ck_assert_int_eq(zr_rcache_new(16 * COST, &c), 0);
        for (uint64_t i = 0; i < 16; i++) {
                zr_rcache_plan(c, 1, &(zr_rcache_key){ 1, 0, i }, 1, 100 + i);
                zr_rcache_insert(c, &(zr_rcache_key){ 1, 0, i }, rec, REC);
        }
        /* full of records used before it: a record with no plan stays out */
        ck_assert_uint_eq(zr_rcache_insert(c, &(zr_rcache_key){ 1, 0, 99 }, rec, REC), 0);
        ck_assert_uint_eq(zr_rcache_lookup(c, &(zr_rcache_key){ 1, 0, 99 }, 1, &en), 0);
        zr_rcache_stats_get(c, &st);
        ck_assert_uint_eq(st.bypassed, 1);
        ck_assert_uint_eq(st.entries, 16);
        /* one used sooner than the farthest (15, at 115) takes its place */
        zr_rcache_plan(c, 2, &(zr_rcache_key){ 1, 0, 98 }, 1, 50);
        ck_assert_uint_eq(zr_rcache_insert(c, &(zr_rcache_key){ 1, 0, 98 }, rec, REC), 1);
        ck_assert_uint_eq(zr_rcache_lookup(c, &(zr_rcache_key){ 1, 0, 15 }, 1, &en), 0);
        /* once owner 1's use of 0 is consumed, 0 has none and goes first,
         * before any planned record; another owner's unplan of 1 is ignored */
        zr_rcache_plan(c, 2, &(zr_rcache_key){ 1, 0, 2 }, 1, 10);
        zr_rcache_unplan(c, 1, &(zr_rcache_key){ 1, 0, 0 }, 1);
        zr_rcache_unplan(c, 7, &(zr_rcache_key){ 1, 0, 1 }, 1);
        zr_rcache_plan(c, 2, &(zr_rcache_key){ 1, 0, 97 }, 1, 60);
        ck_assert_uint_eq(zr_rcache_insert(c, &(zr_rcache_key){ 1, 0, 97 }, rec, REC), 1);
        ck_assert_uint_eq(zr_rcache_lookup(c, &(zr_rcache_key){ 1, 0, 0 }, 1, &en), 0);
        for (uint64_t i = 1; i <= 2; i++) {
                ck_assert_uint_eq(zr_rcache_lookup(c, &(zr_rcache_key){ 1, 0, i }, 1, &en), 1);
                zr_rcache_unpin(c, en);
        }
        zr_rcache_stats_get(c, &st);
        ck_assert_uint_eq(st.planned, 18);      /* 1..15 of owner 1, 2@10, 98@50, 97@60 */
        ck_assert_uint_eq(st.planned_keys, 17);
        ck_assert_uint_eq(st.entries, 16);
        /* shrinking the budget evicts planned records too, farthest first */
        ck_assert_uint_eq(zr_rcache_set_budget(c, 14 * COST), 2);
        for (uint64_t i = 13; i <= 14; i++)
                ck_assert_uint_eq(zr_rcache_lookup(c, &(zr_rcache_key){ 1, 0, i }, 1, &en), 0);
        ck_assert_uint_eq(zr_rcache_lookup(c, &(zr_rcache_key){ 1, 0, 12 }, 1, &en), 1);
        zr_rcache_unpin(c, en);
        zr_rcache_free(c);
}
END_TEST

START_TEST(test_plans_dropped) {
        zr_rcache *c;
        zr_rcache_stats st;
        uint8_t rec[REC], hit[8];
        zr_rcache_key k[8];

        ck_assert_int_eq(zr_rcache_new(100 * COST, &c), 0);
        for (uint64_t i = 0; i < 8; i++)
                k[i] = (zr_rcache_key){ i % 2 ? 3 : 4, 0, i };
        zr_rcache_plan(c, 1, k, 8, 5);
        zr_rcache_plan(c, 1, k, 8, 6); /* each planned twice */
        for (uint64_t i = 0; i < 4; i++)
                zr_rcache_insert(c, &k[i], rec, REC);
        ck_assert_uint_eq(zr_rcache_contains(c, k, 8, hit), 4);
        ck_assert_uint_eq(hit[3], 1);
        ck_assert_uint_eq(hit[4], 0);
        ck_assert_uint_eq(zr_rcache_drop(c, 3), 2);
        zr_rcache_stats_get(c, &st);
        ck_assert_uint_eq(st.entries, 2);
        ck_assert_uint_eq(st.planned, 8);
        ck_assert_uint_eq(st.planned_keys, 4);
        zr_rcache_unplan(c, 1, k, 8);
        zr_rcache_unplan(c, 1, k, 8);
        zr_rcache_unplan(c, 1, k, 8); /* nothing left: ignored */
        zr_rcache_stats_get(c, &st);
        ck_assert_uint_eq(st.planned, 0);
        ck_assert_uint_eq(st.entries, 2);
        zr_rcache_free(c); /* ASan: no node left behind */
}
END_TEST

TL_SUITE_MAIN("cache", test_hit_miss, test_lru_eviction, test_pinned_survives,
              test_drop_and_big, test_planned_equals_min, test_bypass, test_plans_dropped)
