/* test-conn.c: libzrc's connection against a scripted fake daemon.
 *
 * A thread of the test plays the daemon on a socket in a temporary directory,
 * byte by byte, to do what a real daemon should never do or does only rarely:
 * events between a request and its reply, a reply with the wrong id, a reply
 * with descriptors it must not carry, more descriptors than a frame may carry
 * (MSG_CTRUNC), malformed bodies, frames over the limit, a FAULT and a hang-up,
 * an unknown event kind, an unsupported version. Each must end in the right
 * error code, and a broken connection must fail every later call at once with
 * the first reason. No zrecordd needed.
 */
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "wire.h"
#include "zrc-private.h"

typedef void (*script_fn)(int fd);

typedef struct fake {
        char dir[64];
        char path[128];
        int listen_fd;
        pthread_t thread;
        script_fn script;
        uint32_t version;   /* in the HELLO reply */
} fake;

static int send_raw(int fd, const void *p, size_t n, const int *fds, size_t n_fds) {
        union {
                struct cmsghdr h;
                char buf[CMSG_SPACE(128 * sizeof(int))];
        } cmsg;
        struct iovec iov = { .iov_base = (void *)p, .iov_len = n };
        struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1 };

        if (n_fds) {
                memset(&cmsg, 0, sizeof(cmsg));
                msg.msg_control = cmsg.buf;
                msg.msg_controllen = CMSG_SPACE(n_fds * sizeof(int));
                cmsg.h.cmsg_level = SOL_SOCKET;
                cmsg.h.cmsg_type = SCM_RIGHTS;
                cmsg.h.cmsg_len = CMSG_LEN(n_fds * sizeof(int));
                memcpy(CMSG_DATA(&cmsg.h), fds, n_fds * sizeof(int));
        }
        return sendmsg(fd, &msg, MSG_NOSIGNAL) == (ssize_t)n ? 0 : -1;
}

static void send_writer(int fd, zr_wire_writer *w, const int *fds, size_t n_fds) {
        const uint8_t *frame;
        size_t size;

        if (zr_wire_writer_finish(w, ZR_FRAME_MAX_CEILING, &frame, &size, NULL) == 0)
                send_raw(fd, frame, size, fds, n_fds);
        zr_wire_writer_reset(w);
}

/* Reads one request; returns its id (0 on EOF). */
static uint64_t read_request(int fd) {
        uint8_t hdr[4], *body;
        uint32_t len;
        zr_wire_body *b = NULL;
        uint64_t id = 0;

        if (recv(fd, hdr, 4, MSG_WAITALL) != 4)
                return 0;
        len = (uint32_t)hdr[0] | (uint32_t)hdr[1] << 8 | (uint32_t)hdr[2] << 16 | (uint32_t)hdr[3] << 24;
        body = malloc(len);
        if (recv(fd, body, len, MSG_WAITALL) == (ssize_t)len &&
            zr_wire_body_decode(body, len, NULL, &b, NULL) == 0)
                (void)zr_wire_get_u64(zr_wire_body_root(b), "id", &id, NULL);
        zr_wire_body_free(b);
        free(body);
        return id;
}

static void put_status_ok(zr_wire_writer *w, uint64_t id) {
        static const char *const counters[] = { "uptime_ms", "clients", "handles", "shm_bytes",
                                                "loaders", "batches", "gathers", "hits",
                                                "misses", "bytes", "evictions" };

        zr_wire_writer_begin_message(w, "ok", true, id);
        zr_wire_put_str(w, "daemon", "fake 1");
        for (size_t i = 0; i < sizeof(counters) / sizeof(counters[0]); i++)
                zr_wire_put_u64(w, counters[i], 7);
        zr_wire_begin_map(w, "cache");
        zr_wire_put_u64(w, "budget", 1);
        zr_wire_put_u64(w, "bytes", 0);
        zr_wire_put_u64(w, "entries", 0);
        zr_wire_end(w);
        zr_wire_begin_array(w, "per_loader");
        zr_wire_end(w);
}

