/* tclient.h: the daemon suites' client of zrecordd: tests/lib's launcher and
 * raw frames (daemon.h, frames.h) wrapped in libcheck assertions, so a test
 * reads as the protocol exchange it checks. Every wait is a poll() on a socket
 * with a deadline, never a sleep.
 */
#ifndef ZR_TESTS_TCLIENT_H
#define ZR_TESTS_TCLIENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "daemon.h"
#include "frames.h"
#include "message.h"

typedef tl_daemon td_daemon;
typedef tl_msg td_msg;

/* Starts zrecordd (--log-level=debug, then extra_args: NULL-terminated, may be
 * NULL) and returns once READY=1 arrived. */
void td_start(td_daemon *d, const char *const *extra_args);
/* As td_start() with "KEY=value" strings added to the daemon's environment
 * (WATCHDOG_PID is set to the daemon when WATCHDOG_USEC is given) and, if
 * `activate`, socket activation (tl_daemon_options). */
void td_start_env(td_daemon *d, const char *const *extra_args, const char *const *env,
                  bool activate);
/* Sends `sig` and waits for the exit; returns the wait status. */
int td_stop(td_daemon *d, int sig);
/* Waits for the daemon to exit by itself; returns the wait status. */
int td_wait_exit(td_daemon *d);
/* Waits for the next notify datagram containing `what`; true if it came. */
bool td_wait_notify(td_daemon *d, const char *what);
/* Stops the daemon with SIGTERM (asserting exit status 0: under the
 * sanitizers, no memory error and no leak), removes the temp directory. */
void td_cleanup(td_daemon *d);
/* Number of open descriptors of the daemon (/proc/PID/fd). */
int td_fd_count(const td_daemon *d);
/* True if the log holds `needle`. */
bool td_log_contains(const td_daemon *d, const char *needle);

/* A connected socket (blocking, CLOEXEC). */
int td_connect(const td_daemon *d);
/* Connects and says HELLO. */
int td_connect_hello(const td_daemon *d);

/* Sends raw bytes (and fds with the first byte). Returns 0 or -errno. */
int td_send_raw(int fd, const void *p, size_t len, const int *fds, unsigned nfds);
/* Sends the writer's frame (asserting it finishes); 0 or -errno. */
int td_send(int fd, zr_wire_writer *w, const int *fds, unsigned nfds);
/* Reads one frame (asserting it decodes). 0, -EPIPE on EOF, -ETIMEDOUT or
 * another -errno. */
int td_recv(int fd, td_msg *m);
void td_msg_free(td_msg *m);

/* Field access on a received message (asserting the field is there). */
uint64_t td_u64(const td_msg *m, const char *key);
bool td_has(const td_msg *m, const char *key);
const uint8_t *td_u64s(const td_msg *m, const char *key, size_t *ret_n);
/* "ok": 0; "error"/"fault": the code (asserting it is one of those). */
int td_code(const td_msg *m);
/* The message's "message" (an error's or a fault's) into msg, `size` bytes
 * with the NUL; "" without one. */
void td_message(const td_msg *m, char *msg, size_t size);
/* Reads fd until the daemon closes it (asserting nothing else goes wrong),
 * closes it, and returns the last frame's td_code() (0 if none came), its
 * message in msg (may be NULL). */
int td_closed_with(int fd, char *msg, size_t size);

/* Starts a request body. */
void td_begin(zr_wire_writer *w, const char *kind, uint64_t id);
/* Sends the request and reads the reply into *m; returns td_code(m). The reply
 * must be the next frame. */
int td_call(int fd, zr_wire_writer *w, const int *fds, unsigned nfds, td_msg *m);
/* As td_call(), on a connection with loaders: the loader events that come
 * before the reply (batch, ring, ring_close, loader_end) are dropped, their
 * descriptors closed (a dropped batch's slot stays held until its loader
 * closes). */
int td_call_past_events(int fd, zr_wire_writer *w, const int *fds, unsigned nfds, td_msg *m);

/* A request id for the helpers below (counting up from 1000000, apart from
 * the small ids tests choose). */
uint64_t td_next_id(void);
/* HELLO's body for versions min..max. */
void td_begin_hello(zr_wire_writer *w, uint64_t id, uint64_t min, uint64_t max);
/* DATASET_CREATE of a dense store (dtype, item shape of ndim dimensions,
 * codec) in the new directory `path`, made here; returns its handle. */
uint32_t td_create_dense(int fd, const char *path, const char *dtype, const uint64_t *shape,
                         unsigned ndim, const char *codec);
/* The fields of a dense APPEND after its handle. */
void td_put_dense(zr_wire_writer *w, const char *dtype, const uint64_t *shape, unsigned ndim,
                  uint64_t count, uint64_t record_bytes);
/* APPEND of count dense records of record_bytes each from data (passed in a
 * sealed memfd) to handle h; returns the code, the reply in *m (or freed if m
 * is NULL). */
int td_append(int fd, uint32_t h, const char *dtype, const uint64_t *shape, unsigned ndim,
              uint64_t record_bytes, const void *data, uint64_t count, td_msg *m);
/* LOADER_OPEN's body for one stream (handle h). */
void td_begin_loader_open(zr_wire_writer *w, uint64_t id, uint32_t h, const char *sampler,
                          uint64_t batch, uint64_t seed, uint64_t start, uint64_t prefetch);
/* RELEASE of (ring, slot) of a loader: a notification, no reply. */
void td_release(int fd, uint64_t loader, uint64_t ring, uint64_t slot);

/* A memfd holding len bytes, sealed write/shrink/grow if `seal`. */
int td_memfd(const void *p, size_t len, bool seal);

/* Opens path O_RDONLY|O_DIRECTORY. */
int td_open_dir(const char *path);

#endif
