/* format.c: encoding and decoding meta.zr and RecordLocs byte by byte.
 *
 * Pure functions, no I/O. It validates what a header can say about itself
 * (magic, version, codec, chunk size, tail inside the chunk); whether the files
 * it describes exist is the store's business.
 */
#include "store/format.h"

#include <string.h>

static const uint8_t zr_magic[4] = { 'Z', 'R', 'E', 'C' };

void zr_header_encode(const zr_header *h, uint8_t out[ZR_HEADER_SIZE]) {
        memset(out, 0, ZR_HEADER_SIZE);
        memcpy(out, zr_magic, 4);
        out[4] = h->chunk_log2 == 0 || h->chunk_log2 == ZR_CHUNK_LOG2_DEFAULT ?
                 ZR_FORMAT_VERSION_LX : ZR_FORMAT_VERSION;
        out[5] = h->codec;
        zr_le32_put(out + 6, h->tail_chunk);
        zr_le32_put(out + 10, h->tail_offset);
        zr_le64_put(out + 14, h->length);
        out[22] = h->chunk_log2 == ZR_CHUNK_LOG2_DEFAULT ? 0 : h->chunk_log2;
        out[23] = h->flags;
}

unsigned zr_header_chunk_log2(const zr_header *h) {
        return h->chunk_log2 ? h->chunk_log2 : ZR_CHUNK_LOG2_DEFAULT;
}

int zr_header_decode(const uint8_t *buf, size_t len, zr_header *ret, zr_error *err) {
        zr_header h = {0};

        if (len < 4 || memcmp(buf, zr_magic, 4) != 0) {
                uint8_t m[4] = {0};
                memcpy(m, buf, len < 4 ? len : 4);
                return zr_error_set(err, ZR_E_BAD_MAGIC,
                                    "meta.zr: magic is %02x %02x %02x %02x, not \"ZREC\"",
                                    m[0], m[1], m[2], m[3]);
        }
        if (len != ZR_HEADER_SIZE)
                return zr_error_set(err, ZR_E_CORRUPT, "meta.zr: %zu bytes, expected %d",
                                    len, ZR_HEADER_SIZE);
        h.version = buf[4];
        if (h.version != ZR_FORMAT_VERSION && h.version != ZR_FORMAT_VERSION_LX)
                return zr_error_set(err, ZR_E_BAD_VERSION,
                                    "meta.zr: format version %u, this build reads %d and %d",
                                    h.version, ZR_FORMAT_VERSION, ZR_FORMAT_VERSION_LX);
        h.codec = buf[5];
        if (h.codec > ZR_CODEC_ZSTD_DICT)
                return zr_error_set(err, ZR_E_BAD_CODEC, "meta.zr: unknown codec tag %u",
                                    h.codec);
        h.tail_chunk = zr_le32_get(buf + 6);
        h.tail_offset = zr_le32_get(buf + 10);
        h.length = zr_le64_get(buf + 14);
        h.chunk_log2 = buf[22];
        h.flags = buf[23];
        if (h.chunk_log2 != 0 &&
            (h.chunk_log2 < ZR_CHUNK_LOG2_MIN || h.chunk_log2 > ZR_CHUNK_LOG2_DEFAULT))
                return zr_error_set(err, ZR_E_CORRUPT,
                                    "meta.zr: chunk size 2^%u out of range 2^%d..2^%d",
                                    h.chunk_log2, ZR_CHUNK_LOG2_MIN, ZR_CHUNK_LOG2_DEFAULT);
        if (h.version == ZR_FORMAT_VERSION_LX && h.chunk_log2 != 0)
                return zr_error_set(err, ZR_E_CORRUPT,
                                    "meta.zr: format version 3 with chunk size 2^%u "
                                    "(version 3 chunks are 4 GiB)", h.chunk_log2);
        if (zr_header_chunk_log2(&h) < 32 &&
            h.tail_offset > ((uint64_t)1 << zr_header_chunk_log2(&h)))
                return zr_error_set(err, ZR_E_CORRUPT,
                                    "meta.zr: tail offset %u past the chunk size 2^%u",
                                    h.tail_offset, zr_header_chunk_log2(&h));
        *ret = h;
        return 0;
}

int zr_header_check_legacy(const uint8_t *buf, size_t len, uint64_t file_size, zr_error *err) {
        if (len < 6 || memcmp(buf, zr_magic, 4) != 0 || file_size != ZR_LEGACY_META_SIZE)
                return 0;
        if (!((buf[4] == 1 && buf[5] == 0) || buf[4] == 2))
                return 0;
        return zr_error_set(err, ZR_E_BAD_VERSION,
                            "meta.zr: a loaderx 1.0-1.4 store (format %u: the record table "
                            "inside meta.zr); this build reads formats 1 and 3 (loaderx 1.5 "
                            "and later): copy its records into a new store with that loaderx",
                            buf[4]);
}

void zr_loc_encode(const zr_loc *l, uint8_t out[ZR_LOC_SIZE]) {
        zr_le32_put(out, l->offset);
        zr_le32_put(out + 4, l->phys_length);
        zr_le32_put(out + 8, l->logic_length);
        zr_le32_put(out + 12, l->chunk_id);
}

void zr_loc_decode(const uint8_t in[ZR_LOC_SIZE], zr_loc *ret) {
        zr_loc l;
        l.offset = zr_le32_get(in);
        l.phys_length = zr_le32_get(in + 4);
        l.logic_length = zr_le32_get(in + 8);
        l.chunk_id = zr_le32_get(in + 12);
        *ret = l;
}
