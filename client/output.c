/* output.c: values as the zrecord tool prints them.
 *
 * Elements are decoded from their stored byte order (the daemon never swaps
 * bytes, so a ">f4" dataset holds big-endian floats) and printed in the
 * shortest form that reads back exactly (%.9g for float32, %.17g for float64;
 * float16 is widened to float first). JSON output stays valid JSON: non-finite
 * floats become strings.
 */
#include <errno.h>
#include <math.h>
#include <string.h>

#include "output.h"

int out_dtype_parse(const char *s, out_dtype *ret) {
        out_dtype d = { .order = '<' };
        unsigned size = 0;

        if (!s || !*s)
                return -EINVAL;
        if (*s == '<' || *s == '>' || *s == '|' || *s == '=')
                d.order = *s == '=' ? '<' : *s, s++;
        if (!*s || !strchr("biufc", *s))
                return -EINVAL;
        d.kind = *s++;
        if (!*s)
                return -EINVAL;
        for (; *s; s++) {
                if (*s < '0' || *s > '9' || size > 64)
                        return -EINVAL;
                size = size * 10 + (unsigned)(*s - '0');
        }
        switch (d.kind) {
        case 'b': if (size != 1) return -EINVAL; break;
        case 'i': case 'u': if (size != 1 && size != 2 && size != 4 && size != 8) return -EINVAL; break;
        case 'f': if (size != 2 && size != 4 && size != 8) return -EINVAL; break;
        case 'c': if (size != 8 && size != 16) return -EINVAL; break;
        }
        d.itemsize = size;
        *ret = d;
        return 0;
}

void out_json_string(FILE *f, const char *s) {
        fputc('"', f);
        for (; *s; s++) {
                unsigned char ch = (unsigned char)*s;

                if (ch == '"' || ch == '\\')
                        fprintf(f, "\\%c", ch);
                else if (ch == '\n')
                        fputs("\\n", f);
                else if (ch == '\t')
                        fputs("\\t", f);
                else if (ch < 0x20)
                        fprintf(f, "\\u%04x", ch);
                else
                        fputc(ch, f);
        }
        fputc('"', f);
}

/* Reads an unsigned integer of n bytes in the given byte order. */
static uint64_t load(const uint8_t *p, unsigned n, char order) {
        uint64_t v = 0;

        for (unsigned i = 0; i < n; i++) {
                unsigned k = order == '>' ? i : n - 1 - i;

                v = v << 8 | p[k];
        }
        return v;
}

static double half_to_double(uint16_t h) {
        unsigned sign = h >> 15, exp = (h >> 10) & 0x1f, frac = h & 0x3ff;
        double v;

        if (exp == 0)
                v = ldexp((double)frac, -24);
        else if (exp == 31)
                v = frac ? NAN : INFINITY;
        else
                v = ldexp((double)(frac | 0x400), (int)exp - 25);
        return sign ? -v : v;
}

static void out_float(FILE *f, double v, int digits, bool json) {
        if (isnan(v))
                fputs(json ? "\"nan\"" : "nan", f);
        else if (isinf(v))
                fputs(v < 0 ? (json ? "\"-inf\"" : "-inf") : (json ? "\"inf\"" : "inf"), f);
        else
                fprintf(f, "%.*g", digits, v);
}

static double load_float(const uint8_t *p, unsigned size, char order, int *ret_digits) {
        uint64_t bits = load(p, size, order);

        if (size == 2) {
                *ret_digits = 5;
                return half_to_double((uint16_t)bits);
        }
        if (size == 4) {
                uint32_t b32 = (uint32_t)bits;
                float x;

                memcpy(&x, &b32, sizeof(x));
                *ret_digits = 9;
                return x;
        } else {
                double x;

                memcpy(&x, &bits, sizeof(x));
                *ret_digits = 17;
                return x;
        }
}

void out_value(FILE *f, const out_dtype *dt, const uint8_t *p, bool json) {
        uint64_t v;
        int digits = 17;

        switch (dt->kind) {
        case 'b':
                fputs(p[0] ? (json ? "true" : "True") : (json ? "false" : "False"), f);
                break;
        case 'u':
                fprintf(f, "%llu", (unsigned long long)load(p, dt->itemsize, dt->order));
                break;
        case 'i':
                v = load(p, dt->itemsize, dt->order);
                if (dt->itemsize < 8 && (v >> (8 * dt->itemsize - 1)) & 1)
                        v |= ~UINT64_C(0) << (8 * dt->itemsize); /* sign-extend */
                fprintf(f, "%lld", (long long)v);
                break;
        case 'f':
                out_float(f, load_float(p, dt->itemsize, dt->order, &digits), digits, json);
                break;
        case 'c': {
                unsigned half = dt->itemsize / 2;
                double re = load_float(p, half, dt->order, &digits);
                double im = load_float(p + half, half, dt->order, &digits);

                if (json) {
                        fputc('[', f);
                        out_float(f, re, digits, true);
                        fputs(", ", f);
                        out_float(f, im, digits, true);
                        fputc(']', f);
                } else {
                        out_float(f, re, digits, false);
                        fputc(signbit(im) ? '-' : '+', f);
                        out_float(f, fabs(im), digits, false);
                        fputc('j', f);
                }
                break;
        }
        default:
                fputs(json ? "null" : "?", f);
        }
}

void out_hex(FILE *f, const uint8_t *p, size_t n, char sep) {
        for (size_t i = 0; i < n; i++) {
                if (i && sep)
                        fputc(sep, f);
                fprintf(f, "%02x", p[i]);
        }
}

void out_shape(FILE *f, const uint64_t *shape, uint32_t ndim, bool json) {
        fputc(json ? '[' : '(', f);
        for (uint32_t i = 0; i < ndim; i++)
                fprintf(f, "%s%llu", i ? ", " : "", (unsigned long long)shape[i]);
        if (!json && ndim == 1)
                fputc(',', f);
        fputc(json ? ']' : ')', f);
}
