/* convert.h: moving a ragged dataset between zrecord's layout and loaderx 1.5.7's.
 *
 * zrecord's ragged records carry their shape in a header (ragged.h, dataset.h);
 * loaderx 1.5.7's are the bare payload with every shape in schema.msgpack
 * (lxschema.h, lxragged.h). Each function reads the source dataset (opened
 * read-only) and writes a new one, in dst_dirfd, which must hold no store: same
 * records in the same order, same dtype, same codec and dictionary. The source is
 * never changed, so an interrupted or failed conversion costs only the
 * destination: to loaderx's layout it is then a store without a schema (not a
 * dataset), to zrecord's a dataset holding a prefix of the records. Either way,
 * remove it and convert again; the destination is complete when the call returns 0.
 * docs/FORMAT.md, "Compatibility with loaderx 1.5.7", says when to use which, and
 * the `zrecord convert` command planned on them.
 *
 * Records go through in batches of at most ZR_CONVERT_BATCH_BYTES; a loaderx
 * schema is written once, at the end. `opts` (may be NULL) is the destination's
 * (its pool serves the source too). Errors: negative codes with *err filled.
 */
#ifndef ZR_DATASET_CONVERT_H
#define ZR_DATASET_CONVERT_H

#include <stdint.h>

#include "store/store.h"
#include "util/error.h"

#define ZR_CONVERT_BATCH_BYTES ((uint64_t)64 << 20)

/* zrecord ragged (src) to loaderx 1.5.7 ragged (dst). ZR_E_SCHEMA if src is not a
 * zrecord ragged dataset or holds an empty record (loaderx stores none); the
 * errors of opening, gathering, creating and appending. Sets *ret_count (may be
 * NULL) to the records converted. */
int zr_convert_to_lx157(int src_dirfd, int dst_dirfd, const zr_store_options *opts,
                        uint64_t *ret_count, zr_error *err);

/* loaderx 1.5.7 ragged (src) to zrecord ragged (dst): of the records' ndim when
 * they all have one, else of ZR_SCHEMA_NDIM_ANY (each record keeps its own).
 * ZR_E_SCHEMA if src is not one. */
int zr_convert_from_lx157(int src_dirfd, int dst_dirfd, const zr_store_options *opts,
                          uint64_t *ret_count, zr_error *err);

#endif
