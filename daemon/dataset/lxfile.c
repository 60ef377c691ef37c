/* lxfile.c: schema.msgpack of a loaderx 1.5.7 ragged store, read whole and
 * replaced atomically (lxfile.h). */
#include "dataset/lxfile.h"
#include "store/newfile.h"
#include "store/resolve.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#define LXFILE_TMP ZR_SCHEMA_FILE ".tmp"

int zr_lxfile_read(int dirfd, zr_lxschema *ret, zr_error *err) {
        struct stat st;
        uint8_t *buf = NULL;
        size_t len = 0;
        int fd, r;

        zr_error e = {0};
        fd = zr_resolve_open(dirfd, ZR_SCHEMA_FILE, O_RDONLY, 0, &e);
        if (fd < 0) {
                if (fd == -ENOENT)
                        return zr_error_set(err, ZR_E_SCHEMA, "no " ZR_SCHEMA_FILE " beside the "
                                            "store: a plain store, not a dataset");
                return zr_error_set(err, -fd, "%s", e.message);
        }
        if (fstat(fd, &st) < 0) {
                r = zr_error_errno(err, errno, "stat of " ZR_SCHEMA_FILE);
                goto out;
        }
        if (!S_ISREG(st.st_mode) || (uint64_t)st.st_size > ZR_LXSCHEMA_FILE_MAX) {
                r = zr_error_set(err, ZR_E_SCHEMA, ZR_SCHEMA_FILE " is not a regular file of at "
                                 "most 1 GiB");
                goto out;
        }
        buf = malloc(st.st_size ? (size_t)st.st_size : 1);
        if (!buf) {
                r = zr_error_errno(err, ENOMEM, "reading " ZR_SCHEMA_FILE);
                goto out;
        }
        while (len < (size_t)st.st_size) {
                ssize_t n = read(fd, buf + len, (size_t)st.st_size - len);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0) {
                        r = zr_error_errno(err, errno, "reading " ZR_SCHEMA_FILE);
                        goto out;
                }
                if (n == 0)
                        break; /* shrank under us: decode what there is (and likely refuse) */
                len += (size_t)n;
        }
        r = zr_lxschema_decode(buf, len, ret, err);
out:
        free(buf);
        close(fd);
        return r;
}

static int write_all(int fd, const uint8_t *p, size_t len) {
        while (len > 0) {
                ssize_t w = write(fd, p, len);
                if (w < 0 && errno == EINTR)
                        continue;
                if (w < 0)
                        return -errno;
                p += w;
                len -= (size_t)w;
        }
        return 0;
}

int zr_lxfile_write(int dirfd, const zr_lxschema *s, zr_error *err) {
        void *buf = NULL;
        size_t len = 0;
        int fd = -1, r;

        r = zr_lxschema_encode(s, &buf, &len, err);
        if (r < 0)
                return r;
        fd = zr_newfile_create(dirfd, LXFILE_TMP, O_WRONLY, err);
        if (fd < 0) {
                r = fd;
                goto out;
        }
        r = write_all(fd, buf, len);
        if (r < 0) {
                r = zr_error_errno(err, -r, "writing " LXFILE_TMP);
                goto fail;
        }
        if (fsync(fd) < 0) {
                r = zr_error_errno(err, errno, "fsync of " LXFILE_TMP);
                goto fail;
        }
        if (renameat(dirfd, LXFILE_TMP, dirfd, ZR_SCHEMA_FILE) < 0) {
                r = zr_error_errno(err, errno, "renaming " LXFILE_TMP " to " ZR_SCHEMA_FILE);
                goto fail;
        }
        {
                int dfd = openat(dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
                if (dfd < 0 || fsync(dfd) < 0)
                        r = zr_error_errno(err, errno, "fsync of the dataset directory");
                if (dfd >= 0)
                        close(dfd);
        }
        goto out;
fail:
        unlinkat(dirfd, LXFILE_TMP, 0);
out:
        if (fd >= 0)
                close(fd);
        free(buf);
        return r;
}
