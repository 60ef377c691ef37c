/* test-daemon.c: integration tests of zrecordd. Each test starts the real
 * binary on a socket in a temp directory (READY=1 on a notify socket the test
 * binds), drives it with raw frames (tclient.h), and checks replies, data,
 * descriptors and exit status. Waits are on sockets and processes, never sleeps.
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

#include "dataset/dataset.h"
#include "tclient.h"

#define ITEM 4 /* u32 values per dense test record: record i holds i*4 .. i*4+3 */

static td_daemon D;

static void setup(void) {
        td_start(&D, NULL);
}

static void teardown(void) {
        td_cleanup(&D);
}

static uint64_t next_id = 100;

/* ---- helpers --------------------------------------------------------------- */

static char *path_in(const char *name) {
        static char buf[4][400];
        static int k;
        k = (k + 1) % 4;
        snprintf(buf[k], sizeof(buf[k]), "%s/%s", D.dir, name);
        return buf[k];
}

static int mkdir_fd(const char *name) {
        ck_assert_int_eq(mkdir(path_in(name), 0755), 0);
        return td_open_dir(path_in(name));
}

/* Creates a dense "<u4" (ITEM,) store in D.dir/name; returns its handle. */
static uint32_t create_dense(int fd, const char *name, const char *codec) {
        int dfd = mkdir_fd(name);
        zr_wire_writer w;
        td_msg m;
        uint64_t shape[] = {ITEM};
        td_begin(&w, "dataset_create", next_id++);
        zr_wire_begin_map(&w, "schema");
        zr_wire_put_str(&w, "kind", "dense");
        zr_wire_put_str(&w, "dtype", "<u4");
        zr_wire_put_uint_array(&w, "item_shape", shape, 1);
        zr_wire_put_str(&w, "codec", codec);
        zr_wire_end(&w);
        ck_assert_int_eq(td_call(fd, &w, &dfd, 1, &m), 0);
        close(dfd);
        uint32_t h = (uint32_t)td_u64(&m, "handle");
        ck_assert_uint_eq(td_u64(&m, "length"), 0);
        td_msg_free(&m);
        return h;
}

static uint32_t create_ragged(int fd, const char *name) {
        int dfd = mkdir_fd(name);
        zr_wire_writer w;
        td_msg m;
        td_begin(&w, "dataset_create", next_id++);
        zr_wire_begin_map(&w, "schema");
        zr_wire_put_str(&w, "kind", "ragged");
        zr_wire_put_str(&w, "dtype", "<u2");
        zr_wire_put_u64(&w, "ndim", 2);
        zr_wire_put_str(&w, "codec", "zstd");
        zr_wire_end(&w);
        ck_assert_int_eq(td_call(fd, &w, &dfd, 1, &m), 0);
        close(dfd);
        uint32_t h = (uint32_t)td_u64(&m, "handle");
        td_msg_free(&m);
        return h;
}

/* Appends records first..first+count-1 (values i*ITEM + j); returns the code. */
static int append_dense(int fd, uint32_t h, uint64_t first, uint64_t count) {
        uint32_t *data = calloc(count * ITEM + 1, sizeof(uint32_t));
        for (uint64_t i = 0; i < count; i++)
                for (int j = 0; j < ITEM; j++)
                        data[i * ITEM + j] = (uint32_t)((first + i) * ITEM + j);
        int mfd = td_memfd(data, count * ITEM * 4, true);
        free(data);
        zr_wire_writer w;
        td_msg m;
        uint64_t shape[] = {ITEM};
        td_begin(&w, "append", next_id++);
        zr_wire_put_u64(&w, "handle", h);
        zr_wire_put_str(&w, "dtype", "<u4");
        zr_wire_put_u64(&w, "count", count);
        zr_wire_put_u64(&w, "record_bytes", ITEM * 4);
        zr_wire_put_uint_array(&w, "item_shape", shape, 1);
        int code = td_call(fd, &w, &mfd, 1, &m);
        close(mfd);
        if (code == 0) {
                ck_assert_uint_eq(td_u64(&m, "first"), first);
                ck_assert_uint_eq(td_u64(&m, "count"), count);
                ck_assert_uint_eq(td_u64(&m, "length"), first + count);
        }
        td_msg_free(&m);
        return code;
}

static uint32_t open_buffer(int fd, uint64_t bytes, const uint8_t **ret_map, uint64_t *ret_size) {
        zr_wire_writer w;
        td_msg m;
        td_begin(&w, "buffer_open", next_id++);
        zr_wire_put_u64(&w, "bytes", bytes);
        ck_assert_int_eq(td_call(fd, &w, NULL, 0, &m), 0);
        ck_assert_uint_eq(m.nfds, 1);
        uint64_t size = td_u64(&m, "bytes");
        ck_assert_uint_eq(size % 4096, 0);
        ck_assert_uint_ge(size, bytes);
        void *p = mmap(NULL, size, PROT_READ, MAP_SHARED, m.fds[0], 0);
        ck_assert_ptr_ne(p, MAP_FAILED);
        uint32_t h = (uint32_t)td_u64(&m, "buffer");
        td_msg_free(&m);
        *ret_map = p;
        if (ret_size)
                *ret_size = size;
        return h;
}

