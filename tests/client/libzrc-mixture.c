/* libzrc-mixture.c: the libzrc suite's mixtures and which steps saw a record,
 * against the real daemon (libzrc-kit.h): a mixture loader's batches hold
 * each record of its own source, with its source and index; a resume gives
 * the same batches; two connections' identical mixtures share their gathers;
 * sources that differ are refused naming the stream and the difference; and
 * for plain samplers (every rank) and a mixture's sources, the steps STEPS_OF
 * answers for a record are exactly the steps whose batches held it there. */
#include <check.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "libzrc-kit.h"

#define MIX_K 3
#define MIX_B 10
#define MIX_STEPS 30
/* Source k's records: ids k * 10000 + i (stream 0) and that + 500000 (stream 1). */
#define MIX_ID(k, i, s) ((uint64_t)(k) * 10000 + (i) + (s) * 500000)

static const uint64_t mix_len[MIX_K] = { 30, 7, 100 };

typedef struct mixture {
        zrc_dataset *ds[MIX_K][2];
        zrc_mixture_source src[MIX_K];
} mixture;

/* Three sources of two dense streams: cyclic (weight 5), iid (2), sequential (3). */
static void mixture_make(zrc_conn *c, mixture *m, const char *tag) {
        static const char *const modes[MIX_K] = { "cyclic", "iid", "sequential" };
        static const uint32_t weights[MIX_K] = { 5, 2, 3 };

        for (int k = 0; k < MIX_K; k++) {
                for (int s = 0; s < 2; s++) {
                        char name[64];
                        snprintf(name, sizeof(name), "%s-%d-%d", tag, k, s);
                        m->ds[k][s] = make_dense_ids(c, name, k == 1 ? ZRC_CODEC_ZSTD : ZRC_CODEC_RAW,
                                                     mix_len[k], MIX_ID(k, 0, s), NULL, 0);
                }
                m->src[k] = (zrc_mixture_source){ .streams = m->ds[k], .weight = weights[k],
                                                  .sampler = modes[k] };
        }
}

static void mixture_close(mixture *m) {
        for (int k = 0; k < MIX_K; k++)
                for (int s = 0; s < 2; s++)
                        zrc_dataset_close(m->ds[k][s]);
}

/* Checks each record of both streams is its source's record of its index. */
static void check_mix_batch(const zrc_loader_batch *b) {
        float want[20];

        ck_assert_ptr_nonnull(b->sources);
        ck_assert_ptr_nonnull(b->indices);
        ck_assert_uint_eq(b->n_streams, 2);
        for (uint64_t j = 0; j < b->count; j++) {
                ck_assert_uint_lt(b->sources[j], MIX_K);
                ck_assert_uint_lt(b->indices[j], mix_len[b->sources[j]]);
                for (int s = 0; s < 2; s++) {
                        fill_record(want, MIX_ID(b->sources[j], b->indices[j], s));
                        ck_assert_mem_eq((const uint8_t *)b->streams[s].data + j * 80, want, 80);
                }
        }
}

/* The hits of one record seen in the batches of a run, kept to compare. */
typedef struct seen_hits {
        zrc_step_hit h[4096];
        size_t n;
} seen_hits;

static int collect_hits(void *userdata, const zrc_step_hit *hits, size_t count, uint64_t next) {
        seen_hits *s = userdata;

        (void)next;
        for (size_t i = 0; i < count; i++) {
                ck_assert_uint_lt(s->n, 4096);
                s->h[s->n++] = hits[i];
        }
        return 0;
}

static int hit_cmp(const void *a, const void *b) {
        const zrc_step_hit *x = a, *y = b;

        if (x->step != y->step)
                return x->step < y->step ? -1 : 1;
        if (x->rank != y->rank)
                return x->rank < y->rank ? -1 : 1;
        return (x->position > y->position) - (x->position < y->position);
}

