/* test-loader.c: one loader against the contract of PROTOCOL.md section 10:
 * errors at open, batches bit-exact and in step order, resume equivalence,
 * far steps and the sampler's domain, slots and releases, the slot layout and
 * the ring's seals, sharding, ragged capacity, and a stop. Stores are small
 * and made in a temp dir. */
#include "helpers.h"

#include <inttypes.h>
#include <sys/mman.h>

/* Errors at open. */
START_TEST(test_open_errors) {
        fixture f;
        zr_loader *l = NULL;
        zr_error err = {0};
        zr_loader_params p = loader_params(ZR_SAMPLER_IID, 4, 0, 2);
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
        ck_assert_uint_eq(zr_loader_slots(l), 4);
        zr_loader_free(l);
        /* short of budget: fewer slots, down to 2, then refused */
        p.ring_bytes_max = 3 * 4096;
        ck_assert_int_eq(zr_loader_new(f.g.e, st, 1, &p, NULL, &l, &err), 0);
        ck_assert_uint_eq(zr_loader_slots(l), 3);
        zr_loader_free(l);
        p.ring_bytes_max = 2 * 4096 + 4095;
        ck_assert_int_eq(zr_loader_new(f.g.e, st, 1, &p, NULL, &l, &err), 0);
        ck_assert_uint_eq(zr_loader_slots(l), 2);
        zr_loader_free(l);
        p.ring_bytes_max = 2 * 4096 - 1;
        ck_assert_int_eq(zr_loader_new(f.g.e, st, 1, &p, NULL, &l, &err), -ZR_E_LIMIT);
        reg_fini(&shorter);
        fixture_free(&f);
}
END_TEST

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
                        zr_loader_params p = loader_params(modes[m], 16, 99, 3);
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

/* A stride k: steps start, start + k, ... each the batch of its step, however
 * loaders of other strides and phases run beside it on the engine; the
 * domain's end falls on the stride's last step. */
START_TEST(test_step_stride) {
        fixture f;
        zr_loader_stream st;
        zr_loader_params p = { .mode = ZR_SAMPLER_CYCLIC, .batch_size = 8, .seed = 5,
                               .start_step = 7, .step_stride = 3, .world_size = 1,
                               .prefetch = 2 };
        zr_sampler_params sp = { .mode = ZR_SAMPLER_CYCLIC, .n = N_DENSE, .batch_size = 8,
                                 .seed = 5, .world_size = 1 };
        zr_loader_params q[3];
        zr_loader *l, *m[3];
        zr_loader_event ev;
        uint64_t last;

        fixture_new(&f, ZR_CODEC_RAW, 0);
        st = reg_stream(&f.dense, "d");
        l = open_loader(&f, &st, 1, &p);
        for (uint64_t k = 0; k < 6; k++) {
                next_batch(&f.g, l, &ev);
                ck_assert_uint_eq(ev.step, 7 + 3 * k);
                check_dense(l, &ev, 0, &f.dense, ITEM, &sp);
                zr_loader_release(l, ev.ring, ev.slot, NULL);
        }
        zr_loader_free(l);

        /* strides 2 (phases 0 and 1) and 1 over the same parameters: their steps
         * overlap, none takes another's batch for its own */
        for (int i = 0; i < 3; i++) {
                q[i] = p;
                q[i].start_step = i == 1 ? 1 : 0;
                q[i].step_stride = i < 2 ? 2 : 1;
                m[i] = open_loader(&f, &st, 1, &q[i]);
        }
        for (uint64_t k = 0; k < 8; k++) {
                for (int i = 0; i < 3; i++) {
                        next_batch(&f.g, m[i], &ev);
                        ck_assert_uint_eq(ev.step, q[i].start_step + q[i].step_stride * k);
                        check_dense(m[i], &ev, 0, &f.dense, ITEM, &sp);
                        zr_loader_release(m[i], ev.ring, ev.slot, NULL);
                }
        }
        for (int i = 0; i < 3; i++)
                zr_loader_free(m[i]);

        /* the end: the last step of stride 5 at or below 2^64 - 1, then END */
        p.mode = sp.mode = ZR_SAMPLER_IID;
        p.step_stride = 5;
        p.start_step = UINT64_MAX - 12;
        last = p.start_step + 10;
        l = open_loader(&f, &st, 1, &p);
        for (uint64_t k = 0; k < 3; k++) {
                next_batch(&f.g, l, &ev);
                ck_assert_uint_eq(ev.step, p.start_step + 5 * k);
                check_dense(l, &ev, 0, &f.dense, ITEM, &sp);
                zr_loader_release(l, ev.ring, ev.slot, NULL);
        }
        ck_assert_uint_eq(ev.step, last);
        next_event(&f.g, l, &ev);
        ck_assert_int_eq(ev.kind, ZR_LOADER_EVENT_END);
        ck_assert_int_eq(ev.code, ZR_E_SAMPLER);
        ck_assert_ptr_nonnull(strstr(ev.message, "was the last of stride 5"));
        zr_loader_free(l);
        fixture_free(&f);
}
END_TEST

/* Step order, exactly once, slot reuse, ring exhaustion, bad releases. */
START_TEST(test_slots_and_exhaustion) {
        fixture f;
        zr_loader_stream st;
        zr_loader_params p = loader_params(ZR_SAMPLER_IID, 4, 1, 3);
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
        zr_loader_params p = loader_params(ZR_SAMPLER_CYCLIC, 5, 2, 3);
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

/* A ragged batch over its stream's capacity ends the loader with ZR_E_BUFFER at
 * that step and says how many bytes it needs. */
START_TEST(test_ragged_capacity) {
        fixture f;
        zr_loader *l;
        zr_loader_params p = loader_params(ZR_SAMPLER_SEQUENTIAL, 4, 0, 2);
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

/* zr_loader_stop(): steps started are announced, then END with the code. */
START_TEST(test_stop) {
        fixture f;
        zr_loader *l;
        zr_loader_params p = loader_params(ZR_SAMPLER_IID, 4, 0, 3);
        zr_loader_stream st;
        zr_loader_event ev;
        uint64_t s = 0;

        fixture_new(&f, ZR_CODEC_RAW, 0);
        st = reg_stream(&f.dense, "d");
        l = open_loader(&f, &st, 1, &p);
        next_batch(&f.g, l, &ev);
        zr_loader_stop(l, ZR_E_SHUTDOWN, "the daemon is shutting down");
        zr_loader_release(l, ev.ring, ev.slot, NULL);
        s = batches_until_end(&f.g, l, 1, false, NULL, NULL, &ev);
        ck_assert_int_eq(ev.code, ZR_E_SHUTDOWN);
        ck_assert_uint_eq(ev.step, s);
        ck_assert_uint_le(s, 3);
        zr_loader_free(l);
        fixture_free(&f);
}
END_TEST

int main(void) {
        Suite *s = suite_create("loader");
        /* 300 s per test: check names a hung test before meson ends the suite */
        TL_TCASE(s, "loader", 300, test_open_errors, test_resume_raw, test_resume_zstd, test_far_steps_and_domain_end, test_step_stride, test_slots_and_exhaustion, test_layout_and_seals, test_sharding, test_ragged_capacity, test_stop);
        return tl_run_suite(s);
}
