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
 *
 * This file holds all but the loaders (libzrc-loaders.c) and main();
 * libzrc-kit.[ch] what they share.
 */
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include "check-run.h"
#include "libzrc-kit.h"

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

        {
                uint8_t tmp[64];

                ck_assert_int_eq(zrc_dataset_read_into(d, idx, 6, tmp, sizeof tmp), -EINVAL);
        }
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

        /* the same into caller memory; a destination too small reads nothing */
        {
                uint16_t *out = malloc(n * 2);

                memset(out, 0xAB, n * 2);
                ck_assert_int_eq(zrc_dataset_read_into(d, idx, n, out, n * 2 - 1), -ZR_E_BUFFER);
                ck_assert_uint_eq(out[0], 0xABAB);
                ck_assert_msg(zrc_dataset_read_into(d, idx, n, out, n * 2) == 0, "read_into: %s",
                              zrc_last_error(c)->message);
                for (uint64_t j = 0; j < n; j++)
                        ck_assert_uint_eq(out[j], (uint16_t)(idx[j] * 3));
                free(out);
        }
        free(idx);
        zrc_dataset_close(d);
        zrc_disconnect(c);
}
END_TEST

START_TEST(test_read_into_pieces) {
        /* 65 records of 1 MiB: more than one 64 MiB piece through the buffer */
        enum { REC = 1 << 20, DISTINCT = 8, N = 65 };
        zrc_conn *c = conn();
        uint64_t shape[1] = { REC }, idx[N];
        uint8_t *recs = malloc((size_t)DISTINCT * REC), *out = malloc((size_t)N * REC);
        zrc_dataset *d = NULL;
        zrc_schema s;

        for (size_t i = 0; i < (size_t)DISTINCT * REC; i++)
                recs[i] = (uint8_t)(i * 7 + i / REC);
        ck_assert_int_eq(zrc_schema_dense(&s, "|u1", shape, 1, ZRC_CODEC_RAW), 0);
        ck_assert_int_eq(zrc_dataset_create(c, path("dense-into"), &s, NULL, 0, &d), 0);
        ck_assert_int_eq(zrc_dataset_append_dense(d, recs, DISTINCT, NULL), 0);
        for (int j = 0; j < N; j++)
                idx[j] = (uint64_t)(j * 5) % DISTINCT;
        ck_assert_msg(zrc_dataset_read_into(d, idx, N, out, (size_t)N * REC) == 0,
                      "read_into: %s", zrc_last_error(c)->message);
        for (int j = 0; j < N; j++)
                ck_assert_mem_eq(out + (size_t)j * REC, recs + idx[j] * REC, REC);
        free(recs);
        free(out);
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
        /* the budgets in force, with where each came from, and reading ahead */
        ck_assert_uint_gt(st->memory, 0);
        ck_assert_uint_eq(st->budget_cache.bytes, st->cache_budget);
        ck_assert_str_ne(st->budget_cache.source, "");
        ck_assert_str_ne(st->budget_shm_uid.source, "");
        ck_assert_uint_eq(st->budget_prefetch.bytes, st->prefetch.budget);
        ck_assert_uint_gt(st->budget_read_pool.bytes, 0);
        ck_assert_str_ne(st->budget_read_pool.source, "");
        ck_assert(strcmp(st->prefetch.backend, "uring") == 0 ||
                  strcmp(st->prefetch.backend, "threads") == 0);
        ck_assert_uint_gt(st->prefetch.queue_depth, 0);
        ck_assert_str_eq(st->prefetch.direct_mode, "auto"); /* the default */
        ck_assert_uint_gt(st->prefetch.direct_min, 0);
        zrc_status_free(st);
        zrc_disconnect(c2);
        zrc_disconnect(c);
}
END_TEST

/* A warm raw loader of small slots is filled on the daemon's loop at its
 * RELEASEs (`loop-fill`, on by default) once its steps are found resident:
 * STATUS `loop_fills` grows. */
