/* push.c: `zrecord push` and `zrecord pull`, a store (or a multi-stream set)
 * to and from object storage (docs/REMOTE.md, "A store in a bucket").
 *
 * push reads the store's own files under a shared lock on meta.zr (no writer
 * may change them meanwhile), through read-only mappings: the header, the
 * table, and each chunk up to its used bytes. It computes every record's
 * checksum ({seg}.sum), deletes the old manifest (a reader then sees no store
 * rather than a mix), uploads each object that is not there yet with the same
 * size and checksum (x-amz-meta-zrecord-xxh3; so a push cut off resumes, and
 * one of a grown store uploads what changed), large ones in 16 MiB parts, and
 * writes the manifest last.
 *
 * pull GETs the manifest, then every object in 16 MiB ranges, checks each
 * metadata object against the manifest and every record against its
 * checksum, makes the chunks and table segments the sizes a store has, and
 * writes meta.zr last. A pull cut off resumes: a file already whole and
 * sound is kept.
 *
 * It runs in the tool, as the user, with the user's credentials; it needs no
 * daemon. It reads the store format itself (docs/FORMAT.md: a 32-byte
 * header, 16-byte table entries), only as far as a copy needs.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <dirent.h>

#include "batch.h"
#include "creds.h"
#include "manifest.h"
#include "tool.h"
#include "url.h"
#include "xml.h"

#define PART_BYTES ((uint64_t)16 << 20) /* multipart part and pull range size */
#define PARALLEL_DEFAULT 16
#define ATTEMPTS 8                       /* tries of a request that may pass */
#define META_NAME "meta.zr"
#define HEADER_BYTES 32
#define LOC_BYTES 16
#define SEG_LOG2 28
#define XXH_META "zrecord-xxh3"
/* A store held by a writer: tried again every 20 ms for 10 s. */
#define LOCK_WAIT_NS 20000000L
#define LOCK_TRIES 500

/* ---- progress --------------------------------------------------------------- */

typedef struct progress {
        const char *verb;
        uint64_t total, done, skipped;
        uint64_t t0_ns, last_ns;
        int tty;
} progress;

