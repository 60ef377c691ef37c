/* limits.c: `limits`, the machine-limit probes on their own.
 *
 * Prints, for the two workloads of the store benchmark, the single- and
 * multi-threaded memcpy gather and zstd decompress gather rates on this machine
 * (and the multi-threaded gather through streaming stores, util/copy.h),
 * with no store involved. store-bench runs the same probes beside the store;
 * this binary is for looking at the machine alone (and for issue-9 comparisons
 * with other contenders). Usage: limits [--quick] [--records N] [--batches N]
 * [--threads N].
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "limits-probe.h"
#include "workload.h"

#define DATA_SEED UINT64_C(0x5eed)
#define DRAW_SEED UINT64_C(0xba7c4)
#define WARM_BATCHES 3 /* first-touch and cache warm-up before timing */

typedef struct probe {
        limits_team *team;
        ZSTD_DCtx **dctx;
        const limits_frames *frames;
        const uint8_t *data;
        uint8_t *dst;
        size_t rec, nrec, batch;
        uint64_t *idx;
        int zstd; /* 0 memcpy, 1 zstd, 2 streaming copy */
} probe;

static int probe_step(void *arg, uint64_t b) {
        probe *p = arg;
        workload_draw(p->idx, p->batch, p->nrec, DRAW_SEED, b);
        if (p->zstd == 1)
                return limits_zstd_gather(p->team, p->dctx, NULL, p->frames, p->dst, p->idx, p->batch);
        if (p->zstd == 2) {
                limits_stream_gather(p->team, p->dst, p->data, p->rec, p->idx, p->batch);
                return 0;
        }
        limits_memcpy_gather(p->team, p->dst, p->data, p->rec, p->idx, p->batch);
        return 0;
}

static int run_workload(const char *name, size_t side, size_t nrec, size_t batch, size_t batches,
                        limits_team *team) {
        size_t rec = side * side;
        uint8_t *data = workload_images(nrec, side, side, DATA_SEED);
        uint8_t *dst = malloc(batch * rec);
        uint64_t *idx = malloc(batch * sizeof(*idx));
        double *secs = malloc(batches * sizeof(*secs));
        size_t nt = limits_team_size(team);
        ZSTD_DCtx **dctx = calloc(nt, sizeof(*dctx));
        limits_frames *frames = NULL;
        int r = -ENOMEM;

        if (!data || !dst || !idx || !secs || !dctx)
                goto out;
        memset(dst, 0, batch * rec); /* pre-fault */
        for (size_t i = 0; i < nt; i++)
                if (!(dctx[i] = ZSTD_createDCtx()))
                        goto out;
        r = limits_frames_new(team, data, rec, nrec, 3, NULL, &frames);
        if (r < 0)
                goto out;
        printf("%s: %zu records of %zu B, batch %zu (%.1f MiB), zstd-3 ratio %.2f\n", name, nrec,
               rec, batch, batch * rec / 1048576.0, (double)nrec * rec / (double)frames->total);
        static const struct { const char *label; int zstd; int mt; } probes[] = {
                { "memcpy gather, 1 thread", 0, 0 },
                { "memcpy gather, all threads", 0, 1 },
                { "streaming gather, all threads", 2, 1 },
                { "zstd decompress, 1 thread", 1, 0 },
                { "zstd decompress, all threads", 1, 1 },
        };
        for (size_t k = 0; k < sizeof(probes) / sizeof(probes[0]); k++) {
                probe p = { .team = probes[k].mt ? team : NULL, .dctx = dctx, .frames = frames,
                            .data = data, .dst = dst, .rec = rec, .nrec = nrec, .batch = batch,
                            .idx = idx, .zstd = probes[k].zstd };
                r = workload_time(probe_step, &p, WARM_BATCHES, batches, secs);
                if (r < 0)
                        goto out;
                double gib = batch * rec / 1073741824.0;
                double best = workload_min(secs, batches);
                double med = workload_median(secs, batches);
                printf("  %-30s %8.2f GiB/s median  %8.2f GiB/s best\n", probes[k].label,
                       gib / med, gib / best);
        }
        r = 0;
out:
        if (dctx)
                for (size_t i = 0; i < nt; i++)
                        ZSTD_freeDCtx(dctx[i]);
        free(dctx);
        limits_frames_free(frames);
        free(secs);
        free(idx);
        free(dst);
        free(data);
        return r;
}

int main(int argc, char **argv) {
        size_t records = 2500, small_records = 65536, batches = 15;
        long threads = sysconf(_SC_NPROCESSORS_ONLN);
        limits_team *team = NULL;
        int r;

        for (int i = 1; i < argc; i++) {
                if (!strcmp(argv[i], "--quick")) {
                        records = 300;
                        small_records = 4096;
                        batches = 3;
                } else if (!strcmp(argv[i], "--records") && i + 1 < argc) {
                        records = strtoull(argv[++i], NULL, 0);
                } else if (!strcmp(argv[i], "--batches") && i + 1 < argc) {
                        batches = strtoull(argv[++i], NULL, 0);
                } else if (!strcmp(argv[i], "--threads") && i + 1 < argc) {
                        threads = strtol(argv[++i], NULL, 0);
                } else {
                        fprintf(stderr, "usage: %s [--quick] [--records N] [--batches N] [--threads N]\n",
                                argv[0]);
                        return 2;
                }
        }
        if (threads < 1 || records < 1 || batches < 1) {
                fprintf(stderr, "%s: --threads, --records and --batches must be >= 1\n", argv[0]);
                return 2;
        }
        r = limits_team_new((size_t)threads, &team);
        if (r < 0) {
                fprintf(stderr, "%s: cannot start threads: %s\n", argv[0], strerror(-r));
                return 1;
        }
        printf("limits: %ld threads, %zu timed batches each (median and best)\n", threads, batches);
        r = run_workload("256 KiB images", 512, records, 256, batches, team);
        if (r >= 0)
                r = run_workload("4 KiB tiles", 64, small_records, 1024, batches, team);
        limits_team_free(team);
        if (r < 0) {
                fprintf(stderr, "%s: %s\n", argv[0], strerror(-r));
                return 1;
        }
        return 0;
}
