/* creds.h: where an S3 tool takes its endpoint, region and credentials from.
 *
 * The rules of the AWS CLI and SDKs, as far as they need no SDK
 * (docs/REMOTE.md, "Opening: who resolves what"):
 *   endpoint     AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL, the profile's
 *                "s3 = endpoint_url", its endpoint_url; else AWS's own
 *   region       AWS_REGION, AWS_DEFAULT_REGION, the profile's region
 *   credentials  AWS_ACCESS_KEY_ID + AWS_SECRET_ACCESS_KEY (+ AWS_SESSION_TOKEN);
 *                else the profile (AWS_PROFILE, else "default") in the
 *                credentials file (AWS_SHARED_CREDENTIALS_FILE, else
 *                ~/.aws/credentials), then in the config file (AWS_CONFIG_FILE,
 *                else ~/.aws/config, section "[profile NAME]" or "[default]")
 *   addressing   the profile's "s3 = addressing_style = path|virtual|auto"
 * SSO, credential_process, web identity and the instance metadata service
 * need an SDK and are not read. A file that is missing is skipped; one that
 * cannot be read, or a line it cannot parse, is skipped too (as the CLI
 * does); a profile named explicitly (AWS_PROFILE) that no file has is an
 * error. The loaderx package resolves by the same table (loaderx/_s3.py).
 */
#ifndef ZR_S3_CREDS_H
#define ZR_S3_CREDS_H

#include "s3.h"

typedef struct s3_config {
        char endpoint[S3_ENDPOINT_MAX]; /* "" for AWS's own */
        char region[S3_REGION_MAX];     /* "" for the default */
        int addressing;                 /* S3_ADDR_* of url.h */
        s3_creds creds;                 /* access_key "" for none */
        char profile[128];              /* the profile read ("" for none) */
        char source[64];                /* where the credentials came from, for messages */
} s3_config;

/* Resolves *ret from the environment and the files. Returns 0, or a negative
 * code with *err (ENOENT: the profile named by AWS_PROFILE is in no file).
 * Wipe ret->creds when done (s3_wipe()). */
int s3_config_resolve(s3_config *ret, s3_error *err);

#endif
