/* limits-users.c: the limits per uid, with clients of other uids (made by a
 * child that switched uid before it connected: root only, else skipped).
 *
 * Connections: a uid gets at most max-clients-per-uid of them, and, of the
 * connections left, only a share that leaves room for every other uid (users.h),
 * so one uid's flood of connections cannot lock another uid out.
 *
 * Shared memory: a uid's read buffers and rings, over all its connections,
 * stay under max-shm-per-uid (the audit's 12 connections under --max-shm=64M
 * made 768 MiB resident), and all uids together under max-shm-total, of which
 * one uid takes at most half.
 *
 * STATUS: a uid sees the daemon's totals, and its own loaders and account
 * only; root sees every loader and every uid's account.
 */
#include <errno.h>
#include <stdio.h>
#include <sys/mman.h>
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

/* Connects as uid and says HELLO until the daemon refuses one (closed
 * here); the accepted ones into fds[0..max), their count returned. */
static int connect_until_refused(uid_t uid, int *fds, int max) {
        int n = 0;

        for (;;) {
                int fd = lk_connect_as(uid);
                if (lk_hello(fd, NULL, 0) != 0) {
                        close(fd);
                        return n;
                }
                ck_assert_int_lt(n, max);
                fds[n++] = fd;
        }
}

/* The audit's attack: one uid opens connections until the daemon refuses,
 * and another uid is then locked out. */
