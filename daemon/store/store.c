/* store.c: the store's operations over its files (see store.h, docs/FORMAT.md).
 *
 * It assumes the directory is the store's alone (the flock on meta.zr). Appends
 * serialize on append_lock, which also guards the write frontier and sync;
 * readers never lock: they load the length (acquire), read committed table
 * entries and committed bytes, which are never rewritten while a reader may run
 * (delete and compact are exclusive by contract). Parallel work is cut into
 * contiguous shards on the pool; each shard holds one codec context. It does not
 * know about dtypes, shapes or sockets.
 */
#include "store/store.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "store/chunks.h"
#include "store/codec.h"
#include "store/format.h"
#include "store/journal.h"

/* Table entries read per pread when walking the whole table (stats, compact,
 * verify): 1 MiB of buffer, large enough to amortize the syscall. */
#define STORE_WALK_ENTRIES 65536
/* Bytes verify decodes per batch: bounded memory, still parallel. */
#define STORE_VERIFY_BYTES ((uint64_t)64 << 20)
/* Largest table verify checks for overlapping records: 24 bytes per record
 * held at once, so at most 384 MiB. */
#define STORE_VERIFY_OVERLAP_MAX ((uint64_t)1 << 24)
/* Copy buffer of compact: 8 MiB keeps a move to a few syscalls. */
#define STORE_COPY_BYTES ((size_t)8 << 20)
/* Below this many indices a locate runs on the caller: a wake-up (30-70 us)
 * costs more than a few hundred 16-byte preads, or tens of thousands of entries
 * decoded from a mapping (~20 ns each). */
#define STORE_LOCATE_PARALLEL_MIN_PREAD 256
#define STORE_LOCATE_PARALLEL_MIN_MAPPED 65536

struct zr_store {
        int dirfd;
        int meta_fd;
        enum zr_codec codec;
        unsigned chunk_log2;
        uint64_t chunk_cap;
        int read_only;
        int map;       /* read through read-only mappings (else pread) */
        uint8_t flags; /* header byte 23 */
        zr_pool *pool;
        zr_coder *zc;
        zr_files *chunks;
        zr_files *locs;
        pthread_mutex_t append_lock; /* appends, the frontier, sync; a leaf above the pool */
        _Atomic uint64_t length;
        _Atomic uint64_t tail; /* chunk << 32 | offset, offset < chunk_cap */
        int dir_dirty;         /* a file was created or removed since the last sync */
        _Atomic int failed;    /* errno of a failed fsync: read-only for good */
};

typedef struct shard_status {
        int r;
        zr_error err;
} shard_status;

static uint32_t tail_chunk(uint64_t t) {
        return (uint32_t)(t >> 32);
}

static uint32_t tail_offset(uint64_t t) {
        return (uint32_t)t;
}

static uint64_t tail_make(uint64_t chunk, uint64_t offset) {
        return chunk << 32 | offset;
}

/* The first failing shard's error, forwarded to err. */
static int shards_result(shard_status *st, size_t n, zr_error *err) {
        for (size_t i = 0; i < n; i++)
                if (st[i].r < 0)
                        return zr_error_set(err, -st[i].r, "%s", st[i].err.message);
        return 0;
}

static int store_check_writable(const zr_store *s, zr_error *err) {
        int f = atomic_load(&s->failed);
        if (f)
                return zr_error_set(err, ZR_E_READONLY,
                                    "store is read-only after a failed fsync: %s",
                                    strerror(f));
        if (s->read_only)
                return zr_error_set(err, ZR_E_READONLY, "store was opened read-only");
        return 0;
}

static int store_write_header(zr_store *s, uint64_t length, uint64_t tail, zr_error *err) {
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
        int r = zr_pwrite_all(s->meta_fd, buf, sizeof(buf), 0);
        if (r < 0)
                return zr_error_errno(err, -r, ZR_META_NAME ": write");
        return 0;
}

/* Sync in the order of the durability story. Called with append_lock held or
 * with exclusive access. A failure is final. */
static int store_sync_locked(zr_store *s, zr_error *err) {
        int r;

        if (s->read_only)
                return 0;
        r = store_check_writable(s, err);
        if (r < 0)
                return r;
        r = zr_files_sync(s->chunks, err);
        if (r >= 0)
                r = zr_files_sync(s->locs, err);
        if (r >= 0 && fdatasync(s->meta_fd) < 0)
                r = zr_error_errno(err, errno, ZR_META_NAME ": fdatasync");
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
            zr_files_new(s->dirfd, ".chunk", s->chunk_cap, s->read_only, s->map, &s->chunks) < 0 ||
            zr_files_new(s->dirfd, ".loc", ZR_LOC_SEGMENT_ENTRIES * ZR_LOC_SIZE, s->read_only,
                         s->map, &s->locs) < 0) {
                r = zr_error_set(err, ENOMEM, "store: out of memory");
                goto fail;
        }
        *ret = s;
        return 0;
fail:
        store_free(s);
        return r;
}

static int store_lock(zr_store *s, zr_error *err) {
        if (flock(s->meta_fd, LOCK_EX | LOCK_NB) < 0) {
                if (errno == EWOULDBLOCK)
                        return zr_error_set(err, ZR_E_LOCKED,
                                            ZR_META_NAME ": the store is open elsewhere");
                return zr_error_errno(err, errno, ZR_META_NAME ": flock");
        }
        return 0;
}

