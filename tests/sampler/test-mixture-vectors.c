/* test-mixture-vectors.c: the engine reproduces proto/vectors/sampler-mixture.jsonl
 * (mixture batches) and sampler-inverse.jsonl (which steps saw a record) bit for
 * bit. The files are read from $ZR_VECTORS (set by meson); each line's parameters
 * are run and every field the file gives is compared. The files must also still
 * cover what their tables promise, so a trimmed file fails too. */
#include <check.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check-run.h"
#include "sampler/inverse.h"

#define VECTORS_LINE_MAX 16384
#define VECTORS_MAX      256 /* batch, sources or hits of a line */

/* The unsigned integer after "key": in line, or abort. A top-level "n" comes
 * before the line's "sources" list, so a source's "n" is never taken for it. */
static uint64_t vectors_field(const char *line, const char *key) {
        char pat[64];
        const char *p, *sources = strstr(line, "\"sources\": ");
        char *end;
        unsigned long long v;

        snprintf(pat, sizeof(pat), "\"%s\": ", key);
        p = strstr(line, pat);
        ck_assert_msg(p && (!sources || p < sources || strcmp(key, "n") != 0), "no %s in: %.80s", key, line);
        errno = 0;
        v = strtoull(p + strlen(pat), &end, 10);
        ck_assert_msg(errno == 0 && end != p + strlen(pat), "bad %s in: %.80s", key, line);
        return v;
}

static int vectors_has(const char *line, const char *key) {
        char pat[64];

        snprintf(pat, sizeof(pat), "\"%s\": ", key);
        return strstr(line, pat) != NULL;
}

/* The integers of the list after "key": [, nested lists flattened; returns how many. */
static size_t vectors_list(const char *line, const char *key, uint64_t *out, size_t max) {
        char pat[64];
        const char *p;
        size_t count = 0;
        int depth = 0;

        snprintf(pat, sizeof(pat), "\"%s\": [", key);
        p = strstr(line, pat);
        ck_assert_msg(p, "no list %s in: %.80s", key, line);
        for (p += strlen(pat) - 1; *p; p++) {
                if (*p == '[') {
                        depth++;
                } else if (*p == ']') {
                        if (--depth == 0)
                                break;
                } else if (*p >= '0' && *p <= '9') {
                        char *end;

                        ck_assert_uint_lt(count, max);
                        errno = 0;
                        out[count++] = strtoull(p, &end, 10);
                        ck_assert(errno == 0);
                        p = end - 1;
                }
        }
        ck_assert_msg(depth == 0, "unterminated list %s", key);
        return count;
}

/* The line's sources: [{"mode": "...", "n": N, "weight": W}, ...]; returns how many. */
static uint32_t vectors_sources(const char *line, zr_mixture_source *out, uint32_t max) {
        const char *p = strstr(line, "\"sources\": [");
        uint32_t count = 0;

        ck_assert_ptr_nonnull(p);
        while ((p = strchr(p, '{')) && count < max) {
                const char *close = strchr(p, '}'), *m = strstr(p, "\"mode\": \"");
                char mode[16] = {0};
                size_t len;

                ck_assert(close && m && m < close);
                m += strlen("\"mode\": \"");
                len = strcspn(m, "\"");
                ck_assert_uint_lt(len, sizeof(mode));
                memcpy(mode, m, len);
                ck_assert_int_eq(zr_sampler_mode_from_name(mode, &out[count].mode), 0);
                out[count].n = strtoull(strstr(p, "\"n\": ") + strlen("\"n\": "), NULL, 10);
                out[count].weight = (uint32_t)strtoul(strstr(p, "\"weight\": ") + strlen("\"weight\": "), NULL, 10);
                count++;
                p = close;
                if (close[1] == ']')
                        break;
        }
        return count;
}

/* Reads $ZR_VECTORS/name line by line into `line`, calling check(line) for each;
 * returns how many lines. */
static unsigned vectors_each(const char *name, void (*check)(const char *line, unsigned lineno)) {
        const char *dir = getenv("ZR_VECTORS");
        char path[4096], *line = malloc(VECTORS_LINE_MAX);
        unsigned lines = 0;
        FILE *f;

        ck_assert_ptr_nonnull(dir);
        ck_assert_ptr_nonnull(line);
        snprintf(path, sizeof(path), "%s/%s", dir, name);
        f = fopen(path, "re");
        ck_assert_msg(f, "cannot open %s", path);
        while (fgets(line, VECTORS_LINE_MAX, f)) {
                ck_assert_msg(strchr(line, '\n'), "%s: line %u too long", name, lines + 1);
                check(line, ++lines);
        }
        ck_assert(!ferror(f));
        fclose(f);
        free(line);
        return lines;
}

