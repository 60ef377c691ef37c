/* dispatch.c: which handler serves each request, and what it must have been
 * given before it runs (request.h, zr_request_dispatch()).
 *
 * A row of the table names a request kind, its handler and the handle the
 * request acts on: the field that names it, the types it may be and whether
 * it must allow writes. The feature a kind needs is proto's table's
 * (zr_msg_kind_feature()), so the daemon and PROTOCOL.md cannot disagree. A
 * handler then finds its handle in rq->handle, checked, and only reads the
 * fields that are its own.
 *
 * It assumes the session has checked what belongs to the connection (HELLO
 * first, a draining daemon, descriptor counts) before it dispatches.
 */
#include "server/request.h"

#define DATASET ZR_HANDLE_BIT(ZR_HANDLE_DATASET)
#define SET ZR_HANDLE_BIT(ZR_HANDLE_SET)
#define BUFFER ZR_HANDLE_BIT(ZR_HANDLE_BUFFER)
#define LOADER ZR_HANDLE_BIT(ZR_HANDLE_LOADER)

typedef struct handler {
        zr_msg_kind kind;
        int (*fn)(zr_request *rq);
        const char *field;   /* the field naming the handle it acts on, or NULL */
        unsigned types;      /* the types that handle may be (ZR_HANDLE_BIT()s) */
        bool writable;       /* and it must have been opened for writing */
} handler;

static const handler handlers[] = {
        { ZR_MSG_HELLO, zr_handle_hello, NULL, 0, false },
        { ZR_MSG_DATASET_CREATE, zr_handle_dataset_create, NULL, 0, false },
        { ZR_MSG_DATASET_OPEN, zr_handle_dataset_open, NULL, 0, false },
        { ZR_MSG_MSSET_OPEN, zr_handle_msset_open, NULL, 0, false },
        { ZR_MSG_INFO, zr_handle_info, "handle", DATASET | SET, false },
        { ZR_MSG_BUFFER_OPEN, zr_handle_buffer_open, NULL, 0, false },
        { ZR_MSG_READ, zr_handle_read, "handle", DATASET, false },
        { ZR_MSG_APPEND, zr_handle_append, "handle", DATASET | SET, true },
        { ZR_MSG_DELETE, zr_handle_delete, "handle", DATASET | SET, true },
        { ZR_MSG_COMPACT, zr_handle_compact, "handle", DATASET, true },
        { ZR_MSG_STATS, zr_handle_stats, "handle", DATASET, false },
        { ZR_MSG_SYNC, zr_handle_sync, "handle", DATASET, false },
        { ZR_MSG_VERIFY, zr_handle_verify, "handle", DATASET, false },
        { ZR_MSG_TRAIN_DICT, zr_handle_train_dict, NULL, 0, false }, /* its handle is optional */
        { ZR_MSG_INSTALL_DICT, zr_handle_install_dict, "handle", DATASET, true },
        { ZR_MSG_CONVERT, zr_handle_convert, NULL, 0, false },
        { ZR_MSG_STATUS, zr_handle_status, NULL, 0, false },
        { ZR_MSG_CLOSE, zr_handle_close, "handle", DATASET | SET | BUFFER, false },
        { ZR_MSG_LOADER_OPEN, zr_handle_loader_open, NULL, 0, false },
        { ZR_MSG_LOADER_CLOSE, zr_handle_loader_close, "loader", LOADER, false },
        { ZR_MSG_STEPS_OF, zr_handle_steps_of, NULL, 0, false },
        { ZR_MSG_METRICS, zr_handle_metrics, NULL, 0, false },
};

/* Finds the handle of row h in rq->handle. */
static int take_handle(zr_request *rq, const handler *h) {
        zr_wire_error werr = {0};
        uint32_t id;

        if (zr_wire_get_u32(rq->root, h->field, &id, &werr) < 0)
                return zr_request_fail(rq, ZR_E_PROTO, "%s", werr.message);
        rq->handle = zr_request_handle(rq, h->field, id, h->types);
        if (!rq->handle)
                return -ZR_E_NO_HANDLE;
        if (h->writable && !rq->handle->writable)
                return zr_request_fail(rq, ZR_E_READONLY, "handle %u was opened read-only", id);
        return 0;
}

int zr_request_dispatch(zr_request *rq) {
        const char *feature;

        for (size_t i = 0; i < sizeof(handlers) / sizeof(handlers[0]); i++) {
                const handler *h = &handlers[i];
                int r;
                if (h->kind != rq->kind)
                        continue;
                if (zr_msg_kind_feature(rq->kind, &feature) &&
                    !zr_request_has_feature(rq, feature))
                        return zr_request_fail(rq, ZR_E_UNKNOWN, "%s needs a feature not in "
                                               "force on this connection",
                                               zr_msg_kind_name(rq->kind));
                if (h->field && (r = take_handle(rq, h)) < 0)
                        return r;
                return h->fn(rq);
        }
        return zr_request_fail(rq, ZR_E_UNKNOWN, "%s is not served by this daemon",
                               zr_msg_kind_name(rq->kind));
}
