/* autostart.c: the zrecord tool's private daemon, started when none answers.
 *
 * The tool does what the Python client does (python-client/loaderx/_daemon.py;
 * PROTOCOL.md section 1, SECURITY.md "Whom a client trusts"): when no daemon
 * answers at the default paths and the user named no socket, it starts one for
 * the user in a 0700 directory of the user's own, $XDG_RUNTIME_DIR/zrecord/
 * (else /tmp/zrecord-<uid>/), with --idle-exit, detached, and waits for its
 * READY=1 on a notify socket beside it. Startup is serialized with the Python
 * client's by the same lock file, so both share one daemon.
 *
 * The binary is $ZRECORDD, else the zrecordd beside this tool (a wheel's
 * loaderx/_bin/), else zrecordd on PATH, else a meson build tree's
 * daemon/zrecordd beside this tool's client/. It runs as the user, so it is
 * started only if the user or root could have put it there: the file (symbolic
 * links resolved) and every directory above it belong to the user or root and
 * none is writable by its group or others, except a directory with the sticky
 * bit (/tmp). Otherwise nothing is started and the message names the binary,
 * the path at fault and why. Never prints: messages are returned.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "autostart.h"

#define READY_TIMEOUT_MS 15000
#define IDLE_EXIT_DEFAULT "60"

/* A path's directory part (its parent), in place. */
static void parent(char *path) {
        char *slash = strrchr(path, '/');
        if (slash == path)
                path[1] = 0;
        else if (slash)
                *slash = 0;
}

/* 0 if the user or root could have installed `binary` (see above); its real
 * path in real[PATH_MAX]. Else -EPERM, -ENOENT, ... and why. */
static int check_trusted(const char *binary, char *real, char *why, size_t size) {
        char path[PATH_MAX];
        const char *what = "the file";
        uid_t me = geteuid();
        struct stat st;

        if (!realpath(binary, real) || stat(real, &st) < 0) {
                snprintf(why, size, "cannot start %s: %s", binary, strerror(errno));
                return -errno;
        }
        if (!S_ISREG(st.st_mode) || access(real, X_OK) < 0) {
                snprintf(why, size, "cannot start %s: not an executable file", binary);
                return -EACCES;
        }
        snprintf(path, sizeof(path), "%s", real);
        for (;;) {
                bool sticky = S_ISDIR(st.st_mode) && (st.st_mode & S_ISVTX);
                const char *fault = NULL;
                char detail[128];

                if (st.st_uid != me && st.st_uid != 0) {
                        snprintf(detail, sizeof(detail), "belongs to uid %u, not to you (uid %u)%s",
                                 (unsigned)st.st_uid, (unsigned)me, me ? " or root" : "");
                        fault = detail;
                } else if ((st.st_mode & (S_IWGRP | S_IWOTH)) && !sticky) {
                        snprintf(detail, sizeof(detail), "(mode %04o, owner uid %u) is writable by %s",
                                 (unsigned)(st.st_mode & 07777), (unsigned)st.st_uid,
                                 st.st_mode & S_IWGRP ? (st.st_mode & S_IWOTH ? "its group and others"
                                                                              : "its group")
                                                      : "others");
                        fault = detail;
                }
                if (fault) {
                        snprintf(why, size,
                                 "refusing to start %s: %s %s %s; a program is started only if it "
                                 "and every directory above it belong to you or root and nobody "
                                 "else may write them: fix the permissions (for instance chmod "
                                 "go-w), set $ZRECORDD to a program that qualifies, or point "
                                 "$ZRECORD_SOCKET at a running daemon",
                                 real, what, path, fault);
                        return -EPERM;
                }
                if (strcmp(path, "/") == 0)
                        return 0;
                parent(path);
                what = "the directory";
                if (lstat(path, &st) < 0) {
                        snprintf(why, size, "cannot start %s: %s: %s", real, path, strerror(errno));
                        return -errno;
                }
        }
}

/* The daemon binary to start: found[PATH_MAX], or -ENOENT and why. */
static int find_binary(char *found, char *why, size_t size) {
        const char *env = getenv("ZRECORDD");
        char self[PATH_MAX], cand[PATH_MAX + 32];
        ssize_t n;

        if (env && env[0]) {
                snprintf(found, PATH_MAX, "%s", env);
                return 0;
        }
        n = readlink("/proc/self/exe", self, sizeof(self) - 1);
        if (n > 0) {
                self[n] = 0;
                parent(self);
                snprintf(cand, sizeof(cand), "%s/zrecordd", self); /* a wheel's _bin/ */
                if (access(cand, X_OK) == 0 && strlen(cand) < PATH_MAX) {
                        snprintf(found, PATH_MAX, "%s", cand);
                        return 0;
                }
        }
        const char *path = getenv("PATH");
        while (path && *path) {
                size_t len = strcspn(path, ":");
                if (len > 0 && len < PATH_MAX - 16) {
                        snprintf(cand, sizeof(cand), "%.*s/zrecordd", (int)len, path);
                        if (access(cand, X_OK) == 0) {
                                snprintf(found, PATH_MAX, "%s", cand);
                                return 0;
                        }
                }
                path += len + (path[len] == ':');
        }
        if (n > 0) {
                snprintf(cand, sizeof(cand), "%s/../daemon/zrecordd", self); /* build/client/ */
                if (access(cand, X_OK) == 0 && strlen(cand) < PATH_MAX) {
                        snprintf(found, PATH_MAX, "%s", cand);
                        return 0;
                }
        }
        snprintf(why, size, "no zrecordd to start: set $ZRECORDD to the daemon binary or put "
                 "zrecordd on PATH");
        return -ENOENT;
}

