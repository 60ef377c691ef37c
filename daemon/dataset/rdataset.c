/* rdataset.c: datasets whose stores live in object storage (rdataset.h).
 *
 * A remote dataset is an ordinary dataset opened read-only on its mirror's
 * directory, plus this: the mirror, the source (target, objects, the clients'
 * credentials), and the dataset's id in the context's list, through which the
 * disk cache's policy finds the mirror of a record it evicts. What it does
 * not do: decide what to fetch ahead (loader/prefetch.c does) or read records
 * (the batch gather does, after zr_rdataset_acquire()).
 */
#include "dataset/rdataset.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dataset/cache.h"
#include "dataset/fingerprint.h"
#include "remote/cachedir.h"
#include "util/mkdirs.h"
#include "url.h"

/* Tries of a request of an open's check: a client waits for its open's answer. */
#define CHECK_ATTEMPTS 4
/* Records a verify fetches at once, at most, and bytes. */
#define VERIFY_BATCH 4096
#define VERIFY_BYTES ((uint64_t)64 << 20)

struct zr_remote {
        zr_fetcher *f;
        int rootfd;
        char dir[256];
        zr_rcache *disk;
        pthread_mutex_t mu;       /* the list */
        zr_rdataset *open;
        uint64_t hits, misses;    /* records a gather found present, or not */
        zr_mirror_stats closed;   /* what the mirrors closed so far had counted */
};

struct zr_rdataset {
        zr_remote *ctx;
        zr_mirror *mirror;
        zr_rsrc *src;
        zr_dataset *ds;
        uint64_t id;
        bool has_fp;
        uint64_t fp;            /* its fingerprint, computed at open */
        uint64_t src_creds_id;
        zr_rdataset *next;
};

struct zr_rcheck {
        s3_target t;
        s3_creds creds;
        s3_manifest m;
        zr_robject *obj;
        size_t nobj;
        int dirfd;
};

/* ---- the context ------------------------------------------------------------------ */

/* The policy let record key go: its mirror punches it out (cache.h: called
 * with the disk cache's mutex held). */
static void disk_release(void *arg, const zr_rcache_key *key) {
        zr_remote *ctx = arg;
        pthread_mutex_lock(&ctx->mu);
        for (zr_rdataset *rd = ctx->open; rd; rd = rd->next) {
                if (rd->id != key->dataset_id)
                        continue;
                zr_loc loc;
                if (zr_store_locate(zr_dataset_store(rd->ds), &key->index, 1, &loc, NULL) == 0) {
                        zr_mrec r = { key->index, loc.chunk_id, loc.offset, loc.phys_length };
                        zr_mirror_evict(rd->mirror, &r);
                }
                break;
        }
        pthread_mutex_unlock(&ctx->mu);
}

int zr_remote_new(const zr_remote_options *o, zr_remote **ret, zr_error *err) {
        zr_remote *ctx = calloc(1, sizeof(*ctx));
        char path[4096];
        int r;

        if (!ctx)
                return zr_error_set(err, ENOMEM, "the remote stores' context");
        ctx->rootfd = -1;
        pthread_mutex_init(&ctx->mu, NULL);
        snprintf(ctx->dir, sizeof(ctx->dir), "%s", o->cache_dir);
        snprintf(path, sizeof(path), "%s/remote", o->cache_dir);
        if ((r = zr_mkdirs(path, 0700)) < 0) {
                r = zr_error_errno(err, -r, "the disk cache %s", path);
                goto fail;
        }
        ctx->rootfd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
        if (ctx->rootfd < 0) {
                r = zr_error_errno(err, errno, "the disk cache %s", path);
                goto fail;
        }
        if ((r = zr_rcache_new_external(o->budget, disk_release, ctx, &ctx->disk)) < 0) {
                r = zr_error_set(err, -r, "the disk cache's policy");
                goto fail;
        }
        if ((r = zr_fetcher_new(&o->fetch, &ctx->f, err)) < 0)
                goto fail;
        *ret = ctx;
        return 0;
fail:
        zr_remote_free(ctx);
        return r;
}

