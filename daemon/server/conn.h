/* conn.h: one client connection: frames in, frames out, descriptors both ways.
 *
 * The transport of proto/PROTOCOL.md and nothing of its meaning: a frame is a
 * u32 little-endian body length and the body. A conn reads with recvmsg() into
 * one buffer (never larger than the frame limit plus its prefix), takes
 * descriptors with MSG_CMSG_CLOEXEC into a bounded queue, and hands every complete
 * frame body to on_frame(). A frame whose prefix declares more than the limit is
 * refused before its body is read. Outgoing frames are queued with the
 * descriptors they carry (sent with the frame's first byte) and written as the
 * socket accepts them; a client whose unread output passes its limit is cut off.
 *
 * Input the owner cannot take yet: before each read the owner may say no
 * (may_read()); the conn then reads only the rest of a frame already begun, so
 * no byte or descriptor of a new frame comes in, and waits for zr_conn_kick().
 * A frame begun must end within frame_timeout_ms of the last complete frame
 * (while the owner reads), or the connection is closed: a client cannot park
 * bytes and descriptors in a frame it never finishes.
 *
 * Ownership: the conn owns its socket. A callback may free the conn only through
 * the return value of on_frame (a negative value closes the conn after the
 * callback returns); on_close() is called exactly once, then the owner frees it.
 */
#ifndef ZR_SERVER_CONN_H
#define ZR_SERVER_CONN_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct event_base;
typedef struct zr_conn zr_conn;

#include "zr-proto.h"

/* cmsg room per recvmsg: one frame's worth (more is MSG_CTRUNC, an error). */
#define ZR_CONN_MAX_FDS_PER_READ ZR_FDS_PER_FRAME_MAX
/* Descriptors received and not yet taken: one frame's worth; the daemon takes
 * or drops them before it reads the next frame. */
#define ZR_CONN_MAX_PENDING_FDS ZR_FDS_PER_FRAME_MAX
/* Descriptors one outgoing frame carries (a reply passes at most one). */
#define ZR_CONN_MAX_FDS_OUT 4

typedef struct zr_conn_limits {
        uint32_t max_frame;      /* largest body accepted */
        uint64_t max_output;     /* unread output bytes before the client is cut off */
        uint64_t frame_timeout_ms; /* a frame begun must end within this; 0: no limit */
} zr_conn_limits;

enum zr_conn_close_reason {
        ZR_CONN_EOF = 0,         /* the peer closed */
        ZR_CONN_IO_ERROR,        /* read or write failed (errno in the log) */
        ZR_CONN_FRAME_TOO_BIG,   /* a prefix declared more than max_frame */
        ZR_CONN_FD_ERROR,        /* truncated control data, or too many descriptors */
        ZR_CONN_OUTPUT_FULL,     /* the peer does not read its replies */
        ZR_CONN_BY_OWNER,        /* on_frame asked to close */
        ZR_CONN_FRAME_TIMEOUT,   /* a frame begun did not end in time */
};

typedef struct zr_conn_ops {
        /* A complete frame body (valid until return). Descriptors that came with it
         * are in the conn's queue (zr_conn_take_fd()). Return 0 to go on, or a
         * negative value to close the connection. */
        int (*on_frame)(zr_conn *c, const uint8_t *body, size_t len, void *userdata);
        /* The connection is closed (reading shut; zr_conn_send_final() may still
         * write a last frame). Called once; the owner frees the conn. */
        void (*on_close)(zr_conn *c, enum zr_conn_close_reason reason, int error, void *userdata);
        /* Optional (NULL: none): the output queue became empty after it had to wait
         * for the socket, so an owner that paused reading for back-pressure may
         * resume. Not called from inside zr_conn_send(). */
        void (*on_drain)(zr_conn *c, void *userdata);
        /* Optional (NULL: always yes): asked before each read whether input may
         * come in beyond the frame already begun. 0: read only the rest of that
         * frame, then nothing until zr_conn_kick(). */
        int (*may_read)(zr_conn *c, void *userdata);
        /* Optional: bytes or descriptors came in (after the frames they
         * completed were handed to on_frame()), for the owner's accounting. */
        void (*on_input)(zr_conn *c, void *userdata);
} zr_conn_ops;

/* Wraps the connected socket `fd` (made non-blocking; ownership passes to the
 * conn, even on failure). Reads the peer's credentials (SO_PEERCRED). */
int zr_conn_new(struct event_base *base, int fd, const zr_conn_limits *limits,
                const zr_conn_ops *ops, void *userdata, zr_conn **ret);

/* Closes the socket and every queued descriptor, frees. NULL allowed; returns NULL.
 * Does not call on_close(). */
zr_conn *zr_conn_free(zr_conn *c);

/* Queues one frame with `body` (copied) and `fds` (ownership passes to the conn,
 * even on failure; they are closed once sent). Returns 0, -E2BIG for a body over
 * 4 GiB, -ENOMEM, or -EPIPE once the conn is closing. */
int zr_conn_send(zr_conn *c, const void *body, size_t len, const int *fds, size_t nfds);

/* Inside on_close(): writes one last frame (a FAULT) straight to the socket,
 * best effort, if nothing else is waiting to go out. Never blocks. */
void zr_conn_send_final(zr_conn *c, const void *body, size_t len);

/* Takes the oldest received descriptor (the caller owns it). -ENOENT if none. */
int zr_conn_take_fd(zr_conn *c, int *ret_fd);

/* Descriptors received and not taken. */
size_t zr_conn_pending_fds(const zr_conn *c);

/* Bytes received and not yet handed over as a frame (a frame begun). */
size_t zr_conn_input_bytes(const zr_conn *c);

/* Asks may_read() again (the owner may have room now), if the conn waits. */
void zr_conn_kick(zr_conn *c);

/* Inside on_frame(): how many of the pending descriptors (the oldest ones) came
 * with this frame, by PROTOCOL.md section 5 (the descriptors of one recvmsg()
 * belong to the frame holding the last byte it returned). Descriptors that came
 * with a later frame, already partly read, stay pending beyond these. */
size_t zr_conn_frame_fds(const zr_conn *c);

/* Closes every received descriptor not taken; returns how many there were. */
size_t zr_conn_drop_fds(zr_conn *c);

/* Stops (0) or resumes (1) reading frames, e.g. while a request is in flight. */
void zr_conn_set_reading(zr_conn *c, int on);

/* Shuts the connection after the queued output is written (or at once if
 * `now`); on_close() follows with ZR_CONN_BY_OWNER. */
void zr_conn_close(zr_conn *c, int now);

/* The peer's credentials, read when the conn was made. */
void zr_conn_peer(const zr_conn *c, pid_t *ret_pid, uid_t *ret_uid, gid_t *ret_gid);

/* Bytes queued for output and not yet written. */
uint64_t zr_conn_output_bytes(const zr_conn *c);

#endif
