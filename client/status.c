/* status.c: the daemon's counters (STATUS), for `zrecord status` and monitors.
 *
 * One request, one reply; the reply's per-loader list is copied into memory the
 * caller owns, so nothing points into a frame.
 */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "zrc-private.h"

/* A uint field of a reply map and where it goes in a struct. */
typedef struct u64_field {
        const char *key;
        size_t offset;
} u64_field;

#define FIELD(type, name) { #name, offsetof(type, name) }

static const u64_field status_fields[] = {
        FIELD(zrc_status, uptime_ms), FIELD(zrc_status, clients), FIELD(zrc_status, handles),
        FIELD(zrc_status, shm_bytes), FIELD(zrc_status, loaders), FIELD(zrc_status, batches),
        FIELD(zrc_status, gathers), FIELD(zrc_status, hits), FIELD(zrc_status, misses),
        FIELD(zrc_status, bytes), FIELD(zrc_status, evictions), FIELD(zrc_status, shared),
        FIELD(zrc_status, loop_fills),
        { "budget", offsetof(zrc_status, cache_budget) },
        { "bytes", offsetof(zrc_status, cache_bytes) },
        { "entries", offsetof(zrc_status, cache_entries) },
        { "bypassed", offsetof(zrc_status, cache_bypassed) },
        { "planned", offsetof(zrc_status, cache_planned) },
};
/* the last five are the "cache" map's */
#define STATUS_CACHE_FIELDS 5

static const u64_field prefetch_fields[] = {
        FIELD(zrc_prefetch_status, budget), FIELD(zrc_prefetch_status, bytes),
        FIELD(zrc_prefetch_status, peak), FIELD(zrc_prefetch_status, steps),
        FIELD(zrc_prefetch_status, warm), FIELD(zrc_prefetch_status, busy),
        FIELD(zrc_prefetch_status, records), FIELD(zrc_prefetch_status, resident),
        FIELD(zrc_prefetch_status, cached), FIELD(zrc_prefetch_status, read_bytes),
        FIELD(zrc_prefetch_status, reads), FIELD(zrc_prefetch_status, merged),
        FIELD(zrc_prefetch_status, in_flight), FIELD(zrc_prefetch_status, queue_depth),
        FIELD(zrc_prefetch_status, depth), FIELD(zrc_prefetch_status, waits),
        FIELD(zrc_prefetch_status, errors), FIELD(zrc_prefetch_status, cancelled),
        FIELD(zrc_prefetch_status, planned_steps), FIELD(zrc_prefetch_status, latency_p50_ns),
        FIELD(zrc_prefetch_status, latency_p99_ns), FIELD(zrc_prefetch_status, cold),
        FIELD(zrc_prefetch_status, direct_min), FIELD(zrc_prefetch_status, direct),
        FIELD(zrc_prefetch_status, fits), FIELD(zrc_prefetch_status, direct_steps),
        FIELD(zrc_prefetch_status, direct_bytes), FIELD(zrc_prefetch_status, direct_copied),
        FIELD(zrc_prefetch_status, direct_fallbacks), FIELD(zrc_prefetch_status, direct_errors),
};

static const u64_field loader_fields[] = {
        FIELD(zrc_loader_status, pid), FIELD(zrc_loader_status, batch_size),
        FIELD(zrc_loader_status, streams), FIELD(zrc_loader_status, step),
        FIELD(zrc_loader_status, batches), FIELD(zrc_loader_status, gathers),
        FIELD(zrc_loader_status, hits), FIELD(zrc_loader_status, misses),
        FIELD(zrc_loader_status, bytes), FIELD(zrc_loader_status, evictions),
        FIELD(zrc_loader_status, shared), FIELD(zrc_loader_status, io_waits),
};

static const u64_field span_fields[] = {
        FIELD(zrc_tel_span, span_ns), FIELD(zrc_tel_span, batches), FIELD(zrc_tel_span, bytes),
        FIELD(zrc_tel_span, waits), FIELD(zrc_tel_span, wait_ns), FIELD(zrc_tel_span, readies),
        FIELD(zrc_tel_span, ready_ns), FIELD(zrc_tel_span, fills), FIELD(zrc_tel_span, fill_ns),
        FIELD(zrc_tel_span, lookup_ns), FIELD(zrc_tel_span, read_ns),
        FIELD(zrc_tel_span, decode_ns), FIELD(zrc_tel_span, copy_ns),
        FIELD(zrc_tel_span, io_wait_ns), FIELD(zrc_tel_span, queue_ns),
        FIELD(zrc_tel_span, device_bytes), FIELD(zrc_tel_span, hits), FIELD(zrc_tel_span, misses),
};

