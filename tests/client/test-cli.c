/* test-cli.c: the zrecord tool, run as a program against the real zrecordd.
 *
 * Each test runs the binary ($ZRECORD) with its output captured and checks the
 * exit code scripts rely on (0, 1, 2, 3), the --json documents on stdout and
 * the error names on stderr. .npy files are written byte by byte here (formats
 * 1.0 and 2.0); if python3 with numpy is installed, one file written by numpy
 * is imported too, and every --json output is checked to parse as JSON.
 * Exits 77 (skipped) when this build has no zrecordd.
 */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check-run.h"
#include "daemon.h"
#include "util.h"
#include "zrc.h"

static tl_daemon daemon_;
static const char *zrecord;
static bool have_python;  /* python3 that can parse JSON */
static bool have_numpy;

static const char *path(const char *name) {
        static char bufs[4][PATH_MAX];
        static int k;

        k = (k + 1) % 4;
        return tl_daemon_path(&daemon_, name, bufs[k]);
}

/* Runs zrecord --socket SOCK args... (NULL-terminated); captures output. */
static int run(char **ret_out, char **ret_err, ...) {
        char *argv[32];
        int argc = 0, r;
        va_list ap;

        argv[argc++] = (char *)zrecord;
        argv[argc++] = "--socket";
        argv[argc++] = daemon_.socket;
        va_start(ap, ret_err);
        for (char *a; (a = va_arg(ap, char *)) && argc < 31;)
                argv[argc++] = a;
        va_end(ap);
        argv[argc] = NULL;
        r = tl_exec_capture(argv, ret_out, ret_err);
        return r;
}

static void write_file(const char *p, const void *data, size_t n) {
        int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);

        ck_assert_int_ge(fd, 0);
        ck_assert_int_eq(write(fd, data, n), (ssize_t)n);
        close(fd);
}

/* Writes a .npy file: header of format `major` around `dict`, then data. */
static void write_npy(const char *p, unsigned major, const char *dict, const void *data,
                      size_t n) {
        uint8_t *buf = malloc(4096 + n);
        size_t pre = major == 1 ? 10 : 12, dlen = strlen(dict);
        size_t total = (pre + dlen + 1 + 63) / 64 * 64, hlen = total - pre;

        memcpy(buf, "\x93NUMPY", 6);
        buf[6] = (uint8_t)major;
        buf[7] = 0;
        buf[8] = hlen & 0xff;
        buf[9] = (hlen >> 8) & 0xff;
        if (major > 1)
                buf[10] = buf[11] = 0;
        memcpy(buf + pre, dict, dlen);
        memset(buf + pre + dlen, ' ', hlen - dlen - 1);
        buf[total - 1] = '\n';
        memcpy(buf + total, data, n);
        write_file(p, buf, total + n);
        free(buf);
}

/* Checks that s parses as JSON, when python3 is there to say so. */
static void check_json(const char *s) {
        ck_assert_msg(tl_is_json(s) != 0, "not JSON: %s", s);
}

/* The unsigned number after "key": in a JSON text, or -1. */
static long long json_uint(const char *s, const char *key) {
        char pat[64];
        const char *p;

        snprintf(pat, sizeof(pat), "\"%s\": ", key);
        p = strstr(s, pat);
        return p ? strtoll(p + strlen(pat), NULL, 10) : -1;
}

#define CONTAINS(s, needle) ck_assert_msg(strstr((s), (needle)), "\"%s\" not in: %s", (needle), (s))

START_TEST(test_usage) {
        char *out = NULL, *err = NULL;
        char *argv[] = { (char *)zrecord, "--help", NULL };
        char *argv2[] = { (char *)zrecord, "import", "--help", NULL };
        char *argv3[] = { (char *)zrecord, "frobnicate", NULL };
        char *argv4[] = { (char *)zrecord, NULL };

        ck_assert_int_eq(tl_exec_capture(argv, &out, &err), 0);
        CONTAINS(out, "Usage: zrecord");
        CONTAINS(out, "Exit status");
        CONTAINS(out, "3  cannot connect");
        free(out);
        free(err);
        ck_assert_int_eq(tl_exec_capture(argv2, &out, &err), 0);
        CONTAINS(out, "--codec");
        free(out);
        free(err);
        ck_assert_int_eq(tl_exec_capture(argv3, &out, &err), 2);
        CONTAINS(err, "unknown command");
        CONTAINS(err, "--help");
        ck_assert_str_eq(out, "");
        free(out);
        free(err);
        ck_assert_int_eq(tl_exec_capture(argv4, NULL, &err), 2);
        free(err);
        ck_assert_int_eq(run(NULL, &err, "cat", NULL), 2);
        CONTAINS(err, "cat takes one PATH");
        free(err);
        ck_assert_int_eq(run(NULL, &err, "info", "/x", "--chunk", "3", NULL), 2);
        free(err);
}
END_TEST

