/* wire.c: frames and msgpack bodies of the zrecord protocol.
 *
 * msgpack-c allocates whatever a container header declares before it reads a
 * single element, so a five-byte array32 header claiming 2^32-1 elements would
 * cost it 96 GiB. Every body is therefore first walked by zr_wire_scan(), a
 * non-allocating validator with a fixed stack, and unpacked only once the walk
 * has proven it complete and within the limits; after that msgpack-c's zone
 * holds at most objects_max objects. Strings and bins are not copied: they
 * point into the caller's bytes.
 *
 * The writer emits map32/array32 headers whose counts it fills in on close, so
 * callers never count fields by hand. It does not aim for the shortest encoding
 * of containers (4 extra bytes per container); values use msgpack-c's shortest
 * forms.
 *
 * Works on hosts of either byte order (wire integers are assembled byte by
 * byte; bins of u64 are copied as they are only on little-endian hosts). Does
 * not touch sockets or descriptors.
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "wire.h"

/* msgpack-c's unpacker has a fixed container stack of MSGPACK_EMBED_STACK_SIZE
 * (32); our depth limit must stay below it so the unpack after a successful
 * scan cannot fail on depth. */
#define WIRE_DEPTH_HARD_MAX 32

/* Big-endian hosts: values converted to little-endian per buffer write in
 * zr_wire_put_u64s(); 1 KiB of stack, two writes for a 256-index batch. */
#define WIRE_U64S_BLOCK 128

/* Zone chunk size for bodies: most bodies are a few hundred bytes of objects. */
#define WIRE_ZONE_CHUNK 4096

const zr_wire_limits zr_wire_limits_default = {
        .depth_max = ZR_WIRE_DEPTH_MAX,
        .objects_max = ZR_WIRE_OBJECTS_MAX,
        .map_keys_max = ZR_WIRE_MAP_KEYS_MAX,
};

struct zr_wire_body {
        msgpack_zone zone;
        msgpack_object root;
};

int zr_wire_error_set(zr_wire_error *err, int code, const char *fmt, ...) {
        if (err && err->code == 0) {
                va_list ap;

                err->code = code;
                va_start(ap, fmt);
                vsnprintf(err->message, sizeof(err->message), fmt, ap);
                va_end(ap);
        }
        return -code;
}

/* ---- frames ------------------------------------------------------------ */

void zr_wire_frame_header_encode(uint8_t out[ZR_FRAME_HEADER_SIZE], uint32_t body_len) {
        out[0] = body_len & 0xff;
        out[1] = (body_len >> 8) & 0xff;
        out[2] = (body_len >> 16) & 0xff;
        out[3] = (body_len >> 24) & 0xff;
}

int zr_wire_frame_header_decode(const uint8_t in[ZR_FRAME_HEADER_SIZE], uint32_t frame_max,
                                uint32_t *ret_body_len, zr_wire_error *err) {
        uint32_t len = (uint32_t)in[0] | (uint32_t)in[1] << 8 | (uint32_t)in[2] << 16 |
                       (uint32_t)in[3] << 24;

        if (len == 0)
                return zr_wire_error_set(err, ZR_E_PROTO, "frame with an empty body");
        if (len > frame_max)
                return zr_wire_error_set(err, ZR_E_LIMIT,
                                         "frame body of %u bytes is over the limit of %u",
                                         len, frame_max);
        *ret_body_len = len;
        return 0;
}

/* ---- scan -------------------------------------------------------------- */

static uint64_t load_be(const uint8_t *p, unsigned width) {
        uint64_t v = 0;

        for (unsigned i = 0; i < width; i++)
                v = v << 8 | p[i];
        return v;
}

