/* request.c: one signed S3 request on a libcurl easy handle (request.h).
 *
 * What it assumes: libcurl 7.75 or later (CURLOPT_AWS_SIGV4); a caller that
 * writes its query canonical. What it does not do: drive the transfer (the
 * caller performs it, alone or in a multi handle) or retry (the caller decides
 * by r->transient and waits s3_backoff_ns()).
 */
#include "request.h"

#include <ctype.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "url.h"
#include "xml.h"

#define USER_AGENT "zrecord/" ZR_VERSION_STRING
#define CONNECT_TIMEOUT_S 10L
#define TIMEOUT_DEFAULT_S 30L

static pthread_once_t global_once = PTHREAD_ONCE_INIT;
static int global_rc;

static void global_init(void) {
        global_rc = curl_global_init(CURL_GLOBAL_DEFAULT) == CURLE_OK ? 0 : -EIO;
}

int s3_global_init(void) {
        pthread_once(&global_once, global_init);
        return global_rc;
}

/* ---- libcurl's callbacks --------------------------------------------------------- */

static size_t on_body(char *data, size_t size, size_t nmemb, void *arg) {
        s3_request *r = arg;
        uint64_t n = (uint64_t)size * nmemb;

        if (r->len + n > r->max) {
                r->overflow = 1;
                return 0; /* a write error: the transfer stops */
        }
        if (r->own_buf && r->len + n + 1 > r->cap) {
                uint64_t cap = r->cap ? r->cap : 4096;
                while (cap < r->len + n + 1)
                        cap *= 2;
                uint8_t *b = realloc(r->buf, cap);
                if (!b)
                        return 0;
                r->buf = b;
                r->cap = cap;
        }
        memcpy(r->buf + r->len, data, n);
        r->len += n;
        if (r->own_buf)
                r->buf[r->len] = 0;
        return n;
}

static size_t on_upload(char *dst, size_t size, size_t nmemb, void *arg) {
        s3_request *r = arg;
        uint64_t n = (uint64_t)size * nmemb, left = r->up_len - r->up_off;

        if (n > left)
                n = left;
        memcpy(dst, r->up + r->up_off, n);
        r->up_off += n;
        return n;
}

/* The value of header line h (of length n) if it is `name:`, trimmed. */
static int header_value(const char *h, size_t n, const char *name, char *out, size_t outn) {
        size_t k = strlen(name);
        if (n <= k || strncasecmp(h, name, k) != 0 || h[k] != ':')
                return 0;
        h += k + 1;
        n -= k + 1;
        while (n && (*h == ' ' || *h == '\t'))
                h++, n--;
        while (n && (h[n - 1] == '\r' || h[n - 1] == '\n' || h[n - 1] == ' '))
                n--;
        if (n >= outn)
                n = outn - 1;
        memcpy(out, h, n);
        out[n] = 0;
        return 1;
}

static size_t on_header(char *data, size_t size, size_t nmemb, void *arg) {
        s3_request *r = arg;
        size_t n = size * nmemb;
        char v[S3_ETAG_MAX];

        if (n > 5 && strncmp(data, "HTTP/", 5) == 0) {
                /* a new response (after a 100 Continue): forget the last one's */
                r->etag[0] = 0;
                r->has_length = 0;
                r->meta[0] = 0;
                return n;
        }
        if (header_value(data, n, "ETag", v, sizeof(v))) {
                strcpy(r->etag, v);
        } else if (header_value(data, n, "Content-Length", v, sizeof(v))) {
                char *e;
                unsigned long long x = strtoull(v, &e, 10);
                if (*v && !*e) {
                        r->length = x;
                        r->has_length = 1;
                }
        } else if (r->meta_name[0]) {
                char name[80];
                snprintf(name, sizeof(name), "x-amz-meta-%s", r->meta_name);
                header_value(data, n, name, r->meta, sizeof(r->meta));
        }
        return n;
}

