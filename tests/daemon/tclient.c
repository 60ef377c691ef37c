/* tclient.c: the test-side client of zrecordd (tclient.h). */
#include "tclient.h"

#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

static int wait_readable(int fd, int ms) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        int r;
        do
                r = poll(&p, 1, ms);
        while (r < 0 && errno == EINTR);
        return r;
}

void td_start(td_daemon *d, const char *const *extra) {
        td_start_env(d, extra, NULL, false);
}

void td_start_env(td_daemon *d, const char *const *extra, const char *const *env,
                  bool activate) {
        const char *bin = getenv("ZRECORDD");
        ck_assert_msg(bin, "ZRECORDD is not set");
        memset(d, 0, sizeof(*d));
        snprintf(d->dir, sizeof(d->dir), "/tmp/zrd-test-XXXXXX");
        ck_assert_ptr_nonnull(mkdtemp(d->dir));
        snprintf(d->sock, sizeof(d->sock), "%s/run/zrecordd.sock", d->dir);
        snprintf(d->log, sizeof(d->log), "%s/log", d->dir);
        char npath[320];
        snprintf(npath, sizeof(npath), "%s/notify", d->dir);
        d->notify_fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
        ck_assert_int_ge(d->notify_fd, 0);
        struct sockaddr_un sa = {.sun_family = AF_UNIX};
        snprintf(sa.sun_path, sizeof(sa.sun_path), "%.100s", npath);
        ck_assert_int_eq(bind(d->notify_fd, (struct sockaddr *)&sa, sizeof(sa)), 0);

        char sockarg[340];
        snprintf(sockarg, sizeof(sockarg), "--socket=%s", d->sock);
        const char *argv[32] = {bin, sockarg, "--threads=2", "--log-level=debug"};
        int argc = 4;
        int lfd = -1;
        if (activate) {
                /* The service manager's part: bind and listen, pass it as fd 3. */
                char run[320];
                snprintf(run, sizeof(run), "%s/run", d->dir);
                ck_assert_int_eq(mkdir(run, 0755), 0);
                lfd = socket(AF_UNIX, SOCK_STREAM, 0);
                ck_assert_int_ge(lfd, 0);
                struct sockaddr_un la = {.sun_family = AF_UNIX};
                snprintf(la.sun_path, sizeof(la.sun_path), "%.100s", d->sock);
                ck_assert_int_eq(bind(lfd, (struct sockaddr *)&la, sizeof(la)), 0);
                ck_assert_int_eq(listen(lfd, 16), 0);
                argv[1] = "--log-level=debug"; /* no --socket: the passed one is used */
        }
        for (int i = 0; extra && extra[i] && argc < 31; i++)
                argv[argc++] = extra[i];
        argv[argc] = NULL;
        d->pid = fork();
        ck_assert_int_ge(d->pid, 0);
        if (d->pid == 0) {
                int logfd = open(d->log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
                if (logfd >= 0) {
                        dup2(logfd, 2);
                        close(logfd);
                }
                setenv("NOTIFY_SOCKET", npath, 1);
                unsetenv("LISTEN_FDS");
                unsetenv("LISTEN_PID");
                unsetenv("WATCHDOG_USEC");
                for (int i = 0; env && env[i]; i++)
                        putenv((char *)env[i]);
                char pidbuf[32];
                snprintf(pidbuf, sizeof(pidbuf), "%d", (int)getpid());
                if (getenv("WATCHDOG_USEC"))
                        setenv("WATCHDOG_PID", pidbuf, 1);
                if (activate) {
                        if (lfd != 3) {
                                dup2(lfd, 3);
                                close(lfd);
                        }
                        setenv("LISTEN_FDS", "1", 1);
                        setenv("LISTEN_PID", pidbuf, 1);
                }
                execv(bin, (char *const *)argv);
                _exit(127);
        }
        if (lfd >= 0)
                close(lfd);
        ck_assert_msg(td_wait_notify(d, "READY=1"), "zrecordd did not become ready");
}

bool td_wait_notify(td_daemon *d, const char *what) {
        char buf[1024];
        for (;;) {
                if (wait_readable(d->notify_fd, TD_TIMEOUT_MS) <= 0)
                        return false;
                ssize_t n = recv(d->notify_fd, buf, sizeof(buf) - 1, 0);
                if (n < 0)
                        return false;
                buf[n] = 0;
                if (strstr(buf, what))
                        return true;
        }
}

int td_wait_exit(td_daemon *d) {
        int status = 0;
        ck_assert_int_eq(waitpid(d->pid, &status, 0), d->pid);
        d->pid = 0;
        return status;
}

int td_stop(td_daemon *d, int sig) {
        if (d->pid <= 0)
                return 0;
        kill(d->pid, sig);
        return td_wait_exit(d);
}

static void rm_rf_at(int dfd) {
        DIR *dir = fdopendir(dfd);
        if (!dir)
                return;
        struct dirent *de;
        while ((de = readdir(dir))) {
                if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
                        continue;
                if (unlinkat(dirfd(dir), de->d_name, 0) < 0 && (errno == EISDIR || errno == EPERM)) {
                        int sub = openat(dirfd(dir), de->d_name, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
                        if (sub >= 0)
                                rm_rf_at(sub);
                        unlinkat(dirfd(dir), de->d_name, AT_REMOVEDIR);
                }
        }
        closedir(dir);
}

void td_cleanup(td_daemon *d) {
        /* A clean SIGTERM drain, exit status 0: under the sanitizers this also
         * says the daemon made no memory error and leaked nothing. */
        if (d->pid > 0) {
                int status = td_stop(d, SIGTERM);
                ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0,
                              "zrecordd exited with status %#x (log: %s)", status, d->log);
        }
        if (d->notify_fd > 0)
                close(d->notify_fd);
        d->notify_fd = -1;
        if (getenv("TD_KEEP"))
                return;
        int fd = open(d->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (fd >= 0)
                rm_rf_at(fd);
        rmdir(d->dir);
}

int td_fd_count(const td_daemon *d) {
        char path[64];
        snprintf(path, sizeof(path), "/proc/%d/fd", (int)d->pid);
        DIR *dir = opendir(path);
        ck_assert_ptr_nonnull(dir);
        int n = 0;
        struct dirent *de;
        while ((de = readdir(dir)))
                if (de->d_name[0] != '.')
                        n++;
        closedir(dir);
        return n;
}

bool td_log_contains(const td_daemon *d, const char *needle) {
        FILE *f = fopen(d->log, "re");
        if (!f)
                return false;
        char line[4096];
        bool found = false;
        while (!found && fgets(line, sizeof(line), f))
                found = strstr(line, needle) != NULL;
        fclose(f);
        return found;
}

int td_connect(const td_daemon *d) {
        int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        ck_assert_int_ge(fd, 0);
        struct sockaddr_un sa = {.sun_family = AF_UNIX};
        snprintf(sa.sun_path, sizeof(sa.sun_path), "%.100s", d->sock);
        ck_assert_int_eq(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
        return fd;
}

int td_send_raw(int fd, const void *p, size_t len, const int *fds, unsigned nfds) {
        union {
                struct cmsghdr align;
                char buf[CMSG_SPACE(sizeof(int) * 253)]; /* SCM_MAX_FD: tests send too many */
        } control;
        const uint8_t *b = p;
        size_t off = 0;
        while (off < len) {
                struct iovec iov = {(void *)(b + off), len - off};
                struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1};
                if (off == 0 && nfds > 0) {
                        mh.msg_control = control.buf;
                        mh.msg_controllen = CMSG_SPACE(sizeof(int) * nfds);
                        struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
                        cm->cmsg_level = SOL_SOCKET;
                        cm->cmsg_type = SCM_RIGHTS;
                        cm->cmsg_len = CMSG_LEN(sizeof(int) * nfds);
                        memcpy(CMSG_DATA(cm), fds, sizeof(int) * nfds);
                }
                ssize_t n = sendmsg(fd, &mh, MSG_NOSIGNAL);
                if (n < 0) {
                        if (errno == EINTR)
                                continue;
                        return -errno;
                }
                off += (size_t)n;
        }
        return 0;
}

int td_send(int fd, zr_wire_writer *w, const int *fds, unsigned nfds) {
        const uint8_t *frame;
        size_t size;
        ck_assert_int_eq(zr_wire_writer_finish(w, ZR_FRAME_MAX_CEILING, &frame, &size, NULL), 0);
        return td_send_raw(fd, frame, size, fds, nfds);
}

static int recv_exact(int fd, uint8_t *p, size_t len, td_msg *m) {
        size_t off = 0;
        while (off < len) {
                if (wait_readable(fd, TD_TIMEOUT_MS) <= 0)
                        return -ETIMEDOUT;
                union {
                        struct cmsghdr align;
                        char buf[CMSG_SPACE(sizeof(int) * 8)];
                } control;
                struct iovec iov = {p + off, len - off};
                struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = control.buf,
                                    .msg_controllen = sizeof(control.buf)};
                ssize_t n = recvmsg(fd, &mh, MSG_CMSG_CLOEXEC);
                if (n < 0) {
                        if (errno == EINTR)
                                continue;
                        return errno == ECONNRESET ? -EPIPE : -errno;
                }
                for (struct cmsghdr *cm = CMSG_FIRSTHDR(&mh); cm; cm = CMSG_NXTHDR(&mh, cm)) {
                        if (cm->cmsg_type != SCM_RIGHTS)
                                continue;
                        size_t k = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
                        int *fds = (int *)CMSG_DATA(cm);
                        for (size_t i = 0; i < k; i++) {
                                if (m->nfds < 8)
                                        m->fds[m->nfds++] = fds[i];
                                else
                                        close(fds[i]);
                        }
                }
                if (n == 0)
                        return -EPIPE;
                off += (size_t)n;
        }
        return 0;
}

int td_recv(int fd, td_msg *m) {
        uint8_t hdr[4];
        memset(m, 0, sizeof(*m));
        int r = recv_exact(fd, hdr, 4, m);
        if (r < 0)
                return r;
        uint32_t len = (uint32_t)hdr[0] | (uint32_t)hdr[1] << 8 | (uint32_t)hdr[2] << 16 |
                       (uint32_t)hdr[3] << 24;
        ck_assert_uint_gt(len, 0);
        ck_assert_uint_le(len, ZR_FRAME_MAX_CEILING);
        m->bytes = malloc(len);
        m->len = len;
        r = recv_exact(fd, m->bytes, len, m);
        if (r < 0)
                return r;
        zr_wire_error werr = {0};
        ck_assert_msg(zr_wire_body_decode(m->bytes, len, NULL, &m->body, &werr) == 0,
                      "undecodable frame from the daemon: %s", werr.message);
        m->root = zr_wire_body_root(m->body);
        ck_assert_int_eq(zr_wire_get_str_copy(m->root, "kind", m->kind, sizeof(m->kind), NULL), 0);
        return 0;
}

void td_msg_free(td_msg *m) {
        for (unsigned i = 0; i < m->nfds; i++)
                close(m->fds[i]);
        m->nfds = 0;
        m->body = zr_wire_body_free(m->body);
        free(m->bytes);
        m->bytes = NULL;
}

uint64_t td_u64(const td_msg *m, const char *key) {
        uint64_t v = 0;
        zr_wire_error werr = {0};
        ck_assert_msg(zr_wire_get_u64(m->root, key, &v, &werr) == 0, "%s", werr.message);
        return v;
}

bool td_has(const td_msg *m, const char *key) {
        return zr_wire_find(m->root, key) != NULL;
}

const uint8_t *td_u64s(const td_msg *m, const char *key, size_t *ret_n) {
        const uint8_t *p = NULL;
        zr_wire_error werr = {0};
        ck_assert_msg(zr_wire_get_u64s(m->root, key, &p, ret_n, &werr) == 0, "%s", werr.message);
        return p;
}

int td_code(const td_msg *m) {
        if (strcmp(m->kind, "ok") == 0)
                return 0;
        ck_assert_msg(!strcmp(m->kind, "error") || !strcmp(m->kind, "fault"), "kind %s", m->kind);
        return (int)td_u64(m, "code");
}

void td_begin(zr_wire_writer *w, const char *kind, uint64_t id) {
        zr_wire_writer_init(w);
        zr_wire_writer_begin_message(w, kind, true, id);
}

int td_call(int fd, zr_wire_writer *w, const int *fds, unsigned nfds, td_msg *m) {
        ck_assert_int_eq(td_send(fd, w, fds, nfds), 0);
        zr_wire_writer_destroy(w);
        int r = td_recv(fd, m);
        ck_assert_msg(r == 0, "no reply: %s", strerror(-r));
        return td_code(m);
}

int td_call_past_events(int fd, zr_wire_writer *w, const int *fds, unsigned nfds, td_msg *m) {
        ck_assert_int_eq(td_send(fd, w, fds, nfds), 0);
        zr_wire_writer_destroy(w);
        for (;;) {
                int r = td_recv(fd, m);
                ck_assert_msg(r == 0, "no reply: %s", strerror(-r));
                if (strcmp(m->kind, "batch") && strcmp(m->kind, "ring") &&
                    strcmp(m->kind, "ring_close") && strcmp(m->kind, "loader_end"))
                        return td_code(m);
                td_msg_free(m);
        }
}

int td_connect_hello(const td_daemon *d) {
        int fd = td_connect(d);
        zr_wire_writer w;
        td_msg m;
        td_begin(&w, "hello", 1);
        zr_wire_put_u64(&w, "min_version", 1);
        zr_wire_put_u64(&w, "max_version", 1);
        zr_wire_put_str(&w, "client", "tclient");
        ck_assert_int_eq(td_call(fd, &w, NULL, 0, &m), 0);
        td_msg_free(&m);
        return fd;
}

int td_memfd(const void *p, size_t len, bool seal) {
        int fd = memfd_create("td", MFD_CLOEXEC | MFD_ALLOW_SEALING);
        ck_assert_int_ge(fd, 0);
        const uint8_t *b = p;
        size_t off = 0;
        ck_assert_int_eq(ftruncate(fd, (off_t)len), 0);
        while (off < len) {
                ssize_t n = pwrite(fd, b + off, len - off, (off_t)off);
                ck_assert_int_gt(n, 0);
                off += (size_t)n;
        }
        if (seal)
                ck_assert_int_eq(fcntl(fd, F_ADD_SEALS, F_SEAL_WRITE | F_SEAL_SHRINK | F_SEAL_GROW), 0);
        return fd;
}

int td_open_dir(const char *path) {
        int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        ck_assert_msg(fd >= 0, "open %s: %s", path, strerror(errno));
        return fd;
}
