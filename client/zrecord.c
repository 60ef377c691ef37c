/* zrecord.c: the zrecord command-line tool, on libzrc.
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
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cmdline.h"
#include "npy.h"
#include "output.h"
#include "zrc.h"

/* Records per READ of `cat`: bounds the read buffer and the reply's frame. */
#define CAT_BATCH_RECORDS 1024
/* zstd_dict import: the dictionary is trained on at most this many records,
 * spread evenly over the file, and at most this many bytes of them. */
#define IMPORT_DICT_SAMPLES 4096
#define IMPORT_DICT_SAMPLE_BYTES (UINT64_C(64) << 20)

static const char *program = "zrecord";

/* Reports the last failure of c on stderr and returns exit code 1. */
static int fail_conn(const zrc_conn *c, const char *what) {
        const zrc_error *e = zrc_last_error(c);

        fprintf(stderr, "%s: %s: %s%s%s\n", program, what, e->name[0] ? e->name : "error",
                e->message[0] ? ": " : "", e->message);
        return ZRECORD_EXIT_FAILED;
}

static int fail_msg(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int fail_msg(const char *fmt, ...) {
        va_list ap;

        fprintf(stderr, "%s: ", program);
        va_start(ap, fmt);
        vfprintf(stderr, fmt, ap);
        va_end(ap);
        fputc('\n', stderr);
        return ZRECORD_EXIT_FAILED;
}

static int connect_or_exit(const cmdline *cl, zrc_conn **ret) {
        zrc_error e = { 0 };
        int r = zrc_connect(cl->socket, ret, &e);

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

static int cmd_status(const cmdline *cl, zrc_conn *c) {
        zrc_status *st;

        if (zrc_status_query(c, &st) < 0)
                return fail_conn(c, "status");
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
                       ", \"cache\": {\"budget\": %" PRIu64 ", \"bytes\": %" PRIu64
                       ", \"entries\": %" PRIu64 "}, \"per_loader\": [",
                       st->uptime_ms, st->clients, st->handles, st->shm_bytes, st->loaders,
                       st->batches, st->gathers, st->hits, st->misses, st->bytes, st->evictions,
                       st->cache_budget, st->cache_bytes, st->cache_entries);
                for (size_t i = 0; i < st->n_loaders; i++) {
                        const zrc_loader_status *l = &st->per_loader[i];

                        printf("%s{\"pid\": %" PRIu64 ", \"loader\": %u, \"sampler\": ", i ? ", " : "",
                               l->pid, l->loader);
                        out_json_string(stdout, l->sampler);
                        printf(", \"batch_size\": %" PRIu64 ", \"streams\": %" PRIu64
                               ", \"step\": %" PRIu64 ", \"batches\": %" PRIu64
                               ", \"gathers\": %" PRIu64 ", \"hits\": %" PRIu64
                               ", \"misses\": %" PRIu64 ", \"bytes\": %" PRIu64
                               ", \"evictions\": %" PRIu64 "}",
                               l->batch_size, l->streams, l->step, l->batches, l->gathers, l->hits,
                               l->misses, l->bytes, l->evictions);
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
                printf("gathers:    %" PRIu64 "\n", st->gathers);
                printf("bytes:      %" PRIu64 "\n", st->bytes);
                printf("cache:      %" PRIu64 " of %" PRIu64 " bytes, %" PRIu64
                       " entries; %" PRIu64 " hits, %" PRIu64 " misses, %" PRIu64 " evictions\n",
                       st->cache_bytes, st->cache_budget, st->cache_entries, st->hits, st->misses,
                       st->evictions);
                for (size_t i = 0; i < st->n_loaders; i++) {
                        const zrc_loader_status *l = &st->per_loader[i];

                        printf("loader %u of pid %" PRIu64 ": %s, batch %" PRIu64 ", %" PRIu64
                               " streams, step %" PRIu64 "; %" PRIu64 " batches, %" PRIu64
                               " gathers, %" PRIu64 " hits, %" PRIu64 " misses, %" PRIu64
                               " bytes, %" PRIu64 " evictions\n",
                               l->loader, l->pid, l->sampler, l->batch_size, l->streams, l->step,
                               l->batches, l->gathers, l->hits, l->misses, l->bytes, l->evictions);
                }
        }
        zrc_status_free(st);
        return ZRECORD_EXIT_OK;
}

/* ---- info, stats, verify, compact -------------------------------------- */

static void print_schema_json(const zrc_schema *s) {
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
static bool is_store_dir(const char *path) {
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
                return fail_conn(c, "info");
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
                        return fail_conn(c, "info");
                }
                if (cl->json) {
                        printf("%s{\"name\": ", i ? ", " : "");
                        out_json_string(stdout, zrc_set_stream_name(set, i));
                        printf(", \"length\": %" PRIu64 ", ", info.length);
                        print_schema_json(&info.schema);
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

static int open_dataset(const cmdline *cl, zrc_conn *c, unsigned flags, const char *what,
                        zrc_dataset **ret) {
        if (zrc_dataset_open(c, cl->path, flags, ret) < 0)
                return fail_conn(c, what);
        return 0;
}

static int cmd_info(const cmdline *cl, zrc_conn *c) {
        zrc_dataset *d;
        zrc_info info;
        int r;

        if (!is_store_dir(cl->path) && zrc_has_feature(c, "msset"))
                return info_set(cl, c);
        r = open_dataset(cl, c, 0, "info", &d);
        if (r)
                return r;
        if (zrc_dataset_info(d, &info) < 0) {
                zrc_dataset_close(d);
                return fail_conn(c, "info");
        }
        if (cl->json) {
                printf("{\"path\": ");
                out_json_string(stdout, cl->path);
                printf(", \"length\": %" PRIu64 ", ", info.length);
                print_schema_json(&info.schema);
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

static int cmd_stats(const cmdline *cl, zrc_conn *c) {
        zrc_dataset *d;
        zrc_stats s;
        int r;

        r = open_dataset(cl, c, 0, "stats", &d);
        if (r)
                return r;
        if (zrc_dataset_stats(d, &s) < 0) {
                zrc_dataset_close(d);
                return fail_conn(c, "stats");
        }
        print_stats(cl, &s);
        zrc_dataset_close(d);
        return ZRECORD_EXIT_OK;
}

static int cmd_compact(const cmdline *cl, zrc_conn *c) {
        zrc_dataset *d;
        zrc_stats s;
        int r;

        r = open_dataset(cl, c, ZRC_OPEN_WRITABLE, "compact", &d);
        if (r)
                return r;
        if (zrc_dataset_compact(d, &s) < 0) {
                zrc_dataset_close(d);
                return fail_conn(c, "compact");
        }
        print_stats(cl, &s);
        zrc_dataset_close(d);
        return ZRECORD_EXIT_OK;
}

static int cmd_verify(const cmdline *cl, zrc_conn *c) {
        zrc_verify_result *v;
        zrc_dataset *d;
        int r;

        v = malloc(sizeof(*v));
        if (!v)
                return fail_msg("out of memory");
        r = open_dataset(cl, c, 0, "verify", &d);
        if (r) {
                free(v);
                return r;
        }
        if (zrc_dataset_verify(d, v) < 0) {
                zrc_dataset_close(d);
                free(v);
                return fail_conn(c, "verify");
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

/* ---- cat --------------------------------------------------------------- */

static void cat_record(const cmdline *cl, const out_dtype *dt, uint64_t index,
                       const uint8_t *p, uint64_t len, const uint64_t *shape, uint32_t ndim,
                       bool ragged, bool *first) {
        uint64_t n = dt->itemsize ? len / dt->itemsize : 0;

        if (cl->json) {
                printf("%s{\"index\": %" PRIu64, *first ? "" : ",\n ", index);
                if (ragged) {
                        printf(", \"shape\": ");
                        out_shape(stdout, shape, ndim, true);
                }
                if (cl->hex) {
                        printf(", \"hex\": \"");
                        out_hex(stdout, p, len, 0);
                        printf("\"}");
                } else {
                        printf(", \"values\": [");
                        for (uint64_t i = 0; i < n; i++) {
                                if (i)
                                        fputs(", ", stdout);
                                out_value(stdout, dt, p + i * dt->itemsize, true);
                        }
                        printf("]}");
                }
        } else {
                printf("%" PRIu64, index);
                if (ragged) {
                        fputc(' ', stdout);
                        out_shape(stdout, shape, ndim, false);
                }
                fputs(":", stdout);
                if (cl->hex) {
                        fputc(' ', stdout);
                        out_hex(stdout, p, len, ' ');
                } else {
                        for (uint64_t i = 0; i < n; i++) {
                                fputc(' ', stdout);
                                out_value(stdout, dt, p + i * dt->itemsize, false);
                        }
                }
                fputc('\n', stdout);
        }
        *first = false;
}

static int cmd_cat(const cmdline *cl, zrc_conn *c) {
        uint64_t idx[CAT_BATCH_RECORDS], start, end, total;
        const zrc_schema *s;
        zrc_dataset *d;
        out_dtype dt;
        bool first = true;
        int r;

        r = open_dataset(cl, c, 0, "cat", &d);
        if (r)
                return r;
        s = zrc_dataset_schema(d);
        if (out_dtype_parse(s->dtype, &dt) < 0) {
                zrc_dataset_close(d);
                return fail_msg("cat: dtype %s cannot be printed", s->dtype);
        }
        if (cl->n_indices > 0) {
                start = 0;
                end = total = cl->n_indices;
        } else {
                start = cl->has_range ? cl->range_start : 0;
                end = cl->has_range && cl->range_end != UINT64_MAX ? cl->range_end
                                                                   : zrc_dataset_length(d);
                total = end > start ? end - start : 0;
        }
        if (cl->json) {
                printf("{\"path\": ");
                out_json_string(stdout, cl->path);
                printf(", ");
                print_schema_json(s);
                printf(", \"records\": [");
        }
        for (uint64_t done = 0; done < total;) {
                size_t k = total - done < CAT_BATCH_RECORDS ? (size_t)(total - done) : CAT_BATCH_RECORDS;
                zrc_batch b;

                for (size_t i = 0; i < k; i++)
                        idx[i] = cl->n_indices > 0 ? cl->indices[done + i] : start + done + i;
                if (zrc_dataset_read(d, idx, k, &b) < 0) {
                        if (cl->json)
                                printf("]}\n");
                        fflush(stdout);
                        zrc_dataset_close(d);
                        return fail_conn(c, "cat");
                }
                for (size_t i = 0; i < k; i++) {
                        if (b.kind == ZRC_DENSE)
                                cat_record(cl, &dt, idx[i],
                                           (const uint8_t *)b.data + i * b.record_bytes,
                                           b.record_bytes, NULL, 0, false, &first);
                        else
                                cat_record(cl, &dt, idx[i], b.payloads[i], b.lengths[i],
                                           b.shapes + i * b.ndim, b.ndim, true, &first);
                }
                done += k;
        }
        if (cl->json)
                printf("]}\n");
        zrc_dataset_close(d);
        return ZRECORD_EXIT_OK;
}

/* ---- import ------------------------------------------------------------ */

static int read_at(int fd, void *buf, uint64_t len, uint64_t off) {
        uint8_t *p = buf;

        while (len > 0) {
                ssize_t n = pread(fd, p, len, (off_t)off);

                if (n < 0 && errno == EINTR)
                        continue;
                if (n <= 0)
                        return n < 0 ? -errno : -EIO;
                p += n;
                len -= (uint64_t)n;
                off += (uint64_t)n;
        }
        return 0;
}

/* Trains a dictionary on records spread evenly over the file. */
static int import_train(const cmdline *cl, zrc_conn *c, int fd, const npy_header *h,
                        void **ret_dict, size_t *ret_size) {
        uint64_t n = h->records < IMPORT_DICT_SAMPLES ? h->records : IMPORT_DICT_SAMPLES;
        uint64_t *sizes;
        uint8_t *buf;
        int r;

        if (h->record_bytes && n > IMPORT_DICT_SAMPLE_BYTES / h->record_bytes)
                n = IMPORT_DICT_SAMPLE_BYTES / h->record_bytes;
        if (n == 0)
                n = h->records ? 1 : 0;
        sizes = calloc(n ? n : 1, sizeof(*sizes));
        buf = malloc(n * h->record_bytes > 0 ? n * h->record_bytes : 1);
        if (!sizes || !buf) {
                free(sizes);
                free(buf);
                return fail_msg("import: out of memory for dictionary samples");
        }
        for (uint64_t i = 0; i < n; i++) {
                uint64_t rec = h->records / n * i;

                sizes[i] = h->record_bytes;
                r = read_at(fd, buf + i * h->record_bytes, h->record_bytes,
                            h->data_offset + rec * h->record_bytes);
                if (r < 0) {
                        free(sizes);
                        free(buf);
                        return fail_msg("import: reading %s: %s", cl->npy, strerror(-r));
                }
        }
        r = zrc_train_dict(c, cl->dict_tier, buf, sizes, n, ret_dict, ret_size);
        free(sizes);
        free(buf);
        if (r < 0)
                return fail_conn(c, "import: training a dictionary");
        return 0;
}

static void progress(uint64_t done, uint64_t total, uint64_t bytes, bool final) {
        fprintf(stderr, "\rimport: %" PRIu64 "/%" PRIu64 " records (%3u%%), %.1f MiB%s", done,
                total, total ? (unsigned)(done * 100 / total) : 100u,
                (double)bytes / (1024.0 * 1024.0), final ? "\n" : "");
        fflush(stderr);
}

static int cmd_import(const cmdline *cl, zrc_conn *c) {
        uint8_t pre[NPY_PREAMBLE_MAX];
        char err[256] = "";
        uint8_t *hbuf = NULL, *chunk = NULL;
        uint64_t hsize = 0, per, first = 0;
        npy_header h;
        zrc_schema schema;
        zrc_dataset *d = NULL;
        void *dict = NULL;
        size_t dict_size = 0;
        bool tty = isatty(STDERR_FILENO);
        struct stat st;
        ssize_t n;
        int fd, r, ret = ZRECORD_EXIT_FAILED;

        fd = open(cl->npy, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
                return fail_msg("import: %s: %s", cl->npy, strerror(errno));
        n = pread(fd, pre, sizeof(pre), 0);
        if (n < 0) {
                fail_msg("import: reading %s: %s", cl->npy, strerror(errno));
                goto out;
        }
        r = npy_header_size(pre, (size_t)n, &hsize, err, sizeof(err));
        if (r < 0) {
                fail_msg("import: %s: %s", cl->npy, r == -EAGAIN ? "too short for a .npy file" : err);
                goto out;
        }
        hbuf = malloc(hsize);
        if (!hbuf) {
                fail_msg("import: out of memory");
                goto out;
        }
        r = read_at(fd, hbuf, hsize, 0);
        if (r < 0) {
                fail_msg("import: %s: %s", cl->npy, r == -EIO ? ".npy header truncated" : strerror(-r));
                goto out;
        }
        r = npy_header_parse(hbuf, hsize, &h, err, sizeof(err));
        if (r < 0) {
                fail_msg("import: %s: %s", cl->npy, err);
                goto out;
        }
        if (fstat(fd, &st) < 0 || (uint64_t)st.st_size < h.data_offset ||
            (uint64_t)st.st_size - h.data_offset < h.data_bytes) {
                fail_msg("import: %s: data truncated: the header promises %" PRIu64
                         " bytes after offset %" PRIu64,
                         cl->npy, h.data_bytes, h.data_offset);
                goto out;
        }
        r = zrc_schema_dense(&schema, h.descr, h.shape + 1, h.ndim - 1, cl->codec);
        if (r < 0) {
                fail_msg("import: %s: dtype %s cannot be stored", cl->npy, h.descr);
                goto out;
        }
        if (cl->codec == ZRC_CODEC_ZSTD_DICT && import_train(cl, c, fd, &h, &dict, &dict_size))
                goto out;
        if (zrc_dataset_create(c, cl->path, &schema, dict, dict_size, &d) < 0) {
                fail_conn(c, "import");
                goto out;
        }

        per = cl->chunk ? cl->chunk
                        : (h.record_bytes ? CMDLINE_IMPORT_CHUNK_BYTES / h.record_bytes : 1024);
        if (per == 0)
                per = 1;
        if (h.record_bytes && per > (UINT64_C(1) << 40) / h.record_bytes)
                per = (UINT64_C(1) << 40) / h.record_bytes;
        if (per > h.records && h.records > 0)
                per = h.records;
        chunk = malloc(per * h.record_bytes > 0 ? per * h.record_bytes : 1);
        if (!chunk) {
                fail_msg("import: out of memory for a chunk of %" PRIu64 " records", per);
                goto out;
        }
        for (uint64_t done = 0; done < h.records;) {
                uint64_t k = h.records - done < per ? h.records - done : per, f;
                zrc_records rec = {
                        .dtype = h.descr,
                        .item_shape = h.shape + 1,
                        .ndim = h.ndim - 1,
                        .count = k,
                        .data = chunk,
                };

                r = read_at(fd, chunk, k * h.record_bytes, h.data_offset + done * h.record_bytes);
                if (r < 0) {
                        if (tty)
                                fputc('\n', stderr);
                        fail_msg("import: reading %s: %s", cl->npy, strerror(-r));
                        goto out;
                }
                if (zrc_dataset_append(d, &rec, &f) < 0) {
                        if (tty)
                                fputc('\n', stderr);
                        fail_conn(c, "import");
                        fprintf(stderr, "%s: import: %" PRIu64 " of %" PRIu64
                                " records were imported into %s before the failure\n",
                                program, done, h.records, cl->path);
                        goto out;
                }
                if (done == 0)
                        first = f;
                done += k;
                if (tty)
                        progress(done, h.records, done * h.record_bytes, done == h.records);
        }
        if (zrc_dataset_sync(d) < 0) {
                fail_conn(c, "import: sync");
                goto out;
        }
        if (cl->json) {
                printf("{\"path\": ");
                out_json_string(stdout, cl->path);
                printf(", \"source\": ");
                out_json_string(stdout, cl->npy);
                printf(", \"records\": %" PRIu64 ", \"first\": %" PRIu64 ", \"length\": %" PRIu64
                       ", ",
                       h.records, first, zrc_dataset_length(d));
                print_schema_json(zrc_dataset_schema(d));
                printf(", \"dict_bytes\": %zu}\n", dict_size);
        } else {
                printf("imported %" PRIu64 " records of %s ", h.records, h.descr);
                out_shape(stdout, h.shape + 1, h.ndim - 1, false);
                printf(" from %s into %s (%s)\n", cl->npy, cl->path, zrc_codec_name(cl->codec));
        }
        ret = ZRECORD_EXIT_OK;
out:
        zrc_dataset_close(d);
        free(dict);
        free(chunk);
        free(hbuf);
        close(fd);
        return ret;
}

/* ---- main -------------------------------------------------------------- */

int main(int argc, char **argv) {
        static int (*const commands[_CMD_MAX])(const cmdline *, zrc_conn *) = {
                [CMD_STATUS] = cmd_status,   [CMD_INFO] = cmd_info,
                [CMD_STATS] = cmd_stats,     [CMD_VERIFY] = cmd_verify,
                [CMD_COMPACT] = cmd_compact, [CMD_IMPORT] = cmd_import,
                [CMD_CAT] = cmd_cat,
        };
        zrc_conn *c = NULL;
        cmdline cl;
        int r;

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
        r = connect_or_exit(&cl, &c);
        if (r == 0) {
                r = commands[cl.cmd](&cl, c);
                zrc_disconnect(c);
        }
        if (fflush(stdout) != 0 && r == ZRECORD_EXIT_OK)
                r = ZRECORD_EXIT_FAILED;
        cmdline_done(&cl);
        return r;
}
