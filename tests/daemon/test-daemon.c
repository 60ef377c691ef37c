/* test-daemon.c: integration tests of zrecordd. Each test starts the real
 * binary on a socket in a temp directory (READY=1 on a notify socket the test
 * binds), drives it with raw frames (tclient.h), and checks replies, data,
 * descriptors and exit status. Waits are on sockets and processes, never sleeps.
 * This file holds HELLO and every request on dense, ragged, multi-stream and
 * dictionary stores, and main(); daemon-kit.h says where the other cases are.
 */
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

#include "check-run.h"
#include "daemon-kit.h"

/* ---- HELLO ------------------------------------------------------------------ */

START_TEST(test_hello) {
        struct stat st;
        ck_assert_int_eq(stat(D.socket, &st), 0);
        ck_assert_uint_eq(st.st_mode & 0777, 0660);
        int fd = td_connect(&D);
        zr_wire_writer w;
        td_msg m;
        td_begin_hello(&w, 1, 1, 7);
        ck_assert_int_eq(td_call(fd, &w, NULL, 0, &m), 0);
        zr_wire_error werr = {0};
        ck_assert_int_eq(zr_msg_check(m.root, ZR_MSG_HELLO, NULL, &werr), 0);
        ck_assert_uint_eq(td_u64(&m, "version"), 1);
        ck_assert_uint_eq(td_u64(&m, "id"), 1);
        const msgpack_object *feat;
        uint32_t nf;
        ck_assert_int_eq(zr_wire_get_array(m.root, "features", &feat, &nf, NULL), 0);
        /* every feature by name, each once, and no other (a new one is added
         * here with its PROTOCOL.md section) */
        static const char *const features[] = { "msset", "dict", "verify", "loader", "convert",
                                                 "mixture", "steps_of", "metrics", "stride",
                                                 "remote", "pack", "image", "append_lengths",
                                                 "ctlring" };
        const size_t nwant = sizeof(features) / sizeof(features[0]);
        ck_assert_uint_eq(nf, nwant);
        for (size_t i = 0; i < nwant; i++) {
                unsigned seen = 0;
                for (uint32_t k = 0; k < nf; k++)
                        if (feat[k].type == MSGPACK_OBJECT_STR &&
                            feat[k].via.str.size == strlen(features[i]) &&
                            memcmp(feat[k].via.str.ptr, features[i], feat[k].via.str.size) == 0)
                                seen++;
                ck_assert_msg(seen == 1, "feature %s seen %u times", features[i], seen);
        }
        const msgpack_object *lim;
        ck_assert_int_eq(zr_wire_get_map(m.root, "limits", &lim, NULL), 0);
        uint64_t v;
        ck_assert_int_eq(zr_wire_get_u64(lim, "frame_max", &v, NULL), 0);
        ck_assert_uint_eq(v, ZR_FRAME_MAX_DEFAULT);
        ck_assert_int_eq(zr_wire_get_u64(lim, "pipeline_max", &v, NULL), 0);
        ck_assert_uint_eq(v, ZR_PIPELINE_MAX);
        td_msg_free(&m);

        /* a second HELLO is a protocol error; the connection stays */
        td_begin_hello(&w, 2, 1, 1);
        ck_assert_int_eq(td_call(fd, &w, NULL, 0, &m), ZR_E_PROTO);
        ck_assert_uint_eq(td_u64(&m, "id"), 2);
        td_msg_free(&m);
        ck_assert_int_eq(simple_code(fd, "status", NULL, 0), 0);
        close(fd);

        /* no common version: ZR_E_VERSION, then the daemon hangs up */
        fd = td_connect(&D);
        td_begin_hello(&w, 3, 2, 5);
        ck_assert_int_eq(td_call(fd, &w, NULL, 0, &m), ZR_E_VERSION);
        td_msg_free(&m);
        expect_closed(fd);

        /* features asked for: only those the daemon has */
        fd = td_connect(&D);
        td_begin_hello(&w, 4, 1, 1);
        zr_wire_begin_array(&w, "features");
        zr_wire_put_str(&w, NULL, "verify");
        zr_wire_put_str(&w, NULL, "teleport");
        zr_wire_end(&w);
        ck_assert_int_eq(td_call(fd, &w, NULL, 0, &m), 0);
        ck_assert_int_eq(zr_wire_get_array(m.root, "features", &feat, &nf, NULL), 0);
        ck_assert_uint_eq(nf, 1);
        td_msg_free(&m);
        /* a request of a feature not in force */
        td_begin(&w, "train_dict", 5);
        zr_wire_put_str(&w, "tier", "small");
        zr_wire_put_u64(&w, "handle", 1);
        ck_assert_int_eq(td_call(fd, &w, NULL, 0, &m), ZR_E_UNKNOWN);
        td_msg_free(&m);
        close(fd);
}
END_TEST

