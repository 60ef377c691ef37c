/* notify.h: the service manager's notify protocol (sd_notify), without libsystemd.
 *
 * When NOTIFY_SOCKET is set, zr_notify() sends one datagram ("READY=1",
 * "STATUS=...", "STOPPING=1", "WATCHDOG=1", "RELOADING=1") to that AF_UNIX
 * socket (a path, or an abstract name when it starts with '@'). Without it, every
 * call is a no-op that succeeds, so the daemon calls it unconditionally.
 */
#ifndef ZR_SERVER_NOTIFY_H
#define ZR_SERVER_NOTIFY_H

#include <stdint.h>

/* Sends `state` (one or more NEWLINE-separated assignments), never blocking.
 * Returns 0 when sent or when NOTIFY_SOCKET is unset; -EAGAIN when the socket's
 * queue is full (the datagram is dropped: nobody reads it); -errno when the send
 * failed otherwise; -EINVAL when NOTIFY_SOCKET is not a usable address. */
int zr_notify(const char *state);

/* As zr_notify() with a printf format. */
int zr_notifyf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* The watchdog interval the manager asked for, in microseconds, or 0 when there
 * is none (WATCHDOG_USEC unset or invalid, or WATCHDOG_PID names another process). */
uint64_t zr_notify_watchdog_usec(void);

#endif
