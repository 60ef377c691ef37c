/* hostile-flow.c: the hostile cases of flow: pipelining past the limit while
 * not reading, huge replies, connections over the limit, a client taking its
 * whole shared-memory budget, slots never released, cut and held frames
 * (hostile.h). */
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

/* Whether the daemon makes room on the socket within 200 ms. A daemon that
 * stopped reading never does: this bound is how a non-reading client finds
 * out that flow control has set in, not a wait for something expected. */
static bool wait_writable(int fd) {
        struct pollfd pf = {.fd = fd, .events = POLLOUT};
        return poll(&pf, 1, 200) > 0;
}

typedef struct pipe_reader {
        int fd;
        uint64_t first_id, total, got, in_order, ok;
} pipe_reader;

static void *pipe_reader_main(void *arg) {
        pipe_reader *p = arg;
        while (p->got < p->total) {
                tl_msg m;
                if (tl_recv(p->fd, &m, TL_TIMEOUT_MS) < 0)
                        break;
                uint64_t id = tl_u64(&m, "id");
                p->in_order += id == p->first_id + p->got;
                p->ok += tl_code(&m) == 0;
                p->got++;
                tl_msg_free(&m);
        }
        return NULL;
}

void case_pipeline(void) {
        const uint64_t total = tl_env_u64("ZR_HOSTILE_PIPELINE", 20000);
        uint64_t b0 = checker_batches(), shm0 = status_shm();
        int fd;
        CHECK(tl_connect_hello(D.socket, "hardening", &fd) == 0, "pipeline: hello");
        int64_t h = hd_raw_open(fd, hd_path, false, 2);
        /* Phase 1: write requests without reading a reply until the socket is full. */
        int fl = fcntl(fd, F_GETFL);
        fcntl(fd, F_SETFL, fl | O_NONBLOCK);
        zr_wire_writer w;
        zr_wire_writer_init(&w);
        uint64_t sent = 0, accepted_bytes = 0;
        const uint8_t *frame = NULL;
        size_t size = 0, off = 0;
        bool full = false;
        while (sent < total && !full) {
                if (off == 0) {
                        zr_wire_writer_reset(&w);
                        zr_wire_writer_begin_message(&w, "info", true, 1000 + sent);
                        zr_wire_put_u64(&w, "handle", (uint64_t)h);
                        zr_wire_writer_finish(&w, ZR_FRAME_MAX_FLOOR, &frame, &size, NULL);
                }
                ssize_t k = send(fd, frame + off, size - off, MSG_NOSIGNAL);
                if (k < 0 && errno == EAGAIN && wait_writable(fd))
                        continue;
                if (k < 0) {
                        full = errno == EAGAIN;
                        CHECK(full, "pipeline: send: %s", strerror(errno));
                        break;
                }
                accepted_bytes += (uint64_t)k;
                off += (size_t)k;
                if (off == size) {
                        off = 0;
                        sent++;
                }
        }
        hd_proc during;
        hd_proc_read(D.pid, &during);
        CHECK(hd_daemon_alive(&D), "pipeline: daemon died");
        /* Phase 2: read every reply while the rest goes out. */
        fcntl(fd, F_SETFL, fl);
        pipe_reader pr = {.fd = fd, .first_id = 1000, .total = total};
        pthread_t t;
        pthread_create(&t, NULL, pipe_reader_main, &pr);
        if (off > 0)
                CHECK(tl_send_raw(fd, frame + off, size - off, NULL, 0) == 0, "pipeline: rest");
        if (off > 0)
                sent++;
        for (; sent < total; sent++) {
                zr_wire_writer_reset(&w);
                zr_wire_writer_begin_message(&w, "info", true, 1000 + sent);
                zr_wire_put_u64(&w, "handle", (uint64_t)h);
                zr_wire_writer_finish(&w, ZR_FRAME_MAX_FLOOR, &frame, &size, NULL);
                if (tl_send_raw(fd, frame, size, NULL, 0) < 0)
                        break;
        }
        pthread_join(t, NULL);
        zr_wire_writer_destroy(&w);
        CHECK(pr.got == total && pr.in_order == total && pr.ok == total,
              "pipeline: %" PRIu64 " replies of %" PRIu64 ", %" PRIu64 " in order, %" PRIu64 " ok",
              pr.got, total, pr.in_order, pr.ok);
        close(fd);
        printf("case pipeline: %" PRIu64 " INFO requests pipelined (limit %d); %" PRIu64
               " bytes accepted before the daemon stopped reading; daemon RSS meanwhile %"
               PRIu64 " KiB (base %" PRIu64 "); %" PRIu64 " replies, all in order and ok: %s\n",
               total, ZR_PIPELINE_MAX, accepted_bytes, during.rss_kib, base.rss_kib, pr.got,
               pr.in_order == total && pr.ok == total ? "yes" : "no");
        settle("pipeline", shm0, b0);
}

