/* test-mkdirs.c: zr_mkdirs() makes every missing level, passes over existing
 * ones, and says why it cannot. */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util/mkdirs.h"
#include "check-run.h"
#include "util.h"

static char root[4096];

static void setup(void) {
        snprintf(root, sizeof(root), "%s/mkdirs-XXXXXX", tl_tmpdir(true));
        ck_assert_ptr_nonnull(mkdtemp(root));
}

static void teardown(void) {
        tl_rmtree(root);
}

START_TEST(test_makes_every_level) {
        char path[4200];
        struct stat st;

        setup();
        snprintf(path, sizeof(path), "%s/a/b/c", root);
        ck_assert_int_eq(zr_mkdirs(path, 0700), 0);
        ck_assert_int_eq(stat(path, &st), 0);
        ck_assert(S_ISDIR(st.st_mode));
        ck_assert_int_eq(st.st_mode & 0777, 0700);
        ck_assert_int_eq(zr_mkdirs(path, 0700), 0); /* there already */
        snprintf(path, sizeof(path), "%s/a/b/c/", root);
        ck_assert_int_eq(zr_mkdirs(path, 0700), 0); /* a trailing slash */
        teardown();
}
END_TEST

START_TEST(test_refusals) {
        char path[4200], big[5000];
        int fd;

        setup();
        ck_assert_int_eq(zr_mkdirs("", 0700), -EINVAL);
        memset(big, 'a', sizeof(big) - 1);
        big[sizeof(big) - 1] = 0;
        ck_assert_int_eq(zr_mkdirs(big, 0700), -ENAMETOOLONG);
        snprintf(path, sizeof(path), "%s/file", root);
        fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
        ck_assert_int_ge(fd, 0);
        close(fd);
        snprintf(path, sizeof(path), "%s/file/below", root);
        ck_assert_int_eq(zr_mkdirs(path, 0700), -ENOTDIR);
        teardown();
}
END_TEST

TL_SUITE_MAIN("mkdirs", test_makes_every_level, test_refusals)
