/* compact.c: rewriting live records densely, in place, in physical order.
 *
 * A record never moves to a higher address, so it lands only on garbage or on
 * bytes already moved away, and its table entry is rewritten the moment it
 * lands. The one case the seed's argument leaves out is a record that overlaps
 * its own old bytes (it moves down by less than its length): copying it in
 * place would damage the bytes its entry still names. Such a record goes
 * through scratch space past the frontier first (copy, point the entry there,
 * copy down, point the entry at its place), so the store is consistent at
 * every instant. Chunk files past the new frontier are removed at the end.
 * Needs exclusive access; holds the whole table in memory.
 */
#include "store/store-private.h"
#include "store/killpoint.h"
#include "store/readahead.h"

#include <fcntl.h>
#include <errno.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Copy buffer of compact: 8 MiB keeps a move to a few syscalls. */
#define STORE_COPY_BYTES ((size_t)8 << 20)
/* Bytes of records to move that the pass keeps hinted ahead of its reads
 * (between half of it and all of it): chunk files have no read-around, so
 * without hints every move would wait for its own read. */
#define STORE_COMPACT_AHEAD ((uint64_t)32 << 20)

/* Where the next record of p bytes goes when the packed frontier is at chunk
 * *fc, offset *fo (a record never straddles chunks): sets *dc, *dof and moves
 * the frontier past it. */
static void compact_place(uint64_t cap, uint64_t *fc, uint64_t *fo, uint64_t p, uint64_t *dc,
                          uint64_t *dof) {
        if (*fo + p > cap) {
                (*fc)++;
                *fo = 0;
        }
        *dc = *fc;
        *dof = *fo;
        *fo += p;
        if (*fo == cap) {
                (*fc)++;
                *fo = 0;
        }
}

/* Keeps the records the pass will move hinted up to STORE_COMPACT_AHEAD bytes
 * past `done` bytes moved: the hint cursor replays compact_place() from its own
 * frontier (*hfc, *hfo), so records already in place, which the pass skips
 * without reading, are never hinted. *hk is the next record to consider and
 * *hinted the bytes of moves hinted so far. */
static void compact_hint_ahead(zr_store *s, const zr_loc *locs, const zr_phys *order,
                               uint64_t length, uint64_t done, uint64_t *hk, uint64_t *hfc,
                               uint64_t *hfo, uint64_t *hinted) {
        if (*hinted - done >= STORE_COMPACT_AHEAD / 2 || *hk == length)
                return;
        zr_readahead ra;
        zr_readahead_init(&ra, s);
        while (*hk < length && *hinted - done < STORE_COMPACT_AHEAD) {
                const zr_loc *l = &locs[order[*hk].idx];
                uint64_t dc, dof;
                compact_place(s->chunk_cap, hfc, hfo, l->phys_length, &dc, &dof);
                if (dc != l->chunk_id || dof != l->offset) {
                        zr_readahead_add(&ra, l);
                        *hinted += l->phys_length;
                }
                (*hk)++;
        }
        zr_readahead_flush(&ra);
}

/* Copies len bytes from (sc, so) to (dc, dof), dst <= src: forward, in pieces. */
static int compact_copy(zr_store *s, uint8_t *buf, uint32_t sc, uint64_t so, uint32_t dc,
                        uint64_t dof, uint64_t len, zr_error *err) {
        int sfd = zr_files_fd(s->chunks, sc), dfd = zr_files_fd(s->chunks, dc);
        if (sfd < 0 || dfd < 0)
                return zr_error_set(err, ZR_E_CORRUPT, "compact: chunk %" PRIu32 " not open",
                                    sfd < 0 ? sc : dc);
        for (uint64_t done = 0; done < len;) {
                uint64_t piece = len - done < STORE_COPY_BYTES ? len - done : STORE_COPY_BYTES;
                int64_t n = zr_pread_all(sfd, buf, piece, so + done);
                if (n < 0)
                        return zr_error_errno(err, (int)-n, "%" PRIu32 ".chunk: read", sc);
                if ((uint64_t)n != piece)
                        return zr_error_set(err, ZR_E_CORRUPT,
                                            "%" PRIu32 ".chunk: short read at offset %" PRIu64, sc,
                                            so + done);
                int r = zr_pwrite_all(dfd, buf, piece, dof + done);
                if (r < 0)
                        return zr_error_errno(err, -r, "%" PRIu32 ".chunk: write", dc);
                ZR_KILLPOINT(ZR_KP_COMPACT_PIECE);
                done += piece;
        }
        zr_files_grown(s->chunks, dc, dof + len); /* a short chunk before the tail */
        return 0;
}

