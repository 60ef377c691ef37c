/* fuzz-body.c: libFuzzer target for the body codec alone, with properties:
 *   - whatever zr_wire_scan() accepts, msgpack-c unpacks completely (the scan is
 *     never more permissive than the unpacker it guards);
 *   - a decoded body re-encoded with zr_wire_writer decodes to an equal object
 *     (the writer and the decoder agree on every type);
 *   - the scan with tighter limits never accepts what the default refuses.
 * Built as a libFuzzer binary with -Dfuzz=enabled, and as a corpus replay test
 * (replay.c) in every build. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "wire.h"

static void must(bool cond) {
        if (!cond)
                abort();
}

/* Structural equality with floats compared bit for bit (msgpack_object_equal()
 * compares them as numbers, and a NaN is not equal to itself). */
static bool same(const msgpack_object *a, const msgpack_object *b) {
        if (a->type != b->type)
                return false;
        switch (a->type) {
        case MSGPACK_OBJECT_FLOAT32:
        case MSGPACK_OBJECT_FLOAT64:
                return memcmp(&a->via.f64, &b->via.f64, sizeof(double)) == 0;
        case MSGPACK_OBJECT_ARRAY:
                if (a->via.array.size != b->via.array.size)
                        return false;
                for (uint32_t i = 0; i < a->via.array.size; i++)
                        if (!same(&a->via.array.ptr[i], &b->via.array.ptr[i]))
                                return false;
                return true;
        case MSGPACK_OBJECT_MAP:
                if (a->via.map.size != b->via.map.size)
                        return false;
                for (uint32_t i = 0; i < a->via.map.size; i++)
                        if (!same(&a->via.map.ptr[i].key, &b->via.map.ptr[i].key) ||
                            !same(&a->via.map.ptr[i].val, &b->via.map.ptr[i].val))
                                return false;
                return true;
        default:
                return msgpack_object_equal(*a, *b);
        }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        zr_wire_limits tight = { .depth_max = 3, .objects_max = 16, .map_keys_max = 4 };
        zr_wire_error err = {0};
        zr_wire_body *body = NULL, *again = NULL;
        size_t objects = 0;
        int r;

        r = zr_wire_scan(data, size, NULL, &objects, &err);
        if (r < 0) {
                must(err.code == -r && err.message[0]);
                must(zr_wire_scan(data, size, &tight, NULL, NULL) < 0);
                return 0;
        }
        must(objects >= 1 && objects <= size && objects <= ZR_WIRE_OBJECTS_MAX);

        memset(&err, 0, sizeof(err));
        r = zr_wire_body_decode(data, size, NULL, &body, &err);
        if (r < 0) {
                /* refused for its shape (not a map, keys), never because
                 * msgpack-c disagreed with the scan */
                must(r == -ZR_E_PROTO && !strstr(err.message, "does not unpack"));
                return 0;
        }

        {
                zr_wire_writer w;
                const uint8_t *frame;
                size_t fsize;

                zr_wire_writer_init(&w);
                /* refused only for what the writer does not produce (float32,
                 * ext, keys it would not write) */
                zr_wire_put_object(&w, NULL, zr_wire_body_root(body));
                if (zr_wire_writer_finish(&w, UINT32_MAX, &frame, &fsize, NULL) == 0) {
                        /* map32 headers may make it longer than the input, but
                         * never more than 4 bytes per container plus the header */
                        must(zr_wire_frame_decode(frame, fsize, UINT32_MAX, NULL, &again,
                                                  NULL) == 0);
                        must(same(zr_wire_body_root(body), zr_wire_body_root(again)));
                        zr_wire_body_free(again);
                }
                zr_wire_writer_destroy(&w);
        }
        zr_wire_body_free(body);
        return 0;
}
