/* libzrc-loaders.c: the libzrc suite's loaders: dense batches, resume and
 * slots, the streams' fingerprint, a ragged set going stale, and two connections' identical loaders
 * sharing their rings, one closing or vanishing while holding batches
 * (libzrc-kit.h). */
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "libzrc-kit.h"

/* ---- loaders ------------------------------------------------------------ */

/* This process's loader over `name` after `released` batches were released:
 * the daemon's telemetry counts each release's wait report (libzrc sends one
 * with every release), names the client and the dataset, and METRICS has it. */
static void check_telemetry(zrc_conn *c, const char *name, uint64_t released) {
        const zrc_loader_status *mine = NULL;
        zrc_status *st = NULL;
        char *text = NULL, want[64];
        size_t n = strlen(name);

        ck_assert_int_eq(zrc_status_query(c, &st), 0);
        for (size_t i = 0; i < st->n_loaders; i++) {
                const zrc_loader_status *x = &st->per_loader[i];
                size_t dl = strlen(x->dataset);
                if (x->pid == (uint64_t)getpid() && dl > n && !strcmp(x->dataset + dl - n, name))
                        mine = x;
        }
        ck_assert_ptr_nonnull(mine);
        ck_assert(mine->telemetry.present && mine->telemetry.reports);
        ck_assert_uint_eq(mine->telemetry.total.waits, released);
        ck_assert_uint_ge(mine->telemetry.total.batches, released);
        ck_assert_uint_eq(mine->uid, (uint64_t)getuid());
        ck_assert_str_ne(mine->command, "");
        ck_assert_str_ne(mine->telemetry.verdict, "");
        ck_assert_int_eq(zrc_metrics_text(c, &text, NULL), 0);
        snprintf(want, sizeof(want), "zrecord_loader_batches_total{pid=\"%d\"", (int)getpid());
        ck_assert_ptr_nonnull(strstr(text, want));
        free(text);
        zrc_status_free(st);
}

START_TEST(test_loader_dense) {
        zrc_conn *c = conn();
        zrc_dataset *d;
        zrc_loader *l = NULL;
        zrc_loader_batch b;
        zrc_loader_options o = { .sampler = "sequential", .batch_size = 8, .seed = 1,
                                 .prefetch = 3, .indices = true };
        float want[20];

        NEED_LOADER(c);
        d = make_dense(c, "loader-dense", ZRC_CODEC_ZSTD, 100, NULL, 0);
        ck_assert_msg(zrc_loader_open(c, &d, 1, &o, &l) == 0, "open: %s", zrc_last_error(c)->message);
        ck_assert_uint_eq(zrc_loader_slots(l), 3);
        ck_assert_uint_eq(zrc_loader_length(l), 100);
        for (uint64_t step = 0; step < 20; step++) {
                ck_assert_msg(zrc_loader_next(l, &b) == 0, "next: %s", zrc_last_error(c)->message);
                ck_assert_uint_eq(b.step, step);
                ck_assert_uint_eq(b.count, 8);
                ck_assert_uint_eq(b.n_streams, 1);
                ck_assert_ptr_nonnull(b.indices);
                ck_assert_uint_eq(b.streams[0].bytes, 8 * 80);
                ck_assert_uint_eq((uintptr_t)b.streams[0].data % 64, 0);
                for (uint64_t j = 0; j < 8; j++) {
                        /* sequential: position step * B + j, modulo the length */
                        ck_assert_uint_eq(b.indices[j], (step * 8 + j) % 100);
                        fill_record(want, b.indices[j]);
                        ck_assert_mem_eq((const uint8_t *)b.streams[0].data + j * 80, want, 80);
                }
                /* a request between batches: events keep arriving meanwhile */
                if (step % 5 == 0) {
                        zrc_info info;

                        ck_assert_int_eq(zrc_dataset_info(d, &info), 0);
                }
                ck_assert_int_eq(zrc_loader_release(l, b.slot), 0);
        }
        ck_assert_uint_eq(zrc_loader_step(l), 20);
        ck_assert_int_eq(zrc_loader_release(l, b.slot), -EINVAL); /* not held any more */
        check_telemetry(c, "loader-dense", 20);
        zrc_loader_close(l);
        zrc_dataset_close(d);
        zrc_disconnect(c);
}
END_TEST

