/* zrc-loader.h: libzrc's loaders, mixtures and the steps that saw a record.
 *
 * The second half of libzrc's public header: zrc.h includes it, so a program
 * includes zrc.h alone. The conventions at the top of zrc.h hold for every
 * function here; the types of connections, datasets and sets come from there.
 */
#ifndef ZRC_LOADER_H
#define ZRC_LOADER_H

#include "zrc.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ======================================================================
 * Loaders (feature "loader")
 *
 * A loader streams the batches of steps start_step, start_step + 1, ... of a
 * sampler over one or more index-aligned datasets into a ring of shared
 * memory, ahead of the caller (PROTOCOL.md, section 10; samplers:
 * proto/SAMPLERS.md). The batch of a step is a pure function of (the data,
 * sampler, seed, batch size, rank, world size, step), so a run resumes exactly
 * by opening a loader at the step it stopped at. Each batch occupies one ring
 * slot until zrc_loader_release(); the daemon refills released slots.
 *
 * Loaders that would announce the same batches (the same datasets, sampler,
 * seed, batch size, rank, world size and capacities), on any connection of any
 * process, share their rings: the daemon gathers the batch of a step once,
 * into a slot of any of their rings, and every one of them reads it from
 * there. So a loader's batches may lie in its own ring or in another loader's,
 * which the library maps (read-only) as the daemon passes it and unmaps when
 * the daemon is done with it; none of this changes what the caller sees.
 * Closing one loader of such a group does not disturb the others.
 * ====================================================================== */

typedef struct zrc_loader zrc_loader;

/* How a loader samples. Zero-initialise, then set what you need. */
typedef struct zrc_loader_options {
        const char *sampler;   /* "sequential", "iid", "cyclic" or "cyclic-lx157" (NULL: "sequential") */
        uint64_t batch_size;   /* records per stream per batch, 1..length */
        uint64_t seed;         /* the sampler's seed */
        uint64_t start_step;   /* the step of the first batch */
        uint64_t rank;         /* this process's rank, < world_size */
        uint64_t world_size;   /* 0 means 1 */
        uint32_t prefetch;     /* ring slots, 0: the daemon's default (4) */
        bool check_length;     /* refuse (-ZR_E_STALE) if the length is not `length`: */
        uint64_t length;       /*   a resume against a store that changed */
        bool indices;          /* report each batch's record indices */
        const uint64_t *capacities; /* per stream, ragged streams only: bytes reserved
                                     * per slot; NULL or 0: the daemon's choice */
        bool provenance;       /* a mixture: report each batch's records' sources */
        bool check_fingerprint; /* refuse (-ZR_E_STALE) if the streams' fingerprint is */
        uint64_t fingerprint;   /*   not this: another node's daemon serves other records
                                 *   (zrc_loader_fingerprint(), PROTOCOL.md section 10) */
} zrc_loader_options;

/* One source of a mixture (zrc_loader_open_mixture()): a set of index-aligned
 * datasets, the same number in every source, stream i of every source holding
 * records of one kind, dtype and item shape or ndim (codecs may differ). */
typedef struct zrc_mixture_source {
        zrc_dataset *const *streams; /* n_streams datasets of the connection */
        uint32_t weight;       /* >= 1: its share of every batch is weight / their sum */
        const char *sampler;   /* its own sampler; NULL: the options' */
        bool check_length;     /* refuse (-ZR_E_STALE) if its length is not `length` */
        uint64_t length;
} zrc_mixture_source;

/* One stream's part of a loader batch. */
typedef struct zrc_stream_batch {
        /* dense: one C-order (batch_size, *item_shape) array of the stream's
         * dtype; ragged: the start of the stream's region */
        const void *data;
        uint64_t bytes;                /* bytes used */
        uint32_t ndim;                 /* ragged: of each record, 0: each its own */
        const void *const *payloads;   /* ragged: record j's payload (8-aligned), */
        const uint64_t *lengths;       /*   its bytes, */
        const uint64_t *shapes;        /*   its shape: ndims[j] dims at shapes + */
        const uint32_t *ndims;         /*   shape_at[j] (shapes[j × ndim ..] when */
        const uint64_t *shape_at;      /*   ndim is not 0) */
} zrc_stream_batch;

