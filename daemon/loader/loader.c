/* loader.c: the loader engine and its loaders (see loader.h for the model,
 * the threads, what is shared and the lock order).
 *
 * The engine's mutex guards every piece of scheduling state: the run queue
 * (loaders with a free slot and a step to fill), the ready queue (loaders with
 * an event to collect), the groups, each loader's slot states, steps, end and
 * counters. Pool workers run drain tasks that claim one (loader, slot, step)
 * at a time under the mutex and fill it without the mutex; the loop thread
 * polls, releases, opens and frees. A fill never touches a slot it did not
 * claim, except to read a group member's slot that it pinned. A fill never
 * blocks on anything but the pool: stream locks are only tried (a busy one
 * parks the fill with its claim), and a member that needs a step another member
 * is filling leaves the run queue until that fill completes.
 *
 * It assumes the daemon keeps each stream's dataset, lock and generation alive
 * for the loader's lifetime, bumps the generation under the exclusive lock on
 * every mutation, and calls zr_loader_engine_resume() (or _drop_dataset())
 * after releasing an exclusive lock. It does not know about sockets, messages
 * or handles; it does not limit how many loaders exist (the daemon's limits
 * do); it shares worker time per batch, not per byte (a loader of big batches
 * gets more time per turn than one of small batches).
 */
#include "loader/loader.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "dataset/ragged.h"
#include "loader/cache.h"
#include "store/store.h"
#include "util/shm.h"
#include "zr-proto.h"

/* Records sampled (evenly spaced) to estimate a ragged stream's mean record
 * size for its default capacity: at most 256 preads of 16 bytes at open,
 * whatever the length, and close enough for a 2x margin. */
#define LOADER_CAPACITY_SAMPLE 256
/* Default ragged capacity is this many times batch_size × the mean record. */
#define LOADER_CAPACITY_FACTOR 2
/* Bytes per shard when a slot is pre-faulted: big enough that a shard's
 * madvise() is not dominated by its call, small enough to spread one 64 MiB
 * slot over every core. */
#define LOADER_POPULATE_SHARD (4u << 20)

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23 /* Linux 5.14 */
#endif
#ifndef F_SEAL_FUTURE_WRITE
#define F_SEAL_FUTURE_WRITE 0x0010 /* Linux 5.1 */
#endif

/* While a gather is parked on a stream's lock (a mutation holds it), the
 * engine's retry thread retries every parked gather this often. A mutation
 * holds a lock for milliseconds (a delete) to seconds (a compaction); a retry
 * costs one trylock per parked fill, and a loader waits at most this long
 * after the lock goes (zr_loader_engine_resume() makes it immediate). */
#define LOADER_PARK_RETRY_NS (2 * 1000 * 1000)

/* Records per shard of the parallel copy of cache hits and inserts: enough to
 * amortise a shard's hand-off, few enough to spread a 256-record batch. */
#define LOADER_COPY_SHARD_MIN 8

enum slot_state {
        SLOT_FREE = 0,
        SLOT_FILLING,
        SLOT_READY,
        SLOT_HELD,
};

typedef struct lstream {
        zr_loader_stream s;
        char name[64];        /* for messages */
        const zr_schema *schema;
        int ragged;
        uint64_t item_bytes;  /* dense */
        uint64_t hdr_bytes;   /* ragged */
        uint64_t open_gen;
        uint64_t offset;      /* region offset inside a slot */
        uint64_t capacity;
        int cached;           /* compressed: decode through the cache */
} lstream;

/* A claimed piece of work: fill `slot` of `l` with `step`, from `src` if set. */
typedef struct work {
        zr_loader *l;
        uint32_t slot;
        uint64_t step;
        zr_loader *src;
        uint32_t src_slot;
} work;

/* A gather that found a stream's lock taken exclusive (a mutation in
 * progress): it keeps its claim and waits here, holding no worker, until
 * resume_parked(). One node per slot, allocated with the loader. */
typedef struct parked_work {
        struct parked_work *next;
        work w;
} parked_work;

typedef struct slot {
        enum slot_state state;
        uint64_t step;        /* the step it holds (has_content) or is being filled with */
        int has_content;      /* holds the complete batch of `step` */
        int gathering;        /* FILLING by a gather (not a copy) */
        int populated;        /* its pages are faulted in (only its filler reads this) */
        unsigned pins;        /* group members copying from it */
        uint64_t *indices;    /* batch_size */
        zr_loader_stream_batch *sb; /* nstreams */
        parked_work park;     /* its fill, while parked */
} slot;

/* A ring made ahead, never passed to anyone, pre-faulted whole. */
typedef struct spare {
        struct spare *next;
        zr_shm shm;
} spare;

typedef struct group {
        struct group *next;
        zr_loader *members;   /* linked by zr_loader.g_next */
        size_t nmembers;
} group;

struct zr_loader {
        zr_loader_engine *e;
        void *userdata;
        size_t nstreams;
        lstream *streams;
        zr_sampler_params sp; /* step is set per gather */
        uint64_t start;       /* start step */
        uint64_t length;
        uint32_t nslots;
        uint64_t slot_bytes;
        zr_shm ring;
        slot *slots;
        void *meta;           /* one allocation for every slot's arrays */

        /* progress, as offsets from `start` */
        uint64_t fill_k;      /* next step to claim */
        uint64_t ann_k;       /* next step to announce */
        uint64_t end_k;       /* END comes after ann_k reaches it */
        int end_decided;      /* an error or a stop set end_k (else: domain end) */
        int end_reachable;    /* end_k is meaningful (not start 0's 2^64) */
        int end_delivered;
        int end_code;
        uint64_t end_needed;
        char end_msg[ZR_ERROR_MESSAGE_MAX];

        unsigned inflight;    /* fills claimed and not completed */
        int closing;
        int in_runq, in_readyq;
        zr_loader *run_prev, *run_next;
        zr_loader *ready_next;
        group *g;
        zr_loader *g_next;
        zr_loader_counters c;
};

struct zr_loader_engine {
        pthread_mutex_t mutex;
        pthread_cond_t idle;  /* a fill completed, a pin dropped or a drain task ended */
        pthread_cond_t parked_cond; /* a fill was parked, or stopping */
        pthread_t retry_thread;
        int stopping;
        zr_pool *pool;
        zr_rcache *cache;
        zr_loader_notify_fn notify;
        void *notify_userdata;
        unsigned ndrain, drain_max;
        int kick_pending;
        zr_loader *run_head, *run_tail;
        zr_loader *ready_head, *ready_tail;
        parked_work *parked;  /* gathers waiting for a stream's lock */
        parked_work *resume;  /* parked gathers to retry, before new claims */
        group *groups;
        spare *spares;        /* ready spare rings */
        uint64_t spare_max;   /* budget of spare rings, bytes */
        uint64_t spare_reserved; /* ready and being made */
        uint64_t spare_ready;
        unsigned nspare_tasks;
        uint64_t nloaders;
        uint64_t fills;       /* fills completed, all loaders */
        zr_loader_engine_counters t;
};

