/* helpers.h: scratch stores, an engine woken through an eventfd, and event
 * collection for the loader suites. Header-only (static functions). Waiting is
 * always on the eventfd the engine's notify() writes, never on a sleep. */
#ifndef ZR_TESTS_LOADER_HELPERS_H
#define ZR_TESTS_LOADER_HELPERS_H

#include <check.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dataset/dataset.h"
#include "dataset/ragged.h"
#include "loader/loader.h"
#include "util/pool.h"

/* Small chunk files: no 4 GiB sparse files in tests. */
#define TEST_CHUNK_LOG2 22

typedef struct scratch {
        char path[256];
        int fd;
} scratch;

static inline void scratch_new(scratch *s) {
        const char *tmp = getenv("TMPDIR");
        snprintf(s->path, sizeof(s->path), "%s/zr-loader-XXXXXX", tmp ? tmp : "/tmp");
        ck_assert_ptr_nonnull(mkdtemp(s->path));
        s->fd = open(s->path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        ck_assert_int_ge(s->fd, 0);
}

static inline int scratch_rm_one(const char *p, const struct stat *st, int flag, struct FTW *f) {
        (void)st;
        (void)flag;
        (void)f;
        return remove(p);
}

static inline void scratch_free(scratch *s) {
        close(s->fd);
        nftw(s->path, scratch_rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

static inline uint64_t mix64(uint64_t z) {
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        return z ^ (z >> 31);
}

/* Record `i` of stream `tag`: compressible but unique bytes. */
static inline void gen_record(uint8_t *p, size_t n, uint64_t tag, uint64_t i) {
        uint64_t h = mix64(tag * 1000003 + i);
        for (size_t k = 0; k < n; k++)
                p[k] = (uint8_t)((k / 16) * 7 + (h >> ((k % 8) * 8)) + (k % 3 == 0 ? i : 0));
}

/* A dense "|u1" dataset of n records of `item` bytes in child `name` of s. */
static inline zr_dataset *make_dense(scratch *s, const char *name, uint64_t n, uint64_t item,
                                     enum zr_codec codec, zr_pool *pool, uint64_t tag) {
        zr_store_options o = { .pool = pool, .chunk_log2 = TEST_CHUNK_LOG2 };
        zr_schema sc;
        zr_dataset *ds;
        zr_error err = {0};
        uint64_t shape[2] = { n, item };
        uint8_t *data = malloc(n * item);
        int fd;

        ck_assert_ptr_nonnull(data);
        ck_assert_int_eq(mkdirat(s->fd, name, 0755), 0);
        fd = openat(s->fd, name, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        ck_assert_int_ge(fd, 0);
        ck_assert_int_eq(zr_schema_init_dense(&sc, "|u1", &item, 1, codec, &err), 0);
        ck_assert_msg(zr_dataset_create(fd, &sc, NULL, 0, &o, &ds, &err) == 0, "%s", err.message);
        for (uint64_t i = 0; i < n; i++)
                gen_record(data + i * item, item, tag, i);
        zr_batch b = { .dtype = "|u1", .data = data, .data_len = n * item, .shape = shape,
                       .ndim = 2 };
        ck_assert_msg(zr_dataset_append(ds, &b, NULL, &err) == 0, "%s", err.message);
        close(fd);
        free(data);
        return ds;
}

/* Ragged "<i2" ndim-2 record i: shape (1 + (i*7) % 13, 3). */
static inline void ragged_shape(uint64_t i, uint64_t dims[2]) {
        dims[0] = 1 + (i * 7) % 13;
        dims[1] = 3;
}

static inline zr_dataset *make_ragged(scratch *s, const char *name, uint64_t n,
                                      enum zr_codec codec, zr_pool *pool, uint64_t tag) {
        zr_store_options o = { .pool = pool, .chunk_log2 = TEST_CHUNK_LOG2 };
        zr_schema sc;
        zr_dataset *ds;
        zr_error err = {0};
        uint64_t *lens = calloc(n, sizeof(uint64_t)), total = 0, at = 0;
        uint8_t *data;
        int fd;

        ck_assert_ptr_nonnull(lens);
        for (uint64_t i = 0; i < n; i++) {
                uint64_t d[2];
                ragged_shape(i, d);
                lens[i] = 24 + d[0] * d[1] * 2;
                total += lens[i];
        }
        data = malloc(total);
        ck_assert_ptr_nonnull(data);
        for (uint64_t i = 0; i < n; i++) {
                uint64_t d[2];
                ragged_shape(i, d);
                zr_ragged_header_write(data + at, d, 2);
                gen_record(data + at + 24, lens[i] - 24, tag, i);
                at += lens[i];
        }
        ck_assert_int_eq(mkdirat(s->fd, name, 0755), 0);
        fd = openat(s->fd, name, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        ck_assert_int_ge(fd, 0);
        ck_assert_int_eq(zr_schema_init_ragged(&sc, "<i2", 2, codec, &err), 0);
        ck_assert_msg(zr_dataset_create(fd, &sc, NULL, 0, &o, &ds, &err) == 0, "%s", err.message);
        zr_batch b = { .dtype = "<i2", .data = data, .data_len = total, .lens = lens,
                       .nrecords = n };
        ck_assert_msg(zr_dataset_append(ds, &b, NULL, &err) == 0, "%s", err.message);
        close(fd);
        free(data);
        free(lens);
        return ds;
}

/* What the daemon's registry would hold for one open dataset. */
typedef struct reg {
        zr_dataset *ds;
        uint64_t id;
} reg;

static inline void reg_init(reg *r, zr_dataset *ds) {
        r->ds = ds;
        r->id = zr_dataset_id(ds);
}

static inline void reg_fini(reg *r) {
        zr_dataset_close(r->ds, NULL);
}

static inline zr_loader_stream reg_stream(reg *r, const char *name) {
        return (zr_loader_stream){ .ds = r->ds, .name = name };
}

/* An engine whose notify writes an eventfd. */
typedef struct rig {
        zr_pool *pool;
        zr_loader_engine *e;
        int efd;
} rig;

static inline void rig_notify(void *userdata) {
        uint64_t one = 1;
        rig *g = userdata;
        ck_assert_int_eq(write(g->efd, &one, 8), 8);
}

static inline void rig_new(rig *g, size_t threads, uint64_t cache_bytes) {
        zr_error err = {0};
        ck_assert_int_eq(zr_pool_new(threads, &g->pool), 0);
        g->efd = eventfd(0, EFD_CLOEXEC);
        ck_assert_int_ge(g->efd, 0);
        ck_assert_int_eq(zr_loader_engine_new(g->pool, cache_bytes, rig_notify, g, &g->e, &err), 0);
}

static inline void rig_free(rig *g) {
        g->e = zr_loader_engine_free(g->e);
        g->pool = zr_pool_free(g->pool);
        close(g->efd);
}

/* Empties the engine's ready queue (the loaders are polled directly). */
static inline void rig_drain(rig *g) {
        zr_loader *l;
        while (zr_loader_engine_next(g->e, &l) > 0)
                ;
}

/* Waits for the next event of l, RING and RING_CLOSE included. */
static inline void next_event_any(rig *g, zr_loader *l, zr_loader_event *ev) {
        for (;;) {
                uint64_t v;
                rig_drain(g);
                if (zr_loader_poll(l, ev) > 0)
                        return;
                ck_assert_int_eq(read(g->efd, &v, 8), 8);
        }
}

/* Waits for the next BATCH or END of l (rings are the client's business: the
 * engine's own mapping comes with each BATCH as ring_data). */
static inline void next_event(rig *g, zr_loader *l, zr_loader_event *ev) {
        do
                next_event_any(g, l, ev);
        while (ev->kind == ZR_LOADER_EVENT_RING || ev->kind == ZR_LOADER_EVENT_RING_CLOSE);
}

/* Waits for the next event of l, which must be a batch. */
static inline void next_batch(rig *g, zr_loader *l, zr_loader_event *ev) {
        next_event(g, l, ev);
        ck_assert_msg(ev->kind == ZR_LOADER_EVENT_BATCH, "END %d: %s", ev->code,
                      ev->message ? ev->message : "");
}

/* The expected bytes of a dense stream's batch at `step`, gathered directly. */
static inline void expect_dense(zr_dataset *ds, const zr_sampler_params *base, uint64_t step,
                                uint8_t *dst, uint64_t item) {
        zr_sampler_params p = *base;
        uint64_t *idx = malloc(p.batch_size * sizeof(uint64_t));
        zr_error err = {0};

        p.step = step;
        ck_assert_int_eq(zr_sampler_indices(&p, idx, &err), 0);
        ck_assert_int_eq(zr_dataset_gather_dense(ds, idx, p.batch_size, dst,
                                                 p.batch_size * item, &err), 0);
        free(idx);
}

#endif