START_TEST(test_one_uid_cannot_lock_out_another) {
        enum { MAX = 40 };
        int a[MAX], b[MAX], na, nb;
        if (!lk_can_switch_uid())
                return;
        lk_start_shared((const char *const[]){"--max-clients=40", NULL});
        na = connect_until_refused(LK_UID_A, a, MAX);
        nb = connect_until_refused(LK_UID_B, b, MAX);
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

#define MIB (UINT64_C(1) << 20)

/* BUFFER_OPEN of `bytes`: 0 (the buffer mapped and touched here, then
 * unmapped: the daemon keeps it until the connection goes) or the error code,
 * its message in msg. */
static int try_buffer(int fd, uint64_t bytes, char *msg, size_t size) {
        zr_wire_writer w;
        td_msg m;
        td_begin(&w, "buffer_open", lk_id());
        zr_wire_put_u64(&w, "bytes", bytes);
        int code = td_call_past_events(fd, &w, NULL, 0, &m);
        if (code == 0) {
                ck_assert_uint_eq(m.nfds, 1);
                void *p = mmap(NULL, bytes, PROT_READ, MAP_SHARED, m.fds[0], 0);
                ck_assert_ptr_ne(p, MAP_FAILED);
                munmap(p, bytes);
        } else if (msg) {
                td_message(&m, msg, size);
        }
        td_msg_free(&m);
        return code;
}

/* The daemon's resident shared memory (RssShmem of /proc/PID/status), MiB. */
static uint64_t shmem_mib(pid_t pid) {
        char path[64], line[256];
        unsigned long long kib = 0;
        snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
        FILE *f = fopen(path, "re");
        ck_assert_ptr_nonnull(f);
        while (fgets(line, sizeof(line), f))
                if (sscanf(line, "RssShmem: %llu kB", &kib) == 1)
                        break;
        fclose(f);
        return kib >> 10;
}

START_TEST(test_shm_per_uid_across_connections) {
        enum { CONNS = 12 };
        int a[CONNS], granted = 0;
        char msg[256] = "";
        if (!lk_can_switch_uid())
                return;
        lk_start_shared((const char *const[]){"--max-shm=64M", "--max-shm-per-uid=256M", NULL});
        for (int i = 0; i < CONNS; i++) {
                a[i] = lk_connect_as(LK_UID_A);
                ck_assert_int_eq(lk_hello(a[i], NULL, 0), 0);
                int code = try_buffer(a[i], 64 * MIB, msg, sizeof(msg));
                if (code == 0)
                        granted++;
                else
                        ck_assert_int_eq(code, ZR_E_LIMIT);
        }
        uint64_t resident = shmem_mib(LD.pid);
        printf("shm: uid A got %d buffers of 64 MiB on %d connections (limit 256 MiB per uid); "
               "daemon RssShmem %llu MiB\n", granted, CONNS, (unsigned long long)resident);
        ck_assert_int_eq(granted, 4);
        ck_assert_msg(strstr(msg, "limit of 268435456 per uid"), "%s", msg);
        ck_assert_uint_le(resident, 256 + 16);
        /* another uid has its own budget */
        int b = lk_connect_as(LK_UID_B);
        ck_assert_int_eq(lk_hello(b, NULL, 0), 0);
        ck_assert_int_eq(try_buffer(b, 64 * MIB, NULL, 0), 0);
        /* a connection of A that goes gives its buffer back to A */
        close(a[0]);
        close(b);
        int root = td_connect_hello(&LD);
        lk_wait_clients(root, CONNS);
        ck_assert_int_eq(try_buffer(a[CONNS - 1], 64 * MIB, NULL, 0), 0);
        for (int i = 1; i < CONNS; i++)
                close(a[i]);
        close(root);
        lk_teardown();
}
END_TEST

/* The budget of all uids: one uid takes at most half, the next still gets a
 * share; root (trusted) is held to the budget alone. */
START_TEST(test_shm_total_shared) {
        enum { CONNS = 8 };
        int a[CONNS], na = 0, nb = 0;
        if (!lk_can_switch_uid())
                return;
        lk_start_shared((const char *const[]){"--max-shm=64M", "--max-shm-per-uid=1G",
                                              "--max-shm-total=512M", NULL});
        for (int i = 0; i < CONNS; i++) {
                a[i] = lk_connect_as(LK_UID_A);
                ck_assert_int_eq(lk_hello(a[i], NULL, 0), 0);
                na += try_buffer(a[i], 64 * MIB, NULL, 0) == 0;
        }
        int b = lk_connect_as(LK_UID_B);
        ck_assert_int_eq(lk_hello(b, NULL, 0), 0);
        for (int i = 0; i < 4; i++)
                nb += try_buffer(b, 16 * MIB, NULL, 0) == 0;
        printf("shm: of 512 MiB, uid A got %d x 64 MiB, then uid B %d x 16 MiB\n", na, nb);
        ck_assert_int_le(na * 64, 256);
        ck_assert_int_ge(nb, 1);
        for (int i = 0; i < CONNS; i++)
                close(a[i]);
        close(b);
        lk_teardown();
}
END_TEST

/* The entry of `uid` in STATUS's "users" (asserting it is there): its fields
 * into *ret_shm and *ret_conns. */
static void user_entry(const td_msg *m, uint64_t uid, uint64_t *ret_conns, uint64_t *ret_shm) {
        const msgpack_object *items;
        uint32_t n = 0;
        ck_assert_int_eq(zr_wire_get_array(m->root, "users", &items, &n, NULL), 0);
        for (uint32_t i = 0; i < n; i++) {
                uint64_t u = 0;
                zr_wire_get_u64(&items[i], "uid", &u, NULL);
                if (u != uid)
                        continue;
                ck_assert_int_eq(zr_wire_get_u64(&items[i], "connections", ret_conns, NULL), 0);
                ck_assert_int_eq(zr_wire_get_u64(&items[i], "shm_bytes", ret_shm, NULL), 0);
                return;
        }
        ck_abort_msg("no entry for uid %llu in STATUS's users", (unsigned long long)uid);
}

START_TEST(test_status_shows_a_user_its_own) {
        td_msg m;
        uint64_t conns = 0, shm = 0;
        if (!lk_can_switch_uid())
                return;
        lk_start_shared((const char *const[]){"--max-clients-per-uid=7", NULL});
        int root = td_connect_hello(&LD);
        lk_store(root, "shared", 64);
        int a = lk_connect_as(LK_UID_A), b = lk_connect_as(LK_UID_B);
        ck_assert_int_eq(lk_hello(a, NULL, 0), 0);
        ck_assert_int_eq(lk_hello(b, NULL, 0), 0);
        ck_assert_int_eq(lk_open_loader(a, lk_open_store(a, "shared"), 1, &m), 0);
        td_msg_free(&m);
        ck_assert_int_eq(lk_open_loader(b, lk_open_store(b, "shared"), 2, &m), 0);
        td_msg_free(&m);
        ck_assert_int_eq(try_buffer(b, MIB, NULL, 0), 0);

        /* uid A: the totals, its own loader and account */
        lk_status(a, &m);
        ck_assert_uint_eq(td_u64(&m, "loaders"), 2);
        ck_assert_uint_eq(td_u64(&m, "clients"), 3);
        ck_assert_uint_eq(td_u64(&m, "uid"), LK_UID_A);
        ck_assert_uint_eq(lk_array_len(&m, "per_loader"), 1);
        ck_assert_uint_eq(lk_array_len(&m, "users"), 1);
        user_entry(&m, LK_UID_A, &conns, &shm);
        ck_assert_uint_eq(conns, 1);
        ck_assert_uint_gt(shm, 0); /* its ring */
        uint64_t ring_a = shm;
        const msgpack_object *lim = zr_wire_find(m.root, "limits");
        ck_assert_ptr_nonnull(lim);
        uint64_t v = 0;
        ck_assert_int_eq(zr_wire_get_u64(lim, "clients_uid_max", &v, NULL), 0);
        ck_assert_uint_eq(v, 7);
        td_msg_free(&m);

        /* uid B sees its own, not A's */
        lk_status(b, &m);
        ck_assert_uint_eq(lk_array_len(&m, "per_loader"), 1);
        ck_assert_uint_eq(lk_array_len(&m, "users"), 1);
        user_entry(&m, LK_UID_B, &conns, &shm);
        ck_assert_uint_eq(shm, ring_a + MIB); /* the same ring size, and its buffer */
        td_msg_free(&m);

        /* root sees everything */
        lk_status(root, &m);
        ck_assert_uint_eq(lk_array_len(&m, "per_loader"), 2);
        ck_assert_uint_eq(lk_array_len(&m, "users"), 3);
        user_entry(&m, LK_UID_A, &conns, &shm);
        ck_assert_uint_eq(shm, ring_a);
        user_entry(&m, 0, &conns, &shm);
        ck_assert_uint_eq(conns, 1);
        td_msg_free(&m);
        close(a);
        close(b);
        close(root);
        lk_teardown();
}
END_TEST

void limits_add_users(Suite *s) {
        TL_TCASE(s, "users", 120, test_clients_per_uid, test_one_uid_cannot_lock_out_another,
                 test_shm_per_uid_across_connections, test_shm_total_shared,
                 test_status_shows_a_user_its_own);
}
