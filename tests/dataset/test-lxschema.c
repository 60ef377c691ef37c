/* test-lxschema.c: loaderx 1.5.7's ragged layout: the shape table against a model,
 * its schema.msgpack decoded and encoded byte for byte as loaderx writes it (extra
 * keys kept), every malformed file refused cleanly, the ragged helpers for
 * headerless records, and lxragged's recovery of an append or delete cut between
 * the store and the schema. */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <msgpack.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>

#include "check-run.h"
#include "dataset/lxfile.h"
#include "dataset/lxragged.h"
#include "dataset/lxschema.h"
#include "dataset/ragged.h"
#include "dataset/shapes.h"
#include "helpers.h"
#include "records.h"
#include "util.h"

/* loaderx 1.5.7's file for shapes (2, 4), (5,), (3, 3, 3), as msgpack-python packs
 * it, and the same with a caller's key after the shapes. */
static const char lx_ragged[] =
        "\x86\xa6" "format" "\xaf" "loaderx-zrecord" "\xa7" "version" "\x01"
        "\xa4" "kind" "\xa6" "ragged" "\xa5" "dtype" "\xa3" "<f4" "\xa5" "codec" "\xa3" "raw"
        "\xa6" "shapes" "\x93\x92\x02\x04\x91\x05\x93\x03\x03\x03";
static const char lx_ragged_extra[] =
        "\x87\xa6" "format" "\xaf" "loaderx-zrecord" "\xa7" "version" "\x01"
        "\xa4" "kind" "\xa6" "ragged" "\xa5" "dtype" "\xa3" "<f4" "\xa5" "codec" "\xa4" "zstd"
        "\xa6" "shapes" "\x92\x91\xcd\x01\x2c\x92\x01\x01" "\xa4" "note" "\x82\xa1" "a" "\x01"
        "\xa1" "b" "\x92\xc3\xc0";

/* Checks record i's shape; asserts only on a mismatch (a check assertion per call
 * would cost a write to the test runner in these loops). */
static void expect_shape(const zr_shapes *t, uint64_t i, uint32_t ndim, const uint64_t *dims) {
        const uint64_t *got;
        uint32_t n;

        if (zr_shapes_get(t, i, &n, &got, NULL) != 0 || n != ndim ||
            memcmp(got, dims, ndim * sizeof(uint64_t)) != 0)
                ck_abort_msg("record %llu: wrong shape (ndim %u, expected %u)",
                             (unsigned long long)i, n, ndim);
}

START_TEST(test_decode_encode_exact) {
        zr_lxschema s;
        zr_error err = {0};
        void *buf;
        size_t len;

        ck_assert_msg(zr_lxschema_decode(lx_ragged, sizeof(lx_ragged) - 1, &s, &err) == 0, "%s",
                      err.message);
        ck_assert_str_eq(s.dtype.str, "<f4");
        ck_assert_int_eq(s.codec, ZR_CODEC_RAW);
        ck_assert_uint_eq(zr_shapes_count(s.shapes), 3);
        expect_shape(s.shapes, 0, 2, (uint64_t[]){ 2, 4 });
        expect_shape(s.shapes, 1, 1, (uint64_t[]){ 5 });
        expect_shape(s.shapes, 2, 3, (uint64_t[]){ 3, 3, 3 });
        ck_assert_uint_eq(s.extra_count, 0);
        ck_assert_int_eq(zr_lxschema_encode(&s, &buf, &len, &err), 0);
        ck_assert_uint_eq(len, sizeof(lx_ragged) - 1);
        ck_assert_mem_eq(buf, lx_ragged, len);
        free(buf);
        zr_lxschema_done(&s);

        /* a caller's key (a nested value) is kept verbatim; a 16-bit dim round-trips */
        ck_assert_int_eq(zr_lxschema_decode(lx_ragged_extra, sizeof(lx_ragged_extra) - 1, &s, &err), 0);
        ck_assert_uint_eq(s.extra_count, 1);
        expect_shape(s.shapes, 0, 1, (uint64_t[]){ 300 });
        ck_assert_int_eq(zr_lxschema_encode(&s, &buf, &len, &err), 0);
        ck_assert_uint_eq(len, sizeof(lx_ragged_extra) - 1);
        ck_assert_mem_eq(buf, lx_ragged_extra, len);
        free(buf);

        /* the pending delete goes after the shapes, before the caller's keys */
        s.pending = malloc(3 * sizeof(uint64_t));
        s.pending[0] = 2;
        s.pending[1] = 0;
        s.pending[2] = 1;
        s.npending = 3;
        ck_assert_int_eq(zr_lxschema_encode(&s, &buf, &len, &err), 0);
        zr_lxschema_done(&s);
        ck_assert_int_eq(zr_lxschema_decode(buf, len, &s, &err), 0);
        ck_assert_uint_eq(s.npending, 3);
        ck_assert_uint_eq(s.pending[0], 2);
        ck_assert_uint_eq(s.pending[2], 1);
        ck_assert_uint_eq(s.extra_count, 1);
        free(buf);
        zr_lxschema_done(&s);
}
END_TEST

