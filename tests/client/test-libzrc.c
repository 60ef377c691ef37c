/* test-libzrc.c: every libzrc call against the real zrecordd.
 *
 * One daemon serves the whole suite (started before the runner, on a socket in
 * a temporary directory, ready when it says READY=1); every test makes its own
 * stores under that directory. Round trips compare bytes with what was written:
 * dense and ragged, all three codecs, delete by swap-last, compaction, sets.
 * Errors are checked by code, by the name and by the message the caller gets,
 * and reads large enough to grow the buffer and to split into several frames
 * exercise the library's bookkeeping. Loaders with identical parameters on two
 * connections share their rings (each step gathered once, read by both from
 * either ring), get bit-identical batches, release and close in any order and
 * leak no descriptor or mapping of the rings the daemon passes. Exits 77
 * (skipped) when this build has no zrecordd.
 */
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check-run.h"
#include "daemon.h"
#include "zrc.h"

static tl_daemon daemon_;

static zrc_conn *conn(void) {
        zrc_conn *c = NULL;
        zrc_error e = { 0 };
        int r = zrc_connect(daemon_.socket, &c, &e);

        ck_assert_msg(r == 0, "connect: %d %s", r, e.message);
        return c;
}

static const char *path(const char *name) {
        static char buf[PATH_MAX];

        return tl_daemon_path(&daemon_, name, buf);
}

/* A dense <f4 (4, 5) record whose values identify it. */
static void fill_record(float *rec, uint64_t id) {
        for (int i = 0; i < 20; i++)
                rec[i] = (float)id * 100.0f + (float)i;
}

static zrc_dataset *make_dense(zrc_conn *c, const char *name, zrc_codec codec, uint64_t n,
                               const void *dict, size_t dict_size) {
        uint64_t shape[] = { 4, 5 }, first = 99;
        zrc_dataset *d = NULL;
        zrc_schema s;
        float *data = malloc(n * 20 * sizeof(float) + 1);

        ck_assert_int_eq(zrc_schema_dense(&s, "<f4", shape, 2, codec), 0);
        ck_assert_msg(zrc_dataset_create(c, path(name), &s, dict, dict_size, &d) == 0,
                      "create %s: %s", name, zrc_last_error(c)->message);
        ck_assert_uint_eq(zrc_dataset_length(d), 0);
        ck_assert(zrc_dataset_writable(d));
        for (uint64_t i = 0; i < n; i++)
                fill_record(data + i * 20, i);
        ck_assert_msg(zrc_dataset_append_dense(d, data, n, &first) == 0, "append: %s",
                      zrc_last_error(c)->message);
        ck_assert_uint_eq(first, 0);
        ck_assert_uint_eq(zrc_dataset_length(d), n);
        free(data);
        return d;
}

static void check_dense(zrc_dataset *d, const uint64_t *idx, size_t n, const uint64_t *ids) {
        zrc_batch b;
        float want[20];

        ck_assert_msg(zrc_dataset_read(d, idx, n, &b) == 0, "read: %s",
                      zrc_last_error(zrc_dataset_conn(d))->message);
        ck_assert_uint_eq(b.count, n);
        ck_assert_int_eq(b.kind, ZRC_DENSE);
        ck_assert_uint_eq(b.record_bytes, 80);
        ck_assert_uint_eq(b.bytes, n * 80);
        ck_assert_uint_eq((uintptr_t)b.data % 8, 0);
        for (size_t j = 0; j < n; j++) {
                fill_record(want, ids ? ids[j] : idx[j]);
                ck_assert_mem_eq((const uint8_t *)b.data + j * 80, want, 80);
        }
}

/* ---- connection ------------------------------------------------------ */

START_TEST(test_connect) {
        zrc_conn *c = conn();
        const zrc_limits *l = zrc_limits_get(c);
        zrc_error e = { 0 };
        zrc_conn *c2 = NULL;

        ck_assert_uint_eq(zrc_version(c), 1);
        ck_assert(strncmp(zrc_daemon_name(c), "zrecordd ", 9) == 0);
        ck_assert_str_eq(zrc_socket_path(c), daemon_.socket);
        ck_assert_uint_ge(l->frame_max, 64 * 1024);
        ck_assert_uint_gt(l->handles_max, 0);
        ck_assert_uint_gt(l->shm_bytes_max, 0);
        ck_assert_uint_eq(l->streams_max, 32);
        ck_assert(zrc_has_feature(c, "msset"));
        ck_assert(zrc_has_feature(c, "dict"));
        ck_assert(zrc_has_feature(c, "verify"));
        ck_assert(!zrc_has_feature(c, "bogus"));
        ck_assert_int_eq(zrc_last_error(c)->code, 0);
        zrc_disconnect(c);

        /* $ZRECORD_SOCKET when no path is given */
        setenv("ZRECORD_SOCKET", daemon_.socket, 1);
        ck_assert_int_eq(zrc_connect(NULL, &c2, NULL), 0);
        ck_assert_str_eq(zrc_socket_path(c2), daemon_.socket);
        zrc_disconnect(c2);

        /* no daemon there */
        ck_assert_int_eq(zrc_connect(path("nothing.sock"), &c2, &e), -ENOENT);
        ck_assert_str_eq(e.name, "ENOENT");
        ck_assert(strstr(e.message, "nothing.sock"));
        unsetenv("ZRECORD_SOCKET");
        ck_assert_ptr_null(zrc_disconnect(NULL));
}
END_TEST

/* ---- dense round trips -------------------------------------------------- */

static void dense_round_trip(zrc_codec codec, const char *name) {
        zrc_conn *c = conn();
        zrc_dataset *d = make_dense(c, name, codec, 200, NULL, 0), *r;
        uint64_t idx[] = { 7, 3, 7, 199, 0, 42 };
        zrc_info info;
        zrc_stats st;

        check_dense(d, idx, 6, NULL);
        check_dense(d, idx, 0, NULL);
        ck_assert_int_eq(zrc_dataset_sync(d), 0);
        ck_assert_int_eq(zrc_dataset_info(d, &info), 0);
        ck_assert_uint_eq(info.length, 200);
        ck_assert_int_eq(info.schema.kind, ZRC_DENSE);
        ck_assert_str_eq(info.schema.dtype, "<f4");
        ck_assert_uint_eq(info.schema.ndim, 2);
        ck_assert_uint_eq(info.schema.item_shape[0], 4);
        ck_assert_uint_eq(info.schema.item_shape[1], 5);
        ck_assert_int_eq(info.schema.codec, codec);
        ck_assert(info.writable);
        ck_assert_int_eq(zrc_dataset_stats(d, &st), 0);
        ck_assert_uint_eq(st.records, 200);
        ck_assert_uint_ge(st.chunk_bytes, st.live_bytes);
        if (codec == ZRC_CODEC_RAW)
                ck_assert_uint_eq(st.live_bytes, 200 * 80);
        zrc_dataset_close(d);

        /* reopen read-only, from a second connection */
        {
                zrc_conn *c2 = conn();

                ck_assert_int_eq(zrc_dataset_open(c2, path(name), 0, &r), 0);
                ck_assert(!zrc_dataset_writable(r));
                ck_assert_uint_eq(zrc_dataset_length(r), 200);
                ck_assert_int_eq(zrc_dataset_schema(r)->codec, codec);
                check_dense(r, idx, 6, NULL);
                zrc_dataset_close(r);
                zrc_disconnect(c2);
        }
        zrc_disconnect(c);
}

