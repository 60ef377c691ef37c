/* config.h: zrecordd's settings, from defaults, a config file and the command line.
 *
 * Precedence: built-in defaults < the config file (--config=PATH, or the default
 * file when it exists) < command-line flags. The file holds "key = value" lines;
 * '#' starts a comment; keys are the long option names (socket, threads, ...).
 * An unknown key or a bad value is an error naming the file and line.
 */
#ifndef ZR_SERVER_CONFIG_H
#define ZR_SERVER_CONFIG_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "io/ioq.h"
#include "util/error.h"

#define ZR_CONFIG_PATH_MAX 108 /* sun_path of struct sockaddr_un */
/* A budget set to "auto": a share of the daemon's memory (server/budgets.h). */
#define ZR_CONFIG_AUTO UINT64_MAX

typedef struct zr_config {
        char socket_path[ZR_CONFIG_PATH_MAX]; /* "" until resolved: see zr_config_resolve() */
        mode_t socket_mode;        /* 0660: the owner and the socket's group may connect */
        gid_t socket_gid;          /* (gid_t)-1: keep the creating process's group */
        unsigned threads;          /* worker threads; 0 = online CPUs */
        bool pin_workers;          /* one CPU per worker when they fit (util/pool.h) */
        int log_level;             /* LOG_ERR .. LOG_DEBUG */
        uint64_t idle_exit_sec;    /* exit after this long with no client; 0 = never */
        uint64_t sync_interval_sec; /* sync every store this often; 0 = only on close */
        uint64_t cache_bytes;      /* decoded-record cache budget, or ZR_CONFIG_AUTO */
        uint64_t ring_spare_bytes; /* spare pre-faulted rings kept for a resumed run, or auto */
        uint64_t prefetch_bytes;   /* bytes read ahead of the loaders, or auto */
        uint64_t read_pool_bytes;  /* free one-pass read buffers a client keeps, or auto */
        enum zr_ioq_backend io_backend; /* how reads ahead are issued (start only) */
        uint32_t io_depth;         /* reads in flight at once (start only) */
        int io_direct;             /* enum zr_direct_mode: which cold steps are read with
                                    * O_DIRECT (auto, off, always: docs/IO.md) */
        uint64_t loop_fill_bytes;  /* a warm loader's slots of at most this filled on the
                                    * loop thread (loader.h, zr_loader_engine_set_inline()) */
        /* per-client limits */
        uint32_t max_frame_bytes;  /* largest frame a client may send */
        uint32_t max_handles;      /* open datasets and buffers per client */
        uint32_t max_loaders;      /* open loaders per client */
        uint64_t max_shm_bytes;    /* read buffers and rings per client, in bytes */
        /* global limits */
        uint32_t max_clients;
        /* per-uid limits and timeouts (users.h: root and the daemon's own uid
         * are held to the global limits only) */
        uint32_t max_clients_per_uid;  /* connections of one uid */
        uint64_t hello_timeout_sec;    /* a connection without HELLO is closed; 0 = never */
        uint64_t idle_timeout_sec;     /* one with no handle and no request; 0 = never */
        uint64_t frame_timeout_sec;    /* a frame begun must end within this; 0 = never */
        uint32_t max_fds;              /* descriptors in flight per client */
        uint32_t max_fds_per_uid;      /* descriptors in flight per uid */
        uint64_t max_bytes_per_uid;    /* request bytes in flight per uid */
        uint64_t max_shm_per_uid;      /* buffers and rings per uid; 0 = auto (a quarter
                                        * of the memory the daemon may use) */
        uint64_t max_shm_total;        /* all uids together; 0 = auto (half of it) */
        uint64_t max_work_per_uid;     /* working memory per uid; 0 = auto (6% of the
                                        * memory the daemon may use) */
        uint64_t max_work_total;       /* all uids together; 0 = auto (12% of it) */
        uint32_t max_jobs_per_uid;     /* worker jobs of one uid running at once; 0 = auto
                                        * (the worker threads but one, at least one) */
        /* telemetry (docs/TELEMETRY.md) */
        uint64_t stall_warning_sec;    /* warn in the journal after a loader was
                                        * data-bound this long; 0 = never */
        char metrics_listen[ZR_CONFIG_PATH_MAX]; /* "": no metrics endpoint; a Unix
                                        * socket path, or a loopback HOST:PORT (scrape.h) */
        /* stores in object storage (docs/REMOTE.md) */
        bool remote;                   /* accept remote opens */
        char remote_cache_dir[4096];   /* "": $CACHE_DIRECTORY, $XDG_CACHE_HOME/zrecord,
                                        * ~/.cache/zrecord (zr_config_resolve()) */
        uint64_t remote_cache_bytes;   /* the disk cache's budget, or auto */
        uint32_t remote_depth;         /* requests in flight (start only) */
        uint32_t remote_connections;   /* connections per endpoint (start only) */
        uint32_t remote_timeout_sec;   /* no byte for this long: retried */
        /* packed loaders' indexes (loader/tokindex.h) */
        char token_index_dir[4096];    /* "": remote_cache_dir's root + "/tokens"
                                        * (zr_config_resolve()) */
        uint64_t token_index_bytes;    /* disk they may keep; 0: none */
        char config_path[4096];    /* the file read, or "" */
} zr_config;

/* Fills *c with the built-in defaults. */
void zr_config_defaults(zr_config *c);

/* Applies the config file at `path` (required to exist) over *c. */
int zr_config_load_file(zr_config *c, const char *path, zr_error *err);

/* Parses argv over *c (reading --config=PATH first if given). Returns 0 to run,
 * 1 when --help or --version was printed to stdout (exit 0), or a negative code
 * with *err naming the bad flag. */
int zr_config_parse_args(zr_config *c, int argc, char **argv, zr_error *err);

/* Fills in what depends on the environment: the socket path when none was set
 * ($ZRECORD_SOCKET, else /run/zrecord/zrecordd.sock for root, else
 * $XDG_RUNTIME_DIR/zrecord/zrecordd.sock, else /tmp/zrecord-<uid>/zrecordd.sock);
 * the disk cache's directory when none was set ($CACHE_DIRECTORY, the
 * service's CacheDirectory=, else $XDG_CACHE_HOME/zrecord, else
 * $HOME/.cache/zrecord, else /var/cache/zrecord for root). */
int zr_config_resolve(zr_config *c, zr_error *err);

/* Writes the --help text to stdout. */
void zr_config_print_help(void);

#endif
