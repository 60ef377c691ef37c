/* corrupt.h: what the files of the corrupt suite share (test-corrupt.c: the
 * header and the table; corrupt-files.c: chunks, store files, journals and
 * dictionaries; corrupt-fuzz.c: random bytes over meta.zr and .loc entries).
 *
 * Every case damages a fresh copy of a small valid store (40 records of 0.5 to
 * 6 KiB in 64 KiB chunks, one pristine store per codec built once in main())
 * with plain file operations, and checks the code and message the store's
 * calls return. Every case runs twice (a loop test, _i): reading through the
 * store's mappings and with pread (no_mmap).
 */
#ifndef ZR_TESTS_STORE_CORRUPT_H
#define ZR_TESTS_STORE_CORRUPT_H

#include <check.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "store/store.h"

#define TEST_RECORDS 40
#define TEST_CHUNK_LOG2 16 /* 64 KiB chunks: the 40 records span several */
#define RECORD_MIN 512
#define RECORD_MAX 6144
#define DICT_CAPACITY 8192

/* The length of record id of the test stores. */
size_t record_len(uint64_t id);

typedef struct fixture {
        char dir[256];
        int dfd;
        enum zr_codec codec;
} fixture;

/* The pristine stores, one per codec (template_build() in main(), before any
 * case: each runs in a child of it). */
extern char template_dir[3][256];
int template_build(enum zr_codec codec, char dir[256]);

/* How the store under test reads: 0 through its mappings (the default), 1 with
 * pread (no_mmap). Every case sets it from its loop index. */
extern int read_mode;

/* A fresh copy of the pristine store of `codec`, for one case to damage; its
 * removal; opening it as read_mode says. */
void fixture_make(fixture *f, enum zr_codec codec);
void fixture_done(fixture *f);
int fixture_open(const fixture *f, int read_only, zr_store **ret, zr_error *err);

/* File surgery on a fixture's files (asserting each works). */
void file_pwrite(const fixture *f, const char *name, const void *buf, size_t len, off_t off);
void file_pread(const fixture *f, const char *name, void *buf, size_t len, off_t off);
void file_truncate(const fixture *f, const char *name, off_t len);
void put_le32(uint8_t *p, uint32_t v);
uint32_t get_le32(const uint8_t *p);
/* The .loc entry of record i (segment 0: 16 bytes at i * 16). */
void loc_read(const fixture *f, uint64_t i, uint8_t e[16]);
void loc_write(const fixture *f, uint64_t i, const uint8_t e[16]);

/* A list of error codes as the expectations take it: CODES(ZR_E_CORRUPT, EISDIR). */
#define CODES(...) ((const int[]){ __VA_ARGS__ }), (sizeof((const int[]){ __VA_ARGS__ }) / sizeof(int))
/* True if r is minus one of codes. */
int code_in(int r, const int *codes, size_t n);
/* r must be one of codes, err must carry it with a message (containing
 * `keyword`, case-insensitively, if keyword is not NULL). */
void expect_error(const char *what, int r, const zr_error *err, const int *codes, size_t n,
                  const char *keyword);
/* Gathers record i; returns the code and, on success, checks the bytes. */
int gather_one(zr_store *s, uint64_t i, zr_error *err);
/* Opening, or else verifying and gathering record `bad`, fails with one of
 * codes; every other record still reads right. */
void expect_damage(const fixture *f, uint64_t bad, const int *codes, size_t n,
                   const char *keyword, const char *what);
/* Opening fails with one of codes. */
void expect_open_error(const fixture *f, const int *codes, size_t n, const char *keyword,
                       const char *what);
/* A fresh copy of codec's store, damaged one way, must not open (one of codes,
 * keyword in the message): `name` cut to len bytes; len bytes of p written
 * over `name` at off; `name` removed. */
void expect_cut_refused(enum zr_codec codec, const char *name, off_t len, const int *codes,
                        size_t n, const char *keyword, const char *what);
void expect_patch_refused(enum zr_codec codec, const char *name, const void *p, size_t len,
                          off_t off, const int *codes, size_t n, const char *keyword,
                          const char *what);
void expect_removal_refused(enum zr_codec codec, const char *name, const int *codes, size_t n,
                            const char *keyword, const char *what);

/* The suite's cases, one function a file (loop tests over read_mode). */
void corrupt_add_file_cases(TCase *tc);
void corrupt_add_fuzz_cases(TCase *tc);

#endif
