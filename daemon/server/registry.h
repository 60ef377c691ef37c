/* registry.h: the datasets the daemon has open, shared by every client.
 *
 * A store is identified by its directory's (st_dev, st_ino) (PROTOCOL.md
 * section 6): two clients that open it share one zr_dataset, and with it its
 * lock and generation (dataset.h). An entry lives while any handle, set or job
 * holds a reference; the last unref syncs and closes the store.
 *
 * Sharing is only among openers that resolve the same files. The instance's
 * files were opened through the first opener's directory descriptor, beneath
 * it and on its mount (store/resolve.h); a later opener shares it only if its
 * own directory resolves meta.zr to the very file the instance holds
 * (ZR_E_LOCKED if meta.zr was replaced since). The later opener's directory
 * is not used for anything else, so what it has mounted over the store's
 * names in its own namespace changes nothing.
 *
 * Reading never takes a writer's lock: every store is opened read-only, with
 * the shared lock on its meta.zr (store.h, "Ownership"), so that other
 * daemons (of this machine, or of others over a shared file system) may read
 * it at once. An opener with write access (an O_RDWR meta.zr) leaves the
 * directory it came through with the entry (zr_entry_offer_write_dir(): the
 * latest such opener's); the first mutation makes the instance writable
 * through it (zr_entry_make_writable(), in the mutation's job under the
 * dataset's exclusive lock: zr_mutation_begin()), which takes the exclusive
 * lock or fails with ZR_E_LOCKED naming who holds the store. From then on the
 * instance is writable for every handle with write access, until it closes.
 * A read-only path (a read-only mount, files the daemon may not write) never
 * pins a store read-only for the others: a later opener with write access
 * brings a directory the daemon can write through.
 *
 * A store left mid-change by a crash (a delete journal to redo, a loaderx
 * 1.5.7 ragged store with a delete noted or records without shapes) does not
 * open read-only (ZR_E_READONLY). zr_registry_open_dataset() then opens it
 * writable, which finishes the change under the exclusive lock (so never while
 * a writer may be alive: a live writer holds that lock), closes it and opens it
 * read-only again. Where the daemon may not write it, the open fails with that
 * ZR_E_READONLY; where another process holds the store, with ZR_E_LOCKED.
 *
 * Threads: the table (lookup, insert, ref, unref) belongs to the loop thread.
 * A job on a worker uses an entry it holds a reference on: its dataset, under
 * the dataset's lock.
 *
 * Locking (lock order: datasets by ascending id, then the store's own locks;
 * an entry's write_mu is a leaf, taken alone or under its dataset's lock):
 *   - shared: gathers (READ, loader gathers), APPEND to one dataset (the store
 *     serialises appends itself), STATS, SYNC, VERIFY, TRAIN_DICT;
 *   - exclusive: DELETE, COMPACT, INSTALL_DICT, an APPEND through a set (every
 *     stream, so the set commits as one).
 * Requests take them through zr_mutation_begin() (request.h) or, to read,
 * zr_dataset_lock().
 */
#ifndef ZR_SERVER_REGISTRY_H
#define ZR_SERVER_REGISTRY_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/types.h>

#include "dataset/dataset.h"
#include "util/error.h"
#include "server/work.h"
#include "util/pool.h"

typedef struct zr_registry zr_registry;

typedef struct zr_entry {
        /* stable for the entry's life */
        dev_t dev;
        ino_t ino;
        dev_t meta_dev;               /* the meta.zr the instance holds */
        ino_t meta_ino;
        zr_dataset *ds;               /* its id is the entry's (logs, lock order) */
        /* loop thread only */
        bool read_only;               /* not made writable yet (zr_entry_update()) */
        unsigned refs;
        uint64_t synced_generation;   /* the generation a closing sync covered */
        bool syncing;                 /* a closing sync is on the pool */
        zr_registry *reg;
        struct zr_entry *next;
        /* the directory of the latest opener with write access, or -1: set on
         * the loop, taken by a mutation's job (zr_entry_make_writable()) */
        pthread_mutex_t write_mu;
        int write_dirfd;
} zr_entry;

int zr_registry_new(zr_pool *pool, zr_registry **ret);

/* Lets the last unref of a written store sync it on the pool (`work`) before
 * the close; NULL (the default, and at shutdown) closes at once. */
void zr_registry_set_work(zr_registry *reg, zr_work *work);

/* Closes (syncing) every entry still open, whatever its references, and frees.
 * Only at shutdown, with no job in flight. NULL allowed; returns NULL. */
zr_registry *zr_registry_free(zr_registry *reg);

/* The open entry of the store in directory `dirfd` (fstat), with a new
 * reference, if dirfd resolves meta.zr to the file it holds (ZR_E_LOCKED if
 * not), or opens it read-only (zr_registry_open_dataset()) and inserts it.
 * Returns 0 and sets *ret, or a negative code with *err set. */
int zr_registry_open(zr_registry *reg, int dirfd, zr_entry **ret, zr_error *err);

/* An opener with write access came through dirfd (borrowed; duplicated): the
 * directory e's store is made writable through at its first mutation, unless
 * it is writable already. Replaces the one an earlier opener left. Loop
 * thread. */
void zr_entry_offer_write_dir(zr_entry *e, int dirfd);

/* Makes e's store writable, if it is not, through the directory an opener
 * with write access left (zr_dataset_make_writable()): the exclusive lock on
 * its meta.zr, or ZR_E_LOCKED naming who holds the store; EACCES, EROFS, ...
 * where the daemon cannot write through that directory; ZR_E_READONLY if no
 * opener with write access came. In a job, with the dataset's exclusive lock
 * held; back on the loop, zr_entry_update() notes the outcome in
 * e->read_only. */
