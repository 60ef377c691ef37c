/* inspect.c: read-only walks of a whole store: stats and verify.
 *
 * Both read the table sequentially in batches; verify also decodes every record
 * on the pool, in batches of bounded memory (each batch's pages hinted to the
 * kernel first: chunk files have no read-around), and checks that no two live
 * records share bytes. They may run beside an append and see a prefix of it.
 */
#include "store/store-private.h"
#include "store/readahead.h"

#include <errno.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Bytes verify decodes per batch: bounded memory, still parallel. */
#define STORE_VERIFY_BYTES ((uint64_t)64 << 20)
/* Largest table verify checks for overlapping records: 24 bytes per record
 * held at once, so at most 384 MiB. */
#define STORE_VERIFY_OVERLAP_MAX ((uint64_t)1 << 24)

int zr_store_stats(zr_store *s, zr_stats *ret, zr_error *err) {
        zr_stats st = {0};
        zr_loc *locs = malloc(STORE_WALK_ENTRIES * sizeof(*locs));
        uint64_t *idx = malloc(STORE_WALK_ENTRIES * sizeof(*idx));
        int r = 0;

        if (!locs || !idx) {
                r = zr_error_set(err, ENOMEM, "stats: out of memory");
                goto out;
        }
        st.records = zr_store_length(s);
        uint64_t tail = atomic_load_explicit(&s->tail, memory_order_acquire);
        for (uint64_t first = 0; first < st.records; first += STORE_WALK_ENTRIES) {
                size_t n = st.records - first < STORE_WALK_ENTRIES ? st.records - first
                                                                     : STORE_WALK_ENTRIES;
                r = zr_store_read_table(s, first, n, locs, idx, err);
                if (r < 0)
                        goto out;
                for (size_t k = 0; k < n; k++) {
                        st.live_bytes += locs[k].phys_length;
                        st.logic_bytes += locs[k].logic_length;
                }
        }
        st.chunk_bytes = (uint64_t)tail_chunk(tail) * s->chunk_cap + tail_offset(tail);
        st.reclaimable = st.chunk_bytes > st.live_bytes ? st.chunk_bytes - st.live_bytes : 0;
        *ret = st;
out:
        free(locs);
        free(idx);
        return r;
}

/* Verifies record `index` alone (for a batch that failed): 0 or its error. */
static int verify_one(zr_store *s, uint64_t index, uint8_t **buf, uint64_t *buf_size,
                      zr_error *err) {
        zr_loc l;
        int r = zr_store_locate_range(s, &index, 0, 1, &l,
                                      atomic_load_explicit(&s->tail, memory_order_acquire), err);
        if (r < 0)
                return r;
        if (l.logic_length > *buf_size || !*buf) {
                free(*buf);
                *buf_size = l.logic_length ? l.logic_length : 1;
                *buf = malloc(*buf_size);
                if (!*buf) {
                        *buf_size = 0;
                        return zr_error_set(err, ENOMEM, "verify: out of memory");
                }
        }
        void *dst = *buf;
        return zr_store_gather_locs(s, &l, 1, &dst, err);
}

typedef struct extent {
        zr_phys at;    /* first: sorted by zr_phys_cmp() */
        uint64_t phys;
} extent;

/* Two live records sharing bytes (a tail record twice, a bad table write) are
 * corruption even when each decodes. Counts each record that overlaps the one
 * before it in physical order. */
static void verify_overlaps(extent *ext, uint64_t n, zr_verify_report *rep, int *first_r,
                            zr_error *err) {
        qsort(ext, n, sizeof(*ext), zr_phys_cmp);
        for (uint64_t i = 1; i < n; i++) {
                const extent *a = &ext[i - 1], *b = &ext[i];
                if (a->phys == 0 || b->phys == 0 || (a->at.key >> 32) != (b->at.key >> 32) ||
                    (a->at.key & UINT32_MAX) + a->phys <= (b->at.key & UINT32_MAX))
                        continue;
                uint64_t bad = a->at.idx > b->at.idx ? a->at.idx : b->at.idx;
                if (rep->bad++ == 0 || bad < rep->first_bad)
                        rep->first_bad = bad;
                if (!*first_r)
                        *first_r = zr_error_set(err, ZR_E_CORRUPT,
                                                "records %" PRIu64 " and %" PRIu64 " overlap in "
                                                "%" PRIu64 ".chunk at offset %" PRIu64,
                                                a->at.idx, b->at.idx, b->at.key >> 32,
                                                b->at.key & UINT32_MAX);
        }
}

