/* recovery.h: what the store's recovery tests share (test-killpoints.c: a kill
 * at every numbered point; test-iofault.c: a failing write, fsync or
 * allocation at every call). Both start an operation from a prepared store,
 * interrupt it, reopen the store and hold it to the state before the
 * operation or after it, never anything between.
 *
 * The prepared store: records of ids 1..RC_PRE_RECORDS (tests/lib's records,
 * of rc_record_len(id) bytes) in 4 KiB chunks, appended in three batches so
 * they lie in several chunks. The model of a table is its index -> id list
 * (rc_ids); a record read back names its id, and is checked bit for bit.
 * Failures are counted with tl_fail() (tests/lib/util.h).
 */
#ifndef ZR_TESTS_STORE_RECOVERY_H
#define ZR_TESTS_STORE_RECOVERY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "store/store.h"
#include "util/pool.h"

#define RC_CHUNK_LOG2 12 /* 4 KiB chunks: batches roll over, compaction frees files */
#define RC_PRE_RECORDS 30
#define RC_APPEND_N 8    /* records one append of an operation adds (ids 1000..) */
#define RC_DICT_CAPACITY 8192

/* The delete batch of an operation: holes below the new length and in the
 * tail; and the deletes that leave holes before a compaction (id 1, the tiny
 * record at index 0, first). */
#define RC_DELETE_N 5
#define RC_HOLES_N 6
extern const uint64_t rc_delete_idx[RC_DELETE_N];
extern const uint64_t rc_holes_idx[RC_HOLES_N];

/* The length of record id. Id 1 is tiny: deleting it leaves a hole smaller
 * than the record after it, whose move then overlaps its own bytes and goes
 * through scratch space. */
size_t rc_record_len(uint64_t id);

/* A table: index -> id. */
typedef struct rc_ids {
        uint64_t v[RC_PRE_RECORDS + RC_APPEND_N + 4];
        size_t n;
} rc_ids;

void rc_ids_append(rc_ids *m, uint64_t first, size_t n);
/* qsort()'s comparison of uint64_t in descending order. */
int rc_cmp_desc(const void *a, const void *b);
/* Swap-last, holes in descending order, as store.h specifies. */
void rc_ids_delete(rc_ids *m, const uint64_t *idx, size_t n);
bool rc_ids_eq(const rc_ids *a, const rc_ids *b);

/* What an operation does to a table: appends records 1000.. (RC_APPEND_N of
 * them), deletes rc_delete_idx, or changes nothing (compaction, a sync, a
 * dictionary). */
enum rc_change { RC_UNCHANGED, RC_APPENDS, RC_DELETES };
/* *ret: the table `before` after the change. */
void rc_ids_after(const rc_ids *before, enum rc_change change, rc_ids *ret);

/* Appends records first..first+n-1 (n <= 64). */
int rc_append(zr_store *s, uint64_t first, size_t n, zr_error *err);
/* Reads every record, checks each is bit-exact for its id and fills *ret;
 * 0, or -1 after tl_fail() naming `when`. */
int rc_read_ids(zr_store *s, rc_ids *ret, const char *when);

/* The dictionary of the zstd_dict stores (rc_make_dict() trains it; exits 2
 * if it cannot). */
extern void *rc_dict;
extern size_t rc_dict_len;
void rc_make_dict(void);

/* Creates in dfd the store a scenario starts from: codec c, with rc_dict if
 * with_dict; records 1..RC_PRE_RECORDS if `records`, then rc_holes_idx
 * deleted if `holes`. Leaves it open in *ret (NULL on failure) and its table
 * in *ret_ids. 0 or a negative code with err set. */
int rc_prepare(int dfd, enum zr_codec c, zr_pool *pool, bool with_dict, bool records, bool holes,
               zr_store **ret, rc_ids *ret_ids, zr_error *err);

/* The checks every reopened store must pass, given the table `got` it reads
 * as: verify finds nothing bad; a zstd_dict store left without its
 * dictionary takes it; a compaction re-run finishes without changing the
 * table and a second one moves nothing; a new append reads back. 0, or -1
 * after tl_fail() naming `when`. */
int rc_check_sound(zr_store *s, const rc_ids *got, const char *when);

/* Which table a reopened store may hold: the one before the interrupted
 * operation, the one after it, or either. */
enum rc_expect { RC_BEFORE, RC_AFTER, RC_EITHER };

/* The checks of a reopened store s: its records read bit-exact as the table
 * `before` or `after` (as ex allows; never another), then rc_check_sound().
 * Closes s. 0, or -1 after tl_fail() naming `when`. */
int rc_check_recovered(zr_store *s, const rc_ids *before, const rc_ids *after,
                       enum rc_expect ex, const char *when);

/* A new directory named prefix-XXXXXX under tl_tmpdir(true) (malloc()ed), the
 * directory descriptor of a path, a copy of a store's files: each exits 2
 * (tl_die) when it cannot. */
char *rc_new_dir(const char *prefix);
int rc_open_dir(const char *dir);
void rc_copy_store(const char *from, const char *to);

#endif
