/* daemon-lifecycle.c: the daemon suite's SIGTERM drain, idle exit and SIGHUP
 * reload, client limit, socket activation and watchdog (daemon-kit.h). */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "daemon-kit.h"
#include "dataset/dataset.h"

/* ---- lifecycle ------------------------------------------------------------------------- */

START_TEST(test_sigterm) {
        int fd = td_connect_hello(&D);
        uint32_t h = dense_store(fd, "t", "raw", 1000);
        int idle = td_connect_hello(&D);
        int pre = td_connect(&D); /* no HELLO yet */
        int lfd = td_connect_hello(&D); /* a loader whose slots are all held */
        td_msg lm;
        ck_assert_int_eq(open_dataset(lfd, "t", O_RDONLY, false, &lm), 0);
        uint32_t lh = (uint32_t)td_u64(&lm, "handle");
        td_msg_free(&lm);
        ck_assert_int_eq(open_loader(lfd, lh, 10, 0, 2, &lm), 0);
        td_msg_free(&lm);
        wait_clients(fd, 4);
        /* a request in flight and one queued behind it when SIGTERM lands */
        zr_wire_writer w;
        td_begin(&w, "verify", 1);
        zr_wire_put_u64(&w, "handle", h);
        ck_assert_int_eq(td_send(fd, &w, NULL, 0), 0);
        zr_wire_writer_destroy(&w);
        kill(D.pid, SIGTERM);
        ck_assert(td_wait_notify(&D, "STOPPING=1"));
        int status = td_wait_exit(&D);
        ck_assert(WIFEXITED(status));
        ck_assert_int_eq(WEXITSTATUS(status), 0);
        /* the verify was answered (it was read before the signal, or refused with
         * ZR_E_SHUTDOWN if it was not) and the connection closed */
        td_msg m;
        int r = td_recv(fd, &m);
        if (r == 0) {
                int code = td_code(&m);
                ck_assert_msg(code == 0 || code == ZR_E_SHUTDOWN, "code %d", code);
                td_msg_free(&m);
        }
        expect_closed(fd);
        expect_closed(idle);
        expect_closed(pre);
        /* the loader's client sees its batches, then LOADER_END ZR_E_SHUTDOWN */
        bool ended = false;
        for (;;) {
                int rr = td_recv(lfd, &lm);
                if (rr == -EPIPE)
                        break;
                ck_assert_int_eq(rr, 0);
                if (!strcmp(lm.kind, "loader_end")) {
                        ck_assert_uint_eq(td_u64(&lm, "code"), ZR_E_SHUTDOWN);
                        ended = true;
                } else {
                        ck_assert_str_eq(lm.kind, "batch");
                        ck_assert(!ended);
                }
                td_msg_free(&lm);
        }
        ck_assert(ended);
        close(lfd);
        /* the socket is gone, the store synced and released: it opens in-process */
        struct stat st;
        ck_assert_int_eq(stat(D.socket, &st), -1);
        int dfd = td_open_dir(path_in("t"));
        zr_dataset *ds;
        zr_error err = {0};
        ck_assert_msg(zr_dataset_open(dfd, NULL, &ds, &err) == 0, "%s", err.message);
        ck_assert_uint_eq(zr_dataset_length(ds), 1000);
        zr_dataset_close(ds, NULL);
        close(dfd);
        ck_assert(td_log_contains(&D, "shutting down (SIGTERM)"));
        ck_assert(td_log_contains(&D, "uid"));
}
END_TEST

START_TEST(test_idle_exit_and_reload) {
        td_cleanup(&D);
        char cfg[400];
        char dir[] = "/tmp/zrd-cfg-XXXXXX";
        ck_assert_ptr_nonnull(mkdtemp(dir));
        snprintf(cfg, sizeof(cfg), "%s/zrecordd.conf", dir);
        FILE *f = fopen(cfg, "we");
        fprintf(f, "log-level = info\nmax-handles = 100\n");
        fclose(f);
        char cfgarg[420];
        snprintf(cfgarg, sizeof(cfgarg), "--config=%s", cfg);
        const char *args[] = {cfgarg, "--idle-exit=1", NULL};
        td_start(&D, args);
        /* hold a client so the daemon does not leave while we reload */
        int fd = td_connect_hello(&D);
        f = fopen(cfg, "we");
        fprintf(f, "log-level = info\nmax-handles = 7\n");
        fclose(f);
        kill(D.pid, SIGHUP);
        ck_assert(td_wait_notify(&D, "READY=1")); /* after RELOADING=1 */
        int fd2 = td_connect(&D);
        zr_wire_writer w;
        td_msg m;
        td_begin_hello(&w, 1, 1, 1);
        ck_assert_int_eq(td_call(fd2, &w, NULL, 0, &m), 0);
        const msgpack_object *lim;
        uint64_t v;
        ck_assert_int_eq(zr_wire_get_map(m.root, "limits", &lim, NULL), 0);
        ck_assert_int_eq(zr_wire_get_u64(lim, "handles_max", &v, NULL), 0);
        ck_assert_uint_eq(v, 7);
        td_msg_free(&m);
        close(fd2);
        close(fd);
        /* no client left: the daemon exits by itself after a second */
        int status = td_wait_exit(&D);
        ck_assert(WIFEXITED(status));
        ck_assert_int_eq(WEXITSTATUS(status), 0);
        ck_assert(td_log_contains(&D, "max_handles 100 -> 7"));
        ck_assert(td_log_contains(&D, "shutting down (idle)"));
        unlink(cfg);
        rmdir(dir);
}
END_TEST

START_TEST(test_client_limit) {
        td_cleanup(&D);
        const char *args[] = {"--max-clients=2", NULL};
        td_start(&D, args);
        int a = td_connect_hello(&D), b = td_connect_hello(&D);
        int c = td_connect(&D);
        ck_assert_int_eq(expect_closed(c), ZR_E_LIMIT);
        close(b);
        wait_clients(a, 1);
        second_client_served();
        close(a);
}
END_TEST

START_TEST(test_activation_and_watchdog) {
        td_cleanup(&D);
        const char *env[] = {"WATCHDOG_USEC=200000", NULL};
        td_start_env(&D, NULL, env, true);
        ck_assert(td_wait_notify(&D, "WATCHDOG=1"));
        second_client_served();
        ck_assert(td_log_contains(&D, "passed by the service manager"));
        int status = td_stop(&D, SIGTERM);
        ck_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
        /* the daemon did not make the socket, so it leaves it */
        struct stat st;
        ck_assert_int_eq(stat(D.socket, &st), 0);
}
END_TEST

void daemon_add_lifecycle(TCase *tc) {
        tcase_add_test(tc, test_sigterm);
        tcase_add_test(tc, test_idle_exit_and_reload);
        tcase_add_test(tc, test_client_limit);
        tcase_add_test(tc, test_activation_and_watchdog);
}
