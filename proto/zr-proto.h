/* zr-proto.h: the constants of the zrecord wire protocol, shared by the daemon,
 * libzrc and the codec in wire.[ch].
 *
 * proto/PROTOCOL.md is the normative specification; this header only names what
 * it defines: the protocol version, the message kinds and their names on the
 * wire, the feature names, the field names, and the limits with their reasons.
 * Error codes live in zr-errors.h. This header depends on nothing but the C
 * library, and changing a published value is a protocol change.
 */
#ifndef ZR_PROTO_H
#define ZR_PROTO_H

#include <stdint.h>

/* Protocol versions this build speaks. HELLO picks the highest version inside
 * both sides' ranges (PROTOCOL.md, "HELLO"). */
#define ZR_PROTO_VERSION_MIN 1
#define ZR_PROTO_VERSION_MAX 1

/* ---- framing ----------------------------------------------------------- */

/* Every frame starts with the body length as a little-endian u32. */
#define ZR_FRAME_HEADER_SIZE 4

/* Default largest body a receiver accepts. 1 MiB holds a READ of 131 072
 * indices (bin of u64) or a BATCH event of a large ragged batch, while one
 * frame buffer per client stays cheap for a daemon with hundreds of clients. */
#define ZR_FRAME_MAX_DEFAULT (UINT32_C(1) << 20)
/* No daemon may configure a smaller maximum: a client sends HELLO before it
 * knows the daemon's limit, so every request up to this size must always be
 * acceptable. */
#define ZR_FRAME_MAX_FLOOR (UINT32_C(64) << 10)
/* No daemon may configure a larger maximum: bulk data travels through shared
 * memory, never through frames, so anything bigger is a bug or an attack, and
 * a per-client buffer of this size is the most a hostile peer can pin. */
#define ZR_FRAME_MAX_CEILING (UINT32_C(64) << 20)

/* ---- body decoding limits ---------------------------------------------- */

/* Deepest nesting of containers in a body (the body map is depth 1). The
 * deepest message of version 1 (STATUS reply) needs 4; 8 leaves room for later
 * versions and bounds the decoder's stack. */
#define ZR_WIRE_DEPTH_MAX 8
/* Most msgpack objects in one body (every container and scalar counts). Bulk
 * arrays travel as bin, so real messages need a few thousand at most; this
 * bounds the decoder's memory at ~1.5 MiB of msgpack_object per body. */
#define ZR_WIRE_OBJECTS_MAX 65536
/* Most entries in any map. Keys are checked for duplicates, which is quadratic
 * in the entries of one map; 64 keeps that trivial and is 3x the largest map
 * of version 1. */
#define ZR_WIRE_MAP_KEYS_MAX 64
/* Longest map key. Field names are short identifiers. */
#define ZR_WIRE_KEY_MAX 32

/* ---- descriptors ------------------------------------------------------- */

/* Most streams in a multi-stream set or a loader. */
#define ZR_STREAMS_MAX 32
/* Most descriptors attached to one frame. The largest need is MSSET_OPEN (the
 * root, then each stream's directory and meta.zr: 1 + 2 * ZR_STREAMS_MAX = 65);
 * it stays well under the kernel's SCM_MAX_FD (253), and sizes the receiver's
 * control buffer (CMSG_SPACE(65 * sizeof(int)) = 280 bytes). */
#define ZR_FDS_PER_FRAME_MAX (1 + 2 * ZR_STREAMS_MAX)
/* Most sources of a mixture (LOADER_OPEN `sources`, STEPS_OF; proto/SAMPLERS.md,
 * "Mixtures"): each is a set of streams, so a loader of S streams per source
 * holds S per source of them. */
#define ZR_SOURCES_MAX 256
/* Longest stream name (a directory entry name). */
#define ZR_STREAM_NAME_MAX 255

/* ---- per-client and global limits (defaults; the daemon's config may change
 * them, and HELLO's reply tells the client the values in force) ----------- */

/* Open handles (datasets, sets, buffers, loaders) per connection. Each pins a
 * little daemon memory and maybe a store; 1024 is far above any real client. */
#define ZR_HANDLES_MAX_DEFAULT 1024
/* Shared memory per connection: read buffers plus loader rings. 4 GiB holds a
 * prefetch of 8 slots of a 256 x 256 KiB batch (64 MiB each) with room to spare,
 * and keeps one client from pinning the machine's memory. */
#define ZR_SHM_BYTES_MAX_DEFAULT (UINT64_C(4) << 30)
/* Loaders per connection (they also count as handles). Each loader takes
 * worker time and a ring; 64 is well above a training process's needs. */
#define ZR_LOADERS_MAX_DEFAULT 64
/* Connections in total. */
#define ZR_CLIENTS_MAX_DEFAULT 256
/* Requests read from one connection and not yet answered. When reached, the
 * daemon stops reading that socket until a reply goes out (flow control, not an
 * error), so a pipelining client cannot queue unbounded work. */
#define ZR_PIPELINE_MAX 64
/* Protocol faults and limit errors after which a connection is closed. A
 * correct client makes none; a few leave room for probing a limit. */
#define ZR_STRIKES_MAX 16
/* Deepest loader prefetch (ring slots). */
#define ZR_PREFETCH_MAX 64

/* ---- layout of shared memory ------------------------------------------- */

