/* png.h: PNG decoding through libspng, of no more rows than a crop needs.
 *
 * A PNG has no scaled decode: a non-interlaced image is decoded row by row
 * (libspng's progressive decode), the rows above the crop into a row of
 * scratch, and none below it; an interlaced one (Adam7 spreads every row over
 * the whole stream) is decoded whole. Output is 8-bit RGB or gray: 16-bit
 * samples keep their high byte, a palette is expanded, alpha is dropped
 * without compositing, gAMA and tRNS are not applied; as Pillow's
 * `convert('RGB')` does (and `convert('L')`'s luma, ITU-R 601-2 in Pillow's
 * fixed point, for gray output of a colour image).
 *
 * Bounds: libspng is given the image limits (each side at most
 * ZR_PNG_SIDE_MAX), a chunk size and a chunk cache limit, and CRC errors are
 * errors; the caller checks the pixels before anything of the image's size is
 * allocated. A truncated or corrupt stream is ZR_E_DECODE.
 *
 * One zr_png decodes one image at a time, on one thread.
 */
#ifndef ZR_IMAGE_PNG_H
#define ZR_IMAGE_PNG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "util/error.h"

/* libspng's own default limit (2^31 - 1) is no bound for a daemon; PNG's
 * sides are u31. 2^16 each is past every photograph (the pixel limit bites
 * first) and keeps a row's size and a row number in 32 bits. */
#define ZR_PNG_SIDE_MAX 65535u
/* A chunk's size, and all the ancillary chunks a decode keeps: text and the
 * like, which a loader never reads, are the way a hostile file spends memory. */
#define ZR_PNG_CHUNK_MAX (8u << 20)
#define ZR_PNG_CACHE_MAX (16u << 20)

typedef struct zr_png zr_png;

/* Starts on the PNG data[0..len) (borrowed until zr_png_end()): its size,
 * colour channels (1 gray, 3 colour, with alpha not counted) and whether it is
 * interlaced. Returns 0 and a decoder, or -ZR_E_DECODE / -ENOMEM. */
int zr_png_open(const uint8_t *data, size_t len, zr_png **ret, uint32_t *ret_w, uint32_t *ret_h,
                uint32_t *ret_channels, bool *ret_interlaced, zr_error *err);

/* Decodes rows [r0, r1) into out (rows `stride` bytes apart, w × channels
 * bytes each), channels 1 or 3. `row` is scratch of 3 × w bytes (rows above
 * r0, a colour row made gray); an interlaced image needs `whole` of
 * 3 × w × h bytes instead (NULL otherwise). Returns 0 or a negative code. */
int zr_png_rows(zr_png *p, unsigned channels, uint32_t r0, uint32_t r1, uint8_t *out,
                size_t stride, uint8_t *row, uint8_t *whole, zr_error *err);

/* Frees the decoder. NULL is fine. */
zr_png *zr_png_end(zr_png *p);

#endif
