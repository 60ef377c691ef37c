/* conn.c: a libzrc connection: the socket, HELLO, and requests with their replies.
 *
 * A connection is one blocking Unix stream socket to zrecordd. Requests are
 * sent one at a time, each as one sendmsg() carrying its descriptors, and the
 * caller then waits for that request's reply. Frames are read exactly: the
 * 4-byte header first, then the body, so the descriptors of a recvmsg() always
 * belong to the frame being read (PROTOCOL.md, section 5); they arrive with
 * MSG_CMSG_CLOEXEC, and MSG_CTRUNC breaks the connection. Events that arrive
 * before a reply (BATCH, RING, RING_CLOSE, LOADER_END) are kept, bounded, for
 * the loader API, a RING with the one memfd it carries (any other event's
 * descriptors are closed; a RING without exactly one breaks the connection); a
 * FAULT is remembered, so that when the daemon then hangs up the caller learns
 * why. A reply whose id or kind does not match, or any malformed frame, breaks
 * the connection: every later call fails at once with the first reason.
 *
 * Not thread-safe: one thread uses a connection at a time. Never prints.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "zrc-private.h"

#ifndef ZR_VERSION_STRING
#define ZR_VERSION_STRING "0"
#endif

/* Room for the descriptors of one frame; more is MSG_CTRUNC. */
#define CONN_CMSG_SPACE CMSG_SPACE(ZR_FDS_PER_FRAME_MAX * sizeof(int))

/* Until the HELLO reply says otherwise: what every daemon accepts from us, and
 * the most any daemon may send. */
#define CONN_HELLO_SEND_MAX ZR_FRAME_MAX_FLOOR
#define CONN_HELLO_RECV_MAX ZR_FRAME_MAX_CEILING

/* A body of a request is its fields plus a few bytes of map headers; u64s bins
 * are sized so that everything else fits in this much. */
#define CONN_FRAME_SLACK 1024

static const char *errno_name(int code) {
        switch (code) {
        case EPERM: return "EPERM";
        case ENOENT: return "ENOENT";
        case EIO: return "EIO";
        case E2BIG: return "E2BIG";
        case EBADF: return "EBADF";
        case EAGAIN: return "EAGAIN";
        case ENOMEM: return "ENOMEM";
        case EACCES: return "EACCES";
        case EBUSY: return "EBUSY";
        case EEXIST: return "EEXIST";
        case ENOTDIR: return "ENOTDIR";
        case EISDIR: return "EISDIR";
        case EINVAL: return "EINVAL";
        case EMFILE: return "EMFILE";
        case EFBIG: return "EFBIG";
        case ENOSPC: return "ENOSPC";
        case EROFS: return "EROFS";
        case EPIPE: return "EPIPE";
        case ERANGE: return "ERANGE";
        case ENAMETOOLONG: return "ENAMETOOLONG";
        case ENOTEMPTY: return "ENOTEMPTY";
        case ELOOP: return "ELOOP";
        case ENOTSOCK: return "ENOTSOCK";
        case ECONNRESET: return "ECONNRESET";
        case ENOTCONN: return "ENOTCONN";
        case ECONNREFUSED: return "ECONNREFUSED";
        case ETIMEDOUT: return "ETIMEDOUT";
        default: return NULL;
        }
}

const char *zrc_error_name(int code) {
        const char *n;

        if (code < 0)
                code = -code;
        n = zr_error_name(code);
        return n ? n : errno_name(code);
}

static void error_setv(zrc_error *e, int code, const char *fmt, va_list ap) {
        const char *name = zrc_error_name(code);

        *e = (zrc_error){ .code = code };
        snprintf(e->name, sizeof(e->name), "%s", name ? name : "");
        vsnprintf(e->message, sizeof(e->message), fmt, ap);
}

static void error_set(zrc_error *e, int code, const char *fmt, ...) {
        va_list ap;

        va_start(ap, fmt);
        error_setv(e, code, fmt, ap);
        va_end(ap);
}

int conn_fail(zrc_conn *c, int code, const char *fmt, ...) {
        va_list ap;

        if (code < 0)
                code = -code;
        va_start(ap, fmt);
        error_setv(&c->error, code, fmt, ap);
        va_end(ap);
        return -code;
}

