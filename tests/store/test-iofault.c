/* test-iofault.c: the N-th write, fsync or allocation of a store operation
 * fails, for every N, and the store neither lies nor breaks.
 *
 * The test binary defines write(), pwrite(), fsync(), fdatasync(), ftruncate()
 * and fallocate() itself (with _FILE_OFFSET_BITS=64 the headers give pwrite,
 * ftruncate and fallocate their 64-bit symbol names, which the engine calls); the engine, linked
 * statically, binds to these before libc's. Each passes through to the system
 * call, counting the calls on files under the store's directory per class:
 * writes, syncs and allocations (ftruncate, fallocate); the calls on writer.zr,
 * a record of who holds the store written best effort, are left alone. Armed,
 * the N-th call of one class fails with EIO or ENOSPC instead, without
 * touching the file.
 *
 * For each operation (create, the first append, an append that rolls over,
 * sync, close, delete, compact, the open that redoes a delete journal,
 * installing a dictionary; per codec where it matters), each class and each of
 * the two errors, N runs 1, 2, ... until the operation completes without
 * reaching its N-th call. Each run starts from a copy of a prepared store and
 * checks:
 *   - a failing operation returns the injected error (or ZR_E_READONLY where a
 *     failure makes the store read-only) with a message; one that succeeds
 *     despite the fault is allowed only where the call is best effort (the hole
 *     punched at the end of a compaction);
 *   - after a failed fsync the store is read-only for good, zr_store_failed()
 *     gives the errno and a mutation's message says why;
 *   - the store then opens (a failed create may leave no store), every record
 *     is bit-exact for its id, the table is the state before or after the
 *     operation and the after state whenever it reported success (never
 *     success for data it lost), verify passes, a compaction re-run finishes
 *     without changing the table and the store takes a new append.
 * Prints, per operation, the calls of each class and the faults injected.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "recovery.h"
#include "store/journal.h"
#include "util.h"

#define N_MAX 10000 /* a bound on N that no operation here comes near */

/* --- the interposed calls ------------------------------------------------------ */

/* FC_SHORT counts writes as FC_WRITE does; its N-th write is cut short as a
 * file system cuts one when the disk fills up mid-write: the bytes up to the
 * last 4 KiB block boundary inside it are stored and their count returned, and
 * the next write fails. A write inside one block is never cut (the block is
 * allocated whole or not at all): it fails whole. So a 16-byte table entry
 * (16-aligned) never tears, as on a real file system. */
enum fault_class { FC_WRITE, FC_SHORT, FC_SYNC, FC_ALLOC, FC_COUNT };
static const char *const fc_names[FC_COUNT] = { "write", "short write", "sync", "alloc" };

static char watch_dir[PATH_MAX]; /* count calls on files under this directory */
static size_t watch_len;
static _Atomic int armed;        /* 0, or 1 + the class that fails */
static _Atomic long fault_at;    /* the call number (1-based) that fails */
static int fault_errno;
static _Atomic long calls[FC_COUNT];
static _Atomic long injected;

static int watched(int fd) {
        char link[64], path[PATH_MAX];
        if (watch_len == 0)
                return 0;
        snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
        ssize_t n = readlink(link, path, sizeof(path) - 1);
        if (n <= 0)
                return 0;
        path[n] = 0;
        /* writer.zr, who holds the store (store/holder.h), is written best
         * effort and is no part of its state: its calls are neither counted
         * nor failed */
        if (n > 10 && strcmp(path + n - 10, "/writer.zr") == 0)
                return 0;
        return strncmp(path, watch_dir, watch_len) == 0 &&
               (path[watch_len] == '/' || path[watch_len] == 0);
}

static _Atomic int short_pending; /* the write after a short one fails */

/* 1 if this call must fail (errno set), 0 to pass it through. */
static int fault_here(enum fault_class c, int fd) {
        if (!watched(fd))
                return 0;
        long k = atomic_fetch_add(&calls[c], 1) + 1;
        if (atomic_load(&armed) == 1 + (int)c && k == atomic_load(&fault_at)) {
                atomic_fetch_add(&injected, 1);
                errno = fault_errno;
                return 1;
        }
        return 0;
}

