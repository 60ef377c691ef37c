/* test-manifest.c: manifests and set manifests (s3/manifest.h) round-trip, and
 * every hostile one (other format or version, bad names, duplicates, wrong
 * types, truncations) is refused with a message. */
#include <check.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <msgpack.h>

#include "check-run.h"
#include "manifest.h"

static s3_manifest sample(void) {
        static s3_object objs[] = {
                { "meta.zr", 32, 7, 1 }, { "schema.msgpack", 78, 8, 1 }, { "0.loc", 160, 9, 1 },
                { "0.sum", 80, 10, 1 }, { "0.chunk", 4096, 0, 0 },
        };
        s3_manifest m = { .length = 10, .codec = 1, .nobjects = 5, .objects = objs };
        strcpy(m.id, "0123456789abcdef0123456789abcdef");
        return m;
}

START_TEST(test_round_trip) {
        s3_manifest m = sample(), d;
        s3_error err = {0};
        void *buf;
        size_t len;

        ck_assert_int_eq(s3_manifest_encode(&m, &buf, &len), 0);
        ck_assert_int_eq(s3_manifest_decode(buf, len, &d, &err), 0);
        ck_assert_str_eq(d.id, m.id);
        ck_assert_uint_eq(d.length, 10);
        ck_assert_uint_eq(d.codec, 1);
        ck_assert_uint_eq(d.nobjects, 5);
        ck_assert_ptr_nonnull(s3_manifest_find(&d, "0.chunk"));
        ck_assert_int_eq(s3_manifest_find(&d, "0.chunk")->has_xxh3, 0);
        ck_assert_uint_eq(s3_manifest_find(&d, "0.loc")->xxh3, 9);
        ck_assert_ptr_null(s3_manifest_find(&d, "1.chunk"));
        s3_manifest_fini(&d);
        /* every truncation is refused */
        for (size_t k = 0; k < len; k++) {
                s3_error e = {0};
                ck_assert_int_lt(s3_manifest_decode(buf, k, &d, &e), 0);
                ck_assert_int_gt(strlen(e.message), 0);
        }
        free(buf);

        char id[33];
        ck_assert_int_eq(s3_manifest_new_id(id), 0);
        ck_assert_uint_eq(strlen(id), 32);
        ck_assert_uint_eq(s3_checksum("abc", 3), s3_checksum("abc", 3));
        ck_assert_uint_ne(s3_checksum("abc", 3), s3_checksum("abd", 3));
}
END_TEST

START_TEST(test_names) {
        static const char *const ok[] = { "meta.zr", "dict.zr", "schema.msgpack", "0.loc",
                                          "12.sum", "4294967295.chunk" };
        static const char *const bad[] = { "../meta.zr", "x.loc", "01.chunk", "4294967296.chunk",
                                           "1.chunk.tmp", ".loc", "1.", "delete.zr", "",
                                           "a/0.chunk", "-1.chunk" };
        for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++)
                ck_assert_msg(s3_object_name_ok(ok[i]), "refused %s", ok[i]);
        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
                ck_assert_msg(!s3_object_name_ok(bad[i]), "accepted %s", bad[i]);
}
END_TEST

/* A manifest with one change made by `mutate`, packed by hand. */
static int decode_variant(int which, s3_error *err) {
        msgpack_sbuffer sb;
        msgpack_packer pk;
        s3_manifest d;
        int r;

        msgpack_sbuffer_init(&sb);
        msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
#define STR(s) (msgpack_pack_str(&pk, strlen(s)), msgpack_pack_str_body(&pk, s, strlen(s)))
        msgpack_pack_map(&pk, 7);
        STR("format");
        STR(which == 0 ? "other" : "zrecord-remote");
        STR("version");
        msgpack_pack_uint32(&pk, which == 1 ? 2 : 1);
        STR("id");
        STR(which == 2 ? "xyz" : "0123456789abcdef0123456789abcdef");
        STR("length");
        if (which == 3)
                STR("10");
        else
                msgpack_pack_uint64(&pk, 10);
        STR("codec");
        msgpack_pack_uint32(&pk, which == 4 ? 3 : 0);
        STR("checksum");
        STR(which == 5 ? "md5" : "xxh3-64");
        STR("objects");
        msgpack_pack_array(&pk, 2);
        msgpack_pack_map(&pk, 2);
        STR("name");
        STR(which == 6 ? "../etc/passwd" : "meta.zr");
        STR("size");
        msgpack_pack_uint64(&pk, 32);
        msgpack_pack_map(&pk, 2);
        STR("name");
        STR(which == 7 ? "meta.zr" : which == 8 ? "dict.zr" : "0.chunk");
        STR("size");
        if (which == 9)
                msgpack_pack_int64(&pk, -1);
        else
                msgpack_pack_uint64(&pk, 4);
#undef STR
        r = s3_manifest_decode(sb.data, sb.size, &d, err);
        if (r == 0)
                s3_manifest_fini(&d);
        msgpack_sbuffer_destroy(&sb);
        return r;
}

START_TEST(test_hostile) {
        static const int expect[] = { -ZR_E_CORRUPT, -ZR_E_BAD_VERSION, -ZR_E_CORRUPT,
                                      -ZR_E_CORRUPT, -ZR_E_CORRUPT, -ZR_E_CORRUPT, -ZR_E_CORRUPT,
                                      -ZR_E_CORRUPT, 0, -ZR_E_CORRUPT };
        for (int w = 0; w < 10; w++) {
                s3_error err = {0};
                ck_assert_msg(decode_variant(w, &err) == expect[w], "variant %d: %s", w,
                              err.message);
        }
        s3_error err = {0};
        s3_manifest d;
        ck_assert_int_eq(s3_manifest_decode("\x80", 1, &d, &err), -ZR_E_CORRUPT);
        ck_assert_int_eq(s3_manifest_decode("", 0, &d, &err), -ZR_E_CORRUPT);
}
END_TEST

START_TEST(test_set) {
        char *names[] = { "images", "labels" };
        char **got;
        size_t n;
        void *buf;
        size_t len;
        s3_error err = {0};

        ck_assert_int_eq(s3_set_encode(names, 2, &buf, &len), 0);
        ck_assert_int_eq(s3_set_decode(buf, len, &got, &n, &err), 0);
        ck_assert_uint_eq(n, 2);
        ck_assert_str_eq(got[0], "images");
        ck_assert_str_eq(got[1], "labels");
        free(got[0]);
        free(got[1]);
        free(got);
        free(buf);
        char *bad[] = { "a/b" };
        ck_assert_int_eq(s3_set_encode(bad, 1, &buf, &len), 0);
        ck_assert_int_eq(s3_set_decode(buf, len, &got, &n, &err), -ZR_E_CORRUPT);
        free(buf);
        s3_manifest m = sample();
        ck_assert_int_eq(s3_manifest_encode(&m, &buf, &len), 0);
        memset(&err, 0, sizeof(err));
        ck_assert_int_eq(s3_set_decode(buf, len, &got, &n, &err), -ZR_E_CORRUPT);
        free(buf);
}
END_TEST

TL_SUITE_MAIN("s3-manifest", test_round_trip, test_names, test_hostile, test_set)
