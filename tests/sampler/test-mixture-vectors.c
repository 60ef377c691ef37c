/* test-mixture-vectors.c: the engine reproduces proto/vectors/sampler-mixture.jsonl
 * (mixture batches) and sampler-inverse.jsonl (which steps saw a record) bit for
 * bit. The files are read from $ZR_VECTORS (set by meson); each line's parameters
 * are run and every field the file gives is compared. The files must also still
 * cover what their tables promise, so a trimmed file fails too. */
#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check-run.h"
#include "sampler/inverse.h"
#include "vectors-read.h"
#include "vectors.h"

#define VECTORS_MAX 256 /* batch or sources of a line */

static zr_mixture vectors_m;

/* What the mixture file covered. */
static struct {
        unsigned modes[_ZR_SAMPLER_MODE_MAX], sharded, g1, huge_step, last_step, wide_seed, huge_n, many;
        unsigned tiny, repeating;
} mix_cover;

static void vectors_check_mixture(const char *line, unsigned lineno, void *arg) {
        static uint64_t want_src[VECTORS_MAX], want_idx[VECTORS_MAX], idx[VECTORS_MAX];
        static uint32_t src[VECTORS_MAX];
        zr_mixture_source s[VECTORS_MAX];
        uint64_t want_before[VECTORS_MAX], want_count[VECTORS_MAX], before[VECTORS_MAX], count[VECTORS_MAX];
        uint64_t seed = vectors_field(line, "seed"), step = vectors_field(line, "step");
        uint64_t b = vectors_field(line, "batch_size");
        uint32_t rank = (uint32_t)vectors_field(line, "rank"), w = (uint32_t)vectors_field(line, "world_size");
        uint32_t k = vectors_sources(line, s, VECTORS_MAX);
        zr_error err = {0};

        (void)arg;
        ck_assert_msg(zr_mixture_init(&vectors_m, s, k, b, w, seed, &err) == 0, "line %u: %s", lineno, err.message);
        ck_assert_msg(zr_mixture_counts(&vectors_m, step, before, count, &err) == 0, "line %u: %s", lineno,
                      err.message);
        ck_assert_msg(zr_mixture_batch(&vectors_m, step, rank, src, idx, &err) == 0, "line %u: %s", lineno,
                      err.message);
        ck_assert_uint_eq(vectors_list(line, "draws_before", want_before, VECTORS_MAX), k);
        ck_assert_uint_eq(vectors_list(line, "counts", want_count, VECTORS_MAX), k);
        ck_assert_uint_eq(vectors_list(line, "source", want_src, VECTORS_MAX), b);
        ck_assert_uint_eq(vectors_list(line, "indices", want_idx, VECTORS_MAX), b);
        for (uint32_t i = 0; i < k; i++)
                if (before[i] != want_before[i] || count[i] != want_count[i])
                        ck_abort_msg("line %u: source %u has draws %lu + %lu, file says %lu + %lu", lineno, i,
                                     (unsigned long)before[i], (unsigned long)count[i],
                                     (unsigned long)want_before[i], (unsigned long)want_count[i]);
        for (uint64_t j = 0; j < b; j++)
                if (src[j] != want_src[j] || idx[j] != want_idx[j])
                        ck_abort_msg("line %u: position %lu is (%u, %lu), file says (%lu, %lu)", lineno,
                                     (unsigned long)j, src[j], (unsigned long)idx[j], (unsigned long)want_src[j],
                                     (unsigned long)want_idx[j]);

        for (uint32_t i = 0; i < k; i++) {
                mix_cover.modes[s[i].mode]++;
                mix_cover.huge_n += s[i].n >= (UINT64_C(1) << 63);
                mix_cover.tiny += (unsigned __int128)b * w * s[i].weight < vectors_m.weight[vectors_m.root];
                mix_cover.repeating += count[i] > s[i].n;
        }
        mix_cover.sharded += w > 1;
        mix_cover.g1 += b * w == 1;
        mix_cover.huge_step += step >= (UINT64_C(1) << 58);
        mix_cover.last_step += step == vectors_m.last_step;
        mix_cover.wide_seed += seed >= (UINT64_C(1) << 32);
        mix_cover.many += k >= 12;
}

/* What the inverse file covered. */
static struct {
        unsigned modes[_ZR_SAMPLER_MODE_MAX], mix_modes[_ZR_SAMPLER_MODE_MAX], hits, several, huge_step;
} inv_cover;

