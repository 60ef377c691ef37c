/* test-message.c: the message tables of proto/message.[ch]: kind names, the
 * header reader, field validation with messages that say where, and the number
 * of descriptors each request and reply carries. Messages are built with the
 * writer, so this is also a round trip of the encoder through the validator. */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "check-run.h"
#include "message.h"
#include "wire.h"

typedef struct built {
        zr_wire_writer w;
        zr_wire_body *body;
} built;

/* Finishes w, decodes the frame into b->body and returns its root. */
static const msgpack_object *finish(built *b) {
        const uint8_t *frame;
        size_t size;
        zr_wire_error err = {0};

        ck_assert_int_eq(zr_wire_writer_finish(&b->w, ZR_FRAME_MAX_DEFAULT, &frame, &size, &err),
                         0);
        ck_assert_msg(zr_wire_frame_decode(frame, size, ZR_FRAME_MAX_DEFAULT, NULL, &b->body,
                                           &err) == 0,
                      "%s", err.message);
        return zr_wire_body_root(b->body);
}

/* Starts b's message: kind, and the id if has_id. */
static void begin(built *b, const char *kind, bool has_id, uint64_t id) {
        zr_wire_writer_init(&b->w);
        zr_wire_writer_begin_message(&b->w, kind, has_id, id);
}

static void done(built *b) {
        b->body = zr_wire_body_free(b->body);
        zr_wire_writer_destroy(&b->w);
}

START_TEST(test_kind_names) {
        for (int k = ZR_MSG_INVALID + 1; k < _ZR_MSG_MAX; k++) {
                const char *n = zr_msg_kind_name((zr_msg_kind)k);
                ck_assert_ptr_nonnull(n);
                ck_assert_int_eq(zr_msg_kind_from_name(n, strlen(n)), k);
                /* lower case, no spaces */
                for (const char *c = n; *c; c++)
                        ck_assert(*c == '_' || (*c >= 'a' && *c <= 'z'));
        }
        ck_assert_ptr_null(zr_msg_kind_name(ZR_MSG_INVALID));
        ck_assert_ptr_null(zr_msg_kind_name(_ZR_MSG_MAX));
        ck_assert_int_eq(zr_msg_kind_from_name("hell", 4), ZR_MSG_INVALID);
        ck_assert_int_eq(zr_msg_kind_from_name("helloo", 6), ZR_MSG_INVALID);
        ck_assert_int_eq(zr_msg_kind_from_name("hello", 5), ZR_MSG_HELLO);
        ck_assert(zr_msg_kind_is_request(ZR_MSG_HELLO));
        ck_assert(zr_msg_kind_is_request(ZR_MSG_RELEASE));
        ck_assert(!zr_msg_kind_is_request(ZR_MSG_OK));
        ck_assert(!zr_msg_kind_is_request(ZR_MSG_BATCH));
        {
                const char *f = NULL;
                ck_assert(zr_msg_kind_feature(ZR_MSG_LOADER_OPEN, &f));
                ck_assert_str_eq(f, ZR_FEATURE_LOADER);
                ck_assert(zr_msg_kind_feature(ZR_MSG_TRAIN_DICT, &f));
                ck_assert_str_eq(f, ZR_FEATURE_DICT);
                ck_assert(!zr_msg_kind_feature(ZR_MSG_READ, NULL));
                ck_assert(!zr_msg_kind_feature(ZR_MSG_HELLO, NULL));
        }
}
END_TEST

START_TEST(test_header_unknown_kind_keeps_id) {
        built b = {0};
        zr_msg_header h;
        zr_wire_error err = {0};
        const msgpack_object *root;

        begin(&b, "frobnicate", true, 77);
        root = finish(&b);
        ck_assert_int_eq(zr_msg_check(root, ZR_MSG_INVALID, &h, &err), -ZR_E_UNKNOWN);
        ck_assert(h.has_id);
        ck_assert_uint_eq(h.id, 77);
        ck_assert_int_eq(h.kind, ZR_MSG_INVALID);
        ck_assert_ptr_nonnull(strstr(err.message, "frobnicate"));
        done(&b);
}
END_TEST

START_TEST(test_nested_error_says_where) {
        built b = {0};
        zr_wire_error err = {0};
        const msgpack_object *root;

        begin(&b, "loader_open", true, 3);
        zr_wire_begin_array(&b.w, "streams");
        zr_wire_begin_map(&b.w, NULL);
        zr_wire_put_u64(&b.w, "handle", 1);
        zr_wire_end(&b.w);
        zr_wire_begin_map(&b.w, NULL);
        zr_wire_put_u64(&b.w, "capacity", 4096);
        zr_wire_end(&b.w);
        zr_wire_end(&b.w);
        zr_wire_put_str(&b.w, "sampler", "iid");
        zr_wire_put_u64(&b.w, "batch_size", 2);
        zr_wire_put_u64(&b.w, "seed", 1);
        zr_wire_put_u64(&b.w, "start_step", 0);
        root = finish(&b);
        ck_assert_int_eq(zr_msg_check(root, ZR_MSG_INVALID, NULL, &err), -ZR_E_PROTO);
        ck_assert_str_eq(err.message, "loader_open: in 'streams'[1]: field 'handle': missing");
        done(&b);
}
END_TEST

