/* soak.c: 64 clients stream loader batches from the real zrecordd and
 * reconnect, for a fixed time ($ZR_SOAK_SECONDS, CI default 60; the nightly
 * run sets it longer). Every batch is checked bit-exact by hash against its
 * (sampler, seed, step): the expected hash comes from this program's own
 * sampler (the engine's sampler module, proto/SAMPLERS.md) and the records'
 * generator, never from the daemon. Clients end their sessions in every way a
 * client does: LOADER_CLOSE then a new loader, a clean disconnect, or a
 * disconnect holding slots. Reported: sessions, loaders, batches, errors, p50
 * and p99 of the wait for a batch (zrc_loader_next()), the daemon's RSS and
 * descriptor count at the start, after the warm-up, at their highest and at
 * the end.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "harden.h"
#include "sampler/sampler.h"
#include "zrc.h"

#define CLIENTS_DEFAULT 64
#define N_RECORDS 8192
#define DENSE_BYTES 256  /* stream 0: "<u4" x 64, raw */
#define RAGGED_MIN 16    /* stream 1: "|u1" ragged, zstd, 16..600 bytes */
#define RAGGED_MAX 600
#define BATCH 32
/* What RSS may grow from the warmed-up figure to the end: allocator caches,
 * not a leak (a leaked ring or session is MiBs over a soak). */
#define RSS_SLACK_KIB 8192

static tl_daemon D;
static char dense_path[300], ragged_path[300];
static uint64_t deadline_usec;
static const char *const samplers[3] = {"sequential", "iid", "cyclic"};

typedef struct client {
        unsigned id;
        pthread_t thread;
        uint64_t sessions, loaders, batches, errors, bad, out_of_order;
        uint64_t *lat;  /* usec per batch */
        size_t nlat, cap;
} client;

static const hd_streams streams = {N_RECORDS, DENSE_BYTES, RAGGED_MIN, RAGGED_MAX};


static void *client_main(void *arg) {
        client *cl = arg;
        uint64_t rng = 0xc0ffee ^ (uint64_t)cl->id << 32;
        while (hd_now_usec() < deadline_usec) {
                zrc_conn *c = NULL;
                zrc_dataset *ds[2] = {NULL, NULL};
                zrc_error e;
                int r = zrc_connect(D.socket, &c, &e);
                if (r == 0)
                        r = zrc_dataset_open(c, dense_path, 0, &ds[0]);
                if (r == 0)
                        r = zrc_dataset_open(c, ragged_path, 0, &ds[1]);
                if (r < 0) {
                        fprintf(stderr, "client %u: session: %d %s\n", cl->id, r,
                                c ? zrc_last_error(c)->message : e.message);
                        cl->errors++;
                        zrc_disconnect(c);
                        break;
                }
                cl->sessions++;
                bool again = true;
                while (again && hd_now_usec() < deadline_usec) {
                        int sampler = (int)(tl_rand(&rng) % 3);
                        zrc_loader_options o = {
                                .sampler = samplers[sampler], .batch_size = BATCH,
                                .seed = 1 + tl_rand(&rng) % 4, /* few seeds: shared gathers */
                                .start_step = tl_rand(&rng) % 100000,
                                .prefetch = (uint32_t)(1 + tl_rand(&rng) % 8)};
                        zrc_loader *l = NULL;
                        r = zrc_loader_open(c, ds, 2, &o, &l);
                        if (r < 0) {
                                fprintf(stderr, "client %u: loader_open: %d %s\n", cl->id, r,
                                        zrc_last_error(c)->message);
                                cl->errors++;
                                break;
                        }
                        cl->loaders++;
                        uint64_t k = 5 + tl_rand(&rng) % 40, step = o.start_step;
                        for (uint64_t i = 0; i < k; i++, step++) {
                                zrc_loader_batch b;
                                uint64_t t0 = hd_now_usec();
                                r = zrc_loader_next(l, &b);
                                uint64_t t1 = hd_now_usec();
                                if (r < 0) {
                                        fprintf(stderr, "client %u: next: %d %s\n", cl->id, r,
                                                zrc_last_error(c)->message);
                                        cl->errors++;
                                        break;
                                }
                                tl_push_u64(&cl->lat, &cl->nlat, &cl->cap, t1 - t0);
                                cl->batches++;
                                cl->out_of_order += b.step != step;
                                if (hd_batch_hash(&streams, &b) !=
                                    hd_expected_hash(&streams, sampler, BATCH, o.seed, b.step)) {
                                        if (cl->bad++ < 3)
                                                fprintf(stderr, "client %u: %s seed %" PRIu64
                                                        " step %" PRIu64 ": wrong batch\n", cl->id,
                                                        samplers[sampler], o.seed, b.step);
                                }
                                zrc_loader_release(l, b.slot);
                        }
                        switch (tl_rand(&rng) % 4) {
                        case 0: /* leave holding the ring: the disconnect reclaims it */
                                again = false;
                                break;
                        case 1:
                                zrc_loader_close(l);
                                again = false;
                                break;
                        default: /* a new loader on the same connection */
                                zrc_loader_close(l);
                                break;
                        }
                        if (r < 0)
                                again = false;
                }
                zrc_disconnect(c);
        }
        return NULL;
}

