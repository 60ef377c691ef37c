/* store.c: a store's life: create, open (with recovery of an interrupted
 * delete), close, sync, the header, the dictionary.
 *
 * It assumes the directory is the store's alone (the flock on meta.zr). The
 * operations live beside it: append.c, gather.c, delete.c, compact.c and
 * inspect.c. It does not know about dtypes, shapes or sockets.
 */
#include "store/store-private.h"
#include "store/holder.h"
#include "store/killpoint.h"
#include "store/newfile.h"
#include "store/resolve.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

/* The first failing shard's error, forwarded to err. */
int zr_store_shards_result(shard_status *st, size_t n, zr_error *err) {
        for (size_t i = 0; i < n; i++)
                if (st[i].r < 0)
                        return zr_error_set(err, -st[i].r, "%s", st[i].err.message);
        return 0;
}

int zr_store_check_writable(const zr_store *s, zr_error *err) {
        int f = atomic_load(&s->failed);
        if (f)
                return zr_error_set(err, ZR_E_READONLY,
                                    "store is read-only after a failed fsync: %s",
                                    strerror(f));
        if (s->read_only)
                return zr_error_set(err, ZR_E_READONLY, "store was opened read-only");
        return 0;
}

int zr_store_write_header(zr_store *s, uint64_t length, uint64_t tail, zr_error *err) {
        zr_header h = {
                .codec = (uint8_t)s->codec,
                .tail_chunk = tail_chunk(tail),
                .tail_offset = tail_offset(tail),
                .length = length,
                .chunk_log2 = (uint8_t)s->chunk_log2,
                .flags = s->flags,
        };
        uint8_t buf[ZR_HEADER_SIZE];
        zr_header_encode(&h, buf);
        ZR_KILLPOINT(ZR_KP_HEADER_BEFORE);
        int r = zr_pwrite_all(s->meta_fd, buf, sizeof(buf), 0);
        if (r < 0)
                return zr_error_errno(err, -r, ZR_META_NAME ": write");
        ZR_KILLPOINT(ZR_KP_HEADER_AFTER);
        return 0;
}

/* Sync in the order of the durability story. Called with append_lock held or
 * with exclusive access. A failure is final. */
int zr_store_sync_locked(zr_store *s, zr_error *err) {
        int r;

        if (s->read_only)
                return 0;
        r = zr_store_check_writable(s, err);
        if (r < 0)
                return r;
        r = zr_files_sync(s->chunks, err);
        if (r >= 0) {
                ZR_KILLPOINT(ZR_KP_SYNC_CHUNKS);
                r = zr_files_sync(s->locs, err);
        }
        if (r >= 0) {
                ZR_KILLPOINT(ZR_KP_SYNC_LOCS);
                if (fdatasync(s->meta_fd) < 0)
                        r = zr_error_errno(err, errno, ZR_META_NAME ": fdatasync");
                else
                        ZR_KILLPOINT(ZR_KP_SYNC_META);
        }
        if (r >= 0 && s->dir_dirty) {
                if (fsync(s->dirfd) < 0)
                        r = zr_error_errno(err, errno, "store directory: fsync");
                else
                        s->dir_dirty = 0;
        }
        if (r < 0)
                atomic_store(&s->failed, -r);
        return r;
}

static zr_store *store_free(zr_store *s) {
        if (!s)
                return NULL;
        if (s->recorded)
                zr_holder_forget(s->dirfd); /* while the lock is still held */
        zr_files_free(s->chunks);
        zr_files_free(s->locs);
        zr_coder_free(s->zc);
        if (s->meta_fd >= 0)
                close(s->meta_fd);
        if (s->dirfd >= 0)
                close(s->dirfd);
        pthread_mutex_destroy(&s->append_lock);
        free(s);
        return NULL;
}

static int store_alloc(int dirfd, enum zr_codec codec, unsigned chunk_log2,
                       const zr_store_options *opts, zr_store **ret, zr_error *err) {
        zr_store *s = calloc(1, sizeof(*s));
        int r;

        if (!s)
                return zr_error_set(err, ENOMEM, "store: out of memory");
        s->meta_fd = -1;
        pthread_mutex_init(&s->append_lock, NULL);
        s->dirfd = fcntl(dirfd, F_DUPFD_CLOEXEC, 3);
        if (s->dirfd < 0) {
                r = zr_error_errno(err, errno, "store directory: dup");
                goto fail;
        }
        s->codec = codec;
        s->chunk_log2 = chunk_log2;
        s->chunk_cap = (uint64_t)1 << chunk_log2;
        s->pool = opts ? opts->pool : NULL;
        s->read_only = opts ? !!opts->read_only : 0;
        s->map = opts ? !opts->no_mmap : 1;
        if (zr_coder_new(codec, &s->zc) < 0 ||
            zr_files_new(s->dirfd, ".chunk", s->chunk_cap, s->read_only,
                         (s->map ? ZR_FILES_MAP : 0) | ZR_FILES_RANDOM, &s->chunks) < 0 ||
            zr_files_new(s->dirfd, ".loc", ZR_LOC_SEGMENT_ENTRIES * ZR_LOC_SIZE, s->read_only,
                         s->map ? ZR_FILES_MAP : 0, &s->locs) < 0) {
                r = zr_error_set(err, ENOMEM, "store: out of memory");
                goto fail;
        }
        *ret = s;
        return 0;
fail:
        store_free(s);
        return r;
}

