/* xml.c: finding S3's XML fields (xml.h). Every scan is bounded by n. */
#include "xml.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The first occurrence of s (length k) in p[0..n), or NULL. */
static const char *find(const char *p, size_t n, const char *s, size_t k) {
        return memmem(p, n, s, k);
}

int s3_xml_next(const char *xml, size_t n, const char *tag, const char **body,
                size_t *body_len, const char **rest) {
        char open[80], close[84];
        size_t tl = strlen(tag);
        const char *p = xml, *end = xml + n;

        if (tl == 0 || tl > 64)
                return 0;
        snprintf(open, sizeof(open), "<%s", tag);
        snprintf(close, sizeof(close), "</%s>", tag);
        while (p < end) {
                const char *o = find(p, (size_t)(end - p), open, tl + 1);
                if (!o)
                        return 0;
                const char *a = o + tl + 1;
                if (a < end && *a == '>') {
                        const char *c = find(a + 1, (size_t)(end - a - 1), close, tl + 3);
                        if (!c)
                                return 0;
                        *body = a + 1;
                        *body_len = (size_t)(c - a - 1);
                        *rest = c + tl + 3;
                        return 1;
                }
                if (a + 1 < end && a[0] == '/' && a[1] == '>') {
                        *body = a;
                        *body_len = 0;
                        *rest = a + 2;
                        return 1;
                }
                p = a; /* a longer tag with the same beginning */
        }
        return 0;
}

/* Decodes one entity at p[0..n) (after the '&') into *c; returns its length
 * including the ';', or 0. */
static size_t entity(const char *p, size_t n, unsigned *c) {
        static const struct { const char *name; char c; } named[] = {
                {"amp;", '&'}, {"lt;", '<'}, {"gt;", '>'}, {"quot;", '"'}, {"apos;", '\''},
        };
        for (size_t i = 0; i < sizeof(named) / sizeof(named[0]); i++) {
                size_t k = strlen(named[i].name);
                if (n >= k && memcmp(p, named[i].name, k) == 0) {
                        *c = (unsigned char)named[i].c;
                        return k;
                }
        }
        if (n >= 3 && p[0] == '#') {
                const char *semi = memchr(p, ';', n < 12 ? n : 12);
                char num[16];
                char *e;
                if (!semi || semi - p - 1 <= 0 || semi - p - 1 >= (long)sizeof(num))
                        return 0;
                memcpy(num, p + 1, (size_t)(semi - p - 1));
                num[semi - p - 1] = 0;
                unsigned long v = num[0] == 'x' ? strtoul(num + 1, &e, 16) : strtoul(num, &e, 10);
                if (*e || v == 0 || v > 0x7f) /* ASCII only: enough for S3's fields */
                        return 0;
                *c = (unsigned)v;
                return (size_t)(semi - p) + 1;
        }
        return 0;
}

int s3_xml_text(const char *xml, size_t n, const char *tag, char *out, size_t outn) {
        const char *b, *rest;
        size_t bl, k = 0;

        if (outn == 0)
                return 0;
        out[0] = 0;
        if (!s3_xml_next(xml, n, tag, &b, &bl, &rest))
                return 0;
        for (size_t i = 0; i < bl && k + 1 < outn; i++) {
                unsigned c = (unsigned char)b[i];
                if (c == '&') {
                        size_t e = entity(b + i + 1, bl - i - 1, &c);
                        if (e)
                                i += e;
                }
                if (c < 0x20 && c != '\t')
                        c = ' ';
                out[k++] = (char)c;
        }
        out[k] = 0;
        return 1;
}
