/* notify.c: sd_notify datagrams to $NOTIFY_SOCKET. See notify.h.
 * A fresh SOCK_DGRAM|SOCK_CLOEXEC socket per message: the daemon notifies a few
 * times a minute at most, so keeping one open buys nothing. Sends never block:
 * the loop thread calls this, and a notify socket whose reader stopped reading
 * (a full datagram queue) would otherwise hold every client. */
#include "server/notify.h"

#include <errno.h>
#include <stddef.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

int zr_notify(const char *state) {
        const char *path = getenv("NOTIFY_SOCKET");
        if (!path || !*path)
                return 0;
        struct sockaddr_un sa = {.sun_family = AF_UNIX};
        size_t len = strlen(path);
        if ((path[0] != '/' && path[0] != '@') || len >= sizeof(sa.sun_path))
                return -EINVAL;
        memcpy(sa.sun_path, path, len);
        if (path[0] == '@')
                sa.sun_path[0] = '\0';
        socklen_t salen = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + len +
                                      (path[0] == '@' ? 0 : 1));
        int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
        if (fd < 0)
                return -errno;
        int r = 0;
        if (sendto(fd, state, strlen(state), MSG_NOSIGNAL | MSG_DONTWAIT, (struct sockaddr *)&sa,
                   salen) < 0)
                r = -errno;
        close(fd);
        return r;
}

int zr_notifyf(const char *fmt, ...) {
        char buf[1024];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(buf, sizeof(buf), fmt, ap);
        va_end(ap);
        return zr_notify(buf);
}

uint64_t zr_notify_watchdog_usec(void) {
        const char *usec = getenv("WATCHDOG_USEC");
        if (!usec)
                return 0;
        const char *pid = getenv("WATCHDOG_PID");
        if (pid) {
                char *end;
                errno = 0;
                unsigned long long p = strtoull(pid, &end, 10);
                if (errno || *end || p != (unsigned long long)getpid())
                        return 0;
        }
        char *end;
        errno = 0;
        unsigned long long u = strtoull(usec, &end, 10);
        if (errno || *end || u == 0)
                return 0;
        return u;
}
