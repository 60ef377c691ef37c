/* ring.c: rings (loader-private.h): the memfd of a loader's slots with each
 * slot's batch metadata, the pre-faulting of a slot before its first fill,
 * and spare rings made ahead for the next loader of the same size.
 *
 * A ring is made lazily (util/shm.h, ZR_SHM_LAZY): opening a loader costs the
 * loop thread no page faults, a slot's pages are faulted in on the workers just
 * before its first fill, and a slot never filled costs no memory. A spare is
 * made on the pool, pre-faulted whole, once a closed loader's ring retired, so
 * that a resumed run's first batch costs one gather and no fault
 * (zr_loader_engine_set_spare_bytes()).
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <sys/mman.h>

#include "dataset/ragged.h"
#include "loader/loader-private.h"
#include "zr-proto.h"

/* Bytes per shard when a slot is pre-faulted: big enough that a shard's
 * madvise() is not dominated by its call, small enough to spread one 64 MiB
 * slot over every core. */
#define LOADER_POPULATE_SHARD (4u << 20)

/* Spare rings kept at most, whatever the budget: each is a descriptor and a
 * mapping of the daemon, and a run resumes with the geometry of one of the
 * last few loaders closed (older spares go first). */
#define LOADER_SPARES_MAX 4

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23 /* Linux 5.14 */
#endif

typedef struct populate_job {
        uint8_t *base;
        size_t bytes;
} populate_job;

/* Shard: faults in its part of a slot (all of the slot's pages are fresh). */
static void populate_shard(void *arg, size_t shard, size_t nshards) {
        populate_job *j = arg;
        size_t pages = j->bytes / ZR_SHM_ALIGN;
        size_t lo = pages * shard / nshards, hi = pages * (shard + 1) / nshards;
        uint8_t *p = j->base + lo * ZR_SHM_ALIGN;

        if (hi <= lo)
                return;
        if (madvise(p, (hi - lo) * ZR_SHM_ALIGN, MADV_POPULATE_WRITE) == 0)
                return;
        for (size_t k = lo; k < hi; k++) /* an older kernel: touch each page */
                ((volatile uint8_t *)j->base)[k * ZR_SHM_ALIGN] = 0;
}

/* Pre-faults slot sl before its first fill, on the workers, so that opening a
 * loader costs the loop thread no page faults and a fill writes into present
 * pages (a fresh shared page costs 1.7 to 5 us to fault on these VMs: 29 to
 * 80 ms per 64 MiB, measured, whether by MAP_POPULATE, MADV_POPULATE_WRITE or
 * touching; the steady state then costs none). Slots that are never filled
 * are never faulted in: they cost no memory. */
void zr_ring_populate(zr_loader_engine *e, slot *sl) {
        const ring *r = sl->r;
        populate_job j = { .base = (uint8_t *)r->shm.data + (uint64_t)sl->index * r->slot_bytes,
                           .bytes = r->slot_bytes };

        if (sl->populated)
                return;
        zr_pool_parallel(e->pool, zr_pool_shards(e->pool, (r->slot_bytes +
                                                            LOADER_POPULATE_SHARD - 1) /
                                                                   LOADER_POPULATE_SHARD),
                         populate_shard, &j);
        sl->populated = 1;
}

/* Releases spares (the list given) outside the engine mutex. */
void zr_spares_release(spare *list) {
        while (list) {
                spare *next = list->next;
                zr_shm_release(&list->shm);
                free(list);
                list = next;
        }
}

/* Takes a spare ring of exactly `bytes` into *ret. Returns 1, or 0 if none. */
static int spare_take(zr_loader_engine *e, size_t bytes, zr_shm *ret) {
        spare *sp = NULL;

        pthread_mutex_lock(&e->mutex);
        for (spare **pp = &e->spares; *pp; pp = &(*pp)->next) {
                if ((*pp)->shm.size == bytes) {
                        sp = *pp;
                        *pp = sp->next;
                        e->spare_ready -= bytes;
                        e->nspares--;
                        e->spare_reserved -= bytes;
                        break;
                }
        }
        pthread_mutex_unlock(&e->mutex);
        if (!sp)
                return 0;
        *ret = sp->shm;
        free(sp);
        return 1;
}

/* Creates a ring's memfd: sealed as every daemon-made region, but not
 * pre-faulted here: zr_ring_populate() does that per slot on a worker (see there). */
static int ring_create(zr_shm *ret, size_t bytes, zr_error *err) {
        return zr_shm_create_flags("zrecord-ring", bytes, ZR_SHM_LAZY, ret, err);
}

void zr_ring_release(ring *r) {
        if (!r)
                return;
        if (r->slots)
                for (uint32_t k = 0; k < r->nslots; k++)
                        free(r->slots[k].sb);
        free(r->slots);
        free(r->meta);
        zr_shm_release(&r->shm);
        free(r);
}

/* Releases a list of rings (outside the engine mutex: munmap can take long). */
void zr_rings_release(ring *list) {
        while (list) {
                ring *next = list->next;
                zr_ring_release(list);
                list = next;
        }
}

/* Makes l's ring: nslots slots of slot_bytes, each with its batch metadata
 * (indices; a mixture's sources; ragged offsets, lengths, shapes), in one
 * block. */