START_TEST(test_dense_raw) {
        dense_round_trip(ZRC_CODEC_RAW, "dense-raw");
}
END_TEST

START_TEST(test_dense_zstd) {
        dense_round_trip(ZRC_CODEC_ZSTD, "dense-zstd");
}
END_TEST

START_TEST(test_dense_zstd_dict) {
        zrc_conn *c = conn();
        zrc_dataset *src = make_dense(c, "dict-src", ZRC_CODEC_RAW, 2000, NULL, 0), *d, *e;
        uint64_t idx[] = { 1999, 5, 1000 };
        void *dict = NULL;
        size_t dict_size = 0;
        float rec[20];
        zrc_info info;

        /* a dictionary trained on a store, and one on samples passed in a memfd */
        ck_assert_msg(zrc_dataset_train_dict(src, "small", &dict, &dict_size) == 0, "train: %s",
                      zrc_last_error(c)->message);
        ck_assert_uint_gt(dict_size, 0);
        free(dict);
        {
                float *samples = malloc(2000 * 80);
                uint64_t *sizes = malloc(2000 * sizeof(uint64_t));

                for (int i = 0; i < 2000; i++) {
                        fill_record(samples + i * 20, (uint64_t)i);
                        sizes[i] = 80;
                }
                ck_assert_msg(zrc_train_dict(c, "small", samples, sizes, 2000, &dict, &dict_size) == 0,
                              "train: %s", zrc_last_error(c)->message);
                free(samples);
                free(sizes);
        }

        d = make_dense(c, "dense-dict", ZRC_CODEC_ZSTD_DICT, 1500, dict, dict_size);
        check_dense(d, idx + 1, 2, NULL);
        ck_assert_int_eq(zrc_dataset_info(d, &info), 0);
        ck_assert(info.has_dict);
        /* a dictionary goes only into an empty store */
        ck_assert_int_eq(zrc_dataset_install_dict(d, dict, dict_size), -ZR_E_SCHEMA);

        /* created without a dictionary: appends wait for one */
        {
                zrc_schema s;
                uint64_t shape[] = { 4, 5 };

                ck_assert_int_eq(zrc_schema_dense(&s, "<f4", shape, 2, ZRC_CODEC_ZSTD_DICT), 0);
                ck_assert_int_eq(zrc_dataset_create(c, path("dense-nodict"), &s, NULL, 0, &e), 0);
                fill_record(rec, 0);
                ck_assert_int_eq(zrc_dataset_append_dense(e, rec, 1, NULL), -ZR_E_NO_DICT);
                ck_assert_str_eq(zrc_last_error(c)->name, "ZR_E_NO_DICT");
                ck_assert_int_eq(zrc_dataset_install_dict(e, dict, dict_size), 0);
                ck_assert_int_eq(zrc_dataset_install_dict(e, dict, dict_size), -ZR_E_HAS_DICT);
                ck_assert_int_eq(zrc_dataset_append_dense(e, rec, 1, NULL), 0);
                check_dense(e, idx + 1, 0, NULL);
                {
                        uint64_t zero = 0;

                        check_dense(e, &zero, 1, NULL);
                }
                zrc_dataset_close(e);
        }
        /* a dictionary for a raw store is refused */
        ck_assert_int_eq(zrc_dataset_install_dict(src, dict, dict_size), -ZR_E_BAD_CODEC);
        ck_assert_int_eq(zrc_train_dict(c, "no-such-tier", rec, (uint64_t[]){ 80 }, 1, &dict, &dict_size) < 0, 1);
        free(dict);
        zrc_dataset_close(d);
        zrc_dataset_close(src);
        zrc_disconnect(c);
}
END_TEST

/* ---- ragged ------------------------------------------------------------- */

static void ragged_round_trip(zrc_codec codec, const char *name) {
        enum { N = 300 };
        zrc_conn *c = conn();
        zrc_dataset *d = NULL;
        zrc_schema s;
        uint64_t shapes[N * 2], first = 1, idx[] = { 0, 299, 17, 17, 1, 150 };
        const void *payloads[N];
        int32_t *bufs[N];
        zrc_batch b;

        void *dict = NULL;
        size_t dict_size = 0;

        for (int i = 0; i < N; i++) {
                uint64_t rows = (uint64_t)(i % 7), cols = 1 + (uint64_t)(i % 3);

                shapes[2 * i] = rows;
                shapes[2 * i + 1] = cols;
                bufs[i] = malloc(rows * cols * 4 + 4);
                for (uint64_t k = 0; k < rows * cols; k++)
                        bufs[i][k] = i * 1000 + (int32_t)k;
                payloads[i] = bufs[i];
        }
        if (codec == ZRC_CODEC_ZSTD_DICT) {
                /* a dictionary trained on the records as stored: whole records,
                 * shape headers included, packed back to back */
                uint8_t *packed = malloc(N * (24 + 7 * 3 * 4));
                uint64_t sizes[N], off = 0;

                for (int i = 0; i < N; i++)
                        off += sizes[i] = zrc_ragged_pack(packed + off, &shapes[2 * i], 2, 4, bufs[i]);
                ck_assert_msg(zrc_train_dict(c, "small", packed, sizes, N, &dict, &dict_size) == 0,
                              "train: %s", zrc_last_error(c)->message);
                free(packed);
        }
        ck_assert_int_eq(zrc_schema_ragged(&s, "<i4", 2, codec), 0);
        ck_assert_msg(zrc_dataset_create(c, path(name), &s, dict, dict_size, &d) == 0, "create: %s",
                      zrc_last_error(c)->message);
        free(dict);
        ck_assert_msg(zrc_dataset_append_ragged(d, N, shapes, payloads, &first) == 0, "append: %s",
                      zrc_last_error(c)->message);
        ck_assert_uint_eq(first, 0);
        ck_assert_uint_eq(zrc_dataset_length(d), N);

        ck_assert_msg(zrc_dataset_read(d, idx, 6, &b) == 0, "read: %s", zrc_last_error(c)->message);
        ck_assert_uint_eq(b.count, 6);
        ck_assert_int_eq(b.kind, ZRC_RAGGED);
        ck_assert_uint_eq(b.ndim, 2);
        for (int j = 0; j < 6; j++) {
                uint64_t i = idx[j];

                ck_assert_uint_eq(b.shapes[2 * j], shapes[2 * i]);
                ck_assert_uint_eq(b.shapes[2 * j + 1], shapes[2 * i + 1]);
                ck_assert_uint_eq(b.lengths[j], shapes[2 * i] * shapes[2 * i + 1] * 4);
                ck_assert_uint_eq((uintptr_t)b.payloads[j] % 8, 0);
                if (b.lengths[j])
                        ck_assert_mem_eq(b.payloads[j], bufs[i], b.lengths[j]);
        }

        /* the generic form: records packed by the caller, dtype and ndim stated */
        {
                uint8_t packed[256];
                uint64_t dims[2] = { 2, 2 }, sizes[1];
                int32_t v[4] = { -1, -2, -3, -4 };
                zrc_records r = { .dtype = "<i4", .ndim = 2, .count = 1, .data = packed,
                                  .sizes = sizes };

                sizes[0] = zrc_ragged_pack(packed, dims, 2, 4, v);
                ck_assert_int_eq(zrc_dataset_append(d, &r, &first), 0);
                ck_assert_uint_eq(first, N);
                ck_assert_int_eq(zrc_dataset_read(d, &first, 1, &b), 0);
                ck_assert_mem_eq(b.payloads[0], v, 16);

                /* a header that lies about ndim is refused, nothing appended */
                r.ndim = 1;
                ck_assert_int_eq(zrc_dataset_append(d, &r, NULL), -ZR_E_SCHEMA);
                packed[0] = 1;
                r.ndim = 2;
                ck_assert_int_eq(zrc_dataset_append(d, &r, NULL), -ZR_E_SCHEMA);
                ck_assert(strlen(zrc_last_error(c)->message) > 0);
                ck_assert_uint_eq(zrc_dataset_length(d), N + 1);
        }
        for (int i = 0; i < N; i++)
                free(bufs[i]);
        zrc_dataset_close(d);
        zrc_disconnect(c);
}

