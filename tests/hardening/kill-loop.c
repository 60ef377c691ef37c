/* kill-loop.c: the daemon, which does the writing, is SIGKILLed at random
 * moments while a client appends (raw, zstd and zstd_dict stores, in turn),
 * deletes and compacts through it; after each kill the daemon is restarted and
 * the store must open, hold exactly what was acknowledged to the client (plus,
 * all or nothing, the one request in flight), every record bit-exact (records
 * carry their id), and a compaction re-run must finish.
 *
 * Trials: $ZR_KILL_TRIALS (CI default 60; the nightly size is 500 or more),
 * seed $ZR_KILL_SEED. The kill moment is a random delay of up to
 * $ZR_KILL_MAX_USEC after the writer starts, drawn from the seeded generator;
 * which request was in flight at that instant is counted. Prints: trials,
 * kills during each operation, records checked, in-flight requests found
 * applied or not.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "harden.h"
#include "records.h"
#include "zrc.h"

#define STORES 3
/* Records are 8 .. 1500 bytes: several per page, some zstd frames of one block. */
#define REC_MIN 8
#define REC_MAX 1500
/* The writer keeps a store near this many records: deletes grow likelier above it. */
#define STORE_TARGET 2500
#define APPEND_MAX 64
#define DELETE_MAX 64

enum op { OP_IDLE, OP_APPEND, OP_DELETE, OP_COMPACT, OP_MAX };
static const char *const op_name[OP_MAX] = {"between requests", "append", "delete", "compact"};

typedef struct model {
        uint64_t *ids;
        size_t n, cap;
        uint64_t next_id;
} model;

typedef struct pending {
        enum op op;
        uint64_t first_id, count;     /* append */
        uint64_t idx[DELETE_MAX];     /* delete */
        size_t nidx;
} pending;

static _Atomic int current_op = OP_IDLE;

static void model_push(model *m, uint64_t id) {
        tl_push_u64(&m->ids, &m->n, &m->cap, id);
}

/* Swap-last, as the store does it: each hole, in descending order, takes the
 * current last record. */
static void model_delete(model *m, const uint64_t *idx, size_t n) {
        m->n = tl_swap_last(m->ids, m->n, idx, n);
}

typedef struct killer {
        pid_t pid;
        uint64_t delay_usec;
        int op_at_kill;
        pthread_t thread;
} killer;

static void *killer_main(void *arg) {
        killer *k = arg;
        struct timespec ts = {(time_t)(k->delay_usec / 1000000),
                              (long)(k->delay_usec % 1000000) * 1000};
        /* the random instant itself, not a wait for an event */
        while (clock_nanosleep(CLOCK_MONOTONIC, 0, &ts, &ts) == EINTR)
                ;
        k->op_at_kill = atomic_load(&current_op);
        kill(k->pid, SIGKILL);
        return NULL;
}

/* Reads the whole store and checks it against the model (with the request in
 * flight at the kill resolved: applied or not, all or nothing). Returns the
 * records checked. */
