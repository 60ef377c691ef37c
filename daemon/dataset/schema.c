/* schema.c: building, encoding and decoding zr_schema (schema.msgpack).
 *
 * Decoding trusts nothing: before msgpack-c sees the bytes, msgpack_scan() walks
 * every object header and refuses a buffer whose containers declare more elements
 * than bytes remain (msgpack-c would allocate for them first), that is truncated,
 * or that holds anything after its one top-level object. Only then is it unpacked
 * into a zone, whose size is now bounded by a small multiple of the input.
 * No file I/O here: dataset.c reads and writes the file.
 */
#include "dataset/schema.h"

#include <errno.h>
#include <msgpack.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dataset/mpwalk.h"

static const char *const codec_names[] = {
        [ZR_CODEC_RAW] = "raw",
        [ZR_CODEC_ZSTD] = "zstd",
        [ZR_CODEC_ZSTD_DICT] = "zstd_dict",
};

const char *zr_codec_name(enum zr_codec codec) {
        if ((unsigned)codec >= sizeof(codec_names) / sizeof(codec_names[0]))
                return NULL;
        return codec_names[codec];
}

int zr_codec_parse(const char *name, size_t len, enum zr_codec *ret, zr_error *err) {
        for (unsigned c = 0; c < sizeof(codec_names) / sizeof(codec_names[0]); c++) {
                if (strlen(codec_names[c]) == len && memcmp(codec_names[c], name, len) == 0) {
                        *ret = (enum zr_codec)c;
                        return 0;
                }
        }
        return zr_error_set(err, ZR_E_BAD_CODEC, "codec \"%.*s\" is unknown "
                            "(raw, zstd, zstd_dict are known)", (int)(len < 32 ? len : 32), name);
}

void zr_shape_format(const uint64_t *shape, uint32_t ndim, char *buf, size_t size) {
        size_t at = 0;
        int n;

        if (size == 0)
                return;
        buf[0] = '\0';
        n = snprintf(buf, size, "(");
        for (uint32_t i = 0; n >= 0 && i < ndim; i++) {
                at += (size_t)n;
                if (at >= size)
                        return;
                n = snprintf(buf + at, size - at, i ? ", %llu" : "%llu",
                             (unsigned long long)shape[i]);
        }
        if (n < 0)
                return;
        at += (size_t)n;
        if (at < size)
                snprintf(buf + at, size - at, ndim == 1 ? ",)" : ")");
}

void zr_schema_describe(const zr_schema *s, char *buf, size_t size) {
        char shape[96];
        const char *codec = zr_codec_name(s->codec);

        if (s->kind == ZR_SCHEMA_DENSE) {
                zr_shape_format(s->item_shape, s->ndim, shape, sizeof(shape));
                snprintf(buf, size, "dense %s item_shape %s codec %s", s->dtype.str, shape,
                         codec ? codec : "?");
        } else {
                if (s->ndim == ZR_SCHEMA_NDIM_ANY)
                        snprintf(buf, size, "ragged %s ndim any codec %s", s->dtype.str,
                                 codec ? codec : "?");
                else
                        snprintf(buf, size, "ragged %s ndim %u codec %s", s->dtype.str, s->ndim,
                                 codec ? codec : "?");
        }
}

uint64_t zr_schema_item_bytes(const zr_schema *s) {
        uint64_t bytes;

        if (s->kind != ZR_SCHEMA_DENSE)
                return 0;
        bytes = s->dtype.itemsize;
        for (uint32_t i = 0; i < s->ndim; i++)
                bytes *= s->item_shape[i]; /* bounded at init/decode */
        return bytes;
}

/* Checks that itemsize × prod(shape) fits a record; a zero dimension makes it 0. */
static int shape_bytes_ok(uint32_t itemsize, const uint64_t *shape, uint32_t ndim) {
        uint64_t bytes = itemsize;

        for (uint32_t i = 0; i < ndim; i++)
                if (shape[i] == 0)
                        return 1;
        for (uint32_t i = 0; i < ndim; i++) {
                if (__builtin_mul_overflow(bytes, shape[i], &bytes) || bytes > ZR_RECORD_MAX)
                        return 0;
        }
        return 1;
}

