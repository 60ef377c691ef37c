/* loader.c: loaders, batches streamed by sampler step into a shared ring.
 *
 * LOADER_OPEN returns the ring's memfd, mapped here read-only once. The daemon
 * then announces each filled slot with a BATCH event and the caller hands it
 * back with RELEASE (a notification: nothing waits for an answer). Events
 * arrive between any two frames, so the connection keeps them in its queue
 * (conn.c) while requests are answered; zrc_loader_next() takes this loader's
 * oldest event from the queue, or reads frames until one comes.
 *
 * Every BATCH is checked before a pointer is made from it: the step is the one
 * expected (steps come in order, each once), the slot is in range and not held,
 * each stream's bytes lie inside its region of that slot, and every ragged
 * record lies inside the stream's bytes with a length that matches its shape.
 * A batch's arrays (ragged pointers, lengths, shapes, indices) are copied out of
 * the event into one allocation per slot, freed at release, so a batch stays
 * valid while later ones arrive. A caller that holds every slot and asks for
 * another batch gets -EDEADLK at once instead of waiting forever
 * (PROTOCOL.md, section 10, "Full and empty").
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "zrc-private.h"

typedef struct loader_stream {
        zrc_kind kind;
        uint32_t ndim;
        uint32_t itemsize;
        uint64_t record_bytes;   /* dense */
        uint64_t offset;         /* region offset inside a slot */
        uint64_t capacity;
} loader_stream;

typedef struct loader_slot {
        bool held;
        zrc_loader_batch batch;
        zrc_stream_batch *streams;
        void *arrays;            /* payloads, lengths, shapes, indices of this batch */
} loader_slot;

struct zrc_loader {
        zrc_loader *next, *prev;     /* in conn->loaders */
        zrc_conn *conn;
        uint32_t handle;
        uint32_t slots;
        uint64_t slot_bytes, ring_bytes, length, batch_size;
        const uint8_t *ring;
        size_t n_streams;
        loader_stream *streams;
        loader_slot *slot;           /* slots entries */
        uint32_t n_held;
        bool want_indices;
        uint64_t next_step;
        bool ended;
        zrc_error end;               /* why it ended */
};

uint32_t zrc_loader_slots(const zrc_loader *l) {
        return l->slots;
}

uint64_t zrc_loader_length(const zrc_loader *l) {
        return l->length;
}

uint64_t zrc_loader_step(const zrc_loader *l) {
        return l->next_step;
}

static void slot_clear(loader_slot *s) {
        free(s->streams);
        free(s->arrays);
        *s = (loader_slot){ 0 };
}

void loader_free(zrc_loader *l, bool tell) {
        zrc_conn *c = l->conn;

        if (tell && l->handle) {
                zr_wire_writer *w = conn_begin(c, ZR_MSG_LOADER_CLOSE);

                zr_wire_put_u64(w, "loader", l->handle);
                (void)conn_call(c, ZR_MSG_LOADER_CLOSE, NULL, 0, NULL);
        }
        /* after the reply no event of this loader can follow */
        conn_events_drop(c, l->handle);
        if (l->ring)
                munmap((void *)l->ring, l->ring_bytes);
        for (uint32_t i = 0; l->slot && i < l->slots; i++)
                slot_clear(&l->slot[i]);
        if (l->prev)
                l->prev->next = l->next;
        else if (c->loaders == l)
                c->loaders = l->next;
        if (l->next)
                l->next->prev = l->prev;
        free(l->slot);
        free(l->streams);
        free(l);
}

zrc_loader *zrc_loader_close(zrc_loader *l) {
        if (l)
                loader_free(l, !l->conn->broken);
        return NULL;
}

