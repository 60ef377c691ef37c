/* test-corrupt.c: a damaged store gets a clear error, never a crash.
 *
 * Each test builds a small valid store (40 records of 0.5 to 6 KiB, 64 KiB
 * chunks so there are several), closes it, damages it with plain file
 * operations and checks that open, locate, gather and verify return the code
 * that names the damage, with a message that says what is wrong, and that
 * whatever does succeed returns the right bytes. The damage: meta.zr cut, grown
 * and with wrong fields; table entries past their chunk, in a missing chunk,
 * past the frontier, with impossible lengths, listed twice or pointing into
 * another frame; chunks and .loc cut or removed; store files that are
 * directories or symbolic links; a missing or damaged dict.zr; torn and
 * impossible delete journals. The sanitizer build runs the
 * same tests: a read past a buffer fails them there. Every test runs twice:
 * reading through the store's mappings (the default) and with pread (no_mmap).
 * Two fuzz loops (fixed
 * seed) write random bytes over meta.zr and over one .loc entry and check only
 * that every call returns 0 or a known code with a message.
 */
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zdict.h>

#include "records.h"
#include "store/journal.h"
#include "store/store.h"
#include "util.h"

#define TEST_RECORDS 40
#define TEST_CHUNK_LOG2 16 /* 64 KiB chunks: the 40 records span several */
#define RECORD_MIN 512
#define RECORD_MAX 6144
#define DICT_CAPACITY 8192
#define FUZZ_ITERATIONS 300
#define FUZZ_SEED UINT64_C(0xf022)
#define FUZZ_VERIFY_MAX 4096 /* verify a fuzzed store only if it claims this few records */

static size_t record_len(uint64_t id) {
        return RECORD_MIN + (size_t)(tl_mix64(id) % (RECORD_MAX - RECORD_MIN));
}

/* --- a small store on disk -------------------------------------------------- */

typedef struct fixture {
        char dir[256];
        int dfd;
        enum zr_codec codec;
} fixture;

/* The pristine stores, one per codec, built once in main() (each test runs in a
 * child of it) and copied for every case: building a store costs fsyncs, copying
 * its few small files does not. */
static char template_dir[3][256];

/* Creates, fills and closes a store of `codec` in a new temporary directory
 * (its path into dir). Runs outside any test: 0, or -1 with a message. */
