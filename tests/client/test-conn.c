/* test-conn.c: libzrc's connection against a scripted fake daemon.
 *
 * A thread of the test plays the daemon on a socket in a temporary directory,
 * byte by byte, to do what a real daemon should never do or does only rarely:
 * events between a request and its reply, a reply with the wrong id, a reply
 * with descriptors it must not carry, more descriptors than a frame may carry
 * (MSG_CTRUNC), malformed bodies, frames over the limit, a FAULT and a hang-up,
 * an unknown event kind, an unsupported version. Each must end in the right
 * error code, and a broken connection must fail every later call at once with
 * the first reason. A RING event's memfd is kept with its queued event and
 * closed when the event is dropped. A loader is driven through rings shared
 * by a group: batches from its own ring and from rings passed by RING events,
 * RING_CLOSE, RELEASE of the right (ring, slot), and every bad ring event the
 * library must refuse without unmapping what the caller holds; no descriptor
 * or mapping outlives the loader. STATUS's control-memory counters and loaders'
 * depth are read when sent and marked absent when not, and `zrecord status`
 * ($ZRECORD) run against the fake prints them, or an older reply cleanly. A
 * socket whose directory others can write, or a per-user default path that
 * is a symlink, is refused before connect(), naming the path and its owner.
 * No zrecordd needed.
 *
 * This file holds the connection's cases and main(); conn-rings.c the
 * events with descriptors and the loader; conn-fake.[ch] the fake daemon.
 */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "check-run.h"
#include "conn-fake.h"
#include "frames.h"
#include "util.h"

/* ---- scripts ----------------------------------------------------------- */

static void script_events_then_reply(int fd) {
        zr_wire_writer w;
        uint64_t id = read_request(fd);

        zr_wire_writer_init(&w);
        /* a BATCH, a LOADER_END, an event kind from the future, a FAULT that
         * does not end the connection, then the reply */
        zr_wire_writer_begin_message(&w, "batch", false, 0);
        zr_wire_put_u64(&w, "loader", 3);
        zr_wire_put_u64(&w, "ring", 1);
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
        zrc_conn *c = fake_connect(&f, script_events_then_reply, 1);
        zrc_status *st = NULL;

        ck_assert_str_eq(zrc_daemon_name(c), "fake 1");
        ck_assert_uint_eq(zrc_limits_get(c)->frame_max, 65536);
        ck_assert(zrc_has_feature(c, "verify"));
        ck_assert(!zrc_has_feature(c, "dict"));
        ck_assert_int_eq(zrc_status_query(c, &st), 0);
        ck_assert_uint_eq(st->clients, 7);
        /* an older daemon's reply: no `prefetch` map, no `loop_fills` */
        ck_assert_str_eq(st->prefetch.backend, "");
        ck_assert_str_eq(st->prefetch.direct_mode, "");
        ck_assert_uint_eq(st->prefetch.direct_steps, 0);
        ck_assert_uint_eq(st->prefetch.direct_min, 0);
        ck_assert_uint_eq(st->loop_fills, 0);
        zrc_status_free(st);
        /* the two loader events are kept for the loader API, in order */
        ck_assert_uint_eq(c->n_events, 2);
        ck_assert_int_eq(c->events_head->kind, ZR_MSG_BATCH);
        ck_assert_int_eq(c->events_head->next->kind, ZR_MSG_LOADER_END);
        ck_assert_int_eq(c->fault.code, ZR_E_PROTO);
        /* an error reply: code, name, message, index */
        ck_assert_int_eq(status_code(c), -ZR_E_RANGE);
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
        fake_done(&f, c);
}
END_TEST

/* STATUS with one loader, as an older daemon sends it (no control-memory
 * counters, no depth) or as one with control memory and the adaptive depth
 * does (ctl_batches 11, ctl_wakes 12, ctl_faults 0; depth 3, raised once). */