static uint64_t verify_store(zrc_dataset *d, model *m, pending *p, uint64_t *applied,
                             uint64_t *not_applied, const char *what) {
        zrc_info info;
        int r = zrc_dataset_info(d, &info);
        CHECK(r == 0, "%s: info: %d", what, r);
        if (r < 0)
                return 0;
        uint64_t len = info.length;
        switch (p->op) {
        case OP_APPEND:
                CHECK(len == m->n || len == m->n + p->count,
                      "%s: length %" PRIu64 " after a kill during an append of %" PRIu64
                      " to %zu records", what, len, p->count, m->n);
                if (len == m->n + p->count) {
                        for (uint64_t i = 0; i < p->count; i++)
                                model_push(m, p->first_id + i);
                        (*applied)++;
                } else {
                        (*not_applied)++;
                }
                break;
        case OP_DELETE:
                CHECK(len == m->n || len == m->n - p->nidx,
                      "%s: length %" PRIu64 " after a kill during a delete of %zu of %zu",
                      what, len, p->nidx, m->n);
                if (len == m->n - p->nidx && p->nidx > 0) {
                        model_delete(m, p->idx, p->nidx);
                        (*applied)++;
                } else {
                        (*not_applied)++;
                }
                break;
        default:
                CHECK(len == m->n, "%s: length %" PRIu64 ", acknowledged %zu", what, len, m->n);
                break;
        }
        p->op = OP_IDLE;
        uint64_t checked = 0, bad = 0;
        uint64_t idx[1024];
        for (uint64_t first = 0; first < len && first < m->n; first += 1024) {
                size_t n = (size_t)(len - first < 1024 ? len - first : 1024);
                if (first + n > m->n)
                        n = (size_t)(m->n - first);
                for (size_t j = 0; j < n; j++)
                        idx[j] = first + j;
                zrc_batch b;
                r = zrc_dataset_read(d, idx, n, &b);
                CHECK(r == 0, "%s: read at %" PRIu64 ": %d %s", what, first, r,
                      zrc_last_error(zrc_dataset_conn(d))->message);
                if (r < 0)
                        return checked;
                for (size_t j = 0; j < n; j++) {
                        uint64_t id = m->ids[first + j];
                        uint64_t size = hd_record_size(id, REC_MIN, REC_MAX);
                        if (b.lengths[j] != size || b.shapes[j] != size ||
                            !hd_record_check(id, b.payloads[j], size)) {
                                if (bad++ < 5)
                                        fprintf(stderr, "%s: record %" PRIu64 " is not id %" PRIu64
                                                " (%" PRIu64 " bytes, expected %" PRIu64 ")\n",
                                                what, first + j, id, b.lengths[j], size);
                        }
                        checked++;
                }
        }
        CHECK(bad == 0, "%s: %" PRIu64 " records differ", what, bad);
        return checked;
}

static uint8_t *pack_records(uint64_t first_id, uint64_t n, uint64_t *sizes) {
        uint64_t total = 0;
        for (uint64_t i = 0; i < n; i++) {
                uint64_t s = hd_record_size(first_id + i, REC_MIN, REC_MAX);
                sizes[i] = 16 + s;
                total += 16 + s;
        }
        uint8_t *buf = malloc(total ? total : 1), *p = buf;
        for (uint64_t i = 0; i < n; i++) {
                uint64_t s = sizes[i] - 16;
                uint8_t *payload = malloc(s ? s : 1);
                hd_record_fill(first_id + i, payload, s);
                p += zrc_ragged_pack(p, &s, 1, 1, payload);
                free(payload);
        }
        return buf;
}

/* Runs requests until one fails (the daemon was killed). Returns the number of
 * acknowledged requests. */
static uint64_t writer(zrc_dataset *d, model *m, pending *p, uint64_t *rng, uint64_t *acked) {
        uint64_t n_ok = 0;
        for (;;) {
                uint64_t roll = tl_rand(rng) % 100;
                int del_pct = m->n > STORE_TARGET ? 70 : 20;
                int r;
                memset(p, 0, sizeof(*p));
                if (roll < 8) {
                        p->op = OP_COMPACT;
                        atomic_store(&current_op, OP_COMPACT);
                        r = zrc_dataset_compact(d, NULL);
                } else if (roll < 8 + (uint64_t)del_pct && m->n > DELETE_MAX) {
                        p->op = OP_DELETE;
                        p->nidx = 1 + tl_rand(rng) % DELETE_MAX;
                        for (size_t k = 0; k < p->nidx; k++) {
                                bool dup;
                                do {
                                        p->idx[k] = tl_rand(rng) % m->n;
                                        dup = false;
                                        for (size_t q = 0; q < k; q++)
                                                dup |= p->idx[q] == p->idx[k];
                                } while (dup);
                        }
                        atomic_store(&current_op, OP_DELETE);
                        r = zrc_dataset_delete(d, p->idx, p->nidx, NULL);
                } else {
                        p->op = OP_APPEND;
                        p->count = 1 + tl_rand(rng) % APPEND_MAX;
                        p->first_id = m->next_id;
                        m->next_id += p->count;
                        uint64_t sizes[APPEND_MAX];
                        uint8_t *buf = pack_records(p->first_id, p->count, sizes);
                        zrc_records rec = {.count = p->count, .data = buf, .sizes = sizes};
                        atomic_store(&current_op, OP_APPEND);
                        r = zrc_dataset_append(d, &rec, NULL);
                        free(buf);
                }
                atomic_store(&current_op, OP_IDLE);
                if (r < 0)
                        return n_ok;
                /* acknowledged: the model takes it */
                if (p->op == OP_APPEND)
                        for (uint64_t i = 0; i < p->count; i++)
                                model_push(m, p->first_id + i);
                else if (p->op == OP_DELETE)
                        model_delete(m, p->idx, p->nidx);
                acked[p->op]++;
                p->op = OP_IDLE;
                n_ok++;
        }
}

