/* png.c: PNG decoding of a crop's rows through libspng (png.h).
 *
 * libspng was chosen over libpng for its API (a decode into 8-bit RGB or gray
 * in one call, progressive rows, limits on the image and its chunks) and its
 * speed: docs/IMAGES.md has the measurement. It decodes from the caller's
 * buffer and allocates only its row buffers and zlib's state.
 */
#include "image/png.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <spng.h>

#include "zr-errors.h"

struct zr_png {
        spng_ctx *ctx;
        uint32_t w, h;
        bool gray;              /* a gray source of at most 8 bits: G8 directly */
        bool interlaced;
};

static int spng_fail(int e, zr_error *err) {
        if (e == SPNG_EMEM)
                return zr_error_errno(err, ENOMEM, "PNG");
        return zr_error_set(err, ZR_E_DECODE, "PNG: %s", spng_strerror(e));
}

int zr_png_open(const uint8_t *data, size_t len, zr_png **ret, uint32_t *ret_w, uint32_t *ret_h,
                uint32_t *ret_channels, bool *ret_interlaced, zr_error *err) {
        struct spng_ihdr ihdr;
        zr_png *p = calloc(1, sizeof(*p));
        int e;

        if (!p)
                return zr_error_errno(err, ENOMEM, "PNG");
        p->ctx = spng_ctx_new(0);
        if (!p->ctx) {
                free(p);
                return zr_error_errno(err, ENOMEM, "PNG");
        }
        if ((e = spng_set_image_limits(p->ctx, ZR_PNG_SIDE_MAX, ZR_PNG_SIDE_MAX)) ||
            (e = spng_set_chunk_limits(p->ctx, ZR_PNG_CHUNK_MAX, ZR_PNG_CACHE_MAX)) ||
            (e = spng_set_crc_action(p->ctx, SPNG_CRC_ERROR, SPNG_CRC_DISCARD)) ||
            (e = spng_set_png_buffer(p->ctx, data, len)) ||
            (e = spng_get_ihdr(p->ctx, &ihdr))) {
                zr_png_end(p);
                return spng_fail(e, err);
        }
        p->w = ihdr.width;
        p->h = ihdr.height;
        p->interlaced = ihdr.interlace_method != 0;
        p->gray = ihdr.color_type == SPNG_COLOR_TYPE_GRAYSCALE && ihdr.bit_depth <= 8;
        *ret_w = p->w;
        *ret_h = p->h;
        *ret_channels = ihdr.color_type == SPNG_COLOR_TYPE_GRAYSCALE ||
                        ihdr.color_type == SPNG_COLOR_TYPE_GRAYSCALE_ALPHA ? 1 : 3;
        *ret_interlaced = p->interlaced;
        *ret = p;
        return 0;
}

/* Pillow's luma (ITU-R 601-2), in its fixed point: L = (R·19595 + G·38470 +
 * B·7471 + 2^15) >> 16. */
static void to_gray(const uint8_t *rgb, uint8_t *out, uint32_t w) {
        for (uint32_t x = 0; x < w; x++, rgb += 3)
                out[x] = (uint8_t)((rgb[0] * 19595u + rgb[1] * 38470u + rgb[2] * 7471u + 0x8000u) >> 16);
}

/* Row y of the image (decoded whole or in order) into dst as `channels`. */
static void put_row(const zr_png *p, unsigned channels, const uint8_t *src, uint8_t *dst) {
        if (channels == 1 && !p->gray)
                to_gray(src, dst, p->w);
        else if (src != dst)
                memcpy(dst, src, (size_t)p->w * channels);
}

int zr_png_rows(zr_png *p, unsigned channels, uint32_t r0, uint32_t r1, uint8_t *out,
                size_t stride, uint8_t *row, uint8_t *whole, zr_error *err) {
        int fmt = channels == 1 && p->gray ? SPNG_FMT_G8 : SPNG_FMT_RGB8;
        size_t rowlen = (size_t)p->w * (fmt == SPNG_FMT_G8 ? 1 : 3);
        int e;

        if (p->interlaced) {
                if ((e = spng_decode_image(p->ctx, whole, rowlen * p->h, fmt, 0)))
                        return spng_fail(e, err);
                for (uint32_t y = r0; y < r1; y++)
                        put_row(p, channels, whole + (size_t)y * rowlen, out + (size_t)(y - r0) * stride);
                return 0;
        }
        if ((e = spng_decode_image(p->ctx, NULL, 0, fmt, SPNG_DECODE_PROGRESSIVE)))
                return spng_fail(e, err);
        for (uint32_t y = 0; y < r1; y++) {
                uint8_t *dst = out + (size_t)(y >= r0 ? y - r0 : 0) * stride;
                /* a row above the crop, or a colour row made gray, goes through `row` */
                uint8_t *to = y < r0 || (channels == 1 && !p->gray) ? row : dst;
                e = spng_decode_row(p->ctx, to, rowlen);
                if (e && !(e == SPNG_EOI && y == p->h - 1))
                        return spng_fail(e, err);
                if (y >= r0)
                        put_row(p, channels, to, dst);
        }
        return 0;
}

zr_png *zr_png_end(zr_png *p) {
        if (p) {
                spng_ctx_free(p->ctx);
                free(p);
        }
        return NULL;
}
