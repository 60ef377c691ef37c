/* test-wire.c: frame headers, the non-allocating body scan, body decoding, the
 * typed getters and the writer of proto/wire.[ch], against hostile shapes. */
#include <check.h>
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check-run.h"
#include "wire.h"

/* Decodes a body and returns the error code (0 on success); frees the body. */
static int decode_code(const void *p, size_t n) {
        zr_wire_error err = {0};
        zr_wire_body *b = NULL;
        int r = zr_wire_body_decode(p, n, NULL, &b, &err);

        if (r == 0) {
                ck_assert_ptr_nonnull(b);
                ck_assert_int_eq(err.code, 0);
        } else {
                ck_assert_ptr_null(b);
                ck_assert_int_eq(err.code, -r);
                ck_assert_int_gt(strlen(err.message), 0);
        }
        zr_wire_body_free(b);
        return r < 0 ? -r : 0;
}

START_TEST(test_header) {
        uint8_t h[4];
        uint32_t len = 0;
        zr_wire_error err = {0};

        zr_wire_frame_header_encode(h, 0x01020304);
        ck_assert_int_eq(h[0], 0x04);
        ck_assert_int_eq(h[3], 0x01);
        ck_assert_int_eq(zr_wire_frame_header_decode(h, UINT32_MAX, &len, &err), 0);
        ck_assert_uint_eq(len, 0x01020304);

        ck_assert_int_eq(zr_wire_frame_header_decode(h, 0x01020303, &len, &err), -ZR_E_LIMIT);
        ck_assert_ptr_nonnull(strstr(err.message, "over the limit"));

        zr_wire_frame_header_encode(h, 0);
        memset(&err, 0, sizeof(err));
        ck_assert_int_eq(zr_wire_frame_header_decode(h, 100, &len, &err), -ZR_E_PROTO);

        zr_wire_frame_header_encode(h, 100);
        ck_assert_int_eq(zr_wire_frame_header_decode(h, 100, &len, NULL), 0);
        ck_assert_uint_eq(len, 100);
}
END_TEST

/* Every container and sized type, at every width, declaring more than remains:
 * refused by the scan (nothing is allocated for them: the scan allocates
 * nothing, and decode never runs msgpack-c on them). */
START_TEST(test_oversized_declarations) {
        static const struct {
                const char *name;
                uint8_t head[8];
                size_t len;
        } heads[] = {
                { "fixarray", { 0x9f }, 1 },
                { "array16", { 0xdc, 0xff, 0xff }, 3 },
                { "array32", { 0xdd, 0xff, 0xff, 0xff, 0xff }, 5 },
                { "array32 issue", { 0xdd, 0xff, 0x00, 0x00, 0x00 }, 5 },
                { "fixmap", { 0x8f }, 1 },
                { "map16", { 0xde, 0xff, 0xff }, 3 },
                { "map32", { 0xdf, 0xff, 0xff, 0xff, 0xff }, 5 },
                { "fixstr", { 0xbf }, 1 },
                { "str8", { 0xd9, 0xff }, 2 },
                { "str16", { 0xda, 0xff, 0xff }, 3 },
                { "str32", { 0xdb, 0xff, 0xff, 0xff, 0xff }, 5 },
                { "bin8", { 0xc4, 0xff }, 2 },
                { "bin16", { 0xc5, 0xff, 0xff }, 3 },
                { "bin32", { 0xc6, 0xff, 0xff, 0xff, 0xff }, 5 },
                { "ext8", { 0xc7, 0xff, 0x01 }, 3 },
                { "ext16", { 0xc8, 0xff, 0xff, 0x01 }, 4 },
                { "ext32", { 0xc9, 0xff, 0xff, 0xff, 0xff, 0x01 }, 6 },
        };

        for (size_t i = 0; i < sizeof(heads) / sizeof(heads[0]); i++) {
                uint8_t buf[64];
                zr_wire_error err = {0};

                /* alone, and padded with a few bytes: still far too few */
                ck_assert_msg(zr_wire_scan(heads[i].head, heads[i].len, NULL, NULL, &err) ==
                                      -ZR_E_PROTO,
                              "%s accepted", heads[i].name);
                memcpy(buf, heads[i].head, heads[i].len);
                memset(buf + heads[i].len, 0, 10);
                ck_assert_msg(decode_code(buf, heads[i].len + 10) == ZR_E_PROTO, "%s padded",
                              heads[i].name);
        }

        /* a map of 2 entries needs 4 bytes: with 3 left it is refused up front */
        {
                static const uint8_t m[] = { 0x82, 0x00, 0x00, 0x00 };
                zr_wire_error err = {0};
                ck_assert_int_eq(zr_wire_scan(m, sizeof(m), NULL, NULL, &err), -ZR_E_PROTO);
                ck_assert_ptr_nonnull(strstr(err.message, "declares 2 elements"));
        }
}
END_TEST