START_TEST(test_no_daemon) {
        char *out = NULL, *err = NULL;
        char *argv[] = { (char *)zrecord, "--socket", (char *)path("none.sock"), "status", NULL };
        char *argv2[] = { (char *)zrecord, "--json", "--socket", (char *)path("none.sock"), "info",
                          "/x", NULL };

        ck_assert_int_eq(tl_exec_capture(argv, &out, &err), 3);
        CONTAINS(err, "ENOENT");
        CONTAINS(err, "none.sock");
        ck_assert_str_eq(out, "");
        free(out);
        free(err);
        ck_assert_int_eq(tl_exec_capture(argv2, NULL, NULL), 3);

        /* import checks its file first: a bad file is reported without a daemon */
        write_file(path("bad.npy"), "not numpy", 9);
        {
                char *argv3[] = { (char *)zrecord, "--socket", (char *)path("none.sock"), "import",
                                  (char *)path("bad.npy"), (char *)path("nd"), NULL };

                ck_assert_int_eq(tl_exec_capture(argv3, NULL, &err), 1);
                CONTAINS(err, "not a .npy");
                free(err);
        }
        /* a good file and no daemon: exit 3, nothing created */
        write_npy(path("good.npy"), 1, "{'descr': '|u1', 'fortran_order': False, 'shape': (1,), }",
                  "x", 1);
        {
                char *argv4[] = { (char *)zrecord, "--socket", (char *)path("none.sock"), "import",
                                  (char *)path("good.npy"), (char *)path("nd"), NULL };

                ck_assert_int_eq(tl_exec_capture(argv4, NULL, NULL), 3);
                ck_assert_int_eq(access(path("nd"), F_OK), -1);
        }
}
END_TEST

START_TEST(test_status) {
        char *out = NULL, *err = NULL;
        zrc_conn *c = NULL;
        zrc_dataset *d = NULL;
        zrc_loader *l = NULL;
        zrc_schema s;
        int64_t v[16] = { 0 };
        zrc_loader_options o = { .sampler = "cyclic", .batch_size = 4, .seed = 5 };

        ck_assert_int_eq(run(&out, &err, "status", NULL), 0);
        CONTAINS(out, "clients:");
        CONTAINS(out, "loop fills: ");
        CONTAINS(out, "\ncontrol:    ");
        CONTAINS(out, " batches announced in control memory, ");
        CONTAINS(out, "prefetch:");
        CONTAINS(out, " steps cold (read with pread); direct reads auto (stores above ");
        CONTAINS(out, "budget cache");
        free(out);
        free(err);
        ck_assert_int_eq(run(&out, &err, "status", "--json", NULL), 0);
        /* this tool's connection; earlier ones may not be reaped yet */
        ck_assert_int_ge(json_uint(out, "clients"), 1);
        CONTAINS(out, "\"per_loader\": []");
        CONTAINS(out, "\"cache\": {");
        CONTAINS(out, "\"prefetch\": {\"backend\": ");
        CONTAINS(out, "\"budgets\": {\"memory\": ");
        /* the STATUS keys of direct reads and loop fills, a default daemon's
         * values: io-direct auto above half its memory, no store read so */
        ck_assert_int_ge(json_uint(out, "loop_fills"), 0);
        /* control memory's counters */
        ck_assert_int_ge(json_uint(out, "ctl_batches"), 0);
        ck_assert_int_ge(json_uint(out, "ctl_wakes"), 0);
        ck_assert_int_eq(json_uint(out, "ctl_faults"), 0);
        ck_assert_int_ge(json_uint(out, "cold"), 0);
        CONTAINS(out, "\"direct_mode\": \"auto\"");
        ck_assert_int_gt(json_uint(out, "direct_min"), 0);
        ck_assert_int_ge(json_uint(out, "direct"), 0);
        ck_assert_int_ge(json_uint(out, "fits"), 0);
        ck_assert_int_eq(json_uint(out, "direct_steps"), 0);
        ck_assert_int_eq(json_uint(out, "direct_bytes"), 0);
        ck_assert_int_eq(json_uint(out, "direct_copied"), 0);
        ck_assert_int_eq(json_uint(out, "direct_fallbacks"), 0);
        ck_assert_int_eq(json_uint(out, "direct_errors"), 0);
        check_json(out);
        free(out);
        free(err);

        /* a loader of another client shows up with its counters */
        ck_assert_int_eq(zrc_connect(daemon_.socket, &c, NULL), 0);
        if (!zrc_has_feature(c, "loader")) {
                zrc_disconnect(c);
                return;
        }
        ck_assert_int_eq(zrc_schema_dense(&s, "<i8", NULL, 0, ZRC_CODEC_RAW), 0);
        ck_assert_int_eq(zrc_dataset_create(c, path("st"), &s, NULL, 0, &d), 0);
        ck_assert_int_eq(zrc_dataset_append_dense(d, v, 16, NULL), 0);
        ck_assert_int_eq(zrc_loader_open(c, &d, 1, &o, &l), 0);
        {
                zrc_loader_batch b;

                ck_assert_int_eq(zrc_loader_next(l, &b), 0);
        }
        ck_assert_int_eq(run(&out, &err, "status", "--json", NULL), 0);
        ck_assert_int_ge(json_uint(out, "clients"), 2);
        CONTAINS(out, "\"loaders\": 1");
        CONTAINS(out, "\"sampler\": \"cyclic\"");
        CONTAINS(out, "\"batch_size\": 4");
        /* its depth: from 2, at most its slots */
        {
                const char *pl = strstr(out, "\"per_loader\": [");
                ck_assert_ptr_nonnull(pl);
                ck_assert_int_ge(json_uint(pl, "depth"), 2);
                ck_assert_int_ge(json_uint(pl, "depth_raises"), 0);
        }
        check_json(out);
        free(out);
        free(err);
        ck_assert_int_eq(run(&out, &err, "status", NULL), 0);
        CONTAINS(out, "cyclic, batch 4");
        CONTAINS(out, " waited for reads; depth ");
        free(out);
        free(err);
        zrc_disconnect(c);
}
END_TEST

