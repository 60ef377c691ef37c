/* format.h: the on-disk layout of a Zrecord store (normative text: docs/FORMAT.md).
 *
 * Every integer on disk is little-endian and is read and written through the
 * explicit byte functions below, never by casting a buffer to a struct, so a
 * store written by one build opens in any other.
 */
#ifndef ZR_STORE_FORMAT_H
#define ZR_STORE_FORMAT_H

#include <stddef.h>
#include <stdint.h>

#include "store/store.h"
#include "util/error.h"

#define ZR_META_NAME "meta.zr"
#define ZR_DICT_NAME "dict.zr"
#define ZR_JOURNAL_NAME "delete.zr"

#define ZR_FORMAT_VERSION 1
#define ZR_HEADER_SIZE 32
#define ZR_LOC_SIZE 16

/* A .loc segment holds 2^28 entries (4 GiB, sparse): seg = idx >> 28. */
#define ZR_LOC_SEGMENT_LOG2 28
#define ZR_LOC_SEGMENT_ENTRIES ((uint64_t)1 << ZR_LOC_SEGMENT_LOG2)

/* Chunk capacity: 2^32 (the seed's 4 GiB) unless header byte 22 says otherwise.
 * Below 2^12 a chunk could not hold even a small zstd frame; tests use 2^16+. */
#define ZR_CHUNK_LOG2_DEFAULT 32
#define ZR_CHUNK_LOG2_MIN 12

/* The smallest zstd frame: magic (4), frame header (2) and one block header
 * (3). A compressed record's table entry never says less; an all-zero entry
 * (a table write that never reached the disk) is caught by this. */
#define ZR_FRAME_MIN 9

/* Header byte 23, bit 0: a dictionary was installed (dict.zr must exist). */
#define ZR_HEADER_FLAG_DICT 0x01

static inline void zr_le32_put(uint8_t *p, uint32_t v) {
        p[0] = (uint8_t)v;
        p[1] = (uint8_t)(v >> 8);
        p[2] = (uint8_t)(v >> 16);
        p[3] = (uint8_t)(v >> 24);
}

static inline uint32_t zr_le32_get(const uint8_t *p) {
        return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
               (uint32_t)p[3] << 24;
}

static inline void zr_le64_put(uint8_t *p, uint64_t v) {
        zr_le32_put(p, (uint32_t)v);
        zr_le32_put(p + 4, (uint32_t)(v >> 32));
}

static inline uint64_t zr_le64_get(const uint8_t *p) {
        return (uint64_t)zr_le32_get(p) | (uint64_t)zr_le32_get(p + 4) << 32;
}

/* meta.zr, decoded. Byte offsets: magic 0-3, version 4, codec 5, tail_chunk
 * 6-9, tail_offset 10-13, length 14-21, chunk_log2 22 (0 = 32), flags 23,
 * 24-31 reserved (written 0, ignored). */
typedef struct zr_header {
        uint8_t version;
        uint8_t codec;
        uint32_t tail_chunk;
        uint32_t tail_offset;
        uint64_t length;
        uint8_t chunk_log2; /* as stored: 0 means ZR_CHUNK_LOG2_DEFAULT */
        uint8_t flags;
} zr_header;

/* Writes the 32 header bytes of `h` (magic and version included) to out. */
void zr_header_encode(const zr_header *h, uint8_t out[ZR_HEADER_SIZE]);

/* Decodes `len` bytes of meta.zr. Returns 0, or ZR_E_BAD_MAGIC (first four
 * bytes not "ZREC", or fewer than 4 bytes), ZR_E_CORRUPT (not exactly 32 bytes,
 * a chunk_log2 out of range, a tail past the chunk), ZR_E_BAD_VERSION,
 * ZR_E_BAD_CODEC, each naming the value found. */
int zr_header_decode(const uint8_t *buf, size_t len, zr_header *ret, zr_error *err);

/* log2 of the chunk capacity a decoded header declares (12..32). */
unsigned zr_header_chunk_log2(const zr_header *h);

/* One RecordLoc: offset 0-3, phys_length 4-7, logic_length 8-11, chunk_id 12-15. */
void zr_loc_encode(const zr_loc *l, uint8_t out[ZR_LOC_SIZE]);
void zr_loc_decode(const uint8_t in[ZR_LOC_SIZE], zr_loc *ret);

#endif
