/* test-ctlring.c: a loader's control memory (daemon/loader/ctlring.c): its
 * layout as PROTOCOL.md gives it, a page the client may map writable but not
 * resize, the announcement queue written in order with its count last, and
 * the release count judged against the daemon's own (never behind, never more
 * than a queue ahead), whatever a client writes into the page. */
#include <check.h>
#include <fcntl.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "loader/ctlring.h"
#include "check-run.h"

static uint64_t q(const void *page, uint32_t off) {
        uint64_t v;
        memcpy(&v, (const char *)page + off, 8);
        return v;
}

static uint32_t w(const void *page, uint32_t off) {
        uint32_t v;
        memcpy(&v, (const char *)page + off, 4);
        return v;
}

static void put_q(void *page, uint32_t off, uint64_t v) {
        memcpy((char *)page + off, &v, 8);
}

static void put_w(void *page, uint32_t off, uint32_t v) {
        memcpy((char *)page + off, &v, 4);
}

/* A client's mapping of the page, read-write. */
static void *client_map(const zr_ctlring *c) {
        void *p = mmap(NULL, ZR_CTL_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, c->shm.fd, 0);
        ck_assert_ptr_ne(p, MAP_FAILED);
        return p;
}

/* The client writes release `j`: entry, then count. */
static void client_release(void *page, uint64_t j, uint32_t ring, uint32_t slot) {
        uint32_t off = ZR_CTL_OFF_REL + (uint32_t)(j % ZR_CTL_ENTRIES) * ZR_CTL_REL_BYTES;
        put_w(page, off, ring);
        put_w(page, off + 4, slot);
        put_q(page, off + 8, 1000 + j);
        put_q(page, off + 16, UINT64_MAX);
        put_q(page, ZR_CTL_OFF_RELEASED, j + 1);
}

START_TEST(test_layout_and_seals) {
        zr_ctlring c;
        zr_error err = {0};
        ck_assert_int_eq(zr_ctlring_create(&c, &err), 0);
        ck_assert_uint_eq(c.shm.size, ZR_CTL_BYTES);
        ck_assert(fcntl(c.shm.fd, F_GETFD) & FD_CLOEXEC);
        int seals = fcntl(c.shm.fd, F_GET_SEALS);
        ck_assert(seals & F_SEAL_SHRINK);
        ck_assert(seals & F_SEAL_GROW);
        ck_assert(seals & F_SEAL_SEAL);
        ck_assert(!(seals & F_SEAL_WRITE));
        /* the page cannot shrink under the daemon's mapping */
        ck_assert_int_lt(ftruncate(c.shm.fd, 0), 0);
        void *p = client_map(&c);
        ck_assert_uint_eq(w(p, 0), ZR_CTL_MAGIC);
        ck_assert_uint_eq(w(p, 4), ZR_CTL_VERSION);
        ck_assert_uint_eq(w(p, 8), ZR_CTL_ENTRIES);
        ck_assert_uint_le(ZR_CTL_OFF_REL + ZR_CTL_ENTRIES * ZR_CTL_REL_BYTES, ZR_CTL_BYTES);
        ck_assert_uint_eq(ZR_CTL_OFF_ANN + ZR_CTL_ENTRIES * ZR_CTL_ANN_BYTES, ZR_CTL_OFF_REL);
        munmap(p, ZR_CTL_BYTES);
        zr_ctlring_destroy(&c);
        zr_ctlring_destroy(&c); /* twice is fine */
}
END_TEST

START_TEST(test_announcements) {
        zr_ctlring c;
        zr_error err = {0};
        ck_assert_int_eq(zr_ctlring_create(&c, &err), 0);
        void *p = client_map(&c);
        for (uint64_t i = 0; i < 3 * ZR_CTL_ENTRIES + 5; i++) {
                zr_ctlring_publish(&c, 1000 + i, 7, (uint32_t)(i % 5));
                uint32_t off = ZR_CTL_OFF_ANN + (uint32_t)(i % ZR_CTL_ENTRIES) * ZR_CTL_ANN_BYTES;
                ck_assert_uint_eq(q(p, ZR_CTL_OFF_PUBLISHED), i + 1);
                ck_assert_uint_eq(q(p, off), 1000 + i);
                ck_assert_uint_eq(w(p, off + 8), 7);
                ck_assert_uint_eq(w(p, off + 12), i % 5);
        }
        /* a client that scribbles over the daemon's count changes nothing the
         * daemon goes by: its own count */
        put_q(p, ZR_CTL_OFF_PUBLISHED, 12345);
        zr_ctlring_publish(&c, 1, 1, 1);
        ck_assert_uint_eq(q(p, ZR_CTL_OFF_PUBLISHED), 3 * ZR_CTL_ENTRIES + 6);
        /* waiting: the client's flag */
        ck_assert_int_eq(zr_ctlring_client_waiting(&c), 0);
        put_w(p, ZR_CTL_OFF_WAITING, 1);
        ck_assert_int_eq(zr_ctlring_client_waiting(&c), 1);
        put_w(p, ZR_CTL_OFF_WAITING, 0xdeadbeef); /* garbage is "set" */
        ck_assert_int_eq(zr_ctlring_client_waiting(&c), 1);
        munmap(p, ZR_CTL_BYTES);
        zr_ctlring_destroy(&c);
}
END_TEST

