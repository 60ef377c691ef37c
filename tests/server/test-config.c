/* test-config.c: defaults, file parsing, flag precedence and errors of zr_config. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <syslog.h>
#include <unistd.h>

#include "server/config.h"
#include "check-run.h"

static char *write_tmp(const char *text) {
        static char path[64];
        strcpy(path, "/tmp/zr-config-XXXXXX");
        int fd = mkstemp(path);
        ck_assert_int_ge(fd, 0);
        ck_assert_int_eq(write(fd, text, strlen(text)), (ssize_t)strlen(text));
        close(fd);
        return path;
}

START_TEST(test_file_then_flags) {
        zr_config c;
        zr_error err = {0};
        zr_config_defaults(&c);
        ck_assert_uint_eq(c.socket_mode, 0660);
        char *path = write_tmp("# comment\nthreads = 3\ncache = 64M  # trailing\nlog-level = debug\n"
                               "socket = /tmp/x.sock\nmax-shm = 2GiB\n");
        char arg[128];
        snprintf(arg, sizeof(arg), "--config=%s", path);
        char *argv[] = {"zrecordd", "--threads=5", arg, "--max-frame", "65536", NULL};
        ck_assert_int_eq(zr_config_parse_args(&c, 5, argv, &err), 0);
        ck_assert_uint_eq(c.threads, 5); /* flag beats file whatever the order */
        ck_assert_uint_eq(c.cache_bytes, 64u << 20);
        ck_assert_uint_eq(c.max_shm_bytes, 2ull << 30);
        ck_assert_int_eq(c.log_level, LOG_DEBUG);
        ck_assert_uint_eq(c.max_frame_bytes, 65536);
        ck_assert_str_eq(c.socket_path, "/tmp/x.sock");
        ck_assert_str_eq(c.config_path, path);
        unlink(path);
}
END_TEST

START_TEST(test_errors_name_the_place) {
        zr_config c;
        zr_error err = {0};
        zr_config_defaults(&c);
        char *path = write_tmp("threads = 2\nbogus = 1\n");
        ck_assert_int_lt(zr_config_load_file(&c, path, &err), 0);
        ck_assert_ptr_nonnull(strstr(err.message, ":2: unknown key 'bogus'"));
        unlink(path);

        zr_error_clear(&err);
        path = write_tmp("cache = lots\n");
        ck_assert_int_lt(zr_config_load_file(&c, path, &err), 0);
        ck_assert_ptr_nonnull(strstr(err.message, "bad value 'lots'"));
        unlink(path);

        zr_error_clear(&err);
        char *argv[] = {"zrecordd", "--max-frame=100", NULL};
        ck_assert_int_lt(zr_config_parse_args(&c, 2, argv, &err), 0);
        ck_assert_ptr_nonnull(strstr(err.message, "between"));

        zr_error_clear(&err);
        char *argv2[] = {"zrecordd", "--no-such-flag", NULL};
        ck_assert_int_lt(zr_config_parse_args(&c, 2, argv2, &err), 0);
        ck_assert_ptr_nonnull(strstr(err.message, "--no-such-flag"));

        zr_error_clear(&err);
        char *argv3[] = {"zrecordd", "--socket-mode=999", NULL};
        ck_assert_int_lt(zr_config_parse_args(&c, 2, argv3, &err), 0);

        zr_error_clear(&err);
        char *argv4[] = {"zrecordd", "--socket=relative.sock", NULL};
        ck_assert_int_lt(zr_config_parse_args(&c, 2, argv4, &err), 0);
        ck_assert_ptr_nonnull(strstr(err.message, "absolute"));

        zr_error_clear(&err);
        ck_assert_int_lt(zr_config_load_file(&c, "/nonexistent/zr.conf", &err), 0);
        ck_assert_ptr_nonnull(strstr(err.message, "/nonexistent/zr.conf"));
}
END_TEST

/* ring-spare: the default, the file, the flag over the file, bad values, and a
 * reload (the daemon parses defaults < file < flags again on SIGHUP). */
