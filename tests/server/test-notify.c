/* test-notify.c: notify datagrams reach a socket the test listens on, in order,
 * and a notify socket nobody reads never blocks the sender; the journal prefix
 * of log lines; the watchdog interval. */
#include <check.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <syslog.h>
#include <unistd.h>

#include "server/log.h"
#include "server/notify.h"
#include "check-run.h"

static int bind_dgram(char *path, size_t size) {
        snprintf(path, size, "/tmp/zr-notify-%d.sock", getpid());
        unlink(path);
        int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
        ck_assert_int_ge(fd, 0);
        struct sockaddr_un sa = {.sun_family = AF_UNIX};
        strcpy(sa.sun_path, path);
        ck_assert_int_eq(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
        return fd;
}

static void expect_datagram(int fd, const char *want) {
        char buf[512];
        ssize_t n = recv(fd, buf, sizeof(buf) - 1, 0); /* blocks until it arrives */
        ck_assert_int_gt(n, 0);
        buf[n] = 0;
        ck_assert_str_eq(buf, want);
}

START_TEST(test_notify_sequence) {
        char path[108];
        int fd = bind_dgram(path, sizeof(path));
        unsetenv("NOTIFY_SOCKET");
        ck_assert_int_eq(zr_notify("READY=1"), 0); /* no socket: a no-op */
        setenv("NOTIFY_SOCKET", path, 1);
        ck_assert_int_eq(zr_notify("READY=1"), 0);
        ck_assert_int_eq(zr_notifyf("STATUS=%d clients", 3), 0);
        ck_assert_int_eq(zr_notify("STOPPING=1"), 0);
        expect_datagram(fd, "READY=1");
        expect_datagram(fd, "STATUS=3 clients");
        expect_datagram(fd, "STOPPING=1");
        setenv("NOTIFY_SOCKET", "relative", 1);
        ck_assert_int_lt(zr_notify("READY=1"), 0);
        unsetenv("NOTIFY_SOCKET");
        close(fd);
        unlink(path);
}
END_TEST

/* A receiver that stopped reading: its datagram queue is full. zr_notify()
 * runs on the daemon's loop thread, so it must drop the datagram at once, not
 * wait for a reader that may never come (the whole daemon would hang). */
START_TEST(test_notify_full_queue_never_blocks) {
        char path[108];
        int fd = bind_dgram(path, sizeof(path));
        struct sockaddr_un sa = {.sun_family = AF_UNIX};
        int senders[64], nsenders = 0;
        bool full = false;

        strcpy(sa.sun_path, path);
        /* Fill the queue from fresh sockets (one socket's send buffer may fill
         * before the receiver's queue does) until a fresh one gets EAGAIN. */
        while (!full && nsenders < 64) {
                int s = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
                ck_assert_int_ge(s, 0);
                senders[nsenders++] = s;
                for (unsigned sent = 0;; sent++) {
                        if (sendto(s, "x", 1, MSG_DONTWAIT, (struct sockaddr *)&sa, sizeof(sa)) == 1)
                                continue;
                        ck_assert_int_eq(errno, EAGAIN);
                        full = sent == 0;
                        break;
                }
        }
        ck_assert_msg(full, "the receiver's queue never filled");
        setenv("NOTIFY_SOCKET", path, 1);
        alarm(10); /* a send that blocks: the alarm ends (and fails) the test */
        ck_assert_int_eq(zr_notify("STATUS=nobody reads this"), -EAGAIN);
        alarm(0);
        /* once the reader catches up, datagrams go through again */
        char buf[16];
        while (recv(fd, buf, sizeof(buf), MSG_DONTWAIT) > 0)
                ;
        ck_assert_int_eq(zr_notify("READY=1"), 0);
        expect_datagram(fd, "READY=1");
        unsetenv("NOTIFY_SOCKET");
        for (int i = 0; i < nsenders; i++)
                close(senders[i]);
        close(fd);
        unlink(path);
}
END_TEST

START_TEST(test_watchdog_env) {
        unsetenv("WATCHDOG_USEC");
        ck_assert_uint_eq(zr_notify_watchdog_usec(), 0);
        setenv("WATCHDOG_USEC", "2000000", 1);
        unsetenv("WATCHDOG_PID");
        ck_assert_uint_eq(zr_notify_watchdog_usec(), 2000000);
        char pid[32];
        snprintf(pid, sizeof(pid), "%d", getpid() + 1);
        setenv("WATCHDOG_PID", pid, 1);
        ck_assert_uint_eq(zr_notify_watchdog_usec(), 0); /* for another process */
        snprintf(pid, sizeof(pid), "%d", getpid());
        setenv("WATCHDOG_PID", pid, 1);
        ck_assert_uint_eq(zr_notify_watchdog_usec(), 2000000);
        setenv("WATCHDOG_USEC", "x", 1);
        ck_assert_uint_eq(zr_notify_watchdog_usec(), 0);
        unsetenv("WATCHDOG_USEC");
        unsetenv("WATCHDOG_PID");
}
END_TEST

static char *log_to_string(int journal, int level, int max) {
        static char buf[512];
        FILE *f = tmpfile();
        ck_assert_ptr_nonnull(f);
        zr_log_setup(f, max, journal);
        zr_log(level, "client %d\nsays hi", 7);
        rewind(f);
        size_t n = fread(buf, 1, sizeof(buf) - 1, f);
        buf[n] = 0;
        fclose(f);
        zr_log_setup(NULL, LOG_INFO, 0);
        return buf;
}

START_TEST(test_log_lines) {
        ck_assert_str_eq(log_to_string(1, LOG_WARNING, LOG_INFO), "<4>client 7 says hi\n");
        ck_assert_str_eq(log_to_string(0, LOG_ERR, LOG_INFO), "zrecordd: err: client 7 says hi\n");
        ck_assert_str_eq(log_to_string(0, LOG_DEBUG, LOG_INFO), ""); /* above the threshold */
        int lvl;
        ck_assert_int_eq(zr_log_level_from_name("warning", &lvl), 0);
        ck_assert_int_eq(lvl, LOG_WARNING);
        ck_assert_int_eq(zr_log_level_from_name("7", &lvl), 0);
        ck_assert_int_eq(lvl, LOG_DEBUG);
        ck_assert_int_lt(zr_log_level_from_name("loud", &lvl), 0);
}
END_TEST

/* A line a client can cause at will is written at most `burst` times a
 * window; the rest are counted and reported before the next line written. */
START_TEST(test_log_ratelimited) {
        static char buf[4096];
        zr_ratelimit rl = ZR_RATELIMIT(3600, 3);
        FILE *f = tmpfile();
        ck_assert_ptr_nonnull(f);
        zr_log_setup(f, LOG_INFO, 0);
        for (int i = 0; i < 1000; i++)
                zr_log_ratelimited(&rl, LOG_WARNING, "accept: line %d", i);
        zr_log_ratelimited(&rl, LOG_DEBUG, "above the level: not counted");
        rl.window_start -= rl.interval_usec; /* the hour is over */
        zr_log_ratelimited(&rl, LOG_WARNING, "accept: line %d", 1000);
        rewind(f);
        size_t n = fread(buf, 1, sizeof(buf) - 1, f);
        buf[n] = 0;
        fclose(f);
        zr_log_setup(NULL, LOG_INFO, 0);
        ck_assert_str_eq(buf, "zrecordd: warning: accept: line 0\n"
                              "zrecordd: warning: accept: line 1\n"
                              "zrecordd: warning: accept: line 2\n"
                              "zrecordd: warning: 997 similar lines suppressed\n"
                              "zrecordd: warning: accept: line 1000\n");
}
END_TEST

TL_SUITE_MAIN("notify", test_notify_sequence, test_notify_full_queue_never_blocks, test_watchdog_env,
              test_log_lines, test_log_ratelimited)
