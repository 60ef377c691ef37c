/* message.c: tables of the fields of every message and a validator over them.
 *
 * The tables below are the C form of proto/PROTOCOL.md's message sections; a
 * change to one is a change to the other. Each field has a name, a type and a
 * required flag; maps nested in a message (a schema, the entries of "streams")
 * have tables of their own. The validator walks the table, not the message, so
 * unknown keys cost nothing and are ignored, and a message's size bounds its
 * cost (containers were bounded by wire.c before we get here).
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "message.h"

typedef enum field_type {
        T_UINT,  /* unsigned integer, 0..2^64-1 */
        T_U32,   /* unsigned integer, 0..2^32-1 */
        T_BOOL,
        T_STR,
        T_BIN,
        T_U64S,  /* bin of little-endian u64 (length a multiple of 8) */
        T_UINTS, /* array of unsigned integers */
        T_STRS,  /* array of str */
        T_MAP,   /* map checked against `sub` */
        T_MAPS,  /* array of maps each checked against `sub` */
} field_type;

typedef struct field {
        const char *name;
        field_type type;
        bool required;
        const struct field *sub; /* T_MAP, T_MAPS: the nested table */
} field;

#define REQ(n, t) { n, t, true, NULL }
#define OPT(n, t) { n, t, false, NULL }
#define REQ_SUB(n, t, s) { n, t, true, s }
#define OPT_SUB(n, t, s) { n, t, false, s }
#define END { NULL, 0, false, NULL }

/* ---- nested maps ------------------------------------------------------- */

/* docs/DATASETS.md, schema.msgpack */
static const field schema_fields[] = {
        REQ("kind", T_STR), REQ("dtype", T_STR), OPT("item_shape", T_UINTS),
        OPT("ndim", T_U32), REQ("codec", T_STR), OPT("layout", T_STR), END,
};

static const field limits_fields[] = {
        REQ("frame_max", T_UINT), REQ("handles_max", T_UINT), REQ("shm_bytes_max", T_UINT),
        REQ("loaders_max", T_UINT), REQ("pipeline_max", T_UINT),
        REQ("fds_per_frame_max", T_UINT), REQ("streams_max", T_UINT),
        REQ("prefetch_max", T_UINT), OPT("read_pool_max", T_UINT), END,
};

static const field append_stream_fields[] = {
        REQ("name", T_STR), OPT("offset", T_UINT), OPT("count", T_UINT),
        OPT("record_bytes", T_UINT), OPT("sizes", T_U64S), REQ("dtype", T_STR),
        OPT("item_shape", T_UINTS), OPT("ndim", T_U32), OPT("lengths", T_U64S), END,
};

/* LOADER_OPEN: a packed stream's (feature "pack") */
static const field loader_pack_fields[] = {
        REQ("seq_len", T_UINT), OPT("mode", T_STR), OPT("eos_id", T_UINT), OPT("pad_id", T_UINT),
        OPT("window", T_UINT), END,
};

static const field loader_stream_fields[] = {
        REQ("handle", T_U32), OPT("capacity", T_UINT), OPT("name", T_STR),
        OPT_SUB("pack", T_MAP, loader_pack_fields), END,
};

/* LOADER_OPEN: a mixture's source */
static const field loader_source_fields[] = {
        REQ_SUB("streams", T_MAPS, loader_stream_fields), REQ("weight", T_U32),
        OPT("sampler", T_STR), OPT("length", T_UINT), END,
};

/* LOADER_OPEN's reply: a mixture's source */
static const field loader_source_ok_fields[] = { REQ("length", T_UINT), END };

/* STEPS_OF: a mixture's source */
static const field steps_source_fields[] = {
        REQ("n", T_UINT), REQ("weight", T_U32), OPT("sampler", T_STR), END,
};

static const field msset_stream_fields[] = {
        REQ("name", T_STR), REQ("handle", T_U32), REQ("length", T_UINT),
        REQ_SUB("schema", T_MAP, schema_fields), REQ("has_dict", T_BOOL), END,
};

static const field ring_stream_fields[] = {
        REQ("offset", T_UINT), REQ("capacity", T_UINT), OPT("segments", T_UINT),
        OPT("positions", T_UINT), END,
};

static const field batch_stream_fields[] = {
        REQ("offset", T_UINT), REQ("bytes", T_UINT), OPT("offsets", T_U64S),
        OPT("lengths", T_U64S), OPT("shapes", T_U64S), END,
};

static const field cache_fields[] = {
        REQ("budget", T_UINT), REQ("bytes", T_UINT), REQ("entries", T_UINT),
        OPT("bypassed", T_UINT), OPT("planned", T_UINT), END,
};

