/* loader-private.h: what the loader engine's source files share, and nobody
 * else: the engine's objects and the calls one part makes into another.
 *
 *   loader.c  the scheduler: the run and ready queues, claims, drain tasks,
 *             parked gathers and the retry thread; the engine and the loaders
 *             as loader.h shows them (open, poll, release, stop, free).
 *   group.c   groups of identical loaders: membership, their rings as one
 *             pool of slots, and which rings each member has been told of.
 *   ring.c    rings and their slots' metadata, pre-faulting, spare rings.
 *   fill.c    a loader's streams and slot layout, and the fill of one slot.
 *   prefetch.c  reading ahead: each group's next steps read into the page
 *             cache through the I/O queue before their fills, and their
 *             compressed records' uses planned in the decoded-record cache.
 *
 * Storage and claims are separate. Storage is the slots of rings; a loader's
 * group owns every ring of its members, and any member may fill any free slot
 * of them. A loader holds at most `nslots` claims: each names the slot that
 * holds (or is being filled with) one step the loader will announce or has
 * announced and not got back. A slot is free when no claim names it and no
 * fill runs on it; it keeps its last batch until refilled, so a member that
 * reaches that step later takes it without a gather.
 *
 * The engine's mutex guards every piece of scheduling state: the run queue
 * (loaders with an unused claim and a step to claim), the ready queue (loaders
 * with an event to collect), the groups and their rings, each slot's state,
 * each loader's claims, steps, end and counters. Functions below that say
 * "engine mutex held" are called with it; the others take what they need.
 * Not for other layers: they use loader.h.
 */
#ifndef ZR_LOADER_PRIVATE_H
#define ZR_LOADER_PRIVATE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "dataset/batch.h"
#include "dataset/cache.h"
#include "dataset/rdataset.h"
#include "io/ioq.h"
#include "loader/ctlring.h"
#include "loader/loader.h"
#include "loader/telemetry.h"
#include "sampler/mixture.h"
#include "util/shm.h"

/* A stream of a loader (of one source of a mixture), as fill.c sets it up at
 * open. */
typedef struct lstream {
        zr_loader_stream s;   /* s.name points to `label` (or is NULL) */
        char label[48];       /* the stream's name as given, cut */
        char name[64];        /* for messages */
        const zr_schema *schema;
        int ragged;
        uint64_t item_bytes;  /* dense */
        uint64_t open_gen;    /* the dataset's generation at open */
        uint64_t open_len;    /* its length then */
        uint64_t offset;      /* region offset inside a slot (its stream's, for a
                               * mixture: the same in every source) */
        uint64_t capacity;    /* region bytes (likewise) */
        zr_pack *pack;        /* a packed stream's (pack.h), or NULL */
        /* an image stream (imgstream.c): its decode, and the bytes a batch's
         * encoded records may take; `ragged` is 0 (its region is dense) */
        int image;
        zr_image_params img;
        uint64_t in_capacity;
        /* direct reads (fill-direct.c): its chunk files opened with O_DIRECT,
         * at its first direct step; NULL before */
        _Atomic(struct ldirect *) direct;
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
        /* from the step's read ahead (prefetch.c), set at the claim: */
        int io_error;         /* positive errno: its reads failed, so fails the fill */
        int cold;             /* its unit's cold: gathered with pread */
        int direct;           /* its unit's direct: read with O_DIRECT (fill-direct.c) */
        uint64_t plan_owner;  /* consumes the step's planned cache uses (batch.h) */
        /* telemetry (telemetry.h), set at the claim: time the fill, and its
         * stages in detail (batch.h, zr_gather_times) */
        int timed, detail;
} work;

/* What a group reads ahead (prefetch.c): one unit per step of a window. */
enum pf_io {
        PF_IO_NONE = 0,   /* not read ahead (planned only, or not yet) */
        PF_IO_READING,    /* a job or its reads run: a fill of the step waits */
        PF_IO_DONE,       /* read, found resident, cancelled or skipped */
        PF_IO_FAILED,     /* a read failed: the step's fill fails with `error` */
};

struct group;

