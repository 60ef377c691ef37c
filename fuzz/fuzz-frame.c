/* fuzz-frame.c: libFuzzer target for one frame as it arrives from a peer: the
 * header against the default frame_max, the bounded body decoder, the message
 * validator (as a request, and as an "ok" to every request kind), the
 * descriptor count of a request, and the typed getters on every top-level key.
 * Anything may be refused; nothing may crash, leak, read out of bounds or
 * report an error without a message. Built as a libFuzzer binary with
 * -Dfuzz=enabled, and as a corpus replay test (replay.c) in every build. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "message.h"
#include "wire.h"

static void must(bool cond) {
        if (!cond)
                abort();
}

/* An error was reported: it has a positive code and a message. */
static void check_error(int r, const zr_wire_error *err) {
        must(r < 0);
        must(err->code == -r);
        must(err->message[0] != 0);
}

static void poke_getters(const msgpack_object *map) {
        for (uint32_t i = 0; i < map->via.map.size; i++) {
                const msgpack_object *k = &map->via.map.ptr[i].key;
                char key[ZR_WIRE_KEY_MAX + 1], s[64];
                const msgpack_object *items;
                const uint8_t *u8;
                const char *str;
                const void *p;
                uint64_t u, sum = 0;
                uint32_t n;
                int64_t i64;
                size_t len;
                bool b;

                /* decode guarantees str keys of at most ZR_WIRE_KEY_MAX bytes */
                must(k->type == MSGPACK_OBJECT_STR && k->via.str.size <= ZR_WIRE_KEY_MAX);
                memcpy(key, k->via.str.ptr, k->via.str.size);
                key[k->via.str.size] = 0;
                if (strlen(key) != k->via.str.size)
                        continue; /* a key with a NUL byte cannot be asked for */
                must(zr_wire_find(map, key) == &map->via.map.ptr[i].val);

                (void)zr_wire_get_u64(map, key, &u, NULL);
                (void)zr_wire_get_u32(map, key, &n, NULL);
                (void)zr_wire_get_i64(map, key, &i64, NULL);
                (void)zr_wire_get_bool(map, key, &b, NULL);
                (void)zr_wire_get_str(map, key, &str, &len, NULL);
                (void)zr_wire_get_str_copy(map, key, s, sizeof(s), NULL);
                (void)zr_wire_get_bin(map, key, &p, &len, NULL);
                if (zr_wire_get_u64s(map, key, &u8, &len, NULL) == 0)
                        for (size_t j = 0; j < len; j++)
                                sum += zr_wire_u64_at(u8, j);
                if (zr_wire_get_array(map, key, &items, &n, NULL) == 0)
                        for (uint32_t j = 0; j < n; j++)
                                if (items[j].type == MSGPACK_OBJECT_MAP)
                                        poke_getters(&items[j]);
                if (zr_wire_get_map(map, key, &items, NULL) == 0)
                        poke_getters(items);
                (void)sum;
        }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        zr_wire_error err = {0};
        zr_wire_body *body = NULL;
        const msgpack_object *root;
        zr_msg_header h;
        int r;

        r = zr_wire_frame_decode(data, size, ZR_FRAME_MAX_DEFAULT, NULL, &body, &err);
        if (r < 0) {
                check_error(r, &err);
                /* the only errors a frame can get */
                must(r == -ZR_E_PROTO || r == -ZR_E_LIMIT);
                must(!body);
                return 0;
        }
        root = zr_wire_body_root(body);
        must(root->type == MSGPACK_OBJECT_MAP);

        memset(&err, 0, sizeof(err));
        r = zr_msg_check(root, ZR_MSG_INVALID, &h, &err);
        if (r < 0) {
                check_error(r, &err);
                must(r == -ZR_E_PROTO || r == -ZR_E_UNKNOWN);
        } else if (zr_msg_kind_is_request(h.kind)) {
                unsigned fds = 0;
                memset(&err, 0, sizeof(err));
                r = zr_msg_request_fds(h.kind, root, &fds, &err);
                if (r < 0)
                        check_error(r, &err);
                else
                        must(fds <= ZR_FDS_PER_FRAME_MAX);
        } else if (h.kind == ZR_MSG_OK) {
                for (int k = ZR_MSG_FIRST_REQUEST; k <= ZR_MSG_LAST_REQUEST; k++) {
                        memset(&err, 0, sizeof(err));
                        r = zr_msg_check(root, (zr_msg_kind)k, NULL, &err);
                        if (r < 0)
                                check_error(r, &err);
                }
        }
        poke_getters(root);
        zr_wire_body_free(body);
        return 0;
}
