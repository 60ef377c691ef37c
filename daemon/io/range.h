/* range.h: a byte range of an open file, the unit of the I/O layer.
 *
 * The store turns records into ranges of its chunk files
 * (zr_store_io_ranges()); the I/O queue reads them (ioq.h) and the walks of
 * verify and compaction hint them to the kernel (hint.h). A range names a
 * descriptor, not a file: it is valid only while that descriptor is open and
 * still names the same file, which the owner of the descriptor guarantees.
 */
#ifndef ZR_IO_RANGE_H
#define ZR_IO_RANGE_H

#include <stddef.h>
#include <stdint.h>

typedef struct zr_io_range {
        int fd;          /* an open, seekable file */
        uint64_t offset; /* first byte */
        uint64_t length; /* bytes; 0 is an empty range */
} zr_io_range;

/* Sorts r[0..n) by (fd, offset), merges the ranges of one descriptor that
 * overlap or touch into one, and drops empty ranges. Returns the new count
 * (at most n); r[0..count) holds the result, disjoint and in order. In place,
 * no allocation (the sort is qsort). */
size_t zr_io_ranges_merge(zr_io_range *r, size_t n);

/* Number of pieces of at most `max` bytes (max > 0) that r[0..n) splits into:
 * sum over i of ceil(length / max). */
uint64_t zr_io_ranges_pieces(const zr_io_range *r, size_t n, uint64_t max);

/* 1 if offset + length of every range fits in an off_t (no overflow), else 0. */
int zr_io_ranges_valid(const zr_io_range *r, size_t n);

#endif
