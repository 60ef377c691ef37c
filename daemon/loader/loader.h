/* loader.h: the loader engine: prefetching rings of batches, resume by step,
 * work shared between identical loaders, a decoded-record cache, fair worker
 * time. PROTOCOL.md section 10 is the contract this layer fills.
 *
 * It is six files, one concept each (loader-private.h says what they share):
 * loader.c (the scheduler, and the functions below), group.c (groups of
 * identical loaders and their pool of slots), ring.c (rings, pre-faulting,
 * spare rings), fill.c (the streams' slot layout and the fill of a slot),
 * sources.c (which records a step reads: the sampler's, or a mixture's from
 * its sources) and prefetch.c (reading ahead).
 *
 * Objects
 *
 *   zr_loader_engine  one per daemon. Owns the decoded-record cache (a byte
 *                     budget, settable at run time), the groups of identical
 *                     loaders, the round-robin run queue, the queue of loaders
 *                     with events to collect, and the totals. Borrows a
 *                     zr_pool (it must have at least one thread).
 *   zr_loader         one per LOADER_OPEN. Makes one ring (one memfd, slots ×
 *                     slot_bytes, a lazy region of util/shm.h, sealed as every
 *                     daemon-made one; each slot is pre-faulted on the workers
 *                     just before its first fill, so opening costs the loop
 *                     thread no page faults and no fill ever takes one; a slot
 *                     never filled is never faulted in) with each slot's batch
 *                     metadata (ragged offsets, lengths, shapes; indices), and
 *                     gives it to its group (below). Holds at most `slots`
 *                     claims on batches, wherever they lie. Borrows its
 *                     streams' datasets (zr_loader_stream).
 *
 * Threads
 *
 *   The daemon's loop thread calls every function of this header, but
 *   zr_loader_new(), which may block on its streams' locks and read them and
 *   so runs on a worker (opened paused, started with zr_loader_start() on the
 *   loop, which alone touches the loader meanwhile). Pool workers
 *   run "drain" tasks (at most one per pool thread at once): each takes the loader
 *   at the head of the run queue, claims one (free slot, next step) of it, puts
 *   the loader back at the tail if it still has a free slot (so worker time goes
 *   round-robin, one batch per turn; a new loader's first fill runs alone so
 *   that its first batch gets every core). A step that a slot of the group
 *   holds or is being filled with costs no work: the loader takes that slot.
 *   Otherwise the worker gathers the batch into a free slot (under each
 *   stream's lock taken shared, records decoded through the cache). A batch
 *   that is the next to announce for any loader waiting for it puts that
 *   loader on the engine's ready queue and calls notify(). No worker ever
 *   calls into the daemon except notify().
 *
 *   The daemon implements notify() by waking its loop (write an eventfd) and,
 *   on the loop, drains: while (zr_loader_engine_next(e, &l) > 0) while
 *   (zr_loader_poll(l, &ev) > 0) send(ev). Events of a loader come out in step
 *   order, each step exactly once, then at most one END.
 *
 * Slots and claims
 *
 *   A slot is free (it may still hold an old batch that a member can take),
 *   filling (a gather runs or is parked on it), or filled. A loader's claim on
 *   a step names the slot of that step; it is announced (zr_loader_poll()) when
 *   the slot is filled and the step is the next in order, and it is held from
 *   then until zr_loader_release(). A slot is refilled only when no claim names
 *   it and no fill runs on it. The engine never writes a slot a claim names.
 *
 * Shared work (what is shared and what is not)
 *
 *   Loaders with the same key (streams' dataset ids and generations, sampler,
 *   seed, batch_size, rank, world_size, slot layout; a mixture's sources with
 *   their samplers and weights) form a group, and the rings
 *   of the members are one pool of slots. The batch of a step is gathered once,
 *   into any free slot of the pool, and every member that reaches that step
 *   takes the same slot: nothing is copied per member ("gathers" counts the
 *   gather once, "shared" counts the takes). The pool holds the sum of the
 *   members' slots and a member claims at most its own number, so a member
 *   with a claim to spare always finds a free slot: one that runs ahead
 *   gathers for itself, and a slow one stalls nobody. Fills prefer slots whose
 *   pages are resident, so members in step use about one ring's memory.
 *   A member takes a step its group holds or is filling as soon as it can
 *   (when it releases a slot, or when another member starts that step's
 *   gather), never at its turn in the run queue: a member kept waiting there
 *   would fall behind what the slots keep and gather every step again.
 *   Members further apart than the slots keep share nothing.
 *
 *   The client of a member maps every ring of its group: zr_loader_poll()
 *   gives a RING event for each ring before the first batch that names it,
 *   and a RING_CLOSE once the ring is gone. A ring outlives its loader while a
 *   member claims one of its slots (retiring: never filled again), then is
 *   unmapped and closed by the engine.
 *
 *   A fill gathers each stream with the dataset layer's batch gather
 *   (dataset/batch.h), which READ uses too. Compressed streams (zstd,
 *   zstd_dict) decode through one cache of decoded records shared by every
 *   loader, keyed by (dataset id, generation, index), LRU within a byte budget;
 *   raw streams bypass it (a raw gather is already one copy out of the page
 *   cache).
 *
 * Staleness
 *
 *   Every gather takes each stream's lock shared (trying: if a mutation holds
 *   it, the gather is parked and retried, see zr_loader_engine_resume(), so a
 *   long compaction of one dataset holds no worker and stalls no other loader)
 *   and checks, before and after, that the stream's generation is the one seen
 *   at open. A gather (or a take of a slot) that starts after a change ends the
 *   loader with ZR_E_STALE at its step; batches gathered before the change are still
 *   announced (they are intact); a batch gathered across a change is never
 *   announced.
 *
 * Lock order
 *
 *   A fill:     a stream's dataset lock (dataset.h: shared, tried, one at a
 *               time, never nested) → the cache's mutex (leaf, cache.h) →
 *               pool->mutex (leaf, pool.h).
 *   Scheduling: engine->mutex → pool->mutex (a drain task is submitted with
 *               zr_pool_try_submit(), which never blocks).
 *   Reading ahead: a job holds its streams' locks shared (tried) while it
 *               submits to the I/O queue (its lock, a leaf); the queue's
 *               callbacks take engine->mutex alone.
 *   Quiesce:    a mutation's exclusive dataset lock → engine->mutex (only
 *               zr_loader_engine_quiesce(), which waits for jobs and reads
 *               that never wait for a dataset lock).
 *   Otherwise engine->mutex and a stream lock are never held together; the
 *   engine's retry thread takes only engine->mutex; zr_loader_new() takes each stream's
 *   lock shared (blocking) on the caller's thread, holding nothing else. No
 *   callback (notify) runs with any of these held.
 *
 * Errors: functions that can fail return a negative code (-errno or -ZR_E_*)
 * and fill *err (may be NULL) with one line naming the field or stream.
 */
