/* telemetry.h: what one loader's batches cost, and who waits for whom.
 *
 * A loader's telemetry is a set of counters (enum zr_tel_counter) kept three
 * ways: totals since the loader opened; sliding windows of the last 1, 10 and
 * 60 seconds, from fixed buckets (eleven of one second, seven of ten seconds:
 * 2.6 KiB whatever the rate); and three latency histograms in fixed memory
 * (io/latency.h): the consumer's wait per batch, the ready wait per batch and
 * the wall time per gather, for p50 and p99 and for Prometheus.
 *
 * From a window it derives a verdict (docs/TELEMETRY.md says why each rule):
 *
 *   idle            no batch and no wait report in the window;
 *   unknown         the client never reported a wait (a client from before
 *                   telemetry): the daemon cannot see the consumer; or not
 *                   enough to judge yet: past the loop's wait for its first
 *                   batch (the start-up, set aside: opening and the first
 *                   gather are no steady state), fewer than 16 waits reported
 *                   and less than a second of the window;
 *   data-bound      the consumer waited more than 5 % of the window;
 *   consumer-bound  otherwise, if a ready batch waited for the consumer at
 *                   least half of the consumer's time per batch on average
 *                   (the loader needs less than half a step to stay ahead);
 *                   without ready waits (the client's clock is not the
 *                   daemon's), if the consumer waited less than 1 %;
 *   balanced        otherwise: the loader just keeps up.
 *
 * and the stage that took most of the time of the window's batches: lookup
 * (locating records: table entries and cache lookups), I/O (faults and preads
 * of records, waits for reads ahead), decode, copy, or contention (waiting for
 * a worker while other loaders' work held every one).
 *
 * Not thread-safe: the loader engine updates and reads it under its mutex.
 * Times are CLOCK_MONOTONIC nanoseconds given by the caller, so the caller
 * reads the clock once for several counters.
 */
#ifndef ZR_LOADER_TELEMETRY_H
#define ZR_LOADER_TELEMETRY_H

#include <stdint.h>

#include "io/latency.h"

enum zr_tel_counter {
        ZR_TEL_BATCHES,      /* batches announced to the client */
        ZR_TEL_BYTES,        /* their bytes, every stream's */
        ZR_TEL_WAITS,        /* consumer waits the client reported (RELEASE wait_ns) */
        ZR_TEL_WAIT_NS,      /* their sum */
        ZR_TEL_READIES,      /* ready waits measured (RELEASE taken_ns) */
        ZR_TEL_READY_NS,     /* their sum */
        ZR_TEL_FILLS,        /* gathers this loader ran (for its whole group) */
        ZR_TEL_FILL_NS,      /* their wall time, of which: */
        ZR_TEL_LOOKUP_NS,    /*   table entries and cache lookups */
        ZR_TEL_READ_NS,      /*   page faults and preads of records */
        ZR_TEL_DECODE_NS,    /*   zstd */
        ZR_TEL_COPY_NS,      /*   copies into the slot and the cache */
        ZR_TEL_IO_WAIT_NS,   /* a gather waited for its step's reads ahead */
        ZR_TEL_QUEUE_NS,     /* waited for a worker, none of its own work running */
        ZR_TEL_DEVICE_BYTES, /* read from the device: its reads ahead, its faults */
        ZR_TEL_HITS,         /* decoded-record cache lookups that found the record */
        ZR_TEL_MISSES,
        ZR_TEL_N
};

/* The counter's name in STATUS and metrics: "batches", "wait_ns", ... */
const char *zr_tel_counter_name(enum zr_tel_counter c);

#define ZR_TEL_SECONDS 11 /* one-second buckets: the current one and ten before */
#define ZR_TEL_DECADES 7  /* ten-second buckets: the current one and six before */

typedef struct zr_tel_bucket {
        uint64_t unit;    /* 1 + the second (or decade) it counts; 0: never used */
        uint64_t v[ZR_TEL_N];
} zr_tel_bucket;

typedef struct zr_telemetry {
        uint64_t open_ns;
        int reports;      /* the client reported a consumer wait at least once */
        uint64_t startup_ns, startup_at_ns; /* the first wait reported, and when
                                             * (0: none yet): the start-up */
        uint64_t total[ZR_TEL_N];
        zr_tel_bucket sec[ZR_TEL_SECONDS];
        zr_tel_bucket dec[ZR_TEL_DECADES];
        zr_latency wait;  /* consumer wait per batch */
        zr_latency ready; /* ready wait per batch */
        zr_latency fill;  /* wall time per gather */
} zr_telemetry;

