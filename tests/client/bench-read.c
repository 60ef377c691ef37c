/* bench-read.c: reading a batch by indices through libzrc, from a second
 * process, against the engine's in-process gather of the same records.
 *
 * For each workload (256 KiB × 256 and 4 KiB × 1024, raw stores of image
 * records from bench/workload.h) the store is built once with the engine, the
 * engine's zr_dataset_gather_dense() is timed on it in this process (a pool of
 * the daemon's thread count, a pre-faulted destination), then the store is
 * closed and a real zrecordd (started here, same thread count) serves it to
 * libzrc, whose zrc_dataset_read() is timed on the same index batches. Both
 * sides read warm page cache and neither touches the gathered bytes. The figure
 * is the ratio of the medians, from one run. A loader (one client) is timed
 * against the same engine gather rate. Then issue 5's client processes: 1, 4
 * with identical loaders (a group: one gather per step, one slot for all) and
 * 4 with different seeds, each a forked process with its own connection,
 * warmed up, started together, over the raw store and over a zstd copy whose
 * decoded records fit the daemon's cache; rounds interleave the six, and the
 * report gives medians. Then the round trip of a small request (INFO) is timed
 * many times for its p50 and p99.
 *
 * Usage: bench-read [--quick]     (needs $ZRECORDD: meson sets it for
 *        `meson test --benchmark`, or run with ZRECORDD=build/daemon/zrecordd)
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "daemon.h"
#include "dataset/dataset.h"
#include "util.h"
#include "util/pool.h"
#include "workload.h"
#include "zrc.h"

/* The daemon runs with --threads=2 (zrd-test.c); the engine gets as many. */
#define BENCH_THREADS 2
#define BENCH_SEED 20261129
#define BENCH_WARM 3
#define BENCH_INFO_ROUNDS 20000

typedef struct workload {
        const char *name;
        size_t width, height;  /* record = width × height u8 image */
        size_t batch;
        size_t records;        /* in the store */
        size_t timed;
} workload;

typedef struct engine_arg {
        zr_dataset *ds;
        const workload *w;
        uint64_t *idx;
        uint8_t *dst;
        uint64_t dst_size;
} engine_arg;

static int engine_step(void *arg, uint64_t batch) {
        engine_arg *a = arg;

        workload_draw(a->idx, a->w->batch, a->w->records, BENCH_SEED, batch);
        return zr_dataset_gather_dense(a->ds, a->idx, a->w->batch, a->dst, a->dst_size, NULL);
}

typedef struct client_arg {
        zrc_dataset *d;
        const workload *w;
        uint64_t *idx;
} client_arg;

static int client_step(void *arg, uint64_t batch) {
        client_arg *a = arg;
        zrc_batch b;

        workload_draw(a->idx, a->w->batch, a->w->records, BENCH_SEED, batch);
        return zrc_dataset_read(a->d, a->idx, a->w->batch, &b);
}

static int build_store(const char *path, const workload *w, zr_pool *pool, enum zr_codec codec) {
        uint64_t shape[3] = { w->records, w->height, w->width };
        zr_store_options opts = { .pool = pool };
        zr_dataset *ds = NULL;
        zr_schema schema;
        zr_batch b;
        uint8_t *data;
        int dirfd, r;

        if (mkdir(path, 0755) < 0)
                return -errno;
        dirfd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (dirfd < 0)
                return -errno;
        r = zr_schema_init_dense(&schema, "|u1", shape + 1, 2, codec, NULL);
        if (r == 0)
                r = zr_dataset_create(dirfd, &schema, NULL, 0, &opts, &ds, NULL);
        data = r == 0 ? workload_images(w->records, w->width, w->height, BENCH_SEED) : NULL;
        if (r == 0 && !data)
                r = -ENOMEM;
        if (r == 0) {
                b = (zr_batch){ .dtype = "|u1", .data = data,
                                .data_len = (uint64_t)w->records * w->width * w->height,
                                .shape = shape, .ndim = 3 };
                r = zr_dataset_append(ds, &b, NULL, NULL);
        }
        free(data);
        if (ds) {
                int q = zr_dataset_close(ds, NULL);

                if (r == 0)
                        r = q;
        }
        close(dirfd);
        return r;
}

