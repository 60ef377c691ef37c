/* sampler-bench.c: nanoseconds per batch of each sampler mode.
 *
 * Times zr_sampler_indices() for sequential, iid and cyclic batches of 1K, 8K and
 * 64K indices over n = 1M (by default), one rank, each the median of many calls at
 * consecutive steps (so cyclic crosses cycles as a real run does). One thread; the
 * figures are for the index computation alone, the output buffer stays warm.
 *
 *     sampler-bench [--json] [--n N] [--reps R]
 *
 * bench/sampler_vs_numpy.py runs this with --json beside numpy in the same run.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "sampler/sampler.h"

#define BENCH_N_DEFAULT    UINT64_C(1000000) /* the seed's sampler table: a 1M index space */
#define BENCH_REPS_DEFAULT 301               /* odd, for a true median; ~0.1 s in all */
#define BENCH_WARMUP       20                /* calls before timing: page in the buffer, pick the clone */

static const uint64_t bench_batches[] = { 1024, 8192, 65536 };

static uint64_t bench_now_ns(void) {
        struct timespec ts;

        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t)ts.tv_sec * UINT64_C(1000000000) + (uint64_t)ts.tv_nsec;
}

static int bench_cmp_u64(const void *a, const void *b) {
        uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

        return (x > y) - (x < y);
}

/* Median ns per call over `reps` calls; 0 on a sampler error. */
static uint64_t bench_one(zr_sampler_params p, unsigned reps, uint64_t *idx, uint64_t *times) {
        uint64_t sink = 0;

        for (unsigned i = 0; i < BENCH_WARMUP + reps; i++) {
                uint64_t t0 = bench_now_ns();

                p.step = i;
                if (zr_sampler_indices(&p, idx, NULL) < 0)
                        return 0;
                if (i >= BENCH_WARMUP)
                        times[i - BENCH_WARMUP] = bench_now_ns() - t0;
                sink += idx[i % p.batch_size];
        }
        qsort(times, reps, sizeof(*times), bench_cmp_u64);
        __asm__ volatile("" : : "r"(sink));
        return times[reps / 2];
}

int main(int argc, char **argv) {
        uint64_t n = BENCH_N_DEFAULT, *idx = NULL, *times = NULL;
        unsigned reps = BENCH_REPS_DEFAULT;
        int json = 0, first = 1, r = EXIT_FAILURE;

        for (int i = 1; i < argc; i++) {
                if (strcmp(argv[i], "--json") == 0)
                        json = 1;
                else if (strcmp(argv[i], "--n") == 0 && i + 1 < argc)
                        n = strtoull(argv[++i], NULL, 0);
                else if (strcmp(argv[i], "--reps") == 0 && i + 1 < argc)
                        reps = (unsigned)strtoul(argv[++i], NULL, 0);
                else {
                        fprintf(stderr, "usage: %s [--json] [--n N] [--reps R]\n", argv[0]);
                        return EXIT_FAILURE;
                }
        }
        if (reps == 0 || n == 0) {
                fprintf(stderr, "--n and --reps must be positive\n");
                return EXIT_FAILURE;
        }

        idx = malloc(bench_batches[2] * sizeof(*idx));
        times = malloc(reps * sizeof(*times));
        if (!idx || !times) {
                fprintf(stderr, "out of memory\n");
                goto finish;
        }

        if (json)
                printf("{\"n\": %" PRIu64 ", \"reps\": %u, \"results\": [", n, reps);
        else
                printf("%-11s %8s %12s %10s\n", "mode", "batch", "ns/batch", "ns/index");
        for (int m = 0; m < _ZR_SAMPLER_MODE_MAX; m++)
                for (size_t b = 0; b < sizeof(bench_batches) / sizeof(*bench_batches); b++) {
                        zr_sampler_params p = {
                                .mode = (enum zr_sampler_mode)m, .n = n,
                                .batch_size = bench_batches[b], .seed = 0x5eed,
                                .rank = 0, .world_size = 1,
                        };
                        uint64_t ns;

                        if (p.batch_size > n)
                                continue;
                        ns = bench_one(p, reps, idx, times);
                        if (json)
                                printf("%s{\"mode\": \"%s\", \"batch\": %" PRIu64 ", \"ns\": %" PRIu64 "}",
                                       first ? "" : ", ", zr_sampler_mode_name(p.mode), p.batch_size, ns);
                        else
                                printf("%-11s %8" PRIu64 " %12" PRIu64 " %10.3f\n",
                                       zr_sampler_mode_name(p.mode), p.batch_size, ns,
                                       (double)ns / (double)p.batch_size);
                        first = 0;
                }
        if (json)
                printf("]}\n");
        r = EXIT_SUCCESS;
finish:
        free(times);
        free(idx);
        return r;
}
