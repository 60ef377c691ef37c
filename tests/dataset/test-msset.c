/* test-msset.c: multi-stream sets: open in name order, misaligned sets refused
 * with every stream's length named, aligned append and delete, a failed append
 * that leaves every stream at its old length and content. */
#include <check.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "dataset/msset.h"
#include "dataset/ragged.h"
#include "helpers.h"
#include "check-run.h"

static const zr_store_options test_opts = { .chunk_log2 = TEST_CHUNK_LOG2 };

/* A sample is (joint: <f4 (2, 2), label: <i8 (), token: <i4 ragged ndim 1), and
 * record i carries i in every stream, so alignment is visible in the values. */
typedef struct batch_data {
        float joint[64][4];
        int64_t label[64];
        uint8_t token[64 * 64];
        uint64_t token_lens[64];
        uint64_t token_bytes;
        zr_batch b[3];
} batch_data;

static const char *const names[3] = { "joint", "label", "token" };

static void make_batch(batch_data *d, uint64_t first, uint64_t n) {
        uint8_t *p = d->token;
        for (uint64_t i = 0; i < n; i++) {
                uint64_t v = first + i, len = v % 5;
                for (int k = 0; k < 4; k++)
                        d->joint[i][k] = (float)v + 0.25f * (float)k;
                d->label[i] = (int64_t)v;
                zr_ragged_header_write(p, &len, 1);
                for (uint64_t k = 0; k < len; k++) {
                        int32_t t = (int32_t)v;
                        memcpy(p + 16 + 4 * k, &t, 4);
                }
                d->token_lens[i] = 16 + 4 * len;
                p += d->token_lens[i];
        }
        d->token_bytes = (uint64_t)(p - d->token);
        static uint64_t jshape[3], lshape[1];
        jshape[0] = n, jshape[1] = 2, jshape[2] = 2;
        lshape[0] = n;
        d->b[0] = (zr_batch){ .dtype = "<f4", .data = d->joint, .data_len = n * 16,
                              .shape = jshape, .ndim = 3 };
        d->b[1] = (zr_batch){ .dtype = "<i8", .data = d->label, .data_len = n * 8,
                              .shape = lshape, .ndim = 1 };
        d->b[2] = (zr_batch){ .dtype = "<i4", .data = d->token, .data_len = d->token_bytes,
                              .lens = d->token_lens, .nrecords = n };
}

static void create_streams(scratch *sc, uint64_t n) {
        zr_schema s[3];
        ck_assert_int_eq(zr_schema_init_dense(&s[0], "<f4", (uint64_t[]){ 2, 2 }, 2,
                                              ZR_CODEC_ZSTD, NULL), 0);
        ck_assert_int_eq(zr_schema_init_dense(&s[1], "<i8", NULL, 0, ZR_CODEC_RAW, NULL), 0);
        ck_assert_int_eq(zr_schema_init_ragged(&s[2], "<i4", 1, ZR_CODEC_RAW, NULL), 0);
        batch_data *d = calloc(1, sizeof(*d));
        make_batch(d, 0, n);
        /* created out of name order on purpose */
        for (int k = 2; k >= 0; k--) {
                int fd = scratch_child(sc, names[k]);
                zr_dataset *ds;
                zr_error err = {0};
                ck_assert_int_eq(zr_dataset_create(fd, &s[k], NULL, 0, &test_opts, &ds, &err), 0);
                ck_assert_msg(zr_dataset_append(ds, &d->b[k], NULL, &err) == 0, "%s", err.message);
                zr_dataset_close(ds, NULL);
                close(fd);
        }
        free(d);
}

