/* cachedir.c: the disk cache's directories of remote stores (cachedir.h).
 *
 * A store's directory is the XXH3-64 of endpoint, bucket and prefix in hex (16
 * characters), a mirror's is its manifest id (32): anything else found there
 * is not ours and is left alone. What a mirror holds on disk is counted by
 * st_blocks (its chunk files are sparse), and a closed mirror's age is its
 * directory's mtime.
 */
#include "remote/cachedir.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <dirent.h>

#include "manifest.h"
#include "url.h"

static void store_dir_name(const zr_rsrc *src, char *buf, size_t n) {
        const s3_target *t = zr_rsrc_target(src);
        char key[S3_ENDPOINT_MAX + S3_BUCKET_MAX + S3_PREFIX_MAX + 4];
        int k = snprintf(key, sizeof(key), "%s%c%s%c%s", t->endpoint, 0, t->bucket, 0, t->prefix);
        snprintf(buf, n, "%016" PRIx64, s3_checksum(key, (size_t)k));
}

int zr_cachedir_mkdir(int rootfd, const zr_rsrc *src, const char *id, zr_error *err) {
        char sdir[32];
        int sfd = -1, fd = -1;

        store_dir_name(src, sdir, sizeof(sdir));
        if ((mkdirat(rootfd, sdir, 0700) < 0 && errno != EEXIST) ||
            (sfd = openat(rootfd, sdir, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW)) < 0 ||
            (mkdirat(sfd, id, 0700) < 0 && errno != EEXIST) ||
            (fd = openat(sfd, id, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW)) < 0) {
                int e = errno;
                if (sfd >= 0)
                        close(sfd);
                return zr_error_errno(err, e, "the disk cache's directory for %s",
                                      zr_rsrc_url(src));
        }
        close(sfd);
        return fd;
}

