/* test-conn.c: libzrc's connection against a scripted fake daemon.
 *
 * A thread of the test plays the daemon on a socket in a temporary directory,
 * byte by byte, to do what a real daemon should never do or does only rarely:
 * events between a request and its reply, a reply with the wrong id, a reply
 * with descriptors it must not carry, more descriptors than a frame may carry
 * (MSG_CTRUNC), malformed bodies, frames over the limit, a FAULT and a hang-up,
 * an unknown event kind, an unsupported version. Each must end in the right
 * error code, and a broken connection must fail every later call at once with
 * the first reason. A RING event's memfd is kept with its queued event and
 * closed when the event is dropped. A loader is driven through rings shared
 * by a group: batches from its own ring and from rings passed by RING events,
 * RING_CLOSE, RELEASE of the right (ring, slot), and every bad ring event the
 * library must refuse without unmapping what the caller holds; no descriptor
 * or mapping outlives the loader. No zrecordd needed.
 */
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "wire.h"
#include "zrc-private.h"

typedef void (*script_fn)(int fd);

typedef struct fake {
        char dir[64];
        char path[128];
        int listen_fd;
        pthread_t thread;
        script_fn script;
        uint32_t version;   /* in the HELLO reply */
        bool loader;        /* grant the "loader" feature */
} fake;

static int send_raw(int fd, const void *p, size_t n, const int *fds, size_t n_fds) {
        union {
                struct cmsghdr h;
                char buf[CMSG_SPACE(128 * sizeof(int))];
        } cmsg;
        struct iovec iov = { .iov_base = (void *)p, .iov_len = n };
        struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1 };

        if (n_fds) {
                memset(&cmsg, 0, sizeof(cmsg));
                msg.msg_control = cmsg.buf;
                msg.msg_controllen = CMSG_SPACE(n_fds * sizeof(int));
                cmsg.h.cmsg_level = SOL_SOCKET;
                cmsg.h.cmsg_type = SCM_RIGHTS;
                cmsg.h.cmsg_len = CMSG_LEN(n_fds * sizeof(int));
                memcpy(CMSG_DATA(&cmsg.h), fds, n_fds * sizeof(int));
        }
        return sendmsg(fd, &msg, MSG_NOSIGNAL) == (ssize_t)n ? 0 : -1;
}

static void send_writer(int fd, zr_wire_writer *w, const int *fds, size_t n_fds) {
        const uint8_t *frame;
        size_t size;

        if (zr_wire_writer_finish(w, ZR_FRAME_MAX_CEILING, &frame, &size, NULL) == 0)
                send_raw(fd, frame, size, fds, n_fds);
        zr_wire_writer_reset(w);
}

/* Reads one request; returns its id (0 on EOF). */
static uint64_t read_request(int fd) {
        uint8_t hdr[4], *body;
        uint32_t len;
        zr_wire_body *b = NULL;
        uint64_t id = 0;

        if (recv(fd, hdr, 4, MSG_WAITALL) != 4)
                return 0;
        len = (uint32_t)hdr[0] | (uint32_t)hdr[1] << 8 | (uint32_t)hdr[2] << 16 | (uint32_t)hdr[3] << 24;
        body = malloc(len);
        if (recv(fd, body, len, MSG_WAITALL) == (ssize_t)len &&
            zr_wire_body_decode(body, len, NULL, &b, NULL) == 0)
                (void)zr_wire_get_u64(zr_wire_body_root(b), "id", &id, NULL);
        zr_wire_body_free(b);
        free(body);
        return id;
}

static void put_status_ok(zr_wire_writer *w, uint64_t id) {
        static const char *const counters[] = { "uptime_ms", "clients", "handles", "shm_bytes",
                                                "loaders", "batches", "gathers", "hits",
                                                "misses", "bytes", "evictions" };

        zr_wire_writer_begin_message(w, "ok", true, id);
        zr_wire_put_str(w, "daemon", "fake 1");
        for (size_t i = 0; i < sizeof(counters) / sizeof(counters[0]); i++)
                zr_wire_put_u64(w, counters[i], 7);
        zr_wire_begin_map(w, "cache");
        zr_wire_put_u64(w, "budget", 1);
        zr_wire_put_u64(w, "bytes", 0);
        zr_wire_put_u64(w, "entries", 0);
        zr_wire_end(w);
        zr_wire_begin_array(w, "per_loader");
        zr_wire_end(w);
}

static void *fake_run(void *arg) {
        fake *f = arg;
        zr_wire_writer w;
        uint64_t id;
        int fd = accept4(f->listen_fd, NULL, NULL, SOCK_CLOEXEC);

        if (fd < 0)
                return NULL;
        zr_wire_writer_init(&w);
        id = read_request(fd);
        zr_wire_writer_begin_message(&w, "ok", true, id);
        zr_wire_put_u64(&w, "version", f->version);
        zr_wire_begin_array(&w, "features");
        zr_wire_put_str(&w, NULL, "verify");
        if (f->loader)
                zr_wire_put_str(&w, NULL, "loader");
        zr_wire_end(&w);
        zr_wire_put_str(&w, "daemon", "fake 1");
        zr_wire_begin_map(&w, "limits");
        zr_wire_put_u64(&w, "frame_max", 65536);
        zr_wire_put_u64(&w, "handles_max", 8);
        zr_wire_put_u64(&w, "shm_bytes_max", 1 << 20);
        zr_wire_put_u64(&w, "loaders_max", 1);
        zr_wire_put_u64(&w, "pipeline_max", 4);
        zr_wire_put_u64(&w, "fds_per_frame_max", 64);
        zr_wire_put_u64(&w, "streams_max", 32);
        zr_wire_put_u64(&w, "prefetch_max", 4);
        zr_wire_end(&w);
        send_writer(fd, &w, NULL, 0);
        zr_wire_writer_destroy(&w);
        if (f->script)
                f->script(fd);
        close(fd);
        return NULL;
}

