/* fetch.c: the fetcher's thread and queue (fetch.h).
 *
 * The queue is a binary min-heap on (prio, seq); retries wait in a list until
 * their time comes (a few at most: each is one request of the depth). The
 * thread takes requests from the heap while fewer than `depth` run, sets each
 * up (s3/request.h: signed, If-Match), and drives them all with one libcurl
 * multi handle; it sleeps in curl_multi_poll() and submitters wake it with
 * curl_multi_wakeup(). A completion is judged by s3_request_result() and by
 * the ETag the object had at open; a transient failure waits
 * s3_backoff_ns(tries) and goes back to the queue, anything else goes to
 * done() outside the mutex.
 */
#include "remote/fetch.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include <curl/curl.h>

/* Failures in a row (all requests) after which the remote counts as degraded. */
#define DEGRADED_AFTER 3
/* The longest the thread sleeps in curl_multi_poll() without a reason. */
#define POLL_MS_MAX 1000

struct zr_fetcher {
        pthread_mutex_t mu;
        pthread_cond_t cv;      /* zr_fetcher_run()'s waiters */
        pthread_t thread;
        CURLM *multi;
        zr_fetcher_options o;
        zr_fetch **heap;
        size_t nheap, cap;
        zr_fetch *waiting;      /* retries, until due_ns */
        zr_fetch *running;      /* in flight (linked by next) */
        uint64_t seq;
        unsigned inflight;
        int stop;
        unsigned fails_in_row;
        zr_fetcher_stats st;
};