#define BLOCK 4096

/* For writes: 1 fail, 2 write *ret_n bytes (cut short), 0 pass through. off is
 * the file offset, -1 for write(). */
static int write_fault(int fd, size_t n, off_t off, size_t *ret_n) {
        if (!watched(fd))
                return 0;
        long k = atomic_fetch_add(&calls[FC_WRITE], 1) + 1;
        atomic_fetch_add(&calls[FC_SHORT], 1);
        int a = atomic_load(&armed);
        if (a == 1 + FC_SHORT && atomic_exchange(&short_pending, 0)) {
                errno = fault_errno;
                return 1;
        }
        if (k != atomic_load(&fault_at))
                return 0;
        if (a == 1 + FC_WRITE) {
                atomic_fetch_add(&injected, 1);
                errno = fault_errno;
                return 1;
        }
        if (a == 1 + FC_SHORT) {
                atomic_fetch_add(&injected, 1);
                off_t cut = off < 0 ? 0 : (off_t)((off + (off_t)n - 1) / BLOCK * BLOCK);
                if (off < 0 || cut <= off) {
                        errno = fault_errno;
                        return 1;
                }
                *ret_n = (size_t)(cut - off);
                atomic_store(&short_pending, 1);
                return 2;
        }
        return 0;
}

ssize_t write(int fd, const void *buf, size_t n) {
        if (write_fault(fd, n, -1, &n) == 1)
                return -1;
        return syscall(SYS_write, fd, buf, n);
}

ssize_t pwrite(int fd, const void *buf, size_t n, off_t off) {
        if (write_fault(fd, n, off, &n) == 1)
                return -1;
        return syscall(SYS_pwrite64, fd, buf, n, off);
}

int fsync(int fd) {
        if (fault_here(FC_SYNC, fd))
                return -1;
        return (int)syscall(SYS_fsync, fd);
}

int fdatasync(int fd) {
        if (fault_here(FC_SYNC, fd))
                return -1;
        return (int)syscall(SYS_fdatasync, fd);
}

int ftruncate(int fd, off_t len) {
        if (fault_here(FC_ALLOC, fd))
                return -1;
        return (int)syscall(SYS_ftruncate, fd, len);
}

int fallocate(int fd, int mode, off_t off, off_t len) {
        if (fault_here(FC_ALLOC, fd))
                return -1;
        return (int)syscall(SYS_fallocate, fd, mode, off, len);
}

static void watch(const char *dir) {
        if (!realpath(dir, watch_dir)) {
                fprintf(stderr, "FATAL: realpath %s: %s\n", dir, strerror(errno));
                exit(2);
        }
        watch_len = strlen(watch_dir);
        for (int c = 0; c < FC_COUNT; c++)
                atomic_store(&calls[c], 0);
}

static void arm(enum fault_class c, long n, int e) {
        fault_errno = e;
        atomic_store(&fault_at, n);
        atomic_store(&short_pending, 0);
        for (int k = 0; k < FC_COUNT; k++)
                atomic_store(&calls[k], 0);
        atomic_store(&armed, 1 + (int)c);
}

static void disarm(void) {
        atomic_store(&armed, 0);
}

/* --- operations --------------------------------------------------------------------- */

enum op {
        OP_CREATE,       /* create a store (with its dictionary for zstd_dict) */
        OP_APPEND_FIRST, /* the first append: creates 0.chunk and 0.loc */
        OP_APPEND,       /* an append that rolls over into new chunks */
        OP_SYNC,         /* sync after an append */
        OP_CLOSE,        /* close (its sync) after an append */
        OP_DELETE,       /* a delete batch */
        OP_COMPACT,      /* a compaction with a scratch move and freed chunks */
        OP_RECOVER,      /* the open that redoes a delete journal */
        OP_DICT,         /* install_dict into an empty zstd_dict store */
        OP_COUNT,
};

static const char *const op_names[OP_COUNT] = {
        "create", "append-first", "append", "sync", "close", "delete", "compact", "recover", "dict",
};

typedef struct prepared {
        char *dir; /* NULL for create: an empty directory */
        rc_ids before, after;
} prepared;

