/* pack.c: the rows of a packed stream (pack.h): which pieces of which
 * documents each row holds, from the cycles' indexes (tokindex.h), and their
 * tokens, segment ids and positions written into a slot's region.
 *
 * A fill works through its rows in chunks: under the pack's mutex it plans a
 * chunk (each piece: the document, its first token and count, its place in
 * the region), loading or building a cycle's index it lacks; without the
 * mutex it draws the pieces' documents from the sampler's permutation, writes
 * the chunk's segment ids, positions and padding and reads its pieces from
 * the store. It knows nothing of slots, rings or groups (fill.c
 * calls it with the region) and assumes the caller holds the dataset's lock.
 */
#include "loader/pack.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "io/hint.h"
#include "io/range.h"
#include "sampler/inverse.h"
#include "store/store.h"
#include "zr-proto.h"

/* Cycles' indexes a pack keeps at once: a row may span the end of one cycle
 * into the next, and fills of neighbouring steps run at once. */
#define PACK_HELD 3
/* Pieces a fill plans and reads at once, at least (a chunk has room for a
 * whole row more): its tables are 56 bytes a piece. */
#define PACK_CHUNK_PIECES 16384
/* best_fit: cycles whose rows a step may count past (the cycle of a row is
 * found by adding the rows of the cycles before it, each cycle's index built
 * or read for it): a resume that far is refused rather than bought with
 * that many builds. */
#define PACK_BEST_FIT_CYCLES_MAX 65536
/* best_fit: cycles whose index one call may build to count their rows (a
 * million documents: a build takes tenths of a second here), so that an open
 * or a fill stays a bounded piece of work (SECURITY.md, "Limits"); indexes on
 * disk only cost their header's read. */
#define PACK_BEST_FIT_BUILDS_MAX 16
/* Reading ahead: once a fill took major faults (its store's pages were not in
 * the page cache), each fill hints the pieces of the step this many steps
 * after its own (the first, those of every step up to it), until this many
 * fills in a row took none. */
#define PACK_AHEAD_STEPS 8
#define PACK_AHEAD_QUIET 64

typedef struct held_idx {
        zr_tokidx *ix;
        uint64_t used;        /* the pack's tick at its last use */
} held_idx;

struct zr_pack {
        zr_pack_params p;
        zr_dataset *ds;
        zr_store *store;
        int raw;
        enum zr_sampler_mode mode;
        uint64_t n, fp, seed, B, W, rank, item, hdr;
        zr_tokstore *ts;
        zr_pool *pool;
        unsigned shards;              /* a build's shards at once (its scratch each) */
        pthread_mutex_t mu;
        held_idx held[PACK_HELD];
        uint64_t tick;
        uint64_t total, max_len;      /* of a cycle (every cycle: the same documents) */
        unsigned __int128 cycle_tokens; /* concat: total + n × eos */
        uint64_t *cum;                /* best_fit: cum[c], rows before cycle c, c < ncum */
        uint64_t ncum;
        int held_only;                /* under mu: plan from held indexes only (hints) */
        _Atomic int ahead;            /* fills left that read ahead; 0: none */
        _Atomic long faults;          /* the process's major faults at the last fill's end */
};

/* One piece of a row, or a row's padding (idx UINT64_MAX). */
typedef struct piece {
        uint64_t idx;         /* the document's record */
        uint64_t at;          /* its first token's place in the region (row × L + col) */
        uint32_t start, count;
        uint32_t seg;
} piece;

static uint64_t align64(uint64_t v) {
        return (v + ZR_STREAM_ALIGN - 1) / ZR_STREAM_ALIGN * ZR_STREAM_ALIGN;
}

uint64_t zr_pack_region_bytes(uint64_t B, uint64_t L, uint64_t itemsize, uint64_t *ret_segments,
                              uint64_t *ret_positions) {
        uint64_t toks = align64(B * L * itemsize), segs = align64(B * L * 4);

        if (ret_segments)
                *ret_segments = toks;
        if (ret_positions)
                *ret_positions = toks + segs;
        return toks + 2 * segs;
}

static uint64_t chunk_pieces(uint64_t L) {
        return 2 * L + 2 > PACK_CHUNK_PIECES ? 2 * L + 2 : PACK_CHUNK_PIECES;
}

static int fits_dtype(int64_t v, const zr_dtype *dt) {
        unsigned bits = 8 * dt->itemsize;
        if (bits >= 64)
                return dt->kind == 'i' || v >= 0;
        if (dt->kind == 'u')
                return v >= 0 && (uint64_t)v < (UINT64_C(1) << bits);
        return v >= -(INT64_C(1) << (bits - 1)) && v < (INT64_C(1) << (bits - 1));
}

int zr_pack_check(const zr_pack_params *p, const zr_dataset *ds, enum zr_sampler_mode mode,
                  const char *name, zr_error *err) {
        const zr_schema *s = zr_dataset_schema(ds);
        zr_error serr = {0};
        uint64_t one;

        if (p->mode != ZR_PACK_CONCAT && p->mode != ZR_PACK_BEST_FIT)
                return zr_error_set(err, ZR_E_PROTO, "%s: pack mode %d is unknown (concat, "
                                    "best_fit)", name, (int)p->mode);
        if (s->kind != ZR_SCHEMA_RAGGED || (s->ndim != 1 && s->ndim != ZR_SCHEMA_NDIM_ANY))
                return zr_error_set(err, ZR_E_SCHEMA, "%s: only a ragged stream of one dimension "
                                    "(documents of token ids) can be packed; this one is %s",
                                    name, s->kind != ZR_SCHEMA_RAGGED ? "dense" :
                                    "ragged of several dimensions");
        if ((s->dtype.kind != 'i' && s->dtype.kind != 'u') || s->dtype.order == '>')
                return zr_error_set(err, ZR_E_SCHEMA, "%s: tokens are integers in this machine's "
                                    "byte order; the dtype is '%s'", name, s->dtype.str);
        if (p->seq_len < 1 || p->seq_len > ZR_PACK_SEQ_LEN_MAX)
                return zr_error_set(err, ZR_E_PROTO, "%s: seq_len %" PRIu64 " is out of range: "
                                    "1..%u", name, p->seq_len, ZR_PACK_SEQ_LEN_MAX);
        if (p->mode == ZR_PACK_BEST_FIT && p->window > ZR_PACK_WINDOW_MAX)
                return zr_error_set(err, ZR_E_PROTO, "%s: window %" PRIu64 " is out of range: "
                                    "1..%u documents", name, p->window, ZR_PACK_WINDOW_MAX);
        if (p->has_eos && !fits_dtype(p->eos_id, &s->dtype))
                return zr_error_set(err, ZR_E_SCHEMA, "%s: eos_id %" PRId64 " does not fit the "
                                    "dtype '%s'", name, p->eos_id, s->dtype.str);
        if (!fits_dtype(p->pad_id, &s->dtype))
                return zr_error_set(err, ZR_E_SCHEMA, "%s: pad_id %" PRId64 " does not fit the "
                                    "dtype '%s'", name, p->pad_id, s->dtype.str);
        if (zr_sampler_cycle_fill(mode, 1, 0, 0, 0, &one, 1, &serr) < 0)
                return zr_error_set(err, ZR_E_SAMPLER, "%s: %s", name, serr.message);
        return 0;
}

