/* prefetch.c: reading ahead (loader-private.h; docs/IO.md).
 *
 * A loader's records are a pure function of (seed, step), so the engine knows
 * every group's future. For each group it keeps a window of units, one per
 * step from the oldest step not yet gathered: jobs (on the pool, like fills)
 * compute a step's records, find which are neither in the decoded-record cache
 * nor in the page cache, and submit those byte ranges to the daemon's one I/O
 * queue (io/ioq.h: sorted, merged, many reads deep, shared by every group),
 * `depth` steps ahead of the group's leading fill; and, for compressed
 * streams, plan each record's use in the decoded-record cache (cache.h)
 * `horizon` steps ahead, so the cache evicts by next use. A fill of a step
 * whose reads are in flight waits for them (the group is woken when they
 * end); a failed read fails that step's fill with its error. A step whose
 * job found most of its records not resident, and large (ZR_GATHER_PREAD_MIN), is
 * gathered with pread, not through the stores' mappings (work.cold): pages
 * the daemon never mapped are reclaimed without unmapping them, which beyond
 * memory was a large part of a large record's gather (docs/IO.md).
 *
 * Depth adapts: enough steps that the queue stays full (twice its depth in
 * reads), and enough that reads of the device's recent 99th-percentile
 * latency end before the group needs them (latency over the group's time per
 * step, plus two). The budget (bytes read ahead and not yet gathered, every
 * group together) bounds it; a group with nothing outstanding may always read
 * one step, so none starves, and a fill that would wait for the budget goes
 * ahead without its reads instead (its page faults read it). Reading ahead
 * changes when bytes are read, never which: a batch is the same with it, late,
 * cancelled or failed (then its fill reads what it needs itself).
 *
 * A warm step costs little: up to PF_SAMPLE of its records are asked whether
 * they are resident (cachestat, store.h), and if all are, nothing is read.
 * A mixture's step is its sources' records, each source's read (and planned)
 * in its own streams (sources.c).
 *
 * It assumes what loader.c assumes; the ranges name a store's descriptors,
 * valid while its dataset is open and no exclusive mutation runs, so reads
 * are submitted under the datasets' shared locks and cancelled (and waited
 * for) before a mutation starts (zr_loader_engine_quiesce()) and before a
 * group goes away. It does not read for READ requests (their gathers fault
 * their pages in).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "loader/loader-private.h"
#include "store/store.h"
#include "zr-proto.h"

/* Units per group: steps read ahead and planned ahead together, at most. */
#define PF_WINDOW 512
/* Steps read ahead of the leading fill: at least two (one being read while
 * the one before is gathered), at most 64 (then the budget is the bound). */
#define PF_DEPTH_MIN 2
#define PF_DEPTH_MAX 64
/* Records of a step asked first; if all are resident the step is warm. Each
 * ask is one system call (0.5 us), so a warm 1024-record step costs ~8 us of
 * asking instead of ~550 us; a step that is not warm is asked in full. */
#define PF_SAMPLE 16
/* Before a group's first steps complete, its time per step is taken as this:
 * only the order of plans of different groups depends on it. */
#define PF_PERIOD_INIT_NS (10 * 1000 * 1000ull)
/* Steps planned ahead at first cover this many times the cache's records. */
#define PF_PLAN_FACTOR 2
/* For a remote store's disk cache, whose horizon does not grow (set_horizon()):
 * uniform draws from 480 records, room for 160, batches of 64 (the bench's
 * 256 KiB rows) kept 0.90 of MIN's hits planning 2 times the cache's records
 * ahead and all of them from 4 times on (bench/suite/cachesim.py's trace); in
 * the bench the daemon went from 0.84 to 0.89 of MIN there, and from 0.84 to
 * 0.92 with 4 KiB records (docs/REMOTE.md, "Figures"). */
#define PF_PLAN_FACTOR_REMOTE 4
/* All groups' planned uses together: at most this many times the cache's
 * records, plus a constant (64 bytes a use: for 4 KiB records an eighth of
 * the cache's budget). */
#define PF_PLAN_TOTAL_FACTOR 8
#define PF_PLAN_TOTAL_MIN 65536
/* Steps a group may plan per step it gathers, and at most in hand. Planning
 * catches up with the horizon at this pace rather than all at once: a step of
 * 256 records takes ~0.3 ms to plan, and a new loader's horizon of 500 steps
 * planned before its first fill made that batch wait 100-200 ms (2 ms
 * without). A group starts with no credit, so its first fill goes first. */
#define PF_PLAN_PER_FILL 4
#define PF_PLAN_CREDIT_MAX 16
/* A group whose jobs found PF_WARM_RUN steps in a row resident reads ahead
 * one step in PF_WARM_EVERY from then on, until a job finds a step that is
 * not: a job per step costs a worker's wake-up, a residency check and the
 * hand-offs around it (a small warm batch's largest fixed cost, bench/README.md
 * "Small batches"), to learn what the last steps said already. The steps
 * between are gathered without reading ahead: if the data left the page cache
 * meanwhile, at most PF_WARM_EVERY steps fault their pages in, and the next
 * job finds it and reads ahead every step again. */
