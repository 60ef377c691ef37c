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
 *
 *     sampler-bench --mix [--json] [--reps R] [--cycles C]
 *
 * times mixtures and inverses instead (bench/suite/sampler.py runs it): ns per
 * batch of a mixture of 3 cyclic sources (70/20/10, over 1M, 300K and 100K
 * records) and of 16 sources of every mode, against the plain cyclic batch over 1M,
 * at the same batch sizes; then which steps saw a record: cyclic over C cycles
 * (10^6 by default, n = 1M, batch 1024), a mixture's cyclic source over C of its
 * cycles, and the iid scan's ns per position.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sampler/inverse.h"
#include "sampler/mixture.h"
#include "sampler/sampler.h"
#include "workload.h"

#define BENCH_N_DEFAULT    UINT64_C(1000000) /* the seed's sampler table: a 1M index space */
#define BENCH_REPS_DEFAULT 301               /* odd, for a true median; ~0.1 s in all */
#define BENCH_WARMUP       20                /* calls before timing: page in the buffer, pick the clone */

static const uint64_t bench_batches[] = { 1024, 8192, 65536 };

static int bench_cmp_u64(const void *a, const void *b) {
        uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

        return (x > y) - (x < y);
}

/* Median ns per call over `reps` calls; 0 on a sampler error. */
static uint64_t bench_one(zr_sampler_params p, unsigned reps, uint64_t *idx, uint64_t *times) {
        uint64_t sink = 0;

        for (unsigned i = 0; i < BENCH_WARMUP + reps; i++) {
                uint64_t t0 = workload_now_ns();

                p.step = i;
                if (zr_sampler_indices(&p, idx, NULL) < 0)
                        return 0;
                if (i >= BENCH_WARMUP)
                        times[i - BENCH_WARMUP] = workload_now_ns() - t0;
                sink += idx[i % p.batch_size];
        }
        qsort(times, reps, sizeof(*times), bench_cmp_u64);
        __asm__ volatile("" : : "r"(sink));
        return times[reps / 2];
}

/* Median ns per mixture batch over `reps` calls at consecutive steps. */
static uint64_t bench_mix(const zr_mixture *m, unsigned reps, uint32_t *src, uint64_t *idx, uint64_t *times) {
        uint64_t sink = 0;

        for (unsigned i = 0; i < BENCH_WARMUP + reps; i++) {
                uint64_t t0 = workload_now_ns();

                if (zr_mixture_batch(m, i, 0, src, idx, NULL) < 0)
                        return 0;
                if (i >= BENCH_WARMUP)
                        times[i - BENCH_WARMUP] = workload_now_ns() - t0;
                sink += idx[i % m->batch_size] + src[i % m->batch_size];
        }
        qsort(times, reps, sizeof(*times), bench_cmp_u64);
        __asm__ volatile("" : : "r"(sink));
        return times[reps / 2];
}

static int bench_count_hits(void *userdata, const zr_sampler_hit *hits, size_t count) {
        (void)hits;
        *(uint64_t *)userdata += count;
        return 0;
}

