/* test-loader.c: the loader engine against the contract of PROTOCOL.md section
 * 10: batches bit-exact and in step order, resume equivalence, slots and
 * releases, sharding, shared work between identical loaders, cache accounting,
 * staleness, capacity, fairness, the sampler's domain, and teardown with work in
 * flight. Stores are small and made in a temp dir. */
#include "helpers.h"

#include <inttypes.h>
#include <sys/mman.h>

#include "zr-proto.h"

#define N_DENSE 300
#define ITEM 96

typedef struct fixture {
        scratch sc;
        rig g;
        reg dense, dense2, ragged;
} fixture;

static void fixture_new(fixture *f, enum zr_codec codec, uint64_t cache_bytes) {
        scratch_new(&f->sc);
        rig_new(&f->g, 2, cache_bytes);
        reg_init(&f->dense, make_dense(&f->sc, "d", N_DENSE, ITEM, codec, f->g.pool, 1));
        reg_init(&f->dense2, make_dense(&f->sc, "e", N_DENSE, 40, codec, f->g.pool, 2));
        reg_init(&f->ragged, make_ragged(&f->sc, "r", N_DENSE, codec, f->g.pool, 3));
}

static void fixture_free(fixture *f) {
        rig_free(&f->g);
        reg_fini(&f->dense);
        reg_fini(&f->dense2);
        reg_fini(&f->ragged);
        scratch_free(&f->sc);
}

static zr_loader *open_loader(fixture *f, zr_loader_stream *st, size_t n,
                              const zr_loader_params *p) {
        zr_loader *l = NULL;
        zr_error err = {0};
        ck_assert_msg(zr_loader_new(f->g.e, st, n, p, NULL, &l, &err) == 0, "%s", err.message);
        return l;
}

