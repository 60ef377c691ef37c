/* test-image.c: image/image.h on JPEGs and PNGs made here (libjpeg-turbo's
 * compressor, libspng's encoder): a whole image decoded is the decoder's own
 * bytes (a PNG: the very pixels encoded); crops and resizes agree with a full
 * decode resized; every bad record is an error of its kind (not an image,
 * corrupt, truncated, over the pixel limit by its header alone, another size
 * than a native loader's, CMYK), and thousands of mutated records decode or
 * fail, never crash (the ASan build runs this too; fuzz/fuzz-image.c is the
 * libFuzzer target of the same path). */
#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jpeglib.h>
#include <spng.h>

#include "check-run.h"
#include "image/image.h"
#include "image/resample.h"
#include "zr-errors.h"

static uint8_t *pixels(uint32_t w, uint32_t h, uint32_t c) {
        uint8_t *p = malloc((size_t)w * h * c);
        uint32_t s = 12345;
        for (uint32_t y = 0; y < h; y++)
                for (uint32_t x = 0; x < w; x++)
                        for (uint32_t k = 0; k < c; k++) {
                                s = s * 1103515245u + 12345u;
                                p[((size_t)y * w + x) * c + k] =
                                        (uint8_t)((x * 180 / w + y * 60 / h + k * 40) % 230 + (s >> 27));
                        }
        return p;
}

static uint8_t *make_jpeg(uint32_t w, uint32_t h, int comps, int progressive, size_t *len) {
        struct jpeg_compress_struct c;
        struct jpeg_error_mgr e;
        unsigned char *out = NULL;
        unsigned long n = 0;
        uint8_t *px = pixels(w, h, (uint32_t)comps);

        c.err = jpeg_std_error(&e);
        jpeg_create_compress(&c);
        jpeg_mem_dest(&c, &out, &n);
        c.image_width = w;
        c.image_height = h;
        c.input_components = comps;
        c.in_color_space = comps == 1 ? JCS_GRAYSCALE : comps == 4 ? JCS_CMYK : JCS_RGB;
        jpeg_set_defaults(&c);
        jpeg_set_quality(&c, 90, TRUE);
        if (progressive)
                jpeg_simple_progression(&c);
        jpeg_start_compress(&c, TRUE);
        while (c.next_scanline < h) {
                JSAMPROW row = px + (size_t)c.next_scanline * w * comps;
                jpeg_write_scanlines(&c, &row, 1);
        }
        jpeg_finish_compress(&c);
        jpeg_destroy_compress(&c);
        free(px);
        *len = n;
        return out;
}

/* libjpeg's own full decode with its defaults (what Pillow does too). */
static uint8_t *plain_decode(const uint8_t *data, size_t len, int gray) {
        struct jpeg_decompress_struct d;
        struct jpeg_error_mgr e;

        d.err = jpeg_std_error(&e);
        jpeg_create_decompress(&d);
        jpeg_mem_src(&d, data, len);
        jpeg_read_header(&d, TRUE);
        d.out_color_space = gray ? JCS_GRAYSCALE : JCS_RGB;
        jpeg_start_decompress(&d);
        size_t row = (size_t)d.output_width * d.output_components;
        uint8_t *out = malloc(row * d.output_height);
        while (d.output_scanline < d.output_height) {
                JSAMPROW r = out + d.output_scanline * row;
                jpeg_read_scanlines(&d, &r, 1);
        }
        jpeg_finish_decompress(&d);
        jpeg_destroy_decompress(&d);
        return out;
}

static uint8_t *make_png(const uint8_t *px, uint32_t w, uint32_t h, int color, int interlace,
                         size_t *len) {
        spng_ctx *ctx = spng_ctx_new(SPNG_CTX_ENCODER);
        struct spng_ihdr ihdr = { .width = w, .height = h, .bit_depth = 8, .color_type = (uint8_t)color,
                                  .interlace_method = (uint8_t)interlace };
        int err = 0, c = color == SPNG_COLOR_TYPE_GRAYSCALE ? 1 : 3;

        spng_set_option(ctx, SPNG_ENCODE_TO_BUFFER, 1);
        spng_set_ihdr(ctx, &ihdr);
        err = spng_encode_image(ctx, px, (size_t)w * h * c, SPNG_FMT_PNG, SPNG_ENCODE_FINALIZE);
        ck_assert_msg(err == 0, "encoding a PNG: %s", spng_strerror(err));
        void *out = spng_get_png_buffer(ctx, len, &err);
        spng_ctx_free(ctx);
        return out;
}

