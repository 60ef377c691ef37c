/* zrecord.c: the zrecord command-line tool, on libzrc: main(), the shared
 * helpers of tool.h, and the small commands (status, info, stats, verify,
 * compact); cat.c, import.c and where.c hold the larger ones.
 *
 * One function per command. Each connects (exit 3 when no daemon answers),
 * does its requests, prints either text for a person or, with --json, one JSON
 * document on stdout, and returns an exit code of cmdline.h: 0 success, 1 the
 * operation failed (the daemon's error name and message on stderr), 2 a usage
 * error. Errors always go to stderr, also with --json.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "autostart.h"
#include "interrupt.h"
#include "output.h"
#include "staging.h"
#include "tool.h"

static const char *program = "zrecord";

/* Reports the last failure of c on stderr and returns exit code 1. */
int tool_fail_conn(const zrc_conn *c, const char *what) {
        const zrc_error *e = zrc_last_error(c);

        fprintf(stderr, "%s: %s: %s%s%s\n", program, what, e->name[0] ? e->name : "error",
                e->message[0] ? ": " : "", e->message);
        return ZRECORD_EXIT_FAILED;
}

int tool_fail_msg(const char *fmt, ...) {
        va_list ap;

        fprintf(stderr, "%s: ", program);
        va_start(ap, fmt);
        vfprintf(stderr, fmt, ap);
        va_end(ap);
        fputc('\n', stderr);
        return ZRECORD_EXIT_FAILED;
}

int tool_connect(const cmdline *cl, zrc_conn **ret) {
        zrc_error e = { 0 };
        const char *env = getenv("ZRECORD_SOCKET");
        int r = zrc_connect(cl->socket, ret, &e);

        /* None answers at the default paths: start the user's own, as the
         * Python client does (autostart.c), unless the user named a socket. */
        if ((r == -ENOENT || r == -ECONNREFUSED || r == -EPERM) && !cl->socket &&
            !(env && env[0])) {
                char sock[ZRC_SOCKET_PATH_MAX], why[1024];
                int s = autostart_private_daemon(sock, sizeof(sock), why, sizeof(why));

                if (s == 0) {
                        r = zrc_connect(sock, ret, &e);
                } else {
                        fprintf(stderr, "%s: %s%s%s\n", program, e.name[0] ? e.name : "error",
                                e.message[0] ? ": " : "", e.message);
                        fprintf(stderr, "%s: and no private daemon could be started: %s\n"
                                "%s: start one yourself with: zrecordd --socket=%s "
                                "--socket-mode=0600 --idle-exit=60 &  (or python -m loaderx.daemon "
                                "with the same arguments), or point ZRECORD_SOCKET at a running "
                                "daemon\n",
                                program, why, program, sock);
                        return ZRECORD_EXIT_CONNECT;
                }
        }
        if (r < 0) {
                fprintf(stderr, "%s: %s%s%s\n", program, e.name[0] ? e.name : "error",
                        e.message[0] ? ": " : "", e.message);
                /* a daemon that answered but failed the handshake is not a
                 * missing daemon */
                return r == -ZR_E_VERSION || r == -ZR_E_PROTO ? ZRECORD_EXIT_FAILED
                                                              : ZRECORD_EXIT_CONNECT;
        }
        return 0;
}

/* ---- status ------------------------------------------------------------ */