/* The result of a fill. */
typedef struct fill_result {
        int code;             /* 0 or positive */
        int busy;             /* a stream's lock was taken exclusive: park */
        uint64_t needed;
        char msg[ZR_ERROR_MESSAGE_MAX];
        uint64_t hits, misses, bytes, evictions;
} fill_result;

static uint64_t align_up(uint64_t v, uint64_t a) {
        return (v + a - 1) / a * a;
}

static void spares_release(spare *list);

/* ---- queues (engine mutex held) --------------------------------------------- */

static void runq_remove(zr_loader_engine *e, zr_loader *l) {
        if (!l->in_runq)
                return;
        if (l->run_prev)
                l->run_prev->run_next = l->run_next;
        else
                e->run_head = l->run_next;
        if (l->run_next)
                l->run_next->run_prev = l->run_prev;
        else
                e->run_tail = l->run_prev;
        l->run_prev = l->run_next = NULL;
        l->in_runq = 0;
}

static zr_loader *runq_pop(zr_loader_engine *e) {
        zr_loader *l = e->run_head;
        if (l)
                runq_remove(e, l);
        return l;
}

/* A free, unpinned slot to refill: one that holds nothing, else the one with
 * the oldest batch: group members behind this loader all still need its newer
 * batches, only the slowest of them needs the oldest one. */
static int free_slot(const zr_loader *l) {
        int best = -1;

        for (uint32_t i = 0; i < l->nslots; i++) {
                const slot *s = &l->slots[i];
                if (s->state != SLOT_FREE || s->pins > 0)
                        continue;
                if (!s->has_content)
                        return (int)i;
                if (best < 0 || s->step < l->slots[best].step)
                        best = (int)i;
        }
        return best;
}

static int runnable(const zr_loader *l) {
        if (l->closing || (l->end_reachable && l->fill_k >= l->end_k))
                return 0;
        /* a new loader's first batch is filled alone, so it gets every core
         * (its shards) and arrives after one slot's fill, not two */
        if (l->inflight > 0 && l->c.gathers + l->c.shared == 0)
                return 0;
        return free_slot(l) >= 0;
}

static void kick(zr_loader_engine *e);

/* Puts l at the tail of the run queue if it has work and is not queued. */
static void maybe_run(zr_loader_engine *e, zr_loader *l) {
        if (l->in_runq || !runnable(l))
                return;
        l->run_prev = e->run_tail;
        l->run_next = NULL;
        if (e->run_tail)
                e->run_tail->run_next = l;
        else
                e->run_head = l;
        e->run_tail = l;
        l->in_runq = 1;
        kick(e);
}

static slot *announce_slot(zr_loader *l) {
        uint64_t step = l->start + l->ann_k;

        if (l->end_reachable && l->ann_k >= l->end_k)
                return NULL;
        for (uint32_t i = 0; i < l->nslots; i++)
                if (l->slots[i].state == SLOT_READY && l->slots[i].step == step)
                        return &l->slots[i];
        return NULL;
}

static int has_event(zr_loader *l) {
        if (l->closing || l->end_delivered)
                return 0;
        if (announce_slot(l))
                return 1;
        return l->end_reachable && l->ann_k == l->end_k;
}

/* Queues l for collection if it has an event. Returns 1 if notify is due. */
static int maybe_ready(zr_loader_engine *e, zr_loader *l) {
        if (l->in_readyq || !has_event(l))
                return 0;
        l->ready_next = NULL;
        if (e->ready_tail)
                e->ready_tail->ready_next = l;
        else
                e->ready_head = l;
        e->ready_tail = l;
        l->in_readyq = 1;
        return 1;
}

static void readyq_remove(zr_loader_engine *e, zr_loader *l) {
        zr_loader *prev = NULL;

        if (!l->in_readyq)
                return;
        for (zr_loader *p = e->ready_head; p; prev = p, p = p->ready_next) {
                if (p != l)
                        continue;
                if (prev)
                        prev->ready_next = l->ready_next;
                else
                        e->ready_head = l->ready_next;
                if (e->ready_tail == l)
                        e->ready_tail = prev;
                break;
        }
        l->ready_next = NULL;
        l->in_readyq = 0;
}

/* Decides the end at step offset k (the earliest wins). */
static void set_end(zr_loader *l, uint64_t k, int code, uint64_t needed, const char *msg) {
        if (l->end_decided && l->end_reachable && l->end_k <= k)
                return;
        if (l->end_reachable && !l->end_decided && l->end_k < k)
                return; /* the domain ends first */
        l->end_k = k;
        l->end_reachable = 1;
        l->end_decided = 1;
        l->end_code = code;
        l->end_needed = needed;
        snprintf(l->end_msg, sizeof(l->end_msg), "%s", msg);
}

/* ---- drain tasks ------------------------------------------------------------ */

static void drain_task(void *arg);

/* Starts a drain task if work is queued and fewer than drain_max run. */
static void kick(zr_loader_engine *e) {
        if ((!e->run_head && !e->resume) || e->ndrain >= e->drain_max)
                return;
        e->ndrain++;
        if (zr_pool_try_submit(e->pool, drain_task, e) < 0) {
                e->ndrain--;
                e->kick_pending = 1;
                return;
        }
        e->kick_pending = 0;
}

/* Engine mutex held: retries every parked gather. Called every
 * LOADER_PARK_RETRY_NS by the retry thread while anything is parked, and at
 * once on events that may follow the end of a mutation
 * (zr_loader_engine_resume(), a release, a collection); never on a park
 * itself, so a lock held for long costs no spin. */
static void resume_parked(zr_loader_engine *e) {
        while (e->parked) {
                parked_work *p = e->parked;
                e->parked = p->next;
                p->next = e->resume;
                e->resume = p;
        }
        kick(e);
}

/* Finds a group member's slot that holds or is filling `step`. Returns 1 and
 * the source (content ready), 2 if one is being filled (wait), 0 if none. */
static int group_find(zr_loader *l, uint64_t step, zr_loader **ret_src, uint32_t *ret_slot) {
        if (!l->g)
                return 0;
        int pending = 0;
        for (zr_loader *m = l->g->members; m; m = m->g_next) {
                if (m == l || m->closing)
                        continue;
                for (uint32_t i = 0; i < m->nslots; i++) {
                        slot *s = &m->slots[i];
                        if (s->step != step)
                                continue;
                        if (s->has_content) {
                                *ret_src = m;
                                *ret_slot = i;
                                return 1;
                        }
                        if (s->state == SLOT_FILLING)
                                pending = 1;
                }
        }
        return pending ? 2 : 0;
}

/* Claims the next step of l into *w. Returns 1, or 0 if l has nothing to do now
 * (or waits for a group member's fill of the same step). */
