/* test-format.c: meta.zr and RecordLoc bytes against hand-written layouts, the
 * two versions (1 for small chunks, 3 for 4 GiB ones, as loaderx 1.5 writes them),
 * and the header's refusals, including a loaderx 1.0-1.4 meta.zr. */
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
        ck_assert_uint_eq(back.version, ZR_FORMAT_VERSION);
        ck_assert_uint_eq(back.codec, ZR_CODEC_ZSTD);
        ck_assert_uint_eq(back.tail_chunk, h.tail_chunk);
        ck_assert_uint_eq(back.tail_offset, 0x000c0b0a);
        ck_assert_uint_eq(back.length, h.length);
        ck_assert_uint_eq(zr_header_chunk_log2(&back), 20);
        ck_assert_uint_eq(back.flags, ZR_HEADER_FLAG_DICT);
}
END_TEST

START_TEST(test_header_seed_store) {
        /* a seed-format header: reserved all zero means 4 GiB chunks; a version 1
         * header of 4 GiB chunks is read, and written again as version 3 */
        uint8_t seed[32] = {
                'Z', 'R', 'E', 'C', 1, 0, 2, 0, 0, 0, 0x00, 0x10, 0, 0,
                5, 0, 0, 0, 0, 0, 0, 0,
        };
        zr_header h;
        uint8_t out[32];

        ck_assert_int_eq(zr_header_decode(seed, 32, &h, NULL), 0);
        ck_assert_uint_eq(zr_header_chunk_log2(&h), 32);
        ck_assert_uint_eq(h.tail_chunk, 2);
        ck_assert_uint_eq(h.tail_offset, 0x1000);
        ck_assert_uint_eq(h.length, 5);
        zr_header_encode(&h, out);
        seed[4] = ZR_FORMAT_VERSION_LX;
        ck_assert_mem_eq(out, seed, 32);
}
END_TEST

/* The header loaderx 1.5.7 writes (its Zig packed struct, laid out by hand here):
 * version 3, zstd_dict, tail (1, 0x20304), 7 records, reserved zero. */
START_TEST(test_header_loaderx157) {
        static const uint8_t lx[32] = {
                0x5a, 0x52, 0x45, 0x43,         /* 0x4345525a, "ZREC" */
                3, 2,                           /* version, codec */
                1, 0, 0, 0,                     /* tail_chunk */
                0x04, 0x03, 0x02, 0x00,         /* tail_offset */
                7, 0, 0, 0, 0, 0, 0, 0,         /* length */
        };
        uint8_t out[32], bad[32];
        zr_header h;

        ck_assert_int_eq(zr_header_decode(lx, 32, &h, NULL), 0);
        ck_assert_uint_eq(h.version, 3);
        ck_assert_uint_eq(h.codec, ZR_CODEC_ZSTD_DICT);
        ck_assert_uint_eq(h.tail_chunk, 1);
        ck_assert_uint_eq(h.tail_offset, 0x20304);
        ck_assert_uint_eq(h.length, 7);
        ck_assert_uint_eq(zr_header_chunk_log2(&h), 32);
        ck_assert_uint_eq(h.flags, 0);
        zr_header_encode(&h, out);
        ck_assert_mem_eq(out, lx, 32);

        /* a small-chunk store is written as version 1, which loaderx 1.5 refuses */
        h.chunk_log2 = 16;
        h.tail_offset = 100;
        zr_header_encode(&h, out);
        ck_assert_uint_eq(out[4], ZR_FORMAT_VERSION);
        ck_assert_uint_eq(out[22], 16);

        /* version 3 promises 4 GiB chunks */
        memcpy(bad, lx, 32);
        bad[22] = 16;
        bad[10] = bad[11] = bad[12] = 0;
        ck_assert_int_eq(zr_header_decode(bad, 32, &h, NULL), -ZR_E_CORRUPT);
}
END_TEST

/* loaderx 1.0-1.4 meta.zr: a 16-byte header (version a u16 1, or a u8 2 then the
 * codec) and the table, 16 + 2^28 bytes. Refused by version, naming loaderx. */
START_TEST(test_header_legacy) {
        uint8_t v1[33] = { 'Z', 'R', 'E', 'C', 1, 0, 0, 0, 0x10, 0, 0, 0, 3, 0, 0, 0 };
        uint8_t v2[33] = { 'Z', 'R', 'E', 'C', 2, 1, 0, 0, 0x10, 0, 0, 0, 3, 0, 0, 0 };
        zr_error err = {0};

        ck_assert_int_eq(zr_header_check_legacy(v1, 33, ZR_LEGACY_META_SIZE, &err), -ZR_E_BAD_VERSION);
        ck_assert_ptr_nonnull(strstr(err.message, "loaderx 1.0-1.4"));
        ck_assert_ptr_nonnull(strstr(err.message, "format 1"));
        zr_error_clear(&err);
        ck_assert_int_eq(zr_header_check_legacy(v2, 33, ZR_LEGACY_META_SIZE, &err), -ZR_E_BAD_VERSION);
        ck_assert_ptr_nonnull(strstr(err.message, "format 2"));
        /* any other size, magic or version is not one: decode says what it is */
        ck_assert_int_eq(zr_header_check_legacy(v1, 33, 48, NULL), 0);
        ck_assert_int_eq(zr_header_check_legacy(v2, 5, ZR_LEGACY_META_SIZE, NULL), 0);
        v1[5] = 1; /* zrecord version 1 of a zstd store, grown to that size */
        ck_assert_int_eq(zr_header_check_legacy(v1, 33, ZR_LEGACY_META_SIZE, NULL), 0);
        v2[0] = 'X';
        ck_assert_int_eq(zr_header_check_legacy(v2, 33, ZR_LEGACY_META_SIZE, NULL), 0);
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
        ck_assert_ptr_nonnull(strstr(err.message, "version 2"));
        buf[4] = 4;
        ck_assert_int_eq(zr_header_decode(buf, 32, &out, NULL), -ZR_E_BAD_VERSION);
        buf[4] = 0;
        ck_assert_int_eq(zr_header_decode(buf, 32, &out, NULL), -ZR_E_BAD_VERSION);

        zr_header_encode(&h, buf);
        buf[5] = 3;
        ck_assert_int_eq(zr_header_decode(buf, 32, &out, NULL), -ZR_E_BAD_CODEC);

        zr_header_encode(&h, buf);
        buf[4] = ZR_FORMAT_VERSION;
        buf[22] = 5;
        ck_assert_int_eq(zr_header_decode(buf, 32, &out, NULL), -ZR_E_CORRUPT);
        buf[22] = 33;
        ck_assert_int_eq(zr_header_decode(buf, 32, &out, NULL), -ZR_E_CORRUPT);

        zr_header_encode(&h, buf);
        buf[4] = ZR_FORMAT_VERSION;
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
        TL_TCASE(s, "core", 0, test_header_bytes, test_header_seed_store, test_header_loaderx157,
                 test_header_legacy, test_header_refusals,
                 test_loc_bytes, test_le_helpers);
        return tl_run_suite(s);
}
