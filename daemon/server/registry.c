/* registry.c: open datasets by store identity (registry.h).
 *
 * A short singly linked list: a daemon has tens of stores open, not thousands,
 * and every lookup is at an open, never per batch. Opening runs on the loop
 * thread (a header, a schema and a few table pages). When the last reference
 * of a store that was written goes, its sync (fsyncs of everything appended)
 * runs on the pool first, the entry kept open meanwhile so that a client that
 * reopens it at once finds it; only the cheap close of a synced store runs on
 * the loop.
 * It does not check access: the caller has proven it (PROTOCOL.md section 6).
 * Whether a file is read through a mapping or with pread is the store's
 * decision, file by file (store/chunks.h).
 */
#include "server/registry.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "store/resolve.h"

#define META_FILE "meta.zr"

/* A store that jobs open (registry.h, zr_registry_open_job()), under the mutex. */
typedef struct opening {
        dev_t dev;
        ino_t ino;
        unsigned busy;     /* jobs opening it, or holding it not yet adopted */
        unsigned waiters;  /* jobs waiting for those */
        bool held;         /* an entry holds it */
        struct opening *next;
} opening;

struct zr_registry {
        zr_pool *pool;
        zr_work *work;         /* NULL: close synchronously */
        zr_entry *head;
        unsigned count;
        /* shared with the workers */
        pthread_mutex_t mu;
        pthread_cond_t cv;
        opening *opening;
};

int zr_registry_new(zr_pool *pool, zr_registry **ret) {
        zr_registry *reg = calloc(1, sizeof(*reg));
        if (!reg)
                return -ENOMEM;
        reg->pool = pool;
        pthread_mutex_init(&reg->mu, NULL);
        pthread_cond_init(&reg->cv, NULL);
        *ret = reg;
        return 0;
}

/* The record of (dev, ino), made if `make` (NULL when out of memory). Under mu. */
static opening *opening_get(zr_registry *reg, dev_t dev, ino_t ino, bool make) {
        opening *o;

        for (o = reg->opening; o; o = o->next)
                if (o->dev == dev && o->ino == ino)
                        return o;
        if (!make || !(o = calloc(1, sizeof(*o))))
                return NULL;
        o->dev = dev;
        o->ino = ino;
        o->next = reg->opening;
        reg->opening = o;
        return o;
}

/* Frees the record if nothing refers to it any more. Under mu. */
static void opening_put(zr_registry *reg, opening *o) {
        if (!o || o->busy || o->waiters || o->held)
                return;
        for (opening **p = &reg->opening; *p; p = &(*p)->next)
                if (*p == o) {
                        *p = o->next;
                        break;
                }
        free(o);
}

/* Sets whether an entry holds the store, and wakes the jobs waiting on it. */
static void opening_held(zr_registry *reg, dev_t dev, ino_t ino, bool held) {
        pthread_mutex_lock(&reg->mu);
        opening *o = opening_get(reg, dev, ino, held);
        if (o) {
                o->held = held;
                opening_put(reg, o);
        }
        pthread_cond_broadcast(&reg->cv);
        pthread_mutex_unlock(&reg->mu);
}

/* A job is done with the store: it failed to open it, or its dataset was adopted
 * or closed. */
static void opening_leave(zr_registry *reg, dev_t dev, ino_t ino) {
        pthread_mutex_lock(&reg->mu);
        opening *o = opening_get(reg, dev, ino, false);
        if (o && o->busy) {
                o->busy--;
                opening_put(reg, o);
        }
        pthread_cond_broadcast(&reg->cv);
        pthread_mutex_unlock(&reg->mu);
}

static void entry_free(zr_entry *e) {
        zr_dataset_close(e->ds, NULL);
        opening_held(e->reg, e->dev, e->ino, false);
        if (e->write_dirfd >= 0)
                close(e->write_dirfd);
        pthread_mutex_destroy(&e->write_mu);
        free(e);
}

