/* users.h: what each uid holds in the daemon, and its share of the limits.
 *
 * After dbus-broker's user accounting (its src/util/user.h): a connection
 * belongs to the uid that made it (SO_PEERCRED), and what the daemon holds on
 * the connection's behalf is charged to that uid, one counter per kind of
 * resource (a "slot"):
 *
 *   ZR_USER_CONNS   its connections;
 *   ZR_USER_BYTES   request bytes read and not yet executed (an incomplete
 *                   frame, queued requests);
 *   ZR_USER_FDS     descriptors it passed that the daemon has not taken or
 *                   closed yet (parked in an incomplete frame or a queued
 *                   request);
 *   ZR_USER_SHM     shared memory made for it: read buffers and rings;
 *   ZR_USER_WORK    working memory of its requests and loaders: heap the
 *                   daemon allocates in sizes the client chose (a loader's
 *                   batch tables, a READ's gather tables, STEPS_OF's hits,
 *                   CONVERT's buffers), charged before it is allocated.
 *
 * and its worker jobs, queued and running, in a queue of its own (work.h)
 * that the pool serves in turn with the other uids', running at most
 * jobs_uid_max of them at once. A uid's entry exists while a connection of it
 * does (a job holds its connection's session, which holds the entry).
 *
 * Two limits apply to each slot:
 *   - a maximum per uid (0: none);
 *   - a budget for all uids together (0: none), shared by dbus-broker's rule:
 *     a uid holding `share` may take `amount` more only if
 *         (share + amount) * (n + 1) - share <= remaining
 *     where `remaining` is what is left of the budget and n counts the uids
 *     holding some of it, this one included: what a uid holds stays under
 *     1/(n+1) of what it holds plus what is left. A uid alone may hold at most
 *     half of the budget, and a uid that holds nothing needs less room than
 *     any that holds some, so no uid can take the last part of a budget away
 *     from the others.
 * The daemon's own uid and root are trusted: no maximum per uid and no share
 * apply to them, only the budget itself. A per-user daemon serves its own uid
 * alone, and root can stop the service anyway.
 *
 * Charges are checked (zr_user_charge(): a refusal says which limit) where the
 * daemon can refuse (a connection, a buffer, a ring); what already arrived
 * (bytes read, descriptors received) is counted unchecked (zr_user_add()) and
 * the session stops reading while its uid has no room (zr_user_room()).
 * Releases wake whoever waits for room (zr_users_want_wake()).
 *
 * Loop thread only. It knows nothing of sessions or requests.
 */
#ifndef ZR_SERVER_USERS_H
#define ZR_SERVER_USERS_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "server/work.h"
#include "util/error.h"

typedef enum zr_user_slot {
        ZR_USER_CONNS,
        ZR_USER_BYTES,
        ZR_USER_FDS,
        ZR_USER_SHM,
        ZR_USER_WORK,
        ZR_USER_NSLOTS,
} zr_user_slot;

typedef struct zr_user_limits {
        uint64_t uid_max[ZR_USER_NSLOTS];   /* per uid; 0: none */
        uint64_t total_max[ZR_USER_NSLOTS]; /* all uids together, shared; 0: none */
        unsigned jobs_uid_max;              /* jobs of one uid running at once; 0: none */
} zr_user_limits;

typedef struct zr_users zr_users;
typedef struct zr_user zr_user;

struct zr_user {
        zr_users *users;
        zr_user *next;            /* in the registry's list, by order of arrival */
        uid_t uid;
        bool trusted;             /* the daemon's own uid, or root */
        unsigned refs;
        uint64_t used[ZR_USER_NSLOTS];
        zr_work_queue jobs;       /* its worker jobs (no limit on a trusted uid) */
};

/* A registry for a daemon running as `self`, with limits *lim (copied).
 * Returns 0 or -ENOMEM. */
int zr_users_new(uid_t self, const zr_user_limits *lim, zr_users **ret);
/* Every entry must be gone (unreferenced). NULL allowed; returns NULL. */
zr_users *zr_users_free(zr_users *r);

/* New limits (SIGHUP): they apply to the next charges and jobs; what is held
 * stays held, and jobs handed to the pool run to their end. */
void zr_users_set_limits(zr_users *r, const zr_user_limits *lim);
const zr_user_limits *zr_users_limits(const zr_users *r);

/* True for the uids no share applies to: the daemon's own and root. */
bool zr_users_trusted(const zr_users *r, uid_t uid);

/* The entry of `uid`, made on first use, with one more reference. Returns 0
 * or -ENOMEM. */
int zr_users_get(zr_users *r, uid_t uid, zr_user **ret);
/* Drops a reference; the entry goes with the last one (it must hold nothing
 * then). NULL allowed; returns NULL. */
zr_user *zr_user_unref(zr_user *u);

/* The entries, in order of arrival (zr_user.next). */
zr_user *zr_users_first(const zr_users *r);
/* What all uids hold together in a slot. */
uint64_t zr_users_total(const zr_users *r, zr_user_slot slot);

/* The largest amount u may take now in `slot` (UINT64_MAX: no limit). */
uint64_t zr_user_room(const zr_user *u, zr_user_slot slot);
/* Takes `amount` in `slot` if every limit allows it: 0, or -ZR_E_LIMIT with
 * *err naming the limit, the uid and what it holds (nothing is taken). */
int zr_user_charge(zr_user *u, zr_user_slot slot, uint64_t amount, zr_error *err);
/* Counts `amount` that already arrived, whatever the limits. */
void zr_user_add(zr_user *u, zr_user_slot slot, uint64_t amount);
/* Gives `amount` back (at most what u holds), and wakes whoever waits. */
void zr_user_release(zr_user *u, zr_user_slot slot, uint64_t amount);

/* The name of a slot, for messages ("connections"). */
const char *zr_user_slot_name(zr_user_slot slot);

/* Whoever stopped for lack of room asks to be woken: the next release calls
 * fn(arg) (set with zr_users_set_wake(), on the loop thread) once. */
void zr_users_set_wake(zr_users *r, void (*fn)(void *arg), void *arg);
void zr_users_want_wake(zr_users *r);

#endif