static int cmp_u64(const void *a, const void *b) {
        uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
        return x < y ? -1 : x > y;
}

static void create_stores(zrc_conn *c) {
        zrc_schema s;
        zrc_dataset *d;
        uint64_t shape[1] = {DENSE_BYTES / 4};
        zrc_schema_dense(&s, "<u4", shape, 1, ZRC_CODEC_RAW);
        int r = zrc_dataset_create(c, dense_path, &s, NULL, 0, &d);
        CHECK(r == 0, "create dense: %d %s", r, zrc_last_error(c)->message);
        uint8_t *buf = malloc((size_t)N_RECORDS * DENSE_BYTES);
        for (uint64_t i = 0; i < N_RECORDS; i++)
                hd_record_fill(i, buf + i * DENSE_BYTES, DENSE_BYTES);
        r = zrc_dataset_append_dense(d, buf, N_RECORDS, NULL);
        CHECK(r == 0, "append dense: %d", r);
        free(buf);
        zrc_dataset_close(d);

        zrc_schema_ragged(&s, "|u1", 1, ZRC_CODEC_ZSTD);
        r = zrc_dataset_create(c, ragged_path, &s, NULL, 0, &d);
        CHECK(r == 0, "create ragged: %d %s", r, zrc_last_error(c)->message);
        r = hd_append_ragged(d, N_RECORDS, RAGGED_MIN, RAGGED_MAX);
        CHECK(r == 0, "append ragged: %d %s", r, zrc_last_error(c)->message);
        zrc_dataset_close(d);
}

