/* loader.c: the loader engine's scheduler, and the engine and its loaders as
 * loader.h shows them (see loader.h for the model, the threads, what is
 * shared and the lock order; loader-private.h for how the files divide it).
 *
 * Pool workers run drain tasks that claim one (loader, slot, step) at a time
 * under the engine mutex, fill it without the mutex (fill.c) and complete it
 * under the mutex again; the loop thread polls, releases, opens and frees. A
 * fill writes only the slot it claimed. A fill never blocks on anything but
 * the pool: stream locks are only tried (a busy one parks the fill with its
 * claim, and the retry thread or zr_loader_engine_resume() retries it).
 *
 * It assumes the daemon keeps each stream's dataset alive for the loader's
 * lifetime, bumps its generation under the exclusive lock on every mutation
 * (dataset.h), and calls zr_loader_engine_resume() (or _drop_dataset())
 * after releasing an exclusive lock. It does not know about sockets, messages
 * or handles; it does not limit how many loaders exist (the daemon's limits
 * do); it shares worker time per batch, not per byte (a loader of big batches
 * gets more time per turn than one of small batches).
 */
#include "loader/loader-private.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "zr-proto.h"
#include "dataset/ragged.h"

/* While a gather is parked on a stream's lock (a mutation holds it), the
 * engine's retry thread retries every parked gather this often. A mutation
 * holds a lock for milliseconds (a delete) to seconds (a compaction); a retry
 * costs one trylock per parked fill, and a loader waits at most this long
 * after the lock goes (zr_loader_engine_resume() makes it immediate). */
#define LOADER_PARK_RETRY_NS (2 * 1000 * 1000)

/* A worker with nothing queued whose last fill left a loader with control
 * memory without a free slot looks at its release count this long before it
 * sleeps (ctl_spin()): a consumer of small batches releases one every few
 * tens of microseconds, and the look costs no system call on either side
 * where a DOORBELL costs one on each, and a worker's wake-up more. */
#define LOADER_CTL_SPIN_NS (50 * 1000)

/* ---- the scheduler (engine mutex held) ----------------------------------------- */

static void runq_remove(zr_loader_engine *e, zr_loader *l) {
        if (!l->in_runq)
                return;
        if (l->run_prev)
                l->run_prev->run_next = l->run_next;
        else
                e->run_head = l->run_next;
        if (l->run_next)
                l->run_next->run_prev = l->run_prev;
        else
                e->run_tail = l->run_prev;
        l->run_prev = l->run_next = NULL;
        l->in_runq = 0;
}

static zr_loader *runq_pop(zr_loader_engine *e) {
        zr_loader *l = e->run_head;
        if (l)
                runq_remove(e, l);
        return l;
}

static void readyq_remove(zr_loader_engine *e, zr_loader *l) {
        zr_loader *prev = NULL;

        if (!l->in_readyq)
                return;
        for (zr_loader *p = e->ready_head; p; prev = p, p = p->ready_next) {
                if (p != l)
                        continue;
                if (prev)
                        prev->ready_next = l->ready_next;
                else
                        e->ready_head = l->ready_next;
                if (e->ready_tail == l)
                        e->ready_tail = prev;
                break;
        }
        l->ready_next = NULL;
        l->in_readyq = 0;
}

/* ---- depth ----------------------------------------------------------------------
 *
 * A loader fills at most `depth` slots ahead: its claims (announced and not
 * released, filled, being filled) are at most `depth`. The client of the
 * reference loop holds one batch while the next fills, hence the start at 2.
 * Depth grows by one, up to the slots, when the client
 * reports that its consumer waited for a batch (RELEASE's wait_ns) while
 * the depth held a fill back: the loader was at its limit with a slot free
 * and a worker idle (the pool's idle time, zr_pool_idle_ns()) for at least
 * half of the time since the previous RELEASE, so that one more slot ahead
 * would have kept that worker busy, in LOADER_DEPTH_VOTES reports in a row.
 * When the fills keep every worker busy, the fill is the bottleneck and the
 * depth stays. RELEASEs taken from control memory are judged as RELEASE
 * messages are (ctl_drain()). A wait counts only when a batch was announced during it (the
 * latest announcement is less than the wait before the report): a consumer
 * that found its batch ready and was slow to read its socket did not wait
 * for the daemon. Depth never shrinks (docs/DESIGN.md, "Depth", says why).
 * Slots below LOADER_DEPTH_MIN_BYTES, and loaders whose client reports no
 * wait, keep depth = slots: their memory is small, or nobody says when the
 * consumer waits. */

/* The depth a loader starts with. */
#define LOADER_DEPTH_START 2
/* Slots smaller than this fill every slot ahead (depth = slots): four of
 * them are a few MiB, and a small batch's fill is shorter than a round trip
 * to the client, so a shallow ring would make its consumer wait each step. */
#define LOADER_DEPTH_MIN_BYTES (1u << 20)
/* Waits shorter than this are not waits (a read of a socket with the batch
 * in it, a thread switch). */
#define LOADER_DEPTH_WAIT_MIN_NS 100000
/* A worker idle behind the depth for at least 1/LOADER_DEPTH_HELD_SHARE of
 * the time between two RELEASEs, and at least LOADER_DEPTH_HELD_MIN_NS: one
 * slot more would have kept it busy (its consumer waited: the fills set its
 * pace). Half, because idle time overstates what a slot more gives when the
 * fills share the memory bus: the bench's 64 MiB copies on 2 cores leave a
 * worker idle a quarter to a half of the time at depth 2, and depth 3 made
 * them 5% faster for 64 MiB more; a fill that uses one core of two leaves
 * one idle all the time, and depth 3 doubles its rate. */
#define LOADER_DEPTH_HELD_SHARE 2
#define LOADER_DEPTH_HELD_MIN_NS 50000
/* Reports in a row that must each find the consumer waiting while the
 * depth held a fill back before the depth grows: one is noise (a box whose
 * other processes took the cores for a moment). */
#define LOADER_DEPTH_VOTES 2
/* RELEASEs without a wait_ns after which the loader's depth is its slots
 * for good: its client does not report (an older client). */
#define LOADER_DEPTH_SILENT 8

/* The claims l may hold now: its depth, alone in its group; its slots in a
 * group of several (docs/DESIGN.md, "Depth": four same-seed processes at
 * depth 2 ran at about half the rate). */
static uint32_t claim_limit(const zr_loader *l) {
        if (l->g && l->g->nmembers > 1)
                return l->nslots;
        return l->depth < l->nslots ? l->depth : l->nslots;
}

static int claim_unused(const zr_loader *l) {
        uint32_t used = 0;
        int k = -1;

        for (uint32_t i = 0; i < l->nslots; i++) {
                if (l->claims[i].sl)
                        used++;
                else if (k < 0)
                        k = (int)i;
        }
        return used < claim_limit(l) ? k : -1;
}

/* l has a step to claim and a slot, but its depth holds it back: from now
 * on, the time a worker is idle counts (depth_unhold()). */
static void depth_hold(zr_loader_engine *e, zr_loader *l) {
        if (l->held_since || l->depth_fixed)
                return;
        for (uint32_t i = 0; i < l->nslots; i++)
                if (!l->claims[i].sl) {
                        l->held_since = zr_loader_now_ns();
                        l->held_idle0 = zr_pool_idle_ns(e->pool);
                        return;
                }
}

/* Ends a hold: its time with a worker idle (one worker's at most) counts. */
static void depth_unhold(zr_loader_engine *e, zr_loader *l, uint64_t now) {
        uint64_t idle, wall;

        if (!l->held_since)
                return;
        idle = zr_pool_idle_ns(e->pool) - l->held_idle0;
        wall = now > l->held_since ? now - l->held_since : 0;
        l->held_ns += idle < wall ? idle : wall;
        l->held_since = 0;
}

/* A loader whose claims are all announced and not released, at its depth
 * below its slots, with no RELEASE for this long (at least) and four of its
 * usual intervals between RELEASEs, gets its depth raised by one: its client
 * may keep every batch it was given alive and wait for the next, which the
 * depth alone would never fill. A consumer that is merely slow releases at
 * its usual pace and is never relieved; one relief per RELEASE, so a
 * consumer that pauses (an evaluation) grows by one slot per pause at most
 * (and one before its first RELEASE). */
#define LOADER_RELIEF_MIN_NS (100ull * 1000 * 1000)
/* The retry thread looks for loaders to relieve this often while any loader
 * is open. */
#define LOADER_RELIEF_TICK_NS (50ull * 1000 * 1000)

