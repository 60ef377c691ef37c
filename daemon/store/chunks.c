/* chunks.c: numbered, fixed-size, sparse store files and their descriptors.
 *
 * The descriptor array is published through an atomic pointer; when it grows a
 * larger copy is published and the old one is kept until the table is freed, so
 * a reader that loaded the old pointer still reads valid memory. Files are
 * opened relative to the store's directory, O_CLOEXEC|O_NOFOLLOW. It does not
 * decide which files a store needs; the store does.
 */
#include "store/chunks.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct files_array {
        uint32_t cap;
        struct files_array *retired; /* older arrays, freed with the table */
        _Atomic int fds[];
} files_array;

struct zr_files {
        int dirfd;
        const char *suffix;
        uint64_t file_size;
        int read_only;
        uint32_t count;
        _Atomic(files_array *) array;
};

static files_array *files_array_new(uint32_t cap) {
        files_array *a = malloc(sizeof(*a) + (size_t)cap * sizeof(a->fds[0]));
        if (!a)
                return NULL;
        a->cap = cap;
        a->retired = NULL;
        for (uint32_t i = 0; i < cap; i++)
                atomic_init(&a->fds[i], -1);
        return a;
}

int zr_files_new(int dirfd, const char *suffix, uint64_t file_size, int read_only,
                 zr_files **ret) {
        zr_files *t = calloc(1, sizeof(*t));
        if (!t)
                return -ENOMEM;
        files_array *a = files_array_new(16);
        if (!a) {
                free(t);
                return -ENOMEM;
        }
        t->dirfd = dirfd;
        t->suffix = suffix;
        t->file_size = file_size;
        t->read_only = read_only;
        atomic_init(&t->array, a);
        *ret = t;
        return 0;
}

zr_files *zr_files_free(zr_files *t) {
        if (!t)
                return NULL;
        files_array *a = atomic_load(&t->array);
        for (uint32_t i = 0; i < a->cap; i++) {
                int fd = atomic_load(&a->fds[i]);
                if (fd >= 0)
                        close(fd);
        }
        while (a) {
                files_array *next = a->retired;
                free(a);
                a = next;
        }
        free(t);
        return NULL;
}

int zr_files_fd(const zr_files *t, uint32_t id) {
        files_array *a = atomic_load_explicit(&t->array, memory_order_acquire);
        if (id >= a->cap)
                return -1;
        return atomic_load_explicit(&a->fds[id], memory_order_relaxed);
}

uint32_t zr_files_count(const zr_files *t) {
        return t->count;
}

int zr_files_open(zr_files *t, uint32_t id, int create, uint64_t min_size,
                  int *ret_created, zr_error *err) {
        files_array *a = atomic_load(&t->array);
        char name[32];
        struct stat st;
        int fd = -1, created = 0, r;

        if (ret_created)
                *ret_created = 0;
        if (id < a->cap && atomic_load(&a->fds[id]) >= 0)
                return 0;
        snprintf(name, sizeof(name), "%" PRIu32 "%s", id, t->suffix);

        int flags = (t->read_only ? O_RDONLY : O_RDWR) | O_CLOEXEC | O_NOFOLLOW;
        fd = openat(t->dirfd, name, flags);
        if (fd < 0 && errno == ENOENT && create && !t->read_only) {
                fd = openat(t->dirfd, name, flags | O_CREAT | O_EXCL, 0644);
                created = fd >= 0;
        }
        if (fd < 0) {
                if (errno == ENOENT)
                        return zr_error_set(err, ZR_E_CORRUPT, "%s: missing", name);
                return zr_error_errno(err, errno, "%s: open", name);
        }
        if (fstat(fd, &st) < 0) {
                r = zr_error_errno(err, errno, "%s: stat", name);
                goto fail;
        }
        if (!S_ISREG(st.st_mode)) {
                r = zr_error_set(err, ZR_E_CORRUPT, "%s: not a regular file", name);
                goto fail;
        }
        if (create && !t->read_only && (uint64_t)st.st_size < t->file_size) {
                if (ftruncate(fd, (off_t)t->file_size) < 0) {
                        r = zr_error_errno(err, errno, "%s: extend to %" PRIu64 " bytes",
                                           name, t->file_size);
                        goto fail;
                }
        } else if ((uint64_t)st.st_size < min_size) {
                r = zr_error_set(err, ZR_E_CORRUPT,
                                 "%s: %" PRIu64 " bytes, expected at least %" PRIu64, name,
                                 (uint64_t)st.st_size, min_size);
                goto fail;
        }

        if (id >= a->cap) {
                uint32_t cap = a->cap;
                while (cap <= id)
                        cap = cap > UINT32_MAX / 2 ? UINT32_MAX : cap * 2;
                files_array *b = files_array_new(cap);
                if (!b) {
                        r = zr_error_set(err, ENOMEM, "%s: out of memory", name);
                        goto fail;
                }
                for (uint32_t i = 0; i < a->cap; i++)
                        atomic_init(&b->fds[i], atomic_load(&a->fds[i]));
                b->retired = a;
                atomic_store_explicit(&t->array, b, memory_order_release);
                a = b;
        }
        atomic_store_explicit(&a->fds[id], fd, memory_order_release);
        while (t->count < a->cap && atomic_load(&a->fds[t->count]) >= 0)
                t->count++;
        if (ret_created)
                *ret_created = created;
        return 0;

fail:
        close(fd);
        if (created)
                unlinkat(t->dirfd, name, 0);
        return r;
}

int zr_files_sync(zr_files *t, zr_error *err) {
        files_array *a = atomic_load(&t->array);
        for (uint32_t i = 0; i < a->cap; i++) {
                int fd = atomic_load(&a->fds[i]);
                if (fd >= 0 && fdatasync(fd) < 0)
                        return zr_error_errno(err, errno, "%" PRIu32 "%s: fdatasync", i,
                                              t->suffix);
        }
        return 0;
}

int zr_files_remove_from(zr_files *t, uint32_t first, zr_error *err) {
        files_array *a = atomic_load(&t->array);
        char name[32];

        for (uint32_t id = first;; id++) {
                int fd = id < a->cap ? atomic_exchange(&a->fds[id], -1) : -1;
                if (fd >= 0)
                        close(fd);
                snprintf(name, sizeof(name), "%" PRIu32 "%s", id, t->suffix);
                if (unlinkat(t->dirfd, name, 0) < 0) {
                        if (errno != ENOENT)
                                return zr_error_errno(err, errno, "%s: unlink", name);
                        if (id >= a->cap || id >= t->count)
                                break;
                }
                if (id == UINT32_MAX)
                        break;
        }
        if (t->count > first)
                t->count = first;
        return 0;
}

int64_t zr_pread_all(int fd, void *buf, uint64_t n, uint64_t off) {
        uint8_t *p = buf;
        uint64_t got = 0;
        while (got < n) {
                ssize_t r = pread(fd, p + got, n - got, (off_t)(off + got));
                if (r < 0) {
                        if (errno == EINTR)
                                continue;
                        return -errno;
                }
                if (r == 0)
                        break;
                got += (uint64_t)r;
        }
        return (int64_t)got;
}

int zr_pwrite_all(int fd, const void *buf, uint64_t n, uint64_t off) {
        const uint8_t *p = buf;
        uint64_t done = 0;
        while (done < n) {
                ssize_t r = pwrite(fd, p + done, n - done, (off_t)(off + done));
                if (r < 0) {
                        if (errno == EINTR)
                                continue;
                        return -errno;
                }
                done += (uint64_t)r;
        }
        return 0;
}
