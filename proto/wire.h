/* wire.h: the frame and body codec of the zrecord protocol, shared by zrecordd
 * and libzrc.
 *
 * A frame is a little-endian u32 body length followed by that many bytes of one
 * msgpack object (proto/PROTOCOL.md, "Frames"). This module
 *   - encodes and checks the 4-byte frame header against a receiver's maximum;
 *   - validates a body without allocating anything (zr_wire_scan): every
 *     container must declare no more elements than bytes remain, nesting and the
 *     number of objects are bounded, and the object must end exactly at the end
 *     of the body; only then is it unpacked by msgpack-c into a zone;
 *   - gives typed getters for the fields of a map, whose errors name the field;
 *   - builds bodies and frames for requests, replies and events.
 * What a message must contain is message.h's business, not this module's.
 *
 * Library code: nothing here prints, exits or touches a descriptor. Errors are
 * returned as -ZR_E_* (or -ENOMEM) with a message in a zr_wire_error.
 */
#ifndef ZR_PROTO_WIRE_H
#define ZR_PROTO_WIRE_H

#include <msgpack.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "zr-errors.h"
#include "zr-proto.h"

#define ZR_WIRE_ERROR_MESSAGE_MAX 256

/* An error with a human message. The protocol layer does not depend on the
 * daemon's zr_error; the two have the same shape, so a caller copies one into
 * the other. The first error set wins. */
typedef struct zr_wire_error {
        int code;                                /* positive; 0 while unset */
        char message[ZR_WIRE_ERROR_MESSAGE_MAX]; /* NUL-terminated, one line */
} zr_wire_error;

/* Sets *err (err may be NULL; an already set error is kept) and returns -code. */
int zr_wire_error_set(zr_wire_error *err, int code, const char *fmt, ...)
        __attribute__((format(printf, 3, 4)));

/* ---- frames ------------------------------------------------------------ */

/* Writes the 4-byte header announcing a body of body_len bytes. */
void zr_wire_frame_header_encode(uint8_t out[ZR_FRAME_HEADER_SIZE], uint32_t body_len);

/* Reads a frame header. Looks at the 4 bytes only, so a caller can refuse a
 * frame before reading (or allocating for) its body. On success returns 0 and
 * sets *ret_body_len (1..frame_max). Returns -ZR_E_PROTO for a zero length (a
 * body is at least one msgpack byte) and -ZR_E_LIMIT for a length over
 * frame_max. After either, the stream cannot be resynchronised. */
int zr_wire_frame_header_decode(const uint8_t in[ZR_FRAME_HEADER_SIZE], uint32_t frame_max,
                                uint32_t *ret_body_len, zr_wire_error *err);

/* ---- bodies ------------------------------------------------------------ */

typedef struct zr_wire_limits {
        uint32_t depth_max;    /* containers nested deeper are refused */
        uint32_t objects_max;  /* objects in one body (each container and scalar) */
        uint32_t map_keys_max; /* entries of any one map */
} zr_wire_limits;

/* The protocol's limits (ZR_WIRE_* of zr-proto.h). */
extern const zr_wire_limits zr_wire_limits_default;

/* Checks that data[0..size) is exactly one well-formed msgpack object within
 * `limits` (NULL: the defaults). Allocates nothing and reads each byte once; a
 * container declaring more elements than bytes remain (array: one byte per
 * element, map: two) is refused as soon as its header is read. Returns 0 and
 * sets *ret_objects (may be NULL) to the number of objects, or -ZR_E_PROTO for
 * a truncated object, trailing bytes, a reserved byte (0xc1), an oversized
 * declaration, or nesting deeper than allowed; -ZR_E_LIMIT for too many
 * objects. */
int zr_wire_scan(const void *data, size_t size, const zr_wire_limits *limits,
                 size_t *ret_objects, zr_wire_error *err);

typedef struct zr_wire_body zr_wire_body;

/* Decodes one message body: zr_wire_scan(), then msgpack-c unpacks it into a
 * zone owned by the returned body. The body must be a map; every map in it
 * must have str keys of at most ZR_WIRE_KEY_MAX bytes, no duplicate key and at
 * most limits->map_keys_max entries. str, bin and ext objects point into
 * `data`, which must stay valid and unchanged while the body lives.
 * Returns 0 and sets *ret (owned by the caller, free with zr_wire_body_free()),
 * -ZR_E_PROTO / -ZR_E_LIMIT as zr_wire_scan() and for the rules above, or
 * -ENOMEM. */
