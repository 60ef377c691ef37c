/* libzrc-layouts.c: the libzrc suite's ragged layouts (libzrc-kit.h): records of
 * any ndim in one dataset (schema ndim 0), loaderx 1.5.7's ragged layout (made
 * here by CONVERT) read, appended to, deleted from, compacted, verified and
 * loaded through libzrc, converted back, and a store of byte records without
 * schema.msgpack. Every record's shape and values follow from its id. */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "libzrc-kit.h"
#include "records.h"

/* Record id: of shape tl_shaped_dims() (tests/lib/records.h), values id * 1000 + k. */

/* zrc_convert() of the kit's directories `from` and `to` (path() has one buffer). */
static int convert(zrc_conn *c, const char *from, const char *to, zrc_layout layout,
                   uint64_t *count, zrc_schema *schema) {
        char src[512];

        snprintf(src, sizeof(src), "%s", path(from));
        return zrc_convert(c, src, path(to), layout, count, schema);
}

/* Appends records first_id .. first_id + n - 1, packed with their headers. */
static int append_ids(zrc_dataset *d, uint64_t first_id, uint64_t n, uint64_t *ret_first) {
        uint8_t *packed = malloc(n * (8 * 4 + 30 * 4)); /* at most 3 dims, 30 items */
        uint64_t *sizes = malloc(n * 8), off = 0;
        zrc_records r = { .count = n, .data = packed, .sizes = sizes };
        int32_t v[30];
        int rc;

        ck_assert(packed && sizes);
        for (uint64_t i = 0; i < n; i++) {
                uint64_t id = first_id + i, dims[3];
                uint32_t nd = tl_shaped_dims(id, dims);

                for (uint64_t k = 0; k < tl_shaped_items(id); k++)
                        v[k] = (int32_t)(id * 1000 + k);
                off += sizes[i] = zrc_ragged_pack(packed + off, dims, nd, 4, v);
        }
        rc = zrc_dataset_append(d, &r, ret_first);
        free(packed);
        free(sizes);
        return rc;
}

/* Checks record j of a batch (payload, its ndim and dims) is record id. */
static void check_record(const void *payload, uint64_t len, uint32_t ndim, const uint64_t *dims,
                         uint64_t id, const char *what) {
        uint64_t want[3];
        uint32_t nd = tl_shaped_dims(id, want);
        int32_t v;

        ck_assert_msg(ndim == nd && memcmp(dims, want, nd * 8) == 0 && len == tl_shaped_items(id) * 4,
                      "%s: not the shape of record %" PRIu64, what, id);
        ck_assert_uint_eq((uintptr_t)payload % 8, 0);
        for (uint64_t k = 0; k < tl_shaped_items(id); k++) {
                memcpy(&v, (const uint8_t *)payload + 4 * k, 4);
                ck_assert_msg(v == (int32_t)(id * 1000 + k), "%s: record %" PRIu64 " differs", what,
                              id);
        }
}

/* Reads every record of d and checks it holds ids[0..n). */
static void check_all(zrc_dataset *d, const uint64_t *ids, uint64_t n, const char *what) {
        uint64_t *idx = malloc((n + 1) * 8);
        zrc_batch b;

        ck_assert_uint_eq(zrc_dataset_length(d), n);
        for (uint64_t i = 0; i < n; i++)
                idx[i] = n - 1 - i; /* backwards */
        ck_assert_msg(zrc_dataset_read(d, idx, n, &b) == 0, "%s: read: %s", what,
                      zrc_last_error(zrc_dataset_conn(d))->message);
        ck_assert_uint_eq(b.ndim, 0);
        for (uint64_t j = 0; j < n; j++)
                check_record(b.payloads[j], b.lengths[j], b.ndims[j], b.shapes + b.shape_at[j],
                             ids[idx[j]], what);
        free(idx);
}