static zr_mixture vectors_m;

/* What the mixture file covered. */
static struct {
        unsigned modes[_ZR_SAMPLER_MODE_MAX], sharded, g1, huge_step, last_step, wide_seed, huge_n, many;
        unsigned tiny, repeating;
} mix_cover;

static void vectors_check_mixture(const char *line, unsigned lineno) {
        static uint64_t want_src[VECTORS_MAX], want_idx[VECTORS_MAX], idx[VECTORS_MAX];
        static uint32_t src[VECTORS_MAX];
        zr_mixture_source s[VECTORS_MAX];
        uint64_t want_before[VECTORS_MAX], want_count[VECTORS_MAX], before[VECTORS_MAX], count[VECTORS_MAX];
        uint64_t seed = vectors_field(line, "seed"), step = vectors_field(line, "step");
        uint64_t b = vectors_field(line, "batch_size");
        uint32_t rank = (uint32_t)vectors_field(line, "rank"), w = (uint32_t)vectors_field(line, "world_size");
        uint32_t k = vectors_sources(line, s, VECTORS_MAX);
        zr_error err = {0};

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

typedef struct vectors_hits {
        zr_sampler_hit h[VECTORS_MAX];
        size_t count;
} vectors_hits;

static int vectors_on_hits(void *userdata, const zr_sampler_hit *hits, size_t count) {
        vectors_hits *t = userdata;

        for (size_t i = 0; i < count; i++) {
                ck_assert_uint_lt(t->count, VECTORS_MAX);
                t->h[t->count++] = hits[i];
        }
        return 0;
}

static void vectors_check_inverse(const char *line, unsigned lineno) {
        static uint64_t want[3 * VECTORS_MAX];
        static vectors_hits got;
        zr_steps_of_ops ops = { .on_hits = vectors_on_hits, .userdata = &got };
        uint64_t record = vectors_field(line, "record"), start = vectors_field(line, "start");
        uint64_t stop = vectors_field(line, "stop"), b = vectors_field(line, "batch_size");
        uint64_t seed = vectors_field(line, "seed");
        uint32_t w = (uint32_t)vectors_field(line, "world_size");
        size_t nwant = vectors_list(line, "hits", want, 3 * VECTORS_MAX);
        zr_error err = {0};

        got.count = 0;
        if (vectors_has(line, "sources")) {
                zr_mixture_source s[VECTORS_MAX];
                uint32_t k = vectors_sources(line, s, VECTORS_MAX), source = (uint32_t)vectors_field(line, "source");

                ck_assert_int_eq(zr_mixture_init(&vectors_m, s, k, b, w, seed, &err), 0);
                ck_assert_msg(zr_mixture_steps_of(&vectors_m, source, record, start, stop, &ops, &err) == 0,
                              "line %u: %s", lineno, err.message);
                inv_cover.mix_modes[s[source].mode]++;
        } else {
                zr_sampler_params p = { .n = vectors_field(line, "n"), .batch_size = b, .seed = seed,
                                        .world_size = w };
                const char *m = strstr(line, "\"mode\": \"") + strlen("\"mode\": \"");
                char mode[16] = {0};

                memcpy(mode, m, strcspn(m, "\""));
                ck_assert_int_eq(zr_sampler_mode_from_name(mode, &p.mode), 0);
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
        unsigned lines = vectors_each("sampler-mixture.jsonl", vectors_check_mixture);

        ck_assert_uint_ge(lines, 30);
        for (int m = 0; m < _ZR_SAMPLER_MODE_MAX; m++)
                ck_assert_uint_ge(mix_cover.modes[m], 5);
        ck_assert(mix_cover.sharded && mix_cover.g1 && mix_cover.huge_step && mix_cover.last_step &&
                  mix_cover.wide_seed && mix_cover.huge_n && mix_cover.many && mix_cover.tiny &&
                  mix_cover.repeating);
}
END_TEST

START_TEST(test_inverse_vectors) {
        unsigned lines = vectors_each("sampler-inverse.jsonl", vectors_check_inverse);

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
