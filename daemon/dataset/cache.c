/* cache.c: the decoded-record cache (see cache.h).
 *
 * A chained hash table of power-of-two size (grown when the keys outnumber the
 * buckets) of nodes, one per key that is cached or has a planned use, under
 * one mutex. A node's planned uses are a short list sorted by time; its
 * record, when cached, is one separate allocation (header, then the bytes) so
 * that a pinned record can outlive its node. A cached node with no planned use
 * sits in one doubly linked LRU list (the "unplanned" list, evicted first); a
 * cached node with planned uses sits in a max-heap keyed by its next use (the
 * head of its list). Eviction unlinks the record at once and frees it, or, if
 * a gather still pins it, leaves the free to the last unpin; its bytes leave
 * the budget at unlink. It assumes records are immutable for a key (the
 * generation is in the key); it does not decode, and it does not bound the
 * memory pinned by gathers in flight (at most the batches being gathered) or
 * held by plans (the planner does).
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
/* The time of "no planned use": later than every planned one. */
#define ETA_NEVER UINT64_MAX

struct zr_rcache_entry {
        unsigned pins;
        int linked; /* its node still holds it */
        size_t len;
        _Alignas(64) unsigned char data[];
};

typedef struct use {
        struct use *next; /* later uses */
        uint64_t owner, eta;
} use;

typedef struct node {
        zr_rcache_key key;
        uint64_t hash;
        struct node *chain;          /* next in the bucket */
        use *uses;                   /* planned uses, earliest first */
        zr_rcache_entry *en;         /* the cached record, or NULL */
        size_t heap_pos;             /* 1 + its place in the heap; 0: not there */
        struct node *lru_prev, *lru_next; /* the unplanned list, toward most recent */
        int in_lru;
} node;