int zr_wire_scan(const void *data, size_t size, const zr_wire_limits *limits,
                 size_t *ret_objects, zr_wire_error *err) {
        const uint8_t *p = data, *end;
        /* pending[d]: elements still to read in the container at level d;
         * level 0 is the body itself, which holds exactly one object. */
        uint64_t pending[WIRE_DEPTH_HARD_MAX + 1];
        unsigned level = 0, depth_max;
        size_t objects = 0;

        if (!limits)
                limits = &zr_wire_limits_default;
        depth_max = limits->depth_max < WIRE_DEPTH_HARD_MAX ? limits->depth_max
                                                             : WIRE_DEPTH_HARD_MAX;
        if (!data && size > 0)
                return zr_wire_error_set(err, EINVAL, "no data");
        end = p + size;

        pending[0] = 1;
        for (;;) {
                uint64_t skip = 0, elements = 0;
                unsigned width = 0;
                bool container = false, is_map = false;
                size_t left;
                uint8_t b;

                while (level > 0 && pending[level] == 0)
                        level--;
                if (level == 0 && pending[0] == 0)
                        break;
                pending[level]--;

                if (p >= end)
                        return zr_wire_error_set(err, ZR_E_PROTO,
                                                 "msgpack truncated at byte %zu of %zu",
                                                 (size_t)(p - (const uint8_t *)data), size);
                b = *p++;
                if (++objects > limits->objects_max)
                        return zr_wire_error_set(err, ZR_E_LIMIT,
                                                 "more than %u msgpack objects",
                                                 limits->objects_max);

                if (b <= 0x7f || b >= 0xe0 || b == 0xc0 || b == 0xc2 || b == 0xc3) {
                        /* fixint, negative fixint, nil, false, true */
                } else if (b <= 0x8f) {
                        container = is_map = true;
                        elements = b & 0x0f;
                } else if (b <= 0x9f) {
                        container = true;
                        elements = b & 0x0f;
                } else if (b <= 0xbf) {
                        skip = b & 0x1f;
                } else {
                        switch (b) {
                        case 0xc1:
                                return zr_wire_error_set(err, ZR_E_PROTO,
                                                         "reserved msgpack byte 0xc1 at byte %zu",
                                                         (size_t)(p - 1 - (const uint8_t *)data));
                        case 0xc4: case 0xc5: case 0xc6: /* bin 8/16/32 */
                                width = 1u << (b - 0xc4);
                                break;
                        case 0xc7: case 0xc8: case 0xc9: /* ext 8/16/32: length, type */
                                width = 1u << (b - 0xc7);
                                break;
                        case 0xca: skip = 4; break; /* float32 */
                        case 0xcb: skip = 8; break; /* float64 */
                        case 0xcc: case 0xcd: case 0xce: case 0xcf: /* uint 8..64 */
                                skip = 1u << (b - 0xcc);
                                break;
                        case 0xd0: case 0xd1: case 0xd2: case 0xd3: /* int 8..64 */
                                skip = 1u << (b - 0xd0);
                                break;
                        case 0xd4: case 0xd5: case 0xd6: case 0xd7: case 0xd8: /* fixext */
                                skip = 1 + (1u << (b - 0xd4));
                                break;
                        case 0xd9: case 0xda: case 0xdb: /* str 8/16/32 */
                                width = 1u << (b - 0xd9);
                                break;
                        case 0xdc: case 0xdd: /* array 16/32 */
                                container = true;
                                width = b == 0xdc ? 2 : 4;
                                break;
                        case 0xde: case 0xdf: /* map 16/32 */
                                container = is_map = true;
                                width = b == 0xde ? 2 : 4;
                                break;
                        default:
                                return zr_wire_error_set(err, ZR_E_PROTO,
                                                         "unexpected msgpack byte 0x%02x", b);
                        }
                }

                if (width > 0) {
                        /* a length (or count) follows the type byte */
                        if ((size_t)(end - p) < width)
                                return zr_wire_error_set(err, ZR_E_PROTO,
                                                         "msgpack length of type 0x%02x truncated",
                                                         b);
                        if (container)
                                elements = load_be(p, width);
                        else
                                skip = load_be(p, width) + (b >= 0xc7 && b <= 0xc9 ? 1 : 0);
                        p += width;
                }

                left = (size_t)(end - p);
                if (container) {
                        uint64_t need = is_map ? 2 * elements : elements;

                        if (need > left)
                                return zr_wire_error_set(err, ZR_E_PROTO,
                                                         "msgpack %s declares %" PRIu64
                                                         " elements but only %zu bytes remain",
                                                         is_map ? "map" : "array", elements, left);
                        if (is_map && elements > limits->map_keys_max)
                                return zr_wire_error_set(err, ZR_E_PROTO,
                                                         "msgpack map of %" PRIu64
                                                         " entries (at most %u)",
                                                         elements, limits->map_keys_max);
                        if (level + 1 > depth_max)
                                return zr_wire_error_set(err, ZR_E_PROTO,
                                                         "msgpack nested deeper than %u", depth_max);
                        if (need > 0)
                                pending[++level] = need;
                } else if (skip > left) {
                        return zr_wire_error_set(err, ZR_E_PROTO,
                                                 "msgpack value of type 0x%02x needs %" PRIu64
                                                 " bytes but only %zu remain",
                                                 b, skip, left);
                } else {
                        p += skip;
                }
        }

        if (p != end)
                return zr_wire_error_set(err, ZR_E_PROTO, "%zu bytes after the msgpack body",
                                         (size_t)(end - p));
        if (ret_objects)
                *ret_objects = objects;
        return 0;
}