START_TEST(test_ring_spare) {
        zr_config c;
        zr_error err = {0};
        zr_config_defaults(&c);
        ck_assert_uint_eq(c.ring_spare_bytes, ZR_CONFIG_AUTO);

        char *path = write_tmp("ring-spare = 1G\n");
        char arg[128];
        snprintf(arg, sizeof(arg), "--config=%s", path);
        char *argv[] = {"zrecordd", arg, NULL};
        ck_assert_int_eq(zr_config_parse_args(&c, 2, argv, &err), 0);
        ck_assert_uint_eq(c.ring_spare_bytes, 1ull << 30);

        /* the flag beats the file; 0 turns spares off */
        zr_config_defaults(&c);
        char *argv2[] = {"zrecordd", "--ring-spare=0", arg, NULL};
        ck_assert_int_eq(zr_config_parse_args(&c, 3, argv2, &err), 0);
        ck_assert_uint_eq(c.ring_spare_bytes, 0);
        zr_config_defaults(&c);
        char *argv3[] = {"zrecordd", arg, "--ring-spare", "256MiB", NULL};
        ck_assert_int_eq(zr_config_parse_args(&c, 4, argv3, &err), 0);
        ck_assert_uint_eq(c.ring_spare_bytes, 256u << 20);

        /* a reload re-reads the file over the defaults: a key removed from the
         * file goes back to the default, a changed one takes its new value */
        FILE *f = fopen(path, "we");
        ck_assert_ptr_nonnull(f);
        fputs("# ring-spare removed\nthreads = 1\n", f);
        fclose(f);
        zr_config_defaults(&c);
        ck_assert_int_eq(zr_config_parse_args(&c, 2, argv, &err), 0);
        ck_assert_uint_eq(c.ring_spare_bytes, ZR_CONFIG_AUTO);
        f = fopen(path, "we");
        ck_assert_ptr_nonnull(f);
        fputs("ring-spare = 300M\n", f);
        fclose(f);
        zr_config_defaults(&c);
        ck_assert_int_eq(zr_config_parse_args(&c, 2, argv, &err), 0);
        ck_assert_uint_eq(c.ring_spare_bytes, 300u << 20);
        unlink(path);

        /* read-pool: auto by default, a size, 0, "auto" again, and a bad value */
        zr_config_defaults(&c);
        ck_assert_uint_eq(c.read_pool_bytes, ZR_CONFIG_AUTO);
        char *rp1[] = {"zrecordd", "--read-pool=64M", NULL};
        ck_assert_int_eq(zr_config_parse_args(&c, 2, rp1, &err), 0);
        ck_assert_uint_eq(c.read_pool_bytes, 64u << 20);
        char *rp2[] = {"zrecordd", "--read-pool=0", NULL};
        ck_assert_int_eq(zr_config_parse_args(&c, 2, rp2, &err), 0);
        ck_assert_uint_eq(c.read_pool_bytes, 0);
        char *rp3[] = {"zrecordd", "--read-pool=auto", NULL};
        ck_assert_int_eq(zr_config_parse_args(&c, 2, rp3, &err), 0);
        ck_assert_uint_eq(c.read_pool_bytes, ZR_CONFIG_AUTO);
        char *rp4[] = {"zrecordd", "--read-pool=lots", NULL};
        ck_assert_int_lt(zr_config_parse_args(&c, 2, rp4, &err), 0);

        /* bad values name the place and leave the setting alone */
        const char *bad[] = {"lots", "-1", "12X", "", "1G2", "99999999999T", "0x"};
        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
                char text[64];
                snprintf(text, sizeof(text), "\nring-spare = %s\n", bad[i]);
                path = write_tmp(text);
                zr_config_defaults(&c);
                zr_error_clear(&err);
                ck_assert_int_lt(zr_config_load_file(&c, path, &err), 0);
                ck_assert_msg(strstr(err.message, ":2: bad value") != NULL, "%s: %s", bad[i],
                              err.message);
                ck_assert_uint_eq(c.ring_spare_bytes, ZR_CONFIG_AUTO);
                unlink(path);

                char flag[64];
                snprintf(flag, sizeof(flag), "--ring-spare=%s", bad[i]);
                char *argv4[] = {"zrecordd", flag, NULL};
                zr_error_clear(&err);
                ck_assert_int_lt(zr_config_parse_args(&c, 2, argv4, &err), 0);
                ck_assert_msg(strstr(err.message, "--ring-spare: bad value") != NULL, "%s",
                              err.message);
        }
        char *argv5[] = {"zrecordd", "--ring-spare", NULL}; /* no value */
        zr_error_clear(&err);
        ck_assert_int_lt(zr_config_parse_args(&c, 2, argv5, &err), 0);
        ck_assert_ptr_nonnull(strstr(err.message, "--ring-spare"));
}
END_TEST

