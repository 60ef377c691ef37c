/* tclient.c: the daemon suites' client of zrecordd (tclient.h). */
#include "tclient.h"

#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <sys/stat.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

void td_start(td_daemon *d, const char *const *extra) {
        td_start_env(d, extra, NULL, false);
}

void td_start_env(td_daemon *d, const char *const *extra, const char *const *env,
                  bool activate) {
        tl_daemon_options o = { .args = extra, .log_level = "debug", .env = env,
                                .activate = activate, .keep_notify = true };
        int r;

        ck_assert_msg(tl_daemon_binary(), "ZRECORDD is not set");
        r = tl_daemon_start(d, &o);
        ck_assert_msg(r == 0, "zrecordd did not become ready: %s (log: %s)", strerror(-r), d->log);
}

bool td_wait_notify(td_daemon *d, const char *what) {
        return tl_daemon_wait_notify(d, what, TL_TIMEOUT_MS);
}

int td_wait_exit(td_daemon *d) {
        int status = tl_daemon_stop(d, 0);

        ck_assert_int_ne(status, -1);
        return status;
}

int td_stop(td_daemon *d, int sig) {
        return d->pid > 0 ? tl_daemon_stop(d, sig) : 0;
}

void td_cleanup(td_daemon *d) {
        if (d->pid > 0) {
                int status = tl_daemon_stop(d, SIGTERM);

                ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0,
                              "zrecordd exited with status %#x (log: %s)", status, d->log);
        }
        tl_daemon_remove(d);
}

int td_fd_count(const td_daemon *d) {
        int n = tl_daemon_fd_count(d);

        ck_assert_msg(n >= 0, "/proc/%d/fd: %s", (int)d->pid, strerror(-n));
        return n;
}

bool td_log_contains(const td_daemon *d, const char *needle) {
        return tl_daemon_log_contains(d, needle);
}

int td_connect(const td_daemon *d) {
        int fd = tl_connect(d->socket);

        ck_assert_msg(fd >= 0, "connect %s: %s", d->socket, strerror(-fd));
        return fd;
}

int td_connect_hello(const td_daemon *d) {
        int fd = -1, r = tl_connect_hello(d->socket, "tclient", &fd);

        ck_assert_msg(r == 0, "HELLO: %d", r);
        return fd;
}

int td_send_raw(int fd, const void *p, size_t len, const int *fds, unsigned nfds) {
        return tl_send_raw(fd, p, len, fds, nfds);
}

int td_send(int fd, zr_wire_writer *w, const int *fds, unsigned nfds) {
        const uint8_t *frame;
        size_t size;

        ck_assert_int_eq(zr_wire_writer_finish(w, ZR_FRAME_MAX_CEILING, &frame, &size, NULL), 0);
        return tl_send_raw(fd, frame, size, fds, nfds);
}

int td_recv(int fd, td_msg *m) {
        int r = tl_recv(fd, m, TL_TIMEOUT_MS);

        ck_assert_msg(r != -EPROTO, "an undecodable frame from the daemon");
        return r;
}

void td_msg_free(td_msg *m) {
        tl_msg_free(m);
}

uint64_t td_u64(const td_msg *m, const char *key) {
        uint64_t v = 0;
        zr_wire_error werr = { 0 };

        ck_assert_msg(zr_wire_get_u64(m->root, key, &v, &werr) == 0, "%s", werr.message);
        return v;
}

bool td_has(const td_msg *m, const char *key) {
        return zr_wire_find(m->root, key) != NULL;
}

const uint8_t *td_u64s(const td_msg *m, const char *key, size_t *ret_n) {
        const uint8_t *p = NULL;
        zr_wire_error werr = { 0 };

        ck_assert_msg(zr_wire_get_u64s(m->root, key, &p, ret_n, &werr) == 0, "%s", werr.message);
        return p;
}

int td_code(const td_msg *m) {
        int code = tl_code(m);

        ck_assert_msg(code >= 0, "kind %s", m->kind);
        return code;
}

void td_message(const td_msg *m, char *msg, size_t size) {
        const char *s = "";
        size_t len = 0;

        zr_wire_get_str(m->root, "message", &s, &len, NULL);
        snprintf(msg, size, "%.*s", (int)len, s);
}

int td_closed_with(int fd, char *msg, size_t size) {
        int code = 0;

        for (;;) {
                td_msg m;
                int r = td_recv(fd, &m);
                if (r == -EPIPE)
                        break;
                ck_assert_msg(r == 0, "expected frames and EOF, got %s", strerror(-r));
                code = td_code(&m);
                if (msg)
                        td_message(&m, msg, size);
                td_msg_free(&m);
        }
        close(fd);
        return code;
}