START_TEST(test_import_cat_round_trip) {
        int16_t data[50 * 3];
        char *out = NULL, *err = NULL;

        for (int i = 0; i < 150; i++)
                data[i] = (int16_t)(i - 75);
        write_npy(path("a.npy"), 1, "{'descr': '<i2', 'fortran_order': False, 'shape': (50, 3), }",
                  data, sizeof(data));

        ck_assert_int_eq(run(&out, &err, "import", path("a.npy"), path("a"), "--json", "--codec",
                             "raw", NULL), 0);
        CONTAINS(out, "\"records\": 50");
        CONTAINS(out, "\"first\": 0");
        CONTAINS(out, "\"item_shape\": [3]");
        check_json(out);
        ck_assert_str_eq(err, ""); /* no progress display without a terminal */
        free(out);
        free(err);

        ck_assert_int_eq(run(&out, &err, "info", path("a"), NULL), 0);
        CONTAINS(out, "length:     50");
        CONTAINS(out, "dtype:      <i2");
        CONTAINS(out, "item_shape: (3,)");
        free(out);
        free(err);
        ck_assert_int_eq(run(&out, &err, "--json", "info", path("a"), NULL), 0);
        CONTAINS(out, "\"length\": 50");
        CONTAINS(out, "\"kind\": \"dense\"");
        CONTAINS(out, "\"codec\": \"raw\"");
        CONTAINS(out, "\"record_bytes\": 6");
        check_json(out);
        free(out);
        free(err);
        /* without --codec: zstd, from_numpy's default */
        ck_assert_int_eq(run(NULL, NULL, "import", path("a.npy"), path("a-default"), NULL), 0);
        ck_assert_int_eq(run(&out, &err, "--json", "info", path("a-default"), NULL), 0);
        CONTAINS(out, "\"codec\": \"zstd\"");
        free(out);
        free(err);

        ck_assert_int_eq(run(&out, &err, "cat", path("a"), "0", "49", "0", NULL), 0);
        ck_assert_str_eq(out, "0: -75 -74 -73\n49: 72 73 74\n0: -75 -74 -73\n");
        free(out);
        free(err);
        ck_assert_int_eq(run(&out, &err, "cat", path("a"), "--range", "1:3", NULL), 0);
        ck_assert_str_eq(out, "1: -72 -71 -70\n2: -69 -68 -67\n");
        free(out);
        free(err);
        ck_assert_int_eq(run(&out, &err, "cat", path("a"), "--range", "48:", "--hex", NULL), 0);
        /* 69 = 0x45, 70 = 0x46, 71 = 0x47; little-endian */
        ck_assert_str_eq(out, "48: 45 00 46 00 47 00\n49: 48 00 49 00 4a 00\n");
        free(out);
        free(err);
        ck_assert_int_eq(run(&out, &err, "cat", path("a"), "5", "--json", NULL), 0);
        CONTAINS(out, "\"records\": [{\"index\": 5, \"values\": [-60, -59, -58]}]");
        check_json(out);
        free(out);
        free(err);
        ck_assert_int_eq(run(&out, &err, "cat", path("a"), "5", "--json", "--hex", NULL), 0);
        CONTAINS(out, "\"hex\": \"c4ffc5ffc6ff\"");
        check_json(out);
        free(out);
        free(err);
        ck_assert_int_eq(run(&out, &err, "cat", path("a"), NULL), 0);
        ck_assert_uint_eq(strlen(out) > 0, 1);
        {
                int lines = 0;

                for (const char *p = out; *p; p++)
                        lines += *p == '\n';
                ck_assert_int_eq(lines, 50);
        }
        free(out);
        free(err);

        ck_assert_int_eq(run(&out, &err, "stats", path("a"), "--json", NULL), 0);
        CONTAINS(out, "\"records\": 50");
        CONTAINS(out, "\"live_bytes\": 300");
        CONTAINS(out, "\"reclaimable\": 0");
        check_json(out);
        free(out);
        free(err);
        ck_assert_int_eq(run(&out, &err, "verify", path("a"), "--json", NULL), 0);
        CONTAINS(out, "\"ok\": true");
        CONTAINS(out, "\"records\": 50");
        CONTAINS(out, "\"bad_indices\": []");
        check_json(out);
        free(out);
        free(err);
        ck_assert_int_eq(run(&out, &err, "verify", path("a"), NULL), 0);
        CONTAINS(out, "50 records checked, 0 bad");
        free(out);
        free(err);
}
END_TEST