START_TEST(test_depth) {
        uint8_t buf[64];
        size_t n = 0;
        zr_wire_limits lim = zr_wire_limits_default;

        /* 8 nested arrays holding a 0: depth 8 is allowed by the scan */
        for (int i = 0; i < 8; i++)
                buf[n++] = 0x91;
        buf[n++] = 0x00;
        ck_assert_int_eq(zr_wire_scan(buf, n, NULL, NULL, NULL), 0);

        /* 9 is not */
        n = 0;
        for (int i = 0; i < 9; i++)
                buf[n++] = 0x91;
        buf[n++] = 0x00;
        ck_assert_int_eq(zr_wire_scan(buf, n, NULL, NULL, NULL), -ZR_E_PROTO);

        /* an empty container at depth 9 counts too */
        n = 0;
        for (int i = 0; i < 8; i++)
                buf[n++] = 0x91;
        buf[n++] = 0x90;
        ck_assert_int_eq(zr_wire_scan(buf, n, NULL, NULL, NULL), -ZR_E_PROTO);

        /* a caller's own limit */
        lim.depth_max = 2;
        n = 0;
        buf[n++] = 0x91;
        buf[n++] = 0x91;
        buf[n++] = 0x00;
        ck_assert_int_eq(zr_wire_scan(buf, n, &lim, NULL, NULL), 0);
        buf[2] = 0x91;
        buf[3] = 0x00;
        ck_assert_int_eq(zr_wire_scan(buf, 4, &lim, NULL, NULL), -ZR_E_PROTO);
}
END_TEST

START_TEST(test_objects_limit) {
        zr_wire_limits lim = zr_wire_limits_default;
        uint8_t buf[16] = { 0x9a }; /* fixarray of 10 nils, 11 objects */
        size_t objects = 0;

        memset(buf + 1, 0xc0, 10);
        ck_assert_int_eq(zr_wire_scan(buf, 11, NULL, &objects, NULL), 0);
        ck_assert_uint_eq(objects, 11);
        lim.objects_max = 11;
        ck_assert_int_eq(zr_wire_scan(buf, 11, &lim, NULL, NULL), 0);
        lim.objects_max = 10;
        ck_assert_int_eq(zr_wire_scan(buf, 11, &lim, NULL, NULL), -ZR_E_LIMIT);
}
END_TEST

static size_t build_sample(zr_wire_writer *w, const uint8_t **ret) {
        static const uint64_t idx[] = { 7, 3, UINT64_MAX };
        static const uint64_t shape[] = { 28, 28 };
        size_t size = 0;

        zr_wire_writer_init(w);
        zr_wire_writer_begin_message(w, "read", true, 42);
        zr_wire_put_u64(w, "handle", 1);
        zr_wire_put_i64(w, "neg", -5);
        zr_wire_put_bool(w, "flag", true);
        zr_wire_put_str(w, "dtype", "<f4");
        zr_wire_put_bin(w, "blob", "\x00\x01\x02", 3);
        zr_wire_put_u64s(w, "indices", idx, 3);
        zr_wire_put_uint_array(w, "item_shape", shape, 2);
        zr_wire_begin_map(w, "schema");
        zr_wire_put_str(w, "kind", "dense");
        zr_wire_end(w);
        zr_wire_begin_array(w, "list");
        zr_wire_put_str(w, NULL, "a");
        zr_wire_put_nil(w, NULL);
        zr_wire_end(w);
        ck_assert_int_eq(zr_wire_writer_finish(w, ZR_FRAME_MAX_DEFAULT, ret, &size, NULL), 0);
        return size;
}

/* The sample frame, built once and kept for the process (each test runs in a
 * child of its own), and its size in *ret_size. */
static const uint8_t *sample_frame(size_t *ret_size) {
        static zr_wire_writer w;
        static const uint8_t *frame;
        static size_t size;

        if (!frame)
                size = build_sample(&w, &frame);
        *ret_size = size;
        return frame;
}

