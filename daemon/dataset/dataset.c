/* dataset.c: a store plus its schema (dataset.h), and what its users share:
 * its id, lock and generation.
 *
 * It validates batches against the schema before they reach the store. It
 * assumes the store keeps its own promises (ordered, all-or-nothing appends);
 * it does not convert dtypes, pad, or buffer anything: one append is one
 * zr_store_append(). Reading records is the batch gather's (batch.c).
 */
#include "dataset/dataset.h"
#include "dataset/rdataset.h"

#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dataset/batch.h"
#include "dataset/lxragged.h"
#include "dataset/lxschema.h"
#include "dataset/ragged.h"
#include "dataset/schemafile.h"
#include "store/resolve.h"

#define STORE_META_FILE "meta.zr"

struct zr_dataset {
        zr_store *store;       /* lx's own when lx is set */
        zr_schema schema;
        zr_lxragged *lx;       /* ZR_LAYOUT_LX157: the store and its shape table */
        uint64_t id;
        pthread_rwlock_t lock;
        _Atomic uint64_t generation;
        zr_rdataset *remote;   /* a store in object storage: its mirror (rdataset.h) */
};

/* The last id given (dataset.h: 1, 2, ... never reused in this process). */
static _Atomic uint64_t last_id;

/* A new dataset's shared state: its id and its writer-preferring lock (with
 * glibc's default a steady stream of shared holders starves an exclusive one;
 * writer preference is safe because nobody takes it shared twice). */
