/* cache.c: the decoded-record cache (see cache.h).
 *
 * A chained hash table of power-of-two size (grown when the entries outnumber
 * the buckets) and one doubly linked LRU list, both under one mutex. An entry
 * is one allocation: header, then the record's bytes. Eviction unlinks an entry
 * from the table and the list at once and frees it, or, if a gather still pins
 * it, leaves the free to the last unpin; its bytes leave the budget at unlink.
 * It assumes records are immutable for a key (the generation is in the key);
 * it does not decode, and it does not bound the memory pinned by gathers in
 * flight (at most the batches being gathered).
 */
#include "dataset/cache.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* Buckets of a new table: enough for a few thousand records before the first
 * growth; 8 KiB of pointers. */
#define RCACHE_BUCKETS_MIN 1024
/* One record may use at most budget / RCACHE_RECORD_FRACTION: a huge record
 * would otherwise evict everything else for a single hit. */
#define RCACHE_RECORD_FRACTION 8

struct zr_rcache_entry {
        zr_rcache_key key;
        uint64_t hash;
        zr_rcache_entry *chain;           /* next in the bucket */
        zr_rcache_entry *lru_prev, *lru_next; /* lru_prev toward most recent */
        unsigned pins;
        int linked; /* in the table and the list */
        size_t len;
        _Alignas(64) unsigned char data[];
};

struct zr_rcache {
        pthread_mutex_t mutex;
        zr_rcache_entry **buckets;
        size_t nbuckets; /* power of two */
        zr_rcache_entry *mru, *lru;
        uint64_t budget, bytes, entries, evictions;
};

static uint64_t key_hash(const zr_rcache_key *k) {
        uint64_t h = k->dataset_id * 0x9e3779b97f4a7c15ull;
        h ^= k->generation + 0x632be59bd9b4e019ull + (h << 6) + (h >> 2);
        h ^= k->index * 0xbf58476d1ce4e5b9ull;
        h ^= h >> 31;
        h *= 0x94d049bb133111ebull;
        return h ^ (h >> 29);
}

static int key_eq(const zr_rcache_key *a, const zr_rcache_key *b) {
        return a->dataset_id == b->dataset_id && a->generation == b->generation &&
               a->index == b->index;
}

static uint64_t entry_cost(const zr_rcache_entry *en) {
        return (uint64_t)en->len + ZR_RCACHE_ENTRY_OVERHEAD;
}

int zr_rcache_new(uint64_t budget, zr_rcache **ret) {
        zr_rcache *c = calloc(1, sizeof(*c));

        if (!c)
                return -ENOMEM;
        c->buckets = calloc(RCACHE_BUCKETS_MIN, sizeof(*c->buckets));
        if (!c->buckets) {
                free(c);
                return -ENOMEM;
        }
        c->nbuckets = RCACHE_BUCKETS_MIN;
        c->budget = budget;
        pthread_mutex_init(&c->mutex, NULL);
        *ret = c;
        return 0;
}

zr_rcache *zr_rcache_free(zr_rcache *c) {
        if (!c)
                return NULL;
        for (zr_rcache_entry *en = c->mru, *next; en; en = next) {
                next = en->lru_next;
                free(en);
        }
        free(c->buckets);
        pthread_mutex_destroy(&c->mutex);
        free(c);
        return NULL;
}

/* Mutex held: removes en from the table and the list; frees it unless pinned. */
static void unlink_entry(zr_rcache *c, zr_rcache_entry *en) {
        zr_rcache_entry **p = &c->buckets[en->hash & (c->nbuckets - 1)];

        while (*p != en)
                p = &(*p)->chain;
        *p = en->chain;
        if (en->lru_prev)
                en->lru_prev->lru_next = en->lru_next;
        else
                c->mru = en->lru_next;
        if (en->lru_next)
                en->lru_next->lru_prev = en->lru_prev;
        else
                c->lru = en->lru_prev;
        en->linked = 0;
        c->bytes -= entry_cost(en);
        c->entries--;
        if (en->pins == 0)
                free(en);
}

/* Mutex held: evicts from the LRU end until `need` more bytes fit. */
static uint64_t evict_for(zr_rcache *c, uint64_t need) {
        uint64_t n = 0;

        while (c->lru && c->bytes + need > c->budget) {
                unlink_entry(c, c->lru);
                n++;
        }
        c->evictions += n;
        return n;
}

static void lru_touch(zr_rcache *c, zr_rcache_entry *en) {
        if (c->mru == en)
                return;
        /* unlink */
        en->lru_prev->lru_next = en->lru_next;
        if (en->lru_next)
                en->lru_next->lru_prev = en->lru_prev;
        else
                c->lru = en->lru_prev;
        /* push front */
        en->lru_prev = NULL;
        en->lru_next = c->mru;
        c->mru->lru_prev = en;
        c->mru = en;
}

