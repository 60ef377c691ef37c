/* holder.c: who holds a store (holder.h): the writer's record, writer.zr, and
 * the holders /proc/locks shows.
 *
 * It only describes: the lock itself is store.c's. What it reads (the lock
 * table, /proc/PID, a writer.zr anybody who may write the directory could have
 * planted) is bounded and reduced to printable ASCII before it reaches a
 * message. Nothing is synced: a record lost to a power cut is only a message
 * the less.
 */
#include "store/holder.h"
#include "store/newfile.h"
#include "store/resolve.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <time.h>
#include <unistd.h>

/* Holders named one by one in a message; more are counted. */
#define HOLDERS_NAMED_MAX 4
/* The bytes of writer.zr read: one line of a few fields. */
#define RECORD_MAX 256

/* A message being built in a fixed buffer: appends are cut at its end. */
typedef struct msg {
        char *buf;
        size_t len, at;
} msg;

static void put(msg *m, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(msg *m, const char *fmt, ...) {
        va_list ap;
        if (m->at + 1 >= m->len)
                return;
        va_start(ap, fmt);
        int n = vsnprintf(m->buf + m->at, m->len - m->at, fmt, ap);
        va_end(ap);
        if (n > 0)
                m->at += (size_t)n < m->len - m->at ? (size_t)n : m->len - m->at - 1;
}

/* Printable ASCII only, in place: hostile bytes never reach a message. */
static void printable(char *s) {
        for (; *s; s++)
                if ((unsigned char)*s < 0x20 || (unsigned char)*s > 0x7e)
                        *s = '?';
}

static void hostname(char *buf, size_t len) {
        if (gethostname(buf, len) < 0)
                snprintf(buf, len, "?");
        buf[len - 1] = 0;
        printable(buf);
        for (char *p = buf; *p; p++)
                if (*p == ' ' || *p == '=')
                        *p = '?';
}

void zr_holder_record(int dirfd) {
        char host[HOST_NAME_MAX + 1], since[32], line[RECORD_MAX];
        struct tm tm;
        time_t now = time(NULL);

        hostname(host, sizeof(host));
        if (!gmtime_r(&now, &tm) || !strftime(since, sizeof(since), "%Y-%m-%dT%H:%M:%SZ", &tm))
                snprintf(since, sizeof(since), "?");
        int n = snprintf(line, sizeof(line), "pid=%ld host=%s uid=%lu since=%s\n",
                         (long)getpid(), host, (unsigned long)geteuid(), since);
        if (n <= 0 || (size_t)n >= sizeof(line))
                return;
        int fd = zr_newfile_create(dirfd, ZR_HOLDER_NAME, O_WRONLY, NULL);
        if (fd < 0)
                return;
        if (write(fd, line, (size_t)n) != n)
                (void)unlinkat(dirfd, ZR_HOLDER_NAME, 0);
        close(fd);
}

void zr_holder_forget(int dirfd) {
        (void)unlinkat(dirfd, ZR_HOLDER_NAME, 0);
}

/* The first line of writer.zr, printable, into buf; 0 if there is none. */
static int record_read(int dirfd, char *buf, size_t len) {
        struct stat st;
        int fd = zr_resolve_open(dirfd, ZR_HOLDER_NAME, O_RDONLY | O_NONBLOCK, 0, NULL);
        ssize_t n = -1;

        if (fd < 0)
                return 0;
        if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode))
                n = read(fd, buf, len - 1);
        close(fd);
        if (n <= 0)
                return 0;
        buf[n] = 0;
        buf[strcspn(buf, "\n")] = 0;
        printable(buf);
        return buf[0] != 0;
}

/* "zrecordd, uid 1000" of pid, as much of it as /proc shows. */
static void describe_pid(msg *m, long pid) {
        char path[64], comm[32] = "";
        struct stat st;

        snprintf(path, sizeof(path), "/proc/%ld/comm", pid);
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd >= 0) {
                ssize_t n = read(fd, comm, sizeof(comm) - 1);
                close(fd);
                comm[n > 0 ? n : 0] = 0;
                comm[strcspn(comm, "\n")] = 0;
                printable(comm);
        }
        snprintf(path, sizeof(path), "/proc/%ld", pid);
        bool has_uid = stat(path, &st) == 0;
        if (comm[0] && has_uid)
                put(m, " (%s, uid %lu)", comm, (unsigned long)st.st_uid);
        else if (comm[0])
                put(m, " (%s)", comm);
        else if (has_uid)
                put(m, " (uid %lu)", (unsigned long)st.st_uid);
}