/* Marks the stream unusable with this failure, which is kept as the reason. */
__attribute__((format(printf, 3, 4)))
static int conn_break(zrc_conn *c, int code, const char *fmt, ...) {
        char msg[sizeof(c->error.message)];
        va_list ap;

        va_start(ap, fmt);
        vsnprintf(msg, sizeof(msg), fmt, ap);
        va_end(ap);
        c->broken = true;
        return conn_fail(c, code, "%s", msg);
}

const zrc_error *zrc_last_error(const zrc_conn *c) {
        return &c->error;
}

const char *zrc_socket_path(const zrc_conn *c) {
        return c->path;
}

uint32_t zrc_version(const zrc_conn *c) {
        return c->version;
}

const char *zrc_daemon_name(const zrc_conn *c) {
        return c->daemon;
}

const zrc_limits *zrc_limits_get(const zrc_conn *c) {
        return &c->limits;
}

static unsigned feature_bit(const char *name, size_t len) {
        static const struct { const char *name; unsigned bit; } table[] = {
                { ZR_FEATURE_LOADER, CONN_FEATURE_LOADER },
                { ZR_FEATURE_MSSET, CONN_FEATURE_MSSET },
                { ZR_FEATURE_DICT, CONN_FEATURE_DICT },
                { ZR_FEATURE_VERIFY, CONN_FEATURE_VERIFY },
                { ZR_FEATURE_CONVERT, CONN_FEATURE_CONVERT },
                { ZR_FEATURE_MIXTURE, CONN_FEATURE_MIXTURE },
                { ZR_FEATURE_STEPS_OF, CONN_FEATURE_STEPS_OF },
                { ZR_FEATURE_METRICS, CONN_FEATURE_METRICS },
                { ZR_FEATURE_REMOTE, CONN_FEATURE_REMOTE },
        };

        for (size_t i = 0; i < sizeof(table) / sizeof(table[0]); i++)
                if (strlen(table[i].name) == len && memcmp(table[i].name, name, len) == 0)
                        return table[i].bit;
        return 0;
}

bool zrc_has_feature(const zrc_conn *c, const char *name) {
        unsigned bit = name ? feature_bit(name, strlen(name)) : 0;

        return bit && (c->features & bit);
}

int conn_check(zrc_conn *c, unsigned feature, const char *name) {
        if (c->broken)
                return -c->error.code; /* the reason stays the last error */
        if (feature && !(c->features & feature))
                return conn_fail(c, ZR_E_UNKNOWN, "the daemon does not offer feature \"%s\"",
                                 name);
        return 0;
}

uint64_t conn_get_u64(const msgpack_object *map, const char *key) {
        uint64_t v = 0;

        (void)zr_wire_get_u64(map, key, &v, NULL);
        return v;
}

size_t conn_u64s_per_frame(const zrc_conn *c, size_t per_item_bytes) {
        return (c->frame_max - CONN_FRAME_SLACK) / per_item_bytes;
}

/* ---- sending and receiving frames ------------------------------------- */

static int send_frame(zrc_conn *c, const uint8_t *frame, size_t size, const int *fds,
                      size_t n_fds) {
        union {
                struct cmsghdr h;
                char buf[CONN_CMSG_SPACE];
        } cmsg;
        size_t sent = 0;

        if (n_fds > ZR_FDS_PER_FRAME_MAX)
                return conn_fail(c, EINVAL, "%zu descriptors for one frame", n_fds);

        while (sent < size) {
                struct iovec iov = { .iov_base = (void *)(frame + sent), .iov_len = size - sent };
                struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1 };
                ssize_t n;

                if (sent == 0 && n_fds > 0) {
                        /* all descriptors ride with the frame's first byte */
                        memset(&cmsg, 0, sizeof(cmsg));
                        msg.msg_control = cmsg.buf;
                        msg.msg_controllen = CMSG_SPACE(n_fds * sizeof(int));
                        cmsg.h.cmsg_level = SOL_SOCKET;
                        cmsg.h.cmsg_type = SCM_RIGHTS;
                        cmsg.h.cmsg_len = CMSG_LEN(n_fds * sizeof(int));
                        memcpy(CMSG_DATA(&cmsg.h), fds, n_fds * sizeof(int));
                }
                n = sendmsg(c->fd, &msg, MSG_NOSIGNAL);
                if (n < 0) {
                        if (errno == EINTR)
                                continue;
                        return conn_break(c, errno, "sending to the daemon: %s", strerror(errno));
                }
                sent += (size_t)n;
        }
        return 0;
}

