/* loader.c: loaders, batches streamed by sampler step into shared rings.
 *
 * LOADER_OPEN returns the loader's own ring's memfd (and its id, `ring`),
 * mapped here read-only once. The daemon then announces each filled slot with a
 * BATCH event naming (ring, slot) and the caller hands it back with RELEASE of
 * that (ring, slot) (a notification: nothing waits for an answer). Events
 * arrive between any two frames, so the connection keeps them in its queue
 * (conn.c) while requests are answered; zrc_loader_next() takes this loader's
 * oldest event from the queue, or reads frames until one comes.
 *
 * Loaders with the same streams, sampler, seed, batch size, rank, world size
 * and slot layout, on any connection of any client, form a group whose rings
 * are one pool of slots (PROTOCOL.md, section 10, "Rings shared by a group"):
 * the batch of a step is gathered once, into any member's ring, and announced
 * to every member from there. So a loader reads from several rings: its own
 * (rings[0]) and each that a RING event passes (its memfd kept with the queued
 * event by conn.c). A RING is checked before it is mapped, read-only, once:
 * its slots are the loader's own size, ring_bytes is slots × slot_bytes and
 * the memfd holds at least that many bytes (so no read of a batch can fault
 * past its end); the descriptor is closed once mapped. A RING_CLOSE unmaps
 * that ring; one that names the loader's own ring, a ring it does not know, or
 * a ring it holds a batch in is a protocol error and unmaps nothing, so no
 * pointer the caller holds ever dangles. RING and RING_CLOSE are applied in
 * queue order as zrc_loader_next() meets them; the caller never sees them.
 *
 * Every BATCH is checked before a pointer is made from it: the step is the one
 * expected (steps come in order, each once), the ring is one the loader knows,
 * the slot is in that ring's range and not held, each stream's bytes lie
 * inside its region of that slot, and every ragged record lies inside the
 * stream's bytes with a length that matches its shape. The batches the caller
 * holds live in a table of `slots` entries, wherever their slots lie: the
 * index of the entry is the handle the caller gets as zrc_loader_batch.slot
 * and gives back to zrc_loader_release(), which sends that entry's (ring,
 * slot). A batch's arrays (ragged pointers, lengths, shapes, indices) are
 * copied out of the event into one allocation per entry, freed at release, so
 * a batch stays valid while later ones arrive. A caller that holds `slots`
 * batches and asks for another gets -EDEADLK at once instead of waiting
 * forever (PROTOCOL.md, section 10, "Full and empty"). A protocol error in an
 * event ends the loader for good: every later zrc_loader_next() returns it.
 * zrc_loader_close() unmaps every ring.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>

#include "zrc-private.h"

typedef struct loader_stream {
        zrc_kind kind;
        uint32_t ndim;
        uint32_t itemsize;
        uint64_t record_bytes;   /* dense */
        uint64_t offset;         /* region offset inside a slot */
        uint64_t capacity;
} loader_stream;

/* A ring mapped for the loader: its own, or one a RING event passed. */
typedef struct loader_ring {
        uint32_t id;             /* the daemon's ring id */
        uint32_t slots;
        uint64_t bytes;          /* slots × slot_bytes, mapped */
        const uint8_t *map;
        uint32_t n_held;         /* batches the caller holds in it */
} loader_ring;

/* A batch the caller holds: entry i of l->held is handle i. */
typedef struct loader_held {
        bool held;
        uint32_t ring;           /* the ring's id */
        uint32_t slot;           /* the slot in that ring */
        uint64_t wait_ns;        /* zrc_loader_next() waited this long for it */
        uint64_t taken_ns;       /* and returned it then (CLOCK_MONOTONIC) */
        zrc_loader_batch batch;
        zrc_stream_batch *streams;
        void *arrays;            /* payloads, lengths, shapes, indices of this batch */
} loader_held;

struct zrc_loader {
        zrc_loader *next, *prev;     /* in conn->loaders */
        zrc_conn *conn;
        uint32_t handle;
        uint32_t slots;
        uint64_t slot_bytes, ring_bytes, length, batch_size;
        uint64_t fingerprint;
        size_t n_streams;
        loader_stream *streams;
        loader_ring *rings;          /* n_rings: [0] its own, then those of RING events */
        size_t n_rings, cap_rings;
        loader_held *held;           /* slots entries */
        uint32_t n_held;
        bool want_indices;
        bool want_sources;           /* a mixture's, with provenance */
        size_t n_sources;            /* a mixture's, else 0 */
        uint64_t *source_length;     /* n_sources */
        uint64_t next_step;
        bool ended;                  /* by LOADER_END or a bad event */
        zrc_error end;               /* why it ended */
};