/* Checks the LOADER_OPEN reply against what was asked and fills l. */
static int open_take(zrc_loader *l, const conn_reply *reply, zrc_dataset *const *streams) {
        zrc_conn *c = l->conn;
        const msgpack_object *rs;
        uint32_t n = 0;
        uint64_t slots;

        (void)zr_wire_get_u32(reply->root, "loader", &l->handle, NULL);
        slots = conn_get_u64(reply->root, "slots");
        l->slot_bytes = conn_get_u64(reply->root, "slot_bytes");
        l->ring_bytes = conn_get_u64(reply->root, "ring_bytes");
        l->length = conn_get_u64(reply->root, "length");
        (void)zr_wire_get_array(reply->root, "streams", &rs, &n, NULL);
        if (slots == 0 || slots > UINT32_MAX || l->slot_bytes == 0 ||
            l->ring_bytes / slots != l->slot_bytes || l->ring_bytes % slots != 0 ||
            l->ring_bytes > SIZE_MAX || n != l->n_streams)
                return conn_fail(c, ZR_E_PROTO,
                                 "LOADER_OPEN reply: %" PRIu64 " slots of %" PRIu64
                                 " bytes in a ring of %" PRIu64 ", %u streams",
                                 slots, l->slot_bytes, l->ring_bytes, n);
        l->slots = (uint32_t)slots;
        for (size_t i = 0; i < l->n_streams; i++) {
                loader_stream *s = &l->streams[i];
                const zrc_schema *sc = &streams[i]->schema;
                int itemsize = zrc_dtype_itemsize(sc->dtype);

                s->kind = sc->kind;
                s->ndim = sc->ndim;
                s->itemsize = itemsize > 0 ? (uint32_t)itemsize : 0;
                s->record_bytes = zrc_schema_record_bytes(sc);
                s->offset = conn_get_u64(&rs[i], "offset");
                s->capacity = conn_get_u64(&rs[i], "capacity");
                if (s->itemsize == 0 || s->offset > l->slot_bytes ||
                    s->capacity > l->slot_bytes - s->offset ||
                    (s->kind == ZRC_DENSE && s->record_bytes &&
                     s->capacity / s->record_bytes < l->batch_size))
                        return conn_fail(c, ZR_E_PROTO,
                                         "LOADER_OPEN reply: stream %zu's region [%" PRIu64
                                         ", +%" PRIu64 ") does not fit its slot or batch",
                                         i, s->offset, s->capacity);
        }
        return 0;
}