int zr_ring_new(zr_loader *l, zr_error *err) {
        uint64_t B = l->sp.batch_size, per_slot = B, meta_words;
        uint64_t src_words = l->mix ? (B + 7) / 8 : 0; /* a mixture's sources, bytes */
        uint64_t *m;
        ring *r;
        int res;

        for (size_t i = 0; i < l->nstreams; i++)
                if (l->streams[i].ragged)
                        per_slot += 2 * B + zr_ragged_shape_words_max(l->streams[i].schema, B);
        per_slot += src_words;
        if (per_slot > (SIZE_MAX / 16) / l->nslots)
                return zr_error_set(err, EOVERFLOW, "batch metadata does not fit in memory");
        meta_words = per_slot * l->nslots;
        r = calloc(1, sizeof(*r));
        if (!r)
                return zr_error_errno(err, ENOMEM, "loader ring");
        r->shm.fd = -1;
        r->nslots = l->nslots;
        r->slot_bytes = l->slot_bytes;
        r->owner = l;
        r->meta = calloc(meta_words ? meta_words : 1, sizeof(uint64_t));
        r->slots = calloc(l->nslots, sizeof(slot));
        if (!r->meta || !r->slots) {
                res = zr_error_errno(err, ENOMEM, "loader metadata");
                goto fail;
        }
        m = r->meta;
        for (uint32_t k = 0; k < r->nslots; k++) {
                slot *sl = &r->slots[k];
                sl->r = r;
                sl->index = k;
                sl->sb = calloc(l->nstreams, sizeof(*sl->sb));
                if (!sl->sb) {
                        res = zr_error_errno(err, ENOMEM, "loader metadata");
                        goto fail;
                }
                sl->indices = m;
                m += B;
                if (src_words) {
                        sl->sources = (uint8_t *)m;
                        m += src_words;
                }
                for (size_t i = 0; i < l->nstreams; i++) {
                        lstream *st = &l->streams[i];
                        if (!st->ragged)
                                continue;
                        sl->sb[i].ndim = st->schema->ndim;
                        sl->sb[i].offsets = m;
                        m += B;
                        sl->sb[i].lengths = m;
                        m += B;
                        sl->sb[i].shapes = m;
                        m += zr_ragged_shape_words_max(st->schema, B);
                }
        }
        if (spare_take(l->e, l->slot_bytes * l->nslots, &r->shm)) {
                for (uint32_t k = 0; k < r->nslots; k++)
                        r->slots[k].populated = 1;
        } else {
                res = ring_create(&r->shm, l->slot_bytes * l->nslots, err);
                if (res < 0)
                        goto fail;
        }
        l->own = r;
        return 0;
fail:
        zr_ring_release(r);
        return res;
}

typedef struct spare_job {
        zr_loader_engine *e;
        size_t bytes;
} spare_job;

/* Pool task: makes one spare ring of j->bytes (reserved by the caller),
 * pre-faulted whole, and publishes it. */
static void spare_task(void *arg) {
        spare_job *j = arg;
        zr_loader_engine *e = j->e;
        spare *sp = calloc(1, sizeof(*sp));
        int ok = 0;

        if (sp && ring_create(&sp->shm, j->bytes, NULL) == 0) {
                populate_job pj = { .base = sp->shm.data, .bytes = j->bytes };
                zr_pool_parallel(e->pool, zr_pool_shards(e->pool, (j->bytes +
                                                                    LOADER_POPULATE_SHARD - 1) /
                                                                           LOADER_POPULATE_SHARD),
                                 populate_shard, &pj);
                ok = 1;
        }
        spare *evicted = NULL;

        pthread_mutex_lock(&e->mutex);
        if (ok && e->spare_reserved <= e->spare_max) {
                sp->next = e->spares;
                e->spares = sp;
                e->spare_ready += j->bytes;
                e->nspares++;
                sp = NULL;
                if (e->nspares > LOADER_SPARES_MAX) {
                        /* the oldest goes: the list is newest first */
                        spare **pp = &e->spares;
                        while ((*pp)->next)
                                pp = &(*pp)->next;
                        evicted = *pp;
                        *pp = NULL;
                        e->spare_ready -= evicted->shm.size;
                        e->spare_reserved -= evicted->shm.size;
                        e->nspares--;
                }
        } else {
                e->spare_reserved -= j->bytes;
        }
        e->nspare_tasks--;
        pthread_cond_broadcast(&e->idle);
        pthread_mutex_unlock(&e->mutex);
        if (sp) {
                zr_shm_release(&sp->shm);
                free(sp);
        }
        zr_spares_release(evicted);
        free(j);
        if (ok && e->notify)
                e->notify(e->notify_userdata);
}

/* Engine mutex held: starts making a spare of `bytes` if the budget allows. */
void zr_spare_make(zr_loader_engine *e, size_t bytes) {
        spare_job *j;

        if (e->spare_reserved + bytes > e->spare_max)
                return;
        j = malloc(sizeof(*j));
        if (!j)
                return;
        *j = (spare_job){ e, bytes };
        e->spare_reserved += bytes;
        e->nspare_tasks++;
        if (zr_pool_try_submit(e->pool, spare_task, j) < 0) {
                e->spare_reserved -= bytes;
                e->nspare_tasks--;
                free(j);
        }
}

void zr_loader_engine_set_spare_bytes(zr_loader_engine *e, uint64_t bytes) {
        spare *drop = NULL;

        pthread_mutex_lock(&e->mutex);
        e->spare_max = bytes;
        while (e->spares && e->spare_reserved > e->spare_max) {
                spare *sp = e->spares;
                e->spares = sp->next;
                e->spare_ready -= sp->shm.size;
                e->nspares--;
                e->spare_reserved -= sp->shm.size;
                sp->next = drop;
                drop = sp;
        }
        pthread_mutex_unlock(&e->mutex);
        zr_spares_release(drop);
}
