/* resample.c: antialiased bilinear resizing of an image box (resample.h).
 *
 * The weights of each output pixel are computed as Pillow computes them
 * (precompute_coeffs() of its Resample.c: the triangle filter, its support
 * scaled by the reduction, bounds rounded from the pixel centre, the weights
 * normalized, then rounded to 22-bit fixed point); the passes accumulate in 32
 * bits from a rounding half and clip to 0..255. The horizontal pass runs over
 * the rows the vertical one reads, into an intermediate of out_w columns.
 * Each pass has a scalar version and an AVX2 one that computes the same
 * integers (chosen by the CPU at the first call; zr_resample_simd()).
 * It assumes the box lies inside the image (the caller's crop) and at least
 * one output pixel; it allocates nothing.
 */
#include "image/resample.h"

#include <math.h>
#include <stdatomic.h>
#include <string.h>

typedef struct axis {
        uint32_t *lo, *n;  /* per output: first input, inputs */
        int32_t *k;        /* per output: ksize weights */
        uint32_t ksize;
} axis;

static double support_of(double in, uint32_t out) {
        double scale = in / out;
        return scale > 1.0 ? scale : 1.0;
}

static uint32_t ksize_of(double in, uint32_t out) {
        return (uint32_t)ceil(support_of(in, out)) * 2 + 1;
}

static double triangle(double x) {
        if (x < 0)
                x = -x;
        return x < 1.0 ? 1.0 - x : 0.0;
}

/* The inputs [*lo, *lo + *n) of the output whose centre is c on an axis of
 * `size` inputs (at most ksize of them). */
static void window(double c, double support, uint32_t size, uint32_t ksize, uint32_t *lo,
                   uint32_t *n) {
        double a = c - support + 0.5, b = c + support + 0.5;
        int64_t xmin = a < 0 ? 0 : (int64_t)a, xmax = b < 0 ? 0 : (int64_t)b;

        if (xmax > size)
                xmax = size;
        if (xmin > xmax)
                xmin = xmax;
        if (xmax - xmin > ksize)
                xmax = xmin + ksize;
        *lo = (uint32_t)xmin;
        *n = (uint32_t)(xmax - xmin);
}

/* The weights of an axis of `size` inputs, box [b0, b0 + blen), out outputs. */
static void coeffs(axis *a, double b0, double blen, uint32_t size, uint32_t out) {
        double scale = blen / out, support = support_of(blen, out), ss = 1.0 / support;
        double kd[a->ksize];

        for (uint32_t i = 0; i < out; i++) {
                double c = b0 + (i + 0.5) * scale, ww = 0;
                uint32_t lo, n;
                window(c, support, size, a->ksize, &lo, &n);
                for (uint32_t x = 0; x < n; x++) {
                        double w = triangle((x + lo - c + 0.5) * ss);
                        kd[x] = w;
                        ww += w;
                }
                int32_t *k = a->k + (size_t)i * a->ksize;
                for (uint32_t x = 0; x < n; x++) {
                        double w = ww != 0 ? kd[x] / ww : kd[x];
                        k[x] = (int32_t)(w * (1 << ZR_RESAMPLE_BITS) + (w < 0 ? -0.5 : 0.5));
                }
                for (uint32_t x = n; x < a->ksize; x++)
                        k[x] = 0;
                a->lo[i] = lo;
                a->n[i] = n;
        }
}

static uint8_t clip8(int32_t v) {
        v >>= ZR_RESAMPLE_BITS;
        return v < 0 ? 0 : v > 255 ? 255 : (uint8_t)v;
}

void zr_resample_rows(double y, double bh, uint32_t h, uint32_t out_h, uint32_t *ret_first,
                      uint32_t *ret_end) {
        double scale = bh / out_h, support = support_of(bh, out_h);
        uint32_t k = ksize_of(bh, out_h), lo0, n0, lo1, n1;

        /* windows only move forward: the first's start, the last's end */
        window(y + 0.5 * scale, support, h, k, &lo0, &n0);
        window(y + (out_h - 0.5) * scale, support, h, k, &lo1, &n1);
        *ret_first = lo0;
        *ret_end = lo1 + n1 > lo0 ? lo1 + n1 : lo0;
}

static size_t axis_bytes(double blen, uint32_t out) {
        return (size_t)out * (2 * sizeof(uint32_t) + ksize_of(blen, out) * sizeof(int32_t));
}

size_t zr_resample_scratch_bytes(const zr_resample_src *src, uint32_t out_w, uint32_t out_h) {
        uint32_t first, end;

        zr_resample_rows(src->y, src->bh, src->h, out_h, &first, &end);
        return axis_bytes(src->bw, out_w) + axis_bytes(src->bh, out_h) +
               (size_t)(end - first) * out_w * src->c + 64;
}

static void *carve(uint8_t **at, size_t bytes) {
        void *p = *at;
        *at += (bytes + 7) & ~(size_t)7;
        return p;
}

