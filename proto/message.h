/* message.h: the message set of the zrecord protocol as data, and its validator.
 *
 * Every message kind of proto/PROTOCOL.md is described here by a table of its
 * fields (name, msgpack type, required or not), for requests, for the "ok"
 * reply to each request, for "error" and for each event. zr_msg_check()
 * validates a decoded body against the table of its kind, so a daemon or a
 * client can rely on every known field having the documented type before it
 * reads it with the getters of wire.h. Unknown fields are ignored, as the
 * protocol requires. Rules that span fields or need state (dense against
 * ragged fields, handle numbers, store lengths) are the daemon's business.
 *
 * zr_msg_request_fds() and zr_msg_reply_fds() say how many descriptors must
 * arrive with a message, so a receiver can refuse (and close) the wrong number
 * before it acts on anything.
 */
#ifndef ZR_PROTO_MESSAGE_H
#define ZR_PROTO_MESSAGE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "wire.h"

/* The wire name of a kind ("hello"), or NULL for ZR_MSG_INVALID or out of range. */
const char *zr_msg_kind_name(zr_msg_kind kind);

/* The kind named by name[0..len), or ZR_MSG_INVALID. */
zr_msg_kind zr_msg_kind_from_name(const char *name, size_t len);

/* True for the kinds a client sends (HELLO .. LOADER_CLOSE). */
bool zr_msg_kind_is_request(zr_msg_kind kind);
/* True for the requests that need a feature from HELLO; *ret_feature (may be
 * NULL) is set to its name. */
bool zr_msg_kind_feature(zr_msg_kind kind, const char **ret_feature);

typedef struct zr_msg_header {
        zr_msg_kind kind; /* ZR_MSG_INVALID if the name is unknown */
        bool has_id;
        uint64_t id;
} zr_msg_header;

/* Reads "kind" and "id" of a body's root map into *ret (always written, so a
 * daemon can echo the id of a request it refuses). Returns 0, or -ZR_E_PROTO
 * (kind missing or not a str; id present but not an unsigned integer), or
 * -ZR_E_UNKNOWN (a kind name this build does not know). */
int zr_msg_header_read(const msgpack_object *root, zr_msg_header *ret, zr_wire_error *err);

/* Validates a body's root map as a whole message: its header, then every field
 * its kind defines. Requests must carry an id (except RELEASE); replies ("ok",
 * "error") must carry one; events must not. For an "ok" reply, reply_to names
 * the request it answers (ZR_MSG_INVALID: check the header only). *ret (may be
 * NULL) receives the header even when validation fails after it. Returns 0,
 * -ZR_E_UNKNOWN for an unknown kind, or -ZR_E_PROTO naming the first bad field. */
int zr_msg_check(const msgpack_object *root, zr_msg_kind reply_to, zr_msg_header *ret,
                 zr_wire_error *err);

/* The number of descriptors that must arrive with a valid request of `kind`
 * whose body is `root` (zr_msg_check() has passed). Returns 0 and sets *ret, or
 * -ZR_E_PROTO if the body is not a valid request. */
int zr_msg_request_fds(zr_msg_kind kind, const msgpack_object *root, unsigned *ret,
                       zr_wire_error *err);

/* The number of descriptors an "ok" reply to `request` carries (0 or 1). */
unsigned zr_msg_reply_fds(zr_msg_kind request);

/* The i-th field (from 0) of a table: the fields of request or event `kind`
 * (reply false), or those of the "ok" reply to request `kind` (reply true).
 * Sets *ret_name, *ret_type (the type as PROTOCOL.md writes it: "uint", "u32",
 * "bool", "str", "bin", "u64s", "[uint]", "[str]", "map", "[map]") and
 * *ret_required; any of them may be NULL. Returns false past the last field or
 * when the kind has no such table. For tools, and for the test that keeps
 * PROTOCOL.md and these tables in step. */
bool zr_msg_field_at(zr_msg_kind kind, bool reply, size_t i, const char **ret_name,
                     const char **ret_type, bool *ret_required);

/* Writes a whole "error" reply (fault false: with `id`) or FAULT event (fault
 * true: `id` ignored) into w, which must be freshly initialised or reset:
 * "code" (code may be given negated), "name" when zr_error_name() knows the code,
 * and "message" (NULL: the name). Callers add "needed" or "index" with the
 * zr_wire_put_*() calls before zr_wire_writer_finish(). */
void zr_msg_write_error(zr_wire_writer *w, bool fault, uint64_t id, int code,
                        const char *message);

#endif
