/* limits-kit.c: what the files of the limits suite share (limits-kit.h). */
#include "limits-kit.h"

#include <errno.h>
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
        if (msg && code) {
                const char *s = "";
                size_t len = 0;
                zr_wire_get_str(m.root, "message", &s, &len, NULL);
                snprintf(msg, size, "%.*s", (int)len, s);
        }
        td_msg_free(&m);
        return code;
}

uint64_t lk_id(void) {
        static uint64_t id = 1;
        return id++;
}

void lk_wait_clients(int fd, uint64_t n) {
        for (int tries = 0; tries < 100000; tries++) {
                zr_wire_writer w;
                td_msg m;
                td_begin(&w, "status", lk_id());
                ck_assert_int_eq(td_call(fd, &w, NULL, 0, &m), 0);
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
