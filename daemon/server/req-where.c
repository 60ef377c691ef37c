/* req-where.c: STEPS_OF, which steps of a sampler or a mixture saw a record
 * (PROTOCOL.md; proto/SAMPLERS.md, "Which steps saw a record"), on top of the
 * samplers run backwards (sampler/inverse.h): the daemon is the one
 * implementation of the samplers, so it answers for its clients too.
 *
 * A pure computation: it names no handle and reads no store. Its walk runs on
 * the pool, as a job of the client's uid, cut so that one request scans at
 * most STEPS_OF_SCAN positions (iid) or walks STEPS_OF_CYCLES cycles (the
 * cyclics); its reply holds at most max_hits hits, a step's hits always whole.
 * The reply's `next` says where it stopped, and the client asks again from
 * there, reporting its progress between requests.
 *
 * Every piece is bounded whatever the client asks: a step is the smallest
 * piece, so a step that alone holds more than one request scans (iid: batch ×
 * world positions, or a mixture source's draws, above STEPS_OF_SCAN; a cyclic
 * mixture source's draws above STEPS_OF_CYCLES cycles) is refused up front
 * with ZR_E_LIMIT, and so is a mixture's step with more hits of the record
 * than max_hits (they are sorted together: at most max_hits of them are held).
 * Its memory, the hits kept and a step's hits held, is charged to the uid's
 * working memory before the walk (users.h).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "dataset/fingerprint.h"
#include "loader/pack.h"
#include "sampler/inverse.h"
#include "server/request.h"

/* One request's walk: about 70 ms of iid scan (4 ns a position) or of cyclic
 * cycles (40 ns each, 250 for a mixture's source) on one core here. */
#define STEPS_OF_SCAN (UINT64_C(1) << 24)
#define STEPS_OF_CYCLES (UINT64_C(1) << 19)
/* Hits of one reply at most (24 bytes each), and no more than a frame holds. */
#define STEPS_OF_HITS_MAX 32768
/* A packed loader's request walks at most this many cycles, or cycles of this
 * many documents (their indexes loaded, or built: about 0.1 s a million
 * documents here), a step never cut. */
#define STEPS_OF_PACKED_CYCLES 64
#define STEPS_OF_DOCS (UINT64_C(1) << 22)

typedef struct steps_state {
        bool mixture;
        zr_entry *entry;         /* a packed loader's: its dataset */
        zr_pack_params pack;
        zr_sampler_params p;
        zr_mixture m;
        uint32_t source;
        uint64_t record, start, stop, next;
        size_t max_hits;
        uint64_t *hits;          /* (step, rank, position) per hit */
        size_t nhits, cap;
        size_t step_first;       /* the first hit of the latest step */
        bool over;               /* one step holds more than max_hits hits */
} steps_state;

static void steps_state_free(void *p) {
        steps_state *st = p;
        zr_entry_unref(st->entry);
        free(st->hits);
        free(st);
}

/* Keeps hits up to max_hits, a step's whole; stops (1) at the first hit that
 * does not fit, with `next` the first step whose hits are not all kept. */
static int steps_on_hits(void *userdata, const zr_sampler_hit *h, size_t count) {
        steps_state *st = userdata;

        for (size_t i = 0; i < count; i++) {
                bool new_step = st->nhits == 0 || st->hits[3 * (st->nhits - 1)] != h[i].step;

                if (st->nhits == st->max_hits) {
                        if (!new_step) {
                                /* drop the step's hits kept so far: it goes whole next time */
                                st->over = st->step_first == 0;
                                st->nhits = st->step_first;
                        }
                        st->next = h[i].step;
                        return 1;
                }
                if (new_step)
                        st->step_first = st->nhits;
                if (st->nhits == st->cap) {
                        size_t cap = st->cap ? 2 * st->cap : 256;
                        uint64_t *p;
                        if (cap > st->max_hits)
                                cap = st->max_hits;
                        p = realloc(st->hits, cap * 3 * sizeof(*p));
                        if (!p)
                                return -ENOMEM;
                        st->hits = p;
                        st->cap = cap;
                }
                st->hits[3 * st->nhits] = h[i].step;
                st->hits[3 * st->nhits + 1] = h[i].rank;
                st->hits[3 * st->nhits + 2] = h[i].position;
                st->nhits++;
        }
        return 0;
}

