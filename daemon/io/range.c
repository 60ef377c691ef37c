/* range.c: sorting, merging and measuring byte ranges (see range.h).
 *
 * It knows nothing about what reads the ranges: the I/O queue merges a batch
 * with it before splitting it into reads, and the store's walks merge their
 * hints with it.
 */
#include "io/range.h"

#include <stdlib.h>

static int cmp_range(const void *a, const void *b) {
        const zr_io_range *x = a, *y = b;
        if (x->fd != y->fd)
                return x->fd < y->fd ? -1 : 1;
        if (x->offset != y->offset)
                return x->offset < y->offset ? -1 : 1;
        return x->length < y->length ? -1 : x->length > y->length;
}

size_t zr_io_ranges_merge(zr_io_range *r, size_t n) {
        size_t out = 0;

        if (n > 1)
                qsort(r, n, sizeof(*r), cmp_range);
        for (size_t i = 0; i < n; i++) {
                if (r[i].length == 0)
                        continue;
                if (out > 0) {
                        zr_io_range *last = &r[out - 1];
                        uint64_t end = last->offset + last->length;
                        if (last->fd == r[i].fd && r[i].offset <= end) {
                                uint64_t e = r[i].offset + r[i].length;
                                if (e > end)
                                        last->length = e - last->offset;
                                continue;
                        }
                }
                r[out++] = r[i];
        }
        return out;
}

uint64_t zr_io_ranges_pieces(const zr_io_range *r, size_t n, uint64_t max) {
        uint64_t pieces = 0;
        for (size_t i = 0; i < n; i++)
                pieces += r[i].length / max + (r[i].length % max != 0);
        return pieces;
}

int zr_io_ranges_valid(const zr_io_range *r, size_t n) {
        for (size_t i = 0; i < n; i++)
                if (r[i].offset > (uint64_t)INT64_MAX ||
                    r[i].length > (uint64_t)INT64_MAX - r[i].offset)
                        return 0;
        return 1;
}