START_TEST(test_releases) {
        zr_ctlring c;
        zr_error err = {0};
        zr_ctl_release rel;
        uint64_t tail;
        ck_assert_int_eq(zr_ctlring_create(&c, &err), 0);
        void *p = client_map(&c);
        ck_assert_int_eq(zr_ctlring_pending(&c, &tail), 0);
        for (uint64_t j = 0; j < 3; j++)
                client_release(p, j, 9, (uint32_t)j);
        ck_assert_int_eq(zr_ctlring_pending(&c, &tail), 3);
        ck_assert_uint_eq(tail, 3);
        for (uint64_t j = 0; j < 3; j++) {
                zr_ctlring_entry(&c, j, &rel);
                ck_assert_uint_eq(rel.ring, 9);
                ck_assert_uint_eq(rel.slot, j);
                ck_assert_uint_eq(rel.taken_ns, 1000 + j);
                ck_assert_uint_eq(rel.wait_ns, UINT64_MAX);
        }
        zr_ctlring_consume(&c, tail);
        ck_assert_uint_eq(q(p, ZR_CTL_OFF_CONSUMED), 3);
        ck_assert_int_eq(zr_ctlring_pending(&c, &tail), 0);
        /* around the queue's end */
        for (uint64_t j = 3; j < 3 + 2 * ZR_CTL_ENTRIES; j++) {
                client_release(p, j, 1, (uint32_t)j);
                ck_assert_int_eq(zr_ctlring_pending(&c, &tail), 1);
                zr_ctlring_entry(&c, j, &rel);
                ck_assert_uint_eq(rel.slot, (uint32_t)j);
                zr_ctlring_consume(&c, tail);
        }
        /* a whole queue ahead is the most; one more, or a count behind what was
         * taken, is a lie */
        uint64_t taken = c.consumed;
        put_q(p, ZR_CTL_OFF_RELEASED, taken + ZR_CTL_ENTRIES);
        ck_assert_int_eq(zr_ctlring_pending(&c, &tail), (int)ZR_CTL_ENTRIES);
        put_q(p, ZR_CTL_OFF_RELEASED, taken + ZR_CTL_ENTRIES + 1);
        ck_assert_int_eq(zr_ctlring_pending(&c, &tail), -1);
        put_q(p, ZR_CTL_OFF_RELEASED, taken - 1);
        ck_assert_int_eq(zr_ctlring_pending(&c, &tail), -1);
        put_q(p, ZR_CTL_OFF_RELEASED, UINT64_MAX);
        ck_assert_int_eq(zr_ctlring_pending(&c, &tail), -1);
        /* the client overwriting `consumed` does not move the daemon's count */
        put_q(p, ZR_CTL_OFF_CONSUMED, 0);
        put_q(p, ZR_CTL_OFF_RELEASED, taken);
        ck_assert_int_eq(zr_ctlring_pending(&c, &tail), 0);
        ck_assert_uint_eq(c.consumed, taken);
        /* wants: the daemon's flag */
        zr_ctlring_set_wants(&c, 1);
        ck_assert_uint_eq(w(p, ZR_CTL_OFF_WANTS), 1);
        zr_ctlring_set_wants(&c, 0);
        ck_assert_uint_eq(w(p, ZR_CTL_OFF_WANTS), 0);
        munmap(p, ZR_CTL_BYTES);
        zr_ctlring_destroy(&c);
}
END_TEST

TL_SUITE_MAIN("ctlring", test_layout_and_seals, test_announcements, test_releases)
