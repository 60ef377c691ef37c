/* zrc.h: libzrc, the C client of zrecordd.
 *
 * libzrc talks to a running zrecordd over its Unix socket (proto/PROTOCOL.md is
 * the normative protocol). It opens and creates datasets by path, the way a
 * program opens files: the library opens the directory and its meta.zr itself
 * and passes the descriptors, so the daemon acts with the caller's rights and
 * never resolves a path. Records are read by index straight into shared memory
 * the daemon writes and the library maps; records to append travel in a sealed
 * memfd. Nothing bulky crosses the socket.
 *
 * Conventions, for every function below:
 *   - Functions returning int return 0 (or a documented non-negative value) on
 *     success and a negative error code on failure: -errno (-ENOENT, -EACCES,
 *     -ECONNREFUSED, ...) or -ZR_E_* of zr-errors.h (-ZR_E_RANGE, ...). A code
 *     the caller does not know is a generic failure. zrc_error_name() names it.
 *   - After a failure on a connection (or on a dataset or set of it),
 *     zrc_last_error() describes it: code, symbolic name, a one-line message
 *     (the daemon's own, naming the field, index or stream concerned) and, where
 *     the protocol gives them, the offending index or the bytes needed.
 *   - The library never prints, never exits and never raises a signal (SIGPIPE
 *     is suppressed per send). Every descriptor it creates or receives is
 *     close-on-exec from birth.
 *   - A connection and everything opened on it (datasets, sets) are used by one
 *     thread at a time; distinct connections are independent. A program that
 *     reads from several threads opens one connection per thread.
 *   - Pointers returned by the library are owned by the library unless said
 *     otherwise; each function says how long they stay valid.
 *
 * Example (error handling elided to one check):
 *
 *     zrc_conn *c;
 *     zrc_dataset *d;
 *     zrc_batch b;
 *     uint64_t idx[] = {7, 3, 7};
 *
 *     if (zrc_connect(NULL, &c, NULL) < 0) return 3;
 *     if (zrc_dataset_open(c, "/data/mnist/images", 0, &d) < 0) {
 *             fprintf(stderr, "%s\n", zrc_last_error(c)->message);
 *             return 1;
 *     }
 *     zrc_dataset_read(d, idx, 3, &b);   // b.data: a (3, *item_shape) array
 *     zrc_dataset_close(d);
 *     zrc_disconnect(c);
 *
 * Link with `pkg-config --cflags --libs zrc`.
 */
#ifndef ZRC_H
#define ZRC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "zr-errors.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ======================================================================
 * Errors
 * ====================================================================== */

#define ZRC_ERROR_NAME_MAX 32
#define ZRC_ERROR_MESSAGE_MAX 512

typedef struct zrc_error {
        int code;                           /* positive; 0: no error */
        char name[ZRC_ERROR_NAME_MAX];      /* "ZR_E_RANGE", "ENOENT"; "" if unknown */
        char message[ZRC_ERROR_MESSAGE_MAX];/* one line, NUL-terminated */
        bool has_index;                     /* ZR_E_RANGE from the daemon: */
        uint64_t index;                     /*   the first index out of range */
        bool has_needed;                    /* ZR_E_BUFFER from the daemon: */
        uint64_t needed;                    /*   bytes needed */
} zrc_error;

/* The symbolic name of an error code, negative or positive: "ZR_E_RANGE",
 * "EIO", ... Returns a static string, or NULL for a code it does not know.
 *
 *     fprintf(stderr, "%s\n", zrc_error_name(r) ?: "error");
 */
const char *zrc_error_name(int code);

/* ======================================================================
 * Connections
 * ====================================================================== */

typedef struct zrc_conn zrc_conn;

/* The daemon's limits for this connection, from the HELLO reply
 * (PROTOCOL.md, section 12). */
typedef struct zrc_limits {
        uint64_t frame_max;         /* largest frame body, either direction */
        uint64_t handles_max;       /* open handles (datasets, sets, buffers, loaders) */
        uint64_t shm_bytes_max;     /* shared memory: read buffers and rings */
        uint64_t loaders_max;
        uint64_t pipeline_max;      /* unanswered requests the daemon reads ahead */
        uint64_t fds_per_frame_max;
        uint64_t streams_max;       /* streams of a set or a loader */
        uint64_t prefetch_max;      /* ring slots of a loader */
} zrc_limits;

/* Longest socket path (sun_path of struct sockaddr_un, with its NUL). */
#define ZRC_SOCKET_PATH_MAX 108

