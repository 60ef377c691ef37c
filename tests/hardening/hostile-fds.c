/* hostile-fds.c: the hostile cases of daemon-made memfds a client tries to
 * change, and descriptors of the wrong kind or in the wrong message
 * (hostile.h). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "hostile.h"

/* Every way a client might try to change a daemon-made memfd. Returns the
 * number of attempts; *ret_refused counts those the kernel refused. */
static unsigned try_to_write(int mfd, uint64_t bytes, unsigned *ret_refused, const char *what) {
        unsigned n = 0, refused = 0;
        char junk[64];
        memset(junk, 0x5a, sizeof(junk));
#define ATTEMPT(failed, desc)                                                               \
        do {                                                                                \
                n++;                                                                        \
                bool f_ = (failed);                                                         \
                refused += f_;                                                              \
                CHECK(f_, "%s: %s succeeded", what, desc);                                  \
        } while (0)
        int seals = fcntl(mfd, F_GET_SEALS);
        CHECK(seals >= 0 && (seals & F_SEAL_SHRINK) && (seals & F_SEAL_GROW) &&
              (seals & F_SEAL_SEAL), "%s: seals %#x", what, seals);
#ifdef F_SEAL_FUTURE_WRITE
        CHECK(seals & F_SEAL_FUTURE_WRITE, "%s: no F_SEAL_FUTURE_WRITE (%#x)", what, seals);
#endif
        ATTEMPT(ftruncate(mfd, 0) < 0, "ftruncate to 0");
        ATTEMPT(ftruncate(mfd, (off_t)bytes / 2) < 0, "ftruncate to half");
        ATTEMPT(ftruncate(mfd, (off_t)bytes * 2) < 0, "ftruncate to twice");
        ATTEMPT(write(mfd, junk, sizeof(junk)) < 0, "write");
        ATTEMPT(pwrite(mfd, junk, sizeof(junk), 4096) < 0, "pwrite");
        ATTEMPT(fallocate(mfd, 0, 0, (off_t)bytes + 4096) < 0, "fallocate to grow");
        ATTEMPT(fallocate(mfd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, 4096) < 0,
                "fallocate punching a hole");
        void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, mfd, 0);
        ATTEMPT(p == MAP_FAILED, "a shared writable mapping");
        if (p != MAP_FAILED)
                munmap(p, bytes);
        p = mmap(NULL, bytes, PROT_READ, MAP_SHARED, mfd, 0);
        CHECK(p != MAP_FAILED, "%s: a read-only mapping failed", what);
        if (p != MAP_FAILED) {
                ATTEMPT(mprotect(p, bytes, PROT_READ | PROT_WRITE) < 0,
                        "mprotect of the read-only mapping to writable");
                munmap(p, bytes);
        }
        ATTEMPT(fcntl(mfd, F_ADD_SEALS, F_SEAL_WRITE) < 0, "adding F_SEAL_WRITE");
        char proc[64];
        snprintf(proc, sizeof(proc), "/proc/self/fd/%d", mfd);
        int again = open(proc, O_RDWR | O_CLOEXEC);
        if (again >= 0) {
                ATTEMPT(write(again, junk, sizeof(junk)) < 0, "write through a reopened O_RDWR descriptor");
                p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, again, 0);
                ATTEMPT(p == MAP_FAILED, "a shared writable mapping of a reopened descriptor");
                if (p != MAP_FAILED)
                        munmap(p, bytes);
                ATTEMPT(ftruncate(again, 0) < 0, "ftruncate of a reopened descriptor");
                close(again);
        }
        /* A private copy-on-write mapping may be written: it is the client's own. */
        p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE, mfd, 0);
        if (p != MAP_FAILED) {
                memset(p, 0xa5, bytes);
                munmap(p, bytes);
        }
#undef ATTEMPT
        *ret_refused = refused;
        return n;
}

/* ---- cases -------------------------------------------------------------- */

