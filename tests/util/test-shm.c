/* test-shm.c: daemon-made regions are page-rounded, sealed and not writable by
 * anyone else, and pre-faulted unless made lazy; client-passed memfds are
 * accepted only sealed and large enough. */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "util/shm.h"
#include "check-run.h"
#include "util.h"

START_TEST(test_create_sealed) {
        zr_shm s;
        zr_error err = {0};
        ck_assert_int_eq(zr_shm_create("zr-test", 5000, &s, &err), 0);
        ck_assert_uint_eq(s.size, 8192);
        ck_assert(fcntl(s.fd, F_GETFD) & FD_CLOEXEC);
        memset(s.data, 0xab, s.size); /* the daemon's own mapping stays writable */
        int seals = fcntl(s.fd, F_GET_SEALS);
        ck_assert(seals & F_SEAL_SHRINK);
        ck_assert(seals & F_SEAL_GROW);
        ck_assert(seals & F_SEAL_SEAL);
        ck_assert_int_lt(ftruncate(s.fd, 4096), 0);
        ck_assert_int_lt(ftruncate(s.fd, 1 << 20), 0);
        /* a reader's mapping sees the bytes; a new writable mapping is refused */
        unsigned char *ro = mmap(NULL, s.size, PROT_READ, MAP_SHARED, s.fd, 0);
        ck_assert_ptr_ne(ro, MAP_FAILED);
        ck_assert_int_eq(ro[8191], 0xab);
        munmap(ro, s.size);
        void *rw = mmap(NULL, s.size, PROT_READ | PROT_WRITE, MAP_SHARED, s.fd, 0);
        ck_assert_ptr_eq(rw, MAP_FAILED);
        zr_shm_release(&s);
        ck_assert_int_eq(s.fd, -1);
        zr_shm_release(&s); /* twice is fine */
        ck_assert_uint_eq(zr_shm_round(0), 0);
        ck_assert_uint_eq(zr_shm_round(1), 4096);
        ck_assert_uint_eq(zr_shm_round(SIZE_MAX), 0);
}
END_TEST

/* A lazy region is sealed as any, but none of its pages is resident until it is
 * touched (a pre-faulted one has them all). */
START_TEST(test_create_lazy) {
        const size_t pages = 64;
        unsigned char vec[64];
        zr_shm s, p;
        zr_error err = {0};
        size_t resident = 0;

        ck_assert_int_eq(zr_shm_create_flags("zr-lazy", pages * 4096, ZR_SHM_LAZY, &s, &err), 0);
        ck_assert_uint_eq(s.size, pages * 4096);
        ck_assert(fcntl(s.fd, F_GET_SEALS) & F_SEAL_SEAL);
        ck_assert(fcntl(s.fd, F_GET_SEALS) & F_SEAL_GROW);
        ck_assert_int_eq(mincore(s.data, s.size, vec), 0);
        for (size_t i = 0; i < pages; i++)
                resident += vec[i] & 1;
        ck_assert_uint_eq(resident, 0);
        ((unsigned char *)s.data)[5 * 4096] = 1;
        ck_assert_int_eq(mincore(s.data, s.size, vec), 0);
        ck_assert_int_eq(vec[5] & 1, 1);
        ck_assert_int_eq(zr_shm_create("zr-eager", pages * 4096, &p, &err), 0);
        ck_assert_int_eq(mincore(p.data, p.size, vec), 0);
        for (size_t i = 0; i < pages; i++)
                ck_assert_int_eq(vec[i] & 1, 1);
        zr_shm_release(&p);
        zr_shm_release(&s);
}
END_TEST

/* A lazy region faulted in up to a bound: those pages resident, the rest not
 * (a large BUFFER_OPEN's). */
