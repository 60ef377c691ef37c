/* fuzz-schema.c: libFuzzer target for the schema decoder (schema.msgpack), with
 * properties:
 *   - zr_schema_decode() returns 0 or one of its documented codes (ZR_E_SCHEMA,
 *     ZR_E_BAD_CODEC, ENOMEM), always with that code and a message in err;
 *   - a decoded schema satisfies what init promises (ndim bounds, a canonical
 *     dtype, a dense item of at most ZR_RECORD_MAX bytes, a named codec);
 *   - it re-encodes to bytes that decode to the same schema, and encoding
 *     those again gives the same bytes (encode is canonical);
 *   - describing it or formatting its shape stays inside any buffer size.
 * Built as a libFuzzer binary with -Dfuzz=enabled, and as a corpus replay test
 * (replay.c) in every build. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "dataset/schema.h"
#include "fuzz.h"

static void must(int cond) {
        if (!cond)
                abort();
}

static int schema_same(const zr_schema *a, const zr_schema *b) {
        if (a->kind != b->kind || a->ndim != b->ndim || a->codec != b->codec ||
            strcmp(a->dtype.str, b->dtype.str) != 0 || a->dtype.itemsize != b->dtype.itemsize)
                return 0;
        if (a->kind == ZR_SCHEMA_DENSE)
                for (uint32_t i = 0; i < a->ndim; i++)
                        if (a->item_shape[i] != b->item_shape[i])
                                return 0;
        return 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        zr_schema s, again;
        zr_error err = {0};
        void *enc = NULL, *enc2 = NULL;
        size_t enc_len = 0, enc2_len = 0;

        int r = zr_schema_decode(data, size, &s, &err);
        if (r < 0) {
                must(r == -ZR_E_SCHEMA || r == -ZR_E_BAD_CODEC || r == -ENOMEM);
                must(err.code == -r && err.message[0] != 0);
                must(memchr(err.message, 0, sizeof(err.message)) != NULL);
                return 0;
        }
        must(err.code == 0);
        must(s.kind == ZR_SCHEMA_DENSE || s.kind == ZR_SCHEMA_RAGGED);
        must(zr_codec_name(s.codec) != NULL);
        must(s.ndim <= ZR_SCHEMA_NDIM_MAX);
        must(memchr(s.dtype.str, 0, sizeof(s.dtype.str)) != NULL);
        must(s.kind != ZR_SCHEMA_DENSE || zr_schema_item_bytes(&s) <= ZR_RECORD_MAX);

        /* the init functions accept what decode accepted */
        zr_schema built;
        if (s.kind == ZR_SCHEMA_DENSE)
                must(zr_schema_init_dense(&built, s.dtype.str, s.item_shape, s.ndim, s.codec,
                                          NULL) == 0);
        else
                must(zr_schema_init_ragged(&built, s.dtype.str, s.ndim, s.codec, NULL) == 0);
        must(schema_same(&built, &s));

        /* round trip, and encode is canonical */
        must(zr_schema_encode(&s, &enc, &enc_len, NULL) == 0);
        must(zr_schema_decode(enc, enc_len, &again, NULL) == 0);
        must(schema_same(&s, &again));
        must(zr_schema_encode(&again, &enc2, &enc2_len, NULL) == 0);
        must(enc_len == enc2_len && memcmp(enc, enc2, enc_len) == 0);
        free(enc);
        free(enc2);

        /* formatting never leaves its buffer (ASan sees an overrun: exact sizes) */
        static const size_t sizes[] = { 1, 2, 7, 16, 64, 512 };
        for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
                char *buf = malloc(sizes[i]);
                must(buf != NULL);
                zr_schema_describe(&s, buf, sizes[i]);
                must(memchr(buf, 0, sizes[i]) != NULL);
                zr_shape_format(s.item_shape, s.kind == ZR_SCHEMA_DENSE ? s.ndim : 0, buf, sizes[i]);
                must(memchr(buf, 0, sizes[i]) != NULL);
                free(buf);
        }
        return 0;
}
