/* schema.h: the schema of a typed dataset and its file, schema.msgpack.
 *
 * A schema holds the store-wide facts of a dataset: its kind (dense: every record
 * is one item of item_shape; ragged: every record carries its own shape in a
 * header, see ragged.h), the dtype of its elements, the item shape (dense) or the
 * number of dimensions of every record (ragged), and the codec of its store.
 *
 * schema.msgpack is one msgpack map (docs/DATASETS.md is the normative spec):
 *
 *     {"format": "loaderx-zrecord", "version": 1, "kind": "dense", "dtype": "<f4",
 *      "codec": "zstd", "item_shape": [28, 28]}
 *     {"kind": "ragged", "dtype": "<i4", "ndim": 1, "codec": "raw"}
 *     {"kind": "ragged", "dtype": "<f4", "ndim": 0, "codec": "zstd"}
 *
 * A ragged "ndim" of 0 (ZR_SCHEMA_NDIM_ANY) lets every record have its own number
 * of dimensions (1..32), as loaderx 1.5.7's ragged stores do; its header says it.
 *
 * A dense schema carries loaderx 1.5.7's "format" and "version" keys, so that
 * loaderx 1.5.7 opens the store; a ragged one does not, because loaderx 1.5.7
 * keeps a ragged record's shape in the schema ("shapes"), not in the record, and
 * would misread these records. Reading, "format" and "version" may be absent;
 * present, they must be loaderx's. A ragged schema of loaderx 1.5.7 ("shapes", no
 * "ndim") is refused here with a message that says so: lxschema.h reads it.
 * An image store (docs/IMAGES.md) is a byte store with a schema: "layout":
 * "bytes" (ragged "|u1" of ndim 1, records without a shape header) and an
 * "image" map of facts (zr_schema_image).
 * Unknown keys are ignored (a later version may add some); a missing, duplicated
 * or wrongly typed known key, an unknown kind, a bad dtype, too many dimensions or
 * a malformed, truncated or oversized file is ZR_E_SCHEMA; an unknown codec name is
 * ZR_E_BAD_CODEC. Decoding is bounded: the file is at most ZR_SCHEMA_FILE_MAX
 * bytes and no msgpack container may declare more elements than bytes remain, so
 * a hostile file can neither crash the reader nor make it allocate much.
 */
#ifndef ZR_DATASET_SCHEMA_H
#define ZR_DATASET_SCHEMA_H

#include <stddef.h>
#include <stdint.h>

#include "dataset/dtype.h"
#include "store/store.h"
#include "util/error.h"

/* A schema file is a handful of short keys; 64 KiB is generous and bounds what a
 * corrupt or hostile file can cost to read. */
#define ZR_SCHEMA_FILE_MAX (64 * 1024)
/* numpy's own limit on dimensions (NPY_MAXDIMS) is 32 (64 since numpy 2). */
#define ZR_SCHEMA_NDIM_MAX 32
/* A ragged schema's ndim when records differ in ndim (each 1..ZR_SCHEMA_NDIM_MAX). */
#define ZR_SCHEMA_NDIM_ANY 0

#define ZR_SCHEMA_FILE "schema.msgpack"

/* loaderx 1.5.7's stamp: the value of "format" and of "version". */
#define ZR_SCHEMA_FORMAT "loaderx-zrecord"
#define ZR_SCHEMA_FORMAT_VERSION 1

enum zr_schema_kind {
        ZR_SCHEMA_DENSE = 0,
        ZR_SCHEMA_RAGGED = 1,
};

/* Where a ragged record's shape is kept (dataset.h). Only ZR_LAYOUT_ZRECORD has a
 * schema.msgpack of this header's form; the others are served as ragged schemas
 * (ZR_LAYOUT_LX157: ndim ZR_SCHEMA_NDIM_ANY; ZR_LAYOUT_BYTES: "|u1", ndim 1). */
enum zr_layout {
        ZR_LAYOUT_ZRECORD = 0, /* dense, or ragged with the shape header (ragged.h) */
        ZR_LAYOUT_LX157 = 1,   /* loaderx 1.5.7 ragged: bare payloads, shapes in
                                * schema.msgpack (lxschema.h) */
        ZR_LAYOUT_BYTES = 2,   /* a store without schema.msgpack (loaderx 1.5.7's raw
                                * Zrecord): byte records, each of shape (its length,) */
};

