/* pull.c: `zrecord pull s3://... PATH`, a store (or a multi-stream set) from
 * object storage (docs/REMOTE.md, "A store in a bucket").
 *
 * It GETs the manifest, then every object in 16 MiB ranges, checks each
 * metadata object against the manifest and every record against its
 * checksum, makes the chunks the sizes a store has (every table segment at the
 * size of its bytes in use), and writes meta.zr last. A pull cut off resumes:
 * a chunk already whole and sound is kept.
 *
 * It runs in the tool, as the user, with the user's credentials; it needs no
 * daemon.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "manifest.h"
#include "storefiles.h"
#include "tool.h"
#include "transfer.h"

typedef struct pobj {
        const s3_object *mo;
        int fd;
        uint64_t pieces, sent, done;
        int keep;             /* already whole and sound */
        uint8_t *buf;         /* metadata: the whole object, checked before it is written */
} pobj;

typedef struct puller {
        const s3_target *t;
        const s3_creds *c;
        pobj *o;
        size_t n, cursor;
        int dirfd;
        tool_progress *p;
        int failed;
} puller;

typedef struct gq {
        s3_request r;
        pobj *o;
        uint64_t off;
        uint8_t *piece;
} gq;

static int is_chunk(const char *name) {
        const char *dot = strchr(name, '.');
        return dot && strcmp(dot, ".chunk") == 0;
}

static s3_request *pull_next(void *arg) {
        puller *pl = arg;
        while (!pl->failed && pl->cursor < pl->n) {
                pobj *o = &pl->o[pl->cursor];
                if (o->keep || o->sent >= o->pieces) {
                        pl->cursor++;
                        continue;
                }
                uint64_t off = o->sent * TOOL_PART_BYTES, len = o->mo->size - off;
                if (len > TOOL_PART_BYTES)
                        len = TOOL_PART_BYTES;
                gq *q = calloc(1, sizeof(*q));
                s3_error e = {0};
                if (!q || !(q->piece = o->buf ? o->buf + off : malloc(len ? len : 1))) {
                        free(q);
                        pl->failed = 1;
                        return NULL;
                }
                s3_spec sp = { .method = "GET", .name = o->mo->name, .range_off = off,
                               .range_len = len, .dst = q->piece, .dst_len = len };
                if (s3_request_init(&q->r, pl->t, pl->c, &sp, &e) < 0) {
                        fprintf(stderr, "zrecord: pull: %s\n", e.message);
                        if (!o->buf)
                                free(q->piece);
                        free(q);
                        pl->failed = 1;
                        return NULL;
                }
                q->r.user = q;
                q->o = o;
                q->off = off;
                o->sent++;
                return &q->r;
        }
        return NULL;
}

static int pull_done(void *arg, s3_request *r, int rc, const s3_error *err) {
        puller *pl = arg;
        gq *q = r->user;
        int out = 0;

        if (rc < 0) {
                fprintf(stderr, "\nzrecord: pull: %s\n", err->message);
                out = rc;
        } else if (!q->o->buf) {
                for (uint64_t k = 0; k < r->len;) {
                        ssize_t w = pwrite(q->o->fd, q->piece + k, r->len - k,
                                           (off_t)(q->off + k));
                        if (w <= 0) {
                                fprintf(stderr, "\nzrecord: pull: writing %s: %s\n",
                                        q->o->mo->name, strerror(errno));
                                out = -EIO;
                                break;
                        }
                        k += (uint64_t)w;
                }
        }
        if (out == 0) {
                q->o->done++;
                pl->p->done += r->len;
        }
        s3_request_fini(&q->r);
        if (!q->o->buf)
                free(q->piece);
        free(q);
        tool_progress_show(pl->p, 0);
        return out;
}

/* Whether every record of chunk `c` (mapped: data, len) matches its checksum. */
static int chunk_sound(uint32_t c, const uint8_t *data, uint64_t len, const pobj *locs,
                       const pobj *sums, size_t nseg) {
        for (size_t s = 0; s < nseg; s++) {
                uint64_t n = locs[s].mo->size / TOOL_LOC_BYTES;
                for (uint64_t i = 0; i < n; i++) {
                        const uint8_t *e = locs[s].buf + i * TOOL_LOC_BYTES;
                        if (tool_le32(e + 12) != c)
                                continue;
                        uint64_t off = tool_le32(e), pl = tool_le32(e + 4);
                        if (off + pl > len ||
                            s3_checksum(data + off, pl) != tool_le64(sums[s].buf + i * 8))
                                return 0;
                }
        }
        return 1;
}