/* ---- dense datasets: every request -------------------------------------------- */

START_TEST(test_dense_requests) {
        int fd = td_connect_hello(&D);
        td_msg m;
        uint32_t h = create_dense(fd, "dense", "raw");
        ck_assert_uint_eq(h, 1);
        ck_assert_int_eq(append_dense(fd, h, 0, 100), 0);
        ck_assert_int_eq(append_dense(fd, h, 100, 28), 0);

        ck_assert_int_eq(simple(fd, "info", "handle", h, &m), 0);
        ck_assert_uint_eq(td_u64(&m, "length"), 128);
        ck_assert_int_eq(zr_msg_check(m.root, ZR_MSG_INFO, NULL, NULL), 0);
        td_msg_free(&m);

        const uint8_t *buf;
        uint64_t bsize;
        uint32_t b = open_buffer(fd, 10000, &buf, &bsize);
        ck_assert_uint_eq(b, 2);
        uint64_t idx[] = {7, 3, 7, 127, 0};
        ck_assert_int_eq(read_records(fd, h, b, 64, idx, 5, &m), 0);
        ck_assert_uint_eq(td_u64(&m, "count"), 5);
        ck_assert_uint_eq(td_u64(&m, "offset"), 64);
        ck_assert_uint_eq(td_u64(&m, "bytes"), 5 * ITEM * 4);
        ck_assert_uint_eq(td_u64(&m, "record_bytes"), ITEM * 4);
        td_msg_free(&m);
        check_dense_values(buf + 64, idx, 5);

        /* an empty read */
        ck_assert_int_eq(read_records(fd, h, b, 0, NULL, 0, &m), 0);
        ck_assert_uint_eq(td_u64(&m, "count"), 0);
        td_msg_free(&m);

        ck_assert_int_eq(simple(fd, "stats", "handle", h, &m), 0);
        ck_assert_uint_eq(td_u64(&m, "records"), 128);
        ck_assert_uint_eq(td_u64(&m, "live_bytes"), 128 * 16);
        td_msg_free(&m);
        ck_assert_int_eq(simple_code(fd, "sync", "handle", h), 0);
        ck_assert_int_eq(simple(fd, "verify", "handle", h, &m), 0);
        ck_assert(td_has(&m, "ok"));
        ck_assert_uint_eq(td_u64(&m, "records"), 128);
        ck_assert_uint_eq(td_u64(&m, "bad"), 0);
        td_msg_free(&m);

        /* delete swaps the last record in: index 5 now holds record 127 */
        uint64_t del[] = {5};
        ck_assert_int_eq(delete_records(fd, h, del, 1, &m), 0);
        ck_assert_uint_eq(td_u64(&m, "length"), 127);
        td_msg_free(&m);
        uint64_t i5[] = {5};
        ck_assert_int_eq(read_records(fd, h, b, 0, i5, 1, &m), 0);
        td_msg_free(&m);
        uint64_t want127[] = {127};
        check_dense_values(buf, want127, 1);
        /* a repeated index is EINVAL */
        uint64_t dup[] = {1, 1};
        ck_assert_int_eq(delete_records(fd, h, dup, 2, &m), EINVAL);
        td_msg_free(&m);

        ck_assert_int_eq(simple(fd, "compact", "handle", h, &m), 0);
        ck_assert_uint_eq(td_u64(&m, "records"), 127);
        ck_assert_uint_eq(td_u64(&m, "reclaimable"), 0);
        td_msg_free(&m);

        /* a second, read-only handle on the same store: shared instance */
        ck_assert_int_eq(open_dataset(fd, "dense", O_RDONLY, false, &m), 0);
        uint32_t ro = (uint32_t)td_u64(&m, "handle");
        ck_assert_uint_eq(ro, 3);
        ck_assert_uint_eq(td_u64(&m, "length"), 127);
        td_msg_free(&m);
        ck_assert_int_eq(append_dense(fd, ro, 127, 1), ZR_E_READONLY);
        ck_assert_int_eq(simple_code(fd, "compact", "handle", ro), ZR_E_READONLY);
        /* write access needs an O_RDWR proof */
        ck_assert_int_eq(open_dataset(fd, "dense", O_RDONLY, true, &m), EACCES);
        td_msg_free(&m);
        ck_assert_int_eq(open_dataset(fd, "dense", O_RDWR, true, &m), 0);
        ck_assert_uint_eq(td_u64(&m, "handle"), 4); /* a refused open allocates none */
        td_msg_free(&m);

        /* handles of the wrong kind */
        ck_assert_int_eq(read_records(fd, b, b, 0, idx, 1, &m), ZR_E_NO_HANDLE);
        td_msg_free(&m);
        ck_assert_int_eq(simple_code(fd, "info", "handle", 999), ZR_E_NO_HANDLE);

        /* close: the buffer, then the dataset; a closed handle names nothing */
        ck_assert_int_eq(simple_code(fd, "close", "handle", b), 0);
        ck_assert_int_eq(simple_code(fd, "close", "handle", b), ZR_E_NO_HANDLE);
        ck_assert_int_eq(simple_code(fd, "close", "handle", h), 0);
        ck_assert_int_eq(simple_code(fd, "info", "handle", ro), 0);

        ck_assert_int_eq(simple(fd, "status", NULL, 0, &m), 0);
        ck_assert_int_eq(zr_msg_check(m.root, ZR_MSG_STATUS, NULL, NULL), 0);
        ck_assert_uint_eq(td_u64(&m, "clients"), 1);
        ck_assert_uint_eq(td_u64(&m, "handles"), 2);
        ck_assert_uint_ge(td_u64(&m, "gathers"), 2);
        td_msg_free(&m);
        close(fd);
}
END_TEST

