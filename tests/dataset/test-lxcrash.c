/* test-lxcrash.c: a loaderx 1.5.7 ragged store changed through the dataset layer
 * survives SIGKILL at any instant.
 *
 * loaderx 1.5.7 keeps every record's shape in schema.msgpack, so an append or a
 * delete changes two files: the store and the schema (lxragged.h orders them and
 * replaces the schema atomically). Each trial forks a writer child that creates
 * such a store (raw, zstd and zstd_dict in turn), opens it as a dataset (the
 * daemon's path: zr_dataset_open() picks the layout) and runs a deterministic
 * program of appends (records of ndim 1 to 3 with their shape headers, as clients
 * send them), delete batches and compactions, reporting each acknowledged
 * operation through a pipe. The parent SIGKILLs it at a random moment (after a
 * random number of acknowledgements plus a random spin scaled to the observed
 * operation time), then reopens the store writable (which finishes or undoes what
 * the kill cut) and checks that it opens as loaderx's layout, that every record
 * has its shape and its values (both follow from the id written in it), that the
 * index -> id table equals the model after the acknowledged operations or after
 * those plus the one in flight, never anything else, that verify passes (sizes
 * against shapes included) and that it then opens read-only too.
 *
 * ZR_LXCRASH_TRIALS sets the number of trials (default 36), ZR_LXCRASH_SEED the
 * seed. The counts are printed on stdout.
 */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check-run.h"
#include "dataset/batch.h"
#include "dataset/dataset.h"
#include "dataset/lxragged.h"
#include "dataset/ragged.h"
#include "records.h"
#include "util.h"

#define TRIALS_DEFAULT 36
#define SEED_DEFAULT UINT64_C(0x1c57)
#define PROGRAM_OPS 200 /* longer than any kill point: the child is always busy */
#define MAX_ACKS 24
#define APPEND_MAX 6
#define DELETE_MAX 3

/* --- records: the shape (tests/lib/records.h) and every value follow from the id */

static uint64_t rec_value(uint64_t id, uint64_t k) {
        return id * 1000 + k;
}

/* --- the program and its model ---------------------------------------------- */

enum { OP_APPEND, OP_DELETE, OP_COMPACT, OP_KINDS };
static const char *const op_names[OP_KINDS] = { "append", "delete", "compact" };

typedef struct op {
        int kind;
        uint64_t n, first_id, idx[DELETE_MAX];
} op;

typedef struct model {
        uint64_t *ids, len, next_id;
} model;

/* Operation i of the program over a store of m->len records (deterministic). */
static op program_op(uint64_t seed, size_t i, const model *m) {
        uint64_t h = tl_mix64(seed ^ (i * UINT64_C(0x9e3779b97f4a7c15)));
        op o = { .kind = OP_APPEND };

        if (h % 10 == 9)
                o.kind = OP_COMPACT;
        else if (h % 10 >= 6 && m->len >= 8)
                o.kind = OP_DELETE;
        if (o.kind == OP_APPEND) {
                o.n = 1 + (h >> 8) % APPEND_MAX;
                o.first_id = m->next_id;
        } else if (o.kind == OP_DELETE) {
                o.n = 1 + (h >> 8) % DELETE_MAX;
                for (uint64_t k = 0; k < o.n; k++) { /* distinct, any order */
                        uint64_t x;
                        int dup;
                        do {
                                x = tl_mix64(h + 7 * k + o.n) % m->len;
                                dup = 0;
                                for (uint64_t j = 0; j < k; j++)
                                        dup |= o.idx[j] == x;
                                h = tl_mix64(h);
                        } while (dup);
                        o.idx[k] = x;
                }
        }
        return o;
}

static int cmp_desc(const void *a, const void *b) {
        uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

        return (x < y) - (x > y);
}

