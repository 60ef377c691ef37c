/* shapes.h: a table of per-record shapes, one per record of a store.
 *
 * loaderx 1.5.7 keeps a ragged store's shapes outside its records, one list per
 * record in schema.msgpack ("shapes"), each with its own number of dimensions
 * (1..ZR_SCHEMA_NDIM_MAX). This is that table in memory, compact: one array of
 * dims and, per record, where its dims start and how many there are (8 + 1 bytes
 * and 8 per dimension). It mirrors the store's own changes, so that shape i stays
 * the shape of record i: append adds at the end, delete is the store's swap-last
 * (zr_store_delete(): distinct indices in descending order, each hole taking the
 * last record), truncate drops a tail. It knows nothing of files or msgpack
 * (lxschema.h encodes it).
 *
 * Errors: negative codes (-errno or -ZR_E_*) with *err filled (err may be NULL).
 */
#ifndef ZR_DATASET_SHAPES_H
#define ZR_DATASET_SHAPES_H

#include <stddef.h>
#include <stdint.h>

#include "util/error.h"

typedef struct zr_shapes zr_shapes;

/* An empty table into *ret, or -ENOMEM. */
int zr_shapes_new(zr_shapes **ret, zr_error *err);

/* NULL allowed. */
void zr_shapes_free(zr_shapes *t);

/* Number of records. */
uint64_t zr_shapes_count(const zr_shapes *t);

/* Record i's shape: *ret_ndim dims at *ret_dims, valid until the table next
 * changes. Returns 0, or -ZR_E_RANGE for i >= count. */
int zr_shapes_get(const zr_shapes *t, uint64_t i, uint32_t *ret_ndim, const uint64_t **ret_dims,
                  zr_error *err);

/* Appends one shape of ndim (1..ZR_SCHEMA_NDIM_MAX) dims. Returns 0, -ZR_E_SCHEMA
 * for a bad ndim, or -ENOMEM (the table is unchanged). */
int zr_shapes_append(zr_shapes *t, const uint64_t *dims, uint32_t ndim, zr_error *err);

/* Swap-last delete of idx[0..n) (any order, repeats allowed), exactly as the
 * store's. Returns 0, -ZR_E_RANGE (an index >= count: nothing changed) or -ENOMEM. */
int zr_shapes_delete(zr_shapes *t, const uint64_t *idx, size_t n, zr_error *err);

/* Keeps the first `count` records (count <= the table's). */
void zr_shapes_truncate(zr_shapes *t, uint64_t count);

/* 1 if every record has `ndim` dimensions (an empty table: any ndim), else 0;
 * *ret_first_other (may be NULL) is then a record whose ndim differs. */
int zr_shapes_uniform(const zr_shapes *t, uint32_t ndim, uint64_t *ret_first_other);

#endif
