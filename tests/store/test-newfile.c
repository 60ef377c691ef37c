/* test-newfile.c: what the store makes and maps cannot be someone else's file
 * (issue 14, finding 3: a planted chunk killed the daemon with SIGBUS).
 *
 * - A file planted under a name the store is about to create (0.chunk before
 *   the first append, delete.zr, dict.zr.tmp) is removed and a new one made:
 *   the planted file is never written (a hard link shows it: the other name
 *   keeps its bytes) nor used.
 * - Only the daemon's own files that nobody else may write are mapped
 *   (/proc/self/maps tells); a group-writable chunk, or another user's (as
 *   root), is read with pread.
 * - A mapped chunk or .loc file truncated under the store (by its own user:
 *   the case of a per-user daemon) makes the read fail with ZR_E_CORRUPT; the
 *   process lives (libcheck would report signal 7 otherwise).
 */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "check-run.h"
#include "records.h"
#include "store-kit.h"
#include "util.h"

static const uint64_t lens[] = { 100, 2000, 30, 4096, 5, 777 };
#define NREC (sizeof(lens) / sizeof(lens[0]))

static void stat_at(const tdir *d, const char *name, struct stat *st) {
        ck_assert_msg(fstatat(d->fd, name, st, AT_SYMLINK_NOFOLLOW) == 0, "%s: %s", name,
                      strerror(errno));
}