static int codec_ok(enum zr_codec codec, zr_error *err) {
        if (!zr_codec_name(codec))
                return zr_error_set(err, ZR_E_BAD_CODEC, "codec %d is unknown", (int)codec);
        return 0;
}

/* What every schema has: its kind, codec, dtype and ndim. */
static int schema_start(zr_schema *s, enum zr_schema_kind kind, const char *dtype,
                        uint32_t ndim, enum zr_codec codec, zr_error *err) {
        int r;

        *s = (zr_schema){ .kind = kind, .ndim = ndim, .codec = codec };
        r = codec_ok(codec, err);
        if (r < 0)
                return r;
        return zr_dtype_parse(dtype, &s->dtype, err);
}

int zr_schema_init_dense(zr_schema *ret, const char *dtype, const uint64_t *item_shape,
                         uint32_t ndim, enum zr_codec codec, zr_error *err) {
        zr_schema s;
        int r;

        r = schema_start(&s, ZR_SCHEMA_DENSE, dtype, ndim, codec, err);
        if (r < 0)
                return r;
        if (ndim > ZR_SCHEMA_NDIM_MAX)
                return zr_error_set(err, ZR_E_SCHEMA, "item_shape has %u dimensions, at most "
                                    "%d are allowed", ndim, ZR_SCHEMA_NDIM_MAX);
        if (ndim > 0)
                memcpy(s.item_shape, item_shape, ndim * sizeof(uint64_t));
        if (!shape_bytes_ok(s.dtype.itemsize, s.item_shape, ndim))
                return zr_error_set(err, ZR_E_SCHEMA, "an item of this shape is larger than "
                                    "a record may be (2^31 bytes)");
        *ret = s;
        return 0;
}

int zr_schema_init_ragged(zr_schema *ret, const char *dtype, uint32_t ndim,
                          enum zr_codec codec, zr_error *err) {
        zr_schema s;
        int r;

        r = schema_start(&s, ZR_SCHEMA_RAGGED, dtype, ndim, codec, err);
        if (r < 0)
                return r;
        if (ndim > ZR_SCHEMA_NDIM_MAX)
                return zr_error_set(err, ZR_E_SCHEMA, "ragged ndim is %u, it must be 1..%d "
                                    "(0: any per record)", ndim, ZR_SCHEMA_NDIM_MAX);
        *ret = s;
        return 0;
}

const char *zr_layout_name(enum zr_layout layout) {
        switch (layout) {
        case ZR_LAYOUT_ZRECORD: return "zrecord";
        case ZR_LAYOUT_LX157: return "loaderx-1.5.7";
        case ZR_LAYOUT_BYTES: return "bytes";
        }
        return NULL;
}

int zr_schema_encode(const zr_schema *s, void **ret, size_t *ret_len, zr_error *err) {
        msgpack_sbuffer sbuf;
        msgpack_packer pk;
        const char *kind = s->kind == ZR_SCHEMA_DENSE ? "dense" : "ragged";
        const char *codec = zr_codec_name(s->codec);
        int r = 0;

        if (!codec)
                return zr_error_set(err, ZR_E_BAD_CODEC, "codec %d is unknown", (int)s->codec);

        msgpack_sbuffer_init(&sbuf);
        msgpack_packer_init(&pk, &sbuf, msgpack_sbuffer_write);

#define PACK_STR(str) (msgpack_pack_str(&pk, strlen(str)) || \
                       msgpack_pack_str_body(&pk, (str), strlen(str)))
        if (s->kind == ZR_SCHEMA_DENSE) {
                /* loaderx 1.5.7's keys and order, so that it opens the store */
                if (msgpack_pack_map(&pk, 6) || PACK_STR("format") || PACK_STR(ZR_SCHEMA_FORMAT) ||
                    PACK_STR("version") || msgpack_pack_uint32(&pk, ZR_SCHEMA_FORMAT_VERSION) ||
                    PACK_STR("kind") || PACK_STR(kind) || PACK_STR("dtype") ||
                    PACK_STR(s->dtype.str) || PACK_STR("codec") || PACK_STR(codec) ||
                    PACK_STR("item_shape") || msgpack_pack_array(&pk, s->ndim))
                        goto oom;
                for (uint32_t i = 0; i < s->ndim; i++)
                        if (msgpack_pack_uint64(&pk, s->item_shape[i]))
                                goto oom;
        } else {
                /* no "format": loaderx 1.5.7 would read these records as headerless */
                if (msgpack_pack_map(&pk, 4) || PACK_STR("kind") || PACK_STR(kind) ||
                    PACK_STR("dtype") || PACK_STR(s->dtype.str) || PACK_STR("ndim") ||
                    msgpack_pack_uint32(&pk, s->ndim) || PACK_STR("codec") || PACK_STR(codec))
                        goto oom;
        }
