/* daemon.c: the real zrecordd of the build, started for a test (daemon.h). */
#include "daemon.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "util.h"

const char *tl_daemon_binary(void) {
        const char *p = getenv("ZRECORDD");

        if (!p || !*p || access(p, X_OK) < 0)
                return NULL;
        return p;
}

char *tl_daemon_path(const tl_daemon *d, const char *name, char *buf) {
        snprintf(buf, PATH_MAX, "%s/%s", d->dir, name);
        return buf;
}

/* A listening socket bound to path (the service manager's part of activation). */
static int bind_listener(const char *path) {
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        int fd = socket(AF_UNIX, SOCK_STREAM, 0);

        if (fd < 0)
                return -errno;
        snprintf(sa.sun_path, sizeof(sa.sun_path), "%.100s", path);
        if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(fd, 16) < 0) {
                int r = -errno;

                close(fd);
                return r;
        }
        return fd;
}

/* The child: log to the directory, the environment of a service, exec. */
static void exec_daemon(const tl_daemon *d, const tl_daemon_options *o, const char *notify,
                        int lfd, const char *const *argv) {
        char pidbuf[32];
        int log = open(d->log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);

        if (log >= 0) {
                dup2(log, STDOUT_FILENO);
                dup2(log, STDERR_FILENO);
        }
        setenv("NOTIFY_SOCKET", notify, 1);
        unsetenv("LISTEN_FDS");
        unsetenv("LISTEN_PID");
        unsetenv("WATCHDOG_USEC");
        for (int i = 0; o->env && o->env[i]; i++)
                putenv((char *)o->env[i]);
        snprintf(pidbuf, sizeof(pidbuf), "%d", (int)getpid());
        if (getenv("WATCHDOG_USEC"))
                setenv("WATCHDOG_PID", pidbuf, 1);
        if (lfd >= 0) {
                if (lfd != 3) {
                        dup2(lfd, 3);
                        close(lfd);
                }
                setenv("LISTEN_FDS", "1", 1);
                setenv("LISTEN_PID", pidbuf, 1);
        }
        execv(argv[0], (char *const *)argv);
        _exit(127);
}

/* Waits for READY=1 on the notify socket, or for the daemon's exit. */
static int wait_ready(tl_daemon *d) {
        int pfd = (int)syscall(SYS_pidfd_open, d->pid, 0), r = 0;

        for (;;) {
                struct pollfd p[2] = { { .fd = d->notify_fd, .events = POLLIN },
                                       { .fd = pfd, .events = POLLIN } };
                char buf[512];
                ssize_t n;
                int k = poll(p, pfd >= 0 ? 2 : 1, TL_TIMEOUT_MS);

                if (k < 0 && errno == EINTR)
                        continue;
                if (k <= 0) {
                        r = k == 0 ? -ETIMEDOUT : -errno;
                        break;
                }
                if (p[1].revents & POLLIN) {
                        r = -ECHILD;
                        break;
                }
                n = recv(d->notify_fd, buf, sizeof(buf) - 1, 0);
                if (n < 0)
                        continue;
                buf[n] = 0;
                if (strstr(buf, "READY=1"))
                        break;
        }
        if (pfd >= 0)
                close(pfd);
        return r;
}