/* Makes dir (0700), or checks the one there: a directory of the user's own,
 * not a symlink, mode 0700. */
static int secure_dir(const char *dir, char *why, size_t size) {
        struct stat st;

        if (mkdir(dir, 0700) < 0 && errno != EEXIST) {
                snprintf(why, size, "cannot make the private daemon's directory %s: %s; set "
                         "ZRECORD_SOCKET", dir, strerror(errno));
                return -errno;
        }
        if (lstat(dir, &st) < 0) {
                snprintf(why, size, "%s: %s", dir, strerror(errno));
                return -errno;
        }
        if (!S_ISDIR(st.st_mode) || st.st_uid != geteuid() || (st.st_mode & 077)) {
                snprintf(why, size, "refusing %s for a private daemon: it must be a directory "
                         "of yours (uid %u) with mode 0700, and is a %s owned by uid %u with mode "
                         "%04o; remove it (or have its owner remove it) or set ZRECORD_SOCKET",
                         dir, (unsigned)geteuid(), S_ISDIR(st.st_mode) ? "directory" : "non-directory",
                         (unsigned)st.st_uid, (unsigned)(st.st_mode & 07777));
                return -EPERM;
        }
        return 0;
}

static bool answers(const char *sock) {
        struct sockaddr_un a = { .sun_family = AF_UNIX };
        int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        bool ok;

        if (fd < 0)
                return false;
        snprintf(a.sun_path, sizeof(a.sun_path), "%s", sock);
        ok = connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0;
        close(fd);
        return ok;
}

static bool alive(pid_t pid) {
        char path[64], buf[512];
        FILE *f;
        char *paren;
        bool ok = false;

        snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
        f = fopen(path, "re");
        if (!f)
                return false;
        if (fgets(buf, sizeof(buf), f) && (paren = strrchr(buf, ')')) && paren[1] == ' ')
                ok = paren[2] != 'Z';
        fclose(f);
        return ok;
}