START_TEST(test_ragged_raw) {
        ragged_round_trip(ZRC_CODEC_RAW, "ragged-raw");
}
END_TEST

START_TEST(test_ragged_zstd) {
        ragged_round_trip(ZRC_CODEC_ZSTD, "ragged-zstd");
}
END_TEST

START_TEST(test_ragged_zstd_dict) {
        ragged_round_trip(ZRC_CODEC_ZSTD_DICT, "ragged-dict");
}
END_TEST

START_TEST(test_ragged_growth) {
        /* records larger than the first buffer: the library grows it from the
         * daemon's `needed` and reads again */
        enum { N = 64, LEN = 16384 };
        zrc_conn *c = conn();
        zrc_dataset *d = NULL;
        zrc_schema s;
        uint64_t shapes[N], idx[N * 4];
        const void *payloads[N];
        uint8_t *data = malloc(N * LEN);
        zrc_batch b;

        ck_assert_int_eq(zrc_schema_ragged(&s, "|u1", 1, ZRC_CODEC_RAW), 0);
        ck_assert_int_eq(zrc_dataset_create(c, path("ragged-big"), &s, NULL, 0, &d), 0);
        for (int i = 0; i < N; i++) {
                shapes[i] = LEN - (uint64_t)i;
                memset(data + i * LEN, i + 1, LEN);
                payloads[i] = data + i * LEN;
        }
        ck_assert_int_eq(zrc_dataset_append_ragged(d, N, shapes, payloads, NULL), 0);
        for (int j = 0; j < N * 4; j++)
                idx[j] = (uint64_t)((j * 7) % N);
        ck_assert_msg(zrc_dataset_read(d, idx, N * 4, &b) == 0, "read: %s",
                      zrc_last_error(c)->message);
        ck_assert_uint_ge(b.bytes, (uint64_t)N * 4 * (LEN - N));
        for (int j = 0; j < N * 4; j++) {
                ck_assert_uint_eq(b.lengths[j], LEN - idx[j]);
                ck_assert_mem_eq(b.payloads[j], data + idx[j] * LEN, b.lengths[j]);
        }
        free(data);
        zrc_dataset_close(d);
        zrc_disconnect(c);
}
END_TEST

START_TEST(test_dense_split_read) {
        /* more indices than one READ frame carries: split into several READs */
        zrc_conn *c = conn();
        uint64_t n = zrc_limits_get(c)->frame_max / 8 + 1000, *idx = malloc(n * 8);
        zrc_dataset *d = NULL;
        zrc_schema s;
        uint16_t vals[4096];
        zrc_batch b;

        ck_assert_int_eq(zrc_schema_dense(&s, "<u2", NULL, 0, ZRC_CODEC_RAW), 0);
        ck_assert_int_eq(zrc_dataset_create(c, path("dense-split"), &s, NULL, 0, &d), 0);
        for (int i = 0; i < 4096; i++)
                vals[i] = (uint16_t)(i * 3);
        ck_assert_int_eq(zrc_dataset_append_dense(d, vals, 4096, NULL), 0);
        for (uint64_t j = 0; j < n; j++)
                idx[j] = (j * 2654435761u) % 4096;
        ck_assert_msg(zrc_dataset_read(d, idx, n, &b) == 0, "read: %s", zrc_last_error(c)->message);
        ck_assert_uint_eq(b.count, n);
        for (uint64_t j = 0; j < n; j++)
                ck_assert_uint_eq(((const uint16_t *)b.data)[j], (uint16_t)(idx[j] * 3));
        free(idx);
        zrc_dataset_close(d);
        zrc_disconnect(c);
}
END_TEST

/* ---- delete, compact, verify ------------------------------------------ */

START_TEST(test_delete_compact_verify) {
        zrc_conn *c = conn();
        zrc_dataset *d = make_dense(c, "delete", ZRC_CODEC_RAW, 10, NULL, 0);
        uint64_t len = 0, del[] = { 3 }, all[9], ids[9];
        zrc_verify_result *v = malloc(sizeof(*v));
        zrc_stats st;

        /* swap-last: the last record takes index 3 */
        ck_assert_int_eq(zrc_dataset_delete(d, del, 1, &len), 0);
        ck_assert_uint_eq(len, 9);
        ck_assert_uint_eq(zrc_dataset_length(d), 9);
        for (int i = 0; i < 9; i++) {
                all[i] = (uint64_t)i;
                ids[i] = i == 3 ? 9 : (uint64_t)i;
        }
        check_dense(d, all, 9, ids);

        ck_assert_int_eq(zrc_dataset_stats(d, &st), 0);
        ck_assert_uint_eq(st.records, 9);
        ck_assert_uint_gt(st.reclaimable, 0);
        ck_assert_int_eq(zrc_dataset_compact(d, &st), 0);
        ck_assert_uint_eq(st.records, 9);
        ck_assert_uint_eq(st.reclaimable, 0);
        ck_assert_uint_eq(st.live_bytes, 9 * 80);
        check_dense(d, all, 9, ids);

        ck_assert_int_eq(zrc_dataset_verify(d, v), 0);
        ck_assert(v->ok);
        ck_assert_uint_eq(v->records, 9);
        ck_assert_uint_eq(v->bad, 0);
        ck_assert_uint_eq(v->n_bad_indices, 0);

        /* a repeated index and an index out of range */
        ck_assert_int_eq(zrc_dataset_delete(d, (uint64_t[]){ 1, 1 }, 2, NULL), -EINVAL);
        ck_assert_int_eq(zrc_dataset_delete(d, (uint64_t[]){ 9 }, 1, NULL), -ZR_E_RANGE);
        ck_assert(zrc_last_error(c)->has_index);
        ck_assert_uint_eq(zrc_last_error(c)->index, 9);
        ck_assert_uint_eq(zrc_dataset_length(d), 9);
        free(v);
        zrc_dataset_close(d);
        zrc_disconnect(c);
}
END_TEST

/* ---- errors ------------------------------------------------------------- */