zr_remote *zr_remote_free(zr_remote *ctx) {
        if (!ctx)
                return NULL;
        zr_fetcher_free(ctx->f);
        zr_rcache_free(ctx->disk);
        if (ctx->rootfd >= 0)
                close(ctx->rootfd);
        pthread_mutex_destroy(&ctx->mu);
        free(ctx);
        return NULL;
}

void zr_remote_set_budget(zr_remote *ctx, uint64_t budget) {
        zr_rcache_set_budget(ctx->disk, budget);
}

/* ---- opening --------------------------------------------------------------------- */

zr_rcheck *zr_rcheck_free(zr_rcheck *c) {
        if (!c)
                return NULL;
        s3_wipe(&c->creds, sizeof(c->creds));
        s3_manifest_fini(&c->m);
        free(c->obj);
        if (c->dirfd >= 0)
                close(c->dirfd);
        free(c);
        return NULL;
}

int zr_rcheck_dirfd(const zr_rcheck *c) {
        return c->dirfd;
}

int zr_remote_get_set(zr_remote *ctx, const zr_remote_spec *spec, char ***ret_names,
                      size_t *ret_n, zr_error *err) {
        s3_target t;
        s3_error se = {0};
        zr_rsrc *probe;
        int r;

        if (s3_target_init(&t, spec->url, spec->endpoint, spec->region, spec->addressing,
                           &se) < 0)
                return zr_error_set(err, se.code, "%s", se.message);
        probe = zr_rsrc_new(&t, NULL, 0);
        if (!probe)
                return zr_error_set(err, ENOMEM, "opening a remote set");
        zr_fetch q = { .src = probe, .name = S3_SET_NAME, .len = S3_MANIFEST_MAX,
                       .creds = &spec->creds, .attempts = CHECK_ATTEMPTS };
        zr_fetch *qp = &q;
        r = zr_fetcher_run(ctx->f, &qp, 1, err);
        if (r == 0 && s3_set_decode(q.body, q.body_len, ret_names, ret_n, &se) < 0)
                r = zr_error_set(err, se.code, "%s/%s", zr_rsrc_url(probe), se.message);
        free(q.body);
        zr_rsrc_unref(probe);
        return r;
}