START_TEST(test_import_progress) {
        /* on a terminal, import shows its progress on stderr; stdout stays clean */
        enum { N = 2000 };
        static uint32_t data[N * 16];
        char *argv[] = { (char *)zrecord, "--socket", daemon_.socket, "import", "--chunk", "500",
                         (char *)path("p.npy"), (char *)path("p"), NULL };
        char buf[8192], *out = NULL;
        size_t got = 0;
        int master, status = 0;
        pid_t pid;

        for (int i = 0; i < N * 16; i++)
                data[i] = (uint32_t)i;
        write_npy(path("p.npy"), 1, "{'descr': '<u4', 'fortran_order': False, 'shape': (2000, 16), }",
                  data, sizeof(data));
        master = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
        ck_assert_int_ge(master, 0);
        ck_assert_int_eq(grantpt(master), 0);
        ck_assert_int_eq(unlockpt(master), 0);
        {
                char outname[] = "/tmp/zrc-pty-out-XXXXXX";
                int ofd = mkostemp(outname, O_CLOEXEC);

                unlink(outname);
                pid = fork();
                ck_assert_int_ge(pid, 0);
                if (pid == 0) {
                        int slave = open(ptsname(master), O_RDWR | O_NOCTTY);

                        dup2(slave, STDERR_FILENO);
                        dup2(ofd, STDOUT_FILENO);
                        execv(argv[0], argv);
                        _exit(127);
                }
                for (;;) {
                        ssize_t n = read(master, buf + got, sizeof(buf) - 1 - got);

                        if (n <= 0)
                                break; /* EIO once the child's side is closed */
                        got += (size_t)n;
                }
                waitpid(pid, &status, 0);
                buf[got] = 0;
                lseek(ofd, 0, SEEK_SET);
                out = calloc(1, 4096);
                ck_assert_int_ge(read(ofd, out, 4095), 0);
                close(ofd);
        }
        close(master);
        ck_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
        CONTAINS(buf, "import: 500/2000 records ( 25%)");
        CONTAINS(buf, "import: 2000/2000 records (100%)");
        CONTAINS(out, "imported 2000 records of <u4 (16,)");
        ck_assert(!strstr(out, "records ("));
        free(out);
}
END_TEST

START_TEST(test_compact) {
        zrc_conn *c = NULL;
        zrc_dataset *d = NULL;
        char *out = NULL, *err = NULL;
        double v[10];

        for (int i = 0; i < 10; i++)
                v[i] = i / 4.0;
        write_npy(path("c.npy"), 2, "{'descr': '<f8', 'fortran_order': False, 'shape': (10,), }",
                  v, sizeof(v));
        ck_assert_int_eq(run(NULL, NULL, "import", path("c.npy"), path("c"), "--chunk", "3",
                             "--codec", "raw", NULL), 0);
        ck_assert_int_eq(zrc_connect(daemon_.socket, &c, NULL), 0);
        ck_assert_int_eq(zrc_dataset_open(c, path("c"), ZRC_OPEN_WRITABLE, &d), 0);
        ck_assert_int_eq(zrc_dataset_delete(d, (uint64_t[]){ 0, 1 }, 2, NULL), 0);
        zrc_disconnect(c);

        ck_assert_int_eq(run(&out, &err, "stats", path("c"), NULL), 0);
        CONTAINS(out, "records:     8");
        CONTAINS(out, "reclaimable: 16");
        free(out);
        free(err);
        ck_assert_int_eq(run(&out, &err, "compact", path("c"), "--json", NULL), 0);
        CONTAINS(out, "\"records\": 8");
        CONTAINS(out, "\"reclaimable\": 0");
        check_json(out);
        free(out);
        free(err);
        /* swap-last in descending index order: 9 took index 1, then 8 index 0 */
        ck_assert_int_eq(run(&out, &err, "cat", path("c"), NULL), 0);
        ck_assert_str_eq(out, "0: 2\n1: 2.25\n2: 0.5\n3: 0.75\n4: 1\n5: 1.25\n6: 1.5\n7: 1.75\n");
        free(out);
        free(err);
}
END_TEST

