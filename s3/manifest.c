/* manifest.c: encoding and decoding the manifests of manifest.h (msgpack-c). */
#include "manifest.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include <msgpack.h>
#include <xxhash.h>

uint64_t s3_checksum(const void *data, size_t n) {
        return XXH3_64bits(data, n);
}

/* "N.suffix" with N decimal without leading zeros (or "0"), u32. */
static int numbered(const char *name, const char *suffix) {
        const char *dot = strchr(name, '.');
        size_t digits = dot ? (size_t)(dot - name) : 0;
        if (!dot || digits == 0 || digits > 10 || strcmp(dot + 1, suffix) != 0)
                return 0;
        if (name[0] == '0' && digits > 1)
                return 0;
        unsigned long long v = 0;
        for (size_t i = 0; i < digits; i++) {
                if (name[i] < '0' || name[i] > '9')
                        return 0;
                v = v * 10 + (unsigned)(name[i] - '0');
        }
        return v <= UINT32_MAX;
}

int s3_object_name_ok(const char *name) {
        return strcmp(name, "meta.zr") == 0 || strcmp(name, "schema.msgpack") == 0 ||
               strcmp(name, "dict.zr") == 0 || numbered(name, "loc") || numbered(name, "sum") ||
               numbered(name, "chunk");
}

static void pack_str(msgpack_packer *pk, const char *s) {
        size_t n = strlen(s);
        msgpack_pack_str(pk, n);
        msgpack_pack_str_body(pk, s, n);
}

int s3_manifest_encode(const s3_manifest *m, void **ret, size_t *ret_len) {
        msgpack_sbuffer sb;
        msgpack_packer pk;

        msgpack_sbuffer_init(&sb);
        msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
        msgpack_pack_map(&pk, 7);
        pack_str(&pk, "format");
        pack_str(&pk, S3_MANIFEST_FORMAT);
        pack_str(&pk, "version");
        msgpack_pack_uint32(&pk, S3_MANIFEST_VERSION);
        pack_str(&pk, "id");
        pack_str(&pk, m->id);
        pack_str(&pk, "length");
        msgpack_pack_uint64(&pk, m->length);
        pack_str(&pk, "codec");
        msgpack_pack_uint32(&pk, m->codec);
        pack_str(&pk, "checksum");
        pack_str(&pk, "xxh3-64");
        pack_str(&pk, "objects");
        msgpack_pack_array(&pk, m->nobjects);
        for (size_t i = 0; i < m->nobjects; i++) {
                const s3_object *o = &m->objects[i];
                msgpack_pack_map(&pk, o->has_xxh3 ? 3 : 2);
                pack_str(&pk, "name");
                pack_str(&pk, o->name);
                pack_str(&pk, "size");
                msgpack_pack_uint64(&pk, o->size);
                if (o->has_xxh3) {
                        pack_str(&pk, "xxh3");
                        msgpack_pack_uint64(&pk, o->xxh3);
                }
        }
        if (!sb.data) {
                msgpack_sbuffer_destroy(&sb);
                return -ENOMEM;
        }
        *ret = sb.data;
        *ret_len = sb.size;
        return 0;
}

/* ---- decoding -------------------------------------------------------------------- */

static const msgpack_object *field(const msgpack_object *map, const char *key) {
        if (map->type != MSGPACK_OBJECT_MAP)
                return NULL;
        size_t k = strlen(key);
        for (uint32_t i = 0; i < map->via.map.size; i++) {
                const msgpack_object_kv *kv = &map->via.map.ptr[i];
                if (kv->key.type == MSGPACK_OBJECT_STR && kv->key.via.str.size == k &&
                    memcmp(kv->key.via.str.ptr, key, k) == 0)
                        return &kv->val;
        }
        return NULL;
}

static int get_str(const msgpack_object *map, const char *key, char *out, size_t n) {
        const msgpack_object *o = field(map, key);
        if (!o || o->type != MSGPACK_OBJECT_STR || o->via.str.size >= n ||
            memchr(o->via.str.ptr, 0, o->via.str.size))
                return -1;
        memcpy(out, o->via.str.ptr, o->via.str.size);
        out[o->via.str.size] = 0;
        return 0;
}

static int get_u64(const msgpack_object *map, const char *key, uint64_t *out) {
        const msgpack_object *o = field(map, key);
        if (!o || o->type != MSGPACK_OBJECT_POSITIVE_INTEGER)
                return -1;
        *out = o->via.u64;
        return 0;
}