static int claim(zr_loader_engine *e, zr_loader *l, work *w) {
        uint64_t step;
        int k, r;

        if (!runnable(l))
                return 0;
        step = l->start + l->fill_k;
        *w = (work){ .l = l, .step = step };
        r = group_find(l, step, &w->src, &w->src_slot);
        if (r == 2)
                return 0; /* requeued when that fill completes */
        k = free_slot(l);
        w->slot = (uint32_t)k;
        l->slots[k].state = SLOT_FILLING;
        l->slots[k].step = step;
        l->slots[k].has_content = 0;
        l->slots[k].gathering = (r == 0);
        if (r == 1)
                w->src->slots[w->src_slot].pins++;
        l->fill_k++;
        l->inflight++;
        maybe_run(e, l);
        return 1;
}

static void fill_fail(fill_result *res, int r, const zr_error *err) {
        res->code = r < 0 ? -r : r;
        snprintf(res->msg, sizeof(res->msg), "%s", err->message[0] ? err->message : "failed");
}

typedef struct copy_job {
        zr_rcache *cache;
        const zr_rcache_key *keys;
        zr_rcache_entry **hits;
        uint8_t *const *dsts;
        const zr_loc *locs;
        size_t n;
        _Atomic uint64_t evictions;
} copy_job;

/* Shard: copies cache hits into the ring, inserts decoded misses into the cache. */
static void copy_shard(void *arg, size_t shard, size_t nshards) {
        copy_job *j = arg;
        size_t lo = j->n * shard / nshards, hi = j->n * (shard + 1) / nshards;
        uint64_t ev = 0;

        for (size_t i = lo; i < hi; i++) {
                if (j->hits[i])
                        memcpy(j->dsts[i], zr_rcache_entry_data(j->hits[i]),
                               j->locs[i].logic_length);
                else
                        ev += zr_rcache_insert(j->cache, &j->keys[i], j->dsts[i],
                                               j->locs[i].logic_length);
        }
        atomic_fetch_add(&j->evictions, ev);
}

/* Gathers stream `si` of the batch idx[0..B) into its region of `base` (the
 * slot), filling the slot's metadata. Takes the stream's lock shared. */
static int gather_stream(zr_loader *l, size_t si, const uint64_t *idx, uint8_t *base,
                         uint64_t slot_off, zr_loader_stream_batch *sb, fill_result *res,
                         zr_error *err) {
        lstream *st = &l->streams[si];
        zr_store *store = zr_dataset_store(st->s.ds);
        uint64_t B = l->sp.batch_size, used = 0;
        uint8_t *region = base + st->offset;
        zr_loc *locs = NULL;
        uint8_t **dsts = NULL;
        zr_rcache_key *keys = NULL;
        zr_rcache_entry **hits = NULL;
        uint64_t *offs = (uint64_t *)sb->offsets; /* the slot's own arrays */
        zr_loc *mlocs = NULL;
        void **mdsts = NULL;
        size_t nhits = 0;
        int r, locked = 0;

        locs = malloc(B * sizeof(*locs));
        dsts = malloc(B * sizeof(*dsts));
        if (!locs || !dsts) {
                r = zr_error_errno(err, ENOMEM, "gathering a batch of %" PRIu64, B);
                goto out;
        }
        if (atomic_load(st->s.generation) == st->open_gen) {
                if (pthread_rwlock_tryrdlock(st->s.lock) != 0) {
                        /* a mutation holds it: do not block a worker for its
                         * duration (the work is parked, see complete()) */
                        r = -EBUSY;
                        goto out;
                }
                locked = 1;
        }
        if (atomic_load(st->s.generation) != st->open_gen) {
                r = zr_error_set(err, ZR_E_STALE, "%s changed under the loader (appended to, "
                                 "deleted from or compacted)", st->name);
                goto out;
        }
        r = zr_store_locate(store, idx, B, locs, err);
        if (r < 0)
                goto out;
        for (uint64_t i = 0; i < B; i++) {
                if (!st->ragged) {
                        if (locs[i].logic_length != st->item_bytes) {
                                r = zr_error_set(err, ZR_E_CORRUPT, "%s: record %" PRIu64 " is "
                                                 "%u bytes, an item is %" PRIu64, st->name,
                                                 idx[i], locs[i].logic_length, st->item_bytes);
                                goto out;
                        }
                        dsts[i] = region + i * st->item_bytes;
                        used += st->item_bytes;
                        continue;
                }
                if (locs[i].logic_length < st->hdr_bytes) {
                        r = zr_error_set(err, ZR_E_CORRUPT, "%s: record %" PRIu64 " is shorter "
                                         "than its shape header", st->name, idx[i]);
                        goto out;
                }
                used = align_up(used, ZR_RECORD_ALIGN);
                offs[i] = used; /* relative to the region for now */
                used += locs[i].logic_length;
        }
        if (used > st->capacity) {
                res->needed = used;
                r = zr_error_set(err, ZR_E_BUFFER, "%s: the batch needs %" PRIu64 " bytes, the "
                                 "stream's capacity is %" PRIu64 "; reopen with a larger capacity",
                                 st->name, used, st->capacity);
                goto out;
        }
        if (st->ragged) {
                /* zero the alignment padding, so a slot's bytes are a function of
                 * the step alone (no leftovers of an earlier batch) */
                for (uint64_t i = 0; i < B; i++) {
                        uint64_t end = offs[i] + locs[i].logic_length;
                        dsts[i] = region + offs[i];
                        if (i + 1 < B && offs[i + 1] > end)
                                memset(region + end, 0, offs[i + 1] - end);
                }
        }

        if (!st->cached) {
                r = zr_store_gather_locs(store, locs, B, (void *const *)dsts, err);
                if (r < 0)
                        goto out;
        } else {
                size_t nm = 0;
                keys = malloc(B * sizeof(*keys));
                hits = malloc(B * sizeof(*hits));
                mlocs = malloc(B * sizeof(*mlocs));
                mdsts = malloc(B * sizeof(*mdsts));
                if (!keys || !hits || !mlocs || !mdsts) {
                        r = zr_error_errno(err, ENOMEM, "gathering a batch of %" PRIu64, B);
                        goto out;
                }
                for (uint64_t i = 0; i < B; i++)
                        keys[i] = (zr_rcache_key){ st->s.dataset_id, st->open_gen, idx[i] };
                nhits = zr_rcache_lookup(l->e->cache, keys, B, hits);
                for (uint64_t i = 0; i < B; i++) {
                        if (hits[i] && zr_rcache_entry_len(hits[i]) != locs[i].logic_length) {
                                /* cannot happen for an immutable key; decode instead */
                                zr_rcache_unpin(l->e->cache, hits[i]);
                                hits[i] = NULL;
                                nhits--;
                        }
                        if (!hits[i]) {
                                mlocs[nm] = locs[i];
                                mdsts[nm++] = dsts[i];
                        }
                }
                res->hits += nhits;
                res->misses += nm;
                r = zr_store_gather_locs(store, mlocs, nm, mdsts, err);
                if (r >= 0) {
                        copy_job j = { .cache = l->e->cache, .keys = keys, .hits = hits,
                                       .dsts = dsts, .locs = locs, .n = B };
                        size_t sh = zr_pool_shards(l->e->pool, (B + LOADER_COPY_SHARD_MIN - 1) /
                                                               LOADER_COPY_SHARD_MIN);
                        zr_pool_parallel(l->e->pool, sh, copy_shard, &j);
                        res->evictions += atomic_load(&j.evictions);
                }
                for (uint64_t i = 0; i < B; i++)
                        zr_rcache_unpin(l->e->cache, hits[i]);
                if (r < 0)
                        goto out;
        }
        if (atomic_load(st->s.generation) != st->open_gen) {
                r = zr_error_set(err, ZR_E_STALE, "%s changed under the loader during a gather",
                                 st->name);
                goto out;
        }
        pthread_rwlock_unlock(st->s.lock);
        locked = 0;

        sb->offset = slot_off + st->offset;
        sb->bytes = used;
        if (st->ragged) {
                uint64_t *shapes = (uint64_t *)sb->shapes, *lengths = (uint64_t *)sb->lengths;
                for (uint64_t i = 0; i < B; i++) {
                        zr_error perr = {0};
                        r = zr_ragged_parse(st->schema, dsts[i], locs[i].logic_length, idx[i],
                                            shapes + i * st->schema->ndim, &perr);
                        if (r < 0) {
                                r = zr_error_set(err, ZR_E_CORRUPT, "%s: stored %s", st->name,
                                                 perr.message);
                                goto out;
                        }
                        offs[i] = sb->offset + offs[i] + st->hdr_bytes;
                        lengths[i] = locs[i].logic_length - st->hdr_bytes;
                }
        }
        res->bytes += used;
        r = 0;
out:
        if (locked)
                pthread_rwlock_unlock(st->s.lock);
        free(mdsts);
        free(mlocs);
        free(hits);
        free(keys);
        free(dsts);
        free(locs);
        return r;
}

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