/* Connects to zrecordd and says HELLO (protocol version 1, every feature the
 * library knows, `client` name "libzrc <version>").
 *
 * socket_path: the daemon's socket, or NULL to find it as PROTOCOL.md section 1
 * says: $ZRECORD_SOCKET if set (and not empty), else the first of
 * $XDG_RUNTIME_DIR/zrecord/zrecordd.sock, /run/zrecord/zrecordd.sock and
 * /tmp/zrecord-<uid>/zrecordd.sock that accepts a connection and passes the
 * checks below.
 *
 * Nothing is sent to a socket before two checks (PROTOCOL.md section 1, "Whom a
 * client trusts"): its directory is writable by its owner only and owned by you
 * (the per-user paths) or by root or the service user "zrecord"
 * (/run/zrecord); and the daemon's uid (SO_PEERCRED) is yours (per-user paths),
 * root's or the service user's (/run/zrecord). For an explicit path (the
 * argument or $ZRECORD_SOCKET) the directory may have any owner, who may then
 * also be the daemon's uid, besides you, root and the service user. A default
 * path that fails is passed over; its refusal is the error if no other answers.
 *
 * Returns 0 and sets *ret (owned by the caller; zrc_disconnect() frees it), or:
 *   -EPERM: a socket was refused by those checks (the message names the path
 *   and the owner or daemon uid found);
 *   -ENOENT, -ECONNREFUSED, -EACCES, ...: no daemon answers at the path(s);
 *   -ENAMETOOLONG: a path longer than ZRC_SOCKET_PATH_MAX - 1;
 *   -ZR_E_VERSION: the daemon speaks no version this library speaks;
 *   -ZR_E_PROTO, -ECONNRESET, -EPIPE: the daemon broke the handshake;
 *   -ENOMEM.
 * ret_error (may be NULL) receives the details of a failure (there is no
 * connection to ask zrc_last_error()); it is untouched on success.
 *
 *     zrc_conn *c; zrc_error e;
 *     if (zrc_connect("/run/zrecord/zrecordd.sock", &c, &e) < 0) puts(e.message);
 */
int zrc_connect(const char *socket_path, zrc_conn **ret, zrc_error *ret_error);

/* Closes the connection. The daemon reclaims everything the connection held.
 * Datasets and sets still open on it are freed too: their pointers become
 * invalid, as do all pointers into their buffers. NULL is allowed. Returns NULL.
 *
 *     c = zrc_disconnect(c);
 */
zrc_conn *zrc_disconnect(zrc_conn *c);

/* Stops the call in progress on c from another context: a signal handler (it
 * is async-signal-safe) or another thread. It shuts the socket down, so the
 * call waiting for the daemon returns at once with an error (-ECONNRESET, or
 * whatever the closed stream gives), and so does every later call on c: the
 * connection is unusable, and zrc_disconnect(c) is all that is left to do. The
 * daemon sees the connection close and reclaims what it held; a request it
 * was running may still finish. Must not run concurrently with
 * zrc_disconnect(c). NULL is allowed.
 *
 *     static zrc_conn *volatile busy;
 *     static void on_sigint(int sig) { (void)sig; zrc_interrupt(busy); }
 */
void zrc_interrupt(zrc_conn *c);

/* The last failure of a call on c (or on a dataset or set of c). The pointer
 * is valid until zrc_disconnect(c); its content until the next call that fails
 * on c. code is 0 if no call has failed yet. c must not be NULL.
 *
 *     if (r < 0) fprintf(stderr, "%s: %s\n", zrc_last_error(c)->name, zrc_last_error(c)->message);
 */
const zrc_error *zrc_last_error(const zrc_conn *c);

/* The path of the socket connected to; valid until zrc_disconnect(c).
 *
 *     printf("connected to %s\n", zrc_socket_path(c));
 */
const char *zrc_socket_path(const zrc_conn *c);

/* The protocol version in force (1 for this library).
 *
 *     if (zrc_version(c) < 2) use_v1_requests();
 */
uint32_t zrc_version(const zrc_conn *c);

/* The daemon's name and version, e.g. "zrecordd 0.1.0"; valid until
 * zrc_disconnect(c). Never NULL.
 *
 *     printf("served by %s\n", zrc_daemon_name(c));
 */
const char *zrc_daemon_name(const zrc_conn *c);

/* The limits in force; valid until zrc_disconnect(c).
 *
 *     uint64_t budget = zrc_limits_get(c)->shm_bytes_max;
 */
const zrc_limits *zrc_limits_get(const zrc_conn *c);

/* true if the daemon granted feature `name` ("loader", "msset", "dict",
 * "verify"). A request of a missing feature fails with -ZR_E_UNKNOWN without
 * reaching the daemon.
 *
 *     if (!zrc_has_feature(c, "dict")) puts("no dictionary training");
 */
bool zrc_has_feature(const zrc_conn *c, const char *name);

/* ======================================================================
 * Schemas
 * ====================================================================== */

/* Most dimensions of an item (dense) or a record (ragged); numpy's NPY_MAXDIMS. */
#define ZRC_NDIM_MAX 32
/* Longest dtype string, with its NUL ("<f4" is 4 bytes with it). */
#define ZRC_DTYPE_MAX 8

typedef enum zrc_kind {
        ZRC_DENSE = 0,   /* every record is one item of item_shape */
        ZRC_RAGGED = 1,  /* every record carries its own shape (ndim dims) */
} zrc_kind;

typedef enum zrc_codec {
        ZRC_CODEC_RAW = 0,
        ZRC_CODEC_ZSTD = 1,
        ZRC_CODEC_ZSTD_DICT = 2,
} zrc_codec;

/* Where a ragged dataset's shapes are kept (PROTOCOL.md, the schema map's
 * "layout"; docs/FORMAT.md). Reading and appending work alike in all three. */
typedef enum zrc_layout {
        ZRC_LAYOUT_ZRECORD = 0,  /* in a header in each record (and every dense store) */
        ZRC_LAYOUT_LX157 = 1,    /* loaderx 1.5.7's: in schema.msgpack; ndim 0 */
        ZRC_LAYOUT_BYTES = 2,    /* no schema.msgpack: byte records, "|u1", ndim 1 */
} zrc_layout;

