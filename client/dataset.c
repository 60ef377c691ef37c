/* dataset.c: a dataset handle of libzrc and the requests made on it.
 *
 * A zrc_dataset is a daemon-side dataset handle plus what the client keeps for
 * it: the schema from the open reply, the last length it heard of, and one read
 * buffer (a daemon-created memfd, mapped read-only) that every READ on the
 * handle lands in. The buffer is opened on the first read and replaced by a
 * larger one when a read needs more, so a batch's pointers live until the next
 * read. Reads larger than one frame are split into several READs into one
 * buffer; a ragged read whose size is unknown in advance grows the buffer from
 * the daemon's `needed` and starts again.
 *
 * Paths are opened here, with the caller's rights, and only descriptors travel
 * (PROTOCOL.md, section 6). Records to append go into a sealed memfd; a ragged
 * append too long for one frame's `sizes` becomes several APPENDs over the same
 * memfd at increasing offsets.
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

static uint64_t align_up(uint64_t v, uint64_t a) {
        return (v + a - 1) / a * a;
}

/* ---- opening ----------------------------------------------------------- */

int dataset_open_files(zrc_conn *c, const char *path, int *ret_dirfd) {
        int fd;

        if (!path || !*path)
                return conn_fail(c, EINVAL, "no path given");
        fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (fd < 0)
                return conn_fail(c, errno, "%s: %s", path, strerror(errno));
        *ret_dirfd = fd;
        return 0;
}

int dataset_open_meta(zrc_conn *c, int dirfd, const char *display, const char *meta,
                      bool writable, int *ret_fd) {
        int fd = openat(dirfd, meta, (writable ? O_RDWR : O_RDONLY) | O_CLOEXEC | O_NOFOLLOW);

        if (fd < 0) {
                if (errno == ENOENT)
                        return conn_fail(c, ZR_E_NOT_STORE, "%s holds no store (no %s)", display,
                                         meta);
                return conn_fail(c, errno, "%s/%s: %s", display, meta, strerror(errno));
        }
        *ret_fd = fd;
        return 0;
}

int dataset_new(zrc_conn *c, uint32_t handle, const msgpack_object *map, bool writable,
                zrc_set *set, zrc_dataset **ret) {
        const msgpack_object *schema;
        zrc_dataset *d;
        bool has_dict = false;
        int r;

        d = calloc(1, sizeof(*d));
        if (!d)
                return conn_fail(c, ENOMEM, "out of memory for a dataset");
        d->conn = c;
        d->set = set;
        d->handle = handle;
        d->writable = writable;
        d->length = conn_get_u64(map, "length");
        (void)zr_wire_get_bool(map, "has_dict", &has_dict, NULL);
        d->has_dict = has_dict;
        (void)zr_wire_get_map(map, "schema", &schema, NULL);
        r = conn_parse_schema(c, schema, &d->schema);
        if (r < 0) {
                free(d);
                return r;
        }
        d->next = c->datasets;
        if (c->datasets)
                c->datasets->prev = d;
        c->datasets = d;
        *ret = d;
        return 0;
}

static void buffer_drop(zrc_dataset *d, bool tell) {
        if (d->map)
                munmap(d->map, d->map_bytes);
        d->map = NULL;
        d->map_bytes = 0;
        if (d->buffer && tell)
                (void)conn_close_handle(d->conn, d->buffer);
        d->buffer = 0;
}

void dataset_free(zrc_dataset *d, bool tell) {
        zrc_conn *c = d->conn;

        buffer_drop(d, tell);
        if (tell)
                (void)conn_close_handle(c, d->handle);
        if (d->prev)
                d->prev->next = d->next;
        else
                c->datasets = d->next;
        if (d->next)
                d->next->prev = d->prev;
        free(d->payloads);
        free(d->lengths);
        free(d->shapes);
        free(d);
}