static int template_build(enum zr_codec codec, char dir[256]) {
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

/* Only the first COPY_PREFIX bytes of a store's file are data here (the .loc
 * segments are 4 GiB and sparse; every other file is small). */
#define COPY_PREFIX (1u << 20)

/* A fresh copy of the pristine store of `codec`, for one case to damage. */
static void fixture_make(fixture *f, enum zr_codec codec) {
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

static void fixture_done(fixture *f) {
        close(f->dfd);
        tl_rmtree(f->dir);
}

/* How the store under test reads: 0 through its mappings (the default), 1 with
 * pread (no_mmap). Every test runs once each way (a loop test: _i). */
static int read_mode;

static int fixture_open(const fixture *f, int read_only, zr_store **ret, zr_error *err) {
        zr_store_options opts = { .read_only = read_only, .no_mmap = read_mode };
        zr_error_clear(err);
        return zr_store_open(f->dfd, &opts, ret, err);
}

/* --- file surgery -------------------------------------------------------------- */

static void file_pwrite(const fixture *f, const char *name, const void *buf, size_t len, off_t off) {
        int fd = openat(f->dfd, name, O_WRONLY | O_CLOEXEC);
        ck_assert_msg(fd >= 0, "open %s: %s", name, strerror(errno));
        ck_assert_int_eq(pwrite(fd, buf, len, off), (ssize_t)len);
        close(fd);
}

static void file_pread(const fixture *f, const char *name, void *buf, size_t len, off_t off) {
        int fd = openat(f->dfd, name, O_RDONLY | O_CLOEXEC);
        ck_assert_msg(fd >= 0, "open %s: %s", name, strerror(errno));
        ck_assert_int_eq(pread(fd, buf, len, off), (ssize_t)len);
        close(fd);
}

static void file_truncate(const fixture *f, const char *name, off_t len) {
        int fd = openat(f->dfd, name, O_WRONLY | O_CLOEXEC);
        ck_assert_msg(fd >= 0, "open %s: %s", name, strerror(errno));
        ck_assert_int_eq(ftruncate(fd, len), 0);
        close(fd);
}

static void put_le32(uint8_t *p, uint32_t v) {
        for (int i = 0; i < 4; i++)
                p[i] = (uint8_t)(v >> (8 * i));
}

static uint32_t get_le32(const uint8_t *p) {
        return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* Reads or writes the .loc entry of record i (segment 0: 16 bytes at i * 16). */
static void loc_read(const fixture *f, uint64_t i, uint8_t e[16]) {
        file_pread(f, "0.loc", e, 16, (off_t)(i * 16));
}

static void loc_write(const fixture *f, uint64_t i, const uint8_t e[16]) {
        file_pwrite(f, "0.loc", e, 16, (off_t)(i * 16));
}

/* --- expectations -------------------------------------------------------------- */

static int code_in(int r, const int *codes, size_t n) {
        for (size_t i = 0; i < n; i++)
                if (r == -codes[i])
                        return 1;
        return 0;
}

#define CODES(...) ((const int[]){ __VA_ARGS__ }), (sizeof((const int[]){ __VA_ARGS__ }) / sizeof(int))

/* r must be one of codes, err must carry it with a message (containing
 * `keyword`, case-insensitively, if keyword is not NULL). */
static void expect_error(const char *what, int r, const zr_error *err, const int *codes, size_t n,
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
 * bytes are the ones written. */
static int gather_one(zr_store *s, uint64_t i, zr_error *err) {
        uint8_t *buf = malloc(RECORD_MAX);
        uint64_t len = 0;
        ck_assert_ptr_nonnull(buf);
        zr_error_clear(err);
        int r = zr_store_gather(s, &i, 1, buf, RECORD_MAX, &len, err);
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
static void expect_damage(const fixture *f, uint64_t bad, const int *codes, size_t n,
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

static void expect_open_error(const fixture *f, const int *codes, size_t n, const char *keyword,
                              const char *what) {
        zr_store *s = NULL;
        zr_error err = {0};
        int r = fixture_open(f, 0, &s, &err);
        if (r == 0)
                zr_store_close(s, NULL);
        expect_error(what, r, &err, codes, n, keyword);
}

/* --- the cases ---------------------------------------------------------------- */

START_TEST(test_not_a_store) {
        read_mode = _i;
        fixture f = {0};
        const char *tmp = getenv("TMPDIR");
        zr_store *s = NULL;
        zr_error err = {0};

        snprintf(f.dir, sizeof(f.dir), "%s/zr-corrupt-XXXXXX", tmp && *tmp ? tmp : "/tmp");
        ck_assert_ptr_nonnull(mkdtemp(f.dir));
        f.dfd = open(f.dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        ck_assert_int_ge(f.dfd, 0);
        int r = zr_store_open(f.dfd, NULL, &s, &err);
        expect_error("empty directory", r, &err, CODES(ZR_E_NOT_STORE), NULL);

        /* a directory of other files is not a store either, and stays untouched */
        int fd = openat(f.dfd, "notes.txt", O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
        ck_assert_int_ge(fd, 0);
        ck_assert_int_eq(write(fd, "hello", 5), 5);
        close(fd);
        zr_error_clear(&err);
        r = zr_store_open(f.dfd, NULL, &s, &err);
        expect_error("directory of other files", r, &err, CODES(ZR_E_NOT_STORE), NULL);
        ck_assert_int_ne(faccessat(f.dfd, "0.loc", F_OK, 0), 0);
        ck_assert_int_ne(faccessat(f.dfd, "meta.zr", F_OK, 0), 0);
        fixture_done(&f);
}
END_TEST

START_TEST(test_meta_truncated) {
        read_mode = _i;
        fixture f;
        fixture_make(&f, ZR_CODEC_RAW);
        /* an empty meta.zr has not even a magic number: either code says so */
        file_truncate(&f, "meta.zr", 0);
        expect_open_error(&f, CODES(ZR_E_CORRUPT, ZR_E_BAD_MAGIC), "meta.zr", "empty meta.zr");
        fixture_done(&f);

        fixture_make(&f, ZR_CODEC_RAW);
        file_truncate(&f, "meta.zr", 16);
        expect_open_error(&f, CODES(ZR_E_CORRUPT), "meta.zr", "meta.zr cut to 16 bytes");
        fixture_done(&f);

        fixture_make(&f, ZR_CODEC_ZSTD);
        file_truncate(&f, "meta.zr", 31);
        expect_open_error(&f, CODES(ZR_E_CORRUPT), "meta.zr", "meta.zr cut to 31 bytes");
        fixture_done(&f);

        fixture_make(&f, ZR_CODEC_ZSTD);
        file_truncate(&f, "meta.zr", 48);
        expect_open_error(&f, CODES(ZR_E_CORRUPT), "meta.zr", "meta.zr grown to 48 bytes");
        fixture_done(&f);
}
END_TEST

START_TEST(test_meta_fields) {
        read_mode = _i;
        fixture f;
        uint8_t v;

        fixture_make(&f, ZR_CODEC_RAW);
        file_pwrite(&f, "meta.zr", "ZREX", 4, 0);
        expect_open_error(&f, CODES(ZR_E_BAD_MAGIC), "meta.zr", "wrong magic");
        fixture_done(&f);

        fixture_make(&f, ZR_CODEC_ZSTD);
        v = 99;
        file_pwrite(&f, "meta.zr", &v, 1, 4);
        expect_open_error(&f, CODES(ZR_E_BAD_VERSION), "meta.zr", "version 99");
        v = 0;
        file_pwrite(&f, "meta.zr", &v, 1, 4);
        expect_open_error(&f, CODES(ZR_E_BAD_VERSION), "meta.zr", "version 0");
        fixture_done(&f);

        fixture_make(&f, ZR_CODEC_RAW);
        v = 7;
        file_pwrite(&f, "meta.zr", &v, 1, 5);
        expect_open_error(&f, CODES(ZR_E_BAD_CODEC), "codec", "codec 7");
        fixture_done(&f);

        /* chunk_log2 (byte 22) out of range: a shift by it would be undefined */
        fixture_make(&f, ZR_CODEC_RAW);
        v = 200;
        file_pwrite(&f, "meta.zr", &v, 1, 22);
        expect_open_error(&f, CODES(ZR_E_CORRUPT), "meta.zr", "chunk_log2 200");
        fixture_done(&f);

        /* the tail past the last chunk file */
        fixture_make(&f, ZR_CODEC_RAW);
        uint8_t t[4];
        put_le32(t, 5000);
        file_pwrite(&f, "meta.zr", t, 4, 6);
        expect_open_error(&f, CODES(ZR_E_CORRUPT), NULL, "tail_chunk 5000");
        fixture_done(&f);
}
END_TEST

START_TEST(test_length_beyond_table) {
        read_mode = _i;
        fixture f;
        zr_store *s = NULL;
        zr_error err = {0};
        uint8_t len8[8];

        /* a length that needs a second .loc segment the store does not have */
        uint64_t len = ((uint64_t)1 << 28) + 3;
        fixture_make(&f, ZR_CODEC_ZSTD);
        for (int i = 0; i < 8; i++)
                len8[i] = (uint8_t)(len >> (8 * i));
        file_pwrite(&f, "meta.zr", len8, 8, 14);
        int r = fixture_open(&f, 0, &s, &err);
        if (r < 0) {
                expect_error("length 2^28+3 with one segment: open", r, &err, CODES(ZR_E_CORRUPT), NULL);
        } else {
                uint64_t idx = len - 1;
                zr_loc loc;
                zr_error_clear(&err);
                r = zr_store_locate(s, &idx, 1, &loc, &err);
                expect_error("length 2^28+3 with one segment: locate", r, &err,
                             CODES(ZR_E_CORRUPT), NULL);
                r = gather_one(s, len - 1, &err);
                expect_error("length 2^28+3 with one segment: gather", r, &err,
                             CODES(ZR_E_CORRUPT, ZR_E_BUFFER), NULL);
                zr_store_close(s, NULL);
        }
        fixture_done(&f);

        /* a length two past the table's last entry, inside the segment: the
         * entries read as zeros. A compressed store has no empty frames (a zstd
         * frame is at least 9 bytes), so a zero entry is damage; a raw store
         * cannot tell it from an empty record at offset 0, and must only not
         * crash (it reads two empty records) */
        for (int c = 0; c <= 2; c++) {
                len = TEST_RECORDS + 2;
                fixture_make(&f, (enum zr_codec)c);
                for (int i = 0; i < 8; i++)
                        len8[i] = (uint8_t)(len >> (8 * i));
                file_pwrite(&f, "meta.zr", len8, 8, 14);
                if (c == ZR_CODEC_RAW) {
                        ck_assert_int_eq(fixture_open(&f, 0, &s, &err), 0);
                        uint8_t buf[16];
                        uint64_t idx = TEST_RECORDS + 1, got = 1;
                        r = zr_store_gather(s, &idx, 1, buf, sizeof(buf), &got, &err);
                        ck_assert(r == 0 ? got == 0 : code_in(r, CODES(ZR_E_CORRUPT)));
                        zr_store_close(s, NULL);
                } else {
                        expect_damage(&f, TEST_RECORDS, CODES(ZR_E_CORRUPT, ZR_E_DECODE), NULL,
                                      c == 1 ? "zstd store, length 2 past the table"
                                             : "zstd_dict store, length 2 past the table");
                }
                fixture_done(&f);
        }
}
END_TEST

/* Damages the .loc entry of record `bad` with `fn` and expects ZR_E_CORRUPT. */
static void loc_case(enum zr_codec codec, uint64_t bad, void (*fn)(uint8_t e[16], const uint8_t meta[32]),
                     const char *what) {
        fixture f;
        uint8_t e[16], meta[32];

        fixture_make(&f, codec);
        file_pread(&f, "meta.zr", meta, 32, 0);
        loc_read(&f, bad, e);
        fn(e, meta);
        loc_write(&f, bad, e);
        char label[128];
        snprintf(label, sizeof(label), "%s (codec %d)", what, (int)codec);
        expect_damage(&f, bad, CODES(ZR_E_CORRUPT), NULL, label);
        fixture_done(&f);
}

static void past_chunk_end(uint8_t e[16], const uint8_t meta[32]) {
        put_le32(e, ((uint32_t)1 << TEST_CHUNK_LOG2) - 100); /* offset */
        put_le32(e + 4, 4000);                             /* phys_length */
}

static void missing_chunk(uint8_t e[16], const uint8_t meta[32]) {
        put_le32(e + 12, 1000); /* chunk_id */
}

static void past_frontier(uint8_t e[16], const uint8_t meta[32]) {
        put_le32(e + 12, get_le32(meta + 6)); /* the tail chunk ... */
        put_le32(e, get_le32(meta + 10));     /* ... at the tail offset */
}

static void huge_phys(uint8_t e[16], const uint8_t meta[32]) {
        put_le32(e + 4, UINT32_MAX);
}

static void raw_lengths_differ(uint8_t e[16], const uint8_t meta[32]) {
        put_le32(e + 8, get_le32(e + 4) + 1);
}

START_TEST(test_loc_outside_chunk) {
        read_mode = _i;
        for (int c = 0; c <= 2; c++) {
                loc_case((enum zr_codec)c, 3, past_chunk_end, "entry past its chunk's end");
                loc_case((enum zr_codec)c, 7, missing_chunk, "entry in a chunk that does not exist");
                loc_case((enum zr_codec)c, 0, past_frontier, "entry past the write frontier");
                loc_case((enum zr_codec)c, 11, huge_phys, "entry with phys_length 2^32-1");
        }
        loc_case(ZR_CODEC_RAW, 5, raw_lengths_differ, "raw entry with logic != phys");
}
END_TEST

static void logic_too_big(uint8_t e[16], const uint8_t meta[32]) {
        put_le32(e + 8, 0x80000001u); /* logic_length 2^31 + 1 */
}

static void frame_too_short(uint8_t e[16], const uint8_t meta[32]) {
        put_le32(e + 4, 8); /* no zstd frame is shorter than 9 bytes */
}

START_TEST(test_loc_lengths) {
        read_mode = _i;
        for (int c = 0; c <= 2; c++)
                loc_case((enum zr_codec)c, 4, logic_too_big, "entry with logic_length 2^31+1");
        loc_case(ZR_CODEC_ZSTD, 6, frame_too_short, "compressed entry of 8 bytes");
        loc_case(ZR_CODEC_ZSTD_DICT, 6, frame_too_short, "compressed entry of 8 bytes");
}
END_TEST

/* Table entries that each pass the bounds checks but point at the wrong bytes:
 * a record listed twice, and an entry into the middle of another frame. */
START_TEST(test_loc_misdirected) {
        read_mode = _i;
        for (int c = 0; c <= 2; c++) {
                fixture f;
                uint8_t e[16];

                /* record 12's entry copied over record 20's: both read, but they
                 * share bytes, which verify calls corruption */
                fixture_make(&f, (enum zr_codec)c);
                loc_read(&f, 12, e);
                loc_write(&f, 20, e);
                zr_store *s = NULL;
                zr_error err = {0};
                ck_assert_int_eq(fixture_open(&f, 0, &s, &err), 0);
                zr_verify_report rep = {0};
                int r = zr_store_verify(s, &rep, &err);
                expect_error("a record listed twice: verify", r, &err, CODES(ZR_E_CORRUPT),
                             "overlap");
                ck_assert_int_eq(rep.overlaps_checked, 1);
                ck_assert_uint_eq(rep.bad, 1);
                ck_assert_uint_eq(rep.first_bad, 20);
                ck_assert_int_eq(zr_store_close(s, NULL), 0);
                fixture_done(&f);

                if (c == ZR_CODEC_RAW)
                        continue; /* raw bytes carry no checksum to refuse them */
                /* an entry moved 3 bytes into its frame: never the right bytes */
                fixture_make(&f, (enum zr_codec)c);
                loc_read(&f, 15, e);
                put_le32(e, get_le32(e) + 3);
                put_le32(e + 4, get_le32(e + 4) - 3);
                loc_write(&f, 15, e);
                expect_damage(&f, 15, CODES(ZR_E_DECODE), NULL,
                              c == 1 ? "zstd entry 3 bytes into its frame"
                                     : "zstd_dict entry 3 bytes into its frame");
                fixture_done(&f);
        }
}
END_TEST

START_TEST(test_loc_truncated) {
        read_mode = _i;
        for (int c = 0; c <= 2; c++) {
                fixture f;
                /* the table holds 40 entries: cut it to 5 */
                fixture_make(&f, (enum zr_codec)c);
                file_truncate(&f, "0.loc", 5 * 16);
                expect_open_error(&f, CODES(ZR_E_CORRUPT), "0.loc", "0.loc cut to 5 entries");
                fixture_done(&f);
        }
}
END_TEST

/* Store files that are not regular files: never followed, never read. */
START_TEST(test_not_regular_files) {
        read_mode = _i;
        fixture f;

        fixture_make(&f, ZR_CODEC_ZSTD);
        ck_assert_int_eq(unlinkat(f.dfd, "1.chunk", 0), 0);
        ck_assert_int_eq(mkdirat(f.dfd, "1.chunk", 0755), 0);
        expect_open_error(&f, CODES(ZR_E_CORRUPT, EISDIR), "1.chunk", "1.chunk is a directory");
        ck_assert_int_eq(unlinkat(f.dfd, "1.chunk", AT_REMOVEDIR), 0);
        fixture_done(&f);

        fixture_make(&f, ZR_CODEC_RAW);
        ck_assert_int_eq(unlinkat(f.dfd, "0.chunk", 0), 0);
        ck_assert_int_eq(symlinkat("1.chunk", f.dfd, "0.chunk"), 0);
        expect_open_error(&f, CODES(ELOOP), "0.chunk", "0.chunk is a symbolic link");
        fixture_done(&f);

        fixture_make(&f, ZR_CODEC_RAW);
        ck_assert_int_eq(renameat(f.dfd, "meta.zr", f.dfd, "meta.real"), 0);
        ck_assert_int_eq(symlinkat("meta.real", f.dfd, "meta.zr"), 0);
        expect_open_error(&f, CODES(ELOOP), "meta.zr", "meta.zr is a symbolic link");
        fixture_done(&f);

        fixture_make(&f, ZR_CODEC_ZSTD_DICT);
        ck_assert_int_eq(unlinkat(f.dfd, "dict.zr", 0), 0);
        ck_assert_int_eq(mkdirat(f.dfd, "dict.zr", 0755), 0);
        {
                zr_store *s = NULL;
                zr_error err = {0};
                int r = fixture_open(&f, 0, &s, &err);
                if (r == 0)
                        zr_store_close(s, NULL);
                ck_assert_msg(r < 0 && err.message[0] && strcasestr(err.message, "dict"),
                              "dict.zr is a directory: open returned %d \"%s\"", r, err.message);
        }
        ck_assert_int_eq(unlinkat(f.dfd, "dict.zr", AT_REMOVEDIR), 0);
        fixture_done(&f);
}
END_TEST

/* A well-formed delete.zr (its checksum holds) whose contents are impossible. */
START_TEST(test_journal_impossible) {
        read_mode = _i;
        fixture f;
        zr_store *s = NULL;
        zr_error err = {0};
        zr_journal_entry ent = { .index = 37, .loc = { 0, 100, 100, 0 } };
        zr_journal j = { .old_len = TEST_RECORDS, .new_len = TEST_RECORDS - 5, .n = 1,
                         .entries = &ent };

        /* an entry at or past the new length: refused, nothing applied */
        fixture_make(&f, ZR_CODEC_ZSTD);
        ck_assert_int_eq(zr_journal_write(f.dfd, &j, &err), 0);
        expect_open_error(&f, CODES(ZR_E_CORRUPT), "delete.zr", "journal entry past its new length");
        ck_assert_int_eq(faccessat(f.dfd, "delete.zr", F_OK, 0), 0); /* kept for a person */
        fixture_done(&f);

        /* a new length above the old one */
        fixture_make(&f, ZR_CODEC_RAW);
        ent.index = 3;
        j.new_len = TEST_RECORDS + 2;
        ck_assert_int_eq(zr_journal_write(f.dfd, &j, &err), 0);
        zr_error_clear(&err);
        int r = fixture_open(&f, 0, &s, &err);
        if (r == 0) {
                /* new_len matches no length: discarded as a finished batch */
                ck_assert_uint_eq(zr_store_length(s), TEST_RECORDS);
                zr_store_close(s, NULL);
        } else {
                expect_error("journal growing the store", r, &err, CODES(ZR_E_CORRUPT), "delete.zr");
        }
        fixture_done(&f);

        /* a pending journal and a read-only open: it says a writable open must redo it */
        fixture_make(&f, ZR_CODEC_RAW);
        ent.index = 3;
        ent.loc = (zr_loc){ 0, 0, 0, 0 };
        j.new_len = TEST_RECORDS - 1;
        ck_assert_int_eq(zr_journal_write(f.dfd, &j, &err), 0);
        zr_error_clear(&err);
        r = fixture_open(&f, 1, &s, &err);
        if (r == 0)
                zr_store_close(s, NULL);
        expect_error("pending journal, read-only open", r, &err, CODES(ZR_E_READONLY), "delete.zr");
        fixture_done(&f);
}
END_TEST

START_TEST(test_frame_flip) {
        read_mode = _i;
        for (int c = 1; c <= 2; c++) {
                fixture f;
                zr_store *s = NULL;
                zr_error err = {0};
                zr_loc loc;
                uint64_t bad = 9;
                char name[32];
                uint8_t b;

                fixture_make(&f, (enum zr_codec)c);
                ck_assert_int_eq(fixture_open(&f, 0, &s, &err), 0);
                ck_assert_int_eq(zr_store_locate(s, &bad, 1, &loc, &err), 0);
                ck_assert_int_eq(zr_store_close(s, NULL), 0);
                snprintf(name, sizeof(name), "%" PRIu32 ".chunk", loc.chunk_id);
                file_pread(&f, name, &b, 1, (off_t)loc.offset + loc.phys_length / 2);
                b ^= 0x5a;
                file_pwrite(&f, name, &b, 1, (off_t)loc.offset + loc.phys_length / 2);
                expect_damage(&f, bad, CODES(ZR_E_DECODE), NULL,
                              c == 1 ? "byte flipped in a zstd frame" : "byte flipped in a zstd_dict frame");
                fixture_done(&f);
        }
}
END_TEST

START_TEST(test_truncated_chunk) {
        read_mode = _i;
        for (int c = 0; c <= 2; c++) {
                fixture f;
                fixture_make(&f, (enum zr_codec)c);
                /* chunk 0 holds records from offset 0: cut it in the middle of its data */
                file_truncate(&f, "0.chunk", 2000);
                expect_damage(&f, 0, CODES(ZR_E_CORRUPT), "chunk", "0.chunk cut to 2000 bytes");
                fixture_done(&f);

                fixture_make(&f, (enum zr_codec)c);
                ck_assert_int_eq(unlinkat(f.dfd, "1.chunk", 0), 0);
                expect_open_error(&f, CODES(ZR_E_CORRUPT), "1.chunk", "1.chunk removed");
                fixture_done(&f);

                fixture_make(&f, (enum zr_codec)c);
                ck_assert_int_eq(unlinkat(f.dfd, "0.loc", 0), 0);
                expect_open_error(&f, CODES(ZR_E_CORRUPT), "0.loc", "0.loc removed");
                fixture_done(&f);
        }
}
END_TEST

START_TEST(test_dict_missing) {
        read_mode = _i;
        fixture f;
        fixture_make(&f, ZR_CODEC_ZSTD_DICT);
        ck_assert_int_eq(unlinkat(f.dfd, "dict.zr", 0), 0);
        expect_open_error(&f, CODES(ZR_E_NO_DICT), "dict", "dict.zr removed");
        fixture_done(&f);

        fixture_make(&f, ZR_CODEC_ZSTD_DICT);
        file_truncate(&f, "dict.zr", 0);
        expect_open_error(&f, CODES(ZR_E_NO_DICT, ZR_E_CORRUPT), "dict", "dict.zr emptied");
        fixture_done(&f);
}
END_TEST

/* A damaged dictionary: either open refuses it, or every record decodes with an
 * error or to exactly its bytes (a change the frames never reference is harmless). */
static void dict_damaged(const fixture *f, const char *what) {
        zr_store *s = NULL;
        zr_error err = {0};
        int r = fixture_open(f, 0, &s, &err);
        if (r < 0) {
                expect_error(what, r, &err, CODES(ZR_E_NO_DICT, ZR_E_CORRUPT), "dict");
                return;
        }
        size_t failed = 0;
        for (uint64_t i = 0; i < TEST_RECORDS; i++) {
                r = gather_one(s, i, &err);
                if (r < 0) {
                        expect_error(what, r, &err, CODES(ZR_E_DECODE, ZR_E_CORRUPT), NULL);
                        failed++;
                }
        }
        zr_verify_report rep = {0};
        zr_error_clear(&err);
        r = zr_store_verify(s, &rep, &err);
        if (failed) {
                expect_error(what, r, &err, CODES(ZR_E_DECODE, ZR_E_CORRUPT), NULL);
                ck_assert_uint_eq(rep.bad, failed);
        } else {
                ck_assert_int_eq(r, 0);
        }
        zr_store_close(s, NULL);
}

START_TEST(test_dict_corrupt) {
        read_mode = _i;
        fixture f;
        struct stat st;

        fixture_make(&f, ZR_CODEC_ZSTD_DICT);
        ck_assert_int_eq(fstatat(f.dfd, "dict.zr", &st, 0), 0);
        file_truncate(&f, "dict.zr", st.st_size / 2);
        dict_damaged(&f, "dict.zr cut in half");
        fixture_done(&f);

        fixture_make(&f, ZR_CODEC_ZSTD_DICT);
        ck_assert_int_eq(fstatat(f.dfd, "dict.zr", &st, 0), 0);
        uint8_t junk[64];
        uint64_t rng = 77;
        for (size_t i = 0; i < sizeof(junk); i++)
                junk[i] = (uint8_t)tl_rand(&rng);
        file_pwrite(&f, "dict.zr", junk, sizeof(junk), 0); /* over the header and tables */
        dict_damaged(&f, "dict.zr header overwritten");
        fixture_done(&f);

        fixture_make(&f, ZR_CODEC_ZSTD_DICT);
        ck_assert_int_eq(fstatat(f.dfd, "dict.zr", &st, 0), 0);
        file_pwrite(&f, "dict.zr", junk, sizeof(junk), st.st_size - 200); /* in the content */
        dict_damaged(&f, "dict.zr content overwritten");
        fixture_done(&f);
}
END_TEST

START_TEST(test_journal_garbage) {
        read_mode = _i;
        /* a delete.zr that is not a complete journal (a torn write, or junk) is
         * discarded on open: the table was not touched, every record stays */
        for (size_t len = 1; len <= 4096; len *= 8) {
                fixture f;
                zr_store *s = NULL;
                zr_error err = {0};
                uint8_t *junk = malloc(len);
                uint64_t rng = len;

                ck_assert_ptr_nonnull(junk);
                for (size_t i = 0; i < len; i++)
                        junk[i] = (uint8_t)tl_rand(&rng);
                fixture_make(&f, ZR_CODEC_ZSTD);
                int fd = openat(f.dfd, "delete.zr", O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
                ck_assert_int_ge(fd, 0);
                ck_assert_int_eq(write(fd, junk, len), (ssize_t)len);
                close(fd);
                int r = fixture_open(&f, 0, &s, &err);
                ck_assert_msg(r == 0, "%zu junk bytes in delete.zr: open: %s", len, err.message);
                ck_assert_uint_eq(zr_store_length(s), TEST_RECORDS);
                for (uint64_t i = 0; i < TEST_RECORDS; i++)
                        ck_assert_msg(gather_one(s, i, &err) == 0, "record %" PRIu64 ": %s", i, err.message);
                zr_verify_report rep = {0};
                zr_error_clear(&err);
                ck_assert_msg(zr_store_verify(s, &rep, &err) == 0, "verify: %s", err.message);
                ck_assert_int_eq(zr_store_close(s, NULL), 0);
                free(junk);
                fixture_done(&f);
        }
}
END_TEST

/* Opens read-only and exercises every read path; every failure must carry a
 * known code and a message. For a compressed store with an intact meta.zr a
 * successful gather must return the right bytes (gather_one checks). */
static void fuzz_probe(const fixture *f, size_t iter, const char *what, int check_bytes) {
        zr_store *s = NULL;
        zr_error err = {0};
        int r = fixture_open(f, 1, &s, &err);
        if (r < 0) {
                ck_assert_msg(zr_error_name(r) || r > -1000, "%s %zu: open returned %d", what, iter, r);
                ck_assert_msg(err.message[0], "%s %zu: open failed without a message", what, iter);
                return;
        }
        uint64_t n = zr_store_length(s);
        uint64_t want = n < TEST_RECORDS ? n : TEST_RECORDS;
        uint8_t *buf = malloc(RECORD_MAX);
        ck_assert_ptr_nonnull(buf);
        for (uint64_t i = 0; i < want + 1; i++) {
                uint64_t idx = i < want ? i : n - 1; /* and the last index it claims */
                if (n == 0)
                        break;
                if (check_bytes && idx < TEST_RECORDS) {
                        r = gather_one(s, idx, &err);
                } else {
                        uint64_t len;
                        zr_error_clear(&err);
                        r = zr_store_gather(s, &idx, 1, buf, RECORD_MAX, &len, &err);
                }
                if (r < 0)
                        ck_assert_msg(err.message[0] && err.code == -r,
                                      "%s %zu: gather %" PRIu64 " returned %d with message \"%s\"",
                                      what, iter, idx, r, err.message);
        }
        free(buf);
        zr_stats stats;
        zr_error_clear(&err);
        r = zr_store_stats(s, &stats, &err);
        ck_assert(r == 0 || (err.message[0] && err.code == -r));
        /* verify walks every entry the header claims: a fuzzed length of 10^8
         * records is a legitimately slow verify, not something to wait for here */
        if (n <= FUZZ_VERIFY_MAX) {
                zr_verify_report rep;
                zr_error_clear(&err);
                r = zr_store_verify(s, &rep, &err);
                ck_assert_msg(r == 0 || (err.message[0] && err.code == -r),
                              "%s %zu: verify returned %d with message \"%s\"", what, iter, r,
                              err.message);
        }
        zr_store_close(s, NULL);
}

START_TEST(test_fuzz_meta) {
        read_mode = _i;
        for (int c = 0; c <= 1; c++) {
                fixture f;
                uint8_t orig[32], m[32];
                uint64_t rng = FUZZ_SEED + (uint64_t)c;

                fixture_make(&f, (enum zr_codec)c);
                file_pread(&f, "meta.zr", orig, 32, 0);
                for (size_t it = 0; it < FUZZ_ITERATIONS / 2; it++) {
                        memcpy(m, orig, 32);
                        size_t k = 1 + tl_rand(&rng) % 4;
                        for (size_t j = 0; j < k; j++)
                                m[tl_rand(&rng) % 32] = (uint8_t)tl_rand(&rng);
                        file_pwrite(&f, "meta.zr", m, 32, 0);
                        fuzz_probe(&f, it, "meta.zr fuzz", 0);
                }
                file_pwrite(&f, "meta.zr", orig, 32, 0);
                fuzz_probe(&f, FUZZ_ITERATIONS, "meta.zr restored", 1);
                fixture_done(&f);
        }
}
END_TEST

START_TEST(test_fuzz_loc) {
        read_mode = _i;
        for (int c = 0; c <= 1; c++) {
                fixture f;
                uint8_t orig[16], e[16];
                uint64_t rng = FUZZ_SEED * 3 + (uint64_t)c;

                fixture_make(&f, (enum zr_codec)c);
                for (size_t it = 0; it < FUZZ_ITERATIONS / 2; it++) {
                        uint64_t rec = tl_rand(&rng) % TEST_RECORDS;
                        loc_read(&f, rec, orig);
                        memcpy(e, orig, 16);
                        size_t k = 1 + tl_rand(&rng) % 4;
                        for (size_t j = 0; j < k; j++)
                                e[tl_rand(&rng) % 16] = (uint8_t)tl_rand(&rng);
                        loc_write(&f, rec, e);
                        /* a zstd frame cannot be moved or resized and still decode to
                         * the right length with the right checksum: bytes are checked */
                        fuzz_probe(&f, it, ".loc fuzz", c == ZR_CODEC_ZSTD);
                        loc_write(&f, rec, orig);
                }
                fuzz_probe(&f, FUZZ_ITERATIONS, ".loc restored", 1);
                fixture_done(&f);
        }
}
END_TEST

int main(void) {
        for (int c = 0; c <= 2; c++)
                if (template_build((enum zr_codec)c, template_dir[c]) < 0)
                        return EXIT_FAILURE;
        Suite *s = suite_create("corrupt");
        TCase *tc = tcase_create("core");
        tcase_set_timeout(tc, 300);
        tcase_add_loop_test(tc, test_not_a_store, 0, 2);
        tcase_add_loop_test(tc, test_meta_truncated, 0, 2);
        tcase_add_loop_test(tc, test_meta_fields, 0, 2);
        tcase_add_loop_test(tc, test_length_beyond_table, 0, 2);
        tcase_add_loop_test(tc, test_loc_outside_chunk, 0, 2);
        tcase_add_loop_test(tc, test_loc_lengths, 0, 2);
        tcase_add_loop_test(tc, test_loc_misdirected, 0, 2);
        tcase_add_loop_test(tc, test_loc_truncated, 0, 2);
        tcase_add_loop_test(tc, test_not_regular_files, 0, 2);
        tcase_add_loop_test(tc, test_journal_impossible, 0, 2);
        tcase_add_loop_test(tc, test_frame_flip, 0, 2);
        tcase_add_loop_test(tc, test_truncated_chunk, 0, 2);
        tcase_add_loop_test(tc, test_dict_missing, 0, 2);
        tcase_add_loop_test(tc, test_dict_corrupt, 0, 2);
        tcase_add_loop_test(tc, test_journal_garbage, 0, 2);
        tcase_add_loop_test(tc, test_fuzz_meta, 0, 2);
        tcase_add_loop_test(tc, test_fuzz_loc, 0, 2);
        suite_add_tcase(s, tc);
        SRunner *sr = srunner_create(s);
        srunner_run_all(sr, CK_NORMAL);
        int failed = srunner_ntests_failed(sr);
        srunner_free(sr);
        for (int c = 0; c <= 2; c++)
                tl_rmtree(template_dir[c]);
        return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