START_TEST(test_errors) {
        zrc_conn *c = conn();
        zrc_dataset *d = make_dense(c, "errors", ZRC_CODEC_ZSTD, 5, NULL, 0), *ro, *x = NULL;
        const zrc_error *e = zrc_last_error(c);
        uint64_t bad[] = { 1, 5 }, shape3[] = { 3 };
        float rec[40] = { 0 }; /* room for the 160 bytes a (4, 5) <f8 record takes */
        zrc_batch b;
        zrc_schema s;

        /* index out of range: the code, its name, the index and a message */
        ck_assert_int_eq(zrc_dataset_read(d, bad, 2, &b), -ZR_E_RANGE);
        ck_assert_int_eq(e->code, ZR_E_RANGE);
        ck_assert_str_eq(e->name, "ZR_E_RANGE");
        ck_assert(e->has_index);
        ck_assert_uint_eq(e->index, 5);
        ck_assert_msg(strstr(e->message, "5"), "message: %s", e->message);
        /* the connection goes on */
        check_dense(d, bad, 1, NULL);

        /* schema mismatches: dtype, item shape */
        {
                zrc_records r = { .dtype = "<f8", .item_shape = (uint64_t[]){ 4, 5 }, .ndim = 2,
                                  .count = 1, .data = rec };

                ck_assert_int_eq(zrc_dataset_append(d, &r, NULL), -ZR_E_SCHEMA);
                ck_assert_str_eq(e->name, "ZR_E_SCHEMA");
                ck_assert_msg(strstr(e->message, "f8") || strstr(e->message, "dtype") ||
                                      strstr(e->message, "record_bytes"),
                              "message: %s", e->message);
                r.dtype = "<f4";
                r.item_shape = shape3;
                r.ndim = 1;
                ck_assert_int_eq(zrc_dataset_append(d, &r, NULL), -ZR_E_SCHEMA);
                ck_assert_uint_eq(zrc_dataset_length(d), 5);
        }
        ck_assert_int_eq(zrc_dataset_append_ragged(d, 0, NULL, NULL, NULL), -ZR_E_SCHEMA);

        /* a store already there; a directory that is not a store; no directory */
        ck_assert_int_eq(zrc_schema_dense(&s, "<f4", NULL, 0, ZRC_CODEC_RAW), 0);
        ck_assert_int_eq(zrc_dataset_create(c, path("errors"), &s, NULL, 0, &x), -ZR_E_EXISTS);
        ck_assert_str_eq(e->name, "ZR_E_EXISTS");
        mkdir(path("not-a-store"), 0755);
        ck_assert_int_eq(zrc_dataset_open(c, path("not-a-store"), 0, &x), -ZR_E_NOT_STORE);
        ck_assert_str_eq(e->name, "ZR_E_NOT_STORE");
        ck_assert(strstr(e->message, "not-a-store"));
        ck_assert_int_eq(zrc_dataset_open(c, path("missing"), 0, &x), -ENOENT);
        ck_assert(strstr(e->message, "missing"));
        /* a non-empty directory cannot receive a new store */
        {
                FILE *f = fopen(path("not-a-store/file"), "w");

                ck_assert_ptr_nonnull(f);
                fclose(f);
                ck_assert_int_eq(zrc_dataset_create(c, path("not-a-store"), &s, NULL, 0, &x),
                                 -ENOTEMPTY);
        }
        /* a failed create removes the directory it made */
        ck_assert_int_eq(zrc_schema_dense(&s, "<f4", NULL, 0, ZRC_CODEC_RAW), 0);
        strcpy(s.dtype, "<U4");
        ck_assert_int_lt(zrc_dataset_create(c, path("bad-schema"), &s, NULL, 0, &x), 0);
        ck_assert_int_eq(access(path("bad-schema"), F_OK), -1);
        /* a dictionary for a codec that takes none */
        ck_assert_int_eq(zrc_schema_dense(&s, "<f4", NULL, 0, ZRC_CODEC_ZSTD), 0);
        ck_assert_int_eq(zrc_dataset_create(c, path("x"), &s, "dict", 4, &x), -EINVAL);

        /* read-only handles refuse writes */
        ck_assert_int_eq(zrc_dataset_open(c, path("errors"), 0, &ro), 0);
        ck_assert_int_eq(zrc_dataset_append_dense(ro, rec, 1, NULL), -ZR_E_READONLY);
        ck_assert_int_eq(zrc_dataset_delete(ro, bad, 1, NULL), -ZR_E_READONLY);
        ck_assert_int_eq(zrc_dataset_compact(ro, NULL), -ZR_E_READONLY);
        ck_assert_str_eq(e->name, "ZR_E_READONLY");
        zrc_dataset_close(ro);

        /* the connection survived all of it */
        check_dense(d, bad, 1, NULL);
        zrc_dataset_close(d);
        zrc_disconnect(c);
}
END_TEST

/* ---- sets --------------------------------------------------------------- */

START_TEST(test_sets) {
        zrc_conn *c = conn();
        zrc_dataset *x = NULL, *y = NULL;
        zrc_set *set = NULL;
        zrc_schema sx, sy;
        uint64_t first = 7, len = 0;
        float imgs[3 * 20];
        int64_t labels[3] = { 10, 11, 12 };
        zrc_batch b;
        char root[PATH_MAX];

        snprintf(root, sizeof(root), "%s", path("set"));
        ck_assert_int_eq(mkdir(root, 0755), 0);
        ck_assert_int_eq(zrc_schema_dense(&sx, "<f4", (uint64_t[]){ 4, 5 }, 2, ZRC_CODEC_RAW), 0);
        ck_assert_int_eq(zrc_schema_dense(&sy, "<i8", NULL, 0, ZRC_CODEC_ZSTD), 0);
        ck_assert_int_eq(zrc_dataset_create(c, path("set/images"), &sx, NULL, 0, &x), 0);
        ck_assert_int_eq(zrc_dataset_create(c, path("set/labels"), &sy, NULL, 0, &y), 0);
        zrc_dataset_close(x);
        zrc_dataset_close(y);

        ck_assert_msg(zrc_set_open(c, root, ZRC_OPEN_WRITABLE, &set) == 0, "set: %s",
                      zrc_last_error(c)->message);
        ck_assert_uint_eq(zrc_set_streams(set), 2);
        ck_assert_str_eq(zrc_set_stream_name(set, 0), "images");
        ck_assert_str_eq(zrc_set_stream_name(set, 1), "labels");
        ck_assert_ptr_null(zrc_set_stream_name(set, 2));
        ck_assert_ptr_null(zrc_set_stream(set, 2));
        ck_assert_uint_eq(zrc_set_length(set), 0);
        for (int i = 0; i < 3; i++)
                fill_record(imgs + i * 20, (uint64_t)i);
        {
                zrc_records r[2] = { { .count = 3, .data = imgs }, { .count = 3, .data = labels } };

                ck_assert_msg(zrc_set_append(set, r, &first) == 0, "set append: %s",
                              zrc_last_error(c)->message);
                ck_assert_uint_eq(first, 0);
                ck_assert_uint_eq(zrc_set_length(set), 3);
                /* misaligned counts are refused */
                r[1].count = 2;
                ck_assert_int_eq(zrc_set_append(set, r, NULL), -ZR_E_MISALIGNED);
        }
        check_dense(zrc_set_stream(set, 0), (uint64_t[]){ 2, 0 }, 2, NULL);
        ck_assert_int_eq(zrc_dataset_read(zrc_set_stream(set, 1), (uint64_t[]){ 1, 2 }, 2, &b), 0);
        ck_assert_int_eq(((const int64_t *)b.data)[0], 11);
        ck_assert_int_eq(((const int64_t *)b.data)[1], 12);

        ck_assert_int_eq(zrc_set_delete(set, (uint64_t[]){ 0 }, 1, &len), 0);
        ck_assert_uint_eq(len, 2);
        ck_assert_int_eq(zrc_dataset_read(zrc_set_stream(set, 1), (uint64_t[]){ 0 }, 1, &b), 0);
        ck_assert_int_eq(((const int64_t *)b.data)[0], 12);
        zrc_dataset_close(zrc_set_stream(set, 0)); /* owned by the set: a no-op */
        zrc_set_close(set);

        /* a stream appended to on its own makes the set misaligned */
        ck_assert_int_eq(zrc_dataset_open(c, path("set/labels"), ZRC_OPEN_WRITABLE, &y), 0);
        ck_assert_int_eq(zrc_dataset_append_dense(y, labels, 1, NULL), 0);
        zrc_dataset_close(y);
        ck_assert_int_eq(zrc_set_open(c, root, 0, &set), -ZR_E_MISALIGNED);
        ck_assert_msg(strstr(zrc_last_error(c)->message, "labels"), "message: %s",
                      zrc_last_error(c)->message);
        /* a directory without streams */
        ck_assert_int_eq(zrc_set_open(c, path("set/images"), 0, &set), -ENOENT);
        zrc_disconnect(c);
}
END_TEST


