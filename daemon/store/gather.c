/* gather.c: reading table entries and records.
 *
 * Lock-free: the length is loaded with acquire, and every committed entry and
 * byte below it stays unchanged while a reader may run (delete and compact are
 * exclusive). Every entry is checked against the chunk capacity and the write
 * frontier before a byte is read. Raw records are copied straight into the
 * destination from the chunks' mappings, or pread there (a file not mapped, or
 * the caller's ZR_GATHER_PREAD for records not resident); compressed ones are
 * decoded straight into it; contiguous shards, one codec context each. It
 * never writes.
 */
#include "store/store-private.h"
#include "util/copy.h"
#include "util/mapguard.h"

#include <errno.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

/* Below this many indices a locate runs on the caller: a wake-up (30-70 us)
 * costs more than a few hundred 16-byte preads, or tens of thousands of entries
 * decoded from a mapping (~20 ns each). */
#define STORE_LOCATE_PARALLEL_MIN_PREAD 256
#define STORE_LOCATE_PARALLEL_MIN_MAPPED 65536
/* A gather of raw records through the mappings gives each shard at least this
 * many bytes: a shard handed to a sleeping worker costs its wake-up (5-70 us
 * on the 2-core bench VM) and the caller's wait for it, while a warm copy of
 * 256 KiB takes 20-40 us. A 96 KiB batch of 32 records was split in three
 * and woke both workers for 10 us of copying (bench/README.md, "Small
 * batches"). Records read with pread, or decoded, shard by record. */
#define STORE_GATHER_SHARD_MIN_RAW (256u << 10)
/* A timed gather touches records' pages this far apart: the smallest page. */
#define STORE_TOUCH_STRIDE 4096