static void same_hits(seen_hits *got, seen_hits *want, const char *what) {
        qsort(want->h, want->n, sizeof(want->h[0]), hit_cmp);
        ck_assert_msg(got->n == want->n, "%s: STEPS_OF says %zu hits, the batches held %zu", what,
                      got->n, want->n);
        for (size_t i = 0; i < got->n; i++)
                ck_assert_msg(hit_cmp(&got->h[i], &want->h[i]) == 0,
                              "%s: hit %zu is (%" PRIu64 ", %" PRIu64 ", %" PRIu64 "), the batches "
                              "(%" PRIu64 ", %" PRIu64 ", %" PRIu64 ")", what, i, got->h[i].step,
                              got->h[i].rank, got->h[i].position, want->h[i].step, want->h[i].rank,
                              want->h[i].position);
}

/* A mixture's batches: each record its source's, with its source and index;
 * the sources' shares; a resume at step 17 gives the same batches; and for
 * every record of every source, STEPS_OF names exactly the places the
 * batches held it. */
START_TEST(test_mixture_loader) {
        zrc_conn *c = conn();
        mixture m;
        zrc_loader *l = NULL;
        zrc_loader_batch b;
        zrc_loader_options o = { .sampler = "cyclic", .batch_size = MIX_B, .seed = 77,
                                 .indices = true, .provenance = true };
        static uint8_t src[MIX_STEPS][MIX_B];
        static uint64_t idx[MIX_STEPS][MIX_B];
        uint64_t share[MIX_K] = { 0 };

        NEED_LOADER(c);
        if (!zrc_has_feature(c, "mixture") || !zrc_has_feature(c, "steps_of")) {
                printf("note: the daemon has no \"mixture\" or \"steps_of\" feature: skipped\n");
                zrc_disconnect(c);
                return;
        }
        mixture_make(c, &m, "mix");
        ck_assert_msg(zrc_loader_open_mixture(c, m.src, MIX_K, 2, &o, &l) == 0, "open: %s",
                      zrc_last_error(c)->message);
        ck_assert_uint_eq(zrc_loader_sources(l), MIX_K);
        ck_assert_uint_eq(zrc_loader_length(l), 30 + 7 + 100);
        for (size_t k = 0; k < MIX_K; k++)
                ck_assert_uint_eq(zrc_loader_source_length(l, k), mix_len[k]);
        for (uint64_t step = 0; step < MIX_STEPS; step++) {
                ck_assert_msg(zrc_loader_next(l, &b) == 0, "next: %s", zrc_last_error(c)->message);
                ck_assert_uint_eq(b.step, step);
                check_mix_batch(&b);
                memcpy(src[step], b.sources, MIX_B);
                memcpy(idx[step], b.indices, sizeof(idx[step]));
                for (int j = 0; j < MIX_B; j++)
                        share[b.sources[j]]++;
                ck_assert_int_eq(zrc_loader_release(l, b.slot), 0);
        }
        zrc_loader_close(l);
        /* weights 5:2:3 of 300 records: the apportionment keeps each within 2 */
        ck_assert_int_le(llabs((long long)share[0] - 150), 2);
        ck_assert_int_le(llabs((long long)share[1] - 60), 2);
        ck_assert_int_le(llabs((long long)share[2] - 90), 2);

        /* a resume: the same batches from step 17 on */
        o.start_step = 17;
        ck_assert_int_eq(zrc_loader_open_mixture(c, m.src, MIX_K, 2, &o, &l), 0);
        for (uint64_t step = 17; step < MIX_STEPS; step++) {
                ck_assert_int_eq(zrc_loader_next(l, &b), 0);
                ck_assert_uint_eq(b.step, step);
                ck_assert_int_eq(memcmp(b.sources, src[step], MIX_B), 0);
                ck_assert_int_eq(memcmp(b.indices, idx[step], sizeof(idx[step])), 0);
                check_mix_batch(&b);
                ck_assert_int_eq(zrc_loader_release(l, b.slot), 0);
        }
        zrc_loader_close(l);

        /* STEPS_OF against the batches, for every record of every source */
        zrc_steps_source ss[MIX_K];
        for (int k = 0; k < MIX_K; k++)
                ss[k] = (zrc_steps_source){ .n = mix_len[k], .weight = m.src[k].weight,
                                            .sampler = m.src[k].sampler };
        for (uint32_t k = 0; k < MIX_K; k++)
                for (uint64_t r = 0; r < mix_len[k]; r++) {
                        static seen_hits got, want;
                        zrc_steps_query q = { .sampler = "cyclic", .sources = ss, .n_sources = MIX_K,
                                              .source = k, .batch_size = MIX_B, .seed = 77,
                                              .record = r, .start = 0, .stop = MIX_STEPS };
                        char what[64];

                        got.n = want.n = 0;
                        for (uint64_t s = 0; s < MIX_STEPS; s++)
                                for (uint64_t j = 0; j < MIX_B; j++)
                                        if (src[s][j] == k && idx[s][j] == r)
                                                want.h[want.n++] = (zrc_step_hit){ s, 0, j };
                        ck_assert_msg(zrc_steps_of(c, &q, collect_hits, &got) == 0, "steps_of: %s",
                                      zrc_last_error(c)->message);
                        snprintf(what, sizeof(what), "source %u record %" PRIu64, k, r);
                        same_hits(&got, &want, what);
                }
        mixture_close(&m);
        zrc_disconnect(c);
}
END_TEST