/* A dataset's schema (docs/DATASETS.md, schema.msgpack). */
typedef struct zrc_schema {
        zrc_kind kind;
        char dtype[ZRC_DTYPE_MAX];  /* numpy's string: "<f4", "|u1", ">i8", ... */
        uint32_t ndim;              /* dense: dimensions of item_shape (0: scalars);
                                     * ragged: dimensions of every record (1..32), or
                                     * 0: each record has its own (1..32) */
        uint64_t item_shape[ZRC_NDIM_MAX]; /* dense: item_shape[0..ndim) */
        zrc_codec codec;
        zrc_layout layout;          /* ragged: where the daemon keeps the shapes */
} zrc_schema;

/* Fills *ret with a dense schema: records of dtype `dtype` and shape
 * item_shape[0..ndim) (item_shape may be NULL when ndim is 0). Returns 0 or
 * -EINVAL (dtype not understood, ndim > ZRC_NDIM_MAX). The daemon checks the
 * rest when the dataset is created.
 *
 *     uint64_t shape[] = {28, 28};
 *     zrc_schema_dense(&s, "|u1", shape, 2, ZRC_CODEC_ZSTD);
 */
int zrc_schema_dense(zrc_schema *ret, const char *dtype, const uint64_t *item_shape,
                     uint32_t ndim, zrc_codec codec);

/* Fills *ret with a ragged schema of `ndim` dims per record (1..32), or 0: each
 * record its own. Returns 0 or -EINVAL. Set ret->layout to ZRC_LAYOUT_BYTES
 * (with "|u1" and ndim 1) for a store of byte records without schema.msgpack, as
 * loaderx 1.5.7's Zrecord makes.
 *
 *     zrc_schema_ragged(&s, "<i4", 1, ZRC_CODEC_RAW);   // token sequences
 */
int zrc_schema_ragged(zrc_schema *ret, const char *dtype, uint32_t ndim, zrc_codec codec);

/* The codec's name: "raw", "zstd", "zstd_dict" (static strings); NULL for an
 * unknown value.
 *
 *     printf("codec %s\n", zrc_codec_name(zrc_dataset_schema(d)->codec));
 */
const char *zrc_codec_name(zrc_codec codec);

/* Parses a codec name (name may be NULL: refused). Returns 0 and sets *ret, or
 * -ZR_E_BAD_CODEC.
 *
 *     if (zrc_codec_parse(argv[2], &codec) < 0) usage();
 */
int zrc_codec_parse(const char *name, zrc_codec *ret);

/* The item size in bytes of a numpy dtype string ("<f4" -> 4, "|b1" -> 1), or
 * a negative code (-EINVAL) for a string that is not a plain number type
 * (kinds b, i, u, f, c, with an optional byte order '<', '>', '|' or '=');
 * dtype may be NULL (-EINVAL).
 *
 *     int itemsize = zrc_dtype_itemsize(zrc_dataset_schema(d)->dtype);
 */
int zrc_dtype_itemsize(const char *dtype);

/* Bytes of one dense record: itemsize × prod(item_shape). 0 for a ragged
 * schema or an unparsable dtype; UINT64_MAX on overflow.
 *
 *     void *buf = malloc(n * zrc_schema_record_bytes(zrc_dataset_schema(d)));
 */
uint64_t zrc_schema_record_bytes(const zrc_schema *s);

/* ======================================================================
 * Datasets
 * ====================================================================== */

typedef struct zrc_dataset zrc_dataset;

/* Flags of zrc_dataset_open() and zrc_set_open(). */
enum {
        ZRC_OPEN_WRITABLE = 1 << 0, /* write access: meta.zr is opened O_RDWR */
};

/* What the daemon reports about a dataset. */
typedef struct zrc_info {
        uint64_t length;   /* number of records */
        zrc_schema schema;
        bool has_dict;     /* a zstd_dict store has its dictionary */
        bool writable;     /* this handle has write access */
} zrc_info;

/* Opens the dataset stored in directory `path` (flags: 0 or ZRC_OPEN_WRITABLE).
 * The library opens the directory and its meta.zr (O_RDONLY, or O_RDWR for
 * write access) with the caller's rights and passes both descriptors
 * (PROTOCOL.md, section 6); it closes them again before returning.
 * Returns 0 and sets *ret (owned by the caller: zrc_dataset_close()), or:
 *   -ENOENT / -ENOTDIR / -EACCES: the path or meta.zr cannot be opened so;
 *   -ZR_E_NOT_STORE: the directory holds no store (no meta.zr, no schema);
 *   -ZR_E_BAD_MAGIC, -ZR_E_BAD_VERSION, -ZR_E_CORRUPT, -ZR_E_SCHEMA,
 *   -ZR_E_BAD_CODEC, -ZR_E_LOCKED: from the daemon (zrc_last_error());
 *   -ZR_E_LIMIT: too many handles on this connection.
 *
 *     zrc_dataset_open(c, "/data/mnist/images", ZRC_OPEN_WRITABLE, &d);
 */
int zrc_dataset_open(zrc_conn *c, const char *path, unsigned flags, zrc_dataset **ret);