/* STATUS: reading ahead */
static const field prefetch_fields[] = {
        REQ("backend", T_STR), REQ("budget", T_UINT), REQ("bytes", T_UINT), REQ("peak", T_UINT),
        REQ("steps", T_UINT), REQ("warm", T_UINT), REQ("busy", T_UINT), REQ("records", T_UINT),
        REQ("resident", T_UINT), REQ("cached", T_UINT), REQ("read_bytes", T_UINT),
        REQ("reads", T_UINT), REQ("merged", T_UINT), REQ("in_flight", T_UINT),
        REQ("queue_depth", T_UINT), REQ("depth", T_UINT), REQ("waits", T_UINT),
        REQ("errors", T_UINT), REQ("cancelled", T_UINT), REQ("planned_steps", T_UINT),
        REQ("latency_p50_ns", T_UINT), REQ("latency_p99_ns", T_UINT), END,
};

/* STATUS: stores in object storage (docs/REMOTE.md) */
static const field remote_status_fields[] = {
        REQ("dir", T_STR), REQ("budget", T_UINT), REQ("budget_source", T_STR),
        REQ("datasets", T_UINT), REQ("cached_bytes", T_UINT), REQ("cached_records", T_UINT),
        REQ("disk_bytes", T_UINT), REQ("evictions", T_UINT), REQ("bypassed", T_UINT),
        REQ("hits", T_UINT), REQ("misses", T_UINT), REQ("needed_bytes", T_UINT),
        REQ("fetched_bytes", T_UINT), REQ("shared", T_UINT), REQ("refetched", T_UINT),
        REQ("requests", T_UINT), REQ("retries", T_UINT), REQ("failures", T_UINT),
        REQ("in_flight", T_UINT), REQ("queued", T_UINT), REQ("state", T_STR),
        OPT("degraded_ms", T_UINT), OPT("last_error", T_STR), END,
};

/* STATUS: one memory budget */
static const field budget_fields[] = { REQ("bytes", T_UINT), REQ("source", T_STR), END };

static const field budgets_fields[] = {
        REQ("memory", T_UINT), REQ("memory_source", T_STR),
        REQ_SUB("cache", T_MAP, budget_fields), REQ_SUB("ring_spare", T_MAP, budget_fields),
        REQ_SUB("prefetch", T_MAP, budget_fields), REQ_SUB("shm_total", T_MAP, budget_fields),
        REQ_SUB("shm_uid", T_MAP, budget_fields), OPT_SUB("read_pool", T_MAP, budget_fields),
        OPT_SUB("work_total", T_MAP, budget_fields), OPT_SUB("work_uid", T_MAP, budget_fields), END,
};

/* STATUS: a loader's counters over a span of time (its telemetry) */
static const field tel_span_fields[] = {
        REQ("span_ns", T_UINT), REQ("batches", T_UINT), REQ("bytes", T_UINT),
        REQ("waits", T_UINT), REQ("wait_ns", T_UINT), REQ("readies", T_UINT),
        REQ("ready_ns", T_UINT), REQ("fills", T_UINT), REQ("fill_ns", T_UINT),
        REQ("lookup_ns", T_UINT), REQ("read_ns", T_UINT), REQ("decode_ns", T_UINT),
        REQ("copy_ns", T_UINT), REQ("io_wait_ns", T_UINT), REQ("queue_ns", T_UINT),
        REQ("device_bytes", T_UINT), REQ("hits", T_UINT), REQ("misses", T_UINT), END,
};

/* STATUS: a loader's telemetry */
static const field telemetry_fields[] = {
        REQ("age_ms", T_UINT), REQ("verdict", T_STR), REQ("stage", T_STR),
        REQ("reports", T_BOOL), REQ("prefetch_depth", T_UINT), REQ("wait_p50_ns", T_UINT),
        REQ("wait_p99_ns", T_UINT), REQ("ready_p50_ns", T_UINT), REQ("ready_p99_ns", T_UINT),
        REQ("fill_p50_ns", T_UINT), REQ("fill_p99_ns", T_UINT),
        REQ_SUB("total", T_MAP, tel_span_fields), REQ_SUB("w1", T_MAP, tel_span_fields),
        REQ_SUB("w10", T_MAP, tel_span_fields), REQ_SUB("w60", T_MAP, tel_span_fields),
        REQ_SUB("group", T_MAP, tel_span_fields), END,
};

