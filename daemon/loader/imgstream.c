/* imgstream.c: image streams of a loader (loader-private.h): a stream whose
 * records are encoded images, served decoded, cropped, resized and flipped
 * into one dense (batch_size, out_h, out_w, channels) uint8 block of the slot.
 *
 * A fill of such a stream gathers the batch's encoded records with the batch
 * gather (dataset/batch.h: the cache, the cold reads, a mixture's sources, all
 * as for any ragged stream) into a staging buffer of the fill's own, then
 * decodes them on the pool (image/image.h), each record straight into its
 * place in the slot: every thread that takes part takes the next record not
 * yet taken, so records of uneven cost spread over the cores. The crop and
 * flip of record j of step s are those of its global position rank ×
 * batch_size + j under the step's key (image/augment.h).
 *
 * Errors name the record ("record 1234: JPEG: ..."; a mixture's, its source
 * too), the lowest position of the batch that failed, so the message does not
 * depend on which thread got there first. With image_skip a record that fails
 * is zeros, and counted in the stream's batch metadata.
 *
 * It assumes the fill holds the stream's datasets' locks shared around the
 * gather (fill.c) and that the slot is the fill's alone.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dataset/batch.h"
#include "loader/loader-private.h"
#include "zr-proto.h"

static uint64_t now_ns(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

int zr_imgstream_setup(zr_loader *l, lstream *st, zr_error *err) {
        const zr_schema *s = st->schema;
        zr_image_params *p = &st->img;
        uint64_t B = l->sp.batch_size, item;

        if (s->kind != ZR_SCHEMA_RAGGED || s->ndim != 1 || strcmp(s->dtype.str, "|u1") != 0)
                return zr_error_set(err, ZR_E_SCHEMA, "%s: an image stream reads encoded images, "
                                    "a ragged |u1 store of ndim 1; this one is %s %s", st->name,
                                    s->kind == ZR_SCHEMA_RAGGED ? "ragged" : "dense", s->dtype.str);
        if (p->native) {
                if (!s->image.height || !s->image.width)
                        return zr_error_set(err, ZR_E_SCHEMA, "%s: size=None serves the images at "
                                            "their size, and this store's %s: give a size", st->name,
                                            s->image.formats ? "differ in size" :
                                            "schema does not say their size (not written by "
                                            "from_images)");
                p->aug.out_h = s->image.height;
                p->aug.out_w = s->image.width;
        }
        if (p->max_pixels == 0) /* the store's largest image, or the default */
                p->max_pixels = s->image.max_pixels && s->image.max_pixels <= ZR_IMAGE_PIXELS_MAX ?
                                s->image.max_pixels : ZR_IMAGE_PIXELS_DEFAULT;
        int r = zr_image_params_check(p, err);
        if (r < 0)
                return zr_error_set(err, err->code, "%s: %s", st->name, err->message);
        item = (uint64_t)p->aug.out_h * p->aug.out_w * p->channels;
        if (__builtin_mul_overflow(item, B, &st->capacity))
                return zr_error_set(err, EOVERFLOW, "%s: a batch of images overflows", st->name);
        return 0;
}

uint64_t zr_imgstream_work_bytes(const zr_loader *l, unsigned at_once) {
        unsigned __int128 t = 0;
        uint64_t threads = zr_pool_threads(l->e->pool) + 1;

        for (size_t i = 0; i < l->nstreams; i++) {
                const lstream *st = &l->streams[i];
                if (!st->image)
                        continue;
                /* each fill at once: its staging and the gather's arrays; each
                 * thread that decodes: its scratch */
                t += (unsigned __int128)(at_once + 1) * (st->in_capacity + 3 * 8 * l->sp.batch_size);
                t += (unsigned __int128)threads * zr_image_work_bytes(&st->img);
        }
        return t > UINT64_MAX ? UINT64_MAX : (uint64_t)t;
}

int zr_imgbatch_begin(imgbatch *ib, const lstream *st, uint64_t B, zr_gather *g, zr_error *err) {
        /* offsets, lengths and the shapes of records of ndim 1 */
        ib->arrays = malloc(3 * B * sizeof(uint64_t));
        if (!ib->arrays)
                return zr_error_errno(err, ENOMEM, "%s: a batch's tables", st->name);
        g->offsets = ib->arrays;
        g->lengths = ib->arrays + B;
        g->shapes = ib->arrays + 2 * B;
        return 0;
}