/* Creates a dataset with `schema` in directory `path` and opens it with write
 * access. The directory is created (mode 0777 & ~umask) if missing; an
 * existing one must be empty and owned by the caller. A zstd_dict dataset may
 * be given its dictionary now (dict, dict_size; NULL/0: none, install one later
 * with zrc_dataset_install_dict()); other codecs take none (-EINVAL).
 * Returns 0 and sets *ret (owned by the caller: zrc_dataset_close()), or:
 *   -ZR_E_EXISTS: a store is already there (nothing is touched);
 *   -ENOTEMPTY, -EACCES, -ENOTDIR: the directory cannot hold a new store;
 *   -ZR_E_SCHEMA, -ZR_E_BAD_CODEC, -EINVAL: the schema or dictionary is refused.
 * A directory this call created is removed again when it fails.
 *
 *     zrc_schema_dense(&s, "<f4", NULL, 0, ZRC_CODEC_RAW);
 *     zrc_dataset_create(c, "/data/losses", &s, NULL, 0, &d);
 */
int zrc_dataset_create(zrc_conn *c, const char *path, const zrc_schema *schema,
                       const void *dict, size_t dict_size, zrc_dataset **ret);

/* Closes the dataset's handle and read buffer in the daemon and frees d. A
 * dataset that belongs to a set (zrc_set_stream()) is closed with its set and
 * is left alone here. NULL is allowed. All pointers into d's buffer become
 * invalid. Returns NULL.
 *
 *     d = zrc_dataset_close(d);
 */
zrc_dataset *zrc_dataset_close(zrc_dataset *d);

/* The schema, as the daemon reported it at open; the pointer is valid until d
 * is closed. d must not be NULL (nor for the accessors below).
 *
 *     if (zrc_dataset_schema(d)->kind == ZRC_RAGGED) ...
 */
const zrc_schema *zrc_dataset_schema(const zrc_dataset *d);

/* The length as last reported by the daemon (at open, append, delete, info,
 * stats); other clients may have changed it since: zrc_dataset_info() asks.
 *
 *     for (uint64_t i = 0; i < zrc_dataset_length(d); i += 256) ...
 */
uint64_t zrc_dataset_length(const zrc_dataset *d);

/* Whether the handle has write access.
 *
 *     if (!zrc_dataset_writable(d)) return -EROFS;
 */
bool zrc_dataset_writable(const zrc_dataset *d);

/* The connection d was opened on (for zrc_last_error()); valid while d is.
 *
 *     puts(zrc_last_error(zrc_dataset_conn(d))->message);
 */
zrc_conn *zrc_dataset_conn(const zrc_dataset *d);

/* Asks the daemon for the dataset's length, schema and dictionary state
 * (INFO). Returns 0 and fills *ret, or a negative code.
 *
 *     zrc_info i; zrc_dataset_info(d, &i); printf("%llu\n", (unsigned long long)i.length);
 */
int zrc_dataset_info(zrc_dataset *d, zrc_info *ret);

/* ---- reading ---------------------------------------------------------- */

/* The result of zrc_dataset_read(). Every pointer points into memory of the
 * dataset (its shared read buffer, mapped read-only, and arrays the library
 * owns) and stays valid until the next zrc_dataset_read() on the same dataset
 * or until it is closed, whichever comes first. Copy what must live longer. */
typedef struct zrc_batch {
        uint64_t count;         /* records read */
        zrc_kind kind;
        uint32_t ndim;          /* dense: of item_shape; ragged: of each record */
        /* dense: count × record_bytes bytes, one C-order (count, *item_shape)
         * array of the schema's dtype, 8-aligned (page-aligned, in fact) */
        const void *data;
        uint64_t record_bytes;  /* dense: bytes per record */
        uint64_t bytes;         /* bytes of the buffer used */
        /* ragged: record j's payload (C order, the schema's dtype) is
         * payloads[j], lengths[j] bytes, 8-aligned; its shape is ndims[j] dims
         * at shapes + shape_at[j], which is shapes[j × ndim .. (j + 1) × ndim)
         * when ndim is not 0 */
        const void *const *payloads;
        const uint64_t *lengths;
        const uint64_t *shapes;
        const uint32_t *ndims;
        const uint64_t *shape_at;
} zrc_batch;

/* Reads records indices[0..n) (any order, repeats allowed, n may be 0) into the
 * dataset's read buffer and describes them in *ret. The library opens the
 * buffer (BUFFER_OPEN) on first use and grows it (a new buffer; the old one is
 * closed) when a read needs more; a read larger than one frame can carry is
 * split into several requests, transparently. Pointers in *ret: see zrc_batch.
 * Returns 0, or:
 *   -ZR_E_RANGE: an index >= length (zrc_last_error()->index says which);
 *   -ZR_E_LIMIT: the read needs more shared memory than the daemon allows;
 *   -ZR_E_DECODE, -ZR_E_CORRUPT, -ZR_E_NO_DICT, -EIO: from the store.
 * On failure *ret is untouched and earlier batch pointers are invalid.
 *
 *     zrc_dataset_read(d, (uint64_t[]){0, 1, 2}, 3, &b); const float *x = b.data;
 */
int zrc_dataset_read(zrc_dataset *d, const uint64_t *indices, size_t n, zrc_batch *ret);

