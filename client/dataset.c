/* dataset.c: a dataset handle of libzrc: opening, creating, closing, and the
 * requests on it that carry no bulk data.
 *
 * A zrc_dataset is a daemon-side dataset handle plus what the client keeps for
 * it: the schema from the open reply, the last length it heard of, and its
 * read buffer (read.c). Paths are opened here, with the caller's rights, and
 * only descriptors travel (PROTOCOL.md, section 6): the directory, and meta.zr
 * as the proof of read or write access. Appends are in append.c, dictionaries
 * in dict.c.
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

#include "list.h"
#include "zrc-private.h"

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
        ZRC_LIST_PUSH(c->datasets, d);
        *ret = d;
        return 0;
}

void dataset_free(zrc_dataset *d, bool tell) {
        zrc_conn *c = d->conn;

        dataset_buffer_drop(d, tell);
        if (tell)
                (void)conn_close_handle(c, d->handle);
        ZRC_LIST_UNLINK(c->datasets, d);
        free(d->payloads);
        free(d->lengths);
        free(d->shapes);
        free(d->shape_at);
        free(d->ndims);
        free(d);
}

/* Sends the request begun on c (DATASET_OPEN or DATASET_CREATE) with
 * fds[0..nfds) and makes the dataset its reply names. */
static int dataset_call(zrc_conn *c, zr_msg_kind kind, const int *fds, size_t nfds,
                        bool writable, zrc_dataset **ret) {
        conn_reply reply = CONN_REPLY_NULL;
        uint32_t handle = 0;
        int r = conn_call(c, kind, fds, nfds, &reply);

        if (r == 0) {
                (void)zr_wire_get_u32(reply.root, "handle", &handle, NULL);
                r = dataset_new(c, handle, reply.root, writable, NULL, ret);
                if (r < 0)
                        (void)conn_close_handle(c, handle);
        }
        conn_reply_done(&reply);
        return r;
}

static void close_fds(int *fds, size_t n) {
        for (size_t i = 0; i < n; i++)
                if (fds[i] >= 0)
                        close(fds[i]);
}

int zrc_dataset_open(zrc_conn *c, const char *path, unsigned flags, zrc_dataset **ret) {
        bool writable = flags & ZRC_OPEN_WRITABLE;
        int fds[2] = { -1, -1 };
        zr_wire_writer *w;
        int r;

        r = conn_check(c, 0, NULL);
        if (r < 0)
                return r;
        if (flags & ~(unsigned)ZRC_OPEN_WRITABLE)
                return conn_fail(c, EINVAL, "unknown open flags 0x%x", flags);
        if (path && conn_is_remote(path)) {
                /* a store in object storage: its credentials, no descriptors */
                if (writable)
                        return conn_fail(c, ZR_E_READONLY, "%s is in object storage: read-only "
                                         "(zrecord pull makes a local copy)", path);
                w = conn_begin(c, ZR_MSG_DATASET_OPEN);
                r = conn_put_remote(c, w, path);
                if (r < 0)
                        return r; /* nothing was sent: the next request resets the writer */
                return dataset_call(c, ZR_MSG_DATASET_OPEN, NULL, 0, false, ret);
        }
        r = dataset_open_files(c, path, &fds[0]);
        if (r < 0)
                return r;
        r = dataset_open_meta(c, fds[0], path, "meta.zr", writable, &fds[1]);
        if (r == 0) {
                w = conn_begin(c, ZR_MSG_DATASET_OPEN);
                zr_wire_put_bool(w, "writable", writable);
                r = dataset_call(c, ZR_MSG_DATASET_OPEN, fds, 2, writable, ret);
        }
        close_fds(fds, 2);
        return r;
}

