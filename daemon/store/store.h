/* store.h: a Zrecord store, the persistent record engine of zrecord.
 *
 * A store is a directory holding meta.zr (the 32-byte header), dict.zr (the zstd
 * dictionary of a zstd_dict store), {id}.loc record-table segments, {id}.chunk
 * data files and, only while a delete is in flight, delete.zr; the format is
 * specified in format.h and docs/FORMAT.md. It holds N records, each an opaque
 * byte string of 0 to 2^31 bytes, addressed by a dense index space 0..N-1. The store does not know about dtypes, shapes or sockets.
 *
 * Ownership: a store opened for writing is its writer's alone; one opened
 * read-only is shared by every reader. The lock is a flock() on meta.zr, on
 * the zr_store's own open file description (so two opens in one process are
 * two holders): exclusive for a writable open (zr_store_create(),
 * zr_store_open() without read_only, zr_store_make_writable()), shared for a
 * read-only one. A read-only open never writes a byte of the store, finishes
 * nothing a crash interrupted and takes no writer's lock, so any number of
 * processes (daemons of one machine, or of several over a file system whose
 * locks every machine sees: docs/MULTINODE.md) read one store at once, and a
 * backend that can only read (a remote store) can offer exactly this mode. An
 * opener that cannot have its lock gets ZR_E_LOCKED saying who holds the store
 * (holder.h: the pid from the kernel's lock table, the host from the writer's
 * record writer.zr) and what to do. The daemon opens every store read-only and
 * makes it writable at its first write (zr_store_make_writable()). Inside a
 * process one zr_store is shared.
 *
 * Concurrency: zr_store_gather*(), zr_store_locate(), zr_store_length(),
 * zr_store_stats(), zr_store_verify(), zr_store_read_dict() and zr_store_sync()
 * may run concurrently with each other and with zr_store_append() (appends
 * serialize among themselves; readers never lock). zr_store_delete(),
 * zr_store_compact(), zr_store_install_dict() and zr_store_close() need exclusive
 * access: the caller guarantees no other call on the store is in flight.
 *
 * Files: every file is opened beneath the store's directory, on its mount,
 * never through a link (resolve.h), and every file the store creates is new
 * (newfile.h: whatever had its name is removed first).
 *
 * Reads go through read-only mappings of the chunk and .loc files that are the
 * daemon's own and that nobody else may write (chunks.h), with pread otherwise
 * (or with no_mmap), always bounded by the files' sizes at open and the write
 * frontier. A mapped file truncated under an open store anyway (by the
 * daemon's own user) fails the read that meets it with ZR_E_CORRUPT instead
 * of a SIGBUS (util/mapguard.h); with pread it is a short read, the same
 * error.
 *
 * Durability: a write is ordered data, then table entries, then the length in
 * meta.zr. A process killed at any instant leaves a store that opens with a prefix
 * of its appended records, each bit-exact. A delete batch is all-or-nothing under a
 * crash, and a compaction leaves every record readable wherever it stops.
 * zr_store_sync() makes everything before it survive a power loss; what a power
 * loss between syncs can cost (appends since the last sync, records moved by an
 * interrupted compaction) is spelled out in docs/FORMAT.md. A failed fsync is
 * never retried: the store turns read-only (ZR_E_READONLY) and says why.
 *
 * Errors: every function that can fail returns a negative code (a -errno or a
 * -ZR_E_* of zr-errors.h) and fills *err (err may be NULL) with a one-line message.
 */
#ifndef ZR_STORE_STORE_H
#define ZR_STORE_STORE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "io/range.h"
#include "util/error.h"
#include "util/pool.h"

typedef struct zr_store zr_store;

enum zr_codec {
        ZR_CODEC_RAW = 0,       /* bytes as given */
        ZR_CODEC_ZSTD = 1,      /* zstd level 3, one frame per record, with checksum */
        ZR_CODEC_ZSTD_DICT = 2, /* zstd level 19 against the store's dictionary */
};

#define ZR_RECORD_MAX ((uint64_t)1 << 31) /* largest record, in bytes (inclusive) */

/* The physical location of one record, as the record table holds it. */
typedef struct zr_loc {
        uint32_t offset;       /* byte offset inside the chunk */
        uint32_t phys_length;  /* stored (compressed) size */
        uint32_t logic_length; /* original size: what a gather writes */
        uint32_t chunk_id;
} zr_loc;

