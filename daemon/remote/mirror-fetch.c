/* mirror-fetch.c: records fetched into a mirror (mirror.h: zr_mirror_fetch(),
 * zr_mirror_wait(), zr_mirror_cancel(), zr_mirror_missing()).
 *
 * The records asked for that are neither present nor in flight are sorted by
 * chunk and offset and coalesced into range GETs (mirror.h says how near is
 * near); each record in flight is in the mirror's table of index -> request,
 * so a later ask for it joins that request's waiters instead of fetching it
 * again (and hurries it when it needs it sooner). A waiter ("group") is one
 * call's records: it is called back when the last of its requests is done.
 * An arrived range is checked record by record against {seg}.sum, fetched
 * once more on a mismatch, then written into the chunk files; only then are
 * the records' bits set.
 */
#include "remote/mirror-private.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "url.h"

struct mreq {
        zr_fetch q;
        zr_mirror *m;
        char name[32];
        uint32_t chunk;
        uint64_t off, len;
        uint8_t *buf;
        size_t nrec;
        zr_mrec *rec;
        group **waiters;
        size_t nwait, capwait;
        int refetched;
        mreq *prev, *next;  /* the mirror's requests out */
};

/* Record idx's checksum, from {seg}.sum. */
static uint64_t sum_of(const zr_mirror *m, uint64_t idx) {
        const uint8_t *p = m->sums[idx >> ZR_MIRROR_SEG_LOG2] + (idx & (((uint64_t)1 << ZR_MIRROR_SEG_LOG2) - 1)) * 8;
        uint64_t v = 0;
        for (int b = 7; b >= 0; b--)
                v = v << 8 | p[b];
        return v;
}


size_t zr_mirror_missing(zr_mirror *m, const zr_mrec *r, size_t n, uint8_t *ret) {
        size_t k = 0;
        for (size_t i = 0; i < n; i++) {
                int miss = r[i].idx < m->length && !mirror_bit_get(m, r[i].idx);
                if (ret)
                        ret[i] = (uint8_t)miss;
                k += (size_t)miss;
        }
        return k;
}

static int add_waiter(mreq *q, group *g) {
        if (q->nwait && q->waiters[q->nwait - 1] == g)
                return 0; /* already (records of one request come together) */
        for (size_t i = 0; i < q->nwait; i++)
                if (q->waiters[i] == g)
                        return 0;
        if (q->nwait == q->capwait) {
                size_t cap = q->capwait ? 2 * q->capwait : 2;
                group **w = realloc(q->waiters, cap * sizeof(*w));
                if (!w)
                        return -ENOMEM;
                q->waiters = w;
                q->capwait = cap;
        }
        q->waiters[q->nwait++] = g;
        g->pending++;
        return 1;
}

static void req_done(zr_fetch *fq, int rc, const zr_error *err);

static void req_submit(mreq *q) {
        q->q = (zr_fetch){ .src = q->m->src, .name = q->name, .off = q->off, .len = q->len,
                           .dst = q->buf, .prio = q->q.prio, .done = req_done, .arg = q };
        zr_fetcher_submit(q->m->f, &q->q);
}

static void req_free(mreq *q) {
        free(q->buf);
        free(q->rec);
        free(q->waiters);
        free(q);
}