#define PF_WARM_RUN 8
#define PF_WARM_EVERY 16

static uint64_t max_u64(uint64_t a, uint64_t b) {
        return a > b ? a : b;
}

static uint64_t window_hi(const pf_state *p) {
        return max_u64(p->io_hi, p->plan_hi);
}

static pf_unit *unit_of(group *g, uint64_t step) {
        pf_state *p = &g->pf;
        if (!p->units || step < p->lo || step >= window_hi(p))
                return NULL;
        return &p->units[step % p->cap];
}

/* The next step the group's leading member will claim. */
static uint64_t lead_step(const group *g) {
        uint64_t s = 0;
        for (const zr_loader *m = g->members; m; m = m->g_next)
                if (!m->closing)
                        s = max_u64(s, m->start + m->fill_k);
        return s;
}

/* Streams of a batch whose records are compressed (a mixture's: on average
 * over its sources, rounded up). */
static int compressed_streams(const zr_loader *l) {
        size_t k = 0;
        for (size_t i = 0; i < l->nall; i++)
                k += l->streams[i].schema->codec != ZR_CODEC_RAW;
        return (int)((k + loader_sources(l) - 1) / loader_sources(l));
}

/* Records of the cache's budget, as this loader's records go. */
static uint64_t cache_records(zr_loader_engine *e, const zr_loader *l) {
        zr_rcache_stats cs;
        uint64_t rec = 0;
        int k = 0;

        zr_rcache_stats_get(e->cache, &cs);
        for (size_t i = 0; i < l->nall; i++) {
                const lstream *st = &l->streams[i];
                if (st->schema->codec == ZR_CODEC_RAW)
                        continue;
                rec += st->image ? st->in_capacity / (2 * l->sp.batch_size) :
                       st->ragged ? st->capacity / (2 * l->sp.batch_size) : st->item_bytes;
                k++;
        }
        if (!k)
                return 0;
        return cs.budget / (rec / (uint64_t)k + ZR_RCACHE_ENTRY_OVERHEAD);
}

/* Streams of l read from object storage (a mixture's: any source's). */
static int remote_streams(const zr_loader *l) {
        int k = 0;
        for (size_t i = 0; i < l->nall; i++)
                k += zr_dataset_remote(l->streams[i].s.ds) != NULL;
        return k;
}

/* Records of the disk cache's budget (dataset/rdataset.h), as l's remote
 * records go; 0 without remote streams. */
static uint64_t remote_records(const zr_loader *l) {
        uint64_t budget = 0, rec = 0;
        int k = 0;
        for (size_t i = 0; i < l->nall; i++) {
                const lstream *st = &l->streams[i];
                if (!zr_dataset_remote(st->s.ds))
                        continue;
                budget = zr_rdataset_cache_budget(st->s.ds);
                rec += st->ragged ? st->capacity / (2 * l->sp.batch_size) : st->item_bytes;
                k++;
        }
        if (!k || !rec)
                return 0;
        rec /= (uint64_t)k;
        return budget / (rec ? rec : 1);
}

/* Steps planned ahead. MIN keeps the records used soonest, and how far ahead
 * "soonest" reaches depends on the trace: for uniform draws from 4,000 records
 * with room for 400 in batches of 64, planning 13 steps (twice the cache's
 * records) gave 4,583 hits over 300 steps, 30 steps 7,047, 100 steps 7,387,
 * MIN's own count (tests/loader/test-loader-prefetch.c simulates both). So the
 * horizon starts at twice the cache's records and grows by a quarter each
 * time the cache is full but still holds records with no planned use (MIN
 * would hold a planned one in their place: a longer horizon names it), up to
 * the window and the plans' cap. */
static void set_horizon(zr_loader_engine *e, const zr_loader *l, pf_state *p) {
        uint64_t per_step = l->sp.batch_size * (uint64_t)compressed_streams(l);
        uint64_t recs = cache_records(e, l), h = p->horizon;
        uint64_t rper = l->sp.batch_size * (uint64_t)remote_streams(l), rrecs = remote_records(l);
        zr_rcache_stats cs;

        p->plan_cap = PF_PLAN_TOTAL_FACTOR * (recs > rrecs ? recs : rrecs) + PF_PLAN_TOTAL_MIN;
        if (rper && rrecs) {
                /* a remote store's disk cache: MIN over 4 times its records */
                uint64_t rh = (PF_PLAN_FACTOR_REMOTE * rrecs + rper - 1) / rper;
                if (!per_step || !recs) {
                        if (rh < p->depth)
                                rh = p->depth;
                        p->horizon = (uint32_t)(rh < PF_WINDOW - 1 ? rh : PF_WINDOW - 1);
                        return;
                }
                if (h < rh)
                        h = rh;
        }
        if (!per_step || !recs) {
                p->horizon = 0;
                return;
        }
        zr_rcache_stats_get(e->cache, &cs);
        if (h == 0)
                h = (PF_PLAN_FACTOR * recs + per_step - 1) / per_step;
        else if (cs.entries + cs.entries / 64 >= recs && cs.unplanned > cs.entries / 16)
                h += h / 4 + 1;
        if (h < p->depth)
                h = p->depth;
        p->horizon = (uint32_t)(h < PF_WINDOW - 1 ? h : PF_WINDOW - 1);
}

