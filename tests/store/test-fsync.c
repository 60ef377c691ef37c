/* test-fsync.c: a failed fsync turns the store read-only for good and says why.
 *
 * The test binary defines fdatasync() itself, which the engine's calls bind to
 * (the executable's definition comes before libc's), so a failure can be
 * injected without a faulty disk. */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "check-run.h"
#include "store/store.h"

static _Atomic int fail_fdatasync;
static _Atomic int fdatasync_calls;

int fdatasync(int fd) {
        atomic_fetch_add(&fdatasync_calls, 1);
        if (atomic_load(&fail_fdatasync)) {
                errno = EIO;
                return -1;
        }
        return (int)syscall(SYS_fdatasync, fd);
}

START_TEST(test_failed_fsync_is_final) {
        char path[256];
        const char *base = getenv("TMPDIR");
        snprintf(path, sizeof(path), "%s/zr-test-fsync-XXXXXX", base ? base : "/tmp");
        ck_assert_ptr_nonnull(mkdtemp(path));
        int dfd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        ck_assert_int_ge(dfd, 0);

        zr_store *s = NULL;
        zr_error err = {0};
        uint8_t data[300];
        uint64_t lens[3] = { 100, 100, 100 }, got_lens[3], idx[3] = { 0, 1, 2 };
        uint8_t out[300];
        for (int i = 0; i < 300; i++)
                data[i] = (uint8_t)(i * 7);

        ck_assert_int_eq(zr_store_create(dfd, ZR_CODEC_ZSTD, NULL, 0, NULL, &s, &err), 0);
        ck_assert_int_eq(zr_store_append(s, data, lens, 2, NULL, &err), 0);
        ck_assert_int_eq(zr_store_sync(s, &err), 0);
        ck_assert_int_gt(atomic_load(&fdatasync_calls), 0);

        /* committed but not yet durable, then the disk fails */
        ck_assert_int_eq(zr_store_append(s, data + 200, lens + 2, 1, NULL, &err), 0);
        atomic_store(&fail_fdatasync, 1);
        ck_assert_int_eq(zr_store_sync(s, &err), -EIO);
        ck_assert_ptr_nonnull(strstr(err.message, "fdatasync"));
        ck_assert_int_eq(zr_store_failed(s), EIO);

        /* never retried: the disk works again, the store stays read-only */
        atomic_store(&fail_fdatasync, 0);
        zr_error_clear(&err);
        ck_assert_int_eq(zr_store_sync(s, &err), -ZR_E_READONLY);
        ck_assert_ptr_nonnull(strstr(err.message, "failed fsync"));
        ck_assert_int_eq(zr_store_append(s, data, lens, 1, NULL, NULL), -ZR_E_READONLY);
        uint64_t del = 0;
        ck_assert_int_eq(zr_store_delete(s, &del, 1, NULL), -ZR_E_READONLY);
        ck_assert_int_eq(zr_store_compact(s, 0, NULL, NULL), -ZR_E_READONLY);
        ck_assert_uint_eq(zr_store_length(s), 3);
        /* reads go on */
        ck_assert_int_eq(zr_store_gather(s, idx, 3, out, sizeof(out), got_lens, &err), 0);
        ck_assert(memcmp(out, data, 300) == 0);
        ck_assert_int_eq(zr_store_close(s, NULL), -ZR_E_READONLY);

        /* the page cache still holds what was committed */
        ck_assert_int_eq(zr_store_open(dfd, NULL, &s, &err), 0);
        ck_assert_uint_eq(zr_store_length(s), 3);
        ck_assert_int_eq(zr_store_failed(s), 0);
        ck_assert_int_eq(zr_store_close(s, NULL), 0);

        /* a failure while creating a chunk fails the append and the store */
        zr_store_options o = { .chunk_log2 = 12 };
        char sub[300];
        snprintf(sub, sizeof(sub), "%s/small", path);
        ck_assert_int_eq(mkdirat(dfd, "small", 0755), 0);
        int sfd = open(sub, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        ck_assert_int_ge(sfd, 0);
        ck_assert_int_eq(zr_store_create(sfd, ZR_CODEC_RAW, NULL, 0, &o, &s, NULL), 0);
        atomic_store(&fail_fdatasync, 1);
        zr_error_clear(&err);
        ck_assert_int_eq(zr_store_append(s, data, lens, 1, NULL, &err), -EIO);
        ck_assert_uint_eq(zr_store_length(s), 0);
        ck_assert_int_eq(zr_store_failed(s), EIO);
        atomic_store(&fail_fdatasync, 0);
        zr_store_close(s, NULL);

        const char *names[] = { "small/meta.zr", "small/0.chunk", "small/0.loc", "meta.zr",
                                "0.chunk", "0.loc" };
        for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
                unlinkat(dfd, names[i], 0);
        close(sfd);
        unlinkat(dfd, "small", AT_REMOVEDIR);
        close(dfd);
        ck_assert_int_eq(rmdir(path), 0);
}
END_TEST

int main(void) {
        Suite *s = suite_create("fsync");
        TL_TCASE(s, "core", 0, test_failed_fsync_is_final);
        return tl_run_suite(s);
}
