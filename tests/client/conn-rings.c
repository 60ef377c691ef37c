/* conn-rings.c: the conn suite's events with descriptors (a RING's memfd kept
 * with its queued event, closed when the event goes) and a loader driven
 * through rings shared by a group: batches from its own ring and from rings
 * passed by RING, RING_CLOSE, RELEASE of the right (ring, slot), and every bad
 * ring event the library must refuse (conn-fake.h). */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "conn-fake.h"

/* ---- events with descriptors ------------------------------------------ */

/* The fake's rings: a memfd named "fake-ring-ID" of `size` bytes whose slot s
 * (4096 bytes each) is filled with the byte base + s. */
static int fake_ring(uint32_t id, uint64_t size, uint8_t base) {
        char name[32];
        uint8_t page[4096];
        int fd;

        snprintf(name, sizeof(name), "fake-ring-%u", id);
        fd = memfd_create(name, MFD_CLOEXEC);
        if (fd < 0 || ftruncate(fd, (off_t)size) < 0)
                abort();
        for (uint64_t s = 0; (s + 1) * 4096 <= size; s++) {
                memset(page, base + (int)s, sizeof(page));
                if (pwrite(fd, page, sizeof(page), (off_t)(s * 4096)) != (ssize_t)sizeof(page))
                        abort();
        }
        return fd;
}

/* How many mappings of the fake's ring `id` this process has. */
static int ring_maps(uint32_t id) {
        char want[40], line[512];
        FILE *f = fopen("/proc/self/maps", "re");
        int n = 0;

        ck_assert_ptr_nonnull(f);
        snprintf(want, sizeof(want), "/memfd:fake-ring-%u ", id);
        while (fgets(line, sizeof(line), f))
                if (strstr(line, want))
                        n++;
        fclose(f);
        return n;
}

static void send_ring(int fd, zr_wire_writer *w, uint32_t loader, uint32_t ring, uint64_t slots,
                      uint64_t slot_bytes, uint64_t ring_bytes, int memfd) {
        zr_wire_writer_begin_message(w, "ring", false, 0);
        zr_wire_put_u64(w, "loader", loader);
        zr_wire_put_u64(w, "ring", ring);
        zr_wire_put_u64(w, "slots", slots);
        zr_wire_put_u64(w, "slot_bytes", slot_bytes);
        zr_wire_put_u64(w, "ring_bytes", ring_bytes);
        send_writer(fd, w, memfd >= 0 ? &memfd : NULL, memfd >= 0 ? 1 : 0);
}

static void send_ring_close(int fd, zr_wire_writer *w, uint32_t loader, uint32_t ring) {
        zr_wire_writer_begin_message(w, "ring_close", false, 0);
        zr_wire_put_u64(w, "loader", loader);
        zr_wire_put_u64(w, "ring", ring);
        send_writer(fd, w, NULL, 0);
}

/* A BATCH of one dense stream of 64 bytes at the start of (ring, slot). */
static void send_batch(int fd, zr_wire_writer *w, uint32_t loader, uint32_t ring, uint32_t slot,
                       uint64_t step, const int *fds, size_t n_fds) {
        zr_wire_writer_begin_message(w, "batch", false, 0);
        zr_wire_put_u64(w, "loader", loader);
        zr_wire_put_u64(w, "ring", ring);
        zr_wire_put_u64(w, "slot", slot);
        zr_wire_put_u64(w, "step", step);
        zr_wire_begin_array(w, "streams");
        zr_wire_begin_map(w, NULL);
        zr_wire_put_u64(w, "offset", (uint64_t)slot * 4096);
        zr_wire_put_u64(w, "bytes", 64);
        zr_wire_end(w);
        zr_wire_end(w);
        send_writer(fd, w, fds, n_fds);
}

/* Answers LOADER_OPEN: `loader`, its own ring 10 of `slots` slots of 4096
 * bytes (slot s filled with 0x10 + s), one stream region [0, 64). */