/* A schema map from parts: 'f' format, 'v' version, 'k' kind, 'd' dtype, 'c'
 * codec, 's' shapes (as given), each with a bad value when upper case. */
static msgpack_sbuffer lx_pack(const char *keys, const uint64_t *shape_dims, uint32_t shape_ndim) {
        msgpack_sbuffer sb;
        msgpack_packer pk;

        msgpack_sbuffer_init(&sb);
        msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
        msgpack_pack_map(&pk, strlen(keys));
        for (const char *k = keys; *k; k++) {
#define S(x) msgpack_pack_str_with_body(&pk, (x), strlen(x))
                switch (*k) {
                case 'f': S("format"); S("loaderx-zrecord"); break;
                case 'F': S("format"); S("zrecord"); break;
                case 'v': S("version"); msgpack_pack_uint32(&pk, 1); break;
                case 'V': S("version"); msgpack_pack_uint32(&pk, 2); break;
                case 'k': S("kind"); S("ragged"); break;
                case 'K': S("kind"); S("dense"); break;
                case 'd': S("dtype"); S("<i2"); break;
                case 'D': S("dtype"); S("|O8"); break;
                case 'c': S("codec"); S("zstd_dict"); break;
                case 'C': S("codec"); S("lz4"); break;
                case 's':
                        S("shapes");
                        msgpack_pack_array(&pk, 1);
                        msgpack_pack_array(&pk, shape_ndim);
                        for (uint32_t i = 0; i < shape_ndim; i++)
                                msgpack_pack_uint64(&pk, shape_dims[i]);
                        break;
                case 'S': S("shapes"); S("[[1]]"); break;
                }
#undef S
        }
        return sb;
}

static void lx_bad(const char *keys, const uint64_t *dims, uint32_t ndim, int code,
                   const char *needle) {
        msgpack_sbuffer sb = lx_pack(keys, dims, ndim);
        zr_lxschema s;
        zr_error err = {0};

        ck_assert_int_eq(zr_lxschema_decode(sb.data, sb.size, &s, &err), -code);
        ck_assert_msg(strstr(err.message, needle), "%s: \"%s\" not in \"%s\"", keys, needle,
                      err.message);
        msgpack_sbuffer_destroy(&sb);
}

static int lx_decode(const void *data, size_t len, zr_error *err) {
        zr_lxschema s;
        int r = zr_lxschema_decode(data, len, &s, err);

        if (r == 0)
                zr_lxschema_done(&s);
        return r;
}

