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
 *   4 same     4 identical loaders (a group: one gather per step, a copy per
 *              member), aggregate batches/s, against one loader
 *   4 seeds    4 loaders with different seeds over a zstd store whose decoded
 *              records fit the cache (after one warming pass), against the same
 *              over the raw store
 *   latency    from zr_loader_new() at step 10^9 to the first batch, against the
 *              steady per-batch time of "one"
 *
 * Usage: loader-bench [--records N] [--batch B] [--batches T] [--threads N]
 *                     [--dir DIR]
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

#include "dataset/dataset.h"
#include "loader/loader.h"
#include "util/pool.h"

#define SIDE 512 /* 512 x 512 uint8 images: 256 KiB records */
#define REC ((uint64_t)SIDE * SIDE)

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
        for (size_t y = 0; y < SIDE; y++)
                for (size_t x = 0; x < SIDE; x++) {
                        if ((x & 7) == 0)
                                st = mix(st);
                        p[y * SIDE + x] = (uint8_t)(base + sx * (int)x / 8 + sy * (int)y / 8 +
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
        pthread_rwlock_t lock;
        _Atomic uint64_t gen;
        uint64_t id;
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
        zr_loader_stream st = { .ds = r->ds, .lock = &r->lock, .generation = &r->gen,
                                .dataset_id = r->id };
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
                if (zr_loader_poll(l, &ev) > 0)
                        break;
                if (read(b->efd, &v, 8) != 8)
                        die("eventfd", NULL);
        }
        if (ev.kind != ZR_LOADER_EVENT_BATCH) {
                fprintf(stderr, "loader-bench: END %d: %s\n", ev.code, ev.message);
                exit(1);
        }
        zr_loader_release(l, ev.slot, NULL);
        return ev.step;
}