/* Two connections' identical mixture loaders are one group: the second takes
 * the batches the first gathered. */
START_TEST(test_mixture_shared) {
        zrc_conn *c1 = conn(), *c2 = conn();
        mixture m;
        zrc_dataset *d2[MIX_K][2];
        zrc_mixture_source s2[MIX_K];
        zrc_loader *a = NULL, *b = NULL;
        zrc_loader_batch ba, bb;
        zrc_loader_options o = { .sampler = "iid", .batch_size = MIX_B, .seed = 5, .prefetch = 2,
                                 .indices = true, .provenance = true };
        zrc_status *st = NULL;
        uint64_t shared = 0;

        NEED_LOADER(c1);
        if (!zrc_has_feature(c1, "mixture")) {
                zrc_disconnect(c1);
                zrc_disconnect(c2);
                return;
        }
        mixture_make(c1, &m, "mixsh");
        for (int k = 0; k < MIX_K; k++) {
                for (int s = 0; s < 2; s++) {
                        char name[64];
                        snprintf(name, sizeof(name), "mixsh-%d-%d", k, s);
                        ck_assert_int_eq(zrc_dataset_open(c2, path(name), 0, &d2[k][s]), 0);
                }
                s2[k] = m.src[k];
                s2[k].streams = d2[k];
        }
        ck_assert_int_eq(zrc_loader_open_mixture(c1, m.src, MIX_K, 2, &o, &a), 0);
        ck_assert_int_eq(zrc_loader_open_mixture(c2, s2, MIX_K, 2, &o, &b), 0);
        for (int step = 0; step < 12; step++) {
                ck_assert_int_eq(zrc_loader_next(a, &ba), 0);
                ck_assert_int_eq(zrc_loader_next(b, &bb), 0);
                ck_assert_int_eq(memcmp(ba.sources, bb.sources, MIX_B), 0);
                ck_assert_int_eq(memcmp(ba.indices, bb.indices, MIX_B * 8), 0);
                check_mix_batch(&bb);
                ck_assert_int_eq(zrc_loader_release(a, ba.slot), 0);
                ck_assert_int_eq(zrc_loader_release(b, bb.slot), 0);
        }
        ck_assert_int_eq(zrc_status_query(c1, &st), 0);
        for (size_t i = 0; i < st->n_loaders; i++)
                shared += st->per_loader[i].shared;
        zrc_status_free(st);
        ck_assert_uint_ge(shared, 8);
        zrc_loader_close(a);
        zrc_loader_close(b);
        for (int k = 0; k < MIX_K; k++)
                for (int s = 0; s < 2; s++)
                        zrc_dataset_close(d2[k][s]);
        mixture_close(&m);
        zrc_disconnect(c1);
        zrc_disconnect(c2);
}
END_TEST

