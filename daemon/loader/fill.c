/* fill.c: a loader's streams and slot layout, and the fill of one slot
 * (loader-private.h).
 *
 * At open it reads each stream's length and generation, sizes each stream's
 * region (a dense batch exactly; a ragged one as asked, or twice the batch of
 * records of the mean size sampled from the table, loader.h) and lays the
 * regions out in a slot. A fill gathers every stream of one step into its
 * region with the dataset layer's batch gather (dataset/batch.h), through the
 * engine's decoded-record cache, and fills the slot's metadata.
 *
 * It assumes the scheduler has claimed the slot for this fill alone. A fill
 * takes each stream's lock shared, one at a time, and only tries: a lock that
 * a mutation holds parks the fill (res->busy) instead of holding a worker.
 * It checks the stream's generation before and after: a batch gathered across
 * a change is never announced.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dataset/batch.h"
#include "loader/loader-private.h"
#include "store/store.h"
#include "zr-proto.h"

/* Records sampled (evenly spaced) to estimate a ragged stream's mean record
 * size for its default capacity: at most 256 preads of 16 bytes at open,
 * whatever the length, and close enough for a 2x margin. */
#define LOADER_CAPACITY_SAMPLE 256
/* Default ragged capacity is this many times batch_size × the mean record. */
#define LOADER_CAPACITY_FACTOR 2

static uint64_t align_up(uint64_t v, uint64_t a) {
        return (v + a - 1) / a * a;
}

/* Default capacity of a ragged stream: see loader.h. */
static int ragged_default_capacity(lstream *st, uint64_t n, uint64_t B, zr_error *err) {
        uint64_t k = n < LOADER_CAPACITY_SAMPLE ? n : LOADER_CAPACITY_SAMPLE, sum = 0, cap;
        uint64_t idx[LOADER_CAPACITY_SAMPLE];
        zr_loc locs[LOADER_CAPACITY_SAMPLE];
        int r;

        for (uint64_t i = 0; i < k; i++)
                idx[i] = (uint64_t)(((unsigned __int128)i * n) / k);
        r = zr_store_locate(zr_dataset_store(st->s.ds), idx, k, locs, err);
        if (r < 0)
                return r;
        for (uint64_t i = 0; i < k; i++)
                sum += locs[i].logic_length;
        /* 2 × B × mean, plus the alignment padding of B records */
        unsigned __int128 c = (unsigned __int128)LOADER_CAPACITY_FACTOR * B * sum / k +
                              (unsigned __int128)B * ZR_RECORD_ALIGN;
        if (c > UINT64_MAX / 2)
                return zr_error_set(err, EOVERFLOW, "%s: the default capacity overflows",
                                    st->name);
        cap = align_up((uint64_t)c, ZR_STREAM_ALIGN);
        st->capacity = cap ? cap : ZR_STREAM_ALIGN;
        return 0;
}

/* Lays out a slot: each stream's region, and the slot size. */
static int layout(zr_loader *l, const zr_loader_params *p, zr_error *err) {
        uint64_t off = 0;

        for (size_t i = 0; i < l->nstreams; i++) {
                lstream *st = &l->streams[i];
                off = align_up(off, ZR_STREAM_ALIGN);
                st->offset = off;
                if (__builtin_add_overflow(off, st->capacity, &off))
                        return zr_error_set(err, EOVERFLOW, "the slot size overflows");
        }
        l->slot_bytes = align_up(off ? off : 1, ZR_SHM_ALIGN);
        if (l->slot_bytes < off || (uint64_t)l->nslots > UINT64_MAX / l->slot_bytes ||
            l->slot_bytes * l->nslots > SIZE_MAX / 2)
                return zr_error_set(err, EOVERFLOW, "a ring of %u slots of %" PRIu64 " bytes "
                                    "does not fit in memory", l->nslots, off);
        /* Short of budget, a ring of fewer slots (at least 2: one filling while
         * one is held) rather than none: the reply's `slots` says how many. */
        if (p->ring_bytes_max && l->slot_bytes * l->nslots > p->ring_bytes_max &&
            l->nslots > 2 && p->ring_bytes_max / l->slot_bytes >= 2)
                l->nslots = (uint32_t)(p->ring_bytes_max / l->slot_bytes);
        if (p->ring_bytes_max && l->slot_bytes * l->nslots > p->ring_bytes_max)
                return zr_error_set(err, ZR_E_LIMIT, "the ring needs %" PRIu64 " bytes (%u slots "
                                    "of %" PRIu64 "), over the %" PRIu64 " allowed",
                                    l->slot_bytes * l->nslots, l->nslots, l->slot_bytes,
                                    p->ring_bytes_max);
        return 0;
}