/* Engine mutex held: relieves l if it is due (above). */
static void depth_relieve(zr_loader_engine *e, zr_loader *l, uint64_t now) {
        uint64_t after = 4 * l->rel_period_ns;
        uint32_t used = 0, held = 0;

        if (l->depth_fixed || !l->relief_armed || !l->held_since || l->depth >= l->nslots ||
            l->closing || l->paused || l->end_delivered ||
            (l->end_reachable && l->fill_k >= l->end_k))
                return;
        for (uint32_t i = 0; i < l->nslots; i++) {
                used += l->claims[i].sl != NULL;
                held += l->claims[i].sl && l->claims[i].held;
        }
        if (held < used || used < claim_limit(l))
                return;
        if (after < LOADER_RELIEF_MIN_NS)
                after = LOADER_RELIEF_MIN_NS;
        if (now - l->rel_last_ns < after)
                return;
        depth_unhold(e, l, now);
        l->depth++;
        l->c.depth_raises++;
        l->c.depth_reliefs++;
        l->relief_armed = 0;
        zr_sched_run(e, l);
}

/* A RELEASE, with the client's report (NULL: none), at `now`: grows l's
 * depth by one if its consumer waited and the depth held a fill back for
 * half of the time since the previous RELEASE, LOADER_DEPTH_VOTES
 * reports in a row. */
static void depth_judge(zr_loader_engine *e, zr_loader *l, const zr_loader_take *take,
                        uint64_t now) {
        uint64_t w, gap = now > l->rel_last_ns ? now - l->rel_last_ns : 0;

        if (l->depth_fixed)
                return;
        depth_unhold(e, l, now);
        if (gap)
                l->rel_period_ns = l->rel_period_ns ? (7 * l->rel_period_ns + gap) / 8 : gap;
        l->rel_last_ns = now;
        l->relief_armed = 1;
        l->depth_releases++;
        if (!take || !take->has_wait) {
                if (l->depth_reports == 0 && l->depth_releases >= LOADER_DEPTH_SILENT) {
                        l->depth = l->nslots;
                        l->depth_fixed = 1;
                }
                return;
        }
        l->depth_reports++;
        w = take->wait_ns;
        if (l->depth_settle > 0) {
                l->depth_settle--;
        } else if (w >= LOADER_DEPTH_WAIT_MIN_NS && l->ann_last_ns && now - l->ann_last_ns < w &&
                   l->held_ns >= LOADER_DEPTH_HELD_MIN_NS &&
                   l->held_ns * LOADER_DEPTH_HELD_SHARE >= gap) {
                if (++l->depth_votes >= LOADER_DEPTH_VOTES && l->depth < l->nslots) {
                        l->depth++;
                        l->c.depth_raises++;
                        l->depth_votes = 0;
                        l->depth_settle = l->depth;
                }
        } else {
                l->depth_votes = 0;
        }
        l->held_ns = 0;
}

/* Drops a claim. Returns 1 if its slot became free. */
static int claim_drop(claim *cl) {
        slot *sl = cl->sl;

        if (!sl)
                return 0;
        sl->refs--;
        *cl = (claim){0};
        return !slot_busy(sl);
}

static int claims_slot(const zr_loader *l, const slot *sl) {
        for (uint32_t i = 0; i < l->nslots; i++)
                if (l->claims[i].sl == sl)
                        return 1;
        return 0;
}

/* 1 and a message if a stream changed since open. */
static int stale(const zr_loader *l, char *msg, size_t size) {
        for (size_t i = 0; i < l->nall; i++) {
                if (zr_dataset_generation(l->streams[i].s.ds) != l->streams[i].open_gen) {
                        snprintf(msg, size, "%s changed under the loader (appended to, deleted "
                                 "from or compacted)", l->streams[i].name);
                        return 1;
                }
        }
        return 0;
}

static int runnable(zr_loader *l) {
        uint64_t step = l->start + l->fill_k;
        work w;

        if (l->closing || l->paused || (l->end_reachable && l->fill_k >= l->end_k))
                return 0;
        if (zr_pf_job_due(l->e, l))
                return 1;
        /* a new loader's first batch is filled alone, so it gets every core
         * (its shards) and arrives after one slot's fill, not two */
        if (l->inflight > 0 && l->c.gathers + l->c.shared == 0)
                return 0;
        if (claim_unused(l) < 0) {
                depth_hold(l->e, l);
                return 0;
        }
        return zr_group_find(l->g, step) || zr_pf_ready(l->e, l, step, &w);
}

/* The claim whose batch is the next to announce, if it is filled. */
static claim *announce_claim(zr_loader *l) {
        uint64_t step = l->start + l->ann_k;

        if (l->end_reachable && l->ann_k >= l->end_k)
                return NULL;
        for (uint32_t i = 0; i < l->nslots; i++) {
                claim *cl = &l->claims[i];
                if (cl->sl && !cl->held && cl->step == step && cl->sl->has_content &&
                    !cl->sl->filling)
                        return cl;
        }
        return NULL;
}

static int has_event(zr_loader *l) {
        if (l->closing || l->paused || l->end_delivered)
                return 0;
        if (announce_claim(l) || zr_group_news(l) || l->ctl_wake || l->ctl_reap)
                return 1;
        return l->end_reachable && l->ann_k == l->end_k;
}

static void ctl_publish(zr_loader_engine *e, zr_loader *l);

/* Queues l for collection if it has an event. Returns 1 if notify is due. A
 * loader with control memory has its batches announced there first, so only
 * a WAKE, a ring or its end wakes the loop. */
int zr_sched_ready(zr_loader_engine *e, zr_loader *l) {
        if (l->has_ctl)
                ctl_publish(e, l);
        if (l->in_readyq || !has_event(l))
                return 0;
        l->ready_next = NULL;
        if (e->ready_tail)
                e->ready_tail->ready_next = l;
        else
                e->ready_head = l;
        e->ready_tail = l;
        l->in_readyq = 1;
        return 1;
}

int zr_sched_left(zr_loader_engine *e, zr_loader *l) {
        if (!l->orphan || l->inflight > 0)
                return 0;
        l->orphan = 0;
        l->gone_next = NULL;
        if (e->gone_tail)
                e->gone_tail->gone_next = l;
        else
                e->gone_head = l;
        e->gone_tail = l;
        pthread_cond_broadcast(&e->idle);
        return 1;
}

/* Decides the end at step offset k (the earliest wins). */
static void set_end(zr_loader *l, uint64_t k, int code, uint64_t needed, const char *msg) {
        if (l->end_decided && l->end_reachable && l->end_k <= k)
                return;
        if (l->end_reachable && !l->end_decided && l->end_k < k)
                return; /* the domain ends first */
        l->end_k = k;
        l->end_reachable = 1;
        l->end_decided = 1;
        l->end_code = code;
        l->end_needed = needed;
        snprintf(l->end_msg, sizeof(l->end_msg), "%s", msg);
}

/* Drops l's claims at or past its end (never announced). Returns 1 if a slot
 * became free. */
static int trim(zr_loader *l) {
        int freed = 0;

        if (!l->end_reachable)
                return 0;
        for (uint32_t i = 0; i < l->nslots; i++) {
                claim *cl = &l->claims[i];
                if (cl->sl && !cl->held && cl->step - l->start >= l->end_k)
                        freed |= claim_drop(cl);
        }
        return freed;
}

/* Takes l's next step from a slot of its group that holds it or is being
 * filled with it: no work. Returns 1 if it took it (and sets *notify if l got
 * an event), 0 if no slot has it or l has no claim to spare, -1 if l ended
 * instead (a stream changed). */
static int take_shared(zr_loader_engine *e, zr_loader *l, int *notify) {
        char msg[ZR_ERROR_MESSAGE_MAX];
        uint64_t step;
        slot *sl;
        int k;

        if (l->closing || l->paused || (l->end_reachable && l->fill_k >= l->end_k))
                return 0;
        k = claim_unused(l);
        if (k < 0)
                return 0;
        step = l->start + l->fill_k;
        sl = zr_group_find(l->g, step);
        if (!sl)
                return 0;
        /* a batch filled before a change is intact, but l would not have
         * gathered it: end as its own gather would */
        if (stale(l, msg, sizeof(msg))) {
                set_end(l, l->fill_k, ZR_E_STALE, 0, msg);
                *notify |= zr_sched_ready(e, l);
                return -1;
        }
        l->claims[k] = (claim){ .sl = sl, .step = step };
        sl->refs++;
        l->fill_k++;
        l->c.shared++;
        e->t.shared++;
        *notify |= zr_sched_ready(e, l);
        return 1;
}

/* Every member of l's group but l takes at once what the group's slots hold
 * for it, rather than at its turn in the run queue: a member that waits
 * behind other work while its leader claims on falls behind what the slots
 * keep, and from then on gathers every step again. */
