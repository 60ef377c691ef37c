/* req-store.c: requests about datasets and sets as objects: DATASET_CREATE,
 * DATASET_OPEN, MSSET_OPEN, INFO, CLOSE, the jobs on one dataset (STATS, SYNC,
 * COMPACT, VERIFY), and the daemon's STATUS.
 *
 * Access is proven with descriptors (PROTOCOL.md section 6): the store's
 * directory, and its meta.zr opened O_RDONLY (read) or O_RDWR (write), checked
 * by access mode and by (st_dev, st_ino); for a set, each stream's directory
 * and meta.zr, the directory checked to be the root's child of that name. A
 * new store needs an empty directory the peer owns. Every store is opened
 * read-only; an opener with write access leaves its directory for the first
 * write to make the store writable through (registry.h). Creating runs on the
 * pool; opening a store no client has open
 * too (DATASET_OPEN: a loaderx 1.5.7 schema is a shape list that can be long,
 * registry.h), while MSSET_OPEN opens its streams on the loop thread; STATS and
 * SYNC walk or fsync and run on the pool.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "dataset/rdataset.h"
#include "url.h"
#include "loader/loader.h"
#include "server/access.h"
#include "server/session.h"
#include "server/log.h"
#include "server/request.h"

#define META_FILE "meta.zr"

static int get_writable(zr_request *rq, bool *ret) {
        zr_wire_error werr = {0};
        *ret = false;
        if (zr_wire_find(rq->root, "writable") &&
            zr_wire_get_bool(rq->root, "writable", ret, &werr) < 0)
                return zr_request_fail(rq, ZR_E_PROTO, "%s", werr.message);
        return 0;
}

void zr_put_schema(zr_wire_writer *w, const char *key, const zr_schema *s) {
        zr_wire_begin_map(w, key);
        zr_wire_put_str(w, "kind", s->kind == ZR_SCHEMA_DENSE ? "dense" : "ragged");
        zr_wire_put_str(w, "dtype", s->dtype.str);
        if (s->kind == ZR_SCHEMA_DENSE)
                zr_wire_put_uint_array(w, "item_shape", s->item_shape, s->ndim);
        else
                zr_wire_put_u64(w, "ndim", s->ndim);
        zr_wire_put_str(w, "codec", zr_codec_name(s->codec));
        if (s->layout != ZR_LAYOUT_ZRECORD)
                zr_wire_put_str(w, "layout", zr_layout_name(s->layout));
        if (s->image.formats) { /* an image store's facts (docs/IMAGES.md) */
                zr_wire_begin_map(w, "image");
                zr_wire_begin_array(w, "formats");
                if (s->image.formats & ZR_SCHEMA_IMAGE_JPEG)
                        zr_wire_put_str(w, NULL, "jpeg");
                if (s->image.formats & ZR_SCHEMA_IMAGE_PNG)
                        zr_wire_put_str(w, NULL, "png");
                zr_wire_end(w);
                zr_wire_put_u64(w, "channels", s->image.channels);
                zr_wire_put_u64(w, "height", s->image.height);
                zr_wire_put_u64(w, "width", s->image.width);
                zr_wire_put_u64(w, "max_pixels", s->image.max_pixels);
                zr_wire_end(w);
        }
        zr_wire_end(w);
}

static int reply_dataset(zr_request *rq, uint32_t handle, zr_entry *e, bool writable) {
        zr_wire_writer w;
        zr_reply_begin(rq, &w);
        if (handle)
                zr_wire_put_u64(&w, "handle", handle);
        zr_wire_put_u64(&w, "length", zr_dataset_length(e->ds));
        zr_put_schema(&w, "schema", zr_dataset_schema(e->ds));
        zr_wire_put_bool(&w, "has_dict", zr_dataset_has_dict(e->ds));
        zr_wire_put_bool(&w, "writable", writable);
        return zr_reply_send(rq, &w, NULL, 0);
}

static int add_dataset_handle(zr_request *rq, zr_entry *e, bool writable) {
        zr_handle h = {.type = ZR_HANDLE_DATASET, .writable = writable, .entry = e};
        int id = zr_request_add_handle(rq, &h);
        if (id < 0)
                zr_entry_unref(e);
        return id;
}

/* ---- DATASET_CREATE ------------------------------------------------------ */

static int parse_schema(zr_request *rq, const msgpack_object *map, zr_schema *ret) {
        zr_wire_error werr = {0};
        zr_error err = {0};
        const char *kind, *dtype_p, *codec_p;
        size_t kind_len, dtype_len, codec_len;
        char dtype[ZR_DTYPE_STR_MAX + 1];
        enum zr_codec codec;
        int r;

        if (zr_wire_get_str(map, "kind", &kind, &kind_len, &werr) < 0 ||
            zr_wire_get_str(map, "dtype", &dtype_p, &dtype_len, &werr) < 0 ||
            zr_wire_get_str(map, "codec", &codec_p, &codec_len, &werr) < 0)
                return zr_request_fail(rq, ZR_E_PROTO, "schema: %s", werr.message);
        r = zr_codec_parse(codec_p, codec_len, &codec, &err);
        if (r < 0)
                return zr_request_fail(rq, -r, "schema: %s", err.message);
        if (dtype_len > ZR_DTYPE_STR_MAX || memchr(dtype_p, 0, dtype_len))
                return zr_request_fail(rq, ZR_E_SCHEMA, "schema: dtype '%.*s' is not a dtype",
                                       (int)(dtype_len > 16 ? 16 : dtype_len), dtype_p);
        memcpy(dtype, dtype_p, dtype_len);
        dtype[dtype_len] = 0;
        if (kind_len == 5 && memcmp(kind, "dense", 5) == 0) {
                const msgpack_object *items;
                uint32_t n;
                uint64_t shape[ZR_SCHEMA_NDIM_MAX];
                if (!zr_wire_find(map, "item_shape"))
                        return zr_request_fail(rq, ZR_E_SCHEMA, "schema: a dense schema needs "
                                               "item_shape");
                if (zr_wire_get_array(map, "item_shape", &items, &n, &werr) < 0)
                        return zr_request_fail(rq, ZR_E_PROTO, "schema: %s", werr.message);
                if (n > ZR_SCHEMA_NDIM_MAX)
                        return zr_request_fail(rq, ZR_E_SCHEMA, "schema: item_shape has %u "
                                               "dimensions, at most %d", n, ZR_SCHEMA_NDIM_MAX);
                for (uint32_t i = 0; i < n; i++)
                        shape[i] = items[i].via.u64;
                r = zr_schema_init_dense(ret, dtype, shape, n, codec, &err);
        } else if (kind_len == 6 && memcmp(kind, "ragged", 6) == 0) {
                uint32_t ndim;
                if (!zr_wire_find(map, "ndim"))
                        return zr_request_fail(rq, ZR_E_SCHEMA, "schema: a ragged schema needs "
                                               "ndim");
                if (zr_wire_get_u32(map, "ndim", &ndim, &werr) < 0)
                        return zr_request_fail(rq, ZR_E_PROTO, "schema: %s", werr.message);
                r = zr_schema_init_ragged(ret, dtype, ndim, codec, &err);
        } else {
                return zr_request_fail(rq, ZR_E_SCHEMA, "schema: kind '%.*s' is neither "
                                       "\"dense\" nor \"ragged\"",
                                       (int)(kind_len > 16 ? 16 : kind_len), kind);
        }
        if (r < 0)
                return zr_request_fail(rq, -r, "schema: %s", err.message);
        if (zr_wire_find(map, "layout")) {
                const char *lay;
                size_t lay_len;
                if (zr_wire_get_str(map, "layout", &lay, &lay_len, &werr) < 0)
                        return zr_request_fail(rq, ZR_E_PROTO, "schema: %s", werr.message);
                if (lay_len == 5 && memcmp(lay, "bytes", 5) == 0)
                        ret->layout = ZR_LAYOUT_BYTES;
                else if (!(lay_len == 7 && memcmp(lay, "zrecord", 7) == 0))
                        return zr_request_fail(rq, ZR_E_SCHEMA, "schema: layout '%.*s': a new "
                                               "store is \"zrecord\" or \"bytes\" (CONVERT "
                                               "makes loaderx 1.5.7's ragged layout)",
                                               (int)(lay_len > 16 ? 16 : lay_len), lay);
        }
        return 0;
}

typedef struct create_state {
        zr_pool *pool;
        int dirfd;
        struct stat st;
        zr_schema schema;
        zr_shm dict;
        uint64_t dict_bytes;
        zr_dataset *ds;
} create_state;