/* --help lists every setting of the file, ring-spare among them. */
START_TEST(test_help_lists_ring_spare) {
        zr_config c;
        zr_error err = {0};
        char path[] = "/tmp/zr-help-XXXXXX";
        int fd = mkstemp(path);
        ck_assert_int_ge(fd, 0);
        fflush(stdout);
        int saved = dup(STDOUT_FILENO);
        ck_assert_int_ge(dup2(fd, STDOUT_FILENO), 0);
        zr_config_defaults(&c);
        char *argv[] = {"zrecordd", "--help", NULL};
        int r = zr_config_parse_args(&c, 2, argv, &err);
        fflush(stdout);
        dup2(saved, STDOUT_FILENO);
        close(saved);
        ck_assert_int_eq(r, 1);
        char text[8192] = {0};
        ck_assert_int_gt(pread(fd, text, sizeof(text) - 1, 0), 0);
        close(fd);
        unlink(path);
        ck_assert_ptr_nonnull(strstr(text, "--ring-spare=BYTES"));
        ck_assert_ptr_nonnull(strstr(text, "ring-spare budgets"));
}
END_TEST

/* The per-uid limits and timeouts: defaults, the file, and values refused
 * with the place named. */
START_TEST(test_per_uid_limits) {
        zr_config c;
        zr_error err = {0};
        zr_config_defaults(&c);
        ck_assert_uint_eq(c.max_clients_per_uid, 64);
        ck_assert_uint_eq(c.hello_timeout_sec, 10);
        ck_assert_uint_eq(c.idle_timeout_sec, 600);
        ck_assert_uint_eq(c.frame_timeout_sec, 30);
        ck_assert_uint_eq(c.max_fds, 256);
        ck_assert_uint_eq(c.max_fds_per_uid, 1024);
        ck_assert_uint_eq(c.max_bytes_per_uid, 64u << 20);
        ck_assert_uint_eq(c.max_shm_per_uid, 0); /* auto: from the memory the daemon may use */
        ck_assert_uint_eq(c.max_shm_total, 0);
        ck_assert_uint_eq(c.max_jobs_per_uid, 0); /* auto: the worker threads but one */

        char *path = write_tmp("max-clients-per-uid = 8\nhello-timeout = 0\nidle-timeout = 60\n"
                               "frame-timeout = 5\nmax-fds = 65\nmax-fds-per-uid = 512\n"
                               "max-bytes-per-uid = 16M\nmax-shm-per-uid = 2G\n"
                               "max-shm-total = 6G\nmax-jobs-per-uid = 3\n");
        ck_assert_int_eq(zr_config_load_file(&c, path, &err), 0);
        unlink(path);
        ck_assert_uint_eq(c.max_clients_per_uid, 8);
        ck_assert_uint_eq(c.hello_timeout_sec, 0);
        ck_assert_uint_eq(c.idle_timeout_sec, 60);
        ck_assert_uint_eq(c.frame_timeout_sec, 5);
        ck_assert_uint_eq(c.max_fds, 65); /* the least: one frame's descriptors */
        ck_assert_uint_eq(c.max_fds_per_uid, 512);
        ck_assert_uint_eq(c.max_bytes_per_uid, 16u << 20);
        ck_assert_uint_eq(c.max_shm_per_uid, 2ull << 30);
        ck_assert_uint_eq(c.max_shm_total, 6ull << 30);
        ck_assert_uint_eq(c.max_jobs_per_uid, 3);

        /* a limit that would let no client in, or not one frame's descriptors */
        const char *bad[] = {"max-clients-per-uid = 0", "max-fds = 64", "max-fds-per-uid = 10",
                             "max-bytes-per-uid = 0", "idle-timeout = soon",
                             "max-shm-total = much"};
        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
                char text[96];
                snprintf(text, sizeof(text), "%s\n", bad[i]);
                path = write_tmp(text);
                zr_error_clear(&err);
                ck_assert_int_lt(zr_config_load_file(&c, path, &err), 0);
                ck_assert_msg(strstr(err.message, ":1:") != NULL, "%s: %s", bad[i], err.message);
                unlink(path);
        }
}
END_TEST

