/* session.c: one client's session (session.h): frames, the request queue,
 * strikes and HELLO, and the request plumbing handlers use (request.h).
 *
 * Each frame is copied out of the connection, decoded (bounded, wire.h),
 * validated against its message table (message.h) and has its descriptors
 * counted before anything acts on it; the request then waits in the session's
 * FIFO. One request executes at a time: the dispatch table (dispatch.c) runs
 * its handler, which answers at once or hands the request to a job, and the
 * next starts when it completes. Faults (frames that are not a request) are
 * answered at once and count as strikes; every error and fault is written by
 * proto's zr_msg_write_error().
 *
 * It assumes the loop thread; it does not know about stores beyond handing
 * references around (registry.h), nor about chunk files.
 */
#include "server/session.h"

#include <errno.h>
#include <stdatomic.h>
#include <event2/event.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "loader/loader.h"
#include "server/conn.h"
#include "server/log.h"
#include "server/request.h"

/* Unsent reply bytes above which the session stops reading requests until the
 * client catches up: a client that pipelines but does not read cannot make the
 * daemon buffer more than this plus ZR_PIPELINE_MAX replies. */
#define OUTPUT_PAUSE_BYTES (UINT64_C(4) << 20)
/* Request bodies read and not yet executed above which the session stops
 * reading: ZR_PIPELINE_MAX requests of a full frame each would pin 64 MiB per
 * client; real pipelines are small requests. */
#define QUEUE_PAUSE_BYTES (UINT64_C(4) << 20)

/* Log lines any client causes at will (faults, errors, connections): bounded,
 * so a client that misbehaves in a loop cannot flood the journal (20 lines in
 * 10 s of each kind, then a count of the lines dropped). */
static zr_ratelimit rl_fault = ZR_RATELIMIT(10, 20);
static zr_ratelimit rl_error = ZR_RATELIMIT(10, 20);
static zr_ratelimit rl_connect = ZR_RATELIMIT(10, 20);
static zr_ratelimit rl_disconnect = ZR_RATELIMIT(10, 20);

/* The features this daemon has; a session's are a bit set over this list. */
static const char *const daemon_features[] = {
        ZR_FEATURE_MSSET, ZR_FEATURE_DICT, ZR_FEATURE_VERIFY, ZR_FEATURE_LOADER,
        ZR_FEATURE_CONVERT, ZR_FEATURE_MIXTURE, ZR_FEATURE_STEPS_OF, ZR_FEATURE_METRICS,
        ZR_FEATURE_STRIDE, ZR_FEATURE_REMOTE, ZR_FEATURE_PACK, ZR_FEATURE_IMAGE,
        ZR_FEATURE_APPEND_LENGTHS, ZR_FEATURE_CTLRING,
};
#define N_FEATURES (sizeof(daemon_features) / sizeof(daemon_features[0]))

/* The bit of feature name[0..len), or 0 if the daemon has no such feature. */
static unsigned feature_bit(const char *name, size_t len) {
        for (size_t f = 0; f < N_FEATURES; f++)
                if (strlen(daemon_features[f]) == len && memcmp(daemon_features[f], name, len) == 0)
                        return 1u << f;
        return 0;
}

struct zr_session {
        zr_server *srv;
        zr_user *user;            /* its uid's account: one connection charged */
        zr_conn *conn;
        struct event *ev_timer;   /* the HELLO timeout, then the idle timeout */
        zr_session *next;
        uint64_t serial;
        pid_t pid;
        uid_t uid;
        gid_t gid;
        char name[64];

        unsigned refs;
        bool gone, closing, draining, hello;
        unsigned features;
        struct {
                uint32_t frame_max, handles_max, loaders_max;
                uint64_t shm_max;
        } lim;
        unsigned strikes;
        uint64_t requests;

        zr_request *q_head, *q_tail;
        uint64_t queued_bytes;    /* bodies of the requests in the queue */
        uint64_t charged_fds, charged_bytes; /* in flight, as charged to the uid */
        unsigned unanswered;      /* read and not yet answered, the running one included */
        zr_request *running;

        zr_handles handles;
};

/* ---- small helpers ------------------------------------------------------- */

static bool code_is_strike(int code) {
        return code == ZR_E_PROTO || code == ZR_E_UNKNOWN || code == ZR_E_NO_HELLO ||
               code == ZR_E_LIMIT || code == ZR_E_BAD_FD;
}

static void close_fds(int *fds, unsigned n) {
        for (unsigned i = 0; i < n; i++)
                if (fds[i] >= 0) {
                        close(fds[i]);
                        fds[i] = -1;
                }
}

static zr_request *request_free(zr_request *rq) {
        if (!rq)
                return NULL;
        close_fds(rq->fds, rq->nfds);
        if (rq->work_bytes)
                zr_user_release(rq->session->user, ZR_USER_WORK, rq->work_bytes);
        if (rq->state_free)
                rq->state_free(rq->state);
        zr_wire_body_free(rq->body);
        free(rq->bytes);
        free(rq);
        return NULL;
}

static void session_unref(zr_session *c) {
        if (--c->refs > 0)
                return;
        zr_user_unref(c->user);
        free(c);
}

/* The descriptors a request still holds (a handler takes or closes them). */
static unsigned request_fds(const zr_request *rq) {
        unsigned n = 0;
        for (unsigned i = 0; rq && i < rq->nfds; i++)
                n += rq->fds[i] >= 0;
        return n;
}