static void print_prefetch_json(const zrc_prefetch_status *p) {
        printf("\"prefetch\": {\"backend\": ");
        out_json_string(stdout, p->backend);
        printf(", \"budget\": %" PRIu64 ", \"bytes\": %" PRIu64 ", \"peak\": %" PRIu64
               ", \"steps\": %" PRIu64 ", \"warm\": %" PRIu64 ", \"busy\": %" PRIu64
               ", \"records\": %" PRIu64 ", \"resident\": %" PRIu64 ", \"cached\": %" PRIu64
               ", \"read_bytes\": %" PRIu64 ", \"reads\": %" PRIu64 ", \"merged\": %" PRIu64
               ", \"in_flight\": %" PRIu64 ", \"queue_depth\": %" PRIu64 ", \"depth\": %" PRIu64
               ", \"waits\": %" PRIu64 ", \"errors\": %" PRIu64 ", \"cancelled\": %" PRIu64
               ", \"planned_steps\": %" PRIu64 ", \"latency_p50_ns\": %" PRIu64
               ", \"latency_p99_ns\": %" PRIu64 ", \"cold\": %" PRIu64 ", \"direct_mode\": ",
               p->budget, p->bytes, p->peak, p->steps, p->warm, p->busy, p->records, p->resident,
               p->cached, p->read_bytes, p->reads, p->merged, p->in_flight, p->queue_depth,
               p->depth, p->waits, p->errors, p->cancelled, p->planned_steps, p->latency_p50_ns,
               p->latency_p99_ns, p->cold);
        out_json_string(stdout, p->direct_mode);
        printf(", \"direct_min\": %" PRIu64 ", \"direct\": %" PRIu64 ", \"fits\": %" PRIu64
               ", \"direct_steps\": %" PRIu64 ", \"direct_bytes\": %" PRIu64
               ", \"direct_copied\": %" PRIu64 ", \"direct_fallbacks\": %" PRIu64
               ", \"direct_errors\": %" PRIu64 "}, ",
               p->direct_min, p->direct, p->fits, p->direct_steps, p->direct_bytes,
               p->direct_copied, p->direct_fallbacks, p->direct_errors);
}

static const struct {
        const char *name;
        size_t offset;
} budgets[] = {
        { "cache", offsetof(zrc_status, budget_cache) },
        { "ring_spare", offsetof(zrc_status, budget_ring_spare) },
        { "prefetch", offsetof(zrc_status, budget_prefetch) },
        { "shm_total", offsetof(zrc_status, budget_shm_total) },
        { "shm_uid", offsetof(zrc_status, budget_shm_uid) },
        { "read_pool", offsetof(zrc_status, budget_read_pool) },
};

static const zrc_budget *budget_at(const zrc_status *st, size_t i) {
        return (const zrc_budget *)((const char *)st + budgets[i].offset);
}

static void print_budgets_json(const zrc_status *st) {
        printf("\"budgets\": {\"memory\": %" PRIu64 ", \"memory_source\": ", st->memory);
        out_json_string(stdout, st->memory_source);
        for (size_t i = 0; i < sizeof(budgets) / sizeof(budgets[0]); i++) {
                printf(", \"%s\": {\"bytes\": %" PRIu64 ", \"source\": ", budgets[i].name,
                       budget_at(st, i)->bytes);
                out_json_string(stdout, budget_at(st, i)->source);
                printf("}");
        }
        printf("}, ");
}

static void print_prefetch_text(const zrc_prefetch_status *p) {
        if (!p->backend[0])
                return;
        printf("prefetch:   %s, %" PRIu64 " of %" PRIu64 " bytes (peak %" PRIu64 "); %" PRIu64
               " steps read ahead, %" PRIu64 " warm; %" PRIu64 " records read (%" PRIu64
               " bytes), %" PRIu64 " resident, %" PRIu64 " decoded in the cache; depth %" PRIu64
               ", %" PRIu64 " waits, %" PRIu64 " errors; latency p50 %.2f ms, p99 %.2f ms\n",
               p->backend, p->bytes, p->budget, p->peak, p->steps, p->warm, p->records,
               p->read_bytes, p->resident, p->cached, p->depth, p->waits, p->errors,
               (double)p->latency_p50_ns / 1e6, (double)p->latency_p99_ns / 1e6);
        printf("            %" PRIu64 " steps cold (read with pread)", p->cold);
        if (p->direct_mode[0])
                printf("; direct reads %s (stores above %" PRIu64 " MiB): %" PRIu64
                       " steps direct, %" PRIu64 " fit; %" PRIu64
                       " fills read with O_DIRECT (%" PRIu64 " bytes, %" PRIu64 " copied), %" PRIu64
                       " fallbacks, %" PRIu64 " errors",
                       p->direct_mode, p->direct_min >> 20, p->direct, p->fits, p->direct_steps,
                       p->direct_bytes, p->direct_copied, p->direct_fallbacks, p->direct_errors);
        printf("\n");
}

