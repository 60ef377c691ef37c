/* telemetry.c: a loader's counters in windows, and its verdict (telemetry.h).
 *
 * Buckets are reset lazily: a bucket holds the unit (second or decade) it
 * counts, and a write to another unit clears it first; a read of a unit that
 * the bucket no longer holds reads zero. So an idle loader costs nothing, and
 * a gap of any length needs no catching up.
 */
#include "loader/telemetry.h"

#include <string.h>

#define NS_PER_S 1000000000ull

static const char *const counter_names[ZR_TEL_N] = {
        [ZR_TEL_BATCHES] = "batches",         [ZR_TEL_BYTES] = "bytes",
        [ZR_TEL_WAITS] = "waits",             [ZR_TEL_WAIT_NS] = "wait_ns",
        [ZR_TEL_READIES] = "readies",         [ZR_TEL_READY_NS] = "ready_ns",
        [ZR_TEL_FILLS] = "fills",             [ZR_TEL_FILL_NS] = "fill_ns",
        [ZR_TEL_LOOKUP_NS] = "lookup_ns",     [ZR_TEL_READ_NS] = "read_ns",
        [ZR_TEL_DECODE_NS] = "decode_ns",     [ZR_TEL_COPY_NS] = "copy_ns",
        [ZR_TEL_IO_WAIT_NS] = "io_wait_ns",   [ZR_TEL_QUEUE_NS] = "queue_ns",
        [ZR_TEL_DEVICE_BYTES] = "device_bytes", [ZR_TEL_HITS] = "hits",
        [ZR_TEL_MISSES] = "misses",
};

const char *zr_tel_counter_name(enum zr_tel_counter c) {
        return c < ZR_TEL_N ? counter_names[c] : "?";
}

const char *zr_verdict_name(enum zr_verdict v) {
        switch (v) {
        case ZR_VERDICT_IDLE:
                return "idle";
        case ZR_VERDICT_DATA_BOUND:
                return "data-bound";
        case ZR_VERDICT_CONSUMER_BOUND:
                return "consumer-bound";
        case ZR_VERDICT_BALANCED:
                return "balanced";
        default:
                return "unknown";
        }
}

const char *zr_stage_name(enum zr_stage s) {
        switch (s) {
        case ZR_STAGE_IO:
                return "io";
        case ZR_STAGE_DECODE:
                return "decode";
        case ZR_STAGE_COPY:
                return "copy";
        case ZR_STAGE_REMOTE:
                return "remote";
        case ZR_STAGE_CONTENTION:
                return "contention";
        case ZR_STAGE_LOOKUP:
                return "lookup";
        default:
                return "none";
        }
}

void zr_tel_init(zr_telemetry *t, uint64_t now_ns) {
        memset(t, 0, sizeof(*t));
        t->open_ns = now_ns;
        zr_latency_init(&t->wait);
        zr_latency_init(&t->ready);
        zr_latency_init(&t->fill);
}

/* The bucket of `unit` among n, cleared if it held another. */
static uint64_t *bucket_for(zr_tel_bucket *b, unsigned n, uint64_t unit) {
        zr_tel_bucket *x = &b[unit % n];
        if (x->unit != unit + 1) {
                memset(x->v, 0, sizeof(x->v));
                x->unit = unit + 1;
        }
        return x->v;
}

/* The counts of `unit` among n buckets, or NULL if no bucket holds it. */
static const uint64_t *bucket_of(const zr_tel_bucket *b, unsigned n, uint64_t unit) {
        const zr_tel_bucket *x = &b[unit % n];
        return x->unit == unit + 1 ? x->v : NULL;
}

void zr_tel_add(zr_telemetry *t, uint64_t now_ns, enum zr_tel_counter c, uint64_t v) {
        uint64_t sec = now_ns / NS_PER_S;
        if (c >= ZR_TEL_N)
                return;
        if (c == ZR_TEL_WAIT_NS && !t->startup_at_ns) { /* the wait for the first batch */
                t->startup_ns = v;
                t->startup_at_ns = now_ns ? now_ns : 1;
        }
        t->total[c] += v;
        bucket_for(t->sec, ZR_TEL_SECONDS, sec)[c] += v;
        bucket_for(t->dec, ZR_TEL_DECADES, sec / 10)[c] += v;
}

static void add_counts(zr_tel_span *ret, const uint64_t *v, uint64_t num, uint64_t den) {
        if (!v)
                return;
        for (unsigned c = 0; c < ZR_TEL_N; c++)
                ret->v[c] += den == 1 ? v[c] : (uint64_t)((unsigned __int128)v[c] * num / den);
}

void zr_tel_window(const zr_telemetry *t, uint64_t now_ns, enum zr_tel_window w,
                   zr_tel_span *ret) {
        static const uint64_t seconds[ZR_TEL_NWINDOWS] = { 1, 10, 60 };
        uint64_t now_s = now_ns / NS_PER_S, len = seconds[w < ZR_TEL_NWINDOWS ? w : 0];
        uint64_t end = now_s * NS_PER_S, start = len * NS_PER_S < end ? end - len * NS_PER_S : 0;

        memset(ret, 0, sizeof(*ret));
        if (start <= t->open_ns) {
                /* no older than the window: its whole life, to now */
                zr_tel_totals(t, now_ns, ret);
                return;
        }
        ret->span_ns = end - start;
        if (t->startup_at_ns >= start && t->startup_at_ns < end) {
                ret->startup_ns = t->startup_ns;
                ret->startup = 1;
        }
        if (len <= ZR_TEL_SECONDS - 1) {
                for (uint64_t s = now_s > len ? now_s - len : 0; s < now_s; s++)
                        add_counts(ret, bucket_of(t->sec, ZR_TEL_SECONDS, s), 1, 1);
                return;
        }
        /* the complete seconds of the current decade, the five decades
         * before, and the newest part of the sixth, pro-rated */
        uint64_t dnow = now_s / 10, k = now_s % 10;
        for (uint64_t s = dnow * 10; s < now_s; s++)
                add_counts(ret, bucket_of(t->sec, ZR_TEL_SECONDS, s), 1, 1);
        for (uint64_t d = dnow > 5 ? dnow - 5 : 0; d < dnow; d++)
                add_counts(ret, bucket_of(t->dec, ZR_TEL_DECADES, d), 1, 1);
        if (dnow >= 6)
                add_counts(ret, bucket_of(t->dec, ZR_TEL_DECADES, dnow - 6), 10 - k, 10);
}