#undef PACK_STR

        /* Hand the sbuffer's memory over. */
        *ret_len = sbuf.size;
        *ret = msgpack_sbuffer_release(&sbuf);
        goto out;
oom:
        r = zr_error_errno(err, ENOMEM, "encoding schema");
out:
        msgpack_sbuffer_destroy(&sbuf);
        return r;
}

/* Reads a big-endian unsigned of `n` bytes at p. */
/* Walks every object header of one msgpack object at data[0..len). Returns 0 if
 * the buffer is exactly one well-formed object whose containers never declare
 * more elements than bytes remain; -ZR_E_SCHEMA otherwise (mpwalk.h). */
static int msgpack_scan(const uint8_t *data, size_t len, zr_error *err) {
        size_t at = 0;
        int r = zr_mp_skip(data, len, &at, err);

        if (r < 0)
                return r;
        if (at != len)
                return zr_error_set(err, ZR_E_SCHEMA, "schema.msgpack has %zu bytes after its "
                                    "map", len - at);
        return 0;
}

static int key_is(const msgpack_object_str *k, const char *name) {
        return k->size == strlen(name) && memcmp(k->ptr, name, k->size) == 0;
}

static const char *type_name(msgpack_object_type t) {
        switch (t) {
        case MSGPACK_OBJECT_NIL: return "nil";
        case MSGPACK_OBJECT_BOOLEAN: return "a boolean";
        case MSGPACK_OBJECT_POSITIVE_INTEGER: return "an integer";
        case MSGPACK_OBJECT_NEGATIVE_INTEGER: return "a negative integer";
        case MSGPACK_OBJECT_FLOAT32:
        case MSGPACK_OBJECT_FLOAT64: return "a float";
        case MSGPACK_OBJECT_STR: return "a string";
        case MSGPACK_OBJECT_ARRAY: return "an array";
        case MSGPACK_OBJECT_MAP: return "a map";
        case MSGPACK_OBJECT_BIN: return "binary";
        case MSGPACK_OBJECT_EXT: return "an ext";
        default: return "unknown";
        }
}

/* "format" and "version", the keys loaderx 1.5.7 stamps its schemas with: each may
 * be absent (zrecord's schemas before them), and if present must be loaderx's. */
static int format_ok(const msgpack_object *format, const msgpack_object *version,
                     zr_error *err) {
        if (format && (format->type != MSGPACK_OBJECT_STR ||
                       !key_is(&format->via.str, ZR_SCHEMA_FORMAT)))
                return zr_error_set(err, ZR_E_SCHEMA, "schema.msgpack: \"format\" is %s, "
                                    "expected \"" ZR_SCHEMA_FORMAT "\"",
                                    format->type == MSGPACK_OBJECT_STR ? "another string" :
                                    type_name(format->type));
        if (version && (version->type != MSGPACK_OBJECT_POSITIVE_INTEGER ||
                        version->via.u64 != ZR_SCHEMA_FORMAT_VERSION))
                return zr_error_set(err, ZR_E_SCHEMA, "schema.msgpack: \"version\" is %s%llu, "
                                    "this build reads version %d",
                                    version->type == MSGPACK_OBJECT_POSITIVE_INTEGER ? "" :
                                    "not a positive integer: ",
                                    version->type == MSGPACK_OBJECT_POSITIVE_INTEGER ?
                                    (unsigned long long)version->via.u64 : 0ULL,
                                    ZR_SCHEMA_FORMAT_VERSION);
        return 0;
}

