/* req-data.c: requests that move records: BUFFER_OPEN, READ, APPEND, DELETE.
 *
 * Each validates its fields and handles on the loop thread, takes references
 * on what its job will touch (registry entries, the buffer), and runs the
 * blocking part on the pool under the dataset's lock (shared for READ and an
 * APPEND to one dataset; exclusive for DELETE, an APPEND through a set and one
 * to a store of loaderx 1.5.7's ragged layout, dataset.h), so
 * a client that vanishes mid-request frees nothing a worker still uses. Records land straight in shared memory: READ gathers into the client's
 * buffer with the batch gather the loaders use (dataset/batch.h), APPEND reads
 * the client's sealed memfd. Nothing here knows the store format; the dataset
 * layer validates every record against the schema.
 */
#include <endian.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "dataset/batch.h"
#include "dataset/ragged.h"
#include "server/request.h"
#include "store/store.h"

static int get_handle_field(zr_request *rq, const char *field, uint32_t *ret) {
        zr_wire_error werr = {0};
        if (zr_wire_get_u32(rq->root, field, ret, &werr) < 0)
                return zr_request_fail(rq, ZR_E_PROTO, "%s", werr.message);
        return 0;
}

/* Working memory of a READ per record, beside a ragged read's reply arrays:
 * its index (8), the batch gather's tables (dataset/batch.c: locations and
 * places, 24; through the cache, 72 more), rounded up. */
#define READ_WORK_PER_RECORD 128
/* ... of an APPEND: the record's table entry, its place and size (48) */
#define APPEND_WORK_PER_RECORD 48
/* ... of a DELETE: the indices sorted, the tail's entries and indices (64) */
#define DELETE_WORK_PER_INDEX 64

/* A copy of a u64s field, aligned, owned by the caller (NULL when empty). */
static int get_indices(zr_request *rq, const msgpack_object *map, const char *field,
                       uint64_t **ret, size_t *ret_n) {
        zr_wire_error werr = {0};
        const uint8_t *p;
        size_t n;
        if (zr_wire_get_u64s(map, field, &p, &n, &werr) < 0)
                return zr_request_fail(rq, ZR_E_PROTO, "%s", werr.message);
        uint64_t *v = malloc((n ? n : 1) * sizeof(uint64_t));
        if (!v)
                return zr_request_fail(rq, ENOMEM, "no memory for %zu indices", n);
        for (size_t i = 0; i < n; i++)
                v[i] = zr_wire_u64_at(p, i);
        *ret = v;
        *ret_n = n;
        return 0;
}

/* The first index >= length, as ZR_E_RANGE with `index`. */
static int check_range(zr_request *rq, const uint64_t *idx, size_t n, uint64_t length) {
        for (size_t i = 0; i < n; i++)
                if (idx[i] >= length) {
                        rq->has_index = true;
                        rq->index = idx[i];
                        return zr_request_fail(rq, ZR_E_RANGE, "index %llu (position %zu) is out "
                                               "of range: the length is %llu",
                                               (unsigned long long)idx[i], i,
                                               (unsigned long long)length);
                }
        return 0;
}

/* ---- BUFFER_OPEN --------------------------------------------------------- */

typedef struct buffer_state {
        zr_buffer *buffer;
        uint64_t reserved;
} buffer_state;

static void buffer_state_free(void *p) {
        buffer_state *st = p;
        zr_buffer_unref(st->buffer);
        free(st);
}

/* A buffer's pages are faulted in when it is made, so that a READ into it
 * takes no faults; beyond this many bytes only the first are, the rest by the
 * reads that fill them: BUFFER_OPEN's work stays bounded (a 4 GiB buffer took
 * seconds to fault in), whatever size the client asks for. */
#define BUFFER_PREFAULT_MAX ((size_t)256 << 20)

static void buffer_run(zr_job *job) {
        zr_request *rq = (zr_request *)job;
        buffer_state *st = rq->state;
        zr_shm *shm = &st->buffer->shm;
        if (st->reserved <= BUFFER_PREFAULT_MAX) {
                rq->result = zr_shm_create("zrecord-buffer", st->reserved, shm, &rq->err);
                return;
        }
        rq->result = zr_shm_create_flags("zrecord-buffer", st->reserved, ZR_SHM_LAZY, shm,
                                         &rq->err);
        if (rq->result == 0)
                zr_shm_prefault(shm, BUFFER_PREFAULT_MAX);
}

