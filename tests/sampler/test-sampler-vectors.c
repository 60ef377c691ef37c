/* test-sampler-vectors.c: the engine reproduces proto/vectors/sampler.jsonl bit
 * for bit. The file is read from $ZR_VECTORS (set by meson); each line's
 * parameters are run and its indices compared. The file must also still cover
 * what the table promises (n = 1, n < batch_size, world_size > 1, huge steps, wide
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

START_TEST(test_vectors_reproduced) {
        const char *dir = getenv("ZR_VECTORS");
        char path[4096], *line = malloc(VECTORS_LINE_MAX);
        uint64_t want[VECTORS_BATCH_MAX], got[VECTORS_BATCH_MAX];
        unsigned lines = 0, modes[_ZR_SAMPLER_MODE_MAX] = {0};
        int n1 = 0, n_lt_b = 0, sharded = 0, huge_step = 0, wide_seed = 0, huge_n = 0;
        FILE *f;

        ck_assert_ptr_nonnull(dir);
        ck_assert_ptr_nonnull(line);
        snprintf(path, sizeof(path), "%s/sampler.jsonl", dir);
        f = fopen(path, "re");
        ck_assert_msg(f, "cannot open %s", path);

        while (fgets(line, VECTORS_LINE_MAX, f)) {
                zr_sampler_params p = {0};
                const char *m = strstr(line, "\"mode\": \""), *s;
                char *end;
                uint64_t count = 0;
                zr_error err = {0};

                ck_assert_msg(strchr(line, '\n'), "line %u too long", lines + 1);
                ck_assert_ptr_nonnull(m);
                m += strlen("\"mode\": \"");
                {
                        char name[16] = {0};
                        size_t len = strcspn(m, "\"");

                        ck_assert_uint_lt(len, sizeof(name));
                        memcpy(name, m, len);
                        ck_assert_int_eq(zr_sampler_mode_from_name(name, &p.mode), 0);
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
                        ck_assert_msg(errno == 0 && end != s, "line %u: bad index", lines + 1);
                        s = end;
                        if (*s == ',')
                                s += 2;
                }
                ck_assert_uint_eq(count, p.batch_size);

                ck_assert_msg(zr_sampler_indices(&p, got, &err) == 0, "line %u: %s", lines + 1, err.message);
                for (uint64_t j = 0; j < count; j++)
                        if (got[j] != want[j])
                                ck_abort_msg("line %u (%s n=%lu step=%lu rank=%u): index %lu is %lu, file says %lu",
                                             lines + 1, zr_sampler_mode_name(p.mode), (unsigned long)p.n,
                                             (unsigned long)p.step, p.rank, (unsigned long)j,
                                             (unsigned long)got[j], (unsigned long)want[j]);

                lines++;
                modes[p.mode]++;
                n1 |= p.n == 1;
                n_lt_b |= p.n < p.batch_size;
                sharded |= p.world_size > 1;
                huge_step |= p.step >= (UINT64_C(1) << 62);
                wide_seed |= p.seed >= (UINT64_C(1) << 32);
                huge_n |= p.n >= (UINT64_C(1) << 63);
        }
        ck_assert(!ferror(f));
        fclose(f);
        free(line);

        ck_assert_uint_ge(lines, 100);
        for (int m = 0; m < _ZR_SAMPLER_MODE_MAX; m++)
                ck_assert_uint_ge(modes[m], 25);
        ck_assert(n1 && n_lt_b && sharded && huge_step && wide_seed && huge_n);
}
END_TEST

int main(void) {
        Suite *s = suite_create("sampler-vectors");
        TL_TCASE(s, "core", 0, test_vectors_reproduced);
        return tl_run_suite(s);
}