static int read_records(int fd, uint32_t h, uint32_t buf, uint64_t offset, const uint64_t *idx,
                        size_t n, td_msg *m) {
        zr_wire_writer w;
        td_begin(&w, "read", next_id++);
        zr_wire_put_u64(&w, "handle", h);
        zr_wire_put_u64(&w, "buffer", buf);
        zr_wire_put_u64(&w, "offset", offset);
        zr_wire_put_u64s(&w, "indices", idx, n);
        return td_call(fd, &w, NULL, 0, m);
}

static void check_dense_values(const uint8_t *p, const uint64_t *idx, size_t n) {
        const uint32_t *v = (const uint32_t *)p;
        for (size_t i = 0; i < n; i++)
                for (int j = 0; j < ITEM; j++)
                        ck_assert_uint_eq(v[i * ITEM + j], idx[i] * ITEM + (uint64_t)j);
}

static int simple(int fd, const char *kind, const char *key, uint64_t v, td_msg *m) {
        zr_wire_writer w;
        td_begin(&w, kind, next_id++);
        if (key)
                zr_wire_put_u64(&w, key, v);
        return td_call(fd, &w, NULL, 0, m);
}

static int simple_code(int fd, const char *kind, const char *key, uint64_t v) {
        td_msg m;
        int code = simple(fd, kind, key, v, &m);
        td_msg_free(&m);
        return code;
}

/* Opens a dataset by directory and meta.zr proof. */
static int open_dataset(int fd, const char *name, int proof_mode, bool writable, td_msg *m) {
        int fds[2];
        char meta[420];
        fds[0] = td_open_dir(path_in(name));
        snprintf(meta, sizeof(meta), "%s/meta.zr", path_in(name));
        fds[1] = open(meta, proof_mode | O_CLOEXEC);
        ck_assert_int_ge(fds[1], 0);
        zr_wire_writer w;
        td_begin(&w, "dataset_open", next_id++);
        if (writable)
                zr_wire_put_bool(&w, "writable", true);
        int code = td_call(fd, &w, fds, 2, m);
        close(fds[0]);
        close(fds[1]);
        return code;
}

/* A second client is served normally. */
static void second_client_served(void) {
        int fd = td_connect_hello(&D);
        td_msg m;
        ck_assert_int_eq(simple(fd, "status", NULL, 0, &m), 0);
        ck_assert_uint_ge(td_u64(&m, "clients"), 1);
        td_msg_free(&m);
        close(fd);
}

/* Expects the daemon to close the connection (after any frames). Returns the
 * code of the last fault seen, or 0. */
static int expect_closed(int fd) {
        int code = 0;
        for (;;) {
                td_msg m;
                int r = td_recv(fd, &m);
                if (r == -EPIPE)
                        break;
                ck_assert_msg(r == 0, "expected EOF, got %s", strerror(-r));
                code = td_code(&m);
                td_msg_free(&m);
        }
        close(fd);
        return code;
}

/* ---- HELLO ------------------------------------------------------------------ */

