/* url.c: s3:// URLs and the HTTP URLs of objects (url.h).
 *
 * Only strings are handled here: nothing is resolved or fetched. Every part a
 * user gave is checked against the narrow grammar of url.h before it is put in
 * a URL, so that a request can only ever name an object of the bucket given.
 */
#include "url.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#define DEFAULT_REGION "us-east-1"

int s3_is_url(const char *s) {
        return s && strncmp(s, S3_SCHEME, sizeof(S3_SCHEME) - 1) == 0;
}

static int bucket_ok(const char *b, size_t n) {
        if (n < 3 || n > 63)
                return 0;
        for (size_t i = 0; i < n; i++) {
                char c = b[i];
                int alnum = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
                if (!alnum && c != '.' && c != '-')
                        return 0;
                if ((i == 0 || i == n - 1) && !alnum)
                        return 0;
        }
        return 1;
}

/* One segment of a prefix or a child name: printable, not empty, "." or "..". */
static int segment_ok(const char *s, size_t n) {
        if (n == 0 || (n == 1 && s[0] == '.') || (n == 2 && s[0] == '.' && s[1] == '.'))
                return 0;
        for (size_t i = 0; i < n; i++) {
                unsigned char c = (unsigned char)s[i];
                if (c < 0x20 || c == 0x7f || c == '/' || c == '\\')
                        return 0;
        }
        return 1;
}

static int prefix_ok(const char *p, size_t n) {
        size_t i = 0;
        while (i < n) {
                const char *slash = memchr(p + i, '/', n - i);
                size_t len = slash ? (size_t)(slash - (p + i)) : n - i;
                if (!segment_ok(p + i, len))
                        return 0;
                i += len + 1;
        }
        return 1;
}

/* "http[s]://host[:port][/]": host of letters, digits, '.', '-', or a bracketed
 * IPv6 address; a port of digits. */
