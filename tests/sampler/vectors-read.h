/* vectors-read.h: the sampler vectors' tests read the JSON lines of proto/vectors (from
 * $ZR_VECTORS, set by meson) line by line and take fields, lists, modes and
 * sources out of each line, asserting (libcheck) that they are there and
 * well formed. Header-only (static inline functions). */
#ifndef ZR_TESTS_SAMPLER_VECTORS_READ_H
#define ZR_TESTS_SAMPLER_VECTORS_READ_H

#include <check.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sampler/mixture.h"

#define VECTORS_LINE_MAX 16384

/* The unsigned integer after "key": in line, or abort. A top-level "n" comes
 * before the line's "sources" list, so a source's "n" is never taken for it. */
static inline uint64_t vectors_field(const char *line, const char *key) {
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

static inline int vectors_has(const char *line, const char *key) {
        char pat[64];

        snprintf(pat, sizeof(pat), "\"%s\": ", key);
        return strstr(line, pat) != NULL;
}

/* The integers of the list after "key": [, nested lists flattened; returns how many. */
static inline size_t vectors_list(const char *line, const char *key, uint64_t *out, size_t max) {
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

/* The sampler mode named at p, `"mode": "NAME"`. */
static inline enum zr_sampler_mode vectors_mode_at(const char *p) {
        const char *m = strstr(p, "\"mode\": \"");
        enum zr_sampler_mode mode;
        char name[16] = {0};
        size_t len;

        ck_assert_ptr_nonnull(m);
        m += strlen("\"mode\": \"");
        len = strcspn(m, "\"");
        ck_assert_uint_lt(len, sizeof(name));
        memcpy(name, m, len);
        ck_assert_int_eq(zr_sampler_mode_from_name(name, &mode), 0);
        return mode;
}

/* The line's sources: [{"mode": "...", "n": N, "weight": W}, ...]; returns how many. */
static inline uint32_t vectors_sources(const char *line, zr_mixture_source *out, uint32_t max) {
        const char *p = strstr(line, "\"sources\": [");
        uint32_t count = 0;

        ck_assert_ptr_nonnull(p);
        while ((p = strchr(p, '{')) && count < max) {
                const char *close = strchr(p, '}'), *m = strstr(p, "\"mode\": \"");

                ck_assert(close && m && m < close);
                out[count].mode = vectors_mode_at(p);
                out[count].n = strtoull(strstr(p, "\"n\": ") + strlen("\"n\": "), NULL, 10);
                out[count].weight = (uint32_t)strtoul(strstr(p, "\"weight\": ") + strlen("\"weight\": "), NULL, 10);
                count++;
                p = close;
                if (close[1] == ']')
                        break;
        }
        return count;
}

/* Reads $ZR_VECTORS/name line by line, calling check(line, lineno, arg) for
 * each; returns how many lines. */
static inline unsigned vectors_each(const char *name,
                                    void (*check)(const char *line, unsigned lineno, void *arg),
                                    void *arg) {
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
                check(line, ++lines, arg);
        }
        ck_assert(!ferror(f));
        fclose(f);
        free(line);
        return lines;
}

#endif
