/* convert.c: ragged datasets from one layout to the other (convert.h).
 *
 * Both directions walk the source in index order, a batch at a time sized by
 * bytes, gather it with the batch gather (which gives every layout's records as
 * payloads and shapes), rewrite each record's framing (add the shape header, or
 * keep the shape for the schema) and append the batch to the destination.
 */
#include "dataset/convert.h"

#include <errno.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "dataset/batch.h"
#include "dataset/dataset.h"
#include "dataset/lxfile.h"
#include "dataset/lxragged.h"
#include "dataset/ragged.h"

typedef struct conv_buf {
        uint64_t *idx, *lens, *offs, *aux; /* per record of a batch */
        uint32_t *ndims;
        uint8_t *data, *out;
        uint64_t cap;               /* records the arrays hold */
        uint64_t bytes;             /* bytes data and out hold */
        const _Atomic int *cancel;  /* set: stop at the next batch (may be NULL) */
} conv_buf;

/* ECANCELED once *b->cancel is set: looked at before each batch, so a
 * conversion stops within one batch's work of being told to. */
static int conv_check(const conv_buf *b, zr_error *err) {
        if (b->cancel && atomic_load(b->cancel))
                return zr_error_set(err, ECANCELED, "conversion cancelled: its client left or "
                                    "the daemon is stopping");
        return 0;
}

static void conv_free(conv_buf *b) {
        free(b->idx);
        free(b->lens);
        free(b->offs);
        free(b->aux);
        free(b->ndims);
        free(b->data);
        free(b->out);
}

/* Room for n records and `bytes` bytes in data and out. */
static int conv_reserve(conv_buf *b, uint64_t n, uint64_t bytes, zr_error *err) {
        if (n > b->cap) {
                uint64_t *i = realloc(b->idx, n * 8), *l = NULL, *o = NULL, *a = NULL;
                uint32_t *d = NULL;
                if (i) b->idx = i;
                if (i && (l = realloc(b->lens, n * 8))) b->lens = l;
                if (l && (o = realloc(b->offs, n * 8))) b->offs = o;
                if (o && (a = realloc(b->aux, n * 8 * (1 + ZR_SCHEMA_NDIM_MAX)))) b->aux = a;
                if (a && (d = realloc(b->ndims, n * 4))) b->ndims = d;
                if (!d)
                        return zr_error_errno(err, ENOMEM, "converting %" PRIu64 " records", n);
                b->cap = n;
        }
        if (bytes > b->bytes) {
                uint8_t *x = realloc(b->data, bytes), *y = NULL;
                if (x) b->data = x;
                if (x && (y = realloc(b->out, bytes))) b->out = y;
                if (!y)
                        return zr_error_errno(err, ENOMEM, "converting a batch of %" PRIu64 " bytes",
                                              bytes);
                b->bytes = bytes;
        }
        return 0;
}

/* The source's dictionary, if its codec has one (*dict NULL otherwise). */
static int conv_dict(zr_store *src, void **dict, size_t *len, zr_error *err) {
        *dict = NULL;
        *len = 0;
        if (zr_store_codec(src) != ZR_CODEC_ZSTD_DICT || !zr_store_has_dict(src))
                return 0;
        return zr_store_read_dict(src, dict, len, err);
}

/* The next batch from `at`: as many records as fit ZR_CONVERT_BATCH_BYTES by their
 * stored logical size (at least one). */
static int conv_batch(zr_store *src, uint64_t at, uint64_t length, conv_buf *b, uint64_t *ret_n,
                      uint64_t *ret_bytes, zr_error *err) {
        uint64_t n = 0, bytes = 0;
        int r;

        while (at + n < length) {
                zr_loc loc;
                uint64_t i = at + n;

                r = zr_store_locate(src, &i, 1, &loc, err);
                if (r < 0)
                        return r;
                if (n > 0 && bytes + loc.logic_length > ZR_CONVERT_BATCH_BYTES)
                        break;
                if (loc.logic_length > ZR_CONVERT_BATCH_BYTES)
                        return zr_error_set(err, ZR_E_LIMIT, "record %" PRIu64 " holds %" PRIu32
                                            " bytes, more than the %" PRIu64 " a conversion "
                                            "holds at once", i, loc.logic_length,
                                            ZR_CONVERT_BATCH_BYTES);
                r = conv_reserve(b, n + 1, 0, err);
                if (r < 0)
                        return r;
                b->idx[n++] = i;
                bytes += loc.logic_length;
                if (n >= ZR_CONVERT_BATCH_RECORDS)
                        break;
        }
        *ret_n = n;
        *ret_bytes = bytes;
        return conv_reserve(b, n, bytes + 8 * (1 + ZR_SCHEMA_NDIM_MAX) * n, err);
}

