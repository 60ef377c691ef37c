/* image.c: one image record into its place in a batch (image.h): sniff,
 * header, limits, box, scaled decode of the box's rows and columns, resize,
 * flip.
 *
 * It assumes dst holds the output and that params passed
 * zr_image_params_check(). It keeps nothing between records but the worker's
 * scratch and decompressor; it does not know about stores or loaders.
 */
#include "image/image.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "image/jpeg.h"
#include "image/png.h"
#include "image/resample.h"
#include "zr-errors.h"

static const uint8_t PNG_MAGIC[8] = { 0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n' };

enum zr_image_format zr_image_sniff(const uint8_t *data, size_t len) {
        if (len >= 3 && data[0] == 0xff && data[1] == 0xd8 && data[2] == 0xff)
                return ZR_IMAGE_JPEG;
        if (len >= 8 && memcmp(data, PNG_MAGIC, 8) == 0)
                return ZR_IMAGE_PNG;
        return ZR_IMAGE_UNKNOWN;
}

int zr_image_params_check(const zr_image_params *p, zr_error *err) {
        const char *why;

        if (p->channels != 1 && p->channels != 3)
                return zr_error_set(err, ZR_E_PROTO, "image: channels %" PRIu32 ", expected 1 or 3",
                                    p->channels);
        if (p->aug.out_h == 0 || p->aug.out_w == 0 || p->aug.out_h > ZR_IMAGE_OUT_SIDE_MAX ||
            p->aug.out_w > ZR_IMAGE_OUT_SIDE_MAX ||
            (uint64_t)p->aug.out_h * p->aug.out_w > ZR_IMAGE_OUT_PIXELS_MAX)
                return zr_error_set(err, ZR_E_PROTO, "image: size %" PRIu32 " × %" PRIu32 ": each "
                                    "side 1..%u, at most %" PRIu64 " pixels", p->aug.out_h,
                                    p->aug.out_w, ZR_IMAGE_OUT_SIDE_MAX, ZR_IMAGE_OUT_PIXELS_MAX);
        if (p->max_pixels == 0 || p->max_pixels > ZR_IMAGE_PIXELS_MAX)
                return zr_error_set(err, ZR_E_PROTO, "image: max_pixels %" PRIu64 ", expected "
                                    "1..%" PRIu64, p->max_pixels, ZR_IMAGE_PIXELS_MAX);
        if (zr_augment_check(&p->aug, &why) < 0)
                return zr_error_set(err, ZR_E_PROTO, "image: %s", why);
        if (p->native && p->aug.crop != ZR_CROP_NONE)
                return zr_error_set(err, ZR_E_PROTO, "image: a crop needs a size");
        return 0;
}

int zr_image_params_same(const zr_image_params *a, const zr_image_params *b) {
        const zr_augment *x = &a->aug, *y = &b->aug;

        return a->native == b->native && a->channels == b->channels &&
               a->max_pixels == b->max_pixels && x->crop == y->crop && x->flip == y->flip &&
               x->out_h == y->out_h && x->out_w == y->out_w &&
               (x->crop != ZR_CROP_RANDOM_RESIZED ||
                (x->scale[0] == y->scale[0] && x->scale[1] == y->scale[1] &&
                 x->ratio[0] == y->ratio[0] && x->ratio[1] == y->ratio[1])) &&
               (x->crop != ZR_CROP_CENTER || x->fraction == y->fraction);
}

uint64_t zr_image_work_bytes(const zr_image_params *p) {
        return 8 * p->max_pixels + 6 * (uint64_t)p->aug.out_h * p->aug.out_w + (1u << 20);
}

void zr_image_worker_clear(zr_image_worker *w) {
        w->jpeg = zr_jpeg_free(w->jpeg);
        free(w->buf);
        w->buf = NULL;
        w->cap = 0;
}

/* The worker's scratch of at least `bytes`, within `max`. */
static uint8_t *scratch(zr_image_worker *w, size_t bytes, uint64_t max, zr_error *err) {
        if (bytes > max) {
                zr_error_set(err, ZR_E_LIMIT, "decoding it needs %zu bytes, over the %" PRIu64
                             " one decode may use (raise max_pixels)", bytes, max);
                return NULL;
        }
        if (bytes > w->cap) {
                uint8_t *b = realloc(w->buf, bytes);
                if (!b) {
                        zr_error_errno(err, ENOMEM, "decoding an image");
                        return NULL;
                }
                w->buf = b;
                w->cap = bytes;
        }
        return w->buf;
}

/* Mirrors each of h rows of w pixels of c bytes in place. */
static void mirror(uint8_t *d, uint32_t w, uint32_t h, uint32_t c) {
        for (uint32_t y = 0; y < h; y++) {
                uint8_t *row = d + (size_t)y * w * c;
                for (uint32_t a = 0, b = w - 1; a < b; a++, b--)
                        for (uint32_t k = 0; k < c; k++) {
                                uint8_t t = row[(size_t)a * c + k];
                                row[(size_t)a * c + k] = row[(size_t)b * c + k];
                                row[(size_t)b * c + k] = t;
                        }
        }
}

/* The smallest M of 1..8 at which a box of bw × bh scaled by M/8 still covers
 * out_w × out_h; 8 when none does (the box is smaller than the output). */
static unsigned jpeg_scale(uint32_t bw, uint32_t bh, uint32_t out_w, uint32_t out_h) {
        for (unsigned m = 1; m < 8; m++)
                if ((uint64_t)bw * m >= (uint64_t)out_w * 8 && (uint64_t)bh * m >= (uint64_t)out_h * 8)
                        return m;
        return 8;
}

static int decode_jpeg(const zr_image_params *p, zr_image_worker *w, zr_box b, uint32_t W,
                       uint32_t H, uint8_t *dst, zr_error *err) {
        uint32_t C = p->channels, ow = p->aug.out_w, oh = p->aug.out_h;
        uint64_t max = zr_image_work_bytes(p);
        bool whole = b.x == 0 && b.y == 0 && b.w == W && b.h == H;
        bool same = whole && W == ow && H == oh;
        unsigned m = same ? 8 : jpeg_scale(b.w, b.h, ow, oh);
        double s = m / 8.0;
        zr_resample_src src = { .c = C, .x = b.x * s, .y = b.y * s, .bw = b.w * s, .bh = b.h * s };
        uint32_t sw = (uint32_t)(((uint64_t)W * m + 7) / 8), c0, c1, r0, r1, x0, cw, sh;
        uint8_t *buf;
        int r;

        if (same) {
                c0 = r0 = 0;
                c1 = W;
        } else {
                zr_resample_rows(src.x, src.bw, sw, ow, &c0, &c1);
        }
        /* libjpeg's own buffers get what the scratch does not use at most */
        r = zr_jpeg_start(w->jpeg, m, C, c0, c1, max, &x0, &cw, &sw, &sh, err);
        if (r < 0)
                return r;
        if (same) { /* the decoder's bytes, straight into their place */
                r = zr_jpeg_rows(w->jpeg, 0, H, dst, (size_t)W * C, err);
                zr_jpeg_end(w->jpeg);
                if (r == 0 && b.flip)
                        mirror(dst, W, H, C);
                return r;
        }
        zr_resample_rows(src.y, src.bh, sh, oh, &r0, &r1);
        src.w = cw;
        src.h = r1 - r0;
        src.stride = (size_t)cw * C;
        src.x -= x0;
        src.y -= r0;
        size_t region = src.stride * src.h, need = region + zr_resample_scratch_bytes(&src, ow, oh);
        buf = scratch(w, need, max, err);
        if (!buf) {
                zr_jpeg_end(w->jpeg);
                return -err->code;
        }
        r = zr_jpeg_rows(w->jpeg, r0, r1, buf, src.stride, err);
        zr_jpeg_end(w->jpeg);
        if (r < 0)
                return r;
        src.data = buf;
        zr_resample(&src, dst, ow, oh, b.flip, buf + region);
        return 0;
}

static int decode_png(const zr_image_params *p, zr_image_worker *w, zr_png *png, bool interlaced,
                      zr_box b, uint32_t W, uint32_t H, uint8_t *dst, zr_error *err) {
        uint32_t C = p->channels, ow = p->aug.out_w, oh = p->aug.out_h, r0, r1;
        uint64_t max = zr_image_work_bytes(p);
        bool same = b.x == 0 && b.y == 0 && b.w == W && b.h == H && W == ow && H == oh;
        zr_resample_src src = { .c = C, .x = b.x, .y = b.y, .bw = b.w, .bh = b.h, .w = W,
                                .stride = (size_t)W * C };
        size_t row = 3 * (size_t)W, whole = interlaced ? 3 * (size_t)W * H : 0, region, need;
        uint8_t *buf;
        int r;

        if (same) {
                r0 = 0;
                r1 = H;
                region = 0;
                need = row + whole;
        } else {
                zr_resample_rows(src.y, src.bh, H, oh, &r0, &r1);
                src.h = r1 - r0;
                src.y -= r0;
                region = src.stride * src.h;
                need = row + whole + region + zr_resample_scratch_bytes(&src, ow, oh);
        }
        buf = scratch(w, need, max, err);
        if (!buf)
                return -err->code;
        uint8_t *out = same ? dst : buf + row + whole;
        r = zr_png_rows(png, C, r0, r1, out, src.stride, buf, whole ? buf + row : NULL, err);
        if (r < 0)
                return r;
        if (same) {
                if (b.flip)
                        mirror(dst, W, H, C);
                return 0;
        }
        src.data = out;
        zr_resample(&src, dst, ow, oh, b.flip, out + region);
        return 0;
}

int zr_image_decode(const zr_image_params *p, zr_image_worker *w, const uint8_t *data, size_t len,
                    uint64_t key, uint64_t pos, uint8_t *dst, zr_error *err) {
        enum zr_image_format f = zr_image_sniff(data, len);
        uint32_t W = 0, H = 0, comps = 0;
        bool interlaced = false;
        zr_png *png = NULL;
        int r;

        if (f == ZR_IMAGE_UNKNOWN) {
                uint8_t head[4] = {0};
                memcpy(head, data, len < 4 ? len : 4);
                return zr_error_set(err, ZR_E_DECODE, "not a JPEG or PNG (%zu bytes, starting "
                                    "%02x %02x %02x %02x)", len, head[0], head[1], head[2], head[3]);
        }
        if (f == ZR_IMAGE_JPEG) {
                if (!w->jpeg && !(w->jpeg = zr_jpeg_new()))
                        return zr_error_errno(err, ENOMEM, "a JPEG decoder");
                r = zr_jpeg_header(w->jpeg, data, len, &W, &H, &comps, err);
        } else {
                r = zr_png_open(data, len, &png, &W, &H, &comps, &interlaced, err);
        }
        if (r < 0)
                return r;
        if ((uint64_t)W * H > p->max_pixels) {
                r = zr_error_set(err, ZR_E_LIMIT, "a %" PRIu32 " × %" PRIu32 " image (%" PRIu64
                                 " pixels) is over the limit of %" PRIu64 " pixels (max_pixels)",
                                 W, H, (uint64_t)W * H, p->max_pixels);
                goto out;
        }
        if (p->native && (W != p->aug.out_w || H != p->aug.out_h)) {
                r = zr_error_set(err, ZR_E_SCHEMA, "a %" PRIu32 " × %" PRIu32 " image where the "
                                 "loader serves the images at their size, %" PRIu32 " × %" PRIu32
                                 " (give a size to resize them)", W, H, p->aug.out_w, p->aug.out_h);
                goto out;
        }
        zr_box b = zr_augment_box(&p->aug, key, pos, W, H);
        if (f == ZR_IMAGE_JPEG)
                r = decode_jpeg(p, w, b, W, H, dst, err);
        else
                r = decode_png(p, w, png, interlaced, b, W, H, dst, err);
out:
        if (f == ZR_IMAGE_JPEG)
                zr_jpeg_end(w->jpeg); /* idempotent: the decode may have ended it */
        zr_png_end(png);
        return r;
}