static void req_done(zr_fetch *fq, int rc, const zr_error *err) {
        mreq *q = fq->arg;
        zr_mirror *m = q->m;
        zr_error e = {0};
        size_t k = 0;

        if (err && err->code)
                e = *err;
        if (rc == 0) {
                for (k = 0; k < q->nrec; k++) {
                        const zr_mrec *r = &q->rec[k];
                        if (s3_checksum(q->buf + (r->off - q->off), r->len) != sum_of(m, r->idx))
                                break;
                }
                if (k < q->nrec && !q->refetched) {
                        /* fetched again once: a damaged body, not a damaged store */
                        q->refetched = 1;
                        pthread_mutex_lock(&m->mu);
                        m->st.refetched++;
                        pthread_mutex_unlock(&m->mu);
                        req_submit(q);
                        return;
                }
                if (k < q->nrec)
                        rc = zr_error_set(&e, ZR_E_CORRUPT, "%s/%s bytes %" PRIu32 "-%" PRIu64
                                          ": record %" PRIu64 " does not match its checksum, "
                                          "twice", zr_rsrc_url(m->src), q->name, q->rec[k].off,
                                          (uint64_t)q->rec[k].off + q->rec[k].len,
                                          q->rec[k].idx);
        }
        for (k = 0; rc == 0 && k < q->nrec; k++) {
                const zr_mrec *r = &q->rec[k];
                const uint8_t *p = q->buf + (r->off - q->off);
                for (uint64_t w = 0; w < r->len;) {
                        ssize_t n = pwrite(m->chunks[r->chunk].fd, p + w, r->len - w,
                                           (off_t)(r->off + w));
                        if (n <= 0) {
                                rc = zr_error_errno(&e, n < 0 ? errno : EIO, "the mirror of %s: "
                                                    "writing %s", zr_rsrc_url(m->src), q->name);
                                break;
                        }
                        w += (uint64_t)n;
                }
        }
        group **notify = NULL;
        size_t nn = 0;
        pthread_mutex_lock(&m->mu);
        for (k = 0; k < q->nrec; k++) {
                const zr_mrec *r = &q->rec[k];
                rnode *n = mirror_node_find(m->inflight, r->idx);
                if (n && n->req == q)
                        mirror_node_del(m->inflight, n);
                if (rc == 0) {
                        mirror_bit_set(m, r->idx, 1);
                        m->st.present++;
                        m->st.present_bytes += r->len;
                } else {
                        mirror_pages_ref(m, r, -1);
                }
        }
        m->st.fetched_bytes += rc == 0 ? q->len : 0;
        notify = malloc(q->nwait * sizeof(*notify) + 1);
        for (size_t i = 0; i < q->nwait; i++) {
                group *g = q->waiters[i];
                if (rc < 0 && g->rc == 0) {
                        g->rc = rc;
                        g->err = e;
                }
                if (--g->pending == 0 && notify)
                        notify[nn++] = g;
        }
        pthread_mutex_unlock(&m->mu);
        if (rc == 0 && m->hooks.arrived)
                m->hooks.arrived(m->hooks.arg, q->rec, q->nrec);
        for (size_t i = 0; i < nn; i++) {
                group *g = notify[i];
                g->cb(g->arg, g->rc, &g->err);
                free(g);
        }
        free(notify);
        pthread_mutex_lock(&m->mu);
        m->requests_out--;
        if (q->prev)
                q->prev->next = q->next;
        else
                m->out = q->next;
        if (q->next)
                q->next->prev = q->prev;
        pthread_cond_broadcast(&m->cv);
        pthread_mutex_unlock(&m->mu);
        req_free(q);
}

static int cmp_rec(const void *a, const void *b) {
        const zr_mrec *x = a, *y = b;
        if (x->chunk != y->chunk)
                return x->chunk < y->chunk ? -1 : 1;
        if (x->off != y->off)
                return x->off < y->off ? -1 : 1;
        return x->idx < y->idx ? -1 : x->idx > y->idx;
}

