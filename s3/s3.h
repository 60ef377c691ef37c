/* s3.h: what every part of s3/ shares: where a store lives in a bucket, the
 * credentials that sign its requests, and an error with a message.
 *
 * s3/ speaks to S3 and S3-compatible servers through libcurl, and knows how a
 * store is laid out in a bucket (docs/REMOTE.md). It depends on nothing of ours
 * but proto/'s error codes; the daemon (daemon/remote) and the zrecord tool
 * (push, pull, the resolution of credentials) use it.
 */
#ifndef ZR_S3_S3_H
#define ZR_S3_S3_H

#include <stdarg.h>
#include <stddef.h>

#include "zr-errors.h"

#define S3_ENDPOINT_MAX 512  /* scheme://host[:port] */
#define S3_REGION_MAX 64
#define S3_BUCKET_MAX 64     /* a bucket name is 3..63 characters */
#define S3_PREFIX_MAX 1024   /* an S3 key is at most 1024 bytes */
#define S3_KEY_MAX 256       /* an access key id, a secret key */
#define S3_TOKEN_MAX 4096    /* a session token */
#define S3_MESSAGE_MAX 256

/* A store's place: an endpoint, a region, a bucket and the key prefix of the
 * store's objects (no leading or trailing '/'; "" for the bucket's root). */
typedef struct s3_target {
        char endpoint[S3_ENDPOINT_MAX]; /* "http://127.0.0.1:8333", no trailing '/' */
        char region[S3_REGION_MAX];
        int virtual_host;               /* bucket.host/key instead of host/bucket/key */
        char bucket[S3_BUCKET_MAX];
        char prefix[S3_PREFIX_MAX];
} s3_target;

/* Credentials; an empty access_key means none (unsigned requests). */
typedef struct s3_creds {
        char access_key[S3_KEY_MAX];
        char secret_key[S3_KEY_MAX];
        char session_token[S3_TOKEN_MAX];
} s3_creds;

/* An error: a code (an errno value or a ZR_E_* of zr-errors.h, positive) and
 * one line for a person. The first error set wins. */
typedef struct s3_error {
        int code;
        char message[S3_MESSAGE_MAX];
} s3_error;

/* Sets *err (NULL allowed; kept if it holds an error) and returns -code. */
int s3_error_set(s3_error *err, int code, const char *fmt, ...)
        __attribute__((format(printf, 3, 4)));

/* Wipes a secret from memory (not optimized away). */
void s3_wipe(void *p, size_t n);

#endif
