/* pack.h: packed token sequences: a ragged stream of documents (token ids)
 * served as dense rows of seq_len tokens, with each token's segment and
 * position beside it. PROTOCOL.md section 10 ("Packed streams") and
 * proto/SAMPLERS.md ("Packed token sequences") are the contract.
 *
 * The rows are a pure function of (store, sampler, seed, seq_len, mode, eos,
 * window) and the global row number: rank r of world_size W at step s takes
 * global rows s × B × W + r × B + j for j < B, so ranks are disjoint and a run is
 * elastic with the same B × W. The documents come in the cycles of the sampler
 * (sampler.h, zr_sampler_cycle_fill(): every document once a cycle), each
 * followed by `eos_id` when one is given.
 *
 *   concat    the cycles' documents, one after the other, are one stream of
 *             tokens cut into rows of seq_len: row g holds tokens [g × L,
 *             (g + 1) × L). No padding; a document may span rows (and a row
 *             cycles). Row g is found by a binary search of its cycle's
 *             running token count (tokindex.h).
 *   best_fit  each window of `window` documents of a cycle's order is packed
 *             apart: every whole seq_len of a document longer than seq_len is
 *             a row of its own (in order); the rest of each document (all of
 *             a shorter one) goes, longest first (equal lengths in order), into
 *             the open row with the least room that holds it (among rows of
 *             equal room, the one placed into last), or a new row (best fit decreasing);
 *             the window's rows are its whole rows, then its packed rows in
 *             the order they were opened, their pieces in the order placed.
 *             Rows end with pad_id. A cycle's rows are its windows' in order.
 *
 * Segment ids (int32) number the pieces of a row 1, 2, ... (0: padding);
 * positions (int32) count from 0 within each piece. A slot region of a packed
 * stream holds the tokens (B × L of the store's dtype), then at the next
 * multiple of 64 the segment ids (B × L int32), then likewise the positions.
 *
 * A mixture's sources (sampler/mixture.h) each have a pack of their own, made
 * with batch_size 1 and world_size 1 so that its global row c is its draw c;
 * a fill gives each source its rows (zr_pack_fill_rows()).
 *
 * Reading: a store of raw records is read piece by piece, straight from its
 * table entries into the row (one copy, on the store's pool); a compressed
 * one decodes each document a piece needs into a scratch of its size.
 *
 * Threads: a fill runs on a worker with the dataset's lock held shared. The
 * pack's mutex (a leaf but for the index store's, tokindex.h) guards its
 * cycles' indexes; a fill holds it while it finds a chunk of rows' pieces
 * (building an index it lacks), never while it copies.
 */
#ifndef ZR_LOADER_PACK_H
#define ZR_LOADER_PACK_H

#include <stdatomic.h>
#include <stdint.h>

#include "dataset/dataset.h"
#include "loader/tokindex.h"
#include "sampler/inverse.h"
#include "sampler/sampler.h"
#include "util/error.h"
#include "util/pool.h"

enum zr_pack_mode {
        ZR_PACK_NONE = 0,
        ZR_PACK_CONCAT = 1,
        ZR_PACK_BEST_FIT = 2,
};

/* Tokens a row may hold, at most: 2^20 (a (B, L) batch of L larger than that
 * is no language model's). */
#define ZR_PACK_SEQ_LEN_MAX (1u << 20)
/* best_fit's window when none is given, in documents: enough that padding is
 * within a percent or two of what a whole cycle gives on the bench's corpus
 * (bench/README.md, "tokens"), small enough that a window packs in a few
 * hundred microseconds. */
#define ZR_PACK_WINDOW_DEFAULT 1024
#define ZR_PACK_WINDOW_MAX (1u << 20)

typedef struct zr_pack_params {
        enum zr_pack_mode mode;  /* ZR_PACK_NONE: the stream is not packed */
        uint64_t seq_len;        /* 1..ZR_PACK_SEQ_LEN_MAX */
        int has_eos;
        int64_t eos_id;          /* must fit the dtype */
        int64_t pad_id;          /* best_fit; must fit the dtype (default 0) */
        uint64_t window;         /* best_fit: 0 for the default */
} zr_pack_params;

typedef struct zr_pack zr_pack;

/* The region bytes of a packed stream of B rows, and where its segment ids and
 * positions start in it. */
