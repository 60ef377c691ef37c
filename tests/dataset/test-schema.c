/* test-schema.c: dtype strings, schema.msgpack round trips and every way a schema
 * file can be malformed, and the ragged record header. No store needed. */
#include <check.h>
#include <msgpack.h>
#include <stdlib.h>
#include <string.h>

#include "dataset/dtype.h"
#include "dataset/ragged.h"
#include "dataset/schema.h"
#include "helpers.h"
#include "check-run.h"

START_TEST(test_dtype_sizes) {
        static const struct { const char *in, *canon; unsigned size; } ok[] = {
                { "|b1", "|b1", 1 }, { "<b1", "|b1", 1 }, { "b1", "|b1", 1 },
                { "|u1", "|u1", 1 }, { "|i1", "|i1", 1 }, { "<u2", "<u2", 2 },
                { "<i4", "<i4", 4 }, { ">i8", ">i8", 8 }, { "<f2", "<f2", 2 },
                { "<f4", "<f4", 4 }, { "=f8", "<f8", 8 }, { "f4", "<f4", 4 },
                { "<c8", "<c8", 8 }, { ">c16", ">c16", 16 }, { "<u8", "<u8", 8 },
        };
        for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
                zr_dtype d;
                zr_error err = {0};
                ck_assert_msg(zr_dtype_parse(ok[i].in, &d, &err) == 0, "%s: %s", ok[i].in,
                              err.message);
                ck_assert_str_eq(d.str, ok[i].canon);
                ck_assert_uint_eq(d.itemsize, ok[i].size);
        }
}
END_TEST

START_TEST(test_dtype_bad) {
        static const char *bad[] = {
                "", "<", "<f", "<f3", "<f16", "<f12", "|f4", "<O8", "|S5", "<U4",
                "|V16", "<M8", "<b2", "<i3", "<i16", "<c4", "<c32", "<fx", "xf4",
                "<f4 ", "<f0004x", "<<f4", "<u0",
        };
        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
                zr_dtype d;
                zr_error err = {0};
                ck_assert_msg(zr_dtype_parse(bad[i], &d, &err) == -ZR_E_SCHEMA, "%s accepted",
                              bad[i]);
                ck_assert_int_eq(err.code, ZR_E_SCHEMA);
                ck_assert_ptr_nonnull(strstr(err.message, "dtype"));
        }
        zr_dtype a, b;
        ck_assert_int_eq(zr_dtype_parse("<f4", &a, NULL), 0);
        ck_assert_int_eq(zr_dtype_parse(">f4", &b, NULL), 0);
        ck_assert(!zr_dtype_equal(&a, &b));
        ck_assert_int_eq(zr_dtype_parse("=f4", &b, NULL), 0);
        ck_assert(zr_dtype_equal(&a, &b));
}
END_TEST

static void roundtrip(const zr_schema *s) {
        void *buf = NULL;
        size_t len = 0;
        zr_schema back;
        zr_error err = {0};

        ck_assert_int_eq(zr_schema_encode(s, &buf, &len, &err), 0);
        ck_assert_int_eq(zr_schema_decode(buf, len, &back, &err), 0);
        ck_assert_int_eq(back.kind, s->kind);
        ck_assert_str_eq(back.dtype.str, s->dtype.str);
        ck_assert_uint_eq(back.dtype.itemsize, s->dtype.itemsize);
        ck_assert_uint_eq(back.ndim, s->ndim);
        ck_assert_int_eq(back.codec, s->codec);
        if (s->kind == ZR_SCHEMA_DENSE)
                for (uint32_t i = 0; i < s->ndim; i++)
                        ck_assert_uint_eq(back.item_shape[i], s->item_shape[i]);
        free(buf);
}

