/* listener.h: the daemon's listening socket, passed by the service manager or made.
 *
 * Socket activation: when LISTEN_PID is this process and LISTEN_FDS is 1, the
 * listening AF_UNIX stream socket is descriptor 3 (SD_LISTEN_FDS_START); the
 * variables are then unset so children do not inherit them. Otherwise the daemon
 * binds its own socket at a path, with a mode (0660 by default) and an optional
 * group, replacing a stale socket file nobody listens on, but never a live one.
 */
#ifndef ZR_SERVER_LISTENER_H
#define ZR_SERVER_LISTENER_H

#include <sys/types.h>

#include "util/error.h"

#define ZR_LISTEN_FDS_START 3 /* the first passed descriptor, by the protocol */
#define ZR_LISTEN_BACKLOG 128 /* pending connections; clients retry on ECONNREFUSED */

/* Takes the activated socket. Returns 1 and sets *ret_fd (now CLOEXEC and
 * non-blocking) if one was passed, 0 if the daemon was not socket-activated, or a
 * negative code: ZR_E_BAD_FD if the passed descriptors are not exactly one
 * listening AF_UNIX stream socket. */
int zr_listener_from_env(int *ret_fd, zr_error *err);

/* Binds and listens at `path` with permissions `mode`, and group `gid` unless it
 * is (gid_t)-1. The socket is CLOEXEC and non-blocking. EADDRINUSE if a live
 * daemon already listens there. Returns 0 and sets *ret_fd. */
int zr_listener_bind(const char *path, mode_t mode, gid_t gid, int *ret_fd, zr_error *err);

#endif