static void fake_start_ex(fake *f, script_fn script, uint32_t version, bool loader) {
        struct sockaddr_un sa = { .sun_family = AF_UNIX };

        memset(f, 0, sizeof(*f));
        f->loader = loader;
        snprintf(f->dir, sizeof(f->dir), "/tmp/zrc-fake-XXXXXX");
        ck_assert_ptr_nonnull(mkdtemp(f->dir));
        snprintf(f->path, sizeof(f->path), "%s/sock", f->dir);
        memcpy(sa.sun_path, f->path, strlen(f->path) + 1);
        f->listen_fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        ck_assert_int_ge(f->listen_fd, 0);
        ck_assert_int_eq(bind(f->listen_fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
        ck_assert_int_eq(listen(f->listen_fd, 4), 0);
        f->script = script;
        f->version = version;
        ck_assert_int_eq(pthread_create(&f->thread, NULL, fake_run, f), 0);
}

static void fake_start(fake *f, script_fn script, uint32_t version) {
        fake_start_ex(f, script, version, false);
}

static void fake_stop(fake *f) {
        pthread_join(f->thread, NULL);
        close(f->listen_fd);
        unlink(f->path);
        rmdir(f->dir);
}

static int count_fds(void) {
        DIR *d = opendir("/proc/self/fd");
        int n = 0;

        while (readdir(d))
                n++;
        closedir(d);
        return n;
}

/* ---- scripts ----------------------------------------------------------- */

static void script_events_then_reply(int fd) {
        zr_wire_writer w;
        uint64_t id = read_request(fd);

        zr_wire_writer_init(&w);
        /* a BATCH, a LOADER_END, an event kind from the future, a FAULT that
         * does not end the connection, then the reply */
        zr_wire_writer_begin_message(&w, "batch", false, 0);
        zr_wire_put_u64(&w, "loader", 3);
        zr_wire_put_u64(&w, "ring", 1);
        zr_wire_put_u64(&w, "slot", 0);
        zr_wire_put_u64(&w, "step", 10);
        zr_wire_begin_array(&w, "streams");
        zr_wire_begin_map(&w, NULL);
        zr_wire_put_u64(&w, "offset", 0);
        zr_wire_put_u64(&w, "bytes", 8);
        zr_wire_end(&w);
        zr_wire_end(&w);
        send_writer(fd, &w, NULL, 0);
        zr_wire_writer_begin_message(&w, "loader_end", false, 0);
        zr_wire_put_u64(&w, "loader", 3);
        zr_wire_put_u64(&w, "step", 11);
        zr_wire_put_u64(&w, "code", ZR_E_STALE);
        zr_wire_put_str(&w, "message", "store changed");
        send_writer(fd, &w, NULL, 0);
        zr_wire_writer_begin_message(&w, "weather_report", false, 0);
        zr_wire_put_str(&w, "sky", "clear");
        send_writer(fd, &w, NULL, 0);
        zr_wire_writer_begin_message(&w, "fault", false, 0);
        zr_wire_put_u64(&w, "code", ZR_E_PROTO);
        zr_wire_put_str(&w, "message", "a bad RELEASE");
        send_writer(fd, &w, NULL, 0);
        put_status_ok(&w, id);
        send_writer(fd, &w, NULL, 0);
        /* a second request: an error reply with every optional field */
        id = read_request(fd);
        zr_wire_writer_begin_message(&w, "error", true, id);
        zr_wire_put_u64(&w, "code", ZR_E_RANGE);
        zr_wire_put_str(&w, "name", "ZR_E_RANGE");
        zr_wire_put_str(&w, "message", "index 12 is out of range: the length is 3");
        zr_wire_put_u64(&w, "index", 12);
        send_writer(fd, &w, NULL, 0);
        read_request(fd); /* until the client hangs up */
        zr_wire_writer_destroy(&w);
}

START_TEST(test_events_between) {
        fake f;
        zrc_conn *c = NULL;
        zrc_status *st = NULL;

        fake_start(&f, script_events_then_reply, 1);
        ck_assert_int_eq(zrc_connect(f.path, &c, NULL), 0);
        ck_assert_str_eq(zrc_daemon_name(c), "fake 1");
        ck_assert_uint_eq(zrc_limits_get(c)->frame_max, 65536);
        ck_assert(zrc_has_feature(c, "verify"));
        ck_assert(!zrc_has_feature(c, "dict"));
        ck_assert_int_eq(zrc_status_query(c, &st), 0);
        ck_assert_uint_eq(st->clients, 7);
        zrc_status_free(st);
        /* the two loader events are kept for the loader API, in order */
        ck_assert_uint_eq(c->n_events, 2);
        ck_assert_int_eq(c->events_head->kind, ZR_MSG_BATCH);
        ck_assert_int_eq(c->events_head->next->kind, ZR_MSG_LOADER_END);
        ck_assert_int_eq(c->fault.code, ZR_E_PROTO);
        /* an error reply: code, name, message, index */
        ck_assert_int_eq(zrc_status_query(c, &st), -ZR_E_RANGE);
        ck_assert_str_eq(zrc_last_error(c)->name, "ZR_E_RANGE");
        ck_assert(strstr(zrc_last_error(c)->message, "index 12"));
        ck_assert(zrc_last_error(c)->has_index);
        ck_assert_uint_eq(zrc_last_error(c)->index, 12);
        ck_assert(!zrc_last_error(c)->has_needed);
        /* a feature the daemon lacks is refused without a request */
        {
                zrc_set *set = NULL;

                ck_assert_int_eq(zrc_set_open(c, "/", 0, &set), -ZR_E_UNKNOWN);
                ck_assert(strstr(zrc_last_error(c)->message, "msset"));
        }
        zrc_disconnect(c);
        fake_stop(&f);
}
END_TEST

static void script_wrong_id(int fd) {
        zr_wire_writer w;
        uint64_t id = read_request(fd);

        zr_wire_writer_init(&w);
        put_status_ok(&w, id + 1);
        send_writer(fd, &w, NULL, 0);
        zr_wire_writer_destroy(&w);
        read_request(fd);
}

START_TEST(test_wrong_id) {
        fake f;
        zrc_conn *c = NULL;
        zrc_status *st = NULL;

        fake_start(&f, script_wrong_id, 1);
        ck_assert_int_eq(zrc_connect(f.path, &c, NULL), 0);
        ck_assert_int_eq(zrc_status_query(c, &st), -ZR_E_PROTO);
        ck_assert(strstr(zrc_last_error(c)->message, "does not answer"));
        /* broken for good: the next call fails at once with the same reason */
        ck_assert_int_eq(zrc_status_query(c, &st), -ZR_E_PROTO);
        ck_assert(strstr(zrc_last_error(c)->message, "does not answer"));
        zrc_disconnect(c);
        fake_stop(&f);
}
END_TEST

static void script_unexpected_fd(int fd) {
        zr_wire_writer w;
        uint64_t id = read_request(fd);
        int p[2];

        ck_assert_int_eq(pipe2(p, O_CLOEXEC), 0);
        zr_wire_writer_init(&w);
        put_status_ok(&w, id);
        send_writer(fd, &w, p, 2);
        zr_wire_writer_destroy(&w);
        close(p[0]);
        close(p[1]);
        read_request(fd);
}

START_TEST(test_unexpected_fds) {
        fake f;
        zrc_conn *c = NULL;
        zrc_status *st = NULL;
        int before;

        fake_start(&f, script_unexpected_fd, 1);
        ck_assert_int_eq(zrc_connect(f.path, &c, NULL), 0);
        before = count_fds();
        ck_assert_int_eq(zrc_status_query(c, &st), -ZR_E_BAD_FD);
        zrc_disconnect(c);
        fake_stop(&f);
        /* both descriptors closed: counted once the fake has closed its own
         * (the client's socket, the fake's and its listening one are gone) */
        ck_assert_int_eq(count_fds(), before - 3);
}
END_TEST

static void script_ctrunc(int fd) {
        zr_wire_writer w;
        uint64_t id = read_request(fd);
        int fds[80], p[2];

        ck_assert_int_eq(pipe2(p, O_CLOEXEC), 0);
        for (int i = 0; i < 80; i++)
                fds[i] = p[i % 2];
        zr_wire_writer_init(&w);
        put_status_ok(&w, id);
        send_writer(fd, &w, fds, 80); /* more than a frame may carry */
        zr_wire_writer_destroy(&w);
        close(p[0]);
        close(p[1]);
        read_request(fd);
}

START_TEST(test_ctrunc) {
        fake f;
        zrc_conn *c = NULL;
        zrc_status *st = NULL;
        int before;

        fake_start(&f, script_ctrunc, 1);
        ck_assert_int_eq(zrc_connect(f.path, &c, NULL), 0);
        before = count_fds();
        ck_assert_int_eq(zrc_status_query(c, &st), -ZR_E_BAD_FD);
        ck_assert(strstr(zrc_last_error(c)->message, "MSG_CTRUNC"));
        zrc_disconnect(c);
        fake_stop(&f);
        ck_assert_int_eq(count_fds(), before - 3); /* as in test_unexpected_fds */
}
END_TEST

static void script_bad_body(int fd) {
        /* a 5-byte array32 header claiming 2^32-1 elements */
        static const uint8_t frame[] = { 5, 0, 0, 0, 0xdd, 0xff, 0xff, 0xff, 0xff };

        read_request(fd);
        send_raw(fd, frame, sizeof(frame), NULL, 0);
        read_request(fd);
}

START_TEST(test_bad_body) {
        fake f;
        zrc_conn *c = NULL;
        zrc_status *st = NULL;

        fake_start(&f, script_bad_body, 1);
        ck_assert_int_eq(zrc_connect(f.path, &c, NULL), 0);
        ck_assert_int_eq(zrc_status_query(c, &st), -ZR_E_PROTO);
        ck_assert(strstr(zrc_last_error(c)->message, "malformed"));
        zrc_disconnect(c);
        fake_stop(&f);
}
END_TEST

static void script_huge_frame(int fd) {
        static const uint8_t header[] = { 0, 0, 2, 0 }; /* 128 KiB > frame_max 64 KiB */

        read_request(fd);
        send_raw(fd, header, sizeof(header), NULL, 0);
        read_request(fd);
}

START_TEST(test_huge_frame) {
        fake f;
        zrc_conn *c = NULL;
        zrc_status *st = NULL;

        fake_start(&f, script_huge_frame, 1);
        ck_assert_int_eq(zrc_connect(f.path, &c, NULL), 0);
        ck_assert_int_eq(zrc_status_query(c, &st), -ZR_E_LIMIT);
        zrc_disconnect(c);
        fake_stop(&f);
}
END_TEST

static void script_fault_hangup(int fd) {
        zr_wire_writer w;

        read_request(fd);
        zr_wire_writer_init(&w);
        zr_wire_writer_begin_message(&w, "fault", false, 0);
        zr_wire_put_u64(&w, "code", ZR_E_SHUTDOWN);
        zr_wire_put_str(&w, "message", "the daemon is shutting down");
        send_writer(fd, &w, NULL, 0);
        zr_wire_writer_destroy(&w);
        /* and hang up */
}

START_TEST(test_fault_hangup) {
        fake f;
        zrc_conn *c = NULL;
        zrc_status *st = NULL;

        fake_start(&f, script_fault_hangup, 1);
        ck_assert_int_eq(zrc_connect(f.path, &c, NULL), 0);
        ck_assert_int_eq(zrc_status_query(c, &st), -ZR_E_SHUTDOWN);
        ck_assert_str_eq(zrc_last_error(c)->name, "ZR_E_SHUTDOWN");
        ck_assert(strstr(zrc_last_error(c)->message, "shutting down"));
        zrc_disconnect(c);
        fake_stop(&f);
}
END_TEST

START_TEST(test_hangup_mid_frame) {
        fake f;
        zrc_conn *c = NULL;
        zrc_status *st = NULL;

        /* the fake answers HELLO, then closes without a reply */
        fake_start(&f, NULL, 1);
        ck_assert_int_eq(zrc_connect(f.path, &c, NULL), 0);
        fake_stop(&f);
        ck_assert_int_lt(zrc_status_query(c, &st), 0);
        ck_assert(zrc_last_error(c)->code == ECONNRESET || zrc_last_error(c)->code == EPIPE);
        zrc_disconnect(c);
}
END_TEST

START_TEST(test_bad_version) {
        fake f;
        zrc_conn *c = NULL;
        zrc_error e = { 0 };

        fake_start(&f, NULL, 2);
        ck_assert_int_eq(zrc_connect(f.path, &c, &e), -ZR_E_VERSION);
        ck_assert_str_eq(e.name, "ZR_E_VERSION");
        fake_stop(&f);
}
END_TEST

START_TEST(test_socket_resolution) {
        zrc_conn *c = NULL;
        zrc_error e = { 0 };
        char xdg[] = "/tmp/zrc-xdg-XXXXXX";
        char longpath[300];

        /* no explicit path and no $ZRECORD_SOCKET: the defaults are tried, the
         * user's own first, and all are named in the message */
        ck_assert_ptr_nonnull(mkdtemp(xdg));
        unsetenv("ZRECORD_SOCKET");
        setenv("XDG_RUNTIME_DIR", xdg, 1);
        for (int k = 0; k < 2; k++) {
                /* the second time, an empty $ZRECORD_SOCKET counts as unset */
                if (k == 1)
                        setenv("ZRECORD_SOCKET", "", 1);
                if (zrc_connect(NULL, &c, &e) == 0) {
                        /* a system or private daemon runs on this machine:
                         * it must be at a later default path */
                        ck_assert(strcmp(zrc_socket_path(c), "/run/zrecord/zrecordd.sock") == 0 ||
                                  strncmp(zrc_socket_path(c), "/tmp/zrecord-", 13) == 0);
                        zrc_disconnect(c);
                        continue;
                }
                ck_assert(strstr(e.message, xdg));
                ck_assert(strstr(e.message, "/run/zrecord/zrecordd.sock"));
                ck_assert(strstr(e.message, "/tmp/zrecord-"));
        }
        rmdir(xdg);
        /* a path longer than sun_path */
        memset(longpath, 'a', sizeof(longpath) - 1);
        longpath[0] = '/';
        longpath[sizeof(longpath) - 1] = 0;
        ck_assert_int_eq(zrc_connect(longpath, &c, &e), -ENAMETOOLONG);
}
END_TEST

/* ---- events with descriptors ------------------------------------------ */

/* The fake's rings: a memfd named "fake-ring-ID" of `size` bytes whose slot s
 * (4096 bytes each) is filled with the byte base + s. */
static int fake_ring(uint32_t id, uint64_t size, uint8_t base) {
        char name[32];
        uint8_t page[4096];
        int fd;

        snprintf(name, sizeof(name), "fake-ring-%u", id);
        fd = memfd_create(name, MFD_CLOEXEC);
        if (fd < 0 || ftruncate(fd, (off_t)size) < 0)
                abort();
        for (uint64_t s = 0; (s + 1) * 4096 <= size; s++) {
                memset(page, base + (int)s, sizeof(page));
                if (pwrite(fd, page, sizeof(page), (off_t)(s * 4096)) != (ssize_t)sizeof(page))
                        abort();
        }
        return fd;
}

/* How many mappings of the fake's ring `id` this process has. */
static int ring_maps(uint32_t id) {
        char want[40], line[512];
        FILE *f = fopen("/proc/self/maps", "re");
        int n = 0;

        ck_assert_ptr_nonnull(f);
        snprintf(want, sizeof(want), "/memfd:fake-ring-%u ", id);
        while (fgets(line, sizeof(line), f))
                if (strstr(line, want))
                        n++;
        fclose(f);
        return n;
}

static void send_ring(int fd, zr_wire_writer *w, uint32_t loader, uint32_t ring, uint64_t slots,
                      uint64_t slot_bytes, uint64_t ring_bytes, int memfd) {
        zr_wire_writer_begin_message(w, "ring", false, 0);
        zr_wire_put_u64(w, "loader", loader);
        zr_wire_put_u64(w, "ring", ring);
        zr_wire_put_u64(w, "slots", slots);
        zr_wire_put_u64(w, "slot_bytes", slot_bytes);
        zr_wire_put_u64(w, "ring_bytes", ring_bytes);
        send_writer(fd, w, memfd >= 0 ? &memfd : NULL, memfd >= 0 ? 1 : 0);
}

static void send_ring_close(int fd, zr_wire_writer *w, uint32_t loader, uint32_t ring) {
        zr_wire_writer_begin_message(w, "ring_close", false, 0);
        zr_wire_put_u64(w, "loader", loader);
        zr_wire_put_u64(w, "ring", ring);
        send_writer(fd, w, NULL, 0);
}

/* A BATCH of one dense stream of 64 bytes at the start of (ring, slot). */
static void send_batch(int fd, zr_wire_writer *w, uint32_t loader, uint32_t ring, uint32_t slot,
                       uint64_t step, const int *fds, size_t n_fds) {
        zr_wire_writer_begin_message(w, "batch", false, 0);
        zr_wire_put_u64(w, "loader", loader);
        zr_wire_put_u64(w, "ring", ring);
        zr_wire_put_u64(w, "slot", slot);
        zr_wire_put_u64(w, "step", step);
        zr_wire_begin_array(w, "streams");
        zr_wire_begin_map(w, NULL);
        zr_wire_put_u64(w, "offset", (uint64_t)slot * 4096);
        zr_wire_put_u64(w, "bytes", 64);
        zr_wire_end(w);
        zr_wire_end(w);
        send_writer(fd, w, fds, n_fds);
}

static void fake_loader_open(int fd, zr_wire_writer *w, uint32_t loader, uint64_t slots);
static void fake_loader_close(int fd, zr_wire_writer *w, int in_flight);

/* The fake closes every descriptor it made before it sends the message the
 * client waits for, so that the client's counts of its own never race. */
static void script_event_fds(int fd) {
        zr_wire_writer w;
        uint64_t id = read_request(fd);
        int ring = fake_ring(7, 8192, 0x40), p[2];

        ck_assert_int_eq(pipe2(p, O_CLOEXEC), 0);
        zr_wire_writer_init(&w);
        /* a RING (its memfd kept), a BATCH with a stray descriptor (closed), a
         * RING_CLOSE, then the reply */
        send_ring(fd, &w, 3, 7, 2, 4096, 8192, ring);
        send_batch(fd, &w, 3, 7, 0, 0, p, 1);
        send_ring_close(fd, &w, 3, 7);
        close(ring);
        close(p[0]);
        close(p[1]);
        put_status_ok(&w, id);
        send_writer(fd, &w, NULL, 0);
        /* a loader that gets handle 3, closed at once: its events go */
        fake_loader_open(fd, &w, 3, 1);
        fake_loader_close(fd, &w, -2);
        /* a RING for loader 4, left in the queue */
        id = read_request(fd);
        ring = fake_ring(8, 4096, 0x40);
        send_ring(fd, &w, 4, 8, 1, 4096, 4096, ring);
        close(ring);
        put_status_ok(&w, id);
        send_writer(fd, &w, NULL, 0);
        /* a RING with two descriptors breaks the connection */
        id = read_request(fd);
        ring = fake_ring(9, 4096, 0x40);
        ck_assert_int_eq(pipe2(p, O_CLOEXEC), 0);
        {
                int two[2] = { ring, p[0] };

                zr_wire_writer_begin_message(&w, "ring", false, 0);
                zr_wire_put_u64(&w, "loader", 4);
                zr_wire_put_u64(&w, "ring", 9);
                zr_wire_put_u64(&w, "slots", 1);
                zr_wire_put_u64(&w, "slot_bytes", 4096);
                zr_wire_put_u64(&w, "ring_bytes", 4096);
                send_writer(fd, &w, two, 2);
        }
        put_status_ok(&w, id);
        send_writer(fd, &w, NULL, 0);
        zr_wire_writer_destroy(&w);
        close(ring);
        close(p[0]);
        close(p[1]);
        read_request(fd);
}

static void fake_dataset(zrc_conn *c, zrc_dataset *d);

START_TEST(test_event_fds) {
        fake f;
        zrc_conn *c = NULL;
        zrc_status *st = NULL;
        zrc_dataset d, *dp = &d;
        zrc_loader *l = NULL;
        zrc_loader_options o = { .batch_size = 8 };
        conn_event *e;
        int before, flags;

        fake_start_ex(&f, script_event_fds, 1, true);
        ck_assert_int_eq(zrc_connect(f.path, &c, NULL), 0);
        before = count_fds();
        ck_assert_int_eq(zrc_status_query(c, &st), 0);
        st = zrc_status_free(st);
        /* three events of loader 3, in order; only the RING holds a descriptor:
         * close-on-exec, the memfd the fake sent */
        ck_assert_uint_eq(c->n_events, 3);
        e = c->events_head;
        ck_assert_int_eq(e->kind, ZR_MSG_RING);
        ck_assert_uint_eq(e->loader, 3);
        ck_assert_int_ge(e->fd, 0);
        flags = fcntl(e->fd, F_GETFD);
        ck_assert(flags >= 0 && (flags & FD_CLOEXEC));
        ck_assert_int_eq(lseek(e->fd, 0, SEEK_END), 8192);
        ck_assert_int_eq(e->next->kind, ZR_MSG_BATCH);
        ck_assert_int_eq(e->next->fd, -1);
        ck_assert_int_eq(e->next->next->kind, ZR_MSG_RING_CLOSE);
        ck_assert_int_eq(e->next->next->fd, -1);
        ck_assert_int_eq(count_fds(), before + 1);
        /* closing loader 3 drops its events and closes their descriptors */
        fake_dataset(c, &d);
        ck_assert_int_eq(zrc_loader_open(c, &dp, 1, &o, &l), 0);
        l = zrc_loader_close(l);
        ck_assert_uint_eq(c->n_events, 0);
        ck_assert_ptr_null(c->events_head);
        ck_assert_ptr_null(c->events_tail);
        ck_assert_int_eq(count_fds(), before);
        /* another connection's loader 4: kept, with its descriptor */
        ck_assert_int_eq(zrc_status_query(c, &st), 0);
        st = zrc_status_free(st);
        ck_assert_uint_eq(c->n_events, 1);
        ck_assert_int_eq(count_fds(), before + 1);
        /* a RING must carry exactly one: two break the connection */
        ck_assert_int_eq(zrc_status_query(c, &st), -ZR_E_BAD_FD);
        ck_assert(strstr(zrc_last_error(c)->message, "ring event came with 2"));
        ck_assert_uint_eq(c->n_events, 1);
        /* zrc_disconnect closes the descriptor of the event left; with the
         * fake gone, what remains is what was open before, less the client's
         * socket, the fake's and its listening socket: both of the bad RING's
         * descriptors were closed too */
        zrc_disconnect(c);
        fake_stop(&f);
        ck_assert_int_eq(count_fds(), before - 3);
}
END_TEST

/* ---- a loader over shared rings ---------------------------------------- */

enum { FAKE_LOADER = 5, FAKE_OWN_RING = 10 };

/* The RELEASEs the fake read: (ring, slot). */
static uint64_t released[16][2];
static int n_released;

/* Reads one message of the client; returns its kind's first letters in kind
 * ("" on EOF) and, for a RELEASE, records (ring, slot). Returns its id. */
static uint64_t read_msg(int fd, char *kind, size_t kind_size) {
        uint8_t hdr[4], *body;
        uint32_t len;
        zr_wire_body *b = NULL;
        uint64_t id = 0;

        kind[0] = 0;
        if (recv(fd, hdr, 4, MSG_WAITALL) != 4)
                return 0;
        len = (uint32_t)hdr[0] | (uint32_t)hdr[1] << 8 | (uint32_t)hdr[2] << 16 | (uint32_t)hdr[3] << 24;
        body = malloc(len);
        if (recv(fd, body, len, MSG_WAITALL) == (ssize_t)len &&
            zr_wire_body_decode(body, len, NULL, &b, NULL) == 0) {
                const msgpack_object *root = zr_wire_body_root(b);

                (void)zr_wire_get_u64(root, "id", &id, NULL);
                (void)zr_wire_get_str_copy(root, "kind", kind, kind_size, NULL);
                if (strcmp(kind, "release") == 0 && n_released < 16) {
                        (void)zr_wire_get_u64(root, "ring", &released[n_released][0], NULL);
                        (void)zr_wire_get_u64(root, "slot", &released[n_released][1], NULL);
                        n_released++;
                }
        }
        zr_wire_body_free(b);
        free(body);
        return id;
}

/* Answers LOADER_OPEN: `loader`, its own ring 10 of `slots` slots of 4096
 * bytes (slot s filled with 0x10 + s), one stream region [0, 64). */
static void fake_loader_open(int fd, zr_wire_writer *w, uint32_t loader, uint64_t slots) {
        char kind[32];
        uint64_t id = read_msg(fd, kind, sizeof(kind));
        int own = fake_ring(FAKE_OWN_RING, slots * 4096, 0x10);

        ck_assert_str_eq(kind, "loader_open");
        zr_wire_writer_begin_message(w, "ok", true, id);
        zr_wire_put_u64(w, "loader", loader);
        zr_wire_put_u64(w, "ring", FAKE_OWN_RING);
        zr_wire_put_u64(w, "slots", slots);
        zr_wire_put_u64(w, "slot_bytes", 4096);
        zr_wire_put_u64(w, "ring_bytes", slots * 4096);
        zr_wire_put_u64(w, "length", 100);
        zr_wire_begin_array(w, "streams");
        zr_wire_begin_map(w, NULL);
        zr_wire_put_u64(w, "offset", 0);
        zr_wire_put_u64(w, "capacity", 64);
        zr_wire_end(w);
        zr_wire_end(w);
        send_writer(fd, w, &own, 1);
        close(own);
}

/* Answers LOADER_CLOSE (if it comes), after `in_flight` (a RING the client
 * must drop, descriptor and all, if >= 0; closed here), then waits for the hang-up (unless
 * in_flight is -2: then returns after the answer). */
static void fake_loader_close(int fd, zr_wire_writer *w, int in_flight) {
        char kind[32];
        uint64_t id;

        do /* RELEASEs may come first */
                id = read_msg(fd, kind, sizeof(kind));
        while (strcmp(kind, "release") == 0);

        if (in_flight >= 0) {
                send_ring(fd, w, FAKE_LOADER, 14, 1, 4096, 4096, in_flight);
                close(in_flight);
        }
        if (id && strcmp(kind, "loader_close") == 0) {
                zr_wire_writer_begin_message(w, "ok", true, id);
                send_writer(fd, w, NULL, 0);
        }
        if (in_flight == -2)
                return;
        while (read_msg(fd, kind, sizeof(kind)) || kind[0])
                ;
}

static void script_loader_rings(int fd) {
        zr_wire_writer w;
        char kind[32];
        int ring;

        zr_wire_writer_init(&w);
        fake_loader_open(fd, &w, FAKE_LOADER, 2);
        send_batch(fd, &w, FAKE_LOADER, FAKE_OWN_RING, 0, 0, NULL, 0);
        /* another member's ring of 3 slots, and a batch in its last slot */
        ring = fake_ring(11, 3 * 4096, 0x20);
        send_ring(fd, &w, FAKE_LOADER, 11, 3, 4096, 3 * 4096, ring);
        close(ring);
        send_batch(fd, &w, FAKE_LOADER, 11, 2, 1, NULL, 0);
        /* the client holds both of its slots: nothing until a RELEASE */
        read_msg(fd, kind, sizeof(kind));
        send_ring_close(fd, &w, FAKE_LOADER, 11);
        send_batch(fd, &w, FAKE_LOADER, FAKE_OWN_RING, 1, 2, NULL, 0);
        read_msg(fd, kind, sizeof(kind));
        read_msg(fd, kind, sizeof(kind));
        ring = fake_ring(13, 4096, 0x30);
        send_ring(fd, &w, FAKE_LOADER, 13, 1, 4096, 4096, ring);
        close(ring);
        send_batch(fd, &w, FAKE_LOADER, 13, 0, 3, NULL, 0);
        fake_loader_close(fd, &w, fake_ring(14, 4096, 0x50));
        zr_wire_writer_destroy(&w);
}

static void fake_dataset(zrc_conn *c, zrc_dataset *d) {
        *d = (zrc_dataset){ .conn = c, .handle = 1, .length = 100 };
        ck_assert_int_eq(zrc_schema_dense(&d->schema, "|u1", (uint64_t[]){ 8 }, 1, ZRC_CODEC_RAW), 0);
}

static void check_bytes(const zrc_loader_batch *b, uint8_t v) {
        const uint8_t *p = b->streams[0].data;

        ck_assert_uint_eq(b->streams[0].bytes, 64);
        for (int i = 0; i < 64; i++)
                ck_assert_uint_eq(p[i], v);
}

START_TEST(test_loader_rings) {
        fake f;
        zrc_conn *c = NULL;
        zrc_dataset d, *dp = &d;
        zrc_loader *l = NULL;
        zrc_loader_batch b0, b1, b2, b3, x;
        zrc_loader_options o = { .batch_size = 8, .prefetch = 2 };
        int before;

        n_released = 0;
        fake_start_ex(&f, script_loader_rings, 1, true);
        ck_assert_int_eq(zrc_connect(f.path, &c, NULL), 0);
        before = count_fds();
        fake_dataset(c, &d);
        ck_assert_msg(zrc_loader_open(c, &dp, 1, &o, &l) == 0, "open: %s",
                      zrc_last_error(c)->message);
        ck_assert_uint_eq(zrc_loader_slots(l), 2);
        ck_assert_int_eq(ring_maps(FAKE_OWN_RING), 1);

        /* step 0 from its own ring, step 1 from a ring a RING event passed */
        ck_assert_int_eq(zrc_loader_next(l, &b0), 0);
        ck_assert_uint_eq(b0.step, 0);
        ck_assert_uint_eq(b0.slot, 0);
        check_bytes(&b0, 0x10);
        ck_assert_int_eq(zrc_loader_next(l, &b1), 0);
        ck_assert_uint_eq(b1.step, 1);
        ck_assert_uint_eq(b1.slot, 1); /* the library's handle, not ring slot 2 */
        check_bytes(&b1, 0x22);
        ck_assert_int_eq(ring_maps(11), 1);
        /* both memfds mapped and closed (the fake waits for a RELEASE now,
         * its own closed) */
        ck_assert_int_eq(count_fds(), before);
        /* two held, wherever they lie: no third */
        ck_assert_int_eq(zrc_loader_next(l, &x), -EDEADLK);
        ck_assert_int_eq(zrc_loader_release(l, 2), -EINVAL);

        /* RELEASE names (ring 11, slot 2); then RING_CLOSE unmaps ring 11 */
        ck_assert_int_eq(zrc_loader_release(l, b1.slot), 0);
        ck_assert_int_eq(zrc_loader_release(l, b1.slot), -EINVAL);
        ck_assert_int_eq(zrc_loader_next(l, &b2), 0);
        ck_assert_uint_eq(b2.step, 2);
        ck_assert_uint_eq(b2.slot, 1);
        check_bytes(&b2, 0x11);
        ck_assert_int_eq(ring_maps(11), 0);
        check_bytes(&b0, 0x10); /* still valid */
        ck_assert_int_eq(zrc_loader_release(l, b0.slot), 0);
        ck_assert_int_eq(zrc_loader_release(l, b2.slot), 0);

        /* a third ring; the loader is closed holding a batch in it, while a
         * RING is in flight: every ring unmapped, every descriptor closed */
        ck_assert_int_eq(zrc_loader_next(l, &b3), 0);
        ck_assert_uint_eq(b3.step, 3);
        ck_assert_uint_eq(b3.slot, 0);
        check_bytes(&b3, 0x30);
        ck_assert_int_eq(ring_maps(13), 1);
        l = zrc_loader_close(l);
        ck_assert_int_eq(ring_maps(FAKE_OWN_RING), 0);
        ck_assert_int_eq(ring_maps(13), 0);
        ck_assert_int_eq(ring_maps(14), 0);
        ck_assert_uint_eq(c->n_events, 0);
        ck_assert_int_eq(count_fds(), before);
        zrc_disconnect(c);
        fake_stop(&f);

        ck_assert_int_eq(n_released, 3);
        ck_assert_uint_eq(released[0][0], 11);
        ck_assert_uint_eq(released[0][1], 2);
        ck_assert_uint_eq(released[1][0], FAKE_OWN_RING);
        ck_assert_uint_eq(released[1][1], 0);
        ck_assert_uint_eq(released[2][0], FAKE_OWN_RING);
        ck_assert_uint_eq(released[2][1], 1);
}
END_TEST

/* Bad ring events: each must fail zrc_loader_next() with `code` (for good:
 * the next call fails the same), after `good` batches. */
static const struct {
        const char *what;
        int code;
        int good;
        int mapped;        /* ring 11 mapped when the failure is seen */
        const char *message;
} bad_cases[] = {
        { "slot_bytes unlike the loader's", ZR_E_PROTO, 0, 0, "ring 11 of 2 slots of 2048" },
        { "ring_bytes not slots x slot_bytes", ZR_E_PROTO, 0, 0, "in 12288" },
        { "memfd shorter than ring_bytes", ZR_E_PROTO, 0, 0, "holds 4096 bytes, not 8192" },
        { "batch in an unknown ring", ZR_E_PROTO, 0, 0, "ring 99, which it does not know" },
        { "RING_CLOSE of a ring with a held batch", ZR_E_PROTO, 1, 1, "holds 1 batches" },
        { "RING_CLOSE of its own ring", ZR_E_PROTO, 0, 0, "its own ring" },
        { "batch in a slot out of that ring's range", ZR_E_PROTO, 0, 1, "slot 3 of ring 11" },
        { "RING of a known ring", ZR_E_PROTO, 0, 0, "announced twice" },
        { "RING_CLOSE of an unknown ring", ZR_E_PROTO, 0, 0, "an unknown ring 12" },
        { "RING without its memfd", ZR_E_BAD_FD, 0, 0, "0 descriptors" },
};
static int bad_case;

static void script_loader_bad(int fd) {
        zr_wire_writer w;
        int ring = -1;

        zr_wire_writer_init(&w);
        fake_loader_open(fd, &w, FAKE_LOADER, 2);
        switch (bad_case) {
        case 0:
                ring = fake_ring(11, 2 * 2048, 0x20);
                send_ring(fd, &w, FAKE_LOADER, 11, 2, 2048, 2 * 2048, ring);
                break;
        case 1:
                ring = fake_ring(11, 3 * 4096, 0x20);
                send_ring(fd, &w, FAKE_LOADER, 11, 2, 4096, 3 * 4096, ring);
                break;
        case 2:
                ring = fake_ring(11, 4096, 0x20);
                send_ring(fd, &w, FAKE_LOADER, 11, 2, 4096, 2 * 4096, ring);
                break;
        case 3:
                send_batch(fd, &w, FAKE_LOADER, 99, 0, 0, NULL, 0);
                break;
        case 4:
                ring = fake_ring(11, 3 * 4096, 0x20);
                send_ring(fd, &w, FAKE_LOADER, 11, 3, 4096, 3 * 4096, ring);
                send_batch(fd, &w, FAKE_LOADER, 11, 0, 0, NULL, 0);
                send_ring_close(fd, &w, FAKE_LOADER, 11);
                break;
        case 5:
                send_ring_close(fd, &w, FAKE_LOADER, FAKE_OWN_RING);
                break;
        case 6:
                ring = fake_ring(11, 3 * 4096, 0x20);
                send_ring(fd, &w, FAKE_LOADER, 11, 3, 4096, 3 * 4096, ring);
                send_batch(fd, &w, FAKE_LOADER, 11, 3, 0, NULL, 0);
                break;
        case 7:
                ring = fake_ring(FAKE_OWN_RING, 2 * 4096, 0x20);
                send_ring(fd, &w, FAKE_LOADER, FAKE_OWN_RING, 2, 4096, 2 * 4096, ring);
                break;
        case 8:
                send_ring_close(fd, &w, FAKE_LOADER, 12);
                break;
        default:
                send_ring(fd, &w, FAKE_LOADER, 11, 1, 4096, 4096, -1);
                break;
        }
        if (ring >= 0)
                close(ring);
        fake_loader_close(fd, &w, -1);
        zr_wire_writer_destroy(&w);
}

START_TEST(test_loader_bad_rings) {
        fake f;
        zrc_conn *c = NULL;
        zrc_dataset d, *dp = &d;
        zrc_loader *l = NULL;
        zrc_loader_batch b, held = { 0 };
        zrc_loader_options o = { .batch_size = 8, .prefetch = 2 };
        int before;

        bad_case = _i;
        fake_start_ex(&f, script_loader_bad, 1, true);
        ck_assert_int_eq(zrc_connect(f.path, &c, NULL), 0);
        before = count_fds();
        fake_dataset(c, &d);
        ck_assert_int_eq(zrc_loader_open(c, &dp, 1, &o, &l), 0);
        for (int k = 0; k < bad_cases[_i].good; k++)
                ck_assert_int_eq(zrc_loader_next(l, &held), 0);
        ck_assert_msg(zrc_loader_next(l, &b) == -bad_cases[_i].code, "%s: %s", bad_cases[_i].what,
                      zrc_last_error(c)->message);
        ck_assert_msg(strstr(zrc_last_error(c)->message, bad_cases[_i].message), "%s: %s",
                      bad_cases[_i].what, zrc_last_error(c)->message);
        /* for good */
        ck_assert_int_eq(zrc_loader_next(l, &b), -bad_cases[_i].code);
        if (bad_cases[_i].good) {
                /* the ring the daemon wanted closed stays mapped under the batch */
                ck_assert_int_eq(ring_maps(11), 1);
                check_bytes(&held, 0x20);
                ck_assert_int_eq(zrc_loader_release(l, held.slot), 0);
        }
        ck_assert_int_eq(ring_maps(11), bad_cases[_i].mapped);
        l = zrc_loader_close(l);
        ck_assert_int_eq(ring_maps(FAKE_OWN_RING), 0);
        ck_assert_int_eq(ring_maps(11), 0);
        ck_assert_int_eq(count_fds(), before);
        zrc_disconnect(c);
        fake_stop(&f);
}
END_TEST

int main(void) {
        Suite *s = suite_create("conn");
        TCase *tc = tcase_create("fake-daemon");
        SRunner *sr;
        int failed;

        tcase_set_timeout(tc, 60);
        tcase_add_test(tc, test_events_between);
        tcase_add_test(tc, test_wrong_id);
        tcase_add_test(tc, test_unexpected_fds);
        tcase_add_test(tc, test_ctrunc);
        tcase_add_test(tc, test_bad_body);
        tcase_add_test(tc, test_huge_frame);
        tcase_add_test(tc, test_fault_hangup);
        tcase_add_test(tc, test_hangup_mid_frame);
        tcase_add_test(tc, test_bad_version);
        tcase_add_test(tc, test_socket_resolution);
        tcase_add_test(tc, test_event_fds);
        tcase_add_test(tc, test_loader_rings);
        tcase_add_loop_test(tc, test_loader_bad_rings, 0,
                            (int)(sizeof(bad_cases) / sizeof(bad_cases[0])));
        suite_add_tcase(s, tc);
        sr = srunner_create(s);
        srunner_run_all(sr, CK_NORMAL);
        failed = srunner_ntests_failed(sr);
        srunner_free(sr);
        return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