/* A batch of a loader. Every pointer (into a ring, mapped read-only, and
 * into arrays the library owns) stays valid until the batch is released with
 * zrc_loader_release() or the loader is closed, whichever comes first; later
 * zrc_loader_next() calls do not disturb it, and the ring it lies in stays
 * mapped until then, whichever loader it belongs to.
 *
 * `slot` is the library's handle for this held batch, 0..zrc_loader_slots()-1,
 * unique among the batches held at one time and reused after release; it is
 * not a slot of a ring (the batch may lie in the ring of another loader of its
 * group: the library keeps the daemon's ring and slot behind the handle). */
typedef struct zrc_loader_batch {
        uint64_t step;                     /* the sampler step of this batch */
        uint32_t slot;                     /* the held batch's handle: give it to
                                            * zrc_loader_release() */
        uint64_t count;                    /* records per stream (the batch size) */
        size_t n_streams;
        const zrc_stream_batch *streams;   /* in zrc_loader_open() order */
        const uint64_t *indices;           /* if asked for: count record indices (a
                                            * mixture's: each in its source); else NULL */
        const uint8_t *sources;            /* a mixture's, if asked for (provenance): each
                                            * record's source, 0..n_sources-1; else NULL */
} zrc_loader_batch;

/* Opens a loader over streams[0..n_streams) (1..32 datasets of c, all of one
 * length; a set's streams from zrc_set_stream() are the usual choice) with the
 * options in *opts, and maps its ring. The daemon starts filling the ring at
 * once (or hands it batches another loader of its group already gathered).
 * Returns 0 and sets *ret (owned by the caller: zrc_loader_close()), or:
 *   -ZR_E_SAMPLER: unknown sampler, batch_size 0 or over the length,
 *                  rank >= world_size, a start_step that would overflow;
 *   -ZR_E_MISALIGNED: the streams differ in length (the message names them);
 *   -ZR_E_STALE: check_length was set and the length differs, or
 *                check_fingerprint and the fingerprint;
 *   -ZR_E_LIMIT: prefetch over the daemon's maximum, the ring over the shared
 *                memory budget, too many loaders or handles;
 *   -ZR_E_UNKNOWN: the daemon has no "loader" feature; -EINVAL.
 * The loader holds its own reference to the streams: closing their datasets
 * does not disturb it.
 *
 *     zrc_loader_options o = { .sampler = "cyclic", .batch_size = 256, .seed = 7 };
 *     zrc_loader_open(c, (zrc_dataset *[]){ images, labels }, 2, &o, &l);
 */
int zrc_loader_open(zrc_conn *c, zrc_dataset *const *streams, size_t n_streams,
                    const zrc_loader_options *opts, zrc_loader **ret);

/* Opens a loader over a weighted mixture of n_sources sources (1..256; feature
 * "mixture"; proto/SAMPLERS.md, "Mixtures"), each of n_streams streams (1..32),
 * as zrc_loader_open() does for one set of streams: every batch draws each
 * record from one source, by the apportionment of the weights, at an index of
 * that source drawn by the source's own sampler (opts->sampler where it names
 * none); stream i of the batch holds each record's stream i. opts->capacities
 * has n_streams entries (a region holds records of every source); a
 * check_length applies to the sum of the sources' lengths, each source's own
 * is its check_length. Returns 0 and sets *ret, or what zrc_loader_open()
 * returns, and:
 *   -ZR_E_SCHEMA: stream i differs between sources (the message names the
 *                 stream, the source and both kinds, dtypes, shapes or ndims);
 *   -ZR_E_MISALIGNED: the streams of a source differ in length;
 *   -ZR_E_SAMPLER: a weight of 0, a start_step past the mixture's last step;
 *   -ZR_E_STALE: a source's check_length differs;
 *   -ZR_E_UNKNOWN: the daemon has no "mixture" feature.
 * A source may be shorter than a batch: it repeats.
 *
 *     zrc_mixture_source s[2] = { { (zrc_dataset *[]){ web_img, web_lab }, 7, NULL },
 *                                 { (zrc_dataset *[]){ book_img, book_lab }, 3, "iid" } };
 *     zrc_loader_options o = { .sampler = "cyclic", .batch_size = 256, .provenance = true };
 *     zrc_loader_open_mixture(c, s, 2, 2, &o, &l);
 */