/* Every strict prefix of a valid frame is refused, at every byte, and the
 * whole frame is accepted; the same for the body alone. */
START_TEST(test_truncated_everywhere) {
        size_t size;
        const uint8_t *frame = sample_frame(&size);

        for (size_t cut = 0; cut < size; cut++) {
                zr_wire_error err = {0};
                zr_wire_body *b = NULL;
                int r = zr_wire_frame_decode(frame, cut, ZR_FRAME_MAX_DEFAULT, NULL, &b, &err);
                ck_assert_msg(r == -ZR_E_PROTO, "frame cut at %zu gave %d", cut, r);
                ck_assert_ptr_null(b);
                if (cut > ZR_FRAME_HEADER_SIZE)
                        ck_assert_int_eq(decode_code(frame + 4, cut - 4), ZR_E_PROTO);
        }
        {
                zr_wire_body *b = NULL;
                ck_assert_int_eq(zr_wire_frame_decode(frame, size, ZR_FRAME_MAX_DEFAULT, NULL,
                                                      &b, NULL), 0);
                zr_wire_body_free(b);
        }
}
END_TEST

START_TEST(test_trailing_and_limits) {
        size_t size;
        const uint8_t *frame = sample_frame(&size);
        uint8_t *copy = malloc(size + 2);
        zr_wire_body *b = NULL;
        uint32_t body = (uint32_t)(size - 4);

        ck_assert_ptr_nonnull(copy);
        memcpy(copy, frame, size);
        /* a byte after the frame */
        copy[size] = 0x00;
        ck_assert_int_eq(zr_wire_frame_decode(copy, size + 1, ZR_FRAME_MAX_DEFAULT, NULL, &b,
                                              NULL), -ZR_E_PROTO);
        /* a byte after the body, inside the frame */
        zr_wire_frame_header_encode(copy, body + 1);
        ck_assert_int_eq(zr_wire_frame_decode(copy, size + 1, ZR_FRAME_MAX_DEFAULT, NULL, &b,
                                              NULL), -ZR_E_PROTO);
        /* the frame over a receiver's limit: refused with LIMIT from the header */
        zr_wire_frame_header_encode(copy, body);
        ck_assert_int_eq(zr_wire_frame_decode(copy, size, body - 1, NULL, &b, NULL),
                         -ZR_E_LIMIT);
        ck_assert_int_eq(zr_wire_frame_decode(copy, size, body, NULL, &b, NULL), 0);
        b = zr_wire_body_free(b);
        /* a zero-length body */
        zr_wire_frame_header_encode(copy, 0);
        ck_assert_int_eq(zr_wire_frame_decode(copy, 4, ZR_FRAME_MAX_DEFAULT, NULL, &b, NULL),
                         -ZR_E_PROTO);
        ck_assert_int_eq(decode_code(copy, 0), ZR_E_PROTO);
        ck_assert_ptr_null(b);
        free(copy);
}
END_TEST

