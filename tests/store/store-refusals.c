/* store-refusals.c: the store suite's refusals of bad input from the API side:
 * indices and buffers, record sizes, dictionary rules, locks, opens, read-only
 * stores (store-kit.h). */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check-run.h"
#include "store-kit.h"

START_TEST(test_bad_index_and_buffer) {
        tdir d;
        uint64_t lens[] = { 10, 20, 30 };
        zr_error err = {0};
        uint8_t buf[64];
        zr_loc loc;

        zr_store *s = store_filled(&d, ZR_CODEC_RAW, 16, NULL, lens, 3, NULL);
        uint64_t idx[] = { 0, 3 };
        ck_assert_int_eq(zr_store_gather(s, idx, 2, buf, sizeof(buf), NULL, &err), -ZR_E_RANGE);
        ck_assert_ptr_nonnull(strstr(err.message, "3"));
        ck_assert_int_eq(zr_store_locate(s, idx + 1, 1, &loc, NULL), -ZR_E_RANGE);
        uint64_t idx2[] = { 2, 1 };
        zr_error_clear(&err);
        ck_assert_int_eq(zr_store_gather(s, idx2, 2, buf, 49, NULL, &err), -ZR_E_BUFFER);
        ck_assert_int_eq(zr_store_gather(s, idx2, 2, buf, 50, NULL, &err), 0);
        ck_assert_int_eq(zr_store_close(s, NULL), 0);
        tdir_remove(&d);
}
END_TEST

START_TEST(test_record_too_big) {
        tdir d;
        uint8_t small[16] = {0};
        zr_error err = {0};
        uint64_t first;

        tdir_make(&d);
        zr_store *s = create_store(&d, ZR_CODEC_ZSTD, 0, NULL);
        /* the lengths claim more than 2^31: refused before a byte is read */
        uint64_t lens[] = { 4, ((uint64_t)1 << 31) + 1 };
        ck_assert_int_eq(zr_store_append(s, small, lens, 2, &first, &err), -ZR_E_TOO_BIG);
        ck_assert_uint_eq(zr_store_length(s), 0);
        ck_assert_ptr_nonnull(strstr(err.message, "2147483649"));
        zr_store_close(s, NULL);
        tdir_remove(&d);

        /* in a test store, a record over the chunk size is refused too */
        tdir_make(&d);
        s = create_store(&d, ZR_CODEC_RAW, 16, NULL);
        uint8_t *big = calloc(1, 65537);
        uint64_t l2[] = { 65537 };
        zr_error_clear(&err);
        ck_assert_int_eq(zr_store_append(s, big, l2, 1, NULL, &err), -ZR_E_TOO_BIG);
        ck_assert_uint_eq(zr_store_length(s), 0);
        free(big);
        zr_store_close(s, NULL);
        tdir_remove(&d);
}
END_TEST

START_TEST(test_dict_rules) {
        tdir d;
        zr_error err = {0};
        uint64_t lens[] = { 500, 600 }, ids[] = { 0, 1 };
        size_t dlen;
        uint8_t *dict = make_dict(&dlen);

        tdir_make(&d);
        zr_store *s = NULL;
        ck_assert_int_eq(zr_store_create(d.fd, ZR_CODEC_ZSTD_DICT, NULL, 0, NULL, &s, &err), 0);
        ck_assert_int_eq(zr_store_has_dict(s), 0);
        uint8_t *data = make_batch(lens, 2, 0);
        ck_assert_int_eq(zr_store_append(s, data, lens, 2, NULL, &err), -ZR_E_NO_DICT);
        ck_assert_uint_eq(zr_store_length(s), 0);
        /* reading without a dictionary */
        zr_loc fake = { .offset = 0, .phys_length = 0, .logic_length = 0, .chunk_id = 0 };
        uint8_t one[1];
        void *dst = one;
        zr_error_clear(&err);
        ck_assert_int_eq(zr_store_gather_locs(s, &fake, 1, &dst, &err), -ZR_E_NO_DICT);
        void *got = NULL;
        size_t got_len = 0;
        ck_assert_int_eq(zr_store_read_dict(s, &got, &got_len, NULL), -ZR_E_NO_DICT);
        /* an empty dict store without dict.zr reopens (to install later) */
        s = reopen(&d, s, NULL);
        ck_assert_int_eq(zr_store_install_dict(s, dict, 0, NULL), -EINVAL);
        ck_assert_int_eq(zr_store_install_dict(s, dict, dlen, &err), 0);
        ck_assert_int_eq(zr_store_install_dict(s, dict, dlen, NULL), -ZR_E_HAS_DICT);
        ck_assert_int_eq(zr_store_read_dict(s, &got, &got_len, NULL), 0);
        ck_assert_uint_eq(got_len, dlen);
        ck_assert(memcmp(got, dict, dlen) == 0);
        free(got);
        append_ok(s, lens, 2, 0);
        s = reopen(&d, s, NULL);
        ck_assert_int_eq(zr_store_has_dict(s), 1);
        check_all(s, ids, lens, 2);
        zr_store_close(s, NULL);
        tdir_remove(&d);

        /* install on a non-empty store, on another codec */
        tdir_make(&d);
        ck_assert_int_eq(zr_store_create(d.fd, ZR_CODEC_ZSTD_DICT, NULL, 0, NULL, &s, NULL), 0);
        zr_store_close(s, NULL);
        /* a dictionary declared in the header but dict.zr gone */
        ck_assert_int_eq(zr_store_open(d.fd, NULL, &s, NULL), 0);
        ck_assert_int_eq(zr_store_install_dict(s, dict, dlen, NULL), 0);
        zr_store_close(s, NULL);
        ck_assert_int_eq(unlinkat(d.fd, "dict.zr", 0), 0);
        zr_error_clear(&err);
        ck_assert_int_eq(zr_store_open(d.fd, NULL, &s, &err), -ZR_E_NO_DICT);
        ck_assert_ptr_nonnull(strstr(err.message, "dict.zr"));
        tdir_remove(&d);

        tdir_make(&d);
        s = create_store(&d, ZR_CODEC_ZSTD, 0, NULL);
        ck_assert_int_eq(zr_store_install_dict(s, dict, dlen, NULL), -ZR_E_BAD_CODEC);
        zr_store_close(s, NULL);
        tdir_remove(&d);

        tdir_make(&d);
        ck_assert_int_eq(zr_store_create(d.fd, ZR_CODEC_ZSTD_DICT, NULL, 0, NULL, &s, NULL), 0);
        ck_assert_int_eq(zr_store_install_dict(s, dict, dlen, NULL), 0);
        append_ok(s, lens, 2, 0);
        zr_store_close(s, NULL);
        ck_assert_int_eq(unlinkat(d.fd, "dict.zr", 0), 0);
        /* header flag cleared by hand: the records alone still demand dict.zr */
        int fd = openat(d.fd, "meta.zr", O_RDWR | O_CLOEXEC);
        uint8_t z = 0;
        ck_assert_int_eq(pwrite(fd, &z, 1, 23), 1);
        close(fd);
        ck_assert_int_eq(zr_store_open(d.fd, NULL, &s, NULL), -ZR_E_NO_DICT);
        tdir_remove(&d);
        free(data);
        free(dict);
}
END_TEST

