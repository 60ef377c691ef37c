/* req-convert.c: CONVERT, a ragged dataset into a new one of the other layout
 * (zrecord's, with the shape in each record, or loaderx 1.5.7's, with every shape
 * in schema.msgpack: dataset/convert.h).
 *
 * On the loop thread it checks the descriptors (the source's directory and its
 * meta.zr as a proof of read access, an empty directory the peer owns for the
 * new store). The conversion reads the daemon's one instance of the source,
 * under its lock taken shared: reads of it go on beside the conversion, its
 * mutations wait. A source no client has open is first opened on the pool (its
 * shape list may be large) and shared like any, as DATASET_OPEN does.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "dataset/convert.h"
#include "server/access.h"
#include "server/request.h"

typedef struct convert_state {
        zr_registry *reg;
        zr_entry *entry;              /* the source */
        struct stat src;              /* its identity */
        zr_dataset *opened;           /* a source opened by this request, to adopt */
        zr_pool *pool;
        enum zr_layout to;
        uint64_t count;
        zr_schema schema;
} convert_state;

static void convert_state_free(void *p) {
        convert_state *st = p;
        if (st->opened)
                zr_registry_abandon(st->reg, st->opened, &st->src);
        zr_entry_unref(st->entry);
        free(st);
}

static void convert_run(zr_job *job) {
        zr_request *rq = (zr_request *)job;
        convert_state *st = rq->state;
        zr_store_options opts = {.pool = st->pool};

        zr_dataset_lock(st->entry->ds, false);
        rq->result = zr_convert(st->entry->ds, rq->fds[2], st->to, &opts, &rq->cancelled,
                                &st->count, &st->schema, &rq->err);
        zr_dataset_unlock(st->entry->ds);
}

static void convert_reply(zr_request *rq, zr_wire_writer *w) {
        convert_state *st = rq->state;
        zr_wire_put_u64(w, "count", st->count);
        zr_put_schema(w, "schema", &st->schema);
}

/* A source no client had open: opened on a worker (registry.h), then shared. */
static void open_src_run(zr_job *job) {
        zr_request *rq = (zr_request *)job;
        convert_state *st = rq->state;
        rq->result = zr_registry_open_job(st->reg, rq->fds[0], &st->src, &st->opened, &rq->err);
}

static void open_src_done(zr_job *job) {
        zr_request *rq = (zr_request *)job;
        convert_state *st = rq->state;
        int r = rq->result;

        if (r == -ZR_E_LOCKED) { /* an entry holds it: use that */
                st->entry = zr_registry_lookup(st->reg, rq->fds[0], NULL, NULL);
                if (st->entry)
                        r = 0;
        }
        if (r == 0 && !st->entry && !zr_request_orphaned(rq)) {
                zr_dataset *ds = st->opened;
                st->opened = NULL;
                r = zr_registry_adopt(st->reg, ds, &st->src, &st->entry, &rq->err);
        }
        if (r == 0 && st->entry && !zr_request_orphaned(rq)) {
                rq->result = 0;
                zr_request_chain_reply(rq, convert_run, convert_reply);
                return;
        }
        zr_request_complete(rq, r);
}

int zr_handle_convert(zr_request *rq) {
        zr_server *srv = zr_request_server(rq);
        zr_wire_error werr = {0};
        const char *to;
        size_t to_len;
        int r;

        convert_state *st = zr_request_state(rq, sizeof(*st), convert_state_free);
        if (!st)
                return -ENOMEM;
        if (zr_wire_get_str(rq->root, "to", &to, &to_len, &werr) < 0)
                return zr_request_fail(rq, ZR_E_PROTO, "%s", werr.message);
        if (to_len == 7 && memcmp(to, "zrecord", 7) == 0)
                st->to = ZR_LAYOUT_ZRECORD;
        else if (to_len == 13 && memcmp(to, "loaderx-1.5.7", 13) == 0)
                st->to = ZR_LAYOUT_LX157;
        else
                return zr_request_fail(rq, ZR_E_SCHEMA, "field 'to': '%.*s' is neither "
                                       "\"zrecord\" nor \"loaderx-1.5.7\"",
                                       (int)(to_len > 16 ? 16 : to_len), to);
        if ((r = zr_access_dir(rq, rq->fds[0], "the source directory")) < 0 ||
            (r = zr_access_proof(rq, rq->fds[0], rq->fds[1], false, "the source")) < 0 ||
            (r = zr_access_dir(rq, rq->fds[2], "the new store directory")) < 0 ||
            (r = zr_access_new_dir(rq, rq->fds[2])) < 0)
                return r;
        if ((r = zr_request_work_charge(rq, ZR_CONVERT_WORK_BYTES, "CONVERT")) < 0)
                return r;
        st->reg = srv->registry;
        st->pool = zr_registry_pool(srv->registry);
        st->entry = zr_registry_lookup(srv->registry, rq->fds[0], &st->src, &rq->err);
        if (st->entry)
                return zr_request_submit_reply(rq, convert_run, convert_reply);
        if (rq->err.code)
                return -rq->err.code;
        return zr_request_submit(rq, open_src_run, open_src_done);
}
