/* direct.c: the plans of direct reads, their descriptors and their wait (see
 * direct.h).
 *
 * A plan is a list of aligned reads for the I/O queue and a list of copies
 * from a bounce buffer to do once they ended. Wants are sorted by (file,
 * offset) and gathered into runs (each want starts where the previous ended,
 * in the file and in memory); each run is cut into at most three reads: an
 * aligned middle into the destination, and the partial blocks at its ends
 * into the bounce buffer. Bounce reads of one file that touch are one read.
 */
#include "io/direct.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define DIRECT_ALIGN_MAX 4096u

int zr_direct_open(int fd, int *ret_fd, zr_direct_align *ret, zr_error *err) {
#ifdef STATX_DIOALIGN
        char path[64];
        struct stat a, b;
        struct statx sx;
        int dfd;

        if (fstat(fd, &a) < 0)
                return zr_error_errno(err, errno, "direct reads: fstat");
        if (!S_ISREG(a.st_mode))
                return zr_error_set(err, EOPNOTSUPP, "direct reads: not a regular file");
        snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
        dfd = open(path, O_RDONLY | O_DIRECT | O_CLOEXEC);
        if (dfd < 0)
                return zr_error_errno(err, errno, "direct reads: reopen with O_DIRECT");
        if (fstat(dfd, &b) < 0 || a.st_dev != b.st_dev || a.st_ino != b.st_ino) {
                close(dfd);
                return zr_error_set(err, EOPNOTSUPP, "direct reads: another file behind %s", path);
        }
        if (statx(dfd, "", AT_EMPTY_PATH, STATX_DIOALIGN, &sx) < 0 ||
            !(sx.stx_mask & STATX_DIOALIGN) || sx.stx_dio_mem_align == 0 ||
            sx.stx_dio_offset_align == 0 || sx.stx_dio_mem_align > DIRECT_ALIGN_MAX ||
            sx.stx_dio_offset_align > DIRECT_ALIGN_MAX) {
                close(dfd);
                return zr_error_set(err, EOPNOTSUPP, "direct reads: no direct I/O alignment "
                                    "reported for this file");
        }
        *ret_fd = dfd;
        ret->mem = sx.stx_dio_mem_align;
        ret->off = sx.stx_dio_offset_align;
        return 0;
#else
        (void)fd;
        (void)ret_fd;
        (void)ret;
        return zr_error_set(err, EOPNOTSUPP, "direct reads: built without STATX_DIOALIGN");
#endif
}

static int want_cmp(const void *x, const void *y) {
        const zr_direct_want *a = x, *b = y;
        if (a->fd != b->fd)
                return a->fd < b->fd ? -1 : 1;
        if (a->offset != b->offset)
                return a->offset < b->offset ? -1 : 1;
        return a->dst < b->dst ? -1 : a->dst > b->dst;
}

static uint64_t down(uint64_t v, uint64_t a) {
        return v & ~(a - 1);
}

static uint64_t up(uint64_t v, uint64_t a) {
        return (v + a - 1) & ~(a - 1);
}

static int pow2(uint32_t v) {
        return v > 0 && (v & (v - 1)) == 0;
}

/* The plan under construction: bounce reads are placed at offsets of the
 * bounce buffer before it exists (its address is known at the end). */
typedef struct builder {
        zr_direct_plan *p;
        zr_direct_align a;
        uint64_t *bounce_at;  /* per read: its offset in the bounce buffer, or
                               * UINT64_MAX for a read into a destination */
        uint64_t *copy_at;    /* per copy: its source's offset in the bounce */
        ssize_t last_bounce;  /* the last read into the bounce, or -1 */
} builder;

/* A read of [off, off + len) of fd into the bounce, of which the first `need`
 * bytes must be read; returns the offset in the bounce where byte `off` lands.
 * Joined to the previous bounce read when it is of fd and they touch. */
