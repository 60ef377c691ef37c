/* conn.c: framed, descriptor-passing transport over a Unix stream socket on a
 * libevent loop. See conn.h for the contract.
 *
 * Every close goes through one deferred event, so on_close() always runs from the
 * loop with nothing of the conn on the stack, and the owner may free the conn in
 * it. Reading stops while the owner says so (a request in flight), which keeps
 * replies in request order without buffering more than one frame per client.
 */
#include "server/conn.h"

#include <errno.h>
#include <event2/event.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "util/fifo.h"

#define FRAME_PREFIX 4
#define INPUT_INITIAL (64 * 1024) /* most frames are tiny; grows to the frame limit */

typedef struct outframe {
        struct outframe *next;
        size_t len, off;          /* bytes of data, bytes already sent */
        int fds[ZR_CONN_MAX_FDS_OUT];
        size_t nfds;              /* sent with the first byte, then closed */
        uint8_t data[];           /* prefix + body */
} outframe;

struct zr_conn {
        int fd;
        struct event *ev_read, *ev_write, *ev_close, *ev_frame;
        zr_conn_limits limits;
        const zr_conn_ops *ops;
        void *userdata;
        pid_t pid;
        uid_t uid;
        gid_t gid;

        uint8_t *in;
        size_t in_len, in_cap;
        int fds[ZR_CONN_MAX_PENDING_FDS];
        size_t fds_end[ZR_CONN_MAX_PENDING_FDS]; /* in-buffer end of the read that brought each */
        size_t nfds;
        size_t frame_nfds;        /* of the frame being dispatched: the oldest this many */

        outframe *out_head, *out_tail;
        uint64_t out_bytes;

        int reading;              /* the owner wants frames */
        int waiting;              /* may_read() said no between frames: until a kick */
        int frame_timer;          /* ev_frame is armed */
        int in_send;              /* inside zr_conn_send: no on_drain re-entry */
        int dispatching;          /* inside on_frame: no re-entry */
        int flush_then_close;
        int closing;
        enum zr_conn_close_reason reason;
        int error;
};

static void conn_schedule_close(zr_conn *c, enum zr_conn_close_reason reason, int error) {
        if (c->closing)
                return;
        c->closing = 1;
        c->reason = reason;
        c->error = error;
        event_del(c->ev_read);
        event_del(c->ev_write);
        if (c->frame_timer)
                event_del(c->ev_frame);
        c->frame_timer = 0;
        event_active(c->ev_close, EV_TIMEOUT, 0);
}

static void close_cb(evutil_socket_t fd, short what, void *arg) {
        zr_conn *c = arg;
        /* Reading stops now; writing stays possible for zr_conn_send_final()
         * inside on_close(), and ends when the owner frees the conn. */
        if (c->fd >= 0)
                shutdown(c->fd, SHUT_RD);
        c->ops->on_close(c, c->reason, c->error, c->userdata); /* may free c */
}

/* The frame timer runs while a frame is begun and the owner reads; it starts
 * again whenever a frame completes. */
static void update_frame_timer(zr_conn *c) {
        bool want = c->limits.frame_timeout_ms && !c->closing && c->reading &&
                    !c->flush_then_close && c->in_len > 0;
        if (!want) {
                if (c->frame_timer)
                        event_del(c->ev_frame);
                c->frame_timer = 0;
        } else if (!c->frame_timer) {
                struct timeval tv = {(time_t)(c->limits.frame_timeout_ms / 1000),
                                     (suseconds_t)(c->limits.frame_timeout_ms % 1000 * 1000)};
                event_add(c->ev_frame, &tv);
                c->frame_timer = 1;
        }
}

static void frame_timeout_cb(evutil_socket_t fd, short what, void *arg) {
        zr_conn *c = arg;
        c->frame_timer = 0;
        conn_schedule_close(c, ZR_CONN_FRAME_TIMEOUT, (int)(c->limits.frame_timeout_ms / 1000));
}

static void update_read_event(zr_conn *c) {
        if (c->closing)
                return;
        if (c->reading && !c->flush_then_close && !c->waiting)
                event_add(c->ev_read, NULL);
        else
                event_del(c->ev_read);
        update_frame_timer(c);
}

/* Bytes that complete the first frame in the buffer (0: it is complete, or
 * none is begun). */
static size_t frame_rest(const zr_conn *c) {
        if (c->in_len == 0)
                return 0;
        if (c->in_len < FRAME_PREFIX)
                return FRAME_PREFIX - c->in_len;
        uint32_t len = (uint32_t)c->in[0] | (uint32_t)c->in[1] << 8 | (uint32_t)c->in[2] << 16 |
                       (uint32_t)c->in[3] << 24;
        size_t whole = FRAME_PREFIX + (size_t)len;
        return whole > c->in_len ? whole - c->in_len : 0;
}

