/* push.c: `zrecord push PATH s3://...`, a store (or a multi-stream set) to
 * object storage (docs/REMOTE.md, "A store in a bucket").
 *
 * It reads the store's own files under a shared lock on meta.zr (no writer
 * may change them meanwhile; storefiles.h), deletes the old manifest (a
 * reader then sees no store rather than a mix), uploads each object that is
 * not there yet with the same size and checksum (x-amz-meta-zrecord-xxh3; so a
 * push cut off resumes, and one of a grown store uploads what changed), large
 * ones in 16 MiB parts, and writes the manifest last. A set: each store under
 * its name, then zrecord.set.
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
#include <sys/file.h>
#include <time.h>
#include <unistd.h>

#include "manifest.h"
#include "storefiles.h"
#include "tool.h"
#include "transfer.h"
#include "xml.h"

#define XXH_META "zrecord-xxh3"
/* A store held by a writer: tried again every 20 ms for 10 s. */
#define LOCK_WAIT_NS 20000000L
#define LOCK_TRIES 500

/* One object's upload: its file and where its requests are. */
typedef struct obj {
        const tool_sfile *f;
        int skip;             /* there already, same size and checksum */
        char upload_id[512];
        uint32_t parts, parts_sent, parts_done;
        char (*etags)[S3_ETAG_MAX];
        int created, completing, done;
} obj;