START_TEST(test_status_loop_fills) {
        zrc_conn *c = conn();
        zrc_status *before = NULL, *after = NULL;
        zrc_dataset *d;
        zrc_loader *l = NULL;
        zrc_loader_batch b;
        zrc_loader_options o = { .sampler = "iid", .batch_size = 8, .seed = 3, .prefetch = 2 };

        NEED_LOADER(c);
        d = make_dense(c, "loop-fills", ZRC_CODEC_RAW, 200, NULL, 0);
        ck_assert_int_eq(zrc_status_query(c, &before), 0);
        ck_assert_msg(zrc_loader_open(c, &d, 1, &o, &l) == 0, "open: %s",
                      zrc_last_error(c)->message);
        for (int step = 0; step < 100; step++) {
                ck_assert_int_eq(zrc_loader_next(l, &b), 0);
                ck_assert_int_eq(zrc_loader_release(l, b.slot), 0);
        }
        ck_assert_int_eq(zrc_status_query(c, &after), 0);
        ck_assert_msg(after->loop_fills > before->loop_fills, "loop fills: %" PRIu64 " then %" PRIu64,
                      before->loop_fills, after->loop_fills);
        ck_assert_uint_eq(after->prefetch.direct_steps, before->prefetch.direct_steps);
        zrc_status_free(after);
        zrc_status_free(before);
        zrc_loader_close(l);
        zrc_dataset_close(d);
        zrc_disconnect(c);
}
END_TEST

/* Drops the store at dir from the page cache (fdatasync, POSIX_FADV_DONTNEED). */
static void drop_from_page_cache(const char *dir) {
        DIR *dd = opendir(dir);
        struct dirent *e;

        ck_assert_ptr_nonnull(dd);
        while ((e = readdir(dd))) {
                size_t n = strlen(e->d_name);
                int fd;

                if (n < 6 || strcmp(e->d_name + n - 6, ".chunk") != 0)
                        continue;
                fd = openat(dirfd(dd), e->d_name, O_RDONLY | O_CLOEXEC);
                ck_assert_int_ge(fd, 0);
                ck_assert_int_eq(fdatasync(fd), 0);
                ck_assert_int_eq(posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED), 0);
                close(fd);
        }
        closedir(dd);
}

/* A daemon of its own with `--io-direct=always`: a loader over a small store
 * dropped from the page cache reads its steps found not resident with
 * O_DIRECT, and STATUS says so (each aligned 4 KiB record read once, nothing
 * copied, nothing through the page cache). On a tmpfs, which may refuse
 * O_DIRECT, the steps fall back instead. */
#define DIRECT_N 1024
#define DIRECT_REC 4096
#define DIRECT_B 64
START_TEST(test_status_direct) {
        static const char *const args[] = { "--io-direct=always", "--prefetch=8M", NULL };
        tl_daemon_options opts = { .args = args };
        tl_daemon own;
        zrc_conn *c = NULL;
        zrc_dataset *d = NULL;
        zrc_loader *l = NULL;
        zrc_loader_batch b;
        zrc_loader_options o = { .sampler = "iid", .batch_size = DIRECT_B, .seed = 3,
                                 .prefetch = 2, .indices = true };
        zrc_status *st = NULL;
        zrc_schema s;
        uint64_t shape[] = { DIRECT_REC };
        uint8_t *data = malloc((size_t)DIRECT_N * DIRECT_REC);
        char dir[PATH_MAX];
        struct statfs fs;
        int r;

        ck_assert_ptr_nonnull(data);
        for (size_t i = 0; i < DIRECT_N; i++)
                for (size_t j = 0; j < DIRECT_REC; j++)
                        data[i * DIRECT_REC + j] = (uint8_t)(i * 7 + j);
        r = tl_daemon_start(&own, &opts);
        ck_assert_msg(r == 0, "zrecordd did not start: %s (log: %s)", strerror(-r), own.log);
        ck_assert_int_eq(zrc_connect(own.socket, &c, NULL), 0);
        if (!zrc_has_feature(c, "loader"))
                goto out;
        tl_daemon_path(&own, "cold", dir);
        ck_assert_int_eq(zrc_schema_dense(&s, "|u1", shape, 1, ZRC_CODEC_RAW), 0);
        ck_assert_msg(zrc_dataset_create(c, dir, &s, NULL, 0, &d) == 0, "create: %s",
                      zrc_last_error(c)->message);
        ck_assert_int_eq(zrc_dataset_append_dense(d, data, DIRECT_N, NULL), 0);
        zrc_dataset_close(d);
        drop_from_page_cache(dir);
        ck_assert_int_eq(zrc_dataset_open(c, dir, 0, &d), 0);
        ck_assert_msg(zrc_loader_open(c, &d, 1, &o, &l) == 0, "open: %s",
                      zrc_last_error(c)->message);
        for (int step = 0; step < 12; step++) {
                ck_assert_int_eq(zrc_loader_next(l, &b), 0);
                for (uint64_t j = 0; j < DIRECT_B; j++)
                        ck_assert_mem_eq((const uint8_t *)b.streams[0].data + j * DIRECT_REC,
                                         data + b.indices[j] * DIRECT_REC, DIRECT_REC);
                ck_assert_int_eq(zrc_loader_release(l, b.slot), 0);
        }
        ck_assert_int_eq(zrc_status_query(c, &st), 0);
        ck_assert_str_eq(st->prefetch.direct_mode, "always");
        ck_assert_uint_gt(st->prefetch.direct, 0);
        ck_assert_uint_eq(st->prefetch.fits, 0);
        ck_assert_uint_eq(st->prefetch.direct_errors, 0);
        ck_assert_int_eq(statfs(dir, &fs), 0);
        if (fs.f_type == 0x01021994 /* TMPFS_MAGIC */) {
                ck_assert_uint_gt(st->prefetch.direct_steps + st->prefetch.direct_fallbacks, 0);
        } else {
                ck_assert_uint_gt(st->prefetch.direct_steps, 0);
                ck_assert_uint_eq(st->prefetch.direct_fallbacks, 0);
                ck_assert_uint_eq(st->prefetch.direct_copied, 0);
                ck_assert_uint_eq(st->prefetch.direct_bytes,
                                  st->prefetch.direct_steps * DIRECT_B * DIRECT_REC);
                ck_assert_uint_eq(st->prefetch.cold, 0);
        }
        zrc_status_free(st);
        zrc_loader_close(l);
        zrc_dataset_close(d);
out:
        zrc_disconnect(c);
        ck_assert_int_eq(tl_daemon_stop(&own, SIGTERM), 0);
        tl_daemon_remove(&own);
        free(data);
}
END_TEST