/* Reads the dense records indices[0..n) into the caller's memory: record j at
 * dst + j × record_bytes, C order, the schema's dtype. `dst_bytes` must hold
 * n × record_bytes. The records pass through the dataset's read buffer in
 * pieces of at most 64 MiB (one copy each into dst), so a read of any size needs
 * no more shared memory than that. Earlier zrc_batch pointers of the dataset
 * are invalid afterwards. Returns 0, or the errors of zrc_dataset_read(), or:
 *   -EINVAL:      a ragged dataset (its records have no fixed place), or
 *                 dst NULL with n > 0;
 *   -ZR_E_BUFFER: dst_bytes is less than n × record_bytes (nothing is read).
 * On failure dst's content is unspecified.
 *
 *     float x[3][20];
 *     zrc_dataset_read_into(d, (uint64_t[]){4, 0, 9}, 3, x, sizeof x);
 */
int zrc_dataset_read_into(zrc_dataset *d, const uint64_t *indices, size_t n, void *dst,
                          size_t dst_bytes);

/* ---- writing ---------------------------------------------------------- */

/* Records to append, as the caller describes them; the daemon checks them
 * against the schema before it writes anything.
 *   dense:  data holds count records of record_bytes bytes each, packed, C
 *           order. dtype and item_shape[0..ndim) say what the caller believes
 *           it writes; dtype NULL means "the schema's dtype and item shape".
 *   ragged: data holds count records packed back to back, record i being
 *           sizes[i] bytes: its shape header and payload (zrc_ragged_pack()).
 *           dtype NULL means the schema's dtype; ndim 0 the schema's ndim.
 * The kind is the dataset's. Pointers are only read during the call. */
typedef struct zrc_records {
        const char *dtype;
        const uint64_t *item_shape; /* dense */
        uint32_t ndim;
        uint64_t count;
        const void *data;
        const uint64_t *sizes;      /* ragged */
        uint32_t level;             /* the compression level, 1..19 in zstd's scale;
                                     * 0: the codec's default (a raw store ignores it) */
} zrc_records;

/* Appends records (one sealed memfd, one APPEND). On success sets *ret_first
 * (may be NULL) to the index of the first new record. A ragged append of more
 * records than one frame can describe is split into several APPENDs, each
 * atomic on its own. Returns 0, or:
 *   -ZR_E_SCHEMA: dtype, shape, ndim or a record header is not the schema's
 *                 (the message names what was expected and what came);
 *   -ZR_E_READONLY: the handle has no write access;
 *   -ZR_E_NO_DICT: a zstd_dict dataset without a dictionary;
 *   -ZR_E_TOO_BIG, -ENOSPC, -EIO, -ENOMEM, -EINVAL (inconsistent *r, or a
 *                 level outside 1..19).
 * On an error nothing of that APPEND is written.
 *
 *     zrc_records r = { .count = 100, .data = images };
 *     zrc_dataset_append(d, &r, &first);
 */
int zrc_dataset_append(zrc_dataset *d, const zrc_records *r, uint64_t *ret_first);

/* Dense shorthand: appends `count` records of the schema's dtype and item shape
 * from `data` (count × zrc_schema_record_bytes() bytes). As zrc_dataset_append().
 *
 *     zrc_dataset_append_dense(d, images, 100, NULL);
 */
int zrc_dataset_append_dense(zrc_dataset *d, const void *data, uint64_t count,
                             uint64_t *ret_first);

/* Ragged shorthand: appends `count` records of the schema's dtype, record i
 * having shape shapes[i × ndim .. (i + 1) × ndim) (ndim the schema's) and its
 * payload (prod(shape) × itemsize bytes, C order) at payloads[i]. The library
 * writes the shape headers. As zrc_dataset_append().
 *
 *     const void *p[] = {tokens_a, tokens_b}; uint64_t shp[] = {5, 9};
 *     zrc_dataset_append_ragged(d, 2, shp, p, NULL);
 */
/* -EINVAL for a dataset of ndim 0 (each record its own): pack its records with
 * zrc_ragged_pack() and append them with zrc_dataset_append(). */
int zrc_dataset_append_ragged(zrc_dataset *d, uint64_t count, const uint64_t *shapes,
                              const void *const *payloads, uint64_t *ret_first);

/* Bytes of a ragged record of shape dims[0..ndim) and `itemsize`: its header
 * (8 × (1 + ndim)) plus prod(dims) × itemsize. UINT64_MAX on overflow. */
uint64_t zrc_ragged_record_bytes(const uint64_t *dims, uint32_t ndim, uint32_t itemsize);

/* Writes one ragged record at dst (no alignment needed; room for
 * zrc_ragged_record_bytes() bytes): u64 LE ndim, u64 LE dims[0..ndim), then the
 * payload copied from `payload` (may be NULL when it is empty). Returns the
 * bytes written (the record's size). This is the layout APPEND expects.
 *
 *     dst += zrc_ragged_pack(dst, shape, 1, 4, tokens);
 */
uint64_t zrc_ragged_pack(void *dst, const uint64_t *dims, uint32_t ndim, uint32_t itemsize,
                         const void *payload);

/* Reads the shape header of a ragged record at rec (rec_len bytes) with ndim
 * dims expected: copies them to ret_dims[0..ndim) (may be NULL) and returns the
 * header's size (8 × (1 + ndim)), or -EINVAL if the record is shorter than its
 * header or its ndim differs. */
int64_t zrc_ragged_unpack(const void *rec, uint64_t rec_len, uint32_t ndim, uint64_t *ret_dims);

