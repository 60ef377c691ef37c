/* mirror.c: a remote store's mirror on local disk (mirror.h).
 *
 * State, under the mirror's mutex: the records in flight (a chained hash of
 * index -> request), the pinned records (index -> count, and whether an
 * eviction waits for the last unpin), and per chunk a count per 4 KiB page of
 * the present or incoming records that touch it (a page is punched out when
 * its count drops to 0). The present bits are a shared mapping of the file
 * `present`, read lock-free and set after a record's bytes are written.
 *
 * What it assumes: the manifest was decoded (s3/manifest.h) and its objects'
 * ETags noted by the open (source.h); the records it is given come from the
 * store's own table, checked by the store (chunk, offset and length inside
 * the chunk's used bytes), and it checks them again before it uses them.
 */
#include "remote/mirror.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <dirent.h>

#include "url.h"

#define PAGE 4096u
#define SEG_LOG2 28
#define HASH_BUCKETS 4096u     /* in-flight and pinned records: a few thousand at most */
#define META_FETCH_PIECE ((uint64_t)16 << 20)

typedef struct mreq mreq;
typedef struct zr_mirror_wait group;

/* A record in flight or pinned: one table for both, by kind. */
typedef struct rnode {
        uint64_t idx;
        mreq *req;          /* in flight: its request */
        unsigned pins;      /* pinned */
        int evict;          /* an eviction waits for the last unpin */
        zr_mrec rec;
        struct rnode *next;
} rnode;

struct zr_mirror_wait {
        unsigned pending;   /* requests it waits for; 0: being notified */
        int rc;
        zr_error err;
        zr_mirror_cb *cb;
        void *arg;
        int done;           /* zr_mirror_wait() */
};

struct mreq {
        zr_fetch q;
        zr_mirror *m;
        char name[32];
        uint32_t chunk;
        uint64_t off, len;
        uint8_t *buf;
        size_t nrec;
        zr_mrec *rec;
        group **waiters;
        size_t nwait, capwait;
        int refetched;
        mreq *prev, *next;  /* the mirror's requests out */
};

typedef struct chunkinfo {
        int fd;
        uint64_t used;      /* the object's size: the bytes records may lie in */
        uint16_t *pages;    /* records present or incoming touching each page */
} chunkinfo;

struct zr_mirror {
        int dirfd, lockfd;
        zr_rsrc *src;
        zr_fetcher *f;
        zr_mirror_hooks hooks;
        uint64_t length;
        uint8_t *present;   /* shared mapping of `present` */
        size_t present_len;
        const uint8_t **sums; /* per segment: a mapping of {seg}.sum */
        size_t *sum_len;
        uint64_t nseg;
        chunkinfo *chunks;
        uint32_t nchunks;
        pthread_mutex_t mu;
        pthread_cond_t cv;
        rnode *inflight[HASH_BUCKETS];
        rnode *pinned[HASH_BUCKETS];
        unsigned requests_out;
        mreq *out;          /* the requests out (linked by prev, next) */
        zr_mirror_stats st;
};

/* ---- small helpers ---------------------------------------------------------------- */

static unsigned bucket(uint64_t idx) {
        uint64_t h = idx * 0x9e3779b97f4a7c15ull;
        return (unsigned)(h >> 52) & (HASH_BUCKETS - 1);
}

static rnode *node_find(rnode **t, uint64_t idx) {
        for (rnode *n = t[bucket(idx)]; n; n = n->next)
                if (n->idx == idx)
                        return n;
        return NULL;
}

static rnode *node_add(rnode **t, uint64_t idx) {
        rnode *n = calloc(1, sizeof(*n));
        if (!n)
                return NULL;
        n->idx = idx;
        n->next = t[bucket(idx)];
        t[bucket(idx)] = n;
        return n;
}

static void node_del(rnode **t, rnode *n) {
        for (rnode **p = &t[bucket(n->idx)]; *p; p = &(*p)->next)
                if (*p == n) {
                        *p = n->next;
                        free(n);
                        return;
                }
}

static int bit_get(const zr_mirror *m, uint64_t i) {
        return (atomic_load_explicit((_Atomic uint8_t *)&m->present[i >> 3], memory_order_acquire) >>
                (i & 7)) & 1;
}

static void bit_set(zr_mirror *m, uint64_t i, int v) {
        _Atomic uint8_t *p = (_Atomic uint8_t *)&m->present[i >> 3];
        if (v)
                atomic_fetch_or_explicit(p, (uint8_t)(1u << (i & 7)), memory_order_release);
        else
                atomic_fetch_and_explicit(p, (uint8_t)~(1u << (i & 7)), memory_order_release);
}

static uint64_t sum_of(const zr_mirror *m, uint64_t idx) {
        const uint8_t *p = m->sums[idx >> SEG_LOG2] + (idx & (((uint64_t)1 << SEG_LOG2) - 1)) * 8;
        uint64_t v = 0;
        for (int b = 7; b >= 0; b--)
                v = v << 8 | p[b];
        return v;
}

/* Whether r is a record of this store whose bytes lie in its chunk's object. */
static int rec_ok(const zr_mirror *m, const zr_mrec *r) {
        return r->idx < m->length && r->chunk < m->nchunks &&
               (uint64_t)r->off + r->len <= m->chunks[r->chunk].used;
}

/* Counts (d = +1) or uncounts (-1) r's pages; on uncounting, punches those
 * that no record touches any more. Mutex held. */
