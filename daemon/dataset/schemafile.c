/* schemafile.c: schema.msgpack replaced atomically (schemafile.h). */
#include "dataset/schemafile.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dataset/schema.h"
#include "store/newfile.h"
#include "store/resolve.h"

#define SCHEMA_TMP_FILE ZR_SCHEMA_FILE ".tmp"

static int write_all(int fd, const char *p, size_t len) {
        while (len > 0) {
                ssize_t w = write(fd, p, len);
                if (w < 0) {
                        if (errno == EINTR)
                                continue;
                        return -errno;
                }
                p += w;
                len -= (size_t)w;
        }
        return 0;
}

static int fsync_dir(int dirfd) {
        int fd = openat(dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC), r = 0;

        if (fd < 0)
                return -errno;
        if (fsync(fd) < 0)
                r = -errno;
        close(fd);
        return r;
}

int zr_schema_file_read(int dirfd, size_t max, void **ret_buf, size_t *ret_len, zr_error *err) {
        zr_error e = {0};
        int fd = zr_resolve_open(dirfd, ZR_SCHEMA_FILE, O_RDONLY, 0, &e), r = 0;
        struct stat st;
        uint8_t *buf = NULL;
        size_t len = 0, cap;

        if (fd == -ENOENT)
                return fd;
        if (fd < 0)
                return zr_error_set(err, -fd, "%s", e.message);
        if (fstat(fd, &st) < 0) {
                r = zr_error_errno(err, errno, "stat of " ZR_SCHEMA_FILE);
                goto out;
        }
        if (!S_ISREG(st.st_mode)) {
                r = zr_error_set(err, ZR_E_SCHEMA, ZR_SCHEMA_FILE " is not a regular file");
                goto out;
        }
        cap = (uint64_t)st.st_size < max ? (size_t)st.st_size : max;
        buf = malloc(cap ? cap : 1);
        if (!buf) {
                r = zr_error_errno(err, ENOMEM, "reading " ZR_SCHEMA_FILE);
                goto out;
        }
        while (len < cap) {
                ssize_t n = read(fd, buf + len, cap - len);
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
        *ret_buf = buf;
        *ret_len = len;
        buf = NULL;
out:
        free(buf);
        close(fd);
        return r;
}

int zr_schema_file_replace(int dirfd, const void *buf, size_t len, zr_error *err) {
        int fd = zr_newfile_create(dirfd, SCHEMA_TMP_FILE, O_WRONLY, err), r;

        if (fd < 0)
                return fd;
        r = write_all(fd, buf, len);
        if (r < 0) {
                r = zr_error_errno(err, -r, "writing " SCHEMA_TMP_FILE);
                goto fail;
        }
        if (fsync(fd) < 0) {
                r = zr_error_errno(err, errno, "fsync of " SCHEMA_TMP_FILE);
                goto fail;
        }
        if (renameat(dirfd, SCHEMA_TMP_FILE, dirfd, ZR_SCHEMA_FILE) < 0) {
                r = zr_error_errno(err, errno, "renaming " SCHEMA_TMP_FILE " to " ZR_SCHEMA_FILE);
                goto fail;
        }
        close(fd);
        r = fsync_dir(dirfd);
        if (r < 0)
                return zr_error_errno(err, -r, "fsync of the dataset directory");
        return 0;
fail:
        close(fd);
        unlinkat(dirfd, SCHEMA_TMP_FILE, 0);
        return r;
}
