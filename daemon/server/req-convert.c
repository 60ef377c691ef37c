/* req-convert.c: CONVERT, a ragged dataset into a new one of the other layout
 * (zrecord's, with the shape in each record, or loaderx 1.5.7's, with every shape
 * in schema.msgpack: dataset/convert.h).
 *
 * On the loop thread it checks the descriptors (the source's directory and its
 * meta.zr as a proof of read access, an empty directory the peer owns for the
 * new store). A source the daemon has open is converted from that instance,
 * under its lock taken shared: reads of it go on beside the conversion, its
 * mutations wait. Any other source is opened by the job itself, on the pool (its
 * shape list may be large), for the conversion alone.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "dataset/convert.h"
#include "server/access.h"
#include "server/request.h"

typedef struct convert_state {
        zr_entry *entry;              /* the source, if open already; else NULL */
        zr_pool *pool;
        enum zr_layout to;
        uint64_t count;
        zr_schema schema;
} convert_state;

static void convert_state_free(void *p) {
        convert_state *st = p;
        zr_entry_unref(st->entry);
        free(st);
}

static void convert_run(zr_job *job) {
        zr_request *rq = (zr_request *)job;
        convert_state *st = rq->state;
        zr_store_options opts = {.pool = st->pool};
        zr_dataset *src = NULL;

        if (!st->entry) {
                rq->result = zr_registry_open_dataset(st->pool, rq->fds[0], &src, &rq->err);
                if (rq->result < 0)
                        return;
                rq->result = zr_convert(src, rq->fds[2], st->to, &opts, &st->count,
                                        &st->schema, &rq->err);
                zr_dataset_close(src, NULL);
                return;
        }
        zr_dataset_lock(st->entry->ds, false);
        rq->result = zr_convert(st->entry->ds, rq->fds[2], st->to, &opts, &st->count,
                                &st->schema, &rq->err);
        zr_dataset_unlock(st->entry->ds);
}

static void convert_reply(zr_request *rq, zr_wire_writer *w) {
        convert_state *st = rq->state;
        zr_wire_put_u64(w, "count", st->count);
        zr_put_schema(w, "schema", &st->schema);
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
        st->entry = zr_registry_lookup(srv->registry, rq->fds[0], NULL, &rq->err);
        if (!st->entry && rq->err.code)
                return -rq->err.code;
        st->pool = zr_registry_pool(srv->registry);
        return zr_request_submit_reply(rq, convert_run, convert_reply);
}
