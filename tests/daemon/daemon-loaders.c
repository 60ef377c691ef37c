/* daemon-loaders.c: the daemon suite's loaders: batches in step order from
 * the ring, releases, staleness, and two connections' identical loaders
 * sharing their rings (daemon-kit.h). */
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

/* ---- loaders ----------------------------------------------------------------------- */

/* Reads frames until a "batch" or "loader_end" event; replies are not expected. */
static void next_event(int fd, td_msg *m) {
        ck_assert_int_eq(td_recv(fd, m), 0);
        ck_assert_msg(!strcmp(m->kind, "batch") || !strcmp(m->kind, "loader_end"), "got %s",
                      m->kind);
}

/* Reads frames until one of kind `until` (into *m), giving back the slot of
 * every batch of loader l on the way. */
static void recv_releasing(int fd, uint32_t l, const char *until, td_msg *m) {
        for (;;) {
                ck_assert_int_eq(td_recv(fd, m), 0);
                if (!strcmp(m->kind, until))
                        return;
                if (!strcmp(m->kind, "batch"))
                        td_release(fd, l, td_u64(m, "ring"), td_u64(m, "slot"));
                td_msg_free(m);
        }
}

/* The rings a connection's loader reads: its own and those RING passed. */
typedef struct ringmap {
        uint64_t id[8];
        const uint8_t *data[8];
        uint64_t bytes[8];
        size_t n;
} ringmap;

static const uint8_t *ringmap_find(const ringmap *rm, uint64_t id) {
        for (size_t i = 0; i < rm->n; i++)
                if (rm->id[i] == id)
                        return rm->data[i];
        return NULL;
}

static void ringmap_add(ringmap *rm, uint64_t id, uint64_t bytes, int fd) {
        ck_assert_uint_lt(rm->n, 8);
        ck_assert_ptr_null(ringmap_find(rm, id));
        rm->data[rm->n] = mmap(NULL, bytes, PROT_READ, MAP_SHARED, fd, 0);
        ck_assert_ptr_ne(rm->data[rm->n], MAP_FAILED);
        rm->id[rm->n] = id;
        rm->bytes[rm->n++] = bytes;
}

static void ringmap_drop(ringmap *rm, uint64_t id) {
        for (size_t i = 0; i < rm->n; i++) {
                if (rm->id[i] != id)
                        continue;
                munmap((void *)rm->data[i], rm->bytes[i]);
                rm->n--;
                rm->id[i] = rm->id[rm->n];
                rm->data[i] = rm->data[rm->n];
                rm->bytes[i] = rm->bytes[rm->n];
                return;
        }
        ck_abort_msg("ring_close of ring %llu, never passed", (unsigned long long)id);
}

/* Reads l's next batch on fd, mapping rings (RING) and unmapping them
 * (RING_CLOSE) on the way; *closed is set to a closed ring's id. */
static void next_group_batch(int fd, ringmap *rm, td_msg *m, uint64_t *closed) {
        for (;;) {
                ck_assert_int_eq(td_recv(fd, m), 0);
                ck_assert_int_eq(zr_msg_check(m->root, ZR_MSG_INVALID, NULL, NULL), 0);
                if (!strcmp(m->kind, "ring")) {
                        ck_assert_uint_eq(m->nfds, 1);
                        ck_assert_uint_eq(td_u64(m, "ring_bytes"),
                                          td_u64(m, "slots") * td_u64(m, "slot_bytes"));
                        ringmap_add(rm, td_u64(m, "ring"), td_u64(m, "ring_bytes"), m->fds[0]);
                } else if (!strcmp(m->kind, "ring_close")) {
                        ck_assert_uint_eq(m->nfds, 0);
                        ringmap_drop(rm, td_u64(m, "ring"));
                        if (closed)
                                *closed = td_u64(m, "ring");
                } else {
                        ck_assert_str_eq(m->kind, "batch");
                        ck_assert_uint_eq(m->nfds, 0);
                        return;
                }
                td_msg_free(m);
        }
}