/* Gathers the batch b->idx[0..n) of src into b->data: payloads at b->offs (from
 * b->data), sizes at b->lens, shapes in b->aux as the gather gives them. */
static int conv_gather(zr_dataset *src, conv_buf *b, uint64_t n, zr_error *err) {
        zr_gather g = { .ds = src, .idx = b->idx, .n = n, .offsets = b->offs,
                        .lengths = b->lens, .shapes = b->aux };
        int r = zr_gather_locate(&g, err);

        if (r >= 0 && g.bytes > b->bytes)
                r = zr_error_set(err, ZR_E_BUFFER, "converting: a batch needs %" PRIu64 " bytes, %"
                                 PRIu64 " reserved", g.bytes, b->bytes);
        if (r >= 0)
                r = zr_gather_read(&g, b->data, 0, NULL, NULL, err);
        zr_gather_release(&g);
        return r;
}

/* The ndim every record of src (of loaderx 1.5.7's layouts) has, or
 * ZR_SCHEMA_NDIM_ANY: one pass over the table and the shapes, reading no record. */
static int conv_ndim(zr_dataset *src, uint32_t *ret, zr_error *err) {
        const zr_schema *sc = zr_dataset_schema(src);
        uint64_t length = zr_dataset_length(src), dims[ZR_SCHEMA_NDIM_MAX];
        uint32_t ndim = 1, nd;
        zr_loc loc;
        int r = 0;

        if (sc->ndim != ZR_SCHEMA_NDIM_ANY) {
                *ret = sc->ndim;
                return 0;
        }
        for (uint64_t i = 0; r >= 0 && i < length && ndim != ZR_SCHEMA_NDIM_ANY; i++) {
                r = zr_store_locate(zr_dataset_store(src), &i, 1, &loc, err);
                if (r >= 0)
                        r = zr_dataset_record_shape(src, i, loc.logic_length, &nd, dims, err);
                if (r >= 0)
                        ndim = i == 0 || nd == ndim ? nd : ZR_SCHEMA_NDIM_ANY;
        }
        *ret = ndim;
        return r;
}

/* To loaderx 1.5.7's layout: the payloads into a new store, the shapes into one
 * schema written last. */
static int to_lx157(zr_dataset *src, int dst_dirfd, const zr_store_options *opts, conv_buf *b,
                    zr_error *err) {
        const zr_schema *sc = zr_dataset_schema(src);
        uint64_t length = zr_dataset_length(src), at = 0;
        zr_store *dst = NULL;
        zr_lxschema lx = {0};
        void *dict = NULL;
        size_t dict_len;
        int r;

        r = zr_lxschema_init(&lx, sc->dtype.str, sc->codec, err);
        if (r >= 0)
                r = conv_dict(zr_dataset_store(src), &dict, &dict_len, err);
        if (r >= 0)
                r = zr_store_create(dst_dirfd, sc->codec, dict, dict_len, opts, &dst, err);
        while (r >= 0 && at < length) {
                uint64_t n = 0, bytes, packed = 0, w = 0;

                r = conv_check(b, err);
                if (r >= 0)
                        r = conv_batch(zr_dataset_store(src), at, length, b, &n, &bytes, err);
                if (r >= 0)
                        r = conv_gather(src, b, n, err);
                for (uint64_t i = 0; r >= 0 && i < n; i++) {
                        /* the gather's shapes (batch.h): dims, or ndim then dims */
                        uint32_t nd = sc->ndim ? sc->ndim : (uint32_t)b->aux[w++];

                        if (b->lens[i] == 0)
                                r = zr_error_set(err, ZR_E_SCHEMA, "record %" PRIu64 " is empty: a "
                                                 "loaderx 1.5.7 store holds no empty records",
                                                 at + i);
                        if (r >= 0)
                                r = zr_shapes_append(lx.shapes, b->aux + w, nd, err);
                        w += nd;
                        if (r >= 0) { /* payloads back to back, as loaderx stores them */
                                memcpy(b->out + packed, b->data + b->offs[i], b->lens[i]);
                                packed += b->lens[i];
                        }
                }
                if (r >= 0)
                        r = zr_store_append(dst, b->out, b->lens, (size_t)n, NULL, err);
                at += n;
        }
        if (r >= 0)
                r = zr_store_sync(dst, err);
        if (r >= 0)
                r = zr_lxfile_write(dst_dirfd, &lx, err);
        if (dst) {
                int c = zr_store_close(dst, r < 0 ? NULL : err);
                if (r >= 0)
                        r = c;
        }
        zr_lxschema_done(&lx);
        free(dict);
        return r;
}