typedef struct zr_store_options {
        /* Threads for compression and gathers; NULL runs everything on the caller.
         * Borrowed: must outlive the store. */
        zr_pool *pool;
        /* log2 of the chunk file capacity, 0 for the format's 32 (4 GiB). Only at
         * creation; recorded in the header (a reserved byte that is 0 for 4 GiB), so
         * an opener never needs it. Tests use small chunks to cross rollovers. */
        unsigned chunk_log2;
        /* Open for reading only: the shared lock (readers share the store, and
         * keep writers out); nothing of the store is written, not even to
         * finish a change a crash interrupted (zr_store_open()); every mutation
         * fails with ZR_E_READONLY. */
        int read_only;
        /* Read with pread() instead of through read-only mappings of the chunk
         * and .loc files. Mappings make a gather of small records cost no system
         * call per record (the table and data are read as memory); pread is the
         * fallback whenever a mapping cannot be made, and for every file that is
         * not the process's own or that others may write (chunks.h). Either way
         * every read is bounded by the file's size at open and by the write
         * frontier. */
        int no_mmap;
} zr_store_options;

typedef struct zr_stats {
        uint64_t records;     /* length */
        uint64_t live_bytes;  /* sum of phys_length over live records */
        uint64_t chunk_bytes; /* bytes up to the write frontier (all chunks) */
        uint64_t reclaimable; /* chunk_bytes - live_bytes: an upper bound on what compact frees */
        uint64_t logic_bytes; /* sum of logic_length over live records */
} zr_stats;

/* Creates a new, empty store in the directory `dirfd` (which must hold no meta.zr;
 * ZR_E_EXISTS otherwise) with `codec`. For ZR_CODEC_ZSTD_DICT, `dict`/`dict_len`
 * may give the dictionary now, or be NULL/0 to install one later with
 * zr_store_install_dict(); other codecs ignore them. `opts` may be NULL.
 * dirfd is duplicated; the caller keeps its own. On success returns 0 and sets
 * *ret to an open store owned by the caller (release with zr_store_close()).
 * ZR_E_LOCKED if another process is creating a store in the same directory.
 * meta.zr appears whole (written in an unnamed file, then linked): a create
 * killed at any instant leaves no store or an empty one, never a meta.zr
 * without its header (except on a system without O_TMPFILE or /proc). */
int zr_store_create(int dirfd, enum zr_codec codec, const void *dict, size_t dict_len,
                    const zr_store_options *opts, zr_store **ret, zr_error *err);

/* Opens the existing store in `dirfd`. A writable open redoes or discards an
 * interrupted delete batch (under its exclusive lock, so never while another
 * writer is alive), so the store it returns is consistent; a read-only open of
 * a store whose delete journal must be redone fails with ZR_E_READONLY (a
 * torn or stale journal it ignores): open it writable once. Errors:
 * ZR_E_NOT_STORE (no meta.zr), ZR_E_BAD_MAGIC, ZR_E_BAD_VERSION,
 * ZR_E_BAD_CODEC, ZR_E_CORRUPT (truncated header, missing or short files),
 * ZR_E_NO_DICT (zstd_dict store with a dictionary declared but no readable
 * dict.zr), ZR_E_LOCKED (another holder: a writer, or for a writable open any
 * holder; the message names it), ZR_E_READONLY. `opts` may be NULL. */
int zr_store_open(int dirfd, const zr_store_options *opts, zr_store **ret, zr_error *err);

/* Syncs (as zr_store_sync()), releases the lock and frees the store. NULL allowed.
 * Returns 0 or the sync's error, ZR_E_READONLY if the store had failed before
 * (its unsynced writes may be lost); the store is freed either way. A read-only
 * store returns 0. */
int zr_store_close(zr_store *s, zr_error *err);

/* Makes a store opened read-only (opts->read_only) writable through dirfd,
 * another descriptor of its directory: the first may have been on a read-only
 * mount, or given by someone through whose directory the store could not be
 * written. meta.zr and every open chunk and .loc file are opened O_RDWR again
 * through dirfd (zr_resolve_open()) and must be the very files the store has
 * open (EACCES otherwise); then the store works through dirfd (duplicated)
 * from now on. On failure nothing changes (EACCES, EROFS, ... as the opens
 * fail). The shared lock of the read-only open becomes an exclusive one
 * (ZR_E_LOCKED naming the other holders, nothing changed, if another open
 * file description shares the store) and the writer's record is left
 * (holder.h). A store that changed on disk since it was opened is ZR_E_STALE
 * (zr_store_check_unchanged()), never written on a view that is out of date.
 * The shared lock is let go for an instant: should another process take the
 * store in it, the store is stale (the ZR_E_LOCKED message says so). Returns
 * 0 at once for a writable store, ZR_E_READONLY for one that failed.
 * Exclusive. */