int zr_store_verify(zr_store *s, zr_verify_report *ret, zr_error *err) {
        zr_verify_report rep = {0};
        uint64_t length = zr_store_length(s);
        zr_loc *locs = malloc(STORE_WALK_ENTRIES * sizeof(*locs));
        uint64_t *idx = malloc(STORE_WALK_ENTRIES * sizeof(*idx));
        extent *ext = NULL;
        uint64_t next = 0;
        uint8_t *buf = NULL;
        uint64_t buf_size = 0;
        int first_r = 0, r = 0;

        if (!locs || !idx) {
                r = zr_error_set(err, ENOMEM, "verify: out of memory");
                goto out;
        }
        if (length > 0 && length <= STORE_VERIFY_OVERLAP_MAX) {
                ext = malloc(length * sizeof(*ext));
                if (!ext) {
                        r = zr_error_set(err, ENOMEM, "verify: out of memory");
                        goto out;
                }
        }
        for (uint64_t k = 0; k < length;) {
                /* a batch: up to STORE_WALK_ENTRIES entries and STORE_VERIFY_BYTES
                 * bytes (at least one record), decoded in parallel */
                size_t n = length - k < STORE_WALK_ENTRIES ? length - k : STORE_WALK_ENTRIES;
                zr_error e = {0};
                size_t m = n;
                r = zr_store_read_table(s, k, n, locs, idx, &e);
                if (r >= 0) {
                        uint64_t bytes = 0;
                        m = 0;
                        while (m < n &&
                               (m == 0 || bytes + locs[m].logic_length <= STORE_VERIFY_BYTES))
                                bytes += locs[m++].logic_length;
                        if (bytes > buf_size || !buf) {
                                free(buf);
                                buf_size = bytes ? bytes : 1;
                                buf = malloc(buf_size);
                                if (!buf) {
                                        buf_size = 0;
                                        r = zr_error_set(err, ENOMEM, "verify: out of memory");
                                        goto out;
                                }
                        }
                        /* chunk files have no read-around: ask for the batch's
                         * pages at once, so a cold store reads at the device's
                         * pace, not one fault at a time */
                        zr_readahead ra;
                        zr_readahead_init(&ra, s);
                        for (size_t i = 0; i < m; i++)
                                zr_readahead_add(&ra, &locs[i]);
                        zr_readahead_flush(&ra);
                        gather_job j = { .s = s, .locs = locs, .n = m, .base = buf };
                        r = zr_store_gather_run(s, &j, &e);
                        for (size_t i = 0; ext && i < m; i++)
                                ext[next++] = (extent){
                                        { tail_make(locs[i].chunk_id, locs[i].offset), k + i },
                                        locs[i].phys_length };
                }
                if (r < 0) {
                        /* the batch holds a bad record: find each one */
                        for (size_t i = 0; i < m; i++) {
                                zr_error e1 = {0};
                                int r1 = verify_one(s, k + i, &buf, &buf_size, &e1);
                                if (r1 == -ENOMEM) {
                                        r = zr_error_set(err, ENOMEM, "verify: out of memory");
                                        goto out;
                                }
                                if (r1 < 0 && rep.bad++ == 0) {
                                        rep.first_bad = k + i;
                                        first_r = zr_error_set(err, -r1, "record %" PRIu64 ": %s",
                                                               k + i, e1.message);
                                }
                        }
                }
                rep.records += m;
                k += m;
        }
        if (ext) {
                verify_overlaps(ext, next, &rep, &first_r, err);
                rep.overlaps_checked = 1;
        }
        r = first_r;
out:
        if (ret)
                *ret = rep;
        free(ext);
        free(locs);
        free(idx);
        free(buf);
        return r;
}
