/* augment.c: the crop box and flip of an image record (augment.h), a pure
 * function of the step's key, the record's global position and the image's
 * size. proto/AUGMENT.md is the definition; this is its one implementation.
 *
 * Draw k of position p is mix64(key + p × GAMMA + k × DELTA) (sampler/rng.h's
 * constants). The random box is torchvision's RandomResizedCrop with those
 * draws in place of torch's generator: the same distribution, other numbers.
 * It uses IEEE double arithmetic, sqrt (exact), and log and exp from the C
 * library; rounding is to nearest, ties to even, as Python's round().
 */
#include "image/augment.h"

#include <math.h>

#include "sampler/rng.h"

uint64_t zr_augment_key(uint64_t seed, uint64_t step) {
        return zr_rng_key(seed, ZR_RNG_DOMAIN_IMAGE, step);
}

static uint64_t draw(uint64_t key, uint64_t pos, uint64_t k) {
        return zr_rng_mix64(key + pos * ZR_RNG_GAMMA + k * ZR_RNG_DELTA);
}

/* A double in [0, 1) from the draw's top 53 bits. */
static double unit(uint64_t d) {
        return (double)(d >> 11) * 0x1p-53;
}

/* An integer in [0, n) from the draw: the high 64 bits of d × n. */
static uint32_t below(uint64_t d, uint64_t n) {
        return (uint32_t)(((unsigned __int128)d * n) >> 64);
}

static uint32_t clamp_side(double v, uint32_t max) {
        if (!(v >= 1.0)) /* NaN too */
                return 1;
        if (v >= (double)max)
                return max;
        return (uint32_t)v;
}

static zr_box random_resized(const zr_augment *a, uint64_t key, uint64_t pos, uint32_t W,
                             uint32_t H) {
        double area = (double)W * (double)H;
        double lr0 = log(a->ratio[0]), lr1 = log(a->ratio[1]);
        zr_box b = {0};

        for (uint64_t t = 0; t < ZR_AUGMENT_ATTEMPTS; t++) {
                double target = area * (a->scale[0] + (a->scale[1] - a->scale[0]) *
                                        unit(draw(key, pos, 4 * t)));
                double aspect = exp(lr0 + (lr1 - lr0) * unit(draw(key, pos, 4 * t + 1)));
                double w = nearbyint(sqrt(target * aspect));
                double h = nearbyint(sqrt(target / aspect));
                if (w > 0 && w <= W && h > 0 && h <= H) {
                        b.w = (uint32_t)w;
                        b.h = (uint32_t)h;
                        b.y = below(draw(key, pos, 4 * t + 2), (uint64_t)H - b.h + 1);
                        b.x = below(draw(key, pos, 4 * t + 3), (uint64_t)W - b.w + 1);
                        return b;
                }
        }
        /* torchvision's fallback: the centred box of the nearest allowed ratio */
        double in_ratio = (double)W / (double)H;
        if (in_ratio < a->ratio[0]) {
                b.w = W;
                b.h = clamp_side(nearbyint((double)W / a->ratio[0]), H);
        } else if (in_ratio > a->ratio[1]) {
                b.h = H;
                b.w = clamp_side(nearbyint((double)H * a->ratio[1]), W);
        } else {
                b.w = W;
                b.h = H;
        }
        b.x = (W - b.w) / 2;
        b.y = (H - b.h) / 2;
        return b;
}

static zr_box center(const zr_augment *a, uint32_t W, uint32_t H) {
        double wb, hb;
        zr_box b = {0};

        if ((uint64_t)W * a->out_h >= (uint64_t)H * a->out_w) { /* wider than the output */
                hb = H;
                wb = (double)H * a->out_w / a->out_h;
        } else {
                wb = W;
                hb = (double)W * a->out_h / a->out_w;
        }
        b.w = clamp_side(nearbyint(wb * a->fraction), W);
        b.h = clamp_side(nearbyint(hb * a->fraction), H);
        b.x = (W - b.w) / 2;
        b.y = (H - b.h) / 2;
        return b;
}

zr_box zr_augment_box(const zr_augment *a, uint64_t key, uint64_t pos, uint32_t width,
                      uint32_t height) {
        zr_box b = { .w = width, .h = height };

        if (a->crop == ZR_CROP_RANDOM_RESIZED)
                b = random_resized(a, key, pos, width, height);
        else if (a->crop == ZR_CROP_CENTER)
                b = center(a, width, height);
        b.flip = a->flip && (draw(key, pos, ZR_AUGMENT_FLIP_DRAW) >> 63);
        return b;
}

int zr_augment_check(const zr_augment *a, const char **why) {
        if (a->crop > ZR_CROP_RANDOM_RESIZED) {
                *why = "crop is not 'random_resized', 'center' or none";
                return -1;
        }
        if (a->crop == ZR_CROP_RANDOM_RESIZED) {
                if (!(a->scale[0] > 0 && a->scale[0] <= a->scale[1] && a->scale[1] <= 1)) {
                        *why = "scale must be (lo, hi) with 0 < lo <= hi <= 1";
                        return -1;
                }
                if (!(a->ratio[0] > 0 && a->ratio[0] <= a->ratio[1] && isfinite(a->ratio[1]))) {
                        *why = "ratio must be (lo, hi) with 0 < lo <= hi, finite";
                        return -1;
                }
        }
        if (a->crop == ZR_CROP_CENTER) {
                if (!(a->fraction > 0 && a->fraction <= 1)) {
                        *why = "fraction must be in (0, 1]";
                        return -1;
                }
                if (a->out_h == 0 || a->out_w == 0) {
                        *why = "crop='center' needs a size";
                        return -1;
                }
        }
        return 0;
}