/* ZR_E_LIMIT if the piece [start, cut) is one step that alone is more work
 * than a request does (the cut never splits a step). */
static int step_over(const steps_state *st, uint64_t cut, zr_error *err) {
        if (st->mixture) {
                const zr_mixture_source *s = &st->m.sources[st->source];
                uint64_t draws, budget;

                if (s->mode == ZR_SAMPLER_SEQUENTIAL || cut != st->start + 1)
                        return 0;
                draws = zr_mixture_draws_before(&st->m, st->source, cut) -
                        zr_mixture_draws_before(&st->m, st->source, st->start);
                if (s->mode == ZR_SAMPLER_IID)
                        budget = STEPS_OF_SCAN;
                else if (__builtin_mul_overflow(STEPS_OF_CYCLES, s->n, &budget))
                        budget = UINT64_MAX;
                if (draws <= budget)
                        return 0;
                return zr_error_set(err, ZR_E_LIMIT, "step %" PRIu64 " draws %" PRIu64 " records "
                                    "of source %" PRIu32 ", more than the %" PRIu64 " one "
                                    "STEPS_OF request walks (a step is not cut): no inverse for "
                                    "so large a batch", st->start, draws, st->source, budget);
        }
        if (st->p.mode == ZR_SAMPLER_IID) {
                unsigned __int128 global = (unsigned __int128)st->p.batch_size * st->p.world_size;

                if (global > STEPS_OF_SCAN)
                        return zr_error_set(err, ZR_E_LIMIT, "a step of iid holds %.3g positions "
                                            "(batch_size × world_size), more than the %" PRIu64
                                            " one STEPS_OF request scans (a step is not cut): no "
                                            "inverse for so large a batch", (double)global,
                                            STEPS_OF_SCAN);
        }
        (void)cut;
        return 0;
}

/* A packed mixture's source: the rows its own packed stream's walk found
 * (its draws), at most `cap`; the first that did not fit. */
typedef struct rows_found {
        uint64_t *v;
        size_t n, cap;
        bool full;
        uint64_t over;
} rows_found;

static int rows_collect(void *userdata, const zr_sampler_hit *h, size_t count) {
        rows_found *rf = userdata;

        for (size_t i = 0; i < count; i++) {
                if (rf->n == rf->cap) {
                        rf->full = true;
                        rf->over = h[i].step;
                        return 1;
                }
                rf->v[rf->n++] = h[i].step; /* batch 1, world 1: its step is its row */
        }
        return 0;
}

/* The last step s in [lo, hi] whose draws of source k all come before `row`
 * (D_k(s) <= row); lo's if none. */
static uint64_t step_before_row(const zr_mixture *m, uint32_t k, uint64_t lo, uint64_t hi,
                                uint64_t row) {
        while (lo < hi) {
                uint64_t mid = lo + (hi - lo + 1) / 2;
                if (zr_mixture_draws_before(m, k, mid) <= row)
                        lo = mid;
                else
                        hi = mid - 1;
        }
        return lo;
}

/* A packed mixture: source k's rows [D_k(start), D_k(stop)) walked as its own
 * packed stream's steps (batch 1, world 1: a draw is a row), until a step of
 * the mixture is whole; the rows kept go through the apportionment and the
 * layout to their places (zr_mixture_draws_steps_of()). */