#ifndef ZR_LOADER_LOADER_H
#define ZR_LOADER_LOADER_H

#include <stddef.h>
#include <stdint.h>

#include "dataset/dataset.h"
#include "image/image.h"
#include "io/ioq.h"
#include "loader/pack.h"
#include "loader/telemetry.h"
#include "loader/tokindex.h"
#include "sampler/sampler.h"
#include "util/error.h"
#include "util/pool.h"

typedef struct zr_loader_engine zr_loader_engine;
typedef struct zr_loader zr_loader;

/* Called from a pool worker (never with an engine lock held) when a loader
 * has an event to collect and was not already waiting to be collected. Must be
 * cheap and must not call into this header: write an eventfd. */
typedef void (*zr_loader_notify_fn)(void *userdata);

/* ---- the engine ------------------------------------------------------------ */

/* Creates the engine. `pool` (borrowed, must outlive the engine, at least one
 * thread) runs the gathers; `cache_bytes` is the decoded-record cache's budget
 * (0 disables the cache); notify(notify_userdata) is called as above (notify
 * may be NULL for a caller that polls). Returns 0 and sets *ret, or -EINVAL (no
 * pool or a pool without threads), -ENOMEM. */
int zr_loader_engine_new(zr_pool *pool, uint64_t cache_bytes, zr_loader_notify_fn notify,
                         void *notify_userdata, zr_loader_engine **ret, zr_error *err);

/* Frees the engine. Every loader must have been freed first (the engine then
 * waits for its last drain task to return). NULL allowed. Returns NULL. */
zr_loader_engine *zr_loader_engine_free(zr_loader_engine *e);

/* Sets the cache budget (SIGHUP); evicts down to it at once. */
void zr_loader_engine_set_cache_bytes(zr_loader_engine *e, uint64_t cache_bytes);

/* Drops every cached record of `dataset_id` (call after a mutation of that
 * dataset, once its lock is released; entries of old generations would only
 * waste budget), and resumes parked gathers as zr_loader_engine_resume() does.
 * Entries in use by a gather are freed when it ends. */