/* ---- bodies ------------------------------------------------------------ */

static int check_maps(const msgpack_object *o, zr_wire_error *err) {
        if (o->type == MSGPACK_OBJECT_ARRAY) {
                for (uint32_t i = 0; i < o->via.array.size; i++) {
                        int r = check_maps(&o->via.array.ptr[i], err);
                        if (r < 0)
                                return r;
                }
        } else if (o->type == MSGPACK_OBJECT_MAP) {
                const msgpack_object_kv *kv = o->via.map.ptr;

                for (uint32_t i = 0; i < o->via.map.size; i++) {
                        const msgpack_object *k = &kv[i].key;
                        int r;

                        if (k->type != MSGPACK_OBJECT_STR)
                                return zr_wire_error_set(err, ZR_E_PROTO,
                                                         "map key of type %s (keys are str)",
                                                         zr_wire_type_name(k));
                        if (k->via.str.size == 0 || k->via.str.size > ZR_WIRE_KEY_MAX)
                                return zr_wire_error_set(err, ZR_E_PROTO,
                                                         "map key of %u bytes (1..%d)",
                                                         k->via.str.size, ZR_WIRE_KEY_MAX);
                        for (uint32_t j = 0; j < i; j++) {
                                const msgpack_object *q = &kv[j].key;
                                if (q->via.str.size == k->via.str.size &&
                                    memcmp(q->via.str.ptr, k->via.str.ptr, k->via.str.size) == 0)
                                        return zr_wire_error_set(err, ZR_E_PROTO,
                                                                 "duplicate key '%.*s'",
                                                                 (int)k->via.str.size,
                                                                 k->via.str.ptr);
                        }
                        r = check_maps(&kv[i].val, err);
                        if (r < 0)
                                return r;
                }
        }
        return 0;
}

zr_wire_body *zr_wire_body_free(zr_wire_body *body) {
        if (body) {
                msgpack_zone_destroy(&body->zone);
                free(body);
        }
        return NULL;
}

const msgpack_object *zr_wire_body_root(const zr_wire_body *body) {
        return &body->root;
}

int zr_wire_body_decode(const void *data, size_t size, const zr_wire_limits *limits,
                        zr_wire_body **ret, zr_wire_error *err) {
        zr_wire_body *body = NULL;
        msgpack_unpack_return u;
        size_t off = 0;
        int r;

        r = zr_wire_scan(data, size, limits, NULL, err);
        if (r < 0)
                return r;

        body = calloc(1, sizeof(*body));
        if (!body)
                return zr_wire_error_set(err, ENOMEM, "out of memory for a body");
        if (!msgpack_zone_init(&body->zone, WIRE_ZONE_CHUNK)) {
                free(body);
                return zr_wire_error_set(err, ENOMEM, "out of memory for a body");
        }

        u = msgpack_unpack(data, size, &off, &body->zone, &body->root);
        if (u == MSGPACK_UNPACK_NOMEM_ERROR) {
                r = zr_wire_error_set(err, ENOMEM, "out of memory unpacking a body");
                goto fail;
        }
        if (u != MSGPACK_UNPACK_SUCCESS || off != size) {
                /* the scan accepts exactly what msgpack-c accepts; reaching
                 * this is a bug in one of them, refused all the same */
                r = zr_wire_error_set(err, ZR_E_PROTO, "msgpack body does not unpack (%d)",
                                      (int)u);
                goto fail;
        }
        if (body->root.type != MSGPACK_OBJECT_MAP) {
                r = zr_wire_error_set(err, ZR_E_PROTO, "body is a msgpack %s, not a map",
                                      zr_wire_type_name(&body->root));
                goto fail;
        }
        r = check_maps(&body->root, err);
        if (r < 0)
                goto fail;

        *ret = body;
        return 0;

fail:
        zr_wire_body_free(body);
        return r;
}

