/* test-loader-prefetch.c: reading ahead (loader/prefetch.c). The stores' chunk
 * files are dropped from the page cache first (fdatasync, then
 * POSIX_FADV_DONTNEED: no root needed), so the engine must read them.
 *
 *   - batches read ahead are bit-exact to (seed, step), through io_uring and
 *     through the pread threads, raw and zstd, dense and ragged; steps of
 *     large records found mostly not resident are gathered with pread (cold),
 *     bit-exact too, and warm steps and small records are not;
 *   - the budget is never exceeded (one step may go over a budget smaller
 *     than a step: a group with nothing outstanding reads one);
 *   - a loader closed with reads in flight cancels them and waits for them;
 *   - a mutation quiesces the reads of its dataset before it starts, and the
 *     loader then ends STALE;
 *   - a failed read fails that step's batch with its error, and a loader
 *     opened after it at that step works;
 *   - the decoded-record cache, told the loaders' next records, gets at
 *     least 0.9 of the hits of the offline optimum (MIN, simulated here on
 *     the same trace) and more than LRU (simulated too).
 * Waiting is on the engine's eventfd and on condition variables, never a sleep.
 */
#include <dirent.h>
#include <errno.h>
#include <pthread.h>

#include "helpers.h"
#include "dataset/cache.h"
#include "io/direct.h"
#include "io/ioq.h"

#define NREC 2048
#define REC 4096
#define BATCH 64
#define STEPS 40

/* The I/O queue's fault hook: holds the first read in flight until released,
 * or fails the reads it is told to. */
typedef struct gate {
        pthread_mutex_t mu;
        pthread_cond_t cv;
        int hold;      /* hold the next read */
        int holding;   /* a read is held now */
        int released;
        unsigned reads;
} gate;

static int gate_fn(void *arg, const zr_io_range *read) {
        gate *g = arg;
        (void)read;
        pthread_mutex_lock(&g->mu);
        g->reads++;
        if (g->hold) {
                g->hold = 0;
                g->holding = 1;
                pthread_cond_broadcast(&g->cv);
                while (!g->released)
                        pthread_cond_wait(&g->cv, &g->mu);
                g->holding = 0;
        }
        pthread_mutex_unlock(&g->mu);
        return 0;
}

static void gate_init(gate *g) {
        memset(g, 0, sizeof(*g));
        pthread_mutex_init(&g->mu, NULL);
        pthread_cond_init(&g->cv, NULL);
}

static void gate_wait_holding(gate *g) {
        pthread_mutex_lock(&g->mu);
        while (!g->holding)
                pthread_cond_wait(&g->cv, &g->mu);
        pthread_mutex_unlock(&g->mu);
}

static void gate_release(gate *g) {
        pthread_mutex_lock(&g->mu);
        g->released = 1;
        pthread_cond_broadcast(&g->cv);
        pthread_mutex_unlock(&g->mu);
}

/* An engine reading ahead through a queue of `backend`; 0 if the backend
 * cannot run here (io_uring forbidden or not built). */
static int rig_io(rig *g, enum zr_ioq_backend backend, uint64_t budget, uint64_t cache,
                  zr_ioq_options *o, zr_ioq **q) {
        zr_error err = {0};
        o->backend = backend;
        if (zr_ioq_new(o, q, &err) < 0) {
                ck_assert_int_eq(backend, ZR_IOQ_URING);
                printf("prefetch: io_uring cannot run here (%s): its cases skipped\n",
                       err.message);
                return 0;
        }
        rig_new(g, 2, cache);
        zr_loader_engine_set_io(g->e, *q, budget);
        /* the page cache's path; the direct one has its own cases */
        zr_loader_engine_set_direct(g->e, ZR_DIRECT_OFF);
        return 1;
}

static void rig_io_free(rig *g, zr_ioq *q) {
        rig_free(g);
        zr_ioq_free(q);
}

static zr_loader *open_on(rig *g, zr_loader_stream *st, size_t n, const zr_loader_params *p) {
        zr_loader *l = NULL;
        zr_error err = {0};
        ck_assert_msg(zr_loader_new(g->e, st, n, p, NULL, &l, &err) == 0, "%s", err.message);
        return l;
}