int zr_mirror_fetch(zr_mirror *m, const zr_mrec *r, size_t n, uint64_t prio, zr_mirror_cb *cb,
                    void *arg, zr_mirror_wait_t **ret_wait) {
        zr_mrec *want = NULL;
        mreq **reqs = NULL;
        size_t nw = 0, nreq = 0;
        group *g = calloc(1, sizeof(*g));
        int rc = 0;

        if (!g)
                return -ENOMEM;
        g->cb = cb;
        g->arg = arg;
        want = malloc((n ? n : 1) * sizeof(*want));
        reqs = malloc((n ? n : 1) * sizeof(*reqs));
        if (!want || !reqs) {
                rc = -ENOMEM;
                goto out;
        }
        pthread_mutex_lock(&m->mu);
        for (size_t i = 0; i < n; i++) {
                if (!mirror_rec_ok(m, &r[i]) || mirror_bit_get(m, r[i].idx))
                        continue;
                rnode *in = mirror_node_find(m->inflight, r[i].idx);
                if (in) {
                        /* somebody's request brings it: wait for that one too */
                        int added = add_waiter(in->req, g);
                        if (added > 0) {
                                m->st.shared++;
                                if (prio < in->req->q.prio)
                                        zr_fetcher_hurry(m->f, &in->req->q, prio);
                        }
                        continue;
                }
                want[nw++] = r[i];
        }
        if (nw > 1)
                qsort(want, nw, sizeof(*want), cmp_rec);
        /* coalesce neighbours of one chunk into ranges */
        for (size_t i = 0; i < nw;) {
                size_t j = i + 1;
                uint64_t lo = want[i].off, hi = lo + want[i].len;
                while (j < nw && want[j].chunk == want[i].chunk) {
                        if (want[j].idx == want[j - 1].idx) { /* a repeat */
                                j++;
                                continue;
                        }
                        uint64_t end = (uint64_t)want[j].off + want[j].len;
                        uint64_t gap = want[j].off > hi ? want[j].off - hi : 0;
                        uint64_t nhi = end > hi ? end : hi;
                        if (gap > ZR_MIRROR_GAP || gap * 8 > nhi - lo ||
                            nhi - lo > ZR_MIRROR_RANGE_MAX)
                                break;
                        hi = nhi;
                        j++;
                }
                mreq *q = calloc(1, sizeof(*q));
                if (q) {
                        q->buf = malloc(hi - lo ? hi - lo : 1);
                        q->rec = malloc((j - i) * sizeof(*q->rec));
                }
                if (!q || !q->buf || !q->rec) {
                        if (q)
                                req_free(q);
                        rc = -ENOMEM;
                        break;
                }
                q->m = m;
                q->chunk = want[i].chunk;
                q->off = lo;
                q->len = hi - lo;
                q->q.prio = prio;
                snprintf(q->name, sizeof(q->name), "%" PRIu32 ".chunk", q->chunk);
                for (size_t k = i; k < j; k++) {
                        if (k > i && want[k].idx == want[k - 1].idx)
                                continue;
                        rnode *nd = mirror_node_add(m->inflight, want[k].idx);
                        if (!nd)
                                continue; /* fetched all the same, only not shared */
                        nd->req = q;
                        q->rec[q->nrec++] = want[k];
                        mirror_pages_ref(m, &want[k], 1);
                        m->st.needed_bytes += want[k].len;
                }
                add_waiter(q, g);
                q->next = m->out;
                if (m->out)
                        m->out->prev = q;
                m->out = q;
                reqs[nreq++] = q;
                i = j;
        }
        m->requests_out += (unsigned)nreq;
        m->st.requests += nreq;
        int nothing = g->pending == 0;
        if (!nothing && ret_wait)
                *ret_wait = g;
        pthread_mutex_unlock(&m->mu);
        for (size_t i = 0; i < nreq; i++)
                req_submit(reqs[i]);
        if (nothing) {
                free(g);
                g = NULL;
                rc = rc < 0 ? rc : 1;
        } else {
                g = NULL; /* the requests own it now */
                if (rc < 0)
                        rc = 0; /* what was submitted calls back; the rest is fetched later */
        }
out:
        free(g);
        free(want);
        free(reqs);
        return rc;
}

static void wait_cb(void *arg, int rc, const zr_error *err) {
        group *g = arg; /* a copy owned by the waiter: see zr_mirror_wait() */
        zr_mirror *m = (zr_mirror *)g->arg;
        pthread_mutex_lock(&m->mu);
        g->rc = rc;
        if (err)
                g->err = *err;
        g->done = 1;
        pthread_cond_broadcast(&m->cv);
        pthread_mutex_unlock(&m->mu);
}

int zr_mirror_cancel(zr_mirror *m, zr_mirror_wait_t *g) {
        int gone = 0;
        pthread_mutex_lock(&m->mu);
        if (g->pending > 0) {
                /* off every request out that it waits for */
                for (mreq *q = m->out; q && g->pending > 0; q = q->next)
                        for (size_t i = 0; i < q->nwait; i++) {
                                if (q->waiters[i] != g)
                                        continue;
                                q->waiters[i] = q->waiters[--q->nwait];
                                g->pending--;
                                break;
                        }
                gone = 1;
        }
        pthread_mutex_unlock(&m->mu);
        if (gone)
                free(g);
        return gone;
}

int zr_mirror_wait(zr_mirror *m, const zr_mrec *r, size_t n, zr_error *err) {
        group w = { .arg = m };
        int rc = zr_mirror_fetch(m, r, n, 0, wait_cb, &w, NULL);
        if (rc == 1)
                return 0;
        if (rc < 0)
                return zr_error_set(err, -rc, "fetching records of %s", zr_rsrc_url(m->src));
        pthread_mutex_lock(&m->mu);
        while (!w.done)
                pthread_cond_wait(&m->cv, &m->mu);
        pthread_mutex_unlock(&m->mu);
        if (w.rc < 0)
                return zr_error_set(err, -w.rc, "%s", w.err.message);
        /* a record that failed to queue (no memory) is fetched now */
        return zr_mirror_missing(m, r, n, NULL) ? zr_mirror_wait(m, r, n, err) : 0;
}
