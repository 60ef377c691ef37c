/* loader.c: the loader engine and its loaders (see loader.h for the model,
 * the threads, what is shared and the lock order).
 *
 * Storage and claims are separate. Storage is the slots of rings; a
 * loader's group owns every ring of its members, and any member may fill any
 * free slot of them. A loader holds at most `nslots` claims: each
 * names the slot that holds (or is being filled with) one step the loader will
 * announce or has announced and not got back. A slot is free when no claim
 * names it and no fill runs on it; it keeps its last batch until refilled, so a
 * member that reaches that step later takes it without a gather.
 *
 * Why a member below its claims always finds a free slot: the group's live
 * rings hold the sum of the live members' nslots slots; each claim names one
 * slot, each member has at most nslots claims, so while one member has fewer,
 * the slots named by claims are fewer than the slots (a fill whose claims
 * were dropped, by an end or a close, occupies a slot for the rest of that
 * fill only). So no member waits for another to release anything: a slow
 * member holds its own claims and nothing else.
 *
 * The engine's mutex guards every piece of scheduling state: the run queue
 * (loaders with a free claim and a step to claim), the ready queue (loaders
 * with an event to collect), the groups and their rings, each slot's state,
 * each loader's claims, steps, end and counters. Pool workers run drain tasks
 * that claim one (loader, slot, step) at a time under the mutex and fill it
 * without the mutex; the loop thread polls, releases, opens and frees. A fill
 * writes only the slot it claimed. A fill never blocks on anything but the
 * pool: stream locks are only tried (a busy one parks the fill with its claim).
 *
 * It assumes the daemon keeps each stream's dataset alive for the loader's
 * lifetime, bumps its generation under the exclusive lock on every mutation
 * (dataset.h), and calls zr_loader_engine_resume() (or _drop_dataset())
 * after releasing an exclusive lock. It does not know about sockets, messages
 * or handles; it does not limit how many loaders exist (the daemon's limits
 * do); it shares worker time per batch, not per byte (a loader of big batches
 * gets more time per turn than one of small batches).
 */
#include "loader/loader.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "dataset/ragged.h"
#include "dataset/batch.h"
#include "dataset/cache.h"
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

/* While a gather is parked on a stream's lock (a mutation holds it), the
 * engine's retry thread retries every parked gather this often. A mutation
 * holds a lock for milliseconds (a delete) to seconds (a compaction); a retry
 * costs one trylock per parked fill, and a loader waits at most this long
 * after the lock goes (zr_loader_engine_resume() makes it immediate). */
#define LOADER_PARK_RETRY_NS (2 * 1000 * 1000)

/* Spare rings kept at most, whatever the budget: each is a descriptor and a
 * mapping of the daemon, and a run resumes with the geometry of one of the
 * last few loaders closed (older spares go first). */
#define LOADER_SPARES_MAX 4

typedef struct lstream {
        zr_loader_stream s;
        char name[64];        /* for messages */
        const zr_schema *schema;
        int ragged;
        uint64_t item_bytes;  /* dense */
        uint64_t open_gen;
        uint64_t offset;      /* region offset inside a slot */
        uint64_t capacity;
} lstream;

typedef struct ring ring;
typedef struct slot slot;

/* A claimed piece of work: fill slot `sl` with `step`, on behalf of `l` (the
 * member whose claim started it; another member takes it over if l closes
 * while it is parked). */
typedef struct work {
        zr_loader *l;
        slot *sl;
        uint64_t step;
} work;

/* A gather that found a stream's lock taken exclusive (a mutation in
 * progress): it keeps its claim and waits here, holding no worker, until
 * resume_parked(). One node per slot, allocated with the ring. */
typedef struct parked_work {
        struct parked_work *next;
        work w;
} parked_work;

