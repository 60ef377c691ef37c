/* test-limits.c: the daemon's descriptors under a flood of connections and
 * of descriptors.
 *
 * It raises its soft descriptor limit to the hard one at start. Out of
 * descriptors (EMFILE) a pending connection stays in the listening socket's
 * backlog and keeps it readable: the daemon must not spin on it (CPU time
 * over the flood stays a small part of the time it lasts), it refuses the
 * connections it cannot take with a FAULT, its log gets a bounded number of
 * lines, and once descriptors free a new client is served. Descriptors parked
 * in frames a client never finishes count against its uid (the daemon holds
 * no more than max-fds-per-uid of them, the rest wait in the client's
 * sockets), and frame-timeout closes a connection whose frame stays
 * unfinished. limits-kit.h says where the other cases are; main() is here.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "check-run.h"
#include "limits-kit.h"
#include "util.h"

/* The soft limit a service often starts with (systemd's default), raised. */
START_TEST(test_nofile_raised_to_hard) {
        struct rlimit rl;
        char path[64], line[256];
        unsigned long long soft = 0, hard = 0;

        ck_assert_int_eq(getrlimit(RLIMIT_NOFILE, &rl), 0);
        if (rl.rlim_max <= 256) {
                printf("skipped: the hard descriptor limit is only %llu\n",
                       (unsigned long long)rl.rlim_max);
                return;
        }
        rl.rlim_cur = 256; /* inherited by the daemon */
        ck_assert_int_eq(setrlimit(RLIMIT_NOFILE, &rl), 0);
        lk_start(NULL);
        snprintf(path, sizeof(path), "/proc/%d/limits", (int)LD.pid);
        FILE *f = fopen(path, "re");
        ck_assert_ptr_nonnull(f);
        while (fgets(line, sizeof(line), f))
                if (strncmp(line, "Max open files", 14) == 0)
                        ck_assert_int_eq(sscanf(line + 14, "%llu %llu", &soft, &hard), 2);
        fclose(f);
        ck_assert_uint_eq(hard, (unsigned long long)rl.rlim_max);
        ck_assert_msg(soft == hard, "the daemon's soft limit stayed at %llu (hard %llu)", soft, hard);
        lk_teardown();
}
END_TEST

#define FLOOD 100      /* connections, under the listen backlog (128) */
#define SPARE_FDS 16   /* descriptors the daemon may open beyond its count at rest */

/* What one flood connection got: 1 served (HELLO answered), -1 refused (a
 * FAULT ZR_E_LIMIT, then EOF), 0 nothing yet. */
static int classify(int fd, bool *said_hello) {
        td_msg m;
        int r;
        if (!*said_hello) {
                zr_wire_writer w;
                td_begin_hello(&w, lk_id(), 1, 1);
                r = td_send(fd, &w, NULL, 0);
                zr_wire_writer_destroy(&w);
                *said_hello = true;
                if (r < 0)
                        return -1; /* already closed by the daemon */
        }
        r = tl_recv(fd, &m, 0);
        if (r == -ETIMEDOUT)
                return 0;
        if (r < 0)
                return -1;
        int code = tl_code(&m);
        td_msg_free(&m);
        if (code == 0)
                return 1;
        ck_assert_int_eq(code, ZR_E_LIMIT);
        return -1;
}

START_TEST(test_emfile_does_not_spin) {
        int fds[FLOOD], state[FLOOD] = {0};
        bool hello[FLOOD] = {false};
        unsigned served = 0, refused = 0;

        lk_raise_nofile();
        lk_start(NULL);
        int keep = td_connect_hello(&LD); /* a client of before the flood */
        struct rlimit rl;
        int base = td_fd_count(&LD);
        rl.rlim_cur = rl.rlim_max = (rlim_t)(base + SPARE_FDS);
        ck_assert_int_eq(prlimit(LD.pid, RLIMIT_NOFILE, &rl, NULL), 0);

        double cpu0 = lk_cpu_seconds(LD.pid);
        uint64_t t0 = tl_now_ns();
        for (int i = 0; i < FLOOD; i++)
                fds[i] = td_connect(&LD);
        /* Every flood connection is served or refused, each wait a poll on
         * the sockets with a bound; a daemon that spins answers too few. */
        uint64_t deadline = tl_now_ns() + 5000000000ull;
        while (served + refused < FLOOD && tl_now_ns() < deadline) {
                struct pollfd p[FLOOD];
                for (int i = 0; i < FLOOD; i++)
                        p[i] = (struct pollfd){.fd = state[i] ? -1 : fds[i], .events = POLLIN};
                poll(p, FLOOD, 100);
                for (int i = 0; i < FLOOD; i++) {
                        if (state[i])
                                continue;
                        state[i] = classify(fds[i], &hello[i]);
                        served += state[i] > 0;
                        refused += state[i] < 0;
                }
        }
        /* Then a moment of calm with the daemon still at its limit: a daemon
         * that spins on its readable listening socket burns all of it. */
        struct pollfd calm = {.fd = keep, .events = POLLIN};
        ck_assert_int_eq(poll(&calm, 1, 500), 0);
        double wall = (double)(tl_now_ns() - t0) / 1e9;
        double cpu = lk_cpu_seconds(LD.pid) - cpu0;
        printf("emfile: %u served, %u refused of %d; daemon CPU %.3f s in %.3f s; %u accept "
               "lines\n", served, refused, FLOOD, cpu, wall, lk_log_count("accept:"));
        ck_assert_msg(cpu < 0.25 * wall, "the daemon used %.3f s of CPU in %.3f s", cpu, wall);
        /* a bounded number of lines about it (log.h), not one per attempt */
        ck_assert_uint_le(lk_log_count("accept:"), 12);
        ck_assert_msg(served + refused == FLOOD, "%d connections never answered",
                      FLOOD - (int)(served + refused));
        ck_assert_uint_gt(refused, 0);
        ck_assert(td_log_contains(&LD, "refusing new connections until descriptors free"));

        /* once the flood's connections go, a new client is served */
        for (int i = 0; i < FLOOD; i++)
                close(fds[i]);
        lk_wait_clients(keep, 1);
        int late = td_connect_hello(&LD);
        close(late);
        close(keep);
        lk_teardown();
}
END_TEST

