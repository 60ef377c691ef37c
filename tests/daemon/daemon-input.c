/* daemon-input.c: the daemon suite's malformed frames, strikes, bad
 * descriptors, the protocol's frame vectors and pipelining (daemon-kit.h). */
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
#include "util/error.h"

/* ---- bad input ------------------------------------------------------------------------ */

static void raw_body(int fd, const void *body, uint32_t len) {
        uint8_t hdr[4] = {(uint8_t)len, (uint8_t)(len >> 8), (uint8_t)(len >> 16), (uint8_t)(len >> 24)};
        uint8_t *f = malloc(4 + (size_t)len);
        memcpy(f, hdr, 4);
        memcpy(f + 4, body, len);
        ck_assert_int_eq(td_send_raw(fd, f, 4 + (size_t)len, NULL, 0), 0);
        free(f);
}

static int next_code(int fd, const char *kind) {
        td_msg m;
        ck_assert_int_eq(td_recv(fd, &m), 0);
        ck_assert_str_eq(m.kind, kind);
        int code = td_code(&m);
        td_msg_free(&m);
        return code;
}

START_TEST(test_bad_frames) {
        /* over the limit: refused from the prefix, FAULT, disconnect */
        int fd = td_connect_hello(&D);
        uint8_t big[4] = {0, 0, 0x10, 0x00}; /* 1 MiB + ... = 0x00100000 = 1 MiB exactly: allowed */
        big[2] = 0x20;                       /* 2 MiB: over */
        ck_assert_int_eq(td_send_raw(fd, big, 4, NULL, 0), 0);
        ck_assert_int_eq(expect_closed(fd), ZR_E_LIMIT);
        second_client_served();

        /* a zero-length frame: FAULT ZR_E_PROTO and a hang-up */
        fd = td_connect_hello(&D);
        uint8_t zero[4] = {0};
        ck_assert_int_eq(td_send_raw(fd, zero, 4, NULL, 0), 0);
        ck_assert_int_eq(expect_closed(fd), ZR_E_PROTO);

        /* truncated frame, then hang up */
        fd = td_connect_hello(&D);
        uint8_t trunc[] = {100, 0, 0, 0, 0x82, 0xa4};
        ck_assert_int_eq(td_send_raw(fd, trunc, sizeof(trunc), NULL, 0), 0);
        close(fd);
        second_client_served();

        /* bytes that are not msgpack, then the five bytes dd ff ff ff ff, then deep
         * nesting: each a FAULT, the connection carries on */
        fd = td_connect_hello(&D);
        raw_body(fd, "\xc1\xc1\xc1", 3);
        ck_assert_int_eq(next_code(fd, "fault"), ZR_E_PROTO);
        raw_body(fd, "\xdd\xff\xff\xff\xff", 5);
        ck_assert_int_eq(next_code(fd, "fault"), ZR_E_PROTO);
        uint8_t deep[40];
        memset(deep, 0x91, sizeof(deep)); /* fixarray of 1, 40 deep */
        deep[39] = 0x01;
        raw_body(fd, deep, sizeof(deep));
        ck_assert_int_eq(next_code(fd, "fault"), ZR_E_PROTO);
        /* not a map */
        raw_body(fd, "\x93\x01\x02\x03", 4);
        ck_assert_int_eq(next_code(fd, "fault"), ZR_E_PROTO);
        /* a map without an id: FAULT */
        zr_wire_writer w;
        zr_wire_writer_init(&w);
        zr_wire_writer_begin_message(&w, "status", false, 0);
        ck_assert_int_eq(td_send(fd, &w, NULL, 0), 0);
        zr_wire_writer_destroy(&w);
        ck_assert_int_eq(next_code(fd, "fault"), ZR_E_PROTO);
        /* wrong types: an error reply naming the field */
        td_msg m;
        td_begin(&w, "info", 77);
        zr_wire_put_str(&w, "handle", "one");
        ck_assert_int_eq(td_call(fd, &w, NULL, 0, &m), ZR_E_PROTO);
        ck_assert_uint_eq(td_u64(&m, "id"), 77);
        const char *msg;
        size_t len;
        ck_assert_int_eq(zr_wire_get_str(m.root, "message", &msg, &len, NULL), 0);
        ck_assert_ptr_nonnull(memmem(msg, len, "handle", 6));
        td_msg_free(&m);
        /* unknown kind */
        td_begin(&w, "teleport", 78);
        ck_assert_int_eq(td_call(fd, &w, NULL, 0, &m), ZR_E_UNKNOWN);
        ck_assert_uint_eq(td_u64(&m, "id"), 78);
        td_msg_free(&m);
        /* still served */
        ck_assert_int_eq(simple_code(fd, "status", NULL, 0), 0);
        close(fd);
        second_client_served();
}
END_TEST

