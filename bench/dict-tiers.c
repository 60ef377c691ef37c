/* dict-tiers.c: what each dictionary tier costs and buys, for docs/DATASETS.md.
 *
 * For two data sets (smooth image tiles: gradient + noise, uint8; token
 * sequences: int32 ids drawn from a Zipf-like law) at record sizes 1 KiB,
 * 16 KiB and 256 KiB, and for each tier: the dictionary's size, its training time
 * (zr_dict_train on a corpus larger than the biggest sample budget), the
 * compression ratio of a zstd_dict store holding the first records of the corpus,
 * and that store's random-batch gather throughput after warm-up, per wall second
 * (best batch) and per CPU second of the whole process (every batch, warm-up
 * included: what a gather costs, whatever the neighbours do). Rows for a raw
 * store (the same-run limit: a memcpy gather) and a plain zstd store (the
 * baseline a dictionary has to beat) come first. All data is deterministic.
 *
 *     dict-tiers [--quick] [--sweep | --levels] [--dir DIR]
 *
 * --quick shrinks the corpus and the stores to finish in seconds (a smoke run);
 * --sweep replaces the three tiers by a ladder of (dictionary, sample budget)
 * sizes, 8 KiB / 1 MiB up to 512 KiB / 48 MiB, the measurement the tiers were
 * picked from; --levels writes the default tier's (balanced) store and a plain
 * zstd store at each compression level of `levels` below, the measurement the
 * default level was picked from (docs/DATASETS.md, "Levels"); append MiB/cpu-s
 * is the append's bytes per CPU second of the whole process (the pool's
 * compression, what other tenants do not inflate);
 * the default takes about a minute or two on 2 cores. Stores live in a scratch
 * directory under DIR (default $TMPDIR or /tmp), removed at the end.
 */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "dataset/dicttrain.h"
#include "store/store.h"
#include "util/pool.h"
#include "workload.h"

/* Bytes of records generated per (data set, record size): above the largest
 * tier's sample budget (32 MiB), so the budget and not the corpus bounds it. */
#define CORPUS_BYTES ((size_t)48 << 20)
/* Bytes of records written to each store: enough for several batches of random
 * gathers, small enough that level-19 compression stays in budget. */
#define STORE_BYTES ((size_t)8 << 20)
/* Bytes per gather batch: a loader batch of small records, cache-sized. */
#define BATCH_BYTES ((size_t)4 << 20)
#define WARM_BATCHES 2
#define TIMED_BATCHES 7

/* --sweep: dictionary sizes, each trained on a budget of 128 times its size
 * (zstd's advice is about 100 times), capped by the corpus. */
static const zr_dict_tier_spec sweep[] = {
        { "8K/1M", 8 << 10, 1 << 20 },       { "16K/2M", 16 << 10, 2 << 20 },
        { "32K/4M", 32 << 10, 4 << 20 },     { "64K/8M", 64 << 10, 8 << 20 },
        { "128K/16M", 128 << 10, 16 << 20 }, { "256K/32M", 256 << 10, 32 << 20 },
        { "512K/48M", 512 << 10, 48 << 20 },
};

/* --levels: the compression levels written at (zstd's scale; 0 is the codec's
 * default, which is one of these). */
static const int levels[] = { 1, 2, 3, 4, 6, 9, 19 };
#define NLEVELS (sizeof(levels) / sizeof(levels[0]))

typedef struct config {
        size_t corpus_bytes, store_bytes, batch_bytes, timed;
        int sweep, by_level;
        const char *dir;
} config;

/* ---- data ---- */

#define VOCAB 50257      /* a GPT-2 sized vocabulary */

/* A Zipf-like (1/x density) draw from [0, range): range^u - 1. */
static uint32_t zipf(uint64_t *st, uint32_t range) {
        double u = (double)(workload_next(st) >> 11) / 9007199254740992.0;
        uint32_t v = (uint32_t)exp(u * log((double)range)) - 1;
        return v < range ? v : range - 1;
}

/* Record `id` of the token set: n int32 ids, each drawn independently from a
 * Zipf-like law over the vocabulary (no phrase structure: a dictionary can only
 * learn which ids, so which byte patterns, are common). */
static void make_tokens(int32_t *dst, size_t n, uint64_t id) {
        uint64_t st = workload_mix(0x70c3, id);

        for (size_t i = 0; i < n; i++)
                dst[i] = (int32_t)zipf(&st, VOCAB);
}

static void make_record(int kind, uint8_t *dst, size_t bytes, uint64_t id) {
        if (kind == 0) {
                size_t side = 1;
                while (side * side < bytes)
                        side *= 2;
                workload_image(dst, side, bytes / side, 0x1a6e, id);
        } else {
                make_tokens((int32_t *)(void *)dst, bytes / 4, id);
        }
}

/* ---- scratch stores ---- */

static int rm_one(const char *p, const struct stat *st, int flag, struct FTW *f) {
        (void)st, (void)flag, (void)f;
        return remove(p);
}

