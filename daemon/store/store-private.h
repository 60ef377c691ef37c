/* store-private.h: what the store's source files share, and nobody else.
 *
 * The zr_store object, the shard and frontier helpers, and the operations one
 * part of the store calls in another (lifecycle in store.c, append.c, gather.c,
 * delete.c, compact.c, inspect.c). Not installed, not for other layers: they
 * use store.h.
 */
#ifndef ZR_STORE_PRIVATE_H
#define ZR_STORE_PRIVATE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "store/chunks.h"
#include "store/codec.h"
#include "store/format.h"
#include "store/journal.h"
#include "store/store.h"

/* A record's place in physical order, for sorting records by where their
 * bytes are: chunk << 32 | offset, then the record's index. */
typedef struct zr_phys {
        uint64_t key;
        uint64_t idx;
} zr_phys;

/* qsort() order of zr_phys (or of structs that begin with one): by key, then
 * by index. */
int zr_phys_cmp(const void *a, const void *b);

/* Table entries read per pread when walking the whole table (stats, compact,
 * verify): 1 MiB of buffer, large enough to amortize the syscall. */
#define STORE_WALK_ENTRIES 65536

struct zr_store {
        int dirfd;
        int meta_fd;
        enum zr_codec codec;
        unsigned chunk_log2;
        uint64_t chunk_cap;
        _Atomic int read_only; /* cleared by zr_store_make_writable(), an exclusive
                                * call; read lock-free (zr_store_read_only()) */
        int recorded;  /* writer.zr is ours: removed at close (holder.h) */
        int map;       /* read through read-only mappings (else pread) */
        uint8_t flags; /* header byte 23 */
        zr_pool *pool;
        zr_coder *zc;
        zr_files *chunks;
        zr_files *locs;
        pthread_mutex_t append_lock; /* appends, the frontier, sync; a leaf above the pool */
        _Atomic uint64_t length;
        _Atomic uint64_t tail; /* chunk << 32 | offset, offset < chunk_cap */
        int dir_dirty;         /* a file was created or removed since the last sync */
        _Atomic int failed;    /* errno of a failed fsync: read-only for good */
        _Atomic int stale;     /* changed on disk under a read-only open, or its
                                * lock lost: served no more (zr_store_stale()) */
};

typedef struct shard_status {
        int r;
        zr_error err;
} shard_status;

static inline uint32_t tail_chunk(uint64_t t) {
        return (uint32_t)(t >> 32);
}

static inline uint32_t tail_offset(uint64_t t) {
        return (uint32_t)t;
}

static inline uint64_t tail_make(uint64_t chunk, uint64_t offset) {
        return chunk << 32 | offset;
}

static inline void shard_range(size_t n, size_t shard, size_t nshards, size_t *lo, size_t *hi) {
        *lo = n * shard / nshards;
        *hi = n * (shard + 1) / nshards;
}

typedef struct gather_job {
        zr_store *s;
        const zr_loc *locs;
        size_t n;
        void *const *dsts;  /* per-record destinations, or NULL: */
        uint8_t *base;      /* packed back to back from base */
        uint64_t *shard_off; /* packed: offset of each shard's first record */
        uint64_t tail;
        shard_status *st;
        /* dense (zr_store_gather_dense): each shard locates its own records
         * idx[lo..hi) into locs (scratch), checks that each is `item` bytes,
         * then reads them; the entries are checked once, as they are located */
        const uint64_t *idx;
        zr_loc *scratch;
        uint64_t item;
        zr_store_times *times; /* NULL: untimed */
        bool stream;           /* copies through streaming stores (util/copy.h) */
        bool pread;            /* reads with pread(), never through a mapping */
} gather_job;

/* The first failing shard's error, forwarded to err (0 if none failed). */
int zr_store_shards_result(shard_status *st, size_t n, zr_error *err);

/* ZR_E_READONLY if the store was opened read-only or has failed, else 0. */
int zr_store_check_writable(const zr_store *s, zr_error *err);

/* Writes meta.zr with `length`, the frontier `tail` and the store's codec,
 * chunk size and flags. No sync. */
int zr_store_write_header(zr_store *s, uint64_t length, uint64_t tail, zr_error *err);

/* zr_store_sync() with append_lock held or exclusive access. */
int zr_store_sync_locked(zr_store *s, zr_error *err);

/* Opens file `id` of table t (zr_files_open()); one it created is fdatasync()ed
 * at once (`what` names its kind in messages; a failure fails the store) and
 * sets *ret_created to 1. */
int zr_store_open_file(zr_store *s, zr_files *t, uint32_t id, int create, uint64_t min_size,
                       const char *what, int *ret_created, zr_error *err);

/* fsync()s the directory; a failure fails the store. */
int zr_store_dir_durable(zr_store *s, zr_error *err);

/* Opens the .loc segments holding entries [0, length); with `create`, missing
 * ones are created durably and counted in *ret_created. */
int zr_store_open_locs(zr_store *s, uint64_t length, int create, int *ret_created,
                       zr_error *err);

/* Writes table entry idx (its segment must be open). No sync. */
int zr_store_put_loc(zr_store *s, uint64_t idx, const zr_loc *loc, zr_error *err);

/* Applies a complete delete journal durably and removes it. */
int zr_store_apply_journal(zr_store *s, const zr_journal *j, zr_error *err);

/* Reads and checks the table entries idx[lo..hi) into locs[lo..hi) against the
 * frontier `tail`. */
int zr_store_locate_range(zr_store *s, const uint64_t *idx, size_t lo, size_t hi,
                          zr_loc *locs, uint64_t tail, zr_error *err);

/* Reads entries [first, first+n) (n <= STORE_WALK_ENTRIES) into locs, using
 * scratch_idx (n entries) for the indices. */
int zr_store_read_table(zr_store *s, uint64_t first, size_t n, zr_loc *locs,
                        uint64_t *scratch_idx, zr_error *err);

/* Runs a gather job (j->s, locs, n, and dsts or base set) on the pool. */
int zr_store_gather_run(zr_store *s, gather_job *j, zr_error *err);

#endif
