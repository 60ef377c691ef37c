/* test-dataset.c: typed datasets over a real store: dense and ragged round trips,
 * append validation that leaves the store untouched, zstd_dict without a
 * dictionary, create/open errors, pass-throughs. */
#include <check.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "dataset/dataset.h"
#include "dataset/ragged.h"
#include "helpers.h"
#include "check-run.h"

static const zr_store_options test_opts = { .chunk_log2 = TEST_CHUNK_LOG2 };

static zr_dataset *create_dense(int dirfd, const char *dtype, const uint64_t *shape,
                                uint32_t ndim, enum zr_codec codec) {
        zr_schema s;
        zr_dataset *ds = NULL;
        zr_error err = {0};

        ck_assert_int_eq(zr_schema_init_dense(&s, dtype, shape, ndim, codec, &err), 0);
        ck_assert_msg(zr_dataset_create(dirfd, &s, NULL, 0, &test_opts, &ds, &err) == 0, "%s",
                      err.message);
        return ds;
}

static zr_dataset *reopen(zr_dataset *ds, int dirfd) {
        zr_error err = {0};
        ck_assert_int_eq(zr_dataset_close(ds, &err), 0);
        ds = NULL;
        ck_assert_msg(zr_dataset_open(dirfd, &test_opts, &ds, &err) == 0, "%s", err.message);
        return ds;
}

/* Appends a dense batch of n items; returns the first index. */
static uint64_t append_dense(zr_dataset *ds, const char *dtype, const uint64_t *item,
                             uint32_t item_ndim, const void *data, uint64_t n) {
        uint64_t shape[ZR_SCHEMA_NDIM_MAX + 1], first = 0;
        uint64_t bytes = n * zr_schema_item_bytes(zr_dataset_schema(ds));
        zr_error err = {0};

        shape[0] = n;
        memcpy(shape + 1, item, item_ndim * sizeof(uint64_t));
        zr_batch b = { .dtype = dtype, .data = data, .data_len = bytes, .shape = shape,
                       .ndim = item_ndim + 1 };
        ck_assert_msg(zr_dataset_append(ds, &b, &first, &err) == 0, "%s", err.message);
        return first;
}

START_TEST(test_dense_roundtrip) {
        static const struct { const char *dtype; uint32_t ndim; uint64_t shape[3]; } cases[] = {
                { "|u1", 2, { 28, 28 } }, { "<f4", 1, { 3 } }, { "<i8", 0, { 0 } },
                { "|b1", 2, { 2, 2 } }, { "<f2", 1, { 5 } }, { ">c16", 3, { 2, 1, 3 } },
                { "<u2", 1, { 0 } },
        };
        for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
                for (int codec = ZR_CODEC_RAW; codec <= ZR_CODEC_ZSTD; codec++) {
                        scratch sc;
                        scratch_new(&sc);
                        zr_dataset *ds = create_dense(sc.fd, cases[c].dtype, cases[c].shape,
                                                      cases[c].ndim, (enum zr_codec)codec);
                        uint64_t item = zr_schema_item_bytes(zr_dataset_schema(ds));
                        const uint64_t n1 = 37, n2 = 5, n = n1 + n2;
                        uint8_t *data = malloc(n * item + 1), *out = malloc(n * item + 1);
                        gen_bytes(data, n * item, c * 10 + codec);

                        ck_assert_uint_eq(append_dense(ds, cases[c].dtype, cases[c].shape,
                                                       cases[c].ndim, data, n1), 0);
                        ds = reopen(ds, sc.fd);
                        ck_assert_str_eq(zr_dataset_schema(ds)->dtype.str, cases[c].dtype);
                        ck_assert_uint_eq(zr_dataset_schema(ds)->ndim, cases[c].ndim);
                        ck_assert_uint_eq(append_dense(ds, cases[c].dtype, cases[c].shape,
                                                       cases[c].ndim, data + n1 * item, n2), n1);
                        ck_assert_uint_eq(zr_dataset_length(ds), n);

                        /* the whole set in order, then a scattered batch with repeats */
                        uint64_t idx[64];
                        for (uint64_t i = 0; i < n; i++)
                                idx[i] = i;
                        zr_error err = {0};
                        ck_assert_msg(zr_dataset_gather_dense(ds, idx, n, out, n * item, &err)
                                      == 0, "%s", err.message);
                        ck_assert(memcmp(out, data, n * item) == 0);
                        uint64_t pick[6] = { 41, 0, 17, 17, 3, 40 };
                        ck_assert_int_eq(zr_dataset_gather_dense(ds, pick, 6, out, 6 * item,
                                                                 NULL), 0);
                        for (int i = 0; i < 6; i++)
                                ck_assert(memcmp(out + i * item, data + pick[i] * item, item) == 0);
                        if (item > 0)
                                ck_assert_int_eq(zr_dataset_gather_dense(ds, pick, 6, out,
                                                                         6 * item - 1, NULL),
                                                 -ZR_E_BUFFER);
                        uint64_t bad = n;
                        ck_assert_int_eq(zr_dataset_gather_dense(ds, &bad, 1, out, item, NULL),
                                         -ZR_E_RANGE);
                        free(data);
                        free(out);
                        ck_assert_int_eq(zr_dataset_close(ds, NULL), 0);
                        scratch_free(&sc);
                }
        }
}
END_TEST

