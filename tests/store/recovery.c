/* recovery.c: what the store's recovery tests share (recovery.h). */
#include "recovery.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "records.h"
#include "util.h"

/* Files of a test store are small but for .loc: copy this much, extend sparse. */
#define COPY_PREFIX (1u << 20)

const uint64_t rc_delete_idx[RC_DELETE_N] = { 2, 7, 11, RC_PRE_RECORDS - 1, RC_PRE_RECORDS - 4 };
const uint64_t rc_holes_idx[RC_HOLES_N] = { 0, 5, 9, 13, 17, 21 };

size_t rc_record_len(uint64_t id) {
        return id == 1 ? 16 : 200 + (size_t)(tl_mix64(id) % 1800);
}

void rc_ids_append(rc_ids *m, uint64_t first, size_t n) {
        for (size_t i = 0; i < n; i++)
                m->v[m->n++] = first + i;
}

int rc_cmp_desc(const void *a, const void *b) {
        uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

        return (x < y) - (x > y);
}

void rc_ids_delete(rc_ids *m, const uint64_t *idx, size_t n) {
        m->n = tl_swap_last(m->v, m->n, idx, n);
}

void rc_ids_after(const rc_ids *before, enum rc_change change, rc_ids *ret) {
        *ret = *before;
        if (change == RC_APPENDS)
                rc_ids_append(ret, 1000, RC_APPEND_N);
        else if (change == RC_DELETES)
                rc_ids_delete(ret, rc_delete_idx, RC_DELETE_N);
}

bool rc_ids_eq(const rc_ids *a, const rc_ids *b) {
        return a->n == b->n && memcmp(a->v, b->v, a->n * sizeof(a->v[0])) == 0;
}

int rc_append(zr_store *s, uint64_t first, size_t n, zr_error *err) {
        uint64_t lens[64];
        size_t total = 0;
        uint8_t *buf;
        int r;

        for (size_t i = 0; i < n; i++)
                total += lens[i] = rc_record_len(first + i);
        buf = malloc(total);
        if (!buf)
                tl_die("malloc");
        for (size_t i = 0, off = 0; i < n; off += lens[i], i++)
                tl_record_fill(buf + off, first + i, lens[i]);
        r = zr_store_append(s, buf, lens, n, NULL, err);
        free(buf);
        return r;
}

int rc_read_ids(zr_store *s, rc_ids *ret, const char *when) {
        uint64_t n = zr_store_length(s);
        zr_error err = { 0 };
        uint8_t buf[4096], want[4096];

        ret->n = 0;
        if (n > sizeof(ret->v) / sizeof(ret->v[0])) {
                tl_fail("%s: length %" PRIu64 " is more than was ever written", when, n);
                return -1;
        }
        for (uint64_t i = 0; i < n; i++) {
                uint64_t len = 0, id;

                zr_error_clear(&err);
                if (zr_store_gather(s, &i, 1, buf, sizeof(buf), &len, &err) < 0) {
                        tl_fail("%s: record %" PRIu64 ": %s", when, i, err.message);
                        return -1;
                }
                id = tl_record_id(buf, len);
                if (id == 0 || len != rc_record_len(id)) {
                        tl_fail("%s: record %" PRIu64 " is %" PRIu64 " bytes with id %" PRIu64,
                                when, i, len, id);
                        return -1;
                }
                tl_record_fill(want, id, len);
                if (memcmp(want, buf, len) != 0) {
                        tl_fail("%s: record %" PRIu64 " (id %" PRIu64 ") is not bit-exact", when, i,
                                id);
                        return -1;
                }
                ret->v[ret->n++] = id;
        }
        return 0;
}

void *rc_dict;
size_t rc_dict_len;

void rc_make_dict(void) {
        if (tl_record_dict(5000, 200, rc_record_len, 0, RC_DICT_CAPACITY, &rc_dict,
                           &rc_dict_len) < 0)
                exit(2);
}

