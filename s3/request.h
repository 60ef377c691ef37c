/* request.h: one S3 request on a libcurl easy handle, signed, and its outcome.
 *
 * A request is set up from a spec (method, key, canonical query, range,
 * If-Match, a body to send, where to put the body received), performed by
 * whoever drives it (curl_easy_perform(), or a multi handle: s3/batch.h, the
 * daemon's fetcher), then judged by s3_request_result(): success, or an error
 * with the server's code and message, marked transient when trying again may
 * succeed (a connection that failed, a timeout, a truncated body, 5xx, 429,
 * SlowDown) or final (403, 404, 412, 400).
 *
 * Signing is libcurl's (CURLOPT_AWS_SIGV4, curl 7.75 or later) with these
 * rules, found against curl 7.88 and SeaweedFS (docs/REMOTE.md):
 *   - the query is sent as given and must be canonical: parameters sorted by
 *     name, values percent-encoded (s3_encode()), a parameter without a value
 *     written "name=";
 *   - x-amz-content-sha256: UNSIGNED-PAYLOAD is added (AWS requires the header;
 *     curl signs it when it is there), and x-amz-security-token for session
 *     credentials;
 *   - no credentials: the request is not signed (a public bucket).
 * Redirects are not followed, only http and https are spoken, and a body
 * received is bounded (the range's length, or max_body).
 *
 * Threads: a request belongs to one thread at a time. libcurl must have been
 * initialised (s3_global_init()) before any request is made.
 */
#ifndef ZR_S3_REQUEST_H
#define ZR_S3_REQUEST_H

#include <stdint.h>

#include <curl/curl.h>

#include "s3.h"

#define S3_ETAG_MAX 128
#define S3_WHAT_MAX (S3_PREFIX_MAX + 160)
#define S3_URL_MAX (3 * S3_PREFIX_MAX + 1024)
/* Bytes of a reply kept when no destination was given (an error, a listing). */
#define S3_REPLY_MAX (1u << 20)

/* Initialises libcurl once for the process (thread-safe, idempotent).
 * Returns 0 or -EIO. */
int s3_global_init(void);

typedef struct s3_spec {
        const char *method;     /* "GET", "HEAD", "PUT", "POST", "DELETE" */
        const char *name;       /* object name under the target's prefix, or: */
        const char *key;        /* a whole key (name NULL); both NULL: the bucket */
        const char *query;      /* canonical, without '?'; NULL: none */
        uint64_t range_off;     /* GET: bytes [range_off, range_off + range_len) */
        uint64_t range_len;     /*   0: the whole object */
        const char *if_match;   /* an ETag (with its quotes), or NULL */
        const void *body;       /* PUT, POST: bytes sent (borrowed), or NULL */
        uint64_t body_len;
        void *dst;              /* GET: the body lands here, exactly dst_len bytes */
        uint64_t dst_len;       /*   (a ranged GET's range_len) */
        uint64_t max_body;      /* no dst: keep at most this much (0: S3_REPLY_MAX) */
        long timeout_s;         /* no byte for this long: a timeout (0: 30 s) */
        const char *meta_name;  /* PUT: one x-amz-meta-NAME: VALUE header, or NULL */
        const char *meta_value;
} s3_spec;

typedef struct s3_request {
        CURL *easy;
        struct curl_slist *headers;
        char what[S3_WHAT_MAX];    /* "s3://bucket/key", for messages */
        char url[S3_URL_MAX];
        char range[48];
        /* what is sent */
        const uint8_t *up;
        uint64_t up_len, up_off;
        /* what is received */
        uint8_t *buf;              /* dst, or an allocation of ours (own_buf) */
        uint64_t len, cap, max;
        int own_buf, exact, overflow;
        long status;
        char etag[S3_ETAG_MAX];
        char meta[128];            /* the x-amz-meta-NAME value of a HEAD */
        char meta_name[64];
        uint64_t length;           /* Content-Length, if has_length */
        int has_length;
        int transient;             /* set by s3_request_result() */
        char curl_err[CURL_ERROR_SIZE];
        void *user;                /* the driver's */
} s3_request;

/* Sets r up for spec on target t with credentials c (NULL or an empty access
 * key: unsigned). The strings of spec are copied where libcurl needs them
 * later, except body and dst (borrowed until the request ends). Returns 0, or
 * a negative code with *err (ENOMEM, EINVAL for a bad token, ENAMETOOLONG). */
int s3_request_init(s3_request *r, const s3_target *t, const s3_creds *c, const s3_spec *spec,
                    s3_error *err);

/* Forgets the response, to perform r again (a retry). */
void s3_request_rewind(s3_request *r);

/* Frees what r holds (the handle, headers, its own buffer). NULL allowed. */
void s3_request_fini(s3_request *r);

/* Judges a performed request by libcurl's code `cc`: 0 for a 2xx whose body
 * is whole (a ranged GET: exactly its length), else a negative code with *err
 * ("s3://b/k: 403 AccessDenied: Access Denied.") and r->transient set when it
 * may pass: ZR_E_STALE for 412 (If-Match failed), EACCES 401/403, ENOENT 404,
 * EINVAL 400, EIO for 5xx, 429, a truncated or oversized body, ETIMEDOUT,
 * ECONNREFUSED, ECONNRESET and EHOSTUNREACH for what curl saw. 304 is -EAGAIN
 * (not modified), final. */
int s3_request_result(s3_request *r, CURLcode cc, s3_error *err);

/* curl_easy_perform() and s3_request_result(). */
int s3_request_perform(s3_request *r, s3_error *err);

/* The body received (r->buf, r->len) when no dst was given: taken by the
 * caller (free()), r keeps nothing. NUL-terminated beyond len. */
uint8_t *s3_request_take_body(s3_request *r, uint64_t *ret_len);

/* Wait before attempt `attempt` (1 = the first retry): a cap doubling from
 * S3_BACKOFF_MIN_NS to S3_BACKOFF_MAX_NS, of which half is waited and half is
 * drawn from `rnd` (jitter: clients that failed together retry apart). */
#define S3_BACKOFF_MIN_NS (50ull * 1000 * 1000)
#define S3_BACKOFF_MAX_NS (5ull * 1000 * 1000 * 1000)
uint64_t s3_backoff_ns(unsigned attempt, uint64_t rnd);

#endif