static int take_fds(zr_conn *c, struct msghdr *mh, size_t end) {
        int r = 0;
        for (struct cmsghdr *cm = CMSG_FIRSTHDR(mh); cm; cm = CMSG_NXTHDR(mh, cm)) {
                if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS)
                        continue;
                size_t n = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
                int *fds = (int *)CMSG_DATA(cm);
                for (size_t i = 0; i < n; i++) {
                        if (c->nfds < ZR_CONN_MAX_PENDING_FDS) {
                                c->fds_end[c->nfds] = end;
                                c->fds[c->nfds++] = fds[i];
                        } else {
                                close(fds[i]); /* over the quota: never kept */
                                r = -EMFILE;
                        }
                }
        }
        if (mh->msg_flags & MSG_CTRUNC)
                r = -EBADMSG;
        return r;
}

/* Hands every complete frame in the buffer to the owner, while it wants them. */
static void dispatch_frames(zr_conn *c) {
        size_t pos = 0;
        c->dispatching = 1;
        while (!c->closing && c->reading && !c->flush_then_close && c->in_len - pos >= FRAME_PREFIX) {
                const uint8_t *p = c->in + pos;
                uint32_t len = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
                               (uint32_t)p[3] << 24;
                if (len > c->limits.max_frame) {
                        conn_schedule_close(c, ZR_CONN_FRAME_TOO_BIG, (int)len);
                        break;
                }
                if (c->in_len - pos < FRAME_PREFIX + (size_t)len)
                        break;
                pos += FRAME_PREFIX + (size_t)len;
                c->frame_nfds = 0;
                while (c->frame_nfds < c->nfds && c->fds_end[c->frame_nfds] <= pos)
                        c->frame_nfds++;
                if (c->ops->on_frame(c, p + FRAME_PREFIX, len, c->userdata) < 0)
                        conn_schedule_close(c, ZR_CONN_BY_OWNER, 0);
        }
        c->dispatching = 0;
        c->frame_nfds = 0;
        if (pos > 0) {
                memmove(c->in, c->in + pos, c->in_len - pos);
                c->in_len -= pos;
                for (size_t i = 0; i < c->nfds; i++)
                        c->fds_end[i] = c->fds_end[i] > pos ? c->fds_end[i] - pos : 0;
                /* a frame completed: the next one's time starts now */
                if (c->frame_timer)
                        event_del(c->ev_frame);
                c->frame_timer = 0;
        }
        update_frame_timer(c);
}

/* After a read: the owner's accounting. */
static void input_done(zr_conn *c) {
        if (c->ops->on_input && !c->closing)
                c->ops->on_input(c, c->userdata);
}

static void read_cb(evutil_socket_t fd, short what, void *arg) {
        zr_conn *c = arg;
        /* Room for the frame being assembled: its prefix tells how much. */
        size_t need = INPUT_INITIAL;
        if (c->in_len >= FRAME_PREFIX) {
                uint32_t len = (uint32_t)c->in[0] | (uint32_t)c->in[1] << 8 |
                               (uint32_t)c->in[2] << 16 | (uint32_t)c->in[3] << 24;
                if (len <= c->limits.max_frame && FRAME_PREFIX + (size_t)len > need)
                        need = FRAME_PREFIX + (size_t)len;
        }
        if (need > c->in_cap) {
                uint8_t *n = realloc(c->in, need);
                if (!n) {
                        conn_schedule_close(c, ZR_CONN_IO_ERROR, ENOMEM);
                        return;
                }
                c->in = n;
                c->in_cap = need;
        }
        size_t room = c->in_cap - c->in_len;
        /* The owner has no room for more input: only the rest of the frame
         * begun, so that it completes, and no byte of the next one. */
        if (c->ops->may_read && !c->ops->may_read(c, c->userdata)) {
                size_t rest = frame_rest(c);
                if (rest < room)
                        room = rest;
                if (room == 0) {
                        dispatch_frames(c);
                        if (c->in_len == 0 && !c->closing) {
                                c->waiting = 1;
                                update_read_event(c);
                        }
                        input_done(c);
                        return;
                }
        }
        if (room == 0) { /* a full buffer holds a complete frame */
                dispatch_frames(c);
                input_done(c);
                return;
        }
        union {
                struct cmsghdr align;
                char buf[CMSG_SPACE(sizeof(int) * ZR_CONN_MAX_FDS_PER_READ)];
        } control;
        struct iovec iov = {c->in + c->in_len, room};
        struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1,
                            .msg_control = control.buf, .msg_controllen = sizeof(control.buf)};
        ssize_t n = recvmsg(c->fd, &mh, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
        if (n < 0) {
                if (errno == EAGAIN || errno == EINTR) {
                        dispatch_frames(c); /* resumed with frames already buffered */
                        input_done(c);
                        return;
                }
                conn_schedule_close(c, ZR_CONN_IO_ERROR, errno);
                return;
        }
        /* PROTOCOL.md section 5: the descriptors of a recvmsg() belong to the frame
         * holding the last byte it returned. */
        int r = take_fds(c, &mh, c->in_len + (n > 0 ? (size_t)n : 0));
        if (r < 0) {
                conn_schedule_close(c, ZR_CONN_FD_ERROR, -r);
                return;
        }
        if (n == 0) {
                conn_schedule_close(c, ZR_CONN_EOF, 0);
                return;
        }
        c->in_len += (size_t)n;
        dispatch_frames(c);
        input_done(c);
}

