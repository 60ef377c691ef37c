/* where.c: `zrecord where` (which steps read a record) and `zrecord batch`
 * (the records of one step), for a loader over a dataset, a multi-stream set
 * or a mixture of them.
 *
 * Both describe a run by what its DataLoader was opened with: the sampler,
 * seed, batch size and world size, and PATH or, for a mixture, its sources in
 * order (--source WEIGHT[,SAMPLER]=PATH). `where` asks the daemon (STEPS_OF,
 * zrc_steps_of()): the samplers are the daemon's, run backwards, and it answers
 * a long range in pieces, so a progress line shows on a terminal. `batch` opens
 * a loader of one slot at the step and prints what it serves: the batch is
 * gathered as in training, so its records are the ones the run saw.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "output.h"
#include "tool.h"

/* Streams of a set or a loader at most (zrc.h). */
#define WHERE_STREAMS_MAX 32

/* One source of the run: a dataset, or a set's streams. */
typedef struct run_source {
        zrc_dataset *single;          /* a dataset opened alone, or NULL */
        zrc_set *set;                 /* a set, or NULL */
        size_t n;                     /* streams */
        zrc_dataset *streams[WHERE_STREAMS_MAX];
        const char *names[WHERE_STREAMS_MAX];
        uint64_t length;
} run_source;

typedef struct run {
        size_t n;                     /* sources: 1 for PATH */
        run_source *src;
        zrc_mixture_source *mix;      /* a mixture's, for its loader */
} run;

static void run_close(run *r) {
        for (size_t k = 0; r->src && k < r->n; k++) {
                zrc_dataset_close(r->src[k].single);
                zrc_set_close(r->src[k].set);
        }
        free(r->src);
        free(r->mix);
        *r = (run){ 0 };
}

/* Opens `path`: a dataset, or (with the "msset" feature) a set of streams. */
static int source_open(zrc_conn *c, const char *path, const char *what, run_source *s) {
        if (tool_is_store_dir(path) || !zrc_has_feature(c, "msset")) {
                if (zrc_dataset_open(c, path, 0, &s->single) < 0)
                        return tool_fail_conn(c, what);
                s->n = 1;
                s->streams[0] = s->single;
                s->names[0] = strrchr(path, '/') && strrchr(path, '/')[1] ? strrchr(path, '/') + 1
                                                                         : path;
                s->length = zrc_dataset_length(s->single);
                return 0;
        }
        if (zrc_set_open(c, path, 0, &s->set) < 0)
                return tool_fail_conn(c, what);
        s->n = zrc_set_streams(s->set);
        for (size_t i = 0; i < s->n; i++) {
                s->streams[i] = zrc_set_stream(s->set, i);
                s->names[i] = zrc_set_stream_name(s->set, i);
        }
        s->length = zrc_set_length(s->set);
        return 0;
}

/* Opens the run's sources; a mixture's in source 0's stream order. */
static int run_open(const cmdline *cl, zrc_conn *c, const char *what, run *r) {
        int e;

        r->n = cl->n_sources ? cl->n_sources : 1;
        r->src = calloc(r->n, sizeof(*r->src));
        r->mix = calloc(r->n, sizeof(*r->mix));
        if (!r->src || !r->mix)
                return tool_fail_msg("%s: out of memory", what);
        if (!cl->n_sources)
                return source_open(c, cl->path, what, &r->src[0]);
        for (size_t k = 0; k < r->n; k++) {
                run_source *s = &r->src[k], *s0 = &r->src[0];

                e = source_open(c, cl->sources[k].path, what, s);
                if (e)
                        return e;
                if (s->n != s0->n)
                        return tool_fail_msg("%s: source %zu (%s) has %zu streams, source 0 %zu: "
                                             "the sources of a mixture hold the same streams", what,
                                             k, cl->sources[k].path, s->n, s0->n);
                if (s->set && s0->set) {
                        /* a set's streams in source 0's order, by name */
                        zrc_dataset *ds[WHERE_STREAMS_MAX];
                        const char *nm[WHERE_STREAMS_MAX];
                        for (size_t i = 0; i < s0->n; i++) {
                                size_t j;
                                for (j = 0; j < s->n && strcmp(s->names[j], s0->names[i]); j++)
                                        ;
                                if (j == s->n)
                                        return tool_fail_msg("%s: source %zu (%s) has no stream "
                                                             "\"%s\"", what, k, cl->sources[k].path,
                                                             s0->names[i]);
                                ds[i] = s->streams[j];
                                nm[i] = s->names[j];
                        }
                        memcpy(s->streams, ds, s0->n * sizeof(ds[0]));
                        memcpy(s->names, nm, s0->n * sizeof(nm[0]));
                }
                r->mix[k] = (zrc_mixture_source){ .streams = s->streams,
                                                  .weight = cl->sources[k].weight,
                                                  .sampler = cl->sources[k].sampler };
        }
        return 0;
}