int zrc_loader_open(zrc_conn *c, zrc_dataset *const *streams, size_t n_streams,
                    const zrc_loader_options *opts, zrc_loader **ret) {
        conn_reply reply = CONN_REPLY_NULL;
        zrc_loader *l;
        zr_wire_writer *w;
        void *ring;
        int r;

        r = conn_check(c, CONN_FEATURE_LOADER, ZR_FEATURE_LOADER);
        if (r < 0)
                return r;
        if (!opts || !ret || !streams || n_streams == 0 || n_streams > ZR_STREAMS_MAX)
                return conn_fail(c, EINVAL, "a loader needs options and 1..%d streams",
                                 ZR_STREAMS_MAX);
        for (size_t i = 0; i < n_streams; i++)
                if (!streams[i] || streams[i]->conn != c)
                        return conn_fail(c, EINVAL, "stream %zu is not a dataset of this connection",
                                         i);

        l = calloc(1, sizeof(*l));
        if (!l)
                return conn_fail(c, ENOMEM, "out of memory for a loader");
        l->conn = c;
        l->n_streams = n_streams;
        l->batch_size = opts->batch_size;
        l->next_step = opts->start_step;
        l->want_indices = opts->indices;
        l->streams = calloc(n_streams, sizeof(*l->streams));
        if (!l->streams) {
                free(l);
                return conn_fail(c, ENOMEM, "out of memory for a loader");
        }

        w = conn_begin(c, ZR_MSG_LOADER_OPEN);
        zr_wire_begin_array(w, "streams");
        for (size_t i = 0; i < n_streams; i++) {
                zr_wire_begin_map(w, NULL);
                zr_wire_put_u64(w, "handle", streams[i]->handle);
                if (opts->capacities && opts->capacities[i])
                        zr_wire_put_u64(w, "capacity", opts->capacities[i]);
                zr_wire_end(w);
        }
        zr_wire_end(w);
        zr_wire_put_str(w, "sampler", opts->sampler ? opts->sampler : "sequential");
        zr_wire_put_u64(w, "batch_size", opts->batch_size);
        zr_wire_put_u64(w, "seed", opts->seed);
        zr_wire_put_u64(w, "start_step", opts->start_step);
        if (opts->rank)
                zr_wire_put_u64(w, "rank", opts->rank);
        if (opts->world_size)
                zr_wire_put_u64(w, "world_size", opts->world_size);
        if (opts->prefetch)
                zr_wire_put_u64(w, "prefetch", opts->prefetch);
        if (opts->check_length)
                zr_wire_put_u64(w, "length", opts->length);
        if (opts->indices)
                zr_wire_put_bool(w, "indices", true);
        r = conn_call(c, ZR_MSG_LOADER_OPEN, NULL, 0, &reply);
        if (r < 0) {
                free(l->streams);
                free(l);
                return r;
        }
        /* linked now, so that a failure below closes the daemon's loader */
        l->next = c->loaders;
        if (c->loaders)
                c->loaders->prev = l;
        c->loaders = l;

        r = open_take(l, &reply, streams);
        if (r < 0)
                goto fail;
        l->slot = calloc(l->slots, sizeof(*l->slot));
        if (!l->slot) {
                r = conn_fail(c, ENOMEM, "out of memory for a loader");
                goto fail;
        }
        ring = mmap(NULL, l->ring_bytes, PROT_READ, MAP_SHARED, reply.fd, 0);
        if (ring == MAP_FAILED) {
                r = conn_fail(c, errno, "mapping a ring of %" PRIu64 " bytes: %s", l->ring_bytes,
                              strerror(errno));
                goto fail;
        }
        l->ring = ring;
        conn_reply_done(&reply); /* the mapping keeps the memfd */
        *ret = l;
        return 0;

fail:
        conn_reply_done(&reply);
        {
                zrc_error e = c->error;

                loader_free(l, !c->broken);
                c->error = e;
        }
        return r;
}