START_TEST(test_no_hello_and_strikes) {
        int fd = td_connect(&D);
        td_msg m;
        ck_assert_int_eq(simple(fd, "status", NULL, 0, &m), ZR_E_NO_HELLO);
        td_msg_free(&m);
        /* strikes: 16 and the daemon hangs up with a FAULT */
        int got = 1;
        for (; got < ZR_STRIKES_MAX - 1; got++)
                ck_assert_int_eq(simple_code(fd, "status", NULL, 0), ZR_E_NO_HELLO);
        zr_wire_writer w;
        td_begin(&w, "status", 1);
        ck_assert_int_eq(td_send(fd, &w, NULL, 0), 0);
        zr_wire_writer_destroy(&w);
        ck_assert_int_eq(next_code(fd, "error"), ZR_E_NO_HELLO);
        ck_assert_int_eq(expect_closed(fd), ZR_E_LIMIT);
        second_client_served();
}
END_TEST

/* A request of `kind` with no field but its id, carrying fds: its code. */
static int call_code(int fd, const char *kind, const int *fds, unsigned nfds) {
        zr_wire_writer w;
        td_msg m;

        td_begin(&w, kind, next_id++);
        int code = td_call(fd, &w, fds, nfds, &m);
        td_msg_free(&m);
        return code;
}

/* DATASET_CREATE of a scalar "<u4" store of `codec` in the directory at path:
 * its code. */
static int create_code(int fd, const char *path, const char *codec) {
        zr_wire_writer w;
        td_msg m;
        int dfd = td_open_dir(path);

        td_begin(&w, "dataset_create", next_id++);
        zr_wire_begin_map(&w, "schema");
        zr_wire_put_str(&w, "kind", "dense");
        zr_wire_put_str(&w, "dtype", "<u4");
        zr_wire_put_uint_array(&w, "item_shape", NULL, 0);
        zr_wire_put_str(&w, "codec", codec);
        zr_wire_end(&w);
        int code = td_call(fd, &w, &dfd, 1, &m);
        td_msg_free(&m);
        close(dfd);
        return code;
}

/* APPEND of 2 records of ITEM u32 from memfd mfd, declared as dtype and shape:
 * its code. */
static int append_code(int fd, uint32_t h, const char *dtype, const uint64_t *shape,
                       unsigned ndim, int mfd) {
        zr_wire_writer w;
        td_msg m;

        td_begin(&w, "append", next_id++);
        zr_wire_put_u64(&w, "handle", h);
        td_put_dense(&w, dtype, shape, ndim, 2, ITEM * 4);
        int code = td_call(fd, &w, &mfd, 1, &m);
        td_msg_free(&m);
        return code;
}