START_TEST(test_prefault_part) {
        const size_t pages = 64;
        unsigned char vec[64];
        zr_shm s;
        zr_error err = {0};

        ck_assert_int_eq(zr_shm_create_flags("zr-part", pages * 4096, ZR_SHM_LAZY, &s, &err), 0);
        zr_shm_prefault(&s, 16 * 4096);
        ck_assert_int_eq(mincore(s.data, s.size, vec), 0);
        for (size_t i = 0; i < pages; i++)
                ck_assert_int_eq(vec[i] & 1, i < 16);
        zr_shm_prefault(&s, 1000 * 4096); /* past the end: the whole */
        ck_assert_int_eq(mincore(s.data, s.size, vec), 0);
        for (size_t i = 0; i < pages; i++)
                ck_assert_int_eq(vec[i] & 1, 1);
        zr_shm_release(&s);
}
END_TEST

static int client_memfd(size_t bytes, int seals) {
        int fd = memfd_create("client", MFD_CLOEXEC | MFD_ALLOW_SEALING);
        ck_assert_int_ge(fd, 0);
        char buf[256];
        memset(buf, 7, sizeof(buf));
        for (size_t done = 0; done < bytes;) {
                size_t n = bytes - done < sizeof(buf) ? bytes - done : sizeof(buf);
                ck_assert_int_eq(write(fd, buf, n), (ssize_t)n);
                done += n;
        }
        if (seals)
                ck_assert_int_eq(fcntl(fd, F_ADD_SEALS, seals), 0);
        return fd;
}

START_TEST(test_map_sealed) {
        zr_shm s;
        zr_error err = {0};
        const int all = F_SEAL_WRITE | F_SEAL_SHRINK | F_SEAL_GROW;
        ck_assert_int_eq(zr_shm_map_sealed(client_memfd(1000, all), 1000, &s, &err), 0);
        ck_assert_uint_eq(s.size, 1000);
        ck_assert_int_eq(((unsigned char *)s.data)[999], 7);
        zr_shm_release(&s);

        ck_assert_int_eq(zr_shm_map_sealed(client_memfd(1000, F_SEAL_SHRINK | F_SEAL_GROW), 10, &s, &err),
                         -ZR_E_BAD_FD);
        ck_assert_ptr_nonnull(strstr(err.message, "not sealed"));
        zr_error_clear(&err);
        ck_assert_int_eq(zr_shm_map_sealed(client_memfd(100, all), 101, &s, &err), -ZR_E_BUFFER);
        zr_error_clear(&err);
        int p[2];
        ck_assert_int_eq(pipe2(p, O_CLOEXEC), 0);
        ck_assert_int_eq(zr_shm_map_sealed(p[0], 0, &s, &err), -ZR_E_BAD_FD);
        ck_assert_int_eq(fcntl(p[0], F_GETFD), -1); /* taken and closed on failure */
        ck_assert_int_eq(errno, EBADF);
        close(p[1]);
        ck_assert_int_eq(zr_shm_map_sealed(client_memfd(0, all), 0, &s, &err), 0);
        ck_assert_ptr_null(s.data);
        zr_shm_release(&s);
}
END_TEST

/* The probe says whether daemon-made regions get F_SEAL_FUTURE_WRITE: yes on
 * this kernel (5.1 and later), no under a filter that refuses the seal as an
 * older kernel does, where a region is still made, without that seal. */
START_TEST(test_probe_future_write) {
        zr_shm s;
        zr_error err = {0};
        int has = zr_shm_seals_future_write();
        ck_assert_int_ge(has, 0);
        if (!has)
                fprintf(stderr, "note: this kernel has no F_SEAL_FUTURE_WRITE\n");
        if (tl_deny_future_write_seal() < 0) {
                fprintf(stderr, "skipped: seccomp unavailable\n");
                return;
        }
        ck_assert_int_eq(zr_shm_seals_future_write(), 0);
        ck_assert_int_eq(zr_shm_create("zr-test", 4096, &s, &err), 0);
        ck_assert(fcntl(s.fd, F_GET_SEALS) & F_SEAL_SEAL);
        zr_shm_release(&s);
}
END_TEST

TL_SUITE_MAIN("shm", test_create_sealed, test_create_lazy, test_prefault_part, test_map_sealed, test_probe_future_write)