static zr_image_params native(uint32_t w, uint32_t h, uint32_t c) {
        return (zr_image_params){ .aug = { .crop = ZR_CROP_NONE, .out_h = h, .out_w = w,
                                           .fraction = 0.875, .scale = { 0.08, 1 },
                                           .ratio = { 0.75, 4.0 / 3 } },
                                  .native = true, .channels = c, .max_pixels = 1u << 24 };
}

/* Decodes at (key(1, 2), position 3) with a fresh worker; *err is reset first
 * (its first error would win). */
static int decode(const zr_image_params *p, const uint8_t *d, size_t n, uint8_t *out, zr_error *err) {
        zr_image_worker w = {0};
        *err = (zr_error){0};
        int r = zr_image_decode(p, &w, d, n, zr_augment_key(1, 2), 3, out, err);
        zr_image_worker_clear(&w);
        return r;
}

START_TEST(jpeg_whole_is_the_decoders) {
        for (int prog = 0; prog < 2; prog++)
                for (int comps = 1; comps <= 3; comps += 2) {
                        size_t n;
                        uint8_t *j = make_jpeg(150, 101, comps, prog, &n);
                        for (uint32_t c = 1; c <= 3; c += 2) {
                                zr_image_params p = native(150, 101, c);
                                uint8_t *want = plain_decode(j, n, c == 1), *got = malloc(150 * 101 * c);
                                zr_error err = {0};
                                ck_assert_msg(decode(&p, j, n, got, &err) == 0, "%s", err.message);
                                ck_assert_msg(memcmp(want, got, 150 * 101 * c) == 0,
                                              "progressive %d comps %d channels %u", prog, comps, c);
                                /* flipped: the mirror image of the same bytes */
                                p.aug.flip = true;
                                zr_image_worker w = {0};
                                int flipped = -1;
                                for (uint64_t pos = 0; pos < 8 && flipped != 1; pos++) {
                                        zr_box b = zr_augment_box(&p.aug, zr_augment_key(1, 2), pos, 150, 101);
                                        ck_assert_int_eq(zr_image_decode(&p, &w, j, n, zr_augment_key(1, 2),
                                                                         pos, got, &err), 0);
                                        flipped = b.flip;
                                }
                                zr_image_worker_clear(&w);
                                ck_assert_int_eq(flipped, 1);
                                for (uint32_t y = 0; y < 101; y++)
                                        for (uint32_t x = 0; x < 150; x++)
                                                ck_assert(memcmp(got + (y * 150 + x) * c,
                                                                 want + (y * 150 + 149 - x) * c, c) == 0);
                                free(want);
                                free(got);
                        }
                        free(j);
                }
}
END_TEST

START_TEST(png_whole_is_the_pixels) {
        uint8_t *rgb = pixels(97, 61, 3), *gray = pixels(97, 61, 1), *got = malloc(97 * 61 * 3);
        for (int lace = 0; lace < 2; lace++) {
                size_t n;
                uint8_t *png = make_png(rgb, 97, 61, SPNG_COLOR_TYPE_TRUECOLOR, lace, &n);
                zr_image_params p = native(97, 61, 3);
                zr_error err = {0};
                ck_assert_msg(decode(&p, png, n, got, &err) == 0, "%s", err.message);
                ck_assert(memcmp(got, rgb, 97 * 61 * 3) == 0);
                /* gray output of a colour PNG: Pillow's luma */
                p.channels = 1;
                ck_assert_int_eq(decode(&p, png, n, got, &err), 0);
                for (size_t i = 0; i < 97 * 61; i++) {
                        const uint8_t *q = rgb + 3 * i;
                        ck_assert_uint_eq(got[i], (q[0] * 19595u + q[1] * 38470u + q[2] * 7471u + 0x8000u) >> 16);
                }
                free(png);
                png = make_png(gray, 97, 61, SPNG_COLOR_TYPE_GRAYSCALE, lace, &n);
                p.channels = 3; /* gray to RGB: replicated */
                ck_assert_int_eq(decode(&p, png, n, got, &err), 0);
                for (size_t i = 0; i < 97 * 61; i++)
                        ck_assert(got[3 * i] == gray[i] && got[3 * i + 1] == gray[i] && got[3 * i + 2] == gray[i]);
                free(png);
        }
        free(rgb), free(gray), free(got);
}
END_TEST

