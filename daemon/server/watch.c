/* watch.c: the loaders' verdicts every second, journal warnings and the
 * summary of STATUS= (watch.h). */
#include "server/watch.h"

#include <errno.h>
#include <event2/event.h>
#include <stdlib.h>

#include "server/log.h"
#include "server/lview.h"

#define WATCH_PERIOD_SEC 1

struct zr_watch {
        zr_server *srv;
        struct event *ev;
        uint64_t warn_after_ns;
        zr_watch_summary last;
};

/* Warnings of stalled loaders, all loaders together: each names a job, and a
 * box of stalled jobs must not flood the journal. */
static zr_ratelimit rl_stall = ZR_RATELIMIT(60, 5);

typedef struct look {
        zr_watch *w;
        uint64_t now;
        zr_watch_summary sum;
} look;

static int look_one(const zr_lview *v, void *arg) {
        look *lk = arg;
        zr_ltrack *t = v->track;
        const zr_tel_span *w10 = &v->tel.w[ZR_TEL_W10];

        lk->sum.loaders++;
        if (w10->span_ns > 0)
                lk->sum.batches_per_s += (double)w10->v[ZR_TEL_BATCHES] * 1e9 / (double)w10->span_ns;
        if (v->tel.verdict != ZR_VERDICT_DATA_BOUND) {
                t->bound_since_ns = 0;
                t->warned = false;
                return 0;
        }
        lk->sum.data_bound++;
        if (!t->bound_since_ns)
                t->bound_since_ns = lk->now;
        if (t->warned || !lk->w->warn_after_ns ||
            lk->now - t->bound_since_ns < lk->w->warn_after_ns)
                return 0;
        t->warned = true;
        zr_log_ratelimited(&rl_stall, LOG_WARNING,
                           "loader %u of pid %d (uid %u, %s) has been data-bound for %llu s: its "
                           "consumer waits %.0f %% of its time for batches (%s); the gathers' "
                           "time goes mostly to %s",
                           v->id, (int)v->pid, (unsigned)v->uid, t->command,
                           (unsigned long long)((lk->now - t->bound_since_ns) / 1000000000u),
                           (double)zr_tel_wait_ppm(w10) / 1e4, t->dataset,
                           zr_stage_name(v->tel.stage));
        return 0;
}

static void tick(evutil_socket_t fd, short what, void *arg) {
        zr_watch *w = arg;
        look lk = { .w = w, .now = zr_loader_now_ns() };

        zr_lview_foreach(w->srv, 0, true, lk.now, look_one, &lk);
        w->last = lk.sum;
}

int zr_watch_new(zr_server *s, uint64_t warn_after_sec, zr_watch **ret) {
        struct timeval tv = { WATCH_PERIOD_SEC, 0 };
        zr_watch *w = calloc(1, sizeof(*w));

        if (!w)
                return -ENOMEM;
        w->srv = s;
        zr_watch_set_warning(w, warn_after_sec);
        w->ev = event_new(s->base, -1, EV_PERSIST, tick, w);
        if (!w->ev) {
                free(w);
                return -ENOMEM;
        }
        event_add(w->ev, &tv);
        *ret = w;
        return 0;
}

void zr_watch_set_warning(zr_watch *w, uint64_t warn_after_sec) {
        w->warn_after_ns = warn_after_sec > UINT64_MAX / 1000000000u ? UINT64_MAX
                                                                     : warn_after_sec * 1000000000u;
}

zr_watch *zr_watch_free(zr_watch *w) {
        if (!w)
                return NULL;
        if (w->ev)
                event_free(w->ev);
        free(w);
        return NULL;
}

void zr_watch_get(const zr_watch *w, zr_watch_summary *ret) {
        *ret = w->last;
}