/* The key of the index of cycle c. */
static zr_tokidx_key pack_key(const zr_pack *pk, enum zr_tokidx_kind kind, uint64_t c) {
        zr_tokidx_key k = { .kind = kind, .mode = pk->mode, .fingerprint = pk->fp, .n = pk->n };

        if (pk->mode != ZR_SAMPLER_SEQUENTIAL) { /* sequential: every cycle alike */
                k.seed = pk->seed;
                k.cycle = c;
        }
        if (kind == ZR_TOKIDX_BEST_FIT) {
                k.seq_len = pk->p.seq_len;
                k.window = pk->p.window;
                k.eos = pk->p.has_eos ? 1 : 0;
        }
        return k;
}

/* One fill's tables. */
static uint64_t fill_tables(uint64_t L) {
        /* a piece, its record, two locations and destinations (its tokens, its
         * record's header), the header read */
        return chunk_pieces(L) * (sizeof(piece) + sizeof(uint64_t) + 2 * sizeof(zr_loc) +
                                  2 * sizeof(void *) + 4 * sizeof(uint64_t));
}

uint64_t zr_pack_work_bytes(const zr_pack_params *p, uint64_t n, unsigned shards) {
        zr_tokidx_key k = { .kind = p->mode == ZR_PACK_BEST_FIT ? ZR_TOKIDX_BEST_FIT
                                                               : ZR_TOKIDX_CONCAT, .n = n,
                            .seq_len = p->seq_len,
                            .window = p->window ? p->window : ZR_PACK_WINDOW_DEFAULT };
        unsigned __int128 b = (unsigned __int128)(PACK_HELD + 1) * zr_tokidx_bytes(&k) +
                              zr_tokidx_lengths_bytes(n) + fill_tables(p->seq_len) +
                              (p->mode == ZR_PACK_BEST_FIT ? 8 * (PACK_BEST_FIT_CYCLES_MAX + 1) : 0) +
                              (unsigned __int128)shards * zr_tokidx_build_bytes(&k);
        return b > UINT64_MAX ? UINT64_MAX : (uint64_t)b;
}

uint64_t zr_pack_memory(const zr_pack *pk, unsigned fills) {
        unsigned __int128 b = zr_pack_work_bytes(&pk->p, pk->n, pk->shards) +
                              (unsigned __int128)fills * (fill_tables(pk->p.seq_len) +
                                                          (pk->raw ? 0 : pk->hdr + pk->max_len * pk->item + 1));
        return b > UINT64_MAX ? UINT64_MAX : (uint64_t)b;
}

/* Mutex held: the index of kind and cycle c, held by the pack (loaded or built). */
static int cycle_index(zr_pack *pk, enum zr_tokidx_kind kind, uint64_t c, const _Atomic int *cancel,
                       const zr_tokidx **ret, zr_error *err) {
        zr_tokidx_key k = pack_key(pk, kind, c);
        held_idx *lru = &pk->held[0];
        zr_tokidx *ix;
        int r;

        pk->tick++;
        for (int i = 0; i < PACK_HELD; i++) {
                held_idx *h = &pk->held[i];
                if (h->ix && memcmp(&h->ix->key, &k, sizeof(k)) == 0) {
                        h->used = pk->tick;
                        *ret = h->ix;
                        return 0;
                }
                if (!h->ix || (lru->ix && h->used < lru->used))
                        lru = h;
        }
        if (pk->held_only)
                return -EAGAIN; /* a hint never loads or builds an index */
        r = zr_tokidx_get(pk->ts, &k, pk->ds, pk->pool, cancel, &ix, err);
        if (r < 0)
                return r;
        if (ix->total != pk->total && pk->total != UINT64_MAX) {
                /* every cycle holds the same documents: a cycle of another total is
                 * an index of other records (a fingerprint that did not tell) */
                zr_tokidx_free(ix);
                return zr_error_set(err, ZR_E_CORRUPT, "the index of cycle %" PRIu64 " counts "
                                    "other tokens than cycle 0's: the store changed", c);
        }
        zr_tokidx_free(lru->ix);
        lru->ix = ix;
        lru->used = pk->tick;
        *ret = ix;
        return 0;
}

/* Mutex held, best_fit of a cyclic sampler: counts the rows of the first
 * cycle not counted yet into pk->cum, from its index's header when the store
 * has it, else from its index (*builds of them, at most
 * PACK_BEST_FIT_BUILDS_MAX a call). */
static int cum_extend(zr_pack *pk, unsigned *builds, const _Atomic int *cancel, zr_error *err) {
        uint64_t c = pk->ncum - 1, rows;
        zr_tokidx_key k = pack_key(pk, ZR_TOKIDX_BEST_FIT, c);
        const zr_tokidx *ix;
        int r;

        if (pk->ncum >= PACK_BEST_FIT_CYCLES_MAX)
                return zr_error_set(err, ZR_E_SAMPLER, "best_fit: the row of this step "
                                    "lies past %d cycles of the documents, whose rows "
                                    "would all be packed to find it",
                                    PACK_BEST_FIT_CYCLES_MAX);
        rows = zr_tokidx_peek_rows(pk->ts, &k);
        if (rows == 0 && ++*builds > PACK_BEST_FIT_BUILDS_MAX)
                return zr_error_set(err, ZR_E_LIMIT, "best_fit: the row of this step lies "
                                    "past cycle %" PRIu64 ", and the rows of more than %d "
                                    "cycles before it are not indexed yet: open at an "
                                    "earlier step first (each open indexes %d more), or "
                                    "pack by concat", c, PACK_BEST_FIT_BUILDS_MAX,
                                    PACK_BEST_FIT_BUILDS_MAX);
        if (rows == 0) {
                r = cycle_index(pk, ZR_TOKIDX_BEST_FIT, c, cancel, &ix, err);
                if (r < 0)
                        return r;
                rows = ix->rows;
        }
        pk->cum[pk->ncum] = pk->cum[c] + rows;
        pk->ncum++;
        return 0;
}

