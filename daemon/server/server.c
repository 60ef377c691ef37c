/* server.c: the daemon object (server.h): loop, pool, listener, sessions,
 * signals and timers.
 *
 * It assumes one process-wide instance (signals) and that every session and
 * registry call happens on the loop thread. It does not parse requests
 * (session.c) or touch stores other than syncing them on a timer and at the end.
 */
#include "server/server.h"

#include <errno.h>
#include <event2/event.h>
#include <fcntl.h>
#include <malloc.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include "loader/loader.h"
#include "server/budgets.h"
#include "dataset/rdataset.h"
#include "util/shm.h"
#include "server/listener.h"
#include "server/log.h"
#include "server/notify.h"
#include "server/request.h"
#include "server/scrape.h"
#include "server/session.h"
#include "server/watch.h"
#include "wire.h"

/* How often STATUS= tells the service manager what the daemon is doing: often
 * enough for `systemctl status`, rare enough to cost nothing. */
#define STATUS_INTERVAL_SEC 5
/* How long a drain waits for clients to take their last replies before it
 * closes them anyway: a client that stopped reading must not hold a shutdown
 * (systemd's default stop timeout is 90 s). */
#define DRAIN_TIMEOUT_SEC 10
/* The bound on a stop: from SIGTERM (or SIGINT, or an idle exit) to the
 * process's end, whatever runs. Every request runs in bounded pieces and a
 * loader's gather is bounded by its batch, so a stop takes the drain and a
 * piece; this deadline stands behind that (a conversion of a large store, a
 * sync of many, a stuck device): past it the daemon exits at once, as a crash
 * would, which every store survives (docs/FORMAT.md, durability). Below the
 * units' TimeoutStopSec=60s, so the service manager never has to kill it. */
#define STOP_DEADLINE_SEC 20
/* With no descriptor left even to refuse a connection, listening pauses; it
 * resumes when a client leaves, or after this long (a worker or a store may
 * have freed descriptors meanwhile). */
#define LISTEN_RETRY_MSEC 250

void zr_server_trim_heap(void) {
        malloc_trim(0);
}

