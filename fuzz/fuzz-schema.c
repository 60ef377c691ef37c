/* fuzz-schema.c: libFuzzer target for the schema decoders (schema.msgpack):
 * zrecord's (schema.h) and loaderx 1.5.7's ragged one (lxschema.h), each given
 * the same bytes, with properties:
 *   - zr_schema_decode() returns 0 or one of its documented codes (ZR_E_SCHEMA,
 *     ZR_E_BAD_CODEC, ENOMEM), always with that code and a message in err;
 *   - a decoded schema satisfies what init promises (ndim bounds, a canonical
 *     dtype, a dense item of at most ZR_RECORD_MAX bytes, a named codec);
 *   - it re-encodes to bytes that decode to the same schema, and encoding
 *     those again gives the same bytes (encode is canonical);
 *   - describing it or formatting its shape stays inside any buffer size;
 *   - zr_lxschema_decode() returns 0 or ZR_E_SCHEMA, ZR_E_BAD_CODEC, ENOMEM with a
 *     message; a decoded loaderx schema has shapes of 1..32 dims of at most
 *     ZR_RECORD_MAX bytes each, a pending delete of at least one entry, and
 *     re-encodes to bytes that decode to the same shapes, note and caller's keys,
 *     encoded again to the same bytes; zr_lxschema_sniff() (which routes a store
 *     to this decoder) says yes to every file it decodes and to every encoding.
 * Built as a libFuzzer binary with -Dfuzz=enabled, and as a corpus replay test
 * (replay.c) in every build. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "dataset/lxschema.h"
#include "dataset/schema.h"
#include "fuzz.h"
#include "store/store.h"

static void must(int cond) {
        if (!cond)
                abort();
}

/* An encoding and the encoding of what it decodes to are the same bytes (encode
 * is canonical); both are freed. */
static void canonical(void *enc, size_t len, void *enc2, size_t len2) {
        must(len == len2 && memcmp(enc, enc2, len) == 0);
        free(enc);
        free(enc2);
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

static int lx_same(const zr_lxschema *a, const zr_lxschema *b) {
        uint64_t n = zr_shapes_count(a->shapes);

        if (n != zr_shapes_count(b->shapes) || a->codec != b->codec ||
            strcmp(a->dtype.str, b->dtype.str) != 0 || a->npending != b->npending ||
            a->extra_count != b->extra_count || a->extra_len != b->extra_len ||
            (a->extra_len && memcmp(a->extra, b->extra, a->extra_len) != 0) ||
            (a->npending && memcmp(a->pending, b->pending, a->npending * 8) != 0))
                return 0;
        for (uint64_t i = 0; i < n; i++) {
                const uint64_t *da, *db;
                uint32_t na, nb;
                must(zr_shapes_get(a->shapes, i, &na, &da, NULL) == 0);
                must(zr_shapes_get(b->shapes, i, &nb, &db, NULL) == 0);
                if (na != nb || memcmp(da, db, na * sizeof(*da)) != 0)
                        return 0;
        }
        return 1;
}

/* loaderx 1.5.7's ragged schema decoder on the same bytes. */
static void fuzz_lx(const uint8_t *data, size_t size) {
        zr_lxschema s = {0}, again = {0};
        zr_error err = {0};
        void *enc = NULL, *enc2 = NULL;
        size_t enc_len = 0, enc2_len = 0;
        int sniffed = zr_lxschema_sniff(data, size);
        int r = zr_lxschema_decode(data, size, &s, &err);

        must(sniffed == 0 || sniffed == 1);
        if (r < 0) {
                must(r == -ZR_E_SCHEMA || r == -ZR_E_BAD_CODEC || r == -ENOMEM);
                must(err.code == -r && err.message[0] != 0);
                must(memchr(err.message, 0, sizeof(err.message)) != NULL);
                return;
        }
        must(sniffed == 1);
        must(zr_codec_name(s.codec) != NULL);
        must(s.npending == 0 || (s.pending && s.npending >= 1));
        for (uint64_t i = 0; i < zr_shapes_count(s.shapes); i++) {
                const uint64_t *dims;
                uint32_t nd;
                uint64_t bytes = s.dtype.itemsize;
                must(zr_shapes_get(s.shapes, i, &nd, &dims, NULL) == 0);
                must(nd >= 1 && nd <= ZR_SCHEMA_NDIM_MAX);
                for (uint32_t k = 0; k < nd; k++)
                        must(!__builtin_mul_overflow(bytes, dims[k], &bytes));
                must(bytes <= ZR_RECORD_MAX);
        }
        must(zr_lxschema_encode(&s, &enc, &enc_len, NULL) == 0);
        must(zr_lxschema_sniff(enc, enc_len) == 1);
        must(zr_lxschema_decode(enc, enc_len, &again, NULL) == 0);
        must(lx_same(&s, &again));
        must(zr_lxschema_encode(&again, &enc2, &enc2_len, NULL) == 0);
        canonical(enc, enc_len, enc2, enc2_len);
        zr_lxschema_done(&again);
        zr_lxschema_done(&s);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        zr_schema s, again;
        zr_error err = {0};
        void *enc = NULL, *enc2 = NULL;
        size_t enc_len = 0, enc2_len = 0;

        fuzz_lx(data, size);
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
        canonical(enc, enc_len, enc2, enc2_len);

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
