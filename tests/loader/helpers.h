/* helpers.h: scratch stores, an engine woken through an eventfd, event
 * collection, the fixture of three datasets and the checks of a batch against
 * them, for the loader suites (run with tests/lib/check-run.h). Header-only (static
 * functions). Waiting is always on the eventfd the engine's notify() writes,
 * never on a sleep. */
#ifndef ZR_TESTS_LOADER_HELPERS_H
#define ZR_TESTS_LOADER_HELPERS_H

#include <check.h>
#include <dirent.h>
#include <fcntl.h>
#include <stdbool.h>
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
#include "check-run.h"
#include "files.h"
#include "zr-proto.h"

/* Small chunk files: no 4 GiB sparse files in tests. */
#define TEST_CHUNK_LOG2 22

/* A scratch directory (files.h) whose making cannot fail the test quietly. */
typedef tl_scratch scratch;

static inline void scratch_new(scratch *s) {
        ck_assert_int_eq(tl_scratch_new(s, "loader"), 0);
}

static inline void scratch_free(scratch *s) {
        tl_scratch_free(s);
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

/* Drops every chunk file of dataset directory `name` from the page cache. */
static inline void evict(scratch *s, const char *name) {
        char path[512];
        snprintf(path, sizeof(path), "%s/%s", s->path, name);
        DIR *d = opendir(path);
        struct dirent *de;
        ck_assert_ptr_nonnull(d);
        while ((de = readdir(d))) {
                if (!strstr(de->d_name, ".chunk"))
                        continue;
                char p[800];
                snprintf(p, sizeof(p), "%s/%s", path, de->d_name);
                int fd = open(p, O_RDONLY | O_CLOEXEC);
                ck_assert_int_ge(fd, 0);
                ck_assert_int_eq(fdatasync(fd), 0);
                ck_assert_int_eq(posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED), 0);
                close(fd);
        }
        closedir(d);
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

/* Takes l's events until its END (left in *ev): every batch before it must be
 * the next step from `first` on; it goes to check(ev, arg) when check is not
 * NULL, and is released if `release`. Returns the step the END came at. */
static inline uint64_t batches_until_end(rig *g, zr_loader *l, uint64_t first, bool release,
                                         void (*check)(const zr_loader_event *ev, void *arg),
                                         void *arg, zr_loader_event *ev) {
        for (uint64_t s = first;; s++) {
                next_event(g, l, ev);
                if (ev->kind == ZR_LOADER_EVENT_END)
                        return s;
                ck_assert_uint_eq(ev->step, s);
                if (check)
                        check(ev, arg);
                if (release)
                        zr_loader_release(l, ev->ring, ev->slot, NULL);
        }
}

/* The parameters of a one-rank loader: its sampler, batch size, seed and
 * prefetch (the rest zero). */
static inline zr_loader_params loader_params(enum zr_sampler_mode mode, uint64_t batch,
                                             uint64_t seed, uint32_t prefetch) {
        return (zr_loader_params){ .mode = mode, .batch_size = batch, .seed = seed,
                                   .world_size = 1, .prefetch = prefetch };
}

/* Takes k batches of l and releases each at once; l's counters after them into
 * *ret (may be NULL). */
static inline void take_batches(rig *g, zr_loader *l, int k, zr_loader_counters *ret) {
        zr_loader_event ev;

        for (int i = 0; i < k; i++) {
                next_batch(g, l, &ev);
                zr_loader_release(l, ev.ring, ev.slot, NULL);
        }
        if (ret)
                zr_loader_counters_get(l, ret);
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

/* ---- the suites' fixture ------------------------------------------------ */

/* The fixture's datasets: N_DENSE records each; "d" of ITEM bytes, "e" of 40,
 * "r" ragged (ragged_shape()). */
#define N_DENSE 300
#define ITEM 96

typedef struct fixture {
        scratch sc;
        rig g;
        reg dense, dense2, ragged;
} fixture;

static inline void fixture_new(fixture *f, enum zr_codec codec, uint64_t cache_bytes) {
        scratch_new(&f->sc);
        rig_new(&f->g, 2, cache_bytes);
        reg_init(&f->dense, make_dense(&f->sc, "d", N_DENSE, ITEM, codec, f->g.pool, 1));
        reg_init(&f->dense2, make_dense(&f->sc, "e", N_DENSE, 40, codec, f->g.pool, 2));
        reg_init(&f->ragged, make_ragged(&f->sc, "r", N_DENSE, codec, f->g.pool, 3));
}

static inline void fixture_free(fixture *f) {
        rig_free(&f->g);
        reg_fini(&f->dense);
        reg_fini(&f->dense2);
        reg_fini(&f->ragged);
        scratch_free(&f->sc);
}

static inline zr_loader *open_loader(fixture *f, zr_loader_stream *st, size_t n,
                              const zr_loader_params *p) {
        zr_loader *l = NULL;
        zr_error err = {0};
        ck_assert_msg(zr_loader_new(f->g.e, st, n, p, NULL, &l, &err) == 0, "%s", err.message);
        return l;
}

/* Checks one event's ragged stream against the generated records. */
static inline void check_ragged(const zr_loader *l, const zr_loader_event *ev, size_t si,
                                uint64_t tag) {
        const zr_loader_stream_batch *sb = &ev->streams[si];
        const uint8_t *ring = ev->ring_data;
        uint8_t want[24 + 13 * 3 * 2];

        ck_assert_uint_eq(sb->ndim, 2);
        ck_assert_uint_eq(sb->offset, ev->slot * zr_loader_slot_bytes(l) +
                                              zr_loader_stream_offset(l, si));
        for (uint64_t i = 0; i < ev->batch_size; i++) {
                uint64_t d[2], idx = ev->indices[i];
                ragged_shape(idx, d);
                ck_assert_uint_eq(sb->shapes[2 * i], d[0]);
                ck_assert_uint_eq(sb->shapes[2 * i + 1], d[1]);
                ck_assert_uint_eq(sb->lengths[i], d[0] * d[1] * 2);
                ck_assert_uint_eq((sb->offsets[i] - 24) % ZR_RECORD_ALIGN, 0);
                ck_assert_uint_ge(sb->offsets[i] - 24, sb->offset);
                ck_assert_uint_le(sb->offsets[i] + sb->lengths[i], sb->offset + sb->bytes);
                zr_ragged_header_write(want, d, 2);
                gen_record(want + 24, sb->lengths[i], tag, idx);
                ck_assert_int_eq(memcmp(ring + sb->offsets[i] - 24, want, 24 + sb->lengths[i]), 0);
        }
}

/* Checks a dense stream's region against a direct gather of the same step. */
static inline void check_dense(const zr_loader *l, const zr_loader_event *ev, size_t si, reg *r,
                        uint64_t item, const zr_sampler_params *sp) {
        const zr_loader_stream_batch *sb = &ev->streams[si];
        const uint8_t *ring = ev->ring_data;
        uint8_t *want = malloc(ev->batch_size * item);

        ck_assert_uint_eq(sb->bytes, ev->batch_size * item);
        ck_assert_ptr_null(sb->offsets);
        expect_dense(r->ds, sp, ev->step, want, item);
        ck_assert_int_eq(memcmp(ring + sb->offset, want, sb->bytes), 0);
        free(want);
}

/* Copies the used bytes of every stream of a batch, for comparisons. */
static inline uint8_t *batch_bytes(const zr_loader *l, const zr_loader_event *ev, size_t *ret_len) {
        const uint8_t *ring = ev->ring_data;
        size_t len = 0, at = 0;
        uint8_t *p;

        for (size_t i = 0; i < ev->nstreams; i++)
                len += ev->streams[i].bytes;
        p = malloc(len + ev->batch_size * 8);
        for (size_t i = 0; i < ev->nstreams; i++) {
                memcpy(p + at, ring + ev->streams[i].offset, ev->streams[i].bytes);
                at += ev->streams[i].bytes;
        }
        memcpy(p + at, ev->indices, ev->batch_size * 8);
        *ret_len = len + ev->batch_size * 8;
        return p;
}

#endif
