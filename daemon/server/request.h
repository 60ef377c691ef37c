/* request.h: the interface between a session and the request handlers.
 *
 * The session (session.c) reads a frame, validates it against proto's
 * message table, checks its descriptors and queues it; when its turn comes it
 * checks HELLO and the draining daemon and calls zr_request_dispatch()
 * (dispatch.c). The dispatch table gives each request kind its handler and the
 * handle it acts on; the feature a kind needs comes from proto. A handler
 * finds its checked handle in rq->handle, reads its own fields, and either
 * answers at once or starts a job (work.h) on the pool.
 *
 * Handlers, by subject:
 *   req-store.c   datasets and sets as objects (DATASET_CREATE, DATASET_OPEN,
 *                 MSSET_OPEN, INFO, CLOSE), the jobs on one dataset (STATS,
 *                 SYNC, COMPACT, VERIFY) and STATUS;
 *   req-data.c    records (BUFFER_OPEN, READ, APPEND, DELETE);
 *   req-dict.c    dictionaries (TRAIN_DICT, INSTALL_DICT);
 *   req-convert.c CONVERT, a ragged dataset into the other layout;
 *   req-loader.c  loaders (LOADER_OPEN, RELEASE, LOADER_CLOSE) and their events;
 *   session.c     HELLO, which sets up the session itself.
 *
 * A handler returns ZR_RQ_DONE (a reply was sent), ZR_RQ_PENDING (a job owns
 * the request until its done() calls zr_request_complete()), or a negative
 * code with rq->err set, which the session sends as an "error" reply. All of
 * it runs on the loop thread, except a job's run() and the mutation calls it
 * makes.
 */
#ifndef ZR_SERVER_REQUEST_H
#define ZR_SERVER_REQUEST_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "loader/pack.h"
#include "message.h"
#include "server/handles.h"
#include "server/registry.h"
#include "server/server.h"
#include "server/work.h"
#include "util/error.h"
#include "wire.h"

#define ZR_RQ_DONE 1
#define ZR_RQ_PENDING 2

typedef struct zr_session zr_session;
typedef struct zr_request zr_request;

/* Puts the fields of a job's "ok" reply (zr_request_submit_reply()). */
typedef void (*zr_reply_fn)(zr_request *rq, zr_wire_writer *w);

struct zr_request {
        /* the session's */
        zr_job job;               /* first: a job is its request */
        zr_session *session;
        zr_request *next;         /* in the session's queue */
        uint8_t *bytes;           /* the body, copied out of the connection */
        size_t len;
        zr_wire_body *body;
        int pre_code;             /* an error decided when the frame was read */
        zr_job_fn done;           /* the handler's done(), after the session's */
        zr_reply_fn reply;        /* zr_request_submit_reply() */
        struct {                  /* zr_mutation_begin() */
                uint32_t n, nlocked;
                zr_entry *entries[ZR_STREAMS_MAX]; /* in the request's order */
                zr_entry *locked[ZR_STREAMS_MAX];  /* in lock order, once each */
        } mutation;

        /* the handler's to read */
        zr_msg_kind kind;
        uint64_t id;
        const msgpack_object *root; /* the body, validated (zr_msg_check()) */
        int fds[ZR_FDS_PER_FRAME_MAX]; /* the descriptors it takes, in order */
        unsigned nfds;
        zr_handle *handle;        /* the handle it acts on, checked by dispatch.c:
                                   * valid until the handler adds or closes one */

        /* the handler's to write */
        zr_error err;             /* the error to answer with */
        bool has_needed, has_index; /* extra fields of the error reply */
        uint64_t needed, index;
        void *state;              /* its job's state (zr_request_state()) */
        void (*state_free)(void *state);
        int result;               /* its job's outcome, for done() */
        uint64_t work_bytes;      /* working memory charged (zr_request_work_charge()) */
        /* set on the loop when the client goes while the request runs: a long
         * job (a packed loader's index build) stops at its next check */
        _Atomic int cancelled;
};

/* ---- dispatch (the session calls it) -------------------------------------- */

/* Runs the handler of rq's kind (dispatch.c): the feature it needs, the handle
 * it acts on (rq->handle), then the handler. Returns what a handler returns. */
int zr_request_dispatch(zr_request *rq);

/* True if feature `name` (HELLO) is in force on the request's connection. */
bool zr_request_has_feature(const zr_request *rq, const char *name);

/* ---- what handlers use ---------------------------------------------------- */

zr_server *zr_request_server(const zr_request *rq);
zr_session *zr_request_session(const zr_request *rq);

/* Sets rq->err (the first error set wins) and returns -code. */
int zr_request_fail(zr_request *rq, int code, const char *fmt, ...)
        __attribute__((format(printf, 3, 4)));

/* A FAULT on the request's connection, for a notification, which gets no
 * reply: a strike for the striking codes. */
void zr_request_fault(zr_request *rq, int code, const char *fmt, ...)
        __attribute__((format(printf, 3, 4)));