/* The mixtures and inverses of --mix; prints a table or JSON. */
static int bench_mixtures(int json, unsigned reps, uint64_t cycles, uint64_t *idx, uint64_t *times) {
        static zr_mixture m3, m16;
        static const zr_mixture_source three[3] = { { ZR_SAMPLER_CYCLIC, 1000000, 70 },
                                                    { ZR_SAMPLER_CYCLIC, 300000, 20 },
                                                    { ZR_SAMPLER_CYCLIC, 100000, 10 } };
        zr_mixture_source sixteen[16];
        uint32_t *src = malloc(bench_batches[2] * sizeof(*src));
        uint64_t hits = 0, t0, ns_cyc, ns_mix, ns_iid, iid_positions = UINT64_C(1) << 24;
        zr_steps_of_ops ops = { .on_hits = bench_count_hits, .userdata = &hits };
        zr_sampler_params p = { .mode = ZR_SAMPLER_CYCLIC, .n = 1000000, .batch_size = 1024, .seed = 0x5eed,
                                .world_size = 1 };
        int first = 1, r = -1;

        if (!src)
                return -1;
        for (unsigned k = 0; k < 16; k++)
                sixteen[k] = (zr_mixture_source){ .mode = (enum zr_sampler_mode)(k % 4), .n = 100000 + k * 7919,
                                                  .weight = 1 + k * k };
        if (json)
                printf("{\"reps\": %u, \"batches\": [", reps);
        else
                printf("%-8s %14s %14s %14s %10s %10s\n", "batch", "cyclic ns", "mix3 ns", "mix16 ns", "mix3/cyc",
                       "mix16/cyc");
        for (size_t b = 0; b < sizeof(bench_batches) / sizeof(*bench_batches); b++) {
                zr_sampler_params q = p;
                uint64_t plain, mix3, mix16;

                q.batch_size = bench_batches[b];
                if (zr_mixture_init(&m3, three, 3, bench_batches[b], 1, 0x5eed, NULL) < 0 ||
                    zr_mixture_init(&m16, sixteen, 16, bench_batches[b], 1, 0x5eed, NULL) < 0)
                        goto done;
                plain = bench_one(q, reps, idx, times);
                mix3 = bench_mix(&m3, reps, src, idx, times);
                mix16 = bench_mix(&m16, reps, src, idx, times);
                if (json)
                        printf("%s{\"batch\": %" PRIu64 ", \"cyclic_ns\": %" PRIu64 ", \"mix3_ns\": %" PRIu64
                               ", \"mix16_ns\": %" PRIu64 "}", first ? "" : ", ", bench_batches[b], plain, mix3, mix16);
                else
                        printf("%-8" PRIu64 " %14" PRIu64 " %14" PRIu64 " %14" PRIu64 " %10.2f %10.2f\n",
                               bench_batches[b], plain, mix3, mix16, (double)mix3 / (double)plain,
                               (double)mix16 / (double)plain);
                first = 0;
        }

        /* cyclic over `cycles` cycles: m = 976 steps per cycle at n = 1M, batch 1024 */
        t0 = workload_now_ns();
        if (zr_sampler_steps_of(&p, 123456, 0, cycles * (p.n / p.batch_size), &ops, NULL) != 0)
                goto done;
        ns_cyc = workload_now_ns() - t0;
        /* a mixture's cyclic source of 1M records, 70 % of 1024: 716.8 draws a step */
        if (zr_mixture_init(&m3, three, 3, 1024, 1, 0x5eed, NULL) < 0)
                goto done;
        t0 = workload_now_ns();
        if (zr_mixture_steps_of(&m3, 0, 123456, 0, cycles * 1000000 * 10 / 7168 + 1, &ops, NULL) != 0)
                goto done;
        ns_mix = workload_now_ns() - t0;
        /* the iid scan: 2^24 positions */
        p.mode = ZR_SAMPLER_IID;
        t0 = workload_now_ns();
        if (zr_sampler_steps_of(&p, 123456, 0, iid_positions / p.batch_size, &ops, NULL) != 0)
                goto done;
        ns_iid = workload_now_ns() - t0;
        if (json)
                printf("], \"inverse\": {\"cycles\": %" PRIu64 ", \"cyclic_ns\": %" PRIu64 ", \"mixture_ns\": %"
                       PRIu64 ", \"iid_positions\": %" PRIu64 ", \"iid_ns\": %" PRIu64 ", \"hits\": %" PRIu64
                       "}}\n", cycles, ns_cyc, ns_mix, iid_positions, ns_iid, hits);
        else
                printf("steps of a record: cyclic over %" PRIu64 " cycles %.1f ms (%.0f ns a cycle); a mixture's "
                       "cyclic source over as many of its cycles %.1f ms; iid scan %.2f ns a position (%" PRIu64
                       " hits in all)\n", cycles, ns_cyc / 1e6, (double)ns_cyc / (double)cycles, ns_mix / 1e6,
                       (double)ns_iid / (double)iid_positions, hits);
        r = 0;
done:
        free(src);
        return r;
}

int main(int argc, char **argv) {
        uint64_t n = BENCH_N_DEFAULT, *idx = NULL, *times = NULL, cycles = 1000000;
        unsigned reps = BENCH_REPS_DEFAULT;
        int json = 0, first = 1, r = EXIT_FAILURE, mix = 0;

        for (int i = 1; i < argc; i++) {
                if (strcmp(argv[i], "--json") == 0)
                        json = 1;
                else if (strcmp(argv[i], "--mix") == 0)
                        mix = 1;
                else if (strcmp(argv[i], "--cycles") == 0 && i + 1 < argc)
                        cycles = strtoull(argv[++i], NULL, 0);
                else if (strcmp(argv[i], "--n") == 0 && i + 1 < argc)
                        n = strtoull(argv[++i], NULL, 0);
                else if (strcmp(argv[i], "--reps") == 0 && i + 1 < argc)
                        reps = (unsigned)strtoul(argv[++i], NULL, 0);
                else {
                        fprintf(stderr, "usage: %s [--json] [--n N] [--reps R] | --mix [--json] [--reps R] "
                                        "[--cycles C]\n", argv[0]);
                        return EXIT_FAILURE;
                }
        }
        if (reps == 0 || n == 0 || cycles == 0) {
                fprintf(stderr, "--n, --reps and --cycles must be positive\n");
                return EXIT_FAILURE;
        }

        idx = malloc(bench_batches[2] * sizeof(*idx));
        times = malloc(reps * sizeof(*times));
        if (!idx || !times) {
                fprintf(stderr, "out of memory\n");
                goto finish;
        }
        if (mix) {
                if (bench_mixtures(json, reps, cycles, idx, times) < 0)
                        fprintf(stderr, "%s: a mixture or an inverse failed\n", argv[0]);
                else
                        r = EXIT_SUCCESS;
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
