/* budgets.h: the daemon's memory budgets in force, and where each came from.
 *
 * Eight budgets bound the memory the daemon holds for speed or for its
 * clients: the decoded-record cache (`cache`), spare rings (`ring-spare`),
 * bytes read ahead of the loaders (`prefetch`), the free one-pass read buffers
 * each client keeps for reuse (`read-pool`: told to clients in HELLO, kept by
 * them, and inside their shared memory), and shared memory for all uids and
 * for one (`max-shm-total`, `max-shm-per-uid`), and the working memory of
 * requests and loaders for all uids and for one (`max-work-mem-total`,
 * `max-work-mem-per-uid`). A budget set in the
 * configuration is taken as it is; one left "auto" (the default) is a share of
 * what the daemon may really use: the smallest memory limit of its cgroup and
 * of every ancestor, else the machine's memory (util/memlimit.h), so that a
 * daemon in a container or a small cgroup is never OOM-killed by its own
 * defaults. The shares leave an eighth or more for the daemon's heap and
 * the page cache of the data:
 *
 *   cache       12%, at most 1 GiB (what a few batches of images decode to)
 *   ring-spare  12%, at most 512 MiB (one ring of 4 x 256 x 256 KiB)
 *   prefetch    12%, at most 1 GiB (64 steps of 4 KiB x 1024, 16 of 64 MiB)
 *   read-pool   1%, at most 256 MiB per client (four 64 MiB results)
 *   shm total   50% (rings and read buffers are resident and unswappable)
 *   shm per uid 25%
 *   work total  12%, at least 512 MiB (heap sized by clients: batch tables,
 *               gather tables, conversions' buffers)
 *   work per uid 6%, at least 256 MiB (a conversion holds 190 MiB)
 *
 * Resolved at start and again on SIGHUP (a cgroup's limit may have changed).
 * Nothing here prints; the server logs what changed.
 */
#ifndef ZR_SERVER_BUDGETS_H
#define ZR_SERVER_BUDGETS_H

#include <stdint.h>

#include "server/config.h"
#include "util/memlimit.h"

#define ZR_BUDGET_SOURCE_MAX (ZR_MEMLIMIT_SOURCE_MAX + 64)

typedef struct zr_budget {
        uint64_t bytes;
        /* "setting", or e.g. "auto: 12% of 512 MiB (cgroup v1 memory.limit_in_bytes
         * of /x), at most 1024 MiB" */
        char source[ZR_BUDGET_SOURCE_MAX];
} zr_budget;

typedef struct zr_budgets {
        zr_budget cache, ring_spare, prefetch, read_pool, shm_total, shm_uid, work_total,
                work_uid;
        uint64_t memory;                       /* what the daemon may use; 0 if unknown */
        char memory_source[ZR_MEMLIMIT_SOURCE_MAX];
} zr_budgets;

/* Resolves the budgets of *cfg (memory read below `root`, "/" if NULL). When
 * the memory cannot be read (no /proc/meminfo), an auto budget is its cap (the
 * shared-memory ones 0: only the per-connection limit holds) and *err says why;
 * returns 0 or that negative code, *ret filled either way. */
int zr_budgets_resolve(const zr_config *cfg, const char *root, zr_budgets *ret,
                       zr_error *err);

#endif
