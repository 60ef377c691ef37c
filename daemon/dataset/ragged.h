/* ragged.h: the shape header every record of a ragged dataset begins with.
 *
 * A ragged record is
 *
 *     u64 ndim | u64 dims[ndim] | payload
 *
 * all integers little-endian, so the header is 8 × (1 + ndim) bytes and a payload
 * that starts at an 8-aligned record start stays 8-aligned. The payload is exactly
 * prod(dims) × itemsize bytes of the schema's dtype, C order. A zero in dims gives
 * an empty payload (a zero-length record still has its header). The header's ndim
 * must be the schema's ndim, or any of 1..32 when the schema's is
 * ZR_SCHEMA_NDIM_ANY. The shape travels with the bytes, so a swap-last
 * delete or a compaction can never separate them. docs/DATASETS.md is the spec.
 * (loaderx 1.5.7 keeps ragged shapes apart instead, in schema.msgpack: lxschema.h;
 * its records are the bare payload, checked by zr_ragged_check_shape().)
 */
#ifndef ZR_DATASET_RAGGED_H
#define ZR_DATASET_RAGGED_H

#include <stdint.h>

#include "dataset/schema.h"
#include "util/error.h"

/* Bytes of the header of a record with `ndim` dimensions. */
static inline uint64_t zr_ragged_header_bytes(uint32_t ndim) {
        return 8 * (1 + (uint64_t)ndim);
}

/* Words a gather's shapes take for n records of ragged schema *s, at most: n × ndim
 * (the dims of each record, schema.h), or for ZR_SCHEMA_NDIM_ANY n × (1 +
 * ZR_SCHEMA_NDIM_MAX), since there each record gives its ndim, then its dims. */
static inline uint64_t zr_ragged_shape_words_max(const zr_schema *s, uint64_t n) {
        return n * (s->ndim == ZR_SCHEMA_NDIM_ANY ? 1 + (uint64_t)ZR_SCHEMA_NDIM_MAX : s->ndim);
}

/* Writes the header for shape dims[0..ndim) at dst, which has room for
 * zr_ragged_header_bytes(ndim) bytes (no alignment needed). */
void zr_ragged_header_write(void *dst, const uint64_t *dims, uint32_t ndim);

/* Sets *ret to the whole record size (header + prod(dims) × itemsize). Returns 0,
 * or -ZR_E_TOO_BIG if it exceeds ZR_RECORD_MAX (or overflows). */
int zr_ragged_record_bytes(const uint64_t *dims, uint32_t ndim, uint32_t itemsize,
                           uint64_t *ret, zr_error *err);

/* Validates record `rec` (rec_len bytes, no alignment needed) against ragged
 * schema *s and copies its dims into ret_dims[0..s->ndim) (ret_dims may be NULL).
 * The payload is at rec + zr_ragged_header_bytes(s->ndim). For a schema of
 * ZR_SCHEMA_NDIM_ANY it checks as zr_ragged_parse_any() and ret_dims must be NULL
 * (use that function to learn the record's ndim). `which` is the record's
 * number, used in messages only. Returns 0, or -ZR_E_SCHEMA when the record is
 * shorter than its header, its ndim is not the schema's, or its length is not
 * header + prod(dims) × itemsize; the message says what was expected and what came. */
int zr_ragged_parse(const zr_schema *s, const void *rec, uint64_t rec_len, uint64_t which,
                    uint64_t *ret_dims, zr_error *err);

/* As zr_ragged_parse() for a record whose header may have any ndim (1..32): sets
 * *ret_ndim and ret_dims[0..ndim) (ret_dims has room for ZR_SCHEMA_NDIM_MAX).
 * itemsize is the dtype's. Returns 0 or -ZR_E_SCHEMA. */
int zr_ragged_parse_any(const void *rec, uint64_t rec_len, uint32_t itemsize, uint64_t which,
                        uint32_t *ret_ndim, uint64_t *ret_dims, zr_error *err);

/* A record without a header (loaderx 1.5.7's layout, the shape kept apart, see
 * shapes.h): checks that rec_len bytes are exactly prod(dims) × itemsize. `which`
 * names the record in the message. Returns 0 or -ZR_E_SCHEMA. */
int zr_ragged_check_shape(const uint64_t *dims, uint32_t ndim, uint32_t itemsize,
                          uint64_t rec_len, uint64_t which, zr_error *err);

#endif
