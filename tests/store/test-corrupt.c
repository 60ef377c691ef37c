/* test-corrupt.c: a damaged store gets a clear error, never a crash. This
 * file holds the cases of meta.zr and the table, and main(); corrupt.h says
 * where the others are.
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
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check-run.h"
#include "corrupt.h"
#include "store/format.h"
#include "util.h"

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
        /* an empty meta.zr has not even a magic number: either code says so */
        expect_cut_refused(ZR_CODEC_RAW, "meta.zr", 0, CODES(ZR_E_CORRUPT, ZR_E_BAD_MAGIC),
                           "meta.zr", "empty meta.zr");
        expect_cut_refused(ZR_CODEC_RAW, "meta.zr", 16, CODES(ZR_E_CORRUPT), "meta.zr",
                           "meta.zr cut to 16 bytes");
        expect_cut_refused(ZR_CODEC_ZSTD, "meta.zr", 31, CODES(ZR_E_CORRUPT), "meta.zr",
                           "meta.zr cut to 31 bytes");
        expect_cut_refused(ZR_CODEC_ZSTD, "meta.zr", 48, CODES(ZR_E_CORRUPT), "meta.zr",
                           "meta.zr grown to 48 bytes");
}
END_TEST

START_TEST(test_meta_fields) {
        read_mode = _i;
        uint8_t t[4];

        expect_patch_refused(ZR_CODEC_RAW, "meta.zr", "ZREX", 4, 0, CODES(ZR_E_BAD_MAGIC),
                             "meta.zr", "wrong magic");
        expect_patch_refused(ZR_CODEC_ZSTD, "meta.zr", (uint8_t[]){ 99 }, 1, 4,
                             CODES(ZR_E_BAD_VERSION), "meta.zr", "version 99");
        expect_patch_refused(ZR_CODEC_ZSTD, "meta.zr", (uint8_t[]){ 0 }, 1, 4,
                             CODES(ZR_E_BAD_VERSION), "meta.zr", "version 0");
        expect_patch_refused(ZR_CODEC_RAW, "meta.zr", (uint8_t[]){ 7 }, 1, 5,
                             CODES(ZR_E_BAD_CODEC), "codec", "codec 7");
        /* chunk_log2 (byte 22) out of range: a shift by it would be undefined */
        expect_patch_refused(ZR_CODEC_RAW, "meta.zr", (uint8_t[]){ 200 }, 1, 22,
                             CODES(ZR_E_CORRUPT), "meta.zr", "chunk_log2 200");
        /* the tail past the last chunk file */
        put_le32(t, 5000);
        expect_patch_refused(ZR_CODEC_RAW, "meta.zr", t, 4, 6, CODES(ZR_E_CORRUPT), NULL,
                             "tail_chunk 5000");
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

        /* a length two past the table's last entry: a closed store's segment
         * ends at its length (docs/FORMAT.md, "Apparent size"), so open
         * refuses it as too short */
        for (int c = 0; c <= 2; c++) {
                len = TEST_RECORDS + 2;
                fixture_make(&f, (enum zr_codec)c);
                for (int i = 0; i < 8; i++)
                        len8[i] = (uint8_t)(len >> (8 * i));
                file_pwrite(&f, "meta.zr", len8, 8, 14);
                expect_open_error(&f, CODES(ZR_E_CORRUPT), "0.loc", "length 2 past a cut table");
                fixture_done(&f);
        }

        /* ... and inside a segment at its full size (a store of a writer that
         * was killed, or of an older build): the entries read as zeros. A
         * compressed store has no empty frames (a zstd frame is at least 9
         * bytes), so a zero entry is damage; a raw store cannot tell it from an
         * empty record at offset 0, and must only not crash (it reads two empty
         * records) */
        for (int c = 0; c <= 2; c++) {
                len = TEST_RECORDS + 2;
                fixture_make(&f, (enum zr_codec)c);
                for (int i = 0; i < 8; i++)
                        len8[i] = (uint8_t)(len >> (8 * i));
                file_pwrite(&f, "meta.zr", len8, 8, 14);
                file_truncate(&f, "0.loc", (off_t)ZR_LOC_SEGMENT_ENTRIES * ZR_LOC_SIZE);
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
        /* the table holds 40 entries: cut it to 5 */
        for (int c = 0; c <= 2; c++)
                expect_cut_refused((enum zr_codec)c, "0.loc", 5 * 16, CODES(ZR_E_CORRUPT), "0.loc",
                                   "0.loc cut to 5 entries");
}
END_TEST

int main(void) {
        for (int c = 0; c <= 2; c++)
                if (template_build((enum zr_codec)c, template_dir[c]) < 0)
                        return EXIT_FAILURE;
        Suite *s = suite_create("corrupt");
        TCase *tc = tl_tcase_add(s, "core", 300, (const TTest *)NULL);
        TL_LOOP_TESTS(tc, 0, 2, test_not_a_store, test_meta_truncated, test_meta_fields,
                      test_length_beyond_table, test_loc_outside_chunk, test_loc_lengths,
                      test_loc_misdirected, test_loc_truncated);
        corrupt_add_file_cases(tc);
        corrupt_add_fuzz_cases(tc);
        int failed = tl_run_suite(s);
        for (int c = 0; c <= 2; c++)
                tl_rmtree(template_dir[c]);
        return failed;
}
