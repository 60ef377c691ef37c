/* append.c: appending a batch of records.
 *
 * Compress on the pool (contiguous shards, one context each), assign locations
 * serially, create new files durably, write the data, then the table entries,
 * then the header: the commit point. Appends serialize on append_lock; readers
 * never wait for it. It does not validate record contents: the dataset layer
 * does.
 */
#include "store/store-private.h"
#include "store/killpoint.h"

#include <errno.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/uio.h>
#include <unistd.h>

/* Runs of at least this many bytes start their writeback when written. */
#define APPEND_WRITEBACK_MIN ((uint64_t)1 << 20)

typedef struct append_job {
        zr_store *s;
        const uint8_t *hdrs;     /* zr_store_append_split(): each record's header */
        size_t hdr_bytes;
        const uint8_t *data;
        const uint64_t *lens;
        size_t n;
        int level;
        uint64_t *shard_off;     /* byte offset of each shard's first record in data */
        const uint8_t **shard_src; /* each shard's stored bytes, back to back */
        zr_coder_ctx **ctxs;
        zr_loc *locs;
        shard_status *st;
} append_job;

static void append_compress_shard(void *arg, size_t shard, size_t nshards) {
        append_job *j = arg;
        zr_store *s = j->s;
        size_t lo, hi, bound = 0, pos = 0;
        int r;

        shard_range(j->n, shard, nshards, &lo, &hi);
        for (size_t k = lo; k < hi; k++)
                bound += zr_coder_bound(s->zc, j->lens[k]);
        uint8_t *out = zr_coder_ctx_buffer(j->ctxs[shard], bound ? bound : 1);
        if (!out) {
                j->st[shard].r = zr_error_set(&j->st[shard].err, ENOMEM,
                                              "append: out of memory for %zu bytes", bound);
                return;
        }
        const uint8_t *src = j->data + j->shard_off[shard];
        for (size_t k = lo; k < hi; k++) {
                size_t phys;
                r = zr_coder_compress(s->zc, j->ctxs[shard], j->level, out + pos, bound - pos, src,
                                      j->lens[k], &phys, &j->st[shard].err);
                if (r < 0) {
                        j->st[shard].r = r;
                        return;
                }
                j->locs[k].phys_length = (uint32_t)phys;
                j->locs[k].logic_length = (uint32_t)j->lens[k];
                if (phys > s->chunk_cap) {
                        j->st[shard].r = zr_error_set(&j->st[shard].err, ZR_E_TOO_BIG,
                                                      "record %zu: %zu bytes stored, over the "
                                                      "chunk size %" PRIu64, k, phys,
                                                      s->chunk_cap);
                        return;
                }
                src += j->lens[k];
                pos += phys;
        }
        j->shard_src[shard] = out;
}

/* Writes records [k, e) of a split append (headers apart from the payloads
 * at src) to fd at off: pwritev of up to IOV_MAX pieces at a time, header,
 * payload, header, ... Returns 0 or -errno. */
static int pwrite_split(const append_job *j, int fd, size_t k, size_t e, const uint8_t *src,
                        uint64_t off) {
        struct iovec iov[1024];

        while (k < e) {
                int m = 0;
                uint64_t want = 0;
                for (; k < e && m + 2 <= 1024; k++) {
                        uint64_t pay = j->lens[k] - j->hdr_bytes;
                        iov[m++] = (struct iovec){ (void *)(j->hdrs + k * j->hdr_bytes),
                                                   j->hdr_bytes };
                        iov[m++] = (struct iovec){ (void *)src, (size_t)pay };
                        src += pay;
                        want += j->lens[k];
                }
                struct iovec *v = iov;
                while (want > 0) {
                        ssize_t w = pwritev(fd, v, m, (off_t)off);
                        if (w < 0) {
                                if (errno == EINTR)
                                        continue;
                                return -errno;
                        }
                        if (w == 0)
                                return -EIO;
                        off += (uint64_t)w;
                        want -= (uint64_t)w;
                        /* past what went; the rest of a piece cut short */
                        while (m > 0 && (size_t)w >= v->iov_len) {
                                w -= (ssize_t)v->iov_len;
                                v++;
                                m--;
                        }
                        if (m > 0) {
                                v->iov_base = (uint8_t *)v->iov_base + w;
                                v->iov_len -= (size_t)w;
                        }
                }
        }
        return 0;
}