static const field loader_stat_fields[] = {
        REQ("pid", T_UINT), REQ("loader", T_U32), REQ("sampler", T_STR),
        REQ("batch_size", T_UINT), REQ("streams", T_UINT), REQ("step", T_UINT),
        REQ("batches", T_UINT), REQ("gathers", T_UINT), REQ("hits", T_UINT),
        REQ("misses", T_UINT), REQ("bytes", T_UINT), REQ("evictions", T_UINT),
        REQ("shared", T_UINT), OPT("io_waits", T_UINT), OPT("uid", T_UINT),
        OPT("command", T_STR), OPT("dataset", T_STR),
        OPT_SUB("telemetry", T_MAP, telemetry_fields), END,
};

/* STATUS: one uid's account (the daemon's users.h) */
static const field user_stat_fields[] = {
        REQ("uid", T_UINT), REQ("connections", T_UINT), REQ("bytes", T_UINT), REQ("fds", T_UINT),
        REQ("shm_bytes", T_UINT), REQ("jobs", T_UINT), REQ("running", T_UINT),
        OPT("work_bytes", T_UINT), END,
};

/* STATUS: the limits in force (0: none) */
static const field status_limits_fields[] = {
        REQ("clients_max", T_UINT), REQ("clients_uid_max", T_UINT),
        REQ("bytes_uid_max", T_UINT), REQ("fds_max", T_UINT), REQ("fds_uid_max", T_UINT),
        REQ("fds_total_max", T_UINT), REQ("shm_bytes_max", T_UINT), REQ("shm_uid_max", T_UINT),
        REQ("shm_total_max", T_UINT), REQ("jobs_uid_max", T_UINT),
        REQ("hello_timeout_ms", T_UINT), REQ("idle_timeout_ms", T_UINT),
        REQ("frame_timeout_ms", T_UINT), OPT("work_uid_max", T_UINT),
        OPT("work_total_max", T_UINT), END,
};

/* ---- requests ---------------------------------------------------------- */

static const field no_fields[] = { END };
static const field handle_only[] = { REQ("handle", T_U32), END };

static const field hello_req[] = {
        REQ("min_version", T_U32), REQ("max_version", T_U32), OPT("features", T_STRS),
        OPT("client", T_STR), END,
};
static const field dataset_create_req[] = {
        REQ_SUB("schema", T_MAP, schema_fields), OPT("dict_bytes", T_UINT), END,
};
/* DATASET_OPEN, MSSET_OPEN: a store in object storage (feature "remote") */
static const field remote_fields[] = {
        REQ("url", T_STR), OPT("endpoint", T_STR), OPT("region", T_STR),
        OPT("addressing", T_STR), OPT("access_key", T_STR), OPT("secret_key", T_STR),
        OPT("session_token", T_STR), END,
};
static const field dataset_open_req[] = {
        OPT("writable", T_BOOL), OPT_SUB("remote", T_MAP, remote_fields), END,
};
static const field msset_open_req[] = {
        OPT("writable", T_BOOL), OPT("streams", T_STRS), OPT_SUB("remote", T_MAP, remote_fields),
        END,
};
static const field buffer_open_req[] = { REQ("bytes", T_UINT), END };
static const field read_req[] = {
        REQ("handle", T_U32), REQ("buffer", T_U32), OPT("offset", T_UINT),
        REQ("indices", T_U64S), END,
};
static const field append_req[] = {
        REQ("handle", T_U32), OPT("offset", T_UINT), OPT("count", T_UINT),
        OPT("record_bytes", T_UINT), OPT("sizes", T_U64S), OPT("dtype", T_STR),
        OPT("item_shape", T_UINTS), OPT("ndim", T_U32), OPT("lengths", T_U64S),
        OPT_SUB("streams", T_MAPS, append_stream_fields), OPT("level", T_U32), END,
};
static const field delete_req[] = { REQ("handle", T_U32), REQ("indices", T_U64S), END };
static const field train_dict_req[] = {
        REQ("tier", T_STR), OPT("handle", T_U32), OPT("offset", T_UINT), OPT("sizes", T_U64S),
        END,
};
static const field install_dict_req[] = {
        REQ("handle", T_U32), REQ("dict_bytes", T_UINT), END,
};
static const field convert_req[] = { REQ("to", T_STR), END };
static const field loader_open_req[] = {
        OPT_SUB("streams", T_MAPS, loader_stream_fields), REQ("sampler", T_STR),
        REQ("batch_size", T_UINT), REQ("seed", T_UINT), REQ("start_step", T_UINT),
        OPT("rank", T_UINT), OPT("world_size", T_UINT), OPT("prefetch", T_UINT),
        OPT("length", T_UINT), OPT("indices", T_BOOL),
        OPT_SUB("sources", T_MAPS, loader_source_fields), OPT("provenance", T_BOOL),
        OPT("fingerprint", T_UINT), OPT("step_stride", T_UINT), OPT("ctlring", T_BOOL),
        END,
};
static const field doorbell_req[] = { REQ("loader", T_U32), END };
static const field wake_event[] = { REQ("loader", T_U32), END };
static const field release_req[] = {
        REQ("loader", T_U32), REQ("ring", T_U32), REQ("slot", T_U32), OPT("wait_ns", T_UINT),
        OPT("taken_ns", T_UINT), END,
};
static const field status_req[] = { OPT("loader", T_U32), END };
static const field loader_only[] = { REQ("loader", T_U32), END };
static const field steps_of_req[] = {
        REQ("sampler", T_STR), OPT("n", T_UINT), OPT_SUB("sources", T_MAPS, steps_source_fields),
        OPT("source", T_U32), REQ("batch_size", T_UINT), REQ("seed", T_UINT),
        OPT("world_size", T_UINT), REQ("record", T_UINT), REQ("start", T_UINT),
        REQ("stop", T_UINT), OPT("max_hits", T_UINT), OPT("handle", T_U32),
        OPT_SUB("pack", T_MAP, loader_pack_fields), END,
};