void zr_loader_engine_drop_dataset(zr_loader_engine *e, uint64_t dataset_id);

/* The store of packed loaders' indexes (tokindex.h; borrowed: it must outlive
 * the engine). Without one, packed loaders build their indexes in memory. */
void zr_loader_engine_set_tokstore(zr_loader_engine *e, zr_tokstore *ts);

/* Sets the budget of spare rings (0 at creation: none). A fresh ring costs a
 * page fault per 4 KiB page before its first batch (1.7 to 5 us each here: 30
 * to 80 ms for a 64 MiB slot), which dominates the time from LOADER_OPEN to the
 * first batch. With a budget, each freed loader leaves behind (made on the
 * pool, in the background, once no member of its group uses it any more) a
 * new, never-passed, pre-faulted ring of its size, and the next loader of
 * exactly that ring size takes it, so a resumed run's first batch costs one
 * gather. At most 4 spares are kept (the oldest goes first), so small rings
 * cannot pile up descriptors. Spares beyond a lowered budget are released. */
void zr_loader_engine_set_spare_bytes(zr_loader_engine *e, uint64_t bytes);

/* Reads ahead through `ioq` (borrowed: it must outlive the engine; NULL stops
 * reading ahead), at most `budget` bytes read and not yet gathered, every
 * loader together (0: none). Each group of loaders reads its next steps'
 * records that are neither resident nor decoded in the cache, several steps
 * ahead of its fills, and plans its compressed records' uses in the cache so
 * that it evicts by next use (cache.h); docs/IO.md says how and why. Call it
 * before the first loader opens to change the queue; the budget may change
 * at any time (SIGHUP). */
void zr_loader_engine_set_io(zr_loader_engine *e, zr_ioq *ioq, uint64_t budget);

/* Which steps are read with O_DIRECT straight into their slots when their
 * streams allow it (docs/IO.md, "Direct reads"): none (OFF: the page cache);
 * those found mostly not resident of a loader whose stores could not stay
 * resident anyway: more data than zr_loader_engine_set_direct_min() says
 * (AUTO, the default); those found mostly not resident whatever the stores'
 * size (ALWAYS); or every step (EVERY: for tests, which need a direct step on
 * a store that stays resident, such as one on a tmpfs). Any time; applies to
 * the steps read ahead from then on. */
enum zr_direct_mode {
        ZR_DIRECT_OFF = 0,
        ZR_DIRECT_AUTO = 1,
        ZR_DIRECT_ALWAYS = 2,
        ZR_DIRECT_EVERY = 3,
};
void zr_loader_engine_set_direct(zr_loader_engine *e, enum zr_direct_mode mode);
/* In AUTO, a loader's steps are read directly only while its stores (each
 * counted once) hold more than `bytes` of data (zr_store_data_bytes()): a
 * store that fits in the memory the daemon may keep resident is read through
 * the page cache, where it stays after its first pass. The daemon gives half
 * of its memory limit; 0 (the engine's default) makes AUTO read every store's
 * cold steps directly, as ALWAYS does. Any time. */
void zr_loader_engine_set_direct_min(zr_loader_engine *e, uint64_t bytes);
/* The name of a mode: "off", "auto", "always" or "every". */
const char *zr_direct_mode_name(enum zr_direct_mode mode);

/* Slots of at most `max_slot_bytes` (0, the default: none) are filled on the
 * thread that calls zr_loader_release(), the daemon's loop, rather than on a
 * worker, when the loader's streams are raw records of local stores (no
 * decode of any kind) and its group's recent steps were found resident
 * (reading ahead, PF_WARM_RUN in prefetch.c): a copy of at most that many
 * bytes from the page cache, tens of microseconds, instead of a worker's
 * wake-up there and an eventfd write back, each a context switch. One fill
 * per release at most; a step that turns out to need reading goes to a
 * worker. Any time. */
void zr_loader_engine_set_inline(zr_loader_engine *e, uint64_t max_slot_bytes);

/* Cancels the reads ahead of every loader of dataset `ds` and waits for them
 * to end. Call it with ds's exclusive lock held, before a mutation that may
 * close its files (delete, compact, install_dict): the reads name the store's
 * descriptors. Loop thread or a worker; holds the engine mutex while it waits
 * only in a condition wait, and no read or job it waits for needs ds's lock. */
void zr_loader_engine_quiesce(zr_loader_engine *e, const zr_dataset *ds);

