/* fakeroot.h: a fake root for the tests of code that reads /proc and
 * /sys/fs/cgroup below a prefix (util/memlimit.h, server/budgets.h): a
 * scratch directory per test (a checked fixture), and files put in it with
 * the directories on their way. Header-only (static functions), included by
 * test-memlimit and test-budgets.
 */
#ifndef ZR_TESTS_UTIL_FAKEROOT_H
#define ZR_TESTS_UTIL_FAKEROOT_H

#include <check.h>

#include "files.h"

static tl_scratch fake_root_dir;
/* The prefix the code under test reads below. */
static const char *const root = fake_root_dir.path;

/* Writes `text` to root/rel. */
static inline void put(const char *rel, const char *text) {
        ck_assert_int_eq(tl_put_file(fake_root_dir.fd, rel, text), 0);
}

/* The checked fixture: a new empty root before each test, removed after. */
static inline void fake_root_new(void) {
        ck_assert_int_eq(tl_scratch_new(&fake_root_dir, "fakeroot"), 0);
}

static inline void fake_root_free(void) {
        tl_scratch_free(&fake_root_dir);
}

#endif