START_TEST(test_loader_resume_and_slots) {
        zrc_conn *c = conn();
        zrc_dataset *d;
        zrc_loader *a = NULL, *r = NULL, *h = NULL;
        zrc_loader_batch b, held[2];
        zrc_loader_options o = { .sampler = "cyclic", .batch_size = 7, .seed = 42,
                                 .indices = true };
        uint64_t seen[12][7];

        NEED_LOADER(c);
        d = make_dense(c, "loader-resume", ZRC_CODEC_RAW, 50, NULL, 0);
        ck_assert_int_eq(zrc_loader_open(c, &d, 1, &o, &a), 0);
        for (int step = 0; step < 12; step++) {
                ck_assert_int_eq(zrc_loader_next(a, &b), 0);
                memcpy(seen[step], b.indices, sizeof(seen[step]));
                ck_assert_int_eq(zrc_loader_release(a, b.slot), 0);
        }
        zrc_loader_close(a);

        /* a loader opened at step 5 sees exactly steps 5.. of the long run */
        o.start_step = 5;
        o.check_length = true;
        o.length = 50;
        ck_assert_int_eq(zrc_loader_open(c, &d, 1, &o, &r), 0);
        for (int step = 5; step < 12; step++) {
                ck_assert_int_eq(zrc_loader_next(r, &b), 0);
                ck_assert_uint_eq(b.step, (uint64_t)step);
                ck_assert_mem_eq(b.indices, seen[step], sizeof(seen[step]));
                ck_assert_int_eq(zrc_loader_release(r, b.slot), 0);
        }
        zrc_loader_close(r);

        /* holding every slot: asking for more is refused, not a hang */
        o.start_step = 0;
        o.prefetch = 2;
        ck_assert_int_eq(zrc_loader_open(c, &d, 1, &o, &h), 0);
        ck_assert_int_eq(zrc_loader_next(h, &held[0]), 0);
        ck_assert_int_eq(zrc_loader_next(h, &held[1]), 0);
        ck_assert_uint_ne(held[0].slot, held[1].slot);
        ck_assert_int_eq(zrc_loader_next(h, &b), -EDEADLK);
        /* the held batches stay intact while later ones arrive */
        ck_assert_mem_eq(held[0].indices, seen[0], sizeof(seen[0]));
        ck_assert_int_eq(zrc_loader_release(h, held[0].slot), 0);
        ck_assert_int_eq(zrc_loader_next(h, &b), 0);
        ck_assert_uint_eq(b.step, 2);
        ck_assert_mem_eq(held[1].indices, seen[1], sizeof(seen[1]));
        ck_assert_mem_eq(b.indices, seen[2], sizeof(seen[2]));
        zrc_loader_close(h); /* with slots held */

        /* bad parameters are refused at open */
        o.prefetch = 0;
        o.sampler = "bogus";
        ck_assert_int_eq(zrc_loader_open(c, &d, 1, &o, &h), -ZR_E_SAMPLER);
        o.sampler = "iid";
        o.batch_size = 0;
        ck_assert_int_eq(zrc_loader_open(c, &d, 1, &o, &h), -ZR_E_SAMPLER);
        o.batch_size = 7;
        o.rank = 2;
        o.world_size = 2;
        ck_assert_int_eq(zrc_loader_open(c, &d, 1, &o, &h), -ZR_E_SAMPLER);
        o.rank = 0;
        o.length = 49;
        ck_assert_int_eq(zrc_loader_open(c, &d, 1, &o, &h), -ZR_E_STALE);
        zrc_dataset_close(d);
        zrc_disconnect(c);
}
END_TEST

/* The fingerprint of a loader's streams at `o`, from a loader opened and closed. */
static uint64_t fingerprint_of(zrc_conn *c, zrc_dataset *d, const zrc_loader_options *o) {
        zrc_loader *l = NULL;
        ck_assert_msg(zrc_loader_open(c, &d, 1, o, &l) == 0, "open: %s",
                      zrc_last_error(c)->message);
        uint64_t fp = zrc_loader_fingerprint(l);
        zrc_loader_close(l);
        return fp;
}

