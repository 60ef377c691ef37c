/* conn-fake.c: the conn suite's scripted fake zrecordd (conn-fake.h). */
#include <check.h>

#include "conn-fake.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "daemon.h"
#include "frames.h"

uint64_t released[16][2];
int n_released;

void send_writer(int fd, zr_wire_writer *w, const int *fds, size_t n_fds) {
        (void)tl_send(fd, w, fds, (unsigned)n_fds);
        zr_wire_writer_reset(w);
}

uint64_t read_msg(int fd, char *kind, size_t kind_size) {
        tl_msg m;
        uint64_t id = 0;

        kind[0] = 0;
        if (tl_recv(fd, &m, TL_TIMEOUT_MS) < 0)
                return 0;
        (void)zr_wire_get_u64(m.root, "id", &id, NULL);
        snprintf(kind, kind_size, "%s", m.kind);
        if (strcmp(kind, "release") == 0 && n_released < 16) {
                released[n_released][0] = tl_u64(&m, "ring");
                released[n_released][1] = tl_u64(&m, "slot");
                n_released++;
        }
        tl_msg_free(&m);
        return id;
}

uint64_t read_request(int fd) {
        char kind[32];

        return read_msg(fd, kind, sizeof(kind));
}

void put_status_ok(zr_wire_writer *w, uint64_t id) {
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

void reply_status(int fd, uint64_t id, const int *fds, size_t n_fds) {
        zr_wire_writer w;

        zr_wire_writer_init(&w);
        put_status_ok(&w, id);
        send_writer(fd, &w, fds, n_fds);
        zr_wire_writer_destroy(&w);
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

void fake_start_ex(fake *f, script_fn script, uint32_t version, bool loader) {
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

void fake_start(fake *f, script_fn script, uint32_t version) {
        fake_start_ex(f, script, version, false);
}

void fake_stop(fake *f) {
        pthread_join(f->thread, NULL);
        close(f->listen_fd);
        unlink(f->path);
        rmdir(f->dir);
}

int count_fds(void) {
        DIR *d = opendir("/proc/self/fd");
        int n = 0;

        while (readdir(d))
                n++;
        closedir(d);
        return n;
}

zrc_conn *fake_connect(fake *f, script_fn script, uint32_t version) {
        zrc_conn *c = NULL;

        fake_start(f, script, version);
        ck_assert_int_eq(zrc_connect(f->path, &c, NULL), 0);
        return c;
}

void fake_done(fake *f, zrc_conn *c) {
        zrc_disconnect(c);
        fake_stop(f);
}

int status_code(zrc_conn *c) {
        zrc_status *st = NULL;
        int r = zrc_status_query(c, &st);

        zrc_status_free(st);
        return r;
}
