/* test-loader-mixture.c: loaders over weighted mixtures of sources
 * (loader.h, zr_loader_params.sources; proto/SAMPLERS.md, "Mixtures"): every
 * batch is the mixture sampler's (sources and indices) and each record is its
 * own source's, bit for bit, dense and ragged, raw and compressed (through the
 * decoded cache) and read ahead; resume at any step on a fresh engine; ranks
 * slice the batch of world size 1; identical mixtures share one group, others
 * do not; the domain's last step; a source that changes ends the loader
 * naming it; and every refusal at open names the stream and the difference. */
#include "helpers.h"

#include <inttypes.h>

#include "io/ioq.h"
#include "sampler/mixture.h"

#define K 3
#define B 16
#define SEED 4242

/* Three sources of a dense stream ("a", ITEM bytes) and a ragged one ("r"),
 * of different lengths and codecs; source k's records come from tags 10k+10
 * and 10k+11. */
static const uint64_t src_len[K] = { 50, 13, 200 };
static const enum zr_codec src_codec[K] = { ZR_CODEC_RAW, ZR_CODEC_ZSTD, ZR_CODEC_ZSTD };
static const zr_loader_source src_def[K] = {
        { .mode = ZR_SAMPLER_CYCLIC, .weight = 7 },
        { .mode = ZR_SAMPLER_IID, .weight = 2 },
        { .mode = ZR_SAMPLER_CYCLIC_LX157, .weight = 1 },
};

typedef struct mix_fixture {
        scratch sc;
        rig g;
        reg dense[K], ragged[K];
        zr_loader_stream st[2 * K]; /* source-major: a0 r0 a1 r1 a2 r2 */
} mix_fixture;

static void mix_fixture_new(mix_fixture *f, int threads, uint64_t cache) {
        static const char *const names[K][2] = { { "a0", "r0" }, { "a1", "r1" }, { "a2", "r2" } };

        scratch_new(&f->sc);
        rig_new(&f->g, (size_t)threads, cache);
        for (int k = 0; k < K; k++) {
                reg_init(&f->dense[k], make_dense(&f->sc, names[k][0], src_len[k], ITEM, src_codec[k],
                                                  f->g.pool, 10 * (uint64_t)k + 10));
                reg_init(&f->ragged[k], make_ragged(&f->sc, names[k][1], src_len[k], src_codec[k],
                                                    f->g.pool, 10 * (uint64_t)k + 11));
                f->st[2 * k] = reg_stream(&f->dense[k], "a");
                f->st[2 * k + 1] = reg_stream(&f->ragged[k], "r");
        }
}

static void mix_fixture_free(mix_fixture *f) {
        rig_free(&f->g);
        for (int k = 0; k < K; k++) {
                reg_fini(&f->dense[k]);
                reg_fini(&f->ragged[k]);
        }
        scratch_free(&f->sc);
}

static zr_loader *open_mix(mix_fixture *f, zr_loader_stream *st, size_t n, const zr_loader_params *p) {
        zr_loader *l = NULL;
        zr_error err = {0};
        ck_assert_msg(zr_loader_new(f->g.e, st, n, p, NULL, &l, &err) == 0, "%s", err.message);
        return l;
}

static zr_loader_params mix_params(uint64_t start, uint32_t rank, uint32_t world, uint64_t batch) {
        return (zr_loader_params){ .mode = ZR_SAMPLER_SEQUENTIAL, .batch_size = batch, .seed = SEED,
                                   .start_step = start, .rank = rank, .world_size = world,
                                   .prefetch = 3, .nsources = K, .sources = src_def };
}

/* The reference: the mixture sampler over the sources' lengths. */
static void mix_reference(zr_mixture *m, uint64_t batch, uint32_t world) {
        zr_mixture_source s[K];
        zr_error err = {0};

        for (int k = 0; k < K; k++)
                s[k] = (zr_mixture_source){ src_def[k].mode, src_len[k], src_def[k].weight };
        ck_assert_msg(zr_mixture_init(m, s, K, batch, world, SEED, &err) == 0, "%s", err.message);
}

