/* config.c: defaults, the config file and the command line of zrecordd.
 * One table of settings drives both the file parser and getopt_long, so a key and
 * its flag can never disagree. See config.h. */
#include "server/config.h"

#include <errno.h>
#include <getopt.h>
#include <grp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <syslog.h>
#include <unistd.h>

#include "loader/loader.h"
#include "server/log.h"
#include "server/scrape.h"
#include "zr-proto.h"

#define MiB (UINT64_C(1) << 20)
#define GiB (UINT64_C(1) << 30)

/* Defaults and their reasons. */
#define DEFAULT_SOCKET_MODE 0660          /* owner + group: the `zrecord` group of the units */
/* Spare rings (zr_loader_engine_set_spare_bytes()): a closed loader leaves a
 * pre-faulted ring of its size, which the next loader of that size takes, so a
 * resumed run's first batch costs one gather, not the first touch of a fresh
 * ring (30-90 ms per 64 MiB slot here). Nothing is held until a loader closes,
 * and a spare only stands in for a ring that was just freed. A spare is made
 * only if its whole ring fits in the budget: issue 5's ring (prefetch 4 of
 * 256 x 256 KiB) is 256 MiB, and a few KiB more per slot with a second stream
 * (labels), so 512 MiB holds one such ring (or a prefetch-8 one), or two of
 * one stream (a training and an evaluation loader). It is shared memory that
 * no reclaim frees: a memory-tight shared machine sets 0. */
/* The memory budgets (cache, ring-spare, prefetch) default to "auto": a share
 * of the memory the daemon may use, at most a cap (server/budgets.h). */
/* Reads in flight in the I/O queue: the device here (a virtio disk) reached its
 * limit at 32 to 128 (bench/README.md, beyond memory); a deeper queue only
 * adds latency. */
#define DEFAULT_IO_DEPTH 128u
/* a warm loader's slots of at most this are filled on the loop thread: bench/README.md,
 * "Small batches" */
#define DEFAULT_LOOP_FILL (256u << 10)
/* Per-client and global limits: the protocol's defaults, reasons in zr-proto.h. */
#define DEFAULT_MAX_FRAME ZR_FRAME_MAX_DEFAULT
#define DEFAULT_MAX_HANDLES ZR_HANDLES_MAX_DEFAULT
#define DEFAULT_MAX_LOADERS ZR_LOADERS_MAX_DEFAULT
#define DEFAULT_MAX_SHM ZR_SHM_BYTES_MAX_DEFAULT
#define DEFAULT_MAX_CLIENTS ZR_CLIENTS_MAX_DEFAULT
#define DEFAULT_SYNC_SEC 30u              /* bound what a power loss can cost writers */
/* Per-uid limits (users.h). A quarter of the default connections: a training
 * job's ranks, loader workers and tools fit many times over, and with the fair
 * share of the rest no uid can leave the others without a connection. */
#define DEFAULT_MAX_CLIENTS_UID 64u
/* A client says HELLO in its first round trip; ten seconds cover a loaded
 * machine, and a connection that never speaks gives its slot back. */
#define DEFAULT_HELLO_TIMEOUT_SEC 10u
/* A connection that holds no handle and runs no request does nothing for
 * anyone; a client keeps one open between datasets for a while, and
 * reconnects after ten minutes of that. */
#define DEFAULT_IDLE_TIMEOUT_SEC 600u
/* A frame's bytes follow its prefix at once from any real client; one left
 * unfinished parks its bytes and up to 64 descriptors. */
#define DEFAULT_FRAME_TIMEOUT_SEC 30u
/* Descriptors in flight (passed, not yet taken by a request: an incomplete
 * frame's, queued requests'): about four full frames' worth per client (a
 * store opens with two, a multi-stream set with two per stream and its root);
 * a uid's clients together about sixteen. Root and the daemon's own uid are
 * held only to half the daemon's descriptor limit, which bounds every uid
 * together. */
#define DEFAULT_MAX_FDS 256u
#define DEFAULT_MAX_FDS_UID 1024u
/* Request bytes read and not yet executed, for all of a uid's clients: a
 * client pauses at 4 MiB of its own (session.c), so sixteen clients' worth. */
