/* mkdirs.c: mkdir -p (mkdirs.h). Each level is made in turn from the root
 * down; one that exists (EEXIST) is passed over, so two threads or processes
 * making the same path at once both succeed.
 */
#include "util/mkdirs.h"

#include <errno.h>
#include <string.h>
#include <sys/stat.h>

int zr_mkdirs(const char *path, mode_t mode) {
        char buf[4096];
        size_t len = strlen(path);

        if (len == 0)
                return -EINVAL;
        if (len >= sizeof(buf))
                return -ENAMETOOLONG;
        memcpy(buf, path, len + 1);
        for (char *p = buf + 1; *p; p++) {
                if (*p != '/')
                        continue;
                *p = 0;
                if (mkdir(buf, mode) < 0 && errno != EEXIST)
                        return -errno;
                *p = '/';
        }
        if (mkdir(buf, mode) < 0 && errno != EEXIST)
                return -errno;
        return 0;
}
