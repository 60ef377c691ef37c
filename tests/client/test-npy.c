/* test-npy.c: the .npy header parser of the zrecord tool, on good and bad
 * headers built byte by byte (no numpy needed). */
#include <check.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "check-run.h"
#include "npy.h"

/* Builds a .npy header of format `major`.0 around `dict`, padded as numpy pads
 * (spaces and a final newline, total a multiple of 64). Returns its size. */
static size_t build(uint8_t *out, size_t cap, unsigned major, const char *dict) {
        size_t pre = major == 1 ? 10 : 12, dlen = strlen(dict);
        size_t total = (pre + dlen + 1 + 63) / 64 * 64, hlen = total - pre;

        ck_assert_uint_le(total, cap);
        memcpy(out, "\x93NUMPY", 6);
        out[6] = (uint8_t)major;
        out[7] = 0;
        if (major == 1) {
                out[8] = hlen & 0xff;
                out[9] = (hlen >> 8) & 0xff;
        } else {
                out[8] = hlen & 0xff;
                out[9] = (hlen >> 8) & 0xff;
                out[10] = (hlen >> 16) & 0xff;
                out[11] = (hlen >> 24) & 0xff;
        }
        memcpy(out + pre, dict, dlen);
        memset(out + pre + dlen, ' ', hlen - dlen - 1);
        out[total - 1] = '\n';
        return total;
}

static int parse(unsigned major, const char *dict, npy_header *h, char *err) {
        uint8_t buf[4096];
        size_t n = build(buf, sizeof(buf), major, dict);

        return npy_header_parse(buf, n, h, err, 256);
}

START_TEST(test_good_v1) {
        npy_header h;
        char err[256] = "";
        uint64_t size;
        uint8_t buf[256];
        size_t n = build(buf, sizeof(buf), 1,
                         "{'descr': '<f4', 'fortran_order': False, 'shape': (60000, 28, 28), }");

        ck_assert_int_eq(npy_header_size(buf, 10, &size, err, sizeof(err)), 0);
        ck_assert_uint_eq(size, n);
        ck_assert_int_eq(npy_header_parse(buf, n, &h, err, sizeof(err)), 0);
        ck_assert_str_eq(h.descr, "<f4");
        ck_assert(!h.fortran_order);
        ck_assert_uint_eq(h.ndim, 3);
        ck_assert_uint_eq(h.shape[0], 60000);
        ck_assert_uint_eq(h.shape[2], 28);
        ck_assert_uint_eq(h.records, 60000);
        ck_assert_uint_eq(h.itemsize, 4);
        ck_assert_uint_eq(h.record_bytes, 28 * 28 * 4);
        ck_assert_uint_eq(h.data_bytes, UINT64_C(60000) * 28 * 28 * 4);
        ck_assert_uint_eq(h.data_offset, n);
        ck_assert_uint_eq(h.data_offset % 64, 0);
}
END_TEST

START_TEST(test_good_variants) {
        npy_header h;
        char err[256];

        /* version 2.0 and 3.0, double quotes, no trailing comma, key order */
        ck_assert_int_eq(parse(2, "{\"shape\": (5,), \"fortran_order\": False, \"descr\": \"|u1\"}",
                               &h, err), 0);
        ck_assert_uint_eq(h.major, 2);
        ck_assert_uint_eq(h.ndim, 1);
        ck_assert_uint_eq(h.records, 5);
        ck_assert_uint_eq(h.record_bytes, 1);
        ck_assert_uint_eq(h.data_offset % 64, 0);
        ck_assert_int_eq(parse(3, "{'descr': '>i8', 'fortran_order': False, 'shape': (3, 2)}", &h,
                               err), 0);
        ck_assert_str_eq(h.descr, ">i8");
        ck_assert_uint_eq(h.record_bytes, 16);
        /* Python 2 longs, a zero-length axis, bool and complex and half */
        ck_assert_int_eq(parse(1, "{'descr': '|b1', 'fortran_order': False, 'shape': (7L, 0L), }",
                               &h, err), 0);
        ck_assert_uint_eq(h.records, 7);
        ck_assert_uint_eq(h.record_bytes, 0);
        ck_assert_int_eq(parse(1, "{'descr': '<c16', 'fortran_order': False, 'shape': (2,), }",
                               &h, err), 0);
        ck_assert_uint_eq(h.itemsize, 16);
        ck_assert_int_eq(parse(1, "{'descr': '<f2', 'fortran_order': False, 'shape': (0, 4), }",
                               &h, err), 0);
        ck_assert_uint_eq(h.records, 0);
        ck_assert_uint_eq(h.data_bytes, 0);
}
END_TEST