START_TEST(test_schema_roundtrip) {
        zr_schema s;
        uint64_t shape[3] = { 28, 28, 3 };
        uint64_t big[ZR_SCHEMA_NDIM_MAX];

        ck_assert_int_eq(zr_schema_init_dense(&s, "|u1", shape, 3, ZR_CODEC_ZSTD, NULL), 0);
        ck_assert_uint_eq(zr_schema_item_bytes(&s), 28 * 28 * 3);
        roundtrip(&s);
        ck_assert_int_eq(zr_schema_init_dense(&s, "<f8", NULL, 0, ZR_CODEC_RAW, NULL), 0);
        ck_assert_uint_eq(zr_schema_item_bytes(&s), 8);
        roundtrip(&s);
        for (int i = 0; i < ZR_SCHEMA_NDIM_MAX; i++)
                big[i] = 1;
        big[0] = 0;
        ck_assert_int_eq(zr_schema_init_dense(&s, "<f2", big, ZR_SCHEMA_NDIM_MAX,
                                              ZR_CODEC_ZSTD_DICT, NULL), 0);
        ck_assert_uint_eq(zr_schema_item_bytes(&s), 0);
        roundtrip(&s);
        ck_assert_int_eq(zr_schema_init_ragged(&s, "<i4", 1, ZR_CODEC_RAW, NULL), 0);
        roundtrip(&s);
        ck_assert_int_eq(zr_schema_init_ragged(&s, ">c16", 32, ZR_CODEC_ZSTD, NULL), 0);
        roundtrip(&s);
        ck_assert_int_eq(zr_schema_init_ragged(&s, "<f4", ZR_SCHEMA_NDIM_ANY, ZR_CODEC_ZSTD, NULL),
                         0);
        roundtrip(&s);

        /* init refuses what decode would refuse */
        zr_error err = {0};
        ck_assert_int_eq(zr_schema_init_dense(&s, "<f4", big, 33, ZR_CODEC_RAW, &err),
                         -ZR_E_SCHEMA);
        uint64_t huge[2] = { 1u << 20, 1u << 20 };
        ck_assert_int_eq(zr_schema_init_dense(&s, "|u1", huge, 2, ZR_CODEC_RAW, NULL),
                         -ZR_E_SCHEMA);
        ck_assert_int_eq(zr_schema_init_ragged(&s, "<i4", 33, ZR_CODEC_RAW, NULL), -ZR_E_SCHEMA);
        ck_assert_int_eq(zr_schema_init_ragged(&s, "<i4", 1, (enum zr_codec)7, NULL),
                         -ZR_E_BAD_CODEC);

        char desc[128];
        ck_assert_int_eq(zr_schema_init_dense(&s, "<f4", shape, 2, ZR_CODEC_ZSTD, NULL), 0);
        zr_schema_describe(&s, desc, sizeof(desc));
        ck_assert_str_eq(desc, "dense <f4 item_shape (28, 28) codec zstd");
        ck_assert_int_eq(zr_schema_init_ragged(&s, "<i4", ZR_SCHEMA_NDIM_ANY, ZR_CODEC_RAW, NULL),
                         0);
        zr_schema_describe(&s, desc, sizeof(desc));
        ck_assert_str_eq(desc, "ragged <i4 ndim any codec raw");
        zr_shape_format(shape, 1, desc, sizeof(desc));
        ck_assert_str_eq(desc, "(28,)");
        zr_shape_format(shape, 0, desc, sizeof(desc));
        ck_assert_str_eq(desc, "()");
}
END_TEST

/* A msgpack map built key by key. Values: 's' string, 'u' uint, 'i' int, 'n' nil,
 * 'a' array of uints (count, then values), 'm' empty map, 'f' float. */
typedef struct kv {
        const char *key;
        char type;
        const char *s;
        long long v;
        unsigned count;
        unsigned long long dims[40];
} kv;

static msgpack_sbuffer pack_map(const kv *kvs, size_t n) {
        msgpack_sbuffer sb;
        msgpack_packer pk;

        msgpack_sbuffer_init(&sb);
        msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
        msgpack_pack_map(&pk, n);
        for (size_t i = 0; i < n; i++) {
                msgpack_pack_str_with_body(&pk, kvs[i].key, strlen(kvs[i].key));
                switch (kvs[i].type) {
                case 's': msgpack_pack_str_with_body(&pk, kvs[i].s, strlen(kvs[i].s)); break;
                case 'u': msgpack_pack_uint64(&pk, (uint64_t)kvs[i].v); break;
                case 'i': msgpack_pack_int64(&pk, kvs[i].v); break;
                case 'n': msgpack_pack_nil(&pk); break;
                case 'm': msgpack_pack_map(&pk, 0); break;
                case 'f': msgpack_pack_double(&pk, 1.5); break;
                case 'a':
                        msgpack_pack_array(&pk, kvs[i].count);
                        for (unsigned k = 0; k < kvs[i].count; k++)
                                msgpack_pack_uint64(&pk, kvs[i].dims[k]);
                        break;
                }
        }
        return sb;
}