START_TEST(test_loader_fingerprint) {
        zrc_conn *c = conn();
        zrc_dataset *a, *same, *other;
        zrc_loader *l = NULL;
        zrc_loader_options o = { .sampler = "iid", .batch_size = 4, .seed = 3 };
        float rec[20];
        uint64_t fp;

        NEED_LOADER(c);
        /* two stores written alike (copies) have one fingerprint; it does not
         * depend on the sampler */
        a = make_dense(c, "fp-a", ZRC_CODEC_ZSTD, 40, NULL, 0);
        same = make_dense(c, "fp-same", ZRC_CODEC_ZSTD, 40, NULL, 0);
        fp = fingerprint_of(c, a, &o);
        ck_assert_uint_ne(fp, 0);
        ck_assert_uint_eq(fingerprint_of(c, same, &o), fp);
        o.sampler = "cyclic";
        ck_assert_uint_eq(fingerprint_of(c, a, &o), fp);
        /* a store of the same length and schema written from other records */
        other = make_dense(c, "fp-other", ZRC_CODEC_ZSTD, 39, NULL, 0);
        for (int i = 0; i < 20; i++)
                rec[i] = (float)(i * 7 + 1000);
        ck_assert_int_eq(zrc_dataset_append_dense(other, rec, 1, NULL), 0);
        ck_assert_uint_eq(zrc_dataset_length(other), 40);
        ck_assert_uint_ne(fingerprint_of(c, other, &o), fp);
        /* raw stores whose tables are alike (one size per record), one record
         * apart: its stored bytes tell them apart */
        zrc_dataset *raw = make_dense(c, "fp-raw", ZRC_CODEC_RAW, 40, NULL, 0);
        zrc_dataset *raw2 = make_dense(c, "fp-raw2", ZRC_CODEC_RAW, 39, NULL, 0);
        ck_assert_int_eq(zrc_dataset_append_dense(raw2, rec, 1, NULL), 0);
        ck_assert_uint_ne(fingerprint_of(c, raw, &o), fingerprint_of(c, raw2, &o));
        zrc_dataset_close(raw);
        zrc_dataset_close(raw2);
        /* the fingerprint expected: accepted where it holds, refused elsewhere */
        o.check_fingerprint = true;
        o.fingerprint = fp;
        ck_assert_int_eq(zrc_loader_open(c, &same, 1, &o, &l), 0);
        zrc_loader_close(l);
        ck_assert_int_eq(zrc_loader_open(c, &other, 1, &o, &l), -ZR_E_STALE);
        ck_assert_msg(strstr(zrc_last_error(c)->message, "fingerprint"), "%s",
                      zrc_last_error(c)->message);
        /* an append changes it */
        ck_assert_int_eq(zrc_dataset_append_dense(same, rec, 1, NULL), 0);
        ck_assert_int_eq(zrc_loader_open(c, &same, 1, &o, &l), -ZR_E_STALE);
        o.check_fingerprint = false;
        ck_assert_uint_ne(fingerprint_of(c, same, &o), fp);
        zrc_dataset_close(a);
        zrc_dataset_close(same);
        zrc_dataset_close(other);
        zrc_disconnect(c);
}
END_TEST

