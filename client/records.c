/* records.c: what libzrc knows about records without asking the daemon.
 *
 * Schemas and dtype strings (enough to size a dense record: the daemon is the
 * authority that validates them), the ragged record layout of docs/DATASETS.md
 * (u64 LE ndim, u64 LE dims, payload; records packed back to back in an APPEND,
 * each 8-aligned in a READ buffer), the schema map of the protocol, and the
 * sealed memfd an APPEND, TRAIN_DICT or INSTALL_DICT passes (PROTOCOL.md,
 * section 7). Nothing here talks to the socket.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "zrc-private.h"

static const char *const codec_names[] = {
        [ZRC_CODEC_RAW] = "raw",
        [ZRC_CODEC_ZSTD] = "zstd",
        [ZRC_CODEC_ZSTD_DICT] = "zstd_dict",
};

const char *zrc_codec_name(zrc_codec codec) {
        if ((unsigned)codec >= sizeof(codec_names) / sizeof(codec_names[0]))
                return NULL;
        return codec_names[codec];
}

static int codec_parse_n(const char *name, size_t len, zrc_codec *ret) {
        for (unsigned i = 0; i < sizeof(codec_names) / sizeof(codec_names[0]); i++)
                if (strlen(codec_names[i]) == len && memcmp(codec_names[i], name, len) == 0) {
                        *ret = (zrc_codec)i;
                        return 0;
                }
        return -ZR_E_BAD_CODEC;
}

int zrc_codec_parse(const char *name, zrc_codec *ret) {
        if (!name)
                return -ZR_E_BAD_CODEC;
        return codec_parse_n(name, strlen(name), ret);
}

int zrc_dtype_itemsize(const char *dtype) {
        const char *p = dtype;
        char *end;
        long size;

        if (!p)
                return -EINVAL;
        if (*p == '<' || *p == '>' || *p == '|' || *p == '=')
                p++;
        if (!*p || !strchr("biufc", *p))
                return -EINVAL;
        p++;
        if (*p < '1' || *p > '9')
                return -EINVAL;
        errno = 0;
        size = strtol(p, &end, 10);
        if (errno || *end || size <= 0 || size > 16)
                return -EINVAL;
        return (int)size;
}

static uint64_t shape_bytes(const uint64_t *dims, uint32_t ndim, uint64_t itemsize) {
        uint64_t total = itemsize;

        for (uint32_t i = 0; i < ndim; i++) {
                if (dims[i] != 0 && total > UINT64_MAX / dims[i])
                        return UINT64_MAX;
                total *= dims[i];
        }
        return total;
}

uint64_t zrc_schema_record_bytes(const zrc_schema *s) {
        int itemsize;

        if (s->kind != ZRC_DENSE)
                return 0;
        itemsize = zrc_dtype_itemsize(s->dtype);
        if (itemsize < 0)
                return 0;
        return shape_bytes(s->item_shape, s->ndim, (uint64_t)itemsize);
}

static int schema_init(zrc_schema *ret, zrc_kind kind, const char *dtype, uint32_t ndim,
                       zrc_codec codec) {
        if (!ret || zrc_dtype_itemsize(dtype) < 0 || strlen(dtype) >= ZRC_DTYPE_MAX ||
            ndim > ZRC_NDIM_MAX || !zrc_codec_name(codec))
                return -EINVAL;
        *ret = (zrc_schema){ .kind = kind, .ndim = ndim, .codec = codec };
        memcpy(ret->dtype, dtype, strlen(dtype) + 1);
        return 0;
}

int zrc_schema_dense(zrc_schema *ret, const char *dtype, const uint64_t *item_shape,
                     uint32_t ndim, zrc_codec codec) {
        int r;

        if (ndim > 0 && !item_shape)
                return -EINVAL;
        r = schema_init(ret, ZRC_DENSE, dtype, ndim, codec);
        if (r < 0)
                return r;
        if (ndim > 0)
                memcpy(ret->item_shape, item_shape, ndim * sizeof(uint64_t));
        return 0;
}

int zrc_schema_ragged(zrc_schema *ret, const char *dtype, uint32_t ndim, zrc_codec codec) {
        return schema_init(ret, ZRC_RAGGED, dtype, ndim, codec);
}

int64_t conn_take_shapes(const uint8_t *words, size_t nwords, uint32_t ndim, size_t k,
                         uint64_t itemsize, const uint8_t *lens, uint64_t *dims,
                         uint64_t dims_at, uint32_t *ndims, uint64_t *shape_at) {
        size_t w = 0;
        uint64_t used = 0;

        for (size_t j = 0; j < k; j++) {
                uint64_t nd = ndim, e = itemsize;

                if (ndim == 0) {
                        if (w >= nwords)
                                return -1;
                        nd = zr_wire_u64_at(words, w++);
                        if (nd < 1 || nd > ZRC_NDIM_MAX)
                                return -1;
                }
                if (nd > nwords - w)
                        return -1;
                ndims[j] = (uint32_t)nd;
                shape_at[j] = dims_at + used;
                for (uint64_t i = 0; i < nd; i++) {
                        uint64_t dim = zr_wire_u64_at(words, w++);

                        dims[used++] = dim;
                        e = dim && e > UINT64_MAX / dim ? UINT64_MAX : e * dim;
                }
                if (e != zr_wire_u64_at(lens, j))
                        return -1;
        }
        return w == nwords ? (int64_t)used : -1;
}

/* ---- ragged records ---------------------------------------------------- */

