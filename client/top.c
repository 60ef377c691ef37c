/* top.c: `zrecord top`, the daemon's loaders live: who waits for data, and why.
 *
 * One STATUS per frame; one row per loader the caller may see (its own; root
 * and the daemon's user: all), with the rates of one window of the loader's
 * telemetry (10 s by default; docs/TELEMETRY.md). On a terminal it redraws in
 * place until q; with -n, or when stdout is not a terminal, it prints plain
 * text frames (or one JSON object per frame with --json) and exits.
 *
 * Plain ANSI escapes, not ncurses: the view is one full-screen redraw of text
 * lines with a reverse-video header, which a handful of escapes every terminal
 * emulator since the VT100 understands do (alternate screen, home, clear to
 * end of line and of screen, hide the cursor); keys come from the terminal in
 * non-canonical mode. ncurses would add a library and terminfo lookups for
 * nothing this view uses, and batch and JSON output must not depend on a
 * terminal at all.
 */
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#include "output.h"
#include "tool.h"

#define TOP_DELAY_MS 2000

enum col { COL_PID, COL_USER, COL_LOADER, COL_STEP, COL_RATE, COL_WAIT, COL_VERDICT, COL_STAGE,
           COL_HIT, COL_MIB, COL_DATASET, COL_COMMAND, NCOLS };

static const struct {
        const char *title, *key; /* key: --sort's name, NULL if not sortable */
        int width;               /* 0: the rest of the line */
        int numeric;             /* sorts high first */
} cols[NCOLS] = {
        [COL_PID] = { "PID", "pid", 7, 0 },          [COL_USER] = { "USER", "user", 9, 0 },
        [COL_LOADER] = { "LDR", NULL, 4, 0 },        [COL_STEP] = { "STEP", "step", 10, 1 },
        [COL_RATE] = { "B/S", "rate", 8, 1 },        [COL_WAIT] = { "WAIT%", "wait", 7, 1 },
        [COL_VERDICT] = { "VERDICT", "verdict", 15, 0 },
        [COL_STAGE] = { "STAGE", NULL, 11, 0 },      [COL_HIT] = { "HIT%", "hit", 6, 1 },
        [COL_MIB] = { "MIB/S", "mib", 8, 1 },        [COL_DATASET] = { "DATASET", "dataset", 28, 0 },
        [COL_COMMAND] = { "COMMAND", "command", 0, 0 },
};

typedef struct row {
        const zrc_loader_status *l;
        char user[32];
        double rate, wait, hit, mib; /* hit < 0: no cache lookups in the window */
} row;

typedef struct top {
        const cmdline *cl;
        zrc_conn *c;
        int window;              /* 0, 1, 2: 1 s, 10 s, 60 s */
        enum col sort;
        int reverse;
        int interactive;
        int width, height;
        struct termios saved;
        int raw;
} top;

static volatile sig_atomic_t got_quit, got_winch, got_tstp;

static void on_signal(int sig) {
        if (sig == SIGWINCH)
                got_winch = 1;
        else if (sig == SIGTSTP)
                got_tstp = 1;
        else
                got_quit = 1;
}

static const zrc_tel_span *span_of(const zrc_loader_status *l, int window) {
        const zrc_loader_telemetry *t = &l->telemetry;
        return window == 0 ? &t->w1 : window == 2 ? &t->w60 : &t->w10;
}

static void user_name(uint64_t uid, char *out, size_t size) {
        struct passwd pw, *res = NULL;
        char buf[1024];
        if (getpwuid_r((uid_t)uid, &pw, buf, sizeof(buf), &res) == 0 && res)
                snprintf(out, size, "%s", res->pw_name);
        else
                snprintf(out, size, "%" PRIu64, uid);
}

static void fill_row(row *r, const zrc_loader_status *l, int window) {
        const zrc_tel_span *sp = span_of(l, window);
        double span = sp->span_ns ? (double)sp->span_ns / 1e9 : 0;
        r->l = l;
        user_name(l->uid, r->user, sizeof(r->user));
        r->rate = span ? (double)sp->batches / span : 0;
        r->mib = span ? (double)sp->bytes / 1048576.0 / span : 0;
        r->wait = span ? (double)sp->wait_ns / (double)sp->span_ns : 0;
        if (r->wait > 1)
                r->wait = 1;
        r->hit = sp->hits + sp->misses ? (double)sp->hits / (double)(sp->hits + sp->misses) : -1;
}