static void reply_status_loader(int fd, uint64_t id, bool modern) {
        static const char *const counters[] = { "uptime_ms", "clients", "handles", "shm_bytes",
                                                "loaders", "batches", "gathers", "hits",
                                                "misses", "bytes", "evictions" };
        static const char *const lcounters[] = { "pid", "loader", "batch_size", "streams",
                                                 "step", "batches", "gathers", "hits",
                                                 "misses", "bytes", "evictions", "shared" };
        zr_wire_writer w;

        zr_wire_writer_init(&w);
        zr_wire_writer_begin_message(&w, "ok", true, id);
        zr_wire_put_str(&w, "daemon", "fake 1");
        for (size_t i = 0; i < sizeof(counters) / sizeof(counters[0]); i++)
                zr_wire_put_u64(&w, counters[i], 7);
        zr_wire_begin_map(&w, "cache");
        zr_wire_put_u64(&w, "budget", 1);
        zr_wire_put_u64(&w, "bytes", 0);
        zr_wire_put_u64(&w, "entries", 0);
        zr_wire_end(&w);
        zr_wire_begin_array(&w, "per_loader");
        zr_wire_begin_map(&w, NULL);
        for (size_t i = 0; i < sizeof(lcounters) / sizeof(lcounters[0]); i++)
                zr_wire_put_u64(&w, lcounters[i], 9);
        zr_wire_put_str(&w, "sampler", "cyclic");
        if (modern) {
                zr_wire_put_u64(&w, "depth", 3);
                zr_wire_put_u64(&w, "depth_raises", 1);
        }
        zr_wire_end(&w);
        zr_wire_end(&w);
        if (modern) {
                zr_wire_put_u64(&w, "ctl_batches", 11);
                zr_wire_put_u64(&w, "ctl_wakes", 12);
                zr_wire_put_u64(&w, "ctl_faults", 0);
        }
        send_writer(fd, &w, NULL, 0);
        zr_wire_writer_destroy(&w);
}

static void script_status_older(int fd) {
        reply_status_loader(fd, read_request(fd), false);
        read_request(fd); /* until the client hangs up */
}

static void script_status_newer(int fd) {
        reply_status_loader(fd, read_request(fd), true);
        read_request(fd);
}

/* `zrecord status` (--json when json) against a fake daemon playing script:
 * its exit code 0 asserted, its output returned. */
static char *tool_status(void (*script)(int fd), bool json) {
        const char *zrecord = getenv("ZRECORD");
        char *out = NULL, *err = NULL;
        fake f;

        ck_assert_msg(zrecord && *zrecord, "ZRECORD is not set");
        fake_start(&f, script, 1);
        char *argv[] = { (char *)zrecord, "--socket", f.path, "status", json ? "--json" : NULL,
                         NULL };
        int r = tl_exec_capture(argv, &out, &err);
        fake_stop(&f);
        ck_assert_msg(r == 0, "zrecord status: %d: %s", r, err ? err : "");
        free(err);
        ck_assert_ptr_nonnull(out);
        return out;
}

/* Checks that s parses as JSON when python3 is there to say so. */
static void check_json(const char *s) {
        ck_assert_msg(tl_is_json(s) != 0, "not JSON: %s", s);
}

#define CONTAINS(s, needle) ck_assert_msg(strstr((s), (needle)), "\"%s\" not in: %s", (needle), (s))
#define LACKS(s, needle) ck_assert_msg(!strstr((s), (needle)), "\"%s\" in: %s", (needle), (s))

/* STATUS's control-memory counters and each loader's depth: read when the
 * daemon sends them, marked absent (and 0) when it does not; `zrecord
 * status` prints them then, and an older daemon's reply without them
 * cleanly (text and JSON). */
START_TEST(test_status_control_and_depth) {
        for (int modern = 0; modern < 2; modern++) {
                void (*script)(int) = modern ? script_status_newer : script_status_older;
                fake f;
                zrc_conn *c = fake_connect(&f, script, 1);
                zrc_status *st = NULL;

                ck_assert_int_eq(zrc_status_query(c, &st), 0);
                ck_assert_uint_eq(st->n_loaders, 1);
                ck_assert_uint_eq(st->per_loader[0].batches, 9);
                ck_assert_int_eq(st->ctl_present, modern);
                ck_assert_uint_eq(st->ctl_batches, modern ? 11 : 0);
                ck_assert_uint_eq(st->ctl_wakes, modern ? 12 : 0);
                ck_assert_uint_eq(st->ctl_faults, 0);
                ck_assert_int_eq(st->per_loader[0].depth_present, modern);
                ck_assert_uint_eq(st->per_loader[0].depth, modern ? 3 : 0);
                ck_assert_uint_eq(st->per_loader[0].depth_raises, modern ? 1 : 0);
                zrc_status_free(st);
                fake_done(&f, c);
        }

        char *out = tool_status(script_status_newer, false);
        CONTAINS(out, "\ncontrol:    11 batches announced in control memory, 12 wakes sent, "
                      "0 loaders ended for a fault in it\n");
        CONTAINS(out, " waited for reads; depth 3 (raised 1 times)\n");
        free(out);
        out = tool_status(script_status_newer, true);
        CONTAINS(out, "\"ctl_batches\": 11, \"ctl_wakes\": 12, \"ctl_faults\": 0, ");
        CONTAINS(out, "\"io_waits\": 0, \"depth\": 3, \"depth_raises\": 1}");
        check_json(out);
        free(out);

        out = tool_status(script_status_older, false);
        CONTAINS(out, "\nloop fills: 0\nbytes:      7\n");
        CONTAINS(out, "9 shared, 0 waited for reads\n");
        LACKS(out, "control");
        LACKS(out, "depth");
        free(out);
        out = tool_status(script_status_older, true);
        LACKS(out, "ctl_");
        CONTAINS(out, "\"io_waits\": 0}");
        LACKS(strstr(out, "\"per_loader\""), "depth");
        check_json(out);
        free(out);
}
END_TEST