START_TEST(test_layouts_convert) {
        enum { N = 60 };
        zrc_conn *c = conn();
        zrc_dataset *d = NULL, *lx = NULL;
        zrc_schema s;
        uint64_t ids[N + 2], n = N, count = 0, first, len;
        zrc_verify_result *v = malloc(sizeof(*v));
        struct stat st;

        /* records of ndim 1, 2 and 3 in one dataset of zrecord's layout */
        ck_assert_int_eq(zrc_schema_ragged(&s, "<i4", 0, ZRC_CODEC_ZSTD), 0);
        ck_assert_msg(zrc_dataset_create(c, path("anyndim"), &s, NULL, 0, &d) == 0, "create: %s",
                      zrc_last_error(c)->message);
        ck_assert_int_eq(zrc_dataset_append_ragged(d, 1, (uint64_t[]){ 1 },
                                                   (const void *[]){ "abcd" }, NULL), -EINVAL);
        ck_assert_msg(append_ids(d, 0, N, &first) == 0, "append: %s", zrc_last_error(c)->message);
        for (uint64_t i = 0; i < N; i++)
                ids[i] = i;
        check_all(d, ids, n, "zrecord layout");
        zrc_dataset_close(d);

        /* into loaderx 1.5.7's layout, and that store worked in place */
        ck_assert_msg(convert(c, "anyndim", "lx", ZRC_LAYOUT_LX157, &count, &s) == 0,
                      "convert: %s", zrc_last_error(c)->message);
        ck_assert_uint_eq(count, N);
        ck_assert_int_eq(s.layout, ZRC_LAYOUT_LX157);
        ck_assert_uint_eq(s.ndim, 0);
        ck_assert_msg(zrc_dataset_open(c, path("lx"), ZRC_OPEN_WRITABLE, &lx) == 0, "open: %s",
                      zrc_last_error(c)->message);
        ck_assert_int_eq(zrc_dataset_schema(lx)->layout, ZRC_LAYOUT_LX157);
        check_all(lx, ids, n, "loaderx layout");
        ck_assert_int_eq(append_ids(lx, 1000, 2, &first), 0);
        ck_assert_uint_eq(first, N);
        ids[n++] = 1000;
        ids[n++] = 1001;
        ck_assert_int_eq(zrc_dataset_delete(lx, (uint64_t[]){ 5, 0 }, 2, &len), 0);
        ids[5] = ids[--n]; /* swap-last, descending */
        ids[0] = ids[--n];
        ck_assert_uint_eq(len, n);
        ck_assert_int_eq(zrc_dataset_compact(lx, NULL), 0);
        ck_assert_int_eq(zrc_dataset_verify(lx, v), 0);
        ck_assert(v->ok);
        check_all(lx, ids, n, "loaderx layout, changed");
        /* an empty record has no place in it */
        {
                uint8_t rec[16];
                uint64_t size = zrc_ragged_pack(rec, (uint64_t[]){ 0 }, 1, 4, NULL);
                zrc_records r = { .count = 1, .data = rec, .sizes = &size };

                ck_assert_int_eq(zrc_dataset_append(lx, &r, NULL), -ZR_E_SCHEMA);
                ck_assert_ptr_nonnull(strstr(zrc_last_error(c)->message, "empty"));
        }
        if (zrc_has_feature(c, "loader")) {
                zrc_loader_options o = { .sampler = "sequential", .batch_size = 8, .seed = 3,
                                         .prefetch = 2, .indices = true };
                zrc_loader *l = NULL;
                zrc_loader_batch b;

                ck_assert_msg(zrc_loader_open(c, &lx, 1, &o, &l) == 0, "loader: %s",
                              zrc_last_error(c)->message);
                for (int step = 0; step < 9; step++) {
                        const zrc_stream_batch *sb;

                        ck_assert_int_eq(zrc_loader_next(l, &b), 0);
                        sb = &b.streams[0];
                        ck_assert_uint_eq(sb->ndim, 0);
                        for (uint64_t j = 0; j < 8; j++)
                                check_record(sb->payloads[j], sb->lengths[j], sb->ndims[j],
                                             sb->shapes + sb->shape_at[j], ids[b.indices[j]],
                                             "loader");
                        ck_assert_int_eq(zrc_loader_release(l, b.slot), 0);
                }
                zrc_loader_close(l);
        }
        zrc_dataset_close(lx);

        /* and back: records of differing ndim keep theirs */
        ck_assert_msg(convert(c, "lx", "back", ZRC_LAYOUT_ZRECORD, &count, &s) == 0,
                      "convert back: %s", zrc_last_error(c)->message);
        ck_assert_uint_eq(count, n);
        ck_assert_int_eq(s.layout, ZRC_LAYOUT_ZRECORD);
        ck_assert_int_eq(zrc_dataset_open(c, path("back"), 0, &d), 0);
        check_all(d, ids, n, "converted back");
        zrc_dataset_close(d);

        /* refusals: the same layout again, a directory in use, a dense source */
        ck_assert_int_eq(convert(c, "lx", "again", ZRC_LAYOUT_LX157, NULL, NULL),
                         -ZR_E_SCHEMA);
        ck_assert_ptr_nonnull(strstr(zrc_last_error(c)->message, "already"));
        ck_assert_int_ne(stat(path("again"), &st), 0); /* the directory it made is gone */
        ck_assert_int_eq(convert(c, "lx", "back", ZRC_LAYOUT_ZRECORD, NULL, NULL),
                         -ZR_E_EXISTS);
        d = make_dense(c, "dense-src", ZRC_CODEC_RAW, 3, NULL, 0);
        zrc_dataset_close(d);
        ck_assert_int_eq(convert(c, "dense-src", "again", ZRC_LAYOUT_LX157, NULL,
                                     NULL), -ZR_E_SCHEMA);
        ck_assert_int_eq(convert(c, "lx", "again", ZRC_LAYOUT_BYTES, NULL, NULL),
                         -EINVAL);
        free(v);
        zrc_disconnect(c);
}
END_TEST