int zr_pf_group_init(zr_loader_engine *e, group *g, const zr_loader *l) {
        pf_state *p = &g->pf;
        uint64_t first = l->start + l->fill_k;

        *p = (pf_state){ .e = e };
        /* a packed stream reads pieces of documents the sampler does not name:
         * not read ahead (pack.h) */
        for (size_t i = 0; i < l->nstreams; i++)
                if (l->streams[i].pack)
                        return 0;
        p->units = calloc(PF_WINDOW, sizeof(*p->units));
        if (!p->units)
                return -ENOMEM;
        p->cap = PF_WINDOW;
        p->lo = p->io_hi = p->plan_hi = first;
        p->owner = ++e->next_owner;
        p->period_ns = PF_PERIOD_INIT_NS;
        p->depth = PF_DEPTH_MIN;
        p->remote = remote_streams(l) > 0;
        set_horizon(e, l, p);
        return 0;
}

static void release_remote(pf_unit *u);

/* One of a READING unit's parts ended (its job, its read batch, one of its
 * fetches): with result < 0 the step fails with it (a cancel does not). The
 * last part finishes the unit and wakes its group. Mutex held. */
static void unit_part_done(zr_loader_engine *e, pf_unit *u, int result) {
        group *g = u->g;
        if (result < 0 && result != -ECANCELED && !u->error) {
                u->error = -result;
                e->t.prefetch_errors++;
        }
        if (result == -ECANCELED)
                e->t.prefetch_cancelled++;
        if (atomic_fetch_sub(&u->pending, 1) != 1)
                return;
        u->io = u->error ? PF_IO_FAILED : PF_IO_DONE;
        if (u->consumed)
                release_remote(u); /* its fill went ahead without it */
        g->pf.io_inflight--;
        if (!u->job)
                zr_group_wake(e, g);
        pthread_cond_broadcast(&e->idle);
}

/* The fetcher's callback of a unit's fetch (its thread; no lock held). */
static void pf_remote_done(void *arg, int rc, const zr_error *err) {
        pf_rwait *w = arg;
        pf_unit *u = w->u;
        zr_loader_engine *e = u->g->pf.e;

        (void)err;
        pthread_mutex_lock(&e->mutex);
        w->done = 1;
        unit_part_done(e, u, rc);
        pthread_mutex_unlock(&e->mutex);
}

/* Gives up the unit's fetches that have not ended (a fetch whose callback runs
 * already ends by itself). Mutex held. */
static void cancel_fetches(zr_loader_engine *e, pf_unit *u) {
        pf_remote *r = u->remote;
        for (size_t i = 0; r && i < r->n; i++) {
                pf_rwait *w = &r->waits[i];
                if (w->done || !w->w || !zr_rdataset_cancel(w->ds, w->w))
                        continue;
                w->done = 1;
                unit_part_done(e, u, -ECANCELED);
        }
}

/* Lets the disk cache have back what the unit's fetches kept (its step ran,
 * or its group went away). Mutex held: the mirrors' mutexes come after it. */
static void release_remote(pf_unit *u) {
        pf_remote *r = u->remote;
        for (size_t i = 0; r && i < r->n; i++)
                zr_rdataset_release(&r->waits[i].pin);
        free(r);
        u->remote = NULL;
}

void zr_pf_group_fini(zr_loader_engine *e, group *g) {
        pf_state *p = &g->pf;

        if (!p->units)
                return;
        while (p->job)
                pthread_cond_wait(&e->idle, &e->mutex);
        for (uint64_t s = p->lo; s < window_hi(p); s++) {
                pf_unit *u = &p->units[s % p->cap];
                if (u->io == PF_IO_READING && u->ioq_id)
                        zr_ioq_cancel(e->ioq, u->ioq_id);
                if (u->io == PF_IO_READING)
                        cancel_fetches(e, u);
        }
        while (p->io_inflight > 0)
                pthread_cond_wait(&e->idle, &e->mutex);
        for (uint64_t s = p->lo; s < window_hi(p); s++) {
                atomic_fetch_sub(&e->pf_bytes, p->units[s % p->cap].bytes);
                release_remote(&p->units[s % p->cap]);
        }
        free(p->units);
        p->units = NULL;
}

void zr_pf_group_drop_plans(zr_loader_engine *e, uint64_t owner, const zr_loader *l) {
        if (!owner)
                return;
        zr_rcache_unplan_owner(e->cache, owner);
        for (size_t i = 0; i < l->nall; i++) /* remote stores: their disk cache's */
                zr_rdataset_unplan_owner(l->streams[i].s.ds, owner);
}