/* ---- setting up --------------------------------------------------------------- */

static int add_header(s3_request *r, const char *fmt, const char *v, s3_error *err) {
        char line[S3_TOKEN_MAX + 64];
        struct curl_slist *l;

        snprintf(line, sizeof(line), fmt, v);
        l = curl_slist_append(r->headers, line);
        s3_wipe(line, sizeof(line));
        if (!l)
                return s3_error_set(err, ENOMEM, "%s: no memory for a header", r->what);
        r->headers = l;
        return 0;
}

/* A header value of printable ASCII (no CR, LF: no header injection). */
static int printable(const char *s) {
        for (; *s; s++)
                if ((unsigned char)*s < 0x20 || (unsigned char)*s > 0x7e)
                        return 0;
        return 1;
}

int s3_request_init(s3_request *r, const s3_target *t, const s3_creds *c, const s3_spec *sp,
                    s3_error *err) {
        char key[S3_PREFIX_MAX + 64];
        const char *k = sp->key;
        int rc;

        memset(r, 0, sizeof(*r));
        if (sp->name) {
                if (s3_key(t, sp->name, key, sizeof(key)) < 0)
                        return s3_error_set(err, ENAMETOOLONG, "the key of %s is too long",
                                            sp->name);
                k = key;
        }
        snprintf(r->what, sizeof(r->what), "s3://%s/%.*s", t->bucket, S3_PREFIX_MAX + 64, k ? k : "");
        if (s3_http_url(t, k, sp->query, r->url, sizeof(r->url)) < 0)
                return s3_error_set(err, ENAMETOOLONG, "%s: the URL is too long", r->what);
        if ((sp->if_match && !printable(sp->if_match)) ||
            (c && !printable(c->session_token)) ||
            (sp->meta_value && !printable(sp->meta_value)))
                return s3_error_set(err, EINVAL, "%s: a header value is not printable ASCII",
                                    r->what);
        if (s3_global_init() < 0)
                return s3_error_set(err, EIO, "libcurl did not initialise");
        r->easy = curl_easy_init();
        if (!r->easy)
                return s3_error_set(err, ENOMEM, "%s: no curl handle", r->what);

        CURL *e = r->easy;
        curl_easy_setopt(e, CURLOPT_URL, r->url);
        curl_easy_setopt(e, CURLOPT_PRIVATE, r);
        curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
        curl_easy_setopt(e, CURLOPT_FOLLOWLOCATION, 0L);
        curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
        curl_easy_setopt(e, CURLOPT_USERAGENT, USER_AGENT);
        curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT, CONNECT_TIMEOUT_S);
        curl_easy_setopt(e, CURLOPT_LOW_SPEED_LIMIT, 1L);
        curl_easy_setopt(e, CURLOPT_LOW_SPEED_TIME, sp->timeout_s ? sp->timeout_s
                                                                  : TIMEOUT_DEFAULT_S);
        curl_easy_setopt(e, CURLOPT_TCP_KEEPALIVE, 1L);
        curl_easy_setopt(e, CURLOPT_ERRORBUFFER, r->curl_err);
        curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_body);
        curl_easy_setopt(e, CURLOPT_WRITEDATA, r);
        curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, on_header);
        curl_easy_setopt(e, CURLOPT_HEADERDATA, r);

        if (c && c->access_key[0]) {
                char sigv4[S3_REGION_MAX + 32];
                snprintf(sigv4, sizeof(sigv4), "aws:amz:%s:s3", t->region);
                curl_easy_setopt(e, CURLOPT_AWS_SIGV4, sigv4);
                curl_easy_setopt(e, CURLOPT_USERNAME, c->access_key);
                curl_easy_setopt(e, CURLOPT_PASSWORD, c->secret_key);
                rc = add_header(r, "x-amz-content-sha256: %s", "UNSIGNED-PAYLOAD", err);
                if (rc == 0 && c->session_token[0])
                        rc = add_header(r, "x-amz-security-token: %s", c->session_token, err);
                if (rc < 0)
                        goto fail;
        }
        if (sp->if_match && (rc = add_header(r, "If-Match: %s", sp->if_match, err)) < 0)
                goto fail;
        if (sp->meta_name) {
                char h[128];
                snprintf(h, sizeof(h), "x-amz-meta-%s: %%s", sp->meta_name);
                if (sp->meta_value && (rc = add_header(r, h, sp->meta_value, err)) < 0)
                        goto fail;
                snprintf(r->meta_name, sizeof(r->meta_name), "%s", sp->meta_name);
        }
        /* "Expect:" (no 100-continue round trip) is not added: curl 7.88 signs
         * the header it then does not send, and the signature fails */

        if (strcmp(sp->method, "HEAD") == 0) {
                curl_easy_setopt(e, CURLOPT_NOBODY, 1L);
        } else if (strcmp(sp->method, "PUT") == 0) {
                r->up = sp->body;
                r->up_len = sp->body_len;
                curl_easy_setopt(e, CURLOPT_UPLOAD, 1L);
                curl_easy_setopt(e, CURLOPT_READFUNCTION, on_upload);
                curl_easy_setopt(e, CURLOPT_READDATA, r);
                curl_easy_setopt(e, CURLOPT_INFILESIZE_LARGE, (curl_off_t)sp->body_len);
        } else if (strcmp(sp->method, "POST") == 0) {
                curl_easy_setopt(e, CURLOPT_POST, 1L);
                curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)sp->body_len);
                curl_easy_setopt(e, CURLOPT_POSTFIELDS, sp->body ? sp->body : "");
        } else if (strcmp(sp->method, "GET") != 0) {
                curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, sp->method);
        }
        if (sp->range_len) {
                snprintf(r->range, sizeof(r->range), "%llu-%llu",
                         (unsigned long long)sp->range_off,
                         (unsigned long long)(sp->range_off + sp->range_len - 1));
                curl_easy_setopt(e, CURLOPT_RANGE, r->range);
        }
        curl_easy_setopt(e, CURLOPT_HTTPHEADER, r->headers);
        if (sp->dst) {
                r->buf = sp->dst;
                r->cap = r->max = sp->dst_len;
                r->exact = 1;
        } else {
                r->own_buf = 1;
                r->max = sp->max_body ? sp->max_body : S3_REPLY_MAX;
        }
        return 0;
