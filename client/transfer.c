/* transfer.c: what push and pull share (transfer.h): the progress line, one
 * request with retries (the manifests), a URL resolved as every S3 tool
 * resolves it (s3/creds.h).
 */
#include "transfer.h"

#include <stdio.h>
#include <time.h>

#include "tool.h"

uint64_t tool_mono_ns(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

void tool_progress_show(tool_progress *p, int final) {
        uint64_t now = tool_mono_ns();
        if (!final && now - p->last_ns < (p->tty ? 200000000ull : 2000000000ull))
                return;
        p->last_ns = now;
        double s = (double)(now - p->t0_ns) / 1e9, mib = (double)p->done / 1048576.0;
        fprintf(stderr, "%s%s %.1f of %.1f MiB (%.0f%%), %.1f MiB/s%s%s", p->tty ? "\r" : "",
                p->verb, mib, (double)p->total / 1048576.0,
                p->total ? 100.0 * (double)p->done / (double)p->total : 100.0,
                s > 0 ? mib / s : 0.0, p->tty ? "\033[K" : "", final || !p->tty ? "\n" : "");
}

int tool_s3_one(const s3_target *t, const s3_creds *c, const s3_spec *sp, s3_error *err,
                uint8_t **ret_body, uint64_t *ret_len) {
        s3_request r;
        int rc = s3_request_init(&r, t, c, sp, err), k;
        if (rc < 0)
                return rc;
        s3_request *rr = &r;
        rc = s3_run(&rr, 1, 1, TOOL_ATTEMPTS, &k, err);
        if (rc == 0 && ret_body)
                *ret_body = s3_request_take_body(&r, ret_len);
        s3_request_fini(&r);
        return rc;
}

int tool_s3_resolve(const char *url, s3_target *t, s3_config *cfg) {
        s3_error err = {0};
        if (s3_config_resolve(cfg, &err) < 0 ||
            s3_target_init(t, url, cfg->endpoint, cfg->region, cfg->addressing, &err) < 0)
                return tool_fail_msg("%s", err.message);
        return 0;
}