static void flush(zr_conn *c) {
        while (c->out_head) {
                outframe *f = c->out_head;
                union {
                        struct cmsghdr align;
                        char buf[CMSG_SPACE(sizeof(int) * ZR_CONN_MAX_FDS_OUT)];
                } control;
                struct iovec iov = {f->data + f->off, f->len - f->off};
                struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1};
                if (f->off == 0 && f->nfds > 0) {
                        mh.msg_control = control.buf;
                        mh.msg_controllen = CMSG_SPACE(sizeof(int) * f->nfds);
                        struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
                        cm->cmsg_level = SOL_SOCKET;
                        cm->cmsg_type = SCM_RIGHTS;
                        cm->cmsg_len = CMSG_LEN(sizeof(int) * f->nfds);
                        memcpy(CMSG_DATA(cm), f->fds, sizeof(int) * f->nfds);
                }
                ssize_t n = sendmsg(c->fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
                if (n < 0) {
                        if (errno == EAGAIN || errno == EINTR) {
                                event_add(c->ev_write, NULL);
                                return;
                        }
                        conn_schedule_close(c, ZR_CONN_IO_ERROR, errno);
                        return;
                }
                if (f->off == 0) {
                        for (size_t i = 0; i < f->nfds; i++)
                                close(f->fds[i]);
                        f->nfds = 0;
                }
                f->off += (size_t)n;
                c->out_bytes -= (uint64_t)n;
                if (f->off < f->len)
                        continue;
                ZR_FIFO_SHIFT(c->out_head, c->out_tail, f, next);
                free(f);
        }
        event_del(c->ev_write);
        if (c->flush_then_close) {
                conn_schedule_close(c, ZR_CONN_BY_OWNER, 0);
                return;
        }
        if (c->ops->on_drain && !c->in_send)
                c->ops->on_drain(c, c->userdata);
}

static void write_cb(evutil_socket_t fd, short what, void *arg) {
        flush(arg);
}

int zr_conn_new(struct event_base *base, int fd, const zr_conn_limits *limits,
                const zr_conn_ops *ops, void *userdata, zr_conn **ret) {
        zr_conn *c = calloc(1, sizeof(*c));
        if (!c) {
                close(fd);
                return -ENOMEM;
        }
        c->fd = fd;
        c->limits = *limits;
        c->ops = ops;
        c->userdata = userdata;
        c->reading = 1;
        c->pid = -1;
        c->uid = (uid_t)-1;
        c->gid = (gid_t)-1;
        struct ucred cred;
        socklen_t len = sizeof(cred);
        if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0) {
                c->pid = cred.pid;
                c->uid = cred.uid;
                c->gid = cred.gid;
        }
        int fl = fcntl(fd, F_GETFL);
        if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0)
                goto fail;
        c->ev_read = event_new(base, fd, EV_READ | EV_PERSIST, read_cb, c);
        c->ev_write = event_new(base, fd, EV_WRITE | EV_PERSIST, write_cb, c);
        c->ev_close = event_new(base, -1, 0, close_cb, c);
        c->ev_frame = event_new(base, -1, 0, frame_timeout_cb, c);
        if (!c->ev_read || !c->ev_write || !c->ev_close || !c->ev_frame)
                goto fail;
        if (event_add(c->ev_read, NULL) < 0)
                goto fail;
        *ret = c;
        return 0;
fail:
        zr_conn_free(c);
        return -ENOMEM;
}

zr_conn *zr_conn_free(zr_conn *c) {
        if (!c)
                return NULL;
        if (c->ev_read)
                event_free(c->ev_read);
        if (c->ev_write)
                event_free(c->ev_write);
        if (c->ev_close)
                event_free(c->ev_close);
        if (c->ev_frame)
                event_free(c->ev_frame);
        if (c->fd >= 0)
                close(c->fd);
        zr_conn_drop_fds(c);
        while (c->out_head) {
                outframe *f = c->out_head;
                c->out_head = f->next;
                for (size_t i = 0; i < f->nfds; i++)
                        close(f->fds[i]);
                free(f);
        }
        free(c->in);
        free(c);
        return NULL;
}