/* A crop of a PNG is its pixels' box resized (resample.h), exactly. */
START_TEST(png_crop_is_the_box_resized) {
        uint32_t W = 120, H = 90;
        uint8_t *rgb = pixels(W, H, 3), *got = malloc(64 * 48 * 3), *want = malloc(64 * 48 * 3);
        size_t n;
        uint8_t *png = make_png(rgb, W, H, SPNG_COLOR_TYPE_TRUECOLOR, 0, &n);
        zr_image_params p = native(W, H, 3);
        p.native = false;
        p.aug.crop = ZR_CROP_RANDOM_RESIZED;
        p.aug.flip = true;
        p.aug.out_w = 64;
        p.aug.out_h = 48;
        for (uint64_t pos = 0; pos < 20; pos++) {
                zr_image_worker w = {0};
                zr_error err = {0};
                zr_box b = zr_augment_box(&p.aug, zr_augment_key(1, 2), pos, W, H);
                ck_assert_int_eq(zr_image_decode(&p, &w, png, n, zr_augment_key(1, 2), pos, got, &err), 0);
                zr_image_worker_clear(&w);
                zr_resample_src src = { .data = rgb, .w = W, .h = H, .c = 3, .stride = W * 3,
                                        .x = b.x, .y = b.y, .bw = b.w, .bh = b.h };
                void *s = malloc(zr_resample_scratch_bytes(&src, 64, 48));
                zr_resample(&src, want, 64, 48, b.flip, s);
                free(s);
                ck_assert_msg(memcmp(got, want, 64 * 48 * 3) == 0, "position %lu", (unsigned long)pos);
        }
        free(rgb), free(got), free(want), free(png);
}
END_TEST

/* A JPEG crop decoded at a DCT scale is close to the full decode's box
 * resized (the scaled IDCT is another low-pass filter, not the same bytes). */
START_TEST(jpeg_crop_close_to_full) {
        uint32_t W = 500, H = 375;
        size_t n;
        uint8_t *j = make_jpeg(W, H, 3, 0, &n), *full = plain_decode(j, n, 0);
        uint8_t *got = malloc(224 * 224 * 3), *want = malloc(224 * 224 * 3);
        zr_image_params p = native(W, H, 3);
        p.native = false;
        p.aug.crop = ZR_CROP_CENTER;
        p.aug.out_w = p.aug.out_h = 112; /* a 328-pixel box at scale 3/8 */
        zr_error err = {0};
        ck_assert_int_eq(decode(&p, j, n, got, &err), 0);
        zr_box b = zr_augment_box(&p.aug, 0, 0, W, H);
        zr_resample_src src = { .data = full, .w = W, .h = H, .c = 3, .stride = W * 3, .x = b.x,
                                .y = b.y, .bw = b.w, .bh = b.h };
        void *s = malloc(zr_resample_scratch_bytes(&src, 112, 112));
        zr_resample(&src, want, 112, 112, false, s);
        double sum = 0;
        for (size_t i = 0; i < 112 * 112 * 3; i++)
                sum += abs((int)got[i] - (int)want[i]);
        ck_assert_msg(sum / (112 * 112 * 3) < 4.0, "mean difference %g", sum / (112 * 112 * 3));
        free(j), free(full), free(got), free(want), free(s);
}
END_TEST