/* To zrecord's layout: each record with its shape header, appended in batches. */
static int to_zrecord(zr_dataset *src, int dst_dirfd, const zr_store_options *opts,
                      conv_buf *b, zr_schema *ret_schema, zr_error *err) {
        const zr_schema *sc = zr_dataset_schema(src);
        uint64_t length = zr_dataset_length(src), at = 0;
        zr_dataset *dst = NULL;
        zr_schema ds;
        void *dict = NULL;
        size_t dict_len;
        uint32_t ndim;
        int r;

        r = conv_ndim(src, &ndim, err);
        if (r >= 0)
                r = zr_schema_init_ragged(&ds, sc->dtype.str, ndim, sc->codec, err);
        if (r >= 0)
                r = conv_dict(zr_dataset_store(src), &dict, &dict_len, err);
        if (r >= 0)
                r = zr_dataset_create(dst_dirfd, &ds, dict, dict_len, opts, &dst, err);
        while (r >= 0 && at < length) {
                uint64_t n = 0, bytes, o = 0, w = 0;
                zr_batch batch = { .dtype = sc->dtype.str };

                r = conv_check(b, err);
                if (r >= 0)
                        r = conv_batch(zr_dataset_store(src), at, length, b, &n, &bytes, err);
                if (r >= 0)
                        r = conv_gather(src, b, n, err);
                for (uint64_t i = 0; r >= 0 && i < n; i++) {
                        uint32_t nd = sc->ndim ? sc->ndim : (uint32_t)b->aux[w++];

                        zr_ragged_header_write(b->out + o, b->aux + w, nd);
                        memcpy(b->out + o + zr_ragged_header_bytes(nd), b->data + b->offs[i],
                               b->lens[i]);
                        w += nd;
                        b->lens[i] += zr_ragged_header_bytes(nd);
                        o += b->lens[i];
                }
                batch.data = b->out;
                batch.data_len = o;
                batch.lens = b->lens;
                batch.nrecords = n;
                if (r >= 0)
                        r = zr_dataset_append(dst, &batch, NULL, err);
                at += n;
        }
        if (r >= 0 && ret_schema)
                *ret_schema = ds;
        if (dst) {
                int c = zr_dataset_close(dst, r < 0 ? NULL : err);
                if (r >= 0)
                        r = c;
        }
        free(dict);
        return r;
}

int zr_convert(zr_dataset *src, int dst_dirfd, enum zr_layout to, const zr_store_options *opts,
               const _Atomic int *cancel, uint64_t *ret_count, zr_schema *ret_schema,
               zr_error *err) {
        const zr_schema *sc = zr_dataset_schema(src);
        conv_buf b = {.cancel = cancel};
        int r;

        if (sc->kind != ZR_SCHEMA_RAGGED)
                return zr_error_set(err, ZR_E_SCHEMA, "a dense dataset has no ragged layout to "
                                    "convert (loaderx 1.5.7 opens zrecord's dense stores as they "
                                    "are)");
        if (to != ZR_LAYOUT_ZRECORD && to != ZR_LAYOUT_LX157)
                return zr_error_set(err, ZR_E_SCHEMA, "a dataset converts to zrecord's ragged "
                                    "layout or to loaderx 1.5.7's");
        if (sc->layout == to)
                return zr_error_set(err, ZR_E_SCHEMA, "the dataset is already in %s's layout",
                                    to == ZR_LAYOUT_LX157 ? "loaderx 1.5.7" : "zrecord");
        if (to == ZR_LAYOUT_LX157)
                r = to_lx157(src, dst_dirfd, opts, &b, err);
        else
                r = to_zrecord(src, dst_dirfd, opts, &b, ret_schema, err);
        if (r >= 0 && to == ZR_LAYOUT_LX157 && ret_schema) {
                r = zr_schema_init_ragged(ret_schema, sc->dtype.str, ZR_SCHEMA_NDIM_ANY,
                                          sc->codec, err);
                ret_schema->layout = ZR_LAYOUT_LX157;
        }
        if (r >= 0 && ret_count)
                *ret_count = zr_dataset_length(src);
        conv_free(&b);
        return r;
}