/* A STATUS answered by a fake daemon playing `script` fails with -code, the
 * message holding `needle` (unless NULL); the connection is returned for
 * more checks (then fake_done() it). */
static zrc_conn *status_refused(fake *f, void (*script)(int fd), int code, const char *needle) {
        zrc_conn *c = fake_connect(f, script, 1);

        ck_assert_int_eq(status_code(c), -code);
        if (needle)
                ck_assert_msg(strstr(zrc_last_error(c)->message, needle), "%s",
                              zrc_last_error(c)->message);
        return c;
}

static void script_wrong_id(int fd) {
        reply_status(fd, read_request(fd) + 1, NULL, 0);
        read_request(fd);
}

START_TEST(test_wrong_id) {
        fake f;
        zrc_conn *c = status_refused(&f, script_wrong_id, ZR_E_PROTO, "does not answer");

        /* broken for good: the next call fails at once with the same reason */
        ck_assert_int_eq(status_code(c), -ZR_E_PROTO);
        ck_assert(strstr(zrc_last_error(c)->message, "does not answer"));
        fake_done(&f, c);
}
END_TEST

/* Answers the first request (a STATUS) with n descriptors, the two ends of a
 * pipe in turn, then waits for the next request. */
static void reply_with_fds(int fd, int n) {
        uint64_t id = read_request(fd);
        int fds[80], p[2];

        ck_assert_int_le(n, 80);
        ck_assert_int_eq(pipe2(p, O_CLOEXEC), 0);
        for (int i = 0; i < n; i++)
                fds[i] = p[i % 2];
        reply_status(fd, id, fds, (size_t)n);
        close(p[0]);
        close(p[1]);
        read_request(fd);
}

static void script_unexpected_fd(int fd) {
        reply_with_fds(fd, 2);
}

static void script_ctrunc(int fd) {
        reply_with_fds(fd, 80); /* more than a frame may carry */
}

/* A STATUS answered by `script` with descriptors the call does not take:
 * -ZR_E_BAD_FD (its message holding `needle`, unless NULL), and every
 * descriptor closed: counted once the fake has closed its own (the client's
 * socket, the fake's and its listening one are gone). */
static void expect_fds_refused(void (*script)(int fd), const char *needle) {
        fake f;
        int before;
        zrc_conn *c = fake_connect(&f, script, 1);

        before = count_fds();
        ck_assert_int_eq(status_code(c), -ZR_E_BAD_FD);
        if (needle)
                ck_assert_msg(strstr(zrc_last_error(c)->message, needle), "%s",
                              zrc_last_error(c)->message);
        fake_done(&f, c);
        ck_assert_int_eq(count_fds(), before - 3);
}

START_TEST(test_unexpected_fds) {
        expect_fds_refused(script_unexpected_fd, NULL);
}
END_TEST

START_TEST(test_ctrunc) {
        expect_fds_refused(script_ctrunc, "MSG_CTRUNC");
}
END_TEST

static void script_bad_body(int fd) {
        /* a 5-byte array32 header claiming 2^32-1 elements */
        static const uint8_t frame[] = { 5, 0, 0, 0, 0xdd, 0xff, 0xff, 0xff, 0xff };

        read_request(fd);
        tl_send_raw(fd, frame, sizeof(frame), NULL, 0);
        read_request(fd);
}

START_TEST(test_bad_body) {
        fake f;

        fake_done(&f, status_refused(&f, script_bad_body, ZR_E_PROTO, "malformed"));
}
END_TEST

static void script_huge_frame(int fd) {
        static const uint8_t header[] = { 0, 0, 2, 0 }; /* 128 KiB > frame_max 64 KiB */

        read_request(fd);
        tl_send_raw(fd, header, sizeof(header), NULL, 0);
        read_request(fd);
}

