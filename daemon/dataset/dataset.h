/* dataset.h: a typed dataset, a store plus its schema, in one directory.
 *
 * The directory holds the store's files (meta.zr, *.loc, *.chunk, dict.zr) and
 * schema.msgpack beside them (schema.h). The dataset turns byte records into
 * typed ones: a dense dataset's records are items of one dtype and item shape,
 * so a batch of B records is one contiguous (B, *item_shape) block; a ragged
 * dataset's records each begin with their own shape header (ragged.h).
 *
 * It also serves the two layouts of loaderx 1.5.7's stores in place, as ragged
 * datasets (schema.h, enum zr_layout; docs/FORMAT.md): its ragged stores, whose
 * records are bare payloads with every shape in schema.msgpack (lxragged.h;
 * served with ndim ZR_SCHEMA_NDIM_ANY), and its stores without schema.msgpack
 * (byte records; served as "|u1" of ndim 1, each of shape (its length,)). Their
 * users see what a ragged dataset of zrecord's layout gives: a gather returns
 * each record's shape beside its payload (batch.h) and an append takes records
 * with their shape headers, which are stripped (and the shapes written to
 * schema.msgpack) on the way in. Neither holds an empty record.
 *
 * The dataset is the authority on its schema: every append is validated before a
 * byte is written, and a batch that does not match (dtype, item shape, ndim,
 * byte count, a ragged header) is refused with ZR_E_SCHEMA and a message that
 * names what was expected and what came. A zstd_dict dataset refuses appends with
 * ZR_E_NO_DICT until a dictionary is installed.
 *
 * Every function works on a directory descriptor, never a path: the daemon acts
 * on descriptors its clients pass. Concurrency is the store's (store.h): gathers
 * may run beside one append; delete, compact, install_dict and close need
 * exclusive access.
 *
 * Sharing (every user of a dataset in one process goes through these):
 *   - an id, 1, 2, ... in the order datasets are opened or created in this
 *     process and never reused: the key of its decoded records (cache.h) and
 *     of loader groups;
 *   - a lock, taken shared around reads (gathers, stats, sync, verify,
 *     dictionary training) and around an append to this dataset alone (the
 *     store orders appends itself), exclusive around every other mutation
 *     (delete, compact, install_dict, appends to several datasets that commit
 *     as one). It prefers writers, so that a steady stream of gathers cannot
 *     starve a compaction: one thread must never take it shared twice (a
 *     waiting writer would deadlock it);
 *   - a generation, bumped by zr_dataset_mutated() after each mutation has
 *     committed, before the lock is released: a reader that loads it before
 *     and after a gather knows whether the gather straddled a change.
 * The functions of this header take none of these themselves: their callers
 * (the daemon's requests, the loaders) do.
 *
 * Errors: negative codes (-errno or -ZR_E_*) with *err filled (err may be NULL).
 */
#ifndef ZR_DATASET_DATASET_H
#define ZR_DATASET_DATASET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dataset/schema.h"
#include "store/store.h"
#include "util/error.h"

typedef struct zr_dataset zr_dataset;

/* A batch to append, as a client describes it.
 *
 * dense: `shape` is the batch's whole shape (B, *item_shape), `ndim` >= 1 its
 * length, and data holds B items, C order: data_len must be B × item bytes.
 * ragged: `nrecords` records packed back to back in data, record i `lens[i]`
 * bytes, each beginning with its shape header; data_len must be sum(lens).
 * Fields of the other kind are ignored. `dtype` is the numpy dtype string of the
 * data (its byte order included: the dataset never byte-swaps). `level` is the
 * compression level of zr_store_append_level() (0: the codec's default). */
typedef struct zr_batch {
        const char *dtype;
        const void *data;
        uint64_t data_len;
        const uint64_t *shape; /* dense */
        uint32_t ndim;         /* dense */
        const uint64_t *lens;  /* ragged */
        uint64_t nrecords;     /* ragged */
        int level;
} zr_batch;