/* A slot of a ring. */
struct slot {
        ring *r;
        uint32_t index;       /* in r */
        int filling;          /* a fill is claimed on it (running or parked) */
        int has_content;      /* holds the complete batch of `step` */
        uint64_t step;        /* the step it holds or is being filled with */
        unsigned refs;        /* claims that name it */
        int populated;        /* its pages are faulted in (only its filler reads this) */
        uint64_t *indices;    /* batch_size */
        zr_loader_stream_batch *sb; /* nstreams */
        parked_work park;     /* its fill, while parked */
};

/* One memfd of nslots × slot_bytes, made by a loader at open. It belongs to
 * the loader's group: it outlives its loader while any claim names one of its
 * slots or a fill runs on one (then `owner` is NULL: retiring, never filled
 * again, never announced to a new member). */
struct ring {
        ring *next;           /* in group->rings */
        uint32_t id;
        zr_shm shm;
        uint32_t nslots;
        uint64_t slot_bytes;
        slot *slots;
        void *meta;           /* one allocation for every slot's arrays */
        zr_loader *owner;
};

/* A loader's claim on a step. */
typedef struct claim {
        slot *sl;             /* NULL: unused */
        uint64_t step;
        int held;             /* announced: the client's until released */
} claim;

/* A ring made ahead, never passed to anyone, pre-faulted whole. */
typedef struct spare {
        struct spare *next;
        zr_shm shm;
} spare;

