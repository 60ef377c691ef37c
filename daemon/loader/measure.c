/* measure.c: what the engine measures of its loaders for their telemetry
 * (loader-private.h; telemetry.h holds it, docs/TELEMETRY.md says what it
 * means): announcements, cache hits, fills and their stages, waits for a
 * worker behind other loaders, the client's reports, and the snapshot STATUS
 * reads.
 *
 * Every function but the clock and the switch runs under the engine mutex:
 * a few clock reads and counter updates per batch.
 */
#include "loader/loader-private.h"

#include <stdatomic.h>
#include <pthread.h>
#include <time.h>

/* A fill whose reads took longer than this per page went to the
 * device (a resident page costs well under a microsecond, even with a minor
 * fault; a device read ten or more), so the loader's next fills are timed in
 * detail (batch.h: faults apart, device bytes); so is every this-many-th
 * fill, to notice a change. Without detail, the pages are those its bytes
 * span, at least one a record, and the copy or decode time includes any
 * fault: a raw copy of 10 us a page is suspect (memcpy moves a page in well
 * under one, even sharing memory bandwidth with a busy box), and so is a
 * decode of 20 us (zstd decodes a page in a few). A fill in detail costs a
 * pass over its pages and two getrusage() calls a shard: a few percent of a
 * batch, so only when it tells something. */
#define LOADER_SLOW_PAGE_NS 2000
#define LOADER_SLOW_COPY_NS 10000
#define LOADER_SLOW_DECODE_NS 20000
#define LOADER_DETAIL_EVERY 64

