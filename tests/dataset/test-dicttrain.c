/* test-dicttrain.c: tiers, and dictionaries trained on image tiles and token
 * sequences that decode what they encode and beat plain zstd on small records,
 * from memory and from a store. */
#include <check.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <zstd.h>

#include "dataset/dataset.h"
#include "dataset/dicttrain.h"
#include "dataset/ragged.h"
#include "helpers.h"
#include "check-run.h"

static const zr_store_options test_opts = { .chunk_log2 = TEST_CHUNK_LOG2 };

START_TEST(test_tiers) {
        enum zr_dict_tier t;
        const char *want[3] = { "small", "balanced", "max" };
        size_t prev = 0;
        for (int i = 0; i < 3; i++) {
                ck_assert_int_eq(zr_dict_tier_parse(want[i], &t, NULL), 0);
                ck_assert_int_eq(t, i);
                const zr_dict_tier_spec *s = zr_dict_tier_get(t);
                ck_assert_str_eq(s->name, want[i]);
                ck_assert_uint_gt(s->dict_bytes, prev);
                ck_assert_uint_gt(s->sample_bytes, s->dict_bytes);
                prev = s->dict_bytes;
        }
        zr_error err = {0};
        ck_assert_int_eq(zr_dict_tier_parse("huge", &t, &err), -EINVAL);
        ck_assert_ptr_nonnull(strstr(err.message, "balanced"));
        ck_assert_ptr_null(zr_dict_tier_get(ZR_DICT_TIER_COUNT));
}
END_TEST

/* Compresses each of n records (packed, lens) with the store's codecs: plain
 * zstd level 3, and level 19 against dict. Checks every dict frame decodes back.
 * Returns the totals. */
static void measure(const uint8_t *data, const uint64_t *lens, size_t n, const void *dict,
                    size_t dict_len, size_t *ret_plain, size_t *ret_dict) {
        ZSTD_CCtx *cc = ZSTD_createCCtx();
        ZSTD_DCtx *dc = ZSTD_createDCtx();
        ZSTD_CDict *cd = ZSTD_createCDict(dict, dict_len, 19);
        ZSTD_DDict *dd = ZSTD_createDDict(dict, dict_len);
        size_t cap = ZSTD_compressBound(64 * 1024);
        uint8_t *frame = malloc(cap), *back = malloc(64 * 1024);
        *ret_plain = *ret_dict = 0;
        for (size_t i = 0; i < n; i++) {
                size_t p = ZSTD_compressCCtx(cc, frame, cap, data, lens[i], 3);
                ck_assert(!ZSTD_isError(p));
                *ret_plain += p;
                size_t d = ZSTD_compress_usingCDict(cc, frame, cap, data, lens[i], cd);
                ck_assert(!ZSTD_isError(d));
                *ret_dict += d;
                size_t b = ZSTD_decompress_usingDDict(dc, back, 64 * 1024, frame, d, dd);
                ck_assert_uint_eq(b, lens[i]);
                ck_assert(memcmp(back, data, lens[i]) == 0);
                data += lens[i];
        }
        free(frame);
        free(back);
        ZSTD_freeCDict(cd);
        ZSTD_freeDDict(dd);
        ZSTD_freeCCtx(cc);
        ZSTD_freeDCtx(dc);
}

START_TEST(test_tiles_beat_plain_zstd) {
        enum { N = 2000, W = 32 }; /* 1 KiB tiles */
        uint8_t *tiles = malloc(N * W * W);
        uint64_t *lens = malloc(N * sizeof(uint64_t));
        for (int i = 0; i < N; i++) {
                gen_tile(tiles + i * W * W, W, W, i);
                lens[i] = W * W;
        }
        void *dict = NULL;
        size_t dict_len = 0, plain, withdict;
        zr_error err = {0};
        const zr_dict_tier_spec *spec = zr_dict_tier_get(ZR_DICT_TIER_SMALL);
        ck_assert_msg(zr_dict_train_dense(tiles, W * W, N, spec, &dict, &dict_len, &err) == 0,
                      "%s", err.message);
        ck_assert_uint_gt(dict_len, 256);
        ck_assert_uint_le(dict_len, spec->dict_bytes);
        measure(tiles, lens, N, dict, dict_len, &plain, &withdict);
        ck_assert_msg(withdict * 10 < plain * 9, "dict %zu vs plain %zu", withdict, plain);
        /* the packed-records entry point trains just as well */
        void *dict2 = NULL;
        size_t dict2_len = 0, plain2, withdict2;
        ck_assert_int_eq(zr_dict_train(tiles, lens, N, spec, &dict2, &dict2_len, NULL), 0);
        measure(tiles, lens, N, dict2, dict2_len, &plain2, &withdict2);
        ck_assert_msg(withdict2 * 10 < plain2 * 9, "dict %zu vs plain %zu", withdict2, plain2);
        free(dict);
        free(dict2);
        free(tiles);
        free(lens);
}
END_TEST

/* Token sequences as ragged records (header + int32 ids), lengths 64..511,
 * trained from a store and written through a zstd_dict dataset. */
