/* bench-resume.c: issue 5's resume latency through zrecordd, with and without
 * spare rings (the ring-spare setting). Not a test: it prints figures and
 * ratios, never fails on a speed.
 *
 * One daemon (--threads=2, a config file this program rewrites, SIGHUP), one
 * raw store of N records of 256 KiB (warm page cache: just written, and read
 * once through the daemon before timing), loaders of batch B, prefetch P,
 * iid, seed 1. The client is an identity consumer: it maps each ring, and
 * releases each batch as it arrives without reading it. Each round measures,
 * interleaved:
 *
 *   steady   a loader from step 0: P + 2 batches of warm-up, then T batches;
 *            the time per batch
 *   fresh    ring-spare = 0 (no spare): LOADER_OPEN at step 10^9 -> its first
 *            BATCH; then the budget is raised (SIGHUP) and the loader closed,
 *            which leaves a spare ring of its size (STATUS spare_bytes, polled)
 *   spare    LOADER_OPEN at step 10^9 again, same ring size -> first BATCH
 *
 * and the ratios of the two latencies to the steady batch time (issue 5:
 * <= 2x). The budget for "spare" is --spare BYTES, or the daemon's default when
 * not given (the config file then has no ring-spare line).
 *
 *     ZRECORDD=build/daemon/zrecordd build/tests/daemon/bench-resume \
 *         [--records N] [--batch B] [--prefetch P] [--batches T] [--rounds R] [--spare BYTES]
 */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "check-run.h"
#include "tclient.h"
#include "util.h"

#define REC (256u << 10)
#define START 1000000000ull
#define ROUNDS_MAX 15

static struct {
        uint64_t records, batch, prefetch, batches, rounds;
        const char *spare; /* NULL: the daemon's default */
} opt = {1024, 256, 4, 20, 5, NULL};

static td_daemon D;
static char cfg_dir[64], cfg_path[128];
static uint64_t next_id = 100;

typedef struct fig {
        double v[ROUNDS_MAX];
        size_t n;
} fig;

static double fig_med(const fig *f) {
        double c[ROUNDS_MAX];
        memcpy(c, f->v, f->n * sizeof(double));
        qsort(c, f->n, sizeof(double), tl_cmp_double);
        return f->n % 2 ? c[f->n / 2] : (c[f->n / 2 - 1] + c[f->n / 2]) / 2;
}

static void fig_print(const char *name, const fig *f, const char *unit) {
        printf("%-48s median %8.2f %s  (rounds:", name, fig_med(f), unit);
        for (size_t i = 0; i < f->n; i++)
                printf(" %.2f", f->v[i]);
        printf(")\n");
}

static void must(int code, const char *what) {
        if (code != 0) {
                fprintf(stderr, "bench-resume: %s failed: %d\n", what, code);
                exit(1);
        }
}

/* Sets the config file's ring-spare line (NULL: none) and reloads. */
static void set_spare(const char *value) {
        FILE *f = fopen(cfg_path, "we");
        ck_assert_ptr_nonnull(f);
        fprintf(f, "log-level = warning\n");
        if (value)
                fprintf(f, "ring-spare = %s\n", value);
        fclose(f);
        if (D.pid > 0) {
                kill(D.pid, SIGHUP);
                ck_assert(td_wait_notify(&D, "READY=1"));
        }
}

static uint32_t make_store(int fd) {
        char path[400];
        snprintf(path, sizeof(path), "%s/store", D.dir);
        uint64_t shape[] = {REC};
        uint32_t h = td_create_dense(fd, path, "|u1", shape, 1, "raw");
        const uint64_t chunk = 64;
        uint8_t *data = malloc(chunk * REC);
        uint64_t x = 88172645463325252u;
        for (uint64_t at = 0; at < opt.records; at += chunk) {
                uint64_t k = opt.records - at < chunk ? opt.records - at : chunk;
                for (size_t i = 0; i < k * REC; i += 8) {
                        x ^= x << 13;
                        x ^= x >> 7;
                        x ^= x << 17;
                        memcpy(data + i, &x, 8);
                }
                must(td_append(fd, h, "|u1", shape, 1, REC, data, k, NULL), "append");
        }
        free(data);
        return h;
}

typedef struct ldr {
        uint32_t id;
        uint64_t ring_id; /* the reply's "ring" (0 from a daemon without ring ids) */
        uint64_t ring_bytes;
        void *ring;
} ldr;