static void buffer_done(zr_job *job) {
        zr_request *rq = (zr_request *)job;
        buffer_state *st = rq->state;
        int r = rq->result;
        if (zr_request_orphaned(rq)) {
                zr_request_complete(rq, 0);
                return;
        }
        if (r < 0) {
                zr_request_shm_release(rq, st->reserved);
                zr_request_complete(rq, r);
                return;
        }
        zr_handle h = {.type = ZR_HANDLE_BUFFER, .buffer = st->buffer};
        int id = zr_request_add_handle(rq, &h);
        if (id < 0) {
                zr_request_shm_release(rq, st->reserved);
                zr_request_complete(rq, id);
                return;
        }
        st->buffer = NULL; /* the handle's now */
        zr_buffer *b = h.buffer;
        int fd = b->shm.fd;
        b->shm.fd = -1; /* the descriptor travels with the reply; the mapping stays */
        zr_wire_writer w;
        zr_reply_begin(rq, &w);
        zr_wire_put_u64(&w, "buffer", (uint64_t)id);
        zr_wire_put_u64(&w, "bytes", b->shm.size);
        zr_request_complete(rq, zr_reply_send(rq, &w, &fd, 1));
}

int zr_handle_buffer_open(zr_request *rq) {
        zr_wire_error werr = {0};
        uint64_t bytes;
        if (zr_wire_get_u64(rq->root, "bytes", &bytes, &werr) < 0)
                return zr_request_fail(rq, ZR_E_PROTO, "%s", werr.message);
        if (bytes == 0)
                return zr_request_fail(rq, ZR_E_PROTO, "field 'bytes': must be at least 1");
        uint64_t size = bytes > SIZE_MAX - ZR_SHM_ALIGN ? 0 : zr_shm_round((size_t)bytes);
        if (size == 0)
                return zr_request_fail(rq, ZR_E_LIMIT, "a buffer of %llu bytes is over any limit",
                                       (unsigned long long)bytes);
        int r = zr_request_shm_reserve(rq, size);
        if (r < 0)
                return r;
        buffer_state *st = zr_request_state(rq, sizeof(*st), buffer_state_free);
        if (st)
                st->buffer = calloc(1, sizeof(zr_buffer));
        if (!st || !st->buffer) {
                zr_request_shm_release(rq, size);
                return zr_request_fail(rq, ENOMEM, "no memory for a buffer");
        }
        st->buffer->refs = 1;
        st->buffer->shm.fd = -1;
        st->reserved = size;
        return zr_request_submit(rq, buffer_run, buffer_done);
}

/* ---- READ ---------------------------------------------------------------- */

typedef struct read_state {
        zr_entry *entry;
        zr_buffer *buffer;
        uint64_t *idx;
        size_t n;
        uint64_t offset;
        bool ragged;
        uint64_t record_bytes, bytes;
        uint64_t *offsets, *lengths, *shapes; /* ragged */
        uint64_t shape_words;                 /* ragged: of shapes, after the gather */
} read_state;

static void read_state_free(void *p) {
        read_state *st = p;
        zr_entry_unref(st->entry);
        zr_buffer_unref(st->buffer);
        free(st->idx);
        free(st->offsets);
        free(st->lengths);
        free(st->shapes);
        free(st);
}

/* Gathers the batch into the buffer at st->offset, under the dataset's lock. */
static int read_gather(zr_request *rq, read_state *st) {
        uint8_t *base = st->buffer->shm.data;
        uint64_t room = st->buffer->shm.size - st->offset;
        zr_gather g = { .ds = st->entry->ds, .idx = st->idx, .n = st->n,
                        .offsets = st->offsets, .lengths = st->lengths, .shapes = st->shapes };
        int r = check_range(rq, st->idx, st->n, zr_dataset_length(st->entry->ds));

        if (r == 0)
                r = zr_gather_locate(&g, &rq->err);
        if (r == 0 && g.bytes > room) {
                rq->has_needed = true;
                rq->needed = g.bytes;
                if (st->ragged)
                        r = zr_request_fail(rq, ZR_E_BUFFER, "%zu records need %llu bytes from "
                                            "offset %llu; the buffer has %llu", st->n,
                                            (unsigned long long)g.bytes,
                                            (unsigned long long)st->offset,
                                            (unsigned long long)room);
                else
                        r = zr_request_fail(rq, ZR_E_BUFFER, "%zu records of %llu bytes need "
                                            "%llu bytes from offset %llu; the buffer has %llu",
                                            st->n, (unsigned long long)st->record_bytes,
                                            (unsigned long long)g.bytes,
                                            (unsigned long long)st->offset,
                                            (unsigned long long)room);
        }
        if (r == 0) {
                /* not read ahead: large records not resident are read with
                 * pread, not faulted in through the mappings a page at a time */
                g.cold = zr_gather_mostly_cold(&g);
                r = zr_gather_read(&g, base + st->offset, st->offset, NULL, NULL, &rq->err);
        }
        if (r == 0) {
                st->bytes = g.bytes;
                st->shape_words = g.shape_words;
        }
        zr_gather_release(&g);
        return r;
}