START_TEST(test_tokens_through_store) {
        enum { N = 1500 };
        uint64_t *lens = malloc(N * sizeof(uint64_t)), total = 0, st = 9;
        for (int i = 0; i < N; i++) {
                uint64_t dim = 64 + gen_next(&st) % 448;
                ck_assert_int_eq(zr_ragged_record_bytes(&dim, 1, 4, &lens[i], NULL), 0);
                total += lens[i];
        }
        uint8_t *data = malloc(total), *p = data;
        for (int i = 0; i < N; i++) {
                uint64_t dim = (lens[i] - 16) / 4;
                zr_ragged_header_write(p, &dim, 1);
                gen_tokens((int32_t *)(void *)(p + 16), dim, i);
                p += lens[i];
        }

        /* a raw dataset of the settled data; train from its store */
        scratch sc;
        scratch_new(&sc);
        int raw_fd = scratch_child(&sc, "raw"), dict_fd = scratch_child(&sc, "dict"),
            plain_fd = scratch_child(&sc, "plain");
        zr_schema s;
        zr_dataset *raw, *withdict, *plain;
        zr_error err = {0};
        ck_assert_int_eq(zr_schema_init_ragged(&s, "<i4", 1, ZR_CODEC_RAW, NULL), 0);
        ck_assert_int_eq(zr_dataset_create(raw_fd, &s, NULL, 0, &test_opts, &raw, &err), 0);
        zr_batch b = { .dtype = "<i4", .data = data, .data_len = total, .lens = lens,
                       .nrecords = N };
        ck_assert_int_eq(zr_dataset_append(raw, &b, NULL, &err), 0);
        void *dict = NULL;
        size_t dict_len = 0;
        ck_assert_msg(zr_dict_train_dataset(raw, zr_dict_tier_get(ZR_DICT_TIER_SMALL), &dict,
                                            &dict_len, &err) == 0, "%s", err.message);

        s.codec = ZR_CODEC_ZSTD_DICT;
        ck_assert_int_eq(zr_dataset_create(dict_fd, &s, dict, dict_len, &test_opts, &withdict,
                                           &err), 0);
        ck_assert_int_eq(zr_dataset_append(withdict, &b, NULL, &err), 0);
        s.codec = ZR_CODEC_ZSTD;
        ck_assert_int_eq(zr_dataset_create(plain_fd, &s, NULL, 0, &test_opts, &plain, &err), 0);
        ck_assert_int_eq(zr_dataset_append(plain, &b, NULL, &err), 0);

        zr_stats sd, sp;
        ck_assert_int_eq(zr_dataset_stats(withdict, &sd, NULL), 0);
        ck_assert_int_eq(zr_dataset_stats(plain, &sp, NULL), 0);
        ck_assert_msg(sd.live_bytes * 10 < sp.live_bytes * 9, "dict %llu vs plain %llu",
                      (unsigned long long)sd.live_bytes, (unsigned long long)sp.live_bytes);

        /* every record comes back exactly */
        uint64_t idx[N], buffer;
        for (int i = 0; i < N; i++)
                idx[i] = (uint64_t)(N - 1 - i);
        uint64_t *shapes = malloc(N * sizeof(uint64_t)), *offs = malloc(N * sizeof(uint64_t));
        ck_assert_int_eq(gather_ragged(withdict, idx, N, NULL, 0, shapes, offs, &buffer, NULL),
                         -ZR_E_BUFFER);
        uint8_t *out = malloc(buffer);
        ck_assert_int_eq(gather_ragged(withdict, idx, N, out, buffer, shapes, offs, NULL, &err),
                         0);
        const uint8_t *src = data;
        for (int i = 0; i < N; i++) {
                int k = N - 1 - i; /* record i sits at output position k */
                ck_assert_uint_eq(shapes[k], (lens[i] - 16) / 4);
                ck_assert(memcmp(out + offs[k], src + 16, lens[i] - 16) == 0);
                src += lens[i];
        }
        free(out);
        free(shapes);
        free(offs);
        free(dict);
        zr_dataset_close(raw, NULL);
        zr_dataset_close(withdict, NULL);
        zr_dataset_close(plain, NULL);
        close(raw_fd);
        close(dict_fd);
        close(plain_fd);
        scratch_free(&sc);
        free(data);
        free(lens);
}
END_TEST

START_TEST(test_too_little_data) {
        uint8_t tiny[16] = { 1, 2, 3 };
        uint64_t lens[2] = { 8, 8 };
        void *dict = NULL;
        size_t len = 0;
        zr_error err = {0};
        ck_assert_int_eq(zr_dict_train(tiny, lens, 2, zr_dict_tier_get(ZR_DICT_TIER_BALANCED),
                                       &dict, &len, &err), -EINVAL);
        ck_assert_ptr_nonnull(strstr(err.message, "training failed"));
        ck_assert_ptr_null(dict);
        zr_error_clear(&err);
        ck_assert_int_eq(zr_dict_train(tiny, lens, 0, zr_dict_tier_get(ZR_DICT_TIER_BALANCED),
                                       &dict, &len, &err), -EINVAL);
}
END_TEST

TL_SUITE_MAIN("dicttrain", test_tiers, test_tiles_beat_plain_zstd, test_tokens_through_store,
              test_too_little_data)