/* A file beside d holding "keep...", hard-linked into d as `name`; its path. */
static void plant_link(const tdir *d, const char *name, char *outside, size_t len) {
        snprintf(outside, len, "%s.outside", d->path);
        int fd = open(outside, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
        ck_assert_int_ge(fd, 0);
        ck_assert_int_eq(fchmod(fd, 0666), 0);
        ck_assert_int_eq(write(fd, "keep this, it is not the store's", 32), 32);
        close(fd);
        ck_assert_int_eq(linkat(AT_FDCWD, outside, d->fd, name, 0), 0);
}

static void check_outside(const char *outside) {
        char buf[64] = "";
        int fd = open(outside, O_RDONLY | O_CLOEXEC);
        ck_assert_int_ge(fd, 0);
        ck_assert_int_eq(read(fd, buf, sizeof(buf)), 32);
        close(fd);
        ck_assert_msg(memcmp(buf, "keep this, it is not the store's", 32) == 0,
                      "the store wrote into a file it did not make");
        unlink(outside);
}

/* 0.chunk planted (mode 0666) in an empty store before its first append (a
 * hard link to a file beside the store, so that its inode stays in use and
 * its bytes can be checked). */
START_TEST(test_planted_chunk_replaced) {
        tdir d;
        char outside[400];
        struct stat planted, made;
        uint64_t ids[NREC];
        tdir_make(&d);
        zr_store *s = create_store(&d, ZR_CODEC_RAW, 0, NULL);
        plant_link(&d, "0.chunk", outside, sizeof(outside));
        stat_at(&d, "0.chunk", &planted);
        append_ok(s, lens, NREC, 0);
        stat_at(&d, "0.chunk", &made);
        ck_assert_msg(made.st_ino != planted.st_ino, "the planted 0.chunk became the store's");
        ck_assert_int_eq(made.st_mode & (S_IWGRP | S_IWOTH), 0);
        check_outside(outside);
        for (size_t i = 0; i < NREC; i++) {
                ids[i] = i;
                check_record(s, i, i, lens[i]);
        }
        s = reopen(&d, s, NULL);
        check_all(s, ids, lens, NREC);
        zr_store_close(s, NULL);
        tdir_remove(&d);
}
END_TEST

/* delete.zr, a hard link to a file beside the store: the delete's journal is a
 * new file, the other name keeps its bytes. */
START_TEST(test_planted_journal_not_written) {
        tdir d;
        char outside[400];
        uint64_t del = 1;
        zr_error err = {0};
        zr_store *s = store_filled(&d, ZR_CODEC_RAW, 0, NULL, lens, NREC, NULL);
        plant_link(&d, "delete.zr", outside, sizeof(outside));
        ck_assert_msg(zr_store_delete(s, &del, 1, &err) == 0, "delete: %s", err.message);
        check_outside(outside);
        ck_assert(!tdir_has(&d, "delete.zr"));
        check_record(s, 1, NREC - 1, lens[NREC - 1]);
        zr_store_close(s, NULL);
        tdir_remove(&d);
}
END_TEST

/* dict.zr.tmp, a hard link: the dictionary is written into a new file. */
START_TEST(test_planted_dict_tmp_not_written) {
        tdir d;
        char outside[400];
        size_t dlen;
        zr_store *s = NULL;
        zr_error err = {0};
        tdir_make(&d);
        ck_assert_int_eq(zr_store_create(d.fd, ZR_CODEC_ZSTD_DICT, NULL, 0, NULL, &s, &err), 0);
        plant_link(&d, "dict.zr.tmp", outside, sizeof(outside));
        uint8_t *dict = make_dict(&dlen);
        ck_assert_msg(zr_store_install_dict(s, dict, dlen, &err) == 0, "install: %s",
                      err.message);
        check_outside(outside);
        struct stat st;
        stat_at(&d, "dict.zr", &st);
        ck_assert_uint_eq((uint64_t)st.st_size, dlen);
        free(dict);
        zr_store_close(s, NULL);
        tdir_remove(&d);
}
END_TEST

/* Whether this process maps `path` (/proc/self/maps). */
static int mapped(const char *path) {
        char line[1024];
        int found = 0;
        FILE *f = fopen("/proc/self/maps", "re");
        ck_assert_ptr_nonnull(f);
        while (fgets(line, sizeof(line), f))
                if (strstr(line, path))
                        found = 1;
        fclose(f);
        return found;
}

/* Only the store's own files that nobody else may write are mapped. */
START_TEST(test_maps_only_private_files) {
        tdir d;
        char chunk[400];
        zr_store *s = store_filled(&d, ZR_CODEC_RAW, 0, NULL, lens, NREC, NULL);
        snprintf(chunk, sizeof(chunk), "%s/0.chunk", d.path);
        s = reopen(&d, s, NULL);
        ck_assert_msg(mapped(chunk), "a private chunk is not mapped");
        ck_assert_int_eq(zr_store_close(s, NULL), 0);
        ck_assert_int_eq(chmod(chunk, 0664), 0); /* a group may write it */
        s = reopen(&d, NULL, NULL);
        ck_assert_msg(!mapped(chunk), "a group-writable chunk is mapped");
        check_record(s, 3, 3, lens[3]);
        ck_assert_int_eq(zr_store_close(s, NULL), 0);
        if (geteuid() == 0) { /* another user's file, not writable by anyone else */
                ck_assert_int_eq(chmod(chunk, 0644), 0);
                ck_assert_int_eq(chown(chunk, 12345, 12345), 0);
                s = reopen(&d, NULL, NULL);
                ck_assert_msg(!mapped(chunk), "another user's chunk is mapped");
                check_record(s, 3, 3, lens[3]);
                ck_assert_int_eq(zr_store_close(s, NULL), 0);
        }
        tdir_remove(&d);
}
END_TEST

/* A filled store of `codec` in d, reopened: its chunk 0 (path in chunk, 400
 * bytes) is mapped. */
static zr_store *mapped_store(tdir *d, enum zr_codec codec, char *chunk) {
        zr_store *s = store_filled(d, codec, 0, NULL, lens, NREC, NULL);

        s = reopen(d, s, NULL);
        snprintf(chunk, 400, "%s/0.chunk", d->path);
        ck_assert(mapped(chunk));
        return s;
}

/* The store's own mapped files cut short under it: errors, not SIGBUS. */
START_TEST(test_truncated_under_mapping) {
        tdir d;
        char chunk[400], loc[400];
        uint8_t buf[8192];
        uint64_t idx = 3, got;
        zr_error err = {0};
        zr_store *s = mapped_store(&d, ZR_CODEC_RAW, chunk);
        snprintf(loc, sizeof(loc), "%s/0.loc", d.path);
        ck_assert(mapped(loc));
        zr_loc at;
        ck_assert_int_eq(zr_store_locate(s, &idx, 1, &at, NULL), 0);
        ck_assert_int_eq(truncate(chunk, 0), 0);
        int r = zr_store_gather(s, &idx, 1, buf, sizeof(buf), &got, &err);
        ck_assert_msg(r == -ZR_E_CORRUPT, "gather of a truncated chunk: %d %s", r, err.message);
        ck_assert_ptr_nonnull(strstr(err.message, "cut short"));
        /* timed (telemetry), its first pass touches every page of the records */
        zr_store_times t = { .sample_io = 1 };
        void *dst = buf;
        zr_error_clear(&err);
        r = zr_store_gather_timed(s, &at, 1, &dst, 0, &t, &err);
        ck_assert_msg(r == -ZR_E_CORRUPT, "timed gather of a truncated chunk: %d %s", r,
                      err.message);
        ck_assert_ptr_nonnull(strstr(err.message, "cut short"));
        /* through streaming stores (a large batch's copy) */
        zr_error_clear(&err);
        r = zr_store_gather_timed(s, &at, 1, &dst, ZR_GATHER_STREAM, NULL, &err);
        ck_assert_msg(r == -ZR_E_CORRUPT, "streaming gather of a truncated chunk: %d %s", r,
                      err.message);
        ck_assert_ptr_nonnull(strstr(err.message, "cut short"));
        ck_assert_int_eq(truncate(loc, 0), 0);
        zr_error_clear(&err);
        zr_loc l;
        r = zr_store_locate(s, &idx, 1, &l, &err);
        ck_assert_msg(r == -ZR_E_CORRUPT, "locate in a truncated .loc: %d %s", r, err.message);
        zr_store_close(s, NULL);
        tdir_remove(&d);
}
END_TEST

/* The same with a compressed store: the SIGBUS comes inside zstd. */
START_TEST(test_truncated_under_decompression) {
        tdir d;
        char chunk[400];
        uint8_t buf[8192];
        uint64_t idx = 1, got;
        zr_error err = {0};
        zr_store *s = mapped_store(&d, ZR_CODEC_ZSTD, chunk);
        ck_assert_int_eq(truncate(chunk, 0), 0);
        int r = zr_store_gather(s, &idx, 1, buf, sizeof(buf), &got, &err);
        ck_assert_msg(r == -ZR_E_CORRUPT, "gather: %d %s", r, err.message);
        /* and the store goes on reading what is still there: nothing */
        zr_error_clear(&err);
        ck_assert_int_eq(zr_store_gather(s, &idx, 1, buf, sizeof(buf), &got, &err),
                         -ZR_E_CORRUPT);
        zr_store_close(s, NULL);
        tdir_remove(&d);
}
END_TEST

/* The permission bits of tag (and id, for a named entry) in fd's access ACL, or
 * -1 if it has none (no ACL at all: -2). */
static int acl_perm(int fd, unsigned tag, uint32_t id) {
        uint8_t buf[4 + 8 * 64];
        ssize_t n = fgetxattr(fd, "system.posix_acl_access", buf, sizeof(buf));
        if (n < 0)
                return -2;
        for (ssize_t off = 4; off + 8 <= n; off += 8) {
                unsigned t = buf[off] | buf[off + 1] << 8;
                uint32_t i = (uint32_t)buf[off + 4] | (uint32_t)buf[off + 5] << 8 |
                             (uint32_t)buf[off + 6] << 16 | (uint32_t)buf[off + 7] << 24;
                if (t == tag && (tag != 2 || i == id))
                        return buf[off + 2];
        }
        return -1;
}

/* A store created in a directory of `mode`, owned by (uid, gid): the mode, gid
 * and ACL entries of its meta.zr, 0.chunk (after an append) and 0.loc. */
static void check_new_files(mode_t dir_mode, uid_t uid, gid_t gid, mode_t want_mode,
                            int want_creator_entry) {
        tdir d;
        tdir_make(&d);
        ck_assert_int_eq(fchown(d.fd, uid, gid), 0);
        ck_assert_int_eq(fchmod(d.fd, dir_mode), 0);
        zr_store *s = create_store(&d, ZR_CODEC_RAW, 0, NULL);
        append_ok(s, lens, NREC, 0);
        const char *names[] = { "meta.zr", "0.chunk", "0.loc" };
        for (size_t i = 0; i < 3; i++) {
                struct stat st;
                int fd = openat(d.fd, names[i], O_RDONLY | O_CLOEXEC);
                ck_assert_int_ge(fd, 0);
                ck_assert_int_eq(fstat(fd, &st), 0);
                ck_assert_msg((st.st_mode & 07777) == want_mode, "%s: mode %o, want %o", names[i],
                              st.st_mode & 07777, want_mode);
                ck_assert_msg(st.st_uid == geteuid(), "%s: owner %u", names[i], st.st_uid);
                if (want_mode & 0070)
                        ck_assert_msg(st.st_gid == gid, "%s: group %u, want %u", names[i],
                                      st.st_gid, gid);
                int p = acl_perm(fd, 2, uid);
                if (want_creator_entry)
                        ck_assert_msg(p == 6, "%s: user:%u entry %d, want rw-", names[i], uid, p);
                else
                        ck_assert_msg(p < 0, "%s: an entry for user %u", names[i], uid);
                close(fd);
        }
        check_record(s, 2, 2, lens[2]);
        zr_store_close(s, NULL);
        tdir_remove(&d);
}

/* Files get the group's and others' rights the directory gives them, no
 * execute, no write for others in a sticky directory; the creator (the
 * directory's owner, when not this process's user: as root) an ACL entry. */
START_TEST(test_new_files_follow_the_directory) {
        uid_t me = geteuid();
        gid_t mine = getegid();
        check_new_files(0755, me, mine, 0644, 0);
        check_new_files(0700, me, mine, 0600, 0);
        check_new_files(0770, me, mine, 0660, 0);
        check_new_files(01777, me, mine, 0644, 0);
        if (me != 0) {
                fprintf(stderr, "skipped: files of another creator need root\n");
                return;
        }
        /* another creator: its rw entry shows as the group class's mask */
        check_new_files(02750, 12345, 12346, 0660, 1);
        check_new_files(0700, 12345, 0, 0660, 1);
}
END_TEST

int main(void) {
        Suite *s = suite_create("newfile");
        TL_TCASE(s, "newfile", 60, test_planted_chunk_replaced, test_planted_journal_not_written,
                 test_planted_dict_tmp_not_written, test_maps_only_private_files,
                 test_truncated_under_mapping, test_truncated_under_decompression,
                 test_new_files_follow_the_directory);
        return tl_run_suite(s);
}
