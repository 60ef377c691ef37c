/* resample.h: a box of an 8-bit image resized to the output's size with an
 * antialiased bilinear (triangle) filter, optionally mirrored left-right.
 *
 * The filter is Pillow's BILINEAR with its `reducing_gap` off (Image.resize
 * with box=): the triangle's support grows with the reduction, so a downscale
 * averages every input pixel it covers (no aliasing) and an upscale
 * interpolates between the two nearest. Weights are fixed-point (22 bits) as in
 * Pillow, so a resize here and Pillow's agree to within one level of rounding
 * of the intermediate row (docs/IMAGES.md, "Resizing"). Two separable passes:
 * the rows the vertical filter needs are resized horizontally first.
 *
 * Threads: any; the caller gives the scratch memory. zr_resample_simd() is
 * global (an atomic), for tests and benchmarks.
 */
#ifndef ZR_IMAGE_RESAMPLE_H
#define ZR_IMAGE_RESAMPLE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The weights' fixed-point bits (Pillow's PRECISION_BITS). */
#define ZR_RESAMPLE_BITS 22

/* An input image of w × h pixels of c channels (1..4), rows `stride` bytes
 * apart, and a box inside it in pixel units (x, y, bw, bh: fractional, as a
 * scaled decode leaves them). */
typedef struct zr_resample_src {
        const uint8_t *data;
        uint32_t w, h, c;
        size_t stride;
        double x, y, bw, bh;
} zr_resample_src;

/* The rows [*ret_first, *ret_end) of an input h rows high that the vertical
 * filter reads for an output out_h rows high from the box's rows y, bh. */
void zr_resample_rows(double y, double bh, uint32_t h, uint32_t out_h, uint32_t *ret_first,
                      uint32_t *ret_end);

/* The scratch bytes zr_resample() needs for this input and output. */
size_t zr_resample_scratch_bytes(const zr_resample_src *src, uint32_t out_w, uint32_t out_h);

/* Resizes src's box into dst (out_h rows of out_w × src->c bytes, packed),
 * mirrored left-right when flip. Only the rows zr_resample_rows() names are
 * read. scratch holds zr_resample_scratch_bytes(). */
void zr_resample(const zr_resample_src *src, uint8_t *dst, uint32_t out_w, uint32_t out_h,
                 bool flip, void *scratch);

/* Which kernels zr_resample() runs, for tests and benchmarks: mode 0 the
 * scalar passes, 1 the best this CPU has (the default), -1 leaves it. Both give
 * the same bytes. Returns whether the AVX2 kernels run. */
bool zr_resample_simd(int mode);

#endif