/* Pre-faults slot k before its first fill, on the workers, so that opening a
 * loader costs the loop thread no page faults and a fill writes into present
 * pages (a fresh shared page costs 1.7 to 5 us to fault on these VMs: 29 to
 * 80 ms per 64 MiB, measured, whether by MAP_POPULATE, MADV_POPULATE_WRITE or
 * touching; the steady state then costs none). */
static void populate(zr_loader *l, uint32_t k) {
        slot *s = &l->slots[k];
        populate_job j = { .base = (uint8_t *)l->ring.data + (uint64_t)k * l->slot_bytes,
                           .bytes = l->slot_bytes };

        if (s->populated)
                return;
        zr_pool_parallel(l->e->pool, zr_pool_shards(l->e->pool, (l->slot_bytes +
                                                                  LOADER_POPULATE_SHARD - 1) /
                                                                         LOADER_POPULATE_SHARD),
                         populate_shard, &j);
        s->populated = 1;
}

/* Gathers step w->step into w->slot. */
static void fill_gather(zr_loader *l, const work *w, fill_result *res) {
        slot *s = &l->slots[w->slot];
        uint64_t slot_off = (uint64_t)w->slot * l->slot_bytes;
        uint8_t *base = (uint8_t *)l->ring.data + slot_off;
        zr_sampler_params sp = l->sp;
        zr_error err = {0};
        int r;

        populate(l, w->slot);
        sp.step = w->step;
        r = zr_sampler_indices(&sp, s->indices, &err);
        for (size_t i = 0; r >= 0 && i < l->nstreams; i++)
                r = gather_stream(l, i, s->indices, base, slot_off, &s->sb[i], res, &err);
        if (r == -EBUSY)
                res->busy = 1;
        else if (r < 0)
                fill_fail(res, r, &err);
}

typedef struct memcpy_job {
        uint8_t *dst;
        const uint8_t *src;
        size_t bytes;
} memcpy_job;

static void memcpy_shard(void *arg, size_t shard, size_t nshards) {
        memcpy_job *j = arg;
        size_t lo = j->bytes * shard / nshards, hi = j->bytes * (shard + 1) / nshards;

        memcpy(j->dst + lo, j->src + lo, hi - lo);
}

/* memcpy() on every core, in shards of at least LOADER_POPULATE_SHARD bytes. */
static void parallel_memcpy(zr_pool *pool, void *dst, const void *src, size_t bytes) {
        memcpy_job j = { .dst = dst, .src = src, .bytes = bytes };

        zr_pool_parallel(pool, zr_pool_shards(pool, (bytes + LOADER_POPULATE_SHARD - 1) /
                                                            LOADER_POPULATE_SHARD),
                         memcpy_shard, &j);
}

/* Copies step w->step from the pinned group member's slot. The key of the group
 * guarantees the same batch; the copy checks staleness as a gather would. */
static void fill_copy(zr_loader *l, const work *w, fill_result *res) {
        zr_loader *m = w->src;
        slot *d = &l->slots[w->slot], *s = &m->slots[w->src_slot];
        uint64_t B = l->sp.batch_size;
        uint64_t doff = (uint64_t)w->slot * l->slot_bytes;
        zr_error err = {0};

        for (size_t i = 0; i < l->nstreams; i++) {
                if (atomic_load(l->streams[i].s.generation) != l->streams[i].open_gen) {
                        zr_error_set(&err, ZR_E_STALE, "%s changed under the loader (appended "
                                     "to, deleted from or compacted)", l->streams[i].name);
                        fill_fail(res, -ZR_E_STALE, &err);
                        return;
                }
        }
        populate(l, w->slot);
        memcpy(d->indices, s->indices, B * sizeof(uint64_t));
        for (size_t i = 0; i < l->nstreams; i++) {
                const lstream *st = &l->streams[i];
                const zr_loader_stream_batch *sb = &s->sb[i];
                zr_loader_stream_batch *db = &d->sb[i];
                if (sb->bytes > st->capacity) {
                        res->needed = sb->bytes;
                        zr_error_set(&err, ZR_E_BUFFER, "%s: the batch needs %" PRIu64 " bytes, "
                                     "the stream's capacity is %" PRIu64 "; reopen with a larger "
                                     "capacity", st->name, sb->bytes, st->capacity);
                        fill_fail(res, -ZR_E_BUFFER, &err);
                        return;
                }
                parallel_memcpy(l->e->pool, (uint8_t *)l->ring.data + doff + st->offset,
                                (const uint8_t *)m->ring.data + sb->offset, sb->bytes);
                db->offset = doff + st->offset;
                db->bytes = sb->bytes;
                if (st->ragged) {
                        uint64_t delta = db->offset - sb->offset; /* modular: may wrap */
                        for (uint64_t k = 0; k < B; k++)
                                ((uint64_t *)db->offsets)[k] = sb->offsets[k] + delta;
                        memcpy((void *)db->lengths, sb->lengths, B * sizeof(uint64_t));
                        memcpy((void *)db->shapes, sb->shapes,
                               B * st->schema->ndim * sizeof(uint64_t));
                }
                res->bytes += sb->bytes;
        }
}

