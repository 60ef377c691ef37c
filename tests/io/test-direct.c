/* test-direct.c: direct reads (io/direct.h) give the bytes a buffered pread
 * gives, on both queue backends: aligned records straight into place with no
 * copy, neighbours in one read, records at every alignment and block edge
 * through the fewest bounced blocks, a record that ends at the file's end
 * (the last block read short), a record past a truncated file's end failing;
 * a file on a file system that refuses O_DIRECT (tmpfs before Linux 6.6) is
 * refused by zr_direct_open() with an error, never read wrong.
 *
 * The plans run on real O_DIRECT descriptors where the test's directory takes
 * them, and on buffered ones at a chosen alignment everywhere (the reads are
 * the same aligned reads). */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "check-run.h"
#include "files.h"
#include "util.h"
#include "io/direct.h"
#include "io/ioq.h"

#define KiB ((uint64_t)1 << 10)

/* The queue of loop test _i: 0 threads, 1 io_uring (NULL where it cannot run). */
static zr_ioq *queue(int i) {
        zr_ioq_options o = { .backend = i ? ZR_IOQ_URING : ZR_IOQ_THREADS, .max_inflight = 16,
                             .threads = 4, .max_read = 64 * KiB };
        zr_error err = {0};
        zr_ioq *q = NULL;
        int r = zr_ioq_new(&o, &q, &err);
        if (r < 0 && i) {
                fprintf(stderr, "test-direct: io_uring skipped: %s\n", err.message);
                return NULL;
        }
        ck_assert_msg(r == 0, "zr_ioq_new: %s", err.message);
        return q;
}

/* A file of `size` bytes of a pattern in the test's temporary directory. */
static int temp_file(uint64_t size) {
        int fd = tl_temp_file(size);
        ck_assert_msg(fd >= 0, "temporary file: %s", strerror(-fd));
        return fd;
}

/* An aligned destination of `len` bytes, filled with 0xEE. */
static uint8_t *dest(uint64_t len) {
        void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        ck_assert(p != MAP_FAILED);
        memset(p, 0xEE, len);
        return p;
}

/* Plans w[0..n) (a copy: planning sorts), reads them, and checks every want's
 * bytes against pread of `fd`. Returns the plan's figures in *ret. */
static void read_and_check(zr_ioq *q, int fd, int rfd, const zr_direct_want *w, size_t n,
                           zr_direct_align a, zr_direct_plan *ret) {
        zr_direct_want *c = malloc(n * sizeof(*c));
        zr_direct_plan p;
        uint64_t bytes = 0;

        ck_assert(c);
        memcpy(c, w, n * sizeof(*c));
        for (size_t i = 0; i < n; i++)
                c[i].fd = rfd;
        ck_assert_int_eq(zr_direct_plan_make(c, n, a, &p), 0);
        ck_assert_int_eq(zr_direct_read(q, &p, &bytes), 0);
        ck_assert_uint_le(bytes, p.read_bytes); /* short only past the file's end */
        ck_assert_uint_gt(bytes, 0);
        for (size_t i = 0; i < n; i++) {
                uint8_t *want = malloc(w[i].length ? w[i].length : 1);
                ck_assert(want);
                ck_assert_int_eq(pread(fd, want, w[i].length, (off_t)w[i].offset),
                                 (ssize_t)w[i].length);
                ck_assert_msg(memcmp(want, w[i].dst, w[i].length) == 0,
                              "want %zu (%llu bytes at %llu) differs", i,
                              (unsigned long long)w[i].length, (unsigned long long)w[i].offset);
                free(want);
        }
        *ret = p; /* the figures stay with the caller; the memory goes */
        ret->reads = NULL;
        ret->copies = NULL;
        ret->bounce = NULL;
        zr_direct_plan_free(&p);
        free(c);
}

/* Aligned 4 KiB records at scattered places, into aligned places: every read
 * straight into place, no copy, nothing read twice; neighbours (adjacent in
 * the file and in memory) share a read. */