START_TEST(test_bad_descriptors) {
        int fd = td_connect_hello(&D);
        /* descriptors with a message that takes none: closed, ZR_E_BAD_FD */
        int pipefd[2];
        ck_assert_int_eq(pipe2(pipefd, O_CLOEXEC), 0);
        int before = td_fd_count(&D);
        ck_assert_int_eq(call_code(fd, "status", pipefd, 2), ZR_E_BAD_FD);
        ck_assert_int_eq(td_fd_count(&D), before);
        /* the wrong count: dataset_open with one */
        ck_assert_int_eq(call_code(fd, "dataset_open", pipefd, 1), ZR_E_BAD_FD);
        /* not a directory */
        int fds[2] = {pipefd[0], pipefd[1]};
        ck_assert_int_eq(call_code(fd, "dataset_open", fds, 2), ZR_E_BAD_FD);
        /* a directory that holds no store */
        ck_assert_int_eq(mkdir(path_in("empty"), 0755), 0);
        fds[0] = td_open_dir(path_in("empty"));
        ck_assert_int_eq(call_code(fd, "dataset_open", fds, 2), ZR_E_NOT_STORE);
        close(fds[0]);
        /* an O_PATH directory proves nothing */
        uint32_t h = create_dense(fd, "s", "raw");
        fds[0] = open(path_in("s"), O_PATH | O_DIRECTORY | O_CLOEXEC);
        char meta[420];
        snprintf(meta, sizeof(meta), "%s/meta.zr", path_in("s"));
        fds[1] = open(meta, O_RDONLY | O_CLOEXEC);
        ck_assert_int_eq(call_code(fd, "dataset_open", fds, 2), ZR_E_BAD_FD);
        close(fds[0]);
        /* another store's meta.zr as proof */
        create_dense(fd, "s2", "raw");
        fds[0] = td_open_dir(path_in("s2"));
        ck_assert_int_eq(call_code(fd, "dataset_open", fds, 2), EACCES);
        close(fds[0]);
        close(fds[1]);
        /* create in a directory that is not empty, or holds a store */
        ck_assert_int_eq(create_code(fd, D.dir, "raw"), ENOTEMPTY);
        ck_assert_int_eq(create_code(fd, path_in("s"), "lz4"), ZR_E_BAD_CODEC);

        /* an unsealed memfd, and one too small */
        uint32_t data[ITEM * 2] = {0};
        uint64_t shape[] = {ITEM}, shape2[] = {2, 2};
        int unsealed = td_memfd(data, sizeof(data), false);
        ck_assert_int_eq(append_code(fd, h, "<u4", shape, 1, unsealed), ZR_E_BAD_FD);
        close(unsealed);
        int small = td_memfd(data, 8, true);
        ck_assert_int_eq(append_code(fd, h, "<u4", shape, 1, small), ZR_E_BUFFER);
        /* wrong dtype and shape: ZR_E_SCHEMA, nothing written */
        int good = td_memfd(data, sizeof(data), true);
        ck_assert_int_eq(append_code(fd, h, "<f4", shape, 1, good), ZR_E_SCHEMA);
        ck_assert_int_eq(append_code(fd, h, "<u4", shape2, 2, good), ZR_E_SCHEMA);
        close(good);
        close(small);
        expect_length(fd, h, 0);
        close(pipefd[0]);
        close(pipefd[1]);
        close(fd);
        second_client_served();
}
END_TEST

START_TEST(test_ctrunc) {
        /* more descriptors than a frame may carry: the control data is truncated,
         * which cannot be attributed: FAULT ZR_E_BAD_FD and a hang-up */
        int probe = td_connect_hello(&D);
        int base = td_fd_count(&D);
        int fd = td_connect_hello(&D);
        int fds[70];
        for (int i = 0; i < 70; i++)
                fds[i] = open("/dev/null", O_RDONLY | O_CLOEXEC);
        zr_wire_writer w;
        td_begin(&w, "status", 1);
        ck_assert_int_eq(td_send(fd, &w, fds, 70), 0);
        zr_wire_writer_destroy(&w);
        ck_assert_int_eq(expect_closed(fd), ZR_E_BAD_FD);
        for (int i = 0; i < 70; i++)
                close(fds[i]);
        wait_clients(probe, 1);
        ck_assert_int_eq(td_fd_count(&D), base);
        close(probe);
        second_client_served();
}
END_TEST

/* proto/vectors/frames: every request frame the MANIFEST accepts is not refused
 * as malformed; every body it rejects gets the code it names (an error reply or
 * a FAULT), each on a fresh connection (so strikes never add up). Frame-level
 * vectors (frame-*) are the conn's business and are covered above. */
