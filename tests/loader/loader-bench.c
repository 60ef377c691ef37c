/* loader-bench.c: the loader engine's throughput and latency against its own
 * same-run limit, for issue 5's figures (256 KiB records, batch 256, warm page
 * cache). Not a test: it prints figures and ratios, never fails on a speed.
 *
 * The "client" is this process's main thread acting as the daemon's loop: it
 * waits on the engine's eventfd, collects BATCH events and releases each slot
 * at once (an identity consumer). What it measures:
 *
 *   limit      zr_dataset_gather_dense() of iid batches into one pre-faulted
 *              buffer, in process: the engine's own gather rate
 *   one        one loader (prefetch 4), batches/s, and its ratio to the limit
 *   4 same     4 identical loaders (a group: one gather per step, one slot
 *              for every member), aggregate batches/s, against one loader
 *   4 seeds    4 loaders with different seeds over a zstd store whose decoded
 *              records fit the cache (after one warming pass), against the same
 *              over the raw store
 *   latency    from zr_loader_new() at step 10^9 to the first batch, against the
 *              steady per-batch time of "one": with a fresh ring (its first
 *              slot is pre-faulted before the batch), and with the spare ring a
 *              freed loader of the same size left (zr_loader_engine_set_spare_bytes)
 *
 *   telemetry  "one" again with the engine's loader telemetry off
 *              (zr_loader_engine_set_telemetry()), against "one" with it on
 *              (the default, and every release reporting a wait and a take
 *              time as a client does), in turns: what the telemetry costs, in
 *              batches/s and in the process's CPU time per batch (which the
 *              load of other processes moves less); with --telemetry-only
 *              (nothing else is run), also the least time of a raw gather
 *              untimed, timed light and timed in detail, and a clock read's
 *
 * Each figure is measured in R rounds; in each round every contender runs
 * once, interleaved, so that a change of machine load hits all of them; the
 * report gives each figure's and each ratio's median and its rounds.
 *
 * Usage: loader-bench [--records N] [--batch B] [--batches T] [--rounds R]
 *                     [--threads N] [--side S] [--telemetry-only] [--dir DIR]
 * (--side: records of S x S bytes; 32 makes the 1 KiB records where a fixed
 * cost per batch weighs most)
 */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <inttypes.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "dataset/batch.h"
#include "dataset/dataset.h"
#include "loader/loader.h"
#include "util/pool.h"

/* side x side uint8 images: 512 (256 KiB records) unless --side says */
static uint64_t side = 512;
#define REC (side * side)

