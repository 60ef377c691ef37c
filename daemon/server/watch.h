/* watch.h: once a second, every loader's verdict.
 *
 * The watch looks at every open loader (lview.h) each second. A loader that
 * has been data-bound for `stall-warning` seconds without a break gets one
 * warning in the journal for that episode (at most five such lines a minute
 * for the whole daemon: a box of stalled jobs must not flood it), naming its
 * client, how much its consumer waits and the stage that dominates; it is
 * warned again only after it stopped being data-bound and became so again.
 * The watch also keeps what STATUS= shows (server.c): the loaders, how many
 * are data-bound, and their batches per second together (10 s windows).
 *
 * Loop thread only.
 */
#ifndef ZR_SERVER_WATCH_H
#define ZR_SERVER_WATCH_H

#include <stdint.h>

#include "server/server.h"

typedef struct zr_watch zr_watch;

/* Starts the watch on s's loop; `warn_after_sec` 0 sends no warning. Returns
 * 0 and sets *ret, or -ENOMEM. */
int zr_watch_new(zr_server *s, uint64_t warn_after_sec, zr_watch **ret);

/* Changes the warning delay (SIGHUP). */
void zr_watch_set_warning(zr_watch *w, uint64_t warn_after_sec);

/* Stops it; NULL allowed; returns NULL. */
zr_watch *zr_watch_free(zr_watch *w);

/* What the last look saw: loaders, data-bound ones, batches/s of all. */
typedef struct zr_watch_summary {
        unsigned loaders;
        unsigned data_bound;
        double batches_per_s;
} zr_watch_summary;

void zr_watch_get(const zr_watch *w, zr_watch_summary *ret);

#endif
