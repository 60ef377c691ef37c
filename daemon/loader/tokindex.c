/* tokindex.c: the index of a packed loader's cycle, built in parallel and kept
 * on disk (tokindex.h).
 *
 * A concat index is two passes over the cycle's positions in shards of the
 * pool: each shard draws its positions' documents (the sampler's order) and
 * writes the running sum of its documents' tokens, taken from the store's
 * length table, then, once the shards' sums are known, moves its part by the
 * sum of the shards before it (the first shard has nothing to do). The
 * length table is the documents' tokens in the store's order, 4 bytes each,
 * made once per store (fingerprint and length) by a sequential walk of the
 * store's table on the pool and kept as a file of the same store of indexes:
 * a cycle's build gathers from 4 bytes a document in a random order instead of
 * locating 16-byte table entries there. A best-fit index packs each window of
 * the order apart (so windows are shards): one pass counts each window's rows
 * and pieces, the second writes them where the counts put them. No record is
 * read, only table entries.
 *
 * Files are the daemon's own, in a directory nobody else may write; they are
 * mapped read-only and still checked as if they were not (tokindex.h).
 */

#include "loader/tokindex.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <xxhash.h>

#include "dataset/ragged.h"
#include "store/store.h"
#include "util/mkdirs.h"

#define TOKIDX_MAGIC "ZRTOKIX"
/* 1: the payload's checksum a word-at-a-time hash; 2: XXH3-64, and the
 * length tables (kind 3). A file of another version is removed and built
 * again. */
#define TOKIDX_VERSION 2
#define TOKIDX_HEADER 128
/* Positions a shard handles between two checks of the cancel flag, and the
 * table lookups it asks the store for at once (its arrays live on its stack:
 * 4096 × 24 bytes). */
#define TOKIDX_PIECE 4096
/* Documents whose lengths are read again from the store when a file is
 * loaded (tokindex.h: the fingerprint samples only 64). */
#define TOKIDX_RECHECK 256
/* Bytes of indexes waiting for their files, at most (then a builder writes
 * its own): memory held beyond the loaders' charges. */
#define TOKIDX_PENDING_MAX ((uint64_t)256 << 20)
/* Seconds the counters wait, at most, for the files being written. */
#define TOKIDX_COUNT_WAIT_S 1
/* The key kind of a store's length table (tokindex.h lists the others). */
#define TOKIDX_LENGTHS 3

struct zr_tokstore {
        pthread_mutex_t mutex;
        char *dir;            /* made at the first use (NULL: memory only, or failed) */
        int dirfd;            /* -1: not open (yet) */
        uint64_t budget;
        zr_tokstore_counters c;
        /* the files not written yet: built indexes, each with a reference of
         * its own, written in order by the writer thread (idx_save()); the
         * head stays in the list while it is written */
        pthread_cond_t cond;  /* the list changed, or stop */
        zr_tokidx *pending, **pending_tail;
        uint64_t pending_bytes;
        pthread_t writer;
        int writer_started, stop;
        int no_tmpfile;       /* O_TMPFILE files could not be linked (the writer's) */
};

/* The file's header, little-endian as the machine (the files never leave it). */
typedef struct tokidx_header {
        char magic[8];
        uint32_t version, header_bytes;
        zr_tokidx_key key;    /* 64 bytes */
        uint64_t total, max_len, rows, npieces;
        uint64_t payload_bytes, checksum;
} tokidx_header;

_Static_assert(sizeof(zr_tokidx_key) == 64, "the key is 64 bytes on disk");
_Static_assert(sizeof(tokidx_header) <= TOKIDX_HEADER, "the header fits its 128 bytes");

/* The payload's checksum: XXH3-64 (a 16 MiB index is checked at each load,
 * within the 50 ms a resume may take; version 1 hashed a word at a time, in
 * one dependent chain, at a fifth of the rate). */
static uint64_t payload_hash(const void *p, size_t bytes) {
        return XXH3_64bits(p, bytes);
}

uint64_t zr_tokidx_header_bytes(const zr_dataset *ds) {
        const zr_schema *s = zr_dataset_schema(ds);
        return s->layout == ZR_LAYOUT_ZRECORD ? zr_ragged_header_bytes(1) : 0;
}

uint64_t zr_tokidx_bytes(const zr_tokidx_key *key) {
        unsigned __int128 b = TOKIDX_HEADER + (unsigned __int128)8 * (key->n + 1);

        if (key->kind == ZR_TOKIDX_BEST_FIT) {
                /* the concat index it is built from, then at most 2 pieces a
                 * document plus one a full row of a cut document (the rows: at
                 * most the pieces), 12 + 8 bytes each, per bound of rows */
                b += (unsigned __int128)20 * 2 * key->n + TOKIDX_HEADER;
        }
        return b > UINT64_MAX ? UINT64_MAX : (uint64_t)b;
}

uint64_t zr_tokidx_lengths_bytes(uint64_t n) {
        unsigned __int128 b = TOKIDX_HEADER + (unsigned __int128)4 * n;
        return b > UINT64_MAX ? UINT64_MAX : (uint64_t)b;
}

uint64_t zr_tokidx_build_bytes(const zr_tokidx_key *key) {
        if (key->kind != ZR_TOKIDX_BEST_FIT)
                return 0;
        /* bf_scratch_init(): 11 arrays of u32 a document of the window, and the
         * lists' heads and bits of every free room */
        return 11 * 4 * key->window + 4 * (key->seq_len + 1) + (key->seq_len + 64) / 8;
}

/* ---- the store ------------------------------------------------------------- */

/* Opens the directory (made 0700 if missing), once: the daemon's own, or not
 * used. */
static int open_dir(const char *dir, int *ret_fd) {
        struct stat st;
        int fd, r = dir[0] == '/' ? zr_mkdirs(dir, 0700) : -EINVAL;

        if (r < 0)
                return r;
        fd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0)
                return -errno;
        if (fstat(fd, &st) < 0 || st.st_uid != geteuid() || (st.st_mode & 022)) {
                close(fd);
                return -EPERM;
        }
        *ret_fd = fd;
        return 0;
}