/* ---- loaders ------------------------------------------------------------ */

/* Skips a loader test (passing) on a daemon without the feature. */
#define NEED_LOADER(c)                                                                  \
        do {                                                                            \
                if (!zrc_has_feature((c), "loader")) {                                  \
                        printf("note: the daemon has no \"loader\" feature: skipped\n"); \
                        zrc_disconnect(c);                                              \
                        return;                                                         \
                }                                                                       \
        } while (0)

START_TEST(test_loader_dense) {
        zrc_conn *c = conn();
        zrc_dataset *d;
        zrc_loader *l = NULL;
        zrc_loader_batch b;
        zrc_loader_options o = { .sampler = "sequential", .batch_size = 8, .seed = 1,
                                 .prefetch = 3, .indices = true };
        float want[20];

        NEED_LOADER(c);
        d = make_dense(c, "loader-dense", ZRC_CODEC_ZSTD, 100, NULL, 0);
        ck_assert_msg(zrc_loader_open(c, &d, 1, &o, &l) == 0, "open: %s", zrc_last_error(c)->message);
        ck_assert_uint_eq(zrc_loader_slots(l), 3);
        ck_assert_uint_eq(zrc_loader_length(l), 100);
        for (uint64_t step = 0; step < 20; step++) {
                ck_assert_msg(zrc_loader_next(l, &b) == 0, "next: %s", zrc_last_error(c)->message);
                ck_assert_uint_eq(b.step, step);
                ck_assert_uint_eq(b.count, 8);
                ck_assert_uint_eq(b.n_streams, 1);
                ck_assert_ptr_nonnull(b.indices);
                ck_assert_uint_eq(b.streams[0].bytes, 8 * 80);
                ck_assert_uint_eq((uintptr_t)b.streams[0].data % 64, 0);
                for (uint64_t j = 0; j < 8; j++) {
                        /* sequential: position step * B + j, modulo the length */
                        ck_assert_uint_eq(b.indices[j], (step * 8 + j) % 100);
                        fill_record(want, b.indices[j]);
                        ck_assert_mem_eq((const uint8_t *)b.streams[0].data + j * 80, want, 80);
                }
                /* a request between batches: events keep arriving meanwhile */
                if (step % 5 == 0) {
                        zrc_info info;

                        ck_assert_int_eq(zrc_dataset_info(d, &info), 0);
                }
                ck_assert_int_eq(zrc_loader_release(l, b.slot), 0);
        }
        ck_assert_uint_eq(zrc_loader_step(l), 20);
        ck_assert_int_eq(zrc_loader_release(l, b.slot), -EINVAL); /* not held any more */
        zrc_loader_close(l);
        zrc_dataset_close(d);
        zrc_disconnect(c);
}
END_TEST

START_TEST(test_loader_resume_and_slots) {
        zrc_conn *c = conn();
        zrc_dataset *d;
        zrc_loader *a = NULL, *r = NULL, *h = NULL;
        zrc_loader_batch b, held[2];
        zrc_loader_options o = { .sampler = "cyclic", .batch_size = 7, .seed = 42,
                                 .indices = true };
        uint64_t seen[12][7];

        NEED_LOADER(c);
        d = make_dense(c, "loader-resume", ZRC_CODEC_RAW, 50, NULL, 0);
        ck_assert_int_eq(zrc_loader_open(c, &d, 1, &o, &a), 0);
        for (int step = 0; step < 12; step++) {
                ck_assert_int_eq(zrc_loader_next(a, &b), 0);
                memcpy(seen[step], b.indices, sizeof(seen[step]));
                ck_assert_int_eq(zrc_loader_release(a, b.slot), 0);
        }
        zrc_loader_close(a);

        /* a loader opened at step 5 sees exactly steps 5.. of the long run */
        o.start_step = 5;
        o.check_length = true;
        o.length = 50;
        ck_assert_int_eq(zrc_loader_open(c, &d, 1, &o, &r), 0);
        for (int step = 5; step < 12; step++) {
                ck_assert_int_eq(zrc_loader_next(r, &b), 0);
                ck_assert_uint_eq(b.step, (uint64_t)step);
                ck_assert_mem_eq(b.indices, seen[step], sizeof(seen[step]));
                ck_assert_int_eq(zrc_loader_release(r, b.slot), 0);
        }
        zrc_loader_close(r);

        /* holding every slot: asking for more is refused, not a hang */
        o.start_step = 0;
        o.prefetch = 2;
        ck_assert_int_eq(zrc_loader_open(c, &d, 1, &o, &h), 0);
        ck_assert_int_eq(zrc_loader_next(h, &held[0]), 0);
        ck_assert_int_eq(zrc_loader_next(h, &held[1]), 0);
        ck_assert_uint_ne(held[0].slot, held[1].slot);
        ck_assert_int_eq(zrc_loader_next(h, &b), -EDEADLK);
        /* the held batches stay intact while later ones arrive */
        ck_assert_mem_eq(held[0].indices, seen[0], sizeof(seen[0]));
        ck_assert_int_eq(zrc_loader_release(h, held[0].slot), 0);
        ck_assert_int_eq(zrc_loader_next(h, &b), 0);
        ck_assert_uint_eq(b.step, 2);
        ck_assert_mem_eq(held[1].indices, seen[1], sizeof(seen[1]));
        ck_assert_mem_eq(b.indices, seen[2], sizeof(seen[2]));
        zrc_loader_close(h); /* with slots held */

        /* bad parameters are refused at open */
        o.prefetch = 0;
        o.sampler = "bogus";
        ck_assert_int_eq(zrc_loader_open(c, &d, 1, &o, &h), -ZR_E_SAMPLER);
        o.sampler = "iid";
        o.batch_size = 0;
        ck_assert_int_eq(zrc_loader_open(c, &d, 1, &o, &h), -ZR_E_SAMPLER);
        o.batch_size = 7;
        o.rank = 2;
        o.world_size = 2;
        ck_assert_int_eq(zrc_loader_open(c, &d, 1, &o, &h), -ZR_E_SAMPLER);
        o.rank = 0;
        o.length = 49;
        ck_assert_int_eq(zrc_loader_open(c, &d, 1, &o, &h), -ZR_E_STALE);
        zrc_dataset_close(d);
        zrc_disconnect(c);
}
END_TEST

