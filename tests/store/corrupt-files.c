/* corrupt-files.c: the corrupt suite's cases of store files that are not
 * regular files, impossible and torn delete journals, damaged chunk frames,
 * cut or removed chunks and tables, and missing or damaged dictionaries
 * (corrupt.h). */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "corrupt.h"
#include "store/journal.h"
#include "util.h"

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
                /* chunk 0 holds records from offset 0: cut it in the middle of its
                 * data. A chunk before the tail may be shorter than its capacity
                 * (docs/FORMAT.md, "Apparent size"), so the store opens; every
                 * record past the cut fails to read, the others read */
                file_truncate(&f, "0.chunk", 2000);
                zr_store *s = NULL;
                zr_error err = {0};
                ck_assert_int_eq(fixture_open(&f, 0, &s, &err), 0);
                unsigned cut = 0;
                for (uint64_t i = 0; i < TEST_RECORDS; i++) {
                        zr_loc l;
                        ck_assert_int_eq(zr_store_locate(s, &i, 1, &l, NULL), 0);
                        int r = gather_one(s, i, &err);
                        if (l.chunk_id == 0 && l.offset + l.phys_length > 2000) {
                                expect_error("0.chunk cut to 2000 bytes: a record past the cut",
                                             r, &err, CODES(ZR_E_CORRUPT), "chunk");
                                cut++;
                        } else {
                                ck_assert_msg(r == 0, "record %" PRIu64 " is intact but does "
                                              "not read: %s", i, err.message);
                        }
                }
                ck_assert_uint_gt(cut, 0);
                zr_verify_report rep = {0};
                ck_assert_int_eq(zr_store_verify(s, &rep, NULL), -ZR_E_CORRUPT);
                ck_assert_uint_eq(rep.bad, cut);
                zr_store_close(s, NULL);
                fixture_done(&f);

                expect_removal_refused((enum zr_codec)c, "1.chunk", CODES(ZR_E_CORRUPT), "1.chunk",
                                       "1.chunk removed");
                expect_removal_refused((enum zr_codec)c, "0.loc", CODES(ZR_E_CORRUPT), "0.loc",
                                       "0.loc removed");
        }
}
END_TEST

START_TEST(test_dict_missing) {
        read_mode = _i;
        expect_removal_refused(ZR_CODEC_ZSTD_DICT, "dict.zr", CODES(ZR_E_NO_DICT), "dict",
                               "dict.zr removed");
        expect_cut_refused(ZR_CODEC_ZSTD_DICT, "dict.zr", 0, CODES(ZR_E_NO_DICT, ZR_E_CORRUPT),
                           "dict", "dict.zr emptied");
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

void corrupt_add_file_cases(TCase *tc) {
        tcase_add_loop_test(tc, test_not_regular_files, 0, 2);
        tcase_add_loop_test(tc, test_journal_impossible, 0, 2);
        tcase_add_loop_test(tc, test_frame_flip, 0, 2);
        tcase_add_loop_test(tc, test_truncated_chunk, 0, 2);
        tcase_add_loop_test(tc, test_dict_missing, 0, 2);
        tcase_add_loop_test(tc, test_dict_corrupt, 0, 2);
        tcase_add_loop_test(tc, test_journal_garbage, 0, 2);
}