int zrc_dataset_create(zrc_conn *c, const char *path, const zrc_schema *schema,
                       const void *dict, size_t dict_size, zrc_dataset **ret) {
        int fds[2] = { -1, -1 };
        bool made_dir = false;
        zr_wire_writer *w;
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
        r = dataset_call(c, ZR_MSG_DATASET_CREATE, fds, dict_size > 0 ? 2 : 1, true, ret);
out:
        close_fds(fds, 2);
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

/* ---- deleting and maintenance ----------------------------------------- */

int dataset_delete_call(zrc_conn *c, uint32_t handle, const uint64_t *indices, size_t n,
                        uint64_t *ret_length) {
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
        zr_wire_put_u64(w, "handle", handle);
        zr_wire_put_u64s(w, "indices", indices, n);
        r = conn_call(c, ZR_MSG_DELETE, NULL, 0, &reply);
        if (r < 0)
                return r;
        *ret_length = conn_get_u64(reply.root, "length");
        conn_reply_done(&reply);
        return 0;
}

int zrc_dataset_delete(zrc_dataset *d, const uint64_t *indices, size_t n,
                       uint64_t *ret_length) {
        int r = dataset_delete_call(d->conn, d->handle, indices, n, &d->length);

        if (r == 0 && ret_length)
                *ret_length = d->length;
        return r;
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

/* STATS or COMPACT: both answer with the dataset's stats. */
static int stats_call(zrc_dataset *d, zr_msg_kind kind, zrc_stats *ret) {
        conn_reply reply = CONN_REPLY_NULL;
        zrc_stats s;
        int r;

        r = handle_call(d, kind, 0, NULL, &reply);
        if (r < 0)
                return r;
        stats_take(&reply, &s);
        conn_reply_done(&reply);
        d->length = s.records;
        if (ret)
                *ret = s;
        return 0;
}

int zrc_dataset_stats(zrc_dataset *d, zrc_stats *ret) {
        return stats_call(d, ZR_MSG_STATS, ret);
}

int zrc_dataset_compact(zrc_dataset *d, zrc_stats *ret) {
        return stats_call(d, ZR_MSG_COMPACT, ret);
}

int zrc_dataset_sync(zrc_dataset *d) {
        return handle_call(d, ZR_MSG_SYNC, 0, NULL, NULL);
}

int zrc_convert(zrc_conn *c, const char *src_path, const char *dst_path, zrc_layout to,
                uint64_t *ret_count, zrc_schema *ret_schema) {
        static const char *const names[] = { "zrecord", "loaderx-1.5.7" };
        conn_reply reply = CONN_REPLY_NULL;
        int fds[3] = { -1, -1, -1 };
        bool made_dir = false;
        zrc_schema schema;
        zr_wire_writer *w;
        int r;

        r = conn_check(c, CONN_FEATURE_CONVERT, ZR_FEATURE_CONVERT);
        if (r < 0)
                return r;
        if (to != ZRC_LAYOUT_ZRECORD && to != ZRC_LAYOUT_LX157)
                return conn_fail(c, EINVAL, "a dataset converts to zrecord's layout or to "
                                 "loaderx 1.5.7's");
        if (!dst_path || !*dst_path)
                return conn_fail(c, EINVAL, "no destination path given");
        r = dataset_open_files(c, src_path, &fds[0]);
        if (r == 0)
                r = dataset_open_meta(c, fds[0], src_path, "meta.zr", false, &fds[1]);
        if (r < 0)
                goto out;
        if (mkdir(dst_path, 0777) == 0)
                made_dir = true;
        else if (errno != EEXIST) {
                r = conn_fail(c, errno, "creating %s: %s", dst_path, strerror(errno));
                goto out;
        }
        r = dataset_open_files(c, dst_path, &fds[2]);
        if (r < 0)
                goto out;
        w = conn_begin(c, ZR_MSG_CONVERT);
        zr_wire_put_str(w, "to", names[to]);
        r = conn_call(c, ZR_MSG_CONVERT, fds, 3, &reply);
        if (r == 0) {
                const msgpack_object *map;

                (void)zr_wire_get_map(reply.root, "schema", &map, NULL);
                r = conn_parse_schema(c, map, &schema);
                if (r == 0 && ret_count)
                        *ret_count = conn_get_u64(reply.root, "count");
                if (r == 0 && ret_schema)
                        *ret_schema = schema;
        }
        conn_reply_done(&reply);
out:
        close_fds(fds, 3);
        if (r < 0 && made_dir)
                (void)rmdir(dst_path); /* fails, harmlessly, if the daemon wrote in it */
        return r;
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