/* Builds slot state from a BATCH event body; *ret_slot names the slot. */
static int batch_take(zrc_loader *l, const msgpack_object *root, uint32_t *ret_slot) {
        zrc_conn *c = l->conn;
        const msgpack_object *ms;
        const uint8_t *idx = NULL;
        size_t n_idx = 0, ragged_records = 0, ragged_dims = 0, bytes;
        uint32_t slot = 0, n = 0;
        uint64_t step = 0, slot_start, b = l->batch_size;
        loader_slot *s;
        uint8_t *arrays;
        const void **payloads;
        uint64_t *lengths, *shapes, *indices;

        (void)zr_wire_get_u32(root, "slot", &slot, NULL);
        (void)zr_wire_get_u64(root, "step", &step, NULL);
        (void)zr_wire_get_array(root, "streams", &ms, &n, NULL);
        if (step != l->next_step)
                return conn_fail(c, ZR_E_PROTO, "loader %u: batch of step %" PRIu64 ", expected %" PRIu64,
                                 l->handle, step, l->next_step);
        if (slot >= l->slots || l->slot[slot].held)
                return conn_fail(c, ZR_E_PROTO, "loader %u: batch in slot %u, %s", l->handle, slot,
                                 slot >= l->slots ? "out of range" : "which the client holds");
        if (n != l->n_streams)
                return conn_fail(c, ZR_E_PROTO, "loader %u: batch of %u streams, not %zu", l->handle,
                                 n, l->n_streams);
        if (zr_wire_find(root, "indices") &&
            zr_wire_get_u64s(root, "indices", &idx, &n_idx, NULL) < 0)
                return conn_fail(c, ZR_E_PROTO, "loader %u: indices are not u64s", l->handle);
        if (l->want_indices && n_idx != b)
                return conn_fail(c, ZR_E_PROTO, "loader %u: %zu indices for a batch of %" PRIu64,
                                 l->handle, n_idx, b);
        for (size_t i = 0; i < l->n_streams; i++)
                if (l->streams[i].kind == ZRC_RAGGED) {
                        ragged_records += b;
                        ragged_dims += b * l->streams[i].ndim;
                }

        s = &l->slot[slot];
        s->streams = calloc(l->n_streams, sizeof(*s->streams));
        bytes = ragged_records * (sizeof(void *) + 8) + ragged_dims * 8 + (l->want_indices ? b * 8 : 0);
        s->arrays = malloc(bytes ? bytes : 1);
        if (!s->streams || !s->arrays) {
                slot_clear(s);
                return conn_fail(c, ENOMEM, "out of memory for a batch");
        }
        arrays = s->arrays;
        payloads = (const void **)(void *)arrays;
        lengths = (uint64_t *)(void *)(arrays + ragged_records * sizeof(void *));
        shapes = lengths + ragged_records;
        indices = shapes + ragged_dims;

        slot_start = (uint64_t)slot * l->slot_bytes;
        for (size_t i = 0; i < l->n_streams; i++) {
                const loader_stream *ls = &l->streams[i];
                zrc_stream_batch *sb = &s->streams[i];
                uint64_t off = conn_get_u64(&ms[i], "offset"), used = conn_get_u64(&ms[i], "bytes");
                uint64_t lo = slot_start + ls->offset, hi = lo + ls->capacity;

                if (off < lo || off > hi || used > hi - off) {
                        slot_clear(s);
                        return conn_fail(c, ZR_E_PROTO,
                                         "loader %u: stream %zu's bytes [%" PRIu64 ", +%" PRIu64
                                         ") lie outside its region of slot %u",
                                         l->handle, i, off, used, slot);
                }
                sb->data = l->ring + off;
                sb->bytes = used;
                sb->ndim = ls->ndim;
                if (ls->kind == ZRC_DENSE) {
                        if (used != b * ls->record_bytes) {
                                slot_clear(s);
                                return conn_fail(c, ZR_E_PROTO,
                                                 "loader %u: dense stream %zu has %" PRIu64
                                                 " bytes, not %" PRIu64,
                                                 l->handle, i, used, b * ls->record_bytes);
                        }
                        continue;
                }
                {
                        const uint8_t *po, *pl, *ps;
                        size_t no = 0, nl = 0, nsh = 0;

                        if (zr_wire_get_u64s(&ms[i], "offsets", &po, &no, NULL) < 0 ||
                            zr_wire_get_u64s(&ms[i], "lengths", &pl, &nl, NULL) < 0 ||
                            zr_wire_get_u64s(&ms[i], "shapes", &ps, &nsh, NULL) < 0 || no != b ||
                            nl != b || nsh != b * ls->ndim) {
                                slot_clear(s);
                                return conn_fail(c, ZR_E_PROTO,
                                                 "loader %u: ragged stream %zu lacks its records",
                                                 l->handle, i);
                        }
                        for (uint64_t j = 0; j < b; j++) {
                                uint64_t o = zr_wire_u64_at(po, j), len = zr_wire_u64_at(pl, j);
                                uint64_t e = ls->itemsize;

                                for (uint32_t k = 0; k < ls->ndim; k++) {
                                        uint64_t dim = zr_wire_u64_at(ps, j * ls->ndim + k);

                                        shapes[j * ls->ndim + k] = dim;
                                        e = dim && e > UINT64_MAX / dim ? UINT64_MAX : e * dim;
                                }
                                if (o < off || o > off + used || len > off + used - o || e != len) {
                                        slot_clear(s);
                                        return conn_fail(c, ZR_E_PROTO,
                                                         "loader %u: ragged record %" PRIu64
                                                         " of stream %zu lies outside its bytes "
                                                         "or does not match its shape",
                                                         l->handle, j, i);
                                }
                                payloads[j] = l->ring + o;
                                lengths[j] = len;
                        }
                        sb->payloads = payloads;
                        sb->lengths = lengths;
                        sb->shapes = shapes;
                        payloads += b;
                        lengths += b;
                        shapes += b * ls->ndim;
                }
        }
        if (l->want_indices)
                for (uint64_t j = 0; j < b; j++)
                        indices[j] = zr_wire_u64_at(idx, j);

        s->held = true;
        s->batch = (zrc_loader_batch){
                .step = step,
                .slot = slot,
                .count = b,
                .n_streams = l->n_streams,
                .streams = s->streams,
                .indices = l->want_indices ? indices : NULL,
        };
        l->n_held++;
        l->next_step++;
        *ret_slot = slot;
        return 0;
}

