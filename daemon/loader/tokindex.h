/* tokindex.h: the index of a packed loader (pack.h): where each document of a
 * cycle's order starts in the cycle's stream of tokens, or how best fit packs
 * the cycle into rows; built in parallel on the pool, kept on disk in the
 * daemon's cache directory, never built twice.
 *
 * A cycle's document order is the sampler's (sampler.h, zr_sampler_cycle_fill()).
 * Two kinds of index describe it:
 *
 *   concat    prefix[q] for q in 0..n: the tokens of the documents at
 *             positions 0..q - 1 of the order (without end-of-document
 *             tokens: a loader adds q × eos itself), 8 × (n + 1) bytes. It
 *             depends on the store's records, the sampler, the seed and the
 *             cycle (sequential: one index for every cycle and seed).
 *   best_fit  the rows of the cycle: rows + 1 offsets into the pieces, and
 *             each piece (position q, first token, tokens) in row order, 12
 *             bytes a piece; it also depends on seq_len, eos and the window
 *             (pack.h gives the rule).
 *
 * Both keep the cycle's totals (tokens, the longest document, rows). A
 * concat index is built from the store's length table: the tokens of each
 * record in the store's order, 4 bytes a document, made once per store
 * (fingerprint and length) from its table and kept as a file of its own.
 *
 * The store of indexes (zr_tokstore) is a directory of the daemon's own, 0700,
 * one file per index (and per length table) named by its key: a 128-byte
 * header (magic "ZRTOKIX", version, the key, the totals, a checksum of the
 * payload) and the payload (docs/TOKENS.md, "The index files").
 * A file is written beside its name and renamed onto it, so a reader sees a
 * whole index or none (not synced: a file a crash left torn fails its checks);
 * on load the header, the size and the checksum are
 * checked, and a sample of the documents' lengths is read again from the store
 * (the key's fingerprint samples 64 records; a store whose other records
 * changed length would otherwise be served a wrong index). A file that fails
 * any check is removed and the index built again. The files together stay
 * within a byte budget: after a write, the least recently used go first
 * (the mtime, touched at each load). Without a directory (none could be
 * made), indexes live in memory only, built for each loader.
 *
 * Threads: any. A build runs shards on the pool (the caller takes part) and
 * stops within a shard's piece when *cancel becomes non-zero (ECANCELED). The
 * caller holds the dataset's lock shared for the whole call. The store's mutex
 * (a leaf) guards only its directory's listing and eviction.
 *
 * Errors: negative codes with *err filled: ZR_E_CORRUPT (a record shorter than
 * its header, or not a whole number of items), ZR_E_LIMIT (a document longer
 * than 2^32 - 1 tokens, best fit over more than 2^32 - 1 documents), ENOMEM,
 * ECANCELED, and the store's errors.
 */
#ifndef ZR_LOADER_TOKINDEX_H
#define ZR_LOADER_TOKINDEX_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "dataset/dataset.h"
#include "sampler/sampler.h"
#include "util/error.h"
#include "util/pool.h"

enum zr_tokidx_kind {
        ZR_TOKIDX_CONCAT = 1,
        ZR_TOKIDX_BEST_FIT = 2,
};

typedef struct zr_tokidx_key {
        uint32_t kind;          /* enum zr_tokidx_kind */
        uint32_t mode;          /* enum zr_sampler_mode, not iid */
        uint64_t fingerprint;   /* the dataset's (dataset/fingerprint.h) */
        uint64_t n;             /* its records */
        uint64_t seed, cycle;   /* sequential: 0 and 0 */
        /* best_fit only (0 for concat) */
        uint64_t seq_len, window;
        uint32_t eos;           /* 1: an end-of-document token follows each */
        uint32_t pad_;
} zr_tokidx_key;

/* One piece of a best-fit row: tokens [start, start + count) of the document
 * at position q of the cycle's order (its end-of-document token, when there
 * is one, is token `length`). */