static const top *sorting; /* qsort has no context argument */

static int cmp_num(double a, double b) {
        return a < b ? -1 : a > b;
}

static int cmp_rows(const void *pa, const void *pb) {
        const row *a = pa, *b = pb;
        int c = 0;
        switch (sorting->sort) {
        case COL_PID: c = cmp_num((double)a->l->pid, (double)b->l->pid); break;
        case COL_USER: c = strcmp(a->user, b->user); break;
        case COL_STEP: c = cmp_num((double)a->l->step, (double)b->l->step); break;
        case COL_RATE: c = cmp_num(a->rate, b->rate); break;
        case COL_WAIT: c = cmp_num(a->wait, b->wait); break;
        case COL_VERDICT: c = strcmp(a->l->telemetry.verdict, b->l->telemetry.verdict); break;
        case COL_HIT: c = cmp_num(a->hit, b->hit); break;
        case COL_MIB: c = cmp_num(a->mib, b->mib); break;
        case COL_DATASET: c = strcmp(a->l->dataset, b->l->dataset); break;
        case COL_COMMAND: c = strcmp(a->l->command, b->l->command); break;
        default: break;
        }
        if (cols[sorting->sort].numeric)
                c = -c; /* high first, as top does */
        if (sorting->reverse)
                c = -c;
        if (c == 0) /* stable across frames */
                c = cmp_num((double)a->l->pid, (double)b->l->pid) * 2 +
                    cmp_num(a->l->loader, b->l->loader);
        return c;
}

/* Appends s to f in at most w columns (w 0: no bound), padded when `pad`; a
 * path that does not fit keeps its end ("...ta/train"). */
static void put_cell(FILE *f, const char *s, int w, int pad, int keep_end) {
        int n = (int)strlen(s);
        if (w > 0 && n > w) {
                if (keep_end && w > 3)
                        fprintf(f, "...%s", s + n - (w - 3));
                else
                        fprintf(f, "%.*s", w, s);
                n = w;
        } else {
                fputs(s, f);
        }
        for (; pad && n < w; n++)
                fputc(' ', f);
}

/* The DATASET cell of a loader whose stores are `s` (paths, comma-separated) in
 * `w` characters, so that every store's name shows: each path keeps its last
 * components, as many as fit for all, a cut path starting with ".../"; a cell
 * still too long keeps its end (put_cell). */
static void dataset_cell(const char *s, int w, char *out, size_t size) {
        snprintf(out, size, "%s", s);
        for (int k = 8; (int)strlen(out) > w && k >= 1; k--) {
                size_t at = 0;
                out[0] = 0;
                for (const char *p = s; *p && at < size;) {
                        const char *end = strchr(p, ',');
                        const char *q;
                        int seen = 0;

                        if (!end)
                                end = p + strlen(p);
                        for (q = end; q > p; q--) /* the start of the last k components */
                                if (q[-1] == '/' && ++seen == k)
                                        break;
                        if (q == p + 1) /* all of an absolute path */
                                q = p;
                        at += (size_t)snprintf(out + at, size - at, "%s%s%.*s", p == s ? "" : ",",
                                               q > p ? ".../" : "", (int)(end - q), q);
                        p = *end ? end + 1 : end;
                }
        }
}

/* One line of cells[0..NCOLS) in their columns (the last one, the command,
 * unpadded), cut to `width` (0: no bound); the dataset keeps its end. */
static void put_columns(FILE *f, const char *const *cells, int width, int pad) {
        char *line = NULL;
        size_t len = 0;
        FILE *m = open_memstream(&line, &len);
        if (!m)
                return;
        for (int k = 0; k < NCOLS; k++) {
                put_cell(m, cells[k], cols[k].width - 1, k != COL_COMMAND, k == COL_DATASET);
                if (k != COL_COMMAND)
                        fputc(' ', m);
        }
        fclose(m);
        if (line)
                put_cell(f, line, width, pad, 0);
        free(line);
}

