/* mixture-vectors.c: writes proto/vectors/sampler-mixture.jsonl, the mixture
 * batches every client must reproduce.
 *
 * One JSON object per line: the mixture (seed, step, batch_size, rank, world_size
 * and the sources, each {"mode", "n", "weight"}), then what the engine gives: each
 * source's draws before the step ("draws_before") and in it ("counts"), and the
 * rank's batch as two lists, "source" and "indices". Integers are exact (some
 * exceed 2^53). The table covers one source of each mode, the 70/20/10 mixture
 * of the issue, a source with less than one record per step, sources much smaller
 * than their share of a step (they repeat), cyclic sources across a cycle
 * boundary, cyclic-lx157 sources, every rank of world sizes 2 and 3, G = 1, equal
 * weights (the tree's ties), 12 sources with weights up to 2^32 - 1, huge steps up
 * to the last one a mixture defines, seeds up to 2^64 - 1 and n up to 2^64 - 1.
 *
 *     mixture-vectors > proto/vectors/sampler-mixture.jsonl
 *
 * test-mixture-vectors checks the checked-in file against the engine.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include "sampler/mixture.h"
#include "vectors.h"

#define VECTORS_MAX_BATCH   96
#define VECTORS_MAX_SOURCES 12

typedef struct mix_case {
        uint64_t seed, step, batch_size;
        uint32_t world_size; /* every rank is written */
        uint32_t count;
        zr_mixture_source sources[VECTORS_MAX_SOURCES];
} mix_case;

#define P63 (UINT64_C(1) << 63)
#define WMAX UINT32_MAX

/* steps are checked against the mixture's last step when written: a case past it
 * fails the generator */
static const mix_case mix_cases[] = {
        /* one source of each mode */
        { 1, 0, 4, 1, 1, { { SEQ, 10, 1 } } },
        { 1, 3, 4, 1, 1, { { IID, 10, 5 } } },
        { 1, 2, 4, 1, 1, { { CYC, 10, 3 } } },
        { 1, 2, 4, 1, 1, { { LX, 10, 3 } } },
        /* 70 % web, 20 % code, 10 % books, over several steps */
        { 42, 0, 16, 1, 3, { { CYC, 1000, 70 }, { IID, 300, 20 }, { SEQ, 50, 10 } } },
        { 42, 1, 16, 1, 3, { { CYC, 1000, 70 }, { IID, 300, 20 }, { SEQ, 50, 10 } } },
        { 42, 2, 16, 1, 3, { { CYC, 1000, 70 }, { IID, 300, 20 }, { SEQ, 50, 10 } } },
        { 42, 7, 16, 1, 3, { { CYC, 1000, 70 }, { IID, 300, 20 }, { SEQ, 50, 10 } } },
        /* sharded: every rank of W = 2 and W = 3 */
        { 42, 5, 8, 2, 3, { { CYC, 1000, 70 }, { IID, 300, 20 }, { SEQ, 50, 10 } } },
        { 7, 11, 5, 3, 2, { { LX, 97, 2 }, { CYC, 64, 1 } } },
        { 21, 4, 3, 4, 2, { { IID, 40, 3 }, { SEQ, 40, 2 } } },
        /* a source with less than a record per step, and G = 1 */
        { 3, 9, 4, 1, 3, { { CYC, 100, 1 }, { CYC, 100, 40 }, { IID, 100, 59 } } },
        { 3, 10, 4, 1, 3, { { CYC, 100, 1 }, { CYC, 100, 40 }, { IID, 100, 59 } } },
        { 5, 6, 1, 1, 3, { { SEQ, 7, 1 }, { CYC, 5, 1 }, { IID, 9, 1 } } },
        /* small sources repeat: n far below the share, cycles crossed inside a step */
        { 9, 4, 64, 1, 2, { { CYC, 3, 1 }, { LX, 5, 1 } } },
        { 9, 5, 64, 1, 2, { { CYC, 3, 1 }, { SEQ, 2, 1 } } },
        { 11, 1, 32, 1, 2, { { CYC, 20, 1 }, { LX, 21, 1 } } },
        /* equal weights: the tree's ties */
        { 13, 2, 10, 1, 4, { { SEQ, 10, 5 }, { SEQ, 10, 5 }, { SEQ, 10, 5 }, { SEQ, 10, 5 } } },
        /* many sources, extreme weights */
        { UINT64_MAX, 123456, 48, 2, 12,
          { { CYC, 1000, 1 }, { IID, 1000, 2 }, { SEQ, 1000, 3 }, { LX, 1000, 5 }, { CYC, 77, 8 },
            { IID, 5, 13 }, { CYC, 4096, 21 }, { SEQ, 3, 34 }, { LX, 999, 55 }, { CYC, 1, 89 },
            { IID, 1, 144 }, { CYC, 100000, 233 } } },
        { P32 + 5, 3, 40, 1, 3, { { CYC, 1000, WMAX }, { IID, 1000, 1 }, { SEQ, 1000, WMAX - 1 } } },
        /* huge steps, wide seeds and n */
        { P32 * 3 + 1, E12, 32, 1, 2, { { CYC, 1000003, 3 }, { IID, 1000003, 1 } } },
        { 2, P62 / 16, 16, 2, 2, { { CYC, P32 + 1, 2 }, { LX, P32 - 1, 1 } } },
        { 8, P62 + 1, 3, 1, 3, { { SEQ, UINT64_MAX, 1 }, { IID, UINT64_MAX, 1 }, { CYC, P63 + 5, 1 } } },
        { 6, UINT64_MAX / 12 - 1, 12, 1, 2, { { CYC, 1000, 1 }, { IID, 1000, 2 } } },
        { 6, UINT64_MAX - 1, 1, 1, 2, { { LX, P32, 1 }, { SEQ, 10, 3 } } },
};

