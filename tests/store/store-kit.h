/* store-kit.h: what the files of the store suite share (test-store.c: round
 * trips; store-mutation.c: delete, journals, compaction, concurrent gathers;
 * store-refusals.c: bad input from the API side; store-size.c: a closed
 * store's files cut to its data). Stores live in temporary
 * directories; record `id` of any length is tests/lib's record (records.h);
 * every check is a libcheck assertion.
 */
#ifndef ZR_TESTS_STORE_KIT_H
#define ZR_TESTS_STORE_KIT_H

#include <check.h>
#include <stddef.h>
#include <stdint.h>

#include "store/store.h"
#include "util/pool.h"

typedef struct tdir {
        char path[256];
        int fd;
} tdir;

/* A new temporary directory, and its removal with everything in it. */
void tdir_make(tdir *d);
void tdir_remove(tdir *d);
/* The end of a test's store: s closed (asserting it closes cleanly), d's
 * directory removed, pool freed (may be NULL). */
void store_done(tdir *d, zr_store *s, zr_pool *pool);
/* True if d holds `name` (not following a link). */
int tdir_has(const tdir *d, const char *name);

/* Records first_id.. of the given lengths, packed (malloc()ed). */
uint8_t *make_batch(const uint64_t *lens, size_t n, uint64_t first_id);
/* A raw-content dictionary (zstd accepts any bytes as one), malloc()ed. */
uint8_t *make_dict(size_t *len);

/* A store in d (chunk_log2 0: the default; zstd_dict: with make_dict()'s
 * dictionary); reopened after a clean close. */
zr_store *create_store(tdir *d, enum zr_codec codec, unsigned chunk_log2, zr_pool *pool);
zr_store *reopen(tdir *d, zr_store *s, zr_pool *pool);
/* A store in a new directory d holding records 0..n-1 of lengths lens (one
 * append); ids (may be NULL) becomes its table, 0..n-1. */
zr_store *store_filled(tdir *d, enum zr_codec codec, unsigned chunk_log2, zr_pool *pool,
                       const uint64_t *lens, size_t n, uint64_t *ids);

/* Appends records first_id.. of the given lengths, checking the new length. */
void append_ok(zr_store *s, const uint64_t *lens, size_t n, uint64_t first_id);
/* As append_ok(), keeping the model: len_of[id] and the table ids[0..*n). */
void append_more(zr_store *s, const uint64_t *lens, size_t k, uint64_t first_id,
                 uint64_t *len_of, uint64_t *ids, size_t *n);
/* The model of a delete: swap-last in descending order. */
void model_delete(uint64_t *ids, size_t *n, const uint64_t *del, size_t ndel);

/* Store record idx holds record id of length len. */
void check_record(zr_store *s, uint64_t idx, uint64_t id, uint64_t len);
/* Gathers every record in one packed batch and compares with the model
 * (ids[i], len_of[ids[i]]). */
void check_all(zr_store *s, const uint64_t *ids, const uint64_t *len_of, size_t n);
/* verify passes over n records. */
void check_verify(zr_store *s, uint64_t n);
/* reopen(), then check_all() and check_verify() of the model; returns the
 * store reopened. */
zr_store *reopen_checked(tdir *d, zr_store *s, zr_pool *pool, const uint64_t *ids,
                         const uint64_t *len_of, size_t n);

/* The suite's cases, one function a file. */
void store_add_mutation(Suite *s);
void store_add_refusals(Suite *s);
void store_add_size(Suite *s);

#endif