/* ---- replies ----------------------------------------------------------- */

static const field hello_ok[] = {
        REQ("version", T_U32), REQ("features", T_STRS), REQ("daemon", T_STR),
        REQ_SUB("limits", T_MAP, limits_fields), END,
};
static const field dataset_ok[] = {
        REQ("handle", T_U32), REQ("length", T_UINT), REQ_SUB("schema", T_MAP, schema_fields),
        REQ("has_dict", T_BOOL), REQ("writable", T_BOOL), END,
};
static const field msset_open_ok[] = {
        REQ("set", T_U32), REQ("length", T_UINT), REQ("writable", T_BOOL),
        REQ_SUB("streams", T_MAPS, msset_stream_fields), END,
};
static const field info_ok[] = {
        REQ("length", T_UINT), OPT_SUB("schema", T_MAP, schema_fields),
        OPT("has_dict", T_BOOL), REQ("writable", T_BOOL), END,
};
static const field buffer_open_ok[] = { REQ("buffer", T_U32), REQ("bytes", T_UINT), END };
static const field read_ok[] = {
        REQ("count", T_UINT), REQ("offset", T_UINT), REQ("bytes", T_UINT),
        OPT("record_bytes", T_UINT), OPT("offsets", T_U64S), OPT("lengths", T_U64S),
        OPT("shapes", T_U64S), END,
};
static const field append_ok[] = {
        REQ("first", T_UINT), REQ("count", T_UINT), REQ("length", T_UINT), END,
};
static const field delete_ok[] = { REQ("length", T_UINT), END };
static const field stats_ok[] = {
        REQ("records", T_UINT), REQ("live_bytes", T_UINT), REQ("chunk_bytes", T_UINT),
        REQ("reclaimable", T_UINT), OPT("logic_bytes", T_UINT), END,
};
static const field verify_ok[] = {
        REQ("ok", T_BOOL), REQ("records", T_UINT), REQ("bad", T_UINT),
        REQ("bad_indices", T_U64S), END,
};
static const field train_dict_ok[] = { REQ("dict_bytes", T_UINT), END };
static const field convert_ok[] = {
        REQ("count", T_UINT), REQ_SUB("schema", T_MAP, schema_fields), END,
};
static const field status_ok[] = {
        REQ("daemon", T_STR), REQ("uptime_ms", T_UINT), REQ("clients", T_UINT),
        REQ("handles", T_UINT), REQ("shm_bytes", T_UINT), REQ("loaders", T_UINT),
        REQ("batches", T_UINT), REQ("gathers", T_UINT), REQ("hits", T_UINT),
        REQ("misses", T_UINT), REQ("bytes", T_UINT), REQ("evictions", T_UINT),
        REQ_SUB("cache", T_MAP, cache_fields),
        REQ_SUB("per_loader", T_MAPS, loader_stat_fields), OPT("shared", T_UINT),
        OPT("loop_fills", T_UINT), OPT("ctl_batches", T_UINT), OPT("ctl_wakes", T_UINT),
        OPT("ctl_faults", T_UINT), OPT("stores", T_UINT), OPT("requests", T_UINT), OPT("spare_budget", T_UINT),
        OPT("spare_bytes", T_UINT), OPT_SUB("prefetch", T_MAP, prefetch_fields),
        OPT_SUB("budgets", T_MAP, budgets_fields), OPT("uid", T_UINT),
        OPT_SUB("users", T_MAPS, user_stat_fields), OPT_SUB("limits", T_MAP, status_limits_fields),
        OPT_SUB("remote", T_MAP, remote_status_fields), END,
};
static const field metrics_ok[] = { REQ("text", T_STR), END };
static const field ctlring_ok_fields[] = { REQ("bytes", T_UINT), REQ("entries", T_UINT), END };
static const field loader_open_ok[] = {
        REQ("loader", T_U32), REQ("ring", T_U32), REQ("slots", T_UINT),
        REQ("slot_bytes", T_UINT), REQ("ring_bytes", T_UINT), REQ("length", T_UINT),
        REQ_SUB("streams", T_MAPS, ring_stream_fields),
        OPT_SUB("sources", T_MAPS, loader_source_ok_fields),
        OPT("fingerprint", T_UINT), OPT_SUB("ctlring", T_MAP, ctlring_ok_fields),
        END,
};
static const field steps_of_ok[] = { REQ("hits", T_U64S), REQ("next", T_UINT), END };

