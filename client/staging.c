/* staging.c: a new store built beside its path and renamed onto it (staging.h).
 *
 * The .partial directory is made with mkdtemp(3), opened and locked with a
 * blocking flock, and kept only if the name still leads to the directory
 * locked: a sweep by another command may have removed it between mkdir and
 * the lock (a sweep removes only what it could lock itself). The store's own
 * directory sits inside it, because the daemon locks that one while it creates
 * a store. Removal walks the tree without following links (nftw FTW_PHYS) and
 * is retried a few times: after an interrupted command the daemon may still
 * finish a request in the directory.
 */
#include "staging.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#define PARTIAL ".partial-"
/* Attempts at removing a tree the daemon may still be writing in. */
#define REMOVE_TRIES 5

static int fail(char *err, size_t size, int r, const char *fmt, ...)
        __attribute__((format(printf, 4, 5)));

static int fail(char *err, size_t size, int r, const char *fmt, ...) {
        va_list ap;

        va_start(ap, fmt);
        vsnprintf(err, size, fmt, ap);
        va_end(ap);
        return r;
}

static int rm_entry(const char *p, const struct stat *st, int type, struct FTW *f) {
        (void)st;
        (void)f;
        if (type == FTW_DP)
                return rmdir(p) < 0 && errno != ENOENT ? -1 : 0;
        return unlink(p) < 0 && errno != ENOENT ? -1 : 0;
}

/* Removes the tree at p; true once nothing is there. */
static bool remove_tree(const char *p) {
        struct stat st;

        for (int i = 0; i < REMOVE_TRIES; i++) {
                (void)nftw(p, rm_entry, 16, FTW_DEPTH | FTW_PHYS | FTW_MOUNT);
                if (lstat(p, &st) < 0 && errno == ENOENT)
                        return true;
        }
        return false;
}

/* Removes what is inside the directory p, not p. */
static bool empty_dir(const char *p) {
        char child[PATH_MAX];
        struct dirent *de;
        bool ok = true;
        DIR *d = opendir(p);

        if (!d)
                return false;
        while ((de = readdir(d)))
                if (strcmp(de->d_name, ".") && strcmp(de->d_name, "..") &&
                    (size_t)snprintf(child, sizeof(child), "%s/%s", p, de->d_name) < sizeof(child))
                        ok = remove_tree(child) && ok;
        closedir(d);
        return ok;
}

static bool same_file(int fd, const char *p) {
        struct stat a, b;

        return fstat(fd, &a) == 0 && lstat(p, &b) == 0 && a.st_dev == b.st_dev &&
               a.st_ino == b.st_ino;
}

/* Removes the .partial directories of dead commands for parent/name: ours,
 * and lockable (no live command holds them). */