static void append_write_shard(void *arg, size_t shard, size_t nshards) {
        append_job *j = arg;
        zr_store *s = j->s;
        size_t lo, hi;

        shard_range(j->n, shard, nshards, &lo, &hi);
        const uint8_t *src = j->shard_src[shard];
        size_t k = lo;
        while (k < hi) {
                /* one pwrite per run of records contiguous in one chunk */
                const zr_loc *first = &j->locs[k];
                uint64_t bytes = first->phys_length;
                size_t e = k + 1;
                while (e < hi && j->locs[e].chunk_id == first->chunk_id &&
                       j->locs[e].offset == first->offset + bytes) {
                        bytes += j->locs[e].phys_length;
                        e++;
                }
                uint64_t from_src = bytes - (j->hdrs ? (uint64_t)(e - k) * j->hdr_bytes : 0);
                if (bytes > 0) {
                        int fd = zr_files_fd(s->chunks, first->chunk_id);
                        int r = fd < 0 ? -EBADF
                                : j->hdrs ? pwrite_split(j, fd, k, e, src, first->offset)
                                          : zr_pwrite_all(fd, src, bytes, first->offset);
                        if (r < 0) {
                                j->st[shard].r = zr_error_errno(&j->st[shard].err, -r,
                                                                "%" PRIu32 ".chunk: write",
                                                                first->chunk_id);
                                return;
                        }
                        /* a large run's writeback starts now, beside the
                         * writer's next batch, not all at its SYNC (a
                         * conversion's commit waited for every byte it had
                         * written: below the kernel's background threshold
                         * none had gone); a hint: its failure is the SYNC's */
                        if (bytes >= APPEND_WRITEBACK_MIN)
                                (void)sync_file_range(fd, (off_t)first->offset, (off_t)bytes,
                                                      SYNC_FILE_RANGE_WRITE);
                }
                src += from_src;
                k = e;
        }
}

/* Writes the encoded entries [first, first+n) of the table. */
static int store_put_locs(zr_store *s, uint64_t first, const uint8_t *enc, size_t n,
                          zr_error *err) {
        while (n > 0) {
                uint32_t seg = (uint32_t)(first >> ZR_LOC_SEGMENT_LOG2);
                uint64_t in_seg = first & (ZR_LOC_SEGMENT_ENTRIES - 1);
                uint64_t run = ZR_LOC_SEGMENT_ENTRIES - in_seg;
                if (run > n)
                        run = n;
                int fd = zr_files_fd(s->locs, seg);
                int r = fd < 0 ? -EBADF
                               : zr_pwrite_all(fd, enc, run * ZR_LOC_SIZE, in_seg * ZR_LOC_SIZE);
                if (r < 0)
                        return zr_error_errno(err, -r, "%" PRIu32 ".loc: write", seg);
                ZR_KILLPOINT(ZR_KP_APPEND_TABLE_WRITTEN);
                enc += run * ZR_LOC_SIZE;
                first += run;
                n -= run;
        }
        return 0;
}

int zr_store_append(zr_store *s, const void *data, const uint64_t *lens, size_t n,
                    uint64_t *ret_first, zr_error *err) {
        return zr_store_append_level(s, 0, data, lens, n, ret_first, err);
}

