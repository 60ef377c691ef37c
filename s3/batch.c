/* batch.c: a blocking pump of S3 requests through one libcurl multi handle
 * (batch.h). Retries wait in a list ordered by nothing but their due time,
 * scanned on each turn: a pump holds at most `parallel` of them. */
#include "batch.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

typedef struct slot {
        s3_request *r;
        unsigned tries;
        uint64_t due_ns; /* waiting to be tried again at, or 0: in flight */
} slot;

static uint64_t now_ns(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static uint64_t rnd(void) {
        uint64_t v = 0;
        if (getrandom(&v, sizeof(v), GRND_NONBLOCK) != (ssize_t)sizeof(v))
                v = now_ns() * 0x9e3779b97f4a7c15ull;
        return v;
}

int s3_pump(const s3_pump_ops *ops, void *arg, unsigned parallel, unsigned attempts,
            s3_error *err) {
        CURLM *m = NULL;
        slot *slots = NULL;
        size_t used = 0;
        int more = 1, rc = 0;

        if (parallel == 0)
                parallel = 1;
        if (s3_global_init() < 0)
                return s3_error_set(err, EIO, "libcurl did not initialise");
        m = curl_multi_init();
        slots = calloc(parallel, sizeof(*slots));
        if (!m || !slots) {
                rc = s3_error_set(err, ENOMEM, "no memory for requests");
                goto out;
        }
        for (;;) {
                uint64_t now = now_ns(), wake = UINT64_MAX;
                /* start what is due, and new requests while there is room */
                for (size_t i = 0; i < used; i++) {
                        if (slots[i].due_ns && slots[i].due_ns <= now) {
                                slots[i].due_ns = 0;
                                s3_request_rewind(slots[i].r);
                                curl_multi_add_handle(m, slots[i].r->easy);
                        } else if (slots[i].due_ns && slots[i].due_ns < wake) {
                                wake = slots[i].due_ns;
                        }
                }
                while (more && used < parallel) {
                        s3_request *r = ops->next(arg);
                        if (!r) {
                                more = 0;
                                break;
                        }
                        slots[used++] = (slot){ .r = r, .tries = 1 };
                        curl_multi_add_handle(m, r->easy);
                }
                if (used == 0)
                        break;
                int running = 0;
                if (curl_multi_perform(m, &running) != CURLM_OK) {
                        rc = s3_error_set(err, EIO, "libcurl's multi handle failed");
                        goto out;
                }
                CURLMsg *msg;
                int left, progressed = 0;
                while ((msg = curl_multi_info_read(m, &left))) {
                        if (msg->msg != CURLMSG_DONE)
                                continue;
                        CURL *e = msg->easy_handle;
                        CURLcode cc = msg->data.result;
                        size_t i;
                        for (i = 0; i < used && slots[i].r->easy != e; i++)
                                ;
                        curl_multi_remove_handle(m, e);
                        if (i == used)
                                continue;
                        s3_error e1 = {0};
                        int r1 = s3_request_result(slots[i].r, cc, &e1);
                        if (r1 < 0 && slots[i].r->transient && slots[i].tries < attempts) {
                                slots[i].due_ns = now_ns() + s3_backoff_ns(slots[i].tries, rnd());
                                slots[i].tries++;
                                continue;
                        }
                        s3_request *done = slots[i].r;
                        slots[i] = slots[--used];
                        progressed = 1;
                        rc = ops->done(arg, done, r1, &e1);
                        if (rc < 0)
                                goto out;
                }
                if (progressed) {
                        more = 1; /* next() may have more now */
                        continue;
                }
                if (running == 0 && wake == UINT64_MAX)
                        continue; /* only due retries, or new work: loop */
                int ms = 1000;
                if (wake != UINT64_MAX) {
                        uint64_t t = now_ns();
                        ms = wake <= t ? 0 : (int)((wake - t) / 1000000 + 1);
                        if (ms > 1000)
                                ms = 1000;
                }
                curl_multi_poll(m, NULL, 0, ms, NULL);
        }
out:
        if (m) {
                for (size_t i = 0; i < used; i++)
                        if (!slots[i].due_ns)
                                curl_multi_remove_handle(m, slots[i].r->easy);
                curl_multi_cleanup(m);
        }
        free(slots);
        return rc;
}

typedef struct run_state {
        s3_request *const *r;
        size_t n, next;
        int *rc;
        s3_error *errs;
        int first;
} run_state;

static s3_request *run_next(void *arg) {
        run_state *s = arg;
        return s->next < s->n ? s->r[s->next++] : NULL;
}

static int run_done(void *arg, s3_request *r, int rc, const s3_error *err) {
        run_state *s = arg;
        size_t i;
        for (i = 0; i < s->n && s->r[i] != r; i++)
                ;
        if (s->rc)
                s->rc[i] = rc;
        if (s->errs)
                s->errs[i] = *err;
        if (rc < 0 && !s->first)
                s->first = rc;
        return 0;
}

int s3_run(s3_request *const *r, size_t n, unsigned parallel, unsigned attempts, int *rc,
           s3_error *errs) {
        run_state s = { .r = r, .n = n, .rc = rc, .errs = errs };
        s3_pump_ops ops = { run_next, run_done };
        s3_error perr = {0};
        int k = s3_pump(&ops, &s, parallel, attempts, &perr);
        if (k < 0) {
                for (size_t i = 0; i < n; i++) {
                        if (rc)
                                rc[i] = k;
                        if (errs)
                                errs[i] = perr;
                }
                return k;
        }
        return s.first;
}