/* Where the next read-ahead and the next plan would go, or UINT64_MAX. */
static uint64_t next_io(zr_loader_engine *e, const group *g, uint64_t lead) {
        const pf_state *p = &g->pf;
        /* warm (PF_WARM_RUN): the next step read ahead is quiet_until, a
         * depth ahead of the fills as any, so no fill waits for its job */
        uint64_t s = max_u64(max_u64(p->io_hi, lead), p->quiet_until);

        uint64_t budget = atomic_load(&e->pf_budget);

        if (!e->ioq || budget == 0 || s >= lead + p->depth)
                return UINT64_MAX;
        /* the budget (the job reserves exactly): a group with nothing held
         * reads one step anyway */
        if (atomic_load(&p->held) > 0 && atomic_load(&e->pf_bytes) + p->bytes_per_step > budget)
                return UINT64_MAX;
        return s;
}

static uint64_t next_plan(zr_loader_engine *e, const group *g, uint64_t lead) {
        const pf_state *p = &g->pf;
        uint64_t s = max_u64(p->plan_hi, lead);
        zr_rcache_stats cs;

        if (p->horizon == 0 || s >= lead + p->horizon || p->plan_credit == 0)
                return UINT64_MAX;
        zr_rcache_stats_get(e->cache, &cs);
        if ((cs.budget == 0 && !p->remote) || cs.planned > p->plan_cap)
                return UINT64_MAX;
        return s;
}

/* A step s may get a unit now: the window has room for it (an empty window
 * moves to it). */
static int fits(const pf_state *p, uint64_t s) {
        return p->lo == window_hi(p) || s - p->lo < p->cap;
}

int zr_pf_job_due(zr_loader_engine *e, const zr_loader *l) {
        const group *g = l->g;
        const pf_state *p = &g->pf;
        uint64_t lead, s;

        if (!p->units || p->job || l->closing || l->paused)
                return 0;
        lead = lead_step(g);
        s = next_io(e, g, lead);
        if (s != UINT64_MAX && fits(p, s))
                return 1;
        s = next_plan(e, g, lead);
        return s != UINT64_MAX && fits(p, s);
}

void zr_pf_job_start(zr_loader_engine *e, zr_loader *l, pf_job *j) {
        group *g = l->g;
        pf_state *p = &g->pf;
        uint64_t lead = lead_step(g), s, now = zr_loader_now_ns();
        pf_unit *u;

        *j = (pf_job){ .l = l };
        s = next_io(e, g, lead);
        if (s != UINT64_MAX && fits(p, s)) {
                j->do_io = 1;
                j->do_plan = s >= p->plan_hi && next_plan(e, g, lead) != UINT64_MAX;
        } else {
                s = next_plan(e, g, lead);
                j->do_plan = 1;
        }
        if (p->lo == window_hi(p)) {
                /* an empty window moves to the step */
                p->lo = p->io_hi = p->plan_hi = s;
        }
        /* steps the leader claimed without reading ahead: given up at once */
        for (uint64_t t = window_hi(p); t < s; t++) {
                u = &p->units[t % p->cap];
                *u = (pf_unit){ .g = g, .step = t, .io = PF_IO_DONE, .consumed = 1 };
        }
        if (s >= window_hi(p)) {
                u = &p->units[s % p->cap];
                *u = (pf_unit){ .g = g, .step = s };
        }
        u = &p->units[s % p->cap];
        u->job = 1;
        if (j->do_io) {
                u->io = PF_IO_READING;
                atomic_store(&u->pending, 1); /* the job's own part */
                p->io_inflight++;
                p->io_hi = max_u64(p->io_hi, s + 1);
        }
        if (j->do_plan) {
                u->planned = 1;
                p->plan_hi = max_u64(p->plan_hi, s + 1);
                p->plan_credit--;
        }
        p->io_hi = max_u64(p->io_hi, p->lo);
        p->plan_hi = max_u64(p->plan_hi, p->lo);
        p->job = 1;
        l->inflight++;
        j->u = u;
        /* a plan's time orders it against other groups' plans; within the
         * group a later step is always later, whatever the period did */
        j->eta_ns = now + (s > lead ? s - lead : 0) * p->period_ns;
        if (j->do_plan) {
                if (j->eta_ns <= p->last_eta_ns)
                        j->eta_ns = p->last_eta_ns + 1;
                p->last_eta_ns = j->eta_ns;
        }
}

/* The I/O queue's callback (its dispatcher thread). */
static void pf_done(void *arg, uint64_t id, int result, uint64_t bytes) {
        pf_unit *u = arg;
        zr_loader_engine *e = u->g->pf.e;

        (void)id;
        (void)bytes;
        pthread_mutex_lock(&e->mutex);
        unit_part_done(e, u, result);
        pthread_mutex_unlock(&e->mutex);
}

/* Takes the shared lock of every distinct dataset of l's streams, trying.
 * Returns 0, or -EBUSY with none held (a mutation holds or waits for one). */
static int lock_streams(const zr_loader *l, zr_dataset **held, size_t *nheld) {
        *nheld = 0;
        for (size_t i = 0; i < l->nall; i++) {
                zr_dataset *ds = l->streams[i].s.ds;
                size_t k;
                for (k = 0; k < *nheld && held[k] != ds; k++)
                        ;
                if (k < *nheld)
                        continue;
                if (zr_dataset_trylock_shared(ds) < 0) {
                        while (*nheld > 0)
                                zr_dataset_unlock(held[--*nheld]);
                        return -EBUSY;
                }
                held[(*nheld)++] = ds;
        }
        return 0;
}