static zr_pool *pool;

/* Writes delete.zr for the batch rc_delete_idx as zr_store_delete() would, and
 * nothing else: the store as a kill right after the journal leaves it. */
static int write_journal(zr_store *s, int dfd, zr_error *err) {
        uint64_t len = zr_store_length(s), new_len = len - RC_DELETE_N, tidx[RC_DELETE_N];
        zr_loc tail[RC_DELETE_N];
        zr_journal_entry entries[RC_DELETE_N];
        zr_journal j = { .old_len = len, .new_len = new_len, .entries = entries };
        uint64_t sorted[RC_DELETE_N];

        for (size_t k = 0; k < RC_DELETE_N; k++)
                tidx[k] = new_len + k;
        int r = zr_store_locate(s, tidx, RC_DELETE_N, tail, err);
        if (r < 0)
                return r;
        memcpy(sorted, rc_delete_idx, sizeof(sorted));
        qsort(sorted, RC_DELETE_N, sizeof(*sorted), rc_cmp_desc);
        uint64_t cur = len;
        for (size_t k = 0; k < RC_DELETE_N; k++, cur--) {
                uint64_t hole = sorted[k], last = cur - 1;
                if (hole == last)
                        continue;
                zr_loc moved = tail[last - new_len];
                if (hole >= new_len)
                        tail[hole - new_len] = moved;
                else
                        entries[j.n++] = (zr_journal_entry){ hole, moved };
        }
        return zr_journal_write(dfd, &j, err);
}

static int prepare(enum op o, enum zr_codec c, prepared *p) {
        zr_store *s = NULL;
        zr_error err = {0};
        int r = 0;

        memset(p, 0, sizeof(*p));
        if (o == OP_CREATE)
                return 0;
        p->dir = rc_new_dir("zr-iofault-pre");
        int dfd = rc_open_dir(p->dir);
        r = rc_prepare(dfd, c, pool, c == ZR_CODEC_ZSTD_DICT && o != OP_DICT,
                       o != OP_APPEND_FIRST && o != OP_DICT, o == OP_COMPACT, &s, &p->before, &err);
        if (r >= 0 && o == OP_RECOVER)
                r = write_journal(s, dfd, &err);
        if (r < 0)
                tl_fail("prepare %s codec %d: %s", op_names[o], (int)c, err.message);
        zr_error_clear(&err);
        if (zr_store_close(s, &err) < 0 && r >= 0) {
                tl_fail("prepare %s codec %d: close: %s", op_names[o], (int)c, err.message);
                r = -1;
        }
        close(dfd);
        rc_ids_after(&p->before, o == OP_APPEND_FIRST || o == OP_APPEND ? RC_APPENDS
                                 : o == OP_RECOVER || o == OP_DELETE  ? RC_DELETES
                                                                      : RC_UNCHANGED,
                     &p->after);
        if (o == OP_SYNC || o == OP_CLOSE) {
                /* the append before the operation is acknowledged: in both states */
                rc_ids_append(&p->before, 1000, RC_APPEND_N);
                rc_ids_append(&p->after, 1000, RC_APPEND_N);
        }
        return r < 0 ? -1 : 0;
}

typedef struct counts {
        long calls[FC_COUNT]; /* per class in a run without a fault */
        long runs, faults, short_writes, errors, readonly, best_effort, recoveries, no_store;
} counts;

/* Runs operation o on dir with the fault (class fc, call n, errno e) armed.
 * Returns the operation's result; *sp is the store still open (or NULL). */