int main(void) {
        static uint32_t src[VECTORS_MAX_BATCH];
        static uint64_t idx[VECTORS_MAX_BATCH];
        static zr_mixture m;

        for (size_t i = 0; i < sizeof(mix_cases) / sizeof(*mix_cases); i++) {
                const mix_case *c = &mix_cases[i];
                uint64_t before[VECTORS_MAX_SOURCES], count[VECTORS_MAX_SOURCES];
                zr_error err = {0};

                if (c->batch_size > VECTORS_MAX_BATCH ||
                    zr_mixture_init(&m, c->sources, c->count, c->batch_size, c->world_size, c->seed, &err) < 0 ||
                    zr_mixture_counts(&m, c->step, before, count, &err) < 0) {
                        fprintf(stderr, "case %zu: %s\n", i, err.message[0] ? err.message : "batch too large");
                        return EXIT_FAILURE;
                }
                for (uint32_t r = 0; r < c->world_size; r++) {
                        if (zr_mixture_batch(&m, c->step, r, src, idx, &err) < 0) {
                                fprintf(stderr, "case %zu: %s\n", i, err.message);
                                return EXIT_FAILURE;
                        }
                        printf("{\"seed\": %" PRIu64 ", \"step\": %" PRIu64 ", \"batch_size\": %" PRIu64
                               ", \"rank\": %" PRIu32 ", \"world_size\": %" PRIu32 ", ",
                               c->seed, c->step, c->batch_size, r, c->world_size);
                        vectors_print_sources(c->sources, c->count);
                        vectors_print_u64s("draws_before", before, c->count);
                        vectors_print_u64s("counts", count, c->count);
                        printf(", \"source\": [");
                        for (uint64_t j = 0; j < c->batch_size; j++)
                                printf("%s%" PRIu32, j ? ", " : "", src[j]);
                        printf("]");
                        vectors_print_u64s("indices", idx, c->batch_size);
                        printf("}\n");
                }
        }
        return fflush(stdout) == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