/* ---- error and events -------------------------------------------------- */

static const field error_msg[] = {
        REQ("code", T_UINT), OPT("name", T_STR), REQ("message", T_STR),
        OPT("needed", T_UINT), OPT("index", T_UINT), END,
};
static const field batch_event[] = {
        REQ("loader", T_U32), REQ("ring", T_U32), REQ("slot", T_U32), REQ("step", T_UINT),
        REQ_SUB("streams", T_MAPS, batch_stream_fields), OPT("indices", T_U64S),
        OPT("source", T_BIN), END,
};
static const field ring_event[] = {
        REQ("loader", T_U32), REQ("ring", T_U32), REQ("slots", T_UINT),
        REQ("slot_bytes", T_UINT), REQ("ring_bytes", T_UINT), END,
};
static const field ring_close_event[] = { REQ("loader", T_U32), REQ("ring", T_U32), END };
static const field loader_end_event[] = {
        REQ("loader", T_U32), REQ("step", T_UINT), REQ("code", T_UINT), OPT("name", T_STR),
        REQ("message", T_STR), END,
};

/* ---- the kinds --------------------------------------------------------- */

typedef struct kind_info {
        const char *name;
        const field *fields;   /* request or event fields */
        const field *ok;       /* fields of the "ok" reply (requests) */
        const char *feature;   /* HELLO feature the request needs, or NULL */
        unsigned reply_fds;    /* descriptors with the "ok" reply */
} kind_info;

static const kind_info kinds[_ZR_MSG_MAX] = {
        [ZR_MSG_HELLO] = { "hello", hello_req, hello_ok, NULL, 0 },
        [ZR_MSG_DATASET_CREATE] = { "dataset_create", dataset_create_req, dataset_ok, NULL, 0 },
        [ZR_MSG_DATASET_OPEN] = { "dataset_open", dataset_open_req, dataset_ok, NULL, 0 },
        [ZR_MSG_MSSET_OPEN] = { "msset_open", msset_open_req, msset_open_ok, ZR_FEATURE_MSSET, 0 },
        [ZR_MSG_INFO] = { "info", handle_only, info_ok, NULL, 0 },
        [ZR_MSG_BUFFER_OPEN] = { "buffer_open", buffer_open_req, buffer_open_ok, NULL, 1 },
        [ZR_MSG_READ] = { "read", read_req, read_ok, NULL, 0 },
        [ZR_MSG_APPEND] = { "append", append_req, append_ok, NULL, 0 },
        [ZR_MSG_DELETE] = { "delete", delete_req, delete_ok, NULL, 0 },
        [ZR_MSG_COMPACT] = { "compact", handle_only, stats_ok, NULL, 0 },
        [ZR_MSG_STATS] = { "stats", handle_only, stats_ok, NULL, 0 },
        [ZR_MSG_SYNC] = { "sync", handle_only, no_fields, NULL, 0 },
        [ZR_MSG_VERIFY] = { "verify", handle_only, verify_ok, ZR_FEATURE_VERIFY, 0 },
        [ZR_MSG_TRAIN_DICT] = { "train_dict", train_dict_req, train_dict_ok, ZR_FEATURE_DICT, 1 },
        [ZR_MSG_INSTALL_DICT] = { "install_dict", install_dict_req, no_fields, ZR_FEATURE_DICT, 0 },
        [ZR_MSG_CONVERT] = { "convert", convert_req, convert_ok, ZR_FEATURE_CONVERT, 0 },
        [ZR_MSG_STATUS] = { "status", status_req, status_ok, NULL, 0 },
        [ZR_MSG_CLOSE] = { "close", handle_only, no_fields, NULL, 0 },
        [ZR_MSG_LOADER_OPEN] = { "loader_open", loader_open_req, loader_open_ok, ZR_FEATURE_LOADER, 1 },
        [ZR_MSG_RELEASE] = { "release", release_req, NULL, ZR_FEATURE_LOADER, 0 },
        [ZR_MSG_LOADER_CLOSE] = { "loader_close", loader_only, no_fields, ZR_FEATURE_LOADER, 0 },
        [ZR_MSG_STEPS_OF] = { "steps_of", steps_of_req, steps_of_ok, ZR_FEATURE_STEPS_OF, 0 },
        [ZR_MSG_METRICS] = { "metrics", no_fields, metrics_ok, ZR_FEATURE_METRICS, 0 },
        [ZR_MSG_DOORBELL] = { "doorbell", doorbell_req, NULL, ZR_FEATURE_CTLRING, 0 },
        [ZR_MSG_OK] = { "ok", no_fields, NULL, NULL, 0 },
        [ZR_MSG_ERROR] = { "error", error_msg, NULL, NULL, 0 },
        [ZR_MSG_BATCH] = { "batch", batch_event, NULL, NULL, 0 },
        [ZR_MSG_LOADER_END] = { "loader_end", loader_end_event, NULL, NULL, 0 },
        [ZR_MSG_RING] = { "ring", ring_event, NULL, NULL, 0 },
        [ZR_MSG_RING_CLOSE] = { "ring_close", ring_close_event, NULL, NULL, 0 },
        [ZR_MSG_FAULT] = { "fault", error_msg, NULL, NULL, 0 },
        [ZR_MSG_WAKE] = { "wake", wake_event, NULL, NULL, 0 },
};

