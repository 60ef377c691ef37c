/* test-pack.c: packed token sequences (daemon/loader/pack.h, tokindex.h)
 * against a reference written here from proto/SAMPLERS.md ("Packed token
 * sequences"): concat as one loop over the cycles' stream of tokens cut into
 * rows, best_fit as the documented best fit decreasing, window by window.
 * Rows are compared whole (tokens, segment ids, positions, padding), through
 * the public interface only: zr_pack_new() over a small ragged store made in
 * a scratch directory, zr_pack_fill() / zr_pack_fill_rows() into a region,
 * zr_tokidx_get() for the indexes. Token k of document d is 1000·d + k + 1,
 * so every token says where it came from; eos_id and pad_id are tokens of no
 * document (negative, but for an unsigned dtype). */
#include <check.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dataset/dataset.h"
#include "dataset/fingerprint.h"
#include "dataset/ragged.h"
#include "loader/pack.h"
#include "loader/tokindex.h"
#include "sampler/sampler.h"
#include "util/pool.h"
#include "check-run.h"
#include "files.h"

#define EOS (-5)
#define PAD (-9)

static int64_t tok(uint64_t doc, uint64_t k) {
        return 1000 * (int64_t)doc + (int64_t)k + 1;
}

/* ---- a store of documents ------------------------------------------------ */

typedef struct corpus {
        tl_scratch s;
        zr_pool *pool;
        zr_dataset *ds;
        zr_tokstore *ts;
        uint64_t n, fp, item;
        uint64_t *lens;  /* tokens of each document */
} corpus;

