/* zrd-test.c: starting and stopping a real zrecordd for tests, and running
 * the zrecord tool with its output captured.
 *
 * Readiness is the daemon's own notify datagram (READY=1) on a socket the test
 * binds and passes as NOTIFY_SOCKET; poll() waits for it or for the daemon's
 * pidfd to say it exited, with a bound, so a broken daemon fails the test
 * instead of hanging it. Nothing here sleeps.
 */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
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

#include "zrd-test.h"

/* How long a daemon may take to say READY=1 (a slow ASan build on a busy
 * 2-core machine starts in well under a second). */
#define TEST_READY_TIMEOUT_MS 30000

const char *test_daemon_binary(void) {
        const char *p = getenv("ZRECORDD");

        if (!p || !*p || access(p, X_OK) < 0)
                return NULL;
        return p;
}

char *test_daemon_path(const test_daemon *d, const char *name, char *buf) {
        snprintf(buf, PATH_MAX, "%s/%s", d->dir, name);
        return buf;
}

static int pidfd_open_(pid_t pid) {
        return (int)syscall(SYS_pidfd_open, pid, 0);
}

int test_daemon_start(test_daemon *d, const char *const *extra) {
        const char *bin = test_daemon_binary();
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        char notify[160], sockarg[200];
        const char *argv[32];
        int nfd = -1, pfd = -1, r = 0, argc = 0;
        pid_t pid;

        if (!bin)
                return -ENOENT;
        memset(d, 0, sizeof(*d));
        snprintf(d->dir, sizeof(d->dir), "/tmp/zrc-test-XXXXXX");
        if (!mkdtemp(d->dir))
                return -errno;
        snprintf(d->socket, sizeof(d->socket), "%s/sock", d->dir);
        snprintf(d->log, sizeof(d->log), "%s/daemon.log", d->dir);
        snprintf(notify, sizeof(notify), "%s/notify", d->dir);
        snprintf(sockarg, sizeof(sockarg), "--socket=%s", d->socket);

        nfd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
        if (nfd < 0)
                return -errno;
        memcpy(sa.sun_path, notify, strlen(notify) + 1);
        if (bind(nfd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
                r = -errno;
                goto out;
        }

        argv[argc++] = bin;
        argv[argc++] = sockarg;
        argv[argc++] = "--threads=2";
        argv[argc++] = "--idle-exit=86400";
        argv[argc++] = "--log-level=notice";
        for (int i = 0; extra && extra[i] && argc < 30; i++)
                argv[argc++] = extra[i];
        argv[argc] = NULL;

        pid = fork();
        if (pid < 0) {
                r = -errno;
                goto out;
        }
        if (pid == 0) {
                int log = open(d->log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);

                if (log >= 0) {
                        dup2(log, STDOUT_FILENO);
                        dup2(log, STDERR_FILENO);
                }
                setenv("NOTIFY_SOCKET", notify, 1);
                unsetenv("LISTEN_FDS");
                unsetenv("LISTEN_PID");
                execv(bin, (char *const *)argv);
                _exit(127);
        }
        d->pid = pid;
        pfd = pidfd_open_(pid);

        for (;;) {
                struct pollfd p[2] = { { .fd = nfd, .events = POLLIN }, { .fd = pfd, .events = POLLIN } };
                char buf[512];
                ssize_t n;
                int k = poll(p, pfd >= 0 ? 2 : 1, TEST_READY_TIMEOUT_MS);

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
                n = recv(nfd, buf, sizeof(buf) - 1, 0);
                if (n < 0)
                        continue;
                buf[n] = 0;
                if (strstr(buf, "READY=1"))
                        break;
        }
        if (r < 0) {
                kill(pid, SIGKILL);
                waitpid(pid, NULL, 0);
                d->pid = 0;
        }
out:
        if (pfd >= 0)
                close(pfd);
        if (nfd >= 0)
                close(nfd);
        return r;
}

int test_daemon_stop(test_daemon *d) {
        int status = 0, r = -1;

        if (d->pid > 0) {
                kill(d->pid, SIGTERM);
                while (waitpid(d->pid, &status, 0) < 0 && errno == EINTR)
                        ;
                r = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
                d->pid = 0;
        }
        if (d->dir[0])
                test_rmtree(d->dir);
        return r;
}

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
        (void)st;
        (void)flag;
        (void)ftw;
        remove(path);
        return 0;
}

void test_rmtree(const char *dir) {
        nftw(dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

/* Reads fd to its end into a malloc()ed string. */
static char *slurp(int fd) {
        size_t len = 0, cap = 4096;
        char *s = malloc(cap);

        if (!s)
                return NULL;
        for (;;) {
                ssize_t n;

                if (cap - len < 2048) {
                        char *g = realloc(s, cap *= 2);

                        if (!g) {
                                free(s);
                                return NULL;
                        }
                        s = g;
                }
                n = read(fd, s + len, cap - len - 1);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n <= 0)
                        break;
                len += (size_t)n;
        }
        s[len] = 0;
        return s;
}

int test_run(char *const *argv, char **ret_out, char **ret_err) {
        char outname[] = "/tmp/zrc-out-XXXXXX", errname[] = "/tmp/zrc-err-XXXXXX";
        int ofd = mkostemp(outname, O_CLOEXEC), efd = mkostemp(errname, O_CLOEXEC);
        int status = 0;
        pid_t pid;

        /* files, not pipes: a child writing much output never blocks on us */
        if (ofd < 0 || efd < 0)
                return -1;
        unlink(outname);
        unlink(errname);
        pid = fork();
        if (pid < 0)
                return -1;
        if (pid == 0) {
                dup2(ofd, STDOUT_FILENO);
                dup2(efd, STDERR_FILENO);
                execv(argv[0], argv);
                _exit(127);
        }
        while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
                ;
        if (ret_out) {
                lseek(ofd, 0, SEEK_SET);
                *ret_out = slurp(ofd);
        }
        if (ret_err) {
                lseek(efd, 0, SEEK_SET);
                *ret_err = slurp(efd);
        }
        close(ofd);
        close(efd);
        return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}