static void fake_loader_open(int fd, zr_wire_writer *w, uint32_t loader, uint64_t slots) {
        char kind[32];
        uint64_t id = read_msg(fd, kind, sizeof(kind));
        int own = fake_ring(FAKE_OWN_RING, slots * 4096, 0x10);

        ck_assert_str_eq(kind, "loader_open");
        zr_wire_writer_begin_message(w, "ok", true, id);
        zr_wire_put_u64(w, "loader", loader);
        zr_wire_put_u64(w, "ring", FAKE_OWN_RING);
        zr_wire_put_u64(w, "slots", slots);
        zr_wire_put_u64(w, "slot_bytes", 4096);
        zr_wire_put_u64(w, "ring_bytes", slots * 4096);
        zr_wire_put_u64(w, "length", 100);
        zr_wire_begin_array(w, "streams");
        zr_wire_begin_map(w, NULL);
        zr_wire_put_u64(w, "offset", 0);
        zr_wire_put_u64(w, "capacity", 64);
        zr_wire_end(w);
        zr_wire_end(w);
        send_writer(fd, w, &own, 1);
        close(own);
}

/* Answers LOADER_CLOSE (if it comes), after `in_flight` (a RING the client
 * must drop, descriptor and all, if >= 0; closed here), then waits for the hang-up (unless
 * in_flight is -2: then returns after the answer). */
static void fake_loader_close(int fd, zr_wire_writer *w, int in_flight) {
        char kind[32];
        uint64_t id;

        do /* RELEASEs may come first */
                id = read_msg(fd, kind, sizeof(kind));
        while (strcmp(kind, "release") == 0);

        if (in_flight >= 0) {
                send_ring(fd, w, FAKE_LOADER, 14, 1, 4096, 4096, in_flight);
                close(in_flight);
        }
        if (id && strcmp(kind, "loader_close") == 0) {
                zr_wire_writer_begin_message(w, "ok", true, id);
                send_writer(fd, w, NULL, 0);
        }
        if (in_flight == -2)
                return;
        while (read_msg(fd, kind, sizeof(kind)) || kind[0])
                ;
}

static void fake_dataset(zrc_conn *c, zrc_dataset *d) {
        *d = (zrc_dataset){ .conn = c, .handle = 1, .length = 100 };
        ck_assert_int_eq(zrc_schema_dense(&d->schema, "|u1", (uint64_t[]){ 8 }, 1, ZRC_CODEC_RAW), 0);
}

/* The fake closes every descriptor it made before it sends the message the
 * client waits for, so that the client's counts of its own never race. */
static void script_event_fds(int fd) {
        zr_wire_writer w;
        uint64_t id = read_request(fd);
        int ring = fake_ring(7, 8192, 0x40), p[2];

        ck_assert_int_eq(pipe2(p, O_CLOEXEC), 0);
        zr_wire_writer_init(&w);
        /* a RING (its memfd kept), a BATCH with a stray descriptor (closed), a
         * RING_CLOSE, then the reply */
        send_ring(fd, &w, 3, 7, 2, 4096, 8192, ring);
        send_batch(fd, &w, 3, 7, 0, 0, p, 1);
        send_ring_close(fd, &w, 3, 7);
        close(ring);
        close(p[0]);
        close(p[1]);
        put_status_ok(&w, id);
        send_writer(fd, &w, NULL, 0);
        /* a loader that gets handle 3, closed at once: its events go */
        fake_loader_open(fd, &w, 3, 1);
        fake_loader_close(fd, &w, -2);
        /* a RING for loader 4, left in the queue */
        id = read_request(fd);
        ring = fake_ring(8, 4096, 0x40);
        send_ring(fd, &w, 4, 8, 1, 4096, 4096, ring);
        close(ring);
        put_status_ok(&w, id);
        send_writer(fd, &w, NULL, 0);
        /* a RING with two descriptors breaks the connection */
        id = read_request(fd);
        ring = fake_ring(9, 4096, 0x40);
        ck_assert_int_eq(pipe2(p, O_CLOEXEC), 0);
        {
                int two[2] = { ring, p[0] };

                zr_wire_writer_begin_message(&w, "ring", false, 0);
                zr_wire_put_u64(&w, "loader", 4);
                zr_wire_put_u64(&w, "ring", 9);
                zr_wire_put_u64(&w, "slots", 1);
                zr_wire_put_u64(&w, "slot_bytes", 4096);
                zr_wire_put_u64(&w, "ring_bytes", 4096);
                send_writer(fd, &w, two, 2);
        }
        put_status_ok(&w, id);
        send_writer(fd, &w, NULL, 0);
        zr_wire_writer_destroy(&w);
        close(ring);
        close(p[0]);
        close(p[1]);
        read_request(fd);
}