static void bit_exact(enum zr_ioq_backend backend) {
        scratch sc;
        rig g;
        zr_ioq *q;
        zr_ioq_options o = {0};
        reg raw, zr;
        zr_loader_counters lc;
        zr_loader_engine_counters t;

        scratch_new(&sc);
        if (!rig_io(&g, backend, 64u << 20, 1u << 20, &o, &q)) {
                scratch_free(&sc);
                return;
        }
        reg_init(&raw, make_dense(&sc, "d", NREC, REC, ZR_CODEC_RAW, g.pool, 1));
        reg_init(&zr, make_ragged(&sc, "r", NREC, ZR_CODEC_ZSTD, g.pool, 3));
        evict(&sc, "d");
        evict(&sc, "r");
        zr_loader_stream st[2] = { reg_stream(&raw, "d"), reg_stream(&zr, "r") };
        zr_loader_params p = { .mode = ZR_SAMPLER_IID, .batch_size = BATCH, .seed = 5,
                               .world_size = 1, .prefetch = 2 };
        zr_sampler_params sp = { .mode = ZR_SAMPLER_IID, .n = NREC, .batch_size = BATCH,
                                 .seed = 5, .world_size = 1 };
        zr_loader *l = open_on(&g, st, 2, &p);
        for (uint64_t s = 0; s < STEPS; s++) {
                zr_loader_event ev;
                next_batch(&g, l, &ev);
                ck_assert_uint_eq(ev.step, s);
                check_dense(l, &ev, 0, &raw, REC, &sp);
                check_ragged(l, &ev, 1, 3);
                zr_loader_release(l, ev.ring, ev.slot, NULL);
        }
        zr_loader_counters_get(l, &lc);
        zr_loader_engine_counters_get(g.e, &t);
        printf("prefetch %s: %llu steps read ahead, %llu warm, %llu records, %llu bytes, "
               "%llu resident, depth %llu, %llu gathers waited\n",
               zr_ioq_backend_name(backend), (unsigned long long)t.prefetch_steps,
               (unsigned long long)t.prefetch_warm, (unsigned long long)t.prefetch_records,
               (unsigned long long)t.prefetch_read_bytes, (unsigned long long)t.prefetch_resident,
               (unsigned long long)t.prefetch_depth, (unsigned long long)lc.io_waits);
        ck_assert_uint_gt(t.prefetch_steps, STEPS / 2);
        /* small records: gathered from the mappings, cold or not */
        ck_assert_uint_eq(t.prefetch_cold, 0);
        ck_assert_uint_gt(t.prefetch_records, STEPS * BATCH / 2);
        ck_assert_uint_ge(t.prefetch_read_bytes, t.prefetch_records * 1024);
        ck_assert_uint_eq(t.prefetch_errors, 0);
        ck_assert_uint_le(t.prefetch_peak, t.prefetch_budget);
        ck_assert_uint_ge(t.prefetch_depth, 2);
        ck_assert_uint_gt(t.planned_steps, 0); /* the zstd stream's uses */
        zr_loader_free(l);
        zr_loader_engine_counters_get(g.e, &t);
        ck_assert_uint_eq(t.prefetch_bytes, 0);
        ck_assert_uint_eq(t.planned, 0); /* a group gone leaves no plan */
        rig_io_free(&g, q);
        reg_fini(&raw);
        reg_fini(&zr);
        scratch_free(&sc);
}

START_TEST(test_bit_exact_threads) {
        bit_exact(ZR_IOQ_THREADS);
}
END_TEST

START_TEST(test_bit_exact_uring) {
        bit_exact(ZR_IOQ_URING);
}
END_TEST

/* Takes `steps` iid batches of `batch` from a new dense raw store of n records
 * of `item` bytes, dropped from the page cache first if `evicted`, through the
 * pread threads, each batch checked against the records; returns the
 * engine's counters. */
static zr_loader_engine_counters dense_run_on(uint64_t n, uint64_t item, uint32_t batch,
                                              uint64_t seed, uint64_t steps, int evicted,
                                              uint64_t inline_max) {
        scratch sc;
        rig g;
        zr_ioq *q;
        zr_ioq_options o = {0};
        reg raw;
        zr_loader_engine_counters t;

        scratch_new(&sc);
        rig_io(&g, ZR_IOQ_THREADS, 64u << 20, 0, &o, &q);
        reg_init(&raw, make_dense(&sc, "d", n, item, ZR_CODEC_RAW, g.pool, seed));
        if (evicted)
                evict(&sc, "d");
        zr_loader_stream st = reg_stream(&raw, "d");
        zr_loader_params p = { .mode = ZR_SAMPLER_IID, .batch_size = batch, .seed = seed,
                               .world_size = 1, .prefetch = 2 };
        zr_sampler_params sp = { .mode = ZR_SAMPLER_IID, .n = n, .batch_size = batch,
                                 .seed = seed, .world_size = 1 };
        zr_loader_engine_set_inline(g.e, inline_max);
        zr_loader *l = open_on(&g, &st, 1, &p);
        uint32_t ring = 0;
        for (uint64_t s = 0; s < steps; s++) {
                zr_loader_event ev;
                next_batch(&g, l, &ev);
                ck_assert_uint_eq(ev.step, s);
                check_dense(l, &ev, 0, &raw, item, &sp);
                ck_assert_int_eq(zr_loader_release(l, ev.ring, ev.slot, NULL), 0);
                ring = ev.ring;
        }
        /* a release of a slot the client does not hold is refused, and fills
         * nothing, whichever thread fills */
        zr_loader_engine_counters_get(g.e, &t);
        zr_error err = {0};
        ck_assert_int_eq(zr_loader_release(l, ring, 99, &err), -ZR_E_PROTO);
        ck_assert_int_eq(zr_loader_release(l, ring + 1000, 0, &err), -ZR_E_PROTO);
        zr_loader_engine_counters before = t;
        zr_loader_engine_counters_get(g.e, &t);
        ck_assert_uint_eq(t.inline_fills, before.inline_fills);
        zr_loader_free(l);
        rig_io_free(&g, q);
        reg_fini(&raw);
        scratch_free(&sc);
        return t;
}

