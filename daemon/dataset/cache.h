/* cache.h: the decoded-record cache, one per daemon, shared by every loader.
 *
 * Holds decoded records of compressed datasets, keyed by (dataset id,
 * generation, index) (dataset.h), within a byte budget (record bytes plus a
 * fixed per-entry overhead). A lookup pins the entry it returns (its bytes stay
 * valid and unchanged until zr_rcache_unpin(), even if it is evicted or dropped
 * meanwhile). Entries are immutable: a record is inserted once with its bytes
 * and never rewritten, so a pinned entry can be read without a lock.
 *
 * Eviction knows the future where it is told it. The loaders' records are a
 * pure function of (seed, step), so a loader plans the records of its next
 * steps (zr_rcache_plan(): "owner o will use key k at about time eta") and
 * consumes each planned use when it gathers that step (zr_rcache_unplan()).
 * A record is then evicted by Belady's rule over what is planned:
 *
 *   1. records with no planned use go first, least recently used first (for
 *      them the cache is an LRU, the policy of a cache told nothing);
 *   2. then the record whose next planned use is farthest (a max-heap on it);
 *   3. a new record is not inserted at all (bypass) when the cache is full of
 *      records that will all be used before it.
 *
 * With every future use planned this is the offline optimum (MIN); with the
 * next H steps of each loader planned it is MIN over that horizon, which
 * differs from MIN only for records whose next use lies beyond it. Times are
 * the planner's estimates (any monotonic clock): they order the uses of
 * different loaders.
 *
 * Thread-safe: one mutex, a leaf (an external cache's release callback runs
 * under it, and takes the locks rdataset.h names after it); no allocation of
 * record bytes or copy runs under it (a planned use costs one small
 * allocation under it). It does not know about stores, datasets or loaders:
 * the caller decodes and plans.
 */
#ifndef ZR_DATASET_CACHE_H
#define ZR_DATASET_CACHE_H

#include <stddef.h>
#include <stdint.h>

typedef struct zr_rcache zr_rcache;

typedef struct zr_rcache_key {
        uint64_t dataset_id;
        uint64_t generation;
        uint64_t index;
} zr_rcache_key;

typedef struct zr_rcache_entry zr_rcache_entry;

/* Bytes an entry costs beyond its record (its header, hash and list links),
 * counted against the budget so that many tiny records cannot exceed it. */
#define ZR_RCACHE_ENTRY_OVERHEAD 96

/* Creates a cache with `budget` bytes (0: it caches nothing). Returns 0 and sets
 * *ret, or -ENOMEM. */
int zr_rcache_new(uint64_t budget, zr_rcache **ret);

/* An external cache: the same policy over records whose bytes live elsewhere
 * (the disk cache of remote stores, dataset/rdataset.h). Entries hold only
 * their cost; zr_rcache_insert_external() adds one, and an entry leaving the
 * cache (evicted, dropped, or at free) calls release(arg, key) with the
 * cache's mutex held: release must take no lock that is held while calling
 * into the cache. zr_rcache_lookup() and _insert() are not used on it. */
typedef void zr_rcache_release(void *arg, const zr_rcache_key *key);
int zr_rcache_new_external(uint64_t budget, zr_rcache_release *release, void *arg,
                           zr_rcache **ret);

/* Adds key with `cost` bytes to an external cache, evicting by the rule above;
 * returns 1 if it is now in, 0 if it was bypassed (release(key) has then been
 * called: the caller's bytes must go) or already in. */
int zr_rcache_insert_external(zr_rcache *c, const zr_rcache_key *key, uint64_t cost);

/* Marks keys[0..n) used now (the least-recently-used order of records without
 * a planned use); returns how many are in. */
size_t zr_rcache_touch(zr_rcache *c, const zr_rcache_key *keys, size_t n);

/* Frees the cache; no entry may be pinned. NULL allowed. Returns NULL. */
zr_rcache *zr_rcache_free(zr_rcache *c);

/* Sets the budget and evicts down to it. Returns the number of evictions. */
uint64_t zr_rcache_set_budget(zr_rcache *c, uint64_t budget);

/* Looks up keys[0..n) in one pass: ret[i] is the pinned entry or NULL. Returns
 * the number of hits. Hits become the most recently used. */
size_t zr_rcache_lookup(zr_rcache *c, const zr_rcache_key *keys, size_t n,
                        zr_rcache_entry **ret);

/* Sets ret[i] (ret may be NULL) to 1 if keys[i] is cached, else 0, without
 * pinning or touching anything; returns how many are. For a reader deciding
 * what it must fetch; the answer may be stale by the time it acts. */
size_t zr_rcache_contains(zr_rcache *c, const zr_rcache_key *keys, size_t n, uint8_t *ret);

/* The bytes and length of a pinned entry. */
const void *zr_rcache_entry_data(const zr_rcache_entry *en);
size_t zr_rcache_entry_len(const zr_rcache_entry *en);

/* Unpins an entry of zr_rcache_lookup(); NULL allowed. */
void zr_rcache_unpin(zr_rcache *c, zr_rcache_entry *en);

/* Inserts a copy of data[0..len) under *key, unless the record is larger than
 * an eighth of the budget (one record must not flush the cache), the key is
 * already present, or the eviction rule above bypasses it. Makes room by
 * evicting as above. Returns the number of evictions it caused (0 if it
 * inserted nothing). Never fails: out of memory, it simply does not insert. */
uint64_t zr_rcache_insert(zr_rcache *c, const zr_rcache_key *key, const void *data,
                          size_t len);

/* Plans one use of each of keys[0..n) (repeats plan several) by `owner` (any
 * id but 0, e.g. a loader group's) at time `eta`. The plans of a key are kept
 * whether or not it is cached; they cost ZR_RCACHE_PLAN_COST bytes each, not
 * counted against the budget (the planner bounds its horizon). Out of memory,
 * a plan is simply not recorded. */
void zr_rcache_plan(zr_rcache *c, uint64_t owner, const zr_rcache_key *keys, size_t n,
                    uint64_t eta);

/* Consumes, for each of keys[0..n), the earliest planned use by `owner` (a
 * use that was never planned, or is already consumed, is ignored). Call it
 * when the owner uses the records, before inserting the ones it decoded, so
 * that each record's next use is the one after this. */
void zr_rcache_unplan(zr_rcache *c, uint64_t owner, const zr_rcache_key *keys, size_t n);

/* Consumes every planned use by `owner` (an owner that goes away). Walks
 * every key: O(keys). Returns how many uses. */
uint64_t zr_rcache_unplan_owner(zr_rcache *c, uint64_t owner);

/* Bytes a planned use costs (its node, and its key's share of a table entry). */
#define ZR_RCACHE_PLAN_COST 64

/* Drops every entry and every plan of `dataset_id` (any generation). Returns
 * how many entries. */
uint64_t zr_rcache_drop(zr_rcache *c, uint64_t dataset_id);

typedef struct zr_rcache_stats {
        uint64_t budget;    /* bytes allowed */
        uint64_t bytes;     /* bytes resident (records + overhead) */
        uint64_t entries;   /* records resident */
        uint64_t evictions; /* since creation */
        uint64_t bypassed;  /* inserts left out by the rule (since creation) */
        uint64_t planned;   /* planned uses now */
        uint64_t planned_keys; /* keys with a planned use now, cached or not */
        uint64_t unplanned; /* cached records with no planned use now */
} zr_rcache_stats;

void zr_rcache_stats_get(zr_rcache *c, zr_rcache_stats *ret);

#endif