START_TEST(test_loader_ragged_set_stale) {
        zrc_conn *c = conn();
        zrc_dataset *x = NULL, *y = NULL, *w = NULL;
        zrc_loader *l = NULL;
        zrc_loader_batch b;
        zrc_schema sx, sy;
        zrc_set *set = NULL;
        zrc_loader_options o = { .sampler = "iid", .batch_size = 4, .seed = 3, .indices = true };
        int64_t labels[30];
        uint64_t shapes[30];
        int32_t tok[30][8];
        int r;

        NEED_LOADER(c);
        ck_assert_int_eq(mkdir(path("lset"), 0755), 0);
        ck_assert_int_eq(zrc_schema_ragged(&sx, "<i4", 1, ZRC_CODEC_ZSTD), 0);
        ck_assert_int_eq(zrc_schema_dense(&sy, "<i8", NULL, 0, ZRC_CODEC_RAW), 0);
        ck_assert_int_eq(zrc_dataset_create(c, path("lset/tokens"), &sx, NULL, 0, &x), 0);
        ck_assert_int_eq(zrc_dataset_create(c, path("lset/labels"), &sy, NULL, 0, &y), 0);
        zrc_dataset_close(x);
        zrc_dataset_close(y);
        ck_assert_int_eq(zrc_set_open(c, path("lset"), ZRC_OPEN_WRITABLE, &set), 0);
        for (int i = 0; i < 30; i++) {
                shapes[i] = (uint64_t)(i % 8);
                for (int k = 0; k < 8; k++)
                        tok[i][k] = i * 10 + k;
                labels[i] = -i;
        }
        {
                uint8_t packed[30 * 48];
                uint64_t sizes[30], off = 0;
                zrc_records rec[2];

                for (int i = 0; i < 30; i++)
                        off += sizes[i] = zrc_ragged_pack(packed + off, &shapes[i], 1, 4, tok[i]);
                rec[0] = (zrc_records){ .count = 30, .data = labels };   /* "labels" sorts first */
                rec[1] = (zrc_records){ .count = 30, .data = packed, .sizes = sizes };
                ck_assert_str_eq(zrc_set_stream_name(set, 0), "labels");
                ck_assert_msg(zrc_set_append(set, rec, NULL) == 0, "append: %s",
                              zrc_last_error(c)->message);
        }
        {
                zrc_dataset *streams[2] = { zrc_set_stream(set, 0), zrc_set_stream(set, 1) };

                ck_assert_msg(zrc_loader_open(c, streams, 2, &o, &l) == 0, "open: %s",
                              zrc_last_error(c)->message);
        }
        for (int step = 0; step < 6; step++) {
                ck_assert_int_eq(zrc_loader_next(l, &b), 0);
                ck_assert_uint_eq(b.n_streams, 2);
                for (uint64_t j = 0; j < 4; j++) {
                        uint64_t i = b.indices[j];

                        ck_assert_int_eq(((const int64_t *)b.streams[0].data)[j], -(int64_t)i);
                        ck_assert_uint_eq(b.streams[1].ndim, 1);
                        ck_assert_uint_eq(b.streams[1].shapes[j], shapes[i]);
                        ck_assert_uint_eq(b.streams[1].lengths[j], shapes[i] * 4);
                        ck_assert_uint_eq((uintptr_t)b.streams[1].payloads[j] % 8, 0);
                        if (shapes[i])
                                ck_assert_mem_eq(b.streams[1].payloads[j], tok[i], shapes[i] * 4);
                }
                ck_assert_int_eq(zrc_loader_release(l, b.slot), 0);
        }

        /* an append through another connection ends the loader: ZR_E_STALE
         * after the batches already announced, and the step to reopen at */
        {
                zrc_conn *c2 = conn();
                int64_t v = 99;

                ck_assert_int_eq(zrc_dataset_open(c2, path("lset/labels"), ZRC_OPEN_WRITABLE, &w), 0);
                ck_assert_int_eq(zrc_dataset_append_dense(w, &v, 1, NULL), 0);
                zrc_disconnect(c2);
        }
        for (int k = 0; k < 100; k++) {
                r = zrc_loader_next(l, &b);
                if (r < 0)
                        break;
                ck_assert_int_eq(zrc_loader_release(l, b.slot), 0);
        }
        ck_assert_int_eq(r, -ZR_E_STALE);
        ck_assert_str_eq(zrc_last_error(c)->name, "ZR_E_STALE");
        ck_assert_uint_ge(zrc_loader_step(l), 6);
        ck_assert_int_eq(zrc_loader_next(l, &b), -ZR_E_STALE); /* and stays so */
        zrc_loader_close(l);
        zrc_set_close(set);
        zrc_disconnect(c);
}
END_TEST

/* ---- loaders sharing rings ---------------------------------------------- */

static int fds_open(bool *set);

enum { SH_B = 10, SH_SLOTS = 4, SH_N = 200, SH_STEPS = 32, SH_MORE = 16 };

/* FNV-1a of a batch's bytes. */
static uint64_t batch_hash(const zrc_loader_batch *b) {
        const uint8_t *p = b->streams[0].data;
        uint64_t h = 14695981039346656037ull;

        for (uint64_t i = 0; i < b->streams[0].bytes; i++)
                h = (h ^ p[i]) * 1099511628211ull;
        return h;
}

/* Lines of /proc/self/maps that map a memfd (read buffers and rings). */
static int memfd_maps(void) {
        char line[512];
        FILE *f = fopen("/proc/self/maps", "re");
        int n = 0;

        ck_assert_ptr_nonnull(f);
        while (fgets(line, sizeof(line), f))
                if (strstr(line, "/memfd:"))
                        n++;
        fclose(f);
        return n;
}

/* A loader of the sharing tests and the batches it holds. */
typedef struct sh_side {
        zrc_loader *l;
        zrc_loader_batch held[SH_SLOTS];
        int n_held;
        uint64_t next;               /* the step it expects */
} sh_side;

/* The steps seen so far, by any loader: indices and a hash of the bytes. */
static uint64_t sh_idx[SH_STEPS + SH_MORE][SH_B];
static uint64_t sh_hash[SH_STEPS + SH_MORE];
static bool sh_seen[SH_STEPS + SH_MORE];

/* Takes the next batch of side s: the step it expects, records that match
 * their indices, and bytes identical to what any loader got for that step. */
static void sh_next(sh_side *s, zrc_conn *c) {
        zrc_loader_batch *b = &s->held[s->n_held];
        float want[20];

        ck_assert_msg(zrc_loader_next(s->l, b) == 0, "next at step %" PRIu64 ": %s", s->next,
                      zrc_last_error(c)->message);
        ck_assert_uint_eq(b->step, s->next);
        ck_assert_uint_lt(b->slot, SH_SLOTS);
        for (int k = 0; k < s->n_held; k++)
                ck_assert_uint_ne(b->slot, s->held[k].slot); /* handles of held batches differ */
        ck_assert_uint_eq(b->streams[0].bytes, SH_B * 80);
        for (int j = 0; j < SH_B; j++) {
                ck_assert_uint_lt(b->indices[j], SH_N);
                fill_record(want, b->indices[j]);
                ck_assert_mem_eq((const uint8_t *)b->streams[0].data + j * 80, want, 80);
        }
        if (sh_seen[b->step]) {
                ck_assert_mem_eq(b->indices, sh_idx[b->step], sizeof(sh_idx[0]));
                ck_assert_uint_eq(batch_hash(b), sh_hash[b->step]);
        } else {
                memcpy(sh_idx[b->step], b->indices, sizeof(sh_idx[0]));
                sh_hash[b->step] = batch_hash(b);
                sh_seen[b->step] = true;
        }
        s->n_held++;
        s->next++;
}

/* Checks that every batch s holds is still intact. */
static void sh_check_held(const sh_side *s) {
        for (int k = 0; k < s->n_held; k++) {
                ck_assert_mem_eq(s->held[k].indices, sh_idx[s->held[k].step], sizeof(sh_idx[0]));
                ck_assert_uint_eq(batch_hash(&s->held[k]), sh_hash[s->held[k].step]);
        }
}

