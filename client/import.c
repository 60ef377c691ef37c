/* import.c: `zrecord import FILE.npy PATH`, a .npy array into a new dataset.
 *
 * The file's header is parsed (npy.c) and its size checked before anything
 * else, so a bad file is reported without a daemon. Then, for zstd_dict, the
 * daemon trains a dictionary on records spread evenly over the file; the
 * dataset is created (dense: dtype and item shape from the header) and the
 * data streamed into it in appends of --chunk records, each read from the file
 * into one bounded buffer, with a progress line on a terminal. Finally the
 * store is synced. All or nothing: the store is built beside PATH and renamed
 * onto it at the end (staging.h), so a failure, Ctrl-C or a kill leaves PATH as
 * it was; Ctrl-C stops the request under way at once (interrupt.h).
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "interrupt.h"
#include "npy.h"
#include "output.h"
#include "staging.h"
#include "tool.h"

/* zstd_dict import: the dictionary is trained on at most this many records,
 * spread evenly over the file, and at most this many bytes of them. */
#define IMPORT_DICT_SAMPLES 4096
#define IMPORT_DICT_SAMPLE_BYTES (UINT64_C(64) << 20)

static int read_at(int fd, void *buf, uint64_t len, uint64_t off) {
        uint8_t *p = buf;

        while (len > 0) {
                ssize_t n = pread(fd, p, len, (off_t)off);

                if (n < 0 && errno == EINTR && !interrupt_caught())
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
                return tool_fail_msg("import: out of memory for dictionary samples");
        }
        for (uint64_t i = 0; i < n; i++) {
                uint64_t rec = h->records / n * i;

                sizes[i] = h->record_bytes;
                r = interrupt_caught() ? -EINTR
                                       : read_at(fd, buf + i * h->record_bytes, h->record_bytes,
                                                 h->data_offset + rec * h->record_bytes);
                if (r < 0) {
                        free(sizes);
                        free(buf);
                        return tool_fail_msg("import: reading %s: %s", cl->npy, strerror(-r));
                }
        }
        r = zrc_train_dict(c, cl->dict_tier, buf, sizes, n, ret_dict, ret_size);
        free(sizes);
        free(buf);
        if (r < 0)
                return interrupt_caught() ? ZRECORD_EXIT_FAILED
                                          : tool_fail_conn(c, "import: training a dictionary");
        return 0;
}

static void progress(uint64_t done, uint64_t total, uint64_t bytes, bool final) {
        fprintf(stderr, "\rimport: %" PRIu64 "/%" PRIu64 " records (%3u%%), %.1f MiB%s", done,
                total, total ? (unsigned)(done * 100 / total) : 100u,
                (double)bytes / (1024.0 * 1024.0), final ? "\n" : "");
        fflush(stderr);
}