static void ldr_open(int fd, uint32_t h, uint64_t start, ldr *l) {
        zr_wire_writer w;
        td_msg m;
        td_begin_loader_open(&w, next_id++, h, "iid", opt.batch, 1, start, opt.prefetch);
        must(td_call(fd, &w, NULL, 0, &m), "loader_open");
        l->id = (uint32_t)td_u64(&m, "loader");
        l->ring_id = td_has(&m, "ring") ? td_u64(&m, "ring") : 0;
        l->ring_bytes = td_u64(&m, "ring_bytes");
        l->ring = mmap(NULL, l->ring_bytes, PROT_READ, MAP_SHARED, m.fds[0], 0);
        ck_assert_ptr_ne(l->ring, MAP_FAILED);
        td_msg_free(&m);
}

/* The next BATCH of the loader, released at once; returns its step. */
static uint64_t take(int fd, const ldr *l) {
        td_msg m;
        for (;;) {
                ck_assert_int_eq(td_recv(fd, &m), 0);
                if (!strcmp(m.kind, "loader_end")) {
                        fprintf(stderr, "bench-resume: LOADER_END %" PRIu64 "\n",
                                td_u64(&m, "code"));
                        exit(1);
                }
                if (!strcmp(m.kind, "batch"))
                        break;
                td_msg_free(&m);
        }
        ck_assert_uint_eq(td_u64(&m, "loader"), l->id);
        uint64_t step = td_u64(&m, "step");
        td_release(fd, l->id, td_has(&m, "ring") ? td_u64(&m, "ring") : l->ring_id,
                   td_u64(&m, "slot"));
        td_msg_free(&m);
        return step;
}

static void ldr_close(int fd, ldr *l) {
        zr_wire_writer w;
        td_msg m;
        td_begin(&w, "loader_close", next_id++);
        zr_wire_put_u64(&w, "loader", l->id);
        must(td_call_past_events(fd, &w, NULL, 0, &m), "loader_close");
        td_msg_free(&m);
        munmap(l->ring, l->ring_bytes);
}

/* STATUS spare_bytes; events of an open loader that come first are dropped
 * (their slots stay held until the loader is closed). */
static uint64_t spare_bytes(int fd) {
        zr_wire_writer w;
        td_msg m;
        td_begin(&w, "status", next_id++);
        must(td_call_past_events(fd, &w, NULL, 0, &m), "status");
        uint64_t v = td_u64(&m, "spare_bytes");
        td_msg_free(&m);
        return v;
}

/* Open at step 10^9 -> first batch, ms; *open_ms: -> the LOADER_OPEN reply. */
static double resume(int fd, uint32_t h, ldr *l, double *open_ms) {
        double t0 = tl_seconds();
        ldr_open(fd, h, START, l);
        double t1 = tl_seconds();
        ck_assert_uint_eq(take(fd, l), START);
        double t2 = tl_seconds();
        *open_ms = (t1 - t0) * 1e3;
        return (t2 - t0) * 1e3;
}