static void print_budgets_text(const zrc_status *st) {
        if (!st->memory && !st->budget_cache.source[0])
                return;
        printf("memory:     %" PRIu64 " MiB usable (%s)\n", st->memory >> 20,
               st->memory_source[0] ? st->memory_source : "unknown");
        for (size_t i = 0; i < sizeof(budgets) / sizeof(budgets[0]); i++)
                printf("  budget %-10s %" PRIu64 " MiB (%s)\n", budgets[i].name,
                       budget_at(st, i)->bytes >> 20, budget_at(st, i)->source);
}

/* A loader's telemetry over the last 10 s (docs/TELEMETRY.md), after its
 * counters: the figures `top` shows. */
static void print_telemetry_text(const zrc_loader_status *l) {
        const zrc_loader_telemetry *t = &l->telemetry;
        const zrc_tel_span *w = &t->w10;
        double span = (double)w->span_ns / 1e9;
        if (!t->present)
                return;
        printf("  %s (%s), waits %.1f %% of the last %.0f s, %.1f batches/s; %s; p99 wait %.2f ms, "
               "p99 gather %.2f ms; dataset %s; command %s\n",
               t->verdict, t->stage, span > 0 ? 100.0 * (double)w->wait_ns / (double)w->span_ns : 0,
               span, span > 0 ? (double)w->batches / span : 0,
               t->reports ? "the client reports its waits" : "the client reports no waits",
               (double)t->wait_p99_ns / 1e6, (double)t->fill_p99_ns / 1e6, l->dataset, l->command);
}

static void print_telemetry_json(const zrc_loader_status *l) {
        const zrc_loader_telemetry *t = &l->telemetry;
        if (!t->present)
                return;
        printf(", \"uid\": %" PRIu64 ", \"command\": ", l->uid);
        out_json_string(stdout, l->command);
        printf(", \"dataset\": ");
        out_json_string(stdout, l->dataset);
        printf(", \"verdict\": ");
        out_json_string(stdout, t->verdict);
        printf(", \"stage\": ");
        out_json_string(stdout, t->stage);
        printf(", \"wait_ns_10s\": %" PRIu64 ", \"span_ns_10s\": %" PRIu64
               ", \"batches_10s\": %" PRIu64 ", \"wait_p99_ns\": %" PRIu64
               ", \"fill_p99_ns\": %" PRIu64, t->w10.wait_ns, t->w10.span_ns, t->w10.batches,
               t->wait_p99_ns, t->fill_p99_ns);
}