/* Sources that differ are refused, the message naming the stream, the source
 * and the difference; so is a source of another number of streams. */
START_TEST(test_mixture_refused) {
        zrc_conn *c = conn();
        mixture m;
        zrc_loader *l = NULL;
        zrc_loader_options o = { .sampler = "cyclic", .batch_size = 4 };
        zrc_dataset *other;
        zrc_schema s;
        uint64_t shape[] = { 4, 5 };
        int32_t rec[20] = { 0 };

        NEED_LOADER(c);
        if (!zrc_has_feature(c, "mixture")) {
                zrc_disconnect(c);
                return;
        }
        mixture_make(c, &m, "mixbad");
        ck_assert_int_eq(zrc_schema_dense(&s, "<i4", shape, 2, ZRC_CODEC_RAW), 0);
        ck_assert_int_eq(zrc_dataset_create(c, path("mixbad-i4"), &s, NULL, 0, &other), 0);
        for (uint64_t i = 0; i < mix_len[1]; i++)
                ck_assert_int_eq(zrc_dataset_append_dense(other, rec, 1, NULL), 0);
        zrc_dataset *own = m.ds[1][1];
        m.ds[1][1] = other; /* source 1's stream 1 of int32 */
        ck_assert_int_eq(zrc_loader_open_mixture(c, m.src, MIX_K, 2, &o, &l), -ZR_E_SCHEMA);
        ck_assert_msg(strstr(zrc_last_error(c)->message,
                             "stream 1: source 1 has dtype '<i4', source 0 '<f4'"), "%s",
                      zrc_last_error(c)->message);
        ck_assert_ptr_null(l);
        m.ds[1][1] = m.ds[0][1]; /* a stream of another length than its source's */
        ck_assert_int_eq(zrc_loader_open_mixture(c, m.src, MIX_K, 2, &o, &l), -ZR_E_MISALIGNED);
        ck_assert_ptr_nonnull(strstr(zrc_last_error(c)->message, "source 1"));
        m.ds[1][1] = own;
        zrc_dataset_close(other);
        mixture_close(&m);
        zrc_disconnect(c);
}
END_TEST

/* Plain samplers, every rank of world size 3: for some records of each
 * mode, STEPS_OF names exactly the places the ranks' batches held them. */