START_TEST(test_aligned_records_straight_into_place) {
        zr_ioq *q = queue(_i);
        if (!q)
                return;
        int fd = temp_file(1024 * KiB);
        zr_direct_align a = { 512, 512 };
        uint8_t *d = dest(64 * KiB);
        zr_direct_want w[16];
        uint64_t recs[16] = { 7, 3, 200, 201, 202, 90, 17, 18, 255, 0, 100, 150, 151, 60, 61, 5 };
        zr_direct_plan p;

        for (int i = 0; i < 16; i++)
                w[i] = (zr_direct_want){ .offset = recs[i] * 4 * KiB, .length = 4 * KiB,
                                         .dst = d + (uint64_t)i * 4 * KiB };
        read_and_check(q, fd, fd, w, 16, a, &p);
        ck_assert_uint_eq(p.copy_bytes, 0);
        ck_assert_uint_eq(p.ncopies, 0);
        ck_assert_uint_eq(p.read_bytes, p.want_bytes);
        /* 200-202, 17-18, 150-151, 60-61 are neighbours in both places */
        ck_assert_uint_eq(p.runs, 11);
        ck_assert_uint_eq(p.nreads, 11);
        munmap(d, 64 * KiB);
        close(fd);
        zr_ioq_free(q);
}
END_TEST

/* Records at every alignment: inside one block, across one edge, ending on an
 * edge, long ones starting mid-block, into places aligned like their offsets
 * or not. Bytes as pread gives them; copies only of partial blocks when the
 * place is aligned like the offset. */
START_TEST(test_unaligned_records_at_block_edges) {
        zr_ioq *q = queue(_i);
        if (!q)
                return;
        const uint64_t size = 777 * KiB + 123;
        int fd = temp_file(size);
        zr_direct_align a = { 512, 512 };
        uint64_t span = 4096 * KiB;
        uint8_t *d = dest(span);
        uint64_t seed = 37, at = 0;
        enum { N = 64 };
        zr_direct_want w[N];
        zr_direct_plan p;

        for (int i = 0; i < N; i++) {
                uint64_t len;
                switch (i % 4) {
                case 0: len = 1 + tl_rand(&seed) % 300; break;      /* small */
                case 1: len = 512; break;                           /* one block's size */
                case 2: len = 4 * KiB + 1; break;
                default: len = 40 * KiB + tl_rand(&seed) % 5000; break;
                }
                uint64_t off = tl_rand(&seed) % (size - len);
                if (i % 8 == 1)
                        off = 511; /* across the first edge */
                if (i % 8 == 5)
                        off = 1024 - len % 1024; /* ends on an edge */
                /* congruent with the offset for even i, not for odd */
                at = (at + 4095) & ~(uint64_t)4095;
                at += off % 512 + (i % 2 ? 7 : 0);
                w[i] = (zr_direct_want){ .offset = off, .length = len, .dst = d + at };
                at += len + 1; /* never neighbours in memory */
                ck_assert(at < span);
        }
        read_and_check(q, fd, fd, w, N, a, &p);
        /* congruent long records copy at most their two partial blocks */
        ck_assert(p.copy_bytes < p.want_bytes);
        munmap(d, span);
        close(fd);
        zr_ioq_free(q);
}
END_TEST

/* A congruent run copies at most two partial blocks, and reads nothing past
 * them. */
START_TEST(test_congruent_run_copies_its_ends_only) {
        zr_ioq *q = queue(_i);
        if (!q)
                return;
        int fd = temp_file(1024 * KiB);
        zr_direct_align a = { 512, 512 };
        uint8_t *d = dest(512 * KiB);
        zr_direct_want w = { .offset = 100 * KiB + 100, .length = 256 * KiB, .dst = d + 100 };
        zr_direct_plan p;

        read_and_check(q, fd, fd, &w, 1, a, &p);
        ck_assert_uint_eq(p.nreads, 3);
        ck_assert_uint_eq(p.copy_bytes, (512 - 100) + 100);
        ck_assert_uint_eq(p.read_bytes, 256 * KiB + 512);
        munmap(d, 512 * KiB);
        close(fd);
        zr_ioq_free(q);
}
END_TEST

/* The last record of a file whose size is not a multiple of the block: its
 * block is read short, and that is enough; a record past the end of a file
 * truncated since fails with ENODATA. */
START_TEST(test_short_read_at_end_of_file) {
        zr_ioq *q = queue(_i);
        if (!q)
                return;
        const uint64_t size = 64 * KiB + 1000;
        int fd = temp_file(size);
        zr_direct_align a = { 512, 512 };
        uint8_t *d = dest(128 * KiB);
        zr_direct_want w[2] = {
                { .offset = size - 3000, .length = 3000, .dst = d },
                { .offset = 8 * KiB, .length = 4 * KiB, .dst = d + 8 * KiB },
        };
        zr_direct_plan p;

        read_and_check(q, fd, fd, w, 2, a, &p);
        /* truncated under the plan: the wanted bytes are gone */
        zr_direct_want t = { .fd = fd, .offset = size - 3000, .length = 3000, .dst = d };
        ck_assert_int_eq(ftruncate(fd, (off_t)(size - 5000)), 0);
        ck_assert_int_eq(zr_direct_plan_make(&t, 1, a, &p), 0);
        ck_assert_int_eq(zr_direct_read(q, &p, NULL), -ENODATA);
        zr_direct_plan_free(&p);
        munmap(d, 128 * KiB);
        close(fd);
        zr_ioq_free(q);
}
END_TEST

