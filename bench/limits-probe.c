/* limits-probe.c: the memcpy and zstd gather probes and the thread team they run on.
 *
 * The team is the smallest persistent fork-join: a generation counter under a
 * mutex wakes the workers, a countdown tells the caller that all shards are
 * done. It is for the benchmarks only: it has no queue and no nesting, and it
 * assumes one caller at a time. See limits-probe.h.
 */
#include "limits-probe.h"
#include "util/copy.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct limits_team {
        pthread_mutex_t lock;
        pthread_cond_t wake;
        pthread_cond_t done;
        size_t nthreads;   /* counting the caller */
        uint64_t generation;
        size_t pending;    /* worker shards not yet finished */
        int stop;
        limits_shard_fn fn;
        void *arg;
        pthread_t *threads;
        size_t started;
};

typedef struct team_worker {
        limits_team *team;
        size_t shard;
} team_worker;

static void *team_main(void *p) {
        team_worker *w = p;
        limits_team *t = w->team;
        size_t shard = w->shard;
        uint64_t seen = 0;

        free(w);
        pthread_mutex_lock(&t->lock);
        for (;;) {
                while (!t->stop && t->generation == seen)
                        pthread_cond_wait(&t->wake, &t->lock);
                if (t->stop)
                        break;
                seen = t->generation;
                limits_shard_fn fn = t->fn;
                void *arg = t->arg;
                pthread_mutex_unlock(&t->lock);
                fn(arg, shard, t->nthreads);
                pthread_mutex_lock(&t->lock);
                if (--t->pending == 0)
                        pthread_cond_signal(&t->done);
        }
        pthread_mutex_unlock(&t->lock);
        return NULL;
}

int limits_team_new(size_t nthreads, limits_team **ret) {
        limits_team *t;
        int r;

        if (nthreads == 0)
                return -EINVAL;
        t = calloc(1, sizeof(*t));
        if (!t)
                return -ENOMEM;
        pthread_mutex_init(&t->lock, NULL);
        pthread_cond_init(&t->wake, NULL);
        pthread_cond_init(&t->done, NULL);
        t->nthreads = nthreads;
        t->threads = calloc(nthreads, sizeof(*t->threads));
        if (!t->threads) {
                r = -ENOMEM;
                goto fail;
        }
        for (size_t i = 1; i < nthreads; i++) {
                team_worker *w = malloc(sizeof(*w));
                if (!w) {
                        r = -ENOMEM;
                        goto fail;
                }
                w->team = t;
                w->shard = i;
                r = pthread_create(&t->threads[t->started], NULL, team_main, w);
                if (r != 0) {
                        free(w);
                        r = -r;
                        goto fail;
                }
                t->started++;
        }
        *ret = t;
        return 0;
fail:
        limits_team_free(t);
        return r;
}

limits_team *limits_team_free(limits_team *t) {
        if (!t)
                return NULL;
        pthread_mutex_lock(&t->lock);
        t->stop = 1;
        pthread_cond_broadcast(&t->wake);
        pthread_mutex_unlock(&t->lock);
        for (size_t i = 0; i < t->started; i++)
                pthread_join(t->threads[i], NULL);
        free(t->threads);
        pthread_cond_destroy(&t->done);
        pthread_cond_destroy(&t->wake);
        pthread_mutex_destroy(&t->lock);
        free(t);
        return NULL;
}

size_t limits_team_size(const limits_team *t) {
        return t ? t->nthreads : 1;
}

void limits_team_run(limits_team *t, limits_shard_fn fn, void *arg) {
        if (!t || t->nthreads == 1) {
                fn(arg, 0, 1);
                return;
        }
        pthread_mutex_lock(&t->lock);
        t->fn = fn;
        t->arg = arg;
        t->pending = t->nthreads - 1;
        t->generation++;
        pthread_cond_broadcast(&t->wake);
        pthread_mutex_unlock(&t->lock);

        fn(arg, 0, t->nthreads);

        pthread_mutex_lock(&t->lock);
        while (t->pending > 0)
                pthread_cond_wait(&t->done, &t->lock);
        pthread_mutex_unlock(&t->lock);
}