int zr_entry_make_writable(zr_entry *e, zr_error *err);
void zr_entry_update(zr_entry *e);

/* The same in steps, so that the open itself runs on a worker: opening a store
 * of loaderx 1.5.7's ragged layout decodes its whole shape list (megabytes for
 * millions of records), which must not hold the loop.
 *   zr_registry_lookup()  (loop) the entry of the store in `dirfd`, with a new
 *                         reference, or NULL; *ret_st (may be NULL) its identity.
 *                         NULL with *err set if dirfd cannot be fstat()ed, or
 *                         if the entry holds another meta.zr than dirfd
 *                         resolves (ZR_E_LOCKED: replaced since).
 *   zr_registry_open_job()  (a worker) opens the dataset in `dirfd` (identity
 *                         *st) as zr_registry_open() would. When another job
 *                         of this daemon holds the store's lock (two clients
 *                         opening it at once), it waits for that job's dataset
 *                         to be adopted (it then returns ZR_E_LOCKED: look the
 *                         entry up on the loop) or let go (it then tries again);
 *                         the lock of an entry or of another process is
 *                         ZR_E_LOCKED at once. On success the job must hand the
 *                         dataset to exactly one of:
 *   zr_registry_adopt()   (loop) inserts it with one reference; if the same store
 *                         was opened meanwhile, closes it and returns that entry
 *                         (ZR_E_LOCKED if that one holds another meta.zr);
 *   zr_registry_abandon() (loop) closes it (the client went away).
 * The registry keeps, under a mutex of its own, which stores jobs are opening
 * and which an entry holds; a waiting job holds its worker only while another
 * job, already running, finishes its open. */
zr_entry *zr_registry_lookup(zr_registry *reg, int dirfd, struct stat *ret_st, zr_error *err);
int zr_registry_open_job(zr_registry *reg, int dirfd, const struct stat *st, zr_dataset **ret,
                         zr_error *err);
/* zr_registry_open_job() with another way to open the dataset of dirfd: a
 * store in object storage opens on its mirror directory (rdataset.h), and
 * its ZR_E_LOCKED means as a store's does (another job of this daemon opens
 * it: wait for it). */
typedef int zr_registry_opener(void *arg, zr_pool *pool, int dirfd, zr_dataset **ret,
                               zr_error *err);
int zr_registry_open_job_with(zr_registry *reg, int dirfd, const struct stat *st,
                              zr_registry_opener *open, void *arg, zr_dataset **ret,
                              zr_error *err);
int zr_registry_adopt(zr_registry *reg, zr_dataset *ds, const struct stat *st, zr_entry **ret,
                      zr_error *err);
void zr_registry_abandon(zr_registry *reg, zr_dataset *ds, const struct stat *st);

/* Opens the dataset in `dirfd` read-only (the shared lock), as
 * zr_registry_open() would, finishing first a change a crash interrupted
 * (above); touches no registry state (any thread). */
int zr_registry_open_dataset(zr_pool *pool, int dirfd, zr_dataset **ret, zr_error *err);

/* Creates a dataset in the empty directory `dirfd` with the registry's pool
 * (any thread: this is the blocking part, fsyncs included, meant for a job).
 * Errors as zr_dataset_create(). */
int zr_registry_create_dataset(zr_pool *pool, int dirfd, const zr_schema *schema,
                               const void *dict, size_t dict_len, zr_dataset **ret,
                               zr_error *err);
/* Inserts a dataset just created (taken, closed on failure) as the store of
 * directory (dev, ino), with one reference. ZR_E_EXISTS if that store is open. */
int zr_registry_insert(zr_registry *reg, zr_dataset *ds, dev_t dev, ino_t ino, zr_entry **ret,
                       zr_error *err);
/* The pool the registry's stores use. */
zr_pool *zr_registry_pool(const zr_registry *reg);

zr_entry *zr_entry_ref(zr_entry *e);
/* Drops a reference. The last one closes the store: at once if it was not
 * written since its last closing sync, else after a sync on the pool (the entry
 * stays findable meanwhile). NULL allowed; returns NULL. */
zr_entry *zr_entry_unref(zr_entry *e);

/* A close that answers only once the store is let go (CLOSE of the last handle
 * of a written store: its files cut to their data and its lock released before
 * the client hears back, so that what it runs next finds the store closed).
 *   zr_entry_closing_sync()  (loop) the generation a closing sync of e would
 *                            cover, or 0 if e needs none (not written since
 *                            the last);
 *   zr_entry_sync_for_close() (a job, with a reference) that sync;
 *   zr_entry_synced()        (loop, after it) notes that generation synced, so
 *                            that dropping the last reference closes at once. */
uint64_t zr_entry_closing_sync(const zr_entry *e);
int zr_entry_sync_for_close(zr_entry *e, zr_error *err);
void zr_entry_synced(zr_entry *e, uint64_t generation);

/* The entry's id: its dataset's (never 0). */
static inline uint64_t zr_entry_id(const zr_entry *e) {
        return zr_dataset_id(e->ds);
}

/* Number of open entries. */
unsigned zr_registry_count(const zr_registry *reg);

/* Calls fn for every open entry (loop thread; fn must not unref the last
 * reference of an entry other than through the references it took itself). */
void zr_registry_foreach(zr_registry *reg, void (*fn)(zr_entry *e, void *arg), void *arg);

#endif