uint32_t zrc_loader_slots(const zrc_loader *l) {
        return l->slots;
}

uint64_t zrc_loader_length(const zrc_loader *l) {
        return l->length;
}

uint64_t zrc_loader_fingerprint(const zrc_loader *l) {
        return l->fingerprint;
}

uint64_t zrc_loader_step(const zrc_loader *l) {
        return l->next_step;
}

size_t zrc_loader_sources(const zrc_loader *l) {
        return l->n_sources;
}

uint64_t zrc_loader_source_length(const zrc_loader *l, size_t k) {
        return k < l->n_sources ? l->source_length[k] : 0;
}

static void held_clear(loader_held *h) {
        free(h->streams);
        free(h->arrays);
        *h = (loader_held){ 0 };
}

static loader_ring *ring_find(zrc_loader *l, uint32_t id) {
        for (size_t i = 0; i < l->n_rings; i++)
                if (l->rings[i].id == id)
                        return &l->rings[i];
        return NULL;
}

/* Checks a ring the daemon passed (LOADER_OPEN's or a RING event's) and maps
 * it read-only; the caller closes fd. */
static int ring_map(zrc_loader *l, uint32_t id, uint64_t slots, uint64_t slot_bytes,
                    uint64_t ring_bytes, int fd) {
        zrc_conn *c = l->conn;
        struct stat st;
        void *map;

        if (fd < 0)
                return conn_fail(c, ZR_E_BAD_FD, "loader %u: ring %u came without its memfd",
                                 l->handle, id);
        if (ring_find(l, id))
                return conn_fail(c, ZR_E_PROTO, "loader %u: ring %u announced twice", l->handle,
                                 id);
        if (slots == 0 || slots > UINT32_MAX || slot_bytes != l->slot_bytes ||
            ring_bytes / slots != slot_bytes || ring_bytes % slots != 0 || ring_bytes > SIZE_MAX)
                return conn_fail(c, ZR_E_PROTO,
                                 "loader %u: ring %u of %" PRIu64 " slots of %" PRIu64
                                 " bytes in %" PRIu64 " (the loader's slots have %" PRIu64 ")",
                                 l->handle, id, slots, slot_bytes, ring_bytes, l->slot_bytes);
        if (fstat(fd, &st) < 0)
                return conn_fail(c, errno, "loader %u: ring %u: fstat: %s", l->handle, id,
                                 strerror(errno));
        if (st.st_size < 0 || (uint64_t)st.st_size < ring_bytes)
                return conn_fail(c, ZR_E_PROTO,
                                 "loader %u: ring %u's memfd holds %jd bytes, not %" PRIu64,
                                 l->handle, id, (intmax_t)st.st_size, ring_bytes);
        if (l->n_rings == l->cap_rings) {
                size_t cap = l->cap_rings ? 2 * l->cap_rings : 4;
                loader_ring *p = realloc(l->rings, cap * sizeof(*p));

                if (!p)
                        return conn_fail(c, ENOMEM, "out of memory for a ring");
                l->rings = p;
                l->cap_rings = cap;
        }
        map = mmap(NULL, ring_bytes, PROT_READ, MAP_SHARED, fd, 0);
        if (map == MAP_FAILED)
                return conn_fail(c, errno, "loader %u: mapping ring %u of %" PRIu64 " bytes: %s",
                                 l->handle, id, ring_bytes, strerror(errno));
        l->rings[l->n_rings++] = (loader_ring){
                .id = id,
                .slots = (uint32_t)slots,
                .bytes = ring_bytes,
                .map = map,
        };
        return 0;
}

