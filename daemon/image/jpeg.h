/* jpeg.h: JPEG decoding through libjpeg-turbo's libjpeg API, of no more than
 * a crop needs: the DCT scaled to M/8 (M = 1..8) so that fewer pixels are
 * computed, the columns cut to the crop's iMCUs (jpeg_crop_scanline), the rows
 * above it skipped (jpeg_skip_scanlines) and those below never decoded.
 *
 * Settings are libjpeg's defaults, which Pillow uses too: the accurate integer
 * IDCT (JDCT_ISLOW) and fancy upsampling. A whole image at scale 8/8 is
 * therefore the same bytes Pillow decodes (docs/IMAGES.md says what is
 * guaranteed).
 *
 * Bounds: the pixels of an image are checked by the caller after
 * zr_jpeg_header(), before anything of its size is allocated; libjpeg's own
 * large buffers (a progressive image's coefficients) are limited to
 * `mem_max` bytes; a progressive image of more than ZR_JPEG_SCANS_MAX scans
 * is refused (TurboJPEG's TJFLAG_LIMITSCANS rule). A corrupt stream is an
 * error, and so is one whose data ends before the image (libjpeg's warnings
 * "premature end of JPEG file", which Pillow turns into an error too, and
 * "premature end of data segment", which Pillow lets pass with grey pixels);
 * libjpeg's other warnings (extraneous bytes before a marker) are not, as in
 * Pillow. Rows below a crop are never decoded, so a file cut short there is
 * served.
 *
 * One zr_jpeg decodes one image at a time, on one thread; it is reused.
 */
#ifndef ZR_IMAGE_JPEG_H
#define ZR_IMAGE_JPEG_H

#include <stddef.h>
#include <stdint.h>

#include "util/error.h"

#define ZR_JPEG_SCANS_MAX 500

typedef struct zr_jpeg zr_jpeg;

/* A decompressor; NULL when out of memory. */
zr_jpeg *zr_jpeg_new(void);
zr_jpeg *zr_jpeg_free(zr_jpeg *j);

/* Reads the header of the JPEG data[0..len) (borrowed until zr_jpeg_end()):
 * its size and components. Returns 0, or -ZR_E_DECODE with a message (no
 * "record" prefix: the caller adds it). */
int zr_jpeg_header(zr_jpeg *j, const uint8_t *data, size_t len, uint32_t *ret_w, uint32_t *ret_h,
                   uint32_t *ret_components, zr_error *err);

/* After the header: starts the decode at scale m/8 into `channels` (1: the
 * luma the JPEG holds; 3: RGB), keeping at least the columns [c0, c1) of the
 * scaled image. Returns 0 with the columns each row will hold, [*ret_c0,
 * *ret_c0 + *ret_cw), and the scaled image's size; or a negative code.
 * libjpeg's large buffers may take mem_max bytes. */
int zr_jpeg_start(zr_jpeg *j, unsigned m, unsigned channels, uint32_t c0, uint32_t c1,
                  size_t mem_max, uint32_t *ret_c0, uint32_t *ret_cw, uint32_t *ret_sw,
                  uint32_t *ret_sh, zr_error *err);

/* After start: decodes rows [r0, r1) of the scaled image (r0 < r1 <= its
 * height) into out, rows `stride` bytes apart. Returns 0 or a negative code. */
int zr_jpeg_rows(zr_jpeg *j, uint32_t r0, uint32_t r1, uint8_t *out, size_t stride, zr_error *err);

/* Ends the image (whatever state it is in): the decompressor is ready for the
 * next. */
void zr_jpeg_end(zr_jpeg *j);

#endif