static void catch_up(zr_loader_engine *e, const zr_loader *l, int *notify) {
        for (zr_loader *m = l->g->members; m; m = m->g_next) {
                int took = 0;
                if (m == l)
                        continue;
                while (take_shared(e, m, notify) > 0)
                        took = 1;
                if (took)
                        zr_sched_run(e, m);
        }
}

/* Claims the next step of l. If a slot of a live ring of its group holds that
 * step or is being filled with it, l takes it (no work: returns 0, and sets
 * *notify if l got an event). Else it claims a free slot for a gather into *w
 * and returns 1, and the other members at that step take it too. Returns 0
 * with nothing done when l has nothing to claim now or no slot is free (it is
 * requeued when one frees). */
static int claim_next(zr_loader_engine *e, zr_loader *l, work *w, int *notify) {
        uint64_t step;
        slot *sl;
        int k, r;

        if (l->closing || l->paused || (l->end_reachable && l->fill_k >= l->end_k))
                return 0;
        if (l->inflight > 0 && l->c.gathers + l->c.shared == 0)
                return 0; /* the first fill runs alone (runnable()) */
        k = claim_unused(l);
        if (k < 0)
                return 0;
        r = take_shared(e, l, notify);
        if (r != 0) {
                if (r > 0)
                        zr_sched_run(e, l);
                return 0;
        }
        step = l->start + l->fill_k;
        /* its reads ahead first: the group is woken when they end */
        if (!zr_pf_ready(e, l, step, w))
                return 0;
        sl = zr_group_pick(l->g);
        if (!sl)
                return 0;
        zr_pf_claimed(e, l, step);
        sl->filling = 1;
        sl->has_content = 0;
        sl->step = step;
        sl->refs = 1;
        l->claims[k] = (claim){ .sl = sl, .step = step };
        l->fill_k++;
        l->inflight++;
        l->fills_out++;
        w->l = l;
        w->sl = sl;
        w->step = step;
        w->timed = atomic_load(&e->telemetry);
        w->detail = w->timed && l->detail;
        zr_sched_run(e, l);
        catch_up(e, l, notify);
        return 1;
}

static void unpark(zr_loader *l, parked_work **list);
static void kick(zr_loader_engine *e);

/* ---- control memory (ctlring.h; engine mutex held) ------------------------------ */

static int ctl_on(const zr_loader *l) {
        return l->has_ctl && !l->ctl_broken;
}

/* Announces in l's control memory every batch of l that is due, in step
 * order, while its ring is one the client knows (a new ring goes by RING and
 * BATCH on the socket: the loop's zr_loader_poll()); notes a WAKE if the
 * client said it may block on its socket. */
static void ctl_publish(zr_loader_engine *e, zr_loader *l) {
        claim *cl;
        int n = 0;

        if (!ctl_on(l) || l->closing || l->paused || l->end_delivered)
                return;
        while ((cl = announce_claim(l)) && zr_group_knows(l, cl->sl->r->id)) {
                cl->held = 1;
                if (atomic_load(&e->telemetry))
                        zr_measure_announce(l, cl);
                l->ann_last_ns = cl->ann_ns ? cl->ann_ns : zr_loader_now_ns();
                zr_ctlring_publish(&l->ctl, zr_loader_step(l, cl->step), cl->sl->r->id,
                                   cl->sl->index);
                l->ann_k++;
                l->c.batches++;
                e->t.batches++;
                e->t.ctl_batches++;
                n++;
        }
        if (n && !l->ctl_wake && zr_ctlring_client_waiting(&l->ctl)) {
                l->ctl_wake = 1;
                e->t.ctl_wakes++;
        }
}

/* l's client lied in its control memory: nothing more is read from it, and l
 * ends at its next step to announce (its client holds what it holds). */
static void ctl_fault(zr_loader_engine *e, zr_loader *l, int *notify, const char *msg) {
        l->ctl_broken = 1;
        l->ctl_wake = 0;
        e->t.ctl_faults++;
        set_end(l, l->ann_k, ZR_E_PROTO, 0, msg);
        trim(l);
        *notify |= zr_sched_ready(e, l);
}

/* The claim of l on (ring, slot) that its client holds, or NULL. */
static claim *held_claim(zr_loader *l, uint32_t ring_id, uint32_t slot_no) {
        for (uint32_t i = 0; i < l->nslots; i++)
                if (l->claims[i].held && l->claims[i].sl->r->id == ring_id &&
                    l->claims[i].sl->index == slot_no)
                        return &l->claims[i];
        return NULL;
}

/* Takes the releases l's client wrote, each checked against what l holds.
 * Returns how many (their claims are free), and sets *freed if a slot became
 * free. A lie ends l (ctl_fault()). */
static int ctl_drain(zr_loader_engine *e, zr_loader *l, int *notify, int *freed) {
        char msg[ZR_ERROR_MESSAGE_MAX];
        uint64_t tail, i;
        int n, taken = 0;

        if (!ctl_on(l) || l->end_delivered || l->closing)
                return 0;
        n = zr_ctlring_pending(&l->ctl, &tail);
        if (n < 0) {
                snprintf(msg, sizeof(msg), "its control memory counts %llu releases, %llu "
                         "were taken: not within 0..%u", (unsigned long long)tail,
                         (unsigned long long)l->ctl.consumed, ZR_CTL_ENTRIES);
                ctl_fault(e, l, notify, msg);
                return 0;
        }
        for (i = l->ctl.consumed; i != tail; i++) {
                zr_ctl_release rel;
                claim *cl;
                zr_ctlring_entry(&l->ctl, i, &rel);
                cl = held_claim(l, rel.ring, rel.slot);
                if (!cl) {
                        snprintf(msg, sizeof(msg), "its control memory releases ring %u slot "
                                 "%u, which it does not hold", rel.ring, rel.slot);
                        ctl_fault(e, l, notify, msg);
                        return taken;
                }
                /* a retiring ring (its owner left the group) goes at the loop
                 * once unused (zr_group_reap(), zr_loader_poll()) */
                if (!cl->sl->r->owner)
                        l->ctl_reap = 1;
                /* a wait of 2^64 - 1: none told with this release */
                zr_loader_take take = { .has_wait = rel.wait_ns != UINT64_MAX,
                                        .wait_ns = rel.wait_ns,
                                        .has_taken = rel.taken_ns != 0,
                                        .taken_ns = rel.taken_ns };
                if (atomic_load(&e->telemetry))
                        zr_measure_take(l, cl, &take);
                depth_judge(e, l, &take, zr_loader_now_ns());
                *freed |= claim_drop(cl);
                taken++;
        }
        if (taken)
                zr_ctlring_consume(&l->ctl, tail);
        if (l->ctl_reap)
                *notify |= zr_sched_ready(e, l);
        return taken;
}

/* After a fill of l: takes its client's releases and goes on with its next
 * steps; with no slot to fill and no fill of its own running (whose end would
 * take the releases), tells the client it wants releases (and takes those
 * written meanwhile). No thread is woken while the client releases in time. */
static void ctl_turn(zr_loader_engine *e, zr_loader *l, int *notify) {
        int freed = 0, n;

        n = ctl_drain(e, l, notify, &freed);
        /* held back by its depth, a worker may be idle: the next release is
         * wanted now, not at the end of the fill still running */
        if (n == 0 && ctl_on(l) && claim_unused(l) < 0 &&
            (l->fills_out == 0 || claim_limit(l) < l->nslots)) {
                zr_ctlring_set_wants(&l->ctl, 1);
                n = ctl_drain(e, l, notify, &freed);
        }
        if (n <= 0)
                return;
        zr_ctlring_set_wants(&l->ctl, 0);
        while (take_shared(e, l, notify) > 0)
                ;
        if (freed)
                zr_group_wake(e, l->g);
}

/* Engine mutex held: drops the hold a worker took on l (drain_task(), the
 * loader its last fill was for). Returns 1 if notify is due (l is gone: it
 * was closed meanwhile, and must not be touched again). */
static int ctl_unhold(zr_loader_engine *e, zr_loader *l) {
        l->inflight--;
        pthread_cond_broadcast(&e->idle);
        return zr_sched_left(e, l);
}

/* Engine mutex held, released meanwhile; the caller holds l (inflight, a
 * hold this drops): l's client may release a slot in a moment; look at its
 * release count (no mutex, no system call) for up to LOADER_CTL_SPIN_NS,
 * with `wants` clear so that the client rings no doorbell meanwhile, then
 * set it again (and look once more) as ctl_turn() does. Returns 1 if
 * releases came (taken, and l requeued). */
