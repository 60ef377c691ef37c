/* mpwalk.c: the object walk of schema.msgpack files (mpwalk.h). */
#include "dataset/mpwalk.h"

static uint64_t be_read(const uint8_t *p, unsigned n) {
        uint64_t v = 0;

        for (unsigned i = 0; i < n; i++)
                v = (v << 8) | p[i];
        return v;
}

/* The header of an object of type byte b that has a length field: its bytes
 * after b, and what the length counts. */
enum sized { SIZED_PAYLOAD, SIZED_EXT, SIZED_ARRAY, SIZED_MAP };

static int length_field(uint8_t b, unsigned *ret_bytes, enum sized *ret_kind) {
        static const struct {
                uint8_t b;
                uint8_t bytes;
                uint8_t kind;
        } fields[] = {
                { 0xc4, 1, SIZED_PAYLOAD }, { 0xc5, 2, SIZED_PAYLOAD }, { 0xc6, 4, SIZED_PAYLOAD },
                { 0xd9, 1, SIZED_PAYLOAD }, { 0xda, 2, SIZED_PAYLOAD }, { 0xdb, 4, SIZED_PAYLOAD },
                { 0xc7, 1, SIZED_EXT },     { 0xc8, 2, SIZED_EXT },     { 0xc9, 4, SIZED_EXT },
                { 0xdc, 2, SIZED_ARRAY },   { 0xdd, 4, SIZED_ARRAY },
                { 0xde, 2, SIZED_MAP },     { 0xdf, 4, SIZED_MAP },
        };

        for (size_t i = 0; i < sizeof(fields) / sizeof(fields[0]); i++)
                if (fields[i].b == b) {
                        *ret_bytes = fields[i].bytes;
                        *ret_kind = (enum sized)fields[i].kind;
                        return 1;
                }
        return 0;
}

/* The payload bytes of a fixed-size type byte b (0xca..0xd8 but the sized
 * ones), or -1 when b is no msgpack type (0xc1). */
static int fixed_payload(uint8_t b) {
        switch (b) {
        case 0xcc: case 0xd0: return 1;
        case 0xcd: case 0xd1: case 0xd4: return 2;
        case 0xd5: return 3;
        case 0xca: case 0xce: case 0xd2: return 4;
        case 0xd6: return 5;
        case 0xcb: case 0xcf: case 0xd3: return 8;
        case 0xd7: return 9;
        case 0xd8: return 17;
        default: return -1;
        }
}

int zr_mp_skip(const uint8_t *data, size_t len, size_t *at, zr_error *err) {
        uint64_t pending = 1;

        while (pending > 0) {
                uint64_t count = 0; /* elements a container declares */
                uint64_t skip = 0;  /* payload bytes after the header */
                unsigned hdr = 1;   /* header bytes including the type byte */
                size_t here = *at;
                uint8_t b;

                if (here >= len)
                        return zr_error_set(err, ZR_E_SCHEMA, "schema.msgpack is truncated "
                                            "(at byte %zu of %zu)", here, len);
                b = data[here];
                pending--;
                if (b <= 0x7f || b >= 0xe0 || b == 0xc0 || b == 0xc2 || b == 0xc3) {
                        /* fixint, nil, bool */
                } else if (b <= 0x8f) {
                        count = 2 * (uint64_t)(b & 0x0f);
                } else if (b <= 0x9f) {
                        count = b & 0x0f;
                } else if (b <= 0xbf) {
                        skip = b & 0x1f;
                } else {
                        unsigned bytes;
                        enum sized kind;

                        if (length_field(b, &bytes, &kind)) {
                                uint64_t n;

                                if (len - here - 1 < bytes)
                                        return zr_error_set(err, ZR_E_SCHEMA, "schema.msgpack is "
                                                            "truncated (at byte %zu of %zu)", here, len);
                                n = be_read(data + here + 1, bytes);
                                hdr += bytes;
                                if (kind == SIZED_PAYLOAD)
                                        skip = n;
                                else if (kind == SIZED_EXT)
                                        skip = n + 1; /* the ext type byte */
                                else if (kind == SIZED_ARRAY)
                                        count = n;
                                else
                                        count = 2 * n;
                        } else if (fixed_payload(b) >= 0) {
                                skip = (uint64_t)fixed_payload(b);
                        } else {
                                return zr_error_set(err, ZR_E_SCHEMA, "schema.msgpack: byte "
                                                    "0x%02x at %zu is not a msgpack type", b, here);
                        }
                }
                if (len - here < hdr || len - here - hdr < skip)
                        return zr_error_set(err, ZR_E_SCHEMA, "schema.msgpack is truncated "
                                            "(an object at byte %zu runs past the end, %zu)", here,
                                            len);
                *at = here + hdr + skip;
                /* Every element takes at least one byte. */
                if (count > len - *at || pending + count > len - *at)
                        return zr_error_set(err, ZR_E_SCHEMA, "schema.msgpack: a container at "
                                            "byte %zu declares %llu elements, more than the %zu "
                                            "bytes left", here, (unsigned long long)count,
                                            len - *at);
                pending += count;
        }
        return 0;
}