static void put_le64(uint8_t *p, uint64_t v) {
        for (unsigned i = 0; i < 8; i++)
                p[i] = (uint8_t)(v >> (8 * i));
}

uint64_t zrc_ragged_record_bytes(const uint64_t *dims, uint32_t ndim, uint32_t itemsize) {
        uint64_t payload = shape_bytes(dims, ndim, itemsize);
        uint64_t header = 8 * (1 + (uint64_t)ndim);

        if (payload > UINT64_MAX - header)
                return UINT64_MAX;
        return header + payload;
}

uint64_t zrc_ragged_pack(void *dst, const uint64_t *dims, uint32_t ndim, uint32_t itemsize,
                         const void *payload) {
        uint8_t *p = dst;
        uint64_t payload_bytes = shape_bytes(dims, ndim, itemsize);

        put_le64(p, ndim);
        for (uint32_t i = 0; i < ndim; i++)
                put_le64(p + 8 * (1 + (size_t)i), dims[i]);
        p += 8 * (1 + (size_t)ndim);
        if (payload_bytes > 0 && payload)
                memcpy(p, payload, payload_bytes);
        return 8 * (1 + (uint64_t)ndim) + payload_bytes;
}

int64_t zrc_ragged_unpack(const void *rec, uint64_t rec_len, uint32_t ndim, uint64_t *ret_dims) {
        uint64_t header = 8 * (1 + (uint64_t)ndim);

        if (!rec || rec_len < header)
                return -EINVAL;
        if (zr_wire_u64_at(rec, 0) != ndim)
                return -EINVAL;
        if (ret_dims)
                for (uint32_t i = 0; i < ndim; i++)
                        ret_dims[i] = zr_wire_u64_at(rec, 1 + i);
        return (int64_t)header;
}

/* ---- schema maps ------------------------------------------------------- */

static const char *const layout_names[] = { "zrecord", "loaderx-1.5.7", "bytes" };