int zrc_loader_open_mixture(zrc_conn *c, const zrc_mixture_source *sources, size_t n_sources,
                            size_t n_streams, const zrc_loader_options *opts, zrc_loader **ret);

/* Waits for the loader's next batch (steps come in order, each once) and
 * describes it in *ret; it is the caller's until zrc_loader_release(). Blocks
 * until the daemon announces it. Rings of other loaders of its group that the
 * daemon passes or takes back meanwhile are mapped and unmapped here. Returns
 * 0, or:
 *   -EDEADLK: the caller holds zrc_loader_slots() batches (wherever they lie),
 *             so no batch can come: release one first (nothing is waited for);
 *   the code of the loader's end once every batch before it was returned:
 *     -ZR_E_STALE (a stream was appended to, deleted from or compacted: reopen
 *     at zrc_loader_step()), -ZR_E_BUFFER (a ragged batch over its capacity:
 *     reopen at that step with a larger capacity), -ZR_E_SAMPLER (domain
 *     exhausted), -ZR_E_DECODE, -EIO, -ZR_E_SHUTDOWN, with the daemon's
 *     message in zrc_last_error(); every later call returns the same;
 *   -ZR_E_PROTO, -ENOMEM, ...: an event of the loader was malformed (a batch
 *     outside its ring or slot, a ring of the wrong size, a ring taken back
 *     while the caller holds a batch in it, which stays mapped) or could not
 *     be taken; the loader ends there: every later call returns the same;
 *   a connection failure.
 *
 *     while (zrc_loader_next(l, &b) == 0) { train(&b); zrc_loader_release(l, b.slot); }
 */
int zrc_loader_next(zrc_loader *l, zrc_loader_batch *ret);

/* Gives the held batch `slot` back to the daemon (a RELEASE notification of
 * the ring slot it lies in: no reply is awaited). `slot` is the library's
 * handle of the batch (zrc_loader_batch.slot), not a ring slot. Pointers of
 * that batch become invalid. Batches may be released in any order. The
 * release tells the daemon how long zrc_loader_next() waited for this batch
 * and when it returned it (its telemetry: docs/TELEMETRY.md). Returns 0,
 * or -EINVAL if no batch is held under that handle, or a connection failure.
 *
 *     zrc_loader_release(l, b.slot);
 */
int zrc_loader_release(zrc_loader *l, uint32_t slot);

/* Closes the loader (LOADER_CLOSE) and unmaps every ring it mapped (its own
 * and those of its group): every batch pointer becomes invalid. Other loaders
 * of its group, on this connection or another, go on undisturbed. NULL
 * allowed. Returns NULL.
 *
 *     l = zrc_loader_close(l);
 */
zrc_loader *zrc_loader_close(zrc_loader *l);

/* The number of slots of its ring (prefetch): at most this many batches are
 * held at once, in whichever rings they lie.
 *
 *     zrc_loader_batch held[zrc_loader_slots(l)];
 */
uint32_t zrc_loader_slots(const zrc_loader *l);

/* The length the sampler uses (the streams' length at open).
 *
 *     uint64_t steps_per_epoch = zrc_loader_length(l) / batch_size;
 */
uint64_t zrc_loader_length(const zrc_loader *l);

/* A mixture's number of sources (0 for a loader of one set of streams), and
 * source k's length (0 if there is no source k).
 *
 *     for (size_t k = 0; k < zrc_loader_sources(l); k++) n += zrc_loader_source_length(l, k);
 */