START_TEST(test_body_shapes) {
        /* non-map bodies */
        ck_assert_int_eq(decode_code("\x92\x01\x02", 3), ZR_E_PROTO);
        ck_assert_int_eq(decode_code("\x07", 1), ZR_E_PROTO);
        ck_assert_int_eq(decode_code("\xc0", 1), ZR_E_PROTO);
        ck_assert_int_eq(decode_code("\xa1x", 2), ZR_E_PROTO);
        /* the empty map is a body (not a message: message.c says so) */
        ck_assert_int_eq(decode_code("\x80", 1), 0);
        /* keys: int, empty, duplicate, too long, nested duplicate */
        ck_assert_int_eq(decode_code("\x81\x01\x02", 3), ZR_E_PROTO);
        ck_assert_int_eq(decode_code("\x81\xa0\x02", 3), ZR_E_PROTO);
        ck_assert_int_eq(decode_code("\x82\xa1x\x01\xa1x\x02", 7), ZR_E_PROTO);
        ck_assert_int_eq(decode_code("\x82\xa1x\x01\xa1y\x02", 7), 0);
        ck_assert_int_eq(decode_code("\x81\xa1x\x91\x82\xa1k\x01\xa1k\x02", 12), ZR_E_PROTO);
        {
                uint8_t buf[64] = { 0x81, 0xd9, 33 };
                memset(buf + 3, 'k', 33);
                buf[36] = 0x00;
                ck_assert_int_eq(decode_code(buf, 37), ZR_E_PROTO);
                buf[2] = 32;
                buf[35] = 0x00;
                ck_assert_int_eq(decode_code(buf, 36), 0);
        }
        /* reserved byte; trailing object */
        ck_assert_int_eq(decode_code("\x81\xa1x\xc1", 4), ZR_E_PROTO);
        ck_assert_int_eq(decode_code("\x80\x80", 2), ZR_E_PROTO);
        /* a map of 65 entries is refused; 64 is fine */
        {
                uint8_t buf[1024];
                size_t n = 0;
                buf[n++] = 0xde;
                buf[n++] = 0;
                buf[n++] = 65;
                for (int i = 0; i < 65; i++) {
                        buf[n++] = 0xa2;
                        buf[n++] = 'a' + i / 26;
                        buf[n++] = 'a' + i % 26;
                        buf[n++] = 0x00;
                }
                ck_assert_int_eq(decode_code(buf, n), ZR_E_PROTO);
                buf[2] = 64;
                ck_assert_int_eq(decode_code(buf, n - 4), 0);
        }
        /* every scalar type decodes inside a map value array */
        {
                static const uint8_t all[] = {
                        0x81, 0xa1, 'v', 0xdc, 0x00, 0x11,
                        0x05, 0xe0, 0xc0, 0xc2, 0xc3,
                        0xcc, 1, 0xcd, 0, 1, 0xce, 0, 0, 0, 1,
                        0xcf, 0, 0, 0, 0, 0, 0, 0, 1,
                        0xd0, 0xff, 0xd1, 0xff, 0xff, 0xd2, 0xff, 0xff, 0xff, 0xff,
                        0xd3, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
                        0xca, 0, 0, 0, 0, 0xcb, 0, 0, 0, 0, 0, 0, 0, 0,
                        0xd4, 1, 0, 0xc4, 1, 0xaa,
                };
                ck_assert_int_eq(decode_code(all, sizeof(all)), 0);
        }
        /* ext forms */
        ck_assert_int_eq(decode_code("\x81\xa1x\xd5\x01\x00\x00", 7), 0);
        ck_assert_int_eq(decode_code("\x81\xa1x\xd8\x01" "0123456789abcdef", 21), 0);
        ck_assert_int_eq(decode_code("\x81\xa1x\xc7\x02\x01\xaa\xbb", 8), 0);
        ck_assert_int_eq(decode_code("\x81\xa1x\xc7\x02\x01\xaa", 7), ZR_E_PROTO);
}
END_TEST