static void put_row(FILE *f, const row *r, int width) {
        const zrc_loader_status *l = r->l;
        char cell[NCOLS][32], dataset[sizeof(l->dataset)];
        const char *cells[NCOLS];

        for (int k = 0; k < NCOLS; k++)
                cells[k] = cell[k];
        snprintf(cell[COL_PID], sizeof(cell[0]), "%" PRIu64, l->pid);
        cells[COL_USER] = r->user;
        snprintf(cell[COL_LOADER], sizeof(cell[0]), "%u", l->loader);
        snprintf(cell[COL_STEP], sizeof(cell[0]), "%" PRIu64, l->step);
        snprintf(cell[COL_RATE], sizeof(cell[0]), "%.1f", r->rate);
        snprintf(cell[COL_WAIT], sizeof(cell[0]), "%.1f", 100 * r->wait);
        cells[COL_VERDICT] = l->telemetry.verdict[0] ? l->telemetry.verdict : "-";
        cells[COL_STAGE] = l->telemetry.stage[0] ? l->telemetry.stage : "-";
        if (r->hit < 0)
                cells[COL_HIT] = "-";
        else
                snprintf(cell[COL_HIT], sizeof(cell[0]), "%.1f", 100 * r->hit);
        snprintf(cell[COL_MIB], sizeof(cell[0]), "%.1f", r->mib);
        dataset_cell(l->dataset, cols[COL_DATASET].width - 1, dataset, sizeof(dataset));
        cells[COL_DATASET] = dataset;
        cells[COL_COMMAND] = l->command;
        put_columns(f, cells, width, 0);
}

static void put_titles(FILE *f, const top *t, int width) {
        char title[NCOLS][24];
        const char *cells[NCOLS];

        for (int k = 0; k < NCOLS; k++) {
                /* the sort column's marker: v high first, ^ low first */
                snprintf(title[k], sizeof(title[0]), "%s%s", cols[k].title,
                         k == (int)t->sort ? (t->reverse ^ cols[k].numeric ? "v" : "^") : "");
                cells[k] = title[k];
        }
        put_columns(f, cells, width, t->interactive);
}

static const char *const window_names[] = { "1 s", "10 s", "60 s" };

/* One frame of text: two lines of summary, titles, rows. */
static void put_frame(FILE *f, const top *t, const zrc_status *st, row *rows, size_t n) {
        const char *eol = t->interactive ? "\x1b[K\n" : "\n";
        int width = t->interactive ? t->width : 0;
        unsigned counts[5] = {0}; /* data-bound, consumer-bound, balanced, idle, other */
        double total = 0;
        char line[512];

        for (size_t i = 0; i < n; i++) {
                const char *v = rows[i].l->telemetry.verdict;
                total += rows[i].rate;
                counts[strcmp(v, "data-bound") == 0       ? 0
                       : strcmp(v, "consumer-bound") == 0 ? 1
                       : strcmp(v, "balanced") == 0       ? 2
                       : strcmp(v, "idle") == 0           ? 3
                                                          : 4]++;
        }
        snprintf(line, sizeof(line), "zrecord top - %s - up %.0f s - %zu loaders: %u data-bound, "
                 "%u consumer-bound, %u balanced, %u idle", st->daemon,
                 (double)st->uptime_ms / 1000, n, counts[0], counts[1], counts[2], counts[3]);
        put_cell(f, line, width, 0, 0);
        fputs(eol, f);
        snprintf(line, sizeof(line), "%.1f batches/s over %s - %" PRIu64 " clients - cache %.1f of "
                 "%.1f MiB - sort %s%s%s", total, window_names[t->window], st->clients,
                 (double)st->cache_bytes / 1048576, (double)st->cache_budget / 1048576,
                 cols[t->sort].key ? cols[t->sort].key : cols[t->sort].title,
                 t->reverse ? " (reversed)" : "",
                 t->interactive ? " - q quit, < > sort, R reverse, w window" : "");
        put_cell(f, line, width, 0, 0);
        fputs(eol, f);
        fputs(eol, f);
        if (t->interactive)
                fputs("\x1b[7m", f);
        put_titles(f, t, width);
        if (t->interactive)
                fputs("\x1b[0m", f);
        fputs(eol, f);
        for (size_t i = 0; i < n; i++) {
                if (t->interactive && (int)i + 5 > t->height)
                        break;
                put_row(f, &rows[i], width);
                fputs(eol, f);
        }
        if (t->interactive)
                fputs("\x1b[J", f);
}