typedef struct measured {
        double ratio, gather_mibs, gather_cpu_mibs, append_s, append_cpu_s;
} measured;

/* CPU seconds of every thread of the process: a gather's cost that the other
 * tenants of a shared machine do not inflate the way they inflate wall time. */
static double process_cpu_s(void) {
        struct timespec ts;
        clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
        return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

typedef struct gather_arg {
        zr_store *s;
        uint64_t n, batch, record;
        uint64_t *idx;
        uint8_t *dst;
} gather_arg;

static int gather_step(void *arg, uint64_t batch) {
        gather_arg *g = arg;
        workload_draw(g->idx, g->batch, g->n, 42, batch);
        return zr_store_gather(g->s, g->idx, g->batch, g->dst, g->batch * g->record, NULL, NULL);
}

/* Builds a store of `codec` (with dict) from the first records of the corpus,
 * measures its ratio and gather throughput, removes it. */
static int measure_store(const config *c, zr_pool *pool, enum zr_codec codec, int level,
                         const void *dict, size_t dict_len, const uint8_t *corpus, size_t record,
                         measured *ret) {
        char path[512];
        uint64_t n = c->store_bytes / record, *lens = NULL;
        zr_store_options opts = { .pool = pool };
        zr_store *s = NULL;
        zr_error err = {0};
        zr_stats st;
        gather_arg g = {0};
        double secs[TIMED_BATCHES];
        int fd = -1, r;

        snprintf(path, sizeof(path), "%s/zr-dict-tiers-XXXXXX", c->dir);
        if (!mkdtemp(path))
                return -errno;
        fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (fd < 0) {
                r = -errno;
                goto out;
        }
        lens = malloc(n * sizeof(uint64_t));
        g.batch = c->batch_bytes / record < 8 ? 8 : c->batch_bytes / record;
        g.idx = malloc(g.batch * sizeof(uint64_t));
        g.dst = malloc(g.batch * record);
        if (!lens || !g.idx || !g.dst) {
                r = -ENOMEM;
                goto out;
        }
        for (uint64_t i = 0; i < n; i++)
                lens[i] = record;
        r = zr_store_create(fd, codec, dict, dict_len, &opts, &s, &err);
        if (r < 0)
                goto out;
        uint64_t t0 = workload_now_ns();
        double acpu0 = process_cpu_s();
        r = zr_store_append_level(s, level, corpus, lens, n, NULL, &err);
        if (r < 0)
                goto out;
        ret->append_s = (double)(workload_now_ns() - t0) / 1e9;
        ret->append_cpu_s = process_cpu_s() - acpu0;
        r = zr_store_stats(s, &st, &err);
        if (r < 0)
                goto out;
        ret->ratio = (double)st.logic_bytes / (double)st.live_bytes;
        g.s = s;
        g.n = n;
        g.record = record;
        double cpu0 = process_cpu_s();
        r = workload_time(gather_step, &g, WARM_BATCHES, c->timed, secs);
        if (r < 0)
                goto out;
        ret->gather_cpu_mibs = (double)((WARM_BATCHES + c->timed) * g.batch * record) /
                               (process_cpu_s() - cpu0) / (1024.0 * 1024.0);
        /* The best batch: on a shared 2-core machine the median mostly measures
         * the neighbours; the best is what the path can do. */
        ret->gather_mibs = (double)(g.batch * record) / workload_min(secs, c->timed) /
                           (1024.0 * 1024.0);
out:
        if (r < 0)
                fprintf(stderr, "dict-tiers: store (%s): %s\n", zr_error_code_name(r),
                        err.message);
        zr_store_close(s, NULL);
        if (fd >= 0)
                close(fd);
        nftw(path, rm_one, 16, FTW_DEPTH | FTW_PHYS);
        free(lens);
        free(g.idx);
        free(g.dst);
        return r;
}

static void row(const config *c, const char *data, size_t record, const char *codec,
                size_t dict_len, double train_s, const measured *m) {
        char dict[32], train[32];
        if (dict_len)
                snprintf(dict, sizeof(dict), "%zu", dict_len / 1024);
        else
                snprintf(dict, sizeof(dict), "-");
        if (train_s >= 0)
                snprintf(train, sizeof(train), "%.2f", train_s);
        else
                snprintf(train, sizeof(train), "-");
        printf("| %-6s | %4zu KiB | %-14s | %8s | %7s | %6.2fx | %12.0f | %16.0f | %12.1f | %16.1f |\n",
               data, record / 1024, codec, dict, train, m->ratio, m->gather_mibs,
               m->gather_cpu_mibs,
               m->append_s > 0 ? (double)c->store_bytes / m->append_s / 1048576.0 : 0.0,
               m->append_cpu_s > 0 ? (double)c->store_bytes / m->append_cpu_s / 1048576.0 : 0.0);
        fflush(stdout);
}

int main(int argc, char **argv) {
        static const size_t records[3] = { 1024, 16 * 1024, 256 * 1024 };
        static const char *const kinds[2] = { "tiles", "tokens" };
        config c = { CORPUS_BYTES, STORE_BYTES, BATCH_BYTES, TIMED_BATCHES, 0, 0, NULL };
        zr_pool *pool = NULL;
        int r;

        for (int i = 1; i < argc; i++) {
                if (strcmp(argv[i], "--quick") == 0) {
                        c.corpus_bytes = 4 << 20;
                        c.store_bytes = 1 << 20;
                        c.batch_bytes = 256 << 10;
                        c.timed = 3;
                } else if (strcmp(argv[i], "--sweep") == 0) {
                        c.sweep = 1;
                } else if (strcmp(argv[i], "--levels") == 0) {
                        c.by_level = 1;
                } else if (strcmp(argv[i], "--dir") == 0 && i + 1 < argc) {
                        c.dir = argv[++i];
                } else {
                        fprintf(stderr, "usage: dict-tiers [--quick] [--sweep | --levels] "
                                        "[--dir DIR]\n");
                        return 2;
                }
        }
        if (!c.dir)
                c.dir = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
        r = zr_pool_new(0, &pool);
        if (r < 0) {
                fprintf(stderr, "dict-tiers: pool: %s\n", strerror(-r));
                return 1;
        }
        printf("dict-tiers%s: corpus %zu MiB, store %zu MiB, batch %zu KiB, %zu pool threads; "
               "append MiB/s is compression on the pool\n\n", c.timed == 3 ? " --quick" : "",
               c.corpus_bytes >> 20, c.store_bytes >> 20, c.batch_bytes >> 10,
               zr_pool_threads(pool));
        printf("| data   | record   | codec / tier   | dict KiB | train s | ratio   | gather MiB/s | gather MiB/cpu-s | append MiB/s | append MiB/cpu-s |\n");
        printf("|--------|----------|----------------|----------|---------|---------|--------------|------------------|--------------|------------------|\n");

        for (int kind = 0; kind < 2; kind++) {
                for (int rs = 0; rs < 3; rs++) {
                        size_t record = records[rs], n = c.corpus_bytes / record;
                        uint8_t *corpus = malloc(n * record);
                        measured m;
                        if (!corpus) {
                                r = -ENOMEM;
                                goto out;
                        }
                        for (size_t i = 0; i < n; i++)
                                make_record(kind, corpus + i * record, record, i);
                        /* the same-run limit, then the baseline */
                        if (measure_store(&c, pool, ZR_CODEC_RAW, 0, NULL, 0, corpus, record,
                                          &m) == 0)
                                row(&c, kinds[kind], record, "raw (limit)", 0, -1, &m);
                        for (size_t l = 0; l < (c.by_level ? NLEVELS : 1); l++) {
                                int level = c.by_level ? levels[l] : 0;
                                char name[32];
                                if (level)
                                        snprintf(name, sizeof(name), "zstd -%d", level);
                                else
                                        snprintf(name, sizeof(name), "zstd (no dict)");
                                if (measure_store(&c, pool, ZR_CODEC_ZSTD, level, NULL, 0, corpus,
                                                  record, &m) == 0)
                                        row(&c, kinds[kind], record, name, 0, -1, &m);
                        }
                        size_t nspecs = c.sweep ? sizeof(sweep) / sizeof(sweep[0])
                                        : c.by_level ? 1 : ZR_DICT_TIER_COUNT;
                        for (size_t t = 0; t < nspecs; t++) {
                                const zr_dict_tier_spec *spec = c.sweep ? &sweep[t]
                                        : c.by_level ? zr_dict_tier_get(ZR_DICT_TIER_BALANCED)
                                        : zr_dict_tier_get((enum zr_dict_tier)t);
                                void *dict = NULL;
                                size_t dict_len = 0;
                                zr_error err = {0};
                                char name[32];
                                uint64_t t0 = workload_now_ns();
                                r = zr_dict_train_dense(corpus, record, n, spec, &dict, &dict_len,
                                                        &err);
                                double train_s = (double)(workload_now_ns() - t0) / 1e9;
                                if (r < 0) {
                                        fprintf(stderr, "dict-tiers: train %s: %s\n", spec->name,
                                                err.message);
                                        continue;
                                }
                                for (size_t l = 0; l < (c.by_level ? NLEVELS : 1); l++) {
                                        int level = c.by_level ? levels[l] : 0;
                                        if (level)
                                                snprintf(name, sizeof(name), "%s -%d", spec->name,
                                                         level);
                                        else
                                                snprintf(name, sizeof(name), "dict %s",
                                                         spec->name);
                                        if (measure_store(&c, pool, ZR_CODEC_ZSTD_DICT, level, dict,
                                                          dict_len, corpus, record, &m) == 0)
                                                row(&c, kinds[kind], record, name, dict_len,
                                                    l ? -1 : train_s, &m);
                                }
                                free(dict);
                        }
                        free(corpus);
                }
        }
        r = 0;
out:
        zr_pool_free(pool);
        return r < 0 ? 1 : 0;
}
