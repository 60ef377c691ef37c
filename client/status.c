/* status.c: the daemon's counters (STATUS), for `zrecord status` and monitors.
 *
 * One request, one reply; the reply's per-loader list is copied into memory the
 * caller owns, so nothing points into a frame.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "zrc-private.h"

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
        st->uptime_ms = conn_get_u64(reply.root, "uptime_ms");
        st->clients = conn_get_u64(reply.root, "clients");
        st->handles = conn_get_u64(reply.root, "handles");
        st->shm_bytes = conn_get_u64(reply.root, "shm_bytes");
        st->loaders = conn_get_u64(reply.root, "loaders");
        st->batches = conn_get_u64(reply.root, "batches");
        st->gathers = conn_get_u64(reply.root, "gathers");
        st->hits = conn_get_u64(reply.root, "hits");
        st->misses = conn_get_u64(reply.root, "misses");
        st->bytes = conn_get_u64(reply.root, "bytes");
        st->evictions = conn_get_u64(reply.root, "evictions");
        st->shared = conn_get_u64(reply.root, "shared");
        (void)zr_wire_get_map(reply.root, "cache", &cache, NULL);
        st->cache_budget = conn_get_u64(cache, "budget");
        st->cache_bytes = conn_get_u64(cache, "bytes");
        st->cache_entries = conn_get_u64(cache, "entries");
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

                o->pid = conn_get_u64(l, "pid");
                o->loader = (uint32_t)conn_get_u64(l, "loader");
                if (zr_wire_get_str(l, "sampler", &s, &len, NULL) == 0)
                        snprintf(o->sampler, sizeof(o->sampler), "%.*s",
                                 (int)(len < sizeof(o->sampler) ? len : sizeof(o->sampler) - 1), s);
                o->batch_size = conn_get_u64(l, "batch_size");
                o->streams = conn_get_u64(l, "streams");
                o->step = conn_get_u64(l, "step");
                o->batches = conn_get_u64(l, "batches");
                o->gathers = conn_get_u64(l, "gathers");
                o->hits = conn_get_u64(l, "hits");
                o->misses = conn_get_u64(l, "misses");
                o->bytes = conn_get_u64(l, "bytes");
                o->evictions = conn_get_u64(l, "evictions");
                o->shared = conn_get_u64(l, "shared");
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