/* Two connections open identical loaders: one gather per step feeds both from
 * the same ring slot (the second ring arrives as a RING event with its
 * descriptor), STATUS shows the sharing, and when one closes the other goes
 * on and is told when the closed loader's ring is gone. */
START_TEST(test_loader_group) {
        int fd[2] = { td_connect_hello(&D), td_connect_hello(&D) };
        ringmap rm[2];
        memset(rm, 0, sizeof(rm));
        uint32_t l[2];
        uint64_t own[2], closed = 0;
        td_msg m;
        uint32_t h = dense_store(fd[0], "lg", "raw", 200);
        ck_assert_int_eq(open_dataset(fd[1], "lg", O_RDONLY, false, &m), 0);
        uint32_t h1 = (uint32_t)td_u64(&m, "handle");
        td_msg_free(&m);
        for (int i = 0; i < 2; i++) {
                ck_assert_int_eq(open_loader(fd[i], i ? h1 : h, 10, 0, 3, &m), 0);
                ck_assert_uint_eq(m.nfds, 1);
                l[i] = (uint32_t)td_u64(&m, "loader");
                own[i] = td_u64(&m, "ring");
                ringmap_add(&rm[i], own[i], td_u64(&m, "ring_bytes"), m.fds[0]);
                td_msg_free(&m);
        }
        ck_assert_uint_ne(own[0], own[1]);
        for (uint64_t step = 0; step < 30; step++) {
                uint64_t ring[2], slot[2];
                for (int i = 0; i < 2; i++) {
                        next_group_batch(fd[i], &rm[i], &m, NULL);
                        ck_assert_uint_eq(td_u64(&m, "step"), step);
                        ring[i] = td_u64(&m, "ring");
                        slot[i] = td_u64(&m, "slot");
                        const uint8_t *base = ringmap_find(&rm[i], ring[i]);
                        ck_assert_ptr_nonnull(base);
                        const msgpack_object *streams;
                        uint32_t ns;
                        uint64_t off, idx[10];
                        ck_assert_int_eq(zr_wire_get_array(m.root, "streams", &streams, &ns,
                                                           NULL), 0);
                        ck_assert_int_eq(zr_wire_get_u64(&streams[0], "offset", &off, NULL), 0);
                        for (int k = 0; k < 10; k++)
                                idx[k] = (step * 10 + (uint64_t)k) % 200;
                        check_dense_values(base + off, idx, 10);
                        td_msg_free(&m);
                }
                /* the same slot of the same ring: gathered once, never copied */
                ck_assert_uint_eq(ring[0], ring[1]);
                ck_assert_uint_eq(slot[0], slot[1]);
                for (int i = 0; i < 2; i++)
                        td_release(fd[i], l[i], ring[i], slot[i]);
        }
        /* each was passed the other's ring */
        ck_assert_uint_eq(rm[0].n, 2);
        ck_assert_uint_eq(rm[1].n, 2);
        /* STATUS: one gather per step for both */
        zr_wire_writer w;
        td_begin(&w, "status", 7000);
        ck_assert_int_eq(td_call_past_events(fd[0], &w, NULL, 0, &m), 0);
        ck_assert_int_eq(zr_msg_check(m.root, ZR_MSG_STATUS, NULL, NULL), 0);
        uint64_t gathers = td_u64(&m, "gathers");
        const msgpack_object *pl;
        uint32_t npl;
        uint64_t shared = 0, v;
        ck_assert_int_eq(zr_wire_get_array(m.root, "per_loader", &pl, &npl, NULL), 0);
        ck_assert_uint_eq(npl, 2);
        for (uint32_t i = 0; i < npl; i++) {
                ck_assert_int_eq(zr_wire_get_u64(&pl[i], "shared", &v, NULL), 0);
                shared += v;
        }
        td_msg_free(&m);
        ck_assert_uint_ge(gathers, 30);
        ck_assert_uint_le(gathers, 30 + 2 * 3);
        ck_assert_uint_ge(shared, 30 - 3);
        /* the first closes; events in flight before its reply are dropped */
        td_begin(&w, "loader_close", 7001);
        zr_wire_put_u64(&w, "loader", l[0]);
        ck_assert_int_eq(td_call_past_events(fd[0], &w, NULL, 0, &m), 0);
        td_msg_free(&m);
        /* the second goes on; the first's ring goes once nothing of it is held */
        for (uint64_t step = 30; step < 60; step++) {
                next_group_batch(fd[1], &rm[1], &m, &closed);
                ck_assert_uint_eq(td_u64(&m, "step"), step);
                uint64_t ring = td_u64(&m, "ring");
                if (closed)
                        ck_assert_uint_ne(ring, closed);
                ck_assert_ptr_nonnull(ringmap_find(&rm[1], ring));
                td_release(fd[1], l[1], ring, td_u64(&m, "slot"));
                td_msg_free(&m);
        }
        ck_assert_uint_eq(closed, own[0]);
        ck_assert_uint_eq(rm[1].n, 1);
        td_begin(&w, "loader_close", 7002);
        zr_wire_put_u64(&w, "loader", l[1]);
        ck_assert_int_eq(td_call_past_events(fd[1], &w, NULL, 0, &m), 0);
        td_msg_free(&m);
        for (int i = 0; i < 2; i++)
                while (rm[i].n)
                        ringmap_drop(&rm[i], rm[i].id[0]);
        expect_no_loaders(fd[0]);
        close(fd[0]);
        close(fd[1]);
}
END_TEST