/* Mutex held, best_fit: the cycle and row in it of global row g. */
static int best_fit_row(zr_pack *pk, unsigned __int128 g, const _Atomic int *cancel,
                        uint64_t *ret_c, uint64_t *ret_r, const zr_tokidx **ret_ix, zr_error *err) {
        const zr_tokidx *ix;
        int r;

        if (pk->mode == ZR_SAMPLER_SEQUENTIAL) {
                r = cycle_index(pk, ZR_TOKIDX_BEST_FIT, 0, cancel, &ix, err);
                if (r < 0)
                        return r;
                if (g / ix->rows > UINT64_MAX)
                        return zr_error_set(err, ZR_E_SAMPLER, "the packed stream's domain is "
                                            "used up");
                *ret_c = (uint64_t)(g / ix->rows);
                *ret_r = (uint64_t)(g % ix->rows);
                *ret_ix = ix;
                return 0;
        }
        unsigned builds = 0;
        while (pk->cum[pk->ncum - 1] <= g)
                if ((r = cum_extend(pk, &builds, cancel, err)) < 0)
                        return r;
        /* the last cycle whose first row is at or before g */
        uint64_t lo = 0, hi = pk->ncum - 1;
        while (hi - lo > 1) {
                uint64_t mid = lo + (hi - lo) / 2;
                if (pk->cum[mid] <= g)
                        lo = mid;
                else
                        hi = mid;
        }
        r = cycle_index(pk, ZR_TOKIDX_BEST_FIT, lo, cancel, &ix, err);
        if (r < 0)
                return r;
        *ret_c = lo;
        *ret_r = (uint64_t)(g - pk->cum[lo]);
        *ret_ix = ix;
        return 0;
}

static uint64_t doc_of(const zr_pack *pk, uint64_t c, uint64_t q) {
        uint64_t idx = q;
        zr_sampler_cycle_fill(pk->mode, pk->n, pk->seed, c, q, &idx, 1, NULL);
        return idx;
}

/* The documents of pieces v[0..k), whose .idx hold their positions in cycle
 * c, rising: the sampler's permutation drawn once for each span of up to 256
 * positions, not once a piece (a call sets its permutation up each time). */
static void docs_of(const zr_pack *pk, uint64_t c, piece *v, size_t k) {
        uint64_t buf[256];

        for (size_t i = 0; i < k;) {
                uint64_t q0 = v[i].idx, span = v[k - 1].idx - q0 + 1;
                if (span > 256)
                        span = 256;
                if (zr_sampler_cycle_fill(pk->mode, pk->n, pk->seed, c, q0, buf, (size_t)span,
                                          NULL) < 0)
                        for (uint64_t u = 0; u < span; u++)
                                buf[u] = doc_of(pk, c, q0 + u);
                for (; i < k && v[i].idx - q0 < span; i++)
                        v[i].idx = buf[v[i].idx - q0];
        }
}

/* A fill's planning across its rows (concat). Where the last row planned
 * ended, its cycle and the position of its last piece's document: a fill's
 * rows follow one another in the stream, so the next row's first document is
 * found from there in a step or two, not by a binary search over the cycle's
 * running sums (8 bytes a document, a cache miss a step). And the pieces
 * v[first..) whose documents are not drawn yet, positions of cycle `run_c`,
 * rising: drawn once for the whole run (plan_flush()), after the pack's
 * mutex is released, not once a row under it. */
typedef struct plan_hint {
        bool ok;
        uint64_t c, q;
        bool run;
        uint64_t run_c;
        size_t first;
} plan_hint;

/* Draws the documents of the pending run of pieces v[h->first..m). */
static void plan_flush(const zr_pack *pk, plan_hint *h, piece *v, size_t m) {
        if (h->run && m > h->first)
                docs_of(pk, h->run_c, v + h->first, m - h->first);
        h->run = false;
}

/* The last position q >= from of the cycle's order whose document starts at
 * or before token o, given that the one at `from` does: galloping, then
 * binary search (the running sums rise). */
static uint64_t doc_at(const zr_pack *pk, const zr_tokidx *ix, uint64_t from, uint64_t o) {
        const uint64_t eos = pk->p.has_eos ? 1 : 0;
        uint64_t lo = from, hi, step = 1;

        /* begin(lo) <= o; find hi with begin(hi) > o, or hi = n */
        for (;;) {
                if (step >= pk->n - lo) {
                        hi = pk->n;
                        break;
                }
                hi = lo + step;
                if (ix->prefix[hi] + hi * eos > o)
                        break;
                lo = hi;
                step *= 2;
        }
        while (hi - lo > 1) {
                uint64_t mid = lo + (hi - lo) / 2;
                if (ix->prefix[mid] + mid * eos <= o)
                        lo = mid;
                else
                        hi = mid;
        }
        return lo;
}

/* Mutex held: plans row j (global row g) into v[*m..); h (or NULL): where
 * the row before it ended, updated. */