void loader_free(zrc_loader *l, bool tell) {
        zrc_conn *c = l->conn;

        if (tell && l->handle) {
                zr_wire_writer *w = conn_begin(c, ZR_MSG_LOADER_CLOSE);

                zr_wire_put_u64(w, "loader", l->handle);
                (void)conn_call(c, ZR_MSG_LOADER_CLOSE, NULL, 0, NULL);
        }
        /* after the reply no event of this loader can follow; the RINGs still
         * queued have their descriptors closed */
        conn_events_drop(c, l->handle);
        for (size_t i = 0; i < l->n_rings; i++)
                munmap((void *)l->rings[i].map, l->rings[i].bytes);
        for (uint32_t i = 0; l->held && i < l->slots; i++)
                held_clear(&l->held[i]);
        if (l->prev)
                l->prev->next = l->next;
        else if (c->loaders == l)
                c->loaders = l->next;
        if (l->next)
                l->next->prev = l->prev;
        free(l->held);
        free(l->rings);
        free(l->streams);
        free(l->source_length);
        free(l);
}

zrc_loader *zrc_loader_close(zrc_loader *l) {
        if (l)
                loader_free(l, !l->conn->broken);
        return NULL;
}

/* Checks the LOADER_OPEN reply against what was asked and fills l. */
static int open_take(zrc_loader *l, const conn_reply *reply, zrc_dataset *const *streams,
                     uint32_t *ret_ring) {
        zrc_conn *c = l->conn;
        const msgpack_object *rs;
        uint32_t n = 0;
        uint64_t slots;

        (void)zr_wire_get_u32(reply->root, "loader", &l->handle, NULL);
        (void)zr_wire_get_u32(reply->root, "ring", ret_ring, NULL);
        slots = conn_get_u64(reply->root, "slots");
        l->slot_bytes = conn_get_u64(reply->root, "slot_bytes");
        l->ring_bytes = conn_get_u64(reply->root, "ring_bytes");
        l->length = conn_get_u64(reply->root, "length");
        if (zr_wire_find(reply->root, "fingerprint"))
                l->fingerprint = conn_get_u64(reply->root, "fingerprint");
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
        if (l->n_sources) {
                const msgpack_object *src;

                n = 0;
                (void)zr_wire_get_array(reply->root, "sources", &src, &n, NULL);
                if (n != l->n_sources)
                        return conn_fail(c, ZR_E_PROTO, "LOADER_OPEN reply: %u sources, not %zu", n,
                                         l->n_sources);
                for (size_t k = 0; k < l->n_sources; k++)
                        l->source_length[k] = conn_get_u64(&src[k], "length");
        }
        return 0;
}

/* The streams of one source (or of a plain loader) into the request. */
static void put_streams(zr_wire_writer *w, zrc_dataset *const *streams, size_t n,
                        const uint64_t *capacities) {
        zr_wire_begin_array(w, "streams");
        for (size_t i = 0; i < n; i++) {
                zr_wire_begin_map(w, NULL);
                zr_wire_put_u64(w, "handle", streams[i]->handle);
                if (capacities && capacities[i])
                        zr_wire_put_u64(w, "capacity", capacities[i]);
                zr_wire_end(w);
        }
        zr_wire_end(w);
}

/* Checks that streams[0..n) are datasets of c (`what` names them). */
static int check_streams(zrc_conn *c, zrc_dataset *const *streams, size_t n, const char *what,
                         size_t k) {
        if (!streams || n == 0 || n > ZR_STREAMS_MAX)
                return conn_fail(c, EINVAL, "%s%zu needs 1..%d streams", what, k, ZR_STREAMS_MAX);
        for (size_t i = 0; i < n; i++)
                if (!streams[i] || streams[i]->conn != c)
                        return conn_fail(c, EINVAL, "%s%zu: stream %zu is not a dataset of this "
                                         "connection", what, k, i);
        return 0;
}

/* LOADER_OPEN of one set of streams (sources NULL) or of a mixture, then the
 * ring. streams are the batch's (source 0's for a mixture: they say what its
 * records are). */
