/* hint.h: read-ahead hints for passes that walk a file sequentially.
 *
 * The store's chunk files are read at random (POSIX_FADV_RANDOM, MADV_RANDOM:
 * no read-around), so a sequential pass (verify, compaction) asks for its
 * large reads explicitly: it hints the ranges it is about to walk and the
 * kernel reads them asynchronously, many requests deep, while the pass
 * consumes the ones that arrived.
 */
#ifndef ZR_IO_HINT_H
#define ZR_IO_HINT_H

#include <stddef.h>

#include "io/range.h"

/* Bytes per POSIX_FADV_WILLNEED call. The kernel reads at most one read-ahead
 * window (max(read_ahead_kb, the device's optimal I/O size)) per call and
 * drops the rest of the range: measured on Linux 6.18 with read_ahead_kb 8192,
 * one WILLNEED over 64 MiB read 8 MiB, and the same range hinted in 128 KiB
 * pieces read all 64 MiB. 128 KiB is the default read_ahead_kb, the smallest
 * window a block device has in practice, so the hints are never cut short. */
#define ZR_IO_HINT_PIECE ((uint64_t)128 << 10)

/* Asks the kernel to start reading r[0..n) into the page cache (WILLNEED, in
 * pieces of ZR_IO_HINT_PIECE), without waiting for the data. Returns 0 or the
 * first error as a negative errno (EBADF, ESPIPE, EINVAL); a hint that fails
 * changes nothing, so callers that only want speed may ignore it. */
int zr_io_willneed(const zr_io_range *r, size_t n);

#endif
