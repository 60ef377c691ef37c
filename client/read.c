/* read.c: reading records by index into a dataset's shared read buffer.
 *
 * Every READ on a dataset lands in one buffer: a memfd the daemon creates and
 * the library maps read-only (BUFFER_OPEN). It is opened on the first read and
 * replaced by a larger one (the old one closed first, to give its bytes back to
 * the connection's budget) when a read needs more, so a batch's pointers live
 * until the next read. A read of more indices than one frame carries becomes
 * several READs at increasing offsets of the same buffer. A ragged read cannot
 * be sized in advance: when the daemon answers ZR_E_BUFFER with the bytes
 * `needed`, the buffer grows (estimated for the whole read from the rate seen so
 * far) and the read starts again, a bounded number of times. Every offset and
 * length of a reply is checked against the mapping before a pointer is made.
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

/* Smallest read buffer: small reads share one page-rounded buffer and growth
 * doubles, so a stream of growing reads reopens it O(log) times. */
#define DATASET_BUFFER_MIN (UINT64_C(64) << 10)
/* Restarts of a ragged read after the buffer grew. Each restart at least
 * doubles the buffer or sizes it from the daemon's `needed`, so a handful
 * suffices; the bound only stops a daemon that keeps moving the goal. */
#define DATASET_READ_ATTEMPTS 8
/* zrc_dataset_read_into() reads through the buffer in pieces of this much. */
#define DATASET_INTO_PIECE (UINT64_C(64) << 20)

static uint64_t align_up(uint64_t v, uint64_t a) {
        return (v + a - 1) / a * a;
}

void dataset_buffer_drop(zrc_dataset *d, bool tell) {
        if (d->map)
                munmap(d->map, d->map_bytes);
        d->map = NULL;
        d->map_bytes = 0;
        if (d->buffer && tell)
                (void)conn_close_handle(d->conn, d->buffer);
        d->buffer = 0;
}

/* ---- the read buffer --------------------------------------------------- */

static int buffer_ensure(zrc_dataset *d, uint64_t bytes) {
        zrc_conn *c = d->conn;
        conn_reply reply = CONN_REPLY_NULL;
        uint64_t want, got, budget = c->limits.shm_bytes_max;
        uint32_t handle = 0;
        zr_wire_writer *w;
        void *p;
        int r;

        if (d->map && d->map_bytes >= bytes)
                return 0;
        want = bytes;
        if (want < 2 * d->map_bytes)
                want = 2 * d->map_bytes;
        if (want < DATASET_BUFFER_MIN)
                want = DATASET_BUFFER_MIN;
        want = align_up(want, ZR_SHM_ALIGN);
        if (budget && want > budget && bytes <= budget)
                want = budget; /* growth must not ask for more than allowed */

        dataset_buffer_drop(d, true); /* gives its bytes back to the budget first */
        w = conn_begin(c, ZR_MSG_BUFFER_OPEN);
        zr_wire_put_u64(w, "bytes", want);
        r = conn_call(c, ZR_MSG_BUFFER_OPEN, NULL, 0, &reply);
        if (r < 0)
                return r;
        (void)zr_wire_get_u32(reply.root, "buffer", &handle, NULL);
        got = conn_get_u64(reply.root, "bytes");
        if (got < bytes || got > SIZE_MAX) {
                conn_reply_done(&reply);
                (void)conn_close_handle(c, handle);
                return conn_fail(c, ZR_E_PROTO, "buffer of %" PRIu64 " bytes, %" PRIu64 " asked",
                                 got, want);
        }
        p = mmap(NULL, got, PROT_READ, MAP_SHARED, reply.fd, 0);
        if (p == MAP_FAILED) {
                r = conn_fail(c, errno, "mapping a read buffer of %" PRIu64 " bytes: %s", got,
                              strerror(errno));
                conn_reply_done(&reply);
                (void)conn_close_handle(c, handle);
                return r;
        }
        conn_reply_done(&reply); /* the mapping keeps the memfd */
        d->buffer = handle;
        d->map = p;
        d->map_bytes = got;
        return 0;
}

/* Words of dims a record can have: the schema's ndim, or (0) at most ZRC_NDIM_MAX. */
static size_t dims_per_record(const zrc_dataset *d) {
        return d->schema.ndim ? d->schema.ndim : ZRC_NDIM_MAX;
}

