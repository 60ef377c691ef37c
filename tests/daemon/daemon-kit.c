/* daemon-kit.c: what the files of the daemon suite share (daemon-kit.h). */
#include "daemon-kit.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

td_daemon D;
uint64_t next_id = 100;

void setup(void) {
        td_start(&D, NULL);
}

void teardown(void) {
        td_cleanup(&D);
}

char *path_in(const char *name) {
        /* per thread: the many-clients test opens stores from 32 threads */
        static _Thread_local char buf[4][400];
        static _Thread_local int k;
        k = (k + 1) % 4;
        snprintf(buf[k], sizeof(buf[k]), "%s/%s", D.dir, name);
        return buf[k];
}

uint32_t create_dense(int fd, const char *name, const char *codec) {
        uint64_t shape[] = {ITEM};
        return td_create_dense(fd, path_in(name), "<u4", shape, 1, codec);
}

uint32_t dense_store(int fd, const char *name, const char *codec, uint64_t n) {
        uint32_t h = create_dense(fd, name, codec);
        ck_assert_int_eq(append_dense(fd, h, 0, n), 0);
        return h;
}

uint32_t create_ragged(int fd, const char *name) {
        ck_assert_int_eq(mkdir(path_in(name), 0755), 0);
        int dfd = td_open_dir(path_in(name));
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

int append_dense(int fd, uint32_t h, uint64_t first, uint64_t count) {
        uint32_t *data = calloc(count * ITEM + 1, sizeof(uint32_t));
        uint64_t shape[] = {ITEM};
        td_msg m;
        for (uint64_t i = 0; i < count; i++)
                for (int j = 0; j < ITEM; j++)
                        data[i * ITEM + j] = (uint32_t)((first + i) * ITEM + j);
        int code = td_append(fd, h, "<u4", shape, 1, ITEM * 4, data, count, &m);
        free(data);
        if (code == 0) {
                ck_assert_uint_eq(td_u64(&m, "first"), first);
                ck_assert_uint_eq(td_u64(&m, "count"), count);
                ck_assert_uint_eq(td_u64(&m, "length"), first + count);
        }
        td_msg_free(&m);
        return code;
}

uint32_t open_buffer(int fd, uint64_t bytes, const uint8_t **ret_map, uint64_t *ret_size) {
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

int read_records(int fd, uint32_t h, uint32_t buf, uint64_t offset, const uint64_t *idx,
                        size_t n, td_msg *m) {
        zr_wire_writer w;
        td_begin(&w, "read", next_id++);
        zr_wire_put_u64(&w, "handle", h);
        zr_wire_put_u64(&w, "buffer", buf);
        zr_wire_put_u64(&w, "offset", offset);
        zr_wire_put_u64s(&w, "indices", idx, n);
        return td_call(fd, &w, NULL, 0, m);
}

void check_dense_values(const uint8_t *p, const uint64_t *idx, size_t n) {
        const uint32_t *v = (const uint32_t *)p;
        for (size_t i = 0; i < n; i++)
                for (int j = 0; j < ITEM; j++)
                        ck_assert_uint_eq(v[i * ITEM + j], idx[i] * ITEM + (uint64_t)j);
}

int simple(int fd, const char *kind, const char *key, uint64_t v, td_msg *m) {
        zr_wire_writer w;
        td_begin(&w, kind, next_id++);
        if (key)
                zr_wire_put_u64(&w, key, v);
        return td_call(fd, &w, NULL, 0, m);
}

int simple_code(int fd, const char *kind, const char *key, uint64_t v) {
        td_msg m;
        int code = simple(fd, kind, key, v, &m);
        td_msg_free(&m);
        return code;
}

int open_dataset(int fd, const char *name, int proof_mode, bool writable, td_msg *m) {
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

void second_client_served(void) {
        int fd = td_connect_hello(&D);
        td_msg m;
        ck_assert_int_eq(simple(fd, "status", NULL, 0, &m), 0);
        ck_assert_uint_ge(td_u64(&m, "clients"), 1);
        td_msg_free(&m);
        close(fd);
}

int expect_closed(int fd) {
        return td_closed_with(fd, NULL, 0);
}

void wait_clients(int fd, uint64_t n) {
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

int open_loader(int fd, uint32_t h, uint64_t batch, uint64_t start, uint64_t prefetch,
                td_msg *m) {
        zr_wire_writer w;

        td_begin_loader_open(&w, next_id++, h, "sequential", batch, 7, start, prefetch);
        zr_wire_put_bool(&w, "indices", true);
        return td_call(fd, &w, NULL, 0, m);
}

int delete_records(int fd, uint32_t h, const uint64_t *idx, size_t n, td_msg *m) {
        zr_wire_writer w;

        td_begin(&w, "delete", next_id++);
        zr_wire_put_u64(&w, "handle", h);
        zr_wire_put_u64s(&w, "indices", idx, n);
        return td_call(fd, &w, NULL, 0, m);
}

uint32_t open_handle(int fd, const char *name, int proof_mode, bool writable) {
        td_msg m;
        uint32_t h;

        ck_assert_int_eq(open_dataset(fd, name, proof_mode, writable, &m), 0);
        h = (uint32_t)td_u64(&m, "handle");
        td_msg_free(&m);
        return h;
}

void expect_no_loaders(int fd) {
        td_msg m;

        ck_assert_int_eq(simple(fd, "status", NULL, 0, &m), 0);
        ck_assert_uint_eq(td_u64(&m, "loaders"), 0);
        ck_assert_uint_eq(td_u64(&m, "shm_bytes"), 0);
        td_msg_free(&m);
}

void expect_length(int fd, uint32_t h, uint64_t length) {
        td_msg m;

        ck_assert_int_eq(simple(fd, "info", "handle", h, &m), 0);
        ck_assert_uint_eq(td_u64(&m, "length"), length);
        td_msg_free(&m);
}