/* One lock of /proc/locks: the flock() of a process on (dev, ino). Lines of
 * waiters ("->") and of other kinds of lock are skipped. 1 if it is one. */
static int parse_lock(char *line, const struct stat *st, long *ret_pid, bool *ret_write) {
        char *save = NULL, *tok;
        int field = 0;
        bool flock_kind = false, mode_seen = false;
        long pid = 0;

        if (strstr(line, "->"))
                return 0;
        for (tok = strtok_r(line, " \t\n", &save); tok; tok = strtok_r(NULL, " \t\n", &save)) {
                field++;
                if (field == 2) {
                        flock_kind = strcmp(tok, "FLOCK") == 0;
                        if (!flock_kind)
                                return 0;
                } else if (!mode_seen && (strcmp(tok, "READ") == 0 || strcmp(tok, "WRITE") == 0)) {
                        mode_seen = true;
                        *ret_write = tok[0] == 'W';
                        tok = strtok_r(NULL, " \t\n", &save);
                        if (!tok)
                                return 0;
                        pid = strtol(tok, NULL, 10);
                        tok = strtok_r(NULL, " \t\n", &save);
                        unsigned maj, min;
                        unsigned long long ino;
                        if (!tok || sscanf(tok, "%x:%x:%llu", &maj, &min, &ino) != 3)
                                return 0;
                        if (maj != major(st->st_dev) || min != minor(st->st_dev) ||
                            ino != (unsigned long long)st->st_ino)
                                return 0;
                        *ret_pid = pid;
                        return 1;
                }
        }
        return 0;
}

/* The lock table, open at its start for meta_fd's file (*st), or NULL. */
static FILE *locks_open(int meta_fd, struct stat *st) {
        return fstat(meta_fd, st) == 0 ? fopen("/proc/locks", "re") : NULL;
}

/* The next flock of the table on st's file: 1 and its pid and kind, or 0. */
static int locks_next(FILE *f, const struct stat *st, long *ret_pid, bool *ret_write) {
        char line[512];
        while (f && fgets(line, sizeof(line), f))
                if (parse_lock(line, st, ret_pid, ret_write))
                        return 1;
        return 0;
}

unsigned zr_holder_others(int meta_fd) {
        struct stat st;
        FILE *f = locks_open(meta_fd, &st);
        unsigned n = 0;
        long pid;
        bool write_lock;

        bool own = false;

        /* the caller's own lock is one of this process's: any other counts */
        while (locks_next(f, &st, &pid, &write_lock)) {
                if (pid == (long)getpid() && !own)
                        own = true;
                else
                        n++;
        }
        if (f)
                fclose(f);
        return n;
}

void zr_holder_describe(int dirfd, int meta_fd, bool exclusive, bool others_only, char *buf,
                        size_t len) {
        msg m = {.buf = buf, .len = len};
        struct stat st;
        char record[RECORD_MAX];
        unsigned found = 0;
        long pid;
        bool write_lock = false;

        if (len == 0)
                return;
        buf[0] = 0;
        FILE *f = locks_open(meta_fd, &st);
        bool own = false;
        while (locks_next(f, &st, &pid, &write_lock)) {
                if (others_only && pid == (long)getpid() && !own) {
                        own = true; /* the caller's own */
                        continue;
                }
                if (++found > HOLDERS_NAMED_MAX)
                        continue;
                put(&m, "%s%s by ", found > 1 ? "; " : "", write_lock ? "written" : "read");
                if (pid == (long)getpid())
                        put(&m, "this process (pid %ld)", pid);
                else if (pid > 0)
                        put(&m, "pid %ld", pid);
                else
                        put(&m, "a process of another pid namespace");
                if (pid > 0 && pid != (long)getpid())
                        describe_pid(&m, pid);
                put(&m, " on this machine");
        }
        if (f)
                fclose(f);
        if (found > HOLDERS_NAMED_MAX)
                put(&m, "; and %u more", found - HOLDERS_NAMED_MAX);
        if (found == 0) {
                put(&m, "%s by a process this machine's lock table does not show (a daemon on "
                    "another machine that shares the file system)",
                    exclusive ? "read or written" : "written");
                if (record_read(dirfd, record, sizeof(record)))
                        put(&m, "; " ZR_HOLDER_NAME ", left by its last writer: %s", record);
        }
}
