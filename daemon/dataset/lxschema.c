/* lxschema.c: decoding and encoding loaderx 1.5.7's ragged schema.msgpack.
 *
 * The file can be megabytes (a list per record), so it is read in one pass by a
 * small msgpack reader of its own rather than unpacked whole by msgpack-c (whose
 * objects cost 24 bytes each): shapes go straight into the compact table, the
 * caller's entries are copied as bytes. Every length is checked against the bytes
 * that remain before it is used. Encoding uses msgpack-c's packer, which like
 * loaderx's msgpack-python writes the smallest form of every integer.
 */
#include "dataset/lxschema.h"

#include <errno.h>
#include <msgpack.h>
#include <stdlib.h>
#include <string.h>

#include "dataset/mpwalk.h"
#include "store/store.h"

/* A cursor over the file's bytes. */
typedef struct mp {
        const uint8_t *p, *end, *start;
} mp;

static size_t mp_left(const mp *m) {
        return (size_t)(m->end - m->p);
}

static int mp_truncated(const mp *m, zr_error *err) {
        return zr_error_set(err, ZR_E_SCHEMA, "schema.msgpack is truncated (at byte %zu of %zu)",
                            (size_t)(m->p - m->start), (size_t)(m->end - m->start));
}

/* Big-endian unsigned of n bytes at m->p + 1 (after the type byte). */
static uint64_t mp_be(const mp *m, unsigned n) {
        uint64_t v = 0;

        for (unsigned i = 0; i < n; i++)
                v = (v << 8) | m->p[1 + i];
        return v;
}

static const char *mp_type_name(uint8_t b) {
        if (b <= 0x7f || b == 0xcc || b == 0xcd || b == 0xce || b == 0xcf)
                return "an integer";
        if (b >= 0xe0 || (b >= 0xd0 && b <= 0xd3))
                return "a negative integer";
        if ((b >= 0xa0 && b <= 0xbf) || (b >= 0xd9 && b <= 0xdb))
                return "a string";
        if ((b >= 0x90 && b <= 0x9f) || b == 0xdc || b == 0xdd)
                return "an array";
        if ((b >= 0x80 && b <= 0x8f) || b == 0xde || b == 0xdf)
                return "a map";
        if (b == 0xc0)
                return "nil";
        if (b == 0xc2 || b == 0xc3)
                return "a boolean";
        if (b == 0xca || b == 0xcb)
                return "a float";
        return "another msgpack type";
}

/* The header at m->p of a string or a container, its count of bytes or
 * elements into *ret_n and its own size into *ret_hdr: a fixed form (type byte
 * fix | n, n <= mask) or one of `nsized` forms from type byte `sized`, whose
 * length fields take first_bytes, twice that, ... Anything else is refused as
 * `what` being not `expected`. */
static int mp_head(const mp *m, uint8_t fix, uint8_t mask, uint8_t sized, unsigned nsized,
                   unsigned first_bytes, uint64_t *ret_n, unsigned *ret_hdr, const char *what,
                   const char *expected, zr_error *err) {
        uint8_t b;

        if (mp_left(m) < 1)
                return mp_truncated(m, err);
        b = *m->p;
        if ((b & (uint8_t)~mask) == fix) {
                *ret_n = b & mask;
                *ret_hdr = 1;
                return 0;
        }
        if (b < sized || b >= sized + nsized)
                return zr_error_set(err, ZR_E_SCHEMA, "schema.msgpack: %s is %s, expected %s", what,
                                    mp_type_name(b), expected);
        *ret_hdr = 1 + (first_bytes << (b - sized));
        if (mp_left(m) < *ret_hdr)
                return mp_truncated(m, err);
        *ret_n = mp_be(m, *ret_hdr - 1);
        return 0;
}

/* A container header: fixed (fix..fix+15 → count in the low nibble) or the
 * 16- and 32-bit forms from type byte b16. */
static int mp_container(mp *m, uint8_t fix, uint8_t b16, unsigned per, uint32_t *ret,
                        const char *what, zr_error *err) {
        unsigned hdr;
        uint64_t n;
        int r = mp_head(m, fix, 0x0f, b16, 2, 2, &n, &hdr, what,
                        fix == 0x80 ? "a map" : "an array", err);

        if (r < 0)
                return r;
        m->p += hdr;
        if (n * per > mp_left(m))
                return zr_error_set(err, ZR_E_SCHEMA, "schema.msgpack: %s declares %llu elements, "
                                    "more than the %zu bytes left", what, (unsigned long long)n,
                                    mp_left(m));
        *ret = (uint32_t)n;
        return 0;
}