/* A gather never blocks a worker on a stream's lock: if it cannot take it
 * shared at once (a mutation holds it, or, with a writer-preferring lock, waits
 * for it) the gather keeps its claim and is parked. The engine's own retry
 * thread retries parked gathers every 2 ms while any is parked; this call (and
 * zr_loader_engine_drop_dataset(), zr_loader_release(),
 * zr_loader_engine_next()) retries them at once: call it after releasing a
 * dataset's exclusive lock to spare a loader those 2 ms. Optional. */
void zr_loader_engine_resume(zr_loader_engine *e);

/* Pops a loader that has events to collect: returns 1 and sets *ret, or 0 when
 * none is left. The loader stays valid (the daemon owns it); collect its events
 * with zr_loader_poll() until it returns 0. Also retries a drain task that the
 * pool's queue refused earlier, so call it on every notify. */
int zr_loader_engine_next(zr_loader_engine *e, zr_loader **ret);

typedef struct zr_loader_engine_counters {
        uint64_t loaders;   /* open loaders */
        uint64_t batches;   /* batches announced, since start */
        uint64_t gathers;   /* gathers done (a group's gather counts once) */
        uint64_t shared;    /* batches taken from a slot another member filled */
        uint64_t hits;      /* cache lookups that found the record */
        uint64_t misses;    /* cache lookups that did not (compressed streams only) */
        uint64_t bytes;     /* bytes written into rings */
        uint64_t evictions; /* cache entries evicted to make room */
        uint64_t cache_budget;  /* bytes allowed */
        uint64_t cache_bytes;   /* bytes resident */
        uint64_t cache_entries; /* records resident */
        uint64_t spare_bytes;   /* spare rings ready (zr_loader_engine_set_spare_bytes()) */
        uint64_t bypassed;      /* cache inserts left out by the next-use rule */
        uint64_t planned;       /* planned cache uses now (every group's) */
        /* reading ahead (zr_loader_engine_set_io()) */
        uint64_t prefetch_budget;     /* bytes read ahead and not gathered, at most */
        uint64_t prefetch_bytes;      /* now */
        uint64_t prefetch_peak;       /* most at once, since start */
        uint64_t prefetch_steps;      /* steps whose reads were submitted */
        uint64_t prefetch_warm;       /* steps found resident: nothing read */
        uint64_t prefetch_cold;       /* steps found mostly not resident: read with pread */
        uint64_t prefetch_direct;     /* steps found mostly not resident: read with O_DIRECT */
        uint64_t prefetch_fits;       /* such steps of direct-capable streams read through
                                       * the page cache: their stores fit (AUTO) */
        uint64_t direct_mode;         /* enum zr_direct_mode in force */
        uint64_t direct_min;          /* zr_loader_engine_set_direct_min() */
        uint64_t direct_steps;        /* fills read with O_DIRECT straight into the slot */
        uint64_t direct_bytes;        /* bytes they read */
        uint64_t direct_copied;       /* bytes copied from their bounced blocks */
        uint64_t direct_fallbacks;    /* direct steps gathered through the page cache */
        uint64_t direct_errors;       /* direct steps failed by the device (EIO) */
        uint64_t prefetch_busy;       /* steps not read: a mutation held a lock */
        uint64_t prefetch_reads;      /* reads submitted (merged by the queue later) */
        uint64_t prefetch_read_bytes; /* bytes of them */
        uint64_t prefetch_records;    /* records read ahead */
        uint64_t prefetch_resident;   /* records found resident, not read */
        uint64_t prefetch_cached;     /* records found decoded in the cache, not read */
        uint64_t prefetch_waits;      /* fills that waited for their reads */
        uint64_t prefetch_errors;     /* steps whose reads failed */
        uint64_t prefetch_cancelled;  /* read batches cancelled (close, mutation) */
        uint64_t prefetch_depth;      /* the deepest any group read ahead, in steps */
        uint64_t planned_steps;       /* steps whose cache uses were planned */
        uint64_t inline_fills;        /* fills run by a release (zr_loader_engine_set_inline()) */
        uint64_t ctl_batches;         /* batches announced in control memory (ctlring.h) */
        uint64_t ctl_wakes;           /* WAKE events: a client waited on its socket */
        uint64_t ctl_faults;          /* loaders ended for lying control memory */
} zr_loader_engine_counters;

/* Fills *ret with the totals since the engine started. */
void zr_loader_engine_counters_get(zr_loader_engine *e, zr_loader_engine_counters *ret);

/* ---- a loader -------------------------------------------------------------- */

