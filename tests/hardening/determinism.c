/* determinism.c: the batch of a step is the same whatever happens around it.
 * For each sampler, the per-step hashes of a two-stream loader (a zstd dense
 * stream and a raw ragged one) must be identical across: an uninterrupted run
 * (prefetch 4); runs with prefetch 1 and prefetch 64; a run whose daemon is
 * SIGKILLed at a step and restarted, the loader reopened at that step; a run
 * whose client process is SIGKILLed (holding a slot) and resumed by another
 * process at the step after its last batch. All of them must also equal the
 * hash this program computes from its own sampler and record generator.
 * Steps per run: $ZR_DET_STEPS (default 150).
 */
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harden.h"
#include "sampler/sampler.h"
#include "zrc.h"

#define N_RECORDS 3000
#define DENSE_BYTES 128
#define RAGGED_MIN 16
#define RAGGED_MAX 400
#define BATCH 24
#define SEED 11

enum { RUN_PLAIN, RUN_PREFETCH1, RUN_PREFETCH64, RUN_DAEMON_KILL, RUN_CLIENT_CRASH, RUNS };
static const char *const run_name[RUNS] = {"uninterrupted", "prefetch 1", "prefetch 64",
                                           "daemon killed", "client crashed"};
static const char *const samplers[3] = {"sequential", "iid", "cyclic"};

static tl_daemon D;
static char dense_path[300], ragged_path[300];

static const hd_streams streams = {N_RECORDS, DENSE_BYTES, RAGGED_MIN, RAGGED_MAX};

typedef struct session {
        zrc_conn *c;
        zrc_dataset *ds[2];
        zrc_loader *l;
} session;

static int session_open(session *s, int sampler, uint64_t start, uint32_t prefetch) {
        zrc_error e;
        zrc_loader_options o = {.sampler = samplers[sampler], .batch_size = BATCH, .seed = SEED,
                                .start_step = start, .prefetch = prefetch,
                                .check_length = true, .length = N_RECORDS};
        memset(s, 0, sizeof(*s));
        int r = zrc_connect(D.socket, &s->c, &e);
        if (r == 0)
                r = zrc_dataset_open(s->c, dense_path, 0, &s->ds[0]);
        if (r == 0)
                r = zrc_dataset_open(s->c, ragged_path, 0, &s->ds[1]);
        if (r == 0)
                r = zrc_loader_open(s->c, s->ds, 2, &o, &s->l);
        CHECK(r == 0, "%s from step %" PRIu64 ": open: %d %s", samplers[sampler], start, r,
              s->c ? zrc_last_error(s->c)->message : e.message);
        return r;
}

static void session_close(session *s) {
        s->l = zrc_loader_close(s->l);
        s->c = zrc_disconnect(s->c);
}

/* Takes steps [from, to) into h[]; returns the steps taken. */
static uint64_t take(session *s, uint64_t from, uint64_t to, uint64_t *h) {
        uint64_t k = from;
        for (; k < to; k++) {
                zrc_loader_batch b;
                int r = zrc_loader_next(s->l, &b);
                CHECK(r == 0, "next at step %" PRIu64 ": %d", k, r);
                if (r < 0)
                        break;
                CHECK(b.step == k, "step %" PRIu64 " came as %" PRIu64, k, b.step);
                h[k] = hd_batch_hash(&streams, &b);
                zrc_loader_release(s->l, b.slot);
        }
        return k - from;
}

static void run_plain(int sampler, uint32_t prefetch, uint64_t steps, uint64_t *h) {
        session s;
        if (session_open(&s, sampler, 0, prefetch) == 0)
                take(&s, 0, steps, h);
        session_close(&s);
}

static void run_daemon_kill(int sampler, uint64_t steps, uint64_t at, uint64_t *h) {
        session s;
        if (session_open(&s, sampler, 0, 8) == 0)
                take(&s, 0, at, h);
        /* the daemon dies with 8 slots prefetched ahead of the client */
        CHECK(hd_daemon_kill(&D), "the daemon was not killed by SIGKILL");
        session_close(&s);
        hd_daemon_start(&D, NULL);
        if (session_open(&s, sampler, at, 8) == 0)
                take(&s, at, steps, h);
        session_close(&s);
}

static void run_client_crash(int sampler, uint64_t steps, uint64_t at, uint64_t *h) {
        int p[2];
        if (pipe(p) < 0)
                return;
        pid_t pid = fork();
        if (pid == 0) {
                close(p[0]);
                session s;
                if (session_open(&s, sampler, 0, 4) < 0)
                        _exit(2);
                for (uint64_t k = 0; k < at; k++) {
                        zrc_loader_batch b;
                        if (zrc_loader_next(s.l, &b) < 0 || b.step != k)
                                _exit(3);
                        uint64_t v = hd_batch_hash(&streams, &b);
                        if (write(p[1], &v, sizeof(v)) != sizeof(v))
                                _exit(4);
                        zrc_loader_release(s.l, b.slot);
                }
                zrc_loader_batch b;
                (void)zrc_loader_next(s.l, &b); /* held, never released, never reported */
                raise(SIGKILL);
                _exit(5);
        }
        close(p[1]);
        uint64_t got = 0, v;
        while (got < steps && read(p[0], &v, sizeof(v)) == sizeof(v))
                h[got++] = v;
        close(p[0]);
        int status = 0;
        waitpid(pid, &status, 0);
        CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL && got == at,
              "the crashing client: status %#x after %" PRIu64 " steps", status, got);
        session s;
        if (session_open(&s, sampler, got, 4) == 0)
                take(&s, got, steps, h);
        session_close(&s);
}