static void pages_ref(zr_mirror *m, const zr_mrec *r, int d) {
        chunkinfo *c = &m->chunks[r->chunk];
        uint64_t first, last, run = UINT64_MAX;

        if (r->len == 0)
                return;
        first = r->off / PAGE;
        last = ((uint64_t)r->off + r->len - 1) / PAGE;
        for (uint64_t p = first; p <= last + 1; p++) {
                if (p <= last) {
                        if (d > 0) {
                                if (c->pages[p] == 0)
                                        m->st.disk_bytes += PAGE;
                                c->pages[p]++;
                                continue;
                        }
                        if (--c->pages[p] == 0) {
                                m->st.disk_bytes -= PAGE;
                                if (run == UINT64_MAX)
                                        run = p;
                                continue;
                        }
                }
                if (run != UINT64_MAX) {
                        /* best effort: a file system without holes keeps the bytes */
                        (void)fallocate(c->fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
                                        (off_t)(run * PAGE), (off_t)((p - run) * PAGE));
                        run = UINT64_MAX;
                }
        }
}

/* ---- open ------------------------------------------------------------------------- */

static int read_exact_file(int dirfd, const char *name, uint64_t size, uint64_t xxh3) {
        int fd = openat(dirfd, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
        struct stat st;
        int ok = 0;

        if (fd < 0)
                return 0;
        if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && (uint64_t)st.st_size == size) {
                if (size == 0) {
                        ok = xxh3 == s3_checksum("", 0);
                } else {
                        void *p = mmap(NULL, size, PROT_READ, MAP_SHARED, fd, 0);
                        if (p != MAP_FAILED) {
                                ok = s3_checksum(p, size) == xxh3;
                                munmap(p, size);
                        }
                }
        }
        close(fd);
        return ok;
}