START_TEST(test_decode_refusals) {
        uint64_t d1[1] = { 7 }, d33[33], big[2] = { 1u << 20, 1u << 20 };
        msgpack_sbuffer sb = lx_pack("fvkdcs", d1, 1);
        zr_lxschema s;

        ck_assert_int_eq(zr_lxschema_decode(sb.data, sb.size, &s, NULL), 0);
        ck_assert_str_eq(s.dtype.str, "<i2");
        zr_lxschema_done(&s);
        /* every truncation and a trailing byte */
        expect_cuts_refused(sb.data, sb.size, lx_decode);
        msgpack_sbuffer_destroy(&sb);

        for (int i = 0; i < 33; i++)
                d33[i] = 1;
        lx_bad("fvkdcs", d33, 0, ZR_E_SCHEMA, "0 dimensions");
        lx_bad("fvkdcs", d33, 33, ZR_E_SCHEMA, "33 dimensions");
        lx_bad("fvkdcs", big, 2, ZR_E_SCHEMA, "larger than a record");
        lx_bad("vkdcs", d1, 1, ZR_E_SCHEMA, "\"format\" is missing");
        lx_bad("fvdcs", d1, 1, ZR_E_SCHEMA, "\"kind\" is missing");
        lx_bad("fvkcs", d1, 1, ZR_E_SCHEMA, "\"dtype\" is missing");
        lx_bad("fvkds", d1, 1, ZR_E_SCHEMA, "\"codec\" is missing");
        lx_bad("fvkdc", d1, 1, ZR_E_SCHEMA, "\"shapes\" is missing");
        lx_bad("Fvkdcs", d1, 1, ZR_E_SCHEMA, "\"format\" is \"zrecord\"");
        lx_bad("fVkdcs", d1, 1, ZR_E_SCHEMA, "\"version\" is 2");
        lx_bad("fvKdcs", d1, 1, ZR_E_SCHEMA, "not a ragged store");
        lx_bad("fvkDcs", d1, 1, ZR_E_SCHEMA, "dtype");
        lx_bad("fvkdCs", d1, 1, ZR_E_BAD_CODEC, "lz4");
        lx_bad("fvkdcS", d1, 1, ZR_E_SCHEMA, "\"shapes\" is a string");
        lx_bad("fvkdcsk", d1, 1, ZR_E_SCHEMA, "appears twice");
        /* the shapes may come before the dtype, and "version" may be missing */
        sb = lx_pack("fskdc", d1, 1);
        ck_assert_int_eq(zr_lxschema_decode(sb.data, sb.size, &s, NULL), 0);
        ck_assert_uint_eq(zr_shapes_count(s.shapes), 1);
        zr_lxschema_done(&s);
        msgpack_sbuffer_destroy(&sb);
        /* huge declared containers cost nothing */
        {
                zr_error err = {0};
                ck_assert_int_eq(zr_lxschema_decode("\xdf\xff\xff\xff\xff", 5, &s, &err), -ZR_E_SCHEMA);
                ck_assert_ptr_nonnull(strstr(err.message, "more than"));
                ck_assert_int_eq(zr_lxschema_decode("\x81\xa6shapes\xdd\x7f\xff\xff\xff", 12, &s, NULL),
                                 -ZR_E_SCHEMA);
                ck_assert_int_eq(zr_lxschema_decode("\x81\xa1x\xdb\xff\xff\xff\xf0", 8, &s, NULL),
                                 -ZR_E_SCHEMA);
                ck_assert_int_eq(zr_lxschema_decode("\x81\xa1x\xc1", 4, &s, NULL), -ZR_E_SCHEMA);
                ck_assert_int_eq(zr_lxschema_decode("\x93\x01\x02\x03", 4, &s, NULL), -ZR_E_SCHEMA);
                ck_assert_int_eq(zr_lxschema_decode("", 0, &s, NULL), -ZR_E_SCHEMA);
        }
}
END_TEST

/* Flipped and cut files decode or fail cleanly (the sanitizer build checks reads);
 * what decodes re-encodes to bytes that decode alike. Deterministic. */