int zrc_dataset_open(zrc_conn *c, const char *path, unsigned flags, zrc_dataset **ret) {
        bool writable = flags & ZRC_OPEN_WRITABLE;
        conn_reply reply = CONN_REPLY_NULL;
        int fds[2] = { -1, -1 };
        zr_wire_writer *w;
        uint32_t handle = 0;
        int r;

        r = conn_check(c, 0, NULL);
        if (r < 0)
                return r;
        if (flags & ~(unsigned)ZRC_OPEN_WRITABLE)
                return conn_fail(c, EINVAL, "unknown open flags 0x%x", flags);
        r = dataset_open_files(c, path, &fds[0]);
        if (r < 0)
                return r;
        r = dataset_open_meta(c, fds[0], path, "meta.zr", writable, &fds[1]);
        if (r < 0)
                goto out;

        w = conn_begin(c, ZR_MSG_DATASET_OPEN);
        zr_wire_put_bool(w, "writable", writable);
        r = conn_call(c, ZR_MSG_DATASET_OPEN, fds, 2, &reply);
        if (r < 0)
                goto out;
        (void)zr_wire_get_u32(reply.root, "handle", &handle, NULL);
        r = dataset_new(c, handle, reply.root, writable, NULL, ret);
        if (r < 0)
                (void)conn_close_handle(c, handle);
out:
        conn_reply_done(&reply);
        for (int i = 0; i < 2; i++)
                if (fds[i] >= 0)
                        close(fds[i]);
        return r;
}

int zrc_dataset_create(zrc_conn *c, const char *path, const zrc_schema *schema,
                       const void *dict, size_t dict_size, zrc_dataset **ret) {
        conn_reply reply = CONN_REPLY_NULL;
        int fds[2] = { -1, -1 };
        bool made_dir = false;
        zr_wire_writer *w;
        uint32_t handle = 0;
        int r;

        r = conn_check(c, 0, NULL);
        if (r < 0)
                return r;
        if (!schema || !zrc_codec_name(schema->codec))
                return conn_fail(c, EINVAL, "no usable schema given");
        if (dict_size > 0 && schema->codec != ZRC_CODEC_ZSTD_DICT)
                return conn_fail(c, EINVAL, "a dictionary is only for a zstd_dict dataset");
        if (dict_size > 0 && !dict)
                return conn_fail(c, EINVAL, "dictionary of %zu bytes without its bytes", dict_size);
        if (!path || !*path)
                return conn_fail(c, EINVAL, "no path given");
        if (mkdir(path, 0777) == 0)
                made_dir = true;
        else if (errno != EEXIST)
                return conn_fail(c, errno, "creating %s: %s", path, strerror(errno));
        r = dataset_open_files(c, path, &fds[0]);
        if (r < 0)
                goto out;
        if (dict_size > 0) {
                fds[1] = conn_memfd_sealed(c, "zrc-dict", dict_size, dict, NULL, NULL);
                if (fds[1] < 0) {
                        r = fds[1];
                        goto out;
                }
        }

        w = conn_begin(c, ZR_MSG_DATASET_CREATE);
        conn_put_schema(w, "schema", schema);
        if (dict_size > 0)
                zr_wire_put_u64(w, "dict_bytes", dict_size);
        r = conn_call(c, ZR_MSG_DATASET_CREATE, fds, dict_size > 0 ? 2 : 1, &reply);
        if (r < 0)
                goto out;
        (void)zr_wire_get_u32(reply.root, "handle", &handle, NULL);
        r = dataset_new(c, handle, reply.root, true, NULL, ret);
        if (r < 0)
                (void)conn_close_handle(c, handle);
out:
        conn_reply_done(&reply);
        for (int i = 0; i < 2; i++)
                if (fds[i] >= 0)
                        close(fds[i]);
        if (r < 0 && made_dir)
                (void)rmdir(path); /* fails, harmlessly, if the daemon wrote in it */
        return r;
}

zrc_dataset *zrc_dataset_close(zrc_dataset *d) {
        if (d && !d->set)
                dataset_free(d, !d->conn->broken);
        return NULL;
}

const zrc_schema *zrc_dataset_schema(const zrc_dataset *d) {
        return &d->schema;
}

uint64_t zrc_dataset_length(const zrc_dataset *d) {
        return d->length;
}

bool zrc_dataset_writable(const zrc_dataset *d) {
        return d->writable;
}

zrc_conn *zrc_dataset_conn(const zrc_dataset *d) {
        return d->conn;
}

/* A request whose only field is the dataset's handle. */
static int handle_call(zrc_dataset *d, zr_msg_kind kind, unsigned feature, const char *fname,
                       conn_reply *ret) {
        zr_wire_writer *w;
        int r;

        r = conn_check(d->conn, feature, fname);
        if (r < 0)
                return r;
        w = conn_begin(d->conn, kind);
        zr_wire_put_u64(w, "handle", d->handle);
        return conn_call(d->conn, kind, NULL, 0, ret);
}

