/* test-loader-group.c: identical loaders share work (loader.h, "Shared
 * work"): one gather per step however many members, a slow member stalls
 * nobody, members that drift apart by more than their depth still share,
 * every member is told of every ring of its group before a batch names it
 * and of its end after, members in step keep about one ring
 * resident, and a closed loader leaves a spare ring for the next. */
#include "helpers.h"

#include <inttypes.h>
#include <sys/mman.h>

/* N identical loaders: the group gathers each step about once. */
START_TEST(test_dedup) {
        enum { NL = 4, K = 40 };
        fixture f;
        zr_loader *l[NL];
        zr_loader_engine_counters t;
        zr_loader_params p = loader_params(ZR_SAMPLER_CYCLIC, 16, 11, 4);
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
        zr_loader_params p = loader_params(ZR_SAMPLER_IID, 8, 4, 2);
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

/* Members that drift apart by more than their prefetch depth (one consumer
 * slower than the others: here it takes step s while they take step s + LAG,
 * twice its depth) still share every gather while the group's slots
 * (group.c, resident_cap()) hold the steps between them. A fill took the
 * resident slot with the oldest batch first: the very step the slow member
 * needed next, which it then gathered again, every step (122 gathers for
 * these 64 steps; 4 processes in the bench: 159 for 96). The lag is forced
 * by the order of the takes, not by timing. */
START_TEST(test_group_lagging_member) {
        enum { NL = 8, LAG = 4, K = 60 };
        fixture f;
        zr_loader *l[NL];
        zr_loader_engine_counters t;
        zr_loader_params p = loader_params(ZR_SAMPLER_IID, 16, 8, 2);
        zr_sampler_params sp = { .mode = ZR_SAMPLER_IID, .n = N_DENSE, .batch_size = 16,
                                 .seed = 8, .world_size = 1 };
        zr_loader_stream st;
        zr_loader_event ev;

        fixture_new(&f, ZR_CODEC_RAW, 0);
        st = reg_stream(&f.dense, "d");
        for (int i = 0; i < NL; i++)
                l[i] = open_loader(&f, &st, 1, &p);
        /* l[0] is the slow one: the others go LAG steps ahead first */
        for (uint64_t s = 0; s < LAG; s++)
                for (int i = 1; i < NL; i++) {
                        next_batch(&f.g, l[i], &ev);
                        ck_assert_uint_eq(ev.step, s);
                        zr_loader_release(l[i], ev.ring, ev.slot, NULL);
                }
        for (uint64_t s = 0; s < K; s++) {
                next_batch(&f.g, l[0], &ev);
                ck_assert_uint_eq(ev.step, s);
                check_dense(l[0], &ev, 0, &f.dense, ITEM, &sp);
                zr_loader_release(l[0], ev.ring, ev.slot, NULL);
                for (int i = 1; i < NL; i++) {
                        next_batch(&f.g, l[i], &ev);
                        ck_assert_uint_eq(ev.step, s + LAG);
                        check_dense(l[i], &ev, 0, &f.dense, ITEM, &sp);
                        zr_loader_release(l[i], ev.ring, ev.slot, NULL);
                }
        }
        zr_loader_engine_counters_get(f.g.e, &t);
        fprintf(stderr, "lagging member: %d members, lag %d, %d steps: gathers %" PRIu64
                ", shared takes %" PRIu64 "\n", NL, LAG, K, t.gathers, t.shared);
        /* the K + LAG steps taken and the prefetch past them, once each (64
         * in every run here); NL: the slack test_dedup gives */
        ck_assert_uint_le(t.gathers, K + LAG + p.prefetch + NL);
        for (int i = 0; i < NL; i++)
                zr_loader_free(l[i]);
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
        zr_loader_params p = loader_params(ZR_SAMPLER_CYCLIC, 8, 9, 3);
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
        zr_loader_params p = loader_params(ZR_SAMPLER_IID, 64, 5, 4);
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

/* Spare rings: a freed loader leaves a warm ring of its size behind (within
 * the budget), the next loader of that size takes it, and its batches are
 * right; a lowered budget releases spares. */
START_TEST(test_spare_rings) {
        fixture f;
        zr_loader *l;
        zr_loader_engine_counters t;
        zr_loader_params p = loader_params(ZR_SAMPLER_CYCLIC, 50, 8, 3);
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

int main(void) {
        Suite *s = suite_create("loader-group");
        /* 300 s per test: check names a hung test before meson ends the suite */
        TL_TCASE(s, "loader-group", 300, test_dedup, test_group_slow_member, test_group_lagging_member,
                 test_group_rings, test_group_memory, test_spare_rings);
        return tl_run_suite(s);
}
