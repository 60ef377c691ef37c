/* records.h: the store tests' records. Record `id` of any length is a pure
 * function of (id, length): its id in the first 8 bytes (little-endian, as
 * many as fit), then a shared text template with per-record noise, so every
 * codec has something to compress and a dictionary has something to learn. A
 * record read back names itself and can be checked bit for bit.
 */
#ifndef ZR_TESTS_LIB_RECORDS_H
#define ZR_TESTS_LIB_RECORDS_H

#include <stddef.h>
#include <stdint.h>

/* Writes record id, len bytes, to dst. */
void tl_record_fill(uint8_t *dst, uint64_t id, size_t len);

/* The id a record's first 8 bytes carry (0 if it is shorter). */
uint64_t tl_record_id(const uint8_t *p, size_t len);

/* The shape of ragged test record `id`, for the tests of records whose ndim
 * differs within one store: ndim 1 + id % 3, dims (1 + id % 5, 2, 3)[..ndim].
 * dims has room for 3; returns the ndim. */
uint32_t tl_shaped_dims(uint64_t id, uint64_t *dims);

/* Elements of that shape (the product of its dims). */
uint64_t tl_shaped_items(uint64_t id);

/* The distinct entries of a[0..n) in their first order, into out (room for
 * n; may not be a). Returns their count. */
size_t tl_distinct(const uint64_t *a, size_t n, uint64_t *out);

/* The delete model of every store: ids[0..count) after a swap-last delete of
 * the positions del[0..n) (each < count; repeats count once), in place: each
 * hole, in descending order, takes the current last entry. Returns the new
 * count. */
size_t tl_swap_last(uint64_t *ids, size_t count, const uint64_t *del, size_t n);

/* Trains a zstd dictionary of at most `capacity` bytes on the n records
 * first, first + 1, ..., of lengths len_of(id), each cut to max_len (0: not
 * cut). 0 with a malloc()ed dictionary, or -1 with the reason on stderr. */
int tl_record_dict(uint64_t first, size_t n, size_t (*len_of)(uint64_t), size_t max_len,
                   size_t capacity, void **ret, size_t *ret_len);

#endif
