/* resolve.h: opening an entry of a store's directory, and nothing else.
 *
 * The daemon works relative to directory descriptors its clients pass. A name
 * looked up through such a descriptor is resolved in the mount namespace the
 * descriptor came from: a client in an unprivileged user namespace (`unshare
 * -Urm`) can bind-mount a file of its own over `0.chunk` of a store it may only
 * read, or mount a read-only view of it, and pass the directory. A symbolic
 * link in the directory can point anywhere. A file reached either way is not
 * the store's, and a shared store opened through it would serve, or take
 * appends into, the client's file.
 *
 * zr_resolve_open() opens an entry so that the file it returns is the entry of
 * the directory itself, on the directory's own mount:
 *
 *   - with openat2(RESOLVE_BENEATH | RESOLVE_NO_XDEV | RESOLVE_NO_SYMLINKS |
 *     RESOLVE_NO_MAGICLINKS) (Linux 5.6), a raw system call (glibc has no
 *     wrapper);
 *   - where the kernel lacks it (ENOSYS) or a seccomp filter refuses it (EPERM,
 *     as systemd's SystemCallFilter= does when its list predates openat2), with
 *     openat(O_NOFOLLOW) and then a check that the file is on the directory's
 *     mount: the mount ids of statx(STATX_MNT_ID) (Linux 5.8), else of
 *     /proc/self/fdinfo (3.15), else the devices (st_dev: a bind mount of a
 *     file of the same file system would then go unseen).
 *
 * Which of the two is used is found once per process (a probe of "." with
 * openat2) and again whenever openat2 fails with ENOSYS, or with an EPERM the
 * probe confirms (a filter installed later), so a genuine EPERM of a file (an
 * immutable one opened for writing) stays an error.
 *
 * Names are single entries: no '/', not empty, "." or "..". What the daemon
 * opens in a store is a fixed name (meta.zr, N.chunk, ...) or a stream's
 * directory in a set's root, both one entry.
 */
#ifndef ZR_STORE_RESOLVE_H
#define ZR_STORE_RESOLVE_H

#include <sys/stat.h>
#include <sys/types.h>

#include "util/error.h"

/* Opens `name`, an entry of the directory dirfd, with `flags` (open(2) flags;
 * O_CLOEXEC is added, symbolic links are never followed) and, with O_CREAT,
 * `mode`. O_CREAT needs O_EXCL: a file the store creates is always a new one
 * (zr_newfile_create() removes a stale entry first). O_PATH and O_DIRECTORY
 * work as for openat(). Returns the descriptor (owned by the caller), or a
 * negative code with *err (may be NULL) naming `name`:
 *   -ENOENT  no such entry;
 *   -ELOOP   the entry is a symbolic link;
 *   -EXDEV   something is mounted over the entry (or it is a mount point of
 *            another file system): not the directory's own file;
 *   -EINVAL  `name` is not a single entry, or O_CREAT without O_EXCL;
 *   -ZR_E_CORRUPT  not a regular file (a FIFO, a socket, a device): without
 *            O_PATH or O_DIRECTORY the entry is opened O_NONBLOCK | O_NOCTTY,
 *            so that the open never blocks (a FIFO's would wait for a
 *            writer), checked to be a regular file before anything reads it,
 *            and O_NONBLOCK is cleared again (unless `flags` holds it);
 *   -EEXIST, -EACCES, -EROFS, ... as open(2).
 * Example: fd = zr_resolve_open(dirfd, "meta.zr", O_RDONLY, 0, err). */
int zr_resolve_open(int dirfd, const char *name, int flags, mode_t mode, zr_error *err);

/* fstat() of `name` resolved as zr_resolve_open() does (opened O_PATH | flags,
 * O_DIRECTORY say, and closed again) into *ret. 0, or its negative codes. */
int zr_resolve_stat(int dirfd, const char *name, int flags, struct stat *ret, zr_error *err);

/* 1 if this process resolves with openat2, 0 if with the fallback (probing
 * once if not known yet). For tests and the daemon's start-up log. */
int zr_resolve_openat2(void);

#endif
