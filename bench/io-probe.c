/* io-probe.c: what the storage under a file can deliver, for the bench layer.
 *
 *   io-probe --file PATH [--bytes N] [--seconds S] [--engines threads,uring]
 *            [--modes buffered,direct]
 *
 * Measures random reads of 4 KiB and 256 KiB at queue depths 1, 2, 32 and 128,
 * and sequential reads of 1 MiB at depths 1 and 8, each with pread threads (one
 * per unit of depth) and with io_uring (one thread, the depth in flight) where
 * it works, each buffered and with O_DIRECT where the file system allows it.
 * Prints one JSON object on stdout: per configuration the reads, reads/s,
 * MiB/s and the p50/p99 latency of a read (exact, from every sample).
 *
 * The file is created (or extended) to N bytes of incompressible data if it is
 * shorter; only its first N bytes are read. Buffered figures are cold-cache
 * figures: the caller drops the page cache before the run (the whole machine's,
 * so nothing else of the file is cached), and the probe drops the file's own
 * pages (POSIX_FADV_DONTNEED) before every buffered configuration. Random reads
 * visit each block of the file at most once (a keyed permutation of the
 * blocks), so a buffered read never hits a page an earlier read of the same
 * configuration brought in; a configuration ends after S seconds or when it has
 * read every block ("exhausted": true), whichever comes first. Buffered random
 * reads carry POSIX_FADV_RANDOM (no read-around: they measure what the
 * device does for the bytes asked, as zrecord's chunk files read), sequential
 * ones POSIX_FADV_SEQUENTIAL.
 *
 * It is independent of the daemon: it uses liburing directly rather than
 * daemon/io's queue, because the queue is built to warm the page cache
 * (buffered reads into one shared sink, merged and split, served by batches)
 * while a probe needs a closed loop at a fixed depth, O_DIRECT with aligned
 * per-read buffers, and the latency of each raw read; measuring through the
 * queue would measure the queue.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#if ZR_HAVE_LIBURING
#include <liburing.h>
#endif

#define KiB ((uint64_t)1 << 10)
#define MiB ((uint64_t)1 << 20)
#define ALIGN 4096
#define SAMPLES_MAX ((size_t)1 << 23) /* latencies kept per configuration */