static int mp_str(mp *m, const char **ret, uint32_t *ret_len, const char *what, zr_error *err) {
        unsigned hdr;
        uint64_t n;
        int r = mp_head(m, 0xa0, 0x1f, 0xd9, 3, 1, &n, &hdr, what, "a string", err);

        if (r < 0)
                return r;
        if (mp_left(m) - hdr < n)
                return mp_truncated(m, err);
        *ret = (const char *)m->p + hdr;
        *ret_len = (uint32_t)n;
        m->p += hdr + n;
        return 0;
}

static int mp_uint(mp *m, uint64_t *ret, const char *what, zr_error *err) {
        uint8_t b;
        unsigned n;

        if (mp_left(m) < 1)
                return mp_truncated(m, err);
        b = *m->p;
        if (b <= 0x7f) {
                *ret = b;
                m->p++;
                return 0;
        }
        if (b < 0xcc || b > 0xcf)
                return zr_error_set(err, ZR_E_SCHEMA, "schema.msgpack: %s is %s, expected a "
                                    "non-negative integer", what, mp_type_name(b));
        n = 1u << (b - 0xcc);
        if (mp_left(m) < 1 + n)
                return mp_truncated(m, err);
        *ret = mp_be(m, n);
        m->p += 1 + n;
        return 0;
}

/* Skips one object of any type (mpwalk.h). */
static int mp_skip(mp *m, zr_error *err) {
        size_t at = (size_t)(m->p - m->start);
        int r = zr_mp_skip(m->start, (size_t)(m->end - m->start), &at, err);

        if (r == 0)
                m->p = m->start + at;
        return r;
}

static int str_is(const char *s, uint32_t len, const char *lit) {
        return len == strlen(lit) && memcmp(s, lit, len) == 0;
}

int zr_lxschema_init(zr_lxschema *ret, const char *dtype, enum zr_codec codec, zr_error *err) {
        zr_lxschema s = {0};
        int r;

        r = zr_dtype_parse(dtype, &s.dtype, err);
        if (r < 0)
                return r;
        if (!zr_codec_name(codec))
                return zr_error_set(err, ZR_E_BAD_CODEC, "codec %d is unknown", (int)codec);
        s.codec = codec;
        r = zr_shapes_new(&s.shapes, err);
        if (r < 0)
                return r;
        *ret = s;
        return 0;
}

void zr_lxschema_done(zr_lxschema *s) {
        if (!s)
                return;
        zr_shapes_free(s->shapes);
        free(s->extra);
        free(s->pending);
        memset(s, 0, sizeof(*s));
}

/* The "shapes" array, into s->shapes. */
static int decode_shapes(mp *m, zr_lxschema *s, zr_error *err) {
        uint32_t n;
        int r;

        r = mp_container(m, 0x90, 0xdc, 1, &n, "\"shapes\"", err);
        for (uint32_t i = 0; r >= 0 && i < n; i++) {
                uint64_t dims[ZR_SCHEMA_NDIM_MAX], bytes = s->dtype.itemsize;
                uint32_t ndim;
                char what[48];

                snprintf(what, sizeof(what), "\"shapes\"[%u]", i);
                r = mp_container(m, 0x90, 0xdc, 1, &ndim, what, err);
                if (r < 0)
                        break;
                if (ndim < 1 || ndim > ZR_SCHEMA_NDIM_MAX) {
                        r = zr_error_set(err, ZR_E_SCHEMA, "schema.msgpack: %s has %u dimensions, "
                                         "1..%d are allowed", what, ndim, ZR_SCHEMA_NDIM_MAX);
                        break;
                }
                for (uint32_t k = 0; r >= 0 && k < ndim; k++) {
                        r = mp_uint(m, &dims[k], what, err);
                        if (r >= 0 && (__builtin_mul_overflow(bytes, dims[k], &bytes) ||
                                       bytes > ZR_RECORD_MAX))
                                r = zr_error_set(err, ZR_E_SCHEMA, "schema.msgpack: %s is larger "
                                                 "than a record may be (2^31 bytes)", what);
                }
                if (r >= 0)
                        r = zr_shapes_append(s->shapes, dims, ndim, err);
        }
        return r;
}

/* Appends the bytes [from, m->p) to the caller's entries. */
static int keep_extra(zr_lxschema *s, const uint8_t *from, const mp *m, zr_error *err) {
        size_t n = (size_t)(m->p - from);
        uint8_t *e = realloc(s->extra, s->extra_len + n);

        if (!e)
                return zr_error_errno(err, ENOMEM, "schema.msgpack: caller's keys");
        memcpy(e + s->extra_len, from, n);
        s->extra = e;
        s->extra_len += n;
        s->extra_count++;
        return 0;
}

enum { K_FORMAT, K_VERSION, K_KIND, K_DTYPE, K_CODEC, K_SHAPES, K_PENDING, K_COUNT };
static const char *const key_names[K_COUNT] = { "format", "version", "kind", "dtype", "codec",
                                                 "shapes", ZR_LXSCHEMA_PENDING_KEY };