/* Creates a dataset in `dirfd`: writes schema.msgpack atomically (temp file, fsync,
 * rename, directory fsync), then creates the store with the schema's codec. A
 * schema of ZR_LAYOUT_BYTES (ragged "|u1", ndim 1) creates the store alone, as
 * loaderx 1.5.7's Zrecord does; ZR_LAYOUT_LX157 is refused (ZR_E_SCHEMA: convert.h
 * makes such stores).
 * `dict`/`dict_len` give a zstd_dict dataset its dictionary now (NULL/0: install
 * one later); other codecs ignore them. `opts` may be NULL. dirfd is not taken.
 * Returns 0 and sets *ret (owned by the caller, release with zr_dataset_close()),
 * or ZR_E_EXISTS if a store is already there (nothing is touched), or an error of
 * zr_store_create() (schema.msgpack is removed again). */
int zr_dataset_create(int dirfd, const zr_schema *schema, const void *dict, size_t dict_len,
                      const zr_store_options *opts, zr_dataset **ret, zr_error *err);

/* Opens the dataset in `dirfd`: of zrecord's layout, or of loaderx 1.5.7's (its
 * ragged schema; no schema.msgpack at all: byte records). Errors of
 * zr_store_open() (ZR_E_NOT_STORE, ...) and zr_lxragged_open() (a ragged store
 * whose shapes do not match its records, ZR_E_CORRUPT); ZR_E_SCHEMA if
 * schema.msgpack is malformed or names another codec than the store's. `opts`
 * may be NULL. */
int zr_dataset_open(int dirfd, const zr_store_options *opts, zr_dataset **ret,
                    zr_error *err);

/* Closes the store (syncing it) and frees the dataset. NULL allowed. Returns 0 or
 * the sync's error; the dataset is freed either way. */
int zr_dataset_close(zr_dataset *ds, zr_error *err);

/* Makes a dataset opened read-only writable through dirfd, another descriptor
 * of its directory (zr_store_make_writable(); a loaderx 1.5.7 ragged store's
 * schema.msgpack is then written through dirfd too). Exclusive. */
int zr_dataset_make_writable(zr_dataset *ds, int dirfd, zr_error *err);

/* The schema; valid while the dataset is open. */
/* A dataset opened from object storage carries its remote state
 * (rdataset.h: zr_dataset_remote()); the dataset takes it and closes it after
 * its store. */
struct zr_rdataset;
void zr_dataset_set_remote(zr_dataset *ds, struct zr_rdataset *rd);

const zr_schema *zr_dataset_schema(const zr_dataset *ds);

/* The underlying store, borrowed (for raw byte access and stats). */
zr_store *zr_dataset_store(zr_dataset *ds);

/* Number of records. */
uint64_t zr_dataset_length(const zr_dataset *ds);

/* The dataset's id in this process (see the top; never 0). */
uint64_t zr_dataset_id(const zr_dataset *ds);

/* Takes the lock, shared or exclusive, blocking. */
void zr_dataset_lock(zr_dataset *ds, bool exclusive);

/* Takes the lock shared if that is possible at once: returns 0, or -EBUSY
 * (a mutation holds it or waits for it). */
int zr_dataset_trylock_shared(zr_dataset *ds);

void zr_dataset_unlock(zr_dataset *ds);

/* The generation (acquire order): 0 at open, then one more per mutation. */
uint64_t zr_dataset_generation(const zr_dataset *ds);

/* Bumps the generation (release order). Call it with the lock held, after a
 * mutation committed (or failed in a way that may have changed records). */
void zr_dataset_mutated(zr_dataset *ds);

/* Validates *b against the schema without writing anything, and sets *ret_n (may
 * be NULL) to its record count. Returns 0, -ZR_E_SCHEMA (with expected and got in
 * the message), -ZR_E_NO_DICT (zstd_dict without a dictionary) or -ENOMEM. */
int zr_dataset_check(const zr_dataset *ds, const zr_batch *b, uint64_t *ret_n,
                     zr_error *err);

/* Validates *b (as zr_dataset_check()) and appends its records. On success sets
 * *ret_first (may be NULL) to the index of the first new record. On any failure
 * nothing is written. A batch of 0 records succeeds and changes nothing. */
int zr_dataset_append(zr_dataset *ds, const zr_batch *b, uint64_t *ret_first,
                      zr_error *err);