static void create_state_free(void *p) {
        create_state *st = p;
        zr_dataset_close(st->ds, NULL);
        zr_shm_release(&st->dict);
        free(st);
}

/* On the pool: the schema file and the store's files, fsyncs included. */
static void create_run(zr_job *job) {
        zr_request *rq = (zr_request *)job;
        create_state *st = rq->state;
        rq->result = zr_registry_create_dataset(st->pool, st->dirfd, &st->schema, st->dict.data,
                                                (size_t)st->dict_bytes, &st->ds, &rq->err);
}

static void create_done(zr_job *job) {
        zr_request *rq = (zr_request *)job;
        create_state *st = rq->state;
        zr_server *srv = zr_request_server(rq);
        zr_entry *e = NULL;
        int r = rq->result;
        if (r == 0 && !zr_request_orphaned(rq)) {
                zr_dataset *ds = st->ds;
                st->ds = NULL;
                r = zr_registry_insert(srv->registry, ds, st->st.st_dev, st->st.st_ino, &e,
                                       &rq->err);
                if (r == 0) {
                        int id = add_dataset_handle(rq, e, true);
                        if (id < 0) {
                                r = id;
                        } else {
                                zr_log(LOG_INFO, "pid %d created store %llu",
                                       (int)zr_request_pid(rq), (unsigned long long)zr_entry_id(e));
                                r = reply_dataset(rq, (uint32_t)id, e, true);
                        }
                }
        }
        zr_request_complete(rq, r);
}

int zr_handle_dataset_create(zr_request *rq) {
        zr_server *srv = zr_request_server(rq);
        zr_wire_error werr = {0};
        const msgpack_object *smap;
        bool has_dict = zr_wire_find(rq->root, "dict_bytes") != NULL;
        int dirfd = rq->fds[0], r;

        r = zr_access_dir(rq, dirfd, "the new store directory");
        if (r < 0)
                return r;
        create_state *st = zr_request_state(rq, sizeof(*st), create_state_free);
        if (!st)
                return -ENOMEM;
        st->dict.fd = -1;
        st->dirfd = dirfd; /* stays in rq->fds until the request is freed */
        st->pool = zr_registry_pool(srv->registry);
        if (zr_wire_get_map(rq->root, "schema", &smap, &werr) < 0)
                return zr_request_fail(rq, ZR_E_PROTO, "%s", werr.message);
        r = parse_schema(rq, smap, &st->schema);
        if (r < 0)
                return r;
        if (has_dict) {
                if (zr_wire_get_u64(rq->root, "dict_bytes", &st->dict_bytes, &werr) < 0)
                        return zr_request_fail(rq, ZR_E_PROTO, "%s", werr.message);
                if (st->schema.codec != ZR_CODEC_ZSTD_DICT)
                        return zr_request_fail(rq, EINVAL, "a dictionary was given for a %s "
                                               "store: only zstd_dict stores take one",
                                               zr_codec_name(st->schema.codec));
                if (st->dict_bytes == 0 || st->dict_bytes > SIZE_MAX)
                        return zr_request_fail(rq, EINVAL, "dict_bytes is %llu",
                                               (unsigned long long)st->dict_bytes);
        }
        r = zr_access_new_dir(rq, dirfd);
        if (r < 0)
                return r;
        if (fstat(dirfd, &st->st) < 0)
                return zr_request_fail(rq, errno, "fstat of the new directory: %s",
                                       strerror(errno));
        if (has_dict) {
                r = zr_shm_map_sealed(zr_request_take_fd(rq, 1), (size_t)st->dict_bytes,
                                      &st->dict, &rq->err);
                if (r < 0)
                        return r;
        }
        return zr_request_submit(rq, create_run, create_done);
}

/* ---- DATASET_OPEN -------------------------------------------------------- */

typedef struct open_state {
        zr_registry *reg;
        struct stat st;
        bool writable;
        zr_dataset *ds;
} open_state;

static void open_state_free(void *p) {
        open_state *st = p;
        if (st->ds)
                zr_registry_abandon(st->reg, st->ds, &st->st);
        free(st);
}

/* The handle of an open of e, and the reply. A writable one leaves its
 * directory with e, which its first write makes the store writable through
 * (registry.h). */
static int open_reply(zr_request *rq, zr_entry *e, bool writable) {
        if (writable)
                zr_entry_offer_write_dir(e, rq->fds[0]);
        int id = add_dataset_handle(rq, e, writable);
        return id < 0 ? id : reply_dataset(rq, (uint32_t)id, e, writable);
}

/* On the pool: the store's files and its schema, which can be large (registry.h). */
static void open_run(zr_job *job) {
        zr_request *rq = (zr_request *)job;
        open_state *st = rq->state;
        rq->result = zr_registry_open_job(st->reg, rq->fds[0], &st->st, &st->ds, &rq->err);
}

static void open_done(zr_job *job) {
        zr_request *rq = (zr_request *)job;
        open_state *st = rq->state;
        zr_server *srv = zr_request_server(rq);
        zr_entry *e = NULL;
        int r = rq->result;

        if (r == -ZR_E_LOCKED) {
                /* an entry holds it (a concurrent open of it won): take that */
                e = zr_registry_lookup(srv->registry, rq->fds[0], NULL, NULL);
                if (e)
                        r = 0;
        }
        if (r == 0 && !e && !zr_request_orphaned(rq)) {
                zr_dataset *ds = st->ds;
                st->ds = NULL;
                r = zr_registry_adopt(srv->registry, ds, &st->st, &e, &rq->err);
        }
        if (r == 0 && e)
                r = open_reply(rq, e, st->writable);
        zr_request_complete(rq, r);
}

/* ---- DATASET_OPEN of a store in object storage (docs/REMOTE.md) ------------ */

typedef struct ropen_state {
        zr_remote *ctx;
        zr_registry *reg;
        zr_remote_spec spec;
        char url[S3_PREFIX_MAX + S3_BUCKET_MAX + 8];
        char endpoint[S3_ENDPOINT_MAX];
        char region[S3_REGION_MAX];
        zr_rcheck *check;
        struct stat st;
        zr_dataset *ds;
} ropen_state;

static void ropen_state_free(void *p) {
        ropen_state *st = p;
        if (st->ds)
                zr_registry_abandon(st->reg, st->ds, &st->st);
        zr_rcheck_free(st->check);
        s3_wipe(&st->spec.creds, sizeof(st->spec.creds));
        free(st);
}

/* A string field of the remote map into buf (NUL-free, shorter than n). */
static int remote_str(zr_request *rq, const msgpack_object *map, const char *key, char *buf,
                      size_t n) {
        zr_wire_error werr = {0};
        const char *p;
        size_t len;
        buf[0] = 0;
        if (!zr_wire_find(map, key))
                return 0;
        if (zr_wire_get_str(map, key, &p, &len, &werr) < 0)
                return zr_request_fail(rq, ZR_E_PROTO, "remote: %s", werr.message);
        if (len >= n || memchr(p, 0, len))
                return zr_request_fail(rq, EINVAL, "remote: %s is longer than %zu bytes or "
                                       "holds a NUL", key, n - 1);
        memcpy(buf, p, len);
        buf[len] = 0;
        return 0;
}

/* The remote map of DATASET_OPEN or MSSET_OPEN into st (the credentials are
 * never logged, and wiped with the state). */
static int parse_remote(zr_request *rq, ropen_state *st) {
        zr_server *srv = zr_request_server(rq);
        zr_wire_error werr = {0};
        const msgpack_object *map;
        char addr[16];
        int r;

        if (!zr_request_has_feature(rq, ZR_FEATURE_REMOTE))
                return zr_request_fail(rq, ZR_E_UNKNOWN, "remote: the \"remote\" feature is not "
                                       "in force (HELLO)");
        if (!srv->remote)
                return zr_request_fail(rq, EPERM, "%s", srv->remote_error);
        if (zr_wire_get_map(rq->root, "remote", &map, &werr) < 0)
                return zr_request_fail(rq, ZR_E_PROTO, "%s", werr.message);
        st->ctx = srv->remote;
        st->reg = srv->registry;
        if ((r = remote_str(rq, map, "url", st->url, sizeof(st->url))) < 0 ||
            (r = remote_str(rq, map, "endpoint", st->endpoint, sizeof(st->endpoint))) < 0 ||
            (r = remote_str(rq, map, "region", st->region, sizeof(st->region))) < 0 ||
            (r = remote_str(rq, map, "addressing", addr, sizeof(addr))) < 0 ||
            (r = remote_str(rq, map, "access_key", st->spec.creds.access_key,
                            sizeof(st->spec.creds.access_key))) < 0 ||
            (r = remote_str(rq, map, "secret_key", st->spec.creds.secret_key,
                            sizeof(st->spec.creds.secret_key))) < 0 ||
            (r = remote_str(rq, map, "session_token", st->spec.creds.session_token,
                            sizeof(st->spec.creds.session_token))) < 0)
                return r;
        if (!addr[0] || strcmp(addr, "auto") == 0)
                st->spec.addressing = S3_ADDR_AUTO;
        else if (strcmp(addr, "path") == 0)
                st->spec.addressing = S3_ADDR_PATH;
        else if (strcmp(addr, "virtual") == 0)
                st->spec.addressing = S3_ADDR_VIRTUAL;
        else
                return zr_request_fail(rq, EINVAL, "remote: addressing is path, virtual or "
                                       "auto, not '%.16s'", addr);
        if (st->spec.creds.access_key[0] && !st->spec.creds.secret_key[0])
                return zr_request_fail(rq, EINVAL, "remote: an access_key without its "
                                       "secret_key");
        st->spec.url = st->url;
        st->spec.endpoint = st->endpoint;
        st->spec.region = st->region;
        return 0;
}

