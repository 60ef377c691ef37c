/* batch.h: the gather of one batch of a dataset: the one place where the
 * records of a batch are located in their store and read into their
 * destination, for READ (a client's buffer) and for the loaders (a ring slot).
 *
 * A gather has two steps, so that work that needs the records' places can run
 * between them (a check that the batch fits; a read ahead):
 *
 *   zr_gather_locate()  finds each record's table entry and lays the batch out
 *                       from the start of its destination: a dense batch as
 *                       one (n, *item_shape) block; a ragged one record after
 *                       record, each (its shape header first) at the next
 *                       multiple of ZR_RECORD_ALIGN. It reads no record and
 *                       writes nothing but the gather and its offsets; it
 *                       says how many bytes the batch spans (bytes).
 *   zr_gather_read()    reads (decodes) every record into its place, zeroes
 *                       the alignment padding between records (so that the
 *                       bytes of a destination depend on the batch alone),
 *                       and parses each ragged header into the record's shape,
 *                       payload offset and payload length. A ragged dataset
 *                       of loaderx 1.5.7's layouts (dataset.h) has no header:
 *                       each record is its payload, laid out the same way,
 *                       and its shape comes from the dataset (locate checks
 *                       it against the record's size: ZR_E_CORRUPT). Records of
 *                       compressed datasets go through the decoded-record
 *                       cache when one is given (cache.h); raw records never
 *                       do: a raw read is already one copy.
 *
 * A dense batch of one dataset needs no table entry for its layout: locate
 * only checks the indices' range, and read locates, checks and reads in one
 * pass per shard of the store's pool (zr_store_gather_dense(); through a cache,
 * it locates first), so its ZR_E_CORRUPT comes from read.
 *
 * A batch may also draw its records from several datasets of one layout (a
 * mixture's sources, sampler/mixture.h): record i is then record idx[i] of
 * dataset sources[source[i]]. The datasets must agree on the schema's kind,
 * dtype, item shape and ndim (the caller checks it); their codecs and ragged
 * layouts may differ, and each record is read as its own dataset reads
 * (through the cache when compressed, keyed by its own dataset; its shape from
 * its header or, in loaderx 1.5.7's layouts, from its dataset).
 *
 * The caller holds the lock of every dataset of the gather shared across both
 * steps (dataset.h) and gives the arrays a ragged batch returns. Per batch a
 * gather allocates one table for the locations (a mixture's too, its records
 * grouped by source) and, through a cache, one for the split of hits and
 * misses per dataset; nothing per record.
 *
 * Errors: negative codes with *err filled (err may be NULL): ZR_E_RANGE for an
 * index >= the length, ZR_E_CORRUPT for a dense record that is not one item,
 * a ragged one shorter than its header or whose header does not match the
 * schema ("stored ..."), and the store's errors (store.h).
 */
#ifndef ZR_DATASET_BATCH_H
#define ZR_DATASET_BATCH_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dataset/cache.h"
#include "dataset/dataset.h"
#include "util/error.h"
#include "util/pool.h"

/* Where a gather's time went, in wall time of the gathering thread: added to
 * by zr_gather_locate() and zr_gather_read() when the gather has one. The
 * stages of PROTOCOL.md, STATUS, `telemetry`.
 *
 * In detail, the store times its own stages (store.h's zr_store_times: a pass
 * that faults the records' pages in first, clocks in every shard, the device
 * bytes of each shard's thread), and the read's wall time is split by the
 * shards' shares. Else only the caller's clock runs (a few reads a gather),
 * and the store's whole time counts as decode (compressed) or copy (raw): a
 * fault on the way is then in that stage, which is why a loader gathers in
 * detail whenever its reads were slow, and every so often anyway. A dense
 * batch of one dataset read in one pass (its shards locate their own records)
 * has its lookups inside that time: apart in detail, else in that stage. */
typedef struct zr_gather_times {
        int detail;           /* in: time the store's stages, count device bytes */
        uint64_t lookup_ns;   /* table entries located; cache lookups */
        uint64_t read_ns;     /* pages faulted in, preads */
        uint64_t decode_ns;   /* zstd */
        uint64_t copy_ns;     /* raw copies, cache hits copied and misses inserted,
                               * ragged headers parsed */
        uint64_t pages;       /* detail: record pages touched through mappings */
        uint64_t device_bytes; /* detail: read from the device */
} zr_gather_times;

