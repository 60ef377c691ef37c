/* test-url.c: s3:// URLs, endpoints and the HTTP URLs of objects (s3/url.h):
 * what a user may write, what is refused, and that nothing a user gives can
 * make a URL name another bucket or escape its prefix. */
#include <check.h>
#include <errno.h>
#include <string.h>

#include "check-run.h"
#include "url.h"

START_TEST(test_parse_and_build) {
        s3_target t;
        s3_error err = {0};
        char buf[4096];

        ck_assert(s3_is_url("s3://a"));
        ck_assert(!s3_is_url("/tmp/s3://x"));
        ck_assert(!s3_is_url(NULL));
        ck_assert_int_eq(s3_target_init(&t, "s3://data-1/imagenet/train/", "http://127.0.0.1:8333/",
                                        NULL, S3_ADDR_AUTO, &err), 0);
        ck_assert_str_eq(t.bucket, "data-1");
        ck_assert_str_eq(t.prefix, "imagenet/train");
        ck_assert_str_eq(t.endpoint, "http://127.0.0.1:8333");
        ck_assert_str_eq(t.region, "us-east-1");
        ck_assert_int_eq(t.virtual_host, 0);
        ck_assert_int_eq(s3_key(&t, "0.chunk", buf, sizeof(buf)), 0);
        ck_assert_str_eq(buf, "imagenet/train/0.chunk");
        ck_assert_int_eq(s3_http_url(&t, buf, "partNumber=1&uploadId=x", buf, sizeof(buf)), 0);
        ck_assert_str_eq(buf, "http://127.0.0.1:8333/data-1/imagenet/train/0.chunk?partNumber=1&"
                              "uploadId=x");
        ck_assert_int_eq(s3_http_url(&t, NULL, "list-type=2", buf, sizeof(buf)), 0);
        ck_assert_str_eq(buf, "http://127.0.0.1:8333/data-1?list-type=2");
        s3_describe(&t, "meta.zr", buf, sizeof(buf));
        ck_assert_str_eq(buf, "s3://data-1/imagenet/train/meta.zr");

        /* AWS's own endpoint: virtual host, from the region */
        ck_assert_int_eq(s3_target_init(&t, "s3://bkt", NULL, "eu-west-3", S3_ADDR_AUTO, &err), 0);
        ck_assert_str_eq(t.endpoint, "https://s3.eu-west-3.amazonaws.com");
        ck_assert_int_eq(t.virtual_host, 1);
        ck_assert_str_eq(t.prefix, "");
        ck_assert_int_eq(s3_key(&t, "meta.zr", buf, sizeof(buf)), 0);
        ck_assert_str_eq(buf, "meta.zr");
        ck_assert_int_eq(s3_http_url(&t, "meta.zr", NULL, buf, sizeof(buf)), 0);
        ck_assert_str_eq(buf, "https://bkt.s3.eu-west-3.amazonaws.com/meta.zr");
        ck_assert_int_eq(s3_target_init(&t, "s3://bkt", NULL, NULL, S3_ADDR_PATH, &err), 0);
        ck_assert_int_eq(t.virtual_host, 0);

        /* keys are percent-encoded, '/' kept */
        ck_assert_int_eq(s3_target_init(&t, "s3://bkt/a b/c+d", "https://h:1", NULL, 0, &err), 0);
        ck_assert_int_eq(s3_key(&t, "meta.zr", buf, sizeof(buf)), 0);
        ck_assert_int_eq(s3_http_url(&t, buf, NULL, buf, sizeof(buf)), 0);
        ck_assert_str_eq(buf, "https://h:1/bkt/a%20b/c%2Bd/meta.zr");

        s3_target child;
        ck_assert_int_eq(s3_target_child(&t, "images", &child, &err), 0);
        ck_assert_str_eq(child.prefix, "a b/c+d/images");
        ck_assert_int_eq(s3_target_child(&t, "..", &child, &err), -EINVAL);
        ck_assert_int_eq(s3_target_child(&t, "a/b", &child, &err), -EINVAL);
}
END_TEST

START_TEST(test_refused) {
        static const char *const urls[] = {
                "s3://", "s3://ab", "s3://Upper", "s3://-lead", "s3://trail-", "s3://a_b/x",
                "s3://bkt/a//b", "s3://bkt/../x", "s3://bkt/a/./b", "s3://bkt/a\nb",
                "s3://bkt/a\\b", "http://bkt/x", "s3:/bkt", "",
        };
        static const char *const endpoints[] = {
                "ftp://h", "http://", "http://h/path", "http://h?q", "http://user@h",
                "http://h:", "http://h:123456", "http://h:80x", "http://[::1", "h:80",
                "http://h h", "http://h\r\nX: y",
        };
        s3_target t;

        for (size_t i = 0; i < sizeof(urls) / sizeof(urls[0]); i++) {
                s3_error err = {0};
                ck_assert_msg(s3_target_init(&t, urls[i], "http://h", NULL, 0, &err) < 0,
                              "accepted %s", urls[i]);
                ck_assert_int_gt(strlen(err.message), 0);
        }
        for (size_t i = 0; i < sizeof(endpoints) / sizeof(endpoints[0]); i++) {
                s3_error err = {0};
                ck_assert_msg(s3_target_init(&t, "s3://bkt/x", endpoints[i], NULL, 0, &err) ==
                              -EINVAL, "accepted %s", endpoints[i]);
        }
        s3_error err = {0};
        ck_assert_int_eq(s3_target_init(&t, "s3://bkt", "http://[::1]:9000", NULL, 0, &err), 0);
        ck_assert_int_eq(s3_target_init(&t, "s3://bkt", "http://h", "US EAST", 0, &err), -EINVAL);
        char longp[2048];
        memset(longp, 'a', sizeof(longp));
        memcpy(longp, "s3://bkt/", 9);
        longp[sizeof(longp) - 1] = 0;
        ck_assert_int_eq(s3_target_init(&t, longp, "http://h", NULL, 0, &err), -ENAMETOOLONG);
}
END_TEST

START_TEST(test_encode) {
        char out[64];
        ck_assert_int_eq(s3_encode("a/b c~._-", 1, out, sizeof(out)), 0);
        ck_assert_str_eq(out, "a/b%20c~._-");
        ck_assert_int_eq(s3_encode("a/b", 0, out, sizeof(out)), 0);
        ck_assert_str_eq(out, "a%2Fb");
        ck_assert_int_eq(s3_encode("\xff", 0, out, sizeof(out)), 0);
        ck_assert_str_eq(out, "%FF");
        ck_assert_int_eq(s3_encode("abcdef", 0, out, 4), -ENAMETOOLONG);
}
END_TEST

TL_SUITE_MAIN("s3-url", test_parse_and_build, test_refused, test_encode)