static int64_t now_ms(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Starts binary detached (its own session, nobody's child here) on sock,
 * notifying notify; returns its pid, or -errno. */
static pid_t spawn(const char *binary, const char *dir, const char *sock, const char *notify) {
        char log[PATH_MAX + 32], sock_arg[PATH_MAX + 16], idle_arg[64];
        const char *idle = getenv("ZRECORD_IDLE_EXIT");
        int p[2];
        pid_t child, pid = -1;
        int status;

        snprintf(log, sizeof(log), "%s/zrecordd.log", dir);
        snprintf(sock_arg, sizeof(sock_arg), "--socket=%s", sock);
        snprintf(idle_arg, sizeof(idle_arg), "--idle-exit=%s", idle && idle[0] ? idle : IDLE_EXIT_DEFAULT);
        if (pipe2(p, O_CLOEXEC) < 0)
                return -errno;
        child = fork();
        if (child < 0) {
                int e = errno;
                close(p[0]);
                close(p[1]);
                return -e;
        }
        if (child == 0) { /* a session of its own, then the daemon's parent exits */
                pid_t d;
                close(p[0]);
                setsid();
                d = fork();
                if (d == 0) {
                        int in = open("/dev/null", O_RDONLY | O_CLOEXEC);
                        int out = open(log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
                        char *const argv[] = { (char *)binary, sock_arg, "--socket-mode=0600",
                                               idle_arg, "--log-level=notice", NULL };
                        if (in < 0 || out < 0 || dup2(in, 0) < 0 || dup2(out, 1) < 0 ||
                            dup2(out, 2) < 0)
                                _exit(127);
                        setenv("NOTIFY_SOCKET", notify, 1);
                        unsetenv("LISTEN_FDS");
                        unsetenv("LISTEN_PID");
                        execv(binary, argv);
                        _exit(127);
                }
                if (write(p[1], &d, sizeof(d)) != (ssize_t)sizeof(d))
                        _exit(1);
                _exit(d < 0 ? 1 : 0);
        }
        close(p[1]);
        if (read(p[0], &pid, sizeof(pid)) != (ssize_t)sizeof(pid))
                pid = -1;
        close(p[0]);
        while (waitpid(child, &status, 0) < 0 && errno == EINTR)
                ;
        return pid > 0 ? pid : -ECHILD;
}

/* Waits for READY=1 on fd until the deadline or the daemon's exit. */
static bool wait_ready(int fd, pid_t pid) {
        int64_t deadline = now_ms() + READY_TIMEOUT_MS;
        char buf[4096];

        while (now_ms() < deadline) {
                struct pollfd pfd = { .fd = fd, .events = POLLIN };
                int r = poll(&pfd, 1, 100);
                if (r > 0) {
                        ssize_t n = recv(fd, buf, sizeof(buf) - 1, 0);
                        if (n > 0) {
                                buf[n] = 0;
                                for (char *line = strtok(buf, "\n"); line; line = strtok(NULL, "\n"))
                                        if (strcmp(line, "READY=1") == 0)
                                                return true;
                        }
                } else if (r == 0 && !alive(pid)) {
                        return false;
                }
        }
        return false;
}

int autostart_private_daemon(char *sock, size_t sock_size, char *why, size_t size) {
        const char *xdg = getenv("XDG_RUNTIME_DIR");
        char dir[PATH_MAX], lock[PATH_MAX + 16], notify[PATH_MAX + 16], pidfile[PATH_MAX + 16];
        char binary[PATH_MAX], real[PATH_MAX];
        struct sockaddr_un a;
        struct stat st;
        int lock_fd = -1, nfd = -1, r;
        pid_t pid;

        if (xdg && xdg[0] && stat(xdg, &st) == 0 && S_ISDIR(st.st_mode))
                snprintf(dir, sizeof(dir), "%s/zrecord", xdg);
        else
                snprintf(dir, sizeof(dir), "/tmp/zrecord-%u", (unsigned)getuid());
        snprintf(sock, sock_size, "%s/zrecordd.sock", dir);
        if (strlen(dir) + strlen("/zrecordd.sock") >= sizeof(a.sun_path) ||
            strlen(dir) + strlen("/zrecordd.sock") >= sock_size) {
                snprintf(why, size, "cannot start a private zrecordd: its socket path %s/zrecordd.sock "
                         "is longer than a Unix socket path holds (%zu bytes); set XDG_RUNTIME_DIR "
                         "to a shorter directory, or ZRECORD_SOCKET to a running daemon's socket",
                         dir, sizeof(a.sun_path) - 1);
                return -ENAMETOOLONG;
        }
        r = secure_dir(dir, why, size);
        if (r < 0)
                return r;
        snprintf(lock, sizeof(lock), "%s/start.lock", dir);
        lock_fd = open(lock, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
        if (lock_fd < 0 || flock(lock_fd, LOCK_EX) < 0) {
                r = -errno;
                snprintf(why, size, "%s: %s", lock, strerror(errno));
                goto out;
        }
        if (answers(sock)) { /* another process started it meanwhile */
                r = 0;
                goto out;
        }
        r = find_binary(binary, why, size);
        if (r < 0)
                goto out;
        r = check_trusted(binary, real, why, size);
        if (r < 0)
                goto out;
        snprintf(notify, sizeof(notify), "%s/notify", dir);
        unlink(notify); /* left by a client killed while it waited */
        nfd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
        a = (struct sockaddr_un){ .sun_family = AF_UNIX };
        memcpy(a.sun_path, notify, strlen(notify) + 1); /* shorter than sock: checked */
        if (nfd < 0 || bind(nfd, (struct sockaddr *)&a, sizeof(a)) < 0) {
                r = -errno;
                snprintf(why, size, "cannot bind %s: %s", notify, strerror(errno));
                goto out;
        }
        pid = spawn(real, dir, sock, notify);
        if (pid < 0) {
                r = pid;
                snprintf(why, size, "cannot start %s: %s", real, strerror(-r));
                goto out;
        }
        snprintf(pidfile, sizeof(pidfile), "%s/zrecordd.pid", dir);
        FILE *pf = fopen(pidfile, "we");
        if (pf) {
                fprintf(pf, "%d\n", (int)pid);
                fclose(pf);
        }
        if (!wait_ready(nfd, pid) || !answers(sock)) {
                snprintf(why, size, "started %s on %s but %s; its log is %s/zrecordd.log", real, sock,
                         alive(pid) ? "it did not become ready within 15 s" : "it exited at once",
                         dir);
                r = -ETIMEDOUT;
                goto out;
        }
        r = 0;
out:
        if (nfd >= 0) {
                close(nfd);
                unlink(notify);
        }
        if (lock_fd >= 0)
                close(lock_fd);
        return r;
}