START_TEST(test_read_errors) {
        int fd = td_connect_hello(&D);
        td_msg m;
        uint32_t h = dense_store(fd, "d", "zstd", 50);
        const uint8_t *buf;
        uint64_t bsize;
        uint32_t b = open_buffer(fd, 4096, &buf, &bsize);
        uint64_t idx[] = {1, 2, 50, 51};
        ck_assert_int_eq(read_records(fd, h, b, 0, idx, 4, &m), ZR_E_RANGE);
        ck_assert_uint_eq(td_u64(&m, "index"), 50);
        td_msg_free(&m);
        /* 300 records of 16 bytes do not fit 4096 - 8 */
        uint64_t *many = calloc(300, sizeof(uint64_t));
        ck_assert_int_eq(read_records(fd, h, b, 8, many, 300, &m), ZR_E_BUFFER);
        ck_assert_uint_eq(td_u64(&m, "needed"), 300 * 16);
        td_msg_free(&m);
        free(many);
        ck_assert_int_eq(read_records(fd, h, b, 4, idx, 1, &m), EINVAL);
        td_msg_free(&m);
        ck_assert_int_eq(read_records(fd, h, b, 8192, idx, 1, &m), EINVAL);
        td_msg_free(&m);
        /* the compressed store reads back exactly */
        uint64_t ok[] = {49, 0, 25};
        ck_assert_int_eq(read_records(fd, h, b, 0, ok, 3, &m), 0);
        td_msg_free(&m);
        check_dense_values(buf, ok, 3);
        /* the buffer budget */
        ck_assert_int_eq(simple_code(fd, "buffer_open", "bytes", UINT64_C(1) << 40), ZR_E_LIMIT);
        close(fd);
        second_client_served();
}
END_TEST