uint64_t zr_server_now_usec(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

static void arm_idle(zr_server *s) {
        if (!s->ev_idle || s->draining)
                return;
        if (s->nclients == 0 && s->cfg.idle_exit_sec > 0) {
                struct timeval tv = {(time_t)s->cfg.idle_exit_sec, 0};
                event_add(s->ev_idle, &tv);
        } else {
                event_del(s->ev_idle);
        }
}

static void maybe_finish_drain(zr_server *s) {
        if (s->draining && s->nclients == 0 && zr_work_pending(s->work) == 0)
                event_base_loopexit(s->base, NULL);
}

/* A FAULT written straight to a socket that never became a session. */
static void refuse(zr_server *s, int fd, int code, const char *msg) {
        zr_wire_writer w;
        const uint8_t *frame;
        size_t size;
        zr_wire_writer_init(&w);
        zr_session_write_error(&w, true, 0, code, msg);
        if (zr_wire_writer_finish(&w, ZR_FRAME_MAX_FLOOR, &frame, &size, NULL) == 0)
                (void)send(fd, frame, size, MSG_NOSIGNAL | MSG_DONTWAIT);
        zr_wire_writer_destroy(&w);
        /* A Unix socket closed with unread input resets its peer, which may then
         * never read the FAULT: drop what the client already sent (its HELLO;
         * descriptors with it are closed by the kernel), a bounded amount. */
        char sink[4096];
        for (int i = 0; i < 4 && recv(fd, sink, sizeof(sink), MSG_DONTWAIT) > 0; i++)
                ;
        close(fd);
}

/* From a pool worker: a loader has events. */
static void loader_notify(void *arg) {
        zr_server *s = arg;
        uint64_t one = 1;
        (void)!write(s->loader_efd, &one, sizeof(one));
}

static void loader_cb(evutil_socket_t fd, short what, void *arg) {
        zr_server *s = arg;
        uint64_t v;
        (void)!read(s->loader_efd, &v, sizeof(v));
        zr_server_loader_events(s);
}

static void work_idle_cb(void *arg) {
        maybe_finish_drain(arg);
}

/* Lines a client's connections cause at will: bounded (log.h). */
static zr_ratelimit rl_accept = ZR_RATELIMIT(10, 10);
static zr_ratelimit rl_refuse = ZR_RATELIMIT(10, 10);
static zr_ratelimit rl_nofd = ZR_RATELIMIT(10, 5);

static int open_reserve(void) {
        return open("/dev/null", O_RDONLY | O_CLOEXEC);
}

static void listen_pause(zr_server *s) {
        struct timeval tv = {0, LISTEN_RETRY_MSEC * 1000};
        if (s->listen_paused || s->draining)
                return;
        s->listen_paused = true;
        event_del(s->ev_listen);
        event_add(s->ev_listen_retry, &tv);
}

static void listen_resume(zr_server *s) {
        if (!s->listen_paused)
                return;
        if (s->reserve_fd < 0)
                s->reserve_fd = open_reserve();
        s->listen_paused = false;
        event_del(s->ev_listen_retry);
        if (!s->draining && s->listen_fd >= 0)
                event_add(s->ev_listen, NULL);
}

static void listen_retry_cb(evutil_socket_t fd, short what, void *arg) {
        listen_resume(arg);
}

void zr_server_session_gone(zr_server *s) {
        s->nclients--;
        if (s->listen_paused)
                listen_resume(s);
        arm_idle(s);
        maybe_finish_drain(s);
}

/* accept() failed with EMFILE or ENFILE: a connection is pending that the
 * daemon cannot take, and the listening socket stays readable, so returning
 * would bring the loop straight back here. Spend the reserve descriptor on
 * taking it and refusing it with a FAULT; then take the reserve back. Returns
 * true if a connection was refused (try the next), false when the backlog is
 * empty or listening had to pause (no reserve left). */
static bool shed_connection(zr_server *s, int error) {
        zr_log_ratelimited(&rl_nofd, LOG_WARNING, "accept: %s (%u clients, descriptor limit "
                           "%llu): refusing new connections until descriptors free",
                           strerror(error), s->nclients, (unsigned long long)s->nofile);
        if (s->reserve_fd < 0) {
                listen_pause(s);
                return false;
        }
        close(s->reserve_fd);
        int fd = accept4(s->listen_fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
        int e = errno;
        if (fd >= 0)
                refuse(s, fd, ZR_E_LIMIT, "the daemon is out of descriptors: try again later");
        s->reserve_fd = open_reserve();
        /* another thread took the freed descriptor first: wait for one */
        if (s->reserve_fd < 0 || (fd < 0 && (e == EMFILE || e == ENFILE))) {
                listen_pause(s);
                return false;
        }
        return fd >= 0;
}

static void accept_cb(evutil_socket_t lfd, short what, void *arg) {
        zr_server *s = arg;
        for (;;) {
                int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
                if (fd < 0) {
                        if (errno == EMFILE || errno == ENFILE) {
                                if (shed_connection(s, errno))
                                        continue;
                                return;
                        }
                        if (errno != EAGAIN && errno != EINTR && errno != ECONNABORTED)
                                zr_log_ratelimited(&rl_accept, LOG_WARNING, "accept: %s",
                                                   strerror(errno));
                        return;
                }
                if (s->draining) {
                        refuse(s, fd, ZR_E_SHUTDOWN, "the daemon is shutting down");
                        continue;
                }
                struct ucred cred = {.pid = -1, .uid = (uid_t)-1};
                socklen_t len = sizeof(cred);
                zr_user *u = NULL;
                zr_error err = {0};
                getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len);
                if (zr_users_get(s->users, cred.uid, &u) < 0) {
                        refuse(s, fd, ENOMEM, "out of memory");
                        continue;
                }
                if (zr_user_charge(u, ZR_USER_CONNS, 1, &err) < 0) {
                        zr_log_ratelimited(&rl_refuse, LOG_WARNING, "refusing a client (pid %d "
                                           "uid %u): %s", (int)cred.pid, (unsigned)cred.uid,
                                           err.message);
                        refuse(s, fd, ZR_E_LIMIT, err.message);
                        zr_user_unref(u);
                        continue;
                }
                zr_session *c;
                if (zr_session_new(s, fd, u, &c) < 0) {
                        zr_log_ratelimited(&rl_accept, LOG_ERR, "out of memory for a client");
                        continue;
                }
                s->nclients++;
                arm_idle(s);
        }
}

/* ---- timers -------------------------------------------------------------- */

typedef struct sync_job {
        zr_job job;
        zr_server *s;
        zr_entry *entry;
        int r;
        bool stale;    /* found changed on disk now */
        zr_error err;
} sync_job;

/* A written store's sync; a read-only one's check that nobody changed it on
 * disk (store.h, zr_store_check_unchanged()): if somebody did, its loaders end
 * (ZR_E_STALE: the generation moves) and it is served no more. */
static void sync_run(zr_job *job) {
        sync_job *j = (sync_job *)job;
        zr_store *st = zr_dataset_store(j->entry->ds);
        zr_dataset_lock(j->entry->ds, false);
        if (zr_store_read_only(st) && !zr_store_stale(st)) {
                j->r = zr_store_check_unchanged(st, &j->err);
                if (j->r == -ZR_E_STALE) {
                        j->stale = true;
                        zr_dataset_mutated(j->entry->ds);
                }
        } else {
                j->r = zr_dataset_sync(j->entry->ds, &j->err);
        }
        zr_dataset_unlock(j->entry->ds);
}

static void sync_done(zr_job *job) {
        sync_job *j = (sync_job *)job;
        if (j->stale) {
                zr_log(LOG_WARNING, "store %llu: %s", (unsigned long long)zr_entry_id(j->entry),
                       j->err.message);
                zr_server_dataset_mutated(j->s, j->entry);
        } else if (j->r < 0) {
                zr_log(LOG_ERR, "periodic sync of store %llu: %s",
                       (unsigned long long)zr_entry_id(j->entry), j->err.message);
        }
        zr_entry_unref(j->entry);
        free(j);
}

static void sync_one(zr_entry *e, void *arg) {
        zr_server *s = arg;
        sync_job *j = calloc(1, sizeof(*j));
        if (!j)
                return;
        j->s = s;
        j->entry = zr_entry_ref(e);
        j->job.run = sync_run;
        j->job.done = sync_done;
        zr_work_submit(s->work, &j->job);
}

static void sync_cb(evutil_socket_t fd, short what, void *arg) {
        zr_server *s = arg;
        if (!s->draining)
                zr_registry_foreach(s->registry, sync_one, s);
}

static void status_cb(evutil_socket_t fd, short what, void *arg) {
        zr_server *s = arg;
        uint64_t now = zr_server_now_usec();
        zr_loader_engine_counters lk = {0};
        zr_loader_engine_counters_get(s->loaders, &lk);
        double dt = (double)(now - s->status_usec) / 1e6;
        double rate = dt > 0 ? (double)(lk.batches - s->status_batches) / dt : 0;
        zr_watch_summary ws = {0};
        s->status_usec = now;
        s->status_batches = lk.batches;
        if (s->watch)
                zr_watch_get(s->watch, &ws);
        zr_notifyf("STATUS=%u clients, %llu loaders (%u data-bound), %.1f batches/s, "
                   "%u stores open", s->nclients, (unsigned long long)s->counters.loaders,
                   ws.data_bound, rate, zr_registry_count(s->registry));
}

static void watchdog_cb(evutil_socket_t fd, short what, void *arg) {
        zr_notify("WATCHDOG=1");
}

static void idle_cb(evutil_socket_t fd, short what, void *arg) {
        zr_server *s = arg;
        if (s->nclients == 0)
                zr_server_shutdown(s, "idle");
}

static void drain_timeout_cb(evutil_socket_t fd, short what, void *arg) {
        zr_server *s = arg;
        zr_log(LOG_WARNING, "drain: %u clients still connected after %d s, closing them",
               s->nclients, DRAIN_TIMEOUT_SEC);
        zr_session *next;
        for (zr_session *c = s->sessions; c; c = next) {
                next = zr_session_next(c);
                zr_session_kill(c);
        }
}

/* ---- per-uid limits ------------------------------------------------------ */

/* Resolves the memory budgets (budgets.h) and logs them. */
static void resolve_budgets(zr_server *s, zr_budgets *ret) {
        zr_error err = {0};
        if (zr_budgets_resolve(&s->cfg, NULL, ret, &err) < 0)
                zr_log(LOG_WARNING, "memory budgets: %s; set cache, ring-spare, prefetch, "
                       "max-shm-total and max-shm-per-uid", err.message);
        /* without a budget from the box, each uid gets the per-client limit */
        if (!ret->shm_uid.bytes)
                ret->shm_uid.bytes = s->cfg.max_shm_bytes;
        s->shm_total_max = ret->shm_total.bytes;
        s->shm_uid_max = ret->shm_uid.bytes;
        s->work_total_max = ret->work_total.bytes;
        s->work_uid_max = ret->work_uid.bytes;
}

static void log_budgets(const zr_budgets *b) {
        zr_log(LOG_INFO, "memory: %llu MiB usable (%s); cache %llu MiB, ring-spare %llu MiB, "
               "prefetch %llu MiB, read pool %llu MiB per client, shared memory %llu MiB for all "
               "users, %llu MiB per uid, working memory %llu MiB for all users, %llu MiB per uid",
               (unsigned long long)(b->memory >> 20), b->memory_source[0] ? b->memory_source :
               "unknown", (unsigned long long)(b->cache.bytes >> 20),
               (unsigned long long)(b->ring_spare.bytes >> 20),
               (unsigned long long)(b->prefetch.bytes >> 20),
               (unsigned long long)(b->read_pool.bytes >> 20),
               (unsigned long long)(b->shm_total.bytes >> 20),
               (unsigned long long)(b->shm_uid.bytes >> 20),
               (unsigned long long)(b->work_total.bytes >> 20),
               (unsigned long long)(b->work_uid.bytes >> 20));
}

/* Direct reads (docs/IO.md, "Direct reads"): the mode set, and in `auto` the
 * size of stores read directly: more data than half of the memory the daemon
 * may use, which a store that fits in the other half could not stay resident
 * beside. */
#define DIRECT_MIN_SHARE 2
static void set_direct(zr_server *s) {
        uint64_t min = s->budgets.memory / DIRECT_MIN_SHARE;
        zr_loader_engine_set_direct(s->loaders, (enum zr_direct_mode)s->cfg.io_direct);
        zr_loader_engine_set_direct_min(s->loaders, min);
        if (s->cfg.io_direct == ZR_DIRECT_AUTO)
                zr_log(LOG_INFO, "io-direct auto: cold steps of loaders whose stores hold more "
                       "than %llu MiB (half the memory) read with O_DIRECT",
                       (unsigned long long)(min >> 20));
}

/* Applies budgets that differ from those in force, logging each change. */
static unsigned apply_budgets(zr_server *s, const zr_budgets *n) {
        zr_budgets *o = &s->budgets;
        unsigned changes = 0;
#define BUDGET(name, set)                                                                            if (o->name.bytes != n->name.bytes) {                                                                 zr_log(LOG_NOTICE, "reload: " #name " budget %llu -> %llu bytes (%s)",                               (unsigned long long)o->name.bytes, (unsigned long long)n->name.bytes,                         n->name.source);                                                                       set;                                                                                          changes++;                                                                            }
        BUDGET(cache, zr_loader_engine_set_cache_bytes(s->loaders, n->cache.bytes))
        /* a lowered budget releases spares at once; a raised one fills as loaders close */
        BUDGET(ring_spare, zr_loader_engine_set_spare_bytes(s->loaders, n->ring_spare.bytes))
        BUDGET(prefetch, zr_loader_engine_set_io(s->loaders, s->ioq, n->prefetch.bytes))
        BUDGET(read_pool, (void)0) /* HELLO tells each new connection */
        BUDGET(shm_total, (void)0)
        BUDGET(shm_uid, (void)0)
        BUDGET(work_total, (void)0)
        BUDGET(work_uid, (void)0)
#undef BUDGET
        *o = *n;
        return changes;
}

/* The disk cache's budget (docs/REMOTE.md): the setting, or auto: a quarter
 * of the free space of the cache's file system now, at most 64 GiB. */
#define REMOTE_CACHE_AUTO_SHARE 4
#define REMOTE_CACHE_AUTO_MAX ((uint64_t)64 << 30)
static uint64_t remote_budget(const zr_config *c, char *source, size_t n) {
        struct statvfs sv;
        if (c->remote_cache_bytes != ZR_CONFIG_AUTO) {
                snprintf(source, n, "set");
                return c->remote_cache_bytes;
        }
        if (statvfs(c->remote_cache_dir, &sv) < 0) {
                snprintf(source, n, "auto: the file system unknown, 1 GiB");
                return (uint64_t)1 << 30;
        }
        uint64_t free_bytes = (uint64_t)sv.f_bavail * sv.f_frsize, b = free_bytes /
                                                                      REMOTE_CACHE_AUTO_SHARE;
        if (b > REMOTE_CACHE_AUTO_MAX)
                b = REMOTE_CACHE_AUTO_MAX;
        snprintf(source, n, "auto: a quarter of %llu MiB free, at most 64 GiB",
                 (unsigned long long)(free_bytes >> 20));
        return b;
}

/* The remote stores' context: its disk cache and fetcher. A daemon that cannot
 * make them serves local stores all the same, and says why to a remote open. */
static void make_remote(zr_server *s) {
        const zr_config *c = &s->cfg;
        zr_error err = {0};

        if (!c->remote) {
                snprintf(s->remote_error, sizeof(s->remote_error), "this daemon does not open "
                         "remote stores (remote = no)");
                return;
        }
        if (!c->remote_cache_dir[0]) {
                snprintf(s->remote_error, sizeof(s->remote_error), "this daemon has no disk "
                         "cache for remote stores: set remote-cache-dir");
                zr_log(LOG_WARNING, "remote stores: %s", s->remote_error);
                return;
        }
        /* the directory first: auto sizes from its file system */
        char path[4200];
        snprintf(path, sizeof(path), "%s", c->remote_cache_dir);
        for (char *p = path + 1; *p; p++)
                if (*p == '/') {
                        *p = 0;
                        (void)mkdir(path, 0700);
                        *p = '/';
                }
        (void)mkdir(path, 0700);
        s->remote_budget = remote_budget(c, s->remote_budget_source,
                                         sizeof(s->remote_budget_source));
        zr_remote_options o = {
                .cache_dir = c->remote_cache_dir, .budget = s->remote_budget,
                .fetch = { .depth = c->remote_depth, .connections = c->remote_connections,
                           .timeout_s = (long)c->remote_timeout_sec },
        };
        if (zr_remote_new(&o, &s->remote, &err) < 0) {
                snprintf(s->remote_error, sizeof(s->remote_error), "remote stores: %s",
                         err.message);
                zr_log(LOG_WARNING, "%s", s->remote_error);
                return;
        }
        zr_log(LOG_INFO, "remote stores: disk cache %s, %llu MiB (%s), %u requests deep",
               c->remote_cache_dir, (unsigned long long)(s->remote_budget >> 20),
               s->remote_budget_source, c->remote_depth);
}

/* The queue of reads ahead: io-backend and io-depth; for the daemon's tests,
 * ZRECORDD_TEST_IO_FAIL=N[:ERRNO] fails the N-th read it issues (EIO). */
static int make_ioq(zr_server *s, zr_error *err) {
        zr_ioq_options o = { .backend = s->cfg.io_backend, .max_inflight = s->cfg.io_depth,
                             .threads = s->cfg.io_depth < ZR_IOQ_DEFAULT_THREADS
                                                ? s->cfg.io_depth : ZR_IOQ_DEFAULT_THREADS };
        const char *fail = getenv("ZRECORDD_TEST_IO_FAIL");
        if (fail) {
                unsigned long long nth = 0;
                int e = 0;
                if (sscanf(fail, "%llu:%d", &nth, &e) < 1 || nth == 0)
                        return zr_error_set(err, EINVAL, "ZRECORDD_TEST_IO_FAIL is not N[:ERRNO]");
                o.fail_nth = nth;
                o.fail_errno = e;
                zr_log(LOG_WARNING, "test switch: read %llu ahead fails with errno %d", nth,
                       e ? e : EIO);
        }
        int r = zr_ioq_new(&o, &s->ioq, err);
        if (r < 0)
                return r;
        zr_log(LOG_INFO, "reading ahead through %s, %u reads deep",
               zr_ioq_backend_name(zr_ioq_backend_of(s->ioq)), s->cfg.io_depth);
        return 0;
}

void zr_server_user_limits(const zr_server *s, zr_user_limits *l) {
        const zr_config *c = &s->cfg;
        *l = (zr_user_limits){0};
        l->total_max[ZR_USER_CONNS] = c->max_clients;
        l->uid_max[ZR_USER_CONNS] = c->max_clients_per_uid;
        /* Descriptors in flight, all uids: half the descriptor limit, the rest
         * for connections, stores, rings and buffers. */
        l->total_max[ZR_USER_FDS] = s->nofile / 2 > UINT32_MAX ? UINT32_MAX : s->nofile / 2;
        l->uid_max[ZR_USER_FDS] = c->max_fds_per_uid;
        l->uid_max[ZR_USER_BYTES] = c->max_bytes_per_uid;
        l->uid_max[ZR_USER_SHM] = s->shm_uid_max;
        l->total_max[ZR_USER_SHM] = s->shm_total_max;
        l->uid_max[ZR_USER_WORK] = s->work_uid_max;
        l->total_max[ZR_USER_WORK] = s->work_total_max;
        /* Jobs: one uid never holds every worker (a worker is left for the
         * others' jobs), unless there is only one. */
        l->jobs_uid_max = c->max_jobs_per_uid;
        if (!l->jobs_uid_max) {
                size_t threads = s->pool ? zr_pool_threads(s->pool) : c->threads;
                if (!threads) {
                        long cpus = sysconf(_SC_NPROCESSORS_ONLN);
                        threads = cpus > 0 ? (size_t)cpus : 1;
                }
                l->jobs_uid_max = threads > 1 ? (unsigned)(threads - 1) : 1;
        }
}

/* A uid gave something back: connections that stopped for lack of room ask
 * again, from the loop, not inside the release. */
static void users_wake(void *arg) {
        zr_server *s = arg;
        event_active(s->ev_wake, EV_TIMEOUT, 0);
}

static void wake_cb(evutil_socket_t fd, short what, void *arg) {
        zr_server *s = arg;
        for (zr_session *c = s->sessions; c; c = zr_session_next(c))
                zr_session_kick(c);
}

/* ---- signals ------------------------------------------------------------- */

static void remove_socket(zr_server *s) {
        struct stat st;
        if (!s->socket_created)
                return;
        /* Only our own file: another daemon may have replaced a stale path. */
        if (lstat(s->cfg.socket_path, &st) == 0 && st.st_dev == s->socket_dev &&
            st.st_ino == s->socket_ino)
                unlink(s->cfg.socket_path);
        s->socket_created = false;
}

/* SIGALRM after STOP_DEADLINE_SEC of a stop: exit now. Async-signal-safe. */
static void stop_deadline(int sig) {
        static const char msg[] = "zrecordd: stop deadline passed: exiting without waiting "
                                  "for the work still running\n";
        ssize_t n = write(STDERR_FILENO, msg, sizeof(msg) - 1);
        (void)n;
        (void)sig;
        _exit(1);
}

static void arm_stop_deadline(void) {
        struct sigaction sa = { .sa_handler = stop_deadline };
        sigemptyset(&sa.sa_mask);
        if (sigaction(SIGALRM, &sa, NULL) == 0)
                alarm(STOP_DEADLINE_SEC);
}

void zr_server_shutdown(zr_server *s, const char *why) {
        if (s->draining)
                return;
        s->draining = true;
        arm_stop_deadline();
        zr_log(LOG_NOTICE, "shutting down (%s): draining %u clients", why, s->nclients);
        zr_notify("STOPPING=1");
        if (s->ev_listen)
                event_del(s->ev_listen);
        if (s->ev_listen_retry)
                event_del(s->ev_listen_retry);
        s->listen_paused = false;
        /* Stop accepting: new clients get ECONNREFUSED from here on. */
        remove_socket(s);
        if (s->listen_fd >= 0) {
                close(s->listen_fd);
                s->listen_fd = -1;
        }
        event_del(s->ev_idle);
        event_del(s->ev_sync);
        zr_session *next;
        for (zr_session *c = s->sessions; c; c = next) {
                next = zr_session_next(c);
                zr_session_drain(c);
        }
        struct timeval tv = {DRAIN_TIMEOUT_SEC, 0};
        event_add(s->ev_drain, &tv);
        maybe_finish_drain(s);
}

static void sigterm_cb(evutil_socket_t sig, short what, void *arg) {
        zr_server_shutdown(arg, sig == SIGINT ? "SIGINT" : "SIGTERM");
}

static void reload(zr_server *s) {
        zr_config n;
        zr_error err = {0};
        zr_notify("RELOADING=1");
        zr_config_defaults(&n);
        int r = zr_config_parse_args(&n, s->argc, s->argv, &err);
        if (r == 0)
                r = zr_config_resolve(&n, &err);
        if (r != 0) {
                zr_log(LOG_ERR, "reload: %s; keeping the settings in force",
                       r < 0 ? err.message : "unexpected --help");
                zr_notify("READY=1");
                return;
        }
        zr_config *o = &s->cfg;
        unsigned changes = 0;
#define CHANGED(field, fmt, cast)                                                             \
        if (o->field != n.field) {                                                            \
                zr_log(LOG_NOTICE, "reload: " #field " " fmt " -> " fmt, (cast)o->field,     \
                       (cast)n.field);                                                        \
                o->field = n.field;                                                           \
                changes++;                                                                    \
        }
        if (o->log_level != n.log_level) {
                zr_log(LOG_NOTICE, "reload: log-level %s -> %s", zr_log_level_name(o->log_level),
                       zr_log_level_name(n.log_level));
                zr_log_set_level(n.log_level);
                o->log_level = n.log_level;
                changes++;
        }
        CHANGED(max_frame_bytes, "%u", unsigned)
        CHANGED(max_handles, "%u", unsigned)
        CHANGED(max_loaders, "%u", unsigned)
        CHANGED(max_shm_bytes, "%llu", unsigned long long)
        CHANGED(max_clients, "%u", unsigned)
        CHANGED(max_clients_per_uid, "%u", unsigned)
        CHANGED(hello_timeout_sec, "%llu", unsigned long long)
        CHANGED(idle_timeout_sec, "%llu", unsigned long long)
        CHANGED(frame_timeout_sec, "%llu", unsigned long long)
        CHANGED(max_fds, "%u", unsigned)
        CHANGED(max_fds_per_uid, "%u", unsigned)
        CHANGED(max_bytes_per_uid, "%llu", unsigned long long)
        CHANGED(max_shm_per_uid, "%llu", unsigned long long)
        CHANGED(max_shm_total, "%llu", unsigned long long)
        CHANGED(max_jobs_per_uid, "%u", unsigned)
        if (o->io_direct != n.io_direct) {
                zr_log(LOG_NOTICE, "reload: io-direct %s -> %s",
                       zr_direct_mode_name((enum zr_direct_mode)o->io_direct),
                       zr_direct_mode_name((enum zr_direct_mode)n.io_direct));
                o->io_direct = n.io_direct;
                changes++;
        }
        if (o->loop_fill_bytes != n.loop_fill_bytes) {
                CHANGED(loop_fill_bytes, "%llu", unsigned long long)
                zr_loader_engine_set_inline(s->loaders, o->loop_fill_bytes);
        }
        /* cache, ring-spare, prefetch and read-pool: their budgets in force below */
        o->cache_bytes = n.cache_bytes;
        o->ring_spare_bytes = n.ring_spare_bytes;
        o->prefetch_bytes = n.prefetch_bytes;
        o->read_pool_bytes = n.read_pool_bytes;
        CHANGED(idle_exit_sec, "%llu", unsigned long long)
        if (o->stall_warning_sec != n.stall_warning_sec) {
                CHANGED(stall_warning_sec, "%llu", unsigned long long)
                zr_watch_set_warning(s->watch, o->stall_warning_sec);
        }
#undef CHANGED
        o->remote_cache_bytes = n.remote_cache_bytes;
        if (s->remote) {
                char src[96];
                uint64_t b = remote_budget(o, src, sizeof(src));
                if (b != s->remote_budget) {
                        zr_log(LOG_NOTICE, "reload: remote-cache budget %llu -> %llu bytes (%s)",
                               (unsigned long long)s->remote_budget, (unsigned long long)b, src);
                        s->remote_budget = b;
                        snprintf(s->remote_budget_source, sizeof(s->remote_budget_source), "%s",
                                 src);
                        zr_remote_set_budget(s->remote, b);
                        changes++;
                }
        }
        /* auto budgets follow a changed cgroup limit */
        zr_budgets nb;
        resolve_budgets(s, &nb);
        changes += apply_budgets(s, &nb);
        set_direct(s); /* the mode, and the memory it follows */
        zr_user_limits ul;
        zr_server_user_limits(s, &ul);
        zr_users_set_limits(s->users, &ul);
        if (o->sync_interval_sec != n.sync_interval_sec) {
                zr_log(LOG_NOTICE, "reload: sync-interval %llu -> %llu",
                       (unsigned long long)o->sync_interval_sec,
                       (unsigned long long)n.sync_interval_sec);
                o->sync_interval_sec = n.sync_interval_sec;
                event_del(s->ev_sync);
                if (o->sync_interval_sec) {
                        struct timeval tv = {(time_t)o->sync_interval_sec, 0};
                        event_add(s->ev_sync, &tv);
                }
                changes++;
        }
        if (strcmp(o->socket_path, n.socket_path) != 0 || o->threads != n.threads ||
            o->socket_mode != n.socket_mode || o->socket_gid != n.socket_gid ||
            o->io_backend != n.io_backend || o->io_depth != n.io_depth ||
            strcmp(o->metrics_listen, n.metrics_listen) != 0)
                zr_log(LOG_WARNING, "reload: socket, threads, io-backend, io-depth and "
                       "metrics-listen change only at restart");
        arm_idle(s);
        zr_log(LOG_NOTICE, "reloaded %s: %u settings changed (limits apply to new connections)",
               o->config_path[0] ? o->config_path : "the settings", changes);
        zr_notify("READY=1");
}

static void sighup_cb(evutil_socket_t sig, short what, void *arg) {
        reload(arg);
}

/* ---- setup --------------------------------------------------------------- */

/* Every client costs descriptors (its socket, the descriptors it passes, its
 * rings and buffers), and the soft limit a service starts with is often 1024:
 * raise it to the hard limit. A sandbox may forbid it (systemd's @resources
 * filter): then the unit's LimitNOFILE= is what the daemon gets. */
static uint64_t raise_nofile(void) {
        struct rlimit rl;
        if (getrlimit(RLIMIT_NOFILE, &rl) < 0)
                return 1024;
        if (rl.rlim_cur < rl.rlim_max) {
                rlim_t soft = rl.rlim_cur;
                rl.rlim_cur = rl.rlim_max;
                if (setrlimit(RLIMIT_NOFILE, &rl) < 0) {
                        zr_log(LOG_NOTICE, "keeping the descriptor limit at %llu (raising it to "
                               "%llu: %s)", (unsigned long long)soft,
                               (unsigned long long)rl.rlim_max, strerror(errno));
                        rl.rlim_cur = soft;
                }
        }
        return rl.rlim_cur == RLIM_INFINITY ? UINT64_MAX : (uint64_t)rl.rlim_cur;
}

static int make_parent(const char *path, zr_error *err) {
        char dir[ZR_CONFIG_PATH_MAX];
        snprintf(dir, sizeof(dir), "%s", path);
        char *slash = strrchr(dir, '/');
        if (!slash || slash == dir)
                return 0;
        *slash = 0;
        if (mkdir(dir, 0755) < 0 && errno != EEXIST)
                return zr_error_errno(err, errno, "creating the socket directory %s", dir);
        return 0;
}

int zr_server_new(const zr_config *cfg, int argc, char **argv, zr_server **ret, zr_error *err) {
        zr_server *s = calloc(1, sizeof(*s));
        int r;
        if (!s)
                return zr_error_errno(err, ENOMEM, "allocating the server");
        s->cfg = *cfg;
        s->argc = argc;
        s->argv = argv;
        s->listen_fd = -1;
        s->loader_efd = -1;
        s->nofile = raise_nofile();
        s->reserve_fd = open_reserve();
        s->rings_sealed = zr_shm_seals_future_write() > 0;
        if (!s->rings_sealed)
                zr_log(LOG_NOTICE, "this kernel has no F_SEAL_FUTURE_WRITE: a client could map "
                       "a ring writable, so loaders of different users never share rings");
        s->start_usec = s->status_usec = zr_server_now_usec();

        s->base = event_base_new();
        if (!s->base) {
                r = zr_error_set(err, ENOMEM, "creating the event loop");
                goto fail;
        }
        resolve_budgets(s, &s->budgets);
        log_budgets(&s->budgets);
        zr_user_limits ul;
        zr_server_user_limits(s, &ul);
        r = zr_users_new(geteuid(), &ul, &s->users);
        if (r < 0) {
                r = zr_error_set(err, ENOMEM, "allocating the per-uid accounts");
                goto fail;
        }
        zr_users_set_wake(s->users, users_wake, s);
        r = zr_pool_new(cfg->threads, &s->pool);
        if (r < 0) {
                r = zr_error_errno(err, -r, "starting %u worker threads", cfg->threads);
                goto fail;
        }
        if (cfg->pin_workers) {
                r = zr_pool_pin(s->pool);
                if (r < 0)
                        zr_log(LOG_WARNING, "pinning the worker threads to CPUs: %s; they run "
                               "unpinned", strerror(-r));
                else if (r == 0)
                        zr_log(LOG_INFO, "%zu worker threads, more than the CPUs this process "
                               "may use: not pinned", zr_pool_threads(s->pool));
                else
                        zr_log(LOG_INFO, "%d worker threads, each pinned to a CPU of its own", r);
        }
        r = zr_work_new(s->base, s->pool, &s->work);
        if (r < 0) {
                r = zr_error_errno(err, -r, "creating the completion channel");
                goto fail;
        }
        zr_work_set_idle(s->work, work_idle_cb, s);
        s->loader_efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        if (s->loader_efd < 0) {
                r = zr_error_errno(err, errno, "creating the loader eventfd");
                goto fail;
        }
        r = zr_loader_engine_new(s->pool, s->budgets.cache.bytes, loader_notify, s, &s->loaders,
                                 err);
        if (r < 0)
                goto fail;
        zr_loader_engine_set_spare_bytes(s->loaders, s->budgets.ring_spare.bytes);
        {
                char why[512];
                r = zr_tokstore_open(cfg->token_index_bytes ? cfg->token_index_dir : NULL,
                                     cfg->token_index_bytes, &s->tokstore, why, sizeof(why));
                if (r < 0) {
                        r = zr_error_errno(err, -r, "the packed loaders' index store");
                        goto fail;
                }
                if (why[0])
                        zr_log(LOG_WARNING, "token-index-dir %s: packed loaders build their "
                               "indexes in memory", why);
                zr_loader_engine_set_tokstore(s->loaders, s->tokstore);
        }
        r = make_ioq(s, err);
        if (r < 0)
                goto fail;
        zr_loader_engine_set_io(s->loaders, s->ioq, s->budgets.prefetch.bytes);
        set_direct(s);
        zr_loader_engine_set_inline(s->loaders, s->cfg.loop_fill_bytes);
        r = zr_registry_new(s->pool, &s->registry);
        if (r < 0) {
                r = zr_error_errno(err, -r, "creating the registry");
                goto fail;
        }
        make_remote(s);
        zr_registry_set_work(s->registry, s->work);

        r = zr_listener_from_env(&s->listen_fd, err);
        if (r < 0)
                goto fail;
        if (r == 0) {
                r = make_parent(cfg->socket_path, err);
                if (r < 0)
                        goto fail;
                r = zr_listener_bind(cfg->socket_path, cfg->socket_mode, cfg->socket_gid,
                                     &s->listen_fd, err);
                if (r < 0)
                        goto fail;
                struct stat st;
                if (lstat(cfg->socket_path, &st) == 0) {
                        s->socket_created = true;
                        s->socket_dev = st.st_dev;
                        s->socket_ino = st.st_ino;
                }
                zr_log(LOG_INFO, "listening on %s", cfg->socket_path);
        } else {
                zr_log(LOG_INFO, "listening on the socket passed by the service manager");
        }

        s->ev_listen = event_new(s->base, s->listen_fd, EV_READ | EV_PERSIST, accept_cb, s);
        s->ev_sigterm = evsignal_new(s->base, SIGTERM, sigterm_cb, s);
        s->ev_sigint = evsignal_new(s->base, SIGINT, sigterm_cb, s);
        s->ev_sighup = evsignal_new(s->base, SIGHUP, sighup_cb, s);
        s->ev_sync = event_new(s->base, -1, EV_PERSIST, sync_cb, s);
        s->ev_status = event_new(s->base, -1, EV_PERSIST, status_cb, s);
        s->ev_watchdog = event_new(s->base, -1, EV_PERSIST, watchdog_cb, s);
        s->ev_idle = event_new(s->base, -1, 0, idle_cb, s);
        s->ev_drain = event_new(s->base, -1, 0, drain_timeout_cb, s);
        s->ev_listen_retry = event_new(s->base, -1, 0, listen_retry_cb, s);
        s->ev_wake = event_new(s->base, -1, 0, wake_cb, s);
        s->ev_loader = event_new(s->base, s->loader_efd, EV_READ | EV_PERSIST, loader_cb, s);
        if (!s->ev_listen || !s->ev_sigterm || !s->ev_sigint || !s->ev_sighup || !s->ev_sync ||
            !s->ev_status || !s->ev_watchdog || !s->ev_idle || !s->ev_drain || !s->ev_loader ||
            !s->ev_listen_retry || !s->ev_wake) {
                r = zr_error_set(err, ENOMEM, "creating events");
                goto fail;
        }
        r = zr_watch_new(s, cfg->stall_warning_sec, &s->watch);
        if (r < 0) {
                r = zr_error_set(err, -r, "starting the loaders' watch");
                goto fail;
        }
        if (cfg->metrics_listen[0]) {
                r = zr_scrape_new(s, cfg->metrics_listen, &s->scrape, err);
                if (r < 0)
                        goto fail;
        }
        event_add(s->ev_listen, NULL);
        event_add(s->ev_loader, NULL);
        event_add(s->ev_sigterm, NULL);
        event_add(s->ev_sigint, NULL);
        event_add(s->ev_sighup, NULL);
        signal(SIGPIPE, SIG_IGN);
        if (cfg->sync_interval_sec) {
                struct timeval tv = {(time_t)cfg->sync_interval_sec, 0};
                event_add(s->ev_sync, &tv);
        }
        struct timeval stv = {STATUS_INTERVAL_SEC, 0};
        event_add(s->ev_status, &stv);
        uint64_t wd = zr_notify_watchdog_usec();
        if (wd) {
                struct timeval wtv = {(time_t)(wd / 2 / 1000000u), (suseconds_t)(wd / 2 % 1000000u)};
                event_add(s->ev_watchdog, &wtv);
        }
        if (cfg->idle_exit_sec)
                arm_idle(s);
        *ret = s;
        return 0;
fail:
        zr_server_free(s);
        return r;
}

int zr_server_run(zr_server *s) {
        zr_log(LOG_NOTICE, "zrecordd %s serving: %zu worker threads, up to %u clients, "
               "%llu descriptors", ZR_VERSION_STRING, zr_pool_threads(s->pool),
               s->cfg.max_clients, (unsigned long long)s->nofile);
        zr_notifyf("READY=1\nSTATUS=serving, 0 clients\nMAINPID=%d", (int)getpid());
        int r = event_base_dispatch(s->base);
        if (r < 0) {
                zr_log(LOG_ERR, "event loop failed");
                return 1;
        }
        return s->exit_code;
}

static void close_entry_sync(zr_entry *e, void *arg) {
        zr_error err = {0};
        if (zr_dataset_sync(e->ds, &err) < 0)
                zr_log(LOG_ERR, "sync of store %llu at exit: %s", (unsigned long long)zr_entry_id(e),
                       err.message);
}

zr_server *zr_server_free(zr_server *s) {
        if (!s)
                return NULL;
        /* Clients left (a loop failure): close them; their jobs still hold refs. */
        while (s->sessions) {
                zr_session *c = s->sessions;
                zr_session_kill(c);
                if (s->sessions == c) {
                        /* the close is deferred to the loop: run it */
                        event_base_loop(s->base, EVLOOP_ONCE | EVLOOP_NONBLOCK);
                        if (s->sessions == c)
                                break;
                }
        }
        /* Every loader went with its client, those whose gathers still ran once
         * those ended; the engine waits for its last task. Then every job
         * finishes on the pool, and completes here. */
        if (s->loaders)
                zr_server_loaders_wait_gone(s);
        s->loaders = zr_loader_engine_free(s->loaders);
        s->tokstore = zr_tokstore_free(s->tokstore);
        s->ioq = zr_ioq_free(s->ioq); /* its last reads ended with their loaders */
        if (s->registry)
                zr_registry_set_work(s->registry, NULL); /* no new jobs from here */
        if (s->work)
                zr_work_submit_all(s->work); /* the jobs still waiting run as the pool ends */
        s->pool = zr_pool_free(s->pool);
        if (s->work)
                zr_work_flush(s->work);
        if (s->registry) {
                zr_registry_foreach(s->registry, close_entry_sync, s);
                unsigned n = zr_registry_count(s->registry);
                s->registry = zr_registry_free(s->registry);
                if (n)
                        zr_log(LOG_INFO, "synced and closed %u stores", n);
        }
        /* after every remote dataset closed (its mirror waits for its requests) */
        s->remote = zr_remote_free(s->remote);
        s->work = zr_work_free(s->work);
        s->scrape = zr_scrape_free(s->scrape);
        s->watch = zr_watch_free(s->watch);
        struct event **evs[] = {&s->ev_listen, &s->ev_sigterm, &s->ev_sigint, &s->ev_sighup,
                                &s->ev_sync, &s->ev_status, &s->ev_watchdog, &s->ev_idle,
                                &s->ev_drain, &s->ev_loader, &s->ev_listen_retry, &s->ev_wake};
        for (size_t i = 0; i < sizeof(evs) / sizeof(evs[0]); i++)
                if (*evs[i]) {
                        event_free(*evs[i]);
                        *evs[i] = NULL;
                }
        remove_socket(s);
        if (s->listen_fd >= 0)
                close(s->listen_fd);
        if (s->loader_efd >= 0)
                close(s->loader_efd);
        if (s->reserve_fd >= 0)
                close(s->reserve_fd);
        s->users = zr_users_free(s->users);
        if (s->base)
                event_base_free(s->base);
        free(s);
        return NULL;
}