uint64_t zr_rcache_set_budget(zr_rcache *c, uint64_t budget) {
        uint64_t n;

        pthread_mutex_lock(&c->mutex);
        c->budget = budget;
        n = evict_for(c, 0);
        pthread_mutex_unlock(&c->mutex);
        return n;
}

static zr_rcache_entry *find(zr_rcache *c, const zr_rcache_key *k, uint64_t h) {
        for (zr_rcache_entry *en = c->buckets[h & (c->nbuckets - 1)]; en; en = en->chain)
                if (en->hash == h && key_eq(&en->key, k))
                        return en;
        return NULL;
}

size_t zr_rcache_lookup(zr_rcache *c, const zr_rcache_key *keys, size_t n,
                        zr_rcache_entry **ret) {
        size_t hits = 0;

        pthread_mutex_lock(&c->mutex);
        for (size_t i = 0; i < n; i++) {
                zr_rcache_entry *en = c->entries ? find(c, &keys[i], key_hash(&keys[i])) : NULL;
                if (en) {
                        en->pins++;
                        lru_touch(c, en);
                        hits++;
                }
                ret[i] = en;
        }
        pthread_mutex_unlock(&c->mutex);
        return hits;
}

const void *zr_rcache_entry_data(const zr_rcache_entry *en) {
        return en->data;
}

size_t zr_rcache_entry_len(const zr_rcache_entry *en) {
        return en->len;
}

void zr_rcache_unpin(zr_rcache *c, zr_rcache_entry *en) {
        int dead;

        if (!en)
                return;
        pthread_mutex_lock(&c->mutex);
        dead = --en->pins == 0 && !en->linked;
        pthread_mutex_unlock(&c->mutex);
        if (dead)
                free(en);
}

/* Mutex held: doubles the table (best effort: keeps the old one on ENOMEM). */
static void grow(zr_rcache *c) {
        size_t n = c->nbuckets * 2;
        zr_rcache_entry **b = calloc(n, sizeof(*b));

        if (!b)
                return;
        for (size_t i = 0; i < c->nbuckets; i++) {
                for (zr_rcache_entry *en = c->buckets[i], *next; en; en = next) {
                        next = en->chain;
                        en->chain = b[en->hash & (n - 1)];
                        b[en->hash & (n - 1)] = en;
                }
        }
        free(c->buckets);
        c->buckets = b;
        c->nbuckets = n;
}

uint64_t zr_rcache_insert(zr_rcache *c, const zr_rcache_key *key, const void *data,
                          size_t len) {
        uint64_t h = key_hash(key), ev = 0, budget;
        zr_rcache_entry *en;

        pthread_mutex_lock(&c->mutex);
        budget = c->budget;
        pthread_mutex_unlock(&c->mutex);
        if ((uint64_t)len + ZR_RCACHE_ENTRY_OVERHEAD > budget / RCACHE_RECORD_FRACTION)
                return 0;
        /* allocate and copy outside the mutex */
        en = aligned_alloc(64, (sizeof(*en) + len + 63) & ~(size_t)63);
        if (!en)
                return 0;
        memset(en, 0, sizeof(*en));
        en->key = *key;
        en->hash = h;
        en->len = len;
        memcpy(en->data, data, len);

        pthread_mutex_lock(&c->mutex);
        if (find(c, key, h) || entry_cost(en) > c->budget / RCACHE_RECORD_FRACTION) {
                pthread_mutex_unlock(&c->mutex);
                free(en);
                return 0;
        }
        ev = evict_for(c, entry_cost(en));
        if (c->entries >= c->nbuckets)
                grow(c);
        en->chain = c->buckets[h & (c->nbuckets - 1)];
        c->buckets[h & (c->nbuckets - 1)] = en;
        en->lru_next = c->mru;
        if (c->mru)
                c->mru->lru_prev = en;
        c->mru = en;
        if (!c->lru)
                c->lru = en;
        en->linked = 1;
        c->bytes += entry_cost(en);
        c->entries++;
        pthread_mutex_unlock(&c->mutex);
        return ev;
}

uint64_t zr_rcache_drop(zr_rcache *c, uint64_t dataset_id) {
        uint64_t n = 0;

        pthread_mutex_lock(&c->mutex);
        for (zr_rcache_entry *en = c->mru, *next; en; en = next) {
                next = en->lru_next;
                if (en->key.dataset_id == dataset_id) {
                        unlink_entry(c, en);
                        n++;
                }
        }
        pthread_mutex_unlock(&c->mutex);
        return n;
}

void zr_rcache_stats_get(zr_rcache *c, zr_rcache_stats *ret) {
        pthread_mutex_lock(&c->mutex);
        *ret = (zr_rcache_stats){ .budget = c->budget, .bytes = c->bytes,
                                  .entries = c->entries, .evictions = c->evictions };
        pthread_mutex_unlock(&c->mutex);
}