/* Packs records of the given shapes (each with its header, payload from gen_bytes)
 * into *ret_data / ret_lens; returns the total bytes. */
static uint64_t pack_ragged(uint32_t ndim, uint32_t itemsize, const uint64_t *shapes, size_t n,
                            uint8_t **ret_data, uint64_t *ret_lens) {
        uint64_t total = 0;
        for (size_t i = 0; i < n; i++) {
                ck_assert_int_eq(zr_ragged_record_bytes(shapes + i * ndim, ndim, itemsize,
                                                        &ret_lens[i], NULL), 0);
                total += ret_lens[i];
        }
        uint8_t *data = malloc(total + 1), *p = data;
        for (size_t i = 0; i < n; i++) {
                zr_ragged_header_write(p, shapes + i * ndim, ndim);
                gen_bytes(p + zr_ragged_header_bytes(ndim),
                          ret_lens[i] - zr_ragged_header_bytes(ndim), 1000 + i);
                p += ret_lens[i];
        }
        *ret_data = data;
        return total;
}

static zr_dataset *create_ragged(int dirfd, const char *dtype, uint32_t ndim,
                                 enum zr_codec codec) {
        zr_schema s;
        zr_dataset *ds = NULL;
        zr_error err = {0};

        ck_assert_int_eq(zr_schema_init_ragged(&s, dtype, ndim, codec, &err), 0);
        ck_assert_msg(zr_dataset_create(dirfd, &s, NULL, 0, &test_opts, &ds, &err) == 0, "%s",
                      err.message);
        return ds;
}

