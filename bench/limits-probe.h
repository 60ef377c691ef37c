/* limits-probe.h: the machine-limit probes every store figure is measured against.
 *
 * A probe does what the store's gather does with everything but the store taken
 * away: a memcpy gather copies records from an in-memory copy into a destination
 * in the batch's order; a zstd gather decompresses in-memory frames of the same
 * records (one reused ZSTD_DCtx per thread, the shared DDict if any) into the
 * same destination. Both split a batch into contiguous shards, one per thread of
 * a limits_team: persistent threads woken once per batch, as a pool is, so the
 * probe pays the same wake-up a store gather pays.
 *
 * Records here are all `rec` bytes (the benchmark's workloads are fixed-size).
 */
#ifndef ZR_BENCH_LIMITS_PROBE_H
#define ZR_BENCH_LIMITS_PROBE_H

#include <stddef.h>
#include <stdint.h>

#define ZSTD_STATIC_LINKING_ONLY 1
#include <zstd.h>

typedef struct limits_team limits_team;

/* Runs shard `shard` of `nshards`. */
typedef void (*limits_shard_fn)(void *arg, size_t shard, size_t nshards);

/* Starts a team of `nthreads` (>= 1) threads counting the caller: nthreads - 1
 * workers are created. Returns 0 and sets *ret, or a negative errno. */
int limits_team_new(size_t nthreads, limits_team **ret);

/* Stops and frees the team. NULL allowed. Returns NULL. */
limits_team *limits_team_free(limits_team *team);

/* Number of threads (the caller included); 1 for a NULL team. */
size_t limits_team_size(const limits_team *team);

/* Runs fn(arg, i, n) for every shard i of n = limits_team_size(team) and returns
 * when all are done; the caller runs shard 0. team may be NULL (one shard). */
void limits_team_run(limits_team *team, limits_shard_fn fn, void *arg);

/* Copies record idx[i] (rec bytes at src + idx[i] * rec) to dst + i * rec for
 * every i in [0, n), in contiguous shards on the team (NULL: on the caller). */
void limits_memcpy_gather(limits_team *team, uint8_t *dst, const uint8_t *src, size_t rec,
                          const uint64_t *idx, size_t n);

/* limits_memcpy_gather() through the daemon's streaming copy (util/copy.h),
 * whatever the batch's size: what a large gather's copies can reach here. */
void limits_stream_gather(limits_team *team, uint8_t *dst, const uint8_t *src, size_t rec,
                          const uint64_t *idx, size_t n);

/* Reads record idx[i] (rec bytes at offset off[idx[i]] of descriptor
 * fd[idx[i]]) into dst + i * rec with one pread each, for every i in [0, n), in
 * contiguous shards on the team: what a store that reads its files with pread
 * can reach at best, with the table lookups taken away. Returns 0, or -errno,
 * or -EIO for a short read. */
int limits_pread_gather(limits_team *team, const int *fd, const uint64_t *off, size_t rec,
                        uint8_t *dst, const uint64_t *idx, size_t n);

/* n zstd frames of fixed-size records, as the store would write them. */
typedef struct limits_frames {
        size_t n;
        size_t rec;        /* decoded size of every frame */
        uint8_t **frame;   /* frame[i]: the compressed bytes of record i */
        size_t *len;       /* len[i]: their size */
        uint64_t total;    /* sum of len[] */
} limits_frames;

/* Compresses the n records of rec bytes at src, each into its own frame at
 * `level` with a checksum (against cdict if not NULL: then at the CDict's level),
 * on the team. Returns 0 and sets *ret (free with limits_frames_free()), or
 * -ENOMEM, or -EIO if zstd fails. */
int limits_frames_new(limits_team *team, const uint8_t *src, size_t rec, size_t n, int level,
                      const ZSTD_CDict *cdict, limits_frames **ret);

/* Allocates an empty set of n frames of records of rec bytes, for a caller
 * that fills frame[i] (each malloc()ed: limits_frames_free() frees them), len[i]
 * and total itself (store-bench takes the store's own frames). NULL if out of
 * memory. */
limits_frames *limits_frames_alloc(size_t n, size_t rec);

/* Frees frames. NULL allowed. Returns NULL. */
limits_frames *limits_frames_free(limits_frames *f);

/* Decompresses frame idx[i] into dst + i * rec for every i in [0, n), in
 * contiguous shards on the team. dctx[s] is shard s's context (one per team
 * thread, reused; the caller owns them); ddict may be NULL. Returns 0, or -EIO
 * if a frame did not decode to exactly rec bytes. */
int limits_zstd_gather(limits_team *team, ZSTD_DCtx *const *dctx, const ZSTD_DDict *ddict,
                       const limits_frames *f, uint8_t *dst, const uint64_t *idx, size_t n);

#endif