/* A unit's fetches of remote records (dataset/rdataset.h): one wait per
 * remote stream, cancelled when the group goes away before they end. The job
 * fills ds and w before and after submitting; the callback sets done (under
 * the engine's mutex), as does a cancel. */
typedef struct pf_rwait {
        struct pf_unit *u;
        zr_dataset *ds;
        zr_mirror_wait_t *w;
        zr_rpin pin;          /* what it fetches, kept in the disk cache until the
                               * step's fill ran (released when the unit is
                               * consumed or the group goes away) */
        uint8_t done;
} pf_rwait;

typedef struct pf_remote {
        size_t n;
        pf_rwait waits[];
} pf_remote;

typedef struct pf_unit {
        struct group *g;
        uint64_t step;
        _Atomic uint32_t pending; /* READING: the job, its read batch and its fetches
                                   * not ended yet; the last to end finishes the unit */
        pf_remote *remote;    /* its fetches of remote records and their pins, or NULL */
        uint64_t ioq_id;      /* its batch in the I/O queue, 0 if none */
        uint64_t bytes;       /* bytes it asked for, held against the budget */
        uint64_t submit_ns;
        uint8_t io;           /* enum pf_io */
        uint8_t job;          /* a job works on it: nobody else touches it */
        uint8_t planned;      /* its compressed records' uses are planned */
        uint8_t consumed;     /* its step's fill completed (or it was given up) */
        uint8_t waited;       /* a fill of its step found it still reading */
        uint8_t cold;         /* its job found most records not resident, and large */
        uint8_t direct;       /* its job found most records not resident, and its
                               * streams take direct reads: nothing read ahead, the
                               * fill reads with O_DIRECT */
        int error;            /* PF_IO_FAILED: positive errno */
} pf_unit;

typedef struct pf_state {
        zr_loader_engine *e;
        pf_unit *units;       /* cap of them, unit of step s at s % cap */
        uint32_t cap;
        uint64_t lo;          /* oldest step with a unit not consumed */
        uint64_t io_hi;       /* steps [lo, io_hi) are read ahead (or being) */
        uint64_t plan_hi;     /* steps [lo, plan_hi) are planned */
        int job;              /* a job runs for the group */
        unsigned io_inflight; /* units READING (a job, then its batch's callback) */
        uint64_t owner;       /* its plans' owner in the cache (unique, not 0) */
        uint64_t period_ns;   /* the group's time per step (moving average) */
        uint64_t last_done_ns;
        uint64_t last_eta_ns; /* of its latest plan */
        uint64_t reads_per_step; /* moving averages over its read-ahead steps */
        uint64_t bytes_per_step;
        _Atomic uint64_t held; /* bytes its units hold against the budget */
        uint32_t depth;       /* steps read ahead of the leading fill, now */
        uint32_t horizon;     /* steps planned ahead of it, now */
        int remote;           /* it reads stores in object storage (rdataset.h) */
        uint32_t plan_credit; /* steps it may still plan before its next fill */
        uint64_t plan_cap;    /* no plans while the cache holds more (every group's) */
        /* telemetry: a fill of wait_step has waited for its reads ahead (or for
         * the job that reads them) since wait_ns; 0: none waits */
        uint64_t wait_step, wait_ns;
        /* steps in a row its jobs found resident (nothing to read); from
         * PF_WARM_RUN on, the group reads ahead only one step in PF_WARM_EVERY
         * (steps before quiet_until have no job) until a job finds one not */
        uint32_t warm_run;
        uint64_t quiet_until;
} pf_state;

/* A gather that found a stream's lock taken exclusive (a mutation in
 * progress): it keeps its claim and waits here, holding no worker, until the
 * scheduler resumes it. One node per slot, allocated with the ring. */
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
        uint8_t *sources;     /* a mixture: batch_size, each record's source; else NULL */
        zr_loader_stream_batch *sb; /* nstreams */
        parked_work park;     /* its fill, while parked */
        /* its fill is for a loader that closed, and no other member waits for
         * it: the fill stops at its next check (ECANCELED), and no member
         * takes the slot meanwhile (set under the engine mutex, read by the
         * filling worker without it) */
        _Atomic int cancel;
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
        uint64_t ann_ns;      /* when it was announced (telemetry: the ready wait) */
} claim;

