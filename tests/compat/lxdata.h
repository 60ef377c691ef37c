/* lxdata.h: the records of the loaderx 1.5.7 compatibility fixtures, by formula:
 * the C twin of lxdata.py (keep the two equal). Header-only. */
#ifndef ZR_TESTS_COMPAT_LXDATA_H
#define ZR_TESTS_COMPAT_LXDATA_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define LX_DENSE_N 3000
#define LX_DENSE_ITEMS 16 /* int32, shape (4, 4) */
#define LX_RAGGED_N 1500
#define LX_BYTES_N 200
#define LX_APPEND_DENSE 100
#define LX_APPEND_RAGGED 20
#define LX_APPEND_FIRST 100000 /* check_loaderx_stores.py's appends */
#define LX_APPEND 5

static const uint64_t lx_delete[] = { 0, 7, 1499, 750, 42, 42 };     /* DELETE */
static const uint64_t lx_lx_delete[] = { 3, 1499, 700, 700, 10 };     /* LX_DELETE */
#define LX_NDELETE (sizeof(lx_delete) / sizeof(*lx_delete))
#define LX_NLX_DELETE (sizeof(lx_lx_delete) / sizeof(*lx_lx_delete))

static const struct { uint32_t ndim; uint64_t dims[3]; } lx_shapes[5] = {
        { 2, { 2, 4 } }, { 1, { 5 } }, { 3, { 3, 3, 3 } }, { 2, { 7, 2 } }, { 2, { 1, 1 } },
};

static inline void lx_dense_record(uint64_t id, int32_t out[LX_DENSE_ITEMS]) {
        for (int k = 0; k < LX_DENSE_ITEMS; k++)
                out[k] = (int32_t)(id * 16 + (uint64_t)k);
}

static inline uint64_t lx_ragged_items(uint64_t id) {
        uint64_t n = 1;
        for (uint32_t k = 0; k < lx_shapes[id % 5].ndim; k++)
                n *= lx_shapes[id % 5].dims[k];
        return n;
}

static inline void lx_ragged_record(uint64_t id, int32_t *out) {
        for (uint64_t k = 0; k < lx_ragged_items(id); k++)
                out[k] = (int32_t)(id * 1000 + k);
}

static inline uint64_t lx_bytes_len(uint64_t id) {
        return 100 + (id * 13) % 400;
}

#endif