zr_registry *zr_registry_free(zr_registry *reg) {
        if (!reg)
                return NULL;
        while (reg->head) {
                zr_entry *e = reg->head;
                reg->head = e->next;
                entry_free(e);
        }
        while (reg->opening) {
                opening *o = reg->opening;
                reg->opening = o->next;
                free(o);
        }
        pthread_cond_destroy(&reg->cv);
        pthread_mutex_destroy(&reg->mu);
        free(reg);
        return NULL;
}

static int insert(zr_registry *reg, zr_dataset *ds, const struct stat *st, zr_entry **ret,
                  zr_error *err) {
        zr_entry *e = calloc(1, sizeof(*e));
        if (!e) {
                zr_dataset_close(ds, NULL);
                return zr_error_errno(err, ENOMEM, "registering a dataset");
        }
        e->dev = st->st_dev;
        e->ino = st->st_ino;
        e->ds = ds;
        e->write_dirfd = -1;
        pthread_mutex_init(&e->write_mu, NULL);
        zr_store_meta_id(zr_dataset_store(ds), &e->meta_dev, &e->meta_ino);
        zr_entry_update(e);
        e->refs = 1;
        e->reg = reg;
        e->next = reg->head;
        reg->head = e;
        reg->count++;
        opening_held(reg, e->dev, e->ino, true);
        *ret = e;
        return 0;
}

/* 0 if dirfd resolves meta.zr to the file e holds. */
static int same_meta(const zr_entry *e, int dirfd, zr_error *err) {
        struct stat st;
        int r = zr_resolve_stat(dirfd, META_FILE, 0, &st, err);
        if (r == 0 && (st.st_dev != e->meta_dev || st.st_ino != e->meta_ino))
                r = zr_error_set(err, ZR_E_LOCKED, "the daemon has this store open with another "
                                 META_FILE " than the directory holds now (replaced since)");
        return r;
}

/* The entry of (dev, ino) that is not stale: one found changed on disk (store.h)
 * serves only the handles that had it, and a new opener gets a new instance. */
static zr_entry *find(zr_registry *reg, dev_t dev, ino_t ino) {
        for (zr_entry *e = reg->head; e; e = e->next)
                if (e->dev == dev && e->ino == ino && !zr_store_stale(zr_dataset_store(e->ds)))
                        return e;
        return NULL;
}

zr_entry *zr_registry_lookup(zr_registry *reg, int dirfd, struct stat *ret_st, zr_error *err) {
        struct stat st;

        if (fstat(dirfd, &st) < 0) {
                zr_error_errno(err, errno, "fstat of the store directory");
                return NULL;
        }
        if (ret_st)
                *ret_st = st;
        zr_entry *e = find(reg, st.st_dev, st.st_ino);
        /* a read-only instance is shared only while meta.zr says what it saw */
        if (e && zr_store_check_unchanged(zr_dataset_store(e->ds), NULL) == -ZR_E_STALE)
                e = NULL;
        if (e && same_meta(e, dirfd, err) < 0)
                return NULL;
        return zr_entry_ref(e);
}

int zr_registry_open_dataset(zr_pool *pool, int dirfd, zr_dataset **ret, zr_error *err) {
        zr_store_options opts = {.pool = pool, .read_only = 1};
        zr_error rerr = {0};
        zr_dataset *w = NULL;
        int r = zr_dataset_open(dirfd, &opts, ret, &rerr);

        if (r != -ZR_E_READONLY)
                return r < 0 ? zr_error_set(err, rerr.code, "%s", rerr.message) : r;
        /* Left mid-change by a crash: a writable open finishes the change under
         * the exclusive lock, then the store is opened for reading again. */
        opts.read_only = 0;
        zr_error werr = {0};
        r = zr_dataset_open(dirfd, &opts, &w, &werr);
        if (r == -ZR_E_LOCKED)
                return zr_error_set(err, werr.code, "%s", werr.message);
        if (r < 0)
                return zr_error_set(err, rerr.code, "%s (finishing it: %s)", rerr.message,
                                    werr.message);
        r = zr_dataset_close(w, &werr);
        if (r < 0)
                return zr_error_set(err, werr.code, "%s", werr.message);
        opts.read_only = 1;
        return zr_dataset_open(dirfd, &opts, ret, err);
}