static void create_stores(void) {
        zrc_conn *c;
        zrc_error e;
        zrc_schema s;
        zrc_dataset *d;
        if (zrc_connect(D.socket, &c, &e) < 0) {
                fprintf(stderr, "connect: %s\n", e.message);
                exit(1);
        }
        uint64_t shape[1] = {DENSE_BYTES};
        zrc_schema_dense(&s, "|u1", shape, 1, ZRC_CODEC_ZSTD);
        int r = zrc_dataset_create(c, dense_path, &s, NULL, 0, &d);
        CHECK(r == 0, "create dense: %d", r);
        uint8_t *buf = malloc((size_t)N_RECORDS * DENSE_BYTES);
        for (uint64_t i = 0; i < N_RECORDS; i++)
                hd_record_fill(i, buf + i * DENSE_BYTES, DENSE_BYTES);
        CHECK(zrc_dataset_append_dense(d, buf, N_RECORDS, NULL) == 0, "append dense");
        free(buf);
        zrc_dataset_close(d);
        zrc_schema_ragged(&s, "|u1", 1, ZRC_CODEC_RAW);
        r = zrc_dataset_create(c, ragged_path, &s, NULL, 0, &d);
        CHECK(r == 0, "create ragged: %d", r);
        CHECK(hd_append_ragged(d, N_RECORDS, RAGGED_MIN, RAGGED_MAX) == 0, "append ragged");
        zrc_dataset_close(d);
        zrc_disconnect(c);
}

int main(void) {
        uint64_t steps = tl_env_u64("ZR_DET_STEPS", 150);
        char root[256];
        setvbuf(stdout, NULL, _IOLBF, 0);
        hd_tempdir(root, sizeof(root), "determinism");
        snprintf(dense_path, sizeof(dense_path), "%s/dense", root);
        snprintf(ragged_path, sizeof(ragged_path), "%s/ragged", root);
        hd_daemon_start(&D, NULL);
        create_stores();

        uint64_t *h[RUNS], *ref = calloc(steps, sizeof(uint64_t));
        for (int r = 0; r < RUNS; r++)
                h[r] = calloc(steps, sizeof(uint64_t));
        uint64_t total_equal = 0, total = 0;
        for (int sampler = 0; sampler < 3; sampler++) {
                for (int r = 0; r < RUNS; r++)
                        memset(h[r], 0, steps * sizeof(uint64_t));
                for (uint64_t k = 0; k < steps; k++)
                        ref[k] = hd_expected_hash(&streams, sampler, BATCH, SEED, k);
                run_plain(sampler, 4, steps, h[RUN_PLAIN]);
                run_plain(sampler, 1, steps, h[RUN_PREFETCH1]);
                run_plain(sampler, 64, steps, h[RUN_PREFETCH64]);
                run_daemon_kill(sampler, steps, steps / 3, h[RUN_DAEMON_KILL]);
                run_client_crash(sampler, steps, steps / 2 + 1, h[RUN_CLIENT_CRASH]);
                printf("%-10s %" PRIu64 " steps (daemon killed at %" PRIu64 ", client crashed "
                       "after %" PRIu64 "):", samplers[sampler], steps, steps / 3, steps / 2 + 1);
                for (int r = 0; r < RUNS; r++) {
                        uint64_t eq = 0, first_bad = UINT64_MAX;
                        for (uint64_t k = 0; k < steps; k++) {
                                bool same = h[r][k] == ref[k];
                                eq += same;
                                if (!same && first_bad == UINT64_MAX)
                                        first_bad = k;
                        }
                        total_equal += eq;
                        total += steps;
                        CHECK(eq == steps, "%s, %s: %" PRIu64 " of %" PRIu64 " steps equal the "
                              "expected hash, first difference at step %" PRIu64,
                              samplers[sampler], run_name[r], eq, steps, first_bad);
                        printf(" %s %" PRIu64 "/%" PRIu64 "%s", run_name[r], eq, steps,
                               r + 1 < RUNS ? "," : "\n");
                }
        }
        printf("determinism: %" PRIu64 " of %" PRIu64 " per-step hashes identical across the "
               "runs and equal to the independently computed batch\n", total_equal, total);
        CHECK(hd_daemon_stop(&D), "the daemon did not drain cleanly");
        for (int r = 0; r < RUNS; r++)
                free(h[r]);
        free(ref);
        printf("checks: %u, failed: %u\n", hd_checks, hd_failures);
        tl_rmtree(root);
        return hd_failures ? 1 : 0;
}
