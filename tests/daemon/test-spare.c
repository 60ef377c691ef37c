/* test-spare.c: the daemon's spare rings (the ring-spare setting) end to end.
 *
 * The real zrecordd (tclient.h) with its default budget, a --config file and
 * SIGHUP reloads, or --ring-spare=0. A loader opened at step 10^9 and closed
 * leaves a pre-faulted ring of its size (STATUS spare_bytes goes up to its
 * ring_bytes); a second loader of the same ring size takes it at open
 * (spare_bytes back to 0) and gets its first batch with fewer page faults in
 * the daemon (/proc/PID/stat minflt) than half a slot's pages, where the first
 * loader's fresh ring faulted in a whole slot. Every wait polls a condition
 * (STATUS, a notify datagram) under a deadline; nothing sleeps.
 */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "check-run.h"
#include "tclient.h"
#include "util.h"
#include "util/memlimit.h"

#define REC (64u << 10)          /* bytes per record: 16 pages */
#define NREC 128u                /* records in the store */
#define BATCH 64u                /* a slot: 4 MiB, 1024 pages */
#define SLOT_PAGES (REC * BATCH / 4096u)
#define START 1000000000ull      /* step 10^9: records 0..63 (sequential) */

/* The default budget, "auto": 12% of what the daemon may use, at most 512
 * MiB (server/budgets.h). */
static uint64_t default_budget(void) {
        zr_memlimit ml;
        ck_assert_int_eq(zr_memlimit_read(NULL, &ml, NULL), 0);
        return zr_memlimit_budget(&ml, 12, 512ull << 20);
}
#define DEFAULT_BUDGET default_budget()

static td_daemon D;
static uint64_t next_id = 100;

static uint8_t rec_byte(uint64_t i) {
        return (uint8_t)(i * 31 + 7);
}

static void teardown(void) {
        if (D.pid > 0)
                td_cleanup(&D);
        memset(&D, 0, sizeof(D));
}

/* The config file's directory, made and removed in this process around the
 * whole case (an unchecked fixture): a test that fails exits its forked
 * process at once, before any checked teardown, so only the parent can be
 * sure to remove what the test wrote. */
static char cfg_dir[] = "/tmp/zrd-spare-XXXXXX";

static void cfg_dir_make(void) {
        if (!mkdtemp(cfg_dir)) {
                perror("test-spare: mkdtemp");
                exit(EXIT_FAILURE);
        }
}

static void cfg_dir_remove(void) {
        tl_rmtree(cfg_dir);
}

/* Creates a raw dense store of NREC records of REC bytes (record i: every byte
 * rec_byte(i)) in D.dir/name, and READs records 0..BATCH-1 once so that the
 * daemon's mapping of them is warm before any fault is counted. Returns its
 * handle. */
static uint32_t make_store(int fd, const char *name) {
        char path[400];
        snprintf(path, sizeof(path), "%s/%s", D.dir, name);
        uint64_t shape[] = {REC};
        uint32_t h = td_create_dense(fd, path, "|u1", shape, 1, "raw");
        uint8_t *data = malloc((size_t)NREC * REC);
        ck_assert_ptr_nonnull(data);
        for (uint64_t i = 0; i < NREC; i++)
                memset(data + i * REC, rec_byte(i), REC);
        ck_assert_int_eq(td_append(fd, h, "|u1", shape, 1, REC, data, NREC, NULL), 0);
        free(data);

        zr_wire_writer w;
        td_msg m;
        td_begin(&w, "buffer_open", next_id++);
        zr_wire_put_u64(&w, "bytes", (uint64_t)BATCH * REC);
        ck_assert_int_eq(td_call(fd, &w, NULL, 0, &m), 0);
        uint32_t buf = (uint32_t)td_u64(&m, "buffer");
        td_msg_free(&m);
        uint64_t idx[BATCH];
        for (uint64_t i = 0; i < BATCH; i++)
                idx[i] = i;
        td_begin(&w, "read", next_id++);
        zr_wire_put_u64(&w, "handle", h);
        zr_wire_put_u64(&w, "buffer", buf);
        zr_wire_put_u64s(&w, "indices", idx, BATCH);
        ck_assert_int_eq(td_call(fd, &w, NULL, 0, &m), 0);
        td_msg_free(&m);
        td_begin(&w, "close", next_id++);
        zr_wire_put_u64(&w, "handle", buf);
        ck_assert_int_eq(td_call(fd, &w, NULL, 0, &m), 0);
        td_msg_free(&m);
        return h;
}