static uint64_t mono_ns(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Blocks (512 bytes) this thread read from devices so far (the kernel's task
 * I/O accounting: page faults and reads that missed the page cache). */
static uint64_t thread_inblock(void) {
        struct rusage ru;
        if (getrusage(RUSAGE_THREAD, &ru) < 0 || ru.ru_inblock < 0)
                return 0;
        return (uint64_t)ru.ru_inblock;
}

/* Checks one table entry against the chunk capacity and the write frontier. */
static int store_check_loc(const zr_store *s, const zr_loc *l, uint64_t tail, zr_error *err) {
        uint64_t end = (uint64_t)l->offset + l->phys_length;
        uint64_t limit = l->chunk_id < tail_chunk(tail) ? s->chunk_cap
                       : l->chunk_id == tail_chunk(tail) ? tail_offset(tail) : 0;
        if (l->chunk_id > tail_chunk(tail) || end > limit)
                return zr_error_set(err, ZR_E_CORRUPT,
                                    "table entry {chunk %" PRIu32 ", offset %" PRIu32
                                    ", phys %" PRIu32 "} points past %" PRIu32 ".chunk's end "
                                    "(%" PRIu64 ")",
                                    l->chunk_id, l->offset, l->phys_length, l->chunk_id, limit);
        if (l->logic_length > ZR_RECORD_MAX ||
            (s->codec == ZR_CODEC_RAW && l->logic_length != l->phys_length) ||
            (s->codec != ZR_CODEC_RAW && l->phys_length < ZR_FRAME_MIN))
                return zr_error_set(err, ZR_E_CORRUPT,
                                    "table entry {chunk %" PRIu32 ", offset %" PRIu32
                                    "}: lengths %" PRIu32 "/%" PRIu32 " impossible for codec %d",
                                    l->chunk_id, l->offset, l->phys_length, l->logic_length,
                                    (int)s->codec);
        return 0;
}

/* Table entries a locate asks the memory for ahead of the one it decodes: a
 * random index is a cache and TLB miss each (~60 ns here), and a few in flight
 * at once overlap them. */
#define LOCATE_PREFETCH_AHEAD 8

/* The mapping of one file of a table (a .loc segment, a chunk), looked up once
 * for every entry or record that falls in it rather than once for each. */
typedef struct file_view {
        uint64_t id;
        const uint8_t *map;
        uint64_t len;
} file_view;

#define FILE_VIEW_NONE { UINT64_MAX, NULL, 0 }

/* The `bytes` bytes at `off` of file `id` of t through its mapping, or NULL
 * (no mapping, or past its end: the caller preads). */
static const uint8_t *view_at(const zr_files *t, file_view *v, uint64_t id, uint64_t off,
                              uint64_t bytes) {
        if (id != v->id) {
                v->map = zr_files_map(t, (uint32_t)id, &v->len);
                v->id = id;
        }
        return v->map && off + bytes <= v->len ? v->map + off : NULL;
}

static const uint8_t *entry_at(const zr_store *s, file_view *v, uint64_t idx) {
        return view_at(s->locs, v, idx >> ZR_LOC_SEGMENT_LOG2,
                       (idx & (ZR_LOC_SEGMENT_ENTRIES - 1)) * ZR_LOC_SIZE, ZR_LOC_SIZE);
}

void zr_store_prefetch_locs(const zr_store *s, const zr_loc *locs, size_t n) {
        file_view v = FILE_VIEW_NONE;
        const uint8_t *p;

        if (s->codec != ZR_CODEC_RAW)
                return;
        for (size_t i = 0; i < n; i++)
                if (locs[i].phys_length &&
                    (p = view_at(s->chunks, &v, locs[i].chunk_id, locs[i].offset, 1)))
                        __builtin_prefetch(p);
}

/* A mapped file cut short under a read (mapguard.h): the read fails. */
static int truncated(zr_error *err, const char *what) {
        return zr_error_set(err, ZR_E_CORRUPT, "%s: a store file was cut short under the read "
                            "(SIGBUS through its mapping, caught)", what);
}

/* Reads entries idx[lo..hi) into locs and checks each: from the mapping, one
 * load per entry with the entry LOCATE_PREFETCH_AHEAD later asked for first;
 * else one pread per run of consecutive indices inside a segment. */
static int locate_range(zr_store *s, const uint64_t *idx, size_t lo, size_t hi,
                        zr_loc *locs, uint64_t tail, zr_error *err) {
        file_view v = FILE_VIEW_NONE, ahead = FILE_VIEW_NONE;
        const uint8_t *p;
        size_t k = lo;
        int r;

        for (size_t i = lo; s->map && i < hi && i < lo + LOCATE_PREFETCH_AHEAD; i++)
                if ((p = entry_at(s, &ahead, idx[i])))
                        __builtin_prefetch(p);
        while (k < hi) {
                if (s->map && (p = entry_at(s, &v, idx[k]))) {
                        const uint8_t *q;
                        if (k + LOCATE_PREFETCH_AHEAD < hi &&
                            (q = entry_at(s, &ahead, idx[k + LOCATE_PREFETCH_AHEAD])))
                                __builtin_prefetch(q);
                        zr_loc_decode(p, &locs[k]);
                        r = store_check_loc(s, &locs[k], tail, err);
                        if (r < 0)
                                return r;
                        k++;
                        continue;
                }
                uint64_t seg = idx[k] >> ZR_LOC_SEGMENT_LOG2;
                size_t e = k + 1;
                while (e < hi && idx[e] == idx[e - 1] + 1 && (idx[e] >> ZR_LOC_SEGMENT_LOG2) == seg)
                        e++;
                int fd = zr_files_fd(s->locs, (uint32_t)seg);
                uint64_t bytes = (uint64_t)(e - k) * ZR_LOC_SIZE;
                uint64_t off = (idx[k] & (ZR_LOC_SEGMENT_ENTRIES - 1)) * ZR_LOC_SIZE;
                if (fd < 0)
                        return zr_error_set(err, ZR_E_CORRUPT, "%" PRIu64 ".loc: not open", seg);
                int64_t n = zr_pread_all(fd, &locs[k], bytes, off);
                if (n < 0)
                        return zr_error_errno(err, (int)-n, "%" PRIu64 ".loc: read", seg);
                if ((uint64_t)n != bytes)
                        return zr_error_set(err, ZR_E_CORRUPT,
                                            "%" PRIu64 ".loc: short read at entry %" PRIu64,
                                            seg, idx[k]);
                for (size_t i = k; i < e; i++) {
                        zr_loc_decode((const uint8_t *)&locs[i], &locs[i]);
                        r = store_check_loc(s, &locs[i], tail, err);
                        if (r < 0)
                                return r;
                }
                k = e;
        }
        return 0;
}

typedef struct locate_job {
        zr_store *s;
        const uint64_t *idx;
        size_t n;
        zr_loc *locs;
        uint64_t tail;
        shard_status *st;
} locate_job;

typedef struct locate_args {
        zr_store *s;
        const uint64_t *idx;
        size_t lo, hi;
        zr_loc *locs;
        uint64_t tail;
        zr_error *err;
} locate_args;

static int locate_guarded(void *arg) {
        locate_args *a = arg;
        return locate_range(a->s, a->idx, a->lo, a->hi, a->locs, a->tail, a->err);
}

/* locate_range(), guarded where it may read a mapping. */
int zr_store_locate_range(zr_store *s, const uint64_t *idx, size_t lo, size_t hi,
                          zr_loc *locs, uint64_t tail, zr_error *err) {
        if (!s->map)
                return locate_range(s, idx, lo, hi, locs, tail, err);
        locate_args a = { s, idx, lo, hi, locs, tail, err };
        int r = zr_mapguard_run(locate_guarded, &a);
        return r == -EFAULT ? truncated(err, "table") : r;
}

static void locate_shard(void *arg, size_t shard, size_t nshards) {
        locate_job *j = arg;
        size_t lo, hi;
        shard_range(j->n, shard, nshards, &lo, &hi);
        j->st[shard].r = zr_store_locate_range(j->s, j->idx, lo, hi, j->locs, j->tail,
                                               &j->st[shard].err);
}

/* ZR_E_RANGE naming the first index >= length, else 0: one branch-free pass
 * (the compiler vectorises the maximum), then a search only on failure. */
static int check_range(const uint64_t *idx, size_t n, uint64_t length, zr_error *err) {
        uint64_t max = 0;
        for (size_t k = 0; k < n; k++)
                max = idx[k] > max ? idx[k] : max;
        if (n == 0 || max < length)
                return 0;
        size_t k = 0;
        while (idx[k] < length)
                k++;
        return zr_error_set(err, ZR_E_RANGE, "index %" PRIu64 " out of range (length %" PRIu64 ")",
                            idx[k], length);
}

int zr_store_locate(zr_store *s, const uint64_t *idx, size_t n, zr_loc *ret_locs,
                    zr_error *err) {
        _Static_assert(sizeof(zr_loc) == ZR_LOC_SIZE, "zr_loc must be 16 bytes");
        uint64_t length = zr_store_length(s);
        uint64_t tail = atomic_load_explicit(&s->tail, memory_order_acquire);
        int r = check_range(idx, n, length, err);

        if (r < 0)
                return r;
        size_t min = s->map ? STORE_LOCATE_PARALLEL_MIN_MAPPED : STORE_LOCATE_PARALLEL_MIN_PREAD;
        if (n < min || zr_pool_threads(s->pool) == 0)
                return zr_store_locate_range(s, idx, 0, n, ret_locs, tail, err);

        size_t nshards = zr_pool_shards(s->pool, n);
        shard_status *st = calloc(nshards, sizeof(*st));
        if (!st)
                return zr_error_set(err, ENOMEM, "locate: out of memory");
        locate_job j = { s, idx, n, ret_locs, tail, st };
        zr_pool_parallel(s->pool, nshards, locate_shard, &j);
        r = zr_store_shards_result(st, nshards, err);
        free(st);
        return r;
}

/* A timed shard's preads: their time and their number. */
typedef struct pread_tally {
        uint64_t ns, calls;
} pread_tally;

/* zr_pread_all(), counted into *t when there is one. */
static int64_t tallied_pread(int fd, void *dst, uint64_t n, uint64_t off, pread_tally *t) {
        uint64_t t0 = t ? mono_ns() : 0;
        int64_t r = zr_pread_all(fd, dst, n, off);
        if (t) {
                t->ns += mono_ns() - t0;
                t->calls++;
        }
        return r;
}

static int gather_one_compressed(zr_store *s, zr_coder_ctx *x, const zr_loc *l, void *dst,
                                 bool pread, pread_tally *tally, zr_error *err) {
        int fd = zr_files_fd(s->chunks, l->chunk_id);
        if (fd < 0)
                return zr_error_set(err, ZR_E_CORRUPT, "%" PRIu32 ".chunk: not open", l->chunk_id);
        uint64_t map_len = 0;
        const uint8_t *map = pread ? NULL : zr_files_map(s->chunks, l->chunk_id, &map_len);
        const void *buf;
        if (map && (uint64_t)l->offset + l->phys_length <= map_len) {
                buf = map + l->offset; /* decompressed straight from the page cache */
        } else {
                /* a damaged entry of a chunk shorter than the capacity (its size
                 * bounds its records) must not make the staging buffer huge */
                uint64_t size = zr_files_size(s->chunks, l->chunk_id);
                if ((uint64_t)l->offset + l->phys_length > size)
                        return zr_error_set(err, ZR_E_CORRUPT,
                                            "%" PRIu32 ".chunk: the record at offset %" PRIu32
                                            " (%" PRIu32 " bytes) ends past the file (%" PRIu64
                                            " bytes)", l->chunk_id, l->offset, l->phys_length,
                                            size);
                void *staging = zr_coder_ctx_buffer(x, l->phys_length ? l->phys_length : 1);
                if (!staging)
                        return zr_error_set(err, ENOMEM, "gather: out of memory");
                int64_t n = tallied_pread(fd, staging, l->phys_length, l->offset, tally);
                if (n < 0)
                        return zr_error_errno(err, (int)-n, "%" PRIu32 ".chunk: read",
                                              l->chunk_id);
                if ((uint64_t)n != l->phys_length)
                        return zr_error_set(err, ZR_E_CORRUPT,
                                            "%" PRIu32 ".chunk: short read at offset %" PRIu32
                                            " (file truncated?)", l->chunk_id, l->offset);
                buf = staging;
        }
        zr_error e = {0};
        int r = zr_coder_decompress(s->zc, x, dst, l->logic_length, buf, l->phys_length, &e);
        if (r < 0)
                return zr_error_set(err, -r, "%" PRIu32 ".chunk offset %" PRIu32 ": %s",
                                    l->chunk_id, l->offset, e.message);
        return 0;
}

/* Reads records lo..hi into place; with a tally, counts its preads there. */
static int gather_range(gather_job *j, size_t lo, size_t hi, zr_coder_ctx *x, pread_tally *tally,
                        zr_error *err) {
        zr_store *s = j->s;
        uint8_t *packed = j->base;
        file_view v = FILE_VIEW_NONE;
        size_t k = lo;
        int r;

        while (k < hi) {
                const zr_loc *l = &j->locs[k];
                uint8_t *dst = j->dsts ? j->dsts[k] : packed;
                r = j->idx ? 0 : store_check_loc(s, l, j->tail, err); /* dense: located here */
                if (r < 0)
                        return r;
                if (s->codec != ZR_CODEC_RAW) {
                        r = gather_one_compressed(s, x, l, dst, j->pread, tally, err);
                        if (r < 0)
                                return r;
                        packed = dst + l->logic_length;
                        k++;
                        continue;
                }
                /* raw: one pread per run contiguous both on disk and in memory */
                uint64_t bytes = l->phys_length;
                size_t e = k + 1;
                while (e < hi) {
                        const zr_loc *m = &j->locs[e];
                        if (m->chunk_id != l->chunk_id || m->offset != l->offset + bytes ||
                            (j->dsts && (uint8_t *)j->dsts[e] != dst + bytes))
                                break;
                        r = j->idx ? 0 : store_check_loc(s, m, j->tail, err);
                        if (r < 0)
                                return r;
                        bytes += m->phys_length;
                        e++;
                }
                const uint8_t *src = bytes && !j->pread
                                             ? view_at(s->chunks, &v, l->chunk_id, l->offset, bytes)
                                             : NULL;
                if (src) {
                        /* no prefetch of the next record: on this VM a prefetch of a
                         * page the mapping has not faulted in stalled like a load
                         * (perf: 29% of a 4 KiB READ's daemon time on it) */
                        zr_copy(dst, src, bytes, j->stream);
                } else if (bytes > 0) {
                        int fd = zr_files_fd(s->chunks, l->chunk_id);
                        if (fd < 0)
                                return zr_error_set(err, ZR_E_CORRUPT,
                                                    "%" PRIu32 ".chunk: not open", l->chunk_id);
                        int64_t n = tallied_pread(fd, dst, bytes, l->offset, tally);
                        if (n < 0)
                                return zr_error_errno(err, (int)-n, "%" PRIu32 ".chunk: read",
                                                      l->chunk_id);
                        if ((uint64_t)n != bytes)
                                return zr_error_set(err, ZR_E_CORRUPT,
                                                    "%" PRIu32 ".chunk: short read at offset "
                                                    "%" PRIu32 " (file truncated?)",
                                                    l->chunk_id, l->offset);
                }
                packed = dst + bytes;
                k = e;
        }
        return 0;
}

/* A timed shard's first pass: one byte of every page of its records that are
 * read through a mapping, so that their faults happen here and count as
 * reading (a fault reads exactly its page: the chunks' mappings are
 * MADV_RANDOM). Returns the pages touched. An entry that fails its check is
 * skipped: gather_range() reports it. */
static uint64_t touch_range(const gather_job *j, size_t lo, size_t hi) {
        zr_store *s = j->s;
        uint64_t pages = 0;

        if (j->pread)
                return 0; /* nothing is read through a mapping */
        for (size_t k = lo; k < hi; k++) {
                const zr_loc *l = &j->locs[k];
                uint64_t map_len;
                const uint8_t *map;
                if (l->phys_length == 0 || store_check_loc(s, l, j->tail, NULL) < 0)
                        continue;
                map = zr_files_map(s->chunks, l->chunk_id, &map_len);
                if (!map || (uint64_t)l->offset + l->phys_length > map_len)
                        continue;
                const volatile uint8_t *p = map + l->offset, *end = p + l->phys_length;
                (void)*p;
                pages++;
                p = (const volatile uint8_t *)(((uintptr_t)p | (STORE_TOUCH_STRIDE - 1)) + 1);
                for (; p < end; p += STORE_TOUCH_STRIDE, pages++)
                        (void)*p;
        }
        return pages;
}

/* Times shard lo..hi of a timed gather into j->times, around gather_range(). */
static int gather_range_timed(gather_job *j, size_t lo, size_t hi, zr_coder_ctx *x,
                              zr_error *err) {
        zr_store_times *t = j->times;
        uint64_t in0 = t->sample_io ? thread_inblock() : 0;
        uint64_t t0 = mono_ns(), pages = touch_range(j, lo, hi), t1 = mono_ns();
        pread_tally tally = {0};
        int r = gather_range(j, lo, hi, x, &tally, err);
        uint64_t work = mono_ns() - t1;

        if (tally.ns > work)
                tally.ns = work;
        atomic_fetch_add(&t->pages, pages);
        atomic_fetch_add(&t->preads, tally.calls);
        atomic_fetch_add(&t->read_ns, t1 - t0 + tally.ns);
        atomic_fetch_add(j->s->codec != ZR_CODEC_RAW ? &t->decode_ns : &t->copy_ns,
                         work - tally.ns);
        if (t->sample_io)
                atomic_fetch_add(&t->device_bytes, (thread_inblock() - in0) * 512);
        return r;
}

/* A dense shard's own lookups: entries idx[lo..hi) into the scratch table,
 * each checked, and each record exactly one item. */
static int locate_dense(gather_job *j, size_t lo, size_t hi, zr_error *err) {
        int r = zr_store_locate_range(j->s, j->idx, lo, hi, j->scratch, j->tail, err);
        if (r < 0)
                return r;
        for (size_t i = lo; i < hi; i++)
                if (j->scratch[i].logic_length != j->item)
                        return zr_error_set(err, ZR_E_CORRUPT, "record %" PRIu64 " is %" PRIu32
                                            " bytes, an item is %" PRIu64, j->idx[i],
                                            j->scratch[i].logic_length, j->item);
        return 0;
}

typedef struct gather_args {
        gather_job *j;
        size_t lo, hi;
        zr_coder_ctx *x;
        zr_error *err;
} gather_args;

/* A shard's reads, timed if the gather is: the pass that touches its pages
 * reads the mappings too, so it runs under the same guard. */
static int gather_guarded(void *arg) {
        gather_args *a = arg;
        if (a->j->times)
                return gather_range_timed(a->j, a->lo, a->hi, a->x, a->err);
        return gather_range(a->j, a->lo, a->hi, a->x, NULL, a->err);
}

static void gather_shard(void *arg, size_t shard, size_t nshards) {
        gather_job *j = arg;
        zr_coder_ctx *x = NULL;
        size_t lo, hi;

        shard_range(j->n, shard, nshards, &lo, &hi);
        if (j->s->codec != ZR_CODEC_RAW) {
                x = zr_coder_ctx_get(j->s->zc);
                if (!x) {
                        j->st[shard].r = zr_error_set(&j->st[shard].err, ENOMEM,
                                                      "gather: out of memory");
                        return;
                }
        }
        gather_job local = *j; /* packed: each shard starts at its own offset */
        if (j->idx) {
                uint64_t t0 = j->times ? mono_ns() : 0;
                local.base = j->base + lo * j->item;
                j->st[shard].r = locate_dense(j, lo, hi, &j->st[shard].err);
                if (j->times)
                        atomic_fetch_add(&j->times->lookup_ns, mono_ns() - t0);
                if (j->st[shard].r < 0)
                        goto out;
        } else if (!j->dsts) {
                local.base = j->base + j->shard_off[shard];
        }
        gather_args ga = { &local, lo, hi, x, &j->st[shard].err };
        if (j->s->map) {
                int r = zr_mapguard_run(gather_guarded, &ga);
                j->st[shard].r = r == -EFAULT ? truncated(&j->st[shard].err, "gather") : r;
        } else {
                j->st[shard].r = gather_guarded(&ga);
        }
        if (j->stream)
                zr_copy_stream_done();
out:
        zr_coder_ctx_put(j->s->zc, x);
}

int zr_store_gather_run(zr_store *s, gather_job *j, zr_error *err) {
        if (s->codec == ZR_CODEC_ZSTD_DICT && !zr_store_has_dict(s))
                return zr_error_set(err, ZR_E_NO_DICT,
                                    "zstd_dict store has no dictionary: records cannot be read");
        size_t nshards = zr_pool_shards(s->pool, j->n);
        int r;

        bool packed = !j->dsts && !j->idx;

        if (s->codec == ZR_CODEC_RAW && s->map && !j->pread && nshards > 1) {
                uint64_t bytes = 0;
                if (j->idx) {
                        bytes = j->item * j->n;
                } else {
                        for (size_t i = 0; i < j->n; i++)
                                bytes += j->locs[i].logic_length;
                }
                uint64_t most = bytes / STORE_GATHER_SHARD_MIN_RAW;
                if (most < nshards)
                        nshards = most > 1 ? (size_t)most : 1;
        }

        j->tail = atomic_load_explicit(&s->tail, memory_order_acquire);
        j->st = calloc(nshards, sizeof(*j->st));
        if (packed)
                j->shard_off = calloc(nshards, sizeof(*j->shard_off));
        if (!j->st || (packed && !j->shard_off)) {
                r = zr_error_set(err, ENOMEM, "gather: out of memory");
                goto out;
        }
        if (packed) {
                uint64_t off = 0;
                for (size_t i = 0, k = 0; i < nshards; i++) {
                        size_t lo, hi;
                        shard_range(j->n, i, nshards, &lo, &hi);
                        for (; k < lo; k++)
                                off += j->locs[k].logic_length;
                        j->shard_off[i] = off;
                }
        }
        zr_pool_parallel(s->pool, nshards, gather_shard, j);
        r = zr_store_shards_result(j->st, nshards, err);
out:
        free(j->st);
        free(j->shard_off);
        return r;
}

int zr_store_gather_timed(zr_store *s, const zr_loc *locs, size_t n, void *const *dsts,
                          unsigned how, zr_store_times *t, zr_error *err) {
        if (n == 0)
                return 0;
        gather_job j = { .s = s, .locs = locs, .n = n, .dsts = dsts, .times = t,
                         .stream = how & ZR_GATHER_STREAM, .pread = how & ZR_GATHER_PREAD };
        return zr_store_gather_run(s, &j, err);
}

int zr_store_gather_locs(zr_store *s, const zr_loc *locs, size_t n, void *const *dsts,
                         zr_error *err) {
        uint64_t total = 0;
        for (size_t k = 0; k < n; k++)
                total += locs[k].logic_length;
        return zr_store_gather_timed(s, locs, n, dsts,
                                     zr_copy_streams(total) ? ZR_GATHER_STREAM : 0, NULL, err);
}

int zr_store_check_range(zr_store *s, const uint64_t *idx, size_t n, zr_error *err) {
        return check_range(idx, n, zr_store_length(s), err);
}

int zr_store_gather_dense_timed(zr_store *s, const uint64_t *idx, size_t n, uint64_t item,
                                void *dst, zr_loc *scratch, unsigned how, zr_store_times *t,
                                zr_error *err) {
        int r = check_range(idx, n, zr_store_length(s), err);
        if (r < 0 || n == 0)
                return r;
        gather_job j = { .s = s, .locs = scratch, .n = n, .base = dst, .idx = idx,
                         .scratch = scratch, .item = item, .times = t,
                         .stream = how & ZR_GATHER_STREAM, .pread = how & ZR_GATHER_PREAD };
        return zr_store_gather_run(s, &j, err);
}

int zr_store_gather_dense(zr_store *s, const uint64_t *idx, size_t n, uint64_t item, void *dst,
                          zr_loc *scratch, zr_error *err) {
        return zr_store_gather_dense_timed(s, idx, n, item, dst, scratch,
                                           zr_copy_streams(n * item) ? ZR_GATHER_STREAM : 0,
                                           NULL, err);
}

int zr_store_gather(zr_store *s, const uint64_t *idx, size_t n, void *dst,
                    uint64_t dst_size, uint64_t *ret_lens, zr_error *err) {
        zr_loc *locs;
        uint64_t total = 0;
        int r;

        if (n == 0)
                return 0;
        locs = malloc(n * sizeof(*locs));
        if (!locs)
                return zr_error_set(err, ENOMEM, "gather: out of memory");
        r = zr_store_locate(s, idx, n, locs, err);
        if (r < 0)
                goto out;
        for (size_t k = 0; k < n; k++) {
                total += locs[k].logic_length;
                if (ret_lens)
                        ret_lens[k] = locs[k].logic_length;
        }
        if (total > dst_size) {
                r = zr_error_set(err, ZR_E_BUFFER,
                                 "gather: %" PRIu64 " bytes do not fit in %" PRIu64, total,
                                 dst_size);
                goto out;
        }
        gather_job j = { .s = s, .locs = locs, .n = n, .base = dst,
                         .stream = zr_copy_streams(total) };
        r = zr_store_gather_run(s, &j, err);
out:
        free(locs);
        return r;
}

/* Reads entries [first, first+n) (n <= STORE_WALK_ENTRIES) into locs. */
int zr_store_read_table(zr_store *s, uint64_t first, size_t n, zr_loc *locs,
                        uint64_t *scratch_idx, zr_error *err) {
        for (size_t k = 0; k < n; k++)
                scratch_idx[k] = first + k;
        return zr_store_locate_range(s, scratch_idx, 0, n, locs,
                                     atomic_load_explicit(&s->tail, memory_order_acquire), err);
}