static uint64_t now_ns(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* ---- a keyed permutation of [0, n): random order, each block once -------- */

typedef struct perm {
        uint64_t n;
        unsigned half; /* bits per Feistel half */
        uint64_t key;
} perm;

static uint64_t mix64(uint64_t x) {
        x ^= x >> 33;
        x *= 0xff51afd7ed558ccdULL;
        x ^= x >> 33;
        x *= 0xc4ceb9fe1a85ec53ULL;
        x ^= x >> 33;
        return x;
}

static void perm_init(perm *p, uint64_t n, uint64_t key) {
        unsigned bits = 1;
        while (bits < 64 && ((uint64_t)1 << bits) < n)
                bits++;
        p->n = n;
        p->half = (bits + 1) / 2;
        p->key = key;
}

static uint64_t perm_at(const perm *p, uint64_t i) {
        uint64_t mask = ((uint64_t)1 << p->half) - 1;
        uint64_t x = i;
        do { /* cycle-walk: the domain is at most 4n */
                uint64_t l = x >> p->half, r = x & mask;
                for (unsigned round = 0; round < 4; round++) {
                        uint64_t f = mix64(r ^ (p->key + round * 0x9e3779b97f4a7c15ULL)) & mask;
                        uint64_t t = l ^ f;
                        l = r;
                        r = t;
                }
                x = l << p->half | r;
        } while (x >= p->n);
        return x;
}

/* ---- one configuration ---------------------------------------------------- */

enum pattern { RANDOM, SEQUENTIAL };
enum engine { THREADS, URING };
enum mode { BUFFERED, DIRECT };

typedef struct config {
        enum pattern pattern;
        uint64_t block;
        unsigned qd;
        enum engine engine;
        enum mode mode;
} config;

typedef struct result {
        uint64_t reads, bytes, ns;
        uint64_t p50_ns, p99_ns;
        int exhausted;
        char error[160];
} result;

typedef struct run {
        const config *c;
        int fd;
        uint64_t nblocks;
        perm perm;
        uint64_t deadline;
        _Atomic uint64_t next;  /* next block ordinal */
        _Atomic uint64_t reads;
        _Atomic int failed;
        pthread_mutex_t lock;   /* samples, error */
        uint64_t *samples;
        size_t nsamples;
        char error[160];
} run;

static uint64_t block_offset(run *r, uint64_t k) {
        uint64_t b = r->c->pattern == RANDOM ? perm_at(&r->perm, k) : k;
        return b * r->c->block;
}

static void run_fail(run *r, const char *what, int err) {
        pthread_mutex_lock(&r->lock);
        if (!r->error[0])
                snprintf(r->error, sizeof(r->error), "%s: %s", what, strerror(err));
        pthread_mutex_unlock(&r->lock);
        atomic_store(&r->failed, 1);
}

static void run_samples(run *r, const uint64_t *lat, size_t n) {
        pthread_mutex_lock(&r->lock);
        for (size_t i = 0; i < n && r->nsamples < SAMPLES_MAX; i++)
                r->samples[r->nsamples++] = lat[i];
        pthread_mutex_unlock(&r->lock);
}

/* Takes the next block, or returns 0 when time is up or the file exhausted. */
static int run_take(run *r, uint64_t *k) {
        if (atomic_load_explicit(&r->failed, memory_order_relaxed) || now_ns() >= r->deadline)
                return 0;
        *k = atomic_fetch_add(&r->next, 1);
        return *k < r->nblocks;
}

static void *thread_main(void *arg) {
        run *r = arg;
        uint64_t lat[1024];
        size_t nlat = 0;
        void *buf = NULL;
        if (posix_memalign(&buf, ALIGN, r->c->block) != 0) {
                run_fail(r, "buffer", ENOMEM);
                return NULL;
        }
        memset(buf, 0, r->c->block);
        uint64_t k;
        while (run_take(r, &k)) {
                uint64_t t0 = now_ns();
                ssize_t n = pread(r->fd, buf, r->c->block, (off_t)block_offset(r, k));
                uint64_t t1 = now_ns();
                if (n != (ssize_t)r->c->block) {
                        run_fail(r, "pread", n < 0 ? errno : EIO);
                        break;
                }
                atomic_fetch_add_explicit(&r->reads, 1, memory_order_relaxed);
                lat[nlat++] = t1 - t0;
                if (nlat == sizeof(lat) / sizeof(lat[0])) {
                        run_samples(r, lat, nlat);
                        nlat = 0;
                }
        }
        run_samples(r, lat, nlat);
        free(buf);
        return NULL;
}

static int run_threads(run *r) {
        pthread_t *t = calloc(r->c->qd, sizeof(*t));
        unsigned started = 0;
        if (!t)
                return -ENOMEM;
        for (; started < r->c->qd; started++)
                if (pthread_create(&t[started], NULL, thread_main, r) != 0) {
                        run_fail(r, "pthread_create", EAGAIN);
                        break;
                }
        for (unsigned i = 0; i < started; i++)
                pthread_join(t[i], NULL);
        free(t);
        return 0;
}

#if ZR_HAVE_LIBURING
typedef struct slot {
        void *buf;
        uint64_t t0;
} slot;

static int uring_submit_one(run *r, struct io_uring *ring, slot *s) {
        uint64_t k;
        if (!run_take(r, &k))
                return 0;
        struct io_uring_sqe *sqe = io_uring_get_sqe(ring);
        if (!sqe)
                return 0; /* cannot happen: one SQE per free slot */
        io_uring_prep_read(sqe, r->fd, s->buf, (unsigned)r->c->block, block_offset(r, k));
        io_uring_sqe_set_data(sqe, s);
        s->t0 = now_ns();
        return 1;
}

static int run_uring(run *r) {
        struct io_uring ring;
        unsigned qd = r->c->qd, inflight = 0;
        slot *slots = calloc(qd, sizeof(*slots));
        uint64_t lat[1024];
        size_t nlat = 0;
        int ret = io_uring_queue_init(qd, &ring, 0);
        if (ret < 0) {
                free(slots);
                run_fail(r, "io_uring_queue_init", -ret);
                return ret;
        }
        for (unsigned i = 0; slots && i < qd; i++) {
                if (posix_memalign(&slots[i].buf, ALIGN, r->c->block) != 0) {
                        run_fail(r, "buffer", ENOMEM);
                        goto out;
                }
                memset(slots[i].buf, 0, r->c->block);
        }
        for (unsigned i = 0; slots && i < qd; i++)
                inflight += (unsigned)uring_submit_one(r, &ring, &slots[i]);
        while (inflight > 0) {
                struct io_uring_cqe *cqe;
                ret = io_uring_submit_and_wait(&ring, 1);
                if (ret < 0 && ret != -EINTR) {
                        run_fail(r, "io_uring_submit_and_wait", -ret);
                        break;
                }
                unsigned head, seen = 0;
                io_uring_for_each_cqe(&ring, head, cqe) {
                        slot *s = io_uring_cqe_get_data(cqe);
                        uint64_t t1 = now_ns();
                        seen++;
                        inflight--;
                        if (cqe->res != (int)r->c->block) {
                                run_fail(r, "read", cqe->res < 0 ? -cqe->res : EIO);
                                continue;
                        }
                        atomic_fetch_add_explicit(&r->reads, 1, memory_order_relaxed);
                        lat[nlat++] = t1 - s->t0;
                        if (nlat == sizeof(lat) / sizeof(lat[0])) {
                                run_samples(r, lat, nlat);
                                nlat = 0;
                        }
                        inflight += (unsigned)uring_submit_one(r, &ring, s);
                }
                io_uring_cq_advance(&ring, seen);
        }
        /* a failed run may leave reads in flight: drain them */
        while (inflight > 0) {
                struct io_uring_cqe *cqe;
                if (io_uring_wait_cqe(&ring, &cqe) < 0)
                        break;
                io_uring_cqe_seen(&ring, cqe);
                inflight--;
        }
out:
        run_samples(r, lat, nlat);
        io_uring_queue_exit(&ring);
        for (unsigned i = 0; slots && i < qd; i++)
                free(slots[i].buf);
        free(slots);
        return 0;
}
#endif

static int cmp_u64(const void *a, const void *b) {
        uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
        return x < y ? -1 : x > y;
}

static void run_config(const char *path, uint64_t bytes, double seconds, const config *c,
                       result *res) {
        run r = { .c = c };
        memset(res, 0, sizeof(*res));
        pthread_mutex_init(&r.lock, NULL);
        r.nblocks = bytes / c->block;
        perm_init(&r.perm, r.nblocks, 0x243f6a8885a308d3ULL ^ c->block ^ ((uint64_t)c->qd << 32));
        r.samples = malloc(SAMPLES_MAX * sizeof(*r.samples));
        r.fd = open(path, O_RDONLY | O_CLOEXEC | (c->mode == DIRECT ? O_DIRECT : 0));
        if (!r.samples || r.fd < 0) {
                snprintf(res->error, sizeof(res->error), "open: %s", strerror(r.fd < 0 ? errno : ENOMEM));
                goto out;
        }
        if (c->mode == BUFFERED) {
                (void)posix_fadvise(r.fd, 0, 0, POSIX_FADV_DONTNEED);
                (void)posix_fadvise(r.fd, 0, 0,
                                    c->pattern == RANDOM ? POSIX_FADV_RANDOM : POSIX_FADV_SEQUENTIAL);
        }
        uint64_t t0 = now_ns();
        r.deadline = t0 + (uint64_t)(seconds * 1e9);
        if (c->engine == THREADS)
                run_threads(&r);
#if ZR_HAVE_LIBURING
        else
                run_uring(&r);
#endif
        res->ns = now_ns() - t0;
        res->reads = atomic_load(&r.reads);
        res->bytes = res->reads * c->block;
        res->exhausted = atomic_load(&r.next) >= r.nblocks;
        if (r.nsamples > 0) {
                qsort(r.samples, r.nsamples, sizeof(*r.samples), cmp_u64);
                res->p50_ns = r.samples[(r.nsamples - 1) / 2];
                res->p99_ns = r.samples[(size_t)((double)(r.nsamples - 1) * 0.99)];
        }
        memcpy(res->error, r.error, sizeof(res->error));
out:
        if (r.fd >= 0) {
                if (c->mode == BUFFERED)
                        (void)posix_fadvise(r.fd, 0, 0, POSIX_FADV_DONTNEED);
                close(r.fd);
        }
        free(r.samples);
        pthread_mutex_destroy(&r.lock);
}

/* ---- the file ------------------------------------------------------------ */

/* Makes path at least `bytes` long (incompressible data), synced and out of
 * the page cache. Returns 0 or -errno with *what set. */
static int prepare_file(const char *path, uint64_t bytes, const char **what) {
        int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
        struct stat st;
        uint8_t *buf = NULL;
        int r = 0;
        if (fd < 0) {
                *what = "open";
                return -errno;
        }
        if (fstat(fd, &st) < 0) {
                *what = "stat";
                r = -errno;
                goto out;
        }
        if ((uint64_t)st.st_size < bytes) {
                buf = malloc(MiB);
                if (!buf) {
                        *what = "malloc";
                        r = -ENOMEM;
                        goto out;
                }
                uint64_t x = 0x9e3779b97f4a7c15ULL;
                for (uint64_t off = (uint64_t)st.st_size; off < bytes;) {
                        uint64_t n = bytes - off < MiB ? bytes - off : MiB;
                        for (uint64_t i = 0; i + 8 <= n; i += 8) {
                                x = mix64(x + i + off);
                                memcpy(buf + i, &x, 8);
                        }
                        ssize_t w = pwrite(fd, buf, n, (off_t)off);
                        if (w <= 0) {
                                *what = "write";
                                r = w < 0 ? -errno : -EIO;
                                goto out;
                        }
                        off += (uint64_t)w;
                }
                if (fdatasync(fd) < 0) {
                        *what = "fdatasync";
                        r = -errno;
                        goto out;
                }
        }
        (void)posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
out:
        free(buf);
        close(fd);
        return r;
}

/* ---- command line and output ----------------------------------------------- */

static int parse_size(const char *s, uint64_t *ret) {
        char *end;
        errno = 0;
        unsigned long long v = strtoull(s, &end, 10);
        if (errno || end == s)
                return -1;
        switch (*end) {
        case 'k': case 'K': v <<= 10; end++; break;
        case 'm': case 'M': v <<= 20; end++; break;
        case 'g': case 'G': v <<= 30; end++; break;
        default: break;
        }
        if (*end)
                return -1;
        *ret = v;
        return 0;
}

static void usage(FILE *f) {
        fprintf(f, "usage: io-probe --file PATH [--bytes N[K|M|G]] [--seconds S]\n"
                   "                [--engines threads,uring] [--modes buffered,direct]\n"
                   "Random 4 KiB and 256 KiB reads at depth 1, 2, 32, 128 and sequential 1 MiB\n"
                   "reads at depth 1 and 8 over the first N bytes of PATH (created if short);\n"
                   "one JSON object on stdout. Drop the page cache before running it.\n");
}

static void json_str(const char *s) {
        putchar('"');
        for (; *s; s++) {
                if (*s == '"' || *s == '\\')
                        printf("\\%c", *s);
                else if ((unsigned char)*s < 0x20)
                        printf("\\u%04x", *s);
                else
                        putchar(*s);
        }
        putchar('"');
}

int main(int argc, char **argv) {
        const char *path = NULL, *engines = "threads,uring", *modes = "buffered,direct";
        uint64_t bytes = 1 << 30;
        double seconds = 2.0;

        for (int i = 1; i < argc; i++) {
                const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
                if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
                        usage(stdout);
                        return 0;
                } else if (!strcmp(a, "--file") && v) {
                        path = v;
                        i++;
                } else if (!strcmp(a, "--bytes") && v && parse_size(v, &bytes) == 0) {
                        i++;
                } else if (!strcmp(a, "--seconds") && v && (seconds = atof(v)) > 0) {
                        i++;
                } else if (!strcmp(a, "--engines") && v) {
                        engines = v;
                        i++;
                } else if (!strcmp(a, "--modes") && v) {
                        modes = v;
                        i++;
                } else {
                        usage(stderr);
                        return 2;
                }
        }
        bytes &= ~(MiB - 1);
        if (!path || bytes < MiB) {
                usage(stderr);
                return 2;
        }
        const char *what = "";
        int r = prepare_file(path, bytes, &what);
        if (r < 0) {
                fprintf(stderr, "io-probe: %s: %s: %s\n", path, what, strerror(-r));
                return 1;
        }

        char uring_error[128] = "";
        int uring_ok = 0;
#if ZR_HAVE_LIBURING
        struct io_uring ring;
        int ur = io_uring_queue_init(4, &ring, 0);
        if (ur == 0) {
                uring_ok = 1;
                io_uring_queue_exit(&ring);
        } else {
                snprintf(uring_error, sizeof(uring_error), "io_uring_queue_init: %s", strerror(-ur));
        }
#else
        snprintf(uring_error, sizeof(uring_error), "built without liburing");
#endif
        char direct_error[128] = "";
        int direct_ok = 0;
        int dfd = open(path, O_RDONLY | O_CLOEXEC | O_DIRECT);
        if (dfd >= 0) {
                void *b = NULL;
                if (posix_memalign(&b, ALIGN, ALIGN) == 0 && pread(dfd, b, ALIGN, 0) == ALIGN)
                        direct_ok = 1;
                else
                        snprintf(direct_error, sizeof(direct_error), "O_DIRECT read: %s",
                                 strerror(errno));
                free(b);
                close(dfd);
        } else {
                snprintf(direct_error, sizeof(direct_error), "O_DIRECT open: %s", strerror(errno));
        }

        printf("{\"probe\":\"io-probe\",\"file\":");
        json_str(path);
        printf(",\"bytes\":%" PRIu64 ",\"seconds\":%g,\"page_cache\":\"the file's pages are "
               "dropped (POSIX_FADV_DONTNEED) before each buffered configuration; buffered random "
               "reads carry POSIX_FADV_RANDOM\",",
               bytes, seconds);
        printf("\"uring\":{\"available\":%s,\"error\":", uring_ok ? "true" : "false");
        if (uring_ok)
                printf("null");
        else
                json_str(uring_error);
        printf("},\"direct\":{\"available\":%s,\"error\":", direct_ok ? "true" : "false");
        if (direct_ok)
                printf("null");
        else
                json_str(direct_error);
        printf("},\"results\":[");

        static const uint64_t rsizes[] = { 4 * KiB, 256 * KiB };
        static const unsigned rqd[] = { 1, 2, 32, 128 };
        static const unsigned sqd[] = { 1, 8 };
        config cs[64];
        size_t nc = 0;
        for (int m = 0; m < 2; m++)
                for (int e = 0; e < 2; e++) {
                        if (!strstr(modes, m == BUFFERED ? "buffered" : "direct") ||
                            !strstr(engines, e == THREADS ? "threads" : "uring"))
                                continue;
                        if ((m == DIRECT && !direct_ok) || (e == URING && !uring_ok))
                                continue;
                        for (size_t si = 0; si < 2; si++)
                                for (size_t q = 0; q < 4; q++)
                                        cs[nc++] = (config){ RANDOM, rsizes[si], rqd[q],
                                                             (enum engine)e, (enum mode)m };
                        for (size_t q = 0; q < 2; q++)
                                cs[nc++] = (config){ SEQUENTIAL, MiB, sqd[q], (enum engine)e,
                                                     (enum mode)m };
                }
        for (size_t i = 0; i < nc; i++) {
                const config *c = &cs[i];
                result res;
                run_config(path, bytes, seconds, c, &res);
                double s = res.ns > 0 ? (double)res.ns / 1e9 : 1e-9;
                printf("%s{\"pattern\":\"%s\",\"block\":%" PRIu64 ",\"qd\":%u,\"engine\":\"%s\","
                       "\"mode\":\"%s\",\"reads\":%" PRIu64 ",\"elapsed_s\":%.4f,"
                       "\"reads_per_s\":%.1f,\"mib_per_s\":%.2f,\"p50_us\":%.2f,\"p99_us\":%.2f,"
                       "\"exhausted\":%s,\"error\":",
                       i ? "," : "", c->pattern == RANDOM ? "random" : "sequential", c->block,
                       c->qd, c->engine == THREADS ? "threads" : "uring",
                       c->mode == BUFFERED ? "buffered" : "direct", res.reads, s,
                       (double)res.reads / s, (double)res.bytes / s / (double)MiB,
                       (double)res.p50_ns / 1e3, (double)res.p99_ns / 1e3,
                       res.exhausted ? "true" : "false");
                if (res.error[0])
                        json_str(res.error);
                else
                        printf("null");
                printf("}");
                fflush(stdout);
        }
        printf("]}\n");
        return 0;
}