/* A ring made ahead, never passed to anyone, pre-faulted whole. */
typedef struct spare {
        struct spare *next;
        zr_shm shm;
} spare;

/* Loaders with the same key (loader.h, "Shared work") and their rings. */
typedef struct group {
        struct group *next;
        zr_loader *members;   /* linked by zr_loader.g_next */
        size_t nmembers;
        ring *rings;
        pf_state pf;
} group;

struct zr_loader {
        zr_loader_engine *e;
        void *userdata;
        size_t nstreams;      /* streams of a batch: regions of a slot */
        uint32_t nsources;    /* a mixture's sources, or 0 */
        size_t nall;          /* streams: nstreams, or nsources × nstreams,
                               * source-major (sources.c) */
        lstream *streams;
        zr_sampler_params sp; /* step is set per gather (a mixture's: unused but
                               * for batch_size, rank, world_size and seed) */
        zr_mixture *mix;      /* a mixture's sampler, or NULL */
        /* The engine counts its own steps: its step v is the batch of step
         * phase + v × stride (a stride of 1: v itself), so claims, groups and
         * reading ahead run over consecutive numbers whatever the stride;
         * zr_loader_step() maps one to the other at the edges (the sampler,
         * the events). */
        uint64_t start;       /* start step, the engine's */
        uint64_t stride;      /* >= 1 */
        uint64_t phase;       /* < stride */
        uint64_t length;
        uint32_t nslots;
        uint64_t slot_bytes;
        ring *own;            /* its ring (in g->rings); NULL once it left */
        claim *claims;        /* nslots */
        /* Depth (loader.c, "depth"; docs/DESIGN.md): it holds at most
         * `depth` claims. */
        uint32_t depth;       /* 1..nslots */
        int depth_fixed;      /* depth is nslots for good: small slots, or a
                               * client that reports no waits */
        uint32_t depth_releases; /* RELEASEs, and those with a wait, while it */
        uint32_t depth_reports;  /* is not fixed yet */
        uint32_t depth_settle; /* reports not judged yet: the first slots' faults
                                * and a new depth's start are not its pace */
        uint32_t depth_votes; /* reports in a row that asked for more depth */
        uint64_t held_since;  /* held back by its depth since (ns), 0: not now */
        uint64_t held_idle0;  /* the pool's idle time then (zr_pool_idle_ns()) */
        uint64_t held_ns;     /* held back while a worker was idle, since the
                               * last wait its client reported */
        uint64_t ann_last_ns; /* its latest announcement */
        uint64_t rel_last_ns; /* its latest RELEASE (or its open) */
        uint64_t rel_period_ns; /* between its RELEASEs (moving average) */
        int relief_armed;     /* a RELEASE came since its last relief */

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