START_TEST(test_decode_mutations) {
        uint64_t st = 7;
        int decoded = 0;

        for (int iter = 0; iter < 20000; iter++) {
                size_t len = sizeof(lx_ragged_extra) - 1;
                uint8_t *m = malloc(len);
                zr_lxschema s, back;
                void *buf;
                size_t blen;

                memcpy(m, lx_ragged_extra, len);
                for (int f = 0; f < 1 + (int)(gen_next(&st) % 3); f++)
                        m[gen_next(&st) % len] ^= (uint8_t)(1u << (gen_next(&st) % 8));
                if (gen_next(&st) % 4 == 0)
                        len = gen_next(&st) % len;
                if (zr_lxschema_decode(m, len, &s, NULL) == 0) {
                        decoded++;
                        ck_assert_int_eq(zr_lxschema_encode(&s, &buf, &blen, NULL), 0);
                        ck_assert_int_eq(zr_lxschema_decode(buf, blen, &back, NULL), 0);
                        ck_assert_uint_eq(zr_shapes_count(back.shapes), zr_shapes_count(s.shapes));
                        ck_assert_uint_eq(back.extra_len, s.extra_len);
                        zr_lxschema_done(&back);
                        zr_lxschema_done(&s);
                        free(buf);
                }
                free(m);
        }
        ck_assert_int_gt(decoded, 100);
}
END_TEST

/* The table against a list of ids under random appends and swap-last deletes
 * (with repeats), as the store does them. */
START_TEST(test_shapes_model) {
        zr_shapes *t;
        uint64_t model[4096], n = 0, st = 3, next = 0, first;
        zr_error err = {0};

        ck_assert_int_eq(zr_shapes_new(&t, NULL), 0);
        for (int round = 0; round < 400; round++) {
                if (gen_next(&st) % 3 || n < 8) {
                        for (int k = 0; k < 5; k++, next++) {
                                uint32_t ndim = 1 + (uint32_t)(next % 4);
                                uint64_t dims[4] = { next, next + 1, 2, 3 };
                                ck_assert_int_eq(zr_shapes_append(t, dims, ndim, NULL), 0);
                                model[n++] = next;
                        }
                } else {
                        uint64_t del[4];
                        for (int i = 0; i < 4; i++)
                                del[i] = gen_next(&st) % n;
                        del[3] = del[0]; /* a repeat */
                        ck_assert_int_eq(zr_shapes_delete(t, del, 4, NULL), 0);
                        n = tl_swap_last(model, n, del, 4);
                }
                ck_assert_uint_eq(zr_shapes_count(t), n);
                for (uint64_t i = 0; i < n; i++) {
                        uint64_t id = model[i];
                        expect_shape(t, i, 1 + (uint32_t)(id % 4), (uint64_t[]){ id, id + 1, 2, 3 });
                }
        }
        ck_assert_int_eq(zr_shapes_delete(t, (uint64_t[]){ n }, 1, &err), -ZR_E_RANGE);
        ck_assert_uint_eq(zr_shapes_count(t), n);
        ck_assert_int_eq(zr_shapes_get(t, n, &(uint32_t){0}, &(const uint64_t *){0}, NULL), -ZR_E_RANGE);
        ck_assert_int_eq(zr_shapes_append(t, model, 0, NULL), -ZR_E_SCHEMA);
        ck_assert_int_eq(zr_shapes_append(t, model, 33, NULL), -ZR_E_SCHEMA);
        ck_assert_int_eq(zr_shapes_uniform(t, 1, &first), 0);
        ck_assert_uint_ne(1 + model[first] % 4, 1);
        zr_shapes_truncate(t, 0);
        ck_assert_int_eq(zr_shapes_uniform(t, 1, NULL), 1);
        zr_shapes_free(t);
}
END_TEST