void case_ring_write(void) {
        int fd, ring = -1;
        uint64_t ring_bytes = 0, slot_bytes = 0, b0 = checker_batches(), shm0 = status_shm();
        unsigned attempts = 0, refused = 0, r1 = 0;
        CHECK(tl_connect_hello(D.socket, "hardening", &fd) == 0, "ring: hello");
        int64_t h = hd_raw_open(fd, hd_path, false, 2);
        CHECK(h > 0, "ring: open: %" PRId64, h);
        int l = raw_loader_open(fd, h, 2, 3, &ring, &ring_bytes, &slot_bytes);
        CHECK(l > 0, "ring: loader_open: %d", l);
        if (l > 0) {
                attempts += try_to_write(ring, ring_bytes, &r1, "ring");
                refused += r1;
                /* the daemon goes on filling the ring: 8 batches, each checked */
                const uint8_t *map = mmap(NULL, ring_bytes, PROT_READ, MAP_SHARED, ring, 0);
                CHECK(map != MAP_FAILED, "ring: map");
                unsigned good = 0, seen = 0;
                /* rings of identical loaders of other clients, passed by RING */
                uint64_t other_id[8], other_bytes[8];
                const uint8_t *other[8];
                unsigned nother = 0;
                while (map != MAP_FAILED && seen < 8) {
                        tl_msg m;
                        if (tl_recv(fd, &m, TL_TIMEOUT_MS) < 0)
                                break;
                        if (strcmp(m.kind, "ring") == 0 && m.nfds == 1 && nother < 8) {
                                other_bytes[nother] = tl_u64(&m, "ring_bytes");
                                other[nother] = mmap(NULL, other_bytes[nother], PROT_READ,
                                                     MAP_SHARED, m.fds[0], 0);
                                CHECK(other[nother] != MAP_FAILED, "ring: map a RING");
                                if (other[nother] != MAP_FAILED)
                                        other_id[nother++] = tl_u64(&m, "ring");
                        }
                        if (strcmp(m.kind, "batch") == 0) {
                                uint64_t slot = tl_u64(&m, "slot"), step = tl_u64(&m, "step");
                                uint64_t rid = tl_u64(&m, "ring");
                                const uint8_t *rbase = map;
                                for (unsigned k = 0; k < nother; k++)
                                        if (other_id[k] == rid)
                                                rbase = other[k];
                                const msgpack_object *items;
                                uint32_t ni = 0;
                                uint64_t off = slot * slot_bytes;
                                if (zr_wire_get_array(m.root, "streams", &items, &ni, NULL) == 0 && ni == 1)
                                        zr_wire_get_u64(&items[0], "offset", &off, NULL);
                                uint64_t idx[32];
                                for (int j = 0; j < 32; j++)
                                        idx[j] = (step * 32 + (uint64_t)j) % N_RECORDS;
                                good += dense_batch_ok(rbase + off, idx, 32);
                                seen++;
                                zr_wire_writer w;
                                zr_wire_writer_init(&w);
                                zr_wire_writer_begin_message(&w, "release", false, 0);
                                zr_wire_put_u64(&w, "loader", (uint64_t)l);
                                zr_wire_put_u64(&w, "ring", rid);
                                zr_wire_put_u64(&w, "slot", slot);
                                tl_send(fd, &w, NULL, 0);
                                zr_wire_writer_destroy(&w);
                        }
                        tl_msg_free(&m);
                }
                CHECK(good == 8, "ring: %u of 8 batches intact after the attempts", good);
                if (map != MAP_FAILED)
                        munmap((void *)map, ring_bytes);
                for (unsigned k = 0; k < nother; k++)
                        munmap((void *)other[k], other_bytes[k]);
                close(ring);
        }
        /* a read buffer */
        zr_wire_writer w;
        tl_msg m;
        tl_begin(&w, "buffer_open", 10);
        zr_wire_put_u64(&w, "bytes", 65536);
        int r = tl_call(fd, &w, NULL, 0, &m);
        CHECK(r == 0 && m.nfds == 1, "buffer_open: %d", r);
        if (r == 0 && m.nfds == 1) {
                int buf = m.fds[0];
                uint64_t bytes = tl_u64(&m, "bytes"), bh = tl_u64(&m, "buffer");
                m.nfds = 0;
                attempts += try_to_write(buf, bytes, &r1, "buffer");
                refused += r1;
                uint64_t idx[64];
                for (int j = 0; j < 64; j++)
                        idx[j] = (uint64_t)j * 31 % N_RECORDS;
                tl_msg_free(&m);
                tl_begin(&w, "read", 11);
                zr_wire_put_u64(&w, "handle", (uint64_t)h);
                zr_wire_put_u64(&w, "buffer", bh);
                zr_wire_put_u64s(&w, "indices", idx, 64);
                r = tl_call(fd, &w, NULL, 0, &m);
                const uint8_t *map = mmap(NULL, bytes, PROT_READ, MAP_SHARED, buf, 0);
                CHECK(r == 0 && map != MAP_FAILED && dense_batch_ok(map, idx, 64),
                      "buffer: a READ after the attempts is not intact (%d)", r);
                if (map != MAP_FAILED)
                        munmap((void *)map, bytes);
                close(buf);
        }
        tl_msg_free(&m);
        close(fd);
        printf("case ring-write: %u attempts on a ring and a read buffer, %u refused by the kernel\n",
               attempts, refused);
        settle("ring-write", shm0, b0);
}