/* Starts empty at `now_ns` (the loader's open). */
void zr_tel_init(zr_telemetry *t, uint64_t now_ns);

/* Adds v to counter c at now_ns (not before the previous add's time). */
void zr_tel_add(zr_telemetry *t, uint64_t now_ns, enum zr_tel_counter c, uint64_t v);

enum zr_tel_window { ZR_TEL_W1, ZR_TEL_W10, ZR_TEL_W60, ZR_TEL_NWINDOWS };

/* Counters summed over a span of time. */
typedef struct zr_tel_span {
        uint64_t span_ns;
        uint64_t v[ZR_TEL_N];
        uint64_t startup_ns; /* the start-up wait counted in v, */
        int startup;         /* if it is in the span */
} zr_tel_span;

/* The sums of window w at now_ns: the last 1, 10 or 60 complete seconds; for a
 * loader that opened after the window's start, its whole life to now (the
 * totals: span_ns says which), so that a young loader's figures are all of its
 * own, the current second's too. The 60 s window's oldest ten seconds come from a ten-second bucket
 * pro-rated to the part of it inside the window. */
void zr_tel_window(const zr_telemetry *t, uint64_t now_ns, enum zr_tel_window w,
                   zr_tel_span *ret);

/* The totals since the loader opened, as a span of its age. */
void zr_tel_totals(const zr_telemetry *t, uint64_t now_ns, zr_tel_span *ret);

enum zr_verdict {
        ZR_VERDICT_UNKNOWN = 0,
        ZR_VERDICT_IDLE,
        ZR_VERDICT_DATA_BOUND,
        ZR_VERDICT_CONSUMER_BOUND,
        ZR_VERDICT_BALANCED,
};

enum zr_stage {
        ZR_STAGE_NONE = 0,   /* no gather time in the window */
        ZR_STAGE_IO,
        ZR_STAGE_DECODE,
        ZR_STAGE_COPY,
        ZR_STAGE_CONTENTION,
        ZR_STAGE_REMOTE,     /* io of a loader of stores in object storage: waits for fetches */
        ZR_STAGE_LOOKUP,     /* locating records: table entries, cache lookups */
};

/* "data-bound", "io", ... */
const char *zr_verdict_name(enum zr_verdict v);
const char *zr_stage_name(enum zr_stage s);

/* Data-bound above this share of the window spent waiting, in parts per million. */
#define ZR_TEL_DATA_BOUND_PPM 50000
/* Consumer-bound when ready batches waited at least this share of the
 * consumer's time per batch (ppm). */
#define ZR_TEL_SLACK_PPM 500000
/* Without ready waits: consumer-bound below this share of waiting (ppm). */
#define ZR_TEL_CONSUMER_BOUND_PPM 10000
/* No verdict on less of a window than this past the start-up (ns), unless it
 * holds ZR_TEL_JUDGE_WAITS waits reported past it. */
#define ZR_TEL_JUDGE_NS 1000000000ull
#define ZR_TEL_JUDGE_WAITS 16

/* The share of a window the consumer waited, in ppm (at most 10^6). */
uint64_t zr_tel_wait_ppm(const zr_tel_span *w);

/* The verdict of a window (the rules at the top); `reports` as in
 * zr_telemetry. */
enum zr_verdict zr_tel_verdict(const zr_tel_span *w, int reports);

/* The stage that took most of a window's time (the gathers' stages, waits
 * for reads ahead, waits for a worker); ZR_STAGE_NONE if none took any. */
enum zr_stage zr_tel_stage(const zr_tel_span *w);

/* Everything the daemon shows of a loader's telemetry (loader.h,
 * zr_loader_telemetry_get()). */
typedef struct zr_loader_telemetry {
        uint64_t age_ns;
        int reports;
        zr_tel_span total;                /* since open */
        zr_tel_span w[ZR_TEL_NWINDOWS];   /* 1, 10, 60 s */
        /* the 10 s window of the gathers of its whole group (members take
         * batches other members gathered): the stage is taken from it */
        zr_tel_span group;
        enum zr_verdict verdict;          /* of w[ZR_TEL_W10] */
        enum zr_stage stage;              /* of group */
        uint32_t prefetch_depth;          /* steps its group reads ahead now */
        zr_latency wait, ready, fill;     /* copies of the histograms */
} zr_loader_telemetry;

#endif