START_TEST(test_install_on_nonempty) {
        tdir d;
        size_t dlen;
        uint8_t *dict = make_dict(&dlen);
        uint64_t lens[] = { 300 };
        zr_error err = {0};
        zr_store *s;

        s = store_filled(&d, ZR_CODEC_ZSTD_DICT, 0, NULL, lens, 1, NULL);
        s = reopen(&d, s, NULL);
        ck_assert_int_eq(zr_store_install_dict(s, dict, dlen, &err), -ZR_E_SCHEMA);
        ck_assert_ptr_nonnull(strstr(err.message, "empty"));
        zr_store_close(s, NULL);
        tdir_remove(&d);
        free(dict);
}
END_TEST

START_TEST(test_lock_and_exists) {
        tdir d;
        zr_error err = {0};
        zr_store *s, *s2 = NULL;

        tdir_make(&d);
        s = create_store(&d, ZR_CODEC_RAW, 0, NULL);
        /* a second open in the same process: another open file description;
         * the refusal names the holder, as /proc/locks shows it */
        char self[64];
        snprintf(self, sizeof(self), "written by this process (pid %ld)", (long)getpid());
        ck_assert_int_eq(zr_store_open(d.fd, NULL, &s2, &err), -ZR_E_LOCKED);
        ck_assert_ptr_null(s2);
        ck_assert_msg(strstr(err.message, "meta.zr") && strstr(err.message, self) &&
                      strstr(err.message, "needs it to itself"), "%s", err.message);
        zr_store_options ro = { .read_only = 1 };
        zr_error_clear(&err);
        ck_assert_int_eq(zr_store_open(d.fd, &ro, &s2, &err), -ZR_E_LOCKED);
        ck_assert_msg(strstr(err.message, self) && strstr(err.message, "for reading once"),
                      "%s", err.message);
        /* the writer's record, for a refused opener of another machine */
        ck_assert(tdir_has(&d, "writer.zr"));
        {
                char rec[256] = "", want[64];
                int rfd = openat(d.fd, "writer.zr", O_RDONLY | O_CLOEXEC);
                ck_assert_int_ge(rfd, 0);
                ck_assert_int_gt(read(rfd, rec, sizeof(rec) - 1), 0);
                close(rfd);
                snprintf(want, sizeof(want), "pid=%ld host=", (long)getpid());
                ck_assert_msg(strncmp(rec, want, strlen(want)) == 0 && strstr(rec, " since="),
                              "%s", rec);
        }
        /* read-only opens share the store (a shared lock), and keep writers out */
        {
                tdir d2;
                zr_store *w, *r1 = NULL, *r2 = NULL, *w2 = NULL;
                tdir_make(&d2);
                w = create_store(&d2, ZR_CODEC_RAW, 0, NULL);
                zr_store_close(w, NULL);
                ck_assert(!tdir_has(&d2, "writer.zr")); /* gone with its writer */
                ck_assert_int_eq(zr_store_open(d2.fd, &ro, &r1, NULL), 0);
                ck_assert_int_eq(zr_store_open(d2.fd, &ro, &r2, NULL), 0);
                ck_assert(!tdir_has(&d2, "writer.zr")); /* readers leave no record */
                zr_error_clear(&err);
                ck_assert_int_eq(zr_store_open(d2.fd, NULL, &w2, &err), -ZR_E_LOCKED);
                char two[128];
                snprintf(two, sizeof(two), "read by this process (pid %ld) on this machine; "
                         "read by this process", (long)getpid());
                ck_assert_msg(strstr(err.message, two), "%s", err.message);
                zr_store_close(r1, NULL);
                ck_assert_int_eq(zr_store_open(d2.fd, NULL, &w2, NULL), -ZR_E_LOCKED);
                zr_store_close(r2, NULL);
                ck_assert_int_eq(zr_store_open(d2.fd, NULL, &w2, NULL), 0);
                zr_store_close(w2, NULL);
                tdir_remove(&d2);
        }
        /* and from another process */
        pid_t pid = fork();
        ck_assert_int_ge(pid, 0);
        if (pid == 0) {
                zr_store *c = NULL;
                _exit(zr_store_open(d.fd, NULL, &c, NULL) == -ZR_E_LOCKED ? 0 : 1);
        }
        int status;
        ck_assert_int_eq(waitpid(pid, &status, 0), pid);
        ck_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
        zr_error_clear(&err);
        ck_assert_int_eq(zr_store_create(d.fd, ZR_CODEC_ZSTD, NULL, 0, NULL, &s2, &err),
                         -ZR_E_EXISTS);
        zr_store_close(s, NULL);
        /* create over a closed store is refused too, and leaves it intact */
        ck_assert_int_eq(zr_store_create(d.fd, ZR_CODEC_ZSTD, NULL, 0, NULL, &s2, NULL),
                         -ZR_E_EXISTS);
        ck_assert_int_eq(zr_store_open(d.fd, NULL, &s, NULL), 0);
        ck_assert_int_eq(zr_store_codec(s), ZR_CODEC_RAW);
        zr_store_close(s, NULL);
        tdir_remove(&d);
}
END_TEST

