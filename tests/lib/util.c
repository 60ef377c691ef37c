/* util.c: small things the tests share (util.h). */
#include "util.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

uint64_t tl_mix64(uint64_t x) {
        x += UINT64_C(0x9e3779b97f4a7c15);
        x = (x ^ (x >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
        x = (x ^ (x >> 27)) * UINT64_C(0x94d049bb133111eb);
        return x ^ (x >> 31);
}

uint64_t tl_rand(uint64_t *state) {
        *state += UINT64_C(0x9e3779b97f4a7c15);
        return tl_mix64(*state);
}

uint64_t tl_env_u64(const char *name, uint64_t def) {
        const char *v = getenv(name);

        return v && *v ? strtoull(v, NULL, 0) : def;
}

uint64_t tl_now_ns(void) {
        struct timespec ts;

        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

double tl_seconds(void) {
        return (double)tl_now_ns() * 1e-9;
}

void tl_push_u64(uint64_t **v, size_t *n, size_t *cap, uint64_t x) {
        if (*n == *cap) {
                size_t c = *cap ? *cap * 2 : 1024;
                uint64_t *p = realloc(*v, c * sizeof(*p));

                if (!p)
                        tl_die("realloc");
                *v = p;
                *cap = c;
        }
        (*v)[(*n)++] = x;
}

int tl_cmp_double(const void *a, const void *b) {
        double x = *(const double *)a, y = *(const double *)b;

        return x < y ? -1 : x > y;
}

const char *tl_tmpdir(bool memory) {
        const char *t = getenv("TMPDIR");

        if (t && *t)
                return t;
        return memory && access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
}

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
        (void)st;
        (void)flag;
        (void)ftw;
        remove(path);
        return 0;
}

void tl_rmtree(const char *dir) {
        nftw(dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

/* One file of tl_copy_files(). */
static int copy_file(int from_dfd, int to_dfd, const char *name, off_t size, uint8_t *buf,
                     size_t prefix) {
        int in = openat(from_dfd, name, O_RDONLY | O_CLOEXEC);
        int out = openat(to_dfd, name, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
        ssize_t n = -1;
        int r = 0;

        if (in >= 0 && out >= 0)
                n = pread(in, buf, prefix, 0);
        if (n < 0 || (ssize_t)syscall(SYS_pwrite64, out, buf, (size_t)n, 0) != n ||
            syscall(SYS_ftruncate, out, size) < 0)
                r = errno ? -errno : -EIO;
        if (out >= 0)
                close(out);
        if (in >= 0)
                close(in);
        return r;
}

int tl_copy_files(const char *from, int to_dfd, size_t prefix, const char **ret_name) {
        static char failed[PATH_MAX + 258];
        DIR *d = opendir(from);
        uint8_t *buf = malloc(prefix);
        struct dirent *e;
        int r = 0;

        if (ret_name)
                *ret_name = from;
        if (!d || !buf) {
                r = -errno;
                goto out;
        }
        while (r == 0 && (e = readdir(d))) {
                struct stat st;

                if (fstatat(dirfd(d), e->d_name, &st, 0) < 0 || !S_ISREG(st.st_mode))
                        continue;
                errno = 0;
                r = copy_file(dirfd(d), to_dfd, e->d_name, st.st_size, buf, prefix);
                if (r < 0 && ret_name) {
                        snprintf(failed, sizeof(failed), "%.*s/%s", PATH_MAX, from, e->d_name);
                        *ret_name = failed;
                }
        }
out:
        if (d)
                closedir(d);
        free(buf);
        return r;
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

int tl_exec_capture(char *const *argv, char **ret_out, char **ret_err) {
        char outname[] = "/tmp/zr-out-XXXXXX", errname[] = "/tmp/zr-err-XXXXXX";
        int ofd = mkostemp(outname, O_CLOEXEC), efd = mkostemp(errname, O_CLOEXEC);
        int status = -1;
        pid_t pid = -1;

        /* files, not pipes: a child writing much output never blocks on us */
        if (ofd >= 0)
                unlink(outname);
        if (efd >= 0)
                unlink(errname);
        if (ofd >= 0 && efd >= 0)
                pid = fork();
        if (pid == 0) {
                dup2(ofd, STDOUT_FILENO);
                dup2(efd, STDERR_FILENO);
                execv(argv[0], argv);
                _exit(127);
        }
        if (pid > 0) {
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
        }
        if (ofd >= 0)
                close(ofd);
        if (efd >= 0)
                close(efd);
        return pid > 0 && WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

int tl_is_json(const char *s) {
        char tmp[] = "/tmp/zr-json-XXXXXX";
        char *probe[] = { "/usr/bin/env", "python3", "-c", "import json", NULL };
        char *argv[] = { "/usr/bin/env", "python3", "-c",
                         "import json,sys; json.load(open(sys.argv[1]))", tmp, NULL };
        size_t len = strlen(s);
        int fd, r = -1;

        if (tl_exec_capture(probe, NULL, NULL) != 0)
                return -1;
        fd = mkstemp(tmp);
        if (fd < 0)
                return -1;
        if (write(fd, s, len) == (ssize_t)len)
                r = tl_exec_capture(argv, NULL, NULL) == 0;
        close(fd);
        unlink(tmp);
        return r;
}

unsigned tl_failures;

void tl_fail(const char *fmt, ...) {
        va_list ap;

        va_start(ap, fmt);
        fprintf(stderr, "FAIL: ");
        vfprintf(stderr, fmt, ap);
        fputc('\n', stderr);
        va_end(ap);
        tl_failures++;
}

void tl_die(const char *what) {
        fprintf(stderr, "FATAL: %s: %s\n", what, strerror(errno));
        exit(2);
}

#ifndef F_SEAL_FUTURE_WRITE
#define F_SEAL_FUTURE_WRITE 0x0010
#endif

/* Installs a filter whose instructions after the architecture check are
 * body[0..n): on another architecture every call is allowed. */
static int install_filter(const struct sock_filter *body, size_t n) {
        struct sock_filter f[32] = {
                BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
#if defined(__x86_64__)
                BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH_X86_64, 1, 0),
#elif defined(__aarch64__)
                BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH_AARCH64, 1, 0),
#else
                BPF_JUMP(BPF_JMP | BPF_JA, 0, 0, 0),
#endif
                BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
        };
        const size_t head = 3;

        if (n > sizeof(f) / sizeof(f[0]) - head)
                return -E2BIG;
        memcpy(f + head, body, n * sizeof(*body));
        struct sock_fprog prog = { .len = (unsigned short)(head + n), .filter = f };
        if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
                return -errno;
        if (prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) < 0)
                return -errno;
        return 0;
}

int tl_deny_future_write_seal(void) {
        struct sock_filter f[] = {
                BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
                BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_fcntl, 1, 0),
                BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
                /* the low 32 bits of the arguments (little-endian) */
                BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, args[1])),
                BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, F_ADD_SEALS, 1, 0),
                BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
                BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, args[2])),
                BPF_JUMP(BPF_JMP | BPF_JSET | BPF_K, F_SEAL_FUTURE_WRITE, 0, 1),
                BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (EINVAL & SECCOMP_RET_DATA)),
                BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
        };
        return install_filter(f, sizeof(f) / sizeof(f[0]));
}

