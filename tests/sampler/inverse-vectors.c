/* inverse-vectors.c: writes proto/vectors/sampler-inverse.jsonl, the answers to
 * "which steps saw a record" every client must reproduce.
 *
 * One JSON object per line: a sampler (mode, n, batch_size, seed, world_size) or
 * a mixture (seed, batch_size, world_size, sources, and "source", the source
 * asked about), the record, the steps [start, stop), and "hits": every
 * [step, rank, position] whose batch holds the record, ascending. Integers are
 * exact. The table covers every mode with several records, n below the global
 * batch (a record several times per step) for sequential and iid, cycles that
 * drop the record, ranges that cut cycles, huge steps and seeds, and mixtures of
 * each source mode, tiny and repeating sources included.
 *
 *     inverse-vectors > proto/vectors/sampler-inverse.jsonl
 *
 * test-mixture-vectors checks the checked-in file against the engine.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include "sampler/inverse.h"
#include "vectors.h"

#define VECTORS_MAX_SOURCES 4

typedef struct plain_case {
        enum zr_sampler_mode mode;
        uint64_t n, batch_size, seed;
        uint32_t world_size;
        uint64_t record, start, stop;
} plain_case;

typedef struct mix_case {
        uint64_t seed, batch_size;
        uint32_t world_size, count;
        zr_mixture_source sources[VECTORS_MAX_SOURCES];
        uint32_t source;
        uint64_t record, start, stop;
} mix_case;

static const plain_case plain_cases[] = {
        { SEQ, 10, 3, 0, 2, 7, 0, 20 },
        { SEQ, 3, 4, 0, 1, 2, 5, 12 },                  /* n < G: several per step */
        { SEQ, 1000003, 64, 0, 4, 999999, P62, P62 + 40000 },
        { IID, 50, 8, 42, 2, 17, 0, 30 },
        { IID, 3, 4, 7, 2, 1, 0, 6 },                   /* n < G */
        { IID, 10, 32, P32 + 1, 2, 9, P62, P62 + 4 },
        { CYC, 10, 3, 42, 1, 7, 0, 30 },
        { CYC, 10, 3, 42, 1, 4, 0, 30 },
        { CYC, 1000, 16, 9, 4, 123, 0, 300 },
        { CYC, 1000, 16, 9, 4, 999, 17, 283 },          /* cut cycles at both ends */
        { CYC, 1000003, 32, 1, 1, 500000, E12, E12 + 200000 },
        { CYC, 97, 5, UINT64_MAX, 3, 0, UINT64_MAX - 100, UINT64_MAX },
        { LX, 10, 3, 42, 1, 7, 0, 30 },
        { LX, 1000, 16, 9, 4, 123, 0, 300 },
        { LX, (UINT64_C(1) << 20) + 1, 64, 5, 2, 31337, P62, P62 + 60000 },
};

static const mix_case mix_cases[] = {
        { 42, 16, 1, 3, { { CYC, 1000, 70 }, { IID, 300, 20 }, { SEQ, 50, 10 } }, 0, 5, 0, 2000 },
        { 42, 16, 1, 3, { { CYC, 1000, 70 }, { IID, 300, 20 }, { SEQ, 50, 10 } }, 1, 299, 0, 1000 },
        { 42, 16, 1, 3, { { CYC, 1000, 70 }, { IID, 300, 20 }, { SEQ, 50, 10 } }, 2, 33, 0, 400 },
        { 42, 8, 2, 3, { { CYC, 1000, 70 }, { IID, 300, 20 }, { SEQ, 50, 10 } }, 0, 5, 100, 1500 },
        { 3, 4, 1, 3, { { CYC, 100, 1 }, { CYC, 100, 40 }, { IID, 100, 59 } }, 0, 42, 0, 12000 },
        { 9, 64, 1, 2, { { CYC, 3, 1 }, { LX, 5, 1 } }, 0, 2, 0, 3 },  /* several per step */
        { 9, 64, 1, 2, { { CYC, 3, 1 }, { LX, 5, 1 } }, 1, 4, 7, 9 },
        { 7, 5, 3, 2, { { LX, 97, 2 }, { CYC, 64, 1 } }, 0, 96, 0, 120 },
        { P32 * 3 + 1, 32, 1, 2, { { CYC, 1000003, 3 }, { IID, 1000003, 1 } }, 0, 77, E12, E12 + 100000 },
        { 6, 12, 1, 2, { { CYC, 1000, 1 }, { SEQ, 1000, 2 } }, 1, 999, UINT64_MAX / 12 - 300, UINT64_MAX },
};

static void print_hits(const vectors_hits *l) {
        printf("\"hits\": [");
        for (size_t i = 0; i < l->count; i++)
                printf("%s[%" PRIu64 ", %" PRIu32 ", %" PRIu64 "]", i ? ", " : "", l->h[i].step,
                       l->h[i].rank, l->h[i].position);
        printf("]}\n");
}

int main(void) {
        static vectors_hits l;
        static zr_mixture m;
        zr_steps_of_ops ops = { .on_hits = vectors_on_hits, .userdata = &l };

        for (size_t i = 0; i < sizeof(plain_cases) / sizeof(*plain_cases); i++) {
                const plain_case *c = &plain_cases[i];
                zr_sampler_params p = { .mode = c->mode, .n = c->n, .batch_size = c->batch_size,
                                        .seed = c->seed, .world_size = c->world_size };
                zr_error err = {0};

                l.count = 0;
                if (zr_sampler_steps_of(&p, c->record, c->start, c->stop, &ops, &err) != 0) {
                        fprintf(stderr, "plain case %zu: %s\n", i, err.message[0] ? err.message : "too many hits");
                        return EXIT_FAILURE;
                }
                printf("{\"mode\": \"%s\", \"n\": %" PRIu64 ", \"batch_size\": %" PRIu64 ", \"seed\": %" PRIu64
                       ", \"world_size\": %" PRIu32 ", \"record\": %" PRIu64 ", \"start\": %" PRIu64
                       ", \"stop\": %" PRIu64 ", ",
                       zr_sampler_mode_name(c->mode), c->n, c->batch_size, c->seed, c->world_size, c->record,
                       c->start, c->stop);
                print_hits(&l);
        }
        for (size_t i = 0; i < sizeof(mix_cases) / sizeof(*mix_cases); i++) {
                const mix_case *c = &mix_cases[i];
                zr_error err = {0};

                l.count = 0;
                if (zr_mixture_init(&m, c->sources, c->count, c->batch_size, c->world_size, c->seed, &err) < 0 ||
                    zr_mixture_steps_of(&m, c->source, c->record, c->start, c->stop, &ops, &err) != 0) {
                        fprintf(stderr, "mixture case %zu: %s\n", i, err.message[0] ? err.message : "too many hits");
                        return EXIT_FAILURE;
                }
                printf("{\"seed\": %" PRIu64 ", \"batch_size\": %" PRIu64 ", \"world_size\": %" PRIu32
                       ", ",
                       c->seed, c->batch_size, c->world_size);
                vectors_print_sources(c->sources, c->count);
                printf(", \"source\": %" PRIu32 ", \"record\": %" PRIu64 ", \"start\": %" PRIu64
                       ", \"stop\": %" PRIu64 ", ",
                       c->source, c->record, c->start, c->stop);
                print_hits(&l);
        }
        return fflush(stdout) == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