START_TEST(test_writer_and_getters) {
        zr_wire_writer w;
        const uint8_t *frame, *u8;
        size_t size = build_sample(&w, &frame), n;
        zr_wire_body *b = NULL;
        zr_wire_error err = {0};
        const msgpack_object *root, *items, *schema;
        const char *s;
        const void *p;
        char buf[8];
        uint64_t u;
        uint32_t u32, count;
        int64_t i64;
        bool flag;

        ck_assert_int_eq(zr_wire_frame_decode(frame, size, ZR_FRAME_MAX_DEFAULT, NULL, &b, &err),
                         0);
        root = zr_wire_body_root(b);
        ck_assert_int_eq(zr_wire_get_str(root, "kind", &s, &n, &err), 0);
        ck_assert_int_eq(n, 4);
        ck_assert_int_eq(memcmp(s, "read", 4), 0);
        ck_assert_int_eq(zr_wire_get_u64(root, "id", &u, &err), 0);
        ck_assert_uint_eq(u, 42);
        ck_assert_int_eq(zr_wire_get_u32(root, "handle", &u32, &err), 0);
        ck_assert_uint_eq(u32, 1);
        ck_assert_int_eq(zr_wire_get_i64(root, "neg", &i64, &err), 0);
        ck_assert_int_eq(i64, -5);
        ck_assert_int_eq(zr_wire_get_i64(root, "handle", &i64, &err), 0);
        ck_assert_int_eq(i64, 1);
        ck_assert_int_eq(zr_wire_get_bool(root, "flag", &flag, &err), 0);
        ck_assert(flag);
        ck_assert_int_eq(zr_wire_get_str_copy(root, "dtype", buf, sizeof(buf), &err), 0);
        ck_assert_str_eq(buf, "<f4");
        ck_assert_int_eq(zr_wire_get_bin(root, "blob", &p, &n, &err), 0);
        ck_assert_int_eq(n, 3);
        ck_assert_int_eq(((const uint8_t *)p)[2], 2);
        ck_assert_int_eq(zr_wire_get_u64s(root, "indices", &u8, &n, &err), 0);
        ck_assert_int_eq(n, 3);
        ck_assert_uint_eq(zr_wire_u64_at(u8, 0), 7);
        ck_assert_uint_eq(zr_wire_u64_at(u8, 1), 3);
        ck_assert_uint_eq(zr_wire_u64_at(u8, 2), UINT64_MAX);
        ck_assert_int_eq(zr_wire_get_array(root, "item_shape", &items, &count, &err), 0);
        ck_assert_int_eq(count, 2);
        ck_assert_uint_eq(items[1].via.u64, 28);
        ck_assert_int_eq(zr_wire_get_map(root, "schema", &schema, &err), 0);
        ck_assert_int_eq(zr_wire_get_str(schema, "kind", &s, &n, &err), 0);
        ck_assert_int_eq(memcmp(s, "dense", 5), 0);
        ck_assert_int_eq(zr_wire_get_array(root, "list", &items, &count, &err), 0);
        ck_assert_int_eq(count, 2);
        ck_assert_int_eq(items[1].type, MSGPACK_OBJECT_NIL);
        ck_assert_int_eq(err.code, 0);

        /* errors name the field and say what was wrong */
        ck_assert_int_eq(zr_wire_get_u64(root, "step", &u, &err), -ZR_E_PROTO);
        ck_assert_ptr_nonnull(strstr(err.message, "'step'"));
        ck_assert_ptr_nonnull(strstr(err.message, "missing"));
        memset(&err, 0, sizeof(err));
        ck_assert_int_eq(zr_wire_get_u64(root, "dtype", &u, &err), -ZR_E_PROTO);
        ck_assert_ptr_nonnull(strstr(err.message, "'dtype'"));
        ck_assert_ptr_nonnull(strstr(err.message, "got str"));
        memset(&err, 0, sizeof(err));
        ck_assert_int_eq(zr_wire_get_u64(root, "neg", &u, &err), -ZR_E_PROTO);
        ck_assert_ptr_nonnull(strstr(err.message, "negative"));
        memset(&err, 0, sizeof(err));
        ck_assert_int_eq(zr_wire_get_uint(root, "id", 41, &u, &err), -ZR_E_PROTO);
        ck_assert_ptr_nonnull(strstr(err.message, "out of range"));
        ck_assert_int_eq(zr_wire_get_u64s(root, "blob", &u8, &n, NULL), -ZR_E_PROTO);
        ck_assert_int_eq(zr_wire_get_str_copy(root, "dtype", buf, 3, NULL), -ZR_E_PROTO);
        ck_assert_int_eq(zr_wire_get_bool(root, "handle", &flag, NULL), -ZR_E_PROTO);
        ck_assert_int_eq(zr_wire_get_map(root, "list", &schema, NULL), -ZR_E_PROTO);
        ck_assert_int_eq(zr_wire_get_array(root, "schema", &items, &count, NULL), -ZR_E_PROTO);
        ck_assert_ptr_null(zr_wire_find(root, "nope"));
        ck_assert_ptr_null(zr_wire_find(&items[0], "kind"));

        zr_wire_body_free(b);
        zr_wire_writer_destroy(&w);
}
END_TEST