static zr_loader_engine_counters dense_run(uint64_t n, uint64_t item, uint32_t batch,
                                           uint64_t seed, uint64_t steps, int evicted) {
        return dense_run_on(n, item, batch, seed, steps, evicted, 0);
}

/* A warm store is not read: its steps are found resident; after 8 such steps
 * in a row (PF_WARM_RUN) only one step in 16 (PF_WARM_EVERY) is asked. */
START_TEST(test_warm_not_read) {
        zr_loader_engine_counters t = dense_run(NREC, REC, BATCH, 1, 200, 0);
        printf("warm: %llu of 200 steps asked, %llu inline fills\n",
               (unsigned long long)t.prefetch_warm, (unsigned long long)t.inline_fills);
        ck_assert_uint_eq(t.prefetch_steps, 0);
        ck_assert_uint_ge(t.prefetch_warm, 8);
        ck_assert_uint_le(t.prefetch_warm, 8 + 200 / 16 + 4);
        ck_assert_uint_eq(t.prefetch_records, 0);
        ck_assert_uint_eq(t.prefetch_cold, 0); /* warm steps are copied from the mappings */
        ck_assert_uint_eq(t.inline_fills, 0);  /* not asked for */
}
END_TEST

/* Small slots of a warm group are filled by the release itself
 * (zr_loader_engine_set_inline()): the same bytes (dense_run_on() checks each
 * batch against the records), and most fills done so once the group is
 * known warm. Larger slots never are. */
START_TEST(test_inline_fill) {
        zr_loader_engine_counters t = dense_run_on(NREC, REC, BATCH, 1, 200, 0, 256u << 10);
        printf("inline: %llu of 200 fills on the releasing thread\n",
               (unsigned long long)t.inline_fills);
        ck_assert_uint_gt(t.inline_fills, 100);
        ck_assert_uint_eq(t.prefetch_records, 0);
        t = dense_run_on(NREC, REC, BATCH, 1, 60, 0, BATCH * REC - 1);
        ck_assert_uint_eq(t.inline_fills, 0);
}
END_TEST

/* Steps of 64 KiB records found not resident are cold, and bit-exact
 * (dense_run() checks each batch); that their fills map nothing is seen
 * through the real daemon's mappings (test_read_ahead.py). */
START_TEST(test_cold_large_records) {
        zr_loader_engine_counters t = dense_run(256, 64 << 10, 8, 2, 24, 1);
        printf("prefetch, 64 KiB records: %llu steps read ahead, %llu cold, %llu warm\n",
               (unsigned long long)t.prefetch_steps, (unsigned long long)t.prefetch_cold,
               (unsigned long long)t.prefetch_warm);
        /* 8 draws of 256 records, all evicted: at least the first steps find
         * most of theirs not resident (each batch's check reads its records,
         * so later steps find some resident) */
        ck_assert_uint_ge(t.prefetch_cold, 1);
        ck_assert_uint_le(t.prefetch_cold, t.prefetch_steps);
}
END_TEST