const char *zr_msg_kind_name(zr_msg_kind kind) {
        if (kind <= ZR_MSG_INVALID || kind >= _ZR_MSG_MAX)
                return NULL;
        return kinds[kind].name;
}

zr_msg_kind zr_msg_kind_from_name(const char *name, size_t len) {
        for (int k = ZR_MSG_INVALID + 1; k < _ZR_MSG_MAX; k++)
                if (strlen(kinds[k].name) == len && memcmp(kinds[k].name, name, len) == 0)
                        return (zr_msg_kind)k;
        return ZR_MSG_INVALID;
}

bool zr_msg_kind_is_request(zr_msg_kind kind) {
        return kind >= ZR_MSG_FIRST_REQUEST && kind <= ZR_MSG_LAST_REQUEST;
}

bool zr_msg_kind_feature(zr_msg_kind kind, const char **ret_feature) {
        if (!zr_msg_kind_is_request(kind) || !kinds[kind].feature)
                return false;
        if (ret_feature)
                *ret_feature = kinds[kind].feature;
        return true;
}

static bool kind_is_event(zr_msg_kind kind) {
        return kind == ZR_MSG_BATCH || kind == ZR_MSG_LOADER_END || kind == ZR_MSG_RING ||
               kind == ZR_MSG_RING_CLOSE || kind == ZR_MSG_FAULT || kind == ZR_MSG_WAKE;
}

int zr_msg_header_read(const msgpack_object *root, zr_msg_header *ret, zr_wire_error *err) {
        const msgpack_object *id;
        const char *name;
        size_t len;
        int r;

        *ret = (zr_msg_header){ .kind = ZR_MSG_INVALID };
        if (!root || root->type != MSGPACK_OBJECT_MAP)
                return zr_wire_error_set(err, ZR_E_PROTO, "message is not a map");

        /* the id first, so a refusal of the kind can still echo it */
        id = zr_wire_find(root, ZR_FIELD_ID);
        if (id) {
                r = zr_wire_get_u64(root, ZR_FIELD_ID, &ret->id, err);
                if (r < 0)
                        return r;
                ret->has_id = true;
        }
        r = zr_wire_get_str(root, ZR_FIELD_KIND, &name, &len, err);
        if (r < 0)
                return r;
        ret->kind = zr_msg_kind_from_name(name, len);
        if (ret->kind == ZR_MSG_INVALID)
                return zr_wire_error_set(err, ZR_E_UNKNOWN, "unknown message kind '%.*s'",
                                         (int)(len > 64 ? 64 : len), name);
        return 0;
}

/* Prefixes the message of an error already set with where it happened, so a
 * nested failure reads "loader_open: in 'streams'[1]: field 'handle': missing". */
