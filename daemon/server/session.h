/* session.h: one client's session on top of a connection (conn.h).
 *
 * A session turns frames into requests and replies: HELLO first (version,
 * features, the limits in force), the pipeline (requests execute one at a time
 * in the order they were read; reading pauses at ZR_PIPELINE_MAX unanswered or
 * while the client does not read its replies), descriptor counts checked before
 * anything else, strikes, a handle table with its shared-memory budget
 * (handles.h), and complete reclamation when the client goes away at any
 * point.
 *
 * Lifetime: the session holds one reference for its connection and each
 * request executing on the pool holds another, so a job that completes after
 * the client vanished finds the session (marked gone) and frees only what it
 * owns. All of it lives on the loop thread.
 */
#ifndef ZR_SERVER_SESSION_H
#define ZR_SERVER_SESSION_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "wire.h"

typedef struct zr_server zr_server;
typedef struct zr_session zr_session;
typedef struct zr_user zr_user;

/* Starts a session on the accepted socket `fd` of the peer `user` (both taken,
 * even on failure: the user's reference and the connection it was charged
 * for, users.h) and adds it to srv->sessions; it leaves the list when the
 * client goes, and calls zr_server_session_gone() then. */
int zr_session_new(zr_server *srv, int fd, zr_user *user, zr_session **ret);

/* Its uid's account may have room again: a connection that stopped reading
 * for lack of it asks again (server.c calls it on a release, users.h). */
void zr_session_kick(zr_session *c);

/* Its handle table (read only: the loaders of another connection). */
const struct zr_handles *zr_session_handles(const zr_session *c);

/* The uid that made the connection, and its account. */
uid_t zr_session_uid(const zr_session *c);
zr_user *zr_session_user(const zr_session *c);

/* The peer's pid (SO_PEERCRED, 0 if unknown) and the name its HELLO gave
 * ("" if none; printable ASCII). */
pid_t zr_session_pid(const zr_session *c);
const char *zr_session_client_name(const zr_session *c);

/* Drain for shutdown: stop reading, let the executing request finish, answer
 * every queued request with ZR_E_SHUTDOWN, then close after the replies. */
void zr_session_drain(zr_session *c);

/* Closes the connection at once (end of a drain that took too long). */
void zr_session_kill(zr_session *c);

/* The next session in the server's list. */
zr_session *zr_session_next(zr_session *c);

/* Writes a whole "error" reply (fault false, with `id`) or FAULT event (fault
 * true) into w: proto's zr_msg_write_error(), and the name of an errno code
 * too, as PROTOCOL.md gives it ("EIO"). */
void zr_session_write_error(zr_wire_writer *w, bool fault, uint64_t id, int code,
                            const char *message);

#endif
