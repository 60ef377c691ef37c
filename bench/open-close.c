/* open-close.c: what cutting a closed store's files to its data costs
 * (docs/FORMAT.md, "Apparent size").
 *
 * A store of 4 GiB chunks holding `--records` records of `--bytes` bytes
 * (raw) is opened and closed in a loop, each cycle timed on its own, in a
 * directory given by `--dir` (the file system is printed: a tmpfs syncs in
 * nothing, a disk pays its fdatasyncs). The cycles:
 *   - read-only: open with the shared lock, close (no file changes size);
 *   - writable, files cut: the open grows the tail chunk and the last .loc
 *     segment back to full size (ftruncate, fdatasync, a new mapping), the
 *     close syncs and cuts them to the data again: the cost of the format;
 *   - writable, files full: the same with the files put back at full size
 *     before each cycle (untimed), so the open grows nothing and only the
 *     close's cut is added to what a close always cost (its sync);
 *   - made writable: a read-only open (untimed), then zr_store_make_writable()
 *     (the daemon's first write) and the close, timed.
 * Each row: the median, the 10th and 90th percentile in microseconds, and the
 * open and the close apart. Prints `uptime` first: a loaded machine's figures
 * are noise. --quick runs a few cycles and asserts nothing.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

#include "store/store.h"
#include "workload.h"

#define TMPFS_MAGIC_ 0x01021994
#define CYCLES_DEFAULT 200
#define FULL_CHUNK ((off_t)1 << 32)
#define FULL_LOC ((off_t)1 << 32)

static void die(const char *what, const zr_error *err) {
        fprintf(stderr, "open-close: %s: %s\n", what, err ? err->message : strerror(errno));
        exit(1);
}

static void resize(int dfd, const char *name, off_t size) {
        int fd = openat(dfd, name, O_RDWR | O_CLOEXEC);
        if (fd < 0 || ftruncate(fd, size) < 0)
                die(name, NULL);
        close(fd);
}

enum cycle { CY_READ_ONLY, CY_CUT, CY_FULL, CY_MAKE_WRITABLE, CY_COUNT };

static const char *const cy_names[CY_COUNT] = {
        "read-only", "writable, files cut", "writable, files full", "made writable",
};

/* One cycle; the open's and the close's seconds into *ret_open, *ret_close. */
static void cycle(enum cycle c, int dfd, const char *tail, double *ret_open, double *ret_close) {
        zr_store_options ro = { .read_only = 1 }, rw = { 0 };
        zr_store *s = NULL;
        zr_error err = {0};
        uint64_t t0, t1, t2;

        if (c == CY_FULL) {
                resize(dfd, tail, FULL_CHUNK);
                resize(dfd, "0.loc", FULL_LOC);
        }
        if (c == CY_MAKE_WRITABLE && zr_store_open(dfd, &ro, &s, &err) < 0)
                die("open", &err);
        t0 = workload_now_ns();
        if (c == CY_MAKE_WRITABLE) {
                if (zr_store_make_writable(s, dfd, &err) < 0)
                        die("make writable", &err);
        } else if (zr_store_open(dfd, c == CY_READ_ONLY ? &ro : &rw, &s, &err) < 0) {
                die("open", &err);
        }
        t1 = workload_now_ns();
        if (zr_store_close(s, &err) < 0)
                die("close", &err);
        t2 = workload_now_ns();
        *ret_open = (double)(t1 - t0) / 1e3;
        *ret_close = (double)(t2 - t1) / 1e3;
}

static double pct(double *v, size_t n, double p) {
        workload_median(v, n); /* sorts */
        size_t k = (size_t)(p * (double)(n - 1) + 0.5);
        return v[k];
}

int main(int argc, char **argv) {
        const char *dir = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
        size_t cycles = CYCLES_DEFAULT, records = 178, bytes = 160;
        for (int i = 1; i < argc; i++) {
                if (strcmp(argv[i], "--quick") == 0)
                        cycles = 5;
                else if (strcmp(argv[i], "--dir") == 0 && i + 1 < argc)
                        dir = argv[++i];
                else if (strcmp(argv[i], "--cycles") == 0 && i + 1 < argc)
                        cycles = strtoull(argv[++i], NULL, 10);
                else if (strcmp(argv[i], "--records") == 0 && i + 1 < argc)
                        records = strtoull(argv[++i], NULL, 10);
                else if (strcmp(argv[i], "--bytes") == 0 && i + 1 < argc)
                        bytes = strtoull(argv[++i], NULL, 10);
                else {
                        fprintf(stderr, "usage: open-close [--quick] [--dir DIR] [--cycles N] "
                                "[--records N] [--bytes N]\n");
                        return 2;
                }
        }
        if (cycles < 2 || records == 0 || bytes == 0)
                return 2;
        char path[4096];
        snprintf(path, sizeof(path), "%s/zr-open-close-XXXXXX", dir);
        if (!mkdtemp(path))
                die(path, NULL);
        int dfd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        struct statfs fs;
        if (dfd < 0 || fstatfs(dfd, &fs) < 0)
                die(path, NULL);
        zr_store *s = NULL;
        zr_error err = {0};
        if (zr_store_create(dfd, ZR_CODEC_RAW, NULL, 0, NULL, &s, &err) < 0)
                die("create", &err);
        uint8_t *data = calloc(records, bytes);
        uint64_t *lens = malloc(records * sizeof(*lens));
        if (!data || !lens)
                die("memory", NULL);
        for (size_t i = 0; i < records; i++)
                lens[i] = bytes;
        if (zr_store_append(s, data, lens, records, NULL, &err) < 0 || zr_store_close(s, &err) < 0)
                die("fill", &err);

        FILE *up = popen("uptime", "r");
        char line[256] = "";
        if (up) {
                if (!fgets(line, sizeof(line), up))
                        line[0] = 0;
                pclose(up);
        }
        printf("open-close: %zu records of %zu bytes in %s (%s), %zu cycles each\nload:%s",
               records, bytes, path, fs.f_type == TMPFS_MAGIC_ ? "tmpfs" : "not tmpfs", cycles,
               line[0] ? line : " unknown\n");
        printf("%-22s %10s %10s %10s %10s %10s\n", "cycle", "median us", "p10 us", "p90 us",
               "open us", "close us");
        double *tot = malloc(cycles * sizeof(double)), *op = malloc(cycles * sizeof(double)),
               *cl = malloc(cycles * sizeof(double));
        if (!tot || !op || !cl)
                die("memory", NULL);
        for (int c = 0; c < CY_COUNT; c++) {
                for (size_t k = 0; k < cycles; k++) {
                        cycle((enum cycle)c, dfd, "0.chunk", &op[k], &cl[k]);
                        tot[k] = op[k] + cl[k];
                }
                double med = workload_median(tot, cycles);
                printf("%-22s %10.1f %10.1f %10.1f %10.1f %10.1f\n", cy_names[c], med,
                       pct(tot, cycles, 0.1), pct(tot, cycles, 0.9),
                       workload_median(op, cycles), workload_median(cl, cycles));
        }
        struct stat st;
        if (fstatat(dfd, "0.chunk", &st, 0) == 0)
                printf("closed: 0.chunk %lld bytes, records %zu bytes\n", (long long)st.st_size,
                       records * bytes);
        free(tot);
        free(op);
        free(cl);
        free(data);
        free(lens);
        unlinkat(dfd, "0.chunk", 0);
        unlinkat(dfd, "0.loc", 0);
        unlinkat(dfd, "meta.zr", 0);
        unlinkat(dfd, "schema.msgpack", 0);
        close(dfd);
        rmdir(path);
        return 0;
}
