/* hostile.c: clients that misbehave on purpose, against the real zrecordd,
 * while a well-behaved client streams loader batches and checks every record.
 *
 * Cases: writing to or truncating a ring or read buffer it was given (the
 * memfds are sealed and mapped read-only), descriptors of the wrong type or in
 * the wrong message, pipelining far past the limit while not reading, thousands
 * of connection attempts over the global limit, never releasing slots, holding
 * a connection half-open, forking with an open loader (parent and child both
 * use it, then one dies), and truncating the chunk and table files of a store
 * the daemon has open. After each case the daemon must still serve the checker
 * (which must make progress with bit-exact batches) and its descriptors,
 * mappings and RSS must come back to the baseline taken before the first case.
 *
 * This file holds the daemon, the checker, the baseline and main(); hostile.h
 * says where the cases are.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "hostile.h"

tl_daemon D;
static char root[256];
char hd_path[300], scratch_path[300], victim_path[300], victimz_path[300], rag_path[300];
zrc_conn *monitor;
hd_proc base;

/* ---- the well-behaved client ------------------------------------------- */

static struct {
        pthread_mutex_t lock;
        pthread_cond_t cond;
        uint64_t batches, records, bad, errors;
        bool stop;
        pthread_t thread;
} chk = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER};

bool dense_batch_ok(const void *data, const uint64_t *idx, uint64_t n) {
        const uint8_t *p = data;
        for (uint64_t j = 0; j < n; j++)
                if (!hd_record_check(idx[j], p + j * REC_BYTES, REC_BYTES))
                        return false;
        return true;
}

static void *checker_main(void *arg) {
        zrc_conn *c = NULL;
        zrc_dataset *d = NULL;
        zrc_loader *l = NULL;
        zrc_error e;
        zrc_loader_options o = {.sampler = "cyclic", .batch_size = 32, .seed = 3,
                                .prefetch = 4, .indices = true};
        int r = client_open(hd_path, &o, &c, &d, &l, &e);
        for (;;) {
                zrc_loader_batch b;
                pthread_mutex_lock(&chk.lock);
                bool stop = chk.stop;
                if (r < 0)
                        chk.errors++;
                pthread_mutex_unlock(&chk.lock);
                if (stop || r < 0)
                        break;
                r = zrc_loader_next(l, &b);
                if (r < 0)
                        continue;
                bool ok = dense_batch_ok(b.streams[0].data, b.indices, b.count);
                r = zrc_loader_release(l, b.slot);
                pthread_mutex_lock(&chk.lock);
                chk.batches++;
                chk.records += b.count;
                chk.bad += !ok;
                pthread_cond_broadcast(&chk.cond);
                pthread_mutex_unlock(&chk.lock);
        }
        if (r < 0)
                fprintf(stderr, "checker: %d %s\n", r, c ? zrc_last_error(c)->message : e.message);
        pthread_mutex_lock(&chk.lock);
        chk.stop = true;
        pthread_cond_broadcast(&chk.cond);
        pthread_mutex_unlock(&chk.lock);
        zrc_loader_close(l);
        zrc_disconnect(c);
        return NULL;
}

/* Waits until the checker has verified n more batches (an event, with a bound). */
bool checker_progress(uint64_t n) {
        struct timespec dl;
        clock_gettime(CLOCK_REALTIME, &dl);
        dl.tv_sec += 30;
        pthread_mutex_lock(&chk.lock);
        uint64_t want = chk.batches + n;
        int r = 0;
        while (chk.batches < want && !chk.stop && r == 0)
                r = pthread_cond_timedwait(&chk.cond, &chk.lock, &dl);
        bool ok = chk.batches >= want;
        pthread_mutex_unlock(&chk.lock);
        return ok;
}

uint64_t checker_batches(void) {
        pthread_mutex_lock(&chk.lock);
        uint64_t n = chk.batches;
        pthread_mutex_unlock(&chk.lock);
        return n;
}

