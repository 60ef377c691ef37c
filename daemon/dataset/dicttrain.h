/* dicttrain.h: training zstd dictionaries for zstd_dict datasets, by tier.
 *
 * A dictionary is trained (ZDICT_trainFromBuffer) on a strided, byte-budgeted
 * sample of the records: whole records spread evenly over the set, a record
 * longer than ZR_DICT_SAMPLE_CAP contributing its middle slice, until the tier's
 * sample budget is reached. So a tier costs about the same training time whatever
 * the record size or the number of records. The tiers trade a dictionary's cache
 * footprint on every gather against ratio; their sizes were chosen by measurement
 * (bench/dict-tiers.c, docs/DATASETS.md):
 *
 *     tier       dictionary   sample budget
 *     small      16 KiB        2 MiB
 *     balanced   128 KiB      16 MiB
 *     max        256 KiB      32 MiB
 *
 * Train on settled data: a dictionary is a snapshot of what the data looks like.
 */
#ifndef ZR_DATASET_DICTTRAIN_H
#define ZR_DATASET_DICTTRAIN_H

#include <stddef.h>
#include <stdint.h>

#include "dataset/dataset.h"
#include "util/error.h"

enum zr_dict_tier {
        ZR_DICT_TIER_SMALL = 0,
        ZR_DICT_TIER_BALANCED = 1,
        ZR_DICT_TIER_MAX = 2,
        ZR_DICT_TIER_COUNT,
};

typedef struct zr_dict_tier_spec {
        const char *name;    /* "small", "balanced", "max" */
        size_t dict_bytes;   /* dictionary capacity */
        size_t sample_bytes; /* bytes of records the dictionary trains on */
} zr_dict_tier_spec;

/* The slice a single record contributes at most. zstd works in 128 KiB blocks, and
 * a dictionary matters most near a frame's start; a cap also keeps a few huge
 * records from using the whole budget, so the sample spans more records. */
#define ZR_DICT_SAMPLE_CAP ((size_t)128 * 1024)

/* The spec of `tier`, or NULL if there is none. Static storage. */
const zr_dict_tier_spec *zr_dict_tier_get(enum zr_dict_tier tier);

/* Parses a tier name ("small", "balanced", "max"). Returns 0 and sets *ret, or
 * -EINVAL with the known names in the message. */
int zr_dict_tier_parse(const char *name, enum zr_dict_tier *ret, zr_error *err);

/* Trains a dictionary on records packed in memory: record i is lens[i] bytes at
 * data + sum(lens[0..i)). `spec` is a tier's (or a custom) size. On success
 * returns 0 and sets *ret to a malloc()ed dictionary of *ret_len bytes, owned by
 * the caller. EINVAL (with zstd's reason) when the records are too few or too
 * small to train on (zstd wants at least a few kilobytes in several records),
 * ENOMEM. */
int zr_dict_train(const void *data, const uint64_t *lens, size_t n,
                  const zr_dict_tier_spec *spec, void **ret, size_t *ret_len, zr_error *err);

/* As zr_dict_train() for n records of `record_bytes` each (a dense array). */
int zr_dict_train_dense(const void *data, uint64_t record_bytes, size_t n,
                        const zr_dict_tier_spec *spec, void **ret, size_t *ret_len,
                        zr_error *err);

/* As zr_dict_train() on the records of an open dataset (any codec: they are
 * gathered, so decoded). Reads only the sampled records. Take the dataset's
 * lock shared around it. */
int zr_dict_train_dataset(zr_dataset *ds, const zr_dict_tier_spec *spec, void **ret,
                          size_t *ret_len, zr_error *err);

#endif
