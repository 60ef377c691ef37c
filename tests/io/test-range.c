/* test-range.c: byte ranges merge and split as the I/O queue relies on. */
#include <check.h>
#include <stdint.h>
#include <stdlib.h>

#include "check-run.h"
#include "io/range.h"

START_TEST(test_merge_sorts_merges_and_drops_empty) {
        zr_io_range r[] = {
                { 7, 8192, 4096 },  /* touches the next one on fd 7 once sorted */
                { 3, 100, 50 },
                { 7, 0, 4096 },
                { 7, 4096, 4096 },  /* touches both neighbours */
                { 3, 120, 10 },     /* inside [100, 150) */
                { 3, 150, 0 },      /* empty: dropped */
                { 3, 149, 11 },     /* overlaps the end: [100, 160) */
                { 3, 161, 1 },      /* one byte apart: stays */
                { 7, 1 << 20, 1 },
        };
        size_t n = zr_io_ranges_merge(r, sizeof(r) / sizeof(r[0]));
        ck_assert_uint_eq(n, 4);
        ck_assert_int_eq(r[0].fd, 3);
        ck_assert_uint_eq(r[0].offset, 100);
        ck_assert_uint_eq(r[0].length, 60);
        ck_assert_int_eq(r[1].fd, 3);
        ck_assert_uint_eq(r[1].offset, 161);
        ck_assert_uint_eq(r[1].length, 1);
        ck_assert_int_eq(r[2].fd, 7);
        ck_assert_uint_eq(r[2].offset, 0);
        ck_assert_uint_eq(r[2].length, 12288);
        ck_assert_int_eq(r[3].fd, 7);
        ck_assert_uint_eq(r[3].offset, 1 << 20);
        ck_assert_uint_eq(r[3].length, 1);
}
END_TEST

START_TEST(test_merge_keeps_descriptors_apart) {
        /* the same bytes of two descriptors are two reads */
        zr_io_range r[] = { { 5, 0, 4096 }, { 4, 0, 4096 }, { 5, 4096, 4096 }, { 4, 2048, 4096 } };
        size_t n = zr_io_ranges_merge(r, 4);
        ck_assert_uint_eq(n, 2);
        ck_assert_int_eq(r[0].fd, 4);
        ck_assert_uint_eq(r[0].length, 6144);
        ck_assert_int_eq(r[1].fd, 5);
        ck_assert_uint_eq(r[1].length, 8192);
        ck_assert_uint_eq(zr_io_ranges_merge(r, 0), 0);
}
END_TEST

/* Against a bitmap model: random ranges over a few descriptors merge into
 * disjoint, sorted, non-touching ranges covering exactly the same bytes. */
START_TEST(test_merge_matches_model) {
        enum { FDS = 3, SPAN = 512, N = 40 };
        srand(12345);
        for (int trial = 0; trial < 500; trial++) {
                uint8_t want[FDS][SPAN] = {{0}}, got[FDS][SPAN] = {{0}};
                zr_io_range r[N];
                size_t n = (size_t)(rand() % N);
                for (size_t i = 0; i < n; i++) {
                        r[i].fd = rand() % FDS;
                        r[i].offset = (uint64_t)(rand() % (SPAN - 40));
                        r[i].length = (uint64_t)(rand() % 40);
                        for (uint64_t b = 0; b < r[i].length; b++)
                                want[r[i].fd][r[i].offset + b] = 1;
                }
                size_t m = zr_io_ranges_merge(r, n);
                for (size_t i = 0; i < m; i++) {
                        ck_assert_uint_gt(r[i].length, 0);
                        if (i > 0 && r[i].fd == r[i - 1].fd)
                                ck_assert_uint_gt(r[i].offset, r[i - 1].offset + r[i - 1].length);
                        if (i > 0)
                                ck_assert_int_ge(r[i].fd, r[i - 1].fd);
                        for (uint64_t b = 0; b < r[i].length; b++)
                                got[r[i].fd][r[i].offset + b] = 1;
                }
                ck_assert_mem_eq(want, got, sizeof(want));
        }
}
END_TEST

START_TEST(test_pieces_and_validity) {
        zr_io_range r[] = { { 0, 0, 1 }, { 0, 10, 64 }, { 0, 100, 65 }, { 0, 0, 0 } };
        ck_assert_uint_eq(zr_io_ranges_pieces(r, 4, 64), 1 + 1 + 2);
        ck_assert_uint_eq(zr_io_ranges_pieces(r, 4, 1), 1 + 64 + 65);
        ck_assert_int_eq(zr_io_ranges_valid(r, 4), 1);
        zr_io_range big = { 0, (uint64_t)INT64_MAX - 10, 10 };
        ck_assert_int_eq(zr_io_ranges_valid(&big, 1), 1);
        big.length = 11;
        ck_assert_int_eq(zr_io_ranges_valid(&big, 1), 0);
        big = (zr_io_range){ 0, UINT64_MAX, 0 };
        ck_assert_int_eq(zr_io_ranges_valid(&big, 1), 0);
        big = (zr_io_range){ 0, 1, UINT64_MAX };
        ck_assert_int_eq(zr_io_ranges_valid(&big, 1), 0);
}
END_TEST

int main(void) {
        Suite *s = suite_create("range");
        TL_TCASE(s, "ranges", 0, test_merge_sorts_merges_and_drops_empty,
                 test_merge_keeps_descriptors_apart, test_merge_matches_model,
                 test_pieces_and_validity);
        return tl_run_suite(s);
}
