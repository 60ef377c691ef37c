/* codec.c: zstd contexts, dictionaries and one-record compression.
 *
 * Assumes the codec tag was validated by the caller. Raw records never come
 * here: the store copies them directly. Frames are written with content size
 * and checksum so every read is verified. A CDict fixes its compression level
 * when it is made, so a dictionary is prepared once per level written at, and
 * only a few levels are kept. It does not train dictionaries.
 */
#include "store/codec.h"

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <zstd.h>

/* A context keeps its staging buffer between uses up to this size: enough for
 * any gather's frames and a typical append shard, while one huge append does
 * not pin its memory for the life of the store. */
#define CODER_KEEP_BYTES ((size_t)64 << 20)

struct zr_coder_ctx {
        ZSTD_CCtx *cctx;
        ZSTD_DCtx *dctx;
        unsigned cctx_gen; /* coder generation cctx is configured for, 0 = none */
        int cctx_level;    /* the level cctx is configured for */
        void *buf;
        size_t buf_size;
        zr_coder_ctx *next;
};

/* The dictionary prepared for compression at one level. */
typedef struct coder_cdict {
        ZSTD_CDict *cdict; /* NULL: a free slot */
        int level;
        uint64_t used;     /* the coder's tick when last prepared */
} coder_cdict;

struct zr_coder {
        enum zr_codec codec;
        void *dict;
        size_t dict_len;
        coder_cdict cdicts[ZR_CODER_CDICTS];
        uint64_t tick;
        ZSTD_DDict *ddict;
        unsigned gen; /* bumped by every change of a dictionary or a CDict freed; starts at 1 */
        pthread_mutex_t mutex; /* guards free_list; a leaf lock */
        zr_coder_ctx *free_list;
};

int zr_coder_new(enum zr_codec codec, zr_coder **ret) {
        zr_coder *c = calloc(1, sizeof(*c));
        if (!c)
                return -ENOMEM;
        c->codec = codec;
        c->gen = 1;
        pthread_mutex_init(&c->mutex, NULL);
        *ret = c;
        return 0;
}

static zr_coder_ctx *codec_ctx_free(zr_coder_ctx *x) {
        if (x) {
                ZSTD_freeCCtx(x->cctx);
                ZSTD_freeDCtx(x->dctx);
                free(x->buf);
                free(x);
        }
        return NULL;
}

zr_coder *zr_coder_free(zr_coder *c) {
        if (!c)
                return NULL;
        while (c->free_list) {
                zr_coder_ctx *x = c->free_list;
                c->free_list = x->next;
                codec_ctx_free(x);
        }
        for (unsigned i = 0; i < ZR_CODER_CDICTS; i++)
                ZSTD_freeCDict(c->cdicts[i].cdict);
        ZSTD_freeDDict(c->ddict);
        free(c->dict);
        pthread_mutex_destroy(&c->mutex);
        free(c);
        return NULL;
}

int zr_coder_set_dict(zr_coder *c, const void *dict, size_t len, zr_error *err) {
        void *copy = NULL;
        ZSTD_CDict *cdict = NULL;
        ZSTD_DDict *ddict = NULL;

        if (!dict || len == 0)
                return zr_error_set(err, EINVAL, "dictionary is empty");
        copy = malloc(len);
        if (!copy)
                return zr_error_set(err, ENOMEM, "dictionary: out of memory");
        memcpy(copy, dict, len);
        cdict = ZSTD_createCDict(copy, len, ZR_ZSTD_DICT_LEVEL);
        ddict = ZSTD_createDDict(copy, len);
        if (!cdict || !ddict) {
                ZSTD_freeCDict(cdict);
                ZSTD_freeDDict(ddict);
                free(copy);
                return zr_error_set(err, EINVAL, "dictionary of %zu bytes is unusable", len);
        }
        for (unsigned i = 0; i < ZR_CODER_CDICTS; i++) {
                ZSTD_freeCDict(c->cdicts[i].cdict);
                c->cdicts[i].cdict = NULL;
        }
        ZSTD_freeDDict(c->ddict);
        free(c->dict);
        c->dict = copy;
        c->dict_len = len;
        c->cdicts[0] = (coder_cdict){ .cdict = cdict, .level = ZR_ZSTD_DICT_LEVEL,
                                      .used = ++c->tick };
        c->ddict = ddict;
        c->gen++;
        return 0;
}

static int effective_level(const zr_coder *c, int level) {
        if (level != 0)
                return level;
        return c->codec == ZR_CODEC_ZSTD_DICT ? ZR_ZSTD_DICT_LEVEL : ZR_ZSTD_LEVEL;
}

static coder_cdict *cdict_find(zr_coder *c, int level) {
        for (unsigned i = 0; i < ZR_CODER_CDICTS; i++)
                if (c->cdicts[i].cdict && c->cdicts[i].level == level)
                        return &c->cdicts[i];
        return NULL;
}

int zr_coder_prepare(zr_coder *c, int level, zr_error *err) {
        coder_cdict *slot;

        if (c->codec != ZR_CODEC_ZSTD_DICT)
                return 0;
        if (!c->dict)
                return zr_error_set(err, ZR_E_NO_DICT, "zstd_dict store has no dictionary");
        level = effective_level(c, level);
        slot = cdict_find(c, level);
        if (!slot) {
                ZSTD_CDict *cdict = ZSTD_createCDict(c->dict, c->dict_len, level);
                if (!cdict)
                        return zr_error_set(err, ENOMEM,
                                            "dictionary at level %d: out of memory", level);
                slot = &c->cdicts[0];
                for (unsigned i = 0; i < ZR_CODER_CDICTS && slot->cdict; i++)
                        if (!c->cdicts[i].cdict || c->cdicts[i].used < slot->used)
                                slot = &c->cdicts[i];
                if (slot->cdict) {
                        /* No compression runs (the caller holds the append lock), but
                         * an idle context may still reference it: the new generation
                         * makes every context drop it before its next use. */
                        ZSTD_freeCDict(slot->cdict);
                        c->gen++;
                }
                slot->cdict = cdict;
                slot->level = level;
        }
        slot->used = ++c->tick;
        return 0;
}