static int add_remote_handle(zr_request *rq, zr_entry *e, const zr_rcheck *c) {
        int64_t cred = zr_rdataset_attach(e->ds, c, &rq->err);
        if (cred < 0) {
                zr_entry_unref(e);
                return (int)cred;
        }
        zr_handle h = {.type = ZR_HANDLE_DATASET, .entry = e, .remote_creds = (uint64_t)cred};
        int id = zr_request_add_handle(rq, &h);
        if (id < 0) {
                zr_rdataset_detach(e->ds, (uint64_t)cred);
                zr_entry_unref(e);
        }
        return id;
}

static int ropen_opener(void *arg, zr_pool *pool, int dirfd, zr_dataset **ret, zr_error *err) {
        ropen_state *st = arg;
        (void)dirfd;
        return zr_remote_open(st->ctx, st->check, pool, ret, err);
}

static void ropen_run(zr_job *job) {
        zr_request *rq = (zr_request *)job;
        ropen_state *st = rq->state;
        rq->result = zr_registry_open_job_with(st->reg, zr_rcheck_dirfd(st->check), &st->st,
                                               ropen_opener, st, &st->ds, &rq->err);
}

static void ropen_done(zr_job *job) {
        zr_request *rq = (zr_request *)job;
        ropen_state *st = rq->state;
        zr_server *srv = zr_request_server(rq);
        zr_entry *e = NULL;
        int r = rq->result;

        if (r == -ZR_E_LOCKED) {
                e = zr_registry_lookup(srv->registry, zr_rcheck_dirfd(st->check), NULL, NULL);
                if (e) {
                        r = 0;
                        memset(&rq->err, 0, sizeof(rq->err));
                }
        }
        if (r == 0 && !e && !zr_request_orphaned(rq)) {
                zr_dataset *ds = st->ds;
                st->ds = NULL;
                r = zr_registry_adopt(srv->registry, ds, &st->st, &e, &rq->err);
                if (r == 0)
                        zr_log(LOG_INFO, "pid %d opened %s as store %llu", (int)zr_request_pid(rq),
                               st->url, (unsigned long long)zr_entry_id(e));
        }
        if (r == 0 && e) {
                int id = add_remote_handle(rq, e, st->check);
                r = id < 0 ? id : reply_dataset(rq, (uint32_t)id, e, false);
        }
        zr_request_complete(rq, r);
}

/* On the pool: the manifest and a HEAD of every object, with the client's own
 * credentials (the credentials rule), for every open. */
static void rcheck_run(zr_job *job) {
        zr_request *rq = (zr_request *)job;
        ropen_state *st = rq->state;
        rq->result = zr_remote_check(st->ctx, &st->spec, &st->check, &rq->err);
}

static void rcheck_done(zr_job *job) {
        zr_request *rq = (zr_request *)job;
        ropen_state *st = rq->state;
        zr_server *srv = zr_request_server(rq);
        int r = rq->result;

        if (r == 0 && !zr_request_orphaned(rq)) {
                zr_entry *e = zr_registry_lookup(srv->registry, zr_rcheck_dirfd(st->check),
                                                 &st->st, &rq->err);
                if (e) { /* open already, for another client: this one was checked */
                        int id = add_remote_handle(rq, e, st->check);
                        r = id < 0 ? id : reply_dataset(rq, (uint32_t)id, e, false);
                } else if (rq->err.code) {
                        r = -rq->err.code;
                } else {
                        zr_request_chain(rq, ropen_run, ropen_done);
                        return;
                }
        }
        zr_request_complete(rq, r);
}

static int open_remote(zr_request *rq, bool writable) {
        ropen_state *st;
        int r;

        if (writable)
                return zr_request_fail(rq, ZR_E_READONLY, "a store in object storage is "
                                       "read-only: pull it (zrecord pull) to write to it");
        st = zr_request_state(rq, sizeof(*st), ropen_state_free);
        if (!st)
                return -ENOMEM;
        r = parse_remote(rq, st);
        if (r < 0)
                return r;
        return zr_request_submit(rq, rcheck_run, rcheck_done);
}

int zr_handle_dataset_open(zr_request *rq) {
        zr_server *srv = zr_request_server(rq);
        bool writable;
        zr_entry *e;
        int r;

        r = get_writable(rq, &writable);
        if (r < 0)
                return r;
        if (zr_wire_find(rq->root, "remote"))
                return open_remote(rq, writable);
        r = zr_access_dir(rq, rq->fds[0], "the store directory");
        if (r < 0)
                return r;
        r = zr_access_proof(rq, rq->fds[0], rq->fds[1], writable, "the store");
        if (r < 0)
                return r;
        open_state *st = zr_request_state(rq, sizeof(*st), open_state_free);
        if (!st)
                return -ENOMEM;
        st->reg = srv->registry;
        st->writable = writable;
        e = zr_registry_lookup(srv->registry, rq->fds[0], &st->st, &rq->err);
        if (e) /* open already: no file to read */
                return open_reply(rq, e, writable);
        if (rq->err.code)
                return -rq->err.code;
        return zr_request_submit(rq, open_run, open_done);
}

/* ---- MSSET_OPEN ---------------------------------------------------------- */