START_TEST(test_event_fds) {
        fake f;
        zrc_conn *c = NULL;
        zrc_status *st = NULL;
        zrc_dataset d, *dp = &d;
        zrc_loader *l = NULL;
        zrc_loader_options o = { .batch_size = 8 };
        conn_event *e;
        int before, flags;

        fake_start_ex(&f, script_event_fds, 1, true);
        ck_assert_int_eq(zrc_connect(f.path, &c, NULL), 0);
        before = count_fds();
        ck_assert_int_eq(zrc_status_query(c, &st), 0);
        st = zrc_status_free(st);
        /* three events of loader 3, in order; only the RING holds a descriptor:
         * close-on-exec, the memfd the fake sent */
        ck_assert_uint_eq(c->n_events, 3);
        e = c->events_head;
        ck_assert_int_eq(e->kind, ZR_MSG_RING);
        ck_assert_uint_eq(e->loader, 3);
        ck_assert_int_ge(e->fd, 0);
        flags = fcntl(e->fd, F_GETFD);
        ck_assert(flags >= 0 && (flags & FD_CLOEXEC));
        ck_assert_int_eq(lseek(e->fd, 0, SEEK_END), 8192);
        ck_assert_int_eq(e->next->kind, ZR_MSG_BATCH);
        ck_assert_int_eq(e->next->fd, -1);
        ck_assert_int_eq(e->next->next->kind, ZR_MSG_RING_CLOSE);
        ck_assert_int_eq(e->next->next->fd, -1);
        ck_assert_int_eq(count_fds(), before + 1);
        /* closing loader 3 drops its events and closes their descriptors */
        fake_dataset(c, &d);
        ck_assert_int_eq(zrc_loader_open(c, &dp, 1, &o, &l), 0);
        l = zrc_loader_close(l);
        ck_assert_uint_eq(c->n_events, 0);
        ck_assert_ptr_null(c->events_head);
        ck_assert_ptr_null(c->events_tail);
        ck_assert_int_eq(count_fds(), before);
        /* another connection's loader 4: kept, with its descriptor */
        ck_assert_int_eq(zrc_status_query(c, &st), 0);
        st = zrc_status_free(st);
        ck_assert_uint_eq(c->n_events, 1);
        ck_assert_int_eq(count_fds(), before + 1);
        /* a RING must carry exactly one: two break the connection */
        ck_assert_int_eq(zrc_status_query(c, &st), -ZR_E_BAD_FD);
        ck_assert(strstr(zrc_last_error(c)->message, "ring event came with 2"));
        ck_assert_uint_eq(c->n_events, 1);
        /* zrc_disconnect closes the descriptor of the event left; with the
         * fake gone, what remains is what was open before, less the client's
         * socket, the fake's and its listening socket: both of the bad RING's
         * descriptors were closed too */
        zrc_disconnect(c);
        fake_stop(&f);
        ck_assert_int_eq(count_fds(), before - 3);
}
END_TEST

/* ---- a loader over shared rings ---------------------------------------- */

