/* chunks.h: a table of numbered store files ({id}.chunk or {id}.loc).
 *
 * Every file of a table has the same fixed size (the chunk capacity, or 4 GiB
 * for a .loc segment) while its store is writable: it is created sparse with
 * ftruncate, and extended to it (zr_files_resize()) when a store that was
 * closed with its files cut to their data turns writable. Readers look up a
 * descriptor lock-free with zr_files_fd(); opening, creating and removing files
 * is serialized by the caller (the store's append mutex or exclusive access).
 */
#ifndef ZR_STORE_CHUNKS_H
#define ZR_STORE_CHUNKS_H

#include <stdint.h>

#include "util/error.h"

typedef struct zr_files zr_files;

/* Flags of zr_files_new(). */
#define ZR_FILES_MAP 1    /* map each file read-only, up to its size at open,
                           * if it is the daemon's own (owned by its effective
                           * uid) and neither its group nor others may write it
                           * (no S_IWGRP, S_IWOTH; an ACL's named entries show
                           * in the group bits): a file somebody else may
                           * truncate is read with pread (a short read is an
                           * error, not a SIGBUS). A mapped read is guarded all
                           * the same (util/mapguard.h) */
#define ZR_FILES_RANDOM 2 /* read at random: POSIX_FADV_RANDOM on each descriptor
                           * and MADV_RANDOM on each mapping, so a read or a
                           * fault brings in only the pages it asks for (no
                           * read-around); sequential passes hint their ranges
                           * (io/hint.h) */

/* A table of files "{id}{suffix}" in dirfd (borrowed; must outlive the table),
 * each `file_size` bytes, opened with `flags` (ZR_FILES_*; the advice is best
 * effort). Returns 0 and *ret, or -ENOMEM. */
int zr_files_new(int dirfd, const char *suffix, uint64_t file_size, int read_only, int flags,
                 zr_files **ret);

/* Closes every file and frees the table. NULL allowed; returns NULL. */
zr_files *zr_files_free(zr_files *t);

/* The descriptor of file `id`, or -1 if it is not open. Lock-free. */
int zr_files_fd(const zr_files *t, uint32_t id);

/* The read-only mapping of file `id` and its length in *ret_len, or NULL (not
 * open, not mapped: read with pread). Bytes [0, *ret_len) are inside the file.
 * Valid until the file is removed or the table freed. Lock-free. */
const uint8_t *zr_files_map(const zr_files *t, uint32_t id, uint64_t *ret_len);

/* The size of file `id` when it was opened (or resized since, or grown by the
 * store's own writes: zr_files_grown()), or 0 if it is not open: no record of
 * the store lies past it. Lock-free. */
uint64_t zr_files_size(const zr_files *t, uint32_t id);

/* Opens file `id`. With `create` (a file past the store's frontier, which
 * holds nothing of the store's), the file is created anew and sparse
 * (zr_newfile_create(): whatever had its name is removed first) and
 * *ret_created set to 1 (else 0; ret_created may be NULL). Without, a missing
 * file is ZR_E_CORRUPT, as is one shorter than `min_size` bytes. Opening an
 * open file is a no-op. Returns 0 or a negative code with the file named in
 * *err. */
int zr_files_open(zr_files *t, uint32_t id, int create, uint64_t min_size,
                  int *ret_created, zr_error *err);

/* Sets open file `id` to `size` bytes (ftruncate): a file shorter than the
 * table's file size extended to it when its store turns writable, its unused
 * end cut off when it closes (docs/FORMAT.md, "Apparent size"). A file that
 * grows has its new size made durable (fdatasync) before it returns. Its
 * mapping is made again for the new size. 0 at once when the size is already
 * `size`; EBADF for a file not open or a read-only table; -errno of ftruncate,
 * fdatasync. Exclusive. */
int zr_files_resize(zr_files *t, uint32_t id, uint64_t size, zr_error *err);

/* File `id` was written up to `end` by its store, past the size it had (a
 * compaction moving records into a chunk shorter than the capacity): its size
 * (zr_files_size()) becomes `end`. Its mapping stays as it was (reads past it
 * pread). Exclusive. */
void zr_files_grown(zr_files *t, uint32_t id, uint64_t end);

/* Number of ids below the first that was never opened (ids 0..n-1 are open). */
uint32_t zr_files_count(const zr_files *t);

/* Making a read-only table writable through another descriptor of its
 * directory (zr_store_make_writable()), in two steps so that several tables
 * change together or not at all. _prepare() opens every open file again
 * O_RDWR through dirfd and checks it is the same file (st_dev, st_ino; EACCES
 * if not): 0 and *ret_fds (malloc()ed, one per id below the table's capacity,
 * -1 where none is open), or a negative code with nothing kept. _commit()
 * replaces the descriptors with them (the mappings stay) and the table's
 * directory with dirfd (borrowed), and makes it writable; _abort() closes
 * them. Both free ret_fds. Exclusive. */
int zr_files_reopen_prepare(zr_files *t, int dirfd, int **ret_fds, zr_error *err);
void zr_files_reopen_commit(zr_files *t, int dirfd, int *fds);
void zr_files_reopen_abort(zr_files *t, int *fds);

/* fdatasync()s every open file. Returns 0 or the first error (-errno). */
int zr_files_sync(zr_files *t, zr_error *err);

/* Closes and unlinks every file with id >= first, and any such file left on
 * disk after the last one open. Returns 0 or -errno. Exclusive. */
int zr_files_remove_from(zr_files *t, uint32_t first, zr_error *err);

/* Positional I/O of exactly n bytes, retried on EINTR and short transfers.
 * zr_pread_all() returns the bytes read (less than n only at end of file) or
 * -errno; zr_pwrite_all() returns 0 or -errno. */
int64_t zr_pread_all(int fd, void *buf, uint64_t n, uint64_t off);
int zr_pwrite_all(int fd, const void *buf, uint64_t n, uint64_t off);

#endif