int zr_store_make_writable(zr_store *s, int dirfd, zr_error *err);

/* 1 if the store is read-only (opened so, and not made writable since). */
int zr_store_read_only(const zr_store *s);

/* For a read-only store: whether meta.zr still says what the store saw when
 * it opened (length, frontier, flags) and is still linked. While a reader
 * holds its shared lock nobody who honours the lock writes the store, so a
 * change means one who does not wrote it (loaderx 1.5.7, which takes no lock;
 * a daemon of another machine where the file system's locks stay on each
 * machine). Returns 0, or ZR_E_STALE once it differs, and from then on
 * (zr_store_stale()); the -errno of a failed read marks nothing. One fstat and
 * a 32-byte pread (a network file system may answer from its cache for a few
 * seconds). 0 at once for a writable store: its header is its own. Lock-free. */
int zr_store_check_unchanged(zr_store *s, zr_error *err);

/* 1 once the store was found changed on disk (zr_store_check_unchanged()) or
 * lost its lock (zr_store_make_writable()): its users must stop serving it
 * (ZR_E_STALE) and open it again. Lock-free. */
int zr_store_stale(const zr_store *s);

/* The (st_dev, st_ino) of the meta.zr the store has open. */
void zr_store_meta_id(const zr_store *s, dev_t *ret_dev, ino_t *ret_ino);

/* Number of records. Lock-free; an append in flight is not counted until committed. */
uint64_t zr_store_length(const zr_store *s);

/* The bytes of record data in the store's chunk files: each chunk before the
 * write frontier (its size, at most a chunk's capacity) and the tail chunk up
 * to the frontier; with the bytes of deleted records until a compaction. What
 * reading every record once brings into the page cache. Lock-free; an append
 * in flight may or may not be counted. */
uint64_t zr_store_data_bytes(const zr_store *s);

enum zr_codec zr_store_codec(const zr_store *s);

/* 1 if the store has a dictionary loaded, else 0. */
int zr_store_has_dict(const zr_store *s);

/* The store's own descriptor of its directory (borrowed: valid while the
 * store is open). For naming the store in telemetry, through /proc. */
int zr_store_dir_fd(const zr_store *s);

/* Installs `dict` (copied) as the dictionary of an empty ZR_CODEC_ZSTD_DICT store
 * and writes dict.zr durably. Checked in this order: ZR_E_BAD_CODEC for another
 * codec, ZR_E_SCHEMA if the store is not empty, ZR_E_HAS_DICT if one is
 * installed, ZR_E_READONLY, EINVAL for an empty or unusable dictionary.
 * Exclusive. */
int zr_store_install_dict(zr_store *s, const void *dict, size_t dict_len, zr_error *err);

/* Copies the dictionary into a new malloc()ed buffer (*ret, *ret_len), owned by
 * the caller. ZR_E_NO_DICT if there is none. */
int zr_store_read_dict(zr_store *s, void **ret, size_t *ret_len, zr_error *err);

/* Appends n records. Record i is lens[i] bytes at data + (sum of lens[0..i)); the
 * records are packed back to back. Compresses on the pool, assigns locations in
 * order (a record never straddles a chunk), writes, commits the table, then the
 * length. On success returns 0 and sets *ret_first (may be NULL) to the index of
 * the first new record. On failure nothing is visible: the length is unchanged.
 * ZR_E_TOO_BIG for a record over ZR_RECORD_MAX, ZR_E_NO_DICT for a zstd_dict store
 * without a dictionary, ZR_E_READONLY. n == 0 succeeds and changes nothing. */
int zr_store_append(zr_store *s, const void *data, const uint64_t *lens, size_t n,
                    uint64_t *ret_first, zr_error *err);

/* The compression levels a writer may ask for, in zstd's scale (level 20 and
 * up need far more memory than a record needs; negative levels are not
 * offered). */
