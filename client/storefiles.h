/* storefiles.h: a store's own files read for a copy (`zrecord push`), and the
 * stores of a multi-stream set.
 *
 * It reads the store format itself (docs/FORMAT.md: a 32-byte header, 16-byte
 * table entries), only as far as a copy needs: the header, the table segments,
 * each chunk up to its used bytes (read-only mappings), the optional schema and
 * dictionary, and it computes the per-record checksums ({seg}.sum) the manifest
 * carries (docs/REMOTE.md, "A store in a bucket"). Errors are printed through
 * tool_fail_msg() (tool.h) and returned as an exit status.
 */
#ifndef ZRECORD_STOREFILES_H
#define ZRECORD_STOREFILES_H

#include <stddef.h>
#include <stdint.h>

#include "manifest.h"

#define TOOL_META_NAME "meta.zr"
#define TOOL_HEADER_BYTES 32
#define TOOL_LOC_BYTES 16
#define TOOL_SEG_LOG2 28 /* table entries per segment: 2^28 */

static inline uint32_t tool_le32(const uint8_t *p) {
        return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static inline uint64_t tool_le64(const uint8_t *p) {
        return (uint64_t)tool_le32(p) | (uint64_t)tool_le32(p + 4) << 32;
}

/* meta.zr's fields a copy needs. */
typedef struct tool_header {
        unsigned version, codec, chunk_log2, flags;
        uint32_t tail_chunk, tail_offset;
        uint64_t length;
} tool_header;

/* Parses a 32-byte header read from `where`: 0, or the failure printed. */
int tool_header_parse(const uint8_t *b, size_t n, tool_header *h, const char *where);

/* One object of a store: its bytes (a mapping or a buffer of ours). */
typedef struct tool_sfile {
        char name[S3_OBJECT_NAME_MAX];
        const uint8_t *data;
        uint64_t size;
        void *map;            /* munmap(map, map_len) */
        size_t map_len;
        void *own;            /* free() */
        uint64_t xxh3;        /* of the whole object */
        int in_manifest_xxh3; /* metadata: its xxh3 goes into the manifest */
} tool_sfile;

typedef struct tool_store_files {
        tool_sfile *o;
        size_t n, cap;
        tool_header h;
} tool_store_files;

/* The objects of the store in dirfd, in upload order: meta.zr, schema and
 * dictionary (when there), the table segments, the chunks up to their used
 * bytes, the checksums. 0, or the failure printed (f then holds what was read:
 * tool_store_files_free() it all the same). */
int tool_store_read(int dirfd, const char *where, tool_store_files *f);
void tool_store_files_free(tool_store_files *f);

/* The children of dirfd that hold a meta.zr, sorted (a set), into *ret:
 * 0 or a negative errno. */
int tool_list_streams(int dirfd, char ***ret, size_t *ret_n);
void tool_names_free(char **names, size_t n);

#endif
