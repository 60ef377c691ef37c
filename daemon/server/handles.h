/* handles.h: a session's handle table and its shared-memory budget.
 *
 * A handle is the number a client uses for something the daemon holds on its
 * behalf: a dataset (a registry reference), a multi-stream set, a read buffer
 * or a loader. Numbers start at 1 and are never reused on one connection. The
 * table owns what its handles hold: closing a handle drops its references, and
 * the bytes of shared memory it held go back to the budget. The budget counts
 * buffers and rings against the session's limit and its uid's account
 * (users.h: a maximum per uid and a share of the daemon's budget); the table
 * keeps the daemon's totals (handles, shared memory, loaders: STATUS) in step
 * with its own.
 *
 * Loop thread only. It does not know about requests or limits beyond the ones
 * it is given.
 */
#ifndef ZR_SERVER_HANDLES_H
#define ZR_SERVER_HANDLES_H

#include <stdbool.h>
#include <stdint.h>

#include "server/registry.h"
#include "server/server.h"
#include "server/users.h"
#include "util/error.h"
#include "util/shm.h"

enum zr_handle_type {
        ZR_HANDLE_DATASET = 1,
        ZR_HANDLE_SET,
        ZR_HANDLE_BUFFER,
        ZR_HANDLE_LOADER,
};

typedef struct zr_lhandle zr_lhandle; /* req-loader.c */

/* A read buffer: daemon-made shared memory. Referenced by its handle and by a
 * READ in flight, so a client gone mid-READ cannot unmap it under the worker. */
typedef struct zr_buffer {
        unsigned refs;  /* loop thread */
        zr_shm shm;
} zr_buffer;

typedef struct zr_set {
        uint32_t n;
        char **names;
        zr_entry **entries; /* one reference each */
        uint32_t *handles;  /* each stream's own dataset handle */
} zr_set;

typedef struct zr_handle {
        uint32_t id;
        enum zr_handle_type type;
        bool writable;
        uint64_t remote_creds;      /* DATASET of a remote store: the id of the
                                     * credentials this client brought (rdataset.h) */
        union {
                zr_entry *entry;    /* DATASET: one reference */
                zr_set *set;        /* SET */
                zr_buffer *buffer;  /* BUFFER: one reference */
                zr_lhandle *loader; /* LOADER: owned */
        };
} zr_handle;

typedef struct zr_handles {
        zr_handle *v;               /* sorted by id */
        uint32_t n, cap, next_id;
        uint32_t nloaders;
        uint64_t shm_bytes;         /* buffers and rings */
        zr_server_counters *totals; /* the daemon's */
        zr_user *user;              /* the uid charged for its shared memory */
} zr_handles;

/* An empty table whose changes are counted in *totals too, and whose shared
 * memory is charged to `user` (borrowed: it must outlive the table). */
void zr_handles_init(zr_handles *t, zr_server_counters *totals, zr_user *user);

/* Closes every handle and frees the table. */
void zr_handles_fini(zr_handles *t);

/* The handle `id`, or NULL. */
zr_handle *zr_handles_find(zr_handles *t, uint32_t id);

/* A bit of a set of handle types. */
#define ZR_HANDLE_BIT(type) (1u << (type))

/* The handle `id` if its type is one of `types` (ZR_HANDLE_BIT()s): else NULL
 * with ZR_E_NO_HANDLE in *err, saying that request field `field` names
 * nothing, or a handle of another type. */
zr_handle *zr_handles_get(zr_handles *t, const char *field, uint32_t id, unsigned types,
                          zr_error *err);

/* Adds a copy of *h with the next number, taking what it holds. Returns the
 * number, or -ZR_E_LIMIT (`max` handles open, or the numbers are used up) or
 * -ENOMEM with *err set (then *h is still the caller's). */
int zr_handles_add(zr_handles *t, const zr_handle *h, uint32_t max, zr_error *err);

/* Closes handle `id` (nothing if none). */
void zr_handles_close(zr_handles *t, uint32_t id);

/* Counts `bytes` of shared memory against the table's budget `max` and its
 * uid's account: 0, or -ZR_E_LIMIT with *err naming the limit (nothing is
 * counted then). A buffer's or ring's handle gives its bytes back when it
 * closes; zr_handles_shm_release() gives back a reservation that never became
 * a handle. */
int zr_handles_shm_reserve(zr_handles *t, uint64_t bytes, uint64_t max, zr_error *err);
void zr_handles_shm_release(zr_handles *t, uint64_t bytes);
/* What the table may still reserve: under `max` and its uid's room. */
uint64_t zr_handles_shm_left(const zr_handles *t, uint64_t max);

/* Buffers are referenced by their handle and by the READs in flight. */
zr_buffer *zr_buffer_ref(zr_buffer *b);
zr_buffer *zr_buffer_unref(zr_buffer *b);

/* Frees a set and drops its references (not its streams' handles). NULL
 * allowed; returns NULL. */
zr_set *zr_set_free(zr_set *set);

#endif