/* Applies one kept event: a BATCH fills *ret and returns 0; a LOADER_END ends
 * the loader and returns its code. */
static int event_apply(zrc_loader *l, conn_event *e, zrc_loader_batch *ret) {
        zrc_conn *c = l->conn;
        zr_wire_body *body = NULL;
        const msgpack_object *root;
        uint32_t slot = 0;
        int r;

        r = zr_wire_body_decode(e->body, e->size, NULL, &body, NULL);
        if (r < 0)
                return conn_fail(c, ZR_E_PROTO, "a kept event does not decode");
        root = zr_wire_body_root(body);
        if (e->kind == ZR_MSG_BATCH) {
                r = batch_take(l, root, &slot);
                if (r == 0)
                        *ret = l->slot[slot].batch;
        } else {
                uint64_t code = 0, step = 0;
                const char *msg = NULL;
                size_t len = 0;

                (void)zr_wire_get_u64(root, "code", &code, NULL);
                (void)zr_wire_get_u64(root, "step", &step, NULL);
                (void)zr_wire_get_str(root, "message", &msg, &len, NULL);
                if (code == 0 || code > 0x7fffffff)
                        code = ZR_E_PROTO;
                if (len >= ZRC_ERROR_MESSAGE_MAX)
                        len = ZRC_ERROR_MESSAGE_MAX - 1;
                l->ended = true;
                l->next_step = step;
                conn_fail(c, (int)code, "loader ended at step %" PRIu64 ": %.*s", step, (int)len,
                          msg ? msg : "");
                l->end = c->error;
                r = -(int)code;
        }
        zr_wire_body_free(body);
        return r;
}

int zrc_loader_next(zrc_loader *l, zrc_loader_batch *ret) {
        zrc_conn *c = l->conn;
        int r;

        r = conn_check(c, 0, NULL);
        if (r < 0)
                return r;
        if (!ret)
                return conn_fail(c, EINVAL, "no batch to fill");
        for (;;) {
                conn_event *e;

                if (l->ended) {
                        c->error = l->end;
                        return -l->end.code;
                }
                e = conn_event_take(c, l->handle);
                if (e) {
                        r = event_apply(l, e, ret);
                        conn_event_free(e);
                        return r;
                }
                if (l->n_held >= l->slots)
                        return conn_fail(c, EDEADLK,
                                         "loader %u: all %u slots are held; release one before "
                                         "asking for the next batch",
                                         l->handle, l->slots);
                r = conn_wait_event(c);
                if (r < 0)
                        return r;
        }
}

int zrc_loader_release(zrc_loader *l, uint32_t slot) {
        zrc_conn *c = l->conn;
        zr_wire_writer *w;
        int r;

        if (slot >= l->slots || !l->slot[slot].held)
                return conn_fail(c, EINVAL, "loader %u: slot %u is not held", l->handle, slot);
        slot_clear(&l->slot[slot]);
        l->n_held--;
        r = conn_check(c, 0, NULL);
        if (r < 0)
                return r;
        w = conn_begin_notification(c, ZR_MSG_RELEASE);
        zr_wire_put_u64(w, "loader", l->handle);
        zr_wire_put_u64(w, "slot", slot);
        return conn_notify(c, ZR_MSG_RELEASE);
}