/* [*ret_begin, *ret_end) is shard s of n over `items` items, contiguous. */
static void shard_range(size_t items, size_t s, size_t n, size_t *ret_begin, size_t *ret_end) {
        *ret_begin = items * s / n;
        *ret_end = items * (s + 1) / n;
}

typedef struct memcpy_job {
        uint8_t *dst;
        const uint8_t *src;
        size_t rec;
        const uint64_t *idx;
        size_t n;
        bool stream;
} memcpy_job;

static void memcpy_shard(void *arg, size_t s, size_t ns) {
        memcpy_job *j = arg;
        size_t b, e;
        shard_range(j->n, s, ns, &b, &e);
        for (size_t i = b; i < e; i++)
                zr_copy(j->dst + i * j->rec, j->src + j->idx[i] * j->rec, j->rec, j->stream);
        if (j->stream)
                zr_copy_stream_done();
}

void limits_memcpy_gather(limits_team *team, uint8_t *dst, const uint8_t *src, size_t rec,
                          const uint64_t *idx, size_t n) {
        memcpy_job j = { .dst = dst, .src = src, .rec = rec, .idx = idx, .n = n };
        limits_team_run(team, memcpy_shard, &j);
}

void limits_stream_gather(limits_team *team, uint8_t *dst, const uint8_t *src, size_t rec,
                          const uint64_t *idx, size_t n) {
        memcpy_job j = { .dst = dst, .src = src, .rec = rec, .idx = idx, .n = n, .stream = true };
        limits_team_run(team, memcpy_shard, &j);
}

typedef struct pread_job {
        const int *fd;
        const uint64_t *off;
        size_t rec;
        uint8_t *dst;
        const uint64_t *idx;
        size_t n;
        int failed; /* a positive errno, or EIO for a short read */
} pread_job;

static void pread_shard(void *arg, size_t s, size_t ns) {
        pread_job *j = arg;
        size_t b, e;
        shard_range(j->n, s, ns, &b, &e);
        for (size_t i = b; i < e; i++) {
                uint64_t k = j->idx[i];
                size_t done = 0;
                while (done < j->rec) {
                        ssize_t r = pread(j->fd[k], j->dst + i * j->rec + done, j->rec - done,
                                          (off_t)(j->off[k] + done));
                        if (r < 0 && errno == EINTR)
                                continue;
                        if (r <= 0) {
                                __atomic_store_n(&j->failed, r < 0 ? errno : EIO, __ATOMIC_RELAXED);
                                return;
                        }
                        done += (size_t)r;
                }
        }
}

int limits_pread_gather(limits_team *team, const int *fd, const uint64_t *off, size_t rec,
                        uint8_t *dst, const uint64_t *idx, size_t n) {
        pread_job j = { .fd = fd, .off = off, .rec = rec, .dst = dst, .idx = idx, .n = n };
        limits_team_run(team, pread_shard, &j);
        return j.failed ? -j.failed : 0;
}

typedef struct compress_job {
        const uint8_t *src;
        size_t rec;
        int level;
        const ZSTD_CDict *cdict;
        limits_frames *f;
        int failed;
} compress_job;