/* 1 if the file system of scratch s takes direct reads. */
static int takes_direct(scratch *s) {
        int fd = openat(s->fd, "probe", O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
        int dfd = -1, r;
        zr_direct_align a;
        ck_assert_int_ge(fd, 0);
        ck_assert_int_eq(unlinkat(s->fd, "probe", 0), 0);
        r = zr_direct_open(fd, &dfd, &a, NULL);
        if (r == 0)
                close(dfd);
        close(fd);
        return r == 0;
}

/* A dense raw store of n records of `item` bytes, dropped from the page cache,
 * read with direct reads on (through `backend`) in `mode`, each batch checked
 * against the records; on /dev/shm if `memory`, in direct mode `dm` with the
 * engine's direct_min `min` (zr_loader_engine_set_direct_min()). Returns the engine's counters (in
 * *half, those after the first steps / 2 steps, if not NULL) and in *direct
 * whether the store's file system takes direct reads; 0 when the backend
 * cannot run here. */
static int direct_run_min(enum zr_ioq_backend backend, enum zr_sampler_mode mode, uint64_t n,
                          uint64_t item, uint32_t batch, uint64_t steps, int memory,
                          enum zr_direct_mode dm, uint64_t min, int *direct,
                          zr_loader_engine_counters *half, zr_loader_engine_counters *t) {
        scratch sc;
        rig g;
        zr_ioq *q;
        zr_ioq_options o = {0};
        reg raw;
        char *old = getenv("TMPDIR") ? strdup(getenv("TMPDIR")) : NULL;

        if (memory)
                setenv("TMPDIR", "/dev/shm", 1);
        scratch_new(&sc);
        if (old)
                setenv("TMPDIR", old, 1);
        else
                unsetenv("TMPDIR");
        free(old);
        if (!rig_io(&g, backend, 64u << 20, 0, &o, &q)) {
                scratch_free(&sc);
                return 0;
        }
        zr_loader_engine_set_direct(g.e, dm);
        zr_loader_engine_set_direct_min(g.e, min);
        *direct = takes_direct(&sc);
        reg_init(&raw, make_dense(&sc, "d", n, item, ZR_CODEC_RAW, g.pool, 7));
        evict(&sc, "d");
        zr_loader_stream st = reg_stream(&raw, "d");
        zr_loader_params p = { .mode = mode, .batch_size = batch, .seed = 3, .world_size = 1,
                               .prefetch = 3 };
        zr_sampler_params sp = { .mode = mode, .n = n, .batch_size = batch, .seed = 3,
                                 .world_size = 1 };
        zr_loader *l = open_on(&g, &st, 1, &p);
        for (uint64_t s = 0; s < steps; s++) {
                zr_loader_event ev;
                next_batch(&g, l, &ev);
                ck_assert_uint_eq(ev.step, s);
                check_dense(l, &ev, 0, &raw, item, &sp);
                zr_loader_release(l, ev.ring, ev.slot, NULL);
                if (half && s + 1 == steps / 2)
                        zr_loader_engine_counters_get(g.e, half);
        }
        zr_loader_engine_counters_get(g.e, t);
        printf("direct %s, %llu-byte records%s: %llu steps direct, %llu read so, %llu bytes, "
               "%llu copied, %llu fallbacks, %llu read ahead\n", zr_ioq_backend_name(backend),
               (unsigned long long)item, memory ? " on /dev/shm" : "",
               (unsigned long long)t->prefetch_direct, (unsigned long long)t->direct_steps,
               (unsigned long long)t->direct_bytes, (unsigned long long)t->direct_copied,
               (unsigned long long)t->direct_fallbacks, (unsigned long long)t->prefetch_steps);
        zr_loader_free(l);
        rig_io_free(&g, q);
        reg_fini(&raw);
        scratch_free(&sc);
        return 1;
}

/* The same, without a size rule (the engine's default direct_min, 0). */
static int direct_run(enum zr_ioq_backend backend, enum zr_sampler_mode mode, uint64_t n,
                      uint64_t item, uint32_t batch, uint64_t steps, int memory, int *direct,
                      zr_loader_engine_counters *t) {
        /* on a tmpfs every page stays resident: ask for every step direct */
        return direct_run_min(backend, mode, n, item, batch, steps, memory,
                              memory ? ZR_DIRECT_EVERY : ZR_DIRECT_AUTO, 0, direct, NULL, t);
}

/* Cold steps of aligned records read with O_DIRECT straight into the slots,
 * bit-exact, nothing copied, nothing read through the page cache; on a file
 * system without direct reads, the page cache's path, bit-exact too. */
static void direct_aligned(enum zr_ioq_backend backend) {
        zr_loader_engine_counters t;
        int direct;
        if (!direct_run(backend, ZR_SAMPLER_IID, 512, 16 << 10, 16, 12, 0, &direct, &t))
                return;
        if (!direct) {
                printf("direct: the scratch directory refuses O_DIRECT: checked the fallback\n");
                ck_assert_uint_eq(t.direct_steps, 0);
                return;
        }
        ck_assert_uint_ge(t.prefetch_direct, 1);
        ck_assert_uint_ge(t.direct_steps, 1);
        ck_assert_uint_eq(t.direct_fallbacks, 0);
        ck_assert_uint_eq(t.direct_copied, 0);
        /* aligned records: exactly their bytes, each read once */
        ck_assert_uint_eq(t.direct_bytes, t.direct_steps * 16 * (16 << 10));
        ck_assert_uint_eq(t.prefetch_read_bytes, 0);
}

/* AUTO with a size rule (the daemon's: half its memory): a store of more
 * data than direct_min is read directly as before ... */
START_TEST(test_direct_store_over_min) {
        zr_loader_engine_counters t;
        int direct;
        /* 512 records of 16 KiB: 8 MiB, over a 4 MiB rule */
        if (!direct_run_min(ZR_IOQ_THREADS, ZR_SAMPLER_IID, 512, 16 << 10, 16, 12, 0,
                            ZR_DIRECT_AUTO, 4u << 20, &direct, NULL, &t) || !direct)
                return;
        ck_assert_str_eq(zr_direct_mode_name((enum zr_direct_mode)t.direct_mode), "auto");
        ck_assert_uint_eq(t.direct_min, 4u << 20);
        ck_assert_uint_ge(t.prefetch_direct, 1);
        ck_assert_uint_ge(t.direct_steps, 1);
        ck_assert_uint_eq(t.prefetch_fits, 0);
}
END_TEST

/* ... and one that fits is read through the page cache: its cold steps are
 * counted as `fits`, none is read directly, and its second pass (in order,
 * two epochs of 32 steps) finds it resident, where read directly it stayed
 * cold for ever. */
START_TEST(test_direct_store_fits) {
        zr_loader_engine_counters h, t;
        int direct;
        if (!direct_run_min(ZR_IOQ_THREADS, ZR_SAMPLER_SEQUENTIAL, 512, 16 << 10, 16, 64, 0,
                            ZR_DIRECT_AUTO, 64u << 20, &direct, &h, &t) || !direct)
                return;
        ck_assert_uint_eq(t.prefetch_direct, 0);
        ck_assert_uint_eq(t.direct_steps, 0);
        ck_assert_uint_ge(h.prefetch_fits, 1);
        /* nothing of the second epoch was found cold */
        ck_assert_uint_eq(t.prefetch_fits, h.prefetch_fits);
        /* asked, and found warm (one step in 16 once 8 in a row were:
         * PF_WARM_RUN, maybe already in the first epoch's last steps) */
        ck_assert_uint_ge(t.prefetch_warm - h.prefetch_warm, 1);
        /* the same store with ALWAYS: its cold steps are read directly */
        if (!direct_run_min(ZR_IOQ_THREADS, ZR_SAMPLER_SEQUENTIAL, 512, 16 << 10, 16, 8, 0,
                            ZR_DIRECT_ALWAYS, 64u << 20, &direct, NULL, &t))
                return;
        ck_assert_uint_ge(t.prefetch_direct, 1);
        ck_assert_uint_ge(t.direct_steps, 1);
        ck_assert_uint_eq(t.prefetch_fits, 0);
}
END_TEST

START_TEST(test_direct_threads) {
        direct_aligned(ZR_IOQ_THREADS);
}
END_TEST

START_TEST(test_direct_uring) {
        direct_aligned(ZR_IOQ_URING);
}
END_TEST

/* Records not aligned to the blocks (4 KiB + 100 bytes), in order: a step's
 * neighbours share one read, bytes exact (a step's first record is not
 * aligned like its place in the slot, so it goes through the bounce buffer:
 * copied once), the last record of the store, at its tail chunk's end, read
 * with a short last block. */
START_TEST(test_direct_unaligned_in_order) {
        zr_loader_engine_counters t;
        int direct;
        const uint64_t item = 4096 + 100, n = 300;
        if (!direct_run(ZR_IOQ_THREADS, ZR_SAMPLER_SEQUENTIAL, n, item, 25, 12, 0, &direct, &t))
                return;
        if (!direct)
                return;
        ck_assert_uint_ge(t.direct_steps, 1);
        ck_assert_uint_eq(t.direct_fallbacks, 0);
        ck_assert_uint_gt(t.direct_copied, 0);
        ck_assert_uint_le(t.direct_copied, t.direct_steps * 25 * item);
        /* a step of 25 neighbours is one run: at most a block more per end */
        ck_assert_uint_le(t.direct_bytes, t.direct_steps * (25 * item + 2 * 4096));
}
END_TEST

/* A store on a file system that refuses direct reads (tmpfs), every step
 * asked for direct: the first falls back to the page cache, the stream stops
 * trying, every batch exact; none read directly. */
START_TEST(test_direct_refused_on_tmpfs) {
        zr_loader_engine_counters t;
        int direct;
        if (access("/dev/shm", W_OK) != 0)
                return;
        if (!direct_run(ZR_IOQ_THREADS, ZR_SAMPLER_IID, 256, 16 << 10, 16, 8, 1, &direct, &t))
                return;
        if (direct) {
                printf("direct: /dev/shm takes O_DIRECT here\n");
                return;
        }
        ck_assert_uint_eq(t.direct_steps, 0);
        ck_assert_uint_eq(t.direct_bytes, 0);
        ck_assert_uint_ge(t.prefetch_direct, 1);
        ck_assert_uint_ge(t.direct_fallbacks, 1);
        /* refused once, not asked again: later steps are not direct */
        ck_assert_uint_lt(t.prefetch_direct, 8);
}
END_TEST

START_TEST(test_budget_never_exceeded) {
        const uint64_t step_bytes = (uint64_t)BATCH * REC;
        /* two steps' worth, then less than one (a step at a time) */
        const uint64_t budgets[] = { 2 * step_bytes, step_bytes / 4 };
        for (size_t k = 0; k < 2; k++) {
                scratch sc;
                rig g;
                zr_ioq *q;
                zr_ioq_options o = {0};
                reg raw;
                zr_loader_engine_counters t;
                zr_sampler_params sp = { .mode = ZR_SAMPLER_CYCLIC, .n = NREC,
                                         .batch_size = BATCH, .seed = 9, .world_size = 1 };

                scratch_new(&sc);
                rig_io(&g, ZR_IOQ_THREADS, budgets[k], 0, &o, &q);
                reg_init(&raw, make_dense(&sc, "d", NREC, REC, ZR_CODEC_RAW, g.pool, 1));
                evict(&sc, "d");
                zr_loader_stream st = reg_stream(&raw, "d");
                zr_loader_params p = { .mode = ZR_SAMPLER_CYCLIC, .batch_size = BATCH,
                                       .seed = 9, .world_size = 1, .prefetch = 4 };
                zr_loader *l = open_on(&g, &st, 1, &p);
                for (uint64_t s = 0; s < NREC / BATCH; s++) {
                        zr_loader_event ev;
                        next_batch(&g, l, &ev);
                        check_dense(l, &ev, 0, &raw, REC, &sp);
                        zr_loader_release(l, ev.ring, ev.slot, NULL);
                        zr_loader_engine_counters_get(g.e, &t);
                        ck_assert_uint_le(t.prefetch_bytes,
                                          (budgets[k] > step_bytes ? budgets[k] : step_bytes));
                }
                zr_loader_engine_counters_get(g.e, &t);
                printf("prefetch budget %llu: peak %llu, %llu steps read ahead\n",
                       (unsigned long long)budgets[k], (unsigned long long)t.prefetch_peak,
                       (unsigned long long)t.prefetch_steps);
                ck_assert_uint_le(t.prefetch_peak,
                                  (budgets[k] > step_bytes ? budgets[k] : step_bytes));
                ck_assert_uint_gt(t.prefetch_steps, 0);
                zr_loader_free(l);
                rig_io_free(&g, q);
                reg_fini(&raw);
                scratch_free(&sc);
        }
}
END_TEST

typedef struct closer {
        zr_loader *l;
        gate *gt;
        int released_first; /* the read was released before the free returned */
        rig *g;
        reg *r;
        int quiesce;
} closer;

static void *close_main(void *arg) {
        closer *c = arg;
        if (c->quiesce) {
                zr_error err = {0};
                uint64_t del[3] = { 0, 1, 2 };
                zr_dataset_lock(c->r->ds, true);
                zr_loader_engine_quiesce(c->g->e, c->r->ds);
                pthread_mutex_lock(&c->gt->mu);
                c->released_first = c->gt->released;
                pthread_mutex_unlock(&c->gt->mu);
                ck_assert_msg(zr_dataset_delete(c->r->ds, del, 3, &err) == 0, "%s", err.message);
                zr_dataset_mutated(c->r->ds);
                zr_dataset_unlock(c->r->ds);
                zr_loader_engine_drop_dataset(c->g->e, c->r->id);
        } else {
                zr_loader_free(c->l);
                pthread_mutex_lock(&c->gt->mu);
                c->released_first = c->gt->released;
                pthread_mutex_unlock(&c->gt->mu);
        }
        return NULL;
}

/* A read is held in flight; a close (or a mutation's quiesce) on another
 * thread must cancel what has not started and wait for the held read. */
static void held_read(int quiesce) {
        scratch sc;
        rig g;
        zr_ioq *q;
        gate gt;
        reg raw;
        pthread_t th;
        zr_loader_engine_counters t;

        gate_init(&gt);
        gt.hold = 1;
        zr_ioq_options o = { .fault = gate_fn, .fault_arg = &gt, .threads = 1 };
        scratch_new(&sc);
        rig_io(&g, ZR_IOQ_THREADS, 64u << 20, 0, &o, &q);
        reg_init(&raw, make_dense(&sc, "d", NREC, REC, ZR_CODEC_RAW, g.pool, 1));
        evict(&sc, "d");
        zr_loader_stream st = reg_stream(&raw, "d");
        zr_loader_params p = { .mode = ZR_SAMPLER_IID, .batch_size = BATCH, .seed = 2,
                               .world_size = 1, .prefetch = 2 };
        zr_loader *l = open_on(&g, &st, 1, &p);
        gate_wait_holding(&gt);
        closer c = { .l = l, .gt = &gt, .g = &g, .r = &raw, .quiesce = quiesce };
        ck_assert_int_eq(pthread_create(&th, NULL, close_main, &c), 0);
        gate_release(&gt);
        ck_assert_int_eq(pthread_join(th, NULL), 0);
        ck_assert_msg(c.released_first, "returned while a read of the store was in flight");
        zr_loader_engine_counters_get(g.e, &t);
        ck_assert_uint_ge(t.prefetch_cancelled, 1);
        if (quiesce) {
                /* the loader ends at a step after the change, with STALE */
                zr_loader_event ev;
                for (;;) {
                        next_event(&g, l, &ev);
                        if (ev.kind == ZR_LOADER_EVENT_END)
                                break;
                        zr_loader_release(l, ev.ring, ev.slot, NULL);
                }
                ck_assert_int_eq(ev.code, ZR_E_STALE);
                zr_loader_free(l);
        }
        zr_loader_engine_counters_get(g.e, &t);
        ck_assert_uint_eq(t.prefetch_bytes, 0);
        rig_io_free(&g, q);
        reg_fini(&raw);
        scratch_free(&sc);
}

START_TEST(test_close_cancels) {
        held_read(0);
}
END_TEST

START_TEST(test_mutation_quiesces) {
        held_read(1);
}
END_TEST

START_TEST(test_read_error_fails_its_batch) {
        scratch sc;
        rig g;
        zr_ioq *q;
        zr_ioq_options o = { .fail_nth = 1, .fail_errno = EIO };
        reg raw;
        zr_loader_event ev;
        zr_loader_engine_counters t;
        zr_sampler_params sp = { .mode = ZR_SAMPLER_IID, .n = NREC, .batch_size = BATCH,
                                 .seed = 4, .world_size = 1 };

        scratch_new(&sc);
        rig_io(&g, ZR_IOQ_THREADS, 64u << 20, 0, &o, &q);
        reg_init(&raw, make_dense(&sc, "d", NREC, REC, ZR_CODEC_RAW, g.pool, 1));
        evict(&sc, "d");
        zr_loader_stream st = reg_stream(&raw, "d");
        zr_loader_params p = { .mode = ZR_SAMPLER_IID, .batch_size = BATCH, .seed = 4,
                               .world_size = 1, .prefetch = 2 };
        zr_loader *l = open_on(&g, &st, 1, &p);
        /* the first read of all is step 0's: it fails, and so does step 0 */
        next_event(&g, l, &ev);
        ck_assert_int_eq(ev.kind, ZR_LOADER_EVENT_END);
        ck_assert_int_eq(ev.code, EIO);
        ck_assert_uint_eq(ev.step, 0);
        ck_assert_ptr_nonnull(strstr(ev.message, "reading step 0 ahead"));
        zr_loader_free(l);
        zr_loader_engine_counters_get(g.e, &t);
        ck_assert_uint_eq(t.prefetch_errors, 1);
        /* a loader opened at that step after it reads it bit-exact */
        l = open_on(&g, &st, 1, &p);
        for (uint64_t s = 0; s < 8; s++) {
                next_batch(&g, l, &ev);
                ck_assert_uint_eq(ev.step, s);
                check_dense(l, &ev, 0, &raw, REC, &sp);
                zr_loader_release(l, ev.ring, ev.slot, NULL);
        }
        zr_loader_free(l);
        rig_io_free(&g, q);
        reg_fini(&raw);
        scratch_free(&sc);
}
END_TEST

/* ---- the cache against MIN and LRU on the loader's trace ------------------ */

/* Hits of the offline optimum with room for `cap` records on trace[0..n)
 * (keys < nkeys): a miss with the cache full drops the record used farthest
 * in the future, the new one included. A gather looks a batch up before it
 * inserts, so a record twice in one batch is a miss both times: the same here
 * (accesses of one batch see the cache as it was before the batch). */
static uint64_t sim_min(const uint64_t *trace, size_t n, size_t batch, size_t cap,
                        size_t nkeys) {
        size_t *next = malloc(n * sizeof(*next)), *last = malloc(nkeys * sizeof(*last));
        size_t *in = malloc(cap * sizeof(*in)), nin = 0; /* positions of the cached uses */
        uint8_t *cached = calloc(nkeys, 1);
        uint64_t hits = 0;

        for (size_t k = 0; k < nkeys; k++)
                last[k] = n;
        for (size_t t = n; t-- > 0;) {
                next[t] = last[trace[t]];
                last[trace[t]] = t;
        }
        for (size_t b = 0; b < n; b += batch) {
                size_t e = b + batch < n ? b + batch : n;
                uint8_t *hit = calloc(e - b, 1);
                for (size_t t = b; t < e; t++)
                        hit[t - b] = cached[trace[t]];
                for (size_t t = b; t < e; t++) {
                        uint64_t key = trace[t];
                        if (hit[t - b]) {
                                hits++;
                                for (size_t j = 0; j < nin; j++)
                                        if (trace[in[j]] == key)
                                                in[j] = t; /* its next use moves on */
                                continue;
                        }
                        if (cached[key])
                                continue; /* twice in this batch: inserted already */
                        if (nin < cap) {
                                in[nin++] = t;
                                cached[key] = 1;
                                continue;
                        }
                        size_t far = 0;
                        for (size_t j = 1; j < nin; j++)
                                if (next[in[j]] > next[in[far]])
                                        far = j;
                        if (next[in[far]] > next[t]) {
                                cached[trace[in[far]]] = 0;
                                in[far] = t;
                                cached[key] = 1;
                        }
                }
                free(hit);
        }
        free(next);
        free(last);
        free(in);
        free(cached);
        return hits;
}

static uint64_t sim_lru(const uint64_t *trace, size_t n, size_t batch, size_t cap,
                        size_t rec) {
        zr_rcache *c;
        uint8_t buf[REC] = {0};
        uint64_t hits = 0;
        zr_rcache_key *keys = malloc(batch * sizeof(*keys));
        zr_rcache_entry **en = malloc(batch * sizeof(*en));

        ck_assert_int_eq(zr_rcache_new(cap * (rec + ZR_RCACHE_ENTRY_OVERHEAD), &c), 0);
        for (size_t b = 0; b < n; b += batch) {
                for (size_t i = 0; i < batch; i++)
                        keys[i] = (zr_rcache_key){ 1, 0, trace[b + i] };
                hits += zr_rcache_lookup(c, keys, batch, en);
                for (size_t i = 0; i < batch; i++) {
                        if (en[i])
                                zr_rcache_unpin(c, en[i]);
                        else
                                zr_rcache_insert(c, &keys[i], buf, rec);
                }
        }
        zr_rcache_free(c);
        free(keys);
        free(en);
        return hits;
}

/* An engine whose cache has room for `cap` records of `rec` bytes, a zstd
 * store "z" of n such records, and one iid loader over it (batch b, seed,
 * prefetch 2): the cache tests' set-up. */
typedef struct cache_rig {
        scratch sc;
        rig g;
        reg z;
        zr_loader *l;
} cache_rig;

static void cache_rig_new(cache_rig *c, uint64_t n, uint64_t rec, uint64_t b, uint64_t cap,
                          uint64_t seed) {
        scratch_new(&c->sc);
        rig_new(&c->g, 2, cap * (rec + ZR_RCACHE_ENTRY_OVERHEAD));
        reg_init(&c->z, make_dense(&c->sc, "z", n, rec, ZR_CODEC_ZSTD, c->g.pool, 7));
        zr_loader_stream st = reg_stream(&c->z, "z");
        zr_loader_params p = { .mode = ZR_SAMPLER_IID, .batch_size = b, .seed = seed,
                               .world_size = 1, .prefetch = 2 };
        c->l = open_on(&c->g, &st, 1, &p);
}

static void cache_rig_free(cache_rig *c) {
        zr_loader_free(c->l);
        rig_free(&c->g);
        reg_fini(&c->z);
        scratch_free(&c->sc);
}

START_TEST(test_cache_near_min) {
        enum { N = 4000, R = 256, B = 64, CAP = 400, STEPS_C = 300 };
        cache_rig c;
        zr_loader_engine_counters t;
        uint64_t *trace = malloc((size_t)STEPS_C * B * sizeof(*trace));
        zr_sampler_params sp = { .mode = ZR_SAMPLER_IID, .n = N, .batch_size = B, .seed = 21,
                                 .world_size = 1 };

        cache_rig_new(&c, N, R, B, CAP, 21);
        for (uint64_t s = 0; s < STEPS_C; s++) {
                zr_loader_event ev;
                next_batch(&c.g, c.l, &ev);
                check_dense(c.l, &ev, 0, &c.z, R, &sp);
                memcpy(trace + s * B, ev.indices, B * sizeof(*trace));
                zr_loader_release(c.l, ev.ring, ev.slot, NULL);
        }
        zr_loader_counters lc;
        zr_loader_counters_get(c.l, &lc);
        zr_loader_engine_counters_get(c.g.e, &t);
        /* the fills ran a few steps past the last batch taken: count only the
         * steps the trace holds, from the loader's own hits of those steps */
        uint64_t mn = sim_min(trace, (size_t)STEPS_C * B, B, CAP, N);
        uint64_t lru = sim_lru(trace, (size_t)STEPS_C * B, B, CAP, R);
        uint64_t got = lc.hits;
        printf("cache over %d steps of %d from %d records, room for %d: zrecord %llu hits "
               "(%llu lookups over %llu gathers), MIN %llu, LRU %llu; %llu bypassed\n",
               STEPS_C, B, N, CAP, (unsigned long long)got,
               (unsigned long long)(lc.hits + lc.misses), (unsigned long long)lc.gathers,
               (unsigned long long)mn, (unsigned long long)lru,
               (unsigned long long)t.bypassed);
        /* the fills may run up to the ring's slots past the trace: their hits
         * are at most those steps' lookups */
        uint64_t extra = (lc.gathers - STEPS_C) * B;
        ck_assert_msg(got + extra >= mn * 9 / 10, "zrecord %llu (+%llu past the trace), MIN %llu, "
                      "LRU %llu", (unsigned long long)got, (unsigned long long)extra,
                      (unsigned long long)mn, (unsigned long long)lru);
        ck_assert_uint_gt(got, lru);
        cache_rig_free(&c);
        free(trace);
}
END_TEST

/* Planning keeps pace with the fills instead of running ahead of them: with
 * room for 8,000 records the horizon is 250 steps, and planning them all
 * before the first fill made a new loader's first batch wait 100-200 ms. At
 * any moment the group has planned at most 4 steps per step it gathered
 * (prefetch.c's PF_PLAN_PER_FILL), the first batch included. */
START_TEST(test_planning_paced_by_fills) {
        enum { N = 20000, R = 64, B = 64, CAP = 8000, PER_FILL = 4 };
        cache_rig c;
        zr_loader_engine_counters t;

        cache_rig_new(&c, N, R, B, CAP, 5);
        uint64_t most = 0;
        for (int s = 0; s < 40; s++) {
                zr_loader_event ev;
                next_batch(&c.g, c.l, &ev);
                /* planned first, then gathers: gathers only grow meanwhile */
                zr_loader_engine_counters_get(c.g.e, &t);
                uint64_t planned = t.planned;
                zr_loader_engine_counters_get(c.g.e, &t);
                ck_assert_msg(planned <= (uint64_t)PER_FILL * t.gathers * B,
                              "step %d: %llu uses planned after %llu gathers", s,
                              (unsigned long long)planned, (unsigned long long)t.gathers);
                most = planned > most ? planned : most;
                zr_loader_release(c.l, ev.ring, ev.slot, NULL);
        }
        ck_assert_msg(most > 0, "nothing was planned");
        cache_rig_free(&c);
}
END_TEST

int main(void) {
        Suite *s = suite_create("loader-prefetch");
        TL_TCASE(s, "direct", 120, test_direct_threads, test_direct_uring,
                 test_direct_unaligned_in_order, test_direct_refused_on_tmpfs,
                 test_direct_store_over_min, test_direct_store_fits);
        TL_TCASE(s, "prefetch", 120, test_bit_exact_threads, test_bit_exact_uring,
                 test_warm_not_read, test_inline_fill, test_cold_large_records, test_budget_never_exceeded,
                 test_close_cancels,
                 test_mutation_quiesces, test_read_error_fails_its_batch, test_cache_near_min,
                 test_planning_paced_by_fills);
        return tl_run_suite(s);
}