static const u64_field telemetry_fields[] = {
        FIELD(zrc_loader_telemetry, age_ms), FIELD(zrc_loader_telemetry, prefetch_depth),
        FIELD(zrc_loader_telemetry, wait_p50_ns), FIELD(zrc_loader_telemetry, wait_p99_ns),
        FIELD(zrc_loader_telemetry, ready_p50_ns), FIELD(zrc_loader_telemetry, ready_p99_ns),
        FIELD(zrc_loader_telemetry, fill_p50_ns), FIELD(zrc_loader_telemetry, fill_p99_ns),
};

/* Optional counters that come together: an older daemon sends none of them
 * (get_optional() says whether it sent any). */
static const u64_field ctl_fields[] = {
        FIELD(zrc_status, ctl_batches), FIELD(zrc_status, ctl_wakes),
        FIELD(zrc_status, ctl_faults),
};

static const u64_field depth_fields[] = {
        FIELD(zrc_loader_status, depth), FIELD(zrc_loader_status, depth_raises),
};

/* Reads fields[0..n) of `map` into the struct at `dst` (a missing one is 0). */
static void get_fields(const msgpack_object *map, const u64_field *fields, size_t n, void *dst) {
        for (size_t i = 0; i < n; i++)
                *(uint64_t *)((char *)dst + fields[i].offset) = conn_get_u64(map, fields[i].key);
}

#define NFIELDS(a) (sizeof(a) / sizeof((a)[0]))

/* As get_fields(); returns whether the map holds any of them. */
static bool get_optional(const msgpack_object *map, const u64_field *fields, size_t n, void *dst) {
        bool any = false;
        uint64_t v;

        for (size_t i = 0; i < n; i++)
                any |= zr_wire_get_u64(map, fields[i].key, &v, NULL) == 0;
        get_fields(map, fields, n, dst);
        return any;
}

/* A str field into a buffer (cut to fit; "" if missing). */
static void get_str(const msgpack_object *map, const char *key, char *dst, size_t size) {
        const char *s = NULL;
        size_t len = 0;
        dst[0] = 0;
        if (zr_wire_get_str(map, key, &s, &len, NULL) == 0)
                snprintf(dst, size, "%.*s", (int)(len < size ? len : size - 1), s);
}

/* A loader's telemetry map (absent from an older daemon). */
static void get_telemetry(const msgpack_object *l, zrc_loader_telemetry *t) {
        const struct { const char *key; zrc_tel_span *to; } spans[] = {
                { "total", &t->total }, { "w1", &t->w1 }, { "w10", &t->w10 },
                { "w60", &t->w60 }, { "group", &t->group },
        };
        const msgpack_object *m, *sp;
        bool b = false;

        if (zr_wire_get_map(l, "telemetry", &m, NULL) < 0)
                return;
        t->present = true;
        get_fields(m, telemetry_fields, NFIELDS(telemetry_fields), t);
        get_str(m, "verdict", t->verdict, sizeof(t->verdict));
        get_str(m, "stage", t->stage, sizeof(t->stage));
        if (zr_wire_get_bool(m, "reports", &b, NULL) == 0)
                t->reports = b;
        for (size_t i = 0; i < NFIELDS(spans); i++)
                if (zr_wire_get_map(m, spans[i].key, &sp, NULL) == 0)
                        get_fields(sp, span_fields, NFIELDS(span_fields), spans[i].to);
}

/* The budgets map: what the daemon may use and each budget with its source. */
static void get_budgets(const msgpack_object *root, zrc_status *st) {
        const msgpack_object *b, *one;
        const struct { const char *key; zrc_budget *to; } all[] = {
                { "cache", &st->budget_cache }, { "ring_spare", &st->budget_ring_spare },
                { "prefetch", &st->budget_prefetch }, { "shm_total", &st->budget_shm_total },
                { "shm_uid", &st->budget_shm_uid }, { "read_pool", &st->budget_read_pool },
        };
        if (zr_wire_get_map(root, "budgets", &b, NULL) < 0)
                return;
        st->memory = conn_get_u64(b, "memory");
        (void)zr_wire_get_str_copy(b, "memory_source", st->memory_source,
                                   sizeof(st->memory_source), NULL);
        for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++) {
                if (zr_wire_get_map(b, all[i].key, &one, NULL) < 0)
                        continue;
                all[i].to->bytes = conn_get_u64(one, "bytes");
                (void)zr_wire_get_str_copy(one, "source", all[i].to->source,
                                           sizeof(all[i].to->source), NULL);
        }
}