/* Pipelined READs whose replies are near frame_max (ragged: 24 bytes of
 * offsets, lengths and shapes per record) from a client that does not read:
 * the daemon must stop reading it and hold a bounded amount of output. */
/* READ of the records idx[0..RAG_RECORDS) of handle h into buffer bh, request
 * `id`, as a frame in *ret (the writer's, until it is reset). */
static void read_frame(zr_wire_writer *w, uint64_t id, int64_t h, uint64_t bh, const uint64_t *idx,
                       const uint8_t **ret, size_t *ret_size) {
        zr_wire_writer_reset(w);
        zr_wire_writer_begin_message(w, "read", true, id);
        zr_wire_put_u64(w, "handle", (uint64_t)h);
        zr_wire_put_u64(w, "buffer", bh);
        zr_wire_put_u64s(w, "indices", idx, RAG_RECORDS);
        zr_wire_writer_finish(w, ZR_FRAME_MAX_DEFAULT, ret, ret_size, NULL);
}

void case_big_replies(void) {
        const uint64_t total = 200;
        uint64_t b0 = checker_batches(), shm0 = status_shm();
        int fd;
        tl_msg m;
        CHECK(tl_connect_hello(D.socket, "hardening", &fd) == 0, "big-replies: hello");
        int64_t h = hd_raw_open(fd, rag_path, false, 2);
        CHECK(h > 0, "big-replies: open: %" PRId64, h);
        zr_wire_writer w;
        tl_begin(&w, "buffer_open", 3);
        zr_wire_put_u64(&w, "bytes", 1 << 20);
        int r = tl_call(fd, &w, NULL, 0, &m);
        uint64_t bh = tl_u64(&m, "buffer");
        CHECK(r == 0, "big-replies: buffer_open: %d", r);
        tl_msg_free(&m);
        uint64_t *idx = malloc(RAG_RECORDS * sizeof(*idx));
        for (uint64_t i = 0; i < RAG_RECORDS; i++)
                idx[i] = (i * 7919) % RAG_RECORDS;
        int fl = fcntl(fd, F_GETFL);
        fcntl(fd, F_SETFL, fl | O_NONBLOCK);
        zr_wire_writer_init(&w);
        const uint8_t *frame = NULL;
        size_t size = 0, off = 0;
        uint64_t sent = 0;
        hd_proc during = {0}, now;
        for (; sent < total;) {
                if (off == 0)
                        read_frame(&w, 1000 + sent, h, bh, idx, &frame, &size);
                ssize_t k = send(fd, frame + off, size - off, MSG_NOSIGNAL);
                if (k < 0 && errno == EAGAIN && wait_writable(fd))
                        continue;
                if (k < 0)
                        break;
                off += (size_t)k;
                if (off == size) {
                        off = 0;
                        sent++;
                }
        }
        /* The daemon executes what it has queued and stops: wait for its
         * output to stop growing (STATUS round trips on another connection). */
        for (int i = 0; i < 200; i++) {
                zrc_status *st = NULL;
                zrc_status_query(monitor, &st);
                zrc_status_free(st);
                if (hd_proc_read(D.pid, &now) == 0 && now.rss_kib > during.rss_kib)
                        during = now;
        }
        uint64_t before_reading = sent;
        fcntl(fd, F_SETFL, fl);
        pipe_reader pr = {.fd = fd, .first_id = 1000, .total = total};
        pthread_t t;
        pthread_create(&t, NULL, pipe_reader_main, &pr);
        if (off > 0) {
                tl_send_raw(fd, frame + off, size - off, NULL, 0);
                sent++;
        }
        for (; sent < total; sent++) {
                read_frame(&w, 1000 + sent, h, bh, idx, &frame, &size);
                if (tl_send_raw(fd, frame, size, NULL, 0) < 0)
                        break;
        }
        pthread_join(t, NULL);
        zr_wire_writer_destroy(&w);
        free(idx);
        close(fd);
        /* the documented bound: 4 MiB of replies plus what was queued */
        CHECK(during.rss_kib <= base.rss_kib + 96 * 1024 || !HD_CHECK_MEMORY,
              "big-replies: RSS %" PRIu64 " KiB", during.rss_kib);
        CHECK(pr.got == total && pr.in_order == total && pr.ok == total,
              "big-replies: %" PRIu64 " replies of %" PRIu64 ", %" PRIu64 " in order, %" PRIu64
              " ok", pr.got, total, pr.in_order, pr.ok);
        printf("case big-replies: %" PRIu64 " READs of %d ragged records (~%d KB replies) "
               "pipelined; %" PRIu64 " sent before the daemon stopped reading; daemon RSS at most "
               "%" PRIu64 " KiB meanwhile (base %" PRIu64 "); %" PRIu64 " replies in order and ok\n",
               total, RAG_RECORDS, RAG_RECORDS * 24 / 1000, before_reading, during.rss_kib,
               base.rss_kib, pr.ok);
        settle("big-replies", shm0, b0);
}