#define DEFAULT_MAX_BYTES_UID (64 * MiB)
/* Stores in object storage (docs/REMOTE.md): requests in flight enough to
 * fill a link of 10 ms round trips at a few GB/s of 256 KiB ranges; the
 * connections libcurl keeps to one endpoint (HTTP/1.1: one request each at a
 * time, so about half the depth); a request with no byte for 30 s is taken for
 * lost (SDKs use 20 to 60 s). */
#define DEFAULT_REMOTE_DEPTH 64u
#define DEFAULT_REMOTE_CONNECTIONS 32u
#define DEFAULT_REMOTE_TIMEOUT_SEC 30u
/* A loader data-bound this long gets a warning in the journal: long enough
 * that a slow start or an epoch boundary does not, short enough to be seen
 * while the job runs. */
#define DEFAULT_STALL_WARNING_SEC 60
/* Disk for packed loaders' indexes (loader/tokindex.h): 8 bytes a document a
 * cycle (best fit about 20 more), so 4 GiB keeps a few hundred cycles of a
 * million-document corpus, or a few of a 100-million one. */
#define DEFAULT_TOKEN_INDEX (UINT64_C(4) << 30)

enum { KEY_SOCKET = 1000, KEY_SOCKET_MODE, KEY_SOCKET_GROUP, KEY_THREADS, KEY_PIN_WORKERS,
       KEY_LOG_LEVEL,
       KEY_IDLE_EXIT, KEY_SYNC_INTERVAL, KEY_CACHE, KEY_RING_SPARE, KEY_READ_POOL, KEY_MAX_FRAME,
       KEY_MAX_HANDLES, KEY_MAX_LOADERS, KEY_MAX_SHM, KEY_MAX_CLIENTS, KEY_CONFIG, KEY_HELP,
       KEY_VERSION,
       /* per-uid limits and timeouts */
       KEY_MAX_CLIENTS_UID, KEY_HELLO_TIMEOUT, KEY_IDLE_TIMEOUT, KEY_FRAME_TIMEOUT, KEY_MAX_FDS,
       KEY_MAX_FDS_UID, KEY_MAX_BYTES_UID, KEY_MAX_SHM_UID, KEY_MAX_SHM_TOTAL,
       KEY_MAX_WORK_UID, KEY_MAX_WORK_TOTAL,
       KEY_MAX_JOBS_UID,
       /* reading ahead */
       KEY_PREFETCH, KEY_IO_BACKEND, KEY_IO_DEPTH, KEY_IO_DIRECT, KEY_LOOP_FILL,
       /* telemetry */
       KEY_STALL_WARNING, KEY_METRICS_LISTEN,
       /* stores in object storage */
       KEY_REMOTE, KEY_REMOTE_CACHE_DIR, KEY_REMOTE_CACHE, KEY_REMOTE_DEPTH,
       KEY_REMOTE_CONNECTIONS, KEY_REMOTE_TIMEOUT,
       /* packed loaders' indexes */
       KEY_TOKEN_INDEX_DIR, KEY_TOKEN_INDEX };

