/* metrics.c: Prometheus text of the daemon and its loaders (metrics.h).
 *
 * Names follow Prometheus' conventions: a `zrecord_` prefix, base units
 * (seconds, bytes) in the name, `_total` on counters, histograms as
 * `_bucket{le=...}`, `_sum` and `_count`. Times are kept in integer
 * nanoseconds and printed as exact decimal seconds. Families come one after
 * another (HELP, TYPE, then every sample), as the format requires, so the
 * views of the loaders are taken once and kept for all of them.
 */
#include "server/metrics.h"

#include <errno.h>
#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "loader/loader.h"
#include "loader/tokindex.h"
#include "server/lview.h"
#include "server/registry.h"
#include "server/request.h"
#include "server/users.h"
#include "server/watch.h"

enum zr_metrics_scope zr_metrics_scope_of(zr_server *s, uid_t uid) {
        return zr_users_trusted(s->users, uid) ? ZR_METRICS_ALL : ZR_METRICS_OWN;
}

/* ns as decimal seconds, exactly, without trailing zeros: "0.000025", "10". */
static void fmt_seconds(char *buf, size_t size, uint64_t ns) {
        int n = snprintf(buf, size, "%" PRIu64 ".%09" PRIu64, ns / 1000000000u, ns % 1000000000u);
        while (n > 0 && (size_t)n < size && buf[n - 1] == '0')
                buf[--n] = 0;
        if (n > 0 && (size_t)n < size && buf[n - 1] == '.')
                buf[--n] = 0;
}

static void put_seconds(FILE *f, uint64_t ns) {
        char b[48];
        fmt_seconds(b, sizeof(b), ns);
        fputs(b, f);
}