int zr_wire_frame_decode(const void *frame, size_t size, uint32_t frame_max,
                         const zr_wire_limits *limits, zr_wire_body **ret,
                         zr_wire_error *err) {
        uint32_t len;
        int r;

        if (size < ZR_FRAME_HEADER_SIZE)
                return zr_wire_error_set(err, ZR_E_PROTO,
                                         "frame of %zu bytes has no complete header", size);
        r = zr_wire_frame_header_decode(frame, frame_max, &len, err);
        if (r < 0)
                return r;
        if (size - ZR_FRAME_HEADER_SIZE < len)
                return zr_wire_error_set(err, ZR_E_PROTO,
                                         "frame truncated: body of %u bytes, %zu present",
                                         len, size - ZR_FRAME_HEADER_SIZE);
        if (size - ZR_FRAME_HEADER_SIZE > len)
                return zr_wire_error_set(err, ZR_E_PROTO, "%zu bytes after the frame",
                                         size - ZR_FRAME_HEADER_SIZE - len);
        return zr_wire_body_decode((const uint8_t *)frame + ZR_FRAME_HEADER_SIZE, len, limits,
                                   ret, err);
}

/* ---- getters ----------------------------------------------------------- */

const char *zr_wire_type_name(const msgpack_object *o) {
        if (!o)
                return "nothing";
        switch (o->type) {
        case MSGPACK_OBJECT_NIL: return "nil";
        case MSGPACK_OBJECT_BOOLEAN: return "bool";
        case MSGPACK_OBJECT_POSITIVE_INTEGER: return "uint";
        case MSGPACK_OBJECT_NEGATIVE_INTEGER: return "negative int";
        case MSGPACK_OBJECT_FLOAT32:
        case MSGPACK_OBJECT_FLOAT64: return "float";
        case MSGPACK_OBJECT_STR: return "str";
        case MSGPACK_OBJECT_ARRAY: return "array";
        case MSGPACK_OBJECT_MAP: return "map";
        case MSGPACK_OBJECT_BIN: return "bin";
        case MSGPACK_OBJECT_EXT: return "ext";
        default: return "unknown";
        }
}

const msgpack_object *zr_wire_find(const msgpack_object *map, const char *key) {
        size_t n;

        if (!map || map->type != MSGPACK_OBJECT_MAP || !key)
                return NULL;
        n = strlen(key);
        for (uint32_t i = 0; i < map->via.map.size; i++) {
                const msgpack_object *k = &map->via.map.ptr[i].key;
                if (k->type == MSGPACK_OBJECT_STR && k->via.str.size == n &&
                    memcmp(k->via.str.ptr, key, n) == 0)
                        return &map->via.map.ptr[i].val;
        }
        return NULL;
}

/* Finds `key` and checks its type; the common head of every getter. */
static int get_typed(const msgpack_object *map, const char *key, msgpack_object_type type,
                     const char *what, const msgpack_object **ret, zr_wire_error *err) {
        const msgpack_object *o = zr_wire_find(map, key);

        if (!o)
                return zr_wire_error_set(err, ZR_E_PROTO, "field '%s': missing (expected %s)",
                                         key, what);
        if (o->type != type)
                return zr_wire_error_set(err, ZR_E_PROTO, "field '%s': expected %s, got %s",
                                         key, what, zr_wire_type_name(o));
        *ret = o;
        return 0;
}

/* get_typed()'s object, or NULL; the code in *ret_r either way. */
static const msgpack_object *typed(const msgpack_object *map, const char *key,
                                   msgpack_object_type type, const char *what, int *ret_r,
                                   zr_wire_error *err) {
        const msgpack_object *o = NULL;

        *ret_r = get_typed(map, key, type, what, &o, err);
        return o;
}

/* A str or a bin field's bytes (two types that msgpack-c lays out alike). */
static int get_bytes(const msgpack_object *map, const char *key, msgpack_object_type type,
                     const char *what, const char **ret_ptr, size_t *ret_len,
                     zr_wire_error *err) {
        int r;
        const msgpack_object *o = typed(map, key, type, what, &r, err);

        if (o) {
                *ret_ptr = type == MSGPACK_OBJECT_STR ? o->via.str.ptr : o->via.bin.ptr;
                *ret_len = type == MSGPACK_OBJECT_STR ? o->via.str.size : o->via.bin.size;
        }
        return r;
}