int tl_daemon_start(tl_daemon *d, const tl_daemon_options *o) {
        static const tl_daemon_options none = { 0 };
        const char *bin = tl_daemon_binary();
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        char notify[160], sockarg[200], levelarg[64], run[160];
        const char *argv[40];
        int argc = 0, lfd = -1, r = 0;

        memset(d, 0, sizeof(*d));
        d->notify_fd = -1;
        if (!o)
                o = &none;
        if (!bin)
                return -ENOENT;
        snprintf(d->dir, sizeof(d->dir), "/tmp/zr-test-XXXXXX");
        if (!mkdtemp(d->dir))
                return -errno;
        snprintf(run, sizeof(run), "%s/run", d->dir);
        snprintf(d->socket, sizeof(d->socket), "%s/run/zrecordd.sock", d->dir);
        snprintf(d->log, sizeof(d->log), "%s/daemon.log", d->dir);
        snprintf(notify, sizeof(notify), "%s/notify", d->dir);
        snprintf(sockarg, sizeof(sockarg), "--socket=%s", d->socket);
        snprintf(levelarg, sizeof(levelarg), "--log-level=%s",
                 o->log_level ? o->log_level : "notice");

        d->notify_fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
        if (d->notify_fd < 0)
                return -errno;
        memcpy(sa.sun_path, notify, strlen(notify) + 1);
        if (bind(d->notify_fd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
                return -errno;
        if (o->activate) {
                if (mkdir(run, 0755) < 0)
                        return -errno;
                lfd = bind_listener(d->socket);
                if (lfd < 0)
                        return lfd;
        }

        argv[argc++] = bin;
        if (!o->activate) /* activated: the passed socket is used */
                argv[argc++] = sockarg;
        argv[argc++] = "--threads=2";
        argv[argc++] = "--idle-exit=86400";
        argv[argc++] = levelarg;
        for (int i = 0; o->args && o->args[i] && argc < 39; i++)
                argv[argc++] = o->args[i];
        argv[argc] = NULL;

        d->pid = fork();
        if (d->pid < 0) {
                r = -errno;
                d->pid = 0;
        } else if (d->pid == 0) {
                exec_daemon(d, o, notify, lfd, argv);
        }
        if (lfd >= 0)
                close(lfd);
        if (r == 0)
                r = wait_ready(d);
        if (r == 0 && !o->keep_notify) {
                close(d->notify_fd);
                d->notify_fd = -1;
        }
        if (r < 0 && d->pid > 0) {
                kill(d->pid, SIGKILL);
                tl_daemon_stop(d, 0);
        }
        return r;
}

bool tl_daemon_wait_notify(tl_daemon *d, const char *what, int timeout_ms) {
        char buf[1024];

        if (d->notify_fd < 0)
                return false;
        for (;;) {
                struct pollfd p = { .fd = d->notify_fd, .events = POLLIN };
                int k = poll(&p, 1, timeout_ms);
                ssize_t n;

                if (k < 0 && errno == EINTR)
                        continue;
                if (k <= 0)
                        return false;
                n = recv(d->notify_fd, buf, sizeof(buf) - 1, 0);
                if (n < 0)
                        return false;
                buf[n] = 0;
                if (strstr(buf, what))
                        return true;
        }
}

int tl_daemon_stop(tl_daemon *d, int sig) {
        int status = 0;

        if (d->pid <= 0)
                return -1;
        if (sig)
                kill(d->pid, sig);
        while (waitpid(d->pid, &status, 0) < 0 && errno == EINTR)
                ;
        d->pid = 0;
        return status;
}

bool tl_daemon_alive(tl_daemon *d, int *ret_status) {
        int status = 0;

        if (d->pid <= 0)
                return false;
        if (waitpid(d->pid, &status, WNOHANG) == 0)
                return true;
        if (ret_status)
                *ret_status = status;
        d->pid = 0;
        return false;
}

void tl_daemon_remove(tl_daemon *d) {
        if (d->notify_fd >= 0)
                close(d->notify_fd);
        d->notify_fd = -1;
        if (d->dir[0] && !getenv("ZR_TEST_KEEP"))
                tl_rmtree(d->dir);
}

int tl_daemon_fd_count(const tl_daemon *d) {
        char path[64];
        struct dirent *de;
        DIR *dir;
        int n = 0;

        snprintf(path, sizeof(path), "/proc/%d/fd", (int)d->pid);
        dir = opendir(path);
        if (!dir)
                return -errno;
        while ((de = readdir(dir)))
                if (de->d_name[0] != '.')
                        n++;
        closedir(dir);
        return n;
}

bool tl_daemon_log_contains(const tl_daemon *d, const char *needle) {
        FILE *f = fopen(d->log, "re");
        char line[4096];
        bool found = false;

        if (!f)
                return false;
        while (!found && fgets(line, sizeof(line), f))
                found = strstr(line, needle) != NULL;
        fclose(f);
        return found;
}