/* Unpacks buf into *res and checks format and version. */
static int open_doc(const void *buf, size_t len, const char *format, const char *what,
                    msgpack_unpacked *res, s3_error *err) {
        char fmt[32];
        uint64_t version;
        size_t off = 0;

        msgpack_unpacked_init(res);
        if (len > S3_MANIFEST_MAX)
                return s3_error_set(err, ZR_E_CORRUPT, "%s: %zu bytes, more than %zu", what, len,
                                    S3_MANIFEST_MAX);
        if (msgpack_unpack_next(res, buf, len, &off) != MSGPACK_UNPACK_SUCCESS || off != len ||
            res->data.type != MSGPACK_OBJECT_MAP)
                return s3_error_set(err, ZR_E_CORRUPT, "%s is not one msgpack map", what);
        if (get_str(&res->data, "format", fmt, sizeof(fmt)) < 0 || strcmp(fmt, format) != 0)
                return s3_error_set(err, ZR_E_CORRUPT, "%s: format is not \"%s\"", what, format);
        if (get_u64(&res->data, "version", &version) < 0)
                return s3_error_set(err, ZR_E_CORRUPT, "%s: no version", what);
        if (version != S3_MANIFEST_VERSION)
                return s3_error_set(err, ZR_E_BAD_VERSION, "%s: version %llu; this zrecord "
                                    "reads version %d", what, (unsigned long long)version,
                                    S3_MANIFEST_VERSION);
        return 0;
}

int s3_manifest_decode(const void *buf, size_t len, s3_manifest *ret, s3_error *err) {
        msgpack_unpacked res;
        const msgpack_object *objs;
        char sum[16];
        uint64_t codec;
        int rc;

        memset(ret, 0, sizeof(*ret));
        rc = open_doc(buf, len, S3_MANIFEST_FORMAT, S3_MANIFEST_NAME, &res, err);
        if (rc < 0)
                goto out;
        const msgpack_object *m = &res.data;
        if (get_str(m, "id", ret->id, sizeof(ret->id)) < 0 || strlen(ret->id) != 32 ||
            strspn(ret->id, "0123456789abcdef") != 32) {
                rc = s3_error_set(err, ZR_E_CORRUPT, S3_MANIFEST_NAME ": id is not 32 hex digits");
                goto out;
        }
        if (get_u64(m, "length", &ret->length) < 0 || get_u64(m, "codec", &codec) < 0 ||
            codec > 2) {
                rc = s3_error_set(err, ZR_E_CORRUPT, S3_MANIFEST_NAME ": length or codec missing "
                                  "or out of range");
                goto out;
        }
        ret->codec = (unsigned)codec;
        if (get_str(m, "checksum", sum, sizeof(sum)) < 0 || strcmp(sum, "xxh3-64") != 0) {
                rc = s3_error_set(err, ZR_E_CORRUPT, S3_MANIFEST_NAME ": checksum is not "
                                  "\"xxh3-64\"");
                goto out;
        }
        objs = field(m, "objects");
        if (!objs || objs->type != MSGPACK_OBJECT_ARRAY || objs->via.array.size == 0 ||
            objs->via.array.size > S3_OBJECTS_MAX) {
                rc = s3_error_set(err, ZR_E_CORRUPT, S3_MANIFEST_NAME ": objects is not a list "
                                  "of 1 to %u", S3_OBJECTS_MAX);
                goto out;
        }
        ret->objects = calloc(objs->via.array.size, sizeof(*ret->objects));
        if (!ret->objects) {
                rc = s3_error_set(err, ENOMEM, "decoding " S3_MANIFEST_NAME);
                goto out;
        }
        for (uint32_t i = 0; i < objs->via.array.size; i++) {
                const msgpack_object *o = &objs->via.array.ptr[i];
                s3_object *d = &ret->objects[i];
                if (get_str(o, "name", d->name, sizeof(d->name)) < 0 ||
                    !s3_object_name_ok(d->name) || get_u64(o, "size", &d->size) < 0) {
                        rc = s3_error_set(err, ZR_E_CORRUPT, S3_MANIFEST_NAME ": object %u has "
                                          "no valid name or size", i);
                        goto out;
                }
                if (s3_manifest_find(ret, d->name)) { /* among objects [0, i) */
                        rc = s3_error_set(err, ZR_E_CORRUPT, S3_MANIFEST_NAME ": %s is listed "
                                          "twice", d->name);
                        goto out;
                }
                d->has_xxh3 = get_u64(o, "xxh3", &d->xxh3) == 0;
                ret->nobjects = i + 1;
        }
        if (!s3_manifest_find(ret, "meta.zr")) {
                rc = s3_error_set(err, ZR_E_CORRUPT, S3_MANIFEST_NAME ": no meta.zr");
                goto out;
        }
out:
        msgpack_unpacked_destroy(&res);
        if (rc < 0)
                s3_manifest_fini(ret);
        return rc;
}