/* The records of stream st of the batch idx[0..n) that must be read: neither
 * in the decoded-record cache nor resident. Appends their ranges to r (room
 * for n more) and counts in j. Returns the number of ranges added. With
 * direct_ok (the loader's streams can be read directly), a step whose sample
 * is not resident at all (or any step, ZR_DIRECT_EVERY) counts every record
 * as missing and adds no range: it will be read directly. */
static size_t stream_ranges(zr_loader_engine *e, const lstream *st, const uint64_t *idx,
                            size_t n, zr_rcache_key *keys, uint8_t *flags, zr_loc *locs,
                            zr_io_range *r, int direct_ok, pf_job *j) {
        zr_store *s = zr_dataset_store(st->s.ds);
        size_t m = 0, k = 0, got = 0;

        if (zr_store_locate(s, idx, n, locs, NULL) < 0)
                return 0; /* the fill says what is wrong */
        if (st->schema->codec != ZR_CODEC_RAW) {
                for (size_t i = 0; i < n; i++)
                        keys[i] = (zr_rcache_key){ zr_dataset_id(st->s.ds), st->open_gen, idx[i] };
                j->cached += zr_rcache_contains(e->cache, keys, n, flags);
                for (size_t i = 0; i < n; i++)
                        if (!flags[i])
                                locs[m++] = locs[i];
        } else {
                m = n;
        }
        if (m == 0)
                return 0;
        k = m < PF_SAMPLE ? m : PF_SAMPLE;
        size_t sampled = direct_ok == ZR_DIRECT_EVERY ? 0 : zr_store_resident(s, locs, k, NULL);
        if (sampled == k) {
                /* the sample is resident: the step is warm */
                j->resident += m;
                j->warm = 1;
                return 0;
        }
        if (sampled == 0 && direct_ok) {
                /* none of the sample is: the step will be read directly, every
                 * record of it, so there is nothing more to ask (a 1024-record
                 * step's cachestat calls cost about 0.5 ms) */
                j->records += m;
                for (size_t i = 0; i < m; i++)
                        j->missing_bytes += locs[i].phys_length;
                return 0;
        }
        j->resident += zr_store_resident(s, locs, m, flags);
        k = 0;
        for (size_t i = 0; i < m; i++) {
                if (!flags[i]) {
                        j->missing_bytes += locs[i].phys_length;
                        locs[k++] = locs[i];
                }
        }
        j->records += k;
        if (zr_store_io_ranges(s, locs, k, r, &got, NULL) < 0)
                return 0;
        return got;
}

/* Reserves the bytes of the longest prefix of r[0..n) that fits in the budget
 * (all of them for a group that holds nothing: it always reads one step);
 * returns its length and adds its bytes to *bytes. Lock-free. */
static size_t reserve(zr_loader_engine *e, pf_state *p, const zr_io_range *r, size_t n,
                      uint64_t *bytes) {
        uint64_t budget = atomic_load(&e->pf_budget), cur = atomic_load(&e->pf_bytes);
        uint64_t want = 0, take;
        size_t k;

        for (;;) {
                uint64_t room = budget > cur ? budget - cur : 0;
                int first = atomic_load(&p->held) == 0;
                want = 0;
                for (k = 0; k < n; k++) {
                        if (!first && want + r[k].length > room)
                                break;
                        want += r[k].length;
                }
                take = want;
                if (atomic_compare_exchange_weak(&e->pf_bytes, &cur, cur + take))
                        break;
        }
        atomic_fetch_add(&p->held, take);
        cur += take;
        for (uint64_t peak = atomic_load(&e->pf_peak);
             cur > peak && !atomic_compare_exchange_weak(&e->pf_peak, &peak, cur);)
                ;
        *bytes += take;
        return k;
}

/* Gives back what *bytes holds against the budget; zeroes it. */
static void release(zr_loader_engine *e, pf_state *p, uint64_t *bytes) {
        atomic_fetch_sub(&e->pf_bytes, *bytes);
        atomic_fetch_sub(&p->held, *bytes);
        *bytes = 0;
}

/* The remote streams' records of the step that are neither decoded in the
 * cache nor in the disk cache are handed to the fetcher, with the step's time
 * as their priority: one wait per stream, a part of the unit each
 * (unit_part_done()). Bytes within the budget, as the reads of the queue. */
