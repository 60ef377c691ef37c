/* lxragged.c: a loaderx 1.5.7 ragged store served in place (lxragged.h).
 *
 * It keeps the store and the decoded schema (with the shape table) together,
 * checks every record against its shape on the way in and out, and orders the two
 * files' writes so that open can always tell what an interrupted change was and
 * finish or undo it. It does not know about sockets or the other layout.
 */
#include "dataset/lxragged.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dataset/lxfile.h"
#include "dataset/ragged.h"

struct zr_lxragged {
        int dirfd;
        zr_store *store;
        zr_lxschema schema;
        int read_only;
};

zr_store *zr_lxragged_store(zr_lxragged *d) {
        return d->store;
}

const zr_lxschema *zr_lxragged_schema(const zr_lxragged *d) {
        return &d->schema;
}

uint64_t zr_lxragged_length(const zr_lxragged *d) {
        return zr_store_length(d->store);
}

int zr_lxragged_shape(const zr_lxragged *d, uint64_t i, uint32_t *ret_ndim,
                      const uint64_t **ret_dims, zr_error *err) {
        return zr_shapes_get(d->schema.shapes, i, ret_ndim, ret_dims, err);
}

static void lx_free(zr_lxragged *d) {
        if (!d)
                return;
        zr_lxschema_done(&d->schema);
        if (d->dirfd >= 0)
                close(d->dirfd);
        free(d);
}

int zr_lxragged_close(zr_lxragged *d, zr_error *err) {
        int r;

        if (!d)
                return 0;
        r = zr_store_close(d->store, err);
        lx_free(d);
        return r;
}

int zr_lxragged_make_writable(zr_lxragged *d, int dirfd, zr_error *err) {
        if (!d->read_only)
                return zr_store_make_writable(d->store, dirfd, err);
        int nd = fcntl(dirfd, F_DUPFD_CLOEXEC, 3);
        if (nd < 0)
                return zr_error_errno(err, errno, "dataset directory: dup");
        int r = zr_store_make_writable(d->store, dirfd, err);
        if (r < 0) {
                close(nd);
                return r;
        }
        close(d->dirfd);
        d->dirfd = nd;
        d->read_only = 0;
        return 0;
}

static int lx_alloc(int dirfd, const zr_store_options *opts, zr_lxragged **ret, zr_error *err) {
        zr_lxragged *d = calloc(1, sizeof(*d));

        if (!d)
                return zr_error_errno(err, ENOMEM, "opening a loaderx 1.5.7 ragged store");
        d->read_only = opts && opts->read_only;
        d->dirfd = fcntl(dirfd, F_DUPFD_CLOEXEC, 3);
        if (d->dirfd < 0) {
                int r = zr_error_errno(err, errno, "dataset directory: dup");
                free(d);
                return r;
        }
        *ret = d;
        return 0;
}

int zr_lxragged_create(int dirfd, const char *dtype, enum zr_codec codec, const void *dict,
                       size_t dict_len, const zr_store_options *opts, zr_lxragged **ret,
                       zr_error *err) {
        zr_lxragged *d = NULL;
        struct stat st;
        int r;

        if (fstatat(dirfd, "meta.zr", &st, AT_SYMLINK_NOFOLLOW) == 0)
                return zr_error_set(err, ZR_E_EXISTS, "a store already exists here (meta.zr)");
        r = lx_alloc(dirfd, opts, &d, err);
        if (r < 0)
                return r;
        r = zr_lxschema_init(&d->schema, dtype, codec, err);
        if (r >= 0)
                r = zr_lxfile_write(d->dirfd, &d->schema, err);
        if (r < 0)
                goto fail;
        r = zr_store_create(d->dirfd, codec, dict, dict_len, opts, &d->store, err);
        if (r < 0) {
                unlinkat(d->dirfd, ZR_SCHEMA_FILE, 0);
                goto fail;
        }
        *ret = d;
        return 0;
fail:
        lx_free(d);
        return r;
}

static int cmp_u64(const void *a, const void *b) {
        uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

        return (x > y) - (x < y);
}

/* Finishes the delete noted in the schema: redone in the store if it is not there
 * yet, then the note is dropped. */
static int lx_finish_delete(zr_lxragged *d, zr_error *err) {
        uint64_t before = d->schema.pending[0], k = d->schema.npending - 1;
        uint64_t len = zr_store_length(d->store);
        int r = 0;

        if (len != before && len != before - k)
                return zr_error_set(err, ZR_E_CORRUPT, "schema.msgpack notes a delete of %" PRIu64
                                    " of %" PRIu64 " records in flight, the store has %" PRIu64,
                                    k, before, len);
        if (d->read_only)
                return zr_error_set(err, ZR_E_READONLY, "a delete was interrupted (schema.msgpack "
                                    "notes it): a writer must finish it");
        if (len == before)
                r = zr_store_delete(d->store, d->schema.pending + 1, k, err);
        if (r >= 0) {
                free(d->schema.pending);
                d->schema.pending = NULL;
                d->schema.npending = 0;
                r = zr_lxfile_write(d->dirfd, &d->schema, err);
        }
        return r;
}

