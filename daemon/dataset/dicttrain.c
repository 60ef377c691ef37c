/* dicttrain.c: dictionary training on a strided byte-budget sample (dicttrain.h).
 *
 * The sample is built in one buffer of at most the tier's budget: m records at
 * evenly spread indices floor(k·n/m), m chosen so that their (capped) sizes add up
 * to about the budget. Records are taken whole up to ZR_DICT_SAMPLE_CAP, a middle
 * slice beyond. ZDICT_trainFromBuffer() then does the work. Nothing here writes
 * a store; installing the dictionary is the caller's (zr_dataset_install_dict()).
 */
#include "dataset/dicttrain.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <zdict.h>

/* Chosen from bench/dict-tiers.c --sweep (docs/DATASETS.md, "Tiers"). small:
 * most of what a dictionary gives token-like data, trains in well under a
 * second. balanced: 80-90 % of max's ratio on small image records at half its training time and
 * footprint. max: past 256 KiB the ratio gains under 5 % while training time and
 * level-19 compression time double, and ZDICT's output gets erratic. Samples are
 * 128 times the dictionary (zstd advises about 100). */
static const zr_dict_tier_spec tiers[ZR_DICT_TIER_COUNT] = {
        [ZR_DICT_TIER_SMALL] = { "small", 16 * 1024, 2 * 1024 * 1024 },
        [ZR_DICT_TIER_BALANCED] = { "balanced", 128 * 1024, 16 * 1024 * 1024 },
        [ZR_DICT_TIER_MAX] = { "max", 256 * 1024, 32 * 1024 * 1024 },
};

/* Records read from a store per gather while sampling: bounds the scratch memory
 * next to the sample itself. */
#define STORE_GATHER_BYTES ((uint64_t)8 * 1024 * 1024)

const zr_dict_tier_spec *zr_dict_tier_get(enum zr_dict_tier tier) {
        if ((unsigned)tier >= ZR_DICT_TIER_COUNT)
                return NULL;
        return &tiers[tier];
}

int zr_dict_tier_parse(const char *name, enum zr_dict_tier *ret, zr_error *err) {
        for (unsigned t = 0; t < ZR_DICT_TIER_COUNT; t++) {
                if (strcmp(tiers[t].name, name) == 0) {
                        *ret = (enum zr_dict_tier)t;
                        return 0;
                }
        }
        return zr_error_set(err, EINVAL, "dictionary tier \"%.32s\" is unknown (small, "
                            "balanced, max are known)", name);
}

static uint64_t capped(uint64_t len) {
        return len < ZR_DICT_SAMPLE_CAP ? len : ZR_DICT_SAMPLE_CAP;
}

/* How many records to sample from n whose capped sizes total `total`. */
static uint64_t sample_count(uint64_t n, uint64_t total, uint64_t budget) {
        unsigned __int128 m;

        if (total <= budget)
                return n;
        m = (unsigned __int128)budget * n / total;
        return m < 1 ? 1 : (uint64_t)m;
}

/* The k-th of m indices spread evenly over [0, n). Increasing in k. */
static uint64_t sample_index(uint64_t k, uint64_t m, uint64_t n) {
        return (uint64_t)((unsigned __int128)k * n / m);
}

/* A sample under construction: slices appended to buf, their sizes in sizes. */
typedef struct sample {
        uint8_t *buf;
        size_t *sizes;
        size_t used, count, budget;
} sample;

/* Appends the (middle slice of the) record at rec, len bytes. Returns 0 when the
 * budget is full and the caller may stop, 1 to go on. */
static int sample_add(sample *s, const uint8_t *rec, uint64_t len) {
        uint64_t take = capped(len), off;

        if (take == 0)
                return 1;
        if (take > s->budget - s->used)
                return 0;
        off = ((len - take) / 2) & ~(uint64_t)7;
        memcpy(s->buf + s->used, rec + off, take);
        s->sizes[s->count++] = take;
        s->used += take;
        return s->used < s->budget;
}

static int sample_init(sample *s, uint64_t m, size_t budget, zr_error *err) {
        memset(s, 0, sizeof(*s));
        s->budget = budget;
        s->buf = malloc(budget ? budget : 1);
        s->sizes = malloc((m ? m : 1) * sizeof(size_t));
        if (!s->buf || !s->sizes) {
                free(s->buf);
                free(s->sizes);
                return zr_error_errno(err, ENOMEM, "allocating the training sample");
        }
        return 0;
}

static void sample_done(sample *s) {
        free(s->buf);
        free(s->sizes);
}

static int sample_train(const sample *s, size_t dict_bytes, void **ret, size_t *ret_len,
                        zr_error *err) {
        void *dict;
        size_t r;

        if (s->count == 0)
                return zr_error_set(err, EINVAL, "no record bytes to train a dictionary on");
        if (s->count > UINT32_MAX)
                return zr_error_set(err, EINVAL, "too many samples");
        dict = malloc(dict_bytes);
        if (!dict)
                return zr_error_errno(err, ENOMEM, "allocating the dictionary");
        r = ZDICT_trainFromBuffer(dict, dict_bytes, s->buf, s->sizes, (unsigned)s->count);
        if (ZDICT_isError(r)) {
                free(dict);
                return zr_error_set(err, EINVAL, "dictionary training failed on %zu samples "
                                    "of %zu bytes: %s", s->count, s->used,
                                    ZDICT_getErrorName(r));
        }
        *ret = dict;
        *ret_len = r;
        return 0;
}

