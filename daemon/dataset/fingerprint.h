/* fingerprint.h: a dataset's fingerprint, 64 bits that tell one state of a store
 * from another without reading its records: two daemons (two nodes of a
 * training job) that serve different bytes under one name give different
 * fingerprints, and a loader that expects one refuses the other
 * (LOADER_OPEN's `fingerprint`, proto/PROTOCOL.md section 10).
 *
 * It is FNV-1a 64 over, little-endian: the length (u64); the codec and whether
 * a dictionary is installed (u8 each); the schema: kind (u8), dtype string (8
 * bytes, NUL-padded), ndim (u32), a dense schema's item_shape (u64 each); the
 * table entries of min(length, ZR_FINGERPRINT_SAMPLES) records spread evenly
 * from the first to the last: index (u64), offset, phys_length, logic_length,
 * chunk_id (u32 each); then, record by record, the first and the last
 * ZR_FINGERPRINT_EDGE stored bytes of each (all of a shorter one). A zstd
 * record ends with the checksum of its whole content, so its last bytes stand
 * for all of it; a raw record is sampled at its two ends. The cost does not
 * depend on the store's size: ZR_FINGERPRINT_SAMPLES table lookups and two
 * small reads per sampled record (blocking: the caller takes them where a
 * read may wait).
 */
#ifndef ZR_DATASET_FINGERPRINT_H
#define ZR_DATASET_FINGERPRINT_H

#include <stddef.h>
#include <stdint.h>

#include "dataset/dataset.h"
#include "util/error.h"

#define ZR_FINGERPRINT_SAMPLES 64
#define ZR_FINGERPRINT_EDGE 32

/* The fingerprint of ds as it is now. The caller holds ds's lock (shared).
 * Returns 0, or the error of a table lookup (ZR_E_CORRUPT). */
int zr_dataset_fingerprint(zr_dataset *ds, uint64_t *ret, zr_error *err);

/* The fingerprint of a loader's streams (of every source, in order): FNV-1a 64
 * over their number (u32) and each stream's fingerprint (u64), in order:
 * h = zr_fingerprint_streams_begin(n), then h = zr_fingerprint_streams_add(h, fp)
 * for each stream. */
uint64_t zr_fingerprint_streams_begin(size_t n);
uint64_t zr_fingerprint_streams_add(uint64_t h, uint64_t fp);

#endif