static void fetch_remote(zr_loader_engine *e, zr_loader *l, const step_records *rec,
                         pf_job *j) {
        pf_state *p = &l->g->pf;
        size_t n = l->sp.batch_size, nrem = (size_t)remote_streams(l);
        pf_remote *rm = calloc(1, sizeof(*rm) + nrem * sizeof(rm->waits[0]));
        uint64_t *idx = malloc(n * sizeof(*idx));
        zr_loc *locs = malloc(n * sizeof(*locs));
        zr_rcache_key *keys = malloc(n * sizeof(*keys));
        uint8_t *flags = malloc(n);

        if (!rm || !idx || !locs || !keys || !flags)
                goto out;
        for (size_t i = 0; i < l->nall; i++) {
                const lstream *st = &l->streams[i];
                uint32_t k = (uint32_t)(i / l->nstreams), m = rec->from[k + 1] - rec->from[k];
                const uint64_t *all = rec->by_source + rec->from[k];
                size_t want = 0;
                if (m == 0 || !zr_dataset_remote(st->s.ds) ||
                    zr_dataset_generation(st->s.ds) != st->open_gen)
                        continue;
                if (zr_store_locate(zr_dataset_store(st->s.ds), all, m, locs, NULL) < 0)
                        continue; /* the fill says what is wrong */
                if (st->schema->codec != ZR_CODEC_RAW) {
                        for (size_t x = 0; x < m; x++)
                                keys[x] = (zr_rcache_key){ zr_dataset_id(st->s.ds), st->open_gen,
                                                           all[x] };
                        j->cached += zr_rcache_contains(e->cache, keys, m, flags);
                } else {
                        memset(flags, 0, m);
                }
                for (size_t x = 0; x < m; x++)
                        if (!flags[x]) {
                                idx[want] = all[x];
                                locs[want++] = locs[x];
                        }
                size_t miss = zr_rdataset_missing(st->s.ds, idx, locs, want, flags);
                j->resident += want - miss;
                if (miss == 0) {
                        j->warm = 1;
                        continue;
                }
                /* the missing ones, within the budget (a group holding nothing
                 * always fetches its step) */
                zr_io_range *rr = malloc(miss * sizeof(*rr));
                size_t k2 = 0;
                for (size_t x = 0; rr && x < want; x++)
                        if (flags[x]) {
                                rr[k2] = (zr_io_range){ .fd = -1, .offset = locs[x].offset,
                                                        .length = locs[x].phys_length };
                                idx[k2] = idx[x];
                                locs[k2++] = locs[x];
                        }
                size_t take = rr ? reserve(e, p, rr, k2, &j->bytes) : 0;
                free(rr);
                if (take == 0)
                        continue;
                pf_rwait *w = &rm->waits[rm->n++];
                w->u = j->u;
                w->ds = st->s.ds;
                /* kept until the step's fill ran: what arrives early is not
                 * evicted before it is read (the budget bounds them) */
                (void)zr_rdataset_pin(st->s.ds, idx, locs, take, &w->pin);
                j->records += take;
                atomic_fetch_add(&j->u->pending, 1);
                int r = zr_rdataset_fetch(st->s.ds, idx, locs, take, j->eta_ns, pf_remote_done, w,
                                          &j->remote_bytes, &w->w);
                if (r != 0) {
                        /* nothing to fetch after all, or no memory: no callback
                         * (the job's own part keeps the unit from finishing) */
                        w->done = 1;
                        atomic_fetch_sub(&j->u->pending, 1);
                        continue;
                }
                j->submitted = 1;
        }
        if (rm->n) {
                j->u->remote = rm;
                rm = NULL;
        }
out:
        free(rm);
        free(flags);
        free(keys);
        free(locs);
        free(idx);
}

