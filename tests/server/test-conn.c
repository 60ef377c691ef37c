/* test-conn.c: the framed transport over a socketpair on a real libevent loop:
 * frames split across reads, descriptors delivered with their frame, the frame
 * limit enforced from the prefix alone, truncated control data, a client that
 * never reads its replies, paused reading, an owner without room for more input
 * (the frame begun completes, nothing of the next comes in), and a frame left
 * unfinished past its timeout. */
#include <check.h>
#include <errno.h>
#include <event2/event.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "server/conn.h"
#include "check-run.h"

typedef struct harness {
        struct event_base *base;
        zr_conn *conn;
        int peer;              /* the test's end */
        int frames;
        uint8_t last[256];
        size_t last_len;
        int fds_at_frame;
        int closed;
        enum zr_conn_close_reason reason;
        int pause_after;       /* stop reading after this many frames (0 = never) */
        int room;              /* may_read()'s answer */
        int asked;             /* times may_read() was asked */
} harness;

static int on_frame(zr_conn *c, const uint8_t *body, size_t len, void *u) {
        harness *h = u;
        h->frames++;
        h->last_len = len < sizeof(h->last) ? len : sizeof(h->last);
        memcpy(h->last, body, h->last_len);
        h->fds_at_frame = (int)zr_conn_pending_fds(c);
        if (h->pause_after && h->frames == h->pause_after)
                zr_conn_set_reading(c, 0);
        if (len == 4 && memcmp(body, "quit", 4) == 0)
                return -1;
        return 0;
}

static void on_close(zr_conn *c, enum zr_conn_close_reason reason, int error, void *u) {
        harness *h = u;
        h->closed = 1;
        h->reason = reason;
        h->conn = zr_conn_free(c);
}

static int may_read(zr_conn *c, void *u) {
        harness *h = u;
        h->asked++;
        return h->room;
}

static const zr_conn_ops ops = {on_frame, on_close};
static const zr_conn_ops gated_ops = {on_frame, on_close, NULL, may_read, NULL};

static void setup_with(harness *h, uint32_t max_frame, uint64_t max_output,
                       uint64_t frame_timeout_ms, const zr_conn_ops *o) {
        memset(h, 0, sizeof(*h));
        int sv[2];
        ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
        h->base = event_base_new();
        ck_assert_ptr_nonnull(h->base);
        h->room = 1;
        zr_conn_limits lim = {max_frame, max_output, frame_timeout_ms};
        ck_assert_int_eq(zr_conn_new(h->base, sv[0], &lim, o, h, &h->conn), 0);
        h->peer = sv[1];
}

static void setup(harness *h, uint32_t max_frame, uint64_t max_output) {
        setup_with(h, max_frame, max_output, 0, &ops);
}

static void teardown(harness *h) {
        zr_conn_free(h->conn);
        event_base_free(h->base);
        close(h->peer);
}

/* The test's harness: the checked fixture sets it up with a 1 KiB frame and a
 * 1 MiB output limit (the "conn" case); the tests of the "own-setup" case set
 * it up as they need. */
static harness h;

static void default_setup(void) {
        setup(&h, 1024, 1 << 20);
}

static void default_teardown(void) {
        teardown(&h);
}

/* Runs the loop until cond holds; each pass blocks until some event fires. */
#define RUN_UNTIL(h, cond) do { while (!(cond)) ck_assert_int_ge(event_base_loop((h)->base, EVLOOP_ONCE), 0); } while (0)