/* A batch of the mixture loader: its sources and indices are the reference's
 * at (step, rank), and each record of both streams is its source's. */
static void check_mix_batch(const zr_loader *l, const zr_loader_event *ev, const zr_mixture *m,
                            uint32_t rank) {
        const uint8_t *ring = ev->ring_data;
        uint64_t idx[64];
        uint32_t src[64];
        uint8_t want[ITEM > 24 + 13 * 3 * 2 ? ITEM : 24 + 13 * 3 * 2];
        const zr_loader_stream_batch *da = &ev->streams[0], *ra = &ev->streams[1];

        ck_assert_uint_le(ev->batch_size, 64);
        ck_assert_ptr_nonnull(ev->sources);
        ck_assert_int_eq(zr_mixture_batch(m, ev->step, rank, src, idx, NULL), 0);
        ck_assert_uint_eq(ev->nstreams, 2);
        ck_assert_uint_eq(da->bytes, ev->batch_size * ITEM);
        ck_assert_uint_eq(da->offset, ev->slot * zr_loader_slot_bytes(l) + zr_loader_stream_offset(l, 0));
        for (uint64_t j = 0; j < ev->batch_size; j++) {
                uint64_t d[2];

                ck_assert_uint_eq(ev->sources[j], src[j]);
                ck_assert_uint_eq(ev->indices[j], idx[j]);
                ck_assert_uint_lt(idx[j], src_len[src[j]]);
                gen_record(want, ITEM, 10 * (uint64_t)src[j] + 10, idx[j]);
                ck_assert_int_eq(memcmp(ring + da->offset + j * ITEM, want, ITEM), 0);
                ragged_shape(idx[j], d);
                ck_assert_uint_eq(ra->shapes[2 * j], d[0]);
                ck_assert_uint_eq(ra->shapes[2 * j + 1], d[1]);
                ck_assert_uint_eq(ra->lengths[j], d[0] * d[1] * 2);
                ck_assert_uint_ge(ra->offsets[j] - 24, ra->offset);
                ck_assert_uint_le(ra->offsets[j] + ra->lengths[j], ra->offset + ra->bytes);
                zr_ragged_header_write(want, d, 2);
                gen_record(want + 24, ra->lengths[j], 10 * (uint64_t)src[j] + 11, idx[j]);
                ck_assert_int_eq(memcmp(ring + ra->offsets[j] - 24, want, 24 + ra->lengths[j]), 0);
        }
}

/* Content, the cache and resume: 24 steps each equal to the reference, then
 * steps 9..16 of a loader opened at 9 on a fresh engine (a daemon restart)
 * byte for byte those of the first run, sources included. */
