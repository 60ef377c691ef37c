/* image-decode: the daemon's per-record image path alone (image/image.h), the
 * same JPEGs as bench/image-probe, for the images layer (bench/suite/images.py):
 * each record decoded at its DCT scale, cropped, resized and flipped into a
 * 224 × 224 RGB output with the RandomResizedCrop box of its position, as an
 * image stream's fill does, without the store, the ring or the pool.
 *
 *     image-decode FILE THREADS SIDE SECONDS
 *
 * FILE holds the JPEGs back to back, FILE.idx their u64 offsets (n + 1 of them,
 * little-endian). Thread t decodes the records i ≡ t (mod THREADS) as
 * positions of consecutive steps of batch 256, seed 1, over and over for
 * SECONDS. Prints one JSON object: images, seconds, images/s, threads, and the
 * CPU ms an image (the process's, over the run). Between it and image-probe
 * lies what the crop costs (the resize, the flip, a scale chosen for the box,
 * not the image); between it and the layer's zrecord row, the rest of the
 * daemon's work (the gather, the pool, the ring). */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "image/image.h"

static uint8_t *data;
static uint64_t *idx;
static size_t n;
static int threads;
static uint32_t side;
static double seconds;

static double now(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static double cpu_now(void) {
        struct rusage ru;
        getrusage(RUSAGE_SELF, &ru);
        return ru.ru_utime.tv_sec + ru.ru_stime.tv_sec + (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1e-6;
}

typedef struct { int t; uint64_t done, failed; } job;

static zr_image_params params(void) {
        return (zr_image_params){ .aug = { .crop = ZR_CROP_RANDOM_RESIZED, .flip = true,
                                           .scale = { 0.08, 1.0 }, .ratio = { 3.0 / 4, 4.0 / 3 },
                                           .fraction = 0.875, .out_h = side, .out_w = side },
                                  .channels = 3, .max_pixels = ZR_IMAGE_PIXELS_DEFAULT };
}

static void *run(void *arg) {
        job *j = arg;
        zr_image_params p = params();
        zr_image_worker w = {0};
        uint8_t *out = malloc((size_t)side * side * 3);
        double end = now() + seconds;
        uint64_t k = 0;

        while (now() < end) {
                for (size_t i = (size_t)j->t; i < n && now() < end; i += (size_t)threads, k++) {
                        zr_error e = {0};
                        uint64_t step = k / 256, pos = k % 256;
                        if (zr_image_decode(&p, &w, data + idx[i], idx[i + 1] - idx[i],
                                            zr_augment_key(1, step), pos, out, &e) == 0)
                                j->done++;
                        else
                                j->failed++;
                }
        }
        zr_image_worker_clear(&w);
        free(out);
        return NULL;
}

int main(int argc, char **argv) {
        if (argc != 5) {
                fprintf(stderr, "usage: image-decode FILE THREADS SIDE SECONDS\n");
                return 2;
        }
        threads = atoi(argv[2]);
        side = (uint32_t)atoi(argv[3]);
        seconds = atof(argv[4]);
        char ipath[4096];
        snprintf(ipath, sizeof(ipath), "%s.idx", argv[1]);
        FILE *f = fopen(argv[1], "rb"), *fi = fopen(ipath, "rb");
        if (!f || !fi || threads < 1 || threads > 1024 || side < 1 || side > 4096) {
                fprintf(stderr, "image-decode: %s: %s\n", argv[1], strerror(errno));
                return 1;
        }
        fseek(fi, 0, SEEK_END);
        n = (size_t)ftell(fi) / 8 - 1;
        rewind(fi);
        idx = malloc((n + 1) * 8);
        if (fread(idx, 8, n + 1, fi) != n + 1)
                return 1;
        data = malloc(idx[n] ? idx[n] : 1);
        if (fread(data, 1, idx[n], f) != idx[n])
                return 1;
        fclose(f);
        fclose(fi);
        pthread_t tid[1024];
        job jobs[1024];
        double t0 = now(), c0 = cpu_now();
        for (int t = 0; t < threads; t++) {
                jobs[t] = (job){ .t = t };
                pthread_create(&tid[t], NULL, run, &jobs[t]);
        }
        uint64_t total = 0, failed = 0;
        for (int t = 0; t < threads; t++) {
                pthread_join(tid[t], NULL);
                total += jobs[t].done;
                failed += jobs[t].failed;
        }
        double dt = now() - t0, cpu = cpu_now() - c0;
        printf("{\"images\": %llu, \"failed\": %llu, \"seconds\": %.3f, \"images_per_s\": %.1f, "
               "\"threads\": %d, \"cpu_ms\": %.3f}\n", (unsigned long long)total,
               (unsigned long long)failed, dt, total / dt, threads, total ? cpu * 1e3 / total : 0);
        return 0;
}