static void *fake_run(void *arg) {
        fake *f = arg;
        zr_wire_writer w;
        uint64_t id;
        int fd = accept4(f->listen_fd, NULL, NULL, SOCK_CLOEXEC);

        if (fd < 0)
                return NULL;
        zr_wire_writer_init(&w);
        id = read_request(fd);
        zr_wire_writer_begin_message(&w, "ok", true, id);
        zr_wire_put_u64(&w, "version", f->version);
        zr_wire_begin_array(&w, "features");
        zr_wire_put_str(&w, NULL, "verify");
        zr_wire_end(&w);
        zr_wire_put_str(&w, "daemon", "fake 1");
        zr_wire_begin_map(&w, "limits");
        zr_wire_put_u64(&w, "frame_max", 65536);
        zr_wire_put_u64(&w, "handles_max", 8);
        zr_wire_put_u64(&w, "shm_bytes_max", 1 << 20);
        zr_wire_put_u64(&w, "loaders_max", 1);
        zr_wire_put_u64(&w, "pipeline_max", 4);
        zr_wire_put_u64(&w, "fds_per_frame_max", 64);
        zr_wire_put_u64(&w, "streams_max", 32);
        zr_wire_put_u64(&w, "prefetch_max", 4);
        zr_wire_end(&w);
        send_writer(fd, &w, NULL, 0);
        zr_wire_writer_destroy(&w);
        if (f->script)
                f->script(fd);
        close(fd);
        return NULL;
}