static void model_apply(model *m, const op *o) {
        if (o->kind == OP_APPEND) {
                m->ids = realloc(m->ids, (m->len + o->n) * sizeof(*m->ids));
                ck_assert_ptr_nonnull(m->ids);
                for (uint64_t k = 0; k < o->n; k++)
                        m->ids[m->len++] = o->first_id + k;
                m->next_id += o->n;
        } else if (o->kind == OP_DELETE) {
                uint64_t d[DELETE_MAX];
                memcpy(d, o->idx, o->n * sizeof(*d));
                qsort(d, o->n, sizeof(*d), cmp_desc);
                for (uint64_t k = 0; k < o->n; k++) /* swap-last, descending */
                        m->ids[d[k]] = m->ids[--m->len];
        }
}

/* The model after `count` operations; *ret_next (may be NULL) the next one. */
static void model_replay(uint64_t seed, size_t count, model *m, op *ret_next) {
        *m = (model){ .next_id = 1 };
        for (size_t i = 0; i < count; i++) {
                op o = program_op(seed, i, m);
                model_apply(m, &o);
        }
        if (ret_next)
                *ret_next = program_op(seed, count, m);
}

/* --- the writer ------------------------------------------------------------- */

static void ack(int fd) {
        uint8_t b = 1;
        if (write(fd, &b, 1) != 1)
                _exit(3);
}

/* Appends o's records through the dataset, with their shape headers. */
static int writer_append(zr_dataset *ds, const op *o, zr_error *err) {
        uint64_t lens[APPEND_MAX], total = 0, at = 0;
        uint8_t *data;
        int r;

        for (uint64_t k = 0; k < o->n; k++) {
                uint64_t dims[3];
                uint32_t nd = tl_shaped_dims(o->first_id + k, dims);
                lens[k] = zr_ragged_header_bytes(nd) + 8 * tl_shaped_items(o->first_id + k);
                total += lens[k];
        }
        data = malloc(total);
        if (!data)
                return -ENOMEM;
        for (uint64_t k = 0; k < o->n; k++) {
                uint64_t id = o->first_id + k, dims[3];
                uint32_t nd = tl_shaped_dims(id, dims);

                zr_ragged_header_write(data + at, dims, nd);
                at += zr_ragged_header_bytes(nd);
                for (uint64_t j = 0; j < tl_shaped_items(id); j++, at += 8) {
                        uint64_t v = rec_value(id, j);
                        memcpy(data + at, &v, 8); /* the test runs little-endian */
                }
        }
        zr_batch b = { .dtype = "<u8", .data = data, .data_len = total, .lens = lens,
                       .nrecords = o->n };
        r = zr_dataset_append(ds, &b, NULL, err);
        free(data);
        return r;
}

static void writer_main(int ackfd, int dfd, enum zr_codec codec, uint64_t seed) {
        static uint8_t dict[4096];
        zr_lxragged *lx = NULL;
        zr_dataset *ds = NULL;
        zr_error err = {0};
        model m;

        for (size_t i = 0; i < sizeof(dict); i++)
                dict[i] = (uint8_t)(i * 131 + 7); /* raw content serves as a dictionary */
        if (zr_lxragged_create(dfd, "<u8", codec, dict, sizeof(dict), NULL, &lx, &err) < 0 ||
            zr_lxragged_close(lx, &err) < 0 || zr_dataset_open(dfd, NULL, &ds, &err) < 0) {
                fprintf(stderr, "writer: creating: %s\n", err.message);
                _exit(2);
        }
        ack(ackfd);
        model_replay(seed, 0, &m, NULL);
        for (size_t i = 0; i < PROGRAM_OPS; i++) {
                op o = program_op(seed, i, &m);
                int r = 0;

                if (o.kind == OP_APPEND)
                        r = writer_append(ds, &o, &err);
                else if (o.kind == OP_DELETE)
                        r = zr_dataset_delete(ds, o.idx, o.n, &err);
                else
                        r = zr_dataset_compact(ds, NULL, &err);
                if (r < 0) {
                        fprintf(stderr, "writer: %s %zu: %s\n", op_names[o.kind], i, err.message);
                        _exit(2);
                }
                model_apply(&m, &o);
                ack(ackfd);
        }
        zr_dataset_close(ds, NULL);
        _exit(0);
}

/* --- the checks ------------------------------------------------------------- */

typedef struct counts {
        size_t trials, kills[OP_KINDS], finished, records, in_flight_applied;
} counts;