/* Brings the uid's account in step with what the connection holds in flight:
 * the descriptors and bytes of a frame begun and of the queued requests (a
 * request that runs keeps its descriptors until its handler takes them). A
 * walk of at most ZR_PIPELINE_MAX requests: counted, not kept, so no handler
 * has to say when it takes one. */
static void session_account(zr_session *c) {
        uint64_t fds = 0, bytes = 0;
        if (!c->gone) {
                fds = request_fds(c->running) + (c->conn ? zr_conn_pending_fds(c->conn) : 0);
                for (const zr_request *rq = c->q_head; rq; rq = rq->next)
                        fds += request_fds(rq);
                bytes = c->queued_bytes + (c->conn ? zr_conn_input_bytes(c->conn) : 0);
        }
        if (fds > c->charged_fds)
                zr_user_add(c->user, ZR_USER_FDS, fds - c->charged_fds);
        else
                zr_user_release(c->user, ZR_USER_FDS, c->charged_fds - fds);
        if (bytes > c->charged_bytes)
                zr_user_add(c->user, ZR_USER_BYTES, bytes - c->charged_bytes);
        else
                zr_user_release(c->user, ZR_USER_BYTES, c->charged_bytes - bytes);
        c->charged_fds = fds;
        c->charged_bytes = bytes;
}

static void session_update_reading(zr_session *c) {
        if (!c->conn || c->gone)
                return;
        session_account(c);
        bool on = !c->closing && !c->draining && c->unanswered < ZR_PIPELINE_MAX &&
                  c->queued_bytes <= QUEUE_PAUSE_BYTES &&
                  zr_conn_output_bytes(c->conn) <= OUTPUT_PAUSE_BYTES;
        zr_conn_set_reading(c->conn, on);
        zr_conn_kick(c->conn); /* room may have come back: may_read() is asked again */
}

/* Before the connection reads into a new frame: room for a whole frame's
 * descriptors on the connection (max-fds) and in the uid's account, and for
 * more request bytes in the uid's account. Without it the connection reads only
 * the rest of the frame it began, and waits for a release (users.h). */
static int may_read(zr_conn *conn, void *userdata) {
        zr_session *c = userdata;
        const zr_config *cfg = &c->srv->cfg;
        session_account(c);
        if (c->charged_fds + ZR_FDS_PER_FRAME_MAX > cfg->max_fds)
                return 0; /* its own requests free them, then it reads again */
        if (zr_user_room(c->user, ZR_USER_FDS) < ZR_FDS_PER_FRAME_MAX ||
            zr_user_room(c->user, ZR_USER_BYTES) == 0) {
                zr_users_want_wake(c->srv->users);
                return 0;
        }
        return 1;
}

static void on_input(zr_conn *conn, void *userdata) {
        session_account(userdata);
}

static void send_frame(zr_session *c, zr_wire_writer *w, int *fds, size_t nfds) {
        const uint8_t *frame;
        size_t size;
        zr_wire_error werr = {0};
        if (zr_wire_writer_finish(w, c->lim.frame_max, &frame, &size, &werr) < 0) {
                close_fds(fds, (unsigned)nfds);
                return;
        }
        if (!c->conn)
                close_fds(fds, (unsigned)nfds);
        else
                (void)zr_conn_send(c->conn, frame + ZR_FRAME_HEADER_SIZE,
                                   size - ZR_FRAME_HEADER_SIZE, fds, nfds);
        session_update_reading(c);
}

void zr_session_write_error(zr_wire_writer *w, bool fault, uint64_t id, int code,
                            const char *message) {
        zr_msg_write_error(w, fault, id, code, message);
        /* proto names only its own codes; PROTOCOL.md names errno values too */
        if (!zr_error_name(code))
                zr_wire_put_str(w, "name", zr_error_code_name(code));
}

/* A FAULT event with `msg`, a strike (for the striking codes), and a close
 * if `fatal` or at the last strike. */
static void fault(zr_session *c, int code, bool fatal, const char *msg) {
        if (c->closing || c->gone)
                return;
        zr_log_ratelimited(&rl_fault, LOG_NOTICE, "client %llu (pid %d): fault %s: %s",
                           (unsigned long long)c->serial, (int)c->pid, zr_error_code_name(code),
                           msg);
        zr_wire_writer w;
        zr_wire_writer_init(&w);
        zr_session_write_error(&w, true, 0, code, msg);
        send_frame(c, &w, NULL, 0);
        zr_wire_writer_destroy(&w);
        if (!fatal && code_is_strike(code) && ++c->strikes >= ZR_STRIKES_MAX) {
                char last[64];
                snprintf(last, sizeof(last), "%u strikes: closing the connection", c->strikes);
                fault(c, ZR_E_LIMIT, true, last);
                return;
        }
        if (fatal) {
                c->closing = true;
                zr_conn_close(c->conn, 0);
        }
}

__attribute__((format(printf, 4, 5)))
static void session_fault(zr_session *c, int code, bool fatal, const char *fmt, ...) {
        char msg[ZR_ERROR_MESSAGE_MAX];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, sizeof(msg), fmt, ap);
        va_end(ap);
        fault(c, code, fatal, msg);
}

