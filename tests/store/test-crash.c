/* test-crash.c: a store survives SIGKILL at any instant.
 *
 * Each trial forks a writer child that creates a store (raw, zstd and zstd_dict
 * in turn, small chunks so appends roll over; reading through mappings or with
 * pread) and runs a deterministic program
 * of appends, delete batches and compactions, reporting every acknowledged
 * operation through a pipe. The parent SIGKILLs it at a random moment (after a
 * random number of acknowledgements plus a random spin scaled to the observed
 * operation time: the spin is the test's input, not a synchronization), then
 * reopens the store and checks that it opens, that every record is bit-exact
 * for the id written into its first 8 bytes, that the index -> id table equals
 * the model after the acknowledged operations or after those plus the one in
 * flight (never anything in between), that zr_store_verify() passes, and that a
 * compaction re-run finishes and changes nothing.
 *
 * ZR_CRASH_TRIALS sets the number of trials (default 60, at least 50 by the
 * issue); ZR_CRASH_SEED the seed. The counts are printed on stdout.
 */
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <zdict.h>

#include "check-run.h"
#include "records.h"
#include "store/store.h"
#include "util.h"
#include "util/pool.h"

#define CRASH_TRIALS_DEFAULT 60
#define CRASH_SEED_DEFAULT UINT64_C(0xc4a54)
/* A program is longer than any kill point, so the child is always busy. */
#define PROGRAM_OPS 400
/* The kill comes after 1..MAX_ACKS acknowledged operations (plus a spin). */
#define MAX_ACKS 40
/* 256 KiB chunks: a few appends of the larger records cross a rollover. */
#define CRASH_CHUNK_LOG2 18
#define APPEND_MAX 8       /* records per append */
#define DELETE_MAX 5       /* records per delete batch */
#define RECORD_SMALL 2048  /* most records are up to this long ... */
#define RECORD_LARGE 49152 /* ... one in four up to this */
#define DICT_CAPACITY 16384

/* --- deterministic records (tests/lib/records.h) --------------------------- */

static size_t record_len(uint64_t id) {
        uint64_t h = tl_mix64(id ^ UINT64_C(0x1e4));
        if (h % 4 == 0)
                return 8 + (size_t)((h >> 8) % (RECORD_LARGE - 8));
        return 8 + (size_t)((h >> 8) % (RECORD_SMALL - 8));
}

/* --- the program and its model ------------------------------------------ */

enum op_kind { OP_APPEND, OP_DELETE, OP_COMPACT, OP_KINDS };
static const char *const op_names[OP_KINDS] = { "append", "delete", "compact" };

typedef struct op {
        enum op_kind kind;
        size_t n;                 /* records appended or deleted */
        uint64_t first_id;        /* append: ids first_id .. first_id + n - 1 */
        uint64_t idx[DELETE_MAX]; /* delete: distinct indices */
        uint64_t max_moves;       /* compact: 0 = to the end */
} op;

typedef struct model {
        uint64_t *ids; /* index -> id */
        size_t len, cap;
        uint64_t next_id;
} model;

static void model_init(model *m) {
        memset(m, 0, sizeof(*m));
        m->next_id = 1;
}

static void model_done(model *m) {
        free(m->ids);
        memset(m, 0, sizeof(*m));
}

/* The next operation of the program, from its generator and the model's state. */
static void program_next(uint64_t *rng, const model *m, op *o) {
        uint64_t r = tl_rand(rng) % 100;
        memset(o, 0, sizeof(*o));
        if (m->len < 8 || r < 55) {
                o->kind = OP_APPEND;
                o->n = 1 + tl_rand(rng) % APPEND_MAX;
                o->first_id = m->next_id;
        } else if (r < 85) {
                o->kind = OP_DELETE;
                o->n = 1 + tl_rand(rng) % DELETE_MAX;
                for (size_t i = 0; i < o->n; i++) {
                        uint64_t x;
                        int dup;
                        do {
                                x = tl_rand(rng) % m->len;
                                dup = 0;
                                for (size_t k = 0; k < i; k++)
                                        dup |= o->idx[k] == x;
                        } while (dup);
                        o->idx[i] = x;
                }
        } else {
                o->kind = OP_COMPACT;
                o->max_moves = tl_rand(rng) % 3 == 0 ? 1 + tl_rand(rng) % 6 : 0;
        }
}

static int cmp_desc(const void *a, const void *b) {
        uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
        return (x < y) - (x > y);
}