/* Appends n one-dimensional records given as their values, back to back at
 * `values`, and their items (`items`), each record i being sizes[i] bytes
 * with its 16-byte shape header (the caller's sum, checked here): the
 * headers are written beside the values (zr_store_append_split()), with no
 * copy that weaves them. Only where zr_dataset_takes_values(): a raw store of
 * the zrecord layout whose records may be of one dimension (elsewhere the
 * caller weaves the records and calls zr_dataset_append()). Errors as
 * zr_dataset_append(). */
bool zr_dataset_takes_values(const zr_dataset *ds);

int zr_dataset_append_values(zr_dataset *ds, const char *dtype, const void *values,
                             const uint64_t *items, const uint64_t *sizes, uint64_t n,
                             uint64_t *ret_first, zr_error *err);

/* Dense: gathers records idx[0..n) into dst as one contiguous (n, *item_shape)
 * block of n × item bytes (dst_size must hold them: ZR_E_BUFFER otherwise),
 * with the batch gather of batch.h, which also gathers ragged records.
 * ZR_E_SCHEMA on a ragged dataset, ZR_E_RANGE for an index >= length,
 * ZR_E_CORRUPT for a stored record whose size is not one item. */
int zr_dataset_gather_dense(zr_dataset *ds, const uint64_t *idx, size_t n, void *dst,
                            uint64_t dst_size, zr_error *err);

/* Pass-throughs to the store (store.h): swap-last delete, compaction, stats,
 * sync. Exclusive where the store's are. In loaderx 1.5.7's ragged layout a delete
 * also moves the shapes (and rewrites schema.msgpack, lxragged.h); it refuses
 * repeated indices with EINVAL, as the store does. */
int zr_dataset_delete(zr_dataset *ds, const uint64_t *idx, size_t n, zr_error *err);
int zr_dataset_compact(zr_dataset *ds, zr_compact_result *ret, zr_error *err);
int zr_dataset_stats(zr_dataset *ds, zr_stats *ret, zr_error *err);
int zr_dataset_sync(zr_dataset *ds, zr_error *err);

/* Reads and checks every record (zr_store_verify()) and, when some are bad,
 * lists up to bad_max of their indices in bad[0..*ret_nbad) by reading every
 * record from the first bad one on (a store whose only fault is two records
 * sharing bytes lists the first of them). In loaderx 1.5.7's ragged layout a
 * record whose size is not its shape's in schema.msgpack is bad too (ZR_E_CORRUPT).
 * Returns as zr_store_verify(): 0 if
 * sound, -ZR_E_CORRUPT or -ZR_E_DECODE when records are bad (*err names the
 * first), another code when the pass could not run. */
int zr_dataset_verify(zr_dataset *ds, zr_verify_report *ret, uint64_t *bad, size_t bad_max,
                      size_t *ret_nbad, zr_error *err);

/* Whether an append must hold the lock exclusive: true in loaderx 1.5.7's ragged
 * layout, whose append changes the shape table gathers read; false elsewhere (the
 * store orders appends beside gathers itself). */
bool zr_dataset_append_exclusive(const zr_dataset *ds);

/* The shape of record i of a ragged dataset of loaderx 1.5.7's layouts, whose
 * stored (decoded) size is `stored` bytes: ZR_LAYOUT_LX157, its entry in
 * schema.msgpack, ZR_E_CORRUPT when that shape does not make `stored` bytes (a
 * lying schema); ZR_LAYOUT_BYTES, (stored,). ret_dims has room for
 * ZR_SCHEMA_NDIM_MAX. Under the lock, shared at least. */
int zr_dataset_record_shape(const zr_dataset *ds, uint64_t i, uint64_t stored,
                            uint32_t *ret_ndim, uint64_t *ret_dims, zr_error *err);

/* 1 if a dictionary is installed, else 0. */
int zr_dataset_has_dict(const zr_dataset *ds);

/* Installs the dictionary of an empty zstd_dict dataset (see
 * zr_store_install_dict()). Exclusive. */
int zr_dataset_install_dict(zr_dataset *ds, const void *dict, size_t dict_len,
                            zr_error *err);

#endif