static int ctl_spin(zr_loader_engine *e, zr_loader *l, int *notify) {
        uint64_t seen = l->ctl.consumed, t0, tail;
        int got = 0, freed = 0, look;

        look = ctl_on(l) && !l->closing && !l->end_delivered && claim_unused(l) < 0 &&
               l->fills_out == 0;
        if (look) {
                zr_ctlring_set_wants(&l->ctl, 0);
                pthread_mutex_unlock(&e->mutex);
                t0 = zr_loader_now_ns();
                for (unsigned i = 0; !got; i++) {
                        got = zr_ctlring_released(&l->ctl) != seen;
                        if ((i & 63) == 63 && zr_loader_now_ns() - t0 > LOADER_CTL_SPIN_NS)
                                break;
#if defined(__x86_64__) || defined(__i386__)
                        __builtin_ia32_pause();
#endif
                }
                pthread_mutex_lock(&e->mutex);
        }
        if (ctl_unhold(e, l)) {
                *notify = 1;
                return 0;
        }
        if (!look || l->closing || !ctl_on(l))
                return 0;
        if (!got) {
                zr_ctlring_set_wants(&l->ctl, 1);
                if (zr_ctlring_pending(&l->ctl, &tail) == 0)
                        return 0;
        }
        if (ctl_drain(e, l, notify, &freed) <= 0)
                return 0;
        zr_ctlring_set_wants(&l->ctl, 0);
        while (take_shared(e, l, notify) > 0)
                ;
        if (freed)
                zr_group_wake(e, l->g);
        zr_sched_run(e, l);
        return 1;
}

/* Engine mutex held: applies a finished fill. Returns 1 if notify is due. */
static int complete(zr_loader_engine *e, const work *w, const fill_result *res) {
        zr_loader *l = w->l;
        slot *sl = w->sl;
        group *g = l->g;
        int notify = 0;

        l->c.hits += res->hits;
        l->c.misses += res->misses;
        e->t.hits += res->hits;
        e->t.misses += res->misses;
        if (w->timed)
                zr_measure_cache(l, res);
        if (res->busy) {
                /* keep the claim (the slot stays filling, members wait for it)
                 * and park the work until resume_parked() */
                sl->park.w = *w;
                sl->park.next = e->parked;
                e->parked = &sl->park;
                pthread_cond_signal(&e->parked_cond);
                if (l->closing) {
                        /* closed while it ran: handed over or dropped, as a
                         * close does with what it finds parked */
                        atomic_store(&sl->cancel, 0);
                        unpark(l, &e->parked);
                        pthread_cond_broadcast(&e->idle);
                        return zr_sched_left(e, l);
                }
                return 0;
        }
        l->inflight--;
        l->fills_out--;
        if (w->timed)
                zr_measure_fill(l, res);
        zr_pf_consumed(e, g, sl->step);
        l->c.bytes += res->bytes;
        l->c.evictions += res->evictions;
        e->t.bytes += res->bytes;
        e->t.evictions += res->evictions;
        l->c.fill_seq = ++e->fills;
        l->c.gathers++;
        e->t.gathers++;
        sl->filling = 0;
        atomic_store(&sl->cancel, 0); /* a cancelled fill fails l alone: it closed */
        if (res->code) {
                /* every member waiting for this batch ends at its step: the
                 * group's key makes it the same batch, so the same failure */
                sl->has_content = 0;
                for (zr_loader *m = g->members; m; m = m->g_next) {
                        if (!claims_slot(m, sl))
                                continue;
                        set_end(m, sl->step - m->start, res->code, res->needed, res->msg);
                        trim(m);
                        notify |= zr_sched_ready(e, m);
                }
                zr_group_wake(e, g);
        } else {
                sl->has_content = 1;
                for (zr_loader *m = g->members; m; m = m->g_next)
                        if (claims_slot(m, sl))
                                notify |= zr_sched_ready(e, m);
                if (!slot_busy(sl))
                        zr_group_wake(e, g); /* nobody wanted it any more: free */
        }
        /* every member with control memory, not only l: a member that takes
         * the group's batches without filling any has no fill of its own
         * whose end would take its releases, so its released slots stayed
         * held and the members drifted apart into gathers of their own */
        for (zr_loader *m = g->members; m; m = m->g_next)
                if (m->has_ctl)
                        ctl_turn(e, m, &notify);
        zr_sched_run(e, l);
        pthread_cond_broadcast(&e->idle);
        return notify | zr_sched_left(e, l);
}

/* 1 if l's fills may run on the thread that releases its slots: every stream
 * raw and dense or ragged records of local stores, read from their mappings
 * (no image decode, no packing, no cache, no fetch), slots of at most
 * e->inline_max bytes, and its group's recent steps found resident
 * (prefetch.c, PF_WARM_RUN), so that the fill is a copy of a few hundred KiB
 * at most out of the page cache: tens of microseconds. */
static int inline_capable(const zr_loader_engine *e, const zr_loader *l) {
        if (!e->inline_max || l->slot_bytes > e->inline_max || l->mix)
                return 0;
        for (size_t i = 0; i < l->nall; i++) {
                const lstream *st = &l->streams[i];
                if (st->image || st->pack || st->schema->codec != ZR_CODEC_RAW ||
                    zr_dataset_remote(st->s.ds))
                        return 0;
        }
        return zr_pf_warm(l);
}

/* Engine mutex held (released while the fill runs): claims l's next step and
 * fills it on this thread, if l may (inline_capable()). A step that turns out
 * to need reading (cold, direct, or a failed read ahead) goes to a worker as
 * a parked gather would. A fill that finds a stream's lock taken parks as any. */
static void fill_inline(zr_loader_engine *e, zr_loader *l, int *notify) {
        fill_result res = {0};
        work w;

        if (!inline_capable(e, l) || !claim_next(e, l, &w, notify))
                return;
        if (w.cold || w.direct || w.io_error) {
                w.sl->park.w = w;
                w.sl->park.next = e->resume;
                e->resume = &w.sl->park;
                kick(e);
                return;
        }
        e->t.inline_fills++;
        pthread_mutex_unlock(&e->mutex);
        zr_fill(l, &w, &res);
        pthread_mutex_lock(&e->mutex);
        *notify |= complete(e, &w, &res);
}

static void drain_task(void *arg) {
        zr_loader_engine *e = arg;
        /* the group this worker's last work was for (compared, never used), and
         * how long it took: telemetry's contention */
        const group *prev_g = NULL;
        uint64_t prev_ns = 0;
        zr_loader *l, *spin = NULL;

        pthread_mutex_lock(&e->mutex);
        for (;;) {
                fill_result res = {0};
                work w;
                int done;
                if (e->resume) {
                        w = e->resume->w;
                        e->resume = e->resume->next;
                        l = w.l;
                } else if ((l = runq_pop(e))) {
                        int notify = 0, r;
                        zr_measure_queue(l, prev_g, prev_ns);
                        if (zr_pf_job_due(e, l)) {
                                pf_job j;
                                uint64_t t0, t1;
                                zr_pf_job_start(e, l, &j);
                                zr_sched_run(e, l);
                                t0 = atomic_load(&e->telemetry) ? zr_loader_now_ns() : 0;
                                pthread_mutex_unlock(&e->mutex);
                                zr_pf_job_run(e, &j);
                                t1 = t0 ? zr_loader_now_ns() : 0;
                                pthread_mutex_lock(&e->mutex);
                                prev_g = l->g;
                                prev_ns = t1 - t0;
                                zr_pf_job_end(e, &j);
                                if (zr_sched_left(e, l) && e->notify) {
                                        pthread_mutex_unlock(&e->mutex);
                                        e->notify(e->notify_userdata);
                                        pthread_mutex_lock(&e->mutex);
                                }
                                continue;
                        }
                        r = claim_next(e, l, &w, &notify);
                        if (notify && e->notify) {
                                pthread_mutex_unlock(&e->mutex);
                                e->notify(e->notify_userdata);
                                pthread_mutex_lock(&e->mutex);
                        }
                        if (!r)
                                continue;
                } else {
                        /* the loader this worker's last fill was for, if it
                         * may get a slot back in a moment: ctl_spin() */
                        int notify = 0, r = spin ? ctl_spin(e, spin, &notify) : 0;
                        spin = NULL;
                        if (notify && e->notify) {
                                pthread_mutex_unlock(&e->mutex);
                                e->notify(e->notify_userdata);
                                pthread_mutex_lock(&e->mutex);
                        }
                        if (r)
                                continue;
                        break;
                }
                pthread_mutex_unlock(&e->mutex);
                zr_fill(l, &w, &res);
                pthread_mutex_lock(&e->mutex);
                prev_g = l->g;
                prev_ns = res.fill_ns;
                done = complete(e, &w, &res);
                if (spin)
                        done |= ctl_unhold(e, spin);
                spin = NULL;
                /* a loader with control memory that may get a slot back in a
                 * moment: held (inflight) until this worker looks at it
                 * (ctl_spin()) or finishes other work, as the mutex is let go
                 * meanwhile and a close would free it */
                if (l->has_ctl && !res.busy && !l->closing) {
                        l->inflight++;
                        spin = l;
                }
                if (done && e->notify) {
                        pthread_mutex_unlock(&e->mutex);
                        e->notify(e->notify_userdata);
                        pthread_mutex_lock(&e->mutex);
                }
        }
        e->ndrain--;
        pthread_cond_broadcast(&e->idle);
        pthread_mutex_unlock(&e->mutex);
}