static void put_json(FILE *f, const top *t, const zrc_status *st, const row *rows, size_t n) {
        static const double window_s[] = { 1, 10, 60 };
        fprintf(f, "{\"daemon\": ");
        out_json_string(f, st->daemon);
        fprintf(f, ", \"uptime_ms\": %" PRIu64 ", \"window_s\": %g, \"loaders\": [", st->uptime_ms,
                window_s[t->window]);
        for (size_t i = 0; i < n; i++) {
                const row *r = &rows[i];
                const zrc_loader_status *l = r->l;
                fprintf(f, "%s{\"pid\": %" PRIu64 ", \"uid\": %" PRIu64 ", \"user\": ",
                        i ? ", " : "", l->pid, l->uid);
                out_json_string(f, r->user);
                fprintf(f, ", \"loader\": %u, \"command\": ", l->loader);
                out_json_string(f, l->command);
                fprintf(f, ", \"dataset\": ");
                out_json_string(f, l->dataset);
                fprintf(f, ", \"step\": %" PRIu64 ", \"batches_per_s\": %.3f, \"wait_fraction\": "
                        "%.4f, \"verdict\": ", l->step, r->rate, r->wait);
                out_json_string(f, l->telemetry.verdict[0] ? l->telemetry.verdict : "unknown");
                fprintf(f, ", \"stage\": ");
                out_json_string(f, l->telemetry.stage[0] ? l->telemetry.stage : "none");
                if (r->hit < 0)
                        fprintf(f, ", \"cache_hit_ratio\": null");
                else
                        fprintf(f, ", \"cache_hit_ratio\": %.4f", r->hit);
                fprintf(f, ", \"mib_per_s\": %.3f}", r->mib);
        }
        fprintf(f, "]}\n");
}

/* ---- the terminal ------------------------------------------------------------- */

static void term_size(top *t) {
        struct winsize ws;
        t->width = 80;
        t->height = 24;
        if (ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0 && ws.ws_row > 0) {
                t->width = ws.ws_col;
                t->height = ws.ws_row;
        }
}

static int term_enter(top *t) {
        struct termios raw;
        if (tcgetattr(STDIN_FILENO, &t->saved) < 0)
                return -errno;
        raw = t->saved;
        raw.c_lflag &= ~(tcflag_t)(ICANON | ECHO);
        raw.c_cc[VMIN] = 0;
        raw.c_cc[VTIME] = 0;
        if (tcsetattr(STDIN_FILENO, TCSAFLUSH, &raw) < 0)
                return -errno;
        t->raw = 1;
        /* the alternate screen, cursor hidden */
        fputs("\x1b[?1049h\x1b[?25l\x1b[H\x1b[2J", stdout);
        fflush(stdout);
        term_size(t);
        return 0;
}

static void term_leave(top *t) {
        if (!t->raw)
                return;
        fputs("\x1b[?25h\x1b[?1049l", stdout);
        fflush(stdout);
        tcsetattr(STDIN_FILENO, TCSAFLUSH, &t->saved);
        t->raw = 0;
}

/* Queries STATUS and writes one frame. Returns 0, or an exit code. */
static int frame(top *t) {
        zrc_status *st = NULL;
        row *rows = NULL;
        char *buf = NULL;
        size_t len = 0;
        int r = ZRECORD_EXIT_OK;
        FILE *f;

        if (zrc_status_query(t->c, &st) < 0) {
                term_leave(t); /* say why on the normal screen */
                return tool_fail_conn(t->c, "top");
        }
        rows = calloc(st->n_loaders ? st->n_loaders : 1, sizeof(*rows));
        f = open_memstream(&buf, &len);
        if (!rows || !f) {
                r = tool_fail_msg("out of memory");
                goto out;
        }
        for (size_t i = 0; i < st->n_loaders; i++)
                fill_row(&rows[i], &st->per_loader[i], t->window);
        sorting = t;
        qsort(rows, st->n_loaders, sizeof(*rows), cmp_rows);
        if (t->interactive)
                fputs("\x1b[H", f);
        if (t->cl->json)
                put_json(f, t, st, rows, st->n_loaders);
        else
                put_frame(f, t, st, rows, st->n_loaders);
        fclose(f);
        f = NULL;
        if (buf && fwrite(buf, 1, len, stdout) != len)
                r = ZRECORD_EXIT_FAILED;
        fflush(stdout);
out:
        if (f)
                fclose(f);
        free(buf);
        free(rows);
        zrc_status_free(st);
        return r;
}

static void move_sort(top *t, int dir) {
        int k = (int)t->sort;
        do
                k = (k + dir + NCOLS) % NCOLS;
        while (!cols[k].key);
        t->sort = (enum col)k;
}

