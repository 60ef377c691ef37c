/* listener.c: the listening socket from LISTEN_FDS or from bind(). See listener.h.
 * A stale socket file (left by a killed daemon) is detected by a connect() that
 * is refused, and only then unlinked. */
#include "server/listener.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

static int parse_env_u64(const char *name, unsigned long long *ret) {
        const char *s = getenv(name);
        if (!s)
                return -ENOENT;
        char *end;
        errno = 0;
        unsigned long long v = strtoull(s, &end, 10);
        if (errno || end == s || *end)
                return -EINVAL;
        *ret = v;
        return 0;
}

int zr_listener_from_env(int *ret_fd, zr_error *err) {
        unsigned long long pid, nfds;
        if (parse_env_u64("LISTEN_PID", &pid) < 0 || pid != (unsigned long long)getpid())
                return 0;
        if (parse_env_u64("LISTEN_FDS", &nfds) < 0 || nfds == 0)
                return 0;
        unsetenv("LISTEN_PID");
        unsetenv("LISTEN_FDS");
        unsetenv("LISTEN_FDNAMES");
        if (nfds != 1) {
                for (unsigned long long i = 0; i < nfds; i++)
                        close(ZR_LISTEN_FDS_START + (int)i);
                return zr_error_set(err, ZR_E_BAD_FD,
                                    "socket activation passed %llu descriptors, expected 1", nfds);
        }
        int fd = ZR_LISTEN_FDS_START;
        int type = 0, listening = 0;
        socklen_t len = sizeof(type);
        struct sockaddr_storage sa;
        socklen_t salen = sizeof(sa);
        if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len) < 0 ||
            getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &(socklen_t){sizeof(int)}) < 0 ||
            getsockname(fd, (struct sockaddr *)&sa, &salen) < 0 || sa.ss_family != AF_UNIX ||
            type != SOCK_STREAM || !listening) {
                close(fd);
                return zr_error_set(err, ZR_E_BAD_FD,
                                    "the passed descriptor is not a listening AF_UNIX stream socket");
        }
        int fl = fcntl(fd, F_GETFL);
        if (fcntl(fd, F_SETFD, FD_CLOEXEC) < 0 || fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0) {
                int e = errno;
                close(fd);
                return zr_error_errno(err, e, "configuring the passed socket");
        }
        *ret_fd = fd;
        return 1;
}

static int socket_is_live(const struct sockaddr_un *sa) {
        int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0)
                return 1; /* cannot tell: treat as live, never remove it */
        int live = connect(fd, (const struct sockaddr *)sa, sizeof(*sa)) == 0 || errno != ECONNREFUSED;
        close(fd);
        return live;
}

int zr_listener_bind(const char *path, mode_t mode, gid_t gid, int *ret_fd, zr_error *err) {
        struct sockaddr_un sa = {.sun_family = AF_UNIX};
        if (!path || !*path)
                return zr_error_set(err, EINVAL, "no socket path");
        if (strlen(path) >= sizeof(sa.sun_path))
                return zr_error_set(err, ENAMETOOLONG, "socket path too long: %s", path);
        strcpy(sa.sun_path, path);

        int r, fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        if (fd < 0)
                return zr_error_errno(err, errno, "socket");

        struct stat st;
        if (lstat(path, &st) == 0) {
                if (!S_ISSOCK(st.st_mode)) {
                        r = zr_error_set(err, EEXIST, "%s exists and is not a socket", path);
                        goto fail;
                }
                if (socket_is_live(&sa)) {
                        r = zr_error_set(err, EADDRINUSE, "a daemon already listens on %s", path);
                        goto fail;
                }
                unlink(path);
        }
        /* Bind with a tight umask so the socket never exists with looser permissions. */
        mode_t old = umask(0777 & ~mode);
        r = bind(fd, (struct sockaddr *)&sa, sizeof(sa));
        int e = errno;
        umask(old);
        if (r < 0) {
                r = zr_error_errno(err, e, "bind %s", path);
                goto fail;
        }
        if (chmod(path, mode) < 0 || (gid != (gid_t)-1 && chown(path, (uid_t)-1, gid) < 0)) {
                r = zr_error_errno(err, errno, "setting owner and mode of %s", path);
                unlink(path);
                goto fail;
        }
        if (listen(fd, ZR_LISTEN_BACKLOG) < 0) {
                r = zr_error_errno(err, errno, "listen %s", path);
                unlink(path);
                goto fail;
        }
        *ret_fd = fd;
        return 0;
fail:
        close(fd);
        return r;
}