START_TEST(test_resolve_socket) {
        zr_config c;
        zr_error err = {0};
        zr_config_defaults(&c);
        setenv("ZRECORD_SOCKET", "/tmp/from-env.sock", 1);
        ck_assert_int_eq(zr_config_resolve(&c, &err), 0);
        ck_assert_str_eq(c.socket_path, "/tmp/from-env.sock");
        unsetenv("ZRECORD_SOCKET");
        zr_config_defaults(&c);
        ck_assert_int_eq(zr_config_resolve(&c, &err), 0);
        ck_assert_int_eq(c.socket_path[0], '/');
        ck_assert_ptr_nonnull(strstr(c.socket_path, "zrecordd.sock"));
}
END_TEST

/* Telemetry: stall-warning's default and values; metrics-listen takes an
 * absolute path or a loopback HOST:PORT, and refuses anything else with the
 * place named. */
START_TEST(test_telemetry_settings) {
        zr_config c;
        zr_error err = {0};
        zr_config_defaults(&c);
        ck_assert_uint_eq(c.stall_warning_sec, 60);
        ck_assert_str_eq(c.metrics_listen, "");
        const char *good[][2] = {
                { "/run/zrecord/metrics.sock", "/run/zrecord/metrics.sock" },
                { "127.0.0.1:9464", "127.0.0.1:9464" },
                { "127.1.2.3:1", "127.1.2.3:1" },
                { "[::1]:65535", "[::1]:65535" },
                { "localhost:9464", "localhost:9464" },
        };
        for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
                char text[160];
                snprintf(text, sizeof(text), "stall-warning = 0\nmetrics-listen = %s\n",
                         good[i][0]);
                char *path = write_tmp(text);
                zr_error_clear(&err);
                ck_assert_msg(zr_config_load_file(&c, path, &err) == 0, "%s: %s", good[i][0],
                              err.message);
                unlink(path);
                ck_assert_str_eq(c.metrics_listen, good[i][1]);
                ck_assert_uint_eq(c.stall_warning_sec, 0);
        }
        const char *bad[] = { "10.0.0.1:9464", "0.0.0.0:9464", "[::]:9464", "[2001:db8::1]:1",
                              "127.0.0.1", "127.0.0.1:0", "127.0.0.1:65536", "127.0.0.1:-1",
                              "[::1:9464", "host.example:9464", "relative.sock",
                              "127.0.0.1:9464x" };
        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
                char text[160];
                snprintf(text, sizeof(text), "\nmetrics-listen = %s\n", bad[i]);
                char *path = write_tmp(text);
                zr_error_clear(&err);
                ck_assert_msg(zr_config_load_file(&c, path, &err) < 0, "%s accepted", bad[i]);
                ck_assert_msg(strstr(err.message, ":2:") && strstr(err.message, "metrics-listen"),
                              "%s: %s", bad[i], err.message);
                unlink(path);
        }
        zr_error_clear(&err);
        char *argv[] = {"zrecordd", "--stall-warning=soon", NULL};
        ck_assert_int_lt(zr_config_parse_args(&c, 2, argv, &err), 0);
}
END_TEST

START_TEST(test_pin_workers) {
        zr_config c;
        zr_error err = {0};
        zr_config_defaults(&c);
        ck_assert(c.pin_workers);                   /* pinned unless told not to */
        char *path = write_tmp("pin-workers = no\n");
        ck_assert_int_eq(zr_config_load_file(&c, path, &err), 0);
        ck_assert(!c.pin_workers);
        unlink(path);
        char *argv[] = {"zrecordd", "--pin-workers=yes", NULL};
        ck_assert_int_eq(zr_config_parse_args(&c, 2, argv, &err), 0);
        ck_assert(c.pin_workers);
        char *bad[] = {"zrecordd", "--pin-workers=maybe", NULL};
        ck_assert_int_lt(zr_config_parse_args(&c, 2, bad, &err), 0);
        ck_assert_ptr_nonnull(strstr(err.message, "pin-workers is yes or no, not 'maybe'"));
        ck_assert(c.pin_workers);                   /* a refused value changes nothing */
}
END_TEST

TL_SUITE_MAIN("config", test_file_then_flags, test_errors_name_the_place, test_ring_spare,
              test_help_lists_ring_spare, test_per_uid_limits, test_resolve_socket,
              test_telemetry_settings, test_pin_workers)