__attribute__((format(printf, 3, 4)))
static int wrap(zr_wire_error *err, int r, const char *fmt, ...) {
        char prefix[96], msg[ZR_WIRE_ERROR_MESSAGE_MAX];
        va_list ap;

        if (!err || err->code == 0)
                return r;
        va_start(ap, fmt);
        vsnprintf(prefix, sizeof(prefix), fmt, ap);
        va_end(ap);
        /* both parts are bounded, the result is cut at the message size */
        size_t n = strlen(prefix);
        memcpy(msg, prefix, n);
        msg[n++] = ':';
        msg[n++] = ' ';
        size_t m = strnlen(err->message, sizeof(err->message));
        if (m > sizeof(msg) - n - 1)
                m = sizeof(msg) - n - 1;
        memcpy(msg + n, err->message, m);
        msg[n + m] = 0;
        memcpy(err->message, msg, sizeof(msg));
        return r;
}

/* Checks field f of map, and the fields of the maps it holds (f->sub). */
static int check_field(const msgpack_object *map, const field *f, zr_wire_error *err) {
        const msgpack_object *o = zr_wire_find(map, f->name), *items;
        const uint8_t *u8;
        const char *s;
        const void *p;
        uint32_t n;
        uint64_t u;
        size_t len;
        bool b;
        int r;

        if (!o) {
                if (f->required)
                        return zr_wire_error_set(err, ZR_E_PROTO, "field '%s': missing", f->name);
                return 0;
        }
        switch (f->type) {
        case T_UINT:
                return zr_wire_get_u64(map, f->name, &u, err);
        case T_U32:
                return zr_wire_get_uint(map, f->name, UINT32_MAX, &u, err);
        case T_BOOL:
                return zr_wire_get_bool(map, f->name, &b, err);
        case T_STR:
                return zr_wire_get_str(map, f->name, &s, &len, err);
        case T_BIN:
                return zr_wire_get_bin(map, f->name, &p, &len, err);
        case T_U64S:
                return zr_wire_get_u64s(map, f->name, &u8, &len, err);
        case T_MAP:
                if (o->type != MSGPACK_OBJECT_MAP)
                        return zr_wire_error_set(err, ZR_E_PROTO, "field '%s': expected map, got %s",
                                                 f->name, zr_wire_type_name(o));
                for (const field *g = f->sub; g->name; g++) {
                        r = check_field(o, g, err);
                        if (r < 0)
                                return wrap(err, r, "in '%s'", f->name);
                }
                return 0;
        case T_UINTS:
        case T_STRS:
        case T_MAPS:
                r = zr_wire_get_array(map, f->name, &items, &n, err);
                if (r < 0)
                        return r;
                for (uint32_t i = 0; i < n; i++) {
                        msgpack_object_type want = f->type == T_UINTS ? MSGPACK_OBJECT_POSITIVE_INTEGER
                                                   : f->type == T_STRS ? MSGPACK_OBJECT_STR
                                                                       : MSGPACK_OBJECT_MAP;
                        if (items[i].type != want)
                                return zr_wire_error_set(err, ZR_E_PROTO,
                                                         "field '%s': element %u is %s, expected %s",
                                                         f->name, i, zr_wire_type_name(&items[i]),
                                                         f->type == T_UINTS ? "unsigned integer"
                                                         : f->type == T_STRS ? "str" : "map");
                        for (const field *g = f->sub; f->type == T_MAPS && g->name; g++) {
                                r = check_field(&items[i], g, err);
                                if (r < 0)
                                        return wrap(err, r, "in '%s'[%u]", f->name, i);
                        }
                }
                return 0;
        }
        return zr_wire_error_set(err, EINVAL, "field '%s': bad table entry", f->name);
}

static int check_fields(const msgpack_object *map, const field *fields, zr_wire_error *err) {
        for (const field *f = fields; f->name; f++) {
                int r = check_field(map, f, err);
                if (r < 0)
                        return r;
        }
        return 0;
}

int zr_msg_check(const msgpack_object *root, zr_msg_kind reply_to, zr_msg_header *ret,
                 zr_wire_error *err) {
        zr_msg_header h;
        const char *name;
        int r;

        r = zr_msg_header_read(root, &h, err);
        if (ret)
                *ret = h;
        if (r < 0)
                return r;
        name = kinds[h.kind].name;

        if (zr_msg_kind_is_request(h.kind)) {
                if (!h.has_id && h.kind != ZR_MSG_RELEASE && h.kind != ZR_MSG_DOORBELL)
                        return zr_wire_error_set(err, ZR_E_PROTO, "%s: field 'id': missing", name);
        } else if (kind_is_event(h.kind)) {
                if (h.has_id)
                        return zr_wire_error_set(err, ZR_E_PROTO, "%s: an event carries no id",
                                                 name);
        } else if (!h.has_id) {
                return zr_wire_error_set(err, ZR_E_PROTO, "%s: field 'id': missing", name);
        }

        if (h.kind == ZR_MSG_OK) {
                if (reply_to == ZR_MSG_INVALID)
                        return 0;
                if (!zr_msg_kind_is_request(reply_to) || !kinds[reply_to].ok)
                        return zr_wire_error_set(err, EINVAL, "no reply is defined for %s",
                                                 zr_msg_kind_name(reply_to)
                                                         ? zr_msg_kind_name(reply_to) : "?");
                r = check_fields(root, kinds[reply_to].ok, err);
                if (r < 0)
                        return wrap(err, r, "ok to %s", kinds[reply_to].name);
                return 0;
        }
        r = check_fields(root, kinds[h.kind].fields, err);
        if (r < 0)
                return wrap(err, r, "%s", name);
        return 0;
}