void zr_tel_totals(const zr_telemetry *t, uint64_t now_ns, zr_tel_span *ret) {
        memcpy(ret->v, t->total, sizeof(ret->v));
        ret->span_ns = now_ns > t->open_ns ? now_ns - t->open_ns : 1;
        ret->startup_ns = t->startup_ns;
        ret->startup = t->startup_at_ns != 0;
}

/* a * 10^6 / b, at most 10^6 */
static uint64_t ppm(uint64_t a, uint64_t b) {
        if (b == 0 || a >= b)
                return a ? 1000000 : 0;
        return (uint64_t)((unsigned __int128)a * 1000000 / b);
}

uint64_t zr_tel_wait_ppm(const zr_tel_span *w) {
        return ppm(w->v[ZR_TEL_WAIT_NS], w->span_ns);
}

/* wait / span against a threshold in ppm, exactly: -1 below, 0 equal, 1 above. */
static int wait_vs(const zr_tel_span *w, uint64_t threshold_ppm) {
        unsigned __int128 lhs = (unsigned __int128)w->v[ZR_TEL_WAIT_NS] * 1000000u;
        unsigned __int128 rhs = (unsigned __int128)threshold_ppm * w->span_ns;
        return lhs < rhs ? -1 : lhs > rhs;
}

enum zr_verdict zr_tel_verdict(const zr_tel_span *all, int reports) {
        /* the start-up set aside: the window past the loop's first wait */
        zr_tel_span past = *all;
        const zr_tel_span *w = &past;
        const uint64_t *v = past.v;
        uint64_t startup = all->startup_ns;

        if (v[ZR_TEL_BATCHES] == 0 && v[ZR_TEL_WAITS] == 0)
                return ZR_VERDICT_IDLE;
        if (!reports)
                return ZR_VERDICT_UNKNOWN;
        if (!all->startup)
                startup = 0;
        if (startup > past.v[ZR_TEL_WAIT_NS])
                startup = past.v[ZR_TEL_WAIT_NS];
        past.v[ZR_TEL_WAIT_NS] -= startup;
        past.span_ns = past.span_ns > startup ? past.span_ns - startup : 0;
        if (all->startup && past.v[ZR_TEL_WAITS] > 0)
                past.v[ZR_TEL_WAITS]--;
        if (past.span_ns < ZR_TEL_JUDGE_NS && past.v[ZR_TEL_WAITS] < ZR_TEL_JUDGE_WAITS)
                return ZR_VERDICT_UNKNOWN; /* not enough to judge yet */
        if (wait_vs(w, ZR_TEL_DATA_BOUND_PPM) > 0)
                return ZR_VERDICT_DATA_BOUND;
        if (v[ZR_TEL_READIES] > 0 && v[ZR_TEL_BATCHES] > 0) {
                /* mean ready wait against the consumer's time per batch:
                 * ready/readies >= SLACK * span/batches */
                unsigned __int128 lhs = (unsigned __int128)v[ZR_TEL_READY_NS] * v[ZR_TEL_BATCHES] *
                                        1000000u;
                unsigned __int128 rhs = (unsigned __int128)ZR_TEL_SLACK_PPM * w->span_ns *
                                        v[ZR_TEL_READIES];
                return lhs >= rhs ? ZR_VERDICT_CONSUMER_BOUND : ZR_VERDICT_BALANCED;
        }
        return wait_vs(w, ZR_TEL_CONSUMER_BOUND_PPM) < 0 ? ZR_VERDICT_CONSUMER_BOUND
                                                         : ZR_VERDICT_BALANCED;
}

enum zr_stage zr_tel_stage(const zr_tel_span *w) {
        const uint64_t *v = w->v;
        const uint64_t by[] = {
                [ZR_STAGE_IO] = v[ZR_TEL_READ_NS] + v[ZR_TEL_IO_WAIT_NS],
                [ZR_STAGE_DECODE] = v[ZR_TEL_DECODE_NS],
                [ZR_STAGE_COPY] = v[ZR_TEL_COPY_NS],
                [ZR_STAGE_CONTENTION] = v[ZR_TEL_QUEUE_NS],
                [ZR_STAGE_REMOTE] = 0, /* named from io by the caller */
                [ZR_STAGE_LOOKUP] = v[ZR_TEL_LOOKUP_NS],
        };
        enum zr_stage best = ZR_STAGE_NONE;
        uint64_t most = 0;

        for (unsigned s = ZR_STAGE_IO; s <= ZR_STAGE_LOOKUP; s++)
                if (by[s] > most) {
                        most = by[s];
                        best = (enum zr_stage)s;
                }
        return best;
}