/* ---- where --------------------------------------------------------------- */

typedef struct where_out {
        const cmdline *cl;
        uint64_t start, stop, hits;
        bool tty, first;
} where_out;

static int where_piece(void *userdata, const zrc_step_hit *hits, size_t count, uint64_t next) {
        where_out *o = userdata;

        if (o->tty && o->hits + count > 0)
                fputs("\r\033[K", stderr); /* the progress line goes, the hits come */
        for (size_t i = 0; i < count; i++) {
                if (o->cl->json)
                        printf("%s[%" PRIu64 ", %" PRIu64 ", %" PRIu64 "]", o->first ? "" : ", ",
                               hits[i].step, hits[i].rank, hits[i].position);
                else
                        printf("step %" PRIu64 " rank %" PRIu64 " position %" PRIu64 "\n",
                               hits[i].step, hits[i].rank, hits[i].position);
                o->first = false;
        }
        o->hits += count;
        if (o->tty && next < o->stop) {
                fflush(stdout);
                fprintf(stderr, "\rwhere: steps %" PRIu64 " to %" PRIu64 " searched (%.1f%%), %"
                        PRIu64 " hits", o->start, next,
                        100.0 * (double)(next - o->start) / (double)(o->stop - o->start), o->hits);
                fflush(stderr);
        }
        return 0;
}

int tool_cmd_where(const cmdline *cl, zrc_conn *c) {
        run rn = { 0 };
        zrc_steps_source *ss = NULL;
        zrc_steps_query q = { .sampler = cl->sampler, .batch_size = cl->batch, .seed = cl->seed,
                              .world_size = cl->world_size, .record = cl->record };
        where_out o = { .cl = cl, .tty = isatty(STDERR_FILENO), .first = true };
        unsigned __int128 total = 0, global = (unsigned __int128)cl->batch * cl->world_size;
        int r = run_open(cl, c, "where", &rn);

        if (r)
                goto out;
        for (size_t k = 0; k < rn.n; k++)
                total += rn.src[k].length;
        if (cl->n_sources) {
                ss = calloc(rn.n, sizeof(*ss));
                if (!ss) {
                        r = tool_fail_msg("where: out of memory");
                        goto out;
                }
                for (size_t k = 0; k < rn.n; k++)
                        ss[k] = (zrc_steps_source){ .n = rn.src[k].length,
                                                    .weight = cl->sources[k].weight,
                                                    .sampler = cl->sources[k].sampler };
                q.sources = ss;
                q.n_sources = rn.n;
                q.source = cl->record_source;
        } else {
                q.n = rn.src[0].length;
        }
        /* by default the first pass over the data */
        q.start = cl->has_range ? cl->range_start : 0;
        q.stop = cl->has_range ? cl->range_end
                               : (uint64_t)((total + global - 1) / (global ? global : 1));
        o.start = q.start;
        o.stop = q.stop;
        if (cl->json) {
                printf("{\"record\": %" PRIu64, cl->record);
                if (cl->n_sources)
                        printf(", \"source\": %" PRIu32, cl->record_source);
                printf(", \"start\": %" PRIu64 ", \"stop\": %" PRIu64 ", \"hits\": [", q.start, q.stop);
        }
        r = zrc_steps_of(c, &q, where_piece, &o);
        if (o.tty && q.stop > q.start)
                fputs("\r\033[K", stderr);
        if (cl->json)
                printf("]}\n");
        if (r < 0) {
                fflush(stdout);
                r = tool_fail_conn(c, "where");
                goto out;
        }
        if (!cl->json && o.hits == 0)
                printf("record %" PRIu64 " is in no batch of steps %" PRIu64 " to %" PRIu64 "\n",
                       cl->record, q.start, q.stop ? q.stop - 1 : 0);
        r = ZRECORD_EXIT_OK;
out:
        free(ss);
        run_close(&rn);
        return r;
}

