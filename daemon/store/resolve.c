/* resolve.c: an entry of a store's directory, opened beneath it, on its mount,
 * never through a link (resolve.h).
 *
 * openat2 where the kernel has it and no filter refuses it; otherwise openat
 * with O_NOFOLLOW and a comparison of the file's device and mount with the
 * directory's. It knows nothing of stores: any caller that opens files in a
 * directory a client passed uses it.
 */
#include "store/resolve.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <linux/openat2.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#define RESOLVE_STRICT (RESOLVE_BENEATH | RESOLVE_NO_XDEV | RESOLVE_NO_SYMLINKS | \
                        RESOLVE_NO_MAGICLINKS)

/* 0: not probed yet; 1: openat2; -1: the fallback. */
static _Atomic int use_openat2;

static int sys_openat2(int dirfd, const char *name, int flags, mode_t mode) {
#ifdef SYS_openat2
        struct open_how how = {
                .flags = (uint64_t)(unsigned)flags,
                .mode = (flags & (O_CREAT | O_TMPFILE)) ? mode : 0,
                .resolve = RESOLVE_STRICT,
        };
        return (int)syscall(SYS_openat2, dirfd, name, &how, sizeof(how));
#else
        (void)dirfd, (void)name, (void)flags, (void)mode;
        errno = ENOSYS;
        return -1;
#endif
}

/* 1 if openat2 works here now, 0 if it is missing or refused. */
static int probe(void) {
        int fd = sys_openat2(AT_FDCWD, ".", O_PATH | O_CLOEXEC, 0);
        if (fd >= 0) {
                close(fd);
                return 1;
        }
        return errno == ENOSYS || errno == EPERM ? 0 : 1;
}

int zr_resolve_openat2(void) {
        int u = atomic_load(&use_openat2);
        if (u == 0) {
                u = probe() ? 1 : -1;
                atomic_store(&use_openat2, u);
        }
        return u > 0;
}

/* The mount id of fd: statx, else /proc/self/fdinfo. 0 if neither tells. */
static uint64_t mount_id(int fd) {
        struct statx sx;
        if (statx(fd, "", AT_EMPTY_PATH | AT_STATX_DONT_SYNC, STATX_MNT_ID, &sx) == 0 &&
            (sx.stx_mask & STATX_MNT_ID))
                return sx.stx_mnt_id;
        char path[64], buf[512];
        snprintf(path, sizeof(path), "/proc/self/fdinfo/%d", fd);
        int pfd = open(path, O_RDONLY | O_CLOEXEC);
        if (pfd < 0)
                return 0;
        ssize_t n = read(pfd, buf, sizeof(buf) - 1);
        close(pfd);
        if (n <= 0)
                return 0;
        buf[n] = 0;
        const char *p = strstr(buf, "mnt_id:");
        return p ? strtoull(p + 7, NULL, 10) : 0;
}

/* openat(O_NOFOLLOW), then the file must be no link and on dirfd's mount (or
 * device, where the mount ids cannot be had). Returns the descriptor or
 * -errno. */
static int fallback_open(int dirfd, const char *name, int flags, mode_t mode) {
        struct stat fs, ds;
        int fd = openat(dirfd, name, flags | O_NOFOLLOW, mode);
        if (fd < 0)
                return -errno;
        int r = 0;
        if (fstat(fd, &fs) < 0 || fstat(dirfd, &ds) < 0)
                r = -errno;
        else if (S_ISLNK(fs.st_mode)) /* O_PATH | O_NOFOLLOW opens the link itself */
                r = -ELOOP;
        else {
                /* the mount ids where known (overlayfs gives a file another st_dev
                 * than its directory on the same mount), else the devices */
                uint64_t fm = mount_id(fd), dm = mount_id(dirfd);
                if (fm && dm ? fm != dm : fs.st_dev != ds.st_dev)
                        r = -EXDEV;
        }
        if (r < 0) {
                close(fd);
                return r;
        }
        return fd;
}

