/* test-format.c: meta.zr and RecordLoc bytes against hand-written layouts, and
 * the header's refusals. */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "check-run.h"
#include "store/format.h"

START_TEST(test_header_bytes) {
        zr_header h = {
                .codec = ZR_CODEC_ZSTD,
                .tail_chunk = 0x04030201,
                .tail_offset = 0x000c0b0a,
                .length = 0x1817161514131211ULL,
                .chunk_log2 = 20,
                .flags = ZR_HEADER_FLAG_DICT,
        };
        static const uint8_t expected[32] = {
                'Z', 'R', 'E', 'C',             /* magic */
                1,                              /* version */
                1,                              /* codec */
                0x01, 0x02, 0x03, 0x04,         /* tail_chunk */
                0x0a, 0x0b, 0x0c, 0x00,         /* tail_offset */
                0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17, 0x18, /* length */
                20,                             /* chunk_log2 */
                0x01,                           /* flags */
                0, 0, 0, 0, 0, 0, 0, 0,         /* reserved */
        };
        uint8_t out[32];
        memset(out, 0xee, sizeof(out));
        zr_header_encode(&h, out);
        ck_assert_mem_eq(out, expected, 32);

        zr_header back;
        ck_assert_int_eq(zr_header_decode(out, 32, &back, NULL), 0);
        ck_assert_uint_eq(back.version, 1);
        ck_assert_uint_eq(back.codec, ZR_CODEC_ZSTD);
        ck_assert_uint_eq(back.tail_chunk, h.tail_chunk);
        ck_assert_uint_eq(back.tail_offset, 0x000c0b0a);
        ck_assert_uint_eq(back.length, h.length);
        ck_assert_uint_eq(zr_header_chunk_log2(&back), 20);
        ck_assert_uint_eq(back.flags, ZR_HEADER_FLAG_DICT);
}
END_TEST

START_TEST(test_header_seed_store) {
        /* a seed-format header: reserved all zero means 4 GiB chunks */
        static const uint8_t seed[32] = {
                'Z', 'R', 'E', 'C', 1, 0, 2, 0, 0, 0, 0x00, 0x10, 0, 0,
                5, 0, 0, 0, 0, 0, 0, 0,
        };
        zr_header h;
        ck_assert_int_eq(zr_header_decode(seed, 32, &h, NULL), 0);
        ck_assert_uint_eq(zr_header_chunk_log2(&h), 32);
        ck_assert_uint_eq(h.tail_chunk, 2);
        ck_assert_uint_eq(h.tail_offset, 0x1000);
        ck_assert_uint_eq(h.length, 5);
        uint8_t out[32];
        zr_header_encode(&h, out);
        ck_assert_mem_eq(out, seed, 32);
}
END_TEST

START_TEST(test_header_refusals) {
        uint8_t buf[32];
        zr_header h = { .codec = ZR_CODEC_RAW, .length = 3 }, out;
        zr_error err = {0};

        zr_header_encode(&h, buf);
        buf[0] = 'X';
        ck_assert_int_eq(zr_header_decode(buf, 32, &out, &err), -ZR_E_BAD_MAGIC);
        ck_assert_ptr_nonnull(strstr(err.message, "meta.zr"));
        zr_error_clear(&err);
        ck_assert_int_eq(zr_header_decode(buf, 2, &out, &err), -ZR_E_BAD_MAGIC);

        zr_header_encode(&h, buf);
        ck_assert_int_eq(zr_header_decode(buf, 31, &out, NULL), -ZR_E_CORRUPT);
        ck_assert_int_eq(zr_header_decode(buf, 0, &out, NULL), -ZR_E_BAD_MAGIC);

        buf[4] = 2;
        zr_error_clear(&err);
        ck_assert_int_eq(zr_header_decode(buf, 32, &out, &err), -ZR_E_BAD_VERSION);
        ck_assert_ptr_nonnull(strstr(err.message, "2"));

        zr_header_encode(&h, buf);
        buf[5] = 3;
        ck_assert_int_eq(zr_header_decode(buf, 32, &out, NULL), -ZR_E_BAD_CODEC);

        zr_header_encode(&h, buf);
        buf[22] = 5;
        ck_assert_int_eq(zr_header_decode(buf, 32, &out, NULL), -ZR_E_CORRUPT);
        buf[22] = 33;
        ck_assert_int_eq(zr_header_decode(buf, 32, &out, NULL), -ZR_E_CORRUPT);

        zr_header_encode(&h, buf);
        buf[22] = 16;
        zr_le32_put(buf + 10, 65537); /* tail past a 64 KiB chunk */
        ck_assert_int_eq(zr_header_decode(buf, 32, &out, NULL), -ZR_E_CORRUPT);

        zr_header_encode(&h, buf);
        buf[30] = 0x5a; /* other reserved bytes are ignored */
        ck_assert_int_eq(zr_header_decode(buf, 32, &out, NULL), 0);
}
END_TEST

START_TEST(test_loc_bytes) {
        zr_loc l = { .offset = 0x04030201, .phys_length = 0x08070605,
                     .logic_length = 0x0c0b0a09, .chunk_id = 0x100f0e0d };
        static const uint8_t expected[16] = {
                0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08,
                0x09, 0x0a, 0x0b, 0x0c, 0x0d, 0x0e, 0x0f, 0x10,
        };
        uint8_t out[16];
        zr_loc_encode(&l, out);
        ck_assert_mem_eq(out, expected, 16);
        zr_loc back;
        zr_loc_decode(expected, &back);
        ck_assert_uint_eq(back.offset, l.offset);
        ck_assert_uint_eq(back.phys_length, l.phys_length);
        ck_assert_uint_eq(back.logic_length, l.logic_length);
        ck_assert_uint_eq(back.chunk_id, l.chunk_id);
}
END_TEST

START_TEST(test_le_helpers) {
        uint8_t b[8];
        zr_le64_put(b, 0x0123456789abcdefULL);
        ck_assert_uint_eq(b[0], 0xef);
        ck_assert_uint_eq(b[7], 0x01);
        ck_assert_uint_eq(zr_le64_get(b), 0x0123456789abcdefULL);
        ck_assert_uint_eq(zr_le32_get(b + 4), 0x01234567);
}
END_TEST

int main(void) {
        Suite *s = suite_create("format");
        TL_TCASE(s, "core", 0, test_header_bytes, test_header_seed_store, test_header_refusals,
                 test_loc_bytes, test_le_helpers);
        return tl_run_suite(s);
}
