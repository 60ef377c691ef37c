/* set.c: multi-stream sets (MSSET_OPEN): index-aligned stores under one root.
 *
 * The library lists the root's children itself, takes every child directory
 * that holds a meta.zr as a stream (in name order, so the order is the same for
 * every client), opens each stream's directory and meta.zr with the caller's
 * rights and passes the root and these proofs in one MSSET_OPEN (PROTOCOL.md:
 * the root, then each stream's directory and meta.zr, as DATASET_OPEN takes
 * them). The daemon checks that the streams are
 * exactly its children and that their lengths agree. Each stream gets a dataset
 * handle of its own, kept here as a zrc_dataset owned by the set; an APPEND or
 * DELETE on the set handle moves every stream together.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "list.h"
#include "zrc-private.h"

static int name_cmp(const void *a, const void *b) {
        return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Lists the children of dirfd that hold a meta.zr, sorted (*ret_names and its
 * strings malloc()ed). */
static int list_streams(zrc_conn *c, int dirfd, const char *path, char ***ret_names,
                        size_t *ret_n) {
        char **names = NULL;
        size_t n = 0;
        DIR *dir;
        struct dirent *de;
        int fd, r = 0;

        fd = dup(dirfd);
        if (fd < 0)
                return conn_fail(c, errno, "dup: %s", strerror(errno));
        (void)fcntl(fd, F_SETFD, FD_CLOEXEC);
        dir = fdopendir(fd);
        if (!dir) {
                close(fd);
                return conn_fail(c, errno, "%s: %s", path, strerror(errno));
        }
        while ((errno = 0, de = readdir(dir))) {
                char meta[ZR_STREAM_NAME_MAX + 16];
                struct stat st;
                char **grown;

                if (de->d_name[0] == '.')
                        continue; /* ., .., and hidden ones: a conversion's .partial */
                if (strlen(de->d_name) > ZR_STREAM_NAME_MAX)
                        continue;
                snprintf(meta, sizeof(meta), "%s/meta.zr", de->d_name);
                if (fstatat(dirfd, meta, &st, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISREG(st.st_mode))
                        continue;
                if (n >= ZR_STREAMS_MAX) {
                        r = conn_fail(c, E2BIG, "%s holds more than %d streams", path,
                                      ZR_STREAMS_MAX);
                        goto out;
                }
                grown = realloc(names, (n + 1) * sizeof(*names));
                if (!grown || !(grown[n] = strdup(de->d_name))) {
                        if (grown)
                                names = grown;
                        r = conn_fail(c, ENOMEM, "out of memory");
                        goto out;
                }
                names = grown;
                n++;
        }
        if (errno) {
                r = conn_fail(c, errno, "reading %s: %s", path, strerror(errno));
                goto out;
        }
        if (n == 0) {
                r = conn_fail(c, ENOENT, "%s holds no stream (no child with a meta.zr)", path);
                goto out;
        }
        qsort(names, n, sizeof(*names), name_cmp);
out:
        closedir(dir);
        if (r < 0) {
                for (size_t i = 0; i < n; i++)
                        free(names[i]);
                free(names);
                return r;
        }
        *ret_names = names;
        *ret_n = n;
        return 0;
}

void set_free(zrc_set *set, bool tell) {
        zrc_conn *c = set->conn;

        for (size_t i = 0; i < set->n_streams; i++) {
                if (set->streams && set->streams[i])
                        dataset_free(set->streams[i], tell);
                free(set->names[i]);
        }
        if (tell && set->handle)
                (void)conn_close_handle(c, set->handle);
        ZRC_LIST_UNLINK(c->sets, set);
        free(set->streams);
        free(set->names);
        free(set);
}

int zrc_set_open(zrc_conn *c, const char *path, unsigned flags, zrc_set **ret) {
        bool writable = flags & ZRC_OPEN_WRITABLE;
        conn_reply reply = CONN_REPLY_NULL;
        int fds[1 + 2 * ZR_STREAMS_MAX];
        size_t n_fds = 0;
        const msgpack_object *streams;
        uint32_t n_streams = 0;
        zrc_set *set = NULL;
        zr_wire_writer *w;
        int r;

        r = conn_check(c, CONN_FEATURE_MSSET, ZR_FEATURE_MSSET);
        if (r < 0)
                return r;
        if (flags & ~(unsigned)ZRC_OPEN_WRITABLE)
                return conn_fail(c, EINVAL, "unknown open flags 0x%x", flags);
        set = calloc(1, sizeof(*set));
        if (!set)
                return conn_fail(c, ENOMEM, "out of memory for a set");
        set->conn = c;
        set->writable = writable;

        if (path && conn_is_remote(path)) {
                /* a set in object storage: its streams are those its zrecord.set names */
                if (writable) {
                        r = conn_fail(c, ZR_E_READONLY, "%s is in object storage: read-only",
                                      path);
                        goto fail;
                }
                w = conn_begin(c, ZR_MSG_MSSET_OPEN);
                r = conn_put_remote(c, w, path);
                if (r == 0)
                        r = conn_call(c, ZR_MSG_MSSET_OPEN, NULL, 0, &reply);
                if (r < 0)
                        goto fail;
                (void)zr_wire_get_array(reply.root, "streams", &streams, &n_streams, NULL);
                set->names = calloc(n_streams ? n_streams : 1, sizeof(*set->names));
                set->streams = calloc(n_streams ? n_streams : 1, sizeof(*set->streams));
                if (!set->names || !set->streams) {
                        r = conn_fail(c, ENOMEM, "out of memory for a set");
                        goto fail_handles;
                }
                for (uint32_t i = 0; i < n_streams; i++) {
                        const char *p;
                        size_t len;
                        if (zr_wire_get_str(&streams[i], "name", &p, &len, NULL) < 0 ||
                            !(set->names[i] = strndup(p, len))) {
                                r = conn_fail(c, ENOMEM, "out of memory for a set");
                                goto fail_handles;
                        }
                        set->n_streams = i + 1;
                }
                goto opened;
        }
        r = dataset_open_files(c, path, &fds[0]);
        if (r < 0)
                goto fail;
        n_fds = 1;
        r = list_streams(c, fds[0], path, &set->names, &set->n_streams);
        if (r < 0)
                goto fail;
        for (size_t i = 0; i < set->n_streams; i++) {
                char display[4096];

                snprintf(display, sizeof(display), "%s/%s", path, set->names[i]);
                fds[n_fds] = openat(fds[0], set->names[i],
                                    O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
                if (fds[n_fds] < 0) {
                        r = conn_fail(c, errno, "%s: %s", display, strerror(errno));
                        goto fail;
                }
                n_fds++;
                r = dataset_open_meta(c, fds[n_fds - 1], display, "meta.zr", writable,
                                      &fds[n_fds]);
                if (r < 0)
                        goto fail;
                n_fds++;
        }
        set->streams = calloc(set->n_streams, sizeof(*set->streams));
        if (!set->streams) {
                r = conn_fail(c, ENOMEM, "out of memory for a set");
                goto fail;
        }

        w = conn_begin(c, ZR_MSG_MSSET_OPEN);
        zr_wire_put_bool(w, "writable", writable);
        zr_wire_begin_array(w, "streams");
        for (size_t i = 0; i < set->n_streams; i++)
                zr_wire_put_str(w, NULL, set->names[i]);
        zr_wire_end(w);
        r = conn_call(c, ZR_MSG_MSSET_OPEN, fds, n_fds, &reply);
        if (r < 0)
                goto fail;
opened:
        (void)zr_wire_get_u32(reply.root, "set", &set->handle, NULL);
        set->length = conn_get_u64(reply.root, "length");
        (void)zr_wire_get_bool(reply.root, "writable", &set->writable, NULL);
        (void)zr_wire_get_array(reply.root, "streams", &streams, &n_streams, NULL);
        if (n_streams != set->n_streams) {
                r = conn_fail(c, ZR_E_PROTO, "MSSET_OPEN answered %u streams for %zu", n_streams,
                              set->n_streams);
                goto fail_handles;
        }
        for (uint32_t i = 0; i < n_streams; i++) {
                uint32_t h = 0;

                (void)zr_wire_get_u32(&streams[i], "handle", &h, NULL);
                r = dataset_new(c, h, &streams[i], set->writable, set, &set->streams[i]);
                if (r < 0) {
                        (void)conn_close_handle(c, h);
                        goto fail_handles;
                }
        }
        conn_reply_done(&reply);
        for (size_t i = 0; i < n_fds; i++)
                close(fds[i]);
        ZRC_LIST_PUSH(c->sets, set);
        *ret = set;
        return 0;

fail_handles:
        /* close the stream handles not yet wrapped, then the rest with the set */
        for (uint32_t i = 0; i < n_streams && i < set->n_streams; i++) {
                uint32_t h = 0;

                if (set->streams[i])
                        continue;
                if (zr_wire_get_u32(&streams[i], "handle", &h, NULL) == 0 && h)
                        (void)conn_close_handle(c, h);
        }
fail:
        conn_reply_done(&reply);
        for (size_t i = 0; i < n_fds; i++)
                close(fds[i]);
        {
                int saved = r;
                zrc_error e = c->error;

                set_free(set, !c->broken);
                c->error = e;
                return saved;
        }
}

zrc_set *zrc_set_close(zrc_set *set) {
        if (set)
                set_free(set, !set->conn->broken);
        return NULL;
}

uint64_t zrc_set_length(const zrc_set *set) {
        return set->length;
}

size_t zrc_set_streams(const zrc_set *set) {
        return set->n_streams;
}

const char *zrc_set_stream_name(const zrc_set *set, size_t i) {
        return i < set->n_streams ? set->names[i] : NULL;
}

zrc_dataset *zrc_set_stream(const zrc_set *set, size_t i) {
        return i < set->n_streams ? set->streams[i] : NULL;
}

typedef struct set_fill {
        const zrc_records *records;
        const uint64_t *offsets, *bytes;
        size_t n;
} set_fill;

static void set_fill_run(void *dst, void *userdata) {
        const set_fill *f = userdata;

        for (size_t i = 0; i < f->n; i++)
                if (f->bytes[i])
                        memcpy((uint8_t *)dst + f->offsets[i], f->records[i].data, f->bytes[i]);
}

int zrc_set_append(zrc_set *set, const zrc_records *records, uint64_t *ret_first) {
        zrc_conn *c = set->conn;
        uint64_t offsets[ZR_STREAMS_MAX], bytes[ZR_STREAMS_MAX], total = 0;
        conn_reply reply = CONN_REPLY_NULL;
        set_fill f = { .records = records, .offsets = offsets, .bytes = bytes, .n = set->n_streams };
        zr_wire_writer *w;
        int r, fd;

        r = conn_check(c, 0, NULL);
        if (r < 0)
                return r;
        if (!records)
                return conn_fail(c, EINVAL, "no records given");
        for (size_t i = 0; i < set->n_streams; i++) {
                r = dataset_records_bytes(set->streams[i], &records[i], &bytes[i]);
                if (r < 0)
                        return r;
                offsets[i] = total;
                if (bytes[i] > UINT64_MAX - total - ZR_RECORD_ALIGN)
                        return conn_fail(c, ZR_E_TOO_BIG, "append size overflows");
                total += (bytes[i] + ZR_RECORD_ALIGN - 1) / ZR_RECORD_ALIGN * ZR_RECORD_ALIGN;
        }
        fd = conn_memfd_sealed(c, "zrc-append", total, NULL, set_fill_run, &f);
        if (fd < 0)
                return fd;
        w = conn_begin(c, ZR_MSG_APPEND);
        zr_wire_put_u64(w, "handle", set->handle);
        zr_wire_begin_array(w, "streams");
        for (size_t i = 0; i < set->n_streams; i++) {
                zr_wire_begin_map(w, NULL);
                zr_wire_put_str(w, "name", set->names[i]);
                dataset_put_append_fields(set->streams[i], w, &records[i], offsets[i]);
                zr_wire_end(w);
        }
        zr_wire_end(w);
        r = conn_call(c, ZR_MSG_APPEND, &fd, 1, &reply);
        close(fd);
        if (r < 0)
                return r;
        set->length = conn_get_u64(reply.root, "length");
        for (size_t i = 0; i < set->n_streams; i++)
                set->streams[i]->length = set->length;
        if (ret_first)
                *ret_first = conn_get_u64(reply.root, "first");
        conn_reply_done(&reply);
        return 0;
}

int zrc_set_delete(zrc_set *set, const uint64_t *indices, size_t n, uint64_t *ret_length) {
        int r = dataset_delete_call(set->conn, set->handle, indices, n, &set->length);

        if (r < 0)
                return r;
        for (size_t i = 0; i < set->n_streams; i++)
                set->streams[i]->length = set->length;
        if (ret_length)
                *ret_length = set->length;
        return 0;
}