static void read_run(zr_job *job) {
        zr_request *rq = (zr_request *)job;
        read_state *st = rq->state;

        zr_dataset_lock(st->entry->ds, false);
        if (zr_store_stale(zr_dataset_store(st->entry->ds)))
                /* changed on disk under this read-only instance (store.h) */
                rq->result = zr_request_fail(rq, ZR_E_STALE, "the store changed on disk since "
                                             "the daemon opened it (a program that does not "
                                             "honour its lock wrote it): open it again");
        else
                rq->result = read_gather(rq, st);
        zr_dataset_unlock(st->entry->ds);
}

static void read_done(zr_job *job) {
        zr_request *rq = (zr_request *)job;
        read_state *st = rq->state;
        int r = rq->result;
        if (r == 0) {
                zr_server *srv = zr_request_server(rq);
                srv->counters.gathers++;
                srv->counters.bytes += st->bytes;
        }
        if (r == 0 && !zr_request_orphaned(rq)) {
                zr_wire_writer w;
                zr_reply_begin(rq, &w);
                zr_wire_put_u64(&w, "count", st->n);
                zr_wire_put_u64(&w, "offset", st->offset);
                zr_wire_put_u64(&w, "bytes", st->bytes);
                if (!st->ragged) {
                        zr_wire_put_u64(&w, "record_bytes", st->record_bytes);
                } else {
                        zr_wire_put_u64s(&w, "offsets", st->offsets, st->n);
                        zr_wire_put_u64s(&w, "lengths", st->lengths, st->n);
                        zr_wire_put_u64s(&w, "shapes", st->shapes, st->shape_words);
                }
                r = zr_reply_send(rq, &w, NULL, 0);
        }
        zr_request_complete(rq, r);
}

/* Room a ragged READ reply needs besides its arrays: keys, headers, counts. */
#define READ_REPLY_OVERHEAD 256

int zr_handle_read(zr_request *rq) {
        zr_wire_error werr = {0};
        zr_handle *h = rq->handle;
        uint32_t bid;
        uint64_t offset = 0;
        int r;

        if ((r = get_handle_field(rq, "buffer", &bid)) < 0)
                return r;
        if (zr_wire_find(rq->root, "offset") &&
            zr_wire_get_u64(rq->root, "offset", &offset, &werr) < 0)
                return zr_request_fail(rq, ZR_E_PROTO, "%s", werr.message);
        zr_handle *b = zr_request_handle(rq, "buffer", bid, ZR_HANDLE_BIT(ZR_HANDLE_BUFFER));
        if (!b)
                return -ZR_E_NO_HANDLE;
        if (offset % ZR_RECORD_ALIGN != 0 || offset > b->buffer->shm.size)
                return zr_request_fail(rq, EINVAL, "field 'offset': %llu is %s",
                                       (unsigned long long)offset,
                                       offset % ZR_RECORD_ALIGN ? "not a multiple of 8"
                                                                : "past the end of the buffer");
        const zr_schema *schema = zr_dataset_schema(h->entry->ds);
        read_state *st = zr_request_state(rq, sizeof(*st), read_state_free);
        if (!st)
                return -ENOMEM;
        /* its working memory, charged before any of it is allocated: the
         * indices, the gather's tables, a ragged read's offsets, lengths and
         * shapes (their count is bounded by the frame, their size here) */
        {
                zr_wire_error ierr = {0};
                const uint8_t *p;
                size_t n;
                if (zr_wire_get_u64s(rq->root, "indices", &p, &n, &ierr) < 0)
                        return zr_request_fail(rq, ZR_E_PROTO, "%s", ierr.message);
                uint64_t per = READ_WORK_PER_RECORD;
                if (schema->kind == ZR_SCHEMA_RAGGED)
                        per += 8 * (2 + zr_ragged_shape_words_max(schema, 1));
                if ((r = zr_request_work_charge(rq, (uint64_t)n * per, "a READ")) < 0)
                        return r;
        }
        r = get_indices(rq, rq->root, "indices", &st->idx, &st->n);
        if (r < 0)
                return r;
        st->offset = offset;
        st->ragged = schema->kind == ZR_SCHEMA_RAGGED;
        st->record_bytes = zr_schema_item_bytes(schema);
        if (st->ragged) {
                uint64_t per = 8 * (2 + zr_ragged_shape_words_max(schema, 1));
                if (st->n > (zr_request_frame_max(rq) - READ_REPLY_OVERHEAD) / per)
                        return zr_request_fail(rq, ZR_E_LIMIT, "a ragged read of %zu records "
                                               "needs a reply of %llu bytes, over the frame limit "
                                               "of %u: split the read", st->n,
                                               (unsigned long long)(st->n * per),
                                               zr_request_frame_max(rq));
                st->offsets = calloc(st->n ? st->n : 1, sizeof(uint64_t));
                st->lengths = calloc(st->n ? st->n : 1, sizeof(uint64_t));
                uint64_t words = zr_ragged_shape_words_max(schema, st->n);
                st->shapes = calloc(words ? words : 1, sizeof(uint64_t));
                if (!st->offsets || !st->lengths || !st->shapes)
                        return zr_request_fail(rq, ENOMEM, "no memory");
        }
        st->entry = zr_entry_ref(h->entry);
        st->buffer = zr_buffer_ref(b->buffer);
        return zr_request_submit(rq, read_run, read_done);
}

