/* test-creds.c: endpoint, region and credentials resolved as the AWS tools do
 * (s3/creds.h), from the environment and from files in a directory of the
 * test's own. python-client/tests/test_remote_creds.py checks loaderx's
 * resolution against the same rules. */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check-run.h"
#include "creds.h"
#include "url.h"

static char dir[64];

static void write_file(const char *name, const char *text) {
        char path[128];
        snprintf(path, sizeof(path), "%s/%s", dir, name);
        FILE *f = fopen(path, "w");
        ck_assert_ptr_nonnull(f);
        fputs(text, f);
        fclose(f);
}

static void clean_env(void) {
        static const char *const vars[] = {
                "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE",
                "AWS_REGION", "AWS_DEFAULT_REGION", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3",
                "AWS_CONFIG_FILE", "AWS_SHARED_CREDENTIALS_FILE",
        };
        for (size_t i = 0; i < sizeof(vars) / sizeof(vars[0]); i++)
                unsetenv(vars[i]);
        char p[128];
        snprintf(p, sizeof(p), "%s/config", dir);
        setenv("AWS_CONFIG_FILE", p, 1);
        snprintf(p, sizeof(p), "%s/credentials", dir);
        setenv("AWS_SHARED_CREDENTIALS_FILE", p, 1);
}

static void setup(void) {
        snprintf(dir, sizeof(dir), "/tmp/zr-test-creds-XXXXXX");
        ck_assert_ptr_nonnull(mkdtemp(dir));
        write_file("credentials", "[default]\naws_access_key_id = AKDEF\n"
                                  "aws_secret_access_key = SKDEF\n\n"
                                  "[work]\naws_access_key_id=AKWORK\naws_secret_access_key=SKWORK\n"
                                  "aws_session_token = TOKWORK\n");
        write_file("config", "[default]\nregion = eu-west-1\n"
                             "[profile work]\nregion = ap-south-1\nendpoint_url = http://gen:1\n"
                             "s3 =\n  addressing_style = path\n  endpoint_url = http://s3only:2\n"
                             "[profile cfgonly]\naws_access_key_id = AKCFG\n"
                             "aws_secret_access_key = SKCFG\n");
        clean_env();
}

static void teardown(void) {
        char cmd[128];
        snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
        ck_assert_int_eq(system(cmd), 0);
}

START_TEST(test_files) {
        s3_config c;
        s3_error err = {0};

        ck_assert_int_eq(s3_config_resolve(&c, &err), 0);
        ck_assert_str_eq(c.creds.access_key, "AKDEF");
        ck_assert_str_eq(c.creds.secret_key, "SKDEF");
        ck_assert_str_eq(c.creds.session_token, "");
        ck_assert_str_eq(c.region, "eu-west-1");
        ck_assert_str_eq(c.endpoint, "");
        ck_assert_int_eq(c.addressing, S3_ADDR_AUTO);

        setenv("AWS_PROFILE", "work", 1);
        ck_assert_int_eq(s3_config_resolve(&c, &err), 0);
        ck_assert_str_eq(c.creds.access_key, "AKWORK");
        ck_assert_str_eq(c.creds.session_token, "TOKWORK");
        ck_assert_str_eq(c.region, "ap-south-1");
        ck_assert_str_eq(c.endpoint, "http://s3only:2");
        ck_assert_int_eq(c.addressing, S3_ADDR_PATH);

        setenv("AWS_PROFILE", "cfgonly", 1);
        ck_assert_int_eq(s3_config_resolve(&c, &err), 0);
        ck_assert_str_eq(c.creds.access_key, "AKCFG");

        setenv("AWS_PROFILE", "nosuch", 1);
        ck_assert_int_eq(s3_config_resolve(&c, &err), -ENOENT);
        ck_assert_ptr_nonnull(strstr(err.message, "nosuch"));
}
END_TEST

START_TEST(test_environment_first) {
        s3_config c;
        s3_error err = {0};

        setenv("AWS_PROFILE", "work", 1);
        setenv("AWS_ACCESS_KEY_ID", "AKENV", 1);
        setenv("AWS_SECRET_ACCESS_KEY", "SKENV", 1);
        setenv("AWS_REGION", "us-west-2", 1);
        setenv("AWS_DEFAULT_REGION", "ignored-1", 1);
        setenv("AWS_ENDPOINT_URL", "http://env:3", 1);
        ck_assert_int_eq(s3_config_resolve(&c, &err), 0);
        ck_assert_str_eq(c.creds.access_key, "AKENV");
        ck_assert_str_eq(c.creds.session_token, "");
        ck_assert_str_eq(c.region, "us-west-2");
        ck_assert_str_eq(c.endpoint, "http://env:3");
        setenv("AWS_ENDPOINT_URL_S3", "http://envs3:4", 1);
        unsetenv("AWS_REGION");
        ck_assert_int_eq(s3_config_resolve(&c, &err), 0);
        ck_assert_str_eq(c.endpoint, "http://envs3:4");
        ck_assert_str_eq(c.region, "ignored-1");

        /* a key without its secret is not credentials: the profile's are used */
        unsetenv("AWS_SECRET_ACCESS_KEY");
        ck_assert_int_eq(s3_config_resolve(&c, &err), 0);
        ck_assert_str_eq(c.creds.access_key, "AKWORK");

        /* no files, no variables: anonymous */
        clean_env();
        setenv("AWS_CONFIG_FILE", "/nonexistent/config", 1);
        setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent/credentials", 1);
        ck_assert_int_eq(s3_config_resolve(&c, &err), 0);
        ck_assert_str_eq(c.creds.access_key, "");
}
END_TEST

int main(void) {
        Suite *s = suite_create("s3-creds");
        TCase *tc = TL_TCASE(s, "creds", 0, test_files, test_environment_first);
        tcase_add_checked_fixture(tc, setup, teardown);
        return tl_run_suite(s);
}