static void send_frame(int fd, const void *body, uint32_t len, const int *fds, size_t nfds) {
        uint8_t buf[4 + 256];
        buf[0] = (uint8_t)len; buf[1] = (uint8_t)(len >> 8); buf[2] = (uint8_t)(len >> 16); buf[3] = (uint8_t)(len >> 24);
        memcpy(buf + 4, body, len);
        struct iovec iov = {buf, 4 + len};
        char control[CMSG_SPACE(sizeof(int) * (ZR_CONN_MAX_FDS_PER_READ + 8))];
        struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1};
        if (nfds) {
                mh.msg_control = control;
                mh.msg_controllen = CMSG_SPACE(sizeof(int) * nfds);
                struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
                cm->cmsg_level = SOL_SOCKET;
                cm->cmsg_type = SCM_RIGHTS;
                cm->cmsg_len = CMSG_LEN(sizeof(int) * nfds);
                memcpy(CMSG_DATA(cm), fds, sizeof(int) * nfds);
        }
        ck_assert_int_eq(sendmsg(fd, &mh, MSG_NOSIGNAL), (ssize_t)(4 + len));
}

START_TEST(test_frames_split_and_whole) {
        /* one frame delivered a byte at a time */
        const uint8_t frame[] = {5, 0, 0, 0, 'h', 'e', 'l', 'l', 'o'};
        for (size_t i = 0; i < sizeof(frame); i++) {
                ck_assert_int_eq(write(h.peer, frame + i, 1), 1);
                ck_assert_int_eq(h.frames, 0);
                if (i + 1 < sizeof(frame))
                        RUN_UNTIL(&h, 1); /* one pass: the byte is read, no frame yet */
        }
        RUN_UNTIL(&h, h.frames == 1);
        ck_assert_uint_eq(h.last_len, 5);
        ck_assert_int_eq(memcmp(h.last, "hello", 5), 0);
        /* two frames in one write, one of them empty */
        const uint8_t two[] = {0, 0, 0, 0, 2, 0, 0, 0, 'o', 'k'};
        ck_assert_int_eq(write(h.peer, two, sizeof(two)), (ssize_t)sizeof(two));
        RUN_UNTIL(&h, h.frames == 3);
        ck_assert_int_eq(memcmp(h.last, "ok", 2), 0);
        /* a reply reaches the peer with its prefix */
        ck_assert_int_eq(zr_conn_send(h.conn, "yes", 3, NULL, 0), 0);
        uint8_t rb[16];
        ck_assert_int_eq(read(h.peer, rb, sizeof(rb)), 7);
        ck_assert_int_eq(rb[0], 3);
        ck_assert_int_eq(memcmp(rb + 4, "yes", 3), 0);
        /* EOF from the peer closes */
        shutdown(h.peer, SHUT_WR);
        RUN_UNTIL(&h, h.closed);
        ck_assert_int_eq(h.reason, ZR_CONN_EOF);
}
END_TEST

START_TEST(test_descriptors_both_ways) {
        int p[2];
        ck_assert_int_eq(pipe2(p, O_CLOEXEC), 0);
        send_frame(h.peer, "fd", 2, p, 2);
        RUN_UNTIL(&h, h.frames == 1);
        ck_assert_int_eq(h.fds_at_frame, 2);
        int got;
        ck_assert_int_eq(zr_conn_take_fd(h.conn, &got), 0);
        ck_assert(fcntl(got, F_GETFD) & FD_CLOEXEC); /* MSG_CMSG_CLOEXEC */
        ck_assert_int_eq(write(p[1], "z", 1), 1);
        char ch;
        ck_assert_int_eq(read(got, &ch, 1), 1); /* the same pipe */
        close(got);
        ck_assert_uint_eq(zr_conn_drop_fds(h.conn), 1);
        ck_assert_int_eq(zr_conn_take_fd(h.conn, &got), -ENOENT);

        /* the daemon passes a descriptor back with a reply */
        int q[2];
        ck_assert_int_eq(pipe2(q, O_CLOEXEC), 0);
        ck_assert_int_eq(zr_conn_send(h.conn, "r", 1, &q[0], 1), 0);
        char buf[16], control[CMSG_SPACE(sizeof(int))];
        struct iovec iov = {buf, sizeof(buf)};
        struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = control,
                            .msg_controllen = sizeof(control)};
        ck_assert_int_eq(recvmsg(h.peer, &mh, MSG_CMSG_CLOEXEC), 5);
        struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
        ck_assert_ptr_nonnull(cm);
        int passed;
        memcpy(&passed, CMSG_DATA(cm), sizeof(int));
        ck_assert_int_eq(write(q[1], "y", 1), 1);
        ck_assert_int_eq(read(passed, &ch, 1), 1);
        ck_assert_int_eq(ch, 'y');
        close(passed);
        close(q[1]);
        close(p[0]);
        close(p[1]);
}
END_TEST

