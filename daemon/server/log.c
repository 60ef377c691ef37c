/* log.c: one line per event on stderr, with <N> priority prefixes for journald.
 * See log.h. Lines are formatted into a stack buffer and written with one write()
 * so lines of concurrent threads never interleave. */
#include "server/log.h"

#include <errno.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* A log line longer than this is cut; 2 KiB holds any message we compose. */
#define LOG_LINE_MAX 2048

static FILE *log_stream;
static _Atomic int log_max_level = LOG_INFO;
static int log_journal;

static const char *const level_names[] = {
        [LOG_EMERG] = "emerg", [LOG_ALERT] = "alert", [LOG_CRIT] = "crit",
        [LOG_ERR] = "err", [LOG_WARNING] = "warning", [LOG_NOTICE] = "notice",
        [LOG_INFO] = "info", [LOG_DEBUG] = "debug",
};

static int stderr_is_journal(void) {
        const char *e = getenv("JOURNAL_STREAM");
        if (!e)
                return 0;
        unsigned long long dev, ino;
        if (sscanf(e, "%llu:%llu", &dev, &ino) != 2)
                return 0;
        struct stat st;
        if (fstat(STDERR_FILENO, &st) < 0)
                return 0;
        return (unsigned long long)st.st_dev == dev && (unsigned long long)st.st_ino == ino;
}

void zr_log_setup(FILE *stream, int max_level, int journal_prefix) {
        log_stream = stream;
        atomic_store(&log_max_level, max_level);
        log_journal = journal_prefix < 0 ? stderr_is_journal() : journal_prefix;
}

int zr_log_set_level(int max_level) {
        return atomic_exchange(&log_max_level, max_level);
}

int zr_log_get_level(void) {
        return atomic_load(&log_max_level);
}

int zr_log_level_from_name(const char *name, int *ret) {
        for (int i = LOG_ERR; i <= LOG_DEBUG; i++) {
                if (strcasecmp(name, level_names[i]) == 0) {
                        *ret = i;
                        return 0;
                }
        }
        if (strcasecmp(name, "error") == 0) {
                *ret = LOG_ERR;
                return 0;
        }
        if (name[0] >= '0' + LOG_ERR && name[0] <= '0' + LOG_DEBUG && name[1] == 0) {
                *ret = name[0] - '0';
                return 0;
        }
        return -EINVAL;
}

const char *zr_log_level_name(int level) {
        if (level < LOG_EMERG || level > LOG_DEBUG)
                return "?";
        return level_names[level];
}

__attribute__((format(printf, 2, 0)))
static void log_line(int level, const char *fmt, va_list ap) {
        char line[LOG_LINE_MAX];
        int n;
        if (log_journal)
                n = snprintf(line, sizeof(line), "<%d>", level);
        else
                n = snprintf(line, sizeof(line), "zrecordd: %s: ", zr_log_level_name(level));
        size_t start = (size_t)n;
        vsnprintf(line + start, sizeof(line) - start - 1, fmt, ap);
        size_t len = strlen(line);
        for (size_t i = start; i < len; i++)
                if (line[i] == '\n' || line[i] == '\r')
                        line[i] = ' ';
        line[len++] = '\n';
        int fd = fileno(log_stream ? log_stream : stderr);
        if (log_stream)
                fflush(log_stream);
        const char *p = line;
        while (len > 0) {
                ssize_t w = write(fd, p, len);
                if (w < 0 && errno == EINTR)
                        continue;
                if (w <= 0)
                        break;
                p += w;
                len -= (size_t)w;
        }
}

void zr_log(int level, const char *fmt, ...) {
        va_list ap;
        if (level > atomic_load(&log_max_level))
                return;
        va_start(ap, fmt);
        log_line(level, fmt, ap);
        va_end(ap);
}

void zr_log_ratelimited(zr_ratelimit *rl, int level, const char *fmt, ...) {
        struct timespec ts;
        va_list ap;
        if (level > atomic_load(&log_max_level))
                return;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        uint64_t now = (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u + 1;
        if (rl->window_start == 0 || now - rl->window_start >= rl->interval_usec) {
                rl->window_start = now;
                rl->in_window = 0;
        }
        if (rl->in_window >= rl->burst) {
                rl->suppressed++;
                return;
        }
        rl->in_window++;
        if (rl->suppressed) {
                zr_log(level, "%llu similar lines suppressed", (unsigned long long)rl->suppressed);
                rl->suppressed = 0;
        }
        va_start(ap, fmt);
        log_line(level, fmt, ap);
        va_end(ap);
}