START_TEST(test_frame_vectors) {
        const char *dir = getenv("ZR_VECTORS");
        ck_assert_ptr_nonnull(dir);
        char path[600], line[512];
        snprintf(path, sizeof(path), "%s/frames/MANIFEST", dir);
        FILE *f = fopen(path, "re");
        ck_assert_ptr_nonnull(f);
        int checked = 0;
        while (fgets(line, sizeof(line), f)) {
                char file[128], verdict[16], expect[32], context[32];
                if (line[0] == '#' || sscanf(line, "%127s %15s %31s %31s", file, verdict, expect,
                                             context) != 4)
                        continue;
                if (!strncmp(file, "frame-", 6) || strcmp(context, "-") != 0)
                        continue;
                zr_msg_kind kind = zr_msg_kind_from_name(expect, strlen(expect));
                bool accept = !strcmp(verdict, "accept");
                if (accept && !zr_msg_kind_is_request(kind))
                        continue; /* daemon-to-client messages */
                snprintf(path, sizeof(path), "%s/frames/%s", dir, file);
                FILE *vf = fopen(path, "re");
                ck_assert_ptr_nonnull(vf);
                static uint8_t buf[1 << 21];
                size_t n = fread(buf, 1, sizeof(buf), vf);
                fclose(vf);
                int fd = kind == ZR_MSG_HELLO && accept ? td_connect(&D) : td_connect_hello(&D);
                ck_assert_int_eq(td_send_raw(fd, buf, n, NULL, 0), 0);
                td_msg m;
                ck_assert_msg(td_recv(fd, &m) == 0, "%s: no answer", file);
                int code = td_code(&m);
                if (accept)
                        ck_assert_msg(code != ZR_E_PROTO && code != ZR_E_UNKNOWN &&
                                      code != ZR_E_LIMIT, "%s: refused with %d (%s)", file, code,
                                      zr_error_code_name(code));
                else
                        ck_assert_msg(!strcmp(zr_error_code_name(code), expect),
                                      "%s: got %s, expected %s", file, zr_error_code_name(code),
                                      expect);
                td_msg_free(&m);
                close(fd);
                checked++;
        }
        fclose(f);
        ck_assert_int_gt(checked, 60);
}
END_TEST

/* ---- pipelining ------------------------------------------------------------------------ */

START_TEST(test_pipeline) {
        int fd = td_connect_hello(&D);
        uint32_t h = dense_store(fd, "p", "raw", 10);
        /* 100 requests in one write (more than pipeline_max), one carrying
         * descriptors in the middle: replies come in order, fds go to their frame */
        zr_wire_writer w;
        zr_wire_writer_init(&w);
        uint8_t *all = NULL;
        size_t all_len = 0, fd_at = 0;
        for (int i = 0; i < 100; i++) {
                const uint8_t *f;
                size_t sz;
                zr_wire_writer_reset(&w);
                zr_wire_writer_begin_message(&w, i == 50 ? "dataset_open" : "info", true, 1000 + (uint64_t)i);
                if (i != 50)
                        zr_wire_put_u64(&w, "handle", h);
                ck_assert_int_eq(zr_wire_writer_finish(&w, ZR_FRAME_MAX_DEFAULT, &f, &sz, NULL), 0);
                if (i == 50)
                        fd_at = all_len;
                all = realloc(all, all_len + sz);
                memcpy(all + all_len, f, sz);
                all_len += sz;
        }
        zr_wire_writer_destroy(&w);
        int fds[2];
        char meta[420];
        fds[0] = td_open_dir(path_in("p"));
        snprintf(meta, sizeof(meta), "%s/meta.zr", path_in("p"));
        fds[1] = open(meta, O_RDONLY | O_CLOEXEC);
        /* each frame that carries descriptors goes with its own sendmsg() */
        size_t fd_end = fd_at + 4 + (all[fd_at] | (size_t)all[fd_at + 1] << 8);
        ck_assert_int_eq(td_send_raw(fd, all, fd_at, NULL, 0), 0);
        ck_assert_int_eq(td_send_raw(fd, all + fd_at, fd_end - fd_at, fds, 2), 0);
        ck_assert_int_eq(td_send_raw(fd, all + fd_end, all_len - fd_end, NULL, 0), 0);
        free(all);
        close(fds[0]);
        close(fds[1]);
        for (int i = 0; i < 100; i++) {
                td_msg m;
                ck_assert_int_eq(td_recv(fd, &m), 0);
                ck_assert_uint_eq(td_u64(&m, "id"), 1000 + (uint64_t)i);
                ck_assert_int_eq(td_code(&m), 0);
                td_msg_free(&m);
        }
        close(fd);
}
END_TEST

void daemon_add_input(TCase *tc) {
        tcase_add_test(tc, test_bad_frames);
        tcase_add_test(tc, test_no_hello_and_strikes);
        tcase_add_test(tc, test_bad_descriptors);
        tcase_add_test(tc, test_ctrunc);
        tcase_add_test(tc, test_frame_vectors);
        tcase_add_test(tc, test_pipeline);
}
