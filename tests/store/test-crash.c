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
#include "crash.h"
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

_Static_assert(DELETE_MAX <= TL_OP_DELETE_MAX, "a delete fits an operation");

/* The next operation of the program, from its generator and the table so far
 * (a tl_program: the number of the operation is not needed). */
static void program_next(uint64_t seed, size_t nth, uint64_t *rng, const tl_model *m, tl_op *o) {
        (void)seed;
        (void)nth;
        uint64_t r = tl_rand(rng) % 100;
        memset(o, 0, sizeof(*o));
        if (m->len < 8 || r < 55) {
                o->kind = TL_OP_APPEND;
                o->n = 1 + tl_rand(rng) % APPEND_MAX;
                o->first_id = m->next_id;
        } else if (r < 85) {
                o->kind = TL_OP_DELETE;
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
                o->kind = TL_OP_COMPACT;
                o->max_moves = tl_rand(rng) % 3 == 0 ? 1 + tl_rand(rng) % 6 : 0;
        }
}

/* --- the writer child ----------------------------------------------------- */

/* What a trial's writer writes: its store's codec and dictionary, its program,
 * and whether it reads with pread. */
typedef struct writer_arg {
        enum zr_codec codec;
        const void *dict;
        size_t dict_len;
        uint64_t seed;
        int no_mmap;
} writer_arg;

/* Runs in the child and never returns: exit 0 after the whole program, 10+ on a
 * failed store call (the parent reports it). */
static void writer_main(int ackfd, int dirfd, void *arg) {
        const writer_arg *a = arg;
        zr_pool *pool = NULL;
        zr_store *s = NULL;
        zr_error err = {0};
        zr_store_options opts = { .chunk_log2 = CRASH_CHUNK_LOG2, .no_mmap = a->no_mmap };
        uint8_t *buf = malloc(APPEND_MAX * RECORD_LARGE);
        uint64_t lens[APPEND_MAX];
        uint64_t rng = a->seed;
        tl_model m;
        tl_op o;

        if (!buf || zr_pool_new(2, &pool) < 0)
                _exit(4);
        opts.pool = pool;
        if (zr_store_create(dirfd, a->codec, a->dict, a->dict_len, &opts, &s, &err) < 0) {
                fprintf(stderr, "writer: create: %s\n", err.message);
                _exit(10);
        }
        tl_ack(ackfd);
        tl_model_init(&m);
        for (size_t j = 0; j < PROGRAM_OPS; j++) {
                int r = 0;
                program_next(a->seed, j, &rng, &m, &o);
                switch (o.kind) {
                case TL_OP_APPEND: {
                        size_t off = 0;
                        for (size_t i = 0; i < o.n; i++) {
                                lens[i] = record_len(o.first_id + i);
                                tl_record_fill(buf + off, o.first_id + i, lens[i]);
                                off += lens[i];
                        }
                        r = zr_store_append(s, buf, lens, o.n, NULL, &err);
                        break;
                }
                case TL_OP_DELETE:
                        r = zr_store_delete(s, o.idx, o.n, &err);
                        break;
                default:
                        r = zr_store_compact(s, o.max_moves, NULL, &err);
                        break;
                }
                if (r < 0) {
                        fprintf(stderr, "writer: op %zu (%s): %s\n", j, tl_op_names[o.kind],
                                err.message);
                        _exit(11 + (int)o.kind);
                }
                tl_ack_op(ackfd, &m, &o);
        }
        zr_store_close(s, NULL);
        _exit(0);
}

/* --- the checks ------------------------------------------------------------ */

typedef tl_crash_counts counts;

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

/* One trial: write, kill, reopen, check. */
static void crash_trial(size_t trial, uint64_t seed, const void *dict, size_t dict_len, counts *c) {
        /* the writer and the checker each read through mappings or with pread
         * (no_mmap): every combination comes round every 12 trials */
        int reader_no_mmap = (int)(trial / 6 % 2);
        writer_arg wa = { .codec = (enum zr_codec)(trial % 3), .dict = dict, .dict_len = dict_len,
                          .seed = tl_mix64(seed + trial), .no_mmap = (int)(trial / 3 % 2) };
        uint64_t rng = tl_mix64(wa.seed ^ 0x6b);
        enum zr_codec codec = wa.codec;
        char why[128];
        tl_crash t;

        /* wait for `target` acknowledged operations after the creation, then spin
         * a random fraction of the mean operation time and kill */
        size_t target = 1 + tl_rand(&rng) % MAX_ACKS;
        int rr = tl_crash_run(&t, "zr-crash", target, &rng, writer_main, &wa, program_next,
                              wa.seed, why, sizeof(why));
        ck_assert_msg(rr == 0, "trial %zu: %s", trial, rr == -1 ? why : strerror(-rr));
        int dfd = t.dfd;
        size_t acked = t.acked;
        tl_model *before = &t.before, *after = &t.after;
        tl_crash_count(&t, c);

        zr_pool *pool = NULL;
        ck_assert_int_eq(zr_pool_new(2, &pool), 0);
        zr_store_options opts = { .pool = pool, .no_mmap = reader_no_mmap };
        zr_store *s = NULL;
        zr_error err = {0};
        int r = zr_store_open(dfd, &opts, &s, &err);
        ck_assert_msg(r == 0, "trial %zu (codec %d, %zu acked, killed in %s): open: %s (%s)", trial,
                      (int)codec, acked, tl_op_names[t.inflight.kind], err.message, zr_error_code_name(r));

        char when[128];
        snprintf(when, sizeof(when), "trial %zu (codec %d, %zu acked, killed in %s)", trial,
                 (int)codec, acked, tl_op_names[t.inflight.kind]);
        uint64_t *ids = NULL;
        size_t n = read_ids(s, &ids, when);
        int is_before = tl_model_is(before, ids, n), is_after = tl_model_is(after, ids, n);
        ck_assert_msg(is_before || is_after,
                      "%s: the store holds %zu records; the model holds %zu before the operation in "
                      "flight and %zu after it, and neither matches index for index",
                      when, n, before->len, after->len);
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
        zr_pool_free(pool);
        tl_crash_done(&t);
        c->trials++;
}

START_TEST(test_model_swap_last) {
        /* the model the trials check against follows the contract */
        tl_model m;
        tl_model_init(&m);
        tl_op o = { .kind = TL_OP_APPEND, .n = 5, .first_id = 1 };
        tl_model_apply(&m, &o);
        tl_op d = { .kind = TL_OP_DELETE, .n = 2, .idx = { 1, 3 } };
        tl_model_apply(&m, &d);
        /* delete 3 first: [1 2 3 5]; then 1 takes the last: [1 5 3] */
        ck_assert_uint_eq(m.len, 3);
        ck_assert_uint_eq(m.ids[0], 1);
        ck_assert_uint_eq(m.ids[1], 5);
        ck_assert_uint_eq(m.ids[2], 3);
        tl_model_done(&m);

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
               c.trials, seed, c.kills[TL_OP_APPEND], c.kills[TL_OP_DELETE], c.kills[TL_OP_COMPACT],
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