int tool_cmd_import(const cmdline *cl) {
        uint8_t pre[NPY_PREAMBLE_MAX];
        char err[256] = "", serr[PATH_MAX + 128] = "";
        tool_staging stage = { .lockfd = -1 };
        uint8_t *hbuf = NULL, *chunk = NULL;
        uint64_t hsize = 0, per, first = 0;
        npy_header h;
        zrc_schema schema;
        zrc_conn *c = NULL;
        zrc_dataset *d = NULL;
        void *dict = NULL;
        size_t dict_size = 0;
        bool tty = isatty(STDERR_FILENO);
        struct stat st;
        ssize_t n;
        int fd, r, ret = ZRECORD_EXIT_FAILED;

        fd = open(cl->npy, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
                return tool_fail_msg("import: %s: %s", cl->npy, strerror(errno));
        n = pread(fd, pre, sizeof(pre), 0);
        if (n < 0) {
                tool_fail_msg("import: reading %s: %s", cl->npy, strerror(errno));
                goto out;
        }
        r = npy_header_size(pre, (size_t)n, &hsize, err, sizeof(err));
        if (r < 0) {
                tool_fail_msg("import: %s: %s", cl->npy, r == -EAGAIN ? "too short for a .npy file" : err);
                goto out;
        }
        hbuf = malloc(hsize);
        if (!hbuf) {
                tool_fail_msg("import: out of memory");
                goto out;
        }
        r = read_at(fd, hbuf, hsize, 0);
        if (r < 0) {
                tool_fail_msg("import: %s: %s", cl->npy, r == -EIO ? ".npy header truncated" : strerror(-r));
                goto out;
        }
        r = npy_header_parse(hbuf, hsize, &h, err, sizeof(err));
        if (r < 0) {
                tool_fail_msg("import: %s: %s", cl->npy, err);
                goto out;
        }
        if (fstat(fd, &st) < 0 || (uint64_t)st.st_size < h.data_offset ||
            (uint64_t)st.st_size - h.data_offset < h.data_bytes) {
                tool_fail_msg("import: %s: data truncated: the header promises %" PRIu64
                         " bytes after offset %" PRIu64,
                         cl->npy, h.data_bytes, h.data_offset);
                goto out;
        }
        r = zrc_schema_dense(&schema, h.descr, h.shape + 1, h.ndim - 1, cl->codec);
        if (r < 0) {
                tool_fail_msg("import: %s: dtype %s cannot be stored", cl->npy, h.descr);
                goto out;
        }

        /* the file is good: now the daemon, building beside PATH */
        interrupt_arm(NULL);
        if (staging_begin(&stage, cl->path, serr, sizeof(serr)) < 0) {
                tool_fail_msg("import: %s", serr);
                goto out;
        }
        ret = tool_connect(cl, &c);
        if (ret != 0)
                goto out;
        ret = ZRECORD_EXIT_FAILED;
        interrupt_connection(c);
        if (cl->codec == ZRC_CODEC_ZSTD_DICT && import_train(cl, c, fd, &h, &dict, &dict_size))
                goto out;
        if (zrc_dataset_create(c, stage.path, &schema, dict, dict_size, &d) < 0) {
                if (!interrupt_caught())
                        tool_fail_conn(c, "import");
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
                tool_fail_msg("import: out of memory for a chunk of %" PRIu64 " records", per);
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
                        .level = cl->level,
                };

                r = read_at(fd, chunk, k * h.record_bytes, h.data_offset + done * h.record_bytes);
                if (r < 0 || interrupt_caught()) {
                        if (tty)
                                fputc('\n', stderr);
                        if (!interrupt_caught())
                                tool_fail_msg("import: reading %s: %s", cl->npy, strerror(-r));
                        goto out;
                }
                if (zrc_dataset_append(d, &rec, &f) < 0) {
                        if (tty)
                                fputc('\n', stderr);
                        if (!interrupt_caught())
                                tool_fail_conn(c, "import");
                        goto out;
                }
                if (done == 0)
                        first = f;
                done += k;
                if (tty)
                        progress(done, h.records, done * h.record_bytes, done == h.records);
        }
        if (zrc_dataset_sync(d) < 0) {
                if (!interrupt_caught())
                        tool_fail_conn(c, "import: sync");
                goto out;
        }
        if (interrupt_caught())
                goto out;
        /* the point of no return: the synced store becomes PATH */
        if (staging_commit(&stage, serr, sizeof(serr)) < 0) {
                tool_fail_msg("import: %s", serr);
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
                tool_print_schema_json(zrc_dataset_schema(d));
                printf(", \"dict_bytes\": %zu}\n", dict_size);
        } else {
                printf("imported %" PRIu64 " records of %s ", h.records, h.descr);
                out_shape(stdout, h.shape + 1, h.ndim - 1, false);
                printf(" from %s into %s (%s)\n", cl->npy, cl->path, zrc_codec_name(cl->codec));
        }
        ret = ZRECORD_EXIT_OK;
out:
        zrc_dataset_close(d);
        interrupt_connection(NULL);
        zrc_disconnect(c);
        if (ret != ZRECORD_EXIT_OK) {
                if (interrupt_caught()) {
                        if (tty)
                                fputc('\n', stderr);
                        tool_fail_msg("import: interrupted (signal %d)", interrupt_caught());
                }
                if (!staging_abort(&stage))
                        tool_fail_msg("import: %s is left beside %s: the next import or convert "
                                      "into %s removes it", stage.root, cl->path, cl->path);
                else if (stage.target[0])
                        tool_fail_msg("import: nothing was written to %s", cl->path);
        }
        free(dict);
        free(chunk);
        free(hbuf);
        close(fd);
        return ret;
}

