/* schemafile.h: a dataset's schema.msgpack replaced on disk, whichever layout
 * wrote it (schema.c's encoding for zrecord's, lxschema.c's for loaderx
 * 1.5.7's): a temporary file made afresh, written, fsynced and renamed over
 * schema.msgpack, then the directory fsynced, so a reader sees the old file or
 * the new one, never a part. Takes a directory descriptor, never a path.
 */
#ifndef ZR_DATASET_SCHEMAFILE_H
#define ZR_DATASET_SCHEMAFILE_H

#include <stddef.h>

#include "util/error.h"

/* Replaces dirfd's schema.msgpack with buf[0..len), atomically and durably.
 * 0, or a negative code with err set (err may be NULL); the old file is then
 * untouched and the temporary file removed. */
int zr_schema_file_replace(int dirfd, const void *buf, size_t len, zr_error *err);

#endif