static void remove_tree(int dirfd, const char *name) {
        int fd = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
        int removed;

        if (fd < 0)
                return;
        /* pass after pass: unlinking while reading a directory may skip entries */
        do {
                int dfd = openat(fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
                DIR *d = dfd >= 0 ? fdopendir(dfd) : NULL;
                struct dirent *de;
                removed = 0;
                if (!d) {
                        if (dfd >= 0)
                                close(dfd);
                        break;
                }
                while ((de = readdir(d)))
                        if (strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0 &&
                            unlinkat(fd, de->d_name, 0) == 0)
                                removed++;
                closedir(d);
        } while (removed > 0);
        close(fd);
        (void)unlinkat(dirfd, name, AT_REMOVEDIR);
}

void zr_cachedir_sweep(int rootfd, const zr_rsrc *src, const char *keep) {
        char sdir[32];
        store_dir_name(src, sdir, sizeof(sdir));
        int sfd = openat(rootfd, sdir, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
        int dfd = sfd >= 0 ? openat(sfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC) : -1;
        DIR *d = dfd >= 0 ? fdopendir(dfd) : NULL;
        struct dirent *de;
        if (!d) {
                if (dfd >= 0)
                        close(dfd);
                if (sfd >= 0)
                        close(sfd);
                return;
        }
        while ((de = readdir(d))) {
                if (de->d_name[0] == '.' || strcmp(de->d_name, keep) == 0 ||
                    strlen(de->d_name) != 32)
                        continue;
                char lock[48];
                snprintf(lock, sizeof(lock), "%s/lock", de->d_name);
                int lfd = openat(sfd, lock, O_RDWR | O_CLOEXEC | O_NOFOLLOW);
                if (lfd >= 0 && flock(lfd, LOCK_EX | LOCK_NB) == 0)
                        remove_tree(sfd, de->d_name); /* nobody has it open */
                if (lfd >= 0)
                        close(lfd);
        }
        closedir(d);
        close(sfd);
}

/* Bytes on disk of the files of directory fd (st_blocks). */
static uint64_t dir_bytes(int fd) {
        /* a description of its own: a dup would share (and leave) the offset */
        int dfd = openat(fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        DIR *d = dfd >= 0 ? fdopendir(dfd) : NULL;
        struct dirent *de;
        uint64_t sum = 0;
        if (!d) {
                if (dfd >= 0)
                        close(dfd);
                return 0;
        }
        while ((de = readdir(d))) {
                struct stat st;
                if (de->d_name[0] != '.' && fstatat(fd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
                    S_ISREG(st.st_mode))
                        sum += (uint64_t)st.st_blocks * 512;
        }
        closedir(d);
        return sum;
}

typedef struct closed_mirror {
        char store[32], id[40];
        uint64_t bytes;
        int64_t when;
} closed_mirror;

static int older_first(const void *a, const void *b) {
        const closed_mirror *x = a, *y = b;
        return x->when < y->when ? -1 : x->when > y->when;
}

uint64_t zr_cachedir_trim(int rootfd, uint64_t limit) {
        closed_mirror *v = NULL;
        size_t n = 0, cap = 0;
        uint64_t total = 0, removed = 0;
        int rfd = openat(rootfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        DIR *root = rfd >= 0 ? fdopendir(rfd) : NULL;
        struct dirent *se;

        if (!root) {
                if (rfd >= 0)
                        close(rfd);
                return 0;
        }
        while ((se = readdir(root))) {
                if (se->d_name[0] == '.' || strlen(se->d_name) != 16)
                        continue;
                int sfd = openat(rootfd, se->d_name, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
                int dfd = sfd >= 0 ? openat(sfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC) : -1;
                DIR *sd = dfd >= 0 ? fdopendir(dfd) : NULL;
                struct dirent *me;
                while (sd && (me = readdir(sd))) {
                        if (me->d_name[0] == '.' || strlen(me->d_name) != 32)
                                continue;
                        int mfd = openat(sfd, me->d_name, O_RDONLY | O_DIRECTORY | O_CLOEXEC |
                                                                O_NOFOLLOW);
                        int lfd = mfd >= 0 ? openat(mfd, "lock", O_RDWR | O_CLOEXEC | O_NOFOLLOW)
                                           : -1;
                        struct stat st;
                        /* open (locked) by a daemon: not ours to remove */
                        if (lfd >= 0 && flock(lfd, LOCK_EX | LOCK_NB) == 0 &&
                            fstat(mfd, &st) == 0) {
                                if (n == cap) {
                                        cap = cap ? 2 * cap : 16;
                                        closed_mirror *nv = realloc(v, cap * sizeof(*v));
                                        if (!nv)
                                                cap = n;
                                        else
                                                v = nv;
                                }
                                if (n < cap) {
                                        closed_mirror *c = &v[n++];
                                        snprintf(c->store, sizeof(c->store), "%s", se->d_name);
                                        snprintf(c->id, sizeof(c->id), "%s", me->d_name);
                                        c->bytes = dir_bytes(mfd);
                                        c->when = (int64_t)st.st_mtim.tv_sec;
                                        total += c->bytes;
                                }
                        }
                        if (lfd >= 0)
                                close(lfd);
                        if (mfd >= 0)
                                close(mfd);
                }
                if (sd)
                        closedir(sd);
                else if (dfd >= 0)
                        close(dfd);
                if (sfd >= 0)
                        close(sfd);
        }
        closedir(root);
        if (n > 1)
                qsort(v, n, sizeof(*v), older_first);
        for (size_t i = 0; i < n && total > limit; i++) {
                int sfd = openat(rootfd, v[i].store, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
                if (sfd < 0)
                        continue;
                int mfd = openat(sfd, v[i].id, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
                int lfd = mfd >= 0 ? openat(mfd, "lock", O_RDWR | O_CLOEXEC | O_NOFOLLOW) : -1;
                if (lfd >= 0 && flock(lfd, LOCK_EX | LOCK_NB) == 0) {
                        remove_tree(sfd, v[i].id); /* still closed: its lock is ours now */
                        total -= v[i].bytes;
                        removed += v[i].bytes;
                }
                if (lfd >= 0)
                        close(lfd);
                if (mfd >= 0)
                        close(mfd);
                close(sfd);
        }
        free(v);
        return removed;
}
