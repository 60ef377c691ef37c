/* test-listener.c: binding with a mode, refusing a live socket, replacing a stale
 * one, and taking a socket passed by LISTEN_FDS. */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "server/listener.h"
#include "check-run.h"

static void sock_path(char *buf, size_t n, const char *tag) {
        snprintf(buf, n, "/tmp/zr-listen-%d-%s.sock", getpid(), tag);
        unlink(buf);
}

START_TEST(test_bind_mode_and_live) {
        char path[108];
        zr_error err = {0};
        sock_path(path, sizeof(path), "a");
        int fd = -1, fd2 = -1;
        ck_assert_int_eq(zr_listener_bind(path, 0660, (gid_t)-1, &fd, &err), 0);
        struct stat st;
        ck_assert_int_eq(stat(path, &st), 0);
        ck_assert(S_ISSOCK(st.st_mode));
        ck_assert_uint_eq(st.st_mode & 0777, 0660);
        ck_assert(fcntl(fd, F_GETFD) & FD_CLOEXEC);
        /* a second daemon on the same path is refused, the first keeps its socket */
        ck_assert_int_eq(zr_listener_bind(path, 0660, (gid_t)-1, &fd2, &err), -EADDRINUSE);
        ck_assert_ptr_nonnull(strstr(err.message, "already listens"));
        ck_assert_int_eq(stat(path, &st), 0);
        close(fd);
        /* now the file is stale: a new daemon replaces it */
        zr_error_clear(&err);
        ck_assert_int_eq(zr_listener_bind(path, 0600, (gid_t)-1, &fd2, &err), 0);
        ck_assert_int_eq(stat(path, &st), 0);
        ck_assert_uint_eq(st.st_mode & 0777, 0600);
        close(fd2);
        unlink(path);
}
END_TEST

START_TEST(test_not_a_socket) {
        char path[108];
        zr_error err = {0};
        sock_path(path, sizeof(path), "f");
        int f = open(path, O_CREAT | O_WRONLY | O_CLOEXEC, 0600);
        ck_assert_int_ge(f, 0);
        close(f);
        int fd;
        ck_assert_int_eq(zr_listener_bind(path, 0660, (gid_t)-1, &fd, &err), -EEXIST);
        ck_assert_int_eq(access(path, F_OK), 0); /* a regular file is never removed */
        unlink(path);
}
END_TEST

/* Descriptor 3 belongs to check's own bookkeeping in the test process, so the
 * activation cases run in a child that exits with the failing line (0 = pass). */
#define CHILD_CHECK(cond) do { if (!(cond)) _exit(__LINE__ & 0xff ? __LINE__ & 0xff : 1); } while (0)

static void activation_child(const char *path) {
        zr_error err = {0};
        int fd = -1;
        unsetenv("LISTEN_PID");
        CHILD_CHECK(zr_listener_from_env(&fd, &err) == 0); /* not activated */

        int lfd;
        CHILD_CHECK(zr_listener_bind(path, 0660, (gid_t)-1, &lfd, &err) == 0);
        CHILD_CHECK(dup2(lfd, ZR_LISTEN_FDS_START) == ZR_LISTEN_FDS_START);
        close(lfd);
        char pid[32];
        snprintf(pid, sizeof(pid), "%d", getpid());
        setenv("LISTEN_PID", pid, 1);
        setenv("LISTEN_FDS", "1", 1);
        CHILD_CHECK(zr_listener_from_env(&fd, &err) == 1);
        CHILD_CHECK(fd == ZR_LISTEN_FDS_START);
        CHILD_CHECK(getenv("LISTEN_FDS") == NULL); /* not inherited by children */
        CHILD_CHECK(fcntl(fd, F_GETFD) & FD_CLOEXEC);
        CHILD_CHECK(fcntl(fd, F_GETFL) & O_NONBLOCK);
        close(fd);

        /* a passed descriptor that is not a listening socket is refused */
        int p[2];
        CHILD_CHECK(pipe(p) == 0);
        CHILD_CHECK(dup2(p[0], ZR_LISTEN_FDS_START) == ZR_LISTEN_FDS_START);
        setenv("LISTEN_PID", pid, 1);
        setenv("LISTEN_FDS", "1", 1);
        zr_error_clear(&err);
        CHILD_CHECK(zr_listener_from_env(&fd, &err) == -ZR_E_BAD_FD);
        CHILD_CHECK(strstr(err.message, "not a listening") != NULL);

        /* another process's variables are ignored */
        snprintf(pid, sizeof(pid), "%d", getpid() + 1);
        setenv("LISTEN_PID", pid, 1);
        setenv("LISTEN_FDS", "1", 1);
        CHILD_CHECK(zr_listener_from_env(&fd, &err) == 0);
        unlink(path);
        _exit(0);
}

START_TEST(test_socket_activation) {
        char path[108];
        sock_path(path, sizeof(path), "act");
        pid_t pid = fork();
        ck_assert_int_ge(pid, 0);
        if (pid == 0)
                activation_child(path);
        int status;
        ck_assert_int_eq(waitpid(pid, &status, 0), pid);
        ck_assert(WIFEXITED(status));
        ck_assert_msg(WEXITSTATUS(status) == 0, "activation check failed at line %d", WEXITSTATUS(status));
}
END_TEST

TL_SUITE_MAIN("listener", test_bind_mode_and_live, test_not_a_socket, test_socket_activation)