int zr_remote_check(zr_remote *ctx, const zr_remote_spec *spec, zr_rcheck **ret,
                    zr_error *err) {
        zr_rcheck *c = calloc(1, sizeof(*c));
        zr_rsrc *probe = NULL;
        zr_fetch *q = NULL, **qs = NULL;
        s3_error se = {0};
        int r;

        if (!c)
                return zr_error_set(err, ENOMEM, "opening a remote store");
        c->dirfd = -1;
        c->creds = spec->creds;
        if (s3_target_init(&c->t, spec->url, spec->endpoint, spec->region, spec->addressing,
                           &se) < 0) {
                r = zr_error_set(err, se.code, "%s", se.message);
                goto out;
        }
        /* the manifest, with the client's credentials */
        probe = zr_rsrc_new(&c->t, NULL, 0);
        if (!probe) {
                r = zr_error_set(err, ENOMEM, "opening a remote store");
                goto out;
        }
        zr_fetch mq = { .src = probe, .name = S3_MANIFEST_NAME, .len = S3_MANIFEST_MAX,
                        .creds = &c->creds, .attempts = CHECK_ATTEMPTS };
        zr_fetch *mqp = &mq;
        r = zr_fetcher_run(ctx->f, &mqp, 1, err);
        if (r < 0)
                goto out;
        r = s3_manifest_decode(mq.body, mq.body_len, &c->m, &se);
        free(mq.body);
        if (r < 0) {
                r = zr_error_set(err, se.code, "%s/%s", zr_rsrc_url(probe), se.message);
                goto out;
        }
        /* every object, with the client's credentials: the credentials rule */
        c->nobj = c->m.nobjects;
        c->obj = calloc(c->nobj, sizeof(*c->obj));
        q = calloc(c->nobj, sizeof(*q));
        qs = calloc(c->nobj, sizeof(*qs));
        if (!c->obj || !q || !qs) {
                r = zr_error_set(err, ENOMEM, "opening a remote store");
                goto out;
        }
        for (size_t i = 0; i < c->nobj; i++) {
                snprintf(c->obj[i].name, sizeof(c->obj[i].name), "%s", c->m.objects[i].name);
                c->obj[i].size = c->m.objects[i].size;
                q[i] = (zr_fetch){ .src = probe, .name = c->obj[i].name, .head = 1,
                                   .creds = &c->creds, .attempts = CHECK_ATTEMPTS };
                qs[i] = &q[i];
        }
        r = zr_fetcher_run(ctx->f, qs, c->nobj, err);
        if (r < 0)
                goto out;
        for (size_t i = 0; i < c->nobj; i++) {
                if (!q[i].has_length || q[i].length != c->obj[i].size) {
                        r = zr_error_set(err, ZR_E_STALE, "%s/%s is %" PRIu64 " bytes, its "
                                         "manifest says %" PRIu64 " (pushed again meanwhile?)",
                                         zr_rsrc_url(probe), c->obj[i].name, q[i].length,
                                         c->obj[i].size);
                        goto out;
                }
                snprintf(c->obj[i].etag, sizeof(c->obj[i].etag), "%s", q[i].etag);
        }
        c->dirfd = zr_cachedir_mkdir(ctx->rootfd, probe, c->m.id, err);
        if (c->dirfd < 0) {
                r = c->dirfd;
                goto out;
        }
        *ret = c;
        c = NULL;
        r = 0;
out:
        free(qs);
        free(q);
        zr_rsrc_unref(probe);
        zr_rcheck_free(c);
        return r;
}

static uint64_t key_cost_insert(zr_rdataset *rd, uint64_t idx, uint32_t len) {
        zr_rcache_key k = { rd->id, 0, idx };
        return (uint64_t)zr_rcache_insert_external(rd->ctx->disk, &k, len);
}

/* The mirror's hook: records that arrived enter the policy. */
static void arrived(void *arg, const zr_mrec *r, size_t n) {
        zr_rdataset *rd = arg;
        for (size_t i = 0; i < n; i++)
                key_cost_insert(rd, r[i].idx, r[i].len);
}

/* A present record found at open enters the policy as unplanned. */
static void present_at_open(void *arg, uint64_t idx) {
        zr_rdataset *rd = arg;
        zr_loc loc;
        if (zr_store_locate(zr_dataset_store(rd->ds), &idx, 1, &loc, NULL) == 0)
                key_cost_insert(rd, idx, loc.phys_length);
}