static const struct setting {
        const char *name;
        int key;
        const char *arg;
        const char *help;
} settings[] = {
        {"config", KEY_CONFIG, "PATH", "read settings from PATH (key = value lines)"},
        {"socket", KEY_SOCKET, "PATH", "listen on PATH (unless socket-activated)"},
        {"socket-mode", KEY_SOCKET_MODE, "OCTAL", "permissions of the socket file (0660)"},
        {"socket-group", KEY_SOCKET_GROUP, "GROUP", "group of the socket file"},
        {"threads", KEY_THREADS, "N", "worker threads (0 = one per CPU)"},
        {"pin-workers", KEY_PIN_WORKERS, "yes|no",
         "pin each worker to a CPU of its own when they fit (yes)"},
        {"log-level", KEY_LOG_LEVEL, "LEVEL", "err, warning, notice, info or debug (info)"},
        {"idle-exit", KEY_IDLE_EXIT, "SEC", "exit after SEC seconds without clients (0 = never)"},
        {"sync-interval", KEY_SYNC_INTERVAL, "SEC", "sync open stores every SEC seconds (30)"},
        {"cache", KEY_CACHE, "BYTES",
         "decoded-record cache budget (auto: 12% of the daemon's memory, at most 1G); K, M, G"},
        {"ring-spare", KEY_RING_SPARE, "BYTES",
         "spare rings for resumed runs (auto: 12% of the memory, at most 512M; 0 = none)"},
        {"prefetch", KEY_PREFETCH, "BYTES",
         "bytes read ahead of the loaders (auto: 12% of the memory, at most 1G; 0 = none)"},
        {"read-pool", KEY_READ_POOL, "BYTES",
         "free read buffers a client keeps for one-pass reads (auto: 1% of the memory, at "
         "most 256M; 0 = none)"},
        {"io-backend", KEY_IO_BACKEND, "NAME", "reads ahead through auto, uring or threads (auto)"},
        {"io-depth", KEY_IO_DEPTH, "N", "reads in flight at once (128; 1..4096)"},
        {"io-direct", KEY_IO_DIRECT, "auto|off|always",
         "read cold steps with O_DIRECT straight into the rings: auto, of stores larger than "
         "half the memory; always, of any store (auto)"},
        {"loop-fill", KEY_LOOP_FILL, "BYTES",
         "fill a warm loader's slots of at most BYTES on the loop thread itself (256K; 0 = never)"},
        {"max-frame", KEY_MAX_FRAME, "BYTES", "largest frame a client may send (1M; 64K..64M)"},
        {"max-handles", KEY_MAX_HANDLES, "N", "open handles per client (1024)"},
        {"max-loaders", KEY_MAX_LOADERS, "N", "open loaders per client (64)"},
        {"max-shm", KEY_MAX_SHM, "BYTES", "shared memory (rings, buffers) per client (4G)"},
        {"max-clients", KEY_MAX_CLIENTS, "N", "connected clients in total (256)"},
        /* per-uid limits and timeouts */
        {"max-clients-per-uid", KEY_MAX_CLIENTS_UID, "N", "connections of one uid (64)"},
        {"hello-timeout", KEY_HELLO_TIMEOUT, "SEC", "close a connection without HELLO (10; 0 = never)"},
        {"idle-timeout", KEY_IDLE_TIMEOUT, "SEC",
         "close one with no handle and no request (600; 0 = never)"},
        {"frame-timeout", KEY_FRAME_TIMEOUT, "SEC", "close one whose frame stays unfinished (30)"},
        {"max-fds", KEY_MAX_FDS, "N", "descriptors in flight per client (256; at least 65)"},
        {"max-fds-per-uid", KEY_MAX_FDS_UID, "N", "descriptors in flight per uid (1024)"},
        {"max-bytes-per-uid", KEY_MAX_BYTES_UID, "BYTES", "request bytes in flight per uid (64M)"},
        {"max-shm-per-uid", KEY_MAX_SHM_UID, "BYTES",
         "shared memory per uid (0 = a quarter of the daemon's memory)"},
        {"max-shm-total", KEY_MAX_SHM_TOTAL, "BYTES",
         "shared memory of all uids (0 = half of the daemon's memory)"},
        {"max-work-mem-per-uid", KEY_MAX_WORK_UID, "BYTES",
         "working memory of one uid's requests and loaders (0 = 6% of the daemon's memory, at least 256M)"},
        {"max-work-mem-total", KEY_MAX_WORK_TOTAL, "BYTES",
         "working memory of all uids (0 = 12%, at least 512M)"},
        {"max-jobs-per-uid", KEY_MAX_JOBS_UID, "N",
         "worker jobs of one uid at once (0 = the threads but one)"},
        {"stall-warning", KEY_STALL_WARNING, "SEC",
         "warn in the journal when a loader was data-bound this long (60; 0 = never)"},
        {"metrics-listen", KEY_METRICS_LISTEN, "ADDR",
         "serve Prometheus metrics on a Unix socket PATH or a loopback HOST:PORT (off)"},
        {"remote", KEY_REMOTE, "yes|no", "open stores in object storage, s3:// (yes)"},
        {"remote-cache-dir", KEY_REMOTE_CACHE_DIR, "PATH",
         "the disk cache of remote stores ($CACHE_DIRECTORY, $XDG_CACHE_HOME/zrecord)"},
        {"remote-cache", KEY_REMOTE_CACHE, "BYTES",
         "bytes of the disk cache (auto: a quarter of its file system's free space at start, "
         "at most 64G)"},
        {"remote-depth", KEY_REMOTE_DEPTH, "N", "requests to object storage in flight (64)"},
        {"remote-connections", KEY_REMOTE_CONNECTIONS, "N", "connections per endpoint (32)"},
        {"remote-timeout", KEY_REMOTE_TIMEOUT, "SEC",
         "a request with no byte for SEC seconds is tried again (30)"},
        {"token-index-dir", KEY_TOKEN_INDEX_DIR, "PATH",
         "packed loaders' indexes (tokens/ in the remote-cache-dir's directory)"},
        {"token-index", KEY_TOKEN_INDEX, "BYTES",
         "disk kept for packed loaders' indexes (4G; 0 = built in memory each time)"},
        {"help", KEY_HELP, NULL, "show this help"},
        {"version", KEY_VERSION, NULL, "show the version"},
};
#define N_SETTINGS (sizeof(settings) / sizeof(settings[0]))