/* Every stream's record i carries the value want[i]. */
static void assert_aligned(zr_msset *ms, const uint64_t *want, uint64_t n) {
        ck_assert_uint_eq(zr_msset_length(ms), n);
        uint64_t idx[64];
        for (uint64_t i = 0; i < n; i++)
                idx[i] = i;
        float joint[64][4];
        int64_t label[64];
        uint8_t tok[64 * 64];
        uint64_t shapes[64], offs[64];
        ck_assert_int_eq(zr_dataset_length(zr_msset_stream(ms, 0)), n);
        ck_assert_int_eq(zr_dataset_length(zr_msset_stream(ms, 1)), n);
        ck_assert_int_eq(zr_dataset_length(zr_msset_stream(ms, 2)), n);
        if (n == 0)
                return;
        ck_assert_int_eq(zr_dataset_gather_dense(zr_msset_stream(ms, 0), idx, n, joint,
                                                 sizeof(joint), NULL), 0);
        ck_assert_int_eq(zr_dataset_gather_dense(zr_msset_stream(ms, 1), idx, n, label,
                                                 sizeof(label), NULL), 0);
        ck_assert_int_eq(gather_ragged(zr_msset_stream(ms, 2), idx, n, tok, sizeof(tok), shapes,
                                       offs, NULL, NULL), 0);
        for (uint64_t i = 0; i < n; i++) {
                ck_assert_float_eq(joint[i][0], (float)want[i]);
                ck_assert_float_eq(joint[i][3], (float)want[i] + 0.75f);
                ck_assert_int_eq(label[i], (int64_t)want[i]);
                ck_assert_uint_eq(shapes[i], want[i] % 5);
                for (uint64_t k = 0; k < shapes[i]; k++) {
                        int32_t t;
                        memcpy(&t, tok + offs[i] + 4 * k, 4);
                        ck_assert_int_eq(t, (int32_t)want[i]);
                }
        }
}

static zr_msset *open_set(scratch *sc) {
        zr_msset *ms = NULL;
        zr_error err = {0};
        ck_assert_msg(zr_msset_open(sc->fd, &test_opts, &ms, &err) == 0, "%s", err.message);
        return ms;
}

/* The end of a test's set: closed, its batch data freed, its directory
 * removed. */
static void set_done(zr_msset *ms, batch_data *d, scratch *sc) {
        zr_msset_close(ms, NULL);
        free(d);
        scratch_free(sc);
}

/* A new set of `records` records per stream in a new scratch directory sc,
 * opened. */
static zr_msset *new_set(scratch *sc, uint64_t records) {
        scratch_new(sc);
        create_streams(sc, records);
        return open_set(sc);
}