void zr_pf_job_run(zr_loader_engine *e, pf_job *j) {
        zr_loader *l = j->l;
        pf_state *p = &l->g->pf;
        size_t n = l->sp.batch_size, nr = 0, nheld = 0;
        zr_dataset **held = NULL;
        step_records rec = {0};
        zr_rcache_key *keys = NULL;
        uint8_t *flags = NULL;
        zr_loc *locs = NULL;
        zr_io_range *r = NULL;

        keys = malloc(n * sizeof(*keys));
        flags = malloc(n);
        if (!keys || !flags || zr_step_records_init(l, &rec) < 0)
                goto out;
        /* the step's records, each source's together (a plain loader: one) */
        if (zr_step_records_get(l, j->u->step, &rec, 1, NULL) < 0)
                goto out; /* the fill says what is wrong */
        if (j->do_plan) {
                for (size_t i = 0; i < l->nall; i++) {
                        const lstream *st = &l->streams[i];
                        uint32_t k = (uint32_t)(i / l->nstreams), m = rec.from[k + 1] - rec.from[k];
                        const uint64_t *idx = rec.by_source + rec.from[k];
                        if (m == 0 || zr_dataset_generation(st->s.ds) != st->open_gen)
                                continue;
                        /* a remote store's disk cache evicts by the same plans */
                        if (zr_dataset_remote(st->s.ds))
                                zr_rdataset_plan(st->s.ds, p->owner, idx, m, j->eta_ns);
                        if (st->schema->codec == ZR_CODEC_RAW)
                                continue;
                        for (size_t x = 0; x < m; x++)
                                keys[x] = (zr_rcache_key){ zr_dataset_id(st->s.ds), st->open_gen,
                                                           idx[x] };
                        zr_rcache_plan(e->cache, p->owner, keys, m, j->eta_ns);
                }
        }
        if (!j->do_io)
                goto out;
        locs = malloc(n * sizeof(*locs));
        r = malloc(n * l->nstreams * sizeof(*r));
        held = malloc(l->nall * sizeof(*held));
        if (!locs || !r || !held)
                goto out;
        if (lock_streams(l, held, &nheld) < 0) {
                j->busy = 1;
                goto out;
        }
        int small;
        int direct_ok = (int)zr_fill_direct_mode(l, &small);
        for (size_t i = 0; i < l->nall; i++) {
                const lstream *st = &l->streams[i];
                uint32_t k = (uint32_t)(i / l->nstreams), m = rec.from[k + 1] - rec.from[k];
                if (m == 0 || zr_dataset_generation(st->s.ds) != st->open_gen ||
                    zr_dataset_remote(st->s.ds))
                        continue;
                nr += stream_ranges(e, st, rec.by_source + rec.from[k], m, keys, flags, locs,
                                    r + nr, direct_ok, j);
        }
        if (p->remote)
                fetch_remote(e, l, &rec, j);
        /* its fill reads with pread (fill.c) */
        j->cold = zr_gather_cold(j->records, j->records + j->resident, j->missing_bytes);
        /* or, mostly not resident and its streams direct-capable: with O_DIRECT
         * straight into the slot (fill-direct.c), so nothing is read ahead
         * through the page cache and nothing taken from the budget */
        j->direct = j->records > 0 && 2 * j->records >= j->records + j->resident && direct_ok;
        /* or would be, but its stores fit: read through the page cache, where
         * they stay (docs/IO.md, "Which steps") */
        j->fits = j->records > 0 && 2 * j->records >= j->records + j->resident && small;
        if (j->direct)
                nr = 0;
        nr = reserve(e, p, r, nr, &j->bytes);
        atomic_fetch_add(&e->pf_records, j->records);
        if (nr > 0) {
                j->reads = nr;
                /* under the shared locks: no mutation closes a descriptor
                 * before the queue has the batch (it cancels it first) */
                atomic_fetch_add(&j->u->pending, 1); /* the batch's part */
                if (zr_ioq_submit(e->ioq, r, nr, pf_done, j->u, &j->id) == 0) {
                        j->submitted = 1;
                } else {
                        atomic_fetch_sub(&j->u->pending, 1);
                        release(e, p, &j->bytes);
                }
        }
        while (nheld > 0)
                zr_dataset_unlock(held[--nheld]);
out:
        free(held);
        free(r);
        free(locs);
        free(flags);
        free(keys);
        zr_step_records_free(&rec);
}

static uint64_t ewma(uint64_t avg, uint64_t v) {
        return (7 * avg + v) / 8;
}

/* Steps read ahead: see the top. */
static void set_depth(zr_loader_engine *e, pf_state *p) {
        zr_ioq_stats st;
        uint64_t d = PF_DEPTH_MIN;

        zr_ioq_get_stats(e->ioq, &st);
        if (p->reads_per_step > 0)
                d = max_u64(d, (2 * (uint64_t)st.depth + p->reads_per_step - 1) /
                                       p->reads_per_step);
        if (p->period_ns > 0)
                d = max_u64(d, st.lat_p99_ns / p->period_ns + 2);
        p->depth = (uint32_t)(d < PF_DEPTH_MAX ? d : PF_DEPTH_MAX);
}

void zr_pf_job_end(zr_loader_engine *e, pf_job *j) {
        zr_loader *l = j->l;
        group *g = l->g;
        pf_state *p = &g->pf;
        pf_unit *u = j->u;

        u->job = 0;
        p->job = 0;
        l->inflight--;
        if (j->do_io) {
                u->bytes = j->bytes;
                u->cold = (uint8_t)j->cold;
                u->direct = (uint8_t)j->direct;
                e->t.prefetch_cold += (uint64_t)(j->cold && !j->direct);
                e->t.prefetch_direct += (uint64_t)j->direct;
                e->t.prefetch_fits += (uint64_t)j->fits;
                if (j->submitted) {
                        u->ioq_id = j->id;
                        u->submit_ns = zr_loader_now_ns();
                        e->t.prefetch_steps++;
                        if (atomic_load(&e->telemetry))
                                zr_tel_add(&l->tel, u->submit_ns, ZR_TEL_DEVICE_BYTES, j->bytes);
                } else {
                        e->t.prefetch_warm += j->warm;
                        e->t.prefetch_busy += j->busy;
                }
                unit_part_done(e, u, 0); /* the job's own part (its reads may go on) */
                e->t.prefetch_reads += j->reads;
                e->t.prefetch_read_bytes += j->bytes;
                e->t.prefetch_resident += j->resident;
                e->t.prefetch_cached += j->cached;
                /* warm: nothing to read, nothing direct, nothing fetched; a
                 * group that plans its cache uses reads ahead every step (the
                 * steps a sparse job skips would go unplanned) */
                if (!j->busy && j->records == 0 && !p->remote && p->horizon == 0) {
                        if (++p->warm_run >= PF_WARM_RUN)
                                p->quiet_until = u->step + PF_WARM_EVERY;
                } else if (!j->busy) {
                        p->warm_run = 0;
                        p->quiet_until = 0;
                }
                p->reads_per_step = ewma(p->reads_per_step, j->reads);
                p->bytes_per_step = ewma(p->bytes_per_step, j->bytes);
                set_depth(e, p);
                if (p->depth > e->t.prefetch_depth)
                        e->t.prefetch_depth = p->depth;
        }
        if (j->do_plan)
                e->t.planned_steps++;
        set_horizon(e, l, p);
        zr_group_wake(e, g);
        pthread_cond_broadcast(&e->idle);
}