typedef struct decode_job {
        const zr_image_params *p;
        const zr_gather *g;
        const uint8_t *staging;
        uint8_t *dst;
        uint64_t item, key, pos0;
        int skip;
        const _Atomic int *cancel;
        _Atomic uint64_t next;
        _Atomic uint32_t skipped;
        /* the lowest failing record, and its error (under `fail_at` order) */
        _Atomic uint64_t fail_at;
        zr_error *errs;         /* per shard */
        uint64_t *fail_of;      /* per shard: its lowest failure, or UINT64_MAX */
} decode_job;

static void decode_shard(void *arg, size_t shard, size_t nshards) {
        decode_job *j = arg;
        zr_image_worker w = {0};
        uint64_t n = j->g->n;

        j->fail_of[shard] = UINT64_MAX;
        for (;;) {
                uint64_t i = atomic_fetch_add(&j->next, 1);
                if (i >= n || (j->cancel && atomic_load(j->cancel)))
                        break;
                if (!j->skip && atomic_load(&j->fail_at) < i)
                        break; /* an earlier record failed: the batch fails */
                zr_error e = {0};
                uint8_t *out = j->dst + i * j->item;
                int r = zr_image_decode(j->p, &w, j->staging + j->g->offsets[i], j->g->lengths[i],
                                        j->key, j->pos0 + i, out, &e);
                if (r == 0)
                        continue;
                if (j->skip && r != -ENOMEM) {
                        memset(out, 0, j->item);
                        atomic_fetch_add(&j->skipped, 1);
                        continue;
                }
                if (i < j->fail_of[shard]) {
                        j->fail_of[shard] = i;
                        j->errs[shard] = e;
                        if (!e.code)
                                j->errs[shard].code = -r;
                }
                uint64_t cur = atomic_load(&j->fail_at);
                while (i < cur && !atomic_compare_exchange_weak(&j->fail_at, &cur, i))
                        ;
        }
        zr_image_worker_clear(&w);
        (void)nshards;
}

int zr_imgbatch_read(imgbatch *ib, zr_loader *l, const lstream *st, zr_gather *g, uint64_t step,
                     uint8_t *dst, uint32_t *ret_skipped, zr_error *err) {
        zr_pool *pool = l->e->pool;
        size_t nshards = zr_pool_shards(pool, g->n);
        decode_job j = { .p = &st->img, .g = g, .dst = dst, .skip = st->s.image_skip,
                         .item = (uint64_t)st->img.aug.out_h * st->img.aug.out_w * st->img.channels,
                         .key = zr_augment_key(l->sp.seed, step),
                         .pos0 = (uint64_t)l->sp.rank * l->sp.batch_size, .cancel = g->cancel };
        uint64_t t0;
        int r;

        ib->staging = malloc(g->bytes ? g->bytes : 1);
        j.errs = calloc(nshards, sizeof(*j.errs) + sizeof(*j.fail_of));
        if (!ib->staging || !j.errs) {
                free(j.errs);
                return zr_error_errno(err, ENOMEM, "a batch of %zu images (%" PRIu64 " bytes)",
                                      g->n, g->bytes);
        }
        j.fail_of = (uint64_t *)(j.errs + nshards);
        r = zr_gather_read(g, ib->staging, 0, l->e->cache, pool, err);
        if (r < 0)
                goto out;
        j.staging = ib->staging;
        atomic_init(&j.next, 0);
        atomic_init(&j.skipped, 0);
        atomic_init(&j.fail_at, UINT64_MAX);
        t0 = g->times ? now_ns() : 0;
        zr_pool_parallel(pool, nshards, decode_shard, &j);
        if (g->times)
                g->times->decode_ns += now_ns() - t0;
        if (g->cancel && atomic_load(g->cancel)) {
                r = zr_error_set(err, ECANCELED, "cancelled");
                goto out;
        }
        uint64_t at = atomic_load(&j.fail_at);
        if (at != UINT64_MAX) {
                for (size_t s = 0; s < nshards; s++)
                        if (j.fail_of[s] == at) {
                                const zr_error *e = &j.errs[s];
                                if (g->sources)
                                        r = zr_error_set(err, e->code, "source %u record %" PRIu64
                                                         ": %s", g->source[at], g->idx[at],
                                                         e->message);
                                else
                                        r = zr_error_set(err, e->code, "record %" PRIu64 ": %s",
                                                         g->idx[at], e->message);
                                break;
                        }
                goto out;
        }
        *ret_skipped = atomic_load(&j.skipped);
out:
        free(j.errs);
        return r;
}

void zr_imgbatch_end(imgbatch *ib) {
        free(ib->staging);
        free(ib->arrays);
        *ib = (imgbatch){0};
}