/* One stream of a loader. */
typedef struct zr_loader_stream {
        /* borrowed: it must stay open until zr_loader_free() returns (the
         * daemon holds a reference on it for the loader's lifetime). Its lock is
         * taken shared around each gather of this stream, its generation read
         * before and after, its id keys the cache and the group (dataset.h).
         * Two streams of one loader may name the same dataset. */
        zr_dataset *ds;
        /* ragged only: bytes reserved per slot for this stream's batch; 0 for the
         * default, 2 × batch_size × the mean record size (sampled) plus 8 bytes
         * of alignment per record, rounded up to ZR_STREAM_ALIGN. Ignored for
         * dense streams (exactly batch_size × record bytes). */
        uint64_t capacity;
        /* for messages ("stream 1 (label)"); may be NULL; copied (its first 47
         * bytes) */
        const char *name;
        /* packed token sequences (pack.h): mode ZR_PACK_NONE for a stream as
         * it is stored. A packed loader has one stream and one source; its
         * region holds the (batch_size, seq_len) tokens, segment ids and
         * positions, and `capacity` is ignored. */
        zr_pack_params pack;
        /* NULL, or an image stream's decode (image/image.h; copied): its records
         * are encoded images (a ragged |u1 dataset of ndim 1), and its region
         * holds them decoded, one dense (batch_size, out_h, out_w, channels)
         * uint8 block; `capacity` is then the bytes a batch's encoded records may
         * take (the ragged default when 0). imgstream.c. */
        const zr_image_params *image;
        /* an image stream's: a record that does not decode is zeros, counted
         * (zr_loader_stream_batch.skipped), instead of failing the loader */
        int image_skip;
} zr_loader_stream;

/* A source of a mixture (proto/SAMPLERS.md, "Mixtures"): a set of index-aligned
 * streams drawn with its own sampler, a weight of every batch. */
typedef struct zr_loader_source {
        enum zr_sampler_mode mode;
        uint32_t weight;      /* >= 1 */
        int has_length;       /* 1: `length` is the source's length the client expects */
        uint64_t length;
} zr_loader_source;

typedef struct zr_loader_params {
        /* the sampler; a mixture's sources have their own (`sources`) */
        enum zr_sampler_mode mode;
        uint64_t batch_size;  /* >= 1, <= the streams' length */
        uint64_t seed;
        uint64_t start_step;  /* any u64 */
        /* 0 or 1: steps start_step, start_step + 1, ...; k > 1: start_step,
         * start_step + k, start_step + 2k, ... (one of k consumers that take
         * turns, e.g. worker w of k: start_step + w) */
        uint64_t step_stride;
        uint32_t rank;        /* < world_size */
        uint32_t world_size;  /* >= 1 (0 is ZR_E_SAMPLER) */
        uint32_t prefetch;    /* slots, 1..ZR_PREFETCH_MAX (ZR_E_LIMIT otherwise) */
        int has_length;       /* 1: `length` is the length the client expects */
        uint64_t length;      /* if has_length and the streams differ: ZR_E_STALE */
        uint64_t ring_bytes_max; /* 0: no limit; else a larger ring is ZR_E_LIMIT */
        /* 0: no limit; else a loader whose working memory
         * (zr_loader_work_bytes()) is larger is ZR_E_LIMIT, before any of it
         * is allocated */
        uint64_t work_bytes_max;
        /* 1: the loader joins its group but does nothing, and has no event,
         * until zr_loader_start() (the daemon opens loaders on a worker and
         * starts them once the client knows their handle) */
        int paused;
        /* a mixture of nsources sources (1..ZR_MIXTURE_MAX_SOURCES), or 0: the
         * streams are one index-aligned set. A mixture's streams are source-major:
         * with S = nstreams / nsources streams per source, streams[k × S + i] is
         * stream i of source k, and stream i's region in a slot holds records of
         * every source's stream i. */
        uint32_t nsources;
        const zr_loader_source *sources;
        /* NULL, or a flag another thread sets when the client that opens the
         * loader goes: a packed stream's index build stops (ECANCELED) */
        const _Atomic int *cancel;
} zr_loader_params;