START_TEST(test_ok_checked_against_request) {
        built b = {0};
        zr_wire_error err = {0};
        const msgpack_object *root;

        begin(&b, "ok", true, 9);
        zr_wire_put_u64(&b.w, "length", 4);
        root = finish(&b);
        /* a valid reply to DELETE, not to APPEND, and any "ok" without context */
        ck_assert_int_eq(zr_msg_check(root, ZR_MSG_DELETE, NULL, NULL), 0);
        ck_assert_int_eq(zr_msg_check(root, ZR_MSG_INVALID, NULL, NULL), 0);
        ck_assert_int_eq(zr_msg_check(root, ZR_MSG_APPEND, NULL, &err), -ZR_E_PROTO);
        ck_assert_str_eq(err.message, "ok to append: field 'first': missing");
        /* RELEASE has no reply */
        ck_assert_int_lt(zr_msg_check(root, ZR_MSG_RELEASE, NULL, NULL), 0);
        done(&b);
}
END_TEST

/* Builds a minimal valid request of `kind` with the given extra setup and
 * returns the descriptor count the protocol requires for it. */
static unsigned fds_of(void (*fill)(zr_wire_writer *w), const char *kind) {
        built b = {0};
        zr_wire_error err = {0};
        const msgpack_object *root;
        zr_msg_header h;
        unsigned n = 999;

        begin(&b, kind, true, 1);
        fill(&b.w);
        root = finish(&b);
        ck_assert_msg(zr_msg_check(root, ZR_MSG_INVALID, &h, &err) == 0, "%s: %s", kind,
                      err.message);
        ck_assert_int_eq(zr_msg_request_fds(h.kind, root, &n, &err), 0);
        done(&b);
        return n;
}

static void fill_schema(zr_wire_writer *w) {
        static const uint64_t shape[] = { 3 };
        zr_wire_begin_map(w, "schema");
        zr_wire_put_str(w, "kind", "dense");
        zr_wire_put_str(w, "dtype", "<f4");
        zr_wire_put_uint_array(w, "item_shape", shape, 1);
        zr_wire_put_str(w, "codec", "zstd_dict");
        zr_wire_end(w);
}
static void fill_create_dict(zr_wire_writer *w) {
        fill_schema(w);
        zr_wire_put_u64(w, "dict_bytes", 100);
}
static void fill_nothing(zr_wire_writer *w) {
}
static void fill_writable(zr_wire_writer *w) {
        zr_wire_put_bool(w, "writable", true);
}
static void fill_three_streams(zr_wire_writer *w) {
        zr_wire_begin_array(w, "streams");
        zr_wire_put_str(w, NULL, "a");
        zr_wire_put_str(w, NULL, "b");
        zr_wire_put_str(w, NULL, "c");
        zr_wire_end(w);
}
static void fill_append(zr_wire_writer *w) {
        static const uint64_t shape[] = { 3 };
        zr_wire_put_u64(w, "handle", 1);
        zr_wire_put_u64(w, "count", 2);
        zr_wire_put_u64(w, "record_bytes", 12);
        zr_wire_put_str(w, "dtype", "<f4");
        zr_wire_put_uint_array(w, "item_shape", shape, 1);
}
static void fill_train_handle(zr_wire_writer *w) {
        zr_wire_put_str(w, "tier", "balanced");
        zr_wire_put_u64(w, "handle", 1);
}
static void fill_train_memfd(zr_wire_writer *w) {
        static const uint64_t sizes[] = { 10, 20 };
        zr_wire_put_str(w, "tier", "balanced");
        zr_wire_put_u64s(w, "sizes", sizes, 2);
}
static void fill_install(zr_wire_writer *w) {
        zr_wire_put_u64(w, "handle", 1);
        zr_wire_put_u64(w, "dict_bytes", 100);
}
static void fill_handle(zr_wire_writer *w) {
        zr_wire_put_u64(w, "handle", 1);
}

