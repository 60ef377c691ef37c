/* latency.h: a running estimate of read latency in fixed memory.
 *
 * Two views of the same samples: an exponentially weighted moving average
 * (weight 1/8 on each new sample: it follows a change within tens of reads,
 * for depth adaptation) and a log-linear histogram for quantiles (p50, p99:
 * telemetry, and the tail a deeper queue would lengthen). The histogram has
 * four buckets per power of two from 1 ns to 2^40 ns (about 18 minutes), so a
 * quantile is within 12.5 % of the true value (the bucket's midpoint is
 * reported). When it holds ZR_LATENCY_WINDOW samples every bucket is halved:
 * old samples fade geometrically and the counts never overflow.
 *
 * A third view never fades: every sample ever added, counted in a few fixed
 * buckets (zr_latency_le_ns: 10 us to 10 s, 1-2.5-5 steps) and summed, the
 * shape of a Prometheus histogram (`_bucket{le=...}`, `_sum`, `_count`), whose
 * counts must never go down. 64-bit counts: they do not overflow either.
 *
 * Not thread-safe: the owner serializes access (the I/O queue holds its lock).
 */
#ifndef ZR_IO_LATENCY_H
#define ZR_IO_LATENCY_H

#include <stdint.h>

#define ZR_LATENCY_SUB 4                          /* buckets per power of two */
#define ZR_LATENCY_BUCKETS (41 * ZR_LATENCY_SUB)  /* 2^0 .. 2^40 ns */
#define ZR_LATENCY_WINDOW ((uint32_t)1 << 16)     /* samples before halving */
#define ZR_LATENCY_LE 19                          /* fixed buckets, +Inf aside */

/* The fixed buckets' upper bounds, inclusive, in ns, ascending. */
extern const uint64_t zr_latency_le_ns[ZR_LATENCY_LE];

typedef struct zr_latency {
        uint64_t ewma_ns;  /* 0 until the first sample */
        uint64_t samples;  /* samples ever added */
        uint32_t held;     /* samples the histogram holds now (after halvings) */
        uint32_t bucket[ZR_LATENCY_BUCKETS];
        /* since init, never halved: samples <= zr_latency_le_ns[i] and above
         * the bound before (the last bucket, +Inf, is samples - the rest) */
        uint64_t le[ZR_LATENCY_LE];
        uint64_t sum_ns;   /* of every sample (wraps after 584 years of them) */
} zr_latency;

/* Empties *l. A zeroed struct is empty too. */
void zr_latency_init(zr_latency *l);

/* Adds one sample of `ns` nanoseconds. */
void zr_latency_add(zr_latency *l, uint64_t ns);

/* The q-quantile (0 < q <= 1) of the samples the histogram holds, in ns, as
 * the midpoint of its bucket; 0 if it holds none. */
uint64_t zr_latency_quantile(const zr_latency *l, double q);

/* The cumulative count of samples <= zr_latency_le_ns[i], for i in
 * 0..ZR_LATENCY_LE-1 (a Prometheus bucket); `samples` is the +Inf one. */
uint64_t zr_latency_cumulative(const zr_latency *l, unsigned i);

#endif