static uint64_t now_ns(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static uint64_t rnd(void) {
        uint64_t v;
        if (getrandom(&v, sizeof(v), GRND_NONBLOCK) != (ssize_t)sizeof(v))
                v = now_ns() * 0x9e3779b97f4a7c15ull;
        return v;
}

/* ---- the heap (mutex held) ------------------------------------------------------ */

static int before(const zr_fetch *a, const zr_fetch *b) {
        return a->prio != b->prio ? a->prio < b->prio : a->seq < b->seq;
}

static void heap_set(zr_fetcher *f, size_t i, zr_fetch *q) {
        f->heap[i] = q;
        q->heap_pos = i + 1;
}

static void heap_up(zr_fetcher *f, size_t i) {
        zr_fetch *q = f->heap[i];
        while (i > 0 && before(q, f->heap[(i - 1) / 2])) {
                heap_set(f, i, f->heap[(i - 1) / 2]);
                i = (i - 1) / 2;
        }
        heap_set(f, i, q);
}

static void heap_down(zr_fetcher *f, size_t i) {
        zr_fetch *q = f->heap[i];
        for (;;) {
                size_t l = 2 * i + 1, r = l + 1, m = i;
                const zr_fetch *best = q;
                if (l < f->nheap && before(f->heap[l], best))
                        m = l, best = f->heap[l];
                if (r < f->nheap && before(f->heap[r], best))
                        m = r;
                if (m == i)
                        break;
                heap_set(f, i, f->heap[m]);
                i = m;
        }
        heap_set(f, i, q);
}

static int heap_push(zr_fetcher *f, zr_fetch *q) {
        if (f->nheap == f->cap) {
                size_t cap = f->cap ? 2 * f->cap : 256;
                zr_fetch **h = realloc(f->heap, cap * sizeof(*h));
                if (!h)
                        return -ENOMEM;
                f->heap = h;
                f->cap = cap;
        }
        heap_set(f, f->nheap++, q);
        heap_up(f, f->nheap - 1);
        return 0;
}

static zr_fetch *heap_pop(zr_fetcher *f) {
        zr_fetch *q = f->heap[0];
        q->heap_pos = 0;
        if (--f->nheap > 0) {
                heap_set(f, 0, f->heap[f->nheap]);
                heap_down(f, 0);
        }
        return q;
}

/* ---- requests ------------------------------------------------------------------- */

static void finish(zr_fetch *q, int rc, const zr_error *err) {
        zr_rsrc *src = q->src;
        s3_request_fini(&q->r);
        q->done(q, rc, err);
        zr_rsrc_unref(src);
}

/* Sets q's libcurl request up. Returns 0, or the error that ends q. */
static int setup(zr_fetcher *f, zr_fetch *q, zr_error *err) {
        const zr_robject *o = zr_rsrc_object(q->src, q->name);
        s3_creds c;
        s3_error e = {0};
        s3_spec sp = { .method = q->head ? "HEAD" : "GET", .name = q->name,
                       .timeout_s = f->o.timeout_s };

        if (q->creds) {
                c = *q->creds;
                q->cred_id = 0;
        } else if (!(q->cred_id = zr_rsrc_creds_pick(q->src, &c))) {
                return zr_error_set(err, EACCES, "%s/%s: no credentials left that the server "
                                    "accepts (every client that opened it closed, or was "
                                    "refused)", zr_rsrc_url(q->src), q->name);
        }
        if (o && o->etag[0])
                sp.if_match = o->etag;
        if (!q->head) {
                if (q->dst) {
                        sp.range_off = q->off;
                        sp.range_len = q->len;
                        sp.dst = q->dst;
                        sp.dst_len = q->len;
                } else {
                        sp.max_body = q->len;
                }
        }
        int r = s3_request_init(&q->r, zr_rsrc_target(q->src), &c, &sp, &e);
        s3_wipe(&c, sizeof(c));
        if (r < 0)
                return zr_error_set(err, e.code, "%s", e.message);
        q->r.user = q;
        return 0;
}

/* Judges a finished transfer: 0, a transient failure to retry (1), or a final
 * error (negative, *err set). */
static int judge(zr_fetcher *f, zr_fetch *q, CURLcode cc, zr_error *err) {
        s3_error e = {0};
        int r = s3_request_result(&q->r, cc, &e);
        const zr_robject *o = zr_rsrc_object(q->src, q->name);

        snprintf(q->etag, sizeof(q->etag), "%s", q->r.etag);
        if (r == 0 && o && o->etag[0] && q->r.etag[0] && strcmp(o->etag, q->r.etag) != 0)
                return zr_error_set(err, ZR_E_STALE, "%s/%s changed since it was opened (ETag "
                                    "%.40s, was %.40s)", zr_rsrc_url(q->src), q->name,
                                    q->r.etag, o->etag);
        if (r == 0) {
                q->length = q->r.length;
                q->has_length = q->r.has_length;
                if (!q->dst && !q->head)
                        q->body = s3_request_take_body(&q->r, &q->body_len);
                return 0;
        }
        if (e.code == EACCES && q->cred_id) {
                /* these credentials no longer open it: another client's may */
                zr_rsrc_creds_refused(q->src, q->cred_id);
                s3_creds c;
                if (zr_rsrc_creds_pick(q->src, &c)) {
                        s3_wipe(&c, sizeof(c));
                        return 1;
                }
        }
        pthread_mutex_lock(&f->mu);
        snprintf(f->st.last_error, sizeof(f->st.last_error), "%s", e.message);
        pthread_mutex_unlock(&f->mu);
        if (q->r.transient && (q->attempts == 0 || q->tries < q->attempts))
                return 1;
        return zr_error_set(err, e.code, "%s", e.message);
}

/* The outcome of one try, for the degraded state. Mutex held. */
static void note_try(zr_fetcher *f, int ok) {
        if (ok) {
                f->fails_in_row = 0;
                f->st.degraded = 0;
                return;
        }
        if (++f->fails_in_row >= DEGRADED_AFTER && !f->st.degraded) {
                f->st.degraded = 1;
                f->st.degraded_ns = now_ns();
        }
}

static void *run(void *arg) {
        zr_fetcher *f = arg;

        pthread_mutex_lock(&f->mu);
        while (!f->stop) {
                uint64_t now = now_ns(), wake = UINT64_MAX;
                /* retries that are due go back to the queue */
                for (zr_fetch **p = &f->waiting; *p;) {
                        zr_fetch *q = *p;
                        if (q->due_ns <= now) {
                                *p = q->next;
                                q->next = NULL;
                                if (heap_push(f, q) < 0) {
                                        q->next = *p; /* no memory: later */
                                        *p = q;
                                        wake = now + 1000000;
                                        break;
                                }
                                continue;
                        }
                        if (q->due_ns < wake)
                                wake = q->due_ns;
                        p = &q->next;
                }
                /* start what the depth allows, earliest need first */
                while (f->nheap > 0 && f->inflight < f->o.depth) {
                        zr_fetch *q = heap_pop(f);
                        zr_error err = {0};
                        pthread_mutex_unlock(&f->mu);
                        int r = setup(f, q, &err);
                        pthread_mutex_lock(&f->mu);
                        if (r < 0) {
                                f->st.requests++;
                                f->st.failures++;
                                pthread_mutex_unlock(&f->mu);
                                finish(q, r, &err);
                                pthread_mutex_lock(&f->mu);
                                continue;
                        }
                        q->tries++;
                        f->inflight++;
                        q->next = f->running;
                        f->running = q;
                        curl_multi_add_handle(f->multi, q->r.easy);
                }
                f->st.queued = f->nheap;
                f->st.inflight = f->inflight;
                pthread_mutex_unlock(&f->mu);

                int running = 0;
                curl_multi_perform(f->multi, &running);
                CURLMsg *msg;
                int left;
                while ((msg = curl_multi_info_read(f->multi, &left))) {
                        if (msg->msg != CURLMSG_DONE)
                                continue;
                        s3_request *sr = NULL;
                        CURLcode cc = msg->data.result;
                        CURL *e = msg->easy_handle;
                        /* the easy handle's private pointer is its s3_request */
                        curl_easy_getinfo(e, CURLINFO_PRIVATE, (char **)&sr);
                        zr_fetch *q = sr->user;
                        curl_multi_remove_handle(f->multi, e);
                        zr_error err = {0};
                        int r = judge(f, q, cc, &err);
                        pthread_mutex_lock(&f->mu);
                        f->inflight--;
                        for (zr_fetch **p = &f->running; *p; p = &(*p)->next)
                                if (*p == q) {
                                        *p = q->next;
                                        break;
                                }
                        q->next = NULL;
                        note_try(f, r == 0 || (r < 0 && !q->r.transient && err.code != ZR_E_STALE
                                               && q->r.status != 0));
                        if (r == 1) {
                                f->st.retries++;
                                s3_request_fini(&q->r);
                                q->due_ns = now_ns() + s3_backoff_ns(q->tries, rnd());
                                q->next = f->waiting;
                                f->waiting = q;
                                pthread_mutex_unlock(&f->mu);
                                continue;
                        }
                        f->st.requests++;
                        if (r < 0)
                                f->st.failures++;
                        else if (!q->head)
                                f->st.bytes += q->dst ? q->len : q->body_len;
                        pthread_mutex_unlock(&f->mu);
                        finish(q, r, &err);
                }
                int ms = POLL_MS_MAX;
                if (wake != UINT64_MAX) {
                        uint64_t t = now_ns();
                        ms = wake <= t ? 0 : (int)((wake - t) / 1000000 + 1);
                        if (ms > POLL_MS_MAX)
                                ms = POLL_MS_MAX;
                }
                curl_multi_poll(f->multi, NULL, 0, ms, NULL);
                pthread_mutex_lock(&f->mu);
        }
        pthread_mutex_unlock(&f->mu);
        return NULL;
}

int zr_fetcher_new(const zr_fetcher_options *o, zr_fetcher **ret, zr_error *err) {
        zr_fetcher *f;

        if (s3_global_init() < 0)
                return zr_error_set(err, EIO, "libcurl did not initialise");
        f = calloc(1, sizeof(*f));
        if (!f)
                return zr_error_set(err, ENOMEM, "no memory for the fetcher");
        f->o = *o;
        if (!f->o.depth)
                f->o.depth = 64;
        if (!f->o.connections)
                f->o.connections = 32;
        f->multi = curl_multi_init();
        if (!f->multi) {
                free(f);
                return zr_error_set(err, ENOMEM, "no curl multi handle");
        }
        curl_multi_setopt(f->multi, CURLMOPT_MAX_HOST_CONNECTIONS, (long)f->o.connections);
        curl_multi_setopt(f->multi, CURLMOPT_MAX_TOTAL_CONNECTIONS, (long)f->o.connections);
        curl_multi_setopt(f->multi, CURLMOPT_MAXCONNECTS, (long)f->o.connections);
        pthread_mutex_init(&f->mu, NULL);
        pthread_cond_init(&f->cv, NULL);
        int r = pthread_create(&f->thread, NULL, run, f);
        if (r != 0) {
                curl_multi_cleanup(f->multi);
                pthread_mutex_destroy(&f->mu);
                pthread_cond_destroy(&f->cv);
                free(f);
                return zr_error_set(err, r, "starting the fetcher's thread");
        }
        *ret = f;
        return 0;
}

zr_fetcher *zr_fetcher_free(zr_fetcher *f) {
        zr_error err = {0};

        if (!f)
                return NULL;
        pthread_mutex_lock(&f->mu);
        f->stop = 1;
        pthread_mutex_unlock(&f->mu);
        curl_multi_wakeup(f->multi);
        pthread_join(f->thread, NULL);
        zr_error_set(&err, ECANCELED, "the daemon is stopping");
        while (f->running) { /* in flight: abandoned */
                zr_fetch *q = f->running;
                f->running = q->next;
                curl_multi_remove_handle(f->multi, q->r.easy);
                finish(q, -ECANCELED, &err);
        }
        while (f->nheap > 0)
                finish(heap_pop(f), -ECANCELED, &err);
        while (f->waiting) {
                zr_fetch *q = f->waiting;
                f->waiting = q->next;
                finish(q, -ECANCELED, &err);
        }
        curl_multi_cleanup(f->multi);
        free(f->heap);
        pthread_mutex_destroy(&f->mu);
        pthread_cond_destroy(&f->cv);
        free(f);
        return NULL;
}

void zr_fetcher_submit(zr_fetcher *f, zr_fetch *q) {
        zr_rsrc_ref(q->src);
        q->body = NULL;
        q->body_len = 0;
        q->etag[0] = 0;
        q->has_length = 0;
        q->tries = 0;
        q->next = NULL;
        memset(&q->r, 0, sizeof(q->r));
        pthread_mutex_lock(&f->mu);
        q->seq = ++f->seq;
        int r = f->stop ? -ECANCELED : heap_push(f, q);
        pthread_mutex_unlock(&f->mu);
        if (r < 0) {
                zr_error err = {0};
                zr_error_set(&err, -r, "queueing a request of %s/%s", zr_rsrc_url(q->src),
                             q->name);
                finish(q, r, &err);
                return;
        }
        curl_multi_wakeup(f->multi);
}

void zr_fetcher_hurry(zr_fetcher *f, zr_fetch *q, uint64_t prio) {
        pthread_mutex_lock(&f->mu);
        if (q->heap_pos && prio < q->prio) {
                q->prio = prio;
                heap_up(f, q->heap_pos - 1);
        } else if (!q->heap_pos && prio < q->prio) {
                q->prio = prio; /* a retry waiting: its next turn */
        }
        pthread_mutex_unlock(&f->mu);
}

typedef struct run_group {
        zr_fetcher *f;
        size_t left;
        int rc;
        zr_error err;
} run_group;

static void run_done(zr_fetch *q, int rc, const zr_error *err) {
        run_group *g = q->arg;
        pthread_mutex_lock(&g->f->mu);
        if (rc < 0 && g->rc == 0) {
                g->rc = rc;
                g->err = *err;
        }
        if (--g->left == 0)
                pthread_cond_broadcast(&g->f->cv);
        pthread_mutex_unlock(&g->f->mu);
}

int zr_fetcher_run(zr_fetcher *f, zr_fetch *const *q, size_t n, zr_error *err) {
        run_group g = { .f = f, .left = n };

        if (n == 0)
                return 0;
        for (size_t i = 0; i < n; i++) {
                q[i]->done = run_done;
                q[i]->arg = &g;
                zr_fetcher_submit(f, q[i]);
        }
        pthread_mutex_lock(&f->mu);
        while (g.left > 0)
                pthread_cond_wait(&f->cv, &f->mu);
        pthread_mutex_unlock(&f->mu);
        if (g.rc < 0)
                return zr_error_set(err, -g.rc, "%s", g.err.message);
        return 0;
}

void zr_fetcher_stats_get(zr_fetcher *f, zr_fetcher_stats *ret) {
        pthread_mutex_lock(&f->mu);
        *ret = f->st;
        ret->queued = f->nheap;
        ret->inflight = f->inflight;
        pthread_mutex_unlock(&f->mu);
}