static void expect_bad(unsigned major, const char *dict, const char *needle) {
        npy_header h;
        char err[256] = "";

        ck_assert_int_eq(parse(major, dict, &h, err), -EINVAL);
        ck_assert_msg(strstr(err, needle), "error \"%s\" lacks \"%s\"", err, needle);
}

START_TEST(test_bad_headers) {
        static const struct {
                const char *dict, *needle;
        } bad[] = {
                { "{'descr': '<f4', 'fortran_order': True, 'shape': (3, 4), }", "Fortran" },
                { "{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (3,), }",
                  "structured" },
                { "{'descr': '<U5', 'fortran_order': False, 'shape': (3,), }", "not supported" },
                { "{'descr': '|O', 'fortran_order': False, 'shape': (3,), }", "not supported" },
                { "{'descr': '<f4', 'fortran_order': False, 'shape': (), }", "0-d" },
                { "{'descr': '<f4', 'fortran_order': False, }", "lacks shape" },
                { "{'descr': '<f4', 'shape': (3,), }", "lacks fortran_order" },
                { "{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (3,)}",
                  "repeated" },
                { "{'descr': '<f4', 'fortran_order': False, 'shape': (3,), 'x': 1}",
                  "unexpected" },
                { "{'descr': '<f4', 'fortran_order': False, 'shape': (3)}", "not a tuple" },
                { "{'descr': '<f4', 'fortran_order': False, 'shape': (3, -1)}", "dimension" },
                { "{'descr': '<f4', 'fortran_order': Maybe, 'shape': (3,)}", "fortran_order" },
                { "{'descr': '<f4', 'fortran_order': False, 'shape': (3,)} x", "after" },
                { "['descr']", "not a dict" },
                { "{'descr': '<f4', 'fortran_order': False, 'shape': "
                  "(4294967296, 4294967296, 4294967296)}", "overflow" },
        };

        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
                expect_bad(1, bad[i].dict, bad[i].needle);
}
END_TEST

START_TEST(test_bad_preamble) {
        uint8_t buf[256];
        char err[256] = "";
        uint64_t size;
        npy_header h;
        size_t n = build(buf, sizeof(buf), 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (3,)}");

        /* too short to tell */
        ck_assert_int_eq(npy_header_size(buf, 4, &size, err, sizeof(err)), -EAGAIN);
        /* bad magic */
        buf[1] = 'X';
        ck_assert_int_eq(npy_header_size(buf, n, &size, err, sizeof(err)), -EINVAL);
        ck_assert(strstr(err, "magic"));
        buf[1] = 'N';
        /* unknown version */
        buf[6] = 4;
        ck_assert_int_eq(npy_header_size(buf, n, &size, err, sizeof(err)), -EINVAL);
        ck_assert(strstr(err, "version"));
        buf[6] = 1;
        /* a header cut short */
        ck_assert_int_eq(npy_header_parse(buf, n - 10, &h, err, sizeof(err)), -EINVAL);
        ck_assert(strstr(err, "truncated"));
        /* a huge declared header (v2: 4 GiB) */
        buf[6] = 2;
        buf[8] = buf[9] = buf[10] = buf[11] = 0xff;
        ck_assert_int_eq(npy_header_size(buf, 12, &size, err, sizeof(err)), -EINVAL);
        ck_assert(strstr(err, "too large"));
}
END_TEST

int main(void) {
        Suite *s = suite_create("npy");
        TL_TCASE(s, "header", 0, test_good_v1, test_good_variants, test_bad_headers,
                 test_bad_preamble);
        return tl_run_suite(s);
}
