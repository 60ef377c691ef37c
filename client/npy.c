/* npy.c: parsing the header of a .npy file (numpy's format, versions 1 to 3).
 *
 * The header dict is a Python literal, so this is a small recursive-descent
 * reader of the part of Python's syntax numpy's writer produces and its reader
 * (ast.literal_eval) accepts for these three keys: quoted strings with either
 * quote, True/False, and tuples of non-negative integers (with an optional
 * trailing comma and the "L" suffix of Python 2's longs). Unknown keys are
 * refused, as numpy refuses them. Bounded: it reads each byte at most once and
 * allocates nothing.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "npy.h"

static const uint8_t npy_magic[6] = { 0x93, 'N', 'U', 'M', 'P', 'Y' };

__attribute__((format(printf, 3, 4)))
static int fail(char *err, size_t errsize, const char *fmt, ...) {
        va_list ap;

        if (err && errsize) {
                va_start(ap, fmt);
                vsnprintf(err, errsize, fmt, ap);
                va_end(ap);
        }
        return -EINVAL;
}

int npy_header_size(const void *buf, size_t len, uint64_t *ret_size, char *err, size_t errsize) {
        const uint8_t *p = buf;
        uint64_t hlen;

        if (len < 8)
                return len >= 6 && memcmp(p, npy_magic, 6) != 0
                               ? fail(err, errsize, "not a .npy file (bad magic)")
                               : -EAGAIN;
        if (memcmp(p, npy_magic, 6) != 0)
                return fail(err, errsize, "not a .npy file (bad magic)");
        if (p[6] < 1 || p[6] > 3)
                return fail(err, errsize, ".npy format version %u.%u is not supported (1.0-3.0)",
                            p[6], p[7]);
        if (p[6] == 1) {
                if (len < 10)
                        return -EAGAIN;
                hlen = (uint64_t)p[8] | (uint64_t)p[9] << 8;
                *ret_size = 10 + hlen;
        } else {
                if (len < 12)
                        return -EAGAIN;
                hlen = (uint64_t)p[8] | (uint64_t)p[9] << 8 | (uint64_t)p[10] << 16 |
                       (uint64_t)p[11] << 24;
                *ret_size = 12 + hlen;
        }
        if (hlen > NPY_HEADER_MAX)
                return fail(err, errsize, ".npy header of %llu bytes is too large",
                            (unsigned long long)hlen);
        return 0;
}

typedef struct reader {
        const char *p, *end;
        char *err;
        size_t errsize;
} reader;

static void skip_ws(reader *r) {
        while (r->p < r->end && (*r->p == ' ' || *r->p == '\t' || *r->p == '\n' || *r->p == '\r'))
                r->p++;
}

static bool eat(reader *r, char ch) {
        skip_ws(r);
        if (r->p < r->end && *r->p == ch) {
                r->p++;
                return true;
        }
        return false;
}

/* A quoted string without escapes (numpy's keys and dtype strings need none). */
static int read_str(reader *r, const char **ret, size_t *ret_len) {
        char q;
        const char *start;

        skip_ws(r);
        if (r->p >= r->end || (*r->p != '\'' && *r->p != '"'))
                return fail(r->err, r->errsize, ".npy header: expected a string");
        q = *r->p++;
        start = r->p;
        while (r->p < r->end && *r->p != q) {
                if (*r->p == '\\' || *r->p == '\n')
                        return fail(r->err, r->errsize, ".npy header: unsupported string");
                r->p++;
        }
        if (r->p >= r->end)
                return fail(r->err, r->errsize, ".npy header: unterminated string");
        *ret = start;
        *ret_len = (size_t)(r->p - start);
        r->p++;
        return 0;
}

static bool word(reader *r, const char *w) {
        size_t n = strlen(w);

        skip_ws(r);
        if ((size_t)(r->end - r->p) >= n && memcmp(r->p, w, n) == 0) {
                r->p += n;
                return true;
        }
        return false;
}

static int read_uint(reader *r, uint64_t *ret) {
        uint64_t v = 0;
        bool any = false;

        skip_ws(r);
        while (r->p < r->end && *r->p >= '0' && *r->p <= '9') {
                unsigned d = (unsigned)(*r->p - '0');

                if (v > (UINT64_MAX - d) / 10)
                        return fail(r->err, r->errsize, ".npy header: dimension overflows");
                v = v * 10 + d;
                any = true;
                r->p++;
        }
        if (!any)
                return fail(r->err, r->errsize, ".npy header: expected a dimension");
        if (r->p < r->end && (*r->p == 'L' || *r->p == 'l'))
                r->p++;
        *ret = v;
        return 0;
}