static int plan_row(zr_pack *pk, uint64_t j, unsigned __int128 g, const _Atomic int *cancel,
                    piece *v, size_t *m, plan_hint *h, zr_error *err) {
        const uint64_t L = pk->p.seq_len, eos = pk->p.has_eos ? 1 : 0;
        uint64_t col = 0;
        uint32_t seg = 0;
        int r;

        if (pk->p.mode == ZR_PACK_BEST_FIT) {
                const zr_tokidx *ix = NULL;
                uint64_t c = 0, row = 0;
                r = best_fit_row(pk, g, cancel, &c, &row, &ix, err);
                if (r < 0)
                        return r;
                for (uint64_t i = ix->row_at[row]; i < ix->row_at[row + 1]; i++) {
                        const zr_tokpiece *tp = &ix->pieces[i];
                        if (col + tp->count > L)
                                return zr_error_set(err, ZR_E_CORRUPT, "the index of cycle %"
                                                    PRIu64 " overfills row %" PRIu64, c, row);
                        v[(*m)++] = (piece){ .idx = doc_of(pk, c, tp->q), .at = j * L + col,
                                             .start = tp->start, .count = tp->count,
                                             .seg = ++seg };
                        col += tp->count;
                }
                if (col < L)
                        v[(*m)++] = (piece){ .idx = UINT64_MAX, .at = j * L + col,
                                             .count = (uint32_t)(L - col) };
                return 0;
        }
        unsigned __int128 t = g * L;
        while (col < L) {
                unsigned __int128 c128 = t / pk->cycle_tokens;
                uint64_t o = (uint64_t)(t % pk->cycle_tokens), c, lo, hi;
                const zr_tokidx *ix;
                if (c128 > UINT64_MAX)
                        return zr_error_set(err, ZR_E_SAMPLER, "the packed stream's domain is "
                                            "used up");
                c = (uint64_t)c128;
                r = cycle_index(pk, ZR_TOKIDX_CONCAT, c, cancel, &ix, err);
                if (r < 0)
                        return r;
                /* the last position whose document starts at or before o */
                if (h && h->ok && h->c == c && h->q < pk->n &&
                    ix->prefix[h->q] + h->q * eos <= o) {
                        lo = doc_at(pk, ix, h->q, o);
                } else {
                        lo = 0;
                        hi = pk->n;
                        while (hi - lo > 1) {
                                uint64_t mid = lo + (hi - lo) / 2;
                                if (ix->prefix[mid] + mid * eos <= o)
                                        lo = mid;
                                else
                                        hi = mid;
                        }
                }
                size_t first = *m;
                uint64_t q;
                if (h) {
                        /* the pieces join the pending run if they are of its
                         * cycle and after it */
                        if (h->run && (h->run_c != c || (*m > h->first && v[*m - 1].idx > lo)))
                                plan_flush(pk, h, v, *m);
                        if (!h->run) {
                                h->run = true;
                                h->run_c = c;
                                h->first = *m;
                        }
                }
                for (q = lo; q < pk->n && col < L; q++) {
                        uint64_t begin = ix->prefix[q] + q * eos;
                        uint64_t len = ix->prefix[q + 1] - ix->prefix[q] + eos;
                        uint64_t off = o - begin, take = len - off;
                        if (take > L - col)
                                take = L - col;
                        if (take > 0)   /* .idx: the position, its document drawn below */
                                v[(*m)++] = (piece){ .idx = q, .at = j * L + col,
                                                     .start = (uint32_t)off,
                                                     .count = (uint32_t)take, .seg = ++seg };
                        col += take;
                        o += take;
                        t += take;
                }
                if (h) {
                        h->ok = true;
                        h->c = c;
                        h->q = q > lo ? q - 1 : lo;
                } else {
                        docs_of(pk, c, v + first, *m - first);
                }
        }
        return 0;
}

static void put_token(uint8_t *dst, int64_t v, uint64_t item) {
        memcpy(dst, &v, item); /* little-endian: the low bytes (checked: fits) */
}

/* Writes the chunk's segment ids, positions, padding and end-of-document
 * tokens, and reads its pieces. */
/* Whether the shape header `h` of record idx says one dimension of len tokens
 * (a store of any ndim per record may hold others: those are no documents). */
static int header_check(const uint64_t *h, uint64_t idx, uint64_t len, zr_error *err) {
        if (h[0] != 1 || h[1] != len)
                return zr_error_set(err, ZR_E_SCHEMA, "record %" PRIu64 " is not a document of "
                                    "one dimension (its header says ndim %" PRIu64 "%s): a "
                                    "packed stream's records are token ids, one dimension each",
                                    idx, h[0], h[0] == 1 ? " and another length" : "");
        return 0;
}

/* A piece's segment ids (s each) and positions (0, 1, ...; 0 each for
 * padding, s == 0), eight of each a step: the scalar loop kept a
 * conditional move and a store of each per token (31 % of a (64, 4096)
 * fill's samples). */
typedef int32_t run4 __attribute__((vector_size(16)));

static void write_run(int32_t *restrict seg, int32_t *restrict pos, int32_t s, uint32_t count) {
        uint32_t k = 0;

        if (s == 0) {
                memset(seg, 0, (size_t)count * sizeof(*seg));
                memset(pos, 0, (size_t)count * sizeof(*pos));
                return;
        }
        /* 16-byte vectors: the baseline's registers, none kept on the stack */
        const run4 sv = { s, s, s, s }, eight = { 8, 8, 8, 8 };
        run4 lo = { 0, 1, 2, 3 }, hi = { 4, 5, 6, 7 };
        for (; k + 8 <= count; k += 8) {
                memcpy(seg + k, &sv, sizeof(sv));
                memcpy(seg + k + 4, &sv, sizeof(sv));
                memcpy(pos + k, &lo, sizeof(lo));
                memcpy(pos + k + 4, &hi, sizeof(hi));
                lo += eight;
                hi += eight;
        }
        for (; k < count; k++) {
                seg[k] = s;
                pos[k] = (int32_t)k;
        }
}

