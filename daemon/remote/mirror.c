/* mirror.c: a remote store's mirror on local disk (mirror.h): its open (the
 * metadata kept when sound, else fetched and checked; the chunk files; the
 * present bits), its close, pins and eviction. Fetching records into it is
 * mirror-fetch.c; its directory, cachedir.c.
 *
 * State (mirror-private.h), under the mirror's mutex: the records in flight (a chained hash of
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
#include "remote/mirror-private.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "remote/cachedir.h"
#include "url.h"

#define META_FETCH_PIECE ((uint64_t)16 << 20)

/* ---- shared with mirror-fetch.c ---------------------------------------------------------------- */

rnode *mirror_node_add(rnode **t, uint64_t idx) {
        rnode *n = calloc(1, sizeof(*n));
        if (!n)
                return NULL;
        n->idx = idx;
        n->next = t[mirror_bucket(idx)];
        t[mirror_bucket(idx)] = n;
        return n;
}

void mirror_node_del(rnode **t, rnode *n) {
        for (rnode **p = &t[mirror_bucket(n->idx)]; *p; p = &(*p)->next)
                if (*p == n) {
                        *p = n->next;
                        free(n);
                        return;
                }
}

void mirror_pages_ref(zr_mirror *m, const zr_mrec *r, int d) {
        chunkinfo *c = &m->chunks[r->chunk];
        uint64_t first, last, run = UINT64_MAX;

        if (r->len == 0)
                return;
        first = r->off / ZR_MIRROR_PAGE;
        last = ((uint64_t)r->off + r->len - 1) / ZR_MIRROR_PAGE;
        for (uint64_t p = first; p <= last + 1; p++) {
                if (p <= last) {
                        if (d > 0) {
                                if (c->pages[p] == 0)
                                        m->st.disk_bytes += ZR_MIRROR_PAGE;
                                c->pages[p]++;
                                continue;
                        }
                        if (--c->pages[p] == 0) {
                                m->st.disk_bytes -= ZR_MIRROR_PAGE;
                                if (run == UINT64_MAX)
                                        run = p;
                                continue;
                        }
                }
                if (run != UINT64_MAX) {
                        /* best effort: a file system without holes keeps the bytes */
                        (void)fallocate(c->fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
                                        (off_t)(run * ZR_MIRROR_PAGE), (off_t)((p - run) * ZR_MIRROR_PAGE));
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
                uint64_t first = s << ZR_MIRROR_SEG_LOG2, n = m->length - first;
                if (n > ((uint64_t)1 << ZR_MIRROR_SEG_LOG2))
                        n = (uint64_t)1 << ZR_MIRROR_SEG_LOG2;
                void *p = fd >= 0 && n ? mmap(NULL, n * 16, PROT_READ, MAP_SHARED, fd, 0)
                                       : MAP_FAILED;
                if (fd >= 0)
                        close(fd);
                for (uint64_t i = 0; i < n; i++) {
                        if (!mirror_bit_get(m, first + i))
                                continue;
                        const uint8_t *e = p == MAP_FAILED ? NULL : (const uint8_t *)p + i * 16;
                        zr_mrec r = { first + i, e ? le32(e + 12) : 0, e ? le32(e) : 0,
                                      e ? le32(e + 4) : 0 };
                        if (!e || !mirror_rec_ok(m, &r)) {
                                mirror_bit_set(m, first + i, 0);
                                continue;
                        }
                        mirror_pages_ref(m, &r, 1);
                        m->st.present++;
                        m->st.present_bytes += r.len;
                }
                if (p != MAP_FAILED)
                        munmap(p, n * 16);
        }
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
        m->dirfd = zr_cachedir_mkdir(rootfd, src, man->id, err);
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
        m->nseg = (m->length + ((uint64_t)1 << ZR_MIRROR_SEG_LOG2) - 1) >> ZR_MIRROR_SEG_LOG2;
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
                ci->pages = calloc((size_t)((o->size + ZR_MIRROR_PAGE - 1) / ZR_MIRROR_PAGE) + 1, sizeof(uint16_t));
                if (!ci->pages) {
                        r = zr_error_set(err, ENOMEM, "opening the mirror of %s",
                                         zr_rsrc_url(src));
                        goto fail;
                }
        }
        for (uint64_t s = 0; s < m->nseg; s++) {
                char name[32];
                uint64_t n = m->length - (s << ZR_MIRROR_SEG_LOG2);
                if (n > ((uint64_t)1 << ZR_MIRROR_SEG_LOG2))
                        n = (uint64_t)1 << ZR_MIRROR_SEG_LOG2;
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
                if (mirror_bit_get(m, i))
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
        for (unsigned b = 0; b < ZR_MIRROR_BUCKETS; b++) {
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

/* ---- pins and eviction ------------------------------------------------------------ */

void zr_mirror_pin(zr_mirror *m, const zr_mrec *r, size_t n) {
        pthread_mutex_lock(&m->mu);
        for (size_t i = 0; i < n; i++) {
                rnode *p = mirror_node_find(m->pinned, r[i].idx);
                if (!p && !(p = mirror_node_add(m->pinned, r[i].idx)))
                        continue;
                p->pins++;
        }
        pthread_mutex_unlock(&m->mu);
}

/* Mutex held. */
static void evict_now(zr_mirror *m, const zr_mrec *r) {
        if (!mirror_rec_ok(m, r) || !mirror_bit_get(m, r->idx))
                return;
        mirror_bit_set(m, r->idx, 0);
        mirror_pages_ref(m, r, -1);
        m->st.present--;
        m->st.present_bytes -= r->len;
        m->st.evicted++;
}

void zr_mirror_unpin(zr_mirror *m, const zr_mrec *r, size_t n) {
        pthread_mutex_lock(&m->mu);
        for (size_t i = 0; i < n; i++) {
                rnode *p = mirror_node_find(m->pinned, r[i].idx);
                if (!p || p->pins == 0 || --p->pins > 0)
                        continue;
                if (p->evict)
                        evict_now(m, &p->rec);
                mirror_node_del(m->pinned, p);
        }
        pthread_mutex_unlock(&m->mu);
}

void zr_mirror_evict(zr_mirror *m, const zr_mrec *r) {
        pthread_mutex_lock(&m->mu);
        rnode *p = mirror_node_find(m->pinned, r->idx);
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
