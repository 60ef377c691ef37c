/* test-vectors.c: every frame of proto/vectors/frames/ is accepted or refused as
 * its MANIFEST says, and every accepted message survives a round trip through
 * the writer (decode, re-encode with zr_wire_writer, decode, compare, validate).
 * The vectors are encoded by an independent encoder (Python's msgpack), so this
 * also checks that the C codec reads what other implementations write. */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check-run.h"
#include "message.h"
#include "wire.h"

/* More than the MANIFEST holds; a new vector beyond it fails loudly. */
#define VECTORS_MAX 512

static char *read_file(const char *path, size_t *ret_size) {
        FILE *f = fopen(path, "rbe");
        char *data = NULL;
        long n;

        ck_assert_msg(f != NULL, "cannot open %s", path);
        ck_assert_int_eq(fseek(f, 0, SEEK_END), 0);
        n = ftell(f);
        ck_assert_int_ge(n, 0);
        rewind(f);
        data = malloc((size_t)n + 1);
        ck_assert_ptr_nonnull(data);
        ck_assert_uint_eq(fread(data, 1, (size_t)n, f), (size_t)n);
        fclose(f);
        *ret_size = (size_t)n;
        return data;
}

static const char *vectors_dir(void) {
        const char *d = getenv("ZR_VECTORS");
        ck_assert_msg(d != NULL, "ZR_VECTORS is not set");
        return d;
}

static void round_trip(const char *file, const msgpack_object *root, zr_msg_kind context) {
        zr_wire_writer w;
        zr_wire_error err = {0};
        zr_wire_body *b = NULL;
        zr_msg_header h;
        const uint8_t *frame;
        size_t size;

        zr_wire_writer_init(&w);
        zr_wire_put_object(&w, NULL, root);
        ck_assert_msg(zr_wire_writer_finish(&w, ZR_FRAME_MAX_DEFAULT, &frame, &size, &err) == 0,
                      "%s: cannot re-encode: %s", file, err.message);
        ck_assert_msg(zr_wire_frame_decode(frame, size, ZR_FRAME_MAX_DEFAULT, NULL, &b, &err) == 0,
                      "%s: re-encoded frame refused: %s", file, err.message);
        ck_assert_msg(msgpack_object_equal(*root, *zr_wire_body_root(b)),
                      "%s: round trip changed the message", file);
        ck_assert_msg(zr_msg_check(zr_wire_body_root(b), context, &h, &err) == 0,
                      "%s: re-encoded message refused: %s", file, err.message);
        zr_wire_body_free(b);
        zr_wire_writer_destroy(&w);
}

START_TEST(test_manifest) {
        char path[4096], line[1024];
        const char *dir = vectors_dir();
        unsigned accepted = 0, rejected = 0;
        bool kinds_seen[_ZR_MSG_MAX] = { false };
        FILE *m;

        snprintf(path, sizeof(path), "%s/frames/MANIFEST", dir);
        m = fopen(path, "re");
        ck_assert_msg(m != NULL, "cannot open %s", path);

        while (fgets(line, sizeof(line), m)) {
                char file[256], verdict[16], expect[64], context[64];
                zr_wire_error err = {0};
                zr_wire_body *b = NULL;
                zr_msg_kind ctx = ZR_MSG_INVALID;
                zr_msg_header h = {0};
                size_t size;
                char *data;
                int r;

                if (line[0] == '#' || line[0] == '\n')
                        continue;
                ck_assert_int_eq(sscanf(line, "%255s %15s %63s %63s", file, verdict, expect,
                                        context), 4);
                if (strcmp(context, "-") != 0) {
                        ctx = zr_msg_kind_from_name(context, strlen(context));
                        ck_assert_msg(ctx != ZR_MSG_INVALID, "%s: bad context %s", file, context);
                }
                snprintf(path, sizeof(path), "%s/frames/%s", dir, file);
                data = read_file(path, &size);

                r = zr_wire_frame_decode(data, size, ZR_FRAME_MAX_DEFAULT, NULL, &b, &err);
                if (r == 0)
                        r = zr_msg_check(zr_wire_body_root(b), ctx, &h, &err);

                if (strcmp(verdict, "accept") == 0) {
                        ck_assert_msg(r == 0, "%s: refused: %s", file, err.message);
                        ck_assert_str_eq(zr_msg_kind_name(h.kind), expect);
                        kinds_seen[h.kind] = true;
                        round_trip(file, zr_wire_body_root(b), ctx);
                        accepted++;
                } else {
                        ck_assert_str_eq(verdict, "reject");
                        ck_assert_msg(r < 0, "%s: accepted", file);
                        ck_assert_msg(zr_error_name(r) && strcmp(zr_error_name(r), expect) == 0,
                                      "%s: refused with %s, expected %s (%s)", file,
                                      zr_error_name(r), expect, err.message);
                        ck_assert_int_gt(strlen(err.message), 0);
                        rejected++;
                }
                zr_wire_body_free(b);
                free(data);
        }
        fclose(m);

        /* the vectors cover every kind, and plenty of refusals */
        for (int k = ZR_MSG_INVALID + 1; k < _ZR_MSG_MAX; k++)
                ck_assert_msg(kinds_seen[k], "no accepted vector of kind %s",
                              zr_msg_kind_name((zr_msg_kind)k));
        ck_assert_uint_ge(accepted, 50);
        ck_assert_uint_ge(rejected, 50);
        ck_assert_uint_le(accepted + rejected, VECTORS_MAX);
}
END_TEST

int main(void) {
        Suite *s = suite_create("vectors");
        TL_TCASE(s, "core", 0, test_manifest);
        return tl_run_suite(s);
}
