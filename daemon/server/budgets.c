/* budgets.c: the memory budgets in force (budgets.h). */
#include "server/budgets.h"

#include <stdio.h>
#include <string.h>

#define MiB (UINT64_C(1) << 20)
#define GiB (UINT64_C(1) << 30)

/* Shares of the daemon's memory, in percent, and caps (budgets.h says why). */
#define CACHE_PCT 12
#define CACHE_CAP (1 * GiB)
#define RING_SPARE_PCT 12
#define RING_SPARE_CAP (512 * MiB)
#define PREFETCH_PCT 12
#define PREFETCH_CAP (1 * GiB)
#define READ_POOL_PCT 1
#define READ_POOL_CAP (256 * MiB)
#define SHM_TOTAL_PCT 50
#define SHM_UID_PCT 25
#define WORK_TOTAL_PCT 12
#define WORK_UID_PCT 6
/* ... but at least this much (a CONVERT holds about 190 MiB: convert.h), and
 * never over half the memory */
#define WORK_TOTAL_FLOOR (512 * MiB)
#define WORK_UID_FLOOR (256 * MiB)

/* Raises an auto budget to `floor` (at most half of the memory). */
static void floor_of(zr_budget *b, uint64_t floor, const zr_memlimit *ml) {
        size_t at;

        if (ml && floor > ml->effective / 2)
                floor = ml->effective / 2;
        if (b->bytes >= floor)
                return;
        b->bytes = floor;
        at = strlen(b->source);
        snprintf(b->source + at, sizeof(b->source) - at, ", at least %llu MiB",
                 (unsigned long long)(floor / MiB));
}

static void resolve(zr_budget *b, uint64_t setting, const zr_memlimit *ml, unsigned pct,
                    uint64_t cap) {
        if (setting != ZR_CONFIG_AUTO) {
                b->bytes = setting;
                snprintf(b->source, sizeof(b->source), "setting");
                return;
        }
        if (!ml) {
                b->bytes = cap == UINT64_MAX ? 0 : cap;
                snprintf(b->source, sizeof(b->source), "auto: the memory is unknown, %s",
                         cap == UINT64_MAX ? "none" : "the cap");
                return;
        }
        b->bytes = zr_memlimit_budget(ml, pct, cap);
        if (cap == UINT64_MAX)
                snprintf(b->source, sizeof(b->source), "auto: %u%% of %llu MiB (%s)", pct,
                         (unsigned long long)(ml->effective / MiB), ml->source);
        else
                snprintf(b->source, sizeof(b->source), "auto: %u%% of %llu MiB (%s), at most "
                         "%llu MiB", pct, (unsigned long long)(ml->effective / MiB), ml->source,
                         (unsigned long long)(cap / MiB));
}

int zr_budgets_resolve(const zr_config *cfg, const char *root, zr_budgets *ret,
                       zr_error *err) {
        zr_memlimit ml;
        int r = zr_memlimit_read(root, &ml, err);
        const zr_memlimit *m = r == 0 ? &ml : NULL;

        memset(ret, 0, sizeof(*ret));
        if (m) {
                ret->memory = ml.effective;
                snprintf(ret->memory_source, sizeof(ret->memory_source), "%s", ml.source);
        }
        resolve(&ret->cache, cfg->cache_bytes, m, CACHE_PCT, CACHE_CAP);
        resolve(&ret->ring_spare, cfg->ring_spare_bytes, m, RING_SPARE_PCT, RING_SPARE_CAP);
        resolve(&ret->prefetch, cfg->prefetch_bytes, m, PREFETCH_PCT, PREFETCH_CAP);
        resolve(&ret->read_pool, cfg->read_pool_bytes, m, READ_POOL_PCT, READ_POOL_CAP);
        /* 0 is "auto" for the shared-memory limits (config.h) */
        resolve(&ret->shm_total, cfg->max_shm_total ? cfg->max_shm_total : ZR_CONFIG_AUTO, m,
                SHM_TOTAL_PCT, UINT64_MAX);
        resolve(&ret->shm_uid, cfg->max_shm_per_uid ? cfg->max_shm_per_uid : ZR_CONFIG_AUTO, m,
                SHM_UID_PCT, UINT64_MAX);
        resolve(&ret->work_total, cfg->max_work_total ? cfg->max_work_total : ZR_CONFIG_AUTO, m,
                WORK_TOTAL_PCT, UINT64_MAX);
        resolve(&ret->work_uid, cfg->max_work_per_uid ? cfg->max_work_per_uid : ZR_CONFIG_AUTO,
                m, WORK_UID_PCT, UINT64_MAX);
        if (!cfg->max_work_total)
                floor_of(&ret->work_total, WORK_TOTAL_FLOOR, m);
        if (!cfg->max_work_per_uid)
                floor_of(&ret->work_uid, WORK_UID_FLOOR, m);
        return r < 0 ? r : 0;
}
