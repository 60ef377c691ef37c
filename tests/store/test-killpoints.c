/* test-killpoints.c: a store recovers from a kill at every numbered point of its
 * write protocols.
 *
 * Built only with -Dkillpoints=true (daemon/store/killpoint.h). For each
 * scenario (an operation on a prepared store, per codec) and each kill point,
 * the test copies the prepared store, runs the operation in a child process
 * (this binary re-executed with ZR_KILLPOINT=<n>:<hit>) and, when the child died
 * at that point, reopens the store and checks recovery:
 *   - it opens, and every record is bit-exact for the id written into its
 *     first 8 bytes (a raw record has no checksum: the id and the fill prove it);
 *   - the index -> id table is exactly the state before the operation or after
 *     it, as the protocol promises for that point: an append is there only once
 *     its header was written (a prefix with no holes), a delete only once its
 *     journal was written (then always: all or nothing), a compaction never
 *     changes the table, an interrupted recovery is finished by the next open,
 *     a killed create leaves no store (and a new create works) or an empty one;
 *   - zr_store_verify() passes, a compaction re-run finishes without changing
 *     the table and leaves nothing to move, and the store takes a new append.
 * Hits 1..ZR_KILLPOINT_HITS (default 3) of each point are tried; a child that
 * finishes its operation means the point is not reached that often (its result
 * is checked as the "after" state). Every defined point must be killed at in at
 * least one scenario. Prints the points exercised and the recoveries checked.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zdict.h>

#include "store/killpoint.h"
#include "store/store.h"
#include "util/pool.h"

#define KP_CHUNK_LOG2 12  /* 4 KiB chunks: batches roll over, compaction frees files */
#define KP_HITS_DEFAULT 3 /* hits tried per point in CI; ZR_KILLPOINT_HITS for more */
#define PRE_RECORDS 30    /* records of a prepared store */
#define APPEND_N 8        /* records one append adds */
#define DICT_CAPACITY 8192
#define COPY_PREFIX (1u << 20) /* files are small but .loc: copy this, extend sparse */

/* --- records ------------------------------------------------------------------ */