static void compress_shard(void *arg, size_t s, size_t ns) {
        compress_job *j = arg;
        size_t b, e, bound = ZSTD_compressBound(j->rec);
        ZSTD_CCtx *cctx = ZSTD_createCCtx();
        uint8_t *tmp = malloc(bound);

        if (!cctx || !tmp)
                goto fail;
        ZSTD_CCtx_setParameter(cctx, ZSTD_c_checksumFlag, 1);
        if (j->cdict) {
                if (ZSTD_isError(ZSTD_CCtx_refCDict(cctx, j->cdict)))
                        goto fail;
        } else {
                ZSTD_CCtx_setParameter(cctx, ZSTD_c_compressionLevel, j->level);
        }
        shard_range(j->f->n, s, ns, &b, &e);
        for (size_t i = b; i < e; i++) {
                size_t r = ZSTD_compress2(cctx, tmp, bound, j->src + i * j->rec, j->rec);
                if (ZSTD_isError(r))
                        goto fail;
                j->f->frame[i] = malloc(r ? r : 1);
                if (!j->f->frame[i])
                        goto fail;
                memcpy(j->f->frame[i], tmp, r);
                j->f->len[i] = r;
        }
        goto out;
fail:
        __atomic_store_n(&j->failed, 1, __ATOMIC_RELAXED);
out:
        free(tmp);
        ZSTD_freeCCtx(cctx);
}

limits_frames *limits_frames_alloc(size_t n, size_t rec) {
        limits_frames *f = calloc(1, sizeof(*f));

        if (!f)
                return NULL;
        f->n = n;
        f->rec = rec;
        f->frame = calloc(n ? n : 1, sizeof(*f->frame));
        f->len = calloc(n ? n : 1, sizeof(*f->len));
        if (!f->frame || !f->len)
                return limits_frames_free(f);
        return f;
}

int limits_frames_new(limits_team *team, const uint8_t *src, size_t rec, size_t n, int level,
                      const ZSTD_CDict *cdict, limits_frames **ret) {
        limits_frames *f = limits_frames_alloc(n, rec);
        int r;

        if (!f)
                return -ENOMEM;
        compress_job j = { .src = src, .rec = rec, .level = level, .cdict = cdict, .f = f };
        limits_team_run(team, compress_shard, &j);
        if (j.failed) {
                r = -EIO;
                goto fail;
        }
        for (size_t i = 0; i < n; i++)
                f->total += f->len[i];
        *ret = f;
        return 0;
fail:
        limits_frames_free(f);
        return r;
}

limits_frames *limits_frames_free(limits_frames *f) {
        if (!f)
                return NULL;
        if (f->frame)
                for (size_t i = 0; i < f->n; i++)
                        free(f->frame[i]);
        free(f->frame);
        free(f->len);
        free(f);
        return NULL;
}

typedef struct zstd_job {
        ZSTD_DCtx *const *dctx;
        const ZSTD_DDict *ddict;
        const limits_frames *f;
        uint8_t *dst;
        const uint64_t *idx;
        size_t n;
        int failed;
} zstd_job;

static void zstd_shard(void *arg, size_t s, size_t ns) {
        zstd_job *j = arg;
        ZSTD_DCtx *dctx = j->dctx[s];
        size_t rec = j->f->rec, b, e;

        shard_range(j->n, s, ns, &b, &e);
        for (size_t i = b; i < e; i++) {
                uint64_t k = j->idx[i];
                size_t r;
                if (j->ddict)
                        r = ZSTD_decompress_usingDDict(dctx, j->dst + i * rec, rec,
                                                       j->f->frame[k], j->f->len[k], j->ddict);
                else
                        r = ZSTD_decompressDCtx(dctx, j->dst + i * rec, rec,
                                                j->f->frame[k], j->f->len[k]);
                if (ZSTD_isError(r) || r != rec)
                        __atomic_store_n(&j->failed, 1, __ATOMIC_RELAXED);
        }
}

int limits_zstd_gather(limits_team *team, ZSTD_DCtx *const *dctx, const ZSTD_DDict *ddict,
                       const limits_frames *f, uint8_t *dst, const uint64_t *idx, size_t n) {
        zstd_job j = { .dctx = dctx, .ddict = ddict, .f = f, .dst = dst, .idx = idx, .n = n };
        limits_team_run(team, zstd_shard, &j);
        return j.failed ? -EIO : 0;
}