void case_connections(void) {
        const unsigned attempts = (unsigned)tl_env_u64("ZR_HOSTILE_CONNECTS", 3000);
        uint64_t b0 = checker_batches(), shm0 = status_shm();
        int held[MAX_CLIENTS];
        unsigned nheld = 0, refused = 0, other = 0;
        /* fill up to the limit (the monitor and the checker hold two) */
        for (unsigned i = 0; i < MAX_CLIENTS - 2; i++) {
                int fd;
                if (tl_connect_hello(D.socket, "hardening", &fd) == 0)
                        held[nheld++] = fd;
        }
        CHECK(nheld == MAX_CLIENTS - 2, "connections: %u held of %d", nheld, MAX_CLIENTS - 2);
        /* then thousands of attempts over the limit, in waves */
        for (unsigned done = 0; done < attempts;) {
                int wave[128];
                unsigned k = 0;
                for (; k < 128 && done + k < attempts; k++)
                        wave[k] = tl_connect(D.socket);
                for (unsigned i = 0; i < k; i++) {
                        tl_msg m;
                        if (wave[i] < 0) {
                                other++;
                                continue;
                        }
                        int r = tl_recv(wave[i], &m, TL_TIMEOUT_MS);
                        if (r == 0 && tl_code(&m) == ZR_E_LIMIT)
                                refused++;
                        else
                                other++;
                        tl_msg_free(&m);
                        close(wave[i]);
                }
                done += k;
        }
        CHECK(refused == attempts, "connections: %u of %u refused with ZR_E_LIMIT (%u otherwise)",
              refused, attempts, other);
        /* those within the limit still work */
        unsigned working = 0;
        for (unsigned i = 0; i < nheld; i++) {
                zr_wire_writer w;
                tl_msg m;
                tl_begin(&w, "status", 7);
                working += tl_call(held[i], &w, NULL, 0, &m) == 0;
                tl_msg_free(&m);
                close(held[i]);
        }
        CHECK(working == nheld, "connections: %u of %u held connections answer", working, nheld);
        printf("case connections: %u held at the limit (%d), %u attempts over it, %u refused with "
               "ZR_E_LIMIT, %u held still answer\n", nheld, MAX_CLIENTS, attempts, refused,
               working);
        settle("connections", shm0, b0);
}

