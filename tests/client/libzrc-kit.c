/* libzrc-kit.c: what the files of the libzrc suite share (libzrc-kit.h). */
#include "libzrc-kit.h"

#include <dirent.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

tl_daemon daemon_;

zrc_conn *conn(void) {
        zrc_conn *c = NULL;
        zrc_error e = { 0 };
        int r = zrc_connect(daemon_.socket, &c, &e);

        ck_assert_msg(r == 0, "connect: %d %s", r, e.message);
        return c;
}

const char *path(const char *name) {
        static char buf[PATH_MAX];

        return tl_daemon_path(&daemon_, name, buf);
}

/* A dense <f4 (4, 5) record whose values identify it. */
void fill_record(float *rec, uint64_t id) {
        for (int i = 0; i < 20; i++)
                rec[i] = (float)id * 100.0f + (float)i;
}

zrc_dataset *make_dense(zrc_conn *c, const char *name, zrc_codec codec, uint64_t n,
                        const void *dict, size_t dict_size) {
        return make_dense_ids(c, name, codec, n, 0, dict, dict_size);
}

zrc_dataset *make_dense_ids(zrc_conn *c, const char *name, zrc_codec codec, uint64_t n,
                            uint64_t first_id, const void *dict, size_t dict_size) {
        uint64_t shape[] = { 4, 5 }, first = 99;
        zrc_dataset *d = NULL;
        zrc_schema s;
        float *data = malloc(n * 20 * sizeof(float) + 1);

        ck_assert_int_eq(zrc_schema_dense(&s, "<f4", shape, 2, codec), 0);
        ck_assert_msg(zrc_dataset_create(c, path(name), &s, dict, dict_size, &d) == 0,
                      "create %s: %s", name, zrc_last_error(c)->message);
        ck_assert_uint_eq(zrc_dataset_length(d), 0);
        ck_assert(zrc_dataset_writable(d));
        for (uint64_t i = 0; i < n; i++)
                fill_record(data + i * 20, first_id + i);
        ck_assert_msg(zrc_dataset_append_dense(d, data, n, &first) == 0, "append: %s",
                      zrc_last_error(c)->message);
        ck_assert_uint_eq(first, 0);
        ck_assert_uint_eq(zrc_dataset_length(d), n);
        free(data);
        return d;
}

void check_dense(zrc_dataset *d, const uint64_t *idx, size_t n, const uint64_t *ids) {
        zrc_batch b;
        float want[20];

        ck_assert_msg(zrc_dataset_read(d, idx, n, &b) == 0, "read: %s",
                      zrc_last_error(zrc_dataset_conn(d))->message);
        ck_assert_uint_eq(b.count, n);
        ck_assert_int_eq(b.kind, ZRC_DENSE);
        ck_assert_uint_eq(b.record_bytes, 80);
        ck_assert_uint_eq(b.bytes, n * 80);
        ck_assert_uint_eq((uintptr_t)b.data % 8, 0);
        for (size_t j = 0; j < n; j++) {
                fill_record(want, ids ? ids[j] : idx[j]);
                ck_assert_mem_eq((const uint8_t *)b.data + j * 80, want, 80);
        }
}

void kit_fail(kit_failures *f, zrc_conn *c) {
        f->count++;
        if (c)
                snprintf(f->message, sizeof(f->message), "%s", zrc_last_error(c)->message);
}

zrc_conn *kit_thread_connect(kit_failures *f) {
        zrc_conn *c = NULL;

        if (zrc_connect(daemon_.socket, &c, NULL) < 0) {
                kit_fail(f, NULL);
                return NULL;
        }
        return c;
}

int fds_open(bool *set) {
        DIR *dir = opendir("/proc/self/fd");
        struct dirent *de;
        int n = 0;

        ck_assert_ptr_nonnull(dir);
        memset(set, 0, 4096);
        while ((de = readdir(dir))) {
                int fd = atoi(de->d_name);

                if (de->d_name[0] == '.' || fd == dirfd(dir) || fd >= 4096)
                        continue;
                set[fd] = true;
                n++;
        }
        closedir(dir);
        return n;
}
