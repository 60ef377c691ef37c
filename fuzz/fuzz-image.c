/* fuzz-image.c: libFuzzer target for the decode of an image record
 * (image/image.h: the sniff, libjpeg-turbo's and libspng's headers and
 * decoders, the scaled crop, the resize), as a loader's worker runs it on a
 * record a client stored. The input's first 8 bytes choose the parameters
 * (crop, flip, channels, the output's size up to 64 × 64, the position and
 * step of the box) and the rest is the record. Properties:
 *   - zr_image_decode() returns 0, or a negative code with a message, and the
 *     code is one it documents (ZR_E_DECODE, ZR_E_LIMIT, ZR_E_SCHEMA, ENOMEM);
 *   - it writes nothing outside the output (ASan), reads nothing outside the
 *     record, and leaks nothing (the worker cleared after each input);
 *   - the same input decodes to the same bytes twice, with a fresh worker and
 *     with the one that decoded it before (no state carried between records).
 * Built as a libFuzzer binary with -Dfuzz=enabled, and as a corpus replay test
 * (replay.c) in every build. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "image/image.h"
#include "zr-errors.h"

static void must(int cond) {
        if (!cond)
                abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        if (size < 8)
                return 0;
        zr_image_params p = {
                .aug = { .crop = (enum zr_crop)(data[0] % 3), .flip = data[1] & 1,
                         .scale = { 0.08, 1.0 }, .ratio = { 0.75, 4.0 / 3.0 }, .fraction = 0.875,
                         .out_h = 1u + data[2] % 64, .out_w = 1u + data[3] % 64 },
                .channels = data[1] & 2 ? 1 : 3,
                .max_pixels = UINT64_C(1) << 22, /* 4 MiP: bounded memory per input */
        };
        uint64_t key = zr_augment_key(data[4], data[5]), pos = data[6];
        size_t out = (size_t)p.aug.out_h * p.aug.out_w * p.channels;
        uint8_t *a = malloc(out), *b = malloc(out);
        zr_image_worker w = {0};
        zr_error e1 = {0}, e2 = {0};

        must(a && b);
        must(zr_image_params_check(&p, &e1) == 0);
        int r1 = zr_image_decode(&p, &w, data + 8, size - 8, key, pos, a, &e1);
        int r2 = zr_image_decode(&p, &w, data + 8, size - 8, key, pos, b, &e2);
        must(r1 == 0 || (e1.message[0] && (r1 == -ZR_E_DECODE || r1 == -ZR_E_LIMIT ||
                                           r1 == -ZR_E_SCHEMA || r1 == -ENOMEM)));
        must(r1 == r2);
        if (r1 == 0)
                must(memcmp(a, b, out) == 0);
        zr_image_worker_clear(&w);
        zr_error e3 = {0};
        int r3 = zr_image_decode(&p, &w, data + 8, size - 8, key, pos, b, &e3);
        must(r3 == r1);
        if (r1 == 0)
                must(memcmp(a, b, out) == 0);
        zr_image_worker_clear(&w);
        free(a);
        free(b);
        return 0;
}