/* ---- baseline ----------------------------------------------------------- */

uint64_t rss_ref_kib;

/* Waits (STATUS round trips, bounded) until only the monitor and the checker
 * are connected with the checker's one loader and the shared memory of the
 * baseline, and the descriptor count is back; then compares. */
uint64_t settle(const char *name, uint64_t shm0, uint64_t batches_before) {
        hd_proc now = {0};
        uint64_t deadline = hd_now_usec() + 20 * 1000000u, rounds = 0;
        bool settled = false;
        while (!settled && hd_now_usec() < deadline) {
                zrc_status *st = NULL;
                int r = zrc_status_query(monitor, &st);
                if (r < 0)
                        break;
                rounds++;
                settled = st->clients == 2 && st->loaders == 1 && st->shm_bytes == shm0 &&
                          hd_proc_read(D.pid, &now) == 0 && now.fds == base.fds &&
                          (now.maps <= base.maps || !HD_CHECK_MEMORY);
                zrc_status_free(st);
        }
        bool alive = hd_daemon_alive(&D);
        CHECK(alive, "%s: the daemon died", name);
        if (!alive) {
                printf("case %-16s daemon DEAD (wait status %#x)\n", name, hd_daemon_wait_status);
                return 0;
        }
        uint64_t ref = rss_ref_kib ? rss_ref_kib : base.rss_kib;
        hd_proc_read(D.pid, &now);
        bool progress = checker_progress(16);
        CHECK(progress, "%s: the checker made no progress", name);
        CHECK(now.fds == base.fds, "%s: %d descriptors, baseline %d", name, now.fds, base.fds);
        CHECK(now.maps <= base.maps || !HD_CHECK_MEMORY, "%s: %d mappings, baseline %d", name,
              now.maps, base.maps);
        CHECK(now.rss_kib <= ref + RSS_SLACK_KIB || !HD_CHECK_MEMORY,
              "%s: RSS %" PRIu64 " KiB, baseline %" PRIu64, name, now.rss_kib, ref);
        CHECK(shm0 == status_shm(), "%s: shared memory not given back", name);
        printf("case %-16s daemon alive; checker %" PRIu64 " batches meanwhile; fds %d (base %d), "
               "maps %d (base %d), RSS %" PRIu64 " KiB (base %" PRIu64 "; anon/file/shmem %" PRIu64
               "/%" PRIu64 "/%" PRIu64 "), settled after %" PRIu64 " STATUS\n", name,
               checker_batches() - batches_before, now.fds, base.fds, now.maps, base.maps,
               now.rss_kib, ref > UINT64_C(1) << 60 ? base.rss_kib : ref, now.anon_kib,
               now.file_kib, now.shmem_kib, rounds);
        return now.rss_kib;
}

uint64_t status_shm(void) {
        zrc_status *st = NULL;
        uint64_t v = 0;
        if (zrc_status_query(monitor, &st) == 0)
                v = st->shm_bytes;
        zrc_status_free(st);
        return v;
}

/* ---- raw helpers -------------------------------------------------------- */

int raw_loader_open(int fd, int64_t h, uint32_t prefetch, uint64_t id, int *ret_ring,
                    uint64_t *ret_ring_bytes, uint64_t *ret_slot_bytes) {
        zr_wire_writer w;
        tl_msg m;
        tl_begin(&w, "loader_open", id);
        tl_put_loader_open(&w, (uint64_t)h, "sequential", 32, 0, 0, prefetch);
        int r = tl_call(fd, &w, NULL, 0, &m);
        if (r == 0 && m.nfds == 1) {
                *ret_ring = m.fds[0];
                m.nfds = 0;
                *ret_ring_bytes = tl_u64(&m, "ring_bytes");
                *ret_slot_bytes = tl_u64(&m, "slot_bytes");
                r = (int)tl_u64(&m, "loader");
        } else if (r == 0) {
                r = -EBADF;
        } else if (r > 0) {
                r = -r;
        }
        tl_msg_free(&m);
        return r;
}

