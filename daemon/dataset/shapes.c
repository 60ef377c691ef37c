/* shapes.c: the per-record shape table (shapes.h).
 *
 * Dims live back to back in one growing array; a record names its slice of it. A
 * delete moves the last record's slice reference into the hole, so the dims of
 * deleted or truncated records stay in the array as garbage until the table is
 * rebuilt (decoded again from the file) or emptied.
 */
#include "dataset/shapes.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "dataset/schema.h"

struct zr_shapes {
        uint64_t *dims;     /* every record's dims, back to back (with garbage) */
        uint64_t ndims;     /* used entries of dims */
        uint64_t dims_cap;
        uint64_t *start;    /* record i's dims: dims[start[i] .. start[i] + ndim[i]) */
        uint8_t *ndim;
        uint64_t count;
        uint64_t cap;
};

int zr_shapes_new(zr_shapes **ret, zr_error *err) {
        zr_shapes *t = calloc(1, sizeof(*t));

        if (!t)
                return zr_error_errno(err, ENOMEM, "shape table");
        *ret = t;
        return 0;
}

void zr_shapes_free(zr_shapes *t) {
        if (!t)
                return;
        free(t->dims);
        free(t->start);
        free(t->ndim);
        free(t);
}

uint64_t zr_shapes_count(const zr_shapes *t) {
        return t->count;
}

int zr_shapes_get(const zr_shapes *t, uint64_t i, uint32_t *ret_ndim, const uint64_t **ret_dims,
                  zr_error *err) {
        if (i >= t->count)
                return zr_error_set(err, ZR_E_RANGE, "record %llu has no shape: the table holds "
                                    "%llu", (unsigned long long)i, (unsigned long long)t->count);
        *ret_ndim = t->ndim[i];
        *ret_dims = t->dims + t->start[i];
        return 0;
}

/* Grows *p (elements of `size` bytes, capacity *cap) to hold `need`. */
static int grow(void **p, uint64_t *cap, uint64_t need, size_t size) {
        uint64_t n = *cap ? *cap : 64;
        void *q;

        if (need <= *cap)
                return 0;
        while (n < need)
                n *= 2;
        if (n > SIZE_MAX / size)
                return -ENOMEM;
        q = realloc(*p, n * size);
        if (!q)
                return -ENOMEM;
        *p = q;
        *cap = n;
        return 0;
}

int zr_shapes_append(zr_shapes *t, const uint64_t *dims, uint32_t ndim, zr_error *err) {
        uint64_t rcap = t->cap;

        if (ndim < 1 || ndim > ZR_SCHEMA_NDIM_MAX)
                return zr_error_set(err, ZR_E_SCHEMA, "a record shape of %u dimensions (1..%d "
                                    "are allowed)", ndim, ZR_SCHEMA_NDIM_MAX);
        if (grow((void **)&t->dims, &t->dims_cap, t->ndims + ndim, sizeof(uint64_t)) < 0 ||
            grow((void **)&t->start, &rcap, t->count + 1, sizeof(uint64_t)) < 0)
                return zr_error_errno(err, ENOMEM, "shape table of %llu records",
                                      (unsigned long long)t->count + 1);
        rcap = t->cap;
        if (grow((void **)&t->ndim, &rcap, t->count + 1, sizeof(uint8_t)) < 0)
                return zr_error_errno(err, ENOMEM, "shape table of %llu records",
                                      (unsigned long long)t->count + 1);
        t->cap = rcap;
        memcpy(t->dims + t->ndims, dims, ndim * sizeof(uint64_t));
        t->start[t->count] = t->ndims;
        t->ndim[t->count] = (uint8_t)ndim;
        t->ndims += ndim;
        t->count++;
        return 0;
}

static int cmp_desc(const void *a, const void *b) {
        uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

        return (x < y) - (x > y);
}

int zr_shapes_delete(zr_shapes *t, const uint64_t *idx, size_t n, zr_error *err) {
        uint64_t *order;

        for (size_t i = 0; i < n; i++)
                if (idx[i] >= t->count)
                        return zr_error_set(err, ZR_E_RANGE, "delete: index %llu is out of range "
                                            "for %llu records", (unsigned long long)idx[i],
                                            (unsigned long long)t->count);
        if (n == 0)
                return 0;
        order = malloc(n * sizeof(*order));
        if (!order)
                return zr_error_errno(err, ENOMEM, "deleting %zu shapes", n);
        memcpy(order, idx, n * sizeof(*order));
        qsort(order, n, sizeof(*order), cmp_desc);
        for (size_t i = 0; i < n; i++) {
                uint64_t last = t->count - 1;

                if (i > 0 && order[i] == order[i - 1])
                        continue;
                t->start[order[i]] = t->start[last];
                t->ndim[order[i]] = t->ndim[last];
                t->count = last;
        }
        free(order);
        if (t->count == 0)
                t->ndims = 0;
        return 0;
}

void zr_shapes_truncate(zr_shapes *t, uint64_t count) {
        if (count < t->count)
                t->count = count;
        if (t->count == 0)
                t->ndims = 0;
}

int zr_shapes_uniform(const zr_shapes *t, uint32_t ndim, uint64_t *ret_first_other) {
        for (uint64_t i = 0; i < t->count; i++)
                if (t->ndim[i] != ndim) {
                        if (ret_first_other)
                                *ret_first_other = i;
                        return 0;
                }
        return 1;
}
