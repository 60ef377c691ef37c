/* latency.c: EWMA and log-linear histogram of read latencies (see latency.h). */
#include "io/latency.h"

#include <string.h>

const uint64_t zr_latency_le_ns[ZR_LATENCY_LE] = {
        10000, 25000, 50000, 100000, 250000, 500000,                 /* 10 us .. 0.5 ms */
        1000000, 2500000, 5000000, 10000000, 25000000, 50000000,     /* 1 ms .. 50 ms */
        100000000, 250000000, 500000000, 1000000000, 2500000000u,    /* 0.1 s .. 2.5 s */
        5000000000u, 10000000000u,                                   /* 5 s, 10 s */
};

/* The fixed bucket of ns, or ZR_LATENCY_LE (+Inf). */
static unsigned le_of(uint64_t ns) {
        unsigned lo = 0, hi = ZR_LATENCY_LE;
        while (lo < hi) {
                unsigned mid = (lo + hi) / 2;
                if (ns <= zr_latency_le_ns[mid])
                        hi = mid;
                else
                        lo = mid + 1;
        }
        return lo;
}

/* Bucket of value v: 4 * floor(log2 v) + the two bits below the leading one. */
static unsigned bucket_of(uint64_t v) {
        if (v < 2)
                return 0;
        unsigned e = 63 - (unsigned)__builtin_clzll(v);
        unsigned sub = e >= 2 ? (unsigned)(v >> (e - 2)) & 3 : (unsigned)(v << (2 - e)) & 3;
        unsigned b = e * ZR_LATENCY_SUB + sub;
        return b < ZR_LATENCY_BUCKETS ? b : ZR_LATENCY_BUCKETS - 1;
}

/* The smallest value of bucket b and the first value past it. */
static void bucket_bounds(unsigned b, uint64_t *lo, uint64_t *hi) {
        unsigned e = b / ZR_LATENCY_SUB, sub = b % ZR_LATENCY_SUB;
        uint64_t base = (uint64_t)1 << e;
        if (e < 2) {
                /* below 4 ns the sub-buckets are narrower than 1: whole values */
                *lo = base + ((base * sub) >> 2);
                *hi = base + ((base * (sub + 1)) >> 2);
                if (*hi <= *lo)
                        *hi = *lo + 1;
                return;
        }
        *lo = base + (base >> 2) * sub;
        *hi = base + (base >> 2) * (sub + 1);
}

void zr_latency_init(zr_latency *l) {
        memset(l, 0, sizeof(*l));
}

void zr_latency_add(zr_latency *l, uint64_t ns) {
        if (l->samples++ == 0)
                l->ewma_ns = ns;
        else if (ns >= l->ewma_ns)
                l->ewma_ns += (ns - l->ewma_ns) / 8;
        else
                l->ewma_ns -= (l->ewma_ns - ns) / 8;
        if (l->held >= ZR_LATENCY_WINDOW) {
                uint32_t held = 0;
                for (unsigned b = 0; b < ZR_LATENCY_BUCKETS; b++) {
                        l->bucket[b] /= 2;
                        held += l->bucket[b];
                }
                l->held = held;
        }
        l->bucket[bucket_of(ns)]++;
        l->held++;
        unsigned k = le_of(ns);
        if (k < ZR_LATENCY_LE)
                l->le[k]++;
        l->sum_ns += ns;
}

uint64_t zr_latency_cumulative(const zr_latency *l, unsigned i) {
        uint64_t n = 0;
        for (unsigned k = 0; k <= i && k < ZR_LATENCY_LE; k++)
                n += l->le[k];
        return n;
}

uint64_t zr_latency_quantile(const zr_latency *l, double q) {
        if (l->held == 0)
                return 0;
        if (q > 1)
                q = 1;
        /* the rank of the quantile, 1-based: ceil(q * held) */
        double want = q * (double)l->held;
        uint64_t rank = (uint64_t)want;
        if ((double)rank < want || rank == 0)
                rank++;
        uint64_t seen = 0;
        for (unsigned b = 0; b < ZR_LATENCY_BUCKETS; b++) {
                seen += l->bucket[b];
                if (seen >= rank) {
                        uint64_t lo, hi;
                        bucket_bounds(b, &lo, &hi);
                        return lo + (hi - lo) / 2;
                }
        }
        return 0; /* unreachable: the buckets sum to held */
}