int client_open(const char *path, const zrc_loader_options *o, zrc_conn **c, zrc_dataset **d,
                zrc_loader **l, zrc_error *err) {
        int r = zrc_connect(D.socket, c, err);
        if (r == 0)
                r = zrc_dataset_open(*c, path, 0, d);
        if (r == 0 && o)
                r = zrc_loader_open(*c, d, 1, o, l);
        return r;
}

/* ---- setup -------------------------------------------------------------- */

static void create_dense(zrc_conn *c, const char *path, zrc_codec codec, uint64_t n,
                         uint64_t rec_bytes) {
        zrc_schema s;
        zrc_dataset *d;
        uint64_t shape[1] = {rec_bytes};
        zrc_schema_dense(&s, "|u1", shape, 1, codec);
        int r = zrc_dataset_create(c, path, &s, NULL, 0, &d);
        CHECK(r == 0, "create %s: %d %s", path, r, zrc_last_error(c)->message);
        if (r < 0)
                exit(1);
        uint8_t *buf = malloc(n * rec_bytes);
        for (uint64_t i = 0; i < n; i++)
                hd_record_fill(i, buf + i * rec_bytes, rec_bytes);
        r = zrc_dataset_append_dense(d, buf, n, NULL);
        CHECK(r == 0, "append %s: %d", path, r);
        free(buf);
        zrc_dataset_close(d);
}

