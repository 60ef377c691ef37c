/* test-staging.c: the zrecord tool's staging of new stores (client/staging.h),
 * without a daemon: what is at the path before and after a commit and an
 * abort, an empty directory replaced with its mode kept, what a dead command
 * left swept and what a live one holds kept, and the cases built in place. */
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check-run.h"
#include "staging.h"
#include "util.h"

static char base[PATH_MAX];

/* snprintf that must fit */
#define FMT(buf, ...) ck_assert_uint_lt((size_t)snprintf(buf, sizeof(buf), __VA_ARGS__), sizeof(buf))

static const char *at(const char *name) {
        static char bufs[4][PATH_MAX];
        static int k;

        k = (k + 1) % 4;
        FMT(bufs[k], "%s/%s", base, name);
        return bufs[k];
}

static void setup(void) {
        FMT(base, "%s/staging-XXXXXX", tl_tmpdir(true));
        ck_assert_ptr_nonnull(mkdtemp(base));
}

static void teardown(void) {
        tl_rmtree(base);
}

/* The names in base, sorted, joined by ' '. */
static const char *listing(void) {
        static char out[4096];
        char *names[64];
        size_t n = 0;
        struct dirent *de;
        DIR *d = opendir(base);

        ck_assert_ptr_nonnull(d);
        while ((de = readdir(d)) && n < 64)
                if (strcmp(de->d_name, ".") && strcmp(de->d_name, ".."))
                        names[n++] = strdup(de->d_name);
        closedir(d);
        for (size_t i = 0; i < n; i++)
                for (size_t j = i + 1; j < n; j++)
                        if (strcmp(names[j], names[i]) < 0) {
                                char *t = names[i];
                                names[i] = names[j];
                                names[j] = t;
                        }
        out[0] = 0;
        for (size_t i = 0; i < n; i++) {
                strcat(out, i ? " " : "");
                strcat(out, names[i]);
                free(names[i]);
        }
        return out;
}

static void touch(const char *p) {
        int fd = open(p, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);

        ck_assert_int_ge(fd, 0);
        close(fd);
}

START_TEST(test_commit_and_abort) {
        tool_staging s;
        char err[512], file[PATH_MAX];
        struct stat st;

        ck_assert_int_eq(staging_begin(&s, at("new"), err, sizeof(err)), 0);
        ck_assert(s.root[0] && strstr(s.path, "/.new.partial-") && !strcmp(strrchr(s.path, '/'), "/new"));
        ck_assert_int_eq(lstat(at("new"), &st), -1);       /* nothing at the path yet */
        FMT(file, "%s/meta.zr", s.path);
        touch(file);
        ck_assert_int_eq(staging_commit(&s, err, sizeof(err)), 0);
        ck_assert_str_eq(listing(), "new");                /* and nothing beside it */
        ck_assert_int_eq(stat(at("new/meta.zr"), &st), 0);

        ck_assert_int_eq(staging_begin(&s, at("gone"), err, sizeof(err)), 0);
        FMT(file, "%s/0.chunk", s.path);
        touch(file);
        ck_assert(staging_abort(&s));
        ck_assert(staging_abort(&s));                      /* twice is harmless */
        ck_assert_str_eq(listing(), "new");
}
END_TEST

START_TEST(test_empty_dir_replaced) {
        tool_staging s;
        char err[512], file[PATH_MAX];
        struct stat st;

        ck_assert_int_eq(mkdir(at("e"), 0700), 0);
        ck_assert_int_eq(chmod(at("e"), 0751), 0);
        ck_assert_int_eq(staging_begin(&s, at("e/"), err, sizeof(err)), 0);   /* a slash too */
        ck_assert(s.root[0]);
        FMT(file, "%s/meta.zr", s.path);
        touch(file);
        ck_assert_int_eq(staging_commit(&s, err, sizeof(err)), 0);
        ck_assert_int_eq(stat(at("e"), &st), 0);
        ck_assert_uint_eq(st.st_mode & 07777, 0751);
        ck_assert_int_eq(stat(at("e/meta.zr"), &st), 0);
        ck_assert_str_eq(listing(), "e");

        /* an empty directory that is aborted stays, empty */
        ck_assert_int_eq(mkdir(at("f"), 0755), 0);
        ck_assert_int_eq(staging_begin(&s, at("f"), err, sizeof(err)), 0);
        ck_assert(staging_abort(&s));
        ck_assert_str_eq(listing(), "e f");
}
END_TEST

