/* dtype.c: parsing numpy dtype strings into zr_dtype. See dtype.h for the accepted
 * set. Pure functions: no allocation, no I/O. It knows nothing of shapes. */
#include "dataset/dtype.h"

#include <stdio.h>
#include <string.h>

static int dtype_size_ok(char kind, uint32_t size) {
        switch (kind) {
        case 'b':
                return size == 1;
        case 'i':
        case 'u':
                return size == 1 || size == 2 || size == 4 || size == 8;
        case 'f':
                return size == 2 || size == 4 || size == 8;
        case 'c':
                return size == 8 || size == 16;
        default:
                return 0;
        }
}

int zr_dtype_parse_n(const char *s, size_t len, zr_dtype *ret, zr_error *err) {
        char shown[ZR_DTYPE_STR_MAX * 2];
        size_t i = 0;
        char order = '=';
        uint32_t size = 0;

        /* A printable copy for messages; long input is cut, never read past len. */
        size_t n = len < sizeof(shown) - 1 ? len : sizeof(shown) - 1;
        for (size_t k = 0; k < n; k++)
                shown[k] = (s[k] >= 0x20 && s[k] < 0x7f) ? s[k] : '?';
        shown[n] = '\0';

        if (len == 0 || len >= ZR_DTYPE_STR_MAX)
                return zr_error_set(err, ZR_E_SCHEMA, "dtype \"%s\": not a dtype string "
                                    "(expected e.g. \"<f4\", \"|u1\", \"|b1\")", shown);
        if (s[0] == '<' || s[0] == '>' || s[0] == '|' || s[0] == '=') {
                order = s[0];
                i = 1;
        }
        if (i >= len)
                return zr_error_set(err, ZR_E_SCHEMA, "dtype \"%s\": no kind letter", shown);
        char kind = s[i++];
        if (!strchr("biufc", kind) || kind == '\0')
                return zr_error_set(err, ZR_E_SCHEMA, "dtype \"%s\": kind '%c' is not "
                                    "supported (b, i, u, f, c are)", shown,
                                    (kind >= 0x20 && kind < 0x7f) ? kind : '?');
        if (i >= len)
                return zr_error_set(err, ZR_E_SCHEMA, "dtype \"%s\": no item size", shown);
        for (; i < len; i++) {
                if (s[i] < '0' || s[i] > '9')
                        return zr_error_set(err, ZR_E_SCHEMA, "dtype \"%s\": item size "
                                            "is not a number", shown);
                size = size * 10 + (uint32_t)(s[i] - '0'); /* len < 8: no overflow */
        }
        if (!dtype_size_ok(kind, size))
                return zr_error_set(err, ZR_E_SCHEMA, "dtype \"%s\": %c%u is not a "
                                    "supported item size", shown, kind, size);
        if (size == 1)
                order = '|';
        else if (order == '|')
                return zr_error_set(err, ZR_E_SCHEMA, "dtype \"%s\": byte order '|' on a "
                                    "%u-byte type (use '<' or '>')", shown, size);
        else if (order == '=')
                order = __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__ ? '<' : '>';

        ret->order = order;
        ret->kind = kind;
        ret->itemsize = size;
        snprintf(ret->str, sizeof(ret->str), "%c%c%u", order, kind, size);
        return 0;
}

int zr_dtype_parse(const char *s, zr_dtype *ret, zr_error *err) {
        return zr_dtype_parse_n(s, strlen(s), ret, err);
}

int zr_dtype_equal(const zr_dtype *a, const zr_dtype *b) {
        return strcmp(a->str, b->str) == 0;
}