/* A non-negative integer of at most max, or ZR_E_SCHEMA naming image.<key>. */
static int image_uint(const msgpack_object *v, const char *key, uint64_t max, uint64_t *ret,
                      zr_error *err) {
        if (v->type != MSGPACK_OBJECT_POSITIVE_INTEGER || v->via.u64 > max)
                return zr_error_set(err, ZR_E_SCHEMA, "schema.msgpack: \"image.%s\" is %s, "
                                    "expected an integer 0..%llu", key,
                                    v->type == MSGPACK_OBJECT_POSITIVE_INTEGER ? "too large" :
                                    type_name(v->type), (unsigned long long)max);
        *ret = v->via.u64;
        return 0;
}

/* The "image" map of an image store (schema.h, zr_schema_image). */
static int image_from_map(const msgpack_object *m, zr_schema_image *ret, zr_error *err) {
        zr_schema_image im = {0};

        if (m->type != MSGPACK_OBJECT_MAP)
                return zr_error_set(err, ZR_E_SCHEMA, "schema.msgpack: \"image\" is %s, "
                                    "expected a map", type_name(m->type));
        for (uint32_t i = 0; i < m->via.map.size; i++) {
                const msgpack_object_kv *kv = &m->via.map.ptr[i];
                const msgpack_object_str *k = &kv->key.via.str;
                uint64_t v = 0;
                int r = 0;

                if (kv->key.type != MSGPACK_OBJECT_STR)
                        continue;
                if (key_is(k, "formats")) {
                        if (kv->val.type != MSGPACK_OBJECT_ARRAY)
                                return zr_error_set(err, ZR_E_SCHEMA, "schema.msgpack: "
                                                    "\"image.formats\" is %s, expected an array",
                                                    type_name(kv->val.type));
                        for (uint32_t j = 0; j < kv->val.via.array.size; j++) {
                                const msgpack_object *f = &kv->val.via.array.ptr[j];
                                if (f->type == MSGPACK_OBJECT_STR && key_is(&f->via.str, "jpeg"))
                                        im.formats |= ZR_SCHEMA_IMAGE_JPEG;
                                else if (f->type == MSGPACK_OBJECT_STR && key_is(&f->via.str, "png"))
                                        im.formats |= ZR_SCHEMA_IMAGE_PNG;
                                else
                                        return zr_error_set(err, ZR_E_SCHEMA, "schema.msgpack: "
                                                            "\"image.formats\"[%u] is not "
                                                            "\"jpeg\" or \"png\"", j);
                        }
                } else if (key_is(k, "channels")) {
                        r = image_uint(&kv->val, "channels", 4, &v, err);
                        im.channels = v == 1 || v == 3 ? (uint32_t)v : 0;
                } else if (key_is(k, "height")) {
                        r = image_uint(&kv->val, "height", UINT32_MAX, &v, err);
                        im.height = (uint32_t)v;
                } else if (key_is(k, "width")) {
                        r = image_uint(&kv->val, "width", UINT32_MAX, &v, err);
                        im.width = (uint32_t)v;
                } else if (key_is(k, "max_pixels")) {
                        r = image_uint(&kv->val, "max_pixels", UINT64_MAX, &im.max_pixels, err);
                }
                if (r < 0)
                        return r;
        }
        if (!im.formats)
                return zr_error_set(err, ZR_E_SCHEMA, "schema.msgpack: \"image\" names no "
                                    "format");
        *ret = im;
        return 0;
}