        unsigned inflight;    /* fills and read-ahead jobs claimed on its behalf
                               * and not completed */
        int closing;
        int paused;           /* opened paused: no work, no event until started */
        int orphan;           /* closed while work of it ran: goes when inflight
                               * reaches 0 (zr_loader_close()) */
        zr_loader *gone_next; /* in the engine's gone queue */
        uint64_t work_bytes;  /* its working memory (zr_loader_work_bytes()) */
        int in_runq, in_readyq;
        zr_loader *run_prev, *run_next;
        zr_loader *ready_next;
        group *g;
        zr_loader *g_next;
        zr_loader_counters c;
        /* telemetry (telemetry.h; engine mutex) */
        zr_telemetry tel;
        uint64_t enq_ns;      /* queued for a worker with none of its work running, 0 */
        int detail;           /* its next fill is timed in detail (batch.h) */
        /* control memory (ctlring.h), if has_ctl: batches announced there, and
         * releases taken from there (loader.c, ctl_*()) */
        zr_ctlring ctl;
        int has_ctl;
        int ctl_wake;         /* a WAKE is due (the client waits on its socket) */
        int ctl_broken;       /* it lied: nothing more is read from it */
        int ctl_reap;         /* a release freed a retiring ring's slot: reap at the loop */
        unsigned fills_out;   /* fills claimed by it (w->l) not completed: each
                               * takes its releases when it ends (ctl_turn()) */
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
        /* loaders closed while their work ran, gone since: the daemon collects
         * them (zr_loader_engine_gone()) */
        zr_loader *gone_head, *gone_tail;
        unsigned norphans;    /* closed, not yet gone */
        uint64_t relief_ns;   /* the retry thread's latest look for reliefs (loader.c) */
        parked_work *parked;  /* gathers waiting for a stream's lock */
        parked_work *resume;  /* parked gathers to retry, before new claims */
        group *groups;
        uint32_t next_ring_id;
        spare *spares;        /* ready spare rings */
        uint64_t spare_max;   /* budget of spare rings, bytes */
        uint64_t spare_reserved; /* ready and being made */
        uint64_t spare_ready;
        unsigned nspares;     /* ready spare rings (ring.c bounds them) */
        unsigned nspare_tasks;
        uint64_t nloaders;
        uint64_t fills;       /* fills completed, all loaders */
        /* reading ahead (prefetch.c) */
        zr_ioq *ioq;          /* borrowed; NULL: no reading ahead */
        /* bytes read ahead and not yet gathered: at most the budget, reserved
         * by the jobs (prefetch.c) without the mutex */
        _Atomic uint64_t pf_budget;
        _Atomic uint64_t pf_bytes;
        _Atomic uint64_t pf_peak;
        /* records whose reads were asked for: counted before the reads are
         * submitted, so a STATUS never sees a read's bytes without its records
         * (the queue counts bytes as reads complete, maybe before the job that
         * submitted them is back under the mutex) */
        _Atomic uint64_t pf_records;
        uint64_t next_owner;
        /* direct reads (fill-direct.c), counted by the fills without the mutex */
        _Atomic uint64_t direct_steps, direct_bytes, direct_copied, direct_fallbacks;
        _Atomic uint64_t direct_errors;
        _Atomic int direct_mode; /* enum zr_direct_mode (zr_loader_engine_set_direct()) */
        _Atomic uint64_t direct_min; /* zr_loader_engine_set_direct_min() */
        zr_loader_engine_counters t;
        zr_tokstore *tokstore;   /* borrowed; NULL: packed loaders' indexes in memory */
        zr_tokstore *tok_memory; /* the engine's own store without a directory */
        _Atomic int telemetry; /* loaders keep telemetry (on unless the engine's
                                * owner turns it off) */
        /* slots of at most this many bytes of a warm group are filled on the
         * releasing thread (zr_loader_engine_set_inline()); 0: never */
        uint64_t inline_max;
};

/* The result of a fill. */
typedef struct fill_result {
        int code;             /* 0 or positive */
        int busy;             /* a stream's lock was taken exclusive: park */
        uint64_t needed;
        char msg[ZR_ERROR_MESSAGE_MAX];
        uint64_t hits, misses, bytes, evictions;
        uint64_t records;     /* records gathered, every stream's */
        /* a timed fill (work.timed): its wall time and its stages' */
        uint64_t fill_ns;
        zr_gather_times times;
} fill_result;


/* ---- fill-direct.c (no mutex) ----------------------------------------------- */

/* 1 if every stream of l can be read with direct reads (raw, dense, local, one
 * dataset each, a file system that has not refused them) and the engine has a
 * read queue. */
int zr_fill_direct_capable(const zr_loader *l);
/* The mode that applies to l's next step read ahead: OFF when its streams are
 * not direct-capable, or in AUTO when its stores fit (their data, each dataset
 * once, at most the engine's direct_min; *fits is then set to 1, else 0). */
enum zr_direct_mode zr_fill_direct_mode(const zr_loader *l, int *fits);
/* Reads the records of the located dense gather g of stream st into dst (the
 * stream's region of the slot) with O_DIRECT, for the client's step `step`.
 * Returns 0 when they are read, 1 when the caller must gather them itself
 * (anything unusual, a read refused: counted as a fallback), or a negative
 * code with *err set when the device failed a read (EIO). Adds its read time
 * and bytes to *times (may be NULL). The caller holds the stream's dataset
 * lock shared. */