START_TEST(test_ragged_roundtrip) {
        for (uint32_t ndim = 1; ndim <= 3; ndim++) {
                for (int codec = ZR_CODEC_RAW; codec <= ZR_CODEC_ZSTD; codec++) {
                        scratch sc;
                        scratch_new(&sc);
                        const char *dtype = ndim == 2 ? "<f8" : (ndim == 1 ? "<i4" : "|u1");
                        uint32_t itemsize = ndim == 2 ? 8 : (ndim == 1 ? 4 : 1);
                        zr_dataset *ds = create_ragged(sc.fd, dtype, ndim, (enum zr_codec)codec);
                        enum { N = 9 };
                        uint64_t shapes[N * 3], lens[N];
                        uint64_t st = ndim * 31 + codec;
                        for (size_t i = 0; i < N * ndim; i++)
                                shapes[i] = gen_next(&st) % 7;
                        /* zero-length records: a zero dim, and all-zero shapes */
                        shapes[0] = 0;
                        for (uint32_t d = 0; d < ndim; d++)
                                shapes[4 * ndim + d] = 0;
                        uint8_t *data;
                        uint64_t total = pack_ragged(ndim, itemsize, shapes, N, &data, lens);
                        zr_batch b = { .dtype = dtype, .data = data, .data_len = total,
                                       .lens = lens, .nrecords = N };
                        uint64_t first = 99;
                        zr_error err = {0};
                        ck_assert_msg(zr_dataset_append(ds, &b, &first, &err) == 0, "%s",
                                      err.message);
                        ck_assert_uint_eq(first, 0);
                        ds = reopen(ds, sc.fd);

                        uint64_t idx[5] = { 8, 0, 4, 4, 2 }, buffer;
                        uint64_t hdr = zr_ragged_header_bytes(ndim), want_payload = 0;
                        uint64_t got_shapes[5 * 3], offs[5];
                        for (int k = 0; k < 5; k++)
                                want_payload += lens[idx[k]] - hdr;
                        ck_assert_int_eq(gather_ragged(ds, idx, 5, NULL, 0, got_shapes, offs,
                                                       &buffer, NULL), -ZR_E_BUFFER);
                        /* headers and payloads, each record at a multiple of 8 */
                        ck_assert_uint_ge(buffer, want_payload + 5 * hdr);
                        ck_assert_uint_le(buffer, want_payload + 5 * hdr + 4 * 7);
                        uint8_t *out = malloc(buffer + 1);
                        ck_assert_int_eq(gather_ragged(ds, idx, 5, out, buffer - 1, got_shapes,
                                                       offs, NULL, NULL), -ZR_E_BUFFER);
                        ck_assert_msg(gather_ragged(ds, idx, 5, out, buffer, got_shapes, offs,
                                                    NULL, &err) == 0, "%s", err.message);
                        for (int k = 0; k < 5; k++) {
                                const uint64_t *want = shapes + idx[k] * ndim;
                                for (uint32_t d = 0; d < ndim; d++)
                                        ck_assert_uint_eq(got_shapes[k * ndim + d], want[d]);
                                ck_assert_uint_eq(offs[k] % itemsize, 0);
                                ck_assert_uint_eq((offs[k] - hdr) % 8, 0);
                                /* payload bytes equal the ones written */
                                const uint8_t *src = data;
                                for (uint64_t j = 0; j < idx[k]; j++)
                                        src += lens[j];
                                uint64_t plen = lens[idx[k]] - hdr;
                                ck_assert(memcmp(out + offs[k], src + hdr, plen) == 0);
                                if (k < 4)
                                        ck_assert_uint_eq(offs[k + 1],
                                                          (offs[k] + plen + 7) / 8 * 8 + hdr);
                        }
                        ck_assert_int_eq(zr_dataset_gather_dense(ds, idx, 1, out, buffer, NULL),
                                         -ZR_E_SCHEMA);
                        free(out);
                        free(data);
                        zr_dataset_close(ds, NULL);
                        scratch_free(&sc);
                }
        }
}
END_TEST

/* Asserts that ds still holds exactly the n items of `ref`. */
static void assert_unchanged(zr_dataset *ds, const uint8_t *ref, uint64_t n) {
        uint64_t item = zr_schema_item_bytes(zr_dataset_schema(ds)), idx[16];
        uint8_t out[16 * 64];

        ck_assert_uint_eq(zr_dataset_length(ds), n);
        for (uint64_t i = 0; i < n; i++)
                idx[i] = i;
        ck_assert_int_eq(zr_dataset_gather_dense(ds, idx, n, out, sizeof(out), NULL), 0);
        ck_assert(memcmp(out, ref, n * item) == 0);
}

static void expect_refused(zr_dataset *ds, const zr_batch *b, int code, const char *needle) {
        zr_error err = {0};
        uint64_t first = 12345;
        ck_assert_int_eq(zr_dataset_append(ds, b, &first, &err), -code);
        ck_assert_int_eq(err.code, code);
        ck_assert_uint_eq(first, 12345);
        ck_assert_msg(strstr(err.message, needle), "\"%s\" not in \"%s\"", needle, err.message);
}