static int read_chunk(zr_pack *pk, uint64_t B, const piece *v, size_t m, uint8_t *dst,
                      uint64_t *idxs, zr_loc *locs, void **dsts, uint64_t *hdrs,
                      uint8_t **scratch, zr_error *err) {
        const uint64_t L = pk->p.seq_len, item = pk->item;
        uint64_t soff, poff;
        int32_t *seg, *pos;
        size_t nd = 0, nr = 0, nh = 0;
        uint64_t *hlen = hdrs + 2 * m; /* each header read's document length, then its record */
        int r;

        zr_pack_region_bytes(B, L, item, &soff, &poff);
        seg = (int32_t *)(dst + soff);
        pos = (int32_t *)(dst + poff);
        for (size_t i = 0; i < m; i++) {
                const piece *p = &v[i];
                if (p->idx == UINT64_MAX) {
                        for (uint32_t k = 0; k < p->count; k++)
                                put_token(dst + (p->at + k) * item, pk->p.pad_id, item);
                        continue;
                }
                idxs[nd++] = p->idx;
        }
        r = zr_store_locate(pk->store, idxs, nd, locs, err);
        if (r < 0)
                return r;
        nd = 0;
        for (size_t i = 0; i < m; i++) {
                const piece *p = &v[i];
                zr_loc l;
                uint64_t len, end;
                if (p->idx == UINT64_MAX)
                        continue;
                l = locs[nd++];
                if (l.logic_length < pk->hdr || (l.logic_length - pk->hdr) % item)
                        return zr_error_set(err, ZR_E_CORRUPT, "record %" PRIu64 " is no "
                                            "document of whole tokens", p->idx);
                len = (l.logic_length - pk->hdr) / item;
                end = (uint64_t)p->start + p->count;
                if (end > len + (pk->p.has_eos ? 1 : 0))
                        return zr_error_set(err, ZR_E_CORRUPT, "record %" PRIu64 " holds %" PRIu64
                                            " tokens, its index said more: the store changed",
                                            p->idx, len);
                if (end > len) {
                        put_token(dst + (p->at + p->count - 1) * item, pk->p.eos_id, item);
                        end = len;
                }
                if (p->start >= end)
                        continue;
                if (pk->raw) {
                        if (pk->hdr) {
                                /* its record's header, read beside it and checked */
                                zr_loc hl = l;
                                hl.phys_length = hl.logic_length = (uint32_t)pk->hdr;
                                locs[m + nh] = hl;
                                dsts[m + nh] = &hdrs[2 * nh];
                                hlen[2 * nh] = len;
                                hlen[2 * nh + 1] = p->idx;
                                nh++;
                        }
                        /* the piece's bytes alone, as a record of their own */
                        l.offset += (uint32_t)(pk->hdr + p->start * item);
                        l.phys_length = l.logic_length = (uint32_t)((end - p->start) * item);
                        locs[nr] = l;
                        dsts[nr++] = dst + p->at * item;
                        continue;
                }
                /* compressed: the whole document, decoded into the scratch */
                if (!*scratch && !(*scratch = malloc(pk->hdr + pk->max_len * item + 1)))
                        return zr_error_errno(err, ENOMEM, "a document's scratch");
                void *d = *scratch;
                if ((uint64_t)l.logic_length > pk->hdr + pk->max_len * item)
                        return zr_error_set(err, ZR_E_CORRUPT, "record %" PRIu64 " is longer "
                                            "than its index said", p->idx);
                r = zr_store_gather_locs(pk->store, &l, 1, &d, err);
                if (r < 0)
                        return r;
                if (pk->hdr) {
                        uint64_t h[2];
                        memcpy(h, *scratch, sizeof(h));
                        if ((r = header_check(h, p->idx, len, err)) < 0)
                                return r;
                }
                memcpy(dst + p->at * item, *scratch + pk->hdr + p->start * item,
                       (end - p->start) * item);
        }
        /* the pieces' first lines and their records' headers asked for now,
         * and the segment ids and positions written while they come: the
         * gather then finds them at hand (a piece's first load, a miss of the
         * cache and of the TLB, was 60 % of its copy's time), where a
         * prefetch a few pieces ahead within the copy came too late. Not
         * while the pack reads ahead (its store's pages are not all in the
         * page cache: a prefetch of a page not mapped stalls as a load) */
        if (pk->raw && atomic_load(&pk->ahead) == 0) {
                zr_store_prefetch_locs(pk->store, locs, nr);
                zr_store_prefetch_locs(pk->store, locs + m, nh);
        }
        for (size_t i = 0; i < m; i++)
                write_run(seg + v[i].at, pos + v[i].at, (int32_t)v[i].seg, v[i].count);
        /* the pieces, then their headers (placed after them in the tables) */
        if (nh) {
                memmove(locs + nr, locs + m, nh * sizeof(*locs));
                memmove(dsts + nr, dsts + m, nh * sizeof(*dsts));
        }
        if (nr + nh && (r = zr_store_gather_locs(pk->store, locs, nr + nh, dsts, err)) < 0)
                return r;
        for (size_t i = 0; i < nh; i++)
                if ((r = header_check(&hdrs[2 * i], hlen[2 * i + 1], hlen[2 * i], err)) < 0)
                        return r;
        return 0;
}

/* Fills rows of a region of `B` rows: row at[i] (i itself without `at`) with
 * global row g0 + i (rows[i] with `rows`), for i < n. */
static int fill_rows(zr_pack *pk, uint64_t B, size_t n, unsigned __int128 g0, const uint64_t *rows,
                     const uint32_t *at, uint8_t *dst, const _Atomic int *cancel,
                     uint64_t *ret_pieces, zr_error *err) {
        const uint64_t L = pk->p.seq_len;
        size_t cap = (size_t)chunk_pieces(L), m;
        piece *v = malloc(cap * sizeof(*v));
        uint64_t *idxs = malloc(cap * sizeof(*idxs));
        zr_loc *locs = malloc(2 * cap * sizeof(*locs));
        void **dsts = malloc(2 * cap * sizeof(*dsts));
        uint64_t *hdrs = malloc(4 * cap * sizeof(*hdrs));
        uint8_t *scratch = NULL;
        uint64_t pieces = 0;
        plan_hint hint = { .ok = false };
        int r = 0;

        if (!v || !idxs || !locs || !dsts || !hdrs) {
                r = zr_error_errno(err, ENOMEM, "a packed fill's tables");
                goto out;
        }
        for (size_t i = 0; i < n && r == 0;) {
                if (cancel && atomic_load(cancel)) {
                        r = zr_error_set(err, ECANCELED, "cancelled: the loader closed");
                        break;
                }
                m = 0;
                pthread_mutex_lock(&pk->mu);
                for (; i < n && m + L + 2 <= cap; i++) {
                        r = plan_row(pk, at ? at[i] : i, rows ? rows[i] : g0 + i, cancel, v, &m,
                                     &hint, err);
                        if (r < 0)
                                break;
                }
                pthread_mutex_unlock(&pk->mu);
                plan_flush(pk, &hint, v, m);
                if (r == 0)
                        r = read_chunk(pk, B, v, m, dst, idxs, locs, dsts, hdrs, &scratch, err);
                pieces += m;
        }
out:
        free(v);
        free(idxs);
        free(locs);
        free(dsts);
        free(hdrs);
        free(scratch);
        *ret_pieces += pieces;
        return r;
}

