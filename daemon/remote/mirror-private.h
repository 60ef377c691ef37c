/* mirror-private.h: what mirror.c (open, close, pins and eviction) and
 * mirror-fetch.c (fetching: coalesced ranges, shared requests, checked
 * writes) share: the mirror's state and its small helpers. Not for any other
 * file: mirror.h is the mirror's interface.
 */
#ifndef ZR_REMOTE_MIRROR_PRIVATE_H
#define ZR_REMOTE_MIRROR_PRIVATE_H

#include <pthread.h>
#include <stdatomic.h>

#include "remote/mirror.h"

#define ZR_MIRROR_PAGE 4096u
#define ZR_MIRROR_SEG_LOG2 28
#define ZR_MIRROR_BUCKETS 4096u /* in-flight and pinned records: a few thousand at most */

typedef struct mreq mreq; /* a range GET in flight (mirror-fetch.c) */
typedef struct zr_mirror_wait group;

/* A record in flight or pinned: one table for both, by kind. */
typedef struct rnode {
        uint64_t idx;
        mreq *req;          /* in flight: its request */
        unsigned pins;      /* pinned */
        int evict;          /* an eviction waits for the last unpin */
        zr_mrec rec;
        struct rnode *next;
} rnode;

struct zr_mirror_wait {
        unsigned pending;   /* requests it waits for; 0: being notified */
        int rc;
        zr_error err;
        zr_mirror_cb *cb;
        void *arg;
        int done;           /* zr_mirror_wait() */
};

typedef struct chunkinfo {
        int fd;
        uint64_t used;      /* the object's size: the bytes records may lie in */
        uint16_t *pages;    /* records present or incoming touching each page */
} chunkinfo;

struct zr_mirror {
        int dirfd, lockfd;
        zr_rsrc *src;
        zr_fetcher *f;
        zr_mirror_hooks hooks;
        uint64_t length;
        uint8_t *present;   /* shared mapping of `present` */
        size_t present_len;
        const uint8_t **sums; /* per segment: a mapping of {seg}.sum */
        size_t *sum_len;
        uint64_t nseg;
        chunkinfo *chunks;
        uint32_t nchunks;
        pthread_mutex_t mu;
        pthread_cond_t cv;
        rnode *inflight[ZR_MIRROR_BUCKETS];
        rnode *pinned[ZR_MIRROR_BUCKETS];
        unsigned requests_out;
        mreq *out;          /* the requests out (linked by prev, next) */
        zr_mirror_stats st;
};

/* ---- small helpers ---------------------------------------------------------------- */

static inline unsigned mirror_bucket(uint64_t idx) {
        uint64_t h = idx * 0x9e3779b97f4a7c15ull;
        return (unsigned)(h >> 52) & (ZR_MIRROR_BUCKETS - 1);
}

static inline rnode *mirror_node_find(rnode **t, uint64_t idx) {
        for (rnode *n = t[mirror_bucket(idx)]; n; n = n->next)
                if (n->idx == idx)
                        return n;
        return NULL;
}

/* Adds (NULL: no memory) or removes a node of table t. Mutex held. */
rnode *mirror_node_add(rnode **t, uint64_t idx);
void mirror_node_del(rnode **t, rnode *n);

static inline int mirror_bit_get(const zr_mirror *m, uint64_t i) {
        return (atomic_load_explicit((_Atomic uint8_t *)&m->present[i >> 3], memory_order_acquire) >>
                (i & 7)) & 1;
}

static inline void mirror_bit_set(zr_mirror *m, uint64_t i, int v) {
        _Atomic uint8_t *p = (_Atomic uint8_t *)&m->present[i >> 3];
        if (v)
                atomic_fetch_or_explicit(p, (uint8_t)(1u << (i & 7)), memory_order_release);
        else
                atomic_fetch_and_explicit(p, (uint8_t)~(1u << (i & 7)), memory_order_release);
}

/* Whether r is a record of this store whose bytes lie in its chunk's object. */
static inline int mirror_rec_ok(const zr_mirror *m, const zr_mrec *r) {
        return r->idx < m->length && r->chunk < m->nchunks &&
               (uint64_t)r->off + r->len <= m->chunks[r->chunk].used;
}

/* Counts (d = +1) or uncounts (-1) r's pages; on uncounting, punches those
 * that no record touches any more. Mutex held. */
void mirror_pages_ref(zr_mirror *m, const zr_mrec *r, int d);

#endif