/* With a real O_DIRECT descriptor where the test's directory takes one; and
 * on /dev/shm, either a clean refusal or the right bytes. */
static void real_direct(int _i, int memory) {
        zr_ioq *q = queue(_i);
        if (!q)
                return;
        char path[256];
        snprintf(path, sizeof(path), "%s/zr-direct-XXXXXX", tl_tmpdir(memory));
        int fd = mkstemp(path);
        ck_assert_msg(fd >= 0, "mkstemp %s: %s", path, strerror(errno));
        unlink(path);
        uint64_t seed = 5, size = 300 * KiB + 77;
        uint8_t *buf = malloc(size);
        ck_assert(buf);
        for (uint64_t i = 0; i < size; i++)
                buf[i] = (uint8_t)(tl_rand(&seed) >> 32);
        ck_assert_int_eq(pwrite(fd, buf, size, 0), (ssize_t)size);
        ck_assert_int_eq(fsync(fd), 0);
        free(buf);

        int dfd = -1;
        zr_direct_align a;
        zr_error err = {0};
        int r = zr_direct_open(fd, &dfd, &a, &err);
        if (r < 0) {
                /* refused: said why, nothing opened */
                ck_assert_msg(r == -EINVAL || r == -EOPNOTSUPP, "zr_direct_open: %s", err.message);
                ck_assert(err.message[0]);
                fprintf(stderr, "test-direct: %s refuses O_DIRECT: %s\n", tl_tmpdir(memory),
                        err.message);
        } else {
                ck_assert_int_ge(fcntl(dfd, F_GETFD), FD_CLOEXEC);
                ck_assert(fcntl(dfd, F_GETFL) & O_DIRECT);
                uint8_t *d = dest(1024 * KiB);
                zr_direct_want w[4] = {
                        { .offset = 0, .length = 64 * KiB, .dst = d },
                        { .offset = 64 * KiB, .length = 64 * KiB, .dst = d + 64 * KiB },
                        { .offset = 1000, .length = 70 * KiB, .dst = d + 200 * KiB + 1000 },
                        { .offset = size - 77 - 4096, .length = 77 + 4096, .dst = d + 512 * KiB + 3 },
                };
                zr_direct_plan p;
                read_and_check(q, fd, dfd, w, 4, a, &p);
                munmap(d, 1024 * KiB);
                close(dfd);
        }
        close(fd);
        zr_ioq_free(q);
}

START_TEST(test_real_direct_descriptor) {
        real_direct(_i, 0);
}
END_TEST

START_TEST(test_tmpfs_refuses_or_reads_right) {
        real_direct(_i, 1);
}
END_TEST

START_TEST(test_bad_plans) {
        zr_direct_plan p;
        zr_direct_want w = { .fd = 0, .offset = 0, .length = 1, .dst = (uint8_t *)&p };
        ck_assert_int_eq(zr_direct_plan_make(&w, 1, (zr_direct_align){ 3, 512 }, &p), -EINVAL);
        ck_assert_int_eq(zr_direct_plan_make(&w, 1, (zr_direct_align){ 512, 8192 }, &p), -EINVAL);
        ck_assert_int_eq(zr_direct_plan_make(&w, 0, (zr_direct_align){ 512, 512 }, &p), 0);
        ck_assert_uint_eq(p.nreads, 0);
        zr_direct_plan_free(&p);
        /* a directory, a pipe: no direct reads */
        int pipefd[2];
        zr_error err = {0};
        int dfd;
        zr_direct_align a;
        ck_assert_int_eq(pipe(pipefd), 0);
        ck_assert_int_eq(zr_direct_open(pipefd[0], &dfd, &a, &err), -EOPNOTSUPP);
        close(pipefd[0]);
        close(pipefd[1]);
}
END_TEST

int main(void) {
        Suite *s = suite_create("direct");
        TCase *tc = tl_tcase_add(s, "backends", 120, (const TTest *)NULL);
        TL_LOOP_TESTS(tc, 0, 2, test_aligned_records_straight_into_place,
                      test_unaligned_records_at_block_edges, test_congruent_run_copies_its_ends_only,
                      test_short_read_at_end_of_file, test_real_direct_descriptor,
                      test_tmpfs_refuses_or_reads_right);
        TL_TCASE(s, "plans", 0, test_bad_plans);
        return tl_run_suite(s);
}