/* Raises the frontier (memory and meta.zr) to cover [.., offset `end`) of chunk
 * `chunk`, creating chunk files as needed, so entries pointing there are valid. */
static int compact_raise_tail(zr_store *s, uint64_t length, uint64_t chunk, uint64_t end,
                              zr_error *err) {
        uint64_t t = end == s->chunk_cap ? tail_make(chunk + 1, 0) : tail_make(chunk, end);
        uint64_t cur = atomic_load(&s->tail);
        int made = 0, r;

        if (t <= cur)
                return 0;
        for (uint64_t id = tail_chunk(cur); id <= tail_chunk(t); id++) {
                int created;
                r = zr_store_open_file(s, s->chunks, (uint32_t)id, 1, 0, ".chunk", &created, err);
                if (r < 0)
                        return r;
                made += created;
        }
        if (made > 0) {
                r = zr_store_dir_durable(s, err);
                if (r < 0)
                        return r;
        }
        r = zr_store_write_header(s, length, t, err);
        if (r < 0)
                return r;
        atomic_store(&s->tail, t);
        ZR_KILLPOINT(ZR_KP_COMPACT_SCRATCH_RAISED);
        return 0;
}

/* Moves record `index` (at *l) to scratch space at the frontier the pass began
 * with, and points its entry there; *l becomes the scratch location. */
static int compact_to_scratch(zr_store *s, uint8_t *buf, uint64_t length, uint64_t base,
                              uint64_t index, zr_loc *l, zr_error *err) {
        uint64_t sc = tail_chunk(base), so = tail_offset(base);
        int r;

        if (so + l->phys_length > s->chunk_cap) {
                sc++;
                so = 0;
        }
        r = compact_raise_tail(s, length, sc, so + l->phys_length, err);
        if (r < 0)
                return r;
        r = compact_copy(s, buf, l->chunk_id, l->offset, (uint32_t)sc, so, l->phys_length, err);
        if (r < 0)
                return r;
        ZR_KILLPOINT(ZR_KP_COMPACT_SCRATCH_COPIED);
        l->chunk_id = (uint32_t)sc;
        l->offset = (uint32_t)so;
        r = zr_store_put_loc(s, index, l, err);
        if (r < 0)
                return r;
        ZR_KILLPOINT(ZR_KP_COMPACT_SCRATCH_ENTRY);
        return 0;
}

