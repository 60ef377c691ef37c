/* frames.c: raw frames to and from zrecordd (frames.h). */
#include "frames.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <grp.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "daemon.h"

int tl_connect(const char *path) {
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

        if (fd < 0)
                return -errno;
        snprintf(sa.sun_path, sizeof(sa.sun_path), "%.100s", path);
        if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
                int r = -errno;

                close(fd);
                return r;
        }
        return fd;
}

int tl_connect_as(const char *path, uid_t uid, gid_t gid) {
        union {
                struct cmsghdr align;
                char buf[CMSG_SPACE(sizeof(int))];
        } control;
        int sp[2], status = 0, r = 0;
        char code = 0;
        pid_t pid;

        if (geteuid() != 0)
                return -EPERM;
        if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp) < 0)
                return -errno;
        pid = fork();
        if (pid < 0) {
                r = -errno;
                close(sp[0]);
                close(sp[1]);
                return r;
        }
        if (pid == 0) {
                int fd = -EPERM;

                if (setgroups(0, NULL) == 0 && setresgid(gid, gid, gid) == 0 &&
                    setresuid(uid, uid, uid) == 0)
                        fd = tl_connect(path);
                code = fd < 0 ? (char)-fd : 0;
                r = tl_send_raw(sp[1], &code, 1, fd >= 0 ? &fd : NULL, fd >= 0 ? 1 : 0);
                _exit(r < 0);
        }
        close(sp[1]);
        memset(&control, 0, sizeof(control));
        struct iovec iov = { &code, 1 };
        struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = control.buf,
                             .msg_controllen = sizeof(control.buf) };
        ssize_t n;
        while ((n = recvmsg(sp[0], &mh, MSG_CMSG_CLOEXEC)) < 0 && errno == EINTR)
                ;
        r = n == 1 ? -(int)code : n < 0 ? -errno : -EPIPE;
        struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
        if (n == 1 && cm && cm->cmsg_type == SCM_RIGHTS)
                memcpy(&r, CMSG_DATA(cm), sizeof(int));
        else if (r == 0)
                r = -EPROTO;
        close(sp[0]);
        while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
                ;
        return r;
}

int tl_send_raw(int fd, const void *p, size_t len, const int *fds, unsigned nfds) {
        union {
                struct cmsghdr align;
                char buf[CMSG_SPACE(sizeof(int) * 253)]; /* SCM_MAX_FD */
        } control;
        const uint8_t *b = p;
        size_t off = 0;

        while (off < len) {
                struct iovec iov = { (void *)(b + off), len - off };
                struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };
                ssize_t n;

                if (off == 0 && nfds > 0) {
                        struct cmsghdr *cm;

                        memset(&control, 0, sizeof(control));
                        mh.msg_control = control.buf;
                        mh.msg_controllen = CMSG_SPACE(sizeof(int) * nfds);
                        cm = CMSG_FIRSTHDR(&mh);
                        cm->cmsg_level = SOL_SOCKET;
                        cm->cmsg_type = SCM_RIGHTS;
                        cm->cmsg_len = CMSG_LEN(sizeof(int) * nfds);
                        memcpy(CMSG_DATA(cm), fds, sizeof(int) * nfds);
                }
                n = sendmsg(fd, &mh, MSG_NOSIGNAL);
                if (n < 0) {
                        if (errno == EINTR)
                                continue;
                        return -errno;
                }
                off += (size_t)n;
        }
        return 0;
}

int tl_send(int fd, zr_wire_writer *w, const int *fds, unsigned nfds) {
        const uint8_t *frame;
        size_t size;
        int r = zr_wire_writer_finish(w, ZR_FRAME_MAX_CEILING, &frame, &size, NULL);

        if (r < 0)
                return r;
        return tl_send_raw(fd, frame, size, fds, nfds);
}

/* Keeps the descriptors of a received control message in m (8 at most). */
static void take_fds(struct msghdr *mh, tl_msg *m) {
        for (struct cmsghdr *cm = CMSG_FIRSTHDR(mh); cm; cm = CMSG_NXTHDR(mh, cm)) {
                size_t k;
                int *fds;

                if (cm->cmsg_type != SCM_RIGHTS)
                        continue;
                k = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
                fds = (int *)CMSG_DATA(cm);
                for (size_t i = 0; i < k; i++) {
                        if (m->nfds < 8)
                                m->fds[m->nfds++] = fds[i];
                        else
                                close(fds[i]);
                }
        }
}

static int recv_exact(int fd, uint8_t *p, size_t len, tl_msg *m, int timeout_ms) {
        size_t off = 0;

        while (off < len) {
                union {
                        struct cmsghdr align;
                        char buf[CMSG_SPACE(sizeof(int) * 8)];
                } control;
                struct pollfd pf = { .fd = fd, .events = POLLIN };
                struct iovec iov = { p + off, len - off };
                struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1,
                                     .msg_control = control.buf,
                                     .msg_controllen = sizeof(control.buf) };
                int k = poll(&pf, 1, timeout_ms);
                ssize_t n;

                if (k < 0 && errno == EINTR)
                        continue;
                if (k == 0)
                        return -ETIMEDOUT;
                if (k < 0)
                        return -errno;
                n = recvmsg(fd, &mh, MSG_CMSG_CLOEXEC);
                if (n < 0) {
                        if (errno == EINTR || errno == EAGAIN)
                                continue;
                        return errno == ECONNRESET ? -EPIPE : -errno;
                }
                take_fds(&mh, m);
                if (n == 0)
                        return -EPIPE;
                off += (size_t)n;
        }
        return 0;
}