static void close_fds(int *fds, size_t n) {
        for (size_t i = 0; i < n; i++)
                if (fds[i] >= 0)
                        close(fds[i]);
}

/* Reads exactly len bytes of the current frame, collecting the descriptors
 * that come with them into fds (at most ZR_FDS_PER_FRAME_MAX; *n_fds counts). */
static int recv_exact(zrc_conn *c, uint8_t *buf, size_t len, int *fds, size_t *n_fds) {
        size_t got = 0;

        while (got < len) {
                union {
                        struct cmsghdr h;
                        char buf[CONN_CMSG_SPACE];
                } cmsg;
                struct iovec iov = { .iov_base = buf + got, .iov_len = len - got };
                struct msghdr msg = {
                        .msg_iov = &iov,
                        .msg_iovlen = 1,
                        .msg_control = cmsg.buf,
                        .msg_controllen = sizeof(cmsg.buf),
                };
                ssize_t n = recvmsg(c->fd, &msg, MSG_CMSG_CLOEXEC);

                if (n < 0) {
                        if (errno == EINTR)
                                continue;
                        return conn_break(c, errno, "receiving from the daemon: %s",
                                          strerror(errno));
                }
                for (struct cmsghdr *h = CMSG_FIRSTHDR(&msg); h; h = CMSG_NXTHDR(&msg, h)) {
                        size_t k;
                        int *p;

                        if (h->cmsg_level != SOL_SOCKET || h->cmsg_type != SCM_RIGHTS)
                                continue;
                        k = (h->cmsg_len - CMSG_LEN(0)) / sizeof(int);
                        p = (int *)(void *)CMSG_DATA(h);
                        for (size_t i = 0; i < k; i++) {
                                int fd;

                                memcpy(&fd, p + i, sizeof(fd));
                                if (*n_fds < ZR_FDS_PER_FRAME_MAX)
                                        fds[(*n_fds)++] = fd;
                                else
                                        close(fd);
                        }
                }
                if (msg.msg_flags & MSG_CTRUNC) {
                        close_fds(fds, *n_fds);
                        *n_fds = 0;
                        return conn_break(c, ZR_E_BAD_FD,
                                          "descriptors from the daemon were truncated (MSG_CTRUNC)");
                }
                if (n == 0) {
                        if (c->fault.code)
                                return conn_break(c, c->fault.code,
                                                  "the daemon closed the connection: %s",
                                                  c->fault.message);
                        return conn_break(c, ECONNRESET, "the daemon closed the connection%s",
                                          got || len != ZR_FRAME_HEADER_SIZE ? " mid-frame" : "");
                }
                got += (size_t)n;
        }
        return 0;
}

/* Reads one frame: its body (malloc()ed, *ret_body) and its descriptors. */
static int recv_frame(zrc_conn *c, uint32_t frame_max, uint8_t **ret_body, size_t *ret_size,
                      int *fds, size_t *n_fds) {
        uint8_t header[ZR_FRAME_HEADER_SIZE];
        zr_wire_error werr = { 0 };
        uint32_t len;
        uint8_t *body;
        int r;

        *n_fds = 0;
        r = recv_exact(c, header, sizeof(header), fds, n_fds);
        if (r < 0)
                return r;
        r = zr_wire_frame_header_decode(header, frame_max, &len, &werr);
        if (r < 0) {
                close_fds(fds, *n_fds);
                return conn_break(c, werr.code, "frame from the daemon refused: %s", werr.message);
        }
        body = malloc(len);
        if (!body) {
                close_fds(fds, *n_fds);
                return conn_break(c, ENOMEM, "out of memory for a frame of %u bytes", len);
        }
        r = recv_exact(c, body, len, fds, n_fds);
        if (r < 0) {
                close_fds(fds, *n_fds);
                free(body);
                return r;
        }
        *ret_body = body;
        *ret_size = len;
        return 0;
}

static void fault_record(zrc_conn *c, const msgpack_object *root) {
        uint64_t code = 0;
        char msg[ZRC_ERROR_MESSAGE_MAX] = "";
        const char *p = NULL;
        size_t n = 0;

        (void)zr_wire_get_u64(root, ZR_FIELD_CODE, &code, NULL);
        if (zr_wire_get_str(root, ZR_FIELD_MESSAGE, &p, &n, NULL) == 0)
                snprintf(msg, sizeof(msg), "%.*s", (int)(n < sizeof(msg) ? n : sizeof(msg) - 1), p);
        if (code == 0 || code > INT_MAX)
                code = ZR_E_PROTO;
        error_set(&c->fault, (int)code, "%s", msg);
}

