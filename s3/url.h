/* url.h: s3:// URLs, endpoints, and the HTTP URLs of a store's objects.
 *
 * An s3 URL is "s3://BUCKET" or "s3://BUCKET/PREFIX": the bucket a DNS-safe
 * name (3..63 of a-z 0-9 . -, beginning and ending with a letter or digit),
 * the prefix '/'-separated segments of printable characters, none empty, "."
 * or "..", without a trailing '/' (one is dropped). An endpoint is
 * "http://HOST[:PORT]" or "https://..." with nothing after the authority but
 * an optional '/'. Everything is checked here: these strings come from users.
 */
#ifndef ZR_S3_URL_H
#define ZR_S3_URL_H

#include <stddef.h>

#include "s3.h"

/* The scheme every remote store URL begins with. */
#define S3_SCHEME "s3://"

/* 1 if s begins with "s3://" (a remote store), else 0. NULL is 0. */
int s3_is_url(const char *s);

/* Fills t from an s3 URL, an endpoint ("" or NULL: AWS's, from the region),
 * a region ("" or NULL: us-east-1) and the addressing: S3_ADDR_AUTO (path
 * style for an explicit endpoint, virtual host for AWS's own), S3_ADDR_PATH or
 * S3_ADDR_VIRTUAL. Returns 0, or -EINVAL with the part at fault named in *err. */
enum { S3_ADDR_AUTO = 0, S3_ADDR_PATH = 1, S3_ADDR_VIRTUAL = 2 };
int s3_target_init(s3_target *t, const char *url, const char *endpoint, const char *region,
                   int addressing, s3_error *err);

/* The target of a child of t's prefix (a stream of a set): t with "/name"
 * appended to its prefix. -EINVAL for a name that is not one segment. */
int s3_target_child(const s3_target *t, const char *name, s3_target *ret, s3_error *err);

/* The key of object `name` under t's prefix ("prefix/name", or "name" at the
 * root) into buf. Returns 0, or -ENAMETOOLONG. */
int s3_key(const s3_target *t, const char *name, char *buf, size_t n);

/* The HTTP URL of key `key` (NULL: the bucket itself), with `query` (NULL or
 * "": none) appended after '?' as given: the caller writes it canonical
 * (s3/request.h). Returns 0, or -ENAMETOOLONG. */
int s3_http_url(const s3_target *t, const char *key, const char *query, char *buf, size_t n);

/* "s3://bucket/prefix/name" (name NULL: the store itself), for messages. */
void s3_describe(const s3_target *t, const char *name, char *buf, size_t n);

/* Percent-encodes s as SigV4 wants (RFC 3986 unreserved kept; '/' kept when
 * keep_slash). Returns 0, or -ENAMETOOLONG if it does not fit in n. */
int s3_encode(const char *s, int keep_slash, char *out, size_t n);

#endif