/* Releases the held batch at position k (any of them: any order). */
static void sh_release(sh_side *s, int k) {
        ck_assert_int_eq(zrc_loader_release(s->l, s->held[k].slot), 0);
        s->held[k] = s->held[--s->n_held];
}

/* The daemon's gathers since start; *ret_shared: batches the open loaders took
 * from a slot another member filled (per loader, summed: STATUS reads the
 * total and each loader's count at slightly different moments while the
 * loaders run, so the two are not compared). */
static uint64_t sh_gathers(zrc_conn *c, uint64_t *ret_shared) {
        zrc_status *st = NULL;
        uint64_t g, shared = 0;

        ck_assert_int_eq(zrc_status_query(c, &st), 0);
        g = st->gathers;
        for (size_t i = 0; i < st->n_loaders; i++)
                shared += st->per_loader[i].shared;
        zrc_status_free(st);
        if (ret_shared)
                *ret_shared = shared;
        return g;
}

START_TEST(test_loader_shared) {
        /* two loaders with identical parameters on two connections of this
         * process form one group: each step is gathered once into a slot of
         * either ring and both read it there, one of them through a ring the
         * daemon passed with a RING event */
        zrc_conn *c1 = conn(), *c2, *c3;
        zrc_dataset *d, *d1 = NULL, *d2 = NULL;
        zrc_loader_options o = { .sampler = "iid", .batch_size = SH_B, .seed = 11,
                                 .prefetch = SH_SLOTS, .indices = true };
        sh_side a = { 0 }, b = { 0 }, solo = { 0 };
        int fds_before, maps_before;
        uint64_t g0, g1;
        bool fds_b[4096], fds_a[4096];

        NEED_LOADER(c1);
        memset(sh_seen, 0, sizeof(sh_seen));
        d = make_dense(c1, "loader-shared", ZRC_CODEC_ZSTD, SH_N, NULL, 0);
        zrc_dataset_close(d);
        c2 = conn();
        ck_assert_int_eq(zrc_dataset_open(c1, path("loader-shared"), 0, &d1), 0);
        ck_assert_int_eq(zrc_dataset_open(c2, path("loader-shared"), 0, &d2), 0);
        fds_before = fds_open(fds_b);
        maps_before = memfd_maps();
        g0 = sh_gathers(c1, NULL);

        ck_assert_msg(zrc_loader_open(c1, &d1, 1, &o, &a.l) == 0, "open: %s",
                      zrc_last_error(c1)->message);
        ck_assert_msg(zrc_loader_open(c2, &d2, 1, &o, &b.l) == 0, "open: %s",
                      zrc_last_error(c2)->message);
        ck_assert_uint_eq(zrc_loader_slots(b.l), SH_SLOTS);

        /* in step, either first, each holding up to 3 and releasing them in
         * varying order (oldest, newest, middle) */
        for (int step = 0; step < SH_STEPS; step++) {
                sh_side *first = step % 2 ? &b : &a, *second = step % 2 ? &a : &b;

                sh_next(first, step % 2 ? c2 : c1);
                sh_next(second, step % 2 ? c1 : c2);
                for (sh_side *s = &a; s; s = s == &a ? &b : NULL) {
                        if (s->n_held >= 3 || step % 5 == 0)
                                sh_release(s, (step * 7 + (s == &b)) % s->n_held);
                        sh_check_held(s);
                }
        }

        /* every step gathered about once for both loaders, not twice; and
         * besides the two own rings, one loader maps the other's, passed by a
         * RING event */
        uint64_t shared;
        g1 = sh_gathers(c1, &shared);
        /* what the other member gathered, each took: about one per step */
        ck_assert_uint_ge(shared, SH_STEPS - 2 * SH_SLOTS - 2);
        printf("note: %" PRIu64 " gathers for %d steps of two loaders of one group; "
               "%d ring mappings\n", g1 - g0, SH_STEPS, memfd_maps() - maps_before);
        ck_assert_int_ge(memfd_maps() - maps_before, 3);
        ck_assert_msg(g1 - g0 >= SH_STEPS && g1 - g0 <= SH_STEPS + 2 * SH_SLOTS + 2,
                      "%" PRIu64 " gathers for %d steps of two loaders of one group",
                      g1 - g0, SH_STEPS);

        /* a holds as many batches as it has slots, wherever they lie: no more */
        while (a.n_held < SH_SLOTS)
                sh_next(&a, c1);
        ck_assert_int_eq(zrc_loader_next(a.l, &solo.held[0]), -EDEADLK);
        sh_check_held(&a);

        /* a closed holding them: b goes on, its held batches (wherever they
         * lie) intact, filling its slots and releasing in any order */
        a.l = zrc_loader_close(a.l);
        a.n_held = 0;
        sh_check_held(&b);
        for (int step = SH_STEPS; step < SH_STEPS + SH_MORE; step++) {
                if (b.n_held == SH_SLOTS) {
                        ck_assert_int_eq(zrc_loader_next(b.l, &solo.held[0]), -EDEADLK);
                        sh_release(&b, step % SH_SLOTS);
                        if (step % 3 == 0)
                                sh_release(&b, 0);
                }
                sh_next(&b, c2);
                sh_check_held(&b);
        }
        b.l = zrc_loader_close(b.l); /* holding batches too */

        /* no descriptor and no mapping of any ring outlives the loaders */
        ck_assert_int_eq(fds_open(fds_a), fds_before);
        for (int fd = 0; fd < 4096; fd++)
                ck_assert_msg(fds_a[fd] == fds_b[fd], "descriptor %d", fd);
        ck_assert_int_eq(memfd_maps(), maps_before);

        /* a lone loader on a third connection replays the same bytes */
        c3 = conn();
        ck_assert_int_eq(zrc_dataset_open(c3, path("loader-shared"), 0, &d), 0);
        ck_assert_int_eq(zrc_loader_open(c3, &d, 1, &o, &solo.l), 0);
        for (int step = 0; step < SH_STEPS + SH_MORE; step++) {
                sh_next(&solo, c3);
                sh_release(&solo, 0);
        }
        solo.l = zrc_loader_close(solo.l);
        zrc_disconnect(c3);
        zrc_dataset_close(d1);
        zrc_dataset_close(d2);
        zrc_disconnect(c2);
        zrc_disconnect(c1);
}
END_TEST