static int loader_open(zrc_conn *c, zrc_dataset *const *streams, size_t n_streams,
                       const zrc_mixture_source *sources, size_t n_sources,
                       const zrc_loader_options *opts, zrc_loader **ret) {
        conn_reply reply = CONN_REPLY_NULL;
        zrc_loader *l;
        zr_wire_writer *w;
        uint32_t ring = 0;
        int r;

        l = calloc(1, sizeof(*l));
        if (!l)
                return conn_fail(c, ENOMEM, "out of memory for a loader");
        l->conn = c;
        l->n_streams = n_streams;
        l->batch_size = opts->batch_size;
        l->next_step = opts->start_step;
        l->want_indices = opts->indices;
        l->n_sources = sources ? n_sources : 0;
        l->want_sources = sources && opts->provenance;
        l->streams = calloc(n_streams, sizeof(*l->streams));
        l->source_length = calloc(n_sources ? n_sources : 1, sizeof(*l->source_length));
        if (!l->streams || !l->source_length) {
                free(l->streams);
                free(l->source_length);
                free(l);
                return conn_fail(c, ENOMEM, "out of memory for a loader");
        }

        w = conn_begin(c, ZR_MSG_LOADER_OPEN);
        if (!sources) {
                put_streams(w, streams, n_streams, opts->capacities);
        } else {
                zr_wire_begin_array(w, "sources");
                for (size_t k = 0; k < n_sources; k++) {
                        zr_wire_begin_map(w, NULL);
                        put_streams(w, sources[k].streams, n_streams, opts->capacities);
                        zr_wire_put_u64(w, "weight", sources[k].weight);
                        if (sources[k].sampler)
                                zr_wire_put_str(w, "sampler", sources[k].sampler);
                        if (sources[k].check_length)
                                zr_wire_put_u64(w, "length", sources[k].length);
                        zr_wire_end(w);
                }
                zr_wire_end(w);
                if (opts->provenance)
                        zr_wire_put_bool(w, "provenance", true);
        }
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
        if (opts->check_fingerprint)
                zr_wire_put_u64(w, "fingerprint", opts->fingerprint);
        r = conn_call(c, ZR_MSG_LOADER_OPEN, NULL, 0, &reply);
        if (r < 0) {
                free(l->streams);
                free(l->source_length);
                free(l);
                return r;
        }
        /* linked now, so that a failure below closes the daemon's loader */
        l->next = c->loaders;
        if (c->loaders)
                c->loaders->prev = l;
        c->loaders = l;

        r = open_take(l, &reply, streams, &ring);
        if (r < 0)
                goto fail;
        l->held = calloc(l->slots, sizeof(*l->held));
        if (!l->held) {
                r = conn_fail(c, ENOMEM, "out of memory for a loader");
                goto fail;
        }
        r = ring_map(l, ring, l->slots, l->slot_bytes, l->ring_bytes, reply.fd);
        if (r < 0)
                goto fail;
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

int zrc_loader_open(zrc_conn *c, zrc_dataset *const *streams, size_t n_streams,
                    const zrc_loader_options *opts, zrc_loader **ret) {
        int r = conn_check(c, CONN_FEATURE_LOADER, ZR_FEATURE_LOADER);

        if (r < 0)
                return r;
        if (!opts || !ret || !streams || n_streams == 0 || n_streams > ZR_STREAMS_MAX)
                return conn_fail(c, EINVAL, "a loader needs options and 1..%d streams",
                                 ZR_STREAMS_MAX);
        for (size_t i = 0; i < n_streams; i++)
                if (!streams[i] || streams[i]->conn != c)
                        return conn_fail(c, EINVAL, "stream %zu is not a dataset of this connection",
                                         i);
        return loader_open(c, streams, n_streams, NULL, 0, opts, ret);
}

int zrc_loader_open_mixture(zrc_conn *c, const zrc_mixture_source *sources, size_t n_sources,
                            size_t n_streams, const zrc_loader_options *opts, zrc_loader **ret) {
        int r = conn_check(c, CONN_FEATURE_LOADER, ZR_FEATURE_LOADER);

        if (r < 0)
                return r;
        r = conn_check(c, CONN_FEATURE_MIXTURE, ZR_FEATURE_MIXTURE);
        if (r < 0)
                return r;
        if (!opts || !ret || !sources || n_sources == 0 || n_sources > ZR_SOURCES_MAX)
                return conn_fail(c, EINVAL, "a mixture needs options and 1..%d sources",
                                 ZR_SOURCES_MAX);
        for (size_t k = 0; k < n_sources; k++) {
                r = check_streams(c, sources[k].streams, n_streams, "source ", k);
                if (r < 0)
                        return r;
        }
        return loader_open(c, sources[0].streams, n_streams, sources, n_sources, opts, ret);
}

/* Takes a BATCH event body into a free held entry; *ret_entry names it. */
static int batch_take(zrc_loader *l, const msgpack_object *root, uint32_t *ret_entry) {
        zrc_conn *c = l->conn;
        const msgpack_object *ms;
        const uint8_t *idx = NULL;
        const void *src = NULL;
        size_t n_idx = 0, n_src = 0, ragged_records = 0, ragged_dims = 0, bytes;
        uint32_t ring_id = 0, slot = 0, n = 0, entry;
        uint64_t step = 0, slot_start, b = l->batch_size;
        const loader_ring *ring;
        const uint8_t *map;
        loader_held *h;
        uint8_t *arrays;
        const void **payloads;
        uint64_t *lengths, *shapes, *indices, *shape_at;
        uint32_t *ndims;
        uint8_t *sources;

        (void)zr_wire_get_u32(root, "ring", &ring_id, NULL);
        (void)zr_wire_get_u32(root, "slot", &slot, NULL);
        (void)zr_wire_get_u64(root, "step", &step, NULL);
        (void)zr_wire_get_array(root, "streams", &ms, &n, NULL);
        if (step != l->next_step)
                return conn_fail(c, ZR_E_PROTO, "loader %u: batch of step %" PRIu64 ", expected %" PRIu64,
                                 l->handle, step, l->next_step);
        ring = ring_find(l, ring_id);
        if (!ring)
                return conn_fail(c, ZR_E_PROTO,
                                 "loader %u: batch in ring %u, which it does not know", l->handle,
                                 ring_id);
        if (slot >= ring->slots)
                return conn_fail(c, ZR_E_PROTO,
                                 "loader %u: batch in slot %u of ring %u, out of range", l->handle,
                                 slot, ring_id);
        for (uint32_t k = 0; k < l->slots; k++)
                if (l->held[k].held && l->held[k].ring == ring_id && l->held[k].slot == slot)
                        return conn_fail(c, ZR_E_PROTO,
                                         "loader %u: batch in slot %u of ring %u, which the "
                                         "client holds",
                                         l->handle, slot, ring_id);
        for (entry = 0; entry < l->slots && l->held[entry].held; entry++)
                ;
        if (entry == l->slots)
                return conn_fail(c, ZR_E_PROTO,
                                 "loader %u: a batch while the client holds all %u of its slots",
                                 l->handle, l->slots);
        if (n != l->n_streams)
                return conn_fail(c, ZR_E_PROTO, "loader %u: batch of %u streams, not %zu", l->handle,
                                 n, l->n_streams);
        if (zr_wire_find(root, "indices") &&
            zr_wire_get_u64s(root, "indices", &idx, &n_idx, NULL) < 0)
                return conn_fail(c, ZR_E_PROTO, "loader %u: indices are not u64s", l->handle);
        if (l->want_indices && n_idx != b)
                return conn_fail(c, ZR_E_PROTO, "loader %u: %zu indices for a batch of %" PRIu64,
                                 l->handle, n_idx, b);
        if (l->want_sources) {
                if (zr_wire_get_bin(root, "source", &src, &n_src, NULL) < 0 || n_src != b)
                        return conn_fail(c, ZR_E_PROTO, "loader %u: a batch of %" PRIu64
                                         " without each record's source", l->handle, b);
                for (size_t j = 0; j < n_src; j++)
                        if (((const uint8_t *)src)[j] >= l->n_sources)
                                return conn_fail(c, ZR_E_PROTO, "loader %u: record %zu of a batch "
                                                 "from source %u of %zu", l->handle, j,
                                                 ((const uint8_t *)src)[j], l->n_sources);
        }
        for (size_t i = 0; i < l->n_streams; i++)
                if (l->streams[i].kind == ZRC_RAGGED) {
                        ragged_records += b;
                        ragged_dims += b * (l->streams[i].ndim ? l->streams[i].ndim :
                                            ZRC_NDIM_MAX);
                }

        h = &l->held[entry];
        h->streams = calloc(l->n_streams, sizeof(*h->streams));
        /* payloads, lengths, shape_at, dims, indices, then ndims (4 bytes each), then
         * the records' sources (bytes) */
        bytes = ragged_records * (sizeof(void *) + 16 + 4) + ragged_dims * 8 +
                (l->want_indices ? b * 8 : 0) + (l->want_sources ? b : 0);
        h->arrays = malloc(bytes ? bytes : 1);
        if (!h->streams || !h->arrays) {
                held_clear(h);
                return conn_fail(c, ENOMEM, "out of memory for a batch");
        }
        arrays = h->arrays;
        payloads = (const void **)(void *)arrays;
        lengths = (uint64_t *)(void *)(arrays + ragged_records * sizeof(void *));
        shape_at = lengths + ragged_records;
        shapes = shape_at + ragged_records;
        indices = shapes + ragged_dims;
        ndims = (uint32_t *)(void *)(indices + (l->want_indices ? b : 0));
        sources = (uint8_t *)(ndims + ragged_records);

        map = ring->map;
        slot_start = (uint64_t)slot * l->slot_bytes;
        for (size_t i = 0; i < l->n_streams; i++) {
                const loader_stream *ls = &l->streams[i];
                zrc_stream_batch *sb = &h->streams[i];
                uint64_t off = conn_get_u64(&ms[i], "offset"), used = conn_get_u64(&ms[i], "bytes");
                uint64_t lo = slot_start + ls->offset, hi = lo + ls->capacity;

                if (off < lo || off > hi || used > hi - off) {
                        held_clear(h);
                        return conn_fail(c, ZR_E_PROTO,
                                         "loader %u: stream %zu's bytes [%" PRIu64 ", +%" PRIu64
                                         ") lie outside its region of slot %u of ring %u",
                                         l->handle, i, off, used, slot, ring_id);
                }
                sb->data = map + off;
                sb->bytes = used;
                sb->ndim = ls->ndim;
                if (ls->kind == ZRC_DENSE) {
                        if (used != b * ls->record_bytes) {
                                held_clear(h);
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
                            nl != b) {
                                held_clear(h);
                                return conn_fail(c, ZR_E_PROTO,
                                                 "loader %u: ragged stream %zu lacks its records",
                                                 l->handle, i);
                        }
                        int64_t dims = conn_take_shapes(ps, nsh, ls->ndim, b, ls->itemsize, pl,
                                                        shapes, 0, ndims, shape_at);
                        if (dims < 0) {
                                held_clear(h);
                                return conn_fail(c, ZR_E_PROTO, "loader %u: the shapes of ragged "
                                                 "stream %zu do not match its records",
                                                 l->handle, i);
                        }
                        for (uint64_t j = 0; j < b; j++) {
                                uint64_t o = zr_wire_u64_at(po, j), len = zr_wire_u64_at(pl, j);

                                if (o < off || o > off + used || len > off + used - o) {
                                        held_clear(h);
                                        return conn_fail(c, ZR_E_PROTO,
                                                         "loader %u: ragged record %" PRIu64
                                                         " of stream %zu lies outside its bytes "
                                                         "or does not match its shape",
                                                         l->handle, j, i);
                                }
                                payloads[j] = map + o;
                                lengths[j] = len;
                        }
                        sb->payloads = payloads;
                        sb->lengths = lengths;
                        sb->shapes = shapes;
                        sb->ndims = ndims;
                        sb->shape_at = shape_at;
                        payloads += b;
                        lengths += b;
                        shape_at += b;
                        ndims += b;
                        shapes += b * (ls->ndim ? ls->ndim : ZRC_NDIM_MAX);
                }
        }
        if (l->want_indices)
                for (uint64_t j = 0; j < b; j++)
                        indices[j] = zr_wire_u64_at(idx, j);
        if (l->want_sources)
                memcpy(sources, src, b);

        h->held = true;
        h->ring = ring_id;
        h->slot = slot;
        h->batch = (zrc_loader_batch){
                .step = step,
                .slot = entry,
                .count = b,
                .n_streams = l->n_streams,
                .streams = h->streams,
                .indices = l->want_indices ? indices : NULL,
                .sources = l->want_sources ? sources : NULL,
        };
        ring_find(l, ring_id)->n_held++;
        l->n_held++;
        l->next_step++;
        *ret_entry = entry;
        return 0;
}

/* Maps the ring a RING event passes (its descriptor is closed with the event). */
static int ring_add(zrc_loader *l, const conn_event *e, const msgpack_object *root) {
        uint32_t id = 0;

        (void)zr_wire_get_u32(root, "ring", &id, NULL);
        return ring_map(l, id, conn_get_u64(root, "slots"), conn_get_u64(root, "slot_bytes"),
                        conn_get_u64(root, "ring_bytes"), e->fd);
}

/* Unmaps the ring a RING_CLOSE names, unless the caller holds a batch in it. */
static int ring_close(zrc_loader *l, const msgpack_object *root) {
        zrc_conn *c = l->conn;
        loader_ring *ring;
        uint32_t id = 0;
        size_t i;

        (void)zr_wire_get_u32(root, "ring", &id, NULL);
        ring = ring_find(l, id);
        if (!ring || ring == &l->rings[0])
                return conn_fail(c, ZR_E_PROTO, "loader %u: RING_CLOSE of %s ring %u", l->handle,
                                 ring ? "its own" : "an unknown", id);
        if (ring->n_held)
                return conn_fail(c, ZR_E_PROTO,
                                 "loader %u: RING_CLOSE of ring %u, in which the client holds %u "
                                 "batches",
                                 l->handle, id, ring->n_held);
        munmap((void *)ring->map, ring->bytes);
        i = (size_t)(ring - l->rings);
        l->rings[i] = l->rings[--l->n_rings]; /* [0], its own, never moves */
        return 0;
}

/* Applies one kept event: a BATCH fills *ret and returns 1; a RING or a
 * RING_CLOSE returns 0; a LOADER_END ends the loader and returns its code. */
static int event_apply(zrc_loader *l, conn_event *e, zrc_loader_batch *ret) {
        zrc_conn *c = l->conn;
        zr_wire_body *body = NULL;
        const msgpack_object *root;
        uint32_t entry = 0;
        int r;

        r = zr_wire_body_decode(e->body, e->size, NULL, &body, NULL);
        if (r < 0)
                return conn_fail(c, ZR_E_PROTO, "a kept event does not decode");
        root = zr_wire_body_root(body);
        switch (e->kind) {
        case ZR_MSG_BATCH:
                r = batch_take(l, root, &entry);
                if (r == 0) {
                        *ret = l->held[entry].batch;
                        r = 1;
                }
                break;
        case ZR_MSG_RING:
                r = ring_add(l, e, root);
                break;
        case ZR_MSG_RING_CLOSE:
                r = ring_close(l, root);
                break;
        default: {
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
                break;
        }
        }
        zr_wire_body_free(body);
        return r;
}

static uint64_t mono_ns(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

int zrc_loader_next(zrc_loader *l, zrc_loader_batch *ret) {
        zrc_conn *c = l->conn;
        uint64_t waited = 0;
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
                        if (r < 0 && !l->ended) {
                                /* the event is gone: so is every later batch */
                                l->ended = true;
                                l->end = c->error;
                        }
                        if (r > 0) {
                                /* told to the daemon at its release (telemetry) */
                                l->held[ret->slot].wait_ns = waited;
                                l->held[ret->slot].taken_ns = mono_ns();
                        }
                        if (r != 0)
                                return r < 0 ? r : 0;
                        continue; /* a ring learnt or forgotten */
                }
                if (l->n_held >= l->slots)
                        return conn_fail(c, EDEADLK,
                                         "loader %u: all %u slots are held; release one before "
                                         "asking for the next batch",
                                         l->handle, l->slots);
                uint64_t t0 = mono_ns();
                r = conn_wait_event(c);
                waited += mono_ns() - t0;
                if (r < 0)
                        return r;
        }
}

