/* helpers.h: scratch directories and deterministic data for the dataset suites.
 * Header-only (static functions), included by each suite. */
#ifndef ZR_TESTS_DATASET_HELPERS_H
#define ZR_TESTS_DATASET_HELPERS_H

#include <check.h>
#include <fcntl.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dataset/batch.h"
#include "files.h"

/* Small chunk files: tests cross chunk rollovers without 4 GiB sparse files. */
#define TEST_CHUNK_LOG2 20

/* Gathers ragged records idx[0..n) of ds with the batch gather (batch.h) into
 * dst (dst_size bytes): payload i at dst + offsets[i], its dims at shapes[i ×
 * ndim ..]. *ret_bytes (may be NULL) gets the bytes the batch needs; -ZR_E_BUFFER
 * if that is more than dst_size (dst untouched). */
static inline int gather_ragged(zr_dataset *ds, const uint64_t *idx, size_t n, void *dst,
                                uint64_t dst_size, uint64_t *shapes, uint64_t *offsets,
                                uint64_t *ret_bytes, zr_error *err) {
        uint64_t *lengths = calloc(n ? n : 1, sizeof(uint64_t));
        zr_gather g = { .ds = ds, .idx = idx, .n = n, .offsets = offsets, .lengths = lengths,
                        .shapes = shapes };
        int r;

        ck_assert_ptr_nonnull(lengths);
        r = zr_gather_locate(&g, err);
        if (r == 0 && ret_bytes)
                *ret_bytes = g.bytes;
        if (r == 0 && g.bytes > dst_size)
                r = -ZR_E_BUFFER;
        if (r == 0)
                r = zr_gather_read(&g, dst, 0, NULL, NULL, err);
        if (r == 0 && n > 0) /* the last payload ends the batch */
                ck_assert_uint_eq(offsets[n - 1] + lengths[n - 1], g.bytes);
        zr_gather_release(&g);
        free(lengths);
        return r;
}

/* A schema decoder under test: 0 (whatever it decoded released) or a
 * negative code with err set. */
typedef int (*schema_decoder)(const void *data, size_t len, zr_error *err);

/* Every truncation of the valid encoding data[0..len) is refused with
 * -ZR_E_SCHEMA and never read past, and so is the encoding with a byte after
 * it, saying so. */
static inline void expect_cuts_refused(const void *data, size_t len, schema_decoder decode) {
        char *copy = malloc(len + 1);
        zr_error err = {0};

        ck_assert_ptr_nonnull(copy);
        ck_assert_int_eq(decode(data, len, NULL), 0);
        for (size_t cut = 0; cut < len; cut++) {
                void *exact = malloc(cut ? cut : 1); /* ASan sees a read past it */
                memcpy(exact, data, cut);
                ck_assert_int_eq(decode(exact, cut, NULL), -ZR_E_SCHEMA);
                free(exact);
        }
        memcpy(copy, data, len);
        copy[len] = (char)0xc0;
        ck_assert_int_eq(decode(copy, len + 1, &err), -ZR_E_SCHEMA);
        ck_assert_msg(strstr(err.message, "after its map"), "%s", err.message);
        free(copy);
}

/* A scratch directory (files.h) whose making cannot fail the test quietly. */
typedef tl_scratch scratch;

static inline void scratch_new(scratch *s) {
        ck_assert_int_eq(tl_scratch_new(s, "dataset"), 0);
}

/* A child directory of s, opened; returns its descriptor. */
static inline int scratch_child(scratch *s, const char *name) {
        ck_assert_int_eq(mkdirat(s->fd, name, 0755), 0);
        int fd = openat(s->fd, name, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        ck_assert_int_ge(fd, 0);
        return fd;
}

static inline void scratch_free(scratch *s) {
        tl_scratch_free(s);
}

static inline uint64_t gen_next(uint64_t *state) {
        uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        return z ^ (z >> 31);
}

static inline void gen_bytes(void *dst, size_t n, uint64_t seed) {
        uint8_t *p = dst;
        for (size_t i = 0; i < n; i++) {
                if (i % 8 == 0)
                        seed = gen_next(&seed) ^ i;
                p[i] = (uint8_t)(seed >> (8 * (i % 8)));
        }
}

/* A smooth w x h uint8 tile: a gradient with a per-tile slope plus small noise. */
static inline void gen_tile(uint8_t *dst, size_t w, size_t h, uint64_t id) {
        uint64_t st = id * 7919 + 1;
        int base = (int)(gen_next(&st) % 128), sx = (int)(gen_next(&st) % 5),
            sy = (int)(gen_next(&st) % 5);
        for (size_t y = 0; y < h; y++)
                for (size_t x = 0; x < w; x++)
                        dst[y * w + x] = (uint8_t)(base + sx * (int)x / 2 + sy * (int)y / 2 +
                                                   (int)(gen_next(&st) % 4));
}

/* n int32 token ids drawn from a Zipf-like law over a 32k vocabulary. */
static inline void gen_tokens(int32_t *dst, size_t n, uint64_t id) {
        uint64_t st = id * 104729 + 3;
        for (size_t i = 0; i < n; i++) {
                double u = (double)(gen_next(&st) >> 11) / 9007199254740992.0;
                /* a 1/x density over [1, 32768): rank = 32768^u */
                double r = exp(u * 10.397); /* 32768^u */
                dst[i] = (int32_t)r - 1;
        }
}

#endif