/* One row of n pixels of C channels through axis a into out (flipped when asked). */
static void hpass_row(const axis *a, const uint8_t *in, uint8_t *out, uint32_t n, uint32_t C,
                      bool flip) {
        for (uint32_t i = 0; i < n; i++) {
                const int32_t *k = a->k + (size_t)i * a->ksize;
                const uint8_t *p = in + (size_t)a->lo[i] * C;
                uint8_t *o = out + (size_t)(flip ? n - 1 - i : i) * C;
                uint32_t m = a->n[i];
                if (C == 3) {
                        int32_t s0 = 1 << (ZR_RESAMPLE_BITS - 1), s1 = s0, s2 = s0;
                        for (uint32_t x = 0; x < m; x++, p += 3) {
                                s0 += p[0] * k[x];
                                s1 += p[1] * k[x];
                                s2 += p[2] * k[x];
                        }
                        o[0] = clip8(s0);
                        o[1] = clip8(s1);
                        o[2] = clip8(s2);
                        continue;
                }
                for (uint32_t ch = 0; ch < C; ch++) {
                        int32_t s = 1 << (ZR_RESAMPLE_BITS - 1);
                        for (uint32_t x = 0; x < m; x++)
                                s += p[(size_t)x * C + ch] * k[x];
                        o[ch] = clip8(s);
                }
        }
}

/* ---- AVX2 -------------------------------------------------------------------
 * The same sums as hpass_row() and the scalar vertical pass, in the same 32-bit
 * integers (vpmulld, vpaddd), so their bytes are the same; clip8 is an
 * arithmetic shift and the saturating packs. Chosen at run time by the CPU;
 * elsewhere the scalar passes run. */
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define HAVE_AVX2_KERNELS 1
#include <immintrin.h>

#define HALF (1 << (ZR_RESAMPLE_BITS - 1))

/* Two rows of 3-channel pixels through axis a at once, each pixel 4 lanes
 * (RGBx, rows side by side): a tap loads 4 bytes of each row (the 4th, the
 * next pixel's first, is never used), so neither row may be the image's last,
 * where the last pixel's 4th byte would lie past the image. */
__attribute__((target("avx2"))) static void hpass_pair_avx2(const axis *a, const uint8_t *in0,
                                                            const uint8_t *in1, uint8_t *out0,
                                                            uint8_t *out1, uint32_t n, bool flip) {
        const __m256i half = _mm256_set1_epi32(HALF);

        for (uint32_t i = 0; i < n; i++) {
                const int32_t *k = a->k + (size_t)i * a->ksize;
                const uint8_t *p = in0 + (size_t)a->lo[i] * 3, *q = in1 + (size_t)a->lo[i] * 3;
                uint32_t m = a->n[i];
                __m256i s = half;
                for (uint32_t x = 0; x < m; x++, p += 3, q += 3) {
                        int32_t u, v;
                        memcpy(&u, p, 4);
                        memcpy(&v, q, 4);
                        __m128i b = _mm_insert_epi32(_mm_cvtsi32_si128(u), v, 1);
                        s = _mm256_add_epi32(s, _mm256_mullo_epi32(_mm256_cvtepu8_epi32(b),
                                                                   _mm256_set1_epi32(k[x])));
                }
                s = _mm256_srai_epi32(s, ZR_RESAMPLE_BITS);
                s = _mm256_packus_epi16(_mm256_packs_epi32(s, s), s);
                int32_t r0 = _mm_cvtsi128_si32(_mm256_castsi256_si128(s));
                int32_t r1 = _mm_cvtsi128_si32(_mm256_extracti128_si256(s, 1));
                size_t o = (size_t)(flip ? n - 1 - i : i) * 3;
                memcpy(out0 + o, &r0, 3);
                memcpy(out1 + o, &r1, 3);
        }
}

/* The vertical pass: out_h rows of `row` bytes from the intermediate `mid`
 * (its rows from `first`), 16 bytes of a row at a time over every tap. */
