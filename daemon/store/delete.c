/* delete.c: swap-last deletion of a batch of indices.
 *
 * The batch is simulated first (each hole, in descending order, takes the
 * current last record) into absolute table writes, journaled durably in
 * delete.zr, applied and made durable, and the journal removed: all or nothing
 * under a crash. Needs exclusive access. It frees no bytes: compact does.
 */
#include "store/store-private.h"
#include "store/killpoint.h"

#include <errno.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int cmp_u64_desc(const void *a, const void *b) {
        uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
        return x < y ? 1 : x > y ? -1 : 0;
}

int zr_store_delete(zr_store *s, const uint64_t *idx, size_t n, zr_error *err) {
        zr_journal j = {0};
        uint64_t *sorted = NULL, *tail_idx = NULL;
        zr_loc *tail = NULL;
        uint64_t length = zr_store_length(s);
        int r;

        r = zr_store_check_writable(s, err);
        if (r < 0 || n == 0)
                return r;
        sorted = malloc(n * sizeof(*sorted));
        if (!sorted)
                return zr_error_set(err, ENOMEM, "delete: out of memory");
        memcpy(sorted, idx, n * sizeof(*sorted));
        qsort(sorted, n, sizeof(*sorted), cmp_u64_desc);
        if (sorted[0] >= length) {
                r = zr_error_set(err, ZR_E_RANGE,
                                 "delete: index %" PRIu64 " out of range (length %" PRIu64 ")",
                                 sorted[0], length);
                goto out;
        }
        for (size_t k = 1; k < n; k++)
                if (sorted[k] == sorted[k - 1]) {
                        r = zr_error_set(err, EINVAL, "delete: index %" PRIu64 " given twice",
                                         sorted[k]);
                        goto out;
                }

        /* Everything before the batch durable first, so the journal redoes onto
         * a table and header that survive a power loss. */
        r = zr_store_sync(s, err);
        if (r < 0)
                goto out;
        ZR_KILLPOINT(ZR_KP_DELETE_SYNCED);

        /* The tail [new_len, length) supplies every hole; simulate the swaps. */
        uint64_t new_len = length - n;
        tail = malloc(n * sizeof(*tail));
        tail_idx = malloc(n * sizeof(*tail_idx));
        j.entries = malloc(n * sizeof(*j.entries));
        if (!tail || !tail_idx || !j.entries) {
                r = zr_error_set(err, ENOMEM, "delete: out of memory");
                goto out;
        }
        for (size_t k = 0; k < n; k++)
                tail_idx[k] = new_len + k;
        r = zr_store_locate_range(s, tail_idx, 0, n, tail, atomic_load(&s->tail), err);
        if (r < 0)
                goto out;
        uint64_t cur = length;
        for (size_t k = 0; k < n; k++) {
                uint64_t hole = sorted[k], last = cur - 1;
                if (hole != last) {
                        zr_loc moved = tail[last - new_len];
                        if (hole >= new_len)
                                tail[hole - new_len] = moved;
                        else
                                j.entries[j.n++] = (zr_journal_entry){ hole, moved };
                }
                cur--;
        }
        j.old_len = length;
        j.new_len = new_len;

        r = zr_journal_write(s->dirfd, &j, err);
        if (r >= 0) {
                ZR_KILLPOINT(ZR_KP_JOURNAL_DURABLE);
                r = zr_store_apply_journal(s, &j, err);
        }
        if (r < 0)
                atomic_store(&s->failed, -r); /* the journal is redone on the next open */
out:
        zr_journal_done(&j);
        free(tail);
        free(tail_idx);
        free(sorted);
        return r;
}