int main(void) {
        char maxc[32], maxshm[32];
        setvbuf(stdout, NULL, _IOLBF, 0);
        signal(SIGPIPE, SIG_IGN);
        snprintf(maxc, sizeof(maxc), "--max-clients=%d", MAX_CLIENTS);
        hd_tempdir(root, sizeof(root), "hostile");
        snprintf(hd_path, sizeof(hd_path), "%s/hd", root);
        snprintf(scratch_path, sizeof(scratch_path), "%s/scratch", root);
        snprintf(victim_path, sizeof(victim_path), "%s/victim", root);
        snprintf(victimz_path, sizeof(victimz_path), "%s/victimz", root);
        snprintf(rag_path, sizeof(rag_path), "%s/rag", root);
        snprintf(maxshm, sizeof(maxshm), "--max-shm=%d", SHM_MAX);
        /* The stores are made by a first daemon, so that the one under test
         * starts with none open (a store just written closes after a sync on
         * the pool: a baseline taken meanwhile would count its descriptors). */
        hd_daemon_start(&D, NULL);
        zrc_error e;
        if (zrc_connect(D.socket, &monitor, &e) < 0) {
                fprintf(stderr, "connect: %s\n", e.message);
                return 1;
        }
        create_dense(monitor, hd_path, ZRC_CODEC_RAW, N_RECORDS, REC_BYTES);
        create_dense(monitor, scratch_path, ZRC_CODEC_RAW, 16, REC_BYTES);
        create_dense(monitor, victim_path, ZRC_CODEC_RAW, 256, 4096);
        create_dense(monitor, victimz_path, ZRC_CODEC_ZSTD, 256, 4096);
        {
                zrc_schema sc;
                zrc_dataset *d;
                zrc_schema_ragged(&sc, "|u1", 1, ZRC_CODEC_RAW);
                int r = zrc_dataset_create(monitor, rag_path, &sc, NULL, 0, &d);
                CHECK(r == 0, "create rag: %d", r);
                r = hd_append_ragged(d, RAG_RECORDS, 8, 8);
                CHECK(r == 0, "append rag: %d", r);
                zrc_dataset_close(d);
        }
        monitor = zrc_disconnect(monitor);
        CHECK(hd_daemon_stop(&D), "the daemon that made the stores did not drain cleanly");
        /* no spare rings: a spare is a descriptor and a mapping the daemon
         * keeps on purpose after a loader closes (tests/daemon/test-spare.c),
         * and this test holds the daemon to its baseline exactly */
        hd_daemon_start(&D, (const char *const[]){maxc, maxshm, "--ring-spare=0", NULL});
        if (zrc_connect(D.socket, &monitor, &e) < 0) {
                fprintf(stderr, "connect: %s\n", e.message);
                return 1;
        }

        pthread_create(&chk.thread, NULL, checker_main, NULL);
        CHECK(checker_progress(200), "the checker does not start");
        /* the baseline: the monitor and the checker's loader, warmed up */
        uint64_t shm0 = status_shm();
        zrc_status *st = NULL;
        for (;;) {
                zrc_status_query(monitor, &st);
                bool quiet = st->clients == 2;
                st = zrc_status_free(st);
                if (quiet)
                        break;
        }
        (void)shm0;
        hd_proc_read(D.pid, &base);
        printf("baseline: fds %d, maps %d, RSS %" PRIu64 " KiB%s\n", base.fds, base.maps,
               base.rss_kib, HD_CHECK_MEMORY ? "" : " (sanitizer build: RSS and mappings "
               "reported, not compared; LeakSanitizer checks the daemon's exit)");

        case_ring_write();
        case_wrong_fds();
        case_pipeline();
        case_big_replies();
        case_connections();
        case_never_release();
        case_shm_budget();
        case_half_open();
        case_fork();
        case_vanish();
        case_truncate();

        pthread_mutex_lock(&chk.lock);
        chk.stop = true;
        pthread_mutex_unlock(&chk.lock);
        pthread_join(chk.thread, NULL);
        CHECK(chk.bad == 0 && chk.errors == 0, "checker: %" PRIu64 " bad batches, %" PRIu64 " errors",
              chk.bad, chk.errors);
        printf("checker: %" PRIu64 " batches, %" PRIu64 " records verified bit-exact, %" PRIu64
               " bad, %" PRIu64 " errors\n", chk.batches, chk.records, chk.bad, chk.errors);
        monitor = zrc_disconnect(monitor);
        /* SIGTERM with a client that stopped reading (a loader's events and a
         * pipeline of replies unread): the drain closes it after its timeout
         * and the daemon exits 0 */
        int stuck = -1, ring = -1;
        uint64_t rb, sb, t_stop = 0;
        if (hd_daemon_alive(&D) && tl_connect_hello(D.socket, "hardening", &stuck) == 0) {
                int64_t h = hd_raw_open(stuck, hd_path, false, 2);
                raw_loader_open(stuck, h, 16, 3, &ring, &rb, &sb);
                zr_wire_writer w;
                zr_wire_writer_init(&w);
                fcntl(stuck, F_SETFL, fcntl(stuck, F_GETFL) | O_NONBLOCK);
                for (uint64_t i = 0; i < 100000; i++) {
                        const uint8_t *frame;
                        size_t size;
                        zr_wire_writer_reset(&w);
                        zr_wire_writer_begin_message(&w, "status", true, 10 + i);
                        zr_wire_writer_finish(&w, ZR_FRAME_MAX_FLOOR, &frame, &size, NULL);
                        if (send(stuck, frame, size, MSG_NOSIGNAL) != (ssize_t)size)
                                break;
                }
                zr_wire_writer_destroy(&w);
        }
        if (hd_daemon_alive(&D)) {
                uint64_t t0 = hd_now_usec();
                CHECK(hd_daemon_stop(&D), "the daemon did not drain cleanly");
                t_stop = hd_now_usec() - t0;
                printf("shutdown: SIGTERM with a client that stopped reading: exit 0 after %.1f s\n",
                       (double)t_stop / 1e6);
        } else {
                hd_daemon_kill(&D);
        }
        if (ring >= 0)
                close(ring);
        if (stuck >= 0)
                close(stuck);
        printf("checks: %u, failed: %u\n", hd_checks, hd_failures);
        tl_rmtree(root);
        return hd_failures ? 1 : 0;
}