static void expect_bad(const kv *kvs, size_t n, int code, const char *needle) {
        msgpack_sbuffer sb = pack_map(kvs, n);
        zr_schema s;
        zr_error err = {0};

        ck_assert_int_eq(zr_schema_decode(sb.data, sb.size, &s, &err), -code);
        ck_assert_int_eq(err.code, code);
        ck_assert_msg(strstr(err.message, needle), "\"%s\" not in \"%s\"", needle, err.message);
        msgpack_sbuffer_destroy(&sb);
}

START_TEST(test_schema_malformed_maps) {
        const kv good[] = {
                { "kind", 's', "dense" }, { "dtype", 's', "<f4" },
                { "item_shape", 'a', .count = 2, .dims = { 2, 3 } }, { "codec", 's', "zstd" },
                { "comment", 's', "unknown keys are ignored" }, { "x", 'm' },
        };
        msgpack_sbuffer sb = pack_map(good, 6);
        zr_schema s;
        ck_assert_int_eq(zr_schema_decode(sb.data, sb.size, &s, NULL), 0);
        ck_assert_uint_eq(zr_schema_item_bytes(&s), 24);
        msgpack_sbuffer_destroy(&sb);

        /* missing keys */
        expect_bad(good + 1, 3, ZR_E_SCHEMA, "\"kind\" is missing");
        expect_bad((kv[]){ good[0], good[2], good[3] }, 3, ZR_E_SCHEMA, "\"dtype\" is missing");
        expect_bad((kv[]){ good[0], good[1], good[3] }, 3, ZR_E_SCHEMA, "\"item_shape\" is missing");
        expect_bad(good, 3, ZR_E_SCHEMA, "\"codec\" is missing");
        /* wrong types */
        expect_bad((kv[]){ { "kind", 'u', .v = 1 }, good[1], good[2], good[3] }, 4,
                   ZR_E_SCHEMA, "\"kind\" is an integer");
        expect_bad((kv[]){ good[0], { "dtype", 'n' }, good[2], good[3] }, 4,
                   ZR_E_SCHEMA, "\"dtype\" is nil");
        expect_bad((kv[]){ good[0], good[1], { "item_shape", 's', "(2, 3)" }, good[3] }, 4,
                   ZR_E_SCHEMA, "\"item_shape\" is a string");
        expect_bad((kv[]){ good[0], good[1], good[2], { "codec", 'f' } }, 4,
                   ZR_E_SCHEMA, "\"codec\" is a float");
        /* unknown kind, codec, bad dtype */
        expect_bad((kv[]){ { "kind", 's', "sparse" }, good[1], good[2], good[3] }, 4,
                   ZR_E_SCHEMA, "kind \"sparse\" is unknown");
        expect_bad((kv[]){ good[0], good[1], good[2], { "codec", 's', "lz4" } }, 4,
                   ZR_E_BAD_CODEC, "codec \"lz4\" is unknown");
        expect_bad((kv[]){ good[0], { "dtype", 's', "<f3" }, good[2], good[3] }, 4,
                   ZR_E_SCHEMA, "<f3");
        expect_bad((kv[]){ good[0], { "dtype", 's', "float32" }, good[2], good[3] }, 4,
                   ZR_E_SCHEMA, "dtype \"float32\"");
        /* bad dims: negative, too many, too big */
        expect_bad((kv[]){ good[0], good[1], good[2], good[3], { "kind", 's', "dense" } }, 5,
                   ZR_E_SCHEMA, "appears twice");
        {
                kv many = { "item_shape", 'a', .count = 33 };
                for (int i = 0; i < 33; i++)
                        many.dims[i] = 1;
                expect_bad((kv[]){ good[0], good[1], many, good[3] }, 4, ZR_E_SCHEMA,
                           "33 dimensions");
        }
        expect_bad((kv[]){ good[0], good[1],
                           { "item_shape", 'a', .count = 3, .dims = { 1u << 20, 1u << 20, 4 } },
                           good[3] }, 4, ZR_E_SCHEMA, "larger than a record");
        /* a negative dimension */
        {
                msgpack_sbuffer b;
                msgpack_packer pk;
                msgpack_sbuffer_init(&b);
                msgpack_packer_init(&pk, &b, msgpack_sbuffer_write);
                msgpack_pack_map(&pk, 4);
                msgpack_pack_str_with_body(&pk, "kind", 4);
                msgpack_pack_str_with_body(&pk, "dense", 5);
                msgpack_pack_str_with_body(&pk, "dtype", 5);
                msgpack_pack_str_with_body(&pk, "<f4", 3);
                msgpack_pack_str_with_body(&pk, "item_shape", 10);
                msgpack_pack_array(&pk, 1);
                msgpack_pack_int64(&pk, -3);
                msgpack_pack_str_with_body(&pk, "codec", 5);
                msgpack_pack_str_with_body(&pk, "raw", 3);
                zr_error err = {0};
                ck_assert_int_eq(zr_schema_decode(b.data, b.size, &s, &err), -ZR_E_SCHEMA);
                ck_assert_ptr_nonnull(strstr(err.message, "item_shape[0] is a negative integer"));
                msgpack_sbuffer_destroy(&b);
        }
        /* ragged: ndim rules */
        const kv rag[] = { { "kind", 's', "ragged" }, { "dtype", 's', "<i4" },
                           { "ndim", 'u', .v = 2 }, { "codec", 's', "raw" } };
        sb = pack_map(rag, 4);
        ck_assert_int_eq(zr_schema_decode(sb.data, sb.size, &s, NULL), 0);
        ck_assert_int_eq(s.kind, ZR_SCHEMA_RAGGED);
        ck_assert_uint_eq(s.ndim, 2);
        msgpack_sbuffer_destroy(&sb);
        expect_bad(rag, 2, ZR_E_SCHEMA, "\"codec\" is missing");
        expect_bad((kv[]){ rag[0], rag[1], rag[3] }, 3, ZR_E_SCHEMA, "\"ndim\" is missing");
        {       /* ndim 0: any per record */
                msgpack_sbuffer any = pack_map((kv[]){ rag[0], rag[1], { "ndim", 'u', .v = 0 },
                                                       rag[3] }, 4);
                ck_assert_int_eq(zr_schema_decode(any.data, any.size, &s, NULL), 0);
                ck_assert_uint_eq(s.ndim, ZR_SCHEMA_NDIM_ANY);
                msgpack_sbuffer_destroy(&any);
        }
        expect_bad((kv[]){ rag[0], rag[1], { "ndim", 'u', .v = 33 }, rag[3] }, 4, ZR_E_SCHEMA,
                   "ndim is 33");
        expect_bad((kv[]){ rag[0], rag[1], { "ndim", 'i', .v = -1 }, rag[3] }, 4, ZR_E_SCHEMA,
                   "negative integer");
        expect_bad((kv[]){ rag[0], rag[1], rag[2], rag[3], good[2] }, 5, ZR_E_SCHEMA,
                   "not \"item_shape\"");
        expect_bad((kv[]){ good[0], good[1], good[2], good[3], rag[2] }, 5, ZR_E_SCHEMA,
                   "not \"ndim\"");
}
END_TEST

