/* lxragged.h: a ragged dataset in loaderx 1.5.7's layout, served in place.
 *
 * loaderx 1.5.7 stores a ragged record as its bare payload and keeps every
 * record's shape in schema.msgpack (lxschema.h); records of one store may differ
 * in their number of dimensions. This opens such a store and reads, appends to,
 * deletes from and compacts it the way loaderx 1.5.7 does, so that it stays a
 * loaderx 1.5.7 store: an append or a delete rewrites schema.msgpack with the new
 * shapes (O(records), the price of the layout: zrecord's own ragged datasets keep
 * the shape in the record, dataset.h, and convert.h moves a store between the
 * two).
 *
 * Two files change per append or delete, so the order is chosen for recovery:
 * - append: the records first (synced), then the schema. Killed between the two,
 *   the store holds records with no shapes; open (writable) deletes them again, as
 *   if the append had never been made. The sync keeps that order through a power
 *   loss too: the schema is never durable before the records it names.
 * - delete: the schema first, with the shapes after the delete and a note of the
 *   delete ("zrecord.pending_delete": the length before, the indices), then the
 *   store's delete (itself all-or-nothing), then the schema without the note.
 *   Killed anywhere, open (writable) finishes the delete from the note.
 * A read-only open of a store left that way is ZR_E_READONLY, saying that a
 * writer must finish it (the daemon's registry then opens it writable once:
 * server/registry.h). loaderx 1.5.7 does neither (it writes the store, then the
 * schema in place); a store it left with more shapes than records is
 * ZR_E_CORRUPT, never misread.
 *
 * Concurrency is the store's (store.h): gathers may run beside each other; append,
 * delete, compact and close need exclusive access here, since the shape table
 * changes with them.
 *
 * Errors: negative codes (-errno or -ZR_E_*) with *err filled (err may be NULL).
 */
#ifndef ZR_DATASET_LXRAGGED_H
#define ZR_DATASET_LXRAGGED_H

#include <stddef.h>
#include <stdint.h>

#include "dataset/lxschema.h"
#include "store/store.h"
#include "util/error.h"

typedef struct zr_lxragged zr_lxragged;

/* Creates an empty loaderx 1.5.7 ragged store in dirfd: schema.msgpack (dtype,
 * codec, no shapes), then the store (with the dictionary if given, zstd_dict).
 * ZR_E_EXISTS if a store is there; errors of zr_lxschema_init(), zr_store_create(). */
int zr_lxragged_create(int dirfd, const char *dtype, enum zr_codec codec, const void *dict,
                       size_t dict_len, const zr_store_options *opts, zr_lxragged **ret,
                       zr_error *err);

/* Opens the store in dirfd and its schema, recovering an interrupted append or
 * delete (above). ZR_E_SCHEMA if schema.msgpack is not a loaderx 1.5.7 ragged
 * schema or names another codec than the store's; ZR_E_CORRUPT if the shapes do
 * not match the store and cannot be recovered; ZR_E_READONLY for a read-only
 * open of a store a writer must recover; the errors of zr_store_open() and
 * zr_lxfile_read(). */
int zr_lxragged_open(int dirfd, const zr_store_options *opts, zr_lxragged **ret, zr_error *err);

/* Closes the store (syncing it) and frees everything. NULL allowed. */
int zr_lxragged_close(zr_lxragged *d, zr_error *err);

/* zr_store_make_writable() of the store through dirfd, which then also becomes
 * the directory schema.msgpack is written through. Exclusive. */
int zr_lxragged_make_writable(zr_lxragged *d, int dirfd, zr_error *err);

zr_store *zr_lxragged_store(zr_lxragged *d);
const zr_lxschema *zr_lxragged_schema(const zr_lxragged *d);
uint64_t zr_lxragged_length(const zr_lxragged *d);

/* Record i's shape (zr_shapes_get()). */
int zr_lxragged_shape(const zr_lxragged *d, uint64_t i, uint32_t *ret_ndim,
                      const uint64_t **ret_dims, zr_error *err);

/* The bytes a gather of idx[0..n) writes (the sum of their payloads). ZR_E_RANGE
 * for an index >= length. */
int zr_lxragged_bytes(zr_lxragged *d, const uint64_t *idx, size_t n, uint64_t *ret,
                      zr_error *err);

/* Gathers the payloads of idx[0..n) back to back into dst (record i at
 * ret_offsets[i], may be NULL); dst_size must hold zr_lxragged_bytes() (else
 * ZR_E_BUFFER). ZR_E_CORRUPT for a record whose size is not its shape's. */
int zr_lxragged_gather(zr_lxragged *d, const uint64_t *idx, size_t n, void *dst,
                       uint64_t dst_size, uint64_t *ret_offsets, zr_error *err);

/* Appends n records: record i is lens[i] bytes of data (back to back), of shape
 * ndims[i] dims, taken in order from dims (record 0's first). Every record must be
 * non-empty (loaderx 1.5.7 stores none empty) and exactly prod(shape) × itemsize
 * bytes: ZR_E_SCHEMA otherwise, nothing written. Compresses at `level`
 * (zr_store_append_level()). Sets *ret_first (may be NULL). */
int zr_lxragged_append(zr_lxragged *d, const void *data, const uint64_t *lens,
                       const uint32_t *ndims, const uint64_t *dims, uint64_t n, int level,
                       uint64_t *ret_first, zr_error *err);

/* Deletes idx[0..n) (any order, repeats allowed, as loaderx 1.5.7) by swap-last,
 * from the store and the shapes alike. ZR_E_RANGE for an index >= length (nothing
 * changes). */
int zr_lxragged_delete(zr_lxragged *d, const uint64_t *idx, size_t n, zr_error *err);

/* The store's compaction (shapes do not move). */
int zr_lxragged_compact(zr_lxragged *d, zr_compact_result *ret, zr_error *err);

#endif
