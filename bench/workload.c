/* workload.c: the benchmarks' deterministic data. See workload.h.
 *
 * The image generator is integer-only (16.16 fixed point) so that it gives the
 * same bytes on every machine and build. It is not a model of any real data set;
 * it is "mildly compressible smooth data", the kind the seed's benchmark uses.
 */
#include "workload.h"

#include <stdlib.h>
#include <time.h>

/* Noise amplitude in bits per pixel: 2 bits (levels 0..3) keeps the data mildly
 * compressible (zstd level 3 lands near 3x on it), like a natural photograph,
 * rather than trivially compressible (no noise) or incompressible (8 bits). */
#define WORKLOAD_NOISE_BITS 2
/* The steepest gradient spans this many grey levels across the whole image. */
#define WORKLOAD_GRADIENT_SPAN 160

uint64_t workload_next(uint64_t *state) {
        uint64_t z = (*state += UINT64_C(0x9e3779b97f4a7c15));
        z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
        z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
        return z ^ (z >> 31);
}

uint64_t workload_mix(uint64_t seed, uint64_t id) {
        uint64_t s = seed ^ (id * UINT64_C(0xd1b54a32d192ed03));
        workload_next(&s);
        return workload_next(&s);
}

void workload_image(uint8_t *dst, size_t width, size_t height, uint64_t seed, uint64_t id) {
        uint64_t st = workload_mix(seed, id);
        uint64_t r = workload_next(&st);
        int64_t base = 48 + (int64_t)(r % 160);
        /* slopes in 1/65536 grey levels per pixel, signed */
        int64_t span = (int64_t)WORKLOAD_GRADIENT_SPAN << 16;
        int64_t sx = width ? ((int64_t)((r >> 8) % 2001) - 1000) * span / 1000 / (int64_t)width : 0;
        int64_t sy = height ? ((int64_t)((r >> 24) % 2001) - 1000) * span / 1000 / (int64_t)height : 0;
        uint64_t bits = 0;
        unsigned have = 0;

        for (size_t y = 0; y < height; y++) {
                int64_t row = (base << 16) + sy * (int64_t)y - (span / 2);
                for (size_t x = 0; x < width; x++) {
                        if (have < WORKLOAD_NOISE_BITS) {
                                bits = workload_next(&st);
                                have = 64;
                        }
                        int64_t v = ((row + sx * (int64_t)x) >> 16) + (int64_t)(bits & ((1u << WORKLOAD_NOISE_BITS) - 1));
                        bits >>= WORKLOAD_NOISE_BITS;
                        have -= WORKLOAD_NOISE_BITS;
                        dst[y * width + x] = (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
                }
        }
}

uint8_t *workload_images(size_t n, size_t width, size_t height, uint64_t seed) {
        size_t rec = width * height;
        if (height && rec / height != width)
                return NULL;
        if (rec && n > SIZE_MAX / rec)
                return NULL;
        uint8_t *buf = malloc((n * rec) > 0 ? n * rec : 1);
        if (!buf)
                return NULL;
        for (size_t i = 0; i < n; i++)
                workload_image(buf + i * rec, width, height, seed, i);
        return buf;
}

void workload_draw(uint64_t *idx, size_t n, uint64_t range, uint64_t seed, uint64_t batch) {
        uint64_t st = workload_mix(seed, batch);
        for (size_t i = 0; i < n; i++) {
                /* Lemire: the high half of x * range, rejecting the biased low band */
                for (;;) {
                        unsigned __int128 m = (unsigned __int128)workload_next(&st) * range;
                        uint64_t lo = (uint64_t)m;
                        if (lo < range) {
                                uint64_t t = (0 - range) % range;
                                if (lo < t)
                                        continue;
                        }
                        idx[i] = (uint64_t)(m >> 64);
                        break;
                }
        }
}

uint64_t workload_now_ns(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t)ts.tv_sec * UINT64_C(1000000000) + (uint64_t)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
        double x = *(const double *)a, y = *(const double *)b;
        return (x > y) - (x < y);
}

double workload_median(double *v, size_t n) {
        qsort(v, n, sizeof(*v), cmp_double);
        return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

double workload_min(const double *v, size_t n) {
        double m = v[0];
        for (size_t i = 1; i < n; i++)
                if (v[i] < m)
                        m = v[i];
        return m;
}

int workload_time(workload_step_fn fn, void *arg, size_t warm, size_t timed, double *ret_secs) {
        int r;

        for (size_t i = 0; i < warm; i++) {
                r = fn(arg, i);
                if (r < 0)
                        return r;
        }
        for (size_t i = 0; i < timed; i++) {
                uint64_t t0 = workload_now_ns();
                r = fn(arg, warm + i);
                if (r < 0)
                        return r;
                ret_secs[i] = (double)(workload_now_ns() - t0) / 1e9;
        }
        return 0;
}