/* An image store's facts (schema.msgpack's "image" map, docs/IMAGES.md): what
 * every record holds, as its writer checked each one's header. Zero where not
 * known or where records differ. A hint to a loader (a size, a memory bound),
 * never trusted: each record's own header is checked when it is decoded. */
#define ZR_SCHEMA_IMAGE_JPEG 1u
#define ZR_SCHEMA_IMAGE_PNG 2u
typedef struct zr_schema_image {
        uint32_t formats;       /* ZR_SCHEMA_IMAGE_* bits; 0: not an image store */
        uint32_t channels;      /* 1 or 3 when every record has that many; 0 */
        uint32_t height, width; /* every record's size, or 0 */
        uint64_t max_pixels;    /* the largest record's pixels, or 0 */
} zr_schema_image;

typedef struct zr_schema {
        enum zr_schema_kind kind;
        zr_dtype dtype;
        /* dense: number of item dimensions (0 for scalars, item_shape "()");
         * ragged: the number of dimensions of every record, 1..ZR_SCHEMA_NDIM_MAX,
         * or ZR_SCHEMA_NDIM_ANY: each record its own */
        uint32_t ndim;
        uint64_t item_shape[ZR_SCHEMA_NDIM_MAX]; /* dense only: item_shape[0..ndim) */
        enum zr_codec codec;
        enum zr_layout layout; /* ZR_LAYOUT_ZRECORD from init; decode: the
                                * "layout" key ("bytes" for a byte store with a
                                * schema, an image store), else ZR_LAYOUT_ZRECORD */
        zr_schema_image image;  /* "image", or zeros */
} zr_schema;

/* Fills *ret with a dense schema (item_shape[0..ndim), ndim 0 for scalars;
 * item_shape may be NULL when ndim is 0). Returns 0, or -ZR_E_SCHEMA for a bad
 * dtype, ndim > ZR_SCHEMA_NDIM_MAX or an item larger than ZR_RECORD_MAX bytes. */
int zr_schema_init_dense(zr_schema *ret, const char *dtype, const uint64_t *item_shape,
                         uint32_t ndim, enum zr_codec codec, zr_error *err);

/* Fills *ret with a ragged schema of `ndim` dimensions per record (1..32), or
 * of any per record (ZR_SCHEMA_NDIM_ANY). Returns 0 or -ZR_E_SCHEMA. */
int zr_schema_init_ragged(zr_schema *ret, const char *dtype, uint32_t ndim,
                          enum zr_codec codec, zr_error *err);

/* Bytes of one dense record: itemsize × prod(item_shape) (itemsize for scalars).
 * Meaningless (0) for a ragged schema. Never overflows for a schema that passed
 * init or decode (bounded by ZR_RECORD_MAX). */
uint64_t zr_schema_item_bytes(const zr_schema *s);

/* The codec's name in schema.msgpack: "raw", "zstd", "zstd_dict"; NULL if unknown. */
const char *zr_codec_name(enum zr_codec codec);

/* Parses a codec name (`len` bytes, not necessarily NUL-terminated). Returns 0 and
 * sets *ret, or -ZR_E_BAD_CODEC. */
int zr_codec_parse(const char *name, size_t len, enum zr_codec *ret, zr_error *err);

/* Encodes *s as schema.msgpack bytes into a new malloc()ed buffer (*ret, *ret_len),
 * owned by the caller. Returns 0 or -ENOMEM. */
int zr_schema_encode(const zr_schema *s, void **ret, size_t *ret_len, zr_error *err);

/* Decodes schema.msgpack bytes (data may be NULL when len is 0) into *ret.
 * Returns 0, -ZR_E_SCHEMA (malformed, see above), -ZR_E_BAD_CODEC or -ENOMEM. */
int zr_schema_decode(const void *data, size_t len, zr_schema *ret, zr_error *err);

/* The layout's name in the protocol (PROTOCOL.md, the schema map's "layout"):
 * "zrecord", "loaderx-1.5.7", "bytes"; NULL if unknown. */
const char *zr_layout_name(enum zr_layout layout);

/* Writes a short human description ("dense <f4 (28, 28) zstd") into buf. */
void zr_schema_describe(const zr_schema *s, char *buf, size_t size);

/* Formats a shape as numpy prints it: "()", "(3,)", "(28, 28)". */
void zr_shape_format(const uint64_t *shape, uint32_t ndim, char *buf, size_t size);

#endif
