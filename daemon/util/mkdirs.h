/* mkdirs.h: a directory made with every missing directory above it (mkdir -p),
 * for the daemon's own directories under its cache root: the disk cache of
 * remote stores and the packed loaders' indexes.
 */
#ifndef ZR_UTIL_MKDIRS_H
#define ZR_UTIL_MKDIRS_H

#include <sys/types.h>

/* Makes `path` and each missing directory above it with `mode` (as umask
 * leaves it); directories that exist are left as they are, whoever owns them:
 * the caller opens and checks the last one. Returns 0 (made, or there), or
 * -errno: -EINVAL for an empty path, -ENAMETOOLONG for one of 4096 bytes or
 * more, -ENOTDIR where a part is a file. */
int zr_mkdirs(const char *path, mode_t mode);

#endif
