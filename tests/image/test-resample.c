/* test-resample.c: image/resample.h against a reference written here in
 * double precision from Pillow's definition (the triangle filter scaled by the
 * reduction, bounds from the pixel centre, normalized weights, the
 * horizontal pass rounded to 8 bits before the vertical one): every output
 * within one level of it; the identity exact; a flip the mirror image; a
 * constant image constant; the vector kernels the scalar ones' bytes. */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check-run.h"
#include "image/resample.h"

static double tri(double x) {
        x = fabs(x);
        return x < 1 ? 1 - x : 0;
}

/* One axis of the reference: out[i] from in[] of n (stride st) over [b0, b0+bl). */
static void ref_axis(const double *in, size_t n, size_t st, double *out, size_t ost, uint32_t m,
                     double b0, double bl) {
        double scale = bl / m, fs = scale > 1 ? scale : 1;
        uint32_t ks = (uint32_t)ceil(fs) * 2 + 1;
        for (uint32_t i = 0; i < m; i++) {
                double c = b0 + (i + 0.5) * scale, a = c - fs + 0.5, b = c + fs + 0.5;
                long lo = a < 0 ? 0 : (long)a, hi = (long)b;
                if (hi > (long)n)
                        hi = (long)n;
                if (hi - lo > (long)ks)
                        hi = lo + ks;
                double ww = 0, s = 0;
                for (long x = lo; x < hi; x++)
                        ww += tri((x - c + 0.5) / fs);
                for (long x = lo; x < hi; x++)
                        s += in[x * st] * tri((x - c + 0.5) / fs) / ww;
                out[i * ost] = s;
        }
}

static uint8_t *pattern(uint32_t w, uint32_t h, uint32_t c, unsigned seed) {
        uint8_t *p = malloc((size_t)w * h * c);
        uint32_t x = seed * 2654435761u + 1;
        for (size_t i = 0; i < (size_t)w * h * c; i++) {
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                p[i] = (uint8_t)((i / c % w) * 200 / w + (x & 31));
        }
        return p;
}

static void check_against_reference(uint32_t w, uint32_t h, uint32_t c, double bx, double by,
                                    double bw, double bh, uint32_t ow, uint32_t oh, bool flip) {
        uint8_t *img = pattern(w, h, c, w * 31 + h), *out = malloc((size_t)ow * oh * c);
        zr_resample_src src = { .data = img, .w = w, .h = h, .c = c, .stride = (size_t)w * c,
                                .x = bx, .y = by, .bw = bw, .bh = bh };
        void *scratch = malloc(zr_resample_scratch_bytes(&src, ow, oh));
        double *in = malloc(sizeof(double) * w), *mid = malloc(sizeof(double) * (size_t)h * ow),
               *col = malloc(sizeof(double) * h), *res = malloc(sizeof(double) * oh);

        zr_resample(&src, out, ow, oh, flip, scratch);
        for (uint32_t ch = 0; ch < c; ch++) {
                for (uint32_t y = 0; y < h; y++) {
                        double row[ow];
                        for (uint32_t x = 0; x < w; x++)
                                in[x] = img[((size_t)y * w + x) * c + ch];
                        ref_axis(in, w, 1, row, 1, ow, bx, bw);
                        for (uint32_t i = 0; i < ow; i++) /* rounded to 8 bits, as Pillow */
                                mid[(size_t)y * ow + i] = fmin(255, fmax(0, floor(row[i] + 0.5)));
                }
                for (uint32_t i = 0; i < ow; i++) {
                        for (uint32_t y = 0; y < h; y++)
                                col[y] = mid[(size_t)y * ow + i];
                        ref_axis(col, h, 1, res, 1, oh, by, bh);
                        for (uint32_t j = 0; j < oh; j++) {
                                uint32_t oi = flip ? ow - 1 - i : i;
                                double want = fmin(255, fmax(0, floor(res[j] + 0.5)));
                                int got = out[((size_t)j * ow + oi) * c + ch];
                                ck_assert_msg(fabs(got - want) <= 1, "%ux%u box (%g %g %g %g) -> "
                                              "%ux%u: (%u, %u, %u) is %d, reference %g", w, h, bx,
                                              by, bw, bh, ow, oh, j, i, ch, got, want);
                        }
                }
        }
        free(img), free(out), free(scratch), free(in), free(mid), free(col), free(res);
}