static void vectors_check_inverse(const char *line, unsigned lineno, void *arg) {
        static uint64_t want[3 * VECTORS_MAX_HITS];
        static vectors_hits got;
        zr_steps_of_ops ops = { .on_hits = vectors_on_hits, .userdata = &got };
        uint64_t record = vectors_field(line, "record"), start = vectors_field(line, "start");
        uint64_t stop = vectors_field(line, "stop"), b = vectors_field(line, "batch_size");
        uint64_t seed = vectors_field(line, "seed");
        uint32_t w = (uint32_t)vectors_field(line, "world_size");
        size_t nwant = vectors_list(line, "hits", want, 3 * VECTORS_MAX_HITS);
        zr_error err = {0};

        (void)arg;
        got.count = 0;
        if (vectors_has(line, "sources")) {
                zr_mixture_source s[VECTORS_MAX];
                uint32_t k = vectors_sources(line, s, VECTORS_MAX), source = (uint32_t)vectors_field(line, "source");

                ck_assert_int_eq(zr_mixture_init(&vectors_m, s, k, b, w, seed, &err), 0);
                ck_assert_msg(zr_mixture_steps_of(&vectors_m, source, record, start, stop, &ops, &err) == 0,
                              "line %u: %s", lineno, err.message);
                inv_cover.mix_modes[s[source].mode]++;
        } else {
                zr_sampler_params p = { .mode = vectors_mode_at(line), .n = vectors_field(line, "n"),
                                        .batch_size = b, .seed = seed, .world_size = w };
                ck_assert_msg(zr_sampler_steps_of(&p, record, start, stop, &ops, &err) == 0, "line %u: %s", lineno,
                              err.message);
                inv_cover.modes[p.mode]++;
        }
        ck_assert_uint_eq(nwant % 3, 0);
        if (got.count != nwant / 3)
                ck_abort_msg("line %u: %zu hits, file says %zu", lineno, got.count, nwant / 3);
        for (size_t i = 0; i < got.count; i++)
                if (got.h[i].step != want[3 * i] || got.h[i].rank != want[3 * i + 1] ||
                    got.h[i].position != want[3 * i + 2])
                        ck_abort_msg("line %u: hit %zu is (%lu, %u, %lu), file says (%lu, %lu, %lu)", lineno, i,
                                     (unsigned long)got.h[i].step, got.h[i].rank, (unsigned long)got.h[i].position,
                                     (unsigned long)want[3 * i], (unsigned long)want[3 * i + 1],
                                     (unsigned long)want[3 * i + 2]);
        inv_cover.hits += (unsigned)got.count;
        for (size_t i = 1; i < got.count; i++)
                inv_cover.several += got.h[i].step == got.h[i - 1].step;
        inv_cover.huge_step += start >= (UINT64_C(1) << 62);
}

START_TEST(test_mixture_vectors) {
        unsigned lines = vectors_each("sampler-mixture.jsonl", vectors_check_mixture, NULL);

        ck_assert_uint_ge(lines, 30);
        for (int m = 0; m < _ZR_SAMPLER_MODE_MAX; m++)
                ck_assert_uint_ge(mix_cover.modes[m], 5);
        ck_assert(mix_cover.sharded && mix_cover.g1 && mix_cover.huge_step && mix_cover.last_step &&
                  mix_cover.wide_seed && mix_cover.huge_n && mix_cover.many && mix_cover.tiny &&
                  mix_cover.repeating);
}
END_TEST

START_TEST(test_inverse_vectors) {
        unsigned lines = vectors_each("sampler-inverse.jsonl", vectors_check_inverse, NULL);

        ck_assert_uint_ge(lines, 25);
        for (int m = 0; m < _ZR_SAMPLER_MODE_MAX; m++) {
                ck_assert_uint_ge(inv_cover.modes[m], 3);
                ck_assert_uint_ge(inv_cover.mix_modes[m], 1);
        }
        ck_assert_uint_ge(inv_cover.hits, 300);
        ck_assert(inv_cover.several && inv_cover.huge_step);
}
END_TEST

int main(void) {
        Suite *s = suite_create("mixture-vectors");
        TL_TCASE(s, "core", 0, test_mixture_vectors, test_inverse_vectors);
        return tl_run_suite(s);
}