START_TEST(test_import_codecs) {
        enum { N = 3000, W = 64 };
        uint8_t *data = malloc(N * W);
        char *out = NULL, *err = NULL;

        /* structured enough for zstd to train a dictionary */
        for (int i = 0; i < N; i++)
                for (int j = 0; j < W; j++)
                        data[i * W + j] = (uint8_t)(j < 32 ? j * 3 : (i * 7 + j) % 13);
        write_npy(path("u.npy"), 1, "{'descr': '|u1', 'fortran_order': False, 'shape': (3000, 8, 8), }",
                  data, N * W);

        ck_assert_int_eq(run(&out, &err, "import", path("u.npy"), path("u-zstd"), "--codec", "zstd",
                             "--chunk", "700", NULL), 0);
        CONTAINS(out, "imported 3000 records of |u1 (8, 8)");
        free(out);
        free(err);
        ck_assert_int_eq(run(&out, &err, "import", path("u.npy"), path("u-dict"), "--codec",
                             "zstd_dict", "--dict-tier", "small", "--json", NULL), 0);
        CONTAINS(out, "\"codec\": \"zstd_dict\"");
        ck_assert_msg(!strstr(out, "\"dict_bytes\": 0"), "no dictionary: %s", out);
        free(out);
        free(err);
        /* --level: the same records at 19 with the dictionary and at 1 without */
        ck_assert_int_eq(run(&out, &err, "import", path("u.npy"), path("u-dict19"), "--codec",
                             "zstd_dict", "--dict-tier", "small", "--level", "19", NULL), 0);
        free(out);
        free(err);
        ck_assert_int_eq(run(&out, &err, "import", path("u.npy"), path("u-zstd1"), "--codec",
                             "zstd", "--level", "1", NULL), 0);
        free(out);
        free(err);
        for (int k = 0; k < 4; k++) {
                static const char *const names[] = { "u-zstd", "u-dict", "u-dict19", "u-zstd1" };
                const char *p = path(names[k]);

                ck_assert_int_eq(run(&out, &err, "cat", p, "2999", "--hex", NULL), 0);
                ck_assert_uint_eq(strlen(out), strlen("2999:") + W * 3 + 1);
                free(out);
                free(err);
                ck_assert_int_eq(run(&out, &err, "verify", p, NULL), 0);
                free(out);
                free(err);
        }
        free(data);
}
END_TEST

START_TEST(test_import_numpy) {
        char *out = NULL, *err = NULL;
        char script[512];
        char *argv[] = { "/usr/bin/env", "python3", "-c", script, NULL };

        if (!have_numpy)
                return; /* reported once by main() */
        snprintf(script, sizeof(script),
                 "import numpy as np; np.save('%s', np.arange(80, dtype='<f4').reshape(20, 2, 2))",
                 path("np.npy"));
        ck_assert_int_eq(tl_exec_capture(argv, NULL, NULL), 0);
        ck_assert_int_eq(run(&out, &err, "import", path("np.npy"), path("np"), NULL), 0);
        free(out);
        free(err);
        ck_assert_int_eq(run(&out, &err, "cat", path("np"), "19", "--json", NULL), 0);
        CONTAINS(out, "\"values\": [76, 77, 78, 79]");
        CONTAINS(out, "\"item_shape\": [2, 2]");
        free(out);
        free(err);
        /* and a big-endian float64 array prints by value */
        snprintf(script, sizeof(script),
                 "import numpy as np; np.save('%s', np.array([[1.5, -2.0], [3.25, 1e300]], dtype='>f8'))",
                 path("be.npy"));
        ck_assert_int_eq(tl_exec_capture(argv, NULL, NULL), 0);
        ck_assert_int_eq(run(&out, &err, "import", path("be.npy"), path("be"), NULL), 0);
        free(out);
        free(err);
        ck_assert_int_eq(run(&out, &err, "cat", path("be"), NULL), 0);
        ck_assert_str_eq(out, "0: 1.5 -2\n1: 3.25 1.0000000000000001e+300\n");
        free(out);
        free(err);
}
END_TEST

START_TEST(test_ragged_cat) {
        zrc_conn *c = NULL;
        zrc_dataset *d = NULL;
        zrc_schema s;
        int32_t a[] = { 1, 2, 3 }, b[] = { 9 };
        const void *payloads[] = { a, b, NULL };
        uint64_t shapes[] = { 3, 1, 0 };
        char *out = NULL, *err = NULL;

        ck_assert_int_eq(zrc_connect(daemon_.socket, &c, NULL), 0);
        ck_assert_int_eq(zrc_schema_ragged(&s, "<i4", 1, ZRC_CODEC_ZSTD), 0);
        ck_assert_int_eq(zrc_dataset_create(c, path("r"), &s, NULL, 0, &d), 0);
        ck_assert_int_eq(zrc_dataset_append_ragged(d, 3, shapes, payloads, NULL), 0);
        zrc_disconnect(c);

        ck_assert_int_eq(run(&out, &err, "cat", path("r"), NULL), 0);
        ck_assert_str_eq(out, "0 (3,): 1 2 3\n1 (1,): 9\n2 (0,):\n");
        free(out);
        free(err);
        ck_assert_int_eq(run(&out, &err, "cat", path("r"), "1", "--json", NULL), 0);
        CONTAINS(out, "{\"index\": 1, \"shape\": [1], \"values\": [9]}");
        CONTAINS(out, "\"ndim\": 1");
        check_json(out);
        free(out);
        free(err);
        ck_assert_int_eq(run(&out, &err, "info", path("r"), NULL), 0);
        CONTAINS(out, "kind:       ragged");
        CONTAINS(out, "ndim:       1");
        free(out);
        free(err);
}
END_TEST

/* convert both ways: records of differing ndim into loaderx 1.5.7's layout (its
 * schema.msgpack then lists every shape) and back; cat reads each. */