static int packed_mixture_walk(zr_request *rq, steps_state *st, zr_pack *pk,
                               const zr_steps_of_ops *ops) {
        const uint32_t k = st->source;
        uint64_t stop = st->stop > st->m.last_step + 1 ? st->m.last_step + 1 : st->stop;
        uint64_t at = zr_mixture_draws_before(&st->m, k, st->start);
        uint64_t end = zr_mixture_draws_before(&st->m, k, stop), next = stop, keep, row;
        rows_found rf = { .cap = st->max_hits };
        zr_steps_of_ops walk = { .on_hits = rows_collect, .userdata = &rf };
        int r = 0;

        if (!(rf.v = malloc(rf.cap * sizeof(*rf.v))))
                return zr_error_errno(&rq->err, ENOMEM, "the rows found");
        while (at < end) {
                r = zr_pack_steps_of(pk, st->record, at, end, STEPS_OF_DOCS, STEPS_OF_PACKED_CYCLES,
                                     &walk, &rq->cancelled, &row, &rq->err);
                if (r == 1 && rf.full) {
                        /* more rows than a reply holds: up to the step of the first not kept */
                        r = 0;
                        next = step_before_row(&st->m, k, st->start, stop, rf.over);
                        if (next == st->start)
                                r = zr_error_set(&rq->err, ZR_E_LIMIT, "step %" PRIu64 " alone "
                                                 "holds more than %zu hits of record %" PRIu64
                                                 ": ask for more (max_hits)", st->start,
                                                 st->max_hits, st->record);
                        break;
                }
                if (r != 0 || row >= end)
                        break;
                next = step_before_row(&st->m, k, st->start, stop, row);
                if (next > st->start)
                        break;
                next = stop;
                at = row;
        }
        if (r == 0) {
                keep = next == stop ? end : zr_mixture_draws_before(&st->m, k, next);
                while (rf.n && rf.v[rf.n - 1] >= keep)
                        rf.n--;
                r = zr_mixture_draws_steps_of(&st->m, k, rf.v, rf.n, st->start, next, ops,
                                              &rq->err);
                st->next = next == stop ? st->stop : next;
        }
        free(rf.v);
        return r;
}

/* A packed loader's walk (loader/pack.h): its pack made anew over the dataset,
 * with the indexes the loaders keep (loaded, or built and kept). A mixture's:
 * its source's pack, as the loader makes it (batch 1, world 1, the source's
 * seed). */
static int packed_walk(zr_request *rq, steps_state *st, const zr_steps_of_ops *ops) {
        zr_server *srv = zr_request_server(rq);
        zr_dataset *ds = st->entry->ds;
        zr_tokstore *own = NULL, *ts = srv->tokstore;
        zr_sampler_params sp = st->p;
        zr_pack *pk = NULL;
        uint64_t fp, n, want = st->p.n, first = st->start, next = st->stop;
        int r;

        if (st->mixture) {
                want = st->m.sources[st->source].n;
                sp = (zr_sampler_params){ .mode = st->m.sources[st->source].mode, .n = want,
                                          .batch_size = 1, .world_size = 1,
                                          .seed = st->m.source_seed[st->source] };
                if (st->start > st->m.last_step) {
                        st->next = st->stop;
                        return 0;
                }
                first = zr_mixture_draws_before(&st->m, st->source, st->start);
        }
        if (!ts && (r = zr_tokstore_open(NULL, 0, &own, NULL, 0)) < 0)
                return zr_error_errno(&rq->err, -r, "an index store");
        zr_dataset_lock(ds, false);
        n = zr_dataset_length(ds);
        if (n != want)
                r = zr_error_set(&rq->err, ZR_E_SAMPLER, "n = %" PRIu64 ", but the store holds %"
                                 PRIu64 " documents now: a packed loader's steps are those of "
                                 "the store it packs", want, n);
        else
                r = zr_dataset_fingerprint(ds, &fp, &rq->err);
        if (r == 0)
                r = zr_pack_new(&st->pack, ds, n, fp, &sp, first, ts ? ts : own, srv->pool,
                                &rq->cancelled, &pk, &rq->err);
        if (r == 0 && st->mixture) {
                r = packed_mixture_walk(rq, st, pk, ops);
        } else if (r == 0) {
                r = zr_pack_steps_of(pk, st->record, st->start, st->stop, STEPS_OF_DOCS,
                                     STEPS_OF_PACKED_CYCLES, ops, &rq->cancelled, &next, &rq->err);
                if (r == 0)
                        st->next = next;
        }
        zr_pack_free(pk);
        zr_dataset_unlock(ds);
        zr_tokstore_free(own);
        return r;
}