int tl_deny_syscall(long nr, int err) {
        struct sock_filter f[] = {
                BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
                BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (uint32_t)nr, 0, 1),
                BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | ((uint32_t)err & SECCOMP_RET_DATA)),
                BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
        };
        return install_filter(f, sizeof(f) / sizeof(f[0]));
}

static int write_file(const char *path, const char *text) {
        int fd = open(path, O_WRONLY | O_CLOEXEC), r = 0;
        if (fd < 0)
                return -errno;
        if (write(fd, text, strlen(text)) != (ssize_t)strlen(text))
                r = -errno;
        close(fd);
        return r;
}

int tl_private_mounts(void) {
        if (geteuid() != 0) {
                char map[64];
                uid_t uid = geteuid();
                gid_t gid = getegid();
                if (unshare(CLONE_NEWUSER | CLONE_NEWNS) < 0)
                        return -errno;
                int r = write_file("/proc/self/setgroups", "deny");
                snprintf(map, sizeof(map), "0 %u 1", (unsigned)uid);
                if (r == 0)
                        r = write_file("/proc/self/uid_map", map);
                snprintf(map, sizeof(map), "0 %u 1", (unsigned)gid);
                if (r == 0)
                        r = write_file("/proc/self/gid_map", map);
                if (r < 0)
                        return r;
        } else if (unshare(CLONE_NEWNS) < 0) {
                return -errno;
        }
        if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0)
                return -errno;
        return 0;
}

size_t tl_kill_after_acks(pid_t pid, int fd, size_t target, uint64_t *rng, int *ret_status) {
        uint64_t t_created = 0, t_last = 0;
        size_t acks = 0;
        uint8_t b;

        while (acks < target + 1) {
                ssize_t k = read(fd, &b, 1);
                if (k == 1) {
                        acks++;
                        t_last = tl_now_ns();
                        if (acks == 1)
                                t_created = t_last;
                } else if (k == 0 || errno != EINTR) {
                        break;
                }
        }
        if (acks == target + 1) {
                uint64_t mean = (t_last - t_created) / target;
                uint64_t until = t_last + (uint64_t)((double)(tl_rand(rng) % 1000) / 1000.0 *
                                                     2.0 * (double)mean);
                while (tl_now_ns() < until)
                        ;
        }
        kill(pid, SIGKILL);
        if (waitpid(pid, ret_status, 0) != pid)
                *ret_status = -1;
        for (;;) {
                ssize_t k = read(fd, &b, 1);
                if (k == 1)
                        acks++;
                else if (k == 0 || errno != EINTR)
                        break;
        }
        close(fd);
        return acks;
}