int zr_fill_direct(zr_loader *l, lstream *st, const zr_gather *g, uint8_t *dst, uint64_t step,
                   zr_gather_times *times, zr_error *err);
/* Closes st's direct descriptors (the loader's end). */
void zr_fill_direct_free(lstream *st);

/* A slot is busy while a claim names it or a fill runs on it. */
static inline int slot_busy(const slot *sl) {
        return sl->refs > 0 || sl->filling;
}

/* ---- loader.c: the scheduler (engine mutex held) ---------------------------- */

/* Puts l at the tail of the run queue if it has work and is not queued. */
void zr_sched_run(zr_loader_engine *e, zr_loader *l);
/* Queues l for collection if it has an event. Returns 1 if notify is due. */
int zr_sched_ready(zr_loader_engine *e, zr_loader *l);
/* Call after l->inflight dropped: a closed loader whose last work ended is
 * queued as gone. Returns 1 if notify is due. l must not be touched after
 * the engine mutex is released. */
int zr_sched_left(zr_loader_engine *e, zr_loader *l);

/* ---- group.c (engine mutex held) -------------------------------------------- */

/* Joins the group of l's key (creating it from `fresh`, else freeing fresh),
 * with its ring. Returns 1 if notify is due (the other members have a RING to
 * collect). */
int zr_group_join(zr_loader_engine *e, zr_loader *l, group *fresh);
/* Leaves l's group; the last member unlinks it from the engine (the caller
 * frees it once its rings are reaped). */
void zr_group_leave(zr_loader_engine *e, zr_loader *l);
/* Requeues every member: a slot became free, or a batch some wait for came. */
void zr_group_wake(zr_loader_engine *e, group *g);
/* Moves g's retiring rings that nothing uses any more to *dead (released by
 * the caller, outside the mutex, with zr_rings_release()). Members that knew
 * one get a RING_CLOSE: returns 1 if notify is due. */
int zr_group_reap(zr_loader_engine *e, group *g, ring **dead);
/* A slot of a live ring of g that holds `step` or is being filled with it. */
slot *zr_group_find(const group *g, uint64_t step);
/* A free slot of a live ring of g to fill, or NULL. */
slot *zr_group_pick(const group *g);
/* The ring of g with id `id`, or NULL. */
ring *zr_group_ring(const group *g, uint32_t id);
/* Whether l was told of ring `id`; telling it (-ENOMEM). */
int zr_group_knows(const zr_loader *l, uint32_t id);
int zr_group_know(zr_loader *l, uint32_t id);
/* 1 if a ring l knows is gone or a live ring of its group is new to it. */
int zr_group_news(const zr_loader *l);

/* ---- prefetch.c (engine mutex held unless said) -------------------------------- */

/* A job that reads one step ahead, claimed under the mutex and run without it. */
typedef struct pf_job {
        zr_loader *l;
        pf_unit *u;
        int do_io, do_plan;
        uint64_t eta_ns;
        /* results, for zr_pf_job_end() */
        uint64_t bytes, reads, records, resident, cached;
        uint64_t id;          /* its batch, if submitted */
        int submitted, warm, busy;
        uint64_t missing_bytes; /* of the records not resident */
        uint64_t remote_bytes;  /* of remote records it asked the fetcher for */
        int cold;             /* most records not resident, and large (ZR_GATHER_PREAD_MIN) */
        int direct;           /* most records not resident, streams direct-capable */
        int fits;             /* so, but its loader's stores fit (AUTO): not direct */
} pf_job;

/* Sets up a new group's window (-ENOMEM). */
int zr_pf_group_init(zr_loader_engine *e, group *g, const zr_loader *l);
/* The group's last member left: cancels its reads and waits for them (the
 * mutex is released while waiting); frees the window. Its plans are dropped
 * by zr_pf_group_drop_plans() once the mutex is released. */