/* Takes descriptor i out of the request (the caller owns it). */
int zr_request_take_fd(zr_request *rq, unsigned i);

/* Charges `bytes` of working memory (heap the request allocates in a size
 * its client chose) to the uid, before it is allocated; given back when the
 * request is freed. Returns 0, or fails the request with ZR_E_LIMIT naming
 * the limit (max-work-mem-per-uid, max-work-mem-total) and what `what` needs. */
int zr_request_work_charge(zr_request *rq, uint64_t bytes, const char *what);

/* The peer's uid and pid; the frame limit its replies must fit. */
uid_t zr_request_uid(const zr_request *rq);
pid_t zr_request_pid(const zr_request *rq);
uint32_t zr_request_frame_max(const zr_request *rq);

/* A `pack` map (feature "pack"; PROTOCOL.md section 10, "Packed streams") of
 * map `item` into *ret; `what` names the map in messages ("streams[2]").
 * Returns 0, or fails the request (ZR_E_PROTO, ZR_E_UNKNOWN without the
 * feature). In req-loader.c. */
int zr_request_take_pack(zr_request *rq, const msgpack_object *item, const char *what,
                         zr_pack_params *ret);

/* The handle `id` named by request field `field`, if its type is one of
 * `types` (ZR_HANDLE_BIT()s): else NULL with rq->err set (ZR_E_NO_HANDLE). */
zr_handle *zr_request_handle(zr_request *rq, const char *field, uint32_t id, unsigned types);

/* Adds a handle (the session takes what *h holds on success). Returns its
 * number, or a negative code with rq->err set (ZR_E_LIMIT at the limit). */
int zr_request_add_handle(zr_request *rq, const zr_handle *h);
/* Closes a handle: drops its references and gives its memory back. */
void zr_request_close_handle(zr_request *rq, uint32_t id);

/* 0 if the session may open one more loader, else -ZR_E_LIMIT with rq->err. */
int zr_request_loader_room(zr_request *rq);

/* The session's shared-memory budget: reserve (ZR_E_LIMIT if over), give a
 * reservation back, and what is left. */
int zr_request_shm_reserve(zr_request *rq, uint64_t bytes);
void zr_request_shm_release(zr_request *rq, uint64_t bytes);
uint64_t zr_request_shm_left(const zr_request *rq);

/* Starts an "ok" reply; put fields, then send. */
void zr_reply_begin(zr_request *rq, zr_wire_writer *w);
/* Finishes and sends the reply with `fds` (taken, closed on failure), destroys
 * the writer. A reply over frame_max becomes a ZR_E_LIMIT error. Returns
 * ZR_RQ_DONE. */
int zr_reply_send(zr_request *rq, zr_wire_writer *w, int *fds, size_t nfds);
/* An "ok" with no fields. */
int zr_reply_empty(zr_request *rq);

/* ---- jobs ----------------------------------------------------------------- */

/* Allocates the handler's state for rq (`size` bytes, zeroed) as rq->state,
 * freed with state_free() when the request is: returns it, or NULL with
 * rq->err set (ENOMEM). */
void *zr_request_state(zr_request *rq, size_t size, void (*state_free)(void *state));

/* Submits rq's job: run() on a worker, then done() on the loop, which ends
 * with zr_request_complete(). */
int zr_request_submit(zr_request *rq, zr_job_fn run, zr_job_fn done);

/* Submits rq's job with the usual done(): if run() left rq->result 0 and the
 * client is still there, an "ok" reply with the fields reply() puts (NULL:
 * none), else the error in rq->err; then the session moves on. */
int zr_request_submit_reply(zr_request *rq, zr_job_fn run, zr_reply_fn reply);

/* From a job's done(), instead of completing: submits the request's next job,
 * with the usual done() of zr_request_submit_reply() (_chain_reply) or a done()
 * of its own (_chain). The request keeps its place (the session's next
 * request still waits). */
void zr_request_chain_reply(zr_request *rq, zr_job_fn run, zr_reply_fn reply);
void zr_request_chain(zr_request *rq, zr_job_fn run, zr_job_fn done);

/* A mutation of the datasets of entries[0..n) (1 <= n <= ZR_STREAMS_MAX; an
 * entry may repeat), in a job's run(). Begin takes their locks in the daemon's
 * lock order (server.h): exclusive, or shared when `exclusive` is false (an
 * APPEND to one dataset: the store orders appends itself). A store still open
 * read-only is made writable first (zr_entry_make_writable(), under the
 * exclusive locks, which are then kept for this mutation): it returns 0, or a
 * negative code with rq->err set (ZR_E_LOCKED naming who holds the store,
 * EACCES, ...) and the mutation must change nothing; either way the locks are
 * held until zr_mutation_end(). The entries must stay referenced by the
 * request's state until its done(). */
