/* frames.h: raw frames to and from zrecordd, with descriptors: what a test
 * needs to drive the daemon below libzrc (or to play a daemon for libzrc),
 * including what no well-behaved client sends. Frames are built with
 * proto/wire.h; a received frame is decoded and its kind read.
 *
 * Nothing here asserts: calls return 0 or -errno; each kind of test wraps them
 * in its own way of failing. Every wait is a poll() with a bound.
 */
#ifndef ZR_TESTS_LIB_FRAMES_H
#define ZR_TESTS_LIB_FRAMES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "wire.h"

/* A connected, blocking socket to the daemon at path (CLOEXEC), or -errno. */
int tl_connect(const char *path);
/* The same, made by a child process running as uid:gid (no supplementary
 * groups), so the daemon sees that uid (SO_PEERCRED is taken at connect);
 * the socket comes back to this process. Needs root (-EPERM otherwise); the
 * uid need not exist. The socket and its directories must let that uid in. */
int tl_connect_as(const char *path, uid_t uid, gid_t gid);

/* Sends raw bytes; fds (up to 253, more than a frame may carry, for tests)
 * go with the first sendmsg(). 0 or -errno. */
int tl_send_raw(int fd, const void *p, size_t len, const int *fds, unsigned nfds);
/* Finishes w's frame and sends it. 0 or -errno. */
int tl_send(int fd, zr_wire_writer *w, const int *fds, unsigned nfds);

/* A received frame: its bytes, decoded body, kind and descriptors (at most 8
 * kept; more are closed). */
typedef struct tl_msg {
        uint8_t *bytes;
        size_t len;
        zr_wire_body *body;
        const msgpack_object *root;
        char kind[32];
        int fds[8];
        unsigned nfds;
} tl_msg;

/* Reads one frame within timeout_ms. 0, -EPIPE at EOF (or a reset),
 * -ETIMEDOUT, -EPROTO for a frame that does not decode or has no kind, or
 * -errno. On failure *m holds nothing (tl_msg_free() is still safe). */
int tl_recv(int fd, tl_msg *m, int timeout_ms);
/* Closes the descriptors the frame brought and frees it. */
void tl_msg_free(tl_msg *m);

/* A field of a received message; 0 when absent or not an unsigned. */
uint64_t tl_u64(const tl_msg *m, const char *key);
/* "ok": 0, "error" or "fault": its code, any other kind: -1. */
int tl_code(const tl_msg *m);
/* True for the events of a loader (batch, ring, ring_close, loader_end). */
bool tl_is_loader_event(const tl_msg *m);

/* Starts a request body (the writer initialized). */
void tl_begin(zr_wire_writer *w, const char *kind, uint64_t id);
/* The fields of a LOADER_OPEN of one stream, handle h, after its header. */
void tl_put_loader_open(zr_wire_writer *w, uint64_t h, const char *sampler, uint64_t batch,
                        uint64_t seed, uint64_t start, uint64_t prefetch);
/* Sends the request (destroying w) and reads its reply into *m, past the
 * events of loaders on the connection (dropped, their descriptors closed);
 * returns tl_code() of the reply, or -errno (then *m holds nothing). */
int tl_call(int fd, zr_wire_writer *w, const int *fds, unsigned nfds, tl_msg *m);
/* Connects and says HELLO as `client`: 0 with the socket in *ret_fd, -errno,
 * or the negated error code of the reply. */
int tl_connect_hello(const char *path, const char *client, int *ret_fd);

/* A memfd named `name` holding len bytes of p, sealed against writes and size
 * changes if `seal`; -errno on failure. */
int tl_memfd(const char *name, const void *p, size_t len, bool seal);

#endif