START_TEST(test_layout_bytes) {
        zrc_conn *c = conn();
        zrc_dataset *d = NULL;
        zrc_schema s;
        uint8_t packed[64];
        uint64_t sizes[2], first;
        zrc_batch b;
        struct stat st;
        char schema[600];

        ck_assert_int_eq(zrc_schema_ragged(&s, "|u1", 1, ZRC_CODEC_ZSTD), 0);
        s.layout = ZRC_LAYOUT_BYTES;
        ck_assert_msg(zrc_dataset_create(c, path("bytes"), &s, NULL, 0, &d) == 0, "create: %s",
                      zrc_last_error(c)->message);
        ck_assert_int_eq(zrc_dataset_schema(d)->layout, ZRC_LAYOUT_BYTES);
        snprintf(schema, sizeof(schema), "%s/schema.msgpack", path("bytes"));
        ck_assert_int_ne(stat(schema, &st), 0); /* loaderx 1.5.7's Zrecord store: none */
        sizes[0] = zrc_ragged_pack(packed, (uint64_t[]){ 3 }, 1, 1, "abc");
        sizes[1] = zrc_ragged_pack(packed + sizes[0], (uint64_t[]){ 5 }, 1, 1, "hello");
        ck_assert_int_eq(zrc_dataset_append(d, &(zrc_records){ .count = 2, .data = packed,
                                                                .sizes = sizes }, &first), 0);
        ck_assert_int_eq(zrc_dataset_read(d, (uint64_t[]){ 1, 0 }, 2, &b), 0);
        ck_assert_uint_eq(b.ndim, 1);
        ck_assert_uint_eq(b.shapes[0], 5);
        ck_assert_uint_eq(b.ndims[1], 1);
        ck_assert_uint_eq(b.shapes[b.shape_at[1]], 3);
        ck_assert_mem_eq(b.payloads[0], "hello", 5);
        ck_assert_mem_eq(b.payloads[1], "abc", 3);
        sizes[0] = zrc_ragged_pack(packed, (uint64_t[]){ 0 }, 1, 1, NULL);
        ck_assert_int_eq(zrc_dataset_append(d, &(zrc_records){ .count = 1, .data = packed,
                                                                .sizes = sizes }, NULL),
                         -ZR_E_SCHEMA);
        zrc_dataset_close(d);
        /* reopened, it is byte records again */
        ck_assert_int_eq(zrc_dataset_open(c, path("bytes"), 0, &d), 0);
        ck_assert_int_eq(zrc_dataset_schema(d)->layout, ZRC_LAYOUT_BYTES);
        ck_assert_str_eq(zrc_dataset_schema(d)->dtype, "|u1");
        ck_assert_uint_eq(zrc_dataset_length(d), 2);
        zrc_dataset_close(d);
        zrc_disconnect(c);
}
END_TEST