static void steps_run(zr_job *job) {
        zr_request *rq = (zr_request *)job;
        steps_state *st = rq->state;
        /* the cut bounds the scan; the scan limit only stands behind it */
        zr_steps_of_ops ops = { .on_hits = steps_on_hits, .userdata = st,
                                .scan_limit = STEPS_OF_SCAN };
        uint64_t stop = st->stop, cut;
        int r;

        ops.step_hits_max = st->max_hits;
        if (st->entry) {
                r = packed_walk(rq, st, &ops);
                goto out;
        }
        /* a mixture has no step past its last: the range ends there */
        if (st->mixture && stop > st->m.last_step + 1)
                stop = st->m.last_step + 1;
        if (st->start >= stop) {
                st->next = st->stop;
                rq->result = 0;
                return;
        }
        cut = st->mixture ? zr_mixture_steps_of_cut(&st->m, st->source, st->start, stop,
                                                   STEPS_OF_SCAN, STEPS_OF_CYCLES)
                          : zr_sampler_steps_of_cut(&st->p, st->start, stop, STEPS_OF_SCAN,
                                                    STEPS_OF_CYCLES);
        if ((r = step_over(st, cut, &rq->err)) < 0) {
                rq->result = r;
                return;
        }
        /* the whole range searched: say so, whatever part of it has steps */
        st->next = cut == stop ? st->stop : cut;
        if (st->mixture)
                r = zr_mixture_steps_of(&st->m, st->source, st->record, st->start, cut, &ops, &rq->err);
        else
                r = zr_sampler_steps_of(&st->p, st->record, st->start, cut, &ops, &rq->err);
out:
        if (r == -ENOMEM)
                r = zr_error_errno(&rq->err, ENOMEM, "no memory for the hits");
        else if (r == -E2BIG)
                r = zr_error_set(&rq->err, ZR_E_LIMIT, "a step %s %" PRIu32 " holds more "
                                 "than %zu hits of record %" PRIu64 ": ask for more (max_hits, "
                                 "at most %d)", st->entry ? "of rows of stream" : "of source",
                                 st->source, st->max_hits, st->record, STEPS_OF_HITS_MAX);
        else if (r == 1 && st->over)
                r = zr_error_set(&rq->err, ZR_E_LIMIT, "step %" PRIu64 " alone holds more than %zu "
                                 "hits of record %" PRIu64 ": ask for more (max_hits)", st->next,
                                 st->max_hits, st->record);
        else if (r == 1)
                r = 0;
        rq->result = r;
}

static void steps_reply(zr_request *rq, zr_wire_writer *w) {
        steps_state *st = rq->state;
        zr_wire_put_u64s(w, "hits", st->hits, 3 * st->nhits);
        zr_wire_put_u64(w, "next", st->next);
}

/* A sampler's name into *mode (ZR_E_SAMPLER naming `what` otherwise). */
static int take_mode(zr_request *rq, const msgpack_object *map, const char *what,
                     enum zr_sampler_mode *mode) {
        zr_wire_error werr = {0};
        char name[32];

        if (zr_wire_get_str_copy(map, "sampler", name, sizeof(name), &werr) < 0)
                return zr_request_fail(rq, ZR_E_PROTO, "%s%s", what, werr.message);
        if (zr_sampler_mode_from_name(name, mode) < 0)
                return zr_request_fail(rq, ZR_E_SAMPLER, "%sunknown sampler '%s' (sequential, iid, "
                                       "cyclic, cyclic-lx157)", what, name);
        return 0;
}

