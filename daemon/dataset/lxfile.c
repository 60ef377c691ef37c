/* lxfile.c: schema.msgpack of a loaderx 1.5.7 ragged store, read whole and
 * replaced atomically (lxfile.h). */
#include "dataset/lxfile.h"
#include "dataset/schemafile.h"
#include "store/resolve.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

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

int zr_lxfile_write(int dirfd, const zr_lxschema *s, zr_error *err) {
        void *buf = NULL;
        size_t len = 0;
        int r = zr_lxschema_encode(s, &buf, &len, err);

        if (r == 0)
                r = zr_schema_file_replace(dirfd, buf, len, err);
        free(buf);
        return r;
}