static uint64_t now_ns(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static uint64_t mix(uint64_t z) {
        z += 0x9e3779b97f4a7c15ull;
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        return z ^ (z >> 31);
}

/* A smooth gradient plus a little noise: compresses mildly, as photos do. */
static void image(uint8_t *p, uint64_t id) {
        uint64_t h = mix(id), st = h;
        int base = (int)(h % 128), sx = (int)((h >> 8) % 5), sy = (int)((h >> 16) % 5);
        for (size_t y = 0; y < side; y++)
                for (size_t x = 0; x < side; x++) {
                        if ((x & 7) == 0)
                                st = mix(st);
                        p[y * side + x] = (uint8_t)(base + sx * (int)x / 8 + sy * (int)y / 8 +
                                                    (int)((st >> (x & 7) * 8) & 7));
                }
}

static int die(const char *what, const zr_error *err) {
        fprintf(stderr, "loader-bench: %s: %s\n", what, err ? err->message : strerror(errno));
        exit(1);
}

static zr_dataset *make_store(int dirfd, const char *name, uint64_t n, enum zr_codec codec,
                              zr_pool *pool) {
        zr_store_options o = { .pool = pool };
        zr_schema sc;
        zr_dataset *ds;
        zr_error err = {0};
        uint64_t item = REC, chunk = 32;
        uint8_t *buf = malloc(chunk * REC);
        int fd;

        if (!buf || mkdirat(dirfd, name, 0755) < 0)
                die(name, NULL);
        fd = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (fd < 0 || zr_schema_init_dense(&sc, "|u1", &item, 1, codec, &err) < 0 ||
            zr_dataset_create(fd, &sc, NULL, 0, &o, &ds, &err) < 0)
                die(name, &err);
        for (uint64_t at = 0; at < n; at += chunk) {
                uint64_t k = n - at < chunk ? n - at : chunk, shape[2] = { k, REC };
                for (uint64_t i = 0; i < k; i++)
                        image(buf + i * REC, at + i);
                zr_batch b = { .dtype = "|u1", .data = buf, .data_len = k * REC,
                               .shape = shape, .ndim = 2 };
                if (zr_dataset_append(ds, &b, NULL, &err) < 0)
                        die("append", &err);
        }
        close(fd);
        free(buf);
        return ds;
}

typedef struct reg {
        zr_dataset *ds;
} reg;

typedef struct bench {
        zr_pool *pool;
        zr_loader_engine *e;
        int efd;
        uint64_t batch, batches, records;
        reg raw, zstd;
} bench;

static void notify(void *userdata) {
        uint64_t one = 1;
        if (write(*(int *)userdata, &one, 8) != 8)
                abort();
}

static void engine_new(bench *b, uint64_t cache) {
        zr_error err = {0};
        if (zr_loader_engine_new(b->pool, cache, notify, &b->efd, &b->e, &err) < 0)
                die("engine", &err);
}

static zr_loader *open_loader(bench *b, reg *r, uint64_t seed, uint64_t start, uint32_t pf,
                              enum zr_sampler_mode mode) {
        zr_loader_stream st = { .ds = r->ds };
        zr_loader_params p = { .mode = mode, .batch_size = b->batch, .seed = seed,
                               .start_step = start, .world_size = 1, .prefetch = pf };
        zr_loader *l;
        zr_error err = {0};
        if (zr_loader_new(b->e, &st, 1, &p, NULL, &l, &err) < 0)
                die("loader", &err);
        return l;
}

/* The next batch of l, released at once. Returns its step. */
static uint64_t take(bench *b, zr_loader *l) {
        zr_loader_event ev;
        zr_loader *x;
        uint64_t v;

        for (;;) {
                while (zr_loader_engine_next(b->e, &x) > 0)
                        ;
                if (zr_loader_poll(l, &ev) > 0) {
                        if (ev.kind == ZR_LOADER_EVENT_RING ||
                            ev.kind == ZR_LOADER_EVENT_RING_CLOSE)
                                continue;
                        break;
                }
                if (read(b->efd, &v, 8) != 8)
                        die("eventfd", NULL);
        }
        if (ev.kind != ZR_LOADER_EVENT_BATCH) {
                fprintf(stderr, "loader-bench: END %d: %s\n", ev.code, ev.message);
                exit(1);
        }
        /* as a client reports it (loaderx, libzrc): its wait and its take */
        zr_loader_take tk = { .has_wait = 1, .wait_ns = 0, .has_taken = 1,
                              .taken_ns = now_ns() };
        zr_loader_release_report(l, ev.ring, ev.slot, &tk, NULL);
        return ev.step;
}

/* Aggregate batches/s of n loaders consumed round-robin, after `warm` each. */
/* The process's CPU time (every thread's), ns. */
static uint64_t cpu_ns(void) {
        struct timespec ts;
        clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
        return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Aggregate batches/s of n loaders consumed round-robin, after `warm` each;
 * *cpu_per_batch (may be NULL) gets the process's CPU time per batch, us,
 * which other processes' load changes less than the rate. */
static double run_loaders_cpu(bench *b, zr_loader **l, size_t n, uint64_t warm,
                              double *cpu_per_batch) {
        uint64_t t0, c0;
        for (uint64_t k = 0; k < warm; k++)
                for (size_t i = 0; i < n; i++)
                        take(b, l[i]);
        t0 = now_ns();
        c0 = cpu_ns();
        for (uint64_t k = 0; k < b->batches; k++)
                for (size_t i = 0; i < n; i++)
                        take(b, l[i]);
        if (cpu_per_batch)
                *cpu_per_batch = (double)(cpu_ns() - c0) / 1e3 / (double)(b->batches * n);
        return (double)(b->batches * n) / ((double)(now_ns() - t0) / 1e9);
}

static double run_loaders(bench *b, zr_loader **l, size_t n, uint64_t warm) {
        return run_loaders_cpu(b, l, n, warm, NULL);
}

/* What telemetry adds to one gather, the least of many (the minimum is what
 * other processes' load moves least): a gather of b->batch random records of
 * r through zr_gather_read(), untimed, timed light and timed in detail
 * (batch.h), interleaved; ret[3] in ns. And a clock read's cost, ns (the
 * least over 1000 runs of 1000). */
static void gather_costs(bench *b, reg *r, uint8_t *buf, uint64_t ret[3], double *clock_ns) {
        uint64_t seed = 7, *idx = malloc(b->batch * sizeof(uint64_t)), t0;
        zr_error err = {0};

        /* 30000 gathers, or as many as copy 8 GiB, each way together */
        uint64_t reps = ((uint64_t)8 << 30) / (b->batch * REC);
        reps = reps < 30 ? 30 : reps > 30000 ? 30000 : reps;
        ret[0] = ret[1] = ret[2] = UINT64_MAX;
        for (uint64_t rep = 0; rep < reps; rep++) {
                int mode = (int)(rep % 3);
                zr_gather_times t = { .detail = mode == 2 };
                for (uint64_t i = 0; i < b->batch; i++) {
                        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
                        idx[i] = (seed >> 33) % b->records;
                }
                zr_gather g = { .ds = r->ds, .idx = idx, .n = b->batch, .times = mode ? &t : NULL };
                t0 = now_ns();
                if (zr_gather_locate(&g, &err) < 0 ||
                    zr_gather_read(&g, buf, 0, NULL, b->pool, &err) < 0)
                        die("gather", &err);
                t0 = now_ns() - t0;
                zr_gather_release(&g);
                if (t0 < ret[mode])
                        ret[mode] = t0;
        }
        free(idx);
        *clock_ns = 1e9;
        for (int k = 0; k < 1000; k++) {
                t0 = now_ns();
                for (int i = 0; i < 1000; i++)
                        (void)now_ns();
                t0 = now_ns() - t0;
                if ((double)t0 / 1000 < *clock_ns)
                        *clock_ns = (double)t0 / 1000;
        }
}

static double gather_limit(bench *b, reg *r, uint8_t *buf) {
        zr_sampler_params sp = { .mode = ZR_SAMPLER_IID, .n = b->records, .batch_size = b->batch,
                                 .seed = 1, .world_size = 1 };
        uint64_t *idx = malloc(b->batch * sizeof(uint64_t)), t0 = 0;
        zr_error err = {0};

        for (uint64_t k = 0; k < b->batches + 2; k++) {
                if (k == 2)
                        t0 = now_ns();
                sp.step = k;
                zr_sampler_indices(&sp, idx, NULL);
                if (zr_dataset_gather_dense(r->ds, idx, b->batch, buf, b->batch * REC, &err) < 0)
                        die("gather", &err);
        }
        free(idx);
        return (double)b->batches / ((double)(now_ns() - t0) / 1e9);
}

static int rm_one(const char *p, const struct stat *st, int flag, struct FTW *f) {
        (void)st;
        (void)flag;
        (void)f;
        return remove(p);
}

static int cmp_double(const void *a, const void *b) {
        double x = *(const double *)a, y = *(const double *)b;
        return x < y ? -1 : x > y;
}

static double median(double *v, size_t n) {
        qsort(v, n, sizeof(double), cmp_double);
        return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

#define ROUNDS_MAX 9

/* One figure over the rounds: its values, and the median. */
typedef struct fig {
        double v[ROUNDS_MAX];
        size_t n;
} fig;

static void fig_add(fig *f, double x) {
        f->v[f->n++] = x;
}

static double fig_med(const fig *f) {
        double c[ROUNDS_MAX];
        memcpy(c, f->v, f->n * sizeof(double));
        return median(c, f->n);
}

static void fig_print(const char *name, const fig *f, const char *unit) {
        printf("%-44s median %8.2f %s  (rounds:", name, fig_med(f), unit);
        for (size_t i = 0; i < f->n; i++)
                printf(" %.2f", f->v[i]);
        printf(")\n");
}

int main(int argc, char **argv) {
        bench b = { .batch = 256, .batches = 20, .records = 1024 };
        const char *dir = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
        size_t threads = 0, rounds = 3;
        int tel_only = 0;
        char path[512];
        int dirfd;
        uint8_t *buf;
        zr_loader_engine *plain, *cached;
        reg *regs[2];
        const char *cn[2] = { "raw", "zstd" };
        fig lim[2] = {0}, one[2] = {0}, one_r[2] = {0}, same[2] = {0}, same_r[2] = {0},
            seeds[2] = {0}, seeds_r = {0}, lat[4] = {0}, lat_r[4] = {0}, opn[4] = {0},
            off[2] = {0}, off_r[2] = {0}, cpu_on[2] = {0}, cpu_off[2] = {0}, cpu_r[2] = {0};
        uint64_t same_g[2] = {0}, same_c[2] = {0}, same_b[2] = {0}, hits = 0, misses = 0;

        for (int i = 1; i < argc; i++) {
                int more = i + 1 < argc;
                if (!strcmp(argv[i], "--records") && more)
                        b.records = strtoull(argv[++i], NULL, 0);
                else if (!strcmp(argv[i], "--batch") && more)
                        b.batch = strtoull(argv[++i], NULL, 0);
                else if (!strcmp(argv[i], "--batches") && more)
                        b.batches = strtoull(argv[++i], NULL, 0);
                else if (!strcmp(argv[i], "--rounds") && more)
                        rounds = strtoull(argv[++i], NULL, 0);
                else if (!strcmp(argv[i], "--threads") && more)
                        threads = strtoull(argv[++i], NULL, 0);
                else if (!strcmp(argv[i], "--side") && more)
                        side = strtoull(argv[++i], NULL, 0);
                else if (!strcmp(argv[i], "--telemetry-only"))
                        tel_only = 1;
                else if (!strcmp(argv[i], "--dir") && more)
                        dir = argv[++i];
                else {
                        fprintf(stderr, "usage: %s [--records N] [--batch B] [--batches T] "
                                "[--rounds R] [--threads N] [--side S] [--telemetry-only] "
                                "[--dir DIR]\n", argv[0]);
                        return 2;
                }
        }
        if (rounds < 1 || rounds > ROUNDS_MAX || b.batch > b.records || side < 8 ||
            side > 4096) {
                fprintf(stderr, "loader-bench: --rounds 1..%d, --batch <= --records, --side "
                        "8..4096\n", ROUNDS_MAX);
                return 2;
        }
        if (zr_pool_new(threads, &b.pool) < 0)
                die("pool", NULL);
        b.efd = eventfd(0, EFD_CLOEXEC);
        snprintf(path, sizeof(path), "%s/zr-loader-bench-XXXXXX", dir);
        if (!mkdtemp(path) || (dirfd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0)
                die(path, NULL);
        printf("loader-bench: %" PRIu64 " records of %" PRIu64 " KiB, batch %" PRIu64
               " (%.0f MiB), %zu pool threads, %" PRIu64 " timed batches per figure, %zu "
               "rounds (contenders interleaved in each)\n",
               b.records, REC >> 10, b.batch, (double)(b.batch * REC) / (1 << 20),
               zr_pool_threads(b.pool), b.batches, rounds);
        b.raw.ds = make_store(dirfd, "raw", b.records, ZR_CODEC_RAW, b.pool);
        b.zstd.ds = make_store(dirfd, "zstd", b.records, ZR_CODEC_ZSTD, b.pool);
        regs[0] = &b.raw;
        regs[1] = &b.zstd;
        {
                zr_stats st;
                zr_dataset_stats(b.zstd.ds, &st, NULL);
                printf("zstd store: %.1f MiB for %.1f MiB decoded (ratio %.2f)\n",
                       (double)st.live_bytes / (1 << 20), (double)st.logic_bytes / (1 << 20),
                       (double)st.logic_bytes / (double)st.live_bytes);
        }
        buf = malloc(b.batch * REC);
        memset(buf, 1, b.batch * REC); /* pre-faulted */
        engine_new(&b, 0);
        plain = b.e;
        engine_new(&b, b.records * (REC + 4096) + (64 << 20));
        cached = b.e;
        /* warm the cache with one pass over every record */
        {
                b.e = cached;
                zr_loader *w = open_loader(&b, &b.zstd, 0, 0, 2, ZR_SAMPLER_SEQUENTIAL);
                for (uint64_t k = 0; k < (b.records + b.batch - 1) / b.batch; k++)
                        take(&b, w);
                zr_loader_free(w);
        }

        for (size_t round = 0; round < rounds; round++) {
                for (int c = 0; c < 2; c++) {
                        zr_loader *l[4];
                        zr_loader_engine_counters t0, t1;

                        /* the limit, then one loader with telemetry and one
                         * without, in turns (which goes first alternates) */
                        fig_add(&lim[c], gather_limit(&b, regs[c], buf));
                        b.e = plain;
                        for (int k = 0; k < 2; k++) {
                                int on = (k + (int)round) % 2 == 0;
                                double cpu;
                                zr_loader_engine_set_telemetry(b.e, on);
                                l[0] = open_loader(&b, regs[c], 1, 0, 4, ZR_SAMPLER_IID);
                                fig_add(on ? &one[c] : &off[c],
                                        run_loaders_cpu(&b, l, 1, 6, &cpu));
                                fig_add(on ? &cpu_on[c] : &cpu_off[c], cpu);
                                zr_loader_free(l[0]);
                        }
                        zr_loader_engine_set_telemetry(b.e, 1);
                        fig_add(&one_r[c], one[c].v[round] / lim[c].v[round]);
                        fig_add(&off_r[c], one[c].v[round] / off[c].v[round]);
                        fig_add(&cpu_r[c], cpu_on[c].v[round] / cpu_off[c].v[round]);
                        if (tel_only)
                                continue;

                        /* 4 identical loaders */
                        for (int i = 0; i < 4; i++)
                                l[i] = open_loader(&b, regs[c], 1, 0, 4, ZR_SAMPLER_IID);
                        zr_loader_engine_counters_get(b.e, &t0);
                        fig_add(&same[c], run_loaders(&b, l, 4, 6));
                        zr_loader_engine_counters_get(b.e, &t1);
                        same_g[c] += t1.gathers - t0.gathers;
                        same_c[c] += t1.shared - t0.shared;
                        same_b[c] += t1.batches - t0.batches;
                        for (int i = 0; i < 4; i++)
                                zr_loader_free(l[i]);
                        fig_add(&same_r[c], same[c].v[round] / one[c].v[round]);

                        /* 4 seeds: raw plain, zstd through the warm cache */
                        b.e = c ? cached : plain;
                        for (int i = 0; i < 4; i++)
                                l[i] = open_loader(&b, regs[c], 100 + round * 4 + (uint64_t)i, 0,
                                                   2, ZR_SAMPLER_IID);
                        zr_loader_engine_counters_get(b.e, &t0);
                        fig_add(&seeds[c], run_loaders(&b, l, 4, 4));
                        zr_loader_engine_counters_get(b.e, &t1);
                        if (c) {
                                hits += t1.hits - t0.hits;
                                misses += t1.misses - t0.misses;
                        }
                        for (int i = 0; i < 4; i++)
                                zr_loader_free(l[i]);

                        /* latency: open at step 10^9 to the first batch, with a
                         * fresh ring, then with the spare ring the previous
                         * loader of that size left (a resumed run) */
                        b.e = plain;
                        for (int warm = 0; warm < 2; warm++) {
                                uint64_t ta = now_ns(), tb, tc, ring;
                                l[0] = open_loader(&b, regs[c], 1, 1000000000, 4,
                                                   ZR_SAMPLER_IID);
                                tb = now_ns();
                                if (take(&b, l[0]) != 1000000000)
                                        die("wrong first step", NULL);
                                tc = now_ns();
                                ring = zr_loader_ring_bytes(l[0]);
                                zr_loader_engine_set_spare_bytes(plain, warm ? 0 : ring);
                                zr_loader_free(l[0]);
                                fig_add(&lat[2 * c + warm], (double)(tc - ta) / 1e6);
                                fig_add(&opn[2 * c + warm], (double)(tb - ta) / 1e6);
                                fig_add(&lat_r[2 * c + warm], lat[2 * c + warm].v[round] /
                                                                      (1e3 / one[c].v[round]));
                                while (!warm) { /* wait for the spare */
                                        zr_loader_engine_counters t;
                                        uint64_t v;
                                        zr_loader_engine_counters_get(plain, &t);
                                        if (t.spare_bytes == ring)
                                                break;
                                        if (read(b.efd, &v, 8) != 8)
                                                die("eventfd", NULL);
                                }
                        }
                }
                if (!tel_only)
                        fig_add(&seeds_r, seeds[1].v[round] / seeds[0].v[round]);
        }
        uint64_t g3[3] = {0};
        double clk = 0;
        if (tel_only)
                gather_costs(&b, &b.raw, buf, g3, &clk);
        free(buf);

        for (int c = 0; c < 2; c++) {
                char name[64];
                printf("-- %s\n", cn[c]);
                fig_print("limit: in-process gather", &lim[c], "batches/s");
                fig_print("one loader (prefetch 4)", &one[c], "batches/s");
                fig_print("  one loader / limit", &one_r[c], "x");
                fig_print("one loader, telemetry off", &off[c], "batches/s");
                fig_print("  telemetry on / off, batches/s", &off_r[c], "x");
                fig_print("CPU per batch, telemetry on", &cpu_on[c], "us");
                fig_print("CPU per batch, telemetry off", &cpu_off[c], "us");
                fig_print("  telemetry on / off, CPU per batch", &cpu_r[c], "x");
                if (tel_only)
                        continue;
                fig_print("4 identical loaders, aggregate", &same[c], "batches/s");
                fig_print("  4 identical / one loader", &same_r[c], "x");
                printf("  group work: %" PRIu64 " gathers and %" PRIu64 " takes for %" PRIu64
                       " batches\n", same_g[c], same_c[c], same_b[c]);
                snprintf(name, sizeof(name), "4 seeds%s, aggregate", c ? " (warm cache)" : "");
                fig_print(name, &seeds[c], "batches/s");
                fig_print("open at step 10^9 -> first batch, fresh ring", &lat[2 * c], "ms");
                fig_print("  of which zr_loader_new()", &opn[2 * c], "ms");
                fig_print("  first batch / steady batch time", &lat_r[2 * c], "x");
                fig_print("open at step 10^9 -> first batch, spare ring", &lat[2 * c + 1],
                          "ms");
                fig_print("  first batch / steady batch time", &lat_r[2 * c + 1], "x");
        }
        if (tel_only) {
                printf("-- one raw gather of %" PRIu64 " records, the least of many (a third "
                       "each, interleaved)\n", b.batch);
                printf("untimed %.1f us, timed light %.1f us (%+.1f %%), in detail %.1f us "
                       "(%+.1f %%); a clock read %.1f ns\n", (double)g3[0] / 1e3,
                       (double)g3[1] / 1e3, 100.0 * ((double)g3[1] / (double)g3[0] - 1),
                       (double)g3[2] / 1e3, 100.0 * ((double)g3[2] / (double)g3[0] - 1), clk);
                goto done;
        }
        printf("-- 4 seeds\n");
        fig_print("zstd (warm cache) / raw", &seeds_r, "x");
        printf("  cache: %" PRIu64 " hits, %" PRIu64 " misses in the timed zstd runs\n", hits,
               misses);

done:
        zr_loader_engine_free(plain);
        zr_loader_engine_free(cached);
        zr_dataset_close(b.raw.ds, NULL);
        zr_dataset_close(b.zstd.ds, NULL);
        close(dirfd);
        nftw(path, rm_one, 16, FTW_DEPTH | FTW_PHYS);
        zr_pool_free(b.pool);
        close(b.efd);
        return 0;
}