/* Brings the store and the shapes into line after an interrupted change. */
static int lx_recover(zr_lxragged *d, zr_error *err) {
        uint64_t shapes = zr_shapes_count(d->schema.shapes), len = zr_store_length(d->store);
        uint64_t *tail;
        int r;

        if (d->schema.npending > 0) {
                r = lx_finish_delete(d, err);
                if (r < 0)
                        return r;
                len = zr_store_length(d->store);
        }
        if (shapes == len)
                return 0;
        if (shapes > len || d->read_only)
                return zr_error_set(err, shapes > len ? ZR_E_CORRUPT : ZR_E_READONLY,
                                    "schema.msgpack has %" PRIu64 " shapes, the store %" PRIu64
                                    " records%s", shapes, len,
                                    shapes > len ? "" : ": an append was interrupted; a writer "
                                    "must undo it");
        /* records with no shapes: an append whose schema never landed */
        tail = malloc((len - shapes) * sizeof(*tail));
        if (!tail)
                return zr_error_errno(err, ENOMEM, "undoing an interrupted append");
        for (uint64_t i = shapes; i < len; i++)
                tail[i - shapes] = i;
        r = zr_store_delete(d->store, tail, len - shapes, err);
        free(tail);
        return r;
}

int zr_lxragged_open(int dirfd, const zr_store_options *opts, zr_lxragged **ret, zr_error *err) {
        zr_lxragged *d = NULL;
        int r;

        r = lx_alloc(dirfd, opts, &d, err);
        if (r < 0)
                return r;
        r = zr_store_open(d->dirfd, opts, &d->store, err);
        if (r >= 0)
                r = zr_lxfile_read(d->dirfd, &d->schema, err);
        if (r >= 0 && zr_store_codec(d->store) != d->schema.codec)
                r = zr_error_set(err, ZR_E_SCHEMA, ZR_SCHEMA_FILE " says codec %s, the store has "
                                 "codec %s", zr_codec_name(d->schema.codec),
                                 zr_codec_name(zr_store_codec(d->store)));
        if (r >= 0)
                r = lx_recover(d, err);
        if (r < 0) {
                zr_store_close(d->store, NULL);
                lx_free(d);
                return r;
        }
        *ret = d;
        return 0;
}

int zr_lxragged_bytes(zr_lxragged *d, const uint64_t *idx, size_t n, uint64_t *ret,
                      zr_error *err) {
        uint64_t total = 0;

        for (size_t i = 0; i < n; i++) {
                const uint64_t *dims;
                uint32_t ndim;
                uint64_t b = d->schema.dtype.itemsize;
                int r = zr_shapes_get(d->schema.shapes, idx[i], &ndim, &dims, err);

                if (r < 0)
                        return r;
                for (uint32_t k = 0; k < ndim; k++)
                        b *= dims[k]; /* bounded by ZR_RECORD_MAX at decode and append */
                total += b;
        }
        *ret = total;
        return 0;
}

int zr_lxragged_gather(zr_lxragged *d, const uint64_t *idx, size_t n, void *dst,
                       uint64_t dst_size, uint64_t *ret_offsets, zr_error *err) {
        uint64_t need, *lens = NULL, at = 0;
        int r;

        r = zr_lxragged_bytes(d, idx, n, &need, err);
        if (r < 0)
                return r;
        if (need > dst_size)
                return zr_error_set(err, ZR_E_BUFFER, "%zu records of %" PRIu64 " bytes do not fit "
                                    "%" PRIu64 " bytes", n, need, dst_size);
        if (n == 0)
                return 0;
        lens = malloc(n * sizeof(*lens));
        if (!lens)
                return zr_error_errno(err, ENOMEM, "gathering %zu records", n);
        r = zr_store_gather(d->store, idx, n, dst, dst_size, lens, err);
        for (size_t i = 0; r >= 0 && i < n; i++) {
                const uint64_t *dims;
                uint32_t ndim;
                zr_error e = {0};

                zr_shapes_get(d->schema.shapes, idx[i], &ndim, &dims, NULL);
                if (zr_ragged_check_shape(dims, ndim, d->schema.dtype.itemsize, lens[i], idx[i],
                                          &e) < 0)
                        r = zr_error_set(err, ZR_E_CORRUPT, "stored %s", e.message);
                if (ret_offsets)
                        ret_offsets[i] = at;
                at += lens[i];
        }
        free(lens);
        return r;
}