typedef struct zr_gather {
        /* set by the caller before zr_gather_locate() */
        zr_dataset *ds;         /* every record's dataset, unless `sources` is set */
        const uint64_t *idx;    /* n record indices, any order, repeats allowed */
        size_t n;
        /* a batch of several datasets (NULL: ds alone): record i is idx[i] of
         * sources[source[i]], source[i] < nsources; ds is ignored */
        zr_dataset *const *sources;
        const uint8_t *source;
        uint32_t nsources;
        /* ragged only, the caller's arrays of n entries (shapes: room for
         * zr_ragged_shape_words_max(schema, n) words, ragged.h). After locate,
         * offsets[i] is record i's place from the start of the destination (its
         * header first); after read, its payload's plus the `base` given to
         * zr_gather_read(), with lengths[i] its payload bytes and its shape in
         * shapes: the dims of each record in turn (shapes[i × ndim ..]), or,
         * for a schema of ZR_SCHEMA_NDIM_ANY, each record's ndim then its dims.
         * Unused (may be NULL) when dense. */
        uint64_t *offsets, *lengths, *shapes;
        uint64_t shape_words;   /* ragged, set by read: the words of shapes used */
        /* 0, or the owner whose planned uses of these records (cache.h,
         * zr_rcache_plan()) this gather consumes: a loader's gather of a step
         * it planned */
        uint64_t plan_owner;
        /* NULL, or where locate and read add their stages' times (the caller's) */
        zr_gather_times *times;
        /* 0, or the bytes of destination memory the caller's gathers cycle
         * through before one is read back (a loader's ring): with the batch's
         * own bytes, whether its copies use streaming stores (util/copy.h) */
        uint64_t span;
        /* true when the batch's records are mostly not resident in the page
         * cache (a loader's step that was read ahead): they are read with
         * pread(), not through the stores' mappings (ZR_GATHER_PREAD) */
        bool cold;
        /* NULL, or a flag another thread may set: locate and read then stop
         * between the parts of a batch of several datasets and fail with
         * ECANCELED (a loader's gather for a client that left) */
        const _Atomic int *cancel;

        /* set by zr_gather_locate() */
        uint64_t bytes;         /* the destination bytes the batch spans */
        bool stream;            /* zr_copy_streams() of the larger of bytes and span */
        zr_loc *locs;           /* n: each record's place in its store */
        void **dsts;            /* n: where each record goes, set by the read */
        /* several datasets: the records grouped by source, record order[j] for
         * j in [from[k], from[k + 1]) being source k's, with their indices and
         * places in that order (part_locs, part_dsts) */
        uint32_t *order, *from;
        uint64_t *part_idx;
        zr_loc *part_locs;
        void **part_dsts;

        /* added to by zr_gather_read() when it reads through a cache */
        uint64_t hits, misses, evictions;
} zr_gather;

/* Locates records g->idx[0..n) and lays them out (see the top). Returns 0, or
 * a negative code (a mixture's messages name the source: "source 2: ..."),
 * either way release the gather with zr_gather_release(). */
int zr_gather_locate(zr_gather *g, zr_error *err);

/* Records of at least this many bytes on average, mostly not resident, are
 * read with pread, not through the stores' mappings (`cold` above): measured
 * beyond memory in docs/IO.md ("A cold step of large records"); below it a
 * pread per record or run copies no faster and has little to unmap. */
#define ZR_GATHER_PREAD_MIN (64u << 10)

/* The rule for `cold`: of `total` records, `missing` are not resident, and
 * they hold `missing_bytes` stored bytes. Cold when at least half are missing
 * and those average ZR_GATHER_PREAD_MIN bytes or more. */
static inline bool zr_gather_cold(uint64_t missing, uint64_t total, uint64_t missing_bytes) {
        return missing > 0 && 2 * missing >= total && missing_bytes / missing >= ZR_GATHER_PREAD_MIN;
}

/* After zr_gather_locate(): zr_gather_cold() of a sample of the batch's
 * records (up to 16, evenly spaced, each asked whether its first page is in
 * the page cache), for the caller to set `cold`. A batch whose records average
 * less than ZR_GATHER_PREAD_MIN bytes, or of several datasets, asks nothing
 * and is not cold. Costs a table lookup and one system call per sampled
 * record (about 0.5 us each here: 8 us against the 3 ms of a warm 64 MiB
 * READ). */
bool zr_gather_mostly_cold(const zr_gather *g);

/* Reads the located records into dst, which must hold g->bytes. `base` is
 * added to each ragged payload offset it returns (the offset of dst in the
 * caller's mapping, or 0). `cache` (may be NULL) serves and keeps decoded
 * records of compressed datasets, and `pool` (may be NULL) copies its hits and
 * inserts its misses in shards. On failure the bytes of dst are unspecified. */
int zr_gather_read(zr_gather *g, uint8_t *dst, uint64_t base, zr_rcache *cache, zr_pool *pool,
                   zr_error *err);

/* Frees what the gather allocated (not the caller's arrays). Idempotent. */
void zr_gather_release(zr_gather *g);

#endif
