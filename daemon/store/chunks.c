/* chunks.c: numbered, fixed-size, sparse store files, their descriptors and
 * their read-only mappings.
 *
 * The entry array is published through an atomic pointer; when it grows a
 * larger copy is published and the old one is kept until the table is freed, so
 * a reader that loaded the old pointer still reads valid memory. An entry's
 * mapping is set before its descriptor is published (release), so a reader that
 * sees the descriptor sees the mapping. Files are opened beneath the store's
 * directory, on its mount, never through a link (resolve.h), and created anew
 * (newfile.h). Only files of the daemon's own that nobody else may write are
 * mapped; mappings are PROT_READ|MAP_SHARED and cover only bytes the file held
 * at open, so a read inside one faults only if the file was truncated since
 * (which the readers guard against: util/mapguard.h). A table of randomly read files (the chunks) gets POSIX_FADV_RANDOM
 * on its descriptors and MADV_RANDOM on its mappings: a 4 KiB record read at
 * random must not pull in the kernel's read-around window (up to
 * read_ahead_kb, 8 MiB on some machines) and evict what the next read needs.
 * It does not decide which files a store needs; the store does.
 */
#include "store/chunks.h"
#include "store/newfile.h"
#include "store/resolve.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct files_entry {
        _Atomic int fd;      /* -1 while not open */
        const uint8_t *map;  /* read-only mapping, or NULL */
        uint64_t map_len;    /* bytes mapped, all inside the file */
        uint64_t size;       /* file size at open (after any extension) */
} files_entry;

typedef struct files_array {
        uint32_t cap;
        struct files_array *retired; /* older arrays, freed with the table */
        files_entry e[];
} files_array;

struct zr_files {
        int dirfd;
        const char *suffix;
        uint64_t file_size;
        int read_only;
        int flags; /* ZR_FILES_* */
        uint32_t count;
        _Atomic(files_array *) array;
};

static files_array *files_array_new(uint32_t cap) {
        files_array *a = malloc(sizeof(*a) + (size_t)cap * sizeof(a->e[0]));
        if (!a)
                return NULL;
        a->cap = cap;
        a->retired = NULL;
        for (uint32_t i = 0; i < cap; i++) {
                atomic_init(&a->e[i].fd, -1);
                a->e[i].map = NULL;
                a->e[i].map_len = 0;
                a->e[i].size = 0;
        }
        return a;
}

int zr_files_new(int dirfd, const char *suffix, uint64_t file_size, int read_only, int flags,
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
        t->flags = flags;
        atomic_init(&t->array, a);
        *ret = t;
        return 0;
}