static int arrays_ensure(zrc_dataset *d, size_t n) {
        const void **p;
        uint64_t *l, *s, *a;
        uint32_t *nd;
        size_t cap = d->cap_records ? d->cap_records : 64;

        if (n <= d->cap_records)
                return 0;
        while (cap < n)
                cap *= 2;
        if (cap > SIZE_MAX / (ZRC_NDIM_MAX * sizeof(uint64_t)))
                return conn_fail(d->conn, ENOMEM, "too many records");
        p = realloc(d->payloads, cap * sizeof(*p));
        if (!p)
                return conn_fail(d->conn, ENOMEM, "out of memory");
        d->payloads = p;
        l = realloc(d->lengths, cap * sizeof(*l));
        if (!l)
                return conn_fail(d->conn, ENOMEM, "out of memory");
        d->lengths = l;
        s = realloc(d->shapes, cap * dims_per_record(d) * sizeof(*s) + 1);
        if (!s)
                return conn_fail(d->conn, ENOMEM, "out of memory");
        d->shapes = s;
        a = realloc(d->shape_at, cap * sizeof(*a));
        if (!a)
                return conn_fail(d->conn, ENOMEM, "out of memory");
        d->shape_at = a;
        nd = realloc(d->ndims, cap * sizeof(*nd));
        if (!nd)
                return conn_fail(d->conn, ENOMEM, "out of memory");
        d->ndims = nd;
        d->cap_records = cap;
        return 0;
}

/* One READ of idx[0..n) at `offset`; the reply is returned for the caller. */
static int read_once(zrc_dataset *d, const uint64_t *idx, size_t n, uint64_t offset,
                     conn_reply *reply) {
        zr_wire_writer *w = conn_begin(d->conn, ZR_MSG_READ);

        zr_wire_put_u64(w, "handle", d->handle);
        zr_wire_put_u64(w, "buffer", d->buffer);
        if (offset)
                zr_wire_put_u64(w, "offset", offset);
        zr_wire_put_u64s(w, "indices", idx, n);
        return conn_call(d->conn, ZR_MSG_READ, NULL, 0, reply);
}

static int read_dense(zrc_dataset *d, const uint64_t *idx, size_t n, zrc_batch *ret) {
        zrc_conn *c = d->conn;
        uint64_t rb = zrc_schema_record_bytes(&d->schema);
        size_t chunk = conn_u64s_per_frame(c, 8) / 8 * 8; /* offsets stay 8-aligned */
        int r;

        if (rb == 0 || rb == UINT64_MAX || (n > 0 && rb > UINT64_MAX / n))
                return conn_fail(c, ZR_E_SCHEMA, "records of %" PRIu64 " bytes cannot be read",
                                 rb);
        r = buffer_ensure(d, n * rb);
        if (r < 0)
                return r;
        for (size_t start = 0; start < n; start += chunk) {
                conn_reply reply = CONN_REPLY_NULL;
                size_t k = n - start < chunk ? n - start : chunk;
                uint64_t count, got_rb;

                r = read_once(d, idx + start, k, start * rb, &reply);
                if (r < 0)
                        return r;
                count = conn_get_u64(reply.root, "count");
                got_rb = conn_get_u64(reply.root, "record_bytes");
                conn_reply_done(&reply);
                if (count != k || got_rb != rb)
                        return conn_fail(c, ZR_E_PROTO,
                                         "READ answered %" PRIu64 " records of %" PRIu64
                                         " bytes for %zu of %" PRIu64,
                                         count, got_rb, k, rb);
        }
        *ret = (zrc_batch){
                .count = n,
                .kind = ZRC_DENSE,
                .ndim = d->schema.ndim,
                .data = d->map,
                .record_bytes = rb,
                .bytes = n * rb,
        };
        return 0;
}

/* Takes one ragged READ reply of k records (the j0-th onwards), checks every
 * offset against the mapping and stores the record arrays, their dims from
 * *dims_at on (advanced). Sets *ret_end to the end of the last record. */
static int ragged_take(zrc_dataset *d, const conn_reply *reply, size_t j0, size_t k,
                       uint64_t offset, uint64_t *dims_at, uint64_t *ret_end) {
        zrc_conn *c = d->conn;
        const uint8_t *offs, *lens, *shps;
        size_t n_offs = 0, n_lens = 0, n_shps = 0;
        uint32_t ndim = d->schema.ndim;
        int itemsize = zrc_dtype_itemsize(d->schema.dtype);
        uint64_t count = conn_get_u64(reply->root, "count"), bytes = conn_get_u64(reply->root, "bytes");

        if (zr_wire_get_u64s(reply->root, "offsets", &offs, &n_offs, NULL) < 0 ||
            zr_wire_get_u64s(reply->root, "lengths", &lens, &n_lens, NULL) < 0 ||
            zr_wire_get_u64s(reply->root, "shapes", &shps, &n_shps, NULL) < 0 || count != k ||
            n_offs != k || n_lens != k || itemsize <= 0 || bytes > d->map_bytes - offset)
                return conn_fail(c, ZR_E_PROTO, "ragged READ reply does not describe %zu records",
                                 k);
        int64_t used = conn_take_shapes(shps, n_shps, ndim, k, (uint64_t)itemsize, lens,
                                        d->shapes + *dims_at, *dims_at, d->ndims + j0,
                                        d->shape_at + j0);
        if (used < 0)
                return conn_fail(c, ZR_E_PROTO, "ragged READ reply: the shapes of its %zu records "
                                 "do not match their lengths", k);
        *dims_at += (uint64_t)used;
        for (size_t j = 0; j < k; j++) {
                uint64_t o = zr_wire_u64_at(offs, j), l = zr_wire_u64_at(lens, j);

                if (o < offset || o > offset + bytes || l > offset + bytes - o)
                        return conn_fail(c, ZR_E_PROTO,
                                         "ragged record %zu at %" PRIu64 " (+%" PRIu64
                                         ") lies outside its reply", j0 + j, o, l);
                d->payloads[j0 + j] = (const uint8_t *)d->map + o;
                d->lengths[j0 + j] = l;
        }
        *ret_end = offset + bytes;
        return 0;
}

