/* daemon-clients.c: the daemon suite's many clients at once, mutations under
 * load, a store reopened while it closes, and the reclamation of what clients
 * leave (daemon-kit.h). */
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

/* ---- many clients ---------------------------------------------------------------------- */

#define READERS 32
#define STORE_LEN 2000

/* A reading client of its own: connected, store `name` opened read-only, a
 * read buffer of `bytes` mapped. */
typedef struct reader {
        int fd;
        uint32_t h, b;
        const uint8_t *buf;
        uint64_t size;
} reader;

static reader reader_open(const char *name, uint64_t bytes) {
        reader r = {.fd = td_connect_hello(&D)};
        r.h = open_handle(r.fd, name, O_RDONLY, false);
        r.b = open_buffer(r.fd, bytes, &r.buf, &r.size);
        return r;
}

/* READs n indices below `range` drawn by a generator keyed by *seed into the
 * buffer (asserting success); idx receives them. */
static void reader_read(reader *r, uint64_t *seed, uint64_t *idx, int n, uint64_t range) {
        td_msg m;
        for (int i = 0; i < n; i++) {
                *seed = *seed * 6364136223846793005u + 1442695040888963407u;
                idx[i] = (*seed >> 33) % range;
        }
        ck_assert_int_eq(read_records(r->fd, r->h, r->b, 0, idx, (size_t)n, &m), 0);
        td_msg_free(&m);
}

static void reader_close(reader *r) {
        munmap((void *)r->buf, r->size);
        close(r->fd);
}

static void *reader_thread(void *arg) {
        reader r = reader_open("shared", 256 * ITEM * 4);
        uint64_t idx[256], seed = (uintptr_t)arg * 7919 + 1;
        for (int round = 0; round < 20; round++) {
                reader_read(&r, &seed, idx, 256, STORE_LEN);
                check_dense_values(r.buf, idx, 256);
        }
        reader_close(&r);
        return NULL;
}

START_TEST(test_many_clients) {
        int fd = td_connect_hello(&D);
        dense_store(fd, "shared", "zstd", STORE_LEN);
        pthread_t t[READERS];
        for (uintptr_t i = 0; i < READERS; i++)
                ck_assert_int_eq(pthread_create(&t[i], NULL, reader_thread, (void *)i), 0);
        for (int i = 0; i < READERS; i++)
                ck_assert_int_eq(pthread_join(t[i], NULL), 0);
        td_msg m;
        ck_assert_int_eq(simple(fd, "status", NULL, 0, &m), 0);
        ck_assert_uint_ge(td_u64(&m, "gathers"), READERS * 20);
        ck_assert_uint_eq(td_u64(&m, "stores"), 1); /* one shared instance */
        td_msg_free(&m);
        close(fd);
}
END_TEST

/* Readers keep reading while another client appends, deletes and compacts the
 * same store: every READ succeeds and every record it returns is whole (its
 * values are r*ITEM .. r*ITEM+ITEM-1 for some record r), because mutations take
 * the store exclusively and gathers shared. */
#define MUT_READERS 6
#define MUT_SAFE 1500 /* indices below this stay valid: at most 500 records are deleted */
static _Atomic int mut_stop;

static void *mut_reader(void *arg) {
        reader r = reader_open("mut", 64 * ITEM * 4);
        uint64_t idx[64], seed = (uintptr_t)arg + 17;
        int rounds = 0;
        while (!atomic_load(&mut_stop) || rounds < 10) {
                reader_read(&r, &seed, idx, 64, MUT_SAFE);
                const uint32_t *v = (const uint32_t *)r.buf;
                for (int i = 0; i < 64; i++)
                        for (int j = 1; j < ITEM; j++)
                                ck_assert_uint_eq(v[i * ITEM + j], v[i * ITEM] + (uint32_t)j);
                rounds++;
        }
        reader_close(&r);
        return NULL;
}

START_TEST(test_mutations_under_load) {
        int fd = td_connect_hello(&D);
        uint32_t h = dense_store(fd, "mut", "zstd", 2000);
        pthread_t t[MUT_READERS];
        for (uintptr_t i = 0; i < MUT_READERS; i++)
                ck_assert_int_eq(pthread_create(&t[i], NULL, mut_reader, (void *)i), 0);
        uint64_t length = 2000;
        td_msg m;
        for (int round = 0; round < 5; round++) {
                ck_assert_int_eq(append_dense(fd, h, length, 20), 0);
                length += 20;
                uint64_t del[40];
                for (int i = 0; i < 40; i++)
                        del[i] = (uint64_t)(round * 200 + i * 3);
                ck_assert_int_eq(delete_records(fd, h, del, 40, &m), 0);
                length -= 40;
                ck_assert_uint_eq(td_u64(&m, "length"), length);
                td_msg_free(&m);
                ck_assert_int_eq(simple(fd, "compact", "handle", h, &m), 0);
                ck_assert_uint_eq(td_u64(&m, "records"), length);
                td_msg_free(&m);
        }
        atomic_store(&mut_stop, 1);
        for (int i = 0; i < MUT_READERS; i++)
                ck_assert_int_eq(pthread_join(t[i], NULL), 0);
        ck_assert_int_eq(simple(fd, "verify", "handle", h, &m), 0);
        ck_assert_uint_eq(td_u64(&m, "bad"), 0);
        ck_assert_uint_eq(td_u64(&m, "records"), length);
        td_msg_free(&m);
        close(fd);
}
END_TEST

