/* newfile.h: the files a store creates.
 *
 * Every file a store creates (meta.zr, N.chunk, N.loc, dict.zr, delete.zr,
 * schema.msgpack and their temporary names) is new: whatever entry has its
 * name is removed first (a file left by an interrupted operation, or one that
 * a user who may write the directory planted there), and the file is created
 * with O_CREAT | O_EXCL through zr_resolve_open(). A planted file is never
 * opened as the store's own: the daemon never writes into a file somebody
 * else made, and never maps one (chunks.h).
 */
#ifndef ZR_STORE_NEWFILE_H
#define ZR_STORE_NEWFILE_H

#include "util/error.h"

/* Creates `name` anew in dirfd: removes an entry of that name (ENOENT is
 * fine; a directory, or an entry the daemon may not remove, is an error),
 * then opens it O_CREAT | O_EXCL with `flags` (O_RDWR or O_WRONLY, ...)
 * through zr_resolve_open(). Returns the descriptor (the caller's; O_CLOEXEC)
 * or a negative code with *err (may be NULL) naming `name` (-EEXIST if
 * another process made one in between). */
int zr_newfile_create(int dirfd, const char *name, int flags, zr_error *err);

#endif