static int bench(void) {
        fig steady = {0}, fresh = {0}, fresh_open = {0}, fresh_r = {0}, spare = {0},
            spare_open = {0}, spare_r = {0};
        snprintf(cfg_dir, sizeof(cfg_dir), "/tmp/zr-bench-resume-XXXXXX");
        ck_assert_ptr_nonnull(mkdtemp(cfg_dir));
        snprintf(cfg_path, sizeof(cfg_path), "%s/zrecordd.conf", cfg_dir);
        set_spare("0");
        char cfgarg[160];
        snprintf(cfgarg, sizeof(cfgarg), "--config=%s", cfg_path);
        /* --idle-exit: a daemon left by a failed run goes once this process is gone */
        const char *args[] = {cfgarg, "--log-level=warning", "--idle-exit=5", NULL};
        td_start(&D, args);
        int fd = td_connect_hello(&D);
        uint32_t h = make_store(fd);
        printf("bench-resume: %" PRIu64 " records of %u KiB, batch %" PRIu64 " (%.0f MiB), "
               "prefetch %" PRIu64 ", daemon --threads=2, %" PRIu64 " timed batches, %" PRIu64
               " rounds; spare budget: %s\n", opt.records, REC >> 10, opt.batch,
               (double)(opt.batch * REC) / (1 << 20), opt.prefetch, opt.batches, opt.rounds,
               opt.spare ? opt.spare : "the daemon's default");
        /* warm the daemon's mapping of the store: every record once */
        {
                ldr l;
                ldr_open(fd, h, 0, &l);
                for (uint64_t k = 0; k < 4 * opt.records / opt.batch; k++)
                        take(fd, &l);
                ldr_close(fd, &l);
        }
        uint64_t ring = 0;
        for (uint64_t round = 0; round < opt.rounds; round++) {
                ldr l;
                double o;
                set_spare("0"); /* drops the spare the last round left */
                ck_assert_uint_eq(spare_bytes(fd), 0);
                ldr_open(fd, h, 0, &l);
                for (uint64_t k = 0; k < opt.prefetch + 2; k++)
                        take(fd, &l);
                double t0 = tl_seconds();
                for (uint64_t k = 0; k < opt.batches; k++)
                        take(fd, &l);
                steady.v[steady.n++] = (tl_seconds() - t0) * 1e3 / (double)opt.batches;
                ldr_close(fd, &l);

                fresh.v[fresh.n++] = resume(fd, h, &l, &o);
                fresh_open.v[fresh_open.n++] = o;
                ring = l.ring_bytes;
                set_spare(opt.spare);
                ldr_close(fd, &l);
                for (double d = tl_seconds() + TL_TIMEOUT_MS / 1e3; spare_bytes(fd) != ring;)
                        if (tl_seconds() > d) {
                                fprintf(stderr, "bench-resume: no spare ring of %" PRIu64
                                        " bytes (is the budget under the ring's size?)\n", ring);
                                exit(1);
                        }

                spare.v[spare.n++] = resume(fd, h, &l, &o);
                spare_open.v[spare_open.n++] = o;
                ck_assert_uint_eq(spare_bytes(fd), 0); /* it took the spare */
                ldr_close(fd, &l);
                fresh_r.v[fresh_r.n++] = fresh.v[round] / steady.v[round];
                spare_r.v[spare_r.n++] = spare.v[round] / steady.v[round];
        }
        printf("ring: %" PRIu64 " MiB\n", ring >> 20);
        fig_print("steady batch time (prefetch, released at once)", &steady, "ms");
        fig_print("open at step 10^9 -> first batch, ring-spare=0", &fresh, "ms");
        fig_print("  of which LOADER_OPEN -> reply", &fresh_open, "ms");
        fig_print("  first batch / steady batch time", &fresh_r, "x");
        fig_print("open at step 10^9 -> first batch, spare ring", &spare, "ms");
        fig_print("  of which LOADER_OPEN -> reply", &spare_open, "ms");
        fig_print("  first batch / steady batch time", &spare_r, "x");
        close(fd);
        td_cleanup(&D);
        unlink(cfg_path);
        rmdir(cfg_dir);
        return 0;
}

START_TEST(run_bench) {
        ck_assert_int_eq(bench(), 0);
}
END_TEST

/* The numeric options and where they go. */
static const struct {
        const char *name;
        uint64_t *value;
} numeric[] = {
        { "--records", &opt.records }, { "--batch", &opt.batch }, { "--prefetch", &opt.prefetch },
        { "--batches", &opt.batches }, { "--rounds", &opt.rounds },
};

int main(int argc, char **argv) {
        for (int i = 1; i < argc; i++) {
                int more = i + 1 < argc;
                size_t k = 0;

                while (k < sizeof(numeric) / sizeof(numeric[0]) && strcmp(argv[i], numeric[k].name))
                        k++;
                if (k < sizeof(numeric) / sizeof(numeric[0]) && more)
                        *numeric[k].value = strtoull(argv[++i], NULL, 0);
                else if (!strcmp(argv[i], "--spare") && more)
                        opt.spare = argv[++i];
                else {
                        fprintf(stderr, "usage: ZRECORDD=... %s [--records N] [--batch B] "
                                "[--prefetch P] [--batches T] [--rounds R] [--spare BYTES]\n",
                                argv[0]);
                        return 2;
                }
        }
        if (opt.rounds < 1 || opt.rounds > ROUNDS_MAX || opt.batch > opt.records ||
            opt.batch == 0 || opt.prefetch == 0) {
                fprintf(stderr, "bench-resume: --rounds 1..%d, 1 <= --batch <= --records, "
                        "--prefetch >= 1\n", ROUNDS_MAX);
                return 2;
        }
        /* tclient asserts with libcheck: the benchmark runs as one unforked test */
        Suite *s = suite_create("bench-resume");
        TL_TCASE(s, "bench", 1200, run_bench);
        return tl_run_unforked(s, CK_NORMAL);
}