static uint64_t mix64(uint64_t x) {
        x += UINT64_C(0x9e3779b97f4a7c15);
        x = (x ^ (x >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
        x = (x ^ (x >> 27)) * UINT64_C(0x94d049bb133111eb);
        return x ^ (x >> 31);
}

/* id 1 is tiny: deleting it leaves a hole smaller than the record after it,
 * whose move then overlaps its own bytes and goes through scratch space */
static size_t record_len(uint64_t id) {
        return id == 1 ? 16 : 200 + (size_t)(mix64(id) % 1800);
}

static const char TEMPLATE[] = "zrecord kill-point test: every record carries its id; "
                               "the template gives the codecs something to find.";

static void record_fill(uint8_t *dst, uint64_t id, size_t len) {
        for (size_t i = 0; i < 8 && i < len; i++)
                dst[i] = (uint8_t)(id >> (8 * i));
        uint64_t h = 0;
        for (size_t j = 8; j < len; j++) {
                if ((j - 8) % 32 == 0)
                        h = mix64(id * 131 + j);
                dst[j] = (uint8_t)(TEMPLATE[(j + id) % (sizeof(TEMPLATE) - 1)] + (h & 3));
                h >>= 2;
        }
}

/* --- failures ------------------------------------------------------------------ */

static unsigned failures;

static void fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void fail(const char *fmt, ...) {
        va_list ap;
        va_start(ap, fmt);
        fprintf(stderr, "FAIL: ");
        vfprintf(stderr, fmt, ap);
        fputc('\n', stderr);
        va_end(ap);
        failures++;
}

static void die(const char *what) {
        fprintf(stderr, "FATAL: %s: %s\n", what, strerror(errno));
        exit(2);
}

/* --- scenarios ------------------------------------------------------------------- */

enum scenario {
        SC_APPEND_FIRST, /* the first append into an empty store: creates 0.chunk, 0.loc */
        SC_APPEND,       /* an append that rolls over into new chunks */
        SC_DELETE,       /* a delete batch with swaps below the new length */
        SC_COMPACT,      /* a compaction with moves, a scratch move, freed chunks */
        SC_COMPACT_PART, /* a compaction stopped by max_moves after its scratch move */
        SC_RECOVER,      /* an open that redoes an interrupted delete's journal */
        SC_DICT,         /* installing the dictionary of a zstd_dict store */
        SC_CREATE,       /* creating a store (with its dictionary for zstd_dict) */
        SC_COUNT,
};

static const char *const sc_names[SC_COUNT] = {
        "append-first", "append", "delete", "compact", "compact-partial", "recover", "dict",
        "create",
};

/* the delete batch: some holes below the new length, some in the tail */
static const uint64_t delete_idx[] = { 2, 7, 11, PRE_RECORDS - 1, PRE_RECORDS - 4 };
#define DELETE_N (sizeof(delete_idx) / sizeof(delete_idx[0]))
/* the deletes that make holes before compaction: id 1 (index 0) first */
static const uint64_t holes_idx[] = { 0, 5, 9, 13, 17, 21 };
#define HOLES_N (sizeof(holes_idx) / sizeof(holes_idx[0]))

typedef struct ids {
        uint64_t v[PRE_RECORDS + APPEND_N + 2];
        size_t n;
} ids;

static int cmp_desc(const void *a, const void *b) {
        uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
        return (x < y) - (x > y);
}

/* swap-last, holes in descending order, as store.h specifies */
static void ids_delete(ids *m, const uint64_t *idx, size_t n) {
        uint64_t s[16];
        memcpy(s, idx, n * sizeof(*s));
        qsort(s, n, sizeof(*s), cmp_desc);
        for (size_t i = 0; i < n; i++)
                m->v[s[i]] = m->v[--m->n];
}

static void ids_append(ids *m, uint64_t first, size_t n) {
        for (size_t i = 0; i < n; i++)
                m->v[m->n++] = first + i;
}

/* --- store helpers ------------------------------------------------------------------ */

static void *dict_buf;
static size_t dict_len;

static void make_dict(void) {
        enum { SAMPLES = 200 };
        size_t sizes[SAMPLES], total = 0;
        for (size_t i = 0; i < SAMPLES; i++)
                total += sizes[i] = record_len(5000 + i);
        uint8_t *buf = malloc(total);
        dict_buf = malloc(DICT_CAPACITY);
        if (!buf || !dict_buf)
                die("malloc");
        for (size_t i = 0, off = 0; i < SAMPLES; off += sizes[i], i++)
                record_fill(buf + off, 5000 + i, sizes[i]);
        dict_len = ZDICT_trainFromBuffer(dict_buf, DICT_CAPACITY, buf, sizes, SAMPLES);
        if (ZDICT_isError(dict_len)) {
                fprintf(stderr, "FATAL: ZDICT_trainFromBuffer: %s\n", ZDICT_getErrorName(dict_len));
                exit(2);
        }
        free(buf);
}

/* The children read the parent's dictionary from the file named by
 * ZR_KP_DICT_FILE instead of training their own (slow under ASan). */
static const char *tmp_base(void);

static void load_dict(void) {
        const char *path = getenv("ZR_KP_DICT_FILE");
        FILE *f = path ? fopen(path, "rbe") : NULL;
        if (!f) {
                make_dict();
                return;
        }
        dict_buf = malloc(DICT_CAPACITY);
        if (!dict_buf)
                die("malloc");
        dict_len = fread(dict_buf, 1, DICT_CAPACITY, f);
        fclose(f);
        if (dict_len == 0)
                die("ZR_KP_DICT_FILE");
}

static char dict_file[512];

static void save_dict(void) {
        snprintf(dict_file, sizeof(dict_file), "%s/zr-kp-dict-XXXXXX", tmp_base());
        int fd = mkstemp(dict_file);
        if (fd < 0 || write(fd, dict_buf, dict_len) != (ssize_t)dict_len)
                die("dictionary file");
        close(fd);
        setenv("ZR_KP_DICT_FILE", dict_file, 1);
}

static int append_ids(zr_store *s, uint64_t first, size_t n, zr_error *err) {
        uint64_t lens[64];
        size_t total = 0;
        for (size_t i = 0; i < n; i++)
                total += lens[i] = record_len(first + i);
        uint8_t *buf = malloc(total);
        if (!buf)
                die("malloc");
        for (size_t i = 0, off = 0; i < n; off += lens[i], i++)
                record_fill(buf + off, first + i, lens[i]);
        int r = zr_store_append(s, buf, lens, n, NULL, err);
        free(buf);
        return r;
}

/* Reads every record, checks each is bit-exact for its id; fills *ret. */
static int read_ids(zr_store *s, ids *ret, const char *when) {
        uint64_t n = zr_store_length(s);
        zr_error err = {0};
        uint8_t *buf = malloc(4096), *want = malloc(4096);
        if (!buf || !want)
                die("malloc");
        ret->n = 0;
        if (n > sizeof(ret->v) / sizeof(ret->v[0])) {
                fail("%s: length %" PRIu64 " is more than was ever written", when, n);
                n = 0;
        }
        int ok = 1;
        for (uint64_t i = 0; i < n && ok; i++) {
                uint64_t len = 0;
                zr_error_clear(&err);
                if (zr_store_gather(s, &i, 1, buf, 4096, &len, &err) < 0) {
                        fail("%s: record %" PRIu64 ": %s", when, i, err.message);
                        ok = 0;
                        break;
                }
                uint64_t id = 0;
                for (int b = 0; b < 8 && b < (int)len; b++)
                        id |= (uint64_t)buf[b] << (8 * b);
                if (len < 8 || id == 0 || len != record_len(id)) {
                        fail("%s: record %" PRIu64 " is %" PRIu64 " bytes with id %" PRIu64, when,
                             i, len, id);
                        ok = 0;
                        break;
                }
                record_fill(want, id, len);
                if (memcmp(want, buf, len) != 0) {
                        fail("%s: record %" PRIu64 " (id %" PRIu64 ") is not bit-exact", when, i, id);
                        ok = 0;
                        break;
                }
                ret->v[ret->n++] = id;
        }
        free(buf);
        free(want);
        return ok ? 0 : -1;
}

static int ids_eq(const ids *a, const ids *b) {
        return a->n == b->n && memcmp(a->v, b->v, a->n * sizeof(a->v[0])) == 0;
}

/* The stores live in $TMPDIR, else on tmpfs (/dev/shm) when there is one: the
 * test needs no real disk (a process kill and an injected fault keep the page
 * cache), and its many fsyncs would otherwise wait on a disk shared with
 * every other test. */
static const char *tmp_base(void) {
        const char *t = getenv("TMPDIR");
        if (t && *t)
                return t;
        return access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
}

static void remove_dir(const char *path) {
        DIR *d = opendir(path);
        struct dirent *e;
        if (!d)
                return;
        while ((e = readdir(d)))
                if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
                        unlinkat(dirfd(d), e->d_name, 0);
        closedir(d);
        rmdir(path);
}

static void copy_dir(const char *from, const char *to) {
        DIR *d = opendir(from);
        int dfd = open(to, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        uint8_t *buf = malloc(COPY_PREFIX);
        struct dirent *e;
        if (!d || dfd < 0 || !buf)
                die("copy_dir");
        while ((e = readdir(d))) {
                struct stat st;
                if (fstatat(dirfd(d), e->d_name, &st, 0) < 0 || !S_ISREG(st.st_mode))
                        continue;
                int in = openat(dirfd(d), e->d_name, O_RDONLY | O_CLOEXEC);
                int out = openat(dfd, e->d_name, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
                if (in < 0 || out < 0)
                        die(e->d_name);
                ssize_t n = pread(in, buf, COPY_PREFIX, 0);
                if (n < 0 || pwrite(out, buf, (size_t)n, 0) != n || ftruncate(out, st.st_size) < 0)
                        die(e->d_name);
                close(out);
                close(in);
        }
        closedir(d);
        close(dfd);
        free(buf);
}

static char *new_dir(const char *tag) {
        char *dir = malloc(512);
        if (!dir)
                die("malloc");
        snprintf(dir, 512, "%s/zr-kp-%s-XXXXXX", tmp_base(), tag);
        if (!mkdtemp(dir))
                die("mkdtemp");
        return dir;
}

static int open_dir(const char *dir) {
        int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (fd < 0)
                die(dir);
        return fd;
}

/* --- the prepared stores ------------------------------------------------------------- */

typedef struct prepared {
        char *dir;   /* the store before the operation */
        ids before;  /* its table */
        ids after;   /* the table once the operation completed */
} prepared;

static prepared prep[SC_COUNT][3];

static zr_pool *pool;

/* Builds the store of scenario sc, codec c; 0 or -1 (with a message). */
static int prepare(enum scenario sc, enum zr_codec c, prepared *p) {
        zr_store_options opts = { .pool = pool, .chunk_log2 = KP_CHUNK_LOG2 };
        zr_store *s = NULL;
        zr_error err = {0};
        int r = 0;

        p->dir = new_dir("pre");
        p->before.n = 0;
        p->after.n = 0;
        if (sc == SC_CREATE)
                return 0; /* an empty directory */
        int dfd = open_dir(p->dir);
        int with_dict = c == ZR_CODEC_ZSTD_DICT && sc != SC_DICT;
        if (zr_store_create(dfd, c, with_dict ? dict_buf : NULL, with_dict ? dict_len : 0, &opts,
                            &s, &err) < 0) {
                fail("prepare %s codec %d: create: %s", sc_names[sc], (int)c, err.message);
                close(dfd);
                return -1;
        }
        p->before.n = 0;
        if (sc != SC_APPEND_FIRST && sc != SC_DICT) {
                /* three appends, so records sit in several chunks */
                for (uint64_t first = 1; r >= 0 && first <= PRE_RECORDS; first += PRE_RECORDS / 3)
                        r = append_ids(s, first, PRE_RECORDS / 3, &err);
                ids_append(&p->before, 1, PRE_RECORDS);
        }
        if (r >= 0 && (sc == SC_COMPACT || sc == SC_COMPACT_PART)) {
                r = zr_store_delete(s, holes_idx, HOLES_N, &err);
                ids_delete(&p->before, holes_idx, HOLES_N);
        }
        if (r < 0) {
                fail("prepare %s codec %d: %s", sc_names[sc], (int)c, err.message);
                zr_store_close(s, NULL);
                close(dfd);
                return -1;
        }
        if (zr_store_close(s, &err) < 0) {
                fail("prepare %s codec %d: close: %s", sc_names[sc], (int)c, err.message);
                close(dfd);
                return -1;
        }
        close(dfd);
        p->after = p->before;
        if (sc == SC_APPEND_FIRST || sc == SC_APPEND)
                ids_append(&p->after, 1000, APPEND_N);
        else if (sc == SC_DELETE || sc == SC_RECOVER)
                ids_delete(&p->after, delete_idx, DELETE_N);
        return 0;
}

/* --- the child: one operation, maybe killed on the way ----------------------------- */

static int child_main(enum scenario sc, enum zr_codec c, const char *dir) {
        zr_pool *cpool = NULL;
        zr_store *s = NULL;
        zr_error err = {0};
        int dfd = open_dir(dir);
        int r;

        if (zr_pool_new(2, &cpool) < 0)
                return 3;
        zr_store_options opts = { .pool = cpool, .chunk_log2 = KP_CHUNK_LOG2 };
        if (sc == SC_CREATE) {
                int d = c == ZR_CODEC_ZSTD_DICT;
                r = zr_store_create(dfd, c, d ? dict_buf : NULL, d ? dict_len : 0, &opts, &s, &err);
        } else {
                r = zr_store_open(dfd, &opts, &s, &err);
        }
        if (r >= 0) {
                switch (sc) {
                case SC_APPEND_FIRST:
                case SC_APPEND:
                        r = append_ids(s, 1000, APPEND_N, &err);
                        break;
                case SC_DELETE:
                        r = zr_store_delete(s, delete_idx, DELETE_N, &err);
                        break;
                case SC_COMPACT:
                        r = zr_store_compact(s, 0, NULL, &err);
                        break;
                case SC_COMPACT_PART:
                        r = zr_store_compact(s, 2, NULL, &err);
                        break;
                case SC_RECOVER:
                case SC_CREATE:
                        break; /* the open or create was the operation */
                case SC_DICT:
                        r = zr_store_install_dict(s, dict_buf, dict_len, &err);
                        break;
                default:
                        r = -EINVAL;
                }
                if (r >= 0)
                        r = zr_store_close(s, &err);
                else
                        zr_store_close(s, NULL);
        }
        zr_pool_free(cpool);
        close(dfd);
        if (r < 0) {
                fprintf(stderr, "child %s: %s\n", sc_names[sc], err.message);
                return 4;
        }
        return 0;
}

/* --- the parent: kill, reopen, check --------------------------------------------------- */

enum expect { EXPECT_BEFORE, EXPECT_AFTER, EXPECT_EITHER };

/* What a kill at the hit-th reach of point p during scenario sc must leave. The
 * child closes the store after its operation, so a sync point reached after the
 * operation's own syncs is past its end. */
static enum expect expected(enum scenario sc, unsigned p, unsigned hit) {
        int sync = p == ZR_KP_SYNC_CHUNKS || p == ZR_KP_SYNC_LOCS || p == ZR_KP_SYNC_META;

        switch (sc) {
        case SC_APPEND_FIRST:
        case SC_APPEND:
                /* committed once meta.zr holds the new length; an append does not
                 * sync, only the close after it does */
                return p == ZR_KP_HEADER_AFTER || p == ZR_KP_APPEND_COMMITTED || sync
                               ? EXPECT_AFTER
                               : EXPECT_BEFORE;
        case SC_DELETE:
                /* the sync before the batch, then a complete journal (in the page
                 * cache: the kernel survives) is redone */
                return p == ZR_KP_DELETE_SYNCED || p == ZR_KP_JOURNAL_CREATED || (sync && hit == 1)
                               ? EXPECT_BEFORE
                               : EXPECT_AFTER;
        case SC_RECOVER:
                return EXPECT_AFTER;
        default:
                return EXPECT_BEFORE; /* compaction and the dictionary change no record */
        }
}

typedef struct counts {
        unsigned trials, kills, completed, points, recoveries;
        unsigned killed_at[ZR_KP_MAX];
} counts;

static char self_exe[4096];

/* Runs the child on dir with ZR_KILLPOINT=p:hit; 1 if killed, 0 if it finished. */
static int run_child(enum scenario sc, enum zr_codec c, const char *dir, unsigned p,
                     unsigned hit) {
        char sel[32], scs[32];
        snprintf(sel, sizeof(sel), "%u:%u", p, hit);
        snprintf(scs, sizeof(scs), "%d:%d", (int)sc, (int)c);
        pid_t pid = fork();
        if (pid < 0)
                die("fork");
        if (pid == 0) {
                setenv("ZR_KILLPOINT", sel, 1);
                execl(self_exe, self_exe, "--child", scs, dir, (char *)NULL);
                _exit(127);
        }
        int status;
        if (waitpid(pid, &status, 0) != pid)
                die("waitpid");
        if (WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL)
                return 1;
        if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
                return 0;
        fail("%s, point %u (%s) hit %u: child ended with status %#x", sc_names[sc], p,
             zr_killpoint_name(p), hit, status);
        return -1;
}

/* Reopens dir and checks it against what the scenario allows. */
static unsigned creates_absent; /* killed creates that left no store */

static void check_recovery(enum scenario sc, enum zr_codec c, const prepared *pp, const char *dir,
                           enum expect ex, const char *when) {
        zr_store_options opts = { .pool = pool, .chunk_log2 = KP_CHUNK_LOG2 };
        zr_store *s = NULL;
        zr_error err = {0};
        int dfd = open_dir(dir);
        ids got;

        int r = zr_store_open(dfd, &opts, &s, &err);
        if (r == -ZR_E_NOT_STORE && sc == SC_CREATE) {
                /* a create killed before meta.zr was named: no store, and a
                 * new create succeeds */
                creates_absent++;
                int d = c == ZR_CODEC_ZSTD_DICT;
                zr_error_clear(&err);
                r = zr_store_create(dfd, c, d ? dict_buf : NULL, d ? dict_len : 0, &opts, &s, &err);
                if (r < 0) {
                        fail("%s: create again: %s (%s)", when, err.message, zr_error_code_name(r));
                        close(dfd);
                        return;
                }
        }
        if (r < 0) {
                fail("%s: reopen: %s (%s)", when, err.message, zr_error_code_name(r));
                close(dfd);
                return;
        }
        if (read_ids(s, &got, when) < 0)
                goto out;
        int is_before = ids_eq(&got, &pp->before), is_after = ids_eq(&got, &pp->after);
        if ((ex == EXPECT_BEFORE && !is_before) || (ex == EXPECT_AFTER && !is_after) ||
            (!is_before && !is_after)) {
                fail("%s: %zu records, expected the table %s the operation (%zu records)", when,
                     got.n, ex == EXPECT_AFTER ? "after" : "before",
                     ex == EXPECT_AFTER ? pp->after.n : pp->before.n);
                goto out;
        }
        zr_verify_report rep = {0};
        zr_error_clear(&err);
        if (zr_store_verify(s, &rep, &err) < 0 || rep.bad) {
                fail("%s: verify: %s", when, err.message);
                goto out;
        }
        if (sc == SC_DICT) {
                if (!zr_store_has_dict(s) && zr_store_install_dict(s, dict_buf, dict_len, &err) < 0) {
                        fail("%s: install the dictionary again: %s", when, err.message);
                        goto out;
                }
        }
        zr_compact_result cr = {0};
        zr_error_clear(&err);
        if (zr_store_compact(s, 0, &cr, &err) < 0 || !cr.finished) {
                fail("%s: compaction re-run: %s", when, err.message);
                goto out;
        }
        ids again;
        if (read_ids(s, &again, when) < 0)
                goto out;
        if (!ids_eq(&again, &got)) {
                fail("%s: the compaction re-run changed the table", when);
                goto out;
        }
        zr_error_clear(&err);
        if (zr_store_compact(s, 0, &cr, &err) < 0 || cr.moved != 0) {
                fail("%s: a second compaction moved %" PRIu64 " records: %s", when, cr.moved,
                     err.message);
                goto out;
        }
        /* and it takes new records */
        zr_error_clear(&err);
        if (append_ids(s, 2000, 2, &err) < 0) {
                fail("%s: append after recovery: %s", when, err.message);
                goto out;
        }
        ids_append(&got, 2000, 2);
        if (read_ids(s, &again, when) < 0)
                goto out;
        if (!ids_eq(&again, &got))
                fail("%s: an append after recovery reads back wrong", when);
out:
        zr_error_clear(&err);
        if (zr_store_close(s, &err) < 0)
                fail("%s: close: %s", when, err.message);
        close(dfd);
}

static void run_scenario(enum scenario sc, enum zr_codec c, unsigned max_hits, counts *k) {
        const prepared *pp = &prep[sc][c];
        unsigned points = 0, kills = 0;
        char reached[512] = "";

        for (unsigned p = 1; p < ZR_KP_MAX; p++) {
                if (!zr_killpoint_name(p))
                        continue;
                unsigned killed = 0;
                for (unsigned hit = 1; hit <= max_hits; hit++) {
                        char *dir = new_dir("run");
                        copy_dir(pp->dir, dir);
                        int rk = run_child(sc, c, dir, p, hit);
                        k->trials++;
                        char when[160];
                        snprintf(when, sizeof(when), "%s (codec %d), killed at %u %s, hit %u",
                                 sc_names[sc], (int)c, p, zr_killpoint_name(p), hit);
                        if (rk == 1) {
                                check_recovery(sc, c, pp, dir, expected(sc, p, hit), when);
                                k->kills++;
                                k->recoveries++;
                                k->killed_at[p]++;
                                killed++;
                        } else if (rk == 0 && hit == 1 && p == 1) {
                                /* once per scenario: the operation run to its end */
                                snprintf(when, sizeof(when), "%s (codec %d), not killed",
                                         sc_names[sc], (int)c);
                                check_recovery(sc, c, pp, dir, EXPECT_AFTER, when);
                                k->completed++;
                        }
                        remove_dir(dir);
                        free(dir);
                        if (rk != 1)
                                break;
                }
                if (killed) {
                        points++;
                        kills += killed;
                        size_t at = strlen(reached);
                        snprintf(reached + at, sizeof(reached) - at, "%s%u", at ? "," : "", p);
                }
        }
        k->points += points;
        printf("  %-16s codec %d: %2u points, %3u kills (points %s)\n", sc_names[sc], (int)c,
               points, kills, reached);
        fflush(stdout);
}

/* The recover scenario starts from a delete killed once its journal is durable. */
static int prepare_recover(enum zr_codec c, prepared *p) {
        if (prepare(SC_DELETE, c, p) < 0)
                return -1;
        if (run_child(SC_DELETE, c, p->dir, ZR_KP_JOURNAL_DURABLE, 1) != 1) {
                fail("recover codec %d: the delete was not killed with its journal durable", (int)c);
                return -1;
        }
        int dfd = open_dir(p->dir);
        int there = faccessat(dfd, "delete.zr", F_OK, 0) == 0;
        close(dfd);
        if (!there) {
                fail("recover codec %d: no delete.zr after the kill", (int)c);
                return -1;
        }
        return 0;
}

static unsigned env_unsigned(const char *name, unsigned def) {
        const char *v = getenv(name);
        return v && *v ? (unsigned)strtoul(v, NULL, 0) : def;
}

int main(int argc, char **argv) {
        if (argc == 4 && strcmp(argv[1], "--child") == 0) {
                char *colon;
                enum scenario sc = (enum scenario)strtol(argv[2], &colon, 10);
                enum zr_codec c = (enum zr_codec)(*colon == ':' ? atoi(colon + 1) : 0);
                if (sc == SC_DICT || (sc == SC_CREATE && c == ZR_CODEC_ZSTD_DICT))
                        load_dict();
                return child_main(sc, c, argv[3]);
        }
        unsetenv("ZR_KILLPOINT"); /* the parent never stops */
        if (!ZR_KILLPOINTS) {
                printf("killpoints: built without -Dkillpoints=true, nothing to do\n");
                return 77;
        }
        ssize_t n = readlink("/proc/self/exe", self_exe, sizeof(self_exe) - 1);
        if (n <= 0)
                die("readlink /proc/self/exe");
        self_exe[n] = 0;
        unsigned max_hits = env_unsigned("ZR_KILLPOINT_HITS", KP_HITS_DEFAULT);
        if (zr_pool_new(2, &pool) < 0)
                die("pool");
        make_dict();
        save_dict();

        counts k = {0};
        unsigned defined = 0;
        for (unsigned p = 1; p < ZR_KP_MAX; p++)
                defined += zr_killpoint_name(p) != NULL;
        printf("killpoints: %u points defined, up to %u hits each\n", defined, max_hits);
        for (int sc = 0; sc < SC_COUNT; sc++)
                for (int c = 0; c <= 2; c++) {
                        if (sc == SC_DICT && c != ZR_CODEC_ZSTD_DICT)
                                continue;
                        int r = sc == SC_RECOVER ? prepare_recover((enum zr_codec)c, &prep[sc][c])
                                                 : prepare((enum scenario)sc, (enum zr_codec)c,
                                                           &prep[sc][c]);
                        if (r < 0)
                                continue;
                        run_scenario((enum scenario)sc, (enum zr_codec)c, max_hits, &k);
                        remove_dir(prep[sc][c].dir);
                        free(prep[sc][c].dir);
                }

        unsigned covered = 0;
        for (unsigned p = 1; p < ZR_KP_MAX; p++) {
                if (!zr_killpoint_name(p))
                        continue;
                if (k.killed_at[p])
                        covered++;
                else
                        fail("point %u (%s) was never reached by any scenario", p,
                             zr_killpoint_name(p));
        }
        printf("killpoints: %u of %u points killed at; %u (scenario, codec, point) points "
               "exercised; %u children run, %u killed, %u recoveries checked (%u killed creates "
               "left no store), %u ran to the end; %u failures\n",
               covered, defined, k.points, k.trials, k.kills, k.recoveries, creates_absent,
               k.completed, failures);
        zr_pool_free(pool);
        free(dict_buf);
        unlink(dict_file);
        return failures ? 1 : 0;
}