/* The daemon opens a store on a worker (its shape list may be long): clients that
 * open the same closed store at once all get the one instance. */
enum { OPENERS = 6, ROUNDS = 5 };

typedef struct opener {
        pthread_barrier_t *go;
        char path[512];
        uint64_t length[ROUNDS];
        kit_failures failed;
} opener;

static void *opener_run(void *arg) {
        opener *o = arg;
        zrc_conn *c = kit_thread_connect(&o->failed);

        if (!c)
                return NULL;
        for (int round = 0; round < ROUNDS; round++) {
                zrc_dataset *d = NULL;

                pthread_barrier_wait(o->go);
                if (zrc_dataset_open(c, o->path, 0, &d) < 0) {
                        kit_fail(&o->failed, c);
                } else {
                        o->length[round] = zrc_dataset_length(d);
                }
                pthread_barrier_wait(o->go);
                zrc_dataset_close(d); /* all closed: the next round opens it anew */
                pthread_barrier_wait(o->go);
        }
        zrc_disconnect(c);
        return NULL;
}

START_TEST(test_concurrent_first_open) {
        zrc_conn *c = conn();
        zrc_dataset *d = NULL;
        zrc_schema s;
        pthread_barrier_t go;
        pthread_t t[OPENERS];
        opener o[OPENERS];

        ck_assert_int_eq(zrc_schema_ragged(&s, "<i4", 0, ZRC_CODEC_RAW), 0);
        ck_assert_int_eq(zrc_dataset_create(c, path("open-src"), &s, NULL, 0, &d), 0);
        ck_assert_int_eq(append_ids(d, 0, 40, NULL), 0);
        zrc_dataset_close(d);
        ck_assert_int_eq(convert(c, "open-src", "open-lx", ZRC_LAYOUT_LX157, NULL, NULL), 0);
        zrc_disconnect(c);
        ck_assert_int_eq(pthread_barrier_init(&go, NULL, OPENERS), 0);
        for (int i = 0; i < OPENERS; i++) {
                o[i] = (opener){ .go = &go };
                snprintf(o[i].path, sizeof(o[i].path), "%s", path("open-lx"));
                ck_assert_int_eq(pthread_create(&t[i], NULL, opener_run, &o[i]), 0);
        }
        for (int i = 0; i < OPENERS; i++) {
                pthread_join(t[i], NULL);
                KIT_NO_FAILURES("opener", i, o[i].failed);
                for (int r = 0; r < ROUNDS; r++)
                        ck_assert_uint_eq(o[i].length[r], 40);
        }
        pthread_barrier_destroy(&go);
}
END_TEST

void libzrc_add_layouts(TCase *tc) {
        tcase_add_test(tc, test_layouts_convert);
        tcase_add_test(tc, test_layout_bytes);
        tcase_add_test(tc, test_concurrent_first_open);
}