static int expect_call(int fd, const char *kind, const int *fds, unsigned nfds, int64_t handle,
                       const char *desc, int want, unsigned *n, unsigned *ok) {
        zr_wire_writer w;
        tl_msg m;
        tl_begin(&w, kind, 100 + *n);
        if (handle >= 0)
                zr_wire_put_u64(&w, "handle", (uint64_t)handle);
        if (!strcmp(kind, "append")) {
                uint64_t shape[1] = {REC_BYTES};
                zr_wire_put_str(&w, "dtype", "|u1");
                zr_wire_put_u64(&w, "count", 1);
                zr_wire_put_u64(&w, "record_bytes", REC_BYTES);
                zr_wire_put_uint_array(&w, "item_shape", shape, 1);
        }
        if (!strcmp(kind, "buffer_open"))
                zr_wire_put_u64(&w, "bytes", 4096);
        int r = tl_call(fd, &w, fds, nfds, &m);
        (*n)++;
        *ok += r == want;
        CHECK(r == want, "wrong-fds: %s: got %d, expected %d", desc, r, want);
        tl_msg_free(&m);
        return r;
}

void case_wrong_fds(void) {
        int fd, pipefd[2], sv[2];
        unsigned n = 0, ok = 0;
        uint64_t b0 = checker_batches(), shm0 = status_shm();
        char meta[400], smeta[400];
        snprintf(meta, sizeof(meta), "%s/meta.zr", hd_path);
        snprintf(smeta, sizeof(smeta), "%s/meta.zr", scratch_path);
        CHECK(pipe2(pipefd, O_CLOEXEC) == 0, "pipe");
        CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0, "socketpair");
        int dir = open(hd_path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        int opath = open(hd_path, O_PATH | O_DIRECTORY | O_CLOEXEC);
        int mfd = open(meta, O_RDONLY | O_CLOEXEC);
        int sdir = open(scratch_path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        int smfd = open(smeta, O_RDWR | O_CLOEXEC);
        int file = open(meta, O_RDONLY | O_CLOEXEC);
        uint8_t rec[REC_BYTES];
        hd_record_fill(0, rec, sizeof(rec));
        int unsealed = memfd_create("unsealed", MFD_CLOEXEC | MFD_ALLOW_SEALING);
        CHECK(write(unsealed, rec, sizeof(rec)) == (ssize_t)sizeof(rec), "memfd write");

        CHECK(tl_connect_hello(D.socket, "hardening", &fd) == 0, "wrong-fds: hello");
        expect_call(fd, "status", (int[]){pipefd[0]}, 1, -1, "a descriptor with STATUS",
                    ZR_E_BAD_FD, &n, &ok);
        expect_call(fd, "dataset_open", (int[]){sv[0], mfd}, 2, -1, "a socket as the directory",
                    ZR_E_BAD_FD, &n, &ok);
        /* a proof that is not meta.zr fails the identity check of section 6 */
        expect_call(fd, "dataset_open", (int[]){dir, pipefd[0]}, 2, -1, "a pipe as meta.zr",
                    EACCES, &n, &ok);
        expect_call(fd, "dataset_open", (int[]){opath, mfd}, 2, -1, "an O_PATH directory",
                    ZR_E_BAD_FD, &n, &ok);
        expect_call(fd, "dataset_open", (int[]){dir}, 1, -1, "one descriptor of two",
                    ZR_E_BAD_FD, &n, &ok);
        expect_call(fd, "dataset_open", (int[]){dir, smfd}, 2, -1,
                    "another store's meta.zr as the proof", EACCES, &n, &ok);
        int64_t sh = hd_raw_open(fd, scratch_path, true, 50);
        CHECK(sh > 0, "wrong-fds: open scratch writable: %" PRId64, sh);
        expect_call(fd, "append", (int[]){unsealed}, 1, sh, "an unsealed memfd with APPEND",
                    ZR_E_BAD_FD, &n, &ok);
        expect_call(fd, "append", (int[]){file}, 1, sh, "a regular file with APPEND",
                    ZR_E_BAD_FD, &n, &ok);
        expect_call(fd, "append", (int[]){dir}, 1, sh, "a directory with APPEND",
                    ZR_E_BAD_FD, &n, &ok);
        expect_call(fd, "buffer_open", (int[]){unsealed}, 1, -1, "a descriptor with BUFFER_OPEN",
                    ZR_E_BAD_FD, &n, &ok);
        /* a RELEASE (a notification) carrying a descriptor: a FAULT */
        {
                zr_wire_writer w;
                tl_msg m;
                zr_wire_writer_init(&w);
                zr_wire_writer_begin_message(&w, "release", false, 0);
                zr_wire_put_u64(&w, "loader", 1);
                zr_wire_put_u64(&w, "slot", 0);
                tl_send(fd, &w, (int[]){pipefd[1]}, 1);
                zr_wire_writer_destroy(&w);
                int rr = tl_recv(fd, &m, TL_TIMEOUT_MS);
                n++;
                bool f = rr == 0 && !strcmp(m.kind, "fault");
                ok += f;
                CHECK(f, "wrong-fds: a RELEASE with a descriptor got no FAULT (%d %s)", rr, m.kind);
                tl_msg_free(&m);
        }
        /* the connection still works: a real append */
        {
                int sealed = memfd_create("sealed", MFD_CLOEXEC | MFD_ALLOW_SEALING);
                CHECK(write(sealed, rec, sizeof(rec)) == (ssize_t)sizeof(rec), "memfd write");
                fcntl(sealed, F_ADD_SEALS, F_SEAL_WRITE | F_SEAL_SHRINK | F_SEAL_GROW);
                expect_call(fd, "append", (int[]){sealed}, 1, sh, "a sealed memfd with APPEND",
                            0, &n, &ok);
                close(sealed);
        }
        /* one descriptor more than a frame may carry: more than the control
         * buffer holds */
        {
                enum { TOO_MANY = ZR_FDS_PER_FRAME_MAX + 1 };
                int many[TOO_MANY];
                for (int i = 0; i < TOO_MANY; i++)
                        many[i] = pipefd[0];
                zr_wire_writer w;
                tl_msg m;
                tl_begin(&w, "status", 200);
                tl_send(fd, &w, many, TOO_MANY);
                zr_wire_writer_destroy(&w);
                int rr = tl_recv(fd, &m, TL_TIMEOUT_MS);
                int code = rr == 0 ? tl_code(&m) : rr;
                tl_msg_free(&m);
                int eof = tl_recv(fd, &m, TL_TIMEOUT_MS);
                tl_msg_free(&m);
                n++;
                ok += code == ZR_E_BAD_FD && eof == -EPIPE;
                CHECK(code == ZR_E_BAD_FD && eof == -EPIPE,
                      "wrong-fds: %d descriptors: %d, then %d", TOO_MANY, code, eof);
        }
        close(fd);
        /* strikes: a connection that keeps sending descriptors where none belong */
        {
                CHECK(tl_connect_hello(D.socket, "hardening", &fd) == 0, "strikes: hello");
                int got = 0, rr = 0;
                for (int i = 0; i < 40 && rr >= 0; i++) {
                        zr_wire_writer w;
                        tl_msg m;
                        tl_begin(&w, "status", 300 + (uint64_t)i);
                        rr = tl_call(fd, &w, (int[]){pipefd[0]}, 1, &m);
                        if (rr >= 0)
                                got++;
                        tl_msg_free(&m);
                }
                n++;
                ok += rr == -EPIPE && got <= ZR_STRIKES_MAX + 1;
                CHECK(rr == -EPIPE && got <= ZR_STRIKES_MAX + 1,
                      "strikes: %d answers, then %d", got, rr);
                close(fd);
        }
        close(pipefd[0]);
        close(pipefd[1]);
        close(sv[0]);
        close(sv[1]);
        close(dir);
        close(opath);
        close(mfd);
        close(sdir);
        close(smfd);
        close(file);
        close(unsealed);
        printf("case wrong-fds: %u misplaced or mistyped descriptors answered as specified: %u\n",
               n, ok);
        settle("wrong-fds", shm0, b0);
}

