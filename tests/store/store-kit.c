/* store-kit.c: what the store suite's files share (store-kit.h). */
#include "store-kit.h"

#include <check.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "records.h"
#include "util.h"

void tdir_make(tdir *d) {
        snprintf(d->path, sizeof(d->path), "%s/zr-test-store-XXXXXX", tl_tmpdir(false));
        ck_assert_ptr_nonnull(mkdtemp(d->path));
        d->fd = open(d->path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        ck_assert_int_ge(d->fd, 0);
}

void tdir_remove(tdir *d) {
        close(d->fd);
        tl_rmtree(d->path);
}

void store_done(tdir *d, zr_store *s, zr_pool *pool) {
        ck_assert_int_eq(zr_store_close(s, NULL), 0);
        tdir_remove(d);
        zr_pool_free(pool);
}

int tdir_has(const tdir *d, const char *name) {
        return faccessat(d->fd, name, F_OK, AT_SYMLINK_NOFOLLOW) == 0;
}

/* A batch of records with ids first_id.. and the given lengths, packed. */
uint8_t *make_batch(const uint64_t *lens, size_t n, uint64_t first_id) {
        uint64_t total = 0;
        for (size_t i = 0; i < n; i++)
                total += lens[i];
        uint8_t *buf = malloc(total ? total : 1), *p = buf;
        ck_assert_ptr_nonnull(buf);
        for (size_t i = 0; i < n; i++) {
                tl_record_fill(p, first_id + i, lens[i]);
                p += lens[i];
        }
        return buf;
}

/* Checks that store record idx holds record `id` of length len. */
void check_record(zr_store *s, uint64_t idx, uint64_t id, uint64_t len) {
        uint8_t *got = malloc(len ? len : 1), *want = malloc(len ? len : 1);
        uint64_t got_len = 0;
        zr_error err = {0};
        tl_record_fill(want, id, len);
        int r = zr_store_gather(s, &idx, 1, got, len, &got_len, &err);
        ck_assert_msg(r == 0, "gather %llu: %s", (unsigned long long)idx, err.message);
        ck_assert_uint_eq(got_len, len);
        ck_assert_msg(memcmp(got, want, len) == 0, "record %llu differs", (unsigned long long)idx);
        free(got);
        free(want);
}

/* A raw-content dictionary: zstd accepts any bytes as one. */
uint8_t *make_dict(size_t *len) {
        *len = 32768;
        uint8_t *d = malloc(*len);
        tl_record_fill(d, 424242, *len);
        return d;
}

zr_store *create_store(tdir *d, enum zr_codec codec, unsigned chunk_log2,
                              zr_pool *pool) {
        zr_store_options o = { .pool = pool, .chunk_log2 = chunk_log2 };
        zr_store *s = NULL;
        zr_error err = {0};
        size_t dlen = 0;
        uint8_t *dict = codec == ZR_CODEC_ZSTD_DICT ? make_dict(&dlen) : NULL;
        int r = zr_store_create(d->fd, codec, dict, dlen, &o, &s, &err);
        ck_assert_msg(r == 0, "create: %s", err.message);
        free(dict);
        return s;
}

zr_store *reopen(tdir *d, zr_store *s, zr_pool *pool) {
        zr_store_options o = { .pool = pool };
        zr_error err = {0};
        ck_assert_int_eq(zr_store_close(s, &err), 0);
        s = NULL;
        int r = zr_store_open(d->fd, &o, &s, &err);
        ck_assert_msg(r == 0, "open: %s", err.message);
        return s;
}

void append_ok(zr_store *s, const uint64_t *lens, size_t n, uint64_t first_id) {
        uint8_t *data = make_batch(lens, n, first_id);
        uint64_t first = 12345;
        zr_error err = {0};
        uint64_t before = zr_store_length(s);
        int r = zr_store_append(s, data, lens, n, &first, &err);
        ck_assert_msg(r == 0, "append: %s", err.message);
        ck_assert_uint_eq(first, before);
        ck_assert_uint_eq(zr_store_length(s), before + n);
        free(data);
}

/* Gathers every record in one packed batch and compares with the model
 * (ids[i], lens_of[ids[i]]). */
void check_all(zr_store *s, const uint64_t *ids, const uint64_t *len_of, size_t n) {
        ck_assert_uint_eq(zr_store_length(s), n);
        if (n == 0)
                return;
        uint64_t *idx = malloc(n * sizeof(*idx)), *got_lens = malloc(n * sizeof(*got_lens));
        uint64_t total = 0;
        for (size_t i = 0; i < n; i++) {
                idx[i] = i;
                total += len_of[ids[i]];
        }
        uint8_t *buf = malloc(total ? total : 1), *want = malloc(total ? total : 1);
        zr_error err = {0};
        int r = zr_store_gather(s, idx, n, buf, total, got_lens, &err);
        ck_assert_msg(r == 0, "gather all: %s", err.message);
        uint64_t off = 0;
        for (size_t i = 0; i < n; i++) {
                ck_assert_uint_eq(got_lens[i], len_of[ids[i]]);
                tl_record_fill(want + off, ids[i], got_lens[i]);
                ck_assert_msg(memcmp(buf + off, want + off, got_lens[i]) == 0,
                              "record %zu (id %llu) differs", i, (unsigned long long)ids[i]);
                off += got_lens[i];
        }
        free(idx);
        free(got_lens);
        free(buf);
        free(want);
}

void check_verify(zr_store *s, uint64_t n) {
        zr_verify_report rep;
        zr_error err = {0};
        int r = zr_store_verify(s, &rep, &err);
        ck_assert_msg(r == 0, "verify: %s", err.message);
        ck_assert_uint_eq(rep.records, n);
        ck_assert_uint_eq(rep.bad, 0);
}

/* The model: swap-last in descending order. */
void model_delete(uint64_t *ids, size_t *n, const uint64_t *del, size_t ndel) {
        *n = tl_swap_last(ids, *n, del, ndel);
}

zr_store *store_filled(tdir *d, enum zr_codec codec, unsigned chunk_log2, zr_pool *pool,
                       const uint64_t *lens, size_t n, uint64_t *ids) {
        zr_store *s;

        tdir_make(d);
        s = create_store(d, codec, chunk_log2, pool);
        append_ok(s, lens, n, 0);
        for (size_t i = 0; ids && i < n; i++)
                ids[i] = i;
        return s;
}

void append_more(zr_store *s, const uint64_t *lens, size_t k, uint64_t first_id,
                 uint64_t *len_of, uint64_t *ids, size_t *n) {
        append_ok(s, lens, k, first_id);
        for (size_t j = 0; j < k; j++) {
                len_of[first_id + j] = lens[j];
                ids[(*n)++] = first_id + j;
        }
}

zr_store *reopen_checked(tdir *d, zr_store *s, zr_pool *pool, const uint64_t *ids,
                         const uint64_t *len_of, size_t n) {
        s = reopen(d, s, pool);
        check_all(s, ids, len_of, n);
        check_verify(s, n);
        return s;
}
