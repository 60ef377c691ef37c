/* rdataset.h: a dataset whose store lives in object storage (docs/REMOTE.md).
 *
 * The daemon's remote context (zr_remote) holds what every remote dataset
 * shares: the fetcher (remote/fetch.h), the disk cache's directory, and the
 * disk cache's policy, an external decoded-record cache (cache.h) that holds
 * each present record's size under the key (dataset id, 0, index) and evicts
 * by next use over what the loaders planned, LRU for the rest.
 *
 * Opening is two steps, both on a worker, for every client:
 *   zr_remote_check()    the credentials rule: the manifest GET and a HEAD of
 *                        every object with the client's own credentials; the
 *                        result names the mirror directory (its descriptor,
 *                        whose identity is the store's for the registry);
 *   zr_remote_open()     when no client has it open: the mirror (metadata
 *                        fetched and checked) and its store opened read-only
 *                        as a dataset that carries its zr_rdataset;
 * then zr_rdataset_attach() adds the client's credentials to the open dataset
 * (an id for zr_rdataset_detach() when its handle closes).
 *
 * Reading: a gather calls zr_rdataset_acquire() for its records first (what
 * is missing is fetched, with priority "now", and waited for; then every
 * record is pinned until zr_rdataset_release()); the loaders' read-ahead
 * asks zr_rdataset_missing() and zr_rdataset_fetch() (with the step's time as
 * priority) and plans uses (zr_rdataset_plan(), _unplan()).
 *
 * Lock order: the disk cache's mutex, then the context's, then a mirror's,
 * then the fetcher's. Datasets' own locks are taken by the callers, as for
 * any dataset; none of these functions needs one but the store's contract.
 */
#ifndef ZR_DATASET_RDATASET_H
#define ZR_DATASET_RDATASET_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/stat.h>

#include "dataset/dataset.h"
#include "remote/fetch.h"
#include "remote/mirror.h"
#include "util/pool.h"

typedef struct zr_remote zr_remote;
typedef struct zr_rdataset zr_rdataset;
typedef struct zr_rcheck zr_rcheck;

typedef struct zr_remote_options {
        const char *cache_dir;      /* the disk cache's directory (made if missing) */
        uint64_t budget;            /* bytes of records it keeps */
        zr_fetcher_options fetch;
} zr_remote_options;

int zr_remote_new(const zr_remote_options *o, zr_remote **ret, zr_error *err);
/* After every remote dataset was closed. NULL allowed; returns NULL. */
zr_remote *zr_remote_free(zr_remote *ctx);
void zr_remote_set_budget(zr_remote *ctx, uint64_t budget);

/* What a client asks to open: an s3:// URL, where and how to reach it, and
 * its credentials (copied by the check; wiped with it). */
typedef struct zr_remote_spec {
        const char *url;
        const char *endpoint;       /* "" or NULL: AWS's */
        const char *region;
        int addressing;             /* S3_ADDR_* */
        s3_creds creds;
} zr_remote_spec;

/* The credentials rule and the manifest (above). Returns 0 and *ret, or the
 * server's error (EACCES, ENOENT with its code and message, ZR_E_CORRUPT for
 * a manifest that is not one, ZR_E_STALE when an object is not the size its
 * manifest says). */
int zr_remote_check(zr_remote *ctx, const zr_remote_spec *spec, zr_rcheck **ret,
                    zr_error *err);
zr_rcheck *zr_rcheck_free(zr_rcheck *c);

/* The streams of the set at spec's URL (its zrecord.set, fetched with the
 * spec's credentials): *ret_names (malloc()ed array of malloc()ed names) and
 * *ret_n. The server's errors, ZR_E_CORRUPT for a set manifest that is not one. */
int zr_remote_get_set(zr_remote *ctx, const zr_remote_spec *spec, char ***ret_names,
                      size_t *ret_n, zr_error *err);
/* The mirror directory of the checked store (borrowed: lives with c). */
int zr_rcheck_dirfd(const zr_rcheck *c);

/* Opens the checked store as a read-only dataset (above). ZR_E_LOCKED if the
 * mirror is held (another open of it in flight, or another daemon). */
int zr_remote_open(zr_remote *ctx, zr_rcheck *c, zr_pool *pool, zr_dataset **ret,
                   zr_error *err);

/* Adds c's credentials to ds, which must be the store c checked: returns an
 * id (> 0) for zr_rdataset_detach(), or a negative code: ZR_E_STALE when the
 * objects' ETags differ from those ds was opened with (pushed again: open
 * again once the others closed it), ENOMEM. */