/* Every record of ds through the batch gather: its shape and values must be those
 * of the id in its first value. Returns the index -> id table (malloc()ed). */
static uint64_t *read_ids(zr_dataset *ds, const char *when) {
        uint64_t n = zr_dataset_length(ds);
        uint64_t *idx = calloc(n + 1, 8), *offs = calloc(n + 1, 8), *lens = calloc(n + 1, 8);
        uint64_t *shapes = calloc((n + 1) * (1 + ZR_SCHEMA_NDIM_MAX), 8), *ids = calloc(n + 1, 8);
        zr_gather g = { .ds = ds, .idx = idx, .n = n, .offsets = offs, .lengths = lens,
                        .shapes = shapes };
        zr_error err = {0};
        uint8_t *buf;
        uint64_t w = 0;

        ck_assert(idx && offs && lens && shapes && ids);
        for (uint64_t i = 0; i < n; i++)
                idx[i] = i;
        ck_assert_msg(zr_gather_locate(&g, &err) == 0, "%s: locate: %s", when, err.message);
        buf = malloc(g.bytes + 8);
        ck_assert_ptr_nonnull(buf);
        ck_assert_msg(zr_gather_read(&g, buf, 0, NULL, NULL, &err) == 0, "%s: read: %s", when,
                      err.message);
        zr_gather_release(&g);
        for (uint64_t i = 0; i < n; i++) {
                uint64_t id, dims[3], v;
                uint32_t nd;

                ck_assert_msg(lens[i] >= 8, "%s: record %" PRIu64 " is empty", when, i);
                memcpy(&id, buf + offs[i], 8);
                id /= 1000;
                nd = tl_shaped_dims(id, dims);
                if (shapes[w] != nd || memcmp(shapes + w + 1, dims, nd * 8) != 0 ||
                    lens[i] != 8 * tl_shaped_items(id))
                        ck_abort_msg("%s: record %" PRIu64 " (id %" PRIu64 ") has another shape",
                                     when, i, id);
                w += 1 + nd;
                for (uint64_t j = 0; j < tl_shaped_items(id); j++) {
                        memcpy(&v, buf + offs[i] + 8 * j, 8);
                        if (v != rec_value(id, j))
                                ck_abort_msg("%s: record %" PRIu64 " (id %" PRIu64 ") differs", when,
                                             i, id);
                }
                ids[i] = id;
        }
        free(buf);
        free(idx);
        free(offs);
        free(lens);
        free(shapes);
        return ids;
}

static int ids_equal(const uint64_t *ids, uint64_t n, const model *m) {
        return n == m->len && (n == 0 || memcmp(ids, m->ids, n * 8) == 0);
}

