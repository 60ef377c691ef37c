/* mpwalk.h: a walk over the object headers of a schema.msgpack file (ours,
 * schema.c, and loaderx 1.5.7's, lxschema.c), without unpacking anything. */
#ifndef ZR_DATASET_MPWALK_H
#define ZR_DATASET_MPWALK_H

#include <stddef.h>
#include <stdint.h>

#include "util/error.h"

/* Skips the one msgpack object (containers with everything in them) that
 * starts at data[*at] of data[0..len), and moves *at past it. Iterative, O(bytes
 * walked): a container may not declare more elements than bytes remain, so the
 * count of objects still to read cannot overflow. 0, or -ZR_E_SCHEMA with a
 * message naming schema.msgpack and the byte (truncated, a byte that is no
 * msgpack type, a container declaring too many elements); *at is then
 * unspecified. err may be NULL. */
int zr_mp_skip(const uint8_t *data, size_t len, size_t *at, zr_error *err);

#endif