int zr_registry_open_job(zr_registry *reg, int dirfd, const struct stat *st, zr_dataset **ret,
                         zr_error *err) {
        return zr_registry_open_job_with(reg, dirfd, st, NULL, NULL, ret, err);
}

int zr_registry_open_job_with(zr_registry *reg, int dirfd, const struct stat *st,
                              zr_registry_opener *open, void *arg, zr_dataset **ret,
                              zr_error *err) {
        for (;;) {
                bool waited = false, held;
                opening *o;
                int r;

                pthread_mutex_lock(&reg->mu);
                o = opening_get(reg, st->st_dev, st->st_ino, true);
                if (o)
                        o->busy++;
                pthread_mutex_unlock(&reg->mu);
                if (!o)
                        return zr_error_errno(err, ENOMEM, "opening a store");
                r = open ? open(arg, reg->pool, dirfd, ret, err)
                         : zr_registry_open_dataset(reg->pool, dirfd, ret, err);
                if (r != -ZR_E_LOCKED) {
                        if (r < 0)
                                opening_leave(reg, st->st_dev, st->st_ino);
                        return r; /* opened: busy until adopted or abandoned */
                }
                /* locked: by another job of this daemon (wait for it), by an entry
                 * (the caller finds it), or by another process (the error) */
                pthread_mutex_lock(&reg->mu);
                o->busy--;
                o->waiters++;
                while (!o->held && o->busy > 0) {
                        waited = true;
                        pthread_cond_wait(&reg->cv, &reg->mu);
                }
                o->waiters--;
                held = o->held;
                opening_put(reg, o);
                pthread_mutex_unlock(&reg->mu);
                if (held || !waited)
                        return r;
                zr_error_clear(err); /* the other let it go unadopted: try again */
        }
}

int zr_registry_adopt(zr_registry *reg, zr_dataset *ds, const struct stat *st, zr_entry **ret,
                      zr_error *err) {
        zr_entry *e = find(reg, st->st_dev, st->st_ino);
        int r = 0;

        if (e) {
                dev_t dev;
                ino_t ino;
                zr_store_meta_id(zr_dataset_store(ds), &dev, &ino);
                zr_dataset_close(ds, NULL);
                if (dev != e->meta_dev || ino != e->meta_ino)
                        r = zr_error_set(err, ZR_E_LOCKED, "the daemon has this store open with "
                                         "another " META_FILE " (replaced since)");
                else
                        *ret = zr_entry_ref(e);
        } else {
                r = insert(reg, ds, st, ret, err);
        }
        opening_leave(reg, st->st_dev, st->st_ino);
        return r;
}

void zr_registry_abandon(zr_registry *reg, zr_dataset *ds, const struct stat *st) {
        zr_dataset_close(ds, NULL);
        opening_leave(reg, st->st_dev, st->st_ino);
}

int zr_registry_open(zr_registry *reg, int dirfd, zr_entry **ret, zr_error *err) {
        struct stat st;
        zr_dataset *ds;
        zr_error lerr = {0};
        zr_entry *e = zr_registry_lookup(reg, dirfd, &st, &lerr);
        int r;

        if (e) {
                *ret = e;
                return 0;
        }
        if (lerr.code)
                return zr_error_set(err, lerr.code, "%s", lerr.message);
        r = zr_registry_open_dataset(reg->pool, dirfd, &ds, err);
        if (r < 0)
                return r;
        return insert(reg, ds, &st, ret, err);
}

int zr_registry_create_dataset(zr_pool *pool, int dirfd, const zr_schema *schema,
                               const void *dict, size_t dict_len, zr_dataset **ret,
                               zr_error *err) {
        zr_store_options opts = {.pool = pool};
        return zr_dataset_create(dirfd, schema, dict, dict_len, &opts, ret, err);
}

int zr_registry_insert(zr_registry *reg, zr_dataset *ds, dev_t dev, ino_t ino, zr_entry **ret,
                       zr_error *err) {
        struct stat st = {.st_dev = dev, .st_ino = ino};
        if (find(reg, dev, ino)) {
                zr_dataset_close(ds, NULL);
                return zr_error_set(err, ZR_E_EXISTS, "the store is already open");
        }
        return insert(reg, ds, &st, ret, err);
}