static int cmd_status(const cmdline *cl, zrc_conn *c) {
        zrc_status *st;

        if (zrc_status_query(c, &st) < 0)
                return tool_fail_conn(c, "status");
        if (cl->json) {
                printf("{\"socket\": ");
                out_json_string(stdout, zrc_socket_path(c));
                printf(", \"daemon\": ");
                out_json_string(stdout, st->daemon);
                printf(", \"uptime_ms\": %" PRIu64 ", \"clients\": %" PRIu64
                       ", \"handles\": %" PRIu64 ", \"shm_bytes\": %" PRIu64
                       ", \"loaders\": %" PRIu64 ", \"batches\": %" PRIu64
                       ", \"gathers\": %" PRIu64 ", \"hits\": %" PRIu64 ", \"misses\": %" PRIu64
                       ", \"bytes\": %" PRIu64 ", \"evictions\": %" PRIu64
                       ", \"shared\": %" PRIu64 ", \"loop_fills\": %" PRIu64
                       ", \"cache\": {\"budget\": %" PRIu64 ", \"bytes\": %" PRIu64
                       ", \"entries\": %" PRIu64 ", \"bypassed\": %" PRIu64 ", \"planned\": %" PRIu64
                       "}, ",
                       st->uptime_ms, st->clients, st->handles, st->shm_bytes, st->loaders,
                       st->batches, st->gathers, st->hits, st->misses, st->bytes, st->evictions,
                       st->shared, st->loop_fills, st->cache_budget, st->cache_bytes,
                       st->cache_entries, st->cache_bypassed, st->cache_planned);
                if (st->ctl_present)
                        printf("\"ctl_batches\": %" PRIu64 ", \"ctl_wakes\": %" PRIu64
                               ", \"ctl_faults\": %" PRIu64 ", ",
                               st->ctl_batches, st->ctl_wakes, st->ctl_faults);
                print_prefetch_json(&st->prefetch);
                print_budgets_json(st);
                printf("\"per_loader\": [");
                for (size_t i = 0; i < st->n_loaders; i++) {
                        const zrc_loader_status *l = &st->per_loader[i];

                        printf("%s{\"pid\": %" PRIu64 ", \"loader\": %u, \"sampler\": ", i ? ", " : "",
                               l->pid, l->loader);
                        out_json_string(stdout, l->sampler);
                        printf(", \"batch_size\": %" PRIu64 ", \"streams\": %" PRIu64
                               ", \"step\": %" PRIu64 ", \"batches\": %" PRIu64
                               ", \"gathers\": %" PRIu64 ", \"hits\": %" PRIu64
                               ", \"misses\": %" PRIu64 ", \"bytes\": %" PRIu64
                               ", \"evictions\": %" PRIu64 ", \"shared\": %" PRIu64
                               ", \"io_waits\": %" PRIu64,
                               l->batch_size, l->streams, l->step, l->batches, l->gathers, l->hits,
                               l->misses, l->bytes, l->evictions, l->shared, l->io_waits);
                        if (l->depth_present)
                                printf(", \"depth\": %" PRIu64 ", \"depth_raises\": %" PRIu64,
                                       l->depth, l->depth_raises);
                        print_telemetry_json(l);
                        printf("}");
                }
                printf("]}\n");
        } else {
                printf("daemon:     %s at %s\n", st->daemon, zrc_socket_path(c));
                printf("uptime:     %.1f s\n", (double)st->uptime_ms / 1000.0);
                printf("clients:    %" PRIu64 "\n", st->clients);
                printf("handles:    %" PRIu64 "\n", st->handles);
                printf("shm bytes:  %" PRIu64 "\n", st->shm_bytes);
                printf("loaders:    %" PRIu64 "\n", st->loaders);
                printf("batches:    %" PRIu64 "\n", st->batches);
                printf("gathers:    %" PRIu64 " (%" PRIu64 " batches shared without one)\n",
                       st->gathers, st->shared);
                printf("loop fills: %" PRIu64 "\n", st->loop_fills);
                if (st->ctl_present)
                        printf("control:    %" PRIu64 " batches announced in control memory, %"
                               PRIu64 " wakes sent, %" PRIu64 " loaders ended for a fault in it\n",
                               st->ctl_batches, st->ctl_wakes, st->ctl_faults);
                printf("bytes:      %" PRIu64 "\n", st->bytes);
                printf("cache:      %" PRIu64 " of %" PRIu64 " bytes, %" PRIu64
                       " entries; %" PRIu64 " hits, %" PRIu64 " misses, %" PRIu64 " evictions\n",
                       st->cache_bytes, st->cache_budget, st->cache_entries, st->hits, st->misses,
                       st->evictions);
                if (st->hits + st->misses)
                        printf("            hit ratio %.3f; %" PRIu64 " records bypassed, %" PRIu64
                               " uses planned\n", (double)st->hits / (double)(st->hits + st->misses),
                               st->cache_bypassed, st->cache_planned);
                print_prefetch_text(&st->prefetch);
                print_budgets_text(st);
                for (size_t i = 0; i < st->n_loaders; i++) {
                        const zrc_loader_status *l = &st->per_loader[i];

                        printf("loader %u of pid %" PRIu64 ": %s, batch %" PRIu64 ", %" PRIu64
                               " streams, step %" PRIu64 "; %" PRIu64 " batches, %" PRIu64
                               " gathers, %" PRIu64 " hits, %" PRIu64 " misses, %" PRIu64
                               " bytes, %" PRIu64 " evictions, %" PRIu64 " shared, %" PRIu64
                               " waited for reads",
                               l->loader, l->pid, l->sampler, l->batch_size, l->streams, l->step,
                               l->batches, l->gathers, l->hits, l->misses, l->bytes, l->evictions,
                               l->shared, l->io_waits);
                        if (l->depth_present)
                                printf("; depth %" PRIu64 " (raised %" PRIu64 " times)", l->depth,
                                       l->depth_raises);
                        printf("\n");
                        print_telemetry_text(l);
                }
        }
        zrc_status_free(st);
        return ZRECORD_EXIT_OK;
}

