/* fingerprint.c: a dataset's fingerprint. See fingerprint.h for what it covers. */
#include "dataset/fingerprint.h"
#include "dataset/rdataset.h"

#include <errno.h>
#include <string.h>
#include <unistd.h>

#include "dataset/schema.h"
#include "io/range.h"
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

static int pread_full(int fd, uint8_t *buf, size_t len, uint64_t off, zr_error *err) {
        while (len > 0) {
                ssize_t n = pread(fd, buf, len, (off_t)off);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0)
                        return zr_error_errno(err, errno, "reading a record for the fingerprint");
                if (n == 0)
                        return zr_error_set(err, ZR_E_CORRUPT, "a record ends past its chunk file");
                buf += n;
                len -= (size_t)n;
                off += (uint64_t)n;
        }
        return 0;
}

/* Hashes the first and last ZR_FINGERPRINT_EDGE stored bytes of records
 * locs[0..k) (all of a shorter one), read from the chunk files. */
static int hash_edges(zr_store *store, const zr_loc *locs, size_t k, uint64_t *h,
                      zr_error *err) {
        zr_io_range ranges[ZR_FINGERPRINT_SAMPLES];
        uint8_t b[2 * ZR_FINGERPRINT_EDGE];
        size_t nr = 0, at = 0;
        int r = zr_store_io_ranges(store, locs, k, ranges, &nr, err);

        if (r < 0)
                return r;
        for (size_t j = 0; j < k; j++) {
                uint32_t len = locs[j].phys_length;
                if (len == 0)
                        continue;      /* no range: io_ranges skips empty records */
                if (at >= nr)
                        return zr_error_set(err, ZR_E_CORRUPT, "a record without its range");
                int fd = ranges[at++].fd;
                size_t head = len < ZR_FINGERPRINT_EDGE ? len : ZR_FINGERPRINT_EDGE;
                size_t tail = len - head < ZR_FINGERPRINT_EDGE ? len - head : ZR_FINGERPRINT_EDGE;
                if ((r = pread_full(fd, b, head, locs[j].offset, err)) < 0 ||
                    (r = pread_full(fd, b + head, tail, (uint64_t)locs[j].offset + len - tail,
                                    err)) < 0)
                        return r;
                *h = fnv(*h, b, head + tail);
        }
        return 0;
}

int zr_dataset_fingerprint(zr_dataset *ds, uint64_t *ret, zr_error *err) {
        if (zr_dataset_remote(ds) && zr_rdataset_fingerprint(zr_dataset_remote(ds), ret))
                return 0;
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
        if (k) {
                /* a remote store's records are fetched first (at its open, on a
                 * worker: the value is kept, rdataset.h) */
                zr_rpin pin;
                int r = zr_rdataset_acquire(ds, idx, locs, k, &pin, err);
                if (r == 0)
                        r = hash_edges(store, locs, k, &h, err);
                zr_rdataset_release(&pin);
                if (r < 0)
                        return r;
        }
        *ret = h;
        return 0;
}

uint64_t zr_fingerprint_streams_begin(size_t n) {
        return fnv_u32(FNV_OFFSET, (uint32_t)n);
}

uint64_t zr_fingerprint_streams_add(uint64_t h, uint64_t fp) {
        return fnv_u64(h, fp);
}