START_TEST(test_content_and_resume) {
        enum { S = 9, STEPS = 24 };
        mix_fixture f;
        zr_mixture m;
        zr_loader_params p = mix_params(0, 0, 1, B);
        zr_loader_event ev;
        zr_loader_engine_counters t;
        uint8_t *seen[STEPS];
        size_t seen_len[STEPS];
        zr_loader *l;
        zr_error err = {0};
        rig g2;

        mix_fixture_new(&f, 2, 1 << 20);
        mix_reference(&m, B, 1);
        l = open_mix(&f, f.st, 2 * K, &p);
        ck_assert_uint_eq(zr_loader_nstreams(l), 2);
        ck_assert_uint_eq(zr_loader_nsources(l), K);
        ck_assert_uint_eq(zr_loader_length(l), 50 + 13 + 200);
        for (uint32_t k = 0; k < K; k++)
                ck_assert_uint_eq(zr_loader_source_length(l, k), src_len[k]);
        for (uint64_t s = 0; s < STEPS; s++) {
                next_batch(&f.g, l, &ev);
                ck_assert_uint_eq(ev.step, s);
                check_mix_batch(l, &ev, &m, 0);
                seen[s] = batch_bytes(l, &ev, &seen_len[s]);
                seen[s] = realloc(seen[s], seen_len[s] + B);
                memcpy(seen[s] + seen_len[s], ev.sources, B);
                seen_len[s] += B;
                ck_assert_int_eq(zr_loader_release(l, ev.ring, ev.slot, NULL), 0);
        }
        zr_loader_engine_counters_get(f.g.e, &t);
        /* sources 1 and 2 are compressed: their records go through the cache,
         * and 24 steps of 13 records of source 1 must meet some twice */
        ck_assert_uint_gt(t.misses, 0);
        ck_assert_uint_gt(t.hits, 0);
        zr_loader_free(l);

        rig_new(&g2, 1, 1 << 20);
        p.start_step = S;
        ck_assert_msg(zr_loader_new(g2.e, f.st, 2 * K, &p, NULL, &l, &err) == 0, "%s", err.message);
        for (uint64_t s = S; s < STEPS; s++) {
                size_t len;
                uint8_t *b;

                next_batch(&g2, l, &ev);
                ck_assert_uint_eq(ev.step, s);
                b = batch_bytes(l, &ev, &len);
                b = realloc(b, len + B);
                memcpy(b + len, ev.sources, B);
                ck_assert_uint_eq(len + B, seen_len[s]);
                ck_assert_int_eq(memcmp(b, seen[s], seen_len[s]), 0);
                free(b);
                zr_loader_release(l, ev.ring, ev.slot, NULL);
        }
        zr_loader_free(l);
        rig_free(&g2);
        for (int s = 0; s < STEPS; s++)
                free(seen[s]);
        mix_fixture_free(&f);
}
END_TEST

/* Ranks of world size 3 with batch 8 are the slices of world size 1's batch
 * of 24 at every step: the global batch depends on B x W only. */
START_TEST(test_ranks_slice_one_batch) {
        mix_fixture f;
        zr_mixture m1, m3;
        zr_loader *whole, *ranks[3];
        zr_loader_event ev, evr;
        zr_loader_params p = mix_params(5, 0, 1, 24);

        mix_fixture_new(&f, 2, 0);
        mix_reference(&m1, 24, 1);
        mix_reference(&m3, 8, 3);
        whole = open_mix(&f, f.st, 2 * K, &p);
        for (uint32_t r = 0; r < 3; r++) {
                p = mix_params(5, r, 3, 8);
                ranks[r] = open_mix(&f, f.st, 2 * K, &p);
        }
        for (uint64_t s = 5; s < 12; s++) {
                next_batch(&f.g, whole, &ev);
                check_mix_batch(whole, &ev, &m1, 0);
                for (uint32_t r = 0; r < 3; r++) {
                        next_batch(&f.g, ranks[r], &evr);
                        ck_assert_uint_eq(evr.step, s);
                        check_mix_batch(ranks[r], &evr, &m3, r);
                        ck_assert_int_eq(memcmp(evr.sources, ev.sources + 8 * r, 8), 0);
                        ck_assert_int_eq(memcmp(evr.indices, ev.indices + 8 * r, 8 * 8), 0);
                        zr_loader_release(ranks[r], evr.ring, evr.slot, NULL);
                }
                zr_loader_release(whole, ev.ring, ev.slot, NULL);
        }
        for (uint32_t r = 0; r < 3; r++)
                zr_loader_free(ranks[r]);
        zr_loader_free(whole);
        mix_fixture_free(&f);
}
END_TEST

/* Two identical mixtures are one group (each step gathered once); a mixture
 * with another weight, or a plain loader of the same streams, is not. */