START_TEST(test_convert) {
        zrc_conn *c = NULL;
        zrc_dataset *d = NULL;
        zrc_schema s;
        int32_t a[] = { 1, 2, 3, 4, 5, 6 }, b[] = { 9, 8 };
        uint8_t packed[128];
        uint64_t sizes[2];
        char *out = NULL, *err = NULL, schema[PATH_MAX + 32];
        struct stat st;

        ck_assert_int_eq(zrc_connect(daemon_.socket, &c, NULL), 0);
        ck_assert_int_eq(zrc_schema_ragged(&s, "<i4", 0, ZRC_CODEC_ZSTD), 0);
        ck_assert_int_eq(zrc_dataset_create(c, path("conv-src"), &s, NULL, 0, &d), 0);
        sizes[0] = zrc_ragged_pack(packed, (uint64_t[]){ 2, 3 }, 2, 4, a);
        sizes[1] = zrc_ragged_pack(packed + sizes[0], (uint64_t[]){ 2 }, 1, 4, b);
        ck_assert_int_eq(zrc_dataset_append(d, &(zrc_records){ .count = 2, .data = packed,
                                                                .sizes = sizes }, NULL), 0);
        zrc_disconnect(c);

        ck_assert_int_eq(run(&out, &err, "convert", "--to", "loaderx157", path("conv-src"),
                             path("conv-lx"), NULL), 0);
        CONTAINS(out, "2 records converted to loaderx 1.5.7's layout");
        free(out);
        free(err);
        snprintf(schema, sizeof(schema), "%s/schema.msgpack", path("conv-lx"));
        ck_assert_int_eq(stat(schema, &st), 0);
        ck_assert_int_eq(run(&out, &err, "cat", path("conv-lx"), NULL), 0);
        ck_assert_str_eq(out, "0 (2, 3): 1 2 3 4 5 6\n1 (2,): 9 8\n");
        free(out);
        free(err);
        ck_assert_int_eq(run(&out, &err, "--json", "convert", path("conv-lx"), path("conv-back"),
                             "--to", "zrecord", NULL), 0);
        CONTAINS(out, "\"records\": 2");
        check_json(out);
        free(out);
        free(err);
        ck_assert_int_eq(run(&out, &err, "cat", path("conv-back"), "1", NULL), 0);
        ck_assert_str_eq(out, "1 (2,): 9 8\n");
        free(out);
        free(err);
        /* the same layout again: a daemon error, exit 1, named */
        ck_assert_int_eq(run(&out, &err, "convert", "--to", "zrecord", path("conv-back"),
                             path("conv-again"), NULL), 1);
        CONTAINS(err, "ZR_E_SCHEMA");
        free(out);
        free(err);
        ck_assert_int_eq(run(&out, &err, "convert", path("conv-back"), path("x"), NULL), 2);
        free(out);
        free(err);
}
END_TEST

START_TEST(test_set_info) {
        zrc_conn *c = NULL;
        zrc_dataset *d = NULL;
        zrc_schema s;
        char *out = NULL, *err = NULL;

        ck_assert_int_eq(mkdir(path("pair"), 0755), 0);
        ck_assert_int_eq(zrc_connect(daemon_.socket, &c, NULL), 0);
        ck_assert_int_eq(zrc_schema_dense(&s, "<i8", NULL, 0, ZRC_CODEC_RAW), 0);
        ck_assert_int_eq(zrc_dataset_create(c, path("pair/x"), &s, NULL, 0, &d), 0);
        zrc_dataset_close(d);
        ck_assert_int_eq(zrc_dataset_create(c, path("pair/y"), &s, NULL, 0, &d), 0);
        zrc_disconnect(c);
        ck_assert_int_eq(run(&out, &err, "info", path("pair"), "--json", NULL), 0);
        CONTAINS(out, "\"kind\": \"set\"");
        CONTAINS(out, "\"name\": \"x\"");
        CONTAINS(out, "\"name\": \"y\"");
        check_json(out);
        free(out);
        free(err);
}
END_TEST

/* zrecord with the arguments after `empty_stdout` exits 1 with `needle` on
 * stderr (and, if empty_stdout, nothing on stdout). */
#define EXPECT_ERROR(needle, empty_stdout, ...)                                 \
        do {                                                                    \
                char *o_ = NULL, *e_ = NULL;                                    \
                ck_assert_int_eq(run(&o_, &e_, __VA_ARGS__, NULL), 1);          \
                CONTAINS(e_, needle);                                           \
                if (empty_stdout)                                               \
                        ck_assert_str_eq(o_, "");                               \
                free(o_);                                                       \
                free(e_);                                                       \
        } while (0)

/* The lines of `zrecord batch` (text) as (source, index) per position. */
static size_t batch_lines(const char *out, uint32_t *src, uint64_t *idx, size_t max) {
        size_t n = 0;

        for (const char *l = strchr(out, '\n'); l && *++l && n < max; l = strchr(l, '\n')) {
                unsigned long long j, a, b;
                if (sscanf(l, "%llu: %llu:%llu", &j, &a, &b) == 3) {
                        ck_assert_uint_eq(j, n);
                        src[n] = (uint32_t)a;
                        idx[n++] = b;
                } else if (sscanf(l, "%llu: %llu", &j, &a) == 2) {
                        ck_assert_uint_eq(j, n);
                        src[n] = 0;
                        idx[n++] = a;
                }
        }
        return n;
}