/* Fetches metadata object o whole (in pieces), checks it, writes it anew. */
static int fetch_meta(zr_mirror *m, const s3_object *o, const s3_creds *c, zr_error *err) {
        uint64_t npieces = o->size ? (o->size + META_FETCH_PIECE - 1) / META_FETCH_PIECE : 0;
        uint8_t *buf = malloc(o->size ? o->size : 1);
        zr_fetch *q = calloc(npieces ? npieces : 1, sizeof(*q));
        zr_fetch **qs = calloc(npieces ? npieces : 1, sizeof(*qs));
        char tmp[48];
        int r = 0, fd = -1;

        if (!buf || !q || !qs) {
                r = zr_error_set(err, ENOMEM, "fetching %s", o->name);
                goto out;
        }
        for (uint64_t i = 0; i < npieces; i++) {
                q[i].src = m->src;
                q[i].name = o->name;
                q[i].off = i * META_FETCH_PIECE;
                q[i].len = o->size - q[i].off < META_FETCH_PIECE ? o->size - q[i].off
                                                                   : META_FETCH_PIECE;
                q[i].dst = buf + q[i].off;
                q[i].creds = c;
                qs[i] = &q[i];
        }
        r = zr_fetcher_run(m->f, qs, (size_t)npieces, err);
        if (r < 0)
                goto out;
        if (s3_checksum(buf, o->size) != o->xxh3) {
                r = zr_error_set(err, ZR_E_CORRUPT, "%s/%s does not match the checksum its "
                                 "manifest gives", zr_rsrc_url(m->src), o->name);
                goto out;
        }
        snprintf(tmp, sizeof(tmp), ".%s.tmp", o->name);
        (void)unlinkat(m->dirfd, tmp, 0);
        fd = openat(m->dirfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
        if (fd < 0) {
                r = zr_error_errno(err, errno, "mirror of %s: creating %s", zr_rsrc_url(m->src),
                                   o->name);
                goto out;
        }
        for (uint64_t k = 0; k < o->size;) {
                ssize_t w = pwrite(fd, buf + k, o->size - k, (off_t)k);
                if (w <= 0) {
                        r = zr_error_errno(err, w < 0 ? errno : EIO, "mirror of %s: writing %s",
                                           zr_rsrc_url(m->src), o->name);
                        goto out;
                }
                k += (uint64_t)w;
        }
        if (fdatasync(fd) < 0 || renameat(m->dirfd, tmp, m->dirfd, o->name) < 0)
                r = zr_error_errno(err, errno, "mirror of %s: writing %s", zr_rsrc_url(m->src),
                                   o->name);
out:
        if (fd >= 0)
                close(fd);
        free(qs);
        free(q);
        free(buf);
        return r;
}

static uint32_t le32(const uint8_t *p) {
        return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* Maps `present`: ceil(length/8) bytes, zeroed when the mirror was not closed
 * cleanly. Also removes `clean` (it is made again at close). */
static int open_present(zr_mirror *m, zr_error *err) {
        int clean = faccessat(m->dirfd, "clean", F_OK, AT_SYMLINK_NOFOLLOW) == 0;
        size_t len = (size_t)((m->length + 7) / 8);
        int fd = openat(m->dirfd, "present", O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
        struct stat st;

        if (fd < 0 || fstat(fd, &st) < 0)
                return zr_error_errno(err, errno, "mirror of %s: present", zr_rsrc_url(m->src));
        if (!clean || (uint64_t)st.st_size != len) {
                /* a crash may have kept a bit whose bytes did not reach the disk */
                if (ftruncate(fd, 0) < 0 || ftruncate(fd, (off_t)len) < 0) {
                        int e = errno;
                        close(fd);
                        return zr_error_errno(err, e, "mirror of %s: present",
                                              zr_rsrc_url(m->src));
                }
        }
        (void)unlinkat(m->dirfd, "clean", 0);
        m->present_len = len ? len : 1;
        if (len == 0 && ftruncate(fd, 1) < 0) {
                close(fd);
                return zr_error_errno(err, errno, "mirror of %s: present", zr_rsrc_url(m->src));
        }
        void *p = mmap(NULL, m->present_len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        close(fd);
        if (p == MAP_FAILED)
                return zr_error_errno(err, errno, "mirror of %s: mapping present",
                                      zr_rsrc_url(m->src));
        m->present = p;
        return 0;
}

/* Counts the pages of every present record (a mirror opened with records). */
static void count_present(zr_mirror *m) {
        for (uint64_t s = 0; s < m->nseg; s++) {
                char name[32];
                snprintf(name, sizeof(name), "%" PRIu64 ".loc", s);
                int fd = openat(m->dirfd, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
                uint64_t first = s << SEG_LOG2, n = m->length - first;
                if (n > ((uint64_t)1 << SEG_LOG2))
                        n = (uint64_t)1 << SEG_LOG2;
                void *p = fd >= 0 && n ? mmap(NULL, n * 16, PROT_READ, MAP_SHARED, fd, 0)
                                       : MAP_FAILED;
                if (fd >= 0)
                        close(fd);
                for (uint64_t i = 0; i < n; i++) {
                        if (!bit_get(m, first + i))
                                continue;
                        const uint8_t *e = p == MAP_FAILED ? NULL : (const uint8_t *)p + i * 16;
                        zr_mrec r = { first + i, e ? le32(e + 12) : 0, e ? le32(e) : 0,
                                      e ? le32(e + 4) : 0 };
                        if (!e || !rec_ok(m, &r)) {
                                bit_set(m, first + i, 0);
                                continue;
                        }
                        pages_ref(m, &r, 1);
                        m->st.present++;
                        m->st.present_bytes += r.len;
                }
                if (p != MAP_FAILED)
                        munmap(p, n * 16);
        }
}

static void store_dir_name(const zr_rsrc *src, char *buf, size_t n) {
        const s3_target *t = zr_rsrc_target(src);
        char key[S3_ENDPOINT_MAX + S3_BUCKET_MAX + S3_PREFIX_MAX + 4];
        int k = snprintf(key, sizeof(key), "%s%c%s%c%s", t->endpoint, 0, t->bucket, 0, t->prefix);
        snprintf(buf, n, "%016" PRIx64, s3_checksum(key, (size_t)k));
}

int zr_mirror_mkdir(int rootfd, const zr_rsrc *src, const char *id, zr_error *err) {
        char sdir[32];
        int sfd = -1, fd = -1;

        store_dir_name(src, sdir, sizeof(sdir));
        if ((mkdirat(rootfd, sdir, 0700) < 0 && errno != EEXIST) ||
            (sfd = openat(rootfd, sdir, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW)) < 0 ||
            (mkdirat(sfd, id, 0700) < 0 && errno != EEXIST) ||
            (fd = openat(sfd, id, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW)) < 0) {
                int e = errno;
                if (sfd >= 0)
                        close(sfd);
                return zr_error_errno(err, e, "the disk cache's directory for %s",
                                      zr_rsrc_url(src));
        }
        close(sfd);
        return fd;
}

int zr_mirror_open(int rootfd, zr_rsrc *src, const s3_manifest *man, const s3_creds *c,
                   zr_fetcher *f, zr_mirror **ret, zr_error *err) {
        zr_mirror *m = calloc(1, sizeof(*m));
        int r;
        const s3_object *meta;

        if (!m)
                return zr_error_set(err, ENOMEM, "opening a mirror");
        m->dirfd = m->lockfd = -1;
        m->src = zr_rsrc_ref(src);
        m->f = f;
        m->length = man->length;
        pthread_mutex_init(&m->mu, NULL);
        pthread_cond_init(&m->cv, NULL);
        m->dirfd = zr_mirror_mkdir(rootfd, src, man->id, err);
        if (m->dirfd < 0) {
                r = m->dirfd;
                goto fail;
        }
        m->lockfd = openat(m->dirfd, "lock", O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
        if (m->lockfd < 0) {
                r = zr_error_errno(err, errno, "the mirror of %s", zr_rsrc_url(src));
                goto fail;
        }
        if (flock(m->lockfd, LOCK_EX | LOCK_NB) < 0) {
                r = errno == EWOULDBLOCK
                            ? zr_error_set(err, ZR_E_LOCKED, "the mirror of %s is in use by "
                                           "another daemon with the same remote-cache-dir",
                                           zr_rsrc_url(src))
                            : zr_error_errno(err, errno, "locking the mirror of %s",
                                             zr_rsrc_url(src));
                goto fail;
        }
        /* metadata: kept when whole and sound, else fetched */
        for (size_t i = 0; i < man->nobjects; i++) {
                const s3_object *o = &man->objects[i];
                const char *dot = strchr(o->name, '.');
                if (strcmp(dot, ".chunk") == 0)
                        continue;
                if (!o->has_xxh3) {
                        r = zr_error_set(err, ZR_E_CORRUPT, "%s: the manifest gives %s no "
                                         "checksum", zr_rsrc_url(src), o->name);
                        goto fail;
                }
                if (read_exact_file(m->dirfd, o->name, o->size, o->xxh3))
                        continue;
                r = fetch_meta(m, o, c, err);
                if (r < 0)
                        goto fail;
        }
        /* the header: chunk capacity and tail, checked as the store will */
        meta = s3_manifest_find(man, "meta.zr");
        uint8_t h[32];
        int mfd = openat(m->dirfd, "meta.zr", O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
        ssize_t hn = mfd >= 0 ? pread(mfd, h, sizeof(h), 0) : -1;
        if (mfd >= 0)
                close(mfd);
        if (!meta || hn != 32 || memcmp(h, "ZREC", 4) != 0) {
                r = zr_error_set(err, ZR_E_CORRUPT, "%s/meta.zr is not a store's header",
                                 zr_rsrc_url(src));
                goto fail;
        }
        unsigned log2 = h[22] ? h[22] : 32;
        uint32_t tail = le32(h + 6);
        uint64_t cap = log2 >= 12 && log2 <= 32 ? (uint64_t)1 << log2 : 0;
        if (!cap || tail > 65535 || (uint64_t)le32(h + 14) + ((uint64_t)le32(h + 18) << 32) !=
                                            man->length) {
                r = zr_error_set(err, ZR_E_CORRUPT, "%s/meta.zr does not agree with its "
                                 "manifest", zr_rsrc_url(src));
                goto fail;
        }
        m->nchunks = tail + 1;
        m->chunks = calloc(m->nchunks, sizeof(*m->chunks));
        m->nseg = (m->length + ((uint64_t)1 << SEG_LOG2) - 1) >> SEG_LOG2;
        m->sums = calloc(m->nseg + 1, sizeof(*m->sums));
        m->sum_len = calloc(m->nseg + 1, sizeof(*m->sum_len));
        if (!m->chunks || !m->sums || !m->sum_len) {
                r = zr_error_set(err, ENOMEM, "opening the mirror of %s", zr_rsrc_url(src));
                goto fail;
        }
        for (uint32_t i = 0; i < m->nchunks; i++)
                m->chunks[i].fd = -1;
        for (uint32_t i = 0; i < m->nchunks; i++) {
                char name[32];
                snprintf(name, sizeof(name), "%" PRIu32 ".chunk", i);
                const s3_object *o = s3_manifest_find(man, name);
                chunkinfo *ci = &m->chunks[i];
                uint64_t size = i < tail ? cap : le32(h + 10);
                if (!o || o->size > size) {
                        r = zr_error_set(err, ZR_E_CORRUPT, "%s: %s is missing from the "
                                         "manifest or larger than its chunk", zr_rsrc_url(src),
                                         name);
                        goto fail;
                }
                ci->used = o->size;
                ci->fd = openat(m->dirfd, name, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
                struct stat st;
                if (ci->fd < 0 || fstat(ci->fd, &st) < 0 ||
                    ((uint64_t)st.st_size != size && ftruncate(ci->fd, (off_t)size) < 0)) {
                        r = zr_error_errno(err, errno, "the mirror of %s: %s", zr_rsrc_url(src),
                                           name);
                        goto fail;
                }
                ci->pages = calloc((size_t)((o->size + PAGE - 1) / PAGE) + 1, sizeof(uint16_t));
                if (!ci->pages) {
                        r = zr_error_set(err, ENOMEM, "opening the mirror of %s",
                                         zr_rsrc_url(src));
                        goto fail;
                }
        }
        for (uint64_t s = 0; s < m->nseg; s++) {
                char name[32];
                uint64_t n = m->length - (s << SEG_LOG2);
                if (n > ((uint64_t)1 << SEG_LOG2))
                        n = (uint64_t)1 << SEG_LOG2;
                snprintf(name, sizeof(name), "%" PRIu64 ".sum", s);
                int fd = openat(m->dirfd, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
                void *p = fd >= 0 ? mmap(NULL, n * 8, PROT_READ, MAP_SHARED, fd, 0) : MAP_FAILED;
                if (fd >= 0)
                        close(fd);
                if (p == MAP_FAILED) {
                        r = zr_error_set(err, ZR_E_CORRUPT, "%s: %s is missing",
                                         zr_rsrc_url(src), name);
                        goto fail;
                }
                m->sums[s] = p;
                m->sum_len[s] = n * 8;
        }
        if ((r = open_present(m, err)) < 0)
                goto fail;
        count_present(m);
        m->st.records = m->length;
        *ret = m;
        return 0;
fail:
        zr_mirror_close(m);
        return r;
}

int zr_mirror_dirfd(const zr_mirror *m) {
        return m->dirfd;
}

void zr_mirror_set_hooks(zr_mirror *m, const zr_mirror_hooks *h) {
        m->hooks = *h;
}

void zr_mirror_each_present(zr_mirror *m, void (*fn)(void *arg, uint64_t idx), void *arg) {
        for (uint64_t i = 0; i < m->length; i++)
                if (bit_get(m, i))
                        fn(arg, i);
}

zr_mirror *zr_mirror_close(zr_mirror *m) {
        int synced = 1;

        if (!m)
                return NULL;
        pthread_mutex_lock(&m->mu);
        while (m->requests_out > 0)
                pthread_cond_wait(&m->cv, &m->mu);
        pthread_mutex_unlock(&m->mu);
        for (uint32_t i = 0; m->chunks && i < m->nchunks; i++) {
                if (m->chunks[i].fd >= 0) {
                        synced &= fdatasync(m->chunks[i].fd) == 0;
                        close(m->chunks[i].fd);
                }
                free(m->chunks[i].pages);
        }
        if (m->present) {
                synced &= msync(m->present, m->present_len, MS_SYNC) == 0;
                munmap(m->present, m->present_len);
                if (synced && m->dirfd >= 0) {
                        int fd = openat(m->dirfd, "clean", O_WRONLY | O_CREAT | O_CLOEXEC |
                                                          O_NOFOLLOW, 0600);
                        if (fd >= 0) {
                                fdatasync(fd);
                                close(fd);
                                fsync(m->dirfd);
                        }
                }
        }
        for (uint64_t s = 0; m->sums && s < m->nseg; s++)
                if (m->sums[s])
                        munmap((void *)m->sums[s], m->sum_len[s]);
        for (unsigned b = 0; b < HASH_BUCKETS; b++) {
                while (m->pinned[b]) {
                        rnode *n = m->pinned[b];
                        m->pinned[b] = n->next;
                        free(n);
                }
        }
        free(m->sums);
        free(m->sum_len);
        free(m->chunks);
        if (m->lockfd >= 0)
                close(m->lockfd); /* the flock goes with it */
        if (m->dirfd >= 0)
                close(m->dirfd);
        zr_rsrc_unref(m->src);
        pthread_mutex_destroy(&m->mu);
        pthread_cond_destroy(&m->cv);
        free(m);
        return NULL;
}

static void remove_tree(int dirfd, const char *name) {
        int fd = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
        int removed;

        if (fd < 0)
                return;
        /* pass after pass: unlinking while reading a directory may skip entries */
        do {
                int dfd = openat(fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
                DIR *d = dfd >= 0 ? fdopendir(dfd) : NULL;
                struct dirent *de;
                removed = 0;
                if (!d) {
                        if (dfd >= 0)
                                close(dfd);
                        break;
                }
                while ((de = readdir(d)))
                        if (strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0 &&
                            unlinkat(fd, de->d_name, 0) == 0)
                                removed++;
                closedir(d);
        } while (removed > 0);
        close(fd);
        (void)unlinkat(dirfd, name, AT_REMOVEDIR);
}

void zr_mirror_sweep(int rootfd, const zr_rsrc *src, const char *keep) {
        char sdir[32];
        store_dir_name(src, sdir, sizeof(sdir));
        int sfd = openat(rootfd, sdir, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
        int dfd = sfd >= 0 ? openat(sfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC) : -1;
        DIR *d = dfd >= 0 ? fdopendir(dfd) : NULL;
        struct dirent *de;
        if (!d) {
                if (dfd >= 0)
                        close(dfd);
                if (sfd >= 0)
                        close(sfd);
                return;
        }
        while ((de = readdir(d))) {
                if (de->d_name[0] == '.' || strcmp(de->d_name, keep) == 0 ||
                    strlen(de->d_name) != 32)
                        continue;
                char lock[48];
                snprintf(lock, sizeof(lock), "%s/lock", de->d_name);
                int lfd = openat(sfd, lock, O_RDWR | O_CLOEXEC | O_NOFOLLOW);
                if (lfd >= 0 && flock(lfd, LOCK_EX | LOCK_NB) == 0)
                        remove_tree(sfd, de->d_name); /* nobody has it open */
                if (lfd >= 0)
                        close(lfd);
        }
        closedir(d);
        close(sfd);
}

/* Bytes on disk of the files of directory fd (st_blocks). */
static uint64_t dir_bytes(int fd) {
        /* a description of its own: a dup would share (and leave) the offset */
        int dfd = openat(fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        DIR *d = dfd >= 0 ? fdopendir(dfd) : NULL;
        struct dirent *de;
        uint64_t sum = 0;
        if (!d) {
                if (dfd >= 0)
                        close(dfd);
                return 0;
        }
        while ((de = readdir(d))) {
                struct stat st;
                if (de->d_name[0] != '.' && fstatat(fd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
                    S_ISREG(st.st_mode))
                        sum += (uint64_t)st.st_blocks * 512;
        }
        closedir(d);
        return sum;
}

typedef struct closed_mirror {
        char store[32], id[40];
        uint64_t bytes;
        int64_t when;
} closed_mirror;

static int older_first(const void *a, const void *b) {
        const closed_mirror *x = a, *y = b;
        return x->when < y->when ? -1 : x->when > y->when;
}

uint64_t zr_mirror_trim(int rootfd, uint64_t limit) {
        closed_mirror *v = NULL;
        size_t n = 0, cap = 0;
        uint64_t total = 0, removed = 0;
        int rfd = openat(rootfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        DIR *root = rfd >= 0 ? fdopendir(rfd) : NULL;
        struct dirent *se;

        if (!root) {
                if (rfd >= 0)
                        close(rfd);
                return 0;
        }
        while ((se = readdir(root))) {
                if (se->d_name[0] == '.' || strlen(se->d_name) != 16)
                        continue;
                int sfd = openat(rootfd, se->d_name, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
                int dfd = sfd >= 0 ? openat(sfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC) : -1;
                DIR *sd = dfd >= 0 ? fdopendir(dfd) : NULL;
                struct dirent *me;
                while (sd && (me = readdir(sd))) {
                        if (me->d_name[0] == '.' || strlen(me->d_name) != 32)
                                continue;
                        int mfd = openat(sfd, me->d_name, O_RDONLY | O_DIRECTORY | O_CLOEXEC |
                                                                O_NOFOLLOW);
                        int lfd = mfd >= 0 ? openat(mfd, "lock", O_RDWR | O_CLOEXEC | O_NOFOLLOW)
                                           : -1;
                        struct stat st;
                        /* open (locked) by a daemon: not ours to remove */
                        if (lfd >= 0 && flock(lfd, LOCK_EX | LOCK_NB) == 0 &&
                            fstat(mfd, &st) == 0) {
                                if (n == cap) {
                                        cap = cap ? 2 * cap : 16;
                                        closed_mirror *nv = realloc(v, cap * sizeof(*v));
                                        if (!nv)
                                                cap = n;
                                        else
                                                v = nv;
                                }
                                if (n < cap) {
                                        closed_mirror *c = &v[n++];
                                        snprintf(c->store, sizeof(c->store), "%s", se->d_name);
                                        snprintf(c->id, sizeof(c->id), "%s", me->d_name);
                                        c->bytes = dir_bytes(mfd);
                                        c->when = (int64_t)st.st_mtim.tv_sec;
                                        total += c->bytes;
                                }
                        }
                        if (lfd >= 0)
                                close(lfd);
                        if (mfd >= 0)
                                close(mfd);
                }
                if (sd)
                        closedir(sd);
                else if (dfd >= 0)
                        close(dfd);
                if (sfd >= 0)
                        close(sfd);
        }
        closedir(root);
        if (n > 1)
                qsort(v, n, sizeof(*v), older_first);
        for (size_t i = 0; i < n && total > limit; i++) {
                int sfd = openat(rootfd, v[i].store, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
                if (sfd < 0)
                        continue;
                int mfd = openat(sfd, v[i].id, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
                int lfd = mfd >= 0 ? openat(mfd, "lock", O_RDWR | O_CLOEXEC | O_NOFOLLOW) : -1;
                if (lfd >= 0 && flock(lfd, LOCK_EX | LOCK_NB) == 0) {
                        remove_tree(sfd, v[i].id); /* still closed: its lock is ours now */
                        total -= v[i].bytes;
                        removed += v[i].bytes;
                }
                if (lfd >= 0)
                        close(lfd);
                if (mfd >= 0)
                        close(mfd);
                close(sfd);
        }
        free(v);
        return removed;
}

/* ---- fetching --------------------------------------------------------------------- */

size_t zr_mirror_missing(zr_mirror *m, const zr_mrec *r, size_t n, uint8_t *ret) {
        size_t k = 0;
        for (size_t i = 0; i < n; i++) {
                int miss = r[i].idx < m->length && !bit_get(m, r[i].idx);
                if (ret)
                        ret[i] = (uint8_t)miss;
                k += (size_t)miss;
        }
        return k;
}

static int add_waiter(mreq *q, group *g) {
        if (q->nwait && q->waiters[q->nwait - 1] == g)
                return 0; /* already (records of one request come together) */
        for (size_t i = 0; i < q->nwait; i++)
                if (q->waiters[i] == g)
                        return 0;
        if (q->nwait == q->capwait) {
                size_t cap = q->capwait ? 2 * q->capwait : 2;
                group **w = realloc(q->waiters, cap * sizeof(*w));
                if (!w)
                        return -ENOMEM;
                q->waiters = w;
                q->capwait = cap;
        }
        q->waiters[q->nwait++] = g;
        g->pending++;
        return 1;
}

static void req_done(zr_fetch *fq, int rc, const zr_error *err);

static void req_submit(mreq *q) {
        q->q = (zr_fetch){ .src = q->m->src, .name = q->name, .off = q->off, .len = q->len,
                           .dst = q->buf, .prio = q->q.prio, .done = req_done, .arg = q };
        zr_fetcher_submit(q->m->f, &q->q);
}

static void req_free(mreq *q) {
        free(q->buf);
        free(q->rec);
        free(q->waiters);
        free(q);
}

static void req_done(zr_fetch *fq, int rc, const zr_error *err) {
        mreq *q = fq->arg;
        zr_mirror *m = q->m;
        zr_error e = {0};
        size_t k = 0;

        if (err && err->code)
                e = *err;
        if (rc == 0) {
                for (k = 0; k < q->nrec; k++) {
                        const zr_mrec *r = &q->rec[k];
                        if (s3_checksum(q->buf + (r->off - q->off), r->len) != sum_of(m, r->idx))
                                break;
                }
                if (k < q->nrec && !q->refetched) {
                        /* fetched again once: a damaged body, not a damaged store */
                        q->refetched = 1;
                        pthread_mutex_lock(&m->mu);
                        m->st.refetched++;
                        pthread_mutex_unlock(&m->mu);
                        req_submit(q);
                        return;
                }
                if (k < q->nrec)
                        rc = zr_error_set(&e, ZR_E_CORRUPT, "%s/%s bytes %" PRIu32 "-%" PRIu64
                                          ": record %" PRIu64 " does not match its checksum, "
                                          "twice", zr_rsrc_url(m->src), q->name, q->rec[k].off,
                                          (uint64_t)q->rec[k].off + q->rec[k].len,
                                          q->rec[k].idx);
        }
        for (k = 0; rc == 0 && k < q->nrec; k++) {
                const zr_mrec *r = &q->rec[k];
                const uint8_t *p = q->buf + (r->off - q->off);
                for (uint64_t w = 0; w < r->len;) {
                        ssize_t n = pwrite(m->chunks[r->chunk].fd, p + w, r->len - w,
                                           (off_t)(r->off + w));
                        if (n <= 0) {
                                rc = zr_error_errno(&e, n < 0 ? errno : EIO, "the mirror of %s: "
                                                    "writing %s", zr_rsrc_url(m->src), q->name);
                                break;
                        }
                        w += (uint64_t)n;
                }
        }
        group **notify = NULL;
        size_t nn = 0;
        pthread_mutex_lock(&m->mu);
        for (k = 0; k < q->nrec; k++) {
                const zr_mrec *r = &q->rec[k];
                rnode *n = node_find(m->inflight, r->idx);
                if (n && n->req == q)
                        node_del(m->inflight, n);
                if (rc == 0) {
                        bit_set(m, r->idx, 1);
                        m->st.present++;
                        m->st.present_bytes += r->len;
                } else {
                        pages_ref(m, r, -1);
                }
        }
        m->st.fetched_bytes += rc == 0 ? q->len : 0;
        notify = malloc(q->nwait * sizeof(*notify) + 1);
        for (size_t i = 0; i < q->nwait; i++) {
                group *g = q->waiters[i];
                if (rc < 0 && g->rc == 0) {
                        g->rc = rc;
                        g->err = e;
                }
                if (--g->pending == 0 && notify)
                        notify[nn++] = g;
        }
        pthread_mutex_unlock(&m->mu);
        if (rc == 0 && m->hooks.arrived)
                m->hooks.arrived(m->hooks.arg, q->rec, q->nrec);
        for (size_t i = 0; i < nn; i++) {
                group *g = notify[i];
                g->cb(g->arg, g->rc, &g->err);
                free(g);
        }
        free(notify);
        pthread_mutex_lock(&m->mu);
        m->requests_out--;
        if (q->prev)
                q->prev->next = q->next;
        else
                m->out = q->next;
        if (q->next)
                q->next->prev = q->prev;
        pthread_cond_broadcast(&m->cv);
        pthread_mutex_unlock(&m->mu);
        req_free(q);
}

static int cmp_rec(const void *a, const void *b) {
        const zr_mrec *x = a, *y = b;
        if (x->chunk != y->chunk)
                return x->chunk < y->chunk ? -1 : 1;
        if (x->off != y->off)
                return x->off < y->off ? -1 : 1;
        return x->idx < y->idx ? -1 : x->idx > y->idx;
}

int zr_mirror_fetch(zr_mirror *m, const zr_mrec *r, size_t n, uint64_t prio, zr_mirror_cb *cb,
                    void *arg, zr_mirror_wait_t **ret_wait) {
        zr_mrec *want = NULL;
        mreq **reqs = NULL;
        size_t nw = 0, nreq = 0;
        group *g = calloc(1, sizeof(*g));
        int rc = 0;

        if (!g)
                return -ENOMEM;
        g->cb = cb;
        g->arg = arg;
        want = malloc((n ? n : 1) * sizeof(*want));
        reqs = malloc((n ? n : 1) * sizeof(*reqs));
        if (!want || !reqs) {
                rc = -ENOMEM;
                goto out;
        }
        pthread_mutex_lock(&m->mu);
        for (size_t i = 0; i < n; i++) {
                if (!rec_ok(m, &r[i]) || bit_get(m, r[i].idx))
                        continue;
                rnode *in = node_find(m->inflight, r[i].idx);
                if (in) {
                        /* somebody's request brings it: wait for that one too */
                        int added = add_waiter(in->req, g);
                        if (added > 0) {
                                m->st.shared++;
                                if (prio < in->req->q.prio)
                                        zr_fetcher_hurry(m->f, &in->req->q, prio);
                        }
                        continue;
                }
                want[nw++] = r[i];
        }
        if (nw > 1)
                qsort(want, nw, sizeof(*want), cmp_rec);
        /* coalesce neighbours of one chunk into ranges */
        for (size_t i = 0; i < nw;) {
                size_t j = i + 1;
                uint64_t lo = want[i].off, hi = lo + want[i].len;
                while (j < nw && want[j].chunk == want[i].chunk) {
                        if (want[j].idx == want[j - 1].idx) { /* a repeat */
                                j++;
                                continue;
                        }
                        uint64_t end = (uint64_t)want[j].off + want[j].len;
                        uint64_t gap = want[j].off > hi ? want[j].off - hi : 0;
                        uint64_t nhi = end > hi ? end : hi;
                        if (gap > ZR_MIRROR_GAP || gap * 8 > nhi - lo ||
                            nhi - lo > ZR_MIRROR_RANGE_MAX)
                                break;
                        hi = nhi;
                        j++;
                }
                mreq *q = calloc(1, sizeof(*q));
                if (q) {
                        q->buf = malloc(hi - lo ? hi - lo : 1);
                        q->rec = malloc((j - i) * sizeof(*q->rec));
                }
                if (!q || !q->buf || !q->rec) {
                        if (q)
                                req_free(q);
                        rc = -ENOMEM;
                        break;
                }
                q->m = m;
                q->chunk = want[i].chunk;
                q->off = lo;
                q->len = hi - lo;
                q->q.prio = prio;
                snprintf(q->name, sizeof(q->name), "%" PRIu32 ".chunk", q->chunk);
                for (size_t k = i; k < j; k++) {
                        if (k > i && want[k].idx == want[k - 1].idx)
                                continue;
                        rnode *nd = node_add(m->inflight, want[k].idx);
                        if (!nd)
                                continue; /* fetched all the same, only not shared */
                        nd->req = q;
                        q->rec[q->nrec++] = want[k];
                        pages_ref(m, &want[k], 1);
                        m->st.needed_bytes += want[k].len;
                }
                add_waiter(q, g);
                q->next = m->out;
                if (m->out)
                        m->out->prev = q;
                m->out = q;
                reqs[nreq++] = q;
                i = j;
        }
        m->requests_out += (unsigned)nreq;
        m->st.requests += nreq;
        int nothing = g->pending == 0;
        if (!nothing && ret_wait)
                *ret_wait = g;
        pthread_mutex_unlock(&m->mu);
        for (size_t i = 0; i < nreq; i++)
                req_submit(reqs[i]);
        if (nothing) {
                free(g);
                g = NULL;
                rc = rc < 0 ? rc : 1;
        } else {
                g = NULL; /* the requests own it now */
                if (rc < 0)
                        rc = 0; /* what was submitted calls back; the rest is fetched later */
        }
out:
        free(g);
        free(want);
        free(reqs);
        return rc;
}

static void wait_cb(void *arg, int rc, const zr_error *err) {
        group *g = arg; /* a copy owned by the waiter: see zr_mirror_wait() */
        zr_mirror *m = (zr_mirror *)g->arg;
        pthread_mutex_lock(&m->mu);
        g->rc = rc;
        if (err)
                g->err = *err;
        g->done = 1;
        pthread_cond_broadcast(&m->cv);
        pthread_mutex_unlock(&m->mu);
}

int zr_mirror_cancel(zr_mirror *m, zr_mirror_wait_t *g) {
        int gone = 0;
        pthread_mutex_lock(&m->mu);
        if (g->pending > 0) {
                /* off every request out that it waits for */
                for (mreq *q = m->out; q && g->pending > 0; q = q->next)
                        for (size_t i = 0; i < q->nwait; i++) {
                                if (q->waiters[i] != g)
                                        continue;
                                q->waiters[i] = q->waiters[--q->nwait];
                                g->pending--;
                                break;
                        }
                gone = 1;
        }
        pthread_mutex_unlock(&m->mu);
        if (gone)
                free(g);
        return gone;
}

int zr_mirror_wait(zr_mirror *m, const zr_mrec *r, size_t n, zr_error *err) {
        group w = { .arg = m };
        int rc = zr_mirror_fetch(m, r, n, 0, wait_cb, &w, NULL);
        if (rc == 1)
                return 0;
        if (rc < 0)
                return zr_error_set(err, -rc, "fetching records of %s", zr_rsrc_url(m->src));
        pthread_mutex_lock(&m->mu);
        while (!w.done)
                pthread_cond_wait(&m->cv, &m->mu);
        pthread_mutex_unlock(&m->mu);
        if (w.rc < 0)
                return zr_error_set(err, -w.rc, "%s", w.err.message);
        /* a record that failed to queue (no memory) is fetched now */
        return zr_mirror_missing(m, r, n, NULL) ? zr_mirror_wait(m, r, n, err) : 0;
}

/* ---- pins and eviction ------------------------------------------------------------ */

void zr_mirror_pin(zr_mirror *m, const zr_mrec *r, size_t n) {
        pthread_mutex_lock(&m->mu);
        for (size_t i = 0; i < n; i++) {
                rnode *p = node_find(m->pinned, r[i].idx);
                if (!p && !(p = node_add(m->pinned, r[i].idx)))
                        continue;
                p->pins++;
        }
        pthread_mutex_unlock(&m->mu);
}

/* Mutex held. */
static void evict_now(zr_mirror *m, const zr_mrec *r) {
        if (!rec_ok(m, r) || !bit_get(m, r->idx))
                return;
        bit_set(m, r->idx, 0);
        pages_ref(m, r, -1);
        m->st.present--;
        m->st.present_bytes -= r->len;
        m->st.evicted++;
}

void zr_mirror_unpin(zr_mirror *m, const zr_mrec *r, size_t n) {
        pthread_mutex_lock(&m->mu);
        for (size_t i = 0; i < n; i++) {
                rnode *p = node_find(m->pinned, r[i].idx);
                if (!p || p->pins == 0 || --p->pins > 0)
                        continue;
                if (p->evict)
                        evict_now(m, &p->rec);
                node_del(m->pinned, p);
        }
        pthread_mutex_unlock(&m->mu);
}

void zr_mirror_evict(zr_mirror *m, const zr_mrec *r) {
        pthread_mutex_lock(&m->mu);
        rnode *p = node_find(m->pinned, r->idx);
        if (p) {
                p->evict = 1;
                p->rec = *r;
        } else {
                evict_now(m, r);
        }
        pthread_mutex_unlock(&m->mu);
}

void zr_mirror_stats_get(zr_mirror *m, zr_mirror_stats *ret) {
        pthread_mutex_lock(&m->mu);
        *ret = m->st;
        pthread_mutex_unlock(&m->mu);
}