int rc_prepare(int dfd, enum zr_codec c, zr_pool *pool, bool with_dict, bool records, bool holes,
               zr_store **ret, rc_ids *ret_ids, zr_error *err) {
        zr_store_options opts = { .pool = pool, .chunk_log2 = RC_CHUNK_LOG2 };
        zr_store *s = NULL;
        int r = zr_store_create(dfd, c, with_dict ? rc_dict : NULL, with_dict ? rc_dict_len : 0,
                                &opts, &s, err);

        ret_ids->n = 0;
        if (r >= 0 && records) {
                /* three appends, so records sit in several chunks */
                for (uint64_t first = 1; r >= 0 && first <= RC_PRE_RECORDS;
                     first += RC_PRE_RECORDS / 3)
                        r = rc_append(s, first, RC_PRE_RECORDS / 3, err);
                rc_ids_append(ret_ids, 1, RC_PRE_RECORDS);
        }
        if (r >= 0 && holes) {
                r = zr_store_delete(s, rc_holes_idx, RC_HOLES_N, err);
                rc_ids_delete(ret_ids, rc_holes_idx, RC_HOLES_N);
        }
        *ret = s;
        return r;
}

int rc_check_sound(zr_store *s, const rc_ids *got, const char *when) {
        zr_verify_report rep = { 0 };
        zr_compact_result cr = { 0 };
        zr_error err = { 0 };
        rc_ids again, more = *got;

        if (zr_store_verify(s, &rep, &err) < 0 || rep.bad) {
                tl_fail("%s: verify: %s", when, err.message);
                return -1;
        }
        zr_error_clear(&err);
        if (zr_store_codec(s) == ZR_CODEC_ZSTD_DICT && !zr_store_has_dict(s) &&
            zr_store_install_dict(s, rc_dict, rc_dict_len, &err) < 0) {
                tl_fail("%s: install the dictionary again: %s", when, err.message);
                return -1;
        }
        zr_error_clear(&err);
        if (zr_store_compact(s, 0, &cr, &err) < 0 || !cr.finished) {
                tl_fail("%s: compaction re-run: %s", when, err.message);
                return -1;
        }
        if (rc_read_ids(s, &again, when) < 0)
                return -1;
        if (!rc_ids_eq(&again, got)) {
                tl_fail("%s: the compaction re-run changed the table", when);
                return -1;
        }
        zr_error_clear(&err);
        if (zr_store_compact(s, 0, &cr, &err) < 0 || cr.moved != 0) {
                tl_fail("%s: a second compaction moved %" PRIu64 " records: %s", when, cr.moved,
                        err.message);
                return -1;
        }
        zr_error_clear(&err);
        if (rc_append(s, 2000, 2, &err) < 0) {
                tl_fail("%s: append afterwards: %s", when, err.message);
                return -1;
        }
        rc_ids_append(&more, 2000, 2);
        if (rc_read_ids(s, &again, when) < 0)
                return -1;
        if (!rc_ids_eq(&again, &more)) {
                tl_fail("%s: an append afterwards reads back wrong", when);
                return -1;
        }
        return 0;
}

int rc_check_recovered(zr_store *s, const rc_ids *before, const rc_ids *after,
                       enum rc_expect ex, const char *when) {
        zr_error err = {0};
        rc_ids got;
        int r = rc_read_ids(s, &got, when);

        if (r == 0) {
                bool is_before = rc_ids_eq(&got, before), is_after = rc_ids_eq(&got, after);

                if (!is_before && !is_after) {
                        tl_fail("%s: %zu records: neither the table before (%zu) nor after "
                                "(%zu) the operation", when, got.n, before->n, after->n);
                        r = -1;
                } else if ((ex == RC_BEFORE && !is_before) || (ex == RC_AFTER && !is_after)) {
                        tl_fail("%s: %zu records, not the %zu of the table %s the operation",
                                when, got.n, ex == RC_AFTER ? after->n : before->n,
                                ex == RC_AFTER ? "after" : "before");
                        r = -1;
                }
        }
        if (r == 0)
                r = rc_check_sound(s, &got, when);
        if (zr_store_close(s, &err) < 0) {
                tl_fail("%s: close: %s", when, err.message);
                r = -1;
        }
        return r;
}

char *rc_new_dir(const char *prefix) {
        char *dir = malloc(512);

        if (!dir)
                tl_die("malloc");
        snprintf(dir, 512, "%s/%s-XXXXXX", tl_tmpdir(true), prefix);
        if (!mkdtemp(dir))
                tl_die("mkdtemp");
        return dir;
}

int rc_open_dir(const char *dir) {
        int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);

        if (fd < 0)
                tl_die(dir);
        return fd;
}

void rc_copy_store(const char *from, const char *to) {
        const char *what = to;
        int dfd = rc_open_dir(to);
        int r = tl_copy_files(from, dfd, COPY_PREFIX, &what);

        close(dfd);
        if (r < 0) {
                errno = -r;
                tl_die(what);
        }
}