/* Applies o to the model as the store's contract says: appends go to the end; a
 * delete fills each hole, in descending index order, with the current last. */
static void model_apply(model *m, const op *o) {
        if (o->kind == OP_APPEND) {
                if (m->len + o->n > m->cap) {
                        m->cap = (m->len + o->n) * 2;
                        m->ids = realloc(m->ids, m->cap * sizeof(*m->ids));
                        ck_assert_ptr_nonnull(m->ids);
                }
                for (size_t i = 0; i < o->n; i++)
                        m->ids[m->len++] = o->first_id + i;
                m->next_id += o->n;
        } else if (o->kind == OP_DELETE) {
                uint64_t idx[DELETE_MAX];
                memcpy(idx, o->idx, o->n * sizeof(*idx));
                qsort(idx, o->n, sizeof(*idx), cmp_desc);
                for (size_t i = 0; i < o->n; i++) {
                        m->ids[idx[i]] = m->ids[m->len - 1];
                        m->len--;
                }
        }
}

/* The model after the first `ops` operations of program `seed`; *ret_next (may
 * be NULL) receives operation number `ops`, the one that would run next. */
static void model_replay(uint64_t seed, size_t ops, model *m, op *ret_next) {
        uint64_t rng = seed;
        op o;
        model_init(m);
        for (size_t j = 0; j < ops; j++) {
                program_next(&rng, m, &o);
                model_apply(m, &o);
        }
        if (ret_next)
                program_next(&rng, m, ret_next);
}

/* --- the writer child ----------------------------------------------------- */

static void ack(int fd) {
        uint8_t b = 1;
        if (write(fd, &b, 1) != 1)
                _exit(3);
}

/* Runs in the child and never returns: exit 0 after the whole program, 10+ on a
 * failed store call (the parent reports it). */
static void writer_main(int ackfd, int dirfd, enum zr_codec codec, const void *dict,
                        size_t dict_len, uint64_t seed, int no_mmap) {
        zr_pool *pool = NULL;
        zr_store *s = NULL;
        zr_error err = {0};
        zr_store_options opts = { .chunk_log2 = CRASH_CHUNK_LOG2, .no_mmap = no_mmap };
        uint8_t *buf = malloc(APPEND_MAX * RECORD_LARGE);
        uint64_t lens[APPEND_MAX];
        uint64_t rng = seed;
        model m;
        op o;

        if (!buf || zr_pool_new(2, &pool) < 0)
                _exit(4);
        opts.pool = pool;
        if (zr_store_create(dirfd, codec, dict, dict_len, &opts, &s, &err) < 0) {
                fprintf(stderr, "writer: create: %s\n", err.message);
                _exit(10);
        }
        ack(ackfd);
        model_init(&m);
        for (size_t j = 0; j < PROGRAM_OPS; j++) {
                int r = 0;
                program_next(&rng, &m, &o);
                switch (o.kind) {
                case OP_APPEND: {
                        size_t off = 0;
                        for (size_t i = 0; i < o.n; i++) {
                                lens[i] = record_len(o.first_id + i);
                                tl_record_fill(buf + off, o.first_id + i, lens[i]);
                                off += lens[i];
                        }
                        r = zr_store_append(s, buf, lens, o.n, NULL, &err);
                        break;
                }
                case OP_DELETE:
                        r = zr_store_delete(s, o.idx, o.n, &err);
                        break;
                default:
                        r = zr_store_compact(s, o.max_moves, NULL, &err);
                        break;
                }
                if (r < 0) {
                        fprintf(stderr, "writer: op %zu (%s): %s\n", j, op_names[o.kind], err.message);
                        _exit(11 + (int)o.kind);
                }
                model_apply(&m, &o);
                ack(ackfd);
        }
        zr_store_close(s, NULL);
        _exit(0);
}

/* --- the checks ------------------------------------------------------------ */

typedef struct counts {
        size_t trials, kills[OP_KINDS], finished, records, in_flight_applied;
} counts;

/* Reads every record of s; checks each is bit-exact for its id; returns the
 * index -> id table in *ret_ids (malloc()ed) and its length. */
