/* store-size.c: a closed store's apparent size is its data (docs/FORMAT.md,
 * "Apparent size"): the files a writer keeps at full size are cut to their
 * data at close and grown again when the store turns writable, every mixture
 * of the two opens, and a chunk before the tail may be shorter than its
 * capacity (one loaderx 1.5.7 appended to and rolled over).
 */
#include <check.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check-run.h"
#include "store-kit.h"
#include "store/format.h"

#define LOG2 16 /* 64 KiB chunks */
#define CAP ((uint64_t)1 << LOG2)
#define SEGMENT (ZR_LOC_SEGMENT_ENTRIES * ZR_LOC_SIZE)
#define N 60

static uint64_t size_of(const tdir *d, const char *name) {
        struct stat st;
        ck_assert_msg(fstatat(d->fd, name, &st, AT_SYMLINK_NOFOLLOW) == 0, "%s", name);
        return (uint64_t)st.st_size;
}

static void set_size(const tdir *d, const char *name, uint64_t size) {
        int fd = openat(d->fd, name, O_RDWR | O_CLOEXEC);
        ck_assert_int_ge(fd, 0);
        ck_assert_int_eq(ftruncate(fd, (off_t)size), 0);
        close(fd);
}

/* The frontier, from meta.zr: (chunk, offset). */
static void frontier(const tdir *d, uint32_t *ret_chunk, uint32_t *ret_off) {
        uint8_t h[ZR_HEADER_SIZE];
        int fd = openat(d->fd, "meta.zr", O_RDONLY | O_CLOEXEC);
        ck_assert_int_eq(pread(fd, h, sizeof(h), 0), (ssize_t)sizeof(h));
        close(fd);
        *ret_chunk = (uint32_t)h[6] | (uint32_t)h[7] << 8 | (uint32_t)h[8] << 16 |
                     (uint32_t)h[9] << 24;
        *ret_off = (uint32_t)h[10] | (uint32_t)h[11] << 8 | (uint32_t)h[12] << 16 |
                   (uint32_t)h[13] << 24;
}

/* The closed store in d holds its data and no more: chunks before the tail
 * at their capacity (as its writer made them), the tail chunk cut at the
 * frontier, no chunk past it, 0.loc at the length. */
static void expect_closed(const tdir *d, uint64_t length) {
        uint32_t tc, to;
        char name[32];
        frontier(d, &tc, &to);
        for (uint32_t c = 0; c < tc; c++) {
                snprintf(name, sizeof(name), "%u.chunk", c);
                ck_assert_uint_eq(size_of(d, name), CAP);
        }
        snprintf(name, sizeof(name), "%u.chunk", tc);
        ck_assert_uint_eq(size_of(d, name), to);
        snprintf(name, sizeof(name), "%u.chunk", tc + 1);
        ck_assert(!tdir_has(d, name) || size_of(d, name) == 0);
        ck_assert_uint_eq(size_of(d, "0.loc"), length * ZR_LOC_SIZE);
}

static zr_store *open_as(tdir *d, int read_only, zr_pool *pool) {
        zr_store_options o = { .pool = pool, .read_only = read_only };
        zr_error err = {0};
        zr_store *s = NULL;
        ck_assert_msg(zr_store_open(d->fd, &o, &s, &err) == 0, "%s", err.message);
        return s;
}