/* ---- ragged ----------------------------------------------------------------- */

START_TEST(test_ragged) {
        int fd = td_connect_hello(&D);
        td_msg m;
        uint32_t h = create_ragged(fd, "rag");
        /* record i: shape (i % 3 + 1, i % 5 + 1) of u16 values i + k */
        const int N = 20;
        uint64_t sizes[20], total = 0;
        uint8_t *data = calloc(1, 20 * (24 + 2 * 15));
        for (int i = 0; i < N; i++) {
                uint64_t d0 = i % 3 + 1, d1 = i % 5 + 1, hdr[3] = {2, d0, d1};
                memcpy(data + total, hdr, 24);
                uint16_t *p = (uint16_t *)(data + total + 24);
                for (uint64_t k = 0; k < d0 * d1; k++)
                        p[k] = (uint16_t)(i + k);
                sizes[i] = 24 + 2 * d0 * d1;
                total += sizes[i];
        }
        int mfd = td_memfd(data, total, true);
        zr_wire_writer w;
        td_begin(&w, "append", next_id++);
        zr_wire_put_u64(&w, "handle", h);
        zr_wire_put_str(&w, "dtype", "<u2");
        zr_wire_put_u64(&w, "ndim", 2);
        zr_wire_put_u64s(&w, "sizes", sizes, N);
        ck_assert_int_eq(td_call(fd, &w, &mfd, 1, &m), 0);
        ck_assert_uint_eq(td_u64(&m, "count"), N);
        td_msg_free(&m);
        close(mfd);
        /* a record whose header disagrees with its size: nothing is written */
        uint64_t bad_sizes[] = {sizes[0], sizes[1] + 2};
        mfd = td_memfd(data, sizes[0] + sizes[1] + 2, true);
        td_begin(&w, "append", next_id++);
        zr_wire_put_u64(&w, "handle", h);
        zr_wire_put_str(&w, "dtype", "<u2");
        zr_wire_put_u64(&w, "ndim", 2);
        zr_wire_put_u64s(&w, "sizes", bad_sizes, 2);
        ck_assert_int_eq(td_call(fd, &w, &mfd, 1, &m), ZR_E_SCHEMA);
        td_msg_free(&m);
        close(mfd);
        free(data);

        const uint8_t *buf;
        uint32_t b = open_buffer(fd, 8192, &buf, NULL);
        uint64_t idx[] = {19, 0, 7, 7, 3};
        ck_assert_int_eq(read_records(fd, h, b, 16, idx, 5, &m), 0);
        ck_assert_int_eq(zr_msg_check(m.root, ZR_MSG_READ, NULL, NULL), 0);
        size_t no, nl, ns;
        const uint8_t *offs = td_u64s(&m, "offsets", &no);
        const uint8_t *lens = td_u64s(&m, "lengths", &nl);
        const uint8_t *shapes = td_u64s(&m, "shapes", &ns);
        ck_assert_uint_eq(no, 5);
        ck_assert_uint_eq(nl, 5);
        ck_assert_uint_eq(ns, 10);
        for (int i = 0; i < 5; i++) {
                uint64_t r = idx[i], d0 = r % 3 + 1, d1 = r % 5 + 1;
                uint64_t off = zr_wire_u64_at(offs, (size_t)i);
                ck_assert_uint_eq(off % 8, 0);
                ck_assert_uint_eq(zr_wire_u64_at(shapes, 2 * (size_t)i), d0);
                ck_assert_uint_eq(zr_wire_u64_at(shapes, 2 * (size_t)i + 1), d1);
                ck_assert_uint_eq(zr_wire_u64_at(lens, (size_t)i), 2 * d0 * d1);
                const uint16_t *p = (const uint16_t *)(buf + off);
                for (uint64_t k = 0; k < d0 * d1; k++)
                        ck_assert_uint_eq(p[k], r + k);
                /* the header sits right before the payload */
                const uint64_t *hdr = (const uint64_t *)(buf + off - 24);
                ck_assert_uint_eq(hdr[0], 2);
        }
        td_msg_free(&m);
        /* too small: needed is reported */
        const uint8_t *small;
        uint32_t b2 = open_buffer(fd, 1, &small, NULL);
        uint64_t *all = calloc(200, sizeof(uint64_t));
        for (int i = 0; i < 200; i++)
                all[i] = (uint64_t)(i % N);
        ck_assert_int_eq(read_records(fd, h, b2, 0, all, 200, &m), ZR_E_BUFFER);
        ck_assert_uint_gt(td_u64(&m, "needed"), 4096);
        td_msg_free(&m);
        free(all);
        close(fd);
}
END_TEST

