/* lxfile.h: reading and writing a loaderx 1.5.7 ragged schema.msgpack.
 *
 * The file holds a list per record, so it is read whole, at whatever size it has
 * up to ZR_LXSCHEMA_FILE_MAX, and written atomically (schemafile.h: a temporary
 * file, fsync, rename over schema.msgpack, fsync of the directory). loaderx 1.5.7 itself
 * truncates and rewrites the file in place; a reader here therefore never sees a
 * half-written file of its own making. Both take a directory descriptor, never a
 * path.
 *
 * Errors: negative codes (-errno or -ZR_E_*) with *err filled (err may be NULL).
 */
#ifndef ZR_DATASET_LXFILE_H
#define ZR_DATASET_LXFILE_H

#include "dataset/lxschema.h"
#include "util/error.h"

/* 1 GiB: some 100 million short shapes. Bounds what a damaged size can cost. */
#define ZR_LXSCHEMA_FILE_MAX ((uint64_t)1 << 30)

/* Reads and decodes dirfd's schema.msgpack into *ret (zr_lxschema_done() it).
 * Returns 0; ZR_E_SCHEMA when there is none, it is larger than
 * ZR_LXSCHEMA_FILE_MAX, or it does not decode (lxschema.h); -errno on I/O. */
int zr_lxfile_read(int dirfd, zr_lxschema *ret, zr_error *err);

/* Encodes *s and replaces dirfd's schema.msgpack with it, atomically and durably.
 * Returns 0 or -errno (the old file is then untouched). */
int zr_lxfile_write(int dirfd, const zr_lxschema *s, zr_error *err);

#endif
