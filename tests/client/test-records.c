/* test-records.c: what libzrc computes without a daemon: dtype sizes, schemas,
 * codec names, error names, and the ragged record layout of docs/DATASETS.md
 * (u64 LE ndim, u64 LE dims, payload), byte for byte. */
#include <check.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "check-run.h"
#include "zrc.h"

START_TEST(test_dtypes) {
        ck_assert_int_eq(zrc_dtype_itemsize("<f4"), 4);
        ck_assert_int_eq(zrc_dtype_itemsize("|u1"), 1);
        ck_assert_int_eq(zrc_dtype_itemsize("|b1"), 1);
        ck_assert_int_eq(zrc_dtype_itemsize(">i8"), 8);
        ck_assert_int_eq(zrc_dtype_itemsize("<c16"), 16);
        ck_assert_int_eq(zrc_dtype_itemsize("f8"), 8);
        ck_assert_int_eq(zrc_dtype_itemsize("<U4"), -EINVAL);
        ck_assert_int_eq(zrc_dtype_itemsize("|O"), -EINVAL);
        ck_assert_int_eq(zrc_dtype_itemsize("<f"), -EINVAL);
        ck_assert_int_eq(zrc_dtype_itemsize("<f0"), -EINVAL);
        ck_assert_int_eq(zrc_dtype_itemsize("<f4x"), -EINVAL);
        ck_assert_int_eq(zrc_dtype_itemsize(""), -EINVAL);
        ck_assert_int_eq(zrc_dtype_itemsize(NULL), -EINVAL);
}
END_TEST

START_TEST(test_schemas) {
        uint64_t shape[] = { 28, 28 };
        zrc_schema s;

        ck_assert_int_eq(zrc_schema_dense(&s, "|u1", shape, 2, ZRC_CODEC_ZSTD), 0);
        ck_assert_int_eq(s.kind, ZRC_DENSE);
        ck_assert_uint_eq(s.ndim, 2);
        ck_assert_uint_eq(zrc_schema_record_bytes(&s), 784);
        ck_assert_int_eq(zrc_schema_dense(&s, "<f8", NULL, 0, ZRC_CODEC_RAW), 0);
        ck_assert_uint_eq(zrc_schema_record_bytes(&s), 8);
        ck_assert_int_eq(zrc_schema_dense(&s, "<f8", NULL, 2, ZRC_CODEC_RAW), -EINVAL);
        ck_assert_int_eq(zrc_schema_dense(&s, "<x8", NULL, 0, ZRC_CODEC_RAW), -EINVAL);
        ck_assert_int_eq(zrc_schema_dense(&s, "<f4", shape, ZRC_NDIM_MAX + 1, ZRC_CODEC_RAW),
                         -EINVAL);
        ck_assert_int_eq(zrc_schema_dense(&s, "<f4", NULL, 0, (zrc_codec)7), -EINVAL);
        ck_assert_int_eq(zrc_schema_ragged(&s, "<i4", 1, ZRC_CODEC_ZSTD_DICT), 0);
        ck_assert_int_eq(s.kind, ZRC_RAGGED);
        ck_assert_uint_eq(zrc_schema_record_bytes(&s), 0);
        ck_assert_int_eq(zrc_schema_ragged(&s, "<i4", 0, ZRC_CODEC_RAW), 0); /* any ndim */
        ck_assert_uint_eq(s.ndim, 0);
        ck_assert_int_eq(zrc_schema_ragged(&s, "<i4", 33, ZRC_CODEC_RAW), -EINVAL);
}
END_TEST

START_TEST(test_names) {
        zrc_codec c;

        ck_assert_str_eq(zrc_codec_name(ZRC_CODEC_RAW), "raw");
        ck_assert_str_eq(zrc_codec_name(ZRC_CODEC_ZSTD), "zstd");
        ck_assert_str_eq(zrc_codec_name(ZRC_CODEC_ZSTD_DICT), "zstd_dict");
        ck_assert_ptr_null(zrc_codec_name((zrc_codec)3));
        ck_assert_int_eq(zrc_codec_parse("zstd_dict", &c), 0);
        ck_assert_int_eq(c, ZRC_CODEC_ZSTD_DICT);
        ck_assert_int_eq(zrc_codec_parse("lz4", &c), -ZR_E_BAD_CODEC);
        ck_assert_str_eq(zrc_error_name(-ZR_E_RANGE), "ZR_E_RANGE");
        ck_assert_str_eq(zrc_error_name(ZR_E_SHUTDOWN), "ZR_E_SHUTDOWN");
        ck_assert_str_eq(zrc_error_name(-ENOENT), "ENOENT");
        ck_assert_str_eq(zrc_error_name(-ECONNREFUSED), "ECONNREFUSED");
        ck_assert_ptr_null(zrc_error_name(-99999));
}
END_TEST

START_TEST(test_ragged_pack) {
        static const uint8_t want[] = {
                2, 0, 0, 0, 0, 0, 0, 0, /* ndim */
                2, 0, 0, 0, 0, 0, 0, 0, /* dims[0] */
                3, 0, 0, 0, 0, 0, 0, 0, /* dims[1] */
                1, 0, 2, 0, 3, 0, 4, 0, 5, 0, 6, 0, /* six <u2 */
        };
        const uint16_t payload[] = { 1, 2, 3, 4, 5, 6 };
        uint64_t dims[] = { 2, 3 }, got_dims[2];
        uint8_t buf[64];

        ck_assert_uint_eq(zrc_ragged_record_bytes(dims, 2, 2), sizeof(want));
        memset(buf, 0xee, sizeof(buf));
        /* unaligned destination: records are packed back to back */
        ck_assert_uint_eq(zrc_ragged_pack(buf + 3, dims, 2, 2, payload), sizeof(want));
        ck_assert_mem_eq(buf + 3, want, sizeof(want));
        ck_assert_uint_eq(buf[3 + sizeof(want)], 0xee);

        ck_assert_int_eq(zrc_ragged_unpack(buf + 3, sizeof(want), 2, got_dims), 24);
        ck_assert_uint_eq(got_dims[0], 2);
        ck_assert_uint_eq(got_dims[1], 3);
        ck_assert_int_eq(zrc_ragged_unpack(buf + 3, sizeof(want), 1, NULL), -EINVAL);
        ck_assert_int_eq(zrc_ragged_unpack(buf + 3, 20, 2, NULL), -EINVAL);

        /* an empty record keeps its header */
        dims[0] = 0;
        ck_assert_uint_eq(zrc_ragged_record_bytes(dims, 1, 4), 16);
        ck_assert_uint_eq(zrc_ragged_pack(buf, dims, 1, 4, NULL), 16);
        ck_assert_uint_eq(buf[0], 1);
        ck_assert_uint_eq(buf[8], 0);

        /* overflow is reported, not wrapped */
        dims[0] = UINT64_MAX / 2;
        dims[1] = 4;
        ck_assert_uint_eq(zrc_ragged_record_bytes(dims, 2, 8), UINT64_MAX);
}
END_TEST

int main(void) {
        Suite *s = suite_create("records");
        TL_TCASE(s, "local", 0, test_dtypes, test_schemas, test_names, test_ragged_pack);
        return tl_run_suite(s);
}
