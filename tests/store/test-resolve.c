/* test-resolve.c: a store opens only its directory's own files (resolve.h):
 * not through a symbolic link, not a file mounted over one of its names (what a
 * reader in an unprivileged user namespace can do, `unshare -Urm` then `mount
 * --bind`), with openat2 and with the fallback a kernel without it, or a
 * seccomp filter refusing it, gets (statx's mount id, or /proc's). Each case
 * that mounts runs in a mount namespace of its own (tl_private_mounts()) and
 * skips with a note where namespaces are not available.
 */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/un.h>
#include <unistd.h>

#include "check-run.h"
#include "store-kit.h"
#include "store/resolve.h"
#include "util.h"

#ifndef SYS_openat2
#define SYS_openat2 437
#endif

static const uint64_t lens[] = { 100, 2000, 30, 4096, 5 };
#define NREC (sizeof(lens) / sizeof(lens[0]))

/* A store of NREC records in a new directory d, closed. */
static void filled(tdir *d) {
        uint64_t ids[NREC];
        zr_store *s = store_filled(d, ZR_CODEC_RAW, 16, NULL, lens, NREC, ids);
        ck_assert_int_eq(zr_store_close(s, NULL), 0);
}

static int open_err(tdir *d, zr_error *err) {
        zr_store *s = NULL;
        int r = zr_store_open(d->fd, NULL, &s, err);
        if (r == 0)
                zr_store_close(s, NULL);
        return r;
}

/* Opens d again: a descriptor opened before a mount namespace was entered
 * looks names up in the old one, one opened after in the new one (as the
 * attacker's, who opens the store's directory inside its namespace). */