/* Queues an event, taking body and fd (-1: none) on success only. */
static int event_keep(zrc_conn *c, zr_msg_kind kind, uint32_t loader, uint8_t *body,
                      size_t size, int fd) {
        conn_event *e;

        if (c->n_events >= CONN_EVENTS_MAX)
                return conn_break(c, ZR_E_LIMIT, "more than %d events kept unread",
                                  CONN_EVENTS_MAX);
        e = calloc(1, sizeof(*e));
        if (!e)
                return conn_break(c, ENOMEM, "out of memory for an event");
        e->kind = kind;
        e->loader = loader;
        e->body = body;
        e->size = size;
        e->fd = fd;
        if (c->events_tail)
                c->events_tail->next = e;
        else
                c->events_head = e;
        c->events_tail = e;
        c->n_events++;
        return 0;
}

conn_event *conn_event_take(zrc_conn *c, uint32_t loader) {
        conn_event **p = &c->events_head, *prev = NULL;

        for (; *p; prev = *p, p = &(*p)->next) {
                conn_event *e = *p;

                if (e->loader != loader)
                        continue;
                *p = e->next;
                if (c->events_tail == e)
                        c->events_tail = prev;
                c->n_events--;
                e->next = NULL;
                return e;
        }
        return NULL;
}

conn_event *conn_event_free(conn_event *e) {
        if (e) {
                if (e->fd >= 0)
                        close(e->fd);
                free(e->body);
                free(e);
        }
        return NULL;
}

void conn_events_drop(zrc_conn *c, uint32_t loader) {
        conn_event *e;

        while ((e = conn_event_take(c, loader)))
                conn_event_free(e);
}

static void reply_error_set(zrc_conn *c, const msgpack_object *root) {
        uint64_t code = 0, v;
        const char *p = NULL, *name = NULL;
        size_t n = 0, name_len = 0;

        (void)zr_wire_get_u64(root, ZR_FIELD_CODE, &code, NULL);
        if (code == 0 || code > INT_MAX)
                code = ZR_E_PROTO;
        (void)zr_wire_get_str(root, ZR_FIELD_MESSAGE, &p, &n, NULL);
        if (n >= ZRC_ERROR_MESSAGE_MAX)
                n = ZRC_ERROR_MESSAGE_MAX - 1;
        error_set(&c->error, (int)code, "%.*s", (int)n, p ? p : "");
        if (zr_wire_find(root, ZR_FIELD_NAME) &&
            zr_wire_get_str(root, ZR_FIELD_NAME, &name, &name_len, NULL) == 0 &&
            name_len < sizeof(c->error.name) && !c->error.name[0])
                snprintf(c->error.name, sizeof(c->error.name), "%.*s", (int)name_len, name);
        if (zr_wire_find(root, "index") && zr_wire_get_u64(root, "index", &v, NULL) == 0) {
                c->error.has_index = true;
                c->error.index = v;
        }
        if (zr_wire_find(root, "needed") && zr_wire_get_u64(root, "needed", &v, NULL) == 0) {
                c->error.has_needed = true;
                c->error.needed = v;
        }
}

zr_wire_writer *conn_begin(zrc_conn *c, zr_msg_kind kind) {
        zr_wire_writer_reset(&c->writer);
        zr_wire_writer_begin_message(&c->writer, zr_msg_kind_name(kind), true, c->next_id);
        return &c->writer;
}

void conn_reply_done(conn_reply *r) {
        if (r->fd >= 0)
                close(r->fd);
        zr_wire_body_free(r->body);
        free(r->frame);
        *r = CONN_REPLY_NULL;
}

/* A message read from the socket that is not an event. */
typedef struct conn_msg {
        uint8_t *body;
        size_t size;
        zr_wire_body *decoded;
        zr_msg_header hdr;
        int fds[ZR_FDS_PER_FRAME_MAX];
        size_t n_fds;
} conn_msg;

static void msg_done(conn_msg *m) {
        close_fds(m->fds, m->n_fds);
        m->n_fds = 0;
        zr_wire_body_free(m->decoded);
        m->decoded = NULL;
        free(m->body);
        m->body = NULL;
}

