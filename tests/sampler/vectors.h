/* vectors.h: what the sampler vectors' generators (sampler-vectors,
 * mixture-vectors, inverse-vectors) and their tests share: the shorthands of
 * the case tables, a list of the hits of a steps_of() walk, and the JSON
 * lists a generator writes. Header-only (static inline functions). */
#ifndef ZR_TESTS_SAMPLER_VECTORS_H
#define ZR_TESTS_SAMPLER_VECTORS_H

#include <inttypes.h>
#include <stdio.h>

#include "sampler/inverse.h"

#define SEQ ZR_SAMPLER_SEQUENTIAL
#define IID ZR_SAMPLER_IID
#define CYC ZR_SAMPLER_CYCLIC
#define LX  ZR_SAMPLER_CYCLIC_LX157
#define E12 UINT64_C(1000000000000)
#define P32 (UINT64_C(1) << 32)
#define P62 (UINT64_C(1) << 62)

#define VECTORS_MAX_HITS 256

/* The hits of one walk, in the order the walk gives them. */
typedef struct vectors_hits {
        zr_sampler_hit h[VECTORS_MAX_HITS];
        size_t count;
} vectors_hits;

/* steps_of()'s on_hits: appends to the vectors_hits at userdata; -1 (the walk
 * stops with an error) past VECTORS_MAX_HITS, a case the tables must not hold. */
static inline int vectors_on_hits(void *userdata, const zr_sampler_hit *hits, size_t count) {
        vectors_hits *t = userdata;

        for (size_t i = 0; i < count; i++) {
                if (t->count == VECTORS_MAX_HITS)
                        return -1;
                t->h[t->count++] = hits[i];
        }
        return 0;
}

/* Writes `, "key": [v0, v1, ...]`: a list after the first field of a line. */
static inline void vectors_print_u64s(const char *key, const uint64_t *v, size_t n) {
        printf(", \"%s\": [", key);
        for (size_t i = 0; i < n; i++)
                printf("%s%" PRIu64, i ? ", " : "", v[i]);
        printf("]");
}

/* Writes `"sources": [{"mode": ..., "n": ..., "weight": ...}, ...]`. */
static inline void vectors_print_sources(const zr_mixture_source *s, uint32_t count) {
        printf("\"sources\": [");
        for (uint32_t k = 0; k < count; k++)
                printf("%s{\"mode\": \"%s\", \"n\": %" PRIu64 ", \"weight\": %" PRIu32 "}",
                       k ? ", " : "", zr_sampler_mode_name(s[k].mode), s[k].n, s[k].weight);
        printf("]");
}

#endif