/* Engine mutex held: applies a finished fill. Returns 1 if notify is due. */
static int complete(zr_loader_engine *e, const work *w, const fill_result *res) {
        zr_loader *l = w->l;
        slot *s = &l->slots[w->slot];
        uint64_t k = w->step - l->start;
        int notify;

        if (res->busy) {
                /* keep the claim (the slot stays FILLING, group members wait
                 * for it) and park the work until resume_parked() */
                s->park.w = *w;
                s->park.next = e->parked;
                e->parked = &s->park;
                pthread_cond_signal(&e->parked_cond);
                l->c.hits += res->hits;
                l->c.misses += res->misses;
                e->t.hits += res->hits;
                e->t.misses += res->misses;
                return 0;
        }
        if (w->src) {
                w->src->slots[w->src_slot].pins--;
                maybe_run(e, w->src);
        }
        l->inflight--;
        l->c.hits += res->hits;
        l->c.misses += res->misses;
        l->c.bytes += res->bytes;
        l->c.evictions += res->evictions;
        e->t.hits += res->hits;
        e->t.misses += res->misses;
        e->t.bytes += res->bytes;
        e->t.evictions += res->evictions;
        l->c.fill_seq = ++e->fills;
        if (w->src) {
                l->c.shared++;
                e->t.shared++;
        } else {
                l->c.gathers++;
                e->t.gathers++;
        }
        s->gathering = 0;
        if (res->code) {
                s->state = SLOT_FREE;
                s->has_content = 0;
                set_end(l, k, res->code, res->needed, res->msg);
        } else if (l->closing || (l->end_reachable && k >= l->end_k)) {
                s->state = SLOT_FREE; /* beyond the end: never announced */
                s->has_content = 1;
        } else {
                s->state = SLOT_READY;
                s->has_content = 1;
        }
        /* group members that waited for this step, and l itself */
        if (l->g)
                for (zr_loader *m = l->g->members; m; m = m->g_next)
                        maybe_run(e, m);
        maybe_run(e, l);
        notify = maybe_ready(e, l);
        pthread_cond_broadcast(&e->idle);
        return notify;
}

static void drain_task(void *arg) {
        zr_loader_engine *e = arg;
        zr_loader *l;

        pthread_mutex_lock(&e->mutex);
        for (;;) {
                fill_result res = {0};
                work w;
                if (e->resume) {
                        w = e->resume->w;
                        e->resume = e->resume->next;
                        l = w.l;
                } else if ((l = runq_pop(e))) {
                        if (!claim(e, l, &w))
                                continue;
                } else {
                        break;
                }
                pthread_mutex_unlock(&e->mutex);
                if (w.src)
                        fill_copy(l, &w, &res);
                else
                        fill_gather(l, &w, &res);
                pthread_mutex_lock(&e->mutex);
                if (complete(e, &w, &res) && e->notify) {
                        pthread_mutex_unlock(&e->mutex);
                        e->notify(e->notify_userdata);
                        pthread_mutex_lock(&e->mutex);
                }
        }
        e->ndrain--;
        pthread_cond_broadcast(&e->idle);
        pthread_mutex_unlock(&e->mutex);
}

/* ---- the engine ------------------------------------------------------------- */

/* The retry thread: sleeps until a fill is parked, then retries the parked
 * fills every LOADER_PARK_RETRY_NS until none is left. It takes only the
 * engine mutex and never waits on a stream's lock, so it holds no dataset
 * alive and delays no zr_loader_free(). */
static void *retry_main(void *arg) {
        zr_loader_engine *e = arg;

        pthread_mutex_lock(&e->mutex);
        while (!e->stopping) {
                struct timespec ts;
                if (!e->parked) {
                        pthread_cond_wait(&e->parked_cond, &e->mutex);
                        continue;
                }
                clock_gettime(CLOCK_MONOTONIC, &ts);
                ts.tv_nsec += LOADER_PARK_RETRY_NS;
                if (ts.tv_nsec >= 1000000000) {
                        ts.tv_sec++;
                        ts.tv_nsec -= 1000000000;
                }
                pthread_cond_timedwait(&e->parked_cond, &e->mutex, &ts);
                if (e->parked && !e->stopping)
                        resume_parked(e);
        }
        pthread_mutex_unlock(&e->mutex);
        return NULL;
}

int zr_loader_engine_new(zr_pool *pool, uint64_t cache_bytes, zr_loader_notify_fn notify,
                         void *notify_userdata, zr_loader_engine **ret, zr_error *err) {
        zr_loader_engine *e;
        int r;

        if (!pool || zr_pool_threads(pool) == 0)
                return zr_error_set(err, EINVAL, "the loader engine needs a pool with threads");
        e = calloc(1, sizeof(*e));
        if (!e)
                return zr_error_errno(err, ENOMEM, "loader engine");
        if (zr_rcache_new(cache_bytes, &e->cache) < 0) {
                free(e);
                return zr_error_errno(err, ENOMEM, "loader engine cache");
        }
        pthread_condattr_t ca;
        pthread_condattr_init(&ca);
        pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
        pthread_cond_init(&e->parked_cond, &ca);
        pthread_condattr_destroy(&ca);
        pthread_mutex_init(&e->mutex, NULL);
        pthread_cond_init(&e->idle, NULL);
        e->pool = pool;
        e->notify = notify;
        e->notify_userdata = notify_userdata;
        /* One whole-batch fill per pool thread keeps every core busy with work
         * that needs no hand-off; a fill's own shards (zr_pool_parallel) use
         * whatever is idle. More fills at once would only queue. */
        e->drain_max = (unsigned)zr_pool_threads(pool);
        r = pthread_create(&e->retry_thread, NULL, retry_main, e);
        if (r != 0) {
                pthread_cond_destroy(&e->parked_cond);
                pthread_cond_destroy(&e->idle);
                pthread_mutex_destroy(&e->mutex);
                zr_rcache_free(e->cache);
                free(e);
                return zr_error_errno(err, r, "starting the loader engine's retry thread");
        }
        *ret = e;
        return 0;
}

zr_loader_engine *zr_loader_engine_free(zr_loader_engine *e) {
        if (!e)
                return NULL;
        pthread_mutex_lock(&e->mutex);
        while (e->ndrain > 0 || e->nspare_tasks > 0)
                pthread_cond_wait(&e->idle, &e->mutex);
        e->stopping = 1;
        pthread_cond_signal(&e->parked_cond);
        pthread_mutex_unlock(&e->mutex);
        pthread_join(e->retry_thread, NULL);
        spares_release(e->spares);
        zr_rcache_free(e->cache);
        pthread_cond_destroy(&e->parked_cond);
        pthread_cond_destroy(&e->idle);
        pthread_mutex_destroy(&e->mutex);
        free(e);
        return NULL;
}

void zr_loader_engine_set_cache_bytes(zr_loader_engine *e, uint64_t cache_bytes) {
        uint64_t ev = zr_rcache_set_budget(e->cache, cache_bytes);

        pthread_mutex_lock(&e->mutex);
        e->t.evictions += ev;
        pthread_mutex_unlock(&e->mutex);
}

