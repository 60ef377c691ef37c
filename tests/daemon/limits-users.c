/* limits-users.c: the limits per uid, with clients of other uids (made by a
 * child that switched uid before it connected: root only, else skipped).
 *
 * Connections: a uid gets at most max-clients-per-uid of them, and, of the
 * connections left, only a share that leaves room for every other uid (users.h),
 * so one uid's flood of connections cannot lock another uid out.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "limits-kit.h"

START_TEST(test_clients_per_uid) {
        if (!lk_can_switch_uid())
                return;
        lk_start_shared((const char *const[]){"--max-clients-per-uid=5", NULL});
        int a[6], b;
        char msg[256] = "";
        for (int i = 0; i < 5; i++) {
                a[i] = lk_connect_as(LK_UID_A);
                ck_assert_int_eq(lk_hello(a[i], NULL, 0), 0);
        }
        a[5] = lk_connect_as(LK_UID_A);
        ck_assert_int_eq(lk_hello(a[5], msg, sizeof(msg)), ZR_E_LIMIT);
        ck_assert_msg(strstr(msg, "uid 3500001") && strstr(msg, "limit of 5 per uid"), "%s", msg);
        /* another uid, and root (trusted: the global limit only), are served */
        b = lk_connect_as(LK_UID_B);
        ck_assert_int_eq(lk_hello(b, NULL, 0), 0);
        int root = td_connect_hello(&LD);
        /* one of uid A's connections goes: the next one is served */
        close(a[0]);
        lk_wait_clients(root, 6);
        a[0] = lk_connect_as(LK_UID_A);
        ck_assert_int_eq(lk_hello(a[0], NULL, 0), 0);
        for (int i = 0; i < 6; i++)
                close(a[i]);
        close(b);
        close(root);
        lk_teardown();
}
END_TEST

/* The audit's attack: one uid opens connections until the daemon refuses,
 * and another uid is then locked out. */
START_TEST(test_one_uid_cannot_lock_out_another) {
        enum { MAX = 40 };
        int a[MAX], b[MAX], na = 0, nb = 0;
        if (!lk_can_switch_uid())
                return;
        lk_start_shared((const char *const[]){"--max-clients=40", NULL});
        for (;;) {
                int fd = lk_connect_as(LK_UID_A);
                if (lk_hello(fd, NULL, 0) != 0) {
                        close(fd);
                        break;
                }
                ck_assert_int_lt(na, MAX);
                a[na++] = fd;
        }
        for (;;) {
                int fd = lk_connect_as(LK_UID_B);
                if (lk_hello(fd, NULL, 0) != 0) {
                        close(fd);
                        break;
                }
                ck_assert_int_lt(nb, MAX);
                b[nb++] = fd;
        }
        printf("clients: uid A got %d of %d connections, then uid B %d\n", na, MAX, nb);
        /* a uid alone holds at most half; the next one still gets a share */
        ck_assert_int_le(na, MAX / 2);
        ck_assert_int_ge(nb, 5);
        for (int i = 0; i < na; i++)
                close(a[i]);
        for (int i = 0; i < nb; i++)
                close(b[i]);
        lk_teardown();
}
END_TEST

void limits_add_users(Suite *s) {
        TL_TCASE(s, "users", 120, test_clients_per_uid, test_one_uid_cannot_lock_out_another);
}