fail:
        s3_request_fini(r);
        return rc;
}

void s3_request_rewind(s3_request *r) {
        r->len = 0;
        r->up_off = 0;
        r->overflow = 0;
        r->status = 0;
        r->etag[0] = 0;
        r->meta[0] = 0;
        r->has_length = 0;
        r->transient = 0;
        r->curl_err[0] = 0;
}

void s3_request_fini(s3_request *r) {
        if (!r)
                return;
        if (r->easy)
                curl_easy_cleanup(r->easy);
        curl_slist_free_all(r->headers); /* its secret lines are in libcurl's copies */
        if (r->own_buf)
                free(r->buf);
        r->easy = NULL;
        r->headers = NULL;
        r->buf = NULL;
}

uint8_t *s3_request_take_body(s3_request *r, uint64_t *ret_len) {
        uint8_t *b = r->own_buf ? r->buf : NULL;
        if (b) {
                r->buf = NULL;
                r->cap = 0;
        }
        *ret_len = b ? r->len : 0;
        return b;
}

/* ---- judging -------------------------------------------------------------------- */

static int curl_code(CURLcode cc) {
        switch (cc) {
        case CURLE_OPERATION_TIMEDOUT:
                return ETIMEDOUT;
        case CURLE_COULDNT_CONNECT:
                return ECONNREFUSED;
        case CURLE_COULDNT_RESOLVE_HOST:
        case CURLE_COULDNT_RESOLVE_PROXY:
                return EHOSTUNREACH;
        case CURLE_RECV_ERROR:
        case CURLE_SEND_ERROR:
        case CURLE_GOT_NOTHING:
        case CURLE_PARTIAL_FILE:
                return ECONNRESET;
        default:
                return EIO;
        }
}