/* Starts a drain task if work is queued and fewer than drain_max run. */
static void kick(zr_loader_engine *e) {
        if ((!e->run_head && !e->resume) || e->ndrain >= e->drain_max)
                return;
        e->ndrain++;
        if (zr_pool_try_submit(e->pool, drain_task, e) < 0) {
                e->ndrain--;
                e->kick_pending = 1;
                return;
        }
        e->kick_pending = 0;
}

/* Puts l at the tail of the run queue if it has work and is not queued. */
void zr_sched_run(zr_loader_engine *e, zr_loader *l) {
        if (l->in_runq || !runnable(l))
                return;
        l->enq_ns = atomic_load(&e->telemetry) ? zr_loader_now_ns() : 0;
        l->run_prev = e->run_tail;
        l->run_next = NULL;
        if (e->run_tail)
                e->run_tail->run_next = l;
        else
                e->run_head = l;
        e->run_tail = l;
        l->in_runq = 1;
        kick(e);
}

/* Engine mutex held: retries every parked gather. Called every
 * LOADER_PARK_RETRY_NS by the retry thread while anything is parked, and at
 * once on events that may follow the end of a mutation
 * (zr_loader_engine_resume(), a release, a collection); never on a park
 * itself, so a lock held for long costs no spin. */
static void resume_parked(zr_loader_engine *e) {
        while (e->parked) {
                parked_work *p = e->parked;
                e->parked = p->next;
                p->next = e->resume;
                e->resume = p;
        }
        kick(e);
}

/* ---- the engine ------------------------------------------------------------- */

void zr_loader_engine_set_inline(zr_loader_engine *e, uint64_t max_slot_bytes) {
        pthread_mutex_lock(&e->mutex);
        e->inline_max = max_slot_bytes;
        pthread_mutex_unlock(&e->mutex);
}

/* The retry thread: sleeps until a fill is parked, then retries the parked
 * fills every LOADER_PARK_RETRY_NS until none is left. It takes only the
 * engine mutex and never waits on a stream's lock, so it holds no dataset
 * alive and delays no zr_loader_free(). */
static void *retry_main(void *arg) {
        zr_loader_engine *e = arg;

        pthread_mutex_lock(&e->mutex);
        while (!e->stopping) {
                struct timespec ts;
                uint64_t now, tick = e->parked ? LOADER_PARK_RETRY_NS : LOADER_RELIEF_TICK_NS;
                if (!e->parked && e->nloaders == 0) {
                        pthread_cond_wait(&e->parked_cond, &e->mutex);
                        continue;
                }
                clock_gettime(CLOCK_MONOTONIC, &ts);
                ts.tv_nsec += (long)tick;
                while (ts.tv_nsec >= 1000000000) {
                        ts.tv_sec++;
                        ts.tv_nsec -= 1000000000;
                }
                pthread_cond_timedwait(&e->parked_cond, &e->mutex, &ts);
                if (e->stopping)
                        break;
                if (e->parked)
                        resume_parked(e);
                now = zr_loader_now_ns();
                if (now - e->relief_ns >= LOADER_RELIEF_TICK_NS) {
                        e->relief_ns = now;
                        for (group *g = e->groups; g; g = g->next)
                                for (zr_loader *m = g->members; m; m = m->g_next)
                                        depth_relieve(e, m, now);
                }
        }
        pthread_mutex_unlock(&e->mutex);
        return NULL;
}

int zr_loader_engine_new(zr_pool *pool, uint64_t cache_bytes, zr_loader_notify_fn notify,
                         void *notify_userdata, zr_loader_engine **ret, zr_error *err) {
        zr_loader_engine *e;
        int r;

        if (!pool || zr_pool_threads(pool) == 0)
                return zr_error_set(err, EINVAL, "the loader engine needs a pool with threads");
        e = calloc(1, sizeof(*e));
        if (!e)
                return zr_error_errno(err, ENOMEM, "loader engine");
        if (zr_rcache_new(cache_bytes, &e->cache) < 0) {
                free(e);
                return zr_error_errno(err, ENOMEM, "loader engine cache");
        }
        if (zr_tokstore_open(NULL, 0, &e->tok_memory, NULL, 0) < 0) {
                zr_rcache_free(e->cache);
                free(e);
                return zr_error_errno(err, ENOMEM, "loader engine");
        }
        pthread_condattr_t ca;
        pthread_condattr_init(&ca);
        pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
        pthread_cond_init(&e->parked_cond, &ca);
        pthread_condattr_destroy(&ca);
        pthread_mutex_init(&e->mutex, NULL);
        atomic_init(&e->direct_mode, ZR_DIRECT_AUTO);
        atomic_init(&e->direct_min, 0);
        pthread_cond_init(&e->idle, NULL);
        e->pool = pool;
        e->notify = notify;
        e->notify_userdata = notify_userdata;
        /* One whole-batch fill per pool thread keeps every core busy with work
         * that needs no hand-off; a fill's own shards (zr_pool_parallel) use
         * whatever is idle. More fills at once would only queue. */
        e->drain_max = (unsigned)zr_pool_threads(pool);
        atomic_init(&e->telemetry, 1);
        r = pthread_create(&e->retry_thread, NULL, retry_main, e);
        if (r != 0) {
                pthread_cond_destroy(&e->parked_cond);
                pthread_cond_destroy(&e->idle);
                pthread_mutex_destroy(&e->mutex);
                zr_rcache_free(e->cache);
                zr_tokstore_free(e->tok_memory);
                free(e);
                return zr_error_errno(err, r, "starting the loader engine's retry thread");
        }
        *ret = e;
        return 0;
}

zr_loader_engine *zr_loader_engine_free(zr_loader_engine *e) {
        if (!e)
                return NULL;
        pthread_mutex_lock(&e->mutex);
        while (e->ndrain > 0 || e->nspare_tasks > 0)
                pthread_cond_wait(&e->idle, &e->mutex);
        e->stopping = 1;
        pthread_cond_signal(&e->parked_cond);
        pthread_mutex_unlock(&e->mutex);
        pthread_join(e->retry_thread, NULL);
        zr_spares_release(e->spares);
        zr_rcache_free(e->cache);
        zr_tokstore_free(e->tok_memory);
        pthread_cond_destroy(&e->parked_cond);
        pthread_cond_destroy(&e->idle);
        pthread_mutex_destroy(&e->mutex);
        free(e);
        return NULL;
}

void zr_loader_engine_set_tokstore(zr_loader_engine *e, zr_tokstore *ts) {
        e->tokstore = ts;
}

void zr_loader_engine_set_io(zr_loader_engine *e, zr_ioq *ioq, uint64_t budget) {
        pthread_mutex_lock(&e->mutex);
        e->ioq = ioq;
        atomic_store(&e->pf_budget, ioq ? budget : 0);
        /* a raised budget may let a group read further: requeue everyone */
        for (group *g = e->groups; g; g = g->next)
                zr_group_wake(e, g);
        pthread_mutex_unlock(&e->mutex);
}

void zr_loader_engine_quiesce(zr_loader_engine *e, const zr_dataset *ds) {
        pthread_mutex_lock(&e->mutex);
        zr_pf_quiesce(e, ds);
        pthread_mutex_unlock(&e->mutex);
}

void zr_loader_engine_set_cache_bytes(zr_loader_engine *e, uint64_t cache_bytes) {
        uint64_t ev = zr_rcache_set_budget(e->cache, cache_bytes);

        pthread_mutex_lock(&e->mutex);
        e->t.evictions += ev;
        pthread_mutex_unlock(&e->mutex);
}

void zr_loader_engine_drop_dataset(zr_loader_engine *e, uint64_t dataset_id) {
        zr_rcache_drop(e->cache, dataset_id);
        pthread_mutex_lock(&e->mutex);
        resume_parked(e);
        pthread_mutex_unlock(&e->mutex);
}