/* Opens a loader over streams[0..nstreams) (1..ZR_STREAMS_MAX per source;
 * copied) with params *p, and starts filling its slots. `userdata` is the
 * daemon's (see zr_loader_userdata()).
 *
 * Checks, in order: nstreams (ZR_E_PROTO; a mixture's: a multiple of its
 * sources), prefetch (ZR_E_LIMIT), equal stream lengths (within each source of
 * a mixture: ZR_E_MISALIGNED, naming every stream and its length), the
 * expected length (ZR_E_STALE), a mixture's sources alike (ZR_E_SCHEMA: stream
 * i of every source of one kind, dtype and item shape or ndim, the message
 * naming the stream, the sources and the difference; codecs may differ), the
 * sampler parameters with n = the length (ZR_E_SAMPLER: batch_size 0 or larger
 * than the length, rank >= world_size, world_size 0, ...; a mixture's as
 * mixture.h checks them, at start_step), the ring size (ZR_E_LIMIT over
 * ring_bytes_max, EOVERFLOW if it does not fit in memory), then creates the
 * ring (-errno of memfd or mmap). The lengths and generations are read under
 * each stream's lock. Returns 0 and sets *ret (release with zr_loader_free()).
 *
 * Example:
 *     zr_loader_stream s = { .ds = ds };
 *     zr_loader_params p = { .mode = ZR_SAMPLER_CYCLIC, .batch_size = 256, .seed = 7,
 *                            .start_step = 1000, .world_size = 1, .prefetch = 4 };
 *     r = zr_loader_new(engine, &s, 1, &p, session, &loader, &err); */
int zr_loader_new(zr_loader_engine *e, const zr_loader_stream *streams, size_t nstreams,
                  const zr_loader_params *p, void *userdata, zr_loader **ret, zr_error *err);

/* Starts a loader opened paused (zr_loader_params.paused). Any thread that
 * owns it. */
void zr_loader_start(zr_loader *l);

/* Stops the loader without waiting for anything: no new work of it starts, a
 * parked gather that another member waits for is handed to that member (the
 * others are dropped), events not collected are dropped. If no work of it
 * runs, drops its claims and frees it at once and returns 1: its datasets may
 * be released. Otherwise returns 0: the gathers or the read-ahead job it
 * started (at most one per worker, each bounded by its batch) run to their
 * end, then the engine queues it as gone and calls notify();
 * zr_loader_engine_gone() frees it and gives back its userdata, and only then
 * may its datasets be released. Its ring is unmapped and closed once no member
 * claims one of its slots (a descriptor the daemon dup()ed and passed stays
 * valid for the client). NULL allowed (returns 1). Loop thread; never waits
 * for a worker. */
int zr_loader_close(zr_loader *l);

/* Frees a loader that zr_loader_close() left running and that is gone now:
 * returns 1 and sets *userdata (its userdata at open), or 0 when none is
 * left. Call it on every notify, beside zr_loader_engine_next(). */
int zr_loader_engine_gone(zr_loader_engine *e, void **userdata);

/* Waits until a loader that zr_loader_close() left running is gone, if any
 * is (at exit, before zr_loader_engine_free(); collect it with
 * zr_loader_engine_gone()). Returns how many are left or gone and not yet
 * collected: 0 when none. */
int zr_loader_engine_wait_gone(zr_loader_engine *e);

/* zr_loader_close() that waits for the loader's work to end, then frees it.
 * For tests and tools that own their datasets; the daemon closes. NULL
 * allowed. Returns NULL. */
zr_loader *zr_loader_free(zr_loader *l);

/* The loader's working memory in bytes: what it holds on the heap beside its
 * ring (each slot's batch metadata) and what its gathers and read-ahead job
 * may allocate at once (tables of batch_size entries), an upper bound fixed
 * at open. */
uint64_t zr_loader_work_bytes(const zr_loader *l);

/* The daemon's userdata given at open. */
void *zr_loader_userdata(const zr_loader *l);

/* The loader's own ring: its memfd (owned by the engine: dup() it to pass it),
 * its id (never 0), its size (slots × slot_bytes), the number of slots and the
 * size of one (a multiple of 4096). */
int zr_loader_ring_fd(const zr_loader *l);
uint32_t zr_loader_ring_id(const zr_loader *l);
uint64_t zr_loader_ring_bytes(const zr_loader *l);
uint32_t zr_loader_slots(const zr_loader *l);
uint64_t zr_loader_slot_bytes(const zr_loader *l);
/* The ring's mapping (read-write, the daemon's), for tests and benchmarks. */
const void *zr_loader_ring_data(const zr_loader *l);

/* Stream i's region inside every slot: its offset (a multiple of
 * ZR_STREAM_ALIGN) and capacity in bytes. i < zr_loader_nstreams(): the
 * streams of a batch (of each source, for a mixture). */
size_t zr_loader_nstreams(const zr_loader *l);
uint64_t zr_loader_stream_offset(const zr_loader *l, size_t i);
uint64_t zr_loader_stream_capacity(const zr_loader *l, size_t i);
/* Stream i's decode if it is an image stream (its size and limit as the
 * loader settled them at open), else NULL. Valid while l lives. */