/* ---- APPEND -------------------------------------------------------------- */

typedef struct append_part {
        zr_entry *entry;             /* one reference */
        char name[ZR_STREAM_NAME_MAX + 1];
        uint64_t offset, bytes, count;
        char dtype[ZR_DTYPE_STR_MAX + 1];
        uint64_t shape[ZR_SCHEMA_NDIM_MAX + 1]; /* dense: (count, *item_shape) */
        uint32_t shape_ndim;
        uint64_t *sizes;             /* ragged */
        uint64_t *items;             /* `lengths`: each record's items, the memfd its values */
        uint64_t woven;              /* `lengths`: the records' bytes, headers made here */
        uint8_t *records;            /* `lengths`: the records, made by append_run() */
        zr_batch batch;
} append_part;

typedef struct append_state {
        append_part parts[ZR_STREAMS_MAX];
        uint32_t n;
        bool set;
        zr_shm data;
        uint64_t first, count, length;
} append_state;

static void append_state_free(void *p) {
        append_state *st = p;
        for (uint32_t i = 0; i < st->n; i++) {
                zr_entry_unref(st->parts[i].entry);
                free(st->parts[i].sizes);
                free(st->parts[i].items);
                free(st->parts[i].records);
        }
        zr_shm_release(&st->data);
        free(st);
}

/* A ragged stream's `lengths` (feature "append_lengths"): one-dimensional
 * records given as their items' counts, the memfd holding their values back
 * to back; the daemon makes each record's shape header (append_run()). */
static int parse_lengths(zr_request *rq, const msgpack_object *map, append_part *p,
                         const char *where) {
        const zr_schema *schema = zr_dataset_schema(p->entry->ds);
        uint64_t item = schema->dtype.itemsize, hdr = zr_ragged_header_bytes(1);
        size_t n;

        if (!zr_request_has_feature(rq, ZR_FEATURE_APPEND_LENGTHS))
                return zr_request_fail(rq, ZR_E_UNKNOWN, "%s: field 'lengths': the "
                                       "\"append_lengths\" feature is not in force on this "
                                       "connection", where);
        if (zr_wire_find(map, "sizes"))
                return zr_request_fail(rq, ZR_E_PROTO, "%s: 'sizes' and 'lengths' both given",
                                       where);
        if (schema->ndim != 1 && schema->ndim != ZR_SCHEMA_NDIM_ANY)
                return zr_request_fail(rq, ZR_E_SCHEMA, "%s: 'lengths' gives records of one "
                                       "dimension, the schema's have %u", where, schema->ndim);
        if (get_indices(rq, map, "lengths", &p->items, &n) < 0)
                return -rq->err.code;
        if (!(p->sizes = malloc((n ? n : 1) * sizeof(uint64_t))))
                return zr_request_fail(rq, ENOMEM, "no memory for %zu records", n);
        p->count = n;
        p->bytes = p->woven = 0;
        for (size_t i = 0; i < n; i++) {
                uint64_t b;
                if (__builtin_mul_overflow(p->items[i], item, &b) || b > ZR_RECORD_MAX)
                        return zr_request_fail(rq, ZR_E_TOO_BIG, "%s: record %zu: %llu items, "
                                               "over 2^31 bytes", where, i,
                                               (unsigned long long)p->items[i]);
                p->sizes[i] = hdr + b;
                if (__builtin_add_overflow(p->bytes, b, &p->bytes) ||
                    __builtin_add_overflow(p->woven, p->sizes[i], &p->woven))
                        return zr_request_fail(rq, ZR_E_TOO_BIG, "%s: lengths overflow", where);
        }
        p->batch.lens = p->sizes;
        p->batch.nrecords = n;
        p->batch.data_len = p->woven;
        return 0;
}