START_TEST(bad_records) {
        size_t n;
        uint8_t *j = make_jpeg(64, 48, 3, 0, &n), out[64 * 48 * 3];
        zr_image_params p = native(64, 48, 3);
        zr_error err = {0};
        static const uint8_t html[] = "<html><body>not an image</body></html>";

        ck_assert_int_eq(decode(&p, html, sizeof(html), out, &err), -ZR_E_DECODE);
        ck_assert_ptr_nonnull(strstr(err.message, "not a JPEG or PNG"));
        ck_assert_int_eq(decode(&p, html, 0, out, &err), -ZR_E_DECODE);
        /* truncated: the decoder's "premature end" is an error */
        ck_assert_int_eq(decode(&p, j, n / 2, out, &err), -ZR_E_DECODE);
        /* corrupt entropy data */
        uint8_t *c = malloc(n);
        memcpy(c, j, n);
        for (size_t i = n / 2; i < n - 2; i++)
                c[i] = 0xff;
        ck_assert_int_lt(decode(&p, c, n, out, &err), 0);
        /* another size than a native loader's */
        zr_image_params q = native(65, 48, 3);
        ck_assert_int_eq(decode(&q, j, n, out, &err), -ZR_E_SCHEMA);
        /* a bomb: the frame header says 10000 x 10000, refused before decoding */
        memcpy(c, j, n);
        for (size_t i = 0; i + 9 < n; i++)
                if (c[i] == 0xff && c[i + 1] == 0xc0) {
                        c[i + 5] = 10000 >> 8, c[i + 6] = 10000 & 255;
                        c[i + 7] = 10000 >> 8, c[i + 8] = 10000 & 255;
                        break;
                }
        zr_image_params big = native(10000, 10000, 3);
        big.max_pixels = ZR_IMAGE_PIXELS_MAX;
        ck_assert_int_eq(decode(&big, c, n, out, &err), -ZR_E_LIMIT);
        ck_assert_msg(strstr(err.message, "100000000 pixels"), "%s", err.message);
        free(c);
        free(j);
        /* CMYK */
        j = make_jpeg(16, 16, 4, 0, &n);
        zr_image_params k = native(16, 16, 3);
        ck_assert_int_eq(decode(&k, j, n, out, &err), -ZR_E_DECODE);
        ck_assert_ptr_nonnull(strstr(err.message, "CMYK"));
        free(j);
        /* a PNG whose data fails its CRC, and one cut short */
        uint8_t *rgb = pixels(64, 48, 3);
        uint8_t *png = make_png(rgb, 64, 48, SPNG_COLOR_TYPE_TRUECOLOR, 0, &n);
        ck_assert_int_eq(decode(&p, png, n / 2, out, &err), -ZR_E_DECODE);
        png[n - 20] ^= 0x55;
        ck_assert_int_eq(decode(&p, png, n, out, &err), -ZR_E_DECODE);
        free(png), free(rgb);
}
END_TEST

/* Mutated records: decoded or refused, never a crash or a read out of bounds. */
START_TEST(mutations) {
        size_t nj, np;
        uint8_t *j = make_jpeg(40, 30, 3, _i & 1, &nj), *rgb = pixels(40, 30, 3);
        uint8_t *png = make_png(rgb, 40, 30, SPNG_COLOR_TYPE_TRUECOLOR, _i & 1, &np);
        uint8_t *buf = malloc(nj > np ? nj : np), out[32 * 32 * 3];
        uint32_t s = 99 + (uint32_t)_i;
        zr_image_params p = native(40, 30, 3);
        zr_image_worker w = {0};
        p.native = false;
        p.aug.crop = ZR_CROP_RANDOM_RESIZED;
        p.aug.out_w = p.aug.out_h = 32;
        for (int t = 0; t < 1500; t++) {
                const uint8_t *src = t & 1 ? png : j;
                size_t n = t & 1 ? np : nj;
                memcpy(buf, src, n);
                for (int k = 0; k < 1 + t % 4; k++) {
                        s = s * 1103515245u + 12345u;
                        buf[(s >> 8) % n] ^= (uint8_t)(1u << (s >> 28 & 7));
                }
                s = s * 1103515245u + 12345u;
                size_t cut = t % 5 == 0 ? (s >> 4) % n : n;
                zr_error err = {0};
                int r = zr_image_decode(&p, &w, buf, cut, (uint64_t)t, 0, out, &err);
                ck_assert(r == 0 || (r < 0 && err.message[0]));
        }
        zr_image_worker_clear(&w);
        free(j), free(png), free(rgb), free(buf);
}
END_TEST

int main(void) {
        Suite *s = suite_create("image");
        TCase *tc = TL_TCASE(s, "core", 0, jpeg_whole_is_the_decoders, png_whole_is_the_pixels,
                             png_crop_is_the_box_resized, jpeg_crop_close_to_full, bad_records);
        (void)tc;
        TCase *m = TL_TCASE(s, "mutations", 0, NULL);
        TL_LOOP_TESTS(m, 0, 2, mutations);
        return tl_run_suite(s);
}
