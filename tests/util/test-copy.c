/* test-copy.c: a streaming copy writes exactly the bytes memcpy would, at every
 * alignment and length, and nothing around them. */
#include <check.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "util/copy.h"
#include "check-run.h"

#define ROOM 1024
#define GUARD 64

/* The first byte of [p, p + n) that is not `v`, or n. */
static size_t first_not(const uint8_t *p, size_t n, uint8_t v) {
        size_t i = 0;
        while (i < n && p[i] == v)
                i++;
        return i;
}

START_TEST(test_every_alignment_and_length) {
        static uint8_t src[ROOM + GUARD], dst[ROOM + 2 * GUARD];
        for (size_t i = 0; i < sizeof(src); i++)
                src[i] = (uint8_t)(i * 131 + 7);
        /* lengths across the unaligned head, whole 64-byte blocks and the tail;
         * destinations and sources at every offset in a 16-byte granule */
        for (size_t dofs = 0; dofs < 16; dofs++) {
                for (size_t sofs = 0; sofs < 16; sofs += 5) {
                        for (size_t n = 0; n <= 600; n += (n < 200 ? 1 : 37)) {
                                memset(dst, 0xA5, sizeof(dst));
                                zr_copy_stream(dst + GUARD + dofs, src + sofs, n);
                                zr_copy_stream_done();
                                ck_assert_msg(memcmp(dst + GUARD + dofs, src + sofs, n) == 0,
                                              "bytes differ: dst +%zu src +%zu n %zu", dofs,
                                              sofs, n);
                                size_t end = GUARD + dofs + n;
                                ck_assert_msg(first_not(dst, GUARD + dofs, 0xA5) == GUARD + dofs,
                                              "wrote before: dst +%zu n %zu", dofs, n);
                                ck_assert_msg(first_not(dst + end, sizeof(dst) - end, 0xA5) ==
                                                      sizeof(dst) - end,
                                              "wrote after: dst +%zu n %zu", dofs, n);
                        }
                }
        }
}
END_TEST

START_TEST(test_large_copy) {
        size_t n = (4u << 20) + 3;
        uint8_t *src = malloc(n), *dst = malloc(n + 1);
        ck_assert_ptr_nonnull(src);
        ck_assert_ptr_nonnull(dst);
        for (size_t i = 0; i < n; i++)
                src[i] = (uint8_t)(i ^ (i >> 9));
        dst[n] = 0x5A;
        zr_copy_stream(dst, src, n);
        zr_copy_stream_done();
        ck_assert(memcmp(dst, src, n) == 0);
        ck_assert_uint_eq(dst[n], 0x5A);
        free(src);
        free(dst);
}
END_TEST

/* The threshold is half a cache this machine has (or the 16 MiB default):
 * never 0 (every gather would stream) and a batch far past it streams where
 * streaming exists. */
START_TEST(test_threshold) {
        uint64_t m = zr_copy_stream_min();
        ck_assert_uint_gt(m, 0);
        ck_assert_uint_eq(zr_copy_stream_min(), m);
        ck_assert(!zr_copy_streams(m - 1));
#if defined(__x86_64__)
        ck_assert(zr_copy_streams(m));
        ck_assert(zr_copy_streams(UINT64_MAX));
#else
        ck_assert(!zr_copy_streams(UINT64_MAX));
#endif
}
END_TEST

TL_SUITE_MAIN("copy", test_every_alignment_and_length, test_large_copy, test_threshold)