void zr_config_defaults(zr_config *c) {
        memset(c, 0, sizeof(*c));
        c->socket_mode = DEFAULT_SOCKET_MODE;
        c->socket_gid = (gid_t)-1;
        c->pin_workers = true;
        c->log_level = LOG_INFO;
        c->sync_interval_sec = DEFAULT_SYNC_SEC;
        c->cache_bytes = ZR_CONFIG_AUTO;
        c->ring_spare_bytes = ZR_CONFIG_AUTO;
        c->prefetch_bytes = ZR_CONFIG_AUTO;
        c->read_pool_bytes = ZR_CONFIG_AUTO;
        c->token_index_bytes = DEFAULT_TOKEN_INDEX;
        c->io_backend = ZR_IOQ_AUTO;
        c->io_depth = DEFAULT_IO_DEPTH;
        c->io_direct = ZR_DIRECT_AUTO;
        c->loop_fill_bytes = DEFAULT_LOOP_FILL;
        c->remote = true;
        c->remote_cache_bytes = ZR_CONFIG_AUTO;
        c->remote_depth = DEFAULT_REMOTE_DEPTH;
        c->remote_connections = DEFAULT_REMOTE_CONNECTIONS;
        c->remote_timeout_sec = DEFAULT_REMOTE_TIMEOUT_SEC;
        c->max_frame_bytes = DEFAULT_MAX_FRAME;
        c->max_handles = DEFAULT_MAX_HANDLES;
        c->max_loaders = DEFAULT_MAX_LOADERS;
        c->max_shm_bytes = DEFAULT_MAX_SHM;
        c->max_clients = DEFAULT_MAX_CLIENTS;
        c->max_clients_per_uid = DEFAULT_MAX_CLIENTS_UID;
        c->hello_timeout_sec = DEFAULT_HELLO_TIMEOUT_SEC;
        c->idle_timeout_sec = DEFAULT_IDLE_TIMEOUT_SEC;
        c->frame_timeout_sec = DEFAULT_FRAME_TIMEOUT_SEC;
        c->max_fds = DEFAULT_MAX_FDS;
        c->max_fds_per_uid = DEFAULT_MAX_FDS_UID;
        c->max_bytes_per_uid = DEFAULT_MAX_BYTES_UID;
        c->stall_warning_sec = DEFAULT_STALL_WARNING_SEC;
}

static int parse_size(const char *s, uint64_t *ret) {
        char *end;
        errno = 0;
        if (*s == '-')
                return -EINVAL;
        unsigned long long v = strtoull(s, &end, 0);
        if (errno || end == s)
                return -EINVAL;
        unsigned shift = 0;
        switch (*end) {
        case 'k': case 'K': shift = 10; end++; break;
        case 'm': case 'M': shift = 20; end++; break;
        case 'g': case 'G': shift = 30; end++; break;
        case 't': case 'T': shift = 40; end++; break;
        }
        if (*end == 'i' && shift)
                end++;
        if ((*end == 'B' || *end == 'b') && shift)
                end++;
        if (*end)
                return -EINVAL;
        if (shift && v > (UINT64_MAX >> shift))
                return -ERANGE;
        *ret = (uint64_t)v << shift;
        return 0;
}