/* Sends the prefix of a frame of 1000 bytes and 10 of them, with as many
 * copies of a descriptor as a frame may carry: a frame that will never be
 * finished. */
static void park_descriptors(int fd) {
        int fds[ZR_FDS_PER_FRAME_MAX], null = open("/dev/null", O_RDONLY | O_CLOEXEC);
        uint8_t part[14] = {0xe8, 0x03, 0, 0, 0x82};
        ck_assert_int_ge(null, 0);
        for (int i = 0; i < ZR_FDS_PER_FRAME_MAX; i++)
                fds[i] = null;
        ck_assert_int_eq(td_send_raw(fd, part, sizeof(part), fds, ZR_FDS_PER_FRAME_MAX), 0);
        close(null);
}

/* The audit's attack: incomplete frames that each park a frame's descriptors
 * (64 then, ZR_FDS_PER_FRAME_MAX now), from many connections of one uid. */
START_TEST(test_parked_descriptors_per_uid) {
        enum { CONNS = 6, LIMIT = 2 * ZR_FDS_PER_FRAME_MAX };
        int a[CONNS];
        if (!lk_can_switch_uid())
                return;
        char limit[64];
        snprintf(limit, sizeof(limit), "--max-fds-per-uid=%d", LIMIT);
        lk_start_shared((const char *const[]){limit, NULL});
        int root = td_connect_hello(&LD);
        int base = td_fd_count(&LD);
        for (int i = 0; i < CONNS; i++) {
                a[i] = lk_connect_as(LK_UID_A);
                park_descriptors(a[i]);
        }
        /* the daemon reads what it takes: round trips until it holds the
         * descriptors its limit lets in (a bound on the tries), then more round
         * trips, and it holds no more */
        int n = 0;
        for (int tries = 0; tries < 10000 && n < base + CONNS + LIMIT; tries++) {
                lk_wait_clients(root, CONNS + 1);
                n = td_fd_count(&LD);
        }
        for (int i = 0; i < 50; i++)
                lk_wait_clients(root, CONNS + 1);
        n = td_fd_count(&LD);
        printf("parked: %d descriptors held for %d connections of one uid (limit %d)\n",
               n - base - CONNS, CONNS, LIMIT);
        ck_assert_msg(n <= base + CONNS + LIMIT, "the daemon holds %d descriptors, at most %d "
                      "expected", n, base + CONNS + LIMIT);
        ck_assert_int_eq(n, base + CONNS + LIMIT);
        /* the connections go, and every descriptor with them */
        for (int i = 0; i < CONNS; i++)
                close(a[i]);
        lk_wait_clients(root, 1);
        ck_assert_int_eq(td_fd_count(&LD), base);
        close(root);
        lk_teardown();
}
END_TEST

/* One connection's unfinished frame is closed after frame-timeout with a
 * FAULT, and its descriptors go back. */
START_TEST(test_unfinished_frame_closed) {
        lk_start((const char *const[]){"--frame-timeout=1", NULL});
        int keep = td_connect_hello(&LD);
        int base = td_fd_count(&LD);
        int fd = td_connect_hello(&LD);
        park_descriptors(fd);
        td_msg m;
        ck_assert_int_eq(td_recv(fd, &m), 0);
        ck_assert_int_eq(td_code(&m), ZR_E_LIMIT);
        const char *msg = "";
        size_t len = 0;
        zr_wire_get_str(m.root, "message", &msg, &len, NULL);
        ck_assert_msg(memmem(msg, len, "not finished within 1 s", 23), "%.*s", (int)len, msg);
        td_msg_free(&m);
        ck_assert_int_eq(td_recv(fd, &m), -EPIPE);
        close(fd);
        lk_wait_clients(keep, 1);
        ck_assert_int_eq(td_fd_count(&LD), base);
        close(keep);
        lk_teardown();
}
END_TEST

int main(void) {
        Suite *s = suite_create("limits");
        TL_TCASE(s, "descriptors", 120, test_nofile_raised_to_hard, test_emfile_does_not_spin,
                 test_parked_descriptors_per_uid, test_unfinished_frame_closed);
        limits_add_users(s);
        limits_add_timeouts(s);
        limits_add_rings(s);
        return tl_run_suite(s);
}