/* ---- batch --------------------------------------------------------------- */

/* Prints stream i's record j of b. */
static void batch_values(const cmdline *cl, const zrc_loader_batch *b, const run *rn, size_t i,
                         uint64_t j) {
        const zrc_schema *s = zrc_dataset_schema(rn->src[0].streams[i]);
        const zrc_stream_batch *sb = &b->streams[i];
        const uint8_t *p;
        uint64_t len;
        out_dtype dt;

        if (out_dtype_parse(s->dtype, &dt) < 0)
                return;
        if (s->kind == ZRC_DENSE) {
                len = zrc_schema_record_bytes(s);
                p = (const uint8_t *)sb->data + j * len;
        } else {
                len = sb->lengths[j];
                p = sb->payloads[j];
        }
        if (cl->json) {
                printf("%s", i ? ", " : "");
                out_json_string(stdout, rn->src[0].names[i]);
                printf(": {");
                if (s->kind == ZRC_RAGGED) {
                        printf("\"shape\": ");
                        out_shape(stdout, sb->shapes + j * sb->ndim, sb->ndim, true);
                        printf(", ");
                }
                tool_print_values(&dt, p, len, true, false);
                printf("}");
        } else {
                printf("  %s", rn->src[0].names[i]);
                if (s->kind == ZRC_RAGGED) {
                        fputc(' ', stdout);
                        out_shape(stdout, sb->shapes + j * sb->ndim, sb->ndim, false);
                }
                fputc(':', stdout);
                tool_print_values(&dt, p, len, false, false);
                fputc('\n', stdout);
        }
}

int tool_cmd_batch(const cmdline *cl, zrc_conn *c) {
        run rn = { 0 };
        zrc_loader *l = NULL;
        zrc_loader_batch b;
        zrc_loader_options o = { .sampler = cl->sampler, .batch_size = cl->batch, .seed = cl->seed,
                                 .start_step = cl->step, .rank = cl->rank,
                                 .world_size = cl->world_size, .prefetch = 1, .indices = true,
                                 .provenance = cl->n_sources > 0 };
        int r = run_open(cl, c, "batch", &rn);

        if (r)
                goto out;
        if (cl->n_sources)
                r = zrc_loader_open_mixture(c, rn.mix, rn.n, rn.src[0].n, &o, &l);
        else
                r = zrc_loader_open(c, rn.src[0].streams, rn.src[0].n, &o, &l);
        if (r < 0 || zrc_loader_next(l, &b) < 0) {
                r = tool_fail_conn(c, "batch");
                goto out;
        }
        if (cl->json)
                printf("{\"step\": %" PRIu64 ", \"rank\": %" PRIu64 ", \"world_size\": %" PRIu64
                       ", \"records\": [", b.step, cl->rank, cl->world_size);
        else
                printf("step %" PRIu64 ", rank %" PRIu64 " of %" PRIu64 ": %" PRIu64 " records\n",
                       b.step, cl->rank, cl->world_size, b.count);
        for (uint64_t j = 0; j < b.count; j++) {
                if (cl->json) {
                        printf("%s{\"position\": %" PRIu64, j ? ",\n " : "", j);
                        if (b.sources)
                                printf(", \"source\": %u", b.sources[j]);
                        printf(", \"index\": %" PRIu64, b.indices[j]);
                        if (cl->values) {
                                printf(", \"streams\": {");
                                for (size_t i = 0; i < b.n_streams; i++)
                                        batch_values(cl, &b, &rn, i, j);
                                printf("}");
                        }
                        printf("}");
                        continue;
                }
                if (b.sources)
                        printf("%" PRIu64 ": %u:%" PRIu64 "\n", j, b.sources[j], b.indices[j]);
                else
                        printf("%" PRIu64 ": %" PRIu64 "\n", j, b.indices[j]);
                for (size_t i = 0; cl->values && i < b.n_streams; i++)
                        batch_values(cl, &b, &rn, i, j);
        }
        if (cl->json)
                printf("]}\n");
        r = ZRECORD_EXIT_OK;
out:
        zrc_loader_close(l);
        run_close(&rn);
        return r;
}