START_TEST(test_loader_ragged_set_stale) {
        zrc_conn *c = conn();
        zrc_dataset *x = NULL, *y = NULL, *w = NULL;
        zrc_loader *l = NULL;
        zrc_loader_batch b;
        zrc_schema sx, sy;
        zrc_set *set = NULL;
        zrc_loader_options o = { .sampler = "iid", .batch_size = 4, .seed = 3, .indices = true };
        int64_t labels[30];
        uint64_t shapes[30];
        int32_t tok[30][8];
        int r;

        NEED_LOADER(c);
        ck_assert_int_eq(mkdir(path("lset"), 0755), 0);
        ck_assert_int_eq(zrc_schema_ragged(&sx, "<i4", 1, ZRC_CODEC_ZSTD), 0);
        ck_assert_int_eq(zrc_schema_dense(&sy, "<i8", NULL, 0, ZRC_CODEC_RAW), 0);
        ck_assert_int_eq(zrc_dataset_create(c, path("lset/tokens"), &sx, NULL, 0, &x), 0);
        ck_assert_int_eq(zrc_dataset_create(c, path("lset/labels"), &sy, NULL, 0, &y), 0);
        zrc_dataset_close(x);
        zrc_dataset_close(y);
        ck_assert_int_eq(zrc_set_open(c, path("lset"), ZRC_OPEN_WRITABLE, &set), 0);
        for (int i = 0; i < 30; i++) {
                shapes[i] = (uint64_t)(i % 8);
                for (int k = 0; k < 8; k++)
                        tok[i][k] = i * 10 + k;
                labels[i] = -i;
        }
        {
                uint8_t packed[30 * 48];
                uint64_t sizes[30], off = 0;
                zrc_records rec[2];

                for (int i = 0; i < 30; i++)
                        off += sizes[i] = zrc_ragged_pack(packed + off, &shapes[i], 1, 4, tok[i]);
                rec[0] = (zrc_records){ .count = 30, .data = labels };   /* "labels" sorts first */
                rec[1] = (zrc_records){ .count = 30, .data = packed, .sizes = sizes };
                ck_assert_str_eq(zrc_set_stream_name(set, 0), "labels");
                ck_assert_msg(zrc_set_append(set, rec, NULL) == 0, "append: %s",
                              zrc_last_error(c)->message);
        }
        {
                zrc_dataset *streams[2] = { zrc_set_stream(set, 0), zrc_set_stream(set, 1) };

                ck_assert_msg(zrc_loader_open(c, streams, 2, &o, &l) == 0, "open: %s",
                              zrc_last_error(c)->message);
        }
        for (int step = 0; step < 6; step++) {
                ck_assert_int_eq(zrc_loader_next(l, &b), 0);
                ck_assert_uint_eq(b.n_streams, 2);
                for (uint64_t j = 0; j < 4; j++) {
                        uint64_t i = b.indices[j];

                        ck_assert_int_eq(((const int64_t *)b.streams[0].data)[j], -(int64_t)i);
                        ck_assert_uint_eq(b.streams[1].ndim, 1);
                        ck_assert_uint_eq(b.streams[1].shapes[j], shapes[i]);
                        ck_assert_uint_eq(b.streams[1].lengths[j], shapes[i] * 4);
                        ck_assert_uint_eq((uintptr_t)b.streams[1].payloads[j] % 8, 0);
                        if (shapes[i])
                                ck_assert_mem_eq(b.streams[1].payloads[j], tok[i], shapes[i] * 4);
                }
                ck_assert_int_eq(zrc_loader_release(l, b.slot), 0);
        }

        /* an append through another connection ends the loader: ZR_E_STALE
         * after the batches already announced, and the step to reopen at */
        {
                zrc_conn *c2 = conn();
                int64_t v = 99;

                ck_assert_int_eq(zrc_dataset_open(c2, path("lset/labels"), ZRC_OPEN_WRITABLE, &w), 0);
                ck_assert_int_eq(zrc_dataset_append_dense(w, &v, 1, NULL), 0);
                zrc_disconnect(c2);
        }
        for (int k = 0; k < 100; k++) {
                r = zrc_loader_next(l, &b);
                if (r < 0)
                        break;
                ck_assert_int_eq(zrc_loader_release(l, b.slot), 0);
        }
        ck_assert_int_eq(r, -ZR_E_STALE);
        ck_assert_str_eq(zrc_last_error(c)->name, "ZR_E_STALE");
        ck_assert_uint_ge(zrc_loader_step(l), 6);
        ck_assert_int_eq(zrc_loader_next(l, &b), -ZR_E_STALE); /* and stays so */
        zrc_loader_close(l);
        zrc_set_close(set);
        zrc_disconnect(c);
}
END_TEST

/* ---- loaders sharing rings ---------------------------------------------- */

enum { SH_B = 10, SH_SLOTS = 4, SH_N = 200, SH_STEPS = 32, SH_MORE = 16 };