static void reopen_dir(tdir *d) {
        close(d->fd);
        d->fd = open(d->path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        ck_assert_int_ge(d->fd, 0);
}

/* A file of the same size beside d (the same file system: only the mount
 * tells them apart), bind-mounted over d's `name`. 0, or -1 (skip). */
static int mount_over(tdir *d, const char *name, char *other, size_t other_len) {
        struct stat st;
        char target[512];
        snprintf(target, sizeof(target), "%s/%s", d->path, name);
        ck_assert_int_eq(stat(target, &st), 0);
        snprintf(other, other_len, "%s.other", d->path);
        int fd = open(other, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        ck_assert_int_ge(fd, 0);
        ck_assert_int_eq(ftruncate(fd, st.st_size), 0);
        ck_assert_int_eq(pwrite(fd, "attacker", 8, 0), 8);
        close(fd);
        int r = tl_private_mounts();
        if (r < 0) {
                fprintf(stderr, "skipped: no mount namespace here: %s\n", strerror(-r));
                unlink(other);
                return -1;
        }
        ck_assert_msg(mount(other, target, NULL, MS_BIND, NULL) == 0, "bind mount: %s",
                      strerror(errno));
        reopen_dir(d);
        return 0;
}

/* Bind-mounts a file over 0.chunk (or meta.zr), with the resolution of this
 * process as it is (after `deny` made openat2 fail with that errno, if not
 * 0, and statx too with `deny_statx`): the store must not open. */
static void check_mount_refused(const char *name, int deny, int deny_statx) {
        tdir d;
        char other[600];
        zr_error err = {0};
        filled(&d);
        if (mount_over(&d, name, other, sizeof(other)) < 0)
                goto out;
        if (deny)
                ck_assert_int_eq(tl_deny_syscall(SYS_openat2, deny), 0);
        if (deny_statx)
                ck_assert_int_eq(tl_deny_syscall(SYS_statx, deny_statx), 0);
        int r = open_err(&d, &err);
        ck_assert_msg(r == -EXDEV, "a store with a file mounted over %s opened: %d %s", name,
                      r, err.message);
        ck_assert_ptr_nonnull(strstr(err.message, name));
        char target[700];
        snprintf(target, sizeof(target), "%s/%s", d.path, name);
        ck_assert_int_eq(umount(target), 0);
        reopen_dir(&d);
        zr_error_clear(&err);
        ck_assert_msg(open_err(&d, &err) == 0, "without the mount: %s", err.message);
        unlink(other);
out:
        tdir_remove(&d);
}

START_TEST(test_mount_over_chunk_openat2) {
        check_mount_refused("0.chunk", 0, 0);
}
END_TEST

START_TEST(test_mount_over_meta_openat2) {
        check_mount_refused("meta.zr", 0, 0);
}
END_TEST

START_TEST(test_mount_over_chunk_without_openat2) {
        check_mount_refused("0.chunk", ENOSYS, 0);
}
END_TEST

START_TEST(test_mount_over_chunk_openat2_filtered) {
        check_mount_refused("0.loc", EPERM, 0);
}
END_TEST

START_TEST(test_mount_over_chunk_without_statx) {
        check_mount_refused("0.chunk", ENOSYS, ENOSYS);
}
END_TEST

/* A symbolic link in place of a store file, to the real one: refused. */
START_TEST(test_symlink_refused) {
        tdir d;
        zr_error err = {0};
        filled(&d);
        ck_assert_int_eq(renameat(d.fd, "0.chunk", d.fd, "real.chunk"), 0);
        ck_assert_int_eq(symlinkat("real.chunk", d.fd, "0.chunk"), 0);
        int r = open_err(&d, &err);
        ck_assert_msg(r == -ELOOP, "opened through a symlink: %d %s", r, err.message);
        tdir_remove(&d);
}
END_TEST

/* Names are single entries; a directory mounted over one is refused too. */
START_TEST(test_entries_only) {
        tdir d;
        zr_error err = {0};
        tdir_make(&d);
        ck_assert_int_eq(mkdirat(d.fd, "sub", 0755), 0);
        ck_assert_int_eq(zr_resolve_open(d.fd, "sub/x", O_RDONLY, 0, &err), -EINVAL);
        ck_assert_int_eq(zr_resolve_open(d.fd, "..", O_RDONLY | O_DIRECTORY, 0, NULL), -EINVAL);
        ck_assert_int_eq(zr_resolve_open(d.fd, "", O_RDONLY, 0, NULL), -EINVAL);
        int fd = zr_resolve_open(d.fd, "sub", O_RDONLY | O_DIRECTORY, 0, NULL);
        ck_assert_int_ge(fd, 0);
        close(fd);
        if (tl_private_mounts() < 0) {
                fprintf(stderr, "skipped: no mount namespace here\n");
        } else {
                char sub[300];
                snprintf(sub, sizeof(sub), "%s/sub", d.path);
                ck_assert_int_eq(mount(d.path, sub, NULL, MS_BIND, NULL), 0);
                reopen_dir(&d);
                ck_assert_int_eq(zr_resolve_open(d.fd, "sub", O_RDONLY | O_DIRECTORY, 0, NULL),
                                 -EXDEV);
                ck_assert_int_eq(zr_resolve_open(d.fd, "sub", O_PATH, 0, NULL), -EXDEV);
                ck_assert_int_eq(umount(sub), 0);
        }
        tdir_remove(&d);
}
END_TEST

/* A store opened read-only through a read-only mount of its directory is
 * made writable through a writable descriptor of the same directory, never
 * through another store's; appends then land in the store's own files. */
START_TEST(test_make_writable) {
        tdir d, other;
        zr_error err = {0};
        zr_store *s = NULL;
        uint64_t more = 77;
        filled(&d);
        filled(&other);
        int rw = dup(d.fd); /* opened before the mount: writable */
        ck_assert_int_ge(rw, 0);
        if (tl_private_mounts() < 0) {
                fprintf(stderr, "skipped: no mount namespace here\n");
                goto out;
        }
        ck_assert_int_eq(mount(d.path, d.path, NULL, MS_BIND, NULL), 0);
        ck_assert_int_eq(mount(NULL, d.path, NULL, MS_BIND | MS_REMOUNT | MS_RDONLY, NULL), 0);
        reopen_dir(&d);
        ck_assert_int_eq(zr_store_open(d.fd, NULL, &s, &err), -EROFS);
        zr_store_options ro = { .read_only = 1 };
        zr_error_clear(&err);
        ck_assert_msg(zr_store_open(d.fd, &ro, &s, &err) == 0, "%s", err.message);
        ck_assert_int_eq(zr_store_read_only(s), 1);
        uint8_t *rec = make_batch(&more, 1, NREC);
        ck_assert_int_eq(zr_store_append(s, rec, &more, 1, NULL, NULL), -ZR_E_READONLY);
        ck_assert_int_eq(zr_store_make_writable(s, d.fd, NULL), -EROFS);
        ck_assert_int_eq(zr_store_make_writable(s, other.fd, NULL), -EACCES);
        ck_assert_int_eq(zr_store_read_only(s), 1);
        /* another reader shares the store: no writer while it does */
        int reader = openat(rw, "meta.zr", O_RDONLY | O_CLOEXEC);
        ck_assert_int_ge(reader, 0);
        ck_assert_int_eq(flock(reader, LOCK_SH | LOCK_NB), 0);
        ck_assert_int_eq(zr_store_make_writable(s, rw, NULL), -ZR_E_LOCKED);
        ck_assert_int_eq(zr_store_read_only(s), 1);
        ck_assert_int_eq(flock(reader, LOCK_UN), 0);
        zr_error_clear(&err);
        ck_assert_msg(zr_store_make_writable(s, rw, &err) == 0, "%s", err.message);
        ck_assert_int_eq(zr_store_read_only(s), 0);
        /* and now it holds the writer's lock: no other reader */
        ck_assert_int_eq(flock(reader, LOCK_SH | LOCK_NB), -1);
        ck_assert_int_eq(errno, EWOULDBLOCK);
        close(reader);
        uint64_t first = 0;
        ck_assert_int_eq(zr_store_append(s, rec, &more, 1, &first, NULL), 0);
        ck_assert_uint_eq(first, NREC);
        check_record(s, NREC, NREC, more);
        check_record(s, 1, 1, lens[1]);
        ck_assert_int_eq(zr_store_close(s, NULL), 0);
        ck_assert_int_eq(umount2(d.path, MNT_DETACH), 0);
        reopen_dir(&d);
        s = reopen(&d, NULL, NULL);
        ck_assert_uint_eq(zr_store_length(s), NREC + 1);
        check_record(s, NREC, NREC, more);
        ck_assert_int_eq(zr_store_close(s, NULL), 0);
        free(rec);
out:
        close(rw);
        tdir_remove(&other);
        tdir_remove(&d);
}
END_TEST

/* A FIFO, a socket or a device planted as a store file: the open never blocks
 * (a FIFO's open would wait for a writer) and the file is refused before
 * anything reads it. */
static void plant(tdir *d, const char *name, char kind) {
        ck_assert_int_eq(unlinkat(d->fd, name, 0), 0);
        if (kind == 'p') {
                ck_assert_int_eq(mkfifoat(d->fd, name, 0644), 0);
        } else if (kind == 's') {
                struct sockaddr_un a = { .sun_family = AF_UNIX };
                int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
                ck_assert_int_ge(fd, 0);
                char path[sizeof(d->path) + 32];
                snprintf(path, sizeof(path), "%s/%s", d->path, name);
                ck_assert_uint_lt(strlen(path), sizeof(a.sun_path));
                memcpy(a.sun_path, path, strlen(path) + 1);
                ck_assert_int_eq(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
                close(fd);
        } else {
                /* /dev/null's numbers */
                ck_assert_int_eq(mknodat(d->fd, name, S_IFCHR | 0644, makedev(1, 3)), 0);
        }
}

START_TEST(test_special_files_refused) {
        static const char *const names[] = { "meta.zr", "0.chunk", "0.loc", "delete.zr" };
        const char kinds[] = { 'p', 's', 'c' };
        for (size_t n = 0; n < sizeof(names) / sizeof(names[0]); n++) {
                for (size_t k = 0; k < sizeof(kinds); k++) {
                        tdir d;
                        zr_error err = {0};
                        int r;
                        if (kinds[k] == 'c' && geteuid() != 0)
                                continue; /* mknod of a device needs root */
                        filled(&d);
                        if (strcmp(names[n], "delete.zr") == 0) {
                                int fd = openat(d.fd, "delete.zr", O_CREAT | O_WRONLY | O_CLOEXEC,
                                                0644);
                                ck_assert_int_ge(fd, 0);
                                close(fd);
                        }
                        plant(&d, names[n], kinds[k]);
                        r = open_err(&d, &err);
                        ck_assert_msg(r < 0 && strstr(err.message, "not a regular file"),
                                      "%s planted as %c: %d %s", names[n], kinds[k], r,
                                      err.message);
                        zr_error_clear(&err);
                        r = zr_resolve_open(d.fd, names[n], O_RDONLY, 0, &err);
                        ck_assert_int_eq(r, -ZR_E_CORRUPT);
                        tdir_remove(&d);
                }
        }
}
END_TEST

int main(void) {
        Suite *s = suite_create("resolve");
        TL_TCASE(s, "resolve", 60, test_mount_over_chunk_openat2, test_mount_over_meta_openat2,
                 test_mount_over_chunk_without_openat2, test_mount_over_chunk_openat2_filtered,
                 test_mount_over_chunk_without_statx, test_symlink_refused, test_entries_only,
                 test_make_writable, test_special_files_refused);
        return tl_run_suite(s);
}