START_TEST(test_hello) {
        struct stat st;
        ck_assert_int_eq(stat(D.socket, &st), 0);
        ck_assert_uint_eq(st.st_mode & 0777, 0660);
        int fd = td_connect(&D);
        zr_wire_writer w;
        td_msg m;
        td_begin(&w, "hello", 1);
        zr_wire_put_u64(&w, "min_version", 1);
        zr_wire_put_u64(&w, "max_version", 7);
        ck_assert_int_eq(td_call(fd, &w, NULL, 0, &m), 0);
        zr_wire_error werr = {0};
        ck_assert_int_eq(zr_msg_check(m.root, ZR_MSG_HELLO, NULL, &werr), 0);
        ck_assert_uint_eq(td_u64(&m, "version"), 1);
        ck_assert_uint_eq(td_u64(&m, "id"), 1);
        const msgpack_object *feat;
        uint32_t nf;
        ck_assert_int_eq(zr_wire_get_array(m.root, "features", &feat, &nf, NULL), 0);
        ck_assert_uint_eq(nf, 4); /* msset, dict, verify, loader */
        const msgpack_object *lim;
        ck_assert_int_eq(zr_wire_get_map(m.root, "limits", &lim, NULL), 0);
        uint64_t v;
        ck_assert_int_eq(zr_wire_get_u64(lim, "frame_max", &v, NULL), 0);
        ck_assert_uint_eq(v, ZR_FRAME_MAX_DEFAULT);
        ck_assert_int_eq(zr_wire_get_u64(lim, "pipeline_max", &v, NULL), 0);
        ck_assert_uint_eq(v, ZR_PIPELINE_MAX);
        td_msg_free(&m);

        /* a second HELLO is a protocol error; the connection stays */
        td_begin(&w, "hello", 2);
        zr_wire_put_u64(&w, "min_version", 1);
        zr_wire_put_u64(&w, "max_version", 1);
        ck_assert_int_eq(td_call(fd, &w, NULL, 0, &m), ZR_E_PROTO);
        ck_assert_uint_eq(td_u64(&m, "id"), 2);
        td_msg_free(&m);
        ck_assert_int_eq(simple_code(fd, "status", NULL, 0), 0);
        close(fd);

        /* no common version: ZR_E_VERSION, then the daemon hangs up */
        fd = td_connect(&D);
        td_begin(&w, "hello", 3);
        zr_wire_put_u64(&w, "min_version", 2);
        zr_wire_put_u64(&w, "max_version", 5);
        ck_assert_int_eq(td_call(fd, &w, NULL, 0, &m), ZR_E_VERSION);
        td_msg_free(&m);
        expect_closed(fd);

        /* features asked for: only those the daemon has */
        fd = td_connect(&D);
        td_begin(&w, "hello", 4);
        zr_wire_put_u64(&w, "min_version", 1);
        zr_wire_put_u64(&w, "max_version", 1);
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
        zr_wire_writer w;
        uint64_t del[] = {5};
        td_begin(&w, "delete", next_id++);
        zr_wire_put_u64(&w, "handle", h);
        zr_wire_put_u64s(&w, "indices", del, 1);
        ck_assert_int_eq(td_call(fd, &w, NULL, 0, &m), 0);
        ck_assert_uint_eq(td_u64(&m, "length"), 127);
        td_msg_free(&m);
        uint64_t i5[] = {5};
        ck_assert_int_eq(read_records(fd, h, b, 0, i5, 1, &m), 0);
        td_msg_free(&m);
        uint64_t want127[] = {127};
        check_dense_values(buf, want127, 1);
        /* a repeated index is EINVAL */
        uint64_t dup[] = {1, 1};
        td_begin(&w, "delete", next_id++);
        zr_wire_put_u64(&w, "handle", h);
        zr_wire_put_u64s(&w, "indices", dup, 2);
        ck_assert_int_eq(td_call(fd, &w, NULL, 0, &m), EINVAL);
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
        uint32_t h = create_dense(fd, "d", "zstd");
        ck_assert_int_eq(append_dense(fd, h, 0, 50), 0);
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

static int open_set(int fd, const char *root, const char *const *names, int n, bool writable,
                    td_msg *m) {
        int fds[8];
        char p[500];
        fds[0] = td_open_dir(path_in(root));
        for (int i = 0; i < n; i++) {
                snprintf(p, sizeof(p), "%s/%s/meta.zr", path_in(root), names[i]);
                fds[1 + i] = open(p, (writable ? O_RDWR : O_RDONLY) | O_CLOEXEC);
                ck_assert_int_ge(fds[1 + i], 0);
        }
        zr_wire_writer w;
        td_begin(&w, "msset_open", next_id++);
        zr_wire_put_bool(&w, "writable", writable);
        zr_wire_begin_array(&w, "streams");
        for (int i = 0; i < n; i++)
                zr_wire_put_str(&w, NULL, names[i]);
        zr_wire_end(&w);
        int code = td_call(fd, &w, fds, (unsigned)n + 1, m);
        for (int i = 0; i <= n; i++)
                close(fds[i]);
        return code;
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
        td_begin(&w, "delete", next_id++);
        zr_wire_put_u64(&w, "handle", set);
        zr_wire_put_u64s(&w, "indices", del, 2);
        ck_assert_int_eq(td_call(fd, &w, NULL, 0, &m), 0);
        ck_assert_uint_eq(td_u64(&m, "length"), 11);
        td_msg_free(&m);
        ck_assert_int_eq(simple(fd, "info", "handle", a, &m), 0);
        ck_assert_uint_eq(td_u64(&m, "length"), 11);
        td_msg_free(&m);
        ck_assert_int_eq(simple(fd, "info", "handle", b, &m), 0);
        ck_assert_uint_eq(td_u64(&m, "length"), 11);
        td_msg_free(&m);
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
        uint32_t h = create_dense(fd, "vc", "zstd");
        ck_assert_int_eq(append_dense(fd, h, 0, 64), 0);
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

START_TEST(test_bad_descriptors) {
        int fd = td_connect_hello(&D);
        td_msg m;
        zr_wire_writer w;
        /* descriptors with a message that takes none: closed, ZR_E_BAD_FD */
        int pipefd[2];
        ck_assert_int_eq(pipe2(pipefd, O_CLOEXEC), 0);
        int before = td_fd_count(&D);
        td_begin(&w, "status", next_id++);
        ck_assert_int_eq(td_call(fd, &w, pipefd, 2, &m), ZR_E_BAD_FD);
        td_msg_free(&m);
        ck_assert_int_eq(td_fd_count(&D), before);
        /* the wrong count: dataset_open with one */
        td_begin(&w, "dataset_open", next_id++);
        ck_assert_int_eq(td_call(fd, &w, pipefd, 1, &m), ZR_E_BAD_FD);
        td_msg_free(&m);
        /* not a directory */
        int fds[2] = {pipefd[0], pipefd[1]};
        td_begin(&w, "dataset_open", next_id++);
        ck_assert_int_eq(td_call(fd, &w, fds, 2, &m), ZR_E_BAD_FD);
        td_msg_free(&m);
        /* a directory that holds no store */
        ck_assert_int_eq(mkdir(path_in("empty"), 0755), 0);
        fds[0] = td_open_dir(path_in("empty"));
        td_begin(&w, "dataset_open", next_id++);
        ck_assert_int_eq(td_call(fd, &w, fds, 2, &m), ZR_E_NOT_STORE);
        td_msg_free(&m);
        close(fds[0]);
        /* an O_PATH directory proves nothing */
        uint32_t h = create_dense(fd, "s", "raw");
        fds[0] = open(path_in("s"), O_PATH | O_DIRECTORY | O_CLOEXEC);
        char meta[420];
        snprintf(meta, sizeof(meta), "%s/meta.zr", path_in("s"));
        fds[1] = open(meta, O_RDONLY | O_CLOEXEC);
        td_begin(&w, "dataset_open", next_id++);
        ck_assert_int_eq(td_call(fd, &w, fds, 2, &m), ZR_E_BAD_FD);
        td_msg_free(&m);
        close(fds[0]);
        /* another store's meta.zr as proof */
        create_dense(fd, "s2", "raw");
        fds[0] = td_open_dir(path_in("s2"));
        td_begin(&w, "dataset_open", next_id++);
        ck_assert_int_eq(td_call(fd, &w, fds, 2, &m), EACCES);
        td_msg_free(&m);
        close(fds[0]);
        close(fds[1]);
        /* create in a directory that is not empty, or holds a store */
        fds[0] = td_open_dir(D.dir);
        td_begin(&w, "dataset_create", next_id++);
        zr_wire_begin_map(&w, "schema");
        zr_wire_put_str(&w, "kind", "dense");
        zr_wire_put_str(&w, "dtype", "<u4");
        zr_wire_put_uint_array(&w, "item_shape", NULL, 0);
        zr_wire_put_str(&w, "codec", "raw");
        zr_wire_end(&w);
        ck_assert_int_eq(td_call(fd, &w, fds, 1, &m), ENOTEMPTY);
        td_msg_free(&m);
        close(fds[0]);
        fds[0] = td_open_dir(path_in("s"));
        td_begin(&w, "dataset_create", next_id++);
        zr_wire_begin_map(&w, "schema");
        zr_wire_put_str(&w, "kind", "dense");
        zr_wire_put_str(&w, "dtype", "<u4");
        zr_wire_put_uint_array(&w, "item_shape", NULL, 0);
        zr_wire_put_str(&w, "codec", "lz4");
        zr_wire_end(&w);
        ck_assert_int_eq(td_call(fd, &w, fds, 1, &m), ZR_E_BAD_CODEC);
        td_msg_free(&m);
        close(fds[0]);

        /* an unsealed memfd, and one too small */
        uint32_t data[ITEM * 2] = {0};
        int unsealed = td_memfd(data, sizeof(data), false);
        uint64_t shape[] = {ITEM};
        td_begin(&w, "append", next_id++);
        zr_wire_put_u64(&w, "handle", h);
        zr_wire_put_str(&w, "dtype", "<u4");
        zr_wire_put_u64(&w, "count", 2);
        zr_wire_put_u64(&w, "record_bytes", ITEM * 4);
        zr_wire_put_uint_array(&w, "item_shape", shape, 1);
        ck_assert_int_eq(td_call(fd, &w, &unsealed, 1, &m), ZR_E_BAD_FD);
        td_msg_free(&m);
        close(unsealed);
        int small = td_memfd(data, 8, true);
        td_begin(&w, "append", next_id++);
        zr_wire_put_u64(&w, "handle", h);
        zr_wire_put_str(&w, "dtype", "<u4");
        zr_wire_put_u64(&w, "count", 2);
        zr_wire_put_u64(&w, "record_bytes", ITEM * 4);
        zr_wire_put_uint_array(&w, "item_shape", shape, 1);
        ck_assert_int_eq(td_call(fd, &w, &small, 1, &m), ZR_E_BUFFER);
        td_msg_free(&m);
        /* wrong dtype and shape: ZR_E_SCHEMA, nothing written */
        int good = td_memfd(data, sizeof(data), true);
        td_begin(&w, "append", next_id++);
        zr_wire_put_u64(&w, "handle", h);
        zr_wire_put_str(&w, "dtype", "<f4");
        zr_wire_put_u64(&w, "count", 2);
        zr_wire_put_u64(&w, "record_bytes", ITEM * 4);
        zr_wire_put_uint_array(&w, "item_shape", shape, 1);
        ck_assert_int_eq(td_call(fd, &w, &good, 1, &m), ZR_E_SCHEMA);
        td_msg_free(&m);
        uint64_t shape2[] = {2, 2};
        td_begin(&w, "append", next_id++);
        zr_wire_put_u64(&w, "handle", h);
        zr_wire_put_str(&w, "dtype", "<u4");
        zr_wire_put_u64(&w, "count", 2);
        zr_wire_put_u64(&w, "record_bytes", ITEM * 4);
        zr_wire_put_uint_array(&w, "item_shape", shape2, 2);
        ck_assert_int_eq(td_call(fd, &w, &good, 1, &m), ZR_E_SCHEMA);
        td_msg_free(&m);
        close(good);
        close(small);
        ck_assert_int_eq(simple(fd, "info", "handle", h, &m), 0);
        ck_assert_uint_eq(td_u64(&m, "length"), 0);
        td_msg_free(&m);
        close(pipefd[0]);
        close(pipefd[1]);
        close(fd);
        second_client_served();
}
END_TEST

/* Waits (each step a round-trip to the daemon) until it counts `n` clients. */
static void wait_clients(int fd, uint64_t n) {
        for (int tries = 0; tries < 100000; tries++) {
                td_msg m;
                ck_assert_int_eq(simple(fd, "status", NULL, 0, &m), 0);
                uint64_t c = td_u64(&m, "clients");
                td_msg_free(&m);
                if (c == n)
                        return;
        }
        ck_abort_msg("the daemon never counted %llu clients", (unsigned long long)n);
}

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
        uint32_t h = create_dense(fd, "p", "raw");
        ck_assert_int_eq(append_dense(fd, h, 0, 10), 0);
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

/* ---- many clients ---------------------------------------------------------------------- */

#define READERS 32
#define STORE_LEN 2000

static void *reader_thread(void *arg) {
        uintptr_t k = (uintptr_t)arg;
        int fd = td_connect_hello(&D);
        td_msg m;
        ck_assert_int_eq(open_dataset(fd, "shared", O_RDONLY, false, &m), 0);
        uint32_t h = (uint32_t)td_u64(&m, "handle");
        td_msg_free(&m);
        const uint8_t *buf;
        uint64_t size;
        uint32_t b = open_buffer(fd, 256 * ITEM * 4, &buf, &size);
        uint64_t idx[256], seed = k * 7919 + 1;
        for (int round = 0; round < 20; round++) {
                for (int i = 0; i < 256; i++) {
                        seed = seed * 6364136223846793005u + 1442695040888963407u;
                        idx[i] = (seed >> 33) % STORE_LEN;
                }
                ck_assert_int_eq(read_records(fd, h, b, 0, idx, 256, &m), 0);
                td_msg_free(&m);
                check_dense_values(buf, idx, 256);
        }
        munmap((void *)buf, size);
        close(fd);
        return NULL;
}

START_TEST(test_many_clients) {
        int fd = td_connect_hello(&D);
        uint32_t h = create_dense(fd, "shared", "zstd");
        ck_assert_int_eq(append_dense(fd, h, 0, STORE_LEN), 0);
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
        uintptr_t k = (uintptr_t)arg;
        int fd = td_connect_hello(&D);
        td_msg m;
        ck_assert_int_eq(open_dataset(fd, "mut", O_RDONLY, false, &m), 0);
        uint32_t h = (uint32_t)td_u64(&m, "handle");
        td_msg_free(&m);
        const uint8_t *buf;
        uint64_t size;
        uint32_t b = open_buffer(fd, 64 * ITEM * 4, &buf, &size);
        uint64_t idx[64], seed = k + 17;
        int rounds = 0;
        while (!atomic_load(&mut_stop) || rounds < 10) {
                for (int i = 0; i < 64; i++) {
                        seed = seed * 6364136223846793005u + 1442695040888963407u;
                        idx[i] = (seed >> 33) % MUT_SAFE;
                }
                ck_assert_int_eq(read_records(fd, h, b, 0, idx, 64, &m), 0);
                td_msg_free(&m);
                const uint32_t *v = (const uint32_t *)buf;
                for (int i = 0; i < 64; i++)
                        for (int j = 1; j < ITEM; j++)
                                ck_assert_uint_eq(v[i * ITEM + j], v[i * ITEM] + (uint32_t)j);
                rounds++;
        }
        munmap((void *)buf, size);
        close(fd);
        return NULL;
}

START_TEST(test_mutations_under_load) {
        int fd = td_connect_hello(&D);
        uint32_t h = create_dense(fd, "mut", "zstd");
        ck_assert_int_eq(append_dense(fd, h, 0, 2000), 0);
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
                zr_wire_writer w;
                td_begin(&w, "delete", next_id++);
                zr_wire_put_u64(&w, "handle", h);
                zr_wire_put_u64s(&w, "indices", del, 40);
                ck_assert_int_eq(td_call(fd, &w, NULL, 0, &m), 0);
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
                ck_assert_int_eq(open_dataset(a, "re", O_RDWR, true, &m), 0);
                uint32_t ha = (uint32_t)td_u64(&m, "handle");
                td_msg_free(&m);
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


START_TEST(test_fd_baseline) {
        int probe = td_connect_hello(&D);
        uint32_t h = create_dense(probe, "fdstore", "raw");
        ck_assert_int_eq(append_dense(probe, h, 0, 100), 0);
        ck_assert_int_eq(simple_code(probe, "status", NULL, 0), 0); /* the append is freed */
        int base = td_fd_count(&D);
        for (int round = 0; round < 3; round++) {
                int fds[10];
                for (int i = 0; i < 10; i++) {
                        fds[i] = td_connect_hello(&D);
                        td_msg m;
                        ck_assert_int_eq(open_dataset(fds[i], "fdstore", O_RDWR, true, &m), 0);
                        td_msg_free(&m);
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
        td_msg m;
        ck_assert_int_eq(simple(probe, "status", NULL, 0, &m), 0);
        ck_assert_uint_eq(td_u64(&m, "handles"), 1);
        ck_assert_uint_eq(td_u64(&m, "shm_bytes"), 0);
        td_msg_free(&m);
        close(probe);
}
END_TEST

START_TEST(test_client_killed) {
        int probe = td_connect_hello(&D);
        uint32_t h = create_dense(probe, "k", "zstd");
        ck_assert_int_eq(append_dense(probe, h, 0, 20000), 0);
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
                        td_msg m;
                        ck_assert_int_eq(open_dataset(fd, "k", O_RDWR, true, &m), 0);
                        uint32_t ch = (uint32_t)td_u64(&m, "handle");
                        td_msg_free(&m);
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
        td_msg m;
        ck_assert_int_eq(simple(probe, "status", NULL, 0, &m), 0);
        ck_assert_uint_eq(td_u64(&m, "handles"), 1);
        ck_assert_uint_eq(td_u64(&m, "shm_bytes"), 0);
        td_msg_free(&m);
        /* a completion may still be on its way: one more round-trip per job */
        ck_assert_int_eq(simple_code(probe, "sync", "handle", h), 0);
        ck_assert_int_eq(td_fd_count(&D), base);
        second_client_served();
        close(probe);
}
END_TEST

/* ---- lifecycle ------------------------------------------------------------------------- */

static int open_loader(int fd, uint32_t h, uint64_t batch, uint64_t start, uint64_t prefetch,
                       td_msg *m);

START_TEST(test_sigterm) {
        int fd = td_connect_hello(&D);
        uint32_t h = create_dense(fd, "t", "raw");
        ck_assert_int_eq(append_dense(fd, h, 0, 1000), 0);
        int idle = td_connect_hello(&D);
        int pre = td_connect(&D); /* no HELLO yet */
        int lfd = td_connect_hello(&D); /* a loader whose slots are all held */
        td_msg lm;
        ck_assert_int_eq(open_dataset(lfd, "t", O_RDONLY, false, &lm), 0);
        uint32_t lh = (uint32_t)td_u64(&lm, "handle");
        td_msg_free(&lm);
        ck_assert_int_eq(open_loader(lfd, lh, 10, 0, 2, &lm), 0);
        td_msg_free(&lm);
        wait_clients(fd, 4);
        /* a request in flight and one queued behind it when SIGTERM lands */
        zr_wire_writer w;
        td_begin(&w, "verify", 1);
        zr_wire_put_u64(&w, "handle", h);
        ck_assert_int_eq(td_send(fd, &w, NULL, 0), 0);
        zr_wire_writer_destroy(&w);
        kill(D.pid, SIGTERM);
        ck_assert(td_wait_notify(&D, "STOPPING=1"));
        int status = td_wait_exit(&D);
        ck_assert(WIFEXITED(status));
        ck_assert_int_eq(WEXITSTATUS(status), 0);
        /* the verify was answered (it was read before the signal, or refused with
         * ZR_E_SHUTDOWN if it was not) and the connection closed */
        td_msg m;
        int r = td_recv(fd, &m);
        if (r == 0) {
                int code = td_code(&m);
                ck_assert_msg(code == 0 || code == ZR_E_SHUTDOWN, "code %d", code);
                td_msg_free(&m);
        }
        expect_closed(fd);
        expect_closed(idle);
        expect_closed(pre);
        /* the loader's client sees its batches, then LOADER_END ZR_E_SHUTDOWN */
        bool ended = false;
        for (;;) {
                int rr = td_recv(lfd, &lm);
                if (rr == -EPIPE)
                        break;
                ck_assert_int_eq(rr, 0);
                if (!strcmp(lm.kind, "loader_end")) {
                        ck_assert_uint_eq(td_u64(&lm, "code"), ZR_E_SHUTDOWN);
                        ended = true;
                } else {
                        ck_assert_str_eq(lm.kind, "batch");
                        ck_assert(!ended);
                }
                td_msg_free(&lm);
        }
        ck_assert(ended);
        close(lfd);
        /* the socket is gone, the store synced and released: it opens in-process */
        struct stat st;
        ck_assert_int_eq(stat(D.socket, &st), -1);
        int dfd = td_open_dir(path_in("t"));
        zr_dataset *ds;
        zr_error err = {0};
        ck_assert_msg(zr_dataset_open(dfd, NULL, &ds, &err) == 0, "%s", err.message);
        ck_assert_uint_eq(zr_dataset_length(ds), 1000);
        zr_dataset_close(ds, NULL);
        close(dfd);
        ck_assert(td_log_contains(&D, "shutting down (SIGTERM)"));
        ck_assert(td_log_contains(&D, "uid"));
}
END_TEST

START_TEST(test_idle_exit_and_reload) {
        td_cleanup(&D);
        char cfg[400];
        char dir[] = "/tmp/zrd-cfg-XXXXXX";
        ck_assert_ptr_nonnull(mkdtemp(dir));
        snprintf(cfg, sizeof(cfg), "%s/zrecordd.conf", dir);
        FILE *f = fopen(cfg, "we");
        fprintf(f, "log-level = info\nmax-handles = 100\n");
        fclose(f);
        char cfgarg[420];
        snprintf(cfgarg, sizeof(cfgarg), "--config=%s", cfg);
        const char *args[] = {cfgarg, "--idle-exit=1", NULL};
        td_start(&D, args);
        /* hold a client so the daemon does not leave while we reload */
        int fd = td_connect_hello(&D);
        f = fopen(cfg, "we");
        fprintf(f, "log-level = info\nmax-handles = 7\n");
        fclose(f);
        kill(D.pid, SIGHUP);
        ck_assert(td_wait_notify(&D, "READY=1")); /* after RELOADING=1 */
        int fd2 = td_connect(&D);
        zr_wire_writer w;
        td_msg m;
        td_begin(&w, "hello", 1);
        zr_wire_put_u64(&w, "min_version", 1);
        zr_wire_put_u64(&w, "max_version", 1);
        ck_assert_int_eq(td_call(fd2, &w, NULL, 0, &m), 0);
        const msgpack_object *lim;
        uint64_t v;
        ck_assert_int_eq(zr_wire_get_map(m.root, "limits", &lim, NULL), 0);
        ck_assert_int_eq(zr_wire_get_u64(lim, "handles_max", &v, NULL), 0);
        ck_assert_uint_eq(v, 7);
        td_msg_free(&m);
        close(fd2);
        close(fd);
        /* no client left: the daemon exits by itself after a second */
        int status = td_wait_exit(&D);
        ck_assert(WIFEXITED(status));
        ck_assert_int_eq(WEXITSTATUS(status), 0);
        ck_assert(td_log_contains(&D, "max_handles 100 -> 7"));
        ck_assert(td_log_contains(&D, "shutting down (idle)"));
        unlink(cfg);
        rmdir(dir);
}
END_TEST

START_TEST(test_client_limit) {
        td_cleanup(&D);
        const char *args[] = {"--max-clients=2", NULL};
        td_start(&D, args);
        int a = td_connect_hello(&D), b = td_connect_hello(&D);
        int c = td_connect(&D);
        ck_assert_int_eq(expect_closed(c), ZR_E_LIMIT);
        close(b);
        wait_clients(a, 1);
        second_client_served();
        close(a);
}
END_TEST

/* ---- loaders ----------------------------------------------------------------------- */

static int open_loader(int fd, uint32_t h, uint64_t batch, uint64_t start, uint64_t prefetch,
                       td_msg *m) {
        zr_wire_writer w;
        td_begin(&w, "loader_open", next_id++);
        zr_wire_begin_array(&w, "streams");
        zr_wire_begin_map(&w, NULL);
        zr_wire_put_u64(&w, "handle", h);
        zr_wire_end(&w);
        zr_wire_end(&w);
        zr_wire_put_str(&w, "sampler", "sequential");
        zr_wire_put_u64(&w, "batch_size", batch);
        zr_wire_put_u64(&w, "seed", 7);
        zr_wire_put_u64(&w, "start_step", start);
        zr_wire_put_u64(&w, "prefetch", prefetch);
        zr_wire_put_bool(&w, "indices", true);
        return td_call(fd, &w, NULL, 0, m);
}

/* Reads frames until a "batch" or "loader_end" event; replies are not expected. */
static void next_event(int fd, td_msg *m) {
        ck_assert_int_eq(td_recv(fd, m), 0);
        ck_assert_msg(!strcmp(m->kind, "batch") || !strcmp(m->kind, "loader_end"), "got %s",
                      m->kind);
}

static void release_slot(int fd, uint32_t loader, uint64_t ring, uint64_t slot) {
        zr_wire_writer w;
        zr_wire_writer_init(&w);
        zr_wire_writer_begin_message(&w, "release", false, 0);
        zr_wire_put_u64(&w, "loader", loader);
        zr_wire_put_u64(&w, "ring", ring);
        zr_wire_put_u64(&w, "slot", slot);
        ck_assert_int_eq(td_send(fd, &w, NULL, 0), 0);
        zr_wire_writer_destroy(&w);
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
        uint32_t h = create_dense(fd[0], "lg", "raw");
        ck_assert_int_eq(append_dense(fd[0], h, 0, 200), 0);
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
                        release_slot(fd[i], l[i], ring[i], slot[i]);
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
                release_slot(fd[1], l[1], ring, td_u64(&m, "slot"));
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
        ck_assert_int_eq(simple(fd[0], "status", NULL, 0, &m), 0);
        ck_assert_uint_eq(td_u64(&m, "loaders"), 0);
        ck_assert_uint_eq(td_u64(&m, "shm_bytes"), 0);
        td_msg_free(&m);
        close(fd[0]);
        close(fd[1]);
}
END_TEST

START_TEST(test_loader) {
        int fd = td_connect_hello(&D);
        td_msg m;
        uint32_t h = create_dense(fd, "ld", "zstd");
        ck_assert_int_eq(append_dense(fd, h, 0, 100), 0);
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
                zr_wire_writer w;
                zr_wire_writer_init(&w);
                zr_wire_writer_begin_message(&w, "release", false, 0);
                zr_wire_put_u64(&w, "loader", l);
                zr_wire_put_u64(&w, "ring", ring_id);
                zr_wire_put_u64(&w, "slot", slot);
                ck_assert_int_eq(td_send(fd, &w, NULL, 0), 0);
                zr_wire_writer_destroy(&w);
        }
        /* a release of a slot not held: a FAULT */
        zr_wire_writer w;
        zr_wire_writer_init(&w);
        zr_wire_writer_begin_message(&w, "release", false, 0);
        zr_wire_put_u64(&w, "loader", l);
        zr_wire_put_u64(&w, "ring", ring_id);
        zr_wire_put_u64(&w, "slot", 9);
        ck_assert_int_eq(td_send(fd, &w, NULL, 0), 0);
        zr_wire_writer_destroy(&w);
        for (;;) {
                ck_assert_int_eq(td_recv(fd, &m), 0);
                bool fault = !strcmp(m.kind, "fault");
                if (fault)
                        ck_assert_int_eq(td_code(&m), ZR_E_PROTO);
                else if (!strcmp(m.kind, "batch"))
                        release_slot(fd, l, td_u64(&m, "ring"), td_u64(&m, "slot"));
                td_msg_free(&m);
                if (fault)
                        break;
        }
        /* STATUS shows it */
        td_begin(&w, "status", 5000);
        ck_assert_int_eq(td_send(fd, &w, NULL, 0), 0);
        zr_wire_writer_destroy(&w);
        for (;;) {
                ck_assert_int_eq(td_recv(fd, &m), 0);
                if (!strcmp(m.kind, "ok"))
                        break;
                if (!strcmp(m.kind, "batch"))
                        release_slot(fd, l, td_u64(&m, "ring"), td_u64(&m, "slot"));
                td_msg_free(&m);
        }
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
                        release_slot(fd, l, td_u64(&m, "ring"), td_u64(&m, "slot")); /* those before the end */
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
        ck_assert_int_eq(simple(fd, "status", NULL, 0, &m), 0);
        ck_assert_uint_eq(td_u64(&m, "loaders"), 0);
        ck_assert_uint_eq(td_u64(&m, "shm_bytes"), 0);
        td_msg_free(&m);
        close(fd);
}
END_TEST

START_TEST(test_activation_and_watchdog) {
        td_cleanup(&D);
        const char *env[] = {"WATCHDOG_USEC=200000", NULL};
        td_start_env(&D, NULL, env, true);
        ck_assert(td_wait_notify(&D, "WATCHDOG=1"));
        second_client_served();
        ck_assert(td_log_contains(&D, "passed by the service manager"));
        int status = td_stop(&D, SIGTERM);
        ck_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
        /* the daemon did not make the socket, so it leaves it */
        struct stat st;
        ck_assert_int_eq(stat(D.socket, &st), 0);
}
END_TEST

static Suite *daemon_suite(void) {
        Suite *s = suite_create("zrecordd");
        TCase *tc = tcase_create("daemon");
        tcase_add_checked_fixture(tc, setup, teardown);
        tcase_set_timeout(tc, 120);
        tcase_add_test(tc, test_hello);
        tcase_add_test(tc, test_dense_requests);
        tcase_add_test(tc, test_read_errors);
        tcase_add_test(tc, test_ragged);
        tcase_add_test(tc, test_msset);
        tcase_add_test(tc, test_dict);
        tcase_add_test(tc, test_verify_corrupt);
        tcase_add_test(tc, test_bad_frames);
        tcase_add_test(tc, test_no_hello_and_strikes);
        tcase_add_test(tc, test_bad_descriptors);
        tcase_add_test(tc, test_ctrunc);
        tcase_add_test(tc, test_frame_vectors);
        tcase_add_test(tc, test_pipeline);
        tcase_add_test(tc, test_many_clients);
        tcase_add_test(tc, test_mutations_under_load);
        tcase_add_test(tc, test_reopen_while_closing);
        tcase_add_test(tc, test_fd_baseline);
        tcase_add_test(tc, test_client_killed);
        tcase_add_test(tc, test_sigterm);
        tcase_add_test(tc, test_idle_exit_and_reload);
        tcase_add_test(tc, test_client_limit);
        tcase_add_test(tc, test_loader);
        tcase_add_test(tc, test_loader_group);
        tcase_add_test(tc, test_activation_and_watchdog);
        suite_add_tcase(s, tc);
        return s;
}

int main(void) {
        SRunner *sr = srunner_create(daemon_suite());
        srunner_run_all(sr, CK_NORMAL);
        int failed = srunner_ntests_failed(sr);
        srunner_free(sr);
        return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