int zr_wire_body_decode(const void *data, size_t size, const zr_wire_limits *limits,
                        zr_wire_body **ret, zr_wire_error *err);

/* Decodes a whole frame held in memory (header and body): the header is
 * checked against frame_max, then the frame must be exactly 4 + length bytes
 * (-ZR_E_PROTO for a truncated frame or bytes after the body). Otherwise as
 * zr_wire_body_decode(); `frame` must outlive the body. */
int zr_wire_frame_decode(const void *frame, size_t size, uint32_t frame_max,
                         const zr_wire_limits *limits, zr_wire_body **ret,
                         zr_wire_error *err);

/* Frees a body (NULL allowed); returns NULL. */
zr_wire_body *zr_wire_body_free(zr_wire_body *body);

/* The body's root map; valid while the body lives. */
const msgpack_object *zr_wire_body_root(const zr_wire_body *body);

/* ---- typed getters on a map ---------------------------------------------
 * `map` is any map object of a decoded body (the root or a nested map). Each
 * getter returns 0 and sets its outputs, or -ZR_E_PROTO with a message naming
 * the field and what was wrong: missing, of the wrong type, or out of range.
 * For an optional field test zr_wire_find() first. Pointers returned point into
 * the body's bytes and live as long as the body. */

/* The value of `key` in `map`, or NULL if the key is absent or map is not a map. */
const msgpack_object *zr_wire_find(const msgpack_object *map, const char *key);

/* A non-negative integer in [0, max]. */
int zr_wire_get_uint(const msgpack_object *map, const char *key, uint64_t max,
                     uint64_t *ret, zr_wire_error *err);
int zr_wire_get_u64(const msgpack_object *map, const char *key, uint64_t *ret,
                    zr_wire_error *err);
int zr_wire_get_u32(const msgpack_object *map, const char *key, uint32_t *ret,
                    zr_wire_error *err);
/* Any integer representable as int64_t. */
int zr_wire_get_i64(const msgpack_object *map, const char *key, int64_t *ret,
                    zr_wire_error *err);
int zr_wire_get_bool(const msgpack_object *map, const char *key, bool *ret,
                     zr_wire_error *err);
/* A number (the f64 type): a float64 or float32, or an integer, as a double;
 * a NaN or an infinity is refused. */
int zr_wire_get_f64(const msgpack_object *map, const char *key, double *ret, zr_wire_error *err);
/* The same for an array element (or any object); `what` names it. */
int zr_wire_number(const msgpack_object *o, const char *what, double *ret, zr_wire_error *err);
/* A str; *ret_ptr is not NUL-terminated. */
int zr_wire_get_str(const msgpack_object *map, const char *key, const char **ret_ptr,
                    size_t *ret_len, zr_wire_error *err);
/* A str copied into buf (NUL-terminated); -ZR_E_PROTO if it has a NUL byte or
 * does not fit in bufsize - 1 bytes. */
int zr_wire_get_str_copy(const msgpack_object *map, const char *key, char *buf,
                         size_t bufsize, zr_wire_error *err);
int zr_wire_get_bin(const msgpack_object *map, const char *key, const void **ret_ptr,
                    size_t *ret_len, zr_wire_error *err);
/* A bin of little-endian u64 values (its length a multiple of 8): *ret_ptr to
 * the bytes (no alignment), *ret_count values; read them with zr_wire_u64_at(). */
int zr_wire_get_u64s(const msgpack_object *map, const char *key, const uint8_t **ret_ptr,
                     size_t *ret_count, zr_wire_error *err);
int zr_wire_get_array(const msgpack_object *map, const char *key,
                      const msgpack_object **ret_items, uint32_t *ret_count,
                      zr_wire_error *err);
int zr_wire_get_map(const msgpack_object *map, const char *key,
                    const msgpack_object **ret, zr_wire_error *err);

/* The i-th little-endian u64 at p (no alignment needed). */
static inline uint64_t zr_wire_u64_at(const uint8_t *p, size_t i) {
        p += 8 * i;
        return (uint64_t)p[0] | (uint64_t)p[1] << 8 | (uint64_t)p[2] << 16 |
               (uint64_t)p[3] << 24 | (uint64_t)p[4] << 32 | (uint64_t)p[5] << 40 |
               (uint64_t)p[6] << 48 | (uint64_t)p[7] << 56;
}

