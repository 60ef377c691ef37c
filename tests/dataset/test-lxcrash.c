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
#include "crash.h"
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

_Static_assert(DELETE_MAX <= TL_OP_DELETE_MAX, "a delete fits an operation");

/* Operation i of program `seed` over a store of m->len records (a tl_program:
 * deterministic in seed and i, no generator drawn from). */
static void program_op(uint64_t seed, size_t i, uint64_t *rng, const tl_model *m, tl_op *ret) {
        uint64_t h = tl_mix64(seed ^ (i * UINT64_C(0x9e3779b97f4a7c15)));
        tl_op o = { .kind = TL_OP_APPEND };

        (void)rng;
        if (h % 10 == 9)
                o.kind = TL_OP_COMPACT;
        else if (h % 10 >= 6 && m->len >= 8)
                o.kind = TL_OP_DELETE;
        if (o.kind == TL_OP_APPEND) {
                o.n = 1 + (h >> 8) % APPEND_MAX;
                o.first_id = m->next_id;
        } else if (o.kind == TL_OP_DELETE) {
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
        *ret = o;
}

/* --- the writer ------------------------------------------------------------- */

/* Appends o's records through the dataset, with their shape headers. */
static int writer_append(zr_dataset *ds, const tl_op *o, zr_error *err) {
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

/* What a trial's writer writes. */
typedef struct writer_arg {
        enum zr_codec codec;
        uint64_t seed;
} writer_arg;

static void writer_main(int ackfd, int dfd, void *arg) {
        static uint8_t dict[4096];
        const writer_arg *a = arg;
        enum zr_codec codec = a->codec;
        uint64_t seed = a->seed;
        zr_lxragged *lx = NULL;
        zr_dataset *ds = NULL;
        zr_error err = {0};
        tl_model m;

        for (size_t i = 0; i < sizeof(dict); i++)
                dict[i] = (uint8_t)(i * 131 + 7); /* raw content serves as a dictionary */
        if (zr_lxragged_create(dfd, "<u8", codec, dict, sizeof(dict), NULL, &lx, &err) < 0 ||
            zr_lxragged_close(lx, &err) < 0 || zr_dataset_open(dfd, NULL, &ds, &err) < 0) {
                fprintf(stderr, "writer: creating: %s\n", err.message);
                _exit(2);
        }
        tl_ack(ackfd);
        tl_model_init(&m);
        for (size_t i = 0; i < PROGRAM_OPS; i++) {
                tl_op o;
                int r = 0;

                program_op(seed, i, NULL, &m, &o);
                if (o.kind == TL_OP_APPEND)
                        r = writer_append(ds, &o, &err);
                else if (o.kind == TL_OP_DELETE)
                        r = zr_dataset_delete(ds, o.idx, o.n, &err);
                else
                        r = zr_dataset_compact(ds, NULL, &err);
                if (r < 0) {
                        fprintf(stderr, "writer: %s %zu: %s\n", tl_op_names[o.kind], i, err.message);
                        _exit(2);
                }
                tl_ack_op(ackfd, &m, &o);
        }
        zr_dataset_close(ds, NULL);
        _exit(0);
}

/* --- the checks ------------------------------------------------------------- */

typedef tl_crash_counts counts;

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

static void trial_run(size_t trial, uint64_t seed, counts *c) {
        writer_arg wa = { .codec = (enum zr_codec)(trial % 3), .seed = tl_mix64(seed + trial) };
        uint64_t rng = tl_mix64(wa.seed ^ 0x5a);
        size_t target = 1 + tl_rand(&rng) % MAX_ACKS;
        char why[128], when[160];
        tl_crash t;

        /* killed at a random point of the operation after the target's, or so */
        int rr = tl_crash_run(&t, "zr-lxcrash", target, &rng, writer_main, &wa, program_op,
                              wa.seed, why, sizeof(why));
        ck_assert_msg(rr == 0, "trial %zu: %s", trial, rr == -1 ? why : strerror(-rr));
        tl_crash_count(&t, c);
        snprintf(when, sizeof(when), "trial %zu (codec %d, %zu acked, killed in %s)", trial,
                 (int)wa.codec, t.acked, tl_op_names[t.inflight.kind]);

        int dfd = t.dfd;
        zr_dataset *ds = NULL;
        zr_error err = {0};
        int r = zr_dataset_open(dfd, NULL, &ds, &err);
        ck_assert_msg(r == 0, "%s: open: %s", when, err.message);
        ck_assert_int_eq(zr_dataset_schema(ds)->layout, ZR_LAYOUT_LX157);
        uint64_t n = zr_dataset_length(ds), *ids = read_ids(ds, when);
        int is_before = tl_model_is(&t.before, ids, n), is_after = tl_model_is(&t.after, ids, n);
        ck_assert_msg(is_before || is_after, "%s: the store holds %" PRIu64 " records; the model "
                      "%" PRIu64 " before the operation in flight and %" PRIu64 " after it, and "
                      "neither matches index for index", when, n, t.before.len, t.after.len);
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
        tl_crash_done(&t);
        c->trials++;
}

START_TEST(test_model) {
        tl_model m;
        tl_op a = { .kind = TL_OP_APPEND, .n = 5, .first_id = 1 };
        tl_op d = { .kind = TL_OP_DELETE, .n = 2, .idx = { 1, 3 } };

        tl_model_init(&m);
        tl_model_apply(&m, &a);
        tl_model_apply(&m, &d); /* delete 3: [1 2 3 5]; then 1 takes the last: [1 5 3] */
        ck_assert_uint_eq(m.len, 3);
        ck_assert_uint_eq(m.ids[1], 5);
        ck_assert_uint_eq(m.ids[2], 3);
        tl_model_done(&m);
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
               "checked\n", c.trials, seed, c.kills[TL_OP_APPEND], c.kills[TL_OP_DELETE],
               c.kills[TL_OP_COMPACT], c.finished, c.in_flight_applied, c.records);
        ck_assert_uint_eq(c.trials, trials);
        ck_assert_uint_gt(c.kills[TL_OP_APPEND], 0); /* the point of it */
}
END_TEST

int main(void) {
        Suite *s = suite_create("lxcrash");
        TL_TCASE(s, "core", 900, test_model, test_crash_trials);
        return tl_run_suite(s);
}