#define ZR_LEVEL_MIN 1
#define ZR_LEVEL_MAX 19

/* As zr_store_append(), compressing at `level` (codec.h: 0 the codec's default,
 * else ZR_LEVEL_MIN..ZR_LEVEL_MAX; EINVAL outside, nothing written). A raw
 * store ignores it. */
int zr_store_append_level(zr_store *s, int level, const void *data, const uint64_t *lens,
                          size_t n, uint64_t *ret_first, zr_error *err);

/* As zr_store_append() for a raw store, each record's first hdr_bytes apart
 * from its payload: record i is hdrs[i × hdr_bytes ..][0..hdr_bytes) then its
 * lens[i] − hdr_bytes payload bytes, the payloads back to back at data. The
 * records are written as if woven (pwritev), without a copy that weaves them.
 * EINVAL for a compressed store or a record shorter than its header. */
int zr_store_append_split(zr_store *s, const void *hdrs, size_t hdr_bytes, const void *data,
                          const uint64_t *lens, size_t n, uint64_t *ret_first, zr_error *err);

/* Reads the table entries of records idx[0..n) into ret_locs[0..n) (decoded
 * from the .loc mapping, or one pread per run of consecutive indices). Lock-free.
 * ZR_E_RANGE for an index >= length (nothing read), ZR_E_CORRUPT for an entry
 * that points past its chunk or the write frontier, or has impossible lengths. */
int zr_store_locate(zr_store *s, const uint64_t *idx, size_t n, zr_loc *ret_locs,
                    zr_error *err);

/* Decodes record locs[i] into dsts[i], which has room for locs[i].logic_length
 * bytes, for every i, on the pool (contiguous shards; one zstd context per
 * thread; decompressed straight into dsts[i]). Every loc is checked first as
 * zr_store_locate() does (ZR_E_CORRUPT), so locs from anywhere are safe.
 * ZR_E_DECODE if a frame does not decode to exactly logic_length bytes (checksum
 * included), ZR_E_NO_DICT for a zstd_dict store without its dictionary. On
 * failure the contents of the dsts are unspecified. n == 0 returns 0. Raw
 * records are copied with streaming stores when the batch is large
 * (zr_copy_streams(), util/copy.h). */
int zr_store_gather_locs(zr_store *s, const zr_loc *locs, size_t n, void *const *dsts,
                         zr_error *err);

/* Asks the CPU for the first cache line of each raw record locs[i] read
 * through the chunks' mappings (a hint: nothing is checked or read, a loc
 * past its file or of a compressed store is skipped), so that a gather of
 * many small records scattered over the store, started some microseconds
 * later, finds their first lines and pages' translations at hand. Only for
 * records whose pages the daemon has mapped already (a prefetch of a page
 * the mapping has not faulted in stalls like a load on some VMs). */
void zr_store_prefetch_locs(const zr_store *s, const zr_loc *locs, size_t n);

/* What a timed gather (zr_store_gather_timed(), _dense_timed()) measured, summed
 * over its shards: they run in parallel, so the sums are worker time, not
 * wall time (the caller splits its own wall time by them). Shards add to it
 * with atomics; the caller zeroes it and sets sample_io. Where records are
 * read through the chunks' mappings, a timed shard first touches one byte of
 * every page of its records (a fault then reads the page, exactly as the copy
 * or decode would have: no read-around), so "read" is the faults and "decode"
 * or "copy" run on resident pages; through pread, each pread is "read". */
typedef struct zr_store_times {
        int sample_io;                 /* in: also count device bytes (ru_inblock of the
                                        * shard's thread: two getrusage calls a shard) */
        _Atomic uint64_t lookup_ns;    /* a dense one-pass gather's table lookups */
        _Atomic uint64_t read_ns;      /* faulting pages in, preads */
        _Atomic uint64_t decode_ns;    /* decompressing (zstd, zstd_dict) */
        _Atomic uint64_t copy_ns;      /* copying raw records */
        _Atomic uint64_t pages;        /* pages of records touched through mappings */
        _Atomic uint64_t preads;       /* preads of records (of a run of raw ones: one) */
        _Atomic uint64_t device_bytes; /* sample_io: read from the device meanwhile */
} zr_store_times;

/* How a gather reads its records (zr_store_gather_timed(), _dense_timed()),
 * the caller's choice, any of: */