/* Deletes records indices[0..n) (distinct, any order) by swap-last: the index
 * space stays dense and survivors may be renumbered (docs/DATASETS.md). Sets
 * *ret_length (may be NULL) to the new length. Returns 0, or -ZR_E_RANGE (with
 * the index), -EINVAL (an index repeated), -ZR_E_READONLY, -EIO.
 *
 *     zrc_dataset_delete(d, (uint64_t[]){4}, 1, &len);
 */
int zrc_dataset_delete(zrc_dataset *d, const uint64_t *indices, size_t n,
                       uint64_t *ret_length);

/* ---- maintenance ------------------------------------------------------ */

/* A store's space accounting (STATS). */
typedef struct zrc_stats {
        uint64_t records;      /* live records */
        uint64_t live_bytes;   /* stored bytes of live records */
        uint64_t chunk_bytes;  /* bytes up to the write frontier */
        uint64_t reclaimable;  /* chunk_bytes - live_bytes: what compact() frees */
        bool has_logic_bytes;
        uint64_t logic_bytes;  /* decoded bytes of live records, if reported */
} zrc_stats;

/* Fills *ret with the store's space accounting. Returns 0 or a negative code.
 *
 *     zrc_stats s; zrc_dataset_stats(d, &s);
 */
int zrc_dataset_stats(zrc_dataset *d, zrc_stats *ret);

/* Reclaims the bytes of deleted records in place (needs write access) and
 * fills *ret (may be NULL) with the stats after compaction. Returns 0, or
 * -ZR_E_READONLY, -ENOSPC, -EIO.
 *
 *     zrc_dataset_compact(d, &after);
 */
int zrc_dataset_compact(zrc_dataset *d, zrc_stats *ret);

/* Makes every append and delete so far durable. Returns 0, -EIO, or
 * -ZR_E_READONLY (an earlier fsync failed).
 *
 *     zrc_dataset_sync(d);
 */
int zrc_dataset_sync(zrc_dataset *d);

/* Most bad indices VERIFY reports. */
#define ZRC_VERIFY_BAD_MAX 1024

typedef struct zrc_verify_result {
        bool ok;               /* no record is bad */
        uint64_t records;      /* records checked */
        uint64_t bad;          /* records that failed */
        size_t n_bad_indices;  /* entries of bad_indices, <= ZRC_VERIFY_BAD_MAX */
        uint64_t bad_indices[ZRC_VERIFY_BAD_MAX]; /* the first bad indices */
} zrc_verify_result;

/* Reads and decodes every record and checks every table entry (feature
 * "verify"). A bad record is a result (ret->ok false), not an error. Returns
 * 0, or -ZR_E_UNKNOWN (no such feature), -EIO, -ZR_E_NO_DICT.
 *
 *     zrc_verify_result *v = malloc(sizeof(*v)); zrc_dataset_verify(d, v);
 */
int zrc_dataset_verify(zrc_dataset *d, zrc_verify_result *ret);

/* Converts the ragged dataset at src_path (read access is enough; it does not
 * change) into a new one at dst_path (created if missing, else it must be an
 * empty directory of the caller's) in layout `to` (feature "convert", CONVERT):
 * ZRC_LAYOUT_ZRECORD, zrecord's own (cheap appends, the shape inside each
 * record), or ZRC_LAYOUT_LX157, which loaderx 1.5.7 opens. The same records in
 * the same order, dtype, codec and dictionary. Sets *ret_count (may be NULL) to
 * the records converted and *ret_schema (may be NULL) to the new dataset's.
 * Returns 0, or the errors of zrc_dataset_open() and zrc_dataset_create(), or
 * -ZR_E_SCHEMA (a dense source, one already in that layout, or an empty record,
 * which loaderx 1.5.7 stores none of), -EINVAL (another `to`), -ZR_E_UNKNOWN.
 * An interrupted conversion leaves only an incomplete dst_path: remove it and
 * convert again.
 *
 *     zrc_convert(c, "/data/tokens-lx", "/data/tokens", ZRC_LAYOUT_ZRECORD, &n, NULL);
 */
int zrc_convert(zrc_conn *c, const char *src_path, const char *dst_path, zrc_layout to,
                uint64_t *ret_count, zrc_schema *ret_schema);

/* ---- dictionaries (feature "dict") ------------------------------------ */

/* Trains a zstd dictionary sized by `tier` (a DICT_TIERS name of
 * docs/DATASETS.md, e.g. "balanced") over the dataset's records. Returns 0 and
 * sets *ret_dict (malloc()ed, owned by the caller: free()) and *ret_size, or
 * -EINVAL (unknown tier, too few samples), -ZR_E_UNKNOWN (no "dict" feature).
 *
 *     zrc_dataset_train_dict(d, "balanced", &dict, &dict_size);
 */
int zrc_dataset_train_dict(zrc_dataset *d, const char *tier, void **ret_dict,
                           size_t *ret_size);

/* As zrc_dataset_train_dict(), over `count` samples the caller gives: packed
 * back to back in data, sample i sizes[i] bytes (raw record bytes: for a
 * ragged store, whole records with their headers).
 *
 *     zrc_train_dict(c, "balanced", buf, sizes, n, &dict, &dict_size);
 */
int zrc_train_dict(zrc_conn *c, const char *tier, const void *data, const uint64_t *sizes,
                   size_t count, void **ret_dict, size_t *ret_size);