static void session_error_reply(zr_session *c, zr_request *rq) {
        int code = rq->err.code ? rq->err.code : EIO;
        const char *msg = rq->err.code ? rq->err.message : "internal error";
        if (c->gone || c->closing)
                return;
        zr_log_ratelimited(&rl_error, code_is_strike(code) ? LOG_NOTICE : LOG_INFO,
                           "client %llu (pid %d): %s id %llu: %s: %s",
                           (unsigned long long)c->serial, (int)c->pid,
                           zr_msg_kind_name(rq->kind) ? zr_msg_kind_name(rq->kind) : "request",
                           (unsigned long long)rq->id, zr_error_code_name(code), msg);
        zr_wire_writer w;
        zr_wire_writer_init(&w);
        zr_session_write_error(&w, false, rq->id, code, msg);
        if (rq->has_needed)
                zr_wire_put_u64(&w, "needed", rq->needed);
        if (rq->has_index)
                zr_wire_put_u64(&w, "index", rq->index);
        send_frame(c, &w, NULL, 0);
        zr_wire_writer_destroy(&w);
        if (code_is_strike(code) && ++c->strikes >= ZR_STRIKES_MAX)
                session_fault(c, ZR_E_LIMIT, true, "%u strikes: closing the connection",
                              c->strikes);
}

/* After HELLO: a connection with no handle open and no request read and not
 * answered is idle; it is closed after idle-timeout seconds of that. */
static void session_check_idle(zr_session *c) {
        uint64_t sec = c->srv->cfg.idle_timeout_sec;
        if (!c->ev_timer || !c->hello)
                return;
        if (sec && c->handles.n == 0 && c->unanswered == 0 && !c->closing && !c->draining) {
                struct timeval tv = {(time_t)sec, 0};
                event_add(c->ev_timer, &tv);
        } else {
                event_del(c->ev_timer);
        }
}

static void timer_cb(evutil_socket_t fd, short what, void *arg) {
        zr_session *c = arg;
        if (!c->hello)
                session_fault(c, ZR_E_LIMIT, true, "no hello within %llu s: closing the connection",
                              (unsigned long long)c->srv->cfg.hello_timeout_sec);
        else
                session_fault(c, ZR_E_LIMIT, true, "idle for %llu s with no handle open: closing "
                              "the connection", (unsigned long long)c->srv->cfg.idle_timeout_sec);
}

/* A request is answered: forget it, maybe read more. */
static void request_finished(zr_session *c, zr_request *rq) {
        request_free(rq);
        c->unanswered--;
        c->requests++;
        c->srv->counters.requests++;
        session_update_reading(c);
        session_check_idle(c);
        if (c->draining && !c->q_head && !c->running && !c->closing) {
                c->closing = true;
                zr_conn_close(c->conn, 0);
        }
}

/* ---- the queue ----------------------------------------------------------- */

/* What belongs to the connection, then the request's handler (dispatch.c). */
static int dispatch(zr_request *rq) {
        zr_session *c = rq->session;
        if (rq->pre_code)
                return -rq->pre_code;
        if (c->draining)
                return zr_request_fail(rq, ZR_E_SHUTDOWN, "the daemon is shutting down");
        if (!c->hello && rq->kind != ZR_MSG_HELLO)
                return zr_request_fail(rq, ZR_E_NO_HELLO, "the first request must be hello");
        if (c->hello && rq->kind == ZR_MSG_HELLO)
                return zr_request_fail(rq, ZR_E_PROTO, "a second hello");
        return zr_request_dispatch(rq);
}

static void session_pump(zr_session *c) {
        while (!c->running && c->q_head && !c->gone && !c->closing) {
                zr_request *rq = c->q_head;
                c->q_head = rq->next;
                if (!c->q_head)
                        c->q_tail = NULL;
                rq->next = NULL;
                c->queued_bytes -= rq->len;
                int r = dispatch(rq);
                if (r == ZR_RQ_PENDING) {
                        c->running = rq;
                        return;
                }
                if (r < 0)
                        session_error_reply(c, rq);
                request_finished(c, rq);
        }
}

static void enqueue(zr_session *c, zr_request *rq) {
        if (c->q_tail)
                c->q_tail->next = rq;
        else
                c->q_head = rq;
        c->q_tail = rq;
        c->queued_bytes += rq->len;
        c->unanswered++;
        session_update_reading(c);
        if (c->hello)
                event_del(c->ev_timer); /* busy: not idle */
        session_pump(c);
}

/* ---- request.h ----------------------------------------------------------- */

zr_server *zr_request_server(const zr_request *rq) {
        return rq->session->srv;
}

int zr_request_fail(zr_request *rq, int code, const char *fmt, ...) {
        va_list ap;
        if (rq->err.code == 0) {
                rq->err.code = code;
                va_start(ap, fmt);
                vsnprintf(rq->err.message, sizeof(rq->err.message), fmt, ap);
                va_end(ap);
        }
        return -code;
}

zr_handle *zr_request_handle(zr_request *rq, const char *field, uint32_t id, unsigned types) {
        return zr_handles_get(&rq->session->handles, field, id, types, &rq->err);
}

bool zr_request_has_feature(const zr_request *rq, const char *name) {
        return rq->session->features & feature_bit(name, strlen(name));
}

void zr_request_fault(zr_request *rq, int code, const char *fmt, ...) {
        char msg[ZR_ERROR_MESSAGE_MAX];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, sizeof(msg), fmt, ap);
        va_end(ap);
        fault(rq->session, code, false, msg);
}

int zr_request_add_handle(zr_request *rq, const zr_handle *h) {
        zr_session *c = rq->session;
        return zr_handles_add(&c->handles, h, c->lim.handles_max, &rq->err);
}