START_TEST(test_writer_errors) {
        zr_wire_writer w;
        const uint8_t *frame = NULL;
        size_t size = 0;
        zr_wire_error err = {0};

        /* a value without a key in a map */
        zr_wire_writer_init(&w);
        zr_wire_writer_begin_message(&w, "ok", true, 1);
        zr_wire_put_u64(&w, NULL, 5);
        ck_assert_int_eq(zr_wire_writer_finish(&w, ZR_FRAME_MAX_DEFAULT, &frame, &size, &err),
                         -EINVAL);
        /* a key in an array */
        zr_wire_writer_reset(&w);
        zr_wire_writer_begin_message(&w, "ok", true, 1);
        zr_wire_begin_array(&w, "a");
        zr_wire_put_u64(&w, "k", 5);
        zr_wire_end(&w);
        ck_assert_int_eq(zr_wire_writer_finish(&w, ZR_FRAME_MAX_DEFAULT, &frame, &size, NULL),
                         -EINVAL);
        /* a float32 and an ext, which the writer has no put for, re-encoded */
        static const uint8_t f32[] = { 0x81, 0xa1, 'f', 0xca, 0x3f, 0x80, 0, 0 };
        static const uint8_t ext[] = { 0x81, 0xa1, 'e', 0xd4, 0x01, 0x02 };
        const uint8_t *const odd[] = { f32, ext };
        const size_t odd_len[] = { sizeof(f32), sizeof(ext) };
        for (int i = 0; i < 2; i++) {
                zr_wire_body *b = NULL;

                ck_assert_int_eq(zr_wire_body_decode(odd[i], odd_len[i], NULL, &b, NULL), 0);
                zr_wire_writer_reset(&w);
                zr_wire_put_object(&w, NULL, zr_wire_body_root(b));
                ck_assert_int_eq(zr_wire_writer_finish(&w, ZR_FRAME_MAX_DEFAULT, &frame, &size,
                                                       NULL), -EINVAL);
                zr_wire_body_free(b);
        }
        /* an unclosed container */
        zr_wire_writer_reset(&w);
        zr_wire_writer_begin_message(&w, "ok", true, 1);
        zr_wire_begin_map(&w, "m");
        ck_assert_int_eq(zr_wire_writer_finish(&w, ZR_FRAME_MAX_DEFAULT, &frame, &size, NULL),
                         -EINVAL);
        /* too deep */
        zr_wire_writer_reset(&w);
        zr_wire_writer_begin_message(&w, "ok", true, 1);
        for (int i = 0; i < ZR_WIRE_DEPTH_MAX; i++)
                zr_wire_begin_array(&w, i == 0 ? "a" : NULL);
        for (int i = 0; i < ZR_WIRE_DEPTH_MAX; i++)
                zr_wire_end(&w);
        ck_assert_int_eq(zr_wire_writer_finish(&w, ZR_FRAME_MAX_DEFAULT, &frame, &size, NULL),
                         -EINVAL);
        /* over the frame limit */
        zr_wire_writer_reset(&w);
        zr_wire_writer_begin_message(&w, "ok", true, 1);
        zr_wire_put_str(&w, "message", "a message longer than sixteen bytes");
        memset(&err, 0, sizeof(err));
        ck_assert_int_eq(zr_wire_writer_finish(&w, 16, &frame, &size, &err), -ZR_E_LIMIT);
        ck_assert_int_eq(err.code, ZR_E_LIMIT);
        /* after a reset the writer works again and the header is right */
        zr_wire_writer_reset(&w);
        zr_wire_writer_begin_message(&w, "ok", false, 0);
        ck_assert_int_eq(zr_wire_writer_finish(&w, ZR_FRAME_MAX_DEFAULT, &frame, &size, NULL),
                         0);
        ck_assert_uint_eq(size, 4 + 5 + 5 + 3);
        ck_assert_int_eq(frame[0], size - 4);
        ck_assert_int_eq(frame[4], 0xdf);
        ck_assert_int_eq(frame[8], 1);
        zr_wire_writer_destroy(&w);
}
END_TEST

/* Flipping any one byte of a valid frame never crashes or leaks, and whatever
 * is accepted decodes to a map. */
START_TEST(test_mutations) {
        size_t size;
        const uint8_t *frame = sample_frame(&size);
        uint8_t *copy = malloc(size);
        static const uint8_t values[] = { 0x00, 0x7f, 0x80, 0x8f, 0x90, 0x9f, 0xc1, 0xdc,
                                          0xdd, 0xde, 0xdf, 0xff };

        ck_assert_ptr_nonnull(copy);
        for (size_t i = ZR_FRAME_HEADER_SIZE; i < size; i++)
                for (size_t v = 0; v < sizeof(values); v++) {
                        zr_wire_body *b = NULL;
                        int r;
                        memcpy(copy, frame, size);
                        copy[i] = values[v];
                        r = zr_wire_frame_decode(copy, size, ZR_FRAME_MAX_DEFAULT, NULL, &b, NULL);
                        if (r == 0)
                                ck_assert_int_eq(zr_wire_body_root(b)->type, MSGPACK_OBJECT_MAP);
                        else
                                ck_assert(r == -ZR_E_PROTO || r == -ZR_E_LIMIT);
                        zr_wire_body_free(b);
                }
        free(copy);
}
END_TEST

int main(void) {
        Suite *s = suite_create("wire");
        TL_TCASE(s, "core", 0, test_header, test_oversized_declarations, test_depth,
                 test_objects_limit, test_truncated_everywhere, test_trailing_and_limits,
                 test_body_shapes, test_writer_and_getters, test_writer_errors, test_mutations);
        return tl_run_suite(s);
}