/* ---- metrics ----------------------------------------------------------- */

static int cmd_metrics(const cmdline *cl, zrc_conn *c) {
        char *text = NULL;
        size_t len = 0;

        if (zrc_metrics_text(c, &text, &len) < 0)
                return tool_fail_conn(c, "metrics");
        fwrite(text, 1, len, stdout);
        free(text);
        return ZRECORD_EXIT_OK;
}

/* ---- info, stats, verify, compact -------------------------------------- */

void tool_print_schema_json(const zrc_schema *s) {
        printf("\"kind\": \"%s\", \"dtype\": ", s->kind == ZRC_DENSE ? "dense" : "ragged");
        out_json_string(stdout, s->dtype);
        if (s->kind == ZRC_DENSE) {
                printf(", \"item_shape\": ");
                out_shape(stdout, s->item_shape, s->ndim, true);
        } else {
                printf(", \"ndim\": %u", s->ndim);
        }
        printf(", \"codec\": \"%s\"", zrc_codec_name(s->codec));
}

static void print_schema_text(const zrc_schema *s, const char *indent) {
        printf("%skind:       %s\n", indent, s->kind == ZRC_DENSE ? "dense" : "ragged");
        printf("%sdtype:      %s\n", indent, s->dtype);
        if (s->kind == ZRC_DENSE) {
                printf("%sitem_shape: ", indent);
                out_shape(stdout, s->item_shape, s->ndim, false);
                printf("\n");
        } else {
                printf("%sndim:       %u\n", indent, s->ndim);
        }
        printf("%scodec:      %s\n", indent, zrc_codec_name(s->codec));
}

/* Whether `path` should be opened as one dataset: it holds a meta.zr, or it
 * cannot be examined (the open then says why). */
bool tool_is_store_dir(const char *path) {
        struct stat st;
        char meta[4096];

        if (stat(path, &st) < 0 || !S_ISDIR(st.st_mode))
                return true;
        if ((size_t)snprintf(meta, sizeof(meta), "%s/meta.zr", path) >= sizeof(meta))
                return true; /* let the open report it */
        return stat(meta, &st) == 0 || errno != ENOENT;
}