int zr_remote_open(zr_remote *ctx, zr_rcheck *c, zr_pool *pool, zr_dataset **ret,
                   zr_error *err) {
        zr_rdataset *rd = calloc(1, sizeof(*rd));
        zr_store_options opts = { .pool = pool, .read_only = 1 };
        int r;

        if (!rd)
                return zr_error_set(err, ENOMEM, "opening a remote store");
        rd->ctx = ctx;
        rd->src = zr_rsrc_new(&c->t, c->obj, c->nobj);
        if (!rd->src) {
                free(rd);
                return zr_error_set(err, ENOMEM, "opening a remote store");
        }
        r = zr_mirror_open(ctx->rootfd, rd->src, &c->m, &c->creds, ctx->f, &rd->mirror, err);
        if (r < 0)
                goto fail;
        r = zr_dataset_open(zr_mirror_dirfd(rd->mirror), &opts, &rd->ds, err);
        if (r < 0)
                goto fail;
        rd->id = zr_dataset_id(rd->ds);
        zr_mirror_set_hooks(rd->mirror, &(zr_mirror_hooks){ arrived, rd });
        zr_dataset_set_remote(rd->ds, rd);
        pthread_mutex_lock(&ctx->mu);
        rd->next = ctx->open;
        ctx->open = rd;
        pthread_mutex_unlock(&ctx->mu);
        zr_mirror_each_present(rd->mirror, present_at_open, rd);
        zr_cachedir_sweep(ctx->rootfd, rd->src, c->m.id);
        /* mirrors no daemon has open are what is left of the budget */
        zr_rcache_stats cs;
        zr_rcache_stats_get(ctx->disk, &cs);
        zr_cachedir_trim(ctx->rootfd, cs.budget > cs.bytes ? cs.budget - cs.bytes : 0);
        /* the fingerprint now, on this worker: a loader's open asks for it on
         * the daemon's loop, which must not wait for the network */
        rd->src_creds_id = zr_rsrc_creds_add(rd->src, &c->creds);
        r = zr_dataset_fingerprint(rd->ds, &rd->fp, err);
        zr_rsrc_creds_drop(rd->src, rd->src_creds_id);
        if (r < 0) {
                zr_dataset *ds = rd->ds;
                zr_dataset_close(ds, NULL); /* closes rd too */
                return r;
        }
        rd->has_fp = true;
        *ret = rd->ds;
        return 0;
fail:
        zr_mirror_close(rd->mirror);
        zr_rsrc_unref(rd->src);
        free(rd);
        return r;
}

int64_t zr_rdataset_attach(zr_dataset *ds, const zr_rcheck *c, zr_error *err) {
        zr_rdataset *rd = zr_dataset_remote(ds);
        if (!rd)
                return zr_error_set(err, EINVAL, "not a remote dataset");
        for (size_t i = 0; i < c->nobj; i++) {
                const zr_robject *o = zr_rsrc_object(rd->src, c->obj[i].name);
                if (!o || strcmp(o->etag, c->obj[i].etag) != 0)
                        return zr_error_set(err, ZR_E_STALE, "%s/%s changed since other clients "
                                            "opened it (ETag %.40s, was %.40s): open it again "
                                            "once they closed it", zr_rsrc_url(rd->src),
                                            c->obj[i].name, c->obj[i].etag, o ? o->etag : "");
        }
        uint64_t id = zr_rsrc_creds_add(rd->src, &c->creds);
        if (!id)
                return zr_error_set(err, ENOMEM, "opening %s", zr_rsrc_url(rd->src));
        return (int64_t)id;
}

void zr_rdataset_detach(zr_dataset *ds, uint64_t id) {
        zr_rdataset *rd = zr_dataset_remote(ds);
        if (rd && id)
                zr_rsrc_creds_drop(rd->src, id);
}

bool zr_rdataset_fingerprint(const zr_rdataset *rd, uint64_t *ret) {
        if (rd->has_fp)
                *ret = rd->fp;
        return rd->has_fp;
}

const char *zr_rdataset_url(const zr_rdataset *rd) {
        return zr_rsrc_url(rd->src);
}

void zr_rdataset_close(zr_rdataset *rd) {
        zr_remote *ctx;
        if (!rd)
                return;
        ctx = rd->ctx;
        /* out of the list first: the policy's entries then leave without
         * evicting (the records stay on disk for the next open) */
        pthread_mutex_lock(&ctx->mu);
        for (zr_rdataset **p = &ctx->open; *p; p = &(*p)->next)
                if (*p == rd) {
                        *p = rd->next;
                        break;
                }
        pthread_mutex_unlock(&ctx->mu);
        zr_mirror_stats ms;
        zr_mirror_stats_get(rd->mirror, &ms);
        pthread_mutex_lock(&ctx->mu);
        ctx->closed.needed_bytes += ms.needed_bytes;
        ctx->closed.fetched_bytes += ms.fetched_bytes;
        ctx->closed.shared += ms.shared;
        ctx->closed.refetched += ms.refetched;
        pthread_mutex_unlock(&ctx->mu);
        /* the mirror waits for its requests out, whose records enter the
         * policy as they arrive (arrived()); dropped after it, they hold
         * none of the budget once the dataset is closed */
        zr_mirror_close(rd->mirror);
        zr_rcache_drop(ctx->disk, rd->id);
        zr_rsrc_unref(rd->src);
        free(rd);
}