static void sweep(const char *parent, const char *name) {
        char prefix[NAME_MAX + sizeof(PARTIAL) + 2], p[PATH_MAX];
        size_t plen = (size_t)snprintf(prefix, sizeof(prefix), ".%s" PARTIAL, name);
        struct dirent *de;
        DIR *d = opendir(parent);

        if (!d || plen >= sizeof(prefix)) {
                if (d)
                        closedir(d);
                return;
        }
        while ((de = readdir(d))) {
                struct stat st;
                int fd;

                if (strncmp(de->d_name, prefix, plen) != 0 ||
                    (size_t)snprintf(p, sizeof(p), "%s/%s", parent, de->d_name) >= sizeof(p))
                        continue;
                if (lstat(p, &st) < 0 || !S_ISDIR(st.st_mode) || st.st_uid != geteuid())
                        continue;
                fd = open(p, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
                if (fd < 0)
                        continue;
                if (flock(fd, LOCK_EX | LOCK_NB) == 0 && same_file(fd, p))
                        (void)remove_tree(p);
                close(fd);
        }
        closedir(d);
}

/* dir and base of path (trailing slashes ignored): "a/b" -> "a", "b". */
static int split(const char *path, char *dir, char *base, char *err, size_t size) {
        char tmp[PATH_MAX];
        size_t n = strlen(path);
        const char *b;
        char *slash;

        while (n > 1 && path[n - 1] == '/')
                n--;
        if (n == 0 || n >= sizeof(tmp))
                return fail(err, size, -ENAMETOOLONG, "%s: no usable path", path);
        memcpy(tmp, path, n);
        tmp[n] = 0;
        slash = strrchr(tmp, '/');
        b = slash ? slash + 1 : tmp;
        if (strlen(b) > NAME_MAX)
                return fail(err, size, -ENAMETOOLONG, "%s: name too long", path);
        memcpy(base, b, strlen(b) + 1);
        if (!slash)
                strcpy(dir, ".");
        else if (slash == tmp)
                strcpy(dir, "/");
        else {
                *slash = 0;
                memcpy(dir, tmp, strlen(tmp) + 1);      /* shorter than PATH_MAX, as tmp */
        }
        if (!*base || !strcmp(base, ".") || !strcmp(base, ".."))
                return fail(err, size, -EINVAL, "%s: not a name for a new store", path);
        return 0;
}

static bool is_empty_dir(const char *p) {
        struct dirent *de;
        bool empty = true;
        DIR *d = opendir(p);

        if (!d)
                return false;
        while (empty && (de = readdir(d)))
                empty = !strcmp(de->d_name, ".") || !strcmp(de->d_name, "..");
        closedir(d);
        return empty;
}

static int in_place(tool_staging *s, bool clear) {
        snprintf(s->path, sizeof(s->path), "%s", s->target);
        s->clear = clear;
        return 0;
}

int staging_begin(tool_staging *s, const char *target, char *err, size_t size) {
        char parent[PATH_MAX], name[NAME_MAX + 1];
        struct stat st, pst;
        bool replace = false;
        int r;

        *s = (tool_staging){ .lockfd = -1 };
        if (strlen(target) >= sizeof(s->target))
                return fail(err, size, -ENAMETOOLONG, "%s: path too long", target);
        snprintf(s->target, sizeof(s->target), "%s", target);
        r = split(target, parent, name, err, size);
        if (r < 0)
                return r;
        sweep(parent, name);
        if (lstat(target, &st) == 0) {
                if (!S_ISDIR(st.st_mode) || !is_empty_dir(target))
                        return in_place(s, false);      /* the daemon says what is wrong */
                if (stat(parent, &pst) < 0 || pst.st_dev != st.st_dev)
                        return in_place(s, true);       /* a mount point */
                replace = true;
        } else if (errno != ENOENT) {
                return fail(err, size, -errno, "%s: %s", target, strerror(errno));
        }
        if (strlen(parent) + 2 * strlen(name) + sizeof("/." PARTIAL "XXXXXX/") >= sizeof(s->root))
                return fail(err, size, -ENAMETOOLONG, "%s: path too long", target);
        for (;;) {
                snprintf(s->root, sizeof(s->root), "%s/.%s" PARTIAL "XXXXXX", parent, name);
                if (!mkdtemp(s->root)) {
                        r = -errno;
                        s->root[0] = 0;
                        if (replace && (r == -EACCES || r == -EPERM || r == -EROFS))
                                return in_place(s, true);  /* the parent is not ours */
                        return fail(err, size, r, "making a directory beside %s: %s", target,
                                    strerror(-r));
                }
                s->lockfd = open(s->root, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
                if (s->lockfd < 0)
                        continue;               /* swept before it was locked */
                if (flock(s->lockfd, LOCK_EX) == 0 && same_file(s->lockfd, s->root))
                        break;
                close(s->lockfd);               /* swept meanwhile: another name */
                s->lockfd = -1;
        }
        if ((size_t)snprintf(s->path, sizeof(s->path), "%s/%s", s->root, name) >= sizeof(s->path))
                r = -ENAMETOOLONG;                      /* checked above: cannot happen */
        else
                r = mkdir(s->path, replace ? 0700 : 0777) < 0 ? -errno : 0;
        if (r == 0 && replace) {
                /* the empty directory's group (else, not being a group of ours, the
                 * parent's) and mode */
                if (chown(s->path, (uid_t)-1, st.st_gid) < 0 && errno != EPERM)
                        r = -errno;
                else if (chmod(s->path, st.st_mode & 07777) < 0)
                        r = -errno;
        }
        if (r < 0) {
                staging_abort(s);
                return fail(err, size, r, "making a directory beside %s: %s", target,
                            strerror(-r));
        }
        return 0;
}

static int fsync_dir(const char *p) {
        int fd = open(p, O_RDONLY | O_DIRECTORY | O_CLOEXEC), r = 0;

        if (fd < 0)
                return -errno;
        if (fsync(fd) < 0)
                r = -errno;
        close(fd);
        return r;
}

int staging_commit(tool_staging *s, char *err, size_t size) {
        char parent[PATH_MAX], name[NAME_MAX + 1];
        int r;

        if (!s->root[0])
                return 0;
        r = split(s->target, parent, name, err, size);
        if (r < 0)
                return r;
        r = fsync_dir(s->path);
        if (r < 0)
                return fail(err, size, r, "syncing %s: %s", s->path, strerror(-r));
        if (rename(s->path, s->target) < 0) {
                r = -errno;
                if (r == -ENOTEMPTY || r == -EEXIST)
                        return fail(err, size, r, "%s was made by someone else meanwhile; "
                                    "nothing was written to it", s->target);
                return fail(err, size, r, "renaming the new store onto %s: %s", s->target,
                            strerror(-r));
        }
        snprintf(s->path, sizeof(s->path), "%s", s->target);
        r = fsync_dir(parent);
        (void)rmdir(s->root); /* else the next command's sweep takes it */
        s->root[0] = 0;
        close(s->lockfd);
        s->lockfd = -1;
        if (r < 0)
                return fail(err, size, r, "syncing %s: %s", parent, strerror(-r));
        return 0;
}

bool staging_abort(tool_staging *s) {
        bool ok = true;

        if (s->root[0])
                ok = remove_tree(s->root);
        else if (s->clear)
                ok = empty_dir(s->path);
        if (ok)
                s->root[0] = 0; /* else kept, for the caller to name */
        s->clear = false;
        if (s->lockfd >= 0)
                close(s->lockfd);
        s->lockfd = -1;
        return ok;
}