int zr_dict_train(const void *data, const uint64_t *lens, size_t n,
                  const zr_dict_tier_spec *spec, void **ret, size_t *ret_len, zr_error *err) {
        const uint8_t *p = data;
        uint64_t total = 0, m, k = 0, next;
        sample s;
        int r;

        for (size_t i = 0; i < n; i++)
                total += capped(lens[i]);
        m = sample_count(n, total, spec->sample_bytes);
        r = sample_init(&s, m, total < spec->sample_bytes ? total : spec->sample_bytes, err);
        if (r < 0)
                return r;
        next = m ? sample_index(0, m, n) : n;
        for (size_t i = 0; i < n && k < m; i++) {
                if (i == next) {
                        if (!sample_add(&s, p, lens[i]))
                                break;
                        k++;
                        next = k < m ? sample_index(k, m, n) : n;
                }
                p += lens[i];
        }
        r = sample_train(&s, spec->dict_bytes, ret, ret_len, err);
        sample_done(&s);
        return r;
}

int zr_dict_train_dense(const void *data, uint64_t record_bytes, size_t n,
                        const zr_dict_tier_spec *spec, void **ret, size_t *ret_len,
                        zr_error *err) {
        const uint8_t *p = data;
        uint64_t total = capped(record_bytes) * n, m;
        sample s;
        int r;

        m = sample_count(n, total, spec->sample_bytes);
        r = sample_init(&s, m, total < spec->sample_bytes ? total : spec->sample_bytes, err);
        if (r < 0)
                return r;
        for (uint64_t k = 0; k < m; k++)
                if (!sample_add(&s, p + sample_index(k, m, n) * record_bytes, record_bytes))
                        break;
        r = sample_train(&s, spec->dict_bytes, ret, ret_len, err);
        sample_done(&s);
        return r;
}

int zr_dict_train_dataset(zr_dataset *ds, const zr_dict_tier_spec *spec, void **ret,
                          size_t *ret_len, zr_error *err) {
        zr_store *st = zr_dataset_store(ds);
        uint64_t n = zr_store_length(st), m, total = 0;
        uint64_t *idx = NULL;
        zr_loc *locs = NULL;
        uint8_t *scratch = NULL;
        uint64_t scratch_size = 0;
        zr_stats stats;
        sample s = {0};
        int r;

        r = zr_store_stats(st, &stats, err);
        if (r < 0)
                return r;
        /* Estimate the capped total from the mean record size; the budget check
         * in sample_add() holds the line whatever the real sizes are. */
        if (n > 0)
                total = capped(stats.logic_bytes / n) * n;
        m = sample_count(n, total, spec->sample_bytes);
        if (m == 0)
                return zr_error_set(err, EINVAL, "no records to train a dictionary on");
        idx = malloc(m * sizeof(uint64_t));
        locs = malloc(m * sizeof(zr_loc));
        if (!idx || !locs) {
                r = zr_error_errno(err, ENOMEM, "sampling %llu records", (unsigned long long)m);
                goto out;
        }
        for (uint64_t k = 0; k < m; k++)
                idx[k] = sample_index(k, m, n);
        r = zr_store_locate(st, idx, m, locs, err);
        if (r < 0)
                goto out;
        /* The capped sizes of all records add up to at most logic_bytes. */
        r = sample_init(&s, m, stats.logic_bytes < spec->sample_bytes ? stats.logic_bytes
                                                                       : spec->sample_bytes, err);
        if (r < 0)
                goto out;
        /* Gather groups of records of at most STORE_GATHER_BYTES (a bigger record
         * alone), then copy their slices into the sample. */
        for (uint64_t k = 0; k < m;) {
                uint64_t end = k, bytes = 0, at = 0;
                int more = 1;
                while (end < m && (end == k || bytes + locs[end].logic_length <= STORE_GATHER_BYTES))
                        bytes += locs[end++].logic_length;
                if (bytes > scratch_size) {
                        uint8_t *p = realloc(scratch, bytes);
                        if (!p) {
                                r = zr_error_errno(err, ENOMEM, "sampling records");
                                goto out;
                        }
                        scratch = p;
                        scratch_size = bytes;
                }
                r = zr_store_gather(st, idx + k, end - k, scratch, scratch_size, NULL, err);
                if (r < 0)
                        goto out;
                for (uint64_t j = k; j < end && more; j++) {
                        more = sample_add(&s, scratch + at, locs[j].logic_length);
                        at += locs[j].logic_length;
                }
                if (!more)
                        break;
                k = end;
        }
        r = sample_train(&s, spec->dict_bytes, ret, ret_len, err);
out:
        sample_done(&s);
        free(scratch);
        free(locs);
        free(idx);
        return r;
}
