/* store-bench.c: the store's gather and append against the machine's limits.
 *
 * One run, the same bytes for every contender (bench/workload.h), warm page
 * cache, the store in a temporary directory on the disk (the file system is
 * printed; a tmpfs is flagged). For each workload (256 KiB images, batch 256;
 * 4 KiB tiles, batch 1024) it measures:
 *   - limits: memcpy gather on one thread and on all threads from an in-memory
 *     copy, the same on all threads through streaming stores, and a zstd
 *     decompress gather on all threads over the store's own frames (level 3
 *     with checksums, or the zstd_dict store's frames with its DDict),
 *     contexts reused, into the same pre-faulted destination;
 *   - zrecord gather of the same random batches (fixed-seed uniform draws) for
 *     raw, zstd and zstd_dict, each as GiB/s of decoded bytes and as a fraction
 *     of its limit (raw against the copy it makes: memcpy, or streaming stores
 *     for a batch past zr_copy_stream_min(); compressed against decompress);
 *   - append: raw against a plain write() of the same bytes to a file in the
 *     same directory (both page-cache ingestion: no fsync inside the timing),
 *     the compressed append rates, and the size on disk (st_blocks) per codec.
 * Every gather figure is the median of the timed batches (and the best), after
 * a sweep over every record and warm-up batches. --quick runs small sizes in
 * seconds and asserts nothing about speed; it proves the benchmark runs (and
 * that the gathered bytes are right: the last batch of each run is compared).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>
#include <zdict.h>

#include "limits-probe.h"
#include "store/codec.h"
#include "store/store.h"
#include "util/copy.h"
#include "util/pool.h"
#include "workload.h"

#define DATA_SEED UINT64_C(0x5eed)
#define DRAW_SEED UINT64_C(0xba7c4)
#define WARM_BATCHES 3           /* random batches run untimed after the sweep */
#define APPEND_CHUNK (64u << 20) /* bytes per append call and per write(): one 64 MiB batch */
#define DICT_SAMPLES 2000        /* records ZDICT trains on (the seed's "a sample") */
#define DICT_CAPACITY (64u << 10) /* 64 KiB dictionary: ~1/100 of the sample, zstd's rule */
#define DICT_LEVEL ZR_ZSTD_DICT_LEVEL /* the zstd_dict codec's default level (store/codec.h) */
#define COMPRESS_PROBE_FAST (256u << 20) /* bytes the level-3 compress probe takes */
#define COMPRESS_PROBE_SLOW (16u << 20)  /* bytes the level-19 probe takes (~25 MB/s) */
#define REPEATS_MAX 8            /* raw append / write() alternations at most */
#define TMPFS_MAGIC_ 0x01021994
#define RAMFS_MAGIC_ 0x858458f6

typedef struct result {
        char section[16];   /* "gather" | "append" */
        char workload[24];
        char contender[40];
        double median;      /* GiB/s */
        double best;        /* GiB/s */
        char limit[40];     /* what fraction is taken against ("" for none) */
        double fraction;    /* median / limit median */
        uint64_t disk_bytes; /* append rows: st_blocks * 512 of the store */
        uint64_t logic_bytes;
} result;

typedef struct bench {
        /* options */
        int quick, dict_images;
        size_t images, tiles, batches, repeats, threads;
        const char *json, *dir_base;
        /* machinery */
        limits_team *team;
        zr_pool *pool;
        ZSTD_DCtx **dctx;
        char dir[512];
        int dirfd;
        const char *fs;
        result res[64];
        size_t nres;
} bench;

__attribute__((format(printf, 1, 2), noreturn)) static void die(const char *fmt, ...) {
        va_list ap;
        va_start(ap, fmt);
        fputs("store-bench: ", stderr);
        vfprintf(stderr, fmt, ap);
        fputc('\n', stderr);
        va_end(ap);
        exit(1);
}

static result *add_result(bench *b, const char *section, const char *workload,
                          const char *contender) {
        if (b->nres == sizeof(b->res) / sizeof(b->res[0]))
                die("too many results");
        result *r = &b->res[b->nres++];
        memset(r, 0, sizeof(*r));
        snprintf(r->section, sizeof(r->section), "%s", section);
        snprintf(r->workload, sizeof(r->workload), "%s", workload);
        snprintf(r->contender, sizeof(r->contender), "%s", contender);
        return r;
}

static const char *fs_name(long type) {
        switch ((unsigned long)type) {
        case 0xEF53: return "ext4";
        case 0x58465342: return "xfs";
        case 0x9123683E: return "btrfs";
        case 0x794c7630: return "overlayfs";
        case TMPFS_MAGIC_: return "tmpfs";
        case RAMFS_MAGIC_: return "ramfs";
        default: return "other";
        }
}