int main(void) {
        uint64_t trials = tl_env_u64("ZR_KILL_TRIALS", 60);
        uint64_t seed = tl_env_u64("ZR_KILL_SEED", 0x6b696c6c);
        uint64_t max_usec = tl_env_u64("ZR_KILL_MAX_USEC", 40000);
        uint64_t rng = seed;
        char root[256], paths[STORES][300];
        static const zrc_codec codecs[STORES] = {ZRC_CODEC_RAW, ZRC_CODEC_ZSTD,
                                                 ZRC_CODEC_ZSTD_DICT};
        model models[STORES] = {0};
        pending pend[STORES] = {0};
        uint64_t kills[OP_MAX] = {0}, acked[OP_MAX] = {0}, checked = 0, applied = 0,
                 not_applied = 0, sigkilled = 0, reruns = 0;
        tl_daemon d;
        zrc_conn *c = NULL;
        zrc_error e;
        int r;

        setvbuf(stdout, NULL, _IOLBF, 0);
        hd_tempdir(root, sizeof(root), "kill");
        hd_daemon_start(&d, NULL);
        r = zrc_connect(d.socket, &c, &e);
        CHECK(r == 0, "connect: %s", e.message);
        if (r < 0)
                return 1;

        /* A dictionary trained on records like those the writer appends. */
        uint64_t sizes[512];
        uint8_t *samples = NULL;
        {
                uint64_t total = 0;
                for (uint64_t i = 0; i < 512; i++)
                        total += sizes[i] = hd_record_size(1u << 30 | i, REC_MIN, REC_MAX);
                samples = malloc(total);
                uint8_t *p = samples;
                for (uint64_t i = 0; i < 512; i++) {
                        hd_record_fill(1u << 30 | i, p, sizes[i]);
                        p += sizes[i];
                }
        }
        void *dict = NULL;
        size_t dict_size = 0;
        r = zrc_train_dict(c, "small", samples, sizes, 512, &dict, &dict_size);
        CHECK(r == 0, "train_dict: %d %s", r, zrc_last_error(c)->message);
        free(samples);
        for (int s = 0; s < STORES; s++) {
                zrc_schema schema;
                zrc_dataset *ds;
                snprintf(paths[s], sizeof(paths[s]), "%s/%s", root, zrc_codec_name(codecs[s]));
                zrc_schema_ragged(&schema, "|u1", 1, codecs[s]);
                r = zrc_dataset_create(c, paths[s], &schema,
                                       codecs[s] == ZRC_CODEC_ZSTD_DICT ? dict : NULL,
                                       codecs[s] == ZRC_CODEC_ZSTD_DICT ? dict_size : 0, &ds);
                CHECK(r == 0, "create %s: %d %s", paths[s], r, zrc_last_error(c)->message);
                if (r < 0)
                        return 1;
                zrc_dataset_close(ds);
        }
        free(dict);
        c = zrc_disconnect(c);

        uint64_t t0 = hd_now_usec();
        for (uint64_t t = 0; t < trials; t++) {
                int s = (int)(t % STORES);
                zrc_dataset *ds;
                char what[64];
                snprintf(what, sizeof(what), "trial %" PRIu64 " (%s)", t, zrc_codec_name(codecs[s]));

                /* The daemon that is running now (fresh, or restarted after the
                 * last kill) is this trial's victim. */
                r = zrc_connect(d.socket, &c, &e);
                CHECK(r == 0, "%s: connect: %s", what, e.message);
                if (r < 0)
                        break;
                r = zrc_dataset_open(c, paths[s], ZRC_OPEN_WRITABLE, &ds);
                CHECK(r == 0, "%s: open: %d %s", what, r, zrc_last_error(c)->message);
                if (r < 0)
                        break;
                killer k = {.pid = d.pid, .delay_usec = tl_rand(&rng) % max_usec};
                pthread_create(&k.thread, NULL, killer_main, &k);
                writer(ds, &models[s], &pend[s], &rng, acked);
                pthread_join(k.thread, NULL);
                kills[k.op_at_kill]++;
                c = zrc_disconnect(c); /* frees ds too */
                bool by_kill = hd_daemon_kill(&d);
                CHECK(by_kill, "%s: the daemon died before the kill", what);
                sigkilled += by_kill;

                /* Restart: the store opens, is what was acknowledged, bit-exact;
                 * a compaction re-run finishes and changes no record. */
                hd_daemon_start(&d, NULL);
                r = zrc_connect(d.socket, &c, &e);
                CHECK(r == 0, "%s: reconnect: %s", what, e.message);
                if (r < 0)
                        break;
                r = zrc_dataset_open(c, paths[s], ZRC_OPEN_WRITABLE, &ds);
                CHECK(r == 0, "%s: reopen after the kill: %d %s", what, r,
                      zrc_last_error(c)->message);
                if (r < 0)
                        break;
                checked += verify_store(ds, &models[s], &pend[s], &applied, &not_applied, what);
                zrc_stats st;
                r = zrc_dataset_compact(ds, &st);
                CHECK(r == 0, "%s: compaction re-run: %d %s", what, r, zrc_last_error(c)->message);
                if (r == 0) {
                        reruns++;
                        CHECK(st.reclaimable == 0 && st.records == models[s].n,
                              "%s: after the re-run %" PRIu64 " records, %" PRIu64
                              " reclaimable bytes", what, st.records, st.reclaimable);
                }
                checked += verify_store(ds, &models[s], &pend[s], &applied, &not_applied, what);
                c = zrc_disconnect(c);
                if (hd_failures)
                        break;
        }
        uint64_t t1 = hd_now_usec();
        CHECK(hd_daemon_stop(&d), "the last daemon did not drain cleanly");

        printf("kill loop: %" PRIu64 " trials (seed %#" PRIx64 ", kill within %" PRIu64
               " us), %" PRIu64 " daemons SIGKILLed, %.1f s\n", trials, seed, max_usec,
               sigkilled, (double)(t1 - t0) / 1e6);
        printf("kills during:");
        for (int o = 0; o < OP_MAX; o++)
                printf(" %s %" PRIu64 "%s", op_name[o], kills[o], o + 1 < OP_MAX ? "," : "\n");
        printf("acknowledged: %" PRIu64 " appends, %" PRIu64 " deletes, %" PRIu64
               " compactions; in flight at the kill: %" PRIu64 " found applied, %" PRIu64
               " not\n", acked[OP_APPEND], acked[OP_DELETE], acked[OP_COMPACT], applied,
               not_applied);
        printf("records checked bit-exact: %" PRIu64 "; compaction re-runs finished: %" PRIu64
               "; final lengths raw %zu, zstd %zu, zstd_dict %zu\n", checked, reruns,
               models[0].n, models[1].n, models[2].n);
        printf("checks: %u, failed: %u\n", hd_checks, hd_failures);
        for (int s = 0; s < STORES; s++)
                free(models[s].ids);
        tl_rmtree(root);
        return hd_failures ? 1 : 0;
}