static void script_loader_rings(int fd) {
        zr_wire_writer w;
        char kind[32];
        int ring;

        zr_wire_writer_init(&w);
        fake_loader_open(fd, &w, FAKE_LOADER, 2);
        send_batch(fd, &w, FAKE_LOADER, FAKE_OWN_RING, 0, 0, NULL, 0);
        /* another member's ring of 3 slots, and a batch in its last slot */
        ring = fake_ring(11, 3 * 4096, 0x20);
        send_ring(fd, &w, FAKE_LOADER, 11, 3, 4096, 3 * 4096, ring);
        close(ring);
        send_batch(fd, &w, FAKE_LOADER, 11, 2, 1, NULL, 0);
        /* the client holds both of its slots: nothing until a RELEASE */
        read_msg(fd, kind, sizeof(kind));
        send_ring_close(fd, &w, FAKE_LOADER, 11);
        send_batch(fd, &w, FAKE_LOADER, FAKE_OWN_RING, 1, 2, NULL, 0);
        read_msg(fd, kind, sizeof(kind));
        read_msg(fd, kind, sizeof(kind));
        ring = fake_ring(13, 4096, 0x30);
        send_ring(fd, &w, FAKE_LOADER, 13, 1, 4096, 4096, ring);
        close(ring);
        send_batch(fd, &w, FAKE_LOADER, 13, 0, 3, NULL, 0);
        fake_loader_close(fd, &w, fake_ring(14, 4096, 0x50));
        zr_wire_writer_destroy(&w);
}

static void check_bytes(const zrc_loader_batch *b, uint8_t v) {
        const uint8_t *p = b->streams[0].data;

        ck_assert_uint_eq(b->streams[0].bytes, 64);
        for (int i = 0; i < 64; i++)
                ck_assert_uint_eq(p[i], v);
}

START_TEST(test_loader_rings) {
        fake f;
        zrc_conn *c = NULL;
        zrc_dataset d, *dp = &d;
        zrc_loader *l = NULL;
        zrc_loader_batch b0, b1, b2, b3, x;
        zrc_loader_options o = { .batch_size = 8, .prefetch = 2 };
        int before;

        n_released = 0;
        fake_start_ex(&f, script_loader_rings, 1, true);
        ck_assert_int_eq(zrc_connect(f.path, &c, NULL), 0);
        before = count_fds();
        fake_dataset(c, &d);
        ck_assert_msg(zrc_loader_open(c, &dp, 1, &o, &l) == 0, "open: %s",
                      zrc_last_error(c)->message);
        ck_assert_uint_eq(zrc_loader_slots(l), 2);
        ck_assert_int_eq(ring_maps(FAKE_OWN_RING), 1);

        /* step 0 from its own ring, step 1 from a ring a RING event passed */
        ck_assert_int_eq(zrc_loader_next(l, &b0), 0);
        ck_assert_uint_eq(b0.step, 0);
        ck_assert_uint_eq(b0.slot, 0);
        check_bytes(&b0, 0x10);
        ck_assert_int_eq(zrc_loader_next(l, &b1), 0);
        ck_assert_uint_eq(b1.step, 1);
        ck_assert_uint_eq(b1.slot, 1); /* the library's handle, not ring slot 2 */
        check_bytes(&b1, 0x22);
        ck_assert_int_eq(ring_maps(11), 1);
        /* both memfds mapped and closed (the fake waits for a RELEASE now,
         * its own closed) */
        ck_assert_int_eq(count_fds(), before);
        /* two held, wherever they lie: no third */
        ck_assert_int_eq(zrc_loader_next(l, &x), -EDEADLK);
        ck_assert_int_eq(zrc_loader_release(l, 2), -EINVAL);

        /* RELEASE names (ring 11, slot 2); then RING_CLOSE unmaps ring 11 */
        ck_assert_int_eq(zrc_loader_release(l, b1.slot), 0);
        ck_assert_int_eq(zrc_loader_release(l, b1.slot), -EINVAL);
        ck_assert_int_eq(zrc_loader_next(l, &b2), 0);
        ck_assert_uint_eq(b2.step, 2);
        ck_assert_uint_eq(b2.slot, 1);
        check_bytes(&b2, 0x11);
        ck_assert_int_eq(ring_maps(11), 0);
        check_bytes(&b0, 0x10); /* still valid */
        ck_assert_int_eq(zrc_loader_release(l, b0.slot), 0);
        ck_assert_int_eq(zrc_loader_release(l, b2.slot), 0);

        /* a third ring; the loader is closed holding a batch in it, while a
         * RING is in flight: every ring unmapped, every descriptor closed */
        ck_assert_int_eq(zrc_loader_next(l, &b3), 0);
        ck_assert_uint_eq(b3.step, 3);
        ck_assert_uint_eq(b3.slot, 0);
        check_bytes(&b3, 0x30);
        ck_assert_int_eq(ring_maps(13), 1);
        l = zrc_loader_close(l);
        ck_assert_int_eq(ring_maps(FAKE_OWN_RING), 0);
        ck_assert_int_eq(ring_maps(13), 0);
        ck_assert_int_eq(ring_maps(14), 0);
        ck_assert_uint_eq(c->n_events, 0);
        ck_assert_int_eq(count_fds(), before);
        zrc_disconnect(c);
        fake_stop(&f);

        ck_assert_int_eq(n_released, 3);
        ck_assert_uint_eq(released[0][0], 11);
        ck_assert_uint_eq(released[0][1], 2);
        ck_assert_uint_eq(released[1][0], FAKE_OWN_RING);
        ck_assert_uint_eq(released[1][1], 0);
        ck_assert_uint_eq(released[2][0], FAKE_OWN_RING);
        ck_assert_uint_eq(released[2][1], 1);
}
END_TEST