/* ---- multi-stream sets ----------------------------------------------------------- */

/* How open_set_as() passes a stream's proofs (PROTOCOL.md, MSSET_OPEN). */
enum member_how {
        MEMBER_DIR,       /* its directory and meta.zr, as the protocol says */
        MEMBER_PATH,      /* its directory opened O_PATH, which proves nothing */
        MEMBER_OTHER,     /* another directory the client may read, with its meta.zr */
        MEMBER_META_ONLY, /* the old request: the root and a meta.zr per stream */
};

static int open_set_as(int fd, const char *root, const char *const *names, int n,
                       bool writable, enum member_how how, td_msg *m) {
        int fds[1 + 2 * 8];
        unsigned nfds = 1;
        char p[500];
        fds[0] = td_open_dir(path_in(root));
        for (int i = 0; i < n; i++) {
                snprintf(p, sizeof(p), "%s/%s", path_in(root), names[i]);
                if (how == MEMBER_OTHER && i == n - 1)
                        snprintf(p, sizeof(p), "%s", path_in("other"));
                if (how != MEMBER_META_ONLY) {
                        fds[nfds] = open(p, (how == MEMBER_PATH ? O_PATH : O_RDONLY) |
                                                    O_DIRECTORY | O_CLOEXEC);
                        ck_assert_int_ge(fds[nfds++], 0);
                }
                strcat(p, "/meta.zr");
                fds[nfds] = open(p, (writable ? O_RDWR : O_RDONLY) | O_CLOEXEC);
                ck_assert_int_ge(fds[nfds++], 0);
        }
        zr_wire_writer w;
        td_begin(&w, "msset_open", next_id++);
        zr_wire_put_bool(&w, "writable", writable);
        zr_wire_begin_array(&w, "streams");
        for (int i = 0; i < n; i++)
                zr_wire_put_str(&w, NULL, names[i]);
        zr_wire_end(&w);
        int code = td_call(fd, &w, fds, nfds, m);
        for (unsigned i = 0; i < nfds; i++)
                close(fds[i]);
        return code;
}

static int open_set(int fd, const char *root, const char *const *names, int n, bool writable,
                    td_msg *m) {
        return open_set_as(fd, root, names, n, writable, MEMBER_DIR, m);
}