/* Each stream's schema, generation and length (under its lock); they must
 * all have one length, the one the client expects if it says. */
static int streams_open(zr_loader *l, const zr_loader_stream *streams,
                        const zr_loader_params *p, zr_error *err) {
        uint64_t len0 = 0;

        for (size_t i = 0; i < l->nstreams; i++) {
                lstream *st = &l->streams[i];
                st->s = streams[i];
                if (streams[i].name)
                        snprintf(st->name, sizeof(st->name), "stream %zu (%s)", i,
                                 streams[i].name);
                else
                        snprintf(st->name, sizeof(st->name), "stream %zu", i);
                st->schema = zr_dataset_schema(st->s.ds);
                st->ragged = st->schema->kind == ZR_SCHEMA_RAGGED;
                st->item_bytes = zr_schema_item_bytes(st->schema);
                zr_dataset_lock(st->s.ds, false);
                st->open_gen = zr_dataset_generation(st->s.ds);
                uint64_t len = zr_dataset_length(st->s.ds);
                zr_dataset_unlock(st->s.ds);
                if (i == 0)
                        len0 = len;
                if (len != len0) {
                        char msg[ZR_ERROR_MESSAGE_MAX];
                        size_t at = 0;
                        msg[0] = 0;
                        for (size_t k = 0; k < l->nstreams && at < sizeof(msg); k++) {
                                char nm[64];
                                if (streams[k].name)
                                        snprintf(nm, sizeof(nm), "%s", streams[k].name);
                                else
                                        snprintf(nm, sizeof(nm), "stream %zu", k);
                                at += (size_t)snprintf(msg + at, sizeof(msg) - at,
                                                       "%s%s: %" PRIu64, k ? ", " : "", nm,
                                                       zr_dataset_length(streams[k].ds));
                        }
                        return zr_error_set(err, ZR_E_MISALIGNED, "the streams differ in length "
                                            "(%s)", msg);
                }
        }
        l->length = len0;
        if (p->has_length && p->length != len0)
                return zr_error_set(err, ZR_E_STALE, "the streams hold %" PRIu64 " records, the "
                                    "client expects %" PRIu64, len0, p->length);
        return 0;
}

/* Each stream's region: a dense batch exactly, a ragged one what was asked
 * or the default (loader.h). */
static int capacities(zr_loader *l, const zr_loader_params *p, zr_error *err) {
        for (size_t i = 0; i < l->nstreams; i++) {
                lstream *st = &l->streams[i];
                int r = 0;
                if (!st->ragged) {
                        if (__builtin_mul_overflow(p->batch_size, st->item_bytes, &st->capacity))
                                return zr_error_set(err, EOVERFLOW, "%s: a batch overflows",
                                                    st->name);
                } else if (st->s.capacity) {
                        st->capacity = align_up(st->s.capacity, ZR_STREAM_ALIGN);
                } else {
                        /* the table is read under the lock, and at the length
                         * and generation seen at open (else the loader is stale
                         * before it starts) */
                        zr_dataset_lock(st->s.ds, false);
                        if (zr_dataset_generation(st->s.ds) != st->open_gen)
                                r = zr_error_set(err, ZR_E_STALE, "%s changed while the loader "
                                                 "opened", st->name);
                        else
                                r = ragged_default_capacity(st, l->length, p->batch_size, err);
                        zr_dataset_unlock(st->s.ds);
                        if (r < 0)
                                return r;
                }
        }
        return 0;
}

int zr_fill_setup(zr_loader *l, const zr_loader_stream *streams, const zr_loader_params *p,
                  zr_error *err) {
        int r = streams_open(l, streams, p, err);

        if (r < 0)
                return r;
        l->sp = (zr_sampler_params){ .mode = p->mode, .n = l->length,
                                     .batch_size = p->batch_size, .seed = p->seed,
                                     .step = p->start_step, .rank = p->rank,
                                     .world_size = p->world_size };
        r = zr_sampler_check(&l->sp, err);
        if (r < 0)
                return r;
        if (p->batch_size > l->length)
                return zr_error_set(err, ZR_E_SAMPLER, "batch_size %" PRIu64 " is larger than "
                                    "the length %" PRIu64, p->batch_size, l->length);
        r = capacities(l, p, err);
        if (r < 0)
                return r;
        return layout(l, p, err);
}

