/* harden.c: helpers of the hardening tests (harden.h). */
#include "harden.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

unsigned hd_failures;
unsigned hd_checks;

uint64_t hd_env_u64(const char *name, uint64_t def) {
        const char *v = getenv(name);
        if (!v || !*v)
                return def;
        return strtoull(v, NULL, 0);
}

uint64_t hd_now_usec(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

uint64_t hd_mix(uint64_t x) {
        x += UINT64_C(0x9e3779b97f4a7c15);
        x = (x ^ (x >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
        x = (x ^ (x >> 27)) * UINT64_C(0x94d049bb133111eb);
        return x ^ (x >> 31);
}

uint64_t hd_rand(uint64_t *state) {
        *state += UINT64_C(0x9e3779b97f4a7c15);
        return hd_mix(*state);
}

uint64_t hd_hash(uint64_t h, const void *p, size_t n) {
        const uint8_t *b = p;
        size_t i = 0;
        for (; i + 8 <= n; i += 8) {
                uint64_t v;
                memcpy(&v, b + i, 8);
                h = (h ^ v) * UINT64_C(0x100000001b3);
                h ^= h >> 29;
        }
        for (; i < n; i++)
                h = (h ^ b[i]) * UINT64_C(0x100000001b3);
        return h ^ (h >> 32) ^ n;
}

uint64_t hd_record_size(uint64_t id, uint64_t min, uint64_t max) {
        if (max <= min)
                return min;
        return min + hd_mix(id ^ UINT64_C(0x51ce)) % (max - min + 1);
}

/* Byte k of record id past its 8-byte id: a few words of a small alphabet, so
 * the zstd codecs (and a dictionary) have something to compress. */
static inline uint8_t record_byte(uint64_t id, uint64_t k, uint64_t word) {
        return (uint8_t)('a' + ((word >> ((k & 7) * 5)) & 15) + (id & 3));
}

void hd_record_fill(uint64_t id, void *dst, uint64_t size) {
        uint8_t *p = dst;
        uint8_t idb[8];
        for (int i = 0; i < 8; i++)
                idb[i] = (uint8_t)(id >> (8 * i));
        for (uint64_t k = 0; k < size && k < 8; k++)
                p[k] = idb[k];
        uint64_t word = 0;
        for (uint64_t k = 8; k < size; k++) {
                if ((k & 7) == 0)
                        word = hd_mix(id * 31 + (k >> 6));
                p[k] = record_byte(id, k, word);
        }
}

bool hd_record_check(uint64_t id, const void *p, uint64_t size) {
        uint8_t buf[4096];
        const uint8_t *q = p;
        if (size <= sizeof(buf)) {
                hd_record_fill(id, buf, size);
                return memcmp(buf, q, size) == 0;
        }
        uint8_t *big = malloc(size);
        if (!big)
                return false;
        hd_record_fill(id, big, size);
        bool ok = memcmp(big, q, size) == 0;
        free(big);
        return ok;
}

int hd_proc_read(pid_t pid, hd_proc *ret) {
        char path[64], line[512];
        memset(ret, 0, sizeof(*ret));
        snprintf(path, sizeof(path), "/proc/%d/fd", (int)pid);
        DIR *dir = opendir(path);
        if (!dir)
                return -errno;
        struct dirent *de;
        while ((de = readdir(dir)))
                if (de->d_name[0] != '.')
                        ret->fds++;
        closedir(dir);
        snprintf(path, sizeof(path), "/proc/%d/maps", (int)pid);
        FILE *f = fopen(path, "re");
        if (!f)
                return -errno;
        int c, prev = '\n';
        while ((c = fgetc(f)) != EOF) {
                if (c == '\n')
                        ret->maps++;
                prev = c;
        }
        if (prev != '\n')
                ret->maps++;
        fclose(f);
        snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
        f = fopen(path, "re");
        if (!f)
                return -errno;
        while (fgets(line, sizeof(line), f))
                if (strncmp(line, "VmRSS:", 6) == 0)
                        ret->rss_kib = strtoull(line + 6, NULL, 10);
                else if (strncmp(line, "RssAnon:", 8) == 0)
                        ret->anon_kib = strtoull(line + 8, NULL, 10);
                else if (strncmp(line, "RssFile:", 8) == 0)
                        ret->file_kib = strtoull(line + 8, NULL, 10);
                else if (strncmp(line, "RssShmem:", 9) == 0)
                        ret->shmem_kib = strtoull(line + 9, NULL, 10);
        fclose(f);
        return 0;
}

void hd_daemon_start(test_daemon *d, const char *const *extra) {
        if (!test_daemon_binary()) {
                printf("no zrecordd in this build: skipped\n");
                exit(TEST_SKIP);
        }
        int r = test_daemon_start(d, extra);
        if (r < 0) {
                fprintf(stderr, "zrecordd did not start: %s\n", strerror(-r));
                exit(1);
        }
}

bool hd_daemon_kill(test_daemon *d) {
        int status = 0;
        if (d->pid <= 0)
                return false;
        kill(d->pid, SIGKILL);
        while (waitpid(d->pid, &status, 0) < 0 && errno == EINTR)
                ;
        d->pid = 0;
        test_rmtree(d->dir);
        return WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL;
}

bool hd_daemon_stop(test_daemon *d) {
        return test_daemon_stop(d) == 0;
}

int hd_daemon_wait_status;

bool hd_daemon_alive(test_daemon *d) {
        int status = 0;
        if (d->pid <= 0)
                return false;
        if (waitpid(d->pid, &status, WNOHANG) == 0)
                return true;
        hd_daemon_wait_status = status;
        d->pid = 0;
        return false;
}

void hd_tempdir(char *buf, size_t size, const char *tag) {
        snprintf(buf, size, "/tmp/zr-%s-XXXXXX", tag);
        if (!mkdtemp(buf)) {
                perror("mkdtemp");
                exit(1);
        }
}

/* ---- raw frames --------------------------------------------------------- */

int hd_connect(const test_daemon *d) {
        int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0)
                return -errno;
        struct sockaddr_un sa = {.sun_family = AF_UNIX};
        snprintf(sa.sun_path, sizeof(sa.sun_path), "%.100s", d->socket);
        if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
                int r = -errno;
                close(fd);
                return r;
        }
        return fd;
}

int hd_send_raw(int fd, const void *p, size_t len, const int *fds, unsigned nfds) {
        union {
                struct cmsghdr align;
                char buf[CMSG_SPACE(sizeof(int) * 253)];
        } control;
        const uint8_t *b = p;
        size_t off = 0;
        while (off < len) {
                struct iovec iov = {(void *)(b + off), len - off};
                struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1};
                if (off == 0 && nfds > 0) {
                        memset(&control, 0, sizeof(control));
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

int hd_send(int fd, zr_wire_writer *w, const int *fds, unsigned nfds) {
        const uint8_t *frame;
        size_t size;
        int r = zr_wire_writer_finish(w, ZR_FRAME_MAX_CEILING, &frame, &size, NULL);
        if (r < 0)
                return r;
        return hd_send_raw(fd, frame, size, fds, nfds);
}

static int recv_exact(int fd, uint8_t *p, size_t len, hd_msg *m, int timeout_ms) {
        size_t off = 0;
        while (off < len) {
                struct pollfd pf = {.fd = fd, .events = POLLIN};
                int k = poll(&pf, 1, timeout_ms);
                if (k < 0 && errno == EINTR)
                        continue;
                if (k == 0)
                        return -ETIMEDOUT;
                if (k < 0)
                        return -errno;
                union {
                        struct cmsghdr align;
                        char buf[CMSG_SPACE(sizeof(int) * 8)];
                } control;
                struct iovec iov = {p + off, len - off};
                struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = control.buf,
                                    .msg_controllen = sizeof(control.buf)};
                ssize_t n = recvmsg(fd, &mh, MSG_CMSG_CLOEXEC);
                if (n < 0) {
                        if (errno == EINTR || errno == EAGAIN)
                                continue;
                        return errno == ECONNRESET ? -EPIPE : -errno;
                }
                for (struct cmsghdr *cm = CMSG_FIRSTHDR(&mh); cm; cm = CMSG_NXTHDR(&mh, cm)) {
                        if (cm->cmsg_type != SCM_RIGHTS)
                                continue;
                        size_t k2 = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
                        int *fds = (int *)CMSG_DATA(cm);
                        for (size_t i = 0; i < k2; i++) {
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

int hd_recv(int fd, hd_msg *m, int timeout_ms) {
        uint8_t hdr[4];
        memset(m, 0, sizeof(*m));
        int r = recv_exact(fd, hdr, 4, m, timeout_ms);
        if (r < 0)
                return r;
        uint32_t len = (uint32_t)hdr[0] | (uint32_t)hdr[1] << 8 | (uint32_t)hdr[2] << 16 |
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

void hd_msg_free(hd_msg *m) {
        for (unsigned i = 0; i < m->nfds; i++)
                close(m->fds[i]);
        m->nfds = 0;
        m->body = zr_wire_body_free(m->body);
        free(m->bytes);
        m->bytes = NULL;
}

uint64_t hd_u64(const hd_msg *m, const char *key) {
        uint64_t v = 0;
        if (!m->root || zr_wire_get_u64(m->root, key, &v, NULL) < 0)
                return 0;
        return v;
}

int hd_code(const hd_msg *m) {
        if (strcmp(m->kind, "ok") == 0)
                return 0;
        if (!strcmp(m->kind, "error") || !strcmp(m->kind, "fault"))
                return (int)hd_u64(m, "code");
        return -1;
}

void hd_begin(zr_wire_writer *w, const char *kind, uint64_t id) {
        zr_wire_writer_init(w);
        zr_wire_writer_begin_message(w, kind, true, id);
}

int hd_call(int fd, zr_wire_writer *w, const int *fds, unsigned nfds, hd_msg *m) {
        int r = hd_send(fd, w, fds, nfds);
        zr_wire_writer_destroy(w);
        if (r < 0) {
                memset(m, 0, sizeof(*m));
                return r;
        }
        for (;;) {
                r = hd_recv(fd, m, 30000);
                if (r < 0)
                        return r;
                if (!strcmp(m->kind, "ok") || !strcmp(m->kind, "error") ||
                    !strcmp(m->kind, "fault"))
                        return hd_code(m);
                hd_msg_free(m); /* an event of a loader: not the reply */
        }
}

int hd_connect_hello(const test_daemon *d, int *ret_fd) {
        int fd = hd_connect(d);
        if (fd < 0)
                return fd;
        zr_wire_writer w;
        hd_msg m;
        hd_begin(&w, "hello", 1);
        zr_wire_put_u64(&w, "min_version", 1);
        zr_wire_put_u64(&w, "max_version", 1);
        zr_wire_put_str(&w, "client", "hardening");
        int r = hd_call(fd, &w, NULL, 0, &m);
        hd_msg_free(&m);
        if (r != 0) {
                close(fd);
                return r < 0 ? r : -r;
        }
        *ret_fd = fd;
        return 0;
}

int64_t hd_raw_open(int fd, const char *path, bool writable, uint64_t id) {
        char meta[512];
        snprintf(meta, sizeof(meta), "%s/meta.zr", path);
        int fds[2] = {open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC),
                      open(meta, (writable ? O_RDWR : O_RDONLY) | O_CLOEXEC)};
        if (fds[0] < 0 || fds[1] < 0) {
                if (fds[0] >= 0)
                        close(fds[0]);
                if (fds[1] >= 0)
                        close(fds[1]);
                return -ENOENT;
        }
        zr_wire_writer w;
        hd_msg m;
        hd_begin(&w, "dataset_open", id);
        zr_wire_put_bool(&w, "writable", writable);
        int r = hd_call(fd, &w, fds, 2, &m);
        close(fds[0]);
        close(fds[1]);
        int64_t h = r == 0 ? (int64_t)hd_u64(&m, "handle") : (r < 0 ? r : -r);
        hd_msg_free(&m);
        return h;
}