START_TEST(test_groups) {
        enum { STEPS = 12 };
        mix_fixture f;
        zr_mixture m;
        zr_loader *a, *b, *c;
        zr_loader_event ev;
        zr_loader_counters ca, cb;
        zr_loader_source heavier[K];
        zr_loader_params p = mix_params(0, 0, 1, B), q = p;

        mix_fixture_new(&f, 2, 0);
        mix_reference(&m, B, 1);
        memcpy(heavier, src_def, sizeof(heavier));
        heavier[2].weight = 2;
        q.sources = heavier;
        a = open_mix(&f, f.st, 2 * K, &p);
        b = open_mix(&f, f.st, 2 * K, &p);
        c = open_mix(&f, f.st, 2 * K, &q);
        ck_assert(zr_loader_same_key(a, b, 1));
        ck_assert(!zr_loader_same_key(a, c, 1));
        zr_loader_params plain = { .mode = ZR_SAMPLER_CYCLIC, .batch_size = B, .seed = SEED,
                                   .world_size = 1, .prefetch = 3 };
        zr_loader *d = open_mix(&f, f.st, 2, &plain);
        ck_assert(!zr_loader_same_key(a, d, 1));
        zr_loader_free(d);
        zr_loader_free(c);
        for (uint64_t s = 0; s < STEPS; s++) {
                zr_loader *both[2] = { a, b };
                for (int i = 0; i < 2; i++) {
                        next_batch(&f.g, both[i], &ev);
                        ck_assert_uint_eq(ev.step, s);
                        check_mix_batch(both[i], &ev, &m, 0);
                        zr_loader_release(both[i], ev.ring, ev.slot, NULL);
                }
        }
        /* each step gathered once for both: by one, taken by the other (the
         * leader may have gathered its prefetch ahead) */
        zr_loader_counters_get(a, &ca);
        zr_loader_counters_get(b, &cb);
        ck_assert_uint_le(ca.gathers + cb.gathers, STEPS + 3);
        ck_assert_uint_ge(ca.shared + cb.shared, STEPS - 3);
        ck_assert_uint_eq(ca.batches + cb.batches, 2 * STEPS);
        zr_loader_free(a);
        zr_loader_free(b);
        mix_fixture_free(&f);
}
END_TEST

/* The mixture's domain: its last step is the last whose positions stay below
 * 2^64 - 1; a loader opened there gets that batch then END, one past it is
 * refused. */
START_TEST(test_domain_end) {
        mix_fixture f;
        zr_mixture m;
        zr_loader *l = NULL;
        zr_loader_event ev;
        zr_error err = {0};
        zr_loader_params p;

        mix_fixture_new(&f, 1, 0);
        mix_reference(&m, B, 1);
        ck_assert_uint_eq(m.last_step, UINT64_MAX / B - 1);
        p = mix_params(m.last_step, 0, 1, B);
        l = open_mix(&f, f.st, 2 * K, &p);
        next_batch(&f.g, l, &ev);
        ck_assert_uint_eq(ev.step, m.last_step);
        check_mix_batch(l, &ev, &m, 0);
        zr_loader_release(l, ev.ring, ev.slot, NULL);
        next_event(&f.g, l, &ev);
        ck_assert_int_eq(ev.kind, ZR_LOADER_EVENT_END);
        ck_assert_int_eq(ev.code, ZR_E_SAMPLER);
        ck_assert_uint_eq(ev.step, m.last_step + 1);
        ck_assert_ptr_nonnull(strstr(ev.message, "mixture's domain"));
        zr_loader_free(l);
        p.start_step = m.last_step + 1;
        l = NULL;
        ck_assert_int_eq(zr_loader_new(f.g.e, f.st, 2 * K, &p, NULL, &l, &err), -ZR_E_SAMPLER);
        ck_assert_ptr_nonnull(strstr(err.message, "past its last step"));
        mix_fixture_free(&f);
}
END_TEST

/* A mixture with a stride: the batch of each of its steps, and the end on the
 * stride's last step at or below the mixture's last. */
