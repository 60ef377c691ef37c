/* log.h: the daemon's log lines, written to stderr for journald or a terminal.
 *
 * One line per event. When stderr is connected to the journal (JOURNAL_STREAM is
 * set and names stderr's device and inode), each line starts with the syslog
 * priority as "<N>", which journald turns into the entry's priority; otherwise
 * lines are plain: "zrecordd: warning: message". Only the daemon's edge (main,
 * sessions) logs; the engine returns errors and never prints.
 */
#ifndef ZR_SERVER_LOG_H
#define ZR_SERVER_LOG_H

#include <stdint.h>
#include <stdio.h>
#include <syslog.h>

/* Configures where and how lines go: `stream` (NULL for stderr), the threshold
 * (LOG_ERR .. LOG_DEBUG; lines above it are dropped) and whether to prefix <N>:
 * -1 detects it from JOURNAL_STREAM, 0 never, 1 always. */
void zr_log_setup(FILE *stream, int max_level, int journal_prefix);

/* Changes the threshold; returns the previous one. */
int zr_log_set_level(int max_level);
int zr_log_get_level(void);

/* Parses "err", "warning", "notice", "info", "debug" (or 3..7) into *ret.
 * Returns 0 or -EINVAL. */
int zr_log_level_from_name(const char *name, int *ret);
const char *zr_log_level_name(int level);

/* Writes one line at `level` (thread-safe: one write per line). Newlines inside
 * the message are replaced by spaces so one event is always one line. */
void zr_log(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* A bound on lines of one kind that a client can cause at will (a refused
 * connection, a fault, an accept that fails): at most `burst` lines per
 * `interval_usec`. Lines beyond it are counted, not written; the next line
 * that passes is preceded by "N similar lines suppressed". A limiter belongs
 * to one call site and one thread (the loop's); define it static:
 *     static zr_ratelimit rl = ZR_RATELIMIT(10, 20);
 *     zr_log_ratelimited(&rl, LOG_WARNING, "accept: %s", strerror(errno)); */
typedef struct zr_ratelimit {
        uint64_t interval_usec;
        unsigned burst;
        uint64_t window_start; /* monotonic microseconds; 0: no line yet */
        unsigned in_window;    /* lines written in this window */
        uint64_t suppressed;   /* lines dropped since the last one written */
} zr_ratelimit;
#define ZR_RATELIMIT(interval_sec, burst) \
        { (uint64_t)(interval_sec) * 1000000u, (burst), 0, 0, 0 }

/* zr_log() through the limiter; lines above the log level are not counted. */
void zr_log_ratelimited(zr_ratelimit *rl, int level, const char *fmt, ...)
        __attribute__((format(printf, 3, 4)));

#endif