/* Bad ring events: each must fail zrc_loader_next() with `code` (for good:
 * the next call fails the same), after `good` batches. */
static const struct {
        const char *what;
        int code;
        int good;
        int mapped;        /* ring 11 mapped when the failure is seen */
        const char *message;
} bad_cases[] = {
        { "slot_bytes unlike the loader's", ZR_E_PROTO, 0, 0, "ring 11 of 2 slots of 2048" },
        { "ring_bytes not slots x slot_bytes", ZR_E_PROTO, 0, 0, "in 12288" },
        { "memfd shorter than ring_bytes", ZR_E_PROTO, 0, 0, "holds 4096 bytes, not 8192" },
        { "batch in an unknown ring", ZR_E_PROTO, 0, 0, "ring 99, which it does not know" },
        { "RING_CLOSE of a ring with a held batch", ZR_E_PROTO, 1, 1, "holds 1 batches" },
        { "RING_CLOSE of its own ring", ZR_E_PROTO, 0, 0, "its own ring" },
        { "batch in a slot out of that ring's range", ZR_E_PROTO, 0, 1, "slot 3 of ring 11" },
        { "RING of a known ring", ZR_E_PROTO, 0, 0, "announced twice" },
        { "RING_CLOSE of an unknown ring", ZR_E_PROTO, 0, 0, "an unknown ring 12" },
        { "RING without its memfd", ZR_E_BAD_FD, 0, 0, "0 descriptors" },
};
static int bad_case;

