/* test-budgets.c: the memory budgets in force (server/budgets.h): "auto" as a
 * share of a 512 MiB cgroup and of a large machine, capped, with where each
 * came from; a setting as it is; no /proc/meminfo; and the new settings
 * (prefetch, io-backend, io-depth) parsed, refused when bad. */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check-run.h"
#include "../util/fakeroot.h"
#include "server/budgets.h"
#include "server/config.h"

#define MiB ((uint64_t)1 << 20)
#define GiB ((uint64_t)1 << 30)

static void machine(const char *meminfo_kb) {
        char text[200];
        snprintf(text, sizeof(text), "MemTotal: %s kB\nMemAvailable: 1000 kB\n", meminfo_kb);
        put("proc/meminfo", text);
}

START_TEST(test_auto_in_a_small_cgroup) {
        zr_config c;
        zr_budgets b;
        zr_error err = {0};

        machine("25165824"); /* 24 GiB */
        put("proc/self/cgroup", "4:memory:/job\n");
        put("proc/self/mountinfo",
            "20 1 0:18 / /sys/fs/cgroup/memory rw,nosuid - cgroup cgroup rw,memory\n");
        put("sys/fs/cgroup/memory/job/memory.limit_in_bytes", "536870912\n");
        zr_config_defaults(&c);
        ck_assert_int_eq(zr_budgets_resolve(&c, root, &b, &err), 0);
        ck_assert_uint_eq(b.memory, 512 * MiB);
        /* 12% of 512 MiB, rounded down to a MiB; shared memory half and a quarter */
        ck_assert_uint_eq(b.cache.bytes, 61 * MiB);
        ck_assert_uint_eq(b.ring_spare.bytes, 61 * MiB);
        ck_assert_uint_eq(b.prefetch.bytes, 61 * MiB);
        ck_assert_uint_eq(b.read_pool.bytes, 5 * MiB); /* 1% */
        ck_assert_ptr_nonnull(strstr(b.read_pool.source, "at most 256 MiB"));
        ck_assert_uint_eq(b.shm_total.bytes, 255 * MiB); /* (512 MiB / 100) x 50 */
        ck_assert_uint_eq(b.shm_uid.bytes, 127 * MiB);
        /* everything together leaves room in the cgroup */
        ck_assert_uint_lt(b.cache.bytes + b.ring_spare.bytes + b.prefetch.bytes +
                                  b.shm_total.bytes, b.memory);
        ck_assert_msg(strstr(b.cache.source, "auto: 12% of 512 MiB (cgroup v1 "
                                             "memory.limit_in_bytes of /job), at most 1024 MiB"),
                      "%s", b.cache.source);
        ck_assert_ptr_nonnull(strstr(b.ring_spare.source, "at most 512 MiB"));
        ck_assert_ptr_nonnull(strstr(b.memory_source, "cgroup v1"));
}
END_TEST

START_TEST(test_auto_capped_and_settings) {
        zr_config c;
        zr_budgets b;

        machine("25165824");
        zr_config_defaults(&c);
        ck_assert_int_eq(zr_budgets_resolve(&c, root, &b, NULL), 0);
        ck_assert_uint_eq(b.memory, 24 * GiB);
        ck_assert_uint_eq(b.cache.bytes, 1 * GiB);
        ck_assert_uint_eq(b.ring_spare.bytes, 512 * MiB);
        ck_assert_uint_eq(b.prefetch.bytes, 1 * GiB);
        ck_assert_uint_eq(b.read_pool.bytes, 245 * MiB); /* 1% of 24 GiB, under the cap */
        ck_assert_str_eq(b.memory_source, "MemTotal");
        /* a setting is taken as it is, whatever the machine */
        c.cache_bytes = 3 * GiB;
        c.prefetch_bytes = 0;
        c.max_shm_total = 100 * MiB;
        ck_assert_int_eq(zr_budgets_resolve(&c, root, &b, NULL), 0);
        ck_assert_uint_eq(b.cache.bytes, 3 * GiB);
        ck_assert_str_eq(b.cache.source, "setting");
        ck_assert_uint_eq(b.prefetch.bytes, 0);
        ck_assert_uint_eq(b.shm_total.bytes, 100 * MiB);
        ck_assert_str_eq(b.shm_total.source, "setting");
        ck_assert_ptr_nonnull(strstr(b.shm_uid.source, "auto: 25% of"));
}
END_TEST

START_TEST(test_memory_unknown) {
        zr_config c;
        zr_budgets b;
        zr_error err = {0};

        zr_config_defaults(&c); /* no proc/meminfo under the root */
        ck_assert_int_lt(zr_budgets_resolve(&c, root, &b, &err), 0);
        ck_assert_str_ne(err.message, "");
        ck_assert_uint_eq(b.memory, 0);
        ck_assert_uint_eq(b.cache.bytes, 1 * GiB); /* the caps */
        ck_assert_uint_eq(b.ring_spare.bytes, 512 * MiB);
        ck_assert_uint_eq(b.shm_total.bytes, 0);   /* none: per-connection limits only */
        ck_assert_ptr_nonnull(strstr(b.cache.source, "unknown"));
}
END_TEST

START_TEST(test_settings_parse) {
        zr_config c;
        zr_error err = {0};
        char *ok[] = {"zrecordd", "--prefetch=256M", "--io-backend=threads", "--io-depth=32",
                      "--cache=auto", NULL};
        zr_config_defaults(&c);
        ck_assert_uint_eq(c.prefetch_bytes, ZR_CONFIG_AUTO);
        ck_assert_int_eq(c.io_backend, ZR_IOQ_AUTO);
        ck_assert_uint_eq(c.io_depth, 128);
        ck_assert_int_eq(zr_config_parse_args(&c, 5, ok, &err), 0);
        ck_assert_uint_eq(c.prefetch_bytes, 256 * MiB);
        ck_assert_int_eq(c.io_backend, ZR_IOQ_THREADS);
        ck_assert_uint_eq(c.io_depth, 32);
        ck_assert_uint_eq(c.cache_bytes, ZR_CONFIG_AUTO);
        const char *bad[] = {"--io-backend=fast", "--io-depth=0", "--io-depth=5000",
                             "--prefetch=lots", "--cache=16EiB"};
        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
                char *argv[] = {"zrecordd", (char *)bad[i], NULL};
                zr_config_defaults(&c);
                zr_error_clear(&err);
                ck_assert_msg(zr_config_parse_args(&c, 2, argv, &err) < 0, "%s accepted",
                              bad[i]);
        }
}
END_TEST

int main(void) {
        Suite *s = suite_create("budgets");
        TCase *tc = TL_TCASE(s, "budgets", 0, test_auto_in_a_small_cgroup,
                             test_auto_capped_and_settings, test_memory_unknown);
        tcase_add_checked_fixture(tc, fake_root_new, fake_root_free);
        TL_TCASE(s, "settings", 0, test_settings_parse);
        return tl_run_suite(s);
}