/* Reads one frame. An event is handled here (BATCH, RING, RING_CLOSE and
 * LOADER_END kept in the queue, a RING with its descriptor; FAULT remembered;
 * an unknown kind ignored) and 0 returned; a reply ("ok" or "error") is
 * returned in *ret with 1. Anything else breaks c. */
static int conn_pump(zrc_conn *c, uint32_t recv_max, conn_msg *ret) {
        zr_wire_error werr = { 0 };
        conn_msg m = { 0 };
        uint32_t loader = 0;
        int r;

        r = recv_frame(c, recv_max, &m.body, &m.size, m.fds, &m.n_fds);
        if (r < 0)
                return r;
        r = zr_wire_body_decode(m.body, m.size, NULL, &m.decoded, &werr);
        if (r < 0) {
                msg_done(&m);
                return conn_break(c, werr.code, "malformed frame from the daemon: %s",
                                  werr.message);
        }
        r = zr_msg_header_read(zr_wire_body_root(m.decoded), &m.hdr, &werr);
        if (r == -ZR_E_UNKNOWN && !m.hdr.has_id) {
                /* an event kind this library does not know: ignored
                 * (PROTOCOL.md, section 13) */
                msg_done(&m);
                return 0;
        }
        if (r < 0) {
                msg_done(&m);
                return conn_break(c, werr.code, "bad message from the daemon: %s", werr.message);
        }

        if (m.hdr.kind == ZR_MSG_FAULT || m.hdr.kind == ZR_MSG_BATCH ||
            m.hdr.kind == ZR_MSG_LOADER_END || m.hdr.kind == ZR_MSG_RING ||
            m.hdr.kind == ZR_MSG_RING_CLOSE) {
                if (m.hdr.kind == ZR_MSG_RING) {
                        /* the one event with a descriptor: exactly one */
                        if (m.n_fds != 1) {
                                size_t got = m.n_fds;

                                msg_done(&m);
                                return conn_break(c, ZR_E_BAD_FD,
                                                  "a ring event came with %zu descriptors, not 1",
                                                  got);
                        }
                } else {
                        close_fds(m.fds, m.n_fds); /* other events carry none */
                        m.n_fds = 0;
                }
                werr = (zr_wire_error){ 0 };
                r = zr_msg_check(zr_wire_body_root(m.decoded), ZR_MSG_INVALID, NULL, &werr);
                if (r < 0) {
                        msg_done(&m);
                        return conn_break(c, werr.code, "bad event from the daemon: %s",
                                          werr.message);
                }
                if (m.hdr.kind == ZR_MSG_FAULT) {
                        fault_record(c, zr_wire_body_root(m.decoded));
                        msg_done(&m);
                        return 0;
                }
                (void)zr_wire_get_u32(zr_wire_body_root(m.decoded), "loader", &loader, NULL);
                r = event_keep(c, m.hdr.kind, loader, m.body, m.size,
                               m.n_fds == 1 ? m.fds[0] : -1);
                if (r < 0) {
                        msg_done(&m);
                        return r;
                }
                zr_wire_body_free(m.decoded); /* body and fd now belong to the event */
                return 0;
        }
        if (m.hdr.kind != ZR_MSG_OK && m.hdr.kind != ZR_MSG_ERROR) {
                msg_done(&m);
                return conn_break(c, ZR_E_PROTO, "the daemon sent a \"%s\" message",
                                  zr_msg_kind_name(m.hdr.kind));
        }
        *ret = m;
        return 1;
}

int conn_wait_event(zrc_conn *c) {
        conn_msg m;
        int r;

        r = conn_check(c, 0, NULL);
        if (r < 0)
                return r;
        r = conn_pump(c, c->frame_max, &m);
        if (r > 0) {
                msg_done(&m);
                return conn_break(c, ZR_E_PROTO, "a reply from the daemon, with no request open");
        }
        return r;
}

int conn_notify(zrc_conn *c, zr_msg_kind kind) {
        zr_wire_error werr = { 0 };
        const uint8_t *frame;
        size_t size;
        int r;

        r = conn_check(c, 0, NULL);
        if (r < 0)
                return r;
        r = zr_wire_writer_finish(&c->writer, c->frame_max, &frame, &size, &werr);
        if (r < 0)
                return conn_fail(c, werr.code ? werr.code : -r, "%s not sent: %s",
                                 zr_msg_kind_name(kind), werr.message);
        return send_frame(c, frame, size, NULL, 0);
}

