/* test-hint.c: a WILLNEED hint over a range larger than the kernel's
 * read-ahead window reaches the page cache whole (it goes in pieces the
 * kernel honours), and a hint on a bad descriptor is an error.
 *
 * Needs cachestat() (Linux 6.5: it counts the pages being read, so the check
 * needs no waiting) and a file system whose pages can be dropped (not
 * tmpfs); skips with a message otherwise. */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check-run.h"
#include "files.h"
#include "io/hint.h"

#define MiB ((uint64_t)1 << 20)

static uint64_t page;

START_TEST(test_hint_reads_whole_range) {
        /* a 32 MiB file: larger than a read-ahead window, so a single WILLNEED
         * over it would be cut to that window; the pieces are not */
        int fd = tl_temp_file(32 * MiB);
        ck_assert_int_ge(fd, 0);
        ck_assert_int_eq(fdatasync(fd), 0);
        ck_assert_int_eq(posix_fadvise(fd, 0, 0, POSIX_FADV_RANDOM), 0);
        ck_assert_int_eq(posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED), 0);
        int64_t before = tl_cached_pages(fd, 0, 32 * MiB);
        if (before < 0) {
                fprintf(stderr, "skipped: no cachestat() on this kernel\n");
                close(fd);
                return;
        }
        if (before != 0) {
                fprintf(stderr, "skipped: the page cache keeps this file system's pages (tmpfs?)\n");
                close(fd);
                return;
        }
        /* for the record: what one call over the whole range brings in here */
        ck_assert_int_eq(posix_fadvise(fd, 0, 32 * MiB, POSIX_FADV_WILLNEED), 0);
        int64_t one = tl_cached_pages(fd, 0, 32 * MiB);
        fprintf(stderr, "one WILLNEED of 32 MiB: %lld of %llu pages\n", (long long)one,
                (unsigned long long)(32 * MiB / page));
        /* pages still being read cannot be dropped: read them all (a read waits
         * for them) before dropping */
        uint8_t *buf = malloc(MiB);
        ck_assert_ptr_nonnull(buf);
        for (int i = 0; i < 32; i++)
                ck_assert_int_eq(pread(fd, buf, MiB, (off_t)i * (off_t)MiB), (ssize_t)MiB);
        free(buf);
        ck_assert_int_eq(posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED), 0);
        ck_assert_int_eq(tl_cached_pages(fd, 0, 32 * MiB), 0);
        /* in pieces, every page is in the page cache (being read) when the call
         * returns */
        zr_io_range r = { fd, 0, 32 * MiB };
        ck_assert_int_eq(zr_io_willneed(&r, 1), 0);
        ck_assert_int_eq(tl_cached_pages(fd, 0, 32 * MiB), (int64_t)(32 * MiB / page));
        /* a hint on a bad descriptor is an error, and changes nothing */
        zr_io_range bad = { -1, 0, page };
        ck_assert_int_eq(zr_io_willneed(&bad, 1), -EBADF);
        close(fd);
}
END_TEST

int main(void) {
        long p = sysconf(_SC_PAGESIZE);
        Suite *s = suite_create("hint");

        page = p > 0 ? (uint64_t)p : 4096;
        TL_TCASE(s, "hint", 0, test_hint_reads_whole_range);
        return tl_run_suite(s);
}
