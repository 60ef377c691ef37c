/* fill.c: a loader's streams and slot layout, and the fill of one slot
 * (loader-private.h).
 *
 * At open it reads each stream's length and generation, sizes each stream's
 * region (a dense batch exactly; a ragged one as asked, or twice the batch of
 * records of the mean size sampled from the table, loader.h; a mixture's, the
 * most its sources' streams ask) and lays the regions out in a slot. A fill
 * takes the step's records (sources.c) and gathers every stream of one step
 * into its region with the dataset layer's batch gather (dataset/batch.h; a
 * mixture's stream from every source at once), through the engine's
 * decoded-record cache, and fills the slot's metadata.
 *
 * It assumes the scheduler has claimed the slot for this fill alone. A fill
 * takes each stream's lock shared (a mixture's stream: each distinct dataset of
 * its sources' at once), and only tries: a lock that a mutation holds parks the
 * fill (res->busy) instead of holding a worker.
 * It checks the stream's generation before and after: a batch gathered across
 * a change is never announced.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dataset/batch.h"
#include "dataset/fingerprint.h"
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

/* Default capacity of a ragged stream (see loader.h) into *ret. */
static int ragged_default_capacity(lstream *st, uint64_t B, uint64_t *ret, zr_error *err) {
        uint64_t n = st->open_len, k = n < LOADER_CAPACITY_SAMPLE ? n : LOADER_CAPACITY_SAMPLE;
        uint64_t sum = 0, cap;
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
        if (k == 0) /* an empty source of a mixture: its records never come */
                k = 1;
        /* 2 × B × mean, plus the alignment padding of B records */
        unsigned __int128 c = (unsigned __int128)LOADER_CAPACITY_FACTOR * B * sum / k +
                              (unsigned __int128)B * ZR_RECORD_ALIGN;
        if (c > UINT64_MAX / 2)
                return zr_error_set(err, EOVERFLOW, "%s: the default capacity overflows",
                                    st->name);
        cap = align_up((uint64_t)c, ZR_STREAM_ALIGN);
        *ret = cap ? cap : ZR_STREAM_ALIGN;
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
        /* a mixture: every source's stream i shares stream i's region */
        for (size_t j = l->nstreams; j < l->nall; j++) {
                l->streams[j].offset = l->streams[j % l->nstreams].offset;
                l->streams[j].capacity = l->streams[j % l->nstreams].capacity;
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

/* "stream 1 (label)", or a mixture's "source 2 stream 1 (label)" (a stream of
 * every source, its slot region: k = UINT32_MAX), for messages. */
static void stream_name(const zr_loader *l, uint32_t k, size_t i, const char *name, char *buf,
                        size_t size) {
        int at = l->nsources && k != UINT32_MAX ? snprintf(buf, size, "source %" PRIu32 " ", k) : 0;

        if (name)
                snprintf(buf + at, size - (size_t)at, "stream %zu (%s)", i, name);
        else
                snprintf(buf + at, size - (size_t)at, "stream %zu", i);
}

static int dataset_id_cmp(const void *a, const void *b) {
        uint64_t x = zr_dataset_id(*(zr_dataset *const *)a);
        uint64_t y = zr_dataset_id(*(zr_dataset *const *)b);
        return x < y ? -1 : x > y;
}

/* Takes the locks of in[0..n)'s datasets shared, once each, in the lock order
 * (ascending id): an append through a set (another client's) is then in all of
 * them or in none. Returns how many it took, in locked[] (n <= ZR_STREAMS_MAX). */
static size_t lock_source(const zr_loader_stream *in, size_t n, zr_dataset **locked) {
        size_t k = 0;

        for (size_t i = 0; i < n; i++)
                locked[i] = in[i].ds;
        qsort(locked, n, sizeof(*locked), dataset_id_cmp);
        for (size_t i = 0; i < n; i++) /* never shared twice by one thread */
                if (i == 0 || locked[i] != locked[k - 1])
                        locked[k++] = locked[i];
        for (size_t i = 0; i < k; i++)
                zr_dataset_lock(locked[i], false);
        return k;
}

/* Each stream's schema, generation and length (a source's under all its
 * streams' locks); the streams of a source must all have one length, a plain
 * loader's the one the client expects if it says (a mixture's sources are
 * checked by sources.c). */
static int streams_open(zr_loader *l, const zr_loader_stream *streams,
                        const zr_loader_params *p, zr_error *err) {
        uint64_t len0 = 0;

        for (uint32_t k = 0; k < loader_sources(l); k++) {
                const zr_loader_stream *in = streams + (size_t)k * l->nstreams;
                zr_dataset *locked[ZR_STREAMS_MAX];
                size_t nlocked = lock_source(in, l->nstreams, locked);

                for (size_t i = 0; i < l->nstreams; i++) {
                        lstream *st = loader_stream(l, k, i);
                        st->open_gen = zr_dataset_generation(in[i].ds);
                        st->open_len = zr_dataset_length(in[i].ds);
                }
                while (nlocked > 0)
                        zr_dataset_unlock(locked[--nlocked]);
                for (size_t i = 0; i < l->nstreams; i++) {
                        lstream *st = loader_stream(l, k, i);
                        st->s = in[i];
                        if (in[i].name) { /* the caller's string lives as long as the call */
                                snprintf(st->label, sizeof(st->label), "%s", in[i].name);
                                st->s.name = st->label;
                        }
                        stream_name(l, k, i, in[i].name, st->name, sizeof(st->name));
                        st->schema = zr_dataset_schema(st->s.ds);
                        st->ragged = st->schema->kind == ZR_SCHEMA_RAGGED;
                        if (in[i].image) { /* its region is dense: imgstream.c */
                                st->image = 1;
                                st->img = *in[i].image;
                                st->ragged = 0;
                        }
                        st->item_bytes = zr_schema_item_bytes(st->schema);
                        if (i == 0)
                                len0 = st->open_len;
                        if (st->open_len == len0)
                                continue;
                        char msg[ZR_ERROR_MESSAGE_MAX];
                        size_t at = 0;
                        msg[0] = 0;
                        for (size_t m = 0; m < l->nstreams && at < sizeof(msg); m++) {
                                char nm[64];
                                if (in[m].name)
                                        snprintf(nm, sizeof(nm), "%s", in[m].name);
                                else
                                        snprintf(nm, sizeof(nm), "stream %zu", m);
                                at += (size_t)snprintf(msg + at, sizeof(msg) - at,
                                                       "%s%s: %" PRIu64, m ? ", " : "", nm,
                                                       loader_stream(l, k, m)->open_len);
                        }
                        if (l->nsources)
                                return zr_error_set(err, ZR_E_MISALIGNED, "the streams of source %"
                                                    PRIu32 " differ in length (%s)", k, msg);
                        return zr_error_set(err, ZR_E_MISALIGNED, "the streams differ in length "
                                            "(%s)", msg);
                }
        }
        if (l->nsources)
                return 0;
        l->length = len0;
        if (p->has_length && p->length != len0)
                return zr_error_set(err, ZR_E_STALE, "the streams hold %" PRIu64 " records, the "
                                    "client expects %" PRIu64, len0, p->length);
        return 0;
}

/* Each stream's region: a dense batch exactly, a ragged one what was asked
 * or the default (loader.h); a mixture's, the most any source's stream asks. */
static int capacities(zr_loader *l, const zr_loader_params *p, zr_error *err) {
        for (size_t j = 0; j < l->nall; j++) {
                lstream *st = &l->streams[j];
                uint64_t *cap = st->image ? &st->in_capacity : &st->capacity;
                int r = 0;
                if (st->image && (r = zr_imgstream_setup(l, st, err)) < 0)
                        return r;
                if (st->s.pack.mode != ZR_PACK_NONE) {
                        if (__builtin_mul_overflow(p->batch_size, st->s.pack.seq_len * 8,
                                                   &st->capacity))
                                return zr_error_set(err, EOVERFLOW, "%s: a batch overflows",
                                                    st->name);
                        st->capacity = zr_pack_region_bytes(p->batch_size, st->s.pack.seq_len,
                                                            st->schema->dtype.itemsize, NULL,
                                                            NULL);
                } else if (!st->ragged && !st->image) {
                        if (__builtin_mul_overflow(p->batch_size, st->item_bytes, &st->capacity))
                                return zr_error_set(err, EOVERFLOW, "%s: a batch overflows",
                                                    st->name);
                } else if (st->s.capacity) {
                        *cap = align_up(st->s.capacity, ZR_STREAM_ALIGN);
                } else {
                        /* the table is read under the lock, and at the length
                         * and generation seen at open (else the loader is stale
                         * before it starts) */
                        zr_dataset_lock(st->s.ds, false);
                        if (zr_dataset_generation(st->s.ds) != st->open_gen)
                                r = zr_error_set(err, ZR_E_STALE, "%s changed while the loader "
                                                 "opened", st->name);
                        else
                                r = ragged_default_capacity(st, p->batch_size, cap, err);
                        zr_dataset_unlock(st->s.ds);
                        if (r < 0)
                                return r;
                }
                if (j >= l->nstreams) {
                        lstream *s0 = &l->streams[j % l->nstreams];
                        if (st->image != s0->image ||
                            (st->image && !zr_image_params_same(&st->img, &s0->img)))
                                return zr_error_set(err, ZR_E_PROTO, "%s: every source's stream "
                                                    "%zu decodes its images alike",
                                                    st->name, j % l->nstreams);
                        if (st->capacity > s0->capacity)
                                s0->capacity = st->capacity;
                        if (st->in_capacity > s0->in_capacity)
                                s0->in_capacity = st->in_capacity;
                }
        }
        return 0;
}

/* A packed loader's stream (pack.h) of each source: checked, its fingerprint
 * read and its first cycle's index loaded or built, under its lock taken
 * shared (blocking: this runs on a worker at open), at the generation seen at
 * open. A mixture's sources pack alike, each as a stream of rows of its own
 * drawn one by one (batch_size 1, world_size 1, the mixture's seed of the
 * source), so that its draw c is its row c (sampler/mixture.h). */
static int pack_setup(zr_loader *l, const zr_loader_params *p, zr_error *err) {
        zr_tokstore *ts = l->e->tokstore ? l->e->tokstore : l->e->tok_memory;
        uint64_t need = 0;
        int r;

        if (l->nstreams != 1)
                return zr_error_set(err, ZR_E_PROTO, "a packed loader has one stream (a "
                                    "mixture's: one a source), not %zu", l->nstreams);
        for (uint32_t k = 0; k < loader_sources(l); k++) {
                lstream *st = loader_stream(l, k, 0);
                enum zr_sampler_mode mode = l->mix ? l->mix->sources[k].mode : p->mode;
                if (st->s.pack.mode == ZR_PACK_NONE ||
                    !zr_pack_params_same(&st->s.pack, &l->streams[0].s.pack))
                        return zr_error_set(err, ZR_E_SCHEMA, "%s: a mixture's sources pack "
                                            "alike (seq_len, mode, eos_id, pad_id, window): "
                                            "source %" PRIu32 " differs from source 0", st->name, k);
                r = zr_pack_check(&st->s.pack, st->s.ds, mode, st->name, err);
                if (r < 0)
                        return r;
                if (p->batch_size > UINT64_MAX / 8 / st->s.pack.seq_len)
                        return zr_error_set(err, EOVERFLOW, "%s: a batch of %" PRIu64 " rows "
                                            "overflows", st->name, p->batch_size);
                /* its indexes, charged before they are made (a fill's tables and
                 * scratch are counted with the loader's, zr_loader_work_bytes()) */
                need += zr_pack_work_bytes(&st->s.pack, st->open_len,
                                           (unsigned)zr_pool_shards(l->e->pool, SIZE_MAX));
                if (p->work_bytes_max && need > p->work_bytes_max)
                        return zr_error_set(err, ZR_E_LIMIT, "%s: the indexes of %" PRIu64
                                            " documents need %" PRIu64 " bytes of working "
                                            "memory, over the %" PRIu64 " bytes left of "
                                            "max-work-mem-per-uid", st->name, st->open_len, need,
                                            p->work_bytes_max);
        }
        for (uint32_t k = 0; k < loader_sources(l); k++) {
                lstream *st = loader_stream(l, k, 0);
                zr_sampler_params sp = l->sp;
                uint64_t fp, first = p->start_step;
                if (l->mix) {
                        sp = (zr_sampler_params){ .mode = l->mix->sources[k].mode,
                                                  .n = st->open_len, .batch_size = 1,
                                                  .seed = l->mix->source_seed[k],
                                                  .world_size = 1 };
                        first = zr_mixture_draws_before(l->mix, k, p->start_step);
                }
                zr_dataset_lock(st->s.ds, false);
                if (zr_dataset_generation(st->s.ds) != st->open_gen)
                        r = zr_error_set(err, ZR_E_STALE, "%s changed while the loader opened",
                                         st->name);
                else
                        r = zr_dataset_fingerprint(st->s.ds, &fp, err);
                if (r == 0)
                        r = zr_pack_new(&st->s.pack, st->s.ds, st->open_len, fp, &sp, first, ts,
                                        l->e->pool, p->cancel, &st->pack, err);
                zr_dataset_unlock(st->s.ds);
                if (r < 0)
                        return r;
                /* its batch is served as a dense one: no per-record metadata */
                st->ragged = 0;
        }
        return 0;
}

int zr_fill_setup(zr_loader *l, const zr_loader_stream *streams, const zr_loader_params *p,
                  zr_error *err) {
        int r = streams_open(l, streams, p, err);
        int packed = streams[0].pack.mode != ZR_PACK_NONE;

        if (r < 0)
                return r;
        for (size_t i = 1; i < l->nall; i++)
                if (streams[i].pack.mode != ZR_PACK_NONE)
                        packed = 1;
        if (l->nsources) {
                /* a mixture: its own sampler (sources.c); a source may be shorter
                 * than a batch, it repeats */
                r = zr_sources_setup(l, p, err);
                if (r < 0)
                        return r;
        }
        l->sp = (zr_sampler_params){ .mode = p->mode, .n = l->length,
                                     .batch_size = p->batch_size, .seed = p->seed,
                                     .step = p->start_step, .rank = p->rank,
                                     .world_size = p->world_size };
        if (packed) {
                /* rows, not records: batch_size may pass the length */
                zr_sampler_params sp = l->sp;
                sp.batch_size = 1;
                if ((r = zr_sampler_check(&sp, err)) < 0 || (r = pack_setup(l, p, err)) < 0)
                        return r;
        } else if (!l->nsources) {
                r = zr_sampler_check(&l->sp, err);
                if (r < 0)
                        return r;
                if (p->batch_size > l->length)
                        return zr_error_set(err, ZR_E_SAMPLER, "batch_size %" PRIu64 " is larger "
                                            "than the length %" PRIu64, p->batch_size, l->length);
        }
        r = capacities(l, p, err);
        if (r < 0)
                return r;
        return layout(l, p, err);
}

static void fill_fail(fill_result *res, int r, const zr_error *err) {
        res->code = r < 0 ? -r : r;
        snprintf(res->msg, sizeof(res->msg), "%s", err->message[0] ? err->message : "failed");
}

/* Unlocks the datasets of held[0..n). */
static void unlock_all(zr_dataset **held, size_t n) {
        while (n > 0)
                zr_dataset_unlock(held[--n]);
}

/* Gathers stream `si` of the batch rec (of every source of a mixture) into its
 * region of `base` (the slot), filling the slot's metadata. Takes each distinct
 * dataset's lock shared. */
static int gather_stream(zr_loader *l, size_t si, const step_records *rec, uint8_t *base,
                         uint64_t slot_off, const work *w, zr_gather_times *times,
                         zr_loader_stream_batch *sb, fill_result *res, zr_error *err) {
        lstream *st = loader_stream(l, 0, si);
        zr_dataset *dss[ZR_MIXTURE_MAX_SOURCES], *held[ZR_MIXTURE_MAX_SOURCES];
        zr_gather g = { .ds = st->s.ds, .idx = rec->idx, .n = l->sp.batch_size,
                        .offsets = (uint64_t *)sb->offsets, /* the slot's own arrays */
                        .lengths = (uint64_t *)sb->lengths, .shapes = (uint64_t *)sb->shapes,
                        .plan_owner = w->plan_owner, .times = times,
                        .span = (uint64_t)l->nslots * l->slot_bytes, .cold = w->cold,
                        .cancel = &w->sl->cancel };
        uint32_t nsrc = loader_sources(l);
        zr_error gerr = {0};
        imgbatch ib = {0};
        size_t nheld = 0;
        int r = 0;

        for (uint32_t k = 0; k < nsrc; k++) {
                lstream *sk = loader_stream(l, k, si);
                size_t h;

                dss[k] = sk->s.ds;
                for (h = 0; h < nheld && held[h] != sk->s.ds; h++)
                        ;
                if (h == nheld && zr_dataset_generation(sk->s.ds) == sk->open_gen) {
                        if (zr_dataset_trylock_shared(sk->s.ds) < 0) {
                                /* a mutation holds it: do not block a worker for its
                                 * duration (the work is parked, see complete()) */
                                unlock_all(held, nheld);
                                return -EBUSY;
                        }
                        held[nheld++] = sk->s.ds;
                }
                if (zr_dataset_generation(sk->s.ds) != sk->open_gen) {
                        r = zr_error_set(err, ZR_E_STALE, "%s changed under the loader (appended "
                                         "to, deleted from or compacted)", sk->name);
                        goto out;
                }
        }
        if (l->mix) {
                g.sources = dss;
                g.source = rec->src;
                g.nsources = nsrc;
        }
        /* an image stream: its encoded records go to a staging buffer of their
         * own, then decoded into the region (imgstream.c) */
        uint64_t room = st->image ? st->in_capacity : st->capacity;
        if (st->image && (r = zr_imgbatch_begin(&ib, st, g.n, &g, err)) < 0)
                goto out;
        r = zr_gather_locate(&g, &gerr);
        if (r == 0 && g.bytes > room) {
                char name[96];
                stream_name(l, UINT32_MAX, si, st->s.name, name, sizeof(name));
                res->needed = g.bytes;
                r = zr_error_set(err, ZR_E_BUFFER, "%s: the batch needs %" PRIu64 " bytes, the "
                                 "stream's capacity is %" PRIu64 "; reopen with a larger capacity",
                                 name, g.bytes, room);
                goto out;
        }
        if (r == 0 && st->image)
                r = zr_imgbatch_read(&ib, l, st, &g, zr_loader_step(l, w->step), base + st->offset,
                                     &sb->skipped, &gerr);
        else if (r == 0) {
                /* a cold step: with O_DIRECT into place (fill-direct.c) */
                int d = w->direct && !l->mix && !st->ragged
                                ? zr_fill_direct(l, st, &g, base + st->offset,
                                                 zr_loader_step(l, w->step), times, &gerr)
                                : 1;
                r = d <= 0 ? d
                           : zr_gather_read(&g, base + st->offset, slot_off + st->offset,
                                            l->e->cache, l->e->pool, &gerr);
        }
        res->hits += g.hits;
        res->misses += g.misses;
        res->evictions += g.evictions;
        if (r < 0) {
                char name[96];
                stream_name(l, UINT32_MAX, si, st->s.name, name, sizeof(name));
                r = zr_error_set(err, gerr.code ? gerr.code : -r, "%s: %s", name, gerr.message);
                goto out;
        }
        for (uint32_t k = 0; k < nsrc; k++) {
                lstream *sk = loader_stream(l, k, si);

                if (zr_dataset_generation(sk->s.ds) != sk->open_gen) {
                        r = zr_error_set(err, ZR_E_STALE, "%s changed under the loader during a "
                                         "gather", sk->name);
                        goto out;
                }
        }
        sb->offset = slot_off + st->offset;
        sb->bytes = st->image ? st->capacity : g.bytes;
        sb->shape_words = g.shape_words;
        res->bytes += g.bytes;
        res->records += g.n;
out:
        unlock_all(held, nheld);
        zr_gather_release(&g);
        zr_imgbatch_end(&ib);
        return r;
}

/* Packs stream si's rows of the engine's step into its region (pack.h), under
 * its datasets' locks taken shared (tried), at the generations seen at open. A
 * mixture's rows come from their sources' packs: the slot's sources and
 * indices (each row's draw) are set by zr_fill(). */
static int pack_stream(zr_loader *l, size_t si, uint8_t *base, uint64_t slot_off, const work *w,
                       zr_loader_stream_batch *sb, fill_result *res, zr_error *err) {
        lstream *st = loader_stream(l, 0, si);
        zr_dataset *held[ZR_MIXTURE_MAX_SOURCES];
        uint32_t nsrc = loader_sources(l);
        uint64_t B = l->sp.batch_size, bytes, pieces = 0;
        uint64_t *rows = NULL;
        uint32_t *at = NULL;
        size_t nheld = 0;
        int r = 0;

        bytes = zr_pack_region_bytes(B, st->s.pack.seq_len, st->schema->dtype.itemsize, NULL, NULL);
        for (uint32_t k = 0; k < nsrc; k++) {
                lstream *sk = loader_stream(l, k, si);
                size_t h;
                for (h = 0; h < nheld && held[h] != sk->s.ds; h++)
                        ;
                if (h == nheld) {
                        if (zr_dataset_trylock_shared(sk->s.ds) < 0) {
                                r = -EBUSY;
                                goto out;
                        }
                        held[nheld++] = sk->s.ds;
                }
                if (zr_dataset_generation(sk->s.ds) != sk->open_gen) {
                        r = zr_error_set(err, ZR_E_STALE, "%s changed under the loader (appended "
                                         "to, deleted from or compacted)", sk->name);
                        goto out;
                }
        }
        if (!l->mix) {
                r = zr_pack_fill(st->pack, zr_loader_step(l, w->step), base + st->offset,
                                 &w->sl->cancel, &bytes, &pieces, err);
        } else {
                rows = malloc(B * sizeof(*rows));
                at = malloc(B * sizeof(*at));
                if (!rows || !at) {
                        r = zr_error_errno(err, ENOMEM, "a packed mixture's rows");
                        goto out;
                }
                for (uint32_t k = 0; k < nsrc && r == 0; k++) {
                        size_t n = 0;
                        for (uint64_t j = 0; j < B; j++)
                                if (w->sl->sources[j] == k) {
                                        rows[n] = w->sl->indices[j];
                                        at[n++] = (uint32_t)j;
                                }
                        if (n)
                                r = zr_pack_fill_rows(loader_stream(l, k, si)->pack, B, n, rows,
                                                      at, base + st->offset, &w->sl->cancel,
                                                      &pieces, err);
                }
        }
        for (uint32_t k = 0; r == 0 && k < nsrc; k++) {
                lstream *sk = loader_stream(l, k, si);
                if (zr_dataset_generation(sk->s.ds) != sk->open_gen)
                        r = zr_error_set(err, ZR_E_STALE, "%s changed under the loader during a "
                                         "fill", sk->name);
        }
out:
        unlock_all(held, nheld);
        free(rows);
        free(at);
        if (r < 0)
                return r;
        sb->offset = slot_off + st->offset;
        sb->bytes = bytes;
        sb->shape_words = 0;
        res->bytes += bytes;
        res->records += pieces;
        return 0;
}

/* Gathers the engine's step w->step into slot w->sl (the slot's metadata too). */
void zr_fill(zr_loader *l, const work *w, fill_result *res) {
        slot *sl = w->sl;
        uint64_t slot_off = (uint64_t)sl->index * sl->r->slot_bytes;
        uint8_t *base = (uint8_t *)sl->r->shm.data + slot_off;
        step_records rec;
        zr_error err = {0};
        uint64_t t0 = w->timed ? zr_loader_now_ns() : 0;
        int r;

        if (w->io_error) {
                /* its reads ahead failed: the device would fail the gather too,
                 * through a page fault the daemon must never take */
                fill_fail(res, zr_error_set(&err, w->io_error, "reading step %" PRIu64
                                            " ahead: %s", zr_loader_step(l, w->step),
                                            strerror(w->io_error)),
                          &err);
                return;
        }
        if (zr_step_records_init(l, &rec) < 0) {
                fill_fail(res, zr_error_errno(&err, ENOMEM, "the records of step %" PRIu64,
                                              zr_loader_step(l, w->step)), &err);
                return;
        }
        zr_ring_populate(l->e, sl);
        if (l->streams[0].pack && l->mix) {
                /* a packed mixture: each row's source and its draw there, its
                 * row in its source's packed stream */
                uint32_t *src32 = rec.from; /* room for max(B, K) + K + 1 */
                r = zr_mixture_draws(l->mix, zr_loader_step(l, w->step), l->sp.rank, src32,
                                     sl->indices, &err);
                for (uint64_t j = 0; r >= 0 && j < l->sp.batch_size; j++)
                        sl->sources[j] = (uint8_t)src32[j];
        } else if (l->streams[0].pack) {
                /* a packed loader's "indices": its rows' global numbers (pack.h) */
                uint64_t g0 = (zr_loader_step(l, w->step) * l->sp.world_size + l->sp.rank) *
                              l->sp.batch_size;
                for (uint64_t j = 0; j < l->sp.batch_size; j++)
                        sl->indices[j] = g0 + j;
                r = 0;
        } else {
                r = zr_step_records_get(l, w->step, &rec, 0, &err);
        }
        if (r >= 0 && !l->streams[0].pack) {
                memcpy(sl->indices, rec.idx, l->sp.batch_size * sizeof(*sl->indices));
                if (sl->sources)
                        memcpy(sl->sources, rec.src, l->sp.batch_size);
        }
        res->times.detail = w->detail;
        for (size_t i = 0; r >= 0 && i < l->nstreams; i++) {
                if (atomic_load(&sl->cancel)) {
                        r = zr_error_set(&err, ECANCELED, "cancelled: the loader closed");
                        break;
                }
                if (loader_stream(l, 0, i)->pack)
                        r = pack_stream(l, i, base, slot_off, w, &sl->sb[i], res, &err);
                else
                        r = gather_stream(l, i, &rec, base, slot_off, w,
                                          w->timed ? &res->times : NULL, &sl->sb[i], res, &err);
        }
        zr_step_records_free(&rec);
        if (w->timed)
                res->fill_ns = zr_loader_now_ns() - t0;
        if (r == -EBUSY)
                res->busy = 1;
        else if (r < 0)
                fill_fail(res, r, &err);
}