static int schema_from_map(const msgpack_object *root, zr_schema *ret, zr_error *err) {
        const msgpack_object *kind = NULL, *dtype = NULL, *shape = NULL, *ndim = NULL,
                             *codec = NULL, *format = NULL, *version = NULL, *shapes = NULL,
                             *layout = NULL, *image = NULL;
        zr_schema s = {0};
        int r;

        if (root->type != MSGPACK_OBJECT_MAP)
                return zr_error_set(err, ZR_E_SCHEMA, "schema.msgpack is %s, not a map",
                                    type_name(root->type));
        for (uint32_t i = 0; i < root->via.map.size; i++) {
                const msgpack_object_kv *kv = &root->via.map.ptr[i];
                const msgpack_object **slot = NULL;

                if (kv->key.type != MSGPACK_OBJECT_STR)
                        continue; /* not one of ours: ignored like any unknown key */
                if (key_is(&kv->key.via.str, "kind"))
                        slot = &kind;
                else if (key_is(&kv->key.via.str, "dtype"))
                        slot = &dtype;
                else if (key_is(&kv->key.via.str, "item_shape"))
                        slot = &shape;
                else if (key_is(&kv->key.via.str, "ndim"))
                        slot = &ndim;
                else if (key_is(&kv->key.via.str, "codec"))
                        slot = &codec;
                else if (key_is(&kv->key.via.str, "format"))
                        slot = &format;
                else if (key_is(&kv->key.via.str, "version"))
                        slot = &version;
                else if (key_is(&kv->key.via.str, "shapes"))
                        slot = &shapes;
                else if (key_is(&kv->key.via.str, "layout"))
                        slot = &layout;
                else if (key_is(&kv->key.via.str, "image"))
                        slot = &image;
                else
                        continue;
                if (*slot)
                        return zr_error_set(err, ZR_E_SCHEMA, "schema.msgpack: key \"%.*s\" "
                                            "appears twice", (int)kv->key.via.str.size,
                                            kv->key.via.str.ptr);
                *slot = &kv->val;
        }

        r = format_ok(format, version, err);
        if (r < 0)
                return r;
        if (!kind || kind->type != MSGPACK_OBJECT_STR)
                return zr_error_set(err, ZR_E_SCHEMA, "schema.msgpack: \"kind\" is %s, "
                                    "expected a string", kind ? type_name(kind->type) : "missing");
        if (key_is(&kind->via.str, "dense"))
                s.kind = ZR_SCHEMA_DENSE;
        else if (key_is(&kind->via.str, "ragged"))
                s.kind = ZR_SCHEMA_RAGGED;
        else
                return zr_error_set(err, ZR_E_SCHEMA, "schema.msgpack: kind \"%.*s\" is "
                                    "unknown (dense, ragged are known)",
                                    (int)(kind->via.str.size < 32 ? kind->via.str.size : 32),
                                    kind->via.str.ptr);

        if (!dtype || dtype->type != MSGPACK_OBJECT_STR)
                return zr_error_set(err, ZR_E_SCHEMA, "schema.msgpack: \"dtype\" is %s, "
                                    "expected a string", dtype ? type_name(dtype->type) : "missing");
        r = zr_dtype_parse_n(dtype->via.str.ptr, dtype->via.str.size, &s.dtype, err);
        if (r < 0)
                return r;

        if (!codec || codec->type != MSGPACK_OBJECT_STR)
                return zr_error_set(err, ZR_E_SCHEMA, "schema.msgpack: \"codec\" is %s, "
                                    "expected a string", codec ? type_name(codec->type) : "missing");
        r = zr_codec_parse(codec->via.str.ptr, codec->via.str.size, &s.codec, err);
        if (r < 0)
                return r;

        if (s.kind == ZR_SCHEMA_DENSE) {
                if (ndim)
                        return zr_error_set(err, ZR_E_SCHEMA, "schema.msgpack: a dense schema "
                                            "has \"item_shape\", not \"ndim\"");
                if (!shape || shape->type != MSGPACK_OBJECT_ARRAY)
                        return zr_error_set(err, ZR_E_SCHEMA, "schema.msgpack: \"item_shape\" "
                                            "is %s, expected an array",
                                            shape ? type_name(shape->type) : "missing");
                if (shape->via.array.size > ZR_SCHEMA_NDIM_MAX)
                        return zr_error_set(err, ZR_E_SCHEMA, "schema.msgpack: item_shape has "
                                            "%u dimensions, at most %d are allowed",
                                            shape->via.array.size, ZR_SCHEMA_NDIM_MAX);
                s.ndim = shape->via.array.size;
                for (uint32_t i = 0; i < s.ndim; i++) {
                        const msgpack_object *d = &shape->via.array.ptr[i];
                        if (d->type != MSGPACK_OBJECT_POSITIVE_INTEGER)
                                return zr_error_set(err, ZR_E_SCHEMA, "schema.msgpack: "
                                                    "item_shape[%u] is %s, expected a "
                                                    "non-negative integer", i, type_name(d->type));
                        s.item_shape[i] = d->via.u64;
                }
                if (!shape_bytes_ok(s.dtype.itemsize, s.item_shape, s.ndim))
                        return zr_error_set(err, ZR_E_SCHEMA, "schema.msgpack: an item of "
                                            "this shape is larger than a record may be");
        } else {
                if (shapes && !ndim)
                        return zr_error_set(err, ZR_E_SCHEMA, "schema.msgpack: a loaderx 1.5.7 "
                                            "ragged store (each record's shape in \"shapes\", "
                                            "none in the record); zrecord's ragged datasets keep "
                                            "it in the record: convert the store (docs/FORMAT.md, "
                                            "\"Compatibility with loaderx 1.5.7\")");
                if (shape)
                        return zr_error_set(err, ZR_E_SCHEMA, "schema.msgpack: a ragged schema "
                                            "has \"ndim\", not \"item_shape\"");
                if (!ndim || ndim->type != MSGPACK_OBJECT_POSITIVE_INTEGER)
                        return zr_error_set(err, ZR_E_SCHEMA, "schema.msgpack: \"ndim\" is %s, "
                                            "expected an integer 0..32",
                                            ndim ? type_name(ndim->type) : "missing");
                if (ndim->via.u64 > ZR_SCHEMA_NDIM_MAX)
                        return zr_error_set(err, ZR_E_SCHEMA, "schema.msgpack: ragged ndim is "
                                            "%llu, it must be 1..%d (0: any per record)",
                                            (unsigned long long)ndim->via.u64, ZR_SCHEMA_NDIM_MAX);
                s.ndim = (uint32_t)ndim->via.u64;
        }
        if (layout) {
                if (layout->type == MSGPACK_OBJECT_STR && key_is(&layout->via.str, "zrecord"))
                        s.layout = ZR_LAYOUT_ZRECORD;
                else if (layout->type == MSGPACK_OBJECT_STR && key_is(&layout->via.str, "bytes"))
                        s.layout = ZR_LAYOUT_BYTES;
                else
                        return zr_error_set(err, ZR_E_SCHEMA, "schema.msgpack: \"layout\" is "
                                            "not \"zrecord\" or \"bytes\"");
                if (s.layout == ZR_LAYOUT_BYTES &&
                    (s.kind != ZR_SCHEMA_RAGGED || s.ndim != 1 || strcmp(s.dtype.str, "|u1") != 0))
                        return zr_error_set(err, ZR_E_SCHEMA, "schema.msgpack: layout \"bytes\" "
                                            "is ragged |u1 of ndim 1");
        }
        if (image) {
                r = image_from_map(image, &s.image, err);
                if (r < 0)
                        return r;
        }
        *ret = s;
        return 0;
}