START_TEST(test_ragged_headerless) {
        uint8_t rec[8 * 4 + 24];
        uint64_t dims[32];
        uint32_t ndim;
        zr_error err = {0};

        ck_assert_int_eq(zr_ragged_check_shape((uint64_t[]){ 2, 3 }, 2, 4, 24, 0, NULL), 0);
        ck_assert_int_eq(zr_ragged_check_shape((uint64_t[]){ 2, 3 }, 2, 4, 20, 9, &err), -ZR_E_SCHEMA);
        ck_assert_ptr_nonnull(strstr(err.message, "record 9: shape (2, 3) of 4-byte items needs 24"));
        /* any ndim from a header, 2 here then 1 */
        zr_ragged_header_write(rec, (uint64_t[]){ 2, 3 }, 2);
        ck_assert_int_eq(zr_ragged_parse_any(rec, 24 + 24, 4, 0, &ndim, dims, NULL), 0);
        ck_assert_uint_eq(ndim, 2);
        ck_assert_uint_eq(dims[1], 3);
        zr_ragged_header_write(rec, (uint64_t[]){ 6 }, 1);
        ck_assert_int_eq(zr_ragged_parse_any(rec, 16 + 24, 4, 0, &ndim, dims, NULL), 0);
        ck_assert_uint_eq(ndim, 1);
        ck_assert_int_eq(zr_ragged_parse_any(rec, 16 + 20, 4, 0, &ndim, dims, NULL), -ZR_E_SCHEMA);
        ck_assert_int_eq(zr_ragged_parse_any(rec, 12, 4, 0, &ndim, dims, NULL), -ZR_E_SCHEMA);
        rec[0] = 0;
        ck_assert_int_eq(zr_ragged_parse_any(rec, 40, 4, 0, &ndim, dims, NULL), -ZR_E_SCHEMA);
}
END_TEST

/* A small store in loaderx's layout: records of id i are one byte-sized int8 per
 * element, value i, shape (i % 3 + 1,) or (1, 2). */
static void lxr_append(zr_lxragged *d, uint64_t first, uint64_t n) {
        int8_t data[64 * 3];
        uint64_t lens[64], dims[128], at = 0, nd = 0;
        uint32_t ndims[64];

        for (uint64_t i = 0; i < n; i++) {
                uint64_t id = first + i;
                if (id % 4 == 3) {
                        ndims[i] = 2;
                        dims[nd++] = 1;
                        dims[nd++] = 2;
                        lens[i] = 2;
                } else {
                        ndims[i] = 1;
                        dims[nd++] = id % 3 + 1;
                        lens[i] = id % 3 + 1;
                }
                memset(data + at, (int)id, lens[i]);
                at += lens[i];
        }
        ck_assert_int_eq(zr_lxragged_append(d, data, lens, ndims, dims, n, 0, NULL, NULL), 0);
}

static void lxr_expect(zr_lxragged *d, const uint64_t *ids, uint64_t n) {
        ck_assert_uint_eq(zr_lxragged_length(d), n);
        for (uint64_t i = 0; i < n; i++) {
                int8_t buf[8], want[8];
                uint64_t len, id = ids[i];
                const uint64_t *dims;
                uint32_t ndim;

                ck_assert_int_eq(zr_lxragged_bytes(d, &i, 1, &len, NULL), 0);
                ck_assert_int_eq(zr_lxragged_gather(d, &i, 1, buf, sizeof(buf), NULL, NULL), 0);
                ck_assert_int_eq(zr_lxragged_shape(d, i, &ndim, &dims, NULL), 0);
                ck_assert_uint_eq(ndim, id % 4 == 3 ? 2 : 1);
                ck_assert_uint_eq(len, id % 4 == 3 ? 2 : id % 3 + 1);
                memset(want, (int)id, len);
                ck_assert_mem_eq(buf, want, len);
        }
}