/* Checks one event's ragged stream against the generated records. */
static void check_ragged(const zr_loader *l, const zr_loader_event *ev, size_t si, uint64_t tag) {
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
static void check_dense(const zr_loader *l, const zr_loader_event *ev, size_t si, reg *r,
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
static uint8_t *batch_bytes(const zr_loader *l, const zr_loader_event *ev, size_t *ret_len) {
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

/* Resume equivalence and content, for every sampler, codec, one and several
 * streams, dense and ragged: steps S..S+K of a fresh loader opened at S, on a
 * fresh engine (a daemon restart), are byte-identical to the same steps of a
 * run opened at 0, and every batch equals a direct gather of its step. */
static void run_resume(enum zr_codec codec) {
        static const enum zr_sampler_mode modes[] = { ZR_SAMPLER_SEQUENTIAL, ZR_SAMPLER_IID,
                                                      ZR_SAMPLER_CYCLIC };
        const uint64_t S = 7, K = 6;
        fixture f;

        fixture_new(&f, codec, 1 << 20);
        for (size_t m = 0; m < 3; m++) {
                for (int multi = 0; multi < 2; multi++) {
                        zr_loader_stream st[3] = { reg_stream(&f.dense, "d"),
                                                   reg_stream(&f.ragged, "r"),
                                                   reg_stream(&f.dense2, "e") };
                        size_t ns = multi ? 3 : 1;
                        zr_loader_params p = { .mode = modes[m], .batch_size = 16, .seed = 99,
                                               .world_size = 1, .prefetch = 3 };
                        zr_sampler_params sp = { .mode = modes[m], .n = N_DENSE,
                                                 .batch_size = 16, .seed = 99, .world_size = 1 };
                        uint8_t *seen[16];
                        size_t seen_len[16];
                        zr_loader_event ev;
                        zr_loader *l;

                        if (!multi) /* a single ragged stream too */
                                st[0] = m == 1 ? reg_stream(&f.ragged, "r") : st[0];
                        l = open_loader(&f, st, ns, &p);
                        for (uint64_t s = 0; s < S + K; s++) {
                                next_batch(&f.g, l, &ev);
                                ck_assert_uint_eq(ev.step, s);
                                for (size_t i = 0; i < ns; i++) {
                                        if (st[i].ds == f.ragged.ds)
                                                check_ragged(l, &ev, i, 3);
                                        else if (st[i].ds == f.dense.ds)
                                                check_dense(l, &ev, i, &f.dense, ITEM, &sp);
                                        else
                                                check_dense(l, &ev, i, &f.dense2, 40, &sp);
                                }
                                if (s >= S)
                                        seen[s - S] = batch_bytes(l, &ev, &seen_len[s - S]);
                                ck_assert_int_eq(zr_loader_release(l, ev.ring, ev.slot, NULL), 0);
                        }
                        zr_loader_free(l);

                        /* resumed on a fresh engine and pool, as after a daemon
                         * restart (the stores stay open: their state is on disk) */
                        rig g2;
                        zr_error err = {0};
                        rig_new(&g2, 1, 1 << 20);
                        p.start_step = S;
                        ck_assert_msg(zr_loader_new(g2.e, st, ns, &p, NULL, &l, &err) == 0, "%s",
                                      err.message);
                        for (uint64_t k = 0; k < K; k++) {
                                size_t len;
                                uint8_t *b;
                                next_batch(&g2, l, &ev);
                                ck_assert_uint_eq(ev.step, S + k);
                                b = batch_bytes(l, &ev, &len);
                                ck_assert_uint_eq(len, seen_len[k]);
                                ck_assert_int_eq(memcmp(b, seen[k], len), 0);
                                free(b);
                                free(seen[k]);
                                ck_assert_int_eq(zr_loader_release(l, ev.ring, ev.slot, NULL), 0);
                        }
                        zr_loader_free(l);
                        rig_free(&g2);
                }
        }
        fixture_free(&f);
}

START_TEST(test_resume_raw) {
        run_resume(ZR_CODEC_RAW);
}
END_TEST

START_TEST(test_resume_zstd) {
        run_resume(ZR_CODEC_ZSTD);
}
END_TEST

/* Opening far away (step 10^9, and the last steps of the domain). */
START_TEST(test_far_steps_and_domain_end) {
        fixture f;
        zr_loader_stream st;
        zr_loader_params p = { .mode = ZR_SAMPLER_CYCLIC, .batch_size = 8, .seed = 5,
                               .start_step = 1000000000, .world_size = 1, .prefetch = 2 };
        zr_sampler_params sp = { .mode = ZR_SAMPLER_CYCLIC, .n = N_DENSE, .batch_size = 8,
                                 .seed = 5, .world_size = 1 };
        zr_loader_event ev;
        zr_loader *l;

        fixture_new(&f, ZR_CODEC_RAW, 0);
        st = reg_stream(&f.dense, "d");
        l = open_loader(&f, &st, 1, &p);
        for (int k = 0; k < 3; k++) {
                next_batch(&f.g, l, &ev);
                ck_assert_uint_eq(ev.step, 1000000000 + (uint64_t)k);
                check_dense(l, &ev, 0, &f.dense, ITEM, &sp);
                zr_loader_release(l, ev.ring, ev.slot, NULL);
        }
        zr_loader_free(l);

        p.start_step = UINT64_MAX - 1;
        p.mode = sp.mode = ZR_SAMPLER_IID;
        l = open_loader(&f, &st, 1, &p);
        next_batch(&f.g, l, &ev);
        ck_assert_uint_eq(ev.step, UINT64_MAX - 1);
        check_dense(l, &ev, 0, &f.dense, ITEM, &sp);
        next_batch(&f.g, l, &ev);
        ck_assert_uint_eq(ev.step, UINT64_MAX);
        check_dense(l, &ev, 0, &f.dense, ITEM, &sp);
        next_event(&f.g, l, &ev);
        ck_assert_int_eq(ev.kind, ZR_LOADER_EVENT_END);
        ck_assert_int_eq(ev.code, ZR_E_SAMPLER);
        ck_assert_uint_eq(ev.step, 0);
        ck_assert_int_eq(zr_loader_poll(l, &ev), 0);
        /* after the END every release is accepted and does nothing */
        ck_assert_int_eq(zr_loader_release(l, zr_loader_ring_id(l), 0, NULL), 0);
        ck_assert_int_eq(zr_loader_release(l, 77, 77, NULL), 0);
        zr_loader_free(l);
        fixture_free(&f);
}
END_TEST

/* Step order, exactly once, slot reuse, ring exhaustion, bad releases. */
START_TEST(test_slots_and_exhaustion) {
        fixture f;
        zr_loader_stream st;
        zr_loader_params p = { .mode = ZR_SAMPLER_IID, .batch_size = 4, .seed = 1,
                               .world_size = 1, .prefetch = 3 };
        zr_loader_event ev;
        zr_loader_counters c;
        zr_error err = {0};
        uint32_t held[3];
        zr_loader *l;

        fixture_new(&f, ZR_CODEC_RAW, 0);
        st = reg_stream(&f.dense, "d");
        l = open_loader(&f, &st, 1, &p);
        ck_assert_uint_eq(zr_loader_slots(l), 3);
        ck_assert_uint_eq(zr_loader_slot_bytes(l) % 4096, 0);
        ck_assert_uint_eq(zr_loader_ring_bytes(l), 3 * zr_loader_slot_bytes(l));
        ck_assert_uint_eq(zr_loader_stream_capacity(l, 0), 4 * ITEM);
        ck_assert_int_ge(zr_loader_ring_fd(l), 0);
        for (int k = 0; k < 3; k++) {
                next_batch(&f.g, l, &ev);
                ck_assert_uint_eq(ev.step, (uint64_t)k);
                held[k] = ev.slot;
        }
        ck_assert_uint_ne(held[0], held[1]);
        ck_assert_uint_ne(held[1], held[2]);
        ck_assert_uint_ne(held[0], held[2]);
        /* every slot is held: nothing can be filled, so nothing comes */
        rig_drain(&f.g);
        ck_assert_int_eq(zr_loader_poll(l, &ev), 0);
        zr_loader_counters_get(l, &c);
        ck_assert_uint_eq(c.gathers, 3);
        ck_assert_uint_eq(c.batches, 3);
        ck_assert_uint_eq(c.step, 3);
        /* bad releases */
        ck_assert_int_eq(zr_loader_release(l, ev.ring, 3, &err), -ZR_E_PROTO);
        ck_assert_int_eq(zr_loader_release(l, ev.ring + 1, held[1], &err), -ZR_E_PROTO);
        ck_assert_int_eq(zr_loader_release(l, ev.ring, held[1], NULL), 0);
        ck_assert_int_eq(zr_loader_release(l, ev.ring, held[1], NULL), -ZR_E_PROTO);
        /* the released slot comes back with the next step */
        next_batch(&f.g, l, &ev);
        ck_assert_uint_eq(ev.step, 3);
        ck_assert_uint_eq(ev.slot, held[1]);
        ck_assert_int_eq(zr_loader_poll(l, &ev), 0);
        /* many more, released at once: steps strictly consecutive */
        for (uint64_t s = 4; s < 200; s++) {
                zr_loader_release(l, ev.ring, s == 4 ? held[1] : ev.slot, NULL);
                next_batch(&f.g, l, &ev);
                ck_assert_uint_eq(ev.step, s);
        }
        zr_loader_counters_get(l, &c);
        ck_assert_uint_eq(c.batches, 200);
        ck_assert_uint_le(c.gathers, 200 + 3);
        zr_loader_free(l);
        fixture_free(&f);
}
END_TEST

/* The slot layout of PROTOCOL.md section 10 and the ring's seals. */
START_TEST(test_layout_and_seals) {
        fixture f;
        zr_loader *l;
        zr_loader_params p = { .mode = ZR_SAMPLER_CYCLIC, .batch_size = 5, .seed = 2,
                               .world_size = 1, .prefetch = 3 };
        zr_loader_stream st[3];
        zr_loader_event ev;
        int seals, fd;
        void *m;

        fixture_new(&f, ZR_CODEC_RAW, 0);
        st[0] = reg_stream(&f.dense2, "e");
        st[1] = reg_stream(&f.ragged, "r");
        st[2] = reg_stream(&f.dense, "d");
        st[1].capacity = 1000; /* rounded up to a multiple of 64 */
        l = open_loader(&f, st, 3, &p);
        ck_assert_uint_eq(zr_loader_nstreams(l), 3);
        ck_assert_uint_eq(zr_loader_stream_offset(l, 0), 0);
        ck_assert_uint_eq(zr_loader_stream_capacity(l, 0), 5 * 40);
        ck_assert_uint_eq(zr_loader_stream_offset(l, 1), 256); /* 200 rounded to 64 */
        ck_assert_uint_eq(zr_loader_stream_capacity(l, 1), 1024);
        ck_assert_uint_eq(zr_loader_stream_offset(l, 2), 256 + 1024);
        ck_assert_uint_eq(zr_loader_stream_capacity(l, 2), 5 * ITEM);
        ck_assert_uint_eq(zr_loader_slot_bytes(l), 4096);
        ck_assert_uint_eq(zr_loader_ring_bytes(l), 3 * 4096);
        ck_assert_uint_eq(zr_loader_length(l), N_DENSE);
        fd = zr_loader_ring_fd(l);
        seals = fcntl(fd, F_GET_SEALS);
        ck_assert_int_eq(seals & (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL),
                         F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL);
        ck_assert_int_ne(ftruncate(fd, 4096), 0);
        /* the client's view: read-only, and no writable shared mapping */
        ck_assert_ptr_eq(mmap(NULL, 3 * 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0),
                         MAP_FAILED);
        m = mmap(NULL, 3 * 4096, PROT_READ, MAP_SHARED, fd, 0);
        ck_assert_ptr_ne(m, MAP_FAILED);
        next_batch(&f.g, l, &ev);
        ck_assert_uint_eq(ev.nstreams, 3);
        ck_assert_uint_eq(ev.streams[2].offset, ev.slot * 4096 + 256 + 1024);
        ck_assert_int_eq(memcmp((uint8_t *)m + ev.streams[2].offset,
                                (const uint8_t *)ev.ring_data + ev.streams[2].offset,
                                5 * ITEM), 0);
        check_ragged(l, &ev, 1, 3);
        munmap(m, 3 * 4096);
        zr_loader_free(l);
        fixture_free(&f);
}
END_TEST

/* world_size 2: ranks are disjoint and their union, in order, is the world_size
 * 1 batch of 2B, bytes included. */
START_TEST(test_sharding) {
        static const enum zr_sampler_mode modes[] = { ZR_SAMPLER_SEQUENTIAL, ZR_SAMPLER_IID,
                                                      ZR_SAMPLER_CYCLIC };
        fixture f;

        fixture_new(&f, ZR_CODEC_ZSTD, 1 << 20);
        for (size_t m = 0; m < 3; m++) {
                zr_loader_stream st = reg_stream(&f.dense, "d");
                zr_loader_params p = { .mode = modes[m], .batch_size = 10, .seed = 3,
                                       .world_size = 2, .prefetch = 2, .start_step = 40 };
                zr_loader *r0, *r1, *all;
                p.rank = 0;
                r0 = open_loader(&f, &st, 1, &p);
                p.rank = 1;
                r1 = open_loader(&f, &st, 1, &p);
                p.rank = 0;
                p.world_size = 1;
                p.batch_size = 20;
                all = open_loader(&f, &st, 1, &p);
                for (int k = 0; k < 12; k++) {
                        zr_loader_event e0, e1, ea;
                        next_batch(&f.g, r0, &e0);
                        next_batch(&f.g, r1, &e1);
                        next_batch(&f.g, all, &ea);
                        ck_assert_uint_eq(e0.step, ea.step);
                        ck_assert_uint_eq(e1.step, ea.step);
                        ck_assert_int_eq(memcmp(e0.indices, ea.indices, 80), 0);
                        ck_assert_int_eq(memcmp(e1.indices, ea.indices + 10, 80), 0);
                        if (modes[m] != ZR_SAMPLER_IID)
                                for (int i = 0; i < 10; i++)
                                        for (int j = 0; j < 10; j++)
                                                ck_assert_uint_ne(e0.indices[i], e1.indices[j]);
                        const uint8_t *a = ea.ring_data;
                        ck_assert_int_eq(memcmp((const uint8_t *)e0.ring_data +
                                                        e0.streams[0].offset,
                                                a + ea.streams[0].offset, 10 * ITEM), 0);
                        ck_assert_int_eq(memcmp((const uint8_t *)e1.ring_data +
                                                        e1.streams[0].offset,
                                                a + ea.streams[0].offset + 10 * ITEM,
                                                10 * ITEM), 0);
                        zr_loader_release(r0, e0.ring, e0.slot, NULL);
                        zr_loader_release(r1, e1.ring, e1.slot, NULL);
                        zr_loader_release(all, ea.ring, ea.slot, NULL);
                }
                zr_loader_free(r0);
                zr_loader_free(r1);
                zr_loader_free(all);
        }
        fixture_free(&f);
}
END_TEST

/* N identical loaders: the group gathers each step about once. */
START_TEST(test_dedup) {
        enum { NL = 4, K = 40 };
        fixture f;
        zr_loader *l[NL];
        zr_loader_engine_counters t;
        zr_loader_params p = { .mode = ZR_SAMPLER_CYCLIC, .batch_size = 16, .seed = 11,
                               .world_size = 1, .prefetch = 4 };
        zr_sampler_params sp = { .mode = ZR_SAMPLER_CYCLIC, .n = N_DENSE, .batch_size = 16,
                                 .seed = 11, .world_size = 1 };
        zr_loader_stream st[2];

        fixture_new(&f, ZR_CODEC_ZSTD, 0); /* no cache: sharing alone */
        st[0] = reg_stream(&f.dense, "d");
        st[1] = reg_stream(&f.ragged, "r");
        for (int i = 0; i < NL; i++)
                l[i] = open_loader(&f, st, 2, &p);
        for (int k = 0; k < K; k++) {
                for (int i = 0; i < NL; i++) {
                        zr_loader_event ev;
                        next_batch(&f.g, l[i], &ev);
                        ck_assert_uint_eq(ev.step, (uint64_t)k);
                        check_dense(l[i], &ev, 0, &f.dense, ITEM, &sp);
                        check_ragged(l[i], &ev, 1, 3);
                        zr_loader_release(l[i], ev.ring, ev.slot, NULL);
                }
        }
        zr_loader_engine_counters_get(f.g.e, &t);
        fprintf(stderr, "dedup: %d loaders x %d steps: gathers %" PRIu64 ", shared takes %"
                PRIu64 ", batches %" PRIu64 "\n", NL, K, t.gathers, t.shared, t.batches);
        ck_assert_uint_eq(t.batches, NL * K);
        /* each step at most once, plus the prefetched steps past K */
        ck_assert_uint_ge(t.gathers, K);
        ck_assert_uint_le(t.gathers, K + p.prefetch + NL); /* NL: slack for a lagging member */
        ck_assert_uint_ge(t.shared, (NL - 1) * K);
        for (int i = 0; i < NL; i++)
                zr_loader_free(l[i]);
        fixture_free(&f);
}
END_TEST

/* A member that falls behind (holds its slots) stalls nobody; when it resumes
 * it takes or gathers what it needs, still bit-exact. */
START_TEST(test_group_slow_member) {
        fixture f;
        zr_loader *fast, *slow;
        zr_loader_params p = { .mode = ZR_SAMPLER_IID, .batch_size = 8, .seed = 4,
                               .world_size = 1, .prefetch = 2 };
        zr_sampler_params sp = { .mode = ZR_SAMPLER_IID, .n = N_DENSE, .batch_size = 8,
                                 .seed = 4, .world_size = 1 };
        zr_loader_stream st;
        zr_loader_event ev, held[2];

        fixture_new(&f, ZR_CODEC_ZSTD, 0);
        st = reg_stream(&f.dense, "d");
        slow = open_loader(&f, &st, 1, &p);
        fast = open_loader(&f, &st, 1, &p);
        next_batch(&f.g, slow, &held[0]);
        next_batch(&f.g, slow, &held[1]);
        for (uint64_t s = 0; s < 30; s++) {
                next_batch(&f.g, fast, &ev);
                ck_assert_uint_eq(ev.step, s);
                check_dense(fast, &ev, 0, &f.dense, ITEM, &sp);
                zr_loader_release(fast, ev.ring, ev.slot, NULL);
        }
        zr_loader_release(slow, held[0].ring, held[0].slot, NULL);
        zr_loader_release(slow, held[1].ring, held[1].slot, NULL);
        for (uint64_t s = 2; s < 40; s++) {
                next_batch(&f.g, slow, &ev);
                ck_assert_uint_eq(ev.step, s);
                check_dense(slow, &ev, 0, &f.dense, ITEM, &sp);
                zr_loader_release(slow, ev.ring, ev.slot, NULL);
        }
        zr_loader_free(fast);
        zr_loader_free(slow);
        fixture_free(&f);
}
END_TEST

/* Waits for l's next BATCH or END; a RING on the way must be new, sized like
 * l's own ring, and is added to told[]; a RING_CLOSE must name a told ring and
 * is removed from it. A BATCH must name a told ring. */
static void next_told(fixture *f, zr_loader *l, zr_loader_event *ev, uint32_t *told,
                      size_t *ntold, uint32_t *closed) {
        for (;;) {
                next_event_any(&f->g, l, ev);
                if (ev->kind == ZR_LOADER_EVENT_RING) {
                        for (size_t i = 0; i < *ntold; i++)
                                ck_assert_uint_ne(told[i], ev->ring);
                        ck_assert_int_ge(ev->fd, 0);
                        ck_assert_uint_eq(ev->slot_bytes, zr_loader_slot_bytes(l));
                        ck_assert_uint_eq(ev->ring_bytes, ev->slots * ev->slot_bytes);
                        ck_assert_ptr_nonnull(ev->ring_data);
                        told[(*ntold)++] = ev->ring;
                        continue;
                }
                if (ev->kind == ZR_LOADER_EVENT_RING_CLOSE) {
                        size_t i = 0;
                        while (i < *ntold && told[i] != ev->ring)
                                i++;
                        ck_assert_msg(i < *ntold, "RING_CLOSE of ring %u never told", ev->ring);
                        told[i] = told[--*ntold];
                        if (closed)
                                *closed = ev->ring;
                        continue;
                }
                break;
        }
        if (ev->kind != ZR_LOADER_EVENT_BATCH)
                return;
        for (size_t i = 0; i < *ntold; i++)
                if (told[i] == ev->ring)
                        return;
        ck_abort_msg("a batch names ring %u, never told", ev->ring);
}

/* A group's rings are one pool: a step is gathered once and every member is
 * announced the same (ring, slot), with no copy; each ring is told before the
 * first batch that names it; a member's ring outlives it while another member
 * holds one of its slots (still readable), then goes with a RING_CLOSE after
 * which no batch names it. */
START_TEST(test_group_rings) {
        fixture f;
        zr_loader *l[2];
        zr_loader_params p = { .mode = ZR_SAMPLER_CYCLIC, .batch_size = 8, .seed = 9,
                               .world_size = 1, .prefetch = 3 };
        zr_sampler_params sp = { .mode = ZR_SAMPLER_CYCLIC, .n = N_DENSE, .batch_size = 8,
                                 .seed = 9, .world_size = 1 };
        zr_loader_stream st;
        zr_loader_event ev[2], kept;
        zr_loader_engine_counters t;
        uint32_t told[2][8], closed = 0, gone;
        size_t ntold[2] = { 1, 1 };
        int owner;

        fixture_new(&f, ZR_CODEC_RAW, 0);
        st = reg_stream(&f.dense, "d");
        l[0] = open_loader(&f, &st, 1, &p);
        l[1] = open_loader(&f, &st, 1, &p);
        told[0][0] = zr_loader_ring_id(l[0]);
        told[1][0] = zr_loader_ring_id(l[1]);
        ck_assert_uint_ne(told[0][0], told[1][0]);
        for (uint64_t s = 0; s < 20; s++) {
                for (int i = 0; i < 2; i++) {
                        next_told(&f, l[i], &ev[i], told[i], &ntold[i], NULL);
                        ck_assert_int_eq(ev[i].kind, ZR_LOADER_EVENT_BATCH);
                        ck_assert_uint_eq(ev[i].step, s);
                        check_dense(l[i], &ev[i], 0, &f.dense, ITEM, &sp);
                }
                /* one slot for both: the batch was not copied */
                ck_assert_uint_eq(ev[0].ring, ev[1].ring);
                ck_assert_uint_eq(ev[0].slot, ev[1].slot);
                for (int i = 0; i < 2; i++)
                        ck_assert_int_eq(zr_loader_release(l[i], ev[i].ring, ev[i].slot, NULL), 0);
        }
        /* each learnt the other's ring */
        ck_assert_uint_eq(ntold[0], 2);
        ck_assert_uint_eq(ntold[1], 2);
        zr_loader_engine_counters_get(f.g.e, &t);
        ck_assert_uint_ge(t.gathers, 20);
        ck_assert_uint_le(t.gathers, 20 + 2 * p.prefetch);
        ck_assert_uint_eq(t.batches, 2 * 20);
        ck_assert_uint_ge(t.shared, 20 - p.prefetch);

        /* step 20 in both; the member whose ring holds it leaves while the
         * other still holds it */
        for (int i = 0; i < 2; i++)
                next_told(&f, l[i], &ev[i], told[i], &ntold[i], NULL);
        owner = ev[0].ring == zr_loader_ring_id(l[0]) ? 0 : 1;
        gone = ev[0].ring;
        kept = ev[1 - owner];
        zr_loader_free(l[owner]);
        check_dense(l[1 - owner], &kept, 0, &f.dense, ITEM, &sp); /* still readable */
        zr_loader_release(l[1 - owner], kept.ring, kept.slot, NULL);
        for (uint64_t s = 21; s < 40; s++) {
                zr_loader_event e;
                next_told(&f, l[1 - owner], &e, told[1 - owner], &ntold[1 - owner], &closed);
                ck_assert_uint_eq(e.step, s);
                check_dense(l[1 - owner], &e, 0, &f.dense, ITEM, &sp);
                if (closed == gone)
                        ck_assert_uint_ne(e.ring, gone);
                zr_loader_release(l[1 - owner], e.ring, e.slot, NULL);
        }
        ck_assert_uint_eq(closed, gone);
        ck_assert_uint_eq(ntold[1 - owner], 1);
        zr_loader_free(l[1 - owner]);
        fixture_free(&f);
}
END_TEST

/* Resident slots of l's own ring (pages faulted in). */
static size_t resident_slots(const zr_loader *l) {
        size_t pages = zr_loader_ring_bytes(l) / 4096, n = 0;
        unsigned char *v = malloc(pages);

        ck_assert_int_eq(mincore((void *)zr_loader_ring_data(l), zr_loader_ring_bytes(l), v), 0);
        for (size_t i = 0; i < pages; i++)
                n += v[i] & 1;
        free(v);
        return n / (zr_loader_slot_bytes(l) / 4096);
}

/* Members that keep in step fill slots whose pages are already resident: N of
 * them use about one ring's memory, not N rings. */
START_TEST(test_group_memory) {
        enum { NL = 4, K = 60 };
        fixture f;
        zr_loader *l[NL];
        zr_loader_params p = { .mode = ZR_SAMPLER_IID, .batch_size = 64, .seed = 5,
                               .world_size = 1, .prefetch = 4 };
        zr_loader_stream st;
        size_t slots = 0;

        fixture_new(&f, ZR_CODEC_RAW, 0);
        st = reg_stream(&f.dense, "d");
        for (int i = 0; i < NL; i++)
                l[i] = open_loader(&f, &st, 1, &p);
        for (int k = 0; k < K; k++) {
                for (int i = 0; i < NL; i++) {
                        zr_loader_event ev;
                        next_batch(&f.g, l[i], &ev);
                        ck_assert_uint_eq(ev.step, (uint64_t)k);
                        zr_loader_release(l[i], ev.ring, ev.slot, NULL);
                }
        }
        for (int i = 0; i < NL; i++)
                slots += resident_slots(l[i]);
        fprintf(stderr, "group memory: %d members x %u slots: %zu slots resident\n", NL,
                p.prefetch, slots);
        /* own rings would be NL × prefetch = 16 */
        ck_assert_uint_le(slots, 2 * p.prefetch);
        ck_assert_uint_ge(slots, 1);
        for (int i = 0; i < NL; i++)
                zr_loader_free(l[i]);
        fixture_free(&f);
}
END_TEST

/* Cache accounting: a compressed store that fits the budget is decoded once;
 * one that does not evicts; raw stores bypass the cache; drop empties it. */
START_TEST(test_cache_accounting) {
        fixture f;
        zr_loader *l;
        zr_loader_counters c;
        zr_loader_engine_counters t;
        zr_loader_params p = { .mode = ZR_SAMPLER_SEQUENTIAL, .batch_size = 30,
                               .world_size = 1, .prefetch = 2 };
        zr_loader_stream st;
        zr_loader_event ev;

        fixture_new(&f, ZR_CODEC_ZSTD, 1 << 20);
        st = reg_stream(&f.dense, "d");
        /* two passes over the 300 records (10 steps each) */
        l = open_loader(&f, &st, 1, &p);
        for (int k = 0; k < 20; k++) {
                next_batch(&f.g, l, &ev);
                zr_loader_release(l, ev.ring, ev.slot, NULL);
        }
        zr_loader_counters_get(l, &c);
        zr_loader_free(l);
        fprintf(stderr, "cache fits: hits %" PRIu64 " misses %" PRIu64 " evictions %" PRIu64 "\n",
                c.hits, c.misses, c.evictions);
        /* the first pass misses every record once; everything later hits */
        ck_assert_uint_eq(c.misses, N_DENSE);
        ck_assert_uint_ge(c.hits, 10 * 30);
        ck_assert_uint_eq(c.evictions, 0);
        zr_loader_engine_counters_get(f.g.e, &t);
        ck_assert_uint_eq(t.cache_entries, N_DENSE);
        ck_assert_uint_le(t.cache_bytes, t.cache_budget);
        zr_loader_engine_drop_dataset(f.g.e, f.dense.id);
        zr_loader_engine_counters_get(f.g.e, &t);
        ck_assert_uint_eq(t.cache_entries, 0);

        /* a budget of ~100 records: a cyclic pass over 300 evicts */
        zr_loader_engine_set_cache_bytes(f.g.e, 100 * (ITEM + 96));
        l = open_loader(&f, &st, 1, &p);
        for (int k = 0; k < 20; k++) {
                next_batch(&f.g, l, &ev);
                zr_loader_release(l, ev.ring, ev.slot, NULL);
        }
        zr_loader_counters_get(l, &c);
        zr_loader_free(l);
        zr_loader_engine_counters_get(f.g.e, &t);
        fprintf(stderr, "cache small: hits %" PRIu64 " misses %" PRIu64 " evictions %" PRIu64
                " resident %" PRIu64 "/%" PRIu64 "\n", c.hits, c.misses, c.evictions,
                t.cache_bytes, t.cache_budget);
        ck_assert_uint_gt(c.evictions, 0);
        ck_assert_uint_gt(c.misses, N_DENSE);
        ck_assert_uint_le(t.cache_bytes, t.cache_budget);
        zr_loader_engine_set_cache_bytes(f.g.e, 0);
        zr_loader_engine_counters_get(f.g.e, &t);
        ck_assert_uint_eq(t.cache_bytes, 0);
        fixture_free(&f);

        /* raw: no lookups at all */
        fixture_new(&f, ZR_CODEC_RAW, 1 << 20);
        st = reg_stream(&f.dense, "d");
        l = open_loader(&f, &st, 1, &p);
        for (int k = 0; k < 12; k++) {
                next_batch(&f.g, l, &ev);
                zr_loader_release(l, ev.ring, ev.slot, NULL);
        }
        zr_loader_counters_get(l, &c);
        ck_assert_uint_eq(c.hits + c.misses, 0);
        ck_assert_uint_ge(c.bytes, 12 * 30 * ITEM);
        zr_loader_free(l);
        fixture_free(&f);
}
END_TEST

/* A mutation between batches: batches gathered before it are announced intact,
 * then END with ZR_E_STALE; nothing gathered after it is announced. */
START_TEST(test_stale) {
        enum { PF = 3 };
        fixture f;
        zr_loader *l;
        zr_loader_params p = { .mode = ZR_SAMPLER_SEQUENTIAL, .batch_size = 50,
                               .world_size = 1, .prefetch = PF };
        zr_sampler_params sp = { .mode = ZR_SAMPLER_SEQUENTIAL, .n = N_DENSE, .batch_size = 50,
                                 .world_size = 1 };
        uint8_t *want[20];
        zr_loader_stream st;
        zr_loader_event ev;
        uint64_t del[5] = { 0, 1, 2, 3, 4 }, s;
        zr_error err = {0};

        fixture_new(&f, ZR_CODEC_RAW, 0);
        st = reg_stream(&f.dense, "d");
        for (int k = 0; k < 20; k++) {
                want[k] = malloc(50 * ITEM);
                expect_dense(f.dense.ds, &sp, (uint64_t)k, want[k], ITEM);
        }
        l = open_loader(&f, &st, 1, &p);
        next_batch(&f.g, l, &ev);
        ck_assert_uint_eq(ev.step, 0);
        /* mutate: delete records 0..4 (the swap-last moves the tail into them) */
        zr_dataset_lock(f.dense.ds, true);
        ck_assert_msg(zr_dataset_delete(f.dense.ds, del, 5, &err) == 0, "%s", err.message);
        zr_dataset_mutated(f.dense.ds);
        zr_dataset_unlock(f.dense.ds);
        zr_loader_release(l, ev.ring, ev.slot, NULL);
        for (s = 1;; s++) {
                next_event(&f.g, l, &ev);
                if (ev.kind == ZR_LOADER_EVENT_END)
                        break;
                ck_assert_uint_eq(ev.step, s);
                ck_assert_int_eq(memcmp((const uint8_t *)ev.ring_data +
                                                ev.streams[0].offset, want[s], 50 * ITEM), 0);
                zr_loader_release(l, ev.ring, ev.slot, NULL);
        }
        ck_assert_int_eq(ev.code, ZR_E_STALE);
        ck_assert_uint_eq(ev.step, s);
        ck_assert_uint_le(s, PF + 1); /* at most the prefetched batches came */
        ck_assert_ptr_nonnull(strstr(ev.message, "stream 0 (d)"));
        ck_assert_int_eq(zr_loader_poll(l, &ev), 0);
        zr_loader_free(l);
        /* a new loader opened now sees the new length and the new content */
        sp.n = N_DENSE - 5;
        l = open_loader(&f, &st, 1, &p);
        ck_assert_uint_eq(zr_loader_length(l), N_DENSE - 5);
        next_batch(&f.g, l, &ev);
        check_dense(l, &ev, 0, &f.dense, ITEM, &sp);
        zr_loader_free(l);
        for (int k = 0; k < 20; k++)
                free(want[k]);
        fixture_free(&f);
}
END_TEST

/* A mutation that holds one dataset's lock exclusive for long holds no worker:
 * a loader of another dataset keeps going (with blocking locks both workers
 * would wait and this test would hang); the loader of the locked dataset
 * resumes when the lock goes (nothing changed) or ends STALE (it changed). */
START_TEST(test_locked_dataset) {
        enum { PF = 4 };
        fixture f;
        zr_loader *x, *y;
        zr_loader_params p = { .mode = ZR_SAMPLER_IID, .batch_size = 8, .seed = 3,
                               .world_size = 1, .prefetch = PF };
        zr_sampler_params sp = { .mode = ZR_SAMPLER_IID, .n = N_DENSE, .batch_size = 8,
                                 .seed = 3, .world_size = 1 };
        zr_loader_stream sx, sy;
        zr_loader_event ev, held[PF];
        uint64_t s;

        fixture_new(&f, ZR_CODEC_ZSTD, 1 << 20);
        sx = reg_stream(&f.dense, "d");
        sy = reg_stream(&f.dense2, "e");
        x = open_loader(&f, &sx, 1, &p);
        y = open_loader(&f, &sy, 1, &p);
        for (int k = 0; k < PF; k++)
                next_batch(&f.g, x, &held[k]);
        zr_dataset_lock(f.dense.ds, true);
        for (int k = 0; k < PF; k++)
                zr_loader_release(x, held[k].ring, held[k].slot, NULL);
        for (s = 0; s < 40; s++) {
                next_batch(&f.g, y, &ev);
                ck_assert_uint_eq(ev.step, s);
                zr_loader_release(y, ev.ring, ev.slot, NULL);
        }
        ck_assert_int_eq(zr_loader_poll(x, &ev), 0);
        /* an exclusive section that changed nothing: x resumes, intact */
        zr_dataset_unlock(f.dense.ds);
        zr_loader_engine_resume(f.g.e);
        for (s = PF; s < 3 * PF; s++) {
                next_batch(&f.g, x, &ev);
                ck_assert_uint_eq(ev.step, s);
                check_dense(x, &ev, 0, &f.dense, ITEM, &sp);
                zr_loader_release(x, ev.ring, ev.slot, NULL);
        }
        /* one that changed it: x ends STALE and announces nothing torn */
        for (int k = 0; k < PF; k++)
                next_batch(&f.g, x, &held[k]);
        zr_dataset_lock(f.dense.ds, true);
        for (int k = 0; k < PF; k++)
                zr_loader_release(x, held[k].ring, held[k].slot, NULL);
        zr_dataset_mutated(f.dense.ds);
        zr_dataset_unlock(f.dense.ds);
        zr_loader_engine_drop_dataset(f.g.e, f.dense.id);
        next_event(&f.g, x, &ev);
        ck_assert_int_eq(ev.kind, ZR_LOADER_EVENT_END);
        ck_assert_int_eq(ev.code, ZR_E_STALE);
        ck_assert_uint_eq(ev.step, 4 * PF);
        zr_loader_free(x);
        zr_loader_free(y);
        fixture_free(&f);
}
END_TEST

/* A loader freed while its gathers are parked on a locked dataset; a group
 * member that waited for them gathers for itself once the lock goes, retried
 * by the engine alone. */
START_TEST(test_free_parked) {
        fixture f;
        zr_loader *x, *x2;
        zr_loader_params p = { .mode = ZR_SAMPLER_IID, .batch_size = 8, .seed = 3,
                               .world_size = 1, .prefetch = 2 };
        zr_loader_stream sx;
        zr_loader_event ev, held[2];

        fixture_new(&f, ZR_CODEC_RAW, 0);
        sx = reg_stream(&f.dense, "d");
        x = open_loader(&f, &sx, 1, &p);
        x2 = open_loader(&f, &sx, 1, &p); /* same group: waits on x's parked fills */
        next_batch(&f.g, x, &held[0]);
        next_batch(&f.g, x, &held[1]);
        next_batch(&f.g, x2, &ev);
        zr_loader_release(x2, ev.ring, ev.slot, NULL);
        next_batch(&f.g, x2, &ev);
        zr_loader_release(x2, ev.ring, ev.slot, NULL);
        zr_dataset_lock(f.dense.ds, true);
        zr_loader_release(x, held[0].ring, held[0].slot, NULL);
        zr_loader_release(x, held[1].ring, held[1].slot, NULL);
        zr_loader_free(x); /* returns at once: parked work never runs */
        zr_dataset_unlock(f.dense.ds);
        /* no zr_loader_engine_resume(): the engine's retry thread finds it */
        next_batch(&f.g, x2, &ev);
        ck_assert_uint_eq(ev.step, 2);
        zr_loader_free(x2);
        fixture_free(&f);
}
END_TEST

/* A ragged batch over its stream's capacity ends the loader with ZR_E_BUFFER at
 * that step and says how many bytes it needs. */
START_TEST(test_ragged_capacity) {
        fixture f;
        zr_loader *l;
        zr_loader_params p = { .mode = ZR_SAMPLER_SEQUENTIAL, .batch_size = 4,
                               .world_size = 1, .prefetch = 2 };
        zr_loader_stream st;
        zr_loader_event ev;

        fixture_new(&f, ZR_CODEC_RAW, 0);
        st = reg_stream(&f.ragged, "r");
        /* records 0..3 have 1, 8, 2, 9 rows: 30, 72, 36, 78 bytes; records 4..7
         * (3, 10, 4, 11 rows) need more */
        st.capacity = 256;
        l = open_loader(&f, &st, 1, &p);
        ck_assert_uint_eq(zr_loader_stream_capacity(l, 0), 256);
        next_batch(&f.g, l, &ev);
        check_ragged(l, &ev, 0, 3);
        next_event(&f.g, l, &ev);
        ck_assert_int_eq(ev.kind, ZR_LOADER_EVENT_END);
        ck_assert_int_eq(ev.code, ZR_E_BUFFER);
        ck_assert_uint_eq(ev.step, 1);
        ck_assert_uint_gt(ev.needed, 256);
        zr_loader_free(l);
        /* the default capacity holds every batch */
        st.capacity = 0;
        l = open_loader(&f, &st, 1, &p);
        ck_assert_uint_ge(zr_loader_stream_capacity(l, 0), 2 * 4 * 24);
        for (int k = 0; k < 60; k++) {
                next_batch(&f.g, l, &ev);
                check_ragged(l, &ev, 0, 3);
                zr_loader_release(l, ev.ring, ev.slot, NULL);
        }
        zr_loader_free(l);
        fixture_free(&f);
}
END_TEST

static void gate_task(void *arg) {
        char c;
        ck_assert_int_eq(read(*(int *)arg, &c, 1), 1);
}

/* Two loaders with work: a deep-ring loader of big batches does not keep a
 * loader of small batches waiting until its ring is full: worker time goes one
 * batch per turn. One worker, held by a gate task while both open, so they
 * start together and the order is the scheduler's alone; the engine's fill
 * sequence (fill_seq) tells when the fast loader's fills happened, whatever
 * the test thread's own timing. A FIFO scheduler would finish them at fill
 * SLOW_SLOTS + FAST_SLOTS. */
START_TEST(test_fairness) {
        enum { SLOW_SLOTS = 16, FAST_SLOTS = 4 };
        scratch sc;
        rig g;
        reg big, small;
        zr_loader *slow, *fast;
        zr_loader_counters cs, cf;
        zr_loader_params ps = { .mode = ZR_SAMPLER_IID, .batch_size = 16, .seed = 1,
                                .world_size = 1, .prefetch = SLOW_SLOTS };
        zr_loader_params pf = ps;
        zr_loader_stream sts, stf;
        zr_loader_event ev;
        zr_error err = {0};
        int gate[2];

        scratch_new(&sc);
        rig_new(&g, 1, 0);
        reg_init(&big, make_dense(&sc, "b", 64, 256 << 10, ZR_CODEC_RAW, g.pool, 9));
        reg_init(&small, make_dense(&sc, "s", 64, 64, ZR_CODEC_RAW, g.pool, 8));
        sts = reg_stream(&big, "b");
        stf = reg_stream(&small, "s");
        pf.prefetch = FAST_SLOTS;
        ck_assert_int_eq(pipe(gate), 0);
        ck_assert_int_eq(zr_pool_submit(g.pool, gate_task, &gate[0]), 0);
        ck_assert_int_eq(zr_loader_new(g.e, &sts, 1, &ps, NULL, &slow, &err), 0);
        ck_assert_int_eq(zr_loader_new(g.e, &stf, 1, &pf, NULL, &fast, &err), 0);
        ck_assert_int_eq(write(gate[1], "x", 1), 1);
        for (int k = 0; k < FAST_SLOTS; k++) {
                next_batch(&g, fast, &ev);
                ck_assert_uint_eq(ev.step, (uint64_t)k);
        }
        zr_loader_counters_get(slow, &cs);
        zr_loader_counters_get(fast, &cf);
        fprintf(stderr, "fairness: the fast loader's %d fills were done by fill %" PRIu64
                " of the engine (the slow loader has %d slots; now %" PRIu64 " gathered)\n",
                FAST_SLOTS, cf.fill_seq, SLOW_SLOTS, cs.gathers);
        /* round-robin: slow, fast, slow, fast, ... (the slow loader may have
         * claimed one more turn before the fast one opened) */
        ck_assert_uint_le(cf.fill_seq, 2 * FAST_SLOTS + 1);
        /* and the slow one progresses too */
        next_batch(&g, slow, &ev);
        ck_assert_uint_eq(ev.step, 0);
        zr_loader_free(slow);
        zr_loader_free(fast);
        close(gate[0]);
        close(gate[1]);
        rig_free(&g);
        reg_fini(&big);
        reg_fini(&small);
        scratch_free(&sc);
}
END_TEST

/* Freeing loaders with gathers in flight, events uncollected, and group
 * members copying from them. */
START_TEST(test_free_in_flight) {
        scratch sc;
        rig g;
        reg big;
        zr_loader_params p = { .mode = ZR_SAMPLER_IID, .batch_size = 32, .seed = 1,
                               .world_size = 1, .prefetch = 4 };
        zr_loader_stream st;
        zr_loader_event ev;
        zr_error err = {0};

        scratch_new(&sc);
        rig_new(&g, 2, 8 << 20);
        reg_init(&big, make_dense(&sc, "b", 128, 32 << 10, ZR_CODEC_ZSTD, g.pool, 9));
        st = reg_stream(&big, "b");
        for (int round = 0; round < 20; round++) {
                zr_loader *l[3];
                for (int i = 0; i < 3; i++)
                        ck_assert_int_eq(zr_loader_new(g.e, &st, 1, &p, NULL, &l[i], &err), 0);
                if (round % 2) {
                        next_batch(&g, l[1], &ev);
                        zr_loader_release(l[1], ev.ring, ev.slot, NULL);
                }
                zr_loader_free(l[round % 3]);
                next_batch(&g, l[(round + 1) % 3], &ev);
                ck_assert_uint_eq(ev.step, round % 2 && (round + 1) % 3 == 1 ? 1 : 0);
                zr_loader_free(l[(round + 1) % 3]);
                zr_loader_free(l[(round + 2) % 3]);
        }
        rig_free(&g);
        reg_fini(&big);
        scratch_free(&sc);
}
END_TEST

/* Spare rings: a freed loader leaves a warm ring of its size behind (within
 * the budget), the next loader of that size takes it, and its batches are
 * right; a lowered budget releases spares. */
START_TEST(test_spare_rings) {
        fixture f;
        zr_loader *l;
        zr_loader_engine_counters t;
        zr_loader_params p = { .mode = ZR_SAMPLER_CYCLIC, .batch_size = 50, .seed = 8,
                               .world_size = 1, .prefetch = 3 };
        zr_sampler_params sp = { .mode = ZR_SAMPLER_CYCLIC, .n = N_DENSE, .batch_size = 50,
                                 .seed = 8, .world_size = 1 };
        zr_loader_stream st;
        zr_loader_event ev;
        uint64_t ring, v;

        fixture_new(&f, ZR_CODEC_RAW, 0);
        st = reg_stream(&f.dense, "d");
        l = open_loader(&f, &st, 1, &p);
        ring = zr_loader_ring_bytes(l);
        zr_loader_free(l); /* no budget: no spare */
        zr_loader_engine_counters_get(f.g.e, &t);
        ck_assert_uint_eq(t.spare_bytes, 0);

        zr_loader_engine_set_spare_bytes(f.g.e, ring);
        l = open_loader(&f, &st, 1, &p);
        next_batch(&f.g, l, &ev);
        zr_loader_free(l);
        for (;;) { /* the spare is made on the pool, which then notifies */
                zr_loader_engine_counters_get(f.g.e, &t);
                if (t.spare_bytes == ring)
                        break;
                ck_assert_int_eq(read(f.g.efd, &v, 8), 8);
        }
        p.start_step = 1000000000;
        l = open_loader(&f, &st, 1, &p);
        zr_loader_engine_counters_get(f.g.e, &t);
        ck_assert_uint_eq(t.spare_bytes, 0); /* taken */
        for (int k = 0; k < 6; k++) {
                next_batch(&f.g, l, &ev);
                ck_assert_uint_eq(ev.step, 1000000000 + (uint64_t)k);
                check_dense(l, &ev, 0, &f.dense, ITEM, &sp);
                zr_loader_release(l, ev.ring, ev.slot, NULL);
        }
        ck_assert_int_eq(fcntl(zr_loader_ring_fd(l), F_GET_SEALS) & F_SEAL_SEAL, F_SEAL_SEAL);
        zr_loader_free(l);
        for (;;) {
                zr_loader_engine_counters_get(f.g.e, &t);
                if (t.spare_bytes == ring)
                        break;
                ck_assert_int_eq(read(f.g.efd, &v, 8), 8);
        }
        /* another size does not take it; a lowered budget drops it */
        p.prefetch = 2;
        l = open_loader(&f, &st, 1, &p);
        zr_loader_engine_counters_get(f.g.e, &t);
        ck_assert_uint_eq(t.spare_bytes, ring);
        zr_loader_engine_set_spare_bytes(f.g.e, 0);
        zr_loader_engine_counters_get(f.g.e, &t);
        ck_assert_uint_eq(t.spare_bytes, 0);
        zr_loader_free(l);
        fixture_free(&f); /* the engine waits for a spare still being made */
}
END_TEST

/* Errors at open. */
START_TEST(test_open_errors) {
        fixture f;
        zr_loader *l = NULL;
        zr_error err = {0};
        zr_loader_params p = { .mode = ZR_SAMPLER_IID, .batch_size = 4, .world_size = 1,
                               .prefetch = 2 };
        zr_loader_stream st[2];
        reg shorter;

        fixture_new(&f, ZR_CODEC_RAW, 0);
        reg_init(&shorter, make_dense(&f.sc, "s", 10, 8, ZR_CODEC_RAW, f.g.pool, 4));
        st[0] = reg_stream(&f.dense, "d");
        st[1] = reg_stream(&shorter, "s");
        ck_assert_int_eq(zr_loader_new(f.g.e, st, 2, &p, NULL, &l, &err), -ZR_E_MISALIGNED);
        ck_assert_msg(strstr(err.message, "d: 300") && strstr(err.message, "s: 10"), "%s",
                      err.message);
        zr_error_clear(&err);
        ck_assert_int_eq(zr_loader_new(f.g.e, st, 0, &p, NULL, &l, &err), -ZR_E_PROTO);
        p.prefetch = 0;
        ck_assert_int_eq(zr_loader_new(f.g.e, st, 1, &p, NULL, &l, &err), -ZR_E_LIMIT);
        p.prefetch = ZR_PREFETCH_MAX + 1;
        ck_assert_int_eq(zr_loader_new(f.g.e, st, 1, &p, NULL, &l, &err), -ZR_E_LIMIT);
        p.prefetch = 2;
        p.has_length = 1;
        p.length = 299;
        ck_assert_int_eq(zr_loader_new(f.g.e, st, 1, &p, NULL, &l, &err), -ZR_E_STALE);
        p.length = 300;
        p.batch_size = 301;
        ck_assert_int_eq(zr_loader_new(f.g.e, st, 1, &p, NULL, &l, &err), -ZR_E_SAMPLER);
        p.batch_size = 0;
        ck_assert_int_eq(zr_loader_new(f.g.e, st, 1, &p, NULL, &l, &err), -ZR_E_SAMPLER);
        p.batch_size = 4;
        p.rank = 1;
        ck_assert_int_eq(zr_loader_new(f.g.e, st, 1, &p, NULL, &l, &err), -ZR_E_SAMPLER);
        p.world_size = 0;
        ck_assert_int_eq(zr_loader_new(f.g.e, st, 1, &p, NULL, &l, &err), -ZR_E_SAMPLER);
        p.rank = 0;
        p.world_size = 1;
        p.mode = (enum zr_sampler_mode)7;
        ck_assert_int_eq(zr_loader_new(f.g.e, st, 1, &p, NULL, &l, &err), -ZR_E_SAMPLER);
        p.mode = ZR_SAMPLER_IID;
        p.ring_bytes_max = 4096;
        p.prefetch = 4;
        ck_assert_int_eq(zr_loader_new(f.g.e, st, 1, &p, NULL, &l, &err), -ZR_E_LIMIT);
        ck_assert_ptr_null(l);
        p.ring_bytes_max = 4 * 4096;
        ck_assert_int_eq(zr_loader_new(f.g.e, st, 1, &p, NULL, &l, &err), 0);
        zr_loader_free(l);
        reg_fini(&shorter);
        fixture_free(&f);
}
END_TEST

/* zr_loader_stop(): steps started are announced, then END with the code. */
START_TEST(test_stop) {
        fixture f;
        zr_loader *l;
        zr_loader_params p = { .mode = ZR_SAMPLER_IID, .batch_size = 4, .world_size = 1,
                               .prefetch = 3 };
        zr_loader_stream st;
        zr_loader_event ev;
        uint64_t s = 0;

        fixture_new(&f, ZR_CODEC_RAW, 0);
        st = reg_stream(&f.dense, "d");
        l = open_loader(&f, &st, 1, &p);
        next_batch(&f.g, l, &ev);
        zr_loader_stop(l, ZR_E_SHUTDOWN, "the daemon is shutting down");
        zr_loader_release(l, ev.ring, ev.slot, NULL);
        for (s = 1;; s++) {
                next_event(&f.g, l, &ev);
                if (ev.kind == ZR_LOADER_EVENT_END)
                        break;
                ck_assert_uint_eq(ev.step, s);
        }
        ck_assert_int_eq(ev.code, ZR_E_SHUTDOWN);
        ck_assert_uint_eq(ev.step, s);
        ck_assert_uint_le(s, 3);
        zr_loader_free(l);
        fixture_free(&f);
}
END_TEST

int main(void) {
        Suite *s = suite_create("loader");
        TCase *tc = tcase_create("loader");
        SRunner *sr;
        int failed;

        tcase_set_timeout(tc, 300);
        tcase_add_test(tc, test_open_errors);
        tcase_add_test(tc, test_resume_raw);
        tcase_add_test(tc, test_resume_zstd);
        tcase_add_test(tc, test_far_steps_and_domain_end);
        tcase_add_test(tc, test_slots_and_exhaustion);
        tcase_add_test(tc, test_layout_and_seals);
        tcase_add_test(tc, test_sharding);
        tcase_add_test(tc, test_dedup);
        tcase_add_test(tc, test_group_slow_member);
        tcase_add_test(tc, test_group_rings);
        tcase_add_test(tc, test_group_memory);
        tcase_add_test(tc, test_cache_accounting);
        tcase_add_test(tc, test_stale);
        tcase_add_test(tc, test_locked_dataset);
        tcase_add_test(tc, test_free_parked);
        tcase_add_test(tc, test_ragged_capacity);
        tcase_add_test(tc, test_fairness);
        tcase_add_test(tc, test_free_in_flight);
        tcase_add_test(tc, test_stop);
        tcase_add_test(tc, test_spare_rings);
        suite_add_tcase(s, tc);
        sr = srunner_create(s);
        srunner_run_all(sr, CK_NORMAL);
        failed = srunner_ntests_failed(sr);
        srunner_free(sr);
        return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