int zr_schema_decode(const void *data, size_t len, zr_schema *ret, zr_error *err) {
        msgpack_unpacked up;
        size_t off = 0;
        int r;

        if (len > ZR_SCHEMA_FILE_MAX)
                return zr_error_set(err, ZR_E_SCHEMA, "schema.msgpack is %zu bytes, more than "
                                    "the %d a schema may have", len, ZR_SCHEMA_FILE_MAX);
        if (len == 0)
                return zr_error_set(err, ZR_E_SCHEMA, "schema.msgpack is empty");
        r = msgpack_scan(data, len, err);
        if (r < 0)
                return r;

        msgpack_unpacked_init(&up);
        switch (msgpack_unpack_next(&up, data, len, &off)) {
        case MSGPACK_UNPACK_SUCCESS:
                break;
        case MSGPACK_UNPACK_NOMEM_ERROR:
                r = zr_error_errno(err, ENOMEM, "decoding schema.msgpack");
                goto out;
        default:
                r = zr_error_set(err, ZR_E_SCHEMA, "schema.msgpack does not decode");
                goto out;
        }
        if (off != len) {
                r = zr_error_set(err, ZR_E_SCHEMA, "schema.msgpack has %zu bytes after its map",
                                 len - off);
                goto out;
        }
        r = schema_from_map(&up.data, ret, err);
out:
        msgpack_unpacked_destroy(&up);
        return r;
}