START_TEST(test_lxragged_recovery) {
        zr_store_options o = { .chunk_log2 = 16 }, ro = { .read_only = 1 };
        uint64_t ids[16], n = 10;
        zr_lxragged *d;
        zr_lxschema s;
        zr_error err = {0};
        scratch sc;
        int fd;

        scratch_new(&sc);
        fd = scratch_child(&sc, "r");
        ck_assert_int_eq(zr_lxragged_create(fd, "|i1", ZR_CODEC_ZSTD, NULL, 0, &o, &d, &err), 0);
        ck_assert_int_eq(zr_lxragged_create(fd, "|i1", ZR_CODEC_ZSTD, NULL, 0, &o, &d, NULL), -ZR_E_EXISTS);
        lxr_append(d, 0, 10);
        for (uint64_t i = 0; i < 16; i++)
                ids[i] = i;
        lxr_expect(d, ids, 10);
        /* refusals leave everything as it was */
        ck_assert_int_eq(zr_lxragged_append(d, "\x01\x01", (uint64_t[]){ 2 }, (uint32_t[]){ 1 },
                                            (uint64_t[]){ 3 }, 1, 0, NULL, &err), -ZR_E_SCHEMA);
        ck_assert_int_eq(zr_lxragged_append(d, "", (uint64_t[]){ 0 }, (uint32_t[]){ 1 },
                                            (uint64_t[]){ 0 }, 1, 0, NULL, NULL), -ZR_E_SCHEMA);
        ck_assert_int_eq(zr_lxragged_delete(d, (uint64_t[]){ 10 }, 1, NULL), -ZR_E_RANGE);
        lxr_expect(d, ids, 10);

        /* an append cut after the store: records with no shapes */
        ck_assert_int_eq(zr_store_append(zr_lxragged_store(d), "\x07\x07\x07", (uint64_t[]){ 3 }, 1,
                                         NULL, NULL), 0);
        zr_lxragged_close(d, NULL);
        zr_error_clear(&err);
        ck_assert_int_eq(zr_lxragged_open(fd, &ro, &d, &err), -ZR_E_READONLY);
        ck_assert_msg(strstr(err.message, "append was interrupted"), "%s", err.message);
        ck_assert_int_eq(zr_lxragged_open(fd, &o, &d, NULL), 0);
        lxr_expect(d, ids, 10);
        zr_lxragged_close(d, NULL);

        /* a delete cut after the schema with its note, before the store */
        ck_assert_int_eq(zr_lxfile_read(fd, &s, NULL), 0);
        ck_assert_int_eq(zr_shapes_delete(s.shapes, (uint64_t[]){ 2, 5 }, 2, NULL), 0);
        s.pending = malloc(3 * sizeof(uint64_t));
        memcpy(s.pending, (uint64_t[]){ 10, 2, 5 }, 3 * sizeof(uint64_t));
        s.npending = 3;
        ck_assert_int_eq(zr_lxfile_write(fd, &s, NULL), 0);
        ck_assert_int_eq(zr_lxragged_open(fd, &ro, &d, &err), -ZR_E_READONLY);
        ck_assert_int_eq(zr_lxragged_open(fd, &o, &d, &err), 0);
        n = tl_swap_last(ids, 10, (uint64_t[]){ 2, 5 }, 2);
        lxr_expect(d, ids, n);
        zr_lxragged_close(d, NULL);
        zr_lxschema_done(&s);
        ck_assert_int_eq(zr_lxfile_read(fd, &s, NULL), 0);
        ck_assert_uint_eq(s.npending, 0); /* the note is gone */

        /* ... and cut after the store too: only the note is left to drop */
        ck_assert_int_eq(zr_lxragged_open(fd, &o, &d, NULL), 0);
        ck_assert_int_eq(zr_store_delete(zr_lxragged_store(d), (uint64_t[]){ 0 }, 1, NULL), 0);
        zr_lxragged_close(d, NULL);
        ck_assert_int_eq(zr_shapes_delete(s.shapes, (uint64_t[]){ 0 }, 1, NULL), 0);
        s.pending = malloc(2 * sizeof(uint64_t));
        memcpy(s.pending, (uint64_t[]){ n, 0 }, 2 * sizeof(uint64_t));
        s.npending = 2;
        ck_assert_int_eq(zr_lxfile_write(fd, &s, NULL), 0);
        ck_assert_int_eq(zr_lxragged_open(fd, &o, &d, &err), 0);
        n = tl_swap_last(ids, n, (uint64_t[]){ 0 }, 1);
        lxr_expect(d, ids, n);

        /* delete with repeats, through the API */
        ck_assert_int_eq(zr_lxragged_delete(d, (uint64_t[]){ 1, 1, 6 }, 3, NULL), 0);
        n = tl_swap_last(ids, n, (uint64_t[]){ 1, 6 }, 2);
        lxr_expect(d, ids, n);
        zr_lxragged_close(d, NULL);

        /* more shapes than records, with no note: refused, never misread */
        zr_lxschema_done(&s);
        ck_assert_int_eq(zr_lxfile_read(fd, &s, NULL), 0);
        ck_assert_int_eq(zr_shapes_append(s.shapes, (uint64_t[]){ 1 }, 1, NULL), 0);
        ck_assert_int_eq(zr_lxfile_write(fd, &s, NULL), 0);
        zr_error_clear(&err);
        ck_assert_int_eq(zr_lxragged_open(fd, &o, &d, &err), -ZR_E_CORRUPT);
        ck_assert_ptr_nonnull(strstr(err.message, "shapes, the store"));
        zr_lxschema_done(&s);
        close(fd);
        scratch_free(&sc);
}
END_TEST