START_TEST(test_huge_frame) {
        fake f;

        fake_done(&f, status_refused(&f, script_huge_frame, ZR_E_LIMIT, NULL));
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
        zrc_conn *c = status_refused(&f, script_fault_hangup, ZR_E_SHUTDOWN, "shutting down");

        ck_assert_str_eq(zrc_last_error(c)->name, "ZR_E_SHUTDOWN");
        fake_done(&f, c);
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

/* A socket listening at path, its directory made with mode; returns it. */
static int listen_at(const char *dir, mode_t mode, const char *path) {
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        int fd;

        ck_assert_int_eq(mkdir(dir, 0700), 0);
        ck_assert_int_eq(chmod(dir, mode), 0);
        memcpy(sa.sun_path, path, strlen(path) + 1);
        fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        ck_assert_int_ge(fd, 0);
        ck_assert_int_eq(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
        ck_assert_int_eq(listen(fd, 4), 0);
        return fd;
}

/* Whether anyone connected to the listening socket fd. */
static bool connected_to(int fd) {
        struct pollfd p = { .fd = fd, .events = POLLIN };

        return poll(&p, 1, 0) == 1;
}

START_TEST(test_socket_trust) {
        zrc_conn *c = NULL;
        zrc_error e = { 0 };
        char xdg[] = "/tmp/zrc-xdg-XXXXXX", zdir[64], zsock[96], real[64];
        fake f;
        int fd;

        /* an explicit path in a directory others can write is refused before
         * connect(), naming the path, the owner and the mode; the same socket
         * in a 0700 directory is used */
        fake_start(&f, NULL, 1);
        ck_assert_int_eq(chmod(f.dir, 0777), 0);
        ck_assert_int_eq(zrc_connect(f.path, &c, &e), -EPERM);
        ck_assert_str_eq(e.name, "EPERM");
        ck_assert(strstr(e.message, f.path));
        ck_assert(strstr(e.message, "writable"));
        ck_assert(strstr(e.message, "0777"));
        ck_assert(strstr(e.message, "uid "));
        ck_assert_int_eq(chmod(f.dir, 01733), 0);   /* sticky does not help */
        ck_assert_int_eq(zrc_connect(f.path, &c, &e), -EPERM);
        ck_assert_int_eq(chmod(f.dir, 0755), 0);
        ck_assert_int_eq(zrc_connect(f.path, &c, &e), 0);   /* the fake is this uid */
        zrc_disconnect(c);
        fake_stop(&f);

        /* a per-user default path ($XDG_RUNTIME_DIR/zrecord) whose directory
         * the group can write, or that is a symlink: refused, not connected
         * to, unless another default path answers */
        ck_assert_ptr_nonnull(mkdtemp(xdg));
        snprintf(zdir, sizeof(zdir), "%s/zrecord", xdg);
        snprintf(zsock, sizeof(zsock), "%s/zrecordd.sock", zdir);
        unsetenv("ZRECORD_SOCKET");
        setenv("XDG_RUNTIME_DIR", xdg, 1);
        fd = listen_at(zdir, 0770, zsock);
        if (zrc_connect(NULL, &c, &e) == 0) {
                ck_assert_str_ne(zrc_socket_path(c), zsock);
                zrc_disconnect(c);
        } else {
                ck_assert_int_eq(e.code, EPERM);
                ck_assert(strstr(e.message, zsock));
                ck_assert(strstr(e.message, "writable"));
        }
        ck_assert(!connected_to(fd));
        ck_assert_int_eq(chmod(zdir, 0700), 0);
        snprintf(real, sizeof(real), "%s/real", xdg);
        ck_assert_int_eq(rename(zdir, real), 0);
        ck_assert_int_eq(symlink("real", zdir), 0);
        if (zrc_connect(NULL, &c, &e) == 0) {
                ck_assert_str_ne(zrc_socket_path(c), zsock);
                zrc_disconnect(c);
        } else {
                ck_assert_int_eq(e.code, EPERM);
                ck_assert(strstr(e.message, "not a directory"));
        }
        ck_assert(!connected_to(fd));
        /* the real directory: used */
        ck_assert_int_eq(unlink(zdir), 0);
        ck_assert_int_eq(rename(real, zdir), 0);
        close(fd);
        unlink(zsock);
        rmdir(zdir);
        fake_start(&f, NULL, 1);
        ck_assert_int_eq(mkdir(zdir, 0700), 0);
        ck_assert_int_eq(rename(f.path, zsock), 0);
        ck_assert_int_eq(zrc_connect(NULL, &c, &e), 0);
        ck_assert_str_eq(zrc_socket_path(c), zsock);
        zrc_disconnect(c);
        fake_stop(&f);
        unlink(zsock);
        rmdir(zdir);
        rmdir(xdg);
        unsetenv("XDG_RUNTIME_DIR");
}
END_TEST

int main(void) {
        Suite *s = suite_create("conn");
        TCase *tc = TL_TCASE(s, "fake-daemon", 60, test_events_between,
                             test_status_control_and_depth, test_wrong_id,
                             test_unexpected_fds, test_ctrunc, test_bad_body, test_huge_frame,
                             test_fault_hangup, test_hangup_mid_frame, test_bad_version,
                             test_socket_resolution, test_socket_trust);
        conn_add_ring_tests(tc);
        return tl_run_suite(s);
}