enum {
        /* copy raw records with streaming stores (util/copy.h): zr_copy_streams()
         * of the memory the caller's gathers cycle through */
        ZR_GATHER_STREAM = 1u << 0,
        /* read records with pread(), never through the chunks' mappings: for
         * records mostly not resident (a loader's step read ahead). The pages
         * then never enter the daemon's page tables, so reclaiming them later
         * unmaps nothing (docs/IO.md, "Where the CPU goes") */
        ZR_GATHER_PREAD = 1u << 1,
};

/* zr_store_gather_locs() read as `how` says (ZR_GATHER_*) that measures its
 * stages into *t (NULL: it does not, and costs what zr_store_gather_locs()
 * costs). Same errors. */
int zr_store_gather_timed(zr_store *s, const zr_loc *locs, size_t n, void *const *dsts,
                          unsigned how, zr_store_times *t, zr_error *err);

/* ZR_E_RANGE, naming the first, if an index of idx[0..n) is >= the length. */
int zr_store_check_range(zr_store *s, const uint64_t *idx, size_t n, zr_error *err);

/* Gathers records idx[0..n), each `item` bytes (a dense dataset's), into dst
 * (n × item bytes), record i at i × item, in one pass: each of the pool's
 * contiguous shards locates, checks and reads its own records, so the table
 * lookups run in parallel and overlap the copies. `scratch` holds n entries.
 * ZR_E_RANGE for an index >= length (dst untouched), ZR_E_CORRUPT for a record
 * that is not `item` bytes or an entry zr_store_locate() would refuse, and the
 * errors of zr_store_gather_locs(); on failure dst's bytes are unspecified.
 * Streams as zr_store_gather_locs() does, by n × item. */
int zr_store_gather_dense(zr_store *s, const uint64_t *idx, size_t n, uint64_t item, void *dst,
                          zr_loc *scratch, zr_error *err);

/* zr_store_gather_dense() read as `how` says (ZR_GATHER_*, as for
 * zr_store_gather_timed()) that also measures its stages into *t (NULL: it
 * does not), its shards' lookups included. Same errors. */
int zr_store_gather_dense_timed(zr_store *s, const uint64_t *idx, size_t n, uint64_t item,
                                void *dst, zr_loc *scratch, unsigned how, zr_store_times *t,
                                zr_error *err);

/* Gathers records idx[0..n) (any order, repeats allowed) packed back to back
 * into dst (dst_size bytes). ret_lens (may be NULL) receives each record's
 * length. ZR_E_BUFFER if the records do not fit and ZR_E_RANGE for an index >=
 * length (dst untouched in both cases), and the errors of
 * zr_store_gather_locs(). Allocates one n-entry table per call, never per
 * record. */
int zr_store_gather(zr_store *s, const uint64_t *idx, size_t n, void *dst,
                    uint64_t dst_size, uint64_t *ret_lens, zr_error *err);

/* Deletes records idx[0..n) (any order; duplicates are an error, EINVAL) by
 * swap-last: each hole, in descending index order, takes the current last
 * record, and the length drops by n. Atomic under a crash (through delete.zr)
 * and durable when it returns: it syncs before and after, so it costs a few
 * fsyncs. ZR_E_RANGE for an index >= length, EINVAL for a duplicate (nothing
 * changes in either case), ZR_E_READONLY. n == 0 returns 0. Exclusive. */
int zr_store_delete(zr_store *s, const uint64_t *idx, size_t n, zr_error *err);

typedef struct zr_compact_result {
        uint64_t moved;       /* records rewritten */
        uint64_t skipped;     /* records already in place */
        uint64_t via_scratch; /* moves that overlapped their own bytes and went
                               * through scratch space past the frontier (twice
                               * the writes) */
        uint64_t freed_bytes; /* chunk_bytes before minus after */
        int finished;         /* 1 if the pass completed, 0 if stopped by max_moves */
} zr_compact_result;

/* Rewrites live records densely in physical order, in place; each table entry is
 * updated as its record lands, so an interrupted pass leaves a consistent store
 * and running it again finishes the job. Removes chunk files past the new
 * frontier. max_moves > 0 stops after that many moves (for tests); 0 runs to the
 * end. ret (may be NULL) receives what was done (also on failure). Holds the
 * whole table in memory (32 bytes per record). Safe against a process kill at
 * any instant; see docs/FORMAT.md for a power loss during a pass. Exclusive. */