/* Buffers, rings and slots start at page boundaries (mappings are page
 * granular; a slot on its own pages can be pre-faulted and never shares a page
 * with its neighbour). */
#define ZR_SHM_ALIGN 4096
/* Each stream's region inside a slot starts at a multiple of 64 (a cache line,
 * so two streams never share one; and enough for any dtype). */
#define ZR_STREAM_ALIGN 64
/* Each ragged record in a buffer or slot starts at a multiple of 8, so its
 * payload (after its 8 x (1 + ndim) byte header) is 8-aligned too. */
#define ZR_RECORD_ALIGN 8

/* ---- message kinds ----------------------------------------------------- */

/* The value of a body's "kind" key is the lower-case name in the comment. The
 * numeric values are this header's own and never travel on the wire. */
typedef enum zr_msg_kind {
        ZR_MSG_INVALID = 0,
        /* requests (client -> daemon) */
        ZR_MSG_HELLO,           /* "hello" */
        ZR_MSG_DATASET_CREATE,  /* "dataset_create" */
        ZR_MSG_DATASET_OPEN,    /* "dataset_open" */
        ZR_MSG_MSSET_OPEN,      /* "msset_open" */
        ZR_MSG_INFO,            /* "info" */
        ZR_MSG_BUFFER_OPEN,     /* "buffer_open" */
        ZR_MSG_READ,            /* "read" */
        ZR_MSG_APPEND,          /* "append" */
        ZR_MSG_DELETE,          /* "delete" */
        ZR_MSG_COMPACT,         /* "compact" */
        ZR_MSG_STATS,           /* "stats" */
        ZR_MSG_SYNC,            /* "sync" */
        ZR_MSG_VERIFY,          /* "verify" */
        ZR_MSG_TRAIN_DICT,      /* "train_dict" */
        ZR_MSG_INSTALL_DICT,    /* "install_dict" */
        ZR_MSG_CONVERT,         /* "convert" */
        ZR_MSG_STATUS,          /* "status" */
        ZR_MSG_CLOSE,           /* "close" */
        ZR_MSG_LOADER_OPEN,     /* "loader_open" */
        ZR_MSG_RELEASE,         /* "release" (a notification: no id, no reply) */
        ZR_MSG_LOADER_CLOSE,    /* "loader_close" */
        ZR_MSG_STEPS_OF,        /* "steps_of" */
        ZR_MSG_METRICS,         /* "metrics" */
        ZR_MSG_DOORBELL,        /* "doorbell" (a notification, feature "ctlring") */
        /* replies (daemon -> client, one per request, in request order) */
        ZR_MSG_OK,              /* "ok" */
        ZR_MSG_ERROR,           /* "error" */
        /* events (daemon -> client, unsolicited, between any two frames) */
        ZR_MSG_BATCH,           /* "batch" */
        ZR_MSG_LOADER_END,      /* "loader_end" */
        ZR_MSG_RING,            /* "ring" (carries one descriptor) */
        ZR_MSG_RING_CLOSE,      /* "ring_close" */
        ZR_MSG_FAULT,           /* "fault" */
        ZR_MSG_WAKE,            /* "wake" (feature "ctlring") */
        _ZR_MSG_MAX,
} zr_msg_kind;

#define ZR_MSG_FIRST_REQUEST ZR_MSG_HELLO
#define ZR_MSG_LAST_REQUEST ZR_MSG_DOORBELL

/* ---- feature names (HELLO "features") ---------------------------------- */

#define ZR_FEATURE_LOADER "loader" /* LOADER_OPEN, RELEASE, LOADER_CLOSE, BATCH, LOADER_END */
#define ZR_FEATURE_MSSET "msset"   /* MSSET_OPEN and set handles */
#define ZR_FEATURE_DICT "dict"     /* TRAIN_DICT, INSTALL_DICT */
#define ZR_FEATURE_VERIFY "verify" /* VERIFY */
#define ZR_FEATURE_CONVERT "convert" /* CONVERT */
#define ZR_FEATURE_MIXTURE "mixture"   /* LOADER_OPEN `sources`, BATCH `source` */
#define ZR_FEATURE_STEPS_OF "steps_of" /* STEPS_OF */
#define ZR_FEATURE_METRICS "metrics" /* METRICS */
#define ZR_FEATURE_STRIDE "stride"   /* LOADER_OPEN `step_stride` */
#define ZR_FEATURE_REMOTE "remote"   /* DATASET_OPEN, MSSET_OPEN `remote`: stores in object storage */
#define ZR_FEATURE_PACK "pack"       /* LOADER_OPEN streams' `pack`: packed token sequences */
#define ZR_FEATURE_IMAGE "image"     /* LOADER_OPEN streams' `image`: decoded images */
#define ZR_FEATURE_APPEND_LENGTHS "append_lengths" /* APPEND `lengths`: headers made by the daemon */
#define ZR_FEATURE_CTLRING "ctlring" /* LOADER_OPEN `ctlring`: control memory, DOORBELL, WAKE */

/* ---- field names used by the codec itself ------------------------------ */

#define ZR_FIELD_KIND "kind"
#define ZR_FIELD_ID "id"
#define ZR_FIELD_CODE "code"
#define ZR_FIELD_NAME "name"
#define ZR_FIELD_MESSAGE "message"

#endif