int zr_msg_request_fds(zr_msg_kind kind, const msgpack_object *root, unsigned *ret,
                       zr_wire_error *err) {
        const msgpack_object *items;
        uint32_t n;
        int r;

        switch (kind) {
        case ZR_MSG_DATASET_CREATE:
                *ret = 1 + (zr_wire_find(root, "dict_bytes") ? 1 : 0);
                return 0;
        case ZR_MSG_DATASET_OPEN:
                /* the directory and its meta.zr, the proof of access; a remote
                 * store: none (its credentials are the proof) */
                *ret = zr_wire_find(root, "remote") ? 0 : 2;
                return 0;
        case ZR_MSG_MSSET_OPEN:
                /* the root, then each stream's directory and meta.zr, in "streams"
                 * order; a remote set: none */
                if (zr_wire_find(root, "remote")) {
                        *ret = 0;
                        return 0;
                }
                if (!zr_wire_find(root, "streams"))
                        return zr_wire_error_set(err, ZR_E_PROTO, "missing field 'streams'");
                r = zr_wire_get_array(root, "streams", &items, &n, err);
                if (r < 0)
                        return r;
                if (n > ZR_STREAMS_MAX)
                        return zr_wire_error_set(err, ZR_E_PROTO,
                                                 "field 'streams': %u streams (at most %d)", n,
                                                 ZR_STREAMS_MAX);
                *ret = 1 + 2 * n;
                return 0;
        case ZR_MSG_CONVERT:
                /* the source's directory and meta.zr (read access), the new directory */
                *ret = 3;
                return 0;
        case ZR_MSG_APPEND:
        case ZR_MSG_INSTALL_DICT:
                *ret = 1;
                return 0;
        case ZR_MSG_TRAIN_DICT:
                *ret = zr_wire_find(root, "handle") ? 0 : 1;
                return 0;
        default:
                if (!zr_msg_kind_is_request(kind))
                        return zr_wire_error_set(err, ZR_E_PROTO, "not a request");
                *ret = 0;
                return 0;
        }
}

unsigned zr_msg_reply_fds(zr_msg_kind request) {
        if (!zr_msg_kind_is_request(request))
                return 0;
        return kinds[request].reply_fds;
}

void zr_msg_write_error(zr_wire_writer *w, bool fault, uint64_t id, int code,
                        const char *message) {
        const char *name;

        if (code < 0)
                code = -code;
        name = zr_error_name(code);
        zr_wire_writer_begin_message(w, fault ? "fault" : "error", !fault, id);
        zr_wire_put_u64(w, ZR_FIELD_CODE, (uint64_t)code);
        if (name)
                zr_wire_put_str(w, ZR_FIELD_NAME, name);
        zr_wire_put_str(w, ZR_FIELD_MESSAGE, message ? message : name ? name : "error");
}

bool zr_msg_field_at(zr_msg_kind kind, bool reply, size_t i, const char **ret_name,
                     const char **ret_type, bool *ret_required) {
        static const char *const type_names[] = {
                [T_UINT] = "uint", [T_U32] = "u32", [T_BOOL] = "bool", [T_STR] = "str",
                [T_BIN] = "bin", [T_U64S] = "u64s", [T_UINTS] = "[uint]", [T_STRS] = "[str]",
                [T_MAP] = "map", [T_MAPS] = "[map]",
        };
        const field *table;

        if (kind <= ZR_MSG_INVALID || kind >= _ZR_MSG_MAX)
                return false;
        table = reply ? kinds[kind].ok : kinds[kind].fields;
        if (!table)
                return false;
        for (size_t j = 0; j < i; j++)
                if (!table[j].name)
                        return false;
        if (!table[i].name)
                return false;
        if (ret_name)
                *ret_name = table[i].name;
        if (ret_type)
                *ret_type = type_names[table[i].type];
        if (ret_required)
                *ret_required = table[i].required;
        return true;
}