int zr_mutation_begin(zr_request *rq, zr_entry *const *entries, uint32_t n, bool exclusive);
/* Ends it: bumps the generation of the first `nchanged` entries (those that
 * changed, or that a failure may have changed) and releases the locks. Back on
 * the loop, before the job's done() runs, the loaders hear of every dataset of
 * the mutation (zr_server_dataset_mutated()). */
void zr_mutation_end(zr_request *rq, uint32_t nchanged);

/* Ends a PENDING request from a job's done(): r < 0 sends rq->err as the error
 * reply (unless a reply was sent: pass ZR_RQ_DONE), then the session moves on.
 * If the client went away, only frees. */
void zr_request_complete(zr_request *rq, int r);

/* True if the client is gone (a done() then skips building a reply). */
bool zr_request_orphaned(const zr_request *rq);

/* ---- handlers (the dispatch table's) --------------------------------------- */

int zr_handle_hello(zr_request *rq);
int zr_handle_dataset_create(zr_request *rq);
int zr_handle_dataset_open(zr_request *rq);
int zr_handle_msset_open(zr_request *rq);
int zr_handle_info(zr_request *rq);
int zr_handle_stats(zr_request *rq);
int zr_handle_sync(zr_request *rq);
int zr_handle_close(zr_request *rq);
int zr_handle_status(zr_request *rq);
int zr_handle_buffer_open(zr_request *rq);
int zr_handle_read(zr_request *rq);
int zr_handle_append(zr_request *rq);
int zr_handle_delete(zr_request *rq);
int zr_handle_compact(zr_request *rq);
int zr_handle_verify(zr_request *rq);
int zr_handle_train_dict(zr_request *rq);
int zr_handle_install_dict(zr_request *rq);
int zr_handle_convert(zr_request *rq);
int zr_handle_loader_open(zr_request *rq);
int zr_handle_loader_close(zr_request *rq);
int zr_handle_steps_of(zr_request *rq);
int zr_handle_metrics(zr_request *rq);
/* RELEASE, a notification (the session calls it once HELLO and the loader
 * feature are in force): applied at once, faults only. `bad` is the message of
 * a body that did not validate, or NULL. */
void zr_handle_release(zr_request *rq, const char *bad);
/* DOORBELL (a notification, as RELEASE): the loader's releases are in its
 * control memory. */
void zr_handle_doorbell(zr_request *rq, const char *bad);

/* Puts a dataset's schema as the map `key` (PROTOCOL.md section 9, the schema
 * map; "layout" only for loaderx 1.5.7's layouts). req-store.c. */
void zr_put_schema(zr_wire_writer *w, const char *key, const zr_schema *s);

/* ---- loaders (req-loader.c) ------------------------------------------------ */

/* Frees a loader handle: its loader and references. Its ring's bytes are the
 * handle table's to give back (zr_lhandle_ring_bytes()). */
void zr_lhandle_free(zr_lhandle *lh);
uint64_t zr_lhandle_ring_bytes(const zr_lhandle *lh);
/* Ends the loader for a shutdown: stops it and sends LOADER_END ZR_E_SHUTDOWN;
 * nothing more of it is sent. */
void zr_lhandle_shutdown(zr_lhandle *lh);
/* Puts the per_loader map of STATUS for this loader (pid: its client's). */
void zr_lhandle_put_status(zr_lhandle *lh, zr_wire_writer *w, pid_t pid);
/* What telemetry shows of a loader handle (lview.h): its loader, its number on
 * its connection, its session, the registry entries of every source's streams,
 * and the slot of its telemetry state (freed with the handle). */
typedef struct zr_loader zr_loader;
zr_loader *zr_lhandle_loader(const zr_lhandle *lh);
uint32_t zr_lhandle_id(const zr_lhandle *lh);
zr_session *zr_lhandle_session(const zr_lhandle *lh);
uint32_t zr_lhandle_nentries(const zr_lhandle *lh);
zr_entry *zr_lhandle_entry(const zr_lhandle *lh, uint32_t i);
typedef struct zr_ltrack zr_ltrack;
zr_ltrack **zr_lhandle_track(zr_lhandle *lh);

/* The loop's side of the engine's notify() (server.c): collects every
 * loader's events and sends them on its session. */
void zr_server_loader_events(zr_server *s);
/* At exit: waits for the loaders closed while their gathers ran to be gone,
 * and releases what their handles held. */
void zr_server_loaders_wait_gone(zr_server *s);

/* A mutation of the dataset of `e` ended (its lock is released): drop its
 * cached records and resume the loader gathers parked on its lock. */
void zr_server_dataset_mutated(zr_server *s, zr_entry *e);

/* ---- the session, for the loader wiring and STATUS -------------------------- */

/* Sends an event with descriptors (each closed once sent, or on failure). */
void zr_session_send_event(zr_session *c, zr_wire_writer *w, int *fds, size_t nfds);
bool zr_session_gone(const zr_session *c);
/* Puts the per_loader map of each of the session's loaders (STATUS). */
void zr_session_put_loaders(zr_session *c, zr_wire_writer *w);

#endif