/* Asks the kernel to read the pieces of `steps` steps from `step` into the
 * page cache (WILLNEED), without waiting: rows planned from the indexes the
 * pack holds (a row whose cycle's index it lacks ends the hints), each piece's
 * bytes (a compressed store's whole record) as ranges of the chunk files,
 * merged. Best effort: any failure only ends the hints. Its tables are a
 * fill's, and it runs after the fill freed its own. */
static void read_ahead(zr_pack *pk, uint64_t step, uint64_t steps) {
        const uint64_t L = pk->p.seq_len;
        size_t cap = (size_t)chunk_pieces(L), m, nd, nr;
        piece *v = malloc(cap * sizeof(*v));
        uint64_t *idxs = malloc(cap * sizeof(*idxs));
        zr_loc *locs = malloc(cap * sizeof(*locs));
        zr_io_range *rg = malloc(cap * sizeof(*rg));
        uint64_t rows = steps * pk->B, i = 0;
        unsigned __int128 g0 = ((unsigned __int128)step * pk->W + pk->rank) * pk->B;
        plan_hint hint = { .ok = false };
        zr_error err = {0};
        int r = 0;

        if (!v || !idxs || !locs || !rg || step > UINT64_MAX - steps)
                goto out;
        while (i < rows && r == 0) {
                m = nd = 0;
                pthread_mutex_lock(&pk->mu);
                pk->held_only = 1;
                for (; i < rows && m + L + 2 <= cap; i++) {
                        /* rows of the hinted steps: B of each step, from its first */
                        unsigned __int128 g = g0 + (unsigned __int128)(i / pk->B) * pk->W * pk->B +
                                              i % pk->B;
                        if ((r = plan_row(pk, 0, g, NULL, v, &m, &hint, &err)) < 0)
                                break;
                }
                pk->held_only = 0;
                pthread_mutex_unlock(&pk->mu);
                plan_flush(pk, &hint, v, m);
                for (size_t k = 0; k < m; k++)
                        if (v[k].idx != UINT64_MAX)
                                idxs[nd++] = v[k].idx;
                if (nd == 0 || zr_store_locate(pk->store, idxs, nd, locs, NULL) < 0)
                        break;
                nd = 0;
                for (size_t k = 0; k < m; k++) {
                        zr_loc *l;
                        if (v[k].idx == UINT64_MAX)
                                continue;
                        l = &locs[nd++];
                        if (pk->raw && l->logic_length >= pk->hdr + ((uint64_t)v[k].start + 1) * pk->item) {
                                /* the piece's bytes (its end-of-document token has none) */
                                uint64_t left = l->logic_length - pk->hdr - v[k].start * pk->item;
                                uint64_t want = (uint64_t)v[k].count * pk->item;
                                l->offset += (uint32_t)(pk->hdr + v[k].start * pk->item);
                                l->phys_length = l->logic_length =
                                        (uint32_t)(want < left ? want : left);
                        }
                }
                if (zr_store_io_ranges(pk->store, locs, nd, rg, &nr, NULL) < 0)
                        break;
                nr = zr_io_ranges_merge(rg, nr);
                (void)zr_io_willneed(rg, nr);
        }
out:
        free(v);
        free(idxs);
        free(locs);
        free(rg);
}

static long major_faults(void) {
        struct rusage ru;
        return getrusage(RUSAGE_SELF, &ru) == 0 ? ru.ru_majflt : 0;
}

int zr_pack_fill(zr_pack *pk, uint64_t step, uint8_t *dst, const _Atomic int *cancel,
                 uint64_t *ret_bytes, uint64_t *ret_pieces, zr_error *err) {
        unsigned __int128 g0 = ((unsigned __int128)step * pk->W + pk->rank) * pk->B;
        long faults;
        int r, was;

        *ret_pieces = 0;
        *ret_bytes = zr_pack_region_bytes(pk->B, pk->p.seq_len, pk->item, NULL, NULL);
        r = fill_rows(pk, pk->B, (size_t)pk->B, g0, NULL, NULL, dst, cancel, ret_pieces, err);
        if (r < 0)
                return r;
        /* the process's faults (the gather's copies run on other threads too)
         * since the last fill of this pack ended, which covers this fill:
         * one getrusage() a fill, not two (it sums every thread's times, some
         * microseconds of a small fill) */
        faults = major_faults();
        was = atomic_load(&pk->ahead);
        if (atomic_exchange(&pk->faults, faults) != faults)
                atomic_store(&pk->ahead, PACK_AHEAD_QUIET);
        else if (was > 0)
                atomic_fetch_sub(&pk->ahead, 1);
        if (was == 0 && atomic_load(&pk->ahead) > 0)
                read_ahead(pk, step + 1, PACK_AHEAD_STEPS);
        else if (was > 0)
                read_ahead(pk, step + PACK_AHEAD_STEPS, 1);
        return 0;
}

int zr_pack_fill_rows(zr_pack *pk, uint64_t B, size_t n, const uint64_t *rows, const uint32_t *at,
                      uint8_t *dst, const _Atomic int *cancel, uint64_t *ret_pieces,
                      zr_error *err) {
        return fill_rows(pk, B, n, 0, rows, at, dst, cancel, ret_pieces, err);
}

/* ---- which steps hold a document ------------------------------------------ */

/* Hits found, in ascending order, before they go to the caller: those of a
 * step go once no later hit can fall in it. */
typedef struct hitbuf {
        zr_sampler_hit *v;
        size_t n, cap;
        const zr_steps_of_ops *ops;
        bool any;
        unsigned __int128 last;  /* the last row added */
} hitbuf;

/* Hands the hits of steps below `upto` to the caller, keeps the others. */
static int hits_flush(hitbuf *b, uint64_t upto) {
        size_t k = 0;
        int r = 0;

        while (k < b->n && b->v[k].step < upto)
                k++;
        if (k == 0)
                return 0;
        r = b->ops->on_hits(b->ops->userdata, b->v, k);
        memmove(b->v, b->v + k, (b->n - k) * sizeof(*b->v));
        b->n -= k;
        return r;
}

/* Global row g holds a piece of the document (once: a row across the end of
 * a cycle may hold the document's last piece of one cycle and its first of the
 * next, which is one hit). */