/* Installs dict[0..size) as the dictionary of an empty zstd_dict dataset opened
 * with write access. Returns 0, or -ZR_E_HAS_DICT, -ZR_E_SCHEMA (the dataset
 * holds records already), -ZR_E_BAD_CODEC (not a zstd_dict store),
 * -ZR_E_READONLY, -EINVAL (zstd refuses the dictionary).
 *
 *     zrc_dataset_install_dict(d, dict, dict_size);
 */
int zrc_dataset_install_dict(zrc_dataset *d, const void *dict, size_t size);

/* ======================================================================
 * Multi-stream sets (feature "msset")
 * ====================================================================== */

typedef struct zrc_set zrc_set;

/* Opens the multi-stream set in directory `path`: every immediate child
 * directory holding a meta.zr is a stream, opened in name order (flags: 0 or
 * ZRC_OPEN_WRITABLE); each stream's directory and meta.zr are opened with the
 * caller's rights and passed as proofs, so a stream whose directory the caller
 * cannot read fails with its errno (-EACCES). Returns 0 and sets *ret (owned by the caller:
 * zrc_set_close()), or -ENOENT (no child store), -E2BIG (more than 32),
 * -ZR_E_MISALIGNED (the streams differ in length: the message names them),
 * an error of zrc_dataset_open() naming the stream, -ZR_E_UNKNOWN (no "msset").
 *
 *     zrc_set_open(c, "/data/pairs", 0, &set);
 */
int zrc_set_open(zrc_conn *c, const char *path, unsigned flags, zrc_set **ret);

/* Closes the set and every stream's dataset (their pointers and batches become
 * invalid); NULL allowed; returns NULL.
 *
 *     set = zrc_set_close(set);
 */
zrc_set *zrc_set_close(zrc_set *set);

/* The common length at open, or after the last append or delete on the set.
 *
 *     uint64_t n = zrc_set_length(set);
 */
uint64_t zrc_set_length(const zrc_set *set);

/* The number of streams (1..32).
 *
 *     for (size_t i = 0; i < zrc_set_streams(set); i++) ...
 */
size_t zrc_set_streams(const zrc_set *set);

/* Stream i's name (a directory entry name), or NULL if i is out of range;
 * valid until the set is closed.
 *
 *     printf("%s\n", zrc_set_stream_name(set, i));
 */
const char *zrc_set_stream_name(const zrc_set *set, size_t i);

/* Stream i's dataset (read, info, stats ... on it work as on any dataset), or
 * NULL if i is out of range. Owned by the set: valid until zrc_set_close();
 * zrc_dataset_close() on it does nothing.
 *
 *     zrc_dataset_read(zrc_set_stream(set, 0), idx, n, &b);
 */
zrc_dataset *zrc_set_stream(const zrc_set *set, size_t i);

/* Appends records to every stream at once: records[i] for stream i (in
 * zrc_set_stream() order), each with the same count. Validated together,
 * committed stream by stream. Returns 0 and sets *ret_first (may be NULL), or
 * the errors of zrc_dataset_append() and -ZR_E_MISALIGNED.
 *
 *     zrc_set_append(set, (zrc_records[]){ imgs, labels }, &first);
 */
int zrc_set_append(zrc_set *set, const zrc_records *records, uint64_t *ret_first);

/* Deletes the same indices from every stream, by swap-last. As
 * zrc_dataset_delete() (ret_length may be NULL).
 *
 *     zrc_set_delete(set, (uint64_t[]){ 3, 9 }, 2, &len);
 */
int zrc_set_delete(zrc_set *set, const uint64_t *indices, size_t n, uint64_t *ret_length);

/* ======================================================================
 * Daemon status
 * ====================================================================== */

/* A loader's counters over a span of time (STATUS telemetry; docs/TELEMETRY.md
 * says what each measures). Times in ns. */
typedef struct zrc_tel_span {
        uint64_t span_ns;      /* the time the counts cover */
        uint64_t batches, bytes;        /* announced to the client */
        uint64_t waits, wait_ns;        /* the consumer's waits, as its client reported them */
        uint64_t readies, ready_ns;     /* ready batches' waits for the consumer */
        uint64_t fills, fill_ns;        /* gathers, and their wall time by stage: */
        uint64_t lookup_ns, read_ns, decode_ns, copy_ns;
        uint64_t io_wait_ns;   /* waits for reads ahead */
        uint64_t queue_ns;     /* waits for a worker while other loaders held them all */
        uint64_t device_bytes, hits, misses;
} zrc_tel_span;

/* What the daemon measures of a loader (all 0 and "" from an older daemon). */
typedef struct zrc_loader_telemetry {
        bool present;          /* the daemon sent it */
        char verdict[16];      /* "data-bound", "consumer-bound", "balanced", "idle", "unknown" */
        char stage[16];        /* "io", "decode", "copy", "contention", "none" */
        bool reports;          /* the client reports its waits */
        uint64_t age_ms, prefetch_depth;
        uint64_t wait_p50_ns, wait_p99_ns, ready_p50_ns, ready_p99_ns, fill_p50_ns, fill_p99_ns;
        zrc_tel_span total, w1, w10, w60; /* since open; the last 1, 10, 60 s */
        zrc_tel_span group;    /* the last 10 s of its group's gathers (the stage's) */
} zrc_loader_telemetry;