/* A mixture's `sources` into st->m. */
static int take_mixture(zr_request *rq, steps_state *st, uint64_t batch, uint32_t world) {
        zr_mixture_source src[ZR_SOURCES_MAX];
        zr_wire_error werr = {0};
        const msgpack_object *items;
        uint32_t n;
        int r;

        if (zr_wire_get_array(rq->root, "sources", &items, &n, &werr) < 0)
                return zr_request_fail(rq, ZR_E_PROTO, "%s", werr.message);
        if (n < 1 || n > ZR_SOURCES_MAX)
                return zr_request_fail(rq, ZR_E_PROTO, "field 'sources': %u sources, 1..%d", n,
                                       ZR_SOURCES_MAX);
        for (uint32_t k = 0; k < n; k++) {
                char what[24];

                src[k].mode = st->p.mode;
                snprintf(what, sizeof(what), "sources[%u]: ", k);
                if (zr_wire_get_u64(&items[k], "n", &src[k].n, &werr) < 0 ||
                    zr_wire_get_u32(&items[k], "weight", &src[k].weight, &werr) < 0)
                        return zr_request_fail(rq, ZR_E_PROTO, "%s%s", what, werr.message);
                if (zr_wire_find(&items[k], "sampler") &&
                    (r = take_mode(rq, &items[k], what, &src[k].mode)) < 0)
                        return r;
        }
        r = zr_mixture_init(&st->m, src, n, batch, world, st->p.seed, &rq->err);
        if (r < 0)
                return r;
        if (st->source >= n)
                return zr_request_fail(rq, ZR_E_SAMPLER, "source %" PRIu32 " of a mixture of %" PRIu32,
                                       st->source, n);
        if (st->record >= src[st->source].n)
                return zr_request_fail(rq, ZR_E_SAMPLER, "source %" PRIu32 ": record %" PRIu64
                                       " >= n = %" PRIu64 ": no such record", st->source, st->record,
                                       src[st->source].n);
        return 0;
}

