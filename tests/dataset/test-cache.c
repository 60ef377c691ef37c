/* test-cache.c: the decoded-record cache: lookups pin, LRU eviction within the
 * budget, pinned entries outlive eviction, drop by dataset, budget changes. */
#include <check.h>
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

TL_SUITE_MAIN("cache", test_hit_miss, test_lru_eviction, test_pinned_survives,
              test_drop_and_big)