/* `lengths`: the records of part p, each its shape header (ndim 1, its
 * items) then its values, from the memfd's values at src. */
static int weave_records(append_part *p, const uint8_t *src, zr_error *err) {
        uint8_t *out;

        if (p->woven > SIZE_MAX || !(out = malloc(p->woven ? (size_t)p->woven : 1)))
                return zr_error_errno(err, ENOMEM, "appending %llu bytes of records",
                                      (unsigned long long)p->woven);
        p->records = out;
        for (uint64_t i = 0; i < p->count; i++) {
                uint64_t hdr[2] = { htole64(1), htole64(p->items[i]) };
                uint64_t b = p->sizes[i] - sizeof(hdr);
                memcpy(out, hdr, sizeof(hdr));
                memcpy(out + sizeof(hdr), src, b);
                out += sizeof(hdr) + b;
                src += b;
        }
        return 0;
}

/* Reads one stream's fields (the request root, or an entry of 'streams'). */
static int parse_part(zr_request *rq, const msgpack_object *map, append_part *p) {
        zr_wire_error werr = {0};
        const zr_schema *schema = zr_dataset_schema(p->entry->ds);
        const char *where = p->name[0] ? p->name : "append";

        if (zr_wire_find(map, "offset") && zr_wire_get_u64(map, "offset", &p->offset, &werr) < 0)
                return zr_request_fail(rq, ZR_E_PROTO, "%s: %s", where, werr.message);
        if (!zr_wire_find(map, "dtype"))
                return zr_request_fail(rq, ZR_E_PROTO, "%s: field 'dtype': missing", where);
        const char *dt;
        size_t dtlen;
        if (zr_wire_get_str(map, "dtype", &dt, &dtlen, &werr) < 0)
                return zr_request_fail(rq, ZR_E_PROTO, "%s: %s", where, werr.message);
        if (dtlen > ZR_DTYPE_STR_MAX || memchr(dt, 0, dtlen))
                return zr_request_fail(rq, ZR_E_SCHEMA, "%s: dtype '%.*s' is not a dtype", where,
                                       (int)(dtlen > 16 ? 16 : dtlen), dt);
        memcpy(p->dtype, dt, dtlen);
        p->dtype[dtlen] = 0;
        p->batch.dtype = p->dtype;

        if (schema->kind == ZR_SCHEMA_DENSE) {
                uint64_t record_bytes;
                const msgpack_object *items;
                uint32_t n;
                if (zr_wire_get_u64(map, "count", &p->count, &werr) < 0 ||
                    zr_wire_get_u64(map, "record_bytes", &record_bytes, &werr) < 0 ||
                    zr_wire_get_array(map, "item_shape", &items, &n, &werr) < 0)
                        return zr_request_fail(rq, ZR_E_PROTO, "%s (a dense store): %s", where,
                                               werr.message);
                uint64_t item = zr_schema_item_bytes(schema);
                if (record_bytes != item)
                        return zr_request_fail(rq, ZR_E_SCHEMA, "%s: record_bytes %llu, the "
                                               "schema's records are %llu bytes", where,
                                               (unsigned long long)record_bytes,
                                               (unsigned long long)item);
                if (n > ZR_SCHEMA_NDIM_MAX)
                        return zr_request_fail(rq, ZR_E_SCHEMA, "%s: item_shape has %u "
                                               "dimensions", where, n);
                p->shape[0] = p->count;
                for (uint32_t i = 0; i < n; i++)
                        p->shape[1 + i] = items[i].via.u64;
                p->shape_ndim = 1 + n;
                if (p->count && record_bytes > UINT64_MAX / p->count)
                        return zr_request_fail(rq, ZR_E_TOO_BIG, "%s: %llu records of %llu bytes",
                                               where, (unsigned long long)p->count,
                                               (unsigned long long)record_bytes);
                p->bytes = p->count * record_bytes;
                p->batch.shape = p->shape;
                p->batch.ndim = p->shape_ndim;
        } else {
                uint32_t ndim;
                if (zr_wire_get_u32(map, "ndim", &ndim, &werr) < 0)
                        return zr_request_fail(rq, ZR_E_PROTO, "%s (a ragged store): %s", where,
                                               werr.message);
                if (ndim != schema->ndim)
                        return zr_request_fail(rq, ZR_E_SCHEMA, "%s: ndim %u, the schema's is %u",
                                               where, ndim, schema->ndim);
                size_t n;
                if (zr_wire_find(map, "lengths"))
                        return parse_lengths(rq, map, p, where);
                if (get_indices(rq, map, "sizes", &p->sizes, &n) < 0)
                        return -rq->err.code;
                p->count = n;
                p->bytes = 0;
                for (size_t i = 0; i < n; i++)
                        if (__builtin_add_overflow(p->bytes, p->sizes[i], &p->bytes))
                                return zr_request_fail(rq, ZR_E_TOO_BIG, "%s: sizes overflow",
                                                       where);
                p->batch.lens = p->sizes;
                p->batch.nrecords = n;
        }
        p->batch.data_len = p->bytes;
        return 0;
}