/* Opened read-only through a read-only bind mount of its directory, then made
 * writable through a writable descriptor of it: appends write the store and
 * schema.msgpack through the writable one (a mount namespace of the test's
 * own; skipped with a line without). */
START_TEST(test_lxragged_made_writable) {
        zr_store_options o = { .chunk_log2 = 16 }, ro = { .read_only = 1 };
        uint64_t ids[16];
        zr_lxragged *d;
        zr_error err = {0};
        scratch sc;
        char path[300];

        scratch_new(&sc);
        int fd = scratch_child(&sc, "r");
        ck_assert_int_eq(zr_lxragged_create(fd, "|i1", ZR_CODEC_ZSTD, NULL, 0, &o, &d, &err), 0);
        lxr_append(d, 0, 10);
        zr_lxragged_close(d, NULL);
        for (uint64_t i = 0; i < 16; i++)
                ids[i] = i;
        if (tl_private_mounts() < 0) {
                fprintf(stderr, "skipped: no mount namespace here\n");
                goto out;
        }
        snprintf(path, sizeof(path), "%s/r", sc.path);
        ck_assert_int_eq(mount(path, path, NULL, MS_BIND, NULL), 0);
        ck_assert_int_eq(mount(NULL, path, NULL, MS_BIND | MS_REMOUNT | MS_RDONLY, NULL), 0);
        int rofd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        ck_assert_int_ge(rofd, 0);
        ck_assert_int_eq(zr_lxragged_open(rofd, &ro, &d, &err), 0);
        ck_assert_int_eq(zr_lxragged_make_writable(d, rofd, NULL), -EROFS);
        zr_error_clear(&err);
        ck_assert_msg(zr_lxragged_make_writable(d, fd, &err) == 0, "%s", err.message);
        lxr_append(d, 10, 3);
        lxr_expect(d, ids, 13);
        zr_lxragged_close(d, NULL);
        close(rofd);
        ck_assert_int_eq(umount2(path, MNT_DETACH), 0); /* or the scratch stays */
        ck_assert_int_eq(zr_lxragged_open(fd, &o, &d, NULL), 0);
        lxr_expect(d, ids, 13);
        zr_lxragged_close(d, NULL);
out:
        close(fd);
        scratch_free(&sc);
}
END_TEST

TL_SUITE_MAIN("lxschema", test_decode_encode_exact, test_decode_refusals, test_decode_mutations,
              test_shapes_model, test_ragged_headerless, test_lxragged_recovery,
              test_lxragged_made_writable)
