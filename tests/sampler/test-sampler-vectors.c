/* test-sampler-vectors.c: the engine reproduces proto/vectors/sampler.jsonl,
 * sampler-cyclic-lx157.jsonl and loaderx-1.5.7.jsonl (the batches of PyPI loaderx
 * 1.5.7 itself) bit for bit. The files are read from $ZR_VECTORS (set by meson); each line's
 * parameters are run and its indices compared. The files must also still cover
 * what their tables promise (n = 1, n < batch_size, world_size > 1, huge steps, wide
 * seeds, n >= 2^63, every mode), so a trimmed file fails too. */
#include <check.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check-run.h"
#include "sampler/sampler.h"

#define VECTORS_LINE_MAX 8192 /* longest line: 128 indices of 20 digits and the params */
#define VECTORS_BATCH_MAX 128

/* The unsigned integer after "key": in line, or abort. */
static uint64_t vectors_field(const char *line, const char *key) {
        char pat[64];
        const char *p;
        char *end;
        unsigned long long v;

        snprintf(pat, sizeof(pat), "\"%s\": ", key);
        p = strstr(line, pat);
        ck_assert_msg(p, "no %s in: %.80s", key, line);
        errno = 0;
        v = strtoull(p + strlen(pat), &end, 10);
        ck_assert_msg(errno == 0 && end != p + strlen(pat), "bad %s in: %.80s", key, line);
        return v;
}

/* What a file covered. */
typedef struct vectors_cover {
        unsigned lines, modes[_ZR_SAMPLER_MODE_MAX];
        int n1, n_lt_b, sharded, huge_step, wide_seed, huge_n;
} vectors_cover;

/* Runs every line of $ZR_VECTORS/name through the engine; aborts on a mismatch. */
static vectors_cover vectors_check(const char *name) {
        const char *dir = getenv("ZR_VECTORS");
        char path[4096], *line = malloc(VECTORS_LINE_MAX);
        uint64_t want[VECTORS_BATCH_MAX], got[VECTORS_BATCH_MAX];
        vectors_cover c = {0};
        FILE *f;

        ck_assert_ptr_nonnull(dir);
        ck_assert_ptr_nonnull(line);
        snprintf(path, sizeof(path), "%s/%s", dir, name);
        f = fopen(path, "re");
        ck_assert_msg(f, "cannot open %s", path);

        while (fgets(line, VECTORS_LINE_MAX, f)) {
                zr_sampler_params p = {0};
                const char *m = strstr(line, "\"mode\": \""), *s;
                char *end;
                uint64_t count = 0;
                zr_error err = {0};

                ck_assert_msg(strchr(line, '\n'), "%s: line %u too long", name, c.lines + 1);
                ck_assert_ptr_nonnull(m);
                m += strlen("\"mode\": \"");
                {
                        char mode[16] = {0};
                        size_t len = strcspn(m, "\"");

                        ck_assert_uint_lt(len, sizeof(mode));
                        memcpy(mode, m, len);
                        ck_assert_int_eq(zr_sampler_mode_from_name(mode, &p.mode), 0);
                }
                p.n = vectors_field(line, "n");
                p.batch_size = vectors_field(line, "batch_size");
                p.seed = vectors_field(line, "seed");
                p.step = vectors_field(line, "step");
                p.rank = (uint32_t)vectors_field(line, "rank");
                p.world_size = (uint32_t)vectors_field(line, "world_size");

                s = strstr(line, "\"indices\": [");
                ck_assert_ptr_nonnull(s);
                s += strlen("\"indices\": [");
                while (*s != ']') {
                        ck_assert_uint_lt(count, VECTORS_BATCH_MAX);
                        errno = 0;
                        want[count++] = strtoull(s, &end, 10);
                        ck_assert_msg(errno == 0 && end != s, "%s: line %u: bad index", name, c.lines + 1);
                        s = end;
                        if (*s == ',')
                                s += 2;
                }
                ck_assert_uint_eq(count, p.batch_size);

                ck_assert_msg(zr_sampler_indices(&p, got, &err) == 0, "%s: line %u: %s", name,
                              c.lines + 1, err.message);
                for (uint64_t j = 0; j < count; j++)
                        if (got[j] != want[j])
                                ck_abort_msg("%s: line %u (%s n=%lu step=%lu rank=%u): index %lu is %lu, "
                                             "file says %lu", name, c.lines + 1,
                                             zr_sampler_mode_name(p.mode), (unsigned long)p.n,
                                             (unsigned long)p.step, p.rank, (unsigned long)j,
                                             (unsigned long)got[j], (unsigned long)want[j]);

                c.lines++;
                c.modes[p.mode]++;
                c.n1 |= p.n == 1;
                c.n_lt_b |= p.n < p.batch_size;
                c.sharded |= p.world_size > 1;
                c.huge_step |= p.step >= (UINT64_C(1) << 62);
                c.wide_seed |= p.seed >= (UINT64_C(1) << 32);
                c.huge_n |= p.n >= (UINT64_C(1) << 63);
        }
        ck_assert(!ferror(f));
        fclose(f);
        free(line);
        return c;
}

START_TEST(test_vectors_reproduced) {
        vectors_cover c = vectors_check("sampler.jsonl");

        ck_assert_uint_ge(c.lines, 100);
        for (int m = 0; m <= ZR_SAMPLER_CYCLIC; m++)
                ck_assert_uint_ge(c.modes[m], 25);
        ck_assert_uint_eq(c.modes[ZR_SAMPLER_CYCLIC_LX157], 0);
        ck_assert(c.n1 && c.n_lt_b && c.sharded && c.huge_step && c.wide_seed && c.huge_n);

        c = vectors_check("sampler-cyclic-lx157.jsonl");
        ck_assert_uint_ge(c.modes[ZR_SAMPLER_CYCLIC_LX157], 30);
        ck_assert_uint_eq(c.lines, c.modes[ZR_SAMPLER_CYCLIC_LX157]);
        ck_assert(c.n1 && c.sharded && c.huge_step && c.wide_seed && c.huge_n);
}
END_TEST

/* loaderx 1.5.7's own batches: its cyclic (mode 2) is cyclic-lx157 and its
 * sequential (mode 0) is zrecord's sequential, at world_size 1. */
START_TEST(test_lx157_vectors_reproduced) {
        vectors_cover c = vectors_check("loaderx-1.5.7.jsonl");

        ck_assert_uint_ge(c.modes[ZR_SAMPLER_CYCLIC_LX157], 30);
        ck_assert_uint_ge(c.modes[ZR_SAMPLER_SEQUENTIAL], 30);
        ck_assert_uint_eq(c.lines, c.modes[ZR_SAMPLER_CYCLIC_LX157] + c.modes[ZR_SAMPLER_SEQUENTIAL]);
        ck_assert(c.n1 && c.n_lt_b && c.huge_step && c.wide_seed && c.huge_n);
}
END_TEST

int main(void) {
        Suite *s = suite_create("sampler-vectors");
        TL_TCASE(s, "core", 0, test_vectors_reproduced, test_lx157_vectors_reproduced);
        return tl_run_suite(s);
}
