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
};
/* the last three are the "cache" map's */
#define STATUS_CACHE_FIELDS 3

static const u64_field loader_fields[] = {
        FIELD(zrc_loader_status, pid), FIELD(zrc_loader_status, batch_size),
        FIELD(zrc_loader_status, streams), FIELD(zrc_loader_status, step),
        FIELD(zrc_loader_status, batches), FIELD(zrc_loader_status, gathers),
        FIELD(zrc_loader_status, hits), FIELD(zrc_loader_status, misses),
        FIELD(zrc_loader_status, bytes), FIELD(zrc_loader_status, evictions),
        FIELD(zrc_loader_status, shared),
};

/* Reads fields[0..n) of `map` into the struct at `dst` (a missing one is 0). */
static void get_fields(const msgpack_object *map, const u64_field *fields, size_t n, void *dst) {
        for (size_t i = 0; i < n; i++)
                *(uint64_t *)((char *)dst + fields[i].offset) = conn_get_u64(map, fields[i].key);
}

#define NFIELDS(a) (sizeof(a) / sizeof((a)[0]))

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
