/* manifest.h: what a store in a bucket is (docs/REMOTE.md, "A store in a bucket").
 *
 * `zrecord.manifest`, written last by a push, is a msgpack map:
 *   format   "zrecord-remote"
 *   version  1
 *   id       32 hex digits, new at every push
 *   length   records
 *   codec    0 raw, 1 zstd, 2 zstd_dict
 *   checksum "xxh3-64"
 *   objects  [{name, size, xxh3?}]: every object of the store but the manifest;
 *            xxh3 (of the whole object) for all but the chunks, whose records
 *            are checked one by one against the {id}.sum objects
 * `zrecord.set`, at a multi-stream set's root: {format "zrecord-remote-set",
 * version 1, streams [names]}.
 *
 * Decoding trusts nothing: sizes bounded, names from the store's own set
 * (meta.zr, schema.msgpack, dict.zr, N.loc, N.sum, N.chunk), each once.
 */
#ifndef ZR_S3_MANIFEST_H
#define ZR_S3_MANIFEST_H

#include <stddef.h>
#include <stdint.h>

#include "s3.h"

#define S3_MANIFEST_NAME "zrecord.manifest"
#define S3_SET_NAME "zrecord.set"
#define S3_MANIFEST_FORMAT "zrecord-remote"
#define S3_SET_FORMAT "zrecord-remote-set"
#define S3_MANIFEST_VERSION 1
#define S3_MANIFEST_MAX ((size_t)64 << 20) /* bytes a manifest may have */
#define S3_OBJECTS_MAX (3u * 4096 + 8)     /* objects of a store: .loc, .sum and .chunk
                                            * for 4096 chunks, and the rest */
#define S3_OBJECT_NAME_MAX 32
#define S3_STREAMS_MAX 32                  /* as proto's ZR_STREAMS_MAX */
#define S3_STREAM_NAME_MAX 255

typedef struct s3_object {
        char name[S3_OBJECT_NAME_MAX];
        uint64_t size;
        uint64_t xxh3;
        int has_xxh3;
} s3_object;

typedef struct s3_manifest {
        char id[33];
        uint64_t length;
        unsigned codec;
        size_t nobjects;
        s3_object *objects; /* malloc()ed */
} s3_manifest;

/* XXH3-64 of data[0..n): the checksum of records and metadata objects. */
uint64_t s3_checksum(const void *data, size_t n);

/* 1 if `name` is a name a store's object may have (above), else 0. */
int s3_object_name_ok(const char *name);

/* Encodes m into a new malloc()ed buffer. Returns 0 or -ENOMEM. */
int s3_manifest_encode(const s3_manifest *m, void **ret, size_t *ret_len);

/* Decodes buf[0..len) into *ret (objects malloc()ed: s3_manifest_fini()).
 * Returns 0, or a negative code with *err: ZR_E_CORRUPT for anything that is
 * not a manifest of this version (named), ZR_E_BAD_VERSION for another version. */
int s3_manifest_decode(const void *buf, size_t len, s3_manifest *ret, s3_error *err);

void s3_manifest_fini(s3_manifest *m);

/* The object of m named `name`, or NULL. */
const s3_object *s3_manifest_find(const s3_manifest *m, const char *name);

/* A new manifest id: 32 hex digits from getrandom(). Returns 0 or -errno. */
int s3_manifest_new_id(char id[33]);

/* The set manifest of streams names[0..n). */
int s3_set_encode(char *const *names, size_t n, void **ret, size_t *ret_len);
/* Decodes a set manifest: *ret_names (malloc()ed array of malloc()ed names,
 * free both) and *ret_n. ZR_E_CORRUPT, ZR_E_BAD_VERSION as above. */
int s3_set_decode(const void *buf, size_t len, char ***ret_names, size_t *ret_n,
                  s3_error *err);

#endif
