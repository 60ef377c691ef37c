/* source.h: a store in object storage as the daemon reaches it: where it is
 * (s3_target), the objects its manifest lists with the ETag each had when the
 * store was opened, and the credentials of the clients that hold it open.
 *
 * Credentials (docs/REMOTE.md, "The credentials rule"): each client whose
 * open was accepted adds its own (zr_rsrc_creds_add(), an id back); the
 * fetcher signs with the most recent that has not been refused
 * (zr_rsrc_creds_pick()); one refused by the server (403) is set aside
 * (zr_rsrc_creds_refused()); a client's are wiped when its handle closes
 * (zr_rsrc_creds_drop()). Nothing here is ever logged or written to disk.
 *
 * Thread-safe (one mutex, a leaf); reference-counted: the fetcher's requests
 * hold a reference while they run.
 */
#ifndef ZR_REMOTE_SOURCE_H
#define ZR_REMOTE_SOURCE_H

#include <stdint.h>

#include "s3.h"
#include "request.h"
#include "util/error.h"

typedef struct zr_rsrc zr_rsrc;

typedef struct zr_robject {
        char name[32];
        uint64_t size;
        char etag[S3_ETAG_MAX]; /* as the open's HEAD saw it; "" if the server sent none */
} zr_robject;

/* A new source of target t with objects obj[0..n) (copied). NULL on ENOMEM. */
zr_rsrc *zr_rsrc_new(const s3_target *t, const zr_robject *obj, size_t n);
zr_rsrc *zr_rsrc_ref(zr_rsrc *s);
/* Drops a reference; the last wipes every credential and frees. NULL allowed. */
zr_rsrc *zr_rsrc_unref(zr_rsrc *s);

const s3_target *zr_rsrc_target(const zr_rsrc *s);
/* The object named `name`, or NULL. The pointer lives as long as s. */
const zr_robject *zr_rsrc_object(const zr_rsrc *s, const char *name);
/* "s3://bucket/prefix" for messages. */
const char *zr_rsrc_url(const zr_rsrc *s);

/* Adds a client's credentials (copied); returns an id > 0, or 0 on ENOMEM.
 * Credentials equal to some already there share their entry (one more use). */
uint64_t zr_rsrc_creds_add(zr_rsrc *s, const s3_creds *c);
/* Drops one use of id; the last wipes them. */
void zr_rsrc_creds_drop(zr_rsrc *s, uint64_t id);
/* Copies the most recent credentials not refused into *ret; returns their id,
 * or 0 when there are none (every client closed, or all refused). An entry
 * with an empty access key (a public bucket) is valid. */
uint64_t zr_rsrc_creds_pick(zr_rsrc *s, s3_creds *ret);
/* The server refused id (403): it is not picked again. */
void zr_rsrc_creds_refused(zr_rsrc *s, uint64_t id);

#endif