START_TEST(test_msset) {
        int fd = td_connect_hello(&D);
        td_msg m;
        ck_assert_int_eq(mkdir(path_in("set"), 0755), 0);
        uint32_t a = create_dense(fd, "set/a", "raw");
        uint32_t b = create_dense(fd, "set/b", "zstd");
        ck_assert_int_eq(append_dense(fd, a, 0, 10), 0);
        ck_assert_int_eq(append_dense(fd, b, 0, 9), 0);
        const char *names[] = {"a", "b"};
        ck_assert_int_eq(open_set(fd, "set", names, 2, true, &m), ZR_E_MISALIGNED);
        td_msg_free(&m);
        ck_assert_int_eq(append_dense(fd, b, 9, 1), 0);
        const char *one[] = {"a"};
        ck_assert_int_eq(open_set(fd, "set", one, 1, false, &m), EINVAL);
        td_msg_free(&m);
        /* every stream's directory is the client's proof, as for DATASET_OPEN */
        ck_assert_int_eq(open_set_as(fd, "set", names, 2, false, MEMBER_PATH, &m), ZR_E_BAD_FD);
        td_msg_free(&m);
        ck_assert_int_eq(open_set_as(fd, "set", names, 2, false, MEMBER_META_ONLY, &m),
                         ZR_E_BAD_FD);
        td_msg_free(&m);
        uint32_t other = create_dense(fd, "other", "raw");
        ck_assert_int_eq(open_set_as(fd, "set", names, 2, false, MEMBER_OTHER, &m), EACCES);
        td_msg_free(&m);
        ck_assert_int_eq(simple_code(fd, "close", "handle", other), 0);
        ck_assert_int_eq(open_set(fd, "set", names, 2, true, &m), 0);
        ck_assert_int_eq(zr_msg_check(m.root, ZR_MSG_MSSET_OPEN, NULL, NULL), 0);
        uint32_t set = (uint32_t)td_u64(&m, "set");
        ck_assert_uint_eq(td_u64(&m, "length"), 10);
        td_msg_free(&m);

        /* append through the set: both streams, one memfd */
        uint32_t data[2 * 3 * ITEM];
        for (int s = 0; s < 2; s++)
                for (int i = 0; i < 3; i++)
                        for (int j = 0; j < ITEM; j++)
                                data[s * 3 * ITEM + i * ITEM + j] = (uint32_t)((10 + i) * ITEM + j);
        int mfd = td_memfd(data, sizeof(data), true);
        zr_wire_writer w;
        uint64_t shape[] = {ITEM};
        td_begin(&w, "append", next_id++);
        zr_wire_put_u64(&w, "handle", set);
        zr_wire_begin_array(&w, "streams");
        for (int s = 1; s >= 0; s--) {
                zr_wire_begin_map(&w, NULL);
                zr_wire_put_str(&w, "name", names[s]);
                zr_wire_put_u64(&w, "offset", (uint64_t)s * 3 * ITEM * 4);
                zr_wire_put_str(&w, "dtype", "<u4");
                zr_wire_put_u64(&w, "count", 3);
                zr_wire_put_u64(&w, "record_bytes", ITEM * 4);
                zr_wire_put_uint_array(&w, "item_shape", shape, 1);
                zr_wire_end(&w);
        }
        zr_wire_end(&w);
        ck_assert_int_eq(td_call(fd, &w, &mfd, 1, &m), 0);
        ck_assert_uint_eq(td_u64(&m, "first"), 10);
        ck_assert_uint_eq(td_u64(&m, "length"), 13);
        td_msg_free(&m);
        /* a stream missing: misaligned, nothing appended */
        td_begin(&w, "append", next_id++);
        zr_wire_put_u64(&w, "handle", set);
        zr_wire_begin_array(&w, "streams");
        zr_wire_begin_map(&w, NULL);
        zr_wire_put_str(&w, "name", "a");
        zr_wire_put_str(&w, "dtype", "<u4");
        zr_wire_put_u64(&w, "count", 3);
        zr_wire_put_u64(&w, "record_bytes", ITEM * 4);
        zr_wire_put_uint_array(&w, "item_shape", shape, 1);
        zr_wire_end(&w);
        zr_wire_end(&w);
        ck_assert_int_eq(td_call(fd, &w, &mfd, 1, &m), ZR_E_MISALIGNED);
        td_msg_free(&m);
        close(mfd);

        uint64_t del[] = {0, 12};
        ck_assert_int_eq(delete_records(fd, set, del, 2, &m), 0);
        ck_assert_uint_eq(td_u64(&m, "length"), 11);
        td_msg_free(&m);
        expect_length(fd, a, 11);
        expect_length(fd, b, 11);
        ck_assert_int_eq(simple_code(fd, "close", "handle", set), 0);
        close(fd);
}
END_TEST