zr_wire_writer *conn_begin_notification(zrc_conn *c, zr_msg_kind kind) {
        zr_wire_writer_reset(&c->writer);
        zr_wire_writer_begin_message(&c->writer, zr_msg_kind_name(kind), false, 0);
        return &c->writer;
}

int conn_call(zrc_conn *c, zr_msg_kind kind, const int *fds, size_t n_fds, conn_reply *ret) {
        zr_wire_error werr = { 0 };
        const uint8_t *frame;
        size_t size;
        uint64_t id = c->next_id++;
        uint32_t recv_max = kind == ZR_MSG_HELLO ? CONN_HELLO_RECV_MAX : c->frame_max;
        unsigned want_fds;
        conn_msg m;
        int r;

        r = conn_check(c, 0, NULL);
        if (r < 0)
                return r;
        r = zr_wire_writer_finish(&c->writer, kind == ZR_MSG_HELLO ? CONN_HELLO_SEND_MAX
                                                                  : c->frame_max,
                                  &frame, &size, &werr);
        if (r < 0)
                return conn_fail(c, werr.code ? werr.code : -r, "%s request not sent: %s",
                                 zr_msg_kind_name(kind), werr.message);
        r = send_frame(c, frame, size, fds, n_fds);
        if (r < 0)
                return r;

        do
                r = conn_pump(c, recv_max, &m);
        while (r == 0);
        if (r < 0)
                return r;

        if (!m.hdr.has_id || m.hdr.id != id) {
                msg_done(&m);
                return conn_break(c, ZR_E_PROTO,
                                  "reply id %" PRIu64 " does not answer request %" PRIu64,
                                  m.hdr.id, id);
        }
        werr = (zr_wire_error){ 0 };
        r = zr_msg_check(zr_wire_body_root(m.decoded), m.hdr.kind == ZR_MSG_OK ? kind : ZR_MSG_INVALID,
                         NULL, &werr);
        if (r < 0) {
                msg_done(&m);
                return conn_break(c, werr.code, "bad reply to %s: %s", zr_msg_kind_name(kind),
                                  werr.message);
        }
        if (m.hdr.kind == ZR_MSG_ERROR) {
                reply_error_set(c, zr_wire_body_root(m.decoded));
                msg_done(&m);
                if (c->error.code == ZR_E_VERSION)
                        c->broken = true; /* the daemon closes after it */
                return -c->error.code;
        }

        want_fds = zr_msg_reply_fds(kind);
        if (m.n_fds != want_fds) {
                size_t got = m.n_fds;

                msg_done(&m);
                return conn_break(c, ZR_E_BAD_FD, "reply to %s came with %zu descriptors, not %u",
                                  zr_msg_kind_name(kind), got, want_fds);
        }
        if (!ret) {
                msg_done(&m);
                return 0;
        }
        *ret = (conn_reply){
                .frame = m.body,
                .body = m.decoded,
                .root = zr_wire_body_root(m.decoded),
                .fd = want_fds ? m.fds[0] : -1,
        };
        return 0;
}

int conn_close_handle(zrc_conn *c, uint32_t h) {
        zr_wire_writer *w = conn_begin(c, ZR_MSG_CLOSE);

        zr_wire_put_u64(w, "handle", h);
        return conn_call(c, ZR_MSG_CLOSE, NULL, 0, NULL);
}

/* ---- connecting -------------------------------------------------------- */

static int connect_path(const char *path, int *ret_fd) {
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        size_t len = strlen(path);
        int fd;

        if (len >= sizeof(sa.sun_path))
                return -ENAMETOOLONG;
        memcpy(sa.sun_path, path, len + 1);
        fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0)
                return -errno;
        while (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
                int e = errno;

                if (e == EINTR)
                        continue;
                close(fd);
                return -e;
        }
        *ret_fd = fd;
        return 0;
}