struct zr_rcache {
        pthread_mutex_t mutex;
        node **buckets;
        size_t nbuckets; /* power of two */
        size_t nnodes;
        node *mru, *lru;   /* cached, nothing planned */
        node **heap;       /* cached with a plan, farthest next use on top */
        size_t nheap, heap_cap;
        uint64_t budget, bytes, entries, evictions, bypassed, planned, planned_keys;
        uint64_t nlru;     /* cached with nothing planned */
        zr_rcache_release *release; /* external: entries hold no bytes */
        void *release_arg;
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

/* What a record costs against the budget: its bytes and its entry's memory;
 * an external entry, its bytes (the entry's memory is not what its budget
 * bounds). */
static uint64_t cost_of(const zr_rcache *c, size_t len) {
        return (uint64_t)len + (c->release ? 0 : ZR_RCACHE_ENTRY_OVERHEAD);
}

static uint64_t next_use(const node *n) {
        return n->uses ? n->uses->eta : ETA_NEVER;
}

int zr_rcache_new_external(uint64_t budget, zr_rcache_release *release, void *arg,
                           zr_rcache **ret) {
        int r = zr_rcache_new(budget, ret);
        if (r == 0) {
                (*ret)->release = release;
                (*ret)->release_arg = arg;
        }
        return r;
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

static void uses_free(use *u) {
        while (u) {
                use *next = u->next;
                free(u);
                u = next;
        }
}

zr_rcache *zr_rcache_free(zr_rcache *c) {
        if (!c)
                return NULL;
        for (size_t b = 0; b < c->nbuckets; b++) {
                for (node *n = c->buckets[b], *next; n; n = next) {
                        next = n->chain;
                        if (n->en && c->release)
                                c->release(c->release_arg, &n->key);
                        uses_free(n->uses);
                        free(n->en);
                        free(n);
                }
        }
        free(c->buckets);
        free(c->heap);
        pthread_mutex_destroy(&c->mutex);
        free(c);
        return NULL;
}

/* ---- the unplanned list and the heap (mutex held) ------------------------------ */

static void lru_unlink(zr_rcache *c, node *n) {
        if (!n->in_lru)
                return;
        if (n->lru_prev)
                n->lru_prev->lru_next = n->lru_next;
        else
                c->mru = n->lru_next;
        if (n->lru_next)
                n->lru_next->lru_prev = n->lru_prev;
        else
                c->lru = n->lru_prev;
        n->lru_prev = n->lru_next = NULL;
        n->in_lru = 0;
        c->nlru--;
}

static void lru_push_front(zr_rcache *c, node *n) {
        n->lru_prev = NULL;
        n->lru_next = c->mru;
        if (c->mru)
                c->mru->lru_prev = n;
        c->mru = n;
        if (!c->lru)
                c->lru = n;
        n->in_lru = 1;
        c->nlru++;
}

static void heap_set(zr_rcache *c, size_t i, node *n) {
        c->heap[i] = n;
        n->heap_pos = i + 1;
}

static void heap_up(zr_rcache *c, size_t i) {
        node *n = c->heap[i];
        uint64_t k = next_use(n);

        while (i > 0) {
                size_t p = (i - 1) / 2;
                if (next_use(c->heap[p]) >= k)
                        break;
                heap_set(c, i, c->heap[p]);
                i = p;
        }
        heap_set(c, i, n);
}

static void heap_down(zr_rcache *c, size_t i) {
        node *n = c->heap[i];
        uint64_t k = next_use(n);

        for (;;) {
                size_t l = 2 * i + 1, r = l + 1, m = i;
                uint64_t km = k;
                if (l < c->nheap && next_use(c->heap[l]) > km) {
                        m = l;
                        km = next_use(c->heap[l]);
                }
                if (r < c->nheap && next_use(c->heap[r]) > km)
                        m = r;
                if (m == i)
                        break;
                heap_set(c, i, c->heap[m]);
                i = m;
        }
        heap_set(c, i, n);
}

static void heap_remove(zr_rcache *c, node *n) {
        node *last;
        size_t i;

        if (!n->heap_pos)
                return;
        i = n->heap_pos - 1;
        n->heap_pos = 0;
        last = c->heap[--c->nheap];
        if (i == c->nheap)
                return;
        heap_set(c, i, last);
        heap_up(c, i);
        heap_down(c, last->heap_pos - 1);
}

/* 0, or -1 when the heap cannot grow (the node then goes to the unplanned
 * list: it is evicted earlier than it should be, nothing worse). */
static int heap_push(zr_rcache *c, node *n) {
        if (c->nheap == c->heap_cap) {
                size_t cap = c->heap_cap ? 2 * c->heap_cap : 1024;
                node **h = realloc(c->heap, cap * sizeof(*h));
                if (!h)
                        return -1;
                c->heap = h;
                c->heap_cap = cap;
        }
        heap_set(c, c->nheap++, n);
        heap_up(c, c->nheap - 1);
        return 0;
}

/* Puts a node where its state says, after its record or its plans changed:
 * cached with plans in the heap (at its next use), cached without in the
 * unplanned list, uncached in neither. */
static void place(zr_rcache *c, node *n) {
        if (!n->en) {
                heap_remove(c, n);
                lru_unlink(c, n);
                return;
        }
        if (n->uses) {
                lru_unlink(c, n);
                if (n->heap_pos) {
                        heap_up(c, n->heap_pos - 1);
                        heap_down(c, n->heap_pos - 1);
                } else if (heap_push(c, n) == 0) {
                        return;
                } else if (!n->in_lru) {
                        lru_push_front(c, n);
                }
                return;
        }
        heap_remove(c, n);
        if (!n->in_lru)
                lru_push_front(c, n);
}

/* ---- nodes (mutex held) ----------------------------------------------------------- */

static node *find(zr_rcache *c, const zr_rcache_key *k, uint64_t h) {
        for (node *n = c->buckets[h & (c->nbuckets - 1)]; n; n = n->chain)
                if (n->hash == h && key_eq(&n->key, k))
                        return n;
        return NULL;
}

/* Doubles the table (best effort: keeps the old one on ENOMEM). */
static void grow(zr_rcache *c) {
        size_t nb = c->nbuckets * 2;
        node **b = calloc(nb, sizeof(*b));

        if (!b)
                return;
        for (size_t i = 0; i < c->nbuckets; i++) {
                for (node *n = c->buckets[i], *next; n; n = next) {
                        next = n->chain;
                        n->chain = b[n->hash & (nb - 1)];
                        b[n->hash & (nb - 1)] = n;
                }
        }
        free(c->buckets);
        c->buckets = b;
        c->nbuckets = nb;
}

static node *node_add(zr_rcache *c, const zr_rcache_key *k, uint64_t h) {
        node *n = calloc(1, sizeof(*n));

        if (!n)
                return NULL;
        if (c->nnodes >= c->nbuckets)
                grow(c);
        n->key = *k;
        n->hash = h;
        n->chain = c->buckets[h & (c->nbuckets - 1)];
        c->buckets[h & (c->nbuckets - 1)] = n;
        c->nnodes++;
        return n;
}

/* Frees a node that holds neither a record nor a plan. */
static void node_gc(zr_rcache *c, node *n) {
        node **p;

        if (n->en || n->uses)
                return;
        p = &c->buckets[n->hash & (c->nbuckets - 1)];
        while (*p != n)
                p = &(*p)->chain;
        *p = n->chain;
        c->nnodes--;
        free(n);
}

/* Takes n's record out of the cache (freed now unless pinned). */
static void uncache(zr_rcache *c, node *n) {
        zr_rcache_entry *en = n->en;

        if (c->release)
                c->release(c->release_arg, &n->key);
        n->en = NULL;
        place(c, n);
        en->linked = 0;
        c->bytes -= cost_of(c, en->len);
        c->entries--;
        if (en->pins == 0)
                free(en);
}

static void evict(zr_rcache *c, node *n) {
        uncache(c, n);
        c->evictions++;
        node_gc(c, n);
}

/* Evicts until `need` more bytes fit, never a record used before `eta` (the
 * next use of the record that needs the room) unless `force`. Returns the
 * evictions, and sets *ok to whether the room is there. */
static uint64_t make_room(zr_rcache *c, uint64_t need, uint64_t eta, int force, int *ok) {
        uint64_t ev = 0;

        while (c->bytes + need > c->budget) {
                node *victim = c->lru;
                if (!victim && c->nheap && (force || next_use(c->heap[0]) > eta))
                        victim = c->heap[0];
                if (!victim) {
                        *ok = 0;
                        return ev;
                }
                evict(c, victim);
                ev++;
        }
        *ok = 1;
        return ev;
}

/* ---- the calls ------------------------------------------------------------------ */

uint64_t zr_rcache_set_budget(zr_rcache *c, uint64_t budget) {
        uint64_t n = 0;
        int ok;

        pthread_mutex_lock(&c->mutex);
        c->budget = budget;
        n = make_room(c, 0, ETA_NEVER, 1, &ok);
        pthread_mutex_unlock(&c->mutex);
        return n;
}

size_t zr_rcache_lookup(zr_rcache *c, const zr_rcache_key *keys, size_t n,
                        zr_rcache_entry **ret) {
        size_t hits = 0;

        pthread_mutex_lock(&c->mutex);
        for (size_t i = 0; i < n; i++) {
                node *nd = c->entries ? find(c, &keys[i], key_hash(&keys[i])) : NULL;
                ret[i] = NULL;
                if (!nd || !nd->en)
                        continue;
                nd->en->pins++;
                if (nd->in_lru && c->mru != nd) {
                        lru_unlink(c, nd);
                        lru_push_front(c, nd);
                }
                ret[i] = nd->en;
                hits++;
        }
        pthread_mutex_unlock(&c->mutex);
        return hits;
}

size_t zr_rcache_contains(zr_rcache *c, const zr_rcache_key *keys, size_t n, uint8_t *ret) {
        size_t k = 0;

        pthread_mutex_lock(&c->mutex);
        for (size_t i = 0; i < n; i++) {
                node *nd = c->entries ? find(c, &keys[i], key_hash(&keys[i])) : NULL;
                int in = nd && nd->en;
                if (ret)
                        ret[i] = (uint8_t)in;
                k += (size_t)in;
        }
        pthread_mutex_unlock(&c->mutex);
        return k;
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

uint64_t zr_rcache_insert(zr_rcache *c, const zr_rcache_key *key, const void *data,
                          size_t len) {
        uint64_t h = key_hash(key), ev = 0, budget;
        zr_rcache_entry *en;
        node *n;
        int ok;

        pthread_mutex_lock(&c->mutex);
        budget = c->budget;
        pthread_mutex_unlock(&c->mutex);
        if (cost_of(c, len) > budget / RCACHE_RECORD_FRACTION)
                return 0;
        /* allocate and copy outside the mutex */
        en = aligned_alloc(64, (sizeof(*en) + len + 63) & ~(size_t)63);
        if (!en)
                return 0;
        en->pins = 0;
        en->linked = 1;
        en->len = len;
        memcpy(en->data, data, len);

        pthread_mutex_lock(&c->mutex);
        n = find(c, key, h);
        if ((n && n->en) || cost_of(c, len) > c->budget / RCACHE_RECORD_FRACTION)
                goto drop;
        ev = make_room(c, cost_of(c, len), n ? next_use(n) : ETA_NEVER, 0, &ok);
        if (!ok) {
                c->bypassed++;
                goto drop;
        }
        if (!n)
                n = node_add(c, key, h);
        if (!n)
                goto drop;
        n->en = en;
        c->bytes += cost_of(c, len);
        c->entries++;
        place(c, n);
        pthread_mutex_unlock(&c->mutex);
        return ev;
drop:
        pthread_mutex_unlock(&c->mutex);
        free(en);
        return ev;
}

int zr_rcache_insert_external(zr_rcache *c, const zr_rcache_key *key, uint64_t cost) {
        uint64_t h = key_hash(key);
        zr_rcache_entry *en;
        node *n;
        int ok, in = 0;

        en = aligned_alloc(64, (sizeof(*en) + 63) & ~(size_t)63);
        if (!en)
                return 0;
        en->pins = 0;
        en->linked = 1;
        en->len = (size_t)cost;
        pthread_mutex_lock(&c->mutex);
        n = find(c, key, h);
        if (n && n->en)
                goto drop;
        make_room(c, cost_of(c, en->len), n ? next_use(n) : ETA_NEVER, 0, &ok);
        if (!ok) {
                c->bypassed++;
                c->release(c->release_arg, key);
                goto drop;
        }
        if (!n && !(n = node_add(c, key, h))) {
                c->release(c->release_arg, key);
                goto drop;
        }
        n->en = en;
        c->bytes += cost_of(c, en->len);
        c->entries++;
        place(c, n);
        in = 1;
        en = NULL;
drop:
        pthread_mutex_unlock(&c->mutex);
        free(en);
        return in;
}

size_t zr_rcache_touch(zr_rcache *c, const zr_rcache_key *keys, size_t n) {
        size_t k = 0;

        pthread_mutex_lock(&c->mutex);
        for (size_t i = 0; i < n; i++) {
                node *nd = c->entries ? find(c, &keys[i], key_hash(&keys[i])) : NULL;
                if (!nd || !nd->en)
                        continue;
                k++;
                if (nd->in_lru && c->mru != nd) {
                        lru_unlink(c, nd);
                        lru_push_front(c, nd);
                }
        }
        pthread_mutex_unlock(&c->mutex);
        return k;
}

void zr_rcache_plan(zr_rcache *c, uint64_t owner, const zr_rcache_key *keys, size_t n,
                    uint64_t eta) {
        if (eta == ETA_NEVER)
                eta--;
        pthread_mutex_lock(&c->mutex);
        for (size_t i = 0; i < n; i++) {
                uint64_t h = key_hash(&keys[i]);
                node *nd = find(c, &keys[i], h);
                use *u, **p;
                if (!nd && !(nd = node_add(c, &keys[i], h)))
                        continue;
                u = malloc(sizeof(*u));
                if (!u) {
                        node_gc(c, nd);
                        continue;
                }
                u->owner = owner;
                u->eta = eta;
                if (!nd->uses)
                        c->planned_keys++;
                for (p = &nd->uses; *p && (*p)->eta <= eta; p = &(*p)->next)
                        ;
                u->next = *p;
                *p = u;
                c->planned++;
                if (nd->en && p == &nd->uses)
                        place(c, nd); /* its next use moved earlier */
        }
        pthread_mutex_unlock(&c->mutex);
}

void zr_rcache_unplan(zr_rcache *c, uint64_t owner, const zr_rcache_key *keys, size_t n) {
        pthread_mutex_lock(&c->mutex);
        for (size_t i = 0; i < n && c->planned; i++) {
                node *nd = find(c, &keys[i], key_hash(&keys[i]));
                use **p;
                if (!nd)
                        continue;
                for (p = &nd->uses; *p && (*p)->owner != owner; p = &(*p)->next)
                        ;
                if (!*p)
                        continue;
                use *u = *p;
                int head = p == &nd->uses;
                *p = u->next;
                free(u);
                c->planned--;
                if (!nd->uses)
                        c->planned_keys--;
                if (nd->en && head)
                        place(c, nd); /* its next use moved later, or is gone */
                node_gc(c, nd);
        }
        pthread_mutex_unlock(&c->mutex);
}

uint64_t zr_rcache_unplan_owner(zr_rcache *c, uint64_t owner) {
        uint64_t k = 0;

        pthread_mutex_lock(&c->mutex);
        for (size_t b = 0; b < c->nbuckets && c->planned; b++) {
                for (node *n = c->buckets[b], *next; n; n = next) {
                        use **p = &n->uses;
                        int head_gone = 0;
                        next = n->chain;
                        while (*p) {
                                use *u = *p;
                                if (u->owner != owner) {
                                        p = &u->next;
                                        continue;
                                }
                                head_gone |= p == &n->uses;
                                *p = u->next;
                                free(u);
                                c->planned--;
                                k++;
                        }
                        if (!head_gone)
                                continue;
                        if (!n->uses)
                                c->planned_keys--;
                        if (n->en)
                                place(c, n);
                        node_gc(c, n);
                }
        }
        pthread_mutex_unlock(&c->mutex);
        return k;
}

uint64_t zr_rcache_drop(zr_rcache *c, uint64_t dataset_id) {
        uint64_t k = 0;

        pthread_mutex_lock(&c->mutex);
        for (size_t b = 0; b < c->nbuckets; b++) {
                for (node *n = c->buckets[b], *next; n; n = next) {
                        next = n->chain;
                        if (n->key.dataset_id != dataset_id)
                                continue;
                        if (n->en) {
                                uncache(c, n);
                                k++;
                        }
                        for (use *u = n->uses; u; u = u->next)
                                c->planned--;
                        if (n->uses)
                                c->planned_keys--;
                        uses_free(n->uses);
                        n->uses = NULL;
                        node_gc(c, n);
                }
        }
        pthread_mutex_unlock(&c->mutex);
        return k;
}

void zr_rcache_stats_get(zr_rcache *c, zr_rcache_stats *ret) {
        pthread_mutex_lock(&c->mutex);
        *ret = (zr_rcache_stats){ .budget = c->budget, .bytes = c->bytes,
                                  .entries = c->entries, .evictions = c->evictions,
                                  .bypassed = c->bypassed, .planned = c->planned,
                                  .planned_keys = c->planned_keys, .unplanned = c->nlru };
        pthread_mutex_unlock(&c->mutex);
}
