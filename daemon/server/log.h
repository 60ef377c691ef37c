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

#endif