/* ZR_E_LOCKED for a lock on meta.zr that `fd` could not take (`exclusive`:
 * a writer's), naming who holds it (holder.h) and what to do. */
static int store_locked(zr_store *s, int fd, bool exclusive, zr_error *err) {
        char who[ZR_ERROR_MESSAGE_MAX];
        /* making a read-only store writable, its own shared lock is no news */
        zr_holder_describe(s->dirfd, fd, exclusive, s->read_only && exclusive, who, sizeof(who));
        if (exclusive)
                return zr_error_set(err, ZR_E_LOCKED,
                                    ZR_META_NAME ": the store is %s: a writer needs it to "
                                    "itself; close it there (its datasets and loaders) and "
                                    "write again", who);
        return zr_error_set(err, ZR_E_LOCKED,
                            ZR_META_NAME ": the store is %s: it opens again for reading once "
                            "its writer has closed it", who);
}

/* Exclusive for a writable open, shared for a read-only one: readers of one
 * store (several daemons of one machine, or of several over a shared file
 * system where flock() is a byte-range lock every machine sees, and one that
 * needs write access to be exclusive) share it, and exclude every writer. A
 * writer leaves its record (holder.h). */
static int store_lock(zr_store *s, zr_error *err) {
        if (flock(s->meta_fd, (s->read_only ? LOCK_SH : LOCK_EX) | LOCK_NB) < 0) {
                if (errno == EWOULDBLOCK)
                        return store_locked(s, s->meta_fd, !s->read_only, err);
                return zr_error_errno(err, errno, ZR_META_NAME ": flock");
        }
        if (!s->read_only) {
                zr_holder_record(s->dirfd);
                s->recorded = 1;
        }
        return 0;
}

/* Writes dict.zr durably: a temporary file renamed over the name. */
static int store_write_dict(zr_store *s, const void *dict, size_t len, zr_error *err) {
        static const char tmp[] = ZR_DICT_NAME ".tmp";
        int fd, r;

        fd = zr_newfile_create(s->dirfd, tmp, O_RDWR, err);
        if (fd < 0)
                return fd;
        r = zr_pwrite_all(fd, dict, len, 0);
        if (r < 0)
                r = zr_error_errno(err, -r, "%s: write", tmp);
        else if (fdatasync(fd) < 0)
                r = zr_error_errno(err, errno, "%s: fdatasync", tmp);
        close(fd);
        if (r >= 0)
                ZR_KILLPOINT(ZR_KP_DICT_TMP_DURABLE);
        if (r >= 0 && renameat(s->dirfd, tmp, s->dirfd, ZR_DICT_NAME) < 0)
                r = zr_error_errno(err, errno, ZR_DICT_NAME ": rename");
        if (r < 0) {
                unlinkat(s->dirfd, tmp, 0);
                return r;
        }
        if (fsync(s->dirfd) < 0)
                return zr_error_errno(err, errno, "store directory: fsync");
        ZR_KILLPOINT(ZR_KP_DICT_RENAMED);
        return 0;
}

/* meta.zr appears whole or not at all: the header is written and synced in an
 * unnamed file (O_TMPFILE) that is then linked as meta.zr (linkat fails if one
 * exists), so a create killed at any instant leaves either no meta.zr (the
 * directory is not a store; create again) or an empty, valid store. A file
 * system without O_TMPFILE, or a system without /proc to link it by, gets the
 * older order: meta.zr created with O_EXCL and written in place, where a kill
 * between the two leaves a meta.zr without a magic. Returns the descriptor
 * (*ret_tmp 1 while it is still unnamed) or a negative code. */
static int store_meta_excl(zr_store *s, zr_error *err) {
        zr_error e = {0};
        int fd = zr_resolve_open(s->dirfd, ZR_META_NAME, O_RDWR | O_CREAT | O_EXCL,
                                 (mode_t)zr_newfile_mode(s->dirfd), &e);
        if (fd == -EEXIST)
                return zr_error_set(err, ZR_E_EXISTS, ZR_META_NAME ": a store already exists here");
        if (fd < 0)
                return zr_error_set(err, -fd, "%s", e.message);
        int r = zr_newfile_own(fd, s->dirfd, err);
        if (r < 0) {
                close(fd);
                unlinkat(s->dirfd, ZR_META_NAME, 0);
                return r;
        }
        return fd;
}

static int store_meta_new(zr_store *s, int *ret_tmp, zr_error *err) {
        int fd = openat(s->dirfd, ".", O_TMPFILE | O_RDWR | O_CLOEXEC,
                        (mode_t)zr_newfile_mode(s->dirfd));
        *ret_tmp = fd >= 0;
        if (fd < 0)
                return store_meta_excl(s, err);
        int r = zr_newfile_own(fd, s->dirfd, err); /* before it has a name */
        if (r < 0) {
                close(fd);
                return r;
        }
        return fd;
}

