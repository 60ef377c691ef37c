/* zrc-private.h: what the modules of libzrc share and its users never see.
 *
 * The connection (conn.c) owns the socket, the HELLO results, the last error,
 * the queue of events kept for later (each with the descriptor a RING event
 * brings) and the lists of open datasets, sets and loaders,
 * so that zrc_disconnect() can free whatever its user left open. Datasets
 * (dataset.c, read.c, append.c, dict.c) and sets (set.c) talk to the daemon through conn_call(): one
 * request built with the connection's writer, sent with its descriptors, and
 * its reply, matched in order, returned decoded and checked against the
 * reply's field table.
 *
 * None of these symbols is exported (libzrc.sym exports zrc_* only).
 */
#ifndef ZRC_PRIVATE_H
#define ZRC_PRIVATE_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "message.h"
#include "wire.h"
#include "zrc.h"

/* Features granted in HELLO, as bits. */
enum {
        CONN_FEATURE_LOADER = 1 << 0,
        CONN_FEATURE_MSSET = 1 << 1,
        CONN_FEATURE_DICT = 1 << 2,
        CONN_FEATURE_VERIFY = 1 << 3,
        CONN_FEATURE_CONVERT = 1 << 4,
        CONN_FEATURE_MIXTURE = 1 << 5,
        CONN_FEATURE_STEPS_OF = 1 << 6,
        CONN_FEATURE_METRICS = 1 << 7,
        CONN_FEATURE_REMOTE = 1 << 8,
};

/* Events kept for the loader API while no one consumes them (BATCH, RING,
 * RING_CLOSE, LOADER_END). A connection without loaders receives none; a
 * loader announces at most prefetch_max batches before it waits for a RELEASE,
 * each preceded at most by the RING of its ring and followed at most by the
 * RING_CLOSE of another, so 64 loaders × 64 slots × 3 (and an end each) bound
 * what a correct daemon can send. */
#define CONN_EVENTS_MAX (64 * 64 * 3 + 64)

typedef struct conn_event {
        struct conn_event *next;
        zr_msg_kind kind;
        uint32_t loader;             /* the loader it names */
        uint8_t *body;
        size_t size;
        int fd;                      /* RING: the ring's memfd (CLOEXEC), else -1;
                                      * closed by conn_event_free() unless taken
                                      * (set to -1) */
} conn_event;

struct zrc_conn {
        int fd;
        bool broken;                 /* the stream is unusable: every call fails */
        char path[ZRC_SOCKET_PATH_MAX];
        uint32_t version;
        char daemon[64];
        zrc_limits limits;
        unsigned features;
        uint64_t next_id;
        uint32_t frame_max;          /* bodies accepted from and sent to the daemon */
        zr_wire_writer writer;
        zrc_error error;             /* the last failure */
        zrc_error fault;             /* the last FAULT event (code 0: none) */
        conn_event *events_head, *events_tail;
        size_t n_events;
        zrc_dataset *datasets;       /* open datasets, linked by ->next */
        zrc_set *sets;               /* open sets, linked by ->next */
        zrc_loader *loaders;         /* open loaders, linked by ->next */
};

/* ---- trust.c: whom a socket path may lead to (PROTOCOL.md, section 1) ---- */

/* The system service's user (systemd/sysusers.conf). */
#define ZRC_SERVICE_USER "zrecord"

typedef enum conn_trust {
        CONN_TRUST_USER,     /* a per-user default path: $XDG_RUNTIME_DIR/zrecord/,
                              * /tmp/zrecord-<uid>/ */
        CONN_TRUST_SYSTEM,   /* /run/zrecord/ */
        CONN_TRUST_EXPLICIT, /* a path the caller or $ZRECORD_SOCKET named */
} conn_trust;

/* Before connect(): checks the directory of the socket path. Returns 0 and sets
 * *ret_owner (the directory's owner), -EPERM if it is refused, or another
 * -errno if it cannot be examined (-ENOENT: no such directory); why[] (size
 * bytes) says which, naming the path and the owner found. */
int trust_dir(const char *path, conn_trust kind, uid_t *ret_owner, char *why, size_t size);

/* After connect(): checks the peer's SO_PEERCRED uid on fd (dir_owner: what
 * trust_dir() found). Returns 0 or -EPERM with why[] naming the path and the
 * peer's uid. */