typedef struct zrc_loader_status {
        uint64_t pid;          /* the loader's client */
        uint32_t loader;       /* its handle on that connection */
        char sampler[16];
        uint64_t batch_size, streams, step, batches, gathers, hits, misses, bytes, evictions;
        uint64_t shared;       /* batches it took from a slot another loader of its group filled */
        uint64_t io_waits;     /* steps whose gather waited for their reads ahead (0: older daemon) */
        /* the slots the daemon fills ahead of it now (it starts at 2 and grows
         * when the client's reported waits show the depth held it back,
         * docs/DESIGN.md, "Depth") and the times it grew; depth_present is
         * false and both 0 from a daemon that does not send them */
        bool depth_present;
        uint64_t depth, depth_raises;
        uint64_t uid;          /* its client's uid */
        char command[128];     /* its client's command line (or its name), valid UTF-8 */
        char dataset[256];     /* its stores' directories as the daemon names them */
        zrc_loader_telemetry telemetry;
} zrc_loader_status;

/* Reading ahead of the loaders (STATUS `prefetch`; all 0 from an older daemon). */
typedef struct zrc_prefetch_status {
        char backend[16];      /* "uring", "threads", "none", or "" */
        uint64_t budget, bytes, peak;   /* bytes read ahead and not gathered: allowed, now, most */
        uint64_t steps, warm, busy;     /* steps read ahead, found resident, skipped (a mutation) */
        uint64_t records, resident, cached; /* records read, found resident, found decoded */
        uint64_t read_bytes, reads, merged, in_flight, queue_depth;
        uint64_t depth, waits, errors, cancelled, planned_steps;
        uint64_t latency_p50_ns, latency_p99_ns;
        /* steps of large records found not resident, gathered with pread (not
         * through the stores' mappings) */
        uint64_t cold;
        /* Direct reads (docs/IO.md; "" and 0 from an older daemon): */
        char direct_mode[16];  /* the io-direct setting: "off", "auto", "always" */
        uint64_t direct_min;   /* "auto" reads directly only loaders whose stores hold
                                * more bytes (half the daemon's memory) */
        uint64_t direct, fits; /* steps found not resident whose streams take direct
                                * reads: read so, read through the page cache (they fit) */
        uint64_t direct_steps, direct_bytes; /* fills read with O_DIRECT, their bytes */
        uint64_t direct_copied;    /* bytes copied from blocks read apart (unaligned records) */
        uint64_t direct_fallbacks; /* direct steps gathered through the page cache instead */
        uint64_t direct_errors;    /* direct steps the device failed (their batches: EIO) */
} zrc_prefetch_status;

/* One memory budget in force (STATUS `budgets`). */
typedef struct zrc_budget {
        uint64_t bytes;
        char source[320];      /* "setting", or how "auto" was reckoned */
} zrc_budget;

typedef struct zrc_status {
        char daemon[64];
        uint64_t uptime_ms, clients, handles, shm_bytes, loaders;
        uint64_t batches, gathers, hits, misses, bytes, evictions;
        uint64_t cache_budget, cache_bytes, cache_entries;
        uint64_t shared;       /* batches taken from a slot another loader filled, since start */
        uint64_t cache_bypassed, cache_planned; /* the cache's next-use rule (0: older daemon) */
        uint64_t loop_fills;   /* loaders' fills run on the daemon's loop at a RELEASE
                                * (small warm raw slots, `loop-fill`; 0: older daemon) */
        /* loaders' control memory (proto/PROTOCOL.md section 10, "Control
         * memory"), since start: batches announced in it, WAKE events sent,
         * loaders ended for what their client wrote into it; ctl_present is
         * false and all 0 from a daemon that does not send them */
        bool ctl_present;
        uint64_t ctl_batches, ctl_wakes, ctl_faults;
        zrc_prefetch_status prefetch;
        /* the memory the daemon may use (0: unknown or an older daemon), and
         * its budgets: cache, ring-spare, prefetch, shared memory of all uids
         * and of one, and the free read buffers a client keeps (read-pool; 0
         * from an older daemon) */
        uint64_t memory;
        char memory_source[256];
        zrc_budget budget_cache, budget_ring_spare, budget_prefetch, budget_shm_total,
                budget_shm_uid, budget_read_pool;
        size_t n_loaders;
        zrc_loader_status *per_loader; /* n_loaders entries, owned by the zrc_status */
} zrc_status;

/* Asks the daemon for its counters (STATUS). Returns 0 and sets *ret (owned by
 * the caller: zrc_status_free()), or a negative code.
 *
 *     zrc_status *st; zrc_status_query(c, &st); ...; st = zrc_status_free(st);
 */
int zrc_status_query(zrc_conn *c, zrc_status **ret);

/* Frees a status and its per_loader array; NULL allowed; returns NULL.
 *
 *     st = zrc_status_free(st);
 */
zrc_status *zrc_status_free(zrc_status *st);

/* The daemon's metrics in the Prometheus text format (METRICS, feature
 * "metrics"): the daemon-wide families and those of the loaders the caller
 * may see (its own; root and the daemon's user: every one). Sets *ret to a
 * NUL-terminated copy (free() it) and *len to its length (may be NULL).
 * Returns 0, or -ZR_E_UNKNOWN (a daemon without metrics), -ENOMEM, ...
 *
 *     char *text; zrc_metrics_text(c, &text, NULL); fputs(text, stdout); free(text);
 */
int zrc_metrics_text(zrc_conn *c, char **ret, size_t *len);

#ifdef __cplusplus
}
#endif

/* Loaders, mixtures and the steps that saw a record: */
#include "zrc-loader.h"

#endif