int zr_wire_get_uint(const msgpack_object *map, const char *key, uint64_t max,
                     uint64_t *ret, zr_wire_error *err) {
        const msgpack_object *o = zr_wire_find(map, key);

        if (!o)
                return zr_wire_error_set(err, ZR_E_PROTO,
                                         "field '%s': missing (expected unsigned integer)", key);
        if (o->type != MSGPACK_OBJECT_POSITIVE_INTEGER) {
                if (o->type == MSGPACK_OBJECT_NEGATIVE_INTEGER)
                        return zr_wire_error_set(err, ZR_E_PROTO,
                                                 "field '%s': %" PRId64 " is negative", key,
                                                 o->via.i64);
                return zr_wire_error_set(err, ZR_E_PROTO,
                                         "field '%s': expected unsigned integer, got %s", key,
                                         zr_wire_type_name(o));
        }
        if (o->via.u64 > max)
                return zr_wire_error_set(err, ZR_E_PROTO,
                                         "field '%s': %" PRIu64 " is out of range (at most %" PRIu64
                                         ")",
                                         key, o->via.u64, max);
        *ret = o->via.u64;
        return 0;
}

int zr_wire_get_u64(const msgpack_object *map, const char *key, uint64_t *ret,
                    zr_wire_error *err) {
        return zr_wire_get_uint(map, key, UINT64_MAX, ret, err);
}

int zr_wire_get_u32(const msgpack_object *map, const char *key, uint32_t *ret,
                    zr_wire_error *err) {
        uint64_t v;
        int r = zr_wire_get_uint(map, key, UINT32_MAX, &v, err);

        if (r < 0)
                return r;
        *ret = (uint32_t)v;
        return 0;
}

int zr_wire_get_i64(const msgpack_object *map, const char *key, int64_t *ret,
                    zr_wire_error *err) {
        const msgpack_object *o = zr_wire_find(map, key);

        if (!o)
                return zr_wire_error_set(err, ZR_E_PROTO, "field '%s': missing (expected integer)",
                                         key);
        if (o->type == MSGPACK_OBJECT_NEGATIVE_INTEGER) {
                *ret = o->via.i64;
                return 0;
        }
        if (o->type != MSGPACK_OBJECT_POSITIVE_INTEGER)
                return zr_wire_error_set(err, ZR_E_PROTO, "field '%s': expected integer, got %s",
                                         key, zr_wire_type_name(o));
        if (o->via.u64 > INT64_MAX)
                return zr_wire_error_set(err, ZR_E_PROTO,
                                         "field '%s': %" PRIu64 " is out of range", key,
                                         o->via.u64);
        *ret = (int64_t)o->via.u64;
        return 0;
}

int zr_wire_get_bool(const msgpack_object *map, const char *key, bool *ret,
                     zr_wire_error *err) {
        int r;
        const msgpack_object *o = typed(map, key, MSGPACK_OBJECT_BOOLEAN, "bool", &r, err);

        if (o)
                *ret = o->via.boolean;
        return r;
}

int zr_wire_number(const msgpack_object *o, const char *what, double *ret, zr_wire_error *err) {
        double v;

        switch (o->type) {
        case MSGPACK_OBJECT_FLOAT32:
        case MSGPACK_OBJECT_FLOAT64:
                v = o->via.f64;
                break;
        case MSGPACK_OBJECT_POSITIVE_INTEGER:
                v = (double)o->via.u64;
                break;
        case MSGPACK_OBJECT_NEGATIVE_INTEGER:
                v = (double)o->via.i64;
                break;
        default:
                return zr_wire_error_set(err, ZR_E_PROTO, "field '%s': expected a number, got %s",
                                         what, zr_wire_type_name(o));
        }
        if (!isfinite(v))
                return zr_wire_error_set(err, ZR_E_PROTO, "field '%s': not a finite number", what);
        *ret = v;
        return 0;
}

int zr_wire_get_f64(const msgpack_object *map, const char *key, double *ret, zr_wire_error *err) {
        const msgpack_object *o = zr_wire_find(map, key);

        if (!o)
                return zr_wire_error_set(err, ZR_E_PROTO, "field '%s': missing (expected a number)",
                                         key);
        return zr_wire_number(o, key, ret, err);
}

int zr_wire_get_str(const msgpack_object *map, const char *key, const char **ret_ptr,
                    size_t *ret_len, zr_wire_error *err) {
        return get_bytes(map, key, MSGPACK_OBJECT_STR, "str", ret_ptr, ret_len, err);
}

