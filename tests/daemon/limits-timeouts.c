/* limits-timeouts.c: connections that hold a slot and do nothing with it.
 * One that never says HELLO is closed after hello-timeout seconds; one with no
 * handle open and no request in flight after idle-timeout seconds; both with a
 * FAULT ZR_E_LIMIT that says why. A connection with something open stays.
 * Every wait is a read with a bound: the daemon closes, the test sees EOF.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "limits-kit.h"

START_TEST(test_hello_timeout) {
        char msg[256] = "";
        lk_start((const char *const[]){"--hello-timeout=1", NULL});
        int silent = td_connect(&LD);
        int talker = td_connect_hello(&LD);
        ck_assert_int_eq(td_closed_with(silent, msg, sizeof(msg)), ZR_E_LIMIT);
        ck_assert_msg(strstr(msg, "no hello within 1 s"), "%s", msg);
        lk_wait_clients(talker, 1); /* the one that said HELLO is still served */
        close(talker);
        lk_teardown();
}
END_TEST

START_TEST(test_idle_timeout) {
        char msg[256] = "";
        lk_start((const char *const[]){"--idle-timeout=1", NULL});
        int idle = td_connect_hello(&LD);
        int busy = td_connect_hello(&LD);
        /* busy holds a handle: a read buffer */
        zr_wire_writer w;
        td_msg m;
        td_begin(&w, "buffer_open", lk_id());
        zr_wire_put_u64(&w, "bytes", 4096);
        ck_assert_int_eq(td_call(busy, &w, NULL, 0, &m), 0);
        td_msg_free(&m);
        ck_assert_int_eq(td_closed_with(idle, msg, sizeof(msg)), ZR_E_LIMIT);
        ck_assert_msg(strstr(msg, "idle for 1 s"), "%s", msg);
        /* the same time has passed for busy: it is still served */
        lk_wait_clients(busy, 1);
        close(busy);
        lk_teardown();
}
END_TEST

void limits_add_timeouts(Suite *s) {
        TL_TCASE(s, "timeouts", 120, test_hello_timeout, test_idle_timeout);
}