void zr_pf_group_fini(zr_loader_engine *e, group *g);
void zr_pf_group_drop_plans(zr_loader_engine *e, uint64_t owner, const zr_loader *l);
/* 1 if a job should read or plan ahead for l's group now. */
int zr_pf_job_due(zr_loader_engine *e, const zr_loader *l);
/* Claims the next job for l's group into *j (a job must be due). */
void zr_pf_job_start(zr_loader_engine *e, zr_loader *l, pf_job *j);
/* Runs it: no lock held, on a worker. */
void zr_pf_job_run(zr_loader_engine *e, pf_job *j);
/* Applies its result; wakes the group's members. */
void zr_pf_job_end(zr_loader_engine *e, pf_job *j);
/* 1 if the fill of `step` for l may start now (its reads are done, or it is
 * not read ahead and will not be), and sets w's io_error and plan_owner;
 * 0 if it waits for its reads (the group is woken when they end). */
int zr_pf_ready(zr_loader_engine *e, const zr_loader *l, uint64_t step, work *w);
/* l claimed the fill of `step`: what its unit read is about to be copied, so
 * it leaves the budget (the next steps' reads overlap the gather); a fill
 * that had to wait for its reads is counted. */
void zr_pf_claimed(zr_loader_engine *e, zr_loader *l, uint64_t step);
/* The fill of `step` completed, or was given up: its unit is consumed. */
void zr_pf_consumed(zr_loader_engine *e, group *g, uint64_t step);
/* 1 if l's group's recent steps were all found resident (the read ahead is
 * sparse, PF_WARM_RUN): a fill of it faults no page in, as far as anyone
 * knows. */
int zr_pf_warm(const zr_loader *l);
/* Cancels the reads of every group that reads dataset `ds` and waits for
 * them (the mutex is released while waiting). */
void zr_pf_quiesce(zr_loader_engine *e, const zr_dataset *ds);

/* ---- ring.c ------------------------------------------------------------------ */

/* Makes l->own: nslots slots of slot_bytes (a spare of that size if there is
 * one), each with its batch metadata, in one block. Takes the engine mutex
 * only to look for a spare. */
int zr_ring_new(zr_loader *l, zr_error *err);
/* Unmaps and frees a ring (NULL allowed), or a list of them: outside the
 * engine mutex (munmap can take long). */
void zr_ring_release(ring *r);
void zr_rings_release(ring *list);
/* Faults slot sl's pages in on the pool before its first fill (a worker, no
 * lock held). */
void zr_ring_populate(zr_loader_engine *e, slot *sl);
/* Engine mutex held: starts making a spare ring of `bytes` on the pool if the
 * budget allows. */
void zr_spare_make(zr_loader_engine *e, size_t bytes);
/* Releases a list of spares, outside the engine mutex. */
void zr_spares_release(spare *list);

/* ---- sources.c: which records a step reads ---------------------------------- */

/* The records of one step, grouped by source (a plain loader: one source). */
typedef struct step_records {
        uint64_t *idx;        /* batch_size, in batch order */
        uint8_t *src;         /* a mixture: each record's source; else NULL */
        uint64_t *by_source;  /* the indices grouped by source, each source's in
                               * batch order (a plain loader: idx itself) */
        uint32_t *from;       /* source k's are by_source[from[k] .. from[k + 1]) */
        void *mem;
} step_records;

/* The lstream of stream i of source k. */
static inline lstream *loader_stream(const zr_loader *l, uint32_t k, size_t i) {
        return &l->streams[(size_t)k * l->nstreams + i];
}

/* Sources of l's streams: 1 for a plain loader. */
static inline uint32_t loader_sources(const zr_loader *l) {
        return l->nsources ? l->nsources : 1;
}

/* A mixture (l->nsources > 0), once fill.c opened every stream: checks that
 * stream i of every source has the schema of source 0's (ZR_E_SCHEMA naming the
 * stream, the sources and the difference; codecs may differ), the lengths the
 * client expects (ZR_E_STALE), and makes l->mix from the sources' lengths (the
 * sampler's refusals, ZR_E_SAMPLER, at p->start_step too). */
int zr_sources_setup(zr_loader *l, const zr_loader_params *p, zr_error *err);
/* Frees l->mix. */
void zr_sources_free(zr_loader *l);
/* The engine's step after a loader's last one (a mixture's last_step + 1, the
 * sampler's 2^64, and for a stride k > 1 the first of its steps past them), as
 * an offset from l->start; 0 with *ret_unbounded set when it is 2^64 - start
 * past a start of 0 and a stride of 1 (no offset holds it). */
