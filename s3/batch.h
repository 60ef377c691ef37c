/* batch.h: many S3 requests at once from one thread, each retried while it may
 * pass, for a caller that waits for them (the zrecord tool's push and pull, the
 * daemon's open of a remote store). The daemon's fetcher, which never waits,
 * is daemon/remote/fetch.h.
 *
 * s3_pump() asks next() for requests while fewer than `parallel` are in flight,
 * performs them through one libcurl multi handle, and hands each outcome to
 * done(): 0, or the final error after `attempts` tries of a transient one
 * (s3_backoff_ns() between them). next() returns NULL when it has nothing
 * more for now (it is asked again after each done()); the pump ends when it
 * has nothing and nothing is in flight, or as soon as done() returns a
 * negative code (the requests in flight are then abandoned: their done() is
 * not called). Requests belong to the caller; the pump only borrows them.
 */
#ifndef ZR_S3_BATCH_H
#define ZR_S3_BATCH_H

#include <stddef.h>

#include "request.h"

typedef struct s3_pump_ops {
        s3_request *(*next)(void *arg);
        int (*done)(void *arg, s3_request *r, int rc, const s3_error *err);
} s3_pump_ops;

/* Returns 0 when everything was done, done()'s negative code, or a negative
 * code of the pump's own with *err (ENOMEM, EIO from libcurl). */
int s3_pump(const s3_pump_ops *ops, void *arg, unsigned parallel, unsigned attempts,
            s3_error *err);

/* The requests r[0..n) as one pump: rc[i] and errs[i] (may be NULL) receive
 * each outcome. Returns 0 when all succeeded, else the first failure's code. */
int s3_run(s3_request *const *r, size_t n, unsigned parallel, unsigned attempts, int *rc,
           s3_error *errs);

#endif