/* The msgpack type of an object, as a word for messages ("str", "uint", ...). */
const char *zr_wire_type_name(const msgpack_object *o);

/* ---- writer ------------------------------------------------------------
 * Builds one frame: header space, then a body. Containers are opened and
 * closed; their element counts are filled in at close (they are written as
 * map32/array32, which every msgpack decoder accepts). Inside a map every put
 * takes a key; inside an array the key must be NULL. Errors are sticky: a
 * failed put (out of memory, a key where none belongs, too deep) makes
 * zr_wire_writer_finish() fail, so callers check once at the end.
 *
 *     zr_wire_writer w;
 *     zr_wire_writer_init(&w);
 *     zr_wire_writer_begin_message(&w, "ok", true, id);
 *     zr_wire_put_u64(&w, "length", n);
 *     r = zr_wire_writer_finish(&w, frame_max, &frame, &size, &err);
 *     ... send frame ...
 *     zr_wire_writer_destroy(&w);
 */
typedef struct zr_wire_writer {
        msgpack_sbuffer sbuf;
        msgpack_packer pk;
        int error; /* first failure, negative; 0 while all is well */
        unsigned depth;
        struct {
                size_t offset; /* of the container's 5-byte header in sbuf */
                uint32_t count;
                bool is_map;
        } stack[ZR_WIRE_DEPTH_MAX];
} zr_wire_writer;

void zr_wire_writer_init(zr_wire_writer *w);
/* Frees the writer's memory (a frame returned by finish dies with it). */
void zr_wire_writer_destroy(zr_wire_writer *w);
/* Empties the writer for the next frame, keeping its memory. */
void zr_wire_writer_reset(zr_wire_writer *w);

/* Opens the body map and puts "kind" and, if has_id, "id". */
void zr_wire_writer_begin_message(zr_wire_writer *w, const char *kind, bool has_id,
                                  uint64_t id);
void zr_wire_begin_map(zr_wire_writer *w, const char *key);
void zr_wire_begin_array(zr_wire_writer *w, const char *key);
void zr_wire_end(zr_wire_writer *w);

void zr_wire_put_nil(zr_wire_writer *w, const char *key);
void zr_wire_put_bool(zr_wire_writer *w, const char *key, bool v);
void zr_wire_put_u64(zr_wire_writer *w, const char *key, uint64_t v);
void zr_wire_put_i64(zr_wire_writer *w, const char *key, int64_t v);
/* Version 1 has no float field; this exists for re-encoding arbitrary bodies. */
void zr_wire_put_f64(zr_wire_writer *w, const char *key, double v);
/* A NUL-terminated string (NULL puts nil). */
void zr_wire_put_str(zr_wire_writer *w, const char *key, const char *s);
void zr_wire_put_strn(zr_wire_writer *w, const char *key, const char *s, size_t len);
void zr_wire_put_bin(zr_wire_writer *w, const char *key, const void *p, size_t len);
/* n values as a bin of little-endian u64. */
void zr_wire_put_u64s(zr_wire_writer *w, const char *key, const uint64_t *v, size_t n);
/* An array of n uints. */
void zr_wire_put_uint_array(zr_wire_writer *w, const char *key, const uint64_t *v, size_t n);
/* A decoded object o, containers and all, as the writer writes it (a body
 * re-encoded: the tests and fuzz targets check that it decodes to o again).
 * A float32 or an ext, which the writer has no put for, or a map key that is
 * not a string of 1..ZR_WIRE_KEY_MAX bytes without NUL, is a sticky -EINVAL. */
void zr_wire_put_object(zr_wire_writer *w, const char *key, const msgpack_object *o);

/* Closes the body map, which must be the only container still open (or be
 * closed already), and fills
 * in the frame header. Returns 0 and sets *ret_frame and *ret_size to the whole
 * frame (header included), owned by the writer and valid until its next reset
 * or destroy. Returns the first sticky error (-ENOMEM, -EINVAL for misuse) or
 * -ZR_E_LIMIT if the body is longer than frame_max. */
int zr_wire_writer_finish(zr_wire_writer *w, uint32_t frame_max, const uint8_t **ret_frame,
                          size_t *ret_size, zr_wire_error *err);

#endif