static zr_dataset *dataset_alloc(void) {
        pthread_rwlockattr_t attr;
        zr_dataset *ds = calloc(1, sizeof(*ds));

        if (!ds)
                return NULL;
        ds->id = atomic_fetch_add(&last_id, 1) + 1;
        pthread_rwlockattr_init(&attr);
        pthread_rwlockattr_setkind_np(&attr, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
        pthread_rwlock_init(&ds->lock, &attr);
        pthread_rwlockattr_destroy(&attr);
        return ds;
}

static void dataset_free(zr_dataset *ds) {
        pthread_rwlock_destroy(&ds->lock);
        free(ds);
}

/* Writes schema.msgpack atomically (schemafile.h). */
static int schema_write(int dirfd, const zr_schema *schema, zr_error *err) {
        void *buf = NULL;
        size_t len = 0;
        int r = zr_schema_encode(schema, &buf, &len, err);

        if (r == 0)
                r = zr_schema_file_replace(dirfd, buf, len, err);
        free(buf);
        return r;
}

/* What schema.msgpack says the dataset is. */
enum schema_found {
        SCHEMA_OWN,   /* decoded into *ret */
        SCHEMA_NONE,  /* no file: a plain store of byte records */
        SCHEMA_LX157, /* loaderx 1.5.7's ragged schema: lxragged.h reads it */
};

/* Reads schema.msgpack (its first ZR_SCHEMA_FILE_MAX + 1 bytes) and decodes it,
 * unless it is absent or loaderx 1.5.7's ragged schema, which has no size bound
 * and is read whole by lxfile.h. Returns a schema_found or a negative code. */
static int schema_read(int dirfd, zr_schema *ret, zr_error *err) {
        void *buf = NULL;
        size_t len = 0;
        /* one byte past the limit, so that an oversized file is seen as one */
        int r = zr_schema_file_read(dirfd, ZR_SCHEMA_FILE_MAX + 1, &buf, &len, err);

        if (r == -ENOENT)
                return SCHEMA_NONE;
        if (r < 0)
                return r;
        if (zr_lxschema_sniff(buf, len))
                r = SCHEMA_LX157;
        else if ((r = zr_schema_decode(buf, len, ret, err)) == 0)
                r = SCHEMA_OWN;
        free(buf);
        return r;
}

/* The schema a loaderx 1.5.7 store is served with (dataset.h). */
static int schema_of_layout(enum zr_layout layout, const char *dtype, enum zr_codec codec,
                            zr_schema *ret, zr_error *err) {
        int r = zr_schema_init_ragged(ret, dtype, layout == ZR_LAYOUT_BYTES ? 1 :
                                      ZR_SCHEMA_NDIM_ANY, codec, err);

        ret->layout = layout;
        return r;
}

int zr_dataset_create(int dirfd, const zr_schema *schema, const void *dict, size_t dict_len,
                      const zr_store_options *opts, zr_dataset **ret, zr_error *err) {
        zr_dataset *ds;
        struct stat st;
        int r;

        if (fstatat(dirfd, STORE_META_FILE, &st, AT_SYMLINK_NOFOLLOW) == 0)
                return zr_error_set(err, ZR_E_EXISTS, "a store already exists here "
                                    "(" STORE_META_FILE ")");
        if (errno != ENOENT)
                return zr_error_errno(err, errno, "checking for " STORE_META_FILE);

        if (schema->layout == ZR_LAYOUT_BYTES &&
            (schema->kind != ZR_SCHEMA_RAGGED || schema->ndim != 1 ||
             schema->dtype.itemsize != 1 || strcmp(schema->dtype.str, "|u1") != 0))
                return zr_error_set(err, ZR_E_SCHEMA, "a store of byte records (no "
                                    ZR_SCHEMA_FILE ") is ragged |u1 of ndim 1");
        if (schema->layout == ZR_LAYOUT_LX157)
                return zr_error_set(err, ZR_E_SCHEMA, "zrecord creates ragged datasets in its "
                                    "own layout: convert one to loaderx 1.5.7's");
        ds = dataset_alloc();
        if (!ds)
                return zr_error_errno(err, ENOMEM, "creating dataset");
        ds->schema = *schema;

        r = schema->layout == ZR_LAYOUT_BYTES ? 0 : schema_write(dirfd, schema, err);
        if (r < 0)
                goto fail;
        r = zr_store_create(dirfd, schema->codec, dict, dict_len, opts, &ds->store, err);
        if (r < 0) {
                unlinkat(dirfd, ZR_SCHEMA_FILE, 0);
                goto fail;
        }
        *ret = ds;
        return 0;
fail:
        dataset_free(ds);
        return r;
}

int zr_dataset_open(int dirfd, const zr_store_options *opts, zr_dataset **ret,
                    zr_error *err) {
        zr_dataset *ds;
        int found, r;

        ds = dataset_alloc();
        if (!ds)
                return zr_error_errno(err, ENOMEM, "opening dataset");
        zr_error serr = {0};
        found = schema_read(dirfd, &ds->schema, &serr);
        if (found == SCHEMA_LX157) {
                r = zr_lxragged_open(dirfd, opts, &ds->lx, err);
                if (r < 0)
                        goto fail;
                ds->store = zr_lxragged_store(ds->lx);
                r = schema_of_layout(ZR_LAYOUT_LX157, zr_lxragged_schema(ds->lx)->dtype.str,
                                     zr_store_codec(ds->store), &ds->schema, err);
                if (r < 0)
                        goto fail;
                *ret = ds;
                return 0;
        }
        /* the store's errors (not a store, ...) before the schema's */
        r = zr_store_open(dirfd, opts, &ds->store, err);
        if (r < 0)
                goto fail;
        if (found < 0) {
                r = zr_error_set(err, serr.code, "%s", serr.message);
                goto fail;
        }
        r = 0;
        if (found == SCHEMA_NONE)
                r = schema_of_layout(ZR_LAYOUT_BYTES, "|u1", zr_store_codec(ds->store),
                                     &ds->schema, err);
        if (r < 0)
                goto fail;
        if (zr_store_codec(ds->store) != ds->schema.codec) {
                const char *sc = zr_codec_name(zr_store_codec(ds->store));
                r = zr_error_set(err, ZR_E_SCHEMA, ZR_SCHEMA_FILE " says codec %s, the store "
                                 "has codec %s", zr_codec_name(ds->schema.codec),
                                 sc ? sc : "unknown");
                goto fail;
        }
        *ret = ds;
        return 0;
fail:
        if (ds->lx)
                zr_lxragged_close(ds->lx, NULL);
        else
                zr_store_close(ds->store, NULL);
        dataset_free(ds);
        return r;
}

int zr_dataset_close(zr_dataset *ds, zr_error *err) {
        int r;

        if (!ds)
                return 0;
        /* a remote dataset's side first: until it is out of the disk cache's
         * list, an eviction on the fetcher's thread may locate a record in
         * this store (rdataset.c, disk_release()) */
        zr_rdataset_close(ds->remote);
        ds->remote = NULL;
        r = ds->lx ? zr_lxragged_close(ds->lx, err) : zr_store_close(ds->store, err);
        dataset_free(ds);
        return r;
}

void zr_dataset_set_remote(zr_dataset *ds, zr_rdataset *rd) {
        ds->remote = rd;
}

zr_rdataset *zr_dataset_remote(const zr_dataset *ds) {
        return ds->remote;
}

int zr_dataset_make_writable(zr_dataset *ds, int dirfd, zr_error *err) {
        if (ds->lx)
                return zr_lxragged_make_writable(ds->lx, dirfd, err);
        return zr_store_make_writable(ds->store, dirfd, err);
}

const zr_schema *zr_dataset_schema(const zr_dataset *ds) {
        return &ds->schema;
}

zr_store *zr_dataset_store(zr_dataset *ds) {
        return ds->store;
}

uint64_t zr_dataset_length(const zr_dataset *ds) {
        return zr_store_length(ds->store);
}

uint64_t zr_dataset_id(const zr_dataset *ds) {
        return ds->id;
}

void zr_dataset_lock(zr_dataset *ds, bool exclusive) {
        if (exclusive)
                pthread_rwlock_wrlock(&ds->lock);
        else
                pthread_rwlock_rdlock(&ds->lock);
}

int zr_dataset_trylock_shared(zr_dataset *ds) {
        return pthread_rwlock_tryrdlock(&ds->lock) == 0 ? 0 : -EBUSY;
}

void zr_dataset_unlock(zr_dataset *ds) {
        pthread_rwlock_unlock(&ds->lock);
}

uint64_t zr_dataset_generation(const zr_dataset *ds) {
        return atomic_load_explicit(&ds->generation, memory_order_acquire);
}

void zr_dataset_mutated(zr_dataset *ds) {
        atomic_fetch_add_explicit(&ds->generation, 1, memory_order_release);
}

int zr_dataset_has_dict(const zr_dataset *ds) {
        return zr_store_has_dict(ds->store);
}

static int check_dense(const zr_dataset *ds, const zr_batch *b, uint64_t *ret_n,
                       zr_error *err) {
        const zr_schema *s = &ds->schema;
        uint64_t item = zr_schema_item_bytes(s), bytes;
        char want[128], got[128];

        if (b->ndim < 1 || !b->shape)
                return zr_error_set(err, ZR_E_SCHEMA, "a dense batch needs a shape (B, "
                                    "*item_shape) with a leading batch axis; it has ndim %u",
                                    b->ndim);
        if (b->ndim - 1 != s->ndim || memcmp(b->shape + 1, s->item_shape,
                                             s->ndim * sizeof(uint64_t)) != 0) {
                zr_shape_format(s->item_shape, s->ndim, want, sizeof(want));
                zr_shape_format(b->shape + 1, b->ndim - 1 < ZR_SCHEMA_NDIM_MAX ?
                                b->ndim - 1 : ZR_SCHEMA_NDIM_MAX, got, sizeof(got));
                return zr_error_set(err, ZR_E_SCHEMA, "item shape: expected %s, got %s%s",
                                    want, got, b->ndim - 1 > ZR_SCHEMA_NDIM_MAX ? " (cut)" : "");
        }
        if (__builtin_mul_overflow(b->shape[0], item, &bytes) || bytes != b->data_len) {
                char need[32];
                if (__builtin_mul_overflow(b->shape[0], item, &bytes))
                        snprintf(need, sizeof(need), "over 2^64");
                else
                        snprintf(need, sizeof(need), "%llu", (unsigned long long)bytes);
                zr_shape_format(b->shape, b->ndim, got, sizeof(got));
                return zr_error_set(err, ZR_E_SCHEMA, "a batch of shape %s of %s is %s bytes, "
                                    "%llu came", got, s->dtype.str, need,
                                    (unsigned long long)b->data_len);
        }
        if (b->data_len > 0 && !b->data)
                return zr_error_set(err, ZR_E_SCHEMA, "a batch of %llu bytes without data",
                                    (unsigned long long)b->data_len);
        *ret_n = b->shape[0];
        return 0;
}

static int check_ragged(const zr_dataset *ds, const zr_batch *b, uint64_t *ret_n,
                        zr_error *err) {
        const uint8_t *p = b->data;
        uint64_t total = 0;
        int r;

        if (b->nrecords > 0 && !b->lens)
                return zr_error_set(err, ZR_E_SCHEMA, "a ragged batch of %llu records without "
                                    "their lengths", (unsigned long long)b->nrecords);
        for (uint64_t i = 0; i < b->nrecords; i++)
                if (__builtin_add_overflow(total, b->lens[i], &total))
                        return zr_error_set(err, ZR_E_SCHEMA, "ragged record lengths overflow");
        if (total != b->data_len)
                return zr_error_set(err, ZR_E_SCHEMA, "ragged records add up to %llu bytes, "
                                    "the batch has %llu", (unsigned long long)total,
                                    (unsigned long long)b->data_len);
        if (total > 0 && !p)
                return zr_error_set(err, ZR_E_SCHEMA, "a batch of %llu bytes without data",
                                    (unsigned long long)total);
        for (uint64_t i = 0; i < b->nrecords; i++) {
                uint64_t dims[ZR_SCHEMA_NDIM_MAX];
                uint32_t nd;

                r = zr_ragged_parse(&ds->schema, p, b->lens[i], i, NULL, err);
                if (r < 0)
                        return r;
                if (ds->schema.layout != ZR_LAYOUT_ZRECORD &&
                    zr_ragged_parse_any(p, b->lens[i], ds->schema.dtype.itemsize, i, &nd, dims,
                                        err) == 0 &&
                    b->lens[i] == zr_ragged_header_bytes(nd))
                        return zr_error_set(err, ZR_E_SCHEMA, "record %llu is empty: a store in "
                                            "loaderx 1.5.7's layout holds no empty records",
                                            (unsigned long long)i);
                p += b->lens[i];
        }
        *ret_n = b->nrecords;
        return 0;
}

int zr_dataset_check(const zr_dataset *ds, const zr_batch *b, uint64_t *ret_n,
                     zr_error *err) {
        const zr_schema *s = &ds->schema;
        zr_dtype dt;
        uint64_t n = 0;
        int r;

        if (!b->dtype)
                return zr_error_set(err, ZR_E_SCHEMA, "batch has no dtype (expected %s)",
                                    s->dtype.str);
        r = zr_dtype_parse(b->dtype, &dt, err);
        if (r < 0)
                return r;
        if (!zr_dtype_equal(&dt, &s->dtype))
                return zr_error_set(err, ZR_E_SCHEMA, "dtype: expected %s, got %s",
                                    s->dtype.str, dt.str);
        if (s->kind == ZR_SCHEMA_DENSE)
                r = check_dense(ds, b, &n, err);
        else
                r = check_ragged(ds, b, &n, err);
        if (r < 0)
                return r;
        if (n > 0 && s->codec == ZR_CODEC_ZSTD_DICT && !zr_store_has_dict(ds->store))
                return zr_error_set(err, ZR_E_NO_DICT, "this zstd_dict dataset has no "
                                    "dictionary yet: train one and install it before "
                                    "appending");
        if (ret_n)
                *ret_n = n;
        return 0;
}

/* Appends n checked records with headers (zr_dataset_check()) to a store of
 * loaderx 1.5.7's layouts: the payloads, copied back to back without their
 * headers, and (ZR_LAYOUT_LX157) their shapes to schema.msgpack. */
static int append_headerless(zr_dataset *ds, const zr_batch *b, uint64_t n,
                             uint64_t *ret_first, zr_error *err) {
        const uint8_t *p = b->data;
        uint64_t *lens = NULL, *dims = NULL, ndims_total = 0, at = 0, w = 0;
        uint32_t *ndims = NULL;
        uint8_t *data = NULL;
        int r;

        uint64_t d[ZR_SCHEMA_NDIM_MAX];
        uint32_t nd;

        for (uint64_t i = 0; i < n; i++) { /* checked: every header parses */
                zr_ragged_parse_any(p, b->lens[i], ds->schema.dtype.itemsize, i, &nd, d, NULL);
                ndims_total += nd;
                p += b->lens[i];
        }
        if (n > SIZE_MAX / sizeof(uint64_t) || ndims_total > SIZE_MAX / sizeof(uint64_t) ||
            b->data_len > SIZE_MAX)
                return zr_error_errno(err, ENOMEM, "appending %llu records",
                                      (unsigned long long)n);
        lens = malloc(n * sizeof(*lens));
        ndims = malloc(n * sizeof(*ndims));
        dims = malloc((ndims_total ? ndims_total : 1) * sizeof(*dims));
        data = malloc(b->data_len ? (size_t)b->data_len : 1);
        if (!lens || !ndims || !dims || !data) {
                r = zr_error_errno(err, ENOMEM, "appending %llu records", (unsigned long long)n);
                goto out;
        }
        p = b->data;
        for (uint64_t i = 0; i < n; i++) {
                zr_ragged_parse_any(p, b->lens[i], ds->schema.dtype.itemsize, i, &nd, dims + w,
                                    NULL);
                uint64_t hdr = zr_ragged_header_bytes(nd);

                ndims[i] = nd;
                w += nd;
                lens[i] = b->lens[i] - hdr;
                memcpy(data + at, p + hdr, lens[i]);
                at += lens[i];
                p += b->lens[i];
        }
        if (ds->lx)
                r = zr_lxragged_append(ds->lx, data, lens, ndims, dims, n, b->level, ret_first,
                                       err);
        else
                r = zr_store_append_level(ds->store, b->level, data, lens, n, ret_first, err);
out:
        free(lens);
        free(ndims);
        free(dims);
        free(data);
        return r;
}

int zr_dataset_append(zr_dataset *ds, const zr_batch *b, uint64_t *ret_first,
                      zr_error *err) {
        uint64_t n, *lens = NULL;
        int r;

        r = zr_dataset_check(ds, b, &n, err);
        if (r < 0)
                return r;
        if (n == 0) {
                if (ret_first)
                        *ret_first = zr_store_length(ds->store);
                return 0;
        }
        if (ds->schema.kind == ZR_SCHEMA_DENSE) {
                uint64_t item = zr_schema_item_bytes(&ds->schema);
                if (n > SIZE_MAX / sizeof(uint64_t))
                        return zr_error_errno(err, ENOMEM, "appending %llu records",
                                              (unsigned long long)n);
                lens = malloc(n * sizeof(uint64_t));
                if (!lens)
                        return zr_error_errno(err, ENOMEM, "appending %llu records",
                                              (unsigned long long)n);
                for (uint64_t i = 0; i < n; i++)
                        lens[i] = item;
                r = zr_store_append_level(ds->store, b->level, b->data, lens, n, ret_first,
                                          err);
                free(lens);
                return r;
        }
        if (ds->schema.layout != ZR_LAYOUT_ZRECORD)
                return append_headerless(ds, b, n, ret_first, err);
        return zr_store_append_level(ds->store, b->level, b->data, b->lens, n, ret_first, err);
}

bool zr_dataset_takes_values(const zr_dataset *ds) {
        const zr_schema *s = &ds->schema;
        return s->kind != ZR_SCHEMA_DENSE && s->layout == ZR_LAYOUT_ZRECORD && !ds->lx &&
               (s->ndim == 1 || s->ndim == ZR_SCHEMA_NDIM_ANY) &&
               zr_store_codec(ds->store) == ZR_CODEC_RAW;
}

int zr_dataset_append_values(zr_dataset *ds, const char *dtype, const void *values,
                             const uint64_t *items, const uint64_t *sizes, uint64_t n,
                             uint64_t *ret_first, zr_error *err) {
        const zr_schema *s = &ds->schema;
        uint64_t item = s->dtype.itemsize, hdr = zr_ragged_header_bytes(1), *hdrs;
        zr_dtype dt;
        int r;

        if (!zr_dataset_takes_values(ds))
                return zr_error_set(err, ENOTSUP, "records as values: not this store's");
        if (!dtype)
                return zr_error_set(err, ZR_E_SCHEMA, "batch has no dtype (expected %s)",
                                    s->dtype.str);
        r = zr_dtype_parse(dtype, &dt, err);
        if (r < 0)
                return r;
        if (!zr_dtype_equal(&dt, &s->dtype))
                return zr_error_set(err, ZR_E_SCHEMA, "dtype: expected %s, got %s",
                                    s->dtype.str, dt.str);
        for (uint64_t i = 0; i < n; i++)
                if (items[i] > ZR_RECORD_MAX / (item ? item : 1) ||
                    sizes[i] != hdr + items[i] * item)
                        return zr_error_set(err, ZR_E_SCHEMA, "record %llu: %llu bytes for %llu "
                                            "items", (unsigned long long)i,
                                            (unsigned long long)sizes[i],
                                            (unsigned long long)items[i]);
        if (n == 0) {
                if (ret_first)
                        *ret_first = zr_store_length(ds->store);
                return 0;
        }
        if (n > SIZE_MAX / 16 || !(hdrs = malloc((size_t)n * 16)))
                return zr_error_errno(err, ENOMEM, "appending %llu records",
                                      (unsigned long long)n);
        for (uint64_t i = 0; i < n; i++) {
                hdrs[2 * i] = htole64(1);
                hdrs[2 * i + 1] = htole64(items[i]);
        }
        r = zr_store_append_split(ds->store, hdrs, hdr, values, sizes, n, ret_first, err);
        free(hdrs);
        return r;
}

int zr_dataset_gather_dense(zr_dataset *ds, const uint64_t *idx, size_t n, void *dst,
                            uint64_t dst_size, zr_error *err) {
        uint64_t item = zr_schema_item_bytes(&ds->schema), need;
        zr_gather g = { .ds = ds, .idx = idx, .n = n };
        int r;

        if (ds->schema.kind != ZR_SCHEMA_DENSE)
                return zr_error_set(err, ZR_E_SCHEMA, "this is a ragged dataset, not a dense "
                                    "one");
        if (__builtin_mul_overflow((uint64_t)n, item, &need) || need > dst_size)
                return zr_error_set(err, ZR_E_BUFFER, "%zu records of %llu bytes do not fit "
                                    "%llu bytes", n, (unsigned long long)item,
                                    (unsigned long long)dst_size);
        if (n == 0)
                return 0;
        r = zr_gather_locate(&g, err);
        if (r == 0)
                r = zr_gather_read(&g, dst, 0, NULL, NULL, err);
        zr_gather_release(&g);
        return r;
}

static int cmp_u64(const void *a, const void *b) {
        uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

        return (x > y) - (x < y);
}

int zr_dataset_delete(zr_dataset *ds, const uint64_t *idx, size_t n, zr_error *err) {
        uint64_t *sorted;
        int r = 0;

        if (!ds->lx)
                return zr_store_delete(ds->store, idx, n, err);
        /* the store's contract: repeats are an error, before anything changes */
        if (n > SIZE_MAX / sizeof(*sorted) || !(sorted = malloc((n ? n : 1) * sizeof(*sorted))))
                return zr_error_errno(err, ENOMEM, "deleting %zu records", n);
        memcpy(sorted, idx, n * sizeof(*sorted));
        qsort(sorted, n, sizeof(*sorted), cmp_u64);
        for (size_t i = 1; i < n && r == 0; i++)
                if (sorted[i] == sorted[i - 1])
                        r = zr_error_set(err, EINVAL, "delete: index %llu is given twice",
                                         (unsigned long long)sorted[i]);
        free(sorted);
        return r < 0 ? r : zr_lxragged_delete(ds->lx, idx, n, err);
}

int zr_dataset_compact(zr_dataset *ds, zr_compact_result *ret, zr_error *err) {
        if (ds->lx)
                return zr_lxragged_compact(ds->lx, ret, err);
        return zr_store_compact(ds->store, 0, ret, err);
}

bool zr_dataset_append_exclusive(const zr_dataset *ds) {
        return ds->lx != NULL;
}

int zr_dataset_record_shape(const zr_dataset *ds, uint64_t i, uint64_t stored,
                            uint32_t *ret_ndim, uint64_t *ret_dims, zr_error *err) {
        const uint64_t *dims;
        uint64_t bytes = ds->schema.dtype.itemsize;
        uint32_t nd;
        int r;

        if (!ds->lx) { /* ZR_LAYOUT_BYTES */
                *ret_ndim = 1;
                ret_dims[0] = stored;
                return 0;
        }
        r = zr_lxragged_shape(ds->lx, i, &nd, &dims, err);
        if (r < 0)
                return r;
        for (uint32_t k = 0; k < nd; k++)
                bytes *= dims[k]; /* bounded by ZR_RECORD_MAX at decode and append */
        if (bytes != stored) {
                char shape[128];

                zr_shape_format(dims, nd, shape, sizeof(shape));
                return zr_error_set(err, ZR_E_CORRUPT, "stored record %llu is %llu bytes, its "
                                    "shape %s in " ZR_SCHEMA_FILE " makes %llu",
                                    (unsigned long long)i, (unsigned long long)stored, shape,
                                    (unsigned long long)bytes);
        }
        *ret_ndim = nd;
        memcpy(ret_dims, dims, nd * sizeof(*dims));
        return 0;
}

int zr_dataset_stats(zr_dataset *ds, zr_stats *ret, zr_error *err) {
        return zr_store_stats(ds->store, ret, err);
}

int zr_dataset_sync(zr_dataset *ds, zr_error *err) {
        return zr_store_sync(ds->store, err);
}

/* The indices of the bad records from report->first_bad on, up to bad_max,
 * one record at a time: runs only on a store that failed verification. */
static size_t list_bad(zr_store *store, const zr_verify_report *report, uint64_t *bad,
                       size_t bad_max) {
        uint8_t *buf = NULL;
        uint64_t cap = 0;
        size_t nbad = 0;

        for (uint64_t i = report->first_bad;
             i < report->records && nbad < bad_max && nbad < report->bad; i++) {
                zr_loc loc;
                if (zr_store_locate(store, &i, 1, &loc, NULL) < 0) {
                        bad[nbad++] = i;
                        continue;
                }
                if (loc.logic_length > cap || !buf) {
                        free(buf);
                        cap = loc.logic_length ? loc.logic_length : 1;
                        buf = malloc(cap);
                        if (!buf)
                                break;
                }
                void *dst = buf;
                if (zr_store_gather_locs(store, &loc, 1, &dst, NULL) < 0)
                        bad[nbad++] = i;
        }
        free(buf);
        if (nbad == 0 && report->bad > 0 && bad_max > 0) /* only overlaps: the first */
                bad[nbad++] = report->first_bad;
        return nbad;
}

/* Loaderx 1.5.7's ragged layout: every record's stored size against its shape in
 * schema.msgpack, from the table alone. Adds the mismatches to *report (and, up to
 * bad_max, to bad[*nbad..]); the first one's message to *err. */
static int verify_shapes(zr_dataset *ds, zr_verify_report *report, uint64_t *bad,
                         size_t bad_max, size_t *nbad, zr_error *err) {
        uint64_t length = zr_store_length(ds->store), dims[ZR_SCHEMA_NDIM_MAX], found = 0;
        uint32_t nd;
        int r = 0;

        for (uint64_t i = 0; i < length; i++) {
                zr_loc loc;

                if (zr_store_locate(ds->store, &i, 1, &loc, NULL) < 0)
                        continue; /* the store's verify counted it */
                if (zr_dataset_record_shape(ds, i, loc.logic_length, &nd, dims,
                                            found ? NULL : err) == 0)
                        continue;
                if (found++ == 0) {
                        r = -ZR_E_CORRUPT;
                        if (report->bad == 0 || i < report->first_bad)
                                report->first_bad = i;
                }
                report->bad++;
                if (*nbad < bad_max)
                        bad[(*nbad)++] = i;
        }
        return r;
}

int zr_dataset_verify(zr_dataset *ds, zr_verify_report *ret, uint64_t *bad, size_t bad_max,
                      size_t *ret_nbad, zr_error *err) {
        zr_verify_report report = {0};
        int r;

        *ret_nbad = 0;
        if (ds->remote) {
                /* every record fetched through the disk cache; the first bad one named */
                r = zr_rdataset_verify(ds, &report, err);
                if (report.bad > 0 && bad_max > 0)
                        bad[(*ret_nbad)++] = report.first_bad;
                if (ret)
                        *ret = report;
                return r;
        }
        r = zr_store_verify(ds->store, &report, err);
        if ((r == -ZR_E_CORRUPT || r == -ZR_E_DECODE) && report.bad > 0)
                *ret_nbad = list_bad(ds->store, &report, bad, bad_max);
        if (ds->lx && (r == 0 || r == -ZR_E_CORRUPT || r == -ZR_E_DECODE)) {
                int s = verify_shapes(ds, &report, bad, bad_max, ret_nbad, err);
                if (r == 0)
                        r = s;
        }
        if (ret)
                *ret = report;
        return r;
}

int zr_dataset_install_dict(zr_dataset *ds, const void *dict, size_t dict_len,
                            zr_error *err) {
        return zr_store_install_dict(ds->store, dict, dict_len, err);
}
