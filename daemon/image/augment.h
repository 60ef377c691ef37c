/* augment.h: where an image record is cropped and whether it is flipped, as a
 * pure function of (seed, step, the record's place in the step's global batch)
 * and the image's size.
 *
 * The function is normative: proto/AUGMENT.md defines it bit for bit and
 * proto/vectors/augment.json pins it (tests/image/test-augment.c checks the
 * vectors). A resumed run and a run at another world size with the same global
 * batch therefore crop and flip every record alike. Change nothing here
 * without changing that page and the vectors.
 *
 * Threads: any; no state.
 */
#ifndef ZR_IMAGE_AUGMENT_H
#define ZR_IMAGE_AUGMENT_H

#include <stdbool.h>
#include <stdint.h>

/* The key of a step's augmentation draws: zr_rng_key(seed, "zr-img" | 5, step)
 * (sampler/rng.h). */
#define ZR_RNG_DOMAIN_IMAGE UINT64_C(0x7a722d696d670005)

/* Attempts of RandomResizedCrop before its fallback (torchvision's 10). */
#define ZR_AUGMENT_ATTEMPTS 10
/* The counter of the flip's draw: past the attempts' 4 draws each. */
#define ZR_AUGMENT_FLIP_DRAW 40

enum zr_crop {
        ZR_CROP_NONE = 0,           /* the whole image */
        ZR_CROP_CENTER = 1,         /* the centred box of the output's aspect ratio,
                                     * each side `fraction` of the largest one */
        ZR_CROP_RANDOM_RESIZED = 2, /* torchvision's RandomResizedCrop box */
};

typedef struct zr_augment {
        enum zr_crop crop;
        bool flip;              /* a record is mirrored left-right when its draw says */
        double scale[2];        /* random_resized: the box's area over the image's, lo <= hi, in (0, 1] */
        double ratio[2];        /* random_resized: the box's width over height, lo <= hi, > 0 */
        double fraction;        /* center: (0, 1] */
        uint32_t out_h, out_w;  /* center: the output's size (its aspect ratio) */
} zr_augment;

typedef struct zr_box {
        uint32_t x, y, w, h;    /* inside the image: x + w <= width, y + h <= height */
        bool flip;
} zr_box;

/* The key of step `step`'s draws under `seed`. */
uint64_t zr_augment_key(uint64_t seed, uint64_t step);

/* The box and flip of the record at global position `pos` (rank × batch_size +
 * its place in the rank's batch) of the step whose key is `key`, for an image of
 * width × height (both >= 1). Always a box of at least 1 × 1 inside the image. */
zr_box zr_augment_box(const zr_augment *a, uint64_t key, uint64_t pos, uint32_t width,
                      uint32_t height);

/* Whether *a is usable: 0, or -1 with *why set to a static message. */
int zr_augment_check(const zr_augment *a, const char **why);

#endif
