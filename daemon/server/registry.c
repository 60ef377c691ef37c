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
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "store/resolve.h"

#define META_FILE "meta.zr"

struct zr_registry {
        zr_pool *pool;
        zr_work *work;         /* NULL: close synchronously */
        zr_entry *head;
        unsigned count;
};

int zr_registry_new(zr_pool *pool, zr_registry **ret) {
        zr_registry *reg = calloc(1, sizeof(*reg));
        if (!reg)
                return -ENOMEM;
        reg->pool = pool;
        *ret = reg;
        return 0;
}

static void entry_free(zr_entry *e) {
        zr_dataset_close(e->ds, NULL);
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
        zr_store_meta_id(zr_dataset_store(ds), &e->meta_dev, &e->meta_ino);
        zr_entry_update(e);
        e->refs = 1;
        e->reg = reg;
        e->next = reg->head;
        reg->head = e;
        reg->count++;
        *ret = e;
        return 0;
}

/* 0 if dirfd resolves meta.zr to the file e holds. */
static int same_meta(const zr_entry *e, int dirfd, zr_error *err) {
        struct stat st;
        int fd = zr_resolve_open(dirfd, META_FILE, O_PATH, 0, err), r = 0;
        if (fd < 0)
                return fd;
        if (fstat(fd, &st) < 0)
                r = zr_error_errno(err, errno, META_FILE ": stat");
        else if (st.st_dev != e->meta_dev || st.st_ino != e->meta_ino)
                r = zr_error_set(err, ZR_E_LOCKED, "the daemon has this store open with another "
                                 META_FILE " than the directory holds now (replaced since)");
        close(fd);
        return r;
}

int zr_registry_open(zr_registry *reg, int dirfd, zr_entry **ret, zr_error *err) {
        struct stat st;
        if (fstat(dirfd, &st) < 0)
                return zr_error_errno(err, errno, "fstat of the store directory");
        for (zr_entry *e = reg->head; e; e = e->next)
                if (e->dev == st.st_dev && e->ino == st.st_ino) {
                        int r = same_meta(e, dirfd, err);
                        if (r < 0)
                                return r;
                        *ret = zr_entry_ref(e);
                        return 0;
                }
        zr_store_options opts = {.pool = reg->pool};
        zr_dataset *ds;
        int r = zr_dataset_open(dirfd, &opts, &ds, err);
        if (r == -EACCES || r == -EROFS || r == -EPERM) {
                /* The daemon may read but not write this store: serve it read-only. */
                zr_error e2 = {0};
                opts.read_only = 1;
                if (zr_dataset_open(dirfd, &opts, &ds, &e2) == 0)
                        r = 0;
        }
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
        for (zr_entry *e = reg->head; e; e = e->next)
                if (e->dev == dev && e->ino == ino) {
                        zr_dataset_close(ds, NULL);
                        return zr_error_set(err, ZR_E_EXISTS, "the store is already open");
                }
        return insert(reg, ds, &st, ret, err);
}

int zr_entry_make_writable(zr_entry *e, int dirfd, zr_error *err) {
        return zr_store_make_writable(zr_dataset_store(e->ds), dirfd, err);
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

static void close_sync_run(zr_job *job) {
        close_job *j = (close_job *)job;
        zr_dataset_lock(j->entry->ds, false);
        zr_dataset_sync(j->entry->ds, NULL); /* a failure shows again at the close */
        zr_dataset_unlock(j->entry->ds);
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