void zr_loader_engine_resume(zr_loader_engine *e) {
        pthread_mutex_lock(&e->mutex);
        resume_parked(e);
        pthread_mutex_unlock(&e->mutex);
}

int zr_loader_engine_next(zr_loader_engine *e, zr_loader **ret) {
        zr_loader *l;

        pthread_mutex_lock(&e->mutex);
        if (e->parked)
                resume_parked(e);
        else if (e->kick_pending)
                kick(e);
        l = e->ready_head;
        if (l) {
                e->ready_head = l->ready_next;
                if (!e->ready_head)
                        e->ready_tail = NULL;
                l->ready_next = NULL;
                l->in_readyq = 0;
        }
        pthread_mutex_unlock(&e->mutex);
        if (!l)
                return 0;
        *ret = l;
        return 1;
}

void zr_loader_engine_counters_get(zr_loader_engine *e, zr_loader_engine_counters *ret) {
        zr_rcache_stats cs;

        zr_rcache_stats_get(e->cache, &cs);
        pthread_mutex_lock(&e->mutex);
        *ret = e->t;
        ret->loaders = e->nloaders;
        ret->spare_bytes = e->spare_ready;
        ret->prefetch_budget = atomic_load(&e->pf_budget);
        ret->prefetch_bytes = atomic_load(&e->pf_bytes);
        ret->prefetch_peak = atomic_load(&e->pf_peak);
        ret->prefetch_records = atomic_load(&e->pf_records);
        ret->direct_steps = atomic_load(&e->direct_steps);
        ret->direct_bytes = atomic_load(&e->direct_bytes);
        ret->direct_copied = atomic_load(&e->direct_copied);
        ret->direct_fallbacks = atomic_load(&e->direct_fallbacks);
        ret->direct_errors = atomic_load(&e->direct_errors);
        ret->direct_mode = (uint64_t)atomic_load(&e->direct_mode);
        ret->direct_min = atomic_load(&e->direct_min);
        pthread_mutex_unlock(&e->mutex);
        ret->cache_budget = cs.budget;
        ret->cache_bytes = cs.bytes;
        ret->cache_entries = cs.entries;
        ret->bypassed = cs.bypassed;
        ret->planned = cs.planned;
}

/* ---- a loader --------------------------------------------------------------- */

/* Engine mutex held: l is closing; its parked gathers are either handed to
 * another member that waits for the same slot, or dropped (the slot is then
 * free and empty). */
static void unpark(zr_loader *l, parked_work **list) {
        for (parked_work **pp = list; *pp;) {
                parked_work *p = *pp;
                zr_loader *heir = NULL;
                if (p->w.l != l) {
                        pp = &p->next;
                        continue;
                }
                for (zr_loader *m = l->g->members; m && !heir; m = m->g_next)
                        if (m != l && !m->closing && claims_slot(m, p->w.sl))
                                heir = m;
                l->inflight--;
                l->fills_out--;
                if (heir) {
                        p->w.l = heir;
                        heir->inflight++;
                        heir->fills_out++;
                        pp = &p->next;
                        continue;
                }
                *pp = p->next;
                p->w.sl->filling = 0;
                p->w.sl->has_content = 0;
        }
}

/* Bytes of working memory per record of a batch, for each gather or read
 * ahead of a loader at once: the step's records (sources.c: 21), the batch
 * gather's tables (dataset/batch.c: at most 36 to locate and 72 to read
 * through the cache), read ahead's keys, flags and locations (41) and its
 * ranges (24 per stream), rounded up. */
#define WORK_RECORD_BYTES 192
#define WORK_RECORD_STREAM_BYTES 32
/* A step's planned uses of its compressed records in the cache (64 bytes a
 * use, dataset/cache.c): the plans of all groups are capped together
 * (prefetch.c), and a group plans a whole step past the cap at most. */
#define WORK_PLAN_BYTES 64

/* The working memory of l (heap, beside its ring): every slot's batch
 * metadata (ring.c), the tables of the gathers and the read-ahead job that
 * may run for it at once, a step's planned cache uses, and what its image
 * streams decode with (imgstream.c). Saturates at
 * UINT64_MAX. */
static uint64_t work_bytes(const zr_loader *l, const zr_loader_engine *e) {
        unsigned __int128 B = l->sp.batch_size, per_slot = B, total;
        unsigned at_once = l->nslots < e->drain_max ? l->nslots : e->drain_max;
        size_t compressed = 0;

        /* a record of stream i is one source's: B records of it a step */
        for (size_t i = 0; i < l->nstreams; i++)
                for (size_t j = i; j < l->nall; j += l->nstreams)
                        if (l->streams[j].schema->codec != ZR_CODEC_RAW) {
                                compressed++;
                                break;
                        }

        if (l->mix)
                per_slot += (B + 7) / 8;
        for (size_t i = 0; i < l->nstreams; i++)
                if (l->streams[i].ragged)
                        per_slot += 2 * B + zr_ragged_shape_words_max(l->streams[i].schema,
                                                                      l->sp.batch_size);
        total = per_slot * 8 * l->nslots +
                (unsigned __int128)l->nslots * l->nstreams * sizeof(zr_loader_stream_batch) +
                (unsigned __int128)(at_once + 1) * B *
                        (WORK_RECORD_BYTES + WORK_RECORD_STREAM_BYTES * l->nstreams) +
                B * WORK_PLAN_BYTES * compressed + zr_imgstream_work_bytes(l, at_once);
        /* a packed stream: its indexes and each fill's tables and scratch */
        for (size_t i = 0; i < l->nall; i++)
                if (l->streams[i].pack)
                        total += zr_pack_memory(l->streams[i].pack, at_once);
        return total > UINT64_MAX ? UINT64_MAX : (uint64_t)total;
}

uint64_t zr_loader_work_bytes(const zr_loader *l) {
        return l->work_bytes;
}

static void loader_destroy(zr_loader *l) {
        if (!l)
                return;
        if (l->has_ctl)
                zr_ctlring_destroy(&l->ctl);
        free(l->claims);
        free(l->known);
        for (size_t i = 0; l->streams && i < l->nall; i++) {
                zr_pack_free(l->streams[i].pack);
                zr_fill_direct_free(&l->streams[i]);
        }
        free(l->streams);
        zr_sources_free(l);
        free(l);
}