/* The last client of a written store goes (its closing sync runs on the pool)
 * and another opens the store at once: the same instance is found, never
 * ZR_E_LOCKED, and nothing written is lost. */
START_TEST(test_reopen_while_closing) {
        int fd = td_connect_hello(&D);
        uint32_t h = create_dense(fd, "re", "raw");
        ck_assert_int_eq(simple_code(fd, "close", "handle", h), 0);
        close(fd);
        for (uint64_t round = 0; round < 10; round++) {
                int a = td_connect_hello(&D);
                td_msg m;
                uint32_t ha = open_handle(a, "re", O_RDWR, true);
                ck_assert_int_eq(append_dense(a, ha, round * 50, 50), 0);
                if (round % 2)
                        ck_assert_int_eq(simple_code(a, "close", "handle", ha), 0);
                close(a);
                int b = td_connect_hello(&D);
                ck_assert_int_eq(open_dataset(b, "re", O_RDONLY, false, &m), 0);
                ck_assert_uint_eq(td_u64(&m, "length"), (round + 1) * 50);
                td_msg_free(&m);
                close(b);
        }
}
END_TEST

/* ---- reclamation --------------------------------------------------------------------- */

/* STATUS: the probe's store is the only handle, no shared memory is held. */
static void expect_probe_alone(int probe) {
        td_msg m;
        ck_assert_int_eq(simple(probe, "status", NULL, 0, &m), 0);
        ck_assert_uint_eq(td_u64(&m, "handles"), 1);
        ck_assert_uint_eq(td_u64(&m, "shm_bytes"), 0);
        td_msg_free(&m);
}

START_TEST(test_fd_baseline) {
        int probe = td_connect_hello(&D);
        dense_store(probe, "fdstore", "raw", 100);
        ck_assert_int_eq(simple_code(probe, "status", NULL, 0), 0); /* the append is freed */
        int base = td_fd_count(&D);
        for (int round = 0; round < 3; round++) {
                int fds[10];
                for (int i = 0; i < 10; i++) {
                        fds[i] = td_connect_hello(&D);
                        open_handle(fds[i], "fdstore", O_RDWR, true);
                        const uint8_t *buf;
                        uint64_t size;
                        open_buffer(fds[i], 8192, &buf, &size);
                        munmap((void *)buf, size);
                }
                wait_clients(probe, 11);
                ck_assert_int_gt(td_fd_count(&D), base);
                for (int i = 0; i < 10; i++)
                        close(fds[i]);
                wait_clients(probe, 1);
                ck_assert_int_eq(td_fd_count(&D), base);
        }
        expect_probe_alone(probe);
        close(probe);
}
END_TEST

START_TEST(test_client_killed) {
        int probe = td_connect_hello(&D);
        uint32_t h = dense_store(probe, "k", "zstd", 20000);
        ck_assert_int_eq(simple_code(probe, "status", NULL, 0), 0);
        int base = td_fd_count(&D);
        for (int round = 0; round < 4; round++) {
                int sync_pipe[2];
                ck_assert_int_eq(pipe2(sync_pipe, O_CLOEXEC), 0);
                pid_t pid = fork();
                ck_assert_int_ge(pid, 0);
                if (pid == 0) {
                        close(sync_pipe[0]);
                        int fd = td_connect_hello(&D);
                        uint32_t ch = open_handle(fd, "k", O_RDWR, true);
                        const uint8_t *buf;
                        uint32_t b = open_buffer(fd, 20000 * 16, &buf, NULL);
                        uint64_t *idx = malloc(20000 * sizeof(uint64_t));
                        for (int i = 0; i < 20000; i++)
                                idx[i] = (uint64_t)(19999 - i);
                        /* a big READ (or a VERIFY) in flight, then die */
                        zr_wire_writer w;
                        td_begin(&w, round % 2 ? "verify" : "read", 9);
                        zr_wire_put_u64(&w, "handle", ch);
                        if (round % 2 == 0) {
                                zr_wire_put_u64(&w, "buffer", b);
                                zr_wire_put_u64s(&w, "indices", idx, 20000);
                        }
                        td_send(fd, &w, NULL, 0);
                        (void)!write(sync_pipe[1], "x", 1);
                        for (;;)
                                pause();
                }
                close(sync_pipe[1]);
                char c;
                ck_assert_int_eq(read(sync_pipe[0], &c, 1), 1);
                close(sync_pipe[0]);
                kill(pid, SIGKILL);
                int status;
                ck_assert_int_eq(waitpid(pid, &status, 0), pid);
                wait_clients(probe, 1);
        }
        /* the daemon still serves, and holds nothing of the dead clients */
        expect_probe_alone(probe);
        /* a completion may still be on its way: one more round-trip per job */
        ck_assert_int_eq(simple_code(probe, "sync", "handle", h), 0);
        ck_assert_int_eq(td_fd_count(&D), base);
        second_client_served();
        close(probe);
}
END_TEST

void daemon_add_clients(TCase *tc) {
        tcase_add_test(tc, test_many_clients);
        tcase_add_test(tc, test_mutations_under_load);
        tcase_add_test(tc, test_reopen_while_closing);
        tcase_add_test(tc, test_fd_baseline);
        tcase_add_test(tc, test_client_killed);
}
