/* dict.c: zstd dictionaries: training (over a store or over samples the
 * caller passes) and installing (feature "dict").
 *
 * Samples and dictionaries travel in sealed memfds; the trained dictionary
 * comes back in a memfd of the daemon's, copied out into memory the caller
 * owns.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "zrc-private.h"

/* ---- dictionaries ------------------------------------------------------ */

/* Copies the dictionary out of a TRAIN_DICT reply's memfd. */
static int dict_take(zrc_conn *c, conn_reply *reply, void **ret_dict, size_t *ret_size) {
        uint64_t size = conn_get_u64(reply->root, "dict_bytes");
        uint8_t *buf;
        uint64_t done = 0;

        if (size == 0 || size > SIZE_MAX)
                return conn_fail(c, ZR_E_PROTO, "dictionary of %" PRIu64 " bytes", size);
        buf = malloc(size);
        if (!buf)
                return conn_fail(c, ENOMEM, "out of memory for a dictionary");
        while (done < size) {
                ssize_t n = pread(reply->fd, buf + done, size - done, (off_t)done);

                if (n < 0 && errno == EINTR)
                        continue;
                if (n <= 0) {
                        free(buf);
                        return conn_fail(c, n < 0 ? errno : ZR_E_BUFFER,
                                         "reading the dictionary memfd: %s",
                                         n < 0 ? strerror(errno) : "shorter than dict_bytes");
                }
                done += (uint64_t)n;
        }
        *ret_dict = buf;
        *ret_size = size;
        return 0;
}

int zrc_dataset_train_dict(zrc_dataset *d, const char *tier, void **ret_dict,
                           size_t *ret_size) {
        zrc_conn *c = d->conn;
        conn_reply reply = CONN_REPLY_NULL;
        zr_wire_writer *w;
        int r;

        r = conn_check(c, CONN_FEATURE_DICT, ZR_FEATURE_DICT);
        if (r < 0)
                return r;
        if (!tier || !ret_dict || !ret_size)
                return conn_fail(c, EINVAL, "train_dict needs a tier and result pointers");
        w = conn_begin(c, ZR_MSG_TRAIN_DICT);
        zr_wire_put_str(w, "tier", tier);
        zr_wire_put_u64(w, "handle", d->handle);
        r = conn_call(c, ZR_MSG_TRAIN_DICT, NULL, 0, &reply);
        if (r < 0)
                return r;
        r = dict_take(c, &reply, ret_dict, ret_size);
        conn_reply_done(&reply);
        return r;
}

int zrc_train_dict(zrc_conn *c, const char *tier, const void *data, const uint64_t *sizes,
                   size_t count, void **ret_dict, size_t *ret_size) {
        conn_reply reply = CONN_REPLY_NULL;
        uint64_t total = 0;
        zr_wire_writer *w;
        int r, fd;

        r = conn_check(c, CONN_FEATURE_DICT, ZR_FEATURE_DICT);
        if (r < 0)
                return r;
        if (!tier || !ret_dict || !ret_size || (count > 0 && (!data || !sizes)))
                return conn_fail(c, EINVAL, "train_dict needs a tier, samples and result pointers");
        if (count > conn_u64s_per_frame(c, 8))
                return conn_fail(c, ZR_E_LIMIT, "%zu samples do not fit one request", count);
        for (size_t i = 0; i < count; i++) {
                if (total > UINT64_MAX - sizes[i])
                        return conn_fail(c, EINVAL, "sample sizes overflow");
                total += sizes[i];
        }
        fd = conn_memfd_sealed(c, "zrc-samples", total, data, NULL, NULL);
        if (fd < 0)
                return fd;
        w = conn_begin(c, ZR_MSG_TRAIN_DICT);
        zr_wire_put_str(w, "tier", tier);
        zr_wire_put_u64s(w, "sizes", sizes, count);
        r = conn_call(c, ZR_MSG_TRAIN_DICT, &fd, 1, &reply);
        close(fd);
        if (r < 0)
                return r;
        r = dict_take(c, &reply, ret_dict, ret_size);
        conn_reply_done(&reply);
        return r;
}

int zrc_dataset_install_dict(zrc_dataset *d, const void *dict, size_t size) {
        zrc_conn *c = d->conn;
        zr_wire_writer *w;
        int r, fd;

        r = conn_check(c, CONN_FEATURE_DICT, ZR_FEATURE_DICT);
        if (r < 0)
                return r;
        if (!dict || size == 0)
                return conn_fail(c, EINVAL, "no dictionary given");
        fd = conn_memfd_sealed(c, "zrc-dict", size, dict, NULL, NULL);
        if (fd < 0)
                return fd;
        w = conn_begin(c, ZR_MSG_INSTALL_DICT);
        zr_wire_put_u64(w, "handle", d->handle);
        zr_wire_put_u64(w, "dict_bytes", size);
        r = conn_call(c, ZR_MSG_INSTALL_DICT, &fd, 1, NULL);
        close(fd);
        if (r == 0)
                d->has_dict = true;
        return r;
}