/* A key: 1 to quit, else 0 (the view changed or not). */
static int key(top *t, char ch) {
        switch (ch) {
        case 'q': case 'Q': return 1;
        case '<': move_sort(t, -1); break;
        case '>': move_sort(t, 1); break;
        case 'R': t->reverse = !t->reverse; break;
        case 'W': t->sort = COL_WAIT; break;
        case 'B': t->sort = COL_RATE; break;
        case 'P': t->sort = COL_PID; break;
        case 'M': t->sort = COL_MIB; break;
        case 'H': t->sort = COL_HIT; break;
        case 'S': t->sort = COL_STEP; break;
        case 'U': t->sort = COL_USER; break;
        case 'w': t->window = (t->window + 1) % 3; break;
        default: break;
        }
        return 0;
}

/* Waits up to ms for a key or a signal; returns 1 to quit. */
static int wait_keys(top *t, uint64_t ms) {
        struct timespec now, end;
        clock_gettime(CLOCK_MONOTONIC, &end);
        end.tv_sec += (time_t)(ms / 1000);
        end.tv_nsec += (long)(ms % 1000) * 1000000;
        if (end.tv_nsec >= 1000000000) {
                end.tv_sec++;
                end.tv_nsec -= 1000000000;
        }
        for (;;) {
                struct pollfd p = { .fd = STDIN_FILENO, .events = POLLIN };
                char keys[16];
                long left;
                if (got_quit)
                        return 1;
                if (got_winch || got_tstp)
                        return 0;
                clock_gettime(CLOCK_MONOTONIC, &now);
                left = (long)(end.tv_sec - now.tv_sec) * 1000 + (end.tv_nsec - now.tv_nsec) / 1000000;
                if (left <= 0)
                        return 0;
                int r = poll(&p, 1, (int)left);
                if (r < 0 && errno == EINTR)
                        continue;
                if (r <= 0)
                        return 0;
                ssize_t n = read(STDIN_FILENO, keys, sizeof(keys));
                if (n == 0)
                        return 1; /* the terminal is gone */
                for (ssize_t i = 0; i < n; i++) {
                        if (key(t, keys[i]))
                                return 1;
                        if (keys[i] != 0x1b)
                                return 0; /* redraw at once with the new order */
                }
        }
}

static enum col sort_of(const char *name) {
        for (int k = 0; name && k < NCOLS; k++)
                if (cols[k].key && strcmp(cols[k].key, name) == 0)
                        return (enum col)k;
        return COL_WAIT;
}

int tool_cmd_top(const cmdline *cl, zrc_conn *c) {
        top t = { .cl = cl, .c = c, .window = 1, .sort = sort_of(cl->sort) };
        uint64_t delay = cl->delay_ms ? cl->delay_ms : TOP_DELAY_MS;
        struct sigaction sa = { .sa_handler = on_signal }, old[5];
        const int sigs[] = { SIGINT, SIGTERM, SIGHUP, SIGWINCH, SIGTSTP };
        uint64_t n = cl->iterations;
        int r = ZRECORD_EXIT_OK;

        t.interactive = !cl->iterations && !cl->json && isatty(STDIN_FILENO) &&
                        isatty(STDOUT_FILENO);
        if (!t.interactive && n == 0)
                n = 1;
        if (!t.interactive) {
                for (uint64_t i = 0; i < n && r == ZRECORD_EXIT_OK; i++) {
                        if (i) {
                                if (!cl->json)
                                        putchar('\n');
                                struct timespec ts = { (time_t)(delay / 1000),
                                                       (long)(delay % 1000) * 1000000 };
                                nanosleep(&ts, NULL);
                        }
                        r = frame(&t);
                }
                return r;
        }
        sigemptyset(&sa.sa_mask);
        for (size_t i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++)
                sigaction(sigs[i], &sa, &old[i]);
        if (term_enter(&t) < 0) {
                r = tool_fail_msg("top: the terminal: %s", strerror(errno));
                goto out;
        }
        for (;;) {
                r = frame(&t);
                if (r != ZRECORD_EXIT_OK || wait_keys(&t, delay))
                        break;
                if (got_winch) {
                        got_winch = 0;
                        term_size(&t);
                }
                if (got_tstp) {
                        /* ^Z: give the terminal back, stop, take it again */
                        got_tstp = 0;
                        term_leave(&t);
                        raise(SIGSTOP);
                        if (term_enter(&t) < 0)
                                break;
                }
        }
out:
        term_leave(&t);
        for (size_t i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++)
                sigaction(sigs[i], &old[i], NULL);
        return r;
}
