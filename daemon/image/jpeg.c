/* jpeg.c: JPEG decoding of a crop at a DCT scale, through libjpeg-turbo's
 * libjpeg API (jpeg.h).
 *
 * libjpeg reports errors by calling error_exit, which must not return: it
 * longjmps back into the call that was running, whose one setjmp turns it
 * into a return value. No object of ours is live across a setjmp (the
 * caller's buffers are its own), so nothing leaks when it fires. It assumes
 * one thread per zr_jpeg; libjpeg itself keeps no global state.
 */
#include "image/jpeg.h"

#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jerror.h>
#include <jpeglib.h>

#include "zr-errors.h"

struct zr_jpeg {
        struct jpeg_decompress_struct d;
        struct jpeg_error_mgr jerr;
        struct jpeg_progress_mgr progress;
        jmp_buf jmp;
        char msg[JMSG_LENGTH_MAX];
        int truncated;          /* the stream ended early: an error */
        int started;
};

static void on_error(j_common_ptr c) {
        zr_jpeg *j = (zr_jpeg *)c->client_data;

        (*c->err->format_message)(c, j->msg);
        longjmp(j->jmp, 1);
}

static void on_message(j_common_ptr c, int level) {
        zr_jpeg *j = (zr_jpeg *)c->client_data;

        /* level -1: a warning. Data that ends before the image does (the file,
         * or a scan's entropy-coded segment cut by a marker) is an error: the
         * rest would be grey. The others libjpeg recovers from, as Pillow lets
         * it (extraneous bytes before a marker, ...). */
        if (level < 0 && (c->err->msg_code == JWRN_JPEG_EOF || c->err->msg_code == JWRN_HIT_MARKER) &&
            !j->truncated) {
                j->truncated = 1;
                (*c->err->format_message)(c, j->msg);
        }
        c->err->num_warnings += level < 0;
}

static void on_progress(j_common_ptr c) {
        j_decompress_ptr d = (j_decompress_ptr)c;

        if (d->input_scan_number > ZR_JPEG_SCANS_MAX) {
                c->err->msg_code = JMSG_LASTMSGCODE; /* ours, not libjpeg's */
                zr_jpeg *j = (zr_jpeg *)c->client_data;
                snprintf(j->msg, sizeof(j->msg), "a progressive JPEG of more than %d scans",
                         ZR_JPEG_SCANS_MAX);
                longjmp(j->jmp, 1);
        }
}

zr_jpeg *zr_jpeg_new(void) {
        zr_jpeg *volatile j = calloc(1, sizeof(*j));

        if (!j)
                return NULL;
        j->d.err = jpeg_std_error(&j->jerr);
        j->jerr.error_exit = on_error;
        j->jerr.emit_message = on_message;
        j->d.client_data = j;
        if (setjmp(j->jmp)) { /* out of memory creating it */
                jpeg_destroy_decompress(&j->d);
                free(j);
                return NULL;
        }
        jpeg_create_decompress(&j->d);
        j->progress.progress_monitor = on_progress;
        return j;
}

zr_jpeg *zr_jpeg_free(zr_jpeg *j) {
        if (j) {
                jpeg_destroy_decompress(&j->d);
                free(j);
        }
        return NULL;
}

static int failed(zr_jpeg *j, zr_error *err) {
        int r = zr_error_set(err, ZR_E_DECODE, "JPEG: %s", j->msg);
        zr_jpeg_end(j);
        return r;
}

int zr_jpeg_header(zr_jpeg *j, const uint8_t *data, size_t len, uint32_t *ret_w, uint32_t *ret_h,
                   uint32_t *ret_components, zr_error *err) {
        j->truncated = 0;
        j->jerr.num_warnings = 0;
        if (setjmp(j->jmp))
                return failed(j, err);
        jpeg_mem_src(&j->d, data, (unsigned long)len);
        if (jpeg_read_header(&j->d, TRUE) != JPEG_HEADER_OK) {
                snprintf(j->msg, sizeof(j->msg), "no image in the stream");
                return failed(j, err);
        }
        *ret_w = j->d.image_width;
        *ret_h = j->d.image_height;
        *ret_components = (uint32_t)j->d.num_components;
        return 0;
}

int zr_jpeg_start(zr_jpeg *j, unsigned m, unsigned channels, uint32_t c0_, uint32_t c1_,
                  size_t mem_max, uint32_t *ret_c0, uint32_t *ret_cw, uint32_t *ret_sw,
                  uint32_t *ret_sh, zr_error *err) {
        volatile uint32_t c0 = c0_, c1 = c1_;

        if (setjmp(j->jmp))
                return failed(j, err);
        if (j->d.jpeg_color_space == JCS_CMYK || j->d.jpeg_color_space == JCS_YCCK) {
                snprintf(j->msg, sizeof(j->msg), "a CMYK JPEG: not decoded (store it as RGB)");
                return failed(j, err);
        }
        j->d.out_color_space = channels == 1 ? JCS_GRAYSCALE : JCS_RGB;
        j->d.scale_num = m;
        j->d.scale_denom = 8;
        j->d.dct_method = JDCT_ISLOW;
        j->d.do_fancy_upsampling = TRUE;
        j->d.progress = &j->progress;
        j->d.mem->max_memory_to_use = (long)(mem_max > (size_t)0x7fffffff ? 0x7fffffff : mem_max);
        jpeg_start_decompress(&j->d);
        j->started = 1;
        *ret_sw = j->d.output_width;
        *ret_sh = j->d.output_height;
        JDIMENSION x = c0, w = c1 - c0;
        if (w < j->d.output_width) /* it widens the columns to whole iMCUs */
                jpeg_crop_scanline(&j->d, &x, &w);
        *ret_c0 = x;
        *ret_cw = w;
        return 0;
}

int zr_jpeg_rows(zr_jpeg *j, uint32_t r0, uint32_t r1, uint8_t *out, size_t stride, zr_error *err) {
        if (setjmp(j->jmp))
                return failed(j, err);
        if (r0 > 0 && jpeg_skip_scanlines(&j->d, r0) != r0) {
                snprintf(j->msg, sizeof(j->msg), "the rows above the crop did not decode");
                return failed(j, err);
        }
        while (j->d.output_scanline < r1) {
                JSAMPROW row = out + (size_t)(j->d.output_scanline - r0) * stride;
                if (jpeg_read_scanlines(&j->d, &row, 1) != 1) {
                        snprintf(j->msg, sizeof(j->msg), "a row did not decode");
                        return failed(j, err);
                }
                if (j->truncated)
                        return failed(j, err);
        }
        return 0;
}

void zr_jpeg_end(zr_jpeg *j) {
        /* never longjmps: abort only frees the image's pools */
        jpeg_abort_decompress(&j->d);
        j->d.progress = NULL;
        j->started = 0;
}
