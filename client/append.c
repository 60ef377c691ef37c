/* append.c: appending records to a dataset or a set, through sealed memfds.
 *
 * The records go into a memfd the library creates, fills and seals
 * (F_SEAL_WRITE | F_SEAL_SHRINK | F_SEAL_GROW) before passing it, so the daemon
 * can validate them and then use exactly what it validated (PROTOCOL.md,
 * section 7). The request states what the caller believes it writes (dtype,
 * item shape or ndim, sizes); the daemon compares that with the schema. A
 * ragged append whose `sizes` do not fit one frame becomes several APPENDs over
 * the same memfd at increasing offsets, each atomic on its own.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "zrc-private.h"

/* ---- appending --------------------------------------------------------- */

int dataset_records_bytes(zrc_dataset *d, const zrc_records *r, uint64_t *ret) {
        zrc_conn *c = d->conn;

        if (!r || (r->count > 0 && !r->data))
                return conn_fail(c, EINVAL, "no records given");
        if (d->schema.kind == ZRC_DENSE) {
                const char *dtype = r->dtype ? r->dtype : d->schema.dtype;
                const uint64_t *shape = r->dtype ? r->item_shape : d->schema.item_shape;
                uint32_t ndim = r->dtype ? r->ndim : d->schema.ndim;
                int itemsize = zrc_dtype_itemsize(dtype);
                uint64_t rb = 1;

                if (itemsize < 0)
                        return conn_fail(c, ZR_E_SCHEMA, "dtype \"%s\" is not understood", dtype);
                if (ndim > ZRC_NDIM_MAX || (ndim > 0 && !shape))
                        return conn_fail(c, EINVAL, "item shape of %u dims without its dims", ndim);
                rb = (uint64_t)itemsize;
                for (uint32_t i = 0; i < ndim; i++) {
                        if (shape[i] && rb > UINT64_MAX / shape[i])
                                return conn_fail(c, ZR_E_TOO_BIG, "record size overflows");
                        rb *= shape[i];
                }
                if (rb && r->count > UINT64_MAX / rb)
                        return conn_fail(c, ZR_E_TOO_BIG, "append size overflows");
                *ret = rb * r->count;
                return 0;
        }
        {
                uint64_t total = 0;

                if (r->count > 0 && !r->sizes)
                        return conn_fail(c, EINVAL, "ragged records without their sizes");
                for (uint64_t i = 0; i < r->count; i++) {
                        if (total > UINT64_MAX - r->sizes[i])
                                return conn_fail(c, ZR_E_TOO_BIG, "append size overflows");
                        total += r->sizes[i];
                }
                *ret = total;
                return 0;
        }
}

int dataset_put_append_fields(zrc_dataset *d, zr_wire_writer *w, const zrc_records *r,
                              uint64_t offset) {
        if (offset)
                zr_wire_put_u64(w, "offset", offset);
        if (d->schema.kind == ZRC_DENSE) {
                const char *dtype = r->dtype ? r->dtype : d->schema.dtype;
                const uint64_t *shape = r->dtype ? r->item_shape : d->schema.item_shape;
                uint32_t ndim = r->dtype ? r->ndim : d->schema.ndim;
                uint64_t rb = (uint64_t)zrc_dtype_itemsize(dtype);

                for (uint32_t i = 0; i < ndim; i++)
                        rb *= shape[i];
                zr_wire_put_str(w, "dtype", dtype);
                zr_wire_put_u64(w, "count", r->count);
                zr_wire_put_u64(w, "record_bytes", rb);
                zr_wire_put_uint_array(w, "item_shape", shape, ndim);
        } else {
                zr_wire_put_str(w, "dtype", r->dtype ? r->dtype : d->schema.dtype);
                zr_wire_put_u64s(w, "sizes", r->sizes, r->count);
                zr_wire_put_u64(w, "ndim", r->ndim ? r->ndim : d->schema.ndim);
        }
        return 0;
}

/* Sends the APPENDs for records r that lie in memfd `fd`, splitting a ragged
 * batch whose sizes do not fit one frame. */
static int append_from_memfd(zrc_dataset *d, int fd, const zrc_records *r, uint64_t *ret_first) {
        zrc_conn *c = d->conn;
        size_t chunk = d->schema.kind == ZRC_RAGGED ? conn_u64s_per_frame(c, 8) : SIZE_MAX;
        uint64_t offset = 0, first = d->length;
        bool first_set = false;
        uint64_t start = 0;

        do {
                conn_reply reply = CONN_REPLY_NULL;
                zrc_records part = *r;
                zr_wire_writer *w;
                uint64_t part_bytes = 0;
                int ret;

                if (d->schema.kind == ZRC_RAGGED) {
                        part.count = r->count - start < chunk ? r->count - start : chunk;
                        part.sizes = r->sizes + start;
                }
                w = conn_begin(c, ZR_MSG_APPEND);
                zr_wire_put_u64(w, "handle", d->handle);
                dataset_put_append_fields(d, w, &part, offset);
                if (r->level)
                        zr_wire_put_u64(w, "level", r->level);
                ret = conn_call(c, ZR_MSG_APPEND, &fd, 1, &reply);
                if (ret < 0)
                        return ret;
                if (!first_set) {
                        first = conn_get_u64(reply.root, "first");
                        first_set = true;
                }
                d->length = conn_get_u64(reply.root, "length");
                conn_reply_done(&reply);
                if (d->schema.kind == ZRC_RAGGED)
                        for (uint64_t i = 0; i < part.count; i++)
                                part_bytes += part.sizes[i];
                offset += part_bytes;
                start += part.count;
        } while (start < r->count);
        if (ret_first)
                *ret_first = first;
        return 0;
}

