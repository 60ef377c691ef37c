/* cache.h: the decoded-record cache, one per daemon, shared by every loader.
 *
 * Holds decoded records of compressed datasets, keyed by (dataset id,
 * generation, index) (dataset.h), within a byte budget (record bytes plus a fixed
 * per-entry overhead), evicting the least recently used entry first. A lookup
 * pins the entry it returns (its bytes stay valid and unchanged until
 * zr_rcache_unpin(), even if it is evicted or dropped meanwhile). Entries are
 * immutable: a record is inserted once with its bytes and never rewritten, so a
 * pinned entry can be read without a lock.
 *
 * Thread-safe: one mutex, a leaf; no allocation of record bytes or copy runs
 * under it. It does not know about stores or datasets: the caller decodes.
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

/* Frees the cache; no entry may be pinned. NULL allowed. Returns NULL. */
zr_rcache *zr_rcache_free(zr_rcache *c);

/* Sets the budget and evicts down to it. Returns the number of evictions. */
uint64_t zr_rcache_set_budget(zr_rcache *c, uint64_t budget);

/* Looks up keys[0..n) in one pass: ret[i] is the pinned entry or NULL. Returns
 * the number of hits. Hits become the most recently used. */
size_t zr_rcache_lookup(zr_rcache *c, const zr_rcache_key *keys, size_t n,
                        zr_rcache_entry **ret);

/* The bytes and length of a pinned entry. */
const void *zr_rcache_entry_data(const zr_rcache_entry *en);
size_t zr_rcache_entry_len(const zr_rcache_entry *en);

/* Unpins an entry of zr_rcache_lookup(); NULL allowed. */
void zr_rcache_unpin(zr_rcache *c, zr_rcache_entry *en);

/* Inserts a copy of data[0..len) under *key, evicting least recently used
 * entries to make room, unless the record is larger than an eighth of the budget
 * (one record must not flush the cache) or the key is already present. Returns
 * the number of evictions it caused (0 if it inserted nothing). Never fails: out
 * of memory, it simply does not insert. */
uint64_t zr_rcache_insert(zr_rcache *c, const zr_rcache_key *key, const void *data,
                          size_t len);

/* Drops every entry of `dataset_id` (any generation). Returns how many. */
uint64_t zr_rcache_drop(zr_rcache *c, uint64_t dataset_id);

typedef struct zr_rcache_stats {
        uint64_t budget;  /* bytes allowed */
        uint64_t bytes;   /* bytes resident (records + overhead) */
        uint64_t entries; /* records resident */
        uint64_t evictions; /* since creation */
} zr_rcache_stats;

void zr_rcache_stats_get(zr_rcache *c, zr_rcache_stats *ret);

#endif