static int run_op(enum op o, enum zr_codec c, int dfd, enum fault_class fc, long n, int e,
                  zr_store **sp, zr_error *err) {
        zr_store_options opts = { .pool = pool, .chunk_log2 = RC_CHUNK_LOG2 };
        zr_store *s = NULL;
        int r;

        *sp = NULL;
        if (o == OP_CREATE) {
                int d = c == ZR_CODEC_ZSTD_DICT;
                arm(fc, n, e);
                r = zr_store_create(dfd, c, d ? rc_dict : NULL, d ? rc_dict_len : 0, &opts, &s, err);
                disarm();
                *sp = s;
                return r;
        }
        if (o == OP_RECOVER) {
                arm(fc, n, e);
                r = zr_store_open(dfd, &opts, &s, err);
                disarm();
                *sp = s;
                return r;
        }
        r = zr_store_open(dfd, &opts, &s, err);
        if (r < 0) {
                tl_fail("%s codec %d: open before the operation: %s", op_names[o], (int)c, err->message);
                return r;
        }
        if (o == OP_SYNC || o == OP_CLOSE) {
                r = rc_append(s, 1000, RC_APPEND_N, err);
                if (r < 0) {
                        tl_fail("%s: append before the operation: %s", op_names[o], err->message);
                        *sp = s;
                        return r;
                }
        }
        arm(fc, n, e);
        switch (o) {
        case OP_APPEND_FIRST:
        case OP_APPEND:
                r = rc_append(s, 1000, RC_APPEND_N, err);
                break;
        case OP_SYNC:
                r = zr_store_sync(s, err);
                break;
        case OP_CLOSE:
                r = zr_store_close(s, err);
                s = NULL;
                break;
        case OP_DELETE:
                r = zr_store_delete(s, rc_delete_idx, RC_DELETE_N, err);
                break;
        case OP_COMPACT:
                r = zr_store_compact(s, 0, NULL, err);
                break;
        case OP_DICT:
                r = zr_store_install_dict(s, rc_dict, rc_dict_len, err);
                break;
        default:
                r = -EINVAL;
        }
        disarm();
        *sp = s;
        return r;
}

/* After a run: the store reopens consistent. */
static void check_after(enum op o, const prepared *p, int dfd, int op_ok, const char *when,
                        counts *k) {
        zr_store_options opts = { .pool = pool };
        zr_store *s = NULL;
        zr_error err = {0};

        int r = zr_store_open(dfd, &opts, &s, &err);
        if (r < 0) {
                if (o == OP_CREATE && !op_ok && r == -ZR_E_NOT_STORE) {
                        k->no_store++; /* a failed create removes what it made */
                        return;
                }
                tl_fail("%s: reopen: %s (%s)", when, err.message, zr_error_code_name(r));
                return;
        }
        k->recoveries++;
        /* success is never reported for data the store does not hold */
        rc_check_recovered(s, &p->before, &p->after, op_ok ? RC_AFTER : RC_EITHER, when);
}

/* 1 if the failing call of this run may be ignored by the operation: the hole
 * punched over a compacted tail and the files cut to their data at close are
 * best effort. */
static int best_effort(enum op o, enum fault_class fc) {
        return (o == OP_COMPACT || o == OP_CLOSE) && fc == FC_ALLOC;
}