void s3_manifest_fini(s3_manifest *m) {
        free(m->objects);
        m->objects = NULL;
        m->nobjects = 0;
}

const s3_object *s3_manifest_find(const s3_manifest *m, const char *name) {
        for (size_t i = 0; i < m->nobjects; i++)
                if (strcmp(m->objects[i].name, name) == 0)
                        return &m->objects[i];
        return NULL;
}

int s3_manifest_new_id(char id[33]) {
        uint8_t b[16];
        if (getrandom(b, sizeof(b), 0) != (ssize_t)sizeof(b))
                return -errno;
        for (int i = 0; i < 16; i++)
                snprintf(id + 2 * i, 3, "%02x", b[i]);
        return 0;
}

int s3_set_encode(char *const *names, size_t n, void **ret, size_t *ret_len) {
        msgpack_sbuffer sb;
        msgpack_packer pk;

        msgpack_sbuffer_init(&sb);
        msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
        msgpack_pack_map(&pk, 3);
        pack_str(&pk, "format");
        pack_str(&pk, S3_SET_FORMAT);
        pack_str(&pk, "version");
        msgpack_pack_uint32(&pk, S3_MANIFEST_VERSION);
        pack_str(&pk, "streams");
        msgpack_pack_array(&pk, n);
        for (size_t i = 0; i < n; i++)
                pack_str(&pk, names[i]);
        if (!sb.data) {
                msgpack_sbuffer_destroy(&sb);
                return -ENOMEM;
        }
        *ret = sb.data;
        *ret_len = sb.size;
        return 0;
}

int s3_set_decode(const void *buf, size_t len, char ***ret_names, size_t *ret_n,
                  s3_error *err) {
        msgpack_unpacked res;
        const msgpack_object *st;
        char **names = NULL;
        uint32_t n = 0;
        int rc;

        *ret_names = NULL;
        *ret_n = 0;
        rc = open_doc(buf, len, S3_SET_FORMAT, S3_SET_NAME, &res, err);
        if (rc < 0)
                goto out;
        st = field(&res.data, "streams");
        if (!st || st->type != MSGPACK_OBJECT_ARRAY || st->via.array.size == 0 ||
            st->via.array.size > S3_STREAMS_MAX) {
                rc = s3_error_set(err, ZR_E_CORRUPT, S3_SET_NAME ": streams is not a list of 1 "
                                  "to %d names", S3_STREAMS_MAX);
                goto out;
        }
        names = calloc(st->via.array.size, sizeof(*names));
        if (!names) {
                rc = s3_error_set(err, ENOMEM, "decoding " S3_SET_NAME);
                goto out;
        }
        for (n = 0; n < st->via.array.size; n++) {
                const msgpack_object *o = &st->via.array.ptr[n];
                if (o->type != MSGPACK_OBJECT_STR || o->via.str.size == 0 ||
                    o->via.str.size > S3_STREAM_NAME_MAX ||
                    memchr(o->via.str.ptr, '/', o->via.str.size) ||
                    memchr(o->via.str.ptr, 0, o->via.str.size) || o->via.str.ptr[0] == '.') {
                        rc = s3_error_set(err, ZR_E_CORRUPT, S3_SET_NAME ": stream %u is not a "
                                          "name", n);
                        goto out;
                }
                names[n] = strndup(o->via.str.ptr, o->via.str.size);
                if (!names[n]) {
                        rc = s3_error_set(err, ENOMEM, "decoding " S3_SET_NAME);
                        goto out;
                }
        }
out:
        msgpack_unpacked_destroy(&res);
        if (rc < 0) {
                for (uint32_t i = 0; names && i < n; i++)
                        free(names[i]);
                free(names);
                return rc;
        }
        *ret_names = names;
        *ret_n = n;
        return 0;
}