START_TEST(test_stride) {
        mix_fixture f;
        zr_mixture m;
        zr_loader *l;
        zr_loader_event ev;
        zr_loader_params p;

        mix_fixture_new(&f, 1, 0);
        mix_reference(&m, B, 1);
        p = mix_params(2, 0, 1, B);
        p.step_stride = 3;
        l = open_mix(&f, f.st, 2 * K, &p);
        for (uint64_t k = 0; k < 5; k++) {
                next_batch(&f.g, l, &ev);
                ck_assert_uint_eq(ev.step, 2 + 3 * k);
                check_mix_batch(l, &ev, &m, 0);
                zr_loader_release(l, ev.ring, ev.slot, NULL);
        }
        zr_loader_free(l);
        p.start_step = m.last_step - 4;
        l = open_mix(&f, f.st, 2 * K, &p);
        for (uint64_t k = 0; k < 2; k++) {
                next_batch(&f.g, l, &ev);
                ck_assert_uint_eq(ev.step, m.last_step - 4 + 3 * k);
                check_mix_batch(l, &ev, &m, 0);
                zr_loader_release(l, ev.ring, ev.slot, NULL);
        }
        next_event(&f.g, l, &ev);
        ck_assert_int_eq(ev.kind, ZR_LOADER_EVENT_END);
        ck_assert_int_eq(ev.code, ZR_E_SAMPLER);
        ck_assert_uint_eq(ev.step, m.last_step + 2);
        ck_assert_ptr_nonnull(strstr(ev.message, "was the last of stride 3"));
        zr_loader_free(l);
        mix_fixture_free(&f);
}
END_TEST

/* A source that changes ends the loader STALE, naming its stream and source. */
START_TEST(test_source_changed) {
        mix_fixture f;
        zr_loader *l;
        zr_loader_event ev;
        zr_loader_params p = mix_params(0, 0, 1, B);
        uint64_t del = 0, s;
        zr_error err = {0};

        mix_fixture_new(&f, 2, 0);
        p.prefetch = 2;
        l = open_mix(&f, f.st, 2 * K, &p);
        next_batch(&f.g, l, &ev);
        zr_dataset_lock(f.ragged[1].ds, true);
        ck_assert_msg(zr_dataset_delete(f.ragged[1].ds, &del, 1, &err) == 0, "%s", err.message);
        zr_dataset_mutated(f.ragged[1].ds);
        zr_dataset_unlock(f.ragged[1].ds);
        zr_loader_release(l, ev.ring, ev.slot, NULL);
        s = batches_until_end(&f.g, l, 1, true, NULL, NULL, &ev);
        ck_assert_int_eq(ev.code, ZR_E_STALE);
        ck_assert_uint_le(s, 3);
        ck_assert_msg(strstr(ev.message, "source 1 stream 1 (r)"), "%s", ev.message);
        zr_loader_free(l);
        mix_fixture_free(&f);
}
END_TEST

/* Read ahead from a dropped page cache: batches still bit-exact, and the
 * engine read each source's records ahead (pread threads). */
START_TEST(test_read_ahead) {
        enum { STEPS = 30 };
        mix_fixture f;
        zr_mixture m;
        zr_ioq *q;
        zr_ioq_options o = { .backend = ZR_IOQ_THREADS };
        zr_loader_engine_counters t;
        zr_loader_event ev;
        zr_loader *l;
        zr_error err = {0};
        zr_loader_params p = mix_params(0, 0, 1, B);

        mix_fixture_new(&f, 2, 1 << 20);
        ck_assert_msg(zr_ioq_new(&o, &q, &err) == 0, "%s", err.message);
        zr_loader_engine_set_io(f.g.e, q, 16u << 20);
        mix_reference(&m, B, 1);
        for (int k = 0; k < K; k++) {
                char name[8];
                snprintf(name, sizeof(name), "a%d", k);
                evict(&f.sc, name);
                snprintf(name, sizeof(name), "r%d", k);
                evict(&f.sc, name);
        }
        l = open_mix(&f, f.st, 2 * K, &p);
        for (uint64_t s = 0; s < STEPS; s++) {
                next_batch(&f.g, l, &ev);
                ck_assert_uint_eq(ev.step, s);
                check_mix_batch(l, &ev, &m, 0);
                zr_loader_release(l, ev.ring, ev.slot, NULL);
        }
        zr_loader_engine_counters_get(f.g.e, &t);
        printf("mixture read ahead: %llu steps read ahead, %llu warm, %llu records read, %llu "
               "resident, %llu decoded in the cache, %llu steps planned\n",
               (unsigned long long)t.prefetch_steps, (unsigned long long)t.prefetch_warm,
               (unsigned long long)t.prefetch_records, (unsigned long long)t.prefetch_resident,
               (unsigned long long)t.prefetch_cached, (unsigned long long)t.planned_steps);
        ck_assert_uint_gt(t.prefetch_steps + t.prefetch_warm, STEPS / 2);
        ck_assert_uint_gt(t.prefetch_records, 0);
        ck_assert_uint_gt(t.planned_steps, 0); /* sources 1 and 2 are compressed */
        ck_assert_uint_eq(t.prefetch_errors, 0);
        zr_loader_free(l);
        zr_loader_engine_counters_get(f.g.e, &t);
        ck_assert_uint_eq(t.prefetch_bytes, 0);
        ck_assert_uint_eq(t.planned, 0);
        rig_free(&f.g);
        zr_ioq_free(q);
        rig_new(&f.g, 1, 0);
        mix_fixture_free(&f);
}
END_TEST

