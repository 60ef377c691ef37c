/* lview.c: a loader's view for STATUS, metrics and the watch (lview.h). */
#include "server/lview.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "server/session.h"
#include "server/users.h"
#include "store/store.h"

zr_ltrack *zr_ltrack_free(zr_ltrack *t) {
        free(t);
        return NULL;
}

/* Length of the valid UTF-8 sequence at s (1..4), or 0. */
static size_t utf8_len(const unsigned char *s) {
        unsigned char c = s[0];
        size_t n;
        uint32_t cp;

        if (c < 0x80)
                return 1;
        if (c >= 0xc2 && c <= 0xdf) {
                n = 2;
                cp = c & 0x1f;
        } else if (c >= 0xe0 && c <= 0xef) {
                n = 3;
                cp = c & 0x0f;
        } else if (c >= 0xf0 && c <= 0xf4) {
                n = 4;
                cp = c & 0x07;
        } else {
                return 0;
        }
        for (size_t i = 1; i < n; i++) {
                if ((s[i] & 0xc0) != 0x80)
                        return 0;
                cp = cp << 6 | (s[i] & 0x3f);
        }
        /* no overlong form, no surrogate, nothing past U+10FFFF */
        if ((n == 3 && cp < 0x800) || (n == 4 && cp < 0x10000) || cp > 0x10ffff ||
            (cp >= 0xd800 && cp <= 0xdfff))
                return 0;
        return n;
}

void zr_lview_sanitize(char *s) {
        unsigned char *p = (unsigned char *)s;
        while (*p) {
                size_t n = utf8_len(p);
                if (n == 0 || (n == 1 && (*p < 0x20 || *p == 0x7f))) {
                        *p++ = '?';
                        continue;
                }
                p += n;
        }
}

/* The client's command line, its words joined by spaces; else its HELLO name. */
static void read_command(zr_session *c, char *out, size_t size) {
        pid_t pid = zr_session_pid(c);
        char path[64];
        ssize_t n = -1;
        int fd;

        out[0] = 0;
        if (pid > 0) {
                snprintf(path, sizeof(path), "/proc/%d/cmdline", (int)pid);
                fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
                if (fd >= 0) {
                        n = read(fd, out, size - 1);
                        close(fd);
                }
        }
        if (n > 0) {
                out[n] = 0;
                for (ssize_t i = 0; i < n - 1; i++)
                        if (out[i] == 0)
                                out[i] = ' ';
        } else {
                snprintf(out, size, "%s", zr_session_client_name(c));
        }
        zr_lview_sanitize(out);
        if (!out[0])
                snprintf(out, size, "?");
}

/* Each stream's store directory as /proc/self/fd names it, joined by ",";
 * a mixture's sources in turn, each store once. */
static void read_dataset(zr_lhandle *lh, char *out, size_t size) {
        size_t at = 0;

        out[0] = 0;
        for (uint32_t i = 0; i < zr_lhandle_nentries(lh) && at + 1 < size; i++) {
                zr_entry *e = zr_lhandle_entry(lh, i);
                char link[64], path[4096];
                bool seen = false;
                ssize_t n;

                for (uint32_t j = 0; j < i && !seen; j++)
                        seen = zr_lhandle_entry(lh, j) == e;
                if (seen)
                        continue;
                snprintf(link, sizeof(link), "/proc/self/fd/%d",
                         zr_store_dir_fd(zr_dataset_store(e->ds)));
                n = readlink(link, path, sizeof(path) - 1);
                if (n > 0)
                        path[n] = 0;
                else
                        snprintf(path, sizeof(path), "dataset %llu",
                                 (unsigned long long)zr_entry_id(e));
                at += (size_t)snprintf(out + at, size - at, "%s%s", at ? "," : "", path);
        }
        if (at >= size && size > 4)
                memcpy(out + size - 4, "...", 4); /* cut: say so */
        zr_lview_sanitize(out);
}