int zr_conn_send(zr_conn *c, const void *body, size_t len, const int *fds, size_t nfds) {
        int r;
        if (c->closing || c->flush_then_close) {
                r = -EPIPE;
                goto fail;
        }
        if (len > UINT32_MAX) {
                r = -E2BIG;
                goto fail;
        }
        if (nfds > ZR_CONN_MAX_FDS_OUT) {
                r = -EINVAL;
                goto fail;
        }
        outframe *f = malloc(sizeof(*f) + FRAME_PREFIX + len);
        if (!f) {
                r = -ENOMEM;
                goto fail;
        }
        f->len = FRAME_PREFIX + len;
        f->off = 0;
        f->nfds = nfds;
        for (size_t i = 0; i < nfds; i++)
                f->fds[i] = fds[i];
        f->data[0] = (uint8_t)len;
        f->data[1] = (uint8_t)(len >> 8);
        f->data[2] = (uint8_t)(len >> 16);
        f->data[3] = (uint8_t)(len >> 24);
        if (len)
                memcpy(f->data + FRAME_PREFIX, body, len);
        ZR_FIFO_PUSH(c->out_head, c->out_tail, f, next);
        c->out_bytes += f->len;
        if (c->out_bytes > c->limits.max_output) {
                conn_schedule_close(c, ZR_CONN_OUTPUT_FULL, 0);
                return -EPIPE;
        }
        if (c->out_head == f) { /* nothing was waiting: try to send now */
                c->in_send = 1;
                flush(c);
                c->in_send = 0;
        }
        return 0;
fail:
        for (size_t i = 0; i < nfds; i++)
                close(fds[i]);
        return r;
}

void zr_conn_send_final(zr_conn *c, const void *body, size_t len) {
        if (c->fd < 0 || c->out_head || len > UINT32_MAX)
                return;
        uint8_t prefix[FRAME_PREFIX] = {(uint8_t)len, (uint8_t)(len >> 8), (uint8_t)(len >> 16),
                                        (uint8_t)(len >> 24)};
        struct iovec iov[2] = {{prefix, FRAME_PREFIX}, {(void *)body, len}};
        struct msghdr mh = {.msg_iov = iov, .msg_iovlen = 2};
        (void)sendmsg(c->fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
}

int zr_conn_take_fd(zr_conn *c, int *ret_fd) {
        if (c->nfds == 0)
                return -ENOENT;
        *ret_fd = c->fds[0];
        memmove(c->fds, c->fds + 1, (c->nfds - 1) * sizeof(int));
        memmove(c->fds_end, c->fds_end + 1, (c->nfds - 1) * sizeof(size_t));
        c->nfds--;
        if (c->frame_nfds > 0)
                c->frame_nfds--;
        return 0;
}

size_t zr_conn_pending_fds(const zr_conn *c) {
        return c->nfds;
}

size_t zr_conn_input_bytes(const zr_conn *c) {
        return c->in_len;
}

void zr_conn_kick(zr_conn *c) {
        if (!c->waiting || c->closing)
                return;
        c->waiting = 0;
        update_read_event(c);
        /* may_read() is asked again on the next read; the socket may hold
         * input already, which the level-triggered event reports */
}

size_t zr_conn_frame_fds(const zr_conn *c) {
        return c->frame_nfds;
}

size_t zr_conn_drop_fds(zr_conn *c) {
        size_t n = c->nfds;
        for (size_t i = 0; i < n; i++)
                close(c->fds[i]);
        c->nfds = 0;
        c->frame_nfds = 0;
        return n;
}

void zr_conn_set_reading(zr_conn *c, int on) {
        int was = c->reading;
        c->reading = !!on;
        update_read_event(c);
        /* Frames already buffered would wait for more bytes that may never come. */
        if (on && !was && !c->dispatching && !c->closing && c->in_len >= FRAME_PREFIX)
                event_active(c->ev_read, EV_READ, 0);
}

void zr_conn_close(zr_conn *c, int now) {
        if (now || !c->out_head) {
                conn_schedule_close(c, ZR_CONN_BY_OWNER, 0);
                return;
        }
        c->flush_then_close = 1;
        update_read_event(c);
}

void zr_conn_peer(const zr_conn *c, pid_t *ret_pid, uid_t *ret_uid, gid_t *ret_gid) {
        if (ret_pid)
                *ret_pid = c->pid;
        if (ret_uid)
                *ret_uid = c->uid;
        if (ret_gid)
                *ret_gid = c->gid;
}

uint64_t zr_conn_output_bytes(const zr_conn *c) {
        return c->out_bytes;
}
