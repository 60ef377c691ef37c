/* fingerprint.c: a dataset's fingerprint. See fingerprint.h for what it covers. */
#include "dataset/fingerprint.h"

#include <string.h>

#include "dataset/schema.h"
#include "store/format.h"
#include "store/store.h"

#define FNV_OFFSET UINT64_C(0xcbf29ce484222325)
#define FNV_PRIME UINT64_C(0x100000001b3)

static uint64_t fnv(uint64_t h, const uint8_t *p, size_t n) {
        for (size_t i = 0; i < n; i++)
                h = (h ^ p[i]) * FNV_PRIME;
        return h;
}

static uint64_t fnv_u8(uint64_t h, uint8_t v) {
        return fnv(h, &v, 1);
}

static uint64_t fnv_u32(uint64_t h, uint32_t v) {
        uint8_t b[4];
        zr_le32_put(b, v);
        return fnv(h, b, sizeof(b));
}

static uint64_t fnv_u64(uint64_t h, uint64_t v) {
        uint8_t b[8];
        zr_le64_put(b, v);
        return fnv(h, b, sizeof(b));
}

int zr_dataset_fingerprint(zr_dataset *ds, uint64_t *ret, zr_error *err) {
        const zr_schema *s = zr_dataset_schema(ds);
        zr_store *store = zr_dataset_store(ds);
        uint64_t len = zr_dataset_length(ds), idx[ZR_FINGERPRINT_SAMPLES];
        zr_loc locs[ZR_FINGERPRINT_SAMPLES];
        uint8_t dtype[8] = {0};
        size_t k = len < ZR_FINGERPRINT_SAMPLES ? (size_t)len : ZR_FINGERPRINT_SAMPLES;
        uint64_t h = FNV_OFFSET;

        h = fnv_u64(h, len);
        h = fnv_u8(h, (uint8_t)zr_store_codec(store));
        h = fnv_u8(h, (uint8_t)zr_dataset_has_dict(ds));
        h = fnv_u8(h, (uint8_t)s->kind);
        memcpy(dtype, s->dtype.str, strnlen(s->dtype.str, sizeof(dtype)));
        h = fnv(h, dtype, sizeof(dtype));
        h = fnv_u32(h, s->ndim);
        if (s->kind == ZR_SCHEMA_DENSE)
                for (uint32_t d = 0; d < s->ndim; d++)
                        h = fnv_u64(h, s->item_shape[d]);
        /* record j·(len−1)/(k−1) for j < k: the first, the last, evenly between */
        for (size_t j = 0; j < k; j++)
                idx[j] = k == 1 ? 0 : (uint64_t)((unsigned __int128)j * (len - 1) / (k - 1));
        if (k) {
                int r = zr_store_locate(store, idx, k, locs, err);
                if (r < 0)
                        return r;
        }
        for (size_t j = 0; j < k; j++) {
                h = fnv_u64(h, idx[j]);
                h = fnv_u32(h, locs[j].offset);
                h = fnv_u32(h, locs[j].phys_length);
                h = fnv_u32(h, locs[j].logic_length);
                h = fnv_u32(h, locs[j].chunk_id);
        }
        *ret = h;
        return 0;
}

uint64_t zr_fingerprint_streams(const uint64_t *fps, size_t n) {
        uint64_t h = fnv_u32(FNV_OFFSET, (uint32_t)n);
        for (size_t i = 0; i < n; i++)
                h = fnv_u64(h, fps[i]);
        return h;
}