void zr_request_close_handle(zr_request *rq, uint32_t id) {
        zr_handles_close(&rq->session->handles, id);
}

int zr_request_shm_reserve(zr_request *rq, uint64_t bytes) {
        zr_session *c = rq->session;
        return zr_handles_shm_reserve(&c->handles, bytes, c->lim.shm_max, &rq->err);
}

void zr_request_shm_release(zr_request *rq, uint64_t bytes) {
        zr_handles_shm_release(&rq->session->handles, bytes);
}

int zr_request_take_fd(zr_request *rq, unsigned i) {
        int fd = rq->fds[i];
        rq->fds[i] = -1;
        return fd;
}

int zr_request_loader_room(zr_request *rq) {
        const zr_session *c = rq->session;
        if (c->handles.nloaders >= c->lim.loaders_max)
                return zr_request_fail(rq, ZR_E_LIMIT, "%u loaders open: the limit",
                                       c->handles.nloaders);
        return 0;
}

uint64_t zr_request_shm_left(const zr_request *rq) {
        const zr_session *c = rq->session;
        return zr_handles_shm_left(&c->handles, c->lim.shm_max);
}

zr_session *zr_request_session(const zr_request *rq) {
        return rq->session;
}

void zr_session_send_event(zr_session *c, zr_wire_writer *w, int *fds, size_t nfds) {
        if (c->gone || c->closing || !c->conn) {
                close_fds(fds, (unsigned)nfds);
                return;
        }
        send_frame(c, w, fds, nfds);
}

bool zr_session_gone(const zr_session *c) {
        return c->gone;
}

void zr_session_put_loaders(zr_session *c, zr_wire_writer *w) {
        for (uint32_t i = 0; i < c->handles.n; i++)
                if (c->handles.v[i].type == ZR_HANDLE_LOADER)
                        zr_lhandle_put_status(c->handles.v[i].loader, w, c->pid);
}

uid_t zr_request_uid(const zr_request *rq) {
        return rq->session->uid;
}

pid_t zr_request_pid(const zr_request *rq) {
        return rq->session->pid;
}

uint32_t zr_request_frame_max(const zr_request *rq) {
        return rq->session->lim.frame_max;
}

bool zr_request_orphaned(const zr_request *rq) {
        return rq->session->gone || rq->session->closing;
}

void zr_reply_begin(zr_request *rq, zr_wire_writer *w) {
        zr_wire_writer_init(w);
        zr_wire_writer_begin_message(w, "ok", true, rq->id);
}

int zr_reply_send(zr_request *rq, zr_wire_writer *w, int *fds, size_t nfds) {
        zr_session *c = rq->session;
        const uint8_t *frame;
        size_t size;
        zr_wire_error werr = {0};
        int r = zr_wire_writer_finish(w, c->lim.frame_max, &frame, &size, &werr);
        if (r < 0) {
                close_fds(fds, (unsigned)nfds);
                zr_wire_writer_destroy(w);
                zr_request_fail(rq, r == -ZR_E_LIMIT ? ZR_E_LIMIT : ENOMEM,
                                "the reply does not fit the frame limit: %s", werr.message);
                session_error_reply(c, rq);
                return ZR_RQ_DONE;
        }
        if (c->gone || c->closing)
                close_fds(fds, (unsigned)nfds);
        else
                (void)zr_conn_send(c->conn, frame + ZR_FRAME_HEADER_SIZE,
                                   size - ZR_FRAME_HEADER_SIZE, fds, nfds);
        zr_wire_writer_destroy(w);
        session_update_reading(c);
        return ZR_RQ_DONE;
}

int zr_reply_empty(zr_request *rq) {
        zr_wire_writer w;
        zr_reply_begin(rq, &w);
        return zr_reply_send(rq, &w, NULL, 0);
}

/* A job's completion on the loop: the loaders hear of its mutation first. */
static void request_job_done(zr_job *job) {
        zr_request *rq = (zr_request *)job;
        for (uint32_t i = 0; i < rq->mutation.nlocked; i++) {
                zr_entry *e = rq->mutation.locked[i];
                bool was_read_only = e->read_only;
                zr_entry_update(e);
                if (was_read_only && !e->read_only)
                        zr_log(LOG_INFO, "pid %d made store %llu writable",
                               (int)zr_request_pid(rq), (unsigned long long)zr_entry_id(e));
                zr_server_dataset_mutated(rq->session->srv, e);
        }
        rq->done(job);
}

int zr_request_work_charge(zr_request *rq, uint64_t bytes, const char *what) {
        zr_error err = {0};
        int r = zr_user_charge(rq->session->user, ZR_USER_WORK, bytes, &err);
        if (r < 0)
                return zr_request_fail(rq, ZR_E_LIMIT, "%s needs %llu bytes of working memory: "
                                       "%s (max-work-mem-per-uid, max-work-mem-total)", what,
                                       (unsigned long long)bytes, err.message);
        rq->work_bytes += bytes;
        return 0;
}

void *zr_request_state(zr_request *rq, size_t size, void (*state_free)(void *state)) {
        rq->state = calloc(1, size);
        if (!rq->state) {
                zr_request_fail(rq, ENOMEM, "no memory");
                return NULL;
        }
        rq->state_free = state_free;
        return rq->state;
}