static void trial_run(size_t trial, uint64_t seed, counts *c) {
        enum zr_codec codec = (enum zr_codec)(trial % 3);
        uint64_t prog = tl_mix64(seed + trial), rng = tl_mix64(prog ^ 0x5a);
        char dir[512], when[160];
        int fds[2], dfd, status;
        size_t target = 1 + tl_rand(&rng) % MAX_ACKS, acks;
        pid_t pid;

        snprintf(dir, sizeof(dir), "%s/zr-lxcrash-XXXXXX", tl_tmpdir(true));
        ck_assert_ptr_nonnull(mkdtemp(dir));
        dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        ck_assert_int_ge(dfd, 0);
        ck_assert_int_eq(pipe2(fds, O_CLOEXEC), 0);
        pid = fork();
        ck_assert_int_ge(pid, 0);
        if (pid == 0) {
                close(fds[0]);
                writer_main(fds[1], dfd, codec, prog);
        }
        close(fds[1]);
        /* killed at a random point of the operation after the target's, or so */
        acks = tl_kill_after_acks(pid, fds[0], target, &rng, &status);
        ck_assert_int_ne(status, -1);
        ck_assert_msg(WIFSIGNALED(status) || WEXITSTATUS(status) == 0,
                      "trial %zu: the writer failed (exit %d, see its stderr)", trial,
                      WEXITSTATUS(status));
        ck_assert_msg(acks >= 1, "trial %zu: the writer never created its store", trial);

        size_t acked = acks - 1;
        model before, after;
        op inflight;
        model_replay(prog, acked, &before, &inflight);
        model_replay(prog, acked + 1, &after, NULL);
        if (WIFSIGNALED(status))
                c->kills[inflight.kind]++;
        else
                c->finished++;
        snprintf(when, sizeof(when), "trial %zu (codec %d, %zu acked, killed in %s)", trial,
                 (int)codec, acked, op_names[inflight.kind]);

        zr_dataset *ds = NULL;
        zr_error err = {0};
        int r = zr_dataset_open(dfd, NULL, &ds, &err);
        ck_assert_msg(r == 0, "%s: open: %s", when, err.message);
        ck_assert_int_eq(zr_dataset_schema(ds)->layout, ZR_LAYOUT_LX157);
        uint64_t n = zr_dataset_length(ds), *ids = read_ids(ds, when);
        int is_before = ids_equal(ids, n, &before), is_after = ids_equal(ids, n, &after);
        ck_assert_msg(is_before || is_after, "%s: the store holds %" PRIu64 " records; the model "
                      "%" PRIu64 " before the operation in flight and %" PRIu64 " after it, and "
                      "neither matches index for index", when, n, before.len, after.len);
        c->in_flight_applied += !is_before;
        c->records += n;
        zr_verify_report rep = {0};
        uint64_t bad[4];
        size_t nbad = 0;
        r = zr_dataset_verify(ds, &rep, bad, 4, &nbad, &err);
        ck_assert_msg(r == 0 && rep.bad == 0, "%s: verify: %s", when, err.message);
        ck_assert_msg(zr_dataset_close(ds, &err) == 0, "%s: close: %s", when, err.message);
        zr_store_options ro = { .read_only = 1 };
        r = zr_dataset_open(dfd, &ro, &ds, &err);
        ck_assert_msg(r == 0, "%s: read-only open after recovery: %s", when, err.message);
        ck_assert_uint_eq(zr_dataset_length(ds), n);
        zr_dataset_close(ds, NULL);

        free(ids);
        free(before.ids);
        free(after.ids);
        close(dfd);
        tl_rmtree(dir);
        c->trials++;
}

START_TEST(test_model) {
        model m = { .next_id = 1 };
        op a = { .kind = OP_APPEND, .n = 5, .first_id = 1 }, d = { .kind = OP_DELETE, .n = 2,
                                                                    .idx = { 1, 3 } };

        model_apply(&m, &a);
        model_apply(&m, &d); /* delete 3: [1 2 3 5]; then 1 takes the last: [1 5 3] */
        ck_assert_uint_eq(m.len, 3);
        ck_assert_uint_eq(m.ids[1], 5);
        ck_assert_uint_eq(m.ids[2], 3);
        free(m.ids);
        for (uint64_t id = 1; id < 100; id++) { /* every ndim comes round */
                uint64_t dims[3];
                ck_assert_uint_eq(tl_shaped_dims(id, dims), 1 + id % 3);
        }
}
END_TEST

START_TEST(test_crash_trials) {
        size_t trials = (size_t)tl_env_u64("ZR_LXCRASH_TRIALS", TRIALS_DEFAULT);
        uint64_t seed = tl_env_u64("ZR_LXCRASH_SEED", SEED_DEFAULT);
        counts c = {0};

        for (size_t t = 0; t < trials; t++)
                trial_run(t, seed, &c);
        printf("lxcrash: %zu trials (seed %#" PRIx64 "): killed during append %zu, delete %zu, "
               "compact %zu; finished %zu; in-flight operation found applied %zu; %zu records "
               "checked\n", c.trials, seed, c.kills[OP_APPEND], c.kills[OP_DELETE],
               c.kills[OP_COMPACT], c.finished, c.in_flight_applied, c.records);
        ck_assert_uint_eq(c.trials, trials);
        ck_assert_uint_gt(c.kills[OP_APPEND], 0); /* the point of it */
}
END_TEST

int main(void) {
        Suite *s = suite_create("lxcrash");
        TL_TCASE(s, "core", 900, test_model, test_crash_trials);
        return tl_run_suite(s);
}
