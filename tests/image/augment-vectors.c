/* augment-vectors.c: prints proto/vectors/augment.jsonl, the crop boxes and
 * flips of image/augment.h for a spread of parameters (proto/AUGMENT.md):
 *
 *     ./build/tests/image/augment-vectors > proto/vectors/augment.jsonl
 *
 * Only a change of the definition regenerates them; proto/AUGMENT.md and
 * proto/vectors/augment.py change with it. */
#include <inttypes.h>
#include <stdio.h>

#include "image/augment.h"

static const char *crop_name(enum zr_crop c) {
        return c == ZR_CROP_RANDOM_RESIZED ? "random_resized" : c == ZR_CROP_CENTER ? "center" : "none";
}

static void line(const zr_augment *a, uint64_t seed, uint64_t step, uint64_t pos, uint32_t w,
                 uint32_t h) {
        zr_box b = zr_augment_box(a, zr_augment_key(seed, step), pos, w, h);

        printf("{\"crop\": \"%s\", \"flip\": %s, \"scale\": [%.17g, %.17g], \"ratio\": [%.17g, %.17g], "
               "\"fraction\": %.17g, \"out_h\": %" PRIu32 ", \"out_w\": %" PRIu32 ", "
               "\"seed\": %" PRIu64 ", \"step\": %" PRIu64 ", \"pos\": %" PRIu64 ", "
               "\"width\": %" PRIu32 ", \"height\": %" PRIu32 ", "
               "\"box\": [%" PRIu32 ", %" PRIu32 ", %" PRIu32 ", %" PRIu32 "], \"flipped\": %s}\n",
               crop_name(a->crop), a->flip ? "true" : "false", a->scale[0], a->scale[1],
               a->ratio[0], a->ratio[1], a->fraction, a->out_h, a->out_w, seed, step, pos, w, h,
               b.x, b.y, b.w, b.h, b.flip ? "true" : "false");
}

int main(void) {
        static const uint32_t sizes[][2] = { { 500, 375 }, { 375, 500 }, { 224, 224 }, { 1, 1 },
                                             { 1000, 1 }, { 1, 1000 }, { 4032, 3024 }, { 17, 9 } };
        static const uint64_t seeds[] = { 0, 42, UINT64_C(0xfedcba9876543210) };
        static const uint64_t steps[] = { 0, 1, 1000000007, UINT64_C(1) << 62 };
        zr_augment rrc = { .crop = ZR_CROP_RANDOM_RESIZED, .flip = true, .scale = { 0.08, 1.0 },
                           .ratio = { 3.0 / 4.0, 4.0 / 3.0 }, .fraction = 0.875, .out_h = 224,
                           .out_w = 224 };
        zr_augment narrow = rrc, center = rrc, none = rrc;

        narrow.scale[0] = 0.5;
        narrow.scale[1] = 0.5;
        narrow.ratio[0] = 2.0;
        narrow.ratio[1] = 2.0;
        narrow.flip = false;
        center.crop = ZR_CROP_CENTER;
        center.out_w = 320;
        none.crop = ZR_CROP_NONE;
        for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++)
                for (size_t k = 0; k < sizeof(seeds) / sizeof(seeds[0]); k++)
                        for (size_t t = 0; t < sizeof(steps) / sizeof(steps[0]); t++)
                                for (uint64_t pos = 0; pos < 3; pos++)
                                        line(&rrc, seeds[k], steps[t], pos * 1000003 + t, sizes[s][0],
                                             sizes[s][1]);
        for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++) {
                line(&narrow, 7, 3, s, sizes[s][0], sizes[s][1]);
                line(&center, 7, 3, s, sizes[s][0], sizes[s][1]);
                center.fraction = 1.0;
                line(&center, 7, 3, s, sizes[s][0], sizes[s][1]);
                center.fraction = 0.875;
                line(&none, 9, 4, s, sizes[s][0], sizes[s][1]);
        }
        return 0;
}