/* `where` lists a step exactly when `batch` of that step holds the record:
 * for a cyclic run of two ranks and a mixture of two sources (one of its own
 * iid sampler), over every record; --values prints the records; --json parses;
 * refusals exit 1 with the daemon's error. */
START_TEST(test_where_batch) {
        enum { N = 30, M = 7, STEPS = 12 };
        int32_t a[N], b[M];
        int64_t c[M] = { 0 };
        static char want[N + M][4096];
        char step[16], rank[16], rec[32], line[96];
        uint32_t src[8];
        uint64_t idx[8];
        char *out = NULL, *err = NULL;
        char sa[PATH_MAX + 8], sb[PATH_MAX + 8], s1a[PATH_MAX + 8], s1c[PATH_MAX + 8];

        for (int i = 0; i < N; i++)
                a[i] = i * 10;
        for (int i = 0; i < M; i++)
                b[i] = i * 1000 + 7;
        write_npy(path("wa.npy"), 1, "{'descr': '<i4', 'fortran_order': False, 'shape': (30,), }", a,
                  sizeof(a));
        write_npy(path("wb.npy"), 1, "{'descr': '<i4', 'fortran_order': False, 'shape': (7,), }", b,
                  sizeof(b));
        write_npy(path("wc.npy"), 1, "{'descr': '<i8', 'fortran_order': False, 'shape': (7,), }", c,
                  sizeof(c));
        ck_assert_int_eq(run(NULL, NULL, "import", path("wa.npy"), path("wa"), NULL), 0);
        ck_assert_int_eq(run(NULL, NULL, "import", path("wb.npy"), path("wb"), NULL), 0);
        ck_assert_int_eq(run(NULL, NULL, "import", path("wc.npy"), path("wc"), NULL), 0);
        snprintf(sa, sizeof(sa), "3=%s", path("wa"));
        snprintf(sb, sizeof(sb), "1,iid=%s", path("wb"));
        snprintf(s1a, sizeof(s1a), "1=%s", path("wa"));
        snprintf(s1c, sizeof(s1c), "1=%s", path("wc"));

        /* a cyclic run of 2 ranks of 4: every step's batches, then `where` of every record */
        memset(want, 0, sizeof(want));
        for (int s = 0; s < STEPS; s++)
                for (int r = 0; r < 2; r++) {
                        snprintf(step, sizeof(step), "%d", s);
                        snprintf(rank, sizeof(rank), "%d", r);
                        ck_assert_int_eq(run(&out, NULL, "batch", path("wa"), "--step", step, "--rank",
                                             rank, "--world-size", "2", "--sampler", "cyclic", "--seed",
                                             "5", "--batch", "4", NULL), 0);
                        ck_assert_uint_eq(batch_lines(out, src, idx, 8), 4);
                        for (int j = 0; j < 4; j++) {
                                ck_assert_uint_lt(idx[j], N);
                                snprintf(line, sizeof(line), "step %d rank %d position %d\n", s, r, j);
                                strcat(want[idx[j]], line);
                        }
                        free(out);
                }
        for (int i = 0; i < N; i++) {
                snprintf(rec, sizeof(rec), "%d", i);
                ck_assert_int_eq(run(&out, NULL, "where", path("wa"), rec, "--world-size", "2",
                                     "--sampler", "cyclic", "--seed", "5", "--batch", "4", "--range",
                                     "0:12", NULL), 0);
                if (!want[i][0])
                        CONTAINS(out, "is in no batch of steps 0 to 11");
                else
                        ck_assert_str_eq(out, want[i]);
                free(out);
        }
        /* a mixture: source 0 (wa, weight 3, cyclic), source 1 (wb, weight 1, iid) */
        memset(want, 0, sizeof(want));
        for (int s = 0; s < STEPS; s++) {
                snprintf(step, sizeof(step), "%d", s);
                ck_assert_int_eq(run(&out, NULL, "batch", "--source", sa, "--source", sb,
                                     "--step", step, "--sampler", "cyclic", "--seed", "9", "--batch",
                                     "5", NULL), 0);
                ck_assert_uint_eq(batch_lines(out, src, idx, 8), 5);
                for (int j = 0; j < 5; j++) {
                        ck_assert_uint_lt(src[j], 2);
                        ck_assert_uint_lt(idx[j], src[j] ? M : N);
                        snprintf(line, sizeof(line), "step %d rank 0 position %d\n", s, j);
                        strcat(want[src[j] * N + idx[j]], line);
                }
                free(out);
        }
        for (int k = 0; k < 2; k++)
                for (int i = 0; i < (k ? M : N); i++) {
                        snprintf(rec, sizeof(rec), "%d:%d", k, i);
                        ck_assert_int_eq(run(&out, NULL, "where", "--source", sa, "--source",
                                             sb, rec, "--sampler", "cyclic", "--seed", "9",
                                             "--batch", "5", "--range", "0:12", NULL), 0);
                        if (!want[k * N + i][0])
                                CONTAINS(out, "is in no batch");
                        else
                                ck_assert_str_eq(out, want[k * N + i]);
                        free(out);
                }
        /* --values: each record's value; --json parses */
        ck_assert_int_eq(run(&out, NULL, "batch", "--source", sa, "--source", sb, "--step",
                             "3", "--sampler", "cyclic", "--seed", "9", "--batch", "5", "--values",
                             NULL), 0);
        ck_assert_uint_eq(batch_lines(out, src, idx, 8), 5);
        for (int j = 0; j < 5; j++) {
                snprintf(line, sizeof(line), "\n  wa: %d\n", src[j] ? b[idx[j]] : a[idx[j]]);
                CONTAINS(out, line);
        }
        free(out);
        ck_assert_int_eq(run(&out, NULL, "--json", "batch", "--source", sa, "--source", sb,
                             "--step", "3", "--sampler", "cyclic", "--seed", "9", "--batch", "5",
                             "--values", NULL), 0);
        check_json(out);
        CONTAINS(out, "\"source\": ");
        free(out);
        ck_assert_int_eq(run(&out, NULL, "--json", "where", path("wa"), "3", "--sampler", "iid",
                             "--seed", "1", "--batch", "4", NULL), 0);
        check_json(out);
        ck_assert_int_eq(json_uint(out, "stop"), 8); /* the first pass: ceil(30 / 4) steps */
        free(out);
        /* refusals */
        EXPECT_ERROR("ZR_E_SAMPLER", false, "where", path("wa"), "30", "--sampler", "cyclic",
                     "--seed", "1", "--batch", "4");
        ck_assert_int_eq(run(&out, &err, "batch", "--source", s1a, "--source", s1c, "--step", "0",
                             "--sampler", "cyclic", "--seed", "1", "--batch", "4", NULL), 1);
        CONTAINS(err, "ZR_E_SCHEMA");
        CONTAINS(err, "source 1 has dtype '<i8', source 0 '<i4'");
        free(out);
        free(err);
}
END_TEST