/* A size, or "auto" (ZR_CONFIG_AUTO). */
static int parse_size_auto(const char *s, uint64_t *ret) {
        if (strcmp(s, "auto") == 0) {
                *ret = ZR_CONFIG_AUTO;
                return 0;
        }
        int r = parse_size(s, ret);
        if (r == 0 && *ret == ZR_CONFIG_AUTO)
                return -ERANGE;
        return r;
}

static int parse_u32(const char *s, uint32_t *ret) {
        uint64_t v;
        int r = parse_size(s, &v);
        if (r < 0)
                return r;
        if (v > UINT32_MAX)
                return -ERANGE;
        *ret = (uint32_t)v;
        return 0;
}

static int apply(zr_config *c, int key, const char *v, const char *where, zr_error *err) {
        int r = 0;
        uint64_t u;
        switch (key) {
        case KEY_SOCKET:
                if (strlen(v) >= sizeof(c->socket_path) || v[0] != '/')
                        return zr_error_set(err, EINVAL, "%s: socket must be an absolute path under %zu bytes",
                                            where, sizeof(c->socket_path));
                strcpy(c->socket_path, v);
                return 0;
        case KEY_SOCKET_MODE: {
                char *end;
                errno = 0;
                unsigned long m = strtoul(v, &end, 8);
                if (errno || *end || end == v || m > 0777)
                        return zr_error_set(err, EINVAL, "%s: socket-mode must be octal like 0660, not '%s'", where, v);
                c->socket_mode = (mode_t)m;
                return 0;
        }
        case KEY_SOCKET_GROUP: {
                struct group *g = getgrnam(v);
                if (!g)
                        return zr_error_set(err, EINVAL, "%s: no group named '%s'", where, v);
                c->socket_gid = g->gr_gid;
                return 0;
        }
        case KEY_THREADS:
                r = parse_size(v, &u);
                if (r == 0 && u > 1024)
                        r = -ERANGE;
                if (r == 0)
                        c->threads = (unsigned)u;
                break;
        case KEY_PIN_WORKERS:
                if (strcmp(v, "yes") == 0)
                        c->pin_workers = true;
                else if (strcmp(v, "no") == 0)
                        c->pin_workers = false;
                else
                        return zr_error_set(err, EINVAL, "%s: pin-workers is yes or no, not '%s'",
                                            where, v);
                return 0;
        case KEY_LOG_LEVEL:
                r = zr_log_level_from_name(v, &c->log_level);
                break;
        case KEY_IDLE_EXIT: r = parse_size(v, &c->idle_exit_sec); break;
        case KEY_SYNC_INTERVAL: r = parse_size(v, &c->sync_interval_sec); break;
        case KEY_CACHE: r = parse_size_auto(v, &c->cache_bytes); break;
        case KEY_RING_SPARE: r = parse_size_auto(v, &c->ring_spare_bytes); break;
        case KEY_PREFETCH: r = parse_size_auto(v, &c->prefetch_bytes); break;
        case KEY_READ_POOL: r = parse_size_auto(v, &c->read_pool_bytes); break;
        case KEY_IO_BACKEND: r = zr_ioq_backend_parse(v, &c->io_backend); break;
        case KEY_LOOP_FILL: r = parse_size(v, &c->loop_fill_bytes); break;
        case KEY_IO_DIRECT:
                if (strcmp(v, "auto") == 0)
                        c->io_direct = ZR_DIRECT_AUTO;
                else if (strcmp(v, "off") == 0)
                        c->io_direct = ZR_DIRECT_OFF;
                else if (strcmp(v, "always") == 0)
                        c->io_direct = ZR_DIRECT_ALWAYS;
                else
                        return zr_error_set(err, EINVAL, "%s: io-direct is auto, off or always, "
                                            "not '%s'", where, v);
                return 0;
        case KEY_IO_DEPTH:
                r = parse_u32(v, &c->io_depth);
                if (r == 0 && (c->io_depth < 1 || c->io_depth > ZR_IOQ_MAX_INFLIGHT))
                        r = -ERANGE;
                break;
        case KEY_MAX_FRAME:
                r = parse_u32(v, &c->max_frame_bytes);
                if (r == 0 && (c->max_frame_bytes < ZR_FRAME_MAX_FLOOR ||
                               c->max_frame_bytes > ZR_FRAME_MAX_CEILING))
                        return zr_error_set(err, EINVAL, "%s: max-frame must be between %u and %u",
                                            where, ZR_FRAME_MAX_FLOOR, ZR_FRAME_MAX_CEILING);
                break;
        case KEY_MAX_HANDLES: r = parse_u32(v, &c->max_handles); break;
        case KEY_MAX_LOADERS: r = parse_u32(v, &c->max_loaders); break;
        case KEY_MAX_SHM: r = parse_size(v, &c->max_shm_bytes); break;
        case KEY_MAX_CLIENTS:
                r = parse_u32(v, &c->max_clients);
                if (r == 0 && c->max_clients == 0)
                        r = -ERANGE;
                break;
        /* per-uid limits and timeouts */
        case KEY_MAX_CLIENTS_UID:
                r = parse_u32(v, &c->max_clients_per_uid);
                if (r == 0 && c->max_clients_per_uid == 0)
                        r = -ERANGE;
                break;
        case KEY_HELLO_TIMEOUT: r = parse_size(v, &c->hello_timeout_sec); break;
        case KEY_IDLE_TIMEOUT: r = parse_size(v, &c->idle_timeout_sec); break;
        case KEY_FRAME_TIMEOUT: r = parse_size(v, &c->frame_timeout_sec); break;
        case KEY_MAX_FDS:
                r = parse_u32(v, &c->max_fds);
                if (r == 0 && c->max_fds < ZR_FDS_PER_FRAME_MAX)
                        return zr_error_set(err, EINVAL, "%s: max-fds must be at least %d (a "
                                            "frame's descriptors)", where, ZR_FDS_PER_FRAME_MAX);
                break;
        case KEY_MAX_FDS_UID:
                r = parse_u32(v, &c->max_fds_per_uid);
                if (r == 0 && c->max_fds_per_uid < ZR_FDS_PER_FRAME_MAX)
                        return zr_error_set(err, EINVAL, "%s: max-fds-per-uid must be at least "
                                            "%d (a frame's descriptors)", where,
                                            ZR_FDS_PER_FRAME_MAX);
                break;
        case KEY_MAX_BYTES_UID:
                r = parse_size(v, &c->max_bytes_per_uid);
                if (r == 0 && c->max_bytes_per_uid == 0)
                        r = -ERANGE;
                break;
        case KEY_MAX_SHM_UID: r = parse_size(v, &c->max_shm_per_uid); break;
        case KEY_MAX_SHM_TOTAL: r = parse_size(v, &c->max_shm_total); break;
        case KEY_MAX_WORK_UID: r = parse_size(v, &c->max_work_per_uid); break;
        case KEY_MAX_WORK_TOTAL: r = parse_size(v, &c->max_work_total); break;
        case KEY_MAX_JOBS_UID: r = parse_u32(v, &c->max_jobs_per_uid); break;
        case KEY_STALL_WARNING: r = parse_size(v, &c->stall_warning_sec); break;
        case KEY_REMOTE:
                if (strcmp(v, "yes") == 0 || strcmp(v, "no") == 0) {
                        c->remote = strcmp(v, "yes") == 0;
                        return 0;
                }
                return zr_error_set(err, EINVAL, "%s: remote is yes or no, not '%s'", where, v);
        case KEY_REMOTE_CACHE_DIR:
                if (v[0] != '/' || strlen(v) >= sizeof(c->remote_cache_dir))
                        return zr_error_set(err, EINVAL, "%s: remote-cache-dir must be an "
                                            "absolute path", where);
                strcpy(c->remote_cache_dir, v);
                return 0;
        case KEY_REMOTE_CACHE: r = parse_size_auto(v, &c->remote_cache_bytes); break;
        case KEY_REMOTE_DEPTH:
                r = parse_u32(v, &c->remote_depth);
                if (r == 0 && (c->remote_depth < 1 || c->remote_depth > 4096))
                        r = -ERANGE;
                break;
        case KEY_REMOTE_CONNECTIONS:
                r = parse_u32(v, &c->remote_connections);
                if (r == 0 && (c->remote_connections < 1 || c->remote_connections > 1024))
                        r = -ERANGE;
                break;
        case KEY_REMOTE_TIMEOUT:
                r = parse_u32(v, &c->remote_timeout_sec);
                if (r == 0 && (c->remote_timeout_sec < 1 || c->remote_timeout_sec > 3600))
                        r = -ERANGE;
                break;
        case KEY_TOKEN_INDEX_DIR:
                if (strlen(v) >= sizeof(c->token_index_dir) || (v[0] && v[0] != '/'))
                        return zr_error_set(err, EINVAL, "%s: token-index-dir must be an absolute "
                                            "path", where);
                snprintf(c->token_index_dir, sizeof(c->token_index_dir), "%s", v);
                return 0;
        case KEY_TOKEN_INDEX: r = parse_size(v, &c->token_index_bytes); break;
        case KEY_METRICS_LISTEN: {
                zr_error e = {0};
                if (strlen(v) >= sizeof(c->metrics_listen))
                        return zr_error_set(err, EINVAL, "%s: metrics-listen is too long", where);
                if (v[0] && zr_scrape_check_address(v, &e) < 0)
                        return zr_error_set(err, EINVAL, "%s: %s", where, e.message);
                snprintf(c->metrics_listen, sizeof(c->metrics_listen), "%s", v);
                return 0;
        }
        default:
                return zr_error_set(err, EINVAL, "%s: not a setting", where);
        }
        if (r < 0)
                return zr_error_set(err, EINVAL, "%s: bad value '%s'", where, v);
        return 0;
}