int zr_tokstore_open(const char *dir, uint64_t budget, zr_tokstore **ret, char *ret_why,
                     size_t why_size) {
        zr_tokstore *ts = calloc(1, sizeof(*ts));
        struct stat st;

        if (!ts)
                return -ENOMEM;
        pthread_condattr_t ca;
        pthread_mutex_init(&ts->mutex, NULL);
        pthread_condattr_init(&ca);
        pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
        pthread_cond_init(&ts->cond, &ca);
        pthread_condattr_destroy(&ca);
        ts->pending_tail = &ts->pending;
        ts->dirfd = -1;
        ts->budget = budget;
        if (ret_why && why_size)
                ret_why[0] = 0;
        if (dir && dir[0]) {
                /* made at the first packed loader, not at every start; one that
                 * exists is checked now, so the log says at once why not */
                int r = 0;
                if (lstat(dir, &st) == 0 && (!S_ISDIR(st.st_mode) || st.st_uid != geteuid() ||
                                             (st.st_mode & 022)))
                        r = -EPERM;
                if (r == 0 && !(ts->dir = strdup(dir))) {
                        free(ts);
                        return -ENOMEM;
                }
                if (r < 0 && ret_why)
                        snprintf(ret_why, why_size, "%s: %s (not the daemon's own directory, or "
                                 "writable by others)", dir, strerror(-r));
        }
        *ret = ts;
        return 0;
}

/* Mutex held: the directory's descriptor, opened (and made) at the first use;
 * -1 when there is none or it cannot be used (then never tried again). */
static int store_dir(zr_tokstore *ts) {
        if (ts->dirfd < 0 && ts->dir) {
                if (open_dir(ts->dir, &ts->dirfd) < 0)
                        ts->dirfd = -1;
                free(ts->dir);
                ts->dir = NULL;
        }
        return ts->dirfd;
}

zr_tokstore *zr_tokstore_free(zr_tokstore *ts) {
        if (!ts)
                return NULL;
        /* the writer writes what is pending, then ends */
        pthread_mutex_lock(&ts->mutex);
        ts->stop = 1;
        pthread_cond_broadcast(&ts->cond);
        pthread_mutex_unlock(&ts->mutex);
        if (ts->writer_started)
                pthread_join(ts->writer, NULL);
        for (zr_tokidx *ix = ts->pending, *next; ix; ix = next) {
                next = ix->save_next;
                zr_tokidx_free(ix);
        }
        pthread_cond_destroy(&ts->cond);
        if (ts->dirfd >= 0)
                close(ts->dirfd);
        free(ts->dir);
        pthread_mutex_destroy(&ts->mutex);
        free(ts);
        return NULL;
}

typedef struct file_age {
        char name[160];
        struct timespec mtime;
        uint64_t bytes;
} file_age;

static int age_cmp(const void *a, const void *b) {
        const file_age *x = a, *y = b;
        if (x->mtime.tv_sec != y->mtime.tv_sec)
                return x->mtime.tv_sec < y->mtime.tv_sec ? -1 : 1;
        if (x->mtime.tv_nsec != y->mtime.tv_nsec)
                return x->mtime.tv_nsec < y->mtime.tv_nsec ? -1 : 1;
        return strcmp(x->name, y->name);
}

/* Mutex held: the files over the budget go, least recently used first; counts
 * what stays. */