/* ---- reading ---------------------------------------------------------------------- */

/* (idx, locs)[0..n) as mirror records into a new array; locs NULL: located. */
static int to_recs(zr_dataset *ds, const uint64_t *idx, const zr_loc *locs, size_t n,
                   zr_mrec **ret, zr_error *err) {
        zr_mrec *r = malloc((n ? n : 1) * sizeof(*r));
        zr_loc *own = NULL;
        int rc;

        if (!r)
                return zr_error_set(err, ENOMEM, "a remote gather");
        if (!locs) {
                own = malloc((n ? n : 1) * sizeof(*own));
                if (!own) {
                        free(r);
                        return zr_error_set(err, ENOMEM, "a remote gather");
                }
                rc = zr_store_locate(zr_dataset_store(ds), idx, n, own, err);
                if (rc < 0) {
                        free(own);
                        free(r);
                        return rc;
                }
                locs = own;
        }
        for (size_t i = 0; i < n; i++)
                r[i] = (zr_mrec){ idx[i], locs[i].chunk_id, locs[i].offset, locs[i].phys_length };
        free(own);
        *ret = r;
        return 0;
}

int zr_rdataset_acquire(zr_dataset *ds, const uint64_t *idx, const zr_loc *locs, size_t n,
                        zr_rpin *pin, zr_error *err) {
        zr_rdataset *rd = zr_dataset_remote(ds);
        zr_mrec *r = NULL;
        int rc;

        *pin = (zr_rpin){0};
        if (!rd || n == 0)
                return 0;
        rc = to_recs(ds, idx, locs, n, &r, err);
        if (rc < 0)
                return rc;
        /* pinned first: what arrives for it cannot be evicted before it is read */
        zr_mirror_pin(rd->mirror, r, n);
        size_t miss = zr_mirror_missing(rd->mirror, r, n, NULL);
        pthread_mutex_lock(&rd->ctx->mu);
        rd->ctx->misses += miss;
        rd->ctx->hits += n - miss;
        pthread_mutex_unlock(&rd->ctx->mu);
        if (miss < n) {
                zr_rcache_key *k = malloc(n * sizeof(*k));
                if (k) {
                        for (size_t i = 0; i < n; i++)
                                k[i] = (zr_rcache_key){ rd->id, 0, idx[i] };
                        zr_rcache_touch(rd->ctx->disk, k, n);
                        free(k);
                }
        }
        rc = miss ? zr_mirror_wait(rd->mirror, r, n, err) : 0;
        if (rc < 0) {
                zr_mirror_unpin(rd->mirror, r, n);
                free(r);
                return rc;
        }
        *pin = (zr_rpin){ rd, r, n };
        return 0;
}

int zr_rdataset_pin(zr_dataset *ds, const uint64_t *idx, const zr_loc *locs, size_t n,
                    zr_rpin *pin) {
        zr_rdataset *rd = zr_dataset_remote(ds);
        zr_mrec *r = NULL;

        *pin = (zr_rpin){0};
        if (!rd || n == 0)
                return 0;
        if (to_recs(ds, idx, locs, n, &r, NULL) < 0)
                return -ENOMEM;
        zr_mirror_pin(rd->mirror, r, n);
        *pin = (zr_rpin){ rd, r, n };
        return 0;
}

void zr_rdataset_release(zr_rpin *pin) {
        if (!pin->rd)
                return;
        zr_mirror_unpin(pin->rd->mirror, pin->recs, pin->n);
        free(pin->recs);
        *pin = (zr_rpin){0};
}