void td_begin(zr_wire_writer *w, const char *kind, uint64_t id) {
        tl_begin(w, kind, id);
}

int td_call(int fd, zr_wire_writer *w, const int *fds, unsigned nfds, td_msg *m) {
        int r;

        ck_assert_int_eq(td_send(fd, w, fds, nfds), 0);
        zr_wire_writer_destroy(w);
        r = td_recv(fd, m);
        ck_assert_msg(r == 0, "no reply: %s", strerror(-r));
        return td_code(m);
}

int td_call_past_events(int fd, zr_wire_writer *w, const int *fds, unsigned nfds, td_msg *m) {
        int r = tl_call(fd, w, fds, nfds, m);

        ck_assert_msg(r != -EPROTO, "an undecodable frame from the daemon");
        ck_assert_msg(r >= 0 || m->kind[0], "no reply: %s", strerror(-r));
        return td_code(m);
}

int td_memfd(const void *p, size_t len, bool seal) {
        int fd = tl_memfd("td", p, len, seal);

        ck_assert_msg(fd >= 0, "memfd: %s", strerror(-fd));
        return fd;
}

int td_open_dir(const char *path) {
        int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);

        ck_assert_msg(fd >= 0, "open %s: %s", path, strerror(errno));
        return fd;
}

uint64_t td_next_id(void) {
        static uint64_t id = 1000000;

        return id++;
}

void td_begin_hello(zr_wire_writer *w, uint64_t id, uint64_t min, uint64_t max) {
        tl_begin(w, "hello", id);
        zr_wire_put_u64(w, "min_version", min);
        zr_wire_put_u64(w, "max_version", max);
}

uint32_t td_create_dense(int fd, const char *path, const char *dtype, const uint64_t *shape,
                         unsigned ndim, const char *codec) {
        zr_wire_writer w;
        td_msg m;
        uint32_t h;
        int dfd;

        ck_assert_msg(mkdir(path, 0755) == 0, "mkdir %s: %s", path, strerror(errno));
        dfd = td_open_dir(path);
        tl_begin(&w, "dataset_create", td_next_id());
        zr_wire_begin_map(&w, "schema");
        zr_wire_put_str(&w, "kind", "dense");
        zr_wire_put_str(&w, "dtype", dtype);
        zr_wire_put_uint_array(&w, "item_shape", shape, ndim);
        zr_wire_put_str(&w, "codec", codec);
        zr_wire_end(&w);
        ck_assert_int_eq(td_call(fd, &w, &dfd, 1, &m), 0);
        close(dfd);
        h = (uint32_t)td_u64(&m, "handle");
        ck_assert_uint_eq(td_u64(&m, "length"), 0);
        td_msg_free(&m);
        return h;
}

void td_put_dense(zr_wire_writer *w, const char *dtype, const uint64_t *shape, unsigned ndim,
                  uint64_t count, uint64_t record_bytes) {
        zr_wire_put_str(w, "dtype", dtype);
        zr_wire_put_u64(w, "count", count);
        zr_wire_put_u64(w, "record_bytes", record_bytes);
        zr_wire_put_uint_array(w, "item_shape", shape, ndim);
}

int td_append(int fd, uint32_t h, const char *dtype, const uint64_t *shape, unsigned ndim,
              uint64_t record_bytes, const void *data, uint64_t count, td_msg *m) {
        int mfd = td_memfd(data, count * record_bytes, true);
        zr_wire_writer w;
        td_msg reply;
        int code;

        tl_begin(&w, "append", td_next_id());
        zr_wire_put_u64(&w, "handle", h);
        td_put_dense(&w, dtype, shape, ndim, count, record_bytes);
        code = td_call(fd, &w, &mfd, 1, m ? m : &reply);
        close(mfd);
        if (!m)
                td_msg_free(&reply);
        return code;
}

void td_begin_loader_open(zr_wire_writer *w, uint64_t id, uint32_t h, const char *sampler,
                          uint64_t batch, uint64_t seed, uint64_t start, uint64_t prefetch) {
        tl_begin(w, "loader_open", id);
        tl_put_loader_open(w, h, sampler, batch, seed, start, prefetch);
}

void td_release(int fd, uint64_t loader, uint64_t ring, uint64_t slot) {
        zr_wire_writer w;

        zr_wire_writer_init(&w);
        zr_wire_writer_begin_message(&w, "release", false, 0);
        zr_wire_put_u64(&w, "loader", loader);
        zr_wire_put_u64(&w, "ring", ring);
        zr_wire_put_u64(&w, "slot", slot);
        ck_assert_int_eq(td_send(fd, &w, NULL, 0), 0);
        zr_wire_writer_destroy(&w);
}