START_TEST(test_errors) {
        int8_t data[4] = { 1, 2, 3, 4 };

        write_npy(path("e.npy"), 1, "{'descr': '|i1', 'fortran_order': False, 'shape': (4,), }",
                  data, sizeof(data));
        ck_assert_int_eq(run(NULL, NULL, "import", path("e.npy"), path("e"), NULL), 0);

        /* index out of range: exit 1, the error's name on stderr, stdout clean */
        EXPECT_ERROR("ZR_E_RANGE", true, "cat", path("e"), "4");
        /* a store already there */
        EXPECT_ERROR("ZR_E_EXISTS", false, "import", path("e.npy"), path("e"));
        /* not a store */
        mkdir(path("empty"), 0755);
        EXPECT_ERROR("ZR_E_NOT_STORE", false, "stats", path("empty"));
        EXPECT_ERROR("ENOENT", true, "info", path("nowhere"), "--json");
        /* bad .npy files: Fortran order, truncated data, not .npy, missing */
        write_npy(path("f.npy"), 1, "{'descr': '|i1', 'fortran_order': True, 'shape': (2, 2), }",
                  data, sizeof(data));
        EXPECT_ERROR("Fortran", false, "import", path("f.npy"), path("f"));
        write_npy(path("t.npy"), 1, "{'descr': '<i4', 'fortran_order': False, 'shape': (9,), }",
                  data, sizeof(data));
        EXPECT_ERROR("truncated", false, "import", path("t.npy"), path("t"));
        write_file(path("x.npy"), "hello, world", 12);
        EXPECT_ERROR("not a .npy", false, "import", path("x.npy"), path("x"));
        EXPECT_ERROR("missing.npy", false, "import", path("missing.npy"), path("m"));
        /* compact needs write access to meta.zr */
        chmod(path("e/meta.zr"), 0444);
        if (geteuid() != 0)
                EXPECT_ERROR("EACCES", false, "compact", path("e"));
        chmod(path("e/meta.zr"), 0644);
}
END_TEST

int main(void) {
        char *probe[] = { "/usr/bin/env", "python3", "-c", "import json", NULL };
        char *probe_np[] = { "/usr/bin/env", "python3", "-c", "import numpy", NULL };
        Suite *s = suite_create("cli");

        zrecord = getenv("ZRECORD");
        if (!zrecord || access(zrecord, X_OK) < 0) {
                fprintf(stderr, "$ZRECORD does not name the zrecord tool\n");
                return EXIT_FAILURE;
        }
        have_python = tl_exec_capture(probe, NULL, NULL) == 0;
        have_numpy = have_python && tl_exec_capture(probe_np, NULL, NULL) == 0;
        if (!have_numpy)
                printf("note: python3 with numpy not found: the numpy-written file is not tested\n");
        TL_TCASE(s, "zrecord", 120, test_usage, test_no_daemon, test_status,
                 test_import_cat_round_trip, test_import_progress, test_compact,
                 test_import_codecs, test_import_numpy, test_ragged_cat, test_set_info,
                 test_where_batch, test_errors, test_convert);
        return tl_run_suite_with_daemon(s, &daemon_, NULL);
}