size_t zr_rdataset_missing(zr_dataset *ds, const uint64_t *idx, const zr_loc *locs, size_t n,
                           uint8_t *ret) {
        zr_rdataset *rd = zr_dataset_remote(ds);
        zr_mrec *r;
        size_t k;
        if (!rd || to_recs(ds, idx, locs, n, &r, NULL) < 0)
                return 0;
        k = zr_mirror_missing(rd->mirror, r, n, ret);
        free(r);
        return k;
}

int zr_rdataset_fetch(zr_dataset *ds, const uint64_t *idx, const zr_loc *locs, size_t n,
                      uint64_t prio, zr_mirror_cb *cb, void *arg, uint64_t *ret_bytes,
                      zr_mirror_wait_t **ret_wait) {
        zr_rdataset *rd = zr_dataset_remote(ds);
        zr_mrec *r;
        int rc;
        if (!rd)
                return 1;
        rc = to_recs(ds, idx, locs, n, &r, NULL);
        if (rc < 0)
                return rc;
        if (ret_bytes) {
                uint8_t *miss = malloc(n ? n : 1);
                if (miss) {
                        zr_mirror_missing(rd->mirror, r, n, miss);
                        for (size_t i = 0; i < n; i++)
                                *ret_bytes += miss[i] ? r[i].len : 0;
                        free(miss);
                }
        }
        rc = zr_mirror_fetch(rd->mirror, r, n, prio, cb, arg, ret_wait);
        free(r);
        return rc;
}

int zr_rdataset_cancel(zr_dataset *ds, zr_mirror_wait_t *w) {
        zr_rdataset *rd = zr_dataset_remote(ds);
        return rd ? zr_mirror_cancel(rd->mirror, w) : 0;
}

uint64_t zr_rdataset_cache_budget(zr_dataset *ds) {
        zr_rdataset *rd = zr_dataset_remote(ds);
        zr_rcache_stats cs;
        if (!rd)
                return 0;
        zr_rcache_stats_get(rd->ctx->disk, &cs);
        return cs.budget;
}

void zr_rdataset_unplan_owner(zr_dataset *ds, uint64_t owner) {
        zr_rdataset *rd = zr_dataset_remote(ds);
        if (rd)
                zr_rcache_unplan_owner(rd->ctx->disk, owner);
}

static void plan_keys(zr_rdataset *rd, const uint64_t *idx, size_t n, zr_rcache_key *k) {
        for (size_t i = 0; i < n; i++)
                k[i] = (zr_rcache_key){ rd->id, 0, idx[i] };
}

void zr_rdataset_plan(zr_dataset *ds, uint64_t owner, const uint64_t *idx, size_t n,
                      uint64_t eta) {
        zr_rdataset *rd = zr_dataset_remote(ds);
        zr_rcache_key *k = rd ? malloc((n ? n : 1) * sizeof(*k)) : NULL;
        if (!k)
                return;
        plan_keys(rd, idx, n, k);
        zr_rcache_plan(rd->ctx->disk, owner, k, n, eta);
        free(k);
}

void zr_rdataset_unplan(zr_dataset *ds, uint64_t owner, const uint64_t *idx, size_t n) {
        zr_rdataset *rd = zr_dataset_remote(ds);
        zr_rcache_key *k = rd ? malloc((n ? n : 1) * sizeof(*k)) : NULL;
        if (!k)
                return;
        plan_keys(rd, idx, n, k);
        zr_rcache_unplan(rd->ctx->disk, owner, k, n);
        free(k);
}

void zr_remote_unplan_owner(zr_remote *ctx, uint64_t owner) {
        if (ctx)
                zr_rcache_unplan_owner(ctx->disk, owner);
}