/* loaderx 1.5.7's schema.msgpack, as its msgpack-python writes it: a dense store
 * with a caller's extra key, and a ragged store with per-record shapes. */
static const char lx_dense[] =
        "\x87\xa6" "format" "\xaf" "loaderx-zrecord" "\xa7" "version" "\x01"
        "\xa4" "kind" "\xa5" "dense" "\xa5" "dtype" "\xa3" "<i4" "\xa5" "codec" "\xa4" "zstd"
        "\xaa" "item_shape" "\x92\x04\x04" "\xa6" "source" "\xa7" "fixture";
static const char lx_ragged[] =
        "\x86\xa6" "format" "\xaf" "loaderx-zrecord" "\xa7" "version" "\x01"
        "\xa4" "kind" "\xa6" "ragged" "\xa5" "dtype" "\xa3" "<f4" "\xa5" "codec" "\xa3" "raw"
        "\xa6" "shapes" "\x93\x92\x02\x04\x91\x05\x93\x03\x03\x03";

/* zrecord reads loaderx 1.5.7's dense schema and writes the very bytes loaderx
 * 1.5.7 writes for it (so loaderx opens zrecord's dense stores); a ragged one of
 * 1.5.7 is refused with a message naming it; "format" and "version" must be
 * loaderx's when present; zrecord's ragged schemas carry no "format". */
