/* killpoint.c: the kill points of a -Dkillpoints=true build (killpoint.h).
 *
 * The selection is parsed from ZR_KILLPOINT once, at the first point reached;
 * hits are counted atomically, so a point reached from pool threads is counted
 * once per reach. The names are always built (tests print them); the hook only
 * with the option.
 */
#include "store/killpoint.h"

#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>

static const char *const killpoint_names[ZR_KP_MAX] = {
        [ZR_KP_APPEND_COMPRESSED] = "append-compressed",
        [ZR_KP_APPEND_FILE_CREATED] = "append-file-created",
        [ZR_KP_APPEND_FILES_DURABLE] = "append-files-durable",
        [ZR_KP_APPEND_DATA_WRITTEN] = "append-data-written",
        [ZR_KP_APPEND_TABLE_WRITTEN] = "append-table-written",
        [ZR_KP_APPEND_COMMITTED] = "append-committed",
        [ZR_KP_HEADER_BEFORE] = "header-before",
        [ZR_KP_HEADER_AFTER] = "header-after",
        [ZR_KP_SYNC_CHUNKS] = "sync-chunks",
        [ZR_KP_SYNC_LOCS] = "sync-locs",
        [ZR_KP_SYNC_META] = "sync-meta",
        [ZR_KP_DELETE_SYNCED] = "delete-synced",
        [ZR_KP_JOURNAL_CREATED] = "journal-created",
        [ZR_KP_JOURNAL_WRITTEN] = "journal-written",
        [ZR_KP_JOURNAL_DURABLE] = "journal-durable",
        [ZR_KP_DELETE_SWAP] = "delete-swap",
        [ZR_KP_DELETE_TABLE_SYNCED] = "delete-table-synced",
        [ZR_KP_DELETE_HEADER_SYNCED] = "delete-header-synced",
        [ZR_KP_JOURNAL_REMOVED] = "journal-removed",
        [ZR_KP_COMPACT_SYNCED] = "compact-synced",
        [ZR_KP_COMPACT_SCRATCH_RAISED] = "compact-scratch-raised",
        [ZR_KP_COMPACT_SCRATCH_COPIED] = "compact-scratch-copied",
        [ZR_KP_COMPACT_SCRATCH_ENTRY] = "compact-scratch-entry",
        [ZR_KP_COMPACT_PIECE] = "compact-piece",
        [ZR_KP_COMPACT_MOVED] = "compact-moved",
        [ZR_KP_COMPACT_ENTRY] = "compact-entry",
        [ZR_KP_COMPACT_DATA_SYNCED] = "compact-data-synced",
        [ZR_KP_COMPACT_TAIL] = "compact-tail",
        [ZR_KP_COMPACT_CHUNKS_REMOVED] = "compact-chunks-removed",
        [ZR_KP_COMPACT_HOLE_PUNCHED] = "compact-hole-punched",
        [ZR_KP_COMPACT_TAIL_RESTORED] = "compact-tail-restored",
        [ZR_KP_DICT_TMP_DURABLE] = "dict-tmp-durable",
        [ZR_KP_DICT_RENAMED] = "dict-renamed",
        [ZR_KP_DICT_FLAGGED] = "dict-flagged",
        [ZR_KP_CREATE_META_OPEN] = "create-meta-open",
        [ZR_KP_CREATE_META_NAMED] = "create-meta-named",
        [ZR_KP_FILE_EXTENDED] = "file-extended",
        [ZR_KP_FILE_TRIMMED] = "file-trimmed",
};

const char *zr_killpoint_name(unsigned n) {
        return n < ZR_KP_MAX ? killpoint_names[n] : NULL;
}

#if ZR_KILLPOINTS
static _Atomic int kp_state; /* 0 unparsed, 1 parsed */
static unsigned kp_point;    /* 0: none selected */
static uint64_t kp_hit = 1;
static _Atomic uint64_t kp_hits;

static void killpoint_parse(void) {
        const char *v = getenv("ZR_KILLPOINT");
        char *end;

        if (v && *v) {
                unsigned long n = strtoul(v, &end, 10);
                if (*end == ':')
                        kp_hit = strtoull(end + 1, NULL, 10);
                if (n > 0 && n < ZR_KP_MAX && kp_hit > 0)
                        kp_point = (unsigned)n;
        }
}

void zr_killpoint_hit(unsigned n) {
        int st = atomic_load_explicit(&kp_state, memory_order_acquire);
        if (st == 0) {
                /* racing first parses write the same values */
                killpoint_parse();
                atomic_store_explicit(&kp_state, 1, memory_order_release);
        }
        if (n != kp_point)
                return;
        if (atomic_fetch_add(&kp_hits, 1) + 1 == kp_hit)
                raise(SIGKILL);
}
#endif