int zrc_status_query(zrc_conn *c, zrc_status **ret) {
        conn_reply reply = CONN_REPLY_NULL;
        const msgpack_object *cache, *loaders;
        uint32_t n = 0;
        zrc_status *st;
        int r;

        r = conn_check(c, 0, NULL);
        if (r < 0)
                return r;
        if (!ret)
                return conn_fail(c, EINVAL, "no result pointer");
        conn_begin(c, ZR_MSG_STATUS);
        r = conn_call(c, ZR_MSG_STATUS, NULL, 0, &reply);
        if (r < 0)
                return r;
        st = calloc(1, sizeof(*st));
        if (!st) {
                conn_reply_done(&reply);
                return conn_fail(c, ENOMEM, "out of memory");
        }
        (void)zr_wire_get_str_copy(reply.root, "daemon", st->daemon, sizeof(st->daemon), NULL);
        get_fields(reply.root, status_fields, NFIELDS(status_fields) - STATUS_CACHE_FIELDS, st);
        (void)zr_wire_get_map(reply.root, "cache", &cache, NULL);
        get_fields(cache, status_fields + NFIELDS(status_fields) - STATUS_CACHE_FIELDS,
                   STATUS_CACHE_FIELDS, st);
        if (zr_wire_get_map(reply.root, "prefetch", &cache, NULL) == 0) {
                get_fields(cache, prefetch_fields, NFIELDS(prefetch_fields), &st->prefetch);
                (void)zr_wire_get_str_copy(cache, "backend", st->prefetch.backend,
                                           sizeof(st->prefetch.backend), NULL);
                get_str(cache, "direct_mode", st->prefetch.direct_mode,
                        sizeof(st->prefetch.direct_mode));
        }
        get_budgets(reply.root, st);
        st->ctl_present = get_optional(reply.root, ctl_fields, NFIELDS(ctl_fields), st);
        (void)zr_wire_get_array(reply.root, "per_loader", &loaders, &n, NULL);
        if (n > 0) {
                st->per_loader = calloc(n, sizeof(*st->per_loader));
                if (!st->per_loader) {
                        free(st);
                        conn_reply_done(&reply);
                        return conn_fail(c, ENOMEM, "out of memory");
                }
        }
        st->n_loaders = n;
        for (uint32_t i = 0; i < n; i++) {
                const msgpack_object *l = &loaders[i];
                zrc_loader_status *o = &st->per_loader[i];

                get_fields(l, loader_fields, NFIELDS(loader_fields), o);
                o->depth_present = get_optional(l, depth_fields, NFIELDS(depth_fields), o);
                o->loader = (uint32_t)conn_get_u64(l, "loader");
                o->uid = conn_get_u64(l, "uid");
                get_str(l, "sampler", o->sampler, sizeof(o->sampler));
                get_str(l, "command", o->command, sizeof(o->command));
                get_str(l, "dataset", o->dataset, sizeof(o->dataset));
                get_telemetry(l, &o->telemetry);
        }
        conn_reply_done(&reply);
        *ret = st;
        return 0;
}

zrc_status *zrc_status_free(zrc_status *st) {
        if (st) {
                free(st->per_loader);
                free(st);
        }
        return NULL;
}

int zrc_metrics_text(zrc_conn *c, char **ret, size_t *len) {
        conn_reply reply = CONN_REPLY_NULL;
        const char *text = NULL;
        size_t n = 0;
        char *copy;
        int r;

        if (!ret)
                return conn_fail(c, EINVAL, "no result pointer");
        r = conn_check(c, CONN_FEATURE_METRICS, ZR_FEATURE_METRICS);
        if (r < 0)
                return r;
        conn_begin(c, ZR_MSG_METRICS);
        r = conn_call(c, ZR_MSG_METRICS, NULL, 0, &reply);
        if (r < 0)
                return r;
        if (zr_wire_get_str(reply.root, "text", &text, &n, NULL) < 0) {
                conn_reply_done(&reply);
                return conn_fail(c, ZR_E_PROTO, "a METRICS reply without text");
        }
        copy = malloc(n + 1);
        if (!copy) {
                conn_reply_done(&reply);
                return conn_fail(c, ENOMEM, "out of memory");
        }
        memcpy(copy, text, n);
        copy[n] = 0;
        conn_reply_done(&reply);
        *ret = copy;
        if (len)
                *len = n;
        return 0;
}