static int endpoint_ok(const char *e, size_t *ret_len) {
        const char *h;
        size_t n = strlen(e);
        if (strncmp(e, "http://", 7) == 0)
                h = e + 7;
        else if (strncmp(e, "https://", 8) == 0)
                h = e + 8;
        else
                return 0;
        if (n > 0 && e[n - 1] == '/')
                n--;
        const char *end = e + n, *p = h;
        if (p < end && *p == '[') {
                while (p < end && *p != ']') {
                        char c = *p;
                        if (!(c == '[' || c == ':' || c == '.' || (c >= '0' && c <= '9') ||
                              (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F')))
                                return 0;
                        p++;
                }
                if (p == end)
                        return 0;
                p++;
        } else {
                while (p < end && *p != ':') {
                        char c = *p;
                        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                              (c >= '0' && c <= '9') || c == '.' || c == '-'))
                                return 0;
                        p++;
                }
                if (p == h)
                        return 0;
        }
        if (p < end) {
                if (*p != ':' || p + 1 == end || end - (p + 1) > 5)
                        return 0;
                for (p++; p < end; p++)
                        if (*p < '0' || *p > '9')
                                return 0;
        }
        *ret_len = n;
        return 1;
}

int s3_target_init(s3_target *t, const char *url, const char *endpoint, const char *region,
                   int addressing, s3_error *err) {
        const char *b, *slash;
        size_t blen, plen, elen = 0;

        memset(t, 0, sizeof(*t));
        if (!s3_is_url(url))
                return s3_error_set(err, EINVAL, "'%.64s' is not an s3:// URL", url ? url : "");
        b = url + sizeof(S3_SCHEME) - 1;
        slash = strchr(b, '/');
        blen = slash ? (size_t)(slash - b) : strlen(b);
        if (!bucket_ok(b, blen))
                return s3_error_set(err, EINVAL, "%.80s: '%.*s' is not a bucket name (3 to 63 "
                                    "of a-z, 0-9, '.', '-')", url, (int)(blen > 64 ? 64 : blen), b);
        memcpy(t->bucket, b, blen);
        if (slash) {
                const char *p = slash + 1;
                plen = strlen(p);
                if (plen > 0 && p[plen - 1] == '/')
                        plen--;
                /* room for "/" and the longest object name of a store */
                if (plen + 32 >= sizeof(t->prefix))
                        return s3_error_set(err, ENAMETOOLONG, "%.80s...: the key prefix is "
                                            "longer than %zu bytes", url, sizeof(t->prefix) - 32);
                if (plen > 0 && !prefix_ok(p, plen))
                        return s3_error_set(err, EINVAL, "%.200s: the key prefix has an empty, "
                                            "'.' or '..' segment, or a control character", url);
                memcpy(t->prefix, p, plen);
        }
        if (!region || !*region)
                region = DEFAULT_REGION;
        if (strlen(region) >= sizeof(t->region) ||
            strspn(region, "abcdefghijklmnopqrstuvwxyz0123456789-") != strlen(region))
                return s3_error_set(err, EINVAL, "'%.64s' is not a region name", region);
        strcpy(t->region, region);
        if (endpoint && *endpoint) {
                if (strlen(endpoint) >= sizeof(t->endpoint) || !endpoint_ok(endpoint, &elen))
                        return s3_error_set(err, EINVAL, "'%.200s' is not an endpoint "
                                            "(http[s]://HOST[:PORT])", endpoint);
                memcpy(t->endpoint, endpoint, elen);
                t->virtual_host = addressing == S3_ADDR_VIRTUAL;
        } else {
                snprintf(t->endpoint, sizeof(t->endpoint), "https://s3.%s.amazonaws.com",
                         t->region);
                t->virtual_host = addressing != S3_ADDR_PATH;
        }
        if (t->virtual_host && strchr(t->bucket, '.') && strncmp(t->endpoint, "https", 5) == 0)
                t->virtual_host = 0; /* a dotted bucket breaks the certificate's wildcard */
        return 0;
}

int s3_target_child(const s3_target *t, const char *name, s3_target *ret, s3_error *err) {
        size_t n = strlen(name), p = strlen(t->prefix);
        if (!segment_ok(name, n))
                return s3_error_set(err, EINVAL, "'%.64s' is not a stream name", name);
        if (p + 1 + n + 32 >= sizeof(ret->prefix))
                return s3_error_set(err, ENAMETOOLONG, "the key of stream '%.64s' is too long",
                                    name);
        *ret = *t;
        snprintf(ret->prefix + p, sizeof(ret->prefix) - p, "%s%s", p ? "/" : "", name);
        return 0;
}

int s3_key(const s3_target *t, const char *name, char *buf, size_t n) {
        int k = t->prefix[0] ? snprintf(buf, n, "%s/%s", t->prefix, name)
                             : snprintf(buf, n, "%s", name);
        return k < 0 || (size_t)k >= n ? -ENAMETOOLONG : 0;
}

int s3_encode(const char *s, int keep_slash, char *out, size_t n) {
        static const char hex[] = "0123456789ABCDEF";
        size_t k = 0;
        for (; *s; s++) {
                unsigned char c = (unsigned char)*s;
                int keep = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
                           (c >= '0' && c <= '9') || c == '-' || c == '.' || c == '_' ||
                           c == '~' || (keep_slash && c == '/');
                if (k + (keep ? 1 : 3) >= n)
                        return -ENAMETOOLONG;
                if (keep) {
                        out[k++] = (char)c;
                } else {
                        out[k++] = '%';
                        out[k++] = hex[c >> 4];
                        out[k++] = hex[c & 15];
                }
        }
        out[k] = 0;
        return 0;
}

int s3_http_url(const s3_target *t, const char *key, const char *query, char *buf, size_t n) {
        char enc[3 * S3_PREFIX_MAX + 64];
        const char *scheme_end = strstr(t->endpoint, "://");
        int k;

        if (key && s3_encode(key, 1, enc, sizeof(enc)) < 0)
                return -ENAMETOOLONG;
        if (!key)
                enc[0] = 0;
        if (t->virtual_host)
                k = snprintf(buf, n, "%.*s%s.%s/%s%s%s", (int)(scheme_end + 3 - t->endpoint),
                             t->endpoint, t->bucket, scheme_end + 3, enc,
                             query && *query ? "?" : "", query ? query : "");
        else
                k = snprintf(buf, n, "%s/%s%s%s%s%s", t->endpoint, t->bucket, key ? "/" : "",
                             enc, query && *query ? "?" : "", query ? query : "");
        return k < 0 || (size_t)k >= n ? -ENAMETOOLONG : 0;
}

void s3_describe(const s3_target *t, const char *name, char *buf, size_t n) {
        snprintf(buf, n, "s3://%s%s%s%s%s", t->bucket, t->prefix[0] ? "/" : "", t->prefix,
                 name ? "/" : "", name ? name : "");
}