int zr_request_submit(zr_request *rq, zr_job_fn run, zr_job_fn done) {
        rq->job.run = run;
        rq->job.done = request_job_done;
        rq->done = done;
        rq->session->refs++;
        /* in its uid's queue: the pool serves the uids in turn (work.h) */
        zr_work_submit_to(rq->session->srv->work, &rq->session->user->jobs, &rq->job);
        return ZR_RQ_PENDING;
}

static void reply_done(zr_job *job) {
        zr_request *rq = (zr_request *)job;
        int r = rq->result;
        if (r == 0 && !zr_request_orphaned(rq)) {
                zr_wire_writer w;
                zr_reply_begin(rq, &w);
                if (rq->reply)
                        rq->reply(rq, &w);
                r = zr_reply_send(rq, &w, NULL, 0);
        }
        zr_request_complete(rq, r);
}

int zr_request_submit_reply(zr_request *rq, zr_job_fn run, zr_reply_fn reply) {
        rq->reply = reply;
        return zr_request_submit(rq, run, reply_done);
}

void zr_request_chain(zr_request *rq, zr_job_fn run, zr_job_fn done) {
        /* the session reference of the job that ends passes to this one */
        rq->job.run = run;
        rq->job.done = request_job_done;
        rq->done = done;
        rq->mutation.n = rq->mutation.nlocked = 0;
        zr_work_submit_to(rq->session->srv->work, &rq->session->user->jobs, &rq->job);
}

void zr_request_chain_reply(zr_request *rq, zr_job_fn run, zr_reply_fn reply) {
        rq->reply = reply;
        zr_request_chain(rq, run, reply_done);
}

static int entry_id_cmp(const void *a, const void *b) {
        uint64_t x = zr_entry_id(*(zr_entry *const *)a), y = zr_entry_id(*(zr_entry *const *)b);
        return x < y ? -1 : x > y;
}

/* Whether a store of the mutation is read-only (under its dataset's lock). */
static bool mutation_reads_only(zr_request *rq) {
        for (uint32_t i = 0; i < rq->mutation.nlocked; i++)
                if (zr_store_read_only(zr_dataset_store(rq->mutation.locked[i]->ds)))
                        return true;
        return false;
}

int zr_mutation_begin(zr_request *rq, zr_entry *const *entries, uint32_t n, bool exclusive) {
        zr_entry *sorted[ZR_STREAMS_MAX];
        uint32_t k = 0;
        int r = 0;

        memcpy(rq->mutation.entries, entries, n * sizeof(*entries));
        memcpy(sorted, entries, n * sizeof(*entries));
        if (n > 1)
                qsort(sorted, n, sizeof(*sorted), entry_id_cmp);
        for (uint32_t i = 0; i < n; i++)
                if (i == 0 || sorted[i] != sorted[i - 1])
                        rq->mutation.locked[k++] = sorted[i];
        rq->mutation.n = n;
        rq->mutation.nlocked = k;
        for (uint32_t i = 0; i < k; i++)
                zr_dataset_lock(rq->mutation.locked[i]->ds, exclusive);
        /* The first write to a store opened read-only makes it writable, which
         * replaces its descriptors: under the exclusive locks. */
        bool upgrade = mutation_reads_only(rq);
        if (upgrade && !exclusive) {
                for (uint32_t i = k; i-- > 0;)
                        zr_dataset_unlock(rq->mutation.locked[i]->ds);
                exclusive = true;
                for (uint32_t i = 0; i < k; i++)
                        zr_dataset_lock(rq->mutation.locked[i]->ds, exclusive);
        }
        /* reads ahead name the stores' descriptors, which the mutation may
         * close: cancel them and wait for them first */
        if (exclusive && rq->session->srv->loaders)
                for (uint32_t i = 0; i < k; i++)
                        zr_loader_engine_quiesce(rq->session->srv->loaders,
                                                 rq->mutation.locked[i]->ds);
        for (uint32_t i = 0; upgrade && i < k && r == 0; i++) {
                zr_error err = {0};
                r = zr_entry_make_writable(rq->mutation.locked[i], &err);
                if (r < 0)
                        zr_request_fail(rq, -r, "%s", err.message);
        }
        return r;
}

void zr_mutation_end(zr_request *rq, uint32_t nchanged) {
        for (uint32_t i = 0; i < nchanged && i < rq->mutation.n; i++)
                zr_dataset_mutated(rq->mutation.entries[i]->ds);
        for (uint32_t i = rq->mutation.nlocked; i-- > 0;)
                zr_dataset_unlock(rq->mutation.locked[i]->ds);
}

void zr_request_complete(zr_request *rq, int r) {
        zr_session *c = rq->session;
        c->running = NULL;
        if (c->gone) {
                request_free(rq);
        } else {
                if (r < 0)
                        session_error_reply(c, rq);
                request_finished(c, rq);
                session_pump(c);
        }
        session_unref(c);
}

/* ---- HELLO --------------------------------------------------------------- */