int zr_wire_get_str_copy(const msgpack_object *map, const char *key, char *buf,
                         size_t bufsize, zr_wire_error *err) {
        const char *s;
        size_t n;
        int r = zr_wire_get_str(map, key, &s, &n, err);

        if (r < 0)
                return r;
        if (bufsize == 0 || n > bufsize - 1)
                return zr_wire_error_set(err, ZR_E_PROTO,
                                         "field '%s': string of %zu bytes is too long (at most %zu)",
                                         key, n, bufsize ? bufsize - 1 : 0);
        if (memchr(s, 0, n))
                return zr_wire_error_set(err, ZR_E_PROTO, "field '%s': string holds a NUL byte",
                                         key);
        memcpy(buf, s, n);
        buf[n] = 0;
        return 0;
}

int zr_wire_get_bin(const msgpack_object *map, const char *key, const void **ret_ptr,
                    size_t *ret_len, zr_wire_error *err) {
        const char *p = NULL;
        int r = get_bytes(map, key, MSGPACK_OBJECT_BIN, "bin", &p, ret_len, err);

        if (r == 0)
                *ret_ptr = p;
        return r;
}

int zr_wire_get_u64s(const msgpack_object *map, const char *key, const uint8_t **ret_ptr,
                     size_t *ret_count, zr_wire_error *err) {
        int r;
        const msgpack_object *o = typed(map, key, MSGPACK_OBJECT_BIN, "bin of little-endian u64",
                                        &r, err);

        if (o && o->via.bin.size % 8 != 0)
                return zr_wire_error_set(err, ZR_E_PROTO,
                                         "field '%s': bin of %u bytes is not a whole number of u64",
                                         key, o->via.bin.size);
        if (o) {
                *ret_ptr = (const uint8_t *)o->via.bin.ptr;
                *ret_count = o->via.bin.size / 8;
        }
        return r;
}

int zr_wire_get_array(const msgpack_object *map, const char *key,
                      const msgpack_object **ret_items, uint32_t *ret_count,
                      zr_wire_error *err) {
        int r;
        const msgpack_object *o = typed(map, key, MSGPACK_OBJECT_ARRAY, "array", &r, err);

        if (!o)
                return r;
        *ret_items = o->via.array.ptr;
        *ret_count = o->via.array.size;
        return 0;
}

int zr_wire_get_map(const msgpack_object *map, const char *key,
                    const msgpack_object **ret, zr_wire_error *err) {
        return get_typed(map, key, MSGPACK_OBJECT_MAP, "map", ret, err);
}

/* ---- writer ------------------------------------------------------------ */

static void writer_fail(zr_wire_writer *w, int r) {
        if (w->error == 0)
                w->error = r;
}

void zr_wire_writer_init(zr_wire_writer *w) {
        *w = (zr_wire_writer){0};
        msgpack_sbuffer_init(&w->sbuf);
        msgpack_packer_init(&w->pk, &w->sbuf, msgpack_sbuffer_write);
        zr_wire_writer_reset(w);
}

void zr_wire_writer_destroy(zr_wire_writer *w) {
        if (!w)
                return;
        msgpack_sbuffer_destroy(&w->sbuf);
        msgpack_sbuffer_init(&w->sbuf);
        w->depth = 0;
}

void zr_wire_writer_reset(zr_wire_writer *w) {
        static const char header[ZR_FRAME_HEADER_SIZE] = {0};

        msgpack_sbuffer_clear(&w->sbuf);
        w->error = 0;
        w->depth = 0;
        if (msgpack_sbuffer_write(&w->sbuf, header, sizeof(header)) < 0)
                writer_fail(w, -ENOMEM);
}

/* Accounts for one element in the open container and writes its key. */
static bool writer_key(zr_wire_writer *w, const char *key) {
        if (w->error < 0)
                return false;
        if (w->depth == 0) {
                /* only the body itself may stand outside a container */
                if (key || w->sbuf.size != ZR_FRAME_HEADER_SIZE) {
                        writer_fail(w, -EINVAL);
                        return false;
                }
                return true;
        }
        if (w->stack[w->depth - 1].is_map != (key != NULL)) {
                writer_fail(w, -EINVAL);
                return false;
        }
        w->stack[w->depth - 1].count++;
        if (key) {
                size_t n = strlen(key);
                if (msgpack_pack_str(&w->pk, n) < 0 || msgpack_pack_str_body(&w->pk, key, n) < 0) {
                        writer_fail(w, -ENOMEM);
                        return false;
                }
        }
        return true;
}

static void writer_check(zr_wire_writer *w, int r) {
        if (r < 0)
                writer_fail(w, -ENOMEM);
}