START_TEST(test_schema_loaderx157) {
        zr_schema s;
        zr_error err = {0};
        void *buf = NULL;
        size_t len = 0;

        ck_assert_int_eq(zr_schema_decode(lx_dense, sizeof(lx_dense) - 1, &s, &err), 0);
        ck_assert_int_eq(s.kind, ZR_SCHEMA_DENSE);
        ck_assert_str_eq(s.dtype.str, "<i4");
        ck_assert_int_eq(s.codec, ZR_CODEC_ZSTD);
        ck_assert_uint_eq(s.ndim, 2);
        ck_assert_uint_eq(zr_schema_item_bytes(&s), 64);
        ck_assert_int_eq(zr_schema_encode(&s, &buf, &len, NULL), 0);
        /* the same map without the extra key: 6 entries, in loaderx's order */
        ck_assert_uint_eq(len, sizeof(lx_dense) - 1 - (1 + 6 + 1 + 7));
        ck_assert_uint_eq(((uint8_t *)buf)[0], 0x86);
        ck_assert_mem_eq((uint8_t *)buf + 1, lx_dense + 1, len - 1);
        free(buf);

        ck_assert_int_eq(zr_schema_decode(lx_ragged, sizeof(lx_ragged) - 1, &s, &err), -ZR_E_SCHEMA);
        ck_assert_ptr_nonnull(strstr(err.message, "loaderx 1.5.7 ragged store"));

        const kv dense[] = { { "kind", 's', "dense" }, { "dtype", 's', "<f4" },
                             { "item_shape", 'a', .count = 1, .dims = { 3 } }, { "codec", 's', "raw" } };
        expect_bad((kv[]){ { "format", 's', "zrecord" }, dense[0], dense[1], dense[2], dense[3] }, 5,
                   ZR_E_SCHEMA, "\"format\" is another string");
        expect_bad((kv[]){ { "format", 'u', .v = 1 }, dense[0], dense[1], dense[2], dense[3] }, 5,
                   ZR_E_SCHEMA, "\"format\" is an integer");
        expect_bad((kv[]){ { "version", 'u', .v = 2 }, dense[0], dense[1], dense[2], dense[3] }, 5,
                   ZR_E_SCHEMA, "\"version\" is 2");
        expect_bad((kv[]){ { "version", 's', "1" }, dense[0], dense[1], dense[2], dense[3] }, 5,
                   ZR_E_SCHEMA, "not a positive integer");
        expect_bad((kv[]){ { "format", 's', "loaderx-zrecord" }, { "format", 's', "loaderx-zrecord" },
                           dense[0], dense[1], dense[2], dense[3] }, 6, ZR_E_SCHEMA, "appears twice");

        ck_assert_int_eq(zr_schema_init_ragged(&s, "<i4", 2, ZR_CODEC_ZSTD, NULL), 0);
        ck_assert_int_eq(zr_schema_encode(&s, &buf, &len, NULL), 0);
        ck_assert_ptr_null(memmem(buf, len, "format", 6));
        ck_assert_ptr_null(memmem(buf, len, "loaderx", 7));
        free(buf);
}
END_TEST

static void expect_bytes_bad(const void *data, size_t len, const char *needle) {
        zr_schema s;
        zr_error err = {0};

        ck_assert_int_eq(zr_schema_decode(data, len, &s, &err), -ZR_E_SCHEMA);
        ck_assert_msg(strstr(err.message, needle), "\"%s\" not in \"%s\"", needle, err.message);
}

static int decode(const void *data, size_t len, zr_error *err) {
        zr_schema s;

        return zr_schema_decode(data, len, &s, err);
}