static int write_all(int dirfd, const char *name, const uint8_t *b, uint64_t n, uint64_t size,
                     const char *where) {
        int fd = openat(dirfd, name, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
        int r = 0;
        if (fd < 0)
                return tool_fail_msg("%s/%s: %s", where, name, strerror(errno));
        for (uint64_t k = 0; k < n && r == 0;) {
                ssize_t w = pwrite(fd, b + k, n - k, (off_t)k);
                if (w <= 0)
                        r = tool_fail_msg("%s/%s: %s", where, name, strerror(errno));
                else
                        k += (uint64_t)w;
        }
        if (r == 0 && size > n && ftruncate(fd, (off_t)size) < 0)
                r = tool_fail_msg("%s/%s: %s", where, name, strerror(errno));
        if (r == 0 && fsync(fd) < 0)
                r = tool_fail_msg("%s/%s: fsync: %s", where, name, strerror(errno));
        close(fd);
        return r;
}

static int pull_store(const s3_target *t, const s3_creds *c, const char *where, unsigned parallel,
                      bool json) {
        tool_progress p = { .verb = "pull", .t0_ns = tool_mono_ns(), .tty = isatty(2) };
        s3_manifest m = {0};
        uint8_t *mbody = NULL;
        uint64_t mlen = 0;
        s3_error err = {0};
        pobj *po = NULL;
        tool_header h;
        int dirfd = -1, r;
        char src[S3_WHAT_MAX];

        s3_describe(t, NULL, src, sizeof(src));
        s3_spec get = { .method = "GET", .name = S3_MANIFEST_NAME, .max_body = S3_MANIFEST_MAX };
        if (tool_s3_one(t, c, &get, &err, &mbody, &mlen) < 0)
                return tool_fail_msg("pull: %s", err.message);
        if (s3_manifest_decode(mbody, mlen, &m, &err) < 0) {
                r = tool_fail_msg("pull: %s: %s", src, err.message);
                goto out;
        }
        if (mkdir(where, 0755) < 0 && errno != EEXIST) {
                r = tool_fail_msg("%s: %s", where, strerror(errno));
                goto out;
        }
        dirfd = open(where, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (dirfd < 0) {
                r = tool_fail_msg("%s: %s", where, strerror(errno));
                goto out;
        }
        if (faccessat(dirfd, TOOL_META_NAME, F_OK, AT_SYMLINK_NOFOLLOW) == 0) {
                r = tool_fail_msg("%s holds a store already: pull into a new directory", where);
                goto out;
        }
        po = calloc(m.nobjects, sizeof(*po));
        if (!po) {
                r = tool_fail_msg("out of memory");
                goto out;
        }
        /* metadata first, in memory, checked; then the chunks into their files */
        size_t nmeta = 0, k = 0;
        for (size_t i = 0; i < m.nobjects; i++)
                if (!is_chunk(m.objects[i].name))
                        po[k++].mo = &m.objects[i];
        nmeta = k;
        for (size_t i = 0; i < m.nobjects; i++)
                if (is_chunk(m.objects[i].name))
                        po[k++].mo = &m.objects[i];
        for (size_t i = 0; i < m.nobjects; i++) {
                po[i].fd = -1;
                po[i].pieces = (po[i].mo->size + TOOL_PART_BYTES - 1) / TOOL_PART_BYTES;
                if (i < nmeta) {
                        if (!po[i].mo->has_xxh3 || po[i].mo->size > S3_MANIFEST_MAX * 64) {
                                r = tool_fail_msg("pull: %s: %s has no checksum or is too large",
                                                  src, po[i].mo->name);
                                goto out;
                        }
                        po[i].buf = malloc(po[i].mo->size + 1);
                        if (!po[i].buf) {
                                r = tool_fail_msg("out of memory");
                                goto out;
                        }
                }
                p.total += po[i].mo->size;
        }
        puller pl = { .t = t, .c = c, .o = po, .n = nmeta, .dirfd = dirfd, .p = &p };
        s3_pump_ops ops = { pull_next, pull_done };
        if (s3_pump(&ops, &pl, parallel, TOOL_ATTEMPTS, &err) < 0 || pl.failed) {
                r = tool_fail_msg("pull: %s", err.code ? err.message : "failed");
                goto out;
        }
        for (size_t i = 0; i < nmeta; i++)
                if (s3_checksum(po[i].buf, po[i].mo->size) != po[i].mo->xxh3) {
                        r = tool_fail_msg("pull: %s/%s does not match its checksum", src,
                                          po[i].mo->name);
                        goto out;
                }
        pobj *meta = NULL, *locs = NULL, *sums = NULL;
        size_t nseg = 0;
        for (size_t i = 0; i < nmeta; i++) {
                if (strcmp(po[i].mo->name, TOOL_META_NAME) == 0)
                        meta = &po[i];
        }
        if (!meta || tool_header_parse(meta->buf, meta->mo->size, &h, src) != 0) {
                r = ZRECORD_EXIT_FAILED;
                goto out;
        }
        nseg = (h.length + ((uint64_t)1 << TOOL_SEG_LOG2) - 1) >> TOOL_SEG_LOG2;
        locs = calloc(nseg + 1, sizeof(*locs));
        sums = calloc(nseg + 1, sizeof(*sums));
        if (!locs || !sums) {
                free(locs);
                free(sums);
                r = tool_fail_msg("out of memory");
                goto out;
        }
        for (size_t s = 0; s < nseg; s++) {
                char ln[32], sn[32];
                snprintf(ln, sizeof(ln), "%zu.loc", s);
                snprintf(sn, sizeof(sn), "%zu.sum", s);
                for (size_t i = 0; i < nmeta; i++) {
                        if (strcmp(po[i].mo->name, ln) == 0)
                                locs[s] = po[i];
                        if (strcmp(po[i].mo->name, sn) == 0)
                                sums[s] = po[i];
                }
                uint64_t entries = h.length - ((uint64_t)s << TOOL_SEG_LOG2);
                if (entries > ((uint64_t)1 << TOOL_SEG_LOG2))
                        entries = (uint64_t)1 << TOOL_SEG_LOG2;
                if (!locs[s].mo || !sums[s].mo || locs[s].mo->size != entries * TOOL_LOC_BYTES ||
                    sums[s].mo->size != entries * 8) {
                        free(locs);
                        free(sums);
                        r = tool_fail_msg("pull: %s: segment %zu's table or checksums are "
                                          "missing or of the wrong size", src, s);
                        goto out;
                }
        }
        /* chunks: whole and sound already (a pull that was cut off), or fetched */
        uint64_t cap = (uint64_t)1 << h.chunk_log2;
        for (size_t i = nmeta; i < m.nobjects; i++) {
                pobj *o = &po[i];
                uint32_t cid = (uint32_t)strtoul(o->mo->name, NULL, 10);
                struct stat st;
                if (cid > h.tail_chunk || o->mo->size > cap) {
                        r = tool_fail_msg("pull: %s: %s does not belong to the store", src,
                                          o->mo->name);
                        goto out_segs;
                }
                o->fd = openat(dirfd, o->mo->name, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
                if (o->fd < 0 || fstat(o->fd, &st) < 0) {
                        r = tool_fail_msg("%s/%s: %s", where, o->mo->name, strerror(errno));
                        goto out_segs;
                }
                if ((uint64_t)st.st_size >= o->mo->size && o->mo->size > 0) {
                        void *mp = mmap(NULL, o->mo->size, PROT_READ, MAP_SHARED, o->fd, 0);
                        if (mp != MAP_FAILED) {
                                o->keep = chunk_sound(cid, mp, o->mo->size, locs, sums, nseg);
                                munmap(mp, o->mo->size);
                        }
                } else if (o->mo->size == 0) {
                        o->keep = 1;
                }
                if (o->keep) {
                        p.total -= o->mo->size;
                        p.skipped += o->mo->size;
                }
        }
        puller pc = { .t = t, .c = c, .o = po + nmeta, .n = m.nobjects - nmeta, .dirfd = dirfd,
                      .p = &p };
        memset(&err, 0, sizeof(err));
        if (s3_pump(&ops, &pc, parallel, TOOL_ATTEMPTS, &err) < 0 || pc.failed) {
                r = tool_fail_msg("pull: %s", err.code ? err.message : "failed");
                goto out_segs;
        }
        for (size_t i = nmeta; i < m.nobjects; i++) {
                pobj *o = &po[i];
                uint32_t cid = (uint32_t)strtoul(o->mo->name, NULL, 10);
                int sound = 1;
                if (o->mo->size > 0) {
                        void *mp = mmap(NULL, o->mo->size, PROT_READ, MAP_SHARED, o->fd, 0);
                        sound = mp != MAP_FAILED && chunk_sound(cid, mp, o->mo->size, locs, sums,
                                                                nseg);
                        if (mp != MAP_FAILED)
                                munmap(mp, o->mo->size);
                }
                /* a chunk has the capacity of the store's (sparse), as the store makes them */
                if (!sound) {
                        r = tool_fail_msg("pull: %s/%s: a record does not match its checksum",
                                          src, o->mo->name);
                        goto out_segs;
                }
                if (ftruncate(o->fd, (off_t)(cid < h.tail_chunk ? cap : o->mo->size)) < 0 ||
                    fsync(o->fd) < 0) {
                        r = tool_fail_msg("%s/%s: %s", where, o->mo->name, strerror(errno));
                        goto out_segs;
                }
        }
        /* metadata files, meta.zr last */
        for (size_t i = 0; i < nmeta; i++) {
                const char *name = po[i].mo->name;
                const char *dot = strchr(name, '.');
                if (&po[i] == meta || strcmp(dot, ".sum") == 0)
                        continue;
                /* every file at the size of its bytes in use: a table segment
                 * grows as records are appended (the store writes past its end) */
                if ((r = write_all(dirfd, name, po[i].buf, po[i].mo->size, po[i].mo->size,
                                   where)) != 0)
                        goto out_segs;
        }
        if ((r = write_all(dirfd, TOOL_META_NAME, meta->buf, meta->mo->size, meta->mo->size, where)) != 0)
                goto out_segs;
        fsync(dirfd);
        tool_progress_show(&p, 1);
        if (json)
                printf("{\"url\": \"%s\", \"id\": \"%s\", \"path\": \"%s\", \"records\": %" PRIu64
                       ", \"downloaded_bytes\": %" PRIu64 ", \"kept_bytes\": %" PRIu64 "}\n", src,
                       m.id, where, h.length, p.done, p.skipped);
        else
                printf("%s: pulled %" PRIu64 " records from %s (%.1f MiB fetched, %.1f MiB "
                       "already here)\n", where, h.length, src, (double)p.done / 1048576.0,
                       (double)p.skipped / 1048576.0);
        r = 0;
out_segs:
        free(locs);
        free(sums);
out:
        for (size_t i = 0; po && i < m.nobjects; i++) {
                if (po[i].fd >= 0)
                        close(po[i].fd);
                free(po[i].buf);
        }
        free(po);
        free(mbody);
        s3_manifest_fini(&m);
        if (dirfd >= 0)
                close(dirfd);
        return r;
}

int tool_cmd_pull(const cmdline *cl) {
        unsigned parallel = cl->parallel ? (unsigned)cl->parallel : TOOL_PARALLEL_DEFAULT;
        s3_config cfg;
        s3_target t;
        s3_error err = {0};
        uint8_t *body = NULL;
        uint64_t len = 0;
        char **names = NULL;
        size_t n = 0;
        int r;

        if ((r = tool_s3_resolve(cl->path, &t, &cfg)) != 0)
                return r;
        /* a GET, not a HEAD: a refusal then carries the server's code and message */
        s3_spec head = { .method = "GET", .name = S3_MANIFEST_NAME, .max_body = S3_MANIFEST_MAX };
        r = tool_s3_one(&t, &cfg.creds, &head, &err, NULL, NULL);
        if (r == 0 || err.code != ENOENT) {
                r = r == 0 ? pull_store(&t, &cfg.creds, cl->dst, parallel, cl->json)
                           : tool_fail_msg("pull: %s", err.message);
                goto out;
        }
        /* no store manifest: a set's? */
        r = 0;
        memset(&err, 0, sizeof(err));
        s3_spec get = { .method = "GET", .name = S3_SET_NAME, .max_body = S3_MANIFEST_MAX };
        if (tool_s3_one(&t, &cfg.creds, &get, &err, &body, &len) < 0) {
                r = tool_fail_msg("pull: %s: neither %s nor %s (%s)", cl->path, S3_MANIFEST_NAME,
                                  S3_SET_NAME, err.message);
                goto out;
        }
        if (s3_set_decode(body, len, &names, &n, &err) < 0) {
                r = tool_fail_msg("pull: %s: %s", cl->path, err.message);
                goto out;
        }
        if (mkdir(cl->dst, 0755) < 0 && errno != EEXIST) {
                r = tool_fail_msg("%s: %s", cl->dst, strerror(errno));
                goto out;
        }
        for (size_t i = 0; i < n && r == 0; i++) {
                s3_target child;
                char where[4200];
                memset(&err, 0, sizeof(err));
                snprintf(where, sizeof(where), "%s/%s", cl->dst, names[i]);
                if (s3_target_child(&t, names[i], &child, &err) < 0)
                        r = tool_fail_msg("%s", err.message);
                else
                        r = pull_store(&child, &cfg.creds, where, parallel, cl->json);
        }
out:
        tool_names_free(names, n);
        free(body);
        s3_wipe(&cfg.creds, sizeof(cfg.creds));
        return r;
}