static void fill_fail(fill_result *res, int r, const zr_error *err) {
        res->code = r < 0 ? -r : r;
        snprintf(res->msg, sizeof(res->msg), "%s", err->message[0] ? err->message : "failed");
}

/* Gathers stream `si` of the batch idx[0..B) into its region of `base` (the
 * slot), filling the slot's metadata. Takes the stream's lock shared. */
static int gather_stream(zr_loader *l, size_t si, const uint64_t *idx, uint8_t *base,
                         uint64_t slot_off, uint64_t plan_owner, zr_gather_times *times,
                         zr_loader_stream_batch *sb, fill_result *res, zr_error *err) {
        lstream *st = &l->streams[si];
        zr_gather g = { .ds = st->s.ds, .idx = idx, .n = l->sp.batch_size,
                        .offsets = (uint64_t *)sb->offsets, /* the slot's own arrays */
                        .lengths = (uint64_t *)sb->lengths, .shapes = (uint64_t *)sb->shapes,
                        .plan_owner = plan_owner, .times = times };
        zr_error gerr = {0};
        int r, locked = 0;

        if (zr_dataset_generation(st->s.ds) == st->open_gen) {
                if (zr_dataset_trylock_shared(st->s.ds) < 0) {
                        /* a mutation holds it: do not block a worker for its
                         * duration (the work is parked, see complete()) */
                        return -EBUSY;
                }
                locked = 1;
        }
        if (zr_dataset_generation(st->s.ds) != st->open_gen) {
                r = zr_error_set(err, ZR_E_STALE, "%s changed under the loader (appended to, "
                                 "deleted from or compacted)", st->name);
                goto out;
        }
        r = zr_gather_locate(&g, &gerr);
        if (r == 0 && g.bytes > st->capacity) {
                res->needed = g.bytes;
                r = zr_error_set(err, ZR_E_BUFFER, "%s: the batch needs %" PRIu64 " bytes, the "
                                 "stream's capacity is %" PRIu64 "; reopen with a larger capacity",
                                 st->name, g.bytes, st->capacity);
                goto out;
        }
        if (r == 0)
                r = zr_gather_read(&g, base + st->offset, slot_off + st->offset, l->e->cache,
                                   l->e->pool, &gerr);
        res->hits += g.hits;
        res->misses += g.misses;
        res->evictions += g.evictions;
        if (r < 0) {
                r = zr_error_set(err, gerr.code ? gerr.code : -r, "%s: %s", st->name, gerr.message);
                goto out;
        }
        if (zr_dataset_generation(st->s.ds) != st->open_gen) {
                r = zr_error_set(err, ZR_E_STALE, "%s changed under the loader during a gather",
                                 st->name);
                goto out;
        }
        sb->offset = slot_off + st->offset;
        sb->bytes = g.bytes;
        sb->shape_words = g.shape_words;
        res->bytes += g.bytes;
        res->records += g.n;
out:
        if (locked)
                zr_dataset_unlock(st->s.ds);
        zr_gather_release(&g);
        return r;
}

/* Gathers step w->step into slot w->sl (the slot's metadata too). */
void zr_fill(zr_loader *l, const work *w, fill_result *res) {
        slot *sl = w->sl;
        uint64_t slot_off = (uint64_t)sl->index * sl->r->slot_bytes;
        uint8_t *base = (uint8_t *)sl->r->shm.data + slot_off;
        zr_sampler_params sp = l->sp;
        zr_error err = {0};
        uint64_t t0 = w->timed ? zr_loader_now_ns() : 0;
        int r;

        if (w->io_error) {
                /* its reads ahead failed: the device would fail the gather too,
                 * through a page fault the daemon must never take */
                fill_fail(res, zr_error_set(&err, w->io_error, "reading step %" PRIu64
                                            " ahead: %s", w->step, strerror(w->io_error)),
                          &err);
                return;
        }
        zr_ring_populate(l->e, sl);
        sp.step = w->step;
        r = zr_sampler_indices(&sp, sl->indices, &err);
        res->times.detail = w->detail;
        for (size_t i = 0; r >= 0 && i < l->nstreams; i++)
                r = gather_stream(l, i, sl->indices, base, slot_off, w->plan_owner,
                                  w->timed ? &res->times : NULL, &sl->sb[i], res, &err);
        if (w->timed)
                res->fill_ns = zr_loader_now_ns() - t0;
        if (r == -EBUSY)
                res->busy = 1;
        else if (r < 0)
                fill_fail(res, r, &err);
}