static int hits_add(hitbuf *b, const zr_pack *pk, unsigned __int128 g) {
        const uint64_t G = pk->B * pk->W;
        uint64_t step = (uint64_t)(g / G);
        int r;

        if (b->any && g == b->last)
                return 0;
        b->any = true;
        b->last = g;

        if (b->n == b->cap && b->n) {
                /* every step before this one is whole: no later row falls in it */
                if ((r = hits_flush(b, step)) != 0)
                        return r;
        }
        if (b->n == b->cap) {
                size_t cap = b->cap ? 2 * b->cap : 1024;
                zr_sampler_hit *v;

                if (b->ops->step_hits_max && b->n >= b->ops->step_hits_max)
                        return -E2BIG;
                if (!(v = realloc(b->v, cap * sizeof(*v))))
                        return -ENOMEM;
                b->v = v;
                b->cap = cap;
        }
        b->v[b->n++] = (zr_sampler_hit){ .step = step, .position = (uint64_t)(g % pk->B),
                                         .rank = (uint32_t)(g % G / pk->B) };
        return 0;
}

/* Mutex held, best_fit: the index of cycle c and its first global row. */
static int best_fit_cycle(zr_pack *pk, uint64_t c, const _Atomic int *cancel,
                          const zr_tokidx **ret_ix, unsigned __int128 *ret_first, zr_error *err) {
        unsigned builds = 0;
        int r;

        if (pk->mode != ZR_SAMPLER_SEQUENTIAL) {
                while (pk->ncum <= c + 1)
                        if ((r = cum_extend(pk, &builds, cancel, err)) < 0)
                                return r;
        }
        r = cycle_index(pk, ZR_TOKIDX_BEST_FIT, c, cancel, ret_ix, err);
        if (r < 0)
                return r;
        *ret_first = pk->mode == ZR_SAMPLER_SEQUENTIAL ? (unsigned __int128)c * (*ret_ix)->rows
                                                       : pk->cum[c];
        return 0;
}

/* Mutex held: the rows of cycle c that hold a piece of the document at
 * position q of its order, those in [g0, g1) into b; *ret_end: the cycle's
 * end, in rows of the stream. */
static int cycle_hits(zr_pack *pk, uint64_t c, uint64_t q, unsigned __int128 g0,
                      unsigned __int128 g1, hitbuf *b, const _Atomic int *cancel,
                      unsigned __int128 *ret_end, zr_error *err) {
        const uint64_t L = pk->p.seq_len, eos = pk->p.has_eos ? 1 : 0;
        const zr_tokidx *ix;
        int r;

        if (pk->p.mode == ZR_PACK_BEST_FIT) {
                unsigned __int128 first;
                uint64_t w0 = q / pk->p.window * pk->p.window, lo, hi, a, z;

                if ((r = best_fit_cycle(pk, c, cancel, &ix, &first, err)) < 0)
                        return r;
                /* the window's rows: every row's pieces are of one window, and
                 * the windows' rows come in their order */
                for (lo = 0, hi = ix->rows; lo < hi;) {
                        uint64_t mid = lo + (hi - lo) / 2;
                        if (ix->pieces[ix->row_at[mid]].q < w0)
                                lo = mid + 1;
                        else
                                hi = mid;
                }
                a = lo;
                for (hi = ix->rows; lo < hi;) {
                        uint64_t mid = lo + (hi - lo) / 2;
                        if (ix->pieces[ix->row_at[mid]].q - w0 < pk->p.window)
                                lo = mid + 1;
                        else
                                hi = mid;
                }
                z = lo;
                for (uint64_t row = a; row < z; row++)
                        for (uint64_t i = ix->row_at[row]; i < ix->row_at[row + 1]; i++) {
                                unsigned __int128 g = first + row;
                                if (ix->pieces[i].q != q)
                                        continue;
                                if (g >= g0 && g < g1 && (r = hits_add(b, pk, g)) != 0)
                                        return r;
                                break;
                        }
                *ret_end = first + ix->rows;
                return 0;
        }
        r = cycle_index(pk, ZR_TOKIDX_CONCAT, c, cancel, &ix, err);
        if (r < 0)
                return r;
        unsigned __int128 t = (unsigned __int128)c * pk->cycle_tokens + ix->prefix[q] + q * eos;
        uint64_t len = ix->prefix[q + 1] - ix->prefix[q] + eos;
        if (len > 0) {
                unsigned __int128 g = t / L, last = (t + len - 1) / L;
                if (g < g0)
                        g = g0;
                for (; g <= last && g < g1; g++)
                        if ((r = hits_add(b, pk, g)) != 0)
                                return r;
        }
        /* rows wholly before the cycle's end */
        *ret_end = (unsigned __int128)(c + 1) * pk->cycle_tokens / L;
        return 0;
}

int zr_pack_steps_of(zr_pack *pk, uint64_t record, uint64_t start, uint64_t stop,
                     uint64_t budget, uint64_t max_cycles, const zr_steps_of_ops *ops,
                     const _Atomic int *cancel, uint64_t *ret_next, zr_error *err) {
        const uint64_t G = pk->B * pk->W;
        const unsigned __int128 g0 = (unsigned __int128)start * G, g1 = (unsigned __int128)stop * G;
        hitbuf b = { .ops = ops };
        uint64_t c, cycles = 0, docs = 0;
        int r = 0;

        if (record >= pk->n)
                return zr_error_set(err, ZR_E_SAMPLER, "record %" PRIu64 " >= n = %" PRIu64
                                    ": no such record", record, pk->n);
        if (start >= stop) {
                *ret_next = stop;
                return 0;
        }
        /* the cycle of the first row */
        pthread_mutex_lock(&pk->mu);
        if (pk->p.mode == ZR_PACK_BEST_FIT) {
                const zr_tokidx *ix;
                uint64_t row;
                r = best_fit_row(pk, g0, cancel, &c, &row, &ix, err);
        } else {
                unsigned __int128 c128 = g0 * pk->p.seq_len / pk->cycle_tokens;
                c = (uint64_t)c128;
                if (c128 > UINT64_MAX)
                        r = zr_error_set(err, ZR_E_SAMPLER, "the packed stream's domain is "
                                         "used up");
        }
        pthread_mutex_unlock(&pk->mu);
        for (; r == 0; c++) {
                unsigned __int128 end, done;
                uint64_t q = zr_sampler_cycle_position(pk->mode, pk->n, pk->seed, c, record);

                if (cancel && atomic_load(cancel)) {
                        r = zr_error_set(err, ECANCELED, "cancelled: the client went");
                        break;
                }
                pthread_mutex_lock(&pk->mu);
                r = cycle_hits(pk, c, q, g0, g1, &b, cancel, &end, err);
                pthread_mutex_unlock(&pk->mu);
                if (r != 0)
                        break;
                cycles++;
                docs += pk->n;
                /* the steps whose rows all lie before the cycle's end are searched */
                done = end / G;
                if (done >= stop) {
                        *ret_next = stop;
                        r = hits_flush(&b, stop);
                        break;
                }
                if (done > start && (cycles >= max_cycles || docs >= budget)) {
                        *ret_next = (uint64_t)done;
                        r = hits_flush(&b, (uint64_t)done);
                        break;
                }
                if (c == UINT64_MAX) {
                        r = zr_error_set(err, ZR_E_SAMPLER, "the packed stream's domain is "
                                         "used up");
                        break;
                }
        }
        free(b.v);
        return r;
}