int zrc_dataset_info(zrc_dataset *d, zrc_info *ret) {
        conn_reply reply = CONN_REPLY_NULL;
        const msgpack_object *schema;
        zrc_info info = { 0 };
        int r;

        r = handle_call(d, ZR_MSG_INFO, 0, NULL, &reply);
        if (r < 0)
                return r;
        info.length = conn_get_u64(reply.root, "length");
        (void)zr_wire_get_bool(reply.root, "has_dict", &info.has_dict, NULL);
        (void)zr_wire_get_bool(reply.root, "writable", &info.writable, NULL);
        (void)zr_wire_get_map(reply.root, "schema", &schema, NULL);
        r = conn_parse_schema(d->conn, schema, &info.schema);
        conn_reply_done(&reply);
        if (r < 0)
                return r;
        d->length = info.length;
        d->has_dict = info.has_dict;
        if (ret)
                *ret = info;
        return 0;
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

        buffer_drop(d, true); /* gives its bytes back to the budget first */
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

static int arrays_ensure(zrc_dataset *d, size_t n) {
        const void **p;
        uint64_t *l, *s;
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
        s = realloc(d->shapes, cap * d->schema.ndim * sizeof(*s) + 1);
        if (!s)
                return conn_fail(d->conn, ENOMEM, "out of memory");
        d->shapes = s;
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
 * offset against the mapping and stores the record arrays. Sets *ret_end to
 * the end of the last record. */
static int ragged_take(zrc_dataset *d, const conn_reply *reply, size_t j0, size_t k,
                       uint64_t offset, uint64_t *ret_end) {
        zrc_conn *c = d->conn;
        const uint8_t *offs, *lens, *shps;
        size_t n_offs = 0, n_lens = 0, n_shps = 0;
        uint32_t ndim = d->schema.ndim;
        int itemsize = zrc_dtype_itemsize(d->schema.dtype);
        uint64_t count = conn_get_u64(reply->root, "count"), bytes = conn_get_u64(reply->root, "bytes");

        if (zr_wire_get_u64s(reply->root, "offsets", &offs, &n_offs, NULL) < 0 ||
            zr_wire_get_u64s(reply->root, "lengths", &lens, &n_lens, NULL) < 0 ||
            zr_wire_get_u64s(reply->root, "shapes", &shps, &n_shps, NULL) < 0 || count != k ||
            n_offs != k || n_lens != k || n_shps != k * ndim || itemsize <= 0 ||
            bytes > d->map_bytes - offset)
                return conn_fail(c, ZR_E_PROTO, "ragged READ reply does not describe %zu records",
                                 k);
        for (size_t j = 0; j < k; j++) {
                uint64_t o = zr_wire_u64_at(offs, j), l = zr_wire_u64_at(lens, j), e = itemsize;

                for (uint32_t i = 0; i < ndim; i++) {
                        uint64_t dim = zr_wire_u64_at(shps, j * ndim + i);

                        d->shapes[(j0 + j) * ndim + i] = dim;
                        e = dim && e > UINT64_MAX / dim ? UINT64_MAX : e * dim;
                }
                if (o < offset || o > offset + bytes || l > offset + bytes - o || e != l)
                        return conn_fail(c, ZR_E_PROTO,
                                         "ragged record %zu at %" PRIu64 " (+%" PRIu64
                                         ") lies outside its reply or does not match its shape",
                                         j0 + j, o, l);
                d->payloads[j0 + j] = (const uint8_t *)d->map + o;
                d->lengths[j0 + j] = l;
        }
        *ret_end = offset + bytes;
        return 0;
}

static int read_ragged(zrc_dataset *d, const uint64_t *idx, size_t n, zrc_batch *ret) {
        zrc_conn *c = d->conn;
        size_t chunk = conn_u64s_per_frame(c, 8 * (2 + (size_t)d->schema.ndim));
        uint64_t end = 0;
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
                        r = ragged_take(d, &reply, start, k, offset, &end);
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

/* ---- deleting and maintenance ----------------------------------------- */

int zrc_dataset_delete(zrc_dataset *d, const uint64_t *indices, size_t n,
                       uint64_t *ret_length) {
        zrc_conn *c = d->conn;
        conn_reply reply = CONN_REPLY_NULL;
        zr_wire_writer *w;
        int r;

        r = conn_check(c, 0, NULL);
        if (r < 0)
                return r;
        if (n > 0 && !indices)
                return conn_fail(c, EINVAL, "no indices given");
        if (n > conn_u64s_per_frame(c, 8))
                /* split deletes would renumber between the parts */
                return conn_fail(c, ZR_E_LIMIT, "%zu indices do not fit one DELETE (at most %zu)",
                                 n, conn_u64s_per_frame(c, 8));
        w = conn_begin(c, ZR_MSG_DELETE);
        zr_wire_put_u64(w, "handle", d->handle);
        zr_wire_put_u64s(w, "indices", indices, n);
        r = conn_call(c, ZR_MSG_DELETE, NULL, 0, &reply);
        if (r < 0)
                return r;
        d->length = conn_get_u64(reply.root, "length");
        conn_reply_done(&reply);
        if (ret_length)
                *ret_length = d->length;
        return 0;
}

static void stats_take(const conn_reply *reply, zrc_stats *ret) {
        *ret = (zrc_stats){
                .records = conn_get_u64(reply->root, "records"),
                .live_bytes = conn_get_u64(reply->root, "live_bytes"),
                .chunk_bytes = conn_get_u64(reply->root, "chunk_bytes"),
                .reclaimable = conn_get_u64(reply->root, "reclaimable"),
                .has_logic_bytes = zr_wire_find(reply->root, "logic_bytes") != NULL,
                .logic_bytes = conn_get_u64(reply->root, "logic_bytes"),
        };
}

int zrc_dataset_stats(zrc_dataset *d, zrc_stats *ret) {
        conn_reply reply = CONN_REPLY_NULL;
        zrc_stats s;
        int r;

        r = handle_call(d, ZR_MSG_STATS, 0, NULL, &reply);
        if (r < 0)
                return r;
        stats_take(&reply, &s);
        conn_reply_done(&reply);
        d->length = s.records;
        if (ret)
                *ret = s;
        return 0;
}

int zrc_dataset_compact(zrc_dataset *d, zrc_stats *ret) {
        conn_reply reply = CONN_REPLY_NULL;
        zrc_stats s;
        int r;

        r = handle_call(d, ZR_MSG_COMPACT, 0, NULL, &reply);
        if (r < 0)
                return r;
        stats_take(&reply, &s);
        conn_reply_done(&reply);
        if (ret)
                *ret = s;
        return 0;
}

int zrc_dataset_sync(zrc_dataset *d) {
        return handle_call(d, ZR_MSG_SYNC, 0, NULL, NULL);
}

int zrc_dataset_verify(zrc_dataset *d, zrc_verify_result *ret) {
        conn_reply reply = CONN_REPLY_NULL;
        const uint8_t *bad;
        size_t n_bad = 0;
        bool ok = false;
        int r;

        if (!ret)
                return conn_fail(d->conn, EINVAL, "no result given");
        r = handle_call(d, ZR_MSG_VERIFY, CONN_FEATURE_VERIFY, ZR_FEATURE_VERIFY, &reply);
        if (r < 0)
                return r;
        (void)zr_wire_get_bool(reply.root, "ok", &ok, NULL);
        ret->ok = ok;
        ret->records = conn_get_u64(reply.root, "records");
        ret->bad = conn_get_u64(reply.root, "bad");
        (void)zr_wire_get_u64s(reply.root, "bad_indices", &bad, &n_bad, NULL);
        if (n_bad > ZRC_VERIFY_BAD_MAX)
                n_bad = ZRC_VERIFY_BAD_MAX;
        ret->n_bad_indices = n_bad;
        for (size_t i = 0; i < n_bad; i++)
                ret->bad_indices[i] = zr_wire_u64_at(bad, i);
        conn_reply_done(&reply);
        return 0;
}

/* ---- dictionaries ------------------------------------------------------ */

/* Copies the dictionary out of a TRAIN_DICT reply's memfd. */
static int dict_take(zrc_conn *c, conn_reply *reply, void **ret_dict, size_t *ret_size) {
        uint64_t size = conn_get_u64(reply->root, "dict_bytes");
        uint8_t *buf;
        uint64_t done = 0;

        if (size == 0 || size > SIZE_MAX)
                return conn_fail(c, ZR_E_PROTO, "dictionary of %" PRIu64 " bytes", size);
        buf = malloc(size);
        if (!buf)
                return conn_fail(c, ENOMEM, "out of memory for a dictionary");
        while (done < size) {
                ssize_t n = pread(reply->fd, buf + done, size - done, (off_t)done);

                if (n < 0 && errno == EINTR)
                        continue;
                if (n <= 0) {
                        free(buf);
                        return conn_fail(c, n < 0 ? errno : ZR_E_BUFFER,
                                         "reading the dictionary memfd: %s",
                                         n < 0 ? strerror(errno) : "shorter than dict_bytes");
                }
                done += (uint64_t)n;
        }
        *ret_dict = buf;
        *ret_size = size;
        return 0;
}

int zrc_dataset_train_dict(zrc_dataset *d, const char *tier, void **ret_dict,
                           size_t *ret_size) {
        zrc_conn *c = d->conn;
        conn_reply reply = CONN_REPLY_NULL;
        zr_wire_writer *w;
        int r;

        r = conn_check(c, CONN_FEATURE_DICT, ZR_FEATURE_DICT);
        if (r < 0)
                return r;
        if (!tier || !ret_dict || !ret_size)
                return conn_fail(c, EINVAL, "train_dict needs a tier and result pointers");
        w = conn_begin(c, ZR_MSG_TRAIN_DICT);
        zr_wire_put_str(w, "tier", tier);
        zr_wire_put_u64(w, "handle", d->handle);
        r = conn_call(c, ZR_MSG_TRAIN_DICT, NULL, 0, &reply);
        if (r < 0)
                return r;
        r = dict_take(c, &reply, ret_dict, ret_size);
        conn_reply_done(&reply);
        return r;
}

int zrc_train_dict(zrc_conn *c, const char *tier, const void *data, const uint64_t *sizes,
                   size_t count, void **ret_dict, size_t *ret_size) {
        conn_reply reply = CONN_REPLY_NULL;
        uint64_t total = 0;
        zr_wire_writer *w;
        int r, fd;

        r = conn_check(c, CONN_FEATURE_DICT, ZR_FEATURE_DICT);
        if (r < 0)
                return r;
        if (!tier || !ret_dict || !ret_size || (count > 0 && (!data || !sizes)))
                return conn_fail(c, EINVAL, "train_dict needs a tier, samples and result pointers");
        if (count > conn_u64s_per_frame(c, 8))
                return conn_fail(c, ZR_E_LIMIT, "%zu samples do not fit one request", count);
        for (size_t i = 0; i < count; i++) {
                if (total > UINT64_MAX - sizes[i])
                        return conn_fail(c, EINVAL, "sample sizes overflow");
                total += sizes[i];
        }
        fd = conn_memfd_sealed(c, "zrc-samples", total, data, NULL, NULL);
        if (fd < 0)
                return fd;
        w = conn_begin(c, ZR_MSG_TRAIN_DICT);
        zr_wire_put_str(w, "tier", tier);
        zr_wire_put_u64s(w, "sizes", sizes, count);
        r = conn_call(c, ZR_MSG_TRAIN_DICT, &fd, 1, &reply);
        close(fd);
        if (r < 0)
                return r;
        r = dict_take(c, &reply, ret_dict, ret_size);
        conn_reply_done(&reply);
        return r;
}

int zrc_dataset_install_dict(zrc_dataset *d, const void *dict, size_t size) {
        zrc_conn *c = d->conn;
        zr_wire_writer *w;
        int r, fd;

        r = conn_check(c, CONN_FEATURE_DICT, ZR_FEATURE_DICT);
        if (r < 0)
                return r;
        if (!dict || size == 0)
                return conn_fail(c, EINVAL, "no dictionary given");
        fd = conn_memfd_sealed(c, "zrc-dict", size, dict, NULL, NULL);
        if (fd < 0)
                return fd;
        w = conn_begin(c, ZR_MSG_INSTALL_DICT);
        zr_wire_put_u64(w, "handle", d->handle);
        zr_wire_put_u64(w, "dict_bytes", size);
        r = conn_call(c, ZR_MSG_INSTALL_DICT, &fd, 1, NULL);
        close(fd);
        if (r == 0)
                d->has_dict = true;
        return r;
}
