/* fetch.h: the daemon's fetcher: every request to object storage, on one thread
 * of its own driving a libcurl multi handle (docs/REMOTE.md, "The fetcher").
 *
 * A request (zr_fetch, the caller's memory) is a GET of a byte range of one
 * object of a source (source.h) into the caller's buffer, a GET of a whole
 * small object into a buffer of its own (dst NULL), or a HEAD. Requests wait in
 * a queue ordered by `prio` (the time their bytes are needed: smaller first),
 * and up to `depth` run at once over keep-alive connections. Each is signed
 * with the caller's credentials (creds set) or the source's most recent
 * (source.h; a 403 sets those aside and tries the next), carries If-Match with
 * the object's ETag from the open, and is retried while it may pass
 * (s3/request.h's transient failures: forever, with backoff and jitter, so that
 * a loader waits for a server that went away and resumes when it comes back;
 * `attempts` bounds it for a caller that must not wait, 0: no bound). done() is
 * called once, on the fetcher's thread, with 0 or the error; it may submit
 * again (a retry of its own) and must not block.
 *
 * Lock order: the fetcher's mutex is a leaf; done() runs without it.
 */
#ifndef ZR_REMOTE_FETCH_H
#define ZR_REMOTE_FETCH_H

#include <stdint.h>

#include "remote/source.h"
#include "request.h"
#include "util/error.h"

typedef struct zr_fetcher zr_fetcher;
typedef struct zr_fetch zr_fetch;
typedef void zr_fetch_done(zr_fetch *q, int rc, const zr_error *err);

struct zr_fetch {
        /* in: set by the caller before zr_fetcher_submit() */
        zr_rsrc *src;           /* borrowed (a reference is held while it runs) */
        const char *name;       /* the object: borrowed, lives as long as the request */
        int head;               /* a HEAD, not a GET */
        uint64_t off, len;      /* a ranged GET of [off, off + len) into dst ... */
        uint8_t *dst;           /* ... or dst NULL: the whole object, at most len bytes
                                 * (body, body_len below; free(body)) */
        uint64_t prio;          /* smaller runs first; 0: now */
        const s3_creds *creds;  /* sign with these (an open's check), or NULL: the source's */
        unsigned attempts;      /* tries of a transient failure; 0: until it passes */
        zr_fetch_done *done;
        void *arg;
        /* out, when done() is called */
        char etag[S3_ETAG_MAX]; /* the response's */
        uint64_t length;        /* a HEAD's Content-Length */
        int has_length;
        uint8_t *body;          /* dst NULL: the object, malloc()ed, owned by the caller */
        uint64_t body_len;
        /* the fetcher's */
        unsigned tries;
        uint64_t seq, due_ns, cred_id;
        size_t heap_pos;        /* 1 + index in the queue, 0: not queued */
        s3_request r;
        zr_fetch *next;         /* in the waiting-retry list */
};

typedef struct zr_fetcher_options {
        unsigned depth;         /* requests in flight (remote-depth) */
        unsigned connections;   /* connections per endpoint (remote-connections) */
        long timeout_s;         /* no byte for this long: retried (remote-timeout) */
} zr_fetcher_options;

/* What the fetcher did, since it started. */
typedef struct zr_fetcher_stats {
        uint64_t requests;      /* completed (success or final failure) */
        uint64_t bytes;         /* body bytes received of successful GETs */
        uint64_t retries;
        uint64_t failures;      /* final failures */
        uint64_t queued, inflight;
        int degraded;           /* the last 3 tries or more failed */
        uint64_t degraded_ns;   /* since (CLOCK_MONOTONIC), when degraded */
        char last_error[ZR_ERROR_MESSAGE_MAX];
} zr_fetcher_stats;

/* Starts the fetcher's thread. Returns 0 and *ret, or a negative code. */
int zr_fetcher_new(const zr_fetcher_options *o, zr_fetcher **ret, zr_error *err);

/* Stops the thread: queued requests get -ECANCELED, those in flight are
 * abandoned with -ECANCELED too. NULL allowed; returns NULL. */
zr_fetcher *zr_fetcher_free(zr_fetcher *f);

/* Queues q. Never fails: a request that cannot even start completes with
 * its error (done() on the fetcher's thread). */
void zr_fetcher_submit(zr_fetcher *f, zr_fetch *q);

/* Lowers a queued request's prio (a waiter that needs it sooner). No-op if it
 * runs already or prio is not lower. */
void zr_fetcher_hurry(zr_fetcher *f, zr_fetch *q, uint64_t prio);

/* Submits q[0..n) and waits for all of them (the caller's done() is replaced).
 * Returns 0, or the first failure's code with *err. For the open of a store,
 * on a worker. */
int zr_fetcher_run(zr_fetcher *f, zr_fetch *const *q, size_t n, zr_error *err);

void zr_fetcher_stats_get(zr_fetcher *f, zr_fetcher_stats *ret);

#endif