static int hello(zrc_conn *c) {
        static const char *const wanted[] = { ZR_FEATURE_LOADER, ZR_FEATURE_MSSET,
                                              ZR_FEATURE_DICT, ZR_FEATURE_VERIFY,
                                              ZR_FEATURE_CONVERT, ZR_FEATURE_MIXTURE,
                                              ZR_FEATURE_STEPS_OF, ZR_FEATURE_METRICS,
                                              ZR_FEATURE_REMOTE };
        conn_reply reply = CONN_REPLY_NULL;
        const msgpack_object *features, *limits;
        uint32_t n = 0;
        zr_wire_writer *w;
        int r;

        w = conn_begin(c, ZR_MSG_HELLO);
        zr_wire_put_u64(w, "min_version", ZR_PROTO_VERSION_MIN);
        zr_wire_put_u64(w, "max_version", ZR_PROTO_VERSION_MAX);
        zr_wire_begin_array(w, "features");
        for (size_t i = 0; i < sizeof(wanted) / sizeof(wanted[0]); i++)
                zr_wire_put_str(w, NULL, wanted[i]);
        zr_wire_end(w);
        zr_wire_put_str(w, "client", "libzrc " ZR_VERSION_STRING);
        r = conn_call(c, ZR_MSG_HELLO, NULL, 0, &reply);
        if (r < 0)
                return r;

        c->version = (uint32_t)conn_get_u64(reply.root, "version");
        if (c->version < ZR_PROTO_VERSION_MIN || c->version > ZR_PROTO_VERSION_MAX) {
                conn_reply_done(&reply);
                return conn_break(c, ZR_E_VERSION, "the daemon chose protocol version %u",
                                  c->version);
        }
        (void)zr_wire_get_str_copy(reply.root, "daemon", c->daemon, sizeof(c->daemon), NULL);
        (void)zr_wire_get_array(reply.root, "features", &features, &n, NULL);
        for (uint32_t i = 0; i < n; i++)
                c->features |= feature_bit(features[i].via.str.ptr, features[i].via.str.size);
        (void)zr_wire_get_map(reply.root, "limits", &limits, NULL);
        c->limits = (zrc_limits){
                .frame_max = conn_get_u64(limits, "frame_max"),
                .handles_max = conn_get_u64(limits, "handles_max"),
                .shm_bytes_max = conn_get_u64(limits, "shm_bytes_max"),
                .loaders_max = conn_get_u64(limits, "loaders_max"),
                .pipeline_max = conn_get_u64(limits, "pipeline_max"),
                .fds_per_frame_max = conn_get_u64(limits, "fds_per_frame_max"),
                .streams_max = conn_get_u64(limits, "streams_max"),
                .prefetch_max = conn_get_u64(limits, "prefetch_max"),
        };
        conn_reply_done(&reply);
        if (c->limits.frame_max < ZR_FRAME_MAX_FLOOR || c->limits.frame_max > ZR_FRAME_MAX_CEILING)
                return conn_break(c, ZR_E_PROTO, "the daemon announced frame_max %" PRIu64,
                                  c->limits.frame_max);
        c->frame_max = (uint32_t)c->limits.frame_max;
        return 0;
}

static zrc_conn *conn_new(void) {
        zrc_conn *c = calloc(1, sizeof(*c));

        if (!c)
                return NULL;
        c->fd = -1;
        c->next_id = 1;
        c->frame_max = CONN_HELLO_SEND_MAX;
        zr_wire_writer_init(&c->writer);
        return c;
}

/* The default socket paths of PROTOCOL.md, section 1 (3 to 5), in order, and
 * whom each may lead to. */
static size_t default_paths(char paths[3][ZRC_SOCKET_PATH_MAX], conn_trust kinds[3]) {
        const char *xdg = getenv("XDG_RUNTIME_DIR");
        size_t n = 0;

        if (xdg && xdg[0] == '/' &&
            (size_t)snprintf(paths[n], ZRC_SOCKET_PATH_MAX, "%s/zrecord/zrecordd.sock", xdg) <
                    ZRC_SOCKET_PATH_MAX)
                kinds[n++] = CONN_TRUST_USER;
        snprintf(paths[n], ZRC_SOCKET_PATH_MAX, "/run/zrecord/zrecordd.sock");
        kinds[n++] = CONN_TRUST_SYSTEM;
        snprintf(paths[n], ZRC_SOCKET_PATH_MAX, "/tmp/zrecord-%u/zrecordd.sock",
                 (unsigned)getuid());
        kinds[n++] = CONN_TRUST_USER;
        return n;
}

/* Connects to path if its directory and then its peer pass the checks of
 * trust.c. Returns 0 with c->fd set, -EPERM (refused: why[] says why) or the
 * -errno of a path where no daemon answers. */