START_TEST(test_dense_validation) {
        scratch sc;
        scratch_new(&sc);
        const uint64_t item_shape[2] = { 2, 3 };
        zr_dataset *ds = create_dense(sc.fd, "<f4", item_shape, 2, ZR_CODEC_ZSTD);
        uint8_t ref[4 * 24], junk[8 * 24];
        gen_bytes(ref, sizeof(ref), 1);
        gen_bytes(junk, sizeof(junk), 2);
        append_dense(ds, "<f4", item_shape, 2, ref, 4);

        zr_batch b = { .dtype = "<f8", .data = junk, .data_len = 2 * 24,
                       .shape = (uint64_t[]){ 2, 2, 3 }, .ndim = 3 };
        expect_refused(ds, &b, ZR_E_SCHEMA, "dtype: expected <f4, got <f8");
        b.dtype = ">f4";
        expect_refused(ds, &b, ZR_E_SCHEMA, "dtype: expected <f4, got >f4");
        b.dtype = "float32";
        expect_refused(ds, &b, ZR_E_SCHEMA, "dtype \"float32\"");
        b.dtype = NULL;
        expect_refused(ds, &b, ZR_E_SCHEMA, "no dtype (expected <f4)");
        b.dtype = "<f4";
        b.shape = (uint64_t[]){ 2, 3, 2 };
        expect_refused(ds, &b, ZR_E_SCHEMA, "item shape: expected (2, 3), got (3, 2)");
        b.shape = (uint64_t[]){ 2, 2, 3, 1 };
        b.ndim = 4;
        expect_refused(ds, &b, ZR_E_SCHEMA, "expected (2, 3), got (2, 3, 1)");
        b.shape = (uint64_t[]){ 12 };
        b.ndim = 1;
        expect_refused(ds, &b, ZR_E_SCHEMA, "expected (2, 3), got ()");
        b.ndim = 0;
        expect_refused(ds, &b, ZR_E_SCHEMA, "leading batch axis");
        b.shape = (uint64_t[]){ 2, 2, 3 };
        b.ndim = 3;
        b.data_len = 47;
        expect_refused(ds, &b, ZR_E_SCHEMA, "a batch of shape (2, 2, 3) of <f4 is 48 bytes, 47 came");
        b.shape = (uint64_t[]){ UINT64_MAX / 2, 2, 3 };
        expect_refused(ds, &b, ZR_E_SCHEMA, "over 2^64");
        assert_unchanged(ds, ref, 4);

        /* and a good one still goes in after all that */
        b.shape = (uint64_t[]){ 2, 2, 3 };
        b.data_len = 48;
        uint64_t first;
        ck_assert_int_eq(zr_dataset_append(ds, &b, &first, NULL), 0);
        ck_assert_uint_eq(first, 4);
        /* an empty batch changes nothing */
        b.shape = (uint64_t[]){ 0, 2, 3 };
        b.data_len = 0;
        ck_assert_int_eq(zr_dataset_append(ds, &b, &first, NULL), 0);
        ck_assert_uint_eq(first, 6);
        ck_assert_uint_eq(zr_dataset_length(ds), 6);
        zr_dataset_close(ds, NULL);
        scratch_free(&sc);
}
END_TEST

START_TEST(test_ragged_validation) {
        scratch sc;
        scratch_new(&sc);
        zr_dataset *ds = create_ragged(sc.fd, "<i4", 2, ZR_CODEC_RAW);
        uint64_t shapes[3 * 2] = { 2, 3, 0, 4, 1, 1 }, lens[3];
        uint8_t *data;
        uint64_t total = pack_ragged(2, 4, shapes, 3, &data, lens);
        zr_batch good = { .dtype = "<i4", .data = data, .data_len = total, .lens = lens,
                          .nrecords = 3 };
        ck_assert_int_eq(zr_dataset_append(ds, &good, NULL, NULL), 0);

        /* record 1 of a bad batch has ndim 1: nothing of the batch goes in */
        uint8_t bad[200];
        uint64_t blens[3], at = 0;
        memcpy(bad, data, lens[0]);
        blens[0] = lens[0];
        at = lens[0];
        uint64_t one = 3;
        zr_ragged_header_write(bad + at, &one, 1);
        blens[1] = 16 + 12;
        at += blens[1];
        memcpy(bad + at, data + lens[0] + lens[1], lens[2]);
        blens[2] = lens[2];
        at += lens[2];
        zr_batch b = { .dtype = "<i4", .data = bad, .data_len = at, .lens = blens, .nrecords = 3 };
        expect_refused(ds, &b, ZR_E_SCHEMA, "record 1: shape header has ndim 1, expected ndim 2");
        /* a payload one element short */
        zr_batch c = good;
        uint64_t clens[3] = { lens[0] - 4, lens[1], lens[2] };
        c.lens = clens;
        c.data_len = total - 4;
        expect_refused(ds, &c, ZR_E_SCHEMA, "record 0: shape (2, 3) of <i4 needs 24 payload "
                       "bytes, the record has 20");
        /* lengths that do not add up to the data */
        c = good;
        c.data_len = total + 1;
        expect_refused(ds, &c, ZR_E_SCHEMA, "add up to");
        c = good;
        c.dtype = "<u4";
        expect_refused(ds, &c, ZR_E_SCHEMA, "dtype: expected <i4, got <u4");
        c = good;
        c.lens = NULL;
        expect_refused(ds, &c, ZR_E_SCHEMA, "without their lengths");

        ck_assert_uint_eq(zr_dataset_length(ds), 3);
        uint64_t idx[3] = { 0, 1, 2 }, got[6], offs[3], buffer;
        uint8_t out[256];
        ck_assert_int_eq(gather_ragged(ds, idx, 3, out, sizeof(out), got, offs, &buffer, NULL), 0);
        ck_assert_uint_eq(buffer, total); /* records of multiples of 8 bytes: no padding */
        ck_assert(memcmp(got, shapes, sizeof(shapes)) == 0);
        free(data);
        zr_dataset_close(ds, NULL);
        scratch_free(&sc);
}
END_TEST