/* ---- dictionaries ---------------------------------------------------------------- */

START_TEST(test_dict) {
        int fd = td_connect_hello(&D);
        td_msg m;
        uint32_t h = create_dense(fd, "zd", "zstd_dict");
        ck_assert_int_eq(append_dense(fd, h, 0, 4), ZR_E_NO_DICT);

        /* train over records passed in a memfd */
        const int N = 400, L = 256;
        uint8_t *recs = malloc((size_t)N * L);
        uint64_t *sizes = malloc(N * sizeof(uint64_t));
        for (int i = 0; i < N; i++) {
                for (int k = 0; k < L; k++)
                        recs[i * L + k] = (uint8_t)("the quick brown fox "[(i + k) % 20] + (k % 7 == 0 ? i % 3 : 0));
                sizes[i] = L;
        }
        int mfd = td_memfd(recs, (size_t)N * L, true);
        zr_wire_writer w;
        td_begin(&w, "train_dict", next_id++);
        zr_wire_put_str(&w, "tier", "small");
        zr_wire_put_u64s(&w, "sizes", sizes, N);
        ck_assert_int_eq(td_call(fd, &w, &mfd, 1, &m), 0);
        close(mfd);
        ck_assert_uint_eq(m.nfds, 1);
        uint64_t dict_bytes = td_u64(&m, "dict_bytes");
        ck_assert_uint_gt(dict_bytes, 0);
        /* the dictionary memfd is sealed against resizing, and readable */
        int seals = fcntl(m.fds[0], F_GET_SEALS);
        ck_assert_int_eq(seals & (F_SEAL_SHRINK | F_SEAL_GROW), F_SEAL_SHRINK | F_SEAL_GROW);
        int dict_fd = m.fds[0];
        m.nfds = 0;
        td_msg_free(&m);
        free(recs);
        free(sizes);
        /* unknown tier */
        td_begin(&w, "train_dict", next_id++);
        zr_wire_put_str(&w, "tier", "gigantic");
        zr_wire_put_u64(&w, "handle", h);
        ck_assert_int_eq(td_call(fd, &w, NULL, 0, &m), EINVAL);
        td_msg_free(&m);

        /* install it: the daemon-made memfd is not write-sealed, so copy it into a
         * sealed one as a client would */
        void *dp = mmap(NULL, dict_bytes, PROT_READ, MAP_SHARED, dict_fd, 0);
        ck_assert_ptr_ne(dp, MAP_FAILED);
        int sealed = td_memfd(dp, dict_bytes, true);
        munmap(dp, dict_bytes);
        td_begin(&w, "install_dict", next_id++);
        zr_wire_put_u64(&w, "handle", h);
        zr_wire_put_u64(&w, "dict_bytes", dict_bytes);
        ck_assert_int_eq(td_call(fd, &w, &sealed, 1, &m), 0);
        td_msg_free(&m);
        /* twice: has a dictionary */
        td_begin(&w, "install_dict", next_id++);
        zr_wire_put_u64(&w, "handle", h);
        zr_wire_put_u64(&w, "dict_bytes", dict_bytes);
        ck_assert_int_eq(td_call(fd, &w, &sealed, 1, &m), ZR_E_HAS_DICT);
        td_msg_free(&m);
        close(sealed);
        close(dict_fd);
        ck_assert_int_eq(append_dense(fd, h, 0, 64), 0);
        const uint8_t *buf;
        uint32_t b = open_buffer(fd, 4096, &buf, NULL);
        uint64_t idx[] = {63, 1};
        ck_assert_int_eq(read_records(fd, h, b, 0, idx, 2, &m), 0);
        td_msg_free(&m);
        check_dense_values(buf, idx, 2);
        /* train over a store's records */
        td_begin(&w, "train_dict", next_id++);
        zr_wire_put_str(&w, "tier", "small");
        zr_wire_put_u64(&w, "handle", h);
        int code = td_call(fd, &w, NULL, 0, &m);
        ck_assert_msg(code == 0 || code == EINVAL, "code %d", code); /* 1 KiB may be too little */
        td_msg_free(&m);
        ck_assert_int_eq(simple(fd, "info", "handle", h, &m), 0);
        bool has;
        ck_assert_int_eq(zr_wire_get_bool(m.root, "has_dict", &has, NULL), 0);
        ck_assert(has);
        td_msg_free(&m);
        close(fd);
}
END_TEST

