/* client.h: one client's session on top of a connection (conn.h).
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
#ifndef ZR_SERVER_CLIENT_H
#define ZR_SERVER_CLIENT_H

#include <stdint.h>

typedef struct zr_server zr_server;
typedef struct zr_client zr_client;

/* Starts a session on the accepted socket `fd` (taken, even on failure). */
int zr_client_new(zr_server *srv, int fd, zr_client **ret);

/* Drain for shutdown: stop reading, let the executing request finish, answer
 * every queued request with ZR_E_SHUTDOWN, then close after the replies. */
void zr_client_drain(zr_client *c);

/* Closes the connection at once (end of a drain that took too long). */
void zr_client_kill(zr_client *c);

/* The next session in the server's list. */
zr_client *zr_client_next(zr_client *c);

/* Open handles and shared memory bytes of this session. */
uint32_t zr_client_handles(const zr_client *c);

#endif