int zr_handle_hello(zr_request *rq) {
        zr_session *c = rq->session;
        const zr_config *cfg = &c->srv->cfg;
        uint32_t vmin, vmax;
        zr_wire_error werr = {0};
        const msgpack_object *items;
        uint32_t n;

        if (zr_wire_get_u32(rq->root, "min_version", &vmin, &werr) < 0 ||
            zr_wire_get_u32(rq->root, "max_version", &vmax, &werr) < 0)
                return zr_request_fail(rq, ZR_E_PROTO, "%s", werr.message);
        if (vmin > vmax)
                return zr_request_fail(rq, ZR_E_PROTO, "min_version %u > max_version %u", vmin,
                                       vmax);
        uint32_t v = vmax < ZR_PROTO_VERSION_MAX ? vmax : ZR_PROTO_VERSION_MAX;
        if (v < vmin || v < ZR_PROTO_VERSION_MIN) {
                zr_request_fail(rq, ZR_E_VERSION, "no common protocol version: the client speaks "
                                "%u..%u, this daemon %d..%d", vmin, vmax, ZR_PROTO_VERSION_MIN,
                                ZR_PROTO_VERSION_MAX);
                session_error_reply(c, rq);
                c->closing = true;
                zr_conn_close(c->conn, 0);
                return ZR_RQ_DONE;
        }
        unsigned want = 0;
        if (zr_wire_find(rq->root, "features")) {
                if (zr_wire_get_array(rq->root, "features", &items, &n, &werr) < 0)
                        return zr_request_fail(rq, ZR_E_PROTO, "%s", werr.message);
                for (uint32_t i = 0; i < n; i++)
                        want |= feature_bit(items[i].via.str.ptr, items[i].via.str.size);
        } else {
                want = (1u << N_FEATURES) - 1;
        }
        const char *cname;
        size_t clen;
        if (zr_wire_find(rq->root, "client") &&
            zr_wire_get_str(rq->root, "client", &cname, &clen, &werr) == 0) {
                size_t k = 0;
                for (size_t i = 0; i < clen && k + 1 < sizeof(c->name); i++)
                        c->name[k++] = (cname[i] >= 0x20 && cname[i] < 0x7f) ? cname[i] : '?';
                c->name[k] = 0;
        }
        c->features = want;
        c->hello = true;
        event_del(c->ev_timer); /* the HELLO timeout; idle is checked once answered */
        c->lim.frame_max = cfg->max_frame_bytes;
        c->lim.handles_max = cfg->max_handles;
        c->lim.loaders_max = cfg->max_loaders;
        c->lim.shm_max = cfg->max_shm_bytes;

        zr_log(LOG_DEBUG, "client %llu (pid %d): hello, protocol %u, client '%s'",
               (unsigned long long)c->serial, (int)c->pid, v, c->name);
        zr_wire_writer w;
        zr_reply_begin(rq, &w);
        zr_wire_put_u64(&w, "version", v);
        zr_wire_begin_array(&w, "features");
        for (size_t f = 0; f < N_FEATURES; f++)
                if (want & (1u << f))
                        zr_wire_put_str(&w, NULL, daemon_features[f]);
        zr_wire_end(&w);
        zr_wire_put_str(&w, "daemon", "zrecordd " ZR_VERSION_STRING);
        zr_wire_begin_map(&w, "limits");
        zr_wire_put_u64(&w, "frame_max", c->lim.frame_max);
        zr_wire_put_u64(&w, "handles_max", c->lim.handles_max);
        zr_wire_put_u64(&w, "shm_bytes_max", c->lim.shm_max);
        zr_wire_put_u64(&w, "loaders_max", c->lim.loaders_max);
        zr_wire_put_u64(&w, "pipeline_max", ZR_PIPELINE_MAX);
        zr_wire_put_u64(&w, "fds_per_frame_max", ZR_FDS_PER_FRAME_MAX);
        zr_wire_put_u64(&w, "streams_max", ZR_STREAMS_MAX);
        zr_wire_put_u64(&w, "prefetch_max", ZR_PREFETCH_MAX);
        zr_wire_put_u64(&w, "read_pool_max", c->srv->budgets.read_pool.bytes);
        zr_wire_end(&w);
        /* The reply goes out at the frame limit of the first exchange. */
        return zr_reply_send(rq, &w, NULL, 0);
}

