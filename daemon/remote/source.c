/* source.c: a remote store's target, objects and credentials (source.h). */
#include "remote/source.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "url.h"

typedef struct cred {
        uint64_t id;
        unsigned uses;
        int refused;
        s3_creds c;
        struct cred *next; /* older */
} cred;

struct zr_rsrc {
        atomic_uint refs;
        s3_target t;
        char url[S3_BUCKET_MAX + S3_PREFIX_MAX + 8];
        size_t nobj;
        zr_robject *obj;
        pthread_mutex_t mu;
        cred *creds; /* newest first */
        uint64_t next_id;
};

zr_rsrc *zr_rsrc_new(const s3_target *t, const zr_robject *obj, size_t n) {
        zr_rsrc *s = calloc(1, sizeof(*s));
        if (!s)
                return NULL;
        s->obj = calloc(n ? n : 1, sizeof(*s->obj));
        if (!s->obj) {
                free(s);
                return NULL;
        }
        if (n)
                memcpy(s->obj, obj, n * sizeof(*obj)); /* obj may be NULL when n is 0 */
        s->nobj = n;
        s->t = *t;
        s3_describe(t, NULL, s->url, sizeof(s->url));
        atomic_init(&s->refs, 1);
        pthread_mutex_init(&s->mu, NULL);
        return s;
}

zr_rsrc *zr_rsrc_ref(zr_rsrc *s) {
        atomic_fetch_add(&s->refs, 1);
        return s;
}

zr_rsrc *zr_rsrc_unref(zr_rsrc *s) {
        if (!s || atomic_fetch_sub(&s->refs, 1) != 1)
                return NULL;
        for (cred *c = s->creds, *next; c; c = next) {
                next = c->next;
                s3_wipe(c, sizeof(*c));
                free(c);
        }
        pthread_mutex_destroy(&s->mu);
        free(s->obj);
        free(s);
        return NULL;
}

const s3_target *zr_rsrc_target(const zr_rsrc *s) {
        return &s->t;
}

const zr_robject *zr_rsrc_object(const zr_rsrc *s, const char *name) {
        for (size_t i = 0; i < s->nobj; i++)
                if (strcmp(s->obj[i].name, name) == 0)
                        return &s->obj[i];
        return NULL;
}

const char *zr_rsrc_url(const zr_rsrc *s) {
        return s->url;
}

static int same(const s3_creds *a, const s3_creds *b) {
        return strcmp(a->access_key, b->access_key) == 0 &&
               strcmp(a->secret_key, b->secret_key) == 0 &&
               strcmp(a->session_token, b->session_token) == 0;
}

uint64_t zr_rsrc_creds_add(zr_rsrc *s, const s3_creds *c) {
        uint64_t id = 0;
        pthread_mutex_lock(&s->mu);
        for (cred *x = s->creds, **p = &s->creds; x; p = &x->next, x = x->next) {
                if (!same(&x->c, c))
                        continue;
                /* one more use; the newest again (a fresh open accepted it) */
                x->uses++;
                x->refused = 0;
                *p = x->next;
                x->next = s->creds;
                s->creds = x;
                id = x->id;
                goto out;
        }
        cred *n = calloc(1, sizeof(*n));
        if (n) {
                n->id = id = ++s->next_id;
                n->uses = 1;
                n->c = *c;
                n->next = s->creds;
                s->creds = n;
        }
out:
        pthread_mutex_unlock(&s->mu);
        return id;
}

void zr_rsrc_creds_drop(zr_rsrc *s, uint64_t id) {
        pthread_mutex_lock(&s->mu);
        for (cred **p = &s->creds; *p; p = &(*p)->next) {
                cred *x = *p;
                if (x->id != id)
                        continue;
                if (--x->uses == 0) {
                        *p = x->next;
                        s3_wipe(x, sizeof(*x));
                        free(x);
                }
                break;
        }
        pthread_mutex_unlock(&s->mu);
}

uint64_t zr_rsrc_creds_pick(zr_rsrc *s, s3_creds *ret) {
        uint64_t id = 0;
        pthread_mutex_lock(&s->mu);
        for (cred *x = s->creds; x; x = x->next)
                if (!x->refused) {
                        *ret = x->c;
                        id = x->id;
                        break;
                }
        pthread_mutex_unlock(&s->mu);
        return id;
}

void zr_rsrc_creds_refused(zr_rsrc *s, uint64_t id) {
        pthread_mutex_lock(&s->mu);
        for (cred *x = s->creds; x; x = x->next)
                if (x->id == id)
                        x->refused = 1;
        pthread_mutex_unlock(&s->mu);
}