START_TEST(test_loader) {
        int fd = td_connect_hello(&D);
        td_msg m;
        uint32_t h = dense_store(fd, "ld", "zstd", 100);
        /* bad parameters */
        ck_assert_int_eq(open_loader(fd, h, 0, 0, 2, &m), ZR_E_SAMPLER);
        td_msg_free(&m);
        ck_assert_int_eq(open_loader(fd, h, 10, 0, 1000, &m), ZR_E_LIMIT);
        td_msg_free(&m);
        ck_assert_int_eq(open_loader(fd, 999, 10, 0, 2, &m), ZR_E_NO_HANDLE);
        td_msg_free(&m);

        ck_assert_int_eq(open_loader(fd, h, 10, 3, 2, &m), 0);
        ck_assert_int_eq(zr_msg_check(m.root, ZR_MSG_LOADER_OPEN, NULL, NULL), 0);
        ck_assert_uint_eq(m.nfds, 1);
        uint32_t l = (uint32_t)td_u64(&m, "loader");
        uint64_t ring_bytes = td_u64(&m, "ring_bytes");
        uint64_t ring_id = td_u64(&m, "ring");
        ck_assert_uint_ne(ring_id, 0);
        ck_assert_uint_eq(td_u64(&m, "slots"), 2);
        const uint8_t *ring = mmap(NULL, ring_bytes, PROT_READ, MAP_SHARED, m.fds[0], 0);
        ck_assert_ptr_ne(ring, MAP_FAILED);
        td_msg_free(&m);
        /* steps 3.. in order, sequential: step s holds records 10s .. 10s+9 (mod 100) */
        for (uint64_t step = 3; step < 3 + 12; step++) {
                next_event(fd, &m);
                ck_assert_str_eq(m.kind, "batch");
                ck_assert_int_eq(zr_msg_check(m.root, ZR_MSG_INVALID, NULL, NULL), 0);
                ck_assert_uint_eq(td_u64(&m, "step"), step);
                ck_assert_uint_eq(td_u64(&m, "ring"), ring_id); /* alone: its own ring */
                uint32_t slot = (uint32_t)td_u64(&m, "slot");
                const msgpack_object *streams;
                uint32_t ns;
                ck_assert_int_eq(zr_wire_get_array(m.root, "streams", &streams, &ns, NULL), 0);
                ck_assert_uint_eq(ns, 1);
                uint64_t off;
                ck_assert_int_eq(zr_wire_get_u64(&streams[0], "offset", &off, NULL), 0);
                uint64_t idx[10];
                for (int i = 0; i < 10; i++)
                        idx[i] = (step * 10 + (uint64_t)i) % 100;
                size_t ni;
                const uint8_t *ind = td_u64s(&m, "indices", &ni);
                ck_assert_uint_eq(ni, 10);
                ck_assert_uint_eq(zr_wire_u64_at(ind, 0), idx[0]);
                check_dense_values(ring + off, idx, 10);
                td_msg_free(&m);
                /* give the slot back (a notification: no reply) */
                td_release(fd, l, ring_id, slot);
        }
        /* a release of a slot not held: a FAULT */
        td_release(fd, l, ring_id, 9);
        recv_releasing(fd, l, "fault", &m);
        ck_assert_int_eq(td_code(&m), ZR_E_PROTO);
        td_msg_free(&m);
        /* STATUS shows it */
        zr_wire_writer w;
        td_begin(&w, "status", 5000);
        ck_assert_int_eq(td_send(fd, &w, NULL, 0), 0);
        zr_wire_writer_destroy(&w);
        recv_releasing(fd, l, "ok", &m);
        ck_assert_uint_eq(td_u64(&m, "loaders"), 1);
        ck_assert_uint_ge(td_u64(&m, "batches"), 12);
        const msgpack_object *pl;
        uint32_t npl;
        ck_assert_int_eq(zr_wire_get_array(m.root, "per_loader", &pl, &npl, NULL), 0);
        ck_assert_uint_eq(npl, 1);
        td_msg_free(&m);
        /* an append makes the loader stale: LOADER_END ZR_E_STALE */
        int mfd;
        {
                uint32_t data[ITEM] = {400, 401, 402, 403};
                mfd = td_memfd(data, sizeof(data), true);
        }
        uint64_t shape[] = {ITEM};
        td_begin(&w, "append", 6000);
        zr_wire_put_u64(&w, "handle", h);
        zr_wire_put_str(&w, "dtype", "<u4");
        zr_wire_put_u64(&w, "count", 1);
        zr_wire_put_u64(&w, "record_bytes", ITEM * 4);
        zr_wire_put_uint_array(&w, "item_shape", shape, 1);
        ck_assert_int_eq(td_send(fd, &w, &mfd, 1), 0);
        zr_wire_writer_destroy(&w);
        close(mfd);
        bool ended = false, replied = false;
        while (!ended || !replied) {
                ck_assert_int_eq(td_recv(fd, &m), 0);
                if (!strcmp(m.kind, "loader_end")) {
                        ck_assert_uint_eq(td_u64(&m, "code"), ZR_E_STALE);
                        ended = true;
                } else if (!strcmp(m.kind, "ok")) {
                        ck_assert_uint_eq(td_u64(&m, "id"), 6000);
                        replied = true;
                } else if (!strcmp(m.kind, "batch")) {
                        td_release(fd, l, td_u64(&m, "ring"), td_u64(&m, "slot")); /* those before the end */
                }
                td_msg_free(&m);
        }
        /* CLOSE refuses a loader; LOADER_CLOSE closes it */
        ck_assert_int_eq(simple_code(fd, "close", "handle", l), ZR_E_NO_HANDLE);
        ck_assert_int_eq(simple_code(fd, "loader_close", "loader", l), 0);
        ck_assert_int_eq(simple_code(fd, "loader_close", "loader", l), ZR_E_NO_HANDLE);
        munmap((void *)ring, ring_bytes);
        /* a client that dies with a loader open frees it */
        int fd2 = td_connect_hello(&D);
        ck_assert_int_eq(open_dataset(fd2, "ld", O_RDONLY, false, &m), 0);
        uint32_t h2 = (uint32_t)td_u64(&m, "handle");
        td_msg_free(&m);
        ck_assert_int_eq(open_loader(fd2, h2, 10, 0, 4, &m), 0);
        td_msg_free(&m);
        close(fd2);
        wait_clients(fd, 1);
        expect_no_loaders(fd);
        close(fd);
}
END_TEST

void daemon_add_loaders(TCase *tc) {
        tcase_add_test(tc, test_loader);
        tcase_add_test(tc, test_loader_group);
}