/* FNV-1a of a batch's bytes. */
static uint64_t batch_hash(const zrc_loader_batch *b) {
        const uint8_t *p = b->streams[0].data;
        uint64_t h = 14695981039346656037ull;

        for (uint64_t i = 0; i < b->streams[0].bytes; i++)
                h = (h ^ p[i]) * 1099511628211ull;
        return h;
}

/* Lines of /proc/self/maps that map a memfd (read buffers and rings). */
static int memfd_maps(void) {
        char line[512];
        FILE *f = fopen("/proc/self/maps", "re");
        int n = 0;

        ck_assert_ptr_nonnull(f);
        while (fgets(line, sizeof(line), f))
                if (strstr(line, "/memfd:"))
                        n++;
        fclose(f);
        return n;
}

/* A loader of the sharing tests and the batches it holds. */
typedef struct sh_side {
        zrc_loader *l;
        zrc_loader_batch held[SH_SLOTS];
        int n_held;
        uint64_t next;               /* the step it expects */
} sh_side;

/* The steps seen so far, by any loader: indices and a hash of the bytes. */
static uint64_t sh_idx[SH_STEPS + SH_MORE][SH_B];
static uint64_t sh_hash[SH_STEPS + SH_MORE];
static bool sh_seen[SH_STEPS + SH_MORE];

/* Takes the next batch of side s: the step it expects, records that match
 * their indices, and bytes identical to what any loader got for that step. */
static void sh_next(sh_side *s, zrc_conn *c) {
        zrc_loader_batch *b = &s->held[s->n_held];
        float want[20];

        ck_assert_msg(zrc_loader_next(s->l, b) == 0, "next at step %" PRIu64 ": %s", s->next,
                      zrc_last_error(c)->message);
        ck_assert_uint_eq(b->step, s->next);
        ck_assert_uint_lt(b->slot, SH_SLOTS);
        for (int k = 0; k < s->n_held; k++)
                ck_assert_uint_ne(b->slot, s->held[k].slot); /* handles of held batches differ */
        ck_assert_uint_eq(b->streams[0].bytes, SH_B * 80);
        for (int j = 0; j < SH_B; j++) {
                ck_assert_uint_lt(b->indices[j], SH_N);
                fill_record(want, b->indices[j]);
                ck_assert_mem_eq((const uint8_t *)b->streams[0].data + j * 80, want, 80);
        }
        if (sh_seen[b->step]) {
                ck_assert_mem_eq(b->indices, sh_idx[b->step], sizeof(sh_idx[0]));
                ck_assert_uint_eq(batch_hash(b), sh_hash[b->step]);
        } else {
                memcpy(sh_idx[b->step], b->indices, sizeof(sh_idx[0]));
                sh_hash[b->step] = batch_hash(b);
                sh_seen[b->step] = true;
        }
        s->n_held++;
        s->next++;
}

/* Checks that every batch s holds is still intact. */
static void sh_check_held(const sh_side *s) {
        for (int k = 0; k < s->n_held; k++) {
                ck_assert_mem_eq(s->held[k].indices, sh_idx[s->held[k].step], sizeof(sh_idx[0]));
                ck_assert_uint_eq(batch_hash(&s->held[k]), sh_hash[s->held[k].step]);
        }
}

/* Releases the held batch at position k (any of them: any order). */
static void sh_release(sh_side *s, int k) {
        ck_assert_int_eq(zrc_loader_release(s->l, s->held[k].slot), 0);
        s->held[k] = s->held[--s->n_held];
}

/* The daemon's gathers since start; *ret_shared: batches the open loaders took
 * from a slot another member filled (per loader, summed: STATUS reads the
 * total and each loader's count at slightly different moments while the
 * loaders run, so the two are not compared). */
static uint64_t sh_gathers(zrc_conn *c, uint64_t *ret_shared) {
        zrc_status *st = NULL;
        uint64_t g, shared = 0;

        ck_assert_int_eq(zrc_status_query(c, &st), 0);
        g = st->gathers;
        for (size_t i = 0; i < st->n_loaders; i++)
                shared += st->per_loader[i].shared;
        zrc_status_free(st);
        if (ret_shared)
                *ret_shared = shared;
        return g;
}