static int info_set(const cmdline *cl, zrc_conn *c) {
        zrc_set *set;

        if (zrc_set_open(c, cl->path, 0, &set) < 0) {
                if (zrc_last_error(c)->code == ENOENT) {
                        fprintf(stderr, "%s: info: ZR_E_NOT_STORE: %s holds no store\n", program,
                                cl->path);
                        return ZRECORD_EXIT_FAILED;
                }
                return tool_fail_conn(c, "info");
        }
        if (cl->json) {
                printf("{\"path\": ");
                out_json_string(stdout, cl->path);
                printf(", \"kind\": \"set\", \"length\": %" PRIu64 ", \"streams\": [",
                       zrc_set_length(set));
        } else {
                printf("path:       %s\n", cl->path);
                printf("set of %zu streams, length %" PRIu64 "\n", zrc_set_streams(set),
                       zrc_set_length(set));
        }
        for (size_t i = 0; i < zrc_set_streams(set); i++) {
                zrc_dataset *d = zrc_set_stream(set, i);
                zrc_info info;

                if (zrc_dataset_info(d, &info) < 0) {
                        if (cl->json)
                                printf("]}\n");
                        zrc_set_close(set);
                        return tool_fail_conn(c, "info");
                }
                if (cl->json) {
                        printf("%s{\"name\": ", i ? ", " : "");
                        out_json_string(stdout, zrc_set_stream_name(set, i));
                        printf(", \"length\": %" PRIu64 ", ", info.length);
                        tool_print_schema_json(&info.schema);
                        printf(", \"has_dict\": %s}", info.has_dict ? "true" : "false");
                } else {
                        printf("stream %s:\n", zrc_set_stream_name(set, i));
                        printf("  length:     %" PRIu64 "\n", info.length);
                        print_schema_text(&info.schema, "  ");
                        printf("  has_dict:   %s\n", info.has_dict ? "yes" : "no");
                }
        }
        if (cl->json)
                printf("]}\n");
        zrc_set_close(set);
        return ZRECORD_EXIT_OK;
}

int tool_open_dataset(const cmdline *cl, zrc_conn *c, unsigned flags, const char *what,
                        zrc_dataset **ret) {
        if (zrc_dataset_open(c, cl->path, flags, ret) < 0)
                return tool_fail_conn(c, what);
        return 0;
}

static int cmd_info(const cmdline *cl, zrc_conn *c) {
        zrc_dataset *d;
        zrc_info info;
        int r;

        if (!tool_is_store_dir(cl->path) && zrc_has_feature(c, "msset"))
                return info_set(cl, c);
        if (strncmp(cl->path, "s3://", 5) == 0 && zrc_has_feature(c, "msset")) {
                /* in object storage: a store's manifest, else a set's */
                if (zrc_dataset_open(c, cl->path, 0, &d) < 0) {
                        if (zrc_last_error(c)->code != ENOENT)
                                return tool_fail_conn(c, "info");
                        return info_set(cl, c);
                }
        } else {
                r = tool_open_dataset(cl, c, 0, "info", &d);
                if (r)
                        return r;
        }
        if (zrc_dataset_info(d, &info) < 0) {
                zrc_dataset_close(d);
                return tool_fail_conn(c, "info");
        }
        if (cl->json) {
                printf("{\"path\": ");
                out_json_string(stdout, cl->path);
                printf(", \"length\": %" PRIu64 ", ", info.length);
                tool_print_schema_json(&info.schema);
                if (info.schema.kind == ZRC_DENSE)
                        printf(", \"record_bytes\": %" PRIu64, zrc_schema_record_bytes(&info.schema));
                printf(", \"has_dict\": %s, \"writable\": %s}\n", info.has_dict ? "true" : "false",
                       info.writable ? "true" : "false");
        } else {
                printf("path:       %s\n", cl->path);
                printf("length:     %" PRIu64 "\n", info.length);
                print_schema_text(&info.schema, "");
                if (info.schema.kind == ZRC_DENSE)
                        printf("record:     %" PRIu64 " bytes\n", zrc_schema_record_bytes(&info.schema));
                if (info.schema.codec == ZRC_CODEC_ZSTD_DICT)
                        printf("dictionary: %s\n", info.has_dict ? "installed" : "missing");
        }
        zrc_dataset_close(d);
        return ZRECORD_EXIT_OK;
}