/* Telemetry: a fill of `step` waits for reads ahead from now on, unless it
 * already did. */
static void reads_awaited(zr_loader_engine *e, pf_state *p, uint64_t step) {
        if ((p->wait_ns && p->wait_step == step) || !atomic_load(&e->telemetry))
                return;
        p->wait_step = step;
        p->wait_ns = zr_loader_now_ns();
}

int zr_pf_ready(zr_loader_engine *e, const zr_loader *l, uint64_t step, work *w) {
        group *g = l->g;
        pf_state *p = &g->pf;
        pf_unit *u;

        w->io_error = 0;
        w->cold = 0;
        w->direct = 0;
        w->plan_owner = 0;
        if (!p->units)
                return 1;
        u = unit_of(g, step);
        if (!u) {
                /* past the window: wait for the job that will read it, if any */
                if (step >= window_hi(p) && (p->job || zr_pf_job_due(e, l))) {
                        reads_awaited(e, p, step);
                        return 0;
                }
                return 1;
        }
        if (u->job || u->io == PF_IO_READING) {
                reads_awaited(e, p, step);
                u->waited = 1;
                return 0;
        }
        if (u->io == PF_IO_FAILED)
                w->io_error = u->error;
        w->cold = u->cold;
        w->direct = u->direct;
        if (u->planned && !u->consumed)
                w->plan_owner = p->owner;
        return 1;
}

void zr_pf_claimed(zr_loader_engine *e, zr_loader *l, uint64_t step) {
        pf_state *p = &l->g->pf;
        pf_unit *u = unit_of(l->g, step);

        if (p->wait_ns && p->wait_step == step) {
                uint64_t now = zr_loader_now_ns();
                zr_tel_add(&l->tel, now, ZR_TEL_IO_WAIT_NS, now - p->wait_ns);
                p->wait_ns = 0;
        }
        if (!u)
                return;
        release(e, &l->g->pf, &u->bytes);
        if (u->waited) {
                u->waited = 0;
                l->c.io_waits++;
                e->t.prefetch_waits++;
        }
}

void zr_pf_consumed(zr_loader_engine *e, group *g, uint64_t step) {
        pf_state *p = &g->pf;
        pf_unit *u = unit_of(g, step);
        uint64_t now;

        /* every fill earns planning, whether or not its step had a unit */
        p->plan_credit = p->plan_credit + PF_PLAN_PER_FILL < PF_PLAN_CREDIT_MAX
                                 ? p->plan_credit + PF_PLAN_PER_FILL : PF_PLAN_CREDIT_MAX;
        if (!u || u->consumed)
                return;
        u->consumed = 1;
        release(e, p, &u->bytes);
        if (u->io != PF_IO_READING)
                release_remote(u); /* still fetching (a fill that went without): at its end */
        now = zr_loader_now_ns();
        if (p->last_done_ns)
                p->period_ns = ewma(p->period_ns, now - p->last_done_ns);
        p->last_done_ns = now;
        while (p->lo < window_hi(p)) {
                pf_unit *v = &p->units[p->lo % p->cap];
                if (!v->consumed || v->job || v->io == PF_IO_READING)
                        break;
                p->lo++;
        }
        p->io_hi = max_u64(p->io_hi, p->lo);
        p->plan_hi = max_u64(p->plan_hi, p->lo);
}

int zr_pf_warm(const zr_loader *l) {
        const pf_state *p = &l->g->pf;
        return p->units && p->warm_run >= PF_WARM_RUN && !p->io_inflight && !p->job;
}

static int group_reads(const group *g, const zr_dataset *ds) {
        const zr_loader *m = g->members;
        if (!m || !g->pf.units)
                return 0;
        for (size_t i = 0; i < m->nall; i++)
                if (m->streams[i].s.ds == ds)
                        return 1;
        return 0;
}

void zr_pf_quiesce(zr_loader_engine *e, const zr_dataset *ds) {
        for (;;) {
                int waited = 0;
                for (group *g = e->groups; g && !waited; g = g->next) {
                        pf_state *p = &g->pf;
                        if (!group_reads(g, ds))
                                continue;
                        if (p->job) {
                                pthread_cond_wait(&e->idle, &e->mutex);
                                waited = 1;
                                break;
                        }
                        for (uint64_t s = p->lo; s < window_hi(p); s++) {
                                pf_unit *u = &p->units[s % p->cap];
                                if (u->io == PF_IO_READING && u->ioq_id)
                                        zr_ioq_cancel(e->ioq, u->ioq_id);
                        }
                        if (p->io_inflight > 0) {
                                pthread_cond_wait(&e->idle, &e->mutex);
                                waited = 1;
                        }
                }
                if (!waited)
                        return;
        }
}