static void evict(zr_tokstore *ts) {
        file_age *v = NULL;
        size_t nv = 0, cap = 0;
        uint64_t total = 0;
        int fd;
        DIR *d;
        struct dirent *de;

        if (ts->dirfd < 0)
                return;
        fd = openat(ts->dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (fd < 0 || !(d = fdopendir(fd))) {
                if (fd >= 0)
                        close(fd);
                return;
        }
        while ((de = readdir(d))) {
                struct stat st;
                size_t len = strlen(de->d_name);
                if (len < 4 || len >= sizeof(v->name) || strcmp(de->d_name + len - 4, ".zti") != 0)
                        continue;
                if (fstatat(ts->dirfd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0 ||
                    !S_ISREG(st.st_mode))
                        continue;
                if (nv == cap) {
                        size_t nc = cap ? 2 * cap : 64;
                        file_age *nvv = realloc(v, nc * sizeof(*v));
                        if (!nvv)
                                break;
                        v = nvv;
                        cap = nc;
                }
                snprintf(v[nv].name, sizeof(v[nv].name), "%s", de->d_name);
                v[nv].mtime = st.st_mtim;
                v[nv].bytes = (uint64_t)st.st_blocks * 512;
                total += v[nv].bytes;
                nv++;
        }
        closedir(d);
        if (nv)
                qsort(v, nv, sizeof(*v), age_cmp);
        for (size_t i = 0; i < nv && total > ts->budget; i++)
                if (unlinkat(ts->dirfd, v[i].name, 0) == 0) {
                        total -= v[i].bytes;
                        ts->c.evicted++;
                        v[i].bytes = UINT64_MAX;
                }
        ts->c.files = 0;
        for (size_t i = 0; i < nv; i++)
                ts->c.files += v[i].bytes != UINT64_MAX;
        ts->c.bytes = total;
        free(v);
}

void zr_tokstore_set_budget(zr_tokstore *ts, uint64_t budget) {
        pthread_mutex_lock(&ts->mutex);
        ts->budget = budget;
        evict(ts);
        pthread_mutex_unlock(&ts->mutex);
}

void zr_tokstore_counters_get(zr_tokstore *ts, zr_tokstore_counters *ret) {
        struct timespec until;
        clock_gettime(CLOCK_MONOTONIC, &until);
        until.tv_sec += TOKIDX_COUNT_WAIT_S;
        pthread_mutex_lock(&ts->mutex);
        /* the files of the indexes built so far are counted written: the
         * caller (METRICS, on the event loop) waits for their writes, a few
         * milliseconds each, at most TOKIDX_COUNT_WAIT_S in all */
        while (ts->pending && ts->writer_started &&
               pthread_cond_timedwait(&ts->cond, &ts->mutex, &until) != ETIMEDOUT)
                ;
        *ret = ts->c;
        ret->budget = ts->dirfd >= 0 || ts->dir ? ts->budget : 0;
        pthread_mutex_unlock(&ts->mutex);
}

static void file_name(const zr_tokidx_key *k, char *buf, size_t size) {
        if (k->kind == TOKIDX_LENGTHS)
                snprintf(buf, size, "l-%016" PRIx64 "-%" PRIu64 ".zti", k->fingerprint, k->n);
        else if (k->kind == ZR_TOKIDX_CONCAT)
                snprintf(buf, size, "c-%016" PRIx64 "-%" PRIu64 "-%u-%016" PRIx64 "-%" PRIu64 ".zti",
                         k->fingerprint, k->n, k->mode, k->seed, k->cycle);
        else
                snprintf(buf, size, "b-%016" PRIx64 "-%" PRIu64 "-%u-%016" PRIx64 "-%" PRIu64
                         "-%" PRIu64 "-%u-%" PRIu64 ".zti", k->fingerprint, k->n, k->mode, k->seed,
                         k->cycle, k->seq_len, k->eos, k->window);
}

/* ---- building --------------------------------------------------------------- */

typedef struct concat_job {
        zr_dataset *ds;
        const zr_tokidx_key *key;
        const uint32_t *lens;   /* concat: the store's length table (n) */
        uint64_t *prefix;       /* concat: n + 1 */
        uint32_t *out;          /* the length table being made (n) */
        uint64_t *sums;         /* per shard */
        uint64_t *maxes;
        uint64_t hdr, item;
        const _Atomic int *cancel;
        _Atomic int failed;
        zr_error err;           /* the first failure's (under mu) */
        pthread_mutex_t mu;
} concat_job;

static void job_fail(concat_job *j, int code, const char *what) {
        pthread_mutex_lock(&j->mu);
        if (!j->err.code)
                zr_error_set(&j->err, code, "%s", what);
        pthread_mutex_unlock(&j->mu);
        atomic_store(&j->failed, 1);
}

static void shard_range(uint64_t n, size_t shard, size_t nshards, uint64_t *a, uint64_t *b) {
        *a = (uint64_t)(((unsigned __int128)n * shard) / nshards);
        *b = (uint64_t)(((unsigned __int128)n * (shard + 1)) / nshards);
}

static int job_cancelled(concat_job *j) {
        if (atomic_load(&j->failed))
                return 1;
        if (j->cancel && atomic_load(j->cancel)) {
                job_fail(j, ECANCELED, "cancelled: the loader closed");
                return 1;
        }
        return 0;
}

/* Pass 1, by pieces of TOKIDX_PIECE positions. A length table (no lens):
 * out[i] = tokens of record i, the store's table read in order (a record is
 * below 2^32 bytes, so its tokens fit 4 bytes). A concat index: prefix[q + 1]
 * = tokens of the documents at positions shard start..q of the cycle, from the
 * table (the shard's own running sums; pass 2 moves them). */
static void lengths_pass(void *arg, size_t shard, size_t nshards) {
        concat_job *j = arg;
        uint64_t a, b, sum = 0, mx = 0;
        uint64_t idx[TOKIDX_PIECE];
        zr_loc locs[TOKIDX_PIECE];
        zr_error err = {0};

        shard_range(j->key->n, shard, nshards, &a, &b);
        for (uint64_t q = a; q < b; q += TOKIDX_PIECE) {
                size_t m = b - q < TOKIDX_PIECE ? (size_t)(b - q) : TOKIDX_PIECE;
                if (job_cancelled(j))
                        return;
                if (j->lens) {
                        if (zr_sampler_cycle_fill(j->key->mode, j->key->n, j->key->seed,
                                                  j->key->cycle, q, idx, m, &err) < 0) {
                                job_fail(j, err.code ? err.code : EIO, err.message);
                                return;
                        }
                        for (size_t i = 0; i < m; i++) {
                                uint64_t len = j->lens[idx[i]];
                                if (i + 16 < m)
                                        __builtin_prefetch(&j->lens[idx[i + 16]]);
                                sum += len;
                                j->prefix[q + i + 1] = sum;
                                mx = len > mx ? len : mx;
                        }
                        continue;
                }
                for (size_t i = 0; i < m; i++)
                        idx[i] = q + i;
                if (zr_store_locate(zr_dataset_store(j->ds), idx, m, locs, &err) < 0) {
                        job_fail(j, err.code ? err.code : EIO, err.message);
                        return;
                }
                for (size_t i = 0; i < m; i++) {
                        uint64_t len = locs[i].logic_length;
                        if (len < j->hdr || (len - j->hdr) % j->item) {
                                char msg[160];
                                snprintf(msg, sizeof(msg), "record %" PRIu64 ": %" PRIu64 " bytes "
                                         "is not a %" PRIu64 "-byte header and whole items of %"
                                         PRIu64 " bytes", idx[i], len, j->hdr, j->item);
                                job_fail(j, ZR_E_CORRUPT, msg);
                                return;
                        }
                        len = (len - j->hdr) / j->item;
                        j->out[q + i] = (uint32_t)len;
                        sum += len;
                        mx = len > mx ? len : mx;
                }
        }
        j->sums[shard] = sum;
        j->maxes[shard] = mx;
}

/* Pass 2: each shard's running sums (pass 1's, from its own start) moved by
 * the sum of the shards before it; the first shard's are final already. */
static void concat_scan(void *arg, size_t shard, size_t nshards) {
        concat_job *j = arg;
        uint64_t a, b, base = j->sums[shard]; /* the exclusive scan, by the caller */

        if (base == 0)
                return;
        shard_range(j->key->n, shard, nshards, &a, &b);
        for (uint64_t q = a; q < b; q++)
                j->prefix[q + 1] += base;
}

static uint64_t now_ns(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* A fresh index of nbytes payload in one allocation (header first). */
static int idx_alloc(zr_tokidx **ret, const zr_tokidx_key *key, uint64_t payload, zr_error *err) {
        zr_tokidx *ix = calloc(1, sizeof(*ix));
        if (!ix || payload > SIZE_MAX - TOKIDX_HEADER ||
            !(ix->mem = calloc(1, TOKIDX_HEADER + (size_t)payload))) {
                free(ix);
                return zr_error_errno(err, ENOMEM, "an index of %" PRIu64 " bytes", payload);
        }
        ix->key = *key;
        ix->mem_bytes = TOKIDX_HEADER + (size_t)payload;
        atomic_init(&ix->refs, 1);
        *ret = ix;
        return 0;
}

/* The length table of key's store (lens NULL), or the concat index of key's
 * cycle from the store's length table `lens`. */
static int build_concat(const zr_tokidx_key *key, const zr_tokidx *lt, zr_dataset *ds,
                        zr_pool *pool, const _Atomic int *cancel, zr_tokidx **ret, zr_error *err) {
        const uint32_t *lens = lt ? lt->lens : NULL;
        uint64_t total = lt ? lt->total : 0, max_len = lt ? lt->max_len : 0;
        size_t nshards = zr_pool_shards(pool, key->n / TOKIDX_PIECE + 1);
        concat_job j = { .ds = ds, .key = key, .lens = lens, .cancel = cancel,
                         .hdr = zr_tokidx_header_bytes(ds),
                         .item = zr_dataset_schema(ds)->dtype.itemsize };
        zr_tokidx *ix = NULL;
        uint64_t run = 0, mx = 0;
        int r;

        if (key->n > (SIZE_MAX - TOKIDX_HEADER) / 8 - 1)
                return zr_error_set(err, ZR_E_LIMIT, "%" PRIu64 " documents: too many for an "
                                    "index in memory", key->n);
        r = idx_alloc(&ix, key, (lens ? 8 : 4) * key->n + (lens ? 8 : 0), err);
        if (r < 0)
                return r;
        if (lens)
                j.prefix = (uint64_t *)((uint8_t *)ix->mem + TOKIDX_HEADER);
        else
                j.out = (uint32_t *)((uint8_t *)ix->mem + TOKIDX_HEADER);
        j.sums = calloc(nshards, sizeof(*j.sums));
        j.maxes = calloc(nshards, sizeof(*j.maxes));
        if (!j.sums || !j.maxes) {
                r = zr_error_errno(err, ENOMEM, "an index");
                goto out;
        }
        pthread_mutex_init(&j.mu, NULL);
        zr_pool_parallel(pool, nshards, lengths_pass, &j);
        pthread_mutex_destroy(&j.mu);
        if (atomic_load(&j.failed)) {
                r = zr_error_set(err, j.err.code, "%s", j.err.message);
                goto out;
        }
        for (size_t s = 0; s < nshards; s++) {
                uint64_t v = j.sums[s];
                j.sums[s] = run;
                run += v;
                mx = j.maxes[s] > mx ? j.maxes[s] : mx;
        }
        if (lens) {
                if (run != total || mx != max_len) {
                        r = zr_error_set(err, ZR_E_CORRUPT, "a cycle of %" PRIu64 " tokens (the "
                                         "longest %" PRIu64 ") from a length table of %" PRIu64
                                         " (%" PRIu64 "): the table is damaged", run, mx, total,
                                         max_len);
                        goto out;
                }
                zr_pool_parallel(pool, nshards, concat_scan, &j);
                ix->prefix = j.prefix;
        } else {
                ix->lens = j.out;
        }
        ix->total = run;
        ix->max_len = mx;
        *ret = ix;
        ix = NULL;
        r = 0;
out:
        free(j.sums);
        free(j.maxes);
        zr_tokidx_free(ix);
        return r;
}

/* ---- best fit -------------------------------------------------------------------- */

/* A shard's room to pack one window: its items and bins, and, for each free
 * capacity 0..L, a list of the open bins with it and a bitmap of the
 * capacities that have one (best fit finds the first set bit at or above an
 * item's length). */
typedef struct bf_scratch {
        uint64_t L;
        uint32_t *item_q, *item_len, *item_start, *order;
        uint32_t *bin_free, *bin_next, *bin_prev, *bin_first, *bin_last, *bin_count;
        uint32_t *item_next;  /* the next item of its bin, in placement order */
        uint32_t *head;       /* L + 1 */
        uint64_t *bits;       /* (L + 1 + 63) / 64 */
} bf_scratch;

#define BF_NONE UINT32_MAX

typedef struct bf_job {
        const zr_tokidx_key *key;
        const uint64_t *prefix;  /* the cycle's concat index */
        uint64_t nwin;
        uint64_t *win_rows, *win_pieces;  /* pass 1 counts, then their exclusive scans */
        uint64_t *row_at;        /* pass 2 */
        zr_tokpiece *pieces;
        int write;
        const _Atomic int *cancel;
        _Atomic int failed;
} bf_job;

static int bf_scratch_init(bf_scratch *s, uint64_t L, uint64_t K) {
        size_t words = (size_t)((L + 64) / 64);

        *s = (bf_scratch){ .L = L };
        s->item_q = malloc(K * sizeof(uint32_t));
        s->item_len = malloc(K * sizeof(uint32_t));
        s->item_start = malloc(K * sizeof(uint32_t));
        s->order = malloc(K * sizeof(uint32_t));
        s->item_next = malloc(K * sizeof(uint32_t));
        s->bin_free = malloc(K * sizeof(uint32_t));
        s->bin_next = malloc(K * sizeof(uint32_t));
        s->bin_prev = malloc(K * sizeof(uint32_t));
        s->bin_first = malloc(K * sizeof(uint32_t));
        s->bin_last = malloc(K * sizeof(uint32_t));
        s->bin_count = malloc(K * sizeof(uint32_t));
        s->head = malloc((size_t)(L + 1) * sizeof(uint32_t));
        s->bits = calloc(words, sizeof(uint64_t));
        if (!s->item_q || !s->item_len || !s->item_start || !s->order || !s->item_next ||
            !s->bin_free || !s->bin_next || !s->bin_prev || !s->bin_first || !s->bin_last ||
            !s->bin_count || !s->head || !s->bits)
                return -ENOMEM;
        for (uint64_t c = 0; c <= L; c++)
                s->head[c] = BF_NONE;
        return 0;
}

static void bf_scratch_free(bf_scratch *s) {
        free(s->item_q);
        free(s->item_len);
        free(s->item_start);
        free(s->order);
        free(s->item_next);
        free(s->bin_free);
        free(s->bin_next);
        free(s->bin_prev);
        free(s->bin_first);
        free(s->bin_last);
        free(s->bin_count);
        free(s->head);
        free(s->bits);
}

static void bf_unlink(bf_scratch *s, uint32_t b) {
        uint32_t c = s->bin_free[b];
        if (s->bin_prev[b] != BF_NONE)
                s->bin_next[s->bin_prev[b]] = s->bin_next[b];
        else
                s->head[c] = s->bin_next[b];
        if (s->bin_next[b] != BF_NONE)
                s->bin_prev[s->bin_next[b]] = s->bin_prev[b];
        if (s->head[c] == BF_NONE)
                s->bits[c / 64] &= ~(UINT64_C(1) << (c % 64));
}

static void bf_link(bf_scratch *s, uint32_t b) {
        uint32_t c = s->bin_free[b];
        s->bin_prev[b] = BF_NONE;
        s->bin_next[b] = s->head[c];
        if (s->head[c] != BF_NONE)
                s->bin_prev[s->head[c]] = b;
        s->head[c] = b;
        s->bits[c / 64] |= UINT64_C(1) << (c % 64);
}

/* The open bin with the least free capacity >= len, or BF_NONE. */
static uint32_t bf_find(const bf_scratch *s, uint64_t len) {
        size_t w = (size_t)(len / 64), words = (size_t)((s->L + 64) / 64);
        uint64_t m = s->bits[w] & (~UINT64_C(0) << (len % 64));

        for (;;) {
                if (m)
                        return s->head[w * 64 + (size_t)__builtin_ctzll(m)];
                if (++w >= words)
                        return BF_NONE;
                m = s->bits[w];
        }
}

/* Longest first; equal lengths in the order's order (stable, so the packing is
 * a function of the order alone). */
static int bf_cmp(const void *a, const void *b, void *arg) {
        const uint32_t *len = arg, x = *(const uint32_t *)a, y = *(const uint32_t *)b;
        if (len[x] != len[y])
                return len[x] > len[y] ? -1 : 1;
        return x < y ? -1 : x > y;
}

/* Packs window w: counts its rows and pieces, and writes them when j->write
 * (rows from *row, pieces from *piece). */
static void bf_window(bf_job *j, bf_scratch *s, uint64_t w, uint64_t *ret_rows,
                      uint64_t *ret_pieces) {
        const zr_tokidx_key *k = j->key;
        uint64_t L = k->seq_len, K = k->window, q0 = w * K, q1 = q0 + K;
        uint64_t rows = 0, pieces = 0, row = 0, piece = 0;
        uint32_t nitems = 0, nbins = 0;

        if (q1 > k->n)
                q1 = k->n;
        if (j->write) {
                row = j->win_rows[w];
                piece = j->win_pieces[w];
        }
        /* rows of their own: the whole rows of documents longer than L, in order */
        for (uint64_t q = q0; q < q1; q++) {
                uint64_t len = j->prefix[q + 1] - j->prefix[q] + k->eos, full = len / L;
                for (uint64_t f = 0; f < full; f++) {
                        if (j->write) {
                                j->row_at[row++] = piece;
                                j->pieces[piece++] = (zr_tokpiece){ (uint32_t)q,
                                                                    (uint32_t)(f * L),
                                                                    (uint32_t)L };
                        }
                        rows++;
                        pieces++;
                }
                if (len % L) {
                        s->item_q[nitems] = (uint32_t)q;
                        s->item_start[nitems] = (uint32_t)(full * L);
                        s->item_len[nitems] = (uint32_t)(len % L);
                        s->order[nitems] = nitems;
                        nitems++;
                }
        }
        qsort_r(s->order, nitems, sizeof(uint32_t), bf_cmp, s->item_len);
        for (uint32_t i = 0; i < nitems; i++) {
                uint32_t it = s->order[i], len = s->item_len[it];
                uint32_t b = bf_find(s, len);
                if (b == BF_NONE) {
                        b = nbins++;
                        s->bin_free[b] = (uint32_t)L;
                        s->bin_first[b] = s->bin_last[b] = BF_NONE;
                        s->bin_count[b] = 0;
                } else {
                        bf_unlink(s, b);
                }
                s->item_next[it] = BF_NONE;
                if (s->bin_last[b] == BF_NONE)
                        s->bin_first[b] = it;
                else
                        s->item_next[s->bin_last[b]] = it;
                s->bin_last[b] = it;
                s->bin_count[b]++;
                s->bin_free[b] -= len;
                bf_link(s, b);
        }
        for (uint32_t b = 0; b < nbins; b++) {
                bf_unlink(s, b); /* leaves the lists and bits empty for the next window */
                if (j->write) {
                        j->row_at[row++] = piece;
                        for (uint32_t it = s->bin_first[b]; it != BF_NONE; it = s->item_next[it])
                                j->pieces[piece++] = (zr_tokpiece){ s->item_q[it],
                                                                    s->item_start[it],
                                                                    s->item_len[it] };
                }
                rows++;
                pieces += s->bin_count[b];
        }
        *ret_rows = rows;
        *ret_pieces = pieces;
}

static void bf_shard(void *arg, size_t shard, size_t nshards) {
        bf_job *j = arg;
        bf_scratch s;
        uint64_t a, b;

        shard_range(j->nwin, shard, nshards, &a, &b);
        if (a == b)
                return;
        if (bf_scratch_init(&s, j->key->seq_len, j->key->window) < 0) {
                atomic_store(&j->failed, ENOMEM);
                bf_scratch_free(&s);
                return;
        }
        for (uint64_t w = a; w < b; w++) {
                uint64_t rows, pieces;
                if (atomic_load(&j->failed))
                        break;
                if ((w - a) % 64 == 0 && j->cancel && atomic_load(j->cancel)) {
                        atomic_store(&j->failed, ECANCELED);
                        break;
                }
                bf_window(j, &s, w, &rows, &pieces);
                if (!j->write) {
                        j->win_rows[w] = rows;
                        j->win_pieces[w] = pieces;
                }
        }
        bf_scratch_free(&s);
}

static int build_best_fit(const zr_tokidx_key *key, const zr_tokidx *cat, zr_pool *pool,
                          const _Atomic int *cancel, zr_tokidx **ret, zr_error *err) {
        bf_job j = { .key = key, .prefix = cat->prefix, .cancel = cancel };
        uint64_t rows = 0, pieces = 0;
        zr_tokidx *ix = NULL;
        size_t nshards;
        int r;

        if (key->n > UINT32_MAX)
                return zr_error_set(err, ZR_E_LIMIT, "best fit packs at most 2^32 - 1 "
                                    "documents, the store holds %" PRIu64, key->n);
        if (cat->max_len + key->eos > UINT32_MAX)
                return zr_error_set(err, ZR_E_LIMIT, "a document of %" PRIu64 " tokens: best fit "
                                    "takes at most 2^32 - 2", cat->max_len);
        j.nwin = (key->n + key->window - 1) / key->window;
        nshards = zr_pool_shards(pool, j.nwin ? j.nwin : 1);
        j.win_rows = calloc(j.nwin + 1, sizeof(uint64_t));
        j.win_pieces = calloc(j.nwin + 1, sizeof(uint64_t));
        if (!j.win_rows || !j.win_pieces) {
                r = zr_error_errno(err, ENOMEM, "a best-fit index");
                goto out;
        }
        zr_pool_parallel(pool, nshards, bf_shard, &j);
        if (atomic_load(&j.failed)) {
                int code = atomic_load(&j.failed);
                r = code == ECANCELED ? zr_error_set(err, ECANCELED, "cancelled: the loader closed")
                                      : zr_error_errno(err, code, "packing by best fit");
                goto out;
        }
        for (uint64_t w = 0; w < j.nwin; w++) {
                uint64_t a = j.win_rows[w], b = j.win_pieces[w];
                j.win_rows[w] = rows;
                j.win_pieces[w] = pieces;
                rows += a;
                pieces += b;
        }
        r = idx_alloc(&ix, key, 8 * (rows + 1) + sizeof(zr_tokpiece) * pieces, err);
        if (r < 0)
                goto out;
        j.row_at = (uint64_t *)((uint8_t *)ix->mem + TOKIDX_HEADER);
        j.pieces = (zr_tokpiece *)(j.row_at + rows + 1);
        j.write = 1;
        zr_pool_parallel(pool, nshards, bf_shard, &j);
        if (atomic_load(&j.failed)) {
                r = zr_error_errno(err, atomic_load(&j.failed), "packing by best fit");
                goto out;
        }
        j.row_at[rows] = pieces;
        ix->row_at = j.row_at;
        ix->pieces = j.pieces;
        ix->rows = rows;
        ix->npieces = pieces;
        ix->total = cat->total;
        ix->max_len = cat->max_len;
        *ret = ix;
        ix = NULL;
        r = 0;
out:
        free(j.win_rows);
        free(j.win_pieces);
        zr_tokidx_free(ix);
        return r;
}

/* ---- files ---------------------------------------------------------------------- */

static uint64_t payload_bytes(const zr_tokidx *ix) {
        return ix->mem_bytes - TOKIDX_HEADER;
}

/* Writes ix's file, all of it or nothing: into an unnamed file of the
 * directory (O_TMPFILE), linked under its name when whole, so that a crash at
 * any point leaves no file at all; where the file system has no O_TMPFILE,
 * beside its name and renamed onto it (a crash then may leave the ".tmp"
 * file, never a torn index under the name). Not synced: a file a crash left
 * short or torn fails its size or checksum at the next load and is built
 * again. Failures only cost the next loader a build. */
static int write_all(int fd, const uint8_t *p, size_t left) {
        while (left > 0) {
                ssize_t w = write(fd, p, left);
                if (w <= 0) {
                        if (w < 0 && errno == EINTR)
                                continue;
                        return -1;
                }
                p += w;
                left -= (size_t)w;
        }
        return 0;
}

static void idx_write(zr_tokstore *ts, zr_tokidx *ix) {
        char name[160], tmp[192];
        tokidx_header h = {0};
        uint8_t *mem = ix->mem;
        int fd;

        memcpy(h.magic, TOKIDX_MAGIC, 8);
        h.version = TOKIDX_VERSION;
        h.header_bytes = TOKIDX_HEADER;
        h.key = ix->key;
        h.total = ix->total;
        h.max_len = ix->max_len;
        h.rows = ix->rows;
        h.npieces = ix->npieces;
        h.payload_bytes = payload_bytes(ix);
        h.checksum = payload_hash(mem + TOKIDX_HEADER, h.payload_bytes);
        /* the header's bytes, which no reader of the index looks at */
        memcpy(mem, &h, sizeof(h));
        file_name(&ix->key, name, sizeof(name));
        fd = ts->no_tmpfile ? -1 : openat(ts->dirfd, ".", O_TMPFILE | O_WRONLY | O_CLOEXEC, 0600);
        if (fd >= 0) {
                char proc[64];
                int r = write_all(fd, mem, ix->mem_bytes), e = 0;
                snprintf(proc, sizeof(proc), "/proc/self/fd/%d", fd);
                pthread_mutex_lock(&ts->mutex);
                /* a file under the name is one another daemon wrote since the
                 * load found none, of the same key: it stays */
                if (r == 0 && linkat(AT_FDCWD, proc, ts->dirfd, name, AT_SYMLINK_FOLLOW) == 0)
                        evict(ts);
                else
                        e = r == 0 ? errno : 0;
                pthread_mutex_unlock(&ts->mutex);
                close(fd);
                if (e == 0 || e == EEXIST)
                        return;
                /* no /proc: named files from now on */
                ts->no_tmpfile = 1;
        }
        snprintf(tmp, sizeof(tmp), ".%s.%d.%lx.tmp", name, (int)getpid(),
                 (unsigned long)pthread_self());
        fd = openat(ts->dirfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (fd < 0)
                return;
        if (write_all(fd, mem, ix->mem_bytes) < 0) {
                close(fd);
                unlinkat(ts->dirfd, tmp, 0);
                return;
        }
        pthread_mutex_lock(&ts->mutex);
        if (close(fd) == 0 && renameat(ts->dirfd, tmp, ts->dirfd, name) == 0)
                evict(ts);
        else
                unlinkat(ts->dirfd, tmp, 0);
        pthread_mutex_unlock(&ts->mutex);
}

/* The writer thread: writes the pending indexes in order; at stop, what is
 * still pending, then ends. */
static void *writer_main(void *arg) {
        zr_tokstore *ts = arg;

        pthread_mutex_lock(&ts->mutex);
        for (;;) {
                zr_tokidx *ix = ts->pending;
                if (!ix) {
                        if (ts->stop)
                                break;
                        pthread_cond_wait(&ts->cond, &ts->mutex);
                        continue;
                }
                pthread_mutex_unlock(&ts->mutex);
                idx_write(ts, ix);
                pthread_mutex_lock(&ts->mutex);
                ts->pending = ix->save_next;
                ts->pending_bytes -= ix->mem_bytes;
                if (!ts->pending)
                        ts->pending_tail = &ts->pending;
                ix->save_next = NULL;
                pthread_cond_broadcast(&ts->cond);
                pthread_mutex_unlock(&ts->mutex);
                zr_tokidx_free(ix);
                pthread_mutex_lock(&ts->mutex);
        }
        pthread_mutex_unlock(&ts->mutex);
        return NULL;
}

/* Hands ix's file to the writer thread (a reference of its own): the caller
 * goes on with the index while its file is written, off the path of the
 * request that built it (a LOADER_OPEN's reply, a fill). Until it is written,
 * idx_load() finds it in the list. Written at once where no thread can be
 * started. */
static void idx_save(zr_tokstore *ts, zr_tokidx *ix) {
        int now = 0;

        pthread_mutex_lock(&ts->mutex);
        if (store_dir(ts) < 0 || ts->budget < ix->mem_bytes || ts->stop) {
                pthread_mutex_unlock(&ts->mutex);
                return;
        }
        if (!ts->writer_started) {
                sigset_t all, old;
                sigfillset(&all);
                /* signals go to the daemon's own threads, not this one */
                pthread_sigmask(SIG_SETMASK, &all, &old);
                ts->writer_started = pthread_create(&ts->writer, NULL, writer_main, ts) == 0;
                pthread_sigmask(SIG_SETMASK, &old, NULL);
                now = !ts->writer_started;
        }
        /* the list's memory is no loader's charge: bounded, past which the
         * builder writes its file itself, as before the writer */
        if (!now && ts->pending_bytes + ix->mem_bytes > TOKIDX_PENDING_MAX)
                now = 1;
        if (!now) {
                atomic_fetch_add(&ix->refs, 1);
                ix->save_next = NULL;
                *ts->pending_tail = ix;
                ts->pending_tail = &ix->save_next;
                ts->pending_bytes += ix->mem_bytes;
                pthread_cond_broadcast(&ts->cond);
        }
        pthread_mutex_unlock(&ts->mutex);
        if (now)
                idx_write(ts, ix);
}

/* Mutex held: key's index if it waits for its file to be written (a
 * reference of the caller's own), else NULL. */
static zr_tokidx *pending_find(zr_tokstore *ts, const zr_tokidx_key *key) {
        for (zr_tokidx *ix = ts->pending; ix; ix = ix->save_next)
                if (memcmp(&ix->key, key, sizeof(*key)) == 0) {
                        atomic_fetch_add(&ix->refs, 1);
                        return ix;
                }
        return NULL;
}

/* Opens and checks the header of key's file: its fd and header, or -1. */
static int idx_open_file(zr_tokstore *ts, const zr_tokidx_key *key, tokidx_header *h,
                         struct stat *st) {
        char name[160];
        int fd;

        pthread_mutex_lock(&ts->mutex);
        fd = store_dir(ts);
        pthread_mutex_unlock(&ts->mutex);
        if (fd < 0)
                return -1;
        file_name(key, name, sizeof(name));
        fd = openat(ts->dirfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
        if (fd < 0)
                return -1;
        if (fstat(fd, st) < 0 || !S_ISREG(st->st_mode) || st->st_uid != geteuid() ||
            pread(fd, h, sizeof(*h), 0) != (ssize_t)sizeof(*h) ||
            memcmp(h->magic, TOKIDX_MAGIC, 8) != 0 || h->version != TOKIDX_VERSION ||
            h->header_bytes != TOKIDX_HEADER || memcmp(&h->key, key, sizeof(*key)) != 0 ||
            h->payload_bytes > (uint64_t)st->st_size ||
            (uint64_t)st->st_size != TOKIDX_HEADER + h->payload_bytes) {
                close(fd);
                return -2;
        }
        return fd;
}

static void idx_reject(zr_tokstore *ts, const zr_tokidx_key *key) {
        char name[160];

        file_name(key, name, sizeof(name));
        pthread_mutex_lock(&ts->mutex);
        unlinkat(ts->dirfd, name, 0);
        ts->c.rejected++;
        pthread_mutex_unlock(&ts->mutex);
}

uint64_t zr_tokidx_peek_rows(zr_tokstore *ts, const zr_tokidx_key *key) {
        tokidx_header h;
        struct stat st;
        zr_tokidx *ix;
        uint64_t rows;
        int fd;

        pthread_mutex_lock(&ts->mutex);
        ix = pending_find(ts, key);
        pthread_mutex_unlock(&ts->mutex);
        if (ix) {
                rows = ix->rows;
                zr_tokidx_free(ix);
                return rows;
        }
        fd = idx_open_file(ts, key, &h, &st);

        if (fd < 0)
                return 0;
        close(fd);
        return h.rows;
}

/* Whether the payload is an index of its kind at all: the sums never fall,
 * the rows' pieces lie in order inside the pieces and name positions of the
 * cycle. The lengths of a sample are then read again from the store. */
static int idx_sane(const zr_tokidx *ix, zr_dataset *ds) {
        const zr_tokidx_key *k = &ix->key;
        uint64_t n = k->n;

        if (k->kind == TOKIDX_LENGTHS) {
                uint64_t hdr = zr_tokidx_header_bytes(ds), item = zr_dataset_schema(ds)->dtype.itemsize;
                uint64_t m = n < TOKIDX_RECHECK ? n : TOKIDX_RECHECK;
                uint64_t idx[TOKIDX_RECHECK];
                zr_loc locs[TOKIDX_RECHECK];

                /* the totals are checked by each build from the table (every
                 * cycle sums all of it), not in a pass of their own here */
                if (ix->mem_bytes != TOKIDX_HEADER + 4 * n)
                        return 0;
                for (uint64_t i = 0; i < m; i++)
                        idx[i] = (uint64_t)(((unsigned __int128)i * n) / m);
                if (zr_store_locate(zr_dataset_store(ds), idx, m, locs, NULL) < 0)
                        return 0;
                for (uint64_t i = 0; i < m; i++)
                        if (locs[i].logic_length < hdr ||
                            (locs[i].logic_length - hdr) / item != ix->lens[idx[i]])
                                return 0;
                return 1;
        }
        if (k->kind == ZR_TOKIDX_CONCAT) {
                const uint64_t *p = ix->prefix;
                uint64_t hdr = zr_tokidx_header_bytes(ds), item = zr_dataset_schema(ds)->dtype.itemsize;
                uint64_t m = n < TOKIDX_RECHECK ? n : TOKIDX_RECHECK;
                uint64_t q[TOKIDX_RECHECK], idx[TOKIDX_RECHECK];
                zr_loc locs[TOKIDX_RECHECK];

                if (ix->mem_bytes != TOKIDX_HEADER + 8 * (n + 1) || p[0] != 0 || p[n] != ix->total)
                        return 0;
                for (uint64_t i = 0; i < n; i++)
                        if (p[i + 1] < p[i] || p[i + 1] - p[i] > ix->max_len)
                                return 0;
                for (uint64_t i = 0; i < m; i++) {
                        q[i] = (uint64_t)(((unsigned __int128)i * n) / m);
                        if (zr_sampler_cycle_fill(k->mode, n, k->seed, k->cycle, q[i], &idx[i], 1,
                                                  NULL) < 0)
                                return 0;
                }
                if (zr_store_locate(zr_dataset_store(ds), idx, m, locs, NULL) < 0)
                        return 0;
                for (uint64_t i = 0; i < m; i++)
                        if (locs[i].logic_length < hdr ||
                            (locs[i].logic_length - hdr) / item != p[q[i] + 1] - p[q[i]])
                                return 0;
                return 1;
        }
        if (ix->mem_bytes != TOKIDX_HEADER + 8 * (ix->rows + 1) + sizeof(zr_tokpiece) * ix->npieces ||
            ix->row_at[0] != 0 || ix->row_at[ix->rows] != ix->npieces)
                return 0;
        for (uint64_t r = 0; r < ix->rows; r++)
                if (ix->row_at[r + 1] < ix->row_at[r])
                        return 0;
        for (uint64_t i = 0; i < ix->npieces; i++) {
                const zr_tokpiece *pc = &ix->pieces[i];
                if (pc->q >= n || pc->count == 0 || pc->count > k->seq_len ||
                    (uint64_t)pc->start + pc->count > ix->max_len + k->eos)
                        return 0;
        }
        return 1;
}

/* Loads key's file: 1 with *ret, 0 if there is none (or it failed a check:
 * then it is removed). */
static int idx_load(zr_tokstore *ts, const zr_tokidx_key *key, zr_dataset *ds, zr_tokidx **ret) {
        tokidx_header h;
        struct stat st;
        zr_tokidx *ix;
        void *map;
        int fd;

        /* built here, its file not written yet */
        pthread_mutex_lock(&ts->mutex);
        ix = pending_find(ts, key);
        if (ix)
                ts->c.loads++;
        pthread_mutex_unlock(&ts->mutex);
        if (ix) {
                *ret = ix;
                return 1;
        }
        fd = idx_open_file(ts, key, &h, &st);

        if (fd == -2)
                idx_reject(ts, key);
        if (fd < 0)
                return 0;
        map = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE | MAP_POPULATE, fd, 0);
        if (map == MAP_FAILED) {
                close(fd);
                return 0;
        }
        ix = calloc(1, sizeof(*ix));
        if (!ix) {
                munmap(map, (size_t)st.st_size);
                close(fd);
                return 0;
        }
        *ix = (zr_tokidx){ .key = *key, .total = h.total, .max_len = h.max_len, .rows = h.rows,
                           .npieces = h.npieces, .mem = map, .mem_bytes = (size_t)st.st_size,
                           .mapped = 1 };
        atomic_init(&ix->refs, 1);
        if (key->kind == TOKIDX_LENGTHS) {
                ix->lens = (const uint32_t *)((const uint8_t *)map + TOKIDX_HEADER);
        } else if (key->kind == ZR_TOKIDX_CONCAT) {
                ix->prefix = (const uint64_t *)((const uint8_t *)map + TOKIDX_HEADER);
        } else {
                ix->row_at = (const uint64_t *)((const uint8_t *)map + TOKIDX_HEADER);
                ix->pieces = (const zr_tokpiece *)(ix->row_at + h.rows + 1);
        }
        if (payload_hash((const uint8_t *)map + TOKIDX_HEADER, h.payload_bytes) != h.checksum ||
            (key->kind == ZR_TOKIDX_BEST_FIT &&
             (h.rows > h.payload_bytes / 8 || h.npieces > h.payload_bytes / sizeof(zr_tokpiece))) ||
            !idx_sane(ix, ds)) {
                close(fd);
                zr_tokidx_free(ix);
                idx_reject(ts, key);
                return 0;
        }
        futimens(fd, NULL); /* recently used: evicted last */
        close(fd);
        pthread_mutex_lock(&ts->mutex);
        ts->c.loads++;
        pthread_mutex_unlock(&ts->mutex);
        *ret = ix;
        return 1;
}

/* zr_tokidx_get(), and the time spent building (0: loaded), the builds of
 * what it was built from included (each counted once, by its own call). */
static int get_index(zr_tokstore *ts, const zr_tokidx_key *key, zr_dataset *ds, zr_pool *pool,
                     const _Atomic int *cancel, zr_tokidx **ret, uint64_t *ret_ns, zr_error *err) {
        zr_tokidx *ix = NULL, *from = NULL;
        zr_tokidx_key fk = *key;
        uint64_t t0, inner = 0;
        int r;

        *ret_ns = 0;
        if (idx_load(ts, key, ds, ret))
                return 0;
        t0 = now_ns();
        if (key->kind == TOKIDX_LENGTHS) {
                r = build_concat(key, NULL, ds, pool, cancel, &ix, err);
        } else {
                /* concat from the store's length table; best fit from the
                 * cycle's concat index */
                if (key->kind == ZR_TOKIDX_CONCAT)
                        fk = (zr_tokidx_key){ .kind = TOKIDX_LENGTHS,
                                              .fingerprint = key->fingerprint, .n = key->n };
                else
                        fk.kind = ZR_TOKIDX_CONCAT;
                fk.seq_len = fk.window = 0;
                fk.eos = 0;
                r = get_index(ts, &fk, ds, pool, cancel, &from, &inner, err);
                if (r == 0 && key->kind == ZR_TOKIDX_CONCAT)
                        r = build_concat(key, from, ds, pool, cancel, &ix, err);
                else if (r == 0)
                        r = build_best_fit(key, from, pool, cancel, &ix, err);
                zr_tokidx_free(from);
        }
        if (r < 0)
                return r;
        *ret_ns = now_ns() - t0;
        pthread_mutex_lock(&ts->mutex);
        ts->c.builds++;
        ts->c.build_ns += *ret_ns - inner;
        pthread_mutex_unlock(&ts->mutex);
        idx_save(ts, ix);
        *ret = ix;
        return 0;
}

int zr_tokidx_get(zr_tokstore *ts, const zr_tokidx_key *key, zr_dataset *ds, zr_pool *pool,
                  const _Atomic int *cancel, zr_tokidx **ret, zr_error *err) {
        uint64_t ns;
        return get_index(ts, key, ds, pool, cancel, ret, &ns, err);
}

zr_tokidx *zr_tokidx_free(zr_tokidx *ix) {
        if (!ix || atomic_fetch_sub(&ix->refs, 1) > 1)
                return NULL;
        if (ix->mapped)
                munmap(ix->mem, ix->mem_bytes);
        else
                free(ix->mem);
        free(ix);
        return NULL;
}