int zr_rdataset_verify(zr_dataset *ds, zr_verify_report *ret, zr_error *errp) {
        zr_error first = {0}, *err = &first;
        zr_store *s = zr_dataset_store(ds);
        uint64_t n = zr_store_length(s), *idx = malloc(VERIFY_BATCH * sizeof(*idx));
        zr_loc *locs = malloc(VERIFY_BATCH * sizeof(*locs));
        void **dsts = malloc(VERIFY_BATCH * sizeof(*dsts));
        uint8_t *buf = NULL;
        zr_verify_report rep = {0};
        int rc = 0;

        if (!idx || !locs || !dsts) {
                rc = zr_error_set(err, ENOMEM, "verifying");
                goto out;
        }
        for (uint64_t i = 0; i < n;) {
                size_t k = 0;
                uint64_t bytes = 0;
                while (i + k < n && k < VERIFY_BATCH) {
                        zr_loc l;
                        idx[k] = i + k;
                        if (zr_store_locate(s, &idx[k], 1, &l, NULL) < 0)
                                break;
                        if (k > 0 && bytes + l.logic_length > VERIFY_BYTES)
                                break;
                        locs[k] = l;
                        bytes += l.logic_length;
                        k++;
                }
                if (k == 0) { /* an entry the store refuses: the store says why */
                        zr_error e = {0};
                        zr_loc l;
                        rc = zr_store_locate(s, &i, 1, &l, &e);
                        if (!rep.bad++)
                                rep.first_bad = i;
                        if (!err->code)
                                *err = e;
                        i++;
                        continue;
                }
                zr_rpin pin;
                rc = zr_rdataset_acquire(ds, idx, locs, k, &pin, err);
                if (rc < 0)
                        goto out;
                free(buf);
                buf = malloc(bytes ? bytes : 1);
                if (!buf) {
                        zr_rdataset_release(&pin);
                        rc = zr_error_set(err, ENOMEM, "verifying");
                        goto out;
                }
                uint64_t off = 0;
                for (size_t j = 0; j < k; j++) {
                        dsts[j] = buf + off;
                        off += locs[j].logic_length;
                }
                zr_error e = {0};
                if (zr_store_gather_locs(s, locs, k, dsts, &e) < 0) {
                        /* record by record, to name the bad ones */
                        for (size_t j = 0; j < k; j++) {
                                zr_error e1 = {0};
                                if (zr_store_gather_locs(s, &locs[j], 1, &dsts[j], &e1) < 0) {
                                        if (!rep.bad++)
                                                rep.first_bad = idx[j];
                                        if (!err->code)
                                                *err = e1;
                                }
                        }
                }
                zr_rdataset_release(&pin);
                rep.records += k;
                i += k;
        }
        rc = rep.bad ? -err->code : 0;
out:
        if (rc < 0 && errp && !errp->code)
                *errp = first;
        if (ret)
                *ret = rep;
        free(buf);
        free(dsts);
        free(locs);
        free(idx);
        return rc;
}

void zr_remote_stats_get(zr_remote *ctx, zr_remote_stats *ret) {
        zr_rcache_stats cs;

        memset(ret, 0, sizeof(*ret));
        zr_fetcher_stats_get(ctx->f, &ret->fetch);
        zr_rcache_stats_get(ctx->disk, &cs);
        ret->budget = cs.budget;
        ret->cached_bytes = cs.bytes;
        ret->cached_records = cs.entries;
        ret->evictions = cs.evictions;
        ret->bypassed = cs.bypassed;
        snprintf(ret->dir, sizeof(ret->dir), "%s", ctx->dir);
        pthread_mutex_lock(&ctx->mu);
        ret->hits = ctx->hits;
        ret->misses = ctx->misses;
        ret->needed_bytes = ctx->closed.needed_bytes;
        ret->fetched_bytes = ctx->closed.fetched_bytes;
        ret->shared = ctx->closed.shared;
        ret->refetched = ctx->closed.refetched;
        for (zr_rdataset *rd = ctx->open; rd; rd = rd->next) {
                zr_mirror_stats ms;
                zr_mirror_stats_get(rd->mirror, &ms);
                ret->datasets++;
                ret->disk_bytes += ms.disk_bytes;
                ret->needed_bytes += ms.needed_bytes;
                ret->fetched_bytes += ms.fetched_bytes;
                ret->shared += ms.shared;
                ret->refetched += ms.refetched;
        }
        pthread_mutex_unlock(&ctx->mu);
}
