/* limits-rings.c: rings shared across users. Identical loaders share their
 * rings, and each member maps the others'. Where the kernel lacks
 * F_SEAL_FUTURE_WRITE (before 5.1; emulated here by a seccomp filter that
 * refuses that seal, inherited by the daemon) a client could map a ring it was
 * passed writable and change another user's batches: there the daemon refuses
 * a loader that would share with another uid's (EPERM), and lets the same uid's
 * share as before. On a kernel with the seal, users still share. Root only
 * (clients of other uids).
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "limits-kit.h"
#include "util.h"

/* uid A's loader, then uid B's: B's code (its message into msg). */
static int open_two(bool same_seed, char *msg, size_t size, int *ret_a, int *ret_b) {
        td_msg m;
        int root = td_connect_hello(&LD);
        lk_store(root, "shared", 64);
        close(root);
        int a = lk_connect_as(LK_UID_A), b = lk_connect_as(LK_UID_B);
        ck_assert_int_eq(lk_hello(a, NULL, 0), 0);
        ck_assert_int_eq(lk_hello(b, NULL, 0), 0);
        ck_assert_int_eq(lk_open_loader(a, lk_open_store(a, "shared"), 5, &m), 0);
        td_msg_free(&m);
        int code = lk_open_loader(b, lk_open_store(b, "shared"), same_seed ? 5 : 6, &m);
        if (code)
                td_message(&m, msg, size);
        else
                ck_assert_uint_eq(m.nfds, 1); /* its ring */
        td_msg_free(&m);
        *ret_a = a;
        *ret_b = b;
        return code;
}

START_TEST(test_no_future_write_no_sharing_across_uids) {
        char msg[256] = "";
        int a, b;
        td_msg m;
        if (!lk_can_switch_uid())
                return;
        if (tl_deny_future_write_seal() < 0) {
                printf("skipped: seccomp unavailable\n");
                return;
        }
        lk_start_shared(NULL);
        ck_assert(td_log_contains(&LD, "no F_SEAL_FUTURE_WRITE"));
        ck_assert_int_eq(open_two(true, msg, sizeof(msg), &a, &b), EPERM);
        ck_assert_msg(strstr(msg, "uid 3500001") && strstr(msg, "F_SEAL_FUTURE_WRITE"), "%s", msg);
        /* another seed is another group: served */
        ck_assert_int_eq(lk_open_loader(b, lk_open_store(b, "shared"), 6, &m), 0);
        td_msg_free(&m);
        /* the same uid shares its own rings as before */
        int a2 = lk_connect_as(LK_UID_A);
        ck_assert_int_eq(lk_hello(a2, NULL, 0), 0);
        ck_assert_int_eq(lk_open_loader(a2, lk_open_store(a2, "shared"), 5, &m), 0);
        td_msg_free(&m);
        close(a);
        close(a2);
        close(b);
        lk_teardown();
}
END_TEST

START_TEST(test_future_write_sharing_across_uids) {
        char msg[256] = "";
        int a, b;
        if (!lk_can_switch_uid())
                return;
        lk_start_shared(NULL);
        ck_assert(!td_log_contains(&LD, "no F_SEAL_FUTURE_WRITE"));
        ck_assert_msg(open_two(true, msg, sizeof(msg), &a, &b) == 0, "%s", msg);
        close(a);
        close(b);
        lk_teardown();
}
END_TEST

void limits_add_rings(Suite *s) {
        TL_TCASE(s, "rings", 120, test_no_future_write_no_sharing_across_uids,
                 test_future_write_sharing_across_uids);
}