typedef struct zr_tokpiece {
        uint32_t q, start, count;
} zr_tokpiece;

typedef struct zr_tokidx {
        zr_tokidx_key key;
        uint64_t total;         /* tokens of the cycle's documents, no eos */
        uint64_t max_len;       /* tokens of its longest document */
        const uint64_t *prefix; /* concat: n + 1 */
        uint64_t rows;          /* best_fit: rows of the cycle */
        uint64_t npieces;
        const uint64_t *row_at; /* best_fit: rows + 1, into pieces */
        const zr_tokpiece *pieces;
        /* private */
        const uint32_t *lens;   /* a store's length table (tokindex.c) */
        void *mem;              /* the header and payload: mapped or malloc'ed */
        size_t mem_bytes;
        int mapped;
        _Atomic unsigned refs;  /* the holders: the caller, a pending write */
        struct zr_tokidx *save_next;
} zr_tokidx;

typedef struct zr_tokstore zr_tokstore;

/* Opens the store in `dir` (made 0700 when missing, with its parents, at the
 * first index it keeps or looks for, not now), within `budget` bytes (0: no
 * files are kept). dir NULL or "": indexes in memory only. A directory that is
 * not the daemon's own (another owner, group or world writable), or cannot be
 * made, also leaves the store in memory: *ret_why says why when that is known
 * now (for the log; may be NULL). Returns 0 and sets *ret, or -ENOMEM. */
int zr_tokstore_open(const char *dir, uint64_t budget, zr_tokstore **ret, char *ret_why,
                     size_t why_size);

/* Frees the store (NULL allowed). Returns NULL. */
zr_tokstore *zr_tokstore_free(zr_tokstore *ts);

/* Sets the budget (SIGHUP); evicts down to it. */
void zr_tokstore_set_budget(zr_tokstore *ts, uint64_t budget);

/* What the store did, since it opened. */
typedef struct zr_tokstore_counters {
        uint64_t builds, build_ns, loads, rejected, evicted, files, bytes, budget;
} zr_tokstore_counters;

void zr_tokstore_counters_get(zr_tokstore *ts, zr_tokstore_counters *ret);

/* The bytes of the index of `key` in memory: for the charge before it is
 * made (best_fit: an upper bound). */
uint64_t zr_tokidx_bytes(const zr_tokidx_key *key);

/* The index of `key` over dataset ds (a ragged one-dimensional dataset of an
 * integer dtype; the caller holds its lock shared and checked the key's
 * fingerprint and length are ds's): loaded from the store when it has it,
 * else built on `pool` (may be NULL) and kept. A best-fit index builds (or
 * loads) the concat index of the same cycle first. Returns 0 and sets *ret
 * (free with zr_tokidx_free()), or a negative code. */
int zr_tokidx_get(zr_tokstore *ts, const zr_tokidx_key *key, zr_dataset *ds, zr_pool *pool,
                  const _Atomic int *cancel, zr_tokidx **ret, zr_error *err);

/* The bytes of the length table of a store of n documents (4 a document, and
 * the file's header), held while a concat index is built from it. */
uint64_t zr_tokidx_lengths_bytes(uint64_t n);

/* The scratch one shard of a build of `key` allocates (best fit: its window's
 * items and rows, and a list and a bit per free room 0..seq_len; concat: its
 * arrays live on its stack). */
uint64_t zr_tokidx_build_bytes(const zr_tokidx_key *key);

/* The rows of best-fit key's cycle, from the header of its file when the store
 * has it (no payload read), else 0 (then get the index). */
uint64_t zr_tokidx_peek_rows(zr_tokstore *ts, const zr_tokidx_key *key);

zr_tokidx *zr_tokidx_free(zr_tokidx *ix);

/* The stored bytes of a document of a ragged dataset that precede its
 * tokens: the zrecord layout's shape header (16 bytes, ragged.h), 0 for
 * loaderx 1.5.7's layouts. */
uint64_t zr_tokidx_header_bytes(const zr_dataset *ds);

#endif