START_TEST(test_frame_limit_from_prefix) {
        const uint8_t big[] = {0x01, 0x04, 0, 0}; /* 1025 bytes declared, none sent */
        ck_assert_int_eq(write(h.peer, big, 4), 4);
        RUN_UNTIL(&h, h.closed);
        ck_assert_int_eq(h.reason, ZR_CONN_FRAME_TOO_BIG);
        ck_assert_int_eq(h.frames, 0);
}
END_TEST

START_TEST(test_truncated_control_data) {
        int fds[ZR_CONN_MAX_FDS_PER_READ + 4];
        for (size_t i = 0; i < sizeof(fds) / sizeof(fds[0]); i++)
                fds[i] = open("/dev/null", O_RDONLY | O_CLOEXEC);
        send_frame(h.peer, "x", 1, fds, sizeof(fds) / sizeof(fds[0]));
        RUN_UNTIL(&h, h.closed);
        ck_assert_int_eq(h.reason, ZR_CONN_FD_ERROR);
        for (size_t i = 0; i < sizeof(fds) / sizeof(fds[0]); i++)
                close(fds[i]);
}
END_TEST

START_TEST(test_output_limit_and_owner_close) {
        setup(&h, 1024, 64 * 1024);
        static uint8_t chunk[8192];
        int r = 0;
        for (int i = 0; i < 1000 && r == 0; i++) /* the peer never reads */
                r = zr_conn_send(h.conn, chunk, sizeof(chunk), NULL, 0);
        ck_assert_int_eq(r, -EPIPE);
        RUN_UNTIL(&h, h.closed);
        ck_assert_int_eq(h.reason, ZR_CONN_OUTPUT_FULL);
        teardown(&h);

        setup(&h, 1024, 1 << 20);
        send_frame(h.peer, "quit", 4, NULL, 0);
        RUN_UNTIL(&h, h.closed);
        ck_assert_int_eq(h.reason, ZR_CONN_BY_OWNER);
        teardown(&h);
}
END_TEST

START_TEST(test_paused_reading_keeps_frames) {
        h.pause_after = 1;
        const uint8_t three[] = {1, 0, 0, 0, 'a', 1, 0, 0, 0, 'b', 1, 0, 0, 0, 'c'};
        ck_assert_int_eq(write(h.peer, three, sizeof(three)), (ssize_t)sizeof(three));
        RUN_UNTIL(&h, h.frames == 1);
        ck_assert_int_eq(h.last[0], 'a');
        /* nothing more is dispatched while paused */
        ck_assert_int_ge(event_base_loop(h.base, EVLOOP_NONBLOCK), 0);
        ck_assert_int_eq(h.frames, 1);
        h.pause_after = 0;
        zr_conn_set_reading(h.conn, 1);
        RUN_UNTIL(&h, h.frames == 3);
        ck_assert_int_eq(h.last[0], 'c');
}
END_TEST

/* The owner has no room for more input (its uid's descriptors in flight, say):
 * the frame begun is read to its end, and not one byte or descriptor of the
 * next frame comes in until the owner kicks the conn. */
