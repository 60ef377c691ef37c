/* convert.h: moving a ragged dataset between zrecord's layout and loaderx 1.5.7's.
 *
 * zrecord's ragged records carry their shape in a header (ragged.h, dataset.h);
 * loaderx 1.5.7's are the bare payload with every shape in schema.msgpack
 * (lxschema.h, lxragged.h), or, in a store without schema.msgpack, bytes whose
 * shape is their length. zr_convert() reads an open ragged dataset of any layout
 * and writes a new one in dst_dirfd, which must hold no store: the same records
 * in the same order, the same dtype, codec and dictionary. The source is never
 * changed, so an interrupted or failed conversion costs only the destination: to
 * loaderx's layout it is then a store without a schema (not a dataset), to
 * zrecord's a dataset holding a prefix of the records. Either way, remove it and
 * convert again; the destination is complete (and durable) when the call returns
 * 0. docs/FORMAT.md, "Compatibility with loaderx 1.5.7", says when to use which;
 * the daemon serves it as CONVERT (proto/PROTOCOL.md), `zrecord convert` on it.
 *
 * Records go through in batches of at most ZR_CONVERT_BATCH_BYTES; a loaderx
 * schema is written once, at the end (one rewrite, not one per batch). `opts` (may
 * be NULL) is the destination's. Errors: negative codes with *err filled.
 */
#ifndef ZR_DATASET_CONVERT_H
#define ZR_DATASET_CONVERT_H

#include <stdatomic.h>
#include <stdint.h>

#include "dataset/dataset.h"
#include "store/store.h"
#include "util/error.h"

#define ZR_CONVERT_BATCH_BYTES ((uint64_t)64 << 20)
/* Records of a batch at most. */
#define ZR_CONVERT_BATCH_RECORDS 65536
/* The most heap a conversion holds at once (its working memory, charged by
 * the daemon before it starts): the batch's bytes twice (read and rewritten,
 * with a shape header per record), its per-record arrays, the gather's tables.
 * A record larger than ZR_CONVERT_BATCH_BYTES alone is refused (ZR_E_LIMIT). */
#define ZR_CONVERT_WORK_BYTES                                                           \
        (2 * (ZR_CONVERT_BATCH_BYTES + (uint64_t)8 * (1 + ZR_SCHEMA_NDIM_MAX) *         \
                                               ZR_CONVERT_BATCH_RECORDS) +              \
         (uint64_t)ZR_CONVERT_BATCH_RECORDS * (28 + 8 * (1 + ZR_SCHEMA_NDIM_MAX) + 128))

/* Converts src (ragged, in another layout than `to`; the caller holds its lock
 * shared) into a new dataset in dst_dirfd of layout `to`: ZR_LAYOUT_ZRECORD (of
 * the records' ndim when they all have one, else ZR_SCHEMA_NDIM_ANY, each record
 * keeping its own) or ZR_LAYOUT_LX157 (loaderx 1.5.7's ragged store, which it
 * opens). ZR_E_SCHEMA for a dense source, one already in `to`'s layout, another
 * `to`, or (to loaderx's) an empty record, which loaderx stores none of; the
 * errors of gathering, creating and appending (ZR_E_EXISTS: dst holds a store).
 * Sets *ret_count (may be NULL) to the records converted and *ret_schema (may be
 * NULL) to the destination's schema as zr_dataset_open() will serve it.
 * `cancel` (may be NULL) is looked at before each batch: once it is set the
 * conversion stops with ECANCELED, leaving the destination as a failure does. */
int zr_convert(zr_dataset *src, int dst_dirfd, enum zr_layout to, const zr_store_options *opts,
               const _Atomic int *cancel, uint64_t *ret_count, zr_schema *ret_schema,
               zr_error *err);

#endif