int conn_parse_schema(zrc_conn *c, const msgpack_object *map, zrc_schema *ret) {
        zrc_schema s = { 0 };
        const char *p;
        size_t n;
        const msgpack_object *o;

        if (zr_wire_get_str(map, "kind", &p, &n, NULL) < 0)
                return conn_fail(c, ZR_E_PROTO, "schema without a kind");
        if (n == 5 && memcmp(p, "dense", 5) == 0)
                s.kind = ZRC_DENSE;
        else if (n == 6 && memcmp(p, "ragged", 6) == 0)
                s.kind = ZRC_RAGGED;
        else
                return conn_fail(c, ZR_E_SCHEMA, "schema of unknown kind \"%.*s\"", (int)n, p);
        if (zr_wire_get_str(map, "dtype", &p, &n, NULL) < 0 || n >= ZRC_DTYPE_MAX)
                return conn_fail(c, ZR_E_SCHEMA, "schema without a usable dtype");
        memcpy(s.dtype, p, n);
        if (zr_wire_get_str(map, "codec", &p, &n, NULL) < 0 || codec_parse_n(p, n, &s.codec) < 0)
                return conn_fail(c, ZR_E_BAD_CODEC, "schema of an unknown codec");
        if (s.kind == ZRC_DENSE) {
                uint32_t count = 0;

                if (zr_wire_get_array(map, "item_shape", &o, &count, NULL) < 0 ||
                    count > ZRC_NDIM_MAX)
                        return conn_fail(c, ZR_E_SCHEMA, "dense schema without a usable item_shape");
                s.ndim = count;
                for (uint32_t i = 0; i < count; i++) {
                        if (o[i].type != MSGPACK_OBJECT_POSITIVE_INTEGER)
                                return conn_fail(c, ZR_E_SCHEMA, "item_shape holds a %s",
                                                 zr_wire_type_name(&o[i]));
                        s.item_shape[i] = o[i].via.u64;
                }
        } else {
                if (zr_wire_get_u32(map, "ndim", &s.ndim, NULL) < 0 || s.ndim > ZRC_NDIM_MAX)
                        return conn_fail(c, ZR_E_SCHEMA, "ragged schema without a usable ndim");
                if (zr_wire_get_str(map, "layout", &p, &n, NULL) == 0) {
                        unsigned l = 0;

                        while (l < 3 && !(strlen(layout_names[l]) == n &&
                                          memcmp(layout_names[l], p, n) == 0))
                                l++;
                        if (l == 3)
                                return conn_fail(c, ZR_E_SCHEMA, "schema of an unknown layout "
                                                 "\"%.*s\"", (int)(n > 32 ? 32 : n), p);
                        s.layout = (zrc_layout)l;
                }
        }
        *ret = s;
        return 0;
}

void conn_put_schema(zr_wire_writer *w, const char *key, const zrc_schema *s) {
        zr_wire_begin_map(w, key);
        zr_wire_put_str(w, "kind", s->kind == ZRC_DENSE ? "dense" : "ragged");
        zr_wire_put_str(w, "dtype", s->dtype);
        if (s->kind == ZRC_DENSE)
                zr_wire_put_uint_array(w, "item_shape", s->item_shape, s->ndim);
        else
                zr_wire_put_u64(w, "ndim", s->ndim);
        zr_wire_put_str(w, "codec", zrc_codec_name(s->codec));
        if (s->layout == ZRC_LAYOUT_BYTES)
                zr_wire_put_str(w, "layout", layout_names[s->layout]);
        zr_wire_end(w);
}

/* ---- sealed memfds ----------------------------------------------------- */

int conn_memfd_sealed(zrc_conn *c, const char *name, uint64_t size, const void *data,
                      void (*fill)(void *dst, void *userdata), void *userdata) {
        int fd, r;

        fd = memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING);
        if (fd < 0)
                return conn_fail(c, errno, "memfd_create: %s", strerror(errno));
        if (ftruncate(fd, (off_t)size) < 0) {
                r = conn_fail(c, errno, "sizing a memfd of %llu bytes: %s",
                              (unsigned long long)size, strerror(errno));
                goto fail;
        }
        if (fill && size > 0) {
                void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);

                if (p == MAP_FAILED) {
                        r = conn_fail(c, errno, "mapping a memfd of %llu bytes: %s",
                                      (unsigned long long)size, strerror(errno));
                        goto fail;
                }
                fill(p, userdata);
                /* F_SEAL_WRITE needs every writable mapping gone */
                munmap(p, size);
        } else if (size > 0) {
                const uint8_t *src = data;
                uint64_t done = 0;

                while (done < size) {
                        ssize_t n = pwrite(fd, src + done, size - done, (off_t)done);

                        if (n < 0 && errno == EINTR)
                                continue;
                        if (n <= 0) {
                                r = conn_fail(c, n < 0 ? errno : EIO, "filling a memfd: %s",
                                              strerror(n < 0 ? errno : EIO));
                                goto fail;
                        }
                        done += (uint64_t)n;
                }
        }
        if (fcntl(fd, F_ADD_SEALS, F_SEAL_WRITE | F_SEAL_SHRINK | F_SEAL_GROW) < 0) {
                r = conn_fail(c, errno, "sealing a memfd: %s", strerror(errno));
                goto fail;
        }
        return fd;

fail:
        close(fd);
        return r;
}
