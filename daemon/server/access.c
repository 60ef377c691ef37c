/* access.c: the proofs of access a request's descriptors give (access.h). */
#include "server/access.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "store/resolve.h"

#define META_FILE "meta.zr"

int zr_access_dir(zr_request *rq, int fd, const char *what) {
        struct stat st;
        int fl = fcntl(fd, F_GETFL);
        if (fl < 0)
                return zr_request_fail(rq, ZR_E_BAD_FD, "%s: not a usable descriptor", what);
        if (fl & O_PATH)
                return zr_request_fail(rq, ZR_E_BAD_FD, "%s: an O_PATH descriptor proves nothing; "
                                       "open it O_RDONLY | O_DIRECTORY", what);
        if (fstat(fd, &st) < 0)
                return zr_request_fail(rq, ZR_E_BAD_FD, "%s: fstat failed: %s", what,
                                       strerror(errno));
        if (!S_ISDIR(st.st_mode))
                return zr_request_fail(rq, ZR_E_BAD_FD, "%s is not a directory", what);
        return 0;
}

/* The proof of access: meta.zr of the store in dirfd, opened for reading (or
 * read-write when `write`). */
int zr_access_proof(zr_request *rq, int dirfd, int proof, bool write, const char *what) {
        struct stat ps, ms;
        int fl = fcntl(proof, F_GETFL);
        if (fl < 0)
                return zr_request_fail(rq, ZR_E_BAD_FD, "%s: the meta.zr descriptor is not usable",
                                       what);
        if (fl & O_PATH)
                return zr_request_fail(rq, ZR_E_BAD_FD, "%s: the meta.zr descriptor is O_PATH, "
                                       "which proves nothing", what);
        zr_error e = {0};
        int r = zr_resolve_stat(dirfd, META_FILE, 0, &ms, &e);
        if (r == -ENOENT)
                return zr_request_fail(rq, ZR_E_NOT_STORE, "%s holds no " META_FILE
                                       ": not a store", what);
        if (r < 0)
                return zr_request_fail(rq, -r, "%s: %s", what, e.message);
        if (fstat(proof, &ps) < 0)
                return zr_request_fail(rq, ZR_E_BAD_FD, "%s: fstat of the meta.zr descriptor: %s",
                                       what, strerror(errno));
        if (ps.st_dev != ms.st_dev || ps.st_ino != ms.st_ino)
                return zr_request_fail(rq, EACCES, "%s: the descriptor passed is not this store's "
                                       META_FILE, what);
        if (write && (fl & O_ACCMODE) != O_RDWR)
                return zr_request_fail(rq, EACCES, "%s: write access needs " META_FILE
                                       " opened O_RDWR", what);
        return 0;
}

int zr_access_member(zr_request *rq, int rootfd, const char *name, int dirfd,
                     const char *what) {
        struct stat cs, ds;
        zr_error e = {0};
        int r = zr_access_dir(rq, dirfd, what);
        if (r < 0)
                return r;
        r = zr_resolve_stat(rootfd, name, O_DIRECTORY, &cs, &e);
        if (r < 0)
                return zr_request_fail(rq, -r, "%s: %s", what, e.message);
        if (fstat(dirfd, &ds) < 0)
                return zr_request_fail(rq, errno, "%s: fstat: %s", what, strerror(errno));
        if (cs.st_dev != ds.st_dev || cs.st_ino != ds.st_ino)
                return zr_request_fail(rq, EACCES, "%s: the directory passed is not the set's "
                                       "'%s'", what, name);
        return 0;
}

/* The directory must be empty (EXISTS if it holds meta.zr, ENOTEMPTY if
 * anything else) and owned by the peer (EACCES), unless the peer is root. */
int zr_access_new_dir(zr_request *rq, int dirfd) {
        struct stat st;
        int r = 0;
        int dfd = openat(dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (dfd < 0)
                return zr_request_fail(rq, errno, "reading the new directory: %s",
                                       strerror(errno));
        DIR *d = fdopendir(dfd);
        if (!d) {
                close(dfd);
                return zr_request_fail(rq, errno, "reading the new directory: %s",
                                       strerror(errno));
        }
        struct dirent *de;
        bool other = false;
        char first[64] = "";
        while ((de = readdir(d))) {
                if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
                        continue;
                if (strcmp(de->d_name, META_FILE) == 0) {
                        r = zr_request_fail(rq, ZR_E_EXISTS, "the directory already holds a "
                                            "store (" META_FILE ")");
                        break;
                }
                if (!other)
                        snprintf(first, sizeof(first), "%.60s", de->d_name);
                other = true;
        }
        closedir(d);
        if (r < 0)
                return r;
        if (other)
                return zr_request_fail(rq, ENOTEMPTY, "the directory is not empty (it holds "
                                       "'%s'): a store is created in an empty directory", first);
        if (fstat(dirfd, &st) < 0)
                return zr_request_fail(rq, errno, "fstat of the new directory: %s",
                                       strerror(errno));
        uid_t uid = zr_request_uid(rq);
        if (uid != 0 && st.st_uid != uid)
                return zr_request_fail(rq, EACCES, "the directory belongs to uid %u, not to the "
                                       "client's uid %u", (unsigned)st.st_uid, (unsigned)uid);
        return 0;
}
