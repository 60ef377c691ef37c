/* image.h: one encoded image record (JPEG or PNG) decoded, cropped, resized
 * and flipped into its place in a batch: (out_h, out_w, channels) uint8.
 *
 * A record is checked before anything of its size is allocated: its format by
 * its first bytes, its size by its header, against the pixel limit
 * (ZR_E_LIMIT) and, for a loader of the images' own size (`native`), against
 * that size (ZR_E_SCHEMA). Its box and flip come from augment.h. A JPEG is
 * decoded at the smallest DCT scale M/8 at which the box still covers the
 * output (no more pixels than the crop needs), only the box's rows and iMCU
 * columns; a PNG, the box's rows. The box is then resized (resample.h) and
 * mirrored. A record of the output's size whose box is the whole image is
 * decoded straight into its place: the decoder's bytes, untouched.
 *
 * Memory: a decode uses the worker's scratch (grown as needed, kept for its
 * next record) and libjpeg's buffers; together at most
 * zr_image_work_bytes(p), checked per record (ZR_E_LIMIT naming what it would
 * need). A loader charges that per decoding thread (SECURITY.md, "Limits").
 *
 * Errors name no record: the caller prefixes it. ZR_E_DECODE: not a JPEG or
 * PNG, corrupt, truncated, a CMYK JPEG; ZR_E_LIMIT; ZR_E_SCHEMA; ENOMEM.
 *
 * Threads: a zr_image_worker is one thread's; params are shared, read-only.
 */
#ifndef ZR_IMAGE_IMAGE_H
#define ZR_IMAGE_IMAGE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "image/augment.h"
#include "util/error.h"

/* The most pixels an image may have, whatever a client asks: 2^26 (8192 ×
 * 8192). A "decompression bomb" of 100 megapixels is refused by its header. */
#define ZR_IMAGE_PIXELS_MAX (UINT64_C(1) << 26)
/* The limit when neither the store (its schema's max_pixels) nor the client
 * says: 2^24 (4096 × 4096), past nearly every photograph of a training set; a
 * larger one is refused by name, and max_pixels raises it. */
#define ZR_IMAGE_PIXELS_DEFAULT (UINT64_C(1) << 24)
/* An output of at most 2^24 pixels, each side at most 2^15. */
#define ZR_IMAGE_OUT_SIDE_MAX 32768u
#define ZR_IMAGE_OUT_PIXELS_MAX (UINT64_C(1) << 24)

enum zr_image_format {
        ZR_IMAGE_UNKNOWN = 0,
        ZR_IMAGE_JPEG = 1,
        ZR_IMAGE_PNG = 2,
};

typedef struct zr_image_params {
        zr_augment aug;         /* its out_h, out_w are the output's size */
        bool native;            /* no size given: each image is out_h × out_w, not resized */
        uint32_t channels;      /* 1 (gray) or 3 (RGB) */
        uint64_t max_pixels;    /* 1..ZR_IMAGE_PIXELS_MAX */
} zr_image_params;

typedef struct zr_image_worker {
        struct zr_jpeg *jpeg;   /* made at the first JPEG */
        uint8_t *buf;           /* scratch, cap bytes */
        size_t cap;
} zr_image_worker;

/* The format of data[0..len) by its first bytes. */
enum zr_image_format zr_image_sniff(const uint8_t *data, size_t len);

/* Checks params (sizes, channels, limits, the crop's): 0, or ZR_E_PROTO with
 * a message. */
int zr_image_params_check(const zr_image_params *p, zr_error *err);

/* 1 if a and b decode alike (a loader's group key). */
int zr_image_params_same(const zr_image_params *a, const zr_image_params *b);

/* The bytes one decode may use at most (scratch and libjpeg's): 8 bytes per
 * pixel of the limit, 6 per output pixel, and 1 MiB. */
uint64_t zr_image_work_bytes(const zr_image_params *p);

/* Decodes the record data[0..len) into dst (out_h × out_w × channels bytes),
 * cropped and flipped as (key, pos) say (augment.h). Returns 0, or a negative
 * code with *err (its message names no record); dst's bytes are then
 * unspecified. */
int zr_image_decode(const zr_image_params *p, zr_image_worker *w, const uint8_t *data, size_t len,
                    uint64_t key, uint64_t pos, uint8_t *dst, zr_error *err);

/* Frees a worker's state (not the worker). */
void zr_image_worker_clear(zr_image_worker *w);

#endif