static uint64_t bounce_read(builder *bd, int fd, uint64_t off, uint64_t len, uint64_t need) {
        zr_direct_plan *p = bd->p;
        if (bd->last_bounce >= 0) {
                zr_io_dread *prev = &p->reads[bd->last_bounce];
                uint64_t pend = prev->range.offset + prev->range.length;
                if (prev->range.fd == fd && off >= prev->range.offset && off <= pend &&
                    (uint64_t)bd->last_bounce == p->nreads - 1) {
                        uint64_t at = bd->bounce_at[bd->last_bounce];
                        uint64_t end = off + len > pend ? off + len : pend;
                        uint64_t pneed = prev->range.offset + prev->need;
                        uint64_t nend = off + need > pneed ? off + need : pneed;
                        p->read_bytes += end - pend;
                        p->bounce_len += end - pend;
                        prev->range.length = end - prev->range.offset;
                        prev->need = nend - prev->range.offset;
                        return at + (off - prev->range.offset);
                }
        }
        size_t i = p->nreads++;
        uint64_t at = up(p->bounce_len, bd->a.mem > bd->a.off ? bd->a.mem : bd->a.off);
        p->reads[i] = (zr_io_dread){ .range = { .fd = fd, .offset = off, .length = len },
                                     .need = need };
        bd->bounce_at[i] = at;
        bd->last_bounce = (ssize_t)i;
        p->bounce_len = at + len;
        p->read_bytes += len;
        return at;
}

static void direct_into(builder *bd, int fd, uint64_t off, uint64_t len, uint8_t *dst) {
        zr_direct_plan *p = bd->p;
        size_t i = p->nreads++;
        p->reads[i] = (zr_io_dread){ .range = { .fd = fd, .offset = off, .length = len },
                                     .dst = dst, .need = len };
        bd->bounce_at[i] = UINT64_MAX;
        p->read_bytes += len;
}

static void copy_from_bounce(builder *bd, uint64_t at, uint8_t *to, uint64_t len) {
        zr_direct_plan *p = bd->p;
        size_t i = p->ncopies++;
        p->copies[i] = (zr_direct_copy){ .to = to, .len = len };
        bd->copy_at[i] = at;
        p->copy_bytes += len;
}

/* Plans the run of `len` bytes at `off` of fd into dst. */
static void plan_run(builder *bd, int fd, uint64_t off, uint64_t len, uint8_t *dst) {
        uint64_t oa = bd->a.off, ma = bd->a.mem;
        uint64_t end = off + len, A = down(off, oa), E = up(end, oa);
        uint64_t ms = up(off, oa), me = down(end, oa);

        if (ms < me && ((uintptr_t)(dst + (ms - off)) & (ma - 1)) == 0) {
                /* the aligned middle straight into place, the ends bounced */
                if (off < ms)
                        copy_from_bounce(bd, bounce_read(bd, fd, A, ms - A, ms - A) + (off - A),
                                         dst, ms - off);
                direct_into(bd, fd, ms, me - ms, dst + (ms - off));
                if (me < end)
                        copy_from_bounce(bd, bounce_read(bd, fd, me, E - me, end - me),
                                         dst + (me - off), end - me);
                return;
        }
        /* within one block, or memory not aligned like the file: all bounced */
        copy_from_bounce(bd, bounce_read(bd, fd, A, E - A, end - A) + (off - A), dst, len);
}