START_TEST(reference) {
        /* the scalar passes, then the CPU's best (the same where it has no AVX2) */
        for (int mode = 0; mode <= 1; mode++) {
                zr_resample_simd(mode);
                check_against_reference(64, 48, 3, 0, 0, 64, 48, 32, 24, false);     /* 2x down */
                check_against_reference(64, 48, 3, 5, 7, 40, 30, 17, 11, true);      /* odd factors */
                check_against_reference(50, 40, 3, 10.5, 3.25, 20.75, 30.5, 64, 64, false); /* up */
                check_against_reference(31, 29, 1, 0, 0, 31, 29, 7, 30, true);       /* down x, up y */
                check_against_reference(500, 375, 3, 78, 12, 172, 155, 224, 224, true);
                check_against_reference(300, 200, 3, 0.375, 0.125, 299.5, 199.75, 224, 224, false);
        }
}
END_TEST

/* The AVX2 passes (where the CPU has them) make the scalar ones' bytes, over
 * random images, boxes and outputs: odd and even row counts, boxes reaching
 * the image's last row and column, upscales and downscales, 1 to 4 channels. */
START_TEST(kernels_agree) {
        uint32_t x = 12345;
#define RND() (x ^= x << 13, x ^= x >> 17, x ^= x << 5, x)
        for (int t = 0; t < 3000; t++) {
                uint32_t c = t % 4 + 1, w = 1 + RND() % 120, h = 1 + RND() % 120;
                uint32_t ow = 1 + RND() % 100, oh = 1 + RND() % 100;
                double bw = (RND() % 1000 + 1) / 1000.0 * w, bh = (RND() % 1000 + 1) / 1000.0 * h;
                double bx = (RND() % 1001) / 1000.0 * (w - bw), by = (RND() % 1001) / 1000.0 * (h - bh);
                bool flip = RND() & 1;
                if (t % 7 == 0) { /* the whole image: its last row and column */
                        bx = by = 0;
                        bw = w;
                        bh = h;
                }
                size_t n = (size_t)w * h * c, on = (size_t)ow * oh * c;
                uint8_t *img = malloc(n), *a = malloc(on), *b = malloc(on);
                for (size_t i = 0; i < n; i++)
                        img[i] = (uint8_t)RND();
                zr_resample_src src = { .data = img, .w = w, .h = h, .c = c, .stride = (size_t)w * c,
                                        .x = bx, .y = by, .bw = bw, .bh = bh };
                void *scratch = malloc(zr_resample_scratch_bytes(&src, ow, oh));
                zr_resample_simd(0);
                zr_resample(&src, a, ow, oh, flip, scratch);
                zr_resample_simd(1);
                zr_resample(&src, b, ow, oh, flip, scratch);
                ck_assert_msg(memcmp(a, b, on) == 0, "%ux%ux%u box (%g %g %g %g) -> %ux%u%s: the "
                              "kernels differ", w, h, c, bx, by, bw, bh, ow, oh, flip ? " flipped" : "");
                free(img), free(a), free(b), free(scratch);
        }
#undef RND
}
END_TEST

START_TEST(identity_flip_constant) {
        uint32_t w = 37, h = 23, c = 3;
        uint8_t *img = pattern(w, h, c, 5), *out = malloc(w * h * c), *fl = malloc(w * h * c);
        zr_resample_src src = { .data = img, .w = w, .h = h, .c = c, .stride = w * c, .bw = w,
                                .bh = h };
        void *scratch = malloc(zr_resample_scratch_bytes(&src, w, h));

        zr_resample(&src, out, w, h, false, scratch);
        ck_assert(memcmp(out, img, w * h * c) == 0);
        zr_resample(&src, fl, w, h, true, scratch);
        for (uint32_t y = 0; y < h; y++)
                for (uint32_t x = 0; x < w; x++)
                        ck_assert(memcmp(fl + (y * w + x) * c, img + (y * w + (w - 1 - x)) * c, c) == 0);
        memset(img, 77, w * h * c);
        free(scratch);
        src.bw = 20.5;
        src.bh = 11.25;
        src.x = 3.3;
        src.y = 2.1;
        scratch = malloc(zr_resample_scratch_bytes(&src, 9, 40));
        uint8_t *o2 = malloc(9 * 40 * c);
        zr_resample(&src, o2, 9, 40, true, scratch);
        for (size_t i = 0; i < 9 * 40 * c; i++)
                ck_assert_uint_eq(o2[i], 77);
        free(img), free(out), free(fl), free(scratch), free(o2);
}
END_TEST

/* The rows the vertical pass reads are exactly the union of its windows. */
START_TEST(rows) {
        uint32_t first, end;

        zr_resample_rows(0, 100, 100, 100, &first, &end);
        ck_assert_uint_eq(first, 0);
        ck_assert_uint_eq(end, 100);
        zr_resample_rows(10, 50, 375, 25, &first, &end);
        ck_assert_uint_ge(first, 8);
        ck_assert_uint_le(first, 10);
        ck_assert_uint_ge(end, 60);
        ck_assert_uint_le(end, 62);
}
END_TEST

TL_SUITE_MAIN("resample", reference, identity_flip_constant, rows, kernels_agree)