START_TEST(test_loader_shared) {
        /* two loaders with identical parameters on two connections of this
         * process form one group: each step is gathered once into a slot of
         * either ring and both read it there, one of them through a ring the
         * daemon passed with a RING event */
        zrc_conn *c1 = conn(), *c2, *c3;
        zrc_dataset *d, *d1 = NULL, *d2 = NULL;
        zrc_loader_options o = { .sampler = "iid", .batch_size = SH_B, .seed = 11,
                                 .prefetch = SH_SLOTS, .indices = true };
        sh_side a = { 0 }, b = { 0 }, solo = { 0 };
        int fds_before, maps_before;
        uint64_t g0, g1;
        bool fds_b[4096], fds_a[4096];

        NEED_LOADER(c1);
        memset(sh_seen, 0, sizeof(sh_seen));
        d = make_dense(c1, "loader-shared", ZRC_CODEC_ZSTD, SH_N, NULL, 0);
        zrc_dataset_close(d);
        c2 = conn();
        ck_assert_int_eq(zrc_dataset_open(c1, path("loader-shared"), 0, &d1), 0);
        ck_assert_int_eq(zrc_dataset_open(c2, path("loader-shared"), 0, &d2), 0);
        fds_before = fds_open(fds_b);
        maps_before = memfd_maps();
        g0 = sh_gathers(c1, NULL);

        ck_assert_msg(zrc_loader_open(c1, &d1, 1, &o, &a.l) == 0, "open: %s",
                      zrc_last_error(c1)->message);
        ck_assert_msg(zrc_loader_open(c2, &d2, 1, &o, &b.l) == 0, "open: %s",
                      zrc_last_error(c2)->message);
        ck_assert_uint_eq(zrc_loader_slots(b.l), SH_SLOTS);

        /* in step, either first, each holding up to 3 and releasing them in
         * varying order (oldest, newest, middle) */
        for (int step = 0; step < SH_STEPS; step++) {
                sh_side *first = step % 2 ? &b : &a, *second = step % 2 ? &a : &b;

                sh_next(first, step % 2 ? c2 : c1);
                sh_next(second, step % 2 ? c1 : c2);
                for (sh_side *s = &a; s; s = s == &a ? &b : NULL) {
                        if (s->n_held >= 3 || step % 5 == 0)
                                sh_release(s, (step * 7 + (s == &b)) % s->n_held);
                        sh_check_held(s);
                }
        }

        /* every step gathered about once for both loaders, not twice; and
         * besides the two own rings, one loader maps the other's, passed by a
         * RING event */
        uint64_t shared;
        g1 = sh_gathers(c1, &shared);
        /* what the other member gathered, each took: about one per step */
        ck_assert_uint_ge(shared, SH_STEPS - 2 * SH_SLOTS - 2);
        printf("note: %" PRIu64 " gathers for %d steps of two loaders of one group; "
               "%d ring mappings\n", g1 - g0, SH_STEPS, memfd_maps() - maps_before);
        ck_assert_int_ge(memfd_maps() - maps_before, 3);
        ck_assert_msg(g1 - g0 >= SH_STEPS && g1 - g0 <= SH_STEPS + 2 * SH_SLOTS + 2,
                      "%" PRIu64 " gathers for %d steps of two loaders of one group",
                      g1 - g0, SH_STEPS);

        /* a holds as many batches as it has slots, wherever they lie: no more */
        while (a.n_held < SH_SLOTS)
                sh_next(&a, c1);
        ck_assert_int_eq(zrc_loader_next(a.l, &solo.held[0]), -EDEADLK);
        sh_check_held(&a);

        /* a closed holding them: b goes on, its held batches (wherever they
         * lie) intact, filling its slots and releasing in any order */
        a.l = zrc_loader_close(a.l);
        a.n_held = 0;
        sh_check_held(&b);
        for (int step = SH_STEPS; step < SH_STEPS + SH_MORE; step++) {
                if (b.n_held == SH_SLOTS) {
                        ck_assert_int_eq(zrc_loader_next(b.l, &solo.held[0]), -EDEADLK);
                        sh_release(&b, step % SH_SLOTS);
                        if (step % 3 == 0)
                                sh_release(&b, 0);
                }
                sh_next(&b, c2);
                sh_check_held(&b);
        }
        b.l = zrc_loader_close(b.l); /* holding batches too */

        /* no descriptor and no mapping of any ring outlives the loaders */
        ck_assert_int_eq(fds_open(fds_a), fds_before);
        for (int fd = 0; fd < 4096; fd++)
                ck_assert_msg(fds_a[fd] == fds_b[fd], "descriptor %d", fd);
        ck_assert_int_eq(memfd_maps(), maps_before);

        /* a lone loader on a third connection replays the same bytes */
        c3 = conn();
        ck_assert_int_eq(zrc_dataset_open(c3, path("loader-shared"), 0, &d), 0);
        ck_assert_int_eq(zrc_loader_open(c3, &d, 1, &o, &solo.l), 0);
        for (int step = 0; step < SH_STEPS + SH_MORE; step++) {
                sh_next(&solo, c3);
                sh_release(&solo, 0);
        }
        solo.l = zrc_loader_close(solo.l);
        zrc_disconnect(c3);
        zrc_dataset_close(d1);
        zrc_dataset_close(d2);
        zrc_disconnect(c2);
        zrc_disconnect(c1);
}
END_TEST