START_TEST(test_schema_malformed_bytes) {
        const kv good[] = {
                { "kind", 's', "dense" }, { "dtype", 's', "<f4" },
                { "item_shape", 'a', .count = 2, .dims = { 2, 3 } }, { "codec", 's', "zstd" },
        };
        msgpack_sbuffer sb = pack_map(good, 4);

        /* every truncation is refused, never read past, and trailing bytes */
        expect_cuts_refused(sb.data, sb.size, decode);
        msgpack_sbuffer_destroy(&sb);

        /* not a map */
        expect_bytes_bad("\x93\x01\x02\x03", 4, "an array, not a map");
        expect_bytes_bad("\xa3" "abc", 4, "a string, not a map");
        /* huge declared containers: map32 / array32 / str32 with nothing behind */
        expect_bytes_bad("\xdf\xff\xff\xff\xff", 5, "declares 8589934590 elements");
        expect_bytes_bad("\x81\xa1k\xdd\x7f\xff\xff\xff", 8, "declares 2147483647 elements");
        expect_bytes_bad("\x81\xa1k\xdb\xff\xff\xff\xf0xx", 10, "runs past the end");
        expect_bytes_bad("\x81\xa1k\xc9\xff\xff\xff\xf0\x01", 9, "runs past the end");
        /* a container whose count fits the bytes but whose nested elements do not */
        expect_bytes_bad("\x81\xa1k\x92\x9f\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01"
                         "\x01\x01\x01\x01\x01", 20, "declares 15 elements");
        expect_bytes_bad("\x81\xa1k\x9f\x9f\x9f\x9f\x9f\x9f\x9f\x9f\x9f\x9f\x9f\x9f\x9f"
                         "\x9f\x9f\x9f", 19, "declares 15 elements");
        /* 0xc1 is never used */
        expect_bytes_bad("\x81\xa1k\xc1", 4, "not a msgpack type");
        /* empty and oversized files */
        expect_bytes_bad("", 0, "empty");
        char *big = calloc(ZR_SCHEMA_FILE_MAX + 1, 1);
        expect_bytes_bad(big, ZR_SCHEMA_FILE_MAX + 1, "more than");
        free(big);
}
END_TEST

/* Mutated schemas (flipped bytes, cut, grown) decode or fail cleanly, never crash
 * or read out of bounds (the sanitizer build checks the latter). Deterministic. */
START_TEST(test_schema_mutations) {
        const kv good[] = {
                { "kind", 's', "dense" }, { "dtype", 's', "<f4" },
                { "item_shape", 'a', .count = 3, .dims = { 2, 3, 70000 } },
                { "codec", 's', "zstd_dict" },
        };
        msgpack_sbuffer sb = pack_map(good, 4);
        uint64_t st = 1;
        int decoded = 0;

        for (int iter = 0; iter < 20000; iter++) {
                size_t len = sb.size;
                uint8_t *m = malloc(len + 8);
                memcpy(m, sb.data, len);
                int flips = 1 + (int)(gen_next(&st) % 3);
                for (int f = 0; f < flips; f++)
                        m[gen_next(&st) % len] = (uint8_t)gen_next(&st);
                if (gen_next(&st) % 4 == 0)
                        len = gen_next(&st) % len;
                else if (gen_next(&st) % 8 == 0)
                        for (int k = 0; k < 8; k++)
                                m[len++] = (uint8_t)gen_next(&st);
                /* an exact-size copy, so any overread hits the sanitizer */
                uint8_t *exact = malloc(len ? len : 1);
                memcpy(exact, m, len);
                zr_schema out;
                zr_error err = {0};
                int r = zr_schema_decode(exact, len, &out, &err);
                if (r == 0) {
                        decoded++;
                        ck_assert_uint_le(out.ndim, ZR_SCHEMA_NDIM_MAX);
                } else {
                        ck_assert(r == -ZR_E_SCHEMA || r == -ZR_E_BAD_CODEC);
                        ck_assert_uint_gt(strlen(err.message), 0);
                }
                free(exact);
                free(m);
        }
        /* some mutations (in ignored bytes, or to another valid value) still decode */
        ck_assert_int_gt(decoded, 0);
        msgpack_sbuffer_destroy(&sb);
}
END_TEST