static void append_run(zr_job *job) {
        zr_request *rq = (zr_request *)job;
        append_state *st = rq->state;
        zr_entry *entries[ZR_STREAMS_MAX];
        uint64_t firsts[ZR_STREAMS_MAX];
        int r = 0;

        if (!st->set && st->parts[0].items && zr_dataset_takes_values(st->parts[0].entry->ds)) {
                /* a raw store takes the headers beside the values: no weave */
                append_part *p = &st->parts[0];
                const uint8_t *values = p->bytes ? (const uint8_t *)st->data.data + p->offset
                                                 : NULL;
                r = zr_mutation_begin(rq, &p->entry, 1,
                                      zr_dataset_append_exclusive(p->entry->ds));
                if (r == 0)
                        r = zr_dataset_append_values(p->entry->ds, p->dtype, values, p->items,
                                                     p->sizes, p->count, &st->first, &rq->err);
                st->length = zr_dataset_length(p->entry->ds);
                zr_mutation_end(rq, r == 0 && p->count);
                st->count = p->count;
                rq->result = r;
                return;
        }
        for (uint32_t i = 0; i < st->n; i++) {
                append_part *p = &st->parts[i];
                entries[i] = p->entry;
                p->batch.data = p->bytes ? (const uint8_t *)st->data.data + p->offset : NULL;
                if (p->items && r == 0) {
                        r = weave_records(p, p->batch.data, &rq->err);
                        p->batch.data = p->records;
                }
        }
        if (r < 0) {
                rq->result = r;
                return;
        }
        if (!st->set) {
                append_part *p = &st->parts[0];
                r = zr_mutation_begin(rq, &p->entry, 1,
                                      zr_dataset_append_exclusive(p->entry->ds));
                if (r == 0)
                        r = zr_dataset_append(p->entry->ds, &p->batch, &st->first, &rq->err);
                st->length = zr_dataset_length(p->entry->ds);
                zr_mutation_end(rq, r == 0 && p->count);
                st->count = p->count;
                rq->result = r;
                return;
        }
        r = zr_mutation_begin(rq, entries, st->n, true);
        /* Validate every stream before writing any (PROTOCOL.md, APPEND). */
        for (uint32_t i = 0; i < st->n && r == 0; i++) {
                uint64_t n;
                zr_error err = {0};
                r = zr_dataset_check(st->parts[i].entry->ds, &st->parts[i].batch, &n, &err);
                if (r < 0)
                        zr_request_fail(rq, -r, "stream '%s': %s", st->parts[i].name, err.message);
        }
        for (uint32_t i = 1; i < st->n && r == 0; i++)
                if (st->parts[i].count != st->parts[0].count)
                        r = zr_request_fail(rq, ZR_E_MISALIGNED, "stream '%s' has %llu records, "
                                            "stream '%s' %llu", st->parts[0].name,
                                            (unsigned long long)st->parts[0].count,
                                            st->parts[i].name,
                                            (unsigned long long)st->parts[i].count);
        uint32_t done = 0;
        for (; done < st->n && r == 0; done++) {
                zr_error err = {0};
                r = zr_dataset_append(st->parts[done].entry->ds, &st->parts[done].batch,
                                      &firsts[done], &err);
                if (r < 0) {
                        zr_request_fail(rq, -r, "stream '%s': %s", st->parts[done].name,
                                        err.message);
                        break;
                }
        }
        if (r < 0) {
                /* Cut the streams already appended back to their old length: deleting
                 * the tail indices by swap-last is a truncation. */
                uint64_t count = st->parts[0].count;
                uint64_t *tail = count ? malloc(count * sizeof(uint64_t)) : NULL;
                for (uint32_t i = 0; i < done && tail; i++) {
                        for (uint64_t k = 0; k < count; k++)
                                tail[k] = firsts[i] + k;
                        zr_dataset_delete(st->parts[i].entry->ds, tail, count, NULL);
                }
                free(tail);
        } else {
                st->first = firsts[0];
                st->count = st->parts[0].count;
                st->length = zr_dataset_length(st->parts[0].entry->ds);
        }
        zr_mutation_end(rq, done);
        rq->result = r;
}

