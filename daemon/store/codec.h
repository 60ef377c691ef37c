/* codec.h: compressing and decompressing one record with a store's codec.
 *
 * A zr_coder holds the store's codec, its dictionary prepared for reading (one
 * DDict) and for writing at the levels last asked for (a CDict per level, at
 * most ZR_CODER_CDICTS of them, all shared read-only by every thread), and a
 * free list of contexts. A shard
 * of work takes one context with zr_coder_ctx_get(), reuses it for every record
 * it handles and gives it back with zr_coder_ctx_put(): contexts are created
 * once per concurrent shard, never per record. A context also owns a staging
 * buffer that only grows.
 */
#ifndef ZR_STORE_CODEC_H
#define ZR_STORE_CODEC_H

#include <stddef.h>

#include "store/store.h"
#include "util/error.h"

/* Compression levels, in zstd's scale. A level is the writer's choice, made
 * per append; it is not stored (any level's frames decode alike). 0 asks for
 * the codec's default: zstd's own default for zstd, and for zstd_dict the level
 * that compresses as fast as zstd's default does without a dictionary, keeping
 * the dictionary's ratio (docs/DATASETS.md, "Levels"). */
#define ZR_ZSTD_LEVEL 3
#define ZR_ZSTD_DICT_LEVEL 3
/* CDicts a zstd_dict coder keeps at once (levels written at), the least
 * recently used freed first: a store's memory for them is bounded whatever
 * levels its writers ask for. */
#define ZR_CODER_CDICTS 4

typedef struct zr_coder zr_coder;
typedef struct zr_coder_ctx zr_coder_ctx;

/* Returns 0 and a new codec in *ret, or -ENOMEM. */
int zr_coder_new(enum zr_codec codec, zr_coder **ret);

/* Frees the codec, its dictionary and every context (all must have been put
 * back). NULL allowed; returns NULL. */
zr_coder *zr_coder_free(zr_coder *c);

/* Prepares `dict` (copied) as the dictionary. Exclusive: no context may be in
 * use. Returns 0, -EINVAL for an empty dictionary or one zstd refuses, -ENOMEM. */
int zr_coder_set_dict(zr_coder *c, const void *dict, size_t len, zr_error *err);

/* The dictionary bytes (owned by the codec), or NULL with *ret_len 0. */
const void *zr_coder_dict(const zr_coder *c, size_t *ret_len);

/* Makes the coder ready to compress at `level` (0: the codec's default;
 * otherwise ZR_LEVEL_MIN..ZR_LEVEL_MAX of store.h, which the caller checked): for
 * zstd_dict, the dictionary prepared at that level, made if none of the kept
 * ones is (the least recently used one freed when ZR_CODER_CDICTS are kept).
 * Exclusive with every compression: the store calls it under its append lock.
 * Returns 0, -ZR_E_NO_DICT (zstd_dict without dictionary), -ENOMEM. */
int zr_coder_prepare(zr_coder *c, int level, zr_error *err);

/* How many CDicts the coder keeps, and their bytes in *ret_bytes (may be
 * NULL). Exclusive, as zr_coder_prepare(). */
unsigned zr_coder_cdicts(const zr_coder *c, size_t *ret_bytes);

/* A context for one shard, or NULL on allocation failure. Thread-safe. */
zr_coder_ctx *zr_coder_ctx_get(zr_coder *c);

/* Gives a context back (NULL allowed). Thread-safe. */
void zr_coder_ctx_put(zr_coder *c, zr_coder_ctx *x);

/* The context's staging buffer grown to at least `size` bytes (contents not
 * kept), or NULL on allocation failure. Valid until the next call. */
void *zr_coder_ctx_buffer(zr_coder_ctx *x, size_t size);

/* Worst-case stored size of a record of `len` bytes. */
size_t zr_coder_bound(const zr_coder *c, size_t len);

/* Compresses src[0..len) into dst (capacity cap, at least zr_coder_bound()) at
 * `level`, which zr_coder_prepare() made ready: a frame with content size and
 * checksum. Returns 0 and *ret_len, or -ZR_E_NO_DICT (zstd_dict without
 * dictionary), -EINVAL (the level was not prepared), -ENOMEM, -EIO (zstd
 * failed). */
int zr_coder_compress(zr_coder *c, zr_coder_ctx *x, int level, void *dst, size_t cap,
                      const void *src, size_t len, size_t *ret_len, zr_error *err);

/* Decompresses the frame src[0..phys) into dst, which must receive exactly
 * `logic` bytes. Returns 0, -ZR_E_DECODE (any zstd error, checksum included,
 * or a size other than `logic`), -ZR_E_NO_DICT. */
int zr_coder_decompress(zr_coder *c, zr_coder_ctx *x, void *dst, size_t logic,
                        const void *src, size_t phys, zr_error *err);

#endif