static int on_frame(zr_conn *conn, const uint8_t *body, size_t len, void *userdata) {
        zr_session *c = userdata;
        int fds[ZR_FDS_PER_FRAME_MAX];
        unsigned nfds = 0;
        size_t frame_fds = zr_conn_frame_fds(conn);
        zr_wire_error werr = {0};
        zr_msg_header h;
        zr_request *rq = NULL;
        int r;

        while (nfds < frame_fds && nfds < ZR_FDS_PER_FRAME_MAX && zr_conn_take_fd(conn, &fds[nfds]) == 0)
                nfds++;
        if (c->closing || c->draining) {
                close_fds(fds, nfds);
                return 0;
        }
        if (len == 0) {
                /* A zero length prefix: the stream cannot be trusted any more
                 * (PROTOCOL.md section 2). */
                close_fds(fds, nfds);
                session_fault(c, ZR_E_PROTO, true, "a frame of length 0");
                return 0;
        }
        rq = calloc(1, sizeof(*rq));
        if (rq)
                rq->bytes = malloc(len);
        if (!rq || !rq->bytes) {
                close_fds(fds, nfds);
                free(rq);
                session_fault(c, ENOMEM, true, "out of memory for a request");
                return 0;
        }
        rq->session = c;
        rq->len = len;
        memcpy(rq->bytes, body, len);
        for (unsigned i = 0; i < ZR_FDS_PER_FRAME_MAX; i++)
                rq->fds[i] = i < nfds ? fds[i] : -1;
        rq->nfds = nfds;

        r = zr_wire_body_decode(rq->bytes, len, NULL, &rq->body, &werr);
        if (r < 0) {
                request_free(rq);
                session_fault(c, -r == ZR_E_LIMIT ? ZR_E_LIMIT : -r == ENOMEM ? ENOMEM : ZR_E_PROTO,
                             false, "%s", werr.message);
                return 0;
        }
        rq->root = zr_wire_body_root(rq->body);
        r = zr_msg_check(rq->root, ZR_MSG_INVALID, &h, &werr);
        rq->kind = h.kind;
        rq->id = h.id;
        if (h.kind == ZR_MSG_RELEASE) {
                /* A notification: applied when read, even while a request executes;
                 * no reply, faults only. */
                if (!c->hello)
                        session_fault(c, ZR_E_NO_HELLO, false, "release before hello");
                else if (!zr_request_has_feature(rq, ZR_FEATURE_LOADER))
                        session_fault(c, ZR_E_UNKNOWN, false, "release: the loader feature is "
                                      "not in force");
                else
                        zr_handle_release(rq, r < 0 ? werr.message : NULL);
                request_free(rq);
                return 0;
        }
        if (h.kind == ZR_MSG_DOORBELL) {
                /* a notification too (PROTOCOL.md, "Control memory") */
                if (!c->hello)
                        session_fault(c, ZR_E_NO_HELLO, false, "doorbell before hello");
                else if (!zr_request_has_feature(rq, ZR_FEATURE_CTLRING))
                        session_fault(c, ZR_E_UNKNOWN, false, "doorbell: the ctlring feature is "
                                      "not in force");
                else
                        zr_handle_doorbell(rq, r < 0 ? werr.message : NULL);
                request_free(rq);
                return 0;
        }
        if (!h.has_id) {
                request_free(rq);
                session_fault(c, r < 0 ? -r : ZR_E_PROTO, false, "%s",
                             r < 0 ? werr.message : "a message without an id");
                return 0;
        }
        if (r < 0) {
                close_fds(rq->fds, rq->nfds);
                rq->pre_code = -r;
                zr_request_fail(rq, -r, "%s", werr.message);
        } else if (!zr_msg_kind_is_request(h.kind)) {
                close_fds(rq->fds, rq->nfds);
                rq->pre_code = ZR_E_UNKNOWN;
                zr_request_fail(rq, ZR_E_UNKNOWN, "'%s' is not a request",
                                zr_msg_kind_name(h.kind));
        } else {
                unsigned want = 0;
                r = zr_msg_request_fds(h.kind, rq->root, &want, &werr);
                if (r < 0) {
                        close_fds(rq->fds, rq->nfds);
                        rq->pre_code = -r;
                        zr_request_fail(rq, -r, "%s", werr.message);
                } else if (want != rq->nfds) {
                        close_fds(rq->fds, rq->nfds);
                        rq->pre_code = ZR_E_BAD_FD;
                        zr_request_fail(rq, ZR_E_BAD_FD, "%s takes %u descriptors, %u came",
                                        zr_msg_kind_name(h.kind), want, rq->nfds);
                }
        }
        enqueue(c, rq);
        return 0;
}

static void session_gone(zr_session *c, const char *why) {
        zr_server *srv = c->srv;
        zr_log_ratelimited(&rl_disconnect, LOG_INFO, "client %llu: disconnected (%s): pid %d uid "
                           "%u gid %u, %llu requests, %u strikes", (unsigned long long)c->serial,
                           why, (int)c->pid, (unsigned)c->uid, (unsigned)c->gid,
                           (unsigned long long)c->requests, c->strikes);
        c->gone = true;
        if (c->running)
                atomic_store(&c->running->cancelled, 1);
        while (c->q_head) {
                zr_request *rq = c->q_head;
                c->q_head = rq->next;
                request_free(rq);
        }
        c->q_tail = NULL;
        c->queued_bytes = 0;
        session_account(c); /* nothing in flight any more: all of it back */
        zr_handles_fini(&c->handles);
        c->conn = zr_conn_free(c->conn);
        zr_user_release(c->user, ZR_USER_CONNS, 1);
        if (c->ev_timer) {
                event_free(c->ev_timer);
                c->ev_timer = NULL;
        }
        for (zr_session **p = &srv->sessions; *p; p = &(*p)->next)
                if (*p == c) {
                        *p = c->next;
                        break;
                }
        zr_server_session_gone(srv);
        session_unref(c);
}

static void on_close(zr_conn *conn, enum zr_conn_close_reason reason, int error, void *userdata) {
        zr_session *c = userdata;
        static const char *const reasons[] = {
                [ZR_CONN_EOF] = "closed by the client", [ZR_CONN_IO_ERROR] = "i/o error",
                [ZR_CONN_FRAME_TOO_BIG] = "frame over the limit",
                [ZR_CONN_FD_ERROR] = "truncated control data",
                [ZR_CONN_OUTPUT_FULL] = "does not read its replies",
                [ZR_CONN_BY_OWNER] = "closed by the daemon",
                [ZR_CONN_FRAME_TIMEOUT] = "a frame left incomplete",
        };
        const char *why = reasons[reason];
        char buf[96];
        if (reason == ZR_CONN_IO_ERROR) {
                snprintf(buf, sizeof(buf), "i/o error: %s", strerror(error));
                why = buf;
        }
        /* The refused prefix and the lost descriptors get a FAULT before the close
         * where the socket still takes it (PROTOCOL.md sections 2 and 5). */
        if (reason == ZR_CONN_FRAME_TOO_BIG || reason == ZR_CONN_FD_ERROR ||
            reason == ZR_CONN_FRAME_TIMEOUT) {
                zr_wire_writer w;
                const uint8_t *frame;
                size_t size;
                char msg[128];
                int code = reason == ZR_CONN_FD_ERROR ? ZR_E_BAD_FD : ZR_E_LIMIT;
                if (reason == ZR_CONN_FRAME_TOO_BIG)
                        snprintf(msg, sizeof(msg), "a frame of %u bytes: the limit is %u",
                                 (unsigned)error, c->lim.frame_max);
                else if (reason == ZR_CONN_FRAME_TIMEOUT)
                        snprintf(msg, sizeof(msg), "a frame begun was not finished within %d s",
                                 error);
                else
                        snprintf(msg, sizeof(msg), "descriptors were lost (truncated control data)");
                zr_log_ratelimited(&rl_fault, LOG_NOTICE, "client %llu (pid %d): fault %s: %s",
                                   (unsigned long long)c->serial, (int)c->pid,
                                   zr_error_code_name(code), msg);
                zr_wire_writer_init(&w);
                zr_session_write_error(&w, true, 0, code, msg);
                if (zr_wire_writer_finish(&w, c->lim.frame_max, &frame, &size, NULL) == 0)
                        zr_conn_send_final(conn, frame + ZR_FRAME_HEADER_SIZE,
                                           size - ZR_FRAME_HEADER_SIZE);
                zr_wire_writer_destroy(&w);
        }
        session_gone(c, why);
}