/* An empty dataset: ragged of `dtype` and ndim 2, or (NULL) dense "|u1" of ITEM. */
static zr_dataset *make_empty(scratch *sc, const char *name, const char *dtype) {
        zr_store_options o = { .chunk_log2 = TEST_CHUNK_LOG2 };
        uint64_t item = ITEM;
        zr_dataset *ds;
        zr_schema s;
        zr_error err = {0};
        int fd;

        ck_assert_int_eq(mkdirat(sc->fd, name, 0755), 0);
        fd = openat(sc->fd, name, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        ck_assert_int_ge(fd, 0);
        if (dtype)
                ck_assert_int_eq(zr_schema_init_ragged(&s, dtype, 2, ZR_CODEC_RAW, &err), 0);
        else
                ck_assert_int_eq(zr_schema_init_dense(&s, "|u1", &item, 1, ZR_CODEC_RAW, &err), 0);
        ck_assert_msg(zr_dataset_create(fd, &s, NULL, 0, &o, &ds, &err) == 0, "%s", err.message);
        close(fd);
        return ds;
}

/* Refusals at open, each naming what is wrong. */
START_TEST(test_refusals) {
        mix_fixture f;
        zr_loader *l = NULL;
        zr_error err = {0};
        zr_loader_params p = mix_params(0, 0, 1, B);
        zr_loader_source bad[K];
        zr_loader_stream st[2 * K];
        reg wide, ragged1, shorter, other_dtype, empty_dense;

        mix_fixture_new(&f, 1, 0);
        memcpy(st, f.st, sizeof(st));
        /* a dense stream of another item shape: the stream, the source and both shapes */
        reg_init(&wide, make_dense(&f.sc, "w", 13, ITEM + 1, ZR_CODEC_RAW, f.g.pool, 1));
        st[2] = reg_stream(&wide, "a");
        ck_assert_int_eq(zr_loader_new(f.g.e, st, 2 * K, &p, NULL, &l, &err), -ZR_E_SCHEMA);
        ck_assert_msg(strstr(err.message, "stream 0 (a): source 1 has item shape (97,), source 0 (96,)"),
                      "%s", err.message);
        zr_error_clear(&err);
        /* ragged where source 0 is dense */
        reg_init(&ragged1, make_ragged(&f.sc, "q", 13, ZR_CODEC_RAW, f.g.pool, 1));
        st[2] = reg_stream(&ragged1, "a");
        ck_assert_int_eq(zr_loader_new(f.g.e, st, 2 * K, &p, NULL, &l, &err), -ZR_E_SCHEMA);
        ck_assert_msg(strstr(err.message, "stream 0 (a): source 1 is ragged, source 0 dense"), "%s",
                      err.message);
        zr_error_clear(&err);
        /* another dtype: source 2 of two empty streams, the ragged one of <u2 */
        other_dtype.ds = make_empty(&f.sc, "t", "<u2");
        empty_dense.ds = make_empty(&f.sc, "u", NULL);
        st[2] = f.st[2];
        st[4] = (zr_loader_stream){ .ds = empty_dense.ds, .name = "a" };
        st[5] = (zr_loader_stream){ .ds = other_dtype.ds, .name = "r" };
        ck_assert_int_eq(zr_loader_new(f.g.e, st, 2 * K, &p, NULL, &l, &err), -ZR_E_SCHEMA);
        ck_assert_msg(strstr(err.message, "stream 1 (r): source 2 has dtype '<u2', source 0 '<i2'"), "%s",
                      err.message);
        zr_error_clear(&err);
        /* a source's streams of different lengths */
        reg_init(&shorter, make_ragged(&f.sc, "s", 12, ZR_CODEC_RAW, f.g.pool, 1));
        st[4] = f.st[4];
        st[5] = f.st[5];
        st[3] = reg_stream(&shorter, "r");
        ck_assert_int_eq(zr_loader_new(f.g.e, st, 2 * K, &p, NULL, &l, &err), -ZR_E_MISALIGNED);
        ck_assert_msg(strstr(err.message, "source 1") && strstr(err.message, "a: 13") &&
                      strstr(err.message, "r: 12"), "%s", err.message);
        zr_error_clear(&err);
        /* streams that are no multiple of the sources */
        ck_assert_int_eq(zr_loader_new(f.g.e, f.st, 2 * K - 1, &p, NULL, &l, &err), -ZR_E_PROTO);
        zr_error_clear(&err);
        /* a weight of 0, a mode that is no mode: the sampler's refusals, naming the source */
        memcpy(bad, src_def, sizeof(bad));
        bad[1].weight = 0;
        p.sources = bad;
        ck_assert_int_eq(zr_loader_new(f.g.e, f.st, 2 * K, &p, NULL, &l, &err), -ZR_E_SAMPLER);
        ck_assert_msg(strstr(err.message, "source 1: weight 0"), "%s", err.message);
        zr_error_clear(&err);
        bad[1].weight = 1;
        bad[2].mode = (enum zr_sampler_mode)9;
        ck_assert_int_eq(zr_loader_new(f.g.e, f.st, 2 * K, &p, NULL, &l, &err), -ZR_E_SAMPLER);
        ck_assert_msg(strstr(err.message, "source 2"), "%s", err.message);
        zr_error_clear(&err);
        /* the lengths a resume expects */
        memcpy(bad, src_def, sizeof(bad));
        bad[2].has_length = 1;
        bad[2].length = 199;
        ck_assert_int_eq(zr_loader_new(f.g.e, f.st, 2 * K, &p, NULL, &l, &err), -ZR_E_STALE);
        ck_assert_msg(strstr(err.message, "source 2 holds 200 records, the client expects 199"), "%s",
                      err.message);
        zr_error_clear(&err);
        bad[2].length = 200;
        /* a rank of no rank */
        p.rank = 1;
        ck_assert_int_eq(zr_loader_new(f.g.e, f.st, 2 * K, &p, NULL, &l, &err), -ZR_E_SAMPLER);
        p.rank = 0;
        /* too many sources */
        p.nsources = ZR_MIXTURE_MAX_SOURCES + 1;
        ck_assert_int_eq(zr_loader_new(f.g.e, f.st, 2 * K, &p, NULL, &l, &err), -ZR_E_PROTO);
        p.nsources = K;
        /* and what passes: the expected lengths, a batch larger than a source */
        p.batch_size = 64;
        ck_assert_msg(zr_loader_new(f.g.e, f.st, 2 * K, &p, NULL, &l, &err) == 0, "%s", err.message);
        zr_loader_free(l);
        reg_fini(&wide);
        reg_fini(&ragged1);
        reg_fini(&shorter);
        zr_dataset_close(other_dtype.ds, NULL);
        zr_dataset_close(empty_dense.ds, NULL);
        mix_fixture_free(&f);
}
END_TEST

int main(void) {
        Suite *s = suite_create("loader-mixture");
        TL_TCASE(s, "core", 120, test_content_and_resume, test_ranks_slice_one_batch, test_groups,
                 test_domain_end, test_stride, test_source_changed, test_read_ahead, test_refusals);
        return tl_run_suite(s);
}