unsigned zr_coder_cdicts(const zr_coder *c, size_t *ret_bytes) {
        unsigned n = 0;
        size_t bytes = 0;

        for (unsigned i = 0; i < ZR_CODER_CDICTS; i++)
                if (c->cdicts[i].cdict) {
                        n++;
                        bytes += ZSTD_sizeof_CDict(c->cdicts[i].cdict);
                }
        if (ret_bytes)
                *ret_bytes = bytes;
        return n;
}

const void *zr_coder_dict(const zr_coder *c, size_t *ret_len) {
        *ret_len = c->dict_len;
        return c->dict;
}

zr_coder_ctx *zr_coder_ctx_get(zr_coder *c) {
        zr_coder_ctx *x;

        pthread_mutex_lock(&c->mutex);
        x = c->free_list;
        if (x)
                c->free_list = x->next;
        pthread_mutex_unlock(&c->mutex);
        if (!x)
                x = calloc(1, sizeof(*x));
        return x;
}

void zr_coder_ctx_put(zr_coder *c, zr_coder_ctx *x) {
        if (!x)
                return;
        if (x->buf_size > CODER_KEEP_BYTES) {
                free(x->buf);
                x->buf = NULL;
                x->buf_size = 0;
        }
        pthread_mutex_lock(&c->mutex);
        x->next = c->free_list;
        c->free_list = x;
        pthread_mutex_unlock(&c->mutex);
}

void *zr_coder_ctx_buffer(zr_coder_ctx *x, size_t size) {
        if (size > x->buf_size) {
                /* grow by half again so a slowly rising size does not realloc often */
                size_t want = size + size / 2;
                void *p = malloc(want);
                if (!p)
                        return NULL;
                free(x->buf);
                x->buf = p;
                x->buf_size = want;
        }
        return x->buf;
}

size_t zr_coder_bound(const zr_coder *c, size_t len) {
        return c->codec == ZR_CODEC_RAW ? len : ZSTD_compressBound(len);
}

int zr_coder_compress(zr_coder *c, zr_coder_ctx *x, int level, void *dst, size_t cap,
                      const void *src, size_t len, size_t *ret_len, zr_error *err) {
        const coder_cdict *slot = NULL;
        size_t r;

        level = effective_level(c, level);
        if (c->codec == ZR_CODEC_ZSTD_DICT) {
                if (!c->dict)
                        return zr_error_set(err, ZR_E_NO_DICT,
                                            "zstd_dict store has no dictionary");
                slot = cdict_find(c, level);
                if (!slot)
                        return zr_error_set(err, EINVAL,
                                            "the dictionary is not prepared at level %d", level);
        }
        if (!x->cctx) {
                x->cctx = ZSTD_createCCtx();
                if (!x->cctx)
                        return zr_error_set(err, ENOMEM, "zstd: cannot create a context");
        }
        if (x->cctx_gen != c->gen || x->cctx_level != level) {
                /* Sticky parameters, set when the context first meets this coder's
                 * dictionary or this level: a context never carries a stale one.
                 * A CDict's level is its own (zstd takes it over the context's). */
                ZSTD_CCtx_reset(x->cctx, ZSTD_reset_session_and_parameters);
                ZSTD_CCtx_setParameter(x->cctx, ZSTD_c_checksumFlag, 1);
                ZSTD_CCtx_setParameter(x->cctx, ZSTD_c_contentSizeFlag, 1);
                if (slot)
                        ZSTD_CCtx_refCDict(x->cctx, slot->cdict);
                else
                        ZSTD_CCtx_setParameter(x->cctx, ZSTD_c_compressionLevel, level);
                x->cctx_gen = c->gen;
                x->cctx_level = level;
        }
        r = ZSTD_compress2(x->cctx, dst, cap, src, len);
        if (ZSTD_isError(r))
                return zr_error_set(err, EIO, "zstd: compressing %zu bytes: %s", len,
                                    ZSTD_getErrorName(r));
        *ret_len = r;
        return 0;
}

int zr_coder_decompress(zr_coder *c, zr_coder_ctx *x, void *dst, size_t logic,
                        const void *src, size_t phys, zr_error *err) {
        size_t r;

        if (c->codec == ZR_CODEC_ZSTD_DICT && !c->ddict)
                return zr_error_set(err, ZR_E_NO_DICT, "zstd_dict store has no dictionary");
        if (!x->dctx) {
                x->dctx = ZSTD_createDCtx();
                if (!x->dctx)
                        return zr_error_set(err, ENOMEM, "zstd: cannot create a context");
        }
        if (c->ddict)
                r = ZSTD_decompress_usingDDict(x->dctx, dst, logic, src, phys, c->ddict);
        else
                r = ZSTD_decompressDCtx(x->dctx, dst, logic, src, phys);
        if (ZSTD_isError(r))
                return zr_error_set(err, ZR_E_DECODE, "zstd: %s", ZSTD_getErrorName(r));
        if (r != logic)
                return zr_error_set(err, ZR_E_DECODE,
                                    "frame decodes to %zu bytes, the table says %zu", r, logic);
        return 0;
}