uint64_t zr_sources_end(const zr_loader *l, int *ret_unbounded);
/* Allocates r's arrays for l's batches (-ENOMEM). */
int zr_step_records_init(const zr_loader *l, step_records *r);
void zr_step_records_free(step_records *r);
/* The records of the engine's step `step` (zr_loader_step()) into r (a
 * mixture: each record's source too; the sampler's errors, ZR_E_SAMPLER).
 * With `by_source`, also r->by_source and r->from. */
int zr_step_records_get(const zr_loader *l, uint64_t step, step_records *r, int by_source,
                        zr_error *err);

/* The step (the client's) of the engine's step v of l. */
static inline uint64_t zr_loader_step(const zr_loader *l, uint64_t v) {
        return l->phase + v * l->stride;
}

/* ---- fill.c ------------------------------------------------------------------ */

/* Sets up l's streams from streams[0..l->nstreams) and *p: each stream's
 * length and generation read under its lock, the sampler's parameters, each
 * stream's region and capacity and the slot size (errors as zr_loader_new()).
 * No lock held. */
int zr_fill_setup(zr_loader *l, const zr_loader_stream *streams, const zr_loader_params *p,
                  zr_error *err);
/* Fills slot w->sl with the batch of step w->step: every stream gathered into
 * its region and the slot's metadata. On a worker, no lock held; a stream's
 * lock it cannot take at once sets res->busy. */
void zr_fill(zr_loader *l, const work *w, fill_result *res);

/* ---- imgstream.c: image streams (loader.h, zr_loader_stream.image) ------------ */

/* At open, after st->img was copied: checks the stream's dataset (ragged |u1
 * of ndim 1), takes a native size and the pixel limit from its schema where
 * the client gave none, checks the decode and sets st->capacity to the
 * region's bytes (batch_size decoded images). ZR_E_SCHEMA, ZR_E_PROTO. */
int zr_imgstream_setup(zr_loader *l, lstream *st, zr_error *err);
/* The working memory of l's image streams: each of at_once + 1 fills' staging
 * and tables, each decoding thread's scratch (image.h). */
uint64_t zr_imgstream_work_bytes(const zr_loader *l, unsigned at_once);

/* One fill of an image stream: its encoded records and their tables. */
typedef struct imgbatch {
        uint8_t *staging;
        uint64_t *arrays;
} imgbatch;

/* Before zr_gather_locate(): the gather's tables for B encoded records. */
int zr_imgbatch_begin(imgbatch *ib, const lstream *st, uint64_t B, zr_gather *g, zr_error *err);
/* After zr_gather_locate() (the caller checked g->bytes against
 * st->in_capacity): reads the records, then decodes each into dst (the
 * stream's region) for `step` (the client's). *ret_skipped: records served as
 * zeros (image_skip). Errors name the record. */
int zr_imgbatch_read(imgbatch *ib, zr_loader *l, const lstream *st, zr_gather *g, uint64_t step,
                     uint8_t *dst, uint32_t *ret_skipped, zr_error *err);
/* Frees what the fill took. Idempotent. */
void zr_imgbatch_end(imgbatch *ib);

/* ---- measure.c: telemetry (engine mutex held) -------------------------------- */

/* A completed fill: its time, its stages, whether l's next fill is timed in
 * detail. */
void zr_measure_fill(zr_loader *l, const fill_result *res);
/* A completed fill's cache hits and misses. */
void zr_measure_cache(zr_loader *l, const fill_result *res);
/* Claim cl's batch announced now: a batch, its bytes, cl->ann_ns. */
void zr_measure_announce(zr_loader *l, claim *cl);
/* l taken from the run queue by a worker whose last work, for group prev_g,
 * took prev_ns: its wait behind other loaders (contention). */
void zr_measure_queue(zr_loader *l, const group *prev_g, uint64_t prev_ns);
/* The client's report with its release of claim cl: its wait, when it took
 * the batch (each checked against the daemon's clock). */
void zr_measure_take(zr_loader *l, const claim *cl, const zr_loader_take *take);

#endif
