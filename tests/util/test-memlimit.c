/* test-memlimit.c: the memory limit of the process, read from a fake root laid
 * out like /proc and /sys/fs/cgroup: v1 and v2, nested limits, "max" and v1's
 * "no limit", a cgroup namespace's mount root, no cgroup at all, and the real
 * machine. */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check-run.h"
#include "fakeroot.h"
#include "util/memlimit.h"

#define GiB ((uint64_t)1 << 30)
#define MiB ((uint64_t)1 << 20)

/* A root with a machine's /proc/meminfo. */
static void setup(void) {
        fake_root_new();
        put("proc/meminfo", "MemTotal:       24576000 kB\nMemFree:         1000000 kB\n"
                            "MemAvailable:   20000000 kB\nBuffers:            1234 kB\n");
}

static zr_memlimit read_ok(void) {
        zr_memlimit ml;
        zr_error err = {0};
        ck_assert_int_eq(zr_memlimit_read(root, &ml, &err), 0);
        return ml;
}

/* read_ok(), whose cgroup limit and the source of the limit in force must be
 * these. */
static zr_memlimit read_expect(uint64_t cgroup_limit, const char *source) {
        zr_memlimit ml = read_ok();
        ck_assert_uint_eq(ml.cgroup_limit, cgroup_limit);
        ck_assert_str_eq(ml.source, source);
        return ml;
}

START_TEST(test_v1_nested_parent_wins) {
        put("proc/self/cgroup", "9:name=systemd:/\n5:cpu,cpuacct:/\n4:memory:/jobs/train\n0::/\n");
        put("proc/self/mountinfo",
            "20 1 0:18 / /sys/fs/cgroup/memory rw,nosuid - cgroup cgroup rw,memory\n"
            "21 1 0:19 / /sys/fs/cgroup/cpu,cpuacct rw - cgroup cgroup rw,cpu,cpuacct\n");
        put("sys/fs/cgroup/memory/jobs/train/memory.limit_in_bytes", "9223372036854771712\n");
        put("sys/fs/cgroup/memory/jobs/train/memory.usage_in_bytes", "1048576\n");
        put("sys/fs/cgroup/memory/jobs/memory.limit_in_bytes", "536870912\n");
        put("sys/fs/cgroup/memory/memory.limit_in_bytes", "9223372036854771712\n");
        zr_memlimit ml = read_expect(512 * MiB, "cgroup v1 memory.limit_in_bytes of /jobs");
        ck_assert_int_eq(ml.cgroup_version, 1);
        ck_assert_uint_eq(ml.effective, 512 * MiB);
        ck_assert_uint_eq(ml.cgroup_usage, MiB);
        ck_assert_uint_eq(ml.mem_total, 24576000ull * 1024);
        ck_assert_uint_eq(ml.mem_available, 20000000ull * 1024);
}
END_TEST

START_TEST(test_v2_max_and_high) {
        put("proc/self/cgroup", "0::/system.slice/zrecordd.service\n");
        put("proc/self/mountinfo",
            "30 1 0:26 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n");
        put("sys/fs/cgroup/system.slice/zrecordd.service/memory.max", "2147483648\n");
        put("sys/fs/cgroup/system.slice/zrecordd.service/memory.high", "max\n");
        put("sys/fs/cgroup/system.slice/zrecordd.service/memory.current", "4096\n");
        put("sys/fs/cgroup/system.slice/memory.max", "max\n");
        put("sys/fs/cgroup/system.slice/memory.high", "1073741824\n");
        zr_memlimit ml = read_expect(GiB, "cgroup v2 memory.high of /system.slice");
        ck_assert_int_eq(ml.cgroup_version, 2);
        ck_assert_uint_eq(ml.effective, GiB);
        ck_assert_uint_eq(ml.cgroup_usage, 4096);
}
END_TEST