/* A ragged dataset of any ndim: records of ndim 1, 3 and 2 (one empty) in one
 * batch, read back with their own shapes (each record's ndim, then its dims);
 * a header of 33 dims is refused and nothing is written. */
START_TEST(test_ragged_any_ndim) {
        static const uint32_t nd[4] = { 1, 3, 2, 2 };
        static const uint64_t dims[4][3] = { { 5 }, { 2, 1, 3 }, { 0, 4 }, { 1, 2 } };
        uint64_t lens[4], total = 0, idx[4] = { 3, 1, 0, 2 }, shapes[4 * 33], offs[4], bytes;
        uint8_t data[512], out[512], *p = data;
        zr_error err = {0};
        scratch sc;

        scratch_new(&sc);
        zr_dataset *ds = create_ragged(sc.fd, "<i2", ZR_SCHEMA_NDIM_ANY, ZR_CODEC_ZSTD);
        for (int i = 0; i < 4; i++) {
                ck_assert_int_eq(zr_ragged_record_bytes(dims[i], nd[i], 2, &lens[i], NULL), 0);
                zr_ragged_header_write(p, dims[i], nd[i]);
                gen_bytes(p + zr_ragged_header_bytes(nd[i]),
                          lens[i] - zr_ragged_header_bytes(nd[i]), 7 + i);
                p += lens[i];
                total += lens[i];
        }
        zr_batch b = { .dtype = "<i2", .data = data, .data_len = total, .lens = lens,
                       .nrecords = 4 };
        ck_assert_msg(zr_dataset_append(ds, &b, NULL, &err) == 0, "%s", err.message);
        ds = reopen(ds, sc.fd);
        ck_assert_uint_eq(zr_dataset_schema(ds)->ndim, ZR_SCHEMA_NDIM_ANY);
        ck_assert_msg(gather_ragged(ds, idx, 4, out, sizeof(out), shapes, offs, &bytes, &err) == 0,
                      "%s", err.message);
        uint64_t w = 0;
        for (int k = 0; k < 4; k++) {
                uint64_t i = idx[k], start = 0;
                ck_assert_uint_eq(shapes[w++], nd[i]);
                for (uint32_t d = 0; d < nd[i]; d++)
                        ck_assert_uint_eq(shapes[w++], dims[i][d]);
                for (uint64_t j = 0; j < i; j++)
                        start += lens[j];
                ck_assert(memcmp(out + offs[k], data + start + zr_ragged_header_bytes(nd[i]),
                                 lens[i] - zr_ragged_header_bytes(nd[i])) == 0);
        }
        /* 33 dims: not a record of any ndim */
        uint64_t big[33];
        for (int i = 0; i < 33; i++)
                big[i] = 1;
        uint8_t rec[8 * 34 + 2];
        zr_ragged_header_write(rec, big, 33);
        zr_batch bad = { .dtype = "<i2", .data = rec, .data_len = sizeof(rec),
                         .lens = (uint64_t[]){ sizeof(rec) }, .nrecords = 1 };
        expect_refused(ds, &bad, ZR_E_SCHEMA, "ndim 33");
        ck_assert_uint_eq(zr_dataset_length(ds), 4);
        zr_dataset_close(ds, NULL);
        scratch_free(&sc);
}
END_TEST

