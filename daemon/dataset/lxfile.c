/* lxfile.c: schema.msgpack of a loaderx 1.5.7 ragged store, read whole and
 * replaced atomically (lxfile.h). */
#include "dataset/lxfile.h"
#include "dataset/schemafile.h"

#include <errno.h>
#include <stdlib.h>

int zr_lxfile_read(int dirfd, zr_lxschema *ret, zr_error *err) {
        void *buf = NULL;
        size_t len = 0;
        int r = zr_schema_file_read(dirfd, ZR_LXSCHEMA_FILE_MAX + 1, &buf, &len, err);

        if (r == -ENOENT)
                return zr_error_set(err, ZR_E_SCHEMA, "no " ZR_SCHEMA_FILE " beside the store: a "
                                    "plain store, not a dataset");
        if (r == 0 && len > ZR_LXSCHEMA_FILE_MAX)
                r = zr_error_set(err, ZR_E_SCHEMA, ZR_SCHEMA_FILE " is larger than 1 GiB");
        if (r == 0)
                r = zr_lxschema_decode(buf, len, ret, err);
        free(buf);
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