/* One client takes all the shared memory it may: rings of 64 slots of a whole
 * dataset each, then a read buffer, until ZR_E_LIMIT; all of it comes back when
 * it disconnects. The daemon runs with --max-shm=SHM_MAX. */
void case_shm_budget(void) {
        uint64_t b0 = checker_batches(), shm0 = status_shm();
        zrc_conn *c = NULL;
        zrc_dataset *d = NULL;
        zrc_loader *l[64];
        unsigned nl = 0;
        int r = client_open(hd_path, NULL, &c, &d, NULL, NULL);
        CHECK(r == 0, "shm-budget: open: %d", r);
        zrc_loader_options o = {.sampler = "sequential", .batch_size = N_RECORDS, .prefetch = 64};
        while (r == 0 && nl < 64) {
                r = zrc_loader_open(c, &d, 1, &o, &l[nl]);
                if (r == 0)
                        nl++;
        }
        int lr = r;
        uint64_t shm_full = status_shm();
        hd_proc full;
        hd_proc_read(D.pid, &full);
        CHECK(lr == -ZR_E_LIMIT, "shm-budget: after %u rings: %d", nl, lr);
        CHECK(shm_full - shm0 <= SHM_MAX, "shm-budget: %" PRIu64 " bytes over a budget of %d",
              shm_full - shm0, SHM_MAX);
        /* the rings fill: take one batch of each, check it */
        unsigned good = 0;
        for (unsigned i = 0; i < nl; i++) {
                zrc_loader_batch b;
                uint64_t idx[N_RECORDS];
                for (uint64_t j = 0; j < N_RECORDS; j++)
                        idx[j] = j;
                if (zrc_loader_next(l[i], &b) == 0) {
                        good += dense_batch_ok(b.streams[0].data, idx, N_RECORDS);
                        zrc_loader_release(l[i], b.slot);
                }
        }
        CHECK(good == nl, "shm-budget: %u of %u rings gave a good batch", good, nl);
        zrc_disconnect(c);
        printf("case shm-budget: %u rings of 64 x %d KiB, then %s; %" PRIu64 " MiB of shared "
               "memory held (budget %d MiB); daemon RSS then %" PRIu64 " KiB\n", nl,
               N_RECORDS * REC_BYTES / 1024, zrc_error_name(lr) ? zrc_error_name(lr) : "ok",
               (shm_full - shm0) >> 20, SHM_MAX >> 20, full.rss_kib);
        settle("shm-budget", shm0, b0);
}

void case_never_release(void) {
        uint64_t b0 = checker_batches(), shm0 = status_shm();
        zrc_conn *c = NULL;
        zrc_dataset *d = NULL;
        zrc_loader *l = NULL;
        zrc_loader_options o = {.sampler = "iid", .batch_size = 64, .seed = 9, .prefetch = 8};
        int r = client_open(hd_path, &o, &c, &d, &l, NULL);
        CHECK(r == 0, "never-release: open: %d", r);
        unsigned held = 0;
        zrc_loader_batch b;
        while (r == 0 && (r = zrc_loader_next(l, &b)) == 0)
                held++;
        CHECK(held == 8 && r == -EDEADLK, "never-release: %u held, then %d", held, r);
        /* a raw client that opens a loader and never reads its socket again */
        int fd, ring = -1;
        uint64_t rb, sb;
        CHECK(tl_connect_hello(D.socket, "hardening", &fd) == 0, "never-read: hello");
        int64_t h = hd_raw_open(fd, hd_path, false, 2);
        int lr = raw_loader_open(fd, h, 16, 3, &ring, &rb, &sb);
        CHECK(lr > 0, "never-read: loader %d", lr);
        bool progress = checker_progress(200);
        CHECK(progress, "never-release: the checker stalled");
        close(ring);
        close(fd);
        zrc_disconnect(c); /* its slots go back with the connection */
        printf("case never-release: a loader holding all %u slots and one never read; the "
               "checker verified 200 batches meanwhile\n", held);
        settle("never-release", shm0, b0);
}

