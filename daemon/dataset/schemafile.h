/* schemafile.h: a dataset's schema.msgpack read and replaced on disk,
 * whichever layout wrote it (schema.c's encoding for zrecord's, lxschema.c's
 * for loaderx 1.5.7's). It is read as the directory's own file
 * (store/resolve.h), and replaced through a temporary file made afresh,
 * written, fsynced and renamed over it, then the directory fsynced, so a
 * reader sees the old file or the new one, never a part. Takes a directory
 * descriptor, never a path.
 */
#ifndef ZR_DATASET_SCHEMAFILE_H
#define ZR_DATASET_SCHEMAFILE_H

#include <stddef.h>

#include "util/error.h"

/* Reads dirfd's schema.msgpack: at most `max` bytes of it (a larger file gives
 * max bytes: pass one more than the decoder takes to see it as one) into
 * *ret_buf (malloc()ed, free() it) and their count into *ret_len. 0; -ENOENT,
 * err untouched, when there is none; -ZR_E_SCHEMA when it is not a regular
 * file; another negative code with err set. */
int zr_schema_file_read(int dirfd, size_t max, void **ret_buf, size_t *ret_len, zr_error *err);

/* Replaces dirfd's schema.msgpack with buf[0..len), atomically and durably.
 * 0, or a negative code with err set (err may be NULL); the old file is then
 * untouched and the temporary file removed. */
int zr_schema_file_replace(int dirfd, const void *buf, size_t len, zr_error *err);

#endif