static int name_cmp(const void *a, const void *b) {
        return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The names of root's children that hold a meta.zr, sorted (*ret, *ret_n). */
static int list_stores(zr_request *rq, int rootfd, char ***ret, size_t *ret_n) {
        char **names = NULL;
        size_t n = 0, cap = 0;
        int r = 0;
        int dfd = openat(rootfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        DIR *d = dfd >= 0 ? fdopendir(dfd) : NULL;
        if (!d) {
                if (dfd >= 0)
                        close(dfd);
                return zr_request_fail(rq, errno, "reading the set's directory: %s",
                                       strerror(errno));
        }
        struct dirent *de;
        while ((de = readdir(d))) {
                struct stat st;
                char path[ZR_STREAM_NAME_MAX + sizeof("/" META_FILE)];
                if (de->d_name[0] == '.')
                        continue;
                snprintf(path, sizeof(path), "%s/" META_FILE, de->d_name);
                if (fstatat(rootfd, path, &st, AT_SYMLINK_NOFOLLOW) < 0)
                        continue;
                if (n >= 4 * ZR_STREAMS_MAX) {
                        r = zr_request_fail(rq, ZR_E_LIMIT, "the set's directory holds more "
                                            "than %d stores", 4 * ZR_STREAMS_MAX);
                        break;
                }
                if (n == cap) {
                        cap = cap ? cap * 2 : 8;
                        char **nn = realloc(names, cap * sizeof(*nn));
                        if (!nn) {
                                r = zr_request_fail(rq, ENOMEM, "listing the set");
                                break;
                        }
                        names = nn;
                }
                names[n] = strdup(de->d_name);
                if (!names[n]) {
                        r = zr_request_fail(rq, ENOMEM, "listing the set");
                        break;
                }
                n++;
        }
        closedir(d);
        if (r < 0) {
                for (size_t i = 0; i < n; i++)
                        free(names[i]);
                free(names);
                return r;
        }
        if (n)
                qsort(names, n, sizeof(*names), name_cmp);
        *ret = names;
        *ret_n = n;
        return 0;
}

static bool in_list(char **names, size_t n, const char *p, size_t len) {
        for (size_t i = 0; i < n; i++)
                if (strlen(names[i]) == len && memcmp(names[i], p, len) == 0)
                        return true;
        return false;
}

/* The set's handles (one per stream, then the set's) and the reply; frees set
 * on failure. */
static int add_remote_handle(zr_request *rq, zr_entry *e, const zr_rcheck *c);

/* checks: NULL, or a remote set's streams' checks (each handle then carries its
 * stream's credentials). */
static int msset_reply_lengths(zr_request *rq, zr_set *set, bool writable,
                               zr_rcheck *const *checks, const uint64_t *lengths);

static int msset_reply_checked(zr_request *rq, zr_set *set, bool writable,
                               zr_rcheck *const *checks) {
        return msset_reply_lengths(rq, set, writable, checks, NULL);
}

/* lengths: NULL, or each stream's length as read under the streams' locks
 * (the reply's, so that it names one moment of a set being appended to). */
static int msset_reply_lengths(zr_request *rq, zr_set *set, bool writable,
                               zr_rcheck *const *checks, const uint64_t *lengths) {
        uint32_t n = set->n;
        uint64_t len0 = lengths ? lengths[0] : zr_dataset_length(set->entries[0]->ds);
        int r;

        /* A handle per stream, then the set's. */
        for (uint32_t i = 0; i < n; i++) {
                int id = checks ? add_remote_handle(rq, zr_entry_ref(set->entries[i]), checks[i])
                                : add_dataset_handle(rq, zr_entry_ref(set->entries[i]), writable);
                if (id < 0) {
                        r = id;
                        for (uint32_t j = 0; j < i; j++)
                                zr_request_close_handle(rq, set->handles[j]);
                        goto fail;
                }
                set->handles[i] = (uint32_t)id;
        }
        zr_handle h = {.type = ZR_HANDLE_SET, .writable = writable, .set = set};
        int sid = zr_request_add_handle(rq, &h);
        if (sid < 0) {
                r = sid;
                for (uint32_t j = 0; j < n; j++)
                        zr_request_close_handle(rq, set->handles[j]);
                goto fail;
        }
        zr_wire_writer w;
        zr_reply_begin(rq, &w);
        zr_wire_put_u64(&w, "set", (uint64_t)sid);
        zr_wire_put_u64(&w, "length", len0);
        zr_wire_put_bool(&w, "writable", writable);
        zr_wire_begin_array(&w, "streams");
        for (uint32_t i = 0; i < n; i++) {
                zr_dataset *ds = set->entries[i]->ds;
                zr_wire_begin_map(&w, NULL);
                zr_wire_put_str(&w, "name", set->names[i]);
                zr_wire_put_u64(&w, "handle", set->handles[i]);
                zr_wire_put_u64(&w, "length", lengths ? lengths[i] : zr_dataset_length(ds));
                zr_put_schema(&w, "schema", zr_dataset_schema(ds));
                zr_wire_put_bool(&w, "has_dict", zr_dataset_has_dict(ds));
                zr_wire_end(&w);
        }
        zr_wire_end(&w);
        return zr_reply_send(rq, &w, NULL, 0);
fail:
        zr_set_free(set);
        return r;
}


/* ---- MSSET_OPEN of a set in object storage ------------------------------------ */

typedef struct rset_state {
        ropen_state base;              /* the root: ctx, registry, the client's spec */
        uint32_t n;
        char *names[ZR_STREAMS_MAX];
        char urls[ZR_STREAMS_MAX][S3_PREFIX_MAX + S3_BUCKET_MAX + 264];
        zr_rcheck *checks[ZR_STREAMS_MAX];
        struct stat st[ZR_STREAMS_MAX];
        zr_dataset *ds[ZR_STREAMS_MAX];
        zr_entry *entries[ZR_STREAMS_MAX];
        int results[ZR_STREAMS_MAX];
        zr_error errs[ZR_STREAMS_MAX];
} rset_state;

static void rset_state_free(void *p) {
        rset_state *st = p;
        for (uint32_t i = 0; i < st->n; i++) {
                if (st->ds[i])
                        zr_registry_abandon(st->base.reg, st->ds[i], &st->st[i]);
                zr_entry_unref(st->entries[i]);
                zr_rcheck_free(st->checks[i]);
                free(st->names[i]);
        }
        zr_rcheck_free(st->base.check);
        s3_wipe(&st->base.spec.creds, sizeof(st->base.spec.creds));
        free(st);
}

/* On the pool: the set's streams (its zrecord.set, unless the client named
 * them), then the credentials rule for each. */
static void rset_check_run(zr_job *job) {
        zr_request *rq = (zr_request *)job;
        rset_state *st = rq->state;
        int r = 0;

        if (st->n == 0) {
                char **names = NULL;
                size_t n = 0;
                r = zr_remote_get_set(st->base.ctx, &st->base.spec, &names, &n, &rq->err);
                for (size_t i = 0; r == 0 && i < n; i++)
                        st->names[st->n++] = names[i];
                free(names);
        }
        for (uint32_t i = 0; r == 0 && i < st->n; i++) {
                zr_remote_spec spec = st->base.spec;
                int k = snprintf(st->urls[i], sizeof(st->urls[i]), "%.1090s/%.255s", st->base.url,
                                 st->names[i]);
                if (k < 0 || (size_t)k >= sizeof(st->urls[i])) {
                        r = zr_error_set(&rq->err, ENAMETOOLONG, "the URL of stream %s is too "
                                         "long", st->names[i]);
                        break;
                }
                spec.url = st->urls[i];
                r = zr_remote_check(st->base.ctx, &spec, &st->checks[i], &rq->err);
        }
        rq->result = r;
}

static int rset_opener(void *arg, zr_pool *pool, int dirfd, zr_dataset **ret, zr_error *err) {
        ropen_state *o = arg;
        (void)dirfd;
        return zr_remote_open(o->ctx, o->check, pool, ret, err);
}

/* On the pool: the streams no client had open. */
static void rset_open_run(zr_job *job) {
        zr_request *rq = (zr_request *)job;
        rset_state *st = rq->state;
        for (uint32_t i = 0; i < st->n; i++) {
                if (st->entries[i])
                        continue;
                ropen_state o = { .ctx = st->base.ctx, .check = st->checks[i] };
                st->results[i] = zr_registry_open_job_with(st->base.reg,
                                                           zr_rcheck_dirfd(st->checks[i]),
                                                           &st->st[i], rset_opener, &o,
                                                           &st->ds[i], &st->errs[i]);
        }
}

/* The set, once every stream has its entry. */
static int rset_reply(zr_request *rq, rset_state *st) {
        zr_set *set = calloc(1, sizeof(*set));
        uint64_t len0 = zr_dataset_length(st->entries[0]->ds);

        for (uint32_t i = 1; i < st->n; i++)
                if (zr_dataset_length(st->entries[i]->ds) != len0) {
                        zr_set_free(set);
                        return zr_request_fail(rq, ZR_E_MISALIGNED, "%s: stream %s has %llu "
                                               "records, stream %s %llu", st->base.url,
                                               st->names[0], (unsigned long long)len0,
                                               st->names[i], (unsigned long long)
                                               zr_dataset_length(st->entries[i]->ds));
                }
        if (set) {
                set->names = calloc(st->n, sizeof(char *));
                set->entries = calloc(st->n, sizeof(zr_entry *));
                set->handles = calloc(st->n, sizeof(uint32_t));
        }
        if (!set || !set->names || !set->entries || !set->handles) {
                zr_set_free(set);
                return -ENOMEM;
        }
        set->n = st->n;
        for (uint32_t i = 0; i < st->n; i++) {
                set->names[i] = st->names[i];
                st->names[i] = NULL;
                set->entries[i] = st->entries[i];
                st->entries[i] = NULL;
        }
        return msset_reply_checked(rq, set, false, st->checks);
}

static void rset_open_done(zr_job *job) {
        zr_request *rq = (zr_request *)job;
        rset_state *st = rq->state;
        zr_server *srv = zr_request_server(rq);
        int r = 0;

        for (uint32_t i = 0; i < st->n && !zr_request_orphaned(rq); i++) {
                if (st->entries[i])
                        continue;
                int ri = st->results[i];
                if (ri == -ZR_E_LOCKED) {
                        st->entries[i] = zr_registry_lookup(srv->registry,
                                                            zr_rcheck_dirfd(st->checks[i]), NULL,
                                                            NULL);
                        if (st->entries[i])
                                continue;
                }
                if (ri == 0 && st->ds[i]) {
                        zr_dataset *ds = st->ds[i];
                        st->ds[i] = NULL;
                        ri = zr_registry_adopt(srv->registry, ds, &st->st[i], &st->entries[i],
                                               &st->errs[i]);
                }
                if (ri < 0 && r == 0) {
                        r = ri;
                        rq->err = st->errs[i];
                }
        }
        if (r == 0 && !zr_request_orphaned(rq))
                r = rset_reply(rq, st);
        zr_request_complete(rq, r);
}

static void rset_check_done(zr_job *job) {
        zr_request *rq = (zr_request *)job;
        rset_state *st = rq->state;
        zr_server *srv = zr_request_server(rq);
        int r = rq->result;
        bool all = true;

        for (uint32_t i = 0; r == 0 && i < st->n && !zr_request_orphaned(rq); i++) {
                st->entries[i] = zr_registry_lookup(srv->registry, zr_rcheck_dirfd(st->checks[i]),
                                                    &st->st[i], &rq->err);
                if (!st->entries[i] && rq->err.code)
                        r = -rq->err.code;
                all &= st->entries[i] != NULL;
        }
        if (r == 0 && !zr_request_orphaned(rq)) {
                if (!all) {
                        zr_request_chain(rq, rset_open_run, rset_open_done);
                        return;
                }
                r = rset_reply(rq, st);
        }
        zr_request_complete(rq, r);
}

static int msset_open_remote(zr_request *rq, bool writable) {
        zr_wire_error werr = {0};
        rset_state *st;
        int r;

        if (writable)
                return zr_request_fail(rq, ZR_E_READONLY, "a set in object storage is "
                                       "read-only: pull it (zrecord pull) to write to it");
        st = zr_request_state(rq, sizeof(*st), rset_state_free);
        if (!st)
                return -ENOMEM;
        r = parse_remote(rq, &st->base);
        if (r < 0)
                return r;
        if (zr_wire_find(rq->root, "streams")) {
                const msgpack_object *items;
                uint32_t n;
                if (zr_wire_get_array(rq->root, "streams", &items, &n, &werr) < 0)
                        return zr_request_fail(rq, ZR_E_PROTO, "%s", werr.message);
                if (n < 1 || n > ZR_STREAMS_MAX)
                        return zr_request_fail(rq, ZR_E_PROTO, "field 'streams': %u names, 1..%d "
                                               "allowed", n, ZR_STREAMS_MAX);
                for (uint32_t i = 0; i < n; i++) {
                        const msgpack_object_str *sv = &items[i].via.str;
                        if (sv->size == 0 || sv->size > ZR_STREAM_NAME_MAX ||
                            memchr(sv->ptr, '/', sv->size) || memchr(sv->ptr, 0, sv->size))
                                return zr_request_fail(rq, EINVAL, "stream %u is not a name", i);
                        st->names[i] = strndup(sv->ptr, sv->size);
                        if (!st->names[i])
                                return -ENOMEM;
                        st->n = i + 1;
                }
        }
        return zr_request_submit(rq, rset_check_run, rset_check_done);
}

/* A local set's streams are compared on the pool, under their locks (shared,
 * in the lock order), for MSSET_OPEN and for INFO of a set: an APPEND through
 * a set writes its streams one after the other under their exclusive locks, so
 * lengths read without them can differ while another client appends, and the
 * set would be refused as misaligned when it is not. */
typedef struct mset_state {
        zr_set *set;                       /* MSSET_OPEN: the set, until its reply */
        bool writable;
        uint32_t n;
        zr_entry *entries[ZR_STREAMS_MAX]; /* a reference each */
        uint64_t lengths[ZR_STREAMS_MAX];
} mset_state;

static void mset_state_free(void *p) {
        mset_state *st = p;
        for (uint32_t i = 0; i < st->n; i++)
                zr_entry_unref(st->entries[i]);
        zr_set_free(st->set);
        free(st);
}

static int dataset_id_cmp(const void *a, const void *b) {
        uint64_t x = zr_dataset_id(*(zr_dataset *const *)a);
        uint64_t y = zr_dataset_id(*(zr_dataset *const *)b);
        return x < y ? -1 : x > y;
}

static void mset_lengths_run(zr_job *job) {
        zr_request *rq = (zr_request *)job;
        mset_state *st = rq->state;
        zr_dataset *locked[ZR_STREAMS_MAX];
        uint32_t k = 0;

        for (uint32_t i = 0; i < st->n; i++)
                locked[i] = st->entries[i]->ds;
        qsort(locked, st->n, sizeof(*locked), dataset_id_cmp);
        for (uint32_t i = 0; i < st->n; i++) /* once each: never shared twice by one thread */
                if (i == 0 || locked[i] != locked[k - 1])
                        locked[k++] = locked[i];
        for (uint32_t i = 0; i < k; i++)
                zr_dataset_lock(locked[i], false);
        for (uint32_t i = 0; i < st->n; i++)
                st->lengths[i] = zr_dataset_length(st->entries[i]->ds);
        for (uint32_t i = k; i-- > 0;)
                zr_dataset_unlock(locked[i]);
}

/* Submits mset_lengths_run() for set's streams, then done(). */
static int mset_lengths_submit(zr_request *rq, zr_set *set, bool own, bool writable,
                               zr_job_fn done) {
        mset_state *st = zr_request_state(rq, sizeof(*st), mset_state_free);
        if (!st) {
                if (own)
                        zr_set_free(set);
                return -ENOMEM;
        }
        st->set = own ? set : NULL;
        st->writable = writable;
        for (uint32_t i = 0; i < set->n; i++)
                st->entries[st->n++] = zr_entry_ref(set->entries[i]);
        return zr_request_submit(rq, mset_lengths_run, done);
}

/* ZR_E_MISALIGNED naming every stream and its length, or 0. */
static int mset_check_aligned(zr_request *rq, const zr_set *set, const uint64_t *lengths) {
        bool aligned = true;
        for (uint32_t i = 1; i < set->n; i++)
                aligned &= lengths[i] == lengths[0];
        if (aligned)
                return 0;
        char buf[ZR_ERROR_MESSAGE_MAX];
        size_t k = 0;
        for (uint32_t i = 0; i < set->n && k < sizeof(buf); i++)
                k += (size_t)snprintf(buf + k, sizeof(buf) - k, "%s%s=%llu", i ? ", " : "",
                                      set->names[i], (unsigned long long)lengths[i]);
        return zr_request_fail(rq, ZR_E_MISALIGNED, "streams differ in length: %s", buf);
}

static void mset_open_done(zr_job *job) {
        zr_request *rq = (zr_request *)job;
        mset_state *st = rq->state;
        zr_set *set = st->set;
        int r = 0;

        if (!zr_request_orphaned(rq))
                r = mset_check_aligned(rq, set, st->lengths);
        if (r == 0 && !zr_request_orphaned(rq)) {
                /* as a dataset's (open_reply()): each stream through its directory */
                for (uint32_t i = 0; st->writable && i < set->n; i++)
                        zr_entry_offer_write_dir(set->entries[i], rq->fds[1 + 2 * i]);
                st->set = NULL; /* the reply's now, freed by it on failure */
                r = msset_reply_lengths(rq, set, st->writable, NULL, st->lengths);
        }
        zr_request_complete(rq, r);
}

int zr_handle_msset_open(zr_request *rq) {
        zr_server *srv = zr_request_server(rq);
        zr_wire_error werr = {0};
        const msgpack_object *items;
        uint32_t n;
        bool writable;
        char **found = NULL;
        size_t nfound = 0;
        zr_set *set = NULL;
        int r;

        r = get_writable(rq, &writable);
        if (r < 0)
                return r;
        if (zr_wire_find(rq->root, "remote"))
                return msset_open_remote(rq, writable);
        if (zr_wire_get_array(rq->root, "streams", &items, &n, &werr) < 0)
                return zr_request_fail(rq, ZR_E_PROTO, "%s", werr.message);
        if (n < 1 || n > ZR_STREAMS_MAX)
                return zr_request_fail(rq, ZR_E_PROTO, "field 'streams': %u names, 1..%d allowed",
                                       n, ZR_STREAMS_MAX);
        for (uint32_t i = 0; i < n; i++) {
                const msgpack_object_str *s = &items[i].via.str;
                if (s->size == 0 || s->size > ZR_STREAM_NAME_MAX || memchr(s->ptr, '/', s->size) ||
                    memchr(s->ptr, 0, s->size) || s->ptr[0] == '.')
                        return zr_request_fail(rq, EINVAL, "field 'streams': element %u is not a "
                                               "stream name", i);
                for (uint32_t j = 0; j < i; j++)
                        if (items[j].via.str.size == s->size &&
                            memcmp(items[j].via.str.ptr, s->ptr, s->size) == 0)
                                return zr_request_fail(rq, EINVAL, "field 'streams': '%.*s' "
                                                       "appears twice", (int)s->size, s->ptr);
        }
        r = zr_access_dir(rq, rq->fds[0], "the set's directory");
        if (r < 0)
                return r;
        r = list_stores(rq, rq->fds[0], &found, &nfound);
        if (r < 0)
                return r;
        /* The request must name exactly the set's stores. */
        char msg[ZR_ERROR_MESSAGE_MAX] = "";
        size_t at = 0;
        for (uint32_t i = 0; i < n; i++)
                if (!in_list(found, nfound, items[i].via.str.ptr, items[i].via.str.size) &&
                    at < sizeof(msg))
                        at += (size_t)snprintf(msg + at, sizeof(msg) - at, " missing '%.*s'",
                                               (int)items[i].via.str.size, items[i].via.str.ptr);
        for (size_t i = 0; i < nfound; i++) {
                bool named = false;
                for (uint32_t j = 0; j < n && !named; j++)
                        named = items[j].via.str.size == strlen(found[i]) &&
                                memcmp(items[j].via.str.ptr, found[i], items[j].via.str.size) == 0;
                if (!named && at < sizeof(msg))
                        at += (size_t)snprintf(msg + at, sizeof(msg) - at, " extra '%s'", found[i]);
        }
        for (size_t i = 0; i < nfound; i++)
                free(found[i]);
        free(found);
        if (at > 0)
                return zr_request_fail(rq, EINVAL, "'streams' is not the set's stores:%s", msg);

        set = calloc(1, sizeof(*set));
        if (set) {
                set->names = calloc(n, sizeof(char *));
                set->entries = calloc(n, sizeof(zr_entry *));
                set->handles = calloc(n, sizeof(uint32_t));
        }
        if (!set || !set->names || !set->entries || !set->handles) {
                zr_set_free(set);
                return zr_request_fail(rq, ENOMEM, "opening a set");
        }
        for (uint32_t i = 0; i < n; i++) {
                const msgpack_object_str *s = &items[i].via.str;
                set->names[i] = strndup(s->ptr, s->size);
                set->n = i + 1;
                if (!set->names[i]) {
                        r = zr_request_fail(rq, ENOMEM, "opening a set");
                        goto fail;
                }
                int cfd = rq->fds[1 + 2 * i];
                char what[300];
                snprintf(what, sizeof(what), "stream '%s'", set->names[i]);
                r = zr_access_member(rq, rq->fds[0], set->names[i], cfd, what);
                if (r == 0)
                        r = zr_access_proof(rq, cfd, rq->fds[2 + 2 * i], writable, what);
                if (r == 0) {
                        zr_error err = {0};
                        r = zr_registry_open(srv->registry, cfd, &set->entries[i], &err);
                        if (r < 0)
                                zr_request_fail(rq, -r, "stream '%s': %s", set->names[i],
                                                err.message);
                }
                if (r < 0)
                        goto fail;
        }
        return mset_lengths_submit(rq, set, true, writable, mset_open_done);
fail:
        zr_set_free(set);
        return r;
}

/* ---- INFO, CLOSE, STATUS ------------------------------------------------- */

static void set_info_done(zr_job *job) {
        zr_request *rq = (zr_request *)job;
        mset_state *st = rq->state;
        int r = 0;

        if (!zr_request_orphaned(rq))   /* the session, and so the handle, is there */
                r = mset_check_aligned(rq, rq->handle->set, st->lengths);
        if (r == 0 && !zr_request_orphaned(rq)) {
                zr_wire_writer w;
                zr_reply_begin(rq, &w);
                zr_wire_put_u64(&w, "length", st->lengths[0]);
                zr_wire_put_bool(&w, "writable", rq->handle->writable);
                r = zr_reply_send(rq, &w, NULL, 0);
        }
        zr_request_complete(rq, r);
}

/* INFO of a set: its common length, read under its streams' locks. */
int zr_handle_info(zr_request *rq) {
        if (rq->handle->type == ZR_HANDLE_SET)
                return mset_lengths_submit(rq, rq->handle->set, false, rq->handle->writable,
                                           set_info_done);
        return reply_dataset(rq, 0, rq->handle->entry, rq->handle->writable);
}

/* CLOSE that lets a written store go answers once it is let go (registry.h):
 * the handle's stores whose last reference it held are synced on the pool,
 * then closed (their files cut to their data, their locks released), then the
 * reply. */
typedef struct close_state {
        uint32_t n;
        zr_entry *entries[ZR_STREAMS_MAX];
        uint64_t generations[ZR_STREAMS_MAX];
        bool synced[ZR_STREAMS_MAX];
} close_state;

static void close_state_free(void *p) {
        close_state *st = p;
        for (uint32_t i = 0; i < st->n; i++)
                zr_entry_unref(st->entries[i]);
        free(st);
}

static void close_sync_job(zr_job *job) {
        zr_request *rq = (zr_request *)job;
        close_state *st = rq->state;
        for (uint32_t i = 0; i < st->n; i++) {
                zr_error err = {0};
                int r = zr_entry_sync_for_close(st->entries[i], &err);
                if (r < 0 && rq->result == 0)
                        rq->result = zr_request_fail(rq, -r, "%s", err.message);
                st->synced[i] = r == 0;
        }
}

static void close_synced(zr_job *job) {
        zr_request *rq = (zr_request *)job;
        close_state *st = rq->state;
        int r = rq->result;
        for (uint32_t i = 0; i < st->n; i++) {
                if (st->synced[i])
                        zr_entry_synced(st->entries[i], st->generations[i]);
                st->entries[i] = zr_entry_unref(st->entries[i]); /* the last: closed at once */
        }
        st->n = 0;
        if (r == 0 && !zr_request_orphaned(rq))
                r = zr_reply_empty(rq);
        zr_request_complete(rq, r);
}

int zr_handle_close(zr_request *rq) {
        zr_handle *h = rq->handle;
        zr_entry *held[ZR_STREAMS_MAX];
        uint32_t n = 0;

        if (h->type == ZR_HANDLE_DATASET)
                held[n++] = h->entry;
        else if (h->type == ZR_HANDLE_SET)
                for (uint32_t i = 0; i < h->set->n && n < ZR_STREAMS_MAX; i++)
                        held[n++] = h->set->entries[i];
        close_state *st = n ? zr_request_state(rq, sizeof(*st), close_state_free) : NULL;
        if (n && !st)
                return -ENOMEM;
        for (uint32_t i = 0; i < n; i++)
                held[i] = zr_entry_ref(held[i]);
        zr_request_close_handle(rq, h->id);
        for (uint32_t i = 0; i < n; i++) {
                uint64_t gen = zr_entry_closing_sync(held[i]);
                if (held[i]->refs == 1 && gen) {
                        st->generations[st->n] = gen;
                        st->entries[st->n++] = held[i];
                } else {
                        zr_entry_unref(held[i]);
                }
        }
        if (st && st->n)
                return zr_request_submit(rq, close_sync_job, close_synced);
        return zr_reply_empty(rq);
}

/* STATUS's "users": what each uid holds (users.h), the caller's own entry
 * only unless it may see everyone's. */
static void put_users(zr_wire_writer *w, zr_server *s, uid_t caller, bool all) {
        zr_wire_begin_array(w, "users");
        for (zr_user *u = zr_users_first(s->users); u; u = u->next) {
                if (!all && u->uid != caller)
                        continue;
                zr_wire_begin_map(w, NULL);
                zr_wire_put_u64(w, "uid", u->uid);
                zr_wire_put_u64(w, "connections", u->used[ZR_USER_CONNS]);
                zr_wire_put_u64(w, "bytes", u->used[ZR_USER_BYTES]);
                zr_wire_put_u64(w, "fds", u->used[ZR_USER_FDS]);
                zr_wire_put_u64(w, "shm_bytes", u->used[ZR_USER_SHM]);
                zr_wire_put_u64(w, "work_bytes", u->used[ZR_USER_WORK]);
                zr_wire_put_u64(w, "jobs", u->jobs.queued + u->jobs.running);
                zr_wire_put_u64(w, "running", u->jobs.running);
                zr_wire_end(w);
        }
        zr_wire_end(w);
}

/* STATUS's "limits": the limits per connection, per uid and for all uids in
 * force (0: none). */
static void put_limits(zr_wire_writer *w, zr_server *s) {
        const zr_config *c = &s->cfg;
        const zr_user_limits *l = zr_users_limits(s->users);
        zr_wire_begin_map(w, "limits");
        zr_wire_put_u64(w, "clients_max", l->total_max[ZR_USER_CONNS]);
        zr_wire_put_u64(w, "clients_uid_max", l->uid_max[ZR_USER_CONNS]);
        zr_wire_put_u64(w, "bytes_uid_max", l->uid_max[ZR_USER_BYTES]);
        zr_wire_put_u64(w, "fds_max", c->max_fds);
        zr_wire_put_u64(w, "fds_uid_max", l->uid_max[ZR_USER_FDS]);
        zr_wire_put_u64(w, "fds_total_max", l->total_max[ZR_USER_FDS]);
        zr_wire_put_u64(w, "shm_bytes_max", c->max_shm_bytes);
        zr_wire_put_u64(w, "shm_uid_max", l->uid_max[ZR_USER_SHM]);
        zr_wire_put_u64(w, "shm_total_max", l->total_max[ZR_USER_SHM]);
        zr_wire_put_u64(w, "work_uid_max", l->uid_max[ZR_USER_WORK]);
        zr_wire_put_u64(w, "work_total_max", l->total_max[ZR_USER_WORK]);
        zr_wire_put_u64(w, "jobs_uid_max", l->jobs_uid_max);
        zr_wire_put_u64(w, "hello_timeout_ms", c->hello_timeout_sec * 1000);
        zr_wire_put_u64(w, "idle_timeout_ms", c->idle_timeout_sec * 1000);
        zr_wire_put_u64(w, "frame_timeout_ms", c->frame_timeout_sec * 1000);
        zr_wire_end(w);
}

/* Reading ahead (PROTOCOL.md, STATUS, `prefetch`). */
static void put_prefetch(zr_wire_writer *w, zr_server *s, const zr_loader_engine_counters *k,
                         const zr_ioq_stats *q) {
        zr_wire_begin_map(w, "prefetch");
        zr_wire_put_str(w, "backend", s->ioq ? zr_ioq_backend_name(zr_ioq_backend_of(s->ioq))
                                             : "none");
        zr_wire_put_u64(w, "budget", k->prefetch_budget);
        zr_wire_put_u64(w, "bytes", k->prefetch_bytes);
        zr_wire_put_u64(w, "peak", k->prefetch_peak);
        zr_wire_put_u64(w, "steps", k->prefetch_steps);
        zr_wire_put_u64(w, "warm", k->prefetch_warm);
        zr_wire_put_u64(w, "cold", k->prefetch_cold);
        zr_wire_put_str(w, "direct_mode", zr_direct_mode_name((enum zr_direct_mode)k->direct_mode));
        zr_wire_put_u64(w, "direct_min", k->direct_min);
        zr_wire_put_u64(w, "direct", k->prefetch_direct);
        zr_wire_put_u64(w, "fits", k->prefetch_fits);
        zr_wire_put_u64(w, "direct_steps", k->direct_steps);
        zr_wire_put_u64(w, "direct_bytes", k->direct_bytes);
        zr_wire_put_u64(w, "direct_copied", k->direct_copied);
        zr_wire_put_u64(w, "direct_fallbacks", k->direct_fallbacks);
        zr_wire_put_u64(w, "direct_errors", k->direct_errors);
        zr_wire_put_u64(w, "busy", k->prefetch_busy);
        zr_wire_put_u64(w, "records", k->prefetch_records);
        zr_wire_put_u64(w, "resident", k->prefetch_resident);
        zr_wire_put_u64(w, "cached", k->prefetch_cached);
        zr_wire_put_u64(w, "read_bytes", q->bytes);
        zr_wire_put_u64(w, "reads", q->reads);
        zr_wire_put_u64(w, "merged", q->merged);
        zr_wire_put_u64(w, "in_flight", q->in_flight);
        zr_wire_put_u64(w, "queue_depth", q->depth);
        zr_wire_put_u64(w, "depth", k->prefetch_depth);
        zr_wire_put_u64(w, "waits", k->prefetch_waits);
        zr_wire_put_u64(w, "errors", k->prefetch_errors);
        zr_wire_put_u64(w, "cancelled", k->prefetch_cancelled);
        zr_wire_put_u64(w, "planned_steps", k->planned_steps);
        zr_wire_put_u64(w, "latency_p50_ns", q->lat_p50_ns);
        zr_wire_put_u64(w, "latency_p99_ns", q->lat_p99_ns);
        zr_wire_end(w);
}

/* Stores in object storage: the disk cache, what was fetched for what was
 * needed, the fetcher's state (docs/REMOTE.md). `last_error` only for callers
 * that see everything: it may name another user's bucket. */
static void put_remote(zr_wire_writer *w, zr_server *s, bool all) {
        zr_remote_stats st;
        if (!s->remote)
                return;
        zr_remote_stats_get(s->remote, &st);
        zr_wire_begin_map(w, "remote");
        zr_wire_put_str(w, "dir", st.dir);
        zr_wire_put_u64(w, "budget", st.budget);
        zr_wire_put_str(w, "budget_source", s->remote_budget_source);
        zr_wire_put_u64(w, "datasets", st.datasets);
        zr_wire_put_u64(w, "cached_bytes", st.cached_bytes);
        zr_wire_put_u64(w, "cached_records", st.cached_records);
        zr_wire_put_u64(w, "disk_bytes", st.disk_bytes);
        zr_wire_put_u64(w, "evictions", st.evictions);
        zr_wire_put_u64(w, "bypassed", st.bypassed);
        zr_wire_put_u64(w, "hits", st.hits);
        zr_wire_put_u64(w, "misses", st.misses);
        zr_wire_put_u64(w, "needed_bytes", st.needed_bytes);
        zr_wire_put_u64(w, "fetched_bytes", st.fetched_bytes);
        zr_wire_put_u64(w, "shared", st.shared);
        zr_wire_put_u64(w, "refetched", st.refetched);
        zr_wire_put_u64(w, "requests", st.fetch.requests);
        zr_wire_put_u64(w, "retries", st.fetch.retries);
        zr_wire_put_u64(w, "failures", st.fetch.failures);
        zr_wire_put_u64(w, "in_flight", st.fetch.inflight);
        zr_wire_put_u64(w, "queued", st.fetch.queued);
        zr_wire_put_str(w, "state", st.fetch.degraded ? "degraded" : "ok");
        if (st.fetch.degraded) {
                struct timespec ts;
                clock_gettime(CLOCK_MONOTONIC, &ts);
                uint64_t now = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
                zr_wire_put_u64(w, "degraded_ms", (now - st.fetch.degraded_ns) / 1000000);
        }
        if (all && st.fetch.last_error[0])
                zr_wire_put_str(w, "last_error", st.fetch.last_error);
        zr_wire_end(w);
}

/* The memory budgets in force and where each came from (budgets.h). */
static void put_budgets(zr_wire_writer *w, const zr_budgets *b) {
        const struct { const char *name; const zr_budget *b; } all[] = {
                { "cache", &b->cache }, { "ring_spare", &b->ring_spare },
                { "prefetch", &b->prefetch }, { "read_pool", &b->read_pool },
                { "shm_total", &b->shm_total },
                { "shm_uid", &b->shm_uid }, { "work_total", &b->work_total },
                { "work_uid", &b->work_uid },
        };
        zr_wire_begin_map(w, "budgets");
        zr_wire_put_u64(w, "memory", b->memory);
        zr_wire_put_str(w, "memory_source", b->memory_source);
        for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++) {
                zr_wire_begin_map(w, all[i].name);
                zr_wire_put_u64(w, "bytes", all[i].b->bytes);
                zr_wire_put_str(w, "source", all[i].b->source);
                zr_wire_end(w);
        }
        zr_wire_end(w);
}

/* The daemon's totals for everyone; its loaders and the per-uid accounts of
 * the caller's own uid, or of every uid for root and the daemon's own uid
 * (PROTOCOL.md, STATUS): another user's loaders, pids and progress are none
 * of a user's business. */
int zr_handle_status(zr_request *rq) {
        zr_server *s = zr_request_server(rq);
        const zr_server_counters *k = &s->counters;
        uid_t caller = zr_request_uid(rq);
        bool all = zr_users_trusted(s->users, caller);
        zr_loader_engine_counters lk = {0};
        zr_handle *only = NULL;
        uint32_t id;
        if (zr_wire_find(rq->root, "loader")) {
                if (zr_wire_get_u32(rq->root, "loader", &id, NULL) < 0)
                        return zr_request_fail(rq, ZR_E_PROTO, "status: loader is a u32");
                only = zr_request_handle(rq, "loader", id, ZR_HANDLE_BIT(ZR_HANDLE_LOADER));
                if (!only)
                        return -ZR_E_NO_HANDLE;
        }
        /* the queue's stats first: a job counts its records before it submits
         * their reads, so the counters taken after hold the records of every
         * read these bytes include */
        zr_ioq_stats q = {0};
        if (s->ioq)
                zr_ioq_get_stats(s->ioq, &q);
        if (s->loaders)
                zr_loader_engine_counters_get(s->loaders, &lk);
        zr_wire_writer w;
        zr_reply_begin(rq, &w);
        zr_wire_put_str(&w, "daemon", "zrecordd " ZR_VERSION_STRING);
        zr_wire_put_u64(&w, "uptime_ms", (zr_server_now_usec() - s->start_usec) / 1000);
        zr_wire_put_u64(&w, "clients", s->nclients);
        zr_wire_put_u64(&w, "handles", k->handles);
        zr_wire_put_u64(&w, "shm_bytes", k->shm_bytes);
        zr_wire_put_u64(&w, "loaders", k->loaders);
        zr_wire_put_u64(&w, "batches", lk.batches);
        /* READs count as gathers too: each is one gather into shared memory */
        zr_wire_put_u64(&w, "gathers", k->gathers + lk.gathers);
        zr_wire_put_u64(&w, "hits", lk.hits);
        zr_wire_put_u64(&w, "misses", lk.misses);
        zr_wire_put_u64(&w, "bytes", k->bytes + lk.bytes);
        zr_wire_put_u64(&w, "evictions", lk.evictions);
        zr_wire_begin_map(&w, "cache");
        zr_wire_put_u64(&w, "budget", s->loaders ? lk.cache_budget : s->budgets.cache.bytes);
        zr_wire_put_u64(&w, "bytes", lk.cache_bytes);
        zr_wire_put_u64(&w, "entries", lk.cache_entries);
        zr_wire_put_u64(&w, "bypassed", lk.bypassed);
        zr_wire_put_u64(&w, "planned", lk.planned);
        zr_wire_end(&w);
        zr_wire_begin_array(&w, "per_loader");
        if (only) {
                /* one loader of this connection: a client asking for its own figures */
                zr_lhandle_put_status(only->loader, &w, zr_request_pid(rq));
        } else {
                for (zr_session *c = s->sessions; c; c = zr_session_next(c))
                        if (all || zr_session_uid(c) == caller)
                                zr_session_put_loaders(c, &w);
        }
        zr_wire_end(&w);
        /* Optional keys: open stores, requests, batches taken from a slot
         * another group member filled, the spare rings' budget (ring-spare)
         * and the bytes of spare rings ready; the caller's uid, the per-uid
         * accounts it may see, and the limits. */
        zr_wire_put_u64(&w, "stores", zr_registry_count(s->registry));
        zr_wire_put_u64(&w, "requests", k->requests);
        zr_wire_put_u64(&w, "shared", lk.shared);
        zr_wire_put_u64(&w, "loop_fills", lk.inline_fills);
        zr_wire_put_u64(&w, "ctl_batches", lk.ctl_batches);
        zr_wire_put_u64(&w, "ctl_wakes", lk.ctl_wakes);
        zr_wire_put_u64(&w, "ctl_faults", lk.ctl_faults);
        zr_wire_put_u64(&w, "spare_budget", s->budgets.ring_spare.bytes);
        zr_wire_put_u64(&w, "spare_bytes", lk.spare_bytes);
        put_prefetch(&w, s, &lk, &q);
        put_budgets(&w, &s->budgets);
        zr_wire_put_u64(&w, "uid", caller);
        put_users(&w, s, caller, all);
        put_limits(&w, s);
        put_remote(&w, s, all);
        return zr_reply_send(rq, &w, NULL, 0);
}

/* ---- STATS, SYNC, COMPACT, VERIFY: jobs on one dataset ----------------------- */

/* VERIFY lists at most this many bad records (PROTOCOL.md, VERIFY). */
#define VERIFY_BAD_MAX 1024

typedef struct entry_state {
        zr_entry *entry;
        zr_stats stats;
        zr_verify_report report;
        bool sound;
        uint64_t bad[VERIFY_BAD_MAX];
        size_t nbad;
} entry_state;

static void entry_state_free(void *p) {
        entry_state *st = p;
        zr_entry_unref(st->entry);
        free(st);
}

/* Runs run() on the pool with a reference on the request's dataset, then
 * answers with reply(). */
static int start_entry_job(zr_request *rq, zr_job_fn run, zr_reply_fn reply) {
        entry_state *st = zr_request_state(rq, sizeof(*st), entry_state_free);
        if (!st)
                return -ENOMEM;
        st->entry = zr_entry_ref(rq->handle->entry);
        return zr_request_submit_reply(rq, run, reply);
}

/* The reply of STATS and COMPACT: the dataset's stats. */
static void stats_reply(zr_request *rq, zr_wire_writer *w) {
        const zr_stats *s = &((entry_state *)rq->state)->stats;
        zr_wire_put_u64(w, "records", s->records);
        zr_wire_put_u64(w, "live_bytes", s->live_bytes);
        zr_wire_put_u64(w, "chunk_bytes", s->chunk_bytes);
        zr_wire_put_u64(w, "reclaimable", s->reclaimable);
        zr_wire_put_u64(w, "logic_bytes", s->logic_bytes);
}

static void verify_reply(zr_request *rq, zr_wire_writer *w) {
        entry_state *st = rq->state;
        zr_wire_put_bool(w, "ok", st->sound);
        zr_wire_put_u64(w, "records", st->report.records);
        zr_wire_put_u64(w, "bad", st->report.bad);
        zr_wire_put_u64s(w, "bad_indices", st->bad, st->nbad);
}

/* A corrupt record is VERIFY's result, not an error; failing to run is. */
static int verify(zr_request *rq, entry_state *st) {
        zr_error err = {0};
        int r = zr_dataset_verify(st->entry->ds, &st->report, st->bad, VERIFY_BAD_MAX,
                                  &st->nbad, &err);
        if (r == -ZR_E_CORRUPT || r == -ZR_E_DECODE)
                return 0;
        if (r < 0)
                return zr_request_fail(rq, -r, "%s", err.message);
        st->sound = st->report.bad == 0;
        return 0;
}

/* STATS, SYNC and VERIFY: under the dataset's lock, shared. */
static void shared_run(zr_job *job) {
        zr_request *rq = (zr_request *)job;
        entry_state *st = rq->state;
        zr_dataset_lock(st->entry->ds, false);
        if (rq->kind == ZR_MSG_STATS)
                rq->result = zr_dataset_stats(st->entry->ds, &st->stats, &rq->err);
        else if (rq->kind == ZR_MSG_SYNC)
                rq->result = zr_dataset_sync(st->entry->ds, &rq->err);
        else
                rq->result = verify(rq, st);
        zr_dataset_unlock(st->entry->ds);
        if (rq->kind == ZR_MSG_VERIFY)
                zr_server_trim_heap();
}

int zr_handle_stats(zr_request *rq) {
        return start_entry_job(rq, shared_run, stats_reply);
}

int zr_handle_sync(zr_request *rq) {
        return start_entry_job(rq, shared_run, NULL);
}

int zr_handle_verify(zr_request *rq) {
        return start_entry_job(rq, shared_run, verify_reply);
}

static void compact_run(zr_job *job) {
        zr_request *rq = (zr_request *)job;
        entry_state *st = rq->state;
        zr_compact_result res = {0};
        int r = zr_mutation_begin(rq, &st->entry, 1, true);
        if (r == 0)
                r = zr_dataset_compact(st->entry->ds, &res, &rq->err);
        bool changed = res.moved > 0 || r == 0;
        if (r == 0)
                r = zr_dataset_stats(st->entry->ds, &st->stats, &rq->err);
        zr_mutation_end(rq, changed);
        rq->result = r;
}

/* COMPACT's working memory: every record's table entry and order (24 bytes
 * each, the length when it is asked, read without the lock: appends that land
 * before the job starts are few beside it), and its copy buffer and walk. */
#define COMPACT_WORK_PER_RECORD 24
#define COMPACT_WORK_FIXED ((uint64_t)16 << 20)

int zr_handle_compact(zr_request *rq) {
        uint64_t len = zr_dataset_length(rq->handle->entry->ds);
        int r = zr_request_work_charge(rq, len > (UINT64_MAX - COMPACT_WORK_FIXED) /
                                                   COMPACT_WORK_PER_RECORD
                                           ? UINT64_MAX
                                           : len * COMPACT_WORK_PER_RECORD + COMPACT_WORK_FIXED,
                                   "COMPACT");
        if (r < 0)
                return r;
        return start_entry_job(rq, compact_run, stats_reply);
}