int zr_handle_steps_of(zr_request *rq) {
        zr_wire_error werr = {0};
        uint64_t batch, max_hits = 0, frame_hits;
        uint32_t world = 1;
        steps_state *st;
        int r;

        st = zr_request_state(rq, sizeof(*st), steps_state_free);
        if (!st)
                return -ENOMEM;
        if (zr_wire_get_u64(rq->root, "batch_size", &batch, &werr) < 0 ||
            zr_wire_get_u64(rq->root, "seed", &st->p.seed, &werr) < 0 ||
            zr_wire_get_u64(rq->root, "record", &st->record, &werr) < 0 ||
            zr_wire_get_u64(rq->root, "start", &st->start, &werr) < 0 ||
            zr_wire_get_u64(rq->root, "stop", &st->stop, &werr) < 0 ||
            (zr_wire_find(rq->root, "world_size") &&
             zr_wire_get_u32(rq->root, "world_size", &world, &werr) < 0) ||
            (zr_wire_find(rq->root, "source") &&
             zr_wire_get_u32(rq->root, "source", &st->source, &werr) < 0) ||
            (zr_wire_find(rq->root, "max_hits") &&
             zr_wire_get_u64(rq->root, "max_hits", &max_hits, &werr) < 0))
                return zr_request_fail(rq, ZR_E_PROTO, "%s", werr.message);
        if ((r = take_mode(rq, rq->root, "", &st->p.mode)) < 0)
                return r;
        /* at most what a reply frame holds, with room for its other fields */
        frame_hits = (zr_request_frame_max(rq) - 1024) / 24;
        if (frame_hits > STEPS_OF_HITS_MAX)
                frame_hits = STEPS_OF_HITS_MAX;
        if (zr_wire_find(rq->root, "max_hits") && max_hits == 0)
                return zr_request_fail(rq, ZR_E_PROTO, "field 'max_hits': 0, at least 1");
        st->max_hits = (size_t)(max_hits == 0 || max_hits > frame_hits ? frame_hits : max_hits);
        st->mixture = zr_wire_find(rq->root, "sources") != NULL;
        if (st->mixture == (zr_wire_find(rq->root, "n") != NULL))
                return zr_request_fail(rq, ZR_E_PROTO, "give either 'n' or 'sources' (a mixture), "
                                       "not %s", st->mixture ? "both" : "neither");
        if ((zr_wire_find(rq->root, "pack") != NULL) != (zr_wire_find(rq->root, "handle") != NULL))
                return zr_request_fail(rq, ZR_E_PROTO, "a packed loader's steps take both 'pack' "
                                       "and 'handle' (its dataset)");
        if (zr_wire_find(rq->root, "pack")) {
                uint32_t hid;
                zr_handle *h;

                uint64_t n;
                enum zr_sampler_mode mode = st->p.mode;

                if ((r = zr_request_take_pack(rq, rq->root, "steps_of", &st->pack)) < 0)
                        return r;
                if (zr_wire_get_u32(rq->root, "handle", &hid, &werr) < 0)
                        return zr_request_fail(rq, ZR_E_PROTO, "%s", werr.message);
                if (!(h = zr_request_handle(rq, "handle", hid, ZR_HANDLE_BIT(ZR_HANDLE_DATASET))))
                        return -ZR_E_NO_HANDLE;
                if (st->mixture) {
                        /* rows, not records, a source's draw a row of its own stream */
                        if ((r = take_mixture(rq, st, batch, world)) < 0)
                                return r;
                        mode = st->m.sources[st->source].mode;
                        n = st->m.sources[st->source].n;
                        if ((r = zr_pack_check(&st->pack, h->entry->ds, mode, "steps_of",
                                               &rq->err)) < 0)
                                return r;
                        goto charge;
                }
                if (zr_wire_get_u64(rq->root, "n", &st->p.n, &werr) < 0)
                        return zr_request_fail(rq, ZR_E_PROTO, "%s", werr.message);
                /* rows, not records: a batch may hold more rows than the store
                 * documents (pack_setup()) */
                st->p.batch_size = 1;
                st->p.world_size = 1;
                if ((r = zr_sampler_check(&st->p, &rq->err)) < 0 ||
                    (r = zr_pack_check(&st->pack, h->entry->ds, st->p.mode, "steps_of",
                                       &rq->err)) < 0)
                        return r;
                st->p.batch_size = batch;
                st->p.world_size = world;
                if (batch == 0 || world == 0 || batch > UINT64_MAX / world ||
                    batch * world > UINT64_MAX / 8 / st->pack.seq_len)
                        return zr_request_fail(rq, ZR_E_SAMPLER, "batch_size %" PRIu64 " × "
                                               "world_size %" PRIu32 " rows of %" PRIu64
                                               " tokens: out of range", batch, world,
                                               st->pack.seq_len);
                if (st->record >= st->p.n)
                        return zr_request_fail(rq, ZR_E_SAMPLER, "record %" PRIu64 " >= n = %" PRIu64
                                               ": no such record", st->record, st->p.n);
                n = st->p.n;
        charge:
                /* the hits (a mixture's: its rows found, its step's hits), the pack */
                if ((r = zr_request_work_charge(rq, (uint64_t)st->max_hits *
                                                        (4 * sizeof(uint64_t) +
                                                         2 * sizeof(zr_sampler_hit)) +
                                                        zr_pack_work_bytes(&st->pack, n,
                                                                           (unsigned)zr_pool_shards(
                                                                                   zr_request_server(rq)->pool,
                                                                                   SIZE_MAX)),
                                                "STEPS_OF")) < 0)
                        return r;
                st->entry = zr_entry_ref(h->entry);
                return zr_request_submit_reply(rq, steps_run, steps_reply);
        }
        if (st->mixture) {
                if ((r = take_mixture(rq, st, batch, world)) < 0)
                        return r;
        } else {
                if (zr_wire_find(rq->root, "source"))
                        return zr_request_fail(rq, ZR_E_PROTO, "field 'source' is a mixture's");
                if (zr_wire_get_u64(rq->root, "n", &st->p.n, &werr) < 0)
                        return zr_request_fail(rq, ZR_E_PROTO, "%s", werr.message);
                st->p.batch_size = batch;
                st->p.world_size = world;
                if ((r = zr_sampler_check(&st->p, &rq->err)) < 0)
                        return r;
                if (st->record >= st->p.n)
                        return zr_request_fail(rq, ZR_E_SAMPLER, "record %" PRIu64 " >= n = %" PRIu64
                                               ": no such record", st->record, st->p.n);
        }
        /* the hits kept, a mixture's step held, the scan's buffers */
        if ((r = zr_request_work_charge(rq, (uint64_t)st->max_hits * (3 * sizeof(uint64_t) +
                                                                    sizeof(zr_sampler_hit)) +
                                                (64 << 10), "STEPS_OF")) < 0)
                return r;
        return zr_request_submit_reply(rq, steps_run, steps_reply);
}