uint64_t zr_loader_now_ns(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Engine mutex held: a completed fill's telemetry (telemetry.h). */
void zr_measure_fill(zr_loader *l, const fill_result *res) {
        const zr_gather_times *t = &res->times;
        uint64_t now = zr_loader_now_ns();
        zr_telemetry *tel = &l->tel;

        zr_tel_add(tel, now, ZR_TEL_FILLS, 1);
        zr_tel_add(tel, now, ZR_TEL_FILL_NS, res->fill_ns);
        zr_tel_add(tel, now, ZR_TEL_LOOKUP_NS, t->lookup_ns);
        zr_tel_add(tel, now, ZR_TEL_READ_NS, t->read_ns);
        zr_tel_add(tel, now, ZR_TEL_DECODE_NS, t->decode_ns);
        zr_tel_add(tel, now, ZR_TEL_COPY_NS, t->copy_ns);
        zr_tel_add(tel, now, ZR_TEL_DEVICE_BYTES, t->device_bytes);
        zr_latency_add(&tel->fill, res->fill_ns);
        if (t->detail) {
                l->detail = t->pages > 0 && t->read_ns > t->pages * LOADER_SLOW_PAGE_NS;
        } else {
                uint64_t pages = res->bytes / 4096 + 1;
                if (pages < res->records)
                        pages = res->records;
                l->detail = t->copy_ns > pages * LOADER_SLOW_COPY_NS ||
                            t->decode_ns > pages * LOADER_SLOW_DECODE_NS;
        }
        l->detail |= tel->total[ZR_TEL_FILLS] % LOADER_DETAIL_EVERY == 0;
}

/* Engine mutex held: a completed fill's cache hits and misses. */
void zr_measure_cache(zr_loader *l, const fill_result *res) {
        uint64_t now;

        if (!res->hits && !res->misses)
                return;
        now = zr_loader_now_ns();
        zr_tel_add(&l->tel, now, ZR_TEL_HITS, res->hits);
        zr_tel_add(&l->tel, now, ZR_TEL_MISSES, res->misses);
}

/* Engine mutex held: the announcement of claim cl's batch. */
void zr_measure_announce(zr_loader *l, claim *cl) {
        uint64_t bytes = 0;

        for (size_t i = 0; i < l->nstreams; i++)
                bytes += cl->sl->sb[i].bytes;
        cl->ann_ns = zr_loader_now_ns();
        zr_tel_add(&l->tel, cl->ann_ns, ZR_TEL_BATCHES, 1);
        zr_tel_add(&l->tel, cl->ann_ns, ZR_TEL_BYTES, bytes);
}

/* Engine mutex held: l, just taken from the run queue by a worker whose last
 * work was for group prev_g and took prev_ns, waited for that worker. If none
 * of its own work ran meanwhile and that work was another group's, it waited
 * for other loaders: contention (telemetry.h), as long as that work took at
 * most. */
void zr_measure_queue(zr_loader *l, const group *prev_g, uint64_t prev_ns) {
        uint64_t now, waited;

        if (!l->enq_ns)
                return;
        now = zr_loader_now_ns();
        waited = now - l->enq_ns;
        l->enq_ns = 0;
        if (prev_g && prev_g != l->g && l->inflight == 0)
                zr_tel_add(&l->tel, now, ZR_TEL_QUEUE_NS, waited < prev_ns ? waited : prev_ns);
}

/* Engine mutex held: what the client says of the batch of claim cl. */
void zr_measure_take(zr_loader *l, const claim *cl, const zr_loader_take *take) {
        zr_telemetry *tel = &l->tel;
        uint64_t now = zr_loader_now_ns();

        if (take->has_wait) {
                /* a consumer cannot have waited longer than the loader lived */
                uint64_t age = now - tel->open_ns, w = take->wait_ns;
                uint64_t room = age > tel->total[ZR_TEL_WAIT_NS] ? age - tel->total[ZR_TEL_WAIT_NS]
                                                                 : 0;
                if (w > room)
                        w = room;
                tel->reports = 1;
                zr_tel_add(tel, now, ZR_TEL_WAITS, 1);
                zr_tel_add(tel, now, ZR_TEL_WAIT_NS, w);
                zr_latency_add(&tel->wait, w);
        }
        /* the client's clock is the daemon's unless it lives in another time
         * namespace: a take outside (announce, now] is not believed */
        if (take->has_taken && cl->ann_ns && take->taken_ns >= cl->ann_ns &&
            take->taken_ns <= now) {
                zr_tel_add(tel, now, ZR_TEL_READIES, 1);
                zr_tel_add(tel, now, ZR_TEL_READY_NS, take->taken_ns - cl->ann_ns);
                zr_latency_add(&tel->ready, take->taken_ns - cl->ann_ns);
        }
}

void zr_loader_engine_set_telemetry(zr_loader_engine *e, int on) {
        atomic_store(&e->telemetry, on ? 1 : 0);
}

void zr_loader_telemetry_get(zr_loader *l, uint64_t now_ns, zr_loader_telemetry *ret) {
        static const enum zr_tel_counter stages[] = {
                ZR_TEL_FILLS, ZR_TEL_FILL_NS, ZR_TEL_LOOKUP_NS, ZR_TEL_READ_NS, ZR_TEL_DECODE_NS,
                ZR_TEL_COPY_NS, ZR_TEL_IO_WAIT_NS, ZR_TEL_QUEUE_NS,
        };
        zr_loader_engine *e = l->e;
        const zr_telemetry *tel = &l->tel;

        pthread_mutex_lock(&e->mutex);
        ret->age_ns = now_ns > tel->open_ns ? now_ns - tel->open_ns : 0;
        ret->reports = tel->reports;
        zr_tel_totals(tel, now_ns, &ret->total);
        for (unsigned w = 0; w < ZR_TEL_NWINDOWS; w++)
                zr_tel_window(tel, now_ns, (enum zr_tel_window)w, &ret->w[w]);
        /* a member takes batches the others gathered: the stages are the
         * group's, the waits for a worker each member's own */
        ret->group = (zr_tel_span){ .span_ns = ret->w[ZR_TEL_W10].span_ns };
        for (const zr_loader *m = l->g->members; m; m = m->g_next) {
                zr_tel_span one;
                zr_tel_window(&m->tel, now_ns, ZR_TEL_W10, &one);
                for (size_t i = 0; i < sizeof(stages) / sizeof(stages[0]); i++)
                        ret->group.v[stages[i]] += one.v[stages[i]];
        }
        /* a fill that waits for its step's reads now (a server gone away): the
         * wait so far counts, so that the stage shows it while it lasts */
        if (l->g && l->g->pf.wait_ns && now_ns > l->g->pf.wait_ns)
                ret->group.v[ZR_TEL_IO_WAIT_NS] += now_ns - l->g->pf.wait_ns;
        ret->verdict = zr_tel_verdict(&ret->w[ZR_TEL_W10], tel->reports);
        ret->stage = zr_tel_stage(&ret->group);
        /* a loader of stores in object storage waits for the network, not a device */
        if (ret->stage == ZR_STAGE_IO && l->g && l->g->pf.remote)
                ret->stage = ZR_STAGE_REMOTE;
        ret->prefetch_depth = l->g && l->g->pf.units ? l->g->pf.depth : 0;
        ret->wait = tel->wait;
        ret->ready = tel->ready;
        ret->fill = tel->fill;
        pthread_mutex_unlock(&e->mutex);
}
