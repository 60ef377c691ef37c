/* test-augment.c: the crop boxes and flips of image/augment.h: the engine
 * reproduces proto/vectors/augment.jsonl (from $ZR_VECTORS) bit for bit, and
 * the boxes have the properties proto/AUGMENT.md promises (inside the image,
 * the area and ratio drawn in their ranges, a flip half the time, positions
 * independent of one another). */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check-run.h"
#include "image/augment.h"

static double num(const char *line, const char *key) {
        char pat[64];
        const char *p;

        snprintf(pat, sizeof(pat), "\"%s\": ", key);
        p = strstr(line, pat);
        ck_assert_msg(p, "no %s in %.80s", key, line);
        return strtod(p + strlen(pat), NULL);
}

static uint64_t u64(const char *line, const char *key) {
        char pat[64];
        const char *p;

        snprintf(pat, sizeof(pat), "\"%s\": ", key);
        p = strstr(line, pat);
        ck_assert_msg(p, "no %s in %.80s", key, line);
        return strtoull(p + strlen(pat), NULL, 10);
}

/* The two numbers of "key": [a, b]. */
static void pair(const char *line, const char *key, double v[2]) {
        char pat[64];
        const char *p;
        char *end;

        snprintf(pat, sizeof(pat), "\"%s\": [", key);
        p = strstr(line, pat);
        ck_assert_msg(p, "no %s in %.80s", key, line);
        v[0] = strtod(p + strlen(pat), &end);
        v[1] = strtod(end + 1, NULL);
}

START_TEST(vectors) {
        char path[4096], line[1024];
        const char *dir = getenv("ZR_VECTORS");
        unsigned n = 0, fallback = 0, flips = 0, kinds[3] = {0};
        FILE *f;

        ck_assert_msg(dir, "ZR_VECTORS is not set");
        snprintf(path, sizeof(path), "%s/augment.jsonl", dir);
        f = fopen(path, "r");
        ck_assert_msg(f, "%s: cannot open", path);
        while (fgets(line, sizeof(line), f)) {
                zr_augment a = {0};
                double box[4];
                const char *crop = strstr(line, "\"crop\": \"") + 9;

                a.crop = strncmp(crop, "random_resized", 14) == 0 ? ZR_CROP_RANDOM_RESIZED :
                         strncmp(crop, "center", 6) == 0 ? ZR_CROP_CENTER : ZR_CROP_NONE;
                a.flip = strstr(line, "\"flip\": true") != NULL;
                pair(line, "scale", a.scale);
                pair(line, "ratio", a.ratio);
                a.fraction = num(line, "fraction");
                a.out_h = (uint32_t)u64(line, "out_h");
                a.out_w = (uint32_t)u64(line, "out_w");
                uint32_t w = (uint32_t)u64(line, "width"), h = (uint32_t)u64(line, "height");
                const char *bp = strstr(line, "\"box\": [") + 8;
                for (int i = 0; i < 4; i++) {
                        char *end;
                        box[i] = strtod(bp, &end);
                        bp = end + 1;
                }
                zr_box b = zr_augment_box(&a, zr_augment_key(u64(line, "seed"), u64(line, "step")),
                                          u64(line, "pos"), w, h);
                int flipped = strstr(line, "\"flipped\": true") != NULL;
                ck_assert_msg(b.x == box[0] && b.y == box[1] && b.w == box[2] && b.h == box[3] &&
                              b.flip == flipped,
                              "line %u: box (%u, %u, %u, %u) flip %d, the file says (%g, %g, %g, "
                              "%g) %d", n + 1, b.x, b.y, b.w, b.h, b.flip, box[0], box[1], box[2],
                              box[3], flipped);
                n++;
                kinds[a.crop]++;
                flips += flipped;
                fallback += a.crop == ZR_CROP_RANDOM_RESIZED && (w == 1000 || h == 1000);
        }
        fclose(f);
        /* the file still covers what proto/AUGMENT.md says it does */
        ck_assert_uint_ge(n, 300);
        ck_assert_uint_gt(kinds[ZR_CROP_RANDOM_RESIZED], 0);
        ck_assert_uint_gt(kinds[ZR_CROP_CENTER], 0);
        ck_assert_uint_gt(kinds[ZR_CROP_NONE], 0);
        ck_assert_uint_gt(fallback, 0);
        ck_assert_uint_gt(flips, 0);
}
END_TEST

/* Inside the image, the area fraction in [lo, hi] and the ratio in its range
 * (up to rounding), on average the torchvision distribution's mean area. */
START_TEST(properties) {
        zr_augment a = { .crop = ZR_CROP_RANDOM_RESIZED, .flip = true, .scale = { 0.08, 1.0 },
                         .ratio = { 3.0 / 4.0, 4.0 / 3.0 } };
        const uint32_t W = 500, H = 375;
        double area = 0;
        unsigned flips = 0, N = 20000, same = 0;
        zr_box prev = {0};

        for (unsigned i = 0; i < N; i++) {
                uint64_t key = zr_augment_key(3, i / 256);
                zr_box b = zr_augment_box(&a, key, i % 256, W, H);
                ck_assert(b.w >= 1 && b.h >= 1 && b.x + b.w <= W && b.y + b.h <= H);
                double r = (double)b.w / b.h;
                ck_assert_msg(r > 0.7 && r < 1.4, "ratio %g", r);
                area += (double)b.w * b.h / (W * H);
                flips += b.flip;
                same += b.x == prev.x && b.y == prev.y && b.w == prev.w && b.h == prev.h;
                prev = b;
        }
        area /= N;
        /* E[area] is 0.54 without the rejections; large boxes are rejected more
         * on a 4:3 image, so a little less */
        ck_assert_msg(area > 0.40 && area < 0.56, "mean area %g", area);
        ck_assert_msg(flips > N * 0.48 && flips < N * 0.52, "flips %u of %u", flips, N);
        ck_assert_uint_lt(same, 10);
        /* a pure function: the same arguments, the same box */
        zr_box x = zr_augment_box(&a, zr_augment_key(1, 2), 3, W, H),
               y = zr_augment_box(&a, zr_augment_key(1, 2), 3, W, H);
        ck_assert(x.x == y.x && x.y == y.y && x.w == y.w && x.h == y.h && x.flip == y.flip);
}
END_TEST

START_TEST(checks) {
        const char *why;
        zr_augment a = { .crop = ZR_CROP_RANDOM_RESIZED, .scale = { 0.5, 0.2 }, .ratio = { 1, 1 } };

        ck_assert_int_lt(zr_augment_check(&a, &why), 0);
        a.scale[1] = 1.5;
        ck_assert_int_lt(zr_augment_check(&a, &why), 0);
        a.scale[1] = 1;
        ck_assert_int_eq(zr_augment_check(&a, &why), 0);
        a.ratio[0] = 0;
        ck_assert_int_lt(zr_augment_check(&a, &why), 0);
        a = (zr_augment){ .crop = ZR_CROP_CENTER, .fraction = 0.875 };
        ck_assert_int_lt(zr_augment_check(&a, &why), 0); /* no size */
        a.out_h = a.out_w = 224;
        ck_assert_int_eq(zr_augment_check(&a, &why), 0);
        a.fraction = 1.5;
        ck_assert_int_lt(zr_augment_check(&a, &why), 0);
}
END_TEST

TL_SUITE_MAIN("augment", vectors, properties, checks)