static int curl_transient(CURLcode cc) {
        switch (cc) {
        case CURLE_UNSUPPORTED_PROTOCOL:
        case CURLE_URL_MALFORMAT:
        case CURLE_NOT_BUILT_IN:
        case CURLE_OUT_OF_MEMORY:
        case CURLE_PEER_FAILED_VERIFICATION:
        case CURLE_SSL_CERTPROBLEM:
        case CURLE_SSL_CACERT_BADFILE:
        case CURLE_LOGIN_DENIED:
        case CURLE_REMOTE_ACCESS_DENIED:
        case CURLE_ABORTED_BY_CALLBACK:
                return 0;
        default:
                return 1;
        }
}

int s3_request_result(s3_request *r, CURLcode cc, s3_error *err) {
        char code[64] = "", msg[200] = "";
        long st = 0;

        r->transient = 0;
        curl_easy_getinfo(r->easy, CURLINFO_RESPONSE_CODE, &st);
        r->status = st;
        if (cc != CURLE_OK && !(cc == CURLE_WRITE_ERROR && r->overflow)) {
                r->transient = curl_transient(cc);
                return s3_error_set(err, curl_code(cc), "%s: %s", r->what,
                                    r->curl_err[0] ? r->curl_err : curl_easy_strerror(cc));
        }
        if (st >= 200 && st < 300) {
                if (r->overflow || (r->exact && r->len != r->max)) {
                        r->transient = 1;
                        return s3_error_set(err, EIO, "%s: the body was %s: %llu bytes, %llu "
                                            "expected", r->what, r->overflow ? "too long"
                                            : "cut short", (unsigned long long)r->len,
                                            (unsigned long long)r->max);
                }
                return 0;
        }
        if (st == 304)
                return -EAGAIN;
        if (r->own_buf && r->buf) {
                s3_xml_text((const char *)r->buf, r->len, "Code", code, sizeof(code));
                s3_xml_text((const char *)r->buf, r->len, "Message", msg, sizeof(msg));
        }
        int e;
        switch (st) {
        case 401:
        case 403:
                e = EACCES;
                break;
        case 404:
                e = ENOENT;
                break;
        case 412:
                e = ZR_E_STALE;
                break;
        case 416:
                e = ZR_E_STALE; /* the object is shorter than the range: it changed */
                break;
        case 400:
                e = EINVAL;
                r->transient = strcmp(code, "RequestTimeout") == 0;
                break;
        case 408:
        case 429:
                e = EIO;
                r->transient = 1;
                break;
        default:
                e = EIO;
                r->transient = st >= 500 || st == 0;
                break;
        }
        if (st == 0)
                return s3_error_set(err, EIO, "%s: no HTTP status", r->what);
        if (!code[0] && st == 412)
                snprintf(code, sizeof(code), "PreconditionFailed");
        return s3_error_set(err, e, "%s: %ld%s%s%s%s", r->what, st, code[0] ? " " : "", code,
                            msg[0] ? ": " : "", msg);
}

int s3_request_perform(s3_request *r, s3_error *err) {
        return s3_request_result(r, curl_easy_perform(r->easy), err);
}

uint64_t s3_backoff_ns(unsigned attempt, uint64_t rnd) {
        uint64_t cap = S3_BACKOFF_MIN_NS;
        for (unsigned i = 1; i < attempt && cap < S3_BACKOFF_MAX_NS; i++)
                cap *= 2;
        if (cap > S3_BACKOFF_MAX_NS)
                cap = S3_BACKOFF_MAX_NS;
        return cap / 2 + rnd % (cap / 2 + 1); /* "equal jitter": never near zero */
}
