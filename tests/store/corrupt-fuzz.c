/* corrupt-fuzz.c: the corrupt suite's two fuzz loops (fixed seeds): random
 * bytes over meta.zr and over one .loc entry; every call must return 0 or a
 * known code with a message (corrupt.h). */
#include <check.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "corrupt.h"
#include "util.h"

#define FUZZ_ITERATIONS 300
#define FUZZ_SEED UINT64_C(0xf022)
#define FUZZ_VERIFY_MAX 4096 /* verify a fuzzed store only if it claims this few records */

/* Opens read-only and exercises every read path; every failure must carry a
 * known code and a message. For a compressed store with an intact meta.zr a
 * successful gather must return the right bytes (gather_one checks). */
static void fuzz_probe(const fixture *f, size_t iter, const char *what, int check_bytes) {
        zr_store *s = NULL;
        zr_error err = {0};
        int r = fixture_open(f, 1, &s, &err);
        if (r < 0) {
                ck_assert_msg(zr_error_name(r) || r > -1000, "%s %zu: open returned %d", what, iter, r);
                ck_assert_msg(err.message[0], "%s %zu: open failed without a message", what, iter);
                return;
        }
        uint64_t n = zr_store_length(s);
        uint64_t want = n < TEST_RECORDS ? n : TEST_RECORDS;
        uint8_t *buf = malloc(RECORD_MAX);
        ck_assert_ptr_nonnull(buf);
        for (uint64_t i = 0; i < want + 1; i++) {
                uint64_t idx = i < want ? i : n - 1; /* and the last index it claims */
                if (n == 0)
                        break;
                if (check_bytes && idx < TEST_RECORDS) {
                        r = gather_one(s, idx, &err);
                } else {
                        uint64_t len;
                        zr_error_clear(&err);
                        r = zr_store_gather(s, &idx, 1, buf, RECORD_MAX, &len, &err);
                }
                if (r < 0)
                        ck_assert_msg(err.message[0] && err.code == -r,
                                      "%s %zu: gather %" PRIu64 " returned %d with message \"%s\"",
                                      what, iter, idx, r, err.message);
        }
        free(buf);
        zr_stats stats;
        zr_error_clear(&err);
        r = zr_store_stats(s, &stats, &err);
        ck_assert(r == 0 || (err.message[0] && err.code == -r));
        /* verify walks every entry the header claims: a fuzzed length of 10^8
         * records is a legitimately slow verify, not something to wait for here */
        if (n <= FUZZ_VERIFY_MAX) {
                zr_verify_report rep;
                zr_error_clear(&err);
                r = zr_store_verify(s, &rep, &err);
                ck_assert_msg(r == 0 || (err.message[0] && err.code == -r),
                              "%s %zu: verify returned %d with message \"%s\"", what, iter, r,
                              err.message);
        }
        zr_store_close(s, NULL);
}

START_TEST(test_fuzz_meta) {
        read_mode = _i;
        for (int c = 0; c <= 1; c++) {
                fixture f;
                uint8_t orig[32], m[32];
                uint64_t rng = FUZZ_SEED + (uint64_t)c;

                fixture_make(&f, (enum zr_codec)c);
                file_pread(&f, "meta.zr", orig, 32, 0);
                for (size_t it = 0; it < FUZZ_ITERATIONS / 2; it++) {
                        memcpy(m, orig, 32);
                        size_t k = 1 + tl_rand(&rng) % 4;
                        for (size_t j = 0; j < k; j++)
                                m[tl_rand(&rng) % 32] = (uint8_t)tl_rand(&rng);
                        file_pwrite(&f, "meta.zr", m, 32, 0);
                        fuzz_probe(&f, it, "meta.zr fuzz", 0);
                }
                file_pwrite(&f, "meta.zr", orig, 32, 0);
                fuzz_probe(&f, FUZZ_ITERATIONS, "meta.zr restored", 1);
                fixture_done(&f);
        }
}
END_TEST

START_TEST(test_fuzz_loc) {
        read_mode = _i;
        for (int c = 0; c <= 1; c++) {
                fixture f;
                uint8_t orig[16], e[16];
                uint64_t rng = FUZZ_SEED * 3 + (uint64_t)c;

                fixture_make(&f, (enum zr_codec)c);
                for (size_t it = 0; it < FUZZ_ITERATIONS / 2; it++) {
                        uint64_t rec = tl_rand(&rng) % TEST_RECORDS;
                        loc_read(&f, rec, orig);
                        memcpy(e, orig, 16);
                        size_t k = 1 + tl_rand(&rng) % 4;
                        for (size_t j = 0; j < k; j++)
                                e[tl_rand(&rng) % 16] = (uint8_t)tl_rand(&rng);
                        loc_write(&f, rec, e);
                        /* a zstd frame cannot be moved or resized and still decode to
                         * the right length with the right checksum: bytes are checked */
                        fuzz_probe(&f, it, ".loc fuzz", c == ZR_CODEC_ZSTD);
                        loc_write(&f, rec, orig);
                }
                fuzz_probe(&f, FUZZ_ITERATIONS, ".loc restored", 1);
                fixture_done(&f);
        }
}
END_TEST

void corrupt_add_fuzz_cases(TCase *tc) {
        tcase_add_loop_test(tc, test_fuzz_meta, 0, 2);
        tcase_add_loop_test(tc, test_fuzz_loc, 0, 2);
}