int zr_lxragged_append(zr_lxragged *d, const void *data, const uint64_t *lens,
                       const uint32_t *ndims, const uint64_t *dims, uint64_t n, int level,
                       uint64_t *ret_first, zr_error *err) {
        uint64_t first, at = 0;
        int r;

        if (d->schema.npending > 0 && (r = lx_finish_delete(d, err)) < 0)
                return r;
        first = zr_store_length(d->store);
        for (uint64_t i = 0; i < n; i++) {
                if (ndims[i] < 1 || ndims[i] > ZR_SCHEMA_NDIM_MAX)
                        return zr_error_set(err, ZR_E_SCHEMA, "record %" PRIu64 ": %u dimensions, "
                                            "1..%d are allowed", i, ndims[i], ZR_SCHEMA_NDIM_MAX);
                if (lens[i] == 0)
                        return zr_error_set(err, ZR_E_SCHEMA, "record %" PRIu64 " is empty: a "
                                            "loaderx 1.5.7 store holds no empty records", i);
                r = zr_ragged_check_shape(dims + at, ndims[i], d->schema.dtype.itemsize, lens[i],
                                          i, err);
                if (r < 0)
                        return r;
                at += ndims[i];
        }
        if (n == 0) {
                if (ret_first)
                        *ret_first = first;
                return 0;
        }
        r = zr_store_append_level(d->store, level, data, lens, (size_t)n, &first, err);
        if (r < 0)
                return r;
        at = 0;
        for (uint64_t i = 0; r >= 0 && i < n; i++) {
                r = zr_shapes_append(d->schema.shapes, dims + at, ndims[i], err);
                at += ndims[i];
        }
        /* the records durable before the schema that names them: after a power
         * loss the schema never has more shapes than the store has records */
        if (r >= 0)
                r = zr_store_sync(d->store, err);
        if (r >= 0)
                r = zr_lxfile_write(d->dirfd, &d->schema, err);
        if (r < 0) {
                /* the records have no shapes on disk: take them back (or open will) */
                uint64_t *tail = malloc(n * sizeof(*tail));

                zr_shapes_truncate(d->schema.shapes, first);
                for (uint64_t i = 0; tail && i < n; i++)
                        tail[i] = first + i;
                if (tail)
                        zr_store_delete(d->store, tail, (size_t)n, NULL);
                free(tail);
                return r;
        }
        if (ret_first)
                *ret_first = first;
        return 0;
}

int zr_lxragged_delete(zr_lxragged *d, const uint64_t *idx, size_t n, zr_error *err) {
        uint64_t len, *note, k = 0;
        int r;

        if (d->schema.npending > 0 && (r = lx_finish_delete(d, err)) < 0)
                return r;
        len = zr_store_length(d->store);
        for (size_t i = 0; i < n; i++)
                if (idx[i] >= len)
                        return zr_error_set(err, ZR_E_RANGE, "delete: index %" PRIu64 " is out of "
                                            "range for %" PRIu64 " records", idx[i], len);
        if (n == 0)
                return 0;
        if (d->read_only)
                return zr_error_set(err, ZR_E_READONLY, "store was opened read-only");
        note = malloc((n + 1) * sizeof(*note));
        if (!note)
                return zr_error_errno(err, ENOMEM, "deleting %zu records", n);
        memcpy(note + 1, idx, n * sizeof(*note));
        qsort(note + 1, n, sizeof(*note), cmp_u64);
        for (size_t i = 0; i < n; i++) /* distinct, ascending */
                if (k == 0 || note[1 + i] != note[k])
                        note[1 + k++] = note[1 + i];
        note[0] = len;

        r = zr_shapes_delete(d->schema.shapes, note + 1, (size_t)k, err);
        if (r < 0) {
                free(note);
                return r;
        }
        d->schema.pending = note;
        d->schema.npending = (size_t)k + 1;
        r = zr_lxfile_write(d->dirfd, &d->schema, err);
        if (r < 0) {
                /* nothing on disk changed: take the shapes back from the file */
                zr_lxschema fresh;
                if (zr_lxfile_read(d->dirfd, &fresh, NULL) == 0) {
                        zr_lxschema_done(&d->schema);
                        d->schema = fresh;
                }
                return r;
        }
        /* on failure the note stays: the next change, or open, finishes the delete */
        return lx_finish_delete(d, err);
}

int zr_lxragged_compact(zr_lxragged *d, zr_compact_result *ret, zr_error *err) {
        return zr_store_compact(d->store, 0, ret, err);
}