int zr_pack_params_same(const zr_pack_params *a, const zr_pack_params *b) {
        uint64_t wa = a->mode == ZR_PACK_BEST_FIT && !a->window ? ZR_PACK_WINDOW_DEFAULT : a->window;
        uint64_t wb = b->mode == ZR_PACK_BEST_FIT && !b->window ? ZR_PACK_WINDOW_DEFAULT : b->window;
        return a->mode == b->mode && a->seq_len == b->seq_len && a->has_eos == b->has_eos &&
               (!a->has_eos || a->eos_id == b->eos_id) && a->pad_id == b->pad_id &&
               (a->mode != ZR_PACK_BEST_FIT || wa == wb);
}

int zr_pack_new(const zr_pack_params *p, zr_dataset *ds, uint64_t n, uint64_t fp,
                const zr_sampler_params *sp, uint64_t first_step, zr_tokstore *ts, zr_pool *pool,
                const _Atomic int *cancel, zr_pack **ret, zr_error *err) {
        zr_pack *pk = calloc(1, sizeof(*pk));
        const zr_tokidx *ix;
        int r;

        if (!pk)
                return zr_error_errno(err, ENOMEM, "a packed stream");
        pthread_mutex_init(&pk->mu, NULL);
        pk->p = *p;
        if (pk->p.mode == ZR_PACK_BEST_FIT && pk->p.window == 0)
                pk->p.window = ZR_PACK_WINDOW_DEFAULT;
        if (pk->p.mode == ZR_PACK_CONCAT)
                pk->p.window = 0;
        if (!pk->p.has_eos)
                pk->p.eos_id = 0;
        pk->ds = ds;
        pk->store = zr_dataset_store(ds);
        pk->raw = zr_dataset_schema(ds)->codec == ZR_CODEC_RAW;
        pk->mode = sp->mode;
        pk->n = n;
        pk->fp = fp;
        pk->seed = sp->seed;
        pk->B = sp->batch_size;
        pk->W = sp->world_size;
        pk->rank = sp->rank;
        pk->item = zr_dataset_schema(ds)->dtype.itemsize;
        pk->hdr = zr_tokidx_header_bytes(ds);
        pk->ts = ts;
        pk->pool = pool;
        pk->shards = (unsigned)zr_pool_shards(pool, SIZE_MAX);
        pk->total = UINT64_MAX;
        atomic_init(&pk->faults, major_faults());
        if (n == 0) {
                r = zr_error_set(err, ZR_E_SAMPLER, "the store holds no document to pack");
                goto fail;
        }
        /* cycle 0's concat index: the totals every cycle shares */
        pthread_mutex_lock(&pk->mu);
        r = cycle_index(pk, ZR_TOKIDX_CONCAT, 0, cancel, &ix, err);
        if (r == 0) {
                pk->total = ix->total;
                pk->max_len = ix->max_len;
                pk->cycle_tokens = (unsigned __int128)ix->total + (p->has_eos ? n : 0);
        }
        pthread_mutex_unlock(&pk->mu);
        if (r < 0)
                goto fail;
        if (pk->cycle_tokens == 0) {
                r = zr_error_set(err, ZR_E_SAMPLER, "the store's %" PRIu64 " documents hold no "
                                 "token (and no eos_id was given): nothing to pack", n);
                goto fail;
        }
        if (pk->p.mode == ZR_PACK_BEST_FIT) {
                pk->cum = calloc(PACK_BEST_FIT_CYCLES_MAX + 1, sizeof(*pk->cum));
                if (!pk->cum) {
                        r = zr_error_errno(err, ENOMEM, "a packed stream");
                        goto fail;
                }
                pk->ncum = 1;
        }
        /* the first batch's first row: its index is then ready (and a bad
         * parameter fails the open, not the first fill) */
        {
                piece *v = malloc(chunk_pieces(pk->p.seq_len) * sizeof(*v));
                size_t m = 0;
                unsigned __int128 g = ((unsigned __int128)first_step * pk->W + pk->rank) * pk->B;
                if (!v) {
                        r = zr_error_errno(err, ENOMEM, "a packed stream");
                        goto fail;
                }
                pthread_mutex_lock(&pk->mu);
                r = plan_row(pk, 0, g, cancel, v, &m, NULL, err);
                pthread_mutex_unlock(&pk->mu);
                free(v);
                if (r < 0)
                        goto fail;
        }
        *ret = pk;
        return 0;
fail:
        zr_pack_free(pk);
        return r;
}

zr_pack *zr_pack_free(zr_pack *pk) {
        if (!pk)
                return NULL;
        for (int i = 0; i < PACK_HELD; i++)
                zr_tokidx_free(pk->held[i].ix);
        free(pk->cum);
        pthread_mutex_destroy(&pk->mu);
        free(pk);
        return NULL;
}

int zr_pack_same(const zr_pack *a, const zr_pack *b) {
        if (!a || !b)
                return a == b;
        return a->p.mode == b->p.mode && a->p.seq_len == b->p.seq_len &&
               a->p.has_eos == b->p.has_eos && a->p.eos_id == b->p.eos_id &&
               a->p.pad_id == b->p.pad_id && a->p.window == b->p.window;
}
