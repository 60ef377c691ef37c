/* sampler-vectors.c: writes proto/vectors/sampler.jsonl, the sampler outputs every
 * client must reproduce.
 *
 * One JSON object per line: the parameters (mode, n, batch_size, seed, step, rank,
 * world_size, all integers exact, some above 2^53) and "indices", the batch the
 * engine gives for them. The table covers n = 1, n < batch_size, n not a multiple
 * of the batch, world_size > 1 (every rank), huge steps (10^12, 2^62, 2^64 - 1),
 * seeds >= 2^32, n around 2^32 and above 2^63, and cyclic cycle boundaries.
 * Combinations a mode refuses (a cyclic mode with a global batch > n) are left out.
 * The modes are those named on the command line, by default sequential, iid and
 * cyclic; cyclic-lx157's table, ranks included, is a file of its own, so that a
 * client that knows the first three can read sampler.jsonl whole.
 * (proto/vectors/loaderx-1.5.7.jsonl, the cyclic-lx157 and sequential batches of
 * loaderx 1.5.7 itself, comes from proto/vectors/lx157_vectors.py instead.)
 *
 *     sampler-vectors > proto/vectors/sampler.jsonl
 *     sampler-vectors cyclic-lx157 > proto/vectors/sampler-cyclic-lx157.jsonl
 *
 * test-sampler-vectors checks the checked-in file against the engine.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include "sampler/sampler.h"
#include "vectors.h"

#define VECTORS_MAX_BATCH 128

typedef struct vector_case {
        uint64_t n, batch_size, seed, step;
        uint32_t world_size; /* every rank is written */
} vector_case;

#define P63 (UINT64_C(1) << 63)

static const vector_case vector_cases[] = {
        /* n = 1 and n = 2 */
        { 1, 1, 0, 0, 1 },
        { 1, 1, 7, E12, 1 },
        { 1, 4, 3, 5, 1 },              /* n < B (not cyclic) */
        { 2, 1, 1, 0, 1 },
        { 2, 2, 1, 3, 1 },
        { 2, 2, P32 + 1, E12, 1 },
        /* small n, n < B, n not a multiple of B; cyclic crosses cycles at m = 3 */
        { 3, 8, 11, 2, 1 },
        { 10, 3, 42, 0, 1 },
        { 10, 3, 42, 1, 1 },
        { 10, 3, 42, 2, 1 },
        { 10, 3, 42, 3, 1 },
        { 10, 3, 42, 4, 1 },
        { 10, 3, 42, 5, 1 },
        /* tails around the 64-lane blocks */
        { 1000, 70, 5, 0, 1 },
        { 1000, 64, P32, 1, 1 },
        { 1000, 65, UINT64_MAX, 14, 1 },
        /* sharding */
        { 1000, 16, 9, 5, 4 },
        { 97, 5, P32 + 9, 3, 3 },
        { 1000000, 8, 0x5eed, 123456, 2 },
        /* huge steps */
        { 1000003, 32, 1, E12, 1 },
        { 1000003, 32, P32 * 3 + 1, P62, 2 },
        { 1000003, 32, 2, UINT64_MAX, 1 },
        { 1000, 100, 77, P62 + 1, 1 },
        /* index spaces: power of two, 2^32 boundary, wide and huge n */
        { 1048576, 100, 6, 10, 1 },
        { P32 - 1, 16, 3, 1, 1 },
        { P32, 16, 3, 1, 1 },
        { P32 + 1, 16, 3, E12, 1 },
        { P63 + 5, 16, P32 + 4, 2, 1 },
        { UINT64_MAX, 16, 8, P62, 1 },
};

int main(int argc, char **argv) {
        static const char *const defaults[] = { "sequential", "iid", "cyclic" };
        const char *const *names = argc > 1 ? (const char *const *)argv + 1 : defaults;
        size_t nmodes = argc > 1 ? (size_t)argc - 1 : 3;
        enum zr_sampler_mode vector_modes[_ZR_SAMPLER_MODE_MAX];
        uint64_t idx[VECTORS_MAX_BATCH];

        if (nmodes > _ZR_SAMPLER_MODE_MAX) {
                fprintf(stderr, "usage: %s [MODE...]\n", argv[0]);
                return EXIT_FAILURE;
        }
        for (size_t m = 0; m < nmodes; m++)
                if (zr_sampler_mode_from_name(names[m], &vector_modes[m]) < 0) {
                        fprintf(stderr, "%s: no sampler \"%s\"\n", argv[0], names[m]);
                        return EXIT_FAILURE;
                }
        for (size_t m = 0; m < nmodes; m++)
                for (size_t i = 0; i < sizeof(vector_cases) / sizeof(*vector_cases); i++)
                        for (uint32_t r = 0; r < vector_cases[i].world_size; r++) {
                                const vector_case *c = &vector_cases[i];
                                zr_sampler_params p = {
                                        .mode = vector_modes[m], .n = c->n,
                                        .batch_size = c->batch_size, .seed = c->seed,
                                        .step = c->step, .rank = r, .world_size = c->world_size,
                                };
                                zr_error err = {0};

                                if (c->batch_size > VECTORS_MAX_BATCH) {
                                        fprintf(stderr, "case %zu: batch too large\n", i);
                                        return EXIT_FAILURE;
                                }
                                if (zr_sampler_check(&p, &err) < 0) {
                                        if (p.mode == ZR_SAMPLER_CYCLIC ||
                                            p.mode == ZR_SAMPLER_CYCLIC_LX157)
                                                continue; /* global batch > n: refused by design */
                                        fprintf(stderr, "case %zu: %s\n", i, err.message);
                                        return EXIT_FAILURE;
                                }
                                if (zr_sampler_indices(&p, idx, &err) < 0) {
                                        fprintf(stderr, "case %zu: %s\n", i, err.message);
                                        return EXIT_FAILURE;
                                }
                                printf("{\"mode\": \"%s\", \"n\": %" PRIu64 ", \"batch_size\": %" PRIu64
                                       ", \"seed\": %" PRIu64 ", \"step\": %" PRIu64 ", \"rank\": %" PRIu32
                                       ", \"world_size\": %" PRIu32,
                                       zr_sampler_mode_name(p.mode), p.n, p.batch_size, p.seed, p.step,
                                       p.rank, p.world_size);
                                vectors_print_u64s("indices", idx, p.batch_size);
                                printf("}\n");
                        }
        return fflush(stdout) == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