/* Removes every file in b->dir (the store's and ours) and the directory. */
static void dir_clear(bench *b, const char *sub) {
        char path[600];
        snprintf(path, sizeof(path), "%s/%s", b->dir, sub);
        DIR *d = opendir(path);
        struct dirent *e;
        if (!d)
                return;
        while ((e = readdir(d)))
                if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
                        unlinkat(dirfd(d), e->d_name, 0);
        closedir(d);
        rmdir(path);
}

/* Makes a fresh subdirectory `sub` of the run's directory; returns its descriptor. */
static int subdir_new(bench *b, const char *sub) {
        dir_clear(b, sub);
        if (mkdirat(b->dirfd, sub, 0700) < 0)
                die("mkdir %s/%s: %s", b->dir, sub, strerror(errno));
        int fd = openat(b->dirfd, sub, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (fd < 0)
                die("open %s/%s: %s", b->dir, sub, strerror(errno));
        return fd;
}

static uint64_t dir_blocks(int dfd) {
        int fd = openat(dfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
        struct dirent *e;
        struct stat st;
        uint64_t total = 0;
        if (!d)
                die("cannot list the store directory: %s", strerror(errno));
        while ((e = readdir(d)))
                if (fstatat(dfd, e->d_name, &st, 0) == 0 && S_ISREG(st.st_mode))
                        total += (uint64_t)st.st_blocks * 512;
        closedir(d);
        return total;
}

/* The two append rows of a compressed store: the compression rate it is held to
 * (`limit`, in memory, a row of its own named limit_label), then the store's
 * append rate `gibs` against it, with the logical bytes appended and the disk
 * blocks of its directory dfd. */
static void add_compressed_append(bench *b, const char *workload, const char *limit_label,
                                  double limit, const char *label, double gibs,
                                  uint64_t logic_bytes, int dfd) {
        result *r = add_result(b, "append", workload, limit_label);

        r->median = r->best = limit;
        r = add_result(b, "append", workload, label);
        r->median = r->best = gibs;
        snprintf(r->limit, sizeof(r->limit), "%s", limit_label);
        r->fraction = gibs / limit;
        r->logic_bytes = logic_bytes;
        r->disk_bytes = dir_blocks(dfd);
}

/* --- one workload ------------------------------------------------------------ */

typedef struct work {
        bench *b;
        const char *name;
        size_t side, rec, nrec, batch;
        uint8_t *data;  /* nrec records, packed */
        uint8_t *dst;   /* one batch, pre-faulted */
        uint64_t *idx;  /* (WARM_BATCHES + batches) batches of indices */
        size_t nbatches;
        /* current contender */
        zr_store *s;
        const limits_frames *frames;
        const ZSTD_DDict *ddict;
        limits_team *team;
        int kind; /* 0 memcpy, 1 zstd probe, 2 store gather, 3 store locate, 4 pread probe,
                   * 5 streaming copy probe */
        const int *pfd;       /* kind 4: descriptor and offset of every record */
        const uint64_t *poff;
        zr_loc *locs; /* kind 3: one batch of table entries */
} work;

static int work_step(void *arg, uint64_t k) {
        work *w = arg;
        const uint64_t *idx = w->idx + k * w->batch;
        zr_error err = {0};
        int r = 0;

        switch (w->kind) {
        case 0:
                limits_memcpy_gather(w->team, w->dst, w->data, w->rec, idx, w->batch);
                break;
        case 5:
                limits_stream_gather(w->team, w->dst, w->data, w->rec, idx, w->batch);
                break;
        case 1:
                r = limits_zstd_gather(w->team, w->b->dctx, w->ddict, w->frames, w->dst, idx, w->batch);
                break;
        case 2:
                r = zr_store_gather(w->s, idx, w->batch, w->dst, (uint64_t)w->batch * w->rec, NULL, &err);
                if (r < 0)
                        fprintf(stderr, "store-bench: gather: %s\n", err.message);
                break;
        case 4:
                r = limits_pread_gather(w->team, w->pfd, w->poff, w->rec, w->dst, idx, w->batch);
                break;
        default:
                r = zr_store_locate(w->s, idx, w->batch, w->locs, &err);
                if (r < 0)
                        fprintf(stderr, "store-bench: locate: %s\n", err.message);
                break;
        }
        return r;
}

/* The last batch in dst must hold the records its indices name. */
static void check_last_batch(const work *w, const char *who) {
        const uint64_t *idx = w->idx + (w->nbatches - 1) * w->batch;
        for (size_t i = 0; i < w->batch; i++)
                if (memcmp(w->dst + i * w->rec, w->data + idx[i] * w->rec, w->rec) != 0)
                        die("%s, %s: record %" PRIu64 " of the last batch is wrong", w->name, who, idx[i]);
}

/* The store's own frames of records 0..nrec-1, read from its chunk files. */
static limits_frames *frames_of_store(work *w, int dfd) {
        limits_frames *f = limits_frames_alloc(w->nrec, w->rec);
        zr_loc *locs = calloc(w->nrec, sizeof(*locs));
        uint64_t *all = calloc(w->nrec, sizeof(*all));
        zr_error err = {0};
        int fd = -1;
        uint32_t fd_chunk = UINT32_MAX;

        if (!f || !locs || !all)
                die("out of memory");
        for (size_t i = 0; i < w->nrec; i++)
                all[i] = i;
        if (zr_store_locate(w->s, all, w->nrec, locs, &err) < 0)
                die("locate: %s", err.message);
        for (size_t i = 0; i < w->nrec; i++) {
                if (locs[i].chunk_id != fd_chunk) {
                        char name[32];
                        if (fd >= 0)
                                close(fd);
                        snprintf(name, sizeof(name), "%" PRIu32 ".chunk", locs[i].chunk_id);
                        fd = openat(dfd, name, O_RDONLY | O_CLOEXEC);
                        if (fd < 0)
                                die("open %s: %s", name, strerror(errno));
                        fd_chunk = locs[i].chunk_id;
                }
                f->frame[i] = malloc(locs[i].phys_length ? locs[i].phys_length : 1);
                if (!f->frame[i])
                        die("out of memory");
                if (pread(fd, f->frame[i], locs[i].phys_length, locs[i].offset) != (ssize_t)locs[i].phys_length)
                        die("short read of record %zu's frame", i);
                f->len[i] = locs[i].phys_length;
                f->total += f->len[i];
        }
        if (fd >= 0)
                close(fd);
        free(all);
        free(locs);
        return f;
}

/* Every record's descriptor and offset in the raw store's chunk files, for
 * the pread probe (locations looked up here, outside any timing). */
typedef struct pread_files {
        int *fd;
        uint64_t *off;
        int fds[64];
        size_t nfds;
} pread_files;

static void pread_files_open(work *w, zr_store *s, int dfd, pread_files *pf) {
        zr_loc *locs = calloc(w->nrec, sizeof(*locs));
        uint64_t *all = calloc(w->nrec, sizeof(*all));
        zr_error err = {0};

        memset(pf, 0, sizeof(*pf));
        pf->off = calloc(w->nrec, sizeof(*pf->off));
        pf->fd = calloc(w->nrec, sizeof(*pf->fd));
        if (!locs || !all || !pf->off || !pf->fd)
                die("out of memory");
        for (size_t i = 0; i < w->nrec; i++)
                all[i] = i;
        if (zr_store_locate(s, all, w->nrec, locs, &err) < 0)
                die("locate: %s", err.message);
        for (size_t i = 0; i < w->nrec; i++) {
                uint32_t c = locs[i].chunk_id;
                if (c >= sizeof(pf->fds) / sizeof(pf->fds[0]))
                        die("more chunk files than the pread probe handles");
                while (pf->nfds <= c) {
                        char name[32];
                        snprintf(name, sizeof(name), "%zu.chunk", pf->nfds);
                        pf->fds[pf->nfds] = openat(dfd, name, O_RDONLY | O_CLOEXEC);
                        if (pf->fds[pf->nfds] < 0)
                                die("open %s: %s", name, strerror(errno));
                        pf->nfds++;
                }
                pf->fd[i] = pf->fds[c];
                pf->off[i] = locs[i].offset;
        }
        free(all);
        free(locs);
}

static void pread_files_close(pread_files *pf) {
        for (size_t i = 0; i < pf->nfds; i++)
                close(pf->fds[i]);
        free(pf->fd);
        free(pf->off);
        memset(pf, 0, sizeof(*pf));
}

/* Gathers every record of s once, in order: the page cache is warm after. */
static void sweep(work *w, zr_store *s) {
        uint64_t *seq = malloc(w->batch * sizeof(*seq));
        zr_error err = {0};
        if (!seq)
                die("out of memory");
        for (size_t i = 0; i < w->nrec; i += w->batch) {
                size_t n = w->nrec - i < w->batch ? w->nrec - i : w->batch;
                for (size_t j = 0; j < n; j++)
                        seq[j] = i + j;
                if (zr_store_gather(s, seq, n, w->dst, (uint64_t)w->batch * w->rec, NULL, &err) < 0)
                        die("sweep: %s", err.message);
        }
        free(seq);
}

/* One row of the gather table. */
typedef struct contender {
        const char *label;
        int kind;                 /* as work.kind */
        limits_team *team;        /* probes: NULL for one thread */
        zr_store *s;              /* stores */
        const limits_frames *frames;
        const ZSTD_DDict *ddict;
        const char *limit;        /* stores: the label of their limit */
} contender;

/* Runs the warm-up batches of every contender, then the timed batches round
 * robin (batch k of every contender, then batch k + 1), so a change of load on
 * the machine during the run shifts every contender alike and the ratios hold.
 * secs[c * batches + k] receives contender c's time for timed batch k. After
 * its last batch, each contender's destination is checked. */
static void time_round_robin(work *w, const contender *cs, size_t nc, double *secs) {
        size_t timed = w->b->batches;
        for (size_t k = 0; k < WARM_BATCHES + timed; k++) {
                for (size_t c = 0; c < nc; c++) {
                        w->kind = cs[c].kind;
                        w->team = cs[c].team;
                        w->s = cs[c].s;
                        w->frames = cs[c].frames;
                        w->ddict = cs[c].ddict;
                        uint64_t t0 = workload_now_ns();
                        if (work_step(w, k) < 0)
                                die("%s: %s failed", w->name, cs[c].label);
                        if (k >= WARM_BATCHES)
                                secs[c * timed + (k - WARM_BATCHES)] = (double)(workload_now_ns() - t0) / 1e9;
                        if (k == WARM_BATCHES + timed - 1)
                                check_last_batch(w, cs[c].label);
                }
        }
}

/* Appends every record to a new store of `codec` in `sub`, timed; returns the
 * open store (its directory in *ret_dfd) and the GiB/s. */
static zr_store *append_store(work *w, const char *sub, enum zr_codec codec, const void *dict,
                              size_t dict_len, int no_mmap, int *ret_dfd, double *ret_gibs) {
        bench *b = w->b;
        zr_store_options opts = { .pool = b->pool, .no_mmap = no_mmap };
        zr_error err = {0};
        zr_store *s = NULL;
        size_t per = APPEND_CHUNK / w->rec ? APPEND_CHUNK / w->rec : 1;
        uint64_t *lens = malloc(per * sizeof(*lens));
        int dfd = subdir_new(b, sub);

        if (!lens)
                die("out of memory");
        for (size_t i = 0; i < per; i++)
                lens[i] = w->rec;
        uint64_t t0 = workload_now_ns();
        if (zr_store_create(dfd, codec, dict, dict_len, &opts, &s, &err) < 0)
                die("create: %s", err.message);
        for (size_t i = 0; i < w->nrec; i += per) {
                size_t n = w->nrec - i < per ? w->nrec - i : per;
                if (zr_store_append(s, w->data + i * w->rec, lens, n, NULL, &err) < 0)
                        die("append: %s", err.message);
        }
        double secs = (double)(workload_now_ns() - t0) / 1e9;
        if (zr_store_sync(s, &err) < 0) /* untimed: durability is not ingestion */
                die("sync: %s", err.message);
        free(lens);
        *ret_dfd = dfd;
        *ret_gibs = (double)w->nrec * (double)w->rec / (double)(1u << 30) / secs;
        return s;
}

/* A plain write() of the same bytes, in the same pieces, to a file in `sub`. */
static double plain_write(work *w, const char *sub, uint64_t *ret_disk) {
        size_t per = (APPEND_CHUNK / w->rec ? APPEND_CHUNK / w->rec : 1) * w->rec;
        size_t total = w->nrec * w->rec;
        int dfd = subdir_new(w->b, sub);
        uint64_t t0 = workload_now_ns();
        int fd = openat(dfd, "plain.bin", O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        if (fd < 0)
                die("open plain.bin: %s", strerror(errno));
        for (size_t off = 0; off < total;) {
                size_t n = total - off < per ? total - off : per;
                ssize_t k = write(fd, w->data + off, n);
                if (k < 0) {
                        if (errno == EINTR)
                                continue;
                        die("write: %s", strerror(errno));
                }
                off += (size_t)k;
        }
        double secs = (double)(workload_now_ns() - t0) / 1e9;
        fsync(fd); /* untimed, as for the store */
        struct stat st;
        if (ret_disk && fstat(fd, &st) == 0)
                *ret_disk = (uint64_t)st.st_blocks * 512;
        close(fd);
        close(dfd);
        dir_clear(w->b, sub);
        return (double)total / (double)(1u << 30) / secs;
}

static void *train_dict(const work *w, size_t *ret_len) {
        size_t n = w->nrec < DICT_SAMPLES ? w->nrec : DICT_SAMPLES;
        size_t *sizes = malloc(n * sizeof(*sizes));
        void *dict = malloc(DICT_CAPACITY);
        if (!sizes || !dict)
                die("out of memory");
        for (size_t i = 0; i < n; i++)
                sizes[i] = w->rec;
        /* every (nrec / n)-th record would be a fairer sample; the records are
         * i.i.d. draws of the same generator, so the first n are as good */
        size_t r = ZDICT_trainFromBuffer(dict, DICT_CAPACITY, w->data, sizes, (unsigned)n);
        if (ZDICT_isError(r))
                die("ZDICT_trainFromBuffer: %s", ZDICT_getErrorName(r));
        free(sizes);
        *ret_len = r;
        return dict;
}

/* GiB/s of compressing (a suffix of) the records in memory into checksummed
 * frames on all threads: level 3, or the CDict's level. The prefix is sized so
 * this takes about a second; the rate per byte does not depend on the count. */
static double compress_limit(work *w, const ZSTD_CDict *cdict) {
        size_t bytes = cdict ? COMPRESS_PROBE_SLOW : COMPRESS_PROBE_FAST;
        size_t n = bytes / w->rec ? bytes / w->rec : 1;
        limits_frames *f = NULL;
        if (n > w->nrec)
                n = w->nrec;
        uint64_t t0 = workload_now_ns();
        /* the last records: the dictionary was trained on the first ones */
        if (limits_frames_new(w->b->team, w->data + (w->nrec - n) * w->rec, w->rec, n, 3, cdict, &f) < 0)
                die("in-memory compression failed");
        double secs = (double)(workload_now_ns() - t0) / 1e9;
        limits_frames_free(f);
        return (double)n * (double)w->rec / (double)(1u << 30) / secs;
}

static double max_of(const double *v, size_t n) {
        double m = v[0];
        for (size_t i = 1; i < n; i++)
                if (v[i] > m)
                        m = v[i];
        return m;
}

static void run_workload(bench *b, const char *name, size_t side, size_t nrec, size_t batch, int dict) {
        work w = { .b = b, .name = name, .side = side, .rec = side * side, .nrec = nrec, .batch = batch };
        result *r;

        w.nbatches = WARM_BATCHES + b->batches;
        w.data = workload_images(nrec, side, side, DATA_SEED);
        w.dst = malloc(batch * w.rec);
        w.idx = malloc(w.nbatches * batch * sizeof(*w.idx));
        if (!w.data || !w.dst || !w.idx)
                die("out of memory for %s", name);
        memset(w.dst, 0, batch * w.rec); /* pre-fault the destination */
        for (size_t k = 0; k < w.nbatches; k++)
                workload_draw(w.idx + k * batch, batch, nrec, DRAW_SEED, k);

        printf("\n== %s: %zu records of %zu B (%.0f MiB), batch %zu (%.1f MiB)\n", name, nrec, w.rec,
               (double)nrec * (double)w.rec / 1048576.0, batch, (double)batch * (double)w.rec / 1048576.0);

        /* append: raw against write(), alternating which goes first, after one
         * untimed write of the same size (a fresh VM's first touch of page-cache
         * memory is several times slower than a reuse; neither side may get the
         * other's warm pages for free) */
        double wr[REPEATS_MAX] = {0}, ap[REPEATS_MAX] = {0};
        zr_store *raw = NULL;
        int raw_dfd = -1;
        uint64_t plain_disk = 0;
        plain_write(&w, "warm", NULL);
        for (size_t i = 0; i < b->repeats; i++) {
                if (raw) {
                        zr_store_close(raw, NULL);
                        close(raw_dfd);
                        dir_clear(b, "raw");
                }
                if (i % 2 == 0)
                        wr[i] = plain_write(&w, "plain", &plain_disk);
                raw = append_store(&w, "raw", ZR_CODEC_RAW, NULL, 0, 0, &raw_dfd, &ap[i]);
                if (i % 2 == 1)
                        wr[i] = plain_write(&w, "plain", &plain_disk);
        }
        printf("append runs, GiB/s: write()");
        for (size_t i = 0; i < b->repeats; i++)
                printf(" %.2f", wr[i]);
        printf("; zrecord raw");
        for (size_t i = 0; i < b->repeats; i++)
                printf(" %.2f", ap[i]);
        printf("\n");
        double wr_best = max_of(wr, b->repeats), ap_best = max_of(ap, b->repeats);
        double wr_med = workload_median(wr, b->repeats), ap_med = workload_median(ap, b->repeats);
        r = add_result(b, "append", name, "plain write()");
        r->median = wr_med;
        r->best = wr_best;
        r->logic_bytes = (uint64_t)nrec * w.rec;
        r->disk_bytes = plain_disk;
        r = add_result(b, "append", name, "zrecord raw");
        r->median = ap_med;
        r->best = ap_best;
        snprintf(r->limit, sizeof(r->limit), "plain write()");
        r->fraction = ap_med / wr_med;
        r->logic_bytes = (uint64_t)nrec * w.rec;
        r->disk_bytes = dir_blocks(raw_dfd);

        /* zstd: against the in-memory compression rate of the same records */
        double zlimit = compress_limit(&w, NULL);
        int zstd_dfd = -1, dict_dfd = -1;
        double gibs;
        zr_store *zs = append_store(&w, "zstd", ZR_CODEC_ZSTD, NULL, 0, 0, &zstd_dfd, &gibs);
        add_compressed_append(b, name, "zstd-3 compress, all threads", zlimit, "zrecord zstd", gibs,
                              (uint64_t)nrec * w.rec, zstd_dfd);

        zr_store *ds = NULL;
        void *dict_buf = NULL;
        size_t dict_len = 0;
        ZSTD_DDict *ddict = NULL;
        if (dict) {
                uint64_t t0 = workload_now_ns();
                dict_buf = train_dict(&w, &dict_len);
                printf("dictionary: %zu bytes trained on %zu records in %.2f s\n", dict_len,
                       nrec < DICT_SAMPLES ? nrec : DICT_SAMPLES, (double)(workload_now_ns() - t0) / 1e9);
                ZSTD_CDict *cdict = ZSTD_createCDict(dict_buf, dict_len, DICT_LEVEL);
                if (!cdict)
                        die("ZSTD_createCDict failed");
                double dlimit = compress_limit(&w, cdict);
                ZSTD_freeCDict(cdict);
                ds = append_store(&w, "dict", ZR_CODEC_ZSTD_DICT, dict_buf, dict_len, 0, &dict_dfd,
                                  &gibs);
                char dname[64];
                snprintf(dname, sizeof(dname), "zstd-%d+dict compress, all threads", DICT_LEVEL);
                add_compressed_append(b, name, dname, dlimit,
                                      "zrecord zstd_dict", gibs, (uint64_t)nrec * w.rec, dict_dfd);
                ddict = ZSTD_createDDict(dict_buf, dict_len);
                if (!ddict)
                        die("ZSTD_createDDict failed");
        }

        /* a second raw store, read with pread (no_mmap): the store's fallback path */
        int rawp_dfd = -1;
        double unused;
        zr_store *rawp = append_store(&w, "raw-pread", ZR_CODEC_RAW, NULL, 0, 1, &rawp_dfd, &unused);

        /* the contenders of the gather table, limits first */
        pread_files pf;
        pread_files_open(&w, raw, raw_dfd, &pf);
        w.s = zs;
        limits_frames *zf = frames_of_store(&w, zstd_dfd);
        printf("zstd frames: ratio %.2f\n", (double)nrec * (double)w.rec / (double)zf->total);
        limits_frames *df = NULL;
        if (ds) {
                w.s = ds;
                df = frames_of_store(&w, dict_dfd);
                printf("zstd_dict frames: ratio %.2f\n", (double)nrec * (double)w.rec / (double)df->total);
        }
        contender cs[11];
        size_t nc = 0;
        cs[nc++] = (contender){ "memcpy gather, 1 thread", 0, NULL, NULL, NULL, NULL, NULL };
        cs[nc++] = (contender){ "memcpy gather, all threads", 0, b->team, NULL, NULL, NULL, NULL };
        cs[nc++] = (contender){ "pread gather, all threads", 4, b->team, NULL, NULL, NULL, NULL };
        cs[nc++] = (contender){ "zstd decompress, all threads", 1, b->team, NULL, zf, NULL, NULL };
        if (ds)
                cs[nc++] = (contender){ "zstd+dict decompress, all threads", 1, b->team, NULL, df, ddict, NULL };
        cs[nc++] = (contender){ "streaming gather, all threads", 5, b->team, NULL, NULL, NULL, NULL };
        /* raw against the copy it makes: streaming stores for a large batch */
        cs[nc++] = (contender){ "zrecord raw", 2, NULL, raw, NULL, NULL,
                                zr_copy_streams((uint64_t)batch * w.rec) ?
                                        "streaming gather, all threads" :
                                        "memcpy gather, all threads" };
        cs[nc++] = (contender){ "zrecord raw, pread (no_mmap)", 2, NULL, rawp, NULL, NULL,
                                "pread gather, all threads" };
        cs[nc++] = (contender){ "zrecord zstd", 2, NULL, zs, NULL, NULL, "zstd decompress, all threads" };
        if (ds)
                cs[nc++] = (contender){ "zrecord zstd_dict", 2, NULL, ds, NULL, NULL,
                                        "zstd+dict decompress, all threads" };

        /* every store read once (a warm page cache), then round robin */
        for (size_t k = 0; k < nc; k++)
                if (cs[k].s)
                        sweep(&w, cs[k].s);
        w.pfd = pf.fd;
        w.poff = pf.off;
        double *secs = calloc(nc * b->batches, sizeof(*secs));
        if (!secs)
                die("out of memory");
        time_round_robin(&w, cs, nc, secs);
        double gib = (double)batch * (double)w.rec / (double)(1u << 30);
        double raw_med = 0;
        for (size_t k = 0; k < nc; k++) {
                double *v = secs + k * b->batches;
                r = add_result(b, "gather", name, cs[k].label);
                r->best = gib / workload_min(v, b->batches);
                r->median = gib / workload_median(v, b->batches);
                if (cs[k].s == raw)
                        raw_med = r->median;
                if (cs[k].limit) {
                        snprintf(r->limit, sizeof(r->limit), "%s", cs[k].limit);
                        for (size_t i = 0; i < b->nres; i++)
                                if (!strcmp(b->res[i].workload, name) &&
                                    !strcmp(b->res[i].section, "gather") &&
                                    !strcmp(b->res[i].contender, cs[k].limit))
                                        r->fraction = r->median / b->res[i].median;
                }
        }
        free(secs);

        /* the part of a raw gather that reads the table, on its own */
        {
                double *ls = calloc(b->batches, sizeof(*ls));
                w.locs = calloc(batch, sizeof(*w.locs));
                if (!ls || !w.locs)
                        die("out of memory");
                w.kind = 3;
                w.s = raw;
                if (workload_time(work_step, &w, WARM_BATCHES, b->batches, ls) < 0)
                        die("locate failed");
                double loc_us = workload_median(ls, b->batches) * 1e6;
                double gather_us = gib / raw_med * 1e6;
                printf("zr_store_locate alone: %.0f us per batch (median), %.0f%% of the raw "
                       "gather's %.0f us\n", loc_us, 100.0 * loc_us / gather_us, gather_us);
                free(w.locs);
                w.locs = NULL;
                free(ls);
        }
        pread_files_close(&pf);

        zr_store_close(rawp, NULL);
        close(rawp_dfd);
        dir_clear(b, "raw-pread");
        zr_store_close(ds, NULL);
        zr_store_close(zs, NULL);
        zr_store_close(raw, NULL);
        limits_frames_free(df);
        limits_frames_free(zf);
        ZSTD_freeDDict(ddict);
        free(dict_buf);
        if (dict_dfd >= 0)
                close(dict_dfd);
        close(zstd_dfd);
        close(raw_dfd);
        dir_clear(b, "warm");
        dir_clear(b, "dict");
        dir_clear(b, "zstd");
        dir_clear(b, "raw");
        dir_clear(b, "plain");
        free(w.idx);
        free(w.dst);
        free(w.data);

        printf("%-36s %10s %10s  %s\n", "gather", "GiB/s med", "GiB/s best", "fraction of limit");
        for (size_t i = 0; i < b->nres; i++) {
                result *x = &b->res[i];
                if (strcmp(x->workload, name) || strcmp(x->section, "gather"))
                        continue;
                printf("%-36s %10.3f %10.3f  ", x->contender, x->median, x->best);
                if (x->limit[0])
                        printf("%.2f of %s\n", x->fraction, x->limit);
                else
                        printf("(limit)\n");
        }
        printf("%-36s %10s %10s  %-42s %10s %8s\n", "append (page cache, no fsync)", "GiB/s med",
               "GiB/s best", "fraction of limit", "on disk", "ratio");
        for (size_t i = 0; i < b->nres; i++) {
                result *x = &b->res[i];
                if (strcmp(x->workload, name) || strcmp(x->section, "append"))
                        continue;
                char frac[64] = "(limit)";
                if (x->limit[0])
                        snprintf(frac, sizeof(frac), "%.2f of %s", x->fraction, x->limit);
                printf("%-36s %10.3f %10.3f  %-42s", x->contender, x->median, x->best, frac);
                if (x->disk_bytes)
                        printf(" %6.1f MiB %8.2f", (double)x->disk_bytes / 1048576.0,
                               (double)x->logic_bytes / (double)x->disk_bytes);
                printf("\n");
        }
        fflush(stdout);
}

static void write_json(const bench *b, const char *path, const char *when) {
        FILE *f = fopen(path, "we");
        if (!f)
                die("open %s: %s", path, strerror(errno));
        fprintf(f, "{\n  \"benchmark\": \"store-bench\",\n  \"date\": \"%s\",\n", when);
        fprintf(f, "  \"threads\": %zu,\n  \"batches\": %zu,\n  \"quick\": %s,\n", b->threads,
                b->batches, b->quick ? "true" : "false");
        fprintf(f, "  \"dir\": \"%s\",\n  \"filesystem\": \"%s\",\n  \"results\": [\n", b->dir, b->fs);
        for (size_t i = 0; i < b->nres; i++) {
                const result *x = &b->res[i];
                fprintf(f, "    {\"section\": \"%s\", \"workload\": \"%s\", \"contender\": \"%s\", "
                        "\"gib_s_median\": %.4f, \"gib_s_best\": %.4f, \"limit\": \"%s\", "
                        "\"fraction\": %.4f, \"disk_bytes\": %" PRIu64 ", \"logic_bytes\": %" PRIu64 "}%s\n",
                        x->section, x->workload, x->contender, x->median, x->best, x->limit,
                        x->fraction, x->disk_bytes, x->logic_bytes, i + 1 < b->nres ? "," : "");
        }
        fprintf(f, "  ]\n}\n");
        if (fclose(f) != 0)
                die("write %s: %s", path, strerror(errno));
}

static void usage(const char *argv0) {
        fprintf(stderr,
                "usage: %s [--quick] [--records N] [--tiles N] [--batches N] [--repeats N]\n"
                "          [--threads N] [--dir DIR] [--dict-images] [--json FILE]\n"
                "  --records N    256 KiB image records (default 2500)\n"
                "  --tiles N      4 KiB tile records (default 65536)\n"
                "  --batches N    timed batches per contender (default 15)\n"
                "  --repeats N    raw append / write() repetitions, 1..8 (default 3)\n"
                "  --threads N    threads for the store pool and the probes (default: CPUs)\n"
                "  --dir DIR      where the temporary stores go (default $TMPDIR or /tmp)\n"
                "  --dict-images  also run zstd_dict on the images (the dictionary's training: slow)\n"
                "  --json FILE    write the results as JSON\n",
                argv0);
        exit(2);
}

int main(int argc, char **argv) {
        bench b = { .images = 2500, .tiles = 65536, .batches = 15, .repeats = 3, .dirfd = -1 };
        long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
        b.threads = ncpu > 0 ? (size_t)ncpu : 1;
        b.dir_base = getenv("TMPDIR") && *getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";

        for (int i = 1; i < argc; i++) {
                const char *a = argv[i];
                int more = i + 1 < argc;
                if (!strcmp(a, "--quick")) {
                        b.quick = 1;
                        b.images = 96;
                        b.tiles = 4096;
                        b.batches = 3;
                        b.repeats = 1;
                } else if (!strcmp(a, "--records") && more) {
                        b.images = strtoull(argv[++i], NULL, 0);
                } else if (!strcmp(a, "--tiles") && more) {
                        b.tiles = strtoull(argv[++i], NULL, 0);
                } else if (!strcmp(a, "--batches") && more) {
                        b.batches = strtoull(argv[++i], NULL, 0);
                } else if (!strcmp(a, "--repeats") && more) {
                        b.repeats = strtoull(argv[++i], NULL, 0);
                } else if (!strcmp(a, "--threads") && more) {
                        b.threads = strtoull(argv[++i], NULL, 0);
                } else if (!strcmp(a, "--dir") && more) {
                        b.dir_base = argv[++i];
                } else if (!strcmp(a, "--dict-images")) {
                        b.dict_images = 1;
                } else if (!strcmp(a, "--json") && more) {
                        b.json = argv[++i];
                } else {
                        usage(argv[0]);
                }
        }
        if (b.images < 1 || b.tiles < 1 || b.batches < 1 || b.threads < 1 || b.repeats < 1 ||
            b.repeats > 3)
                usage(argv[0]);

        snprintf(b.dir, sizeof(b.dir), "%s/zr-store-bench-XXXXXX", b.dir_base);
        if (!mkdtemp(b.dir))
                die("mkdtemp %s: %s", b.dir, strerror(errno));
        b.dirfd = open(b.dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (b.dirfd < 0)
                die("open %s: %s", b.dir, strerror(errno));
        struct statfs sfs;
        b.fs = fstatfs(b.dirfd, &sfs) == 0 ? fs_name(sfs.f_type) : "unknown";
        int in_memory = !strcmp(b.fs, "tmpfs") || !strcmp(b.fs, "ramfs");

        if (limits_team_new(b.threads, &b.team) < 0)
                die("cannot start %zu threads", b.threads);
        if (b.threads > 1 && zr_pool_new(b.threads - 1, &b.pool) < 0)
                die("cannot start the store's pool");
        b.dctx = calloc(b.threads, sizeof(*b.dctx));
        if (!b.dctx)
                die("out of memory");
        for (size_t i = 0; i < b.threads; i++)
                if (!(b.dctx[i] = ZSTD_createDCtx()))
                        die("ZSTD_createDCtx failed");

        char when[64];
        time_t now = time(NULL);
        strftime(when, sizeof(when), "%Y-%m-%d %H:%M:%S UTC", gmtime(&now));
        struct utsname un;
        uname(&un);
        printf("store-bench %s: %s %s, %ld CPUs; %zu threads (store pool: %zu worker(s) + the "
               "caller; probes: the same count)\n",
               when, un.sysname, un.release, ncpu, b.threads, b.threads - 1);
        printf("stores in %s on %s (%s); warm page cache; %zu timed batches after a sweep and %d "
               "warm-up batches; GiB/s of decoded bytes%s\n",
               b.dir, b.fs, in_memory ? "IN MEMORY, not the disk" : "disk", b.batches,
               WARM_BATCHES, b.quick ? "; --quick: sizes too small to mean anything" : "");

        run_workload(&b, "256 KiB images", 512, b.images, 256, b.dict_images);
        run_workload(&b, "4 KiB tiles", 64, b.tiles, 1024, 1);

        if (b.json)
                write_json(&b, b.json, when);

        for (size_t i = 0; i < b.threads; i++)
                ZSTD_freeDCtx(b.dctx[i]);
        free(b.dctx);
        zr_pool_free(b.pool);
        limits_team_free(b.team);
        close(b.dirfd);
        rmdir(b.dir);
        return 0;
}