START_TEST(test_loader_shared_disconnect) {
        /* a member's connection goes away while it holds batches and another
         * member reads from its ring: the other goes on; releases and closes in
         * any order on both sides */
        zrc_conn *c1 = conn(), *c2;
        zrc_dataset *d1 = NULL, *d2 = NULL;
        zrc_loader_options o = { .sampler = "cyclic", .batch_size = SH_B, .seed = 5,
                                 .prefetch = SH_SLOTS, .indices = true };
        sh_side a = { 0 }, b = { 0 };
        int fds_before, maps_before;

        NEED_LOADER(c1);
        memset(sh_seen, 0, sizeof(sh_seen));
        c2 = conn();
        ck_assert_int_eq(zrc_dataset_open(c1, path("loader-shared"), 0, &d1), 0);
        ck_assert_int_eq(zrc_dataset_open(c2, path("loader-shared"), 0, &d2), 0);
        fds_before = fds_open((bool[4096]){ 0 });
        maps_before = memfd_maps();
        ck_assert_int_eq(zrc_loader_open(c2, &d2, 1, &o, &b.l), 0);
        ck_assert_int_eq(zrc_loader_open(c1, &d1, 1, &o, &a.l), 0);
        /* b runs up to 3 steps ahead of a, then a catches up */
        for (int step = 0; step < 12; step++) {
                sh_next(&b, c2);
                if (b.n_held == SH_SLOTS)
                        sh_release(&b, 1);
                if (step % 4 == 3)
                        while (a.next <= (uint64_t)step) {
                                sh_next(&a, c1);
                                if (a.n_held >= 2)
                                        sh_release(&a, a.n_held - 1);
                        }
        }
        sh_check_held(&a);
        sh_check_held(&b);
        /* b's connection goes, with b open and holding batches */
        zrc_dataset_close(d2);
        zrc_disconnect(c2);
        b.l = NULL;
        sh_check_held(&a);
        for (int step = 0; step < 20; step++) {
                while (a.n_held >= SH_SLOTS - 1)
                        sh_release(&a, step % a.n_held);
                sh_next(&a, c1);
        }
        while (a.n_held)
                sh_release(&a, a.n_held / 2);
        a.l = zrc_loader_close(a.l);
        ck_assert_int_eq(fds_open((bool[4096]){ 0 }) + 1, fds_before); /* c2's socket gone */
        ck_assert_int_eq(memfd_maps(), maps_before);
        zrc_dataset_close(d1);
        zrc_disconnect(c1);
}
END_TEST

void libzrc_add_loaders(TCase *tc) {
        tcase_add_test(tc, test_loader_dense);
        tcase_add_test(tc, test_loader_resume_and_slots);
        tcase_add_test(tc, test_loader_fingerprint);
        tcase_add_test(tc, test_loader_ragged_set_stale);
        tcase_add_test(tc, test_loader_shared);
        tcase_add_test(tc, test_loader_shared_disconnect);
}