/* Times batch k on the engine, then batch k through libzrc, alternately, so
 * both sides see the same machine at the same moments (the 2-core machines are
 * shared and noisy). The engine reads store copy `engine_path`, the daemon copy
 * `client_path`: a store is open in one process at a time. */
static int time_both(zrc_conn *c, const char *engine_path, const char *client_path,
                     const workload *w, zr_pool *pool, double *ret_engine, double *ret_client,
                     double *ret_engine_min, double *ret_client_min) {
        zr_store_options opts = { .pool = pool };
        engine_arg e = { .w = w };
        client_arg a = { .w = w };
        double *es = calloc(w->timed, sizeof(double)), *cs = calloc(w->timed, sizeof(double));
        int dirfd, r;

        e.dst_size = (uint64_t)w->batch * w->width * w->height;
        e.dst = aligned_alloc(4096, e.dst_size);
        e.idx = calloc(w->batch, sizeof(uint64_t));
        a.idx = calloc(w->batch, sizeof(uint64_t));
        dirfd = open(engine_path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (!es || !cs || !e.dst || !e.idx || !a.idx || dirfd < 0)
                return -ENOMEM;
        /* shared memory (the daemon's memfd buffers) gets no transparent huge
         * pages here; with ZRC_BENCH_NOHUGE=1 the engine's destination gets none
         * either, which isolates that difference */
        if (getenv("ZRC_BENCH_NOHUGE"))
                (void)madvise(e.dst, e.dst_size, MADV_NOHUGEPAGE);
        memset(e.dst, 1, e.dst_size); /* pre-faulted, as the daemon's buffers are */
        r = zr_dataset_open(dirfd, &opts, &e.ds, NULL);
        if (r == 0 && (r = zrc_dataset_open(c, client_path, 0, &a.d)) < 0)
                fprintf(stderr, "bench-read: %s: %s\n", w->name, zrc_last_error(c)->message);
        /* warm: every record once on each side (mappings, page cache, buffer) */
        for (uint64_t k = 0; r == 0 && k * w->batch < w->records + BENCH_WARM * w->batch; k++) {
                for (size_t j = 0; j < w->batch; j++)
                        e.idx[j] = a.idx[j] = (k * w->batch + j) % w->records;
                r = zr_dataset_gather_dense(e.ds, e.idx, w->batch, e.dst, e.dst_size, NULL);
                if (r == 0) {
                        zrc_batch b;

                        r = zrc_dataset_read(a.d, a.idx, w->batch, &b);
                }
        }
        for (size_t k = 0; r == 0 && k < w->timed; k++) {
                uint64_t t0 = workload_now_ns(), t1, t2;

                r = engine_step(&e, k);
                t1 = workload_now_ns();
                if (r == 0)
                        r = client_step(&a, k);
                t2 = workload_now_ns();
                es[k] = (double)(t1 - t0) / 1e9;
                cs[k] = (double)(t2 - t1) / 1e9;
        }
        if (r == 0) {
                *ret_engine_min = workload_min(es, w->timed);
                *ret_client_min = workload_min(cs, w->timed);
                *ret_engine = workload_median(es, w->timed);
                *ret_client = workload_median(cs, w->timed);
        } else {
                fprintf(stderr, "bench-read: %s: %d %s\n", w->name, r, zrc_last_error(c)->message);
        }
        zrc_dataset_close(a.d);
        zr_dataset_close(e.ds, NULL);
        close(dirfd);
        free(es);
        free(cs);
        free(e.dst);
        free(e.idx);
        free(a.idx);
        return r;
}

/* Batches through a loader (iid sampler, prefetch 4), each released at once
 * by an identity consumer: the mean time per batch over the timed batches
 * (a throughput: with a prefetching ring a single batch's wait says little).
 * The warm-up covers the ring's first fills (a fresh slot's first touch costs
 * 30-90 ms of page faults here), so this is the steady state. */
static int time_loader(zrc_conn *c, const char *path, const workload *w, double *ret_mean) {
        zrc_loader_options o = { .sampler = "iid", .batch_size = w->batch, .seed = BENCH_SEED,
                                 .prefetch = 4 };
        zrc_dataset *d = NULL;
        zrc_loader *l = NULL;
        zrc_loader_batch b;
        uint64_t t0 = 0;
        int r;

        r = zrc_dataset_open(c, path, 0, &d);
        if (r == 0)
                r = zrc_loader_open(c, &d, 1, &o, &l);
        size_t warm = 4 * BENCH_WARM + 4, timed = w->timed < 60 ? 60 : w->timed;

        for (size_t k = 0; r == 0 && k < warm + timed; k++) {
                if (k == warm)
                        t0 = workload_now_ns();
                r = zrc_loader_next(l, &b);
                if (r == 0)
                        r = zrc_loader_release(l, b.slot);
        }
        if (r == 0)
                *ret_mean = (double)(workload_now_ns() - t0) / 1e9 / (double)timed;
        else
                fprintf(stderr, "bench-read: loader %s: %s\n", w->name, zrc_last_error(c)->message);
        zrc_loader_close(l);
        zrc_dataset_close(d);
        return r;
}

/* ---- several clients (issue 5): one process and one connection each ---- */

typedef struct clients_result {
        double start, end; /* CLOCK_MONOTONIC seconds of the timed batches */
        int r;
} clients_result;

/* A client process: opens the loader (iid, batch w->batch, prefetch 4), takes
 * `warm` batches, says so on ready_fd, waits for a byte on go_fd, then takes
 * `n` batches (each released at once: an identity consumer) and writes its
 * clients_result to res_fd. Never returns. */
static void client_proc(const char *sock, const char *path, const workload *w, uint64_t seed,
                        size_t warm, size_t n, int ready_fd, int go_fd, int res_fd) {
        zrc_loader_options o = { .sampler = "iid", .batch_size = w->batch, .seed = seed,
                                 .prefetch = 4 };
        clients_result res = { 0 };
        zrc_conn *c = NULL;
        zrc_dataset *d = NULL;
        zrc_loader *l = NULL;
        zrc_loader_batch b;
        char x = 1;
        int r;

        r = zrc_connect(sock, &c, NULL);
        if (r == 0)
                r = zrc_dataset_open(c, path, 0, &d);
        if (r == 0)
                r = zrc_loader_open(c, &d, 1, &o, &l);
        for (size_t k = 0; r == 0 && k < warm; k++) {
                r = zrc_loader_next(l, &b);
                if (r == 0)
                        r = zrc_loader_release(l, b.slot);
        }
        if (write(ready_fd, &x, 1) != 1 || read(go_fd, &x, 1) != 1)
                _exit(2);
        res.start = (double)workload_now_ns() / 1e9;
        for (size_t k = 0; r == 0 && k < n; k++) {
                r = zrc_loader_next(l, &b);
                if (r == 0)
                        r = zrc_loader_release(l, b.slot);
        }
        res.end = (double)workload_now_ns() / 1e9;
        res.r = r;
        if (write(res_fd, &res, sizeof(res)) != (ssize_t)sizeof(res))
                _exit(2);
        _exit(0);
}

/* `nc` client processes (seeds equal, or one each), warmed up, start together:
 * aggregate batches/s = all timed batches / (last end - first start). */
static int time_clients(const char *sock, const char *path, const workload *w, int nc,
                        bool same_seed, size_t warm, size_t n, double *ret_rate) {
        int ready[2], go[2], res[2], r = 0;
        double t0 = 0, t1 = 0;
        pid_t pids[8];
        char x[8] = { 0 };

        if (nc > 8 || pipe2(ready, O_CLOEXEC) < 0 || pipe2(go, O_CLOEXEC) < 0 ||
            pipe2(res, O_CLOEXEC) < 0)
                return -EINVAL;
        fflush(NULL);
        for (int i = 0; i < nc; i++) {
                pids[i] = fork();
                if (pids[i] == 0)
                        client_proc(sock, path, w, BENCH_SEED + (same_seed ? 0 : (uint64_t)i), warm,
                                    n, ready[1], go[0], res[1]);
        }
        for (int i = 0; i < nc; i++)
                if (read(ready[0], x, 1) != 1)
                        r = -EIO;
        if (write(go[1], x, (size_t)nc) != nc)
                r = -EIO;
        for (int i = 0; i < nc; i++) {
                clients_result cr;
                if (read(res[0], &cr, sizeof(cr)) != (ssize_t)sizeof(cr) || cr.r != 0) {
                        r = -EIO;
                        continue;
                }
                if (i == 0 || cr.start < t0)
                        t0 = cr.start;
                if (i == 0 || cr.end > t1)
                        t1 = cr.end;
        }
        for (int i = 0; i < nc; i++)
                waitpid(pids[i], NULL, 0);
        close(ready[0]);
        close(ready[1]);
        close(go[0]);
        close(go[1]);
        close(res[0]);
        close(res[1]);
        if (r == 0)
                *ret_rate = (double)n * nc / (t1 - t0);
        return r;
}

static int cmp_double(const void *a, const void *b) {
        double x = *(const double *)a, y = *(const double *)b;

        return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
        workload loads[] = {
                { "256 KiB x 256", 512, 512, 256, 512, 20 },
                { "4 KiB x 1024", 64, 64, 1024, 8192, 200 },
        };
        size_t n_loads = sizeof(loads) / sizeof(loads[0]);
        double engine[2], client[2], engine_min[2], client_min[2], loader[2] = { 0, 0 };
        double *lat = NULL;
        bool have_loader = false;
        bool quick = argc > 1 && strcmp(argv[1], "--quick") == 0;
        size_t rounds = quick ? 2000 : BENCH_INFO_ROUNDS;
        char dir[] = "/tmp/zrc-bench-XXXXXX", path[2][2][PATH_MAX];
        zr_pool *pool = NULL;
        tl_daemon daemon_;
        zrc_conn *c = NULL;
        zrc_dataset *d = NULL;
        int r;

        if (!tl_daemon_binary()) {
                fprintf(stderr, "bench-read: set ZRECORDD to the zrecordd binary\n");
                return TL_SKIP;
        }
        if (quick)
                for (size_t i = 0; i < n_loads; i++)
                        loads[i].timed = 5;
        if (!mkdtemp(dir) || zr_pool_new(BENCH_THREADS, &pool) < 0)
                return EXIT_FAILURE;

        for (size_t i = 0; i < n_loads; i++) {
                for (int copy = 0; copy < 2; copy++) {
                        snprintf(path[copy][i], sizeof(path[copy][i]), "%s/store-%zu-%c", dir, i,
                                 copy ? 'b' : 'a');
                        r = build_store(path[copy][i], &loads[i], pool, ZR_CODEC_RAW);
                        if (r < 0) {
                                fprintf(stderr, "bench-read: building %s: %s\n", loads[i].name,
                                        strerror(-r));
                                goto fail;
                        }
                }
        }

        r = tl_daemon_start(&daemon_, NULL);
        if (r < 0) {
                fprintf(stderr, "bench-read: zrecordd did not start: %s\n", strerror(-r));
                goto fail;
        }
        r = zrc_connect(daemon_.socket, &c, NULL);
        for (size_t i = 0; r == 0 && i < n_loads; i++)
                r = time_both(c, path[0][i], path[1][i], &loads[i], pool, &engine[i], &client[i],
                              &engine_min[i], &client_min[i]);

        have_loader = r == 0 && zrc_has_feature(c, "loader");
        for (size_t i = 0; have_loader && r == 0 && i < n_loads; i++)
                r = time_loader(c, path[1][i], &loads[i], &loader[i]);

        lat = calloc(rounds, sizeof(double));
        if (r == 0 && lat)
                r = zrc_dataset_open(c, path[1][1], 0, &d);
        for (size_t i = 0; r == 0 && lat && i < rounds; i++) {
                uint64_t t0 = workload_now_ns();
                zrc_info info;

                r = zrc_dataset_info(d, &info);
                lat[i] = (double)(workload_now_ns() - t0) / 1000.0;
        }
        /* several client processes over the 256 KiB store (issue 5): one
         * client, 4 with identical loaders, 4 with different seeds; raw, and
         * zstd whose decoded records fit the daemon's cache (1 GiB) after the
         * warm-up (the first pass: 100 draws per record on average) */
        enum { CL_ONE, CL_SAME, CL_DIFF, CL_N };
        static const char *cl_name[CL_N] = { "1 client", "4 clients, same seed",
                                             "4 clients, different seeds" };
        double cl[2][CL_N][5] = { { { 0 } } }, cl_med[2][CL_N] = { { 0 } };
        size_t cl_rounds = quick ? 1 : 5, cl_warm = quick ? 3 : 200, cl_n = quick ? 5 : 200;
        char zpath[PATH_MAX];
        snprintf(zpath, sizeof(zpath), "%s/store-0-z", dir);
        if (r == 0 && have_loader) {
                r = build_store(zpath, &loads[0], pool, ZR_CODEC_ZSTD);
                if (r < 0)
                        fprintf(stderr, "bench-read: building the zstd store: %s\n", strerror(-r));
        }
        /* after the INFO round trips: closing 256 MiB loaders has the pool
         * make spare rings, which would disturb them */
        for (size_t k = 0; have_loader && r == 0 && k < cl_rounds; k++)
                for (int z = 0; r == 0 && z < 2; z++)
                        for (int m = 0; r == 0 && m < CL_N; m++) {
                                r = time_clients(daemon_.socket, z ? zpath : path[1][0], &loads[0],
                                                 m == CL_ONE ? 1 : 4, m != CL_DIFF, cl_warm, cl_n,
                                                 &cl[z][m][k]);
                                if (r < 0)
                                        fprintf(stderr, "bench-read: %s clients failed\n",
                                                cl_name[m]);
                        }
        for (int z = 0; z < 2; z++)
                for (int m = 0; m < CL_N; m++) {
                        qsort(cl[z][m], cl_rounds, sizeof(double), cmp_double);
                        cl_med[z][m] = cl[z][m][cl_rounds / 2];
                }

        zrc_disconnect(c);
        tl_daemon_stop(&daemon_, SIGTERM);
        tl_daemon_remove(&daemon_);
        if (r < 0 || !lat) {
                fprintf(stderr, "bench-read: libzrc failed: %d\n", r);
                free(lat);
                goto fail;
        }
        qsort(lat, rounds, sizeof(double), cmp_double);

        printf("bench-read: %d threads on both sides, raw stores, warm page cache; engine and "
               "libzrc batches alternate; %zu / %zu batches\n",
               BENCH_THREADS, loads[0].timed, loads[1].timed);
        printf("%-14s %10s %10s %11s %11s %7s %9s\n", "workload", "engine ms", "libzrc ms",
               "engine GB/s", "libzrc GB/s", "ratio", "ratio min");
        for (size_t i = 0; i < n_loads; i++) {
                double bytes = (double)loads[i].batch * loads[i].width * loads[i].height;

                printf("%-14s %10.3f %10.3f %11.2f %11.2f %7.2f %9.2f\n", loads[i].name,
                       engine[i] * 1e3, client[i] * 1e3, bytes / engine[i] / 1e9,
                       bytes / client[i] / 1e9, engine[i] / client[i],
                       engine_min[i] / client_min[i]);
        }
        printf("(ratio: engine time / libzrc time of the medians, >= 1 means libzrc is as fast; "
               "ratio min: of the fastest batches)\n");
        for (size_t i = 0; have_loader && i < n_loads; i++)
                printf("loader %-14s %8.3f ms per batch (iid, prefetch 4, identity consumer, "
                       "mean): %.2fx the engine's gather rate\n",
                       loads[i].name, loader[i] * 1e3, engine[i] / loader[i]);
        if (have_loader) {
                printf("client processes (%s, iid, prefetch 4, identity consumer; %zu batches "
                       "each after %zu; median of %zu rounds, batches/s of all clients):\n",
                       loads[0].name, cl_n, cl_warm, cl_rounds);
                for (int z = 0; z < 2; z++)
                        for (int m = 0; m < CL_N; m++)
                                printf("  %-4s %-28s %8.1f  (%.2fx one client)\n",
                                       z ? "zstd" : "raw", cl_name[m], cl_med[z][m],
                                       cl_med[z][m] / cl_med[z][CL_ONE]);
                printf("  4 different seeds, zstd (decoded records cached) / raw: %.2fx\n",
                       cl_med[1][CL_DIFF] / cl_med[0][CL_DIFF]);
        }
        printf("INFO round trip over %zu requests: p50 %.1f us, p99 %.1f us\n", rounds,
               lat[rounds / 2], lat[rounds * 99 / 100]);
        free(lat);
        zr_pool_free(pool);
        tl_rmtree(dir);
        return EXIT_SUCCESS;

fail:
        zr_pool_free(pool);
        tl_rmtree(dir);
        return EXIT_FAILURE;
}