int zr_lview_get(zr_lhandle *lh, uint64_t now_ns, zr_lview *v) {
        zr_ltrack **tp = zr_lhandle_track(lh);
        zr_session *c = zr_lhandle_session(lh);

        if (!*tp) {
                *tp = calloc(1, sizeof(**tp));
                if (!*tp)
                        return -ENOMEM;
        }
        if (!(*tp)->named) {
                read_command(c, (*tp)->command, sizeof((*tp)->command));
                read_dataset(lh, (*tp)->dataset, sizeof((*tp)->dataset));
                (*tp)->named = true;
        }
        v->lh = lh;
        v->track = *tp;
        v->id = zr_lhandle_id(lh);
        v->pid = zr_session_pid(c);
        v->uid = zr_session_uid(c);
        zr_loader_counters_get(zr_lhandle_loader(lh), &v->k);
        zr_loader_telemetry_get(zr_lhandle_loader(lh), now_ns, &v->tel);
        return 0;
}

void zr_lview_foreach(zr_server *s, uid_t viewer, bool all, uint64_t now_ns,
                      int (*fn)(const zr_lview *v, void *arg), void *arg) {
        zr_lview *v = malloc(sizeof(*v));

        if (!v)
                return;
        for (zr_session *c = s->sessions; c; c = zr_session_next(c)) {
                const zr_handles *t = zr_session_handles(c);
                if (zr_session_gone(c) || (!all && zr_session_uid(c) != viewer))
                        continue;
                for (uint32_t i = 0; i < t->n; i++) {
                        if (t->v[i].type != ZR_HANDLE_LOADER)
                                continue;
                        if (zr_lview_get(t->v[i].loader, now_ns, v) < 0)
                                continue;
                        if (fn(v, arg))
                                goto out;
                }
        }
out:
        free(v);
}

/* One span of counters (PROTOCOL.md, STATUS, telemetry's windows). */
static void put_span(zr_wire_writer *w, const char *key, const zr_tel_span *sp) {
        zr_wire_begin_map(w, key);
        zr_wire_put_u64(w, "span_ns", sp->span_ns);
        for (unsigned c = 0; c < ZR_TEL_N; c++)
                zr_wire_put_u64(w, zr_tel_counter_name((enum zr_tel_counter)c), sp->v[c]);
        zr_wire_end(w);
}

void zr_lview_put_status(zr_lhandle *lh, zr_wire_writer *w) {
        static const char *const windows[ZR_TEL_NWINDOWS] = { "w1", "w10", "w60" };
        zr_lview *v = malloc(sizeof(*v));
        const zr_loader_telemetry *t;

        if (!v || zr_lview_get(lh, zr_loader_now_ns(), v) < 0) {
                free(v);
                return;
        }
        t = &v->tel;
        zr_wire_put_u64(w, "uid", v->uid);
        zr_wire_put_str(w, "command", v->track->command);
        zr_wire_put_str(w, "dataset", v->track->dataset);
        zr_wire_begin_map(w, "telemetry");
        zr_wire_put_u64(w, "age_ms", t->age_ns / 1000000u);
        zr_wire_put_str(w, "verdict", zr_verdict_name(t->verdict));
        zr_wire_put_str(w, "stage", zr_stage_name(t->stage));
        zr_wire_put_bool(w, "reports", t->reports);
        zr_wire_put_u64(w, "prefetch_depth", t->prefetch_depth);
        zr_wire_put_u64(w, "wait_p50_ns", zr_latency_quantile(&t->wait, 0.50));
        zr_wire_put_u64(w, "wait_p99_ns", zr_latency_quantile(&t->wait, 0.99));
        zr_wire_put_u64(w, "ready_p50_ns", zr_latency_quantile(&t->ready, 0.50));
        zr_wire_put_u64(w, "ready_p99_ns", zr_latency_quantile(&t->ready, 0.99));
        zr_wire_put_u64(w, "fill_p50_ns", zr_latency_quantile(&t->fill, 0.50));
        zr_wire_put_u64(w, "fill_p99_ns", zr_latency_quantile(&t->fill, 0.99));
        put_span(w, "total", &t->total);
        for (unsigned i = 0; i < ZR_TEL_NWINDOWS; i++)
                put_span(w, windows[i], &t->w[i]);
        put_span(w, "group", &t->group);
        zr_wire_end(w);
        free(v);
}