static const struct setting *setting_by_name(const char *name) {
        for (size_t i = 0; i < N_SETTINGS; i++)
                if (strcmp(settings[i].name, name) == 0)
                        return &settings[i];
        return NULL;
}

static const char *setting_by_key_name(int key) {
        for (size_t i = 0; i < N_SETTINGS; i++)
                if (settings[i].key == key)
                        return settings[i].name;
        return "?";
}

static char *strip(char *s) {
        while (*s == ' ' || *s == '\t')
                s++;
        size_t n = strlen(s);
        while (n > 0 && (s[n - 1] == ' ' || s[n - 1] == '\t' || s[n - 1] == '\n' || s[n - 1] == '\r'))
                s[--n] = 0;
        return s;
}

int zr_config_load_file(zr_config *c, const char *path, zr_error *err) {
        FILE *f = fopen(path, "re");
        if (!f)
                return zr_error_errno(err, errno, "config %s", path);
        char line[4096], where[4200];
        unsigned lineno = 0;
        int r = 0;
        while (fgets(line, sizeof(line), f)) {
                lineno++;
                snprintf(where, sizeof(where), "%s:%u", path, lineno);
                char *hash = strchr(line, '#');
                if (hash)
                        *hash = 0;
                char *s = strip(line);
                if (!*s)
                        continue;
                char *eq = strchr(s, '=');
                if (!eq) {
                        r = zr_error_set(err, EINVAL, "%s: expected 'key = value'", where);
                        break;
                }
                *eq = 0;
                char *key = strip(s), *val = strip(eq + 1);
                const struct setting *st = setting_by_name(key);
                if (!st || !st->arg || st->key == KEY_CONFIG) {
                        r = zr_error_set(err, EINVAL, "%s: unknown key '%s'", where, key);
                        break;
                }
                r = apply(c, st->key, val, where, err);
                if (r < 0)
                        break;
        }
        fclose(f);
        if (r == 0) {
                snprintf(c->config_path, sizeof(c->config_path), "%s", path);
        }
        return r;
}

