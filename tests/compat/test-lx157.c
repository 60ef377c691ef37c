/* test-lx157.c: stores of PyPI loaderx 1.5.7 in zrecord, and zrecord's in loaderx.
 *
 * Fixtures: with ZR_LX157_PYTHON naming the python of a venv where loaderx 1.5.7
 * is installed (`pip install loaderx==1.5.7 numpy`), make_loaderx_stores.py writes
 * them with loaderx itself; without it, lxwrite.c writes the same stores from the
 * documented layout (no network needed). Either way, for every codec:
 *   - zrecord opens loaderx's dense stores as datasets and reads every record;
 *     appends, deletes and compacts them;
 *   - zrecord opens loaderx's ragged stores (shapes in schema.msgpack, records of
 *     different ndim) in place, as datasets (the batch gather) and through
 *     lxragged.h, and appends, deletes and compacts;
 *   - a store loaderx deleted from (not compacted) reads as loaderx's swap-last
 *     says and compacts; a raw byte store (no schema) opens as a dataset of byte
 *     records;
 * and with the venv, loaderx 1.5.7 then reads every store zrecord changed or
 * created (dense of every codec, ragged in loaderx's layout) record by record
 * (check_loaderx_stores.py), and appends to it, and zrecord reads loaderx's
 * appends. The shape table's crash recovery is checked on a store of its own.
 * Record contents are formulas (lxdata.h = lxdata.py), never stored expectations.
 */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check-run.h"
#include "dataset/convert.h"
#include "dataset/batch.h"
#include "dataset/dataset.h"
#include "dataset/lxfile.h"
#include "dataset/lxragged.h"
#include "dataset/ragged.h"
#include "../dataset/helpers.h"
#include "lxdata.h"
#include "lxwrite.h"
#include "records.h"

static const char *const codecs[3] = { "raw", "zstd", "zstd_dict" };

/* The venv's python, or NULL. */
static const char *lx_python(void) {
        const char *py = getenv("ZR_LX157_PYTHON");

        return py && *py && access(py, X_OK) == 0 ? py : NULL;
}