static void family(FILE *f, const char *name, const char *type, const char *help) {
        fprintf(f, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* A label value, escaped (the text format: backslash, quote, newline). */
static void put_label_value(FILE *f, const char *v) {
        for (; *v; v++) {
                if (*v == '\\' || *v == '"')
                        fputc('\\', f);
                if (*v == '\n') {
                        fputs("\\n", f);
                        continue;
                }
                fputc(*v, f);
        }
}

/* ---- the loaders' families -------------------------------------------------- */

typedef struct views {
        zr_lview *v;
        size_t n, cap;
} views;

static int collect(const zr_lview *v, void *arg) {
        views *vs = arg;
        if (vs->n == vs->cap) {
                size_t cap = vs->cap ? 2 * vs->cap : 16;
                zr_lview *grown = realloc(vs->v, cap * sizeof(*grown));
                if (!grown)
                        return 1;
                vs->v = grown;
                vs->cap = cap;
        }
        vs->v[vs->n++] = *v;
        return 0;
}

/* name{pid=..,uid=..,loader=..,dataset=..[,extra]} (no value) */
static void loader_sample(FILE *f, const char *name, const zr_lview *v, const char *extra) {
        fprintf(f, "%s{pid=\"%d\",uid=\"%u\",loader=\"%" PRIu32 "\",dataset=\"", name, (int)v->pid,
                (unsigned)v->uid, v->id);
        put_label_value(f, v->track->dataset);
        fprintf(f, "\"%s%s} ", extra ? "," : "", extra ? extra : "");
}

typedef struct counter_family {
        const char *name, *help;
        enum zr_tel_counter c;
        int seconds; /* the counter is in ns: print seconds */
} counter_family;

static const counter_family loader_counters[] = {
        { "zrecord_loader_batches_total", "Batches announced to the loader's client.",
          ZR_TEL_BATCHES, 0 },
        { "zrecord_loader_bytes_total", "Bytes of those batches, every stream's.", ZR_TEL_BYTES,
          0 },
        { "zrecord_loader_wait_seconds_total",
          "Time the consumer waited for batches, as its client reports it.", ZR_TEL_WAIT_NS, 1 },
        { "zrecord_loader_gathers_total", "Gathers the loader ran (for its whole group).",
          ZR_TEL_FILLS, 0 },
        { "zrecord_loader_gather_seconds_total", "Wall time of those gathers.", ZR_TEL_FILL_NS,
          1 },
        { "zrecord_loader_device_read_bytes_total",
          "Bytes read from the device for the loader: its reads ahead and its sampled faults.",
          ZR_TEL_DEVICE_BYTES, 0 },
        { "zrecord_loader_cache_hits_total", "Decoded-record cache lookups that found the record.",
          ZR_TEL_HITS, 0 },
        { "zrecord_loader_cache_misses_total", "Decoded-record cache lookups that did not.",
          ZR_TEL_MISSES, 0 },
};

static const struct {
        const char *stage;
        enum zr_tel_counter c;
} stage_counters[] = {
        { "lookup", ZR_TEL_LOOKUP_NS },   { "read", ZR_TEL_READ_NS },
        { "decode", ZR_TEL_DECODE_NS },   { "copy", ZR_TEL_COPY_NS },
        { "io_wait", ZR_TEL_IO_WAIT_NS }, { "queue", ZR_TEL_QUEUE_NS },
};

static void put_histogram(FILE *f, const char *name, const zr_lview *v, const zr_latency *h) {
        char le[64], b[48];
        for (unsigned i = 0; i < ZR_LATENCY_LE; i++) {
                fmt_seconds(b, sizeof(b), zr_latency_le_ns[i]);
                snprintf(le, sizeof(le), "le=\"%s\"", b);
                loader_sample(f, name, v, le);
                fprintf(f, "%" PRIu64 "\n", zr_latency_cumulative(h, i));
        }
        loader_sample(f, name, v, "le=\"+Inf\"");
        fprintf(f, "%" PRIu64 "\n", h->samples);
}

static void put_loaders(FILE *f, const views *vs) {
        static const char *const windows[ZR_TEL_NWINDOWS] = { "1s", "10s", "60s" };
        static const enum zr_verdict verdicts[] = {
                ZR_VERDICT_DATA_BOUND, ZR_VERDICT_CONSUMER_BOUND, ZR_VERDICT_BALANCED,
                ZR_VERDICT_IDLE, ZR_VERDICT_UNKNOWN,
        };
        static const enum zr_stage stages[] = {
                ZR_STAGE_LOOKUP, ZR_STAGE_IO, ZR_STAGE_DECODE, ZR_STAGE_COPY, ZR_STAGE_CONTENTION,
                ZR_STAGE_REMOTE, ZR_STAGE_NONE,
        };
        char extra[64];

        for (size_t k = 0; k < sizeof(loader_counters) / sizeof(loader_counters[0]); k++) {
                const counter_family *cf = &loader_counters[k];
                family(f, cf->name, "counter", cf->help);
                for (size_t i = 0; i < vs->n; i++) {
                        uint64_t x = vs->v[i].tel.total.v[cf->c];
                        loader_sample(f, cf->name, &vs->v[i], NULL);
                        if (cf->seconds)
                                put_seconds(f, x);
                        else
                                fprintf(f, "%" PRIu64, x);
                        fputc('\n', f);
                }
        }
        family(f, "zrecord_loader_stage_seconds_total", "counter",
               "Where the loader's batch time went: its gathers by stage (lookup, read, decode, "
               "copy), waits for reads ahead (io_wait) and for a worker while other loaders' "
               "work held them all (queue).");
        for (size_t i = 0; i < vs->n; i++)
                for (size_t s = 0; s < sizeof(stage_counters) / sizeof(stage_counters[0]); s++) {
                        snprintf(extra, sizeof(extra), "stage=\"%s\"", stage_counters[s].stage);
                        loader_sample(f, "zrecord_loader_stage_seconds_total", &vs->v[i], extra);
                        put_seconds(f, vs->v[i].tel.total.v[stage_counters[s].c]);
                        fputc('\n', f);
                }
        family(f, "zrecord_loader_step", "gauge", "The next step the loader announces.");
        for (size_t i = 0; i < vs->n; i++) {
                loader_sample(f, "zrecord_loader_step", &vs->v[i], NULL);
                fprintf(f, "%" PRIu64 "\n", vs->v[i].k.step);
        }
        family(f, "zrecord_loader_prefetch_depth_steps", "gauge",
               "Steps the loader's group reads ahead now.");
        for (size_t i = 0; i < vs->n; i++) {
                loader_sample(f, "zrecord_loader_prefetch_depth_steps", &vs->v[i], NULL);
                fprintf(f, "%" PRIu32 "\n", vs->v[i].tel.prefetch_depth);
        }
        family(f, "zrecord_loader_batches_per_second", "gauge",
               "Batches announced per second over the last 1, 10 and 60 s.");
        for (size_t i = 0; i < vs->n; i++)
                for (unsigned w = 0; w < ZR_TEL_NWINDOWS; w++) {
                        const zr_tel_span *sp = &vs->v[i].tel.w[w];
                        snprintf(extra, sizeof(extra), "window=\"%s\"", windows[w]);
                        loader_sample(f, "zrecord_loader_batches_per_second", &vs->v[i], extra);
                        fprintf(f, "%.6f\n", sp->span_ns ? (double)sp->v[ZR_TEL_BATCHES] * 1e9 /
                                                                   (double)sp->span_ns
                                                         : 0.0);
                }
        family(f, "zrecord_loader_wait_ratio", "gauge",
               "Share of the last 1, 10 and 60 s the consumer waited for batches.");
        for (size_t i = 0; i < vs->n; i++)
                for (unsigned w = 0; w < ZR_TEL_NWINDOWS; w++) {
                        snprintf(extra, sizeof(extra), "window=\"%s\"", windows[w]);
                        loader_sample(f, "zrecord_loader_wait_ratio", &vs->v[i], extra);
                        fprintf(f, "%.6f\n", (double)zr_tel_wait_ppm(&vs->v[i].tel.w[w]) / 1e6);
                }
        family(f, "zrecord_loader_verdict", "gauge",
               "1 for the loader's verdict over the last 10 s, 0 for the others.");
        for (size_t i = 0; i < vs->n; i++)
                for (size_t k = 0; k < sizeof(verdicts) / sizeof(verdicts[0]); k++) {
                        snprintf(extra, sizeof(extra), "verdict=\"%s\"",
                                 zr_verdict_name(verdicts[k]));
                        loader_sample(f, "zrecord_loader_verdict", &vs->v[i], extra);
                        fprintf(f, "%d\n", vs->v[i].tel.verdict == verdicts[k]);
                }
        family(f, "zrecord_loader_dominant_stage", "gauge",
               "1 for the stage that took most of the last 10 s of the loader's batch time.");
        for (size_t i = 0; i < vs->n; i++)
                for (size_t k = 0; k < sizeof(stages) / sizeof(stages[0]); k++) {
                        snprintf(extra, sizeof(extra), "stage=\"%s\"", zr_stage_name(stages[k]));
                        loader_sample(f, "zrecord_loader_dominant_stage", &vs->v[i], extra);
                        fprintf(f, "%d\n", vs->v[i].tel.stage == stages[k]);
                }
        static const struct {
                const char *name, *help;
                size_t off;
        } hists[] = {
                { "zrecord_loader_consumer_wait_seconds",
                  "The consumer's wait per batch, as its client reports it.",
                  offsetof(zr_loader_telemetry, wait) },
                { "zrecord_loader_ready_wait_seconds",
                  "How long a batch waited, announced, for the consumer to take it.",
                  offsetof(zr_loader_telemetry, ready) },
                { "zrecord_loader_gather_duration_seconds", "Wall time per gather.",
                  offsetof(zr_loader_telemetry, fill) },
        };
        for (size_t k = 0; k < sizeof(hists) / sizeof(hists[0]); k++) {
                char name[96];
                family(f, hists[k].name, "histogram", hists[k].help);
                for (size_t i = 0; i < vs->n; i++) {
                        const zr_latency *h = (const zr_latency *)((const char *)&vs->v[i].tel +
                                                                   hists[k].off);
                        snprintf(name, sizeof(name), "%s_bucket", hists[k].name);
                        put_histogram(f, name, &vs->v[i], h);
                        snprintf(name, sizeof(name), "%s_sum", hists[k].name);
                        loader_sample(f, name, &vs->v[i], NULL);
                        put_seconds(f, h->sum_ns);
                        fputc('\n', f);
                        snprintf(name, sizeof(name), "%s_count", hists[k].name);
                        loader_sample(f, name, &vs->v[i], NULL);
                        fprintf(f, "%" PRIu64 "\n", h->samples);
                }
        }
}

/* ---- the daemon's families ---------------------------------------------------- */

typedef struct tally {
        unsigned by[ZR_VERDICT_BALANCED + 1];
} tally;

static int count_verdict(const zr_lview *v, void *arg) {
        tally *t = arg;
        if ((unsigned)v->tel.verdict <= ZR_VERDICT_BALANCED)
                t->by[v->tel.verdict]++;
        return 0;
}

static void gauge(FILE *f, const char *name, const char *help, uint64_t v) {
        family(f, name, "gauge", help);
        fprintf(f, "%s %" PRIu64 "\n", name, v);
}

static void counter(FILE *f, const char *name, const char *help, uint64_t v) {
        family(f, name, "counter", help);
        fprintf(f, "%s %" PRIu64 "\n", name, v);
}

static void put_daemon(FILE *f, zr_server *s, uint64_t now_ns) {
        zr_loader_engine_counters lk = {0};
        tally t = {0};

        if (s->loaders)
                zr_loader_engine_counters_get(s->loaders, &lk);
        zr_lview_foreach(s, 0, true, now_ns, count_verdict, &t);
        family(f, "zrecord_info", "gauge", "The daemon's version.");
        fprintf(f, "zrecord_info{version=\"%s\"} 1\n", ZR_VERSION_STRING);
        family(f, "zrecord_uptime_seconds", "gauge", "Time since the daemon started.");
        fputs("zrecord_uptime_seconds ", f);
        put_seconds(f, (zr_server_now_usec() - s->start_usec) * 1000u);
        fputc('\n', f);
        gauge(f, "zrecord_clients", "Connections now.", s->nclients);
        gauge(f, "zrecord_loaders", "Open loaders, every user's.", s->counters.loaders);
        family(f, "zrecord_loaders_by_verdict", "gauge",
               "Open loaders by their verdict over the last 10 s, every user's.");
        for (unsigned v = 0; v <= ZR_VERDICT_BALANCED; v++)
                fprintf(f, "zrecord_loaders_by_verdict{verdict=\"%s\"} %u\n",
                        zr_verdict_name((enum zr_verdict)v), t.by[v]);
        counter(f, "zrecord_batches_total", "Batches announced to loaders since start.",
                lk.batches);
        counter(f, "zrecord_gathers_total", "Gathers: loader fills and READs.",
                s->counters.gathers + lk.gathers);
        counter(f, "zrecord_gathered_bytes_total", "Bytes gathered into rings and read buffers.",
                s->counters.bytes + lk.bytes);
        counter(f, "zrecord_cache_hits_total", "Decoded-record cache lookups that hit.", lk.hits);
        counter(f, "zrecord_cache_misses_total", "Decoded-record cache lookups that missed.",
                lk.misses);
        counter(f, "zrecord_cache_evictions_total", "Decoded-record cache evictions.",
                lk.evictions);
        gauge(f, "zrecord_cache_bytes", "Bytes held by the decoded-record cache.",
              lk.cache_bytes);
        gauge(f, "zrecord_cache_budget_bytes", "The decoded-record cache's budget.",
              lk.cache_budget);
        gauge(f, "zrecord_stores", "Stores open.", zr_registry_count(s->registry));
        if (s->tokstore) {
                zr_tokstore_counters tc;

                zr_tokstore_counters_get(s->tokstore, &tc);
                counter(f, "zrecord_token_index_builds_total",
                        "Packed loaders' cycle indexes built (docs/TOKENS.md).", tc.builds);
                family(f, "zrecord_token_index_build_seconds_total", "counter",
                       "Wall time of those builds, their writing to disk not counted.");
                fputs("zrecord_token_index_build_seconds_total ", f);
                put_seconds(f, tc.build_ns);
                fputc('\n', f);
                counter(f, "zrecord_token_index_loads_total", "Indexes loaded from disk.",
                        tc.loads);
                counter(f, "zrecord_token_index_rejected_total",
                        "Index files that failed a check, removed (and built again).",
                        tc.rejected);
                counter(f, "zrecord_token_index_evictions_total",
                        "Index files removed to stay within token-index bytes.", tc.evicted);
                gauge(f, "zrecord_token_index_files", "Index files on disk.", tc.files);
                gauge(f, "zrecord_token_index_bytes", "Their bytes.", tc.bytes);
                gauge(f, "zrecord_token_index_budget_bytes",
                      "The token-index budget (0: indexes kept in memory only).", tc.budget);
        }
        if (!s->ioq)
                return;
        zr_ioq_stats q;
        zr_latency h;
        zr_ioq_get_stats(s->ioq, &q);
        zr_ioq_get_latency(s->ioq, &h);
        counter(f, "zrecord_prefetch_read_bytes_total", "Bytes read ahead of the loaders.",
                q.bytes);
        counter(f, "zrecord_prefetch_reads_total", "Reads ahead, after merging.", q.reads);
        family(f, "zrecord_prefetch_read_duration_seconds", "histogram",
               "Latency of each read ahead.");
        for (unsigned i = 0; i < ZR_LATENCY_LE; i++) {
                fputs("zrecord_prefetch_read_duration_seconds_bucket{le=\"", f);
                put_seconds(f, zr_latency_le_ns[i]);
                fprintf(f, "\"} %" PRIu64 "\n", zr_latency_cumulative(&h, i));
        }
        fprintf(f, "zrecord_prefetch_read_duration_seconds_bucket{le=\"+Inf\"} %" PRIu64 "\n",
                h.samples);
        fputs("zrecord_prefetch_read_duration_seconds_sum ", f);
        put_seconds(f, h.sum_ns);
        fprintf(f, "\nzrecord_prefetch_read_duration_seconds_count %" PRIu64 "\n", h.samples);
}

int zr_metrics_render(zr_server *s, enum zr_metrics_scope scope, uid_t viewer, char **ret,
                      size_t *len) {
        uint64_t now = zr_loader_now_ns();
        views vs = {0};
        char *buf = NULL;
        size_t blen = 0;
        FILE *f = open_memstream(&buf, &blen);

        if (!f)
                return -ENOMEM;
        put_daemon(f, s, now);
        if (scope != ZR_METRICS_DAEMON) {
                zr_lview_foreach(s, viewer, scope == ZR_METRICS_ALL, now, collect, &vs);
                put_loaders(f, &vs);
                free(vs.v);
        }
        if (fclose(f) != 0 || !buf) {
                free(buf);
                return -ENOMEM;
        }
        *ret = buf;
        *len = blen;
        return 0;
}

/* METRICS (PROTOCOL.md): the text, with STATUS's rule of who sees a loader. */
int zr_handle_metrics(zr_request *rq) {
        zr_server *s = zr_request_server(rq);
        uid_t uid = zr_request_uid(rq);
        char *text = NULL;
        size_t len = 0;
        zr_wire_writer w;

        if (zr_metrics_render(s, zr_metrics_scope_of(s, uid), uid, &text, &len) < 0)
                return zr_request_fail(rq, ENOMEM, "no memory for the metrics");
        zr_reply_begin(rq, &w);
        zr_wire_put_strn(&w, "text", text, len);
        free(text);
        return zr_reply_send(rq, &w, NULL, 0);
}