START_TEST(test_ragged_header) {
        zr_schema s;
        uint64_t dims[3] = { 2, 3, 4 }, got[3];
        uint8_t rec[8 * 4 + 2 * 3 * 4 * 4];
        uint64_t bytes;
        zr_error err = {0};

        ck_assert_int_eq(zr_schema_init_ragged(&s, "<f4", 3, ZR_CODEC_RAW, NULL), 0);
        ck_assert_uint_eq(zr_ragged_header_bytes(3), 32);
        ck_assert_int_eq(zr_ragged_record_bytes(dims, 3, 4, &bytes, NULL), 0);
        ck_assert_uint_eq(bytes, sizeof(rec));
        zr_ragged_header_write(rec, dims, 3);
        /* little-endian on disk whatever the host */
        ck_assert_uint_eq(rec[0], 3);
        ck_assert_uint_eq(rec[8], 2);
        ck_assert_uint_eq(rec[9], 0);
        ck_assert_int_eq(zr_ragged_parse(&s, rec, sizeof(rec), 0, got, &err), 0);
        ck_assert_uint_eq(got[0], 2);
        ck_assert_uint_eq(got[2], 4);

        /* wrong payload length, both ways */
        ck_assert_int_eq(zr_ragged_parse(&s, rec, sizeof(rec) - 4, 5, got, &err), -ZR_E_SCHEMA);
        ck_assert_msg(strstr(err.message, "record 5: shape (2, 3, 4) of <f4 needs 96 payload "
                             "bytes, the record has 92"), "%s", err.message);
        zr_error_clear(&err);
        ck_assert_int_eq(zr_ragged_parse(&s, rec, sizeof(rec) + 0, 0, got, NULL), 0);
        /* wrong ndim */
        zr_schema s2;
        ck_assert_int_eq(zr_schema_init_ragged(&s2, "<f4", 2, ZR_CODEC_RAW, NULL), 0);
        ck_assert_int_eq(zr_ragged_parse(&s2, rec, sizeof(rec), 1, got, &err), -ZR_E_SCHEMA);
        ck_assert_msg(strstr(err.message, "ndim 3, expected ndim 2"), "%s", err.message);
        zr_error_clear(&err);
        /* shorter than the header */
        ck_assert_int_eq(zr_ragged_parse(&s, rec, 7, 0, got, &err), -ZR_E_SCHEMA);
        ck_assert_int_eq(zr_ragged_parse(&s, rec, 20, 0, got, NULL), -ZR_E_SCHEMA);
        /* zero-length: a zero dimension, header only */
        uint64_t zero[3] = { 5, 0, 7 };
        zr_ragged_header_write(rec, zero, 3);
        ck_assert_int_eq(zr_ragged_parse(&s, rec, 32, 0, got, NULL), 0);
        ck_assert_uint_eq(got[0], 5);
        ck_assert_uint_eq(got[1], 0);
        ck_assert_int_eq(zr_ragged_parse(&s, rec, 36, 0, got, NULL), -ZR_E_SCHEMA);
        /* overflowing dims: refused, no wraparound */
        uint64_t over[3] = { 1ull << 32, 1ull << 32, 4 };
        zr_ragged_header_write(rec, over, 3);
        ck_assert_int_eq(zr_ragged_parse(&s, rec, 32, 0, got, &err), -ZR_E_SCHEMA);
        ck_assert_int_eq(zr_ragged_record_bytes(over, 3, 4, &bytes, NULL), -ZR_E_TOO_BIG);
        /* unaligned record start */
        uint8_t buf[1 + 16 + 3];
        uint64_t one = 3;
        zr_schema s1;
        ck_assert_int_eq(zr_schema_init_ragged(&s1, "|u1", 1, ZR_CODEC_RAW, NULL), 0);
        zr_ragged_header_write(buf + 1, &one, 1);
        ck_assert_int_eq(zr_ragged_parse(&s1, buf + 1, 19, 0, got, NULL), 0);
        ck_assert_uint_eq(got[0], 3);
        /* a schema of any ndim takes each record's own, 1..32, and checks its length */
        zr_schema sa;
        ck_assert_int_eq(zr_schema_init_ragged(&sa, "|u1", ZR_SCHEMA_NDIM_ANY, ZR_CODEC_RAW, NULL),
                         0);
        ck_assert_uint_eq(zr_ragged_shape_words_max(&sa, 2), 2 * (1 + ZR_SCHEMA_NDIM_MAX));
        ck_assert_uint_eq(zr_ragged_shape_words_max(&s, 2), 6);
        ck_assert_int_eq(zr_ragged_parse(&sa, buf + 1, 19, 0, NULL, NULL), 0);
        ck_assert_int_eq(zr_ragged_parse(&sa, buf + 1, 18, 0, NULL, &err), -ZR_E_SCHEMA);
        zr_error_clear(&err);
        zr_ragged_header_write(rec, dims, 3);
        ck_assert_int_eq(zr_ragged_parse(&sa, rec, 32 + 2 * 3 * 4, 0, NULL, NULL), 0);
        rec[0] = 33; /* the header's ndim, little-endian */
        ck_assert_int_eq(zr_ragged_parse(&sa, rec, sizeof(rec), 0, NULL, &err), -ZR_E_SCHEMA);
        ck_assert_msg(strstr(err.message, "ndim 33"), "%s", err.message);
}
END_TEST

TL_SUITE_MAIN("schema", test_dtype_sizes, test_dtype_bad, test_schema_roundtrip,
              test_schema_malformed_maps, test_schema_loaderx157,
              test_schema_malformed_bytes, test_schema_mutations,
              test_ragged_header)