static size_t read_ids(zr_store *s, uint64_t **ret_ids, const char *when) {
        uint64_t n = zr_store_length(s);
        uint64_t *idx = calloc(n + 1, sizeof(*idx));
        uint64_t *lens = calloc(n + 1, sizeof(*lens));
        uint64_t *ids = calloc(n + 1, sizeof(*ids));
        zr_loc *locs = calloc(n + 1, sizeof(*locs));
        uint8_t *want = malloc(RECORD_LARGE);
        zr_error err = {0};
        uint64_t total = 0;

        ck_assert(idx && lens && ids && locs && want);
        for (uint64_t i = 0; i < n; i++)
                idx[i] = i;
        int r = zr_store_locate(s, idx, n, locs, &err);
        ck_assert_msg(r == 0, "%s: locate: %s", when, err.message);
        for (uint64_t i = 0; i < n; i++)
                total += locs[i].logic_length;
        uint8_t *data = malloc(total + 1);
        ck_assert_ptr_nonnull(data);
        r = zr_store_gather(s, idx, n, data, total, lens, &err);
        ck_assert_msg(r == 0, "%s: gather of %" PRIu64 " records: %s", when, n, err.message);
        uint64_t off = 0;
        for (uint64_t i = 0; i < n; i++) {
                ck_assert_msg(lens[i] >= 8, "%s: record %" PRIu64 " is %" PRIu64 " bytes", when, i, lens[i]);
                uint64_t id = tl_record_id(data + off, lens[i]);
                ck_assert_msg(id > 0 && lens[i] == record_len(id),
                              "%s: record %" PRIu64 " (id %" PRIu64 ") is %" PRIu64 " bytes", when, i,
                              id, lens[i]);
                tl_record_fill(want, id, lens[i]);
                ck_assert_msg(memcmp(want, data + off, lens[i]) == 0,
                              "%s: record %" PRIu64 " (id %" PRIu64 ") differs from what was written",
                              when, i, id);
                ids[i] = id;
                off += lens[i];
        }
        free(data);
        free(want);
        free(locs);
        free(lens);
        free(idx);
        *ret_ids = ids;
        return n;
}

static int ids_equal(const uint64_t *ids, size_t n, const model *m) {
        return n == m->len && (n == 0 || memcmp(ids, m->ids, n * sizeof(*ids)) == 0);
}

/* One trial: write, kill, reopen, check. */
static void crash_trial(size_t trial, uint64_t seed, const void *dict, size_t dict_len, counts *c) {
        enum zr_codec codec = (enum zr_codec)(trial % 3);
        /* the writer and the checker each read through mappings or with pread
         * (no_mmap): every combination comes round every 12 trials */
        int writer_no_mmap = (int)(trial / 3 % 2), reader_no_mmap = (int)(trial / 6 % 2);
        uint64_t prog_seed = tl_mix64(seed + trial);
        uint64_t rng = tl_mix64(prog_seed ^ 0x6b);
        const char *tmp = getenv("TMPDIR");
        char dir[512];
        int fds[2], dfd, status;
        pid_t pid;

        snprintf(dir, sizeof(dir), "%s/zr-crash-XXXXXX", tmp && *tmp ? tmp : "/tmp");
        ck_assert_ptr_nonnull(mkdtemp(dir));
        dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        ck_assert_int_ge(dfd, 0);
        ck_assert_int_eq(pipe2(fds, O_CLOEXEC), 0);

        pid = fork();
        ck_assert_int_ge(pid, 0);
        if (pid == 0) {
                close(fds[0]);
                writer_main(fds[1], dfd, codec, dict, dict_len, prog_seed, writer_no_mmap);
        }
        close(fds[1]);

        /* wait for `target` acknowledged operations after the creation, then spin
         * a random fraction of the mean operation time and kill */
        size_t target = 1 + tl_rand(&rng) % MAX_ACKS;
        size_t acks = tl_kill_after_acks(pid, fds[0], target, &rng, &status);
        ck_assert_int_ne(status, -1);
        ck_assert_msg(WIFSIGNALED(status) || WEXITSTATUS(status) == 0,
                      "trial %zu: writer failed with exit status %d (see its stderr)", trial,
                      WEXITSTATUS(status));
        ck_assert_msg(acks >= 1, "trial %zu: the writer never created its store", trial);

        size_t acked = acks - 1;
        model before, after;
        op inflight;
        model_replay(prog_seed, acked, &before, &inflight);
        model_replay(prog_seed, acked + 1, &after, NULL);
        if (WIFSIGNALED(status))
                c->kills[inflight.kind]++;
        else
                c->finished++;

        zr_pool *pool = NULL;
        ck_assert_int_eq(zr_pool_new(2, &pool), 0);
        zr_store_options opts = { .pool = pool, .no_mmap = reader_no_mmap };
        zr_store *s = NULL;
        zr_error err = {0};
        int r = zr_store_open(dfd, &opts, &s, &err);
        ck_assert_msg(r == 0, "trial %zu (codec %d, %zu acked, killed in %s): open: %s (%s)", trial,
                      (int)codec, acked, op_names[inflight.kind], err.message, zr_error_code_name(r));

        char when[128];
        snprintf(when, sizeof(when), "trial %zu (codec %d, %zu acked, killed in %s)", trial,
                 (int)codec, acked, op_names[inflight.kind]);
        uint64_t *ids = NULL;
        size_t n = read_ids(s, &ids, when);
        int is_before = ids_equal(ids, n, &before), is_after = ids_equal(ids, n, &after);
        ck_assert_msg(is_before || is_after,
                      "%s: the store holds %zu records; the model holds %zu before the operation in "
                      "flight and %zu after it, and neither matches index for index",
                      when, n, before.len, after.len);
        if (!is_before)
                c->in_flight_applied++;
        c->records += n;

        zr_verify_report rep = {0};
        zr_error_clear(&err);
        r = zr_store_verify(s, &rep, &err);
        ck_assert_msg(r == 0 && rep.bad == 0, "%s: verify: %s", when, err.message);
        ck_assert_uint_eq(rep.records, n);

        zr_compact_result cr = {0};
        zr_error_clear(&err);
        r = zr_store_compact(s, 0, &cr, &err);
        ck_assert_msg(r == 0, "%s: compaction after reopen: %s", when, err.message);
        ck_assert_int_eq(cr.finished, 1);
        uint64_t *ids2 = NULL;
        size_t n2 = read_ids(s, &ids2, when);
        ck_assert_uint_eq(n2, n);
        ck_assert_msg(n == 0 || memcmp(ids, ids2, n * sizeof(*ids)) == 0,
                      "%s: compaction changed the index -> id table", when);
        zr_error_clear(&err);
        ck_assert_msg(zr_store_close(s, &err) == 0, "%s: close: %s", when, err.message);

        free(ids2);
        free(ids);
        model_done(&after);
        model_done(&before);
        zr_pool_free(pool);
        close(dfd);
        tl_rmtree(dir);
        c->trials++;
}