/* Names the unnamed meta.zr: 1 if linked, 0 if it cannot be (no /proc), or a
 * negative code (ZR_E_EXISTS if a meta.zr appeared meanwhile). */
static int store_meta_link(zr_store *s, zr_error *err) {
        char path[64];
        snprintf(path, sizeof(path), "/proc/self/fd/%d", s->meta_fd);
        if (linkat(AT_FDCWD, path, s->dirfd, ZR_META_NAME, AT_SYMLINK_FOLLOW) == 0)
                return 1;
        if (errno == EEXIST)
                return zr_error_set(err, ZR_E_EXISTS, ZR_META_NAME ": a store already exists here");
        if (errno == ENOENT || errno == EPERM || errno == EACCES)
                return 0;
        return zr_error_errno(err, errno, ZR_META_NAME ": link");
}

int zr_store_create(int dirfd, enum zr_codec codec, const void *dict, size_t dict_len,
                    const zr_store_options *opts, zr_store **ret, zr_error *err) {
        zr_store *s = NULL;
        unsigned log2 = opts && opts->chunk_log2 ? opts->chunk_log2 : ZR_CHUNK_LOG2_DEFAULT;
        int created = 0, tmp = 0, lockfd = -1, r;

        if ((unsigned)codec > ZR_CODEC_ZSTD_DICT)
                return zr_error_set(err, ZR_E_BAD_CODEC, "unknown codec tag %d", (int)codec);
        if (log2 < ZR_CHUNK_LOG2_MIN || log2 > ZR_CHUNK_LOG2_DEFAULT)
                return zr_error_set(err, EINVAL, "chunk size 2^%u out of range 2^%d..2^%d",
                                    log2, ZR_CHUNK_LOG2_MIN, ZR_CHUNK_LOG2_DEFAULT);
        r = store_alloc(dirfd, codec, log2, opts, &s, err);
        if (r < 0)
                return r;
        s->read_only = 0;
        if (codec == ZR_CODEC_ZSTD_DICT && dict && dict_len > 0) {
                r = zr_coder_set_dict(s->zc, dict, dict_len, err);
                if (r < 0)
                        goto fail;
        }
        /* One creator at a time (a lock on a description of the directory of
         * our own), and never over an existing store: both before dict.zr is
         * touched. */
        lockfd = openat(s->dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (lockfd < 0) {
                r = zr_error_errno(err, errno, "store directory: open");
                goto fail;
        }
        if (flock(lockfd, LOCK_EX | LOCK_NB) < 0) {
                r = errno == EWOULDBLOCK
                            ? zr_error_set(err, ZR_E_LOCKED, "store directory: another process "
                                           "is creating a store here")
                            : zr_error_errno(err, errno, "store directory: flock");
                goto fail;
        }
        if (faccessat(s->dirfd, ZR_META_NAME, F_OK, AT_SYMLINK_NOFOLLOW) == 0) {
                r = zr_error_set(err, ZR_E_EXISTS, ZR_META_NAME ": a store already exists here");
                goto fail;
        }
        s->meta_fd = store_meta_new(s, &tmp, err);
        if (s->meta_fd < 0) {
                r = s->meta_fd;
                goto fail;
        }
        created = !tmp;
        r = store_lock(s, err);
        if (r < 0)
                goto fail;
        ZR_KILLPOINT(ZR_KP_CREATE_META_OPEN);
        if (codec == ZR_CODEC_ZSTD_DICT && dict && dict_len > 0) {
                r = store_write_dict(s, dict, dict_len, err);
                if (r < 0)
                        goto fail;
                s->flags |= ZR_HEADER_FLAG_DICT;
        }
        r = zr_store_write_header(s, 0, 0, err);
        if (r < 0)
                goto fail;
        if (fdatasync(s->meta_fd) < 0) {
                r = zr_error_errno(err, errno, ZR_META_NAME ": fdatasync");
                goto fail;
        }
        if (tmp) {
                r = store_meta_link(s, err);
                if (r < 0)
                        goto fail;
                if (r == 0) {
                        /* no /proc: the older order, in place */
                        close(s->meta_fd);
                        s->meta_fd = store_meta_excl(s, err);
                        if (s->meta_fd < 0) {
                                r = s->meta_fd;
                                goto fail;
                        }
                        created = 1;
                        r = store_lock(s, err);
                        if (r >= 0)
                                r = zr_store_write_header(s, 0, 0, err);
                        if (r >= 0 && fdatasync(s->meta_fd) < 0)
                                r = zr_error_errno(err, errno, ZR_META_NAME ": fdatasync");
                        if (r < 0)
                                goto fail;
                }
                created = 1;
        }
        ZR_KILLPOINT(ZR_KP_CREATE_META_NAMED);
        if (fsync(s->dirfd) < 0) {
                r = zr_error_errno(err, errno, "store directory: fsync");
                goto fail;
        }
        close(lockfd);
        *ret = s;
        return 0;
fail:
        if (created) {
                if (s->flags & ZR_HEADER_FLAG_DICT)
                        unlinkat(s->dirfd, ZR_DICT_NAME, 0);
                unlinkat(s->dirfd, ZR_META_NAME, 0);
        }
        if (lockfd >= 0)
                close(lockfd);
        store_free(s);
        return r;
}

static int store_load_dict(zr_store *s, uint64_t length, zr_error *err) {
        struct stat st;
        void *buf = NULL;
        int fd, r;

        zr_error oerr = {0};
        fd = zr_resolve_open(s->dirfd, ZR_DICT_NAME, O_RDONLY, 0, &oerr);
        if (fd < 0) {
                if (fd != -ENOENT)
                        return zr_error_set(err, -fd, "%s", oerr.message);
                if ((s->flags & ZR_HEADER_FLAG_DICT) || length > 0)
                        return zr_error_set(err, ZR_E_NO_DICT,
                                            ZR_DICT_NAME ": missing; the zstd_dict store holds "
                                            "%" PRIu64 " records", length);
                return 0; /* an empty store waiting for zr_store_install_dict() */
        }
        if (fstat(fd, &st) < 0) {
                r = zr_error_errno(err, errno, ZR_DICT_NAME ": stat");
                goto out;
        }
        if (st.st_size <= 0 || (uint64_t)st.st_size > ZR_RECORD_MAX) {
                r = zr_error_set(err, ZR_E_NO_DICT, ZR_DICT_NAME ": unusable size %" PRIu64,
                                 (uint64_t)st.st_size);
                goto out;
        }
        buf = malloc((size_t)st.st_size);
        if (!buf) {
                r = zr_error_set(err, ENOMEM, ZR_DICT_NAME ": out of memory");
                goto out;
        }
        int64_t n = zr_pread_all(fd, buf, (uint64_t)st.st_size, 0);
        if (n != st.st_size) {
                r = n < 0 ? zr_error_errno(err, (int)-n, ZR_DICT_NAME ": read")
                          : zr_error_set(err, ZR_E_NO_DICT, ZR_DICT_NAME ": short read");
                goto out;
        }
        zr_error e = {0};
        r = zr_coder_set_dict(s->zc, buf, (size_t)st.st_size, &e);
        if (r < 0)
                r = zr_error_set(err, ZR_E_NO_DICT, ZR_DICT_NAME ": %s", e.message);
out:
        free(buf);
        close(fd);
        return r;
}

/* A file just created must exist durably before a header can reference it:
 * fdatasync it (its size) now; the caller fsyncs the directory. A failure is
 * final, as for any fsync. */
int zr_store_open_file(zr_store *s, zr_files *t, uint32_t id, int create, uint64_t min_size,
                       const char *what, int *ret_created, zr_error *err) {
        int created = 0, r = zr_files_open(t, id, create, min_size, &created, err);

        *ret_created = 0;
        if (r < 0 || !created)
                return r;
        *ret_created = 1;
        if (fdatasync(zr_files_fd(t, id)) < 0) {
                r = zr_error_errno(err, errno, "%" PRIu32 "%s: fdatasync", id, what);
                atomic_store(&s->failed, -r);
        }
        return r;
}

int zr_phys_cmp(const void *a, const void *b) {
        const zr_phys *x = a, *y = b;
        if (x->key != y->key)
                return x->key < y->key ? -1 : 1;
        return x->idx < y->idx ? -1 : x->idx > y->idx;
}

int zr_store_dir_durable(zr_store *s, zr_error *err) {
        if (fsync(s->dirfd) < 0) {
                int r = zr_error_errno(err, errno, "store directory: fsync");
                atomic_store(&s->failed, -r);
                return r;
        }
        return 0;
}

/* Opens the .loc segments that hold entries [0, length); with `create`, new
 * ones are created durably and *ret_created counts them. */
int zr_store_open_locs(zr_store *s, uint64_t length, int create, int *ret_created,
                       zr_error *err) {
        if (length == 0)
                return 0;
        uint64_t last = (length - 1) >> ZR_LOC_SEGMENT_LOG2;
        for (uint64_t seg = 0; seg <= last; seg++) {
                uint64_t entries = seg < last ? ZR_LOC_SEGMENT_ENTRIES
                                              : length - (seg << ZR_LOC_SEGMENT_LOG2);
                int created;
                int r = zr_store_open_file(s, s->locs, (uint32_t)seg, create,
                                           entries * ZR_LOC_SIZE, ".loc", &created, err);
                if (r < 0)
                        return r;
                if (ret_created)
                        *ret_created += created;
        }
        return 0;
}

/* Writes one table entry. */
int zr_store_put_loc(zr_store *s, uint64_t idx, const zr_loc *loc, zr_error *err) {
        uint8_t buf[ZR_LOC_SIZE];
        uint32_t seg = (uint32_t)(idx >> ZR_LOC_SEGMENT_LOG2);
        int fd = zr_files_fd(s->locs, seg);
        if (fd < 0)
                return zr_error_set(err, ZR_E_CORRUPT, "%" PRIu32 ".loc: not open", seg);
        zr_loc_encode(loc, buf);
        int r = zr_pwrite_all(fd, buf, sizeof(buf),
                              (idx & (ZR_LOC_SEGMENT_ENTRIES - 1)) * ZR_LOC_SIZE);
        if (r < 0)
                return zr_error_errno(err, -r, "%" PRIu32 ".loc: write", seg);
        return 0;
}

/* Applies a complete delete journal: its table writes, then the new length,
 * each made durable, then removes it. */
int zr_store_apply_journal(zr_store *s, const zr_journal *j, zr_error *err) {
        int r;

        for (size_t i = 0; i < j->n; i++) {
                r = zr_store_put_loc(s, j->entries[i].index, &j->entries[i].loc, err);
                if (r < 0)
                        return r;
                ZR_KILLPOINT(ZR_KP_DELETE_SWAP);
        }
        r = zr_files_sync(s->locs, err);
        if (r < 0)
                return r;
        ZR_KILLPOINT(ZR_KP_DELETE_TABLE_SYNCED);
        r = zr_store_write_header(s, j->new_len, atomic_load(&s->tail), err);
        if (r < 0)
                return r;
        if (fdatasync(s->meta_fd) < 0)
                return zr_error_errno(err, errno, ZR_META_NAME ": fdatasync");
        ZR_KILLPOINT(ZR_KP_DELETE_HEADER_SYNCED);
        atomic_store_explicit(&s->length, j->new_len, memory_order_release);
        r = zr_journal_remove(s->dirfd, err);
        if (r < 0)
                return r;
        ZR_KILLPOINT(ZR_KP_JOURNAL_REMOVED);
        s->dir_dirty = 1;
        return 0;
}

/* docs/FORMAT.md, "Apparent size": while a store is writable, the files its
 * appends write are at full size (their size durable), as created, so that a
 * power loss never leaves a header naming bytes past a file's end and the
 * mappings cover what is appended; a close cuts them to the data again
 * (store_trim()). The tail chunk and every .loc segment open (those of the
 * length: earlier ones are full anyway). A failure turns the store read-only
 * for good, as a failed fsync does. */
static int store_extend(zr_store *s, zr_error *err) {
        uint32_t tc = tail_chunk(atomic_load(&s->tail)), nl = zr_files_count(s->locs);
        int r = 0;

        if (zr_files_fd(s->chunks, tc) >= 0 && zr_files_size(s->chunks, tc) < s->chunk_cap) {
                r = zr_files_resize(s->chunks, tc, s->chunk_cap, err);
                if (r == 0)
                        ZR_KILLPOINT(ZR_KP_FILE_EXTENDED);
        }
        for (uint32_t g = 0; g < nl && r == 0; g++)
                if (zr_files_size(s->locs, g) < ZR_LOC_SEGMENT_ENTRIES * ZR_LOC_SIZE) {
                        r = zr_files_resize(s->locs, g, ZR_LOC_SEGMENT_ENTRIES * ZR_LOC_SIZE,
                                            err);
                        if (r == 0)
                                ZR_KILLPOINT(ZR_KP_FILE_EXTENDED);
                }
        if (r < 0)
                atomic_store(&s->failed, -r);
        return r;
}

/* A closing store's files cut to its data (docs/FORMAT.md, "Apparent size"):
 * the tail chunk at the frontier, chunks past it (an append that failed left
 * them) emptied, the .loc segments at the length. Best effort, after the
 * closing sync: either size of each file is a valid store, so a crash or a
 * failure in between costs only the apparent size. Not synced. */
static void store_trim(zr_store *s) {
        uint64_t length = atomic_load(&s->length), tail = atomic_load(&s->tail);
        uint32_t nc = zr_files_count(s->chunks), nl = zr_files_count(s->locs);

        for (uint32_t c = tail_chunk(tail); c < nc; c++) {
                uint64_t keep = c == tail_chunk(tail) ? tail_offset(tail) : 0;
                if (zr_files_fd(s->chunks, c) >= 0 && zr_files_size(s->chunks, c) != keep &&
                    zr_files_resize(s->chunks, c, keep, NULL) == 0)
                        ZR_KILLPOINT(ZR_KP_FILE_TRIMMED);
        }
        for (uint32_t g = 0; g < nl; g++) {
                uint64_t first = (uint64_t)g << ZR_LOC_SEGMENT_LOG2;
                uint64_t keep = length > first ? (length - first) * ZR_LOC_SIZE : 0;
                if (length >= first + ZR_LOC_SEGMENT_ENTRIES || zr_files_size(s->locs, g) == keep)
                        continue;
                if (zr_files_resize(s->locs, g, keep, NULL) == 0)
                        ZR_KILLPOINT(ZR_KP_FILE_TRIMMED);
        }
}

static int store_recover(zr_store *s, zr_error *err) {
        zr_journal j = {0};
        uint64_t length = atomic_load(&s->length);
        int r;

        r = zr_journal_read(s->dirfd, &j, err);
        if (r <= 0) {
                if (r == 0 && !s->read_only && faccessat(s->dirfd, ZR_JOURNAL_NAME, F_OK,
                                                          AT_SYMLINK_NOFOLLOW) == 0) {
                        r = zr_journal_remove(s->dirfd, err); /* torn: the table is untouched */
                        s->dir_dirty = 1;
                }
                return r;
        }
        if (j.old_len != length && j.new_len != length) {
                /* The batch committed and the store moved on; the unlink was lost. */
                r = s->read_only ? 0 : zr_journal_remove(s->dirfd, err);
                goto out;
        }
        if (s->read_only) {
                r = zr_error_set(err, ZR_E_READONLY,
                                 ZR_JOURNAL_NAME ": an interrupted delete must be redone by "
                                 "a writable open");
                goto out;
        }
        for (size_t i = 0; i < j.n; i++)
                if (j.entries[i].index >= j.new_len || j.new_len > j.old_len) {
                        r = zr_error_set(err, ZR_E_CORRUPT,
                                         ZR_JOURNAL_NAME ": entry for index %" PRIu64
                                         " outside the new length %" PRIu64,
                                         j.entries[i].index, j.new_len);
                        goto out;
                }
        r = zr_store_open_locs(s, j.old_len > length ? j.old_len : length, 0, NULL, err);
        if (r >= 0)
                r = zr_store_apply_journal(s, &j, err);
out:
        zr_journal_done(&j);
        return r;
}

int zr_store_open(int dirfd, const zr_store_options *opts, zr_store **ret, zr_error *err) {
        zr_store *s = NULL;
        zr_header h;
        uint8_t buf[ZR_HEADER_SIZE + 1];
        int r;

        r = store_alloc(dirfd, ZR_CODEC_RAW, ZR_CHUNK_LOG2_DEFAULT, opts, &s, err);
        if (r < 0)
                return r;
        zr_error e = {0};
        s->meta_fd = zr_resolve_open(s->dirfd, ZR_META_NAME, s->read_only ? O_RDONLY : O_RDWR,
                                     0, &e);
        if (s->meta_fd < 0) {
                if (s->meta_fd == -ENOENT)
                        r = zr_error_set(err, ZR_E_NOT_STORE,
                                         "not a store: the directory holds no " ZR_META_NAME);
                else
                        r = zr_error_set(err, -s->meta_fd, "%s", e.message);
                goto fail;
        }
        r = store_lock(s, err);
        if (r < 0)
                goto fail;
        int64_t n = zr_pread_all(s->meta_fd, buf, sizeof(buf), 0);
        if (n < 0) {
                r = zr_error_errno(err, (int)-n, ZR_META_NAME ": read");
                goto fail;
        }
        {
                struct stat st;
                if (fstat(s->meta_fd, &st) == 0 &&
                    zr_header_check_legacy(buf, (size_t)n, (uint64_t)st.st_size, err) < 0) {
                        r = -ZR_E_BAD_VERSION;
                        goto fail;
                }
        }
        r = zr_header_decode(buf, (size_t)n, &h, err);
        if (r < 0)
                goto fail;

        /* Re-create the file tables with what the header says. */
        s->codec = h.codec;
        s->chunk_log2 = zr_header_chunk_log2(&h);
        s->chunk_cap = (uint64_t)1 << s->chunk_log2;
        s->flags = h.flags;
        zr_files_free(s->chunks);
        zr_coder_free(s->zc);
        s->chunks = NULL;
        s->zc = NULL;
        if (zr_coder_new(s->codec, &s->zc) < 0 ||
            zr_files_new(s->dirfd, ".chunk", s->chunk_cap, s->read_only,
                         (s->map ? ZR_FILES_MAP : 0) | ZR_FILES_RANDOM, &s->chunks) < 0) {
                r = zr_error_set(err, ENOMEM, "store: out of memory");
                goto fail;
        }
        uint64_t tail = tail_make(h.tail_chunk, h.tail_offset);
        if (h.tail_offset == s->chunk_cap) /* a full chunk written by another build */
                tail = tail_make((uint64_t)h.tail_chunk + 1, 0);
        atomic_store(&s->tail, tail);
        atomic_store(&s->length, h.length);

        if (s->codec == ZR_CODEC_ZSTD_DICT) {
                r = store_load_dict(s, h.length, err);
                if (r < 0)
                        goto fail;
        }
        r = zr_store_open_locs(s, h.length, 0, NULL, err);
        if (r < 0)
                goto fail;
        /* A chunk before the tail may be shorter than its capacity: one cut at
         * the frontier by a close, that loaderx 1.5.7 then appended to and
         * rolled over (docs/FORMAT.md, "Apparent size"). Its records are
         * checked against its size as they are read. */
        if (h.tail_chunk > 0 || h.tail_offset > 0 || h.length > 0)
                for (uint64_t c = 0; c <= tail_chunk(tail); c++) {
                        r = zr_files_open(s->chunks, (uint32_t)c, 0,
                                          c < tail_chunk(tail) ? 0 : tail_offset(tail), NULL,
                                          err);
                        if (r < 0)
                                goto fail;
                }
        r = store_recover(s, err);
        if (r >= 0 && !s->read_only)
                r = store_extend(s, err);
        if (r < 0)
                goto fail;
        *ret = s;
        return 0;
fail:
        store_free(s);
        return r;
}

int zr_store_close(zr_store *s, zr_error *err) {
        int r = 0;
        if (!s)
                return 0;
        r = zr_store_sync_locked(s, err); /* ZR_E_READONLY if the store had failed */
        if (r == 0 && !s->read_only)
                store_trim(s);
        store_free(s);
        return r;
}

uint64_t zr_store_length(const zr_store *s) {
        return atomic_load_explicit(&s->length, memory_order_acquire);
}

uint64_t zr_store_data_bytes(const zr_store *s) {
        uint64_t tail = atomic_load_explicit(&s->tail, memory_order_acquire), sum = tail_offset(tail);
        for (uint32_t c = 0; c < tail_chunk(tail); c++) {
                uint64_t size = zr_files_size(s->chunks, c);
                sum += size < s->chunk_cap ? size : s->chunk_cap;
        }
        return sum;
}

enum zr_codec zr_store_codec(const zr_store *s) {
        return s->codec;
}

int zr_store_has_dict(const zr_store *s) {
        size_t len;
        return zr_coder_dict(s->zc, &len) != NULL;
}

int zr_store_dir_fd(const zr_store *s) {
        return s->dirfd;
}

int zr_store_failed(const zr_store *s) {
        return atomic_load(&s->failed);
}

/* Takes the shared lock again after a failed upgrade; if another process took
 * the store meanwhile, this one is stale (and *err says so, after what it
 * says already). */
static void store_relock_shared(zr_store *s, zr_error *err) {
        if (flock(s->meta_fd, LOCK_SH | LOCK_NB) == 0)
                return;
        atomic_store(&s->stale, 1);
        if (err && strlen(err->message) + 80 < sizeof(err->message))
                strcat(err->message, "; and another process took it meanwhile: this process "
                       "serves it no more, open it again");
}

int zr_store_stale(const zr_store *s) {
        return atomic_load(&s->stale);
}

int zr_store_check_unchanged(zr_store *s, zr_error *err) {
        uint8_t buf[ZR_HEADER_SIZE];
        struct stat st;
        zr_header h;
        zr_error e = {0};

        if (atomic_load(&s->stale))
                return zr_error_set(err, ZR_E_STALE, ZR_META_NAME ": the store changed on disk "
                                    "since this process opened it: open it again");
        if (!s->read_only)
                return 0;
        if (fstat(s->meta_fd, &st) < 0)
                return zr_error_errno(err, errno, ZR_META_NAME ": stat");
        int64_t n = zr_pread_all(s->meta_fd, buf, sizeof(buf), 0);
        if (n < 0)
                return zr_error_errno(err, (int)-n, ZR_META_NAME ": read");
        uint64_t was = atomic_load(&s->length), tail = atomic_load(&s->tail);
        bool same = st.st_nlink > 0 && zr_header_decode(buf, (size_t)n, &h, &e) == 0 &&
                    h.length == was && h.flags == s->flags;
        if (same) {
                uint64_t t = tail_make(h.tail_chunk, h.tail_offset);
                if (h.tail_offset == s->chunk_cap)
                        t = tail_make((uint64_t)h.tail_chunk + 1, 0);
                same = t == tail;
        }
        if (same)
                return 0;
        atomic_store(&s->stale, 1);
        if (st.st_nlink == 0)
                return zr_error_set(err, ZR_E_STALE, ZR_META_NAME ": the store was removed or "
                                    "replaced since this process opened it: open it again");
        return zr_error_set(err, ZR_E_STALE,
                            ZR_META_NAME ": the store changed on disk since this process "
                            "opened it (%" PRIu64 " records then%s%s): a program that does not "
                            "honour its lock wrote it (loaderx 1.5.7, or a machine whose "
                            "locks this file system does not share); open it again", was,
                            e.code ? "; now: " : "", e.code ? e.message : "");
}

int zr_store_make_writable(zr_store *s, int dirfd, zr_error *err) {
        struct stat os, ns;
        int *chunk_fds = NULL, *loc_fds = NULL, newdir, mfd = -1, r;

        if (!s->read_only)
                return zr_store_check_writable(s, err);
        if (atomic_load(&s->stale))
                return zr_store_check_unchanged(s, err);
        newdir = fcntl(dirfd, F_DUPFD_CLOEXEC, 3);
        if (newdir < 0)
                return zr_error_errno(err, errno, "store directory: dup");
        mfd = zr_resolve_open(newdir, ZR_META_NAME, O_RDWR, 0, err);
        if (mfd < 0) {
                r = mfd;
                goto fail;
        }
        if (fstat(s->meta_fd, &os) < 0 || fstat(mfd, &ns) < 0) {
                r = zr_error_errno(err, errno, ZR_META_NAME ": stat");
                goto fail;
        }
        if (os.st_dev != ns.st_dev || os.st_ino != ns.st_ino) {
                r = zr_error_set(err, EACCES, ZR_META_NAME ": not the file the store has open");
                goto fail;
        }
        r = zr_files_reopen_prepare(s->chunks, newdir, &chunk_fds, err);
        if (r < 0)
                goto fail;
        r = zr_files_reopen_prepare(s->locs, newdir, &loc_fds, err);
        if (r < 0) {
                zr_files_reopen_abort(s->chunks, chunk_fds);
                goto fail;
        }
        /* A writer's lock: exclusive, on the writable description (where flock
         * is a byte-range lock, an exclusive one needs write access). The
         * read-only open holds a shared one on the old description, which
         * would conflict: it goes first, and comes back if the exclusive one
         * cannot be had (another process shares the store). Letting it go
         * opens a window in which another process could take the store for
         * writing and keep this one out for good, so other holders this
         * machine shows are refused first, with ours kept; should the window
         * be lost all the same (a writer of another machine), the store is
         * served no more (stale). */
        if (zr_holder_others(s->meta_fd) > 0) {
                r = store_locked(s, s->meta_fd, true, err);
                goto abort;
        }
        (void)flock(s->meta_fd, LOCK_UN);
        if (flock(mfd, LOCK_EX | LOCK_NB) < 0) {
                r = errno == EWOULDBLOCK ? store_locked(s, mfd, true, err)
                                         : zr_error_errno(err, errno, ZR_META_NAME ": flock");
                store_relock_shared(s, err);
                goto abort;
        }
        /* Held shared since it was opened, it cannot have changed, unless a
         * process that does not honour the lock wrote it meanwhile: writing
         * on the old length and frontier would destroy that process's work. */
        r = zr_store_check_unchanged(s, err);
        if (r < 0) {
                (void)flock(mfd, LOCK_UN);
                store_relock_shared(s, err);
                goto abort;
        }
        zr_files_reopen_commit(s->chunks, newdir, chunk_fds);
        zr_files_reopen_commit(s->locs, newdir, loc_fds);
        close(s->meta_fd);
        s->meta_fd = mfd;
        close(s->dirfd);
        s->dirfd = newdir;
        s->read_only = 0;
        zr_holder_record(s->dirfd);
        s->recorded = 1;
        return store_extend(s, err);
abort:
        zr_files_reopen_abort(s->chunks, chunk_fds);
        zr_files_reopen_abort(s->locs, loc_fds);
fail:
        if (mfd >= 0)
                close(mfd);
        close(newdir);
        return r;
}

void zr_store_meta_id(const zr_store *s, dev_t *ret_dev, ino_t *ret_ino) {
        struct stat st = {0};
        (void)fstat(s->meta_fd, &st);
        *ret_dev = st.st_dev;
        *ret_ino = st.st_ino;
}

int zr_store_read_only(const zr_store *s) {
        return s->read_only;
}

int zr_store_install_dict(zr_store *s, const void *dict, size_t dict_len, zr_error *err) {
        int r;

        if (s->codec != ZR_CODEC_ZSTD_DICT)
                return zr_error_set(err, ZR_E_BAD_CODEC,
                                    "only a zstd_dict store takes a dictionary (codec %d)",
                                    (int)s->codec);
        if (zr_store_length(s) > 0)
                return zr_error_set(err, ZR_E_SCHEMA,
                                    "a dictionary is installed only in an empty store "
                                    "(this one holds %" PRIu64 " records)",
                                    zr_store_length(s));
        if (zr_store_has_dict(s))
                return zr_error_set(err, ZR_E_HAS_DICT, "the store has a dictionary already");
        r = zr_store_check_writable(s, err);
        if (r < 0)
                return r;
        r = zr_coder_set_dict(s->zc, dict, dict_len, err);
        if (r < 0)
                return r;
        r = store_write_dict(s, dict, dict_len, err);
        if (r >= 0) {
                s->flags |= ZR_HEADER_FLAG_DICT;
                r = zr_store_write_header(s, 0, atomic_load(&s->tail), err);
        }
        if (r >= 0 && fdatasync(s->meta_fd) < 0)
                r = zr_error_errno(err, errno, ZR_META_NAME ": fdatasync");
        if (r >= 0)
                ZR_KILLPOINT(ZR_KP_DICT_FLAGGED);
        if (r < 0)
                atomic_store(&s->failed, -r);
        return r;
}

int zr_store_read_dict(zr_store *s, void **ret, size_t *ret_len, zr_error *err) {
        size_t len;
        const void *d = zr_coder_dict(s->zc, &len);
        if (!d)
                return zr_error_set(err, ZR_E_NO_DICT, "the store has no dictionary");
        void *copy = malloc(len);
        if (!copy)
                return zr_error_set(err, ENOMEM, "dictionary: out of memory");
        memcpy(copy, d, len);
        *ret = copy;
        *ret_len = len;
        return 0;
}

int zr_store_sync(zr_store *s, zr_error *err) {
        int r;
        pthread_mutex_lock(&s->append_lock);
        r = zr_store_sync_locked(s, err);
        pthread_mutex_unlock(&s->append_lock);
        return r;
}
