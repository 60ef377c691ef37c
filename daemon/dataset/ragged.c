/* ragged.c: writing and validating ragged record headers. See ragged.h for the
 * layout. Pure functions over caller memory: no allocation, no I/O, and no
 * assumption about the alignment of a record (headers are read with memcpy). */
#include "dataset/ragged.h"

#include <stdio.h>
#include <string.h>

#include "store/store.h"

static void le64_write(uint8_t *p, uint64_t v) {
        for (unsigned i = 0; i < 8; i++)
                p[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t le64_read(const uint8_t *p) {
        uint64_t v = 0;
        for (unsigned i = 0; i < 8; i++)
                v |= (uint64_t)p[i] << (8 * i);
        return v;
}

void zr_ragged_header_write(void *dst, const uint64_t *dims, uint32_t ndim) {
        uint8_t *p = dst;

        le64_write(p, ndim);
        for (uint32_t i = 0; i < ndim; i++)
                le64_write(p + 8 * (1 + (size_t)i), dims[i]);
}

/* prod(dims) × itemsize into *ret; 0 if it overflows or exceeds `limit`. A zero
 * dimension makes the product 0 whatever the others are. */
static int payload_bytes(const uint64_t *dims, uint32_t ndim, uint32_t itemsize,
                         uint64_t limit, uint64_t *ret) {
        uint64_t bytes = itemsize;

        for (uint32_t i = 0; i < ndim; i++) {
                if (dims[i] == 0) {
                        *ret = 0;
                        return 1;
                }
        }
        for (uint32_t i = 0; i < ndim; i++)
                if (__builtin_mul_overflow(bytes, dims[i], &bytes) || bytes > limit)
                        return 0;
        *ret = bytes;
        return 1;
}

int zr_ragged_record_bytes(const uint64_t *dims, uint32_t ndim, uint32_t itemsize,
                           uint64_t *ret, zr_error *err) {
        uint64_t payload;

        if (!payload_bytes(dims, ndim, itemsize, ZR_RECORD_MAX, &payload) ||
            payload + zr_ragged_header_bytes(ndim) > ZR_RECORD_MAX)
                return zr_error_set(err, ZR_E_TOO_BIG, "a ragged record of this shape is "
                                    "larger than a record may be (2^31 bytes)");
        *ret = payload + zr_ragged_header_bytes(ndim);
        return 0;
}

int zr_ragged_parse(const zr_schema *s, const void *rec, uint64_t rec_len, uint64_t which,
                    uint64_t *ret_dims, zr_error *err) {
        const uint8_t *p = rec;
        uint64_t hdr = zr_ragged_header_bytes(s->ndim);
        uint64_t dims[ZR_SCHEMA_NDIM_MAX];
        uint64_t ndim, payload;

        if (s->ndim == ZR_SCHEMA_NDIM_ANY) {
                uint32_t any;
                return zr_ragged_parse_any(rec, rec_len, s->dtype.itemsize, which, &any, dims,
                                           err);
        }
        if (rec_len < 8)
                return zr_error_set(err, ZR_E_SCHEMA, "record %llu: %llu bytes, shorter than "
                                    "a ragged shape header (%llu bytes for ndim %u)",
                                    (unsigned long long)which, (unsigned long long)rec_len,
                                    (unsigned long long)hdr, s->ndim);
        ndim = le64_read(p);
        if (ndim != s->ndim)
                return zr_error_set(err, ZR_E_SCHEMA, "record %llu: shape header has ndim %llu, "
                                    "expected ndim %u", (unsigned long long)which,
                                    (unsigned long long)ndim, s->ndim);
        if (rec_len < hdr)
                return zr_error_set(err, ZR_E_SCHEMA, "record %llu: %llu bytes, shorter than "
                                    "its shape header (%llu bytes for ndim %u)",
                                    (unsigned long long)which, (unsigned long long)rec_len,
                                    (unsigned long long)hdr, s->ndim);
        for (uint32_t i = 0; i < s->ndim; i++)
                dims[i] = le64_read(p + 8 * (1 + (size_t)i));
        if (!payload_bytes(dims, s->ndim, s->dtype.itemsize, UINT64_MAX, &payload) ||
            payload != rec_len - hdr) {
                char shape[96], need[32];
                zr_shape_format(dims, s->ndim, shape, sizeof(shape));
                if (payload_bytes(dims, s->ndim, s->dtype.itemsize, UINT64_MAX, &payload))
                        snprintf(need, sizeof(need), "%llu", (unsigned long long)payload);
                else
                        snprintf(need, sizeof(need), "over 2^64");
                return zr_error_set(err, ZR_E_SCHEMA, "record %llu: shape %s of %s needs %s "
                                    "payload bytes, the record has %llu",
                                    (unsigned long long)which, shape, s->dtype.str, need,
                                    (unsigned long long)(rec_len - hdr));
        }
        if (ret_dims)
                memcpy(ret_dims, dims, s->ndim * sizeof(uint64_t));
        return 0;
}

int zr_ragged_check_shape(const uint64_t *dims, uint32_t ndim, uint32_t itemsize,
                          uint64_t rec_len, uint64_t which, zr_error *err) {
        uint64_t payload;

        if (!payload_bytes(dims, ndim, itemsize, UINT64_MAX, &payload) || payload != rec_len) {
                char shape[96], need[32];
                zr_shape_format(dims, ndim, shape, sizeof(shape));
                if (payload_bytes(dims, ndim, itemsize, UINT64_MAX, &payload))
                        snprintf(need, sizeof(need), "%llu", (unsigned long long)payload);
                else
                        snprintf(need, sizeof(need), "over 2^64");
                return zr_error_set(err, ZR_E_SCHEMA, "record %llu: shape %s of %u-byte items "
                                    "needs %s bytes, the record has %llu",
                                    (unsigned long long)which, shape, itemsize, need,
                                    (unsigned long long)rec_len);
        }
        return 0;
}

int zr_ragged_parse_any(const void *rec, uint64_t rec_len, uint32_t itemsize, uint64_t which,
                        uint32_t *ret_ndim, uint64_t *ret_dims, zr_error *err) {
        const uint8_t *p = rec;
        uint64_t ndim, hdr;

        if (rec_len < 8)
                return zr_error_set(err, ZR_E_SCHEMA, "record %llu: %llu bytes, shorter than a "
                                    "ragged shape header", (unsigned long long)which,
                                    (unsigned long long)rec_len);
        ndim = le64_read(p);
        if (ndim < 1 || ndim > ZR_SCHEMA_NDIM_MAX)
                return zr_error_set(err, ZR_E_SCHEMA, "record %llu: shape header has ndim %llu, "
                                    "1..%d are allowed", (unsigned long long)which,
                                    (unsigned long long)ndim, ZR_SCHEMA_NDIM_MAX);
        hdr = zr_ragged_header_bytes((uint32_t)ndim);
        if (rec_len < hdr)
                return zr_error_set(err, ZR_E_SCHEMA, "record %llu: %llu bytes, shorter than its "
                                    "shape header (%llu bytes)", (unsigned long long)which,
                                    (unsigned long long)rec_len, (unsigned long long)hdr);
        for (uint32_t i = 0; i < ndim; i++)
                ret_dims[i] = le64_read(p + 8 * (1 + (size_t)i));
        *ret_ndim = (uint32_t)ndim;
        return zr_ragged_check_shape(ret_dims, (uint32_t)ndim, itemsize, rec_len - hdr, which, err);
}