static void fake_start(fake *f, script_fn script, uint32_t version) {
        struct sockaddr_un sa = { .sun_family = AF_UNIX };

        memset(f, 0, sizeof(*f));
        snprintf(f->dir, sizeof(f->dir), "/tmp/zrc-fake-XXXXXX");
        ck_assert_ptr_nonnull(mkdtemp(f->dir));
        snprintf(f->path, sizeof(f->path), "%s/sock", f->dir);
        memcpy(sa.sun_path, f->path, strlen(f->path) + 1);
        f->listen_fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        ck_assert_int_ge(f->listen_fd, 0);
        ck_assert_int_eq(bind(f->listen_fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
        ck_assert_int_eq(listen(f->listen_fd, 4), 0);
        f->script = script;
        f->version = version;
        ck_assert_int_eq(pthread_create(&f->thread, NULL, fake_run, f), 0);
}

static void fake_stop(fake *f) {
        pthread_join(f->thread, NULL);
        close(f->listen_fd);
        unlink(f->path);
        rmdir(f->dir);
}

static int count_fds(void) {
        DIR *d = opendir("/proc/self/fd");
        int n = 0;

        while (readdir(d))
                n++;
        closedir(d);
        return n;
}

/* ---- scripts ----------------------------------------------------------- */

static void script_events_then_reply(int fd) {
        zr_wire_writer w;
        uint64_t id = read_request(fd);

        zr_wire_writer_init(&w);
        /* a BATCH, a LOADER_END, an event kind from the future, a FAULT that
         * does not end the connection, then the reply */
        zr_wire_writer_begin_message(&w, "batch", false, 0);
        zr_wire_put_u64(&w, "loader", 3);
        zr_wire_put_u64(&w, "slot", 0);
        zr_wire_put_u64(&w, "step", 10);
        zr_wire_begin_array(&w, "streams");
        zr_wire_begin_map(&w, NULL);
        zr_wire_put_u64(&w, "offset", 0);
        zr_wire_put_u64(&w, "bytes", 8);
        zr_wire_end(&w);
        zr_wire_end(&w);
        send_writer(fd, &w, NULL, 0);
        zr_wire_writer_begin_message(&w, "loader_end", false, 0);
        zr_wire_put_u64(&w, "loader", 3);
        zr_wire_put_u64(&w, "step", 11);
        zr_wire_put_u64(&w, "code", ZR_E_STALE);
        zr_wire_put_str(&w, "message", "store changed");
        send_writer(fd, &w, NULL, 0);
        zr_wire_writer_begin_message(&w, "weather_report", false, 0);
        zr_wire_put_str(&w, "sky", "clear");
        send_writer(fd, &w, NULL, 0);
        zr_wire_writer_begin_message(&w, "fault", false, 0);
        zr_wire_put_u64(&w, "code", ZR_E_PROTO);
        zr_wire_put_str(&w, "message", "a bad RELEASE");
        send_writer(fd, &w, NULL, 0);
        put_status_ok(&w, id);
        send_writer(fd, &w, NULL, 0);
        /* a second request: an error reply with every optional field */
        id = read_request(fd);
        zr_wire_writer_begin_message(&w, "error", true, id);
        zr_wire_put_u64(&w, "code", ZR_E_RANGE);
        zr_wire_put_str(&w, "name", "ZR_E_RANGE");
        zr_wire_put_str(&w, "message", "index 12 is out of range: the length is 3");
        zr_wire_put_u64(&w, "index", 12);
        send_writer(fd, &w, NULL, 0);
        read_request(fd); /* until the client hangs up */
        zr_wire_writer_destroy(&w);
}

START_TEST(test_events_between) {
        fake f;
        zrc_conn *c = NULL;
        zrc_status *st = NULL;

        fake_start(&f, script_events_then_reply, 1);
        ck_assert_int_eq(zrc_connect(f.path, &c, NULL), 0);
        ck_assert_str_eq(zrc_daemon_name(c), "fake 1");
        ck_assert_uint_eq(zrc_limits_get(c)->frame_max, 65536);
        ck_assert(zrc_has_feature(c, "verify"));
        ck_assert(!zrc_has_feature(c, "dict"));
        ck_assert_int_eq(zrc_status_query(c, &st), 0);
        ck_assert_uint_eq(st->clients, 7);
        zrc_status_free(st);
        /* the two loader events are kept for the loader API, in order */
        ck_assert_uint_eq(c->n_events, 2);
        ck_assert_int_eq(c->events_head->kind, ZR_MSG_BATCH);
        ck_assert_int_eq(c->events_head->next->kind, ZR_MSG_LOADER_END);
        ck_assert_int_eq(c->fault.code, ZR_E_PROTO);
        /* an error reply: code, name, message, index */
        ck_assert_int_eq(zrc_status_query(c, &st), -ZR_E_RANGE);
        ck_assert_str_eq(zrc_last_error(c)->name, "ZR_E_RANGE");
        ck_assert(strstr(zrc_last_error(c)->message, "index 12"));
        ck_assert(zrc_last_error(c)->has_index);
        ck_assert_uint_eq(zrc_last_error(c)->index, 12);
        ck_assert(!zrc_last_error(c)->has_needed);
        /* a feature the daemon lacks is refused without a request */
        {
                zrc_set *set = NULL;

                ck_assert_int_eq(zrc_set_open(c, "/", 0, &set), -ZR_E_UNKNOWN);
                ck_assert(strstr(zrc_last_error(c)->message, "msset"));
        }
        zrc_disconnect(c);
        fake_stop(&f);
}
END_TEST

static void script_wrong_id(int fd) {
        zr_wire_writer w;
        uint64_t id = read_request(fd);

        zr_wire_writer_init(&w);
        put_status_ok(&w, id + 1);
        send_writer(fd, &w, NULL, 0);
        zr_wire_writer_destroy(&w);
        read_request(fd);
}

START_TEST(test_wrong_id) {
        fake f;
        zrc_conn *c = NULL;
        zrc_status *st = NULL;

        fake_start(&f, script_wrong_id, 1);
        ck_assert_int_eq(zrc_connect(f.path, &c, NULL), 0);
        ck_assert_int_eq(zrc_status_query(c, &st), -ZR_E_PROTO);
        ck_assert(strstr(zrc_last_error(c)->message, "does not answer"));
        /* broken for good: the next call fails at once with the same reason */
        ck_assert_int_eq(zrc_status_query(c, &st), -ZR_E_PROTO);
        ck_assert(strstr(zrc_last_error(c)->message, "does not answer"));
        zrc_disconnect(c);
        fake_stop(&f);
}
END_TEST

static void script_unexpected_fd(int fd) {
        zr_wire_writer w;
        uint64_t id = read_request(fd);
        int p[2];

        ck_assert_int_eq(pipe2(p, O_CLOEXEC), 0);
        zr_wire_writer_init(&w);
        put_status_ok(&w, id);
        send_writer(fd, &w, p, 2);
        zr_wire_writer_destroy(&w);
        close(p[0]);
        close(p[1]);
        read_request(fd);
}

START_TEST(test_unexpected_fds) {
        fake f;
        zrc_conn *c = NULL;
        zrc_status *st = NULL;
        int before;

        fake_start(&f, script_unexpected_fd, 1);
        ck_assert_int_eq(zrc_connect(f.path, &c, NULL), 0);
        before = count_fds();
        ck_assert_int_eq(zrc_status_query(c, &st), -ZR_E_BAD_FD);
        ck_assert_int_eq(count_fds(), before); /* both descriptors closed */
        zrc_disconnect(c);
        fake_stop(&f);
}
END_TEST

static void script_ctrunc(int fd) {
        zr_wire_writer w;
        uint64_t id = read_request(fd);
        int fds[80], p[2];

        ck_assert_int_eq(pipe2(p, O_CLOEXEC), 0);
        for (int i = 0; i < 80; i++)
                fds[i] = p[i % 2];
        zr_wire_writer_init(&w);
        put_status_ok(&w, id);
        send_writer(fd, &w, fds, 80); /* more than a frame may carry */
        zr_wire_writer_destroy(&w);
        close(p[0]);
        close(p[1]);
        read_request(fd);
}

START_TEST(test_ctrunc) {
        fake f;
        zrc_conn *c = NULL;
        zrc_status *st = NULL;
        int before;

        fake_start(&f, script_ctrunc, 1);
        ck_assert_int_eq(zrc_connect(f.path, &c, NULL), 0);
        before = count_fds();
        ck_assert_int_eq(zrc_status_query(c, &st), -ZR_E_BAD_FD);
        ck_assert(strstr(zrc_last_error(c)->message, "MSG_CTRUNC"));
        ck_assert_int_eq(count_fds(), before);
        zrc_disconnect(c);
        fake_stop(&f);
}
END_TEST

static void script_bad_body(int fd) {
        /* a 5-byte array32 header claiming 2^32-1 elements */
        static const uint8_t frame[] = { 5, 0, 0, 0, 0xdd, 0xff, 0xff, 0xff, 0xff };

        read_request(fd);
        send_raw(fd, frame, sizeof(frame), NULL, 0);
        read_request(fd);
}

START_TEST(test_bad_body) {
        fake f;
        zrc_conn *c = NULL;
        zrc_status *st = NULL;

        fake_start(&f, script_bad_body, 1);
        ck_assert_int_eq(zrc_connect(f.path, &c, NULL), 0);
        ck_assert_int_eq(zrc_status_query(c, &st), -ZR_E_PROTO);
        ck_assert(strstr(zrc_last_error(c)->message, "malformed"));
        zrc_disconnect(c);
        fake_stop(&f);
}
END_TEST

static void script_huge_frame(int fd) {
        static const uint8_t header[] = { 0, 0, 2, 0 }; /* 128 KiB > frame_max 64 KiB */

        read_request(fd);
        send_raw(fd, header, sizeof(header), NULL, 0);
        read_request(fd);
}

START_TEST(test_huge_frame) {
        fake f;
        zrc_conn *c = NULL;
        zrc_status *st = NULL;

        fake_start(&f, script_huge_frame, 1);
        ck_assert_int_eq(zrc_connect(f.path, &c, NULL), 0);
        ck_assert_int_eq(zrc_status_query(c, &st), -ZR_E_LIMIT);
        zrc_disconnect(c);
        fake_stop(&f);
}
END_TEST

static void script_fault_hangup(int fd) {
        zr_wire_writer w;

        read_request(fd);
        zr_wire_writer_init(&w);
        zr_wire_writer_begin_message(&w, "fault", false, 0);
        zr_wire_put_u64(&w, "code", ZR_E_SHUTDOWN);
        zr_wire_put_str(&w, "message", "the daemon is shutting down");
        send_writer(fd, &w, NULL, 0);
        zr_wire_writer_destroy(&w);
        /* and hang up */
}

START_TEST(test_fault_hangup) {
        fake f;
        zrc_conn *c = NULL;
        zrc_status *st = NULL;

        fake_start(&f, script_fault_hangup, 1);
        ck_assert_int_eq(zrc_connect(f.path, &c, NULL), 0);
        ck_assert_int_eq(zrc_status_query(c, &st), -ZR_E_SHUTDOWN);
        ck_assert_str_eq(zrc_last_error(c)->name, "ZR_E_SHUTDOWN");
        ck_assert(strstr(zrc_last_error(c)->message, "shutting down"));
        zrc_disconnect(c);
        fake_stop(&f);
}
END_TEST

START_TEST(test_hangup_mid_frame) {
        fake f;
        zrc_conn *c = NULL;
        zrc_status *st = NULL;

        /* the fake answers HELLO, then closes without a reply */
        fake_start(&f, NULL, 1);
        ck_assert_int_eq(zrc_connect(f.path, &c, NULL), 0);
        fake_stop(&f);
        ck_assert_int_lt(zrc_status_query(c, &st), 0);
        ck_assert(zrc_last_error(c)->code == ECONNRESET || zrc_last_error(c)->code == EPIPE);
        zrc_disconnect(c);
}
END_TEST

START_TEST(test_bad_version) {
        fake f;
        zrc_conn *c = NULL;
        zrc_error e = { 0 };

        fake_start(&f, NULL, 2);
        ck_assert_int_eq(zrc_connect(f.path, &c, &e), -ZR_E_VERSION);
        ck_assert_str_eq(e.name, "ZR_E_VERSION");
        fake_stop(&f);
}
END_TEST

START_TEST(test_socket_resolution) {
        zrc_conn *c = NULL;
        zrc_error e = { 0 };
        char xdg[] = "/tmp/zrc-xdg-XXXXXX";
        char longpath[300];

        /* no explicit path and no $ZRECORD_SOCKET: the defaults are tried, the
         * user's own first, and all are named in the message */
        ck_assert_ptr_nonnull(mkdtemp(xdg));
        unsetenv("ZRECORD_SOCKET");
        setenv("XDG_RUNTIME_DIR", xdg, 1);
        for (int k = 0; k < 2; k++) {
                /* the second time, an empty $ZRECORD_SOCKET counts as unset */
                if (k == 1)
                        setenv("ZRECORD_SOCKET", "", 1);
                if (zrc_connect(NULL, &c, &e) == 0) {
                        /* a system or private daemon runs on this machine:
                         * it must be at a later default path */
                        ck_assert(strcmp(zrc_socket_path(c), "/run/zrecord/zrecordd.sock") == 0 ||
                                  strncmp(zrc_socket_path(c), "/tmp/zrecord-", 13) == 0);
                        zrc_disconnect(c);
                        continue;
                }
                ck_assert(strstr(e.message, xdg));
                ck_assert(strstr(e.message, "/run/zrecord/zrecordd.sock"));
                ck_assert(strstr(e.message, "/tmp/zrecord-"));
        }
        rmdir(xdg);
        /* a path longer than sun_path */
        memset(longpath, 'a', sizeof(longpath) - 1);
        longpath[0] = '/';
        longpath[sizeof(longpath) - 1] = 0;
        ck_assert_int_eq(zrc_connect(longpath, &c, &e), -ENAMETOOLONG);
}
END_TEST

int main(void) {
        Suite *s = suite_create("conn");
        TCase *tc = tcase_create("fake-daemon");
        SRunner *sr;
        int failed;

        tcase_set_timeout(tc, 60);
        tcase_add_test(tc, test_events_between);
        tcase_add_test(tc, test_wrong_id);
        tcase_add_test(tc, test_unexpected_fds);
        tcase_add_test(tc, test_ctrunc);
        tcase_add_test(tc, test_bad_body);
        tcase_add_test(tc, test_huge_frame);
        tcase_add_test(tc, test_fault_hangup);
        tcase_add_test(tc, test_hangup_mid_frame);
        tcase_add_test(tc, test_bad_version);
        tcase_add_test(tc, test_socket_resolution);
        suite_add_tcase(s, tc);
        sr = srunner_create(s);
        srunner_run_all(sr, CK_NORMAL);
        failed = srunner_ntests_failed(sr);
        srunner_free(sr);
        return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