static int read_ragged(zrc_dataset *d, const uint64_t *idx, size_t n, zrc_batch *ret) {
        zrc_conn *c = d->conn;
        size_t chunk = conn_u64s_per_frame(c, 8 * (2 + (d->schema.ndim ? d->schema.ndim :
                                                               1 + ZRC_NDIM_MAX)));
        uint64_t end = 0, dims_at = 0;
        int r;

        r = arrays_ensure(d, n);
        if (r < 0)
                return r;
        r = buffer_ensure(d, DATASET_BUFFER_MIN);
        if (r < 0)
                return r;

        for (unsigned attempt = 0;; attempt++) {
                uint64_t offset = 0;
                size_t start;

                end = 0;
                dims_at = 0;
                for (start = 0; start < n; start += chunk) {
                        conn_reply reply = CONN_REPLY_NULL;
                        size_t k = n - start < chunk ? n - start : chunk;

                        r = read_once(d, idx + start, k, offset, &reply);
                        if (r == -ZR_E_BUFFER && attempt + 1 < DATASET_READ_ATTEMPTS &&
                            c->error.has_needed) {
                                /* size for the rest at the rate seen so far */
                                uint64_t need = offset + c->error.needed;
                                uint64_t guess = need / (start + k) * n + need / 4;

                                r = buffer_ensure(d, guess > need ? guess : need);
                                if (r < 0)
                                        return r;
                                break;
                        }
                        if (r < 0)
                                return r;
                        r = ragged_take(d, &reply, start, k, offset, &dims_at, &end);
                        conn_reply_done(&reply);
                        if (r < 0)
                                return r;
                        offset = align_up(end, ZR_RECORD_ALIGN);
                }
                if (start >= n)
                        break;
        }
        *ret = (zrc_batch){
                .count = n,
                .kind = ZRC_RAGGED,
                .ndim = d->schema.ndim,
                .data = d->map,
                .bytes = end,
                .payloads = d->payloads,
                .lengths = d->lengths,
                .shapes = d->shapes,
                .ndims = d->ndims,
                .shape_at = d->shape_at,
        };
        return 0;
}

int zrc_dataset_read(zrc_dataset *d, const uint64_t *indices, size_t n, zrc_batch *ret) {
        int r;

        r = conn_check(d->conn, 0, NULL);
        if (r < 0)
                return r;
        if (n > 0 && !indices)
                return conn_fail(d->conn, EINVAL, "no indices given");
        if (d->schema.kind == ZRC_DENSE)
                return read_dense(d, indices, n, ret);
        return read_ragged(d, indices, n, ret);
}


int zrc_dataset_read_into(zrc_dataset *d, const uint64_t *indices, size_t n, void *dst,
                          size_t dst_bytes) {
        uint64_t rb = zrc_schema_record_bytes(&d->schema);
        size_t per;
        int r;

        r = conn_check(d->conn, 0, NULL);
        if (r < 0)
                return r;
        if (d->schema.kind != ZRC_DENSE)
                return conn_fail(d->conn, EINVAL, "reading into caller memory needs a dense "
                                 "dataset: ragged records have no fixed place");
        if (n > 0 && (!indices || !dst))
                return conn_fail(d->conn, EINVAL, "no indices or no destination given");
        if (rb == 0 || rb == UINT64_MAX || (n > 0 && rb > UINT64_MAX / n))
                return conn_fail(d->conn, ZR_E_SCHEMA, "records of %" PRIu64 " bytes cannot "
                                 "be read", rb);
        if ((uint64_t)dst_bytes < n * rb)
                return conn_fail(d->conn, ZR_E_BUFFER, "%zu records of %" PRIu64 " bytes need "
                                 "%" PRIu64 " bytes, the destination has %zu", n, rb, n * rb,
                                 dst_bytes);
        per = rb >= DATASET_INTO_PIECE ? 1 : (size_t)(DATASET_INTO_PIECE / rb);
        for (size_t start = 0; start < n; start += per) {
                size_t k = n - start < per ? n - start : per;
                zrc_batch b;

                r = read_dense(d, indices + start, k, &b);
                if (r < 0)
                        return r;
                memcpy((uint8_t *)dst + start * rb, b.data, k * rb);
        }
        return 0;
}