int zr_loader_new(zr_loader_engine *e, const zr_loader_stream *streams, size_t nstreams,
                  const zr_loader_params *p, void *userdata, zr_loader **ret, zr_error *err) {
        zr_loader *l = NULL;
        group *fresh = NULL;
        uint32_t nsrc = p->nsources ? p->nsources : 1;
        int r, notify, unbounded;

        if (p->nsources > ZR_MIXTURE_MAX_SOURCES)
                return zr_error_set(err, ZR_E_PROTO, "a mixture has 1 to %d sources, not %" PRIu32,
                                    ZR_MIXTURE_MAX_SOURCES, p->nsources);
        if (nstreams % nsrc != 0 || nstreams / nsrc < 1 || nstreams / nsrc > ZR_STREAMS_MAX)
                return zr_error_set(err, ZR_E_PROTO, "a loader has 1 to %d streams%s, not %zu%s",
                                    ZR_STREAMS_MAX, p->nsources ? " per source" : "", nstreams,
                                    p->nsources ? " for all its sources" : "");
        if (p->prefetch < 1 || p->prefetch > ZR_PREFETCH_MAX)
                return zr_error_set(err, ZR_E_LIMIT, "prefetch is %u, allowed 1 to %d",
                                    p->prefetch, ZR_PREFETCH_MAX);
        l = calloc(1, sizeof(*l));
        if (!l)
                return zr_error_errno(err, ENOMEM, "loader");
        l->streams = calloc(nstreams, sizeof(*l->streams));
        if (!l->streams) {
                r = zr_error_errno(err, ENOMEM, "loader");
                goto fail;
        }
        l->e = e;
        l->userdata = userdata;
        l->nstreams = nstreams / nsrc;
        l->nsources = p->nsources;
        l->nall = nstreams;
        zr_tel_init(&l->tel, zr_loader_now_ns());
        l->nslots = p->prefetch;
        l->depth = l->nslots;
        l->stride = p->step_stride > 1 ? p->step_stride : 1;
        l->phase = p->start_step % l->stride;
        l->start = p->start_step / l->stride;
        l->paused = p->paused;

        r = zr_fill_setup(l, streams, p, err);
        if (r < 0)
                goto fail;
        if (l->slot_bytes >= LOADER_DEPTH_MIN_BYTES && l->nslots > LOADER_DEPTH_START) {
                l->depth = LOADER_DEPTH_START;
                l->depth_settle = l->depth;
        } else
                l->depth_fixed = 1;
        /* its working memory, before any of it is allocated */
        l->work_bytes = work_bytes(l, e);
        if (p->work_bytes_max && l->work_bytes > p->work_bytes_max) {
                r = zr_error_set(err, ZR_E_LIMIT, "the loader's working memory (batch metadata "
                                 "and the arrays of its gathers: %" PRIu64 " bytes for %u slots "
                                 "of %" PRIu64 " records) is over the %" PRIu64 " bytes left of "
                                 "max-work-mem-per-uid", l->work_bytes, l->nslots,
                                 l->sp.batch_size, p->work_bytes_max);
                goto fail;
        }
        l->claims = calloc(l->nslots, sizeof(*l->claims));
        fresh = calloc(1, sizeof(*fresh));
        if (!l->claims || !fresh) {
                r = zr_error_errno(err, ENOMEM, "loader");
                goto fail;
        }
        r = zr_ring_new(l, err);
        if (r < 0)
                goto fail;
        r = zr_group_know(l, l->own->id);
        if (r < 0) {
                r = zr_error_errno(err, ENOMEM, "loader");
                goto fail;
        }

        /* the domain: the batch of step 2^64 - 1 is the last (a mixture's, the
         * last whose positions stay below 2^64 - 1) */
        l->end_k = zr_sources_end(l, &unbounded);
        if (!unbounded) {
                l->end_reachable = 1;
                l->end_code = ZR_E_SAMPLER;
                if (l->stride > 1)
                        snprintf(l->end_msg, sizeof(l->end_msg), "the %s's domain is used up "
                                 "(step %" PRIu64 " was the last of stride %" PRIu64 ")",
                                 l->mix ? "mixture" : "sampler",
                                 zr_loader_step(l, l->start + l->end_k - 1), l->stride);
                else if (l->mix)
                        snprintf(l->end_msg, sizeof(l->end_msg), "the mixture's domain is used up "
                                 "(step %" PRIu64 " was the last)", l->mix->last_step);
                else
                        snprintf(l->end_msg, sizeof(l->end_msg), "the sampler's domain is used up "
                                 "(step 2^64 - 1 was the last)");
        }

        pthread_mutex_lock(&e->mutex);
        if (++e->next_ring_id == 0) /* ids are never 0 */
                e->next_ring_id = 1;
        l->own->id = e->next_ring_id;
        l->known[0] = l->own->id;
        notify = zr_group_join(e, l, fresh);
        e->nloaders++;
        l->rel_last_ns = zr_loader_now_ns();
        l->relief_armed = 1;
        if (e->nloaders == 1)
                pthread_cond_signal(&e->parked_cond); /* the retry thread's reliefs */
        zr_sched_run(e, l);
        pthread_mutex_unlock(&e->mutex);
        if (notify && e->notify)
                e->notify(e->notify_userdata);
        *ret = l;
        return 0;
fail:
        free(fresh);
        if (l) {
                zr_ring_release(l->own);
                l->own = NULL;
        }
        loader_destroy(l);
        return r;
}

/* Engine mutex held: stops l; its parked gathers go to another member or are
 * dropped. */
static void loader_stop_work(zr_loader_engine *e, zr_loader *l) {
        l->closing = 1;
        runq_remove(e, l);
        readyq_remove(e, l);
        unpark(l, &e->parked);
        unpark(l, &e->resume);
}

/* Takes l out of the engine once no work of it runs: its claims, its ring
 * (retiring), its group; frees it. Takes the engine mutex. */
static void loader_finish(zr_loader *l) {
        zr_loader_engine *e = l->e;
        group *g;
        ring *dead = NULL;
        uint64_t owner = 0;
        int notify;

        pthread_mutex_lock(&e->mutex);
        /* a drain task may have requeued it meanwhile */
        runq_remove(e, l);
        readyq_remove(e, l);
        for (uint32_t i = 0; i < l->nslots; i++)
                claim_drop(&l->claims[i]);
        l->own->owner = NULL; /* retiring: freed once nothing uses it */
        l->own = NULL;
        g = l->g;
        zr_group_leave(e, l);
        if (g->nmembers == 0) {
                /* nobody is left to use or fill any of its rings, nor to
                 * gather what it read ahead */
                notify = zr_group_reap(e, g, &dead);
                zr_pf_group_fini(e, g);
                owner = g->pf.owner;
                free(g);
        } else {
                notify = zr_group_reap(e, g, &dead);
                zr_group_wake(e, g);
        }
        e->nloaders--;
        pthread_mutex_unlock(&e->mutex);
        if (notify && e->notify)
                e->notify(e->notify_userdata);
        zr_rings_release(dead);
        zr_pf_group_drop_plans(e, owner, l);
        loader_destroy(l);
}

void zr_loader_start(zr_loader *l) {
        zr_loader_engine *e = l->e;
        int notify;

        pthread_mutex_lock(&e->mutex);
        l->paused = 0;
        zr_sched_run(e, l);
        notify = zr_sched_ready(e, l);
        pthread_mutex_unlock(&e->mutex);
        if (notify && e->notify)
                e->notify(e->notify_userdata);
}

int zr_loader_close(zr_loader *l) {
        zr_loader_engine *e;

        if (!l)
                return 1;
        e = l->e;
        pthread_mutex_lock(&e->mutex);
        loader_stop_work(e, l);
        if (l->inflight > 0) {
                /* its fills that no other member waits for stop early */
                for (uint32_t i = 0; i < l->nslots; i++) {
                        slot *sl = l->claims[i].sl;
                        int wanted = 0;
                        if (!sl || !sl->filling)
                                continue;
                        for (zr_loader *m = l->g->members; m && !wanted; m = m->g_next)
                                wanted = m != l && claims_slot(m, sl);
                        if (!wanted)
                                atomic_store(&sl->cancel, 1);
                }
                /* the last of its work to end queues it as gone (zr_sched_left()) */
                l->orphan = 1;
                e->norphans++;
                pthread_mutex_unlock(&e->mutex);
                return 0;
        }
        pthread_mutex_unlock(&e->mutex);
        loader_finish(l);
        return 1;
}

int zr_loader_engine_gone(zr_loader_engine *e, void **userdata) {
        zr_loader *l;

        pthread_mutex_lock(&e->mutex);
        l = e->gone_head;
        if (l) {
                e->gone_head = l->gone_next;
                if (!e->gone_head)
                        e->gone_tail = NULL;
                e->norphans--;
        }
        pthread_mutex_unlock(&e->mutex);
        if (!l)
                return 0;
        *userdata = l->userdata;
        loader_finish(l);
        return 1;
}

int zr_loader_engine_wait_gone(zr_loader_engine *e) {
        unsigned n;

        pthread_mutex_lock(&e->mutex);
        while (e->norphans > 0 && !e->gone_head)
                pthread_cond_wait(&e->idle, &e->mutex);
        n = e->norphans;
        pthread_mutex_unlock(&e->mutex);
        return (int)n;
}

zr_loader *zr_loader_free(zr_loader *l) {
        zr_loader_engine *e;

        if (!l)
                return NULL;
        e = l->e;
        pthread_mutex_lock(&e->mutex);
        loader_stop_work(e, l);
        while (l->inflight > 0)
                pthread_cond_wait(&e->idle, &e->mutex);
        pthread_mutex_unlock(&e->mutex);
        loader_finish(l);
        return NULL;
}

void *zr_loader_userdata(const zr_loader *l) {
        return l->userdata;
}

int zr_loader_ring_fd(const zr_loader *l) {
        return l->own->shm.fd;
}

uint32_t zr_loader_ring_id(const zr_loader *l) {
        return l->own->id;
}

uint64_t zr_loader_ring_bytes(const zr_loader *l) {
        return l->slot_bytes * l->nslots;
}

uint32_t zr_loader_slots(const zr_loader *l) {
        return l->nslots;
}

uint64_t zr_loader_slot_bytes(const zr_loader *l) {
        return l->slot_bytes;
}

const void *zr_loader_ring_data(const zr_loader *l) {
        return l->own->shm.data;
}

uint32_t zr_loader_nsources(const zr_loader *l) {
        return l->nsources;
}

uint64_t zr_loader_source_length(const zr_loader *l, uint32_t k) {
        return l->mix && k < l->nsources ? l->mix->sources[k].n : 0;
}

size_t zr_loader_nstreams(const zr_loader *l) {
        return l->nstreams;
}

uint64_t zr_loader_stream_offset(const zr_loader *l, size_t i) {
        return i < l->nstreams ? l->streams[i].offset : 0;
}