zr_files *zr_files_free(zr_files *t) {
        if (!t)
                return NULL;
        files_array *a = atomic_load(&t->array);
        for (uint32_t i = 0; i < a->cap; i++) {
                int fd = atomic_load(&a->e[i].fd);
                if (a->e[i].map)
                        munmap((void *)a->e[i].map, a->e[i].map_len);
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
        return atomic_load_explicit(&a->e[id].fd, memory_order_acquire);
}

const uint8_t *zr_files_map(const zr_files *t, uint32_t id, uint64_t *ret_len) {
        files_array *a = atomic_load_explicit(&t->array, memory_order_acquire);
        if (id >= a->cap || atomic_load_explicit(&a->e[id].fd, memory_order_acquire) < 0) {
                *ret_len = 0;
                return NULL;
        }
        *ret_len = a->e[id].map_len;
        return a->e[id].map;
}

uint64_t zr_files_size(const zr_files *t, uint32_t id) {
        files_array *a = atomic_load_explicit(&t->array, memory_order_acquire);
        if (id >= a->cap || atomic_load_explicit(&a->e[id].fd, memory_order_acquire) < 0)
                return 0;
        return a->e[id].size;
}

uint32_t zr_files_count(const zr_files *t) {
        return t->count;
}

/* Whether a file may be mapped: only one of the daemon's own that nobody else
 * may write, so nobody else can truncate it under the mapping (chunks.h). */
static int mappable(const struct stat *st) {
        return st->st_uid == geteuid() && !(st->st_mode & (S_IWGRP | S_IWOTH));
}

/* The read-only mapping of fd, a file of `size` bytes (*st its fstat), up to
 * its size or the table's file size, whichever is less, if the table maps and
 * the file may be mapped; else NULL (reads fall back to pread). */
static const uint8_t *files_map(const zr_files *t, int fd, const struct stat *st, uint64_t size,
                                uint64_t *ret_len) {
        uint64_t len = size < t->file_size ? size : t->file_size;
        *ret_len = 0;
        if (!(t->flags & ZR_FILES_MAP) || len == 0 || !mappable(st))
                return NULL;
        /* best effort: without a mapping, reads fall back to pread */
        void *m = mmap(NULL, len, PROT_READ, MAP_SHARED, fd, 0);
        if (m == MAP_FAILED)
                return NULL;
        if (t->flags & ZR_FILES_RANDOM)
                (void)madvise(m, len, MADV_RANDOM);
        *ret_len = len;
        return m;
}

int zr_files_open(zr_files *t, uint32_t id, int create, uint64_t min_size,
                  int *ret_created, zr_error *err) {
        files_array *a = atomic_load(&t->array);
        char name[32];
        struct stat st;
        int fd = -1, created = 0, r;
        const uint8_t *map = NULL;
        uint64_t map_len = 0;

        if (ret_created)
                *ret_created = 0;
        if (id < a->cap && atomic_load(&a->e[id].fd) >= 0)
                return 0;
        snprintf(name, sizeof(name), "%" PRIu32 "%s", id, t->suffix);

        int flags = t->read_only ? O_RDONLY : O_RDWR;
        zr_error oerr = {0};
        if (create && !t->read_only) {
                fd = zr_newfile_create(t->dirfd, name, flags, &oerr);
                created = fd >= 0;
        } else {
                fd = zr_resolve_open(t->dirfd, name, flags, 0, &oerr);
        }
        if (fd < 0) {
                if (fd == -ENOENT)
                        return zr_error_set(err, ZR_E_CORRUPT, "%s: missing", name);
                return zr_error_set(err, -fd, "%s", oerr.message);
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
        uint64_t size = (uint64_t)st.st_size;
        if (create && !t->read_only && size < t->file_size)
                size = t->file_size;
        if (t->flags & ZR_FILES_RANDOM)
                /* best effort, as is MADV_RANDOM below: only speed depends on it */
                (void)posix_fadvise(fd, 0, 0, POSIX_FADV_RANDOM);
        map = files_map(t, fd, &st, size, &map_len);

        if (id >= a->cap) {
                uint32_t cap = a->cap;
                while (cap <= id)
                        cap = cap > UINT32_MAX / 2 ? UINT32_MAX : cap * 2;
                files_array *b = files_array_new(cap);
                if (!b) {
                        r = zr_error_set(err, ENOMEM, "%s: out of memory", name);
                        goto fail;
                }
                for (uint32_t i = 0; i < a->cap; i++) {
                        atomic_init(&b->e[i].fd, atomic_load(&a->e[i].fd));
                        b->e[i].map = a->e[i].map;
                        b->e[i].map_len = a->e[i].map_len;
                        b->e[i].size = a->e[i].size;
                }
                b->retired = a;
                atomic_store_explicit(&t->array, b, memory_order_release);
                a = b;
        }
        a->e[id].map = map;
        a->e[id].map_len = map ? map_len : 0;
        a->e[id].size = size;
        atomic_store_explicit(&a->e[id].fd, fd, memory_order_release);
        while (t->count < a->cap && atomic_load(&a->e[t->count].fd) >= 0)
                t->count++;
        if (ret_created)
                *ret_created = created;
        return 0;

fail:
        if (map)
                munmap((void *)map, map_len);
        close(fd);
        if (created)
                unlinkat(t->dirfd, name, 0);
        return r;
}

int zr_files_resize(zr_files *t, uint32_t id, uint64_t size, zr_error *err) {
        files_array *a = atomic_load(&t->array);
        int fd = id < a->cap ? atomic_load(&a->e[id].fd) : -1;
        files_entry *e = fd >= 0 ? &a->e[id] : NULL;
        struct stat st;

        if (!e || t->read_only)
                return zr_error_set(err, EBADF, "%" PRIu32 "%s: not open for writing", id,
                                    t->suffix);
        if (fstat(fd, &st) < 0)
                return zr_error_errno(err, errno, "%" PRIu32 "%s: stat", id, t->suffix);
        if ((uint64_t)st.st_size == size)
                return 0;
        bool grow = (uint64_t)st.st_size < size;
        if (ftruncate(fd, (off_t)size) < 0)
                return zr_error_errno(err, errno, "%" PRIu32 "%s: %s to %" PRIu64 " bytes", id,
                                      t->suffix, grow ? "extend" : "truncate", size);
        /* a grown file holds what its store's header will name: as a file just
         * created, its size is made durable first */
        if (grow && fdatasync(fd) < 0)
                return zr_error_errno(err, errno, "%" PRIu32 "%s: fdatasync", id, t->suffix);
        if (e->map)
                munmap((void *)e->map, e->map_len);
        e->map = NULL;
        e->map_len = 0;
        st.st_size = (off_t)size;
        e->map = files_map(t, fd, &st, size, &e->map_len);
        e->size = size;
        return 0;
}

void zr_files_grown(zr_files *t, uint32_t id, uint64_t end) {
        files_array *a = atomic_load(&t->array);
        if (id < a->cap && atomic_load(&a->e[id].fd) >= 0 && a->e[id].size < end)
                a->e[id].size = end;
}

int zr_files_reopen_prepare(zr_files *t, int dirfd, int **ret_fds, zr_error *err) {
        files_array *a = atomic_load(&t->array);
        int *fds = malloc(a->cap * sizeof(*fds)), r = 0;
        char name[32];

        if (!fds)
                return zr_error_set(err, ENOMEM, "%s files: out of memory", t->suffix);
        for (uint32_t i = 0; i < a->cap; i++)
                fds[i] = -1;
        for (uint32_t i = 0; i < a->cap && r == 0; i++) {
                int old = atomic_load(&a->e[i].fd);
                struct stat os, ns;
                if (old < 0)
                        continue;
                snprintf(name, sizeof(name), "%" PRIu32 "%s", i, t->suffix);
                fds[i] = zr_resolve_open(dirfd, name, O_RDWR, 0, err);
                if (fds[i] < 0) {
                        r = fds[i];
                        fds[i] = -1;
                } else if (fstat(old, &os) < 0 || fstat(fds[i], &ns) < 0) {
                        r = zr_error_errno(err, errno, "%s: stat", name);
                } else if (os.st_dev != ns.st_dev || os.st_ino != ns.st_ino) {
                        r = zr_error_set(err, EACCES, "%s: not the file the store has open",
                                         name);
                } else if (t->flags & ZR_FILES_RANDOM) {
                        (void)posix_fadvise(fds[i], 0, 0, POSIX_FADV_RANDOM);
                }
        }
        if (r < 0) {
                zr_files_reopen_abort(t, fds);
                return r;
        }
        *ret_fds = fds;
        return 0;
}

void zr_files_reopen_commit(zr_files *t, int dirfd, int *fds) {
        files_array *a = atomic_load(&t->array);
        for (uint32_t i = 0; i < a->cap; i++)
                if (fds[i] >= 0)
                        close(atomic_exchange(&a->e[i].fd, fds[i]));
        free(fds);
        t->dirfd = dirfd;
        t->read_only = 0;
}

void zr_files_reopen_abort(zr_files *t, int *fds) {
        files_array *a = atomic_load(&t->array);
        for (uint32_t i = 0; fds && i < a->cap; i++)
                if (fds[i] >= 0)
                        close(fds[i]);
        free(fds);
}

int zr_files_sync(zr_files *t, zr_error *err) {
        files_array *a = atomic_load(&t->array);
        for (uint32_t i = 0; i < a->cap; i++) {
                int fd = atomic_load(&a->e[i].fd);
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
                int fd = id < a->cap ? atomic_exchange(&a->e[id].fd, -1) : -1;
                if (fd >= 0) {
                        /* exclusive: no reader holds the mapping or descriptor */
                        if (a->e[id].map)
                                munmap((void *)a->e[id].map, a->e[id].map_len);
                        a->e[id].map = NULL;
                        a->e[id].map_len = 0;
                        a->e[id].size = 0;
                        close(fd);
                }
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
