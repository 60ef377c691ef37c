/* lxschema.h: the schema.msgpack of a loaderx 1.5.7 ragged store.
 *
 * loaderx 1.5.7 keeps a ragged record's shape in the schema, not in the record:
 *
 *     {"format": "loaderx-zrecord", "version": 1, "kind": "ragged", "dtype": "<f4",
 *      "codec": "zstd", "shapes": [[2, 4], [5], [3, 3, 3]], ...caller's keys}
 *
 * "shapes" has one list per record of the store, in index order, each of 1..32
 * dims, records of one store free to differ in ndim; a record is exactly
 * prod(shape) × itemsize bytes of payload, nothing else. Any other key is the
 * caller's (loaderx's `schema=` metadata) and is kept verbatim, in order, except
 * "zrecord.pending_delete": [old_length, index, ...], zrecord's note of a delete
 * in flight (lxragged.h), which is decoded into `pending`.
 * docs/FORMAT.md, "Compatibility with loaderx 1.5.7", is the spec.
 *
 * The file grows by a few bytes per record, so there is no fixed size bound:
 * decoding is bounded by the bytes given (no container may declare more elements
 * than bytes remain; nesting is at most 8 deep), and costs at most about 9 bytes
 * of memory per file byte. No file I/O here (lxfile.h reads and writes the file).
 *
 * Errors: negative codes (-errno or -ZR_E_*) with *err filled (err may be NULL).
 */
#ifndef ZR_DATASET_LXSCHEMA_H
#define ZR_DATASET_LXSCHEMA_H

#include <stddef.h>
#include <stdint.h>

#include "dataset/schema.h"
#include "dataset/shapes.h"
#include "util/error.h"

typedef struct zr_lxschema {
        zr_dtype dtype;
        enum zr_codec codec;
        zr_shapes *shapes;   /* owned */
        uint8_t *extra;      /* the caller's entries: msgpack key, value, key, ...; owned */
        size_t extra_len;
        uint32_t extra_count;
        uint64_t *pending;   /* a delete in flight: the store's length before it, then
                              * its indices; NULL when none; owned */
        size_t npending;     /* entries of pending (0, or 1 + the indices) */
} zr_lxschema;

#define ZR_LXSCHEMA_PENDING_KEY "zrecord.pending_delete"

/* An empty schema (no records, no extra keys) of dtype and codec into *ret.
 * Returns 0, -ZR_E_SCHEMA (bad dtype), -ZR_E_BAD_CODEC or -ENOMEM. */
int zr_lxschema_init(zr_lxschema *ret, const char *dtype, enum zr_codec codec, zr_error *err);

/* Decodes the file's bytes into *ret (release with zr_lxschema_done()). Returns 0,
 * or -ZR_E_SCHEMA (malformed msgpack, a missing, duplicated or wrongly typed key,
 * "format" not "loaderx-zrecord", "version" not 1, "kind" not "ragged", a bad dtype
 * or shape), -ZR_E_BAD_CODEC or -ENOMEM, with a message naming what was found. */
int zr_lxschema_decode(const void *data, size_t len, zr_lxschema *ret, zr_error *err);

/* 1 if data (the first len bytes of a schema.msgpack, maybe not all of it) is a map
 * with a "shapes" key before its bytes end: a loaderx 1.5.7 ragged schema, to be
 * decoded with zr_lxschema_decode() rather than zr_schema_decode(). 0 otherwise,
 * malformed bytes included. Reads nothing past len, allocates nothing. */
int zr_lxschema_sniff(const void *data, size_t len);

/* Encodes *s as loaderx 1.5.7 writes it (its key order, the smallest integer
 * forms; then the pending delete if any, then the extra entries) into a new
 * malloc()ed buffer owned by the caller. Returns 0 or -ENOMEM. */
int zr_lxschema_encode(const zr_lxschema *s, void **ret, size_t *ret_len, zr_error *err);

/* Frees what *s owns and zeroes it. NULL allowed. */
void zr_lxschema_done(zr_lxschema *s);

#endif
