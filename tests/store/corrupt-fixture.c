/* corrupt-fixture.c: the corrupt suite's stores, file surgery and
 * expectations (corrupt.h). */
#include "corrupt.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "records.h"
#include "util.h"

/* Only the first COPY_PREFIX bytes of a store's file are data here (the .loc
 * segments are 4 GiB and sparse; every other file is small). */
#define COPY_PREFIX (1u << 20)

size_t record_len(uint64_t id) {
        return RECORD_MIN + (size_t)(tl_mix64(id) % (RECORD_MAX - RECORD_MIN));
}

/* The pristine stores, one per codec, built once in main() (each test runs in a
 * child of it) and copied for every case: building a store costs fsyncs, copying
 * its few small files does not. */
char template_dir[3][256];

/* Creates, fills and closes a store of `codec` in a new temporary directory
 * (its path into dir). Runs outside any test: 0, or -1 with a message. */
int template_build(enum zr_codec codec, char dir[256]) {
        zr_store_options opts = { .chunk_log2 = TEST_CHUNK_LOG2 };
        zr_store *s = NULL;
        zr_error err = {0};
        void *dict = NULL;
        size_t dict_len = 0, total = 0;
        uint64_t lens[TEST_RECORDS];
        uint8_t *data = NULL;
        int dfd = -1, r = -1;

        snprintf(dir, 256, "%s/zr-corrupt-template-XXXXXX", tl_tmpdir(false));
        if (!mkdtemp(dir) || (dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0) {
                fprintf(stderr, "%s: %s\n", dir, strerror(errno));
                goto out;
        }
        if (codec == ZR_CODEC_ZSTD_DICT &&
            tl_record_dict(1000, 200, record_len, 0, DICT_CAPACITY, &dict, &dict_len) < 0)
                goto out;
        if (zr_store_create(dfd, codec, dict, dict_len, &opts, &s, &err) < 0) {
                fprintf(stderr, "create: %s\n", err.message);
                goto out;
        }
        for (size_t i = 0; i < TEST_RECORDS; i++)
                total += lens[i] = record_len(i);
        data = malloc(total);
        if (!data)
                goto out;
        for (size_t i = 0, off = 0; i < TEST_RECORDS; off += lens[i], i++)
                tl_record_fill(data + off, i, lens[i]);
        if (zr_store_append(s, data, lens, TEST_RECORDS, NULL, &err) < 0) {
                fprintf(stderr, "append: %s\n", err.message);
                goto out;
        }
        r = 0;
out:
        if (zr_store_close(s, &err) < 0) {
                fprintf(stderr, "close: %s\n", err.message);
                r = -1;
        }
        free(data);
        free(dict);
        if (dfd >= 0)
                close(dfd);
        return r;
}

/* A fresh copy of the pristine store of `codec`, for one case to damage. */
void fixture_make(fixture *f, enum zr_codec codec) {
        memset(f, 0, sizeof(*f));
        f->codec = codec;
        snprintf(f->dir, sizeof(f->dir), "%s/zr-corrupt-XXXXXX", tl_tmpdir(false));
        ck_assert_ptr_nonnull(mkdtemp(f->dir));
        f->dfd = open(f->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        ck_assert_int_ge(f->dfd, 0);
        const char *what = NULL;
        int r = tl_copy_files(template_dir[codec], f->dfd, COPY_PREFIX, &what);
        ck_assert_msg(r == 0, "copy %s: %s", what, strerror(-r));
}

void fixture_done(fixture *f) {
        close(f->dfd);
        tl_rmtree(f->dir);
}

int read_mode;

int fixture_open(const fixture *f, int read_only, zr_store **ret, zr_error *err) {
        zr_store_options opts = { .read_only = read_only, .no_mmap = read_mode };
        zr_error_clear(err);
        return zr_store_open(f->dfd, &opts, ret, err);
}

/* --- file surgery -------------------------------------------------------------- */

void file_pwrite(const fixture *f, const char *name, const void *buf, size_t len, off_t off) {
        int fd = openat(f->dfd, name, O_WRONLY | O_CLOEXEC);
        ck_assert_msg(fd >= 0, "open %s: %s", name, strerror(errno));
        ck_assert_int_eq(pwrite(fd, buf, len, off), (ssize_t)len);
        close(fd);
}

void file_pread(const fixture *f, const char *name, void *buf, size_t len, off_t off) {
        int fd = openat(f->dfd, name, O_RDONLY | O_CLOEXEC);
        ck_assert_msg(fd >= 0, "open %s: %s", name, strerror(errno));
        ck_assert_int_eq(pread(fd, buf, len, off), (ssize_t)len);
        close(fd);
}

void file_truncate(const fixture *f, const char *name, off_t len) {
        int fd = openat(f->dfd, name, O_WRONLY | O_CLOEXEC);
        ck_assert_msg(fd >= 0, "open %s: %s", name, strerror(errno));
        ck_assert_int_eq(ftruncate(fd, len), 0);
        close(fd);
}

void put_le32(uint8_t *p, uint32_t v) {
        for (int i = 0; i < 4; i++)
                p[i] = (uint8_t)(v >> (8 * i));
}

uint32_t get_le32(const uint8_t *p) {
        return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* Reads or writes the .loc entry of record i (segment 0: 16 bytes at i * 16). */
void loc_read(const fixture *f, uint64_t i, uint8_t e[16]) {
        file_pread(f, "0.loc", e, 16, (off_t)(i * 16));
}

void loc_write(const fixture *f, uint64_t i, const uint8_t e[16]) {
        file_pwrite(f, "0.loc", e, 16, (off_t)(i * 16));
}

/* --- expectations -------------------------------------------------------------- */

int code_in(int r, const int *codes, size_t n) {
        for (size_t i = 0; i < n; i++)
                if (r == -codes[i])
                        return 1;
        return 0;
}

/* r must be one of codes, err must carry it with a message (containing
 * `keyword`, case-insensitively, if keyword is not NULL). */
void expect_error(const char *what, int r, const zr_error *err, const int *codes, size_t n,
                         const char *keyword) {
        ck_assert_msg(code_in(r, codes, n), "%s: returned %d (%s), message \"%s\"", what, r,
                      zr_error_code_name(r), err->message);
        ck_assert_msg(err->code == -r, "%s: err->code %d does not match the return %d", what,
                      err->code, r);
        ck_assert_msg(err->message[0] != 0, "%s: no message", what);
        if (keyword)
                ck_assert_msg(strcasestr(err->message, keyword) != NULL,
                              "%s: message \"%s\" does not mention %s", what, err->message, keyword);
}

/* Gathers record i into a buffer; returns the code and, on success, checks the
 * bytes are the ones written. The one-pass dense gather of the same record, as
 * an item of its written length, must agree: the same bytes, or a refusal. */
int gather_one(zr_store *s, uint64_t i, zr_error *err) {
        uint8_t *buf = malloc(RECORD_MAX), *dense = malloc(RECORD_MAX);
        uint64_t len = 0;
        zr_loc scratch;
        zr_error derr = {0};
        ck_assert_ptr_nonnull(buf);
        ck_assert_ptr_nonnull(dense);
        zr_error_clear(err);
        int r = zr_store_gather(s, &i, 1, buf, RECORD_MAX, &len, err);
        int rd = zr_store_gather_dense(s, &i, 1, record_len(i), dense, &scratch, &derr);
        ck_assert_msg((r == 0) == (rd == 0), "record %" PRIu64 ": gather %d, dense gather %d (%s)",
                      i, r, rd, derr.message);
        ck_assert(rd == 0 || derr.message[0] != 0);
        if (r == 0)
                ck_assert_int_eq(memcmp(buf, dense, record_len(i)), 0);
        free(dense);
        if (r == 0) {
                uint8_t *want = malloc(RECORD_MAX);
                ck_assert_ptr_nonnull(want);
                ck_assert_uint_eq(len, record_len(i));
                tl_record_fill(want, i, len);
                ck_assert_msg(memcmp(buf, want, len) == 0, "record %" PRIu64 ": gather returned 0 "
                              "with the wrong bytes", i);
                free(want);
        }
        free(buf);
        return r;
}

/* The store is damaged so that opening it, or else verifying it and gathering
 * the damaged record `bad`, fails with one of codes; every other record still
 * reads right. */
void expect_damage(const fixture *f, uint64_t bad, const int *codes, size_t n,
                          const char *keyword, const char *what) {
        zr_store *s = NULL;
        zr_error err = {0};
        char label[160];
        int r = fixture_open(f, 0, &s, &err);
        if (r < 0) {
                snprintf(label, sizeof(label), "%s: open", what);
                expect_error(label, r, &err, codes, n, keyword);
                return;
        }
        zr_verify_report rep = {0};
        zr_error_clear(&err);
        r = zr_store_verify(s, &rep, &err);
        snprintf(label, sizeof(label), "%s: verify", what);
        expect_error(label, r, &err, codes, n, keyword);
        ck_assert_uint_ge(rep.bad, 1);
        ck_assert_uint_eq(rep.first_bad, bad);
        r = gather_one(s, bad, &err);
        snprintf(label, sizeof(label), "%s: gather of record %" PRIu64, what, bad);
        expect_error(label, r, &err, codes, n, keyword);
        for (uint64_t i = 0; i < TEST_RECORDS; i++)
                if (i != bad)
                        ck_assert_msg(gather_one(s, i, &err) == 0, "%s: record %" PRIu64
                                      " is intact but does not read: %s", what, i, err.message);
        ck_assert_int_eq(zr_store_close(s, NULL), 0);
}

void expect_open_error(const fixture *f, const int *codes, size_t n, const char *keyword,
                              const char *what) {
        zr_store *s = NULL;
        zr_error err = {0};
        int r = fixture_open(f, 0, &s, &err);
        if (r == 0)
                zr_store_close(s, NULL);
        expect_error(what, r, &err, codes, n, keyword);
}

void expect_cut_refused(enum zr_codec codec, const char *name, off_t len, const int *codes,
                        size_t n, const char *keyword, const char *what) {
        fixture f;

        fixture_make(&f, codec);
        file_truncate(&f, name, len);
        expect_open_error(&f, codes, n, keyword, what);
        fixture_done(&f);
}

void expect_patch_refused(enum zr_codec codec, const char *name, const void *p, size_t len,
                          off_t off, const int *codes, size_t n, const char *keyword,
                          const char *what) {
        fixture f;

        fixture_make(&f, codec);
        file_pwrite(&f, name, p, len, off);
        expect_open_error(&f, codes, n, keyword, what);
        fixture_done(&f);
}

void expect_removal_refused(enum zr_codec codec, const char *name, const int *codes, size_t n,
                            const char *keyword, const char *what) {
        fixture f;

        fixture_make(&f, codec);
        ck_assert_int_eq(unlinkat(f.dfd, name, 0), 0);
        expect_open_error(&f, codes, n, keyword, what);
        fixture_done(&f);
}