uint64_t zr_loader_stream_capacity(const zr_loader *l, size_t i) {
        return i < l->nstreams ? l->streams[i].capacity : 0;
}

const zr_image_params *zr_loader_stream_image(const zr_loader *l, size_t i) {
        return i < l->nstreams && l->streams[i].image ? &l->streams[i].img : NULL;
}

uint64_t zr_loader_length(const zr_loader *l) {
        return l->length;
}

static void ring_event(zr_loader_event *ev, const ring *r) {
        *ev = (zr_loader_event){ .kind = ZR_LOADER_EVENT_RING, .ring = r->id,
                                 .ring_data = r->shm.data, .fd = r->shm.fd,
                                 .slots = r->nslots, .slot_bytes = r->slot_bytes,
                                 .ring_bytes = (uint64_t)r->nslots * r->slot_bytes };
}

int zr_loader_poll(zr_loader *l, zr_loader_event *ret) {
        zr_loader_engine *e = l->e;
        ring *dead = NULL;
        claim *cl;
        int r = 0;

        pthread_mutex_lock(&e->mutex);
        if (l->closing || l->end_delivered)
                goto out;
        if (l->ctl_reap) {
                /* releases taken from control memory freed a retiring ring's
                 * slots: the loop reaps, as at a RELEASE (other members' RING_CLOSE
                 * events come with their own polls) */
                l->ctl_reap = 0;
                zr_group_reap(e, l->g, &dead);
        }
        /* rings first: a ring is told before the first batch that names it,
         * and its end after the last batch of it was given back */
        for (size_t i = 0; i < l->nknown; i++) {
                if (zr_group_ring(l->g, l->known[i]))
                        continue;
                *ret = (zr_loader_event){ .kind = ZR_LOADER_EVENT_RING_CLOSE,
                                          .ring = l->known[i] };
                l->known[i] = l->known[--l->nknown];
                r = 1;
                goto out;
        }
        for (ring *rg = l->g->rings; rg; rg = rg->next) {
                if (!rg->owner || zr_group_knows(l, rg->id))
                        continue;
                if (zr_group_know(l, rg->id) < 0)
                        goto out; /* no memory now: told at the next poll */
                ring_event(ret, rg);
                r = 1;
                goto out;
        }
        if (l->has_ctl)
                ctl_publish(e, l);
        cl = announce_claim(l);
        if (cl) {
                const ring *rg = cl->sl->r;
                if (!zr_group_knows(l, rg->id)) {
                        /* a ring that retired after l took one of its batches */
                        if (zr_group_know(l, rg->id) < 0)
                                goto out;
                        ring_event(ret, rg);
                        r = 1;
                        goto out;
                }
                cl->held = 1;
                if (atomic_load(&e->telemetry))
                        zr_measure_announce(l, cl);
                l->ann_last_ns = cl->ann_ns ? cl->ann_ns : zr_loader_now_ns();
                *ret = (zr_loader_event){ .kind = ZR_LOADER_EVENT_BATCH,
                                          .step = zr_loader_step(l, cl->step),
                                          .ring = rg->id, .ring_data = rg->shm.data,
                                          .slot = cl->sl->index,
                                          .batch_size = l->sp.batch_size,
                                          .nstreams = l->nstreams, .streams = cl->sl->sb,
                                          .indices = cl->sl->indices,
                                          .sources = cl->sl->sources };
                l->ann_k++;
                l->c.batches++;
                e->t.batches++;
                r = 1;
        } else if (l->end_reachable && l->ann_k == l->end_k) {
                *ret = (zr_loader_event){ .kind = ZR_LOADER_EVENT_END,
                                          .step = zr_loader_step(l, l->start + l->end_k),
                                          .code = l->end_code,
                                          .message = l->end_msg, .needed = l->end_needed };
                l->end_delivered = 1;
                l->ctl_wake = 0;
                r = 1;
        } else if (l->ctl_wake) {
                *ret = (zr_loader_event){ .kind = ZR_LOADER_EVENT_WAKE };
                l->ctl_wake = 0;
                r = 1;
        }
out:
        pthread_mutex_unlock(&e->mutex);
        zr_rings_release(dead);
        return r;
}

int zr_loader_release(zr_loader *l, uint32_t ring_id, uint32_t slot_no, zr_error *err) {
        return zr_loader_release_report(l, ring_id, slot_no, NULL, err);
}

int zr_loader_release_report(zr_loader *l, uint32_t ring_id, uint32_t slot_no,
                             const zr_loader_take *take, zr_error *err) {
        zr_loader_engine *e = l->e;
        ring *dead = NULL;
        claim *cl = NULL;
        int r = 0, notify = 0, freed;

        pthread_mutex_lock(&e->mutex);
        if (l->end_delivered)
                goto out;
        for (uint32_t i = 0; i < l->nslots && !cl; i++)
                if (l->claims[i].held && l->claims[i].sl->r->id == ring_id &&
                    l->claims[i].sl->index == slot_no)
                        cl = &l->claims[i];
        if (!cl) {
                r = zr_error_set(err, ZR_E_PROTO, "ring %u slot %u is not held by the client",
                                 ring_id, slot_no);
                goto out;
        }
        if (take && atomic_load(&e->telemetry))
                zr_measure_take(l, cl, take);
        depth_judge(e, l, take, zr_loader_now_ns());
        freed = claim_drop(cl);
        /* the steps its group already holds for it, now (catch_up()) */
        while (take_shared(e, l, &notify) > 0)
                ;
        /* a small warm step filled here, before any worker is woken for it */
        fill_inline(e, l, &notify);
        if (freed)
                zr_group_wake(e, l->g);
        zr_sched_run(e, l);
        notify |= zr_group_reap(e, l->g, &dead);
        if (e->parked)
                resume_parked(e);
        else if (e->kick_pending)
                kick(e);
out:
        pthread_mutex_unlock(&e->mutex);
        if (notify && e->notify)
                e->notify(e->notify_userdata);
        zr_rings_release(dead);
        return r;
}

int zr_loader_ctl_open(zr_loader *l, int *fd, zr_error *err) {
        int r;

        if (l->nslots > ZR_CTL_ENTRIES)
                return 0;
        for (size_t i = 0; i < l->nall; i++)
                if (l->streams[i].ragged || l->streams[i].image)
                        return 0;
        if (!l->has_ctl) {
                r = zr_ctlring_create(&l->ctl, err);
                if (r < 0)
                        return r;
                l->has_ctl = 1;
        }
        *fd = l->ctl.shm.fd;
        return 1;
}

uint64_t zr_loader_ctl_bytes(const zr_loader *l) {
        return l->has_ctl ? l->ctl.shm.size : 0;
}

void zr_loader_ctl_doorbell(zr_loader *l) {
        zr_loader_engine *e = l->e;
        ring *dead = NULL;
        int notify = 0, freed = 0, n;

        pthread_mutex_lock(&e->mutex);
        if (!ctl_on(l) || l->end_delivered)
                goto out;
        zr_ctlring_set_wants(&l->ctl, 0);
        n = ctl_drain(e, l, &notify, &freed);
        while (take_shared(e, l, &notify) > 0)
                ;
        /* a small warm step filled here, before any worker is woken for it */
        fill_inline(e, l, &notify);
        if (freed)
                zr_group_wake(e, l->g);
        zr_sched_run(e, l);
        if (n == 0 && ctl_on(l) && claim_unused(l) < 0 && l->fills_out == 0)
                ctl_turn(e, l, &notify);
        notify |= zr_group_reap(e, l->g, &dead);
        if (e->parked)
                resume_parked(e);
        else if (e->kick_pending)
                kick(e);
out:
        pthread_mutex_unlock(&e->mutex);
        if (notify && e->notify)
                e->notify(e->notify_userdata);
        zr_rings_release(dead);
}

void zr_loader_stop(zr_loader *l, int code, const char *message) {
        zr_loader_engine *e = l->e;
        int notify;

        pthread_mutex_lock(&e->mutex);
        if (!l->end_decided)
                set_end(l, l->fill_k, code, 0, message ? message : "stopped");
        runq_remove(e, l);
        notify = zr_sched_ready(e, l);
        pthread_mutex_unlock(&e->mutex);
        if (notify && e->notify)
                e->notify(e->notify_userdata);
}

void zr_loader_counters_get(zr_loader *l, zr_loader_counters *ret) {
        pthread_mutex_lock(&l->e->mutex);
        *ret = l->c;
        ret->step = zr_loader_step(l, l->start + l->ann_k);
        ret->depth = l->depth;
        pthread_mutex_unlock(&l->e->mutex);
}
