/* mirror.h: a store in object storage mirrored on local disk (docs/REMOTE.md,
 * "The disk cache").
 *
 * A mirror is a directory of the daemon's disk cache, one per (store, manifest
 * id: cachedir.h), laid out as a store: its metadata files fetched whole and checked at
 * open (meta.zr, schema.msgpack, dict.zr, every .loc and .sum), and its chunk
 * files sparse, filled record by record as records are fetched. daemon/store
 * opens it read-only as any store (zr_mirror_dirfd()); it never reads a byte
 * that is not present, because the dataset above asks the mirror first:
 *
 *   zr_mirror_missing()  which of some records are not here yet (a bit per
 *                        record, `present`, lock-free);
 *   zr_mirror_fetch()    fetch them, earliest need first, and call back once
 *                        all are here or one failed; records are grouped by
 *                        chunk and sorted, neighbours coalesced into one range
 *                        GET (gaps of at most ZR_MIRROR_GAP bytes and an
 *                        eighth of the range, ranges of at most
 *                        ZR_MIRROR_RANGE_MAX), and a record already in flight
 *                        for anybody is not asked for again: the caller waits
 *                        for that request too;
 *   zr_mirror_wait()     the same, blocking (a gather that was not read ahead);
 *   zr_mirror_pin()      keep records from eviction while a gather reads them;
 *   zr_mirror_evict()    a record leaves the cache: its bit is cleared, and the
 *                        pages of its chunk file that no present (or incoming)
 *                        record touches any more are punched out.
 *
 * Every fetched record is checked against its XXH3-64 in {seg}.sum before it
 * is written; a range with a bad record is fetched once more, then fails with
 * ZR_E_CORRUPT. Bytes between records of a coalesced range are dropped.
 *
 * `present` survives the daemon: a mirror closed cleanly (zr_mirror_close():
 * chunk files synced, then the file `clean` made) opens with its records; one
 * found without `clean` (the daemon died) drops them and starts empty. The
 * directory is locked (flock) while open: one daemon per mirror.
 *
 * Threads: any. Lock order: the mirror's mutex is taken after the disk
 * cache's (dataset/rdataset.c) and before the fetcher's; callbacks run on the
 * fetcher's thread without it.
 */
#ifndef ZR_REMOTE_MIRROR_H
#define ZR_REMOTE_MIRROR_H

#include <stddef.h>
#include <stdint.h>

#include "manifest.h"
#include "remote/fetch.h"
#include "remote/source.h"
#include "util/error.h"

/* Coalescing (above): a gap of at most 4 KiB costs less than a request's
 * round trip at the 10 ms links of the bench; ranges up to 8 MiB. */
#define ZR_MIRROR_GAP 4096
#define ZR_MIRROR_RANGE_MAX ((uint64_t)8 << 20)

typedef struct zr_mirror zr_mirror;

/* One record of the store as the mirror needs it: its index and where its
 * stored bytes are (a table entry's chunk, offset and phys_length). */
typedef struct zr_mrec {
        uint64_t idx;
        uint32_t chunk, off, len;
} zr_mrec;

typedef struct zr_mirror_hooks {
        /* records that just became present (the fetcher's thread, no lock) */
        void (*arrived)(void *arg, const zr_mrec *r, size_t n);
        void *arg;
} zr_mirror_hooks;

/* Opens (making it if needed) the mirror of src's store, manifest m, under
 * the directory rootfd (the disk cache's remote/), fetching and checking what
 * metadata it lacks through f with the credentials c (the opening client's).
 * Returns 0 and *ret, or a negative code with *err: ZR_E_LOCKED if another
 * daemon (or another open of this one) holds it, the server's errors, EIO,
 * ENOSPC. */
int zr_mirror_open(int rootfd, zr_rsrc *src, const s3_manifest *m, const s3_creds *c,
                   zr_fetcher *f, zr_mirror **ret, zr_error *err);

/* Its directory, for zr_store_open() (borrowed: valid until close). */
int zr_mirror_dirfd(const zr_mirror *m);

/* Sets the hooks (before any fetch). */
void zr_mirror_set_hooks(zr_mirror *m, const zr_mirror_hooks *h);

/* Calls fn for every present record (its index only: the caller locates it),
 * at most max of them; for the disk cache's accounting after an open. */
void zr_mirror_each_present(zr_mirror *m, void (*fn)(void *arg, uint64_t idx), void *arg);

/* Waits for its requests in flight, syncs, marks it clean, unlocks and frees.
 * NULL allowed; returns NULL. */
zr_mirror *zr_mirror_close(zr_mirror *m);

/* ret[i] = 1 if r[i] is not present (ret may be NULL); returns how many. */
size_t zr_mirror_missing(zr_mirror *m, const zr_mrec *r, size_t n, uint8_t *ret);

typedef void zr_mirror_cb(void *arg, int rc, const zr_error *err);
typedef struct zr_mirror_wait zr_mirror_wait_t;

/* Fetches the records of r[0..n) that are missing (repeats allowed) with
 * priority prio (fetch.h). Returns 1 when none is missing (cb is not called),
 * 0 when cb(arg, rc, err) will be called once every one is present or one
 * failed (on the fetcher's thread), or -ENOMEM (cb not called). With 0,
 * *ret_wait (ret_wait may be NULL) names the wait for zr_mirror_cancel(); it
 * is valid until cb returns. */
int zr_mirror_fetch(zr_mirror *m, const zr_mrec *r, size_t n, uint64_t prio, zr_mirror_cb *cb,
                    void *arg, zr_mirror_wait_t **ret_wait);

/* Gives up a wait of zr_mirror_fetch() whose caller went away: returns 1 when
 * its cb will never be called, 0 when it is being called (or about to be:
 * the caller must let it run). The requests go on for their other waiters.
 * The caller must know that cb has not returned yet (cb and the caller
 * serialize on a lock of their own, held here). */
int zr_mirror_cancel(zr_mirror *m, zr_mirror_wait_t *w);

/* Fetches what r[0..n) lacks with priority "now" and waits. 0 or the error. */
int zr_mirror_wait(zr_mirror *m, const zr_mrec *r, size_t n, zr_error *err);

/* Pins (unpins) r[0..n): a pinned record is not evicted until unpinned (an
 * eviction meanwhile happens at the last unpin). */
void zr_mirror_pin(zr_mirror *m, const zr_mrec *r, size_t n);
void zr_mirror_unpin(zr_mirror *m, const zr_mrec *r, size_t n);

/* Evicts record r (present or not: a record not present is ignored). */
void zr_mirror_evict(zr_mirror *m, const zr_mrec *r);

typedef struct zr_mirror_stats {
        uint64_t records, present;     /* records of the store, present in the mirror */
        uint64_t present_bytes;        /* their stored bytes */
        uint64_t disk_bytes;           /* pages of chunk files holding them */
        uint64_t needed_bytes;         /* bytes of records asked for that were missing */
        uint64_t fetched_bytes;        /* bytes of range GETs received */
        uint64_t requests, refetched, evicted, shared;
} zr_mirror_stats;

void zr_mirror_stats_get(zr_mirror *m, zr_mirror_stats *ret);

#endif