int trust_peer(int fd, const char *path, conn_trust kind, uid_t dir_owner, char *why,
               size_t size);

/* A decoded "ok" reply: root points into body, which points into frame. */
typedef struct conn_reply {
        uint8_t *frame;
        zr_wire_body *body;
        const msgpack_object *root;
        int fd;                      /* the descriptor that came with it, or -1 */
} conn_reply;

#define CONN_REPLY_NULL ((conn_reply){ .fd = -1 })

/* Records a failure as c's last error and returns -code. */
int conn_fail(zrc_conn *c, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* Checks that the connection is usable and, if feature is not 0, that the
 * daemon granted it (name for the message). Returns 0 or a failure. */
int conn_check(zrc_conn *c, unsigned feature, const char *name);

/* Starts a request of `kind` ("read", ...) with the next id in c's writer and
 * returns the writer, in which the caller puts the request's fields. */
zr_wire_writer *conn_begin(zrc_conn *c, zr_msg_kind kind);

/* Sends the request begun with conn_begin() with fds[0..n_fds) attached (the
 * caller keeps and closes them) and waits for its reply, keeping events that
 * arrive before it. On "ok" returns 0 and fills *ret (ret may be NULL: the
 * reply is checked and dropped) which the caller releases with
 * conn_reply_done(). On "error" returns -code with c's last error set from the
 * reply. A broken stream fails every later call. */
int conn_call(zrc_conn *c, zr_msg_kind kind, const int *fds, size_t n_fds, conn_reply *ret);

/* Reads one frame when no request is open and handles it as an event (kept
 * in the queue, or a FAULT remembered). Returns 0 or a failure; a reply breaks
 * the connection (nothing asked for one). */
int conn_wait_event(zrc_conn *c);

/* Takes the oldest kept event that names `loader` out of the queue (the
 * caller frees it with conn_event_free()), or returns NULL. */
conn_event *conn_event_take(zrc_conn *c, uint32_t loader);

/* Frees an event, closing its descriptor if it still has one. NULL allowed;
 * returns NULL. */
conn_event *conn_event_free(conn_event *e);

/* Drops every kept event of `loader`, closing their descriptors. */
void conn_events_drop(zrc_conn *c, uint32_t loader);

/* Starts a notification (no id, no reply: RELEASE) in c's writer. */
zr_wire_writer *conn_begin_notification(zrc_conn *c, zr_msg_kind kind);

/* Sends the notification begun with conn_begin_notification(). */
int conn_notify(zrc_conn *c, zr_msg_kind kind);

/* Releases a reply (closing its descriptor unless taken: set fd to -1). */
void conn_reply_done(conn_reply *r);

/* Reads a u64 field of a reply known to be valid (zr_msg_check() passed). */
uint64_t conn_get_u64(const msgpack_object *map, const char *key);

/* Parses a schema map of a reply into *ret. Returns 0 or a failure on c. */
int conn_parse_schema(zrc_conn *c, const msgpack_object *map, zrc_schema *ret);

/* Takes the shapes of k ragged records from a READ or BATCH `shapes` (nwords
 * u64s at words) of a schema of `ndim` dims (0: each record's ndim, then its
 * dims): record j's dims go back to back to dims (room for k × (ndim ? ndim :
 * ZRC_NDIM_MAX)), its ndim to ndims[j], the index of its first dim, counted from
 * dims_at, to shape_at[j]. Each record's length (lens, u64s) must be itemsize ×
 * prod(dims). Returns the dims stored, or -1 if the words do not describe k
 * such records exactly. */
int64_t conn_take_shapes(const uint8_t *words, size_t nwords, uint32_t ndim, size_t k,
                         uint64_t itemsize, const uint8_t *lens, uint64_t *dims,
                         uint64_t dims_at, uint32_t *ndims, uint64_t *shape_at);

/* Puts a schema map under `key`. */
void conn_put_schema(zr_wire_writer *w, const char *key, const zrc_schema *s);

/* The largest count of u64 values one request can carry in a bin besides a
 * handful of small fields, under the connection's frame limit. */
size_t conn_u64s_per_frame(const zrc_conn *c, size_t per_item_bytes);

/* Creates a memfd of `size` bytes, lets fill() write it through a temporary
 * shared mapping (fill may be NULL: then write `data` with write()), and seals
 * it F_SEAL_WRITE | F_SEAL_SHRINK | F_SEAL_GROW. Returns the descriptor
 * (CLOEXEC) or a failure on c. */
int conn_memfd_sealed(zrc_conn *c, const char *name, uint64_t size, const void *data,
                      void (*fill)(void *dst, void *userdata), void *userdata);

struct zrc_dataset {
        zrc_dataset *next, *prev;     /* in conn->datasets */
        zrc_conn *conn;
        zrc_set *set;                 /* the owning set, or NULL */
        uint32_t handle;
        zrc_schema schema;
        uint64_t length;
        bool writable, has_dict;
        /* the read buffer */
        uint32_t buffer;              /* handle, 0: none */
        void *map;
        uint64_t map_bytes;
        /* ragged batch arrays, grown as needed */
        const void **payloads;
        uint64_t *lengths, *shapes, *shape_at;
        uint32_t *ndims;
        size_t cap_records;
};

/* Builds a dataset object for daemon handle `handle` from a reply map holding
 * "length", "schema" and "has_dict" (an open/create reply, or a stream of an
 * MSSET_OPEN reply). Returns 0 or a failure on c; the caller closes the handle
 * then. */
int dataset_new(zrc_conn *c, uint32_t handle, const msgpack_object *map, bool writable,
                zrc_set *set, zrc_dataset **ret);

/* Opens `path` as a directory (O_RDONLY | O_DIRECTORY | O_CLOEXEC), then its
 * `meta` child ("meta.zr" or "NAME/meta.zr") O_RDONLY or O_RDWR, both with
 * the caller's rights. Returns 0 or a failure on c naming `path`. */
int dataset_open_files(zrc_conn *c, const char *path, int *ret_dirfd);
int dataset_open_meta(zrc_conn *c, int dirfd, const char *display, const char *meta,
                      bool writable, int *ret_fd);

/* Frees d's memory and mapping, asking the daemon to close its handles if
 * `tell` (a dying connection does not). */
void dataset_free(zrc_dataset *d, bool tell);

/* DELETE of indices[0..n) through `handle` (a dataset's or a set's): sets
 * *ret_length to the length after. */
int dataset_delete_call(zrc_conn *c, uint32_t handle, const uint64_t *indices, size_t n,
                        uint64_t *ret_length);

/* Unmaps d's read buffer and, if `tell`, closes it in the daemon (read.c). */
void dataset_buffer_drop(zrc_dataset *d, bool tell);

/* Puts one stream's APPEND fields (dtype, count/record_bytes/item_shape or
 * sizes/ndim) for records r of dataset d at memfd offset `offset`. Returns 0
 * or -EINVAL on c. */
int dataset_put_append_fields(zrc_dataset *d, zr_wire_writer *w, const zrc_records *r,
                              uint64_t offset);

/* Bytes records r take in the memfd for dataset d, or a failure on c. */
int dataset_records_bytes(zrc_dataset *d, const zrc_records *r, uint64_t *ret);

struct zrc_set {
        zrc_set *next, *prev;         /* in conn->sets */
        zrc_conn *conn;
        uint32_t handle;
        uint64_t length;
        bool writable;
        size_t n_streams;
        char **names;
        zrc_dataset **streams;
};

void set_free(zrc_set *set, bool tell);

/* Frees a loader (loader.c), asking the daemon to close it if `tell`. */
void loader_free(zrc_loader *l, bool tell);

/* Sends CLOSE for handle h, ignoring the answer's content. */
int conn_close_handle(zrc_conn *c, uint32_t h);

/* remote.c: the `remote` map of DATASET_OPEN or MSSET_OPEN for an s3:// path
 * (docs/REMOTE.md): the URL checked, endpoint, region and credentials resolved
 * as the AWS tools do (s3/creds.h), put under key "remote" into w. Returns 0,
 * or a failure recorded on c (EINVAL for a bad URL, ENOENT for an unknown
 * AWS_PROFILE, ZR_E_UNKNOWN when the daemon lacks the "remote" feature). */
int conn_put_remote(zrc_conn *c, zr_wire_writer *w, const char *url);
/* Whether path names a store in object storage ("s3://..."). */
bool conn_is_remote(const char *path);

#endif