int main(void) {
        uint64_t seconds = tl_env_u64("ZR_SOAK_SECONDS", 60);
        unsigned nclients = (unsigned)tl_env_u64("ZR_SOAK_CLIENTS", CLIENTS_DEFAULT);
        char root[256];
        zrc_conn *mon = NULL;
        zrc_error e;
        hd_proc idle, start, warm, end, peak = {0};

        setvbuf(stdout, NULL, _IOLBF, 0);
        hd_tempdir(root, sizeof(root), "soak");
        snprintf(dense_path, sizeof(dense_path), "%s/dense", root);
        snprintf(ragged_path, sizeof(ragged_path), "%s/ragged", root);
        /* no spare rings: the daemon's descriptors must come back to their
         * count before any store was open (spares: tests/daemon/test-spare.c) */
        hd_daemon_start(&D, (const char *const[]){"--max-clients=128", "--ring-spare=0", NULL});
        if (zrc_connect(D.socket, &mon, &e) < 0) {
                fprintf(stderr, "connect: %s\n", e.message);
                return 1;
        }
        hd_proc_read(D.pid, &idle); /* one client, no store open */
        create_stores(mon);
        hd_proc_read(D.pid, &start);

        client *cl = calloc(nclients, sizeof(*cl));
        uint64_t t0 = hd_now_usec();
        deadline_usec = t0 + seconds * 1000000u;
        for (unsigned i = 0; i < nclients; i++) {
                cl[i].id = i;
                pthread_create(&cl[i].thread, NULL, client_main, &cl[i]);
        }
        /* Sample the daemon once a second (the soak is a fixed time; this is a
         * clock, not a wait for an event). The warm-up figure is taken at 10%. */
        uint64_t warm_at = t0 + seconds * 100000u;
        bool have_warm = false;
        while (hd_now_usec() < deadline_usec) {
                struct timespec ts = {1, 0};
                nanosleep(&ts, NULL);
                hd_proc now;
                if (hd_proc_read(D.pid, &now) == 0) {
                        if (now.rss_kib > peak.rss_kib)
                                peak.rss_kib = now.rss_kib;
                        if (now.fds > peak.fds)
                                peak.fds = now.fds;
                        if (now.maps > peak.maps)
                                peak.maps = now.maps;
                }
                if (!have_warm && hd_now_usec() >= warm_at) {
                        warm = now;
                        have_warm = true;
                }
        }
        for (unsigned i = 0; i < nclients; i++)
                pthread_join(cl[i].thread, NULL);
        uint64_t t1 = hd_now_usec();
        if (!have_warm)
                hd_proc_read(D.pid, &warm);

        /* every client gone: wait (STATUS round trips, bounded) for the daemon
         * to have reclaimed them, then the end figures */
        uint64_t settle_deadline = hd_now_usec() + 20 * 1000000u;
        for (;;) {
                zrc_status *st = NULL;
                bool quiet = zrc_status_query(mon, &st) == 0 && st->clients == 1 &&
                             st->loaders == 0 && st->shm_bytes == 0;
                zrc_status_free(st);
                if ((quiet && hd_proc_read(D.pid, &end) == 0 && end.fds == idle.fds) ||
                    hd_now_usec() > settle_deadline)
                        break;
        }
        hd_proc_read(D.pid, &end);

        uint64_t sessions = 0, loaders = 0, batches = 0, errors = 0, bad = 0, ooo = 0, nlat = 0;
        for (unsigned i = 0; i < nclients; i++) {
                sessions += cl[i].sessions;
                loaders += cl[i].loaders;
                batches += cl[i].batches;
                errors += cl[i].errors;
                bad += cl[i].bad;
                ooo += cl[i].out_of_order;
                nlat += cl[i].nlat;
        }
        uint64_t *lat = malloc((nlat ? nlat : 1) * sizeof(*lat)), k = 0;
        for (unsigned i = 0; i < nclients; i++) {
                memcpy(lat + k, cl[i].lat, cl[i].nlat * sizeof(*lat));
                k += cl[i].nlat;
                free(cl[i].lat);
        }
        qsort(lat, nlat, sizeof(*lat), cmp_u64);
        uint64_t p50 = nlat ? lat[nlat / 2] : 0, p99 = nlat ? lat[nlat * 99 / 100] : 0,
                 pmax = nlat ? lat[nlat - 1] : 0;
        free(lat);
        free(cl);

        CHECK(errors == 0, "%" PRIu64 " errors", errors);
        CHECK(bad == 0, "%" PRIu64 " batches differ from their (seed, step)", bad);
        CHECK(ooo == 0, "%" PRIu64 " batches out of step order", ooo);
        CHECK(batches > 0, "no batch at all");
        CHECK(end.fds == idle.fds, "daemon descriptors: %d before any store was open, %d at "
              "the end", idle.fds, end.fds);
        CHECK(end.rss_kib <= warm.rss_kib + RSS_SLACK_KIB || !HD_CHECK_MEMORY,
              "daemon RSS: %" PRIu64 " KiB after the warm-up, %" PRIu64 " KiB at the end",
              warm.rss_kib, end.rss_kib);
        zrc_disconnect(mon);
        CHECK(hd_daemon_stop(&D), "the daemon did not drain cleanly");

        printf("soak: %u clients for %.1f s: %" PRIu64 " sessions (connections), %" PRIu64
               " loaders, %" PRIu64 " batches (%.0f/s), %" PRIu64 " errors, %" PRIu64
               " not bit-exact, %" PRIu64 " out of order\n", nclients, (double)(t1 - t0) / 1e6,
               sessions, loaders, batches, (double)batches * 1e6 / (double)(t1 - t0), errors, bad,
               ooo);
        printf("batch wait (zrc_loader_next): p50 %" PRIu64 " us, p99 %" PRIu64 " us, max %" PRIu64
               " us over %" PRIu64 " batches\n", p50, p99, pmax, nlat);
        printf("daemon RSS KiB: start %" PRIu64 ", after warm-up %" PRIu64 ", peak %" PRIu64
               ", end %" PRIu64 "; fds: idle %d, start %d, warm %d, peak %d, end %d; maps: "
               "idle %d, end %d\n", start.rss_kib, warm.rss_kib, peak.rss_kib, end.rss_kib,
               idle.fds, start.fds, warm.fds, peak.fds, end.fds, idle.maps, end.maps);
        printf("checks: %u, failed: %u\n", hd_checks, hd_failures);
        tl_rmtree(root);
        return hd_failures ? 1 : 0;
}