const zr_image_params *zr_loader_stream_image(const zr_loader *l, size_t i);

/* The length the sampler uses (the streams' common length at open; a
 * mixture's: the sum of its sources', capped at 2^64 - 1). */
uint64_t zr_loader_length(const zr_loader *l);

/* A mixture's sources (0 for a plain loader) and source k's length. */
uint32_t zr_loader_nsources(const zr_loader *l);
uint64_t zr_loader_source_length(const zr_loader *l, uint32_t k);

/* 1 if a and b would announce the same batch for every step in the same slot
 * layout (the key of a group, "Shared work" above), comparing the streams'
 * generations too only if `generations`. Any thread that holds neither
 * loader's engine mutex (it reads what is fixed at open). */
int zr_loader_same_key(const zr_loader *a, const zr_loader *b, int generations);

enum zr_loader_event_kind {
        ZR_LOADER_EVENT_BATCH = 1,
        ZR_LOADER_EVENT_END = 2,
        ZR_LOADER_EVENT_RING = 3,       /* a ring of the group, new to this loader */
        ZR_LOADER_EVENT_RING_CLOSE = 4, /* a ring it knew is gone */
        /* batches were announced in its control memory while its client said
         * it may block on its socket (zr_loader_ctl_open()): wake it */
        ZR_LOADER_EVENT_WAKE = 5,
};

/* One stream of a BATCH event. The arrays belong to the slot: valid until the
 * slot is released or the loader is freed. */
typedef struct zr_loader_stream_batch {
        uint64_t offset; /* ring offset of the stream's data: slot start + region offset */
        uint64_t bytes;  /* bytes used in the region */
        uint32_t ndim;   /* ragged: the schema's dims per record (ZR_SCHEMA_NDIM_ANY:
                          * each record's own); 0 for a dense stream */
        /* ragged only (NULL for dense), batch_size entries each (shapes:
         * shape_words, batch_size × ndim or for ZR_SCHEMA_NDIM_ANY each record's
         * ndim then its dims, dataset/batch.h): the ring offset of each record's
         * payload (its header is the 8 × (1 + its ndim) bytes before it, records
         * start at multiples of ZR_RECORD_ALIGN), its payload bytes, its dims */
        const uint64_t *offsets;
        const uint64_t *lengths;
        const uint64_t *shapes;
        uint64_t shape_words;
        /* an image stream's: records that did not decode, served as zeros
         * (zr_loader_stream.image_skip) */
        uint32_t skipped;
} zr_loader_stream_batch;

typedef struct zr_loader_event {
        enum zr_loader_event_kind kind;
        /* BATCH: the batch's step. END: the first step that will not be
         * announced (0 after the batch of step 2^64 - 1: the domain is used up) */
        uint64_t step;
        /* BATCH, RING, RING_CLOSE: the ring's id. BATCH, RING: the engine's
         * mapping of it (read-write; for tests and benchmarks) */
        uint32_t ring;
        const void *ring_data;
        /* RING: its memfd (owned by the engine: dup() it to pass it; valid
         * until the next call on this loader), slots and sizes */
        int fd;
        uint32_t slots;
        uint64_t slot_bytes, ring_bytes;
        /* BATCH: the slot of that ring */
        uint32_t slot;
        uint64_t batch_size;
        size_t nstreams;
        const zr_loader_stream_batch *streams; /* nstreams, in open order */
        const uint64_t *indices;               /* batch_size record indices */
        const uint8_t *sources;                /* a mixture: each record's source
                                                * (batch_size); NULL otherwise */
        /* END: a positive code (ZR_E_STALE, ZR_E_BUFFER, ZR_E_SAMPLER,
         * ZR_E_DECODE, ZR_E_CORRUPT, EIO, ENOMEM, or the code given to
         * zr_loader_stop()), and one line for a person, valid until the loader is
         * freed. ZR_E_BUFFER: `needed` holds the bytes the stream's batch needs. */
        int code;
        const char *message;
        uint64_t needed;
} zr_loader_event;

/* Gives the loader control memory (ctlring.h, PROTOCOL.md "Control memory")
 * if it may use it: every stream dense or packed (no ragged record lists, no
 * image stream's skipped counts), no more slots than the queues hold. From
 * then on its batches are announced there whenever the client knows their
 * ring, by whichever thread finishes them, and its releases are taken from
 * there by whichever thread finishes a fill or rings the doorbell
 * (zr_loader_ctl_doorbell()); BATCH events come only for a batch in a ring the
 * client does not know yet. A client that lies in it (a release of a slot it
 * does not hold, a count out of bounds) ends the loader with ZR_E_PROTO.
 * Returns 1 and the memfd (the engine's: dup() it to pass it) in *fd, 0 if the
 * loader cannot use one, -errno with *err set. Call before zr_loader_start(). */