int zrc_dataset_append(zrc_dataset *d, const zrc_records *r, uint64_t *ret_first) {
        uint64_t bytes;
        int fd, ret;

        ret = conn_check(d->conn, 0, NULL);
        if (ret < 0)
                return ret;
        ret = dataset_records_bytes(d, r, &bytes);
        if (ret < 0)
                return ret;
        fd = conn_memfd_sealed(d->conn, "zrc-append", bytes, r->data, NULL, NULL);
        if (fd < 0)
                return fd;
        ret = append_from_memfd(d, fd, r, ret_first);
        close(fd);
        return ret;
}

int zrc_dataset_append_dense(zrc_dataset *d, const void *data, uint64_t count,
                             uint64_t *ret_first) {
        zrc_records r = { .count = count, .data = data };

        if (d->schema.kind != ZRC_DENSE)
                return conn_fail(d->conn, ZR_E_SCHEMA, "dense records for a ragged dataset");
        return zrc_dataset_append(d, &r, ret_first);
}

typedef struct ragged_fill {
        uint64_t count;
        const uint64_t *shapes;
        const void *const *payloads;
        uint32_t ndim, itemsize;
} ragged_fill;

static void ragged_fill_run(void *dst, void *userdata) {
        const ragged_fill *f = userdata;
        uint8_t *p = dst;

        for (uint64_t i = 0; i < f->count; i++)
                p += zrc_ragged_pack(p, f->shapes + i * f->ndim, f->ndim, f->itemsize,
                                     f->payloads[i]);
}

int zrc_dataset_append_ragged(zrc_dataset *d, uint64_t count, const uint64_t *shapes,
                              const void *const *payloads, uint64_t *ret_first) {
        zrc_conn *c = d->conn;
        ragged_fill f = { .count = count, .shapes = shapes, .payloads = payloads,
                          .ndim = d->schema.ndim };
        uint64_t *sizes = NULL, total = 0;
        int itemsize, fd, r;

        r = conn_check(c, 0, NULL);
        if (r < 0)
                return r;
        if (d->schema.kind != ZRC_RAGGED)
                return conn_fail(c, ZR_E_SCHEMA, "ragged records for a dense dataset");
        if (d->schema.ndim == 0)
                return conn_fail(c, EINVAL, "the records of this dataset each have their own "
                                 "ndim: pack them with zrc_ragged_pack() for "
                                 "zrc_dataset_append()");
        if (count > 0 && (!shapes || !payloads))
                return conn_fail(c, EINVAL, "ragged records without shapes or payloads");
        itemsize = zrc_dtype_itemsize(d->schema.dtype);
        if (itemsize < 0)
                return conn_fail(c, ZR_E_SCHEMA, "dtype \"%s\" is not understood", d->schema.dtype);
        f.itemsize = (uint32_t)itemsize;
        if (count > SIZE_MAX / sizeof(uint64_t))
                return conn_fail(c, ENOMEM, "too many records");
        sizes = malloc((count ? count : 1) * sizeof(uint64_t));
        if (!sizes)
                return conn_fail(c, ENOMEM, "out of memory");
        for (uint64_t i = 0; i < count; i++) {
                sizes[i] = zrc_ragged_record_bytes(shapes + i * f.ndim, f.ndim, f.itemsize);
                if (sizes[i] == UINT64_MAX || total > UINT64_MAX - sizes[i]) {
                        free(sizes);
                        return conn_fail(c, ZR_E_TOO_BIG, "record %" PRIu64 " is too large", i);
                }
                if (sizes[i] > 8 * (1 + (uint64_t)f.ndim) && !payloads[i]) {
                        free(sizes);
                        return conn_fail(c, EINVAL, "record %" PRIu64 " has no payload", i);
                }
                total += sizes[i];
        }
        fd = conn_memfd_sealed(c, "zrc-append", total, NULL, ragged_fill_run, &f);
        if (fd < 0) {
                free(sizes);
                return fd;
        }
        {
                zrc_records rec = { .count = count, .sizes = sizes, .data = sizes };

                r = append_from_memfd(d, fd, &rec, ret_first);
        }
        close(fd);
        free(sizes);
        return r;
}

