/* server.h: the zrecordd daemon object: loop, pool, listener, sessions, timers.
 *
 * One libevent loop thread owns every session, handle, registry entry and
 * counter; a pool of worker threads runs the blocking parts of requests
 * (work.h) and hands their completions back to the loop. The server listens on
 * the socket the service manager passed (LISTEN_FDS) or binds its own, accepts
 * up to the client limit, and runs the lifecycle: READY=1 once serving, STATUS=
 * and WATCHDOG=1 on timers, SIGHUP reloads the settings, SIGTERM/SIGINT (or the
 * idle timeout) drains and returns, STOPPING=1 on the way out.
 *
 * Lock order (whole daemon): dataset locks by ascending dataset id (dataset.h),
 * then the store's own locks, then the decoded-record cache's mutex, then the
 * pool mutex, then the completion mutex. The loader engine's mutex comes before
 * the pool mutex and is never held with a dataset lock (loader.h); the log has
 * its own and takes no other. Jobs and loader gathers take dataset locks; the
 * loop thread only when it opens a loader (shared, zr_loader_new()).
 */
#ifndef ZR_SERVER_SERVER_H
#define ZR_SERVER_SERVER_H

#include <stdbool.h>
#include <stdint.h>

#include "io/ioq.h"
#include "loader/tokindex.h"
#include "server/budgets.h"
#include "server/config.h"
#include "server/registry.h"
#include "server/users.h"
#include "server/work.h"
#include "util/error.h"
#include "util/pool.h"

struct event_base;
struct event;
typedef struct zr_loader_engine zr_loader_engine;
typedef struct zr_session zr_session;

typedef struct zr_server_counters {
        uint64_t handles;   /* open handles, all clients */
        uint64_t shm_bytes; /* buffers and rings, all clients */
        uint64_t loaders;
        uint64_t batches;
        uint64_t gathers;   /* READs done (and, later, loader gathers) */
        uint64_t bytes;     /* bytes gathered into buffers and rings */
        uint64_t hits, misses, evictions;
        uint64_t requests;  /* requests answered */
} zr_server_counters;

/* The daemon. Fields are read and written on the loop thread only; sessions
 * and request handlers use them directly. */
typedef struct zr_server {
        zr_config cfg;
        int argc;                  /* kept for SIGHUP: the flags override the file again */
        char **argv;
        struct event_base *base;
        zr_pool *pool;
        zr_work *work;
        zr_registry *registry;
        zr_loader_engine *loaders;  /* rings, shared gathers, the decoded-record cache */
        int loader_efd;             /* the engine's workers wake the loop here */
        zr_tokstore *tokstore;      /* packed loaders' indexes on disk (loader/tokindex.h) */
        struct event *ev_loader;

        int listen_fd;
        struct event *ev_listen;
        /* Out of descriptors (EMFILE): a descriptor held in reserve lets the
         * daemon take a pending connection and refuse it (so the listening
         * socket does not stay readable and spin the loop); when even that
         * fails, listening pauses until a client leaves or a retry timer. */
        int reserve_fd;
        bool listen_paused;
        struct event *ev_listen_retry;
        uint64_t nofile;           /* RLIMIT_NOFILE in force (soft) */
        bool socket_created;       /* we bound it: remove it at exit */
        dev_t socket_dev;
        ino_t socket_ino;

        zr_session *sessions;      /* each adds itself (zr_session_new()) and leaves */
        unsigned nclients;
        zr_users *users;           /* what each uid holds, and its limits (users.h) */
        /* the memory budgets in force (budgets.h), and the shared-memory
         * ones as the per-uid accounts use them */
        zr_budgets budgets;
        uint64_t shm_uid_max, shm_total_max;
        uint64_t work_uid_max, work_total_max;
        zr_ioq *ioq;               /* reads ahead of the loaders */
        struct zr_remote *remote;  /* stores in object storage, or NULL (rdataset.h) */
        uint64_t remote_budget;    /* the disk cache's budget in force */
        char remote_budget_source[96];
        char remote_error[300];    /* why remote is NULL, for a remote open */
        /* daemon-made memfds get F_SEAL_FUTURE_WRITE (Linux 5.1): else rings
         * are never shared across uids (req-loader.c) */
        bool rings_sealed;
        struct event *ev_wake;     /* a uid gave something back: kick the sessions */
        uint64_t next_client;      /* serial numbers for logs */

        struct event *ev_sigterm, *ev_sigint, *ev_sighup;
        struct event *ev_sync, *ev_status, *ev_watchdog, *ev_idle, *ev_drain;
        bool draining;
        int exit_code;

        struct zr_watch *watch;    /* the loaders' verdicts each second (watch.h) */
        struct zr_scrape *scrape;  /* the metrics endpoint, if metrics-listen (scrape.h) */

        uint64_t start_usec;
        zr_server_counters counters;
        uint64_t status_batches;   /* batches at the last STATUS= */
        uint64_t status_usec;
} zr_server;

/* Sets up the server from *cfg (copied) and the arguments (kept for reload):
 * the pool, the registry, the listening socket, signals and timers. Returns 0,
 * or a negative code with *err saying what failed. */
int zr_server_new(const zr_config *cfg, int argc, char **argv, zr_server **ret, zr_error *err);

/* Serves until SIGTERM/SIGINT or the idle timeout, then drains. Returns the
 * exit status (0 after a clean drain). */
int zr_server_run(zr_server *s);

/* Syncs and closes every store, removes the socket file if we made it, frees.
 * NULL allowed; returns NULL. */
zr_server *zr_server_free(zr_server *s);

/* Starts the drain (as SIGTERM does). */
void zr_server_shutdown(zr_server *s, const char *why);

/* The per-uid limits of the settings in force (users.h). */
void zr_server_user_limits(const zr_server *s, zr_user_limits *ret);

/* Sessions call these (loop thread): a session left s->sessions. */
void zr_server_session_gone(zr_server *s);
uint64_t zr_server_now_usec(void);

/* Gives the allocator's free pages back to the system (malloc_trim). For the
 * end of a job that allocated and freed a lot at once (TRAIN_DICT, VERIFY):
 * without it a worker's arena keeps tens of MiB after the job, and the daemon's
 * RSS does not return to its baseline. Any thread; costs well under a
 * millisecond on the daemon's small heaps, so only after such jobs. */
void zr_server_trim_heap(void);

#endif