typedef struct worker {
        int id;
        kit_failures failed;
} worker;

static void *worker_run(void *arg) {
        worker *w = arg;
        zrc_conn *c = kit_thread_connect(&w->failed);
        zrc_dataset *shared = NULL, *own = NULL;
        char name[64], p[PATH_MAX];
        zrc_schema s;
        zrc_batch b;

        if (!c)
                return NULL;
        snprintf(name, sizeof(name), "many-%d", w->id);
        tl_daemon_path(&daemon_, name, p);
        if (zrc_dataset_open(c, path("many-shared"), 0, &shared) < 0 ||
            zrc_schema_dense(&s, "<i8", NULL, 0, ZRC_CODEC_ZSTD) < 0 ||
            zrc_dataset_create(c, p, &s, NULL, 0, &own) < 0) {
                kit_fail(&w->failed, c);
                zrc_disconnect(c);
                return NULL;
        }
        for (int round = 0; round < 20; round++) {
                uint64_t idx[16];
                int64_t v = w->id * 1000 + round;
                float want[20];

                for (int j = 0; j < 16; j++)
                        idx[j] = (uint64_t)((w->id * 31 + round * 7 + j) % 100);
                if (zrc_dataset_read(shared, idx, 16, &b) < 0 ||
                    zrc_dataset_append_dense(own, &v, 1, NULL) < 0) {
                        kit_fail(&w->failed, c);
                        break;
                }
                for (int j = 0; j < 16; j++) {
                        fill_record(want, idx[j]);
                        if (memcmp((const uint8_t *)b.data + j * 80, want, 80) != 0)
                                w->failed.count++;
                }
        }
        if (zrc_dataset_length(own) != 20)
                w->failed.count++;
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
                KIT_NO_FAILURES("worker", i, w[i].failed);
        }
        zrc_dataset_close(d);
        zrc_disconnect(c);
}
END_TEST

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
        TCase *tc = TL_TCASE(s, "daemon", 120, test_connect, test_dense_raw, test_dense_zstd,
                             test_dense_zstd_dict, test_ragged_raw, test_ragged_zstd,
                             test_ragged_zstd_dict, test_ragged_growth, test_dense_split_read, test_read_into_pieces,
                             test_delete_compact_verify, test_errors, test_sets);
        libzrc_add_loaders(tc);
        libzrc_add_layouts(tc);
        libzrc_add_mixtures(tc);
        tcase_add_test(tc, test_status);
        tcase_add_test(tc, test_status_loop_fills);
        tcase_add_test(tc, test_status_direct);
        tcase_add_test(tc, test_many_clients);
        tcase_add_test(tc, test_descriptors);
        return tl_run_suite_with_daemon(s, &daemon_, NULL);
}