static void writer_open(zr_wire_writer *w, const char *key, bool is_map) {
        uint8_t h[5] = {is_map ? 0xdf : 0xdd, 0, 0, 0, 0};

        if (!writer_key(w, key))
                return;
        if (w->depth >= ZR_WIRE_DEPTH_MAX) {
                writer_fail(w, -EINVAL);
                return;
        }
        w->stack[w->depth].offset = w->sbuf.size;
        w->stack[w->depth].count = 0;
        w->stack[w->depth].is_map = is_map;
        w->depth++;
        writer_check(w, msgpack_sbuffer_write(&w->sbuf, (const char *)h, sizeof(h)));
}

void zr_wire_begin_map(zr_wire_writer *w, const char *key) {
        writer_open(w, key, true);
}

void zr_wire_begin_array(zr_wire_writer *w, const char *key) {
        writer_open(w, key, false);
}

void zr_wire_end(zr_wire_writer *w) {
        uint8_t *h;
        uint32_t n;

        if (w->error < 0)
                return;
        if (w->depth == 0) {
                writer_fail(w, -EINVAL);
                return;
        }
        w->depth--;
        h = (uint8_t *)w->sbuf.data + w->stack[w->depth].offset;
        n = w->stack[w->depth].count;
        h[1] = n >> 24;
        h[2] = (n >> 16) & 0xff;
        h[3] = (n >> 8) & 0xff;
        h[4] = n & 0xff;
}

void zr_wire_writer_begin_message(zr_wire_writer *w, const char *kind, bool has_id,
                                  uint64_t id) {
        zr_wire_begin_map(w, NULL);
        zr_wire_put_str(w, ZR_FIELD_KIND, kind);
        if (has_id)
                zr_wire_put_u64(w, ZR_FIELD_ID, id);
}

void zr_wire_put_nil(zr_wire_writer *w, const char *key) {
        if (writer_key(w, key))
                writer_check(w, msgpack_pack_nil(&w->pk));
}

void zr_wire_put_bool(zr_wire_writer *w, const char *key, bool v) {
        if (writer_key(w, key))
                writer_check(w, v ? msgpack_pack_true(&w->pk) : msgpack_pack_false(&w->pk));
}

void zr_wire_put_u64(zr_wire_writer *w, const char *key, uint64_t v) {
        if (writer_key(w, key))
                writer_check(w, msgpack_pack_uint64(&w->pk, v));
}

void zr_wire_put_i64(zr_wire_writer *w, const char *key, int64_t v) {
        if (writer_key(w, key))
                writer_check(w, msgpack_pack_int64(&w->pk, v));
}

void zr_wire_put_f64(zr_wire_writer *w, const char *key, double v) {
        if (writer_key(w, key))
                writer_check(w, msgpack_pack_double(&w->pk, v));
}

/* A str or a bin of len bytes at p (their headers have the same forms). */
static void put_bytes(zr_wire_writer *w, const char *key, bool is_str, const void *p,
                      size_t len) {
        if (len > UINT32_MAX) {
                writer_fail(w, -EINVAL);
                return;
        }
        if (!writer_key(w, key))
                return;
        if (is_str) {
                writer_check(w, msgpack_pack_str(&w->pk, len));
                writer_check(w, msgpack_pack_str_body(&w->pk, p, len));
        } else {
                writer_check(w, msgpack_pack_bin(&w->pk, len));
                writer_check(w, msgpack_pack_bin_body(&w->pk, p, len));
        }
}

void zr_wire_put_strn(zr_wire_writer *w, const char *key, const char *s, size_t len) {
        put_bytes(w, key, true, s, len);
}

void zr_wire_put_str(zr_wire_writer *w, const char *key, const char *s) {
        if (!s)
                zr_wire_put_nil(w, key);
        else
                zr_wire_put_strn(w, key, s, strlen(s));
}

void zr_wire_put_bin(zr_wire_writer *w, const char *key, const void *p, size_t len) {
        put_bytes(w, key, false, p, len);
}