/* Writes dict.zr durably: a temporary file renamed over the name. */
static int store_write_dict(zr_store *s, const void *dict, size_t len, zr_error *err) {
        static const char tmp[] = ZR_DICT_NAME ".tmp";
        int fd, r;

        fd = openat(s->dirfd, tmp, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
        if (fd < 0)
                return zr_error_errno(err, errno, "%s: create", tmp);
        r = zr_pwrite_all(fd, dict, len, 0);
        if (r < 0)
                r = zr_error_errno(err, -r, "%s: write", tmp);
        else if (fdatasync(fd) < 0)
                r = zr_error_errno(err, errno, "%s: fdatasync", tmp);
        close(fd);
        if (r >= 0 && renameat(s->dirfd, tmp, s->dirfd, ZR_DICT_NAME) < 0)
                r = zr_error_errno(err, errno, ZR_DICT_NAME ": rename");
        if (r < 0) {
                unlinkat(s->dirfd, tmp, 0);
                return r;
        }
        if (fsync(s->dirfd) < 0)
                return zr_error_errno(err, errno, "store directory: fsync");
        return 0;
}

int zr_store_create(int dirfd, enum zr_codec codec, const void *dict, size_t dict_len,
                    const zr_store_options *opts, zr_store **ret, zr_error *err) {
        zr_store *s = NULL;
        unsigned log2 = opts && opts->chunk_log2 ? opts->chunk_log2 : ZR_CHUNK_LOG2_DEFAULT;
        int created = 0, r;

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
        s->meta_fd = openat(s->dirfd, ZR_META_NAME,
                            O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0644);
        if (s->meta_fd < 0) {
                if (errno == EEXIST)
                        r = zr_error_set(err, ZR_E_EXISTS,
                                         ZR_META_NAME ": a store already exists here");
                else
                        r = zr_error_errno(err, errno, ZR_META_NAME ": create");
                goto fail;
        }
        created = 1;
        r = store_lock(s, err);
        if (r < 0)
                goto fail;
        if (codec == ZR_CODEC_ZSTD_DICT && dict && dict_len > 0) {
                r = store_write_dict(s, dict, dict_len, err);
                if (r < 0)
                        goto fail;
                s->flags |= ZR_HEADER_FLAG_DICT;
        }
        r = store_write_header(s, 0, 0, err);
        if (r < 0)
                goto fail;
        if (fdatasync(s->meta_fd) < 0 || fsync(s->dirfd) < 0) {
                r = zr_error_errno(err, errno, ZR_META_NAME ": fsync");
                goto fail;
        }
        *ret = s;
        return 0;
fail:
        if (created) {
                if (s->flags & ZR_HEADER_FLAG_DICT)
                        unlinkat(s->dirfd, ZR_DICT_NAME, 0);
                unlinkat(s->dirfd, ZR_META_NAME, 0);
        }
        store_free(s);
        return r;
}

static int store_load_dict(zr_store *s, uint64_t length, zr_error *err) {
        struct stat st;
        void *buf = NULL;
        int fd, r;

        fd = openat(s->dirfd, ZR_DICT_NAME, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
        if (fd < 0) {
                if (errno != ENOENT)
                        return zr_error_errno(err, errno, ZR_DICT_NAME ": open");
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
static int store_new_file_durable(zr_store *s, zr_files *t, uint32_t id, const char *what,
                                  zr_error *err) {
        if (fdatasync(zr_files_fd(t, id)) < 0) {
                int r = zr_error_errno(err, errno, "%" PRIu32 "%s: fdatasync", id, what);
                atomic_store(&s->failed, -r);
                return r;
        }
        return 0;
}

static int store_dir_durable(zr_store *s, zr_error *err) {
        if (fsync(s->dirfd) < 0) {
                int r = zr_error_errno(err, errno, "store directory: fsync");
                atomic_store(&s->failed, -r);
                return r;
        }
        return 0;
}

/* Opens the .loc segments that hold entries [0, length); with `create`, new
 * ones are created durably and *ret_created counts them. */
static int store_open_locs(zr_store *s, uint64_t length, int create, int *ret_created,
                           zr_error *err) {
        if (length == 0)
                return 0;
        uint64_t last = (length - 1) >> ZR_LOC_SEGMENT_LOG2;
        for (uint64_t seg = 0; seg <= last; seg++) {
                uint64_t entries = seg < last ? ZR_LOC_SEGMENT_ENTRIES
                                              : length - (seg << ZR_LOC_SEGMENT_LOG2);
                int created = 0;
                int r = zr_files_open(s->locs, (uint32_t)seg, create, entries * ZR_LOC_SIZE,
                                      &created, err);
                if (r < 0)
                        return r;
                if (created) {
                        r = store_new_file_durable(s, s->locs, (uint32_t)seg, ".loc", err);
                        if (r < 0)
                                return r;
                        (*ret_created)++;
                }
        }
        return 0;
}

/* Writes one table entry. */
static int store_put_loc(zr_store *s, uint64_t idx, const zr_loc *loc, zr_error *err) {
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
static int store_apply_journal(zr_store *s, const zr_journal *j, zr_error *err) {
        int r;

        for (size_t i = 0; i < j->n; i++) {
                r = store_put_loc(s, j->entries[i].index, &j->entries[i].loc, err);
                if (r < 0)
                        return r;
        }
        r = zr_files_sync(s->locs, err);
        if (r < 0)
                return r;
        r = store_write_header(s, j->new_len, atomic_load(&s->tail), err);
        if (r < 0)
                return r;
        if (fdatasync(s->meta_fd) < 0)
                return zr_error_errno(err, errno, ZR_META_NAME ": fdatasync");
        atomic_store_explicit(&s->length, j->new_len, memory_order_release);
        r = zr_journal_remove(s->dirfd, err);
        if (r < 0)
                return r;
        s->dir_dirty = 1;
        return 0;
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
        r = store_open_locs(s, j.old_len > length ? j.old_len : length, 0, NULL, err);
        if (r >= 0)
                r = store_apply_journal(s, &j, err);
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
        s->meta_fd = openat(s->dirfd, ZR_META_NAME,
                            (s->read_only ? O_RDONLY : O_RDWR) | O_CLOEXEC | O_NOFOLLOW);
        if (s->meta_fd < 0) {
                if (errno == ENOENT)
                        r = zr_error_set(err, ZR_E_NOT_STORE,
                                         "not a store: the directory holds no " ZR_META_NAME);
                else
                        r = zr_error_errno(err, errno, ZR_META_NAME ": open");
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
            zr_files_new(s->dirfd, ".chunk", s->chunk_cap, s->read_only, s->map,
                         &s->chunks) < 0) {
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
        r = store_open_locs(s, h.length, 0, NULL, err);
        if (r < 0)
                goto fail;
        if (h.tail_chunk > 0 || h.tail_offset > 0 || h.length > 0)
                for (uint64_t c = 0; c <= tail_chunk(tail); c++) {
                        r = zr_files_open(s->chunks, (uint32_t)c, 0,
                                          c < tail_chunk(tail) ? s->chunk_cap : tail_offset(tail),
                                          NULL, err);
                        if (r < 0)
                                goto fail;
                }
        r = store_recover(s, err);
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
        r = store_sync_locked(s, err); /* ZR_E_READONLY if the store had failed */
        store_free(s);
        return r;
}

uint64_t zr_store_length(const zr_store *s) {
        return atomic_load_explicit(&s->length, memory_order_acquire);
}

enum zr_codec zr_store_codec(const zr_store *s) {
        return s->codec;
}

int zr_store_has_dict(const zr_store *s) {
        size_t len;
        return zr_coder_dict(s->zc, &len) != NULL;
}

int zr_store_failed(const zr_store *s) {
        return atomic_load(&s->failed);
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
        r = store_check_writable(s, err);
        if (r < 0)
                return r;
        r = zr_coder_set_dict(s->zc, dict, dict_len, err);
        if (r < 0)
                return r;
        r = store_write_dict(s, dict, dict_len, err);
        if (r >= 0) {
                s->flags |= ZR_HEADER_FLAG_DICT;
                r = store_write_header(s, 0, atomic_load(&s->tail), err);
        }
        if (r >= 0 && fdatasync(s->meta_fd) < 0)
                r = zr_error_errno(err, errno, ZR_META_NAME ": fdatasync");
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

/* ---- append ------------------------------------------------------------- */

typedef struct append_job {
        zr_store *s;
        const uint8_t *data;
        const uint64_t *lens;
        size_t n;
        uint64_t *shard_off;     /* byte offset of each shard's first record in data */
        const uint8_t **shard_src; /* each shard's stored bytes, back to back */
        zr_coder_ctx **ctxs;
        zr_loc *locs;
        shard_status *st;
} append_job;

static void shard_range(size_t n, size_t shard, size_t nshards, size_t *lo, size_t *hi) {
        *lo = n * shard / nshards;
        *hi = n * (shard + 1) / nshards;
}

static void append_compress_shard(void *arg, size_t shard, size_t nshards) {
        append_job *j = arg;
        zr_store *s = j->s;
        size_t lo, hi, bound = 0, pos = 0;
        int r;

        shard_range(j->n, shard, nshards, &lo, &hi);
        for (size_t k = lo; k < hi; k++)
                bound += zr_coder_bound(s->zc, j->lens[k]);
        uint8_t *out = zr_coder_ctx_buffer(j->ctxs[shard], bound ? bound : 1);
        if (!out) {
                j->st[shard].r = zr_error_set(&j->st[shard].err, ENOMEM,
                                              "append: out of memory for %zu bytes", bound);
                return;
        }
        const uint8_t *src = j->data + j->shard_off[shard];
        for (size_t k = lo; k < hi; k++) {
                size_t phys;
                r = zr_coder_compress(s->zc, j->ctxs[shard], out + pos, bound - pos, src,
                                      j->lens[k], &phys, &j->st[shard].err);
                if (r < 0) {
                        j->st[shard].r = r;
                        return;
                }
                j->locs[k].phys_length = (uint32_t)phys;
                j->locs[k].logic_length = (uint32_t)j->lens[k];
                if (phys > s->chunk_cap) {
                        j->st[shard].r = zr_error_set(&j->st[shard].err, ZR_E_TOO_BIG,
                                                      "record %zu: %zu bytes stored, over the "
                                                      "chunk size %" PRIu64, k, phys,
                                                      s->chunk_cap);
                        return;
                }
                src += j->lens[k];
                pos += phys;
        }
        j->shard_src[shard] = out;
}

static void append_write_shard(void *arg, size_t shard, size_t nshards) {
        append_job *j = arg;
        zr_store *s = j->s;
        size_t lo, hi;

        shard_range(j->n, shard, nshards, &lo, &hi);
        const uint8_t *src = j->shard_src[shard];
        size_t k = lo;
        while (k < hi) {
                /* one pwrite per run of records contiguous in one chunk */
                const zr_loc *first = &j->locs[k];
                uint64_t bytes = first->phys_length;
                size_t e = k + 1;
                while (e < hi && j->locs[e].chunk_id == first->chunk_id &&
                       j->locs[e].offset == first->offset + bytes) {
                        bytes += j->locs[e].phys_length;
                        e++;
                }
                if (bytes > 0) {
                        int fd = zr_files_fd(s->chunks, first->chunk_id);
                        int r = fd < 0 ? -EBADF : zr_pwrite_all(fd, src, bytes, first->offset);
                        if (r < 0) {
                                j->st[shard].r = zr_error_errno(&j->st[shard].err, -r,
                                                                "%" PRIu32 ".chunk: write",
                                                                first->chunk_id);
                                return;
                        }
                }
                src += bytes;
                k = e;
        }
}

/* Writes the encoded entries [first, first+n) of the table. */
static int store_put_locs(zr_store *s, uint64_t first, const uint8_t *enc, size_t n,
                          zr_error *err) {
        while (n > 0) {
                uint32_t seg = (uint32_t)(first >> ZR_LOC_SEGMENT_LOG2);
                uint64_t in_seg = first & (ZR_LOC_SEGMENT_ENTRIES - 1);
                uint64_t run = ZR_LOC_SEGMENT_ENTRIES - in_seg;
                if (run > n)
                        run = n;
                int fd = zr_files_fd(s->locs, seg);
                int r = fd < 0 ? -EBADF
                               : zr_pwrite_all(fd, enc, run * ZR_LOC_SIZE, in_seg * ZR_LOC_SIZE);
                if (r < 0)
                        return zr_error_errno(err, -r, "%" PRIu32 ".loc: write", seg);
                enc += run * ZR_LOC_SIZE;
                first += run;
                n -= run;
        }
        return 0;
}

int zr_store_append(zr_store *s, const void *data, const uint64_t *lens, size_t n,
                    uint64_t *ret_first, zr_error *err) {
        append_job j = { .s = s, .data = data, .lens = lens, .n = n };
        size_t nshards = 0;
        int r;

        pthread_mutex_lock(&s->append_lock);
        r = store_check_writable(s, err);
        if (r < 0)
                goto out;
        if (s->codec == ZR_CODEC_ZSTD_DICT && !zr_store_has_dict(s)) {
                r = zr_error_set(err, ZR_E_NO_DICT,
                                 "zstd_dict store has no dictionary: install one first");
                goto out;
        }
        for (size_t k = 0; k < n; k++)
                if (lens[k] > ZR_RECORD_MAX) {
                        r = zr_error_set(err, ZR_E_TOO_BIG,
                                         "record %zu is %" PRIu64 " bytes, over 2^31", k,
                                         lens[k]);
                        goto out;
                }
        uint64_t length = atomic_load(&s->length);
        if (ret_first)
                *ret_first = length;
        if (n == 0)
                goto out;
        if (!data) {
                r = zr_error_set(err, EINVAL, "append: no data");
                goto out;
        }

        nshards = zr_pool_shards(s->pool, n);
        j.shard_off = calloc(nshards, sizeof(*j.shard_off));
        j.shard_src = calloc(nshards, sizeof(*j.shard_src));
        j.ctxs = calloc(nshards, sizeof(*j.ctxs));
        j.st = calloc(nshards, sizeof(*j.st));
        j.locs = malloc(n * sizeof(*j.locs));
        if (!j.shard_off || !j.shard_src || !j.ctxs || !j.st || !j.locs) {
                r = zr_error_set(err, ENOMEM, "append: out of memory");
                goto out;
        }
        {
                uint64_t off = 0;
                for (size_t i = 0, k = 0; i < nshards; i++) {
                        size_t lo, hi;
                        shard_range(n, i, nshards, &lo, &hi);
                        for (; k < lo; k++)
                                off += lens[k];
                        j.shard_off[i] = off;
                        j.shard_src[i] = j.data + off;
                }
        }

        if (s->codec == ZR_CODEC_RAW) {
                for (size_t k = 0; k < n; k++) {
                        j.locs[k].phys_length = (uint32_t)lens[k];
                        j.locs[k].logic_length = (uint32_t)lens[k];
                        if (lens[k] > s->chunk_cap) {
                                r = zr_error_set(err, ZR_E_TOO_BIG,
                                                 "record %zu: %" PRIu64 " bytes, over the chunk "
                                                 "size %" PRIu64, k, lens[k], s->chunk_cap);
                                goto out;
                        }
                }
        } else {
                for (size_t i = 0; i < nshards; i++) {
                        j.ctxs[i] = zr_coder_ctx_get(s->zc);
                        if (!j.ctxs[i]) {
                                r = zr_error_set(err, ENOMEM, "append: out of memory");
                                goto out;
                        }
                }
                zr_pool_parallel(s->pool, nshards, append_compress_shard, &j);
                r = shards_result(j.st, nshards, err);
                if (r < 0)
                        goto out;
        }

        /* Assign locations in order; no record straddles a chunk. */
        uint64_t old_tail = atomic_load(&s->tail);
        uint64_t c = tail_chunk(old_tail), o = tail_offset(old_tail);
        for (size_t k = 0; k < n; k++) {
                uint64_t p = j.locs[k].phys_length;
                if (o + p > s->chunk_cap) {
                        c++;
                        o = 0;
                }
                j.locs[k].chunk_id = (uint32_t)c;
                j.locs[k].offset = (uint32_t)o;
                o += p;
                if (o == s->chunk_cap) {
                        c++;
                        o = 0;
                }
        }
        if (c > UINT32_MAX) {
                r = zr_error_set(err, ENOSPC, "store is full: 2^32 chunks");
                goto out;
        }
        int made = 0;
        for (uint64_t id = tail_chunk(old_tail); id <= c; id++) {
                int created = 0;
                r = zr_files_open(s->chunks, (uint32_t)id, 1, 0, &created, err);
                if (r < 0)
                        goto out;
                if (created) {
                        r = store_new_file_durable(s, s->chunks, (uint32_t)id, ".chunk", err);
                        if (r < 0)
                                goto out;
                        made++;
                }
        }
        r = store_open_locs(s, length + n, 1, &made, err);
        if (r < 0)
                goto out;
        if (made > 0) {
                r = store_dir_durable(s, err);
                if (r < 0)
                        goto out;
        }

        if (s->codec == ZR_CODEC_RAW) {
                /* The batch is contiguous in memory and (between rollovers) on
                 * disk: one pwrite per chunk on the caller. Writers to one file
                 * serialize in the kernel anyway, so threads would only add
                 * wake-ups. */
                append_write_shard(&j, 0, 1);
                r = shards_result(j.st, 1, err);
        } else {
                zr_pool_parallel(s->pool, nshards, append_write_shard, &j);
                r = shards_result(j.st, nshards, err);
        }
        if (r < 0)
                goto out;

        /* Commit: table entries, then the length. */
        uint8_t *enc = (uint8_t *)j.locs;
        for (size_t k = 0; k < n; k++)
                zr_loc_encode(&j.locs[k], enc + k * ZR_LOC_SIZE);
        r = store_put_locs(s, length, enc, n, err);
        if (r < 0)
                goto out;
        uint64_t new_tail = tail_make(c, o);
        r = store_write_header(s, length + n, new_tail, err);
        if (r < 0)
                goto out;
        atomic_store_explicit(&s->tail, new_tail, memory_order_release);
        atomic_store_explicit(&s->length, length + n, memory_order_release);
        r = 0;
out:
        if (j.ctxs)
                for (size_t i = 0; i < nshards; i++)
                        zr_coder_ctx_put(s->zc, j.ctxs[i]);
        free(j.shard_off);
        free(j.shard_src);
        free(j.ctxs);
        free(j.st);
        free(j.locs);
        pthread_mutex_unlock(&s->append_lock);
        return r;
}

/* ---- locate and gather -------------------------------------------------- */

/* Checks one table entry against the chunk capacity and the write frontier. */
static int store_check_loc(const zr_store *s, const zr_loc *l, uint64_t tail, zr_error *err) {
        uint64_t end = (uint64_t)l->offset + l->phys_length;
        uint64_t limit = l->chunk_id < tail_chunk(tail) ? s->chunk_cap
                       : l->chunk_id == tail_chunk(tail) ? tail_offset(tail) : 0;
        if (l->chunk_id > tail_chunk(tail) || end > limit)
                return zr_error_set(err, ZR_E_CORRUPT,
                                    "table entry {chunk %" PRIu32 ", offset %" PRIu32
                                    ", phys %" PRIu32 "} points past %" PRIu32 ".chunk's end "
                                    "(%" PRIu64 ")",
                                    l->chunk_id, l->offset, l->phys_length, l->chunk_id, limit);
        if (l->logic_length > ZR_RECORD_MAX ||
            (s->codec == ZR_CODEC_RAW && l->logic_length != l->phys_length))
                return zr_error_set(err, ZR_E_CORRUPT,
                                    "table entry {chunk %" PRIu32 ", offset %" PRIu32
                                    "}: lengths %" PRIu32 "/%" PRIu32 " impossible for codec %d",
                                    l->chunk_id, l->offset, l->phys_length, l->logic_length,
                                    (int)s->codec);
        return 0;
}

/* Reads entries idx[lo..hi) into locs, one pread per run of consecutive indices
 * inside a segment, and checks each. */
static int store_locate_range(zr_store *s, const uint64_t *idx, size_t lo, size_t hi,
                              zr_loc *locs, uint64_t tail, zr_error *err) {
        size_t k = lo;
        while (k < hi) {
                uint64_t seg = idx[k] >> ZR_LOC_SEGMENT_LOG2;
                size_t e = k + 1;
                while (e < hi && idx[e] == idx[e - 1] + 1 && (idx[e] >> ZR_LOC_SEGMENT_LOG2) == seg)
                        e++;
                int fd = zr_files_fd(s->locs, (uint32_t)seg);
                uint64_t bytes = (uint64_t)(e - k) * ZR_LOC_SIZE;
                uint64_t off = (idx[k] & (ZR_LOC_SEGMENT_ENTRIES - 1)) * ZR_LOC_SIZE;
                uint64_t map_len;
                const uint8_t *map = zr_files_map(s->locs, (uint32_t)seg, &map_len);
                if (fd < 0)
                        return zr_error_set(err, ZR_E_CORRUPT, "%" PRIu64 ".loc: not open", seg);
                if (map && off + bytes <= map_len) {
                        /* one load per entry: decoded straight from the mapping */
                        for (size_t i = k; i < e; i++)
                                zr_loc_decode(map + off + (i - k) * ZR_LOC_SIZE, &locs[i]);
                } else {
                        int64_t n = zr_pread_all(fd, &locs[k], bytes, off);
                        if (n < 0)
                                return zr_error_errno(err, (int)-n, "%" PRIu64 ".loc: read", seg);
                        if ((uint64_t)n != bytes)
                                return zr_error_set(err, ZR_E_CORRUPT,
                                                    "%" PRIu64 ".loc: short read at entry %" PRIu64,
                                                    seg, idx[k]);
                        for (size_t i = k; i < e; i++)
                                zr_loc_decode((const uint8_t *)&locs[i], &locs[i]);
                }
                for (size_t i = k; i < e; i++) {
                        int r = store_check_loc(s, &locs[i], tail, err);
                        if (r < 0)
                                return r;
                }
                k = e;
        }
        return 0;
}

typedef struct locate_job {
        zr_store *s;
        const uint64_t *idx;
        size_t n;
        zr_loc *locs;
        uint64_t tail;
        shard_status *st;
} locate_job;

static void locate_shard(void *arg, size_t shard, size_t nshards) {
        locate_job *j = arg;
        size_t lo, hi;
        shard_range(j->n, shard, nshards, &lo, &hi);
        j->st[shard].r = store_locate_range(j->s, j->idx, lo, hi, j->locs, j->tail,
                                            &j->st[shard].err);
}

int zr_store_locate(zr_store *s, const uint64_t *idx, size_t n, zr_loc *ret_locs,
                    zr_error *err) {
        _Static_assert(sizeof(zr_loc) == ZR_LOC_SIZE, "zr_loc must be 16 bytes");
        uint64_t length = zr_store_length(s);
        uint64_t tail = atomic_load_explicit(&s->tail, memory_order_acquire);

        for (size_t k = 0; k < n; k++)
                if (idx[k] >= length)
                        return zr_error_set(err, ZR_E_RANGE,
                                            "index %" PRIu64 " out of range (length %" PRIu64 ")",
                                            idx[k], length);
        size_t min = s->map ? STORE_LOCATE_PARALLEL_MIN_MAPPED : STORE_LOCATE_PARALLEL_MIN_PREAD;
        if (n < min || zr_pool_threads(s->pool) == 0)
                return store_locate_range(s, idx, 0, n, ret_locs, tail, err);

        size_t nshards = zr_pool_shards(s->pool, n);
        shard_status *st = calloc(nshards, sizeof(*st));
        if (!st)
                return zr_error_set(err, ENOMEM, "locate: out of memory");
        locate_job j = { s, idx, n, ret_locs, tail, st };
        zr_pool_parallel(s->pool, nshards, locate_shard, &j);
        int r = shards_result(st, nshards, err);
        free(st);
        return r;
}

typedef struct gather_job {
        zr_store *s;
        const zr_loc *locs;
        size_t n;
        void *const *dsts;  /* per-record destinations, or NULL: */
        uint8_t *base;      /* packed back to back from base */
        uint64_t *shard_off; /* packed: offset of each shard's first record */
        uint64_t tail;
        shard_status *st;
} gather_job;

static int gather_one_compressed(zr_store *s, zr_coder_ctx *x, const zr_loc *l, void *dst,
                                 zr_error *err) {
        int fd = zr_files_fd(s->chunks, l->chunk_id);
        if (fd < 0)
                return zr_error_set(err, ZR_E_CORRUPT, "%" PRIu32 ".chunk: not open", l->chunk_id);
        uint64_t map_len;
        const uint8_t *map = zr_files_map(s->chunks, l->chunk_id, &map_len);
        const void *buf;
        if (map && (uint64_t)l->offset + l->phys_length <= map_len) {
                buf = map + l->offset; /* decompressed straight from the page cache */
        } else {
                void *staging = zr_coder_ctx_buffer(x, l->phys_length ? l->phys_length : 1);
                if (!staging)
                        return zr_error_set(err, ENOMEM, "gather: out of memory");
                int64_t n = zr_pread_all(fd, staging, l->phys_length, l->offset);
                if (n < 0)
                        return zr_error_errno(err, (int)-n, "%" PRIu32 ".chunk: read",
                                              l->chunk_id);
                if ((uint64_t)n != l->phys_length)
                        return zr_error_set(err, ZR_E_CORRUPT,
                                            "%" PRIu32 ".chunk: short read at offset %" PRIu32
                                            " (file truncated?)", l->chunk_id, l->offset);
                buf = staging;
        }
        zr_error e = {0};
        int r = zr_coder_decompress(s->zc, x, dst, l->logic_length, buf, l->phys_length, &e);
        if (r < 0)
                return zr_error_set(err, -r, "%" PRIu32 ".chunk offset %" PRIu32 ": %s",
                                    l->chunk_id, l->offset, e.message);
        return 0;
}

static int gather_range(gather_job *j, size_t lo, size_t hi, zr_coder_ctx *x, zr_error *err) {
        zr_store *s = j->s;
        uint8_t *packed = j->base;
        size_t k = lo;
        int r;

        while (k < hi) {
                const zr_loc *l = &j->locs[k];
                uint8_t *dst = j->dsts ? j->dsts[k] : packed;
                r = store_check_loc(s, l, j->tail, err);
                if (r < 0)
                        return r;
                if (s->codec != ZR_CODEC_RAW) {
                        r = gather_one_compressed(s, x, l, dst, err);
                        if (r < 0)
                                return r;
                        packed = dst + l->logic_length;
                        k++;
                        continue;
                }
                /* raw: one pread per run contiguous both on disk and in memory */
                uint64_t bytes = l->phys_length;
                size_t e = k + 1;
                while (e < hi) {
                        const zr_loc *m = &j->locs[e];
                        if (m->chunk_id != l->chunk_id || m->offset != l->offset + bytes ||
                            (j->dsts && (uint8_t *)j->dsts[e] != dst + bytes))
                                break;
                        r = store_check_loc(s, m, j->tail, err);
                        if (r < 0)
                                return r;
                        bytes += m->phys_length;
                        e++;
                }
                uint64_t map_len;
                const uint8_t *map = bytes ? zr_files_map(s->chunks, l->chunk_id, &map_len) : NULL;
                if (map && l->offset + bytes <= map_len) {
                        memcpy(dst, map + l->offset, bytes);
                } else if (bytes > 0) {
                        int fd = zr_files_fd(s->chunks, l->chunk_id);
                        if (fd < 0)
                                return zr_error_set(err, ZR_E_CORRUPT,
                                                    "%" PRIu32 ".chunk: not open", l->chunk_id);
                        int64_t n = zr_pread_all(fd, dst, bytes, l->offset);
                        if (n < 0)
                                return zr_error_errno(err, (int)-n, "%" PRIu32 ".chunk: read",
                                                      l->chunk_id);
                        if ((uint64_t)n != bytes)
                                return zr_error_set(err, ZR_E_CORRUPT,
                                                    "%" PRIu32 ".chunk: short read at offset "
                                                    "%" PRIu32 " (file truncated?)",
                                                    l->chunk_id, l->offset);
                }
                packed = dst + bytes;
                k = e;
        }
        return 0;
}

static void gather_shard(void *arg, size_t shard, size_t nshards) {
        gather_job *j = arg;
        zr_coder_ctx *x = NULL;
        size_t lo, hi;

        shard_range(j->n, shard, nshards, &lo, &hi);
        if (j->s->codec != ZR_CODEC_RAW) {
                x = zr_coder_ctx_get(j->s->zc);
                if (!x) {
                        j->st[shard].r = zr_error_set(&j->st[shard].err, ENOMEM,
                                                      "gather: out of memory");
                        return;
                }
        }
        gather_job local = *j; /* packed: each shard starts at its own offset */
        if (!j->dsts)
                local.base = j->base + j->shard_off[shard];
        j->st[shard].r = gather_range(&local, lo, hi, x, &j->st[shard].err);
        zr_coder_ctx_put(j->s->zc, x);
}

static int store_gather_run(zr_store *s, gather_job *j, zr_error *err) {
        if (s->codec == ZR_CODEC_ZSTD_DICT && !zr_store_has_dict(s))
                return zr_error_set(err, ZR_E_NO_DICT,
                                    "zstd_dict store has no dictionary: records cannot be read");
        size_t nshards = zr_pool_shards(s->pool, j->n);
        int r;

        j->tail = atomic_load_explicit(&s->tail, memory_order_acquire);
        j->st = calloc(nshards, sizeof(*j->st));
        if (!j->dsts)
                j->shard_off = calloc(nshards, sizeof(*j->shard_off));
        if (!j->st || (!j->dsts && !j->shard_off)) {
                r = zr_error_set(err, ENOMEM, "gather: out of memory");
                goto out;
        }
        if (!j->dsts) {
                uint64_t off = 0;
                for (size_t i = 0, k = 0; i < nshards; i++) {
                        size_t lo, hi;
                        shard_range(j->n, i, nshards, &lo, &hi);
                        for (; k < lo; k++)
                                off += j->locs[k].logic_length;
                        j->shard_off[i] = off;
                }
        }
        zr_pool_parallel(s->pool, nshards, gather_shard, j);
        r = shards_result(j->st, nshards, err);
out:
        free(j->st);
        free(j->shard_off);
        return r;
}

int zr_store_gather_locs(zr_store *s, const zr_loc *locs, size_t n, void *const *dsts,
                         zr_error *err) {
        if (n == 0)
                return 0;
        gather_job j = { .s = s, .locs = locs, .n = n, .dsts = dsts };
        return store_gather_run(s, &j, err);
}

int zr_store_gather(zr_store *s, const uint64_t *idx, size_t n, void *dst,
                    uint64_t dst_size, uint64_t *ret_lens, zr_error *err) {
        zr_loc *locs;
        uint64_t total = 0;
        int r;

        if (n == 0)
                return 0;
        locs = malloc(n * sizeof(*locs));
        if (!locs)
                return zr_error_set(err, ENOMEM, "gather: out of memory");
        r = zr_store_locate(s, idx, n, locs, err);
        if (r < 0)
                goto out;
        for (size_t k = 0; k < n; k++) {
                total += locs[k].logic_length;
                if (ret_lens)
                        ret_lens[k] = locs[k].logic_length;
        }
        if (total > dst_size) {
                r = zr_error_set(err, ZR_E_BUFFER,
                                 "gather: %" PRIu64 " bytes do not fit in %" PRIu64, total,
                                 dst_size);
                goto out;
        }
        gather_job j = { .s = s, .locs = locs, .n = n, .base = dst };
        r = store_gather_run(s, &j, err);
out:
        free(locs);
        return r;
}

/* ---- delete ------------------------------------------------------------- */

static int cmp_u64_desc(const void *a, const void *b) {
        uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
        return x < y ? 1 : x > y ? -1 : 0;
}

int zr_store_delete(zr_store *s, const uint64_t *idx, size_t n, zr_error *err) {
        zr_journal j = {0};
        uint64_t *sorted = NULL, *tail_idx = NULL;
        zr_loc *tail = NULL;
        uint64_t length = zr_store_length(s);
        int r;

        r = store_check_writable(s, err);
        if (r < 0 || n == 0)
                return r;
        sorted = malloc(n * sizeof(*sorted));
        if (!sorted)
                return zr_error_set(err, ENOMEM, "delete: out of memory");
        memcpy(sorted, idx, n * sizeof(*sorted));
        qsort(sorted, n, sizeof(*sorted), cmp_u64_desc);
        if (sorted[0] >= length) {
                r = zr_error_set(err, ZR_E_RANGE,
                                 "delete: index %" PRIu64 " out of range (length %" PRIu64 ")",
                                 sorted[0], length);
                goto out;
        }
        for (size_t k = 1; k < n; k++)
                if (sorted[k] == sorted[k - 1]) {
                        r = zr_error_set(err, EINVAL, "delete: index %" PRIu64 " given twice",
                                         sorted[k]);
                        goto out;
                }

        /* Everything before the batch durable first, so the journal redoes onto
         * a table and header that survive a power loss. */
        pthread_mutex_lock(&s->append_lock);
        r = store_sync_locked(s, err);
        pthread_mutex_unlock(&s->append_lock);
        if (r < 0)
                goto out;

        /* The tail [new_len, length) supplies every hole; simulate the swaps. */
        uint64_t new_len = length - n;
        tail = malloc(n * sizeof(*tail));
        tail_idx = malloc(n * sizeof(*tail_idx));
        j.entries = malloc(n * sizeof(*j.entries));
        if (!tail || !tail_idx || !j.entries) {
                r = zr_error_set(err, ENOMEM, "delete: out of memory");
                goto out;
        }
        for (size_t k = 0; k < n; k++)
                tail_idx[k] = new_len + k;
        r = store_locate_range(s, tail_idx, 0, n, tail, atomic_load(&s->tail), err);
        if (r < 0)
                goto out;
        uint64_t cur = length;
        for (size_t k = 0; k < n; k++) {
                uint64_t hole = sorted[k], last = cur - 1;
                if (hole != last) {
                        zr_loc moved = tail[last - new_len];
                        if (hole >= new_len)
                                tail[hole - new_len] = moved;
                        else
                                j.entries[j.n++] = (zr_journal_entry){ hole, moved };
                }
                cur--;
        }
        j.old_len = length;
        j.new_len = new_len;

        r = zr_journal_write(s->dirfd, &j, err);
        if (r >= 0)
                r = store_apply_journal(s, &j, err);
        if (r < 0)
                atomic_store(&s->failed, -r); /* the journal is redone on the next open */
out:
        zr_journal_done(&j);
        free(tail);
        free(tail_idx);
        free(sorted);
        return r;
}

/* ---- table walks: stats, compact, verify -------------------------------- */

/* Reads entries [first, first+n) (n <= STORE_WALK_ENTRIES) into locs. */
static int store_read_table(zr_store *s, uint64_t first, size_t n, zr_loc *locs,
                            uint64_t *scratch_idx, zr_error *err) {
        for (size_t k = 0; k < n; k++)
                scratch_idx[k] = first + k;
        return store_locate_range(s, scratch_idx, 0, n, locs,
                                  atomic_load_explicit(&s->tail, memory_order_acquire), err);
}

int zr_store_stats(zr_store *s, zr_stats *ret, zr_error *err) {
        zr_stats st = {0};
        zr_loc *locs = malloc(STORE_WALK_ENTRIES * sizeof(*locs));
        uint64_t *idx = malloc(STORE_WALK_ENTRIES * sizeof(*idx));
        int r = 0;

        if (!locs || !idx) {
                r = zr_error_set(err, ENOMEM, "stats: out of memory");
                goto out;
        }
        st.records = zr_store_length(s);
        uint64_t tail = atomic_load_explicit(&s->tail, memory_order_acquire);
        for (uint64_t first = 0; first < st.records; first += STORE_WALK_ENTRIES) {
                size_t n = st.records - first < STORE_WALK_ENTRIES ? st.records - first
                                                                     : STORE_WALK_ENTRIES;
                r = store_read_table(s, first, n, locs, idx, err);
                if (r < 0)
                        goto out;
                for (size_t k = 0; k < n; k++) {
                        st.live_bytes += locs[k].phys_length;
                        st.logic_bytes += locs[k].logic_length;
                }
        }
        st.chunk_bytes = (uint64_t)tail_chunk(tail) * s->chunk_cap + tail_offset(tail);
        st.reclaimable = st.chunk_bytes > st.live_bytes ? st.chunk_bytes - st.live_bytes : 0;
        *ret = st;
out:
        free(locs);
        free(idx);
        return r;
}

typedef struct phys_entry {
        uint64_t key; /* chunk << 32 | offset */
        uint64_t idx;
} phys_entry;

static int cmp_phys(const void *a, const void *b) {
        const phys_entry *x = a, *y = b;
        if (x->key != y->key)
                return x->key < y->key ? -1 : 1;
        return x->idx < y->idx ? -1 : x->idx > y->idx;
}

/* Copies len bytes from (sc, so) to (dc, dof), dst <= src: forward, in pieces. */
static int compact_copy(zr_store *s, uint8_t *buf, uint32_t sc, uint64_t so, uint32_t dc,
                        uint64_t dof, uint64_t len, zr_error *err) {
        int sfd = zr_files_fd(s->chunks, sc), dfd = zr_files_fd(s->chunks, dc);
        if (sfd < 0 || dfd < 0)
                return zr_error_set(err, ZR_E_CORRUPT, "compact: chunk %" PRIu32 " not open",
                                    sfd < 0 ? sc : dc);
        for (uint64_t done = 0; done < len;) {
                uint64_t piece = len - done < STORE_COPY_BYTES ? len - done : STORE_COPY_BYTES;
                int64_t n = zr_pread_all(sfd, buf, piece, so + done);
                if (n < 0)
                        return zr_error_errno(err, (int)-n, "%" PRIu32 ".chunk: read", sc);
                if ((uint64_t)n != piece)
                        return zr_error_set(err, ZR_E_CORRUPT,
                                            "%" PRIu32 ".chunk: short read at offset %" PRIu64, sc,
                                            so + done);
                int r = zr_pwrite_all(dfd, buf, piece, dof + done);
                if (r < 0)
                        return zr_error_errno(err, -r, "%" PRIu32 ".chunk: write", dc);
                done += piece;
        }
        return 0;
}

int zr_store_compact(zr_store *s, uint64_t max_moves, zr_compact_result *ret,
                     zr_error *err) {
        zr_compact_result res = {0};
        uint64_t length = zr_store_length(s);
        zr_loc *locs = NULL;
        uint64_t *idx = NULL;
        phys_entry *order = NULL;
        uint8_t *buf = NULL;
        int r;

        r = store_check_writable(s, err);
        if (r < 0)
                return r;
        pthread_mutex_lock(&s->append_lock);
        r = store_sync_locked(s, err);
        pthread_mutex_unlock(&s->append_lock);
        if (r < 0)
                return r;

        uint64_t old_tail = atomic_load(&s->tail);
        uint64_t before = (uint64_t)tail_chunk(old_tail) * s->chunk_cap + tail_offset(old_tail);
        locs = malloc((length ? length : 1) * sizeof(*locs));
        order = malloc((length ? length : 1) * sizeof(*order));
        idx = malloc(STORE_WALK_ENTRIES * sizeof(*idx));
        buf = malloc(STORE_COPY_BYTES);
        if (!locs || !order || !idx || !buf) {
                r = zr_error_set(err, ENOMEM, "compact: out of memory");
                goto out;
        }
        for (uint64_t first = 0; first < length; first += STORE_WALK_ENTRIES) {
                size_t n = length - first < STORE_WALK_ENTRIES ? length - first
                                                                : STORE_WALK_ENTRIES;
                r = store_read_table(s, first, n, locs + first, idx, err);
                if (r < 0)
                        goto out;
        }
        for (uint64_t k = 0; k < length; k++)
                order[k] = (phys_entry){ tail_make(locs[k].chunk_id, locs[k].offset), k };
        qsort(order, length, sizeof(*order), cmp_phys);

        /* Repack in physical order: a record never moves up, so it only lands on
         * garbage or on bytes already moved away, and its entry is rewritten the
         * moment it lands. */
        uint64_t fc = 0, fo = 0;
        res.finished = 1;
        for (uint64_t k = 0; k < length; k++) {
                zr_loc l = locs[order[k].idx];
                uint64_t p = l.phys_length;
                if (fo + p > s->chunk_cap) {
                        fc++;
                        fo = 0;
                }
                if (fc == l.chunk_id && fo == l.offset) {
                        res.skipped++;
                } else {
                        if (max_moves > 0 && res.moved == max_moves) {
                                res.finished = 0;
                                break;
                        }
                        r = compact_copy(s, buf, l.chunk_id, l.offset, (uint32_t)fc, fo, p, err);
                        if (r < 0)
                                goto out;
                        l.chunk_id = (uint32_t)fc;
                        l.offset = (uint32_t)fo;
                        r = store_put_loc(s, order[k].idx, &l, err);
                        if (r < 0)
                                goto out;
                        res.moved++;
                }
                fo += p;
                if (fo == s->chunk_cap) {
                        fc++;
                        fo = 0;
                }
        }

        if (res.finished) {
                uint64_t new_tail = tail_make(fc, fo); /* <= old_tail: nothing moves up */
                /* Entries first, then the header's frontier, durable before any
                 * chunk file goes away. */
                r = zr_files_sync(s->chunks, err);
                if (r >= 0)
                        r = zr_files_sync(s->locs, err);
                if (r >= 0)
                        r = store_write_header(s, length, new_tail, err);
                if (r >= 0 && fdatasync(s->meta_fd) < 0)
                        r = zr_error_errno(err, errno, ZR_META_NAME ": fdatasync");
                if (r < 0) {
                        atomic_store(&s->failed, -r);
                        goto out;
                }
                atomic_store(&s->tail, new_tail);
                if (tail_chunk(new_tail) < UINT32_MAX) {
                        r = zr_files_remove_from(s->chunks, tail_chunk(new_tail) + 1, err);
                        if (r < 0)
                                goto out;
                        s->dir_dirty = 1;
                }
                int tfd = zr_files_fd(s->chunks, tail_chunk(new_tail));
                if (tfd >= 0 && tail_offset(new_tail) < s->chunk_cap)
                        /* give the garbage after the frontier back to the file system;
                         * best effort (not every file system punches holes) */
                        (void)fallocate(tfd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
                                        (off_t)tail_offset(new_tail),
                                        (off_t)(s->chunk_cap - tail_offset(new_tail)));
                res.freed_bytes = before - ((uint64_t)fc * s->chunk_cap + fo);
        }
        pthread_mutex_lock(&s->append_lock);
        r = store_sync_locked(s, err);
        pthread_mutex_unlock(&s->append_lock);
out:
        if (ret)
                *ret = res;
        free(locs);
        free(order);
        free(idx);
        free(buf);
        return r;
}

/* Verifies record `index` alone (for a batch that failed): 0 or its error. */
static int verify_one(zr_store *s, uint64_t index, uint8_t **buf, uint64_t *buf_size,
                      zr_error *err) {
        zr_loc l;
        int r = store_locate_range(s, &index, 0, 1, &l,
                                   atomic_load_explicit(&s->tail, memory_order_acquire), err);
        if (r < 0)
                return r;
        if (l.logic_length > *buf_size || !*buf) {
                free(*buf);
                *buf_size = l.logic_length ? l.logic_length : 1;
                *buf = malloc(*buf_size);
                if (!*buf) {
                        *buf_size = 0;
                        return zr_error_set(err, ENOMEM, "verify: out of memory");
                }
        }
        void *dst = *buf;
        return zr_store_gather_locs(s, &l, 1, &dst, err);
}

typedef struct extent {
        uint64_t key; /* chunk << 32 | offset */
        uint64_t idx;
        uint64_t phys;
} extent;

static int cmp_extent(const void *a, const void *b) {
        const extent *x = a, *y = b;
        if (x->key != y->key)
                return x->key < y->key ? -1 : 1;
        return x->idx < y->idx ? -1 : x->idx > y->idx;
}

/* Two live records sharing bytes (a tail record twice, a bad table write) are
 * corruption even when each decodes. Counts each record that overlaps the one
 * before it in physical order. */
static void verify_overlaps(extent *ext, uint64_t n, zr_verify_report *rep, int *first_r,
                            zr_error *err) {
        qsort(ext, n, sizeof(*ext), cmp_extent);
        for (uint64_t i = 1; i < n; i++) {
                const extent *a = &ext[i - 1], *b = &ext[i];
                if (a->phys == 0 || b->phys == 0 || (a->key >> 32) != (b->key >> 32) ||
                    (a->key & UINT32_MAX) + a->phys <= (b->key & UINT32_MAX))
                        continue;
                uint64_t bad = a->idx > b->idx ? a->idx : b->idx;
                if (rep->bad++ == 0 || bad < rep->first_bad)
                        rep->first_bad = bad;
                if (!*first_r)
                        *first_r = zr_error_set(err, ZR_E_CORRUPT,
                                                "records %" PRIu64 " and %" PRIu64 " overlap in "
                                                "%" PRIu64 ".chunk at offset %" PRIu64,
                                                a->idx, b->idx, b->key >> 32,
                                                b->key & UINT32_MAX);
        }
}

int zr_store_verify(zr_store *s, zr_verify_report *ret, zr_error *err) {
        zr_verify_report rep = {0};
        uint64_t length = zr_store_length(s);
        zr_loc *locs = malloc(STORE_WALK_ENTRIES * sizeof(*locs));
        uint64_t *idx = malloc(STORE_WALK_ENTRIES * sizeof(*idx));
        extent *ext = NULL;
        uint64_t next = 0;
        uint8_t *buf = NULL;
        uint64_t buf_size = 0;
        int first_r = 0, r = 0;

        if (!locs || !idx) {
                r = zr_error_set(err, ENOMEM, "verify: out of memory");
                goto out;
        }
        if (length > 0 && length <= STORE_VERIFY_OVERLAP_MAX) {
                ext = malloc(length * sizeof(*ext));
                if (!ext) {
                        r = zr_error_set(err, ENOMEM, "verify: out of memory");
                        goto out;
                }
        }
        for (uint64_t k = 0; k < length;) {
                /* a batch: up to STORE_WALK_ENTRIES entries and STORE_VERIFY_BYTES
                 * bytes (at least one record), decoded in parallel */
                size_t n = length - k < STORE_WALK_ENTRIES ? length - k : STORE_WALK_ENTRIES;
                zr_error e = {0};
                size_t m = n;
                r = store_read_table(s, k, n, locs, idx, &e);
                if (r >= 0) {
                        uint64_t bytes = 0;
                        m = 0;
                        while (m < n &&
                               (m == 0 || bytes + locs[m].logic_length <= STORE_VERIFY_BYTES))
                                bytes += locs[m++].logic_length;
                        if (bytes > buf_size || !buf) {
                                free(buf);
                                buf_size = bytes ? bytes : 1;
                                buf = malloc(buf_size);
                                if (!buf) {
                                        buf_size = 0;
                                        r = zr_error_set(err, ENOMEM, "verify: out of memory");
                                        goto out;
                                }
                        }
                        gather_job j = { .s = s, .locs = locs, .n = m, .base = buf };
                        r = store_gather_run(s, &j, &e);
                        for (size_t i = 0; ext && i < m; i++)
                                ext[next++] = (extent){ tail_make(locs[i].chunk_id, locs[i].offset),
                                                        k + i, locs[i].phys_length };
                }
                if (r < 0) {
                        /* the batch holds a bad record: find each one */
                        for (size_t i = 0; i < m; i++) {
                                zr_error e1 = {0};
                                int r1 = verify_one(s, k + i, &buf, &buf_size, &e1);
                                if (r1 == -ENOMEM) {
                                        r = zr_error_set(err, ENOMEM, "verify: out of memory");
                                        goto out;
                                }
                                if (r1 < 0 && rep.bad++ == 0) {
                                        rep.first_bad = k + i;
                                        first_r = zr_error_set(err, -r1, "record %" PRIu64 ": %s",
                                                               k + i, e1.message);
                                }
                        }
                }
                rep.records += m;
                k += m;
        }
        if (ext) {
                verify_overlaps(ext, next, &rep, &first_r, err);
                rep.overlaps_checked = 1;
        }
        r = first_r;
out:
        if (ret)
                *ret = rep;
        free(ext);
        free(locs);
        free(idx);
        free(buf);
        return r;
}

int zr_store_sync(zr_store *s, zr_error *err) {
        int r;
        pthread_mutex_lock(&s->append_lock);
        r = store_sync_locked(s, err);
        pthread_mutex_unlock(&s->append_lock);
        return r;
}