START_TEST(test_zstd_dict_needs_dict) {
        scratch sc;
        scratch_new(&sc);
        const uint64_t item_shape[2] = { 16, 16 };
        zr_dataset *ds = create_dense(sc.fd, "|u1", item_shape, 2, ZR_CODEC_ZSTD_DICT);
        enum { N = 400 };
        uint8_t *tiles = malloc(N * 256);
        for (int i = 0; i < N; i++)
                gen_tile(tiles + i * 256, 16, 16, i);
        zr_batch b = { .dtype = "|u1", .data = tiles, .data_len = N * 256,
                       .shape = (uint64_t[]){ N, 16, 16 }, .ndim = 3 };

        ck_assert_int_eq(zr_dataset_has_dict(ds), 0);
        expect_refused(ds, &b, ZR_E_NO_DICT, "no dictionary");
        ck_assert_uint_eq(zr_dataset_length(ds), 0);
        /* survives a reopen the same way */
        ds = reopen(ds, sc.fd);
        expect_refused(ds, &b, ZR_E_NO_DICT, "no dictionary");

        /* a dictionary made from the tiles themselves (zstd's raw-content form) */
        zr_error err = {0};
        ck_assert_msg(zr_dataset_install_dict(ds, tiles, 8192, &err) == 0, "%s", err.message);
        ck_assert_int_eq(zr_dataset_has_dict(ds), 1);
        ck_assert_int_eq(zr_dataset_install_dict(ds, tiles, 8192, NULL), -ZR_E_HAS_DICT);
        ck_assert_int_eq(zr_dataset_append(ds, &b, NULL, &err), 0);
        ds = reopen(ds, sc.fd);
        ck_assert_int_eq(zr_dataset_has_dict(ds), 1);
        uint64_t idx[3] = { 399, 0, 200 };
        uint8_t out[3 * 256];
        ck_assert_int_eq(zr_dataset_gather_dense(ds, idx, 3, out, sizeof(out), NULL), 0);
        for (int k = 0; k < 3; k++)
                ck_assert(memcmp(out + k * 256, tiles + idx[k] * 256, 256) == 0);
        free(tiles);
        zr_dataset_close(ds, NULL);
        scratch_free(&sc);
}
END_TEST