START_TEST(test_descriptor_counts) {
        ck_assert_uint_eq(fds_of(fill_schema, "dataset_create"), 1);
        ck_assert_uint_eq(fds_of(fill_create_dict, "dataset_create"), 2);
        ck_assert_uint_eq(fds_of(fill_nothing, "dataset_open"), 2);
        ck_assert_uint_eq(fds_of(fill_writable, "dataset_open"), 2);
        ck_assert_uint_eq(fds_of(fill_three_streams, "msset_open"), 7);
        ck_assert_uint_eq(fds_of(fill_append, "append"), 1);
        ck_assert_uint_eq(fds_of(fill_train_handle, "train_dict"), 0);
        ck_assert_uint_eq(fds_of(fill_train_memfd, "train_dict"), 1);
        ck_assert_uint_eq(fds_of(fill_install, "install_dict"), 1);
        ck_assert_uint_eq(fds_of(fill_handle, "stats"), 0);
        ck_assert_uint_eq(fds_of(fill_nothing, "status"), 0);

        ck_assert_uint_eq(zr_msg_reply_fds(ZR_MSG_BUFFER_OPEN), 1);
        ck_assert_uint_eq(zr_msg_reply_fds(ZR_MSG_LOADER_OPEN), 1);
        ck_assert_uint_eq(zr_msg_reply_fds(ZR_MSG_TRAIN_DICT), 1);
        ck_assert_uint_eq(zr_msg_reply_fds(ZR_MSG_READ), 0);
        ck_assert_uint_eq(zr_msg_reply_fds(ZR_MSG_BATCH), 0);
        {
                unsigned n;
                ck_assert_int_lt(zr_msg_request_fds(ZR_MSG_OK, NULL, &n, NULL), 0);
        }
}
END_TEST

/* A FAULT or an error reply (code and message) with an id (with_id) or not:
 * refused, since a FAULT must have none and an error reply one. */
static void expect_bad_error_id(const char *kind, bool with_id) {
        built b;
        begin(&b, kind, with_id, with_id ? 5 : 0);
        zr_wire_put_u64(&b.w, "code", ZR_E_PROTO);
        zr_wire_put_str(&b.w, "message", "x");
        const msgpack_object *root = finish(&b);
        ck_assert_int_eq(zr_msg_check(root, ZR_MSG_INVALID, NULL, NULL), -ZR_E_PROTO);
        done(&b);
}

START_TEST(test_ids_by_class) {
        built b = {0};
        const msgpack_object *root;

        /* a release needs no id */
        begin(&b, "release", false, 0);
        zr_wire_put_u64(&b.w, "loader", 1);
        zr_wire_put_u64(&b.w, "ring", 3);
        zr_wire_put_u64(&b.w, "slot", 2);
        root = finish(&b);
        ck_assert_int_eq(zr_msg_check(root, ZR_MSG_INVALID, NULL, NULL), 0);
        done(&b);

        /* a fault must not have one, an error reply must */
        expect_bad_error_id("fault", true);
        expect_bad_error_id("error", false);

        /* a u32 field over 2^32-1 */
        begin(&b, "stats", true, 1);
        zr_wire_put_u64(&b.w, "handle", UINT64_C(1) << 32);
        root = finish(&b);
        ck_assert_int_eq(zr_msg_check(root, ZR_MSG_INVALID, NULL, NULL), -ZR_E_PROTO);
        done(&b);
}
END_TEST

START_TEST(test_write_error) {
        built b = {0};
        zr_msg_header h;
        const msgpack_object *root;
        const char *str;
        size_t n;
        uint64_t code, needed;

        zr_wire_writer_init(&b.w);
        zr_msg_write_error(&b.w, false, 12, -ZR_E_BUFFER, "records need 4096 bytes");
        zr_wire_put_u64(&b.w, "needed", 4096);
        root = finish(&b);
        ck_assert_int_eq(zr_msg_check(root, ZR_MSG_INVALID, &h, NULL), 0);
        ck_assert_int_eq(h.kind, ZR_MSG_ERROR);
        ck_assert_uint_eq(h.id, 12);
        ck_assert_int_eq(zr_wire_get_u64(root, "code", &code, NULL), 0);
        ck_assert_uint_eq(code, ZR_E_BUFFER);
        ck_assert_int_eq(zr_wire_get_str(root, "name", &str, &n, NULL), 0);
        ck_assert_int_eq(memcmp(str, "ZR_E_BUFFER", n), 0);
        ck_assert_int_eq(zr_wire_get_u64(root, "needed", &needed, NULL), 0);
        ck_assert_uint_eq(needed, 4096);
        done(&b);

        /* a fault has no id; an errno code has no name here */
        zr_wire_writer_init(&b.w);
        zr_msg_write_error(&b.w, true, 99, 5, NULL);
        root = finish(&b);
        ck_assert_int_eq(zr_msg_check(root, ZR_MSG_INVALID, &h, NULL), 0);
        ck_assert_int_eq(h.kind, ZR_MSG_FAULT);
        ck_assert(!h.has_id);
        ck_assert_ptr_null(zr_wire_find(root, "name"));
        ck_assert_int_eq(zr_wire_get_str(root, "message", &str, &n, NULL), 0);
        ck_assert_int_gt(n, 0);
        done(&b);
}
END_TEST

TL_SUITE_MAIN("message", test_kind_names, test_header_unknown_kind_keeps_id,
              test_nested_error_says_where, test_ok_checked_against_request, test_descriptor_counts,
              test_ids_by_class, test_write_error)