static void script_loader_bad(int fd) {
        zr_wire_writer w;
        int ring = -1;

        zr_wire_writer_init(&w);
        fake_loader_open(fd, &w, FAKE_LOADER, 2);
        switch (bad_case) {
        case 0:
                ring = fake_ring(11, 2 * 2048, 0x20);
                send_ring(fd, &w, FAKE_LOADER, 11, 2, 2048, 2 * 2048, ring);
                break;
        case 1:
                ring = fake_ring(11, 3 * 4096, 0x20);
                send_ring(fd, &w, FAKE_LOADER, 11, 2, 4096, 3 * 4096, ring);
                break;
        case 2:
                ring = fake_ring(11, 4096, 0x20);
                send_ring(fd, &w, FAKE_LOADER, 11, 2, 4096, 2 * 4096, ring);
                break;
        case 3:
                send_batch(fd, &w, FAKE_LOADER, 99, 0, 0, NULL, 0);
                break;
        case 4:
                ring = fake_ring(11, 3 * 4096, 0x20);
                send_ring(fd, &w, FAKE_LOADER, 11, 3, 4096, 3 * 4096, ring);
                send_batch(fd, &w, FAKE_LOADER, 11, 0, 0, NULL, 0);
                send_ring_close(fd, &w, FAKE_LOADER, 11);
                break;
        case 5:
                send_ring_close(fd, &w, FAKE_LOADER, FAKE_OWN_RING);
                break;
        case 6:
                ring = fake_ring(11, 3 * 4096, 0x20);
                send_ring(fd, &w, FAKE_LOADER, 11, 3, 4096, 3 * 4096, ring);
                send_batch(fd, &w, FAKE_LOADER, 11, 3, 0, NULL, 0);
                break;
        case 7:
                ring = fake_ring(FAKE_OWN_RING, 2 * 4096, 0x20);
                send_ring(fd, &w, FAKE_LOADER, FAKE_OWN_RING, 2, 4096, 2 * 4096, ring);
                break;
        case 8:
                send_ring_close(fd, &w, FAKE_LOADER, 12);
                break;
        default:
                send_ring(fd, &w, FAKE_LOADER, 11, 1, 4096, 4096, -1);
                break;
        }
        if (ring >= 0)
                close(ring);
        fake_loader_close(fd, &w, -1);
        zr_wire_writer_destroy(&w);
}

START_TEST(test_loader_bad_rings) {
        fake f;
        zrc_conn *c = NULL;
        zrc_dataset d, *dp = &d;
        zrc_loader *l = NULL;
        zrc_loader_batch b, held = { 0 };
        zrc_loader_options o = { .batch_size = 8, .prefetch = 2 };
        int before;

        bad_case = _i;
        fake_start_ex(&f, script_loader_bad, 1, true);
        ck_assert_int_eq(zrc_connect(f.path, &c, NULL), 0);
        before = count_fds();
        fake_dataset(c, &d);
        ck_assert_int_eq(zrc_loader_open(c, &dp, 1, &o, &l), 0);
        for (int k = 0; k < bad_cases[_i].good; k++)
                ck_assert_int_eq(zrc_loader_next(l, &held), 0);
        ck_assert_msg(zrc_loader_next(l, &b) == -bad_cases[_i].code, "%s: %s", bad_cases[_i].what,
                      zrc_last_error(c)->message);
        ck_assert_msg(strstr(zrc_last_error(c)->message, bad_cases[_i].message), "%s: %s",
                      bad_cases[_i].what, zrc_last_error(c)->message);
        /* for good */
        ck_assert_int_eq(zrc_loader_next(l, &b), -bad_cases[_i].code);
        if (bad_cases[_i].good) {
                /* the ring the daemon wanted closed stays mapped under the batch */
                ck_assert_int_eq(ring_maps(11), 1);
                check_bytes(&held, 0x20);
                ck_assert_int_eq(zrc_loader_release(l, held.slot), 0);
        }
        ck_assert_int_eq(ring_maps(11), bad_cases[_i].mapped);
        l = zrc_loader_close(l);
        ck_assert_int_eq(ring_maps(FAKE_OWN_RING), 0);
        ck_assert_int_eq(ring_maps(11), 0);
        ck_assert_int_eq(count_fds(), before);
        zrc_disconnect(c);
        fake_stop(&f);
}
END_TEST

void conn_add_ring_tests(TCase *tc) {
        tcase_add_test(tc, test_event_fds);
        tcase_add_test(tc, test_loader_rings);
        tcase_add_loop_test(tc, test_loader_bad_rings, 0,
                            (int)(sizeof(bad_cases) / sizeof(bad_cases[0])));
}