int zr_store_compact(zr_store *s, uint64_t max_moves, zr_compact_result *ret,
                     zr_error *err) {
        zr_compact_result res = {0};
        uint64_t length = zr_store_length(s);
        zr_loc *locs = NULL;
        uint64_t *idx = NULL;
        zr_phys *order = NULL;
        uint8_t *buf = NULL;
        int r;

        r = zr_store_check_writable(s, err);
        if (r < 0)
                return r;
        r = zr_store_sync(s, err);
        if (r < 0)
                return r;
        ZR_KILLPOINT(ZR_KP_COMPACT_SYNCED);

        uint64_t old_tail = atomic_load(&s->tail);
        uint64_t before = (uint64_t)tail_chunk(old_tail) * s->chunk_cap + tail_offset(old_tail);
        locs = malloc((length ? length : 1) * sizeof(*locs));
        order = malloc((length ? length : 1) * sizeof(*order));
        idx = malloc(STORE_WALK_ENTRIES * sizeof(*idx));
        buf = malloc(STORE_COPY_BYTES);
        if (!locs || !order || !idx || !buf) {
                r = zr_error_set(err, ENOMEM, "compact: out of memory");
                goto out;
        }
        for (uint64_t first = 0; first < length; first += STORE_WALK_ENTRIES) {
                size_t n = length - first < STORE_WALK_ENTRIES ? length - first
                                                                : STORE_WALK_ENTRIES;
                r = zr_store_read_table(s, first, n, locs + first, idx, err);
                if (r < 0)
                        goto out;
        }
        for (uint64_t k = 0; k < length; k++)
                order[k] = (zr_phys){ tail_make(locs[k].chunk_id, locs[k].offset), k };
        qsort(order, length, sizeof(*order), zr_phys_cmp);

        /* Repack in physical order: a record never moves up, so it only lands on
         * garbage or on bytes already moved away, and its entry is rewritten the
         * moment it lands. */
        uint64_t fc = 0, fo = 0;
        uint64_t hk = 0, hfc = 0, hfo = 0, hinted = 0, moved_bytes = 0;
        res.finished = 1;
        for (uint64_t k = 0; k < length; k++) {
                zr_loc l = locs[order[k].idx];
                uint64_t p = l.phys_length, dc, dof;
                compact_place(s->chunk_cap, &fc, &fo, p, &dc, &dof);
                if (dc == l.chunk_id && dof == l.offset) {
                        res.skipped++;
                } else {
                        if (max_moves > 0 && res.moved == max_moves) {
                                res.finished = 0;
                                break;
                        }
                        compact_hint_ahead(s, locs, order, length, moved_bytes, &hk, &hfc, &hfo,
                                           &hinted);
                        if (dc == l.chunk_id && dof + p > l.offset) {
                                /* would overwrite its own bytes: via scratch */
                                r = compact_to_scratch(s, buf, length, old_tail, order[k].idx, &l,
                                                       err);
                                if (r < 0)
                                        goto out;
                                res.via_scratch++;
                        }
                        r = compact_copy(s, buf, l.chunk_id, l.offset, (uint32_t)dc, dof, p,
                                         err);
                        if (r < 0)
                                goto out;
                        ZR_KILLPOINT(ZR_KP_COMPACT_MOVED);
                        l.chunk_id = (uint32_t)dc;
                        l.offset = (uint32_t)dof;
                        r = zr_store_put_loc(s, order[k].idx, &l, err);
                        if (r < 0)
                                goto out;
                        ZR_KILLPOINT(ZR_KP_COMPACT_ENTRY);
                        res.moved++;
                        moved_bytes += p;
                }
        }

        if (res.finished) {
                uint64_t new_tail = tail_make(fc, fo); /* <= old_tail: nothing moves up */
                /* Entries first, then the header's frontier, durable before any
                 * chunk file goes away. */
                r = zr_files_sync(s->chunks, err);
                if (r >= 0)
                        r = zr_files_sync(s->locs, err);
                if (r >= 0) {
                        ZR_KILLPOINT(ZR_KP_COMPACT_DATA_SYNCED);
                        r = zr_store_write_header(s, length, new_tail, err);
                }
                if (r >= 0 && fdatasync(s->meta_fd) < 0)
                        r = zr_error_errno(err, errno, ZR_META_NAME ": fdatasync");
                if (r < 0) {
                        atomic_store(&s->failed, -r);
                        goto out;
                }
                ZR_KILLPOINT(ZR_KP_COMPACT_TAIL);
                atomic_store(&s->tail, new_tail);
                if (tail_chunk(new_tail) < UINT32_MAX) {
                        r = zr_files_remove_from(s->chunks, tail_chunk(new_tail) + 1, err);
                        if (r < 0)
                                goto out;
                        s->dir_dirty = 1;
                        ZR_KILLPOINT(ZR_KP_COMPACT_CHUNKS_REMOVED);
                }
                int tfd = zr_files_fd(s->chunks, tail_chunk(new_tail));
                if (tfd >= 0 && tail_offset(new_tail) < s->chunk_cap)
                        /* give the garbage after the frontier back to the file system;
                         * best effort (not every file system punches holes) */
                        (void)fallocate(tfd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
                                        (off_t)tail_offset(new_tail),
                                        (off_t)(s->chunk_cap - tail_offset(new_tail)));
                ZR_KILLPOINT(ZR_KP_COMPACT_HOLE_PUNCHED);
                res.freed_bytes = before - ((uint64_t)fc * s->chunk_cap + fo);
        } else if (atomic_load(&s->tail) != old_tail) {
                /* stopped between moves: no entry names scratch space any more,
                 * so the frontier goes back to where the pass found it */
                r = zr_store_write_header(s, length, old_tail, err);
                if (r < 0)
                        goto out;
                atomic_store(&s->tail, old_tail);
                ZR_KILLPOINT(ZR_KP_COMPACT_TAIL_RESTORED);
        }
        pthread_mutex_lock(&s->append_lock);
        r = zr_store_sync_locked(s, err);
        pthread_mutex_unlock(&s->append_lock);
out:
        if (ret)
                *ret = res;
        free(locs);
        free(order);
        free(idx);
        free(buf);
        return r;
}