int zrc_loader_release(zrc_loader *l, uint32_t slot) {
        zrc_conn *c = l->conn;
        zr_wire_writer *w;
        loader_held *h;
        loader_ring *ring;
        uint32_t ring_id, ring_slot;
        uint64_t wait_ns, taken_ns;
        int r;

        if (slot >= l->slots || !l->held[slot].held)
                return conn_fail(c, EINVAL, "loader %u: no batch is held as slot %u", l->handle,
                                 slot);
        h = &l->held[slot];
        ring_id = h->ring;
        ring_slot = h->slot;
        wait_ns = h->wait_ns;
        taken_ns = h->taken_ns;
        ring = ring_find(l, ring_id);
        if (ring)
                ring->n_held--;
        held_clear(h);
        l->n_held--;
        r = conn_check(c, 0, NULL);
        if (r < 0)
                return r;
        w = conn_begin_notification(c, ZR_MSG_RELEASE);
        zr_wire_put_u64(w, "loader", l->handle);
        zr_wire_put_u64(w, "ring", ring_id);
        zr_wire_put_u64(w, "slot", ring_slot);
        zr_wire_put_u64(w, "wait_ns", wait_ns);
        zr_wire_put_u64(w, "taken_ns", taken_ns);
        return conn_notify(c, ZR_MSG_RELEASE);
}