int64_t zr_rdataset_attach(zr_dataset *ds, const zr_rcheck *c, zr_error *err);
void zr_rdataset_detach(zr_dataset *ds, uint64_t id);

/* The remote dataset of ds, or NULL for a local one. */
zr_rdataset *zr_dataset_remote(const zr_dataset *ds);
/* The store's URL ("s3://bucket/prefix"). */
const char *zr_rdataset_url(const zr_rdataset *rd);
/* The dataset's fingerprint (fingerprint.h), computed once at open: true and
 * *ret, or false before then. A remote store never changes under its open. */
bool zr_rdataset_fingerprint(const zr_rdataset *rd, uint64_t *ret);
/* Closes the mirror; called by zr_dataset_close() after the store. */
void zr_rdataset_close(zr_rdataset *rd);

/* Pins held by a gather. */
typedef struct zr_rpin {
        zr_rdataset *rd;
        zr_mrec *recs;
        size_t n;
} zr_rpin;

/* Makes records idx[0..n) of ds present (fetching and waiting) and pins them
 * into *pin; locs may be NULL (they are then located here). Under ds's lock,
 * as a gather. Returns 0, or the fetch's error (or the store's ZR_E_RANGE). */
int zr_rdataset_acquire(zr_dataset *ds, const uint64_t *idx, const zr_loc *locs, size_t n,
                        zr_rpin *pin, zr_error *err);
void zr_rdataset_release(zr_rpin *pin);
/* Pins records (idx, locs)[0..n) of ds into *pin without fetching them: a
 * step read ahead keeps what arrives for it until its gather ran. Returns 0
 * or -ENOMEM (nothing pinned). */
int zr_rdataset_pin(zr_dataset *ds, const uint64_t *idx, const zr_loc *locs, size_t n,
                    zr_rpin *pin);

/* Which of records (idx, locs)[0..n) are missing (ret[i] = 1; ret may be
 * NULL); how many. */
size_t zr_rdataset_missing(zr_dataset *ds, const uint64_t *idx, const zr_loc *locs, size_t n,
                           uint8_t *ret);
/* Fetches the missing ones of (idx, locs)[0..n) with priority prio; as
 * zr_mirror_fetch(): 1 when none is missing, 0 when cb will be called. Bytes
 * asked for are added to *ret_bytes (may be NULL). */
int zr_rdataset_fetch(zr_dataset *ds, const uint64_t *idx, const zr_loc *locs, size_t n,
                      uint64_t prio, zr_mirror_cb *cb, void *arg, uint64_t *ret_bytes,
                      zr_mirror_wait_t **ret_wait);
/* zr_mirror_cancel() of a wait of zr_rdataset_fetch() on ds. */
int zr_rdataset_cancel(zr_dataset *ds, zr_mirror_wait_t *w);
/* The disk cache's budget, bytes (what planning ahead of a remote store covers). */
uint64_t zr_rdataset_cache_budget(zr_dataset *ds);

/* Plans (consumes) one use of each of idx[0..n) by owner at eta in the disk
 * cache's policy (cache.h's zr_rcache_plan(), _unplan()). */
void zr_rdataset_plan(zr_dataset *ds, uint64_t owner, const uint64_t *idx, size_t n,
                      uint64_t eta);
void zr_rdataset_unplan(zr_dataset *ds, uint64_t owner, const uint64_t *idx, size_t n);
void zr_remote_unplan_owner(zr_remote *ctx, uint64_t owner);
/* The same for the context of remote dataset ds (no-op for a local one). */
void zr_rdataset_unplan_owner(zr_dataset *ds, uint64_t owner);

/* Reads every record (fetching through the cache in bounded batches) and
 * checks it as zr_store_verify() does. Same report. */
int zr_rdataset_verify(zr_dataset *ds, zr_verify_report *ret, zr_error *err);

/* What STATUS shows. */
typedef struct zr_remote_stats {
        zr_fetcher_stats fetch;
        uint64_t datasets;          /* remote datasets open */
        uint64_t budget, cached_bytes, cached_records, disk_bytes, evictions, bypassed;
        uint64_t needed_bytes, fetched_bytes, hits, misses, shared, refetched;
        char dir[256];
} zr_remote_stats;
void zr_remote_stats_get(zr_remote *ctx, zr_remote_stats *ret);

#endif