/* A damaged record is a VERIFY result (ok false, its index listed), not an
 * error; READ of it is ZR_E_DECODE; the other records still read. */
START_TEST(test_verify_corrupt) {
        int fd = td_connect_hello(&D);
        td_msg m;
        uint32_t h = dense_store(fd, "vc", "zstd", 64);
        ck_assert_int_eq(simple_code(fd, "sync", "handle", h), 0);
        /* flip bytes in the middle of the chunk file, under the daemon */
        char chunk[420];
        snprintf(chunk, sizeof(chunk), "%s/0.chunk", path_in("vc"));
        int cfd = open(chunk, O_RDWR | O_CLOEXEC);
        ck_assert_int_ge(cfd, 0);
        struct stat st;
        ck_assert_int_eq(fstat(cfd, &st), 0);
        off_t size = 0;
        /* the chunk is sparse and large: find the written bytes' end via stats */
        ck_assert_int_eq(simple(fd, "stats", "handle", h, &m), 0);
        size = (off_t)td_u64(&m, "chunk_bytes");
        td_msg_free(&m);
        ck_assert_int_gt(size, 64);
        uint8_t junk[8] = {0xde, 0xad, 0xbe, 0xef, 0xde, 0xad, 0xbe, 0xef};
        /* two places far apart: two different records */
        ck_assert_int_eq(pwrite(cfd, junk, sizeof(junk), size / 4), (ssize_t)sizeof(junk));
        ck_assert_int_eq(pwrite(cfd, junk, sizeof(junk), size * 3 / 4), (ssize_t)sizeof(junk));
        close(cfd);
        ck_assert_int_eq(simple(fd, "verify", "handle", h, &m), 0);
        bool ok = true;
        ck_assert_int_eq(zr_wire_get_bool(m.root, "ok", &ok, NULL), 0);
        ck_assert(!ok);
        ck_assert_uint_eq(td_u64(&m, "records"), 64);
        ck_assert_uint_ge(td_u64(&m, "bad"), 2);
        size_t nb;
        const uint8_t *bad = td_u64s(&m, "bad_indices", &nb);
        ck_assert_uint_ge(nb, 1);
        ck_assert_uint_eq(nb, td_u64(&m, "bad"));
        uint64_t first_bad = zr_wire_u64_at(bad, 0);
        td_msg_free(&m);
        const uint8_t *buf;
        uint32_t b = open_buffer(fd, 4096, &buf, NULL);
        ck_assert_int_eq(read_records(fd, h, b, 0, &first_bad, 1, &m), ZR_E_DECODE);
        td_msg_free(&m);
        uint64_t good = first_bad == 0 ? 63 : 0;
        ck_assert_int_eq(read_records(fd, h, b, 0, &good, 1, &m), 0);
        td_msg_free(&m);
        check_dense_values(buf, &good, 1);
        close(fd);
}
END_TEST

int main(void) {
        Suite *s = suite_create("zrecordd");
        TCase *tc = TL_TCASE(s, "daemon", 120, test_hello, test_dense_requests, test_read_errors,
                             test_ragged, test_msset, test_dict, test_verify_corrupt);
        tcase_add_checked_fixture(tc, setup, teardown);
        daemon_add_input(tc);
        daemon_add_clients(tc);
        daemon_add_lifecycle(tc);
        daemon_add_loaders(tc);
        return tl_run_suite(s);
}