void zr_loader_engine_drop_dataset(zr_loader_engine *e, uint64_t dataset_id) {
        zr_rcache_drop(e->cache, dataset_id);
        pthread_mutex_lock(&e->mutex);
        resume_parked(e);
        pthread_mutex_unlock(&e->mutex);
}

void zr_loader_engine_resume(zr_loader_engine *e) {
        pthread_mutex_lock(&e->mutex);
        resume_parked(e);
        pthread_mutex_unlock(&e->mutex);
}

int zr_loader_engine_next(zr_loader_engine *e, zr_loader **ret) {
        zr_loader *l;

        pthread_mutex_lock(&e->mutex);
        if (e->parked)
                resume_parked(e);
        else if (e->kick_pending)
                kick(e);
        l = e->ready_head;
        if (l) {
                e->ready_head = l->ready_next;
                if (!e->ready_head)
                        e->ready_tail = NULL;
                l->ready_next = NULL;
                l->in_readyq = 0;
        }
        pthread_mutex_unlock(&e->mutex);
        if (!l)
                return 0;
        *ret = l;
        return 1;
}

void zr_loader_engine_counters_get(zr_loader_engine *e, zr_loader_engine_counters *ret) {
        zr_rcache_stats cs;

        zr_rcache_stats_get(e->cache, &cs);
        pthread_mutex_lock(&e->mutex);
        *ret = e->t;
        ret->loaders = e->nloaders;
        ret->spare_bytes = e->spare_ready;
        pthread_mutex_unlock(&e->mutex);
        ret->cache_budget = cs.budget;
        ret->cache_bytes = cs.bytes;
        ret->cache_entries = cs.entries;
}

/* ---- a loader --------------------------------------------------------------- */

static int same_key(const zr_loader *a, const zr_loader *b) {
        if (a->nstreams != b->nstreams || a->sp.mode != b->sp.mode || a->sp.seed != b->sp.seed ||
            a->sp.batch_size != b->sp.batch_size || a->sp.rank != b->sp.rank ||
            a->sp.world_size != b->sp.world_size || a->sp.n != b->sp.n)
                return 0;
        for (size_t i = 0; i < a->nstreams; i++)
                if (a->streams[i].s.dataset_id != b->streams[i].s.dataset_id ||
                    a->streams[i].open_gen != b->streams[i].open_gen)
                        return 0;
        return 1;
}

/* Engine mutex held: joins the group of l's key (creating it). */
static int group_join(zr_loader_engine *e, zr_loader *l) {
        group *g;

        for (g = e->groups; g; g = g->next)
                if (g->members && same_key(g->members, l))
                        break;
        if (!g) {
                g = calloc(1, sizeof(*g));
                if (!g)
                        return -ENOMEM;
                g->next = e->groups;
                e->groups = g;
        }
        l->g = g;
        l->g_next = g->members;
        g->members = l;
        g->nmembers++;
        return 0;
}

