/* limits-kit.c: what the files of the limits suite share (limits-kit.h). */
#include "limits-kit.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

td_daemon LD;

void lk_start(const char *const *args) {
        td_start(&LD, args);
}

void lk_teardown(void) {
        td_cleanup(&LD);
}

bool lk_can_switch_uid(void) {
        if (geteuid() == 0)
                return true;
        printf("skipped: clients of other uids need root\n");
        return false;
}

void lk_start_shared(const char *const *args) {
        const char *all[40];
        int n = 0;
        all[n++] = "--socket-mode=0666";
        for (int i = 0; args && args[i] && n < 39; i++)
                all[n++] = args[i];
        all[n] = NULL;
        td_start(&LD, all);
        ck_assert_int_eq(chmod(LD.dir, 0711), 0);
}

int lk_connect_as(uid_t uid) {
        int fd = tl_connect_as(LD.socket, uid, (gid_t)uid);
        ck_assert_msg(fd >= 0, "connect as uid %u: %s", (unsigned)uid, strerror(-fd));
        return fd;
}

int lk_hello(int fd, char *msg, size_t size) {
        zr_wire_writer w;
        td_msg m;
        td_begin_hello(&w, lk_id(), 1, 1);
        int r = td_send(fd, &w, NULL, 0);
        zr_wire_writer_destroy(&w);
        /* a refused connection may be closed before the send: its FAULT waits */
        r = td_recv(fd, &m);
        if (r < 0)
                return r;
        int code = td_code(&m);
        if (msg && code)
                td_message(&m, msg, size);
        td_msg_free(&m);
        return code;
}

uint64_t lk_id(void) {
        static uint64_t id = 1;
        return id++;
}

static char *store_path(const char *name) {
        static char buf[400];
        snprintf(buf, sizeof(buf), "%s/%s", LD.dir, name);
        return buf;
}

void lk_store(int fd, const char *name, uint64_t n) {
        uint64_t shape[] = {4};
        uint32_t *data = calloc(n * 4 + 1, sizeof(uint32_t));
        for (uint64_t i = 0; i < n * 4; i++)
                data[i] = (uint32_t)i;
        uint32_t h = td_create_dense(fd, store_path(name), "<u4", shape, 1, "raw");
        ck_assert_int_eq(td_append(fd, h, "<u4", shape, 1, 16, data, n, NULL), 0);
        free(data);
}

uint32_t lk_open_store(int fd, const char *name) {
        char meta[440];
        int fds[2];
        zr_wire_writer w;
        td_msg m;
        fds[0] = td_open_dir(store_path(name));
        snprintf(meta, sizeof(meta), "%s/meta.zr", store_path(name));
        fds[1] = open(meta, O_RDONLY | O_CLOEXEC);
        ck_assert_int_ge(fds[1], 0);
        td_begin(&w, "dataset_open", lk_id());
        int code = td_call(fd, &w, fds, 2, &m);
        close(fds[0]);
        close(fds[1]);
        ck_assert_msg(code == 0, "dataset_open: %d", code);
        uint32_t h = (uint32_t)td_u64(&m, "handle");
        td_msg_free(&m);
        return h;
}

int lk_open_loader(int fd, uint32_t h, uint64_t seed, td_msg *m) {
        zr_wire_writer w;
        td_begin_loader_open(&w, lk_id(), h, "sequential", 4, seed, 0, 2);
        return td_call_past_events(fd, &w, NULL, 0, m);
}

void lk_status(int fd, td_msg *m) {
        zr_wire_writer w;
        td_begin(&w, "status", lk_id());
        ck_assert_int_eq(td_call_past_events(fd, &w, NULL, 0, m), 0);
}

uint32_t lk_array_len(const td_msg *m, const char *key) {
        const msgpack_object *items;
        uint32_t n = 0;
        ck_assert_msg(zr_wire_get_array(m->root, key, &items, &n, NULL) == 0, "no array %s", key);
        return n;
}

void lk_wait_clients(int fd, uint64_t n) {
        for (int tries = 0; tries < 100000; tries++) {
                td_msg m;
                lk_status(fd, &m);
                uint64_t c = td_u64(&m, "clients");
                td_msg_free(&m);
                if (c == n)
                        return;
        }
        ck_abort_msg("the daemon never counted %llu clients", (unsigned long long)n);
}

double lk_cpu_seconds(pid_t pid) {
        char path[64], buf[1024];
        unsigned long utime = 0, stime = 0;
        snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
        FILE *f = fopen(path, "re");
        ck_assert_msg(f != NULL, "%s: %s", path, strerror(errno));
        size_t n = fread(buf, 1, sizeof(buf) - 1, f);
        fclose(f);
        buf[n] = 0;
        /* fields after the command (which may hold spaces): state is the 3rd,
         * utime and stime the 14th and 15th */
        char *p = strrchr(buf, ')');
        ck_assert_ptr_nonnull(p);
        ck_assert_int_eq(sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu",
                                &utime, &stime), 2);
        return (double)(utime + stime) / (double)sysconf(_SC_CLK_TCK);
}

unsigned lk_log_count(const char *needle) {
        char line[4096];
        unsigned n = 0;
        FILE *f = fopen(LD.log, "re");
        ck_assert_msg(f != NULL, "%s: %s", LD.log, strerror(errno));
        while (fgets(line, sizeof(line), f))
                n += strstr(line, needle) != NULL;
        fclose(f);
        return n;
}

void lk_raise_nofile(void) {
        struct rlimit rl;
        ck_assert_int_eq(getrlimit(RLIMIT_NOFILE, &rl), 0);
        rl.rlim_cur = rl.rlim_max;
        ck_assert_int_eq(setrlimit(RLIMIT_NOFILE, &rl), 0);
}