START_TEST(test_open_aligned) {
        scratch sc;
        scratch_new(&sc);
        create_streams(&sc, 6);
        /* neither a file nor a dot-directory is a stream */
        int fd = openat(sc.fd, "README", O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
        close(fd);
        ck_assert_int_eq(mkdirat(sc.fd, ".cache", 0755), 0);

        zr_msset *ms = open_set(&sc);
        ck_assert_uint_eq(zr_msset_count(ms), 3);
        for (int k = 0; k < 3; k++)
                ck_assert_str_eq(zr_msset_name(ms, k), names[k]);
        ck_assert_int_eq(zr_msset_find(ms, "label"), 1);
        ck_assert_int_eq(zr_msset_find(ms, "nope"), -ENOENT);
        assert_aligned(ms, (uint64_t[]){ 0, 1, 2, 3, 4, 5 }, 6);
        zr_msset_close(ms, NULL);

        /* an empty directory is no set; a child that is not a dataset is named */
        int empty = scratch_child(&sc, "empty");
        zr_error err = {0};
        ck_assert_int_eq(zr_msset_open(empty, &test_opts, &ms, &err), -ZR_E_NOT_STORE);
        close(empty);
        zr_error_clear(&err);
        ck_assert_int_eq(zr_msset_open(sc.fd, &test_opts, &ms, &err), -ZR_E_NOT_STORE);
        ck_assert_msg(strstr(err.message, "stream empty: "), "%s", err.message);
        scratch_free(&sc);
}
END_TEST

START_TEST(test_misaligned_refused) {
        scratch sc;
        scratch_new(&sc);
        create_streams(&sc, 4);
        /* one more label, behind the set's back */
        int fd = openat(sc.fd, "label", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        zr_dataset *ds;
        ck_assert_int_eq(zr_dataset_open(fd, &test_opts, &ds, NULL), 0);
        int64_t v = 4;
        zr_batch b = { .dtype = "<i8", .data = &v, .data_len = 8, .shape = (uint64_t[]){ 1 },
                       .ndim = 1 };
        ck_assert_int_eq(zr_dataset_append(ds, &b, NULL, NULL), 0);
        zr_dataset_close(ds, NULL);
        close(fd);

        zr_msset *ms = NULL;
        zr_error err = {0};
        ck_assert_int_eq(zr_msset_open(sc.fd, &test_opts, &ms, &err), -ZR_E_MISALIGNED);
        ck_assert_ptr_null(ms);
        ck_assert_msg(strstr(err.message, "joint=4, label=5, token=4"), "%s", err.message);
        /* the streams were closed again: each opens on its own (no lock held) */
        fd = openat(sc.fd, "joint", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        ck_assert_int_eq(zr_dataset_open(fd, &test_opts, &ds, NULL), 0);
        zr_dataset_close(ds, NULL);
        close(fd);
        scratch_free(&sc);
}
END_TEST

START_TEST(test_aligned_append_delete) {
        scratch sc;
        zr_msset *ms = new_set(&sc, 5);
        batch_data *d = calloc(1, sizeof(*d));
        make_batch(d, 5, 7);
        /* given in another order than the set's */
        const char *order[3] = { "token", "joint", "label" };
        zr_batch bs[3] = { d->b[2], d->b[0], d->b[1] };
        uint64_t first = 0;
        zr_error err = {0};
        ck_assert_msg(zr_msset_append(ms, order, bs, 3, &first, &err) == 0, "%s", err.message);
        ck_assert_uint_eq(first, 5);
        uint64_t want[12];
        for (int i = 0; i < 12; i++)
                want[i] = (uint64_t)i;
        assert_aligned(ms, want, 12);

        /* swap-last delete of the same indices everywhere */
        ck_assert_int_eq(zr_msset_delete(ms, (uint64_t[]){ 0, 6, 11 }, 3, &err), 0);
        const uint64_t after[9] = { 9, 1, 2, 3, 4, 5, 10, 7, 8 };
        assert_aligned(ms, after, 9);
        /* out of range or duplicated: nothing changes anywhere */
        ck_assert_int_eq(zr_msset_delete(ms, (uint64_t[]){ 1, 9 }, 2, NULL), -ZR_E_RANGE);
        ck_assert_int_eq(zr_msset_delete(ms, (uint64_t[]){ 2, 2 }, 2, NULL), -EINVAL);
        assert_aligned(ms, after, 9);
        zr_msset_close(ms, NULL);

        ms = open_set(&sc);
        assert_aligned(ms, after, 9);
        set_done(ms, d, &sc);
}
END_TEST

START_TEST(test_append_refused) {
        scratch sc;
        zr_msset *ms = new_set(&sc, 3);
        batch_data *d = calloc(1, sizeof(*d));
        const uint64_t want[3] = { 0, 1, 2 };
        zr_error err = {0};

        /* different record counts per stream */
        make_batch(d, 3, 4);
        d->b[1].shape = (uint64_t[]){ 3 };
        d->b[1].data_len = 24;
        ck_assert_int_eq(zr_msset_append(ms, names, d->b, 3, NULL, &err), -ZR_E_MISALIGNED);
        ck_assert_msg(strstr(err.message, "joint=4, label=3, token=4"), "%s", err.message);
        assert_aligned(ms, want, 3);
        /* one stream's batch does not match its schema */
        make_batch(d, 3, 4);
        d->b[2].dtype = "<i8";
        zr_error_clear(&err);
        ck_assert_int_eq(zr_msset_append(ms, names, d->b, 3, NULL, &err), -ZR_E_SCHEMA);
        ck_assert_msg(strstr(err.message, "stream token: dtype: expected <i4, got <i8"), "%s",
                      err.message);
        assert_aligned(ms, want, 3);
        /* a stream missing, unknown or twice */
        make_batch(d, 3, 4);
        zr_error_clear(&err);
        ck_assert_int_eq(zr_msset_append(ms, names, d->b, 2, NULL, &err), -ZR_E_SCHEMA);
        ck_assert_ptr_nonnull(strstr(err.message, "nothing for stream \"token\""));
        const char *wrong[3] = { "joint", "label", "tokens" };
        ck_assert_int_eq(zr_msset_append(ms, wrong, d->b, 3, NULL, NULL), -ZR_E_SCHEMA);
        const char *twice[3] = { "joint", "label", "label" };
        ck_assert_int_eq(zr_msset_append(ms, twice, d->b, 3, NULL, NULL), -ZR_E_SCHEMA);
        assert_aligned(ms, want, 3);
        zr_msset_close(ms, NULL);

        /* a zstd_dict stream without its dictionary refuses for the whole set */
        int fd = scratch_child(&sc, "weights");
        zr_schema ws;
        zr_dataset *wds;
        ck_assert_int_eq(zr_schema_init_dense(&ws, "<f4", NULL, 0, ZR_CODEC_ZSTD_DICT, NULL), 0);
        ck_assert_int_eq(zr_dataset_create(fd, &ws, NULL, 0, &test_opts, &wds, NULL), 0);
        float w[3] = { 0.5f, 1.5f, 2.5f };
        zr_batch wb = { .dtype = "<f4", .data = w, .data_len = 12, .shape = (uint64_t[]){ 3 },
                        .ndim = 1 };
        zr_dataset_close(wds, NULL);
        close(fd);
        /* the new stream is empty while the others hold 3: misaligned, named */
        zr_error_clear(&err);
        ck_assert_int_eq(zr_msset_open(sc.fd, &test_opts, &ms, &err), -ZR_E_MISALIGNED);
        ck_assert_msg(strstr(err.message, "token=3, weights=0"), "%s", err.message);
        /* an aligned set of one plain and one dictionary-less stream */
        scratch sc2;
        scratch_new(&sc2);
        int lfd = scratch_child(&sc2, "label"), wfd = scratch_child(&sc2, "weights");
        zr_schema ls;
        zr_dataset *pair[2];
        ck_assert_int_eq(zr_schema_init_dense(&ls, "<i8", NULL, 0, ZR_CODEC_RAW, NULL), 0);
        ck_assert_int_eq(zr_dataset_create(lfd, &ls, NULL, 0, &test_opts, &pair[0], NULL), 0);
        ck_assert_int_eq(zr_dataset_create(wfd, &ws, NULL, 0, &test_opts, &pair[1], NULL), 0);
        close(lfd);
        close(wfd);
        const char *pn[2] = { "label", "weights" };
        ck_assert_int_eq(zr_msset_new(pair, pn, 2, &ms, NULL), 0);
        int64_t l[3] = { 7, 8, 9 };
        zr_batch pb[2] = { { .dtype = "<i8", .data = l, .data_len = 24,
                             .shape = (uint64_t[]){ 3 }, .ndim = 1 }, wb };
        zr_error_clear(&err);
        ck_assert_int_eq(zr_msset_append(ms, pn, pb, 2, NULL, &err), -ZR_E_NO_DICT);
        ck_assert_msg(strstr(err.message, "stream weights: "), "%s", err.message);
        ck_assert_uint_eq(zr_dataset_length(zr_msset_stream(ms, 0)), 0);
        ck_assert_uint_eq(zr_dataset_length(zr_msset_stream(ms, 1)), 0);
        zr_msset_close(ms, NULL);
        scratch_free(&sc2);
        free(d);
        scratch_free(&sc);
}
END_TEST

/* A set whose last stream ("token") cannot be written: the append passes every
 * check, joint and label are written, token fails, and joint and label are cut
 * back so that every stream keeps its old length and content. */
START_TEST(test_failed_append_rolls_back) {
        scratch sc;
        scratch_new(&sc);
        create_streams(&sc, 3);
        zr_dataset *ds[3];
        for (int k = 0; k < 3; k++) {
                zr_store_options o = test_opts;
                o.read_only = k == 2;
                int fd = openat(sc.fd, names[k], O_RDONLY | O_DIRECTORY | O_CLOEXEC);
                ck_assert_int_eq(zr_dataset_open(fd, &o, &ds[k], NULL), 0);
                close(fd);
        }
        zr_msset *ms = NULL;
        zr_error err = {0};
        ck_assert_int_eq(zr_msset_new(ds, names, 3, &ms, &err), 0);
        batch_data *d = calloc(1, sizeof(*d));
        make_batch(d, 3, 6);
        ck_assert_int_eq(zr_msset_append(ms, names, d->b, 3, NULL, &err), -ZR_E_READONLY);
        ck_assert_msg(strstr(err.message, "stream token: "), "%s", err.message);
        const uint64_t want[3] = { 0, 1, 2 };
        assert_aligned(ms, want, 3);
        zr_msset_close(ms, NULL);

        ms = open_set(&sc);
        assert_aligned(ms, want, 3);
        /* and the set still takes a good append */
        ck_assert_int_eq(zr_msset_append(ms, names, d->b, 3, NULL, NULL), 0);
        assert_aligned(ms, (uint64_t[]){ 0, 1, 2, 3, 4, 5, 6, 7, 8 }, 9);
        set_done(ms, d, &sc);
}
END_TEST

TL_SUITE_MAIN("msset", test_open_aligned, test_misaligned_refused, test_aligned_append_delete,
              test_append_refused, test_failed_append_rolls_back)
