/* fill-direct.c: a cold step's records read with O_DIRECT straight into the
 * slot (docs/IO.md, "Direct reads").
 *
 * Beyond memory reading through the page cache costs a page allocated,
 * charged, copied into the slot and reclaimed for every 4 KiB, for records
 * that will not stay resident. When the read ahead of a step finds most of its
 * records not resident (prefetch.c, work.direct), its loader's stores hold
 * more data than the engine's direct_min (half the daemon's memory: a store
 * that fits is read through the page cache, where it stays; AUTO, or any size
 * with ALWAYS: zr_fill_direct_mode()), and its streams are
 * ones a direct read can serve (raw, dense, one dataset, local: a record's
 * stored bytes are its bytes in the slot), the fill reads each record from
 * its chunk file into its place in the slot through the I/O queue, at the
 * queue's depth, in aligned blocks (io/direct.h): neighbours share a read,
 * only partial blocks are bounced. Anything else, or a direct read refused
 * (EINVAL) or cut short by a file's end, falls back to the batch gather, which
 * then reads (and reports errors) as it always did: the same bytes either
 * way. A read the device fails (EIO) fails the step, as a read ahead does.
 *
 * Each stream keeps its chunk files' descriptors opened again with O_DIRECT,
 * opened at its first direct step and closed with the loader. They stay
 * valid for the loader's life: a descriptor number is reused only after a
 * mutation closed a chunk file, and a mutation changes the dataset's
 * generation, after which the loader never reads again (ZR_E_STALE).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "io/direct.h"
#include "loader/loader-private.h"
#include "store/store.h"

/* Chunk files a stream may hold direct descriptors for; a store of more
 * chunks reads the others through the page cache. */
#define LDIRECT_FDS 64

struct ldirect {
        pthread_mutex_t lock;
        int refused;          /* the file system takes no direct reads */
        zr_direct_align align;
        unsigned n;
        int from[LDIRECT_FDS]; /* the store's descriptor */
        int to[LDIRECT_FDS];   /* its O_DIRECT twin */
};

int zr_fill_direct_capable(const zr_loader *l) {
        if (l->nsources || !l->e->ioq || atomic_load(&l->e->direct_mode) == ZR_DIRECT_OFF)
                return 0;
        for (size_t i = 0; i < l->nall; i++) {
                const lstream *st = &l->streams[i];
                if (st->ragged || st->image || st->pack || st->schema->codec != ZR_CODEC_RAW ||
                    zr_dataset_remote(st->s.ds) || st->item_bytes == 0)
                        return 0;
                struct ldirect *d = atomic_load(&st->direct);
                if (d && d->refused)
                        return 0;
        }
        return 1;
}

static struct ldirect *ldirect_of(lstream *st) {
        struct ldirect *d = atomic_load(&st->direct), *none = NULL;
        if (d)
                return d;
        d = calloc(1, sizeof(*d));
        if (!d)
                return NULL;
        pthread_mutex_init(&d->lock, NULL);
        if (!atomic_compare_exchange_strong(&st->direct, &none, d)) {
                pthread_mutex_destroy(&d->lock);
                free(d);
                d = none;
        }
        return d;
}

/* The O_DIRECT twin of store descriptor fd, opened the first time; -1 when
 * there is none (refused: the stream stops trying). */
static int direct_fd(struct ldirect *d, int fd, zr_direct_align *align) {
        int r = -1;
        pthread_mutex_lock(&d->lock);
        for (unsigned i = 0; i < d->n; i++)
                if (d->from[i] == fd) {
                        r = d->to[i];
                        goto out;
                }
        if (d->refused || d->n == LDIRECT_FDS)
                goto out;
        zr_direct_align a;
        int dfd;
        int e = zr_direct_open(fd, &dfd, &a, NULL);
        if (e < 0) {
                /* out of descriptors: this step through the page cache, the
                 * next may try again; anything else: the file system's answer */
                if (e != -EMFILE && e != -ENFILE && e != -ENOMEM)
                        d->refused = 1;
                goto out;
        }
        if (d->n > 0 && (a.mem != d->align.mem || a.off != d->align.off)) {
                /* one alignment per stream: its chunks share a file system */
                close(dfd);
                goto out;
        }
        d->align = a;
        d->from[d->n] = fd;
        d->to[d->n++] = dfd;
        r = dfd;
out:
        *align = d->align;
        pthread_mutex_unlock(&d->lock);
        return r;
}