static void append_reply(zr_request *rq, zr_wire_writer *w) {
        append_state *st = rq->state;
        zr_wire_put_u64(w, "first", st->first);
        zr_wire_put_u64(w, "count", st->count);
        zr_wire_put_u64(w, "length", st->length);
}

int zr_handle_append(zr_request *rq) {
        zr_wire_error werr = {0};
        zr_handle *h = rq->handle;
        int r;

        append_state *st = zr_request_state(rq, sizeof(*st), append_state_free);
        if (!st)
                return -ENOMEM;
        st->data.fd = -1;
        uint32_t level = 0;
        if (zr_wire_find(rq->root, "level")) {
                if (zr_wire_get_u32(rq->root, "level", &level, &werr) < 0)
                        return zr_request_fail(rq, ZR_E_PROTO, "append: %s", werr.message);
                if (level < ZR_LEVEL_MIN || level > ZR_LEVEL_MAX)
                        return zr_request_fail(rq, EINVAL, "append: level %u: a level is %d to "
                                               "%d (zstd's scale)", level, ZR_LEVEL_MIN,
                                               ZR_LEVEL_MAX);
        }
        if (h->type == ZR_HANDLE_DATASET) {
                st->n = 1;
                st->parts[0].entry = zr_entry_ref(h->entry);
                r = parse_part(rq, rq->root, &st->parts[0]);
                if (r < 0)
                        return r;
        } else {
                zr_set *set = h->set;
                const msgpack_object *items;
                uint32_t n;
                st->set = true;
                if (!zr_wire_find(rq->root, "streams"))
                        return zr_request_fail(rq, ZR_E_PROTO, "append to a set: field 'streams': "
                                               "missing");
                if (zr_wire_get_array(rq->root, "streams", &items, &n, &werr) < 0)
                        return zr_request_fail(rq, ZR_E_PROTO, "%s", werr.message);
                if (n != set->n)
                        return zr_request_fail(rq, ZR_E_MISALIGNED, "the set has %u streams, the "
                                               "append gives %u", set->n, n);
                for (uint32_t i = 0; i < n; i++) {
                        const char *name;
                        size_t len;
                        if (zr_wire_get_str(&items[i], "name", &name, &len, &werr) < 0)
                                return zr_request_fail(rq, ZR_E_PROTO, "%s", werr.message);
                        uint32_t k = 0;
                        while (k < set->n && !(strlen(set->names[k]) == len &&
                                               memcmp(set->names[k], name, len) == 0))
                                k++;
                        if (k == set->n)
                                return zr_request_fail(rq, ZR_E_MISALIGNED, "'%.*s' is not a "
                                                       "stream of the set",
                                                       (int)(len > 64 ? 64 : len), name);
                        for (uint32_t j = 0; j < st->n; j++)
                                if (st->parts[j].entry == set->entries[k])
                                        return zr_request_fail(rq, ZR_E_MISALIGNED, "stream '%s' "
                                                               "appears twice", set->names[k]);
                        append_part *p = &st->parts[st->n++];
                        p->entry = zr_entry_ref(set->entries[k]);
                        snprintf(p->name, sizeof(p->name), "%s", set->names[k]);
                        r = parse_part(rq, &items[i], p);
                        if (r < 0)
                                return r;
                }
        }
        for (uint32_t i = 0; i < st->n; i++)
                st->parts[i].batch.level = (int)level;
        /* its working memory: each record's table entry and place, the
         * batch's arrays (a dense count is bounded only by the memfd) */
        uint64_t records = 0, woven = 0, work;
        for (uint32_t i = 0; i < st->n; i++) {
                records = __builtin_add_overflow(records, st->parts[i].count, &records)
                                  ? UINT64_MAX : records;
                /* `lengths`: the records made from the values (a raw store
                 * takes them apart: only their headers) */
                if (st->parts[i].items &&
                    __builtin_add_overflow(woven, !st->set && zr_dataset_takes_values(
                                                   st->parts[i].entry->ds)
                                                   ? 16 * st->parts[i].count
                                                   : st->parts[i].woven, &woven))
                        woven = UINT64_MAX;
        }
        work = records > UINT64_MAX / APPEND_WORK_PER_RECORD ? UINT64_MAX
                                                             : records * APPEND_WORK_PER_RECORD;
        if (__builtin_add_overflow(work, woven, &work))
                work = UINT64_MAX;
        if ((r = zr_request_work_charge(rq, work, "an APPEND")) < 0)
                return r;
        uint64_t need = 0;
        for (uint32_t i = 0; i < st->n; i++) {
                uint64_t end;
                if (__builtin_add_overflow(st->parts[i].offset, st->parts[i].bytes, &end))
                        return zr_request_fail(rq, ZR_E_BUFFER, "offset + records overflow");
                if (end > need)
                        need = end;
        }
        if (need > SIZE_MAX)
                return zr_request_fail(rq, ZR_E_BUFFER, "the records described do not fit memory");
        r = zr_shm_map_sealed(zr_request_take_fd(rq, 0), (size_t)need, &st->data, &rq->err);
        if (r < 0) {
                if (-r == ZR_E_BUFFER) {
                        rq->has_needed = true;
                        rq->needed = need;
                }
                return r;
        }
        return zr_request_submit_reply(rq, append_run, append_reply);
}