typedef struct group {
        struct group *next;
        zr_loader *members;   /* linked by zr_loader.g_next */
        size_t nmembers;
        ring *rings;
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
        ring *own;            /* its ring (in g->rings); NULL once it left */
        claim *claims;        /* nslots */

        /* ring ids announced to the client (its own first) */
        uint32_t *known;
        size_t nknown, known_cap;

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

        unsigned inflight;    /* fills claimed on its behalf and not completed */
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
        pthread_cond_t idle;  /* a fill completed or a drain task ended */
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
        uint32_t next_ring_id;
        spare *spares;        /* ready spare rings */
        uint64_t spare_max;   /* budget of spare rings, bytes */
        uint64_t spare_reserved; /* ready and being made */
        uint64_t spare_ready;
        unsigned nspares;     /* ready spare rings, at most LOADER_SPARES_MAX */
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
static void spare_make(zr_loader_engine *e, size_t bytes);

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

/* ---- slots, claims and rings (engine mutex held) ---------------------------- */

static int slot_busy(const slot *sl) {
        return sl->refs > 0 || sl->filling;
}

static int ring_busy(const ring *r) {
        for (uint32_t i = 0; i < r->nslots; i++)
                if (slot_busy(&r->slots[i]))
                        return 1;
        return 0;
}

static ring *ring_by_id(const group *g, uint32_t id) {
        for (ring *r = g->rings; r; r = r->next)
                if (r->id == id)
                        return r;
        return NULL;
}

/* A slot of a live ring that holds `step` or is being filled with it. */
static slot *slot_find(const group *g, uint64_t step) {
        for (ring *r = g->rings; r; r = r->next) {
                if (!r->owner)
                        continue;
                for (uint32_t i = 0; i < r->nslots; i++) {
                        slot *sl = &r->slots[i];
                        if (sl->step == step && (sl->has_content || sl->filling))
                                return sl;
                }
        }
        return NULL;
}

/* A free slot of a live ring to fill: one whose pages are resident before one
 * that never held a batch (members in step then use about one ring's memory,
 * and no fill pays a first touch it could avoid); among resident ones an empty
 * one, else the one with the oldest batch (members behind all still need the
 * newer batches; only the slowest needs the oldest). NULL if none. */
static slot *slot_pick(const group *g) {
        slot *best = NULL;
        int best_rank = 0;

        for (ring *r = g->rings; r; r = r->next) {
                if (!r->owner)
                        continue;
                for (uint32_t i = 0; i < r->nslots; i++) {
                        slot *sl = &r->slots[i];
                        int rank;
                        if (slot_busy(sl))
                                continue;
                        rank = !sl->populated ? 1 : sl->has_content ? 2 : 3;
                        if (rank > best_rank ||
                            (rank == best_rank && rank == 2 && sl->step < best->step)) {
                                best = sl;
                                best_rank = rank;
                        }
                }
        }
        return best;
}

static int claim_unused(const zr_loader *l) {
        for (uint32_t i = 0; i < l->nslots; i++)
                if (!l->claims[i].sl)
                        return (int)i;
        return -1;
}

/* Drops a claim. Returns 1 if its slot became free. */
static int claim_drop(claim *cl) {
        slot *sl = cl->sl;

        if (!sl)
                return 0;
        sl->refs--;
        *cl = (claim){0};
        return !slot_busy(sl);
}

static int claims_slot(const zr_loader *l, const slot *sl) {
        for (uint32_t i = 0; i < l->nslots; i++)
                if (l->claims[i].sl == sl)
                        return 1;
        return 0;
}

static int knows(const zr_loader *l, uint32_t id) {
        for (size_t i = 0; i < l->nknown; i++)
                if (l->known[i] == id)
                        return 1;
        return 0;
}

static int know(zr_loader *l, uint32_t id) {
        if (l->nknown == l->known_cap) {
                size_t cap = l->known_cap ? 2 * l->known_cap : 4;
                uint32_t *k = realloc(l->known, cap * sizeof(*k));
                if (!k)
                        return -ENOMEM;
                l->known = k;
                l->known_cap = cap;
        }
        l->known[l->nknown++] = id;
        return 0;
}

/* Something about rings to tell the client: a ring it knows is gone, or a
 * live ring of its group is new to it. */
static int ring_news(const zr_loader *l) {
        for (size_t i = 0; i < l->nknown; i++)
                if (!ring_by_id(l->g, l->known[i]))
                        return 1;
        for (ring *r = l->g->rings; r; r = r->next)
                if (r->owner && !knows(l, r->id))
                        return 1;
        return 0;
}

/* 1 and a message if a stream changed since open. */
static int stale(const zr_loader *l, char *msg, size_t size) {
        for (size_t i = 0; i < l->nstreams; i++) {
                if (zr_dataset_generation(l->streams[i].s.ds) != l->streams[i].open_gen) {
                        snprintf(msg, size, "%s changed under the loader (appended to, deleted "
                                 "from or compacted)", l->streams[i].name);
                        return 1;
                }
        }
        return 0;
}


static int runnable(const zr_loader *l) {
        if (l->closing || (l->end_reachable && l->fill_k >= l->end_k))
                return 0;
        /* a new loader's first batch is filled alone, so it gets every core
         * (its shards) and arrives after one slot's fill, not two */
        if (l->inflight > 0 && l->c.gathers + l->c.shared == 0)
                return 0;
        return claim_unused(l) >= 0;
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


/* The claim whose batch is the next to announce, if it is filled. */
static claim *announce_claim(zr_loader *l) {
        uint64_t step = l->start + l->ann_k;

        if (l->end_reachable && l->ann_k >= l->end_k)
                return NULL;
        for (uint32_t i = 0; i < l->nslots; i++) {
                claim *cl = &l->claims[i];
                if (cl->sl && !cl->held && cl->step == step && cl->sl->has_content &&
                    !cl->sl->filling)
                        return cl;
        }
        return NULL;
}

static int has_event(zr_loader *l) {
        if (l->closing || l->end_delivered)
                return 0;
        if (announce_claim(l) || ring_news(l))
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


/* Requeues every member: a slot became free, or a batch some wait for came. */
static void group_wake(zr_loader_engine *e, group *g) {
        for (zr_loader *m = g->members; m; m = m->g_next)
                maybe_run(e, m);
}

/* Drops l's claims at or past its end (never announced). Returns 1 if a slot
 * became free. */
static int trim(zr_loader *l) {
        int freed = 0;

        if (!l->end_reachable)
                return 0;
        for (uint32_t i = 0; i < l->nslots; i++) {
                claim *cl = &l->claims[i];
                if (cl->sl && !cl->held && cl->step - l->start >= l->end_k)
                        freed |= claim_drop(cl);
        }
        return freed;
}

/* Moves g's retiring rings that nothing uses any more to *dead (released by
 * the caller, outside the mutex, with rings_release()). Members that knew one
 * get a RING_CLOSE: returns 1 if notify is due. Loop thread. */
static int reap(zr_loader_engine *e, group *g, ring **dead) {
        int notify = 0;

        for (ring **pp = &g->rings; *pp;) {
                ring *r = *pp;
                if (r->owner || ring_busy(r)) {
                        pp = &r->next;
                        continue;
                }
                *pp = r->next;
                r->next = *dead;
                *dead = r;
                for (zr_loader *m = g->members; m; m = m->g_next)
                        if (knows(m, r->id))
                                notify |= maybe_ready(e, m);
                /* a loader of this geometry is likely to be opened again (a
                 * resumed run): have a warm ring ready for it, if the budget
                 * allows */
                spare_make(e, r->shm.size);
        }
        return notify;
}


/* Claims the next step of l. If a slot of a live ring of its group holds that
 * step or is being filled with it, l takes it (no work: returns 0, and sets
 * *notify if l got an event). Else it claims a free slot for a gather into *w
 * and returns 1. Returns 0 with nothing done when l has nothing to claim now
 * or no slot is free (it is requeued when one frees). */
static int claim_next(zr_loader_engine *e, zr_loader *l, work *w, int *notify) {
        char msg[ZR_ERROR_MESSAGE_MAX];
        uint64_t step;
        slot *sl;
        int k;

        if (!runnable(l))
                return 0;
        step = l->start + l->fill_k;
        k = claim_unused(l);
        sl = slot_find(l->g, step);
        if (sl) {
                /* a batch filled before a change is intact, but l would not
                 * have gathered it: end as its own gather would */
                if (stale(l, msg, sizeof(msg))) {
                        set_end(l, l->fill_k, ZR_E_STALE, 0, msg);
                        *notify |= maybe_ready(e, l);
                        return 0;
                }
                l->claims[k] = (claim){ .sl = sl, .step = step };
                sl->refs++;
                l->fill_k++;
                l->c.shared++;
                e->t.shared++;
                maybe_run(e, l);
                *notify |= maybe_ready(e, l);
                return 0;
        }
        sl = slot_pick(l->g);
        if (!sl)
                return 0;
        sl->filling = 1;
        sl->has_content = 0;
        sl->step = step;
        sl->refs = 1;
        l->claims[k] = (claim){ .sl = sl, .step = step };
        l->fill_k++;
        l->inflight++;
        *w = (work){ .l = l, .sl = sl, .step = step };
        maybe_run(e, l);
        return 1;
}

static void fill_fail(fill_result *res, int r, const zr_error *err) {
        res->code = r < 0 ? -r : r;
        snprintf(res->msg, sizeof(res->msg), "%s", err->message[0] ? err->message : "failed");
}

/* Gathers stream `si` of the batch idx[0..B) into its region of `base` (the
 * slot), filling the slot's metadata. Takes the stream's lock shared. */
static int gather_stream(zr_loader *l, size_t si, const uint64_t *idx, uint8_t *base,
                         uint64_t slot_off, zr_loader_stream_batch *sb, fill_result *res,
                         zr_error *err) {
        lstream *st = &l->streams[si];
        zr_gather g = { .ds = st->s.ds, .idx = idx, .n = l->sp.batch_size,
                        .offsets = (uint64_t *)sb->offsets, /* the slot's own arrays */
                        .lengths = (uint64_t *)sb->lengths, .shapes = (uint64_t *)sb->shapes };
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
        res->bytes += g.bytes;
out:
        if (locked)
                zr_dataset_unlock(st->s.ds);
        zr_gather_release(&g);
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

/* Pre-faults slot sl before its first fill, on the workers, so that opening a
 * loader costs the loop thread no page faults and a fill writes into present
 * pages (a fresh shared page costs 1.7 to 5 us to fault on these VMs: 29 to
 * 80 ms per 64 MiB, measured, whether by MAP_POPULATE, MADV_POPULATE_WRITE or
 * touching; the steady state then costs none). Units that are never filled
 * are never faulted in: they cost no memory. */
static void populate(zr_loader_engine *e, slot *sl) {
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

/* Gathers step w->step into slot w->sl (the slot's metadata too). */
static void fill_gather(zr_loader *l, const work *w, fill_result *res) {
        slot *sl = w->sl;
        uint64_t slot_off = (uint64_t)sl->index * sl->r->slot_bytes;
        uint8_t *base = (uint8_t *)sl->r->shm.data + slot_off;
        zr_sampler_params sp = l->sp;
        zr_error err = {0};
        int r;

        populate(l->e, sl);
        sp.step = w->step;
        r = zr_sampler_indices(&sp, sl->indices, &err);
        for (size_t i = 0; r >= 0 && i < l->nstreams; i++)
                r = gather_stream(l, i, sl->indices, base, slot_off, &sl->sb[i], res, &err);
        if (r == -EBUSY)
                res->busy = 1;
        else if (r < 0)
                fill_fail(res, r, &err);
}

/* Engine mutex held: applies a finished fill. Returns 1 if notify is due. */
static int complete(zr_loader_engine *e, const work *w, const fill_result *res) {
        zr_loader *l = w->l;
        slot *sl = w->sl;
        group *g = l->g;
        int notify = 0;

        l->c.hits += res->hits;
        l->c.misses += res->misses;
        e->t.hits += res->hits;
        e->t.misses += res->misses;
        if (res->busy) {
                /* keep the claim (the slot stays filling, members wait for it)
                 * and park the work until resume_parked() */
                sl->park.w = *w;
                sl->park.next = e->parked;
                e->parked = &sl->park;
                pthread_cond_signal(&e->parked_cond);
                return 0;
        }
        l->inflight--;
        l->c.bytes += res->bytes;
        l->c.evictions += res->evictions;
        e->t.bytes += res->bytes;
        e->t.evictions += res->evictions;
        l->c.fill_seq = ++e->fills;
        l->c.gathers++;
        e->t.gathers++;
        sl->filling = 0;
        if (res->code) {
                /* every member waiting for this batch ends at its step: the
                 * group's key makes it the same batch, so the same failure */
                sl->has_content = 0;
                for (zr_loader *m = g->members; m; m = m->g_next) {
                        if (!claims_slot(m, sl))
                                continue;
                        set_end(m, sl->step - m->start, res->code, res->needed, res->msg);
                        trim(m);
                        notify |= maybe_ready(e, m);
                }
                group_wake(e, g);
        } else {
                sl->has_content = 1;
                for (zr_loader *m = g->members; m; m = m->g_next)
                        if (claims_slot(m, sl))
                                notify |= maybe_ready(e, m);
                if (!slot_busy(sl))
                        group_wake(e, g); /* nobody wanted it any more: free */
        }
        maybe_run(e, l);
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
                        int notify = 0, r = claim_next(e, l, &w, &notify);
                        if (notify && e->notify) {
                                pthread_mutex_unlock(&e->mutex);
                                e->notify(e->notify_userdata);
                                pthread_mutex_lock(&e->mutex);
                        }
                        if (!r)
                                continue;
                } else {
                        break;
                }
                pthread_mutex_unlock(&e->mutex);
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

/* Same batches for every step, in the same slot layout. */
static int same_key(const zr_loader *a, const zr_loader *b) {
        if (a->nstreams != b->nstreams || a->sp.mode != b->sp.mode || a->sp.seed != b->sp.seed ||
            a->sp.batch_size != b->sp.batch_size || a->sp.rank != b->sp.rank ||
            a->sp.world_size != b->sp.world_size || a->sp.n != b->sp.n ||
            a->slot_bytes != b->slot_bytes)
                return 0;
        for (size_t i = 0; i < a->nstreams; i++)
                if (zr_dataset_id(a->streams[i].s.ds) != zr_dataset_id(b->streams[i].s.ds) ||
                    a->streams[i].open_gen != b->streams[i].open_gen ||
                    a->streams[i].offset != b->streams[i].offset ||
                    a->streams[i].capacity != b->streams[i].capacity)
                        return 0;
        return 1;
}

/* Engine mutex held: joins the group of l's key (creating it), with its ring.
 * Returns 1 if notify is due (the other members have a RING to collect). */
static int group_join(zr_loader_engine *e, zr_loader *l, group *fresh) {
        group *g;
        int notify = 0;

        for (g = e->groups; g; g = g->next)
                if (g->members && same_key(g->members, l))
                        break;
        if (!g) {
                g = fresh;
                g->next = e->groups;
                e->groups = g;
        } else {
                free(fresh);
        }
        l->own->next = g->rings;
        g->rings = l->own;
        for (zr_loader *m = g->members; m; m = m->g_next)
                notify |= maybe_ready(e, m);
        l->g = g;
        l->g_next = g->members;
        g->members = l;
        g->nmembers++;
        return notify;
}

/* Engine mutex held: leaves l's group; the last member unlinks it from the
 * engine (the caller frees it once its rings are reaped). */
static void group_leave(zr_loader_engine *e, zr_loader *l) {
        group *g = l->g;

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
        if (p->ring_bytes_max && l->slot_bytes * l->nslots > p->ring_bytes_max)
                return zr_error_set(err, ZR_E_LIMIT, "the ring needs %" PRIu64 " bytes (%u slots "
                                    "of %" PRIu64 "), over the %" PRIu64 " allowed",
                                    l->slot_bytes * l->nslots, l->nslots, l->slot_bytes,
                                    p->ring_bytes_max);
        return 0;
}

static void ring_release(ring *r) {
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
static void rings_release(ring *list) {
        while (list) {
                ring *next = list->next;
                ring_release(list);
                list = next;
        }
}

/* Creates a ring's memfd: sealed as every daemon-made region, but not
 * pre-faulted here: populate() does that per slot on a worker (see there). */
static int ring_create(zr_shm *ret, size_t bytes, zr_error *err) {
        return zr_shm_create_flags("zrecord-ring", bytes, ZR_SHM_LAZY, ret, err);
}

static int spare_take(zr_loader_engine *e, size_t bytes, zr_shm *ret);

/* Makes l's ring: nslots slots of slot_bytes, each with its batch metadata
 * (indices; ragged offsets, lengths, shapes), in one block. */
static int ring_new(zr_loader *l, zr_error *err) {
        uint64_t B = l->sp.batch_size, per_slot = B, meta_words;
        uint64_t *m;
        ring *r;
        int res;

        for (size_t i = 0; i < l->nstreams; i++)
                if (l->streams[i].ragged)
                        per_slot += B * (2 + (uint64_t)l->streams[i].schema->ndim);
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
                        m += B * st->schema->ndim;
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
        ring_release(r);
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
        spares_release(evicted);
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
                e->nspares--;
                e->spare_reserved -= sp->shm.size;
                sp->next = drop;
                drop = sp;
        }
        pthread_mutex_unlock(&e->mutex);
        spares_release(drop);
}

static void loader_destroy(zr_loader *l) {
        if (!l)
                return;
        free(l->claims);
        free(l->known);
        free(l->streams);
        free(l);
}

int zr_loader_new(zr_loader_engine *e, const zr_loader_stream *streams, size_t nstreams,
                  const zr_loader_params *p, void *userdata, zr_loader **ret, zr_error *err) {
        zr_loader *l = NULL;
        uint64_t len0 = 0;
        group *fresh = NULL;
        int r, notify;

        if (nstreams < 1 || nstreams > ZR_STREAMS_MAX)
                return zr_error_set(err, ZR_E_PROTO, "a loader has 1 to %d streams, not %zu",
                                    ZR_STREAMS_MAX, nstreams);
        if (p->prefetch < 1 || p->prefetch > ZR_PREFETCH_MAX)
                return zr_error_set(err, ZR_E_LIMIT, "prefetch is %u, allowed 1 to %d",
                                    p->prefetch, ZR_PREFETCH_MAX);
        l = calloc(1, sizeof(*l));
        if (!l)
                return zr_error_errno(err, ENOMEM, "loader");
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
                        zr_dataset_lock(st->s.ds, false);
                        if (zr_dataset_generation(st->s.ds) != st->open_gen)
                                r = zr_error_set(err, ZR_E_STALE, "%s changed while the loader "
                                                 "opened", st->name);
                        else
                                r = ragged_default_capacity(st, len0, p->batch_size, err);
                        zr_dataset_unlock(st->s.ds);
                        if (r < 0)
                                goto fail;
                }
        }
        r = layout(l, p, err);
        if (r < 0)
                goto fail;
        l->claims = calloc(l->nslots, sizeof(*l->claims));
        fresh = calloc(1, sizeof(*fresh));
        if (!l->claims || !fresh) {
                r = zr_error_errno(err, ENOMEM, "loader");
                goto fail;
        }
        r = ring_new(l, err);
        if (r < 0)
                goto fail;
        r = know(l, l->own->id);
        if (r < 0) {
                r = zr_error_errno(err, ENOMEM, "loader");
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
        if (++e->next_ring_id == 0) /* ids are never 0 */
                e->next_ring_id = 1;
        l->own->id = e->next_ring_id;
        l->known[0] = l->own->id;
        notify = group_join(e, l, fresh);
        e->nloaders++;
        maybe_run(e, l);
        pthread_mutex_unlock(&e->mutex);
        if (notify && e->notify)
                e->notify(e->notify_userdata);
        *ret = l;
        return 0;
fail:
        free(fresh);
        if (l) {
                ring_release(l->own);
                l->own = NULL;
        }
        loader_destroy(l);
        return r;
}


/* Engine mutex held: l is closing; its parked gathers are either handed to
 * another member that waits for the same slot, or dropped (the slot is then
 * free and empty). */
static void unpark(zr_loader *l, parked_work **list) {
        for (parked_work **pp = list; *pp;) {
                parked_work *p = *pp;
                zr_loader *heir = NULL;
                if (p->w.l != l) {
                        pp = &p->next;
                        continue;
                }
                for (zr_loader *m = l->g->members; m && !heir; m = m->g_next)
                        if (m != l && !m->closing && claims_slot(m, p->w.sl))
                                heir = m;
                l->inflight--;
                if (heir) {
                        p->w.l = heir;
                        heir->inflight++;
                        pp = &p->next;
                        continue;
                }
                *pp = p->next;
                p->w.sl->filling = 0;
                p->w.sl->has_content = 0;
        }
}

zr_loader *zr_loader_free(zr_loader *l) {
        zr_loader_engine *e;
        group *g;
        ring *dead = NULL;
        int notify;

        if (!l)
                return NULL;
        e = l->e;
        pthread_mutex_lock(&e->mutex);
        l->closing = 1;
        runq_remove(e, l);
        readyq_remove(e, l);
        unpark(l, &e->parked);
        unpark(l, &e->resume);
        while (l->inflight > 0)
                pthread_cond_wait(&e->idle, &e->mutex);
        /* a drain task may have requeued it meanwhile */
        runq_remove(e, l);
        readyq_remove(e, l);
        for (uint32_t i = 0; i < l->nslots; i++)
                claim_drop(&l->claims[i]);
        l->own->owner = NULL; /* retiring: freed once nothing uses it */
        l->own = NULL;
        g = l->g;
        group_leave(e, l);
        if (g->nmembers == 0) {
                /* nobody is left to use or fill any of its rings */
                notify = reap(e, g, &dead);
                free(g);
        } else {
                notify = reap(e, g, &dead);
                group_wake(e, g);
        }
        e->nloaders--;
        pthread_mutex_unlock(&e->mutex);
        if (notify && e->notify)
                e->notify(e->notify_userdata);
        rings_release(dead);
        loader_destroy(l);
        return NULL;
}

void *zr_loader_userdata(const zr_loader *l) {
        return l->userdata;
}

int zr_loader_ring_fd(const zr_loader *l) {
        return l->own->shm.fd;
}

uint32_t zr_loader_ring_id(const zr_loader *l) {
        return l->own->id;
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
        return l->own->shm.data;
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

static void ring_event(zr_loader_event *ev, const ring *r) {
        *ev = (zr_loader_event){ .kind = ZR_LOADER_EVENT_RING, .ring = r->id,
                                 .ring_data = r->shm.data, .fd = r->shm.fd,
                                 .slots = r->nslots, .slot_bytes = r->slot_bytes,
                                 .ring_bytes = (uint64_t)r->nslots * r->slot_bytes };
}

int zr_loader_poll(zr_loader *l, zr_loader_event *ret) {
        zr_loader_engine *e = l->e;
        claim *cl;
        int r = 0;

        pthread_mutex_lock(&e->mutex);
        if (l->closing || l->end_delivered)
                goto out;
        /* rings first: a ring is told before the first batch that names it,
         * and its end after the last batch of it was given back */
        for (size_t i = 0; i < l->nknown; i++) {
                if (ring_by_id(l->g, l->known[i]))
                        continue;
                *ret = (zr_loader_event){ .kind = ZR_LOADER_EVENT_RING_CLOSE,
                                          .ring = l->known[i] };
                l->known[i] = l->known[--l->nknown];
                r = 1;
                goto out;
        }
        for (ring *rg = l->g->rings; rg; rg = rg->next) {
                if (!rg->owner || knows(l, rg->id))
                        continue;
                if (know(l, rg->id) < 0)
                        goto out; /* no memory now: told at the next poll */
                ring_event(ret, rg);
                r = 1;
                goto out;
        }
        cl = announce_claim(l);
        if (cl) {
                const ring *rg = cl->sl->r;
                if (!knows(l, rg->id)) {
                        /* a ring that retired after l took one of its batches */
                        if (know(l, rg->id) < 0)
                                goto out;
                        ring_event(ret, rg);
                        r = 1;
                        goto out;
                }
                cl->held = 1;
                *ret = (zr_loader_event){ .kind = ZR_LOADER_EVENT_BATCH, .step = cl->step,
                                          .ring = rg->id, .ring_data = rg->shm.data,
                                          .slot = cl->sl->index,
                                          .batch_size = l->sp.batch_size,
                                          .nstreams = l->nstreams, .streams = cl->sl->sb,
                                          .indices = cl->sl->indices };
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

int zr_loader_release(zr_loader *l, uint32_t ring_id, uint32_t slot_no, zr_error *err) {
        zr_loader_engine *e = l->e;
        ring *dead = NULL;
        claim *cl = NULL;
        int r = 0, notify = 0;

        pthread_mutex_lock(&e->mutex);
        if (l->end_delivered)
                goto out;
        for (uint32_t i = 0; i < l->nslots && !cl; i++)
                if (l->claims[i].held && l->claims[i].sl->r->id == ring_id &&
                    l->claims[i].sl->index == slot_no)
                        cl = &l->claims[i];
        if (!cl) {
                r = zr_error_set(err, ZR_E_PROTO, "ring %u slot %u is not held by the client",
                                 ring_id, slot_no);
                goto out;
        }
        if (claim_drop(cl))
                group_wake(e, l->g);
        maybe_run(e, l);
        notify = reap(e, l->g, &dead);
        if (e->parked)
                resume_parked(e);
        else if (e->kick_pending)
                kick(e);
out:
        pthread_mutex_unlock(&e->mutex);
        if (notify && e->notify)
                e->notify(e->notify_userdata);
        rings_release(dead);
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