static int read_shape(reader *r, npy_header *h) {
        int ret;

        if (!eat(r, '('))
                return fail(r->err, r->errsize, ".npy header: shape is not a tuple");
        h->ndim = 0;
        for (;;) {
                if (eat(r, ')'))
                        return 0;
                if (h->ndim >= ZRC_NDIM_MAX)
                        return fail(r->err, r->errsize, ".npy header: more than %d dimensions",
                                    ZRC_NDIM_MAX);
                ret = read_uint(r, &h->shape[h->ndim++]);
                if (ret < 0)
                        return ret;
                if (eat(r, ','))
                        continue;
                if (eat(r, ')')) {
                        if (h->ndim == 1)
                                /* "(5)" is an int in Python, not a tuple */
                                return fail(r->err, r->errsize, ".npy header: shape is not a tuple");
                        return 0;
                }
                return fail(r->err, r->errsize, ".npy header: malformed shape");
        }
}

int npy_header_parse(const void *buf, size_t len, npy_header *ret, char *err, size_t errsize) {
        const uint8_t *b = buf;
        uint64_t size, prod = 1;
        bool have_descr = false, have_order = false, have_shape = false;
        npy_header h = { 0 };
        reader r;
        int itemsize, x;

        x = npy_header_size(buf, len, &size, err, errsize);
        if (x == -EAGAIN || (x == 0 && size > len))
                return fail(err, errsize, ".npy header truncated");
        if (x < 0)
                return x;
        h.major = b[6];
        h.minor = b[7];
        h.data_offset = size;
        r = (reader){
                .p = (const char *)b + (h.major == 1 ? 10 : 12),
                .end = (const char *)b + size,
                .err = err,
                .errsize = errsize,
        };

        if (!eat(&r, '{'))
                return fail(err, errsize, ".npy header is not a dict");
        for (;;) {
                const char *key, *val;
                size_t klen, vlen;

                if (eat(&r, '}'))
                        break;
                x = read_str(&r, &key, &klen);
                if (x < 0)
                        return x;
                if (!eat(&r, ':'))
                        return fail(err, errsize, ".npy header: expected ':' after a key");
                if (klen == 5 && memcmp(key, "descr", 5) == 0 && !have_descr) {
                        skip_ws(&r);
                        if (r.p < r.end && *r.p == '[')
                                return fail(err, errsize,
                                            ".npy dtype is structured; only plain number dtypes can be imported");
                        x = read_str(&r, &val, &vlen);
                        if (x < 0)
                                return x;
                        if (vlen == 0 || vlen >= sizeof(h.descr))
                                return fail(err, errsize, ".npy dtype \"%.*s\" is not supported",
                                            (int)(vlen < 32 ? vlen : 32), val);
                        memcpy(h.descr, val, vlen);
                        h.descr[vlen] = 0;
                        have_descr = true;
                } else if (klen == 13 && memcmp(key, "fortran_order", 13) == 0 && !have_order) {
                        if (word(&r, "True"))
                                h.fortran_order = true;
                        else if (word(&r, "False"))
                                h.fortran_order = false;
                        else
                                return fail(err, errsize, ".npy header: fortran_order is not True or False");
                        have_order = true;
                } else if (klen == 5 && memcmp(key, "shape", 5) == 0 && !have_shape) {
                        x = read_shape(&r, &h);
                        if (x < 0)
                                return x;
                        have_shape = true;
                } else {
                        return fail(err, errsize, ".npy header: unexpected or repeated key \"%.*s\"",
                                    (int)(klen < 32 ? klen : 32), key);
                }
                if (eat(&r, ','))
                        continue;
                if (eat(&r, '}'))
                        break;
                return fail(err, errsize, ".npy header: expected ',' or '}'");
        }
        skip_ws(&r);
        if (r.p != r.end)
                return fail(err, errsize, ".npy header: bytes after the dict");
        if (!have_descr || !have_order || !have_shape)
                return fail(err, errsize, ".npy header lacks %s",
                            !have_descr ? "descr" : !have_order ? "fortran_order" : "shape");

        itemsize = zrc_dtype_itemsize(h.descr);
        if (itemsize < 0)
                return fail(err, errsize,
                            ".npy dtype \"%s\" is not supported (plain bool, int, uint, float, complex only)",
                            h.descr);
        if (h.fortran_order)
                return fail(err, errsize, ".npy array is in Fortran order; save it C-contiguous (np.ascontiguousarray)");
        if (h.ndim == 0)
                return fail(err, errsize, ".npy array is 0-d; it has no record axis");
        h.itemsize = (uint32_t)itemsize;
        prod = h.itemsize;
        for (uint32_t i = 1; i < h.ndim; i++) {
                if (h.shape[i] && prod > UINT64_MAX / h.shape[i])
                        return fail(err, errsize, ".npy record size overflows");
                prod *= h.shape[i];
        }
        h.records = h.shape[0];
        h.record_bytes = prod;
        if (prod && h.records > UINT64_MAX / prod)
                return fail(err, errsize, ".npy data size overflows");
        h.data_bytes = h.records * prod;
        *ret = h;
        return 0;
}