/* Runs python SCRIPT args... from tests/compat; returns its exit status. */
static int lx_run(const char *script, const char *a1, const char *a2, const char *a3) {
        const char *dir = getenv("ZR_COMPAT_DIR");
        char path[4096];
        pid_t pid;
        int st;

        ck_assert_ptr_nonnull(dir);
        snprintf(path, sizeof(path), "%s/%s", dir, script);
        pid = fork();
        ck_assert_int_ge(pid, 0);
        if (pid == 0) {
                execl(lx_python(), lx_python(), path, a1, a2, a3, (char *)NULL);
                _exit(127);
        }
        ck_assert_int_eq(waitpid(pid, &st, 0), pid);
        return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* loaderx 1.5.7 checks a store (kind, spec: lxdata.ids_of) and appends to it. */
static void lx_check(scratch *s, const char *name, const char *kind, const char *spec) {
        char path[600];

        snprintf(path, sizeof(path), "%s/%s", s->path, name);
        ck_assert_msg(lx_run("check_loaderx_stores.py", kind, path, spec) == 0,
                      "loaderx 1.5.7 did not read %s as %s %s", name, kind, spec);
}

/* The ids once loaderx's check has appended to the store (it adds LX_APPEND
 * records from LX_APPEND_FIRST on): written at ids[count..], where lx_ids()
 * left room; returns the new count. */
static uint64_t lx_appended(uint64_t *ids, uint64_t count) {
        for (uint64_t i = 0; i < LX_APPEND; i++)
                ids[count + i] = LX_APPEND_FIRST + i;
        return count + LX_APPEND;
}

static void lx_fixtures(scratch *s) {
        scratch_new(s);
        if (lx_python()) {
                ck_assert_int_eq(lx_run("make_loaderx_stores.py", s->path, NULL, NULL), 0);
                printf("lx157: fixtures written by loaderx 1.5.7 (%s)\n", lx_python());
        } else {
                lxw_all(s->fd);
                printf("lx157: fixtures written from the layout (set ZR_LX157_PYTHON to a "
                       "loaderx 1.5.7 venv's python to use loaderx itself)\n");
        }
}

static int lx_open_dir(scratch *s, const char *name) {
        int fd = openat(s->fd, name, O_RDONLY | O_DIRECTORY | O_CLOEXEC);

        ck_assert_int_ge(fd, 0);
        return fd;
}

static uint64_t *lx_ids(uint64_t n, uint64_t append, const uint64_t *del, size_t ndel,
                        uint64_t *count) {
        uint64_t *ids = malloc((n + append + LX_APPEND) * sizeof(uint64_t));

        ck_assert_ptr_nonnull(ids);
        for (uint64_t i = 0; i < n + append; i++)
                ids[i] = i;
        *count = del ? tl_swap_last(ids, n + append, del, ndel) : n + append;
        return ids;
}

static void dense_expect(zr_dataset *ds, const uint64_t *ids, uint64_t count) {
        int32_t *got = malloc((count + 1) * 64), want[LX_DENSE_ITEMS];
        uint64_t *idx = malloc((count + 1) * sizeof(uint64_t));
        zr_error err = {0};

        ck_assert(got && idx);
        ck_assert_uint_eq(zr_dataset_length(ds), count);
        for (uint64_t i = 0; i < count; i++)
                idx[i] = count - 1 - i; /* backwards, to read across the table */
        ck_assert_msg(zr_dataset_gather_dense(ds, idx, count, got, count * 64, &err) == 0, "%s",
                      err.message);
        for (uint64_t i = 0; i < count; i++) {
                lx_dense_record(ids[idx[i]], want);
                if (memcmp(got + i * LX_DENSE_ITEMS, want, 64) != 0)
                        ck_abort_msg("record %" PRIu64 " is not record %" PRIu64 " of the fixture",
                                     idx[i], ids[idx[i]]);
        }
        free(got);
        free(idx);
}

static void dense_append(zr_dataset *ds, uint64_t first_id, uint64_t n) {
        int32_t *data = malloc(n * 64);
        uint64_t shape[3] = { n, 4, 4 }, first;
        zr_batch b = { .dtype = "<i4", .data = data, .data_len = n * 64, .shape = shape, .ndim = 3 };
        zr_error err = {0};

        for (uint64_t i = 0; i < n; i++)
                lx_dense_record(first_id + i, data + i * LX_DENSE_ITEMS);
        ck_assert_msg(zr_dataset_append(ds, &b, &first, &err) == 0, "%s", err.message);
        free(data);
}

START_TEST(test_dense_fixtures) {
        scratch s;

        lx_fixtures(&s);
        for (int c = 0; c < 3; c++) {
                char name[32];
                uint64_t count, *ids, del[LX_NDELETE];
                zr_dataset *ds;
                zr_error err = {0};
                uint8_t meta[32];
                int fd;

                snprintf(name, sizeof(name), "dense-%s", codecs[c]);
                fd = lx_open_dir(&s, name);
                ck_assert_msg(zr_dataset_open(fd, NULL, &ds, &err) == 0, "%s: %s", name, err.message);
                ck_assert_int_eq(zr_dataset_schema(ds)->kind, ZR_SCHEMA_DENSE);
                ck_assert_str_eq(zr_dataset_schema(ds)->dtype.str, "<i4");
                ck_assert_int_eq(zr_dataset_schema(ds)->codec, c);
                ck_assert_uint_eq(zr_schema_item_bytes(zr_dataset_schema(ds)), 64);
                ck_assert_int_eq(zr_dataset_has_dict(ds), c == ZR_CODEC_ZSTD_DICT);
                ids = lx_ids(LX_DENSE_N, 0, NULL, 0, &count);
                dense_expect(ds, ids, count);
                free(ids);

                dense_append(ds, LX_DENSE_N, LX_APPEND_DENSE);
                ck_assert_int_eq(zr_dataset_delete(ds, del, tl_distinct(lx_delete, LX_NDELETE, del),
                                                   &err), 0);
                ck_assert_int_eq(zr_dataset_compact(ds, NULL, &err), 0);
                ids = lx_ids(LX_DENSE_N, LX_APPEND_DENSE, lx_delete, LX_NDELETE, &count);
                dense_expect(ds, ids, count);
                ck_assert_int_eq(zr_dataset_close(ds, &err), 0);
                {
                        int mf = openat(fd, "meta.zr", O_RDONLY | O_CLOEXEC);
                        ck_assert_int_eq(pread(mf, meta, 32, 0), 32);
                        close(mf);
                }
                ck_assert_uint_eq(meta[4], 3); /* still a store loaderx 1.5.7 opens */

                if (lx_python()) {
                        lx_check(&s, name, "dense", "zr-dense:3000");
                        ck_assert_int_eq(zr_dataset_open(fd, NULL, &ds, &err), 0);
                        dense_expect(ds, ids, lx_appended(ids, count));
                        zr_dataset_close(ds, NULL);
                }
                free(ids);
                close(fd);
        }
        scratch_free(&s);
}
END_TEST

static void ragged_expect(zr_lxragged *d, const uint64_t *ids, uint64_t count) {
        uint64_t *idx = malloc((count + 1) * sizeof(uint64_t)), *offs = malloc((count + 1) * 8);
        uint64_t bytes;
        int32_t *got, want[27];
        zr_error err = {0};

        ck_assert(idx && offs);
        ck_assert_uint_eq(zr_lxragged_length(d), count);
        for (uint64_t i = 0; i < count; i++)
                idx[i] = count - 1 - i;
        ck_assert_int_eq(zr_lxragged_bytes(d, idx, count, &bytes, &err), 0);
        got = malloc(bytes + 1);
        ck_assert_msg(zr_lxragged_gather(d, idx, count, got, bytes, offs, &err) == 0, "%s",
                      err.message);
        for (uint64_t i = 0; i < count; i++) {
                uint64_t id = ids[idx[i]];
                const uint64_t *dims;
                uint32_t ndim;

                /* asserts only on a mismatch: one per record would write to the runner */
                if (zr_lxragged_shape(d, idx[i], &ndim, &dims, NULL) != 0 ||
                    ndim != lx_shapes[id % 5].ndim ||
                    memcmp(dims, lx_shapes[id % 5].dims, ndim * sizeof(uint64_t)) != 0)
                        ck_abort_msg("record %" PRIu64 ": not the shape of record %" PRIu64, idx[i], id);
                lx_ragged_record(id, want);
                if (memcmp((uint8_t *)got + offs[i], want, lx_ragged_items(id) * 4) != 0)
                        ck_abort_msg("record %" PRIu64 " is not record %" PRIu64, idx[i], id);
        }
        free(got);
        free(offs);
        free(idx);
}

/* As ragged_expect(), through the dataset layer and its batch gather (what the
 * daemon's READ and loaders use): payloads and shapes (ndim, then dims). */
static void dataset_ragged_expect(zr_dataset *ds, const uint64_t *ids, uint64_t count) {
        uint64_t *idx = malloc((count + 1) * 8), *offs = malloc((count + 1) * 8);
        uint64_t *lens = malloc((count + 1) * 8), *shapes = malloc((count + 1) * 8 * 33), w = 0;
        zr_gather g = { .ds = ds, .idx = idx, .n = count, .offsets = offs, .lengths = lens,
                        .shapes = shapes };
        zr_error err = {0};
        uint8_t *buf;
        int32_t want[27];

        ck_assert(idx && offs && lens && shapes);
        ck_assert_uint_eq(zr_dataset_length(ds), count);
        for (uint64_t i = 0; i < count; i++)
                idx[i] = count - 1 - i;
        ck_assert_msg(zr_gather_locate(&g, &err) == 0, "%s", err.message);
        buf = malloc(g.bytes + 1);
        ck_assert_msg(zr_gather_read(&g, buf, 0, NULL, NULL, &err) == 0, "%s", err.message);
        zr_gather_release(&g);
        for (uint64_t i = 0; i < count; i++) {
                uint64_t id = ids[idx[i]];
                uint32_t nd = (uint32_t)shapes[w++];

                if (nd != lx_shapes[id % 5].ndim ||
                    memcmp(shapes + w, lx_shapes[id % 5].dims, nd * 8) != 0 ||
                    lens[i] != lx_ragged_items(id) * 4 || offs[i] % 8 != 0)
                        ck_abort_msg("record %" PRIu64 ": not the shape of record %" PRIu64, idx[i], id);
                w += nd;
                lx_ragged_record(id, want);
                if (memcmp(buf + offs[i], want, lens[i]) != 0)
                        ck_abort_msg("record %" PRIu64 " is not record %" PRIu64, idx[i], id);
        }
        ck_assert_uint_eq(g.shape_words, w);
        free(buf);
        free(idx);
        free(offs);
        free(lens);
        free(shapes);
}

static void ragged_append(zr_lxragged *d, uint64_t first_id, uint64_t n) {
        int32_t *data = malloc(n * 27 * 4);
        uint64_t *lens = malloc(n * 8), *dims = malloc(n * 3 * 8), at = 0, nd = 0, first;
        uint32_t *ndims = malloc(n * 4);
        zr_error err = {0};

        ck_assert(data && lens && dims && ndims);
        for (uint64_t i = 0; i < n; i++) {
                uint64_t id = first_id + i;

                lx_ragged_record(id, data + at);
                lens[i] = lx_ragged_items(id) * 4;
                at += lx_ragged_items(id);
                ndims[i] = lx_shapes[id % 5].ndim;
                memcpy(dims + nd, lx_shapes[id % 5].dims, ndims[i] * 8);
                nd += ndims[i];
        }
        ck_assert_msg(zr_lxragged_append(d, data, lens, ndims, dims, n, 0, &first, &err) == 0, "%s",
                      err.message);
        free(data);
        free(lens);
        free(dims);
        free(ndims);
}

START_TEST(test_ragged_fixtures) {
        scratch s;

        lx_fixtures(&s);
        for (int c = 0; c < 3; c++) {
                char name[32];
                uint64_t count, *ids;
                zr_dataset *ds;
                zr_lxragged *d;
                zr_error err = {0};
                int fd;

                snprintf(name, sizeof(name), "ragged-%s", codecs[c]);
                fd = lx_open_dir(&s, name);
                ck_assert_msg(zr_dataset_open(fd, NULL, &ds, &err) == 0, "%s: %s", name,
                              err.message);
                ck_assert_int_eq(zr_dataset_schema(ds)->layout, ZR_LAYOUT_LX157);
                ck_assert_uint_eq(zr_dataset_schema(ds)->ndim, ZR_SCHEMA_NDIM_ANY);
                ids = lx_ids(LX_RAGGED_N, 0, NULL, 0, &count);
                dataset_ragged_expect(ds, ids, count);
                free(ids);
                zr_dataset_close(ds, NULL);

                ck_assert_msg(zr_lxragged_open(fd, NULL, &d, &err) == 0, "%s: %s", name, err.message);
                ck_assert_str_eq(zr_lxragged_schema(d)->dtype.str, "<i4");
                ck_assert_int_eq(zr_lxragged_schema(d)->codec, c);
                ids = lx_ids(LX_RAGGED_N, 0, NULL, 0, &count);
                ragged_expect(d, ids, count);
                free(ids);

                ragged_append(d, LX_RAGGED_N, LX_APPEND_RAGGED);
                ck_assert_int_eq(zr_lxragged_delete(d, lx_delete, LX_NDELETE, &err), 0);
                ck_assert_int_eq(zr_lxragged_compact(d, NULL, &err), 0);
                ids = lx_ids(LX_RAGGED_N, LX_APPEND_RAGGED, lx_delete, LX_NDELETE, &count);
                ragged_expect(d, ids, count);
                ck_assert_int_eq(zr_lxragged_close(d, &err), 0);
                ck_assert_int_eq(zr_lxragged_open(fd, NULL, &d, &err), 0);
                ragged_expect(d, ids, count);
                zr_lxragged_close(d, NULL);

                if (lx_python()) {
                        lx_check(&s, name, "ragged", "zr-ragged:1500");
                        ck_assert_int_eq(zr_lxragged_open(fd, NULL, &d, &err), 0);
                        ragged_expect(d, ids, lx_appended(ids, count));
                        zr_lxragged_close(d, NULL);
                }
                free(ids);
                close(fd);
        }
        scratch_free(&s);
}
END_TEST

/* loaderx deleted (and for the ragged one compacted): zrecord reads loaderx's
 * swap-last result, compacts what loaderx left, and loaderx reads that. A byte
 * store of the raw Zrecord API (no schema) opens as a dataset of byte records,
 * each of shape (its length,), and as a store. */
START_TEST(test_deleted_and_bytes_fixtures) {
        scratch s;
        uint64_t count, *ids;
        zr_dataset *ds;
        zr_lxragged *d;
        zr_store *st;
        zr_stats stats;
        zr_compact_result cr;
        zr_error err = {0};
        int fd;

        lx_fixtures(&s);
        fd = lx_open_dir(&s, "dense-deleted");
        ck_assert_int_eq(zr_dataset_open(fd, NULL, &ds, &err), 0);
        ids = lx_ids(LX_DENSE_N, 0, lx_lx_delete, LX_NLX_DELETE, &count);
        ck_assert_uint_eq(count, LX_DENSE_N - 4);
        dense_expect(ds, ids, count);
        ck_assert_int_eq(zr_dataset_stats(ds, &stats, &err), 0);
        ck_assert_uint_gt(stats.reclaimable, 0);
        ck_assert_int_eq(zr_dataset_compact(ds, &cr, &err), 0);
        ck_assert_uint_gt(cr.freed_bytes, 0);
        ck_assert_int_eq(zr_dataset_stats(ds, &stats, &err), 0);
        ck_assert_uint_eq(stats.reclaimable, 0);
        dense_expect(ds, ids, count);
        zr_dataset_close(ds, NULL);
        if (lx_python())
                lx_check(&s, "dense-deleted", "dense", "lx:3000");
        free(ids);
        close(fd);

        fd = lx_open_dir(&s, "ragged-compacted");
        ck_assert_int_eq(zr_lxragged_open(fd, NULL, &d, &err), 0);
        ids = lx_ids(LX_RAGGED_N, 0, lx_lx_delete, LX_NLX_DELETE, &count);
        ragged_expect(d, ids, count);
        zr_lxragged_close(d, NULL);
        free(ids);
        close(fd);

        fd = lx_open_dir(&s, "bytes-zstd");
        ck_assert_msg(zr_dataset_open(fd, NULL, &ds, &err) == 0, "%s", err.message);
        ck_assert_int_eq(zr_dataset_schema(ds)->layout, ZR_LAYOUT_BYTES);
        ck_assert_str_eq(zr_dataset_schema(ds)->dtype.str, "|u1");
        ck_assert_uint_eq(zr_dataset_schema(ds)->ndim, 1);
        {
                uint64_t idx[3] = { 5, 0, 199 }, offs[3], lens[3], shapes[3];
                zr_gather g = { .ds = ds, .idx = idx, .n = 3, .offsets = offs, .lengths = lens,
                                .shapes = shapes };
                uint8_t buf[2048];

                ck_assert_int_eq(zr_gather_locate(&g, &err), 0);
                ck_assert_uint_le(g.bytes, sizeof(buf));
                ck_assert_int_eq(zr_gather_read(&g, buf, 0, NULL, NULL, &err), 0);
                zr_gather_release(&g);
                for (int k = 0; k < 3; k++) {
                        ck_assert_uint_eq(lens[k], lx_bytes_len(idx[k]));
                        ck_assert_uint_eq(shapes[k], lens[k]);
                        for (uint64_t j = 0; j < lens[k]; j++)
                                ck_assert_uint_eq(buf[offs[k] + j], idx[k] % 251);
                }
        }
        zr_dataset_close(ds, NULL);
        ck_assert_int_eq(zr_store_open(fd, NULL, &st, &err), 0);
        ck_assert_uint_eq(zr_store_length(st), LX_BYTES_N);
        for (uint64_t i = 0; i < LX_BYTES_N; i++) {
                uint8_t buf[512], want[512];
                uint64_t len;

                if (zr_store_gather(st, &i, 1, buf, sizeof(buf), &len, &err) != 0 ||
                    len != lx_bytes_len(i))
                        ck_abort_msg("byte record %" PRIu64 ": %s", i, err.message);
                memset(want, (int)(i % 251), len);
                if (memcmp(buf, want, len) != 0)
                        ck_abort_msg("byte record %" PRIu64 " differs", i);
        }
        zr_store_close(st, NULL);
        close(fd);
        scratch_free(&s);
}
END_TEST

/* zrecord creates stores loaderx 1.5.7 opens: dense of every codec (through the
 * dataset layer, as the daemon does) and ragged in loaderx's layout. */
START_TEST(test_zrecord_stores_for_loaderx) {
        scratch s;
        zr_error err = {0};

        scratch_new(&s);
        for (int c = 0; c < 3; c++) {
                char name[32];
                uint64_t shape[2] = { 4, 4 }, count, *ids;
                int32_t dict[1024];
                zr_schema sc;
                zr_dataset *ds;
                zr_lxragged *d;
                int fd;

                for (int i = 0; i < 1024; i++)
                        dict[i] = i; /* raw content: any bytes serve as a zstd dictionary */
                snprintf(name, sizeof(name), "zr-dense-%s", codecs[c]);
                fd = scratch_child(&s, name);
                ck_assert_int_eq(zr_schema_init_dense(&sc, "<i4", shape, 2, c, NULL), 0);
                ck_assert_msg(zr_dataset_create(fd, &sc, dict, sizeof(dict), NULL, &ds, &err) == 0,
                              "%s", err.message);
                dense_append(ds, 0, 500);
                zr_dataset_close(ds, NULL);
                if (lx_python()) {
                        lx_check(&s, name, "dense", "plain:500");
                        ids = lx_ids(500, 0, NULL, 0, &count);
                        ck_assert_int_eq(zr_dataset_open(fd, NULL, &ds, &err), 0);
                        dense_expect(ds, ids, lx_appended(ids, count));
                        zr_dataset_close(ds, NULL);
                        free(ids);
                }
                close(fd);

                snprintf(name, sizeof(name), "zr-ragged-%s", codecs[c]);
                fd = scratch_child(&s, name);
                ck_assert_msg(zr_lxragged_create(fd, "<i4", c, dict, sizeof(dict), NULL, &d, &err)
                              == 0, "%s", err.message);
                ragged_append(d, 0, 300);
                zr_lxragged_close(d, NULL);
                if (lx_python())
                        lx_check(&s, name, "ragged", "plain:300");
                ck_assert_int_eq(zr_lxragged_open(fd, NULL, &d, &err), 0);
                ids = lx_ids(300, 0, NULL, 0, &count);
                ragged_expect(d, ids, lx_python() ? lx_appended(ids, count) : count);
                zr_lxragged_close(d, NULL);
                free(ids);
                close(fd);
        }
        scratch_free(&s);
}
END_TEST

/* Converting a ragged store to zrecord's layout and back gives the same records
 * and shapes, also when records differ in ndim; an empty record and a dense
 * dataset are refused with a message. Records: id of shape (1 + id % 7, 2). */
static void conv_record(uint64_t id, int32_t *out, uint64_t dims[2]) {
        dims[0] = 1 + id % 7;
        dims[1] = 2;
        for (uint64_t k = 0; k < dims[0] * 2; k++)
                out[k] = (int32_t)(id * 1000 + k);
}

static void conv_expect_lx(zr_lxragged *d, uint64_t n) {
        for (uint64_t i = 0; i < n; i++) {
                int32_t got[14], want[14];
                uint64_t dims[2];
                const uint64_t *gd;
                uint32_t ndim;

                conv_record(i, want, dims);
                if (zr_lxragged_gather(d, &i, 1, got, sizeof(got), NULL, NULL) != 0 ||
                    zr_lxragged_shape(d, i, &ndim, &gd, NULL) != 0 || ndim != 2 ||
                    memcmp(gd, dims, sizeof(dims)) != 0 || memcmp(got, want, dims[0] * 8) != 0)
                        ck_abort_msg("converted record %" PRIu64 " differs", i);
        }
}

/* zr_convert() of the dataset in src (opened read-only) into dst. */
static int conv_cancel(int src, int dst, enum zr_layout to, const zr_store_options *o,
                       const _Atomic int *cancel, uint64_t *count, zr_error *err) {
        zr_store_options so = { .read_only = 1 };
        zr_dataset *ds;
        int r = zr_dataset_open(src, &so, &ds, err);

        if (r == 0)
                r = zr_convert(ds, dst, to, o, cancel, count, NULL, err);
        zr_dataset_close(ds, NULL);
        return r;
}

static int conv(int src, int dst, enum zr_layout to, const zr_store_options *o, uint64_t *count,
                zr_error *err) {
        return conv_cancel(src, dst, to, o, NULL, count, err);
}

START_TEST(test_convert_both_ways) {
        zr_store_options o = { .chunk_log2 = 16 };
        uint8_t dict[2048];
        uint64_t n = 300, count;
        zr_lxragged *d;
        zr_dataset *ds;
        zr_error err = {0};
        scratch s;
        int a, b, c, fd;

        scratch_new(&s);
        for (int i = 0; i < 2048; i++)
                dict[i] = (uint8_t)(i * 7);
        a = scratch_child(&s, "lx");
        ck_assert_int_eq(zr_lxragged_create(a, "<i4", ZR_CODEC_ZSTD_DICT, dict, sizeof(dict), &o, &d,
                                            &err), 0);
        for (uint64_t i = 0; i < n; i++) {
                int32_t rec[14];
                uint64_t dims[2], len;

                conv_record(i, rec, dims);
                len = dims[0] * 8;
                ck_assert_int_eq(zr_lxragged_append(d, rec, &len, (uint32_t[]){ 2 }, dims, 1, 0,
                                                    NULL, &err), 0);
        }
        zr_lxragged_close(d, NULL);

        b = scratch_child(&s, "zr");
        ck_assert_msg(conv(a, b, ZR_LAYOUT_ZRECORD, &o, &count, &err) == 0, "%s", err.message);
        ck_assert_uint_eq(count, n);
        ck_assert_int_eq(zr_dataset_open(b, NULL, &ds, &err), 0);
        ck_assert_int_eq(zr_dataset_schema(ds)->kind, ZR_SCHEMA_RAGGED);
        ck_assert_uint_eq(zr_dataset_schema(ds)->ndim, 2);
        ck_assert_int_eq(zr_dataset_schema(ds)->codec, ZR_CODEC_ZSTD_DICT);
        ck_assert_int_eq(zr_dataset_has_dict(ds), 1);
        for (uint64_t i = 0; i < n; i++) {
                uint8_t buf[256];
                int32_t want[14];
                uint64_t dims[2], shape[2], off, len;
                zr_gather g = { .ds = ds, .idx = &i, .n = 1, .offsets = &off, .lengths = &len,
                                .shapes = shape };
                int r;

                conv_record(i, want, dims);
                r = zr_gather_locate(&g, &err);
                if (r == 0 && g.bytes > sizeof(buf))
                        r = -ZR_E_BUFFER;
                if (r == 0)
                        r = zr_gather_read(&g, buf, 0, NULL, NULL, &err);
                zr_gather_release(&g);
                if (r != 0 || memcmp(shape, dims, sizeof(dims)) != 0 ||
                    memcmp(buf + off, want, dims[0] * 8) != 0)
                        ck_abort_msg("record %" PRIu64 " of the zrecord dataset differs", i);
        }
        zr_dataset_close(ds, NULL);

        c = scratch_child(&s, "back");
        ck_assert_msg(conv(b, c, ZR_LAYOUT_LX157, &o, &count, &err) == 0, "%s", err.message);
        ck_assert_uint_eq(count, n);
        ck_assert_int_eq(zr_lxragged_open(c, NULL, &d, &err), 0);
        ck_assert_int_eq(zr_store_has_dict(zr_lxragged_store(d)), 1);
        conv_expect_lx(d, n);
        zr_lxragged_close(d, NULL);

        /* records of differing ndim: a dataset of any ndim, each record its own
         * shape (the gather's shapes: ndim, then dims), and back */
        fd = scratch_child(&s, "mixed");
        ck_assert_int_eq(zr_lxragged_create(fd, "|u1", ZR_CODEC_RAW, NULL, 0, &o, &d, NULL), 0);
        ck_assert_int_eq(zr_lxragged_append(d, "abcdef", (uint64_t[]){ 2, 4 }, (uint32_t[]){ 1, 2 },
                                            (uint64_t[]){ 2, 2, 2 }, 2, 0, NULL, &err), 0);
        zr_lxragged_close(d, NULL);
        close(c);
        c = scratch_child(&s, "out1");
        ck_assert_msg(conv(fd, c, ZR_LAYOUT_ZRECORD, &o, &count, &err) == 0, "%s", err.message);
        ck_assert_uint_eq(count, 2);
        ck_assert_int_eq(zr_dataset_open(c, NULL, &ds, &err), 0);
        ck_assert_uint_eq(zr_dataset_schema(ds)->ndim, ZR_SCHEMA_NDIM_ANY);
        {
                uint8_t buf[128];
                uint64_t idx[2] = { 1, 0 }, off[2], len[2], shape[2 * (1 + ZR_SCHEMA_NDIM_MAX)];
                zr_gather g = { .ds = ds, .idx = idx, .n = 2, .offsets = off, .lengths = len,
                                .shapes = shape };

                ck_assert_int_eq(zr_gather_locate(&g, &err), 0);
                ck_assert_uint_le(g.bytes, sizeof(buf));
                ck_assert_int_eq(zr_gather_read(&g, buf, 0, NULL, NULL, &err), 0);
                zr_gather_release(&g);
                /* record 1: ndim 2, (2, 2); record 0: ndim 1, (2,) */
                static const uint64_t want_shape[5] = { 2, 2, 2, 1, 2 }, want_len[2] = { 4, 2 };

                ck_assert_uint_eq(g.shape_words, 5);
                for (int k = 0; k < 5; k++)
                        ck_assert_uint_eq(shape[k], want_shape[k]);
                for (int k = 0; k < 2; k++)
                        ck_assert_uint_eq(len[k], want_len[k]);
                ck_assert_int_eq(memcmp(buf + off[0], "cdef", 4), 0);
                ck_assert_int_eq(memcmp(buf + off[1], "ab", 2), 0);
        }
        zr_dataset_close(ds, NULL);
        close(fd);
        fd = scratch_child(&s, "mixed-back");
        ck_assert_msg(conv(c, fd, ZR_LAYOUT_LX157, &o, &count, &err) == 0, "%s", err.message);
        ck_assert_int_eq(zr_lxragged_open(fd, NULL, &d, &err), 0);
        {
                const uint64_t *gd;
                uint32_t nd;

                ck_assert_int_eq(zr_lxragged_shape(d, 0, &nd, &gd, NULL), 0);
                ck_assert_uint_eq(nd, 1);
                ck_assert_uint_eq(gd[0], 2);
                ck_assert_int_eq(zr_lxragged_shape(d, 1, &nd, &gd, NULL), 0);
                ck_assert_uint_eq(nd, 2);
                ck_assert_uint_eq(gd[0] * gd[1], 4);
        }
        zr_lxragged_close(d, NULL);
        close(fd);
        close(c);
        c = scratch_child(&s, "out2");

        /* refusals: a store is there, a dense dataset, an empty record */
        zr_error_clear(&err);
        ck_assert_int_eq(conv(a, b, ZR_LAYOUT_ZRECORD, &o, NULL, &err), -ZR_E_EXISTS);
        {
                zr_schema sc;
                uint64_t shape[1] = { 2 };
                uint8_t rec[16];
                zr_batch bt = { .dtype = "|u1", .data = rec, .data_len = 16,
                                .lens = (uint64_t[]){ 16 }, .nrecords = 1 };

                fd = scratch_child(&s, "dense");
                ck_assert_int_eq(zr_schema_init_dense(&sc, "|u1", shape, 1, ZR_CODEC_RAW, NULL), 0);
                ck_assert_int_eq(zr_dataset_create(fd, &sc, NULL, 0, &o, &ds, NULL), 0);
                zr_dataset_close(ds, NULL);
                zr_error_clear(&err);
                ck_assert_int_eq(conv(fd, c, ZR_LAYOUT_LX157, &o, NULL, &err), -ZR_E_SCHEMA);
                ck_assert_ptr_nonnull(strstr(err.message, "dense"));
                close(fd);

                fd = scratch_child(&s, "empty");
                ck_assert_int_eq(zr_schema_init_ragged(&sc, "|u1", 1, ZR_CODEC_RAW, NULL), 0);
                ck_assert_int_eq(zr_dataset_create(fd, &sc, NULL, 0, &o, &ds, NULL), 0);
                zr_ragged_header_write(rec, (uint64_t[]){ 0 }, 1);
                ck_assert_int_eq(zr_dataset_append(ds, &bt, NULL, &err), 0);
                zr_dataset_close(ds, NULL);
                zr_error_clear(&err);
                ck_assert_int_eq(conv(fd, c, ZR_LAYOUT_LX157, &o, NULL, &err), -ZR_E_SCHEMA);
                ck_assert_msg(strstr(err.message, "record 0 is empty"), "%s", err.message);
                close(fd);
        }
        /* told to stop (its client left, the daemon stops): ECANCELED before a
         * batch more; the destination holds a prefix of the records (convert.h),
         * here none */
        {
                _Atomic int cancel = 1;

                fd = scratch_child(&s, "cancelled");
                zr_error_clear(&err);
                ck_assert_int_eq(conv_cancel(a, fd, ZR_LAYOUT_ZRECORD, &o, &cancel, &count, &err),
                                 -ECANCELED);
                ck_assert_msg(strstr(err.message, "cancelled"), "%s", err.message);
                zr_error_clear(&err);
                ck_assert_msg(zr_dataset_open(fd, NULL, &ds, &err) == 0, "%s", err.message);
                ck_assert_uint_eq(zr_dataset_length(ds), 0);
                zr_dataset_close(ds, NULL);
                close(fd);
        }
        close(a);
        close(b);
        close(c);
        scratch_free(&s);
}
END_TEST

TL_SUITE_MAIN("lx157", test_dense_fixtures, test_ragged_fixtures,
              test_deleted_and_bytes_fixtures, test_zrecord_stores_for_loaderx,
              test_convert_both_ways)