static int strict_open(int dirfd, const char *name, int flags, mode_t mode) {
        if (zr_resolve_openat2()) {
                int fd = sys_openat2(dirfd, name, flags, mode);
                if (fd >= 0)
                        return fd;
                /* ENOSYS, or an EPERM a probe confirms: a filter came since */
                if (errno != ENOSYS && (errno != EPERM || probe()))
                        return -errno;
                atomic_store(&use_openat2, -1);
        }
        return fallback_open(dirfd, name, flags, mode);
}

/* fd, opened O_NONBLOCK, if it is a regular file (O_NONBLOCK cleared unless
 * `flags` asked for it); else closes it and refuses. */
static int regular_only(int fd, const char *name, int flags, zr_error *err) {
        struct stat st;
        int fl, r;

        if (fstat(fd, &st) < 0) {
                r = zr_error_errno(err, errno, "%s: stat", name);
                close(fd);
                return r;
        }
        if (!S_ISREG(st.st_mode)) {
                close(fd);
                return zr_error_set(err, ZR_E_CORRUPT, "%s: not a regular file (%s), refused",
                                    name, S_ISFIFO(st.st_mode) ? "a FIFO" :
                                    S_ISSOCK(st.st_mode) ? "a socket" :
                                    S_ISCHR(st.st_mode) ? "a character device" :
                                    S_ISBLK(st.st_mode) ? "a block device" : "not a file");
        }
        if (!(flags & O_NONBLOCK) && ((fl = fcntl(fd, F_GETFL)) < 0 ||
                                       fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) < 0)) {
                r = zr_error_errno(err, errno, "%s: fcntl", name);
                close(fd);
                return r;
        }
        return fd;
}

int zr_resolve_stat(int dirfd, const char *name, int flags, struct stat *ret, zr_error *err) {
        int fd = zr_resolve_open(dirfd, name, O_PATH | flags, 0, err), r = 0;
        if (fd < 0)
                return fd;
        if (fstat(fd, ret) < 0)
                r = zr_error_errno(err, errno, "%s: stat", name);
        close(fd);
        return r;
}

int zr_resolve_open(int dirfd, const char *name, int flags, mode_t mode, zr_error *err) {
        if (!name || !*name || strchr(name, '/') || strcmp(name, ".") == 0 ||
            strcmp(name, "..") == 0)
                return zr_error_set(err, EINVAL, "'%s': not an entry of the directory",
                                    name ? name : "(null)");
        if ((flags & O_CREAT) && !(flags & O_EXCL))
                return zr_error_set(err, EINVAL, "%s: created without O_EXCL", name);
        /* A FIFO, a device or a socket planted as a store file must not block
         * the open (a FIFO's waits for a writer) nor be read: the open never
         * blocks, and the file must be a regular one. */
        bool plain = !(flags & (O_PATH | O_DIRECTORY));
        int fd = strict_open(dirfd, name, flags | O_CLOEXEC | (plain ? O_NONBLOCK | O_NOCTTY : 0),
                             mode);
        if (fd >= 0 && plain)
                return regular_only(fd, name, flags, err);
        if (fd >= 0)
                return fd;
        switch (-fd) {
        case ELOOP:
                return zr_error_set(err, ELOOP, "%s: a symbolic link, refused (a store's "
                                    "files are entries of its own directory)", name);
        case EXDEV:
                return zr_error_set(err, EXDEV, "%s: a mount point, refused (something is "
                                    "mounted over it, or it is on another file system than "
                                    "its directory)", name);
        case ENXIO:
        case ENODEV:
                if (plain) /* a socket, or a device without its driver */
                        return zr_error_set(err, ZR_E_CORRUPT, "%s: not a regular file (a "
                                            "socket or a device), refused", name);
                return zr_error_errno(err, -fd, "%s: open", name);
        default:
                return zr_error_errno(err, -fd, "%s: open", name);
        }
}