void zr_entry_offer_write_dir(zr_entry *e, int dirfd) {
        if (!e->read_only)
                return;
        int fd = fcntl(dirfd, F_DUPFD_CLOEXEC, 3);
        if (fd < 0)
                return; /* the first write then fails, saying why */
        pthread_mutex_lock(&e->write_mu);
        int old = e->write_dirfd;
        e->write_dirfd = fd;
        pthread_mutex_unlock(&e->write_mu);
        if (old >= 0)
                close(old);
}

int zr_entry_make_writable(zr_entry *e, zr_error *err) {
        zr_store *s = zr_dataset_store(e->ds);
        int fd = -1, r;

        if (!zr_store_read_only(s))
                return 0;
        pthread_mutex_lock(&e->write_mu);
        if (e->write_dirfd >= 0)
                fd = fcntl(e->write_dirfd, F_DUPFD_CLOEXEC, 3);
        pthread_mutex_unlock(&e->write_mu);
        if (fd < 0)
                return zr_error_set(err, ZR_E_READONLY, "the store was opened read-only by "
                                    "every client that has it open");
        r = zr_dataset_make_writable(e->ds, fd, err);
        close(fd);
        return r;
}

void zr_entry_update(zr_entry *e) {
        e->read_only = zr_store_read_only(zr_dataset_store(e->ds)) != 0;
}

zr_pool *zr_registry_pool(const zr_registry *reg) {
        return reg->pool;
}

zr_entry *zr_entry_ref(zr_entry *e) {
        if (e)
                e->refs++;
        return e;
}

typedef struct close_job {
        zr_job job; /* first */
        zr_entry *entry;
        uint64_t generation;
} close_job;

int zr_entry_sync_for_close(zr_entry *e, zr_error *err) {
        zr_dataset_lock(e->ds, false);
        int r = zr_dataset_sync(e->ds, err);
        zr_dataset_unlock(e->ds);
        return r;
}

uint64_t zr_entry_closing_sync(const zr_entry *e) {
        uint64_t gen = zr_dataset_generation(e->ds);
        return gen != e->synced_generation && !e->syncing ? gen : 0;
}

void zr_entry_synced(zr_entry *e, uint64_t generation) {
        e->synced_generation = generation;
}

static void close_sync_run(zr_job *job) {
        close_job *j = (close_job *)job;
        (void)zr_entry_sync_for_close(j->entry, NULL); /* a failure shows again at the close */
}

static void close_sync_done(zr_job *job) {
        close_job *j = (close_job *)job;
        zr_entry *e = j->entry;
        e->synced_generation = j->generation;
        e->syncing = false;
        free(j);
        zr_entry_unref(e); /* the job's reference */
}

void zr_registry_set_work(zr_registry *reg, zr_work *work) {
        reg->work = work;
}

zr_entry *zr_entry_unref(zr_entry *e) {
        if (!e || --e->refs > 0)
                return NULL;
        zr_registry *reg = e->reg;
        uint64_t gen = zr_dataset_generation(e->ds);
        if (reg->work && gen != e->synced_generation && !e->syncing) {
                close_job *j = calloc(1, sizeof(*j));
                if (j) {
                        e->refs = 1; /* the job's */
                        e->syncing = true;
                        j->entry = e;
                        j->generation = gen;
                        j->job.run = close_sync_run;
                        j->job.done = close_sync_done;
                        zr_work_submit(reg->work, &j->job);
                        return NULL;
                }
        }
        for (zr_entry **p = &reg->head; *p; p = &(*p)->next)
                if (*p == e) {
                        *p = e->next;
                        break;
                }
        reg->count--;
        entry_free(e);
        return NULL;
}

unsigned zr_registry_count(const zr_registry *reg) {
        return reg->count;
}

void zr_registry_foreach(zr_registry *reg, void (*fn)(zr_entry *e, void *arg), void *arg) {
        zr_entry *next;
        for (zr_entry *e = reg->head; e; e = next) {
                next = e->next;
                fn(e, arg);
        }
}