static void write_file(int dirfd, const char *name, const void *data, size_t len) {
        int fd = openat(dirfd, name, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        ck_assert_int_ge(fd, 0);
        ck_assert_int_eq(write(fd, data, len), (ssize_t)len);
        close(fd);
}

START_TEST(test_create_open_errors) {
        scratch sc;
        scratch_new(&sc);
        zr_dataset *ds = create_dense(sc.fd, "<i8", NULL, 0, ZR_CODEC_ZSTD), *other = NULL;
        zr_schema s;
        zr_error err = {0};
        struct stat before, after;

        /* a second create refuses and leaves the schema alone */
        ck_assert_int_eq(fstatat(sc.fd, ZR_SCHEMA_FILE, &before, 0), 0);
        ck_assert_int_eq(zr_schema_init_ragged(&s, "<f4", 1, ZR_CODEC_RAW, NULL), 0);
        ck_assert_int_eq(zr_dataset_create(sc.fd, &s, NULL, 0, &test_opts, &other, &err),
                         -ZR_E_EXISTS);
        ck_assert_int_eq(fstatat(sc.fd, ZR_SCHEMA_FILE, &after, 0), 0);
        ck_assert_uint_eq(before.st_ino, after.st_ino);
        ck_assert_int_eq(faccessat(sc.fd, ZR_SCHEMA_FILE ".tmp", F_OK, 0), -1);
        zr_dataset_close(ds, NULL);

        /* a schema naming another codec than the store's */
        zr_schema raw;
        void *buf;
        size_t len;
        ck_assert_int_eq(zr_schema_init_dense(&raw, "<i8", NULL, 0, ZR_CODEC_RAW, NULL), 0);
        ck_assert_int_eq(zr_schema_encode(&raw, &buf, &len, NULL), 0);
        write_file(sc.fd, ZR_SCHEMA_FILE, buf, len);
        free(buf);
        zr_error_clear(&err);
        ck_assert_int_eq(zr_dataset_open(sc.fd, &test_opts, &ds, &err), -ZR_E_SCHEMA);
        ck_assert_msg(strstr(err.message, "says codec raw, the store has codec zstd"), "%s",
                      err.message);
        /* a malformed schema file */
        write_file(sc.fd, ZR_SCHEMA_FILE, "\x85garbage", 8);
        zr_error_clear(&err);
        ck_assert_int_eq(zr_dataset_open(sc.fd, &test_opts, &ds, &err), -ZR_E_SCHEMA);
        /* an oversized one */
        char *big = calloc(ZR_SCHEMA_FILE_MAX + 10, 1);
        write_file(sc.fd, ZR_SCHEMA_FILE, big, ZR_SCHEMA_FILE_MAX + 10);
        free(big);
        zr_error_clear(&err);
        ck_assert_int_eq(zr_dataset_open(sc.fd, &test_opts, &ds, &err), -ZR_E_SCHEMA);
        ck_assert_ptr_nonnull(strstr(err.message, "more than"));
        /* no schema: a plain store, served as byte records (loaderx 1.5.7's Zrecord) */
        ck_assert_int_eq(unlinkat(sc.fd, ZR_SCHEMA_FILE, 0), 0);
        zr_error_clear(&err);
        ck_assert_int_eq(zr_dataset_open(sc.fd, &test_opts, &ds, &err), 0);
        ck_assert_int_eq(zr_dataset_schema(ds)->layout, ZR_LAYOUT_BYTES);
        ck_assert_int_eq(zr_dataset_schema(ds)->kind, ZR_SCHEMA_RAGGED);
        ck_assert_str_eq(zr_dataset_schema(ds)->dtype.str, "|u1");
        ck_assert_int_eq(zr_dataset_schema(ds)->codec, ZR_CODEC_ZSTD);
        zr_dataset_close(ds, NULL);
        /* not a store at all */
        int empty = scratch_child(&sc, "empty");
        zr_error_clear(&err);
        ck_assert_int_eq(zr_dataset_open(empty, &test_opts, &ds, &err), -ZR_E_NOT_STORE);
        close(empty);
        scratch_free(&sc);
}
END_TEST

START_TEST(test_passthroughs) {
        scratch sc;
        scratch_new(&sc);
        const uint64_t item_shape[1] = { 100 };
        zr_dataset *ds = create_dense(sc.fd, "|u1", item_shape, 1, ZR_CODEC_RAW);
        uint8_t data[10 * 100], out[10 * 100];
        gen_bytes(data, sizeof(data), 5);
        append_dense(ds, "|u1", item_shape, 1, data, 10);

        uint64_t del[3] = { 0, 5, 9 };
        zr_error err = {0};
        ck_assert_int_eq(zr_dataset_delete(ds, del, 3, &err), 0);
        ck_assert_uint_eq(zr_dataset_length(ds), 7);
        zr_stats st;
        ck_assert_int_eq(zr_dataset_stats(ds, &st, &err), 0);
        ck_assert_uint_eq(st.records, 7);
        ck_assert_uint_eq(st.live_bytes, 700);
        zr_compact_result cr;
        ck_assert_int_eq(zr_dataset_compact(ds, &cr, &err), 0);
        ck_assert_int_eq(cr.finished, 1);
        ck_assert_int_eq(zr_dataset_sync(ds, &err), 0);
        /* swap-last: 9 is dropped, 8 fills 5, 7 fills 0 */
        uint64_t idx[7] = { 0, 1, 2, 3, 4, 5, 6 };
        const uint64_t want[7] = { 7, 1, 2, 3, 4, 8, 6 };
        ck_assert_int_eq(zr_dataset_gather_dense(ds, idx, 7, out, sizeof(out), &err), 0);
        for (int i = 0; i < 7; i++)
                ck_assert(memcmp(out + i * 100, data + want[i] * 100, 100) == 0);
        ck_assert_ptr_nonnull(zr_dataset_store(ds));
        zr_dataset_close(ds, NULL);
        scratch_free(&sc);
}
END_TEST

TL_SUITE_MAIN("dataset", test_dense_roundtrip, test_ragged_roundtrip, test_dense_validation,
              test_ragged_validation, test_zstd_dict_needs_dict, test_create_open_errors,
              test_passthroughs, test_ragged_any_ndim)