typedef struct pusher {
        const s3_target *t;
        const s3_creds *c;
        const tool_store_files *f;
        obj *o;               /* one per file of f */
        tool_progress *p;
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
        s3_spec sp = { .name = o->f->name };
        preq *q;

        snprintf(hex, sizeof(hex), "%016" PRIx64, o->f->xxh3);
        if (o->skip || o->done)
                return NULL;
        if (o->f->size <= TOOL_PART_BYTES) {
                if (o->created)
                        return NULL;
                o->created = 1;
                sp.method = "PUT";
                sp.body = o->f->data;
                sp.body_len = o->f->size;
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
                uint64_t off = (uint64_t)k * TOOL_PART_BYTES;
                snprintf(query, sizeof(query), "partNumber=%u&uploadId=%s", k + 1, enc);
                sp.method = "PUT";
                sp.query = query;
                sp.body = o->f->data + off;
                sp.body_len = o->f->size - off < TOOL_PART_BYTES ? o->f->size - off : TOOL_PART_BYTES;
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
                s3_request *r = push_next_of(ps, &ps->o[i]);
                if (r || ps->failed)
                        return r;
        }
        while (ps->cursor < ps->f->n) {
                obj *o = &ps->o[ps->cursor++];
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
                ps->p->done += o->f->size;
                break;
        case P_CREATE:
                if (!s3_xml_text((const char *)r->buf, r->len, "UploadId", o->upload_id,
                                 sizeof(o->upload_id)) || !o->upload_id[0]) {
                        fprintf(stderr, "\nzrecord: push: %s: no UploadId in the reply\n", r->what);
                        out = -EIO;
                        break;
                }
                o->parts = (uint32_t)((o->f->size + TOOL_PART_BYTES - 1) / TOOL_PART_BYTES);
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
        tool_progress_show(ps->p, 0);
        return out;
}

/* HEADs every object: those there with our size and checksum are skipped. */
static int push_check(pusher *ps, unsigned parallel) {
        const tool_store_files *f = ps->f;
        s3_request **rs = calloc(f->n, sizeof(*rs));
        preq **qs = calloc(f->n, sizeof(*qs));
        int r = 0;

        if (!rs || !qs) {
                r = tool_fail_msg("out of memory");
                goto out;
        }
        for (size_t i = 0; i < f->n; i++) {
                s3_spec sp = { .method = "HEAD", .name = f->o[i].name, .meta_name = XXH_META };
                qs[i] = preq_new(ps, &ps->o[i], P_HEAD, &sp);
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
        s3_run(rs, f->n, parallel, TOOL_ATTEMPTS, rc, errs);
        for (size_t i = 0; i < f->n && r == 0; i++) {
                obj *o = &ps->o[i];
                char hex[20];
                snprintf(hex, sizeof(hex), "%016" PRIx64, o->f->xxh3);
                if (rc[i] == 0 && rs[i]->has_length && rs[i]->length == o->f->size &&
                    strcmp(rs[i]->meta, hex) == 0) {
                        o->skip = 1;
                        ps->p->skipped += o->f->size;
                } else if (rc[i] < 0 && errs[i].code != ENOENT) {
                        r = tool_fail_msg("push: %s", errs[i].message);
                } else {
                        ps->p->total += o->f->size;
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

static int push_store(int dirfd, const char *where, const s3_target *t, const s3_creds *c,
                      unsigned parallel, bool json) {
        tool_store_files f = {0};
        tool_progress p = { .verb = "push", .t0_ns = tool_mono_ns(), .tty = isatty(2) };
        pusher ps = { .t = t, .c = c, .f = &f, .p = &p };
        s3_manifest m = {0};
        void *mbuf = NULL;
        size_t mlen = 0;
        s3_error err = {0};
        char dest[S3_WHAT_MAX];
        int lockfd = -1, r;

        s3_describe(t, NULL, dest, sizeof(dest));
        lockfd = openat(dirfd, TOOL_META_NAME, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
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
        if ((r = tool_store_read(dirfd, where, &f)) != 0)
                goto out;
        ps.o = calloc(f.n, sizeof(*ps.o));
        if (!ps.o) {
                r = tool_fail_msg("out of memory");
                goto out;
        }
        for (size_t i = 0; i < f.n; i++)
                ps.o[i].f = &f.o[i];
        if ((r = push_check(&ps, parallel)) != 0)
                goto out;
        /* no manifest while the objects change: a reader sees no store, not a mix */
        s3_spec del = { .method = "DELETE", .name = S3_MANIFEST_NAME };
        r = tool_s3_one(t, c, &del, &err, NULL, NULL);
        if (r < 0 && err.code != ENOENT) {
                r = tool_fail_msg("push: %s", err.message);
                goto out;
        }
        s3_pump_ops ops = { push_next, push_done };
        r = s3_pump(&ops, &ps, parallel, TOOL_ATTEMPTS, &err);
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
        if (tool_s3_one(t, c, &put, &err, NULL, NULL) < 0) {
                r = tool_fail_msg("push: %s", err.message);
                goto out;
        }
        tool_progress_show(&p, 1);
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
        for (size_t i = 0; ps.o && i < f.n; i++)
                free(ps.o[i].etags);
        free(ps.o);
        tool_store_files_free(&f);
        if (lockfd >= 0)
                close(lockfd);
        return r;
}

int tool_cmd_push(const cmdline *cl) {
        unsigned parallel = cl->parallel ? (unsigned)cl->parallel : TOOL_PARALLEL_DEFAULT;
        s3_config cfg;
        s3_target t;
        char **names = NULL;
        size_t n = 0;
        int dirfd, r;

        if ((r = tool_s3_resolve(cl->dst, &t, &cfg)) != 0)
                return r;
        dirfd = open(cl->path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (dirfd < 0) {
                r = tool_fail_msg("%s: %s", cl->path, strerror(errno));
                goto out;
        }
        if (faccessat(dirfd, TOOL_META_NAME, F_OK, AT_SYMLINK_NOFOLLOW) == 0) {
                r = push_store(dirfd, cl->path, &t, &cfg.creds, parallel, cl->json);
                goto out;
        }
        if (tool_list_streams(dirfd, &names, &n) < 0 || n == 0) {
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
                if (tool_s3_one(&t, &cfg.creds, &put, &err, NULL, NULL) < 0)
                        r = tool_fail_msg("push: %s", err.message);
                free(buf);
        }
out:
        tool_names_free(names, n);
        if (dirfd >= 0)
                close(dirfd);
        s3_wipe(&cfg.creds, sizeof(cfg.creds));
        return r;
}