int zr_store_compact(zr_store *s, uint64_t max_moves, zr_compact_result *ret,
                     zr_error *err);

/* Fills *ret. Walks the table (O(N), sequential). May run beside an append. */
int zr_store_stats(zr_store *s, zr_stats *ret, zr_error *err);

/* Makes every committed record durable: fsync chunk files, then .loc segments,
 * then meta.zr (and the directory if a file was removed since the last sync;
 * created files are made durable as they are created). A failure turns the
 * store read-only for good and returns the error; on a failed store it returns
 * ZR_E_READONLY. Returns 0 on a read-only store. Serializes with appends. */
int zr_store_sync(zr_store *s, zr_error *err);

typedef struct zr_verify_report {
        uint64_t records;  /* records checked */
        uint64_t bad;      /* records that failed (0 when the store is sound) */
        uint64_t first_bad; /* index of the first bad record, if any */
        int overlaps_checked; /* 1 if live records were checked for sharing bytes
                               * (done up to 2^24 records) */
} zr_verify_report;

/* Reads and decodes every record (checksums included) and checks every table
 * entry against its chunk, in parallel batches of bounded memory (64 MiB, or one
 * record if larger). Returns 0 if sound, ZR_E_CORRUPT or ZR_E_DECODE with the
 * first bad record's index and problem in *err otherwise (it goes on to count
 * the rest); *ret (may be NULL) counts. Two live records whose bytes overlap
 * (a record listed twice) are ZR_E_CORRUPT too. Raw records carry no checksum: verify
 * proves a raw record readable, not unchanged. */
int zr_store_verify(zr_store *s, zr_verify_report *ret, zr_error *err);

/* If the store turned read-only after an I/O failure, the code that caused it
 * (positive), else 0. */
int zr_store_failed(const zr_store *s);

/* Reading ahead of a gather (daemon/io).
 *
 * The chunk files are read at random: their descriptors carry
 * POSIX_FADV_RANDOM and their mappings MADV_RANDOM, so a gather (a fault or a
 * pread) brings in only the pages of its records, never the kernel's
 * read-around window. A reader that knows its future warms the page cache
 * itself: it asks which records are resident (zr_store_resident()), turns the
 * others into byte ranges of the chunk files (zr_store_io_ranges()) and reads
 * those through io/ioq.h; the gather then copies from the page cache. Verify
 * and compaction hint the ranges they walk (io/hint.h) for the same reason.
 *
 * The ranges name the store's own descriptors. They stay valid while the
 * store is open and no exclusive call (zr_store_delete(), zr_store_compact(),
 * zr_store_install_dict(), zr_store_close()) runs: compaction removes chunk
 * files, and a descriptor number closed under a read in flight could name
 * another file by the time the read is issued. So cancel every read of a
 * store's ranges, and wait for the cancellations to complete, before an
 * exclusive call. Appends do not invalidate them. */

/* Turns records locs[0..n) (from zr_store_locate()) into byte ranges of the
 * chunk files, one per record with stored bytes, in input order, unmerged
 * (the I/O queue merges): ret[0..*ret_n) with *ret_n <= n; ret has room for n.
 * Each range starts on a page boundary and ends on one, or at the file's end
 * when that comes first, so it covers exactly the pages the record occupies.
 * Lock-free. ZR_E_CORRUPT for a loc that points past its chunk or the write
 * frontier, or into a chunk that is not open (nothing is written to ret then
 * beyond the ranges before it). */
int zr_store_io_ranges(zr_store *s, const zr_loc *locs, size_t n, zr_io_range *ret,
                       size_t *ret_n, zr_error *err);

/* Sets ret[i] (ret may be NULL) to 1 if every page of record locs[i] is in the
 * page cache, else 0, and returns how many are resident. A record of 0 stored
 * bytes is resident. Asked of cachestat(2) on the chunk's descriptor, or, where
 * the kernel lacks it or a filter refuses it, of mincore() on the chunk's
 * mapping; where neither can tell (no mapping: no_mmap, a failed mmap, a
 * record past the mapping because the file grew after open; a loc past its
 * chunk) residency is counted as not resident: the caller reads it, which is
 * correct, only slower. Lock-free; costs one system call per record (more for
 * records over 1 MiB through mincore()). */
size_t zr_store_resident(zr_store *s, const zr_loc *locs, size_t n, uint8_t *ret);

#endif