static uint64_t mono_ns(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void progress_show(progress *p, int final) {
        uint64_t now = mono_ns();
        if (!final && now - p->last_ns < (p->tty ? 200000000ull : 2000000000ull))
                return;
        p->last_ns = now;
        double s = (double)(now - p->t0_ns) / 1e9, mib = (double)p->done / 1048576.0;
        fprintf(stderr, "%s%s %.1f of %.1f MiB (%.0f%%), %.1f MiB/s%s%s", p->tty ? "\r" : "",
                p->verb, mib, (double)p->total / 1048576.0,
                p->total ? 100.0 * (double)p->done / (double)p->total : 100.0,
                s > 0 ? mib / s : 0.0, p->tty ? "\033[K" : "", final || !p->tty ? "\n" : "");
}

/* ---- the store's files, read ----------------------------------------------------- */

typedef struct header {
        unsigned version, codec, chunk_log2, flags;
        uint32_t tail_chunk, tail_offset;
        uint64_t length;
} header;

static uint32_t le32(const uint8_t *p) {
        return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t le64(const uint8_t *p) {
        return (uint64_t)le32(p) | (uint64_t)le32(p + 4) << 32;
}

static int header_parse(const uint8_t *b, size_t n, header *h, const char *where) {
        if (n != HEADER_BYTES || memcmp(b, "ZREC", 4) != 0)
                return tool_fail_msg("%s: meta.zr is not a zrecord header", where);
        *h = (header){ .version = b[4], .codec = b[5], .tail_chunk = le32(b + 6),
                       .tail_offset = le32(b + 10), .length = le64(b + 14),
                       .chunk_log2 = b[22] ? b[22] : 32, .flags = b[23] };
        if ((h->version != 1 && h->version != 3) || h->codec > 2 || h->chunk_log2 < 12 ||
            h->chunk_log2 > 32)
                return tool_fail_msg("%s: meta.zr: version %u, codec %u, chunk_log2 %u: not a "
                                     "store this zrecord reads", where, h->version, h->codec,
                                     h->chunk_log2);
        return 0;
}

/* One object of a push: its bytes (a mapping or a buffer of ours) and state. */
typedef struct obj {
        char name[S3_OBJECT_NAME_MAX];
        const uint8_t *data;
        uint64_t size;
        void *map;            /* munmap(map, map_len) */
        size_t map_len;
        void *own;            /* free() */
        uint64_t xxh3;
        int in_manifest_xxh3; /* metadata: its xxh3 goes into the manifest */
        /* upload state */
        int skip, head_done;
        char upload_id[512];
        uint32_t parts, parts_sent, parts_done;
        char (*etags)[S3_ETAG_MAX];
        int created, completing, done;
} obj;

typedef struct store_files {
        obj *o;
        size_t n, cap;
        header h;
        uint64_t xbytes;      /* bytes to upload */
} store_files;

static void files_free(store_files *f) {
        for (size_t i = 0; i < f->n; i++) {
                if (f->o[i].map)
                        munmap(f->o[i].map, f->o[i].map_len);
                free(f->o[i].own);
                free(f->o[i].etags);
        }
        free(f->o);
        memset(f, 0, sizeof(*f));
}

static obj *files_add(store_files *f, const char *name) {
        if (f->n == f->cap) {
                size_t cap = f->cap ? 2 * f->cap : 16;
                obj *o = realloc(f->o, cap * sizeof(*o));
                if (!o)
                        return NULL;
                f->o = o;
                f->cap = cap;
        }
        obj *o = &f->o[f->n++];
        memset(o, 0, sizeof(*o));
        snprintf(o->name, sizeof(o->name), "%s", name);
        return o;
}

/* Maps `len` bytes of file `name` of dirfd (0 bytes: no mapping). */
static int map_file(int dirfd, const char *name, uint64_t len, obj *o, const char *where) {
        struct stat st;
        int fd = openat(dirfd, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
        if (fd < 0)
                return tool_fail_msg("%s/%s: %s", where, name, strerror(errno));
        if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || (uint64_t)st.st_size < len) {
                close(fd);
                return tool_fail_msg("%s/%s: not a file of at least %" PRIu64 " bytes", where,
                                     name, len);
        }
        o->size = len;
        if (len) {
                void *m = mmap(NULL, len, PROT_READ, MAP_SHARED, fd, 0);
                if (m == MAP_FAILED) {
                        close(fd);
                        return tool_fail_msg("%s/%s: mmap: %s", where, name, strerror(errno));
                }
                madvise(m, len, MADV_SEQUENTIAL);
                o->map = m;
                o->map_len = len;
                o->data = m;
        }
        close(fd);
        return 0;
}

/* Reads a whole small file of dirfd into o (a missing one: -ENOENT, quiet). */
static int read_small(int dirfd, const char *name, obj *o, const char *where) {
        struct stat st;
        int fd = openat(dirfd, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
        if (fd < 0)
                return errno == ENOENT ? -ENOENT : tool_fail_msg("%s/%s: %s", where, name,
                                                                 strerror(errno));
        if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_size > (64 << 20)) {
                close(fd);
                return tool_fail_msg("%s/%s: not a regular file of at most 64 MiB", where, name);
        }
        o->own = malloc((size_t)st.st_size + 1);
        ssize_t k = o->own ? pread(fd, o->own, (size_t)st.st_size, 0) : -1;
        close(fd);
        if (k != st.st_size)
                return tool_fail_msg("%s/%s: short read", where, name);
        o->data = o->own;
        o->size = (uint64_t)st.st_size;
        return 0;
}

/* The objects of the store in dirfd: metadata, table, checksums, chunks. */
static int store_read(int dirfd, const char *where, store_files *f) {
        obj *meta = files_add(f, META_NAME), *o;
        uint64_t cap, nseg;
        uint64_t *used = NULL;
        int r;

        if (!meta)
                return tool_fail_msg("out of memory");
        r = read_small(dirfd, META_NAME, meta, where);
        if (r < 0)
                return r == -ENOENT ? tool_fail_msg("%s: no meta.zr: not a store", where) : r;
        meta->in_manifest_xxh3 = 1;
        if (header_parse(meta->data, meta->size, &f->h, where) != 0)
                return 1;
        cap = (uint64_t)1 << f->h.chunk_log2;
        if (f->h.tail_offset > cap)
                return tool_fail_msg("%s: meta.zr: tail_offset past the chunk", where);
        for (const char *opt_name = "schema.msgpack"; opt_name;
             opt_name = strcmp(opt_name, "schema.msgpack") == 0 ? "dict.zr" : NULL) {
                o = files_add(f, opt_name);
                if (!o)
                        return tool_fail_msg("out of memory");
                r = read_small(dirfd, opt_name, o, where);
                if (r == -ENOENT) {
                        f->n--;
                        continue;
                }
                if (r)
                        return r;
                o->in_manifest_xxh3 = 1;
        }
        used = calloc((size_t)f->h.tail_chunk + 1, sizeof(*used));
        if (!used)
                return tool_fail_msg("out of memory");
        used[f->h.tail_chunk] = f->h.tail_offset;
        nseg = (f->h.length + ((uint64_t)1 << SEG_LOG2) - 1) >> SEG_LOG2;
        size_t loc0 = f->n;
        for (uint64_t s = 0; s < nseg; s++) {
                char name[32];
                uint64_t first = s << SEG_LOG2, n = f->h.length - first;
                if (n > ((uint64_t)1 << SEG_LOG2))
                        n = (uint64_t)1 << SEG_LOG2;
                snprintf(name, sizeof(name), "%" PRIu64 ".loc", s);
                if (!(o = files_add(f, name))) {
                        r = tool_fail_msg("out of memory");
                        goto out;
                }
                if ((r = map_file(dirfd, name, n * LOC_BYTES, o, where)) != 0)
                        goto out;
                o->in_manifest_xxh3 = 1;
                /* each chunk's used bytes: to the end of its last live record */
                for (uint64_t i = 0; i < n; i++) {
                        const uint8_t *e = o->data + i * LOC_BYTES;
                        uint64_t end = (uint64_t)le32(e) + le32(e + 4);
                        uint32_t c = le32(e + 12);
                        if (c > f->h.tail_chunk || end > cap ||
                            (c == f->h.tail_chunk && end > f->h.tail_offset)) {
                                r = tool_fail_msg("%s: record %" PRIu64 " points past the "
                                                  "store's data (chunk %u, end %" PRIu64 ")",
                                                  where, first + i, c, end);
                                goto out;
                        }
                        if (c < f->h.tail_chunk && end > used[c])
                                used[c] = end;
                }
        }
        size_t loc_end = f->n;
        for (uint32_t c = 0; c <= f->h.tail_chunk; c++) {
                char name[32];
                snprintf(name, sizeof(name), "%u.chunk", c);
                if (!(o = files_add(f, name))) {
                        r = tool_fail_msg("out of memory");
                        goto out;
                }
                if ((r = map_file(dirfd, name, used[c], o, where)) != 0)
                        goto out;
        }
        /* the checksums, one per record, beside the table */
        for (size_t k = loc0; k < loc_end; k++) {
                char name[32];
                uint64_t n = f->o[k].size / LOC_BYTES;
                uint8_t *sums = malloc(n * 8 + 1);
                const uint8_t *locs = f->o[k].data;
                snprintf(name, sizeof(name), "%" PRIu64 ".sum", (uint64_t)(k - loc0));
                if (!sums || !(o = files_add(f, name))) {
                        free(sums);
                        r = tool_fail_msg("out of memory");
                        goto out;
                }
                o->own = sums;
                o->data = sums;
                o->size = n * 8;
                o->in_manifest_xxh3 = 1;
                for (uint64_t i = 0; i < n; i++) {
                        const uint8_t *e = locs + i * LOC_BYTES;
                        const obj *ch = &f->o[loc_end + le32(e + 12)];
                        uint64_t v = s3_checksum(ch->data ? ch->data + le32(e) : (const uint8_t *)"",
                                                 le32(e + 4));
                        for (int b = 0; b < 8; b++)
                                sums[i * 8 + (size_t)b] = (uint8_t)(v >> (8 * b));
                }
        }
        for (size_t k = 0; k < f->n; k++)
                f->o[k].xxh3 = s3_checksum(f->o[k].data ? f->o[k].data : (const uint8_t *)"",
                                           f->o[k].size);
        r = 0;
out:
        free(used);
        return r;
}

/* ---- push --------------------------------------------------------------------- */

typedef struct pusher {
        const s3_target *t;
        const s3_creds *c;
        store_files *f;
        progress *p;
        size_t cursor;        /* the next object to start */
        int failed;
        char what[S3_WHAT_MAX];
} pusher;

typedef struct preq {
        s3_request r;
        obj *o;
        enum { P_HEAD, P_PUT, P_CREATE, P_PART, P_COMPLETE, P_DELETE } kind;
        uint32_t part;
        char *xml;
} preq;

static preq *preq_new(pusher *ps, obj *o, int kind, const s3_spec *sp) {
        preq *q = calloc(1, sizeof(*q));
        s3_error e = {0};
        if (!q)
                return NULL;
        q->o = o;
        q->kind = kind;
        if (s3_request_init(&q->r, ps->t, ps->c, sp, &e) < 0) {
                fprintf(stderr, "zrecord: push: %s\n", e.message);
                free(q);
                ps->failed = 1;
                return NULL;
        }
        q->r.user = q;
        return q;
}

static void preq_free(preq *q) {
        s3_request_fini(&q->r);
        free(q->xml);
        free(q);
}

/* The next request of object o, or NULL if it has none to send now. */
static s3_request *push_next_of(pusher *ps, obj *o) {
        char hex[20], query[700], enc[600];
        s3_spec sp = { .name = o->name };
        preq *q;

        snprintf(hex, sizeof(hex), "%016" PRIx64, o->xxh3);
        if (o->skip || o->done)
                return NULL;
        if (o->size <= PART_BYTES) {
                if (o->created)
                        return NULL;
                o->created = 1;
                sp.method = "PUT";
                sp.body = o->data;
                sp.body_len = o->size;
                sp.meta_name = XXH_META;
                sp.meta_value = hex;
                q = preq_new(ps, o, P_PUT, &sp);
                return q ? &q->r : NULL;
        }
        if (!o->created) {
                o->created = 1;
                sp.method = "POST";
                sp.query = "uploads=";
                sp.meta_name = XXH_META;
                sp.meta_value = hex;
                q = preq_new(ps, o, P_CREATE, &sp);
                return q ? &q->r : NULL;
        }
        if (!o->upload_id[0])
                return NULL; /* the create is in flight */
        if (s3_encode(o->upload_id, 0, enc, sizeof(enc)) < 0) {
                ps->failed = 1;
                return NULL;
        }
        if (o->parts_sent < o->parts) {
                uint32_t k = o->parts_sent++;
                uint64_t off = (uint64_t)k * PART_BYTES;
                snprintf(query, sizeof(query), "partNumber=%u&uploadId=%s", k + 1, enc);
                sp.method = "PUT";
                sp.query = query;
                sp.body = o->data + off;
                sp.body_len = o->size - off < PART_BYTES ? o->size - off : PART_BYTES;
                q = preq_new(ps, o, P_PART, &sp);
                if (q)
                        q->part = k;
                return q ? &q->r : NULL;
        }
        if (o->parts_done < o->parts || o->completing)
                return NULL;
        o->completing = 1;
        size_t cap = 128 + (size_t)o->parts * (S3_ETAG_MAX + 64), len = 0;
        char *xml = malloc(cap);
        if (!xml) {
                ps->failed = 1;
                return NULL;
        }
        len += (size_t)snprintf(xml + len, cap - len, "<CompleteMultipartUpload>");
        for (uint32_t k = 0; k < o->parts; k++)
                len += (size_t)snprintf(xml + len, cap - len, "<Part><PartNumber>%u</PartNumber>"
                                        "<ETag>%s</ETag></Part>", k + 1, o->etags[k]);
        len += (size_t)snprintf(xml + len, cap - len, "</CompleteMultipartUpload>");
        snprintf(query, sizeof(query), "uploadId=%s", enc);
        sp.method = "POST";
        sp.query = query;
        sp.body = xml;
        sp.body_len = len;
        q = preq_new(ps, o, P_COMPLETE, &sp);
        if (!q) {
                free(xml);
                return NULL;
        }
        q->xml = xml;
        return &q->r;
}

static s3_request *push_next(void *arg) {
        pusher *ps = arg;
        if (ps->failed)
                return NULL;
        /* the objects started, in order, then a new one */
        for (size_t i = 0; i < ps->cursor; i++) {
                s3_request *r = push_next_of(ps, &ps->f->o[i]);
                if (r || ps->failed)
                        return r;
        }
        while (ps->cursor < ps->f->n) {
                obj *o = &ps->f->o[ps->cursor++];
                s3_request *r = push_next_of(ps, o);
                if (r || ps->failed)
                        return r;
        }
        return NULL;
}

static int push_done(void *arg, s3_request *r, int rc, const s3_error *err) {
        pusher *ps = arg;
        preq *q = r->user;
        obj *o = q->o;
        int out = 0;

        if (rc == 0 && q->kind == P_COMPLETE && r->buf && strstr((const char *)r->buf, "<Error>")) {
                char code[64], msg[160];
                s3_xml_text((const char *)r->buf, r->len, "Code", code, sizeof(code));
                s3_xml_text((const char *)r->buf, r->len, "Message", msg, sizeof(msg));
                fprintf(stderr, "\nzrecord: push: %s: completing the upload: %s: %s\n", r->what,
                        code, msg);
                out = -EIO;
                goto done;
        }
        if (rc < 0) {
                fprintf(stderr, "\nzrecord: push: %s\n", err->message);
                out = rc;
                goto done;
        }
        switch (q->kind) {
        case P_PUT:
                o->done = 1;
                ps->p->done += o->size;
                break;
        case P_CREATE:
                if (!s3_xml_text((const char *)r->buf, r->len, "UploadId", o->upload_id,
                                 sizeof(o->upload_id)) || !o->upload_id[0]) {
                        fprintf(stderr, "\nzrecord: push: %s: no UploadId in the reply\n", r->what);
                        out = -EIO;
                        break;
                }
                o->parts = (uint32_t)((o->size + PART_BYTES - 1) / PART_BYTES);
                o->etags = calloc(o->parts, sizeof(*o->etags));
                if (!o->etags)
                        out = -ENOMEM;
                break;
        case P_PART:
                if (!r->etag[0]) {
                        fprintf(stderr, "\nzrecord: push: %s: part %u has no ETag\n", r->what,
                                q->part + 1);
                        out = -EIO;
                        break;
                }
                snprintf(o->etags[q->part], S3_ETAG_MAX, "%s", r->etag);
                o->parts_done++;
                ps->p->done += r->up_len;
                break;
        case P_COMPLETE:
                o->done = 1;
                break;
        default:
                break;
        }
done:
        preq_free(q);
        progress_show(ps->p, 0);
        return out;
}

/* HEADs every object: those there with our size and checksum are skipped. */
static int push_check(pusher *ps, unsigned parallel) {
        store_files *f = ps->f;
        s3_request **rs = calloc(f->n, sizeof(*rs));
        preq **qs = calloc(f->n, sizeof(*qs));
        int r = 0;

        if (!rs || !qs) {
                r = tool_fail_msg("out of memory");
                goto out;
        }
        for (size_t i = 0; i < f->n; i++) {
                s3_spec sp = { .method = "HEAD", .name = f->o[i].name, .meta_name = XXH_META };
                qs[i] = preq_new(ps, &f->o[i], P_HEAD, &sp);
                if (!qs[i]) {
                        r = 1;
                        goto out;
                }
                rs[i] = &qs[i]->r;
        }
        int *rc = calloc(f->n, sizeof(*rc));
        s3_error *errs = calloc(f->n, sizeof(*errs));
        if (!rc || !errs) {
                free(rc);
                free(errs);
                r = tool_fail_msg("out of memory");
                goto out;
        }
        s3_run(rs, f->n, parallel, ATTEMPTS, rc, errs);
        for (size_t i = 0; i < f->n && r == 0; i++) {
                obj *o = &f->o[i];
                char hex[20];
                snprintf(hex, sizeof(hex), "%016" PRIx64, o->xxh3);
                if (rc[i] == 0 && rs[i]->has_length && rs[i]->length == o->size &&
                    strcmp(rs[i]->meta, hex) == 0) {
                        o->skip = 1;
                        ps->p->skipped += o->size;
                } else if (rc[i] < 0 && errs[i].code != ENOENT) {
                        r = tool_fail_msg("push: %s", errs[i].message);
                } else {
                        ps->p->total += o->size;
                }
        }
        free(rc);
        free(errs);
out:
        for (size_t i = 0; qs && i < f->n; i++)
                if (qs[i])
                        preq_free(qs[i]);
        free(qs);
        free(rs);
        return r;
}

/* One request, performed with retries (the manifests). */
static int one_request(const s3_target *t, const s3_creds *c, const s3_spec *sp, s3_error *err,
                       uint8_t **ret_body, uint64_t *ret_len) {
        s3_request r;
        int rc = s3_request_init(&r, t, c, sp, err), k;
        if (rc < 0)
                return rc;
        s3_request *rr = &r;
        rc = s3_run(&rr, 1, 1, ATTEMPTS, &k, err);
        if (rc == 0 && ret_body)
                *ret_body = s3_request_take_body(&r, ret_len);
        s3_request_fini(&r);
        return rc;
}

static int push_store(int dirfd, const char *where, const s3_target *t, const s3_creds *c,
                      unsigned parallel, bool json) {
        store_files f = {0};
        progress p = { .verb = "push", .t0_ns = mono_ns(), .tty = isatty(2) };
        pusher ps = { .t = t, .c = c, .f = &f, .p = &p };
        s3_manifest m = {0};
        void *mbuf = NULL;
        size_t mlen = 0;
        s3_error err = {0};
        char dest[S3_WHAT_MAX];
        int lockfd = -1, r;

        s3_describe(t, NULL, dest, sizeof(dest));
        lockfd = openat(dirfd, META_NAME, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
        if (lockfd < 0)
                return tool_fail_msg("%s: %s", where, errno == ENOENT ? "no meta.zr: not a store"
                                                                      : strerror(errno));
        /* a daemon closes a store a moment after its last client did (a
         * closing sync): wait for it a while, not forever */
        for (int tries = 0; flock(lockfd, LOCK_SH | LOCK_NB) < 0; tries++) {
                if (errno != EWOULDBLOCK || tries >= LOCK_TRIES) {
                        r = tool_fail_msg("%s: the store is open for writing elsewhere (a "
                                          "daemon or a program holds its lock): close it, then "
                                          "push", where);
                        goto out;
                }
                nanosleep(&(struct timespec){ .tv_nsec = LOCK_WAIT_NS }, NULL);
        }
        if ((r = store_read(dirfd, where, &f)) != 0)
                goto out;
        if ((r = push_check(&ps, parallel)) != 0)
                goto out;
        /* no manifest while the objects change: a reader sees no store, not a mix */
        s3_spec del = { .method = "DELETE", .name = S3_MANIFEST_NAME };
        r = one_request(t, c, &del, &err, NULL, NULL);
        if (r < 0 && err.code != ENOENT) {
                r = tool_fail_msg("push: %s", err.message);
                goto out;
        }
        s3_pump_ops ops = { push_next, push_done };
        r = s3_pump(&ops, &ps, parallel, ATTEMPTS, &err);
        if (r < 0 || ps.failed) {
                if (err.code)
                        fprintf(stderr, "zrecord: push: %s\n", err.message);
                r = ZRECORD_EXIT_FAILED;
                goto out;
        }
        /* the manifest, last */
        m.length = f.h.length;
        m.codec = f.h.codec;
        m.nobjects = f.n;
        m.objects = calloc(f.n, sizeof(*m.objects));
        if (!m.objects || s3_manifest_new_id(m.id) < 0) {
                r = tool_fail_msg("out of memory");
                goto out;
        }
        for (size_t i = 0; i < f.n; i++) {
                snprintf(m.objects[i].name, sizeof(m.objects[i].name), "%s", f.o[i].name);
                m.objects[i].size = f.o[i].size;
                m.objects[i].xxh3 = f.o[i].xxh3;
                m.objects[i].has_xxh3 = f.o[i].in_manifest_xxh3;
        }
        if (s3_manifest_encode(&m, &mbuf, &mlen) < 0) {
                r = tool_fail_msg("out of memory");
                goto out;
        }
        s3_spec put = { .method = "PUT", .name = S3_MANIFEST_NAME, .body = mbuf, .body_len = mlen };
        memset(&err, 0, sizeof(err));
        if (one_request(t, c, &put, &err, NULL, NULL) < 0) {
                r = tool_fail_msg("push: %s", err.message);
                goto out;
        }
        progress_show(&p, 1);
        if (json)
                printf("{\"url\": \"%s\", \"id\": \"%s\", \"records\": %" PRIu64 ", \"objects\": "
                       "%zu, \"uploaded_bytes\": %" PRIu64 ", \"skipped_bytes\": %" PRIu64 "}\n",
                       dest, m.id, f.h.length, f.n, p.done, p.skipped);
        else
                printf("%s: pushed %" PRIu64 " records to %s (%.1f MiB sent, %.1f MiB already "
                       "there)\n", where, f.h.length, dest, (double)p.done / 1048576.0,
                       (double)p.skipped / 1048576.0);
        r = 0;
out:
        free(mbuf);
        s3_manifest_fini(&m);
        files_free(&f);
        if (lockfd >= 0)
                close(lockfd);
        return r;
}

/* The children of dirfd that hold a meta.zr, sorted (a set), into *ret. */
static int list_streams(int dirfd, char ***ret, size_t *ret_n) {
        int fd = openat(dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
        char **names = NULL;
        size_t n = 0;
        struct dirent *de;

        *ret = NULL;
        *ret_n = 0;
        if (!d) {
                if (fd >= 0)
                        close(fd);
                return -errno;
        }
        while ((de = readdir(d))) {
                char path[600];
                struct stat st;
                if (de->d_name[0] == '.' || strlen(de->d_name) > S3_STREAM_NAME_MAX)
                        continue;
                snprintf(path, sizeof(path), "%s/" META_NAME, de->d_name);
                if (fstatat(dirfd, path, &st, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISREG(st.st_mode))
                        continue;
                char **nn = realloc(names, (n + 1) * sizeof(*nn));
                if (!nn || !(nn[n] = strdup(de->d_name))) {
                        free(nn ? nn : names);
                        closedir(d);
                        return -ENOMEM;
                }
                names = nn;
                n++;
        }
        closedir(d);
        for (size_t i = 1; i < n; i++) /* insertion sort: at most a few dozen */
                for (size_t j = i; j > 0 && strcmp(names[j - 1], names[j]) > 0; j--) {
                        char *x = names[j];
                        names[j] = names[j - 1];
                        names[j - 1] = x;
                }
        *ret = names;
        *ret_n = n;
        return 0;
}

static void names_free(char **names, size_t n) {
        for (size_t i = 0; i < n; i++)
                free(names[i]);
        free(names);
}

static int resolve(const char *url, s3_target *t, s3_config *cfg) {
        s3_error err = {0};
        if (s3_config_resolve(cfg, &err) < 0 ||
            s3_target_init(t, url, cfg->endpoint, cfg->region, cfg->addressing, &err) < 0)
                return tool_fail_msg("%s", err.message);
        return 0;
}

int tool_cmd_push(const cmdline *cl) {
        unsigned parallel = cl->parallel ? (unsigned)cl->parallel : PARALLEL_DEFAULT;
        s3_config cfg;
        s3_target t;
        char **names = NULL;
        size_t n = 0;
        int dirfd, r;

        if ((r = resolve(cl->dst, &t, &cfg)) != 0)
                return r;
        dirfd = open(cl->path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (dirfd < 0) {
                r = tool_fail_msg("%s: %s", cl->path, strerror(errno));
                goto out;
        }
        if (faccessat(dirfd, META_NAME, F_OK, AT_SYMLINK_NOFOLLOW) == 0) {
                r = push_store(dirfd, cl->path, &t, &cfg.creds, parallel, cl->json);
                goto out;
        }
        if (list_streams(dirfd, &names, &n) < 0 || n == 0) {
                r = tool_fail_msg("%s: neither a store (no meta.zr) nor a set of stores", cl->path);
                goto out;
        }
        if (n > S3_STREAMS_MAX) {
                r = tool_fail_msg("%s: %zu streams, at most %d", cl->path, n, S3_STREAMS_MAX);
                goto out;
        }
        for (size_t i = 0; i < n && r == 0; i++) {
                s3_target child;
                s3_error err = {0};
                char where[4200];
                int sfd = openat(dirfd, names[i], O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
                snprintf(where, sizeof(where), "%s/%s", cl->path, names[i]);
                if (s3_target_child(&t, names[i], &child, &err) < 0)
                        r = tool_fail_msg("%s", err.message);
                else if (sfd < 0)
                        r = tool_fail_msg("%s: %s", where, strerror(errno));
                else
                        r = push_store(sfd, where, &child, &cfg.creds, parallel, cl->json);
                if (sfd >= 0)
                        close(sfd);
        }
        if (r == 0) {
                void *buf = NULL;
                size_t len = 0;
                s3_error err = {0};
                if (s3_set_encode(names, n, &buf, &len) < 0) {
                        r = tool_fail_msg("out of memory");
                        goto out;
                }
                s3_spec put = { .method = "PUT", .name = S3_SET_NAME, .body = buf, .body_len = len };
                if (one_request(&t, &cfg.creds, &put, &err, NULL, NULL) < 0)
                        r = tool_fail_msg("push: %s", err.message);
                free(buf);
        }
out:
        names_free(names, n);
        if (dirfd >= 0)
                close(dirfd);
        s3_wipe(&cfg.creds, sizeof(cfg.creds));
        return r;
}

/* ---- pull --------------------------------------------------------------------- */

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
        progress *p;
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
                uint64_t off = o->sent * PART_BYTES, len = o->mo->size - off;
                if (len > PART_BYTES)
                        len = PART_BYTES;
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
        progress_show(pl->p, 0);
        return out;
}

/* Whether every record of chunk `c` (mapped: data, len) matches its checksum. */
static int chunk_sound(uint32_t c, const uint8_t *data, uint64_t len, const pobj *locs,
                       const pobj *sums, size_t nseg) {
        for (size_t s = 0; s < nseg; s++) {
                uint64_t n = locs[s].mo->size / LOC_BYTES;
                for (uint64_t i = 0; i < n; i++) {
                        const uint8_t *e = locs[s].buf + i * LOC_BYTES;
                        if (le32(e + 12) != c)
                                continue;
                        uint64_t off = le32(e), pl = le32(e + 4);
                        if (off + pl > len ||
                            s3_checksum(data + off, pl) != le64(sums[s].buf + i * 8))
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
        progress p = { .verb = "pull", .t0_ns = mono_ns(), .tty = isatty(2) };
        s3_manifest m = {0};
        uint8_t *mbody = NULL;
        uint64_t mlen = 0;
        s3_error err = {0};
        pobj *po = NULL;
        header h;
        int dirfd = -1, r;
        char src[S3_WHAT_MAX];

        s3_describe(t, NULL, src, sizeof(src));
        s3_spec get = { .method = "GET", .name = S3_MANIFEST_NAME, .max_body = S3_MANIFEST_MAX };
        if (one_request(t, c, &get, &err, &mbody, &mlen) < 0)
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
        if (faccessat(dirfd, META_NAME, F_OK, AT_SYMLINK_NOFOLLOW) == 0) {
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
                po[i].pieces = (po[i].mo->size + PART_BYTES - 1) / PART_BYTES;
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
        if (s3_pump(&ops, &pl, parallel, ATTEMPTS, &err) < 0 || pl.failed) {
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
                if (strcmp(po[i].mo->name, META_NAME) == 0)
                        meta = &po[i];
        }
        if (!meta || header_parse(meta->buf, meta->mo->size, &h, src) != 0) {
                r = ZRECORD_EXIT_FAILED;
                goto out;
        }
        nseg = (h.length + ((uint64_t)1 << SEG_LOG2) - 1) >> SEG_LOG2;
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
                uint64_t entries = h.length - ((uint64_t)s << SEG_LOG2);
                if (entries > ((uint64_t)1 << SEG_LOG2))
                        entries = (uint64_t)1 << SEG_LOG2;
                if (!locs[s].mo || !sums[s].mo || locs[s].mo->size != entries * LOC_BYTES ||
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
        if (s3_pump(&ops, &pc, parallel, ATTEMPTS, &err) < 0 || pc.failed) {
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
        if ((r = write_all(dirfd, META_NAME, meta->buf, meta->mo->size, meta->mo->size, where)) != 0)
                goto out_segs;
        fsync(dirfd);
        progress_show(&p, 1);
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
        unsigned parallel = cl->parallel ? (unsigned)cl->parallel : PARALLEL_DEFAULT;
        s3_config cfg;
        s3_target t;
        s3_error err = {0};
        uint8_t *body = NULL;
        uint64_t len = 0;
        char **names = NULL;
        size_t n = 0;
        int r;

        if ((r = resolve(cl->path, &t, &cfg)) != 0)
                return r;
        /* a GET, not a HEAD: a refusal then carries the server's code and message */
        s3_spec head = { .method = "GET", .name = S3_MANIFEST_NAME, .max_body = S3_MANIFEST_MAX };
        r = one_request(&t, &cfg.creds, &head, &err, NULL, NULL);
        if (r == 0 || err.code != ENOENT) {
                r = r == 0 ? pull_store(&t, &cfg.creds, cl->dst, parallel, cl->json)
                           : tool_fail_msg("pull: %s", err.message);
                goto out;
        }
        /* no store manifest: a set's? */
        r = 0;
        memset(&err, 0, sizeof(err));
        s3_spec get = { .method = "GET", .name = S3_SET_NAME, .max_body = S3_MANIFEST_MAX };
        if (one_request(&t, &cfg.creds, &get, &err, &body, &len) < 0) {
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
        names_free(names, n);
        free(body);
        s3_wipe(&cfg.creds, sizeof(cfg.creds));
        return r;
}
