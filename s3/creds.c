/* creds.c: endpoint, region and credentials from the environment and the AWS
 * files (creds.h). Reads files of the caller's own; runs in the client, never
 * in the daemon, which takes what the client resolved. */
#include "creds.h"

#include <errno.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "url.h"

#define LINE_MAX_BYTES 8192

static const char *env(const char *name) {
        const char *v = getenv(name);
        return v && *v ? v : NULL;
}

static void copy(char *dst, size_t n, const char *src) {
        snprintf(dst, n, "%s", src);
}

/* ~/.aws/NAME, or the file $var names. */
static int aws_file(const char *var, const char *name, char *buf, size_t n) {
        const char *p = env(var), *home = env("HOME");
        if (p) {
                copy(buf, n, p);
                return 0;
        }
        if (!home) {
                struct passwd *pw = getpwuid(getuid());
                home = pw ? pw->pw_dir : NULL;
        }
        if (!home)
                return -ENOENT;
        snprintf(buf, n, "%s/.aws/%s", home, name);
        return 0;
}

static char *trim(char *s) {
        while (*s == ' ' || *s == '\t')
                s++;
        size_t k = strlen(s);
        while (k && (s[k - 1] == ' ' || s[k - 1] == '\t' || s[k - 1] == '\r' || s[k - 1] == '\n'))
                s[--k] = 0;
        return s;
}

/* The values of one profile's section that we read. */
typedef struct section {
        int found;
        char ak[S3_KEY_MAX], sk[S3_KEY_MAX], token[S3_TOKEN_MAX];
        char region[S3_REGION_MAX], endpoint[S3_ENDPOINT_MAX], s3_endpoint[S3_ENDPOINT_MAX];
        char addressing[16];
} section;

/* Reads section `want` ("default", "profile x", "x") of the INI file at path
 * into *s. Nested keys ("s3 =" then indented lines) are read for s3 only. */
static void read_section(const char *path, const char *want, section *s) {
        FILE *f = fopen(path, "re");
        char line[LINE_MAX_BYTES];
        int in = 0, nested = 0;

        if (!f)
                return;
        while (fgets(line, sizeof(line), f)) {
                int indented = line[0] == ' ' || line[0] == '\t';
                char *l = trim(line), *eq;
                if (!*l || *l == '#' || *l == ';')
                        continue;
                if (*l == '[') {
                        char *end = strchr(l, ']');
                        if (!end)
                                continue;
                        *end = 0;
                        in = strcmp(trim(l + 1), want) == 0;
                        s->found |= in;
                        nested = 0;
                        continue;
                }
                if (!in || !(eq = strchr(l, '=')))
                        continue;
                *eq = 0;
                char *k = trim(l), *v = trim(eq + 1);
                if (indented && nested) {
                        if (strcmp(k, "endpoint_url") == 0)
                                copy(s->s3_endpoint, sizeof(s->s3_endpoint), v);
                        else if (strcmp(k, "addressing_style") == 0)
                                copy(s->addressing, sizeof(s->addressing), v);
                        continue;
                }
                nested = !*v && strcmp(k, "s3") == 0;
                if (strcmp(k, "aws_access_key_id") == 0)
                        copy(s->ak, sizeof(s->ak), v);
                else if (strcmp(k, "aws_secret_access_key") == 0)
                        copy(s->sk, sizeof(s->sk), v);
                else if (strcmp(k, "aws_session_token") == 0)
                        copy(s->token, sizeof(s->token), v);
                else if (strcmp(k, "region") == 0)
                        copy(s->region, sizeof(s->region), v);
                else if (strcmp(k, "endpoint_url") == 0)
                        copy(s->endpoint, sizeof(s->endpoint), v);
        }
        s3_wipe(line, sizeof(line));
        fclose(f);
}