uint64_t zr_pack_region_bytes(uint64_t B, uint64_t L, uint64_t itemsize, uint64_t *ret_segments,
                              uint64_t *ret_positions);

/* Checks that ds can be packed with *p (a ragged dataset of one dimension and
 * an integer dtype, eos_id and pad_id in its range, the sampler one with
 * cycles, seq_len and window in range): 0, or ZR_E_SCHEMA / ZR_E_SAMPLER /
 * ZR_E_PROTO with a message naming the value. `name` names the stream. */
int zr_pack_check(const zr_pack_params *p, const zr_dataset *ds, enum zr_sampler_mode mode,
                  const char *name, zr_error *err);

/* Working memory of a pack of n documents (its cycles' indexes, one fill's
 * tables, and the scratch of a build's `shards` shards), for the charge before
 * zr_pack_new(). */
uint64_t zr_pack_work_bytes(const zr_pack_params *p, uint64_t n, unsigned shards);

/* The working memory of a made pack with `fills` fills at once: its indexes,
 * and each fill's tables and (compressed stores) a document's scratch. */
uint64_t zr_pack_memory(const zr_pack *pk, unsigned fills);

/* Makes the pack of dataset ds (n records, fingerprint fp; the caller holds
 * its lock shared) with the sampler's mode, seed, batch_size, rank and
 * world_size from *sp, its indexes from ts (borrowed), built on pool. Loads
 * or builds the index of the cycle of `first_step`'s first row (so a bad
 * store fails the open, and the first batch finds its index). Returns 0 and
 * sets *ret, or a negative code (tokindex.h's). */
int zr_pack_new(const zr_pack_params *p, zr_dataset *ds, uint64_t n, uint64_t fp,
                const zr_sampler_params *sp, uint64_t first_step, zr_tokstore *ts, zr_pool *pool,
                const _Atomic int *cancel, zr_pack **ret, zr_error *err);

zr_pack *zr_pack_free(zr_pack *pk);

/* 1 if a and b pack alike (a loader's group key). */
int zr_pack_same(const zr_pack *a, const zr_pack *b);

/* Fills region `dst` (zr_pack_region_bytes()) with the rows of `step` (the
 * client's). The caller holds the dataset's lock shared and checks its
 * generation around the call. Stops with ECANCELED when *cancel is set.
 * *ret_bytes: the region's bytes used; *ret_pieces: document pieces read. */
int zr_pack_fill(zr_pack *pk, uint64_t step, uint8_t *dst, const _Atomic int *cancel,
                 uint64_t *ret_bytes, uint64_t *ret_pieces, zr_error *err);

/* A mixture's source (the pack made with batch_size 1 and world_size 1, so
 * that its global row c is its draw c, sampler/mixture.h): fills region rows
 * at[0..n) of a region of B rows with its global rows rows[0..n). Adds the
 * pieces read to *ret_pieces. As zr_pack_fill() otherwise. */
int zr_pack_fill_rows(zr_pack *pk, uint64_t B, size_t n, const uint64_t *rows, const uint32_t *at,
                      uint8_t *dst, const _Atomic int *cancel, uint64_t *ret_pieces,
                      zr_error *err);

/* Which steps of [start, stop) of this pack's loader (its batch_size and
 * world_size; every rank) have a piece of record `record` in a row: hits
 * (step, rank, position: the row in that rank's batch) to ops->on_hits in
 * ascending order, a step's whole. Walks the cycles of the documents' order
 * from the one of start's first row, loading or building each one's index,
 * until `max_cycles` cycles or `budget` documents' worth of them were walked
 * and a step is done (a step is never cut), and sets *ret_next to the first
 * step not searched yet (stop when the range is). Returns 0, the nonzero
 * value on_hits returned (which stops the walk; *ret_next is then not set),
 * -E2BIG when a step holds more than ops->step_hits_max hits, or a negative
 * code (ZR_E_SAMPLER for a record >= n; the index's). The caller holds the
 * dataset's lock shared. */
int zr_pack_steps_of(zr_pack *pk, uint64_t record, uint64_t start, uint64_t stop,
                     uint64_t budget, uint64_t max_cycles, const zr_steps_of_ops *ops,
                     const _Atomic int *cancel, uint64_t *ret_next, zr_error *err);

/* 1 if two streams' pack parameters pack alike (a mixture's sources must). */
int zr_pack_params_same(const zr_pack_params *a, const zr_pack_params *b);

#endif
