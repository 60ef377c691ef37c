/* c_loader.c: the C client's rate for one loader, for bench_loader.py.
 *
 * Usage: c_loader SOCKET STORE BATCH PREFETCH STEPS [SAMPLER SEED]
 * Opens STORE through libzrc, runs a loader with an identity consumer (next,
 * release) for STEPS batches after 3 warm-up batches, prints "batches_per_s N".
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "zrc.h"

static double now(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
        if (argc < 6) {
                fprintf(stderr, "usage: c_loader SOCKET STORE BATCH PREFETCH STEPS [SAMPLER SEED]\n");
                return 2;
        }
        zrc_conn *c;
        zrc_error e;
        if (zrc_connect(argv[1], &c, &e) < 0) {
                fprintf(stderr, "connect: %s\n", e.message);
                return 1;
        }
        zrc_dataset *d;
        if (zrc_dataset_open(c, argv[2], 0, &d) < 0) {
                fprintf(stderr, "open: %s\n", zrc_last_error(c)->message);
                return 1;
        }
        zrc_loader_options o = {0};
        o.sampler = argc > 6 ? argv[6] : "cyclic";
        o.seed = argc > 7 ? strtoull(argv[7], NULL, 10) : 0;
        o.batch_size = strtoull(argv[3], NULL, 10);
        o.prefetch = (uint32_t)strtoul(argv[4], NULL, 10);
        long steps = strtol(argv[5], NULL, 10);
        zrc_loader *l;
        if (zrc_loader_open(c, &d, 1, &o, &l) < 0) {
                fprintf(stderr, "loader: %s\n", zrc_last_error(c)->message);
                return 1;
        }
        zrc_loader_batch b;
        double t0 = 0;
        volatile unsigned char sink = 0;
        for (long i = 0; i < steps + 3; i++) {
                if (i == 3)
                        t0 = now();
                if (zrc_loader_next(l, &b) < 0) {
                        fprintf(stderr, "next: %s\n", zrc_last_error(c)->message);
                        return 1;
                }
                sink ^= ((const unsigned char *)b.streams[0].data)[0];
                zrc_loader_release(l, b.slot);
        }
        double dt = now() - t0;
        printf("batches_per_s %.2f\n", (double)steps / dt);
        l = zrc_loader_close(l);
        zrc_disconnect(c);
        return 0;
}