START_TEST(test_no_room_reads_only_the_frame_begun) {
        int fds[2];
        setup_with(&h, 1024, 1 << 20, 0, &gated_ops);
        fds[0] = open("/dev/null", O_RDONLY | O_CLOEXEC);
        fds[1] = open("/dev/null", O_RDONLY | O_CLOEXEC);
        /* frame A: its prefix and half its body, with two descriptors */
        const uint8_t head[] = {6, 0, 0, 0, 'a', 'b', 'c'};
        struct iovec iov = {(void *)head, sizeof(head)};
        char control[CMSG_SPACE(sizeof(int) * 2)];
        struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = control,
                            .msg_controllen = sizeof(control)};
        struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
        cm->cmsg_level = SOL_SOCKET;
        cm->cmsg_type = SCM_RIGHTS;
        cm->cmsg_len = CMSG_LEN(sizeof(int) * 2);
        memcpy(CMSG_DATA(cm), fds, sizeof(fds));
        ck_assert_int_eq(sendmsg(h.peer, &mh, 0), (ssize_t)sizeof(head));
        RUN_UNTIL(&h, zr_conn_input_bytes(h.conn) == sizeof(head));
        ck_assert_uint_eq(zr_conn_pending_fds(h.conn), 2);
        /* no room from here; the rest of A, then a whole frame B with its own
         * two descriptors */
        h.room = 0;
        ck_assert_int_eq(write(h.peer, "def", 3), 3);
        send_frame(h.peer, "B", 1, fds, 2);
        RUN_UNTIL(&h, h.frames == 1);
        ck_assert_int_eq(memcmp(h.last, "abcdef", 6), 0);
        ck_assert_int_eq(h.fds_at_frame, 2);
        ck_assert_uint_eq(zr_conn_drop_fds(h.conn), 2);
        /* the loop turns, B stays in the socket */
        for (int i = 0; i < 5; i++)
                ck_assert_int_ge(event_base_loop(h.base, EVLOOP_NONBLOCK), 0);
        ck_assert_int_eq(h.frames, 1);
        ck_assert_uint_eq(zr_conn_input_bytes(h.conn), 0);
        ck_assert_uint_eq(zr_conn_pending_fds(h.conn), 0);
        int asked = h.asked;
        for (int i = 0; i < 5; i++)
                ck_assert_int_ge(event_base_loop(h.base, EVLOOP_NONBLOCK), 0);
        ck_assert_int_eq(h.asked, asked); /* waiting: not asked again and again */
        /* room again: a kick, and B comes in with its descriptors */
        h.room = 1;
        zr_conn_kick(h.conn);
        RUN_UNTIL(&h, h.frames == 2);
        ck_assert_int_eq(h.last[0], 'B');
        ck_assert_int_eq(h.fds_at_frame, 2);
        ck_assert_uint_eq(zr_conn_drop_fds(h.conn), 2);
        close(fds[0]);
        close(fds[1]);
        teardown(&h);
}
END_TEST

/* A frame begun must end within the timeout; complete frames, however many,
 * never trip it. */
START_TEST(test_frame_timeout) {
        setup_with(&h, 1024, 1 << 20, 50, &ops);
        for (int i = 0; i < 3; i++) {
                send_frame(h.peer, "ok", 2, NULL, 0);
                RUN_UNTIL(&h, h.frames == i + 1);
        }
        ck_assert(!h.closed);
        const uint8_t part[] = {10, 0, 0, 0, 'x'}; /* 1 of 10 body bytes */
        ck_assert_int_eq(write(h.peer, part, sizeof(part)), (ssize_t)sizeof(part));
        RUN_UNTIL(&h, h.closed);
        ck_assert_int_eq(h.reason, ZR_CONN_FRAME_TIMEOUT);
        ck_assert_int_eq(h.frames, 3);
        teardown(&h);
}
END_TEST

int main(void) {
        Suite *s = suite_create("conn");
        TCase *tc = TL_TCASE(s, "conn", 0, test_frames_split_and_whole, test_descriptors_both_ways,
                             test_frame_limit_from_prefix, test_truncated_control_data,
                             test_paused_reading_keeps_frames);

        tcase_add_checked_fixture(tc, default_setup, default_teardown);
        TL_TCASE(s, "own-setup", 0, test_output_limit_and_owner_close,
                 test_no_room_reads_only_the_frame_begun, test_frame_timeout);
        return tl_run_suite(s);
}