static int recv_frame(int fd, tl_msg *m, int timeout_ms) {
        uint8_t hdr[4];
        uint32_t len;
        int r = recv_exact(fd, hdr, 4, m, timeout_ms);

        if (r < 0)
                return r;
        len = (uint32_t)hdr[0] | (uint32_t)hdr[1] << 8 | (uint32_t)hdr[2] << 16 |
              (uint32_t)hdr[3] << 24;
        if (len == 0 || len > ZR_FRAME_MAX_CEILING)
                return -EPROTO;
        m->bytes = malloc(len);
        if (!m->bytes)
                return -ENOMEM;
        m->len = len;
        r = recv_exact(fd, m->bytes, len, m, timeout_ms);
        if (r < 0)
                return r;
        if (zr_wire_body_decode(m->bytes, len, NULL, &m->body, NULL) < 0)
                return -EPROTO;
        m->root = zr_wire_body_root(m->body);
        if (zr_wire_get_str_copy(m->root, "kind", m->kind, sizeof(m->kind), NULL) < 0)
                return -EPROTO;
        return 0;
}

int tl_recv(int fd, tl_msg *m, int timeout_ms) {
        int r;

        memset(m, 0, sizeof(*m));
        r = recv_frame(fd, m, timeout_ms);
        if (r < 0)
                tl_msg_free(m);
        return r;
}

void tl_msg_free(tl_msg *m) {
        for (unsigned i = 0; i < m->nfds; i++)
                close(m->fds[i]);
        m->nfds = 0;
        m->body = zr_wire_body_free(m->body);
        m->root = NULL;
        free(m->bytes);
        m->bytes = NULL;
        m->len = 0;
}

uint64_t tl_u64(const tl_msg *m, const char *key) {
        uint64_t v = 0;

        if (!m->root || zr_wire_get_u64(m->root, key, &v, NULL) < 0)
                return 0;
        return v;
}

int tl_code(const tl_msg *m) {
        if (strcmp(m->kind, "ok") == 0)
                return 0;
        if (!strcmp(m->kind, "error") || !strcmp(m->kind, "fault"))
                return (int)tl_u64(m, "code");
        return -1;
}

bool tl_is_loader_event(const tl_msg *m) {
        return !strcmp(m->kind, "batch") || !strcmp(m->kind, "ring") ||
               !strcmp(m->kind, "ring_close") || !strcmp(m->kind, "loader_end");
}

void tl_begin(zr_wire_writer *w, const char *kind, uint64_t id) {
        zr_wire_writer_init(w);
        zr_wire_writer_begin_message(w, kind, true, id);
}

void tl_put_loader_open(zr_wire_writer *w, uint64_t h, const char *sampler, uint64_t batch,
                        uint64_t seed, uint64_t start, uint64_t prefetch) {
        zr_wire_begin_array(w, "streams");
        zr_wire_begin_map(w, NULL);
        zr_wire_put_u64(w, "handle", h);
        zr_wire_end(w);
        zr_wire_end(w);
        zr_wire_put_str(w, "sampler", sampler);
        zr_wire_put_u64(w, "batch_size", batch);
        zr_wire_put_u64(w, "seed", seed);
        zr_wire_put_u64(w, "start_step", start);
        zr_wire_put_u64(w, "prefetch", prefetch);
}

int tl_call(int fd, zr_wire_writer *w, const int *fds, unsigned nfds, tl_msg *m) {
        int r = tl_send(fd, w, fds, nfds);

        zr_wire_writer_destroy(w);
        memset(m, 0, sizeof(*m));
        while (r == 0) {
                r = tl_recv(fd, m, TL_TIMEOUT_MS);
                if (r < 0)
                        return r;
                if (!tl_is_loader_event(m))
                        return tl_code(m);
                tl_msg_free(m);
        }
        return r;
}

int tl_connect_hello(const char *path, const char *client, int *ret_fd) {
        int fd = tl_connect(path), r;
        zr_wire_writer w;
        tl_msg m;

        if (fd < 0)
                return fd;
        tl_begin(&w, "hello", 1);
        zr_wire_put_u64(&w, "min_version", 1);
        zr_wire_put_u64(&w, "max_version", 1);
        zr_wire_put_str(&w, "client", client);
        r = tl_call(fd, &w, NULL, 0, &m);
        tl_msg_free(&m);
        if (r != 0) {
                close(fd);
                return r < 0 ? r : -r;
        }
        *ret_fd = fd;
        return 0;
}

int tl_memfd(const char *name, const void *p, size_t len, bool seal) {
        int fd = memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING), r = 0;
        const uint8_t *b = p;
        size_t off = 0;

        if (fd < 0)
                return -errno;
        if (ftruncate(fd, (off_t)len) < 0)
                r = -errno;
        while (r == 0 && off < len) {
                ssize_t n = pwrite(fd, b + off, len - off, (off_t)off);

                if (n <= 0)
                        r = n < 0 ? -errno : -EIO;
                else
                        off += (size_t)n;
        }
        if (r == 0 && seal &&
            fcntl(fd, F_ADD_SEALS, F_SEAL_WRITE | F_SEAL_SHRINK | F_SEAL_GROW) < 0)
                r = -errno;
        if (r < 0)
                close(fd);
        return r < 0 ? r : fd;
}
