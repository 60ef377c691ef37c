/* msset.h: a multi-stream set, datasets that stay index-aligned.
 *
 * A multi-stream set is a directory whose immediate children are dataset
 * directories (the streams, e.g. joint/, label/, token/). Record i of every stream
 * belongs to the same sample, so the set keeps one invariant: every stream has the
 * same length, appends write every stream at the same indices, deletes remove the
 * same indices from every stream. There is no manifest: the streams are whatever
 * child directories exist, ordered by name (strcmp). Entries whose names begin
 * with '.' and entries that are not directories are ignored.
 *
 * Opening a set whose streams differ in length is refused with ZR_E_MISALIGNED
 * and a message naming every stream and its length. Append and delete apply to
 * every stream or to none (see each function for what "none" means under I/O
 * failure). Concurrency: as zr_dataset, per stream; mutations are exclusive.
 */
#ifndef ZR_DATASET_MSSET_H
#define ZR_DATASET_MSSET_H

#include <stddef.h>
#include <stdint.h>

#include "dataset/dataset.h"
#include "util/error.h"

typedef struct zr_msset zr_msset;

/* A set holds at most this many streams: a training sample has a handful, and
 * the bound keeps a hostile directory from opening thousands of stores. */
#define ZR_MSSET_STREAMS_MAX 64

/* Opens every stream of the set in `dirfd` (not taken) with `opts` (may be
 * NULL). Returns 0 and sets *ret (release with zr_msset_close()); ZR_E_NOT_STORE
 * for a directory without streams; ZR_E_LIMIT for more than ZR_MSSET_STREAMS_MAX;
 * ZR_E_MISALIGNED for streams of different lengths; or the error of the first
 * stream that does not open, its name in the message. */
int zr_msset_open(int dirfd, const zr_store_options *opts, zr_msset **ret, zr_error *err);

/* Builds a set from `n` open datasets named names[i] (copied). Takes ownership of
 * every datasets[i], on success and on failure alike (they are closed then).
 * Same checks and errors as zr_msset_open(); EINVAL for a duplicate or empty name. */
int zr_msset_new(zr_dataset **datasets, const char *const *names, size_t n,
                 zr_msset **ret, zr_error *err);

/* Closes every stream and frees the set. NULL allowed. Returns 0 or the first
 * stream's close error (every stream is closed either way). */
int zr_msset_close(zr_msset *ms, zr_error *err);

/* Number of streams, and stream i's name and dataset (borrowed, valid while the
 * set is open), i < zr_msset_count(). */
size_t zr_msset_count(const zr_msset *ms);
const char *zr_msset_name(const zr_msset *ms, size_t i);
zr_dataset *zr_msset_stream(zr_msset *ms, size_t i);

/* The index of the stream called `name`, or -ENOENT. */
int zr_msset_find(const zr_msset *ms, const char *name);

/* The common length of the streams. */
uint64_t zr_msset_length(const zr_msset *ms);

/* Appends batches[i] to the stream called names[i], for i < n; n must be the
 * number of streams and every stream must appear once (ZR_E_SCHEMA otherwise).
 * Every batch is validated first (zr_dataset_check()) and all must hold the same
 * record count (ZR_E_MISALIGNED otherwise, naming each stream's count); only then
 * is each stream appended, in name order. If an append fails midway, the streams
 * already appended are cut back (their new tail records deleted) and the error is
 * returned: the set keeps its old length. If that cut-back itself fails the set is
 * left misaligned, every later mutation fails with ZR_E_MISALIGNED, and reopening
 * reports the lengths. *ret_first (may be NULL) receives the first new index. */
int zr_msset_append(zr_msset *ms, const char *const *names, const zr_batch *batches,
                    size_t n, uint64_t *ret_first, zr_error *err);

/* Deletes records idx[0..n) (swap-last, store.h) from every stream. Indices are
 * checked against the common length first (ZR_E_RANGE, nothing changes). Because
 * a swap-last delete is deterministic, equal streams stay equal. An I/O failure in
 * a later stream after an earlier one succeeded cannot be undone: the set is then
 * marked misaligned as for append. */
int zr_msset_delete(zr_msset *ms, const uint64_t *idx, size_t n, zr_error *err);

#endif