static int append(zr_store *s, int level, const uint8_t *hdrs, size_t hdr_bytes,
                  const void *data, const uint64_t *lens, size_t n, uint64_t *ret_first,
                  zr_error *err) {
        append_job j = { .s = s, .hdrs = hdrs, .hdr_bytes = hdr_bytes, .data = data,
                         .lens = lens, .n = n, .level = level };
        size_t nshards = 0;
        int r;

        pthread_mutex_lock(&s->append_lock);
        r = zr_store_check_writable(s, err);
        if (r < 0)
                goto out;
        if (level != 0 && (level < ZR_LEVEL_MIN || level > ZR_LEVEL_MAX)) {
                r = zr_error_set(err, EINVAL, "level %d: a level is %d to %d (zstd's scale)",
                                 level, ZR_LEVEL_MIN, ZR_LEVEL_MAX);
                goto out;
        }
        if (s->codec == ZR_CODEC_ZSTD_DICT && !zr_store_has_dict(s)) {
                r = zr_error_set(err, ZR_E_NO_DICT,
                                 "zstd_dict store has no dictionary: install one first");
                goto out;
        }
        for (size_t k = 0; k < n; k++)
                if (lens[k] > ZR_RECORD_MAX) {
                        r = zr_error_set(err, ZR_E_TOO_BIG,
                                         "record %zu is %" PRIu64 " bytes, over 2^31", k,
                                         lens[k]);
                        goto out;
                }
        uint64_t length = atomic_load(&s->length);
        if (ret_first)
                *ret_first = length;
        if (n == 0)
                goto out;
        if (!data) {
                r = zr_error_set(err, EINVAL, "append: no data");
                goto out;
        }
        if (hdrs && s->codec != ZR_CODEC_RAW) {
                r = zr_error_set(err, EINVAL, "append: headers apart only for a raw store");
                goto out;
        }
        for (size_t k = 0; hdrs && k < n; k++)
                if (lens[k] < hdr_bytes) {
                        r = zr_error_set(err, EINVAL, "append: record %zu is shorter than its "
                                         "header", k);
                        goto out;
                }

        nshards = zr_pool_shards(s->pool, n);
        j.shard_off = calloc(nshards, sizeof(*j.shard_off));
        j.shard_src = calloc(nshards, sizeof(*j.shard_src));
        j.ctxs = calloc(nshards, sizeof(*j.ctxs));
        j.st = calloc(nshards, sizeof(*j.st));
        j.locs = malloc(n * sizeof(*j.locs));
        if (!j.shard_off || !j.shard_src || !j.ctxs || !j.st || !j.locs) {
                r = zr_error_set(err, ENOMEM, "append: out of memory");
                goto out;
        }
        {
                uint64_t off = 0;
                for (size_t i = 0, k = 0; i < nshards; i++) {
                        size_t lo, hi;
                        shard_range(n, i, nshards, &lo, &hi);
                        for (; k < lo; k++)
                                off += lens[k];
                        j.shard_off[i] = off;
                        j.shard_src[i] = j.data + off;
                }
        }

        if (s->codec == ZR_CODEC_RAW) {
                for (size_t k = 0; k < n; k++) {
                        j.locs[k].phys_length = (uint32_t)lens[k];
                        j.locs[k].logic_length = (uint32_t)lens[k];
                        if (lens[k] > s->chunk_cap) {
                                r = zr_error_set(err, ZR_E_TOO_BIG,
                                                 "record %zu: %" PRIu64 " bytes, over the chunk "
                                                 "size %" PRIu64, k, lens[k], s->chunk_cap);
                                goto out;
                        }
                }
        } else {
                r = zr_coder_prepare(s->zc, level, err);
                if (r < 0)
                        goto out;
                for (size_t i = 0; i < nshards; i++) {
                        j.ctxs[i] = zr_coder_ctx_get(s->zc);
                        if (!j.ctxs[i]) {
                                r = zr_error_set(err, ENOMEM, "append: out of memory");
                                goto out;
                        }
                }
                zr_pool_parallel(s->pool, nshards, append_compress_shard, &j);
                r = zr_store_shards_result(j.st, nshards, err);
                if (r < 0)
                        goto out;
        }

        ZR_KILLPOINT(ZR_KP_APPEND_COMPRESSED);

        /* Assign locations in order; no record straddles a chunk. */
        uint64_t old_tail = atomic_load(&s->tail);
        uint64_t c = tail_chunk(old_tail), o = tail_offset(old_tail);
        for (size_t k = 0; k < n; k++) {
                uint64_t p = j.locs[k].phys_length;
                if (o + p > s->chunk_cap) {
                        c++;
                        o = 0;
                }
                j.locs[k].chunk_id = (uint32_t)c;
                j.locs[k].offset = (uint32_t)o;
                o += p;
                if (o == s->chunk_cap) {
                        c++;
                        o = 0;
                }
        }
        if (c > UINT32_MAX) {
                r = zr_error_set(err, ENOSPC, "store is full: 2^32 chunks");
                goto out;
        }
        int made = 0;
        for (uint64_t id = tail_chunk(old_tail); id <= c; id++) {
                int created;
                r = zr_store_open_file(s, s->chunks, (uint32_t)id, 1, 0, ".chunk", &created, err);
                if (r < 0)
                        goto out;
                if (created) {
                        ZR_KILLPOINT(ZR_KP_APPEND_FILE_CREATED);
                        made++;
                }
        }
        r = zr_store_open_locs(s, length + n, 1, &made, err);
        if (r < 0)
                goto out;
        if (made > 0) {
                r = zr_store_dir_durable(s, err);
                if (r < 0)
                        goto out;
                ZR_KILLPOINT(ZR_KP_APPEND_FILES_DURABLE);
        }

        if (s->codec == ZR_CODEC_RAW) {
                /* The batch is contiguous in memory and (between rollovers) on
                 * disk: one pwrite per chunk on the caller. Writers to one file
                 * serialize in the kernel anyway, so threads would only add
                 * wake-ups. */
                append_write_shard(&j, 0, 1);
                r = zr_store_shards_result(j.st, 1, err);
        } else {
                zr_pool_parallel(s->pool, nshards, append_write_shard, &j);
                r = zr_store_shards_result(j.st, nshards, err);
        }
        if (r < 0)
                goto out;
        ZR_KILLPOINT(ZR_KP_APPEND_DATA_WRITTEN);

        /* Commit: table entries, then the length. */
        uint8_t *enc = (uint8_t *)j.locs;
        for (size_t k = 0; k < n; k++)
                zr_loc_encode(&j.locs[k], enc + k * ZR_LOC_SIZE);
        r = store_put_locs(s, length, enc, n, err);
        if (r < 0)
                goto out;
        uint64_t new_tail = tail_make(c, o);
        r = zr_store_write_header(s, length + n, new_tail, err);
        if (r < 0)
                goto out;
        ZR_KILLPOINT(ZR_KP_APPEND_COMMITTED);
        atomic_store_explicit(&s->tail, new_tail, memory_order_release);
        atomic_store_explicit(&s->length, length + n, memory_order_release);
        r = 0;
out:
        if (j.ctxs)
                for (size_t i = 0; i < nshards; i++)
                        zr_coder_ctx_put(s->zc, j.ctxs[i]);
        free(j.shard_off);
        free(j.shard_src);
        free(j.ctxs);
        free(j.st);
        free(j.locs);
        pthread_mutex_unlock(&s->append_lock);
        return r;
}

int zr_store_append_level(zr_store *s, int level, const void *data, const uint64_t *lens,
                          size_t n, uint64_t *ret_first, zr_error *err) {
        return append(s, level, NULL, 0, data, lens, n, ret_first, err);
}

int zr_store_append_split(zr_store *s, const void *hdrs, size_t hdr_bytes, const void *data,
                          const uint64_t *lens, size_t n, uint64_t *ret_first, zr_error *err) {
        return append(s, 0, hdrs, hdr_bytes, data, lens, n, ret_first, err);
}