int zr_direct_plan_make(zr_direct_want *w, size_t n, zr_direct_align a, zr_direct_plan *p) {
        builder bd = { .p = p, .a = a, .last_bounce = -1 };
        int r = 0;

        memset(p, 0, sizeof(*p));
        if (!pow2(a.mem) || !pow2(a.off) || a.mem > DIRECT_ALIGN_MAX || a.off > DIRECT_ALIGN_MAX)
                return -EINVAL;
        if (n == 0)
                return 0;
        if (n > SIZE_MAX / (3 * sizeof(zr_io_dread) + 3 * sizeof(uint64_t)))
                return -ENOMEM;
        /* at most three reads and two copies a run, a run per want */
        p->reads = malloc(3 * n * sizeof(*p->reads));
        p->copies = malloc(2 * n * sizeof(*p->copies));
        bd.bounce_at = malloc(3 * n * sizeof(*bd.bounce_at));
        bd.copy_at = malloc(2 * n * sizeof(*bd.copy_at));
        if (!p->reads || !p->copies || !bd.bounce_at || !bd.copy_at) {
                r = -ENOMEM;
                goto out;
        }
        qsort(w, n, sizeof(*w), want_cmp);
        for (size_t i = 0; i < n;) {
                size_t j = i + 1;
                uint64_t len = w[i].length;
                while (j < n && w[j].fd == w[i].fd && w[j].offset == w[i].offset + len &&
                       w[j].dst == w[i].dst + len && w[j].length > 0) {
                        len += w[j].length;
                        j++;
                }
                p->want_bytes += len;
                if (len > 0) {
                        plan_run(&bd, w[i].fd, w[i].offset, len, w[i].dst);
                        p->runs++;
                }
                i = j;
        }
        if (p->bounce_len > ZR_DIRECT_BOUNCE_MAX) {
                r = -E2BIG;
                goto out;
        }
        if (p->bounce_len > 0) {
                void *b = mmap(NULL, p->bounce_len, PROT_READ | PROT_WRITE,
                               MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
                if (b == MAP_FAILED) {
                        r = -ENOMEM;
                        goto out;
                }
                p->bounce = b;
        }
        for (size_t i = 0; i < p->nreads; i++)
                if (bd.bounce_at[i] != UINT64_MAX)
                        p->reads[i].dst = p->bounce + bd.bounce_at[i];
        for (size_t i = 0; i < p->ncopies; i++)
                p->copies[i].from = p->bounce + bd.copy_at[i];
out:
        free(bd.bounce_at);
        free(bd.copy_at);
        if (r < 0) {
                p->bounce = NULL; /* not mapped */
                zr_direct_plan_free(p);
        }
        return r;
}

void zr_direct_plan_free(zr_direct_plan *p) {
        if (p->bounce)
                munmap(p->bounce, p->bounce_len);
        free(p->reads);
        free(p->copies);
        memset(p, 0, sizeof(*p));
}

/* The wait of zr_direct_read(): its batch's callback signals it. */
typedef struct direct_wait {
        pthread_mutex_t lock;
        pthread_cond_t cond;
        int done;
        int result;
        uint64_t bytes;
} direct_wait;

static void direct_done(void *arg, uint64_t id, int result, uint64_t bytes) {
        direct_wait *dw = arg;
        (void)id;
        pthread_mutex_lock(&dw->lock);
        dw->done = 1;
        dw->result = result;
        dw->bytes = bytes;
        pthread_cond_signal(&dw->cond);
        pthread_mutex_unlock(&dw->lock);
}

int zr_direct_read(zr_ioq *q, const zr_direct_plan *p, uint64_t *bytes) {
        direct_wait dw = { .done = 0 };
        int r;

        if (bytes)
                *bytes = 0;
        if (p->nreads == 0)
                return 0;
        pthread_mutex_init(&dw.lock, NULL);
        pthread_cond_init(&dw.cond, NULL);
        r = zr_ioq_submit_into(q, p->reads, p->nreads, direct_done, &dw, NULL);
        if (r == 0) {
                pthread_mutex_lock(&dw.lock);
                while (!dw.done)
                        pthread_cond_wait(&dw.cond, &dw.lock);
                pthread_mutex_unlock(&dw.lock);
                r = dw.result;
                if (bytes)
                        *bytes = dw.bytes;
        }
        pthread_cond_destroy(&dw.cond);
        pthread_mutex_destroy(&dw.lock);
        if (r < 0)
                return r;
        for (size_t i = 0; i < p->ncopies; i++)
                memcpy(p->copies[i].to, p->copies[i].from, p->copies[i].len);
        return 0;
}
