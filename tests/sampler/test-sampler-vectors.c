/* test-sampler-vectors.c: the engine reproduces proto/vectors/sampler.jsonl,
 * sampler-cyclic-lx157.jsonl and loaderx-1.5.7.jsonl (the batches of PyPI loaderx
 * 1.5.7 itself) bit for bit. The files are read from $ZR_VECTORS (set by meson); each line's
 * parameters are run and its indices compared. The files must also still cover
 * what their tables promise (n = 1, n < batch_size, world_size > 1, huge steps, wide
 * seeds, n >= 2^63, every mode), so a trimmed file fails too. */
#include <check.h>
#include <stdint.h>

#include "check-run.h"
#include "sampler/sampler.h"
#include "vectors-read.h"

#define VECTORS_BATCH_MAX 128

/* What a file covered. */
typedef struct vectors_cover {
        unsigned lines, modes[_ZR_SAMPLER_MODE_MAX];
        int n1, n_lt_b, sharded, huge_step, wide_seed, huge_n;
} vectors_cover;

/* Runs one line through the engine; aborts on a mismatch. */
static void vectors_check_line(const char *line, unsigned lineno, void *arg) {
        vectors_cover *c = arg;
        uint64_t want[VECTORS_BATCH_MAX], got[VECTORS_BATCH_MAX];
        zr_sampler_params p = {
                .mode = vectors_mode_at(line),
                .n = vectors_field(line, "n"),
                .batch_size = vectors_field(line, "batch_size"),
                .seed = vectors_field(line, "seed"),
                .step = vectors_field(line, "step"),
                .rank = (uint32_t)vectors_field(line, "rank"),
                .world_size = (uint32_t)vectors_field(line, "world_size"),
        };
        size_t count = vectors_list(line, "indices", want, VECTORS_BATCH_MAX);
        zr_error err = {0};

        ck_assert_uint_eq(count, p.batch_size);
        ck_assert_msg(zr_sampler_indices(&p, got, &err) == 0, "line %u: %s", lineno, err.message);
        for (uint64_t j = 0; j < count; j++)
                if (got[j] != want[j])
                        ck_abort_msg("line %u (%s n=%lu step=%lu rank=%u): index %lu is %lu, "
                                     "file says %lu", lineno, zr_sampler_mode_name(p.mode),
                                     (unsigned long)p.n, (unsigned long)p.step, p.rank,
                                     (unsigned long)j, (unsigned long)got[j],
                                     (unsigned long)want[j]);

        c->lines++;
        c->modes[p.mode]++;
        c->n1 |= p.n == 1;
        c->n_lt_b |= p.n < p.batch_size;
        c->sharded |= p.world_size > 1;
        c->huge_step |= p.step >= (UINT64_C(1) << 62);
        c->wide_seed |= p.seed >= (UINT64_C(1) << 32);
        c->huge_n |= p.n >= (UINT64_C(1) << 63);
}

/* Runs every line of $ZR_VECTORS/name through the engine; aborts on a mismatch. */
static vectors_cover vectors_check(const char *name) {
        vectors_cover c = {0};

        vectors_each(name, vectors_check_line, &c);
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