/* A new connection sends the bytes of a frame cut short and its end
 * (SHUT_WR): what ends reading it after every frame the daemon sent. */
static int cut_frame(const void *bytes, size_t n) {
        int fd, r = tl_connect_hello(D.socket, "hardening", &fd);
        tl_msg m;
        CHECK(r == 0, "half-open: hello");
        if (r != 0)
                return r;
        tl_send_raw(fd, bytes, n, NULL, 0);
        shutdown(fd, SHUT_WR);
        while ((r = tl_recv(fd, &m, TL_TIMEOUT_MS)) == 0)
                tl_msg_free(&m);
        close(fd);
        return r;
}

void case_half_open(void) {
        uint64_t b0 = checker_batches(), shm0 = status_shm();
        unsigned closed = 0, n = 0;
        int fd;
        tl_msg m;
        /* a header cut after 2 bytes, then EOF on our side */
        int r = cut_frame("\x20\x00", 2);
        n++;
        closed += r == -EPIPE;
        CHECK(r == -EPIPE, "half-open: header cut: %d", r);
        /* a body cut after 10 of 100 bytes */
        uint8_t part[14] = {100, 0, 0, 0, 0x82};
        r = cut_frame(part, sizeof(part));
        n++;
        closed += r == -EPIPE;
        CHECK(r == -EPIPE, "half-open: body cut: %d", r);
        /* a header declaring 4 GiB - 1: refused before any body byte is read */
        CHECK(tl_connect_hello(D.socket, "hardening", &fd) == 0, "half-open: hello");
        tl_send_raw(fd, "\xff\xff\xff\xff\x82", 5, NULL, 0);
        r = tl_recv(fd, &m, TL_TIMEOUT_MS);
        int huge = r == 0 ? tl_code(&m) : r;
        if (r == 0)
                tl_msg_free(&m);
        r = tl_recv(fd, &m, TL_TIMEOUT_MS);
        if (r == 0)
                tl_msg_free(&m);
        n++;
        closed += huge == ZR_E_LIMIT && r == -EPIPE;
        CHECK(huge == ZR_E_LIMIT && r == -EPIPE, "half-open: a 4 GiB header: %d, then %d", huge, r);
        close(fd);
        /* a whole request, then SHUT_WR: the reply still comes */
        CHECK(tl_connect_hello(D.socket, "hardening", &fd) == 0, "half-open: hello");
        zr_wire_writer w;
        tl_begin(&w, "status", 5);
        tl_send(fd, &w, NULL, 0);
        zr_wire_writer_destroy(&w);
        shutdown(fd, SHUT_WR);
        r = tl_recv(fd, &m, TL_TIMEOUT_MS);
        bool answered = r == 0 && tl_code(&m) == 0 && tl_u64(&m, "id") == 5;
        tl_msg_free(&m);
        CHECK(answered, "half-open: a complete request before SHUT_WR was not answered (%d)", r);
        close(fd);
        /* held open: no HELLO, nothing sent; and half a header sent and held */
        int idle = tl_connect(D.socket), stuck = tl_connect(D.socket);
        tl_send_raw(stuck, "\x10\x00\x00", 3, NULL, 0);
        bool progress = checker_progress(100);
        CHECK(progress, "half-open: the checker stalled beside held connections");
        close(idle);
        close(stuck);
        printf("case half-open: %u of %u cut or oversized frames closed by the daemon; a request before "
               "SHUT_WR answered: %s; 2 silent connections held while the checker ran\n", closed,
               n, answered ? "yes" : "no");
        settle("half-open", shm0, b0);
}