static void print_stats(const cmdline *cl, const zrc_stats *s) {
        if (cl->json) {
                printf("{\"path\": ");
                out_json_string(stdout, cl->path);
                printf(", \"records\": %" PRIu64 ", \"live_bytes\": %" PRIu64
                       ", \"chunk_bytes\": %" PRIu64 ", \"reclaimable\": %" PRIu64,
                       s->records, s->live_bytes, s->chunk_bytes, s->reclaimable);
                if (s->has_logic_bytes)
                        printf(", \"logic_bytes\": %" PRIu64, s->logic_bytes);
                printf("}\n");
        } else {
                printf("path:        %s\n", cl->path);
                printf("records:     %" PRIu64 "\n", s->records);
                printf("live_bytes:  %" PRIu64 "\n", s->live_bytes);
                printf("chunk_bytes: %" PRIu64 "\n", s->chunk_bytes);
                printf("reclaimable: %" PRIu64 "\n", s->reclaimable);
                if (s->has_logic_bytes)
                        printf("logic_bytes: %" PRIu64 "\n", s->logic_bytes);
        }
}

/* stats and compact: a call that answers with the dataset's stats. */
static int stats_command(const cmdline *cl, zrc_conn *c, unsigned flags, const char *what,
                         int (*call)(zrc_dataset *d, zrc_stats *ret)) {
        zrc_dataset *d;
        zrc_stats s;
        int r;

        r = tool_open_dataset(cl, c, flags, what, &d);
        if (r)
                return r;
        if (call(d, &s) < 0) {
                zrc_dataset_close(d);
                return tool_fail_conn(c, what);
        }
        print_stats(cl, &s);
        zrc_dataset_close(d);
        return ZRECORD_EXIT_OK;
}

static int cmd_stats(const cmdline *cl, zrc_conn *c) {
        return stats_command(cl, c, 0, "stats", zrc_dataset_stats);
}

static int cmd_compact(const cmdline *cl, zrc_conn *c) {
        return stats_command(cl, c, ZRC_OPEN_WRITABLE, "compact", zrc_dataset_compact);
}

/* All or nothing: DST is built beside it and renamed onto it (staging.h); Ctrl-C
 * stops the CONVERT under way at once (interrupt.h). */
static int cmd_convert(const cmdline *cl, zrc_conn *c) {
        char err[PATH_MAX + 128];
        tool_staging stage;
        uint64_t count = 0;
        zrc_schema s;
        int r;

        interrupt_arm(c);
        if (staging_begin(&stage, cl->dst, err, sizeof(err)) < 0)
                return tool_fail_msg("convert: %s", err);
        r = interrupt_caught() ? -EINTR : zrc_convert(c, cl->path, stage.path, cl->to, &count, &s);
        if (r == 0 && !interrupt_caught() && staging_commit(&stage, err, sizeof(err)) < 0) {
                tool_fail_msg("convert: %s", err);
                r = -EIO;
        } else if (r < 0 && !interrupt_caught()) {
                tool_fail_conn(c, "convert");
        }
        interrupt_connection(NULL);
        if (r < 0 || interrupt_caught()) {
                if (interrupt_caught())
                        tool_fail_msg("convert: interrupted (signal %d)", interrupt_caught());
                if (!staging_abort(&stage))
                        return tool_fail_msg("convert: %s is left beside %s: the next import or "
                                             "convert into %s removes it", stage.root, cl->dst,
                                             cl->dst);
                return tool_fail_msg("convert: nothing was written to %s", cl->dst);
        }
        if (cl->json)
                printf("{\"records\": %" PRIu64 ", \"to\": \"%s\", \"ndim\": %u}\n", count,
                       cl->to == ZRC_LAYOUT_LX157 ? "loaderx157" : "zrecord", s.ndim);
        else
                printf("%" PRIu64 " records converted to %s's layout in %s\n", count,
                       cl->to == ZRC_LAYOUT_LX157 ? "loaderx 1.5.7" : "zrecord", cl->dst);
        return ZRECORD_EXIT_OK;
}