static int connect_trusted(zrc_conn *c, const char *path, conn_trust kind, char *why,
                           size_t size) {
        uid_t owner = (uid_t)-1;
        int r, fd = -1;

        r = trust_dir(path, kind, &owner, why, size);
        if (r < 0)
                return r;
        r = connect_path(path, &fd);
        if (r < 0) {
                snprintf(why, size, "%s", strerror(-r));
                return r;
        }
        r = trust_peer(fd, path, kind, owner, why, size);
        if (r < 0) {
                close(fd);
                return r;
        }
        c->fd = fd;
        return 0;
}

int zrc_connect(const char *socket_path, zrc_conn **ret, zrc_error *ret_error) {
        char candidates[3][ZRC_SOCKET_PATH_MAX];
        char why[ZRC_ERROR_MESSAGE_MAX];
        conn_trust kinds[3];
        const char *env = getenv("ZRECORD_SOCKET");
        zrc_conn *c = NULL;
        int r = 0;

        c = conn_new();
        if (!c) {
                if (ret_error)
                        error_set(ret_error, ENOMEM, "out of memory for a connection");
                return -ENOMEM;
        }

        if (!socket_path && env && env[0])
                socket_path = env;
        if (socket_path) {
                if (strlen(socket_path) >= ZRC_SOCKET_PATH_MAX) {
                        r = conn_fail(c, ENAMETOOLONG, "socket path too long: %s", socket_path);
                        goto fail;
                }
                r = connect_trusted(c, socket_path, CONN_TRUST_EXPLICIT, why, sizeof(why));
                if (r == -EPERM) {
                        conn_fail(c, r, "%s", why);
                        goto fail;
                }
                if (r < 0) {
                        conn_fail(c, r, "cannot connect to zrecordd at %s: %s", socket_path,
                                  strerror(-r));
                        goto fail;
                }
                memcpy(c->path, socket_path, strlen(socket_path) + 1);
        } else {
                size_t n = default_paths(candidates, kinds);
                char refusal[ZRC_ERROR_MESSAGE_MAX] = "";
                int first = 0;

                /* A refused candidate is passed over (nothing was sent to it);
                 * if no other answers, the refusal is the error. */
                for (size_t i = 0; i < n; i++) {
                        r = connect_trusted(c, candidates[i], kinds[i], why, sizeof(why));
                        if (r == 0) {
                                memcpy(c->path, candidates[i], sizeof(c->path));
                                break;
                        }
                        if (r == -EPERM && !refusal[0])
                                snprintf(refusal, sizeof(refusal), "%s", why);
                        /* a socket that exists and refuses says more than a
                         * missing one */
                        if (!first || (first == -ENOENT && r != -ENOENT))
                                first = r;
                }
                if (c->fd < 0 && refusal[0]) {
                        r = conn_fail(c, EPERM, "%s", refusal);
                        goto fail;
                }
                if (c->fd < 0) {
                        r = first;
                        conn_fail(c, r, "cannot connect to zrecordd (%s); tried %s%s%s%s%s",
                                  strerror(-r), candidates[0], n > 1 ? ", " : "",
                                  n > 1 ? candidates[1] : "", n > 2 ? ", " : "",
                                  n > 2 ? candidates[2] : "");
                        goto fail;
                }
        }

        r = hello(c);
        if (r < 0)
                goto fail;
        *ret = c;
        return 0;

fail:
        if (ret_error)
                *ret_error = c->error;
        zrc_disconnect(c);
        return r < 0 ? r : -EIO;
}

void zrc_interrupt(zrc_conn *c) {
        int saved = errno; /* a signal handler must leave errno as it found it */

        if (c && c->fd >= 0)
                (void)shutdown(c->fd, SHUT_RDWR);
        errno = saved;
}

zrc_conn *zrc_disconnect(zrc_conn *c) {
        if (!c)
                return NULL;
        while (c->loaders)
                loader_free(c->loaders, false);
        while (c->sets)
                set_free(c->sets, false);
        while (c->datasets)
                dataset_free(c->datasets, false);
        while (c->events_head) {
                conn_event *e = c->events_head;

                c->events_head = e->next;
                conn_event_free(e);
        }
        if (c->fd >= 0)
                close(c->fd);
        zr_wire_writer_destroy(&c->writer);
        free(c);
        return NULL;
}