__attribute__((target("avx2"))) static void vpass_avx2(const axis *v, const uint8_t *mid,
                                                       uint32_t first, uint8_t *dst, size_t row,
                                                       uint32_t out_h) {
        const __m256i half = _mm256_set1_epi32(HALF);

        for (uint32_t i = 0; i < out_h; i++) {
                const int32_t *k = v->k + (size_t)i * v->ksize;
                const uint8_t *base = mid + (size_t)(v->lo[i] - first) * row;
                uint32_t m = v->n[i];
                uint8_t *o = dst + (size_t)i * row;
                size_t j = 0;
                for (; j + 16 <= row; j += 16) {
                        const uint8_t *p = base + j;
                        __m256i s0 = half, s1 = half;
                        for (uint32_t y = 0; y < m; y++, p += row) {
                                __m256i w = _mm256_set1_epi32(k[y]);
                                __m128i b = _mm_loadu_si128((const __m128i *)p);
                                s0 = _mm256_add_epi32(s0, _mm256_mullo_epi32(
                                                                  _mm256_cvtepu8_epi32(b), w));
                                s1 = _mm256_add_epi32(s1, _mm256_mullo_epi32(
                                                                  _mm256_cvtepu8_epi32(
                                                                          _mm_srli_si128(b, 8)),
                                                                  w));
                        }
                        s0 = _mm256_srai_epi32(s0, ZR_RESAMPLE_BITS);
                        s1 = _mm256_srai_epi32(s1, ZR_RESAMPLE_BITS);
                        /* 16 bits in the order 0-3 8-11 4-7 12-15, then put right */
                        __m256i t = _mm256_permute4x64_epi64(_mm256_packs_epi32(s0, s1), 0xd8);
                        __m128i r = _mm_packus_epi16(_mm256_castsi256_si128(t),
                                                     _mm256_extracti128_si256(t, 1));
                        _mm_storeu_si128((__m128i *)(o + j), r);
                }
                for (; j < row; j++) {
                        int32_t s = HALF;
                        const uint8_t *p = base + j;
                        for (uint32_t y = 0; y < m; y++, p += row)
                                s += *p * k[y];
                        o[j] = clip8(s);
                }
        }
}
#endif

/* The vertical pass, one byte at a time. */
static void vpass_scalar(const axis *v, const uint8_t *mid, uint32_t first, uint8_t *dst,
                         size_t row, uint32_t out_h) {
        for (uint32_t i = 0; i < out_h; i++) {
                const int32_t *k = v->k + (size_t)i * v->ksize;
                uint32_t lo = v->lo[i] - first, m = v->n[i];
                uint8_t *o = dst + (size_t)i * row;
                for (size_t j = 0; j < row; j++) {
                        int32_t s = 1 << (ZR_RESAMPLE_BITS - 1);
                        const uint8_t *p = mid + (size_t)lo * row + j;
                        for (uint32_t y = 0; y < m; y++, p += row)
                                s += *p * k[y];
                        o[j] = clip8(s);
                }
        }
}

/* -1: not chosen yet; 0: the scalar passes; 1: AVX2's. */
static _Atomic int kernels = -1;

static int avx2(void) {
        int k = atomic_load_explicit(&kernels, memory_order_relaxed);
        if (k < 0) {
#ifdef HAVE_AVX2_KERNELS
                k = __builtin_cpu_supports("avx2") ? 1 : 0;
#else
                k = 0;
#endif
                atomic_store_explicit(&kernels, k, memory_order_relaxed);
        }
        return k;
}

bool zr_resample_simd(int mode) {
        if (mode == 0)
                atomic_store(&kernels, 0);
        else if (mode > 0)
                atomic_store(&kernels, -1);
        return avx2() == 1;
}

void zr_resample(const zr_resample_src *src, uint8_t *dst, uint32_t out_w, uint32_t out_h,
                 bool flip, void *scratch) {
        /* the tables first, 8-aligned (the scratch may start anywhere: its
         * bytes count 64 spare for this) */
        uint8_t *at = (uint8_t *)(((uintptr_t)scratch + 7) & ~(uintptr_t)7);
        uint32_t C = src->c, first, end;
        axis h = { .ksize = ksize_of(src->bw, out_w) }, v = { .ksize = ksize_of(src->bh, out_h) };
        size_t row = (size_t)out_w * C;

        h.lo = carve(&at, out_w * sizeof(uint32_t));
        h.n = carve(&at, out_w * sizeof(uint32_t));
        h.k = carve(&at, (size_t)out_w * h.ksize * sizeof(int32_t));
        v.lo = carve(&at, out_h * sizeof(uint32_t));
        v.n = carve(&at, out_h * sizeof(uint32_t));
        v.k = carve(&at, (size_t)out_h * v.ksize * sizeof(int32_t));
        coeffs(&h, src->x, src->bw, src->w, out_w);
        coeffs(&v, src->y, src->bh, src->h, out_h);
        zr_resample_rows(src->y, src->bh, src->h, out_h, &first, &end);
        uint8_t *mid = at;
        uint32_t r = first;
#ifdef HAVE_AVX2_KERNELS
        if (avx2()) {
                if (C == 3) /* pairs of rows, neither the image's last */
                        for (; r + 1 < end && r + 1 < src->h - 1; r += 2) {
                                const uint8_t *in0 = src->data + (size_t)r * src->stride;
                                uint8_t *o0 = mid + (size_t)(r - first) * row;
                                hpass_pair_avx2(&h, in0, in0 + src->stride, o0, o0 + row, out_w,
                                                flip);
                        }
                for (; r < end; r++)
                        hpass_row(&h, src->data + (size_t)r * src->stride,
                                  mid + (size_t)(r - first) * row, out_w, C, flip);
                vpass_avx2(&v, mid, first, dst, row, out_h);
                return;
        }
#endif
        for (; r < end; r++)
                hpass_row(&h, src->data + (size_t)r * src->stride, mid + (size_t)(r - first) * row,
                          out_w, C, flip);
        vpass_scalar(&v, mid, first, dst, row, out_h);
}
