/* cat.c: `zrecord cat`, records printed as numbers by dtype or as hex.
 *
 * Reads the records in batches of CAT_BATCH_RECORDS through one dataset read
 * buffer, so memory stays bounded whatever the range, and prints each record
 * flattened in C order (ragged records with their shape). Output is text, or
 * one JSON document with --json.
 */
#include <inttypes.h>
#include <stdio.h>

#include "output.h"
#include "tool.h"

/* Records per READ of `cat`: bounds the read buffer and the reply's frame. */
#define CAT_BATCH_RECORDS 1024

void tool_print_values(const out_dtype *dt, const uint8_t *p, uint64_t len, bool json, bool hex) {
        uint64_t n = dt->itemsize ? len / dt->itemsize : 0;

        if (json && hex) {
                printf("\"hex\": \"");
                out_hex(stdout, p, len, 0);
                printf("\"");
        } else if (json) {
                printf("\"values\": [");
                for (uint64_t i = 0; i < n; i++) {
                        if (i)
                                fputs(", ", stdout);
                        out_value(stdout, dt, p + i * dt->itemsize, true);
                }
                printf("]");
        } else if (hex) {
                fputc(' ', stdout);
                out_hex(stdout, p, len, ' ');
        } else {
                for (uint64_t i = 0; i < n; i++) {
                        fputc(' ', stdout);
                        out_value(stdout, dt, p + i * dt->itemsize, false);
                }
        }
}

static void cat_record(const cmdline *cl, const out_dtype *dt, uint64_t index,
                       const uint8_t *p, uint64_t len, const uint64_t *shape, uint32_t ndim,
                       bool ragged, bool *first) {
        if (cl->json) {
                printf("%s{\"index\": %" PRIu64, *first ? "" : ",\n ", index);
                if (ragged) {
                        printf(", \"shape\": ");
                        out_shape(stdout, shape, ndim, true);
                }
                printf(", ");
                tool_print_values(dt, p, len, true, cl->hex);
                printf("}");
        } else {
                printf("%" PRIu64, index);
                if (ragged) {
                        fputc(' ', stdout);
                        out_shape(stdout, shape, ndim, false);
                }
                fputs(":", stdout);
                tool_print_values(dt, p, len, false, cl->hex);
                fputc('\n', stdout);
        }
        *first = false;
}

int tool_cmd_cat(const cmdline *cl, zrc_conn *c) {
        uint64_t idx[CAT_BATCH_RECORDS], start, end, total;
        const zrc_schema *s;
        zrc_dataset *d;
        out_dtype dt;
        bool first = true;
        int r;

        r = tool_open_dataset(cl, c, 0, "cat", &d);
        if (r)
                return r;
        s = zrc_dataset_schema(d);
        if (out_dtype_parse(s->dtype, &dt) < 0) {
                zrc_dataset_close(d);
                return tool_fail_msg("cat: dtype %s cannot be printed", s->dtype);
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
                tool_print_schema_json(s);
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
                        return tool_fail_conn(c, "cat");
                }
                for (size_t i = 0; i < k; i++) {
                        if (b.kind == ZRC_DENSE)
                                cat_record(cl, &dt, idx[i],
                                           (const uint8_t *)b.data + i * b.record_bytes,
                                           b.record_bytes, NULL, 0, false, &first);
                        else
                                cat_record(cl, &dt, idx[i], b.payloads[i], b.lengths[i],
                                           b.shapes + b.shape_at[i], b.ndims[i], true, &first);
                }
                done += k;
        }
        if (cl->json)
                printf("]}\n");
        zrc_dataset_close(d);
        return ZRECORD_EXIT_OK;
}