static void on_drain(zr_conn *conn, void *userdata) {
        session_update_reading(userdata);
}

static const zr_conn_ops session_ops = {on_frame, on_close, on_drain, may_read, on_input};

int zr_session_new(zr_server *srv, int fd, zr_user *user, zr_session **ret) {
        zr_session *c = calloc(1, sizeof(*c));
        if (!c) {
                close(fd);
                zr_user_release(user, ZR_USER_CONNS, 1);
                zr_user_unref(user);
                return -ENOMEM;
        }
        c->srv = srv;
        c->user = user;
        c->refs = 1;
        c->serial = ++srv->next_client;
        zr_handles_init(&c->handles, &srv->counters, user);
        /* Until HELLO: the floor every daemon accepts (PROTOCOL.md section 2) for
         * what the client may send, the configured limits otherwise. */
        c->lim.frame_max = srv->cfg.max_frame_bytes;
        c->lim.handles_max = srv->cfg.max_handles;
        c->lim.loaders_max = srv->cfg.max_loaders;
        c->lim.shm_max = srv->cfg.max_shm_bytes;
        zr_conn_limits lim = {
                .max_frame = srv->cfg.max_frame_bytes,
                .max_output = OUTPUT_PAUSE_BYTES +
                              (uint64_t)(ZR_PIPELINE_MAX + 2) * srv->cfg.max_frame_bytes,
                .frame_timeout_ms = srv->cfg.frame_timeout_sec * 1000,
        };
        c->ev_timer = event_new(srv->base, -1, 0, timer_cb, c);
        int r = c->ev_timer ? zr_conn_new(srv->base, fd, &lim, &session_ops, c, &c->conn) : -ENOMEM;
        if (r < 0) {
                if (c->ev_timer)
                        event_free(c->ev_timer);
                else
                        close(fd);
                zr_user_release(user, ZR_USER_CONNS, 1);
                zr_user_unref(user);
                free(c);
                return r;
        }
        if (srv->cfg.hello_timeout_sec) {
                struct timeval tv = {(time_t)srv->cfg.hello_timeout_sec, 0};
                event_add(c->ev_timer, &tv);
        }
        zr_conn_peer(c->conn, &c->pid, &c->uid, &c->gid);
        zr_log_ratelimited(&rl_connect, LOG_INFO, "client %llu: connected: pid %d uid %u gid %u",
                           (unsigned long long)c->serial, (int)c->pid, (unsigned)c->uid,
                           (unsigned)c->gid);
        c->next = srv->sessions;
        srv->sessions = c;
        *ret = c;
        return 0;
}

void zr_session_drain(zr_session *c) {
        if (c->gone || c->draining)
                return;
        c->draining = true;
        session_update_reading(c);
        /* a long job that looks (a conversion, a packed loader's index build)
         * stops at its next check: a stop is bounded by a piece, not a store */
        if (c->running)
                atomic_store(&c->running->cancelled, 1);
        for (uint32_t i = 0; i < c->handles.n; i++)
                if (c->handles.v[i].type == ZR_HANDLE_LOADER)
                        zr_lhandle_shutdown(c->handles.v[i].loader);
        /* Queued requests get ZR_E_SHUTDOWN in order, after the running one. */
        session_pump(c);
        if (!c->q_head && !c->running && !c->closing) {
                c->closing = true;
                zr_conn_close(c->conn, 0);
        }
}

void zr_session_kill(zr_session *c) {
        if (!c->gone && c->conn) {
                c->closing = true;
                zr_conn_close(c->conn, 1);
        }
}

zr_session *zr_session_next(zr_session *c) {
        return c->next;
}

void zr_session_kick(zr_session *c) {
        if (!c->gone && c->conn)
                zr_conn_kick(c->conn);
}

const zr_handles *zr_session_handles(const zr_session *c) {
        return &c->handles;
}

uid_t zr_session_uid(const zr_session *c) {
        return c->uid;
}

zr_user *zr_session_user(const zr_session *c) {
        return c->user;
}

pid_t zr_session_pid(const zr_session *c) {
        return c->pid;
}

const char *zr_session_client_name(const zr_session *c) {
        return c->name;
}