START_TEST(test_closed_store_is_its_data) {
        tdir d;
        uint64_t lens[N], len_of[2 * N + 10], ids[2 * N + 10];
        size_t n = 0;
        zr_error err = {0};

        for (size_t i = 0; i < N; i++)
                lens[i] = 3000 + i * 97;
        zr_store *s = store_filled(&d, ZR_CODEC_RAW, LOG2, NULL, lens, N, ids);
        for (size_t i = 0; i < N; i++)
                len_of[i] = lens[i];
        n = N;
        uint32_t tc, to;
        zr_store_close(s, NULL);
        frontier(&d, &tc, &to);
        ck_assert_uint_ge(tc, 2); /* the records span several chunks */
        expect_closed(&d, n);

        /* read-only: nothing changes, and every record reads; its data is
         * the chunks before the tail and the tail up to the frontier */
        s = open_as(&d, 1, NULL);
        ck_assert_uint_eq(zr_store_data_bytes(s), tc * CAP + to);
        check_all(s, ids, len_of, n);
        check_verify(s, n);
        zr_store_close(s, NULL);
        expect_closed(&d, n);

        /* writable: the tail chunk and the table at full size while open */
        s = open_as(&d, 0, NULL);
        char tail[32];
        snprintf(tail, sizeof(tail), "%u.chunk", tc);
        ck_assert_uint_eq(size_of(&d, tail), CAP);
        ck_assert_uint_eq(size_of(&d, "0.loc"), SEGMENT);
        ck_assert_uint_eq(zr_store_data_bytes(s), tc * CAP + to); /* not the file's size */
        append_more(s, lens, 10, N, len_of, ids, &n);
        frontier(&d, &tc, &to);
        ck_assert_uint_eq(zr_store_data_bytes(s), tc * CAP + to);
        check_all(s, ids, len_of, n);
        zr_store_close(s, NULL);
        expect_closed(&d, n);

        /* made writable: the same, and the appended records read through it */
        s = open_as(&d, 1, NULL);
        ck_assert_msg(zr_store_make_writable(s, d.fd, &err) == 0, "%s", err.message);
        frontier(&d, &tc, &to);
        snprintf(tail, sizeof(tail), "%u.chunk", tc);
        ck_assert_uint_eq(size_of(&d, tail), CAP);
        ck_assert_uint_eq(size_of(&d, "0.loc"), SEGMENT);
        append_more(s, lens, N, N + 10, len_of, ids, &n);
        check_all(s, ids, len_of, n);

        /* a delete and a compaction, then the close: the chunks it freed gone */
        uint64_t del[N];
        for (size_t i = 0; i < N; i++)
                del[i] = i * 2;
        ck_assert_int_eq(zr_store_delete(s, del, N, NULL), 0);
        model_delete(ids, &n, del, N);
        zr_compact_result res = {0};
        ck_assert_int_eq(zr_store_compact(s, 0, &res, NULL), 0);
        ck_assert_int_eq(res.finished, 1);
        zr_store_close(s, NULL);
        expect_closed(&d, n);
        s = reopen_checked(&d, open_as(&d, 1, NULL), NULL, ids, len_of, n);
        store_done(&d, s, NULL);
}
END_TEST

/* Every mixture of full and cut files opens (a close cut some of them when it
 * died; an older build's store has them all full), and so does a chunk before
 * the tail cut after its last record (one loaderx 1.5.7 rolled over). */
START_TEST(test_any_file_sizes_open) {
        tdir d;
        uint64_t lens[N], len_of[N], ids[N];

        for (size_t i = 0; i < N; i++)
                len_of[i] = lens[i] = 2000 + i * 131;
        zr_store *s = store_filled(&d, ZR_CODEC_ZSTD, LOG2, NULL, lens, N, ids);
        zr_store_close(s, NULL);
        uint32_t tc, to;
        frontier(&d, &tc, &to);
        char tail[32];
        snprintf(tail, sizeof(tail), "%u.chunk", tc);

        for (int mix = 0; mix < 4; mix++) {
                set_size(&d, tail, mix & 1 ? CAP : to);
                set_size(&d, "0.loc", mix & 2 ? SEGMENT : N * ZR_LOC_SIZE);
                for (int ro = 0; ro <= 1; ro++) {
                        s = open_as(&d, ro, NULL);
                        check_all(s, ids, len_of, N);
                        zr_store_close(s, NULL);
                }
                expect_closed(&d, N); /* the writable close cut them again */
        }

        /* chunk 0 cut after its last record: opens, reads, takes appends */
        s = open_as(&d, 1, NULL);
        uint64_t end0 = 0;
        for (uint64_t i = 0; i < N; i++) {
                zr_loc l;
                ck_assert_int_eq(zr_store_locate(s, &i, 1, &l, NULL), 0);
                if (l.chunk_id == 0 && l.offset + l.phys_length > end0)
                        end0 = l.offset + l.phys_length;
        }
        zr_store_close(s, NULL);
        ck_assert_uint_lt(end0, CAP);
        set_size(&d, "0.chunk", end0);
        for (int round = 0; round < 2; round++) {
                for (int ro = 0; ro <= 1; ro++) {
                        s = open_as(&d, ro, NULL);
                        /* chunk 0 counts its own size */
                        ck_assert_uint_eq(zr_store_data_bytes(s), end0 + (tc - 1) * CAP + to);
                        check_all(s, ids, len_of, N);
                        check_verify(s, N);
                        zr_store_close(s, NULL);
                }
                ck_assert_uint_eq(size_of(&d, "0.chunk"), end0); /* not the tail: kept */
        }
        tdir_remove(&d);
}
END_TEST

void store_add_size(Suite *s) {
        TL_TCASE(s, "apparent-size", 0, test_closed_store_is_its_data, test_any_file_sizes_open);
}
