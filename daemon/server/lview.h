/* lview.h: what the daemon shows of a loader beside its numbers, and to whom.
 *
 * A view of a loader is its telemetry (loader/telemetry.h) with who runs it:
 * its client's pid and uid (SO_PEERCRED), the client's command line (read
 * from /proc/PID/cmdline once, where the daemon may read it; else the name
 * its HELLO gave) and its datasets (each store's directory as the daemon's
 * /proc/self/fd names it, joined by ","). Strings are made valid UTF-8
 * without control characters (a path is any bytes), as msgpack str, JSON and
 * Prometheus labels need.
 *
 * Who sees a loader is STATUS's rule (PROTOCOL.md, STATUS; docs/SECURITY.md):
 * a uid sees the loaders of its own connections; root and the daemon's own
 * uid see every loader; nobody else sees another uid's.
 *
 * Loop thread only.
 */
#ifndef ZR_SERVER_LVIEW_H
#define ZR_SERVER_LVIEW_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "loader/loader.h"
#include "server/request.h"
#include "wire.h"

/* A loader's telemetry state on the daemon's side (owned by its handle). */
struct zr_ltrack {
        bool named;            /* command and dataset read */
        char command[128];
        char dataset[256];
        uint64_t bound_since_ns; /* data-bound since (watch.h), 0: not now */
        bool warned;           /* the journal was told of this episode */
};

/* Frees a track (NULL allowed); returns NULL. */
zr_ltrack *zr_ltrack_free(zr_ltrack *t);

typedef struct zr_lview {
        zr_lhandle *lh;
        zr_ltrack *track;      /* never NULL: made on first view */
        uint32_t id;           /* the loader's handle on its connection */
        pid_t pid;
        uid_t uid;
        zr_loader_counters k;
        zr_loader_telemetry tel;
} zr_lview;

/* Fills *v for the loader of handle lh at now_ns (CLOCK_MONOTONIC). Returns
 * 0, or -ENOMEM (no track could be made). */
int zr_lview_get(zr_lhandle *lh, uint64_t now_ns, zr_lview *v);

/* Calls fn for every loader of every live session that `viewer` may see (all:
 * every one), with its view; stops early when fn returns non-zero. */
void zr_lview_foreach(zr_server *s, uid_t viewer, bool all, uint64_t now_ns,
                      int (*fn)(const zr_lview *v, void *arg), void *arg);

/* Puts STATUS's per-loader telemetry fields of lh into the open map
 * (PROTOCOL.md, STATUS: uid, command, dataset, telemetry). */
void zr_lview_put_status(zr_lhandle *lh, zr_wire_writer *w);

/* Makes s valid UTF-8 without control characters, in place: each byte that
 * is not part of a valid sequence, and each control character, becomes '?'. */
void zr_lview_sanitize(char *s);

#endif