START_TEST(test_namespace_mount_root) {
        /* a cgroup namespace: the mount shows /ct and the process sits in /ct/app */
        put("proc/self/cgroup", "0::/ct/app\n");
        put("proc/self/mountinfo",
            "40 1 0:26 /ct /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n");
        put("sys/fs/cgroup/app/memory.max", "268435456\n");
        read_expect(256 * MiB, "cgroup v2 memory.max of /app");
}
END_TEST

START_TEST(test_no_cgroup_is_memtotal) {
        zr_memlimit ml = read_expect(0, "MemTotal");
        ck_assert_int_eq(ml.cgroup_version, 0);
        ck_assert_uint_eq(ml.effective, ml.mem_total);

        /* a limit above the machine's memory changes nothing */
        put("proc/self/cgroup", "0::/big\n");
        put("proc/self/mountinfo", "30 1 0:26 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n");
        put("sys/fs/cgroup/big/memory.max", "99999999999999\n");
        ml = read_expect(99999999999999ull, "MemTotal");
        ck_assert_uint_eq(ml.effective, ml.mem_total);
}
END_TEST

START_TEST(test_escaped_mount_point_and_garbage) {
        put("proc/self/cgroup", "3:memory:/a\n");
        put("proc/self/mountinfo",
            "short line\n"
            "20 1 0:18 / /sys/fs/cg\\040mem rw - cgroup cgroup rw,memory\n");
        put("sys/fs/cg mem/a/memory.limit_in_bytes", "not a number\n");
        put("sys/fs/cg mem/memory.limit_in_bytes", "104857600\n");
        read_expect(100 * MiB, "cgroup v1 memory.limit_in_bytes of /");
}
END_TEST

START_TEST(test_missing_meminfo) {
        char path[300];
        zr_memlimit ml;
        zr_error err = {0};
        snprintf(path, sizeof(path), "%s/proc/meminfo", root);
        ck_assert_int_eq(unlink(path), 0);
        ck_assert_int_eq(zr_memlimit_read(root, &ml, &err), -ENOENT);
        ck_assert_ptr_nonnull(strstr(err.message, "meminfo"));
        put("proc/meminfo", "MemFree: 10 kB\n");
        zr_error_clear(&err);
        ck_assert_int_eq(zr_memlimit_read(root, &ml, &err), -EINVAL);
        ck_assert_ptr_nonnull(strstr(err.message, "MemTotal"));
}
END_TEST

START_TEST(test_budget) {
        zr_memlimit ml = { .effective = 512 * MiB };
        ck_assert_uint_eq(zr_memlimit_budget(&ml, 10, GiB), 51 * MiB);
        ck_assert_uint_eq(zr_memlimit_budget(&ml, 50, 100 * MiB), 100 * MiB);
        ml.effective = 24 * GiB;
        ck_assert_uint_eq(zr_memlimit_budget(&ml, 10, GiB), GiB);
        ml.effective = 0;
        ck_assert_uint_eq(zr_memlimit_budget(&ml, 10, GiB), 0);
}
END_TEST

START_TEST(test_this_machine) {
        zr_memlimit ml;
        zr_error err = {0};
        ck_assert_int_eq(zr_memlimit_read(NULL, &ml, &err), 0);
        ck_assert_uint_gt(ml.mem_total, 0);
        ck_assert_uint_gt(ml.effective, 0);
        ck_assert_uint_le(ml.effective, ml.mem_total);
        ck_assert_uint_le(ml.mem_available, ml.mem_total);
        ck_assert_uint_gt(strlen(ml.source), 0);
}
END_TEST

int main(void) {
        Suite *s = suite_create("memlimit");
        TCase *tc = TL_TCASE(s, "core", 0, test_v1_nested_parent_wins, test_v2_max_and_high,
                             test_namespace_mount_root, test_no_cgroup_is_memtotal,
                             test_escaped_mount_point_and_garbage, test_missing_meminfo,
                             test_budget, test_this_machine);

        tcase_add_checked_fixture(tc, setup, fake_root_free);
        return tl_run_suite(s);
}