START_TEST(test_model_swap_last) {
        /* the model the trials check against follows the contract */
        model m;
        model_init(&m);
        op o = { .kind = OP_APPEND, .n = 5, .first_id = 1 };
        model_apply(&m, &o);
        op d = { .kind = OP_DELETE, .n = 2, .idx = { 1, 3 } };
        model_apply(&m, &d);
        /* delete 3 first: [1 2 3 5]; then 1 takes the last: [1 5 3] */
        ck_assert_uint_eq(m.len, 3);
        ck_assert_uint_eq(m.ids[0], 1);
        ck_assert_uint_eq(m.ids[1], 5);
        ck_assert_uint_eq(m.ids[2], 3);
        model_done(&m);

        uint8_t a[100], b2[100];
        tl_record_fill(a, 42, sizeof(a));
        tl_record_fill(b2, 43, sizeof(b2));
        ck_assert_int_ne(memcmp(a, b2, sizeof(a)), 0);
        ck_assert_uint_eq(a[0], 42);
}
END_TEST

START_TEST(test_crash_trials) {
        size_t trials = (size_t)tl_env_u64("ZR_CRASH_TRIALS", CRASH_TRIALS_DEFAULT);
        uint64_t seed = tl_env_u64("ZR_CRASH_SEED", CRASH_SEED_DEFAULT);
        counts c = {0};
        void *dict = NULL;
        size_t dict_len = 0;

        ck_assert_int_eq(tl_record_dict(UINT64_C(1) << 40, 400, record_len, RECORD_SMALL,
                                        DICT_CAPACITY, &dict, &dict_len), 0);
        for (size_t t = 0; t < trials; t++)
                crash_trial(t, seed, dict, dict_len, &c);
        printf("crash: %zu trials (seed %#" PRIx64 "): killed during append %zu, delete %zu, "
               "compact %zu; finished before the kill %zu; in-flight operation found applied %zu; "
               "records checked %zu\n",
               c.trials, seed, c.kills[OP_APPEND], c.kills[OP_DELETE], c.kills[OP_COMPACT],
               c.finished, c.in_flight_applied, c.records);
        fflush(stdout);
        ck_assert_uint_eq(c.trials, trials);
        free(dict);
}
END_TEST

int main(void) {
        Suite *s = suite_create("crash");
        TL_TCASE(s, "core", 600, test_model_swap_last, test_crash_trials);
        return tl_run_suite(s);
}