static int cmd_verify(const cmdline *cl, zrc_conn *c) {
        zrc_verify_result *v;
        zrc_dataset *d;
        int r;

        v = malloc(sizeof(*v));
        if (!v)
                return tool_fail_msg("out of memory");
        r = tool_open_dataset(cl, c, 0, "verify", &d);
        if (r) {
                free(v);
                return r;
        }
        if (zrc_dataset_verify(d, v) < 0) {
                zrc_dataset_close(d);
                free(v);
                return tool_fail_conn(c, "verify");
        }
        if (cl->json) {
                printf("{\"path\": ");
                out_json_string(stdout, cl->path);
                printf(", \"ok\": %s, \"records\": %" PRIu64 ", \"bad\": %" PRIu64
                       ", \"bad_indices\": [",
                       v->ok ? "true" : "false", v->records, v->bad);
                for (size_t i = 0; i < v->n_bad_indices; i++)
                        printf("%s%" PRIu64, i ? ", " : "", v->bad_indices[i]);
                printf("]}\n");
        } else {
                printf("%s: %" PRIu64 " records checked, %" PRIu64 " bad\n", cl->path, v->records,
                       v->bad);
                if (v->n_bad_indices) {
                        printf("bad indices:");
                        for (size_t i = 0; i < v->n_bad_indices; i++)
                                printf(" %" PRIu64, v->bad_indices[i]);
                        printf("%s\n", v->bad > v->n_bad_indices ? " ..." : "");
                }
        }
        r = v->ok ? ZRECORD_EXIT_OK : ZRECORD_EXIT_FAILED;
        if (!v->ok)
                fprintf(stderr, "%s: verify: %" PRIu64 " bad records in %s\n", program, v->bad,
                        cl->path);
        zrc_dataset_close(d);
        free(v);
        return r;
}

/* ---- main -------------------------------------------------------------- */

int main(int argc, char **argv) {
        static int (*const commands[_CMD_MAX])(const cmdline *, zrc_conn *) = {
                [CMD_STATUS] = cmd_status,   [CMD_INFO] = cmd_info,
                [CMD_STATS] = cmd_stats,     [CMD_VERIFY] = cmd_verify,
                [CMD_COMPACT] = cmd_compact, [CMD_CAT] = tool_cmd_cat,
                [CMD_TOP] = tool_cmd_top,    [CMD_METRICS] = cmd_metrics,
                [CMD_CONVERT] = cmd_convert,
                [CMD_WHERE] = tool_cmd_where, [CMD_BATCH] = tool_cmd_batch,
        };
        zrc_conn *c = NULL;
        cmdline cl;
        int r;

        if (tool_import_from_wanted(argc, argv))
                return tool_import_from(argc, argv); /* returns only if it cannot start */
        r = cmdline_parse(argc, argv, &cl);
        if (r < 0) {
                if (r == -ENOMEM)
                        fprintf(stderr, "%s: out of memory\n", program);
                else
                        fprintf(stderr, "%s: %s\nTry '%s%s%s --help'.\n", program, cl.error,
                                program, cl.cmd ? " " : "", cl.cmd ? cmdline_cmd_name(cl.cmd) : "");
                cmdline_done(&cl);
                return ZRECORD_EXIT_USAGE;
        }
        if (cl.help) {
                fputs(cmdline_help(cl.cmd), stdout);
                cmdline_done(&cl);
                return ZRECORD_EXIT_OK;
        }
        if (cl.version) {
                printf("zrecord %s\n", ZR_VERSION_STRING);
                cmdline_done(&cl);
                return ZRECORD_EXIT_OK;
        }
        if (cl.cmd == CMD_IMPORT) {
                r = tool_cmd_import(&cl); /* checks its file before it connects */
        } else if (cl.cmd == CMD_PUSH || cl.cmd == CMD_PULL) {
                r = cl.cmd == CMD_PUSH ? tool_cmd_push(&cl) : tool_cmd_pull(&cl);
        } else {
                r = tool_connect(&cl, &c);
                if (r == 0) {
                        r = commands[cl.cmd](&cl, c);
                        zrc_disconnect(c);
                }
        }
        if (fflush(stdout) != 0 && r == ZRECORD_EXIT_OK)
                r = ZRECORD_EXIT_FAILED;
        cmdline_done(&cl);
        interrupt_exit(); /* ends the process by a signal import or convert caught */
        return r;
}