static void run_case(enum op o, enum zr_codec c, counts *k) {
        static const int errnos[] = { EIO, ENOSPC };
        prepared p;

        if (prepare(o, c, &p) < 0)
                return;
        for (int fc = 0; fc < FC_COUNT; fc++) {
                for (int ei = 0; ei < 2; ei++) {
                        int e = errnos[ei];
                        for (long n = 1; n <= N_MAX; n++) {
                                char *dir = rc_new_dir("zr-iofault-run");
                                if (p.dir)
                                        rc_copy_store(p.dir, dir);
                                int dfd = rc_open_dir(dir);
                                watch(dir);
                                zr_store *s = NULL;
                                zr_error err = {0};
                                atomic_store(&injected, 0);
                                int r = run_op(o, c, dfd, (enum fault_class)fc, n, e, &s, &err);
                                long hit = atomic_load(&injected);
                                long made = atomic_load(&calls[fc]);
                                char when[200];
                                snprintf(when, sizeof(when), "%s codec %d, %s call %ld fails with %s",
                                         op_names[o], (int)c, fc_names[fc], n, zr_error_code_name(e));
                                k->runs++;
                                if (!hit) {
                                        /* the operation made fewer calls: done with this class */
                                        if (r < 0)
                                                tl_fail("%s: failed without a fault: %s", when,
                                                        err.message);
                                        if (ei == 0)
                                                k->calls[fc] += made;
                                } else {
                                        k->faults++;
                                        k->short_writes += fc == FC_SHORT;
                                        if (r < 0) {
                                                k->errors++;
                                                if (err.code != -r || !err.message[0])
                                                        tl_fail("%s: returned %d with message \"%s\" "
                                                                "(code %d)", when, r, err.message,
                                                                err.code);
                                                if (r != -e && r != -ZR_E_READONLY)
                                                        tl_fail("%s: returned %s (%s), not the error "
                                                                "injected", when,
                                                                zr_error_code_name(r), err.message);
                                        } else if (best_effort(o, (enum fault_class)fc)) {
                                                k->best_effort++;
                                        } else {
                                                tl_fail("%s: reported success", when);
                                        }
                                        if (fc == FC_SYNC && r < 0 && s) {
                                                /* read-only for good, and it says why */
                                                zr_error e2 = {0};
                                                if (zr_store_failed(s) != e)
                                                        tl_fail("%s: zr_store_failed() is %d", when,
                                                                zr_store_failed(s));
                                                int r2 = rc_append(s, 3000, 1, &e2);
                                                if (r2 != -ZR_E_READONLY ||
                                                    !strstr(e2.message, "failed fsync") ||
                                                    !strstr(e2.message, strerror(e)))
                                                        tl_fail("%s: an append after the failed fsync: "
                                                                "%d \"%s\"", when, r2, e2.message);
                                                else
                                                        k->readonly++;
                                        }
                                }
                                if (s)
                                        zr_store_close(s, NULL);
                                check_after(o, &p, dfd, r >= 0, when, k);
                                watch_len = 0;
                                close(dfd);
                                tl_rmtree(dir);
                                free(dir);
                                if (!hit)
                                        break;
                        }
                }
        }
        printf("  %-12s codec %d: calls write %ld sync %ld alloc %ld; faults %ld (short writes "
               "%ld), errors reported %ld, read-only after fsync %ld\n",
               op_names[o], (int)c, k->calls[FC_WRITE], k->calls[FC_SYNC], k->calls[FC_ALLOC],
               k->faults, k->short_writes, k->errors, k->readonly);
        fflush(stdout);
        if (p.dir) {
                tl_rmtree(p.dir);
                free(p.dir);
        }
}

int main(void) {
        counts total = {0};

        if (zr_pool_new(2, &pool) < 0)
                tl_die("pool");
        rc_make_dict();
        for (int o = 0; o < OP_COUNT; o++)
                for (int c = 0; c <= 2; c++) {
                        if (o == OP_DICT && c != ZR_CODEC_ZSTD_DICT)
                                continue;
                        /* delete, recover and compact do not depend on the codec
                         * beyond what append covers: raw and zstd */
                        if ((o == OP_DELETE || o == OP_RECOVER || o == OP_COMPACT || o == OP_SYNC ||
                             o == OP_CLOSE) && c == ZR_CODEC_ZSTD_DICT)
                                continue;
                        counts k = {0};
                        run_case((enum op)o, (enum zr_codec)c, &k);
                        for (int fc = 0; fc < FC_COUNT; fc++)
                                total.calls[fc] += k.calls[fc];
                        total.runs += k.runs;
                        total.faults += k.faults;
                        total.short_writes += k.short_writes;
                        total.errors += k.errors;
                        total.readonly += k.readonly;
                        total.best_effort += k.best_effort;
                        total.recoveries += k.recoveries;
                        total.no_store += k.no_store;
                }
        printf("iofault: %ld runs; %ld faults injected (EIO and ENOSPC; %ld of them a short write "
               "then a failure) into %ld writes, %ld syncs, %ld allocations; %ld errors reported, %ld ignored best-effort calls, %ld stores "
               "read-only after a failed fsync; %ld reopened and checked, %ld failed creates left "
               "no store; %u failures\n",
               total.runs, total.faults, total.short_writes, total.calls[FC_WRITE], total.calls[FC_SYNC],
               total.calls[FC_ALLOC], total.errors, total.best_effort, total.readonly,
               total.recoveries, total.no_store, tl_failures);
        zr_pool_free(pool);
        free(rc_dict);
        return tl_failures ? 1 : 0;
}
