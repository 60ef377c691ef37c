/* transfer.h: what `zrecord push` and `zrecord pull` share: the progress line,
 * one request with retries, a URL resolved with the user's configuration.
 *
 * Both run in the tool, as the user, with the user's credentials (s3/creds.h),
 * and need no daemon (docs/REMOTE.md, "A store in a bucket").
 */
#ifndef ZRECORD_TRANSFER_H
#define ZRECORD_TRANSFER_H

#include <stdint.h>

#include "batch.h"
#include "creds.h"
#include "url.h"

#define TOOL_PART_BYTES ((uint64_t)16 << 20) /* multipart part and pull range size */
#define TOOL_PARALLEL_DEFAULT 16
#define TOOL_ATTEMPTS 8                       /* tries of a request that may pass */

/* A progress line on stderr: redrawn every 200 ms on a terminal, a line
 * every 2 s otherwise. */
typedef struct tool_progress {
        const char *verb;
        uint64_t total, done, skipped;
        uint64_t t0_ns, last_ns;
        int tty;
} tool_progress;

uint64_t tool_mono_ns(void);
void tool_progress_show(tool_progress *p, int final);

/* Performs one request with retries; the body (when ret_body) is the
 * caller's to free. 0, or a negative errno with err set. */
int tool_s3_one(const s3_target *t, const s3_creds *c, const s3_spec *sp, s3_error *err,
                uint8_t **ret_body, uint64_t *ret_len);

/* Resolves the user's endpoint, region and credentials and the target of url:
 * 0, or the failure printed. */
int tool_s3_resolve(const char *url, s3_target *t, s3_config *cfg);

#endif
