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
        return r < 0 ? r : 0;
}