int s3_config_resolve(s3_config *ret, s3_error *err) {
        char cred_path[4096], conf_path[4096], want[160];
        const char *profile = env("AWS_PROFILE");
        section *cs = calloc(2, sizeof(*cs)), *fs;
        int named = profile != NULL, rc = 0;

        memset(ret, 0, sizeof(*ret));
        if (!cs)
                return s3_error_set(err, ENOMEM, "no memory");
        fs = cs + 1;
        if (!profile)
                profile = "default";
        copy(ret->profile, sizeof(ret->profile), profile);
        if (aws_file("AWS_SHARED_CREDENTIALS_FILE", "credentials", cred_path,
                     sizeof(cred_path)) == 0)
                read_section(cred_path, profile, cs);
        if (aws_file("AWS_CONFIG_FILE", "config", conf_path, sizeof(conf_path)) == 0) {
                if (strcmp(profile, "default") == 0)
                        read_section(conf_path, "default", fs);
                snprintf(want, sizeof(want), "profile %s", profile);
                if (!fs->found)
                        read_section(conf_path, want, fs);
        }
        if (named && !cs->found && !fs->found && !(env("AWS_ACCESS_KEY_ID") &&
                                                  env("AWS_SECRET_ACCESS_KEY"))) {
                rc = s3_error_set(err, ENOENT, "the profile '%.64s' (AWS_PROFILE) is in neither "
                                  "%.200s nor %.200s", profile, cred_path, conf_path);
                goto out;
        }

        /* credentials */
        if (env("AWS_ACCESS_KEY_ID") && env("AWS_SECRET_ACCESS_KEY")) {
                copy(ret->creds.access_key, sizeof(ret->creds.access_key), env("AWS_ACCESS_KEY_ID"));
                copy(ret->creds.secret_key, sizeof(ret->creds.secret_key),
                     env("AWS_SECRET_ACCESS_KEY"));
                if (env("AWS_SESSION_TOKEN"))
                        copy(ret->creds.session_token, sizeof(ret->creds.session_token),
                             env("AWS_SESSION_TOKEN"));
                copy(ret->source, sizeof(ret->source), "the environment");
        } else {
                const section *s = cs->ak[0] && cs->sk[0] ? cs : fs->ak[0] && fs->sk[0] ? fs : NULL;
                if (s) {
                        copy(ret->creds.access_key, sizeof(ret->creds.access_key), s->ak);
                        copy(ret->creds.secret_key, sizeof(ret->creds.secret_key), s->sk);
                        copy(ret->creds.session_token, sizeof(ret->creds.session_token), s->token);
                        snprintf(ret->source, sizeof(ret->source), "profile %.40s", profile);
                }
        }
        /* region */
        if (env("AWS_REGION"))
                copy(ret->region, sizeof(ret->region), env("AWS_REGION"));
        else if (env("AWS_DEFAULT_REGION"))
                copy(ret->region, sizeof(ret->region), env("AWS_DEFAULT_REGION"));
        else
                copy(ret->region, sizeof(ret->region), fs->region);
        /* endpoint */
        if (env("AWS_ENDPOINT_URL_S3"))
                copy(ret->endpoint, sizeof(ret->endpoint), env("AWS_ENDPOINT_URL_S3"));
        else if (env("AWS_ENDPOINT_URL"))
                copy(ret->endpoint, sizeof(ret->endpoint), env("AWS_ENDPOINT_URL"));
        else if (fs->s3_endpoint[0])
                copy(ret->endpoint, sizeof(ret->endpoint), fs->s3_endpoint);
        else
                copy(ret->endpoint, sizeof(ret->endpoint), fs->endpoint);
        ret->addressing = strcasecmp(fs->addressing, "path") == 0      ? S3_ADDR_PATH
                          : strcasecmp(fs->addressing, "virtual") == 0 ? S3_ADDR_VIRTUAL
                                                                       : S3_ADDR_AUTO;
out:
        s3_wipe(cs, 2 * sizeof(*cs));
        free(cs);
        return rc;
}
