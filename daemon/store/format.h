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

/* Format versions (docs/FORMAT.md, "Compatibility with loaderx 1.5.7"). The two
 * are the same bytes; 3 is loaderx 1.5's number for them, and says the chunks are
 * 4 GiB (byte 22 is 0), which loaderx 1.5 assumes. A header is written as 3 when
 * its chunks are 4 GiB, as 1 otherwise (test stores), so loaderx 1.5 opens every
 * store it can read and refuses the others. Both are read. */
#define ZR_FORMAT_VERSION 1
#define ZR_FORMAT_VERSION_LX 3
#define ZR_HEADER_SIZE 32

/* loaderx 1.0 to 1.4 (its formats 1 and 2) kept a 16-byte header and the whole
 * record table, 2^24 entries of 16 bytes, in meta.zr: a file of this size. */
#define ZR_LEGACY_META_SIZE (16 + ((uint64_t)1 << 24) * 16)
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

/* meta.zr, decoded. Byte offsets: magic 0-3, version 4 (1 or 3), codec 5, tail_chunk
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

/* Writes the 32 header bytes of `h` (magic and version included: 3 for 4 GiB
 * chunks, 1 for any other size; h->version is not used) to out. */
void zr_header_encode(const zr_header *h, uint8_t out[ZR_HEADER_SIZE]);

/* Decodes `len` bytes of meta.zr. Returns 0, or ZR_E_BAD_MAGIC (first four
 * bytes not "ZREC", or fewer than 4 bytes), ZR_E_CORRUPT (not exactly 32 bytes,
 * a chunk_log2 out of range or set in a version 3 header, a tail past the chunk),
 * ZR_E_BAD_VERSION (not 1 or 3), ZR_E_BAD_CODEC, each naming the value found. */
int zr_header_decode(const uint8_t *buf, size_t len, zr_header *ret, zr_error *err);

/* Checks whether meta.zr, file_size bytes that begin with buf[0..len), is a
 * loaderx 1.0 to 1.4 store: magic "ZREC", version 1 (a u16) or 2 (a u8), and
 * ZR_LEGACY_META_SIZE bytes. Returns -ZR_E_BAD_VERSION with a message that says
 * so and what to do, or 0 for anything else. */
int zr_header_check_legacy(const uint8_t *buf, size_t len, uint64_t file_size, zr_error *err);

/* log2 of the chunk capacity a decoded header declares (12..32). */
unsigned zr_header_chunk_log2(const zr_header *h);

/* One RecordLoc: offset 0-3, phys_length 4-7, logic_length 8-11, chunk_id 12-15. */
void zr_loc_encode(const zr_loc *l, uint8_t out[ZR_LOC_SIZE]);
void zr_loc_decode(const uint8_t in[ZR_LOC_SIZE], zr_loc *ret);

#endif