START_TEST(test_steps_of_plain) {
        static const char *const modes[] = { "sequential", "iid", "cyclic", "cyclic-lx157" };
        enum { W = 3, B = 4, N = 40, STEPS = 25 };
        zrc_conn *c = conn();
        zrc_dataset *d;
        static uint64_t seen[W][STEPS][B];

        NEED_LOADER(c);
        if (!zrc_has_feature(c, "steps_of")) {
                zrc_disconnect(c);
                return;
        }
        d = make_dense(c, "steps-plain", ZRC_CODEC_RAW, N, NULL, 0);
        for (size_t md = 0; md < 4; md++) {
                for (uint64_t r = 0; r < W; r++) {
                        zrc_loader *l = NULL;
                        zrc_loader_batch b;
                        zrc_loader_options o = { .sampler = modes[md], .batch_size = B, .seed = 9 + md,
                                                 .rank = r, .world_size = W, .indices = true };
                        ck_assert_int_eq(zrc_loader_open(c, &d, 1, &o, &l), 0);
                        for (uint64_t s = 0; s < STEPS; s++) {
                                ck_assert_int_eq(zrc_loader_next(l, &b), 0);
                                memcpy(seen[r][s], b.indices, sizeof(seen[r][s]));
                                ck_assert_int_eq(zrc_loader_release(l, b.slot), 0);
                        }
                        zrc_loader_close(l);
                }
                for (uint64_t rec = 0; rec < N; rec += 3) {
                        static seen_hits got, want;
                        zrc_steps_query q = { .sampler = modes[md], .n = N, .batch_size = B,
                                              .seed = 9 + md, .world_size = W, .record = rec,
                                              .start = 2, .stop = STEPS };
                        char what[64];

                        got.n = want.n = 0;
                        for (uint64_t r = 0; r < W; r++)
                                for (uint64_t s = 2; s < STEPS; s++)
                                        for (uint64_t j = 0; j < B; j++)
                                                if (seen[r][s][j] == rec)
                                                        want.h[want.n++] = (zrc_step_hit){ s, r, j };
                        ck_assert_msg(zrc_steps_of(c, &q, collect_hits, &got) == 0, "%s",
                                      zrc_last_error(c)->message);
                        snprintf(what, sizeof(what), "%s record %" PRIu64, modes[md], rec);
                        same_hits(&got, &want, what);
                }
        }
        /* refusals: a record past the length, a source that is none */
        zrc_steps_query q = { .sampler = "cyclic", .n = N, .batch_size = B, .record = N, .stop = 5 };
        seen_hits *sink = calloc(1, sizeof(*sink));
        ck_assert_int_eq(zrc_steps_of(c, &q, collect_hits, sink), -ZR_E_SAMPLER);
        ck_assert_ptr_nonnull(strstr(zrc_last_error(c)->message, "record 40 >= n = 40"));
        zrc_steps_source one = { .n = 10, .weight = 1 };
        q = (zrc_steps_query){ .sampler = "iid", .sources = &one, .n_sources = 1, .source = 1,
                               .batch_size = B, .stop = 5 };
        ck_assert_int_eq(zrc_steps_of(c, &q, collect_hits, sink), -ZR_E_SAMPLER);
        ck_assert_ptr_nonnull(strstr(zrc_last_error(c)->message, "source 1 of a mixture of 1"));
        free(sink);
        zrc_dataset_close(d);
        zrc_disconnect(c);
}
END_TEST

/* The walk comes in pieces: an iid range of 2^26 positions (4 pieces of the
 * daemon's 2^24) reports each piece, its `next` moving up to stop; a
 * function's nonzero value stops it. */
typedef struct pieces {
        uint64_t calls, last, hits;
        int stop_at;
} pieces;

static int count_pieces(void *userdata, const zrc_step_hit *hits, size_t count, uint64_t next) {
        pieces *p = userdata;

        (void)hits;
        ck_assert_uint_gt(next, p->last);
        p->last = next;
        p->hits += count;
        p->calls++;
        return p->stop_at && (int)p->calls == p->stop_at ? 42 : 0;
}

START_TEST(test_steps_of_pieces) {
        zrc_conn *c = conn();
        pieces p = { 0 };
        zrc_steps_query q = { .sampler = "iid", .n = 1000, .batch_size = 1 << 16, .seed = 3,
                              .record = 7, .start = 0, .stop = 1 << 10 };

        if (!zrc_has_feature(c, "steps_of")) {
                zrc_disconnect(c);
                return;
        }
        ck_assert_msg(zrc_steps_of(c, &q, count_pieces, &p) == 0, "%s", zrc_last_error(c)->message);
        ck_assert_uint_eq(p.last, 1 << 10);
        ck_assert_uint_ge(p.calls, 4);
        /* 2^26 draws of 1000: about 67 109 hits of record 7 */
        ck_assert_uint_gt(p.hits, 60000);
        ck_assert_uint_lt(p.hits, 75000);
        p = (pieces){ .stop_at = 2 };
        ck_assert_int_eq(zrc_steps_of(c, &q, count_pieces, &p), 42);
        ck_assert_uint_eq(p.calls, 2);
        zrc_disconnect(c);
}
END_TEST

void libzrc_add_mixtures(TCase *tc) {
        tcase_add_test(tc, test_mixture_loader);
        tcase_add_test(tc, test_mixture_shared);
        tcase_add_test(tc, test_mixture_refused);
        tcase_add_test(tc, test_steps_of_plain);
        tcase_add_test(tc, test_steps_of_pieces);
}