/* Aggregate batches/s of n loaders consumed round-robin, after `warm` each. */
static double run_loaders(bench *b, zr_loader **l, size_t n, uint64_t warm) {
        uint64_t t0;
        for (uint64_t k = 0; k < warm; k++)
                for (size_t i = 0; i < n; i++)
                        take(b, l[i]);
        t0 = now_ns();
        for (uint64_t k = 0; k < b->batches; k++)
                for (size_t i = 0; i < n; i++)
                        take(b, l[i]);
        return (double)(b->batches * n) / ((double)(now_ns() - t0) / 1e9);
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

int main(int argc, char **argv) {
        bench b = { .batch = 256, .batches = 30, .records = 1024 };
        const char *dir = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
        size_t threads = 0;
        char path[512];
        int dirfd;
        uint8_t *buf;

        for (int i = 1; i < argc; i++) {
                int more = i + 1 < argc;
                if (!strcmp(argv[i], "--records") && more)
                        b.records = strtoull(argv[++i], NULL, 0);
                else if (!strcmp(argv[i], "--batch") && more)
                        b.batch = strtoull(argv[++i], NULL, 0);
                else if (!strcmp(argv[i], "--batches") && more)
                        b.batches = strtoull(argv[++i], NULL, 0);
                else if (!strcmp(argv[i], "--threads") && more)
                        threads = strtoull(argv[++i], NULL, 0);
                else if (!strcmp(argv[i], "--dir") && more)
                        dir = argv[++i];
                else {
                        fprintf(stderr, "usage: %s [--records N] [--batch B] [--batches T] "
                                "[--threads N] [--dir DIR]\n", argv[0]);
                        return 2;
                }
        }
        if (zr_pool_new(threads, &b.pool) < 0)
                die("pool", NULL);
        b.efd = eventfd(0, EFD_CLOEXEC);
        snprintf(path, sizeof(path), "%s/zr-loader-bench-XXXXXX", dir);
        if (!mkdtemp(path) || (dirfd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0)
                die(path, NULL);
        printf("loader-bench: %" PRIu64 " records of %" PRIu64 " KiB, batch %" PRIu64
               " (%.0f MiB), %zu pool threads, %" PRIu64 " timed batches per figure\n",
               b.records, REC >> 10, b.batch, (double)(b.batch * REC) / (1 << 20),
               zr_pool_threads(b.pool), b.batches);
        b.raw.ds = make_store(dirfd, "raw", b.records, ZR_CODEC_RAW, b.pool);
        b.zstd.ds = make_store(dirfd, "zstd", b.records, ZR_CODEC_ZSTD, b.pool);
        b.raw.id = 1;
        b.zstd.id = 2;
        pthread_rwlock_init(&b.raw.lock, NULL);
        pthread_rwlock_init(&b.zstd.lock, NULL);
        {
                zr_stats s;
                zr_dataset_stats(b.zstd.ds, &s, NULL);
                printf("zstd store: %.1f MiB for %.1f MiB decoded (ratio %.2f)\n",
                       (double)s.live_bytes / (1 << 20), (double)s.logic_bytes / (1 << 20),
                       (double)s.logic_bytes / (double)s.live_bytes);
        }

        /* the limit: in-process gathers into a pre-faulted buffer (also warms
         * the page cache) */
        buf = malloc(b.batch * REC);
        memset(buf, 1, b.batch * REC);
        double lim_raw = gather_limit(&b, &b.raw, buf);
        double lim_zstd = gather_limit(&b, &b.zstd, buf);
        free(buf);
        printf("limit  in-process gather     raw %7.2f batches/s   zstd %7.2f batches/s\n",
               lim_raw, lim_zstd);

        /* one loader, no cache */
        engine_new(&b, 0);
        double one[2];
        reg *regs[2] = { &b.raw, &b.zstd };
        for (int c = 0; c < 2; c++) {
                zr_loader *l = open_loader(&b, regs[c], 1, 0, 4, ZR_SAMPLER_IID);
                one[c] = run_loaders(&b, &l, 1, 6);
                zr_loader_free(l);
        }
        printf("one    loader, prefetch 4    raw %7.2f batches/s (%.2fx limit)   zstd %7.2f "
               "batches/s (%.2fx limit)\n", one[0], one[0] / lim_raw, one[1], one[1] / lim_zstd);

        /* 4 identical loaders */
        for (int c = 0; c < 2; c++) {
                zr_loader *l[4];
                zr_loader_engine_counters t0, t1;
                for (int i = 0; i < 4; i++)
                        l[i] = open_loader(&b, regs[c], 1, 0, 4, ZR_SAMPLER_IID);
                zr_loader_engine_counters_get(b.e, &t0);
                double agg = run_loaders(&b, l, 4, 6);
                zr_loader_engine_counters_get(b.e, &t1);
                printf("4 same %s aggregate %7.2f batches/s = %.2fx one loader (gathers %" PRIu64
                       ", copies %" PRIu64 " for %" PRIu64 " batches)\n", c ? "zstd" : "raw ",
                       agg, agg / one[c], t1.gathers - t0.gathers, t1.shared - t0.shared,
                       t1.batches - t0.batches);
                for (int i = 0; i < 4; i++)
                        zr_loader_free(l[i]);
        }
        zr_loader_engine_free(b.e);

        /* 4 seeds, zstd through a cache that holds every decoded record, vs raw */
        engine_new(&b, b.records * (REC + 4096) + (64 << 20));
        double seeds[2];
        for (int c = 0; c < 2; c++) {
                zr_loader *l[4];
                zr_loader_engine_counters t0, t1;
                if (c == 1) { /* one warming pass over every record */
                        zr_loader *w = open_loader(&b, regs[c], 0, 0, 2, ZR_SAMPLER_SEQUENTIAL);
                        for (uint64_t k = 0; k < (b.records + b.batch - 1) / b.batch; k++)
                                take(&b, w);
                        zr_loader_free(w);
                }
                for (int i = 0; i < 4; i++)
                        l[i] = open_loader(&b, regs[c], 100 + (uint64_t)i, 0, 2, ZR_SAMPLER_IID);
                zr_loader_engine_counters_get(b.e, &t0);
                seeds[c] = run_loaders(&b, l, 4, 4);
                zr_loader_engine_counters_get(b.e, &t1);
                printf("4 seeds %s aggregate %7.2f batches/s (cache hits %" PRIu64 ", misses %"
                       PRIu64 ", resident %.0f MiB)\n", c ? "zstd" : "raw ", seeds[c],
                       t1.hits - t0.hits, t1.misses - t0.misses,
                       (double)t1.cache_bytes / (1 << 20));
                for (int i = 0; i < 4; i++)
                        zr_loader_free(l[i]);
        }
        printf("4 seeds zstd (cached) / raw = %.2f\n", seeds[1] / seeds[0]);
        zr_loader_engine_free(b.e);

        /* latency: open at step 10^9 to the first batch, against the steady time */
        engine_new(&b, 0);
        for (int c = 0; c < 2; c++) {
                uint64_t t0 = now_ns(), t1, t2;
                zr_loader *l = open_loader(&b, regs[c], 1, 1000000000, 4, ZR_SAMPLER_IID);
                t1 = now_ns();
                if (take(&b, l) != 1000000000)
                        die("wrong first step", NULL);
                t2 = now_ns();
                printf("latency %s open at step 10^9: first batch after %.1f ms (open %.1f ms), "
                       "steady %.1f ms/batch: %.2fx\n", c ? "zstd" : "raw ",
                       (double)(t2 - t0) / 1e6, (double)(t1 - t0) / 1e6, 1e3 / one[c],
                       ((double)(t2 - t0) / 1e6) / (1e3 / one[c]));
                zr_loader_free(l);
        }
        zr_loader_engine_free(b.e);

        zr_dataset_close(b.raw.ds, NULL);
        zr_dataset_close(b.zstd.ds, NULL);
        close(dirfd);
        nftw(path, rm_one, 16, FTW_DEPTH | FTW_PHYS);
        zr_pool_free(b.pool);
        close(b.efd);
        return 0;
}
