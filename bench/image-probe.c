/* image-probe: the machine's limit for the images layer (bench/suite/images.py):
 * JPEG decode alone, with libjpeg-turbo's TurboJPEG API and its DCT scaling, on
 * every core, no crop, no resize, no store, no copy out.
 *
 *     image-probe FILE THREADS SIDE SECONDS
 *
 * FILE holds the JPEGs back to back, FILE.idx their u64 offsets (n + 1 of them,
 * little-endian). Each thread decodes the images i ≡ t (mod THREADS) in turn, over
 * and over for SECONDS, each at the smallest scaling factor (of M/8) at which both
 * sides stay at least SIDE pixels (the least a 224-pixel crop of the whole image
 * needs), into RGB, with TurboJPEG's defaults (the accurate integer IDCT, fancy
 * upsampling: the daemon's settings). Prints one JSON object: images decoded,
 * seconds, images/s, threads. */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <turbojpeg.h>

static uint8_t *data;
static uint64_t *idx;
static size_t n;
static int threads, side;
static double seconds;

static double now(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return ts.tv_sec + ts.tv_nsec * 1e-9;
}

typedef struct { int t; uint64_t done; } job;

static void *run(void *arg) {
        job *j = arg;
        tjhandle h = tjInitDecompress();
        int nsf;
        tjscalingfactor *sf = tjGetScalingFactors(&nsf);
        size_t cap = 0;
        uint8_t *buf = NULL;
        double end = now() + seconds;

        while (now() < end) {
                for (size_t i = (size_t)j->t; i < n && now() < end; i += (size_t)threads) {
                        int w, hh, sub, cs;
                        const uint8_t *p = data + idx[i];
                        unsigned long len = (unsigned long)(idx[i + 1] - idx[i]);
                        if (tjDecompressHeader3(h, p, len, &w, &hh, &sub, &cs) < 0)
                                continue;
                        /* the smallest factor of at most 1 that keeps both sides >= side */
                        int best = -1;
                        for (int k = 0; k < nsf; k++) {
                                if (sf[k].num > sf[k].denom)
                                        continue;
                                int sw = TJSCALED(w, sf[k]), sh = TJSCALED(hh, sf[k]);
                                if (sw < side || sh < side)
                                        continue;
                                if (best < 0 || TJSCALED(w, sf[k]) < TJSCALED(w, sf[best]))
                                        best = k;
                        }
                        tjscalingfactor f = best < 0 ? (tjscalingfactor){ 1, 1 } : sf[best];
                        int sw = TJSCALED(w, f), sh = TJSCALED(hh, f);
                        size_t need = (size_t)sw * sh * 3;
                        if (need > cap) {
                                free(buf);
                                buf = malloc(need);
                                cap = need;
                        }
                        if (tjDecompress2(h, p, len, buf, sw, 0, sh, TJPF_RGB, 0) == 0)
                                j->done++;
                }
        }
        free(buf);
        tjDestroy(h);
        return NULL;
}

int main(int argc, char **argv) {
        if (argc != 5) {
                fprintf(stderr, "usage: image-probe FILE THREADS SIDE SECONDS\n");
                return 2;
        }
        threads = atoi(argv[2]);
        side = atoi(argv[3]);
        seconds = atof(argv[4]);
        char ipath[4096];
        snprintf(ipath, sizeof(ipath), "%s.idx", argv[1]);
        FILE *f = fopen(argv[1], "rb"), *fi = fopen(ipath, "rb");
        if (!f || !fi || threads < 1 || threads > 1024) {
                fprintf(stderr, "image-probe: %s: %s\n", argv[1], strerror(errno));
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
        double t0 = now();
        for (int t = 0; t < threads; t++) {
                jobs[t] = (job){ .t = t };
                pthread_create(&tid[t], NULL, run, &jobs[t]);
        }
        uint64_t total = 0;
        for (int t = 0; t < threads; t++) {
                pthread_join(tid[t], NULL);
                total += jobs[t].done;
        }
        double dt = now() - t0;
        printf("{\"images\": %llu, \"seconds\": %.3f, \"images_per_s\": %.1f, \"threads\": %d}\n",
               (unsigned long long)total, dt, total / dt, threads);
        return 0;
}