int zr_loader_ctl_open(zr_loader *l, int *fd, zr_error *err);

/* Bytes of the loader's control memory (0 without). */
uint64_t zr_loader_ctl_bytes(const zr_loader *l);

/* The client's doorbell: takes its releases from control memory and goes on
 * as a RELEASE does (loop thread). */
void zr_loader_ctl_doorbell(zr_loader *l);

/* Collects the loader's next event: returns 1 and fills *ret, or 0 if there is
 * none now. A BATCH hands its slot to the client until zr_loader_release(); a
 * RING comes before the first BATCH that names that ring, a RING_CLOSE when no
 * BATCH will name it again; the END comes once, after the last batch, and then
 * poll returns 0 for ever. Loop thread. */
int zr_loader_poll(zr_loader *l, zr_loader_event *ret);

/* Gives slot `slot` of ring `ring` back. Returns 0, or -ZR_E_PROTO (the
 * loader holds no such slot: the daemon sends a FAULT). After the END event
 * was collected every call returns 0 and does nothing (PROTOCOL.md, RELEASE).
 * Loop thread. */
int zr_loader_release(zr_loader *l, uint32_t ring, uint32_t slot, zr_error *err);

/* What the client says of a batch it gives back (RELEASE's wait_ns and
 * taken_ns, PROTOCOL.md): the consumer's wait for a batch (each returned
 * batch's wait rides on one release, not necessarily its own), and when, on
 * CLOCK_MONOTONIC, the consumer took this one. */
typedef struct zr_loader_take {
        int has_wait;
        uint64_t wait_ns;
        int has_taken;
        uint64_t taken_ns;
} zr_loader_take;

/* zr_loader_release() with the client's report (NULL: none) for the loader's
 * telemetry: a wait is counted (at most the loader's age, all waits
 * together); a take time makes the batch's ready wait (take minus its
 * announcement) if it lies between the announcement and now, and is ignored
 * otherwise (a client in another time namespace, or one that lies). */
int zr_loader_release_report(zr_loader *l, uint32_t ring, uint32_t slot,
                             const zr_loader_take *take, zr_error *err);

/* Ends the loader early with `code` (positive, e.g. ZR_E_SHUTDOWN) and
 * `message`: no new step is started; steps already started are announced, then
 * an END with this code. Does nothing if an end is already decided. */
void zr_loader_stop(zr_loader *l, int code, const char *message);

typedef struct zr_loader_counters {
        uint64_t step;      /* the next step to announce */
        uint64_t batches;   /* batches announced */
        uint64_t gathers;   /* gathers this loader did (for its group too) */
        uint64_t shared;    /* batches it took from a slot another member filled */
        uint64_t hits, misses; /* its cache lookups */
        uint64_t bytes;     /* bytes written into its ring */
        uint64_t evictions; /* evictions its cache inserts caused */
        uint64_t io_waits;  /* steps whose fill waited for its reads ahead */
        uint32_t depth;     /* slots it fills ahead at most, now (loader.c, "Depth") */
        uint64_t depth_raises; /* times its depth grew */
        uint64_t depth_reliefs; /* of them, reliefs of a client that held every batch */
        /* the engine's count of fills (gathers and copies, all loaders) when
         * this loader's latest fill completed: a trace of the scheduler's
         * order, for tests and debugging */
        uint64_t fill_seq;
} zr_loader_counters;

/* Fills *ret with the loader's counters. */
void zr_loader_counters_get(zr_loader *l, zr_loader_counters *ret);

/* Fills *ret with the loader's telemetry at now_ns (CLOCK_MONOTONIC):
 * windows, verdict, stage, histograms (telemetry.h). Any thread. */
void zr_loader_telemetry_get(zr_loader *l, uint64_t now_ns, zr_loader_telemetry *ret);

/* CLOCK_MONOTONIC in ns: the engine's clock (telemetry's times are on it). */
uint64_t zr_loader_now_ns(void);

/* Turns telemetry on (the default) or off for every loader: off, no clock is
 * read per batch and gathers are not timed (for measuring what it costs). */
void zr_loader_engine_set_telemetry(zr_loader_engine *e, int on);

#endif