/* A ragged store of one dimension, dtype `dtype`, documents of lens[0..n). */
static void corpus_new(corpus *c, const char *dtype, const uint64_t *lens, uint64_t n,
                       enum zr_codec codec) {
        zr_schema sc;
        zr_error err = {0};
        uint64_t *rl = calloc(n, sizeof(*rl)), total = 0, at = 0;
        uint8_t *data;
        int fd;

        memset(c, 0, sizeof(*c));
        ck_assert_int_eq(tl_scratch_new(&c->s, "pack"), 0);
        ck_assert_int_eq(zr_pool_new(2, &c->pool), 0);
        ck_assert_int_eq(zr_tokstore_open(NULL, 0, &c->ts, NULL, 0), 0);
        ck_assert_int_eq(zr_schema_init_ragged(&sc, dtype, 1, codec, &err), 0);
        c->item = sc.dtype.itemsize;
        c->n = n;
        c->lens = calloc(n, sizeof(*c->lens));
        ck_assert_ptr_nonnull(c->lens);
        ck_assert_ptr_nonnull(rl);
        memcpy(c->lens, lens, n * sizeof(*lens));
        for (uint64_t i = 0; i < n; i++) {
                rl[i] = zr_ragged_header_bytes(1) + lens[i] * c->item;
                total += rl[i];
        }
        data = calloc(1, total + 1);
        ck_assert_ptr_nonnull(data);
        for (uint64_t i = 0; i < n; i++) {
                zr_ragged_header_write(data + at, &lens[i], 1);
                at += zr_ragged_header_bytes(1);
                for (uint64_t k = 0; k < lens[i]; k++, at += c->item) {
                        int64_t v = tok(i, k);
                        memcpy(data + at, &v, c->item); /* little-endian: the low bytes */
                }
        }
        ck_assert_int_eq(mkdirat(c->s.fd, "docs", 0755), 0);
        fd = openat(c->s.fd, "docs", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        ck_assert_int_ge(fd, 0);
        zr_store_options o = { .pool = c->pool, .chunk_log2 = 22 };
        ck_assert_msg(zr_dataset_create(fd, &sc, NULL, 0, &o, &c->ds, &err) == 0, "%s",
                      err.message);
        zr_batch b = { .dtype = dtype, .data = data, .data_len = total, .lens = rl,
                       .nrecords = n };
        ck_assert_msg(zr_dataset_append(c->ds, &b, NULL, &err) == 0, "%s", err.message);
        ck_assert_int_eq(zr_dataset_fingerprint(c->ds, &c->fp, &err), 0);
        close(fd);
        free(data);
        free(rl);
}

static void corpus_free(corpus *c) {
        zr_error err = {0};
        zr_tokstore_free(c->ts);
        ck_assert_int_eq(zr_dataset_close(c->ds, &err), 0);
        zr_pool_free(c->pool);
        free(c->lens);
        tl_scratch_free(&c->s);
}

/* n lengths in [0, hi) from `seed`, with a few documents longer than `lng`. */
static void random_lens(uint64_t *lens, uint64_t n, uint64_t hi, uint64_t lng, uint64_t seed) {
        uint64_t z = seed * 0x9e3779b97f4a7c15ull + 1;
        for (uint64_t i = 0; i < n; i++) {
                z ^= z << 13;
                z ^= z >> 7;
                z ^= z << 17;
                lens[i] = z % hi;
                if (i % 11 == 5)
                        lens[i] = lng + z % (2 * lng + 1);
        }
}

/* ---- a loader's packing ---------------------------------------------------- */

typedef struct cfg {
        enum zr_pack_mode pm;
        enum zr_sampler_mode sm;
        uint64_t seed, L, B, W;
        int has_eos;
        int64_t eos, pad;
        uint64_t window;  /* best_fit: 0 for the default */
} cfg;

static const char *pm_name(enum zr_pack_mode m) {
        return m == ZR_PACK_CONCAT ? "concat" : "best_fit";
}

static zr_pack *pack_open(corpus *c, const cfg *k, uint32_t rank, uint64_t first_step) {
        zr_pack_params p = { .mode = k->pm, .seq_len = k->L, .has_eos = k->has_eos,
                             .eos_id = k->eos, .pad_id = k->pad, .window = k->window };
        zr_sampler_params sp = { .mode = k->sm, .n = c->n, .batch_size = k->B, .seed = k->seed,
                                 .step = first_step, .rank = rank,
                                 .world_size = (uint32_t)k->W };
        zr_error err = {0};
        zr_pack *pk = NULL;

        ck_assert_msg(zr_pack_check(&p, c->ds, k->sm, "tokens", &err) == 0, "%s", err.message);
        zr_dataset_lock(c->ds, false);
        int r = zr_pack_new(&p, c->ds, c->n, c->fp, &sp, first_step, c->ts, c->pool, NULL, &pk,
                            &err);
        zr_dataset_unlock(c->ds);
        ck_assert_msg(r == 0, "zr_pack_new: %d %s", r, err.message);
        return pk;
}

/* Rows as the test reads them: tokens widened to int64. */
typedef struct rows {
        uint64_t n, L;
        int64_t *tok;
        int32_t *seg, *pos;
} rows;

static void rows_init(rows *r, uint64_t n, uint64_t L) {
        r->n = n;
        r->L = L;
        r->tok = calloc(n * L + 1, sizeof(*r->tok));
        r->seg = calloc(n * L + 1, sizeof(*r->seg));
        r->pos = calloc(n * L + 1, sizeof(*r->pos));
        ck_assert(r->tok && r->seg && r->pos);
}

static void rows_free(rows *r) {
        free(r->tok);
        free(r->seg);
        free(r->pos);
}

static int64_t read_tok(const uint8_t *p, uint64_t item, int is_signed) {
        switch (item) {
        case 1: return is_signed ? (int64_t)(int8_t)p[0] : (int64_t)p[0];
        case 2: {
                uint16_t v;
                memcpy(&v, p, 2);
                return is_signed ? (int64_t)(int16_t)v : (int64_t)v;
        }
        case 4: {
                uint32_t v;
                memcpy(&v, p, 4);
                return is_signed ? (int64_t)(int32_t)v : (int64_t)v;
        }
        default: {
                int64_t v;
                memcpy(&v, p, 8);
                return v;
        }
        }
}

/* A region of B rows, every byte 0xA5 first (a byte the fill leaves shows). */
static uint8_t *region_new(const corpus *c, uint64_t B, uint64_t L, uint64_t *ret_bytes) {
        uint64_t bytes = zr_pack_region_bytes(B, L, c->item, NULL, NULL);
        uint8_t *dst = aligned_alloc(64, (bytes + 63) / 64 * 64);
        ck_assert_ptr_nonnull(dst);
        memset(dst, 0xA5, bytes);
        *ret_bytes = bytes;
        return dst;
}

/* Row i of region dst (B rows) into row `at` of r. */
static void region_row(const corpus *c, const uint8_t *dst, uint64_t B, uint64_t i, rows *r,
                       uint64_t at) {
        const uint64_t L = r->L;
        uint64_t soff, poff;
        int sgn = zr_dataset_schema(c->ds)->dtype.kind == 'i';

        zr_pack_region_bytes(B, L, c->item, &soff, &poff);
        for (uint64_t j = 0; j < L; j++) {
                r->tok[at * L + j] = read_tok(dst + (i * L + j) * c->item, c->item, sgn);
                memcpy(&r->seg[at * L + j], dst + soff + (i * L + j) * 4, 4);
                memcpy(&r->pos[at * L + j], dst + poff + (i * L + j) * 4, 4);
        }
}

/* The B rows of `step` from pk into rows at[0..B) of r. */
static void fill_step(corpus *c, zr_pack *pk, const cfg *k, uint64_t step, rows *r,
                      uint64_t at) {
        uint64_t bytes, used = 0, pieces = 0;
        uint8_t *dst = region_new(c, k->B, k->L, &bytes);
        zr_error err = {0};

        zr_dataset_lock(c->ds, false);
        int e = zr_pack_fill(pk, step, dst, NULL, &used, &pieces, &err);
        zr_dataset_unlock(c->ds);
        ck_assert_msg(e == 0, "fill of step %" PRIu64 ": %d %s", step, e, err.message);
        ck_assert_uint_eq(used, bytes);
        ck_assert_uint_gt(pieces, 0);
        for (uint64_t i = 0; i < k->B; i++)
                region_row(c, dst, k->B, i, r, at + i);
        free(dst);
}

/* ---- the reference ----------------------------------------------------------- */

/* The document at position q of cycle cy. */
static uint64_t order_at(const corpus *c, const cfg *k, uint64_t cy, uint64_t q) {
        uint64_t d;
        zr_error err = {0};
        ck_assert_int_eq(zr_sampler_cycle_fill(k->sm, c->n, k->seed, cy, q, &d, 1, &err), 0);
        ck_assert_uint_lt(d, c->n);
        return d;
}

/* Token x of document d as packed: its own, or the eos after it. */
static int64_t doc_tok(const corpus *c, const cfg *k, uint64_t d, uint64_t x) {
        return x < c->lens[d] ? tok(d, x) : k->eos;
}

static uint64_t ell(const corpus *c, const cfg *k, uint64_t d) {
        return c->lens[d] + (k->has_eos ? 1 : 0);
}

/* concat: global rows [g0, g0 + r->n) into r. The stream's tokens one by one:
 * a token starts a piece at a row's start or where the (cycle, position) it
 * comes from changes. */
static void ref_concat(const corpus *c, const cfg *k, uint64_t g0, rows *r) {
        const uint64_t L = k->L, from = g0 * L, to = (g0 + r->n) * L;
        uint64_t t = 0, prev = UINT64_MAX;
        int32_t seg = 0, start = 0;

        for (uint64_t cy = 0; t < to; cy++) {
                for (uint64_t q = 0; q < c->n && t < to; q++) {
                        uint64_t d = order_at(c, k, cy, q), id = cy * c->n + q;
                        for (uint64_t x = 0; x < ell(c, k, d) && t < to; x++, t++) {
                                uint64_t j = t % L;
                                if (t < from) {
                                        prev = id;
                                        continue;
                                }
                                if (j == 0 || id != prev) {
                                        seg = j == 0 ? 1 : seg + 1;
                                        start = (int32_t)j;
                                }
                                prev = id;
                                r->tok[t - from] = doc_tok(c, k, d, x);
                                r->seg[t - from] = seg;
                                r->pos[t - from] = (int32_t)j - start;
                        }
                }
                ck_assert_msg(cy < 100000, "the corpus holds no token");
        }
}

/* best_fit: a cycle's rows, each a list of pieces. */
typedef struct bpiece {
        uint64_t q, start, count;
} bpiece;

typedef struct bcycle {
        uint64_t nrows, npieces, cap;
        uint64_t *row_at;  /* nrows + 1 */
        bpiece *pieces;
} bcycle;

static void bc_piece(bcycle *b, bpiece p) {
        if (b->npieces == b->cap) {
                b->cap = b->cap ? 2 * b->cap : 64;
                b->pieces = realloc(b->pieces, b->cap * sizeof(*b->pieces));
                ck_assert_ptr_nonnull(b->pieces);
        }
        b->pieces[b->npieces++] = p;
}

static void bc_row_end(bcycle *b) {
        b->row_at = realloc(b->row_at, (b->nrows + 2) * sizeof(*b->row_at));
        ck_assert_ptr_nonnull(b->row_at);
        b->row_at[++b->nrows] = b->npieces;
}

/* Cycle cy packed by best fit decreasing, window by window. */
static void ref_best_fit_cycle(const corpus *c, const cfg *k, uint64_t cy, bcycle *b) {
        const uint64_t L = k->L, K = k->window ? k->window : ZR_PACK_WINDOW_DEFAULT;
        bpiece *items = calloc(K, sizeof(*items));
        /* the open rows: their room, their last placement, their pieces */
        uint64_t *room = calloc(K, sizeof(*room)), *last = calloc(K, sizeof(*last));
        bpiece *placed = calloc(K, sizeof(*placed));
        uint64_t *row_of = calloc(K, sizeof(*row_of));

        ck_assert(items && room && last && placed && row_of);
        memset(b, 0, sizeof(*b));
        b->row_at = calloc(1, sizeof(*b->row_at));
        ck_assert_ptr_nonnull(b->row_at);
        for (uint64_t w0 = 0; w0 < c->n; w0 += K) {
                uint64_t w1 = w0 + K < c->n ? w0 + K : c->n, ni = 0, nb = 0;
                /* whole rows, in order */
                for (uint64_t q = w0; q < w1; q++) {
                        uint64_t l = ell(c, k, order_at(c, k, cy, q));
                        for (uint64_t f = 0; f < l / L; f++) {
                                bc_piece(b, (bpiece){ q, f * L, L });
                                bc_row_end(b);
                        }
                        if (l % L)
                                items[ni++] = (bpiece){ q, l / L * L, l % L };
                }
                /* longest first, equal lengths by position (insertion: stable) */
                for (uint64_t i = 1; i < ni; i++) {
                        bpiece x = items[i];
                        uint64_t j = i;
                        for (; j > 0 && items[j - 1].count < x.count; j--)
                                items[j] = items[j - 1];
                        items[j] = x;
                }
                /* each into the open row with the least room that holds it, the
                 * one placed into last among equals, or a new row */
                for (uint64_t i = 0; i < ni; i++) {
                        uint64_t best = UINT64_MAX;
                        for (uint64_t x = 0; x < nb; x++)
                                if (room[x] >= items[i].count &&
                                    (best == UINT64_MAX || room[x] < room[best] ||
                                     (room[x] == room[best] && last[x] > last[best])))
                                        best = x;
                        if (best == UINT64_MAX) {
                                best = nb++;
                                room[best] = L;
                        }
                        room[best] -= items[i].count;
                        last[best] = i;
                        placed[i] = items[i];
                        row_of[i] = best;
                }
                /* the packed rows in the order opened, pieces in the order placed */
                for (uint64_t x = 0; x < nb; x++) {
                        for (uint64_t i = 0; i < ni; i++)
                                if (row_of[i] == x)
                                        bc_piece(b, placed[i]);
                        bc_row_end(b);
                }
        }
        free(items);
        free(room);
        free(last);
        free(placed);
        free(row_of);
}

static void bc_free(bcycle *b) {
        free(b->row_at);
        free(b->pieces);
}

/* best_fit: global rows [g0, g0 + r->n) into r. */
static void ref_best_fit(const corpus *c, const cfg *k, uint64_t g0, rows *r) {
        const uint64_t L = k->L;
        uint64_t first = 0; /* the cycle's first global row */

        for (uint64_t cy = 0, i = 0; i < r->n; cy++) {
                bcycle b;
                ref_best_fit_cycle(c, k, cy, &b);
                for (; i < r->n && g0 + i < first + b.nrows; i++) {
                        uint64_t row = g0 + i - first, j = 0;
                        for (uint64_t p = b.row_at[row]; p < b.row_at[row + 1]; p++) {
                                const bpiece *pc = &b.pieces[p];
                                uint64_t d = order_at(c, k, cy, pc->q);
                                for (uint64_t x = 0; x < pc->count; x++, j++) {
                                        r->tok[i * L + j] = doc_tok(c, k, d, pc->start + x);
                                        r->seg[i * L + j] = (int32_t)(p - b.row_at[row] + 1);
                                        r->pos[i * L + j] = (int32_t)x;
                                }
                        }
                        ck_assert_uint_le(j, L);
                        for (; j < L; j++) {
                                r->tok[i * L + j] = k->pad;
                                r->seg[i * L + j] = 0;
                                r->pos[i * L + j] = 0;
                        }
                }
                first += b.nrows;
                bc_free(&b);
                ck_assert_msg(cy < 100000, "the corpus holds no token");
        }
}

static void ref_rows(const corpus *c, const cfg *k, uint64_t g0, rows *r) {
        if (k->pm == ZR_PACK_CONCAT)
                ref_concat(c, k, g0, r);
        else
                ref_best_fit(c, k, g0, r);
}

/* Row i of got equals row j of want, token by token. */
static void row_eq(const rows *got, uint64_t i, const rows *want, uint64_t j, const char *what) {
        const uint64_t L = got->L;
        for (uint64_t x = 0; x < L; x++) {
                uint64_t a = i * L + x, b = j * L + x;
                ck_assert_msg(got->tok[a] == want->tok[b] && got->seg[a] == want->seg[b] &&
                              got->pos[a] == want->pos[b],
                              "%s: row %" PRIu64 " column %" PRIu64 ": token %" PRId64
                              " segment %d position %d, want %" PRId64 " %d %d", what, i, x,
                              got->tok[a], got->seg[a], got->pos[a], want->tok[b], want->seg[b],
                              want->pos[b]);
        }
}

static void rows_eq(const rows *got, const rows *want, const char *what) {
        ck_assert_uint_eq(got->n, want->n);
        for (uint64_t i = 0; i < got->n; i++)
                row_eq(got, i, want, i, what);
}

/* Steps [0, steps) of every rank of k against the reference: rank r's row j
 * of step s is global row (s·W + r)·B + j. */
static void check_against_reference(corpus *c, const cfg *k, uint64_t steps, const char *what) {
        rows got, want;
        rows_init(&got, k->B, k->L);
        rows_init(&want, steps * k->W * k->B, k->L);
        ref_rows(c, k, 0, &want);
        for (uint32_t rank = 0; rank < k->W; rank++) {
                zr_pack *pk = pack_open(c, k, rank, 0);
                for (uint64_t s = 0; s < steps; s++) {
                        fill_step(c, pk, k, s, &got, 0);
                        for (uint64_t j = 0; j < k->B; j++) {
                                char msg[256];
                                snprintf(msg, sizeof(msg), "%s step %" PRIu64 " rank %u", what,
                                         s, rank);
                                row_eq(&got, j, &want, (s * k->W + rank) * k->B + j, msg);
                        }
                }
                zr_pack_free(pk);
        }
        rows_free(&got);
        rows_free(&want);
}

/* ---- rows written out by hand ------------------------------------------------- */

/* Expected rows, from tables of tokens (T(d, k): token k of document d),
 * segment ids and positions. */
static void want_rows(rows *r, const int64_t *tk, const int32_t *sg, const int32_t *ps) {
        memcpy(r->tok, tk, r->n * r->L * sizeof(*tk));
        memcpy(r->seg, sg, r->n * r->L * sizeof(*sg));
        memcpy(r->pos, ps, r->n * r->L * sizeof(*ps));
}

#define T(d, k) (1000 * (d) + (k) + 1)

/* Steps [0, steps) of rank 0 of k, filled in order by one pack, are the rows
 * tk, sg, ps (steps × B of them); with_ref: and the reference agrees. */
static void expect_rows(corpus *c, const cfg *k, uint64_t steps, const int64_t *tk,
                        const int32_t *sg, const int32_t *ps, int with_ref, const char *what) {
        rows got, want;
        char msg[160];

        rows_init(&got, steps * k->B, k->L);
        rows_init(&want, steps * k->B, k->L);
        want_rows(&want, tk, sg, ps);
        zr_pack *pk = pack_open(c, k, 0, 0);
        for (uint64_t s = 0; s < steps; s++)
                fill_step(c, pk, k, s, &got, s * k->B);
        zr_pack_free(pk);
        rows_eq(&got, &want, what);
        if (with_ref) {
                snprintf(msg, sizeof(msg), "the reference, %s", what);
                ref_rows(c, k, 0, &got);
                rows_eq(&got, &want, msg);
        }
        rows_free(&got);
        rows_free(&want);
}

/* Documents of 3, 5 and 2 tokens, each with its eos, rows of 4: the first
 * document and its eos fill a row exactly; the second spans two rows; the
 * third's eos starts a row alone, the next cycle's first document after it. */
START_TEST(test_concat_by_hand) {
        const uint64_t lens[] = { 3, 5, 2 };
        const cfg k = { .pm = ZR_PACK_CONCAT, .sm = ZR_SAMPLER_SEQUENTIAL, .L = 4, .B = 2, .W = 1,
                        .has_eos = 1, .eos = EOS };
        const int64_t tk[] = {
                T(0, 0), T(0, 1), T(0, 2), EOS,
                T(1, 0), T(1, 1), T(1, 2), T(1, 3),
                T(1, 4), EOS, T(2, 0), T(2, 1),
                EOS, T(0, 0), T(0, 1), T(0, 2),
        };
        const int32_t sg[] = { 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 1, 2, 2, 2 };
        const int32_t ps[] = { 0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 0, 1, 0, 0, 1, 2 };
        corpus c;

        corpus_new(&c, "<i4", lens, 3, ZR_CODEC_RAW);
        expect_rows(&c, &k, 2, tk, sg, ps, 1, "by hand");
        corpus_free(&c);
}
END_TEST

/* One document of 3 tokens, no eos, rows of 4: the cycles follow one another,
 * and the next cycle's copy of the same document is a piece of its own. A
 * document of 10 tokens in rows of 4 spans three rows, each from position 0. */
START_TEST(test_concat_cycles_and_long_documents) {
        const uint64_t one[] = { 3 }, lng[] = { 10 };
        const cfg k = { .pm = ZR_PACK_CONCAT, .sm = ZR_SAMPLER_SEQUENTIAL, .L = 4, .B = 3, .W = 1 };
        const int64_t tk1[] = {
                T(0, 0), T(0, 1), T(0, 2), T(0, 0),
                T(0, 1), T(0, 2), T(0, 0), T(0, 1),
                T(0, 2), T(0, 0), T(0, 1), T(0, 2),
        };
        const int32_t sg1[] = { 1, 1, 1, 2, 1, 1, 2, 2, 1, 2, 2, 2 };
        const int32_t ps1[] = { 0, 1, 2, 0, 0, 1, 0, 1, 0, 0, 1, 2 };
        const int64_t tk2[] = {
                T(0, 0), T(0, 1), T(0, 2), T(0, 3),
                T(0, 4), T(0, 5), T(0, 6), T(0, 7),
                T(0, 8), T(0, 9), T(0, 0), T(0, 1),
        };
        const int32_t sg2[] = { 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2 };
        const int32_t ps2[] = { 0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 0, 1 };
        corpus c;

        corpus_new(&c, "<i4", one, 1, ZR_CODEC_RAW);
        expect_rows(&c, &k, 1, tk1, sg1, ps1, 0, "one document");
        corpus_free(&c);

        corpus_new(&c, "<i4", lng, 1, ZR_CODEC_RAW);
        expect_rows(&c, &k, 1, tk2, sg2, ps2, 0, "a long document");
        corpus_free(&c);
}
END_TEST

/* Empty documents: without eos they hold no token and make no piece; with it,
 * each is its eos alone. Rows of 1: every token a row of its own. */
START_TEST(test_concat_empty_documents_and_rows_of_one) {
        const uint64_t lens[] = { 0, 2, 0, 0, 3, 0 };
        cfg k = { .pm = ZR_PACK_CONCAT, .sm = ZR_SAMPLER_SEQUENTIAL, .L = 3, .B = 2, .W = 1 };
        const int64_t tk1[] = { T(1, 0), T(1, 1), T(4, 0), T(4, 1), T(4, 2), T(1, 0) };
        const int32_t sg1[] = { 1, 1, 2, 1, 1, 2 };
        const int32_t ps1[] = { 0, 1, 0, 0, 1, 0 };
        const int64_t tk2[] = { EOS, T(1, 0), T(1, 1), EOS, EOS, EOS };
        const int32_t sg2[] = { 1, 2, 2, 1, 2, 3 };
        const int32_t ps2[] = { 0, 0, 1, 0, 0, 0 };
        corpus c;
        rows got;

        corpus_new(&c, "<i4", lens, 6, ZR_CODEC_RAW);
        expect_rows(&c, &k, 1, tk1, sg1, ps1, 0, "empty documents, no eos");
        k.has_eos = 1;
        k.eos = EOS;
        expect_rows(&c, &k, 1, tk2, sg2, ps2, 0, "empty documents with eos");

        /* rows of one token */
        k.L = 1;
        k.B = 5;
        rows_init(&got, 5, 1);
        for (uint64_t s = 0; s < 4; s++) {
                zr_pack *pk = pack_open(&c, &k, 0, s);
                fill_step(&c, pk, &k, s, &got, 0);
                for (uint64_t i = 0; i < 5; i++) {
                        /* the stream of a cycle: E, 1.0, 1.1, E, E, E, 4.0, 4.1, 4.2, E, E */
                        static const int64_t cyc[] = { EOS, T(1, 0), T(1, 1), EOS, EOS, EOS,
                                                       T(4, 0), T(4, 1), T(4, 2), EOS, EOS };
                        ck_assert_int_eq(got.tok[i], cyc[(s * 5 + i) % 11]);
                        ck_assert_int_eq(got.seg[i], 1);
                        ck_assert_int_eq(got.pos[i], 0);
                }
                zr_pack_free(pk);
        }
        rows_free(&got);
        corpus_free(&c);

        /* documents that are all empty, without eos: nothing to pack */
        const uint64_t none[] = { 0, 0 };
        corpus_new(&c, "<i4", none, 2, ZR_CODEC_RAW);
        zr_pack_params p = { .mode = ZR_PACK_CONCAT, .seq_len = 4 };
        zr_sampler_params sp = { .mode = ZR_SAMPLER_SEQUENTIAL, .n = 2, .batch_size = 1,
                                 .world_size = 1 };
        zr_error err = {0};
        zr_pack *bad = NULL;
        zr_dataset_lock(c.ds, false);
        int r = zr_pack_new(&p, c.ds, c.n, c.fp, &sp, 0, c.ts, c.pool, NULL, &bad, &err);
        zr_dataset_unlock(c.ds);
        ck_assert_int_eq(r, -ZR_E_SAMPLER);
        ck_assert_ptr_null(bad);
        corpus_free(&c);
}
END_TEST

/* best_fit by hand, rows of 8, no eos. Documents of 5, 3, 10, 6, 2, 1 tokens:
 * the 10 gives a whole row and a remainder of 2; then 6, 5, 3, 2, 2, 1 are
 * placed: 6 opens A (room 2), 5 opens B (3), 3 fills B, the remainder 2 fills
 * A, the 2 opens C, the 1 joins it. Rows: the whole one, A, B, C padded. */
START_TEST(test_best_fit_by_hand) {
        const uint64_t lens[] = { 5, 3, 10, 6, 2, 1 };
        const cfg k = { .pm = ZR_PACK_BEST_FIT, .sm = ZR_SAMPLER_SEQUENTIAL, .L = 8, .B = 4,
                        .W = 1, .pad = PAD };
        const int64_t tk[] = {
                T(2, 0), T(2, 1), T(2, 2), T(2, 3), T(2, 4), T(2, 5), T(2, 6), T(2, 7),
                T(3, 0), T(3, 1), T(3, 2), T(3, 3), T(3, 4), T(3, 5), T(2, 8), T(2, 9),
                T(0, 0), T(0, 1), T(0, 2), T(0, 3), T(0, 4), T(1, 0), T(1, 1), T(1, 2),
                T(4, 0), T(4, 1), T(5, 0), PAD, PAD, PAD, PAD, PAD,
        };
        const int32_t sg[] = {
                1, 1, 1, 1, 1, 1, 1, 1,
                1, 1, 1, 1, 1, 1, 2, 2,
                1, 1, 1, 1, 1, 2, 2, 2,
                1, 1, 2, 0, 0, 0, 0, 0,
        };
        const int32_t ps[] = {
                0, 1, 2, 3, 4, 5, 6, 7,
                0, 1, 2, 3, 4, 5, 0, 1,
                0, 1, 2, 3, 4, 0, 1, 2,
                0, 1, 0, 0, 0, 0, 0, 0,
        };
        corpus c;
        rows got, want;

        corpus_new(&c, "<i4", lens, 6, ZR_CODEC_RAW);
        expect_rows(&c, &k, 1, tk, sg, ps, 1, "by hand");
        /* the next cycle (sequential: the same rows) */
        rows_init(&got, 4, 8);
        rows_init(&want, 4, 8);
        want_rows(&want, tk, sg, ps);
        zr_pack *pk = pack_open(&c, &k, 0, 1);
        fill_step(&c, pk, &k, 1, &got, 0);
        rows_eq(&got, &want, "cycle 1");
        zr_pack_free(pk);
        rows_free(&got);
        rows_free(&want);
        corpus_free(&c);
}
END_TEST

/* best_fit's ties, rows of 10, eos: documents of 6, 6, 2, 1, 9 and 0 tokens
 * count 7, 7, 3, 2, 10 and 1. The 10 is a whole row. 7 opens A (room 3), 7
 * opens B (room 3); the 3 fits both with equal room and goes to B, placed
 * into last; the 2 then goes to A (room 1), the 1 fills A. A window of 2
 * packs (7, 7), (3, 2), (10, 1) apart. */
START_TEST(test_best_fit_ties_and_windows) {
        const uint64_t lens[] = { 6, 6, 2, 1, 9, 0 };
        cfg k = { .pm = ZR_PACK_BEST_FIT, .sm = ZR_SAMPLER_SEQUENTIAL, .L = 10, .B = 3, .W = 1,
                  .has_eos = 1, .eos = EOS };
        const int64_t tk[] = {
                T(4, 0), T(4, 1), T(4, 2), T(4, 3), T(4, 4), T(4, 5), T(4, 6), T(4, 7), T(4, 8), EOS,
                T(0, 0), T(0, 1), T(0, 2), T(0, 3), T(0, 4), T(0, 5), EOS, T(3, 0), EOS, EOS,
                T(1, 0), T(1, 1), T(1, 2), T(1, 3), T(1, 4), T(1, 5), EOS, T(2, 0), T(2, 1), EOS,
        };
        const int32_t sg[] = {
                1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
                1, 1, 1, 1, 1, 1, 1, 2, 2, 3,
                1, 1, 1, 1, 1, 1, 1, 2, 2, 2,
        };
        const int32_t ps[] = {
                0, 1, 2, 3, 4, 5, 6, 7, 8, 9,
                0, 1, 2, 3, 4, 5, 6, 0, 1, 0,
                0, 1, 2, 3, 4, 5, 6, 0, 1, 2,
        };
        /* window 2: (0, 1) two rows; (2, 3) one row; (4, 5) the whole row, then
         * the lone eos of document 5 */
        const int64_t tw[] = {
                T(0, 0), T(0, 1), T(0, 2), T(0, 3), T(0, 4), T(0, 5), EOS, 0, 0, 0,
                T(1, 0), T(1, 1), T(1, 2), T(1, 3), T(1, 4), T(1, 5), EOS, 0, 0, 0,
                T(2, 0), T(2, 1), EOS, T(3, 0), EOS, 0, 0, 0, 0, 0,
                T(4, 0), T(4, 1), T(4, 2), T(4, 3), T(4, 4), T(4, 5), T(4, 6), T(4, 7), T(4, 8), EOS,
                EOS, 0, 0, 0, 0, 0, 0, 0, 0, 0,
        };
        const int32_t sw[] = {
                1, 1, 1, 1, 1, 1, 1, 0, 0, 0,
                1, 1, 1, 1, 1, 1, 1, 0, 0, 0,
                1, 1, 1, 2, 2, 0, 0, 0, 0, 0,
                1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
                1, 0, 0, 0, 0, 0, 0, 0, 0, 0,
        };
        const int32_t pw[] = {
                0, 1, 2, 3, 4, 5, 6, 0, 0, 0,
                0, 1, 2, 3, 4, 5, 6, 0, 0, 0,
                0, 1, 2, 0, 1, 0, 0, 0, 0, 0,
                0, 1, 2, 3, 4, 5, 6, 7, 8, 9,
                0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
        };
        corpus c;

        corpus_new(&c, "<i4", lens, 6, ZR_CODEC_RAW);
        expect_rows(&c, &k, 1, tk, sg, ps, 1, "by hand");
        k.window = 2;
        k.B = 5;
        expect_rows(&c, &k, 1, tw, sw, pw, 1, "window 2");
        corpus_free(&c);
}
END_TEST

/* ---- against the reference, many ways ------------------------------------------ */

typedef struct rcase {
        enum zr_pack_mode pm;
        enum zr_sampler_mode sm;
        uint64_t L, B, W, window;
        int has_eos;
        int64_t pad;  /* and eos: EOS, or 999 for an unsigned dtype */
        const char *dtype;
        enum zr_codec codec;
} rcase;

static const rcase rcases[] = {
        { ZR_PACK_CONCAT, ZR_SAMPLER_SEQUENTIAL, 16, 3, 2, 0, 0, 0, "<i4", ZR_CODEC_RAW },
        { ZR_PACK_CONCAT, ZR_SAMPLER_SEQUENTIAL, 7, 2, 1, 0, 1, 0, "<i4", ZR_CODEC_RAW },
        { ZR_PACK_CONCAT, ZR_SAMPLER_CYCLIC, 16, 3, 2, 0, 1, 0, "<i4", ZR_CODEC_RAW },
        { ZR_PACK_CONCAT, ZR_SAMPLER_CYCLIC, 1, 4, 2, 0, 1, 0, "<i4", ZR_CODEC_RAW },
        { ZR_PACK_CONCAT, ZR_SAMPLER_CYCLIC, 37, 2, 3, 0, 0, 0, "<i4", ZR_CODEC_ZSTD },
        { ZR_PACK_CONCAT, ZR_SAMPLER_CYCLIC_LX157, 9, 3, 1, 0, 1, 0, "<u2", ZR_CODEC_RAW },
        { ZR_PACK_CONCAT, ZR_SAMPLER_CYCLIC, 5, 2, 2, 0, 1, 0, "<i8", ZR_CODEC_ZSTD },
        { ZR_PACK_BEST_FIT, ZR_SAMPLER_SEQUENTIAL, 16, 3, 2, 0, 0, PAD, "<i4", ZR_CODEC_RAW },
        { ZR_PACK_BEST_FIT, ZR_SAMPLER_SEQUENTIAL, 12, 2, 1, 5, 1, 0, "<i4", ZR_CODEC_RAW },
        { ZR_PACK_BEST_FIT, ZR_SAMPLER_CYCLIC, 16, 3, 2, 7, 1, PAD, "<i4", ZR_CODEC_RAW },
        { ZR_PACK_BEST_FIT, ZR_SAMPLER_CYCLIC, 1, 4, 1, 3, 1, PAD, "<i4", ZR_CODEC_RAW },
        { ZR_PACK_BEST_FIT, ZR_SAMPLER_CYCLIC, 24, 2, 2, 1, 0, PAD, "<i4", ZR_CODEC_ZSTD },
        { ZR_PACK_BEST_FIT, ZR_SAMPLER_CYCLIC_LX157, 10, 3, 1, 4, 1, 65535, "<u2", ZR_CODEC_RAW },
        { ZR_PACK_BEST_FIT, ZR_SAMPLER_CYCLIC, 40, 2, 2, 0, 1, PAD, "<i8", ZR_CODEC_ZSTD },
};

/* A corpus of 45 documents of 0..29 tokens and a few of L..3L, rows of many
 * steps of every rank (three cycles or more) against the reference. */
START_TEST(test_against_the_reference) {
        const rcase *rc = &rcases[_i];
        const uint64_t n = 45;
        uint64_t lens[45], tokens = 0;
        cfg k = { .pm = rc->pm, .sm = rc->sm, .seed = 11 + (uint64_t)_i, .L = rc->L, .B = rc->B,
                  .W = rc->W, .has_eos = rc->has_eos, .pad = rc->pad, .window = rc->window };
        /* a token of no document: 999 would be document 0's 999th */
        k.eos = strcmp(rc->dtype, "<u2") == 0 ? 999 : EOS;
        corpus c;
        char what[128];

        random_lens(lens, n, 30, rc->L, (uint64_t)_i + 1);
        for (uint64_t i = 0; i < n; i++)
                tokens += lens[i] + (uint64_t)rc->has_eos;
        corpus_new(&c, rc->dtype, lens, n, rc->codec);
        /* three cycles' worth of rows, at least */
        uint64_t steps = 3 * tokens / (rc->L * rc->B * rc->W) + 2;
        if (steps > 400)
                steps = 400;
        snprintf(what, sizeof(what), "case %d (%s, L %" PRIu64 ", %s)", _i, pm_name(rc->pm),
                 rc->L, rc->dtype);
        check_against_reference(&c, &k, steps, what);
        corpus_free(&c);
}
END_TEST

/* ---- purity: a step's rows whatever came before -------------------------------- */

static void check_resume(enum zr_pack_mode pm) {
        const uint64_t n = 40, steps = 24;
        uint64_t lens[40];
        cfg k = { .pm = pm, .sm = ZR_SAMPLER_CYCLIC, .seed = 5, .L = 11, .B = 3, .W = 2,
                  .has_eos = 1, .eos = EOS, .window = 6 };
        corpus c;
        rows seq, alone;
        int mid = 0;

        random_lens(lens, n, 25, k.L, 99);
        corpus_new(&c, "<i4", lens, n, ZR_CODEC_RAW);
        rows_init(&seq, steps * k.B, k.L);
        rows_init(&alone, k.B, k.L);
        /* in order, from one pack */
        zr_pack *pk = pack_open(&c, &k, 1, 0);
        for (uint64_t s = 0; s < steps; s++)
                fill_step(&c, pk, &k, s, &seq, s * k.B);
        zr_pack_free(pk);
        /* each step alone, from a pack opened at it (a resume) */
        for (uint64_t s = 0; s < steps; s++) {
                char what[64];
                snprintf(what, sizeof(what), "%s step %" PRIu64 " alone", pm_name(pm), s);
                pk = pack_open(&c, &k, 1, s);
                fill_step(&c, pk, &k, s, &alone, 0);
                for (uint64_t j = 0; j < k.B; j++)
                        row_eq(&alone, j, &seq, s * k.B + j, what);
                /* some of these rows start in the middle of a document (its
                 * token 1 or later, or its eos), at position 0 */
                for (uint64_t j = 0; j < k.B; j++)
                        mid += alone.tok[j * k.L] == EOS || (alone.tok[j * k.L] - 1) % 1000 != 0;
                zr_pack_free(pk);
        }
        /* backwards, from one pack */
        pk = pack_open(&c, &k, 1, steps - 1);
        for (uint64_t s = steps; s-- > 0;) {
                char what[64];
                snprintf(what, sizeof(what), "%s step %" PRIu64 " backwards", pm_name(pm), s);
                fill_step(&c, pk, &k, s, &alone, 0);
                for (uint64_t j = 0; j < k.B; j++)
                        row_eq(&alone, j, &seq, s * k.B + j, what);
        }
        zr_pack_free(pk);
        if (pm == ZR_PACK_CONCAT)
                ck_assert_int_gt(mid, 0);
        rows_free(&seq);
        rows_free(&alone);
        corpus_free(&c);
}

START_TEST(test_concat_resume) {
        check_resume(ZR_PACK_CONCAT);
}
END_TEST

START_TEST(test_best_fit_resume) {
        check_resume(ZR_PACK_BEST_FIT);
}
END_TEST

/* ---- ranks ------------------------------------------------------------------------ */

static int cmp_i64(const void *a, const void *b) {
        int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
        return (x > y) - (x < y);
}

/* Ranks of W, B = 12 / W each: at every step their rows are world size 1's
 * rows, rank r's at r·B; within a cycle no token is in two ranks' rows, and
 * all the ranks' tokens together are world size 1's. */
static void check_ranks(enum zr_pack_mode pm) {
        const uint64_t n = 300, G = 12, steps = 6;
        uint64_t lens[300], tokens = 0;
        corpus c;
        cfg one = { .pm = pm, .sm = ZR_SAMPLER_CYCLIC, .seed = 3, .L = 8, .B = G, .W = 1,
                    .window = 50, .pad = PAD };
        rows ref, got;

        random_lens(lens, n, 20, one.L, 7);
        for (uint64_t i = 0; i < n; i++)
                tokens += lens[i];
        corpus_new(&c, "<i4", lens, n, ZR_CODEC_RAW);
        rows_init(&ref, steps * G, one.L);
        zr_pack *pk = pack_open(&c, &one, 0, 0);
        for (uint64_t s = 0; s < steps; s++)
                fill_step(&c, pk, &one, s, &ref, s * G);
        zr_pack_free(pk);
        for (uint64_t W = 2; W <= 4; W++) {
                cfg k = one;
                k.W = W;
                k.B = G / W;
                int64_t *seen = calloc(steps * G * k.L, sizeof(*seen)), *all;
                uint64_t ns = 0, na = 0;
                ck_assert_ptr_nonnull(seen);
                rows_init(&got, k.B, k.L);
                for (uint32_t r = 0; r < W; r++) {
                        pk = pack_open(&c, &k, r, 0);
                        for (uint64_t s = 0; s < steps; s++) {
                                char what[64];
                                snprintf(what, sizeof(what), "W %" PRIu64 " rank %u step %"
                                         PRIu64, W, r, s);
                                fill_step(&c, pk, &k, s, &got, 0);
                                for (uint64_t j = 0; j < k.B; j++)
                                        row_eq(&got, j, &ref, s * G + r * k.B + j, what);
                                for (uint64_t x = 0; x < k.B * k.L; x++)
                                        if (got.seg[x] != 0)
                                                seen[ns++] = got.tok[x];
                        }
                        zr_pack_free(pk);
                }
                /* disjoint: the rows are of cycle 0 alone (its tokens fill more
                 * than twice their rows), whose tokens are each unique */
                ck_assert_uint_lt(2 * steps * G * k.L, tokens);
                qsort(seen, ns, sizeof(*seen), cmp_i64);
                for (uint64_t x = 1; x < ns; x++)
                        ck_assert_msg(seen[x] != seen[x - 1], "W %" PRIu64 ": token %" PRId64
                                      " in two rows", W, seen[x]);
                /* and together world size 1's */
                all = calloc(steps * G * k.L, sizeof(*all));
                ck_assert_ptr_nonnull(all);
                for (uint64_t x = 0; x < steps * G * k.L; x++)
                        if (ref.seg[x] != 0)
                                all[na++] = ref.tok[x];
                qsort(all, na, sizeof(*all), cmp_i64);
                ck_assert_uint_eq(na, ns);
                ck_assert_int_eq(memcmp(all, seen, na * sizeof(*all)), 0);
                free(all);
                free(seen);
                rows_free(&got);
        }
        rows_free(&ref);
        corpus_free(&c);
}

START_TEST(test_concat_ranks) {
        check_ranks(ZR_PACK_CONCAT);
}
END_TEST

START_TEST(test_best_fit_ranks) {
        check_ranks(ZR_PACK_BEST_FIT);
}
END_TEST

/* ---- best_fit's promises, from the rows alone ------------------------------------ */

/* A whole cycle of best_fit (sequential, no eos: every token names its
 * document): rows end with their padding only (pad_id, segment 0, position
 * 0); a document is one piece unless it is longer than L, then it is its
 * whole rows and its remainder; every token of the cycle is there once; the
 * padding is what the rows hold beyond the tokens. */
START_TEST(test_best_fit_cuts_only_long_documents) {
        const uint64_t n = 120, L = 16;
        uint64_t lens[120], tokens = 0, pieces_of[120] = {0}, toks_of[120] = {0};
        cfg k = { .pm = ZR_PACK_BEST_FIT, .sm = ZR_SAMPLER_SEQUENTIAL, .L = L, .B = 1, .W = 1,
                  .window = 40, .pad = PAD };
        corpus c;
        rows r;
        bcycle b;

        random_lens(lens, n, 17, L, 21);
        lens[7] = L;       /* exactly a row */
        lens[8] = 2 * L;   /* exactly two */
        lens[9] = 0;
        for (uint64_t i = 0; i < n; i++)
                tokens += lens[i];
        corpus_new(&c, "<i4", lens, n, ZR_CODEC_RAW);
        ref_best_fit_cycle(&c, &k, 0, &b);
        const uint64_t R = b.nrows;
        bc_free(&b);
        k.B = R;   /* one step: the whole cycle */
        rows_init(&r, R, L);
        zr_pack *pk = pack_open(&c, &k, 0, 0);
        fill_step(&c, pk, &k, 0, &r, 0);
        zr_pack_free(pk);
        uint64_t pad = 0;
        for (uint64_t i = 0; i < R; i++) {
                int32_t seg = 0;
                uint64_t doc = UINT64_MAX;
                for (uint64_t j = 0; j < L; j++) {
                        uint64_t x = i * L + j;
                        if (r.seg[x] == 0) {
                                ck_assert_int_eq(r.tok[x], PAD);
                                ck_assert_int_eq(r.pos[x], 0);
                                pad++;
                                seg = -1; /* padding only from here */
                                continue;
                        }
                        ck_assert_msg(seg >= 0, "row %" PRIu64 ": a piece after padding", i);
                        uint64_t d = (uint64_t)(r.tok[x] - 1) / 1000;
                        uint64_t t = (uint64_t)(r.tok[x] - 1) % 1000;
                        ck_assert_uint_lt(d, n);
                        if (r.seg[x] != seg) {
                                ck_assert_int_eq(r.seg[x], seg + 1);
                                ck_assert_int_eq(r.pos[x], 0);
                                seg = r.seg[x];
                                doc = d;
                                pieces_of[d]++;
                        } else {
                                ck_assert_uint_eq(d, doc);
                                ck_assert_int_eq(r.pos[x], r.pos[x - 1] + 1);
                        }
                        ck_assert_uint_eq(t, toks_of[d]); /* the document's tokens in order */
                        toks_of[d]++;
                }
        }
        for (uint64_t d = 0; d < n; d++) {
                ck_assert_uint_eq(toks_of[d], lens[d]);
                uint64_t want = lens[d] <= L ? (lens[d] > 0) : lens[d] / L + (lens[d] % L > 0);
                ck_assert_msg(pieces_of[d] == want, "document %" PRIu64 " of %" PRIu64
                              " tokens is %" PRIu64 " pieces, want %" PRIu64, d, lens[d],
                              pieces_of[d], want);
        }
        ck_assert_uint_eq(pad, R * L - tokens);
        rows_free(&r);
        corpus_free(&c);
}
END_TEST

/* A document of exactly L tokens (or L - 1 and its eos) is a row of its own,
 * one piece with positions 0..L - 1, and leaves no empty piece behind it:
 * concat's next row starts the next document at position 0; best_fit makes
 * it a whole row and packs nothing of it. ℓ of 6, 4, 6 and 2 in rows of 6:
 * concat's cycle is three rows, the first document 0; best_fit's the two
 * whole rows (documents 0 and 2), then one of 4 and 2; with a window of one
 * document, four rows. */
START_TEST(test_document_of_exactly_a_row) {
        const uint64_t L = 6;
        corpus c;
        rows r;

        rows_init(&r, 6, L);
        for (int e = 0; e < 2; e++) {
                const uint64_t lens[4] = { 6 - (uint64_t)e, 4 - (uint64_t)e, 6 - (uint64_t)e,
                                           2 - (uint64_t)e };
                corpus_new(&c, "<i4", lens, 4, ZR_CODEC_RAW);
                for (int m = 0; m < 2; m++) {
                        cfg k = { .pm = m ? ZR_PACK_BEST_FIT : ZR_PACK_CONCAT,
                                  .sm = ZR_SAMPLER_SEQUENTIAL, .L = L, .B = 3, .W = 1,
                                  .has_eos = e, .eos = EOS, .pad = PAD };
                        /* the documents of rows 0..5, -1 for a row of others */
                        const int64_t bf[6] = { 0, 2, -1, 0, 2, -1 };
                        const int64_t cc[6] = { 0, -1, -1, 0, -1, -1 };
                        zr_pack *pk = pack_open(&c, &k, 0, 0);
                        fill_step(&c, pk, &k, 0, &r, 0);
                        fill_step(&c, pk, &k, 1, &r, 3);
                        zr_pack_free(pk);
                        for (uint64_t row = 0; row < 6; row++) {
                                int64_t d = m ? bf[row] : cc[row];
                                if (d < 0)
                                        continue;
                                for (uint64_t j = 0; j < L; j++) {
                                        uint64_t x = row * L + j;
                                        ck_assert_int_eq(r.tok[x], doc_tok(&c, &k, (uint64_t)d, j));
                                        ck_assert_int_eq(r.seg[x], 1);
                                        ck_assert_int_eq(r.pos[x], (int32_t)j);
                                }
                        }
                        /* row 1 (concat) or 2 (best_fit): document 1, then 3 */
                        uint64_t x = (m ? 2 : 1) * L;
                        ck_assert_int_eq(r.tok[x], tok(1, 0));
                        ck_assert_int_eq(r.seg[x], 1);
                        ck_assert_int_eq(r.seg[x + L - 1], 2);
                        ck_assert_int_eq(r.pos[x + ell(&c, &k, 1)], 0);
                }
                /* best_fit, a window a document: a window of a whole row packs
                 * nothing more (no row of padding); the others are padded */
                cfg k = { .pm = ZR_PACK_BEST_FIT, .sm = ZR_SAMPLER_SEQUENTIAL, .L = L, .B = 3,
                          .W = 1, .has_eos = e, .eos = EOS, .pad = PAD, .window = 1 };
                zr_pack *pk = pack_open(&c, &k, 0, 0);
                fill_step(&c, pk, &k, 0, &r, 0);
                fill_step(&c, pk, &k, 1, &r, 3);
                zr_pack_free(pk);
                for (uint64_t row = 0; row < 6; row++) {
                        uint64_t d = row % 4;
                        for (uint64_t j = 0; j < L; j++) {
                                uint64_t x = row * L + j;
                                int full = j < ell(&c, &k, d);
                                ck_assert_int_eq(r.tok[x], full ? doc_tok(&c, &k, d, j) : PAD);
                                ck_assert_int_eq(r.seg[x], full);
                                ck_assert_int_eq(r.pos[x], full ? (int32_t)j : 0);
                        }
                }
                corpus_free(&c);
        }
        rows_free(&r);
}
END_TEST

/* ---- a mixture's rows: any global rows into any places of a region ---------------- */

START_TEST(test_fill_rows) {
        const uint64_t n = 30, B = 6;
        uint64_t lens[30];
        const uint64_t g[] = { 17, 3, 9, 40, 3 };
        const uint32_t at[] = { 4, 0, 2, 5, 1 };
        corpus c;

        random_lens(lens, n, 20, 9, 4);
        corpus_new(&c, "<i4", lens, n, ZR_CODEC_RAW);
        for (int m = 0; m < 2; m++) {
                cfg k = { .pm = m ? ZR_PACK_BEST_FIT : ZR_PACK_CONCAT, .sm = ZR_SAMPLER_CYCLIC,
                          .seed = 8, .L = 9, .B = 1, .W = 1, .has_eos = 1, .eos = EOS, .window = 4,
                          .pad = PAD };
                uint64_t bytes, pieces = 0;
                uint8_t *dst = region_new(&c, B, k.L, &bytes);
                zr_error err = {0};
                rows got, want;
                zr_pack *pk = pack_open(&c, &k, 0, 0);
                zr_dataset_lock(c.ds, false);
                int r = zr_pack_fill_rows(pk, B, 5, g, at, dst, NULL, &pieces, &err);
                zr_dataset_unlock(c.ds);
                ck_assert_msg(r == 0, "%s", err.message);
                ck_assert_uint_gt(pieces, 0);
                rows_init(&got, 1, k.L);
                rows_init(&want, 1, k.L);
                for (int i = 0; i < 5; i++) {
                        region_row(&c, dst, B, at[i], &got, 0);
                        ref_rows(&c, &k, g[i], &want);
                        row_eq(&got, 0, &want, 0, pm_name(k.pm));
                }
                rows_free(&got);
                rows_free(&want);
                zr_pack_free(pk);
                free(dst);
        }
        corpus_free(&c);
}
END_TEST

/* ---- the indexes ------------------------------------------------------------------- */

/* A concat index is the running token count of the cycle's order; a best fit
 * index, the reference's rows (cycles 0..2 of a cyclic sampler). An index kept
 * in a directory is loaded, not built again, by the next store on it. */
static void check_index(corpus *c, zr_tokstore *ts, uint64_t cy) {
        const cfg k = { .pm = ZR_PACK_BEST_FIT, .sm = ZR_SAMPLER_CYCLIC, .seed = 4, .L = 12,
                        .has_eos = 1, .eos = EOS, .window = 9 };
        zr_tokidx_key ck = { .kind = ZR_TOKIDX_CONCAT, .mode = ZR_SAMPLER_CYCLIC,
                             .fingerprint = c->fp, .n = c->n, .seed = 4, .cycle = cy };
        zr_tokidx_key bk = ck;
        uint64_t run = 0, max = 0;
        zr_error err = {0};
        zr_tokidx *ix;
        bcycle b;
        int r;

        bk.kind = ZR_TOKIDX_BEST_FIT;
        bk.seq_len = k.L;
        bk.window = k.window;
        bk.eos = 1;
        zr_dataset_lock(c->ds, false);
        r = zr_tokidx_get(ts, &ck, c->ds, c->pool, NULL, &ix, &err);
        zr_dataset_unlock(c->ds);
        ck_assert_msg(r == 0, "%s", err.message);
        for (uint64_t q = 0; q <= c->n; q++) {
                ck_assert_uint_eq(ix->prefix[q], run);
                if (q < c->n) {
                        uint64_t l = c->lens[order_at(c, &k, cy, q)];
                        run += l;
                        max = l > max ? l : max;
                }
        }
        ck_assert_uint_eq(ix->total, run);
        ck_assert_uint_eq(ix->max_len, max);
        zr_tokidx_free(ix);

        ref_best_fit_cycle(c, &k, cy, &b);
        zr_dataset_lock(c->ds, false);
        r = zr_tokidx_get(ts, &bk, c->ds, c->pool, NULL, &ix, &err);
        zr_dataset_unlock(c->ds);
        ck_assert_msg(r == 0, "%s", err.message);
        ck_assert_uint_eq(ix->rows, b.nrows);
        ck_assert_uint_eq(ix->npieces, b.npieces);
        for (uint64_t i = 0; i <= b.nrows; i++)
                ck_assert_uint_eq(ix->row_at[i], b.row_at[i]);
        for (uint64_t i = 0; i < b.npieces; i++) {
                ck_assert_uint_eq(ix->pieces[i].q, b.pieces[i].q);
                ck_assert_uint_eq(ix->pieces[i].start, b.pieces[i].start);
                ck_assert_uint_eq(ix->pieces[i].count, b.pieces[i].count);
        }
        zr_tokidx_free(ix);
        bc_free(&b);
}

START_TEST(test_indexes) {
        const uint64_t n = 50;
        uint64_t lens[50];
        corpus c;
        zr_tokstore *ts;
        zr_tokstore_counters tc;
        char dir[512];

        random_lens(lens, n, 30, 12, 6);
        corpus_new(&c, "<i4", lens, n, ZR_CODEC_RAW);
        snprintf(dir, sizeof(dir), "%s/index", c.s.path);
        for (int pass = 0; pass < 2; pass++) {
                ck_assert_int_eq(zr_tokstore_open(dir, 1 << 24, &ts, NULL, 0), 0);
                for (uint64_t cy = 0; cy < 3; cy++)
                        check_index(&c, ts, cy);
                zr_tokstore_counters_get(ts, &tc);
                if (pass == 0) {
                        ck_assert_uint_ge(tc.builds, 6);
                } else {
                        ck_assert_uint_eq(tc.builds, 0);
                        ck_assert_uint_ge(tc.loads, 6);
                }
                zr_tokstore_free(ts); /* writes what is pending */
        }
        corpus_free(&c);
}
END_TEST

int main(void) {
        Suite *s = suite_create("pack");
        TL_TCASE(s, "by hand", 0, test_concat_by_hand, test_concat_cycles_and_long_documents,
                 test_concat_empty_documents_and_rows_of_one, test_best_fit_by_hand,
                 test_best_fit_ties_and_windows, test_document_of_exactly_a_row);
        TCase *tc = TL_TCASE(s, "reference", 0, test_concat_resume, test_best_fit_resume,
                             test_concat_ranks, test_best_fit_ranks,
                             test_best_fit_cuts_only_long_documents, test_fill_rows,
                             test_indexes);
        TL_LOOP_TESTS(tc, 0, (int)(sizeof(rcases) / sizeof(rcases[0])),
                      test_against_the_reference);
        return tl_run_suite(s);
}
