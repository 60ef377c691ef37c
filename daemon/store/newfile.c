/* newfile.c: new store files, created fresh (newfile.h). */
#include "store/newfile.h"

#include <errno.h>
#include <fcntl.h>
#include <unistd.h>

#include "store/resolve.h"

int zr_newfile_create(int dirfd, const char *name, int flags, zr_error *err) {
        if (unlinkat(dirfd, name, 0) < 0 && errno != ENOENT)
                return zr_error_errno(err, errno, "%s: removing the entry in the way", name);
        return zr_resolve_open(dirfd, name, flags | O_CREAT | O_EXCL, 0644, err);
}