START_TEST(test_in_place) {
        tool_staging s;
        char err[512];

        /* a store already there: in place, and the daemon refuses it */
        ck_assert_int_eq(mkdir(at("full"), 0755), 0);
        touch(at("full/meta.zr"));
        ck_assert_int_eq(staging_begin(&s, at("full"), err, sizeof(err)), 0);
        ck_assert(!s.root[0] && !s.clear);
        ck_assert_str_eq(s.path, at("full"));
        ck_assert(staging_abort(&s));
        ck_assert_str_eq(listing(), "full");
        ck_assert_int_eq(access(at("full/meta.zr"), F_OK), 0);    /* untouched */
        ck_assert_int_eq(staging_commit(&s, err, sizeof(err)), 0);
        /* names that make no store */
        ck_assert_int_eq(staging_begin(&s, "..", err, sizeof(err)), -EINVAL);
        ck_assert_int_eq(staging_begin(&s, at("no/such/parent"), err, sizeof(err)), -ENOENT);
}
END_TEST

START_TEST(test_sweep) {
        tool_staging s, live;
        char err[512], dead[PATH_MAX], file[PATH_MAX];

        /* a dead command's .partial directory (nobody holds its lock) ... */
        FMT(dead, "%s/.x.partial-dead01", base);
        ck_assert_int_eq(mkdir(dead, 0700), 0);
        FMT(file, "%s/x", dead);
        ck_assert_int_eq(mkdir(file, 0755), 0);
        FMT(file, "%s/x/0.chunk", dead);
        touch(file);
        /* ... a live one's (locked), and one of another name */
        ck_assert_int_eq(staging_begin(&live, at("x"), err, sizeof(err)), 0);
        ck_assert_int_eq(mkdir(at(".y.partial-other1"), 0700), 0);
        ck_assert_int_eq(staging_begin(&s, at("x"), err, sizeof(err)), 0);
        /* the dead one is gone; the live one and the other name stay */
        ck_assert_int_eq(access(dead, F_OK), -1);
        ck_assert_int_eq(access(live.root, F_OK), 0);
        ck_assert_int_eq(access(at(".y.partial-other1"), F_OK), 0);
        ck_assert(staging_abort(&s));
        ck_assert(staging_abort(&live));
        ck_assert_str_eq(listing(), ".y.partial-other1");
}
END_TEST

START_TEST(test_someone_else_made_it) {
        tool_staging s;
        char err[512];

        ck_assert_int_eq(staging_begin(&s, at("race"), err, sizeof(err)), 0);
        ck_assert_int_eq(mkdir(at("race"), 0755), 0);
        touch(at("race/theirs"));
        ck_assert_int_eq(staging_commit(&s, err, sizeof(err)), -ENOTEMPTY);
        ck_assert(strstr(err, "made by someone else"));
        ck_assert(staging_abort(&s));
        ck_assert_str_eq(listing(), "race");
        ck_assert_int_eq(access(at("race/theirs"), F_OK), 0);
}
END_TEST

int main(void) {
        Suite *s = suite_create("staging");
        TCase *tc = tcase_create("staging");

        tcase_add_checked_fixture(tc, setup, teardown);
        tcase_add_test(tc, test_commit_and_abort);
        tcase_add_test(tc, test_empty_dir_replaced);
        tcase_add_test(tc, test_in_place);
        tcase_add_test(tc, test_sweep);
        tcase_add_test(tc, test_someone_else_made_it);
        suite_add_tcase(s, tc);
        return tl_run_suite(s);
}