void zr_wire_put_u64s(zr_wire_writer *w, const char *key, const uint64_t *v, size_t n) {
        if (n > UINT32_MAX / 8) {
                writer_fail(w, -EINVAL);
                return;
        }
        if (!writer_key(w, key))
                return;
        writer_check(w, msgpack_pack_bin(&w->pk, n * 8));
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
        /* the host's layout is the wire's */
        writer_check(w, msgpack_pack_bin_body(&w->pk, v, n * 8));
#else
        /* converted in blocks: one buffer write per block, not per value */
        for (size_t i = 0; i < n && w->error == 0;) {
                uint8_t le[8 * WIRE_U64S_BLOCK];
                size_t m = n - i < WIRE_U64S_BLOCK ? n - i : WIRE_U64S_BLOCK;

                for (size_t j = 0; j < m; j++)
                        for (unsigned b = 0; b < 8; b++)
                                le[8 * j + b] = (v[i + j] >> (8 * b)) & 0xff;
                writer_check(w, msgpack_pack_bin_body(&w->pk, le, 8 * m));
                i += m;
        }
#endif
}

void zr_wire_put_uint_array(zr_wire_writer *w, const char *key, const uint64_t *v, size_t n) {
        zr_wire_begin_array(w, key);
        for (size_t i = 0; i < n; i++)
                zr_wire_put_u64(w, NULL, v[i]);
        zr_wire_end(w);
}

void zr_wire_put_object(zr_wire_writer *w, const char *key, const msgpack_object *o) {
        char k[ZR_WIRE_KEY_MAX + 1];

        if (w->error < 0)
                return;
        switch (o->type) {
        case MSGPACK_OBJECT_MAP:
                zr_wire_begin_map(w, key);
                for (uint32_t i = 0; i < o->via.map.size && w->error == 0; i++) {
                        const msgpack_object *ko = &o->via.map.ptr[i].key;

                        if (ko->type != MSGPACK_OBJECT_STR || ko->via.str.size == 0 ||
                            ko->via.str.size > ZR_WIRE_KEY_MAX ||
                            memchr(ko->via.str.ptr, 0, ko->via.str.size)) {
                                writer_fail(w, -EINVAL);
                                return;
                        }
                        memcpy(k, ko->via.str.ptr, ko->via.str.size);
                        k[ko->via.str.size] = 0;
                        zr_wire_put_object(w, k, &o->via.map.ptr[i].val);
                }
                zr_wire_end(w);
                return;
        case MSGPACK_OBJECT_ARRAY:
                zr_wire_begin_array(w, key);
                for (uint32_t i = 0; i < o->via.array.size && w->error == 0; i++)
                        zr_wire_put_object(w, NULL, &o->via.array.ptr[i]);
                zr_wire_end(w);
                return;
        case MSGPACK_OBJECT_POSITIVE_INTEGER: zr_wire_put_u64(w, key, o->via.u64); return;
        case MSGPACK_OBJECT_NEGATIVE_INTEGER: zr_wire_put_i64(w, key, o->via.i64); return;
        case MSGPACK_OBJECT_BOOLEAN: zr_wire_put_bool(w, key, o->via.boolean); return;
        case MSGPACK_OBJECT_NIL: zr_wire_put_nil(w, key); return;
        case MSGPACK_OBJECT_FLOAT64: zr_wire_put_f64(w, key, o->via.f64); return;
        case MSGPACK_OBJECT_STR: zr_wire_put_strn(w, key, o->via.str.ptr, o->via.str.size); return;
        case MSGPACK_OBJECT_BIN: zr_wire_put_bin(w, key, o->via.bin.ptr, o->via.bin.size); return;
        default:
                writer_fail(w, -EINVAL); /* float32 and ext */
        }
}

int zr_wire_writer_finish(zr_wire_writer *w, uint32_t frame_max, const uint8_t **ret_frame,
                          size_t *ret_size, zr_wire_error *err) {
        size_t body;

        /* the body map may still be open (the usual case) or already closed */
        if (w->error == 0 && w->depth == 1)
                zr_wire_end(w);
        if (w->error == 0 && (w->depth != 0 || w->sbuf.size == ZR_FRAME_HEADER_SIZE))
                writer_fail(w, -EINVAL);
        if (w->error < 0)
                return zr_wire_error_set(err, -w->error, w->error == -ENOMEM
                                                                 ? "out of memory building a frame"
                                                                 : "frame built out of order");
        body = w->sbuf.size - ZR_FRAME_HEADER_SIZE;
        if (body > frame_max)
                return zr_wire_error_set(err, ZR_E_LIMIT,
                                         "frame body of %zu bytes is over the limit of %u", body,
                                         frame_max);
        zr_wire_frame_header_encode((uint8_t *)w->sbuf.data, (uint32_t)body);
        *ret_frame = (const uint8_t *)w->sbuf.data;
        *ret_size = w->sbuf.size;
        return 0;
}