/* STATUS: the spare rings' budget and the bytes of spare rings ready. */
static void spare_status(int fd, uint64_t *budget, uint64_t *bytes) {
        zr_wire_writer w;
        td_msg m;
        td_begin(&w, "status", next_id++);
        ck_assert_int_eq(td_call(fd, &w, NULL, 0, &m), 0);
        if (budget)
                *budget = td_u64(&m, "spare_budget");
        if (bytes)
                *bytes = td_u64(&m, "spare_bytes");
        td_msg_free(&m);
}

static uint64_t spare_bytes(int fd) {
        uint64_t v;
        spare_status(fd, NULL, &v);
        return v;
}

/* Polls STATUS until spare_bytes == want, under TL_TIMEOUT_MS. */
static void wait_spare(int fd, uint64_t want) {
        uint64_t deadline = tl_now_ns() / 1000000u + TL_TIMEOUT_MS, v = 0;
        while (tl_now_ns() / 1000000u < deadline)
                if ((v = spare_bytes(fd)) == want)
                        return;
        ck_abort_msg("spare_bytes stayed %llu, never %llu", (unsigned long long)v,
                     (unsigned long long)want);
}

/* Minor page faults of the daemon so far (every thread, /proc/PID/stat). */
static uint64_t daemon_minflt(void) {
        char path[64], buf[2048];
        snprintf(path, sizeof(path), "/proc/%d/stat", (int)D.pid);
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        ck_assert_int_ge(fd, 0);
        ssize_t n = read(fd, buf, sizeof(buf) - 1);
        close(fd);
        ck_assert_int_gt(n, 0);
        buf[n] = 0;
        /* after "pid (comm) ": state ppid pgrp session tty_nr tpgid flags minflt */
        const char *p = strrchr(buf, ')');
        ck_assert_ptr_nonnull(p);
        unsigned long long minflt = 0;
        ck_assert_int_eq(sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %llu", &minflt), 1);
        return minflt;
}

/* Whether shared memory comes in 4 KiB pages here (no shmem THP), so that a
 * fresh slot's first touch is SLOT_PAGES faults. */
static bool shmem_small_pages(void) {
        char buf[256] = {0};
        int fd = open("/sys/kernel/mm/transparent_hugepage/shmem_enabled", O_RDONLY | O_CLOEXEC);
        if (fd < 0)
                return true;
        ssize_t n = read(fd, buf, sizeof(buf) - 1);
        close(fd);
        return n > 0 && (strstr(buf, "[never]") || strstr(buf, "[deny]"));
}

typedef struct ldr {
        uint32_t id;
        uint64_t ring_bytes;
        const uint8_t *ring;
} ldr;

/* LOADER_OPEN: sequential, BATCH records, from START, one slot (so that no
 * fill but the first runs before the batch is released). */
static ldr loader_open(int fd, uint32_t h) {
        zr_wire_writer w;
        td_msg m;
        td_begin_loader_open(&w, next_id++, h, "sequential", BATCH, 1, START, 1);
        zr_wire_put_bool(&w, "indices", true);
        ck_assert_int_eq(td_call(fd, &w, NULL, 0, &m), 0);
        ck_assert_uint_eq(m.nfds, 1);
        ldr l = {.id = (uint32_t)td_u64(&m, "loader"), .ring_bytes = td_u64(&m, "ring_bytes")};
        ck_assert_uint_eq(l.ring_bytes, (uint64_t)BATCH * REC);
        l.ring = mmap(NULL, l.ring_bytes, PROT_READ, MAP_SHARED, m.fds[0], 0);
        ck_assert_ptr_ne(l.ring, MAP_FAILED);
        td_msg_free(&m); /* closes the descriptor; the mapping stays */
        return l;
}

/* Waits for the loader's first BATCH and checks it: step START, records
 * 0..BATCH-1, bit-exact. The slot stays held. */
static void first_batch(int fd, const ldr *l) {
        td_msg m;
        for (;;) {
                ck_assert_int_eq(td_recv(fd, &m), 0);
                ck_assert_msg(strcmp(m.kind, "loader_end") != 0, "loader ended: %llu",
                              (unsigned long long)td_u64(&m, "code"));
                if (!strcmp(m.kind, "batch"))
                        break;
                td_msg_free(&m); /* another member's ring (none expected here) */
        }
        ck_assert_uint_eq(td_u64(&m, "loader"), l->id);
        ck_assert_uint_eq(td_u64(&m, "step"), START);
        const msgpack_object *streams;
        uint32_t ns;
        uint64_t off;
        ck_assert_int_eq(zr_wire_get_array(m.root, "streams", &streams, &ns, NULL), 0);
        ck_assert_uint_eq(ns, 1);
        ck_assert_int_eq(zr_wire_get_u64(&streams[0], "offset", &off, NULL), 0);
        size_t ni;
        const uint8_t *ind = td_u64s(&m, "indices", &ni);
        ck_assert_uint_eq(ni, BATCH);
        ck_assert_uint_le(off + (uint64_t)BATCH * REC, l->ring_bytes);
        for (uint64_t i = 0; i < BATCH; i++) {
                uint64_t r = zr_wire_u64_at(ind, i);
                ck_assert_uint_eq(r, i); /* sequential: step 10^9 of 2 steps per pass */
                const uint8_t *p = l->ring + off + i * REC;
                ck_assert_uint_eq(p[0], rec_byte(r));
                ck_assert_uint_eq(p[REC / 2], rec_byte(r));
                ck_assert_uint_eq(p[REC - 1], rec_byte(r));
        }
        td_msg_free(&m);
}

static void loader_close(int fd, ldr *l) {
        zr_wire_writer w;
        td_msg m;
        td_begin(&w, "loader_close", next_id++);
        zr_wire_put_u64(&w, "loader", l->id);
        /* events of the loader may come before the reply */
        ck_assert_int_eq(td_call_past_events(fd, &w, NULL, 0, &m), 0);
        td_msg_free(&m);
        /* the client's mapping keeps the old ring alive: let it go */
        munmap((void *)l->ring, l->ring_bytes);
        l->ring = NULL;
}

/* Opens a loader, takes its first batch, closes it; returns the daemon's minor
 * faults from the open to the first batch. */
static uint64_t open_first_close(int fd, uint32_t h) {
        uint64_t f0 = daemon_minflt();
        ldr l = loader_open(fd, h);
        first_batch(fd, &l);
        uint64_t faults = daemon_minflt() - f0;
        loader_close(fd, &l);
        return faults;
}

/* The default budget: a closed loader leaves its ring; the next of that size
 * takes it and gets its first batch without first-touching a ring. */
START_TEST(test_spare_ring_reused) {
        td_start(&D, NULL);
        int fd = td_connect_hello(&D);
        uint32_t h = make_store(fd, "s");
        uint64_t budget, bytes;
        spare_status(fd, &budget, &bytes);
        ck_assert_uint_eq(budget, DEFAULT_BUDGET);
        ck_assert_uint_eq(bytes, 0);

        /* a fresh ring: its slot is faulted in before the first batch */
        uint64_t f0 = daemon_minflt();
        ldr a = loader_open(fd, h);
        first_batch(fd, &a);
        uint64_t fresh = daemon_minflt() - f0;
        ck_assert_uint_eq(spare_bytes(fd), 0);
        loader_close(fd, &a);
        /* its close leaves a spare of its size, made on the pool */
        wait_spare(fd, a.ring_bytes);

        /* the same ring size again (a resumed run): the open takes the spare */
        f0 = daemon_minflt();
        ldr b = loader_open(fd, h);
        first_batch(fd, &b);
        uint64_t spare = daemon_minflt() - f0;
        ck_assert_uint_eq(spare_bytes(fd), 0); /* taken (the slot is held: no event comes) */
        printf("spare ring: daemon minor faults from open to first batch: fresh ring %llu, "
               "spare ring %llu (a slot is %u pages)\n", (unsigned long long)fresh,
               (unsigned long long)spare, SLOT_PAGES);
        ck_assert_msg(spare < SLOT_PAGES / 2, "the spare ring's first batch took %llu faults",
                      (unsigned long long)spare);
        if (shmem_small_pages())
                ck_assert_msg(fresh >= SLOT_PAGES, "a fresh ring's first batch took only %llu "
                              "faults", (unsigned long long)fresh);
        loader_close(fd, &b);
        wait_spare(fd, b.ring_bytes); /* and so on for the next resume */
        close(fd);
}
END_TEST

/* Starts the daemon with args, which must leave it no spare budget, and
 * makes a store on a new connection (*ret_fd); returns its handle. */
static uint32_t start_without_spares(const char *const *args, int *ret_fd) {
        uint64_t budget;

        td_start(&D, args);
        *ret_fd = td_connect_hello(&D);
        spare_status(*ret_fd, &budget, NULL);
        ck_assert_uint_eq(budget, 0);
        return make_store(*ret_fd, "s");
}

/* --ring-spare=0: no spare is ever made (the decision is taken at the close,
 * so STATUS right after the LOADER_CLOSE reply tells). */
START_TEST(test_spare_off) {
        const char *args[] = {"--ring-spare=0", NULL};
        int fd;
        uint32_t h = start_without_spares(args, &fd);
        for (int i = 0; i < 2; i++) {
                open_first_close(fd, h);
                ck_assert_uint_eq(spare_bytes(fd), 0);
        }
        close(fd);
}
END_TEST

static void write_config(const char *path, const char *text) {
        FILE *f = fopen(path, "we");
        ck_assert_ptr_nonnull(f);
        fputs(text, f);
        fclose(f);
}

/* Writes `text` to the config file cfg and reloads it (SIGHUP, then READY=1
 * after RELOADING=1); the log must then hold `logged`. */
static void reload_with(const char *cfg, const char *text, const char *logged) {
        write_config(cfg, text);
        kill(D.pid, SIGHUP);
        ck_assert(td_wait_notify(&D, "READY=1"));
        ck_assert_msg(td_log_contains(&D, logged), "no \"%s\" in the log", logged);
}

/* STATUS's spare budget and spare bytes must be these. */
static void expect_spare(int fd, uint64_t budget, uint64_t bytes) {
        uint64_t got_budget, got_bytes;

        spare_status(fd, &got_budget, &got_bytes);
        ck_assert_uint_eq(got_budget, budget);
        ck_assert_uint_eq(got_bytes, bytes);
}

/* The budget from a config file, changed by SIGHUP: raised (spares from the
 * next close on), a bad file (kept), lowered under a ring (released at once,
 * and none made for that size), each change logged. */
START_TEST(test_spare_reload) {
        char cfg[400], cfgarg[420];
        snprintf(cfg, sizeof(cfg), "%s/zrecordd.conf", cfg_dir);
        snprintf(cfgarg, sizeof(cfgarg), "--config=%s", cfg);
        write_config(cfg, "ring-spare = 0\n");
        const char *args[] = {cfgarg, NULL};
        int fd;
        uint32_t h = start_without_spares(args, &fd);
        uint64_t budget;
        open_first_close(fd, h);
        ck_assert_uint_eq(spare_bytes(fd), 0);

        /* raised: nothing is made until a loader closes */
        reload_with(cfg, "ring-spare = 64M\n",
                    "reload: ring_spare budget 0 -> 67108864 bytes (setting)");
        expect_spare(fd, 64u << 20, 0);
        open_first_close(fd, h);
        wait_spare(fd, (uint64_t)BATCH * REC);

        /* a bad value: the reload is refused, the budget and the spare stay */
        reload_with(cfg, "ring-spare = lots\n", "bad value 'lots'");
        ck_assert(td_log_contains(&D, "keeping the settings in force"));
        expect_spare(fd, 64u << 20, (uint64_t)BATCH * REC);

        /* lowered under the ring's size: the spare goes at once, and a closed
         * loader of that size leaves none */
        reload_with(cfg, "ring-spare = 2M\n",
                    "reload: ring_spare budget 67108864 -> 2097152 bytes (setting)");
        expect_spare(fd, 2u << 20, 0);
        open_first_close(fd, h);
        ck_assert_uint_eq(spare_bytes(fd), 0);

        /* the key removed: back to the default */
        reload_with(cfg, "# no ring-spare\n",
                    "reload: ring_spare budget 2097152 -> 536870912 bytes (auto");
        spare_status(fd, &budget, NULL);
        ck_assert_uint_eq(budget, DEFAULT_BUDGET);
        close(fd);
}
END_TEST

int main(void) {
        Suite *s = suite_create("spare");
        TCase *tc = TL_TCASE(s, "spare", 120, test_spare_ring_reused, test_spare_off,
                             test_spare_reload);
        tcase_add_checked_fixture(tc, NULL, teardown);
        tcase_add_unchecked_fixture(tc, cfg_dir_make, cfg_dir_remove);
        return tl_run_suite(s);
}