void zr_config_print_help(void) {
        printf("zrecordd: the zrecord data-serving daemon\n\n"
               "Usage: zrecordd [OPTION...]\n\n");
        for (size_t i = 0; i < N_SETTINGS; i++) {
                char left[64];
                snprintf(left, sizeof(left), "--%s%s%s", settings[i].name,
                         settings[i].arg ? "=" : "", settings[i].arg ? settings[i].arg : "");
                printf("  %-26s %s\n", left, settings[i].help);
        }
        printf("\nA config file holds the same settings as 'key = value' lines (without\n"
               "the leading dashes); flags override the file. Socket activation\n"
               "(LISTEN_FDS) and the notify protocol (NOTIFY_SOCKET) are used when the\n"
               "service manager provides them. SIGTERM drains and exits; SIGHUP reloads\n"
               "the config file (log level, limits, cache and ring-spare budgets).\n");
}

int zr_config_parse_args(zr_config *c, int argc, char **argv, zr_error *err) {
        struct option longopts[N_SETTINGS + 1];
        for (size_t i = 0; i < N_SETTINGS; i++)
                longopts[i] = (struct option){settings[i].name,
                                              settings[i].arg ? required_argument : no_argument,
                                              NULL, settings[i].key};
        longopts[N_SETTINGS] = (struct option){0};

        /* First pass: --config, --help, --version, so the file sits under the flags. */
        optind = 1;
        opterr = 0;
        int o;
        while ((o = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
                if (o == KEY_HELP || o == 'h') {
                        zr_config_print_help();
                        return 1;
                }
                if (o == KEY_VERSION) {
                        printf("zrecordd %s\n", ZR_VERSION_STRING);
                        return 1;
                }
                if (o == KEY_CONFIG) {
                        int r = zr_config_load_file(c, optarg, err);
                        if (r < 0)
                                return r;
                }
                if (o == '?')
                        return zr_error_set(err, EINVAL, "unknown or incomplete option '%s'",
                                            argv[optind - 1]);
        }
        if (optind < argc)
                return zr_error_set(err, EINVAL, "unexpected argument '%s'", argv[optind]);
        optind = 1;
        while ((o = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
                if (o == KEY_CONFIG)
                        continue;
                char where[64];
                snprintf(where, sizeof(where), "--%s", setting_by_key_name(o));
                int r = apply(c, o, optarg, where, err);
                if (r < 0)
                        return r;
        }
        return 0;
}

/* The disk cache's directory, when none was set (config.h). */
static void resolve_cache_dir(zr_config *c) {
        const char *env;
        if (c->remote_cache_dir[0])
                return;
        if ((env = getenv("CACHE_DIRECTORY")) && *env == '/') {
                /* systemd's CacheDirectory=: the first of a colon-separated list */
                const char *colon = strchr(env, ':');
                int len = colon ? (int)(colon - env) : (int)strlen(env);
                snprintf(c->remote_cache_dir, sizeof(c->remote_cache_dir), "%.*s", len, env);
        } else if ((env = getenv("XDG_CACHE_HOME")) && *env == '/') {
                snprintf(c->remote_cache_dir, sizeof(c->remote_cache_dir), "%.4000s/zrecord", env);
        } else if ((env = getenv("HOME")) && *env == '/' && strcmp(env, "/") != 0) {
                snprintf(c->remote_cache_dir, sizeof(c->remote_cache_dir), "%.4000s/.cache/zrecord",
                         env);
        } else {
                snprintf(c->remote_cache_dir, sizeof(c->remote_cache_dir), "%s",
                         geteuid() == 0 ? "/var/cache/zrecord" : "");
        }
}

/* The packed loaders' index directory when none was set: tokens/ beside the
 * remote stores' remote/, in the daemon's one cache directory (config.h). */
static void resolve_token_index_dir(zr_config *c) {
        if (c->token_index_dir[0] || !c->remote_cache_dir[0])
                return;
        snprintf(c->token_index_dir, sizeof(c->token_index_dir), "%.4000s/tokens",
                 c->remote_cache_dir);
}

int zr_config_resolve(zr_config *c, zr_error *err) {
        resolve_cache_dir(c);
        resolve_token_index_dir(c);
        if (c->socket_path[0])
                return 0;
        const char *env = getenv("ZRECORD_SOCKET");
        int n;
        if (env && *env)
                n = snprintf(c->socket_path, sizeof(c->socket_path), "%s", env);
        else if (geteuid() == 0)
                n = snprintf(c->socket_path, sizeof(c->socket_path), "/run/zrecord/zrecordd.sock");
        else if ((env = getenv("XDG_RUNTIME_DIR")) && *env == '/')
                n = snprintf(c->socket_path, sizeof(c->socket_path), "%s/zrecord/zrecordd.sock", env);
        else
                n = snprintf(c->socket_path, sizeof(c->socket_path), "/tmp/zrecord-%u/zrecordd.sock",
                             (unsigned)geteuid());
        if (n < 0 || (size_t)n >= sizeof(c->socket_path) || c->socket_path[0] != '/')
                return zr_error_set(err, ENAMETOOLONG, "socket path too long or not absolute: %s",
                                    c->socket_path);
        return 0;
}