/* The pending delete: an array of at least one uint. */
static int decode_pending(mp *m, zr_lxschema *s, zr_error *err) {
        uint32_t n;
        int r = mp_container(m, 0x90, 0xdc, 1, &n, "\"" ZR_LXSCHEMA_PENDING_KEY "\"", err);

        if (r < 0)
                return r;
        if (n == 0)
                return zr_error_set(err, ZR_E_SCHEMA, "schema.msgpack: \"" ZR_LXSCHEMA_PENDING_KEY
                                    "\" is empty");
        s->pending = malloc(n * sizeof(uint64_t));
        if (!s->pending)
                return zr_error_errno(err, ENOMEM, "schema.msgpack: a pending delete");
        s->npending = n;
        for (uint32_t i = 0; r >= 0 && i < n; i++)
                r = mp_uint(m, &s->pending[i], "\"" ZR_LXSCHEMA_PENDING_KEY "\"", err);
        return r;
}

/* One entry of the top-level map. "shapes" is only skipped here (its sizes need the
 * dtype, which may come after it); *shapes_at is where it starts. */
static int decode_entry(mp *m, zr_lxschema *s, int *seen, size_t *shapes_at, zr_error *err) {
        const uint8_t *from = m->p;
        const char *key, *v;
        uint32_t klen, vlen;
        uint64_t u;
        int k, r;

        if (mp_left(m) < 1)
                return mp_truncated(m, err);
        if (!((*m->p >= 0xa0 && *m->p <= 0xbf) || (*m->p >= 0xd9 && *m->p <= 0xdb))) {
                r = mp_skip(m, err); /* a non-string key: the caller's */
                if (r >= 0)
                        r = mp_skip(m, err);
                return r < 0 ? r : keep_extra(s, from, m, err);
        }
        r = mp_str(m, &key, &klen, "a key", err);
        if (r < 0)
                return r;
        for (k = 0; k < K_COUNT; k++)
                if (str_is(key, klen, key_names[k]))
                        break;
        if (k == K_COUNT) {
                r = mp_skip(m, err);
                return r < 0 ? r : keep_extra(s, from, m, err);
        }
        if (seen[k])
                return zr_error_set(err, ZR_E_SCHEMA, "schema.msgpack: key \"%s\" appears twice",
                                    key_names[k]);
        seen[k] = 1;
        switch (k) {
        case K_FORMAT:
                r = mp_str(m, &v, &vlen, "\"format\"", err);
                if (r >= 0 && !str_is(v, vlen, ZR_SCHEMA_FORMAT))
                        r = zr_error_set(err, ZR_E_SCHEMA, "schema.msgpack: \"format\" is \"%.*s\", "
                                         "expected \"" ZR_SCHEMA_FORMAT "\"",
                                         (int)(vlen < 32 ? vlen : 32), v);
                return r;
        case K_VERSION:
                r = mp_uint(m, &u, "\"version\"", err);
                if (r >= 0 && u != ZR_SCHEMA_FORMAT_VERSION)
                        r = zr_error_set(err, ZR_E_SCHEMA, "schema.msgpack: \"version\" is %llu, "
                                         "this build reads version %d", (unsigned long long)u,
                                         ZR_SCHEMA_FORMAT_VERSION);
                return r;
        case K_KIND:
                r = mp_str(m, &v, &vlen, "\"kind\"", err);
                if (r >= 0 && !str_is(v, vlen, "ragged"))
                        r = zr_error_set(err, ZR_E_SCHEMA, "schema.msgpack: kind \"%.*s\", not a "
                                         "ragged store", (int)(vlen < 32 ? vlen : 32), v);
                return r;
        case K_DTYPE:
                r = mp_str(m, &v, &vlen, "\"dtype\"", err);
                return r < 0 ? r : zr_dtype_parse_n(v, vlen, &s->dtype, err);
        case K_CODEC:
                r = mp_str(m, &v, &vlen, "\"codec\"", err);
                return r < 0 ? r : zr_codec_parse(v, vlen, &s->codec, err);
        case K_PENDING:
                return decode_pending(m, s, err);
        default:
                *shapes_at = (size_t)(m->p - m->start);
                return mp_skip(m, err);
        }
}