size_t zrc_loader_sources(const zrc_loader *l);
uint64_t zrc_loader_source_length(const zrc_loader *l, size_t k);
/* The streams' fingerprint at open (PROTOCOL.md section 10): equal on two
 * daemons that serve the same records. 0 from a daemon that sends none.
 *
 *     o.check_fingerprint = true; o.fingerprint = fingerprint_of_node_0;
 */
uint64_t zrc_loader_fingerprint(const zrc_loader *l);

/* The step the next zrc_loader_next() returns; after the loader ended and all
 * its batches were returned, the first step that will not come (where to
 * reopen).
 *
 *     o.start_step = zrc_loader_step(l); l = zrc_loader_close(l); zrc_loader_open(c, s, n, &o, &l);
 */
uint64_t zrc_loader_step(const zrc_loader *l);

/* ======================================================================
 * Which steps saw a record (feature "steps_of")
 *
 * Samplers are pure functions of (seed, step), so the daemon runs them
 * backwards: the steps of [start, stop) whose batches hold a record, on which
 * rank and at which position (PROTOCOL.md, STEPS_OF; proto/SAMPLERS.md, "Which
 * steps saw a record"). sequential and cyclic are exact arithmetic, O(1) per
 * hit or per cycle; iid has no inverse and is a scan of every position. It
 * reads no store: give the lengths (zrc_dataset_length()).
 * ====================================================================== */

/* A source of a mixture, for zrc_steps_of(). */
typedef struct zrc_steps_source {
        uint64_t n;            /* its length */
        uint32_t weight;       /* >= 1 */
        const char *sampler;   /* NULL: the query's */
} zrc_steps_source;

/* The run asked about. Zero-initialise, then set what you need. */
typedef struct zrc_steps_query {
        const char *sampler;   /* as zrc_loader_options (NULL: "sequential"); a mixture's default */
        uint64_t n;            /* the length: one set of streams */
        const zrc_steps_source *sources; /* or a mixture of n_sources (1..256): n is ignored */
        size_t n_sources;
        uint32_t source;       /* a mixture: the record's source */
        uint64_t batch_size, seed;
        uint64_t world_size;   /* 0 means 1 */
        uint64_t record;       /* < n (a mixture's: < its source's n) */
        uint64_t start, stop;  /* the steps [start, stop) */
} zrc_steps_query;

/* One place the record was read: its step, the rank, its index in that rank's
 * batch. */
typedef struct zrc_step_hit {
        uint64_t step;
        uint64_t rank;
        uint64_t position;
} zrc_step_hit;

/* Called after each piece of the walk: the hits of steps [previous next, next)
 * (count may be 0; the array is valid during the call), in ascending order,
 * and `next`, the first step not searched yet (q->stop at the end). Return 0
 * to go on, nonzero to stop (zrc_steps_of() then returns that value). An
 * empty range (start >= stop) calls it never. */
typedef int (*zrc_steps_fn)(void *userdata, const zrc_step_hit *hits, size_t count,
                            uint64_t next);

/* Every (step, rank, position) of q->record in steps [q->start, q->stop), in
 * ascending order, in the pieces the daemon answers (each bounded: about 2^24
 * positions scanned or 2^19 cycles walked, so fn can show progress on a long
 * iid scan). Returns 0 once the range is done, fn's nonzero value, or:
 *   -ZR_E_SAMPLER: what a loader would refuse, a record at or past its length;
 *   -ZR_E_LIMIT: one step holds more hits than one reply may;
 *   -ZR_E_UNKNOWN: the daemon has no "steps_of" feature; -EINVAL: no fn or q;
 *   a connection failure.
 *
 *     zrc_steps_query q = { .sampler = "cyclic", .n = len, .batch_size = 256, .seed = 7,
 *                           .record = 12345, .start = 0, .stop = 1000000 };
 *     zrc_steps_of(c, &q, print_hits, NULL);
 */
int zrc_steps_of(zrc_conn *c, const zrc_steps_query *q, zrc_steps_fn fn, void *userdata);

#ifdef __cplusplus
}
#endif

#endif
