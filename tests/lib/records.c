/* records.c: the store tests' records (records.h). */
#include "records.h"

#include <stdio.h>
#include <stdlib.h>
#include <zdict.h>

#include "util.h"

static const char TEMPLATE[] = "zrecord test record: every record carries its id; "
                               "a template shared by all records gives the codecs and the "
                               "dictionary something to find.";

void tl_record_fill(uint8_t *dst, uint64_t id, size_t len) {
        uint64_t h = 0;

        for (size_t i = 0; i < 8 && i < len; i++)
                dst[i] = (uint8_t)(id >> (8 * i));
        for (size_t j = 8; j < len; j++) {
                if ((j - 8) % 32 == 0)
                        h = tl_mix64(id * 131 + j);
                dst[j] = (uint8_t)(TEMPLATE[(j + id) % (sizeof(TEMPLATE) - 1)] + (h & 3));
                h >>= 2;
        }
}

uint64_t tl_record_id(const uint8_t *p, size_t len) {
        uint64_t id = 0;

        if (len < 8)
                return 0;
        for (int b = 0; b < 8; b++)
                id |= (uint64_t)p[b] << (8 * b);
        return id;
}

size_t tl_distinct(const uint64_t *a, size_t n, uint64_t *out) {
        size_t k = 0;

        for (size_t i = 0; i < n; i++) {
                size_t j = 0;
                while (j < k && out[j] != a[i])
                        j++;
                if (j == k)
                        out[k++] = a[i];
        }
        return k;
}

static int cmp_desc(const void *a, const void *b) {
        uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

        return x < y ? 1 : x > y ? -1 : 0;
}

size_t tl_swap_last(uint64_t *ids, size_t count, const uint64_t *del, size_t n) {
        uint64_t *d = malloc((n ? n : 1) * sizeof(*d));
        size_t k;

        if (!d)
                abort();
        k = tl_distinct(del, n, d);
        qsort(d, k, sizeof(*d), cmp_desc);
        for (size_t i = 0; i < k; i++)
                ids[d[i]] = ids[--count];
        free(d);
        return count;
}

int tl_record_dict(uint64_t first, size_t n, size_t (*len_of)(uint64_t), size_t max_len,
                   size_t capacity, void **ret, size_t *ret_len) {
        size_t *sizes = malloc(n * sizeof(*sizes)), total = 0, r;
        uint8_t *buf = NULL;
        void *dict = malloc(capacity);

        for (size_t i = 0; sizes && i < n; i++) {
                sizes[i] = len_of(first + i);
                if (max_len && sizes[i] > max_len)
                        sizes[i] = max_len;
                total += sizes[i];
        }
        if (sizes)
                buf = malloc(total);
        if (!sizes || !buf || !dict) {
                fprintf(stderr, "tl_record_dict: out of memory\n");
                free(sizes);
                free(buf);
                free(dict);
                return -1;
        }
        for (size_t i = 0, off = 0; i < n; off += sizes[i], i++)
                tl_record_fill(buf + off, first + i, sizes[i]);
        r = ZDICT_trainFromBuffer(dict, capacity, buf, sizes, (unsigned)n);
        free(buf);
        free(sizes);
        if (ZDICT_isError(r)) {
                fprintf(stderr, "ZDICT_trainFromBuffer: %s\n", ZDICT_getErrorName(r));
                free(dict);
                return -1;
        }
        *ret = dict;
        *ret_len = r;
        return 0;
}

uint32_t tl_shaped_dims(uint64_t id, uint64_t *dims) {
        static const uint64_t rest[2] = { 2, 3 };
        uint32_t nd = 1 + (uint32_t)(id % 3);

        dims[0] = 1 + id % 5;
        for (uint32_t k = 1; k < nd; k++)
                dims[k] = rest[k - 1];
        return nd;
}

uint64_t tl_shaped_items(uint64_t id) {
        uint64_t dims[3], n = 1;
        uint32_t nd = tl_shaped_dims(id, dims);

        for (uint32_t k = 0; k < nd; k++)
                n *= dims[k];
        return n;
}
