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
        FIELD(zrc_prefetch_status, latency_p99_ns),
};

static const u64_field loader_fields[] = {
        FIELD(zrc_loader_status, pid), FIELD(zrc_loader_status, batch_size),
        FIELD(zrc_loader_status, streams), FIELD(zrc_loader_status, step),
        FIELD(zrc_loader_status, batches), FIELD(zrc_loader_status, gathers),
        FIELD(zrc_loader_status, hits), FIELD(zrc_loader_status, misses),
        FIELD(zrc_loader_status, bytes), FIELD(zrc_loader_status, evictions),
        FIELD(zrc_loader_status, shared), FIELD(zrc_loader_status, io_waits),
};

/* Reads fields[0..n) of `map` into the struct at `dst` (a missing one is 0). */
static void get_fields(const msgpack_object *map, const u64_field *fields, size_t n, void *dst) {
        for (size_t i = 0; i < n; i++)
                *(uint64_t *)((char *)dst + fields[i].offset) = conn_get_u64(map, fields[i].key);
}

#define NFIELDS(a) (sizeof(a) / sizeof((a)[0]))

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
        }
        get_budgets(reply.root, st);
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
                const char *s = NULL;
                size_t len = 0;

                get_fields(l, loader_fields, NFIELDS(loader_fields), o);
                o->loader = (uint32_t)conn_get_u64(l, "loader");
                if (zr_wire_get_str(l, "sampler", &s, &len, NULL) == 0)
                        snprintf(o->sampler, sizeof(o->sampler), "%.*s",
                                 (int)(len < sizeof(o->sampler) ? len : sizeof(o->sampler) - 1), s);
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