START_TEST(test_loader_shared_disconnect) {
        /* a member's connection goes away while it holds batches and another
         * member reads from its ring: the other goes on; releases and closes in
         * any order on both sides */
        zrc_conn *c1 = conn(), *c2;
        zrc_dataset *d1 = NULL, *d2 = NULL;
        zrc_loader_options o = { .sampler = "cyclic", .batch_size = SH_B, .seed = 5,
                                 .prefetch = SH_SLOTS, .indices = true };
        sh_side a = { 0 }, b = { 0 };
        int fds_before, maps_before;

        NEED_LOADER(c1);
        memset(sh_seen, 0, sizeof(sh_seen));
        c2 = conn();
        ck_assert_int_eq(zrc_dataset_open(c1, path("loader-shared"), 0, &d1), 0);
        ck_assert_int_eq(zrc_dataset_open(c2, path("loader-shared"), 0, &d2), 0);
        fds_before = fds_open((bool[4096]){ 0 });
        maps_before = memfd_maps();
        ck_assert_int_eq(zrc_loader_open(c2, &d2, 1, &o, &b.l), 0);
        ck_assert_int_eq(zrc_loader_open(c1, &d1, 1, &o, &a.l), 0);
        /* b runs up to 3 steps ahead of a, then a catches up */
        for (int step = 0; step < 12; step++) {
                sh_next(&b, c2);
                if (b.n_held == SH_SLOTS)
                        sh_release(&b, 1);
                if (step % 4 == 3)
                        while (a.next <= (uint64_t)step) {
                                sh_next(&a, c1);
                                if (a.n_held >= 2)
                                        sh_release(&a, a.n_held - 1);
                        }
        }
        sh_check_held(&a);
        sh_check_held(&b);
        /* b's connection goes, with b open and holding batches */
        zrc_dataset_close(d2);
        zrc_disconnect(c2);
        b.l = NULL;
        sh_check_held(&a);
        for (int step = 0; step < 20; step++) {
                while (a.n_held >= SH_SLOTS - 1)
                        sh_release(&a, step % a.n_held);
                sh_next(&a, c1);
        }
        while (a.n_held)
                sh_release(&a, a.n_held / 2);
        a.l = zrc_loader_close(a.l);
        ck_assert_int_eq(fds_open((bool[4096]){ 0 }) + 1, fds_before); /* c2's socket gone */
        ck_assert_int_eq(memfd_maps(), maps_before);
        zrc_dataset_close(d1);
        zrc_disconnect(c1);
}
END_TEST

/* ---- status and many clients ------------------------------------------ */

START_TEST(test_status) {
        zrc_conn *c = conn(), *c2 = conn();
        zrc_status *st = NULL;

        ck_assert_int_eq(zrc_status_query(c, &st), 0);
        ck_assert(strncmp(st->daemon, "zrecordd", 8) == 0);
        ck_assert_uint_ge(st->clients, 2);
        ck_assert_uint_eq(st->loaders, 0);
        ck_assert_uint_eq(st->n_loaders, 0);
        ck_assert_uint_gt(st->cache_budget, 0);
        zrc_status_free(st);
        zrc_disconnect(c2);
        zrc_disconnect(c);
}
END_TEST

typedef struct worker {
        int id;
        int failures;
        char message[ZRC_ERROR_MESSAGE_MAX];
} worker;

static void *worker_run(void *arg) {
        worker *w = arg;
        zrc_conn *c = NULL;
        zrc_dataset *shared = NULL, *own = NULL;
        char name[64];
        zrc_schema s;
        zrc_batch b;

        if (zrc_connect(daemon_.socket, &c, NULL) < 0) {
                w->failures++;
                return NULL;
        }
        snprintf(name, sizeof(name), "many-%d", w->id);
        if (zrc_dataset_open(c, path("many-shared"), 0, &shared) < 0 ||
            zrc_schema_dense(&s, "<i8", NULL, 0, ZRC_CODEC_ZSTD) < 0) {
                w->failures++;
                snprintf(w->message, sizeof(w->message), "%s", zrc_last_error(c)->message);
                zrc_disconnect(c);
                return NULL;
        }
        {
                char p[PATH_MAX];

                tl_daemon_path(&daemon_, name, p);
                if (zrc_dataset_create(c, p, &s, NULL, 0, &own) < 0) {
                        w->failures++;
                        snprintf(w->message, sizeof(w->message), "%s", zrc_last_error(c)->message);
                        zrc_disconnect(c);
                        return NULL;
                }
        }
        for (int round = 0; round < 20; round++) {
                uint64_t idx[16];
                int64_t v = w->id * 1000 + round;
                float want[20];

                for (int j = 0; j < 16; j++)
                        idx[j] = (uint64_t)((w->id * 31 + round * 7 + j) % 100);
                if (zrc_dataset_read(shared, idx, 16, &b) < 0 ||
                    zrc_dataset_append_dense(own, &v, 1, NULL) < 0) {
                        w->failures++;
                        snprintf(w->message, sizeof(w->message), "%s", zrc_last_error(c)->message);
                        break;
                }
                for (int j = 0; j < 16; j++) {
                        fill_record(want, idx[j]);
                        if (memcmp((const uint8_t *)b.data + j * 80, want, 80) != 0)
                                w->failures++;
                }
        }
        if (zrc_dataset_length(own) != 20)
                w->failures++;
        zrc_disconnect(c); /* frees both datasets */
        return NULL;
}

START_TEST(test_many_clients) {
        enum { N = 8 };
        zrc_conn *c = conn();
        zrc_dataset *d = make_dense(c, "many-shared", ZRC_CODEC_ZSTD, 100, NULL, 0);
        pthread_t t[N];
        worker w[N];

        for (int i = 0; i < N; i++) {
                w[i] = (worker){ .id = i };
                ck_assert_int_eq(pthread_create(&t[i], NULL, worker_run, &w[i]), 0);
        }
        for (int i = 0; i < N; i++) {
                pthread_join(t[i], NULL);
                ck_assert_msg(w[i].failures == 0, "worker %d: %d failures: %s", i, w[i].failures,
                              w[i].message);
        }
        zrc_dataset_close(d);
        zrc_disconnect(c);
}
END_TEST

/* Marks in `set` (4096 entries) the descriptors open now; returns how many. */
static int fds_open(bool *set) {
        DIR *dir = opendir("/proc/self/fd");
        struct dirent *de;
        int n = 0;

        ck_assert_ptr_nonnull(dir);
        memset(set, 0, 4096);
        while ((de = readdir(dir))) {
                int fd = atoi(de->d_name);

                if (de->d_name[0] == '.' || fd == dirfd(dir) || fd >= 4096)
                        continue;
                set[fd] = true;
                n++;
        }
        closedir(dir);
        return n;
}

START_TEST(test_descriptors) {
        /* every descriptor the library holds is close-on-exec; none outlives
         * zrc_disconnect, which also frees datasets left open (ASan checks the
         * memory) while the daemon reclaims their handles */
        static bool before[4096], during[4096], after[4096];
        int n_before = fds_open(before), n_after;
        zrc_conn *c = conn();
        zrc_dataset *d = make_dense(c, "left-open", ZRC_CODEC_RAW, 3, NULL, 0);
        zrc_batch b;

        ck_assert_int_eq(zrc_dataset_read(d, (uint64_t[]){ 0, 1, 2 }, 3, &b), 0);
        fds_open(during);
        for (int fd = 0; fd < 4096; fd++)
                if (during[fd] && !before[fd])
                        ck_assert_msg(fcntl(fd, F_GETFD) & FD_CLOEXEC, "fd %d without FD_CLOEXEC", fd);
        zrc_disconnect(c);
        n_after = fds_open(after);
        ck_assert_int_eq(n_after, n_before);
}
END_TEST

int main(void) {
        Suite *s = suite_create("libzrc");

        TL_TCASE(s, "daemon", 120, test_connect, test_dense_raw, test_dense_zstd,
                 test_dense_zstd_dict, test_ragged_raw, test_ragged_zstd, test_ragged_zstd_dict,
                 test_ragged_growth, test_dense_split_read, test_delete_compact_verify,
                 test_errors, test_sets, test_loader_dense, test_loader_resume_and_slots,
                 test_loader_ragged_set_stale, test_loader_shared, test_loader_shared_disconnect,
                 test_status, test_many_clients, test_descriptors);
        return tl_run_suite_with_daemon(s, &daemon_, NULL);
}