/* The data of l's stores, each dataset once. */
static uint64_t stores_bytes(const zr_loader *l) {
        uint64_t sum = 0;
        for (size_t i = 0; i < l->nall; i++) {
                size_t k;
                for (k = 0; k < i && l->streams[k].s.ds != l->streams[i].s.ds; k++)
                        ;
                if (k == i)
                        sum += zr_store_data_bytes(zr_dataset_store(l->streams[i].s.ds));
        }
        return sum;
}

enum zr_direct_mode zr_fill_direct_mode(const zr_loader *l, int *fits) {
        enum zr_direct_mode m = (enum zr_direct_mode)atomic_load(&l->e->direct_mode);
        uint64_t min = atomic_load(&l->e->direct_min);
        *fits = 0;
        if (m == ZR_DIRECT_OFF || !zr_fill_direct_capable(l))
                return ZR_DIRECT_OFF;
        if (m == ZR_DIRECT_AUTO && min > 0 && stores_bytes(l) <= min) {
                /* a first pass through the page cache leaves it resident */
                *fits = 1;
                return ZR_DIRECT_OFF;
        }
        return m;
}

void zr_loader_engine_set_direct(zr_loader_engine *e, enum zr_direct_mode mode) {
        atomic_store(&e->direct_mode, (int)mode);
}

void zr_loader_engine_set_direct_min(zr_loader_engine *e, uint64_t bytes) {
        atomic_store(&e->direct_min, bytes);
}

const char *zr_direct_mode_name(enum zr_direct_mode mode) {
        switch (mode) {
        case ZR_DIRECT_OFF: return "off";
        case ZR_DIRECT_AUTO: return "auto";
        case ZR_DIRECT_ALWAYS: return "always";
        case ZR_DIRECT_EVERY: return "every";
        }
        return "?";
}

void zr_fill_direct_free(lstream *st) {
        struct ldirect *d = atomic_load(&st->direct);
        if (!d)
                return;
        for (unsigned i = 0; i < d->n; i++)
                close(d->to[i]);
        pthread_mutex_destroy(&d->lock);
        free(d);
        atomic_store(&st->direct, NULL);
}

int zr_fill_direct(zr_loader *l, lstream *st, const zr_gather *g, uint8_t *dst, uint64_t step,
                   zr_gather_times *times, zr_error *err) {
        zr_loader_engine *e = l->e;
        zr_store *s = zr_dataset_store(st->s.ds);
        struct ldirect *d = ldirect_of(st);
        size_t n = g->n, got = 0;
        uint64_t item = st->item_bytes, t0 = times ? zr_loader_now_ns() : 0, bytes = 0;
        zr_loc *locs = malloc(n * sizeof(*locs));
        zr_io_range *rr = malloc(n * sizeof(*rr));
        zr_direct_want *w = malloc(n * sizeof(*w));
        zr_direct_align a = {0};
        zr_direct_plan p = {0};
        int r = 1;

        if (!d || !locs || !rr || !w || g->bytes != n * item)
                goto out;
        if (zr_store_locate(s, g->idx, n, locs, NULL) < 0)
                goto out; /* the gather says what is wrong */
        for (size_t i = 0; i < n; i++)
                if (locs[i].phys_length != item || locs[i].logic_length != item)
                        goto out;
        if (zr_store_io_ranges(s, locs, n, rr, &got, NULL) < 0 || got != n)
                goto out;
        for (size_t i = 0; i < n; i++) {
                int dfd = direct_fd(d, rr[i].fd, &a);
                if (dfd < 0)
                        goto out;
                w[i] = (zr_direct_want){ .fd = dfd, .offset = locs[i].offset, .length = item,
                                         .dst = dst + i * item };
        }
        if (zr_direct_plan_make(w, n, a, &p) < 0)
                goto out;
        int e_read = zr_direct_read(e->ioq, &p, &bytes);
        if (e_read == -EIO) {
                /* the device failed it: the gather would fail too, through a
                 * page fault the daemon must never take */
                r = zr_error_set(err, EIO, "reading step %" PRIu64 " directly: %s", step,
                                 strerror(EIO));
                atomic_fetch_add(&e->direct_errors, 1);
                goto out;
        }
        if (e_read < 0)
                goto out; /* refused at read time, a file cut short: the gather says */
        atomic_fetch_add(&e->direct_steps, 1);
        atomic_fetch_add(&e->direct_bytes, bytes);
        atomic_fetch_add(&e->direct_copied, p.copy_bytes);
        if (times) {
                /* a timed fill: its read stage, and the device's bytes */
                times->read_ns += zr_loader_now_ns() - t0;
                times->device_bytes += bytes;
        }
        r = 0;
out:
        if (r > 0)
                atomic_fetch_add(&e->direct_fallbacks, 1);
        zr_direct_plan_free(&p);
        free(locs);
        free(rr);
        free(w);
        return r;
}