int zr_lxschema_decode(const void *data, size_t len, zr_lxschema *ret, zr_error *err) {
        mp m = { .p = data, .end = (const uint8_t *)data + len, .start = data };
        zr_lxschema s = {0};
        int seen[K_COUNT] = {0};
        size_t shapes_at = 0;
        uint32_t n;
        int r;

        if (len == 0)
                return zr_error_set(err, ZR_E_SCHEMA, "schema.msgpack is empty");
        r = zr_shapes_new(&s.shapes, err);
        if (r < 0)
                return r;
        r = mp_container(&m, 0x80, 0xde, 2, &n, "schema.msgpack", err);
        for (uint32_t i = 0; r >= 0 && i < n; i++)
                r = decode_entry(&m, &s, seen, &shapes_at, err);
        if (r >= 0 && m.p != m.end)
                r = zr_error_set(err, ZR_E_SCHEMA, "schema.msgpack has %zu bytes after its map",
                                 mp_left(&m));
        for (int k = 0; r >= 0 && k < K_COUNT; k++)
                if (!seen[k] && k != K_VERSION && k != K_PENDING)
                        r = zr_error_set(err, ZR_E_SCHEMA, "schema.msgpack: \"%s\" is missing (a "
                                         "loaderx 1.5.7 ragged schema has format, kind, dtype, "
                                         "codec and shapes)", key_names[k]);
        if (r >= 0) {
                mp at = { .p = m.start + shapes_at, .end = m.end, .start = m.start };
                r = decode_shapes(&at, &s, err);
        }
        if (r < 0) {
                zr_lxschema_done(&s);
                return r;
        }
        *ret = s;
        return 0;
}

int zr_lxschema_sniff(const void *data, size_t len) {
        mp m = { .p = data, .end = (const uint8_t *)data + len, .start = data };
        uint32_t n;

        if (len == 0)
                return 0;
        if (mp_container(&m, 0x80, 0xde, 2, &n, "", NULL) < 0) {
                /* a map whose declared size passes what was read (a prefix of the
                 * file): look at the entries that are there */
                uint8_t b = *(const uint8_t *)data;
                size_t hdr = b == 0xde ? 3 : b == 0xdf ? 5 : 1;

                if (!((b & 0xf0) == 0x80 || b == 0xde || b == 0xdf) || hdr >= len)
                        return 0;
                m.p = (const uint8_t *)data + hdr;
                n = UINT32_MAX;
        }
        for (uint32_t i = 0; i < n && m.p < m.end; i++) {
                const char *key;
                uint32_t klen;

                if (mp_str(&m, &key, &klen, "", NULL) < 0) {
                        if (mp_skip(&m, NULL) < 0)
                                return 0;
                } else if (str_is(key, klen, "shapes")) {
                        return 1;
                }
                if (mp_skip(&m, NULL) < 0)
                        return 0;
        }
        return 0;
}

int zr_lxschema_encode(const zr_lxschema *s, void **ret, size_t *ret_len, zr_error *err) {
        uint64_t count = zr_shapes_count(s->shapes);
        msgpack_sbuffer sbuf;
        msgpack_packer pk;
        int r = 0;

        msgpack_sbuffer_init(&sbuf);
        msgpack_packer_init(&pk, &sbuf, msgpack_sbuffer_write);
#define PACK_STR(str) msgpack_pack_str_with_body(&pk, (str), strlen(str))
        if (msgpack_pack_map(&pk, 6 + (s->npending > 0) + s->extra_count) || PACK_STR("format") ||
            PACK_STR(ZR_SCHEMA_FORMAT) || PACK_STR("version") ||
            msgpack_pack_uint32(&pk, ZR_SCHEMA_FORMAT_VERSION) || PACK_STR("kind") ||
            PACK_STR("ragged") || PACK_STR("dtype") || PACK_STR(s->dtype.str) ||
            PACK_STR("codec") || PACK_STR(zr_codec_name(s->codec)) || PACK_STR("shapes") ||
            count > UINT32_MAX || msgpack_pack_array(&pk, (size_t)count))
                goto oom;
#undef PACK_STR
        for (uint64_t i = 0; i < count; i++) {
                const uint64_t *dims;
                uint32_t ndim;

                zr_shapes_get(s->shapes, i, &ndim, &dims, NULL);
                if (msgpack_pack_array(&pk, ndim))
                        goto oom;
                for (uint32_t k = 0; k < ndim; k++)
                        if (msgpack_pack_uint64(&pk, dims[k]))
                                goto oom;
        }
        if (s->npending > 0) {
                if (msgpack_pack_str_with_body(&pk, ZR_LXSCHEMA_PENDING_KEY,
                                               strlen(ZR_LXSCHEMA_PENDING_KEY)) ||
                    msgpack_pack_array(&pk, s->npending))
                        goto oom;
                for (size_t i = 0; i < s->npending; i++)
                        if (msgpack_pack_uint64(&pk, s->pending[i]))
                                goto oom;
        }
        if (s->extra_len && msgpack_sbuffer_write(&sbuf, (const char *)s->extra, s->extra_len))
                goto oom;
        *ret_len = sbuf.size;
        *ret = msgpack_sbuffer_release(&sbuf);
        goto out;
oom:
        r = zr_error_errno(err, ENOMEM, "encoding schema.msgpack of %llu records",
                           (unsigned long long)count);
out:
        msgpack_sbuffer_destroy(&sbuf);
        return r;
}