/* ---- DELETE -------------------------------------------------------------- */

typedef struct delete_state {
        zr_entry *entries[ZR_STREAMS_MAX];
        uint32_t n;
        uint64_t *idx;
        size_t count;
        uint64_t length;
} delete_state;

static void delete_state_free(void *p) {
        delete_state *st = p;
        for (uint32_t i = 0; i < st->n; i++)
                zr_entry_unref(st->entries[i]);
        free(st->idx);
        free(st);
}

static void delete_run(zr_job *job) {
        zr_request *rq = (zr_request *)job;
        delete_state *st = rq->state;
        uint32_t changed = 0;
        int r;
        r = zr_mutation_begin(rq, st->entries, st->n, true);
        if (r == 0)
                r = check_range(rq, st->idx, st->count, zr_dataset_length(st->entries[0]->ds));
        for (uint32_t i = 0; i < st->n && r == 0; i++) {
                r = zr_dataset_delete(st->entries[i]->ds, st->idx, st->count, &rq->err);
                /* past the first stream, a failure leaves the set changed */
                if (i > 0 || r == 0)
                        changed = i + 1;
        }
        st->length = zr_dataset_length(st->entries[0]->ds);
        zr_mutation_end(rq, changed);
        rq->result = r;
}

static void delete_reply(zr_request *rq, zr_wire_writer *w) {
        delete_state *st = rq->state;
        zr_wire_put_u64(w, "length", st->length);
}

int zr_handle_delete(zr_request *rq) {
        zr_handle *h = rq->handle;
        int r;
        delete_state *st = zr_request_state(rq, sizeof(*st), delete_state_free);
        if (!st)
                return -ENOMEM;
        {
                zr_wire_error ierr = {0};
                const uint8_t *p;
                size_t n;
                if (zr_wire_get_u64s(rq->root, "indices", &p, &n, &ierr) < 0)
                        return zr_request_fail(rq, ZR_E_PROTO, "%s", ierr.message);
                if ((r = zr_request_work_charge(rq, (uint64_t)n * DELETE_WORK_PER_INDEX,
                                                "a DELETE")) < 0)
                        return r;
        }
        r = get_indices(rq, rq->root, "indices", &st->idx, &st->count);
        if (r < 0)
                return r;
        if (h->type == ZR_HANDLE_DATASET) {
                st->entries[st->n++] = zr_entry_ref(h->entry);
        } else {
                for (uint32_t i = 0; i < h->set->n; i++)
                        st->entries[st->n++] = zr_entry_ref(h->set->entries[i]);
        }
        return zr_request_submit_reply(rq, delete_run, delete_reply);
}