static void group_leave(zr_loader_engine *e, zr_loader *l) {
        group *g = l->g;

        if (!g)
                return;
        for (zr_loader **p = &g->members; *p; p = &(*p)->g_next) {
                if (*p == l) {
                        *p = l->g_next;
                        break;
                }
        }
        l->g = NULL;
        if (--g->nmembers > 0)
                return;
        for (group **p = &e->groups; *p; p = &(*p)->next) {
                if (*p == g) {
                        *p = g->next;
                        break;
                }
        }
        free(g);
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

/* Lays out slots and allocates every slot's metadata in one block. */
static int layout(zr_loader *l, const zr_loader_params *p, zr_error *err) {
        uint64_t off = 0, B = p->batch_size, per_slot = B, meta_words;
        uint64_t *m;

        for (size_t i = 0; i < l->nstreams; i++) {
                lstream *st = &l->streams[i];
                off = align_up(off, ZR_STREAM_ALIGN);
                st->offset = off;
                if (__builtin_add_overflow(off, st->capacity, &off))
                        return zr_error_set(err, EOVERFLOW, "the slot size overflows");
                if (st->ragged)
                        per_slot += B * (2 + (uint64_t)st->schema->ndim);
        }
        l->slot_bytes = align_up(off ? off : 1, ZR_SHM_ALIGN);
        if (l->slot_bytes < off || (uint64_t)l->nslots > UINT64_MAX / l->slot_bytes ||
            l->slot_bytes * l->nslots > SIZE_MAX / 2)
                return zr_error_set(err, EOVERFLOW, "a ring of %u slots of %" PRIu64 " bytes "
                                    "does not fit in memory", l->nslots, off);
        if (p->ring_bytes_max && l->slot_bytes * l->nslots > p->ring_bytes_max)
                return zr_error_set(err, ZR_E_LIMIT, "the ring needs %" PRIu64 " bytes (%u slots "
                                    "of %" PRIu64 "), over the %" PRIu64 " allowed",
                                    l->slot_bytes * l->nslots, l->nslots, l->slot_bytes,
                                    p->ring_bytes_max);
        if (per_slot > (SIZE_MAX / 16) / l->nslots)
                return zr_error_set(err, EOVERFLOW, "batch metadata does not fit in memory");
        meta_words = per_slot * l->nslots;
        l->meta = calloc(meta_words ? meta_words : 1, sizeof(uint64_t));
        l->slots = calloc(l->nslots, sizeof(slot));
        if (!l->meta || !l->slots)
                return zr_error_errno(err, ENOMEM, "loader metadata");
        m = l->meta;
        for (uint32_t k = 0; k < l->nslots; k++) {
                slot *s = &l->slots[k];
                s->sb = calloc(l->nstreams, sizeof(*s->sb));
                if (!s->sb)
                        return zr_error_errno(err, ENOMEM, "loader metadata");
                s->indices = m;
                m += B;
                for (size_t i = 0; i < l->nstreams; i++) {
                        lstream *st = &l->streams[i];
                        if (!st->ragged)
                                continue;
                        s->sb[i].ndim = st->schema->ndim;
                        s->sb[i].offsets = m;
                        m += B;
                        s->sb[i].lengths = m;
                        m += B;
                        s->sb[i].shapes = m;
                        m += B * st->schema->ndim;
                }
        }
        return 0;
}

static int ring_create(zr_shm *ret, size_t bytes, zr_error *err);

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
        pthread_mutex_lock(&e->mutex);
        if (ok && e->spare_reserved <= e->spare_max) {
                sp->next = e->spares;
                e->spares = sp;
                e->spare_ready += j->bytes;
                sp = NULL;
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
        free(j);
        if (ok && e->notify)
                e->notify(e->notify_userdata);
}

/* Engine mutex held: starts making a spare of `bytes` if the budget allows. */
static void spare_make(zr_loader_engine *e, size_t bytes) {
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

/* Takes a spare ring of exactly `bytes` into *ret. Returns 1, or 0 if none. */
static int spare_take(zr_loader_engine *e, size_t bytes, zr_shm *ret) {
        spare *sp = NULL;

        pthread_mutex_lock(&e->mutex);
        for (spare **pp = &e->spares; *pp; pp = &(*pp)->next) {
                if ((*pp)->shm.size == bytes) {
                        sp = *pp;
                        *pp = sp->next;
                        e->spare_ready -= bytes;
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

/* Releases spares (the list given) outside the engine mutex. */
static void spares_release(spare *list) {
        while (list) {
                spare *next = list->next;
                zr_shm_release(&list->shm);
                free(list);
                list = next;
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
                e->spare_reserved -= sp->shm.size;
                sp->next = drop;
                drop = sp;
        }
        pthread_mutex_unlock(&e->mutex);
        spares_release(drop);
}

/* Creates the ring: a memfd of `bytes` (a multiple of the page size), mapped
 * read-write and sealed as zr_shm_create() does, but not pre-faulted here:
 * populate() does that per slot on a worker (see there). */
static int ring_create(zr_shm *ret, size_t bytes, zr_error *err) {
        zr_shm s = { .fd = -1 };
        int r;

        s.fd = memfd_create("zrecord-ring", MFD_CLOEXEC | MFD_ALLOW_SEALING);
        if (s.fd < 0)
                return zr_error_errno(err, errno, "memfd_create of a ring");
        if (ftruncate(s.fd, (off_t)bytes) < 0) {
                r = zr_error_errno(err, errno, "sizing a ring to %zu bytes", bytes);
                goto fail;
        }
        s.data = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, s.fd, 0);
        if (s.data == MAP_FAILED) {
                s.data = NULL;
                r = zr_error_errno(err, errno, "mapping a ring of %zu bytes", bytes);
                goto fail;
        }
        s.size = bytes;
        s.writable = 1;
        /* our mapping exists, so FUTURE_WRITE keeps it writable and refuses any
         * new writable one (a client's); older kernels lack it */
        if ((fcntl(s.fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_FUTURE_WRITE) < 0 &&
             fcntl(s.fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW) < 0) ||
            fcntl(s.fd, F_ADD_SEALS, F_SEAL_SEAL) < 0) {
                r = zr_error_errno(err, errno, "sealing a ring");
                goto fail;
        }
        *ret = s;
        return 0;
fail:
        zr_shm_release(&s);
        return r;
}

static void loader_destroy(zr_loader *l) {
        if (!l)
                return;
        if (l->slots)
                for (uint32_t k = 0; k < l->nslots; k++)
                        free(l->slots[k].sb);
        free(l->slots);
        free(l->meta);
        zr_shm_release(&l->ring);
        free(l->streams);
        free(l);
}

int zr_loader_new(zr_loader_engine *e, const zr_loader_stream *streams, size_t nstreams,
                  const zr_loader_params *p, void *userdata, zr_loader **ret, zr_error *err) {
        zr_loader *l = NULL;
        uint64_t len0 = 0;
        int r;

        if (nstreams < 1 || nstreams > ZR_STREAMS_MAX)
                return zr_error_set(err, ZR_E_PROTO, "a loader has 1 to %d streams, not %zu",
                                    ZR_STREAMS_MAX, nstreams);
        if (p->prefetch < 1 || p->prefetch > ZR_PREFETCH_MAX)
                return zr_error_set(err, ZR_E_LIMIT, "prefetch is %u, allowed 1 to %d",
                                    p->prefetch, ZR_PREFETCH_MAX);
        l = calloc(1, sizeof(*l));
        if (!l)
                return zr_error_errno(err, ENOMEM, "loader");
        l->ring.fd = -1;
        l->streams = calloc(nstreams, sizeof(*l->streams));
        if (!l->streams) {
                r = zr_error_errno(err, ENOMEM, "loader");
                goto fail;
        }
        l->e = e;
        l->userdata = userdata;
        l->nstreams = nstreams;
        l->nslots = p->prefetch;
        l->start = p->start_step;

        /* lengths and generations, each under its stream's lock */
        for (size_t i = 0; i < nstreams; i++) {
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
                st->hdr_bytes = st->ragged ? zr_ragged_header_bytes(st->schema->ndim) : 0;
                st->cached = st->schema->codec != ZR_CODEC_RAW;
                pthread_rwlock_rdlock(st->s.lock);
                st->open_gen = atomic_load(st->s.generation);
                uint64_t len = zr_dataset_length(st->s.ds);
                pthread_rwlock_unlock(st->s.lock);
                if (i == 0)
                        len0 = len;
                if (len != len0) {
                        char msg[ZR_ERROR_MESSAGE_MAX];
                        size_t at = 0;
                        msg[0] = 0;
                        for (size_t k = 0; k < nstreams && at < sizeof(msg); k++) {
                                char nm[64];
                                if (streams[k].name)
                                        snprintf(nm, sizeof(nm), "%s", streams[k].name);
                                else
                                        snprintf(nm, sizeof(nm), "stream %zu", k);
                                at += (size_t)snprintf(msg + at, sizeof(msg) - at, "%s%s: %" PRIu64,
                                                       k ? ", " : "", nm,
                                                       zr_dataset_length(streams[k].ds));
                        }
                        r = zr_error_set(err, ZR_E_MISALIGNED, "the streams differ in length "
                                         "(%s)", msg);
                        goto fail;
                }
        }
        l->length = len0;
        if (p->has_length && p->length != len0) {
                r = zr_error_set(err, ZR_E_STALE, "the streams hold %" PRIu64 " records, the "
                                 "client expects %" PRIu64, len0, p->length);
                goto fail;
        }
        l->sp = (zr_sampler_params){ .mode = p->mode, .n = len0, .batch_size = p->batch_size,
                                     .seed = p->seed, .step = p->start_step, .rank = p->rank,
                                     .world_size = p->world_size };
        r = zr_sampler_check(&l->sp, err);
        if (r < 0)
                goto fail;
        if (p->batch_size > len0) {
                r = zr_error_set(err, ZR_E_SAMPLER, "batch_size %" PRIu64 " is larger than the "
                                 "length %" PRIu64, p->batch_size, len0);
                goto fail;
        }
        for (size_t i = 0; i < nstreams; i++) {
                lstream *st = &l->streams[i];
                if (!st->ragged) {
                        if (__builtin_mul_overflow(p->batch_size, st->item_bytes, &st->capacity)) {
                                r = zr_error_set(err, EOVERFLOW, "%s: a batch overflows", st->name);
                                goto fail;
                        }
                } else if (st->s.capacity) {
                        st->capacity = align_up(st->s.capacity, ZR_STREAM_ALIGN);
                } else {
                        /* the table is read under the lock, and at the length
                         * and generation seen above (else the loader is stale
                         * before it starts) */
                        pthread_rwlock_rdlock(st->s.lock);
                        if (atomic_load(st->s.generation) != st->open_gen)
                                r = zr_error_set(err, ZR_E_STALE, "%s changed while the loader "
                                                 "opened", st->name);
                        else
                                r = ragged_default_capacity(st, len0, p->batch_size, err);
                        pthread_rwlock_unlock(st->s.lock);
                        if (r < 0)
                                goto fail;
                }
        }
        r = layout(l, p, err);
        if (r < 0)
                goto fail;
        if (spare_take(e, l->slot_bytes * l->nslots, &l->ring)) {
                for (uint32_t k = 0; k < l->nslots; k++)
                        l->slots[k].populated = 1;
        } else {
                r = ring_create(&l->ring, l->slot_bytes * l->nslots, err);
                if (r < 0)
                        goto fail;
        }

        /* the domain: the batch of step 2^64 - 1 is the last */
        if (l->start > 0) {
                l->end_k = UINT64_MAX - l->start + 1;
                l->end_reachable = 1;
                l->end_code = ZR_E_SAMPLER;
                snprintf(l->end_msg, sizeof(l->end_msg), "the sampler's domain is used up "
                         "(step 2^64 - 1 was the last)");
        }

        pthread_mutex_lock(&e->mutex);
        r = group_join(e, l);
        if (r < 0) {
                pthread_mutex_unlock(&e->mutex);
                r = zr_error_errno(err, ENOMEM, "loader group");
                goto fail;
        }
        e->nloaders++;
        maybe_run(e, l);
        pthread_mutex_unlock(&e->mutex);
        *ret = l;
        return 0;
fail:
        loader_destroy(l);
        return r;
}

/* Engine mutex held: drops l's parked gathers from *list. */
static void unpark(zr_loader *l, parked_work **list) {
        for (parked_work **pp = list; *pp;) {
                parked_work *p = *pp;
                if (p->w.l != l) {
                        pp = &p->next;
                        continue;
                }
                *pp = p->next;
                l->slots[p->w.slot].state = SLOT_FREE;
                l->slots[p->w.slot].gathering = 0;
                l->inflight--;
        }
}

zr_loader *zr_loader_free(zr_loader *l) {
        zr_loader_engine *e;

        if (!l)
                return NULL;
        e = l->e;
        pthread_mutex_lock(&e->mutex);
        l->closing = 1;
        runq_remove(e, l);
        readyq_remove(e, l);
        /* its parked gathers end here: they were claimed and never finished */
        unpark(l, &e->parked);
        unpark(l, &e->resume);
        for (;;) {
                int pinned = 0;
                for (uint32_t k = 0; k < l->nslots; k++)
                        pinned |= l->slots[k].pins > 0;
                if (l->inflight == 0 && !pinned)
                        break;
                pthread_cond_wait(&e->idle, &e->mutex);
        }
        /* a drain task may have requeued it meanwhile */
        runq_remove(e, l);
        readyq_remove(e, l);
        /* members that waited for one of its (now dropped) fills */
        if (l->g)
                for (zr_loader *m = l->g->members; m; m = m->g_next)
                        if (m != l)
                                maybe_run(e, m);
        group_leave(e, l);
        e->nloaders--;
        /* a loader of this geometry is likely to be opened again (a resumed
         * run): have a warm ring ready for it, if the budget allows */
        spare_make(e, l->ring.size);
        pthread_mutex_unlock(&e->mutex);
        loader_destroy(l);
        return NULL;
}

void *zr_loader_userdata(const zr_loader *l) {
        return l->userdata;
}

int zr_loader_ring_fd(const zr_loader *l) {
        return l->ring.fd;
}

uint64_t zr_loader_ring_bytes(const zr_loader *l) {
        return l->slot_bytes * l->nslots;
}

uint32_t zr_loader_slots(const zr_loader *l) {
        return l->nslots;
}

uint64_t zr_loader_slot_bytes(const zr_loader *l) {
        return l->slot_bytes;
}

const void *zr_loader_ring_data(const zr_loader *l) {
        return l->ring.data;
}

size_t zr_loader_nstreams(const zr_loader *l) {
        return l->nstreams;
}

uint64_t zr_loader_stream_offset(const zr_loader *l, size_t i) {
        return i < l->nstreams ? l->streams[i].offset : 0;
}

uint64_t zr_loader_stream_capacity(const zr_loader *l, size_t i) {
        return i < l->nstreams ? l->streams[i].capacity : 0;
}

uint64_t zr_loader_length(const zr_loader *l) {
        return l->length;
}

int zr_loader_poll(zr_loader *l, zr_loader_event *ret) {
        zr_loader_engine *e = l->e;
        slot *s;
        int r = 0;

        pthread_mutex_lock(&e->mutex);
        if (l->closing || l->end_delivered)
                goto out;
        s = announce_slot(l);
        if (s) {
                s->state = SLOT_HELD;
                *ret = (zr_loader_event){ .kind = ZR_LOADER_EVENT_BATCH, .step = s->step,
                                          .slot = (uint32_t)(s - l->slots),
                                          .batch_size = l->sp.batch_size,
                                          .nstreams = l->nstreams, .streams = s->sb,
                                          .indices = s->indices };
                l->ann_k++;
                l->c.batches++;
                e->t.batches++;
                r = 1;
        } else if (l->end_reachable && l->ann_k == l->end_k) {
                *ret = (zr_loader_event){ .kind = ZR_LOADER_EVENT_END,
                                          .step = l->start + l->end_k, .code = l->end_code,
                                          .message = l->end_msg, .needed = l->end_needed };
                l->end_delivered = 1;
                r = 1;
        }
out:
        pthread_mutex_unlock(&e->mutex);
        return r;
}

int zr_loader_release(zr_loader *l, uint32_t slot_no, zr_error *err) {
        zr_loader_engine *e = l->e;
        int r = 0;

        pthread_mutex_lock(&e->mutex);
        if (l->end_delivered)
                goto out;
        if (slot_no >= l->nslots) {
                r = zr_error_set(err, ZR_E_PROTO, "slot %u does not exist (the ring has %u)",
                                 slot_no, l->nslots);
                goto out;
        }
        if (l->slots[slot_no].state != SLOT_HELD) {
                r = zr_error_set(err, ZR_E_PROTO, "slot %u is not held by the client", slot_no);
                goto out;
        }
        l->slots[slot_no].state = SLOT_FREE;
        maybe_run(e, l);
        if (e->parked)
                resume_parked(e);
        else if (e->kick_pending)
                kick(e);
out:
        pthread_mutex_unlock(&e->mutex);
        return r;
}

void zr_loader_stop(zr_loader *l, int code, const char *message) {
        zr_loader_engine *e = l->e;
        int notify;

        pthread_mutex_lock(&e->mutex);
        if (!l->end_decided)
                set_end(l, l->fill_k, code, 0, message ? message : "stopped");
        runq_remove(e, l);
        notify = maybe_ready(e, l);
        pthread_mutex_unlock(&e->mutex);
        if (notify && e->notify)
                e->notify(e->notify_userdata);
}

void zr_loader_counters_get(zr_loader *l, zr_loader_counters *ret) {
        pthread_mutex_lock(&l->e->mutex);
        *ret = l->c;
        ret->step = l->start + l->ann_k;
        pthread_mutex_unlock(&l->e->mutex);
}