START_TEST(test_open_refusals) {
        tdir d;
        zr_error err = {0};
        zr_store *s = NULL;

        tdir_make(&d);
        ck_assert_int_eq(zr_store_open(d.fd, NULL, &s, &err), -ZR_E_NOT_STORE);
        ck_assert_int_eq(zr_store_create(d.fd, 7, NULL, 0, NULL, &s, NULL), -ZR_E_BAD_CODEC);
        zr_store_options o = { .chunk_log2 = 40 };
        ck_assert_int_eq(zr_store_create(d.fd, ZR_CODEC_RAW, NULL, 0, &o, &s, NULL), -EINVAL);
        ck_assert(!tdir_has(&d, "meta.zr"));
        tdir_remove(&d);
}
END_TEST

START_TEST(test_read_only) {
        tdir d;
        uint64_t lens[] = { 42 }, ids[1];
        zr_error err = {0};
        zr_store *s;

        s = store_filled(&d, ZR_CODEC_RAW, 0, NULL, lens, 1, ids);
        zr_store_close(s, NULL);
        zr_store_options ro = { .read_only = 1 };
        ck_assert_int_eq(zr_store_open(d.fd, &ro, &s, NULL), 0);
        check_all(s, ids, lens, 1);
        uint8_t b[42] = {0};
        ck_assert_int_eq(zr_store_append(s, b, lens, 1, NULL, &err), -ZR_E_READONLY);
        uint64_t del[] = { 0 };
        ck_assert_int_eq(zr_store_delete(s, del, 1, NULL), -ZR_E_READONLY);
        ck_assert_int_eq(zr_store_compact(s, 0, NULL, NULL), -ZR_E_READONLY);
        ck_assert_int_eq(zr_store_failed(s), 0);
        ck_assert_int_eq(zr_store_close(s, NULL), 0);
        tdir_remove(&d);
}
END_TEST

START_TEST(test_verify_sound) {
        tdir d;
        uint64_t lens[40], ids[40];
        zr_pool *pool = NULL;

        ck_assert_int_eq(zr_pool_new(2, &pool), 0);
        for (int i = 0; i < 40; i++)
                lens[i] = 50 + i * 400;
        zr_store *s = store_filled(&d, ZR_CODEC_ZSTD_DICT, 16, pool, lens, 40, ids);
        check_verify(s, 40);
        check_all(s, ids, lens, 40);
        ck_assert_int_eq(zr_store_sync(s, NULL), 0);
        zr_store_close(s, NULL);
        tdir_remove(&d);
        zr_pool_free(pool);
}
END_TEST

void store_add_refusals(Suite *s) {
        TL_TCASE(s, "bad-input", 0, test_bad_index_and_buffer, test_record_too_big,
                 test_dict_rules, test_install_on_nonempty, test_lock_and_exists,
                 test_open_refusals, test_read_only, test_verify_sound);
}
